"""The daemon's traffic log: trace records as JSON lines in rotating files.

Files are ``<dir>/<node>.jsonl`` (the current one) and ``<dir>/<node>-<n>.jsonl`` (rotated, ``n``
growing); every file ends in ``.jsonl`` so the Spark jobs read the whole directory. A file is rotated
when it passes ``max_bytes``, and only the newest ``keep`` rotated files are kept. Writes are
buffered and flushed at least every ``flush_seconds`` (the daemon calls ``flush_if_due`` with the
time) and at close, so a clean shutdown loses nothing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO

from superpeer.trace import TraceRecord


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
        self._path = self.directory / f"{node}.jsonl"
        self._handle: IO[str] = self._path.open("a", encoding="utf-8")
        self._size = self._path.stat().st_size
        self._flushed_at = 0.0

    def write(self, record: TraceRecord) -> None:
        line = record.to_json() + "\n"
        self._handle.write(line)
        self._size += len(line)
        self.records += 1
        if self._size >= self.max_bytes:
            self._rotate()

    def flush_if_due(self, now: float) -> None:
        if now - self._flushed_at >= self.flush_seconds:
            self._handle.flush()
            self._flushed_at = now

    def close(self) -> None:
        self._handle.flush()
        self._handle.close()

    def _rotate(self) -> None:
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
