"""Word alignments from attention (`attnmt align`), and their error rate against a gold standard.

A model reads each sentence pair with the target forced (teacher forcing on the given
translation), and its attention over the source, at the step that writes each target token, says
which source tokens that token came from. Luong et al. (2015, §5.4) read word alignments off it
and scored them against hand-made ones; this module does the same for any attnmt model:

    step      output: a target token's attention is that of the step that writes it (Luong's);
              input: that of the next step, which reads it as its input (Chen et al. 2020's
              shift-att, better for models that attend to the source of the word they read;
              docs/recipes.md measures both)

    pieces    the model's tokens; a word (whitespace token of the user's text) is split into
              pieces on its own, so each piece belongs to one word
    words     attention between words: the weights a target piece gives the pieces of a source
              word summed (that word's share of the attention), averaged over the target word's pieces
    links     argmax: each target word to the source word it attends most (Luong's rule);
              threshold: every pair whose word attention is at least `threshold`;
              aligner: not attention but the posteriors of the aligner trained for the model
              (aligner.py), each word to its most probable word of the other side unless NULL
              is more probable, in both directions, combined as below
    both ways given a second model translating the other way (or the aligner's second direction),
              its links (flipped) are combined: intersect, union, grow-diag or grow-diag-final
              (Koehn et al. 2003's heuristics); or average: the pairs whose weights of the two
              directions (attention, or the aligner's posteriors), averaged, reach one half

Links are (source word, target word) pairs, numbered from 0, written in the Pharaoh format `i-j`.
For a Transformer the attention is one layer's, the mean of its heads or one head; by default the
penultimate layer's mean (its cross-attention aligns best in Garg et al. 2019's study; the last
layer's attends to predict the next word more than to align).

Scores follow Och & Ney (2003): with gold sure links S ⊆ possible links P and predicted links A,
precision |A∩P|/|A|, recall |A∩S|/|S|, AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|), over the corpus.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..batch import pad
from ..choices import ALIGN_STEPS, ALIGNER, ATTENTION_METHODS, AVERAGE, LINK_THRESHOLD, MAX_JUMP_WEIGHT, SYMMETRIZATIONS
from ..errors import AttnmtError
from ..seam import AttentionView, require
from ..translate import AttentionMaps, TextTranslator, Translator, map_shapes
from .aligner import Aligner, piece_tensors, read_aligner, train_aligner

Link = tuple[int, int]                      # (source word, target word), from 0
WordPosterior = tuple[np.ndarray, np.ndarray]   # [written words, given words], and NULL's share [written words]


@dataclass
class WordAlignment:
    source_words: list[str]
    target_words: list[str]
    attention: np.ndarray                   # [len(target_words), len(source_words)]: word attention, or the
                                            # aligner's posterior (method aligner)
    links: list[Link]                       # sorted

    def __repr__(self) -> str:
        return (f"WordAlignment({len(self.links)} links between {len(self.source_words)} source and "
                f"{len(self.target_words)} target words: {' '.join(f'{s}-{t}' for s, t in self.links)})")

    def _repr_png_(self) -> Optional[bytes]:
        """Jupyter's picture of the alignment: the word attention (or the aligner's posterior), the
        links as dots."""
        if not self.source_words or not self.target_words:
            return None
        from ..plot import attention_figure, png_bytes

        return png_bytes(attention_figure(self.attention, self.source_words, self.target_words,
                                          axes=("source words", "target words"), links=self.links))


@dataclass
class GoldLinks:
    sure: set[Link]
    possible: set[Link]                     # sure links included (P ⊇ S)


@dataclass
class AlignmentScores:
    aer: float
    precision: float
    recall: float
    links: int                              # |A|
    sure: int                               # |S|
    possible: int                           # |P|
    pairs: int

    def line(self) -> str:
        return (f"AER {self.aer:.4f}  precision {self.precision:.4f}  recall {self.recall:.4f}  "
                f"({self.pairs} sentence pairs; {self.links} links predicted, {self.sure} sure and "
                f"{self.possible} possible in the gold standard)")


@dataclass(frozen=True)
class AttentionLinks:
    """How align_by_attention reads links off attention (the module's docstring): `method` argmax or
    threshold (a link needs `threshold` of a target word's attention), from `layer` and `head`
    (Transformer, from 1; None: the penultimate layer, the mean of its heads) at `step`; with a
    reverse model, the directions combined by `symmetrization`."""

    method: str = "argmax"
    threshold: float = LINK_THRESHOLD
    layer: Optional[int] = None
    head: Optional[int] = None
    step: str = "output"
    symmetrization: str = "grow-diag-final"

    def __post_init__(self) -> None:
        one_of("method", self.method, ATTENTION_METHODS)
        if not 0 < self.threshold <= 1:
            raise AttnmtError(f"threshold {self.threshold}: allowed (0, 1]")
        one_of("step", self.step, ALIGN_STEPS)
        one_of("symmetrization", self.symmetrization, (*SYMMETRIZATIONS, AVERAGE))


@dataclass(frozen=True)
class AlignerLinks:
    """How align_by_aligner reads links off the aligner's posteriors: with `adapt`, a copy of the
    aligner first trains that many epochs on the pairs themselves (their text alone, as statistical
    aligners train on the text they align); the jumps weighted by `jump_weight` (None: the aligner's
    own, AlignerConfig.jump_weight); its two directions combined by `symmetrization`."""

    adapt: int = 0
    jump_weight: Optional[float] = None
    symmetrization: str = AVERAGE

    def __post_init__(self) -> None:
        if self.adapt < 0:
            raise AttnmtError(f"adapt {self.adapt}: epochs, 0 or more")
        if self.jump_weight is not None and not 0 <= self.jump_weight <= MAX_JUMP_WEIGHT:
            raise AttnmtError(f"jump weight {self.jump_weight}: allowed [0, {MAX_JUMP_WEIGHT:g}]")
        one_of("symmetrization", self.symmetrization, (*SYMMETRIZATIONS, AVERAGE))


def one_of(what: str, value: str, allowed: tuple[str, ...]) -> None:
    """Refuse a named choice that is not one of `allowed`, naming them."""
    if value not in allowed:
        raise AttnmtError(f"{what} {value!r}: choose {', '.join(allowed)}")


def word_attention(translator: Translator, pairs: list[tuple[list[str], list[str]]], layer: Optional[int] = None,
                   head: Optional[int] = None, step: str = "output", batch_size: int = 32) -> list[np.ndarray]:
    """For each (source words, target words) pair, the target words' attention over the source
    words [len(target), len(source)] of the teacher-forced pass (see the module's docstring);
    `layer` and `head` from 1 (Transformer; head None: the mean of the layer's heads)."""
    one_of("step", step, ALIGN_STEPS)
    first = ALIGN_STEPS.index(step)        # the row of target piece 0: output 0 (it writes it), input 1
    model = translator.model
    pieces = [(translator.source_word_tokens(s), translator.tgt_tokenizer.tokenize_words(t)) for s, t in pairs]
    results: list[np.ndarray] = [np.zeros((len(t), len(s)), dtype=np.float32) for s, t in pairs]
    ready = [i for i, ((s, _), (t, _)) in enumerate(pieces) if s and t]
    ready.sort(key=lambda i: -len(pieces[i][0][0]))
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(ready), batch_size):
            rows = ready[start : start + batch_size]
            src = pad([translator.tokenization.src_vocab.encode(pieces[i][0][0]) for i in rows]).to(translator.device)
            lengths = torch.tensor([len(pieces[i][0][0]) for i in rows])
            # The whole target is fed, so that the step after the last piece reads it too.
            start = translator.tokenization.tgt_vocab.sos_id
            tgt_in = pad([[start] + translator.tokenization.tgt_vocab.encode(pieces[i][1][0]) for i in rows])   # [B, T + 1]
            maps = require(model, AttentionMaps, "attnmt align").attention_maps(src, lengths, tgt_in.to(translator.device))
            if "cross" not in maps:
                raise AttnmtError(no_attention(translator))
            cross = chosen_map(maps["cross"], layer, head).float().cpu().numpy()   # [B, T, S], pieces
            for row, i in enumerate(rows):
                (_, src_owner), (_, tgt_owner) = pieces[i]
                results[i] = to_words(cross[row, first : first + len(tgt_owner), : len(src_owner)], src_owner, tgt_owner,
                                      len(pairs[i][0]), len(pairs[i][1]))
    return results


def aligner_posteriors(translator: Translator, aligner: Aligner, pairs: list[tuple[list[str], list[str]]],
                       batch_size: int = 32, jump_weight: Optional[float] = None
                       ) -> list[tuple[WordPosterior, WordPosterior]]:
    """For each (source words, target words) pair, the posteriors of the translator's aligner between
    words, pieces merged as word_attention merges them: the target words' over the source words
    [len(target), len(source)] with each target word's NULL share [len(target)], and the source
    words' over the target words [len(source), len(target)] with theirs: each row and its NULL
    share sum to 1. The jumps are weighted by `jump_weight` (default: the aligner's own)."""
    text = translator.tokenization
    pieces = [(translator.src_tokenizer.tokenize_words(s), translator.tgt_tokenizer.tokenize_words(t))
              for s, t in pairs]
    encoded = [(text.src_vocab.encode(s), text.tgt_vocab.encode(t)) for (s, _), (t, _) in pieces]

    def nothing(written: int, given: int) -> WordPosterior:
        return np.zeros((written, given), np.float32), np.ones(written, np.float32)

    results = [(nothing(len(t), len(s)), nothing(len(s), len(t))) for s, t in pairs]
    ready = [i for i, (s, t) in enumerate(encoded) if s and t]
    for start in range(0, len(ready), batch_size):
        rows = ready[start : start + batch_size]
        src, src_lengths, tgt, tgt_lengths = piece_tensors(encoded, rows, translator.device)
        with torch.inference_mode():
            forward, backward = (p.float().cpu().numpy()
                                 for p in aligner.posteriors(src, src_lengths, tgt, tgt_lengths, jump_weight))
        for row, i in enumerate(rows):
            (_, src_owner), (_, tgt_owner) = pieces[i]
            source_words, target_words = len(pairs[i][0]), len(pairs[i][1])
            results[i] = (word_posterior(forward[row], src_owner, tgt_owner, source_words, target_words),
                          word_posterior(backward[row], tgt_owner, src_owner, target_words, source_words))
    return results


def word_posterior(posterior: np.ndarray, given_owner: list[int], written_owner: list[int], given_words: int,
                   written_words: int) -> WordPosterior:
    """A piece posterior [≥ written pieces, ≥ given pieces + 1] (the last column NULL's, padding
    past the pieces) merged to words as to_words merges attention; each word's row and its NULL
    share sum to 1 (a character model's spaces belong to no word)."""
    block = posterior[: len(written_owner)]
    words = to_words(block[:, : len(given_owner)], given_owner, written_owner, given_words, written_words)
    null = to_words(block[:, -1:], [0], written_owner, 1, written_words)[:, 0]
    total = np.maximum(words.sum(1) + null, 1e-12)
    return words / total[:, None], null / total


def aligner_links(posterior: np.ndarray, null: np.ndarray) -> set[Link]:
    """Each target word to its most probable source word, unless NULL is more probable."""
    return {(int(posterior[t].argmax()), t) for t in range(posterior.shape[0])
            if posterior[t].any() and posterior[t].max() >= null[t]}


def chosen_map(cross: torch.Tensor, layer: Optional[int], head: Optional[int]) -> torch.Tensor:
    """One map [B, T, S] of cross-attention [B, layers, heads, T, S]."""
    layers, heads = cross.shape[1:3]
    AttentionView("cross", layer, head).check({"cross": (layers, heads)})
    chosen = cross[:, (layer or default_layer(layers)) - 1]                            # [B, heads, T, S]
    return chosen.mean(1) if head is None else chosen[:, head - 1]


def cross_attention_layers(translator: Translator) -> int:
    """How many layers of cross-attention the model has (one for an RNN)."""
    shapes = map_shapes(translator.model)
    if "cross" not in shapes:
        raise AttnmtError(no_attention(translator))
    return shapes["cross"][0]


def no_attention(translator: TextTranslator) -> str:
    return f"this model has no attention ({translator.config.model.without_attention()}): it cannot align words"


def default_layer(layers: int) -> int:
    """The layer whose attention aligns by default, from 1: the penultimate (the only one of one)."""
    return max(1, layers - 1)


def to_words(weights: np.ndarray, src_owner: list[int], tgt_owner: list[int], src_words: int,
             tgt_words: int) -> np.ndarray:
    """Piece attention [T, S] to word attention [tgt_words, src_words]: summed over a source word's
    pieces, averaged over a target word's; pieces of no word (a character model's spaces) left out."""
    by_source = np.zeros((weights.shape[0], src_words), dtype=np.float32)
    for j, word in enumerate(src_owner):
        if word >= 0:
            by_source[:, word] += weights[:, j]
    words = np.zeros((tgt_words, src_words), dtype=np.float32)
    counts = np.zeros(tgt_words)
    for t, word in enumerate(tgt_owner):
        if word >= 0:
            words[word] += by_source[t]
            counts[word] += 1
    return words / np.maximum(counts, 1)[:, None]


def links_of(attention: np.ndarray, method: str = "argmax", threshold: float = LINK_THRESHOLD) -> set[Link]:
    """Links (source word, target word) from word attention [target, source] by an attention method."""
    one_of("method", method, ATTENTION_METHODS)
    if method == "argmax":
        return {(int(attention[t].argmax()), t) for t in range(attention.shape[0]) if attention[t].any()}
    return {(int(s), int(t)) for t, s in zip(*np.nonzero(attention >= threshold))}


_NEIGHBOURS = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]


def symmetrize(forward: set[Link], backward: set[Link], method: str) -> set[Link]:
    """Combine the links of the two directions (both as (source, target))."""
    if method == "intersect":
        return forward & backward
    if method == "union":
        return forward | backward
    one_of("symmetrization", method, SYMMETRIZATIONS)
    union, links = forward | backward, forward & backward
    # grow-diag: from the intersection, add neighbouring union links (diagonals too) that align a
    # word not aligned yet, until none is added.
    grown = True
    while grown:
        grown = False
        for s, t in sorted(links):
            for ds, dt in _NEIGHBOURS:
                candidate = (s + ds, t + dt)
                if candidate in union and candidate not in links and (
                        all(a != candidate[0] for a, _ in links) or all(b != candidate[1] for _, b in links)):
                    links.add(candidate)
                    grown = True
    if method == "grow-diag-final":
        # final: then each direction's links that align a word still unaligned.
        for direction in (forward, backward):
            for s, t in sorted(direction - links):
                if all(a != s for a, _ in links) or all(b != t for _, b in links):
                    links.add((s, t))
    return links


def align_by_attention(translator: Translator, sources: list[str], targets: list[str],
                       how: AttentionLinks = AttentionLinks(), reverse: Optional[Translator] = None
                       ) -> list[WordAlignment]:
    """Word alignments of sentence pairs, words split at whitespace, read off the translator's
    attention as `how` says. With `reverse` (a model translating the targets into the sources),
    the directions' links are combined by how.symmetrization; `attention` stays the forward
    direction's."""
    pairs = word_pairs(sources, targets)
    weights = word_attention(translator, pairs, how.layer, how.head, how.step)
    found = [links_of(w, how.method, how.threshold) for w in weights]
    if reverse is not None:
        backward = word_attention(reverse, [(t, s) for s, t in pairs], how.layer, how.head, how.step)
        found = combined(how.symmetrization, (weights, found),
                         (backward, [flipped(links_of(b, how.method, how.threshold)) for b in backward]))
    return [WordAlignment(s, t, w, sorted(f)) for (s, t), w, f in zip(pairs, weights, found)]


def align_by_aligner(translator: Translator, sources: list[str], targets: list[str],
                     how: AlignerLinks = AlignerLinks(), aligner: Optional[Aligner] = None,
                     log: Callable[[str], None] = lambda line: None) -> list[WordAlignment]:
    """Word alignments of sentence pairs, words split at whitespace, by `aligner` (default: the one
    the translator's model file holds) in both directions, combined as `how` says; `attention`
    is the forward posterior. With how.adapt, a copy of the aligner trains first (`log` gets a
    line per epoch); neither `aligner` nor the model file changes."""
    pairs = word_pairs(sources, targets)
    aligner = aligner or read_aligner(translator)
    if aligner is None:
        raise AttnmtError("this model file has no aligner: train one with `attnmt train-aligner MODEL --src FILE "
                          "--tgt FILE --out MODEL_WITH_ALIGNER`, or choose --method argmax or threshold")
    if how.adapt:
        aligner = train_aligner(translator, sources, targets, how.adapt, log=log, aligner=copy.deepcopy(aligner),
                                hold_out=False)
    posteriors = aligner_posteriors(translator, aligner, pairs, jump_weight=how.jump_weight)
    weights = [f for (f, _), _ in posteriors]
    found = combined(how.symmetrization, (weights, [aligner_links(*f) for f, _ in posteriors]),
                     ([b for _, (b, _) in posteriors], [flipped(aligner_links(*b)) for _, b in posteriors]))
    return [WordAlignment(s, t, w, sorted(f)) for (s, t), w, f in zip(pairs, weights, found)]


def word_pairs(sources: list[str], targets: list[str]) -> list[tuple[list[str], list[str]]]:
    """Sentence pairs as (source words, target words), split at whitespace."""
    if len(sources) != len(targets):
        raise AttnmtError(f"{len(sources)} source sentences but {len(targets)} target sentences: they pair line by line")
    return [(s.split(), t.split()) for s, t in zip(sources, targets)]


def combined(symmetrization: str, forward: tuple[list[np.ndarray], list[set[Link]]],
             backward: tuple[list[np.ndarray], list[set[Link]]]) -> list[set[Link]]:
    """Each pair's links of both directions combined: by their weights averaged (AVERAGE), else by
    symmetrize; each direction its word weights (forward [target, source], backward [source,
    target]) and its links, both as (source, target)."""
    if symmetrization == AVERAGE:
        return [averaged(f, b) for f, b in zip(forward[0], backward[0])]
    return [symmetrize(f, b, symmetrization) for f, b in zip(forward[1], backward[1])]


def averaged(forward: np.ndarray, backward: np.ndarray) -> set[Link]:
    """The links whose two directions' word weights, averaged, reach one half: forward [target,
    source] (attention or the aligner's posterior), backward [source, target]."""
    return {(int(s), int(t)) for t, s in zip(*np.nonzero(forward + backward.T >= 1.0))}


def flipped(links: set[Link]) -> set[Link]:
    """Links of the other direction, (target, source), as (source, target)."""
    return {(s, t) for t, s in links}


def model_aligner(translator: TextTranslator) -> Optional[Aligner]:
    """The aligner the translator's model file holds (attnmt train-aligner), or None: the file holds
    none, or another engine decodes (it has not the model's weights to align with)."""
    return read_aligner(translator) if isinstance(translator, Translator) else None


def alignment_method(translator: TextTranslator, aligner: Optional[Aligner]) -> Optional[str]:
    """How translation_alignments links words: with `aligner` (model_aligner's), "aligner"; else the
    engine's attention alignment ("argmax"), or None where there is neither."""
    return "aligner" if aligner is not None else translator.alignment_method()


def translation_alignments(translator: Translator, aligner: Optional[Aligner], sources: list[str],
                           translations: list[str]) -> tuple[str, list[WordAlignment]]:
    """Word alignments between sentences and their translations, and the method that made them
    (alignment_method): the model's aligner where it has one, else attention's argmax links."""
    method = alignment_method(translator, aligner)
    if method is None:
        raise AttnmtError(f"this model has neither attention ({translator.config.model.without_attention()}) nor an "
                          f"aligner (attnmt train-aligner): it cannot align words")
    if method == ALIGNER:
        return method, align_by_aligner(translator, sources, translations, aligner=aligner)
    return method, align_by_attention(translator, sources, translations, AttentionLinks(method))


def pharaoh(links: list[Link]) -> str:
    """`i-j i-j ...`, numbered from 0."""
    return " ".join(f"{s}-{t}" for s, t in links)


_LINK = re.compile(r"^(\d+)([-p])(\d+)$")


def parse_links(text: str, base: int, where: str, lengths: Optional[tuple[int, int]] = None) -> GoldLinks:
    """One sentence pair's gold links: `i-j` sure, `ipj` possible, numbered from `base` (1 in the
    RWTH files, 0 in Pharaoh files); `lengths` (source, target words) checks they lie inside the
    pair. `where` names the text in errors (FILE:LINE)."""
    sure, possible = set(), set()
    for item in text.split():
        match = _LINK.match(item)
        if not match:
            raise AttnmtError(f"{where}: {item!r} is not a link: expected i-j (sure) or ipj (possible)")
        link = (int(match[1]) - base, int(match[3]) - base)
        if min(link) < 0:
            raise AttnmtError(f"{where}: link {item!r} has position 0, but positions are read from {base} (--gold-base)")
        if lengths is not None and (link[0] >= lengths[0] or link[1] >= lengths[1]):
            raise AttnmtError(f"{where}: link {item!r} points past the sentence pair (source {lengths[0]} words, "
                              f"target {lengths[1]}; positions from {base})")
        possible.add(link)
        if match[2] == "-":
            sure.add(link)
    return GoldLinks(sure, possible)


def read_gold(path: str | Path, base: int, lengths: Optional[list[tuple[int, int]]] = None) -> list[GoldLinks]:
    """Gold links of a file, one line per sentence pair (parse_links); `lengths` gives each pair's
    (source, target) word counts."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise AttnmtError(f"{path}: cannot read the gold alignments ({err})") from None
    if lengths is not None and len(lines) != len(lengths):
        raise AttnmtError(f"{path}: {len(lines)} lines of gold links for {len(lengths)} sentence pairs")
    return [parse_links(line, base, f"{path}:{number}", None if lengths is None else lengths[number - 1])
            for number, line in enumerate(lines, 1)]


def score(predicted: list[set[Link]] | list[list[Link]], gold: list[GoldLinks]) -> AlignmentScores:
    """Precision, recall and AER of predicted links against the gold links, over all pairs."""
    found = sure = possible = hits_sure = hits_possible = 0
    for links, g in zip(predicted, gold, strict=True):
        links = set(links)
        found, sure, possible = found + len(links), sure + len(g.sure), possible + len(g.possible)
        hits_sure += len(links & g.sure)
        hits_possible += len(links & g.possible)
    if not found + sure:
        raise AttnmtError("no links to score: the predictions and the gold standard are both empty")
    return AlignmentScores(aer=1 - (hits_sure + hits_possible) / (found + sure),
                           precision=hits_possible / found if found else 0.0,
                           recall=hits_sure / sure if sure else 0.0, links=found, sure=sure, possible=possible,
                           pairs=len(gold))
