"""Training: data to batches, teacher-forced steps with Adam, validation, the best model kept."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
from tqdm import tqdm

from .batch import Batch, batch_indices, collate
from .config import Config, TrainConfig, saved_config
from .distributed import Ranks
from .errors import AttnmtError
from .evaluate import score_translations
from .families import build_model
from .families.seam import Model
from .loss import sequence_loss
from .metrics import MetricsWriter
from .modelfile import load_file, model_tensors, network_weights, read_model, save_file
from .precision import autocast, precision_note, resolve_device
from .prepare import open_corpus
from .store import PreparedCorpus
from .translate import Translator
from .vocab import Example

MODEL_FILE = "model.safetensors"
CHECKPOINT_FILE = "checkpoint.safetensors"
OPTIMIZER_PREFIX = "optimizer."


@dataclass
class TrainingData:
    """What training reads: the prepared corpus (memory-mapped) and the validation pairs as ids."""

    corpus: PreparedCorpus
    valid: list[Example]

    @classmethod
    def of(cls, corpus: PreparedCorpus, max_len: int) -> "TrainingData":
        valid = corpus.tokenization.examples(corpus.valid_pairs, max_len)
        if not valid:
            raise AttnmtError(f"no usable validation pairs: each of the {len(corpus.valid_pairs)} has an empty side or "
                              f"exceeds data.max_len={max_len}")
        return cls(corpus, valid)


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


@dataclass
class TrainResult:
    model_path: Path
    best_metric: float
    test_scores: dict
    epochs: int
    minutes: float


def evaluate_loss(model: Model, examples: list[Example], batch_size: int, device: torch.device) -> float:
    """Mean cross-entropy per target token, teacher-forced, no dropout."""
    model.eval()
    total, tokens = 0.0, 0
    lengths = np.array([(len(s), len(t)) for s, t in examples], dtype=np.int64).reshape(-1, 2)
    with torch.inference_mode():
        for batch_ids in batch_indices(lengths, batch_size):
            ids = batch_ids.tolist()
            batch = collate([examples[i] for i in ids], ids, device)
            at = batch.target_mask
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in, classify_at=at)
            total += sequence_loss(logits, batch.tgt_out[at]).item()
            tokens += batch.num_target_tokens
    model.train()
    return total / max(tokens, 1)


def _save_checkpoint(path: Path, translator: Translator, optimizer: torch.optim.Optimizer, progress: Progress,
                     data: TrainingData, parts_per_batch: int) -> None:
    # No random generator state: each part's draws are seeded by the step (_draw_seed).
    optim_state = optimizer.state_dict()
    tensors = model_tensors(translator.model.state_dict())
    for index, values in optim_state["state"].items():
        for key, value in values.items():
            tensors[f"{OPTIMIZER_PREFIX}{index}.{key}"] = value
    meta = {"kind": "checkpoint", **translator.description.metadata(), "param_groups": optim_state["param_groups"],
            "progress": progress.__dict__, "data_sha256": data.corpus.fingerprint, "parts_per_batch": parts_per_batch}
    save_file(path, tensors, meta)


def _read_checkpoint(path: Path, config: Config) -> tuple[dict[str, torch.Tensor], dict]:
    tensors, meta = load_file(path)
    if meta.get("kind") != "checkpoint":
        raise AttnmtError(f"{path}: not a training checkpoint")
    try:  # parsed, so that keys added since the checkpoint was written (model.arch) take their defaults
        saved = saved_config(meta["config"])
    except (KeyError, TypeError, AttnmtError) as err:
        raise AttnmtError(f"{path}: checkpoint metadata is incomplete or invalid ({err})") from None
    changed = _differences(saved, config)  # data are checked by their fingerprint
    if changed:
        raise AttnmtError(f"{path}: cannot resume with different {', '.join(changed)} than the checkpoint was "
                          f"trained with")
    return tensors, meta


def _differences(saved: Config, config: Config, shapes_only: bool = False) -> list[str]:
    """The model, tokenizer and vocab keys whose values differ between two configs; `shapes_only`:
    leaving out dropout, which shapes no weight."""
    return [f"{section}.{key}" for section in ("model", "tokenizer", "vocab")
            for key, value in getattr(config, section).__dict__.items()
            if getattr(saved, section).__dict__[key] != value and not (shapes_only and "dropout" in key)]


def _read_start(path: str, config: Config) -> tuple[dict[str, torch.Tensor], dict]:
    """The weights and the tokenizers and vocabularies (open_corpus's `saved`) of the model file a
    fine-tuning run starts from (train.init_from), if their architecture is this config's."""
    try:
        description, weights, _ = read_model(path)
    except AttnmtError as err:
        raise AttnmtError(f"train.init_from: {err}") from None
    changed = _differences(description.config, config, shapes_only=True)
    if changed:
        raise AttnmtError(f"train.init_from {path}: {', '.join(changed)} differ from the model file's; a run starts "
                          f"from a model of the same architecture, tokenizer and vocabulary (dropout may differ)")
    return weights, description.metadata()


def _restore(tensors: dict[str, torch.Tensor], meta: dict, model: Model, optimizer: torch.optim.Optimizer
             ) -> Progress:
    model.load_state_dict(network_weights(tensors))
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        if name.startswith(OPTIMIZER_PREFIX):
            index, key = name[len(OPTIMIZER_PREFIX):].split(".", 1)
            state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return Progress(**meta["progress"])


def train(config: Config, resume: bool = False, overwrite: bool = False,
          log: Callable[[str], None] = print, ranks: Optional[Ranks] = None) -> TrainResult:
    """Train the model the config describes; the best model by `train.select_by` goes to out_dir.

    Training runs fastest in a process set up by `process.set_up_training_process()`, which entry
    points (the CLI, the bench) call; a library function leaves its caller's process alone.
    Under torchrun, `ranks` (`distributed.start_ranks`) says which process this is: each rank
    trains on its share of every batch; rank 0 alone validates, logs and writes files, and what it
    decides reaches the others. Only rank 0's result carries test scores.
    """
    ranks = ranks or Ranks()
    log = log if ranks.is_main else _silent
    tc = config.train
    out_dir = Path(tc.out_dir)
    model_path, checkpoint_path = out_dir / MODEL_FILE, out_dir / CHECKPOINT_FILE
    device = ranks.device(resolve_device(tc.device))
    if config.decode.precision == "int8" and device.type != "cpu":  # say so now, not at the first validation
        raise AttnmtError(f"decode.precision int8 runs on CPUs only; use bf16 on {device}")
    if ranks.is_main:
        _prepare_out_dir(out_dir, resume, overwrite)
    note = precision_note({"train.precision": tc.precision, "decode.precision": config.decode.precision}, device,
                          lstm=config.model.arch == "rnn" and config.model.rnn == "lstm")
    if note:
        log(note)

    torch.manual_seed(tc.seed)
    # Read by rank 0 alone: the other ranks need not see its out_dir.
    checkpoint = ranks.share(_read_checkpoint(checkpoint_path, config) if resume and ranks.is_main else None)
    start = ranks.share(_read_start(tc.init_from, config) if tc.init_from and not resume and ranks.is_main else None)
    saved = checkpoint[1] if checkpoint else start[1] if start else None
    # Rank 0 prepares the corpus (or finds it prepared); every rank maps the same files.
    prepared = ranks.share(str(open_corpus(config, saved, log).directory) if ranks.is_main else None)
    assert prepared is not None, "rank 0 shares the folder"
    data = TrainingData.of(PreparedCorpus.open(Path(prepared)), config.data.max_len)
    corpus, text = data.corpus, data.corpus.tokenization
    if checkpoint and checkpoint[1].get("data_sha256") != corpus.fingerprint:
        raise AttnmtError(f"{checkpoint_path}: the training data differ from those the checkpoint was trained on; "
                          f"cannot resume")
    left_out = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in corpus.report["left_out"].items() if n)
    log(f"data: {len(corpus)} training pairs ({left_out or 'none'} left out), {len(data.valid)} valid, "
        f"{len(corpus.test_pairs)} test; vocab {len(text.src_vocab)} source, {len(text.tgt_vocab)} target")
    model = build_model(config.model, len(text.src_vocab), len(text.tgt_vocab), tc.fast_paths).to(device)
    optimizer = make_optimizer(model, tc)
    translator = Translator(model, config, text.src_tokenizer, text.tgt_tokenizer, text.src_vocab, text.tgt_vocab)
    if start:
        model.load_state_dict(start[0])
        log(f"starting from {tc.init_from}: its weights, tokenizers and vocabularies")
    progress = _restore(*checkpoint, model, optimizer) if checkpoint else Progress()
    where = f" on {ranks.world_size} ranks" if ranks.world_size > 1 else ""
    log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters on {device}{where}"
        + (f"; resuming at epoch {progress.epoch}, step {progress.step}" if resume else ""))
    parts_per_batch = ranks.world_size * tc.accumulate
    if checkpoint and checkpoint[1].get("parts_per_batch", 1) != parts_per_batch:
        log(f"the checkpoint's batches were cut into {checkpoint[1].get('parts_per_batch', 1)} parts (ranks x "
            f"train.accumulate), these into {parts_per_batch}: the same batches and gradients up to float "
            f"rounding, but other dropout draws than an uninterrupted run's")

    started = time.monotonic() - progress.elapsed_s
    metrics = MetricsWriter(out_dir, progress.step if resume else None, tc.tensorboard) if ranks.is_main else None
    try:
        stop = _train_epochs(config, data, translator, ranks.wrap(model), optimizer, progress, metrics, device,
                             started, log, ranks)
        if stop:
            log(f"{stop}; stopping")
        if metrics and tc.average_last > 1 and len(progress.epoch_files) > 1:
            _try_average(translator, data, config, device, progress, metrics, log)
    finally:
        if metrics:
            metrics.close()

    minutes = (time.monotonic() - started) / 60
    if not ranks.is_main:
        return TrainResult(model_path, progress.best_metric, {}, len(progress.history), minutes)
    best = Translator.load(model_path, device=str(device))
    test_scores = score_translations(best, corpus.test_pairs) if corpus.test_pairs else {}
    if test_scores:
        log("test: " + " | ".join(f"{k} {v}" for k, v in test_scores.items() if "signature" not in k))
    return TrainResult(model_path, progress.best_metric, test_scores, len(progress.history), minutes)


def _silent(line: str) -> None:
    """The log of ranks other than 0."""


def holds_model(out_dir: Path) -> bool:
    """Whether a run has left a model or a checkpoint in `out_dir`, which a new run would replace."""
    return (out_dir / MODEL_FILE).exists() or (out_dir / CHECKPOINT_FILE).exists()


def _prepare_out_dir(out_dir: Path, resume: bool, overwrite: bool) -> None:
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


def _train_epochs(config: Config, data: TrainingData, translator: Translator, network: torch.nn.Module,
                  optimizer: torch.optim.Optimizer, progress: Progress, metrics: Optional[MetricsWriter],
                  device: torch.device, started: float, log: Callable[[str], None], ranks: Ranks) -> str:
    """Train and validate epoch by epoch until the epochs, the budget or the patience run out; say why it stopped.
    `network` is the model as training calls it (DDP around it under torchrun); `metrics` is rank 0's."""
    tc, model = config.train, translator.model
    out_dir = Path(tc.out_dir)
    model_path, checkpoint_path = out_dir / MODEL_FILE, out_dir / CHECKPOINT_FILE
    parts_per_batch = ranks.world_size * tc.accumulate
    segment_started, segment_tokens = time.monotonic(), 0  # training since the last validation, for tokens/s
    stop = ""
    while progress.epoch <= tc.epochs and not stop:
        order = epoch_batches(data.corpus.lengths, tc, progress.epoch)
        model.train()
        bar = tqdm(total=len(order), initial=progress.batch_in_epoch, desc=f"epoch {progress.epoch}",
                   unit="batch", disable=None if ranks.is_main else True, leave=False)
        for batch_ids in order[progress.batch_in_epoch:]:
            _set_lr(optimizer, progress, tc)
            ids = batch_ids.tolist()
            tokens = data.corpus.target_tokens(batch_ids)  # the whole batch's, EOS included
            loss = train_step(network, optimizer, _parts(data, ids, ranks, tc.accumulate, device), config,
                              progress.step + 1, model_path, ranks, tokens)
            progress.step += 1
            progress.batch_in_epoch += 1
            progress.epoch_loss += loss
            progress.epoch_tokens += tokens
            segment_tokens += tokens
            bar.update()
            bar.set_postfix(loss=f"{progress.epoch_loss / progress.epoch_tokens:.3f}")
            if bar.disable and tc.log_every and progress.step % tc.log_every == 0:  # no terminal: log lines instead
                log(f"epoch {progress.epoch} step {progress.step} ({progress.batch_in_epoch}/{len(order)}) | "
                    f"train_loss {progress.epoch_loss / progress.epoch_tokens:.4f} | lr {progress.lr:.2e} | "
                    f"{(time.monotonic() - started) / 60:.1f} min")
            # Every rank's clock has a say, so that all stop at the same step.
            over_budget = float(bool(tc.max_minutes) and time.monotonic() - started > tc.max_minutes * 60)
            if ranks.sum([over_budget])[0]:
                stop = f"time budget of {tc.max_minutes} minutes used up"
                break
            if (ranks.is_main and tc.checkpoint_every and progress.step % tc.checkpoint_every == 0
                    and progress.batch_in_epoch < len(order)):
                progress.elapsed_s = time.monotonic() - started
                _save_checkpoint(checkpoint_path, translator, optimizer, progress, data, parts_per_batch)
        bar.close()
        progress.elapsed_s = time.monotonic() - started
        if metrics:  # rank 0
            tokens_per_s = segment_tokens / max(time.monotonic() - segment_started, 1e-9)
            record = _validate(translator, data, config, device, progress)
            progress.history.append(record)
            log(" | ".join(f"{k} {v}" for k, v in record.items()))
            # label_smoothing: what train_loss includes and valid_loss does not (curves.png says so).
            metrics.write({**record, "lr": progress.lr, "target_tokens_per_s": round(tokens_per_s, 1),
                           "elapsed_min": round(progress.elapsed_s / 60, 2), "label_smoothing": tc.label_smoothing})
            # Always: a budget that runs out in the first epoch must still keep its model.
            verdict = _after_validation(record, translator, progress, config, _training_facts(data, record), log)
            stop = stop or verdict
        # Rank 0's validation decides for all: the best figure so far, the learning rate, whether to stop.
        shared, stop = ranks.share((progress.__dict__, stop))
        progress.__dict__.update(shared)
        if progress.batch_in_epoch >= len(order):
            if ranks.is_main and tc.average_last > 1:
                _keep_epoch_model(translator, progress, out_dir, tc.average_last)
            progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
            progress.epoch_loss, progress.epoch_tokens = 0.0, 0
        if ranks.is_main:
            _save_checkpoint(checkpoint_path, translator, optimizer, progress, data, parts_per_batch)
        segment_started, segment_tokens = time.monotonic(), 0
    return stop


def _parts(data: TrainingData, ids: list[int], ranks: Ranks, accumulate: int, device: torch.device) -> list[Part]:
    """This rank's micro-batches of the batch `ids`. A rank left without sentences (a batch smaller
    than its number of parts) runs the batch's first sentence with weight 0: every rank must take
    part in the gradient exchange."""
    mine = ranks.parts(ids, accumulate)
    if not mine:
        return [Part(collate([data.corpus.example(ids[0])], ids[:1], device), index=-1, weight=0.0)]
    return [Part(collate([data.corpus.example(i) for i in part], part, device), index) for index, part in mine]


def epoch_batches(lengths: np.ndarray, tc: TrainConfig, epoch: int) -> list[np.ndarray]:
    """The batches of an epoch, in order, from the examples' [N, 2] (target, source) lengths; they
    depend only on the seed and the epoch number, so that a resumed run can skip ahead."""
    # Grouped by target length first: the decoder runs every padded target step (3 % padding on
    # Multi30k instead of 17 % when grouped by source length), while the encoder packs its input.
    return batch_indices(lengths, tc.batch_size, tc.batch_type, shuffle=True,
                         rng=random.Random(tc.seed * 1_000_003 + epoch))


def make_optimizer(model: Model, tc: TrainConfig) -> torch.optim.Optimizer:
    # The fused kernel updates each weight in one pass over memory (docs/speed.md).
    return torch.optim.Adam(model.parameters(), lr=tc.lr, fused=True)


def _set_lr(optimizer: torch.optim.Optimizer, progress: Progress, tc: TrainConfig) -> None:
    """The learning rate for the next step: warmup then inverse square root decay, or the plateau's."""
    if tc.scheduler == "warmup":
        step = progress.step + 1
        progress.lr = max(tc.lr * min(step / tc.warmup_steps, (tc.warmup_steps / step) ** 0.5), tc.min_lr)
    elif not progress.lr:
        progress.lr = tc.lr
    for group in optimizer.param_groups:
        group["lr"] = progress.lr


def _selection_metric(record: dict, tc: TrainConfig) -> float:
    """The validation figure that picks the best model (higher is better): -valid_loss or valid BLEU."""
    return -record["valid_loss"] if tc.select_by == "loss" else record.get("valid_bleu", 0.0)


def _training_facts(data: TrainingData, record: dict, **extra: int) -> dict:
    """What a model file says of its training (attnmt info): data digest, step, epoch, validation figures."""
    return {"data_sha256": data.corpus.fingerprint, "training_pairs": len(data.corpus), "epoch": record["epoch"],
            "step": record["step"], **extra, "validation": {k: v for k, v in record.items() if k.startswith("valid")}}


def _after_validation(record: dict, translator: Translator, progress: Progress, config: Config, training: dict,
                      log: Callable[[str], None]) -> str:
    """Keep the model if it is the best so far; adjust the plateau schedule; say why to stop, if so."""
    tc = config.train
    model_path = Path(tc.out_dir) / MODEL_FILE
    metric = _selection_metric(record, tc)
    if metric > progress.best_metric:
        progress.best_metric, progress.bad_validations = metric, 0
        translator.save(model_path, training)
    else:
        progress.bad_validations += 1
        if tc.scheduler == "plateau" and progress.bad_validations % tc.plateau_patience == 0:
            progress.lr = max(progress.lr * tc.plateau_factor, tc.min_lr)
            log(f"validation {tc.select_by} did not improve; learning rate now {progress.lr:.2e}")
    if tc.patience and progress.bad_validations >= tc.patience:
        return f"no better validation {tc.select_by} for {tc.patience} validations"
    if tc.target_exact_match and record.get("valid_exact", 0) >= tc.target_exact_match * 100:
        return f"valid exact match reached {tc.target_exact_match:.0%}"
    return ""


def _keep_epoch_model(translator: Translator, progress: Progress, out_dir: Path, keep: int) -> None:
    """Save this epoch's model and forget (delete) the ones too old to be averaged."""
    name = f"epoch{progress.epoch}.safetensors"
    translator.save(out_dir / name)
    progress.epoch_files = [f for f in progress.epoch_files if f != name] + [name]
    while len(progress.epoch_files) > keep:
        (out_dir / progress.epoch_files.pop(0)).unlink(missing_ok=True)


def average_weights(paths: list[Path], device: torch.device) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model files' weights (summed in float32, stored in each
    weight's own dtype)."""
    states = [Translator.load(path, device=str(device)).model.state_dict() for path in paths]
    return {k: (sum(state[k].float() for state in states) / len(states)).to(states[0][k].dtype) for k in states[0]}


def _try_average(translator: Translator, data: TrainingData, config: Config, device: torch.device,
                 progress: Progress, metrics: MetricsWriter, log: Callable[[str], None]) -> None:
    """Average the last epochs' weights; keep the average as the model if it validates better."""
    out_dir = Path(config.train.out_dir)
    model_path = out_dir / MODEL_FILE
    count = len(progress.epoch_files)
    translator.model.load_state_dict(average_weights([out_dir / name for name in progress.epoch_files], device))
    record = _validate(translator, data, config, device, progress)
    log(f"average of the last {count} epochs: " + " | ".join(f"{k} {v}" for k, v in record.items()
                                                              if k.startswith("valid")))
    # No training happened since the last epoch: its train_loss would read 0.
    metrics.write({**{k: v for k, v in record.items() if k != "train_loss"}, "average_of_last": count})
    metric = _selection_metric(record, config.train)
    if metric > progress.best_metric:
        progress.best_metric = metric
        translator.save(model_path, _training_facts(data, record, average_of_last=count))
        log(f"the average validates better than any single epoch; {model_path} is now the average")


@dataclass
class Part:
    """A micro-batch of one update: its sentences, its index among the update's parts (which seeds
    its random draws) and its weight in the loss (0 for a rank that only joins the exchange)."""

    batch: Batch
    index: int = 0
    weight: float = 1.0


def _draw_seed(seed: int, step: int, part: int) -> int:
    """The seed of one part's random draws (dropout, scheduled sampling): a function of the run's
    seed, the step and the part alone, so that the draws depend neither on which rank runs the part
    nor on where a run was stopped and resumed."""
    return random.Random(f"{seed}:{step}:{part}").getrandbits(63)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, parts: list[Part], config: Config,
               step: int, model_path: Optional[Path] = None, ranks: Optional[Ranks] = None,
               tokens: Optional[int] = None) -> float:
    """One update from this rank's parts of a batch; returns the whole batch's summed loss (over
    all ranks). The loss is divided by `tokens`, the whole batch's target tokens (default: those of
    `parts`), so that any cut of a batch into parts and ranks gives one gradient. Refuses to update
    from a NaN loss or go on out of memory."""
    tc = config.train
    ranks = ranks or Ranks()
    tokens = tokens or sum(part.batch.num_target_tokens for part in parts)
    # DDP averages the ranks' gradients; the whole batch's gradient is their sum.
    scale = ranks.world_size / tokens
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    try:
        for number, part in enumerate(parts, 1):
            torch.manual_seed(_draw_seed(tc.seed, step, part.index))
            batch, at = part.batch, part.batch.target_mask
            with ranks.exchanging(model, last=number == len(parts)):
                with autocast(tc.precision, batch.src.device):
                    logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in, tc.teacher_forcing, classify_at=at)
                loss = sequence_loss(logits.float(), batch.tgt_out[at], tc.label_smoothing) * part.weight
                (loss * scale).backward()
            total += loss.item()
    except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError too
        if "out of memory" not in str(err) and "can't allocate memory" not in str(err):
            raise
        shape = "x".join(map(str, parts[0].batch.tgt_in.shape))
        raise AttnmtError(f"out of memory at step {step} (target batch {shape}); lower train.batch_size or "
                          f"data.max_len, or raise train.accumulate, then continue with --resume from the last "
                          f"checkpoint") from None
    total = ranks.sum([total])[0]
    if not math.isfinite(total):
        kept = f", and {model_path} keeps the last good model" if model_path else ""
        raise AttnmtError(f"loss became {total} at step {step}; training stopped before the update{kept}. "
                          f"Try a lower train.lr or train.clip")
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
    optimizer.step()
    return total


def _validate(translator: Translator, data: TrainingData, config: Config, device: torch.device,
              progress: Progress) -> dict:
    valid_loss = evaluate_loss(translator.model, data.valid, config.train.batch_size, device)
    train_loss = progress.epoch_loss / max(progress.epoch_tokens, 1)
    record = {"epoch": progress.epoch, "step": progress.step, "train_loss": round(train_loss, 4),
              "valid_loss": round(valid_loss, 4),
              "valid_ppl": round(math.exp(min(valid_loss, 50)), 2)}
    pairs = data.corpus.valid_pairs
    if pairs:
        translator.weights_changed()  # the fused Adam step leaves no trace in the weights' version counters
        scores = score_translations(translator, pairs)
        record.update(valid_exact=scores["exact"], valid_bleu=scores["bleu"])
    translator.model.train()
    return record
