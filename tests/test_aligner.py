"""The word aligner trained for a model (aligner.py): its pieces by hand, its links on a corpus
whose alignment is known, the model file that carries it, the command line."""

from __future__ import annotations

import itertools
import math
import random
import re

import numpy as np
import pytest
import torch

from attnmt import AttnmtError, Translator
from attnmt.analysis import aligner as aligner_module
from attnmt.analysis.align import (
    AlignerLinks,
    align_by_aligner,
    align_by_attention,
    aligner_links,
    aligner_posteriors,
    alignment_method,
    averaged,
    model_aligner,
    read_gold,
    score,
)
from attnmt.analysis.aligner import (
    PREFIX,
    Aligner,
    AlignerConfig,
    HiddenMarkovAligner,
    read_aligner,
    train_aligner,
    write_aligner,
)
from attnmt.cli import main
from attnmt.configfile import config_from_dict
from attnmt.corpus.dates import generate_dates
from attnmt.modelfile import load_file, read_model, save_file
from attnmt.training.train import train
from attnmt.vocab import PAD_ID

DATES = list(generate_dates(120, seed=5))


# ---------------------------------------------------------------- its pieces by hand

def tiny_direction(max_jump: int = 2) -> HiddenMarkovAligner:
    torch.manual_seed(0)
    direction = HiddenMarkovAligner(AlignerConfig(dim=3, window=1, hidden=5, max_jump=max_jump), 9, 7)
    with torch.no_grad():
        for parameter in direction.parameters():
            parameter.normal_()
    return direction


def pieces_of(lengths: torch.Tensor, positions: int, vocab: int = 9) -> torch.Tensor:
    """Given pieces [B, positions] of those lengths, PAD after them."""
    pieces = torch.randint(PAD_ID + 1, vocab, (len(lengths), positions))
    return pieces.masked_fill(torch.arange(positions)[None, :] >= lengths[:, None], PAD_ID)


def every_alignment(direction: HiddenMarkovAligner, log_emission: torch.Tensor, pieces: torch.Tensor, given: int,
                    written: int, jump_weight: float = 1.0) -> tuple[float, torch.Tensor]:
    """p(written | given) and each piece's posterior [written, S + 1] of one sentence pair (the
    given pieces `pieces`, `given` of them), by summing over every alignment one by one, straight
    from the model's definition (the jumps' scores times jump_weight)."""
    p0 = float(torch.sigmoid(direction.null_logit.detach()))
    positions = log_emission.shape[1] - 1
    reach = direction.max_jump

    def score(before: int, to: int) -> torch.Tensor:
        bucket = max(-reach, min(reach, to - before)) + reach
        leaning = direction.leaving.weight.detach()[pieces[before - 1], bucket] if before else 0.0
        return jump_weight * (direction.jumps.detach()[bucket] + leaning)

    total, marginals = 0.0, torch.zeros(written, positions + 1, dtype=torch.float64)
    for alignment in itertools.product([*range(1, given + 1), None], repeat=written):
        probability, before = 1.0, 0
        for j, i in enumerate(alignment):
            if i is None:
                probability *= p0 * float(log_emission[j, positions].exp())
                continue
            jump = torch.softmax(torch.stack([score(before, k) for k in range(1, given + 1)]), 0)
            probability *= (1 - p0) * float(jump[i - 1]) * float(log_emission[j, i - 1].exp())
            before = i
        total += probability
        for j, i in enumerate(alignment):
            marginals[j, positions if i is None else i - 1] += probability
    return total, marginals / total


def test_the_likelihood_and_posteriors_are_those_of_every_alignment_summed_one_by_one():
    direction = tiny_direction()
    log_emission = torch.log_softmax(torch.randn(3, 4, 5), 2)                 # [B, T, S + 1]
    given, written = torch.tensor([4, 2, 3]), torch.tensor([4, 3, 1])         # padded pairs, jumps past max_jump
    pieces = pieces_of(given, 4)
    log_likelihood, posterior = direction.forward_backward(log_emission, pieces, given, written)
    for row in range(3):
        expected, marginals = every_alignment(direction, log_emission[row], pieces[row], int(given[row]),
                                              int(written[row]))
        assert log_likelihood[row].item() == pytest.approx(math.log(expected), abs=1e-5)
        assert torch.allclose(posterior[row, : written[row]].double(), marginals, atol=1e-5)
        assert not posterior[row, written[row]:].any()                        # padded pieces
        assert not posterior[row, :, given[row] : 4].any()                    # padded positions
    # The posterior is the likelihood's gradient with respect to the emissions (the HMM's identity).
    log_emission.requires_grad_()
    (gradient,) = torch.autograd.grad(direction.forward_backward(log_emission, pieces, given, written)[0].sum(),
                                      log_emission)
    assert torch.allclose(gradient, posterior, atol=1e-5)


def test_weighted_jumps_give_the_posteriors_of_every_alignment_with_those_jumps():
    direction = tiny_direction()
    log_emission = torch.log_softmax(torch.randn(2, 4, 5), 2)                 # [B, T, S + 1]
    given, written = torch.tensor([4, 3]), torch.tensor([4, 2])
    src = torch.tensor([[1, 2, 3, 4], [5, 6, 7, PAD_ID]])
    plain = direction.forward_backward(log_emission, src, given, written)[1]
    weighted = direction.forward_backward(log_emission, src, given, written, jump_weight=0.5)[1]
    assert not torch.allclose(plain, weighted, atol=1e-3)
    for row in range(2):
        _, marginals = every_alignment(direction, log_emission[row], src[row], int(given[row]), int(written[row]), 0.5)
        assert torch.allclose(weighted[row, : written[row]].double(), marginals, atol=1e-5)
    # The aligner reads its posteriors with the weight its config holds.
    aligner = Aligner(AlignerConfig(dim=3, window=1, hidden=5, max_jump=2, jump_weight=0.5), 9, 7)
    aligner.source_to_target.load_state_dict(direction.state_dict())
    tgt = torch.tensor([[1, 2, 3, 4], [5, 6, PAD_ID, PAD_ID]])
    forward, _ = aligner.posteriors(src, given, tgt, written)
    expected = direction.forward_backward(direction.lexical(src, tgt), src, given, written, jump_weight=0.5)[1]
    assert torch.allclose(forward, expected, atol=1e-6)


def test_the_scaled_forward_algorithm_gives_the_likelihood_and_gradients_of_the_reference():
    direction = tiny_direction(max_jump=3)
    # Emissions from far below one (long pairs underflow unscaled) and pieces of padding in both sides.
    log_emission = (torch.log_softmax(torch.randn(4, 9, 8), 2) * 12).requires_grad_()     # [B, T, S + 1]
    given, written = torch.tensor([7, 2, 5, 1]), torch.tensor([9, 3, 1, 6])
    pieces = pieces_of(given, 7)
    reference = direction.forward_backward(log_emission, pieces, given, written)[0]
    scaled = direction.log_likelihood(log_emission, pieces, given, written)
    assert reference.min().exp() == 0                                         # unscaled, it underflows in fp32
    assert torch.allclose(scaled, reference, rtol=1e-5, atol=1e-4)
    parameters = [log_emission, direction.jumps, direction.leaving.weight, direction.null_logit]
    for got, expected in zip(torch.autograd.grad(scaled.sum(), parameters),
                             torch.autograd.grad(reference.sum(), parameters), strict=True):
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_one_softmax_per_distinct_piece_is_one_per_position():
    torch.manual_seed(0)
    lexical = HiddenMarkovAligner(AlignerConfig(dim=3, window=0, hidden=5), 9, 7).lexical
    given, written = torch.tensor([[4, 5, 4, 8], [5, 5, PAD_ID, PAD_ID]]), torch.tensor([[2, 3, 6], [1, 6, 6]])
    by_piece, by_position = lexical.by_piece(given, written), lexical.by_position(given, written)
    assert by_piece.shape == (2, 4, 3) and torch.allclose(by_piece, by_position, atol=1e-6)
    assert torch.allclose(lexical(given, written)[:, :, :4], by_position.transpose(1, 2), atol=1e-6)
    weights = list(lexical.parameters())
    for got, expected in zip(torch.autograd.grad(by_piece.sum(), weights, allow_unused=True),
                             torch.autograd.grad(by_position.sum(), weights, allow_unused=True), strict=True):
        assert (got is None and expected is None) or torch.allclose(got, expected, atol=1e-5)


def test_the_lexical_model_reads_each_source_piece_with_its_neighbours():
    lexical = tiny_direction().lexical
    src, tgt = torch.tensor([[4, 5, 6]]), torch.tensor([[2, 3]])
    log_lexical = lexical(src, tgt)                                           # [1, T, S + 1]
    embedded = lexical.embeddings.weight.detach()
    zero = torch.zeros(3)
    for i, window in enumerate([(zero, embedded[4], embedded[5]), (embedded[4], embedded[5], embedded[6]),
                                (embedded[5], embedded[6], zero)]):
        log_probs = torch.log_softmax(lexical.output(torch.tanh(lexical.hidden(torch.cat(window)))), 0)
        assert torch.allclose(log_lexical[0, :, i], log_probs[[2, 3]], atol=1e-5)
    assert torch.allclose(log_lexical[0, :, 3], torch.log_softmax(lexical.null.detach(), 0)[[2, 3]])


def test_a_new_aligner_starts_from_the_models_embeddings(dates_model):
    translator = Translator.load(dates_model, "cpu")
    text = translator.tokenization
    aligner = Aligner.for_model(translator.model, len(text.src_vocab), len(text.tgt_vocab))
    src_embeddings, tgt_embeddings = translator.model.token_embeddings()
    for direction, given in ((aligner.source_to_target, src_embeddings), (aligner.target_to_source, tgt_embeddings)):
        weights = direction.lexical.embeddings.weight
        assert torch.equal(weights[PAD_ID + 1:], given.weight[PAD_ID + 1:]) and not weights[PAD_ID].any()
        assert weights.data_ptr() != given.weight.data_ptr()                  # a copy: training leaves the model be


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
    aligner = train_aligner(translator, sources, targets, epochs=5, lr=0.01, batch_tokens=256, log=lambda _: None)
    test = list(zip((tmp_path / "test.src").read_text().splitlines(), (tmp_path / "test.tgt").read_text().splitlines()))
    gold = (tmp_path / "gold.txt")
    gold.write_text("".join(" ".join(f"{i}-{j}" for i, j in pair_links) + "\n" for pair_links in links[-50:]))
    gold_links = read_gold(gold, 0)
    sources, targets = [s for s, _ in test], [t for _, t in test]
    by_aligner = score([set(a.links) for a in align_by_aligner(translator, sources, targets, aligner=aligner)], gold_links)
    by_attention = score([set(a.links) for a in align_by_attention(translator, sources, targets)], gold_links)
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
                 "--epochs", "1", "--device", "cpu"]) == 0
    assert f"written to {out}" in capsys.readouterr().out
    (_, before, _), (_, after, meta) = read_model(path), read_model(out)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert meta["aligner"]["pairs"] == len(DATES) and meta["aligner"]["epochs"] == 1
    assert main(["info", str(out)]) == 0
    assert f"aligner: trained on {len(DATES):,} pairs, 1 epoch," in capsys.readouterr().out
    translator, without = Translator.load(out, "cpu"), Translator.load(path, "cpu")
    aligner = read_aligner(translator)
    assert aligner is not None and read_aligner(without) is None
    assert [t.text for t in translator.translate(["3 March 2021"])] == \
        [t.text for t in without.translate(["3 March 2021"])]
    words = [(s.split(), t.split()) for s, t in DATES[:4]]
    posteriors = aligner_posteriors(translator, aligner, words)
    for (source, target), ((forward, null), (backward, back_null)) in zip(words, posteriors, strict=True):
        assert forward.shape == (len(target), len(source)) and backward.shape == (len(source), len(target))
        assert np.allclose(forward.sum(1) + null, 1, atol=1e-5)     # words and NULL share each target word
        assert np.allclose(backward.sum(1) + back_null, 1, atol=1e-5)
    assert main(["align", str(out), "--src", str(src), "--tgt", str(tgt), "--method", "aligner",
                 "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(DATES)
    assert lines[:4] == [" ".join(f"{s}-{t}" for s, t in sorted(averaged(forward, backward)))    # by default
                         for (forward, _), (backward, _) in posteriors]
    # Given a file with an aligner, train-aligner trains that one further.
    again = tmp_path / "again.safetensors"
    assert main(["train-aligner", str(out), "--src", str(src), "--tgt", str(tgt), "--out", str(again),
                 "--epochs", "1", "--device", "cpu"]) == 0
    assert read_model(again)[2]["aligner"]["epochs"] == 2
    assert train_aligner(translator, [s for s, _ in DATES], [t for _, t in DATES], log=lambda _: None,
                         aligner=aligner) is aligner


def test_an_aligner_written_before_jumps_learned_their_piece_reads_as_it_was(dates_model, tmp_path):
    translator = Translator.load(dates_model, "cpu")
    aligner = train_aligner(translator, [s for s, _ in DATES], [t for _, t in DATES], epochs=1, log=lambda _: None)
    assert aligner.source_to_target.leaving.weight.abs().sum() > 0                # training moved them
    out, old = tmp_path / "aligned.safetensors", tmp_path / "old.safetensors"
    write_aligner(dates_model, out, aligner, {"pairs": len(DATES)})
    tensors, meta = load_file(out)
    meta = {k: v for k, v in meta.items() if k not in ("format", "format_version", "sha256")}
    save_file(old, {k: t for k, t in tensors.items() if not k.endswith(".leaving.weight")}, meta)
    with torch.no_grad():
        for direction in (aligner.source_to_target, aligner.target_to_source):
            direction.leaving.weight.zero_()
    read = read_aligner(Translator.load(old, "cpu"))
    assert read is not None
    src, tgt = torch.tensor([[4, 5, 6, 7]]), torch.tensor([[5, 6, 8]])
    for got, expected in zip(read.posteriors(src, torch.tensor([4]), tgt, torch.tensor([3])),
                             aligner.posteriors(src, torch.tensor([4]), tgt, torch.tensor([3])), strict=True):
        assert torch.allclose(got, expected, atol=1e-6)
    # Any other tensor missing is a file that does not match.
    save_file(old, {k: t for k, t in tensors.items() if not k.endswith(".jumps")}, meta)
    with pytest.raises(AttnmtError, match="does not match its model"):
        read_aligner(Translator.load(old, "cpu"))


def test_train_aligner_seed_is_the_runs_and_is_recorded(dates_model, tmp_path):
    """--seed draws the new weights, the held-out pairs and the batches' order: the same seed twice gives
    the same aligner, another seed another one; the file records which."""
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("".join(f"{s}\n" for s, _ in DATES))
    tgt.write_text("".join(f"{t}\n" for _, t in DATES))

    def trained(seed: int, name: str) -> tuple[dict, dict]:
        out = tmp_path / name
        assert main(["train-aligner", str(dates_model), "--src", str(src), "--tgt", str(tgt), "--out", str(out),
                     "--epochs", "1", "--seed", str(seed), "--device", "cpu"]) == 0
        tensors, meta = load_file(out)
        return {k: t for k, t in tensors.items() if k.startswith(PREFIX)}, meta["aligner"]

    (first, first_meta), (again, _), (other, other_meta) = trained(1, "a"), trained(1, "b"), trained(2, "c")
    assert first_meta["seed"] == 1 and other_meta["seed"] == 2
    assert first.keys() == again.keys() == other.keys() and first
    # The same up to the order of float sums (it can differ between two runs of a process); another seed, other weights.
    assert max(float((first[k] - again[k]).abs().max()) for k in first) < 1e-4
    assert max(float((first[k] - other[k]).abs().max()) for k in first) > 1e-2


def test_training_says_each_epoch_and_the_time_left(dates_model):
    lines: list[str] = []
    aligner = train_aligner(Translator.load(dates_model, "cpu"), [s for s, _ in DATES], [t for _, t in DATES],
                            epochs=3, batch_tokens=256, log=lines.append)
    assert 1 <= len(lines) <= 3, lines                                     # one a epoch, the bar aside
    for epoch, line in enumerate(lines, 1):
        assert re.fullmatch(rf"aligner epoch {epoch}/3: perplexity [0-9.]+ per piece \(both directions\), [0-9.]+ on 6 "
                            rf"held-out pairs, \d+ batches; [0-9.]+ min so far \([0-9.]+ CPU-min per 100,000 pairs an "
                            rf"epoch\)(, at most [0-9.]+ min left|; held-out perplexity falls by less than 0.2%: "
                            rf"stopped, keeping epoch \d)?", line), line
    kept = re.search(r"keeping epoch (\d)", lines[-1])
    assert aligner.epochs == (int(kept.group(1)) if kept else len(lines))


@pytest.mark.parametrize("planted, stops_after, keeps", [
    ([5.0, 4.0, 4.1, 2.0], 3, 2),           # the third rises: the second's weights are restored
    ([5.0, 4.0, 3.999, 2.0], 3, 3),         # the third falls by less than STOP_GAIN: it is the last, and kept
])
def test_training_stops_when_the_held_out_perplexity_no_longer_falls_and_keeps_the_lowest(dates_model, monkeypatch,
                                                                                          planted, stops_after, keeps):
    perplexities = iter(planted)
    monkeypatch.setattr(aligner_module, "perplexity", lambda *_: next(perplexities))
    weights: list[dict[str, torch.Tensor]] = []
    translator = Translator.load(dates_model, "cpu")
    trained = Aligner.for_model(translator.model, len(translator.tokenization.src_vocab),
                                len(translator.tokenization.tgt_vocab))

    def log(line: str) -> None:
        weights.append({name: t.clone() for name, t in trained.state_dict().items()})
    train_aligner(translator, [s for s, _ in DATES], [t for _, t in DATES], epochs=4, batch_tokens=256, log=log,
                  aligner=trained)
    assert len(weights) == stops_after and trained.epochs == keeps
    first, second = weights[0], weights[1]
    assert not all(torch.equal(t, first[name]) for name, t in second.items())     # each epoch changes the weights,
    kept = weights[keeps - 1]                                                     # so these are the kept epoch's
    assert all(torch.equal(t, kept[name]) for name, t in trained.state_dict().items())


def test_align_adapts_a_copy_of_the_aligner_to_the_pairs_it_is_given(dates_model):
    translator = Translator.load(dates_model, "cpu")
    sources, targets = [s for s, _ in DATES], [t for _, t in DATES]
    aligner = train_aligner(translator, sources[:60], targets[:60], epochs=1, batch_tokens=256, log=lambda _: None)
    before = {name: t.clone() for name, t in aligner.state_dict().items()}
    lines: list[str] = []
    adapted = align_by_aligner(translator, sources[60:], targets[60:], AlignerLinks(adapt=2), aligner, log=lines.append)
    plain = align_by_aligner(translator, sources[60:], targets[60:], aligner=aligner)
    assert len(lines) == 2 and not any("held-out" in line for line in lines), lines   # every pair trains it
    assert all(torch.equal(t, before[name]) for name, t in aligner.state_dict().items())  # the caller's unchanged
    assert any(not np.allclose(a.attention, p.attention) for a, p in zip(adapted, plain, strict=True))


def test_align_reads_the_links_with_the_jump_weight_asked_for(dates_model):
    translator = Translator.load(dates_model, "cpu")
    sources, targets = [s for s, _ in DATES], [t for _, t in DATES]
    aligner = train_aligner(translator, sources[:60], targets[:60], epochs=1, batch_tokens=256, log=lambda _: None)
    own = aligner.config.jump_weight

    def posteriors(**weight) -> list[np.ndarray]:
        return [a.attention for a in align_by_aligner(translator, sources[60:], targets[60:], AlignerLinks(**weight),
                                                      aligner)]

    assert all(np.array_equal(a, b) for a, b in zip(posteriors(jump_weight=own), posteriors(), strict=True))
    flat = posteriors(jump_weight=0.0)
    assert any(not np.allclose(a, b) for a, b in zip(flat, posteriors(), strict=True))
    assert aligner.config.jump_weight == own                                   # the caller's aligner unchanged
    aligner.config.jump_weight = 0.0                                           # the same as an aligner holding it
    assert all(np.array_equal(a, b) for a, b in zip(flat, posteriors(), strict=True))
    with pytest.raises(AttnmtError, match=r"jump weight 3.0: allowed \[0, 2\]"):
        posteriors(jump_weight=3.0)


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
    # A flag of the other kind of method: one line naming the flag and the methods it is for.
    assert f"--reverse {dates_model} with --method aligner: the aligner aligns both ways itself (--reverse is for " \
           "--method argmax or threshold)" in refusal("align", dates_model, "--src", src, "--tgt", tgt, "--method",
                                                      "aligner", "--reverse", dates_model)
    for flag, value, owner in [("--threshold", 0.5, "threshold"), ("--layer", 1, "argmax or threshold"),
                               ("--head", 1, "argmax or threshold"), ("--step", "input", "argmax or threshold")]:
        assert f"{flag} {value} with --method aligner: the aligner reads no attention ({flag} is for --method " \
               f"{owner})" in refusal("align", dates_model, "--src", src, "--tgt", tgt, "--method", "aligner", flag, value)
    assert "--adapt 0 with --method threshold: only the aligner adapts to the pairs (--adapt is for --method aligner)" \
        in refusal("align", dates_model, "--src", src, "--tgt", tgt, "--adapt", 0, "--method", "threshold")
    assert "--jump-weight 0.5 with --method argmax: only the aligner weighs jumps (--jump-weight is for --method " \
           "aligner)" in refusal("align", dates_model, "--src", src, "--tgt", tgt, "--jump-weight", 0.5)
    with pytest.raises(SystemExit) as exited:                                  # argparse's refusal of the flag
        main(["align", str(dates_model), "--src", str(src), "--tgt", str(tgt), "--method", "aligner",
              "--jump-weight", "2.5"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and "--jump-weight: 2.5 is out of range; allowed: [0, 2]" in err
    assert "does not exist" in refusal("train-aligner", dates_model, "--src", src, "--tgt", tgt, "--out",
                                       tmp_path / "missing" / "o.safetensors")
    with pytest.raises(AttnmtError, match="no sentence pairs"):
        train_aligner(Translator.load(dates_model, "cpu"), [""], [""])


# ---------------------------------------------------------------- over HTTP

def test_translate_answers_alignments_with_the_method_that_made_them(dates_model, no_attention_model, tmp_path):
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
        if method == "aligner":          # the server reads the aligner from the model file it serves
            aligned = tmp_path / "aligned.safetensors"
            write_aligner(dates_model, aligned, train_aligner(translator, [s for s, _ in DATES], [t for _, t in DATES],
                                                              log=lambda _: None), {"pairs": len(DATES), "epochs": 1})
            translator = Translator.load(aligned, "cpu")
        assert alignment_method(translator, model_aligner(translator)) == method
        status, body = answer(translator)
        assert status == 200, body
        translations = [result["translation"] for result in body["results"]]
        expected = (align_by_aligner(translator, texts, translations) if method == "aligner"    # the file's
                    else align_by_attention(translator, texts, translations))
        for result, alignment in zip(body["results"], expected, strict=True):
            assert result["alignment"] == {"method": method, "source_words": alignment.source_words,
                                           "target_words": alignment.target_words,
                                           "links": [list(link) for link in alignment.links]}
    status, body = answer(translator, text="March 14, 2026\n1 May 2000", texts=None)
    assert status == 422 and "send its sentences as `texts`" in body["error"]
    status, body = answer(Translator.load(no_attention_model, "cpu"))
    assert status == 422 and body["error"] == ("alignments: this model has neither attention (model.attention none) "
                                               "nor an aligner (attnmt train-aligner): it cannot align words")
