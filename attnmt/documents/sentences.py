"""Where the sentences of a paragraph begin and end, and where a sentence too long for the model is cut.

The splitter is sentencex (Wikimedia's, rules per language with fallbacks for ~300 languages), chosen
by measurement against pysbd, syntok and blingfire (bench/sentence_split.py; docs/documents.md says
why). A line break always ends a sentence: a line is a paragraph, or a title, or an item of a list.
"""

from __future__ import annotations

import re
from typing import Callable

import sentencex

# Where a clause may end, best first: after a semicolon or colon, then after a comma or a dash, then a space.
CLAUSE_ENDS = (re.compile(r"[;:]\s+"), re.compile(r"(?:,|\s[–—-])\s+"), re.compile(r"\s+"))

Span = tuple[int, int]   # [start, end) of a sentence in its text, its surrounding white space left out


def sentence_spans(text: str, language: str) -> list[Span]:
    """The sentences of `text` in the rules of `language` (an ISO 639 code; one sentencex lacks falls back
    to its nearest rules, or to the general ones), each a line's part without the white space around it."""
    spans = []
    for line in re.finditer(r"[^\n]+", text):
        for boundary in sentencex.get_sentence_boundaries(language, line.group()):
            span = _stripped(text, line.start() + boundary["start_index"], line.start() + boundary["end_index"])
            if span[0] < span[1]:
                spans.append(span)
    return spans


def line_spans(text: str) -> list[Span]:
    """Each non-blank line of `text` as one sentence, its white space left out (a text given a line a sentence)."""
    spans = [_stripped(text, line.start(), line.end()) for line in re.finditer(r"[^\n]+", text)]
    return [span for span in spans if span[0] < span[1]]


def cut_to_fit(text: str, span: Span, fits: Callable[[str], bool]) -> list[Span]:
    """`span` as it is if it fits, else cut in parts that fit: each part ends at the last clause end
    (CLAUSE_ENDS, in that order) that leaves it short enough; a part without a space that still does
    not fit is kept whole, and the tokenizer's limit then applies to it."""
    start, end = span
    if fits(text[start:end]):
        return [span]
    for clause_end in CLAUSE_ENDS:
        heads = [_stripped(text, start, m.end()) for m in clause_end.finditer(text, start, end) if m.end() < end]
        heads = [head for head in heads if fits(text[head[0]: head[1]])]
        if heads:
            rest = _stripped(text, heads[-1][1], end)
            return [heads[-1]] + cut_to_fit(text, rest, fits)
    return [span]


def _stripped(text: str, start: int, end: int) -> Span:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
