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

import torch
from torch.nn import functional as F

from .attention import sigmoid_hidden, sigmoid_hidden_grad


def product_dtype(device: torch.device, state_dtype: torch.dtype) -> torch.dtype:
    """The dtype of matrix products: autocast's when it is on, else that of the state."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return state_dtype


class InputFedGRUAttention(torch.autograd.Function):
    """Features [B, T, O] and attention weights [B, T, S] for all T steps.

    Inputs: gi_emb [B, T, 3H], the GRU input gates' embedding part with its bias, for every step;
    h0 [B, H]; keys [B, S, A] (additive: doubled, see AdditiveAttention; dot/general: [B, S, H]);
    values [B, S, D]; mask [B, S], True at real tokens; then the weights: w_feed [3H, O] (the GRU
    input weights of the previous attentional vector), w_hh [3H, H], b_hh [3H], w_query [A, H] and
    b_query [A] (additive only, else None), v [A] (additive only), w_combine [O, D + H] over
    [context; h_t], b_combine [O].
    State and gate arithmetic is in the weights' precision (at least float32); matrix products run
    in the autocast dtype when autocast is on.
    """

    @staticmethod
    def forward(ctx, gi_emb, h0, keys, values, mask, w_feed, w_hh, b_hh, w_query, b_query, v, w_combine, b_combine):
        state_dtype = torch.promote_types(w_hh.dtype, torch.float32)               # float32 (float64 in tests)
        dtype = product_dtype(gi_emb.device, state_dtype)
        with torch.autocast(gi_emb.device.type, enabled=False):
            B, T, G = gi_emb.shape
            H, O, D = w_hh.shape[1], w_combine.shape[0], values.shape[2]
            additive = v is not None
            A = w_query.shape[0] if additive else 0
            query_bias = b_query is not None
            # Everything that reads h_t, in one product: [query; combine's h_t part; next step's gates].
            w_state = torch.cat(([w_query] if additive else []) + [w_combine[:, D:], w_hh])   # [A + O + G, H]
            b_query = b_query if b_query is not None else b_hh.new_zeros(A)
            b_state = torch.cat(([b_query] if additive else []) + [b_combine, b_hh])
            w_state_c, b_state_c = w_state.to(dtype), b_state.to(dtype)
            w_feed_c, w_context_c = w_feed.to(dtype), w_combine[:, :D].to(dtype)
            keys_c, values_c = keys.to(dtype), values.to(dtype)
            v_c = v.to(dtype) if additive else None
            pads = ~mask                                                            # [B, S]

            gi_all = gi_emb.to(state_dtype)
            states = gi_emb.new_empty(T + 1, B, H, dtype=state_dtype)             # states[t + 1] = h_t
            states[0] = h0.to(state_dtype)
            resets, updates, news, gh_news = (gi_emb.new_empty(T, B, H, dtype=state_dtype) for _ in range(4))
            weights = gi_emb.new_empty(T, B, values.shape[1], dtype=state_dtype)
            contexts = gi_emb.new_empty(T, B, D, dtype=state_dtype)
            features = gi_emb.new_empty(T, B, O, dtype=state_dtype)
            hiddens = keys_c.new_empty(T, B, keys.shape[1], A) if additive else None  # [T, B, S, A]
            gh = F.linear(states[0].to(dtype), w_hh.to(dtype), b_hh.to(dtype)).to(state_dtype)  # [B, G]
            for t in range(T):
                h_prev = states[t]
                gi = gi_all[:, t]
                if t > 0:
                    gi = gi + F.linear(features[t - 1].to(dtype), w_feed_c).to(state_dtype)  # [B, G]
                r = torch.sigmoid(gi[:, :H] + gh[:, :H])
                z = torch.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
                gh_n = gh[:, 2 * H:]
                n = torch.tanh(gi[:, 2 * H:] + r * gh_n)
                h = n + z * (h_prev - n)                                            # [B, H]
                resets[t], updates[t], news[t], gh_news[t], states[t + 1] = r, z, n, gh_n, h
                projected = F.linear(h.to(dtype), w_state_c, b_state_c).to(state_dtype)    # [B, A + O + G]
                if additive:
                    hidden = sigmoid_hidden((2 * projected[:, None, :A]).to(dtype), keys_c,
                                            out=hiddens[t].unsqueeze(1))[:, 0]      # [B, S, A]
                    scores = 2 * torch.matmul(hidden, v_c).to(state_dtype)                 # [B, S]
                else:
                    scores = torch.bmm(keys_c, h.to(dtype).unsqueeze(2))[:, :, 0].to(state_dtype)  # [B, S]
                w = torch.softmax(scores.masked_fill_(pads, float("-inf")), dim=-1)
                context = torch.bmm(w.to(dtype).unsqueeze(1), values_c)[:, 0].to(state_dtype)     # [B, D]
                weights[t], contexts[t] = w, context
                features[t] = torch.tanh(F.linear(context.to(dtype), w_context_c).to(state_dtype) + projected[:, A:A + O])
                gh = projected[:, A + O:]

        ctx.dims = (A, O, D, dtype, query_bias)
        ctx.input_dtypes = (gi_emb.dtype, h0.dtype, keys.dtype, values.dtype)
        ctx.save_for_backward(states, resets, updates, news, gh_news, weights, contexts, features,
                              *([hiddens] if additive else []),
                              w_state_c, w_feed_c, w_context_c, keys_c, values_c, *([v_c] if additive else []))
        return features.transpose(0, 1), weights.transpose(0, 1)                   # [B, T, O], [B, T, S]

    @staticmethod
    def backward(ctx, grad_features, grad_weights):
        A, O, D, dtype, query_bias = ctx.dims
        additive = A > 0
        saved = list(ctx.saved_tensors)
        states, resets, updates, news, gh_news, weights, contexts, features = saved[:8]
        rest = saved[8:]
        hiddens = rest.pop(0) if additive else None                                 # [T, B, S, A]
        w_state_c, w_feed_c, w_context_c, keys_c, values_c = rest[:5]
        v_c = rest[5] if additive else None
        T, B, H = resets.shape
        state_dtype = states.dtype
        G = 3 * H

        grad_features = grad_features.to(state_dtype).transpose(0, 1)                     # [T, B, O]
        if grad_weights is not None:
            grad_weights = grad_weights.to(state_dtype).transpose(0, 1)                   # [T, B, S]
        # Row k holds the gradient of the products that read states[k]: [query, combine, gates].
        state_rows = states.new_zeros(T + 1, B, A + O + G)
        grad_gi = states.new_empty(T, B, G)
        grad_combined = states.new_empty(T, B, O)
        grad_contexts = states.new_empty(T, B, D)
        grad_scores = states.new_empty(T, B, weights.shape[2])
        grad_keys = torch.zeros_like(keys_c, dtype=state_dtype) if additive else None
        grad_gh = states.new_zeros(B, G)          # of the gates' recurrent part, from step t + 1
        grad_h_carry = states.new_zeros(B, H)     # of h_t through h_{t+1} = n + z (h_t - n)
        grad_feed = states.new_zeros(B, O)        # of the attentional vector through the next step's input
        for t in reversed(range(T)):
            f, w = features[t], weights[t]
            grad_pre = (grad_features[t] + grad_feed) * (1 - f * f)              # [B, O]
            grad_combined[t] = grad_pre
            grad_context = (grad_pre.to(dtype) @ w_context_c).to(state_dtype)             # [B, D]
            grad_contexts[t] = grad_context
            grad_w = torch.bmm(values_c, grad_context.to(dtype).unsqueeze(2))[:, :, 0].to(state_dtype)  # [B, S]
            if grad_weights is not None:
                grad_w = grad_w + grad_weights[t]
            grad_s = w * (grad_w - (w * grad_w).sum(-1, keepdim=True))            # softmax backward, [B, S]
            if additive:
                grad_s = 2 * grad_s
                grad_hidden = sigmoid_hidden_grad(hiddens[t], v_c, grad_s)        # [B, S, A]
                grad_keys += grad_hidden
                row = torch.cat([2 * grad_hidden.sum(1).to(state_dtype), grad_pre, grad_gh], dim=1)
            else:
                row = torch.cat([grad_pre, grad_gh], dim=1)
            grad_scores[t] = grad_s
            state_rows[t + 1] = row
            grad_h = (row.to(dtype) @ w_state_c).to(state_dtype) + grad_h_carry          # [B, H]
            if not additive:
                grad_h += torch.bmm(grad_s.to(dtype).unsqueeze(1), keys_c)[:, 0].to(state_dtype)
            r, z, n = resets[t], updates[t], news[t]
            grad_n = grad_h * (1 - z) * (1 - n * n)
            grad_r = grad_n * gh_news[t] * r * (1 - r)
            grad_z = grad_h * (states[t] - n) * z * (1 - z)
            grad_h_carry = grad_h * z
            grad_gi[t] = torch.cat([grad_r, grad_z, grad_n], dim=1)
            grad_gh = torch.cat([grad_r, grad_z, grad_n * r], dim=1)
            if t > 0:
                grad_feed = (grad_gi[t].to(dtype) @ w_feed_c).to(state_dtype)
        state_rows[0, :, A + O:] = grad_gh                                        # the first gates read h0
        grad_h0 = (state_rows[0].to(dtype) @ w_state_c).to(state_dtype) + grad_h_carry

        def product(rows: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:     # Σ rowsᵀ inputs over steps
            return (rows.reshape(-1, rows.shape[-1]).T.to(dtype) @ inputs.reshape(-1, inputs.shape[-1]).to(dtype)).to(state_dtype)

        grad_w_state = product(state_rows, states)                                # [A + O + G, H]
        grad_b_state = state_rows.sum((0, 1))
        grad_w_combine = torch.cat([product(grad_combined, contexts), grad_w_state[A:A + O]], dim=1)
        grad_w_feed = product(grad_gi[1:], features[:-1])                         # [G, O]
        grad_values = torch.bmm(weights.permute(1, 2, 0).to(dtype), grad_contexts.transpose(0, 1).to(dtype))
        if additive:
            grad_v = product(grad_scores.reshape(-1, 1), hiddens)[0]             # [A]
            grad_w_query = grad_w_state[:A]
            grad_b_query = grad_b_state[:A] if query_bias else None
        else:
            grad_v = grad_w_query = grad_b_query = None
            grad_keys = torch.bmm(grad_scores.permute(1, 2, 0).to(dtype), states[1:].transpose(0, 1).to(dtype))
        gi_dtype, h0_dtype, keys_dtype, values_dtype = ctx.input_dtypes
        return (grad_gi.transpose(0, 1).to(gi_dtype), grad_h0.to(h0_dtype), grad_keys.to(keys_dtype),
                grad_values.to(values_dtype), None, grad_w_feed, grad_w_state[A + O:], grad_b_state[A + O:],
                grad_w_query, grad_b_query, grad_v, grad_w_combine, grad_b_state[A:A + O])

