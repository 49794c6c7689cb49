"""The one exception type for mistakes a user can fix: the CLI prints it as one line; and the words every
such line shares (the first line of another error, the name a mistyped one was likeliest meant as)."""

import difflib
from typing import Iterable


class AttnmtError(Exception):
    """A user error (bad file, bad config, bad model file); the message says what and where."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name if it has none), for a one-line error."""
    return (str(err).splitlines() or [type(err).__name__])[0]


def nearest(typed: str, names: Iterable[str], n: int = 1) -> list[str]:
    """The names (at most `n`) `typed` was likeliest meant as, by spelling."""
    return difflib.get_close_matches(typed, list(names), n=n)


def did_you_mean(meant: Iterable[str]) -> str:
    """ " (did you mean a or b?)" for the names a mistyped one was likeliest meant as, "" for none: how every
    refusal of a mistyped key, field, flag or command ends."""
    meant = list(meant)
    return f" (did you mean {' or '.join(meant)}?)" if meant else ""
