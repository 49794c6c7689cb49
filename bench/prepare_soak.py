"""Issue 59's soak: N fresh preparations in a row inside `attnmt train`, under two busy loops,
counting those that hang (a run not ended within --timeout seconds is killed and counted).

Each run is `attnmt train` up to the end of preparing: the command's own entry point with
`resume.open_corpus` wrapped to stop once the corpus is prepared, so that torch, the threads and
the signal handlers are those of a training run. The corpus is the dates corpus written as
line-aligned files (--pairs training pairs, BPE as in the issue), prepared in chunks of --chunk
pairs by data.workers=2, in a fresh folder each time.

    python bench/prepare_soak.py --runs 100
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import write_dates_files  # noqa: E402

RUN = """
import sys
from attnmt.corpus import prepare
from attnmt.training import resume
prepare.CHUNK_PAIRS = int(sys.argv[1])
opened = resume.open_corpus
def stop_when_prepared(*args, **kwargs):
    corpus = opened(*args, **kwargs)
    print("prepared", corpus.directory, flush=True)
    raise SystemExit(0)
resume.open_corpus = stop_when_prepared
from attnmt.cli import main
sys.exit(main(sys.argv[2:]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=40_000)
    parser.add_argument("--chunk", type=int, default=2_000)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds after which a run counts as hung")
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the runs")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prepare_soak."))
    write_dates_files(work / "data", {"train": args.pairs, "val": 100, "test_2016_flickr": 100})
    config = work / "config.yaml"
    config.write_text(f"data: {{format: parallel, path: {work / 'data'}, prepared_dir: {work / 'prepared'}, workers: 2}}\n"
                      "tokenizer: {level: bpe, vocab_size: 300}\n"
                      f"train: {{out_dir: {work / 'run'}, epochs: 1}}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `kill` too ends the busy loops below
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    hung, failed, seconds = 0, 0, []
    try:
        print(f"{time.strftime('%Y-%m-%d %H:%M')}: {args.runs} runs of `attnmt train` until prepared, {args.pairs:,} pairs "
              f"in chunks of {args.chunk:,}, 2 workers, {args.busy} busy loops, {os.cpu_count()} CPUs", flush=True)
        for run in range(args.runs):
            shutil.rmtree(work / "prepared", ignore_errors=True)
            started = time.monotonic()
            process = subprocess.Popen([sys.executable, "-c", RUN, str(args.chunk), "train", str(config)],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                out, _ = process.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                hung += 1
                left = subprocess.run(["pgrep", "-s", str(process.pid)], capture_output=True, text=True).stdout.split()
                print(f"run {run + 1}: HUNG (processes of its session: {' '.join(left)})", flush=True)
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                continue
            seconds.append(time.monotonic() - started)
            if process.returncode != 0 or "prepared " not in out:
                failed += 1
                print(f"run {run + 1}: status {process.returncode}: {out.strip().splitlines()[-1:]}", flush=True)
            else:
                print(f"run {run + 1}: prepared in {seconds[-1]:.1f} s", flush=True)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.runs} runs: {hung} hung, {failed} failed, {args.runs - hung - failed} prepared"
          + (f" (median {sorted(seconds)[len(seconds) // 2]:.1f} s a run)" if seconds else ""))


if __name__ == "__main__":
    main()
