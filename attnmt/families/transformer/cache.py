"""The Transformer decoder's state between decoding steps: each layer's self-attention cache, the
keys and values of the positions decoded so far, so that a step computes only its new positions.

This is the reference: before a step the caches grow to exactly the positions it needs, and the
step's keys and values are written into new tensors. fast.py writes them in place instead, into
room made ahead by doubling (tests/test_fast.py checks both decode alike).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from ...seam import Rows

if TYPE_CHECKING:
    from typing_extensions import Self


class LayerCache:
    """One decoder layer's self-attention keys and values [B, h, C, d_k] for positions 0..C-1, and
    where the new positions go (`positions` [B, T]); `write` puts the new ones there."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor):
        self.keys, self.values, self.positions = keys, values, positions

    def write(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """keys and values [B, h, T, d_k] of the new positions; returns all of them, [B, h, C, d_k]."""
        if self.keys.shape[2] == 0:                  # nothing cached: the new positions are all there is
            self.keys, self.values = keys, values
        else:
            index = self.positions[:, None, :, None].expand_as(keys)  # [B, h, T, d_k]: row b's t-th position
            self.keys, self.values = self.keys.scatter(2, index, keys), self.values.scatter(2, index, values)
        return self.keys, self.values


class TransformerState(Rows):
    """The decoder's state between steps: `steps` [B], the target positions each row has decoded,
    and each layer's self-attention cache, keys and values [B, h, C, d_k] with C ≥ max(steps) (a row's
    positions past its steps are stale and masked out). Rows are sentences or beams and may be at
    different positions: a batch refilled with new sentences mixes them."""

    layer_cache = LayerCache   # what layer_caches gives each layer

    def __init__(self, steps: torch.Tensor, caches: list[torch.Tensor]):
        # caches: keys of layer 1, values of layer 1, keys of layer 2, ...
        names = [f"{kind}{layer}" for layer in range(1, len(caches) // 2 + 1) for kind in ("keys", "values")]
        self.tensors = {"steps": steps, **dict(zip(names, caches, strict=True))}
        self.dims = {name: (0, None if name == "steps" else 2) for name in self.tensors}

    @property
    def steps(self) -> torch.Tensor:
        return self.tensors["steps"]

    @property
    def caches(self) -> list[torch.Tensor]:
        return list(self.tensors.values())[1:]

    def make_room(self, positions: int) -> Self:
        """This state with caches that hold `positions` more positions of every row: grown, where they
        must grow, to exactly that many."""
        return self.grown(int(self.steps.max()) + positions)

    def grown(self, capacity: int) -> Self:
        """This state with caches of `capacity` positions if they hold fewer (the new ones zeros)."""
        return self if self.caches[0].shape[2] >= capacity else self.pad(capacity)

    def layer_caches(self, positions: torch.Tensor) -> list[LayerCache]:
        """Each layer's cache, to receive the new `positions` [B, T] of every row (make_room made room)."""
        caches = self.caches
        return [self.layer_cache(caches[2 * i], caches[2 * i + 1], positions) for i in range(len(caches) // 2)]


class DecoderLayers(nn.ModuleList):
    """The decoder's layers, which keep their self-attention caches in a TransformerState between
    decoding steps; `empty_state` makes the first."""

    state = TransformerState   # what empty_state makes

    def empty_state(self, rows: int, heads: int, like: torch.Tensor) -> TransformerState:
        """Nothing decoded yet: steps 0 and empty caches [rows, heads, 0, D / heads], in like's dtype,
        like [.., D] the encoder's output."""
        empty = like.new_zeros(rows, heads, 0, like.shape[-1] // heads)
        return self.state(torch.zeros(rows, dtype=torch.long, device=like.device), [empty] * (2 * len(self)))
