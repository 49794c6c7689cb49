"""The commands that show a model's attention: `attnmt plot`, `attnmt align` and `attnmt explain`."""

from __future__ import annotations

import argparse
import sys
import typing

from ..choices import (
    ALIGN_METHODS,
    ALIGN_STEPS,
    ALIGNER,
    ALIGNER_MAX_EPOCHS,
    ATTENTION_METHODS,
    AVERAGE,
    IG_STEPS,
    LINK_THRESHOLD,
    MAP_AXES,
    MAX_JUMP_WEIGHT,
    METHODS,
    SYMMETRIZATIONS,
)
from ..config import Range
from ..errors import AttnmtError
from ..files import check_parent_dir
from .decoding import (
    add_compute,
    add_engine,
    add_model,
    engine_of,
    load_attnmt,
    load_translator,
    say_precision,
    use_decoding_threads,
)
from .lines import output, read_pairs
from .parsing import Commands, Number, model_argument

if typing.TYPE_CHECKING:
    from ..translate import Translator

STEP_HELP = ("which step's attention aligns a target word: output, the step that writes it (Luong's, the default); "
             "input, the next step, which reads it (Chen et al. 2020's shift-att)")
# --layer and --head, from 1; the bounds of the model at hand are AttentionView.check's.
FROM_1 = Number(int, Range("[1, 1024]"))
# `attnmt align`'s flags that one kind of method reads (by dest): the --method each is for, and why the other
# kind refuses it.
READS_NO_ATTENTION, BY_ATTENTION = "the aligner reads no attention", " or ".join(ATTENTION_METHODS)
ATTENTION_FLAGS = {"threshold": ("threshold", READS_NO_ATTENTION), "layer": (BY_ATTENTION, READS_NO_ATTENTION),
                   "head": (BY_ATTENTION, READS_NO_ATTENTION), "step": (BY_ATTENTION, READS_NO_ATTENTION),
                   "reverse": (BY_ATTENTION, "the aligner aligns both ways itself")}
ALIGNER_FLAGS = {"adapt": (ALIGNER, "only the aligner adapts to the pairs"),
                 "jump_weight": (ALIGNER, "only the aligner weighs jumps")}


def add_plot(commands: Commands) -> None:
    plot = commands.add_parser("plot", help="draw the attention of one translation as a heatmap")
    add_model(plot)
    add_engine(plot)
    plot.add_argument("sentence", nargs="?", help="the sentence to translate (not with --timeline)")
    plot.add_argument("--out", required=True, help="PNG file to write (with --timeline: the GIF; the contact sheet "
                                                   "goes beside it as .png)")
    plot.add_argument("--timeline", action="store_true",
                      help="MODEL is a run folder: draw how the attention of a sentence it watched formed during "
                           "training (train.watch), as an animation and a contact sheet")
    plot.add_argument("--watched", type=FROM_1, default=1, help="with --timeline: which watched sentence, from 1")
    plot.add_argument("--attention", choices=list(MAP_AXES), default="cross",
                      help="which attention: cross (output over source, the default), or the Transformer's "
                           "encoder or decoder self-attention")
    plot.add_argument("--layer", type=FROM_1, default=None,
                      help="the layer to draw, from 1 (default: the last; with --target the penultimate, as attnmt "
                           "align reads it)")
    plot.add_argument("--head", type=Number(int, FROM_1.range, words=("mean",)), default="mean",
                      help="the head to draw, from 1, or mean: their average (default)")
    plot.add_argument("--grid", action="store_true", help="draw every layer and head, a row per layer")
    plot.add_argument("--target", help="draw the attention between words of this given translation (teacher-forced, as "
                                       "attnmt align reads it) instead of translating; with the model's links as dots")
    plot.add_argument("--gold", metavar="LINKS", help="with --target: gold links to draw over the map, e.g. '1-1 2p3' "
                                                     "(i-j sure, ipj possible; source word i, target word j)")
    plot.add_argument("--gold-base", type=int, choices=[0, 1], default=0,
                      help="whether --gold numbers words from 0 (Pharaoh, the default) or 1 (the RWTH files)")
    plot.add_argument("--step", choices=ALIGN_STEPS, default="output", help=f"with --target: {STEP_HELP}")
    plot.set_defaults(run=_plot)


def _plot(args: argparse.Namespace) -> None:
    from ..plot import missing_glyphs, write_png

    check_parent_dir(args.out)
    if args.timeline:
        return _plot_timeline(args)
    if args.sentence is None:
        raise AttnmtError("plot needs a sentence to translate (or --timeline, with a run folder)")
    if args.target is not None and engine_of(args, args.model) == "ctranslate2":
        raise AttnmtError("--target reads attention by teacher forcing, which attnmt's own engine does: give the "
                          "attnmt model file instead of the CTranslate2 directory")
    if args.target is not None:
        return _plot_alignment(args, load_attnmt(args, args.model))
    translator = load_translator(args, args.model)
    if args.gold is not None:
        raise AttnmtError("--gold needs --target: gold links are drawn over the attention of the given translation")
    result = translator.translate([args.sentence])[0]
    if result.attention is None:
        raise AttnmtError(f"{args.model}: this model has no attention ({translator.config.model.without_attention()}); "
                          f"nothing to plot")
    if not result.tokens or not result.source_tokens:
        raise AttnmtError("nothing to plot: the sentence or its translation is empty")
    title = f"{args.sentence} -> {result.text}"
    missing = missing_glyphs(result.source_tokens + result.tokens + [title])
    if missing:
        print(f"attnmt: warning: no installed font draws {''.join(missing[:10])!r}; they will show as boxes. "
              "Install a font for this script (Debian: fonts-noto-core)", file=sys.stderr)
    figure = translator.figure(result, args.attention, args.layer, None if args.head == "mean" else args.head,
                               grid=args.grid, title=title)
    write_png(figure, args.out)
    print(f"{result.text}\nheatmap written to {args.out}")
    say_precision(args, translator.precision_note())


def _plot_timeline(args: argparse.Namespace) -> None:
    """`plot RUN --timeline`: a watched sentence's translation and attention (the last layer, its heads'
    mean) at each point the run recorded, as a GIF and, beside it, a contact sheet."""
    from pathlib import Path

    from ..plot import write_animation, write_png
    from ..training.timeline import read_timeline, timeline_figures

    if args.sentence is not None or args.target is not None or args.grid:
        raise AttnmtError("--timeline draws the sentences the run watched: leave out the sentence, --target and --grid")
    points = read_timeline(Path(args.model))
    frames, sheet = timeline_figures(points, args.watched)
    write_animation(frames, args.out)
    sheet_path = Path(args.out).with_suffix(".png")
    write_png(sheet, sheet_path)
    print(f"{len(points)} points of training, steps {points[0].step} to {points[-1].step}: "
          f"{points[-1].sentences[args.watched - 1].source}\nanimation written to {args.out}\n"
          f"contact sheet written to {sheet_path}")


def _plot_alignment(args: argparse.Namespace, translator: Translator) -> None:
    """`plot --target`: the word attention of the given translation (analysis/align.py), the model's links
    (argmax) as dots and the gold links, if given, as squares (sure) and dashed squares (possible)."""
    from ..analysis.align import AttentionLinks, align_by_attention, parse_links
    from ..plot import plot_attention

    if args.attention != "cross" or args.grid:
        raise AttnmtError("--target draws cross-attention between words, one map: leave out --attention and --grid")
    head = None if args.head == "mean" else args.head
    (alignment,) = align_by_attention(translator, [args.sentence], [args.target],
                                      AttentionLinks(layer=args.layer, head=head, step=args.step))
    source, target = alignment.source_words, alignment.target_words
    if not source or not target:
        raise AttnmtError("nothing to plot: the sentence or the target is empty")
    gold = None
    if args.gold is not None:
        gold = parse_links(args.gold, _gold_base(args), "--gold", (len(source), len(target)))
    plot_attention(alignment.attention, source, target, args.out, title=f"{args.sentence} -> {args.target}",
                   axes=("source words", "target words"), links=alignment.links, gold=gold)
    print(f"{' '.join(f'{s}-{t}' for s, t in alignment.links)}\nheatmap written to {args.out}")


def _gold_base(args: argparse.Namespace) -> int:
    """--gold-base, or by the gold file's name: 1 for RWTH's .talp files, 0 (Pharaoh) otherwise."""
    if args.gold_base is not None:
        return args.gold_base
    return 1 if str(args.gold).endswith(".talp") else 0


def add_align(commands: Commands) -> None:
    align = commands.add_parser("align", help="word alignments from the model's attention (Pharaoh i-j), and AER "
                                              "against gold links")
    align.add_argument("model", type=model_argument,
                       help="model file (or a training run's folder) translating --src into --tgt")
    align.add_argument("--src", required=True, help="source sentences, one per line, words separated by spaces")
    align.add_argument("--tgt", required=True, help="their translations, line by line, words separated by spaces")
    align.add_argument("--output", "-o", help="where the links go, one line per pair (default: stdout)")
    align.add_argument("--method", choices=ALIGN_METHODS, default="argmax",
                       help="argmax: each target word to the source word it attends most (default); threshold: "
                            "every pair with at least --threshold of the attention; aligner: the aligner trained for "
                            "the model (attnmt train-aligner), each word to its most probable word of the other "
                            "side in both directions, combined by --symmetrize")
    align.add_argument("--threshold", type=Number(float, Range("(0, 1]")), default=None,
                       help=f"the word attention a link needs with --method threshold (default: {LINK_THRESHOLD})")
    align.add_argument("--layer", type=FROM_1, default=None,
                       help="Transformer: the layer whose cross-attention aligns, from 1 (default: the penultimate)")
    align.add_argument("--head", type=FROM_1, default=None,
                       help="Transformer: one head, from 1 (default: the mean of the layer's heads)")
    align.add_argument("--step", choices=ALIGN_STEPS, default=None, help=STEP_HELP)
    align.add_argument("--reverse", metavar="MODEL", type=model_argument,
                       help="a model translating --tgt into --src: the links of both directions are combined by "
                            "--symmetrize")
    align.add_argument("--symmetrize", choices=[*SYMMETRIZATIONS, AVERAGE], default=None,
                       help="with --reverse or --method aligner: how the two directions combine, by their links "
                            "or by their weights averaged (default: average with --method aligner, grow-diag-final "
                            "with --reverse)")
    align.add_argument("--adapt", type=Number(int, Range("[0, 100]")), default=None, metavar="EPOCHS",
                       help="with --method aligner: first train a copy of the aligner this many epochs on the pairs "
                            "given (their text alone, as statistical aligners train on the text they align), then "
                            "align; the model file is unchanged (default: 0)")
    align.add_argument("--jump-weight", type=Number(float, Range(f"[0, {MAX_JUMP_WEIGHT:g}]")), default=None,
                       metavar="W", help="with --method aligner: how much where the last word went counts, against "
                                         "what each word translates, when links are read: the learned jumps' scores "
                                         "times W (default: the model file's, 0.75 from attnmt train-aligner; 1 reads "
                                         "them as trained, lower lets the words count for more)")
    align.add_argument("--gold", help="gold links, one line per pair (i-j sure, ipj possible): prints AER, precision "
                                      "and recall on stderr")
    align.add_argument("--gold-base", type=int, choices=[0, 1], default=None,
                       help="whether --gold numbers words from 0 (Pharaoh) or 1 (default: 1 for .talp files, else 0)")
    add_compute(align)
    align.set_defaults(run=_align)


def _align(args: argparse.Namespace) -> None:
    _refuse_other_methods_flags(args)
    from ..analysis.align import AlignerLinks, AttentionLinks, align_by_aligner, align_by_attention, pharaoh, read_gold, score
    from ..fast.process import set_up_decoding_process
    from ..translate import Translator

    pairs = read_pairs(("--src", args.src), ("--tgt", args.tgt))
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    gold = None
    if args.gold:
        gold = read_gold(args.gold, _gold_base(args), [(len(s.split()), len(t.split())) for s, t in pairs])
    use_decoding_threads(args)
    set_up_decoding_process()
    translator = Translator.load(args.model, args.device)
    if args.method == ALIGNER:
        by_aligner = AlignerLinks(**_given(adapt=args.adapt, jump_weight=args.jump_weight,
                                           symmetrization=args.symmetrize))
        alignments = align_by_aligner(translator, sources, targets, by_aligner,
                                      log=lambda line: print(line, file=sys.stderr, flush=True))
    else:
        reverse = Translator.load(args.reverse, args.device) if args.reverse else None
        by_attention = AttentionLinks(args.method, layer=args.layer, head=args.head,
                                      **_given(threshold=args.threshold, step=args.step, symmetrization=args.symmetrize))
        alignments = align_by_attention(translator, sources, targets, by_attention, reverse)
    with output(args.output) as write:
        write("".join(pharaoh(a.links) + "\n" for a in alignments))
    if gold is not None:
        print(score([a.links for a in alignments], gold).line(), file=sys.stderr)


def _refuse_other_methods_flags(args: argparse.Namespace) -> None:
    """Refuse, in one line naming it, a flag of the other kind of method than --method's (before torch loads)."""
    for dest, (owner, why) in (ATTENTION_FLAGS if args.method == ALIGNER else ALIGNER_FLAGS).items():
        if getattr(args, dest) is not None:
            flag = "--" + dest.replace("_", "-")
            raise AttnmtError(f"{flag} {getattr(args, dest)} with --method {args.method}: {why} ({flag} is for --method "
                              f"{owner})")


def _given(**settings: typing.Any) -> dict[str, typing.Any]:
    """The settings a flag gave (not None): the rest keep their defaults, written where the settings live."""
    return {name: value for name, value in settings.items() if value is not None}


def add_train_aligner(commands: Commands) -> None:
    trainer = commands.add_parser("train-aligner", help="train a word aligner for a model (attnmt align --method "
                                                        "aligner) on sentence pairs, the model unchanged; a model "
                                                        "file with an aligner has it trained further")
    trainer.add_argument("model", type=model_argument,
                         help="model file (or a training run's folder) translating --src into --tgt")
    trainer.add_argument("--src", required=True, help="source sentences, one per line (plain text, .gz too)")
    trainer.add_argument("--tgt", required=True, help="their translations, line by line")
    trainer.add_argument("--out", required=True, help="the model file with the aligner, written atomically (may be "
                                                      "the model file itself)")
    trainer.add_argument("--epochs", type=Number(int, Range("[1, 100]")), default=ALIGNER_MAX_EPOCHS,
                         help="passes over the pairs at most (default: %(default)s); training stops sooner, keeping "
                              "the epoch before, once an epoch no longer lowers the perplexity of the pairs it "
                              "holds out (a twentieth, at most 2,000)")
    trainer.add_argument("--window", type=Number(int, Range("[0, 5]")), default=0,
                         help="neighbours of each piece on each side its lexical model reads (default: %(default)s, "
                              "the piece alone); an aligner trained further keeps its own")
    trainer.add_argument("--seed", type=Number(int, Range("[0, 2147483647]")), default=1,
                         help="seed of the new weights, the held-out pairs and the batches' order (default: "
                              "%(default)s); two seeds show how far a result moves from run to run")
    add_compute(trainer)
    trainer.set_defaults(run=_train_aligner)


def _train_aligner(args: argparse.Namespace) -> None:
    import time

    from ..analysis.aligner import train_aligner, write_aligner
    from ..fast.process import set_up_training_process
    from ..translate import Translator, model_info

    check_parent_dir(args.out)
    pairs = read_pairs(("--src", args.src), ("--tgt", args.tgt))
    use_decoding_threads(args)
    set_up_training_process()
    translator = Translator.load(args.model, args.device)
    started = time.monotonic()
    before = model_info(args.model)["aligner"] or {"minutes": 0.0}
    aligner = train_aligner(translator, [s for s, _ in pairs], [t for _, t in pairs], args.epochs,
                            seed=args.seed, window=args.window, log=lambda line: print(line, file=sys.stderr, flush=True))
    write_aligner(args.model, args.out, aligner, {
        "pairs": len(pairs), "seed": args.seed, "minutes": round(before["minutes"] + (time.monotonic() - started) / 60, 1)})
    print(f"model with its aligner written to {args.out}")


def add_explain(commands: Commands) -> None:
    explain = commands.add_parser("explain", help="every number of each decoding step of one sentence: scores, "
                                                  "weights, context shares, the next-token probabilities")
    explain.add_argument("model", type=model_argument, help="model file, or a training run's folder")
    explain.add_argument("sentence", help="the sentence to translate (greedily) and explain")
    add_compute(explain)
    explain.add_argument("--step", type=Number(int, Range("[1, 100000]")), default=None,
                         help="show every number of this output step (from 1); default: every step, compactly")
    explain.add_argument("--attention", choices=["cross", "decoder"], default="cross",
                         help="cross: the output over the source (default); decoder: a Transformer's self-attention "
                              "over the output so far")
    explain.add_argument("--layer", type=FROM_1, default=None,
                         help="Transformer: the decoder layer, from 1 (default: the last)")
    explain.add_argument("--head", type=FROM_1, default=None,
                         help="Transformer: the head, from 1 (default: 1)")
    explain.add_argument("--json", action="store_true", help="print one JSON document with every step")
    explain.add_argument("--attribution", choices=METHODS, default=None,
                         help="show instead how much each source word decides the step's output, beside its "
                              "attention: grad (gradient x input), ig (integrated gradients) or occlusion (the "
                              "sentence run again without the word); docs/learn.md")
    explain.add_argument("--target", help="with --attribution: attribute the decoding of this translation "
                                          "(default: the model's own greedy translation)")
    explain.add_argument("--contrast", metavar="WORD", help="with --attribution and --step: why the step wrote its "
                                                            "token rather than WORD (a token of the target vocabulary)")
    explain.add_argument("--ig-steps", type=Number(int, Range("[1, 10000]")), default=None,
                         help=f"with --attribution ig: the steps from the baseline to the input (default: {IG_STEPS})")
    explain.set_defaults(run=_explain)


def _explain(args: argparse.Namespace) -> None:
    import json

    from ..analysis.attribution import Attribution, explain_or_attribute, render
    from ..analysis.explain import render as render_explanation
    from ..seam import AttentionView
    from ..translate import Translator

    use_decoding_threads(args)
    translator = Translator.load(args.model, args.device)
    result = explain_or_attribute(translator, args.sentence, AttentionView(args.attention, args.layer, args.head),
                                  args.step, args.attribution, args.target, args.contrast, args.ig_steps, progress=True)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=1))
    elif isinstance(result, Attribution):
        print(render(result, args.step))
    else:
        print(render_explanation(result, args.step))
