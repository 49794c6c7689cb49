"""One shareable file per model: weights in safetensors, everything else as JSON in its metadata.

The metadata hold the config (whose model.arch names the model family; files written before
families existed have none and are RNNs), both tokenizers and both vocabularies; the weights
are the network's state dict, each name prefixed with `model.`.

Nothing here unpickles, so loading a file from a stranger cannot run code. A training
checkpoint is the same format with the optimizer's tensors and the run's counters added.
Files are written to a temporary name, flushed to disk, then renamed: a crash never leaves a
half-written file under the real name.
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

from .config import Config, saved_config
from .errors import AttnmtError
from .files import atomic_write
from .tokenize import Tokenizer, tokenizers_from_dicts
from .vocab import Vocabulary

MAGIC = "attnmt"
WEIGHTS_PREFIX = "model."
FORMAT_VERSION = 1
# Rejected before reading: far larger than any RNN model here and a sign of a corrupt header.
MAX_HEADER_BYTES = 100 * 1024 * 1024


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes: safetensors itself has no checksum."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def save_file(path: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    # A copy of each: tied weights share memory, which safetensors refuses to write.
    tensors = {name: t.detach().to("cpu").clone().contiguous() for name, t in tensors.items()}
    meta = {"format": MAGIC, "format_version": FORMAT_VERSION, "sha256": tensors_digest(tensors), **meta}
    atomic_write(path, save_safetensors_bytes(tensors, metadata={MAGIC: json.dumps(meta)}))


# Beside CTranslate2's files in a directory `attnmt export --to ctranslate2` writes (export.py).
CTRANSLATE2_ENGINE_FILE = "attnmt.json"


def load_file(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors and metadata of an attnmt file; a clear error for anything else."""
    path = Path(path)
    if (path / CTRANSLATE2_ENGINE_FILE).is_file():
        raise AttnmtError(f"{path}: a CTranslate2 model (attnmt export), which only translate, evaluate, plot and "
                          f"serve decode (--engine ctranslate2); give this command the attnmt model file it came from")
    if not path.is_file():
        raise AttnmtError(f"{path}: model file not found" if not path.exists() else f"{path}: not a regular file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AttnmtError(f"{path}: cannot read: {err.strerror or err}") from None
    not_ours = f"{path}: not an attnmt model file"
    if len(data) < 8:
        raise AttnmtError(f"{not_ours} (only {len(data)} bytes)")
    header_len = int.from_bytes(data[:8], "little")
    if header_len > min(MAX_HEADER_BYTES, len(data) - 8):
        raise AttnmtError(f"{not_ours} (no safetensors header; truncated, or another program's file such as a pickle)")
    try:
        header = json.loads(data[8 : 8 + header_len])
        meta = json.loads(header["__metadata__"][MAGIC])
    except (ValueError, KeyError, TypeError):
        raise AttnmtError(f"{not_ours} (safetensors without attnmt metadata, or a corrupt header)") from None
    if meta.get("format") != MAGIC:
        raise AttnmtError(f"{not_ours} (unknown format)")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise AttnmtError(f"{path}: written by a newer attnmt (format {meta['format_version']}); upgrade attnmt")
    try:
        tensors = load_safetensors_bytes(data)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise AttnmtError(f"{path}: model file is damaged or truncated ({err})") from None
    if tensors_digest(tensors) != meta.get("sha256"):
        raise AttnmtError(f"{path}: model file is corrupted (its weights do not match their checksum)")
    return tensors, meta


@dataclass
class ModelDescription:
    """What a model file says besides its weights: how to build the network and read and write text."""

    config: Config
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary

    def metadata(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "src_tokenizer": self.src_tokenizer.to_dict(),
                "tgt_tokenizer": self.tgt_tokenizer.to_dict(), "src_vocab": self.src_vocab.to_list(),
                "tgt_vocab": self.tgt_vocab.to_list()}


def model_tensors(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A network's weights as a model file stores them."""
    return {WEIGHTS_PREFIX + name: tensor for name, tensor in state_dict.items()}


def network_weights(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The network's state dict among a file's tensors (a checkpoint holds the optimizer's too)."""
    return {name[len(WEIGHTS_PREFIX):]: t for name, t in tensors.items() if name.startswith(WEIGHTS_PREFIX)}


def save_model(path: str | Path, description: ModelDescription, state_dict: dict[str, torch.Tensor],
               training: Optional[dict[str, Any]] = None) -> None:
    """Write a model as one self-contained file (atomically); `training` says how it was trained
    (the data's digest, steps, its validation figures), for `attnmt info`."""
    meta = {"kind": "model", **description.metadata(), **({"training": training} if training else {})}
    save_file(path, model_tensors(state_dict), meta)


def read_model(path: str | Path) -> tuple[ModelDescription, dict[str, torch.Tensor], dict[str, Any]]:
    """A model file's (or a checkpoint's) description, its network's weights and all of its metadata."""
    tensors, meta = load_file(path)
    try:
        description = ModelDescription(saved_config(meta["config"]),
                                       *tokenizers_from_dicts(meta["src_tokenizer"], meta["tgt_tokenizer"]),
                                       Vocabulary.from_list(meta["src_vocab"]), Vocabulary.from_list(meta["tgt_vocab"]))
    except (KeyError, ValueError, TypeError, AttnmtError) as err:
        raise AttnmtError(f"{path}: model file metadata is incomplete or invalid ({err})") from None
    return description, network_weights(tensors), meta
