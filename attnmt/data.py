"""Reading parallel corpora: manythings TSV files, line-aligned files, and the built-in dates corpus."""

from __future__ import annotations

import gzip
import hashlib
import random
import typing
from array import array
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Protocol

from .config import DataConfig, training_corpora
from .corpora import is_corpus_name, resolve
from .dates import generate_dates
from .errors import AttnmtError

Pair = tuple[str, str]


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


def read_tsv(path: str | Path, max_pairs: int = 0) -> list[Pair]:
    """Read a manythings/Tatoeba file: `English<TAB>Other[<TAB>attribution]`; quotes are plain text.

    Returns (english, other) pairs; blank lines are skipped.
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if not 2 <= len(columns) <= 3:
            raise AttnmtError(
                f"{path}:{number}: expected 2 or 3 TAB-separated columns (English, translation, "
                f"attribution), found {len(columns)}"
            )
        pairs.append((columns[0], columns[1]))
        if max_pairs and len(pairs) >= max_pairs:
            break
    if not pairs:
        raise AttnmtError(f"{path}: no sentence pairs in file")
    return pairs


def find_split_file(directory: str | Path, prefix: str, lang: str) -> Path:
    """`DIR/prefix.lang`, or `DIR/prefix.lang.gz` if only that exists."""
    plain = Path(directory) / f"{prefix}.{lang}"
    for candidate in (plain, plain.with_name(plain.name + ".gz")):
        if candidate.is_file():
            return candidate
    raise AttnmtError(f"{plain}: file not found (nor {plain.name}.gz)")


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[Pair]:
    """Read two line-aligned files; line i of one translates line i of the other."""
    src = list(read_lines(src_path))
    tgt = list(read_lines(tgt_path))
    if len(src) != len(tgt):
        raise AttnmtError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
            "parallel files must have one line per sentence on both sides"
        )
    if not src:
        raise AttnmtError(f"{src_path}: no lines in file")
    return list(zip(src, tgt))


@dataclass
class Corpus:
    """Raw (source, target) sentence pairs of the three splits."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]


def split_pairs(pairs: list[Pair], valid_size: int, test_size: int, seed: int) -> Corpus:
    """Shuffle with `seed`, then cut off test and valid; the rest trains."""
    if valid_size + test_size >= len(pairs):
        raise AttnmtError(
            f"only {len(pairs)} pairs, too few for data.valid_size={valid_size} and data.test_size={test_size}"
        )
    shuffled = [pairs[i] for i in shuffled_order(len(pairs), seed)]
    test, valid = shuffled[:test_size], shuffled[test_size : test_size + valid_size]
    return Corpus(train=shuffled[test_size + valid_size :], valid=valid, test=test)


def shuffled_order(count: int, seed: int) -> array:
    """The seeded order of a corpus's pairs that the split cuts (test first, then valid, then
    train): pair indices, 8 bytes each; the same order as shuffling a list of the pairs."""
    order = array("q", range(count))
    random.Random(seed).shuffle(order)
    return order


def load_corpus(config: DataConfig) -> Corpus:
    """The corpus the config names, as (source, target) pairs."""
    path = config.path
    if path and not Path(path).exists() and is_corpus_name(path):
        path = str(resolve(path))
    if config.format == "dates":
        pairs = generate_dates(config.num_pairs or 24000, seed=config.seed)
        return split_pairs(pairs, config.valid_size, config.test_size, config.seed)
    if config.format == "tsv":
        english_first = read_tsv(path, config.max_pairs)
        pairs = english_first if config.src_lang == "en" else [(o, e) for e, o in english_first]
        return split_pairs(pairs, config.valid_size, config.test_size, config.seed)
    splits = []
    for prefixes in ([p for p, _ in training_corpora(config)], [config.valid_prefix], [config.test_prefix]):
        splits.append([pair for prefix in prefixes for pair in read_parallel(
            find_split_file(path, prefix, config.src_lang), find_split_file(path, prefix, config.tgt_lang))])
    if config.max_pairs:
        splits[0] = splits[0][: config.max_pairs]
    return Corpus(*splits)
