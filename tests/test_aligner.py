"""The word aligner trained on a frozen model (aligner.py): its pieces by hand, its links on a corpus
whose alignment is known, the model file that carries it, the command line."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from attnmt import AttnmtError, Translator
from attnmt.align import align, aligner_links, aligner_posteriors, read_gold, score
from attnmt.aligner import Aligner, AlignerConfig, attention_features, train_aligner
from attnmt.cli import main
from attnmt.config import config_from_dict
from attnmt.dates import generate_dates
from attnmt.modelfile import read_model
from attnmt.train import train
from attnmt.vocab import SOS_ID

DATES = list(generate_dates(120, seed=5))


# ---------------------------------------------------------------- its pieces by hand

def tiny_aligner(features: int = 2, window: int = 1, vocab: int = 7) -> Aligner:
    torch.manual_seed(0)
    aligner = Aligner(AlignerConfig(features=features, window=window, hidden=5, buckets=5), torch.nn.Embedding(9, 3),
                      vocab)
    with torch.no_grad():
        for parameter in aligner.parameters():
            parameter.normal_()
    return aligner


def test_the_prior_weighs_the_heads_adds_the_relative_position_and_leaves_padding_out():
    aligner = tiny_aligner()
    attention = torch.rand(1, 2, 2, 3).softmax(-1)                    # [B, K, T, S]
    log_prior = aligner.log_prior(attention, torch.tensor([2]), torch.tensor([2]))  # source length 2 of 3
    w, d = aligner.head_weights.detach(), aligner.distortion.detach()
    for j in range(2):
        scores = []
        for i in range(2):
            relative = (i + 0.5) / 2 - (j + 0.5) / 2
            bucket = round((relative + 1) / 2 * 4)
            scores.append(float(w @ torch.log(attention[0, :, j, i])) + float(d[bucket]))
        scores.append(float(aligner.null_prior.detach()))
        expected = torch.log_softmax(torch.tensor(scores), 0)
        assert torch.allclose(log_prior[0, j, [0, 1, 3]], expected, atol=1e-5)
        assert log_prior[0, j, 2] == float("-inf")                    # the padded position


def test_the_lexical_model_reads_each_source_piece_with_its_neighbours():
    aligner = tiny_aligner()
    src, tgt = torch.tensor([[4, 5, 6]]), torch.tensor([[2, 3]])
    log_lexical = aligner.log_lexical(src, tgt)                       # [1, T, S + 1]
    embedded = aligner.src_embeddings.weight.detach()
    zero = torch.zeros(3)
    for i, window in enumerate([(zero, embedded[4], embedded[5]), (embedded[4], embedded[5], embedded[6]),
                                (embedded[5], embedded[6], zero)]):
        log_probs = torch.log_softmax(aligner.lexical(torch.cat(window)), 0)
        assert torch.allclose(log_lexical[0, :, i], log_probs[[2, 3]], atol=1e-5)
    assert torch.allclose(log_lexical[0, :, 3], torch.log_softmax(aligner.null_lexical.detach(), 0)[[2, 3]])


def test_links_go_to_the_most_probable_source_word_unless_null_is_more_probable():
    posterior = np.array([[0.6, 0.1], [0.2, 0.3], [0.0, 0.0]])
    assert aligner_links(posterior, np.array([0.3, 0.5, 1.0])) == {(0, 0)}
    assert aligner_links(posterior, np.array([0.3, 0.3, 1.0])) == {(0, 0), (1, 1)}


# ---------------------------------------------------------------- links where the alignment is known

def substitution_corpus(folder, count: int, seed: int) -> list[list[tuple[int, int]]]:
    """Sentences of 3-6 of 24 source words; each target word is its source word's fixed substitute,
    in the reverse order but for the first two words, which swap: links known by construction."""
    rng = random.Random(seed)
    substitute = {f"s{k}": f"t{(7 * k + 3) % 24}" for k in range(24)}
    sources, targets, links = [], [], []
    for _ in range(count):
        words = [f"s{rng.randrange(24)}" for _ in range(rng.randint(3, 6))]
        order = list(reversed(range(len(words))))
        order[0], order[1] = order[1], order[0]
        sources.append(" ".join(words))
        targets.append(" ".join(substitute[words[i]] for i in order))
        links.append([(i, position) for position, i in enumerate(order)])
    for split, start, end in (("train", 0, count - 100), ("val", count - 100, count - 50), ("test", count - 50, count)):
        (folder / f"{split}.src").write_text("".join(f"{s}\n" for s in sources[start:end]))
        (folder / f"{split}.tgt").write_text("".join(f"{t}\n" for t in targets[start:end]))
    return links


@pytest.mark.slow
def test_the_aligner_finds_a_known_alignment_that_attention_misses(tmp_path):
    links = substitution_corpus(tmp_path, 1600, seed=3)
    config = config_from_dict({
        "data": {"format": "parallel", "path": str(tmp_path), "src_lang": "src", "tgt_lang": "tgt",
                 "valid_prefix": "val", "test_prefix": "test"},
        "tokenizer": {"level": "word"},
        "model": {"arch": "transformer", "emb_dim": 32, "heads": 2, "ff_dim": 64, "enc_layers": 1, "dec_layers": 1,
                  "dropout": 0.0},
        "train": {"out_dir": str(tmp_path / "model"), "epochs": 1, "batch_size": 32, "lr": 0.003}})
    translator = Translator.load(train(config, log=lambda _: None).model_path, "cpu")
    sources = (tmp_path / "train.src").read_text().splitlines()
    targets = (tmp_path / "train.tgt").read_text().splitlines()
    translator.aligner = train_aligner(translator, sources, targets, epochs=5, lr=0.01, batch_tokens=256,
                                       log=lambda _: None)
    test = list(zip((tmp_path / "test.src").read_text().splitlines(), (tmp_path / "test.tgt").read_text().splitlines()))
    gold = (tmp_path / "gold.txt")
    gold.write_text("".join(" ".join(f"{i}-{j}" for i, j in pair_links) + "\n" for pair_links in links[-50:]))
    gold_links = read_gold(gold, 0)
    by_aligner = score([set(a.links) for a in align(translator, *zip(*test), method="aligner")], gold_links)
    by_attention = score([set(a.links) for a in align(translator, *zip(*test))], gold_links)
    # What is left are words that occur twice in a sentence; attention is far off (AER about 0.7).
    assert by_aligner.aer < 0.06, (by_aligner.line(), by_attention.line())
    assert by_attention.aer > 0.3


# ---------------------------------------------------------------- in the model file, from the command line

@pytest.mark.parametrize("model", ["dates_model", "transformer_dates_model", "no_attention_model"])
def test_train_aligner_writes_the_model_file_with_it_and_align_uses_it(model, request, tmp_path, capsys):
    path = request.getfixturevalue(model)
    src, tgt, out = tmp_path / "s.txt", tmp_path / "t.txt", tmp_path / "aligned.safetensors"
    src.write_text("".join(f"{s}\n" for s, _ in DATES))
    tgt.write_text("".join(f"{t}\n" for _, t in DATES))
    assert main(["train-aligner", str(path), "--src", str(src), "--tgt", str(tgt), "--out", str(out),
                 "--device", "cpu"]) == 0
    assert f"written to {out}" in capsys.readouterr().out
    (_, before, _), (_, after, meta) = read_model(path), read_model(out)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert meta["aligner"]["pairs"] == len(DATES) and meta["aligner"]["epochs"] == 1
    assert main(["info", str(out)]) == 0
    assert f"aligner: trained on {len(DATES):,} pairs, 1 epochs" in capsys.readouterr().out
    translator = Translator.load(out, "cpu")
    assert translator.aligner is not None
    assert [t.text for t in translator.translate(["3 March 2021"])] == \
        [t.text for t in Translator.load(path, "cpu").translate(["3 March 2021"])]
    words = [(s.split(), t.split()) for s, t in DATES[:4]]
    posteriors = aligner_posteriors(translator, words)
    for (source, target), (posterior, null) in zip(words, posteriors, strict=True):
        assert posterior.shape == (len(target), len(source))
        assert np.allclose(posterior.sum(1) + null, 1, atol=1e-5)    # words and NULL share each target word
    assert main(["align", str(out), "--src", str(src), "--tgt", str(tgt), "--method", "aligner", "--reverse",
                 str(out), "--device", "cpu"]) == 0                  # the reverse direction's aligner as well
    assert len(capsys.readouterr().out.splitlines()) == len(DATES)


def test_aligner_refusals_are_one_line(dates_model, tmp_path, capsys):
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("a b\nc d\n")
    tgt.write_text("x y\n")

    def refusal(*argv) -> str:
        assert main([*map(str, argv), "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        return err

    assert f"has 2 lines but --tgt {tgt} has 1" in refusal("train-aligner", dates_model, "--src", src, "--tgt", tgt,
                                                           "--out", tmp_path / "o.safetensors")
    tgt.write_text("x y\nz w\n")
    assert "no aligner: train one with `attnmt train-aligner" in refusal("align", dates_model, "--src", src, "--tgt",
                                                                          tgt, "--method", "aligner")
    assert "does not exist" in refusal("train-aligner", dates_model, "--src", src, "--tgt", tgt, "--out",
                                       tmp_path / "missing" / "o.safetensors")
    with pytest.raises(AttnmtError, match="no sentence pairs"):
        train_aligner(Translator.load(dates_model, "cpu"), [""], [""])


def test_attention_features_are_the_steps_that_write_and_read_each_piece(transformer_dates_model):
    translator = Translator.load(transformer_dates_model, "cpu")
    src, tgt = torch.tensor([[5, 6, 7]]), torch.tensor([[8, 9]])
    features = attention_features(translator.model, src, torch.tensor([3]), tgt)
    cross = translator.model.attention_maps(src, torch.tensor([3]), torch.tensor([[SOS_ID, 8, 9]]))["cross"].flatten(1, 2)
    half = cross.shape[1]
    assert features.shape == (1, 2 * half, 2, 3)
    assert torch.equal(features[:, :half], cross[:, :, :2]) and torch.equal(features[:, half:], cross[:, :, 1:])


# ---------------------------------------------------------------- over HTTP

def test_translate_answers_alignments_with_the_method_that_made_them(dates_model, no_attention_model):
    from fastapi.testclient import TestClient

    from attnmt.config import ServeConfig
    from attnmt.serve import create_app

    translator = Translator.load(dates_model, "cpu")
    texts = ["March 14, 2026", "3. Oktober 1990"]

    def answer(model: Translator, **fields) -> tuple[int, dict]:
        with TestClient(create_app(model, ServeConfig(timeout_s=60))) as client:
            response = client.post("/translate", json={"texts": texts, "alignments": True, **fields})
            return response.status_code, response.json()

    for method in ("argmax", "aligner"):
        if method == "aligner":
            translator.aligner = train_aligner(translator, [s for s, _ in DATES], [t for _, t in DATES],
                                               log=lambda _: None)
        assert translator.alignment_method() == method
        status, body = answer(translator)
        assert status == 200, body
        translations = [result["translation"] for result in body["results"]]
        expected = align(translator, texts, translations, method=method)
        for result, alignment in zip(body["results"], expected, strict=True):
            assert result["alignment"] == {"method": method, "source_words": alignment.source_words,
                                           "target_words": alignment.target_words,
                                           "links": [list(link) for link in alignment.links]}
    status, body = answer(translator, text="March 14, 2026\n1 May 2000", texts=None)
    assert status == 422 and "send its lines as `texts`" in body["error"]
    status, body = answer(Translator.load(no_attention_model, "cpu"))
    assert status == 422 and body["error"] == ("alignments: this model has neither attention (model.attention none) "
                                               "nor an aligner (attnmt train-aligner): it cannot align words")
