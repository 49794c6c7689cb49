"""Attention: score each source position against a query, softmax over the real positions, mix.

Every kind follows one protocol:
    keys = attention.project_keys(memory)          # once per sentence: [B, S, K] -> [B, S, A]
    context, weights = attention(query, keys, values, mask)
with query [B, T, Q], values [B, S, V] (the encoder outputs), mask [B, S] (True = real token);
context is [B, T, V] and weights [B, T, S]. T is 1 when decoding step by step and the whole
target when the decoder can attend for all steps at once. Nothing is stored on the module
between calls, so one model can serve concurrent requests.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn


class Attention(nn.Module):
    """Masked softmax over scores, then the weighted sum of values; subclasses give the scores."""

    returns_weights = True  # False for the baseline without attention

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        scores = self.score(query, keys)                             # [B, T, S]
        scores = scores.masked_fill(~mask[:, None, :], float("-inf"))  # pads: exp(-inf) = exactly 0
        weights = torch.softmax(scores, dim=-1)                      # [B, T, S]
        context = torch.bmm(weights, values)                         # [B, T, V]
        return context, weights


class AdditiveAttention(Attention):
    """score = vᵀ tanh(W_q q + W_k h): Bahdanau's (no bias) and Luong's `concat` (W_a[q; h] + b).

    Computed as 2 vᵀ σ(2 W_q q + 2 W_k h), since tanh(x) = 2σ(2x) - 1: the two differ by Σv, the
    same at every source position, so the softmax weights are the same. On CPUs the sigmoid over
    the [B, T, S, A] tensor, the largest elementwise step of decoding, is 3-7 times cheaper.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int, bias: bool):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=bias)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return 2 * self.key_proj(memory)                             # [B, S, A] = 2 W_k h

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = 2 * self.query_proj(query)                               # [B, T, A]
        return SigmoidScore.apply(q, keys, self.v.weight[0])         # [B, T, S]


def sigmoid_hidden(q: torch.Tensor, keys: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """σ(q + k) for every query and key: [B, T, A] x [B, S, A] -> [B, T, S, A]."""
    return torch.add(q.unsqueeze(2), keys.unsqueeze(1), out=out).sigmoid_()


def sigmoid_hidden_grad(hidden: torch.Tensor, v: torch.Tensor, grad_scores: torch.Tensor,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The gradient of vᵀ σ(x) with respect to x, given hidden = σ(x) and the scores' gradient [..., S]."""
    grad = torch.addcmul(hidden, hidden, hidden, value=-1, out=out)  # σ(1 - σ), one new [.., S, A] unless out
    return grad.mul_(v.to(hidden.dtype)).mul_(grad_scores.to(hidden.dtype).unsqueeze(-1))


class SigmoidScore(torch.autograd.Function):
    """2 vᵀ σ(q + k) for every query and key: [B, T, A] x [B, S, A] -> [B, T, S].

    The [B, T, S, A] activations are the largest tensors of an RNN decoder step; forward and
    backward each allocate one of them and otherwise work in place.
    """

    @staticmethod
    def forward(ctx, q: torch.Tensor, keys: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        hidden = sigmoid_hidden(q, keys)                             # [B, T, S, A]
        ctx.save_for_backward(hidden, v)
        return 2 * torch.matmul(hidden, v.to(hidden.dtype))          # [B, T, S]

    @staticmethod
    def backward(ctx, grad_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden, v = ctx.saved_tensors
        grad = 2 * grad_scores.to(hidden.dtype)                      # [B, T, S]
        grad_v = torch.matmul(grad.reshape(1, -1), hidden.reshape(-1, hidden.shape[-1]))[0]  # [A]
        grad_pre = sigmoid_hidden_grad(hidden, v, grad)              # [B, T, S, A]
        return grad_pre.sum(2), grad_pre.sum(1), grad_v.to(v.dtype)  # [B, T, A], [B, S, A], [A]


class DotAttention(Attention):
    """Luong `dot`: score = qᵀ h (query and encoder outputs of the same width)."""

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return torch.bmm(query, keys.transpose(1, 2))                # [B, T, S]


class GeneralAttention(DotAttention):
    """Luong `general`: score = qᵀ W h, with W h computed once per sentence."""

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.key_proj(memory)                                 # [B, S, Q]


class NoAttention(Attention):
    """The plain seq2seq baseline: an empty context, so the decoder sees only its own state."""

    returns_weights = False

    def project_keys(self, memory: torch.Tensor) -> torch.Tensor:
        return memory[..., :0]                                       # [B, S, 0]

    def forward(self, query, keys, values, mask):
        return values.new_zeros(query.shape[0], query.shape[1], 0), None  # [B, T, 0]


def make_attention(kind: str, query_dim: int, key_dim: int, attn_dim: int) -> tuple[Attention, int]:
    """The attention module and the width of the context it returns."""
    if kind == "bahdanau":
        return AdditiveAttention(query_dim, key_dim, attn_dim, bias=False), key_dim
    if kind == "concat":
        return AdditiveAttention(query_dim, key_dim, attn_dim, bias=True), key_dim
    if kind == "dot":
        return DotAttention(), key_dim
    if kind == "general":
        return GeneralAttention(query_dim, key_dim), key_dim
    if kind == "none":
        return NoAttention(), 0
    raise ValueError(f"unknown attention kind {kind!r}")
