"""Reading and writing files that hold secrets (private keys, private identifiers).

Writes are atomic and never expose the secret: the bytes go to a temporary file in the target's
directory, created with ``O_CREAT | O_EXCL`` and mode 0600 (so no other user can open it at any
moment, whatever the umask, and a symlink planted at the temporary name is not followed), are
flushed to disk, and only then appear under the final name. Without ``overwrite`` the final step
is ``os.link``, which fails if the name exists: a check-then-rename would let two writers (or a
writer and an attacker) race. With ``overwrite`` it is ``os.replace``. Either way a reader sees the
old file or the whole new one, never a partial key.

Reads check the opened file (``fstat`` on the descriptor, not the path, so the file checked is the
file read): a regular file, of a plausible size, not accessible by group or others.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import warnings
from pathlib import Path
from typing import Final

from crypto.errors import InsecurePermissionsWarning, KeyFileError

PRIVATE_MODE: Final = 0o600
PUBLIC_MODE: Final = 0o644
MAX_SECRET_FILE_BYTES: Final = 256 * 1024
"""Far above any PEM key we accept (an encrypted RSA-16384 key is about 13 kB); a bigger file is
not a key, and reading it whole would only cost memory."""


def write_atomically(path: Path, data: bytes, *, mode: int, overwrite: bool) -> None:
    """Writes ``data`` at ``path`` atomically with permissions ``mode`` (less what the umask
    removes). Raises ``FileExistsError`` if ``path`` exists and ``overwrite`` is false, and
    ``OSError`` for any other failure; the temporary file never survives."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(temporary, flags, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(temporary, path)
        else:
            os.link(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    sync_directory(path.parent)


def save_file(
    path: Path,
    data: bytes,
    *,
    mode: int,
    overwrite: bool,
    what: str,
    error: type[Exception] = KeyFileError,
    exists_note: str = "",
) -> Path:
    """``write_atomically``, with its failures as ``error`` naming the file (``what`` and
    ``path``); ``exists_note`` is added to the refusal to replace an existing file."""
    try:
        write_atomically(path, data, mode=mode, overwrite=overwrite)
    except FileExistsError:
        raise error(f"{what} {path} already exists; refusing to replace it{exists_note}") from None
    except OSError as failure:
        raise error(f"cannot write {what} {path}: {failure.strerror}") from None
    return path


def sync_directory(directory: Path) -> None:
    """Makes the new directory entry durable (a crash right after must not lose a new key)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # not every platform can open a directory; the data itself is already synced
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems refuse fsync on directories; nothing more can be done
    finally:
        os.close(descriptor)


def read_secret_file(
    path: Path, *, what: str, allow_insecure_permissions: bool, missing_hint: str
) -> bytes:
    """The bytes of a secret file, or ``KeyFileError`` saying what is wrong with it and how to fix
    it. ``what`` names the file for the messages (``key file``, ``private identifier file``);
    ``missing_hint`` says how to create it."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise KeyFileError(f"{what} {path} does not exist ({missing_hint})") from None
    except PermissionError:
        raise KeyFileError(
            f"{what} {path} cannot be read: permission denied (this process runs as uid "
            f"{os.geteuid()}; the file must be readable by it)"
        ) from None
    except OSError as error:
        raise KeyFileError(f"{what} {path} cannot be opened: {error.strerror}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{what} {path} is not a regular file")
        if info.st_size > MAX_SECRET_FILE_BYTES:
            raise KeyFileError(
                f"{what} {path} is {info.st_size} bytes, too large to be a key "
                f"(the limit is {MAX_SECRET_FILE_BYTES})"
            )
        _check_permissions(path, info.st_mode, what, allow_insecure_permissions)
        try:
            return _read_all(descriptor, info.st_size)
        except OSError as error:
            raise KeyFileError(f"{what} {path} cannot be read: {error.strerror}") from None
    finally:
        os.close(descriptor)


def _read_all(descriptor: int, size: int) -> bytes:
    """Up to ``MAX_SECRET_FILE_BYTES`` bytes from the descriptor (``size`` is a hint: the file
    may have changed since ``fstat``)."""
    chunks = []
    total = 0
    while total <= MAX_SECRET_FILE_BYTES:
        chunk = os.read(descriptor, max(size - total, 4096))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _check_permissions(path: Path, mode: int, what: str, allow_insecure: bool) -> None:
    """Refuses a secret file that other users can access: whoever can read it can impersonate its
    owner. Any group or other bit counts (as ssh does): write access lets them replace the key."""
    if not mode & 0o077:
        return
    text = (
        f"{what} {path} is accessible by group or others (mode {stat.S_IMODE(mode):04o}); "
        f"run `chmod 600 {path}`"
    )
    if not allow_insecure:
        raise KeyFileError(f"{text} (or pass allow_insecure_permissions=True to accept it)")
    warnings.warn(
        f"{text}; accepted because allow_insecure_permissions=True",
        InsecurePermissionsWarning,
        stacklevel=4,
    )
