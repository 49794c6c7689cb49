"""Faster Transformer decoding: caches grown by doubling, written in place; tests/test_fast.py checks it against cache.py.

The reference copies every layer's cache at every step, to grow it by one position and to write
the new keys and values, and, in beam search, to follow the beams; that copying was a large share
of decoding's time (docs/speed.md). Here the caches grow by doubling, so they rarely grow, each
step writes its positions into them in place, and beam search's reorder moves only the rows and
positions it must, in place too. The compiled step (fast/compiled.py) relies on the first two: an
exported program cannot grow its inputs, so its caller makes the room before each step and the
program writes into it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .cache import DecoderLayers, LayerCache, TransformerState

if TYPE_CHECKING:
    from typing_extensions import Self


class InPlaceLayerCache(LayerCache):
    """A LayerCache that writes the new positions into its tensors in place."""

    def write(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys.shape[2] == 0:
            return super().write(keys, values)
        # The state these tensors came from reads no position past its own steps, so what it says
        # stays true.
        rows = torch.arange(keys.shape[0], device=keys.device).unsqueeze(1)   # [B, 1]
        for cache, new in ((self.keys, keys), (self.values, values)):
            # through [B, C, h, d_k] views, whose positions are indexed by rows and positions
            cache.transpose(1, 2).index_put_((rows, self.positions), new.transpose(1, 2))
        return self.keys, self.values


class InPlaceState(TransformerState):
    """A TransformerState whose caches grow by doubling and are written in place."""

    layer_cache = InPlaceLayerCache

    def reorder(self, index: torch.Tensor) -> Self:
        """select(index) in place: only the rows that take another row's place are written, and only
        the positions decoded so far (past them all is stale), where select copies every cache whole
        into new tensors at every step of a beam search."""
        moved = (index != torch.arange(index.shape[0], device=index.device)).nonzero().squeeze(1)  # [m]
        if moved.numel():
            origins, decoded = index.index_select(0, moved), int(self.steps.max())
            for cache in self.caches:
                written = cache.narrow(2, 0, decoded)                    # [B, h, decoded, d_k]
                written.index_copy_(0, moved, written.index_select(0, origins))
        return self.like([self.steps.index_select(0, index), *self.caches])

    def make_room(self, positions: int) -> Self:
        """Grown by doubling (few copies). While torch.export traces a step, this is the state as given:
        the compiled step's caller makes the room (fast/compiled.py)."""
        if torch.compiler.is_exporting():
            return self
        needed, capacity = int(self.steps.max()) + positions, self.caches[0].shape[2]
        return self.grown(max(needed, 2 * capacity) if needed > capacity else needed)


class InPlaceDecoderLayers(DecoderLayers):
    """DecoderLayers whose states are InPlaceStates."""

    replaces = DecoderLayers

    state = InPlaceState

    def runs(self, device: torch.device) -> bool:
        """fast.fast_paths_in: in decoding (training keeps no cache)."""
        return not self.training
