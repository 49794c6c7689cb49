"""Decoding speed of two checkouts of attnmt on one model: processes alternating old, new, old, new.

    git worktree add /tmp/attnmt-old HEAD~1
    python bench/decode_versions.py MODEL SOURCES --old /tmp/attnmt-old --new . [--rounds 2] \
        [--precisions fp32,auto] [--beams 1,5] [--batch-size 64] [--threads 2]

Each round starts one process per checkout, in that checkout's folder so that its attnmt is the
one imported (the installed one is the working tree's), which loads MODEL in each
precision, warms up on the first batch, and translates SOURCES with each beam size. Prints
sentences per second per round, the medians, new / old, and whether the two checkouts' outputs are
identical. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[4]))
import attnmt
from attnmt.fast.process import keep_freed_blocks
keep_freed_blocks()        # as attnmt translate does (set_up_decoding_process), in both checkouts
from attnmt.translate import Translator
model, sources_file, batch_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
precisions, beams = sys.argv[5].split(","), [int(b) for b in sys.argv[6].split(",")]
sources = [line.rstrip("\\n") for line in open(sources_file, encoding="utf-8")]
results = {"attnmt": attnmt.__file__}
for precision in precisions:
    translator = Translator.load(model, "cpu", precision)
    translator.translate(sources[:batch_size], beam_size=max(beams), batch_size=batch_size)
    for beam in beams:
        started = time.perf_counter()
        outputs = translator.translate(sources, beam_size=beam, batch_size=batch_size)
        seconds = time.perf_counter() - started
        results[f"{precision} beam {beam}"] = [len(sources) / seconds, [o.text for o in outputs]]
print(json.dumps(results))
"""


def run_in_checkout(checkout: str, code: str, arguments: list[str]) -> dict:
    """`python -c code arguments` in `checkout`'s folder, whose attnmt it then imports first; the
    JSON object it prints."""
    root = Path(checkout).resolve()
    finished = subprocess.run([sys.executable, "-c", code, *arguments], cwd=root,
                              env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, check=True)
    return json.loads(finished.stdout)


def run(checkout: str, args: argparse.Namespace) -> dict:
    return run_in_checkout(checkout, CHILD, [str(Path(args.model).resolve()), str(Path(args.sources).resolve()),
                                             str(args.batch_size), str(args.threads), args.precisions, args.beams])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="model file (model.safetensors)")
    parser.add_argument("sources", help="source sentences, one per line")
    parser.add_argument("--old", required=True, help="the checkout to compare against")
    parser.add_argument("--new", required=True, help="the checkout under test")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precisions", default="fp32,auto")
    parser.add_argument("--beams", default="1,5")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    speeds: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    outputs: dict[str, dict[str, list[str]]] = {"old": {}, "new": {}}
    for round_number in range(1, args.rounds + 1):
        for version in ("old", "new"):
            results = run(getattr(args, version), args)
            print(f"== {version} round {round_number} ({results.pop('attnmt')})", flush=True)
            for setting, (speed, texts) in results.items():
                print(f"{setting}: {speed:.1f} sent/s", flush=True)
                speeds[version].setdefault(setting, []).append(speed)
                outputs[version][setting] = texts
    print("\n| setting | old sent/s (median) | new sent/s (median) | new / old | outputs identical |")
    print("|---|---:|---:|---:|---|")
    for setting, old in speeds["old"].items():
        new = speeds["new"][setting]
        same = sum(a == b for a, b in zip(outputs["old"][setting], outputs["new"][setting]))
        ratio = statistics.median(new) / statistics.median(old)
        print(f"| {setting} | {statistics.median(old):.1f} | {statistics.median(new):.1f} | {ratio:.2f}× | "
              f"{same} of {len(outputs['old'][setting])} |")
        key = setting.replace(" ", "_")
        print(f"metric=speedup_{key} value={ratio:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
