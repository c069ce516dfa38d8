"""Durable small files: the one way the peer writes its state and its notifications.

A file is replaced atomically (write a temporary file beside it, fsync it, rename it over the
target, fsync the directory), so after a crash at any point the target holds either the old or the
new content, never a mix, and a rename that returned survives a power cut. Temporary files end in
``.tmp``; a crash can leave one behind, and ``remove_temporary_files`` clears them at start-up.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Final

TEMPORARY_SUFFIX: Final = ".tmp"


def write_atomically(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` durably and atomically."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMPORARY_SUFFIX}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_temporary_files(directory: Path) -> int:
    """Delete what interrupted writes left in ``directory``; returns how many were removed."""
    removed = 0
    for leftover in directory.glob(f".*{TEMPORARY_SUFFIX}"):
        leftover.unlink(missing_ok=True)
        removed += 1
    return removed
