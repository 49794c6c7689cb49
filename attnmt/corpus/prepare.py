"""Preparing a corpus once, in bounded memory: the raw text streamed in chunks, tokenized in worker
processes, filtered, counted and written as token ids into a store (store.py) that training runs,
torchrun's ranks and resumes open instead of doing the work again.

The steps, none of which holds the corpus whole:
1. the raw files are read as a stream of line pairs (plain or gzip; line-aligned files, a TSV
   file, or the generated dates), the held-out pairs set aside as text;
2. a subword model (bpe, unigram) learns its pieces from a seeded sample of tokenizer.sample_pairs
   training pairs (all of them in a smaller corpus, in training order, as before preparing existed);
3. worker processes (data.workers; workers.py) decode, normalize and tokenize chunks of pairs
   (sentencepiece's batch encoding for subwords) and leave out what the filters say; the main
   process counts the tokens and appends ids and lengths to files;
4. the vocabularies come from the counts, the ids are renumbered into them, and the rows are put in
   training order; meta.json is written last and the folder renamed into place, so that a run
   killed or a disk that fills up midway leaves nothing a later run takes for complete.
A store is found again by a key of the raw files and every setting that changes its content.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
from filelock import FileLock, Timeout
from tqdm import tqdm

from .. import __version__
from ..config import Config, DataConfig, TokenizerConfig, training_corpora
from ..errors import AttnmtError
from ..files import cache_dir
from ..tokenize import SubwordTokenizer, Tokenizer, make_tokenizer, tokenizer_from_dict
from ..vocab import Tokenization, Vocabulary
from .readers import (
    Pair,
    check_source,
    dates_pairs,
    decode_line,
    decode_row,
    held_out_sizes,
    load_corpus,
    parallel_rows,
    read_parallel,
    seeded_split,
    text_sha256,
    tsv_rows,
)
from .store import META_FILE, STORE_FORMAT, PreparedCorpus, StoreWriter
from .workers import encoded_chunks, refuse_in_a_starting_worker, worker_count

CHUNK_PAIRS = 20_000  # pairs a worker tokenizes at a time
SHOWN_PROBLEMS = 5    # unreadable lines quoted in the report
# More unreadable lines than this share of those read is taken for the wrong file, not for a few
# bad lines among millions: preparing stops there, naming the first.
MAX_UNREADABLE_SHARE = 0.001
REASONS = ("blank", "unreadable", "empty", "too_long", "ratio", "duplicate")  # why a training pair is left out
LOCKS = ".locks"   # in the store root: one lock file per store, held while a process prepares it
# What a run that finds its corpus prepared says of it.
REUSED = "prepared earlier from the same raw files and settings; attnmt prepare --rebuild prepares it anew"


@dataclass
class RawChunk:
    """Training pairs as read, undecoded: their line numbers and their positions in training order,
    and the files they come from (named in problems)."""

    names: tuple[str, str]
    src: list[bytes] = field(default_factory=list)
    tgt: list[bytes] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)


@dataclass
class Problems:
    """Pairs left out, counted by reason, with the first unreadable lines quoted."""

    counts: Counter = field(default_factory=Counter)
    shown: list[str] = field(default_factory=list)

    def add(self, reason: str, where: str = "") -> None:
        self.counts[reason] += 1
        if where and len(self.shown) < SHOWN_PROBLEMS:
            self.shown.append(where)

    def merge(self, other: "Problems") -> None:
        self.counts.update(other.counts)
        self.shown.extend(other.shown[: SHOWN_PROBLEMS - len(self.shown)])


@dataclass
class EncodedChunk:
    """A chunk's kept pairs as ids. With open tokenizers (words, characters) the ids index `tokens`,
    the chunk's own inventory; with subword tokenizers (tokens None) they are the models' piece ids."""

    positions: np.ndarray    # int64 [kept]
    src_lengths: np.ndarray  # int32 [kept]
    tgt_lengths: np.ndarray
    src_ids: np.ndarray      # uint32 [sum of src_lengths]
    tgt_ids: np.ndarray
    tokens: Optional[list[str]]
    problems: Problems
    hashes: Optional[np.ndarray]  # uint64 [kept], with data.dedup


@dataclass
class Split:
    """Where the seeded split puts each pair, by its index among the pairs read: held out, or at a
    position in training order."""

    held: dict[int, tuple[str, int]]  # index -> ("valid" or "test", its place there)
    positions: Optional[np.ndarray]   # int64 [pairs]: each training pair's position; None: the pairs' own order

    def position(self, index: int) -> int:
        return index if self.positions is None else int(self.positions[index])


class CorpusSource:
    """Where a corpus's pairs come from, as a stream: the training pairs in chunks of raw lines,
    the held-out pairs as text (valid and test)."""

    def __init__(self, data: DataConfig) -> None:
        self.data = data
        self.valid: list[Pair] = []
        self.test: list[Pair] = []
        self._files = check_source(data)
        self._counts: Optional[list[int]] = None  # each training corpus's pairs, once a split has counted them
        self.weights = [1]  # how often each training corpus's pairs are seen per epoch
        self.starts = [0]   # each training corpus's first position
        self.corpora: list[tuple[Path, Path]] = []  # the parallel format's training files
        self.train_files = [self._files.tsv] if self._files.tsv else []
        self.heldout_files: list[Path] = []
        parallel = self._files.parallel
        if parallel is not None:
            self.corpora = parallel.train
            self.weights = [weight for _, weight in training_corpora(data)]
            self.train_files = [file for files in self.corpora for file in files]
            self.heldout_files = [file for files in (parallel.valid, parallel.test) if files for file in files]

    @cached_property
    def _dates(self) -> list[Pair]:
        """The dates format's pairs, generated when first read."""
        return dates_pairs(self.data)

    @property
    def files(self) -> list[Path]:
        """Every raw file the corpus is read from."""
        return [Path(f).resolve() for f in self.train_files + self.heldout_files]

    def generated_sha256(self) -> str:
        """The dates format: the sha256 of the generated pairs (they depend on attnmt's generator)."""
        return hashlib.sha256("".join(f"{s}\t{t}\n" for s, t in self._dates).encode()).hexdigest()

    def heldout(self) -> tuple[list[Pair], list[Pair]]:
        """The valid and test pairs: their own files, and those the seeded split sets aside, found by
        reading the corpus through without keeping the rest."""
        if not sum(held_out_sizes(self.data)):
            return self._heldout_files()
        for _ in self.pairs(Problems()):
            pass
        return self.valid, self.test

    def _heldout_files(self) -> tuple[list[Pair], list[Pair]]:
        """The valid and test pairs of their own files (parallel format); none for a split cut from
        the training pairs."""
        files = self._files.parallel
        if files is None:
            return [], []
        return (read_parallel(*files.valid) if files.valid else []), (read_parallel(*files.test) if files.test else [])

    def pairs(self, problems: Problems) -> Iterator[tuple[int, int, int, bytes, bytes]]:
        """The training pairs: (corpus, line number, position in training order, source bytes, target
        bytes); reading problems go to `problems`. Sets aside the valid and test pairs on the way:
        those of their own files, and those the seeded split cuts."""
        valid_size, test_size = held_out_sizes(self.data)
        self.valid, self.test = self._heldout_files()
        split = self._split(valid_size, test_size)
        held: dict[str, list[Optional[Pair]]] = {"valid": [None] * valid_size, "test": [None] * test_size}
        trained = [0] * len(self.weights)
        for index, (corpus, line, src, tgt) in enumerate(self._rows(problems)):
            if index in split.held:
                name, slot = split.held[index]
                try:
                    held[name][slot] = decode_row(self.names(corpus), line, src, tgt)
                except ValueError:  # counted by the encoder for training pairs only; a held-out one is dropped
                    pass
                continue
            trained[corpus] += 1
            yield corpus, line, split.position(index), src, tgt
        self.starts = list(itertools.accumulate(trained[:-1], initial=0))  # positions run on across corpora
        if valid_size:
            self.valid = [pair for pair in held["valid"] if pair is not None]
        if test_size:
            self.test = [pair for pair in held["test"] if pair is not None]

    def _split(self, valid_size: int, test_size: int) -> Split:
        """data.seeded_split, streamed: where each pair read goes. Nothing to cut: every pair trains,
        in its own order, without counting the pairs first."""
        if not valid_size + test_size:
            return Split({}, None)
        counts = self._row_counts()
        split = seeded_split(sum(counts), valid_size, test_size, self.data.seed,
                             list(itertools.accumulate(counts[:-1], initial=0)))
        positions = np.empty(sum(counts), dtype=np.int64)
        positions[split.train] = np.arange(len(split.train))
        held = {int(i): ("test", n) for n, i in enumerate(split.test)}
        held.update({int(i): ("valid", n) for n, i in enumerate(split.valid)})
        return Split(held, positions)

    def _row_counts(self) -> list[int]:
        """Each training corpus's pairs, as the split counts them (read through once, then remembered)."""
        if self._counts is None:
            counts = [0] * len(self.weights)
            for corpus, *_ in self._rows(Problems()):
                counts[corpus] += 1
            self._counts = counts
        return self._counts

    def _rows(self, problems: Problems) -> Iterator[tuple[int, int, bytes, bytes]]:
        """Every pair read: (corpus, line number, source bytes, target bytes), as far as data.max_pairs,
        by readers.py's row readers; the lines they find no pair in are counted as unreadable."""
        data, bad = self.data, partial(problems.add, "unreadable")
        if data.format == "parallel":
            read = 0
            for corpus, (src_path, tgt_path) in enumerate(self.corpora):  # max_pairs in all, each file read to its end
                for line, src, tgt in parallel_rows(src_path, tgt_path, bad, data.max_pairs - read if data.max_pairs else None):
                    read += 1
                    yield corpus, line, src, tgt
        elif data.format == "tsv":
            english_first = data.src_lang == "en"
            for line, english, other in tsv_rows(self.train_files[0], bad, data.max_pairs or None,
                                                 blank=partial(problems.add, "blank")):
                yield (0, line, english, other) if english_first else (0, line, other, english)
        else:
            yield from ((0, n, s.encode(), t.encode()) for n, (s, t) in enumerate(self._dates, 1))

    def names(self, corpus: int) -> tuple[str, str]:
        """The files that problems on each side of a training corpus are named by."""
        if self.data.format == "parallel":
            return str(self.corpora[corpus][0]), str(self.corpora[corpus][1])
        name = str(self.train_files[0]) if self.train_files else "dates"
        return name, name

    def chunks(self, problems: Problems) -> Iterator[RawChunk]:
        """The training pairs in chunks of CHUNK_PAIRS, each of one corpus."""
        chunk = RawChunk(names=self.names(0))
        for corpus, line, position, src, tgt in self.pairs(problems):
            if self.names(corpus) != chunk.names:
                if chunk.src:
                    yield chunk
                chunk = RawChunk(names=self.names(corpus))
            chunk.src.append(src)
            chunk.tgt.append(tgt)
            chunk.lines.append(line)
            chunk.positions.append(position)
            if len(chunk.src) == CHUNK_PAIRS:
                yield chunk
                chunk = RawChunk(names=chunk.names)
        if chunk.src:
            yield chunk


class ChunkEncoder:
    """Decodes, tokenizes and filters chunks of training pairs; runs in the worker processes."""

    def __init__(self, src_tokenizer: dict, tgt_tokenizer: dict, data: DataConfig) -> None:
        self.src_tokenizer, self.tgt_tokenizer = tokenizer_from_dict(src_tokenizer), tokenizer_from_dict(tgt_tokenizer)
        self.data = data
        self.open = self.src_tokenizer.pieces() is None

    def __call__(self, chunk: RawChunk) -> EncodedChunk:
        problems = Problems()
        texts: tuple[list[str], list[str]] = ([], [])
        readable = []
        for index, line in enumerate(chunk.lines):
            decoded = self._decoded(chunk, index, problems)
            if decoded:
                texts[0].append(decoded[0])
                texts[1].append(decoded[1])
                readable.append(index)
        index_of: dict[str, int] = {}
        src_ids = self.src_tokenizer.encode_batch(texts[0], index_of)
        tgt_ids = self.tgt_tokenizer.encode_batch(texts[1], index_of)
        src_lengths = np.fromiter(map(len, src_ids), dtype=np.int32, count=len(src_ids))
        tgt_lengths = np.fromiter(map(len, tgt_ids), dtype=np.int32, count=len(tgt_ids))
        keep = self._filter(src_lengths, tgt_lengths, problems)
        kept = np.flatnonzero(keep)
        hashes = None
        if self.data.dedup:
            hashes = np.array([int.from_bytes(hashlib.blake2b(f"{texts[0][i]}\t{texts[1][i]}".encode(), digest_size=8)
                                              .digest(), "little") for i in kept], dtype=np.uint64)
        return EncodedChunk(
            positions=np.array(chunk.positions, dtype=np.int64)[readable][kept] if readable else np.zeros(0, np.int64),
            src_lengths=src_lengths[kept], tgt_lengths=tgt_lengths[kept],
            src_ids=_flat([src_ids[i] for i in kept]), tgt_ids=_flat([tgt_ids[i] for i in kept]),
            tokens=list(index_of) if self.open else None, problems=problems, hashes=hashes)

    def _decoded(self, chunk: RawChunk, index: int, problems: Problems) -> Optional[tuple[str, str]]:
        """A pair's texts, or None with its first unreadable side counted and named."""
        try:
            return decode_row(chunk.names, chunk.lines[index], chunk.src[index], chunk.tgt[index])
        except ValueError as err:
            problems.add("unreadable", str(err))
            return None

    def _filter(self, src: np.ndarray, tgt: np.ndarray, problems: Problems) -> np.ndarray:
        """Which pairs stay, counting the others by their first reason to go."""
        limit, ratio = self.data.max_len, self.data.max_ratio
        empty = (src == 0) | (tgt == 0)
        too_long = ~empty & ((src > limit) | (tgt > limit))
        lopsided = ~empty & ~too_long & (ratio > 0) & (np.maximum(src, tgt) > ratio * np.minimum(src, tgt))
        for reason, mask in (("empty", empty), ("too_long", too_long), ("ratio", lopsided)):
            if mask.any():
                problems.counts[reason] += int(mask.sum())
        return ~(empty | too_long | lopsided)


def _flat(sequences: list[list[int]]) -> np.ndarray:
    return np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.uint32, count=sum(map(len, sequences)))


def load_split(config: DataConfig, split: str, path: str = "") -> list[Pair]:
    """One split ("train", "valid" or "test") of the corpus a model was trained on, cut as in
    training (same seed); `path` stands in for data.path, e.g. where the file is on this machine.
    The held-out splits are read without holding the training pairs; "train" is read whole."""
    data = dataclasses.replace(config, path=path or config.path)
    if split == "train":
        return load_corpus(data).train
    if split not in ("valid", "test"):
        raise AttnmtError(f"unknown split {split!r}: choose train, valid or test")
    valid, test = CorpusSource(data).heldout()
    return valid if split == "valid" else test


def make_tokenizers(config: TokenizerConfig, pairs: list[Pair]) -> tuple[Tokenizer, Tokenizer]:
    """Source and target tokenizers; subword ones are trained on `pairs` here."""
    if config.level == "sentencepiece":
        raise AttnmtError("tokenizer.level sentencepiece is a pretrained model's own tokenizer, which attnmt does not "
                          "train: set train.init_from to a model file that has one (attnmt import), or choose bpe or "
                          "unigram to learn pieces from the training data")
    if config.level in ("word", "char"):
        return make_tokenizer(config.level, config.lowercase), make_tokenizer(config.level, config.lowercase)
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    if config.joint:
        shared = SubwordTokenizer.train(config.level, sources + targets, config.vocab_size, config.lowercase)
        return shared, shared
    return (SubwordTokenizer.train(config.level, sources, config.vocab_size, config.lowercase),
            SubwordTokenizer.train(config.level, targets, config.vocab_size, config.lowercase))


def sample_pairs(source: CorpusSource, size: int, seed: int) -> list[Pair]:
    """A seeded uniform sample of `size` readable training pairs (reservoir sampling; 0 or a corpus
    no larger: all), in training order."""
    rng = random.Random(seed)
    kept: list[tuple[int, bytes, bytes]] = []
    for seen, (_, _, position, src, tgt) in enumerate(source.pairs(Problems())):
        if not size or seen < size:
            kept.append((position, src, tgt))
        else:
            slot = rng.randrange(seen + 1)
            if slot < size:
                kept[slot] = (position, src, tgt)
    pairs = []
    for _, src, tgt in sorted(kept, key=lambda item: item[0]):
        try:
            pairs.append((decode_line(src), decode_line(tgt)))
        except ValueError:
            continue
    return pairs


def _settings(config: Config) -> dict:
    """What decides a store's content besides the raw text: the data settings (but where the files
    are, how many processes read them, where the store goes and the languages a model says it
    reads), the tokenizer's, the vocabulary's."""
    data = {k: v for k, v in dataclasses.asdict(config.data).items() if k not in ("path", "workers", "prepared_dir",
                                                                                    "source_languages")}
    return {"data": data, "tokenizer": dataclasses.asdict(config.tokenizer), "vocab": dataclasses.asdict(config.vocab)}


def store_key(config: Config, source: CorpusSource, given: Optional[Tokenization]) -> str:
    """The name of the folder that holds the store of this corpus and these settings."""
    identity = {"format": STORE_FORMAT, **_settings(config), "files": [str(f) for f in source.files],
                "generated": source.generated_sha256() if config.data.format == "dates" else None,
                "given": _digest(given.to_dict()) if given else None}
    return _digest(identity)[:24]


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def store_root(data: DataConfig) -> Path:
    return Path(data.prepared_dir) if data.prepared_dir else cache_dir() / "prepared"


def open_corpus(config: Config, given: Optional[Tokenization] = None, log: Callable[[str], None] = print
                ) -> PreparedCorpus:
    """The prepared corpus of a training run: made now if missing or stale, else reused, saying so.
    `given`, the tokenization of the checkpoint or model file a run continues from, is kept: the
    store prepared without it serves when it has the same one (a resumed run), else one is
    prepared with it (fine-tuning)."""
    refuse_in_a_starting_worker()
    source = CorpusSource(config.data)
    found = _find(config, source, None, log)
    if given is not None and (found is None or found.meta["tokenization"] != given.to_dict()):
        found = _find(config, source, given, log)
    if found is not None:
        log(f"prepared corpus: {found.directory} ({REUSED})")
        return found
    return _prepare(config, source, given, log, announce=True)


def find_corpus(config: Config, given: Optional[Tokenization] = None, log: Callable[[str], None] = print
                ) -> Optional[PreparedCorpus]:
    """The store of this corpus and these settings, if there is one and its raw files are unchanged."""
    refuse_in_a_starting_worker()
    return _find(config, CorpusSource(config.data), given, log)


def _find(config: Config, source: CorpusSource, given: Optional[Tokenization], log: Callable[[str], None]
          ) -> Optional[PreparedCorpus]:
    directory = store_root(config.data) / store_key(config, source, given)
    if not (directory / META_FILE).exists():
        return None
    try:
        corpus = PreparedCorpus.open(directory)
    except (AttnmtError, KeyError, ValueError) as err:
        log(f"{err}; preparing it again")
        return None
    if not _unchanged(corpus.meta["files"]):
        log(f"{directory}: the raw data changed since it was prepared; preparing it again")
        return None
    return corpus


def prepare_corpus(config: Config, given: Optional[Tokenization] = None, log: Callable[[str], None] = print,
                   rebuild: bool = False) -> PreparedCorpus:
    """The store of this corpus and these settings: reused when its raw files are unchanged (unless
    `rebuild`), else prepared (with `given` tokenizers and vocabularies, if any)."""
    refuse_in_a_starting_worker()
    source = CorpusSource(config.data)
    found = None if rebuild else _find(config, source, given, log)
    return found or _prepare(config, source, given, log, rebuild)


def _prepare(config: Config, source: CorpusSource, given: Optional[Tokenization], log: Callable[[str], None],
             rebuild: bool = False, announce: bool = False) -> PreparedCorpus:
    """The store prepared now, by one process at a time: a run that finds another preparing the same
    store (a second trial started beside the first) waits for it, then opens what it made, unless
    `rebuild`; otherwise the second to finish would replace the store under the first. `announce`:
    say where it is (a training run; `attnmt prepare` prints its report instead)."""
    root = store_root(config.data)
    directory = root / store_key(config, source, given)
    with _preparing(root, directory, log) as waited:
        found = _find(config, source, given, log) if waited and not rebuild else None
        if found is not None:
            log(f"prepared corpus: {found.directory} (prepared by the run it waited for)")
            return found
        corpus = PreparedCorpus.open(_build(config, source, given, root, directory, log))
        if announce:
            log(f"prepared corpus: {corpus.directory} (prepared now; a later run with the same raw files and "
                "settings reuses it)")
        return corpus


@contextlib.contextmanager
def _preparing(root: Path, directory: Path, log: Callable[[str], None]) -> Iterator[bool]:
    """Held while this process prepares `directory`: a lock file of its own in root/.locks (released
    by the system if the process dies). Yields whether another process held it first."""
    try:
        (root / LOCKS).mkdir(parents=True, exist_ok=True)
        lock = FileLock(root / LOCKS / f"{directory.name}.lock")
        try:
            lock.acquire(timeout=0)
            waited = False
        except Timeout:
            log(f"{directory}: another run is preparing this corpus; waiting for it to finish")
            lock.acquire()
            waited = True
    except OSError as err:
        raise AttnmtError(f"{root}: cannot write a prepared corpus there: {err.strerror or err}") from None
    try:
        yield waited
    finally:
        lock.release()


def _unchanged(files: list[dict]) -> bool:
    """Whether the raw files are those a store was made from: the same size and time, or the same text."""
    for recorded in files:
        path = Path(recorded["path"])
        try:
            stat = path.stat()
        except OSError:
            return False
        if (stat.st_size, stat.st_mtime_ns) != (recorded["size"], recorded["mtime_ns"]):
            if text_sha256(path) != recorded["sha256"]:
                return False
    return True


def _build(config: Config, source: CorpusSource, given: Optional[Tokenization], root: Path, directory: Path,
           log: Callable[[str], None]) -> Path:
    try:
        for stale in root.glob(f".{directory.name}.*"):  # the lock is this run's: left by one killed while preparing
            shutil.rmtree(stale, ignore_errors=True)
        work = root / f".{directory.name}.{os.getpid()}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
    except OSError as err:
        raise AttnmtError(f"{root}: cannot write a prepared corpus there: {err.strerror or err}") from None
    try:
        _write_store(config, source, given, work, log)
        if directory.exists():  # stale or damaged: out of the way first (open maps stay valid)
            old = root / f".{directory.name}.{os.getpid()}.old"
            directory.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        work.rename(directory)
    except BaseException as err:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(err, OSError):
            raise AttnmtError(f"{root}: cannot write the prepared corpus: {err.strerror or err}; nothing was kept") from None
        raise
    return directory


def _write_store(config: Config, source: CorpusSource, given: Optional[Tokenization], work: Path,
                 log: Callable[[str], None]) -> None:
    """Prepare the corpus into the folder `work`: tokenizers, ids and counts, vocabularies, the
    training order, the held-out pairs; meta.json last."""
    started = time.monotonic()
    files = [{"path": str(f), "size": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns, "sha256": text_sha256(f)}
             for f in source.files]
    src_tokenizer, tgt_tokenizer = (given.src_tokenizer, given.tgt_tokenizer) if given else _learn_tokenizers(
        config, source, log)
    with StoreWriter(work) as writer:
        streamed = _stream(config.data, source, src_tokenizer, tgt_tokenizer, writer, log)
    if given:
        src_vocab, tgt_vocab = given.src_vocab, given.tgt_vocab
    else:
        src_vocab, tgt_vocab = _vocabularies(config, streamed.inventories, streamed.counts)
    tokenization = Tokenization(src_tokenizer, tgt_tokenizer, src_vocab, tgt_vocab)
    kept_by_corpus = writer.arrange(tokenization, streamed.inventories, source.starts, source.weights)
    seconds = time.monotonic() - started
    problems, read = streamed.problems, streamed.read
    report = {"pairs_read": read, "pairs_kept": writer.rows,
              "left_out": {reason: problems.counts[reason] for reason in REASONS},
              "unreadable_shown": problems.shown, "valid_pairs": len(source.valid), "test_pairs": len(source.test),
              "vocab": {"src": len(src_vocab), "tgt": len(tgt_vocab)}, "tokens": writer.tokens, "workers": streamed.workers,
              "corpora": [{"files": source.names(k), "weight": weight, "pairs_kept": kept_by_corpus[k]}
                          for k, weight in enumerate(source.weights)],
              "seconds": round(seconds, 1), "pairs_per_s": round(read / max(seconds, 1e-9))}
    settings = _settings(config)
    generated = source.generated_sha256() if config.data.format == "dates" else None
    writer.finish(source.valid, source.test,
                  fingerprint=_digest({"settings": settings, "text": [f["sha256"] for f in files], "generated": generated}),
                  report=report, about={"attnmt": __version__, "settings": settings, "files": files})


@dataclass
class Streamed:
    """What reading and tokenizing the training pairs gave, beside what it appended to the store."""

    read: int
    problems: Problems
    inventories: list[list[str]]  # each side's tokens by their ids while preparing
    counts: list[np.ndarray]      # each side's count of each of those ids
    workers: int


def _stream(data: DataConfig, source: CorpusSource, src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer,
            writer: StoreWriter, log: Callable[[str], None]) -> Streamed:
    """Read, tokenize and filter the training pairs (in worker processes), count the tokens, and
    append the kept pairs to the store's `writer`."""
    workers = worker_count(data.workers, log)
    problems, reading = Problems(), Problems()  # pairs left out by the workers; lines the reader could not split
    make_encoder = partial(ChunkEncoder, src_tokenizer.to_dict(), tgt_tokenizer.to_dict(), data)
    pieces = (src_tokenizer.pieces(), tgt_tokenizer.pieces())
    index_of: dict[str, int] = {}  # open tokenizers: each token's id while preparing (both sides)
    counts = [np.zeros(len(p) if p else 0, dtype=np.int64) for p in pieces]
    seen_hashes: set[int] = set()
    read = 0
    bar = tqdm(desc="preparing", unit=" pairs", unit_scale=True, disable=None, leave=False)
    for chunk in encoded_chunks(make_encoder, source.chunks(reading), workers, data.path or data.format):
        read += len(chunk.positions) + sum(chunk.problems.counts.values())
        problems.merge(chunk.problems)
        keep = _new_pairs(chunk, seen_hashes, problems) if chunk.hashes is not None else None
        sides = []
        for side, (ids, lengths) in enumerate(((chunk.src_ids, chunk.src_lengths), (chunk.tgt_ids, chunk.tgt_lengths))):
            if chunk.tokens is not None:  # the chunk's own ids -> ids of index_of
                table = np.fromiter((index_of.setdefault(t, len(index_of)) for t in chunk.tokens), dtype=np.uint32,
                                    count=len(chunk.tokens))
                ids = table[ids] if len(ids) else ids
            if keep is not None:
                ids, lengths = ids[np.repeat(keep, lengths)], lengths[keep]
            _count(counts, side, ids)
            sides.append((ids, lengths))
        writer.append(sides[0], sides[1], chunk.positions if keep is None else chunk.positions[keep])
        bar.update(len(chunk.positions) + sum(chunk.problems.counts.values()))
    bar.close()
    read += sum(reading.counts.values())
    problems.merge(reading)
    _check_unreadable(problems, read)
    if not writer.rows:
        raise AttnmtError(f"no usable training pairs: all {read} were left out ({_reasons(problems, data)})")
    inventories = [p if p else list(index_of) for p in pieces]  # open tokenizers: ids in order of first sight
    return Streamed(read, problems, inventories, counts, workers)


def _learn_tokenizers(config: Config, source: CorpusSource, log: Callable[[str], None]) -> tuple[Tokenizer, Tokenizer]:
    """New tokenizers; subword ones learn from a sample, freed before the workers start."""
    sample: list[Pair] = []
    if config.tokenizer.level in ("bpe", "unigram"):
        sample = sample_pairs(source, config.tokenizer.sample_pairs, config.data.seed)
        log(f"learning {config.tokenizer.level} pieces from {len(sample):,} training pairs")
    return make_tokenizers(config.tokenizer, sample)


def _count(counts: list[np.ndarray], side: int, ids: np.ndarray) -> None:
    """Add the occurrences of each id to the side's counts, growing them for new tokens."""
    if not len(ids):
        return
    these = np.bincount(ids, minlength=len(counts[side]))
    if len(these) > len(counts[side]):
        counts[side] = np.concatenate([counts[side], np.zeros(len(these) - len(counts[side]), dtype=np.int64)])
    counts[side] += these


def _new_pairs(chunk: EncodedChunk, seen: set[int], problems: Problems) -> np.ndarray:
    """data.dedup: which of the chunk's pairs no earlier pair repeats exactly."""
    assert chunk.hashes is not None
    keep = np.ones(len(chunk.hashes), dtype=bool)
    for index, value in enumerate(chunk.hashes.tolist()):
        if value in seen:
            keep[index] = False
            problems.counts["duplicate"] += 1
        else:
            seen.add(value)
    return keep


def _vocabularies(config: Config, inventories: list[list[str]], counts: list[np.ndarray]) -> tuple[Vocabulary, Vocabulary]:
    """The vocabularies from the token counts of the training data, as Vocabulary.build makes them."""
    voc = config.vocab
    sides = [Counter({inventory[i]: int(c) for i, c in enumerate(side_counts) if c})
             for inventory, side_counts in zip(inventories, counts)]
    if voc.joint:
        joint = Vocabulary.from_counts(sides[0] + sides[1], voc.min_freq, voc.max_size)
        return joint, joint
    return (Vocabulary.from_counts(sides[0], voc.min_freq, voc.max_size),
            Vocabulary.from_counts(sides[1], voc.min_freq, voc.max_size))


def _check_unreadable(problems: Problems, read: int) -> None:
    """Refuse a file with more unreadable lines than a few among many (the wrong file, a binary)."""
    bad = problems.counts["unreadable"]
    if bad > MAX_UNREADABLE_SHARE * read:
        raise AttnmtError(f"{problems.shown[0]} ({bad:,} unreadable lines of {read:,} read, more than "
                          f"{MAX_UNREADABLE_SHARE:.1%}: is this the right file?)")


def _reasons(problems: Problems, data: DataConfig) -> str:
    """Why pairs were left out, with the settings that decided it."""
    said = {"blank": "blank lines", "unreadable": "unreadable", "empty": "with an empty side",
            "too_long": f"over data.max_len={data.max_len} tokens", "ratio": f"over data.max_ratio={data.max_ratio:g}",
            "duplicate": "repeating an earlier pair"}
    return ", ".join(f"{problems.counts[reason]} {said[reason]}" for reason in REASONS if problems.counts[reason])


def report_lines(corpus: PreparedCorpus) -> list[str]:
    """What `attnmt prepare` prints of a store."""
    r = corpus.report
    left = ", ".join(f"{reason.replace('_', ' ')} {count:,}" for reason, count in r["left_out"].items() if count)
    lines = [f"prepared corpus: {corpus.directory}",
             f"  training pairs: {r['pairs_kept']:,} of {r['pairs_read']:,} read" + (f" (left out: {left})" if left else ""),
             f"  held out: {r['valid_pairs']:,} valid, {r['test_pairs']:,} test; vocab {r['vocab']['src']:,} source, "
             f"{r['vocab']['tgt']:,} target; tokens {r['tokens']['src']:,} source, {r['tokens']['tgt']:,} target",
             f"  prepared in {r['seconds']:,} s ({r['pairs_per_s']:,} pairs/s, {r['workers']} workers)"]
    if len(r["corpora"]) > 1:
        lines += [f"  corpus {c['files'][0]}: {c['pairs_kept']:,} pairs kept, weight {c['weight']}" for c in r["corpora"]]
    lines += corpus.unreadable_lines()
    return lines
