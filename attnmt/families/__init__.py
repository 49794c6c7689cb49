"""The model families by model.arch: the registry. A family is a folder beside this one holding its
network (implementing seam.Model) and its config (a ModelConfig subclass); registering it here is all
the rest of attnmt needs (DEVELOPERS.md, "Model families")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from ..config import MODEL_CONFIGS, ModelConfig
from ..fast import use_fast_paths
from .rnn.config import RNNConfig
from .rnn.network import RNNEncoderDecoder
from .seam import Model
from .transformer.config import TransformerConfig
from .transformer.network import Transformer


@dataclass(frozen=True)
class Family:
    """A model family: its config class and its network, built from (config, source vocabulary size,
    target vocabulary size)."""

    config: type[ModelConfig]
    network: Callable[[ModelConfig, int, int], Model]


FAMILIES: dict[str, Family] = {}


def register(arch: str, family: Family) -> None:
    """Make `family` the one model.arch `arch` builds."""
    FAMILIES[arch] = family
    MODEL_CONFIGS[arch] = family.config


def unregister(arch: str) -> None:
    del FAMILIES[arch], MODEL_CONFIGS[arch]


register("rnn", Family(RNNConfig, RNNEncoderDecoder))            # type: ignore[arg-type]  # takes its own config
register("transformer", Family(TransformerConfig, Transformer))  # type: ignore[arg-type]  # takes its own config


def build_model(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, fast_paths: bool = True) -> Model:
    """The network of the family `config.arch`, with its fast paths (fast/) or the reference modules only."""
    network = FAMILIES[config.arch].network(config, src_vocab_size, tgt_vocab_size)
    assert isinstance(network, nn.Module), "a family's network is an nn.Module"
    return use_fast_paths(network, fast_paths, network.fast_classes)
