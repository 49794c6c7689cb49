"""Fast paths: faster ways to compute what the reference modules compute, each beside the piece it
replaces, each tested against it (tests/test_fast.py).

    additive.py    SigmoidAdditiveAttention: additive scores as 2 vᵀ σ(2x) with their own backward
    recurrence.py  FusedDecoder, GRULayerEncoder: training's recurrent loops as single autograd
                   nodes with hand-written backwards
    dropout.py     RandDropout: a cheaper dropout mask on CPUs (16 random bits a value)
    topk.py        block_top_k: the searches' top-k through block maxima
    int8.py        decode.precision int8: every product of a decoding step in int8
    compiled.py    --compile: the decoding step compiled ahead of time for this CPU
    process.py     the allocator and oneDNN cache settings training runs best with (entry points only)

This module decides which path runs: `use_fast_paths` switches a model's modules to their fast
classes (or back), `top_k` picks the searches' top-k. train.fast_paths / decode.fast_paths false
(`--reference` on the decoding commands) run the reference instead.
"""

from __future__ import annotations

from typing import TypeVar

from torch import nn

from ..attention import AdditiveAttention
from ..decoder import Decoder
from ..encoder import Encoder
from .additive import SigmoidAdditiveAttention
from .dropout import RandDropout
from .recurrence import FusedDecoder, GRULayerEncoder
from .topk import TopK, block_top_k, reference_top_k

# Each fast class subclasses its reference class and adds no parameters or buffers, so switching
# a module's class keeps its weights, its state_dict and everything built around it.
FAST_CLASSES: dict[type, type] = {
    AdditiveAttention: SigmoidAdditiveAttention,
    Decoder: FusedDecoder,
    Encoder: GRULayerEncoder,
    nn.Dropout: RandDropout,
}
REFERENCE_CLASSES = {fast: reference for reference, fast in FAST_CLASSES.items()}

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def use_fast_paths(model: ModuleT, enabled: bool = True) -> ModuleT:
    """Switch every module of `model` that has a fast path to it (enabled) or to its reference class."""
    for module in model.modules():
        reference = REFERENCE_CLASSES.get(type(module), type(module))
        module.__class__ = FAST_CLASSES.get(reference, reference) if enabled else reference
    return model


def top_k(enabled: bool = True) -> TopK:
    """The searches' top-k: block_top_k, or torch.topk itself."""
    return block_top_k if enabled else reference_top_k
