"""AER of attention on the RWTH German-English gold standard: Luong et al. (2015), Table 6, on our data.

    python bench/alignment.py --gold ../shared/data/rwth_deen_gold --data ../shared/data/multi30k \
        --budget-min 8 --out runs/align                     # trains a de->en model per kind, then scores
    python bench/alignment.py --gold ../shared/data/rwth_deen_gold --model general=runs/q_rnn/model.safetensors
    python bench/alignment.py --gold ../shared/data/rwth_deen_gold --coverage runs/de_en_data \
        --model t=runs/t_de_en/model.safetensors --reverse t=runs/t_en_de/model.safetensors   # + both ways

With --data, trains one de->en model per attention kind (--kinds; `transformer` is the Transformer
recipe) from the Multi30k recipe configs/multi30k_de_en.yaml with model.attention=KIND, each for
--budget-min minutes of wall clock or --epochs epochs, one after the other; models already in
--out are reused.
Then scores every model on the gold standard: links by argmax (Luong's rule) and by threshold,
each with the attention of the step that writes a target word and of the step that reads it
(`attnmt align --step output|input`), for a Transformer the default layer and each layer's mean
of heads; a model with a --reverse
model (en->de, same name) also gets the reverse direction's links alone and each symmetrization of
the two directions' argmax links. The first row is no model at all: each target word linked to the
source word at its relative position (the diagonal), the figure attention has to beat. Prints one
`metric=<name> value=<number>` line per figure and a Markdown table, and how many of the gold
standard's running words the training data holds (the gold set is Europarl, far from it).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from attnmt.align import (
    ALIGN_STEPS,
    SYMMETRIZATIONS,
    AlignmentScores,
    cross_attention_layers,
    default_layer,
    links_of,
    read_gold,
    score,
    symmetrize,
    word_attention,
)
from attnmt.config import load_config
from attnmt.data import find_split_file, read_lines
from attnmt.tokenize import WordTokenizer
from attnmt.train import train
from attnmt.translate import Translator
from attnmt.vocab import UNK

REPO = Path(__file__).resolve().parents[1]
KINDS = ["bahdanau", "dot", "general", "concat", "local_m", "local_p", "transformer"]


def train_kind(kind: str, data: str, budget: list[str], out: Path) -> Path:
    """The model of one attention kind, trained within the budget (or the one already in `out`)."""
    model_path = out / "model.safetensors"
    if model_path.exists():
        print(f"{kind}: reusing {model_path}", file=sys.stderr)
        return model_path
    if kind == "transformer":
        config_file, overrides = REPO / "configs" / "multi30k_de_en_transformer.yaml", []
    else:
        config_file, overrides = REPO / "configs" / "multi30k_de_en.yaml", [f"model.attention={kind}"]
    config = load_config(config_file, [f"data.path={data}", f"train.out_dir={out}", *budget, *overrides])
    started = time.monotonic()
    result = train(config, overwrite=True, log=lambda line: print(f"{kind}: {line}", file=sys.stderr, flush=True))
    print(f"metric=train_minutes_{kind} value={(time.monotonic() - started) / 60:.1f}")
    print(f"metric=epochs_{kind} value={result.epochs}")
    return result.model_path


def coverage(gold_lines: list[str], training_text: list[str]) -> tuple[float, Counter]:
    """The share of the gold standard's running words that occur as words in the training text."""
    seen = set(token for line in training_text for token in WordTokenizer().tokenize(line))
    words = Counter(word for line in gold_lines for word in line.split())
    return sum(n for w, n in words.items() if w in seen) / sum(words.values()), words


def both_ways(name: str, reverse: Translator, pairs: list[tuple[list[str], list[str]]], forward: list[set],
              gold: list, step: str) -> list[tuple[str, str, str, AlignmentScores]]:
    """Rows of the reverse model's argmax links alone (flipped to de-en) and of each symmetrization,
    both directions read at `step`."""
    backward = [{(s, t) for t, s in links_of(a, "argmax")}
                for a in word_attention(reverse, [(t, s) for s, t in pairs], step=step)]
    rows = []
    for method, links in [("reverse", backward),
                          *((m, [symmetrize(f, b, m) for f, b in zip(forward, backward)]) for m in SYMMETRIZATIONS)]:
        result = score(links, gold)
        print(f"metric=aer_{name}_{step}_{method} value={result.aer:.4f}")
        rows.append((name, f"en->de model alone, step {step}" if method == "reverse"
                     else f"both directions, argmax links, step {step}", method, result))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gold", required=True, help="directory with test.de, test.en, test.talp")
    parser.add_argument("--data", help="Multi30k directory: train the models (else give --model)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="attention kinds to train (default: %(default)s)")
    parser.add_argument("--budget-min", type=float, default=8.0, help="training wall clock per model, minutes")
    parser.add_argument("--epochs", type=int, help="train this many epochs instead (a budget that other jobs on the "
                                                   "machine do not change)")
    parser.add_argument("--out", default="runs/align", help="where the trained models go, one folder per kind")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH", help="score this model too")
    parser.add_argument("--reverse", action="append", default=[], metavar="NAME=PATH",
                        help="the en->de model paired with the de->en model NAME: both ways, symmetrized")
    parser.add_argument("--coverage", metavar="DIR", help="directory with train.de and train.en: how many gold words "
                                                          "they hold (default: --data)")
    parser.add_argument("--threshold", type=float, default=0.3, help="for the threshold rows")
    args = parser.parse_args()

    gold_dir = Path(args.gold)
    sources = (gold_dir / "test.de").read_text(encoding="utf-8").splitlines()
    targets = (gold_dir / "test.en").read_text(encoding="utf-8").splitlines()
    pairs = [(s.split(), t.split()) for s, t in zip(sources, targets)]
    gold = read_gold(gold_dir / "test.talp", 1, [(len(s), len(t)) for s, t in pairs])

    models = dict(item.split("=", 1) for item in args.model)
    if args.data:
        for kind in args.kinds.split(","):
            budget = ([f"train.epochs={args.epochs}", "train.max_minutes=0"] if args.epochs
                      else [f"train.max_minutes={args.budget_min}"])
            models[kind] = str(train_kind(kind, args.data, budget, Path(args.out) / kind))
    if args.data or args.coverage:
        for lang, lines in (("de", sources), ("en", targets)):
            share, words = coverage(lines, list(read_lines(find_split_file(args.coverage or args.data, "train", lang))))
            print(f"metric=gold_words_in_training_{lang} value={share:.4f}")
            print(f"# {lang}: {sum(words.values())} running words, {len(words)} distinct", file=sys.stderr)
    reverse = dict(item.split("=", 1) for item in args.reverse)
    if set(reverse) - set(models):
        parser.error(f"--reverse {', '.join(sorted(set(reverse) - set(models)))}: no --model of that name to pair with")

    diagonal = [{(min(round((t + 0.5) * len(s) / len(t_words) - 0.5), len(s) - 1), t) for t in range(len(t_words))}
                for s, t_words in pairs]
    result = score(diagonal, gold)
    print(f"metric=aer_diagonal value={result.aer:.4f}")
    rows = [("no model", "target word t of T to source word round((t + 0.5)·S/T − 0.5)", "diagonal", result)]
    for name, path in models.items():
        translator = Translator.load(path, "cpu")
        pieces = [translator.src_tokenizer.tokenize(s) for s in sources]
        vocab = translator.tokenization.src_vocab
        unknown = sum(vocab.encode(p).count(vocab.stoi[UNK]) for p in pieces)
        print(f"metric=unknown_source_pieces_{name} value={unknown}")
        layers = cross_attention_layers(translator)
        views = [(None, "")] if layers == 1 else [(None, "default"), *((n, f"layer {n}") for n in range(1, layers + 1))]
        for step in ALIGN_STEPS:
            default_view: list = []                 # the default layer's attention, which --reverse pairs with
            for layer, label in views:
                attention = word_attention(translator, pairs, layer, step=step)     # computed once for both rules
                if layer is None:
                    default_view = attention
                for method in ("argmax", "threshold"):
                    result = score([links_of(a, method, args.threshold) for a in attention], gold)
                    key = "_".join(filter(None, [name, label.replace(" ", ""), step, method]))
                    print(f"metric=aer_{key} value={result.aer:.4f}")
                    view = label if layer or not label else f"default (layer {default_layer(layers)})"
                    rows.append((name, ", ".join(filter(None, [view, f"step {step}"])), method, result))
            if name in reverse:
                rows += both_ways(name, Translator.load(reverse[name], "cpu"), pairs,
                                  [links_of(a, "argmax") for a in default_view], gold, step)
    print("\n| model | attention read | links | AER | precision | recall | links predicted |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, label, method, result in rows:
        rule = f"threshold {args.threshold}" if method == "threshold" else method
        print(f"| {name} | {label or 'its attention'} | {rule} | {result.aer:.3f} | {result.precision:.3f} | "
              f"{result.recall:.3f} | {result.links} |")


if __name__ == "__main__":
    main()
