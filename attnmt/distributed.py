"""Training on several processes started by torchrun: which rank this process is, how a global
batch is split across ranks, and what the ranks exchange (PyTorch's DistributedDataParallel for
the gradients, torch.distributed for the rest).

`Ranks` is one process alone, where every exchange is the identity; `ProcessGroupRanks` is the
same interface over a torch.distributed process group. Training asks its `Ranks` and never
checks which kind it has.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from typing import Any, ContextManager

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .config import TrainConfig
from .errors import AttnmtError
from .model import resolve_device

# What torchrun sets in each process it starts.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def split(ids: list[int], parts: int) -> list[list[int]]:
    """A global batch's sentences dealt into `parts` parts, round robin: a batch is sorted by
    length, so each part gets short and long sentences alike (ranks finish their share together)."""
    return [ids[j::parts] for j in range(parts)]


class Ranks:
    """One training process alone: rank 0 of 1."""

    rank = 0
    world_size = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that validates, logs and writes files."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """The device this rank trains on, given the one train.device names."""
        return device

    def parts(self, ids: list[int], accumulate: int) -> list[tuple[int, list[int]]]:
        """This rank's micro-batches of a global batch, each with its index among the global batch's
        world_size x accumulate parts; rank r takes parts r*accumulate to (r+1)*accumulate - 1, so
        that the same world_size x accumulate cuts the batch the same way (K=2 on one rank = 2
        ranks). Empty parts (a batch smaller than its number of parts) are left out."""
        every = split(ids, self.world_size * accumulate)
        first = self.rank * accumulate
        return [(j, every[j]) for j in range(first, first + accumulate) if every[j]]

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module training calls: the model itself, or DDP around it."""
        return model

    def exchanging(self, model: torch.nn.Module, last: bool) -> ContextManager:
        """Around one micro-batch's backward: gradients are exchanged after the last one only."""
        return contextlib.nullcontext()

    def sum(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks."""
        return values

    def share(self, value: Any) -> Any:
        """Rank 0's value, on every rank (any picklable value)."""
        return value

    def close(self) -> None:
        """Leave the process group, if any."""


class ProcessGroupRanks(Ranks):
    """One of the processes torchrun started, in the default torch.distributed process group."""

    def __init__(self, rank: int, world_size: int, local_rank: int, device: torch.device) -> None:
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self._device = device

    def device(self, device: torch.device) -> torch.device:
        return self._device

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        # Buffers (sinusoids, masks) are never trained: nothing to broadcast at every forward.
        ids = [self._device.index] if self._device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)

    def exchanging(self, model: torch.nn.Module, last: bool) -> ContextManager:
        return contextlib.nullcontext() if last else model.no_sync()

    def sum(self, values: list[float]) -> list[float]:
        totals = torch.tensor(values, dtype=torch.float64, device=self._device)
        dist.all_reduce(totals)
        return totals.tolist()

    def share(self, value: Any) -> Any:
        box = [value]
        dist.broadcast_object_list(box, src=0, device=self._device)
        return box[0]

    def close(self) -> None:
        dist.destroy_process_group()


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
    return ProcessGroupRanks(rank, world_size, local_rank, device)
