"""Greedy and beam search: agreement, batch independence, true scores, limits."""

import math

import pytest
import torch

from attnmt import Translator, search
from attnmt.batch import pad
from attnmt.families import build_model
from attnmt.families.rnn.config import RNNConfig
from attnmt.families.transformer.config import TransformerConfig
from attnmt.seam import forced_logits
from attnmt.search import SearchSettings, beam_search, greedy, length_penalty
from attnmt.vocab import EOS_ID, SOS_ID

TRANSFORMER = {"arch": "transformer", "enc_layers": 2, "dec_layers": 2, "heads": 2, "ff_dim": 32}
LOCAL_M = {"attention": "local_m", "decoder": "luong", "input_feeding": True, "local_window": 2}
LOCAL_P = {"attention": "local_p", "local_window": 2, "local_score": "concat"}
# The families, and local attention, whose decoder state carries each row's target position.
FAMILIES = [{}, TRANSFORMER, LOCAL_M, LOCAL_P]


def classifier(model) -> torch.nn.Linear:
    return model.classifier if model.config.arch == "transformer" else model.decoder.classifier


def random_model(seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    config = (TransformerConfig(emb_dim=16, dropout=0.0, **kwargs) if kwargs.get("arch") == "transformer"
              else RNNConfig(**{"emb_dim": 16, "enc_hidden": 16, "dec_hidden": 32, "attn_dim": 16, "dropout": 0.0,
                                **kwargs}))
    model = build_model(config, 30, 12).eval()
    with torch.no_grad():  # make EOS likely enough that hypotheses end at different lengths
        classifier(model).bias[EOS_ID] += 1.5
    return model


def random_batch(seed: int, batch: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 9, (batch,), generator=g)
    src = pad([torch.randint(4, 30, (int(n),), generator=g).tolist() for n in lengths])
    return src, lengths, lengths * 2 + 3


def sequence_log_prob(model, src: torch.Tensor, length: torch.Tensor, ids: list[int]) -> float:
    """log P(ids + EOS | src) by teacher forcing: the number beam search should report."""
    with torch.no_grad():
        tgt_in = torch.tensor([[SOS_ID] + ids])
        logits = forced_logits(model, src.unsqueeze(0)[:, : int(length)], length.view(1), tgt_in)
        log_probs = torch.log_softmax(logits.float(), dim=-1)[0]
        targets = ids + [EOS_ID]
        return float(sum(log_probs[t, token] for t, token in enumerate(targets)))


@pytest.mark.parametrize("kind", [{"attention": "bahdanau"}, {"attention": "general", "decoder": "luong"},
                                  {"attention": "none", "rnn": "lstm"}, TRANSFORMER, LOCAL_M, LOCAL_P])
def test_beam_one_equals_greedy(kind):
    model = random_model(**kind)
    src, lengths, max_lengths = random_batch(1)
    beams = beam_search(model, src, lengths, max_lengths, SearchSettings(beam_size=1))
    for hyps, expected in zip(beams, greedy(model, src, lengths, max_lengths), strict=True):
        assert hyps[0].ids == expected.ids
        assert hyps[0].log_prob == pytest.approx(expected.log_prob, abs=1e-4)
        if expected.attention is not None:
            torch.testing.assert_close(hyps[0].attention, expected.attention)


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_are_true_log_probabilities(family):
    model = random_model(**family)
    src, lengths, max_lengths = random_batch(2)
    alpha = 0.6
    beams = beam_search(model, src, lengths, max_lengths, SearchSettings(beam_size=4, alpha=alpha, n_best=4))
    for row, hyps in enumerate(beams):
        assert 1 <= len(hyps) <= 4
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.ids) for h in hyps}) == len(hyps)
        for h in hyps:
            assert h.log_prob == pytest.approx(sequence_log_prob(model, src[row], lengths[row], h.ids), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.ids) + 1, alpha))
            assert h.attention.shape == (len(h.ids), int(lengths[row]))
            assert len(h.ids) < int(max_lengths[row])


def test_beam_finds_at_least_as_likely_output_as_greedy():
    model = random_model(3)
    src, lengths, max_lengths = random_batch(3, batch=10)
    beams = beam_search(model, src, lengths, max_lengths, SearchSettings(beam_size=8))
    better = sum(h[0].log_prob >= g.log_prob - 1e-5 for h, g in zip(beams, greedy(model, src, lengths, max_lengths), strict=True))
    assert better >= 9  # beam search is not guaranteed to win, but nearly always does


@pytest.mark.parametrize("family", FAMILIES)
def test_sentence_alone_or_in_a_batch_of_64_gives_the_same_output(family):
    model = random_model(4, **family)
    src, lengths, max_lengths = random_batch(4, batch=64)
    together = beam_search(model, src, lengths, max_lengths, SearchSettings(beam_size=5, alpha=0.6, n_best=3))
    for row in range(0, 64, 7):
        n = int(lengths[row])
        alone = beam_search(model, src[row : row + 1, :n], lengths[row : row + 1], max_lengths[row : row + 1],
                            SearchSettings(beam_size=5, alpha=0.6, n_best=3))[0]
        assert [h.ids for h in alone] == [h.ids for h in together[row]]
        for a, b in zip(alone, together[row]):
            assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)


@pytest.mark.parametrize("kind", [{"attention": "bahdanau"}, {"attention": "none"},
                                  {"attention": "general", "decoder": "luong", "input_feeding": True, "rnn": "lstm"},
                                  TRANSFORMER, LOCAL_M, LOCAL_P])
@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("batch_size", [1, 5, 16])
def test_refilled_batch_gives_what_one_batch_gives(kind, beam_size, batch_size):
    """With more sentences than batch_size, waiting sentences take over the rows of ended ones
    (in random order, so the memory both widens and narrows): each gets what it gets when all
    sentences decode in one batch."""
    model = random_model(6, **kind)
    src, lengths, max_lengths = random_batch(6, batch=40)

    def decode(size):
        if beam_size == 1:
            return [[h] for h in greedy(model, src, lengths, max_lengths, SearchSettings(batch_size=size))]
        settings = SearchSettings(beam_size=beam_size, alpha=0.6, n_best=beam_size, batch_size=size)
        return beam_search(model, src, lengths, max_lengths, settings)

    for refilled, reference in zip(decode(batch_size), decode(None), strict=True):
        assert [h.ids for h in refilled] == [h.ids for h in reference]
        for a, b in zip(refilled, reference):
            assert a.log_prob == pytest.approx(b.log_prob, abs=1e-5)
            if b.attention is not None:
                torch.testing.assert_close(a.attention, b.attention, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_length_limit_is_respected(family):
    model = random_model(5, **family)
    with torch.no_grad():
        classifier(model).bias[EOS_ID] -= 50.0  # never chooses EOS by itself
    src, lengths, _ = random_batch(5)
    limits = torch.tensor([1, 2, 3, 4, 5, 6])
    for hyps, limit in zip(beam_search(model, src, lengths, limits, SearchSettings(beam_size=3, n_best=3)), limits, strict=True):
        assert all(len(h.ids) == int(limit) - 1 for h in hyps)
        assert all(math.isfinite(h.log_prob) for h in hyps)


def test_translator_beam_and_nbest(dates_model):
    translator = Translator.load(dates_model)
    sentences = ["March 3, 2021", "", "3. Oktober 1990"]
    greedy_out = translator.translate(sentences)
    beam1 = translator.translate(sentences, beam_size=1)
    assert [t.text for t in greedy_out] == [t.text for t in beam1]
    nbest = translator.translate_nbest(sentences, n_best=3, beam_size=4)
    assert [len(n) for n in nbest] == [3, 1, 3]
    assert nbest[1][0].text == ""
    for hyps in (nbest[0], nbest[2]):
        assert hyps[0].log_prob >= hyps[1].log_prob >= hyps[2].log_prob  # alpha 0: ranked by log-probability
        for h in hyps:
            assert h.attention.shape == (len(h.tokens), len(h.source_tokens))


@pytest.mark.parametrize("seed,n_best", [(0, 1), (1, 1), (1, 3), (2, 3)])
def test_early_stop_returns_what_the_full_search_returns(monkeypatch, seed, n_best):
    """A sentence stops once no live hypothesis can enter its n-best; searching on to beam_size
    finished hypotheses (the rule without that bound) finds the same n-best."""
    model = random_model(seed)
    with torch.no_grad():  # sharper distributions, as a trained model has, so that the bound bites
        classifier(model).weight.mul_(4)
    k, alpha = 4, 0.0
    src, lengths, limits = random_batch(11, batch=24)
    early = beam_search(model, src, lengths, limits, SearchSettings(beam_size=k, alpha=alpha, n_best=n_best))
    stopped_early = []
    settled = search.GNMTScoring.settled

    def full_rule(hypotheses, beam_size, n_best, best_live, produced, max_length, alpha):
        if len(hypotheses) < beam_size and settled(hypotheses, beam_size, n_best, best_live, produced, max_length, alpha):
            stopped_early.append(len(hypotheses))
        return len(hypotheses) >= beam_size

    monkeypatch.setattr(search.GNMTScoring, "settled", staticmethod(full_rule))
    full = beam_search(model, src, lengths, limits, SearchSettings(beam_size=k, alpha=alpha, n_best=n_best))
    assert stopped_early                                  # the bound did cut searches short
    for ours, reference in zip(early, full, strict=True):
        assert [h.ids for h in ours] == [h.ids for h in reference]
        assert [h.score for h in ours] == pytest.approx([h.score for h in reference], abs=1e-6)
