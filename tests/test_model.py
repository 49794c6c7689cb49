"""The whole network: every architecture learns a tiny corpus; padding, fast path, search, loss."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from torch.testing import assert_close

from attnmt.batch import collate, pad
from attnmt.config import Config, DataConfig, TrainConfig, validate
from attnmt.errors import AttnmtError
from attnmt.families.rnn.config import RNNConfig
from attnmt.families.rnn.encoder import Encoder
from attnmt.families.rnn.network import RNNEncoderDecoder
from attnmt.seam import forced_logits
from attnmt.search import greedy
from attnmt.training.step import TeacherForced, make_optimizer, sequence_loss
from attnmt.vocab import EOS_ID, PAD_ID, SOS_ID

VOCAB = 12
ATTENTIONS = ["bahdanau", "dot", "general", "concat", "none"]


def greedy_ids(model: RNNEncoderDecoder, src: torch.Tensor, lengths: torch.Tensor, max_lengths: torch.Tensor) -> torch.Tensor:
    """Greedy outputs as one tensor [B, T]: each sentence's ids, then EOS, then PAD."""
    return pad([h.ids + [EOS_ID] for h in greedy(model, src, lengths, max_lengths)])


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors run fastest on one thread (and do not fight over a shared CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_config(rnn="gru", order="bahdanau", attention="bahdanau", input_feeding=False, bidirectional=True,
                enc_layers=1, dec_layers=1, bridge="linear", dropout=0.0, emb=16, dec_hidden=32,
                teacher_forcing=1.0) -> RNNConfig:
    # enc_hidden x directions == dec_hidden, so `dot` and `copy` are always possible.
    model = RNNConfig(rnn=rnn, emb_dim=emb, enc_hidden=dec_hidden // (2 if bidirectional else 1),
                      enc_layers=enc_layers, bidirectional=bidirectional, dec_hidden=dec_hidden,
                      dec_layers=dec_layers, attention=attention, attn_dim=16, decoder=order,
                      input_feeding=input_feeding, bridge=bridge, dropout=dropout, teacher_forcing=teacher_forcing)
    validate(Config(data=DataConfig(path="unused"), model=model))
    return model


def make_model(seed=0, src_vocab=VOCAB, tgt_vocab=VOCAB, **kwargs) -> RNNEncoderDecoder:
    torch.manual_seed(seed)
    return RNNEncoderDecoder(make_config(**kwargs), src_vocab, tgt_vocab)


def logits_and_weights(model, src: torch.Tensor, lengths: torch.Tensor, tgt_in: torch.Tensor):
    """The teacher-forced pass of the seam: logits [B, T, V] (the output layer over the features) and
    the attention weights [B, T, S] (or None)."""
    features, weights = model.features(src, lengths, tgt_in)
    return model.output_layer(features), weights


def decoder_logits(decoder, tgt_in: torch.Tensor, state, memory, teacher_forcing: float = 1.0):
    """Decoder.features at a given teacher-forcing rate, through the output layer: logits and weights."""
    features, weights = decoder.features(tgt_in, state, memory, teacher_forcing)
    return decoder.output_layer(features), weights


def tiny_corpus(seed=0, n=8):
    rng = random.Random(seed)
    return [([rng.randrange(4, VOCAB) for _ in range(rng.randint(3, 7))],
             [rng.randrange(4, VOCAB) for _ in range(rng.randint(3, 7))]) for _ in range(n)]


def lstm_or_gru_state_equal(a, b, **kw):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b) == 2
        for x, y in zip(a, b):
            assert_close(x, y, **kw)
    else:
        assert_close(a, b, **kw)


# ---------------------------------------------------------------- config checks

def test_dot_attention_needs_matching_widths():
    model = RNNConfig(enc_hidden=16, bidirectional=True, dec_hidden=16, attention="dot")
    with pytest.raises(AttnmtError, match="dot"):
        validate(Config(data=DataConfig(path="x"), model=model))
    model.dec_hidden = 32
    validate(Config(data=DataConfig(path="x"), model=model))


def test_input_feeding_needs_luong_order():
    model = RNNConfig(decoder="bahdanau", input_feeding=True)
    with pytest.raises(AttnmtError, match="input_feeding"):
        validate(Config(data=DataConfig(path="x"), model=model))


# ---------------------------------------------------------------- every architecture learns

SHAPES = [  # (bidirectional, enc_layers, dec_layers)
    (True, 1, 1), (False, 1, 1), (True, 2, 1), (False, 1, 2), (True, 2, 2),
]


def grid():
    cases = []
    for rnn, order, attention in itertools.product(["gru", "lstm"], ["bahdanau", "luong"], ATTENTIONS):
        for feeding in ([False, True] if order == "luong" else [False]):
            i = len(cases)
            bidirectional, enc_layers, dec_layers = SHAPES[i % len(SHAPES)]
            # Vary the bridge too; with no attention, `zero` would cut the decoder off from the source.
            bridge = "linear" if attention == "none" else ["linear", "copy", "zero"][i % 3]
            case = dict(rnn=rnn, order=order, attention=attention, input_feeding=feeding,
                        bidirectional=bidirectional, enc_layers=enc_layers, dec_layers=dec_layers, bridge=bridge)
            name = (f"{rnn}-{order}-{attention}{'-feed' if feeding else ''}-{'bi' if bidirectional else 'uni'}"
                    f"-enc{enc_layers}-dec{dec_layers}-{bridge}")
            cases.append(pytest.param(case, id=name))
    return cases


GRID = grid()


def test_grid_covers_every_combination():
    seen = {(p.values[0]["rnn"], p.values[0]["order"], p.values[0]["attention"], p.values[0]["input_feeding"])
            for p in GRID}
    assert len(seen) == len(GRID) == 2 * (5 + 10)
    assert {p.values[0]["bidirectional"] for p in GRID} == {True, False}
    assert {(p.values[0]["enc_layers"], p.values[0]["dec_layers"]) for p in GRID} == {(1, 1), (2, 1), (1, 2), (2, 2)}


@pytest.mark.parametrize("case", GRID)
def test_architecture_overfits_tiny_corpus(case):
    model = make_model(seed=0, **case)
    examples = tiny_corpus()
    batch = collate(examples, list(range(len(examples))))
    assert (batch.src == PAD_ID).any() and (batch.tgt_out == PAD_ID).any()   # really a padded batch

    model.eval()
    logits, weights = logits_and_weights(model, batch.src, batch.src_lengths, batch.tgt_in)
    B, T = batch.tgt_in.shape
    assert tuple(logits.shape) == (B, T, VOCAB)
    if case["attention"] == "none":
        assert weights is None
    else:
        assert tuple(weights.shape) == (B, T, batch.src.shape[1])
        assert (weights.masked_select(~(batch.src != PAD_ID)[:, None, :].expand_as(weights)) == 0.0).all()
    first_loss = sequence_loss(logits, batch.tgt_out).item() / batch.num_target_tokens

    torch.manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    max_lengths = torch.tensor([len(t) + 3 for _, t in examples])
    losses, solved = [], False
    for step in range(1, 301):
        model.train()
        logits = forced_logits(model, batch.src, batch.src_lengths, batch.tgt_in)
        loss = sequence_loss(logits, batch.tgt_out) / batch.num_target_tokens
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if loss.item() < 0.3 and step % 5 == 0:
            model.eval()
            ids = greedy_ids(model, batch.src, batch.src_lengths, max_lengths)
            if ids.shape == batch.tgt_out.shape and torch.equal(ids, batch.tgt_out):
                solved = True
                break
    assert losses[-1] < first_loss / 5, (first_loss, losses[-1])
    assert solved, f"greedy never reproduced the targets in {step} steps (loss {losses[-1]:.4f})"
    # Greedy outputs, decoded sentence by sentence, are the targets followed by EOS.
    for row, (_, target) in enumerate(examples):
        assert ids[row, : len(target)].tolist() == target
        assert ids[row, len(target)].item() == EOS_ID


# ---------------------------------------------------------------- padding never enters the encoder

@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_encoder_ignores_padding(rnn, bidirectional, layers, grad):
    torch.manual_seed(0)
    with torch.set_grad_enabled(grad):
        encoder = Encoder(VOCAB, 8, 6, layers, bidirectional, rnn, dropout=0.3).eval()
        short = [5, 6, 7]
        longer = [8, 9, 10, 11, 4, 5, 6]
        alone = encoder(torch.tensor([short]), torch.tensor([3]))
        # The short sentence first, so the batch is not sorted by length either.
        batched = encoder(pad([short, longer]), torch.tensor([3, 7]))
        D = 6 * (2 if bidirectional else 1)
        assert encoder.output_size == D
        assert tuple(batched.outputs.shape) == (2, 7, D)
        assert_close(batched.outputs[0, :3], alone.outputs[0], atol=1e-6, rtol=0)
        assert (batched.outputs[0, 3:] == 0).all()
        assert batched.mask.tolist() == [[True] * 3 + [False] * 4, [True] * 7]
        states, alone_states = batched.final, alone.final
        assert len(states) == (2 if rnn == "lstm" else 1)
        for state, alone_state in zip(states, alone_states, strict=True):
            assert tuple(state.shape) == (layers, 2, D)
            assert_close(state[:, :1], alone_state, atol=1e-6, rtol=0)
        # The last layer's final state is where each direction ends: forward at the last real
        # token, backward at the first one.
        h = states[0] if rnn == "gru" else None
        if h is not None:
            assert_close(h[-1, 0, :6], batched.outputs[0, 2, :6], atol=1e-6, rtol=0)
            if bidirectional:
                assert_close(h[-1, 0, 6:], batched.outputs[0, 0, 6:], atol=1e-6, rtol=0)
        # The long sentence is unaffected by being batched with a short one as well.
        long_alone = encoder(torch.tensor([longer]), torch.tensor([7]))
        assert_close(batched.outputs[1], long_alone.outputs[0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("rnn,order,feeding", [("gru", "bahdanau", False), ("lstm", "luong", True),
                                               ("lstm", "luong", False)])
def test_model_output_independent_of_batch_padding(rnn, order, feeding, attention):
    model = make_model(rnn=rnn, order=order, attention=attention, input_feeding=feeding,
                       enc_layers=2, dropout=0.3).eval()
    examples = [([5, 6, 7], [8, 9]), ([4, 5, 6, 7, 8, 9, 10], [11, 10, 9, 8, 7])]
    batch = collate(examples, [0, 1])
    logits, weights = logits_and_weights(model, batch.src, batch.src_lengths, batch.tgt_in)
    for row, example in enumerate(examples):
        one = collate([example], [0])
        alone_logits, alone_weights = logits_and_weights(model, one.src, one.src_lengths, one.tgt_in)
        T, S = one.tgt_in.shape[1], one.src.shape[1]
        assert_close(logits[row : row + 1, :T], alone_logits, atol=1e-5, rtol=0)
        if attention != "none":
            assert_close(weights[row : row + 1, :T, :S], alone_weights, atol=1e-6, rtol=0)
            assert (weights[row, :, S:] == 0.0).all()


@pytest.mark.parametrize("bridge", ["linear", "copy", "zero"])
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_bridge_starts_decoder_from_top_encoder_layer(rnn, bridge):
    model = make_model(rnn=rnn, bridge=bridge, enc_layers=2, dec_layers=3, bidirectional=True).eval()
    batch = collate([([5, 6, 7], [8]), ([4, 5, 6, 7, 8], [9])], [0, 1])
    encoded = model.encoder(batch.src, batch.src_lengths)
    memory, state = model.encode(batch.src, batch.src_lengths)
    assert_close(memory.values, encoded.outputs, atol=0, rtol=0)
    assert torch.equal(memory.mask, batch.src != PAD_ID)
    assert len(state.hidden) == len(encoded.final) == (2 if rnn == "lstm" else 1)
    for final, h in zip(encoded.final, state.hidden):
        assert tuple(h.shape) == (3, 2, 32)
        top = final[-1]                                     # [B, D], the last encoder layer
        if bridge == "linear":
            expected = torch.tanh(top @ model.bridge.weight.T + model.bridge.bias)
        elif bridge == "copy":
            assert model.bridge is None
            expected = top
        else:
            expected = torch.zeros_like(top)
        for layer in range(3):
            assert_close(h[layer], expected, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- the parallel fast path

def count_rnn_calls(decoder):
    """Sequence lengths of each call of the decoder's RNN."""
    calls = []
    decoder.rnn.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[1]))
    return calls


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("rnn,dec_layers", [("gru", 1), ("lstm", 2)])
def test_parallel_path_equals_stepping(rnn, dec_layers, attention):
    model = make_model(rnn=rnn, order="luong", attention=attention, dec_layers=dec_layers, dropout=0.3).eval()
    decoder = model.decoder
    assert decoder.parallel
    examples = [([5, 6, 7, 8], [9, 10, 11]), ([4, 5], [6, 7, 8, 9, 10, 11])]
    batch = collate(examples, [0, 1])
    memory, state = model.encode(batch.src, batch.src_lengths)

    calls = count_rnn_calls(decoder)
    logits, weights = decoder_logits(decoder, batch.tgt_in, state, memory, teacher_forcing=1.0)
    T = batch.tgt_in.shape[1]
    assert calls == [T]                                   # one RNN call for the whole target
    assert tuple(logits.shape) == (2, T, VOCAB)

    step_state = state
    step_logits, step_weights = [], []
    for t in range(T):
        out, step_state, w = model.step(batch.tgt_in[:, t : t + 1], step_state, memory)
        step_logits.append(out)
        step_weights.append(w)
    assert calls == [T] + [1] * T
    assert_close(logits, torch.cat(step_logits, dim=1), atol=1e-5, rtol=0)
    if attention == "none":
        assert weights is None and all(w is None for w in step_weights)
    else:
        assert_close(weights, torch.cat(step_weights, dim=1), atol=1e-5, rtol=0)
    # The whole model uses the same path.
    model_logits = forced_logits(model, batch.src, batch.src_lengths, batch.tgt_in)
    assert calls == [T] + [1] * T + [T]
    assert_close(model_logits, logits, atol=0, rtol=0)


@pytest.mark.parametrize("attention", ["bahdanau", "general", "none"])
@pytest.mark.parametrize("rnn,order,feeding", [("gru", "bahdanau", False), ("lstm", "bahdanau", False),
                                               ("gru", "luong", True), ("lstm", "luong", True)])
def test_teacher_forced_loop_equals_stepping(rnn, order, feeding, attention):
    """Orders that cannot run in parallel still give, under teacher forcing, what step() gives."""
    model = make_model(rnn=rnn, order=order, attention=attention, input_feeding=feeding, dec_layers=2,
                       dropout=0.3).eval()
    decoder = model.decoder
    assert not decoder.parallel
    batch = collate([([5, 6, 7, 8], [9, 10, 11]), ([4, 5], [6, 7, 8, 9, 10, 11])], [0, 1])
    memory, state = model.encode(batch.src, batch.src_lengths)
    calls = count_rnn_calls(decoder)
    logits, weights = decoder_logits(decoder, batch.tgt_in, state, memory, teacher_forcing=1.0)
    T = batch.tgt_in.shape[1]
    assert calls == [1] * T
    step_logits, step_weights = [], []
    for t in range(T):
        out, state, w = model.step(batch.tgt_in[:, t : t + 1], state, memory)
        step_logits.append(out)
        step_weights.append(w)
    assert_close(logits, torch.cat(step_logits, dim=1), atol=1e-5, rtol=0)
    if attention == "none":
        assert weights is None
    else:
        assert_close(weights, torch.cat(step_weights, dim=1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("order,feeding,parallel", [("luong", False, True), ("luong", True, False),
                                                    ("bahdanau", False, False)])
def test_parallel_flag(order, feeding, parallel):
    model = make_model(order=order, input_feeding=feeding)
    assert model.decoder.parallel is parallel


def test_parallel_path_not_used_with_teacher_forcing_below_one():
    """Scheduled sampling runs step by step: model.teacher_forcing below 1 in training, and only there
    (evaluation and decoding feed the gold prefix)."""
    model = make_model(order="luong", attention="general", teacher_forcing=0.5).eval()
    batch = collate([([5, 6, 7], [8, 9, 10, 11])], [0])
    T = batch.tgt_in.shape[1]
    memory, state = model.encode(batch.src, batch.src_lengths)
    calls = count_rnn_calls(model.decoder)
    model.decoder.features(batch.tgt_in, state, memory, teacher_forcing=0.5)
    assert calls == [1] * T
    calls.clear()
    model.features(batch.src, batch.src_lengths, batch.tgt_in)      # eval: full teacher forcing, in parallel
    assert calls == [T]
    calls.clear()
    model.train()
    model.features(batch.src, batch.src_lengths, batch.tgt_in)      # training: the config's rate
    assert calls == [1] * T
    model.config.teacher_forcing = 1.0
    calls.clear()
    model.features(batch.src, batch.src_lengths, batch.tgt_in)
    assert calls == [T]


@pytest.mark.parametrize("order,feeding,attention,ratio", [
    ("luong", False, "general", 1.0), ("luong", True, "bahdanau", 1.0), ("luong", True, "none", 1.0),
    ("bahdanau", False, "bahdanau", 1.0), ("bahdanau", False, "dot", 0.5)])
def test_logits_at_the_real_tokens_only(order, feeding, attention, ratio):
    """step.TeacherForced gives the rows of the full logits at the True positions of `at`, on every
    decoder path (scheduled sampling in training mode), and the same loss."""
    model = make_model(order=order, input_feeding=feeding, attention=attention, teacher_forcing=ratio).double()
    model.train(ratio < 1)            # the config's teacher forcing applies in training only (dropout is 0)
    batch = collate([([5, 6, 7, 8], [9, 10, 11]), ([4, 5], [6, 7, 8, 9, 10, 11]), ([7], [4])], [0, 1, 2])
    at = batch.target_mask
    assert int(at.sum()) == batch.num_target_tokens == 4 + 7 + 2
    torch.manual_seed(1)
    full = forced_logits(model, batch.src, batch.src_lengths, batch.tgt_in)
    torch.manual_seed(1)
    kept = TeacherForced(model)(batch.src, batch.src_lengths, batch.tgt_in, at)
    assert kept.shape == (13, VOCAB)
    assert_close(kept, full[at], atol=1e-12, rtol=0)
    assert_close(sequence_loss(kept, batch.tgt_out[at]), sequence_loss(full, batch.tgt_out), atol=1e-10, rtol=0)


# ---------------------------------------------------------------- the two decoder orders

def capture_queries(attention):
    queries = []
    attention.register_forward_hook(lambda module, args, out: queries.append(args[0].detach().clone()))
    return queries


@pytest.mark.parametrize("attention", ["bahdanau", "dot", "general", "concat"])
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_bahdanau_order_attends_with_previous_state(rnn, attention):
    model = make_model(rnn=rnn, order="bahdanau", attention=attention, dec_layers=2).eval()
    batch = collate([([5, 6, 7], [8, 9, 10]), ([4, 5], [6, 7])], [0, 1])
    memory, state = model.encode(batch.src, batch.src_lengths)
    queries = capture_queries(model.decoder.attention)
    for t in range(3):
        previous_top = state.hidden[0][-1]
        _, state, _ = model.step(batch.tgt_in[:, t : t + 1], state, memory)
        assert_close(queries[-1], previous_top.unsqueeze(1), atol=0, rtol=0)   # s_{t-1}


@pytest.mark.parametrize("attention", ["bahdanau", "dot", "general", "concat"])
@pytest.mark.parametrize("rnn,feeding", [("gru", False), ("lstm", True)])
def test_luong_order_attends_with_new_state(rnn, feeding, attention):
    model = make_model(rnn=rnn, order="luong", attention=attention, input_feeding=feeding, dec_layers=2).eval()
    batch = collate([([5, 6, 7], [8, 9, 10]), ([4, 5], [6, 7])], [0, 1])
    memory, state = model.encode(batch.src, batch.src_lengths)
    queries = capture_queries(model.decoder.attention)
    for t in range(3):
        _, state, _ = model.step(batch.tgt_in[:, t : t + 1], state, memory)
        new_top = state.hidden[0][-1]
        assert_close(queries[-1], new_top.unsqueeze(1), atol=0, rtol=0)        # h_t


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("rnn", ["gru", "lstm"])
def test_input_feeding_passes_the_attentional_vector(rnn, attention):
    model = make_model(rnn=rnn, order="luong", attention=attention, input_feeding=True, dropout=0.3).eval()
    decoder = model.decoder
    batch = collate([([5, 6, 7], [8, 9, 10]), ([4, 5], [6, 7])], [0, 1])
    memory, state = model.encode(batch.src, batch.src_lengths)
    assert state.attn_vector is not None and (state.attn_vector == 0).all()
    assert tuple(state.attn_vector.shape) == (2, 32)
    vectors = []
    for t in range(3):
        tokens = batch.tgt_in[:, t : t + 1]
        logits, new_state, _ = model.step(tokens, state, memory)
        h_tilde = new_state.attn_vector
        assert tuple(h_tilde.shape) == (2, 32)
        # h~_t is what the classifier reads: logits = W_s h~_t + b.
        assert_close(decoder.classifier(h_tilde), logits[:, 0], atol=1e-6, rtol=0)
        assert (h_tilde.abs() <= 1).all() and h_tilde.abs().sum() > 0          # a tanh, not zeros
        if t > 0:
            # The previous h~ is really fed: zeroing it changes this step.
            blank = state.like([torch.zeros_like(t) if name == "attn_vector" else t for name, t in state.tensors.items()])
            assert (blank.attn_vector == 0).all() and blank.hidden[0] is state.hidden[0]
            other, _, _ = model.step(tokens, blank, memory)
            assert not torch.allclose(other, logits, atol=1e-4)
        vectors.append(h_tilde)
        state = new_state
    assert not torch.allclose(vectors[0], vectors[1])


# ---------------------------------------------------------------- teacher forcing below 1

@pytest.mark.parametrize("rnn,order,feeding,attention", [("gru", "bahdanau", False, "bahdanau"),
                                                         ("lstm", "luong", False, "dot"),
                                                         ("gru", "luong", True, "concat"),
                                                         ("lstm", "bahdanau", False, "none")])
def test_teacher_forcing_below_one_is_reproducible(rnn, order, feeding, attention):
    model = make_model(rnn=rnn, order=order, attention=attention, input_feeding=feeding, dropout=0.2,
                       teacher_forcing=0.5)
    examples = tiny_corpus(seed=3, n=6)
    batch = collate(examples, list(range(6)))

    def run(seed):
        """A training pass: scheduled sampling at model.teacher_forcing, with dropout."""
        torch.manual_seed(seed)
        model.train()
        return logits_and_weights(model, batch.src, batch.src_lengths, batch.tgt_in)

    a, wa = run(123)
    b, wb = run(123)
    assert tuple(a.shape) == (6, batch.tgt_in.shape[1], VOCAB)
    assert torch.equal(a, b)
    if attention != "none":
        assert torch.equal(wa, wb)
    loss = sequence_loss(a, batch.tgt_out)
    assert torch.isfinite(loss)
    model.zero_grad()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    # Other seeds give other coin flips (and dropout masks): not all runs are the same.
    others = [run(seed)[0] for seed in range(5)]
    assert any(not torch.equal(a, o) for o in others)

    # Without dropout: the first step always sees <sos>, so it matches full teacher forcing.
    model.eval()
    memory, state = model.encode(batch.src, batch.src_lengths)
    full = forced_logits(model, batch.src, batch.src_lengths, batch.tgt_in)
    torch.manual_seed(5)
    half, _ = decoder_logits(model.decoder, batch.tgt_in, state, memory, teacher_forcing=0.5)
    assert_close(half[:, 0], full[:, 0], atol=1e-5, rtol=0)
    assert not torch.allclose(half, full, atol=1e-5)                      # later steps were fed other tokens
    # With ratio 0 the decoder feeds itself its own argmax: that is greedy decoding.
    torch.manual_seed(6)
    own, _ = decoder_logits(model.decoder, batch.tgt_in, state, memory, teacher_forcing=0.0)
    T = batch.tgt_in.shape[1]
    ids = greedy_ids(model, batch.src, batch.src_lengths, torch.full((6,), T))
    predicted = own.argmax(-1)
    for row in range(6):
        produced = ids[row].tolist()
        n = produced.index(EOS_ID) + 1 if EOS_ID in produced else len(produced)
        n = min(n, T - 1)    # greedy forces EOS at the last step; the teacher-forced run does not
        assert predicted[row, :n].tolist() == produced[:n]


# ---------------------------------------------------------------- greedy search

def suppress(model, *token_ids, value=-1e4):
    with torch.no_grad():
        for i in token_ids:
            model.decoder.classifier.bias[i] = value


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("rnn,order,feeding", [("gru", "bahdanau", False), ("lstm", "luong", True)])
def test_greedy_respects_max_lengths(rnn, order, feeding, attention):
    model = make_model(rnn=rnn, order=order, attention=attention, input_feeding=feeding).eval()
    suppress(model, EOS_ID, PAD_ID)              # the model never ends by itself, never says PAD
    src = pad([[5, 6, 7], [4, 5, 6, 7, 8, 9], [10, 11]])
    lengths = torch.tensor([3, 6, 2])
    max_lengths = torch.tensor([2, 6, 1])
    for hypothesis, length, limit in zip(greedy(model, src, lengths, max_lengths), lengths.tolist(), max_lengths.tolist(),
                                         strict=True):
        assert len(hypothesis.ids) == limit - 1              # EOS is the limit-th token
        assert all(t not in (EOS_ID, PAD_ID) for t in hypothesis.ids)
        if attention == "none":
            assert hypothesis.attention is None
        else:  # one row per output token over the sentence's own tokens, each a distribution
            assert tuple(hypothesis.attention.shape) == (limit - 1, length)
            assert_close(hypothesis.attention.sum(-1), torch.ones(limit - 1))


@pytest.mark.parametrize("attention", ["general", "none"])
def test_greedy_stops_when_all_sentences_end(attention):
    model = make_model(attention=attention).eval()
    suppress(model, EOS_ID, value=1e4)                       # EOS is always the best token
    src = pad([[5, 6, 7], [4, 5]])
    hypotheses = greedy(model, src, torch.tensor([3, 2]), torch.tensor([50, 50]))
    assert [h.ids for h in hypotheses] == [[], []]
    assert [h.log_prob for h in hypotheses] == [pytest.approx(0.0, abs=1e-3)] * 2
    expected = [None, None] if attention == "none" else [(0, 3), (0, 2)]
    assert [None if h.attention is None else tuple(h.attention.shape) for h in hypotheses] == expected


def test_greedy_sentences_end_independently():
    model = make_model(attention="bahdanau").eval()
    src = pad([[5, 6, 7], [4, 5, 6, 7]])
    lengths = torch.tensor([3, 4])
    # Make EOS the best token only for sentence 0: look at what greedy produces otherwise.
    suppress(model, EOS_ID, PAD_ID)
    free = greedy(model, src, lengths, torch.tensor([8, 8]))
    assert [len(h.ids) for h in free] == [7, 7]
    # Now let sentence 0 end after 2 tokens, sentence 1 run to its limit.
    ended = greedy(model, src, lengths, torch.tensor([3, 8]))
    assert ended[0].ids == free[0].ids[:2]
    assert ended[1].ids == free[1].ids                     # unaffected by the other sentence
    assert_close(ended[1].attention, free[1].attention, atol=1e-6, rtol=0)
    assert tuple(ended[0].attention.shape) == (2, 3)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_greedy_same_alone_and_in_batch_and_consistent_with_forward(attention):
    model = make_model(rnn="lstm", order="luong", attention=attention, input_feeding=True, enc_layers=2).eval()
    sources = [[5, 6, 7], [4, 5, 6, 7, 8, 9, 10], [11]]
    lengths = torch.tensor([3, 7, 1])
    max_lengths = torch.tensor([6, 9, 4])
    together = greedy(model, pad(sources), lengths, max_lengths)
    for row, source in enumerate(sources):
        alone = greedy(model, torch.tensor([source]), lengths[row : row + 1], max_lengths[row : row + 1])[0]
        assert together[row].ids == alone.ids
        assert together[row].log_prob == pytest.approx(alone.log_prob, abs=1e-5)
        if attention != "none":
            assert_close(together[row].attention, alone.attention, atol=1e-6, rtol=0)
        # Teacher forcing the greedy output reproduces it step by step.
        logits = forced_logits(model, torch.tensor([source]), lengths[row : row + 1], torch.tensor([[SOS_ID] + alone.ids]))
        predicted = logits.argmax(-1)[0].tolist()
        assert predicted[:-1] == alone.ids
        if len(alone.ids) + 1 < max_lengths[row].item():  # ended by EOS, not by the limit
            assert predicted[-1] == EOS_ID


# ---------------------------------------------------------------- the optimizer

def test_adam_decays_its_squared_gradients_by_train_adam_beta2():
    """Two updates of one weight, worked by hand from Adam's rule (Kingma and Ba 2015) with
    beta1 0.9 and beta2 train.adam_beta2: m and v the running means of g and g², bias-corrected."""
    lr, beta1, beta2, gradients = 0.1, 0.9, 0.5, [1.0, 3.0]
    layer = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(layer.weight)
    optimizer = make_optimizer(layer, TrainConfig(lr=lr, adam_beta2=beta2))
    m = v = expected = 0.0
    for t, g in enumerate(gradients, start=1):
        layer.weight.grad = torch.tensor([[g]])
        optimizer.step()
        m, v = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g * g
        expected -= lr * (m / (1 - beta1 ** t)) / (math.sqrt(v / (1 - beta2 ** t)) + 1e-8)
    assert_close(layer.weight.item(), expected)
    assert optimizer.param_groups[0]["betas"] == (beta1, beta2)

    resumed = make_optimizer(layer, TrainConfig(lr=lr, adam_beta2=0.98), optimizer.state_dict())
    assert resumed.param_groups[0]["betas"] == (beta1, 0.98)          # the resumed run's config says
    assert_close(resumed.state_dict()["state"], optimizer.state_dict()["state"])    # the moments go on


# ---------------------------------------------------------------- the loss

@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_sequence_loss_by_hand(label_smoothing):
    """Summed over the real targets: (1 - ε) · -log p(target) + ε · the mean of -log p(v) over the whole
    vocabulary (train.label_smoothing: the target's probability spread over every token, the
    specials included); a pad target counts for nothing."""
    logits = [[0.0, 0.0, 0.0, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0, 0.0], [0.5, -1.0, 3.0, 0.0, 1.5]]
    targets = [4, PAD_ID, 2]
    expected = 0.0
    for row, target in zip(logits, targets, strict=True):
        if target == PAD_ID:
            continue
        log_total = math.log(sum(math.exp(x) for x in row))
        nll = [log_total - x for x in row]                           # -log p(v) for every v
        expected += (1 - label_smoothing) * nll[target] + label_smoothing * sum(nll) / len(nll)
    loss = sequence_loss(torch.tensor([logits]), torch.tensor([targets]), label_smoothing)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_loss_ignores_pad_targets(label_smoothing):
    model = make_model(rnn="gru", order="bahdanau", attention="concat").eval()
    examples = [([5, 6, 7], [8, 9]), ([4, 5, 6, 7, 8], [11, 10, 9, 8, 7, 6]), ([9], [10, 11, 4])]
    batch = collate(examples, [0, 1, 2])
    assert batch.num_target_tokens == 3 + 7 + 4
    logits = forced_logits(model, batch.src, batch.src_lengths, batch.tgt_in)
    batch_loss = sequence_loss(logits, batch.tgt_out, label_smoothing)
    per_sentence = []
    for example in examples:
        one = collate([example], [0])
        one_logits = forced_logits(model, one.src, one.src_lengths, one.tgt_in)
        per_sentence.append(sequence_loss(one_logits, one.tgt_out, label_smoothing))
    assert_close(batch_loss, torch.stack(per_sentence).sum(), atol=1e-4, rtol=1e-6)
    # Garbage logits at pad targets change nothing.
    noisy = logits.clone()
    noisy[batch.tgt_out == PAD_ID] = torch.randn(int((batch.tgt_out == PAD_ID).sum()), VOCAB) * 100
    assert_close(sequence_loss(noisy, batch.tgt_out, label_smoothing), batch_loss, atol=0, rtol=0)
    # ... and no gradient reaches them.
    leaf = logits.detach().requires_grad_()
    sequence_loss(leaf, batch.tgt_out, label_smoothing).backward()
    assert (leaf.grad[batch.tgt_out == PAD_ID] == 0).all()
    assert (leaf.grad[batch.tgt_out != PAD_ID].abs().sum(-1) > 0).all()
