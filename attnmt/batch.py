"""Sentence pairs as id tensors, grouped by length into padded batches."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from .vocab import EOS_ID, PAD_ID, SOS_ID

Example = tuple[list[int], list[int]]  # (source ids, target ids), no specials


@dataclass
class Batch:
    src: torch.Tensor          # [B, S] source ids, padded with PAD_ID
    src_lengths: torch.Tensor  # [B] on the CPU (pack_padded_sequence wants it there)
    tgt_in: torch.Tensor       # [B, T] <sos> y1 .. yn, padded
    tgt_out: torch.Tensor      # [B, T] y1 .. yn <eos>, padded
    indices: list[int]         # positions of these examples in the list they came from

    @property
    def target_mask(self) -> torch.Tensor:
        """[B, T] True at the real target tokens, EOS included: where the loss reads the logits."""
        return self.tgt_out != PAD_ID

    @property
    def num_target_tokens(self) -> int:
        """Real target tokens including EOS, the count the loss is averaged over."""
        return int(self.target_mask.sum())


def pad(sequences: list[list[int]], value: int = PAD_ID) -> torch.Tensor:
    width = max((len(s) for s in sequences), default=0)
    return torch.tensor([s + [value] * (width - len(s)) for s in sequences], dtype=torch.long)


def collate(examples: list[Example], indices: list[int], device: torch.device | str = "cpu") -> Batch:
    src = [e[0] for e in examples]
    tgt = [e[1] for e in examples]
    return Batch(
        src=pad(src).to(device),
        src_lengths=torch.tensor([len(s) for s in src], dtype=torch.long),
        tgt_in=pad([[SOS_ID] + t for t in tgt]).to(device),
        tgt_out=pad([t + [EOS_ID] for t in tgt]).to(device),
        indices=indices,
    )


def batch_indices(
    lengths: list[tuple[int, int]],
    batch_size: int,
    batch_type: str = "sentences",
    shuffle: bool = False,
    rng: Optional[random.Random] = None,
) -> list[list[int]]:
    """Group example indices into batches of similar length.

    `lengths` holds (source, target) lengths. `batch_type` "tokens" caps the padded size
    (longest side x sentences) at `batch_size`. With `shuffle`, examples are shuffled, sorted
    by length within pools of 50 batches (few pads, yet no fixed order), and the batches shuffled.
    """
    order = list(range(len(lengths)))
    rng = rng or random.Random()
    if shuffle:
        rng.shuffle(order)
        pool = 50 * (batch_size if batch_type == "sentences" else max(1, batch_size // 20))
    else:
        pool = len(order) or 1
    batches: list[list[int]] = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
        batches.extend(_cut(chunk, lengths, batch_size, batch_type))
    if shuffle:
        rng.shuffle(batches)
    return batches


def _cut(sorted_ids: list[int], lengths: list[tuple[int, int]], size: int, batch_type: str) -> Iterator[list[int]]:
    current: list[int] = []
    longest = 0
    for i in sorted_ids:
        longest_if_added = max(longest, max(lengths[i]) + 1)
        too_big = (
            len(current) >= size if batch_type == "sentences" else longest_if_added * (len(current) + 1) > size
        )
        if current and too_big:
            yield current
            current, longest_if_added = [], max(lengths[i]) + 1
        current.append(i)
        longest = longest_if_added
    if current:
        yield current
