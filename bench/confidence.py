"""How well a translation's confidence (Translation.confidence) ranks its quality: Spearman's rank
correlation between each sentence's confidence and its sentence-level chrF against the reference.

    python bench/confidence.py MODEL [MODEL ...] --src test.de --ref test.en [--beam 5] [--limit 1000]
    python bench/confidence.py MODEL --src newstest2014-deen-src.de.sgm.gz --ref newstest2014-deen-ref.en.sgm.gz

For each model: the sentences translated (greedy, or `--beam`), each one's confidence (the geometric
mean of its tokens' probabilities) and sacreBLEU's sentence chrF; printed: Spearman's rho of the two
(ranks with ties averaged), of the plain log-probability (unnormalised, which favours short outputs)
and of minus the source length (the naive baseline: short sentences come out better), and the mean
chrF of the sentences in each quarter of confidence, lowest first, which is what a user filtering by
confidence gets. Also `--json FILE`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import sacrebleu
from quality import read_segments

from attnmt.translate import Translator


def ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank from 1, tied values the mean of their ranks."""
    order = values.argsort(kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def measure(model: str, sources: list[str], references: list[str], beam: int) -> dict:
    translator = Translator.load(model, device="cpu")
    translations = translator.translate(sources, beam_size=beam)
    chrf = np.array([sacrebleu.sentence_chrf(t.text, [r]).score for t, r in zip(translations, references)])
    confidence = np.array([t.confidence for t in translations])
    log_prob = np.array([t.log_prob for t in translations])
    length = -np.array([len(s.split()) for s in sources], dtype=float)
    quarters = np.array_split(np.argsort(confidence, kind="stable"), 4)
    return {"model": model, "sentences": len(sources), "beam": beam,
            "spearman_confidence": spearman(confidence, chrf), "spearman_log_prob": spearman(log_prob, chrf),
            "spearman_minus_source_words": spearman(length, chrf),
            "chrf_by_confidence_quarter": [float(chrf[q].mean()) for q in quarters],
            "confidence_quarter_bounds": [float(confidence[q].max()) for q in quarters],
            "corpus_chrf": sacrebleu.corpus_chrf([t.text for t in translations], [references]).score}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="the first N sentences only (0: all)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sources, references = read_segments(args.src), read_segments(args.ref)
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    print("| model | sentences | beam | corpus chrF | rho confidence | rho log-prob | rho -source words "
          "| chrF by confidence quarter (lowest first) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    results = []
    for model in args.models:
        r = measure(model, sources, references, args.beam)
        results.append(r)
        print(f"| {model} | {r['sentences']} | {r['beam']} | {r['corpus_chrf']:.1f} | {r['spearman_confidence']:.3f} "
              f"| {r['spearman_log_prob']:.3f} | {r['spearman_minus_source_words']:.3f} | "
              + " / ".join(f"{c:.1f}" for c in r["chrf_by_confidence_quarter"]) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
