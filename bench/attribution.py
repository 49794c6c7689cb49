"""Is attention an explanation? How far attention and attribution agree, over the RWTH German-English
gold set, and how each aligns words.

    python bench/attribution.py --gold ../shared/data/rwth_deen_gold \
        --model general=runs/align/general/model.safetensors --model none=runs/q_none/model.safetensors
    python bench/attribution.py --gold ../shared/data/rwth_deen_gold --model rnn=runs/m/model.safetensors \
        --method ig --ig-steps 20 --limit 100          # integrated gradients cost --ig-steps passes each

Each sentence pair is read with its target forced, as `attnmt align` reads it. For each target
word, its attention over the source words (align.word_attention: the step that writes it; a
Transformer's penultimate layer, the mean of its heads) and its attribution by each --method
(attribution.word_attribution: f = log p of each piece the word is written in, averaged over its
pieces) are compared:

    agreement   how often the most-attended source word is the most-attributed one
    spearman    the rank correlation of the two over the source words (the mean over target words of
                two or more source words where neither is constant)
    AER         of each one's argmax links (each target word to its top source word) against the gold
                links (align.score: Och & Ney 2003)

A model without attention (model.attention none) gets the attribution's AER alone. Prints one
`metric=<name> value=<number>` line per figure and a Markdown table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from attnmt.analysis.align import links_of, read_gold, score, word_attention
from attnmt.analysis.attribution import IG_STEPS, METHODS, word_attribution
from attnmt.translate import Translator


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 0, ties sharing their mean rank."""
    order = values.argsort(kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(len(values))
    for value in np.unique(values):
        ranked[values == value] = ranked[values == value].mean()
    return ranked


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's ρ of two rows, or None where it is undefined (fewer than 2 values, or one constant)."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def compare(attention: list[np.ndarray], attribution: list[np.ndarray]) -> tuple[float, float]:
    """How often the argmaxes agree, and the mean Spearman ρ, over every target word."""
    agree, rhos, words = 0, [], 0
    for by_attention, by_attribution in zip(attention, attribution):
        for row_attention, row_attribution in zip(by_attention, by_attribution):
            words += 1
            agree += int(row_attention.argmax() == row_attribution.argmax())
            rho = spearman(row_attention, row_attribution)
            if rho is not None:
                rhos.append(rho)
    return agree / max(words, 1), float(np.mean(rhos)) if rhos else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gold", required=True, help="directory with test.de, test.en, test.talp")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=PATH", help="a de->en model file")
    parser.add_argument("--method", default="grad,occlusion", help=f"attribution methods, comma-separated, of "
                                                                   f"{', '.join(METHODS)} (default: %(default)s)")
    parser.add_argument("--ig-steps", type=int, default=IG_STEPS, help="steps of integrated gradients")
    parser.add_argument("--limit", type=int, help="the first LIMIT sentence pairs only")
    parser.add_argument("--device", default="cpu", help="cpu, cuda ... (default: %(default)s)")
    args = parser.parse_args()

    gold_dir = Path(args.gold)
    sources = (gold_dir / "test.de").read_text(encoding="utf-8").splitlines()[: args.limit]
    targets = (gold_dir / "test.en").read_text(encoding="utf-8").splitlines()[: args.limit]
    pairs = [(s.split(), t.split()) for s, t in zip(sources, targets)]
    gold = read_gold(gold_dir / "test.talp", 1)[: len(pairs)]
    methods = args.method.split(",")
    if set(methods) - set(METHODS):
        parser.error(f"--method {args.method}: choose among {', '.join(METHODS)}")

    rows = []
    for name, path in (item.split("=", 1) for item in args.model):
        translator = Translator.load(path, args.device)
        attention = word_attention(translator, pairs) if translator.alignment_method() else None
        attention_aer = float("nan")
        if attention is not None:
            attention_aer = score([links_of(a) for a in attention], gold).aer
            print(f"metric=aer_{name}_attention value={attention_aer:.4f}")
        for method in methods:
            attribution = word_attribution(translator, pairs, method, args.ig_steps, progress=True)
            aer = score([links_of(a) for a in attribution], gold).aer
            print(f"metric=aer_{name}_{method} value={aer:.4f}")
            agreement = rho = float("nan")
            if attention is not None:
                agreement, rho = compare(attention, attribution)
                print(f"metric=agreement_{name}_{method} value={agreement:.4f}")
                print(f"metric=spearman_{name}_{method} value={rho:.4f}")
            rows.append((name, method, agreement, rho, attention_aer, aer))
    print(f"\n{len(pairs)} sentence pairs of {gold_dir}\n")
    print("| model | attribution | top word agrees | Spearman ρ | AER, attention argmax | AER, attribution argmax |")
    print("|---|---|---:|---:|---:|---:|")
    for name, method, agreement, rho, attention_aer, aer in rows:
        shown = [("–" if np.isnan(v) else f"{v:.3f}") for v in (agreement, rho, attention_aer, aer)]
        print(f"| {name} | {method} | " + " | ".join(shown) + " |")


if __name__ == "__main__":
    main()
