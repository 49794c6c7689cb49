"""Ratio table from metric lines (`peer=X metric=Y value=Z unit=U`): each attnmt run against the
faster (or, for memory, the lighter) peer.

    python bench/ratios.py peers.txt attnmt_fp32.txt attnmt_bf16.txt
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

LINE = re.compile(r"peer=(\S+) metric=(\S+) value=(\S+) unit=(\S+)")
PEAK = "matmul_peak_fp32_gflops"
# metric, higher is better?
COMPARED = [("train_tgt_tok_per_s_steady", True), ("train_tgt_tok_per_s", True), ("train_peak_rss_mb", False),
            ("translate_greedy_sent_per_s", True), ("translate_beam5_sent_per_s", True), ("bleu_greedy", True),
            ("bleu_beam5", True), ("train_gpu_peak_mib", False)]
# attnmt-only figures (no peer has them): compared with the peers' figure of the base metric.
EXTRA = {"translate_greedy_b256_sent_per_s": "translate_greedy_sent_per_s",
         "translate_beam5_b256_sent_per_s": "translate_beam5_sent_per_s"}
# attnmt-only figures shown apart, in seconds.
SHOWN = {"decode_load_s": "seconds to load the model for decoding (before the timed decoding)",
         "decode_compile_s": "seconds to compile the decoding step, once per model and machine (empty caches)",
         "train_mfu_fp32_pct": "training's model FLOPs, % of the fp32 matmul peak (MFU)",
         "train_mfu_bf16_pct": "training's model FLOPs, % of the bf16 matmul peak",
         "decode_greedy_mfu_fp32_pct": "greedy decoding's model FLOPs, % of the fp32 matmul peak",
         "decode_beam5_mfu_fp32_pct": "beam 5 decoding's model FLOPs, % of the fp32 matmul peak"}
# Issue 43's fp32 decoding targets against the faster peer (metric, factor, attnmt's model FLOPs per
# unit): the GFLOP/s each would need, against the fp32 matmul peak.
FP32_TARGETS = [("translate_greedy_sent_per_s", 1.5, "decode_greedy_gflop_per_sent"),
                ("translate_beam5_sent_per_s", 1.5, "decode_beam5_gflop_per_sent")]


def main(paths: list[str]) -> None:
    figures: dict[str, dict[str, float]] = defaultdict(dict)
    peaks: dict[str, list[float]] = defaultdict(list)   # measured before and after each part
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for match in filter(None, map(LINE.match, handle)):
                figures[match[1]][match[2]] = float(match[3])
                if match[2] == PEAK:
                    peaks[match[1]].append(float(match[3]))
    figures.pop("peers-run", None)                  # the peak around the peers, not a peer
    peers = [p for p in figures if not p.startswith("attnmt")]
    ours = [p for p in figures if p.startswith("attnmt")]
    print("| metric | " + " | ".join(peers + ours) + " | " + " | ".join(f"{o} / best peer" for o in ours) + " |")
    print("|---" * (1 + len(peers) + 2 * len(ours)) + "|")
    for metric, higher in COMPARED + [(m, True) for m in EXTRA]:
        if not any(metric in figures[p] for p in peers + ours):
            continue  # e.g. GPU memory on a CPU run
        values = [figures[p].get(EXTRA.get(metric, metric), float("nan")) for p in peers]
        best = max(values) if higher else min(values)
        cells = [f"{figures[p][metric]:,.1f}" if metric in figures[p] else "-" for p in peers + ours]
        ratios = [f"{figures[o][metric] / best:.2f}x" if metric in figures[o] else "-" for o in ours]
        print(f"| {metric} | " + " | ".join(cells + ratios) + " |")
    for metric, label in SHOWN.items():
        shown = [f"{o} {figures[o][metric]:.1f}" for o in ours if metric in figures[o]]
        if shown:
            print(f"\n{label}: " + "; ".join(shown))
    fp32 = next((o for o in ours if o.endswith("fp32")), None)
    if fp32 is not None and peaks.get(fp32):
        print("\nwhat the fp32 targets ask of this machine (the faster peer's figure x the factor x attnmt's model FLOPs):")
        for metric, factor, flops in FP32_TARGETS:
            if flops in figures[fp32]:
                needed = factor * max(figures[p][metric] for p in peers) * figures[fp32][flops]
                print(f"- {factor}x {metric}: {needed:.0f} GFLOP/s, {100 * needed / max(peaks[fp32]):.0f} % of the "
                      f"fp32 matmul peak")
    if peaks:
        # A busy neighbour slows every part it overlaps: a lower peak marks a slowed part.
        print("\nfp32 matmul peak around each part, GFLOP/s: "
              + "; ".join(f"{part} {' / '.join(f'{v:.0f}' for v in values)}" for part, values in peaks.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
