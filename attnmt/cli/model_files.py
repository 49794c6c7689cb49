"""The commands about a model file itself: `attnmt import`, `attnmt export`, `attnmt average` and `attnmt info`."""

from __future__ import annotations

import argparse
import sys

from ..choices import CTRANSLATE2_QUANTIZATIONS, EXPORT_FORMATS
from ..errors import AttnmtError
from .parsing import Commands, model_argument


def add_import(commands: Commands) -> None:
    importing = commands.add_parser("import", help="make a model file of a pretrained translator: a Hugging Face "
                                                   "Marian folder (OPUS-MT)")
    importing.add_argument("folder", help="the model's folder: config.json, source.spm, target.spm, vocab.json and "
                                          "model.safetensors (or pytorch_model.bin)")
    importing.add_argument("--out", required=True, help="the attnmt model file to write")
    importing.add_argument("--overwrite", action="store_true", help="replace the file if it exists")
    importing.set_defaults(run=_import)


def _import(args: argparse.Namespace) -> None:
    from ..formats.marian import import_marian

    out = import_marian(args.folder, args.out, args.overwrite)
    print(f"attnmt model written to {out}")


def add_export(commands: Commands) -> None:
    export = commands.add_parser("export", help="write a Transformer model for another engine: CTranslate2, or "
                                                "transformers as a Hugging Face Marian folder")
    export.add_argument("model", type=model_argument, help="model file (or a training run's folder) of a Transformer")
    export.add_argument("out", help="the directory to write")
    export.add_argument("--to", choices=EXPORT_FORMATS, required=True,
                        help="ctranslate2, or marian (what transformers' MarianMTModel and MarianTokenizer load)")
    export.add_argument("--quantization", choices=CTRANSLATE2_QUANTIZATIONS,
                        default=None, help="ctranslate2 only: store the weights quantized (default: float32)")
    export.add_argument("--overwrite", action="store_true", help="replace a directory that is not empty")
    export.set_defaults(run=_export)


def _export(args: argparse.Namespace) -> None:
    if args.to == "marian":
        if args.quantization is not None:
            raise AttnmtError("--quantization is CTranslate2's; a Marian folder holds float32 weights")
        from ..formats.marian import export_marian

        out, notes = export_marian(args.model, args.out, args.overwrite)
        for note in notes:
            print(f"attnmt: note: {note}", file=sys.stderr)
        print(f"Hugging Face Marian model written to {out}")
        return
    from ..formats.ctranslate2 import export_ctranslate2

    out = export_ctranslate2(args.model, args.out, args.quantization, args.overwrite)
    print(f"CTranslate2 model written to {out}")


def add_average(commands: Commands) -> None:
    average = commands.add_parser("average", help="the element-wise mean of model files of one model (epochs of one "
                                                  "run, fine-tunings of one model) as a new model file")
    average.add_argument("models", nargs="+", type=model_argument, help="two or more model files (or run folders)")
    average.add_argument("--out", required=True, help="the attnmt model file to write")
    average.add_argument("--overwrite", action="store_true", help="replace the file if it exists")
    average.set_defaults(run=_average)


def _average(args: argparse.Namespace) -> None:
    from pathlib import Path

    from ..training.average import average_files

    out = average_files([Path(m) for m in args.models], Path(args.out), args.overwrite)
    print(f"attnmt model written to {out} (the mean of {len(args.models)} files)")


def add_info(commands: Commands) -> None:
    info = commands.add_parser("info", help="what a model file holds: family, sizes, vocabularies, training")
    info.add_argument("model", type=model_argument, help="model file, or a training run's folder")
    info.add_argument("--json", action="store_true", help="print one JSON document")
    info.set_defaults(run=_info)


def _info(args: argparse.Namespace) -> None:
    import json

    from ..translate import model_info

    info = model_info(args.model)
    if args.json:
        print(json.dumps(info, indent=2))
        return
    architecture = dict(info["architecture"])
    summary = architecture.pop("summary", info["arch"])
    sizes = ", ".join(f"{k} {v}" for k, v in architecture.items())
    tokenizer = ", ".join(f"{k} {v}" for k, v in info["tokenizer"].items())
    print(f"{info['file']}: attnmt model file, format {info['format_version']}, weights sha256 {info['weights_sha256']}")
    print(f"family: {info['arch']}: {summary} ({sizes})")
    print(f"parameters: {info['parameters']:,}")
    fast = ", ".join(info["fast_paths"]) or "none (decode.fast_paths false, or none runs when this model decodes)"
    print(f"decodes with fast paths: {fast}")
    print(f"translates: {' '.join(info['source_languages'])} -> {info['tgt_lang']}; tokenizer: {tokenizer}; "
          f"vocabularies: {info['src_vocab_size']:,} source, {info['tgt_vocab_size']:,} target tokens")
    training, origin = info["training"], info["origin"]
    if origin is not None:
        print(f"origin: {_imported(origin)}")
    if training is not None and "init_from" in training:
        print(f"fine-tuned from: {_started(training['init_from'])}")
    if info["averaged"]:
        print("averaged from: " + ", ".join(f"{a['file']} (weights sha256 {a['weights_sha256']})"
                                            for a in info["averaged"]))
    if training is None and origin is None and not info["averaged"]:
        print("training: not recorded (a file written before attnmt kept it)")
    elif training is not None:
        print(f"training: {training['training_pairs']:,} pairs, data sha256 {training['data_sha256']}; "
              f"kept at epoch {training['epoch']}, step {training['step']}{_averaged(training)}"
              + (f"; {_count(training['threads'], 'thread')}" if "threads" in training else "")
              + (f", {training['precision']}" if "precision" in training else ""))
        print("validation: " + " | ".join(f"{k} {v}" for k, v in training["validation"].items()))
    if info["aligner"] is not None:
        aligner = info["aligner"]
        print(f"aligner: trained on {_count(aligner['pairs'], 'pair')}, {_count(aligner['epochs'], 'epoch')}, "
              f"{_count(aligner['minutes'], 'minute')} (attnmt align --method aligner)")


def _imported(origin: dict) -> str:
    """Where an imported model came from: its folder, name and config's digest."""
    return (f"imported from the {origin['format']} folder {origin['folder']}"
            + (f" ({origin['name']})" if origin["name"] else "") + f", config.json sha256 {origin['config_sha256']}")


def _started(start: dict) -> str:
    """The model file a fine-tuning run started from, and where that one came from, as far as recorded."""
    said = start["file"] + (f" (weights sha256 {start['weights_sha256']})" if "weights_sha256" in start
                            else " (not readable when the run saved)")
    if "origin" in start:
        said += f", {_imported(start['origin'])}"
    if "init_from" in start:
        said += f", fine-tuned from {_started(start['init_from'])}"
    return said


def _count(n: int | float, noun: str) -> str:
    """`1 thread`, `2 threads`, `1,000 pairs`: a count with its noun, singular for one."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _averaged(training: dict) -> str:
    """Which epochs' weights the kept model averages, where it does: those named (files since epochs
    were recorded), else how many (older files)."""
    epochs = training.get("averaged_epochs")
    if epochs:
        consecutive = epochs == list(range(epochs[0], epochs[-1] + 1))
        named = f"{epochs[0]}–{epochs[-1]}" if consecutive and len(epochs) > 2 else " and ".join(
            [", ".join(map(str, epochs[:-1])), str(epochs[-1])] if len(epochs) > 1 else [str(epochs[0])])
        return f", the average of epochs {named}"
    if "average_of_last" in training:
        return f", the average of {_count(training['average_of_last'], 'epoch')}"
    return ""
