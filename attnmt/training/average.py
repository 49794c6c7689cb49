"""Averaging weights: the last epochs' while training (train.average_last: each epoch's model kept
beside the best one, the older ones deleted), and model files of one model (`attnmt average`)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import AttnmtError
from ..files import check_parent_dir
from ..modelfile import describe, read_metadata, read_model, save_model
from ..translate import Translator


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
    """The element-wise mean of the model files' weights on `device` (summed in float32 in the files'
    order, one file read at a time, stored in each weight's own dtype)."""
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        for name, weight in read_model(path)[1].items():
            dtypes.setdefault(name, weight.dtype)
            total[name] = total.get(name, torch.zeros((), device=device)) + weight.to(device).float()
    return {name: (summed / len(paths)).to(dtypes[name]) for name, summed in total.items()}


def average_files(paths: list[Path], out: Path, overwrite: bool = False) -> Path:
    """Write the element-wise mean of model files of one model (the same architecture, tokenizers and
    vocabularies: epochs of one run, fine-tunings of one model) as the model file `out`, with the first
    file's description and origin and the files it averages (attnmt info)."""
    if len(paths) < 2:
        raise AttnmtError("attnmt average: give two or more model files to average")
    if out.exists() and not overwrite:
        raise AttnmtError(f"{out} exists; use --overwrite to replace it")
    check_parent_dir(out)
    metas = [read_metadata(path) for path in paths]
    first, *others = [describe(path, meta) for path, meta in zip(paths, metas)]
    for path, description in zip(paths[1:], others):
        theirs, ours = vars(description.config.model), vars(first.config.model)
        changed = [key for key in ours if theirs.get(key) != ours[key]] if theirs.keys() == ours.keys() else ["arch"]
        if changed:
            raise AttnmtError(f"{path}: another architecture than {paths[0]} (model.{', model.'.join(changed)}); "
                              f"only files of one model average")
        if description.tokenization.to_dict() != first.tokenization.to_dict():
            raise AttnmtError(f"{path}: other tokenizers or vocabularies than {paths[0]}; only files of one model average")
    averaged = [{"file": str(path.resolve()), "weights_sha256": meta["sha256"]} for path, meta in zip(paths, metas)]
    save_model(out, first, average_weights(paths, torch.device("cpu")), origin=metas[0].get("origin"),
               averaged=averaged)
    return out
