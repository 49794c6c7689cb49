"""AER of attention on the RWTH German-English gold standard: Luong et al. (2015), Table 6, on our data.

    python bench/alignment.py --gold ../shared/data/rwth_deen_gold --data ../shared/data/multi30k \
        --budget-min 8 --out runs/align                     # trains a de->en model per kind, then scores
    python bench/alignment.py --gold ../shared/data/rwth_deen_gold --model general=runs/q_rnn/model.safetensors
    python bench/alignment.py --gold ../shared/data/rwth_deen_gold --coverage runs/de_en_data \
        --model t=runs/t_de_en/model.safetensors --reverse t=runs/t_en_de/model.safetensors   # + both ways

With --data, trains one de->en model per attention kind (--kinds; `transformer` is the Transformer
recipe) from the Multi30k recipe configs/multi30k_de_en.yaml with model.attention=KIND, each for
--budget-min minutes of wall clock or --epochs epochs (and any --set KEY=VALUE overrides), one
after the other; models already in --out are reused.
Then scores every model on the gold standard: links by argmax (Luong's rule) and by threshold,
each with the attention of the step that writes a target word and of the step that reads it
(`attnmt align --step output|input`), for a Transformer the default layer and each layer's mean
of heads; a model with a --reverse
model (en->de, same name) also gets the reverse direction's links alone and each symmetrization of
the two directions' argmax links. The first row is no model at all: each target word linked to the
source word at its relative position (the diagonal), the figure attention has to beat. Prints one
`metric=<name> value=<number>` line per figure and a Markdown table, and how many of the gold
standard's running words the training data holds (the gold set is Europarl, far from it).

The statistical peer, side by side on the same text:

    python bench/alignment.py --gold G --build-text runs/align_text --multi30k M --tatoeba T/deu.txt.gz
    python bench/alignment.py --gold G --eflomal runs/eflomal-venv --text runs/align_text/unseen \
        --model seen=SEEN_DE_EN --reverse seen=SEEN_EN_DE --model unseen=UNSEEN_DE_EN --reverse unseen=UNSEEN_EN_DE

--build-text writes two training folders of Multi30k's layout (Multi30k's val and test2016 as they
are): `unseen` holds Multi30k train + Tatoeba deu-eng, `seen` the same with the gold standard's
sentence pairs (their text, never their links) appended, as statistical aligners are run on the
text they align. Train attnmt's models on each (data.path=...). --eflomal runs eflomal (GPL: installed
into a virtual environment of its own, never a dependency) on --text, the `unseen` text: once with the
gold sentences appended (as `seen`), reading their links, and once without them, aligning the gold
sentences afterwards with the lexical priors of that training (text it never saw). Each prints its
forward and reverse links and each symmetrization, with eflomal's wall-clock and CPU time.

A model file with an aligner (`attnmt train-aligner`) also gets the aligner's rows: each
direction's links, each symmetrization of the two, and the average of their posteriors
(`attnmt align --method aligner`'s default), labelled with how long it trained; `--adapt 0 2` gives
them as they are and again after 2 epochs on the gold pairs' text (`attnmt align --adapt 2`), and
`--aligner-only` leaves out the attention rows. `--pairs 0:100` scores the first 100 gold pairs
only, to choose a setting on them; `--pairs 100:` then scores what was chosen on the rest (every
aligner, eflomal too, still reads all the pairs, as it would a document).

A second gold standard, English-French Hansards (bench/hansards_text.py writes its folders):

    python bench/alignment.py --gold runs/align_fr_en/gold --langs fr,en --eflomal runs/eflomal-venv \
        --text runs/align_fr_en/unseen --model seen=SEEN --model unseen=UNSEEN --aligner-only --pairs 37:
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from eflomal_peer import align as eflomal_align
from eflomal_peer import ensure_eflomal

from attnmt.analysis.align import (
    ALIGN_STEPS,
    AVERAGE,
    SYMMETRIZATIONS,
    AlignmentScores,
    Link,
    WordPosterior,
    aligner_links,
    aligner_posteriors,
    averaged,
    cross_attention_layers,
    default_layer,
    flipped,
    links_of,
    read_gold,
    score,
    symmetrize,
    word_attention,
)
from attnmt.analysis.aligner import read_aligner, train_aligner
from attnmt.configfile import load_config
from attnmt.corpus.readers import find_split_file, read_lines, read_tsv
from attnmt.tokenize import WordTokenizer
from attnmt.training.train import train
from attnmt.translate import Translator, model_info
from attnmt.vocab import UNK

REPO = Path(__file__).resolve().parents[1]
KINDS = ["bahdanau", "dot", "general", "concat", "local_m", "local_p", "transformer"]


@dataclass
class GoldSet:
    """The gold standard: every sentence pair (aligners read the whole text, as a user's document)
    and its links, of which the pairs `scored` (--pairs) are scored."""
    sources: list[str]
    targets: list[str]
    links: list
    scored: slice

    @property
    def pairs(self) -> list[tuple[list[str], list[str]]]:
        return [(s.split(), t.split()) for s, t in zip(self.sources, self.targets)]

    def score(self, predicted: list[set[Link]]) -> AlignmentScores:
        """AER, precision and recall of links predicted for every pair, on the pairs scored."""
        return score(predicted[self.scored], self.links[self.scored])

    @classmethod
    def read(cls, folder: str | Path, langs: str, pairs: str | None) -> GoldSet:
        """The gold set in `folder` (test.SRC, test.TGT, test.talp numbered from 1), `langs` "SRC,TGT",
        scoring the pairs `pairs` ("FROM:TO", a Python slice; None: all)."""
        src_lang, tgt_lang = langs.split(",")
        sources = (Path(folder) / f"test.{src_lang}").read_text(encoding="utf-8").splitlines()
        targets = (Path(folder) / f"test.{tgt_lang}").read_text(encoding="utf-8").splitlines()
        scored = slice(*(int(n) if n else None for n in pairs.split(":"))) if pairs else slice(None)
        lengths = [(len(s.split()), len(t.split())) for s, t in zip(sources, targets)]
        return cls(sources, targets, read_gold(Path(folder) / "test.talp", 1, lengths), scored)


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


def both_ways(name: str, reverse: Translator, gold: GoldSet, forward: list[set],
              step: str) -> list[tuple[str, str, str, AlignmentScores]]:
    """Rows of the reverse model's argmax links alone (flipped to de-en) and of each symmetrization,
    both directions read at `step`."""
    backward = [{(s, t) for t, s in links_of(a, "argmax")}
                for a in word_attention(reverse, [(t, s) for s, t in gold.pairs], step=step)]
    rows = []
    for method, links in [("reverse", backward),
                          *((m, [symmetrize(f, b, m) for f, b in zip(forward, backward)]) for m in SYMMETRIZATIONS)]:
        result = gold.score(links)
        print(f"metric=aer_{name}_{step}_{method} value={result.aer:.4f}")
        rows.append((name, f"the reverse model alone, step {step}" if method == "reverse"
                     else f"both directions, argmax links, step {step}", method, result))
    return rows


def build_text(out: Path, multi30k: Path, tatoeba: Path, sources: list[str], targets: list[str]) -> None:
    """`out/unseen` and `out/seen`: the training folders of the module docstring."""
    train = {lang: list(read_lines(find_split_file(multi30k, "train", lang))) for lang in ("de", "en")}
    for english, german in read_tsv(tatoeba):
        train["en"].append(english)
        train["de"].append(german)
    gold = {"de": sources, "en": targets}
    for name, extra in (("unseen", {"de": [], "en": []}), ("seen", gold)):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        for lang in ("de", "en"):
            (folder / f"train.{lang}").write_text("".join(f"{line}\n" for line in train[lang] + extra[lang]),
                                                   encoding="utf-8")
            for split in ("val", "test_2016_flickr"):
                (folder / f"{split}.{lang}").write_text(
                    "".join(f"{line}\n" for line in read_lines(find_split_file(multi30k, split, lang))),
                    encoding="utf-8")
        print(f"{folder}: {len(train['de']) + len(extra['de']):,} training pairs", file=sys.stderr)


def eflomal_rows(venv: Path, text: Path, gold: GoldSet, langs: tuple[str, str]
                 ) -> list[tuple[str, str, str, AlignmentScores]]:
    """eflomal's rows: trained with the gold sentences appended to `text`, and without them (priors)."""
    programs = ensure_eflomal(venv)
    pairs = gold.pairs
    tokenizer = WordTokenizer()
    training = [(tokenizer.tokenize(s), tokenizer.tokenize(t)) for s, t in
                zip(*(read_lines(find_split_file(text, "train", lang)) for lang in langs), strict=True)]
    runs = [("eflomal_seen", "eflomal, gold sentences in its text", f"{len(training) + len(pairs):,} pairs",
             eflomal_align(programs, training + pairs, range(len(training), len(training) + len(pairs)))),
            ("eflomal_unseen", "eflomal, gold sentences unseen", f"{len(training):,} pairs, then priors",
             eflomal_align(programs, training, range(0), pairs))]
    rows = []
    for key, name, trained_on, links in runs:
        print(f"metric=seconds_{key} value={links.wall_seconds:.1f}")
        print(f"metric=cpu_seconds_{key} value={links.cpu_seconds:.1f}")
        label = f"defaults, {trained_on}; {links.wall_seconds:.0f} s wall, {links.cpu_seconds:.0f} s CPU"
        for method, predicted in [("forward", links.forward), ("reverse", links.reverse),
                                  *((m, [symmetrize(f, b, m) for f, b in zip(links.forward, links.reverse)])
                                    for m in SYMMETRIZATIONS)]:
            result = gold.score(predicted)
            print(f"metric=aer_{key}_{method} value={result.aer:.4f}")
            rows.append((name, label, method, result))
    return rows


def links_by_method(posteriors: list[tuple[WordPosterior, WordPosterior]]) -> list[tuple[str, list[set[Link]]]]:
    """The aligner's links (align.aligner_posteriors' posteriors) by each rule: each direction's
    alone, each symmetrization of the two, and their averaged posteriors (its default)."""
    forward = [aligner_links(*f) for f, _ in posteriors]
    backward = [flipped(aligner_links(*b)) for _, b in posteriors]
    return [("forward", forward), ("reverse", backward),
            *((m, [symmetrize(f, b, m) for f, b in zip(forward, backward)]) for m in SYMMETRIZATIONS),
            (AVERAGE, [averaged(f, b) for (f, _), (b, _) in posteriors])]


def aligner_rows(name: str, path: str, translator: Translator, gold: GoldSet,
                 adapt: int) -> list[tuple[str, str, str, AlignmentScores]]:
    """Rows of the aligner trained for the model (attnmt train-aligner): each direction's links and
    each symmetrization of the two, labelled with how it was trained; with `adapt`, the aligner
    first trains that many epochs more on the gold sentences' text (attnmt align --adapt)."""
    trained = model_info(path)["aligner"]
    about = (f"its aligner (--method aligner): {trained['pairs']:,} pairs, {trained['epochs']} epochs, "
             f"{trained['minutes']} min")
    aligner = read_aligner(translator)
    assert aligner is not None
    if adapt:
        aligner = train_aligner(translator, gold.sources, gold.targets, adapt, aligner=aligner, hold_out=False,
                                log=lambda line: print(f"{name} adapting: {line}", file=sys.stderr, flush=True))
        about += f", then --adapt {adapt} on the {len(gold.sources)} gold pairs' text"
    rows = []
    key = f"{name}_aligner" + (f"_adapt{adapt}" if adapt else "")
    for method, links in links_by_method(aligner_posteriors(translator, aligner, gold.pairs)):
        result = gold.score(links)
        print(f"metric=aer_{key}_{method} value={result.aer:.4f}")
        rows.append((name, about, method, result))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gold", required=True, help="directory with test.SRC, test.TGT (--langs), test.talp")
    parser.add_argument("--langs", default="de,en", metavar="SRC,TGT",
                        help="the gold set's languages, source first (default: %(default)s, the RWTH set; fr,en for "
                             "bench/hansards_text.py's)")
    parser.add_argument("--data", help="Multi30k directory: train the models (else give --model)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="attention kinds to train (default: %(default)s)")
    parser.add_argument("--budget-min", type=float, default=8.0, help="training wall clock per model, minutes")
    parser.add_argument("--epochs", type=int, help="train this many epochs instead (a budget that other jobs on the "
                                                   "machine do not change)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every model trained, e.g. train.precision=fp32 on a CPU whose bf16 is slow")
    parser.add_argument("--out", default="runs/align", help="where the trained models go, one folder per kind")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH", help="score this model too")
    parser.add_argument("--reverse", action="append", default=[], metavar="NAME=PATH",
                        help="the en->de model paired with the de->en model NAME: both ways, symmetrized")
    parser.add_argument("--coverage", metavar="DIR", help="directory with train.de and train.en: how many gold words "
                                                          "they hold (default: --data)")
    parser.add_argument("--threshold", type=float, default=0.3, help="for the threshold rows")
    parser.add_argument("--pairs", metavar="FROM:TO", help="score these gold pairs only (from 0, as a Python slice: "
                                                           "0:100 for choosing, 100: for scoring what was chosen); "
                                                           "every aligner still reads all of them")
    parser.add_argument("--build-text", metavar="OUT", help="write the `unseen` and `seen` training folders, then stop")
    parser.add_argument("--multi30k", metavar="DIR", help="for --build-text: Multi30k's folder")
    parser.add_argument("--tatoeba", metavar="FILE", help="for --build-text: Tatoeba's deu.txt(.gz)")
    parser.add_argument("--eflomal", metavar="VENV", help="run eflomal from this virtual environment (created if "
                                                          "missing) on --text")
    parser.add_argument("--text", metavar="DIR", help="for --eflomal: train.de and train.en without the gold sentences")
    parser.add_argument("--adapt", type=int, nargs="+", default=[0], metavar="EPOCHS",
                        help="an aligner's rows after training it this many epochs more on the gold sentences' text "
                             "(attnmt align --adapt), one set of rows each (default: 0)")
    parser.add_argument("--aligner-only", action="store_true", help="of a model, score its aligner only, not its attention")
    args = parser.parse_args()
    if args.build_text and not (args.multi30k and args.tatoeba):
        parser.error("--build-text needs --multi30k and --tatoeba")
    if args.eflomal and not args.text:
        parser.error("--eflomal needs --text (the training text without the gold sentences)")

    src_lang, tgt_lang = args.langs.split(",")
    gold = GoldSet.read(args.gold, args.langs, args.pairs)
    sources, targets = gold.sources, gold.targets
    if args.pairs:
        print(f"# gold pairs {args.pairs} scored: {len(gold.links[gold.scored])} of {len(gold.links)}", file=sys.stderr)
    if args.build_text:
        build_text(Path(args.build_text), Path(args.multi30k), Path(args.tatoeba), sources, targets)
        return
    pairs = gold.pairs

    models = dict(item.split("=", 1) for item in args.model)
    if args.data:
        for kind in args.kinds.split(","):
            budget = ([f"train.epochs={args.epochs}", "train.max_minutes=0"] if args.epochs
                      else [f"train.max_minutes={args.budget_min}"]) + args.set
            models[kind] = str(train_kind(kind, args.data, budget, Path(args.out) / kind))
    if args.data or args.coverage:
        for lang, lines in ((src_lang, sources), (tgt_lang, targets)):
            share, words = coverage(lines, list(read_lines(find_split_file(args.coverage or args.data, "train", lang))))
            print(f"metric=gold_words_in_training_{lang} value={share:.4f}")
            print(f"# {lang}: {sum(words.values())} running words, {len(words)} distinct", file=sys.stderr)
    reverse = dict(item.split("=", 1) for item in args.reverse)
    if set(reverse) - set(models):
        parser.error(f"--reverse {', '.join(sorted(set(reverse) - set(models)))}: no --model of that name to pair with")

    diagonal = [{(min(round((t + 0.5) * len(s) / len(t_words) - 0.5), len(s) - 1), t) for t in range(len(t_words))}
                for s, t_words in pairs]
    result = gold.score(diagonal)
    print(f"metric=aer_diagonal value={result.aer:.4f}")
    rows = [("no model", "target word t of T to source word round((t + 0.5)·S/T − 0.5)", "diagonal", result)]
    if args.eflomal:
        rows += eflomal_rows(Path(args.eflomal), Path(args.text), gold, (src_lang, tgt_lang))
    for name, path in models.items():
        translator = Translator.load(path, "cpu")
        pieces = [translator.src_tokenizer.tokenize(s) for s in sources]
        vocab = translator.tokenization.src_vocab
        unknown = sum(vocab.encode(p).count(vocab.stoi[UNK]) for p in pieces)
        print(f"metric=unknown_source_pieces_{name} value={unknown}")
        if read_aligner(translator) is not None:
            for adapt in args.adapt:
                rows += aligner_rows(name, path, translator, gold, adapt)
        if args.aligner_only:
            continue
        layers = cross_attention_layers(translator)
        views = [(None, "")] if layers == 1 else [(None, "default"), *((n, f"layer {n}") for n in range(1, layers + 1))]
        for step in ALIGN_STEPS:
            default_view: list = []                 # the default layer's attention, which --reverse pairs with
            for layer, label in views:
                attention = word_attention(translator, pairs, layer, step=step)     # computed once for both rules
                if layer is None:
                    default_view = attention
                for method in ("argmax", "threshold"):
                    result = gold.score([links_of(a, method, args.threshold) for a in attention])
                    key = "_".join(filter(None, [name, label.replace(" ", ""), step, method]))
                    print(f"metric=aer_{key} value={result.aer:.4f}")
                    view = label if layer or not label else f"default (layer {default_layer(layers)})"
                    rows.append((name, ", ".join(filter(None, [view, f"step {step}"])), method, result))
            if name in reverse:
                rows += both_ways(name, Translator.load(reverse[name], "cpu"), gold,
                                  [links_of(a, "argmax") for a in default_view], step)
    print("\n| model | attention read | links | AER | precision | recall | links predicted |")
    print("|---|---|---|---:|---:|---:|---:|")
    for name, label, method, result in rows:
        rule = f"threshold {args.threshold}" if method == "threshold" else method
        print(f"| {name} | {label or 'its attention'} | {rule} | {result.aer:.3f} | {result.precision:.3f} | "
              f"{result.recall:.3f} | {result.links} |")


if __name__ == "__main__":
    main()
