"""Fast paths: faster ways to compute what the reference modules compute, each beside the piece it
replaces, each tested against it (tests/test_fast.py). Those of one model family live in its folder
(families/rnn/fast_attention.py, fast_recurrence.py; families/transformer/fast.py); these serve all:

    dropout.py     RandDropout: a cheaper dropout mask on CPUs (16 random bits a value)
    linear.py      BlockedLinear: the output layer's float32 decoding product in blocks of outputs
    topk.py        block_top_k: the searches' top-k through block maxima
    int8.py        decode.precision int8: every product of a decoding step in int8
    compiled.py    --compile: the decoding step compiled ahead of time for this CPU
    process.py     the allocator and oneDNN cache settings training runs best with (entry points only)

This module decides which path runs: `use_fast_paths` switches a model's modules to their fast
classes (or back), `top_k` picks the searches' top-k. train.fast_paths / decode.fast_paths false
(`--reference` on the decoding commands) run the reference instead.
"""

from __future__ import annotations

from typing import Mapping, TypeVar

from torch import nn

from .dropout import RandDropout
from .linear import BlockedLinear
from .topk import TopK, block_top_k, reference_top_k

# Each fast class subclasses its reference class and adds no parameters or buffers, so switching
# a module's class keeps its weights, its state_dict and everything built around it. A family
# names its own in its network's `fast_classes`.
SHARED_FAST_CLASSES: dict[type, type] = {nn.Dropout: RandDropout, nn.Linear: BlockedLinear}

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def use_fast_paths(model: ModuleT, enabled: bool = True, family_classes: Mapping[type, type] = {}) -> ModuleT:
    """Switch every module of `model` that has a fast path (shared, or among its family's
    `family_classes`) to it (enabled) or to its reference class."""
    fast_classes = {**SHARED_FAST_CLASSES, **family_classes}
    reference_classes = {fast: reference for reference, fast in fast_classes.items()}
    for module in model.modules():
        reference = reference_classes.get(type(module), type(module))
        module.__class__ = fast_classes.get(reference, reference) if enabled else reference
    return model


def top_k(enabled: bool = True) -> TopK:
    """The searches' top-k: block_top_k, or torch.topk itself."""
    return block_top_k if enabled else reference_top_k
