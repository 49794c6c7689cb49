"""Atomic writes: the file appears whole, with the mode any new file of the user's gets."""

import os
import stat

import pytest

from attnmt.files import atomic_write


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        atomic_write(tmp_path / "new.txt", b"new\n")
        atomic_write(tmp_path / "new.txt", b"replaced\n")  # a replaced file gets the same mode
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == mode
    assert (tmp_path / "new.txt").read_bytes() == b"replaced\n"
    assert [p.name for p in tmp_path.iterdir()] == ["new.txt"]  # no hidden file left behind
