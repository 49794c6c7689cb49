"""Where a training run starts: afresh, or from its checkpoint (--resume) or a model file
(train.init_from), each checked against the config, with the prepared corpus it trains on."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from .config import Config
from .errors import AttnmtError
from .modelfile import ModelDescription, read_checkpoint, read_model
from .prepare import open_corpus


@dataclass
class Progress:
    """The counters a checkpoint carries, so that a resumed run continues where it stopped."""

    epoch: int = 1
    batch_in_epoch: int = 0  # batches of `epoch` already done
    epoch_loss: float = 0.0  # summed training loss and target tokens of those batches
    epoch_tokens: int = 0
    step: int = 0
    best_metric: float = -math.inf  # of the kept model, higher is better: -valid_loss or valid BLEU
    bad_validations: int = 0         # validations since the kept model, for plateau and early stopping
    lr: float = 0.0                  # the learning rate now (0 until the first step sets it)
    epoch_files: list[str] = field(default_factory=list)  # the last epochs' models, for averaging
    elapsed_s: float = 0.0
    history: list[dict] = field(default_factory=list)
    threads: int = 0  # torch's threads the run computes with (threads.py); 0: not recorded (older checkpoints)
    precision: str = ""  # fp32 or bf16: the format the run computes in (train.precision resolved); "": not recorded


@dataclass
class Start:
    """What rank 0 reads before training and hands to the other ranks: the prepared corpus's folder
    and what the run continues from, if anything: a checkpoint (--resume), or the weights of the
    model file train.init_from names."""

    corpus: Path
    weights: Optional[dict[str, torch.Tensor]] = None  # the network's state dict
    optimizer: Optional[dict] = None                   # a checkpoint's optimizer state dict,
    progress: Optional[Progress] = None                # counters
    parts_per_batch: Optional[int] = None              # and ranks x train.accumulate


def _differences(saved: Config, config: Config, shapes_only: bool = False) -> list[str]:
    """The model, tokenizer and vocab keys whose values differ between two configs; `shapes_only`:
    leaving out dropout, which shapes no weight."""
    return [f"{section}.{key}" for section in ("model", "tokenizer", "vocab")
            for key, value in getattr(config, section).__dict__.items()
            if getattr(saved, section).__dict__[key] != value and not (shapes_only and "dropout" in key)]


def _read_init(path: str, config: Config) -> tuple[ModelDescription, dict[str, torch.Tensor]]:
    """The description (with its tokenization) and weights of the model file a fine-tuning run
    starts from (train.init_from), if their architecture is this config's."""
    try:
        description, weights, _ = read_model(path)
    except AttnmtError as err:
        raise AttnmtError(f"train.init_from: {err}") from None
    changed = _differences(description.config, config, shapes_only=True)
    if changed:
        raise AttnmtError(f"train.init_from {path}: {', '.join(changed)} differ from the model file's; a run starts "
                          f"from a model of the same architecture, tokenizer and vocabulary (dropout may differ)")
    return description, weights


def find_start(config: Config, resume_from: Optional[Path], log: Callable[[str], None]) -> Start:
    """Rank 0's reading before training: the checkpoint `resume_from` (--resume) or the model file
    train.init_from names, checked against the config, and the prepared corpus (prepared now if
    missing), with their tokenization if there is one."""
    if resume_from:
        checkpoint = read_checkpoint(resume_from)
        changed = _differences(checkpoint.description.config, config)  # data are checked by their fingerprint
        if changed:
            raise AttnmtError(f"{resume_from}: cannot resume with different {', '.join(changed)} than the checkpoint was "
                              f"trained with")
        corpus = open_corpus(config, checkpoint.description.tokenization, log)
        if checkpoint.data_sha256 != corpus.fingerprint:
            raise AttnmtError(f"{resume_from}: the training data differ from those the checkpoint was trained on; "
                              f"cannot resume")
        return Start(corpus.directory, checkpoint.weights, checkpoint.optimizer, Progress(**checkpoint.progress),
                     checkpoint.parts_per_batch)
    if config.train.init_from:
        description, weights = _read_init(config.train.init_from, config)
        return Start(open_corpus(config, description.tokenization, log).directory, weights)
    return Start(open_corpus(config, None, log).directory)
