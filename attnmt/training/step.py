"""One update of the weights: the optimizer, the loss of a batch's parts and their gradients,
clipped and applied. Under torchrun, distributed.py runs the same pieces with the ranks'
exchanges between them."""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..batch import Framing, batch_indices, collate
from ..config import TrainConfig
from ..errors import AttnmtError
from ..seam import Model
from ..vocab import PAD_ID, Example
from .data import Part


def make_optimizer(model: Model, tc: TrainConfig, state: Optional[dict] = None) -> torch.optim.Optimizer:
    """Adam over the model's weights; `state`: a checkpoint's optimizer state dict, whose moments it
    continues with this config's beta2 (the scheduler sets the rate at each update)."""
    # The fused kernel updates each weight in one pass over memory (docs/speed.md).
    betas = (0.9, tc.adam_beta2)
    optimizer = torch.optim.Adam(model.parameters(), lr=tc.lr, betas=betas, fused=True)
    if state is not None:
        optimizer.load_state_dict(state)
        for group in optimizer.param_groups:
            group["betas"] = betas
    return optimizer


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Summed cross-entropy of logits [..., V] against targets [...]; pads count for nothing."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=PAD_ID, reduction="sum", label_smoothing=label_smoothing)


class TeacherForced(nn.Module):
    """A model as training calls it (and DDP wraps it): its teacher-forced features, and the output
    layer at the positions a loss reads only. The output layer is the largest, and a batch's targets
    are padded: it skips the pads."""

    def __init__(self, model: Model):
        super().__init__()
        assert isinstance(model, nn.Module), "every family's network is an nn.Module"
        self.model = model

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, tgt_in: torch.Tensor, at: torch.Tensor
                ) -> torch.Tensor:
        """Logits [N, V] at the N positions where at [B, T] is True."""
        features, _ = self.model.features(src, src_lengths, tgt_in)           # [B, T, O]
        return self.model.output_layer(features[at])


def _draw_seed(seed: int, step: int, part: int) -> int:
    """The seed of one part's random draws (dropout, scheduled sampling): a function of the run's
    seed, the step and the part alone, so that the draws depend neither on which rank runs the part
    nor on where a run was stopped and resumed."""
    return random.Random(f"{seed}:{step}:{part}").getrandbits(63)


def part_loss(network: nn.Module, part: Part, tc: TrainConfig, precision: str) -> torch.Tensor:
    """The summed loss of one part of a batch, times its weight, computed in `precision` (fp32 or bf16);
    `network`: a TeacherForced model, or DDP around one."""
    batch, at = part.batch, part.batch.target_mask
    with torch.autocast(batch.src.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        logits = network(batch.src, batch.src_lengths, batch.tgt_in, at)
    return sequence_loss(logits.float(), batch.tgt_out[at], tc.label_smoothing) * part.weight


def backward(network: nn.Module, part: Part, tc: TrainConfig, step: int, scale: float) -> float:
    """One part's loss, its gradient (times `scale`) added to the weights'; returns the loss."""
    torch.manual_seed(_draw_seed(tc.seed, step, part.index))
    loss = part_loss(network, part, tc, tc.precision)
    (loss * scale).backward()
    return loss.item()


@contextlib.contextmanager
def refusing_out_of_memory(step: int, parts: list[Part]) -> Iterator[None]:
    """Around a step's forward and backward passes: running out of memory is one line saying what to change."""
    try:
        yield
    except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError too
        if "out of memory" not in str(err) and "can't allocate memory" not in str(err):
            raise
        shape = "x".join(map(str, parts[0].batch.tgt_in.shape))
        raise AttnmtError(f"out of memory at step {step} (target batch {shape}); lower train.batch_size or "
                          f"data.max_len, or raise train.accumulate, then continue with --resume from the last "
                          f"checkpoint") from None


def apply_update(network: nn.Module, optimizer: torch.optim.Optimizer, total: float, tc: TrainConfig, step: int,
                 model_path: Optional[Path] = None) -> float:
    """Clip the gradients and update the weights, refusing a NaN loss `total`; returns it."""
    if not math.isfinite(total):
        kept = f", and {model_path} keeps the last good model" if model_path else ""
        raise AttnmtError(f"loss became {total} at step {step}; training stopped before the update{kept}. "
                          f"Try a lower train.lr or train.clip")
    torch.nn.utils.clip_grad_norm_(network.parameters(), tc.clip)
    optimizer.step()
    return total


def train_step(network: nn.Module, optimizer: torch.optim.Optimizer, parts: list[Part], tc: TrainConfig,
               step: int, tokens: int, model_path: Optional[Path] = None) -> float:
    """One update from the parts of a batch in one process; returns the batch's summed loss. The loss is
    divided by `tokens`, the batch's target tokens, so that any cut of a batch into parts gives one
    gradient. tc.precision is fp32 or bf16 (train() resolves auto)."""
    optimizer.zero_grad(set_to_none=True)
    with refusing_out_of_memory(step, parts):
        total = sum(backward(network, part, tc, step, 1 / tokens) for part in parts)
    return apply_update(network, optimizer, total, tc, step, model_path)


def evaluate_loss(model: Model, examples: list[Example], batch_size: int, device: torch.device,
                  framing: Framing = Framing()) -> float:
    """Mean cross-entropy per target token, teacher-forced, no dropout."""
    forced = TeacherForced(model).eval()
    total, tokens = 0.0, 0
    lengths = np.array([(len(s), len(t)) for s, t in examples], dtype=np.int64).reshape(-1, 2)
    with torch.inference_mode():
        for batch_ids in batch_indices(lengths, batch_size):
            ids = batch_ids.tolist()
            batch = collate([examples[i] for i in ids], ids, device, framing)
            at = batch.target_mask
            logits = forced(batch.src, batch.src_lengths, batch.tgt_in, at)
            total += sequence_loss(logits, batch.tgt_out[at]).item()
            tokens += batch.num_target_tokens
    forced.train()
    return total / max(tokens, 1)
