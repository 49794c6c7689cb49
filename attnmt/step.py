"""One update of the weights: the optimizer, and a batch's parts forward and backward on this rank,
the gradients exchanged between the ranks, clipped and applied."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Optional

import torch

from .config import Config, TrainConfig
from .distributed import Ranks
from .errors import AttnmtError
from .families.seam import Model
from .loss import sequence_loss
from .precision import autocast
from .training_data import Part


def make_optimizer(model: Model, tc: TrainConfig) -> torch.optim.Optimizer:
    # The fused kernel updates each weight in one pass over memory (docs/speed.md).
    return torch.optim.Adam(model.parameters(), lr=tc.lr, fused=True)


def _draw_seed(seed: int, step: int, part: int) -> int:
    """The seed of one part's random draws (dropout, scheduled sampling): a function of the run's
    seed, the step and the part alone, so that the draws depend neither on which rank runs the part
    nor on where a run was stopped and resumed."""
    return random.Random(f"{seed}:{step}:{part}").getrandbits(63)


def part_loss(model: torch.nn.Module, part: Part, tc: TrainConfig, precision: Optional[str] = None) -> torch.Tensor:
    """The summed loss of one part of a batch, times its weight, computed in `precision` (default: train.precision)."""
    batch, at = part.batch, part.batch.target_mask
    with autocast(precision or tc.precision, batch.src.device):
        logits, _ = model(batch.src, batch.src_lengths, batch.tgt_in, tc.teacher_forcing, classify_at=at)
    return sequence_loss(logits.float(), batch.tgt_out[at], tc.label_smoothing) * part.weight


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
            with ranks.exchanging(model, last=number == len(parts)):
                loss = part_loss(model, part, tc)
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
