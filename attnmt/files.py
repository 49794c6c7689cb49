"""Writing files so that a crash or a full disk never leaves a half-written one behind; the cache folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import AttnmtError


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old file or the whole new one."""
    path = Path(path)
    if not path.parent.is_dir():
        raise AttnmtError(f"{path}: directory {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise AttnmtError(f"{path}: cannot write: {err.strerror or err}") from None
        raise


def cache_dir() -> Path:
    """Where downloaded corpora and compiled decoding steps are kept: $ATTNMT_CACHE, default ~/.cache/attnmt."""
    return Path(os.environ.get("ATTNMT_CACHE") or Path.home() / ".cache" / "attnmt")


def check_parent_dir(path: str | Path) -> None:
    """Refuse, before any work, a file to be written into a directory that does not exist."""
    path = Path(path)
    if not path.parent.is_dir():
        raise AttnmtError(f"{path}: directory {path.parent} does not exist")
