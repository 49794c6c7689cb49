"""`attnmt export MODEL --to marian DIR` (issue 96): an attnmt Transformer written as a Hugging Face Marian folder.

Without transformers, on made-up folders (tests/marian_folders.py): what the export of an imported model writes,
which `attnmt import` reads back into the same model; each setting a Marian model cannot express refused in one
line with nothing written; the notes on what transformers does otherwise. With transformers as the oracle (slow):
tiny transformers models (test_marian_parity's, of the real configs and of made-up folders) imported and exported
again translate as the original folder does and as attnmt does; Transformers trained here (a bpe tokenizer; shared,
separate, tied and untied embeddings) translate in transformers as in attnmt, greedily and in beam search."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pytest
import torch
from conftest import tiny_dates_config
from marian_folders import write_marian_folder
from safetensors.torch import load_file

from attnmt import cli
from attnmt.configfile import config_from_dict
from attnmt.corpus.dates import generate_dates
from attnmt.families import build_model
from attnmt.formats.marian import export_marian, import_marian, swap_pad
from attnmt.modelfile import ModelDescription, read_model, save_model
from attnmt.tokenize import SubwordTokenizer, make_tokenizer
from attnmt.training.train import train
from attnmt.translate import Translator
from attnmt.vocab import Tokenization, Vocabulary

# test_marian_parity's tiny transformers models: of the real configs (../shared/models) and the made-up folders.
ROUND_TRIPS = ["opus-mt-en-mg", "opus-mt-tc-big-fr-en", "made-up-shared", "made-up-separate"]
SOURCES = [source for source, _ in generate_dates(100, seed=3)]


@pytest.fixture(scope="module", params=["shared", "separate"])
def folder(request, tmp_path_factory) -> Path:
    return write_marian_folder(tmp_path_factory.mktemp(request.param) / "opus-mt-de-en",
                               separate_vocabs=request.param == "separate")


@pytest.fixture(scope="module")
def imported(folder) -> Path:
    return import_marian(folder, folder.parent / "model.safetensors")


@pytest.fixture(scope="module")
def exported(imported) -> Path:
    out, notes = export_marian(imported, imported.parent / "exported")
    assert notes == []                      # an imported model: nothing transformers would do otherwise
    return out


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """An imported model of one vocabulary: what the refusals and the command's checks start from."""
    root = tmp_path_factory.mktemp("base")
    return import_marian(write_marian_folder(root / "opus-mt-de-en"), root / "model.safetensors")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def by_id(path: Path) -> list[str]:
    ids = read_json(path)
    return sorted(ids, key=ids.get)


# --------------------------------------------------------------------------- what the export writes


def test_the_folder_is_the_imported_one_with_pad_at_zero(folder, exported):
    original, config = read_json(folder / "config.json"), read_json(exported / "config.json")
    for key in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "encoder_ffn_dim",
                "activation_function", "vocab_size", "decoder_vocab_size", "share_encoder_decoder_embeddings",
                "max_position_embeddings", "scale_embedding", "static_position_embeddings", "normalize_before"):
        assert config[key] == original[key], key
    pad = original["pad_token_id"]
    assert (config["pad_token_id"], config["eos_token_id"], config["decoder_start_token_id"]) == (0, pad, 0)
    assert config["tie_word_embeddings"] and config["model_type"] == "marian"
    # generate's settings as the folder had them (no forced </s>), the ids those of attnmt's order
    assert read_json(exported / "generation_config.json") == {
        "pad_token_id": 0, "eos_token_id": pad, "bos_token_id": 0, "decoder_start_token_id": 0,
        "forced_eos_token_id": None, "max_length": 40, "num_beams": 3, "length_penalty": 1.0, "bad_words_ids": [[0]]}
    separate = (folder / "target_vocab.json").is_file()
    assert (exported / "target_vocab.json").is_file() == separate
    for name in ["vocab.json"] + ["target_vocab.json"] * separate:
        assert by_id(exported / name) == swap_pad(by_id(folder / name), pad), name
    for name in ("source.spm", "target.spm"):
        assert (exported / name).read_bytes() == (folder / name).read_bytes()
    tokenizer = read_json(exported / "tokenizer_config.json")
    assert tokenizer == {"source_lang": "de", "target_lang": "en", "separate_vocabs": separate, "eos_token": "</s>",
                         "unk_token": "<unk>", "pad_token": "<pad>", "additional_special_tokens": [],
                         "model_max_length": 128, "tokenizer_class": "MarianTokenizer"}


def test_the_weights_are_the_folders_under_the_same_names(folder, exported):
    theirs, ours = load_file(str(folder / "model.safetensors")), load_file(str(exported / "model.safetensors"))
    assert set(ours) == set(theirs)                        # what save_pretrained writes: no positions, no lm_head
    pad = read_json(folder / "config.json")["pad_token_id"]
    order = torch.arange(len(by_id(folder / "vocab.json")))
    order[0], order[pad] = pad, 0                          # attnmt id -> Marian id
    for name, tensor in theirs.items():
        by_vocabulary = "embed_tokens" in name or "shared" in name or name == "final_logits_bias"
        expected = (tensor[order] if name != "final_logits_bias" else tensor[:, order]) if by_vocabulary else tensor
        assert torch.equal(ours[name], expected), name


def test_the_exported_folder_imports_as_the_model_it_came_from(imported, exported):
    again = import_marian(exported, exported.parent / "again.safetensors")
    (first, first_weights, first_meta), (second, second_weights, second_meta) = read_model(imported), read_model(again)
    assert first_weights.keys() == second_weights.keys()
    assert all(torch.equal(first_weights[name], second_weights[name]) for name in first_weights)
    assert first.tokenization.to_dict() == second.tokenization.to_dict()
    assert (first.config.model, first.config.decode, first.config.tokenizer, first.config.vocab) == (
        second.config.model, second.config.decode, second.config.tokenizer, second.config.vocab)
    assert second_meta["origin"]["forced_eos"] is first_meta["origin"]["forced_eos"] is False


# --------------------------------------------------------------------------- what Marian cannot express


def variant(imported: Path, path: Path, tokenization: Optional[Tokenization] = None, **sections: dict) -> Path:
    """A model file like `imported` with the settings of `sections` changed (a whole model section where it names
    another arch), and random weights of the shapes they make."""
    description = read_model(imported)[0]
    values = description.config.to_dict()
    for section, changes in sections.items():
        values[section] = changes if "arch" in changes else {**values[section], **changes}
    config = config_from_dict(values)
    text = tokenization or description.tokenization
    torch.manual_seed(0)
    network = build_model(config.model, len(text.src_vocab), len(text.tgt_vocab))
    save_model(path, ModelDescription(config, text), network.state_dict())
    return path


def words(level: str) -> Tokenization:
    vocab = Vocabulary(["ein", "Datum"])
    return Tokenization(make_tokenizer(level), make_tokenizer(level), vocab, vocab)


def subwords(imported: Path, lowercase: bool) -> Tokenization:
    """attnmt's own bpe tokenizer on the imported model's sentencepiece model, with its vocabulary."""
    text = read_model(imported)[0].tokenization
    tokenizer = SubwordTokenizer("bpe", text.src_tokenizer.model, lowercase)   # type: ignore[union-attr]
    return Tokenization(tokenizer, tokenizer, text.src_vocab, text.tgt_vocab)


# Each setting a Marian model cannot express: the sections changed (and the tokenization they need), the line's words.
INEXPRESSIBLE = {
    "rnn": ({"model": {"arch": "rnn", "emb_dim": 16, "enc_hidden": 16, "dec_hidden": 16}},
            "model.arch rnn: a Marian model cannot express it (a Marian model is a Transformer: model.arch transformer)"),
    "pre-norm": ({"model": {"norm": "pre"}}, "model.norm pre: a Marian model cannot express it (its layers normalize "
                                              "after each residual sum: model.norm post)"),
    "learned positions": ({"model": {"positions": "learned"}}, "model.positions learned: a Marian model cannot"),
    "interleaved": ({"model": {"sinusoid_layout": "interleaved"}}, "model.sinusoid_layout interleaved: a Marian"),
    "no source eos": ({"model": {"source_eos": False}}, "model.source_eos false: a Marian model cannot express it "
                                                         "(MarianTokenizer ends every source with the end token: "
                                                         "model.source_eos true)"),
    "words": ({"tokenizer": {"level": "word"}}, "tokenizer.level word: a Marian model cannot express it "
                                                 "(MarianTokenizer splits text with sentencepiece models"),
    "characters": ({"tokenizer": {"level": "char"}}, "tokenizer.level char: a Marian model cannot express it"),
    "lowercase": ({"tokenizer": {"level": "bpe", "lowercase": True}},
                  "tokenizer.lowercase true: a Marian model cannot express it (MarianTokenizer does not lowercase"),
}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("case", list(INEXPRESSIBLE))
def test_what_marian_cannot_express_is_one_line_and_writes_nothing(case, shared, tmp_path, capsys):
    sections, expected = INEXPRESSIBLE[case]
    level = sections.get("tokenizer", {}).get("level")
    text = words(level) if level in ("word", "char") else subwords(shared, True) if level else None
    model = variant(shared, tmp_path / "model.safetensors", text, **sections)
    code, printed, err = run(capsys, "export", str(model), str(tmp_path / "marian"), "--to", "marian")
    assert code == 2 and printed == "" and err.count("\n") == 1, err
    assert err.startswith(f"attnmt: error: {model}: ") and expected in err, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.safetensors"]   # not even a hidden folder


def test_the_command_writes_once_and_says_what_transformers_does_otherwise(shared, tmp_path, capsys):
    model = variant(shared, tmp_path / "model.safetensors", subwords(shared, False), tokenizer={"level": "bpe"},
                    decode={"beam_scoring": "gnmt", "max_len_ratio": 2, "max_len_extra": 10, "max_src_len": 100})
    out = tmp_path / "marian"
    code, printed, err = run(capsys, "export", str(model), str(out), "--to", "marian")
    assert (code, printed) == (0, f"Hugging Face Marian model written to {out}\n")
    notes = err.splitlines()
    assert [note.split(":")[1] for note in notes] == [" note"] * 3, err
    assert "decode.beam_scoring gnmt: transformers' generate scores beams its own way" in notes[0]
    assert "decode.max_len_ratio 2: generate has one length limit for every sentence, max_length 212" in notes[1]
    assert "tokenizer.level bpe: attnmt normalizes text before sentencepiece" in notes[2]
    # 2 x 100 + 10 tokens, then the forced </s>, and the start token: attnmt's own model ends at its limit with </s>
    generation, eos = read_json(out / "generation_config.json"), read_model(model)[0].tokenization.tgt_vocab.eos_id
    assert (generation["max_length"], generation["forced_eos_token_id"], generation["num_beams"]) == (212, eos, 3)
    assert read_json(out / "config.json")["max_position_embeddings"] == 212
    code, _, err = run(capsys, "export", str(model), str(out), "--to", "marian")
    assert code == 2 and err == f"attnmt: error: {out} is not empty; use --overwrite to replace it\n"
    (out / "config.json").unlink()
    assert run(capsys, "export", str(model), str(out), "--to", "marian", "--overwrite")[0] == 0
    assert (out / "config.json").is_file()
    code, _, err = run(capsys, "export", str(model), str(tmp_path / "q"), "--to", "marian", "--quantization", "int8")
    assert code == 2 and "--quantization is CTranslate2's" in err and not (tmp_path / "q").exists()


# --------------------------------------------------------------------------- transformers as the oracle


def oracle() -> tuple[ModuleType, ModuleType]:
    """transformers, and test_marian_parity's helpers (the tiny models, generate's outputs), or a skip."""
    transformers = pytest.importorskip("transformers")
    import test_marian_parity
    return transformers, test_marian_parity


def load_marian(transformers: ModuleType, folder: Path) -> tuple[Any, Any]:
    model, loading = transformers.MarianMTModel.from_pretrained(str(folder), output_loading_info=True)
    assert not any(loading[kind] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")), loading
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                   # MarianTokenizer's sacremoses advice
        return model.eval(), transformers.MarianTokenizer.from_pretrained(str(folder))


def check_translations(translator: Translator, marian: tuple[Any, Any], sources: list[str], beam: int,
                       expected: Optional[list[list[int]]] = None) -> None:
    """generate's outputs of `sources` (beam hypotheses) are attnmt's (ids and text) and `expected`, if given;
    except, in beam search, outputs at the length limit: generate scores a forced </s> as certain, attnmt by
    its probability (test_marian_parity)."""
    transformers, parity = oracle()
    model, tokenizer = marian
    vocab = translator.tokenization.src_vocab
    inputs = tokenizer(sources).input_ids
    assert inputs == [vocab.encode(translator.tokenize_source(source)) for source in sources]
    outputs = parity.generated(model, tokenizer, sources, beam)
    assert expected is None or outputs == expected
    limit = translator.max_output_tokens(0)
    start, end = model.generation_config.decoder_start_token_id, model.generation_config.eos_token_id
    compared = 0
    for source, ids, translation in zip(sources, outputs, translator.translate(sources, beam_size=beam), strict=True):
        if beam > 1 and max(len(ids), len(translation.tokens)) >= limit:
            continue
        assert translator.tokenization.tgt_vocab.encode(translation.tokens) == ids, source
        # the text of the whole sequence generate gives, its start token and </s> included, as a user decodes it
        assert translation.text == tokenizer.decode([start, *ids, end], skip_special_tokens=True), source
        compared += 1
    assert compared >= 0.95 * len(sources)


@pytest.fixture(scope="module", params=ROUND_TRIPS)
def round_trip(request, tmp_path_factory) -> tuple[str, Path, Path, Path]:
    """(name, a tiny transformers model's folder, the attnmt model file imported from it, its export)."""
    _, parity = oracle()
    root = tmp_path_factory.mktemp(request.param)
    folder = parity.tiny_marian(request.param, root / "hf")
    model = import_marian(folder, root / "model.safetensors")
    return request.param, folder, model, export_marian(model, root / "exported")[0]


@pytest.fixture(scope="module")
def round_trip_models(round_trip) -> tuple[Translator, tuple[Any, Any], tuple[Any, Any]]:
    """The round trip's three models loaded once: attnmt's import, the original folder, the export."""
    transformers, _ = oracle()
    _, folder, model, exported = round_trip
    return Translator.load(model, "cpu"), load_marian(transformers, folder), load_marian(transformers, exported)


@pytest.mark.slow
def test_a_round_trip_translates_as_the_original_folder(round_trip, round_trip_models):
    """200 sentences, beam 5: transformers translates the export as the folder it was imported from (the
    same outputs, ids through the pad swap), and as attnmt translates the imported file. (Greedy decoding
    of the imported file is test_marian_parity's; the export's weights are the same for either search.)"""
    beam = 5
    _, parity = oracle()
    name, folder, _, _ = round_trip
    translator, original, exported = round_trip_models
    sources = [source for source, _ in parity.sentence_pairs(name, 200)]
    swap = parity.marian_ids(folder)
    expected = [[swap.get(i, i) for i in ids] for ids in parity.generated(*original, sources, beam)]
    check_translations(translator, exported, sources, beam, expected)


def derived(trained: Path, path: Path, kind: str) -> Path:
    """The trained model with untied output weights (`untied`: shared embeddings, lm_head of its own), or
    (`separate`) also two vocabularies, the target's in another order (its rows moved with it)."""
    description, state, _ = read_model(trained)
    generator = torch.Generator().manual_seed(1)
    state = dict(state, **{"classifier.weight": state["classifier.weight"] * (
        1 + 0.1 * torch.randn(state["classifier.weight"].shape, generator=generator))})
    config, text = description.config, description.tokenization
    model = dataclasses.replace(config.model, tie_embeddings=False, share_embeddings=kind != "separate")
    if kind == "separate":
        vocab = text.tgt_vocab
        target = Vocabulary(reversed(vocab.itos[4:]))
        order = torch.tensor([vocab.stoi[token] for token in target.itos])
        state.update({name: state[name][order] for name in ("tgt_embedding.weight", "classifier.weight",
                                                            "classifier.bias")})
        state["src_embedding.weight"] = state["src_embedding.weight"].clone()
        text = Tokenization(text.src_tokenizer, text.tgt_tokenizer, text.src_vocab, target)
        config = dataclasses.replace(config, vocab=dataclasses.replace(config.vocab, joint=False))
    save_model(path, ModelDescription(dataclasses.replace(config, model=model), text), state)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A Transformer trained here that a Marian model can express: post-norm, sinusoids in halves, </s> after
    each source, a joint bpe tokenizer and vocabulary, all three embedding matrices one; transformers' beam rules."""
    root = tmp_path_factory.mktemp("trained")
    values = tiny_dates_config(root / "run", arch="transformer", emb_dim=32, heads=4, ff_dim=64, enc_layers=2,
                               dec_layers=2, norm="post", sinusoid_layout="halves", source_eos=True,
                               tie_embeddings=True, share_embeddings=True)
    values.update(tokenizer={"level": "bpe", "vocab_size": 120}, vocab={"joint": True},
                  decode={"beam_scoring": "length_power", "alpha": 1.0, "max_len_ratio": 0, "max_len_extra": 30})
    values["train"].update(epochs=3, lr=0.003, scheduler="warmup", warmup_steps=40)
    return train(config_from_dict(values), log=lambda _: None).model_path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["shared", "untied", "separate"])
def test_transformers_translates_a_model_trained_here_as_attnmt_does(trained, kind, tmp_path):
    transformers, _ = oracle()
    model = trained if kind == "shared" else derived(trained, tmp_path / "model.safetensors", kind)
    out, notes = export_marian(model, tmp_path / "marian")
    assert [note.split(":")[0] for note in notes] == ["tokenizer.level bpe"]
    config = read_json(out / "config.json")
    assert (config["share_encoder_decoder_embeddings"], config["tie_word_embeddings"]) == (kind != "separate",
                                                                                         kind == "shared")
    assert (out / "target_vocab.json").is_file() == (kind == "separate")
    marian, translator = load_marian(transformers, out), Translator.load(model, "cpu")
    for beam in (1, 4):
        check_translations(translator, marian, SOURCES, beam)
