"""How many threads a run computes with: `auto` is the cores no other program is using when it starts.

torch computes each operation on a team of OpenMP threads, one per core by default, and every thread
waits for the slowest at the operation's end. When another program takes a core, the thread that
shares it runs at half speed or less, and the whole team with it: on a 2-core CPU with one busy
program beside it, two threads trained at about half the rate one thread did (docs/speed.md).
`auto` therefore counts the cores left free by the other programs over a short look at the start
and uses that many threads.

The count stays fixed for the whole run: the matrix products and reductions split their sums by
thread, so another count rounds differently and trains other weights, bit for bit. A run records
its count (metrics, checkpoint, model file), a resumed run takes it over, and `train.threads=N`
repeats a run exactly. This module measures and decides; entry points apply the decision
(`fast.process.use_threads`), as a library function leaves its caller's threads alone.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import AttnmtError

MAX_THREADS = 1024
LOOK_S = 0.1  # how long `auto` watches the other programs' use of the cores
CPU_QUOTA = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "QUOTA PERIOD" in microseconds, or "max PERIOD"


@dataclass(frozen=True)
class Threads:
    """A thread count and why it was chosen, for the log and the records."""

    count: int
    reason: str

    def line(self) -> str:
        return f"threads: {self.count} ({self.reason})"


def parse_setting(value: str | int, where: str) -> Optional[int]:
    """`auto` as None, a whole number of threads as itself; `where` names the key or flag in the error."""
    text = str(value).strip()
    if text == "auto":
        return None
    if not text.isdigit() or not 1 <= int(text) <= MAX_THREADS:
        raise AttnmtError(f"{where}: {value!r} is not auto or a whole number of threads in [1, {MAX_THREADS}]")
    return int(text)


def usable_cpus() -> int:
    """The logical CPUs this process may run on: its affinity, capped by a cgroup CPU quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = CPU_QUOTA.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def _cpu_ticks(cpus: set[int]) -> Optional[int]:
    """The busy clock ticks of the CPUs `cpus` since boot (/proc/stat), or None where it cannot be read."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
            busy += user + nice + system + irq + softirq + steal
    return busy


def others_load(look_s: float = LOOK_S) -> Optional[float]:
    """How many of this process's CPUs the other programs kept busy over `look_s` seconds (1.0: one
    CPU's worth), this process's own time left out; None where the system does not say (not Linux)."""
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    before, own_before, started = _cpu_ticks(cpus), sum(os.times()[:2]), time.monotonic()
    if before is None or not cpus:
        return None
    time.sleep(look_s)
    after, own, seconds = _cpu_ticks(cpus), sum(os.times()[:2]) - own_before, time.monotonic() - started
    if after is None:
        return None
    return max(0.0, ((after - before) / tick - own) / seconds)


def choose_threads(setting: Optional[int], default: int, device_type: str = "cpu", key: str = "threads",
                   recorded: Optional[int] = None, load: Optional[float] = None) -> Threads:
    """The threads for a run: `setting` (None: auto), torch's `default` count for this process (one per
    core, or OMP_NUM_THREADS), the device, the count a resumed run `recorded`; `load`: the other
    programs' (others_load()), measured here when auto needs it."""
    if setting is not None:
        return Threads(setting, key)
    if recorded:
        return Threads(recorded, f"{key} auto: the count the resumed run trained with, so that it resumes bit-exactly")
    if device_type != "cpu":
        return Threads(1, f"{key} auto: the {device_type} computes; one thread feeds it")
    if "OMP_NUM_THREADS" in os.environ:
        return Threads(default, f"{key} auto: OMP_NUM_THREADS")
    load = others_load() if load is None else load
    if load is None:
        return Threads(default, f"{key} auto: one per core; this system does not say how busy its cores are")
    free = max(1, min(default, usable_cpus() - round(load)))
    if free == default:
        return Threads(free, f"{key} auto: one per core, all free")
    return Threads(free, f"{key} auto: {default} cores, other programs kept {load:.1f} of them busy")
