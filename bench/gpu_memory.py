"""Peak GPU memory of a command, as nvidia-smi shows it, for every toolkit alike.

    python bench/gpu_memory.py -o FILE -- COMMAND ...     # what compare_peers.sh DEVICE=cuda runs instead of /usr/bin/time -v
    python bench/gpu_memory.py --metrics RUN_DIR          # the peers' GPU figures as metric lines

The GPU's used memory is polled every 0.1 s while the command runs, less what was used before it
started: the CUDA context and the allocator's cached blocks count, as a user sees them in
nvidia-smi. One job on the GPU at a time, or the figure holds the neighbour's memory too. The
file gets the lines of `/usr/bin/time -v` that the peers' extract_metrics.py reads (wall clock,
peak resident memory, exit status), and one more, the GPU memory peak.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

GPU_LINE = "GPU memory peak (MiB)"
PEER_FILES = {"train": "train.time", "translate_greedy": "greedy.time", "translate_beam5": "beam5.time"}


def used_mib() -> int:
    """The memory in use on the first GPU, MiB, as nvidia-smi reports it."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


class GpuMemoryWatch:
    """`with GpuMemoryWatch() as watch: ...`, then `watch.peak_mib`: the most memory the GPU held
    above its use at the start, while the block ran."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.peak_mib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while True:
            self.peak_mib = max(self.peak_mib, used_mib() - self.baseline_mib)
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> "GpuMemoryWatch":
        self.baseline_mib = used_mib()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mib = max(self.peak_mib, used_mib() - self.baseline_mib)


def run_command(out: Path, command: list[str]) -> int:
    started = time.perf_counter()
    with GpuMemoryWatch() as watch:
        status = subprocess.run(command).returncode
    minutes, seconds = divmod(time.perf_counter() - started, 60)
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out.write_text(f"\tElapsed (wall clock) time (h:mm:ss or m:ss): {int(minutes)}:{seconds:05.2f}\n"
                   f"\tMaximum resident set size (kbytes): {rss_kib}\n"
                   f"\tExit status: {status}\n"
                   f"\t{GPU_LINE}: {watch.peak_mib}\n", encoding="utf-8")
    return status


def peer_metrics(run_dir: Path) -> None:
    """`peer=<name> metric=<part>_gpu_peak_mib ...` for each peer's training and decodings in run_dir."""
    for peer_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        for part, name in PEER_FILES.items():
            path = peer_dir / name
            match = re.search(rf"{re.escape(GPU_LINE)}: (\d+)", path.read_text()) if path.exists() else None
            if match:
                print(f"peer={peer_dir.name} metric={part}_gpu_peak_mib value={match[1]} unit=MiB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", type=Path, help="where to write the figures of COMMAND")
    parser.add_argument("--metrics", type=Path, help="a run_peers.sh RUN_DIR whose .time files to read")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.metrics:
        peer_metrics(args.metrics)
        return
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.o or not command:
        parser.error("give -o FILE and a command, or --metrics RUN_DIR")
    sys.exit(run_command(args.o, command))


if __name__ == "__main__":
    main()
