"""A prepared corpus on disk, both sides of its format: StoreWriter, through which prepare.py writes
it once, and PreparedCorpus, which every training run, rank and resume opens.

A folder holds, beside `meta.json` (how it was made; written last, so a folder without it is not
a store):
    src.ids, tgt.ids          every kept pair's token ids, one side each, concatenated (uint16, or
                              uint32 for vocabularies over 65,536)
    src.offsets, tgt.offsets  int64 [rows + 1]: row r's ids are ids[offsets[r]:offsets[r + 1]]
    order                     int64 [examples]: the rows in training order (example i is row order[i])
    lengths                   int32 [examples, 2]: each example's (target, source) length, for batching
    heldout.json              the validation and test pairs as text
While it is written it also holds what the pairs stream in as, in the order they are read: each
side's ids as numbered while preparing (src.raw, tgt.raw: uint32) and lengths (src.len, tgt.len:
int32), and each pair's position in training order (positions: int64); none of them is left in a store.
Plain arrays in raw files rather than Arrow or a database: numpy (already needed) maps them
without copying, so memory does not grow with the corpus, and torchrun's ranks share the
operating system's pages of the same files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Optional, Sequence

import numpy as np

from ..errors import AttnmtError
from ..vocab import Example, Tokenization
from .readers import Pair

# Bumped when the layout changes; a store of another format is prepared again, never read.
STORE_FORMAT = 1
META_FILE = "meta.json"
HELDOUT_FILE = "heldout.json"
SIDES = ("src", "tgt")
# What StoreWriter.append writes to, each with its type.
_APPENDED = {"src.raw": np.uint32, "tgt.raw": np.uint32, "src.len": np.int32, "tgt.len": np.int32, "positions": np.int64}


def id_dtype(vocabulary_size: int) -> np.dtype:
    """The narrowest unsigned type that holds every id of a vocabulary."""
    return np.dtype(np.uint16 if vocabulary_size <= 1 << 16 else np.uint32)


class StoreWriter:
    """A store written into the folder `work`, in three steps: `append` the kept pairs as they are
    read (ids as numbered while preparing, with their positions in training order), `arrange` them
    once the vocabularies are known, `finish` with the held-out pairs and meta.json. Leaving its
    with block closes the appended files, whatever ended the reading."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.rows = 0                    # pairs appended
        self.tokens: dict[str, int] = {}  # each side's ids, once arranged
        self._appended = {name: open(work / name, "wb") for name in _APPENDED}
        self._arranged: dict = {}        # what meta.json says of the arranged arrays

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 trace: Optional[TracebackType]) -> None:
        self._close()

    def _close(self) -> None:
        for handle in self._appended.values():
            handle.close()

    def append(self, src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray], positions: np.ndarray
               ) -> None:
        """Pairs kept: each side's (ids as numbered while preparing, concatenated; lengths), and each
        pair's position in training order."""
        for side, (ids, lengths) in zip(SIDES, (src, tgt)):
            self._write(f"{side}.raw", ids)
            self._write(f"{side}.len", lengths)
        self._write("positions", positions)
        self.rows += len(positions)

    def _write(self, name: str, values: np.ndarray) -> None:
        self._appended[name].write(values.astype(_APPENDED[name], copy=False).tobytes())

    def arrange(self, tokenization: Tokenization, inventories: Sequence[Sequence[str]], starts: Sequence[int],
                weights: Sequence[int]) -> list[int]:
        """Renumber each side's ids into its vocabulary (`inventories`: the tokens by their ids while
        preparing; those a vocabulary lacks become UNK) and put the rows in training order: by
        position, each training corpus's (`starts`: its first position) as often as its weight.
        Returns each corpus's rows."""
        self._close()
        vocabularies = (tokenization.src_vocab, tokenization.tgt_vocab)
        dtype = id_dtype(max(map(len, vocabularies)))
        for side, vocab, inventory in zip(SIDES, vocabularies, inventories):
            table = np.array([vocab.stoi.get(t, vocab.unk_id) for t in inventory] or [vocab.unk_id], dtype=dtype)
            self.tokens[side] = self._renumber(side, table)
            lengths = np.fromfile(self.work / f"{side}.len", dtype=np.int32)
            np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).tofile(self.work / f"{side}.offsets")
        positions = np.fromfile(self.work / "positions", dtype=np.int64)
        rows = np.argsort(positions, kind="stable")
        corpus_of = np.searchsorted(starts, positions[rows], side="right") - 1  # positions run on across corpora
        order = np.concatenate([np.tile(rows[corpus_of == k], weight) for k, weight in enumerate(weights)])
        order.tofile(self.work / "order")
        lengths = np.stack([np.fromfile(self.work / "tgt.len", dtype=np.int32)[order],
                            np.fromfile(self.work / "src.len", dtype=np.int32)[order]], axis=1)
        lengths.tofile(self.work / "lengths")
        for name in ("positions", "src.len", "tgt.len"):
            (self.work / name).unlink()
        self._arranged = {"tokenization": tokenization.to_dict(), "examples": len(order), "rows": self.rows,
                          "tokens": self.tokens, "id_dtype": dtype.name}
        return [int((corpus_of == k).sum()) for k in range(len(weights))]

    def _renumber(self, side: str, table: np.ndarray) -> int:
        """Rewrite a side's ids as numbered while preparing (uint32) as vocabulary ids through
        `table`, in blocks; returns how many there are."""
        raw, total = self.work / f"{side}.raw", 0
        with open(raw, "rb") as source, open(self.work / f"{side}.ids", "wb") as target:
            while block := source.read(1 << 24):
                ids = np.frombuffer(block, dtype=np.uint32)
                target.write(table[ids].tobytes())
                total += len(ids)
        raw.unlink()
        return total

    def finish(self, valid: list[Pair], test: list[Pair], fingerprint: str, report: dict, about: dict) -> None:
        """Write the held-out pairs, then meta.json: what PreparedCorpus reads (the arranged arrays, their
        tokenization, `fingerprint`, `report`), with `about` (how the store was made) beside it; last and synced."""
        assert self._arranged, "finish comes after arrange"
        (self.work / HELDOUT_FILE).write_text(json.dumps({"valid": valid, "test": test}, ensure_ascii=False),
                                              encoding="utf-8")
        meta = {"format": STORE_FORMAT, **about, "fingerprint": fingerprint, **self._arranged, "report": report}
        with open(self.work / META_FILE, "w", encoding="utf-8") as meta_file:  # last: a folder without it is no store
            json.dump(meta, meta_file, ensure_ascii=False)
            meta_file.flush()
            os.fsync(meta_file.fileno())


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
        self._ids = {side: self._map(f"{side}.ids", dtype, (meta["tokens"][side],)) for side in SIDES}
        self._offsets = {side: self._map(f"{side}.offsets", np.dtype(np.int64), (rows + 1,)) for side in SIDES}
        self._order = self._map("order", np.dtype(np.int64), (examples,))
        self.lengths = self._map("lengths", np.dtype(np.int32), (examples, 2))  # (target, source) per example
        heldout = json.loads((directory / HELDOUT_FILE).read_text(encoding="utf-8"))
        self.valid_pairs: list[Pair] = [(s, t) for s, t in heldout["valid"]]
        self.test_pairs: list[Pair] = [(s, t) for s, t in heldout["test"]]

    def unreadable_lines(self) -> list[str]:
        """The first lines preparing could not read, each named by file and line and why, as `attnmt
        prepare` and `attnmt train` print them."""
        return [f"  unreadable: {where}" for where in self.report["unreadable_shown"]]

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
