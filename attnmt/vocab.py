"""Token <-> id maps with the four special tokens."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

PAD, UNK, SOS, EOS = "<pad>", "<unk>", "<sos>", "<eos>"
SPECIALS = (PAD, UNK, SOS, EOS)
PAD_ID, UNK_ID, SOS_ID, EOS_ID = range(4)


class Vocabulary:
    def __init__(self, tokens: Iterable[str]):
        """`tokens` are the ordinary tokens; the specials come first, with ids 0-3."""
        self.itos: list[str] = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, sentences: Iterable[list[str]], min_freq: int = 1, max_size: int = 50000) -> "Vocabulary":
        """Most frequent tokens first (ties alphabetical, so the result never depends on order)."""
        counts = Counter(token for sentence in sentences for token in sentence)
        ranked = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        return cls(ranked[: max(0, max_size - len(SPECIALS))])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Ids to tokens, stopping at the first EOS."""
        tokens = []
        for i in ids:
            if i == EOS_ID:
                break
            tokens.append(self.itos[i])
        return tokens

    def to_list(self) -> list[str]:
        return list(self.itos)

    @classmethod
    def from_list(cls, itos: list[str]) -> "Vocabulary":
        if list(itos[:4]) != list(SPECIALS):
            raise ValueError("vocabulary must start with " + " ".join(SPECIALS))
        return cls(itos[4:])
