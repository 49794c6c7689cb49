"""The output layer's float32 product at decoding, whole (nn.Linear) and in blocks (BlockedLinear, fast/layers.py).

    python bench/output_layer.py [--vocab 5898] [--dim 256] [--rows 64,320] [--threads 2] [--repeats 60]

For each row count (64: greedy search of 64 sentences; 320: beam 5), times the product of a
[rows, dim] input with a [vocab, dim] weight as one nn.Linear and as BlockedLinear, alternating,
best of 3 runs of `--repeats` calls each, and prints microseconds and GFLOP/s of each and their
ratio. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
from torch import nn

from attnmt.fast.layers import BlockedLinear


def best_seconds(function: Callable[[], torch.Tensor], repeats: int) -> float:
    for _ in range(10):
        function()
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeats):
            function()
        runs.append((time.perf_counter() - started) / repeats)
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=5898, help="outputs (the peers' Multi30k target vocabulary)")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--rows", default="64,320")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    whole = nn.Linear(args.dim, args.vocab)
    blocked = BlockedLinear(args.dim, args.vocab)
    blocked.load_state_dict(whole.state_dict())
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, args.dim)
            flop = 2 * rows * args.dim * args.vocab
            seconds = {name: best_seconds(lambda: layer(x), args.repeats)
                       for name, layer in (("nn.Linear", whole), ("BlockedLinear", blocked))}
            print(f"{rows} rows x {args.dim} -> {args.vocab}: " + ", ".join(
                f"{name} {s * 1e6:.0f} us ({flop / s / 1e9:.1f} GFLOP/s)" for name, s in seconds.items())
                + f"; blocked / whole {seconds['nn.Linear'] / seconds['BlockedLinear']:.2f}x faster")


if __name__ == "__main__":
    main()
