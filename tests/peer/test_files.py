"""``peer.files``: a failed write names the file it could not write, and leaves no temporary."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from peer.files import TEMPORARY_SUFFIX, write_all_atomically, write_atomically


class _FullDisk(io.RawIOBase):
    """A descriptor's file whose every write fails as a full disk's does: with no file name."""

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    opened = os.fdopen

    def fdopen(descriptor: int, *arguments: object, **keywords: object) -> io.RawIOBase:
        opened(descriptor, "wb").close()  # the temporary file was made; its writes fail
        return _FullDisk()

    monkeypatch.setattr(os, "fdopen", fdopen)


@pytest.mark.usefixtures("full_disk")
def test_a_group_write_on_a_full_disk_names_the_file_it_could_not_write(tmp_path: Path) -> None:
    with pytest.raises(OSError) as raised:
        write_all_atomically(tmp_path, {"a": b"record a", "b": b"record b"})
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(tmp_path / "a")
    assert not list(tmp_path.glob(f"*{TEMPORARY_SUFFIX}"))
    assert not (tmp_path / "a").exists()


@pytest.mark.usefixtures("full_disk")
def test_a_single_write_on_a_full_disk_names_the_file_it_could_not_write(tmp_path: Path) -> None:
    with pytest.raises(OSError) as raised:
        write_atomically(tmp_path / "state.json", b"{}")
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(tmp_path / "state.json")
    assert not list(tmp_path.glob(f"*{TEMPORARY_SUFFIX}"))
