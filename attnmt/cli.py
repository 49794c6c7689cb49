"""The `attnmt` command: a thin front over prepare, train, translate, evaluate, plot, serve and the demo."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import itertools
import signal
import sys
import threading
import traceback
import typing
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from .config import (
    ALIGN_METHODS,
    ALIGN_STEPS,
    CTRANSLATE2_QUANTIZATIONS,
    PRECISIONS,
    SYMMETRIZATIONS,
    DecodeConfig,
    Range,
    ServeConfig,
    field_range,
)
from .errors import AttnmtError
from .files import check_parent_dir

if typing.TYPE_CHECKING:
    from .translate import TextTranslator, Translator


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line (`attnmt: error: ...`) and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"attnmt: error: {self.prog}: {message} (see {self.prog} --help)\n")

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # A mistyped command gets the nearest commands, not "argument COMMAND: invalid choice" and all of them.
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            near = difflib.get_close_matches(str(value), action.choices)
            hint = f"did you mean {' or '.join(near)}?" if near else f"the commands are {', '.join(action.choices)}"
            raise argparse.ArgumentError(None, f"unknown command {value!r}; {hint}")
        super()._check_value(action, value)


class Number:
    """An argparse type: an int or float within a Range, named in the message if not."""

    def __init__(self, kind: type, allowed: Range):
        self.kind, self.range = kind, allowed
        self.__name__ = "an integer" if kind is int else "a number"  # argparse's "invalid <name> value"

    def __call__(self, text: str) -> float:
        try:
            value = self.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.__name__}, got {text!r}") from None
        refusal = self.range.refusal(value)
        if refusal:
            raise argparse.ArgumentTypeError(refusal)
        return value


def number_flag(cls: type, name: str) -> Number:
    """The argparse type of a flag that sets the config field `cls.name`."""
    return Number(typing.get_type_hints(cls)[name], field_range(cls, name))


def _load_translator(args: argparse.Namespace, path: str) -> TextTranslator:
    """The model at `path` with the device, precision and compile flags, decoded by attnmt or, for a
    directory `attnmt export --to ctranslate2` wrote (or --engine ctranslate2), by CTranslate2."""
    from .ct2 import CTranslate2Translator  # here: `attnmt --help` need not import torch

    if _engine(args, path) == "attnmt":
        from .fast.process import set_up_decoding_process

        set_up_decoding_process()
        return _load_attnmt(args, path)
    if args.compile or args.reference:
        raise AttnmtError(f"{'--compile' if args.compile else '--reference'} is an option of attnmt's own engine; "
                          f"CTranslate2 decodes {path}")
    return CTranslate2Translator.load(path, args.device, args.precision)


def _load_attnmt(args: argparse.Namespace, path: str) -> Translator:
    """The model at `path`, decoded by attnmt's own engine, with the device, precision and compile flags."""
    from .translate import Translator

    return Translator.load(path, args.device, args.precision, args.compile, fast_paths=not args.reference)


def _engine(args: argparse.Namespace, path: str) -> str:
    """--engine, with auto resolved: ctranslate2 for a directory attnmt export wrote."""
    from .ct2 import is_ctranslate2_model

    return args.engine if args.engine != "auto" else "ctranslate2" if is_ctranslate2_model(path) else "attnmt"


def _say_precision(*notes: Optional[str]) -> None:
    """What `auto` chose, or a warning (Translator.precision_note), on stderr; said at the end of a
    run that went well, so that a bad input found on the way still gets exactly one line."""
    for note in filter(None, notes):
        print(f"attnmt: {note}", file=sys.stderr)


def _demo(args: argparse.Namespace) -> None:
    from .demo import run_demo
    from .fast.process import set_up_training_process

    set_up_training_process()
    run_demo(args.out, overwrite=args.overwrite)


def _train(args: argparse.Namespace) -> None:
    """`attnmt train`, in one process or in each of the processes torchrun starts."""
    from .config import load_config
    from .distributed import start_ranks
    from .fast.process import set_up_training_process
    from .train import train

    config = load_config(args.config, args.overrides)
    if config.train.fast_paths:
        set_up_training_process()
    ranks = start_ranks(config.train)
    try:
        train(config, resume=args.resume, overwrite=args.overwrite, ranks=ranks)
    except AttnmtError as err:
        if ranks.world_size == 1:
            raise
        raise AttnmtError(f"rank {ranks.rank} of {ranks.world_size}: {err}") from None
    finally:
        ranks.close()


def _prepare(args: argparse.Namespace) -> None:
    """`attnmt prepare`: the training data as `attnmt train` would prepare them, and the report."""
    from .config import load_config
    from .prepare import find_corpus, prepare_corpus, report_lines

    config = load_config(args.config, args.overrides)
    found = None if args.rebuild else find_corpus(config)
    corpus = found or prepare_corpus(config, rebuild=args.rebuild)
    print("\n".join(report_lines(corpus)))
    if found:
        print("  (prepared earlier from the same raw files and settings; attnmt prepare --rebuild prepares it anew)")


def _input_lines(path: str | None) -> Iterator[str]:
    """The lines of a file, or of stdin for None or "-", read as they are asked for."""
    from .data import decode_lines, read_lines

    if path is None or path == "-":
        return decode_lines(sys.stdin.buffer, "<stdin>")
    return read_lines(path)


def _read_input(path: str | None) -> list[str]:
    return list(_input_lines(path))


@contextmanager
def _output(path: str | None) -> Iterator[Callable[[str], object]]:
    """A function that writes text where the output goes, as it is done: to stdout at once, to a
    file (path) only when the block ends without an error, through files.atomic_writer."""
    from .files import atomic_writer

    if path is None or path == "-":
        def write(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()  # a reader of the pipe gets each chunk when it is done

        yield write
    else:
        with atomic_writer(path) as handle:
            yield lambda text: handle.write(text.encode("utf-8"))


def _translate(args: argparse.Namespace) -> None:
    translator = _load_translator(args, args.model)
    beam = args.beam or translator.config.decode.beam_size
    if args.n_best > beam:
        raise AttnmtError(f"--n-best {args.n_best} is more than the beam size {beam}; add --beam {args.n_best} or more")
    lines = _input_lines(args.input)
    first = list(itertools.islice(lines, 1))  # a missing or unreadable input fails here, before any output
    chunks = translator.translate_stream(itertools.chain(first, lines), args.n_best, args.beam, args.alpha,
                                         args.batch_size)
    with _output(args.output) as write:
        number = 0  # of the sentence, in n-best lists
        for nbest in chunks:
            if args.n_best == 1:
                outputs = [hyps[0].text for hyps in nbest]
            else:  # Moses-style n-best list: sentence number ||| translation ||| log-probability
                outputs = [f"{number + i} ||| {h.text} ||| {h.log_prob:.4f}" for i, hyps in enumerate(nbest) for h in hyps]
            write("".join(line + "\n" for line in outputs))
            number += len(nbest)
    _say_precision(translator.precision_note())


def _evaluate(args: argparse.Namespace) -> None:
    from .evaluate import LENGTH_EDGES, bleu_by_length, parse_length_edges, score_outputs
    from .prepare import load_split

    if (args.split is None) == (args.src is None) or (args.src is None) != (args.ref is None):
        raise AttnmtError("evaluate needs either --src and --ref, or --split")
    edges = parse_length_edges(args.buckets) if args.buckets else LENGTH_EDGES
    if args.chart:
        check_parent_dir(args.chart)
    by_length: dict[str, list[dict]] = {}
    notes = []  # one per model; not the models themselves, which would all stay in memory
    for model_path in args.models:
        translator = _load_translator(args, model_path)
        if args.split:
            pairs = load_split(translator.config.data, args.split, args.data)
        else:
            sources, references = _read_input(args.src), _read_input(args.ref)
            if len(sources) != len(references):
                raise AttnmtError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
            pairs = list(zip(sources, references))
        if not pairs:
            source = f"the {args.split} split of {args.data or translator.config.data.path}" if args.split else args.src
            raise AttnmtError(f"nothing to score: {source} has no sentences")
        sources, references = [s for s, _ in pairs], [r for _, r in pairs]
        notes.append(translator.precision_note())
        hypotheses = [t.text for t in translator.translate(sources, args.beam, args.alpha)]
        if len(args.models) > 1:
            print(f"== {model_path}")
        for key, value in score_outputs(translator, pairs, hypotheses, args.lc_tok).items():
            print(f"{key}: {value}")
        if args.by_length or args.chart:
            rows = bleu_by_length(sources, hypotheses, references, edges, args.lc_tok)
            by_length[_model_label(model_path, by_length)] = rows
            print("bleu by source length (word tokens):")
            for row in rows:
                bleu = "-" if row["bleu"] is None else f"{row['bleu']:.2f}"
                print(f"  {row['bucket']:>7}  sentences {row['sentences']:>5}  bleu {bleu}")
    if args.chart:
        from .plot import plot_bleu_by_length

        first = next(iter(by_length.values()))
        plot_bleu_by_length([r["bucket"] for r in first], {name: [r["bleu"] for r in rows] for name, rows in by_length.items()},
                            [r["sentences"] for r in first], args.chart,
                            title="BLEU by source length" + (" (lowercased tokens)" if args.lc_tok else ""))
        print(f"chart written to {args.chart}")
    _say_precision(*notes)


def _model_label(model_path: str, taken: dict) -> str:
    """A short name for a model in a chart: its directory for `DIR/model.safetensors`."""
    path = Path(model_path)
    label = path.parent.name if path.stem in ("model", "checkpoint") and path.parent.name else path.stem
    return label if label not in taken else model_path


STEP_HELP = ("which step's attention aligns a target word: output, the step that writes it (Luong's, the default); "
             "input, the next step, which reads it (Chen et al. 2020's shift-att)")
MAP_AXES = {"cross": ("source", "output"), "encoder": ("source", "source"),
            "decoder": ("output so far (<sos> first)", "output")}


def _plot(args: argparse.Namespace) -> None:
    from .plot import missing_glyphs, plot_attention, plot_attention_grid

    check_parent_dir(args.out)
    if args.target is not None and _engine(args, args.model) == "ctranslate2":
        raise AttnmtError("--target reads attention by teacher forcing, which attnmt's own engine does: give the "
                          "attnmt model file instead of the CTranslate2 directory")
    if args.target is not None:
        return _plot_alignment(args, _load_attnmt(args, args.model))
    translator = _load_translator(args, args.model)
    if args.gold is not None:
        raise AttnmtError("--gold needs --target: gold links are drawn over the attention of the given translation")
    result = translator.translate([args.sentence])[0]
    if result.attention is None:
        raise AttnmtError(f"{args.model}: this model has no attention (model.attention=none); nothing to plot")
    if not result.tokens or not result.source_tokens:
        raise AttnmtError("nothing to plot: the sentence or its translation is empty")
    maps = translator.attention_maps(result)
    if args.attention not in maps:
        raise AttnmtError(f"--attention {args.attention}: this model has no such attention; it has "
                          f"{', '.join(maps)}")
    chosen = maps[args.attention]                                           # [layers, heads, queries, keys]
    layers, heads = chosen.shape[:2]
    if args.layer is not None and args.layer > layers:
        raise AttnmtError(f"--layer {args.layer}: this model's {args.attention} attention has layers 1 to {layers}")
    if args.head != "mean" and not (args.head.isdigit() and 1 <= int(args.head) <= heads):
        raise AttnmtError(f"--head {args.head}: allowed: mean, or a head from 1 to {heads}")
    keys = result.source_tokens if args.attention != "decoder" else ["<sos>", *result.tokens[:-1]]
    queries = result.tokens if args.attention != "encoder" else result.source_tokens
    title = f"{args.sentence} -> {result.text}"
    missing = missing_glyphs(result.source_tokens + result.tokens + [title])
    if missing:
        print(f"attnmt: warning: no installed font draws {''.join(missing[:10])!r}; they will show as boxes. "
              "Install a font for this script (Debian: fonts-noto-core)", file=sys.stderr)
    if args.grid:
        plot_attention_grid(chosen, keys, queries, args.out, title=f"{args.attention} attention: {title}",
                            axes=MAP_AXES[args.attention])
    else:
        layer = chosen[(args.layer or layers) - 1]                          # [heads, queries, keys]
        weights = layer.mean(0) if args.head == "mean" else layer[int(args.head) - 1]
        plot_attention(weights, keys, queries, args.out, title=title, axes=MAP_AXES[args.attention])
    print(f"{result.text}\nheatmap written to {args.out}")
    _say_precision(translator.precision_note())


def _gold_base(args: argparse.Namespace) -> int:
    """--gold-base, or by the gold file's name: 1 for RWTH's .talp files, 0 (Pharaoh) otherwise."""
    if args.gold_base is not None:
        return args.gold_base
    return 1 if str(args.gold).endswith(".talp") else 0


def _align(args: argparse.Namespace) -> None:
    from .align import align, pharaoh, read_gold, score
    from .translate import Translator

    sources, targets = _read_input(args.src), _read_input(args.tgt)
    if len(sources) != len(targets):
        raise AttnmtError(f"--src {args.src} has {len(sources)} lines but --tgt {args.tgt} has {len(targets)}: "
                          f"they pair line by line")
    gold = None
    if args.gold:
        gold = read_gold(args.gold, _gold_base(args), [(len(s.split()), len(t.split())) for s, t in zip(sources, targets)])
    reverse = Translator.load(args.reverse, args.device) if args.reverse else None
    alignments = align(Translator.load(args.model, args.device), sources, targets, args.method, args.threshold,
                       args.layer, args.head, reverse, args.symmetrize, args.step)
    with _output(args.output) as write:
        write("".join(pharaoh(a.links) + "\n" for a in alignments))
    if gold is not None:
        print(score([a.links for a in alignments], gold).line(), file=sys.stderr)


def _plot_alignment(args: argparse.Namespace, translator: Translator) -> None:
    """`plot --target`: the word attention of the given translation (align.py), the model's links
    (argmax) as dots and the gold links, if given, as squares (sure) and dashed squares (possible)."""
    from .align import align, parse_links
    from .plot import plot_attention

    if args.attention != "cross" or args.grid:
        raise AttnmtError("--target draws cross-attention between words, one map: leave out --attention and --grid")
    if args.head != "mean" and not args.head.isdigit():
        raise AttnmtError(f"--head {args.head}: allowed: mean, or a head from 1")
    head = None if args.head == "mean" else int(args.head)
    (alignment,) = align(translator, [args.sentence], [args.target], layer=args.layer, head=head, step=args.step)
    source, target = alignment.source_words, alignment.target_words
    if not source or not target:
        raise AttnmtError("nothing to plot: the sentence or the target is empty")
    gold = None
    if args.gold is not None:
        gold = parse_links(args.gold, _gold_base(args), "--gold", (len(source), len(target)))
    plot_attention(alignment.attention, source, target, args.out, title=f"{args.sentence} -> {args.target}",
                   axes=("source words", "target words"), links=alignment.links, gold=gold)
    print(f"{' '.join(f'{s}-{t}' for s, t in alignment.links)}\nheatmap written to {args.out}")


def _explain(args: argparse.Namespace) -> None:
    import json

    from .explain import check_step, explain, render
    from .families.seam import AttentionView
    from .translate import Translator

    translator = Translator.load(args.model, args.device)
    explanation = explain(translator, args.sentence, AttentionView(args.attention, args.layer, args.head))
    if args.json:
        if args.step is not None:
            explanation.steps = [check_step(explanation, args.step)]
        print(json.dumps(explanation.to_dict(), ensure_ascii=False, indent=1))
    else:
        print(render(explanation, args.step))


def _export(args: argparse.Namespace) -> None:
    from .export import export_ctranslate2

    out = export_ctranslate2(args.model, args.out, args.quantization, args.overwrite)
    print(f"CTranslate2 model written to {out}")


def _info(args: argparse.Namespace) -> None:
    import json

    from .translate import model_info

    info = model_info(args.model)
    if args.json:
        print(json.dumps(info, indent=2))
        return
    sizes = ", ".join(f"{k} {v}" for k, v in info["architecture"].items())
    tokenizer = ", ".join(f"{k} {v}" for k, v in info["tokenizer"].items())
    print(f"{info['file']}: attnmt model file, format {info['format_version']}, weights sha256 {info['weights_sha256']}")
    print(f"family: {info['arch']} ({sizes})")
    print(f"parameters: {info['parameters']:,}")
    print(f"translates: {' '.join(info['source_languages'])} -> {info['tgt_lang']}; tokenizer: {tokenizer}; "
          f"vocabularies: {info['src_vocab_size']:,} source, {info['tgt_vocab_size']:,} target tokens")
    training = info["training"]
    if training is None:
        print("training: not recorded (a file written before attnmt kept it)")
        return
    averaged = f", the average of the last {training['average_of_last']} epochs" if "average_of_last" in training else ""
    print(f"training: {training['training_pairs']:,} pairs, data sha256 {training['data_sha256']}; "
          f"kept at epoch {training['epoch']}, step {training['step']}{averaged}")
    print("validation: " + " | ".join(f"{k} {v}" for k, v in training["validation"].items()))


def _plot_curves(args: argparse.Namespace) -> None:
    from .metrics import read_metrics
    from .plot import plot_curves

    check_parent_dir(args.out)
    runs = {}
    for run in args.runs:
        name = Path(run).name if Path(run).is_dir() else Path(run).parent.name
        runs[name if name not in runs else run] = read_metrics(run)
    plot_curves(runs, args.out)
    print(f"curves of {len(runs)} run(s) written to {args.out}")


def _serve(args: argparse.Namespace) -> None:
    from .access import KeyFile
    from .config import validate_serve
    from .serve import serve  # imported here: FastAPI and uvicorn take a while to import

    def log(line: str) -> None:
        print(line, flush=True)

    limits = ServeConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeConfig)})
    validate_serve(limits)  # the flags, and the key file below, are refused before the model loads
    keys = KeyFile(args.api_keys, log) if args.api_keys else None
    serve(_load_translator(args, args.model), args.host, args.port, limits, log=log, name=args.model, keys=keys,
          access_log=args.access_log)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="attnmt", description="Attention-based neural machine translation.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="train on built-in dates (no download), print accuracy, plot attention")
    demo.add_argument("--out", default="attnmt-demo", help="directory for the model and heatmap (default: %(default)s)")
    demo.add_argument("--overwrite", action="store_true", help="replace a model already in --out")
    demo.set_defaults(run=_demo)

    train = commands.add_parser("train", help="train on the data a YAML config names")
    train.add_argument("config", help="YAML config file (see configs/)")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. model.attention=dot train.epochs=5")
    train.add_argument("--resume", action="store_true", help="continue from the checkpoint in train.out_dir")
    train.add_argument("--overwrite", action="store_true", help="replace a model already in train.out_dir")
    train.set_defaults(run=_train)

    prepare = commands.add_parser("prepare", help="prepare the training data a config names once (tokenize, filter, "
                                                  "count), for every later attnmt train with the same data settings")
    prepare.add_argument("config", help="YAML config file (see configs/)")
    prepare.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. data.path=DIR data.workers=2")
    prepare.add_argument("--rebuild", action="store_true", help="prepare again even if a prepared copy exists")
    prepare.set_defaults(run=_prepare)

    def add_device(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: GPU if there is one)")
        sub.add_argument("--precision", choices=PRECISIONS, default=None,
                         help="decode in fp32, bf16 (faster on CPUs with AVX512-BF16/AMX, slower elsewhere), int8 (bf16 "
                              "with the decoder's per-step products in int8, CPUs only) or auto (bf16 where the device "
                              "computes it natively, fp32 elsewhere) (default: the model's decode.precision)")
        sub.add_argument("--compile", action="store_true",
                         help="decode with a step compiled for this CPU (int8 greedy about 1.3x as fast); the first use "
                              "per model takes 10-60 s and a C++ compiler, later ones load it from the cache in 2-3 s")
        sub.add_argument("--reference", action="store_true",
                         help="decode with the plain reference modules instead of the fast paths (attnmt/fast): "
                              "slower, the same translations up to rounding")

    def add_model(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("model", help="model file (model.safetensors)")
        add_device(sub)

    def add_engine(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--engine", choices=["auto", "attnmt", "ctranslate2"], default="auto",
                         help="what decodes: attnmt's own search, or CTranslate2 for a Transformer exported with "
                              "attnmt export --to ctranslate2, whose directory then stands for the model file "
                              "(auto: CTranslate2 for such a directory)")

    def add_search(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--beam", type=number_flag(DecodeConfig, "beam_size"), default=None,
                         help="beam size (default: the model's decode.beam_size; 1 = greedy)")
        sub.add_argument("--alpha", type=number_flag(DecodeConfig, "alpha"), default=None,
                         help="GNMT length penalty for beam search (default: the model's decode.alpha)")

    translate = commands.add_parser("translate", help="translate lines from stdin or a file")
    add_model(translate)
    add_engine(translate)
    translate.add_argument("--input", "-i", help="one sentence per line (default: stdin)")
    translate.add_argument("--output", "-o", help="where translations go (default: stdout)")
    translate.add_argument("--batch-size", type=number_flag(DecodeConfig, "batch_size"), default=None,
                           help="sentences per batch")
    translate.add_argument("--n-best", type=number_flag(DecodeConfig, "beam_size"), default=1,
                           help="print the N best (at most the beam size): `i ||| text ||| log-prob` lines")
    add_search(translate)
    translate.set_defaults(run=_translate)

    evaluate = commands.add_parser(
        "evaluate", help="translate and score against references (exact match, BLEU, chrF; by source length)")
    evaluate.add_argument("models", nargs="+", metavar="MODEL", help="model file(s); several are scored side by side")
    add_device(evaluate)
    add_engine(evaluate)
    evaluate.add_argument("--src", help="source sentences, one per line")
    evaluate.add_argument("--ref", help="reference translations, line-aligned with --src")
    evaluate.add_argument("--split", choices=["train", "valid", "test"],
                          help="instead of --src/--ref: this split of the data the model was trained on, cut as in training")
    evaluate.add_argument("--data", default="", help="with --split: where the model's data.path is on this machine")
    evaluate.add_argument("--lc-tok", action="store_true",
                          help="also print BLEU on lowercased word tokens, the PyTorch tutorials' recipe (and use it by length)")
    evaluate.add_argument("--by-length", action="store_true", help="also print BLEU per bucket of source length in words")
    evaluate.add_argument("--buckets",
                          help="upper bounds of the length buckets, in words (default: 10,15,20,25, as Bahdanau et al. 2015)")
    evaluate.add_argument("--chart", help="draw BLEU by source length of each model into this PNG file")
    add_search(evaluate)
    evaluate.set_defaults(run=_evaluate)

    plot = commands.add_parser("plot", help="draw the attention of one translation as a heatmap")
    add_model(plot)
    add_engine(plot)
    plot.add_argument("sentence", help="the sentence to translate")
    plot.add_argument("--out", required=True, help="PNG file to write")
    plot.add_argument("--attention", choices=list(MAP_AXES), default="cross",
                      help="which attention: cross (output over source, the default), or the Transformer's "
                           "encoder or decoder self-attention")
    plot.add_argument("--layer", type=Number(int, Range("[1, 1024]")), default=None,
                      help="the layer to draw, from 1 (default: the last; with --target the penultimate, as attnmt "
                           "align reads it)")
    plot.add_argument("--head", default="mean", help="the head to draw, from 1, or mean: their average (default)")
    plot.add_argument("--grid", action="store_true", help="draw every layer and head, a row per layer")
    plot.add_argument("--target", help="draw the attention between words of this given translation (teacher-forced, as "
                                       "attnmt align reads it) instead of translating; with the model's links as dots")
    plot.add_argument("--gold", metavar="LINKS", help="with --target: gold links to draw over the map, e.g. '1-1 2p3' "
                                                     "(i-j sure, ipj possible; source word i, target word j)")
    plot.add_argument("--gold-base", type=int, choices=[0, 1], default=0,
                      help="whether --gold numbers words from 0 (Pharaoh, the default) or 1 (the RWTH files)")
    plot.add_argument("--step", choices=ALIGN_STEPS, default="output", help=f"with --target: {STEP_HELP}")
    plot.set_defaults(run=_plot)

    align = commands.add_parser("align", help="word alignments from the model's attention (Pharaoh i-j), and AER "
                                              "against gold links")
    align.add_argument("model", help="model file (model.safetensors) translating --src into --tgt")
    align.add_argument("--src", required=True, help="source sentences, one per line, words separated by spaces")
    align.add_argument("--tgt", required=True, help="their translations, line by line, words separated by spaces")
    align.add_argument("--output", "-o", help="where the links go, one line per pair (default: stdout)")
    align.add_argument("--method", choices=ALIGN_METHODS, default="argmax",
                       help="argmax: each target word to the source word it attends most (default); threshold: "
                            "every pair with at least --threshold of the attention")
    align.add_argument("--threshold", type=Number(float, Range("(0, 1]")), default=0.3,
                       help="the word attention a link needs with --method threshold (default: %(default)s)")
    align.add_argument("--layer", type=Number(int, Range("[1, 1024]")), default=None,
                       help="Transformer: the layer whose cross-attention aligns, from 1 (default: the penultimate)")
    align.add_argument("--head", type=Number(int, Range("[1, 1024]")), default=None,
                       help="Transformer: one head, from 1 (default: the mean of the layer's heads)")
    align.add_argument("--step", choices=ALIGN_STEPS, default="output", help=STEP_HELP)
    align.add_argument("--reverse", metavar="MODEL", help="a model translating --tgt into --src: the links of both "
                                                          "directions are combined by --symmetrize")
    align.add_argument("--symmetrize", choices=SYMMETRIZATIONS, default="grow-diag-final",
                       help="with --reverse: how the two directions' links combine (default: %(default)s)")
    align.add_argument("--gold", help="gold links, one line per pair (i-j sure, ipj possible): prints AER, precision "
                                      "and recall on stderr")
    align.add_argument("--gold-base", type=int, choices=[0, 1], default=None,
                       help="whether --gold numbers words from 0 (Pharaoh) or 1 (default: 1 for .talp files, else 0)")
    align.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: GPU if there is one)")
    align.set_defaults(run=_align)

    explain = commands.add_parser("explain", help="every number of each decoding step of one sentence: scores, "
                                               "weights, context shares, the next-token probabilities")
    explain.add_argument("model", help="model file (model.safetensors)")
    explain.add_argument("sentence", help="the sentence to translate (greedily) and explain")
    explain.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: GPU if there is one)")
    explain.add_argument("--step", type=Number(int, Range("[1, 100000]")), default=None,
                         help="show every number of this output step (from 1); default: every step, compactly")
    explain.add_argument("--attention", choices=["cross", "decoder"], default="cross",
                         help="cross: the output over the source (default); decoder: a Transformer's self-attention "
                              "over the output so far")
    explain.add_argument("--layer", type=Number(int, Range("[1, 1024]")), default=None,
                         help="Transformer: the decoder layer, from 1 (default: the last)")
    explain.add_argument("--head", type=Number(int, Range("[1, 1024]")), default=None,
                         help="Transformer: the head, from 1 (default: 1)")
    explain.add_argument("--json", action="store_true", help="print one JSON document with every step")
    explain.set_defaults(run=_explain)

    export = commands.add_parser("export", help="write a Transformer model for another engine (CTranslate2)")
    export.add_argument("model", help="model file (model.safetensors) of a Transformer")
    export.add_argument("out", help="the directory to write")
    export.add_argument("--to", choices=["ctranslate2"], required=True, help="the engine: ctranslate2")
    export.add_argument("--quantization", choices=CTRANSLATE2_QUANTIZATIONS,
                        default=None, help="store the weights quantized (default: float32)")
    export.add_argument("--overwrite", action="store_true", help="replace a directory that is not empty")
    export.set_defaults(run=_export)

    info = commands.add_parser("info", help="what a model file holds: family, sizes, vocabularies, training")
    info.add_argument("model", help="model file (.safetensors)")
    info.add_argument("--json", action="store_true", help="print one JSON document")
    info.set_defaults(run=_info)

    curves = commands.add_parser("plot-curves", help="draw training curves of one or more runs on one chart")
    curves.add_argument("runs", nargs="+", help="train.out_dir folders (or their metrics.jsonl files)")
    curves.add_argument("--out", required=True, help="PNG file to write")
    curves.set_defaults(run=_plot_curves)

    serve = commands.add_parser("serve", help="translate over HTTP, with the attention explorer page at /")
    add_model(serve)
    add_engine(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=Number(int, Range("[0, 65535]")), default=8000,
                       help="port (default: %(default)s; 0 = any free port)")
    serve.add_argument("--api-keys", metavar="FILE",
                       help="translating then needs one of the keys in FILE (one per line, a name after a tab), as "
                            "Authorization: Bearer KEY or LibreTranslate's api_key; read again when it changes or on SIGHUP")
    serve.add_argument("--no-access-log", dest="access_log", action="store_false",
                       help="log no line per request (by default each request is logged on stdout with the client's "
                            "address and the status)")
    limits = serve.add_argument_group("limits")
    for f in dataclasses.fields(ServeConfig):
        limits.add_argument(f"--{f.name.replace('_', '-')}", type=number_flag(ServeConfig, f.name), default=f.default,
                            help=f"{f.metadata['help']} (allowed: {f.metadata['range']}; default: %(default)s)")
    serve.set_defaults(run=_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may come after flags (`train c.yaml --resume train.epochs=3`), which argparse's
    # positional `nargs="*"` alone does not allow; collect the stragglers here.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command not in ("train", "prepare") or any(a.startswith("-") or "=" not in a for a in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides += extra
    # `kill` and `timeout` end a run as an error does, so files being written are removed (SIGKILL
    # cannot be caught). Python lets only the main thread set a handler.
    previous = signal.signal(signal.SIGTERM, _terminated) if threading.current_thread() is threading.main_thread() else None
    try:
        args.run(args)
    except AttnmtError as err:
        if args.debug:
            traceback.print_exc()
        print(f"attnmt: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnmt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    finally:
        if previous is not None:  # None: not set here, or not by Python
            signal.signal(signal.SIGTERM, previous)
    return 0


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
