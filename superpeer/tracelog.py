"""The daemon's traffic log: trace records as JSON lines in rotating files.

Files are ``<dir>/<node>.jsonl`` (the current one) and ``<dir>/<node>-<n>.jsonl`` (rotated, ``n``
growing); every file ends in ``.jsonl`` so the Spark jobs read the whole directory. A file is rotated
when it passes ``max_bytes``, and only the newest ``keep`` rotated files are kept. Writes are
buffered and flushed at least every ``flush_seconds`` (the daemon calls ``flush_if_due`` with the
time) and at close, so a clean shutdown loses nothing.

A full disk does not stop the daemon here (``superpeer.diskspace``: the store's writes are what
must not fail): the trace log is suspended, what could not be written and every record until it
resumes is lost (``dropped``), and it resumes at the next ``flush_if_due`` that can write, after
cutting off the line the failed write left half-written (the Spark jobs would read it as a
corrupt record).
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import IO

from superpeer.diskspace import FULL_ERRNOS
from superpeer.trace import TraceRecord

log = logging.getLogger("superpeer")


class TraceLog:
    def __init__(
        self,
        directory: str | Path,
        node: str,
        *,
        max_bytes: int = 64 * 1024 * 1024,
        keep: int = 10,
        flush_seconds: float = 1.0,
    ) -> None:
        if max_bytes < 1024 or keep < 1:
            raise ValueError("trace logs need max_bytes >= 1024 and keep >= 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.node = node
        self.max_bytes = max_bytes
        self.keep = keep
        self.flush_seconds = flush_seconds
        self.records = 0
        self.dropped = 0
        """Records not written because the disk was full (some of them may be among
        ``records``: those a failed flush lost)."""
        self._path = self.directory / f"{node}.jsonl"
        self._size = _cut_partial_line(self._path)
        self._handle: IO[str] | None = self._path.open("a", encoding="utf-8")
        self._flushed_at = 0.0
        self._resuming = False
        """Reopened after a full disk, not flushed since (``trace_resumed`` is logged then)."""

    def write(self, record: TraceRecord) -> None:
        if self._handle is None:
            self.dropped += 1
            return
        line = record.to_json() + "\n"
        try:
            self._handle.write(line)
            self._size += len(line)
            self.records += 1
            if self._size >= self.max_bytes:
                self._rotate()
        except OSError as error:
            self._suspend(error)
            self.dropped += 1

    def flush_if_due(self, now: float) -> None:
        if now - self._flushed_at < self.flush_seconds:
            return
        self._flushed_at = now
        if self._handle is None:
            self._resume()
        elif self._flush() and self._resuming:
            self._resuming = False
            log.warning("event=trace_resumed node=%s dropped=%d", self.node, self.dropped)

    def close(self) -> None:
        if self._handle is not None and self._flush():
            self._handle.close()
            self._handle = None

    def _flush(self) -> bool:
        """Whether what was written is in the file (else the log is suspended)."""
        assert self._handle is not None
        try:
            self._handle.flush()
        except OSError as error:
            self._suspend(error)
            return False
        return True

    def _suspend(self, error: OSError) -> None:
        """A write found the disk full: stop writing until ``_resume`` can (other errors are
        errors)."""
        if error.errno not in FULL_ERRNOS:
            raise error
        assert self._handle is not None
        with contextlib.suppress(OSError):
            self._handle.close()  # what its buffer still held is lost
        self._handle = None
        if not self._resuming:
            log.warning(
                "event=trace_suspended node=%s file=%s error=%r",
                self.node,
                self._path,
                error.strerror,
            )
        self._resuming = False

    def _resume(self) -> None:
        """Write again, from the last whole line of the current file (the next flush finds out
        whether the disk has room: if not, it is suspended again, without a word)."""
        self._size = _cut_partial_line(self._path)
        self._handle = self._path.open("a", encoding="utf-8")
        self._resuming = True

    def _rotate(self) -> None:
        assert self._handle is not None
        self._handle.close()
        pattern = re.compile(re.escape(self.node) + r"-(\d+)\.jsonl")
        numbers = sorted(
            int(match.group(1))
            for path in self.directory.iterdir()
            if (match := pattern.fullmatch(path.name))
        )
        following = (numbers[-1] + 1) if numbers else 1
        self._path.rename(self.directory / f"{self.node}-{following}.jsonl")
        for old in numbers[: max(0, len(numbers) + 1 - self.keep)]:
            (self.directory / f"{self.node}-{old}.jsonl").unlink(missing_ok=True)
        self._handle = self._path.open("a", encoding="utf-8")
        self._size = 0


def _cut_partial_line(path: Path, block: int = 4096) -> int:
    """Cuts off what follows the last newline of ``path`` (a line a failed write or a killed
    process left half-written); its size after that (0 if it does not exist)."""
    if not path.exists():
        return 0
    with path.open("rb+") as raw:
        end = raw.seek(0, 2)
        position = end
        while position > 0:
            start = max(0, position - block)
            raw.seek(start)
            newline = raw.read(position - start).rfind(b"\n")
            if newline >= 0:
                whole = start + newline + 1
                break
            position = start
        else:
            whole = 0
        if whole < end:
            raw.truncate(whole)
    return whole
