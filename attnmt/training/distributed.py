"""Training on several processes started by torchrun: which rank this process is, how a global
batch is split across ranks, and what the ranks exchange (PyTorch's DistributedDataParallel for
the gradients, torch.distributed for the rest).

train.Ranks is one process alone, where every exchange is the identity; `ProcessGroupRanks` is the
same interface over a torch.distributed process group, its update step.py's pieces with the
exchanges between them. Training asks its Ranks and never checks which kind it has.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import ContextManager, Iterator, Optional, TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..config import TrainConfig
from ..errors import AttnmtError, first_line
from ..precision import resolve_device
from .data import Part, TrainingData, split
from .step import TeacherForced, apply_update, backward, refusing_out_of_memory
from .train import Ranks

# What torchrun sets in each process it starts.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

T = TypeVar("T")


def rank_parts(ids: list[int], rank: int, world_size: int, accumulate: int) -> list[tuple[int, list[int]]]:
    """Rank `rank`'s micro-batches of a global batch, each with its index among the global batch's
    world_size x accumulate parts; rank r takes parts r*accumulate to (r+1)*accumulate - 1, so that
    the same world_size x accumulate cuts the batch the same way (K=2 on one rank = 2 ranks). Empty
    parts (a batch smaller than its number of parts) are left out."""
    every = split(ids, world_size * accumulate)
    first = rank * accumulate
    return [(j, every[j]) for j in range(first, first + accumulate) if every[j]]


class ProcessGroupRanks(Ranks):
    """One of the processes torchrun started, in the default torch.distributed process group."""

    def __init__(self, rank: int, world_size: int, local_rank: int, device: torch.device, timeout_min: float) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self._device, self._timeout_min = device, timeout_min
        self._heartbeat = Heartbeat(rank, world_size)

    def device(self, device: torch.device) -> torch.device:
        return self._device

    def parts(self, data: TrainingData, ids: list[int], accumulate: int, device: torch.device) -> list[Part]:
        """This rank's micro-batches of a global batch (`rank_parts`). A rank left without sentences (a
        batch smaller than its number of parts) runs the batch's first sentence with weight 0: every
        rank must take part in the gradient exchange."""
        mine = rank_parts(ids, self.rank, self.world_size, accumulate)
        if not mine:
            return [data.part(ids[:1], device, index=-1, weight=0.0)]
        return [data.part(part, device, index) for index, part in mine]

    def wrap(self, network: TeacherForced) -> torch.nn.Module:
        # Buffers (sinusoids, masks) are never trained: nothing to broadcast at every forward.
        ids = [self._device.index] if self._device.type == "cuda" else None
        return DistributedDataParallel(network, device_ids=ids, forward_sync_buffers=False)

    def train_step(self, network: torch.nn.Module, optimizer: torch.optim.Optimizer, parts: list[Part],
                   tc: TrainConfig, step: int, tokens: int, model_path: Optional[Path] = None) -> float:
        """step.train_step across the ranks: each part's gradient kept on its rank but the last's, whose
        backward exchanges them all (DDP averages the ranks' gradients: the whole batch's is their sum,
        hence the world_size); the loss summed over the ranks."""
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        with refusing_out_of_memory(step, parts):
            for number, part in enumerate(parts, 1):
                with self._exchanging(network, last=number == len(parts)):
                    total += backward(network, part, tc, step, self.world_size / tokens)
        return apply_update(network, optimizer, self.sum([total])[0], tc, step, model_path)

    def _exchanging(self, network: torch.nn.Module, last: bool) -> ContextManager:
        """Around one micro-batch's backward: gradients are exchanged after the last one only."""
        if last:
            return self._exchange(model_too=True)
        assert isinstance(network, DistributedDataParallel), "the module wrap returned"
        return network.no_sync()

    def sum(self, values: list[float]) -> list[float]:
        totals = torch.tensor(values, dtype=torch.float64, device=self._device)
        with self._exchange():
            dist.all_reduce(totals)
        return totals.tolist()

    def share(self, value: T) -> T:
        box = [value]
        with self._exchange():
            dist.broadcast_object_list(box, src=0, device=self._device)
        return box[0]

    def close(self) -> None:
        self._heartbeat.stop()
        dist.destroy_process_group()

    @contextlib.contextmanager
    def _exchange(self, model_too: bool = False) -> Iterator[None]:
        """Around one exchange: turns its failure (a rank died or hangs) into one line that names
        the ranks that stopped answering. `model_too`: the block also runs the model, whose own
        errors pass through."""
        try:
            yield
        except RuntimeError as err:
            if model_too and not _is_exchange_failure(err):
                raise
            silent = self._heartbeat.silent_ranks()
            reason = re.sub(r"^\[[^]]*\] *", "", first_line(err))  # without gloo's source file
            if silent:
                raise AttnmtError(f"rank {', '.join(map(str, silent))} stopped answering; the job ends ({reason})"
                                  ) from None
            raise AttnmtError(f"an exchange between the ranks failed, though every rank still answers: one took "
                              f"longer than train.rank_timeout_min={self._timeout_min} ({reason})") from None


class Heartbeat:
    """Each rank adds 1 to its counter in torchrun's key-value store every `period_s` seconds, from
    a thread of its own, so that after a failed exchange the ranks can tell a stopped rank (its
    counter stands still) from a slow one. Counters, not clocks: machines' clocks differ."""

    def __init__(self, rank: int, world_size: int, period_s: float = 1.0) -> None:
        # A store client of its own: the training thread keeps using the group's.
        # PyTorch has no public accessor; torch's stub lacks Store.clone, which it has (torch 2.x).
        self._store = dist.distributed_c10d._get_default_store().clone()  # type: ignore[attr-defined]
        self._rank, self._world_size, self._period_s = rank, world_size, period_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="attnmt-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stopped.wait(self._period_s):
            try:
                self._store.add(f"attnmt/heartbeat/{self._rank}", 1)
            except RuntimeError:  # the store is gone with the job
                return

    def silent_ranks(self) -> list[int]:
        """The ranks whose counter did not move over three periods."""
        try:
            keys = [f"attnmt/heartbeat/{rank}" for rank in range(self._world_size)]
            before = [self._store.add(key, 0) for key in keys]
            time.sleep(3 * self._period_s)
            return [rank for rank, key in enumerate(keys) if self._store.add(key, 0) == before[rank]]
        except RuntimeError:  # the store went with the agent that hosted it
            return []

    def stop(self) -> None:
        # Joined, not left to die with the interpreter: a thread killed inside a store call aborts the process.
        self._stopped.set()
        self._thread.join()


def _is_exchange_failure(err: RuntimeError) -> bool:
    """An error of the gradient exchange, as opposed to one of the model's (both are RuntimeErrors)."""
    text = str(err).lower()
    return isinstance(err, dist.DistError) or any(mark in text for mark in ("gloo", "nccl", "connection closed",
                                                                              "connection reset", "timed out"))


def start_ranks(tc: TrainConfig) -> Ranks:
    """The ranks torchrun's environment describes, joined into a process group (gloo on CPUs,
    nccl on GPUs, each rank on the GPU numbered LOCAL_RANK); one process alone outside torchrun.
    An entry point calls this: it sets up process-wide state (the process group, the CUDA device)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Ranks()
    missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        raise AttnmtError(f"WORLD_SIZE is set but {', '.join(missing)} not: start several ranks with torchrun "
                          f"(torchrun --nproc_per_node=N -m attnmt train CONFIG)")
    rank, world_size, local_rank = (int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    device = resolve_device(tc.device)
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise AttnmtError(f"rank {rank}: LOCAL_RANK {local_rank} but this machine has "
                              f"{torch.cuda.device_count()} CUDA GPU(s); start at most that many ranks per machine")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=timedelta(minutes=tc.rank_timeout_min))
    return ProcessGroupRanks(rank, world_size, local_rank, device, tc.rank_timeout_min)
