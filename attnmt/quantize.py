"""int8 decoding on CPUs: the output layer, the largest matrix product of each decoding step, in int8."""

from __future__ import annotations

import copy

import torch
from torch import nn

from .errors import AttnmtError
from .model import Seq2Seq

INT8_MAX = 127
TINY = torch.finfo(torch.float32).tiny  # the scale of an all-zero row: any positive number will do


class Int8Linear(nn.Module):
    """x Wᵀ + b with W in int8, one scale per output, and x quantized to int8 per row at each call.

    The int8 x int8 product accumulates exactly in int32 (VNNI or AMX kernels on recent CPUs,
    about twice as fast as bfloat16) and is scaled back to float32. Symmetric scales (absmax / 127)
    keep zero exact and need no offsets.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()                                        # [N, K]
        scale = weight.abs().amax(dim=1).clamp(min=TINY) / INT8_MAX                     # [N]
        quantized = (weight / scale.unsqueeze(1)).round().to(torch.int8)
        self.register_buffer("weight_t", quantized.t().contiguous())                   # [K, N]
        self.register_buffer("scale", scale)
        bias = linear.bias.detach().float() if linear.bias is not None else torch.zeros_like(scale)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1]).float()                                       # [M, K]
        row_scale = rows.abs().amax(dim=1, keepdim=True).clamp(min=TINY) / INT8_MAX     # [M, 1]
        quantized = rows.div(row_scale).round_().to(torch.int8)
        product = torch._int_mm(quantized, self.weight_t)                               # [M, N] int32
        out = product.float().mul_(row_scale).mul_(self.scale).add_(self.bias)
        return out.view(*x.shape[:-1], out.shape[-1])                                   # float32


def int8_decoding_copy(model: Seq2Seq) -> Seq2Seq:
    """A bfloat16 copy of `model` for decoding on a CPU, with the output layer in int8 (float32 logits)."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise AttnmtError(f"decode precision int8 runs on CPUs only; use bf16 on {device}")
    decoding = copy.deepcopy(model).to(torch.bfloat16).eval()
    decoding.decoder.classifier = Int8Linear(model.decoder.classifier)
    return decoding
