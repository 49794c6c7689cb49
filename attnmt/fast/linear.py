"""A linear layer whose float32 product on a CPU, when no gradient is needed, runs in blocks of
OUTPUT_BLOCK outputs: replaces nn.Linear there. Only the output layer is that wide (one output per
vocabulary word, thousands of them); in one product over all of them the CPU's float32 kernels ran
well below their speed on narrower products (docs/speed.md, "What makes it fast"). Each output is
the same dot product either way. bfloat16 products, autograd and GPUs keep the single product.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

OUTPUT_BLOCK = 1024   # outputs per product: [rows, OUTPUT_BLOCK] results and their weights stay in cache


class BlockedLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (self.out_features <= OUTPUT_BLOCK or x.dtype != torch.float32 or x.device.type != "cpu"
                or torch.is_grad_enabled()):
            return super().forward(x)
        weights = self.weight.split(OUTPUT_BLOCK)
        biases = self.bias.split(OUTPUT_BLOCK) if self.bias is not None else (None,) * len(weights)
        return torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases)], dim=-1)   # [.., out_features]
