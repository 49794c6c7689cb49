"""attnmt explain: the numbers it shows are the model's own, for every attention kind and both families."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_dates_config

from attnmt import AttnmtError, Translator
from attnmt.analysis.explain import ExplainedStep, Explanation, explain, render
from attnmt.cli import main
from attnmt.configfile import config_from_dict
from attnmt.seam import AttentionView, Probe
from attnmt.training.train import train
from attnmt.vocab import SOS_ID

SENTENCE = "Samstag, den 14. März 2026"
RNN_KINDS = [
    {"attention": "bahdanau", "decoder": "bahdanau"},
    {"attention": "concat", "decoder": "luong"},
    {"attention": "dot", "decoder": "luong", "input_feeding": True, "enc_hidden": 24, "dec_hidden": 48},
    {"attention": "general", "decoder": "luong"},
    {"attention": "general", "decoder": "bahdanau", "rnn": "lstm", "dec_layers": 2},
    {"attention": "local_m", "decoder": "luong", "local_window": 2},
    {"attention": "local_p", "decoder": "luong", "input_feeding": True, "local_window": 3},
]


def trained_translator(tmp_path: Path, **model) -> Translator:
    """A tiny model of the given kind, trained for a few seconds on dates (fp32 decoding)."""
    values = tiny_dates_config(tmp_path, **model)
    return Translator.load(train(config_from_dict(values), log=lambda _: None).model_path, "cpu", precision="fp32")


def assert_explains(translator: Translator, explanation: Explanation, weights_of_step) -> None:
    """The output is the greedy translation; each step's weights are the softmax of its scores and
    the model's attention; the chosen token's probabilities multiply to the translation's."""
    (translation,) = translator.translate([SENTENCE], beam_size=1)
    assert explanation.output_tokens == translation.tokens
    decode = translator.config.decode
    cut = len(translation.tokens) == int(len(translation.source_tokens) * decode.max_len_ratio) + decode.max_len_extra
    assert [s.token for s in explanation.steps] == translation.tokens + ([] if cut else ["<eos>"])
    log_prob = 0.0
    for t, step in enumerate(explanation.steps):
        scores = torch.tensor([-math.inf if s is None else s for s in step.scores], dtype=torch.float64)
        factors = np.ones(len(step.weights)) if step.factors is None else np.array(step.factors)
        np.testing.assert_allclose(torch.softmax(scores, 0).numpy() * factors, step.weights, atol=1e-5)
        np.testing.assert_allclose(step.weights, weights_of_step(t, translation), atol=1e-5)
        assert step.next[0][0] == step.token and len(step.next) == len(step.next_uniform) == 5
        assert sum(step.shares) == pytest.approx(1, abs=1e-4) and min(step.shares) >= 0
        log_prob += math.log(step.next[0][1])
    assert not cut, "the output ran to the length limit: the model should end sooner"
    assert log_prob == pytest.approx(translation.log_prob, abs=1e-3)


@pytest.mark.parametrize("kind", RNN_KINDS, ids=lambda k: "-".join(map(str, k.values())))
def test_every_rnn_attention_kind(tmp_path, kind):
    translator = trained_translator(tmp_path, **kind)
    explanation = explain(translator, SENTENCE)
    assert explanation.layer is None and explanation.head is None
    assert explanation.steps[0].keys == translator.tokenize_source(SENTENCE)
    assert_explains(translator, explanation, lambda t, translation: forced_maps(translator, translation)["cross"][0, 0, t])
    assert translator.model.decoder.attention.formula in explanation.score_function
    assert (explanation.steps[0].factors is not None) == (kind["attention"] == "local_p")
    if kind["attention"] == "local_p":
        assert "× Gaussian" in render(explanation, step=1)


def forced_maps(translator: Translator, translation) -> dict[str, np.ndarray]:
    """Every attention map [layers, heads, steps, keys] of one teacher-forced pass over the
    translation and its end of sentence (Translator.attention_maps leaves that step out)."""
    src = torch.tensor([translator.tokenization.src_vocab.encode(translation.source_tokens)])
    tgt_in = torch.tensor([[SOS_ID] + translator.tokenization.tgt_vocab.encode(translation.tokens)])
    with torch.no_grad():
        maps = translator.model.eval().attention_maps(src, torch.tensor([src.shape[1]]), tgt_in)
    return {name: weights[0].numpy() for name, weights in maps.items()}


@pytest.mark.parametrize("kind", ["cross", "decoder"])
@pytest.mark.parametrize("layer", [1, 2])
def test_each_head_of_a_transformer_layer(transformer_dates_model, kind, layer):
    translator = Translator.load(transformer_dates_model, "cpu", precision="fp32")
    (translation,) = translator.translate([SENTENCE], beam_size=1)
    maps = forced_maps(translator, translation)[kind][layer - 1]              # [heads, T + 1, keys]
    for head in range(1, maps.shape[0] + 1):
        explanation = explain(translator, SENTENCE, AttentionView(kind, layer, head))
        assert (explanation.layer, explanation.head) == (layer, head)
        # Decoder self-attention at step t reads <sos> and the t - 1 outputs before: t + 1 keys.
        assert_explains(translator, explanation, lambda t, _, head=head: maps[head - 1, t][: len(
            explanation.steps[t].keys)])
        if kind == "decoder":
            assert explanation.steps[2].keys == ["<sos>", *translation.tokens[:2]]


def test_uniform_attention_is_the_average_of_the_encoder_states(tmp_path):
    translator = trained_translator(tmp_path, attention="general", decoder="luong")
    explanation = explain(translator, SENTENCE)
    network = translator.model
    src = torch.tensor([translator.tokenization.src_vocab.encode(translator.tokenize_source(SENTENCE))])
    with torch.no_grad():
        memory, state = network.encode(src, torch.tensor([src.shape[1]]))
        decoder = network.decoder
        output, _ = decoder._recur(decoder.embed(torch.tensor([[SOS_ID]])), state.hidden)   # h_1
        context = memory.values.mean(1, keepdim=True)                                       # the plain average
        logits = decoder.output_layer(torch.tanh(decoder.combine(torch.cat([context, output], -1))))
    probabilities, ids = torch.softmax(logits[0, 0], -1).topk(5)
    expected = [(translator.tokenization.tgt_vocab.itos[i], p) for i, p in zip(ids.tolist(), probabilities.tolist())]
    assert [t for t, _ in explanation.steps[0].next_uniform] == [t for t, _ in expected]
    np.testing.assert_allclose([p for _, p in explanation.steps[0].next_uniform], [p for _, p in expected], atol=1e-5)


def test_masked_keys_get_no_score_and_no_weight():
    probe = Probe()
    scores = torch.tensor([[[[2.0, 1.0, 5.0]]]])                      # [B, h, T, K]
    allowed = torch.tensor([[[[True, True, False]]]])
    values = torch.ones(1, 1, 3, 2)
    weights = probe.weigh(scores, allowed, values, record=True, over_source=True)
    assert weights[0, 0, 0, 2] == 0 and probe.record.scores[0, 0, 0, 2] == -math.inf
    np.testing.assert_allclose(weights[0, 0, 0, :2], torch.softmax(torch.tensor([2.0, 1.0]), 0), atol=1e-7)
    probe.uniform = True
    uniform = probe.weigh(scores, allowed, values, record=True, over_source=True)
    assert uniform[0, 0, 0].tolist() == [0.5, 0.5, 0.0]
    step = ExplainedStep(1, "x", ["a", "<pad>"], [1.0, None], [1.0, 0.0], [1.0, 0.0], [("x", 1.0)], [("x", 1.0)])
    shown = render(Explanation(["a"], ["x"], "cross", None, None, "score", [step]), 1)
    assert "masked" in shown.splitlines()[-3]


def test_cli_text_and_json(dates_model, capsys):
    tokens = Translator.load(dates_model, "cpu", precision="fp32").translate([SENTENCE])[0].tokens
    assert main(["explain", str(dates_model), SENTENCE]) == 0
    compact = capsys.readouterr().out
    assert f"translation: {' '.join(tokens)}" in compact and "uniform" in compact
    assert main(["explain", str(dates_model), SENTENCE, "--step", "2"]) == 0
    table = capsys.readouterr().out
    assert f"step 2: the model writes {tokens[1]!r}" in table and "weight α_j" in table
    assert main(["explain", str(dates_model), SENTENCE, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"source_tokens", "output_tokens", "steps", "score_function"} <= set(document)
    first = document["steps"][0]
    assert len(first["scores"]) == len(first["weights"]) == len(document["source_tokens"])
    assert all(len(pair) == 2 for pair in first["next"] + first["next_uniform"])


@pytest.mark.parametrize("flags, refusal", [
    (["--step", "99"], "--step 99: this translation has steps 1 to "),
    (["--head", "1"], "an RNN model has one attention"),
    (["--attention", "decoder"], "an RNN model has one attention"),
])
def test_bad_requests_are_one_line(dates_model, flags, refusal, capsys):
    assert main(["explain", str(dates_model), SENTENCE, *flags]) == 2
    err = capsys.readouterr().err
    assert refusal in err and err.count("\n") == 1


def test_transformer_and_baseline_refusals(transformer_dates_model, no_attention_model, capsys):
    translator = Translator.load(transformer_dates_model, "cpu")
    with pytest.raises(AttnmtError, match="head 9: this model's cross attention has heads 1 to 4"):
        explain(translator, SENTENCE, AttentionView(head=9))
    with pytest.raises(AttnmtError, match="layer 3: this model's cross attention has layers 1 to 2"):
        explain(translator, SENTENCE, AttentionView(layer=3))
    with pytest.raises(AttnmtError, match="attnmt plot --attention encoder"):
        explain(translator, SENTENCE, AttentionView("encoder"))
    with pytest.raises(AttnmtError, match="nothing to explain: the sentence is empty"):
        explain(translator, "   ")
    assert main(["explain", str(no_attention_model), SENTENCE]) == 2
    assert "this model has no attention (model.attention none)" in capsys.readouterr().err


def test_the_server_explains_as_the_cli(dates_model):
    from fastapi.testclient import TestClient

    from attnmt.serve import create_app

    translator = Translator.load(dates_model, "cpu", precision="fp32")
    with TestClient(create_app(translator)) as client:
        answer = client.post("/explain", json={"text": SENTENCE})
        assert answer.status_code == 200, answer.text
        assert answer.json() == json.loads(json.dumps(explain(translator, SENTENCE).to_dict()))
        refused = client.post("/explain", json={"text": SENTENCE, "head": 2})
        assert refused.status_code == 422 and "head 2: this model's cross attention has heads 1 to 1" in refused.json()["error"]
        assert client.post("/explain", json={"text": "x" * 5000}).status_code == 413
