"""What the formats share: another toolkit's folder in (`attnmt import`), a folder out (`attnmt export`).

A format holds the models of the families that have a layout in it (families.layout: the family's names
in the format's terms); a model it cannot hold or express is refused in one line before anything is
read or written, and a folder is written whole or not at all (files.atomic_folder).
"""

from __future__ import annotations

import abc
import json
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import AttnmtError
from ..families import layout
from ..files import atomic_folder, check_folder_free
from ..modelfile import describe, read_metadata
from ..translate import Translator


class FolderWriter(abc.ABC):
    """A format `attnmt export --to` writes: a model file in, a folder of another toolkit out."""

    format: str   # its name, as --to and the families' layouts name it

    @abc.abstractmethod
    def cannot_hold(self, path: str | Path, arch: str) -> str:
        """The line that refuses the model file `path`, of the family `arch`, which has no layout here."""

    def check(self, path: str | Path, config: Config, layout: Any) -> None:
        """Refuse, in one line, a model whose settings the format cannot express (each format its own)."""

    @abc.abstractmethod
    def write(self, translator: Translator, layout: Any, folder: Path, meta: dict[str, Any]) -> list[str]:
        """Write the model into the empty `folder`; returns what the other toolkit will do otherwise, a line each."""


def write_folder(writer: FolderWriter, model_path: str | Path, out_dir: str | Path,
                 overwrite: bool = False) -> tuple[Path, list[str]]:
    """Write the model file `model_path` as `writer`'s folder `out_dir` (atomically), refused before its
    weights are read where the format cannot hold or express it; returns the folder and the writer's notes."""
    meta = read_metadata(model_path)
    config = describe(model_path, meta).config
    names = layout(config.model.arch, writer.format)
    if names is None:
        raise AttnmtError(writer.cannot_hold(model_path, config.model.arch))
    writer.check(model_path, config, names)
    check_folder_free(out_dir, overwrite)
    translator = Translator.load(model_path, device="cpu", precision="fp32")
    with atomic_folder(out_dir, overwrite) as folder:
        notes = writer.write(translator, names, folder, meta)
    return Path(out_dir), notes


def read_json(path: Path, missing: str = "") -> dict[str, Any]:
    """A JSON object of keys; for a file that is not there, an empty one, or with `missing` an error that
    ends with it (what the file's absence means)."""
    if not path.is_file():
        if missing:
            raise AttnmtError(f"{path.parent}: no {path.name}; {missing}")
        return {}
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise AttnmtError(f"{path}: cannot read it as JSON ({err})") from None
    if not isinstance(values, dict):
        raise AttnmtError(f"{path}: expected a JSON object of keys, got {type(values).__name__}")
    return values


def write_json(path: Path, values: dict[str, Any]) -> None:
    path.write_text(json.dumps(values, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
