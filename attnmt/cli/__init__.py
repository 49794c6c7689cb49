"""The `attnmt` command: a thin front over prepare, train, translate, evaluate, plot, align, explain,
import, export, serve and the demo. Each command's module keeps its flags (`add_<command>`) beside the
handler that reads them; this one puts the commands together and runs one."""

from __future__ import annotations

import signal
import sys
import threading
import traceback

from .. import __version__
from ..errors import AttnmtError
from . import attention, model_files, training, translating
from .parsing import Number, Parser

__all__ = ["Number", "build_parser", "main"]

# In the order `attnmt --help` lists them.
COMMANDS = (training.add_demo, training.add_train, training.add_prepare, translating.add_translate,
            translating.add_evaluate, attention.add_plot, attention.add_align, attention.add_train_aligner,
            attention.add_explain, model_files.add_import, model_files.add_export, model_files.add_average,
            model_files.add_info, training.add_plot_curves, translating.add_serve)


def build_parser() -> Parser:
    parser = Parser(prog="attnmt", description="Attention-based neural machine translation.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of errors")
    parser.add_argument("--version", action="version", version=f"attnmt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may come after flags (`train c.yaml --resume train.epochs=3`), which argparse's
    # positional `nargs="*"` alone does not allow; collect the stragglers here.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command not in ("train", "prepare") or any(a.startswith("-") or "=" not in a for a in extra):
            parser.unrecognized(args.command, extra)
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
