"""Where a training update's time goes: a model of bench/ on a fixed batch, under torch.profiler.

    python bench/train_profile.py [--config peers_transformer.yaml] [--precision bf16] [--updates 20] [--threads 2]
        [--batch 64x14] [--vocab 7882,5898]

Builds the model as bench/train_versions.py does (by default the peers' vocabularies, one batch of
64 sentences of 14 source and 14 target tokens; --batch ROWSxLENGTH and --vocab SOURCE,TARGET give
another shape, such as a recipe's: `--config ../configs/multi30k_en_de_transformer.yaml --batch
256x16 --vocab 8000,8000` is about its 4,096 target tokens a batch) and runs attnmt's own
`train_step`: 5 updates to warm up, `--updates` timed ones, then as many under torch.profiler.
Prints the milliseconds an update takes and the update's model FLOPs (3 forward passes, counted
as bench/speed.py counts them) as a share of this precision's matrix-product peak, measured here
first; then the operators by self CPU time, and the matrix products' share of the profiled time
with their own rate against the peak: the share the update would reach if everything else took
no time. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Callable

import torch

from attnmt.batch import collate
from attnmt.configfile import load_config
from attnmt.families import build_model
from attnmt.fast.process import set_up_training_process
from attnmt.training.data import Part
from attnmt.training.step import TeacherForced, make_optimizer, train_step

from speed import FORWARD_FLOPS, matmul_peak_gflops, teacher_forced_lengths

# The operators that compute matrix products, forward and backward (their self time is the product's).
PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::_int_mm")


def two_counts(separator: str) -> Callable[[str], tuple[int, int]]:
    """An argparse type: two positive whole numbers joined by `separator`."""
    def parse(text: str) -> tuple[int, int]:
        parts = text.split(separator)
        if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
            raise argparse.ArgumentTypeError(f"expected two positive whole numbers joined by {separator!r}, got {text!r}")
        return int(parts[0]), int(parts[1])
    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="peers_transformer.yaml", help="a file in bench/")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", default="64x14", type=two_counts("x"),
                        help="ROWSxLENGTH: sentences, and tokens of each side")
    parser.add_argument("--vocab", default="7882,5898", type=two_counts(","), help="SOURCE,TARGET vocabulary sizes")
    args = parser.parse_args()
    set_up_training_process()                        # as attnmt train does
    peak = matmul_peak_gflops(args.threads, torch.bfloat16 if args.precision == "bf16" else torch.float32)
    torch.manual_seed(0)
    config = load_config(Path(__file__).parent / args.config, [f"train.precision={args.precision}"])
    (rows, length), (src_vocab, tgt_vocab) = args.batch, args.vocab
    model = build_model(config.model, src_vocab, tgt_vocab).train()
    optimizer = make_optimizer(model, config.train)
    words = random.Random(0)
    batch = collate([([words.randrange(4, src_vocab) for _ in range(length)],
                      [words.randrange(4, tgt_vocab) for _ in range(length)]) for _ in range(rows)], list(range(rows)))
    network = TeacherForced(model)
    update_gflop = 3 * FORWARD_FLOPS[config.model.arch](model, teacher_forced_lengths(batch)) / 1e9

    step = 0

    def updates(count: int) -> float:
        nonlocal step
        started = time.perf_counter()
        for _ in range(count):
            step += 1
            train_step(network, optimizer, [Part(batch)], config.train, step, batch.num_target_tokens)
        return (time.perf_counter() - started) / count

    updates(5)
    seconds = updates(args.updates)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        profiled = updates(args.updates)
    events = profile.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6 / args.updates          # s an update
    products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCTS) / 1e6 / args.updates
    print(f"{args.config} {args.precision}, {args.threads} threads, {rows}x{length} batch: {seconds * 1000:.1f} ms an update "
          f"({profiled * 1000:.1f} under the profiler), {update_gflop:.2f} GFLOP of model products, "
          f"{args.precision} matmul peak {peak:.1f} GFLOP/s")
    print(f"update: {100 * update_gflop / seconds / peak:.1f} % of the peak")
    print(f"matrix products ({', '.join(PRODUCTS)}): {100 * products / total:.1f} % of the profiled time, "
          f"at {100 * update_gflop / products / peak:.1f} % of the peak")
    print(events.table(sort_by="self_cpu_time_total", row_limit=30))


if __name__ == "__main__":
    main()
