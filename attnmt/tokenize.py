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

_NO_SPACE_BEFORE = set(".,!?;:%)]}…»")
_NO_SPACE_AFTER = set("([{¿¡«")


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
        """Join tokens with the spacing rules of ordinary prose (the split itself loses spaces)."""
        out = ""
        quote_open = False
        for i, token in enumerate(tokens):
            attach = not out or out[-1] in _NO_SPACE_AFTER or token in _NO_SPACE_BEFORE
            if token == '"':
                attach = attach or quote_open
                quote_open = not quote_open
            elif out.endswith('"') and quote_open:
                attach = True
            elif token == "'" and 0 < i < len(tokens) - 1 and tokens[i - 1][-1:].isalnum() and tokens[i + 1][:1].isalnum():
                attach = True  # don ' t -> don't
            elif out.endswith("'") and i >= 2 and tokens[i - 2][-1:].isalnum() and token[:1].isalnum():
                attach = True
            out += token if attach else " " + token
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
