"""The commands that translate: `attnmt translate`, `attnmt evaluate` and `attnmt serve`."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from typing import TYPE_CHECKING

from ..config import DecodeConfig, Range, ServeConfig
from ..errors import AttnmtError
from ..files import check_parent_dir, model_name
from .decoding import add_device, add_engine, add_model, add_search, load_translator, say_precision
from .lines import input_lines, output, read_pairs
from .parsing import Commands, Number, model_argument, number_flag

if TYPE_CHECKING:
    from ..translate import TextTranslator


def add_translate(commands: Commands) -> None:
    translate = commands.add_parser("translate", help="translate lines from stdin or a file")
    add_model(translate)
    add_engine(translate)
    translate.add_argument("sentences", nargs="*", metavar="SENTENCE",
                           help="sentences to translate, each one argument (quoted); without any, --input or stdin")
    translate.add_argument("--input", "-i", help="one sentence per line (default: stdin)")
    translate.add_argument("--output", "-o", help="where translations go (default: stdout)")
    translate.add_argument("--batch-size", type=number_flag(DecodeConfig, "batch_size"), default=None,
                           help="sentences per batch")
    translate.add_argument("--n-best", type=number_flag(DecodeConfig, "beam_size"), default=1,
                           help="print the N best (at most the beam size): `i ||| text ||| log-prob` lines")
    translate.add_argument("--split-sentences", action="store_true",
                           help="each line is a paragraph: cut it into sentences (by the rules of --language), translate "
                                "each, and write them on one line again (default: each line is one sentence)")
    translate.add_argument("--language", help="with --split-sentences: the language whose rules cut the sentences "
                                              "(default: the model's first source language)")
    translate.add_argument("--scores", action="store_true",
                           help="write each translation after its confidence and a tab (with --n-best: a last field); "
                                "0 to 1, the geometric mean of its tokens' probabilities (docs/documents.md)")
    add_search(translate)
    translate.set_defaults(run=_translate)


def _translate(args: argparse.Namespace) -> None:
    from ..documents.text import stream_texts

    if args.sentences and args.input:
        raise AttnmtError("translate takes sentences as arguments or --input FILE, not both")
    if args.language and not args.split_sentences:
        raise AttnmtError("--language says how --split-sentences cuts sentences; give both, or neither")
    translator = load_translator(args, args.model)
    settings = translator.settings(args.beam, args.alpha, args.n_best, args.batch_size, ("--n-best", "--beam"))
    lines = iter(args.sentences) if args.sentences else input_lines(args.input)
    first = list(itertools.islice(lines, 1))  # a missing or unreadable input fails here, before any output
    # A line over the model's decode.max_src_len is cut at a clause end and written as one line again.
    chunks = stream_texts(translator, itertools.chain(first, lines), settings, args.language, args.split_sentences)
    with output(args.output) as write:
        number = 0  # of the sentence, in n-best lists
        for nbest in chunks:
            if args.n_best == 1:
                outputs = [f"{hyps[0].confidence:.4f}\t{hyps[0].text}" if args.scores else hyps[0].text
                           for hyps in nbest]
            else:  # Moses-style n-best list: sentence number ||| translation ||| log-probability [||| confidence]
                outputs = [f"{number + i} ||| {h.text} ||| {h.log_prob:.4f}" + (f" ||| {h.confidence:.4f}" if args.scores else "")
                           for i, hyps in enumerate(nbest) for h in hyps]
            write("".join(line + "\n" for line in outputs))
            number += len(nbest)
    say_precision(args, translator.precision_note())


def add_evaluate(commands: Commands) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="translate and score against references (exact match, BLEU, chrF; by source length)")
    evaluate.add_argument("models", nargs="+", metavar="MODEL", type=model_argument,
                          help="model file(s) or training runs' folders; several are scored side by side")
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


def _evaluate(args: argparse.Namespace) -> None:
    from ..evaluate import LENGTH_EDGES, Evaluation, chart_by_length, evaluate, parse_length_edges

    if (args.split is None) == (args.src is None) or (args.src is None) != (args.ref is None):
        raise AttnmtError("evaluate needs either --src and --ref, or --split")
    edges = parse_length_edges(args.buckets) if args.buckets else LENGTH_EDGES
    if args.chart:
        check_parent_dir(args.chart)
    given = None if args.split else read_pairs(("--src", args.src), ("--ref", args.ref))
    evaluations: dict[str, Evaluation] = {}
    notes = []  # one per model; not the models themselves, which would all stay in memory
    for model_path in args.models:
        translator = load_translator(args, model_path)
        pairs = given if given is not None else _split(translator, args.split, args.data, model_path)
        name = args.src if given is not None else f"the {args.split} split of {args.data or translator.config.data.path}"
        notes.append(translator.precision_note())
        evaluation = evaluate(translator, pairs, args.beam, args.alpha, args.lc_tok,
                              edges if args.by_length or args.chart else None, name)
        if len(args.models) > 1:
            print(f"== {model_path}")
        print("\n".join(evaluation.lines()))
        evaluations[_model_label(model_path, evaluations)] = evaluation
    if args.chart:
        chart_by_length(evaluations, args.chart, args.lc_tok)
        print(f"chart written to {args.chart}")
    say_precision(args, *notes)


def _split(translator: "TextTranslator", split: str, data: str, model_path: str) -> list:
    """evaluate --split: the model's split, from --data where given; a data.path that is not there is named
    as the user gave it (--data), or as the model file keeps it, with the flag that moves it."""
    from ..corpus.prepare import load_split

    try:
        return load_split(translator.config.data, split, data)
    except AttnmtError as err:
        message = str(err)
        if not message.startswith("data.path: "):
            raise
        if data:
            raise AttnmtError(f"--data: {message.removeprefix('data.path: ')}") from None
        raise AttnmtError(f"{message} (the data.path {model_path} was trained on: give --data where the data is on "
                          f"this machine)") from None


def _model_label(model_path: str, taken: dict) -> str:
    """A short name for a model in a chart (files.model_name), its path where two share one."""
    label = model_name(model_path)
    return label if label not in taken else model_path


def add_serve(commands: Commands) -> None:
    serve = commands.add_parser("serve", help="translate over HTTP, with the attention explorer page at /")
    serve.add_argument("models", nargs="+", metavar="MODEL",
                       help="what to serve: a model file, a training run's folder, a CTranslate2 export, NAME=PATH to "
                            "name one, a folder of such models, or a YAML file listing them (models: [{name, path, "
                            "precision, engine}]); LibreTranslate's API picks the model by source and target")
    add_device(serve)
    add_engine(serve)
    serve.add_argument("--pivot", metavar="LANG",
                       help="translate a pair no model serves through LANG where two models make the way (de to en, "
                            "then en to fr); the answer says it pivoted")
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


def _serve(args: argparse.Namespace) -> None:
    from ..config import validate_serve
    from ..serve import serve  # imported here: FastAPI and uvicorn take a while to import
    from ..serve.access import KeyFile
    from ..serve.models import ModelSet, ModelSpec, load_models, model_specs

    def log(line: str) -> None:
        print(line, flush=True)

    limits = ServeConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeConfig)})
    validate_serve(limits)  # the flags, the models' list and the key file are refused before a model loads
    keys = KeyFile(args.api_keys, log) if args.api_keys else None
    specs = model_specs(args.models)

    def load(spec: ModelSpec) -> TextTranslator:
        overrides = {"precision": spec.precision or args.precision, "engine": spec.engine or args.engine}
        return load_translator(argparse.Namespace(**{**vars(args), **overrides}), spec.path)

    models = ModelSet(load_models(specs, load, limits.max_models, log=lambda line: log(f"attnmt serve: {line}")),
                      args.pivot)
    serve(models, args.host, args.port, limits, log=log, keys=keys, access_log=args.access_log)
