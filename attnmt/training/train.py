"""Training: a run set up from its config (and the checkpoint or model file it continues from), then
epoch by epoch of updates, each epoch validated, the best model kept and a checkpoint written."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, TypeVar

import numpy as np
import torch
from tqdm import tqdm

from ..config import Config, TrainConfig, TrainPrecision
from ..corpus.readers import anchored
from ..corpus.store import PreparedCorpus
from ..errors import AttnmtError
from ..evaluate import score_translations
from ..families import build_model
from ..fast import fast_paths_in
from ..files import MODEL_FILE
from ..modelfile import Checkpoint, save_checkpoint
from ..precision import BF16_AT_MOST, faster_precision, has_lstm, native_bf16, precision_note, resolve_device
from ..translate import Translator, map_shapes
from .average import average_weights, epochs_of, keep_epoch_model
from .data import Part, TrainingData, epoch_batches
from .metrics import MetricsWriter
from .resume import CHECKPOINT_FILE, Progress, check_continuation, find_start, prepare_out_dir, settled_precision, started_from
from .step import TeacherForced, evaluate_loss, make_optimizer, part_loss, train_step
from .timeline import EARLY_STEPS, Timeline

T = TypeVar("T")


class Ranks:
    """This training process alone, rank 0 of 1, where every exchange between ranks is the identity;
    distributed.ProcessGroupRanks is the same interface for each process torchrun starts."""

    rank = 0
    world_size = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that validates, logs and writes files."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """The device this rank trains on, given the one train.device names."""
        return device

    def parts(self, data: TrainingData, ids: list[int], accumulate: int, device: torch.device) -> list[Part]:
        """This rank's micro-batches of the batch `ids`."""
        return data.parts(ids, accumulate, device)

    def wrap(self, network: TeacherForced) -> torch.nn.Module:
        """The module training calls: the network itself, or DDP around it."""
        return network

    def train_step(self, network: torch.nn.Module, optimizer: torch.optim.Optimizer, parts: list[Part],
                   tc: TrainConfig, step: int, tokens: int, model_path: Optional[Path] = None) -> float:
        """One update from this rank's parts of a batch of `tokens` target tokens (step.train_step)."""
        return train_step(network, optimizer, parts, tc, step, tokens, model_path)

    def sum(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks."""
        return values

    def share(self, value: T) -> T:
        """Rank 0's value, on every rank (any picklable value)."""
        return value

    def close(self) -> None:
        """Leave the process group, if any."""


@dataclass
class TrainResult:
    model_path: Path
    best_metric: float
    test_scores: dict
    epochs: int     # epochs trained, whole or in part: one cut by a stop and resumed counts once
    minutes: float  # on the training clock, which a resumed run continues


def train(config: Config, resume: bool = False, overwrite: bool = False,
          log: Callable[[str], None] = print, ranks: Optional[Ranks] = None) -> TrainResult:
    """Train the model the config describes; the best model by `train.select_by` goes to out_dir.

    Training runs fastest in a process set up by `process.set_up_training_process()`, which entry
    points (the CLI, the bench) call; a library function leaves its caller's process alone.
    Under torchrun, `ranks` (`distributed.start_ranks`) says which process this is: each rank
    trains on its share of every batch; rank 0 alone validates, logs and writes files, and what it
    decides reaches the others. Only rank 0's result carries test scores.
    """
    ranks, config = ranks or Ranks(), replace(config, data=anchored(config.data))  # the model keeps data.path absolute
    log = log if ranks.is_main else _silent
    tc, out_dir = config.train, Path(config.train.out_dir)
    device = ranks.device(resolve_device(tc.device))
    if config.decode.precision == "int8" and device.type != "cpu":  # say so now, not at the first validation
        raise AttnmtError(f"decode.precision int8 runs on CPUs only; use bf16 on {device}")
    if ranks.is_main:
        prepare_out_dir(out_dir, resume, overwrite)
    torch.manual_seed(tc.seed)
    # Read by rank 0 alone: the other ranks need not see its out_dir; every rank maps the same prepared files.
    start = ranks.share(find_start(config, out_dir / CHECKPOINT_FILE if resume else None, log) if ranks.is_main else None)
    assert start is not None, "rank 0 shares where the run starts"
    config = start.config  # a fine-tuning run's completed from its model file (train.init_from)
    data = TrainingData.of(PreparedCorpus.open(start.corpus), config.data.max_len, config.model.source_eos)
    corpus, text = data.corpus, data.corpus.tokenization
    _log_data(data, log)
    model = build_model(config.model, len(text.src_vocab), len(text.tgt_vocab), tc.fast_paths).to(device)
    log(f"fast paths: {', '.join(fast_paths_in(model)) or 'none'}" if tc.fast_paths
        else "fast paths: none (train.fast_paths false: the reference modules alone)")
    if start.weights is not None:
        model.load_state_dict(start.weights)
    progress = start.progress or Progress()
    # The run computes in one format from start to end, resumed or not; under torchrun rank 0 times it.
    network = TeacherForced(model)
    chosen = ranks.share(_training_precision(config, progress, network, data, device, log) if ranks.is_main else None)
    assert chosen is not None, "rank 0 shares the format"
    progress.precision = chosen
    config = replace(config, train=replace(tc, precision=chosen))
    tc = config.train
    optimizer = make_optimizer(model, tc, start.optimizer)
    where = f" on {ranks.world_size} ranks" if ranks.world_size > 1 else ""
    budget = f", {progress.elapsed_s / 60:.1f} of train.max_minutes={tc.max_minutes:g} used" if tc.max_minutes else ""
    log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters on {device}{where}"
        + (f"; resuming at epoch {progress.epoch}, step {progress.step}{budget}" if resume else ""))
    check_continuation(start, progress, tc, ranks.world_size * tc.accumulate, log)
    metrics = MetricsWriter(out_dir, progress.step if resume else None, tc.tensorboard) if ranks.is_main else None
    timeline = (Timeline.start(tc, [s for s, _ in corpus.valid_pairs], out_dir, progress.step if resume else None)
                if ranks.is_main and "cross" in map_shapes(model) else None)   # a model without attention: nothing to watch
    run = Run(config, data, Translator(model, config, text), ranks.wrap(network), optimizer, progress, device, ranks,
              metrics, timeline, time.monotonic() - progress.elapsed_s, log)
    try:
        log(f"{run.train_epochs()}; stopping")
        if metrics and tc.average_last > 1 and len(progress.epoch_files) > 1:
            run.try_average()
    finally:
        if metrics:
            metrics.close()
    return run.result()


def _log_data(data: TrainingData, log: Callable[[str], None]) -> None:
    """What the run trains on: its pairs, those left out (the first unreadable lines named), its vocabularies."""
    corpus, text = data.corpus, data.corpus.tokenization
    left_out = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in corpus.report["left_out"].items() if n)
    log(f"data: {len(corpus)} training pairs ({left_out or 'none'} left out), {len(data.valid)} valid, "
        f"{len(corpus.test_pairs)} test; vocab {len(text.src_vocab)} source, {len(text.tgt_vocab)} target")
    for line in corpus.unreadable_lines():
        log(line)


def _training_precision(config: Config, progress: Progress, network: TeacherForced, data: TrainingData,
                        device: torch.device, log: Callable[[str], None]) -> TrainPrecision:
    """train.precision as the run computes it, said with decode.precision (`precision_note`): the setting, or under
    auto a resumed run's format (`settled_precision`); else on a CPU with native bf16 the faster of both formats at
    the first batch's forward and backward."""
    tc = config.train
    timed = tc.precision == "auto" and not progress.precision and device.type == "cpu" and native_bf16(device)
    # The user's setting goes in the note, unless auto is to be timed, which says its own line.
    settings = {**({} if timed else {"train.precision": tc.precision}), "decode.precision": config.decode.precision}
    note = precision_note(settings, device, has_lstm(network.modules()))
    if note:
        log(note)
    settled = settled_precision(tc, progress, log)
    if settled:
        return settled
    if not timed:
        return "bf16" if native_bf16(device) else "fp32"
    part = data.part(epoch_batches(data.corpus.lengths, tc, progress.epoch)[0].tolist(), device)  # the first batch
    network.train()

    def forward_backward(precision: str) -> None:
        # No trace left: the gradients are dropped, and each update seeds its own random draws.
        part_loss(network, part, tc, precision).backward()
        network.zero_grad(set_to_none=True)

    repeats = 3
    chosen, best = faster_precision(forward_backward, repeats)
    log(f"precision: train {chosen} (train.precision auto: this CPU computes bf16 natively, and the first batch's "
        f"forward and backward took {best['fp32'] * 1000:.0f} ms in fp32, {best['bf16'] * 1000:.0f} ms in bf16, the "
        f"best of {repeats}; bf16 only when at least {1 - BF16_AT_MOST:.0%} faster)")
    return chosen


def _silent(line: str) -> None:
    """The log of ranks other than 0."""


@dataclass
class Run:
    """A training run under way: what its epochs work with. Every rank trains; rank 0 alone
    (the one with `metrics`) validates, logs and writes files."""

    config: Config
    data: TrainingData
    translator: Translator           # the model trained, with the config and tokenization it is saved with
    network: torch.nn.Module         # the model as training calls it (DDP around it under torchrun)
    optimizer: torch.optim.Optimizer
    progress: Progress
    device: torch.device
    ranks: Ranks
    metrics: Optional[MetricsWriter]  # rank 0's
    timeline: Optional[Timeline]      # rank 0's, where it watches sentences
    started: float                    # time.monotonic() at the start, earlier sessions' time taken off
    log: Callable[[str], None]

    @property
    def out_dir(self) -> Path:
        return Path(self.config.train.out_dir)

    @property
    def model_path(self) -> Path:
        return self.out_dir / MODEL_FILE

    def train_epochs(self) -> str:
        """Train and validate epoch by epoch until the epochs, the budget or the patience run out; say why it stopped."""
        tc, progress, ranks = self.config.train, self.progress, self.ranks
        stop = ""
        while progress.epoch <= tc.epochs and not stop:
            order = epoch_batches(self.data.corpus.lengths, tc, progress.epoch)
            segment_started = time.monotonic()  # training since the last validation, for tokens/s
            stop, segment_tokens = self.train_epoch(order)
            progress.elapsed_s = time.monotonic() - self.started
            if self.metrics:  # rank 0
                tokens_per_s = segment_tokens / max(time.monotonic() - segment_started, 1e-9)
                record = self.validate()
                if self.timeline:
                    self.timeline.record(self.translator, progress.step, progress.epoch, record["valid_loss"])
                progress.history.append(record)
                self.log(" | ".join(f"{k} {v}" for k, v in record.items()))
                # label_smoothing: what train_loss includes and valid_loss does not (curves.png says so).
                self.metrics.write({**record, "lr": progress.lr, "target_tokens_per_s": round(tokens_per_s, 1),
                                    "elapsed_min": round(progress.elapsed_s / 60, 2), "threads": progress.threads,
                                    "precision": progress.precision, "label_smoothing": tc.label_smoothing})
                # Always: a budget that runs out in the first epoch must still keep its model.
                verdict = self.after_validation(record)
                stop = stop or verdict
            # Rank 0's validation decides for all: the best figure so far, the learning rate, whether to stop.
            shared, stop = ranks.share((progress.__dict__, stop))
            progress.__dict__.update(shared)
            if progress.batch_in_epoch >= len(order):
                if ranks.is_main and tc.average_last > 1:
                    progress.epoch_files = keep_epoch_model(self.translator, progress.epoch, progress.epoch_files,
                                                            self.out_dir, tc.average_last)
                progress.next_epoch()
            if ranks.is_main:
                self.save_checkpoint()
        return stop or f"all {tc.epochs} epochs trained (train.epochs)"  # said, as a budget may remain

    def train_epoch(self, order: list[np.ndarray]) -> tuple[str, int]:
        """The updates of the epoch's batches `order` not yet done, until the time budget runs out: why they
        stopped early ("" if they did not), and the target tokens they trained on."""
        tc, progress, ranks, corpus = self.config.train, self.progress, self.ranks, self.data.corpus
        self.translator.model.train()
        bar = tqdm(total=len(order), initial=progress.batch_in_epoch, desc=f"epoch {progress.epoch}",
                   unit="batch", disable=None if ranks.is_main else True, leave=False)
        trained, stop = 0, ""
        for batch_ids in order[progress.batch_in_epoch:]:
            progress.lr = learning_rate(progress.step + 1, tc, progress.lr)
            for group in self.optimizer.param_groups:
                group["lr"] = progress.lr
            tokens = corpus.target_tokens(batch_ids)  # the whole batch's, EOS included
            parts = ranks.parts(self.data, batch_ids.tolist(), tc.accumulate, self.device)
            loss = ranks.train_step(self.network, self.optimizer, parts, tc, progress.step + 1, tokens, self.model_path)
            progress.step += 1
            progress.batch_in_epoch += 1
            progress.epoch_loss += loss
            progress.epoch_tokens += tokens
            trained += tokens
            if self.timeline and progress.epoch == 1 and progress.step in EARLY_STEPS:
                self.timeline.record(self.translator, progress.step, progress.epoch)
            bar.update()
            bar.set_postfix(loss=f"{progress.epoch_loss / progress.epoch_tokens:.3f}")
            if bar.disable and tc.log_every and progress.step % tc.log_every == 0:  # no terminal: log lines instead
                self.log(f"epoch {progress.epoch} step {progress.step} ({progress.batch_in_epoch}/{len(order)}) | "
                         f"train_loss {progress.epoch_loss / progress.epoch_tokens:.4f} | lr {progress.lr:.2e} | "
                         f"{(time.monotonic() - self.started) / 60:.1f} min")
            # Every rank's clock has a say, so that all stop at the same step.
            over_budget = float(bool(tc.max_minutes) and time.monotonic() - self.started > tc.max_minutes * 60)
            if ranks.sum([over_budget])[0]:
                stop = (f"time budget of {tc.max_minutes} minutes used up (train.max_minutes: the whole run's "
                        f"training; the last validation and the test translations come after it)")
                break
            if (ranks.is_main and tc.checkpoint_every and progress.step % tc.checkpoint_every == 0
                    and progress.batch_in_epoch < len(order)):
                progress.elapsed_s = time.monotonic() - self.started
                self.save_checkpoint()
        bar.close()
        return stop, trained

    def save_checkpoint(self) -> None:
        # No random generator state: each part's draws are seeded by the step (step._draw_seed).
        translator = self.translator
        save_checkpoint(self.out_dir / CHECKPOINT_FILE, Checkpoint(
            translator.description, translator.model.state_dict(), self.optimizer.state_dict(), self.progress.__dict__,
            self.data.corpus.fingerprint, self.ranks.world_size * self.config.train.accumulate))

    def validate(self) -> dict:
        """The validation figures of the model now: loss and, with validation pairs, exact match and BLEU."""
        translator, progress = self.translator, self.progress
        valid_loss = evaluate_loss(translator.model, self.data.valid, self.config.train.batch_size, self.device,
                                   self.data.framing)
        train_loss = progress.epoch_loss / max(progress.epoch_tokens, 1)
        record = {"epoch": progress.epoch, "step": progress.step, "train_loss": round(train_loss, 4),
                  "valid_loss": round(valid_loss, 4), "valid_ppl": round(math.exp(min(valid_loss, 50)), 2)}
        pairs = self.data.corpus.valid_pairs
        if pairs:
            # A fresh engine: its decoding copy (bf16, int8) is made from the weights as they are now.
            scores = score_translations(Translator(translator.model, self.config, translator.tokenization), pairs)
            record.update(valid_exact=scores["exact"], valid_bleu=scores["bleu"])
        translator.model.train()
        return record

    def after_validation(self, record: dict) -> str:
        """Keep the model if it is the best so far; adjust the plateau schedule; say why to stop, if so."""
        tc, progress = self.config.train, self.progress
        metric = _selection_metric(record, tc)
        if metric > progress.best_metric:
            progress.best_metric, progress.bad_validations = metric, 0
            self.translator.save(self.model_path, self._training_facts(record))
        else:
            progress.bad_validations += 1
            if tc.scheduler == "plateau" and progress.bad_validations % tc.plateau_patience == 0:
                progress.lr = max(progress.lr * tc.plateau_factor, tc.min_lr)
                self.log(f"validation {tc.select_by} did not improve; learning rate now {progress.lr:.2e}")
        if tc.patience and progress.bad_validations >= tc.patience:
            return f"no better validation {tc.select_by} for {tc.patience} validations"
        if tc.target_exact_match and record.get("valid_exact", 0) >= tc.target_exact_match * 100:
            return f"valid exact match reached {tc.target_exact_match:.0%}"
        return ""

    def try_average(self) -> None:
        """Average the last epochs' weights; keep the average as the model if it validates better
        (or always, train.average_keep)."""
        progress = self.progress
        count = len(progress.epoch_files)
        self.translator.model.load_state_dict(
            average_weights([self.out_dir / name for name in progress.epoch_files], self.device))
        record = self.validate()
        self.log(f"average of the last {count} epochs: " + " | ".join(f"{k} {v}" for k, v in record.items()
                                                                       if k.startswith("valid")))
        assert self.metrics, "rank 0 averages"
        # No training happened since the last epoch: its train_loss would read 0.
        self.metrics.write({**{k: v for k, v in record.items() if k != "train_loss"}, "average_of_last": count})
        metric = _selection_metric(record, self.config.train)
        better = metric > progress.best_metric
        if better or self.config.train.average_keep == "always":
            progress.best_metric = max(metric, progress.best_metric)
            self.translator.save(self.model_path, self._training_facts(
                record, average_of_last=count, averaged_epochs=epochs_of(progress.epoch_files)))
            self.log(f"the average validates {'better' if better else 'no better'} than the best single epoch; "
                     f"{self.model_path} is now the average" + ("" if better else " (train.average_keep always)"))

    def result(self) -> TrainResult:
        """What the run leaves, once trained: on rank 0 with the kept model's test scores, logged with where it is."""
        tc, progress = self.config.train, self.progress
        minutes = (time.monotonic() - self.started) / 60
        epochs = len({record["epoch"] for record in progress.history})
        if not self.ranks.is_main:
            return TrainResult(self.model_path, progress.best_metric, {}, epochs, minutes)
        best = Translator.load(self.model_path, device=str(self.device))
        test_pairs = self.data.corpus.test_pairs
        test_scores = score_translations(best, test_pairs) if test_pairs else {}
        if test_scores:
            self.log("test: " + " | ".join(f"{k} {v}" for k, v in test_scores.items() if "signature" not in k))
        self.log(f"saved: {self.model_path}, the model kept by validation {tc.select_by} (try: attnmt translate "
                 f"{self.out_dir} \"a sentence\"); its checkpoint and metrics.jsonl are beside it")
        return TrainResult(self.model_path, progress.best_metric, test_scores, epochs, minutes)

    def _training_facts(self, record: dict, **extra: object) -> dict:
        """What a model file says of its training (attnmt info): data digest, step, epoch, validation figures."""
        corpus = self.data.corpus
        return {"data_sha256": corpus.fingerprint, "training_pairs": len(corpus), "epoch": record["epoch"],
                "step": record["step"], "threads": self.progress.threads, "precision": self.progress.precision, **extra,
                **({"init_from": started_from(self.config.train.init_from)} if self.config.train.init_from else {}),
                "validation": {k: v for k, v in record.items() if k.startswith("valid")}}


def learning_rate(step: int, tc: TrainConfig, current: float = 0.0) -> float:
    """The learning rate of update `step` (the first is 1): warmup, then inverse square root or linear decay;
    without a schedule by steps (none, plateau), `current`, the rate now, which validations lower under
    plateau, or train.lr before the first update."""
    if tc.scheduler == "warmup":
        return max(tc.lr * min(step / tc.warmup_steps, (tc.warmup_steps / step) ** 0.5), tc.min_lr)
    if tc.scheduler == "linear":
        left = (tc.decay_steps - step) / (tc.decay_steps - tc.warmup_steps)   # 1 at the warmup's end, 0 at decay_steps
        return max(tc.lr * min(step / tc.warmup_steps, left), tc.min_lr)
    return current or tc.lr


def _selection_metric(record: dict, tc: TrainConfig) -> float:
    """The validation figure that picks the best model (higher is better): -valid_loss or valid BLEU."""
    return -record["valid_loss"] if tc.select_by == "loss" else record.get("valid_bleu", 0.0)
