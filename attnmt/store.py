"""A prepared corpus on disk: token ids in flat memory-mapped arrays, written once by prepare.py and
opened by every training run, rank and resume.

A folder holds, beside `meta.json` (how it was made; written last, so a folder without it is not
a store):
    src.ids, tgt.ids          every kept pair's token ids, one side each, concatenated (uint16, or
                              uint32 for vocabularies over 65,536)
    src.offsets, tgt.offsets  int64 [rows + 1]: row r's ids are ids[offsets[r]:offsets[r + 1]]
    order                     int64 [examples]: the rows in training order (example i is row order[i])
    lengths                   int32 [examples, 2]: each example's (target, source) length, for batching
    heldout.json              the validation and test pairs as text
Plain arrays in raw files rather than Arrow or a database: numpy (already needed) maps them
without copying, so memory does not grow with the corpus, and torchrun's ranks share the
operating system's pages of the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .data import Pair
from .errors import AttnmtError
from .vocab import Example, Tokenization

# Bumped when the layout changes; a store of another format is prepared again, never read.
STORE_FORMAT = 1
META_FILE = "meta.json"
HELDOUT_FILE = "heldout.json"


def id_dtype(vocabulary_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every id of a vocabulary."""
    return np.dtype(np.uint16 if vocabulary_size <= 1 << 16 else np.uint32)


class PreparedCorpus:
    """A prepared corpus, opened read-only: the training examples as ids, the held-out pairs as
    text, the tokenization and the report of how it was made."""

    def __init__(self, directory: Path, meta: dict) -> None:
        self.directory, self.meta = directory, meta
        self.tokenization = Tokenization.from_dict(meta["tokenization"])
        self.fingerprint: str = meta["fingerprint"]
        self.report: dict = meta["report"]
        dtype = np.dtype(meta["id_dtype"])
        examples, rows = meta["examples"], meta["rows"]
        self._ids = {side: self._map(f"{side}.ids", dtype, (meta["tokens"][side],)) for side in ("src", "tgt")}
        self._offsets = {side: self._map(f"{side}.offsets", np.dtype(np.int64), (rows + 1,)) for side in ("src", "tgt")}
        self._order = self._map("order", np.dtype(np.int64), (examples,))
        self.lengths = self._map("lengths", np.dtype(np.int32), (examples, 2))  # (target, source) per example
        heldout = json.loads((directory / HELDOUT_FILE).read_text(encoding="utf-8"))
        self.valid_pairs: list[Pair] = [(s, t) for s, t in heldout["valid"]]
        self.test_pairs: list[Pair] = [(s, t) for s, t in heldout["test"]]

    @classmethod
    def open(cls, directory: Path) -> "PreparedCorpus":
        """The store in `directory`; one line if it is incomplete or of another format."""
        try:
            meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise AttnmtError(f"{directory}: not a complete prepared corpus ({err})") from None
        if meta.get("format") != STORE_FORMAT:
            raise AttnmtError(f"{directory}: prepared corpus of format {meta.get('format')}, this attnmt reads "
                              f"format {STORE_FORMAT}; prepare it again")
        return cls(directory, meta)

    def _map(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        path = self.directory / name
        if path.stat().st_size != dtype.itemsize * int(np.prod(shape)):
            raise AttnmtError(f"{path}: {path.stat().st_size} bytes, expected {shape} x {dtype}: the prepared "
                              f"corpus is damaged; delete {self.directory} and prepare it again")
        if not shape[0]:
            return np.zeros(shape, dtype)  # numpy cannot map an empty file
        return np.memmap(path, dtype=dtype, mode="r", shape=shape)

    def __len__(self) -> int:
        return len(self._order)

    def example(self, index: int) -> Example:
        """The source and target ids of training example `index`."""
        row = int(self._order[index])
        src, tgt = self._offsets["src"], self._offsets["tgt"]
        return (self._ids["src"][src[row]:src[row + 1]].tolist(), self._ids["tgt"][tgt[row]:tgt[row + 1]].tolist())

    def target_tokens(self, indices: np.ndarray) -> int:
        """The target tokens of these examples, EOS included: what a batch's loss is divided by."""
        return int(self.lengths[indices, 0].sum()) + len(indices)
