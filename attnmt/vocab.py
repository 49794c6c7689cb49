"""Token <-> id maps with the four special tokens: padding, unknown, start and end of a sentence."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from .tokenize import Tokenizer, tokenizers_from_dicts

PAD, UNK, SOS, EOS = "<pad>", "<unk>", "<sos>", "<eos>"
SPECIALS = (PAD, UNK, SOS, EOS)
PAD_ID, UNK_ID, SOS_ID, EOS_ID = range(4)


class Vocabulary:
    """attnmt's own vocabularies keep the specials first, ids 0-3 (`Vocabulary(tokens)`); an imported
    model's keeps its own ids (`from_list` with its ids): padding is id 0 in every vocabulary (every
    embedding's padding row), the unknown, start and end tokens may be anywhere. A Marian model, for
    one, starts decoding from its <pad> and ends with its </s>."""

    pad_id = PAD_ID

    def __init__(self, tokens: Iterable[str]):
        """`tokens` are the ordinary tokens; the specials come first, with ids 0-3."""
        self.itos: list[str] = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}
        self.unk_id, self.sos_id, self.eos_id = UNK_ID, SOS_ID, EOS_ID

    @classmethod
    def build(cls, sentences: Iterable[list[str]], min_freq: int = 1, max_size: int = 50000) -> "Vocabulary":
        """Most frequent tokens first (ties alphabetical, so the result never depends on order)."""
        return cls.from_counts(Counter(token for sentence in sentences for token in sentence), min_freq, max_size)

    @classmethod
    def from_counts(cls, counts: Mapping[str, int], min_freq: int = 1, max_size: int = 50000) -> "Vocabulary":
        """The tokens seen at least `min_freq` times, most frequent first (ties alphabetical), at most
        `max_size` with the specials."""
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        return cls(ranked[: max(0, max_size - len(SPECIALS))])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Ids to tokens, stopping at the first EOS."""
        tokens = []
        for i in ids:
            if i == self.eos_id:
                break
            tokens.append(self.itos[i])
        return tokens

    @property
    def sos(self) -> str:
        """The start token: what a decoder reads before its first output (<pad> in Marian's vocabularies)."""
        return self.itos[self.sos_id]

    @property
    def eos(self) -> str:
        """The end-of-sentence token."""
        return self.itos[self.eos_id]

    def to_list(self) -> list[str]:
        return list(self.itos)

    def special_ids(self) -> dict[str, int]:
        """The unknown, start and end tokens' ids, as model files keep them."""
        return {"unk": self.unk_id, "sos": self.sos_id, "eos": self.eos_id}

    @classmethod
    def from_list(cls, itos: list[str], special_ids: Optional[Mapping[str, int]] = None) -> "Vocabulary":
        """A vocabulary of these tokens by id: attnmt's own (the specials first), or, given `special_ids`
        (unk, sos, eos), an imported model's, whose padding token is id 0 and the others where it says."""
        if special_ids is None or dict(special_ids) == {"unk": UNK_ID, "sos": SOS_ID, "eos": EOS_ID}:
            if list(itos[:4]) != list(SPECIALS):
                raise ValueError("vocabulary must start with " + " ".join(SPECIALS))
            return cls(itos[4:])
        if len(set(itos)) != len(itos):
            raise ValueError("a vocabulary lists each token once")
        if not all(0 <= special_ids[name] < len(itos) for name in ("unk", "sos", "eos")):
            raise ValueError(f"special token ids {dict(special_ids)} outside the vocabulary of {len(itos)}")
        vocabulary = cls.__new__(cls)
        vocabulary.itos, vocabulary.stoi = list(itos), {t: i for i, t in enumerate(itos)}
        vocabulary.unk_id, vocabulary.sos_id, vocabulary.eos_id = (special_ids[n] for n in ("unk", "sos", "eos"))
        return vocabulary


Example = tuple[list[int], list[int]]  # (source ids, target ids), no specials


@dataclass
class Tokenization:
    """How text becomes ids on each side: two tokenizers (one object when a subword model is joint)
    and two vocabularies (one object when joint). They travel together: model files, checkpoints
    and prepared corpora carry them as `to_dict()` gives them."""

    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary

    def to_dict(self) -> dict:
        return {"src_tokenizer": self.src_tokenizer.to_dict(), "tgt_tokenizer": self.tgt_tokenizer.to_dict(),
                "src_vocab": self.src_vocab.to_list(), "tgt_vocab": self.tgt_vocab.to_list(),
                "src_special_ids": self.src_vocab.special_ids(), "tgt_special_ids": self.tgt_vocab.special_ids()}

    @classmethod
    def from_dict(cls, values: dict) -> "Tokenization":
        """The tokenization a model file holds; files written before vocabularies said where their
        special tokens are have attnmt's own order."""
        src_tokenizer, tgt_tokenizer = tokenizers_from_dicts(values["src_tokenizer"], values["tgt_tokenizer"])
        src_vocab = Vocabulary.from_list(values["src_vocab"], values.get("src_special_ids"))
        tgt_vocab = (src_vocab if (values["tgt_vocab"], values.get("tgt_special_ids")) ==
                     (values["src_vocab"], values.get("src_special_ids"))
                     else Vocabulary.from_list(values["tgt_vocab"], values.get("tgt_special_ids")))
        return cls(src_tokenizer, tgt_tokenizer, src_vocab, tgt_vocab)

    def examples(self, pairs: Iterable[tuple[str, str]], max_len: int) -> list[Example]:
        """The pairs as ids, leaving out those with an empty side or more than `max_len` tokens on one."""
        tokenized = ((self.src_tokenizer.tokenize(s), self.tgt_tokenizer.tokenize(t)) for s, t in pairs)
        return [(self.src_vocab.encode(s), self.tgt_vocab.encode(t)) for s, t in tokenized
                if 0 < len(s) <= max_len and 0 < len(t) <= max_len]
