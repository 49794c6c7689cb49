"""An imported Marian model computes what transformers computes (issue 96), with transformers as the oracle:
MarianTokenizer's pieces and ids on 1,000 varied lines, MarianMTModel's per-step log-probabilities on 50
sentences (within 1e-4, fp32), and generate's greedy and beam-5 outputs on 200 sentences (identical).

The models are tiny (d_model 32, 2+2 layers, 4 heads, feed-forward 64) and random, built by transformers
from each real folder's config.json (../shared/models) with its real vocabulary and sentencepiece
models, and from made-up folders (tests/marian_folders.py: a shared and a separate vocabulary), which
need no ../shared. All of it skips without transformers."""

from __future__ import annotations

import gzip
import html
import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from conftest import SHARED_DATA
from marian_folders import write_marian_folder

from attnmt.corpus.dates import generate_dates
from attnmt.formats.marian import import_marian, read_folder, read_tokenization, read_vocabularies
from attnmt.translate import Translator

transformers = pytest.importorskip("transformers")
warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")   # MarianTokenizer's; unused

SHARED_MODELS = SHARED_DATA.parent / "models"
REAL = ["opus-mt-en-mg", "opus-mt-tc-big-fr-en"]
MADE_UP = ["made-up-shared", "made-up-separate"]
TINY = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "init_std": 0.2}
MAX_LENGTH = 64   # generate's max_length in the tiny folders, which the import turns into attnmt's limit
TOKENIZER_FILES = ["source.spm", "target.spm", "vocab.json", "target_vocab.json", "tokenizer_config.json"]


def real_folder(name: str) -> Path:
    folder = SHARED_MODELS / name
    if not folder.is_dir():
        pytest.skip(f"../shared/models/{name} is not beside the repository")
    return folder


def marian_tokenizer(folder: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.MarianTokenizer.from_pretrained(str(folder))


# --------------------------------------------------------------------------- 1,000 varied lines

CRAFTED = [
    "", " ", "  ", "\t", "a  b", " leading and trailing ", "tab\tinside", "line\u2028separator", "no\u00a0break space",
    "ideographic\u3000space", "thin\u2009space", "zero\u200bwidth", "soft\u00adhyphen", "e\u0301 combining (NFD)",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "ﬁ ligature ﬂ", ">>fra<< Bonjour le monde.", ">>mg<< How are you?",
    ">>deu<<Ohne Leerzeichen",
    " >>fra<< a space before the code", "x >>fra<< y", ">>fra<<", ">>", "<<", ">> not << a code", ">>a<<>>b<< two codes",
    "</s>", "<unk>", "<pad>", "a</s>b", "<unk> unknown <unk>", "end with pad<pad>", "</s>>>fra<< after eos", "<s> bos",
    "<<unk>>", "</s</s>>", "3.14159", "1,234,567.89", "12:30 p.m.", "+33 (0)1 42 68 53 00", "2021-03-03T12:00:00Z",
    "50% off!!!", "$5.99 / €4,50 / £3", "¿Qué tal? ¡Muy bien!", "« Guillemets » et “quotes” and ‚low‘", "C'est l’été.",
    "don't won't can't", "e-mail: someone@example.com", "https://example.org/path?q=1&r=2#frag", "#hashtag @mention",
    "Ελληνικά γράμματα", "Русский текст, знаки препинания.", "中文的句子。", "日本語の文、カタカナ。", "한국어 문장입니다.",
    "العربية من اليمين", "עברית", "हिन्दी में वाक्य", "தமிழ்", "ภาษาไทย", "Tiếng Việt có dấu", "emoji 😀👍🏽 🇫🇷",
    "ZWJ family 👩‍👩‍👧", "math ∑ ∫ √ ≤ ≥ ≠ ∞", "arrows → ← ↑", "•bullet • point", "…ellipsis…", "a" * 300,
    "word " * 60, "MiXeD CaSe WoRdS", "ALL CAPS SENTENCE.", "numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000",
    "Mg: Manao ahoana ianao?", "Fr: Où est la bibliothèque ?", "De: Straße, Maß, Größe.", "\x00nul", "bell\x07",
]


def _lines(path: Path, gz: bool = True) -> list[str]:
    opened = gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")
    with opened as file:
        return [line.rstrip("\n") for line in file]


def every(lines: list[str], count: int) -> list[str]:
    """`count` lines spread evenly over `lines`."""
    return lines[:: max(1, len(lines) // count)][:count]


def varied_lines(shared: Path) -> list[str]:
    """1,000 lines, always the same: Multi30k (German, English), Tatoeba (German, Marathi), WMT newstest
    (news German and English), IWSLT (Vietnamese, HTML entities undone) and the crafted edge cases."""
    multi30k = shared / "multi30k"
    tatoeba = [line.split("\t") for line in _lines(shared / "tatoeba_deu_eng" / "deu.txt.gz")]
    marathi = [line.split("\t")[1] for line in _lines(shared / "tatoeba_mar_eng" / "mar.txt.gz")]
    newstest = [re.sub(r"<[^>]+>", "", line) for line in _lines(shared / "wmt_newstest_deen" /
                                                                "newstest2014-deen-src.en.sgm.gz")
                if line.startswith("<seg")]
    lines = (every(_lines(multi30k / "test_2016_flickr.de.gz"), 120) + every(_lines(multi30k / "val.en.gz"), 120)
             + every([g for _, g in tatoeba], 100) + every([e for e, _ in tatoeba], 60) + every(marathi, 120)
             + every(_lines(shared / "wmt_newstest_deen" / "newstest2021.de-en.src.de.gz"), 100) + every(newstest, 80)
             + every([html.unescape(v) for v in _lines(shared / "iwslt15_en_vi_devtest" / "tst2013.vi", gz=False)], 120))
    lines += CRAFTED
    # Variants to reach 1,000: a language code in front, odd spacing around, upper case.
    variants = [f">>{code}<< {line}" for code, line in zip(["fra", "mlg", "eng", "deu"] * 50, lines[::7])]
    variants += [f"  {line.upper()}\t" for line in lines[3::11]]
    return (lines + variants)[:1000]


def test_the_lines_are_a_thousand_and_varied(shared_data):
    lines = varied_lines(shared_data)
    assert len(lines) == 1000 and "" in lines and any(">>" in line for line in lines)
    assert any(re.search("[\u0900-\u097f]", line) for line in lines)     # Devanagari
    assert any(re.search("[ạ-ỹ]", line) for line in lines)                # Vietnamese letters


@pytest.mark.parametrize("name", REAL)
def test_tokenization_is_marian_tokenizers_on_1000_lines(name, shared_data):
    """Pieces and ids of both sides, and the text decode(ids, skip_special_tokens=True) gives back."""
    folder = real_folder(name)
    reference = marian_tokenizer(folder)
    marian = read_folder(folder)
    text = read_tokenization(marian, read_vocabularies(marian))
    swap = {0: marian.config["pad_token_id"], marian.config["pad_token_id"]: 0}
    for line in varied_lines(shared_data):
        pieces = text.src_tokenizer.tokenize(line)
        assert pieces == reference.tokenize(line), line
        ids = [swap.get(i, i) for i in text.src_vocab.encode(pieces)] + [marian.config["eos_token_id"]]
        assert ids == reference(line).input_ids, line
        target = reference(text_target=line).input_ids
        pieces = text.tgt_tokenizer.tokenize(line)
        assert [swap.get(i, i) for i in text.tgt_vocab.encode(pieces)] + [marian.config["eos_token_id"]] == target, line
        tokens = [text.tgt_vocab.itos[i] for i in text.tgt_vocab.encode(pieces)]
        assert text.tgt_tokenizer.detokenize(tokens) == reference.decode(target, skip_special_tokens=True), line


# --------------------------------------------------------------------------- tiny models


def vary_lengths(model, tokenizer, sources: list[str]) -> None:
    """Make a random MarianMTModel end its outputs of `sources` after varied numbers of tokens, few at
    MAX_LENGTH. A random decoder soon repeats a few tokens for ever, so that </s> comes at once or never;
    here </s>'s logit grows with the steps instead. Self-attention weighs the steps so far nearly alike
    (small queries), its start token (Marian's <pad>, never written: bad_words_ids) stands out (a large
    embedding), so its share of what each step reads, and with it the output, drifts as the output
    grows; </s>'s row of the tied output matrix points along that drift, and final_logits_bias lowers
    it by as little as keeps all but 2 % of the greedy outputs of `sources` shorter than MAX_LENGTH
    (bisection)."""
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    output = model.get_output_embeddings().weight
    with torch.no_grad():
        for layer in model.model.decoder.layers:
            layer.self_attn.q_proj.weight *= 0.1
            layer.self_attn.q_proj.bias *= 0.1
        output[pad] *= 20
        model.final_logits_bias[0, eos] = -100.0
        steps = model.generate(**batch, num_beams=1, max_length=32, bad_words_ids=[[pad]], output_hidden_states=True,
                               return_dict_in_generate=True).decoder_hidden_states   # per step, per layer [B, 1, d]
        drift = (steps[-1][-1][:, -1] - steps[1][-1][:, -1]).mean(0)                  # [d]
        output[eos] = 10 * drift / drift.norm()
        low, high = -40.0, 40.0
        for _ in range(9):
            model.final_logits_bias[0, eos] = (low + high) / 2
            outputs = model.generate(**batch, num_beams=1, max_length=MAX_LENGTH, bad_words_ids=[[pad]])
            at_limit = sum(len(content(sequence, eos)) >= MAX_LENGTH - 2 for sequence in outputs.tolist())
            low, high = ((low + high) / 2, high) if at_limit > len(sources) // 50 else (low, (low + high) / 2)
        model.final_logits_bias[0, eos] = high


def generation_settings(folder: Path, config: dict) -> dict:
    """What generate reads from a folder: generation_config.json, else config.json's generation keys."""
    if (folder / "generation_config.json").is_file():
        return json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    keys = ("bad_words_ids", "num_beams", "max_length", "forced_eos_token_id", "decoder_start_token_id",
            "eos_token_id", "pad_token_id", "bos_token_id", "length_penalty")
    return {key: config[key] for key in keys if key in config}


# The folders tiny_marian made this session, by name: test_marian_export asks for the same ones again.
MADE: dict[str, Path] = {}


def tiny_marian(name: str, folder: Path) -> Path:
    """`folder`: a tiny random MarianMTModel (TINY, seeded) of the config of `name` (a real folder, or a
    made-up one), with that folder's tokenizer files and generate's settings (max_length MAX_LENGTH).
    Made once a session (its lengths varied over 200 sentences of generate take seconds), then copied."""
    if name in MADE and MADE[name].is_dir():
        shutil.copytree(MADE[name], folder)
        return folder
    MADE[name] = folder
    source = real_folder(name) if name in REAL else write_marian_folder(
        folder.parent / f"{name}-files", separate_vocabs=name.endswith("separate"), weights=False)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig.from_dict({**config, **TINY})).eval()
    vary_lengths(model, marian_tokenizer(source), [s for s, _ in sentence_pairs(name, 200)])
    model.save_pretrained(str(folder))
    for file in TOKENIZER_FILES:
        if (source / file).is_file():
            shutil.copy(source / file, folder / file)
    settings = {**generation_settings(source, config), "max_length": MAX_LENGTH}
    (folder / "generation_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


def sentence_pairs(name: str, count: int) -> list[tuple[str, str]]:
    """`count` (source, target) pairs: Multi30k's English and German for the real configs (whose
    languages these are not: the models are random), the dates corpus for the made-up ones."""
    if name not in REAL:
        return generate_dates(count, seed=11)
    multi30k = SHARED_DATA / "multi30k"
    english, german = _lines(multi30k / "test_2016_flickr.en.gz"), _lines(multi30k / "test_2016_flickr.de.gz")
    return list(zip(english, german))[:count]


@pytest.fixture(scope="module", params=REAL + MADE_UP)
def pair(request, tmp_path_factory):
    """(the tiny transformers model's folder, the attnmt model file imported from it)."""
    folder = tiny_marian(request.param, tmp_path_factory.mktemp(request.param) / "hf")
    return request.param, folder, import_marian(folder, folder.parent / "model.safetensors")


@pytest.fixture(scope="module")
def loaded(pair):
    """The pair's two models loaded once for the tests that only read them: (MarianMTModel, Translator)."""
    _, folder, model_file = pair
    return transformers.MarianMTModel.from_pretrained(str(folder)).eval(), Translator.load(model_file, device="cpu")


def marian_ids(folder: Path) -> dict[int, int]:
    """attnmt id -> Marian id, for the ids the pad swap moved (the others are the same)."""
    pad = json.loads((folder / "config.json").read_text(encoding="utf-8"))["pad_token_id"]
    return {0: pad, pad: 0}


@pytest.mark.slow
def test_per_step_log_probabilities_are_marian_mt_models(pair, loaded):
    """Teacher-forced over a reference target: every log-probability of every step, 50 sentences."""
    name, folder, _ = pair
    reference, translator = loaded
    tokenizer = marian_tokenizer(folder)
    text, network, swap = translator.tokenization, translator.model.eval(), marian_ids(folder)
    order = torch.tensor([swap.get(i, i) for i in range(len(text.tgt_vocab))])   # Marian's id of each attnmt id
    for source, target in sentence_pairs(name, 50):
        batch = tokenizer(source, text_target=target, return_tensors="pt")
        with torch.no_grad():
            expected = torch.log_softmax(reference(**batch).logits[0], dim=-1)            # [T, V] Marian's ids
        src = text.src_vocab.encode(translator.tokenize_source(source))
        tgt = text.tgt_vocab.encode(translator.tgt_tokenizer.tokenize(target))
        assert [swap.get(i, i) for i in src] == batch["input_ids"][0].tolist()
        with torch.no_grad():
            features, _ = network.features(torch.tensor([src]), torch.tensor([len(src)]),
                                           torch.tensor([[text.tgt_vocab.sos_id] + tgt]))
            ours = torch.log_softmax(network.output_layer(features)[0].float(), dim=-1)    # [T, V] attnmt's ids
        got = torch.empty_like(ours)
        got[:, order] = ours
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-4, rtol=0), (source, (got - expected).abs().max())


def content(sequence: list[int], eos: int) -> list[int]:
    """An output of generate without its start token, </s> and padding."""
    return sequence[1:sequence.index(eos, 1)] if eos in sequence[1:] else sequence[1:]


def generated(reference, tokenizer, sources: list[str], beam: int, early_stopping: bool = False) -> list[list[int]]:
    """generate's outputs (its own settings from the folder, `beam` hypotheses), as `content`."""
    outputs = []
    for start in range(0, len(sources), 50):
        batch = tokenizer(sources[start:start + 50], return_tensors="pt", padding=True)
        with torch.no_grad():
            sequences = reference.generate(**batch, num_beams=beam, early_stopping=early_stopping)
        outputs += [content(sequence, reference.config.eos_token_id) for sequence in sequences.tolist()]
    return outputs


@pytest.mark.slow
@pytest.mark.parametrize("beam, early_stopping", [(1, False), (5, False), (5, True)])
def test_greedy_and_beam_outputs_are_generates(pair, loaded, beam, early_stopping, monkeypatch):
    """The same output ids and text as generate on 200 sentences, with its length penalty and max_length,
    and with early_stopping as decode.beam_scoring length_power_early.

    Except, in beam search, an output that reaches max_length: generate scores a hypothesis it cuts
    there by its tokens alone (with forced_eos_token_id, by a </s> of log-probability 0), attnmt's
    search by its tokens and the </s> it forces at its length limit, log-probability included; the
    two then rank such hypotheses differently (a few of the 200 here)."""
    name, folder, _ = pair
    reference, translator = loaded
    tokenizer = marian_tokenizer(folder)
    if early_stopping:                              # for this test alone: the translator is the module's
        monkeypatch.setattr(translator.config.decode, "beam_scoring", "length_power_early")
    swap = marian_ids(folder)
    sources = [source for source, _ in sentence_pairs(name, 200)]
    expected = generated(reference, tokenizer, sources, beam, early_stopping)
    lengths = [len(ids) for ids in expected]
    assert len(set(lengths)) >= 6 and sum(n >= MAX_LENGTH - 2 for n in lengths) <= 10, sorted(lengths)   # varied
    translations = translator.translate(sources, beam_size=beam)
    compared = 0
    for source, ids, translation in zip(sources, expected, translations):
        ours = [swap.get(i, i) for i in translator.tokenization.tgt_vocab.encode(translation.tokens)]
        if beam > 1 and max(len(ids), len(ours)) >= MAX_LENGTH - 2:
            continue
        assert ours == ids, source
        assert translation.text == tokenizer.decode(ids, skip_special_tokens=True), source
        compared += 1
    assert compared >= 190
