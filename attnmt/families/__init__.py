"""The model families by model.arch: the registry. A family is a folder beside this one holding its
network (implementing seam.Model) and its config (a ModelConfig subclass); its entry in FAMILIES is all
the rest of attnmt needs (DEVELOPERS.md, "Model families"). The registry is data: each family's config
class, and its network by where it lives, imported when a model is built. Reading a config
(configfile.py) takes the model section's class from here, so reading and checking a config (the
`attnmt` command's errors, `--help`) never loads torch, and importing this module writes into no other
module."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union, cast

from ..config import ModelConfig
from .rnn.config import RNNConfig
from .transformer.config import TransformerConfig

if TYPE_CHECKING:
    import torch

    from ..seam import Model

# (config, source vocabulary size, target vocabulary size, fast) -> the network, its fast paths
# chosen where it is built (fast: the family's fast classes; False: the reference modules alone).
Network = Callable[[ModelConfig, int, int, bool], "Model"]


def _found(place: str) -> Any:
    """What "package.module:name" names, its module imported now."""
    module, _, name = place.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Family:
    """A model family: its config class, its network (a `Network`: the class itself, or where it
    lives, "package.module:Class"), and where its layouts in other toolkits' formats live, by format
    (formats/: the object each format asks for its names, "package.module:name")."""

    config: type[ModelConfig]
    network: Union[Network, str]
    layouts: Mapping[str, str] = field(default_factory=dict)

    def network_class(self) -> Network:
        return cast(Network, _found(self.network)) if isinstance(self.network, str) else self.network


FAMILIES: dict[str, Family] = {
    "rnn": Family(RNNConfig, "attnmt.families.rnn.network:RNNEncoderDecoder"),
    "transformer": Family(TransformerConfig, "attnmt.families.transformer.network:Transformer",
                          {"marian": "attnmt.families.transformer.layouts:MARIAN",
                           "ctranslate2": "attnmt.families.transformer.layouts:CTRANSLATE2"}),
}


def with_layout(format: str) -> list[str]:
    """The families (model.arch) whose models the format `format` can hold."""
    return [arch for arch, family in FAMILIES.items() if format in family.layouts]


def layout(arch: str, format: str) -> Any:
    """The family `arch`'s layout in the format `format` (what formats/ asks for the family's names); None
    where the format cannot hold its models."""
    place = FAMILIES[arch].layouts.get(format)
    return None if place is None else _found(place)


def register(arch: str, family: Family) -> None:
    """Make `family`, added at run time (attnmt's own are FAMILIES' entries), the one model.arch `arch`
    builds and loads; refuses an arch already registered."""
    if arch in FAMILIES:
        raise ValueError(f"model.arch {arch!r} is registered already (unregister it first)")
    FAMILIES[arch] = family


def unregister(arch: str) -> None:
    del FAMILIES[arch]


def build_model(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, fast_paths: bool = True) -> Model:
    """The network of the family `config.arch`, with its fast paths (fast/) or the reference modules only."""
    return FAMILIES[config.arch].network_class()(config, src_vocab_size, tgt_vocab_size, fast_paths)


def build_holding(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, weights: dict[str, "torch.Tensor"],
                  fast_paths: bool = True) -> Model:
    """The network of `config` whose parameters are the tensors of `weights` themselves (a float32 state
    dict): assigned, not copied, and the ones the network shares (tied embeddings) shared again. Loading a
    model file for decoding so holds one copy of its weights: the initial weights drawn while building,
    the newest allocations, are freed at once, where the allocator hands them back to the system (copying
    into them instead frees the file's tensors, below them, which it keeps). Raises RuntimeError as
    load_state_dict does where the weights do not fit the network."""
    import torch

    network = build_model(config, src_vocab_size, tgt_vocab_size, fast_paths)
    module = cast(torch.nn.Module, network)
    # [names of one parameter]: a parameter two modules share (tied embeddings) gets one tensor again.
    shared: dict[int, list[str]] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        shared.setdefault(id(parameter), []).append(name)
    module.load_state_dict(weights, assign=True)
    for first, *others in shared.values():
        for name in others:
            owner, _, attribute = name.rpartition(".")
            setattr(module.get_submodule(owner), attribute, module.get_parameter(first))
    return network


def reference_copy(model: Model, src_vocab_size: int, tgt_vocab_size: int) -> Model:
    """A copy of `model` built of its family's reference modules alone (no fast paths), in eval mode,
    on its device and in its dtype: what attnmt explain and the attributions read."""
    import torch

    parameter = next(model.parameters())
    with torch.random.fork_rng(devices=[]):   # building draws initial weights: leave the caller's draws alone
        network = build_model(model.config, src_vocab_size, tgt_vocab_size, fast_paths=False)
    network.to(parameter.device, parameter.dtype).load_state_dict(model.state_dict())   # in its dtype: no rounding
    return network.eval()
