"""The built-in demo corpus: dates as people write them, in English and German, to ISO 8601.

Every format is unambiguous (US slashes are month/day, German dots are day.month; years have
four digits), so a perfect translator exists and exact match measures how close a model gets.
"""

from __future__ import annotations

import datetime
import random
from typing import Iterator

MONTHS_EN = ["January", "February", "March", "April", "May", "June", "July", "August",
             "September", "October", "November", "December"]
MONTHS_DE = ["Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August",
             "September", "Oktober", "November", "Dezember"]
DAYS_EN = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
DAYS_DE = ["Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"]

FIRST_DAY = datetime.date(1900, 1, 1).toordinal()
LAST_DAY = datetime.date(2099, 12, 31).toordinal()


def _ordinal(day: int) -> str:
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}" + {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _formats(d: datetime.date) -> list[str]:
    """The ways this date is written; the generator picks one at random."""
    y, m, day = d.year, d.month, d.day
    me, md = MONTHS_EN[m - 1], MONTHS_DE[m - 1]
    we, wd = DAYS_EN[d.weekday()], DAYS_DE[d.weekday()]
    return [
        # English
        f"{me} {day}, {y}",
        f"{me[:3]} {day}, {y}",
        f"{day} {me} {y}",
        f"{day} {me[:3]} {y}",
        f"{we}, {me} {day}, {y}",
        f"{we[:3]}, {day} {me[:3]} {y}",
        f"the {_ordinal(day)} of {me} {y}",
        f"{me} {_ordinal(day)}, {y}",
        f"{m:02d}/{day:02d}/{y}",
        f"{m}/{day}/{y}",
        f"{y}/{m:02d}/{day:02d}",
        # German
        f"{day}. {md} {y}",
        f"{wd}, {day}. {md} {y}",
        f"{wd}, den {day}. {md} {y}",
        f"am {day}. {md} {y}",
        f"{day:02d}.{m:02d}.{y}",
        f"{day}.{m}.{y}",
        f"{wd[:2]}., {day:02d}.{m:02d}.{y}",
        f"{day}. {md[:3]}. {y}",
    ]


def written_dates(seed: int = 1) -> Iterator[tuple[str, str]]:
    """(written date, ISO date) pairs drawn at random without end, repeats included."""
    rng = random.Random(seed)
    while True:
        date = datetime.date.fromordinal(rng.randint(FIRST_DAY, LAST_DAY))
        text = rng.choice(_formats(date))
        case = rng.random()
        if case < 0.1:
            text = text.lower()
        elif case < 0.15:
            text = text.upper()
        yield text, date.isoformat()


def generate_dates(n: int, seed: int = 1) -> list[tuple[str, str]]:
    """`n` distinct (written date, ISO date) pairs, the same for the same seed: the first of `written_dates`."""
    pairs: dict[str, str] = {}
    for text, iso in written_dates(seed):
        if len(pairs) >= n:
            break
        pairs.setdefault(text, iso)
    return list(pairs.items())
