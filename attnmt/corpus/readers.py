"""Reading parallel corpora: where a corpus's raw files are (check_source: which data.format fits a
data.path), manythings TSV files, line-aligned files, the built-in dates corpus; the seeded split into
train, valid and test. Each file format has one row reader (tsv_rows, parallel_rows): load_corpus
collects its rows in memory and stops at the first bad line; prepare.CorpusSource streams the same rows,
counting bad lines, through the same check_source, dates_pairs and seeded_split."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import random
import typing
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Optional, Protocol, Sequence

import numpy as np

from ..config import DataConfig, training_corpora
from ..errors import AttnmtError
from .corpora import check_settings, is_corpus_name, resolve
from .dates import generate_dates

Pair = tuple[str, str]
# A pair as a row reader gives it: (line number, source side, target side), undecoded, without line ends.
Row = tuple[int, bytes, bytes]
# What a row reader does with a line that is not a pair, told as "FILE:LINE: what is wrong".
BadLine = Callable[[str], None]


# A longer line is refused before it is read whole: a file that is not one sentence per line
# (a binary, a minified document) must not fill the memory of a reader that streams it.
MAX_LINE_BYTES = 1 << 20


class LineReader(Protocol):
    """A binary handle (a file, gzip's, stdin's buffer) as decode_lines reads it."""

    def readline(self, size: int, /) -> bytes: ...


LONG_LINE = f"line longer than {MAX_LINE_BYTES / 2**20:g} MiB ({MAX_LINE_BYTES} bytes); expected one sentence per line"


def decode_line(line: bytes) -> str:
    """A line's text without its line end; ValueError saying what is wrong for NUL bytes or bytes
    that are not UTF-8."""
    if b"\x00" in line:
        raise ValueError("contains NUL bytes; is this a binary file, not text?")
    try:
        return line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise ValueError(f"not valid UTF-8 (byte 0x{line[err.start]:02x} at column {err.start + 1})") from None


def decode_lines(handle: LineReader, name: str) -> Iterator[str]:
    """Decode the UTF-8 lines of a binary handle, naming `name` and the line number for binary or
    non-UTF-8 input and for a line (with its end) of more than MAX_LINE_BYTES, of which no more is read."""
    number = 0
    # One byte past the limit shows a longer line (its line end counts) without reading it all.
    while line := handle.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(line) > MAX_LINE_BYTES and b"\x00" not in line:
            raise AttnmtError(f"{name}:{number}: {LONG_LINE}")
        try:
            yield decode_line(line)
        except ValueError as err:
            raise AttnmtError(f"{name}:{number}: {err}") from None


def raw_lines(path: str | Path) -> Iterator[Optional[bytes]]:
    """The lines of a text file, plain or gzip, as bytes with their line ends, undecoded, for
    readers that count bad lines instead of stopping at the first; None stands for a line longer
    than MAX_LINE_BYTES, of which no more than that is held at once."""
    with open_text_file(path) as handle:
        try:
            while line := handle.readline(MAX_LINE_BYTES + 1):
                if len(line) <= MAX_LINE_BYTES:
                    yield line
                    continue
                while line and not line.endswith(b"\n"):  # the rest of the long line
                    line = handle.readline(MAX_LINE_BYTES)
                yield None
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise AttnmtError(f"{path}: cannot read: {err}") from None


@contextmanager
def open_text_file(path: str | Path) -> Iterator[BinaryIO]:
    """A binary handle on a file, decompressed if it is gzip; a missing or unreadable file is one line."""
    path = Path(path)
    if not path.is_file():
        raise AttnmtError(f"{path}: file not found" if not path.exists() else f"{path}: not a regular file")
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        handle = typing.cast(BinaryIO, gzip.open(path, "rb")) if gzipped else open(path, "rb")
    except OSError as err:
        raise AttnmtError(f"{path}: cannot read: {err.strerror or err}") from None
    with handle:
        yield handle


def text_sha256(path: str | Path) -> str:
    """The sha256 of a text file's content (decompressed, if it is gzip)."""
    digest = hashlib.sha256()
    with open_text_file(path) as handle:
        try:
            while block := handle.read(1 << 22):
                digest.update(block)
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise AttnmtError(f"{path}: cannot read: {err}") from None
    return digest.hexdigest()


def read_lines(path: str | Path) -> Iterator[str]:
    """Yield the lines of a UTF-8 text file, plain or gzip, without their line ends."""
    with open_text_file(path) as handle:
        try:
            yield from decode_lines(handle, str(path))
        except (OSError, EOFError, gzip.BadGzipFile) as err:
            raise AttnmtError(f"{path}: cannot read: {err}") from None


def refuse(problem: str) -> None:
    """The in-memory readers' answer to a line that is not a pair: stop, naming it."""
    raise AttnmtError(problem)


def decode_row(names: tuple[str, str], number: int, src: bytes, tgt: bytes) -> Pair:
    """A row's texts; ValueError "FILE:LINE: what is wrong" for the first side that is not UTF-8
    text, `names` naming each side's file."""
    side = 0
    try:
        source = decode_line(src)
        side = 1
        return source, decode_line(tgt)
    except ValueError as err:
        raise ValueError(f"{names[side]}:{number}: {err}") from None


def _texts(rows: Iterator[Row], names: tuple[str, str]) -> list[Pair]:
    """The rows decoded, in memory; the first that is not UTF-8 text is one line naming file and line."""
    try:
        return [decode_row(names, number, src, tgt) for number, src, tgt in rows]
    except ValueError as err:
        raise AttnmtError(str(err)) from None


# The first bytes that a line of only whitespace can have after bytes.strip(), which knows ASCII's
# whitespace only: U+001C-U+001F, and the UTF-8 of U+0085, U+00A0, U+1680, U+2000-U+205F and U+3000.
_SPACE_LEADS = frozenset(b"\x1c\x1d\x1e\x1f\xc2\xe1\xe2\xe3")


def is_blank(raw: bytes) -> bool:
    """Whether an undecoded line holds only whitespace, Unicode's spaces included (str.isspace's),
    decoding only a line that can."""
    rest = raw.strip()
    if not rest:
        return True
    if rest[0] not in _SPACE_LEADS:
        return False
    try:
        return not decode_line(raw).strip()
    except ValueError:
        return False


def _not_a_pair(raw: bytes, columns: int) -> str:
    """Why a TSV line is not a pair: that it is not UTF-8 text (the likelier cause: a binary file),
    else its number of columns."""
    try:
        decode_line(raw)
    except ValueError as err:
        return str(err)
    return f"expected 2 or 3 TAB-separated columns (English, translation, attribution), found {columns}"


def tsv_rows(path: str | Path, bad: BadLine, limit: Optional[int] = None,
             blank: Callable[[], None] = lambda: None) -> Iterator[Row]:
    """The one reader of manythings/Tatoeba files, `English<TAB>Other[<TAB>attribution]` (quotes are
    plain text): (line number, English, other) of each pair, undecoded, as far as `limit` pairs (None:
    all). A line of only whitespace is skipped and told to `blank`; one too long or with another number
    of columns goes to `bad` and is skipped. One line if the file holds no pair."""
    count = 0
    for number, raw in enumerate(raw_lines(path), 1):
        if raw is None:
            bad(f"{path}:{number}: {LONG_LINE}")
        elif is_blank(raw):
            blank()
        else:
            columns = raw.rstrip(b"\r\n").split(b"\t")
            if 2 <= len(columns) <= 3:
                count += 1
                yield number, columns[0], columns[1]
                if count == limit:
                    break
            else:
                bad(f"{path}:{number}: {_not_a_pair(raw, len(columns))}")
    if not count:
        raise AttnmtError(f"{path}: no sentence pairs in file")


def read_tsv(path: str | Path, max_pairs: int = 0) -> list[Pair]:
    """A manythings/Tatoeba file's (english, other) pairs, in memory, as far as max_pairs (0: all);
    the first line that is not a pair is one line naming it."""
    return _texts(tsv_rows(path, refuse, max_pairs or None), (str(path), str(path)))


def find_split_file(directory: str | Path, prefix: str, lang: str) -> Path:
    """`DIR/prefix.lang`, or `DIR/prefix.lang.gz` if only that exists."""
    plain = Path(directory) / f"{prefix}.{lang}"
    for candidate in (plain, plain.with_name(plain.name + ".gz")):
        if candidate.is_file():
            return candidate
    raise AttnmtError(f"{plain}: file not found (nor {plain.name}.gz)")


def parallel_rows(src_path: str | Path, tgt_path: str | Path, bad: BadLine, limit: Optional[int] = None) -> Iterator[Row]:
    """The one reader of two line-aligned files, line i of one translating line i of the other:
    (line number, source, target) of each pair, undecoded, as far as `limit` pairs (None: all). A line
    too long goes to `bad` and is skipped. Past the limit the files are read on only to see that they
    end together: files of different lengths, or empty ones, are one line whatever the limit."""
    number = count = 0
    # b"" marks the end of the shorter file: raw_lines yields each line with its line end.
    for src, tgt in itertools.zip_longest(raw_lines(src_path), raw_lines(tgt_path), fillvalue=b""):
        if src == b"" or tgt == b"":
            longer, shorter = (src_path, tgt_path) if tgt == b"" else (tgt_path, src_path)
            raise AttnmtError(f"{shorter} ends after line {number} but {longer} goes on at line {number + 1}; "
                              "parallel files must have one line per sentence on both sides")
        number += 1
        if count == limit:
            continue
        if src is None or tgt is None:
            bad(f"{src_path if src is None else tgt_path}:{number}: {LONG_LINE}")
            continue
        count += 1
        yield number, src, tgt
    if not number:
        raise AttnmtError(f"{src_path}: no lines in file")


def read_parallel(src_path: str | Path, tgt_path: str | Path, limit: Optional[int] = None) -> list[Pair]:
    """Two line-aligned files' (source, target) pairs, in memory, as far as `limit` (None: all); the
    first line that is not a pair, or files of different lengths, are one line."""
    return _texts(parallel_rows(src_path, tgt_path, refuse, limit), (str(src_path), str(tgt_path)))


@dataclass
class Corpus:
    """Raw (source, target) sentence pairs of the three splits."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]


@dataclass
class SeededSplit:
    """Where the seeded split puts a corpus's pairs, by their indices among the pairs read."""

    test: np.ndarray   # int64: the test pairs, in test order
    valid: np.ndarray  # the validation pairs
    train: np.ndarray  # the training pairs, in training order


def seeded_split(count: int, valid_size: int, test_size: int, seed: int, starts: Sequence[int] = (0,)) -> SeededSplit:
    """The split of `count` pairs: shuffled with `seed` (as shuffling a list of them), the first
    test_size held out for test, the next valid_size for validation; the rest train in the shuffled
    order within each training corpus (`starts`: each one's first index), corpus after corpus.
    Nothing to cut: the pairs in their order. One line if no training pair would be left."""
    if valid_size + test_size >= count:
        raise AttnmtError(f"only {count} pairs, too few for data.valid_size={valid_size} and "
                          f"data.test_size={test_size}")
    if not valid_size + test_size:
        return SeededSplit(np.zeros(0, np.int64), np.zeros(0, np.int64), np.arange(count, dtype=np.int64))
    shuffled = array("q", range(count))  # 8 bytes a pair, shuffled in place
    random.Random(seed).shuffle(shuffled)
    order = np.frombuffer(shuffled, dtype=np.int64)
    held = test_size + valid_size
    rest = order[held:]
    if len(starts) > 1:  # a stable sort keeps the shuffled order within each corpus
        rest = rest[np.argsort(np.searchsorted(starts, rest, side="right"), kind="stable")]
    return SeededSplit(test=order[:test_size], valid=order[test_size:held], train=rest)


def split_pairs(pairs: list[Pair], valid_size: int, test_size: int, seed: int, starts: Sequence[int] = (0,)) -> Corpus:
    """The pairs cut by `seeded_split` (prepare.CorpusSource streams the same split)."""
    split = seeded_split(len(pairs), valid_size, test_size, seed, starts)
    return Corpus(train=[pairs[i] for i in split.train.tolist()], valid=[pairs[i] for i in split.valid.tolist()],
                  test=[pairs[i] for i in split.test.tolist()])


def held_out_sizes(data: DataConfig) -> tuple[int, int]:
    """How many validation and test pairs the seeded split cuts from the training pairs: tsv and
    dates cut both; line-aligned files only a split whose prefix is empty (the others have files)."""
    if data.format != "parallel":
        return data.valid_size, data.test_size
    return 0 if data.valid_prefix else data.valid_size, 0 if data.test_prefix else data.test_size


def dates_pairs(data: DataConfig) -> list[Pair]:
    """The dates format's pairs: data.num_pairs of them (0: 24,000), generated from data.seed."""
    return generate_dates(data.num_pairs or 24000, seed=data.seed)


@dataclass
class ParallelFiles:
    """The line-aligned files data.path holds, each a (source, target) pair of paths."""

    train: list[tuple[Path, Path]]      # each training corpus's, in data.train_prefix's order
    valid: Optional[tuple[Path, Path]]  # None: cut from the training pairs (data.valid_prefix "")
    test: Optional[tuple[Path, Path]]


def _parallel_files(data: DataConfig, folder: Path) -> ParallelFiles:
    """The files of each split in `folder`; a missing one is one line naming the setting to change."""
    def files(prefix: str, hint: str) -> tuple[Path, Path]:
        try:
            return find_split_file(folder, prefix, data.src_lang), find_split_file(folder, prefix, data.tgt_lang)
        except AttnmtError as err:
            raise AttnmtError(f"{err}{hint}{_prefixes_note(data, folder)}") from None

    def held_out(split: str, name: str) -> Optional[tuple[Path, Path]]:
        prefix, size = getattr(data, f"{split}_prefix"), getattr(data, f"{split}_size")
        return files(prefix, f"; data.{split}_prefix={prefix} names the {name} files, and data.{split}_prefix=\"\" cuts "
                             f"data.{split}_size={size} {name} pairs from the training pairs instead") if prefix else None

    train = [files(prefix, "; data.train_prefix names the training files") for prefix, _ in training_corpora(data)]
    return ParallelFiles(train, held_out("valid", "validation"), held_out("test", "test"))


def _prefixes_note(data: DataConfig, folder: Path) -> str:
    """Which line-aligned pairs of files `folder` does hold, for an error about one it lacks."""
    def prefixes(lang: str) -> set[str]:
        return {p.name.removesuffix(".gz")[: -len(lang) - 1] for pattern in (f"*.{lang}", f"*.{lang}.gz")
                for p in folder.glob(pattern)}

    pairs = sorted(prefixes(data.src_lang) & prefixes(data.tgt_lang))
    return (f" (the folder holds PREFIX.{data.src_lang} and PREFIX.{data.tgt_lang} for the prefixes {', '.join(pairs)})"
            if pairs else f" (the folder holds no PREFIX.{data.src_lang} and PREFIX.{data.tgt_lang} files)")


def _format_reads(data: DataConfig, form: str) -> str:
    """What a data.format reads, in words a user recognizes."""
    if form == "tsv":
        return "a file of TAB-separated pairs, English first (a manythings/Tatoeba file such as deu.txt.gz)"
    return f"a folder of line-aligned files PREFIX.{data.src_lang} and PREFIX.{data.tgt_lang} (e.g. train.{data.src_lang})"


@dataclass
class CorpusFiles:
    """The raw files of the corpus data.format and data.path name: neither field for the generated dates."""

    tsv: Optional[Path] = None                # the file of TAB-separated pairs
    parallel: Optional[ParallelFiles] = None  # each split's line-aligned files


def anchored(data: DataConfig) -> DataConfig:
    """data.path as a model file keeps it: a relative path that exists made absolute, so that a later
    `attnmt evaluate MODEL --split test` finds it from any folder; a corpus's name stays as given."""
    path = Path(data.path)
    if not data.path or path.is_absolute() or not path.exists():
        return data
    return replace(data, path=str(path.resolve()))


def check_source(data: DataConfig) -> CorpusFiles:
    """The raw files data.path names (a known corpus's name: its files, downloaded once), found
    before anything is read or generated; one line naming the setting to change if data.format
    cannot read data.path (naming both keys and the format that fits) or a split's files are
    missing. load_corpus, preparing and `attnmt train` (before torch loads) all start here."""
    if data.format == "dates":
        return CorpusFiles()
    path = Path(data.path)
    if data.path and not path.exists() and is_corpus_name(data.path):
        check_settings(data.path, data.format, (data.src_lang, data.tgt_lang))
        path = resolve(data.path)
    if not (path.is_dir() if data.format == "parallel" else path.is_file()):
        raise AttnmtError(f"data.path: {path}: {_what_fits(data, path)}")
    return CorpusFiles(parallel=_parallel_files(data, path)) if data.format == "parallel" else CorpusFiles(tsv=path)


def _what_fits(data: DataConfig, path: Path) -> str:
    """Why data.format cannot read `path`, and what would: the other format, or (for one of the
    line-aligned files) its folder."""
    folder = data.format == "parallel"
    reads = f"data.format={data.format} reads {_format_reads(data, data.format)}"
    if not path.exists():
        where = "" if path.is_absolute() else f" (a relative path, read from the current folder, {Path.cwd()})"
        return f"{'folder' if folder else 'file'} not found{where}; {reads}"
    if path.is_dir():
        return f"a folder, not a regular file; {reads}; for {_format_reads(data, 'parallel')} set data.format=parallel"
    if not path.is_file():
        return f"{'not a folder' if folder else 'not a regular file'}; {reads}"
    if path.name.removesuffix(".gz").endswith((f".{data.src_lang}", f".{data.tgt_lang}")):
        return (f"a file, not a folder; {reads}: for line-aligned files like this one, set data.path to their folder, "
                f"{path.parent}")
    return f"a file, not a folder; {reads}; for {_format_reads(data, 'tsv')} set data.format=tsv"


def load_corpus(config: DataConfig) -> Corpus:
    """The corpus the config names, as (source, target) pairs."""
    files = check_source(config)
    held_out = held_out_sizes(config)
    if files.parallel is None:
        if files.tsv is None:
            pairs = dates_pairs(config)
        else:
            english_first = read_tsv(files.tsv, config.max_pairs)
            pairs = english_first if config.src_lang == "en" else [(o, e) for e, o in english_first]
        return split_pairs(pairs, *held_out, config.seed)
    train: list[Pair] = []
    starts: list[int] = []  # each training corpus's first pair
    for src, tgt in files.parallel.train:  # max_pairs in all; every file is still read to its end
        starts.append(len(train))
        train += read_parallel(src, tgt, config.max_pairs - len(train) if config.max_pairs else None)
    corpus = split_pairs(train, *held_out, config.seed, starts)
    valid, test = files.parallel.valid, files.parallel.test
    corpus.valid = read_parallel(*valid) if valid else corpus.valid
    corpus.test = read_parallel(*test) if test else corpus.test
    return corpus
