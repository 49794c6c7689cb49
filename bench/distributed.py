"""Training throughput on one process against several ranks (torchrun, gloo), on the peers' model.

    python bench/distributed.py --data ../shared/data/multi30k [--pairs 6400] [--rounds 2] [--ranks 2]

Trains bench/peers_model.yaml for one epoch over the first `--pairs` Multi30k pairs (64-sentence
batches) in each set-up, alternating the set-ups `--rounds` times so that a neighbour's load
spreads over all: one process with --ranks threads, one process with one thread, --ranks ranks of
one thread each, and one process with one thread accumulating --ranks parts per batch (what the
ranks compute, on one core). Prints each run's training target tokens per second (metrics.jsonl's
`target_tokens_per_s`: training since the start, validation excluded) and the medians.
Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(name: str, ranks: int, threads: int, out: Path, args: argparse.Namespace, *overrides: str) -> float:
    start = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"] \
        if ranks > 1 else [sys.executable]
    config = [str(REPO / "bench" / "peers_model.yaml"), f"data.path={args.data}", f"data.max_pairs={args.pairs}",
              "train.epochs=1", f"train.out_dir={out / name}", "train.checkpoint_every=0", *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    subprocess.run([*start, "-m", "attnmt", "train", *config, "--overwrite"], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = json.loads((out / name / "metrics.jsonl").read_text().splitlines()[0])
    return float(record["target_tokens_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the Multi30k directory, as ../shared/data/multi30k")
    parser.add_argument("--pairs", type=int, default=6400, help="training pairs (100 batches of 64 by default)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--out", default="runs/distributed")
    args = parser.parse_args()
    args.data = str(Path(args.data).resolve())
    out = Path(args.out)
    n = args.ranks
    setups = {f"1 process, {n} threads": (1, n, ()), "1 process, 1 thread": (1, 1, ()),
              f"{n} ranks, 1 thread each": (n, 1, ()),
              f"1 process, 1 thread, train.accumulate={n}": (1, 1, (f"train.accumulate={n}",))}
    figures: dict[str, list[float]] = {name: [] for name in setups}
    for round_number in range(1, args.rounds + 1):
        for number, (name, (ranks, threads, overrides)) in enumerate(setups.items()):
            figure = run(f"setup{number}", ranks, threads, out, args, *overrides)
            figures[name].append(figure)
            print(f"round {round_number} | {name} | {figure:,.0f} target tokens/s", flush=True)
    print("medians:")
    for name, values in figures.items():
        print(f"  {name}: {statistics.median(values):,.0f} target tokens/s")


if __name__ == "__main__":
    main()
