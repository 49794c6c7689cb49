"""Top-k through block maxima: replaces torch.topk over the searches' candidates (search.py)."""

from __future__ import annotations

from typing import Callable

import torch

# (x [b, n], k) -> the k highest entries of each row and their positions, as torch.topk(dim=1).
TopK = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def reference_top_k(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k highest entries of each row of x [b, n] and their positions, highest first."""
    return x.topk(k, dim=1)


def block_top_k(x: torch.Tensor, k: int, block: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """x.topk(k, dim=1) for a wide x [b, n], through block maxima: the same values, and positions up to ties.

    On CPUs topk and argmax are slow scalar passes while amax is vectorized, so: the maximum of
    every block of `block` entries, the k blocks with the highest maxima (they hold the k highest
    entries: each of those lies in a block whose maximum is at least as high), then topk over
    those k blocks' entries only.
    """
    b, n = x.shape
    blocks = n // block
    if blocks < 4 * k:
        return reference_top_k(x, k)
    maxima = x[:, : blocks * block].view(b, blocks, block).amax(2)             # [b, blocks]
    if blocks * block < n:                                                     # the short last block
        maxima = torch.cat([maxima, x[:, blocks * block :].amax(1, keepdim=True)], dim=1)
    best_blocks = maxima.topk(k, dim=1).indices                                # [b, k]
    positions = (best_blocks.unsqueeze(2) * block + torch.arange(block, device=x.device)).view(b, -1)  # [b, k*block]
    outside = positions >= n                                                   # past the short last block
    positions.clamp_(max=n - 1)
    values = x.gather(1, positions).masked_fill_(outside, float("-inf"))
    top_values, top = values.topk(k, dim=1)                                    # [b, k]
    return top_values, positions.gather(1, top)
