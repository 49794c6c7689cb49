"""The commands that train: `attnmt demo`, `attnmt train`, `attnmt prepare` and `attnmt plot-curves`."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import typing
from pathlib import Path

from ..errors import AttnmtError
from ..files import check_parent_dir
from .parsing import Commands

if typing.TYPE_CHECKING:
    from ..config import TrainConfig


def add_demo(commands: Commands) -> None:
    demo = commands.add_parser("demo", help="train on built-in dates (no download), print accuracy, plot attention")
    demo.add_argument("--out", default="attnmt-demo", help="directory for the model and heatmap (default: %(default)s)")
    demo.add_argument("--overwrite", action="store_true", help="replace a model already in --out")
    demo.set_defaults(run=_demo)


def _demo(args: argparse.Namespace) -> None:
    from ..fast.process import set_up_training_process, use_threads
    from ..precision import resolve_device
    from ..training.demo import run_demo

    print(use_threads("auto", resolve_device("auto"), "threads").line())
    set_up_training_process()
    run_demo(args.out, overwrite=args.overwrite)


def add_train(commands: Commands) -> None:
    train = commands.add_parser("train", help="train on the data a YAML config names")
    train.add_argument("config", help="YAML config file (see configs/)")
    train.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. model.emb_dim=128 train.epochs=5")
    train.add_argument("--resume", action="store_true", help="continue from the checkpoint in train.out_dir")
    train.add_argument("--overwrite", action="store_true", help="replace a model already in train.out_dir")
    train.set_defaults(run=_train)


def _train(args: argparse.Namespace) -> None:
    """`attnmt train`, in one process or in each of the processes torchrun starts."""
    from ..configfile import load_config

    config = load_config(args.config, args.overrides)      # its errors answer before torch loads
    from ..corpus.readers import check_source

    check_source(config.data)  # and so do those of data.path and data.format, without reading the corpus
    from ..fast.process import set_up_training_process
    from ..training.distributed import start_ranks
    from ..training.train import train

    _use_training_threads(config.train, resume=args.resume)
    if config.train.fast_paths:
        set_up_training_process()
    ranks = start_ranks(config.train)
    try:
        train(config, resume=args.resume, overwrite=args.overwrite, ranks=ranks)
    except KeyboardInterrupt:
        if ranks.is_main:
            print(f"attnmt: {_kept_when_stopped(config.train, [args.config, *args.overrides])}", file=sys.stderr)
        raise
    except AttnmtError as err:
        if ranks.world_size == 1:
            raise
        raise AttnmtError(f"rank {ranks.rank} of {ranks.world_size}: {err}") from None
    finally:
        ranks.close()
    if ranks.world_size > 1:
        _end_rank()


def _end_rank() -> typing.NoReturn:
    """End a rank of a finished multi-process run at once, its output flushed. torch's
    DistributedDataParallel keeps the gloo process group alive past destroy_process_group (its three
    threads still run: gloo_tcp_loop and two pt_gloo_runloop), and the interpreter's teardown around
    running C++ threads is where a rank of a run that succeeded can abort (SIGABRT, "terminate called
    without an active exception"): there is nothing left to tear down that a rank's exit needs."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _kept_when_stopped(tc: TrainConfig, command: list[str]) -> str:
    """What a run stopped by Ctrl-C leaves in train.out_dir, and the command that continues it."""
    from ..files import MODEL_FILE
    from ..modelfile import read_metadata
    from ..training.resume import CHECKPOINT_FILE

    out, checkpoint = Path(tc.out_dir), Path(tc.out_dir) / CHECKPOINT_FILE
    if not checkpoint.is_file():
        return f"training stopped before its first checkpoint: nothing is kept in {out}"
    progress = read_metadata(checkpoint)["progress"]
    best = f"; the best model so far is {out / MODEL_FILE}" if (out / MODEL_FILE).is_file() else ""
    return (f"training stopped; kept: {checkpoint}, after step {progress['step']} (epoch {progress['epoch']} next){best}. "
            f"`attnmt train {shlex.join(command)} --resume` continues from the checkpoint, as if never stopped")


def _use_training_threads(tc: TrainConfig, resume: bool) -> None:
    """Set this process's threads as train.threads asks (a resumed run's own count under auto), and say so."""
    from ..fast.process import use_threads
    from ..modelfile import read_metadata
    from ..precision import resolve_device
    from ..training.resume import CHECKPOINT_FILE

    checkpoint = Path(tc.out_dir) / CHECKPOINT_FILE
    recorded = read_metadata(checkpoint)["progress"].get("threads") if resume and checkpoint.is_file() else None
    threads = use_threads(tc.threads, resolve_device(tc.device), "train.threads", recorded)
    print(f"{threads.line()}; kept for the whole run, as another count rounds its sums differently")


def add_prepare(commands: Commands) -> None:
    prepare = commands.add_parser("prepare", help="prepare the training data a config names once (tokenize, filter, "
                                                  "count), for every later attnmt train with the same data settings")
    prepare.add_argument("config", help="YAML config file (see configs/)")
    prepare.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="e.g. data.path=DIR data.workers=2")
    prepare.add_argument("--rebuild", action="store_true", help="prepare again even if a prepared copy exists")
    prepare.set_defaults(run=_prepare)


def _prepare(args: argparse.Namespace) -> None:
    """`attnmt prepare`: the training data as `attnmt train` would prepare them, and the report."""
    from ..configfile import load_config

    config = load_config(args.config, args.overrides)      # its errors answer before torch loads
    from ..corpus.prepare import REUSED, find_corpus, prepare_corpus, report_lines

    given = None
    if config.train.init_from:  # a fine-tuning run's corpus: with its model file's tokenizers and vocabularies
        from ..training.resume import read_init

        config, description, _ = read_init(config)
        given = description.tokenization
    found = None if args.rebuild else find_corpus(config, given)
    corpus = found or prepare_corpus(config, given, rebuild=True)        # looked already: nothing to reuse
    print("\n".join(report_lines(corpus)))
    if found:
        print(f"  ({REUSED})")


def add_plot_curves(commands: Commands) -> None:
    curves = commands.add_parser("plot-curves", help="draw training curves of one or more runs on one chart")
    curves.add_argument("runs", nargs="+", help="train.out_dir folders (or their metrics.jsonl files)")
    curves.add_argument("--out", required=True, help="PNG file to write")
    curves.set_defaults(run=_plot_curves)


def _plot_curves(args: argparse.Namespace) -> None:
    from ..plot import plot_curves
    from ..training.metrics import read_metrics

    check_parent_dir(args.out)
    runs = {}
    for run in args.runs:
        name = Path(run).name if Path(run).is_dir() else Path(run).parent.name
        runs[name if name not in runs else run] = read_metrics(run)
    plot_curves(runs, args.out)
    print(f"curves of {len(runs)} run(s) written to {args.out}")
