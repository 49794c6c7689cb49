"""Attention kinds: hand-computed scores, masking, shapes, gradients and the key protocol."""

from __future__ import annotations

import math
import typing

import pytest
import torch
from torch.testing import assert_close

from attnmt.families.rnn.attention import (
    GLOBAL_SCORES,
    AdditiveAttention,
    Attention,
    DotAttention,
    GeneralAttention,
    LocalAttention,
    NoAttention,
    ScaledDotAttention,
    make_attention,
)
from attnmt.families.rnn.config import RNNConfig
from attnmt.families.rnn.decoder import Decoder
from attnmt.families.rnn.fast_attention import SigmoidAdditiveAttention
from attnmt.families.rnn.network import RNNEncoderDecoder
from attnmt.seam import forced_logits
from attnmt.search import greedy

KINDS = ["bahdanau", "concat", "dot", "general", "none"]
SCORING_KINDS = ["bahdanau", "concat", "dot", "general"]


def softmax_list(xs):
    exps = [math.exp(x) for x in xs]
    total = sum(exps)
    return [e / total for e in exps]


def mix(weights, rows):
    return [sum(w * row[d] for w, row in zip(weights, rows)) for d in range(len(rows[0]))]


def reference_scores(kind, module, query, memory):
    """Scores [B, T, S] written out position by position from the module's raw weights."""
    B, T, _ = query.shape
    S = memory.shape[1]
    scores = torch.zeros(B, T, S, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            q = query[b, t].double()
            for j in range(S):
                h = memory[b, j].double()
                if kind in ("bahdanau", "concat"):
                    pre = module.query_proj.weight.double() @ q + module.key_proj.weight.double() @ h
                    if kind == "concat":
                        pre = pre + module.query_proj.bias.double()
                    scores[b, t, j] = (module.v.weight.double()[0] * torch.tanh(pre)).sum()
                elif kind == "dot":
                    scores[b, t, j] = (q * h).sum()
                elif kind == "general":
                    scores[b, t, j] = (q * (module.key_proj.weight.double() @ h)).sum()
                else:
                    raise AssertionError(kind)
    return scores


def reference_attention(kind, module, query, memory, mask):
    """(context, weights) computed independently of the module's score()/forward()."""
    scores = reference_scores(kind, module, query, memory)
    B, T, S = scores.shape
    weights = torch.zeros_like(scores)
    for b in range(B):
        real = [j for j in range(S) if mask[b, j]]
        for t in range(T):
            exps = torch.exp(scores[b, t, real] - scores[b, t, real].max())
            weights[b, t, real] = exps / exps.sum()
    context = torch.einsum("bts,bsv->btv", weights, memory.double())
    return context.float(), weights.float()


def build(kind, query_dim=4, key_dim=6, attn_dim=5):
    if kind == "dot":
        key_dim = query_dim
    module, width = make_attention(kind, query_dim, key_dim, attn_dim)
    return module, width, query_dim, key_dim


# ---------------------------------------------------------------- make_attention

def test_config_choices_name_every_score():
    # model.attention's and model.local_score's choices (the torch-free config) and the scores built are one list:
    # a score added to one and not the other fails here.
    attention = set(typing.get_args(typing.get_type_hints(RNNConfig)["attention"]))
    local_score = set(typing.get_args(typing.get_type_hints(RNNConfig)["local_score"]))
    assert attention == set(GLOBAL_SCORES) | {"local_m", "local_p"}
    assert local_score == set(GLOBAL_SCORES) - {"bahdanau", "none"}
    for kind in attention:
        module, _ = make_attention(kind, 6, 6, 5)
        assert isinstance(module, LocalAttention if kind.startswith("local") else Attention)


def test_make_attention_classes_and_context_width():
    expected = {"bahdanau": AdditiveAttention, "concat": AdditiveAttention, "dot": DotAttention,
                "general": GeneralAttention, "none": NoAttention}
    for kind, cls in expected.items():
        module, width = make_attention(kind, 4, 6, 5)
        assert type(module) is cls
        assert width == (0 if kind == "none" else 6)
    bahdanau, _ = make_attention("bahdanau", 4, 6, 5)
    concat, _ = make_attention("concat", 4, 6, 5)
    assert bahdanau.query_proj.bias is None and bahdanau.key_proj.bias is None and bahdanau.v.bias is None
    assert concat.query_proj.bias is not None and concat.key_proj.bias is None and concat.v.bias is None
    assert tuple(bahdanau.key_proj.weight.shape) == (5, 6)
    assert tuple(bahdanau.query_proj.weight.shape) == (5, 4)
    assert tuple(bahdanau.v.weight.shape) == (1, 5)
    general, _ = make_attention("general", 4, 6, 5)
    assert tuple(general.key_proj.weight.shape) == (4, 6)
    with pytest.raises(ValueError):
        make_attention("multihead", 4, 6, 5)
    # The additive scores' class is the caller's (a network built with its fast paths passes the sigmoid
    # form's), for global attention and for local attention's scorer alike; the other kinds have one class.
    for kind, cls in expected.items():
        module, width = make_attention(kind, 4, 6, 5, additive=SigmoidAdditiveAttention)
        assert type(module) is (SigmoidAdditiveAttention if cls is AdditiveAttention else cls)
        assert width == (0 if kind == "none" else 6)
    for score, cls in [("concat", SigmoidAdditiveAttention), ("general", GeneralAttention)]:
        module, _ = make_attention("local_p", 4, 6, 5, score, additive=SigmoidAdditiveAttention)
        assert isinstance(module, LocalAttention) and type(module.scorer) is cls
    module, _ = make_attention("local_m", 4, 6, 5, "concat")
    assert type(module.scorer) is AdditiveAttention


# ---------------------------------------------------------------- hand-computed examples

Q = torch.tensor([[[1.0, 0.0]]])                            # [1, 1, 2]
H = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]]])     # [1, 3, 2]
MASK = torch.ones(1, 3, dtype=torch.bool)


def test_dot_attention_by_hand():
    # scores = q . h_j = [1*1 + 0*0, 1*0 + 0*1, 1*2 + 0*0] = [1, 0, 2]
    # softmax: exp = [e, 1, e^2] = [2.718282, 1, 7.389056], sum = 11.107338
    #   weights = [0.244728, 0.090031, 0.665241]
    # context = 0.244728*[1, 0] + 0.090031*[0, 1] + 0.665241*[2, 0] = [1.575210, 0.090031]
    attention = DotAttention()
    keys = attention.project_keys(H)
    assert_close(keys, H)                                    # dot uses the raw outputs as keys
    context, weights = attention(Q, keys, H, MASK)
    assert_close(weights, torch.tensor([[[0.244728, 0.090031, 0.665241]]]), atol=1e-6, rtol=0)
    assert_close(context, torch.tensor([[[1.575210, 0.090031]]]), atol=1e-6, rtol=0)
    e = math.e
    exact = [e / (e + 1 + e * e), 1 / (e + 1 + e * e), e * e / (e + 1 + e * e)]
    assert_close(weights, torch.tensor([[exact]]))
    assert_close(context, torch.tensor([[[exact[0] + 2 * exact[2], exact[1]]]]))


def test_scaled_dot_attention_by_hand_and_in_a_model():
    """A new score is a class in attention.py, its name in make_attention and in RNNConfig's choices: scaled
    dot product, q . h_j / sqrt(d). Q and H as in the dot test, d 2: scores [1, 0, 2] / sqrt(2)."""
    attention, width = make_attention("scaled_dot", 2, 2, 8)
    assert isinstance(attention, ScaledDotAttention) and width == 2 and attention.formula == "q · h_j / √d"
    _, weights = attention(Q, attention.project_keys(H), H, MASK)
    assert_close(weights, torch.tensor([[softmax_list([1 / math.sqrt(2), 0.0, 2 / math.sqrt(2)])]]))
    # In a model: the fused decoder loop knows no such score, so the fast build trains step by step with
    # the reference Decoder and computes what the reference build does.
    config = RNNConfig(emb_dim=8, enc_hidden=4, dec_hidden=8, attention="scaled_dot", decoder="luong", dropout=0.0,
                       input_feeding=True)
    fast, reference = (RNNEncoderDecoder(config, 20, 20, fast=fast).double() for fast in (True, False))
    reference.load_state_dict(fast.state_dict())
    src, tgt_in = torch.randint(4, 20, (3, 5)), torch.randint(4, 20, (3, 4))
    assert type(fast.decoder) is Decoder
    assert_close(forced_logits(fast, src, torch.tensor([5, 4, 2]), tgt_in),
                 forced_logits(reference, src, torch.tensor([5, 4, 2]), tgt_in))


def set_additive(module, w_q, w_k, v, b=None):
    with torch.no_grad():
        module.query_proj.weight.copy_(torch.tensor(w_q))
        module.key_proj.weight.copy_(torch.tensor(w_k))
        module.v.weight.copy_(torch.tensor([v]))
        if b is not None:
            module.query_proj.bias.copy_(torch.tensor(b))


def test_bahdanau_attention_by_hand():
    attention, width = make_attention("bahdanau", 2, 2, 2)
    assert width == 2
    # W_q = I, W_k = 0.5 I, v = [1, -1]
    set_additive(attention, [[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.0], [0.0, 0.5]], [1.0, -1.0])
    keys = attention.project_keys(H)
    # W_k h_j = [0.5, 0], [0, 0.5], [1, 0]
    assert_close(keys, torch.tensor([[[0.5, 0.0], [0.0, 0.5], [1.0, 0.0]]]))
    context, weights = attention(Q, keys, H, MASK)
    # W_q q + W_k h_j = [1.5, 0], [1, 0.5], [2, 0]
    # score_j = tanh(a) - tanh(b) = tanh(1.5), tanh(1) - tanh(0.5), tanh(2)
    #         = 0.905148, 0.299477, 0.964028
    scores = [math.tanh(1.5), math.tanh(1.0) - math.tanh(0.5), math.tanh(2.0)]
    assert_close(attention.score(Q, keys), torch.tensor([[scores]]))  # the scores themselves: softmax forgets a shift
    w = softmax_list(scores)
    assert_close(weights, torch.tensor([[w]]))
    assert_close(context, torch.tensor([[mix(w, H[0].tolist())]]))


def test_concat_attention_by_hand_uses_query_bias():
    attention, _ = make_attention("concat", 2, 2, 2)
    set_additive(attention, [[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.0], [0.0, 0.5]], [1.0, -1.0], b=[-1.0, 0.5])
    keys = attention.project_keys(H)
    context, weights = attention(Q, keys, H, MASK)
    # W_q q + b + W_k h_j = [1.5 - 1, 0 + 0.5], [1 - 1, 0.5 + 0.5], [2 - 1, 0 + 0.5]
    #                     = [0.5, 0.5], [0, 1], [1, 0.5]
    scores = [math.tanh(0.5) - math.tanh(0.5), math.tanh(0.0) - math.tanh(1.0), math.tanh(1.0) - math.tanh(0.5)]
    w = softmax_list(scores)
    assert_close(weights, torch.tensor([[w]]))
    assert_close(context, torch.tensor([[mix(w, H[0].tolist())]]))
    # Without the bias the numbers are different, so the bias is really used.
    with torch.no_grad():
        attention.query_proj.bias.zero_()
    _, unbiased = attention(Q, keys, H, MASK)
    assert not torch.allclose(unbiased, weights)


def test_general_attention_by_hand():
    attention, width = make_attention("general", 2, 3, 7)    # attn_dim is unused by general
    assert width == 3
    memory = torch.tensor([[[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0]]])  # [1, 3, 3]
    with torch.no_grad():
        attention.key_proj.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, -1.0]]))  # W [2, 3]
    query = torch.tensor([[[2.0, 1.0]]])
    keys = attention.project_keys(memory)
    # W h_j = [1, -1], [0, 1], [1, -0.5]
    assert_close(keys, torch.tensor([[[1.0, -1.0], [0.0, 1.0], [1.0, -0.5]]]))
    context, weights = attention(query, keys, memory, MASK)
    # q . W h_j = 2*1 + 1*(-1) = 1, 2*0 + 1*1 = 1, 2*1 + 1*(-0.5) = 1.5
    w = softmax_list([1.0, 1.0, 1.5])
    assert_close(weights, torch.tensor([[w]]))
    assert_close(context, torch.tensor([[mix(w, memory[0].tolist())]]))


def test_none_attention_by_hand():
    attention, width = make_attention("none", 2, 2, 2)
    assert width == 0
    keys = attention.project_keys(H)
    assert tuple(keys.shape) == (1, 3, 0)
    context, weights = attention(Q, keys, H, MASK)
    assert weights is None
    assert tuple(context.shape) == (1, 1, 0)
    assert context.dtype == H.dtype
    assert list(attention.parameters()) == []


@pytest.mark.parametrize("kind", SCORING_KINDS)
def test_matches_reference_on_random_inputs(kind):
    torch.manual_seed(0)
    attention, _, qd, kd = build(kind)
    query = torch.randn(2, 4, qd)
    memory = torch.randn(2, 5, kd)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    context, weights = attention(query, attention.project_keys(memory), memory, mask)
    ref_context, ref_weights = reference_attention(kind, attention, query, memory, mask)
    assert_close(weights, ref_weights, atol=1e-6, rtol=1e-5)
    assert_close(context, ref_context, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------- masking and shapes

@pytest.mark.parametrize("kind", SCORING_KINDS)
def test_masked_positions_get_exactly_zero_weight(kind):
    torch.manual_seed(1)
    attention, _, qd, kd = build(kind)
    B, T, S = 3, 4, 6
    query = torch.randn(B, T, qd) * 3
    memory = torch.randn(B, S, kd) * 3
    lengths = torch.tensor([6, 2, 1])
    mask = torch.arange(S)[None, :] < lengths[:, None]
    # Huge values at pads must not leak in either.
    memory = memory.masked_fill(~mask[..., None], 1e4)
    context, weights = attention(query, attention.project_keys(memory), memory, mask)
    assert tuple(context.shape) == (B, T, kd)
    assert tuple(weights.shape) == (B, T, S)
    pads = ~mask[:, None, :].expand(B, T, S)
    assert (weights[pads] == 0.0).all()
    assert (weights[~pads] > 0.0).all()
    assert torch.isfinite(weights).all() and torch.isfinite(context).all()
    assert_close(weights.sum(-1), torch.ones(B, T))
    for b in range(B):
        n = int(lengths[b])
        assert_close(weights[b, :, :n].sum(-1), torch.ones(T))
        # The context mixes only the real positions.
        assert_close(context[b], weights[b, :, :n] @ memory[b, :n])
    # The one-token sentence attends fully to its only token.
    assert (weights[2, :, 0] == 1.0).all()
    assert_close(context[2], memory[2, :1].expand(T, kd))


def test_masked_positions_zero_even_with_huge_negative_scores():
    """Pads are excluded outright, not just given a large negative score."""
    attention = DotAttention()
    query = torch.tensor([[[-100.0]]])
    memory = torch.tensor([[[100.0], [200.0], [0.0]]])       # real scores -1e4, -2e4; pad would be 0
    mask = torch.tensor([[True, True, False]])
    context, weights = attention(query, attention.project_keys(memory), memory, mask)
    assert weights[0, 0, 2] == 0.0
    assert weights[0, 0].tolist() == [1.0, 0.0, 0.0]         # e^-1e4 vs e^-2e4: all on position 0
    assert context[0, 0].tolist() == [100.0]


@pytest.mark.parametrize("kind", SCORING_KINDS)
def test_padded_sentence_matches_unpadded(kind):
    torch.manual_seed(2)
    attention, _, qd, kd = build(kind)
    query = torch.randn(1, 3, qd)
    memory = torch.randn(1, 3, kd)
    alone_c, alone_w = attention(query, attention.project_keys(memory), memory, torch.ones(1, 3, dtype=torch.bool))
    padded = torch.cat([memory, torch.randn(1, 4, kd)], dim=1)
    mask = torch.tensor([[True] * 3 + [False] * 4])
    c, w = attention(query, attention.project_keys(padded), padded, mask)
    assert_close(c, alone_c)
    assert_close(w[:, :, :3], alone_w)
    assert (w[:, :, 3:] == 0.0).all()


@pytest.mark.parametrize("T", [1, 5])
def test_none_attention_shapes(T):
    attention, width = make_attention("none", 4, 6, 5)
    memory = torch.randn(2, 7, 6)
    mask = torch.ones(2, 7, dtype=torch.bool)
    context, weights = attention(torch.randn(2, T, 4), attention.project_keys(memory), memory, mask)
    assert weights is None
    assert tuple(context.shape) == (2, T, 0) and width == 0


@pytest.mark.parametrize("kind", KINDS)
def test_single_query_equals_row_of_many(kind):
    """T queries at once give the same rows as T single-query calls."""
    torch.manual_seed(3)
    attention, width, qd, kd = build(kind)
    query = torch.randn(2, 4, qd)
    memory = torch.randn(2, 5, kd)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    keys = attention.project_keys(memory)
    context, weights = attention(query, keys, memory, mask)
    assert tuple(context.shape) == (2, 4, width)
    for t in range(4):
        c, w = attention(query[:, t : t + 1], keys, memory, mask)
        assert_close(c, context[:, t : t + 1])
        if kind == "none":
            assert w is None and weights is None
        else:
            assert_close(w, weights[:, t : t + 1])


# ---------------------------------------------------------------- gradients

@pytest.mark.parametrize("kind", KINDS)
def test_gradients_reach_every_parameter(kind):
    torch.manual_seed(4)
    attention, width, qd, kd = build(kind)
    query = torch.randn(2, 3, qd, requires_grad=True)
    memory = torch.randn(2, 4, kd, requires_grad=True)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    context, weights = attention(query, attention.project_keys(memory), memory, mask)
    loss = (context * torch.randn_like(context)).sum()
    if kind == "none":
        assert list(attention.parameters()) == []
        assert not context.requires_grad or context.numel() == 0
        return
    loss.backward()
    params = dict(attention.named_parameters())
    expected = {"bahdanau": {"key_proj.weight", "query_proj.weight", "v.weight"},
                "concat": {"key_proj.weight", "query_proj.weight", "query_proj.bias", "v.weight"},
                "dot": set(), "general": {"key_proj.weight"}}[kind]
    assert set(params) == expected
    for name, p in params.items():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, name
    # The scores depend on the query and the memory, for every kind that scores.
    assert query.grad is not None and query.grad.abs().sum() > 0
    assert memory.grad is not None and memory.grad.abs().sum() > 0
    # No gradient flows into padded memory rows.
    assert (memory.grad[1, 3] == 0).all()


# ---------------------------------------------------------------- the key protocol

@pytest.mark.parametrize("kind", KINDS)
def test_precomputed_keys_equal_projecting_inside(kind):
    """Keys projected once and reused give what projecting at each call would give."""
    torch.manual_seed(5)
    attention, _, qd, kd = build(kind)
    memory = torch.randn(2, 5, kd)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    keys = attention.project_keys(memory)
    for _ in range(3):
        query = torch.randn(2, 2, qd)
        c1, w1 = attention(query, keys, memory, mask)
        c2, w2 = attention(query, attention.project_keys(memory), memory, mask)
        assert_close(c1, c2, rtol=0, atol=0)
        if kind == "none":
            assert w1 is None and w2 is None
        else:
            assert_close(w1, w2, rtol=0, atol=0)
            ref_c, ref_w = reference_attention(kind, attention, query, memory, mask)
            assert_close(w1, ref_w, atol=1e-6, rtol=1e-5)
            assert_close(c1, ref_c, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kind", SCORING_KINDS)
def test_project_keys_is_the_only_key_projection(kind):
    """forward() scores with the keys it is given: it never re-projects the memory itself."""
    torch.manual_seed(6)
    attention, _, qd, kd = build(kind)
    memory = torch.randn(1, 4, kd)
    mask = torch.ones(1, 4, dtype=torch.bool)
    keys = attention.project_keys(memory)
    query = torch.randn(1, 2, qd)
    calls = []
    if hasattr(attention, "key_proj"):
        attention.key_proj.register_forward_hook(lambda *a: calls.append(1))
    _, w = attention(query, keys, memory, mask)
    assert calls == []
    # Other keys with the same values change the weights: the scores come from `keys`.
    _, w_other = attention(query, keys.flip(1), memory, mask)
    assert_close(w_other, w.flip(-1))


@pytest.mark.parametrize("kind", KINDS)
def test_no_state_between_calls(kind):
    """Two memories used alternately give the results each gives on a fresh module."""
    torch.manual_seed(7)
    attention, _, qd, kd = build(kind)
    mem_a, mem_b = torch.randn(2, 3, kd), torch.randn(1, 6, kd)
    mask_a = torch.tensor([[True, True, True], [True, False, False]])
    mask_b = torch.tensor([[True] * 4 + [False] * 2])
    keys_a, keys_b = attention.project_keys(mem_a), attention.project_keys(mem_b)
    queries_a = [torch.randn(2, 1, qd) for _ in range(3)]
    queries_b = [torch.randn(1, 2, qd) for _ in range(3)]
    fresh, _ = make_attention(kind, qd, kd, 5)
    fresh.load_state_dict(attention.state_dict())
    expected_a = [fresh(q, fresh.project_keys(mem_a), mem_a, mask_a) for q in queries_a]
    fresh2, _ = make_attention(kind, qd, kd, 5)
    fresh2.load_state_dict(attention.state_dict())
    expected_b = [fresh2(q, fresh2.project_keys(mem_b), mem_b, mask_b) for q in queries_b]
    buffers_before = {k: v.clone() for k, v in attention.state_dict().items()}
    attrs_before = set(vars(attention))
    for i in range(3):
        got_a = attention(queries_a[i], keys_a, mem_a, mask_a)
        got_b = attention(queries_b[i], keys_b, mem_b, mask_b)
        assert_close(got_a[0], expected_a[i][0], rtol=0, atol=0)
        assert_close(got_b[0], expected_b[i][0], rtol=0, atol=0)
        if kind != "none":
            assert_close(got_a[1], expected_a[i][1], rtol=0, atol=0)
            assert_close(got_b[1], expected_b[i][1], rtol=0, atol=0)
            ref_a = reference_attention(kind, attention, queries_a[i], mem_a, mask_a)
            ref_b = reference_attention(kind, attention, queries_b[i], mem_b, mask_b)
            assert_close(got_a[1], ref_a[1], atol=1e-6, rtol=1e-5)
            assert_close(got_b[1], ref_b[1], atol=1e-6, rtol=1e-5)
    assert set(vars(attention)) == attrs_before
    for k, v in attention.state_dict().items():
        assert torch.equal(v, buffers_before[k])


def tiny_model(kind, order, fast=True):
    torch.manual_seed(8)
    config = RNNConfig(rnn="gru", emb_dim=6, enc_hidden=4, bidirectional=True, dec_hidden=8,
                       attention=kind, attn_dim=5, decoder=order, dropout=0.0)
    return RNNEncoderDecoder(config, 10, 11, fast).eval()


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("order", ["bahdanau", "luong"])
@pytest.mark.parametrize("kind", KINDS)
def test_model_projects_keys_once_per_sentence(kind, order, fast):
    """encode() projects the memory once; decoding steps only reuse the keys (through the fast paths
    and through the reference modules)."""
    model = tiny_model(kind, order, fast)
    attention = model.decoder.attention
    calls = []
    original = attention.project_keys

    def counting(memory):
        calls.append(tuple(memory.shape))
        return original(memory)

    attention.project_keys = counting
    key_proj_calls = []
    if hasattr(attention, "key_proj"):
        attention.key_proj.register_forward_hook(lambda *a: key_proj_calls.append(1))
    src = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]])
    lengths = torch.tensor([4, 2])
    tgt_in = torch.tensor([[2, 4, 5, 6, 7], [2, 8, 9, 0, 0]])
    forced_logits(model, src, lengths, tgt_in)
    assert calls == [(2, 4, 8)]
    greedy(model, src, lengths, torch.tensor([6, 6]))
    assert calls == [(2, 4, 8), (2, 4, 8)]
    if hasattr(attention, "key_proj"):
        assert len(key_proj_calls) == 2


# ---------------------------------------------------------------- Luong's local attention

def local(kind: str, window: int, score: str = "dot", dim: int = 3):
    module, width = make_attention(kind, dim, dim, 4, local_score=score, local_window=window)
    assert isinstance(module, LocalAttention) and width == dim
    return module


def by_hand(query, memory, allowed, factor=None):
    """Weights of one query by hand: softmax of the dot scores over the allowed 1-based positions."""
    scores = [sum(q * h for q, h in zip(query, memory[s - 1])) for s in allowed]
    weights = [0.0] * len(memory)
    for s, w in zip(allowed, softmax_list(scores)):
        weights[s - 1] = w * (factor(s) if factor else 1.0)
    return weights


QUERY = [[0.5, -1.0, 2.0]]
MEMORY = [[1.0, 0.0, 0.5], [0.2, 0.3, -0.1], [-1.0, 1.0, 1.0], [0.0, 2.0, 0.0], [1.5, -0.5, 0.3], [0.4, 0.4, 0.4]]


@pytest.mark.parametrize("t,length,window,allowed", [
    (3, 6, 1, [2, 3, 4]),          # a window inside the sentence
    (1, 6, 2, [1, 2, 3]),          # cut at the sentence's start
    (6, 6, 2, [4, 5, 6]),          # cut at its end
    (9, 4, 1, [3, 4]),             # a target past the source's end: p_t capped at S (positions 5, 6 are pads)
    (2, 4, 10, [1, 2, 3, 4]),      # a window wider than the sentence: global attention over it
])
def test_local_m_window_by_hand(t, length, window, allowed):
    module = local("local_m", window)
    mask = torch.tensor([[j < length for j in range(6)]])
    context, weights = module(torch.tensor([QUERY]), torch.tensor([MEMORY]), torch.tensor([MEMORY]), mask,
                              torch.tensor([[t]]))
    expected = by_hand(QUERY[0], MEMORY, allowed)
    assert_close(weights[0, 0], torch.tensor(expected))
    assert all(weights[0, 0, j] == 0 for j in range(6) if j + 1 not in allowed)     # exactly 0 outside
    assert_close(context[0, 0], torch.tensor(mix(expected, MEMORY)))


def test_local_m_over_the_whole_sentence_is_global_attention():
    module, (global_dot, _) = local("local_m", 10), make_attention("dot", 3, 3, 4)
    query, memory = torch.randn(2, 5, 3), torch.randn(2, 7, 3)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    positions = torch.arange(1, 6).repeat(2, 1)
    for got, expected in zip(module(query, memory, memory, mask, positions), global_dot(query, memory, memory, mask)):
        assert_close(got, expected)


def test_local_p_gaussian_by_hand():
    """v_p = 0 puts p_t at S/2 for any query: S = 6, p_t = 3, D = 2 (σ = 1): positions 1 .. 5, each
    weight times exp(-(s - 3)² / 2)."""
    module = local("local_p", 2)
    with torch.no_grad():
        module.position_v.weight.zero_()
    mask = torch.ones(1, 6, dtype=torch.bool)
    context, weights = module(torch.tensor([QUERY]), torch.tensor([MEMORY]), torch.tensor([MEMORY]), mask,
                              torch.tensor([[1]]))
    expected = by_hand(QUERY[0], MEMORY, [1, 2, 3, 4, 5], lambda s: math.exp(-((s - 3) ** 2) / 2))
    assert_close(weights[0, 0], torch.tensor(expected))
    assert weights[0, 0, 5] == 0 and weights[0, 0].sum() < 1
    assert_close(context[0, 0], torch.tensor(mix(expected, MEMORY)))


def test_local_p_predicts_its_centre_from_the_query():
    """p_t = S · sigmoid(v_pᵀ tanh(W_p q)), by hand, for each sentence's own length."""
    module = local("local_p", 1)
    query = torch.randn(2, 3, 3)
    mask = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])
    centres = module.centres(query, mask, torch.ones(2, 3, dtype=torch.long))
    v, w = module.position_v.weight[0], module.position_proj.weight
    for b, length in enumerate([8, 5]):
        for t in range(3):
            expected = length * torch.sigmoid(v @ torch.tanh(w @ query[b, t]))
            assert centres[b, t].item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("score", ["dot", "general", "concat"])
def test_local_p_gradients_reach_the_position_predictor(score):
    module = local("local_p", 2, score)
    query, memory = torch.randn(2, 4, 3, requires_grad=True), torch.randn(2, 6, 3)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    context, _ = module(query, module.project_keys(memory), memory, mask, torch.arange(1, 5).repeat(2, 1))
    context.square().sum().backward()
    for name, parameter in module.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert query.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["local_m", "local_p"])
@pytest.mark.parametrize("score", ["dot", "general", "concat"])
def test_local_sentence_alone_equals_it_padded_in_a_batch(kind, score):
    module = local(kind, 2, score)
    query, memory = torch.randn(3, 5, 3), torch.randn(3, 8, 3)
    mask = torch.tensor([[True] * 8, [True] * 4 + [False] * 4, [True] * 6 + [False] * 2])
    positions = torch.arange(1, 6).repeat(3, 1)
    context, weights = module(query, module.project_keys(memory), memory, mask, positions)
    n = 4
    alone_context, alone_weights = module(query[1:2], module.project_keys(memory[1:2, :n]), memory[1:2, :n],
                                          mask[1:2, :n], positions[1:2])
    assert_close(alone_weights, weights[1:2, :, :n])
    assert (weights[1, :, n:] == 0).all()
    assert_close(alone_context, context[1:2])


@pytest.mark.parametrize("kind", ["local_m", "local_p"])
@pytest.mark.parametrize("feeding", [False, True])
def test_local_decoder_step_by_step_equals_all_steps_at_once(kind, feeding):
    """Each step reads its own target position: the teacher-forced pass and the pass one step at a
    time (the searches' way) give the same weights and logits."""
    config = RNNConfig(emb_dim=8, enc_hidden=6, dec_hidden=12, attention=kind, local_window=1, attn_dim=5,
                         decoder="luong", input_feeding=feeding, dropout=0.0)
    model = RNNEncoderDecoder(config, 10, 11).eval()
    src, lengths = torch.tensor([[4, 5, 6, 7, 8, 9], [8, 9, 4, 0, 0, 0]]), torch.tensor([6, 3])
    tgt_in = torch.tensor([[2, 4, 5, 6, 7, 8, 9, 4], [2, 8, 9, 4, 5, 0, 0, 0]])
    features, weights = model.features(src, lengths, tgt_in)
    logits = model.output_layer(features)
    memory, state = model.encode(src, lengths)
    for t in range(tgt_in.shape[1]):
        step_logits, state, step_weights = model.step(tgt_in[:, t : t + 1], state, memory)
        assert_close(step_weights[:, 0], weights[:, t])
        assert_close(step_logits[:, 0], logits[:, t])
    if kind == "local_m":  # the window slides: step t attends t-1 .. t+1, capped at the source's length
        assert (weights[0, 0, 2:] == 0).all() and (weights[0, 4, :3] == 0).all() and weights[0, 4, 3:6].sum() > 0.99
        assert weights[1, 7, 1:3].sum() > 0.99
