"""argparse as the `attnmt` command uses it: one-line errors, and numeric flags with their range."""

from __future__ import annotations

import argparse
import typing

from ..config import Range, field_range
from ..errors import did_you_mean, nearest
from ..files import model_file

# What build_parser adds the commands to; each command's module adds its own (`add_<command>`).
Commands = argparse._SubParsersAction


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (`attnmt: error: ...`) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # One `attnmt:` prefix; the command is named by the help it points to.
        self.exit(2, f"attnmt: error: {message} (see {self.prog} --help)\n")

    def unrecognized(self, command: str, extra: list[str]) -> None:
        """Refuse arguments `command` does not take, suggesting its nearest flag to each mistyped one."""
        sub = next(a for a in self._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
        flags = [flag for action in sub._actions for flag in action.option_strings]
        near = {flag for typed in extra if typed.startswith("-") for flag in _nearest(typed.split("=")[0], flags)}
        sub.error(f"unrecognized arguments: {' '.join(extra)}{did_you_mean(sorted(near))}")

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # A mistyped command gets the nearest commands, not "argument COMMAND: invalid choice" and all of them.
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            near = nearest(str(value), action.choices, n=3)
            hint = did_you_mean(near) if near else f"; the commands are {', '.join(action.choices)}"
            raise argparse.ArgumentError(None, f"unknown command {value!r}{hint}")
        super()._check_value(action, value)


def _nearest(typed: str, flags: list[str]) -> list[str]:
    """The flags `typed` was likeliest meant as: one it extends or abbreviates (--beam-size: --beam),
    else the nearest by spelling."""
    return ([flag for flag in flags if typed.startswith(flag + "-") or (len(typed) > 3 and flag.startswith(typed))]
            or nearest(typed, flags))


class Number:
    """An argparse type: an int or float within a Range, named in the message if not; or one of
    `words` (plot --head: mean, or a head from 1)."""

    def __init__(self, kind: type, allowed: Range, words: tuple[str, ...] = ()):
        self.kind, self.range, self.words = kind, allowed, words
        self.__name__ = "an integer" if kind is int else "a number"  # argparse's "invalid <name> value"

    def __call__(self, text: str) -> float | str:
        if text in self.words:
            return text
        try:
            value = self.kind(text)
        except ValueError:
            expected = " or ".join([*self.words, self.__name__])
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        refusal = self.range.refusal(value)
        if refusal:
            raise argparse.ArgumentTypeError(refusal)
        return value


def number_flag(cls: type, name: str) -> Number:
    """The argparse type of a flag that sets the config field `cls.name`."""
    return Number(typing.get_type_hints(cls)[name], field_range(cls, name))


def model_argument(text: str) -> str:
    """An argparse type: a model file, or a training run's folder standing for the model file in it."""
    return str(model_file(text))
