"""What a pretrained (OPUS-MT, Marian) model needs of attnmt, each checked on models attnmt builds itself:
a vocabulary with its own special ids, a source that ends with the end token, sinusoids in halves,
the SiLU feed-forward, tokens never generated, and beam search scored as Hugging Face scores it."""

from __future__ import annotations

import math
import random

import pytest
import torch
from torch.testing import assert_close

from attnmt.analysis.explain import explain
from attnmt.batch import Framing, collate
from attnmt.configfile import config_from_dict
from attnmt.errors import AttnmtError
from attnmt.families import build_model
from attnmt.families.transformer.network import FeedForward, sinusoids
from attnmt.seam import forced_logits
from attnmt.search import (
    GNMTScoring,
    Hypothesis,
    LengthPowerEarlyScoring,
    LengthPowerScoring,
    SearchSettings,
    Symbols,
    beam_search,
    greedy,
)
from attnmt.tokenize import make_tokenizer
from attnmt.translate import Translator
from attnmt.vocab import EOS_ID, SOS_ID, UNK_ID, Tokenization, Vocabulary

WORDS = [f"w{i}" for i in range(20)]
SENTENCES = ["w1 w2 w3", "w4 w5 w6 w7 w8", "w9", "w10 w11 w3 w3 w12 w13", "w19 w18 w17 w16"]


def translator(seed: int = 0, **settings) -> Translator:
    """A random Transformer over a word vocabulary, EOS made likely so that outputs end at varied lengths."""
    decode = settings.pop("decode", {})
    config = config_from_dict({"data": {"format": "dates"}, "tokenizer": {"level": "word"}, "decode": decode,
                               "model": {"arch": "transformer", "emb_dim": 16, "heads": 2, "ff_dim": 32,
                                         "enc_layers": 2, "dec_layers": 2, "dropout": 0.0, **settings}})
    vocab = Vocabulary(WORDS)
    torch.manual_seed(seed)
    model = build_model(config.model, len(vocab), len(vocab)).eval()
    with torch.no_grad():
        model.classifier.bias[EOS_ID] += 1.0
    word = make_tokenizer("word")
    return Translator(model, config, Tokenization(word, word, vocab, vocab))


def moved(vocab: Vocabulary, seed: int) -> tuple[Vocabulary, list[int]]:
    """`vocab` in another order, <pad> kept at 0, every other token (the unknown, start and end tokens
    among them) moved, and for each new id the old one."""
    order = list(range(1, len(vocab)))
    random.Random(seed).shuffle(order)
    old_of = [0] + order                                   # new id -> old id
    new_of = {old: new for new, old in enumerate(old_of)}
    result = Vocabulary.from_list([vocab.itos[i] for i in old_of], {"unk": new_of[UNK_ID], "sos": new_of[SOS_ID],
                                                                    "eos": new_of[EOS_ID]})
    assert (result.unk_id, result.sos_id, result.eos_id) != (UNK_ID, SOS_ID, EOS_ID)
    return result, old_of


def permuted(original: Translator, seed: int) -> Translator:
    """The same model over vocabularies in another order (`moved`; one vocabulary of both sides stays
    one), each weight indexed by a token moved with it."""
    text = original.tokenization
    src, src_old = moved(text.src_vocab, seed)
    tgt, tgt_old = (src, src_old) if text.tgt_vocab is text.src_vocab else moved(text.tgt_vocab, seed)
    state = original.model.state_dict()
    state["src_embedding.weight"] = state["src_embedding.weight"][src_old]
    for name in ("tgt_embedding.weight", "classifier.weight", "classifier.bias"):
        state[name] = state[name][tgt_old]
    model = build_model(original.config.model, len(src), len(tgt)).eval()
    model.load_state_dict(state)
    return Translator(model, original.config, Tokenization(text.src_tokenizer, text.tgt_tokenizer, src, tgt))


@pytest.mark.parametrize("beam", [1, 4])
def test_a_vocabulary_with_its_own_special_ids_translates_as_attnmts_order(beam):
    """Searches, attention maps and explain take the start and end tokens from the vocabulary: a model
    whose tokens (specials included) sit at other ids translates exactly as the same model in attnmt's order."""
    ours = translator(1, source_eos=True)
    theirs = permuted(ours, seed=3)
    expected, got = (t.translate(SENTENCES, beam_size=beam) for t in (ours, theirs))
    assert [t.tokens for t in got] == [t.tokens for t in expected] and any(len(t.tokens) > 1 for t in got)
    assert [t.log_prob for t in got] == pytest.approx([t.log_prob for t in expected], abs=1e-5)
    for a, b in zip(expected, got):
        assert b.source_tokens == a.source_tokens and b.source_tokens[-1] == "<eos>"
        for name, weights in ours.attention_maps(a).items():
            assert_close(theirs.attention_maps(b)[name], weights, atol=1e-5, rtol=1e-5)
    greedy_tokens = ours.translate([SENTENCES[3]])[0].tokens
    assert explain(theirs, SENTENCES[3]).output_tokens == explain(ours, SENTENCES[3]).output_tokens == greedy_tokens


def test_the_source_end_token_is_read_where_the_model_reads_one():
    plain, ending = translator(2), translator(2, source_eos=True)
    assert plain.tokenize_source("w1 w2") == ["w1", "w2"]
    assert ending.tokenize_source("w1 w2") == ["w1", "w2", "<eos>"] and ending.tokenize_source("") == []
    assert ending.source_word_tokens(["w1", "w2"]) == (["w1", "w2", "<eos>"], [0, 1, -1])
    # the same weights read the end token: the translation's attention has a column for it, its numbers differ
    with_end, without = ending.translate(["w4 w5 w6"])[0], plain.translate(["w4 w5 w6"])[0]
    assert with_end.attention.shape[1] == 4 and without.attention.shape[1] == 3
    assert with_end.log_prob != without.log_prob
    # training frames the source the same way
    batch = collate([([5, 6], [7]), ([8], [9, 10])], [0, 1], framing=Framing(sos=11, eos=12, source_eos=13))
    assert batch.src.tolist() == [[5, 6, 13], [8, 13, 0]] and batch.src_lengths.tolist() == [3, 2]
    assert batch.tgt_in.tolist() == [[11, 7, 0], [11, 9, 10]] and batch.tgt_out.tolist() == [[7, 12, 0], [9, 10, 12]]
    text = ending.tokenization
    assert Framing.of(text, True) == Framing(SOS_ID, EOS_ID, EOS_ID) and Framing.of(text, False).source_eos is None


def test_sinusoids_in_halves_are_marians_layout_of_the_same_waves():
    positions, dim = torch.arange(7).unsqueeze(0), 10
    halves = sinusoids(positions, dim, "halves")[0]
    # Marian's table: row p = [sin(p w_0) .. sin(p w_4) | cos(p w_0) .. cos(p w_4)], w_i = 10000^(-2i/d)
    table = torch.tensor([[math.sin(p / 10000 ** (2 * i / dim)) for i in range(dim // 2)]
                          + [math.cos(p / 10000 ** (2 * i / dim)) for i in range(dim // 2)] for p in range(7)])
    assert_close(halves, table, atol=1e-6, rtol=1e-5)
    interleaved = sinusoids(positions, dim)[0]
    assert_close(interleaved[:, 0::2], halves[:, : dim // 2]) and assert_close(interleaved[:, 1::2], halves[:, dim // 2:])
    model = translator(0, sinusoid_layout="halves").model        # d 16: embeddings scaled by 4
    with torch.no_grad():
        embedded = model.embed(model.tgt_embedding, torch.tensor([[5]]), torch.tensor([[3]]))[0, 0]
        assert_close(embedded, model.tgt_embedding.weight[5] * 4 + sinusoids(torch.tensor([[3]]), 16, "halves")[0, 0])


def test_the_silu_feed_forward_is_w2_x_sigmoid_x_of_w1():
    torch.manual_seed(0)
    block, x = FeedForward(6, 8, "silu", 0.0), torch.randn(3, 6)
    hidden = block[0](x)
    assert_close(block(x), block[3](hidden * torch.sigmoid(hidden)))


def test_tokens_never_generated_are_never_written_and_the_rest_keep_their_probabilities():
    free = translator(4)
    banned = translator(4, decode={"never_generate": ["w3", "w5"]})
    with torch.no_grad():                       # make the banned tokens the most likely ones
        for t in (free, banned):
            t.model.classifier.bias[[t.tokenization.tgt_vocab.stoi["w3"], t.tokenization.tgt_vocab.stoi["w5"]]] += 6
    for beam in (1, 3):
        assert any({"w3", "w5"} & set(t.tokens) for t in free.translate(SENTENCES, beam_size=beam))
        outputs = banned.translate(SENTENCES, beam_size=beam)
        assert not any({"w3", "w5"} & set(t.tokens) for t in outputs)
    # -inf after the softmax, as Hugging Face bans: an output's log-probability is the model's own
    # distribution over the whole vocabulary, the banned tokens' share still in it
    output = outputs[0]
    vocab = banned.tokenization.tgt_vocab
    src = torch.tensor([vocab.encode(output.source_tokens)])
    target = vocab.encode(output.tokens) + [vocab.eos_id]
    with torch.no_grad():
        logits = forced_logits(banned.model, src, torch.tensor([src.shape[1]]), torch.tensor([[vocab.sos_id] + target[:-1]]))
    expected = torch.log_softmax(logits.float(), -1)[0, torch.arange(len(target)), target].sum()
    assert output.log_prob == pytest.approx(float(expected), abs=1e-4)


def test_a_token_never_generated_must_be_one_the_vocabulary_has_and_not_the_end():
    with pytest.raises(AttnmtError, match=r"^decode.never_generate: 'nope' not in the target vocabulary$"):
        translator(0, decode={"never_generate": ["w1", "nope"]})
    with pytest.raises(AttnmtError, match=r"^decode.never_generate: '<eos>' is the end token: an output could never end$"):
        translator(0, decode={"never_generate": ["<eos>"]})


def hypothesis(score: float) -> Hypothesis:
    return Hypothesis([1], score, score, None)


def test_hugging_faces_rules_keep_the_best_finished_and_stop_by_its_heuristic():
    kept: list[Hypothesis] = []
    for score in (-3.0, -1.0, -2.0, -0.5):
        LengthPowerScoring.keep(kept, hypothesis(score), 3)
    assert [h.score for h in kept] == [-0.5, -1.0, -2.0]           # attnmt's gnmt keeps the first three instead
    first: list[Hypothesis] = []
    for score in (-3.0, -1.0, -2.0, -0.5):
        GNMTScoring.keep(first, hypothesis(score), 3)
    assert [h.score for h in first] == [-3.0, -1.0, -2.0]
    assert LengthPowerScoring.score(-6.0, 4, 1.0) == -1.5 and GNMTScoring.score(-6.0, 1, 1.0) == -6.0
    # done once beam_size have finished and the best live one, at its length so far, is no better than the worst kept
    assert not LengthPowerScoring.settled(kept[:2], 3, 1, -10.0, 5, 100, 1.0)
    assert LengthPowerScoring.settled(kept, 3, 1, -10.0, 5, 100, 1.0)          # -10 / 5 = -2.0: not better
    assert not LengthPowerScoring.settled(kept, 3, 1, -9.0, 5, 100, 1.0)       # -1.8 beats -2.0
    # with generate's early_stopping: done once beam_size have finished, however good the live one is
    assert LengthPowerEarlyScoring.settled(kept, 3, 1, -0.1, 5, 100, 1.0)
    assert not LengthPowerEarlyScoring.settled(kept[:2], 3, 1, -100.0, 5, 100, 1.0)


def test_beam_search_under_hugging_faces_rules_ranks_by_log_probability_over_length():
    model = translator(5).model
    src = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 0]])
    lengths, limits = torch.tensor([4, 3]), torch.tensor([12, 12])
    beams = beam_search(model, src, lengths, limits, SearchSettings(beam_size=4, alpha=1.0, n_best=4, scoring="length_power"))
    gnmt = beam_search(model, src, lengths, limits, SearchSettings(beam_size=4, alpha=1.0, n_best=4))
    for hypotheses in beams:
        assert [h.score for h in hypotheses] == sorted((h.score for h in hypotheses), reverse=True)
        for h in hypotheses:
            assert h.score == pytest.approx(h.log_prob / (len(h.ids) + 1))
    assert [[h.ids for h in b] for b in beams] != [[h.ids for h in b] for b in gnmt]   # the option changes the search
    assert [h.ids for h in greedy(model, src, lengths, limits, SearchSettings(symbols=Symbols()))] == [
        b[0].ids for b in beam_search(model, src, lengths, limits,
                                      SearchSettings(beam_size=1, alpha=1.0, scoring="length_power"))]
