"""Training: data to batches, teacher-forced steps with Adam, validation, the best model kept."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from tqdm import tqdm

from .batch import Example, batch_indices, collate
from .config import Config
from .data import Pair, load_corpus
from .errors import AttnmtError
from .evaluate import score_translations
from .loss import sequence_loss
from .model import Seq2Seq, resolve_device
from .modelfile import load_file, save_file
from .tokenize import Tokenizer, make_tokenizer
from .translate import WEIGHTS_PREFIX, Translator
from .vocab import Vocabulary

MODEL_FILE = "model.safetensors"
CHECKPOINT_FILE = "checkpoint.safetensors"
OPTIMIZER_PREFIX = "optimizer."


@dataclass
class PreparedData:
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary
    train: list[Example]
    valid: list[Example]
    valid_pairs: list[Pair]
    test_pairs: list[Pair]
    dropped: int  # training pairs left out: an empty side, or longer than data.max_len


def prepare_data(config: Config) -> PreparedData:
    corpus = load_corpus(config.data)
    tok = config.tokenizer
    src_tokenizer = make_tokenizer(tok.level, tok.lowercase)
    tgt_tokenizer = make_tokenizer(tok.level, tok.lowercase)

    def tokenized(pairs: list[Pair]) -> list[tuple[list[str], list[str]]]:
        limit = config.data.max_len
        out = [(src_tokenizer.tokenize(s), tgt_tokenizer.tokenize(t)) for s, t in pairs]
        return [(s, t) for s, t in out if 0 < len(s) <= limit and 0 < len(t) <= limit]

    train = tokenized(corpus.train)
    if not train:
        raise AttnmtError("no usable training pairs: every pair has an empty side or exceeds data.max_len")
    valid = tokenized(corpus.valid)
    voc = config.vocab
    src_vocab = Vocabulary.build((s for s, _ in train), voc.min_freq, voc.max_size)
    tgt_vocab = Vocabulary.build((t for _, t in train), voc.min_freq, voc.max_size)

    def encoded(pairs: list[tuple[list[str], list[str]]]) -> list[Example]:
        return [(src_vocab.encode(s), tgt_vocab.encode(t)) for s, t in pairs]

    return PreparedData(src_tokenizer, tgt_tokenizer, src_vocab, tgt_vocab, encoded(train), encoded(valid),
                        corpus.valid, corpus.test, len(corpus.train) - len(train))


@dataclass
class Progress:
    """The counters a checkpoint carries, so that a resumed run continues where it stopped."""

    epoch: int = 1
    batch_in_epoch: int = 0  # batches of `epoch` already done
    step: int = 0
    best_valid_loss: float = math.inf
    elapsed_s: float = 0.0
    history: list[dict] = field(default_factory=list)


@dataclass
class TrainResult:
    model_path: Path
    best_valid_loss: float
    test_scores: dict
    epochs: int
    minutes: float


def evaluate_loss(model: Seq2Seq, examples: list[Example], batch_size: int, device: torch.device) -> float:
    """Mean cross-entropy per target token, teacher-forced, no dropout."""
    model.eval()
    total, tokens = 0.0, 0
    with torch.inference_mode():
        for ids in batch_indices([(len(s), len(t)) for s, t in examples], batch_size):
            batch = collate([examples[i] for i in ids], ids, device)
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in)
            total += sequence_loss(logits, batch.tgt_out).item()
            tokens += batch.num_target_tokens
    model.train()
    return total / max(tokens, 1)


def _save_checkpoint(path: Path, translator: Translator, optimizer: torch.optim.Optimizer, progress: Progress) -> None:
    optim_state = optimizer.state_dict()
    tensors = translator.weights()
    for index, values in optim_state["state"].items():
        for key, value in values.items():
            tensors[f"{OPTIMIZER_PREFIX}{index}.{key}"] = value
    tensors["rng.torch"] = torch.get_rng_state()
    meta = {"kind": "checkpoint", **translator.metadata(), "param_groups": optim_state["param_groups"],
            "progress": progress.__dict__}
    save_file(path, tensors, meta)


def _load_checkpoint(path: Path, model: Seq2Seq, optimizer: torch.optim.Optimizer, data: PreparedData) -> Progress:
    tensors, meta = load_file(path)
    if meta.get("kind") != "checkpoint":
        raise AttnmtError(f"{path}: not a training checkpoint")
    if meta["src_vocab"] != data.src_vocab.to_list() or meta["tgt_vocab"] != data.tgt_vocab.to_list():
        raise AttnmtError(f"{path}: checkpoint was trained on other data or vocabulary settings; cannot resume")
    model.load_state_dict({k[len(WEIGHTS_PREFIX):]: v for k, v in tensors.items() if k.startswith(WEIGHTS_PREFIX)})
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        if name.startswith(OPTIMIZER_PREFIX):
            index, key = name[len(OPTIMIZER_PREFIX):].split(".", 1)
            state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    torch.set_rng_state(tensors["rng.torch"])
    return Progress(**meta["progress"])


def train(config: Config, resume: bool = False, overwrite: bool = False,
          log: Callable[[str], None] = print) -> TrainResult:
    """Train the model the config describes; the best model by validation loss goes to out_dir."""
    tc = config.train
    out_dir = Path(tc.out_dir)
    model_path, checkpoint_path = out_dir / MODEL_FILE, out_dir / CHECKPOINT_FILE
    if resume and not checkpoint_path.exists():
        raise AttnmtError(f"{checkpoint_path}: no checkpoint to resume from")
    if not resume and not overwrite and (model_path.exists() or checkpoint_path.exists()):
        raise AttnmtError(f"{out_dir} already holds a model; use --resume to continue it, --overwrite to replace it, "
                          f"or another train.out_dir")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnmtError(f"{out_dir}: cannot create output directory: {err.strerror or err}") from None

    torch.manual_seed(tc.seed)
    device = resolve_device(tc.device)
    data = prepare_data(config)
    log(f"data: {len(data.train)} training pairs ({data.dropped} left out: empty or over {config.data.max_len} "
        f"tokens), {len(data.valid)} valid, {len(data.test_pairs)} test; vocab {len(data.src_vocab)} source, "
        f"{len(data.tgt_vocab)} target")
    model = Seq2Seq(config.model, len(data.src_vocab), len(data.tgt_vocab)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=tc.lr)
    translator = Translator(model, config, data.src_tokenizer, data.tgt_tokenizer, data.src_vocab, data.tgt_vocab)
    progress = _load_checkpoint(checkpoint_path, model, optimizer, data) if resume else Progress()
    log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters on {device}"
        + (f"; resuming at epoch {progress.epoch}, step {progress.step}" if resume else ""))

    lengths = [(len(s), len(t)) for s, t in data.train]
    started = time.monotonic() - progress.elapsed_s
    out_of_time = False
    while progress.epoch <= tc.epochs and not out_of_time:
        # The order of an epoch depends only on the seed and the epoch number, so resume can skip ahead.
        order = batch_indices(lengths, tc.batch_size, tc.batch_type, shuffle=True,
                              rng=random.Random(tc.seed * 1_000_003 + progress.epoch))
        model.train()
        bar = tqdm(total=len(order), initial=progress.batch_in_epoch, desc=f"epoch {progress.epoch}",
                   unit="batch", disable=None, leave=False)
        loss_sum, token_sum = 0.0, 0
        for ids in order[progress.batch_in_epoch:]:
            batch = collate([data.train[i] for i in ids], ids, device)
            logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in, tc.teacher_forcing)
            loss = sequence_loss(logits, batch.tgt_out, tc.label_smoothing)
            tokens = batch.num_target_tokens
            if not torch.isfinite(loss):
                raise AttnmtError(f"loss became {loss.item()} at step {progress.step + 1}; training stopped, "
                                  f"{model_path} keeps the last good model. Try a lower train.lr or train.clip")
            optimizer.zero_grad(set_to_none=True)
            (loss / tokens).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            optimizer.step()
            progress.step += 1
            progress.batch_in_epoch += 1
            loss_sum += loss.item()
            token_sum += tokens
            bar.update()
            bar.set_postfix(loss=f"{loss_sum / token_sum:.3f}")
            if tc.max_minutes and time.monotonic() - started > tc.max_minutes * 60:
                out_of_time = True
                break
        bar.close()
        progress.elapsed_s = time.monotonic() - started
        record = _validate(translator, data, config, device, progress.epoch, loss_sum / max(token_sum, 1))
        progress.history.append(record)
        log(" | ".join(f"{k} {v}" for k, v in record.items()))
        if record["valid_loss"] < progress.best_valid_loss:
            progress.best_valid_loss = record["valid_loss"]
            translator.save(model_path)
        reached = tc.target_exact_match and record.get("valid_exact", 0) >= tc.target_exact_match * 100
        if progress.batch_in_epoch >= len(order):
            progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
        _save_checkpoint(checkpoint_path, translator, optimizer, progress)
        if reached:
            log(f"valid exact match reached {tc.target_exact_match:.0%}; stopping")
            break
    if out_of_time:
        log(f"time budget of {tc.max_minutes} minutes used up; stopping")

    best = Translator.load(model_path, device=str(device))
    test_scores = score_translations(best, data.test_pairs) if data.test_pairs else {}
    if test_scores:
        log("test: " + " | ".join(f"{k} {v}" for k, v in test_scores.items() if "signature" not in k))
    return TrainResult(model_path, progress.best_valid_loss, test_scores, len(progress.history),
                       (time.monotonic() - started) / 60)


def _validate(translator: Translator, data: PreparedData, config: Config, device: torch.device,
              epoch: int, train_loss: float) -> dict:
    valid_loss = evaluate_loss(translator.model, data.valid, config.train.batch_size, device)
    record = {"epoch": epoch, "train_loss": round(train_loss, 4), "valid_loss": round(valid_loss, 4),
              "valid_ppl": round(math.exp(min(valid_loss, 50)), 2)}
    pairs = data.valid_pairs
    if pairs:
        scores = score_translations(translator, pairs)
        record.update(valid_exact=scores["exact"], valid_bleu=scores["bleu"])
    translator.model.train()
    return record
