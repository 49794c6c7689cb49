"""The shared fast layers, each a drop-in subclass of the torch layer it replaces (no parameters or
buffers of its own, so the weights load alike): a cheaper dropout mask on CPUs, and the output
layer's float32 decoding product in blocks. A network built with fast paths uses them in place of
nn.Dropout and nn.Linear (`use_fast_layers`); tests/test_fast.py checks each against its reference.
"""

from __future__ import annotations

from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

STEPS = 1 << 16   # the values 16 random bits take
OUTPUT_BLOCK = 1024   # outputs per product: [rows, OUTPUT_BLOCK] results and their weights stay in cache


class RandDropout(nn.Dropout):
    """Dropout with a cheaper mask on CPUs: replaces nn.Dropout there. Each value draws 16 random bits,
    four from every 64-bit draw of the generator, and is kept where they reach a threshold; torch.rand
    spends a 32-bit draw and a float conversion on each value, bernoulli_ about twice that. The same
    distribution with p rounded to a multiple of 2^-16 (each value kept with probability 1 - p and
    scaled by 1 / (1 - p)), not the same random numbers as nn.Dropout."""

    replaces = nn.Dropout

    def runs(self, device: torch.device) -> bool:
        """Whether it draws its own mask (fast.fast_paths_in too): in training, on a CPU, where p drops
        some values and keeps some."""
        return self.training and 0 < round(self.p * STEPS) < STEPS and device.type == "cpu"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.runs(x.device):
            return super().forward(x)
        dropped = round(self.p * STEPS)               # of the STEPS values of 16 bits, those that drop
        words = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device).random_(-(1 << 63), None)
        bits = words.view(torch.int16)[: x.numel()].view(x.shape)        # uniform over -2^15 .. 2^15 - 1
        # keep: 1 where bits >= threshold (probability (STEPS - dropped) / STEPS), else 0. Clamped
        # int16 arithmetic, not a comparison: CPU kernels that write or read bool tensors run
        # several times slower than those on int16, and the product with x converts as it goes.
        threshold = dropped - STEPS // 2
        keep = bits.clamp(threshold - 1, threshold).sub_(threshold - 1)
        return x * keep * (STEPS / (STEPS - dropped))


class BlockedLinear(nn.Linear):
    """A linear layer whose float32 product on a CPU, in decoding, runs in blocks of
    OUTPUT_BLOCK outputs: replaces nn.Linear there. Only the output layer is that wide (one output per
    vocabulary word, thousands of them); in one product over all of them the CPU's float32 kernels ran
    well below their speed on narrower products (docs/speed.md, "What makes it fast"). Each output is
    the same dot product either way. bfloat16 products, autograd and GPUs keep the single product."""

    replaces = nn.Linear

    def in_blocks(self, dtype: torch.dtype, device: torch.device, decoding: bool) -> bool:
        """Whether the product runs in blocks: in decoding, wider than a block, float32, on a CPU."""
        return decoding and self.out_features > OUTPUT_BLOCK and dtype == torch.float32 and device.type == "cpu"

    def runs(self, device: torch.device) -> bool:
        """fast.fast_paths_in: in decoding."""
        return self.in_blocks(self.weight.dtype, device, decoding=not self.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Decoding: neither training mode (where scheduled sampling's choices need no gradient either)
        # nor autograd.
        if not self.in_blocks(x.dtype, x.device, decoding=not (self.training or torch.is_grad_enabled())):
            return super().forward(x)
        weights = self.weight.split(OUTPUT_BLOCK)
        biases = self.bias.split(OUTPUT_BLOCK) if self.bias is not None else (None,) * len(weights)
        return torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases)], dim=-1)   # [.., out_features]


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def use_fast_layers(network: ModuleT) -> ModuleT:
    """`network` with each of its nn.Dropout and nn.Linear modules a RandDropout and BlockedLinear: the
    same weights, computed by the fast layer's forward. A network's constructor calls this where it
    chooses its fast paths."""
    for module in network.modules():
        if type(module) is nn.Dropout:
            module.__class__ = RandDropout
        elif type(module) is nn.Linear:
            module.__class__ = BlockedLinear
    return network
