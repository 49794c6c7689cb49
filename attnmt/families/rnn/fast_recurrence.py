"""Recurrent loops of training as single autograd nodes with hand-written backwards: the
teacher-forced decoder loop of the Luong order with input feeding (replaces
Decoder.features_step_by_step there) and the encoder's GRU layers (replaces nn.GRU over packed
sequences when training on CPUs).

Through autograd every step of a loop adds dozens of small nodes, and every weight gets a small
gradient product per step, summed one by one. Here each forward loop keeps what its backward
needs, the backward runs the steps in reverse by hand, and each weight's gradient is one matrix
product over all steps.

With input feeding each decoder step reads the previous step's attentional vector, so even with
the gold target known the decoder runs step by step. Products that read the same vector share
one call: the new state h_t feeds the query, the combine layer and the next step's recurrent
gates, so those three weights are stacked. InputFedGRUAttention covers one-layer GRU decoders
with additive, dot or general attention: the peers' model of the speed benchmark.
FusedDecoder.features uses it for them under full teacher forcing (the network builds a
FusedDecoder for those alone), GRULayerEncoder uses GRULayer when it trains on a CPU (built for GRU
encoders); tests/test_fast.py checks both compute what autograd through the reference modules
computes, and that fast.fast_paths_in names them where they run.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch.nn import functional as F

from ...fast.gru import gru_cell, gru_cell_backward, tanh_
from .attention import AdditiveAttention, Attention, DotAttention, GeneralAttention
from .config import RNNConfig
from .decoder import Decoder, RNNDecoderState, RNNMemory
from .encoder import Encoder, RNNState
from .fast_attention import SigmoidAdditiveAttention, sigmoid_hidden, sigmoid_hidden_grad


def product_dtype(device: torch.device, state_dtype: torch.dtype) -> torch.dtype:
    """The dtype of matrix products: autocast's when it is on, else that of the state."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return state_dtype


class LoopWeights(NamedTuple):
    """The weights the input-fed decoder loop reads (w: [out, in], b: [out])."""

    w_ih: torch.Tensor                 # [3H, E + O], the GRU's input gates over [embedding; previous h~]
    b_ih: torch.Tensor
    w_hh: torch.Tensor                 # [3H, H], its recurrent gates
    b_hh: torch.Tensor
    w_query: Optional[torch.Tensor]    # [A, H], additive attention's W_q (else None)
    b_query: Optional[torch.Tensor]    # [A], concat's bias (else None)
    v: Optional[torch.Tensor]          # [A], additive attention's v (else None)
    w_combine: torch.Tensor            # [O, D + H], W_c over [context; h_t]
    b_combine: torch.Tensor

    @classmethod
    def of(cls, decoder: Decoder) -> "LoopWeights":
        rnn, attention = decoder.rnn, decoder.attention
        additive = attention if isinstance(attention, AdditiveAttention) else None
        return cls(rnn.weight_ih_l0, rnn.bias_ih_l0, rnn.weight_hh_l0, rnn.bias_hh_l0,
                   None if additive is None else additive.query_proj.weight,
                   None if additive is None else additive.query_proj.bias,
                   None if additive is None else additive.v.weight[0], decoder.combine.weight, decoder.combine.bias)


class LoopKept(NamedTuple):
    """What the loop's forward keeps for its backward: time-major, per step t."""

    states: torch.Tensor               # [T + 1, B, H], states[t + 1] = h_t
    projections: torch.Tensor          # [T + 1, B, A + O + G], the products of states[t]
    gates_rz: torch.Tensor             # [T, B, 2H], σ(r, z)
    gates_n: torch.Tensor              # [T, B, H]
    weights: torch.Tensor              # [T, B, S], attention weights
    contexts: torch.Tensor             # [T, B, D]
    features: torch.Tensor             # [T, B, O], h~_t
    hiddens: Optional[torch.Tensor]    # [T, B, S, A], additive: σ(2 W_q h_t + 2 W_k h_j)
    embedded: torch.Tensor             # the inputs and weights cast to the product dtype
    w_embedded: torch.Tensor
    w_state: torch.Tensor
    w_feed: torch.Tensor
    w_context: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    v: Optional[torch.Tensor]


class LoopDims(NamedTuple):
    """The loop's widths and product dtype, as its backward reads them."""

    A: int                             # additive attention's (0 for dot and general)
    O: int                             # the attentional vector's, h~_t
    D: int                             # the context's, c_t
    dtype: torch.dtype                 # of the matrix products
    query_bias: bool                   # whether W_q has a bias (concat)


class InputFedGRUAttention(torch.autograd.Function):
    """Features [B, T, O] and attention weights [B, T, S] for all T steps.

    Inputs: embedded [B, T, E], the target's input embeddings; h0 [B, H]; keys [B, S, A]
    (additive: W_k h; dot/general: [B, S, H]); values [B, S, D]; mask [B, S], True at real
    tokens; then the LoopWeights. Additive scores take the sigmoid form (fast_attention.py).
    State and gate arithmetic is in the weights' precision (at least float32); matrix products run
    in the autocast dtype when autocast is on.
    """

    @staticmethod
    def forward(ctx, embedded, h0, keys, values, mask, *loop_weights):
        w_ih, b_ih, w_hh, b_hh, w_query, b_query, v, w_combine, b_combine = LoopWeights(*loop_weights)
        state_dtype = torch.promote_types(w_hh.dtype, torch.float32)               # float32 (float64 in tests)
        dtype = product_dtype(embedded.device, state_dtype)
        with torch.autocast(embedded.device.type, enabled=False):
            B, T, E = embedded.shape
            G, H, O, D, S = w_hh.shape[0], w_hh.shape[1], w_combine.shape[0], values.shape[2], values.shape[1]
            additive = v is not None
            A = 0 if w_query is None else w_query.shape[0]
            query_bias = b_query is not None
            # Everything that reads h_t, in one product: [query; combine's h_t part; next step's gates].
            w_state = torch.cat(([] if w_query is None else [w_query]) + [w_combine[:, D:], w_hh])   # [A + O + G, H]
            b_state = torch.cat([b_hh.new_zeros(A) if b_query is None else b_query, b_combine, b_hh])
            w_state_c, b_state_c = w_state.to(dtype), b_state.to(dtype)
            w_embedded_c, w_feed_c, w_context_c = w_ih[:, :E].to(dtype), w_ih[:, E:].to(dtype), w_combine[:, :D].to(dtype)
            embedded_c = embedded.to(dtype)
            keys_c, values_c = keys.to(dtype), values.to(dtype)
            v_c = None if v is None else v.to(dtype)
            pads = ~mask                                                            # [B, S]

            def new(*shape: int, dtype: torch.dtype = state_dtype) -> torch.Tensor:
                return embedded.new_empty(*shape, dtype=dtype)

            # The embeddings' share of the input gates, for all steps in one product.
            gi_all = F.linear(embedded_c, w_embedded_c, b_ih.to(dtype)).to(state_dtype)  # [B, T, G]
            states = new(T + 1, B, H)                                               # states[t + 1] = h_t
            states[0] = h0
            # projections[t] = the products of states[t]; the first one needs only the gates part.
            projections = new(T + 1, B, A + O + G)
            projections[0, :, A + O:] = F.linear(h0.to(dtype), w_hh.to(dtype), b_hh.to(dtype))
            gates_rz, gates_n = new(T, B, 2 * H), new(T, B, H)                      # σ(r, z), n
            weights, contexts, features = new(T, B, S), new(T, B, D), new(T, B, O)
            hiddens = new(T, B, S, A, dtype=keys_c.dtype) if additive else None    # [T, B, S, A]
            for t in range(T):
                gh = projections[t, :, A + O:]                                      # [B, G]
                gi = gi_all[:, t]
                if t > 0:
                    gi = gi + F.linear(features[t - 1].to(dtype), w_feed_c)        # [B, G]
                h = gru_cell(gi, gh, states[t], gates_rz[t], gates_n[t], out=states[t + 1])  # [B, H]
                projections[t + 1] = F.linear(h.to(dtype), w_state_c, b_state_c)
                projected = projections[t + 1]                                      # [B, A + O + G]
                if additive:
                    assert hiddens is not None and v_c is not None
                    hidden = sigmoid_hidden(projected[:, None, :A].to(dtype), keys_c,
                                            out=hiddens[t].unsqueeze(1))[:, 0]      # [B, S, A]
                    scores = 2 * torch.matmul(hidden, v_c).to(state_dtype)         # [B, S]
                else:
                    scores = torch.bmm(keys_c, h.to(dtype).unsqueeze(2))[:, :, 0].to(state_dtype)  # [B, S]
                weights[t] = torch.softmax(scores.masked_fill_(pads, float("-inf")), dim=-1)
                contexts[t] = torch.bmm(weights[t].to(dtype).unsqueeze(1), values_c)[:, 0]  # [B, D]
                tanh_(torch.add(F.linear(contexts[t].to(dtype), w_context_c), projected[:, A:A + O], out=features[t]))

        ctx.dims = LoopDims(A, O, D, dtype, query_bias)
        ctx.set_materialize_grads(False)  # no zeros for the weights' gradient when no loss reads them
        ctx.input_dtypes = (embedded.dtype, h0.dtype, keys.dtype, values.dtype)
        ctx.save_for_backward(*LoopKept(states, projections, gates_rz, gates_n, weights, contexts, features, hiddens,
                                        embedded_c, w_embedded_c, w_state_c, w_feed_c, w_context_c, keys_c, values_c,
                                        v_c))
        return features.transpose(0, 1), weights.transpose(0, 1)                   # [B, T, O], [B, T, S]

    @staticmethod
    def backward(ctx, grad_features, grad_weights):
        dims: LoopDims = ctx.dims
        kept = LoopKept(*ctx.saved_tensors)
        grad_features = torch.zeros_like(kept.features) if grad_features is None else grad_features.transpose(0, 1)  # [T, B, O]
        if grad_weights is not None:
            grad_weights = grad_weights.transpose(0, 1)                           # [T, B, S]
        grads, grad_h0 = steps_backward(kept, dims, grad_features, grad_weights)
        grad_embedded, grad_keys, grad_values, grad_loop_weights = products_backward(kept, dims, grads)
        embedded_dtype, h0_dtype, keys_dtype, values_dtype = ctx.input_dtypes
        return (grad_embedded.to(embedded_dtype), grad_h0.to(h0_dtype), grad_keys.to(keys_dtype),
                grad_values.to(values_dtype), None, *grad_loop_weights)


class StepGrads(NamedTuple):
    """The gradients of every step's products, time-major: what each weight's gradient sums over steps."""

    state_rows: torch.Tensor           # [T + 1, B, A + O + G], row k of projections[k]: [query, combine's h_t part, gates]
    gi: torch.Tensor                   # [T, B, G], of the gates' input part
    contexts: torch.Tensor             # [T, B, D], of c_t
    scores: torch.Tensor               # [T, B, S], of the scores (additive: of vᵀσ(x), twice the score's)
    keys: Optional[torch.Tensor]       # [B, S, A], additive: of x through W_k h_j, summed over steps (else None)


def steps_backward(kept: LoopKept, dims: LoopDims, grad_features: torch.Tensor, grad_weights: Optional[torch.Tensor]
                   ) -> tuple[StepGrads, torch.Tensor]:
    """The loop's steps in reverse, given the gradients of the features [T, B, O] and of the attention
    weights [T, B, S] (or None): every step's gradients and h0's [B, H]."""
    A, O, dtype, states = dims.A, dims.O, dims.dtype, kept.states
    T, B, H = kept.gates_n.shape
    grads = StepGrads(states.new_zeros(T + 1, B, A + O + 3 * H), states.new_empty(T, B, 3 * H),
                      states.new_empty(T, B, dims.D), states.new_empty(T, B, kept.weights.shape[2]),
                      torch.zeros_like(kept.keys, dtype=states.dtype) if A > 0 else None)
    grad_combined = grads.state_rows[1:, :, A:A + O]                           # [T, B, O], a view
    grad_hidden = None if kept.hiddens is None else torch.empty_like(kept.hiddens[0])  # [B, S, A], each step's in turn
    grad_h_carry = states.new_zeros(B, H)     # of h_t through h_{t+1} = n + z (h_t - n)
    grad_feed = states.new_zeros(B, O)        # of the attentional vector through the next step's input
    for t in reversed(range(T)):
        # h~_t = tanh(W_c [c_t; h_t]): the gradient of the product, the combine part of row t + 1
        f = kept.features[t]
        grad_pre = torch.mul(f, f, out=grad_combined[t]).neg_().add_(1).mul_(grad_features[t] + grad_feed)
        grad_s = attention_backward(kept, dims, grads, t, grad_pre,
                                    None if grad_weights is None else grad_weights[t], grad_hidden)
        # h_t: through the products that read it (row t + 1) and through h_{t+1}
        grad_h = (grads.state_rows[t + 1].to(dtype) @ kept.w_state).to(states.dtype).add_(grad_h_carry)  # [B, H]
        if A == 0:                                                             # dot, general: s_j = k_jᵀ h_t
            grad_h += torch.bmm(grad_s.to(dtype).unsqueeze(1), kept.keys)[:, 0]
        # The gates' input part goes to grads.gi, their recurrent part to the row of projections[t].
        grad_h_carry = gru_cell_backward(grad_h, states[t], kept.gates_rz[t], kept.gates_n[t],
                                         kept.projections[t, :, A + O + 2 * H:], grads.gi[t],
                                         grads.state_rows[t, :, A + O:])
        if t > 0:                                                              # input feeding: h~_{t-1} in step t's input
            grad_feed = (grads.gi[t].to(dtype) @ kept.w_feed).to(states.dtype)
    grad_h0 = (grads.state_rows[0].to(dtype) @ kept.w_state).to(states.dtype).add_(grad_h_carry)
    return grads, grad_h0


def attention_backward(kept: LoopKept, dims: LoopDims, grads: StepGrads, t: int, grad_pre: torch.Tensor,
                       grad_weights: Optional[torch.Tensor], grad_hidden: Optional[torch.Tensor]) -> torch.Tensor:
    """Step t's attention in reverse, from the gradient of W_c [c_t; h_t] grad_pre [B, O] (and of
    α_t, grad_weights [B, S], if a loss reads it): c_t's into grads.contexts, the scores' into
    grads.scores (returned); for additive scores, W_q h_t's into the query part of row t + 1 and W_k
    h_j's added to grads.keys, through grad_hidden [B, S, A]."""
    A, dtype, alpha = dims.A, dims.dtype, kept.weights[t]                  # α_t [B, S]
    grads.contexts[t] = grad_pre.to(dtype) @ kept.w_context                # [B, D]
    # c_t = Σ_j α_tj v_j
    grad_alpha = torch.bmm(kept.values, grads.contexts[t].to(dtype).unsqueeze(2))[:, :, 0].to(alpha.dtype)  # [B, S]
    if grad_weights is not None:
        grad_alpha += grad_weights
    # α_t = softmax(s)
    grad_s = torch.mul(alpha, grad_alpha - (alpha * grad_alpha).sum(-1, keepdim=True), out=grads.scores[t])
    if A > 0:  # s = 2 vᵀ σ(x), x = 2 W_q h_t + 2 W_k h_j
        assert kept.hiddens is not None and kept.v is not None and grads.keys is not None and grad_hidden is not None
        grad_s.mul_(2)
        sigmoid_hidden_grad(kept.hiddens[t], kept.v, grad_s, out=grad_hidden)  # [B, S, A], of x
        grads.keys.add_(grad_hidden)  # per step: all steps' kept for one sum needed as much memory again as hiddens
        row = grads.state_rows[t + 1]
        row[:, :A] = grad_hidden.sum(1)
        row[:, :A] *= 2
    return grad_s


def products_backward(kept: LoopKept, dims: LoopDims, grads: StepGrads
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, LoopWeights]:
    """Each weight's gradient as one product over all steps, and the gradients of the inputs the
    products read: embedded [B, T, E], keys, values [B, S, D]."""
    A, O, dtype, state_dtype = dims.A, dims.O, dims.dtype, kept.states.dtype

    def product(rows: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:     # Σ rowsᵀ inputs over steps
        return (rows.reshape(-1, rows.shape[-1]).T.to(dtype) @ inputs.reshape(-1, inputs.shape[-1]).to(dtype)).to(state_dtype)

    grad_w_state = product(grads.state_rows, kept.states)                     # [A + O + G, H]
    grad_b_state = grads.state_rows.sum((0, 1))
    grad_w_combine = torch.cat([product(grads.state_rows[1:, :, A:A + O], kept.contexts), grad_w_state[A:A + O]], dim=1)
    embedded_steps = kept.embedded.transpose(0, 1)                            # [T, B, E]
    grad_w_ih = torch.cat([product(grads.gi, embedded_steps), product(grads.gi[1:], kept.features[:-1])], dim=1)
    grad_embedded = (grads.gi.to(dtype) @ kept.w_embedded).transpose(0, 1)    # [B, T, E]
    grad_values = torch.bmm(kept.weights.permute(1, 2, 0).to(dtype), grads.contexts.transpose(0, 1).to(dtype))
    grad_v: Optional[torch.Tensor]
    grad_w_query: Optional[torch.Tensor]
    grad_b_query: Optional[torch.Tensor]
    if A > 0:
        assert kept.hiddens is not None and grads.keys is not None
        grad_v = product(grads.scores.reshape(-1, 1), kept.hiddens)[0]       # [A]
        grad_keys = grads.keys.mul_(2)                                        # dx / d(W_k h_j) = 2
        grad_w_query = grad_w_state[:A]
        grad_b_query = grad_b_state[:A] if dims.query_bias else None
    else:
        grad_v = grad_w_query = grad_b_query = None
        grad_keys = torch.bmm(grads.scores.permute(1, 2, 0).to(dtype), kept.states[1:].transpose(0, 1).to(dtype))
    grad_loop_weights = LoopWeights(grad_w_ih, grads.gi.sum((0, 1)), grad_w_state[A + O:], grad_b_state[A + O:],
                                    grad_w_query, grad_b_query, grad_v, grad_w_combine, grad_b_state[A:A + O])
    return grad_embedded, grad_keys, grad_values, grad_loop_weights


class LayerKept(NamedTuple):
    """What GRULayer's forward keeps for its backward: time-major, sentences longest first."""

    order: torch.Tensor                # [B], the given rows in the loop's order
    rows_back: torch.Tensor            # [B], its inverse
    lengths_sorted: torch.Tensor       # [B]
    reverse: torch.Tensor              # [S, B], reversal_index
    inputs: torch.Tensor               # [D, S, B, E], each direction's, in the product dtype
    states: torch.Tensor               # [D, S + 1, B, H], states[:, t + 1] = h_t
    gates_rz: torch.Tensor             # [D, S, B, 2H], σ(r, z)
    gates_n: torch.Tensor              # [D, S, B, H]
    gh_n: torch.Tensor                 # [D, S, B, H], the recurrent product's n part
    w_ih: torch.Tensor
    w_hh: torch.Tensor


class GRULayer(torch.autograd.Function):
    """One GRU layer over padded sentences, in one or both directions, as one autograd node:
    what nn.GRU computes from a packed sequence, outputs [B, S, D·H] (zeros at pads) and final
    states [D, B, H].

    Inputs: x [B, S, E]; lengths [B] (on the CPU, all ≥ 1); the D directions' weights stacked,
    forward first: w_ih [D, 3H, E], b_ih [D, 3H], w_hh [D, 3H, H], b_hh [D, 3H]. The second
    direction reads each sentence backwards from its last real token. Rows run longest first, so
    the sentences still going at a step are a prefix of the batch: both directions' recurrent
    products are one batched product over those rows only, and each weight's gradient is one
    product over all steps. Precision as in InputFedGRUAttention.
    """

    @staticmethod
    def forward(ctx, x, lengths, w_ih, b_ih, w_hh, b_hh):
        state_dtype = torch.promote_types(w_hh.dtype, torch.float32)
        dtype = product_dtype(x.device, state_dtype)
        with torch.autocast(x.device.type, enabled=False):
            B, S, E = x.shape
            D, H = w_hh.shape[0], w_hh.shape[2]
            order = torch.argsort(lengths, descending=True, stable=True)         # [B]
            lengths_sorted = lengths[order]
            running = (lengths_sorted.unsqueeze(0) > torch.arange(S).unsqueeze(1)).sum(1).tolist()  # rows at each step
            reverse = reversal_index(lengths_sorted, S).to(x.device)                # [S, B]
            order, lengths_sorted = order.to(x.device), lengths_sorted.to(x.device)
            inputs = x[order].transpose(0, 1).to(dtype).contiguous()               # [S, B, E], time-major
            if D == 2:
                inputs = torch.stack([inputs, reverse_time(inputs, reverse)])       # [D, S, B, E]
            else:
                inputs = inputs.unsqueeze(0)
            w_hh_c = w_hh.to(dtype).transpose(1, 2)                                 # [D, H, 3H]
            b_hh_c = b_hh.to(dtype).unsqueeze(1)                                    # [D, 1, 3H]
            # The input part of the gates, for all steps at once.
            gi = torch.baddbmm(b_ih.to(dtype).unsqueeze(1), inputs.view(D, S * B, E),
                               w_ih.to(dtype).transpose(1, 2)).to(state_dtype).view(D, S, B, 3 * H)
            states = x.new_zeros(D, S + 1, B, H, dtype=state_dtype)                # states[:, t + 1] = h_t; 0 past the end
            # What the backward reads, at the running rows only.
            gates_rz = x.new_empty(D, S, B, 2 * H, dtype=state_dtype)
            gates_n, gh_n = x.new_empty(D, S, B, H, dtype=state_dtype), x.new_empty(D, S, B, H, dtype=state_dtype)
            for t, rows in enumerate(running):
                h = states[:, t, :rows]                                             # [D, rows, H]
                gh = torch.baddbmm(b_hh_c, h.to(dtype), w_hh_c).to(state_dtype)   # [D, rows, 3H]
                gh_n[:, t, :rows] = gh[..., 2 * H:]
                gru_cell(gi[:, t, :rows], gh, h, gates_rz[:, t, :rows], gates_n[:, t, :rows], out=states[:, t + 1, :rows])

        rows_back = torch.argsort(order)                                            # sorted -> given order
        ctx.dims = (dtype, x.dtype, running)
        ctx.save_for_backward(*LayerKept(order, rows_back, lengths_sorted, reverse, inputs, states, gates_rz, gates_n,
                                         gh_n, w_ih, w_hh))
        outputs = states[:, 1:]                                                     # [D, S, B, H]
        if D == 2:
            outputs = torch.stack([outputs[0], reverse_time(outputs[1], reverse)])
        batch = torch.arange(B, device=x.device)
        final = states[:, lengths_sorted, batch][:, rows_back]                      # [D, B, H]
        outputs = outputs.permute(2, 1, 0, 3)[rows_back].reshape(B, S, D * H)      # [B, S, D·H]
        return outputs.to(x.dtype), final.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_outputs, grad_final):
        dtype, x_dtype, running = ctx.dims
        kept = LayerKept(*ctx.saved_tensors)
        order, states, w_ih, w_hh = kept.order, kept.states, kept.w_ih, kept.w_hh
        D, S, B, E = kept.inputs.shape
        H = states.shape[-1]
        state_dtype = states.dtype
        # The outputs' gradient, time-major in the loop's order, the final state's added at each row's last step.
        grad_states = grad_outputs[order].to(state_dtype).view(B, S, D, H).permute(2, 1, 0, 3).contiguous()  # [D, S, B, H]
        if D == 2:
            grad_states[1] = reverse_time(grad_states[1], kept.reverse)
        batch = torch.arange(B, device=order.device)
        grad_states[:, kept.lengths_sorted - 1, batch] += grad_final[:, order].to(state_dtype)
        w_hh_c = w_hh.to(dtype)                                                    # [D, 3H, H]
        grad_gi = states.new_zeros(D, S, B, 3 * H)
        grad_gh = states.new_zeros(D, S, B, 3 * H)
        grad_carry = states.new_zeros(D, B, H)                                     # of h_t through step t + 1
        for t in reversed(range(S)):
            rows = running[t]
            grad_h = grad_carry[:, :rows] + grad_states[:, t, :rows]              # [D, rows, H]
            through_z = gru_cell_backward(grad_h, states[:, t, :rows], kept.gates_rz[:, t, :rows], kept.gates_n[:, t, :rows],
                                          kept.gh_n[:, t, :rows], grad_gi[:, t, :rows], grad_gh[:, t, :rows])
            grad_carry[:, :rows] = torch.bmm(grad_gh[:, t, :rows].to(dtype), w_hh_c).to(state_dtype).add_(through_z)

        def product(grads: torch.Tensor, read: torch.Tensor) -> torch.Tensor:  # Σ gradsᵀ read over steps and rows
            return torch.bmm(grads.view(D, S * B, -1).transpose(1, 2).to(dtype), read.reshape(D, S * B, -1).to(dtype))

        grad_w_ih = product(grad_gi, kept.inputs).to(state_dtype)                       # [D, 3H, E]
        grad_w_hh = product(grad_gh, states[:, :-1]).to(state_dtype)              # [D, 3H, H]
        grad_inputs = torch.bmm(grad_gi.view(D, S * B, 3 * H).to(dtype), w_ih.to(dtype)).view(D, S, B, E)
        grad_x = grad_inputs[0].to(state_dtype)
        if D == 2:
            grad_x += reverse_time(grad_inputs[1], kept.reverse)
        grad_x = grad_x.transpose(0, 1)[kept.rows_back]                                 # [B, S, E], given order
        return (grad_x.to(x_dtype), None, grad_w_ih.to(w_ih.dtype), grad_gi.sum((1, 2)).to(w_ih.dtype),
                grad_w_hh.to(w_hh.dtype), grad_gh.sum((1, 2)).to(w_hh.dtype))


def reversal_index(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """[steps, B]: at step t, sentence b's position when read backwards from its last real token
    (pads stay in place). Its own inverse."""
    positions = torch.arange(steps).unsqueeze(1)                                    # [S, 1]
    lengths = lengths.cpu().unsqueeze(0)                                            # [1, B]
    return torch.where(positions < lengths, lengths - 1 - positions, positions)


def reverse_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x [S, B, ...] with each sentence's real positions read backwards (reversal_index)."""
    return x.gather(0, index.view(*index.shape, *[1] * (x.dim() - 2)).expand_as(x))


def layer_by_layer(gradients: bool, device: torch.device) -> bool:
    """Whether a GRULayerEncoder runs GRULayer: where gradients flow (training), on a CPU."""
    return gradients and device.type == "cpu"


class GRULayerEncoder(Encoder):
    """Encoder of GRUs that trains layer by layer through GRULayer on CPUs (replaces nn.GRU over a
    packed sequence there: on CPUs its backward runs autograd through every step's small products,
    on GPUs cuDNN's fused kernels are faster still; decoding needs no backward)."""

    replaces = Encoder

    def runs(self, device: torch.device) -> bool:
        """fast.fast_paths_in: in training, on a CPU."""
        return layer_by_layer(self.training, device)

    def run_rnn(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, RNNState]:
        if not layer_by_layer(torch.is_grad_enabled(), x.device):
            return super().run_rnn(x, lengths)
        finals = []
        for layer in range(self.rnn.num_layers):
            if layer > 0:
                x = self.dropout(x)                                         # nn.GRU's dropout between layers
            names = [f"l{layer}", f"l{layer}_reverse"][: self.directions]

            def stacked(kind: str) -> torch.Tensor:
                return torch.stack([getattr(self.rnn, f"{kind}_{name}") for name in names])

            x, final = GRULayer.apply(x, lengths, stacked("weight_ih"), stacked("bias_ih"),
                                      stacked("weight_hh"), stacked("bias_hh"))
            finals.append(final)
        return x, (torch.cat(finals),)                                      # [B, S, D], ([layers x D, B, H],)


FUSED_SCORES = (AdditiveAttention, SigmoidAdditiveAttention, DotAttention, GeneralAttention)


class FusedDecoder(Decoder):
    """Decoder whose teacher-forced loop runs as one InputFedGRUAttention node (replaces
    features_step_by_step for one-layer input-fed GRU decoders of the Luong order with additive, dot
    or general attention, trained under full teacher forcing: `loops`)."""

    replaces = Decoder

    @staticmethod
    def loops(config: RNNConfig, attention: Attention) -> bool:
        """Whether a decoder of `config` with `attention` trains through the fused loop, the network's
        choice: the loop computes the scores it knows; with scheduled sampling (teacher_forcing below
        1) each step's input waits for the last step's output, and training runs step by step."""
        return (config.decoder == "luong" and config.input_feeding and config.rnn == "gru" and config.dec_layers == 1
                and config.teacher_forcing >= 1.0 and type(attention) in FUSED_SCORES)

    def runs(self, device: torch.device) -> bool:
        """fast.fast_paths_in: in training (decoding's steps are Decoder's)."""
        return self.training

    def features(self, tgt_in: torch.Tensor, state: RNNDecoderState, memory: RNNMemory, teacher_forcing: float = 1.0
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        if teacher_forcing < 1.0:
            return super().features(tgt_in, state, memory, teacher_forcing)
        return InputFedGRUAttention.apply(self.embed(tgt_in), state.hidden[0][0], memory.keys, memory.values,
                                          memory.mask, *LoopWeights.of(self))
