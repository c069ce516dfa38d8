"""The data directory's free space: a super-peer pauses before its disk is full, and stops
cleanly when a write fails all the same.

**Why pause, and not refuse only what would be written.** Nearly every input writes (kept mail,
the publication log, versions, routing state, a rendezvous file's chunks), and the node applies
an input in memory before its writes are committed with its group's (``superpeer._commits``). A
write that fails leaves the node ahead of its store: sqlite rolls the whole transaction back when
the disk is full (``SQLITE_FULL``), the group's writes with it, and the node cannot take an input
back. So the daemon lets no input in while its writes might not fit. Below ``min_free_bytes``
free on the data directory's file system (``[store]``; looked at after every group commit and
every ``disk_check_seconds``) it *pauses* (``DiskGuard``):

* it applies no input: it reads nothing more from its neighbours (each keeps what it sent
  unacknowledged and sends it again later, ``superpeer.channel``) and runs no timer, so it sends
  no heartbeat: past ``failure_seconds`` its neighbours repair the cube around it, as around a
  process stopped with SIGSTOP, and it rejoins when it goes on;
* a peer's frame (a request, a new connection's ``Hello``) is not applied: the peer hears why
  (``LinkError``) and its connection closes, so it tries another super-peer of its list or comes
  back later; an idle peer keeps its connection, and its mail flows again when the pause ends;
* ``/readyz`` answers 503 with the reason, ``superpeer status`` shows it under ``disk``, and the
  log says ``event=disk_full`` with the free space;
* it goes on by itself once ``resume_free_bytes`` are free (``event=disk_space_back``).

**Before it pauses, it gives back what is its own to give**: the store's write-ahead log
(``SqliteStore.reclaim``: a checkpoint that copies the log into the database and truncates it).
The store checkpoints the log at every fold, but keeps the file at its largest size up to
``log_bound``, so after a burst of writes (a catch-up replayed to it, a neighbour's routes) the
log can hold megabytes of pages the database already has. A daemon that paused
with that space in its own hands would wait for an operator to free what it could free itself,
and run no timer meanwhile (its neighbours evict it; it rejoins only when it goes on).

Nothing it acknowledged is lost (it was committed before the acknowledgement left), and nothing it
did not acknowledge is: its senders send it again.

**Why stop when a write fails all the same** (one group writing more than the reserve, another
process filling the disk between two looks): the transaction is gone and the node's memory is
ahead of its store; only a start from the store, which is what a restart does, makes them agree
again. The group's outputs were never sent (they wait for its commit; but for notifications
from other origins, which promise nothing this store keeps: their origins' logs hold them), so
stopping breaks no promise. The daemon says which file it could not write and how much space is left, and exits
(code 4, ``superpeer.cli``). Started again (systemd's ``Restart=on-failure``) while the disk is
still short of ``min_free_bytes``, it refuses to start, with the figures, until there is room.
PostgreSQL does the same when it cannot write its write-ahead log (it stops, and recovers at the
next start), and a Kafka broker whose only log directory fails shuts down.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

log = logging.getLogger("superpeer")

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""What a write answers when the file system (or the user's quota on it) is full."""
SQLITE_FULL = 13
"""sqlite's primary result code for "database or disk is full"."""


class NoRoom(RuntimeError):
    """The daemon does not start: its data directory's file system has less than
    ``min_free_bytes`` free."""


@dataclass(frozen=True, slots=True)
class Space:
    """A file system's free and total bytes (free: what an unprivileged process may use)."""

    free: int
    total: int


def space_of(directory: Path) -> Space:
    stats = os.statvfs(directory)
    return Space(stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize)


def disk_full(error: BaseException) -> BaseException | None:
    """The error, in ``error``, its exception groups, causes and contexts, that says a write
    found the disk full (None: none did)."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in FULL_ERRNOS:
            return current
        if isinstance(current, sqlite3.Error) and _sqlite_code(current) == SQLITE_FULL:
            return current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def _sqlite_code(error: sqlite3.Error) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return (
        None if code is None else code & 0xFF
    )  # an extended code keeps the primary in its low byte


def written_file(error: BaseException, directory: Path) -> str:
    """Which file the failed write was for: the one an ``OSError`` names, else the store (sqlite
    writes a transaction to its write-ahead log, ``state.sqlite-wal``)."""
    filename = getattr(error, "filename", None)
    if filename:
        return str(filename)
    if isinstance(error, sqlite3.Error):
        return f"{directory / 'state.sqlite'} (its write-ahead log state.sqlite-wal)"
    return f"a file in {directory}"


def describe_space(directory: Path) -> str:
    """``N bytes free of M on the file system of DIRECTORY`` (or why it is not known)."""
    try:
        space = space_of(directory)
    except OSError as error:
        return f"the free space of {directory} is not known: {error.strerror}"
    return f"{space.free} bytes free of {space.total} on the file system of {directory}"


def stopped_because(error: BaseException, directory: Path) -> str:
    """What the daemon says when a write found the disk full: which file, how much is left,
    what it did and what to do."""
    reason = error.strerror if isinstance(error, OSError) else str(error)
    return (
        f"the store could not write {written_file(error, directory)}: {reason} "
        f"({describe_space(directory)}); stopped, having sent nothing it had not made durable: "
        "make room and start it again"
    )


class DiskGuard:
    """Whether the daemon may apply inputs, from the free space of its data directory (see the
    module docstring). ``check`` measures and says whether the state changed; ``wait_room``
    returns at once while there is room, else once there is again."""

    def __init__(
        self,
        directory: Path,
        *,
        min_free_bytes: int,
        resume_free_bytes: int,
        measure: Callable[[Path], Space] = space_of,
    ) -> None:
        if not 0 < min_free_bytes <= resume_free_bytes:
            raise ValueError("0 < min_free_bytes <= resume_free_bytes")
        self.directory = directory
        self.min_free_bytes = min_free_bytes
        self.resume_free_bytes = resume_free_bytes
        self._measure = measure
        self.space: Space | None = None
        self.paused: str | None = None
        """Why the daemon is paused (None: it is not)."""
        self.pauses = 0
        self.reclaim: Callable[[], bool] | None = None
        """Gives space back before a pause and during one (the store's ``reclaim``; set once
        the store is open): True when it did."""
        self._room = trio.Event()
        self._room.set()

    def check(self) -> bool:
        """Measure the free space; True when the daemon has just paused or just gone on."""
        space = self._measured()
        if space is None:
            return False
        needed = self.min_free_bytes if self.paused is None else self.resume_free_bytes
        if space.free < needed and self.reclaim is not None and self.reclaim():
            space = self._measured()
            if space is None:
                return False
        if self.paused is None and space.free < self.min_free_bytes:
            self.paused = (
                f"the disk of the data directory is nearly full: {space.free} bytes free of "
                f"{space.total} on the file system of {self.directory}, less than "
                f"store.min_free_bytes ({self.min_free_bytes}); this super-peer takes "
                f"nothing it could not keep durably until {self.resume_free_bytes} bytes "
                "are free"
            )
            self.pauses += 1
            self._room = trio.Event()
            return True
        if self.paused is not None and space.free >= self.resume_free_bytes:
            self.paused = None
            self._room.set()
            return True
        return False

    def _measured(self) -> Space | None:
        try:
            space = self.space = self._measure(self.directory)
        except OSError as error:
            log.warning("event=disk_space_unknown directory=%s error=%r", self.directory, error)
            return None
        return space

    async def wait_room(self) -> None:
        """Until the daemon may apply inputs (a checkpoint when it may already: a read loop
        looks at ``paused`` first, so as not to split the groups its reads make)."""
        await self._room.wait()

    def status(self) -> dict[str, object]:
        """``superpeer status``'s ``disk``."""
        space = self.space
        return {
            "free_bytes": None if space is None else space.free,
            "total_bytes": None if space is None else space.total,
            "min_free_bytes": self.min_free_bytes,
            "resume_free_bytes": self.resume_free_bytes,
            "paused": self.paused,
            "pauses": self.pauses,
        }
