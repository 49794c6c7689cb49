"""Text to tokens and back: a Unicode-aware word tokenizer and a character tokenizer."""

from __future__ import annotations

import re
import unicodedata

# Spaces that str.split() may or may not treat as such, all made plain spaces.
_SPACES = dict.fromkeys(map(ord, "\u00a0\u202f\u2007\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2008\u2009\u200a\u3000\t\r\n\x0b\x0c"), " ")
# Invisible characters that only split or join words by accident: zero-width space, soft hyphen,
# word joiner, BOM. ZWJ/ZWNJ (U+200D, U+200C) are kept: Devanagari and Persian spell with them.
_DROP = dict.fromkeys(map(ord, "\u200b\u00ad\u2060\ufeff"), None)

SPACE_SYMBOL = "\u2581"  # how the char tokenizer shows a space: "▁"

_NO_SPACE_BEFORE = set(".,!?;:%)]}…»”")
_NO_SPACE_AFTER = set("([{¿¡«‚")
_PLAIN_QUOTES = set("\"'‘’")
_JOINERS = set("-/")
_CONTRACTION_ENDS = {"s", "t", "re", "ve", "ll", "d", "m"}


def normalize(text: str) -> str:
    """NFC, odd spaces made plain, invisible junk removed, runs of spaces collapsed."""
    text = unicodedata.normalize("NFC", text).translate(_SPACES).translate(_DROP)
    return re.sub(" +", " ", text).strip()


def _word_pattern() -> re.Pattern:
    # A word is a run of letters, digits and combining marks (Devanagari vowel signs are marks,
    # which `\w` alone misses) and ZWJ/ZWNJ; any other visible character is a token of its own.
    marks = [chr(c) for c in range(0x300, 0x10000) if unicodedata.category(chr(c)).startswith("M")]
    word_class = "\\w\u200c\u200d" + "".join(re.escape(m) for m in marks)
    return re.compile(f"[{word_class}]+|\\S")


_WORD = _word_pattern()


class WordTokenizer:
    """Words are runs of letters, digits and marks; every other visible character is a token."""

    level = "word"

    def __init__(self, lowercase: bool = False):
        self.lowercase = lowercase

    def tokenize(self, text: str) -> list[str]:
        text = normalize(text)
        if self.lowercase:
            text = text.lower()
        return _WORD.findall(text)

    def detokenize(self, tokens: list[str]) -> str:
        """Join tokens with the spacing rules of ordinary prose (tokenizing forgot the spaces)."""
        out = ""
        attach_next = True  # no space before the first token
        open_quotes: set[str] = set()
        for i, token in enumerate(tokens):
            prev = tokens[i - 1] if i > 0 else ""
            following = tokens[i + 1] if i + 1 < len(tokens) else ""
            attach, attach_next_now = attach_next, False
            if token in ".,:" and prev.isdigit() and following.isdigit():
                attach = attach_next_now = True                   # 3,500  2:30  1.5
            elif token in "'’" and prev[-1:].isalnum() and following.lower() in _CONTRACTION_ENDS:
                attach = attach_next_now = True                   # don ' t -> don't
            elif token in _JOINERS and prev[-1:].isalnum() and following[:1].isalnum():
                attach = attach_next_now = True                   # self - confidence, and / or
            elif token in _PLAIN_QUOTES or token in "„“":
                # A quote that closes one opened earlier hugs the text before it, else the text after.
                opener = "„" if token == "“" and "„" in open_quotes else token
                if opener in open_quotes:
                    open_quotes.discard(opener)
                    attach = True
                else:
                    open_quotes.add(token)
                    attach_next_now = True
            elif token in _NO_SPACE_BEFORE:
                attach = True
            elif token in _NO_SPACE_AFTER:
                attach_next_now = True
            out += token if attach or not out else " " + token
            attach_next = attach_next_now
        return out

    def to_dict(self) -> dict:
        return {"level": self.level, "lowercase": self.lowercase}


class CharTokenizer:
    """One token per character; a space becomes SPACE_SYMBOL so it stays visible in plots."""

    level = "char"

    def __init__(self, lowercase: bool = False):
        self.lowercase = lowercase

    def tokenize(self, text: str) -> list[str]:
        text = normalize(text)
        if self.lowercase:
            text = text.lower()
        return [SPACE_SYMBOL if c == " " else c for c in text]

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(" " if t == SPACE_SYMBOL else t for t in tokens)

    def to_dict(self) -> dict:
        return {"level": self.level, "lowercase": self.lowercase}


Tokenizer = WordTokenizer | CharTokenizer


def make_tokenizer(level: str, lowercase: bool = False) -> Tokenizer:
    return {"word": WordTokenizer, "char": CharTokenizer}[level](lowercase)


def tokenizer_from_dict(values: dict) -> Tokenizer:
    return make_tokenizer(values["level"], values["lowercase"])
