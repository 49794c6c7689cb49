"""Scores of translations against references: exact match, and BLEU/chrF from sacrebleu."""

from __future__ import annotations

from typing import Optional

import sacrebleu

from .tokenize import WordTokenizer
from .translate import Translator


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


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict[str, float | str]:
    """sacreBLEU's detokenized, cased BLEU and chrF, with their signatures."""
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def score_translations(translator: Translator, pairs: list[tuple[str, str]], beam_size: Optional[int] = None,
                       alpha: Optional[float] = None, lc_tok: bool = False) -> dict:
    """Exact match (%), BLEU and chrF of the translator's outputs for (source, reference) pairs,
    and with `lc_tok` the tutorials' lowercased-token BLEU."""
    hypotheses = [t.text for t in translator.translate([s for s, _ in pairs], beam_size, alpha)]
    references = [r for _, r in pairs]
    # Exact match forgives what the tokenizer normalizes away (odd spaces; case when lowercasing).
    tokenizer = translator.tgt_tokenizer
    normalized = [tokenizer.detokenize(tokenizer.tokenize(r)) for r in references]
    scores = {"exact": round(100 * exact_match(hypotheses, normalized), 2), **corpus_scores(hypotheses, references)}
    if lc_tok:
        scores["bleu_lc_tok"] = lowercased_token_bleu(hypotheses, references)
    return scores
