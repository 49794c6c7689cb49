"""A GRU cell's equations with nn.GRU's weight layout, in place: the forward and its hand-written
backward, shared by training's fused loops (families/rnn/fast_recurrence.py) and int8 decoding
(int8.py)."""

from __future__ import annotations

from typing import Optional

import torch


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh in place, as 2σ(2x) - 1: on CPUs cheaper than torch.tanh (docs/speed.md)."""
    return x.mul_(2).sigmoid_().mul_(2).sub_(1)


def gru_cell(gi: torch.Tensor, gh: torch.Tensor, h: torch.Tensor, rz: Optional[torch.Tensor] = None,
             n: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A GRU's new state [B, H] from its gates' input part gi and recurrent part gh ([B, 3H] each,
    r, z, n, biases included) and its state h [B, H].

    rz [B, 2H] and n [B, H], if given, receive σ(r, z) and n (a backward reads them); out the new state.
    """
    H = h.shape[-1]
    rz = torch.add(gi[..., : 2 * H], gh[..., : 2 * H], out=rz).sigmoid_()
    n = tanh_(torch.addcmul(gi[..., 2 * H :], rz[..., :H], gh[..., 2 * H :], out=n))
    return torch.sub(h, n, out=out).mul_(rz[..., H:]).add_(n)             # n + z (h - n)


def gru_cell_backward(grad_h: torch.Tensor, h: torch.Tensor, rz: torch.Tensor, n: torch.Tensor,
                      gh_n: torch.Tensor, grad_gi: torch.Tensor, grad_gh: torch.Tensor) -> torch.Tensor:
    """gru_cell's backward, given the new state's gradient grad_h [.., H], the old state h and what
    the forward kept: σ(r, z) [.., 2H], n and gh's n part [.., H].

    Writes the gradients of gi and gh [.., 3H] into grad_gi and grad_gh and returns h's gradient
    through the gate z, in grad_h's storage (its path through gh is the caller's product).
    """
    H = h.shape[-1]
    r, z = rz[..., :H], rz[..., H:]
    torch.mul(n, n, out=grad_gi[..., 2 * H :]).neg_().add_(1).mul_(grad_h).mul_(1 - z)       # n's pre-activation
    torch.mul(grad_gi[..., 2 * H :], gh_n, out=grad_gi[..., :H]).mul_(r).mul_(1 - r)         # r's
    torch.sub(h, n, out=grad_gi[..., H : 2 * H]).mul_(grad_h).mul_(z).mul_(1 - z)           # z's
    grad_gh.copy_(grad_gi)
    grad_gh[..., 2 * H :] *= r
    return grad_h.mul_(z)
