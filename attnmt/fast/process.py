"""Process-wide settings that training and decoding run best with: the thread count (threads.py
decides it), glibc malloc's and oneDNN's kernel cache's defaults.

They change the whole process, so entry points make them (`attnmt train`, `attnmt demo`, the
commands that translate, bench/), never library functions such as `train.train`.
"""

from __future__ import annotations

import ctypes
import os
import platform

import torch

from ..threads import Threads, choose_threads, parse_setting

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
# torch's thread count before any entry point set one: one per core, or OMP_NUM_THREADS.
DEFAULT_THREADS = torch.get_num_threads()


def bound_kernel_caches(shapes: int = 64) -> None:
    """Keep oneDNN's kernels for at most `shapes` matrix shapes (its default: 1,024).

    bfloat16 matrix products on CPUs run through oneDNN, which builds and keeps a kernel with its
    buffers for every new shape. Training batches come in ever new shapes, so a bf16 run grew by
    hundreds of MB; 64 holds a training step's shapes at the same speed. Decoding
    cycles through more shapes and runs faster with the default, so only training sets this.
    It takes effect if set before the process's first bfloat16 product; a user's own setting wins.
    """
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        os.environ.setdefault(name, str(shapes))


def keep_freed_blocks(limit_mb: int = 1024) -> bool:
    """Have glibc's malloc keep freed blocks of up to `limit_mb` for reuse; True if it took.

    A training step allocates its largest tensors anew: the float32 logits, their log-softmax and
    its gradient, tens of MB each; a step of the Transformer's beam search copies every layer's
    key and value caches to the hypotheses' new rows, MBs each. glibc maps blocks over 32 MB (the
    most its adaptive threshold reaches) fresh from the kernel and unmaps them when freed, and
    hands the free top of its heap back, so each step paid page faults to map and zero them again
    (a log-softmax took three times as long). Held, they take no more than the step's peak.
    Does nothing where malloc is not glibc's or the user tuned it (MALLOC_*_THRESHOLD_, GLIBC_TUNABLES).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(name in os.environ for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")) or any(
            name in tunables for name in ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")):
        return False
    libc, limit = ctypes.CDLL(None), limit_mb << 20
    return bool(libc.mallopt(M_MMAP_THRESHOLD, limit)) and bool(libc.mallopt(M_TRIM_THRESHOLD, limit))


def use_threads(setting: str | int, device: torch.device, key: str, recorded: int | None = None) -> Threads:
    """Compute with the threads `setting` asks for from now on (auto: as threads.choose_threads
    decides for `device`; `recorded`: the count of the run being resumed); what was chosen, and why."""
    threads = choose_threads(parse_setting(setting, key), DEFAULT_THREADS, device.type, key, recorded)
    torch.set_num_threads(threads.count)
    return threads


def set_up_training_process() -> None:
    """The process-wide memory settings training runs best with."""
    bound_kernel_caches()
    keep_freed_blocks()


def set_up_decoding_process() -> None:
    """The process-wide memory settings decoding runs best with: freed blocks kept (oneDNN's
    kernel caches stay unbounded: decoding cycles through more shapes than training)."""
    keep_freed_blocks()
