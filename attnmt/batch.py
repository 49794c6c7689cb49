"""Sentence pairs as id tensors, grouped by length into padded batches."""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from .vocab import EOS_ID, PAD_ID, SOS_ID, Example, Tokenization


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


@dataclass(frozen=True)
class Framing:
    """What a pair's ids are framed with for the network: the target between the target vocabulary's
    start and end tokens, the source followed by its end token where the model reads one
    (model.source_eos; None: the source as it is)."""

    sos: int = SOS_ID
    eos: int = EOS_ID
    source_eos: Optional[int] = None

    @classmethod
    def of(cls, tokenization: Tokenization, source_eos: bool) -> "Framing":
        """The framing of a model with this tokenization (source_eos: model.source_eos)."""
        end = tokenization.src_vocab.eos_id if source_eos else None
        return cls(tokenization.tgt_vocab.sos_id, tokenization.tgt_vocab.eos_id, end)


def collate(examples: list[Example], indices: list[int], device: torch.device | str = "cpu",
            framing: Framing = Framing()) -> Batch:
    end = [] if framing.source_eos is None else [framing.source_eos]
    src = [e[0] + end for e in examples]
    tgt = [e[1] for e in examples]
    return Batch(
        src=pad(src).to(device),
        src_lengths=torch.tensor([len(s) for s in src], dtype=torch.long),
        tgt_in=pad([[framing.sos] + t for t in tgt]).to(device),
        tgt_out=pad([t + [framing.eos] for t in tgt]).to(device),
        indices=indices,
    )


def batch_indices(
    lengths: np.ndarray,
    batch_size: int,
    batch_type: str = "sentences",
    shuffle: bool = False,
    rng: Optional[random.Random] = None,
) -> list[np.ndarray]:
    """Group example indices into batches of similar length; each batch is an integer array.

    `lengths` is an [N, 2] integer array of two lengths per example (sorted by the first, then the
    second). `batch_type` "tokens" caps the padded size (the longest length + 1, times the
    sentences) at `batch_size`. With `shuffle`, examples are shuffled, sorted by length within
    pools of 50 batches (few pads, yet no fixed order), and the batches shuffled. Memory is a few
    bytes per example, with no Python object per example: corpora of millions of pairs batch as
    Multi30k does, and `rng` draws exactly what shuffling Python lists of the same length would.
    """
    count = len(lengths)
    rng = rng or random.Random()
    # 4 bytes an example (8 past 2^31 examples): the order is the one array as long as the corpus.
    order_buffer = array("i" if count < 2**31 else "q", range(count))
    if shuffle:
        rng.shuffle(order_buffer)  # an array shuffles as a list of the same length does
        pool = 50 * (batch_size if batch_type == "sentences" else max(1, batch_size // 20))
    else:
        pool = count or 1
    order = np.frombuffer(order_buffer, dtype=f"i{order_buffer.itemsize}") if count else np.zeros(0, dtype=np.int64)
    batches: list[np.ndarray] = []
    for start in range(0, count, pool):
        chunk = order[start : start + pool]
        keys = lengths[chunk]
        by_length = np.lexsort((keys[:, 1], keys[:, 0]))  # stable: ties keep the shuffled order
        chunk, widths = chunk[by_length], keys[by_length].max(axis=1) + 1
        batches.extend(np.split(chunk, _cut(widths.tolist(), batch_size, batch_type)[:-1]))
    if shuffle:
        rng.shuffle(batches)
    return batches


def _cut(widths: list[int], size: int, batch_type: str) -> list[int]:
    """Where the batches of examples in this order end: at `size` sentences, or before the padded
    size (the widest example x sentences) would pass `size` tokens; a batch holds one example at least."""
    if batch_type == "sentences":
        return list(range(size, len(widths), size)) + [len(widths)]
    ends = []
    sentences = widest = 0
    for index, width in enumerate(widths):
        widest_if_added = max(widest, width)
        if sentences and widest_if_added * (sentences + 1) > size:
            ends.append(index)
            sentences, widest_if_added = 0, width
        sentences += 1
        widest = widest_if_added
    return ends + [len(widths)]
