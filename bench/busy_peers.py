"""attnmt beside its peers on a busy machine: the peers' model, idle and with busy loops beside, in one run.

    bash ../shared/bench/peers/setup_peers.sh          # the peers' venvs, once (about 3 minutes)
    python bench/busy_peers.py --data ../shared/data/multi30k [--peers-dir ../shared/bench/peers] \
        [--model gru_bahdanau|transformer] [--loads 0,1,2] [--steps 100] [--test-n 200] [--work DIR]

For each number of busy loops (bench/busy.py's: `python -c 'while True: pass'`, one per loop), it
runs, one after the other:
- JoeyNMT and OpenNMT-py through their harness (../shared/bench/peers/run_peers.sh), with two torch
  threads (the harness's setting and torch's own default on a 2-core machine: one per core) and
  with one (`OMP_NUM_THREADS=1`, their best setting on a busy machine). The harness fixes two
  threads, so it runs from a copy in WORK/harness whose one export line reads PEER_THREADS;
- attnmt's bench/speed.py on the same model and data, with `--threads auto` (attnmt's default).
Each trains `--steps` updates (a multiple of 100: the peers' harness reads its rates from their
100-step log lines) and translates the first `--test-n` test2016 sentences greedily and with beam 5.
The figures are the harness's: target words per second of training (no EOS, no padding; the
peers' over the whole loop, attnmt's after its first 20 updates) and sentences per second of the
decoding loop (model loading left out). Prints every metric line, then a table of the three
rates for each number of busy loops. Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from busy import busy_loops

ROOT = Path(__file__).resolve().parents[1]
FIXED_THREADS = "export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2"
CHOSEN_THREADS = 'export OMP_NUM_THREADS="${PEER_THREADS:-2}" MKL_NUM_THREADS="${PEER_THREADS:-2}"'
RATES = {"train_tgt_tok_per_s": "train words/s", "translate_greedy_sent_per_s": "greedy sent/s",
         "translate_beam5_sent_per_s": "beam 5 sent/s"}
ARCH = {"gru_bahdanau": "rnn", "transformer": "transformer"}


def harness_copy(peers_dir: Path, work: Path) -> Path:
    """The peers' harness, copied, with its thread count read from PEER_THREADS."""
    copy = work / "harness"
    if not (peers_dir / "run_peers.sh").is_file():
        sys.exit(f"busy_peers: --peers-dir {peers_dir}: no run_peers.sh there (the peers' harness, ../shared/bench/peers)")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(peers_dir, copy)
    script = copy / "run_peers.sh"
    text = script.read_text()
    if text.count(FIXED_THREADS) != 1:
        sys.exit(f"{script}: no single line {FIXED_THREADS!r} to let PEER_THREADS choose; update harness_copy()")
    script.write_text(text.replace(FIXED_THREADS, CHOSEN_THREADS))
    return copy


def metric_lines(output: str) -> dict[tuple[str, str], float]:
    """`peer=P metric=M value=V unit=U` lines as {(P, M): V} (nan where a peer printed none)."""
    values = {}
    for line in output.splitlines():
        fields = dict(field.split("=", 1) for field in line.split() if "=" in field)
        if {"peer", "metric", "value"} <= fields.keys():
            values[fields["peer"], fields["metric"]] = float(fields["value"])
    return values


def run_or_exit(command: list[str], what: str, **options) -> str:
    """`command`'s stdout; a failure ends the benchmark with one line: what failed, its status and its
    last line on stderr (a peer's failure is not this script's traceback)."""
    finished = subprocess.run(command, capture_output=True, text=True, **options)
    if finished.returncode:
        last = (finished.stderr.strip().splitlines() or ["nothing on stderr"])[-1]
        sys.exit(f"busy_peers: {what} failed with status {finished.returncode}: {last}")
    return finished.stdout


def run_peers(harness: Path, threads: int, args: argparse.Namespace, work: Path, name: str,
              env: dict[str, str]) -> dict[tuple[str, str], float]:
    """Both peers through the harness copy with `threads` threads; their metrics, peers renamed P@threads."""
    output = run_or_exit(["bash", str(harness / "run_peers.sh")], f"the peers' harness ({name}, runs in {work / 'runs'})",
                         env={**env, "PEER_THREADS": str(threads), "MODEL": args.model,
                              "STEPS": str(args.steps), "TEST_N": str(args.test_n),
                              "SHARED_DATA": str(Path(args.data).resolve()), "DATA_DIR": str(work / "peer_data"),
                              "RUN_DIR": str(work / "runs" / name)})
    return {(f"{peer}@{threads}", metric): value for (peer, metric), value in metric_lines(output).items()}


def run_attnmt(args: argparse.Namespace, work: Path, env: dict[str, str]) -> dict[tuple[str, str], float]:
    """bench/speed.py on the same model with attnmt's default threads (auto)."""
    return metric_lines(run_or_exit([sys.executable, str(ROOT / "bench" / "speed.py"), "--data", args.data,
                                     "--out", str(work / "attnmt"), "--arch", ARCH[args.model], "--threads", "auto",
                                     "--steps", str(args.steps), "--test-n", str(args.test_n), "--decode-batches", "64",
                                     "--name", "attnmt@auto"], "bench/speed.py", cwd=ROOT, env=env))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="the Multi30k folder (train.de.gz, val.de.gz, ...)")
    parser.add_argument("--peers-dir", default=str(ROOT.parent / "shared" / "bench" / "peers"),
                        help="the peers' harness (run_peers.sh, configs/)")
    parser.add_argument("--model", default="gru_bahdanau", choices=list(ARCH), help="the harness's MODEL")
    parser.add_argument("--loads", default="0,1,2", help="numbers of busy loops")
    parser.add_argument("--steps", type=int, default=100, help="training updates per run (a multiple of 100)")
    parser.add_argument("--test-n", type=int, default=200, help="test2016 sentences each decoding translates")
    parser.add_argument("--work", help="a folder for the data, runs and models (default: a temporary one)")
    args = parser.parse_args()
    if args.steps < 100 or args.steps % 100:
        sys.exit(f"--steps: {args.steps} is not a multiple of 100 (the peers log their rates every 100 updates)")
    work = Path(args.work or tempfile.mkdtemp(prefix="attnmt-busy-peers-")).resolve()
    harness = harness_copy(Path(args.peers_dir), work)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("OMP_", "MKL_", "GOMP_"))}
    loads = [int(n) for n in args.loads.split(",")]
    table: dict[int, dict[tuple[str, str], float]] = {}
    for load in loads:
        values: dict[tuple[str, str], float] = {}
        for threads in (2, 1):
            with busy_loops(load):
                values.update(run_peers(harness, threads, args, work, f"loads{load}-threads{threads}", env))
        with busy_loops(load):
            values.update(run_attnmt(args, work, env))
        for (peer, metric), value in sorted(values.items()):
            print(f"busy_loops={load} peer={peer} metric={metric} value={value}", flush=True)
        table[load] = values
    peers = ["attnmt@auto", "joeynmt@2", "joeynmt@1", "opennmt-py@2", "opennmt-py@1"]
    print(f"\n{args.model}, {args.steps} updates, {args.test_n} test sentences; peer@threads "
          "(2: the peers' default, one per core; auto: attnmt's default)")
    print("| busy loops | rate | " + " | ".join(peers) + " |")
    print("|---:|---|" + "---:|" * len(peers))
    for load in loads:
        for metric, label in RATES.items():
            cells = [f"{table[load].get((peer, metric), float('nan')):.1f}" for peer in peers]
            print(f"| {load} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
