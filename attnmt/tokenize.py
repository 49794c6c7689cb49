"""Text to tokens and back: a Unicode-aware word tokenizer, a character tokenizer, sentencepiece
subwords trained here, and a pretrained sentencepiece model used as an imported model gives it."""

from __future__ import annotations

import base64
import io
import re
import unicodedata
from abc import ABC, abstractmethod
from typing import Iterable, Iterator, Optional, Sequence

import sentencepiece

from .errors import AttnmtError

# Every character str.isspace() accepts (tabs, line breaks, the ASCII separators \x1c-\x1f, NEL,
# no-break, typographic and ideographic spaces, line and paragraph separators): str.split() splits
# at all of them, so normalize makes each run of them one plain space (hypothesis found \x1f).
WHITE_SPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
               "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
# Invisible characters that only split or join words by accident: zero-width space, soft hyphen,
# word joiner, BOM. ZWJ/ZWNJ (U+200D, U+200C) are kept: Devanagari and Persian spell with them.
_DROP_CHARACTERS = "\u200b\u00ad\u2060\ufeff"
_DROP = dict.fromkeys(map(ord, _DROP_CHARACTERS), None)
_ANY_DROP = re.compile(f"[{_DROP_CHARACTERS}]")

SPACE_SYMBOL = "\u2581"  # how the char tokenizer shows a space: "▁"

_NO_SPACE_BEFORE = set(".,!?;:%)]}…»”")
_NO_SPACE_AFTER = set("([{¿¡«‚")
_PLAIN_QUOTES = set("\"'‘’")
_JOINERS = set("-/")
_CONTRACTION_ENDS = {"s", "t", "re", "ve", "ll", "d", "m"}


def normalize(text: str) -> str:
    """NFC, invisible junk removed, each run of white space (WHITE_SPACE) one plain space, none at the ends."""
    text = unicodedata.normalize("NFC", text)
    if _ANY_DROP.search(text):  # str.translate with a mapping costs more than all the rest: only when needed
        text = text.translate(_DROP)
    return " ".join(text.split())


def _word_pattern() -> re.Pattern:
    # A word is a run of letters, digits and combining marks (Devanagari vowel signs are marks,
    # which `\w` alone misses) and ZWJ/ZWNJ; any other visible character is a token of its own.
    marks = [chr(c) for c in range(0x300, 0x10000) if unicodedata.category(chr(c)).startswith("M")]
    word_class = "\\w\u200c\u200d" + "".join(re.escape(m) for m in marks)
    return re.compile(f"[{word_class}]+|\\S")


_WORD = _word_pattern()


class BaseTokenizer(ABC):
    """Normalization and settings shared by the tokenizers; subclasses split and join."""

    level = ""
    word_separator = ""  # the token between two words, if the tokenizer writes one

    def __init__(self, lowercase: bool = False):
        self.lowercase = lowercase

    def prepare(self, text: str) -> str:
        text = normalize(text)
        return text.lower() if self.lowercase else text

    def to_dict(self) -> dict:
        return {"level": self.level, "lowercase": self.lowercase}

    @abstractmethod
    def tokenize(self, text: str) -> list[str]: ...

    def pieces(self) -> Optional[list[str]]:
        """The fixed inventory of tokens, indexed by id (a subword model's pieces), or None: words and
        characters are open-ended."""
        return None

    def encode_batch(self, texts: list[str], index: dict[str, int]) -> list[list[int]]:
        """Each text's tokens as ids: here ids of `index`, which gives each new token the next id;
        a tokenizer with pieces() gives piece ids instead (and leaves `index` alone)."""
        return [[index.setdefault(token, len(index)) for token in self.tokenize(text)] for text in texts]

    @abstractmethod
    def detokenize(self, tokens: list[str]) -> str: ...

    def tokenize_words(self, words: list[str]) -> tuple[list[str], list[int]]:
        """The tokens of a sentence given as words (split at whitespace), and for each token the
        index of the word it came from: each word is tokenized alone, which is how every
        tokenizer here splits a sentence anyway (none joins across a space). The character
        tokenizer's spaces between words belong to no word (-1)."""
        tokens: list[str] = []
        owners: list[int] = []
        for index, word in enumerate(words):
            if index and self.word_separator:
                tokens.append(self.word_separator)
                owners.append(-1)
            pieces = self.tokenize(word)
            tokens += pieces
            owners += [index] * len(pieces)
        return tokens, owners


def _is_punctuation(token: str) -> bool:
    text = token.replace(SPACE_SYMBOL, "")
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


# A word of a reader's view as characters [start, end) of the whitespace word `word` it is cut from.
Span = tuple[int, int, int]


def punctuation_apart(words: list[str], tokens: list[str], owners: list[int]) -> tuple[list[str], list[int], list[Span]]:
    """Words as a reader sees them: the punctuation tokens at the start or the end of a whitespace word
    become a word of their own ("today." -> "today", "."), where their text is the word's ends (a
    word of punctuation alone, or a mark inside a word, stays as it is). `tokens` and `owners` are
    tokenize_words'; gives the new words, each token's new owner (-1 stays -1) and each new word's Span."""
    new_words: list[str] = []
    new_owners, spans = list(owners), []
    for index, word in enumerate(words):
        mine = [j for j, owner in enumerate(owners) if owner == index]
        texts = [tokens[j].replace(SPACE_SYMBOL, "") for j in mine]
        marks = [_is_punctuation(text) for text in texts]
        lead = next((k for k, mark in enumerate(marks) if not mark), 0)            # all marks: no cut
        trail = next((k for k, mark in enumerate(reversed(marks)) if not mark), 0)
        head, tail = "".join(texts[:lead]), "".join(texts[len(texts) - trail:])
        if not word.startswith(head) or not word.endswith(tail) or len(head) + len(tail) >= len(word):
            lead, trail, head, tail = 0, 0, "", ""                                   # normalized away: no cut
        cuts = [(mine[:lead], 0, len(head)), (mine[lead:len(mine) - trail], len(head), len(word) - len(tail)),
                (mine[len(mine) - trail:], len(word) - len(tail), len(word))]
        for its_tokens, start, end in cuts:
            if start < end:
                for j in its_tokens:
                    new_owners[j] = len(new_words)
                new_words.append(word[start:end])
                spans.append((index, start, end))
    return new_words, new_owners, spans


def without_span(words: list[str], span: Span) -> list[str]:
    """The whitespace words without one word of punctuation_apart's (a word left empty goes)."""
    index, start, end = span
    kept = words[:index] + [words[index][:start] + words[index][end:]] + words[index + 1:]
    return [word for word in kept if word]


def _day_and_year(mark: str, before: str, after: str) -> bool:
    """A day of one or two digits, a comma and a year of four, as in "May 3, 2021". (A thousands
    separator is followed by three digits, a decimal comma rarely by exactly four.)"""
    return mark == "," and len(before) <= 2 and len(after) == 4


class WordTokenizer(BaseTokenizer):
    """Words are runs of letters, digits and marks; every other visible character is a token."""

    level = "word"

    def tokenize(self, text: str) -> list[str]:
        return _WORD.findall(self.prepare(text))

    def detokenize(self, tokens: list[str]) -> str:
        """Join tokens with the spacing rules of ordinary prose (tokenizing forgot the spaces)."""
        out = ""
        attach_next = True  # no space before the first token
        open_quotes: set[str] = set()
        for i, token in enumerate(tokens):
            prev = tokens[i - 1] if i > 0 else ""
            following = tokens[i + 1] if i + 1 < len(tokens) else ""
            attach, attach_next_now = attach_next, False
            if token in ".,:" and prev.isdigit() and following.isdigit() and not _day_and_year(token, prev, following):
                attach = attach_next_now = True                   # 3,500  2:30  1.5  (May 3, 2021 keeps its space)
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


class CharTokenizer(BaseTokenizer):
    """One token per character; a space becomes SPACE_SYMBOL so it stays visible in plots."""

    level = "char"
    word_separator = SPACE_SYMBOL

    def tokenize(self, text: str) -> list[str]:
        return [SPACE_SYMBOL if c == " " else c for c in self.prepare(text)]

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(" " if t == SPACE_SYMBOL else t for t in tokens)


class SubwordTokenizer(BaseTokenizer):
    """sentencepiece BPE or unigram pieces; the trained model travels inside the model file."""

    def __init__(self, level: str, model: bytes, lowercase: bool = False):
        super().__init__(lowercase)
        self.level = level
        self.model = model
        self.processor = sentencepiece.SentencePieceProcessor(model_proto=model)

    @classmethod
    def train(cls, level: str, sentences: Iterable[str], vocab_size: int, lowercase: bool = False
              ) -> "SubwordTokenizer":
        """Learn `vocab_size` pieces (a soft limit for small corpora) from raw sentences."""
        texts = [normalize(s).lower() if lowercase else normalize(s) for s in sentences]
        model = io.BytesIO()
        stopped: list[BaseException] = []  # by a signal's handler (Ctrl-C, SIGTERM) while sentencepiece read

        def feed() -> Iterator[str]:
            try:
                yield from (t for t in texts if t)
            except (KeyboardInterrupt, SystemExit) as stop:  # sentencepiece reports it as a RuntimeError, traceback and all
                stopped.append(stop)
                raise

        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=feed(), model_writer=model, vocab_size=vocab_size,
                model_type=level, character_coverage=1.0, hard_vocab_limit=False,
                # We normalize before sentencepiece sees the text, and add BOS/EOS ourselves.
                normalization_rule_name="identity", bos_id=-1, eos_id=-1, num_threads=1, minloglevel=2,
            )
        except RuntimeError as err:
            if stopped:
                raise stopped[0] from None
            raise AttnmtError(f"cannot train the {level} subword model: {str(err).splitlines()[0]}") from None
        return cls(level, model.getvalue(), lowercase)

    def tokenize(self, text: str) -> list[str]:
        return self.processor.encode(self.prepare(text), out_type=str)

    def pieces(self) -> list[str]:
        return [self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())]

    def encode_batch(self, texts: list[str], index: dict[str, int]) -> list[list[int]]:
        # sentencepiece encodes the whole list in C++; a character no piece covers comes out as
        # the unknown piece (`<unk>`), where tokenize() returns the character itself.
        return self.processor.encode([self.prepare(text) for text in texts], out_type=int)

    def detokenize(self, tokens: list[str]) -> str:
        return self.processor.decode_pieces(tokens)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "model": base64.b64encode(self.model).decode("ascii")}


class SentencePieceTokenizer(BaseTokenizer):
    """A pretrained sentencepiece model used as given (tokenizer.level sentencepiece): an imported
    Hugging Face Marian model's source.spm or target.spm, splitting text exactly as transformers'
    MarianTokenizer does. The text goes to sentencepiece unchanged (its model's own normalization
    applies, not attnmt's `normalize`), except that
    - the special tokens (`specials`: </s>, <unk>, <pad>) written in the text are tokens of their own,
      the text cut around them, the leftmost and longest first;
    - a piece of text between them that starts with a language code `>>xx<<` (">>" up to the first
      "<<") has that code as a token of its own, before the pieces of the rest.
    Detokenizing leaves out the special tokens and joins the pieces with `decoder`'s model: Hugging
    Face decodes a model of one shared vocabulary with its source.spm, on both sides."""

    level = "sentencepiece"

    def __init__(self, model: bytes, specials: Sequence[str], decoder: Optional[bytes] = None):
        super().__init__(lowercase=False)
        self.model, self.specials, self.decoder = model, list(specials), decoder
        self.processor = sentencepiece.SentencePieceProcessor(model_proto=model)
        self.decoding = self.processor if decoder is None else sentencepiece.SentencePieceProcessor(model_proto=decoder)
        # Longest first: of two specials starting at one place, the longer is the token.
        longest_first = sorted(self.specials, key=len, reverse=True)
        self.special_split = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") if specials else None

    def tokenize(self, text: str) -> list[str]:
        tokens: list[str] = []
        parts = self.special_split.split(text) if self.special_split else [text]
        for index, part in enumerate(parts):
            if index % 2:                        # re.split puts what the group matched at the odd places
                tokens.append(part)
                continue
            if part.startswith(">>") and (end := part.find("<<")) != -1:
                tokens.append(part[: end + 2])
                part = part[end + 2:]
            if part:
                tokens += self.processor.encode(part, out_type=str)
        return tokens

    def detokenize(self, tokens: list[str]) -> str:
        kept = [token for token in tokens if token not in self.specials]
        return self.decoding.decode_pieces(kept).replace(SPACE_SYMBOL, " ").strip()

    def to_dict(self) -> dict:
        values = {**super().to_dict(), "model": base64.b64encode(self.model).decode("ascii"), "specials": self.specials}
        if self.decoder is not None:
            values["decoder"] = base64.b64encode(self.decoder).decode("ascii")
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "SentencePieceTokenizer":
        decoder = values.get("decoder")
        return cls(base64.b64decode(values["model"]), values["specials"],
                   None if decoder is None else base64.b64decode(decoder))


Tokenizer = WordTokenizer | CharTokenizer | SubwordTokenizer | SentencePieceTokenizer


def make_tokenizer(level: str, lowercase: bool = False) -> Tokenizer:
    """A word or character tokenizer (subword ones are trained: SubwordTokenizer.train)."""
    kinds: dict[str, type[WordTokenizer] | type[CharTokenizer]] = {"word": WordTokenizer, "char": CharTokenizer}
    return kinds[level](lowercase)


def tokenizer_from_dict(values: dict) -> Tokenizer:
    if values["level"] == "sentencepiece":
        return SentencePieceTokenizer.from_dict(values)
    if values["level"] in ("bpe", "unigram"):
        return SubwordTokenizer(values["level"], base64.b64decode(values["model"]), values["lowercase"])
    return make_tokenizer(values["level"], values["lowercase"])


def tokenizers_from_dicts(source: dict, target: dict) -> tuple[Tokenizer, Tokenizer]:
    """The (source, target) tokenizers a model file describes; a joint subword model is loaded once."""
    src = tokenizer_from_dict(source)
    return src, src if target == source else tokenizer_from_dict(target)
