"""Scores of translations against references: exact match, and BLEU/chrF from sacrebleu."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import sacrebleu

from .errors import AttnmtError
from .tokenize import WordTokenizer
from .translate import TextTranslator


def exact_match(hypotheses: list[str], references: list[str]) -> float:
    """Fraction of outputs equal to their reference (after stripping outer spaces)."""
    if not references:
        return 0.0
    return sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / len(references)


def lowercased_token_bleu(hypotheses: list[str], references: list[str]) -> float:
    """BLEU on lowercased word tokens, the recipe of the PyTorch seq2seq tutorials (torchtext's
    bleu_score on spaCy tokens): not comparable with sacreBLEU's detokenized, cased score."""
    tokenizer = WordTokenizer(lowercase=True)

    def tokens(text: str) -> str:
        return " ".join(tokenizer.tokenize(text))

    bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    return round(bleu.corpus_score([tokens(h) for h in hypotheses], [[tokens(r) for r in references]]).score, 2)


def corpus_scores(hypotheses: list[str], references: list[str], lowercase: bool = False) -> dict[str, float | str]:
    """sacreBLEU's detokenized, cased BLEU and chrF, with their signatures; with `lowercase` (for a
    model that writes lowercased text, whose cased scores would count every capital as an error)
    both lowercase outputs and references, and their signatures say `case:lc`.

    force=True silences sacreBLEU's three-line "tokenized period" warning only (it changes no score
    or signature): a model whose corpus writes " ." would print it at every validation. Other
    sacreBLEU warnings still reach the log.
    """
    bleu = sacrebleu.metrics.BLEU(force=True, lowercase=lowercase)
    chrf = sacrebleu.metrics.CHRF(lowercase=lowercase)
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        # the outputs' length over the references' (word tokens): below 1, BLEU's brevity penalty
        # applies, which beam search's length penalty (decode.alpha) can lift
        "length_ratio": round(bleu_score.sys_len / max(bleu_score.ref_len, 1), 4),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def exact_match_any(sources: list[str], hypotheses: list[str], references: list[str]) -> float:
    """Fraction of outputs equal to any reference given to the same source sentence (Tatoeba
    gives one English sentence several translations: "She kissed him." -> two in German)."""
    accepted: dict[str, set[str]] = {}
    for source, reference in zip(sources, references):
        accepted.setdefault(source, set()).add(reference.strip())
    if not references:
        return 0.0
    return sum(h.strip() in accepted[s] for s, h in zip(sources, hypotheses)) / len(references)


@dataclass
class Evaluation:
    """One model's scores of sentence pairs (`attnmt evaluate`)."""

    scores: dict[str, float | str]            # score_outputs': exact match (%), BLEU, chrF, ...
    hypotheses: list[str]                     # the outputs scored, one per pair (for further measures)
    by_length: Optional[list[dict]] = None    # bleu_by_length's rows, where asked for

    def lines(self) -> list[str]:
        """The scores as `attnmt evaluate` prints them: `name: value`, then the BLEU of each length bucket."""
        lines = [f"{key}: {value}" for key, value in self.scores.items()]
        if self.by_length is not None:
            lines.append("bleu by source length (word tokens):")
            for row in self.by_length:
                bleu = "-" if row["bleu"] is None else f"{row['bleu']:.2f}"
                lines.append(f"  {row['bucket']:>7}  sentences {row['sentences']:>5}  bleu {bleu}")
        return lines


def evaluate(translator: TextTranslator, pairs: list[tuple[str, str]], beam_size: Optional[int] = None,
             alpha: Optional[float] = None, lc_tok: bool = False, edges: Optional[tuple[int, ...]] = None,
             name: str = "the list of pairs") -> Evaluation:
    """Translate the sources of (source, reference) pairs and score the outputs: exact match (%),
    BLEU and chrF, with `lc_tok` the tutorials' lowercased-token BLEU, and with `edges` (length
    bucket bounds, e.g. LENGTH_EDGES) BLEU by source length. `name` says what the pairs are when
    there are none."""
    if not pairs:
        raise AttnmtError(f"nothing to score: {name} has no sentences")
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    hypotheses = [t.text for t in translator.translate(sources, beam_size, alpha)]
    scores = score_outputs(translator, pairs, hypotheses, lc_tok)
    by_length = None if edges is None else bleu_by_length(sources, hypotheses, references, edges, lc_tok,
                                                          translator.tgt_tokenizer.lowercase)
    return Evaluation(scores, hypotheses, by_length)


def score_translations(translator: TextTranslator, pairs: list[tuple[str, str]], beam_size: Optional[int] = None,
                       alpha: Optional[float] = None, lc_tok: bool = False) -> dict:
    """evaluate's scores alone (training's validation and test, bench/)."""
    return evaluate(translator, pairs, beam_size, alpha, lc_tok).scores


def score_outputs(translator: TextTranslator, pairs: list[tuple[str, str]], hypotheses: list[str],
                  lc_tok: bool = False) -> dict:
    """The scores of `evaluate` for outputs already made (at least one pair)."""
    sources = [s for s, _ in pairs]
    references = [r for _, r in pairs]
    # Exact match forgives what the tokenizer normalizes away (odd spaces; case when lowercasing).
    tokenizer = translator.tgt_tokenizer
    normalized = [tokenizer.detokenize(tokenizer.tokenize(r)) for r in references]
    scores: dict[str, float | str] = {"exact": round(100 * exact_match(hypotheses, normalized), 2)}
    if len(set(sources)) < len(sources):
        scores["exact_any_ref"] = round(100 * exact_match_any(sources, hypotheses, normalized), 2)
    scores.update(corpus_scores(hypotheses, references, lowercase=tokenizer.lowercase))
    if lc_tok:
        scores["bleu_lc_tok"] = lowercased_token_bleu(hypotheses, references)
    return scores


# Source-length buckets after Bahdanau et al. (2015), Fig. 2: <=10, 11-15, 16-20, 21-25, >25 words.
LENGTH_EDGES = (10, 15, 20, 25)


def parse_length_edges(text: str) -> tuple[int, ...]:
    """The --buckets option, "10,15,20,25", as bucket upper bounds."""
    try:
        edges = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise AttnmtError(f"--buckets {text!r}: expected ascending word counts separated by commas, "
                          f"e.g. 10,15,20,25") from None
    _check_edges(edges)
    return edges


def _check_edges(edges: tuple[int, ...]) -> None:
    if not edges or list(edges) != sorted(set(edges)) or edges[0] < 1:
        raise AttnmtError(f"length buckets must be ascending positive numbers, got {list(edges)}")


def bucket_labels(edges: tuple[int, ...]) -> list[str]:
    """Labels of the buckets that `edges` (ascending upper bounds) cut: ['<=10', '11-15', ..., '>25']."""
    labels = [f"<={edges[0]}"] + [f"{low + 1}-{high}" if high > low + 1 else str(high)
                                  for low, high in zip(edges, edges[1:])]
    return labels + [f">{edges[-1]}"]


def bleu_by_length(sources: list[str], hypotheses: list[str], references: list[str],
                   edges: tuple[int, ...] = LENGTH_EDGES, lc_tok: bool = False, lowercase: bool = False) -> list[dict]:
    """BLEU of each bucket of source length: [{bucket, sentences, bleu}], shortest first; sacreBLEU's
    lowercased with `lowercase` (corpus_scores), where not `lc_tok`.

    Length counts the tokens of our word tokenizer (words and punctuation marks), whatever units
    the model reads, so that models with different tokenizers are bucketed alike. An empty bucket
    has bleu None.
    """
    _check_edges(edges)
    words = WordTokenizer()
    buckets: list[tuple[list[str], list[str]]] = [([], []) for _ in range(len(edges) + 1)]
    for source, hypothesis, reference in zip(sources, hypotheses, references):
        index = bisect.bisect_left(edges, len(words.tokenize(source)))
        buckets[index][0].append(hypothesis)
        buckets[index][1].append(reference)
    rows = []
    for label, (hyps, refs) in zip(bucket_labels(edges), buckets):
        bleu = None
        if hyps:
            bleu = lowercased_token_bleu(hyps, refs) if lc_tok else corpus_scores(hyps, refs, lowercase)["bleu"]
        rows.append({"bucket": label, "sentences": len(hyps), "bleu": bleu})
    return rows


def chart_by_length(evaluations: dict[str, Evaluation], path: str | Path, lc_tok: bool = False) -> None:
    """Draw the BLEU by source length of each evaluation (name -> Evaluation, all with the same
    buckets) into one PNG chart."""
    from .plot import plot_bleu_by_length  # matplotlib: only when a chart is drawn

    rows: dict[str, list[dict]] = {}
    for name, evaluation in evaluations.items():
        if evaluation.by_length is None:
            raise ValueError(f"{name}: evaluated without length buckets; evaluate(..., edges=LENGTH_EDGES) makes them")
        rows[name] = evaluation.by_length
    first = next(iter(rows.values()))
    plot_bleu_by_length([r["bucket"] for r in first], {name: [r["bleu"] for r in bucketed] for name, bucketed in rows.items()},
                        [r["sentences"] for r in first], path,
                        title="BLEU by source length" + (" (lowercased tokens)" if lc_tok else ""))
