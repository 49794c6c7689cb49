"""Additive attention in the sigmoid form: replaces AdditiveAttention.score (attention.py).

Since tanh(x) = 2σ(2x) - 1, vᵀ tanh(q + k) = 2 vᵀ σ(2q + 2k) - Σv: the two scores differ by the
same number at every source position, so the softmax gives the same weights. On CPUs σ over the
[B, T, S, A] tensor, the largest elementwise step of a decoder step, is several times cheaper
than tanh, and the autograd node keeps one such tensor where autograd keeps several.
"""

from __future__ import annotations

from typing import Optional

import torch

from .attention import AdditiveAttention


def sigmoid_hidden(q: torch.Tensor, keys: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """σ(2q + 2k) for every query and key: [B, T, A] x [B, S, A] -> [B, T, S, A]."""
    return torch.add((2 * q).unsqueeze(2), keys.unsqueeze(1), alpha=2, out=out).sigmoid_()


def sigmoid_hidden_grad(hidden: torch.Tensor, v: torch.Tensor, grad_scores: torch.Tensor,
                        out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The gradient of vᵀ σ(x) with respect to x, given hidden = σ(x) and the scores' gradient [..., S]."""
    grad = torch.addcmul(hidden, hidden, hidden, value=-1, out=out)  # σ(1 - σ), one new [.., S, A] unless out
    return grad.mul_(v.to(hidden.dtype)).mul_(grad_scores.to(hidden.dtype).unsqueeze(-1))


class SigmoidScore(torch.autograd.Function):
    """2 vᵀ σ(2q + 2k) for every query and key: q [B, T, A], keys [B, S, A], v [A] -> [B, T, S].

    Forward and backward each allocate one [B, T, S, A] tensor and otherwise work in place.
    """

    @staticmethod
    def forward(ctx, q: torch.Tensor, keys: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        hidden = sigmoid_hidden(q, keys)                             # [B, T, S, A]
        ctx.save_for_backward(hidden, v)
        return 2 * torch.matmul(hidden, v.to(hidden.dtype))          # [B, T, S]

    @staticmethod
    def backward(ctx, grad_scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden, v = ctx.saved_tensors
        grad = 2 * grad_scores.to(hidden.dtype)                      # [B, T, S], of vᵀ σ(x)
        grad_v = torch.matmul(grad.reshape(1, -1), hidden.reshape(-1, hidden.shape[-1]))[0]  # [A]
        grad_x = sigmoid_hidden_grad(hidden, v, grad)                # [B, T, S, A], x = 2q + 2k
        return 2 * grad_x.sum(2), 2 * grad_x.sum(1), grad_v.to(v.dtype)  # [B, T, A], [B, S, A], [A]


class SigmoidAdditiveAttention(AdditiveAttention):
    """AdditiveAttention scoring 2 vᵀ σ(2 W_q q + 2 W_k h): the same weights (module docstring)."""

    replaces = AdditiveAttention

    def runs(self, device: torch.device) -> bool:
        """fast.fast_paths_in: in training and decoding, on any device (FusedDecoder's loop computes
        this form with sigmoid_hidden itself)."""
        return True

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return SigmoidScore.apply(self.query_proj(query), keys, self.v.weight[0])  # [B, T, S]
