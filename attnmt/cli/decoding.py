"""The flags that say what decodes a model and how (--device, --precision, --compile, --reference,
--engine, --beam, --alpha), and the translator they load."""

from __future__ import annotations

import argparse
import sys
import typing
from typing import Optional

from ..config import ENGINES, PRECISIONS, DecodeConfig, Range
from ..errors import AttnmtError
from ..threads import MAX_THREADS
from .parsing import Number, model_argument, number_flag

if typing.TYPE_CHECKING:
    from ..translate import TextTranslator, Translator


def add_compute(sub: argparse.ArgumentParser) -> None:
    """--device, --threads and --verbose: where a command computes, with how many threads."""
    sub.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: GPU if there is one)")
    sub.add_argument("--threads", default="auto", type=Number(int, Range(f"[1, {MAX_THREADS}]"), words=("auto",)),
                     help="threads to compute with: a number, or auto, the cores other programs leave free when "
                          "the command starts (default: %(default)s)")
    sub.add_argument("--verbose", "-v", action="store_true",
                     help="also say on stderr which threads and precision the command computes with")


def add_device(sub: argparse.ArgumentParser) -> None:
    """add_compute's flags, and how attnmt's engine decodes: --precision, --compile, --reference."""
    add_compute(sub)
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
    sub.add_argument("model", type=model_argument, help="model file, or a training run's folder (its model.safetensors)")
    add_device(sub)


def add_engine(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--engine", choices=ENGINES, default="auto",
                     help="what decodes: attnmt's own search, or CTranslate2 for a Transformer exported with "
                          "attnmt export --to ctranslate2, whose directory then stands for the model file "
                          "(auto: CTranslate2 for such a directory)")


def add_search(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--beam", type=number_flag(DecodeConfig, "beam_size"), default=None,
                     help="beam size (default: the model's decode.beam_size; 1 = greedy)")
    sub.add_argument("--alpha", type=number_flag(DecodeConfig, "alpha"), default=None,
                     help="GNMT length penalty for beam search (default: the model's decode.alpha)")


def load_translator(args: argparse.Namespace, path: str) -> TextTranslator:
    """The model at `path` with the device, precision and compile flags, decoded by attnmt or, for a
    directory `attnmt export --to ctranslate2` wrote (or --engine ctranslate2), by CTranslate2."""
    from ..formats.ctranslate2_engine import CTranslate2Translator

    use_decoding_threads(args)
    if engine_of(args, path) == "attnmt":
        from ..fast.process import set_up_decoding_process

        set_up_decoding_process()
        return load_attnmt(args, path)
    if args.compile or args.reference:
        raise AttnmtError(f"{'--compile' if args.compile else '--reference'} is an option of attnmt's own engine; "
                          f"CTranslate2 decodes {path}")
    return CTranslate2Translator.load(path, args.device, args.precision)


def use_decoding_threads(args: argparse.Namespace) -> None:
    """Set this process's threads as --threads asks; said on stderr with --verbose (stdout is the translations')."""
    from ..fast.process import use_threads
    from ..precision import resolve_device

    threads = use_threads(args.threads, resolve_device(args.device), "--threads")
    if args.verbose:
        print(f"attnmt: {threads.line()}", file=sys.stderr)


def load_attnmt(args: argparse.Namespace, path: str) -> Translator:
    """The model at `path`, decoded by attnmt's own engine, with the device, precision and compile flags."""
    from ..translate import Translator

    return Translator.load(path, args.device, args.precision, args.compile, fast_paths=not args.reference)


def engine_of(args: argparse.Namespace, path: str) -> str:
    """--engine, with auto resolved: ctranslate2 for a directory attnmt export wrote."""
    from ..formats.ctranslate2_engine import is_ctranslate2_model

    return args.engine if args.engine != "auto" else "ctranslate2" if is_ctranslate2_model(path) else "attnmt"


def say_precision(args: argparse.Namespace, *notes: Optional[str]) -> None:
    """A warning (Translator.precision_note), and with --verbose what `auto` chose, on stderr; said at
    the end of a run that went well, so that a bad input found on the way still gets exactly one line."""
    for note in filter(None, dict.fromkeys(notes)):
        if args.verbose or note.startswith("warning:"):
            print(f"attnmt: {note}", file=sys.stderr)
