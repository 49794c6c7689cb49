"""Training and decoding speed on a busy machine: idle, and with one or two busy loops beside attnmt.

    git worktree add /tmp/attnmt-old OLD_COMMIT        # the behaviour before threads.py, for "before"
    python bench/busy.py --data ../shared/data/multi30k --old /tmp/attnmt-old [--seconds 45] \
        [--families rnn,transformer] [--loads 0,1,2] [--variants before,auto,one] [--sentences 300]

A busy loop is a Python process spinning on one core (`while True: pass`), as a second program
computing would. For each family (its Multi30k recipe: configs/multi30k_de_en.yaml,
configs/multi30k_de_en_transformer.yaml), each number of busy loops and each variant, it trains
with `attnmt train` for --seconds of training clock (train.max_minutes) and counts the updates
made (metrics.jsonl's step over elapsed_min), then translates --sentences test sentences greedily
with `attnmt translate` and counts sentences per second of the whole command (model loading
included). The variants:

    before  the checkout --old (torch's own threads: one per core; libgomp's own waiting)
    auto    this checkout as a user runs it (train.threads and --threads auto)
    one     this checkout with one thread (train.threads=1, --threads 1): the yardstick of issue 58

The data: Multi30k's training pairs with the first 100 validation and test pairs (validation and
the test decoding after each run then cost seconds, not minutes); prepared once before the runs.
Decoding uses the model the idle `before` run of the same family trained (the old checkout reads
no model file that records train.threads). Prints one line per
measurement and a table of each variant's rates against the idle one-thread rate. Nothing else may
run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"rnn": ROOT / "configs/multi30k_de_en.yaml", "transformer": ROOT / "configs/multi30k_de_en_transformer.yaml"}
SHORT_SPLITS = 100  # validation and test pairs kept


def bench_data(multi30k: Path, out: Path) -> Path:
    """Multi30k's training files as they are, its validation and test files cut to SHORT_SPLITS lines."""
    out.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        shutil.copyfile(multi30k / f"train.{lang}.gz", out / f"train.{lang}.gz")
        for split in ("val", "test_2016_flickr"):
            with gzip.open(multi30k / f"{split}.{lang}.gz", "rt", encoding="utf-8") as lines:
                kept = [line for _, line in zip(range(SHORT_SPLITS), lines)]
            (out / f"{split}.{lang}").write_text("".join(kept), encoding="utf-8")
    return out


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` processes spinning on a core each while the block runs."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0 if count else 0.0)  # running before attnmt looks at the cores
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def attnmt_command(checkout: Path, arguments: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`python -m attnmt ARGUMENTS` with `checkout`'s attnmt imported first."""
    return subprocess.run([sys.executable, "-m", "attnmt", *arguments], cwd=checkout, capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(checkout)}, check=True)


def variant_setup(variant: str, args: argparse.Namespace) -> tuple[Path, list[str], list[str]]:
    """The checkout, the training overrides and the translate flags of a variant."""
    if variant == "before":
        return Path(args.old).resolve(), [], []
    if variant == "auto":
        return ROOT, [], []
    return ROOT, ["train.threads=1"], ["--threads", "1"]


def train_rate(family: str, variant: str, data: Path, out: Path, args: argparse.Namespace,
               env: dict[str, str]) -> float:
    """Updates per minute of training clock."""
    checkout, overrides, _ = variant_setup(variant, args)
    attnmt_command(checkout, ["train", str(CONFIGS[family]), f"data.path={data}", f"train.out_dir={out}",
                              f"train.max_minutes={args.seconds / 60}", "train.average_last=0", "train.patience=0",
                              "--overwrite", *overrides], env)
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    return record["step"] / record["elapsed_min"]


def decode_rate(model: Path, sources: Path, variant: str, args: argparse.Namespace, env: dict[str, str]) -> float:
    """Sentences per second of a greedy `attnmt translate`, from start to end."""
    checkout, _, flags = variant_setup(variant, args)
    started = time.monotonic()
    attnmt_command(checkout, ["translate", str(model), "--input", str(sources), "--beam", "1",
                              "--output", str(sources.with_suffix(f".{variant}.out")), *flags], env)
    return args.sentences / (time.monotonic() - started)


def demo_minutes(variant: str, out: Path, args: argparse.Namespace, env: dict[str, str]) -> float:
    """Minutes of a whole `attnmt demo`, from start to end (its exact match must stay above 99 %)."""
    checkout, _, _ = variant_setup(variant, args)
    started = time.monotonic()
    finished = attnmt_command(checkout, ["demo", "--out", str(out), "--overwrite"], env)
    minutes = (time.monotonic() - started) / 60
    print(next(line for line in finished.stdout.splitlines() if "exact match" in line), flush=True)
    return minutes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="the Multi30k folder (train.de.gz, val.de.gz, ...)")
    parser.add_argument("--old", required=True, help="a checkout of attnmt before threads.py (variant before)")
    parser.add_argument("--seconds", type=float, default=45.0, help="training clock per run")
    parser.add_argument("--families", default="rnn,transformer")
    parser.add_argument("--loads", default="0,1,2", help="numbers of busy loops")
    parser.add_argument("--variants", default="before,auto,one")
    parser.add_argument("--sentences", type=int, default=300, help="test sentences each decoding translates")
    parser.add_argument("--parts", default="train,decode", help="train, decode or both (decode reads the models "
                                                                     "of an earlier train in the same --work)")
    parser.add_argument("--demo", action="store_true", help="also time attnmt demo idle and with two busy loops")
    parser.add_argument("--work", help="a folder for the data, models and outputs (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="attnmt-busy-"))
    env = {name: value for name, value in os.environ.items() if not name.startswith(("OMP_", "MKL_", "GOMP_"))}
    env["ATTNMT_CACHE"] = str(work / "cache")
    data = bench_data(Path(args.data), work / "data")
    with gzip.open(Path(args.data) / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as lines:
        sources = work / "sources.de"
        sources.write_text("".join(line for _, line in zip(range(args.sentences), lines)), encoding="utf-8")
    families, loads, variants = args.families.split(","), [int(n) for n in args.loads.split(",")], args.variants.split(",")
    parts = [part for part in args.parts.split(",") if part]
    rates: dict[tuple[str, str, int, str], float] = {}
    for family in families:
        attnmt_command(ROOT, ["prepare", str(CONFIGS[family]), f"data.path={data}"], env)
        # The old checkout reads no model file with train.threads in it: decode the one its idle run trained.
        model = work / family / f"{'before' if 'before' in variants else 'auto'}-0" / "model.safetensors"
        for what in parts:
            for load in loads:
                for variant in variants:
                    with busy_loops(load):
                        if what == "train":
                            rate = train_rate(family, variant, data, work / family / f"{variant}-{load}", args, env)
                        else:
                            rate = decode_rate(model, sources, variant, args, env)
                    rates[family, what, load, variant] = rate
                    unit = "updates/min" if what == "train" else "sentences/s"
                    print(f"{family} {what} busy_loops={load} {variant}: {rate:.1f} {unit}", flush=True)
    if args.demo:
        for load in (0, 2):
            for variant in [v for v in variants if v != "one"]:
                with busy_loops(load):
                    minutes = demo_minutes(variant, work / f"demo-{variant}-{load}", args, env)
                rates["demo", "minutes", load, variant] = minutes
                print(f"demo busy_loops={load} {variant}: {minutes:.2f} min", flush=True)
    print("\nagainst the idle one-thread rate (issue 58's yardstick):")
    print("| family | what | busy loops | " + " | ".join(variants) + " |")
    print("|---|---|---:|" + "---:|" * len(variants))
    for family in families:
        for what in parts:
            base = rates.get((family, what, 0, "one"))
            for load in loads:
                cells = [f"{rates[family, what, load, v]:.1f}" + (f" ({rates[family, what, load, v] / base:.2f}x)"
                                                                    if base else "") for v in variants]
                print(f"| {family} | {what} | {load} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
