"""Averaging the last epochs' weights (train.average_last): each epoch's model kept beside the
best one while training, the older ones deleted, and their element-wise mean."""

from __future__ import annotations

from pathlib import Path

import torch

from .modelfile import read_model
from .translate import Translator


def keep_epoch_model(translator: Translator, epoch: int, kept: list[str], out_dir: Path, keep: int) -> list[str]:
    """Save epoch `epoch`'s model in out_dir beside the `kept` ones (file names, oldest first) and
    delete those too old to be averaged; the names kept now."""
    name = f"epoch{epoch}.safetensors"
    translator.save(out_dir / name)
    kept = [f for f in kept if f != name] + [name]
    while len(kept) > keep:
        (out_dir / kept.pop(0)).unlink(missing_ok=True)
    return kept


def epochs_of(names: list[str]) -> list[int]:
    """The epochs of the model files keep_epoch_model named (`epoch9.safetensors` is epoch 9)."""
    return [int(name.removeprefix("epoch").removesuffix(".safetensors")) for name in names]


def average_weights(paths: list[Path], device: torch.device) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model files' weights on `device` (summed in float32, stored in
    each weight's own dtype)."""
    states = [{name: weight.to(device) for name, weight in read_model(path)[1].items()} for path in paths]
    zero = torch.zeros((), device=device)
    return {k: (sum((state[k].float() for state in states), zero) / len(states)).to(states[0][k].dtype)
            for k in states[0]}
