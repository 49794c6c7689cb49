"""What training reads of a prepared corpus: each epoch's batches in their seeded order, each batch
as this rank's micro-batches (`Part`s), and the validation pairs as ids."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from .batch import Batch, batch_indices, collate
from .config import TrainConfig
from .distributed import Ranks
from .errors import AttnmtError
from .store import PreparedCorpus
from .vocab import Example


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

    @classmethod
    def of(cls, corpus: PreparedCorpus, max_len: int) -> "TrainingData":
        valid = corpus.tokenization.examples(corpus.valid_pairs, max_len)
        if not valid:
            raise AttnmtError(f"no usable validation pairs: each of the {len(corpus.valid_pairs)} has an empty side or "
                              f"exceeds data.max_len={max_len}")
        return cls(corpus, valid)

    def parts(self, ids: list[int], ranks: Ranks, accumulate: int, device: torch.device) -> list[Part]:
        """This rank's micro-batches of the batch `ids`. A rank left without sentences (a batch smaller
        than its number of parts) runs the batch's first sentence with weight 0: every rank must take
        part in the gradient exchange."""
        mine = ranks.parts(ids, accumulate)
        if not mine:
            return [Part(collate([self.corpus.example(ids[0])], ids[:1], device), index=-1, weight=0.0)]
        return [Part(collate([self.corpus.example(i) for i in part], part, device), index) for index, part in mine]
