"""Peak memory of `attnmt translate -i IN -o OUT` against the number of input lines.

    python bench/stream_memory.py                         # trains the tiny dates model of tests/conftest.py first
    python bench/stream_memory.py --model attnmt-demo/model.safetensors --sizes 0,10000,100000

For each size, writes that many generated dates (attnmt/corpus/dates.py) into a file, line by line, and
translates it in a fresh `python -m attnmt translate` process. Prints per size: lines, seconds,
the peak resident memory of that process (its ru_maxrss, from os.wait4) and whether the output
has as many lines as the input. Translation streams, so the peak should not grow with the input;
the 0-line run shows what loading Python, PyTorch and the model costs alone.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnmt.configfile import config_from_dict
from attnmt.corpus.dates import written_dates
from attnmt.training.train import train

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from conftest import tiny_dates_config  # noqa: E402  (the tests' small model, not a copy of it)


def write_dates(path: Path, lines: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for text, _ in itertools.islice(written_dates(seed=11), lines):
            handle.write(text + "\n")


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


# A process's ru_maxrss starts from the peak of the memory it was spawned from (Linux carries it
# across exec), here this process's, with a trained model in it. So a small Python in between
# spawns the translation from its own small memory and reports that child's peak.
MEASURE = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def translate(model: str, source: Path, target: Path, extra: list[str]) -> tuple[float, int]:
    """Seconds and peak resident KiB of one `attnmt translate` process."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "attnmt", "translate", model,
                             "-i", str(source), "-o", str(target), *extra], capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - started
    status, peak_kib = (int(field) for field in result.stdout.split())
    if status != 0:
        sys.exit(f"attnmt translate failed ({status}): {result.stderr}")
    return seconds, peak_kib  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model file (default: train the tests' tiny dates model into a temporary directory)")
    parser.add_argument("--sizes", default="0,10000,100000,1000000", help="input lines per run, comma-separated")
    parser.add_argument("translate_args", nargs="*", help="more `attnmt translate` flags, after --")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(train(config_from_dict(tiny_dates_config(Path(tmp) / "model")), log=lambda _: None).model_path)
        print(f"model: {model if args.model else 'tiny_dates_config of tests/conftest.py'}; "
              f"translate flags: {' '.join(args.translate_args) or 'none'}")
        print(f"{'lines':>9}  {'seconds':>8}  {'peak RSS MiB':>12}  output lines == input lines")
        for size in sizes:
            source, target = Path(tmp) / f"in{size}.txt", Path(tmp) / f"out{size}.txt"
            write_dates(source, size)
            seconds, peak_kib = translate(model, source, target, args.translate_args)
            out_lines = count_lines(target)
            print(f"{size:>9}  {seconds:>8.1f}  {peak_kib / 1024:>12.1f}  {out_lines == size} ({out_lines})", flush=True)
            source.unlink()
            target.unlink()


if __name__ == "__main__":
    main()
