"""The store's redo journal: a commit made durable as a few kilobytes of statements, not as pages.

Why: sqlite in WAL mode writes every page a transaction changed to its log when it commits, and a
notification's writes touch a row of each of several tables and their indexes at random keys, so a
commit of one notification wrote 87.8 KiB of log (BENCHMARKS.md, issue 37, stop 70) and its
``COMMIT`` was the largest single cost of a publication. ``SqliteStore`` therefore keeps sqlite's
transaction open across its commits and makes each commit durable by writing the statements the
transaction ran since the previous one (their text once, then their arguments) as one *frame* of
this journal. Every so often (when the next frame would not fit in the journal) the store *folds*:
it commits sqlite's transaction, which writes each page it changed once for the thousands of
commits since the last fold, makes the database's log durable, and starts the journal again.

The file: ``size`` bytes, written with zeros when it is made, so a frame written later changes no
file size and its ``fdatasync`` writes data blocks only. Frames follow each other from offset 0;
each is a header ``>IIQ`` (the payload's length, the CRC-32 of the generation and the payload,
the generation) and a msgpack payload, a list of entries:

* ``[0, text]``: the next statement of this generation (numbered from 0 in order of definition);
* ``[1, n, arguments]``: statement ``n`` executed once with ``arguments``;
* ``[2, n, [arguments, ...]]``: statement ``n`` executed once per row (``executemany``).

A *generation* is the frames written between two folds; the database keeps the number of the last
generation it holds (the store's meta ``redo_folded``, written in the fold's transaction), and a
generation's frames are written only after the fold before it is durable. So, after a crash or a
power loss, the frames to run again on the database are exactly the whole frames at the start of
the file whose generation is the one after the database's (``frames``, then ``Replay``): a torn
frame ends them (its length or CRC does not hold), so does a frame of an older generation (the
rest of a longer generation written before the last fold), and a frame of a generation the
database does not reach (the fold before it was lost with the power) is never run. A store opened
always folds once, so a generation is never written twice.

Running a frame's statements again gives what they gave the first time: they are the writes in
the order sqlite ran them, with their arguments, on the same database (reads decide nothing at
replay: what they decided is in the arguments), and a statement that failed the first time was
never recorded (sqlite undid it whole).
"""

from __future__ import annotations

import os
import sqlite3
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgpack

HEADER: Final = struct.Struct(">IIQ")
"""A frame's header: the payload's length, its CRC-32 (generation first), the generation."""
_DEFINE, _EXECUTE, _EXECUTE_MANY = 0, 1, 2
_ZEROS: Final = 1024 * 1024
"""Bytes of zeros written at a time when the file is made."""


class RedoError(sqlite3.DatabaseError):
    """The journal holds a frame the database cannot run again (written by another database,
    or damaged in a way its CRC did not catch). A ``sqlite3.Error``: the daemon's command line
    reports it as it reports a store it cannot open (``superpeer: the store ...``), exit 2."""


def _crc(generation: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(generation.to_bytes(8, "big")))


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame read back: its generation and its entries."""

    generation: int
    entries: list


def frames(path: Path) -> list[Frame]:
    """The whole frames at the start of the journal at ``path`` that share the first one's
    generation (none if there is no such file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    found: list[Frame] = []
    offset = 0
    while offset + HEADER.size <= len(data):
        length, crc, generation = HEADER.unpack_from(data, offset)
        start = offset + HEADER.size
        if length == 0 or start + length > len(data):
            break
        if found and generation != found[0].generation:
            break
        payload = data[start : start + length]
        if _crc(generation, payload) != crc:
            break
        found.append(Frame(generation, msgpack.unpackb(payload, raw=False, use_list=True)))
        offset = start + length
    return found


def replay(database: sqlite3.Connection, generation_frames: Iterable[Frame]) -> int:
    """Runs the frames' statements again on ``database`` (in the transaction it has open);
    how many statements ran."""
    ran = 0
    statements: list[str] = []  # numbered across the frames of a generation, as written
    for frame in generation_frames:
        for entry in frame.entries:
            kind = entry[0]
            try:
                if kind == _DEFINE:
                    statements.append(entry[1])
                    continue
                if kind == _EXECUTE:
                    database.execute(statements[entry[1]], entry[2]).fetchall()
                elif kind == _EXECUTE_MANY:
                    database.executemany(statements[entry[1]], entry[2])
                else:
                    raise RedoError(f"unknown entry kind {kind!r} in generation {frame.generation}")
            except (IndexError, TypeError, sqlite3.Error) as error:
                raise RedoError(
                    f"a statement of generation {frame.generation} cannot run again: {error}"
                ) from error
            ran += 1
    return ran


class RedoJournal:
    """The journal's writer: statements recorded as they run, written as one frame per commit.

    Not thread-safe but for ``sync``, which touches only the file descriptor (the store's group
    commit runs it on a worker thread while the trio thread records the next commit's writes)."""

    def __init__(self, path: Path, *, size: int, generation: int) -> None:
        self.path = path
        self.size = size
        """The file's size: the frames of one generation fit in it, or the store folds."""
        self.generation = generation
        """The generation the next frame is written in."""
        self.offset = 0
        """Where the next frame goes."""
        self._statements: dict[str, int] = {}
        self._entries: list[list] = []
        fresh = not path.exists() or path.stat().st_size < size
        self._descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if fresh:
            self._fill()

    def _fill(self) -> None:
        """Writes the file whole with zeros (from where it ends), and makes its size and name
        durable: later frames change no metadata."""
        have = os.fstat(self._descriptor).st_size
        zeros = bytes(min(_ZEROS, self.size))
        while have < self.size:
            have += os.pwrite(self._descriptor, zeros[: self.size - have], have)
        os.fsync(self._descriptor)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    @property
    def pending(self) -> bool:
        """Whether statements were recorded since the last frame."""
        return bool(self._entries)

    def _number(self, sql: str) -> int:
        number = self._statements.get(sql)
        if number is None:
            number = self._statements[sql] = len(self._statements)
            self._entries.append([_DEFINE, sql])
        return number

    def record(self, sql: str, arguments: Sequence[object]) -> None:
        """``sql`` ran once with ``arguments``."""
        self._entries.append([_EXECUTE, self._number(sql), arguments])  # packed as an array

    def record_many(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        """``sql`` ran once per row of ``rows``."""
        self._entries.append([_EXECUTE_MANY, self._number(sql), rows])

    def write(self) -> bool:
        """Writes what was recorded as one frame (not yet durable: ``sync``). False, writing
        nothing, when the frame does not fit in what is left of the file: the store folds
        instead, which makes the same statements durable in the database."""
        payload = msgpack.packb(self._entries, use_bin_type=True)
        end = self.offset + HEADER.size + len(payload)
        if end > self.size:
            return False
        header = HEADER.pack(len(payload), _crc(self.generation, payload), self.generation)
        os.pwrite(self._descriptor, header + payload, self.offset)
        self.offset = end
        self._entries = []
        return True

    def sync(self) -> None:
        """Makes every frame written so far durable."""
        os.fdatasync(self._descriptor)

    def restart(self, generation: int) -> None:
        """Starts generation ``generation`` at the start of the file, forgetting what was
        recorded (the fold before it holds it): called only once that fold is durable."""
        self.generation = generation
        self.offset = 0
        self._statements = {}
        self._entries = []

    def discard(self) -> None:
        """Makes the file zeros again (durably), so no frame in it can be read again: a journal
        found beside a database that does not name its generation (a new one, or one an earlier
        version made) is not that database's."""
        os.ftruncate(self._descriptor, 0)
        self._fill()

    def close(self) -> None:
        os.close(self._descriptor)
