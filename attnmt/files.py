"""Writing files so that a crash or a full disk never leaves a half-written one behind; the cache folder."""

from __future__ import annotations

import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from .errors import AttnmtError

MODEL_FILE = "model.safetensors"  # the model a training run keeps in its train.out_dir


def model_file(path: str | Path) -> Path:
    """`path`, or the model file in it when it is a training run's folder (train.out_dir)."""
    path = Path(path)
    return path / MODEL_FILE if path.is_dir() and (path / MODEL_FILE).is_file() else path


def model_name(path: str | Path) -> str:
    """A short name for a model: its training run's folder for DIR/model.safetensors (or a checkpoint
    there), else its file's name without the suffix, or its folder's (a CTranslate2 export)."""
    path = Path(path)
    if path.stem in ("model", "checkpoint") and path.parent.name:
        return path.parent.name
    return path.name if path.is_dir() else path.stem


def check_parent_dir(path: str | Path) -> None:
    """Refuse a file to be written into a directory that does not exist (before any work, if called early)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise AttnmtError(f"{path}: directory {path.parent} does not exist")


@contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """A binary handle whose bytes appear at `path` only when the block ends without an error.

    They go to a hidden file beside `path` (the same file system, so the rename is atomic), which
    is synced and renamed onto `path` at the end: readers see the old file or the whole new one. An
    exception in the block removes the hidden file and leaves `path` as it was; an OSError in the
    block is taken for a failed write and raised as a one-line AttnmtError.
    """
    path = Path(path)
    check_parent_dir(path)
    try:
        fd, tmp = _hidden_file(path)
    except OSError as err:
        raise _cannot_write(path, err) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise _cannot_write(path, err) from None
        raise


def _hidden_file(path: Path) -> tuple[int, Path]:
    """A new hidden file beside `path`, open for writing, with the mode any new file gets here
    (0666 less the umask): tempfile.mkstemp's 0600 would make every model and output private."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:  # another writer's name: draw again
            continue


def _cannot_write(path: Path, err: OSError) -> AttnmtError:
    return AttnmtError(f"{path}: cannot write: {err.strerror or err}")


def check_folder_free(path: str | Path, overwrite: bool = False) -> None:
    """Refuse to write a folder at `path` over one that is not empty (unless `overwrite`), or into a
    directory that does not exist: called before the work that makes the folder, and again by atomic_folder."""
    path = Path(path)
    if path.exists() and not overwrite and (not path.is_dir() or any(path.iterdir())):
        raise AttnmtError(f"{path} is not empty; use --overwrite to replace it")
    check_parent_dir(path)


@contextmanager
def atomic_folder(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """A new hidden folder beside `path` to write a folder's files into, renamed onto `path` when the
    block ends without an error: an export that fails leaves no half folder under the real name, and
    `path` as it was. A `path` that is not an empty folder is replaced only with `overwrite`."""
    path = Path(path)
    check_folder_free(path, overwrite)
    while True:   # made with 0777 less the umask, as any new folder (tempfile.mkdtemp's 0700 would hide it)
        partial = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            partial.mkdir()
            break
        except FileExistsError:   # another writer's name: draw again
            continue
        except OSError as err:
            raise _cannot_write(path, err) from None
    try:
        yield partial
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        partial.rename(path)
    except OSError as err:
        raise _cannot_write(path, err) from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old file or the whole new one."""
    with atomic_writer(path) as handle:
        handle.write(data)


def cache_dir() -> Path:
    """Where downloaded corpora and compiled decoding steps are kept: $ATTNMT_CACHE, default ~/.cache/attnmt."""
    return Path(os.environ.get("ATTNMT_CACHE") or Path.home() / ".cache" / "attnmt")
