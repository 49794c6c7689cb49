"""What watching costs: a training run with its timeline (train.watch=3) against the same run without
(train.watch=0), run after run on an idle machine, with the time spent inside the recording, the
points recorded and the size of timeline.jsonl.

    python bench/timeline_overhead.py --demo
    python bench/timeline_overhead.py configs/multi30k_de_en_transformer.yaml data.path=DATA/multi30k train.max_minutes=5

The configuration trains five times in this process, from the same seed: once to warm up (not
counted: a process's first run pays for its first allocations), then watching, not, not, watching,
so that neither comes first. A run bounded by epochs does the same updates each time; one bounded by
train.max_minutes is compared per update (its updates are printed). Prints one line per run and the
overhead: the time inside the recording, and the difference per update between the runs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from attnmt.configfile import load_config
from attnmt.fast.process import set_up_training_process
from attnmt.training import timeline
from attnmt.training.demo import demo_config
from attnmt.training.train import train


def timed_run(config, watch: int, out_dir: Path) -> dict:
    """Train once; the wall time, the time inside Timeline.record, the updates and the points."""
    spent = [0.0, 0]
    record = timeline.Timeline.record

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        record(self, *args, **kwargs)
        spent[0] += time.perf_counter() - started
        spent[1] += 1

    timeline.Timeline.record = timed
    try:
        config = replace(config, train=replace(config.train, watch=watch, out_dir=str(out_dir)))
        started = time.perf_counter()
        result = train(config, overwrite=True, log=lambda line: None)
        wall = time.perf_counter() - started
    finally:
        timeline.Timeline.record = record
    file = out_dir / timeline.TIMELINE_FILE
    steps = max(r["step"] for r in (json.loads(line) for line in
                                     (out_dir / "metrics.jsonl").read_text().splitlines()))
    return {"wall_s": wall, "recording_s": spent[0], "points": spent[1], "steps": steps,
            "bytes": file.stat().st_size if file.exists() else 0, "exact": result.test_scores.get("exact")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", help="a YAML config (or --demo)")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--demo", action="store_true", help="the demo's config (dates, one epoch)")
    args = parser.parse_args()
    set_up_training_process()
    config = demo_config("unused") if args.demo else load_config(args.config, args.overrides)
    runs: dict[int, list[dict]] = {3: [], 0: []}
    with tempfile.TemporaryDirectory() as work:
        timed_run(config, 0, Path(work) / "warm-up")
        for watch in (3, 0, 0, 3):
            r = timed_run(config, watch, Path(work) / f"watch{watch}")
            runs[watch].append(r)
            print(f"train.watch={watch}: {r['wall_s']:.1f} s for {r['steps']} updates "
                  f"({1000 * r['wall_s'] / r['steps']:.2f} ms an update), {r['points']} points recorded in "
                  f"{r['recording_s']:.2f} s, timeline.jsonl {r['bytes']:,} bytes", flush=True)

    def per_update(watch: int) -> float:
        return sum(r["wall_s"] for r in runs[watch]) / sum(r["steps"] for r in runs[watch])

    on = runs[3]
    recording = sum(r["recording_s"] for r in on) / sum(r["wall_s"] for r in on)
    print(f"recording: {100 * recording:.2f} % of the watched runs' time; per update, the watched runs took "
          f"{100 * (per_update(3) / per_update(0) - 1):+.2f} % against the unwatched ones; "
          f"{on[0]['bytes'] / max(on[0]['points'], 1):,.0f} bytes a point")


if __name__ == "__main__":
    main()
