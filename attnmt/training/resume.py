"""Where a training run starts: afresh, or from its checkpoint (--resume) or a model file
(train.init_from), each checked against the config, with the prepared corpus it trains on; its
output folder made ready; the rules of continuing a run (what differs from the run resumed)."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from ..config import Config, TrainConfig, TrainPrecision
from ..configfile import fine_tuning_config
from ..corpus.prepare import open_corpus
from ..errors import AttnmtError
from ..files import MODEL_FILE
from ..modelfile import ModelDescription, read_checkpoint, read_metadata, read_model

CHECKPOINT_FILE = "checkpoint.safetensors"


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

    def next_epoch(self) -> None:
        """The counters at the start of the next epoch."""
        self.epoch, self.batch_in_epoch, self.epoch_loss, self.epoch_tokens = self.epoch + 1, 0, 0.0, 0


@dataclass
class Start:
    """What rank 0 reads before training and hands to the other ranks: the run's config (a fine-tuning
    run's completed from its model file), the prepared corpus's folder and what the run continues
    from, if anything: a checkpoint (--resume), or the weights of the model file train.init_from names."""

    config: Config
    corpus: Path
    weights: Optional[dict[str, torch.Tensor]] = None  # the network's state dict
    optimizer: Optional[dict] = None                   # a checkpoint's optimizer state dict,
    progress: Optional[Progress] = None                # counters
    parts_per_batch: Optional[int] = None              # and ranks x train.accumulate


def holds_model(out_dir: Path) -> bool:
    """Whether a run has left a model or a checkpoint in `out_dir`, which a new run would replace."""
    return (out_dir / MODEL_FILE).exists() or (out_dir / CHECKPOINT_FILE).exists()


def prepare_out_dir(out_dir: Path, resume: bool, overwrite: bool) -> None:
    """Rank 0's `out_dir`, made ready: with a checkpoint to resume from (--resume), or without a model
    a new run would replace (unless --overwrite); half-written files of a killed run removed."""
    checkpoint_path = out_dir / CHECKPOINT_FILE
    if resume and not checkpoint_path.exists():
        raise AttnmtError(f"{checkpoint_path}: no checkpoint to resume from")
    if not resume and not overwrite and holds_model(out_dir):
        raise AttnmtError(f"{out_dir} already holds a model; use --resume to continue it, --overwrite to replace it, "
                          f"or another train.out_dir")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnmtError(f"{out_dir}: cannot create output directory: {err.strerror or err}") from None
    for stale in out_dir.glob(".*.safetensors.*.tmp"):  # half-written files of a run killed while saving
        stale.unlink(missing_ok=True)


def _differences(saved: Config, config: Config) -> list[str]:
    """The model, tokenizer and vocab keys whose values differ between two configs."""
    return [f"{section}.{key}" for section in ("model", "tokenizer", "vocab")
            for key, value in getattr(config, section).__dict__.items() if getattr(saved, section).__dict__[key] != value]


def read_init(config: Config) -> tuple[Config, ModelDescription, dict[str, torch.Tensor]]:
    """The model file a fine-tuning run starts from (train.init_from): the run's config completed from
    it (configfile.fine_tuning_config), its description (with its tokenization) and its weights."""
    path = config.train.init_from
    try:
        description, weights, _ = read_model(path)
    except AttnmtError as err:
        raise AttnmtError(f"train.init_from: {err}") from None
    return fine_tuning_config(config, description.config, path), description, weights


def started_from(path: str) -> dict:
    """What a fine-tuned model file says of the file its run started from (train.init_from; attnmt info):
    where it was, its weights' digest, and where that file came from (imported, or fine-tuned itself),
    as far as the file can still be read."""
    try:
        meta = read_metadata(path)
    except AttnmtError:
        return {"file": str(Path(path).resolve())}
    earlier = (meta.get("training") or {}).get("init_from")
    return {"file": str(Path(path).resolve()), "weights_sha256": meta["sha256"],
            **({"origin": meta["origin"]} if meta.get("origin") else {}), **({"init_from": earlier} if earlier else {})}


def find_start(config: Config, resume_from: Optional[Path], log: Callable[[str], None]) -> Start:
    """Rank 0's reading before training: the checkpoint `resume_from` (--resume) or the model file
    train.init_from names, the config completed from it (fine-tuning) and checked against it, and the
    prepared corpus (prepared now if missing), with their tokenization if there is one."""
    if resume_from:
        checkpoint = read_checkpoint(resume_from)
        saved = checkpoint.description.config
        if config.train.init_from:  # completed from the checkpoint, which holds the model file's sections
            config = fine_tuning_config(config, saved, config.train.init_from)
        changed = _differences(saved, config)  # data are checked by their fingerprint
        if changed:
            raise AttnmtError(f"{resume_from}: cannot resume with different {', '.join(changed)} than the checkpoint was "
                              f"trained with")
        corpus = open_corpus(config, checkpoint.description.tokenization, log)
        if checkpoint.data_sha256 != corpus.fingerprint:
            raise AttnmtError(f"{resume_from}: the training data differ from those the checkpoint was trained on; "
                              f"cannot resume")
        return Start(config, corpus.directory, checkpoint.weights, checkpoint.optimizer, Progress(**checkpoint.progress),
                     checkpoint.parts_per_batch)
    if config.train.init_from:
        config, description, weights = read_init(config)
        return Start(config, open_corpus(config, description.tokenization, log).directory, weights)
    return Start(config, open_corpus(config, None, log).directory)


def settled_precision(tc: TrainConfig, progress: Progress, log: Callable[[str], None]) -> Optional[TrainPrecision]:
    """train.precision where no timing decides it: the setting, with a warning where the run being resumed
    computed in another format; under auto, a resumed run's format; None: auto for a fresh run."""
    if tc.precision != "auto":
        if progress.precision not in ("", tc.precision):
            log(f"warning: the run being resumed trained in {progress.precision}, this one in {tc.precision}: it "
                f"continues in another format, not bit-exactly (train.precision=auto or {progress.precision} resumes "
                f"it exactly)")
        return tc.precision
    if progress.precision:
        log(f"precision: train {progress.precision} (train.precision auto: the resumed run's format)")
        return typing.cast(TrainPrecision, progress.precision)
    return None


def check_continuation(start: Start, progress: Progress, tc: TrainConfig, parts_per_batch: int,
                       log: Callable[[str], None]) -> None:
    """What a run that continues another says and refuses, on every rank once its model is built: the model file
    it starts from (train.init_from); a warning where the run it resumes computed with another thread count or
    cut its batches into another number of parts (`parts_per_batch`: ranks x train.accumulate), as it then
    continues up to float rounding only; a refusal where its time budget is spent. Records this process's
    thread count in `progress`."""
    if start.weights is not None and start.optimizer is None:
        log(f"starting from {tc.init_from}: its architecture, weights, tokenizers and vocabularies")
    if progress.threads and progress.threads != torch.get_num_threads():
        log(f"warning: the run being resumed trained with {progress.threads} threads, this process has "
            f"{torch.get_num_threads()}: the sums round differently, so it continues up to float rounding, not "
            f"bit-exactly (train.threads={progress.threads} resumes it exactly)")
    progress.threads = torch.get_num_threads()
    if start.parts_per_batch not in (None, parts_per_batch):
        log(f"the checkpoint's batches were cut into {start.parts_per_batch} parts (ranks x train.accumulate), "
            f"these into {parts_per_batch}: the same batches and gradients up to float rounding, but other dropout "
            f"draws than an uninterrupted run's")
    earlier_min = progress.elapsed_s / 60
    if tc.max_minutes and earlier_min >= tc.max_minutes:
        raise AttnmtError(f"train.max_minutes: the run being resumed has trained {earlier_min:.1f} minutes already, and "
                          f"the budget counts the whole run, its earlier sessions too; raise train.max_minutes above "
                          f"{earlier_min:.1f} to train on")
