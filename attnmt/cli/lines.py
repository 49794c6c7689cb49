"""Where a command's lines come from (a file, or stdin) and where its output goes (stdout, or a file
written whole)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import AttnmtError


def input_lines(path: str | None) -> Iterator[str]:
    """The lines of a file, or of stdin for None or "-", read as they are asked for."""
    from ..corpus.readers import decode_lines, read_lines

    if path is None or path == "-":
        return decode_lines(sys.stdin.buffer, "<stdin>")
    return read_lines(path)


def read_pairs(first: tuple[str, str], second: tuple[str, str]) -> list[tuple[str, str]]:
    """The lines of two files, each given as (flag, path), paired line by line; refused in one line
    if their counts differ."""
    (first_flag, first_path), (second_flag, second_path) = first, second
    firsts, seconds = list(input_lines(first_path)), list(input_lines(second_path))
    if len(firsts) != len(seconds):
        raise AttnmtError(f"{first_flag} {first_path} has {len(firsts)} lines but {second_flag} {second_path} has "
                          f"{len(seconds)}: they pair line by line")
    return list(zip(firsts, seconds))


@contextmanager
def output(path: str | None) -> Iterator[Callable[[str], object]]:
    """A function that writes text where the output goes, as it is done: to stdout at once, to a
    file (path) only when the block ends without an error, through files.atomic_writer."""
    from ..files import atomic_writer

    if path is None or path == "-":
        def write(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()  # a reader of the pipe gets each chunk when it is done

        yield write
    else:
        with atomic_writer(path) as handle:
            yield lambda text: handle.write(text.encode("utf-8"))
