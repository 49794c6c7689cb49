"""The teacher-forced decoder loop of the Luong order with input feeding, as one autograd node.

With input feeding each step reads the previous step's attentional vector, so even with the gold
target known the decoder runs step by step. Through autograd every step adds dozens of small
nodes, and every weight gets a small gradient product per step, summed one by one. Here the
forward loop keeps what the backward needs, the backward runs the steps in reverse by hand, and
each weight's gradient is one matrix product over all steps. Products that read the same vector
share one call: the new state h_t feeds the query, the combine layer and the next step's
recurrent gates, so those three weights are stacked.

It covers one-layer GRU decoders with additive, dot or general attention: the peers' model of
the speed benchmark. Decoder.forward uses it for them under full teacher forcing; tests check it
computes what the step-by-step loop computes.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.nn import functional as F

from .attention import sigmoid_hidden, sigmoid_hidden_grad


def product_dtype(device: torch.device, state_dtype: torch.dtype) -> torch.dtype:
    """The dtype of matrix products: autocast's when it is on, else that of the state."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return state_dtype


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh in place, as 2σ(2x) - 1: on CPUs a few times faster than torch.tanh."""
    return x.mul_(2).sigmoid_().mul_(2).sub_(1)


def gru_cell(gi: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, rz: Optional[torch.Tensor] = None,
             n: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A GRU's new state [B, H] from its gates' input part gi and recurrent part gh ([B, 3H] each,
    r, z, n, biases included) and its state h [B, H].

    rz [B, 2H] and n [B, H], if given, receive σ(r, z) and n (a backward reads them); out the new state.
    """
    H = h.shape[1]
    rz = torch.add(gi[:, : 2 * H], gh[:, : 2 * H], out=rz).sigmoid_()
    n = tanh_(torch.addcmul(gi[:, 2 * H :], rz[:, :H], gh[:, 2 * H :], out=n))
    return torch.sub(h, n, out=out).mul_(rz[:, H:]).add_(n)               # n + z (h - n)


class InputFedGRUAttention(torch.autograd.Function):
    """Features [B, T, O] and attention weights [B, T, S] for all T steps.

    Inputs: embedded [B, T, E], the target's input embeddings; h0 [B, H]; keys [B, S, A]
    (additive: doubled, see AdditiveAttention; dot/general: [B, S, H]); values [B, S, D]; mask
    [B, S], True at real tokens; then the weights: w_ih [3H, E + O] and b_ih [3H] (the GRU input
    weights over [embedding; previous attentional vector]), w_hh [3H, H], b_hh [3H], w_query [A, H] and
    b_query [A] (additive only, else None), v [A] (additive only), w_combine [O, D + H] over
    [context; h_t], b_combine [O].
    State and gate arithmetic is in the weights' precision (at least float32); matrix products run
    in the autocast dtype when autocast is on.
    """

    @staticmethod
    def forward(ctx, embedded, h0, keys, values, mask, w_ih, b_ih, w_hh, b_hh, w_query, b_query, v, w_combine, b_combine):
        state_dtype = torch.promote_types(w_hh.dtype, torch.float32)               # float32 (float64 in tests)
        dtype = product_dtype(embedded.device, state_dtype)
        with torch.autocast(embedded.device.type, enabled=False):
            B, T, E = embedded.shape
            G, H, O, D, S = w_hh.shape[0], w_hh.shape[1], w_combine.shape[0], values.shape[2], values.shape[1]
            additive = v is not None
            A = w_query.shape[0] if additive else 0
            query_bias = b_query is not None
            # Everything that reads h_t, in one product: [query; combine's h_t part; next step's gates].
            w_state = torch.cat(([w_query] if additive else []) + [w_combine[:, D:], w_hh])   # [A + O + G, H]
            b_state = torch.cat([b_query if query_bias else b_hh.new_zeros(A), b_combine, b_hh])
            w_state_c, b_state_c = w_state.to(dtype), b_state.to(dtype)
            w_embedded_c, w_feed_c, w_context_c = w_ih[:, :E].to(dtype), w_ih[:, E:].to(dtype), w_combine[:, :D].to(dtype)
            embedded_c = embedded.to(dtype)
            keys_c, values_c = keys.to(dtype), values.to(dtype)
            v_c = v.to(dtype) if additive else None
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
                    hidden = sigmoid_hidden((2 * projected[:, None, :A]).to(dtype), keys_c,
                                            out=hiddens[t].unsqueeze(1))[:, 0]      # [B, S, A]
                    scores = 2 * torch.matmul(hidden, v_c).to(state_dtype)         # [B, S]
                else:
                    scores = torch.bmm(keys_c, h.to(dtype).unsqueeze(2))[:, :, 0].to(state_dtype)  # [B, S]
                weights[t] = torch.softmax(scores.masked_fill_(pads, float("-inf")), dim=-1)
                contexts[t] = torch.bmm(weights[t].to(dtype).unsqueeze(1), values_c)[:, 0]  # [B, D]
                tanh_(torch.add(F.linear(contexts[t].to(dtype), w_context_c), projected[:, A:A + O], out=features[t]))

        ctx.dims = (A, O, D, dtype, query_bias)
        ctx.input_dtypes = (embedded.dtype, h0.dtype, keys.dtype, values.dtype)
        ctx.save_for_backward(states, projections, gates_rz, gates_n, weights, contexts, features,
                              *([hiddens] if additive else []),
                              embedded_c, w_embedded_c, w_state_c, w_feed_c, w_context_c, keys_c, values_c,
                              *([v_c] if additive else []))
        return features.transpose(0, 1), weights.transpose(0, 1)                   # [B, T, O], [B, T, S]

    @staticmethod
    def backward(ctx, grad_features, grad_weights):
        A, O, D, dtype, query_bias = ctx.dims
        additive = A > 0
        saved = list(ctx.saved_tensors)
        states, projections, gates_rz, gates_n, weights, contexts, features = saved[:7]
        rest = saved[7:]
        hiddens = rest.pop(0) if additive else None                                 # [T, B, S, A]
        embedded_c, w_embedded_c, w_state_c, w_feed_c, w_context_c, keys_c, values_c = rest[:7]
        v_c = rest[7] if additive else None
        T, B, H = gates_n.shape
        G = 3 * H
        state_dtype = states.dtype

        grad_features = grad_features.transpose(0, 1)                             # [T, B, O]
        if grad_weights is not None:
            grad_weights = grad_weights.transpose(0, 1)                           # [T, B, S]
        # Row k: the gradient of projections[k], the products of states[k]: [query, combine, gates].
        state_rows = states.new_zeros(T + 1, B, A + O + G)
        grad_combined = state_rows[1:, :, A:A + O]                                # [T, B, O], a view
        grad_gi = states.new_empty(T, B, G)
        grad_contexts = states.new_empty(T, B, D)
        grad_scores = states.new_empty(T, B, weights.shape[2])
        grad_keys = torch.zeros_like(keys_c, dtype=state_dtype) if additive else None
        grad_h_carry = states.new_zeros(B, H)     # of h_t through h_{t+1} = n + z (h_t - n)
        grad_feed = states.new_zeros(B, O)        # of the attentional vector through the next step's input
        for t in reversed(range(T)):
            f, w = features[t], weights[t]
            grad_pre = torch.mul(f, f, out=grad_combined[t]).neg_().add_(1).mul_(grad_features[t] + grad_feed)
            grad_contexts[t] = grad_pre.to(dtype) @ w_context_c                   # [B, D]
            grad_w = torch.bmm(values_c, grad_contexts[t].to(dtype).unsqueeze(2))[:, :, 0].to(state_dtype)  # [B, S]
            if grad_weights is not None:
                grad_w += grad_weights[t]
            grad_s = torch.mul(w, grad_w - (w * grad_w).sum(-1, keepdim=True), out=grad_scores[t])  # softmax
            row = state_rows[t + 1]
            if additive:
                grad_s.mul_(2)
                grad_hidden = sigmoid_hidden_grad(hiddens[t], v_c, grad_s)        # [B, S, A]
                grad_keys += grad_hidden
                row[:, :A] = grad_hidden.sum(1)
                row[:, :A] *= 2
            grad_h = (row.to(dtype) @ w_state_c).to(state_dtype).add_(grad_h_carry)  # [B, H]
            if not additive:
                grad_h += torch.bmm(grad_s.to(dtype).unsqueeze(1), keys_c)[:, 0]
            r, z, n = gates_rz[t, :, :H], gates_rz[t, :, H:], gates_n[t]
            gi_slot = grad_gi[t]                                                   # [r, z, n] pre-activations
            torch.mul(n, n, out=gi_slot[:, 2 * H:]).neg_().add_(1).mul_(grad_h).mul_(1 - z)
            torch.mul(gi_slot[:, 2 * H:], projections[t, :, A + O + 2 * H:], out=gi_slot[:, :H]).mul_(r).mul_(1 - r)
            torch.sub(states[t], n, out=gi_slot[:, H:2 * H]).mul_(grad_h).mul_(z).mul_(1 - z)
            grad_h_carry = grad_h.mul_(z)
            gh_slot = state_rows[t, :, A + O:]                                     # the gates' recurrent part
            gh_slot.copy_(gi_slot)
            gh_slot[:, 2 * H:] *= r
            if t > 0:
                grad_feed = (gi_slot.to(dtype) @ w_feed_c).to(state_dtype)
        grad_h0 = (state_rows[0].to(dtype) @ w_state_c).to(state_dtype).add_(grad_h_carry)

        def product(rows: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:     # Σ rowsᵀ inputs over steps
            return (rows.reshape(-1, rows.shape[-1]).T.to(dtype) @ inputs.reshape(-1, inputs.shape[-1]).to(dtype)).to(state_dtype)

        grad_w_state = product(state_rows, states)                                # [A + O + G, H]
        grad_b_state = state_rows.sum((0, 1))
        grad_w_combine = torch.cat([product(grad_combined, contexts), grad_w_state[A:A + O]], dim=1)
        embedded_steps = embedded_c.transpose(0, 1)                               # [T, B, E]
        grad_w_ih = torch.cat([product(grad_gi, embedded_steps), product(grad_gi[1:], features[:-1])], dim=1)
        grad_embedded = (grad_gi.to(dtype) @ w_embedded_c).transpose(0, 1)        # [B, T, E]
        grad_values = torch.bmm(weights.permute(1, 2, 0).to(dtype), grad_contexts.transpose(0, 1).to(dtype))
        if additive:
            grad_v = product(grad_scores.reshape(-1, 1), hiddens)[0]             # [A]
            grad_w_query = grad_w_state[:A]
            grad_b_query = grad_b_state[:A] if query_bias else None
        else:
            grad_v = grad_w_query = grad_b_query = None
            grad_keys = torch.bmm(grad_scores.permute(1, 2, 0).to(dtype), states[1:].transpose(0, 1).to(dtype))
        embedded_dtype, h0_dtype, keys_dtype, values_dtype = ctx.input_dtypes
        return (grad_embedded.to(embedded_dtype), grad_h0.to(h0_dtype), grad_keys.to(keys_dtype),
                grad_values.to(values_dtype), None, grad_w_ih, grad_gi.sum((0, 1)),
                grad_w_state[A + O:], grad_b_state[A + O:],
                grad_w_query, grad_b_query, grad_v, grad_w_combine, grad_b_state[A:A + O])
