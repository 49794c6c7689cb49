"""What training reads of a prepared corpus: each epoch's batches in their seeded order, each batch
as micro-batches (`Part`s), and the validation pairs as ids."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from ..batch import Batch, Framing, batch_indices, collate
from ..config import TrainConfig
from ..corpus.store import PreparedCorpus
from ..errors import AttnmtError
from ..vocab import Example


def split(ids: list[int], parts: int) -> list[list[int]]:
    """A batch's sentences dealt into `parts` parts, round robin: a batch is sorted by length, so each
    part gets short and long sentences alike (ranks finish their share together)."""
    return [ids[j::parts] for j in range(parts)]


@dataclass
class Part:
    """A micro-batch of one update: its sentences, its index among the update's parts (which seeds
    its random draws) and its weight in the loss (0 for a rank that only joins the exchange)."""

    batch: Batch
    index: int = 0
    weight: float = 1.0


def epoch_batches(lengths: np.ndarray, tc: TrainConfig, epoch: int) -> list[np.ndarray]:
    """The batches of an epoch, in order, from the examples' [N, 2] (target, source) lengths; they
    depend only on the seed and the epoch number, so that a resumed run can skip ahead."""
    # Grouped by target length first: the decoder runs every padded target step (3 % padding on
    # Multi30k instead of 17 % when grouped by source length), while the encoder packs its input.
    return batch_indices(lengths, tc.batch_size, tc.batch_type, shuffle=True,
                         rng=random.Random(tc.seed * 1_000_003 + epoch))


@dataclass
class TrainingData:
    """What training reads: the prepared corpus (memory-mapped) and the validation pairs as ids."""

    corpus: PreparedCorpus
    valid: list[Example]
    framing: Framing     # what the model's batches frame each pair with

    @classmethod
    def of(cls, corpus: PreparedCorpus, max_len: int, source_eos: bool = False) -> "TrainingData":
        """The corpus's training and validation pairs, framed for a model that reads a source end
        token or not (model.source_eos)."""
        valid = corpus.tokenization.examples(corpus.valid_pairs, max_len)
        if not valid:
            raise AttnmtError(f"no usable validation pairs: each of the {len(corpus.valid_pairs)} has an empty side or "
                              f"exceeds data.max_len={max_len}")
        return cls(corpus, valid, Framing.of(corpus.tokenization, source_eos))

    def part(self, ids: list[int], device: torch.device, index: int = 0, weight: float = 1.0) -> Part:
        """The sentences `ids` as a micro-batch on `device`."""
        return Part(collate([self.corpus.example(i) for i in ids], ids, device, self.framing), index, weight)

    def parts(self, ids: list[int], accumulate: int, device: torch.device) -> list[Part]:
        """The batch `ids` as train.accumulate micro-batches (fewer where it has fewer sentences)."""
        return [self.part(part, device, index) for index, part in enumerate(split(ids, accumulate)) if part]
