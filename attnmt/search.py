"""Decoding: from source ids to output ids, with the attention weights of every step."""

from __future__ import annotations

from typing import Optional

import torch

from .model import Seq2Seq
from .vocab import EOS_ID, PAD_ID, SOS_ID


@torch.inference_mode()
def greedy(model: Seq2Seq, src: torch.Tensor, src_lengths: torch.Tensor, max_lengths: torch.Tensor
           ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Most likely token at each step, until EOS or the sentence's own `max_lengths` [B].

    Returns ids [B, T] (EOS included where produced, PAD after it) and weights [B, T, S]
    (None for attention `none`).
    """
    memory, state = model.encode(src, src_lengths)
    batch = src.shape[0]
    max_lengths = max_lengths.to(src.device).clamp(min=1)
    tokens = torch.full((batch, 1), SOS_ID, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    outputs, all_weights = [], []
    for t in range(int(max_lengths.max())):
        logits, state, weights = model.decoder.step(tokens, state, memory)
        next_tokens = logits[:, -1].argmax(-1)                              # [B]
        # A sentence at its length limit ends here, as if it had produced EOS.
        next_tokens = torch.where(max_lengths <= t + 1, torch.full_like(next_tokens, EOS_ID), next_tokens)
        next_tokens = next_tokens.masked_fill(finished, PAD_ID)
        outputs.append(next_tokens)
        all_weights.append(weights)
        finished |= next_tokens == EOS_ID
        if finished.all():
            break
        tokens = next_tokens.unsqueeze(1)
    ids = torch.stack(outputs, dim=1)                                       # [B, T]
    weights = None if all_weights[0] is None else torch.cat(all_weights, dim=1)  # [B, T, S]
    return ids, weights
