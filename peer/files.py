"""Durable small files: the one way the peer writes its state and its notifications.

A file is replaced atomically (write a temporary file beside it, fsync it, rename it over the
target, fsync the directory), so after a crash at any point the target holds either the old or the
new content, never a mix, and a rename that returned survives a power cut. Temporary files end in
``.tmp``; a crash can leave one behind, and ``remove_temporary_files`` clears them at start-up.

``hold_data_dir`` is the data directory's lock: one daemon per directory, and no ``peer keygen
--force`` under a running daemon.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import crypto

TEMPORARY_SUFFIX: Final = ".tmp"
LOCK_FILE: Final = "daemon.lock"


class DataDirBusy(Exception):
    """Another process (a running daemon) holds the data directory's lock."""


@contextmanager
def hold_data_dir(directory: Path) -> Iterator[None]:
    """Creates ``directory`` (private to the user) and holds its exclusive lock, recording this
    process's id in it. ``DataDirBusy`` if another process holds it; ``OSError`` if the directory
    cannot be used."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirBusy(str(directory)) from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(descriptor)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably and atomically, readable by the user only (the
    same write ``crypto`` uses for keys: a reader sees the old file or the whole new one).
    An ``OSError`` names ``path`` (a full disk says which file it could not write)."""
    try:
        crypto.write_atomically(path, data, mode=0o600, overwrite=True)
    except OSError as error:
        if error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error


def remove_temporary_files(directory: Path) -> int:
    """Delete what interrupted writes left in ``directory``; returns how many were removed."""
    removed = 0
    for leftover in directory.glob(f".*{TEMPORARY_SUFFIX}"):
        leftover.unlink(missing_ok=True)
        removed += 1
    return removed
