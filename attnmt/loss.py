"""Cross-entropy over the real target tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .vocab import PAD_ID


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Summed cross-entropy of logits [..., V] against targets [...]; pads count for nothing."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=PAD_ID, reduction="sum", label_smoothing=label_smoothing)
