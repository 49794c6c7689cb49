"""A text of many sentences: cut into the sentences a model translates, translated in one batch, and put
together again with the source's own spacing and line breaks (docs/documents.md)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from ..search import SearchSettings
from ..translate import CHUNK, TextTranslator, Translation
from .sentences import Span, cut_to_fit, line_spans, sentence_spans

LINE_BREAK = "\n"   # the token that stands for a line break between two sentences of a joined translation


@dataclass(frozen=True)
class Segmented:
    """A text and the spans of its sentences, in order; what lies around and between them is kept as written."""

    text: str
    spans: list[Span]

    @property
    def sentences(self) -> list[str]:
        return [self.text[start:end] for start, end in self.spans]

    def join(self, translations: list[Translation]) -> Translation:
        """The sentences' translations (one each, in order) in their sentences' places: the text between and
        around them as the source has it; the tokens with a LINE_BREAK token for each line break between
        two sentences (none between sentences of one line), the source's alike; log-probabilities added
        (the sentences are decoded independently); the attention block-diagonal (each sentence's output
        attends to its own source only; the line breaks' rows and columns are 0), or None if a sentence has
        none; the sentences' translations kept as its parts. A text that is one sentence and nothing else gets
        that sentence's translation unchanged."""
        if len(translations) == 1 and self.spans == [(0, len(self.text))]:
            return translations[0]
        gaps = [self.text[end:start] for (_, end), (start, _) in zip([(0, 0)] + self.spans, self.spans + [(len(self.text), 0)])]
        text = gaps[0] + "".join(t.text + gap for t, gap in zip(translations, gaps[1:]))
        breaks = [[LINE_BREAK] * gap.count("\n") for gap in [""] + gaps[1:-1]]
        tokens = [t for before, line in zip(breaks, translations) for t in before + line.tokens]
        source_tokens = [t for before, line in zip(breaks, translations) for t in before + line.source_tokens]
        attention = None
        if all(t.attention is not None for t in translations):
            attention = np.zeros((len(tokens), len(source_tokens)), dtype=np.float32)
            row = col = 0
            for before, t in zip(breaks, translations):
                assert t.attention is not None
                row, col = row + len(before), col + len(before)
                attention[row: row + len(t.tokens), col: col + len(t.source_tokens)] = t.attention
                row, col = row + len(t.tokens), col + len(t.source_tokens)
        return Translation(text, tokens, source_tokens, attention, sum(t.log_prob for t in translations),
                           parts=list(translations))


def segment(text: str, language: Optional[str], fits: Optional[Callable[[str], bool]] = None) -> Segmented:
    """`text` cut into sentences by the rules of `language` (sentences.sentence_spans), or, with None, a
    line a sentence; each then cut where it is too long to translate whole (`fits` says what is not)."""
    spans = sentence_spans(text, language) if language else line_spans(text)
    if fits is not None:
        spans = [part for span in spans for part in cut_to_fit(text, span, fits)]
    return Segmented(text, spans)


def joined_nbests(documents: list[Segmented], nbests: list[list[Translation]], n_best: int) -> list[list[Translation]]:
    """Each document's n-best list out of its sentences' (`nbests`: every document's sentences' lists, one
    document after another): the n-th joins each sentence's n-th (its last, for a sentence with fewer);
    a document without a sentence has one translation, its white space."""
    joined, start = [], 0
    for document in documents:
        group = nbests[start: start + len(document.spans)]
        start += len(document.spans)
        ranks = n_best if group else 1
        joined.append([document.join([nbest[min(rank, len(nbest) - 1)] for nbest in group]) for rank in range(ranks)])
    return joined


def translate_texts(translator: TextTranslator, texts: list[str], settings: SearchSettings,
                    language: Optional[str] = None, split: bool = True) -> list[list[Translation]]:
    """The n-best translations of whole texts: each cut into sentences by the rules of `language` (default:
    the model's first source language), or a line a sentence with `split` False; a sentence over the
    model's decode.max_src_len cut at a clause end; all the texts' sentences decoded together; each text
    put together again (Segmented.join)."""
    if split and language is None:
        language = translator.source_languages()[0]
    documents = [segment(text, language if split else None, translator.fits) for text in texts]
    sentences = (sentence for document in documents for sentence in document.sentences)
    nbests = [nbest for chunk in translator.stream(sentences, settings) for nbest in chunk]
    return joined_nbests(documents, nbests, settings.n_best)


def stream_texts(translator: TextTranslator, texts: Iterable[str], settings: SearchSettings,
                 language: Optional[str] = None, split: bool = True) -> Iterator[list[list[Translation]]]:
    """translate_texts of texts as they come (a file's lines): CHUNK batches' worth of texts at a time,
    their n-best lists yielded in order before more are read."""
    texts = iter(texts)
    while chunk := list(itertools.islice(texts, CHUNK * (settings.batch_size or 1))):
        yield translate_texts(translator, chunk, settings, language, split)
