"""How long the `attnmt` commands that answer at once take: --help, each command's --help, --version,
wrong flags and a config's mistakes (issue 58: none of them imports torch).

    python bench/startup.py                          # this checkout, median of 5 runs each
    python bench/startup.py --against ../old --runs 7   # beside another checkout, alternating

Each run is a fresh `python -m attnmt ...` in the checkout's folder (so it imports that checkout's
attnmt); with --against, the two checkouts' runs alternate, so that both see the same load. Prints,
per command, the median wall time of each checkout in seconds and the exit status, then the bare
interpreter (`python -c pass`) and `import torch` as the floor and what torch alone costs. Time it on
an idle machine only: the first lines give the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnmt.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
TATOEBA, TRANSFORMER = "configs/tatoeba_de_en.yaml", "configs/multi30k_de_en_transformer.yaml"
FLOOR = ("python -c pass", "import torch")     # timed in this checkout only


def cases(bad_yaml: str) -> list[tuple[str, list[str]]]:
    """(what it is, the arguments of attnmt)."""
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    return [("--help", ["--help"]), ("--version", ["--version"]),
            *((f"{command} --help", [command, "--help"]) for command in commands),
            ("unknown flag", ["--bogus"]),
            ("flag out of range", ["translate", "model.safetensors", "--beam", "0"]),
            ("config file not found", ["train", "missing.yaml"]),
            ("bad YAML", ["train", bad_yaml]),
            ("unknown config key", ["train", TATOEBA, "model.atention=dot"]),
            ("train.epochs=0", ["train", TATOEBA, "train.epochs=0"]),
            ("model.attention=foo", ["train", TATOEBA, "model.attention=foo"]),
            ("model.arch=nope", ["train", TATOEBA, "model.arch=nope"]),
            ("family check (heads)", ["train", TRANSFORMER, "model.heads=7"]),
            ("prepare: out of range", ["prepare", TATOEBA, "vocab.min_freq=0"])]


def timed(argv: list[str], cwd: Path) -> tuple[float, int]:
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, result.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each command per checkout (default: %(default)s)")
    parser.add_argument("--against", type=Path, help="another checkout of attnmt, timed beside this one")
    args = parser.parse_args()
    checkouts = {"this": REPO, **({"against": args.against.resolve()} if args.against else {})}
    cpuinfo = Path("/proc/cpuinfo").read_text()
    cpu = re.search(r"model name\s*:\s*(.*)", cpuinfo)
    flags = sorted(set(re.findall(r"\b(avx512_bf16|amx_bf16|avx512f|avx2)\b", cpuinfo)))
    print(f"# python bench/startup.py {' '.join(sys.argv[1:])}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {cpu.group(1) if cpu else platform.machine()}, {os.cpu_count()} cores, "
          f"flags {' '.join(flags)}, python {platform.python_version()}; load average {os.getloadavg()[0]:.2f} at the start")
    for name, path in checkouts.items():
        commit = subprocess.run(["git", "-C", str(path), "log", "-1", "--format=%h %s"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(path), "status", "--short", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        print(f"# {name}: {path} at {commit.stdout.strip()[:80]}{' (with changes)' if dirty else ''}")
    with tempfile.TemporaryDirectory() as folder:
        bad_yaml = Path(folder) / "bad.yaml"
        bad_yaml.write_text("data: [\n", encoding="utf-8")
        rows = [(what, [sys.executable, "-m", "attnmt", *argv]) for what, argv in cases(str(bad_yaml))]
        rows += [(FLOOR[0], [sys.executable, "-c", "pass"]), (FLOOR[1], [sys.executable, "-c", "import torch"])]
        times: dict[tuple[str, str], list[float]] = {}
        status: dict[tuple[str, str], int] = {}
        for _ in range(args.runs):
            for what, argv in rows:
                for name, path in checkouts.items() if what not in FLOOR else [("this", REPO)]:
                    seconds, status[what, name] = timed(argv, path)
                    times.setdefault((what, name), []).append(seconds)
    width = max(len(what) for what, _ in rows)
    print(f"{'command':<{width}}  " + "  ".join(f"{name + ' s':>10} {'exit':>4}" for name in checkouts))
    for what, _ in rows:
        print(f"{what:<{width}}  " + "  ".join(f"{statistics.median(times[what, name]):>10.3f} {status[what, name]:>4}"
                                               for name in checkouts if (what, name) in times))
    print(f"# median of {args.runs} runs each; load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
