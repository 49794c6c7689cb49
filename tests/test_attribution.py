"""Attribution beside attention (attnmt explain --attribution): each method against a computation by
hand, on a linear toy and on tiny trained models of both families."""

import json
import math

import numpy as np
import pytest
import torch
from test_explain import RNN_KINDS, SENTENCE, trained_translator
from torch import nn

from attnmt import AttnmtError, Translator
from attnmt.analysis.attribution import (
    Outputs,
    Pair,
    attribute,
    attribute_steps,
    gradient_x_input,
    integrated_gradients,
    make_pair,
    reference_network,
    render,
    word_attribution,
)
from attnmt.cli import main
from attnmt.seam import forced_logits
from attnmt.vocab import EOS_ID, PAD_ID, SOS_ID

WORDS = SENTENCE.split()      # Samstag, den 14. März 2026
READER = ["Samstag", ",", "den", "14", ".", "März", "2026"]  # the words attribution shows: punctuation apart


class LinearToy(nn.Module):
    """logits_t = W Σ_j e_j + U e(y_{t-1}): linear in the embeddings (pads embed to zero)."""

    def __init__(self, shared: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.source = nn.Embedding(7, 3, padding_idx=PAD_ID)
        self.target = self.source if shared else nn.Embedding(7, 3, padding_idx=PAD_ID)
        self.w, self.u = nn.Linear(3, 7, bias=False), nn.Linear(3, 7, bias=False)

    def token_embeddings(self) -> tuple[nn.Embedding, nn.Embedding]:
        return self.source, self.target

    def features(self, src, src_lengths, tgt_in):
        return self.w(self.source(src).sum(1, keepdim=True)) + self.u(self.target(tgt_in)), None

    def output_layer(self, features):
        return features


def toy_pair() -> Pair:
    """Three source words of one piece each (ids 4 5 4); the target <sos> 5 6, then <eos>."""
    return Pair(["a", "b", "a"], torch.tensor([[4, 5, 4]]), [0, 1, 2], torch.tensor([[SOS_ID, 5, 6]]), [5, 6, EOS_ID],
                [[5, 4], [4, 4], [4, 5]])


@pytest.mark.parametrize("shared", [False, True], ids=["own embeddings", "shared embeddings"])
def test_gradient_x_input_of_a_linear_toy_is_the_hand_computation(shared):
    toy, pair = LinearToy(shared), toy_pair()
    outputs = Outputs(torch.tensor([0, 1, 2]), torch.tensor([5, 6, EOS_ID]))
    source, prefix, f = gradient_x_input(toy, pair, outputs)
    with torch.no_grad():
        e, t = toy.source(pair.src[0]), toy.target(pair.tgt_in[0])             # [S, D], [T, D]
        for row, token in enumerate([5, 6, EOS_ID]):
            z = toy.w.weight @ e.sum(0) + toy.u.weight @ t[row]                 # the logits of step row + 1
            assert f[row] == pytest.approx(float(torch.log_softmax(z, 0)[token]), abs=1e-6)
            dz = torch.nn.functional.one_hot(torch.tensor(token), 7) - torch.softmax(z, 0)   # ∂f/∂z
            np.testing.assert_allclose(source[row], e @ (toy.w.weight.T @ dz), atol=1e-6)
            expected_prefix = torch.zeros(3)
            expected_prefix[row] = t[row] @ (toy.u.weight.T @ dz)                # only the input this step reads
            np.testing.assert_allclose(prefix[row], expected_prefix, atol=1e-6)


def test_a_linear_contrast_is_attributed_exactly_by_both_gradient_methods():
    """f = log p(X) − log p(Y) = z_X − z_Y is linear: gradient × input and integrated gradients (any
    step count) are both (W_X − W_Y) · e_j, and add up to f − f(0) = f exactly."""
    toy, pair = LinearToy(), toy_pair()
    outputs = Outputs(torch.tensor([1]), torch.tensor([6]), torch.tensor([3]))
    grad_source, grad_prefix, f = gradient_x_input(toy, pair, outputs)
    ig_source, ig_prefix, f_ig, baseline = integrated_gradients(toy, pair, outputs, steps=3)
    e, t = toy.source(pair.src[0]).detach(), toy.target(pair.tgt_in[0]).detach()
    by_hand = e @ (toy.w.weight[6] - toy.w.weight[3]).detach()
    for source, prefix in ((grad_source, grad_prefix), (ig_source, ig_prefix)):
        np.testing.assert_allclose(source[0], by_hand, atol=1e-6)
        assert prefix[0, 1] == pytest.approx(float(t[1] @ (toy.u.weight[6] - toy.u.weight[3]).detach()), abs=1e-6)
    assert float(baseline) == pytest.approx(0, abs=1e-7)
    assert float(ig_source.sum() + ig_prefix.sum()) == pytest.approx(float(f_ig), abs=1e-5)
    assert float(f) == pytest.approx(float(f_ig))


def test_occlusion_of_a_linear_toy_drops_each_word_once():
    toy, pair = LinearToy(), toy_pair()
    steps = attribute_steps(toy, pair, Outputs(torch.tensor([0]), torch.tensor([5])), "occlusion", [str(i) for i in range(7)])
    with torch.no_grad():
        def f(ids):
            return float(torch.log_softmax(toy.features(torch.tensor([ids]), None, pair.tgt_in)[0][0, 0], 0)[5])
        assert steps[0].output == pytest.approx(f([4, 5, 4]), abs=1e-5)
        assert steps[0].without == pytest.approx([f(ids) for ids in pair.without], abs=1e-5)
        assert steps[0].source == pytest.approx([f([4, 5, 4]) - f(ids) for ids in pair.without], abs=1e-5)
    assert steps[0].attention is None and steps[0].prefix is None


@pytest.fixture(scope="module")
def rnn(dates_model) -> Translator:
    return Translator.load(dates_model, "cpu", precision="fp32")


@pytest.fixture(scope="module")
def transformer(transformer_dates_model) -> Translator:
    return Translator.load(transformer_dates_model, "cpu", precision="fp32")


@pytest.mark.parametrize("family", ["rnn", "transformer"])
@pytest.mark.parametrize("step", [1, 6])
def test_integrated_gradients_add_up_to_the_change_with_enough_steps(family, step, request):
    """The midpoint rule's error falls as 1/m² where f is smooth (the GRU), as 1/m across the kinks
    of the Transformer's ReLUs, unevenly: 4,000 steps bring both within 1e-3."""
    translator = request.getfixturevalue(family)
    attribution = attribute(translator, SENTENCE, "ig", step=step, ig_steps=4000)
    assert attribution.target_tokens == translator.translate([SENTENCE], beam_size=1)[0].tokens
    (attributed,) = attribution.steps
    c = attributed.completeness
    assert c is not None and c.holds and abs(c.total - c.change) < 1e-3, c
    assert 0 <= attributed.source_share <= 1 and len(attributed.prefix) == step


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_occlusion_is_the_probability_drop_of_running_without_the_word(family, request):
    translator = request.getfixturevalue(family)
    attribution = attribute(translator, SENTENCE, "occlusion", step=6)          # the first digit of the month
    step = attribution.steps[0]
    target = [SOS_ID] + translator.tokenization.tgt_vocab.encode(attribution.target_tokens)
    written = translator.tokenization.tgt_vocab.stoi[step.token]

    def probability(sentence: str) -> float:
        ids = translator.tokenization.src_vocab.encode(translator.src_tokenizer.tokenize(sentence))
        with torch.no_grad():
            logits = forced_logits(translator.model, torch.tensor([ids]), torch.tensor([len(ids)]), torch.tensor([target]))
        return float(torch.softmax(logits[0, 5], -1)[written])

    full = probability(SENTENCE)
    assert math.exp(step.output) == pytest.approx(full, abs=1e-5)
    # Punctuation is a word of its own, and dropping it keeps the rest of its whitespace word.
    assert attribution.source_words == ["Samstag", ",", "den", "14", ".", "März", "2026"]
    without = [", den 14. März 2026", "Samstag den 14. März 2026", "Samstag, 14. März 2026", "Samstag, den . März 2026",
               "Samstag, den 14 März 2026", "Samstag, den 14. 2026", "Samstag, den 14. März"]
    for w, sentence in enumerate(without):
        dropped = probability(sentence)
        assert math.exp(step.without[w]) == pytest.approx(dropped, abs=1e-5)
        assert step.source[w] == pytest.approx(math.log(full) - math.log(dropped), abs=1e-4)


@pytest.mark.parametrize("method", ["grad", "ig", "occlusion"])
def test_a_contrast_is_the_difference_of_the_two_single_attributions(rnn, method):
    written = attribute(rnn, SENTENCE, method, step=7, ig_steps=20).steps[0]
    other = "5" if written.token != "5" else "6"
    contrast = attribute(rnn, SENTENCE, method, step=7, contrast=other, ig_steps=20).steps[0]
    pair = make_pair(rnn, WORDS, rnn.tokenization.tgt_vocab.encode(rnn.translate([SENTENCE], beam_size=1)[0].tokens),
                     method == "occlusion", punctuation=True)
    (alone,) = attribute_steps(reference_network(rnn), pair, Outputs(torch.tensor([6]), torch.tensor(
        [rnn.tokenization.tgt_vocab.stoi[other]])), method, rnn.tokenization.tgt_vocab.itos, 20)
    assert contrast.contrast == other and contrast.output == pytest.approx(written.output - alone.output, abs=1e-5)
    np.testing.assert_allclose(contrast.source, np.subtract(written.source, alone.source), atol=1e-4)
    if method != "occlusion":
        np.testing.assert_allclose(contrast.prefix, np.subtract(written.prefix, alone.prefix), atol=1e-4)


def test_pieces_are_merged_into_words_as_tokenize_words_splits_them(rnn):
    attribution = attribute(rnn, SENTENCE, "grad")
    pieces, _ = rnn.src_tokenizer.tokenize_words(WORDS)
    pair = make_pair(rnn, WORDS, rnn.tokenization.tgt_vocab.encode(attribution.target_tokens), punctuation=True)
    owners = pair.owners
    assert pair.src[0].tolist() == rnn.tokenization.src_vocab.encode(pieces) and attribution.source_words == READER
    for w, word in enumerate(READER):  # each word owns exactly its own characters' pieces
        assert "".join(p for p, owner in zip(pieces, owners) if owner == w) == word
    rows = len(attribution.steps)
    by_piece, _, _ = gradient_x_input(reference_network(rnn), pair, Outputs(torch.arange(rows), torch.tensor(pair.outputs)))
    (translation,) = rnn.translate([SENTENCE], beam_size=1)
    for r, step in enumerate(attribution.steps):
        for w in range(len(READER)):
            mine = [j for j, owner in enumerate(owners) if owner == w]
            assert step.source[w] == pytest.approx(float(by_piece[r, mine].sum()), abs=1e-5)
            if r < len(translation.tokens):   # the attention row: the translation's, summed the same way
                assert step.attention[w] == pytest.approx(float(translation.attention[r, mine].sum()), abs=1e-4)
    assert "▁" in pieces and -1 in owners        # the character model's spaces, of no word


@pytest.mark.slow
@pytest.mark.parametrize("kind", RNN_KINDS, ids=lambda k: "-".join(map(str, k.values())))
def test_every_rnn_attention_kind_is_attributed(tmp_path, kind):
    """Completeness holds for every kind but local-p, whose window cuts positions off as its centre
    moves with the input: f jumps on the way, which no step count closes (the check says so)."""
    translator = trained_translator(tmp_path, **kind)
    attribution = attribute(translator, SENTENCE, "ig", ig_steps=100)
    assert all(len(s.source) == len(s.attention) == len(READER) for s in attribution.steps)
    assert all(s.completeness.holds for s in attribution.steps) or kind["attention"] == "local_p"


def test_transformer_layers_heads_and_the_model_without_attention(transformer, no_attention_model):
    with pytest.raises(AttnmtError, match="head 9: this model's cross attention has heads 1 to 4"):
        attribute(transformer, SENTENCE, "grad", head=9)
    maps = transformer.attention_maps(transformer.translate([SENTENCE], beam_size=1)[0])["cross"]
    step = attribute(transformer, SENTENCE, "grad", step=1, layer=2, head=3).steps[0]
    _, owners = transformer.src_tokenizer.tokenize_words(WORDS)  # "den", whitespace word 1, is READER's word 2
    assert step.attention[2] == pytest.approx(float(maps[1, 2, 0, np.equal(owners, 1)].sum()), abs=1e-4)
    baseline = Translator.load(no_attention_model, "cpu", precision="fp32")
    attribution = attribute(baseline, SENTENCE, "ig", step=2, ig_steps=100)
    assert attribution.steps[0].attention is None and attribution.steps[0].completeness.holds
    assert "this model has no attention" in render(attribution, 2)


def test_word_attribution_averages_a_target_word_over_its_pieces(rnn):
    (matrix,) = word_attribution(rnn, [(WORDS, ["2026-03-14", "x"])], "grad")
    pieces, owners = rnn.tgt_tokenizer.tokenize_words(["2026-03-14", "x"])
    pair = make_pair(rnn, WORDS, rnn.tokenization.tgt_vocab.encode(pieces))
    steps = attribute_steps(reference_network(rnn), pair, Outputs(torch.arange(len(pieces)), torch.tensor(
        pair.outputs[:-1])), "grad", rnn.tokenization.tgt_vocab.itos)
    first = [s.source for s, owner in zip(steps, owners, strict=True) if owner == 0]
    assert matrix.shape == (2, len(WORDS))
    np.testing.assert_allclose(matrix[0], np.mean(first, 0), atol=1e-5)
    assert word_attribution(rnn, [(["Samstag"], ["x"])], "occlusion")[0].tolist() == [[1.0]]


def test_cli_text_and_json(dates_model, capsys):
    assert main(["explain", str(dates_model), SENTENCE, "--attribution", "grad"]) == 0
    compact = capsys.readouterr().out
    assert "most attention" in compact and "most attribution" in compact
    assert main(["explain", str(dates_model), SENTENCE, "--attribution", "ig", "--ig-steps", "8", "--step", "2",
                 "--contrast", "5", "--target", "2016-03-14"]) == 0
    table = capsys.readouterr().out
    assert "step 2: why '0' rather than '5'" in table and "completeness" in table and "translation:  2 0 1 6" in table
    assert main(["explain", str(dates_model), SENTENCE, "--attribution", "occlusion", "--step", "1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["method"] == "occlusion" and document["source_words"] == READER
    assert len(document["steps"]) == 1 and len(document["steps"][0]["without"]) == len(READER)


def test_pieces_of_no_word_are_attributed_apart():
    """A character model's spaces between words belong to no word: their attribution is shown apart
    (`between_words`), so that what a step shows adds up to the total completeness checks (issue 60)."""
    toy, itos = LinearToy(), [str(i) for i in range(7)]
    spaced = Pair(["a", "b"], torch.tensor([[4, 6, 5]]), [0, -1, 1], torch.tensor([[SOS_ID, 5, 6]]), [5, 6, EOS_ID], [])
    outputs = Outputs(torch.tensor([0, 1, 2]), torch.tensor([5, 6, EOS_ID]))
    pieces, _, _ = gradient_x_input(toy, spaced, outputs)
    for r, step in enumerate(attribute_steps(toy, spaced, outputs, "grad", itos)):
        assert step.source == pytest.approx([float(pieces[r, 0]), float(pieces[r, 2])], abs=1e-6)
        assert step.between_words == pytest.approx(float(pieces[r, 1]), abs=1e-6)
    for step in attribute_steps(toy, spaced, outputs, "ig", itos, ig_steps=3):
        shown = sum(step.source) + step.between_words + sum(step.prefix)
        assert step.between_words != 0 and shown == pytest.approx(step.completeness.total, abs=1e-5)
    assert attribute_steps(toy, toy_pair(), outputs, "grad", itos)[0].between_words is None   # every piece a word's
    assert attribute_steps(toy, toy_pair(), outputs, "occlusion", itos)[0].between_words is None


def test_the_shares_shown_add_up_to_the_completeness_total(dates_model, capsys):
    """attnmt explain --attribution ig, --json and as text: the words', the spaces' and the prefix's
    shares add up to the completeness total it prints."""
    assert main(["explain", str(dates_model), SENTENCE, "--attribution", "ig", "--ig-steps", "8", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    for step in steps:
        shown = sum(step["source"]) + (step.get("between_words") or 0) + sum(step["prefix"])
        assert shown == pytest.approx(step["completeness"]["total"], abs=5e-5), step   # each to 6 decimals
    assert main(["explain", str(dates_model), SENTENCE, "--attribution", "ig", "--ig-steps", "8", "--step", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["word", "attention", "attribution"])
    rows = lines[header + 1: header + 1 + len(READER) + 1]                 # each word, then the spaces between them
    assert rows[-1].split() == ["(between", "words)", f"{steps[1]['between_words']:.4f}"]
    prefix = next(line for line in lines if "the translation so far" in line).split(": ", 1)[1].split(" | ")
    shown = sum(float(row.split()[-1]) for row in rows) + sum(float(p.split()[-1]) for p in prefix)
    completeness = next(line for line in lines if "completeness:" in line)
    assert "(source words, between words and prefix)" in completeness
    total = float(completeness.split("add up to ")[1].split(",")[0])
    assert total == pytest.approx(steps[1]["completeness"]["total"], abs=1e-4)
    assert shown == pytest.approx(total, abs=1e-4 * len(rows + prefix))   # each shown to 4 decimals


@pytest.mark.parametrize("flags, refusal", [
    (["--step", "99"], "--step 99: this translation has steps 1 to "),
    (["--step", "1", "--contrast", "Fahrrad"], "--contrast 'Fahrrad': the target vocabulary has no such token"),
    (["--contrast", "5"], "--contrast needs --step"),
    (["--step", "1", "--contrast", "2"], "--contrast 2: step 1 writes '2' itself"),
    (["--target", " "], "--target is empty"),
    (["--attention", "decoder"], "leave out --attention decoder"),
    (["--ig-steps", "5", "--attribution", "grad"], "--ig-steps goes with --attribution ig"),
])
def test_bad_requests_are_one_line(dates_model, flags, refusal, capsys):
    assert main(["explain", str(dates_model), SENTENCE, "--attribution", "ig", *flags]) == 2
    err = capsys.readouterr().err
    assert refusal in err and err.count("\n") == 1, err


@pytest.mark.parametrize("args, refusal", [
    (["   ", "--attribution", "grad"], "nothing to attribute: the sentence is empty"),
    (["Samstag", "--attribution", "occlusion"], "a sentence of one word would leave nothing to translate"),
    ([SENTENCE, "--target", "2026-03-14"], "--target, --contrast and --ig-steps go with --attribution"),
])
def test_bad_sentences_are_one_line(dates_model, args, refusal, capsys):
    assert main(["explain", str(dates_model), *args]) == 2
    err = capsys.readouterr().err
    assert refusal in err and err.count("\n") == 1, err


def test_punctuation_is_a_word_of_its_own_in_the_attribution(transformer):
    """The word view glued punctuation to words: in "I am very tired today." the period's attention
    went to "today."; now each mark at a word's start or end is a word, a mark inside a word stays."""
    from attnmt.tokenize import WordTokenizer, punctuation_apart, without_span

    attribution = attribute(transformer, "I am very tired today.", "grad")
    assert attribution.source_words == ["I", "am", "very", "tired", "today", "."]
    words = ['("Hi,', "don't", "...", "x"]
    tokens, owners = WordTokenizer().tokenize_words(words)
    shown, new_owners, spans = punctuation_apart(words, tokens, owners)
    assert shown == ['("', "Hi", ",", "don't", "...", "x"]
    assert new_owners == [0, 0, 1, 2, 3, 3, 3, 4, 4, 4, 5]  # ( " | Hi | , | don ' t | . . . | x
    assert without_span(words, spans[1]) == ['(",', "don't", "...", "x"]
    assert without_span(words, spans[4]) == ['("Hi,', "don't", "x"]
    lowered, _, _ = punctuation_apart(["Today."], ["today", "."], [0, 0])   # a lowercasing tokenizer
    assert lowered == ["Today", "."]
    assert punctuation_apart(["a\u2026"], ["a", "..."], [0, 0])[0] == ["a\u2026"]  # normalized: not cut
