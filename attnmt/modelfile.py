"""One shareable file per model: weights in safetensors, everything else as JSON in its metadata.

The metadata hold the config (whose model.arch names the model family; files written before
families existed have none and are RNNs), both tokenizers and both vocabularies; the weights
are the network's state dict, each name prefixed with `model.`.

A training checkpoint is a model file with the run's state added: the optimizer's tensors (each
name prefixed with `optimizer.` and its parameter's index) and, in the metadata, the optimizer's
parameter groups, the run's counters, the digest of the data it trains on and how many parts
each batch was cut into. This module alone reads and writes both.

Nothing here unpickles, so loading a file from a stranger cannot run code. Files are written to
a temporary name, flushed to disk, then renamed: a crash never leaves a half-written file under
the real name.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from .config import Config
from .configfile import saved_config
from .errors import AttnmtError
from .files import MODEL_FILE, atomic_write, model_file
from .vocab import Tokenization

MAGIC = "attnmt"
WEIGHTS_PREFIX = "model."
OPTIMIZER_PREFIX = "optimizer."
# 2: weights a network shares (tied embeddings) are stored once, the others' names in meta["shared"];
# a file without shared weights is still written as 1, which every attnmt reads.
FORMAT_VERSION = 2
# Rejected before reading: far larger than any RNN model here and a sign of a corrupt header.
MAX_HEADER_BYTES = 100 * 1024 * 1024


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes: safetensors itself has no checksum."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)   # read in place, not copied
    return digest.hexdigest()


def stored_once(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """`tensors` with each tensor that several names hold (a tied embedding and output layer) under its
    first name only, and {other name: first name}."""
    first: dict[tuple, str] = {}
    kept, shared = {}, {}
    for name in sorted(tensors):
        tensor = tensors[name]
        key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.dtype,
               tuple(tensor.shape), tuple(tensor.stride()))
        if key in first:
            shared[name] = first[key]
        else:
            first[key], kept[name] = name, tensor
    return kept, shared


def save_file(path: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    kept, shared = stored_once(tensors)
    # A copy of each: safetensors refuses tensors that share memory (views of one storage).
    kept = {name: t.detach().to("cpu").clone().contiguous() for name, t in kept.items()}
    meta = {"format": MAGIC, "format_version": 2 if shared else 1, "sha256": tensors_digest(kept),
            **({"shared": shared} if shared else {}), **meta}
    atomic_write(path, save_safetensors_bytes(kept, metadata={MAGIC: json.dumps(meta)}))


# Beside CTranslate2's files in a directory `attnmt export --to ctranslate2` writes (formats/ctranslate2.py).
CTRANSLATE2_ENGINE_FILE = "attnmt.json"


def load_file(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors and metadata of an attnmt file, or of the model file in a training run's folder, as the
    command line takes it; a clear error for anything else."""
    path = Path(path)
    if (path / CTRANSLATE2_ENGINE_FILE).is_file():
        raise AttnmtError(f"{path}: a CTranslate2 model (attnmt export), which only translate, evaluate, plot and "
                          f"serve decode (--engine ctranslate2); give this command the attnmt model file it came from")
    path = model_file(path)
    if path.is_dir():
        raise AttnmtError(f"{path}: a folder without {MODEL_FILE}; give the model file (a training run writes its "
                          f"model to train.out_dir/{MODEL_FILE})")
    if not path.is_file():
        raise AttnmtError(f"{path}: model file not found" if not path.exists() else f"{path}: not a regular file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AttnmtError(f"{path}: cannot read: {err.strerror or err}") from None
    meta = _metadata(path, data, len(data))
    try:
        tensors = load_safetensors_bytes(data)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise AttnmtError(f"{path}: model file is damaged or truncated ({err})") from None
    if tensors_digest(tensors) != meta.get("sha256"):
        raise AttnmtError(f"{path}: model file is corrupted (its weights do not match their checksum)")
    for name, first in meta.get("shared", {}).items():
        tensors[name] = tensors[first]
    return tensors, meta


@dataclass
class ModelDescription:
    """What a model file says besides its weights: how to build the network and read and write text."""

    config: Config
    tokenization: Tokenization

    def metadata(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), **self.tokenization.to_dict()}

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> "ModelDescription":
        """The description in a file's metadata; the config parsed, so that keys added since the file
        was written (model.arch) take their defaults."""
        return cls(saved_config(meta["config"]), Tokenization.from_dict(meta))


def model_tensors(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A network's weights as a model file stores them."""
    return {WEIGHTS_PREFIX + name: tensor for name, tensor in state_dict.items()}


def network_weights(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The network's state dict among a file's tensors (a checkpoint holds the optimizer's too)."""
    return {name[len(WEIGHTS_PREFIX):]: t for name, t in tensors.items() if name.startswith(WEIGHTS_PREFIX)}


def save_model(path: str | Path, description: ModelDescription, state_dict: dict[str, torch.Tensor],
               training: Optional[dict[str, Any]] = None, origin: Optional[dict[str, Any]] = None,
               averaged: Optional[list[dict[str, str]]] = None) -> None:
    """Write a model as one self-contained file (atomically); `training` says how it was trained
    (the data's digest, steps, its validation figures), `origin` where an imported model came from
    (its format, folder, name and config's digest: attnmt import), `averaged` the files whose mean it
    is (attnmt average), all for `attnmt info`."""
    meta = {"kind": "model", **description.metadata(), **({"training": training} if training else {}),
            **({"origin": origin} if origin else {}), **({"averaged": averaged} if averaged else {})}
    save_file(path, model_tensors(state_dict), meta)


def read_model(path: str | Path) -> tuple[ModelDescription, dict[str, torch.Tensor], dict[str, Any]]:
    """A model file's (or a checkpoint's) description, its network's weights and all of its metadata."""
    tensors, meta = load_file(path)
    return describe(path, meta), network_weights(tensors), meta


def describe(path: str | Path, meta: dict[str, Any]) -> ModelDescription:
    """The description in the metadata of the file at `path`; one line if it is incomplete."""
    try:
        return ModelDescription.from_metadata(meta)
    except (KeyError, ValueError, TypeError, AttnmtError) as err:
        raise AttnmtError(f"{path}: model file metadata is incomplete or invalid ({err})") from None


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata of the attnmt file at `path`, read from its header alone (the weights unread, unchecked)."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, 2)
            file.seek(0)
            length = file.read(8)
            head = length + file.read(min(MAX_HEADER_BYTES, int.from_bytes(length, "little")))
    except OSError as err:
        raise AttnmtError(f"{path}: cannot read: {err.strerror or err}") from None
    return _metadata(Path(path), head, size)


def _metadata(path: Path, head: bytes, size: int) -> dict[str, Any]:
    """The attnmt metadata in `head`, the first bytes of the file at `path` of `size` bytes."""
    not_ours = f"{path}: not an attnmt model file"
    if size < 8:
        raise AttnmtError(f"{not_ours} (only {size} bytes)")
    header_len = int.from_bytes(head[:8], "little")
    if header_len > min(MAX_HEADER_BYTES, size - 8):
        raise AttnmtError(f"{not_ours} (no safetensors header; truncated, or another program's file such as a pickle)")
    try:
        header = json.loads(head[8 : 8 + header_len])
        meta = json.loads(header["__metadata__"][MAGIC])
    except (ValueError, KeyError, TypeError):
        raise AttnmtError(f"{not_ours} (safetensors without attnmt metadata, or a corrupt header)") from None
    if meta.get("format") != MAGIC:
        raise AttnmtError(f"{not_ours} (unknown format)")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise AttnmtError(f"{path}: written by a newer attnmt (format {meta['format_version']}); upgrade attnmt")
    return meta


@dataclass
class Checkpoint:
    """A training run's state as its checkpoint holds it: the model (description and weights), the
    optimizer's state dict and the run's own entries."""

    description: ModelDescription
    weights: dict[str, torch.Tensor]   # the network's state dict
    optimizer: dict[str, Any]          # the optimizer's state dict: "state" (tensors) and "param_groups"
    progress: dict[str, Any]           # the run's counters (train.Progress)
    data_sha256: Optional[str]         # the prepared corpus's fingerprint
    parts_per_batch: int               # ranks x train.accumulate (files that do not say: 1)


def save_checkpoint(path: str | Path, checkpoint: Checkpoint) -> None:
    """Write a checkpoint (atomically)."""
    tensors = model_tensors(checkpoint.weights)
    for index, values in checkpoint.optimizer["state"].items():
        for key, value in values.items():
            tensors[f"{OPTIMIZER_PREFIX}{index}.{key}"] = value
    meta = {"kind": "checkpoint", **checkpoint.description.metadata(),
            "param_groups": checkpoint.optimizer["param_groups"], "progress": checkpoint.progress,
            "data_sha256": checkpoint.data_sha256, "parts_per_batch": checkpoint.parts_per_batch}
    save_file(path, tensors, meta)


def read_checkpoint(path: str | Path) -> Checkpoint:
    """A checkpoint save_checkpoint wrote; one line for a model file or incomplete metadata."""
    tensors, meta = load_file(path)
    if meta.get("kind") != "checkpoint":
        raise AttnmtError(f"{path}: not a training checkpoint")
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith(OPTIMIZER_PREFIX):
            index, key = name[len(OPTIMIZER_PREFIX):].split(".", 1)
            state.setdefault(int(index), {})[key] = value
    try:
        return Checkpoint(ModelDescription.from_metadata(meta), network_weights(tensors),
                          {"state": state, "param_groups": meta["param_groups"]}, meta["progress"],
                          meta.get("data_sha256"), meta.get("parts_per_batch", 1))
    except (KeyError, ValueError, TypeError, AttnmtError) as err:
        raise AttnmtError(f"{path}: checkpoint metadata is incomplete or invalid ({err})") from None
