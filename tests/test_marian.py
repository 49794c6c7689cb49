"""`attnmt import`: a Hugging Face Marian folder (OPUS-MT) read into an attnmt model file (issue 96).

Made-up folders (tests/marian_folders.py: sentencepiece models of the dates corpus, Marian's vocabulary
order, random weights under transformers' names) run everywhere, without transformers or ../shared:
what the import writes (config, tokenizers, vocabularies with <pad> moved to id 0, every weight in its
place), the command, `attnmt info`, and each bad input refused in one line with nothing written.
tests/test_marian_parity.py compares what an imported model computes with transformers itself."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from marian_folders import write_marian_folder
from safetensors.torch import load_file, save_file

from attnmt import cli
from attnmt.config import TokenizerConfig
from attnmt.corpus.prepare import make_tokenizers
from attnmt.errors import AttnmtError
from attnmt.formats.marian import halves_sinusoids, import_marian, read_marian
from attnmt.modelfile import read_model
from attnmt.tokenize import SentencePieceTokenizer, tokenizer_from_dict, tokenizers_from_dicts
from attnmt.translate import Translator, model_info

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_marian_folder(tmp_path_factory.mktemp("marian") / "opus-mt-de-en")


@pytest.fixture(scope="module")
def imported(folder, tmp_path_factory) -> Path:
    return import_marian(folder, tmp_path_factory.mktemp("imported") / "model.safetensors")


def marian_vocab(folder: Path, name: str = "vocab.json") -> list[str]:
    ids = json.loads((folder / name).read_text(encoding="utf-8"))
    return sorted(ids, key=ids.get)


# --------------------------------------------------------------------------- what the import writes


def test_the_config_says_what_a_marian_model_is(imported, folder):
    config = read_model(imported)[0].config
    model, decode = config.model, config.decode
    assert (model.arch, model.norm, model.positions, model.sinusoid_layout, model.activation) == (
        "transformer", "post", "sinusoidal", "halves", "silu")                         # swish
    assert (model.emb_dim, model.enc_layers, model.dec_layers, model.heads, model.ff_dim) == (16, 2, 2, 4, 32)
    assert model.source_eos and model.tie_embeddings and model.share_embeddings and config.vocab.joint
    assert (model.dropout, model.attn_dropout, model.act_dropout) == (0.1, 0.0, 0.0)
    assert config.tokenizer.level == "sentencepiece" and not config.tokenizer.joint    # two spm files
    assert (decode.beam_size, decode.alpha, decode.beam_scoring, decode.never_generate) == (3, 1.0, "length_power",
                                                                                          ["<pad>"])
    # max_length 40 counts the start token; no forced_eos_token_id: 39 tokens, then attnmt's own </s>
    assert (decode.max_len_ratio, decode.max_len_extra, decode.max_src_len) == (0.0, 39, 127)
    assert (config.data.src_lang, config.data.tgt_lang) == ("de", "en")


def test_early_stopping_is_the_search_that_stops_once_num_beams_have_finished(tmp_path):
    """generate's early_stopping true becomes decode.beam_scoring length_power_early, and is written back."""
    folder = write_marian_folder(tmp_path / "folder")
    config_change(early_stopping=True)(folder)
    model = import_marian(folder, tmp_path / "model.safetensors")
    assert read_model(model)[0].config.decode.beam_scoring == "length_power_early"
    assert cli.main(["export", str(model), str(tmp_path / "back"), "--to", "marian"]) == 0
    assert json.loads((tmp_path / "back" / "generation_config.json").read_text(encoding="utf-8"))["early_stopping"]
    assert read_model(import_marian(tmp_path / "back", tmp_path / "again.safetensors"))[0].config.decode.beam_scoring == (
        "length_power_early")


def test_the_vocabulary_has_pad_at_zero_and_the_models_own_ids(imported, folder):
    marian = marian_vocab(folder)
    text = read_model(imported)[0].tokenization
    assert text.src_vocab is text.tgt_vocab
    vocab, pad = text.tgt_vocab, len(marian) - 1
    assert vocab.itos == [marian[pad]] + marian[1:pad] + [marian[0]]                 # <pad> and </s> traded places
    assert (vocab.itos[0], vocab.eos, vocab.itos[vocab.unk_id]) == ("<pad>", "</s>", "<unk>")
    assert (vocab.sos_id, vocab.eos_id, vocab.unk_id) == (0, pad, 1)                  # decoding starts from <pad>


def test_every_weight_is_in_its_place_with_pad_rows_swapped(imported, folder):
    marian = load_file(str(folder / "model.safetensors"))
    state = read_model(imported)[1]
    pad = len(marian_vocab(folder)) - 1
    order = torch.arange(len(marian_vocab(folder)))
    order[0], order[pad] = pad, 0                                                    # attnmt id -> Marian id
    shared = marian["model.shared.weight"]
    for name in ("src_embedding.weight", "tgt_embedding.weight", "classifier.weight"):
        assert torch.equal(state[name], shared[order]), name
    assert torch.equal(state["classifier.bias"], marian["final_logits_bias"][0, order])
    for ours, theirs in [("encoder_layers.1.self_attention.key_proj.weight", "encoder.layers.1.self_attn.k_proj.weight"),
                         ("decoder_layers.0.cross_attention.value_proj.bias", "decoder.layers.0.encoder_attn.v_proj.bias"),
                         ("decoder_layers.1.cross_attention_norm.weight", "decoder.layers.1.encoder_attn_layer_norm.weight"),
                         ("decoder_layers.1.feed_forward.3.weight", "decoder.layers.1.fc2.weight"),
                         ("encoder_layers.0.feed_forward_norm.bias", "encoder.layers.0.final_layer_norm.bias")]:
        assert torch.equal(state[ours], marian[f"model.{theirs}"]), ours
    assert len(state) == 3 + 1 + 2 * 16 + 2 * 26                                     # nothing left out


def test_separate_vocabularies_keep_two_of_each(tmp_path):
    folder = write_marian_folder(tmp_path / "separate", separate_vocabs=True)
    description, state, _ = read_marian(folder)
    text, config = description.tokenization, description.config
    assert text.src_vocab is not text.tgt_vocab and not config.vocab.joint and not config.model.share_embeddings
    marian = load_file(str(folder / "model.safetensors"))
    pad = len(marian_vocab(folder)) - 1
    for side, vocab_file in (("encoder", "vocab.json"), ("decoder", "target_vocab.json")):
        vocab = text.src_vocab if side == "encoder" else text.tgt_vocab
        assert vocab.itos[1:pad] == marian_vocab(folder, vocab_file)[1:pad] and vocab.itos[0] == "<pad>"
        ours = state["src_embedding.weight" if side == "encoder" else "tgt_embedding.weight"]
        assert torch.equal(ours[0], marian[f"model.{side}.embed_tokens.weight"][pad])
    assert state["classifier.weight"] is state["tgt_embedding.weight"]
    # transformers decodes separate vocabularies with target.spm, a shared one with source.spm
    assert text.tgt_tokenizer.decoder is None
    shared = read_marian(write_marian_folder(tmp_path / "shared"))[0].tokenization.tgt_tokenizer
    assert shared.decoder == (tmp_path / "shared" / "source.spm").read_bytes()


def test_pytorch_model_bin_reads_as_the_safetensors_do(folder, tmp_path):
    copy = write_marian_folder(tmp_path / "bin", weights=False)
    torch.save(load_file(str(folder / "model.safetensors")), copy / "pytorch_model.bin")
    ours, theirs = read_marian(copy), read_marian(folder)
    assert ours[2]["weights"] == "pytorch_model.bin"
    assert ours[1].keys() == theirs[1].keys() and all(torch.equal(ours[1][k], theirs[1][k]) for k in ours[1])


def test_static_positions_in_the_file_are_checked(folder, tmp_path):
    copy = write_marian_folder(tmp_path / "positions", weights=False)
    weights = load_file(str(folder / "model.safetensors"))
    save_file({**weights, "model.encoder.embed_positions.weight": halves_sinusoids(128, 16)},
              str(copy / "model.safetensors"))
    read_marian(copy)                                                                 # Marian's own: read
    save_file({**weights, "model.encoder.embed_positions.weight": halves_sinusoids(128, 16).flip(1)},
              str(copy / "model.safetensors"))
    with pytest.raises(AttnmtError, match="embed_positions.weight are not Marian's static sinusoids"):
        read_marian(copy)


def test_the_imported_model_translates(imported):
    translator = Translator.load(imported, device="cpu")
    source = translator.tokenize_source("March 3, 2021")
    assert source[-1] == "</s>" and "".join(source[:-1]).replace("▁", " ").strip() == "March 3, 2021"
    translations = translator.translate(["March 3, 2021", "am 5. Mai 1999"], beam_size=2)
    assert all(len(t.tokens) <= 39 and "<pad>" not in t.tokens for t in translations)


# --------------------------------------------------------------------------- the tokenizer


@pytest.fixture(scope="module")
def pieces(folder) -> SentencePieceTokenizer:
    return SentencePieceTokenizer((folder / "source.spm").read_bytes(), ["</s>", "<unk>", "<pad>"])


def test_special_tokens_and_language_codes_are_tokens_of_their_own(pieces):
    plain = pieces.tokenize("March 3")
    assert plain and pieces.tokenize(">>fra<< March 3") == [">>fra<<"] + plain
    assert pieces.tokenize("March 3</s><pad>") == plain + ["</s>", "<pad>"]
    assert pieces.tokenize("<unk>>>de<< March 3") == ["<unk>", ">>de<<"] + plain    # a code after a special
    assert ">>de<<" not in pieces.tokenize("March >>de<< 3")                        # only where a text starts
    assert pieces.tokenize("") == [] and pieces.tokenize("   ") == []


def test_detokenizing_leaves_out_the_special_tokens(pieces):
    assert pieces.detokenize(pieces.tokenize("March 3, 2021</s>")) == "March 3, 2021"
    assert pieces.detokenize(["<unk>", *pieces.tokenize("May"), "<pad>"]) == "May"


def test_the_tokenizer_travels_in_its_dict(pieces, folder):
    again = tokenizer_from_dict(json.loads(json.dumps(pieces.to_dict())))
    assert isinstance(again, SentencePieceTokenizer) and again.tokenize(">>fr<< May 3</s>") == pieces.tokenize(
        ">>fr<< May 3</s>")
    decoding = SentencePieceTokenizer((folder / "target.spm").read_bytes(), pieces.specials, pieces.model)
    source, target = tokenizers_from_dicts(pieces.to_dict(), decoding.to_dict())
    assert target.decoder == pieces.model and source.decoder is None


def test_a_new_model_cannot_train_a_sentencepiece_tokenizer():
    with pytest.raises(AttnmtError, match="^tokenizer.level sentencepiece .* set train.init_from"):
        make_tokenizers(TokenizerConfig(level="sentencepiece"), [("a", "b")])


# --------------------------------------------------------------------------- the commands


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_attnmt_import_writes_the_file_once_and_info_says_where_from(folder, tmp_path, capsys):
    out = tmp_path / "model.safetensors"
    assert run(capsys, "import", str(folder), "--out", str(out)) == (0, f"attnmt model written to {out}\n", "")
    code, _, err = run(capsys, "import", str(folder), "--out", str(out))
    assert code == 2 and err == f"attnmt: error: {out} exists; use --overwrite to replace it\n"
    assert run(capsys, "import", str(folder), "--out", str(out), "--overwrite")[0] == 0
    code, text, _ = run(capsys, "info", str(out))
    origin = f"origin: imported from the marian folder {folder.resolve()} (tiny-marian-dates), config.json sha256"
    assert code == 0 and origin in text
    assert "training: not recorded" not in text and "tokenizer: level sentencepiece" in text
    info = model_info(out)
    assert info["origin"]["format"] == "marian" and len(info["origin"]["config_sha256"]) == 64
    assert "decoder" not in info["tokenizer"] and "model" not in info["tokenizer"]


def test_import_loads_torch_in_its_handler_only():
    probe = "import sys; from attnmt.cli import build_parser; build_parser(); assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", probe], cwd=REPO, timeout=600).returncode == 0


# --------------------------------------------------------------------------- bad input: one line, nothing written


def config_change(**values):
    def change(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config.update(values)
        for key in [k for k, v in values.items() if v is None]:
            del config[key]
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return change


def bert(folder: Path) -> None:
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert",
                                                    "hidden_size": 768}), encoding="utf-8")


def fewer_tokens(folder: Path) -> None:
    """vocab.json of another model: 10 tokens fewer (the ids still run from 0), <pad> still last."""
    tokens = marian_vocab(folder)
    kept = tokens[:-11] + tokens[-1:]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(kept)}), encoding="utf-8")
    config_change(pad_token_id=len(kept) - 1, decoder_start_token_id=len(kept) - 1,
                  bad_words_ids=[[len(kept) - 1]])(folder)


class RunsCode:
    """What a hostile pytorch_model.bin holds: unpickling it would run a command."""

    def __reduce__(self):
        return (subprocess.call, (["touch", "RAN"],))


def unpickles_code(folder: Path) -> None:
    weights = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as file:
        pickle.dump({**weights, "extra": RunsCode()}, file, protocol=2)


def truncated(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def lfs_pointer(folder: Path) -> None:
    (folder / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n")


BAD_INPUTS = {
    "bert": (bert, ["config.json", "model_type 'bert'", "not a Marian translation model"]),
    "no source.spm": (lambda f: (f / "source.spm").unlink(), ["no source.spm"]),
    "no vocab.json": (lambda f: (f / "vocab.json").unlink(), ["no vocab.json"]),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), ["no model.safetensors or pytorch_model.bin"]),
    "vocabulary size": (fewer_tokens, ["vocab.json holds", "tokens, but the encoder's embeddings", "rows"]),
    "unpickling": (unpickles_code, ["pytorch_model.bin: loading it would run code", "weights_only"]),
    "truncated": (truncated, ["model.safetensors: damaged or truncated"]),
    "git lfs": (lfs_pointer, ["a Git LFS pointer, not the weights"]),
    "normalize_before": (config_change(normalize_before=True), ["normalize_before true"]),
    "add_final_layer_norm": (config_change(add_final_layer_norm=True), ["add_final_layer_norm true"]),
    "normalize_embedding": (config_change(normalize_embedding=True), ["normalize_embedding true"]),
    "scale_embedding": (config_change(scale_embedding=False), ["scale_embedding false"]),
    "scale_embedding absent": (config_change(scale_embedding=None), ["scale_embedding false"]),   # MarianConfig's default
    "static positions": (config_change(static_position_embeddings=False), ["static_position_embeddings false"]),
    "activation": (config_change(activation_function="tanh"), ['activation_function "tanh"']),
    "heads": (config_change(decoder_attention_heads=2), ["decoder_attention_heads 2", "encoder_attention_heads 4"]),
    "ffn": (config_change(decoder_ffn_dim=64), ["decoder_ffn_dim 64"]),
    "bad words": (config_change(bad_words_ids=[[3, 4]]), ["bad_words_ids [3, 4]"]),
    "early stopping": (config_change(early_stopping="never"), ['early_stopping "never"', "false or true"]),
    "sampling": (config_change(do_sample=True), ["do_sample true"]),
    "forced eos": (config_change(forced_eos_token_id=5), ["forced_eos_token_id 5"]),
    "pad id": (config_change(pad_token_id=100000), ["pad_token_id 100000 is not an id of vocab.json"]),
    "eos id": (config_change(eos_token_id=3), ["eos_token_id 3 is not the vocabulary's </s>"]),
    "more layers": (config_change(encoder_layers=3), ["lacks the weights of attnmt's encoder_layers.2"]),
    "d_model": (config_change(d_model=8, decoder_attention_heads=4), ["has shape", "config.json makes it"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_writes_nothing(case, tmp_path, capsys, monkeypatch):
    folder = write_marian_folder(tmp_path / "folder")
    change, expected = BAD_INPUTS[case]
    change(folder)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(tmp_path)
    code, printed, err = run(capsys, "import", str(folder), "--out", str(out / "model.safetensors"))
    lines = err.splitlines()
    assert code == 2 and printed == "" and len(lines) == 1 and lines[0].startswith("attnmt: error: "), err
    for fragment in expected:
        assert fragment in lines[0], (fragment, lines[0])
    assert list(out.iterdir()) == [] and not (tmp_path / "RAN").exists()
