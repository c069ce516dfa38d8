"""The daemons' stderr log: stdlib ``logging`` with a structured formatter, and repeats held back.

Both daemons log ``event=NAME key=value ...`` lines. Under systemd, stderr goes to the journal,
which rotates it, so the daemons write to stderr only (no log files of their own to rotate). Two
formats: ``text`` (``ts=... level=... logger=... event=...``, what the line always was) and
``json`` (one object per line: ``ts``, ``level``, ``logger``, ``message`` and every ``key=value``
of the message as its own field), for log shippers.

A misbehaving remote can make a daemon log the same warning thousands of times a second (one
line per bad frame). ``RepeatFilter`` lets the first line of each kind through and then at most
one per ``repeat_seconds``; the line that goes through says how many were held back since the
previous one (``repeated=N``), and ``suppressed`` counts them all (a metric). "The same" means
the same logger, level and message template, whatever the arguments, so a flood from many
addresses is still one kind.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

FORMATS: Final = ("text", "json")
DEFAULT_REPEAT_SECONDS: Final = 10.0
MAX_TRACKED_KINDS: Final = 1024
"""Kinds of line remembered by the repeat filter; the least recently seen is forgotten first."""

_PAIR = re.compile(r"""(\w+)=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\S+)""")


def fields_of(message: str) -> dict[str, str]:
    """The ``key=value`` pairs of a rendered message (quoted values unquoted)."""
    found = {}
    for key, raw in _PAIR.findall(message):
        quoted = len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\""
        found[key] = raw[1:-1] if quoted else raw
    return found


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        repeated = getattr(record, "repeated", 0)
        return f"{line} repeated={repeated}" if repeated else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, object] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key, value in fields_of(message).items():
            entry.setdefault(key, value)
        repeated = getattr(record, "repeated", 0)
        if repeated:
            entry["repeated"] = repeated
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


class RepeatFilter(logging.Filter):
    """Warnings and errors of one kind: the first, then at most one per ``repeat_seconds``."""

    def __init__(
        self,
        repeat_seconds: float = DEFAULT_REPEAT_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_kinds: int = MAX_TRACKED_KINDS,
    ) -> None:
        super().__init__()
        if repeat_seconds <= 0 or max_kinds < 1:
            raise ValueError("repeat_seconds must be positive and max_kinds at least 1")
        self.repeat_seconds = repeat_seconds
        self.max_kinds = max_kinds
        self.suppressed = 0
        self._clock = clock
        self._kinds: OrderedDict[tuple[str, int, object], tuple[float, int]] = OrderedDict()
        """Per kind: when its last line went out, and how many were held back since."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        kind = (record.name, record.levelno, record.msg)
        now = self._clock()
        last = self._kinds.get(kind)
        if last is not None and now - last[0] < self.repeat_seconds:
            self._kinds[kind] = (last[0], last[1] + 1)
            self.suppressed += 1
            return False
        record.repeated = last[1] if last is not None else 0
        self._kinds[kind] = (now, 0)
        self._kinds.move_to_end(kind)
        while len(self._kinds) > self.max_kinds:
            self._kinds.popitem(last=False)
        return True


def configure(
    *, level: str = "INFO", form: str = "text", repeat_seconds: float = DEFAULT_REPEAT_SECONDS
) -> RepeatFilter:
    """Send the process's log to stderr in ``form``, with repeats held back; the filter (its
    ``suppressed`` count is a metric). A bad level or format is a ``ValueError`` naming it."""
    if form not in FORMATS:
        raise ValueError(f"unknown log format {form!r} (one of {', '.join(FORMATS)})")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")  # noqa: TRY004 (a bad value, not type)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else TextFormatter())
    repeats = RepeatFilter(repeat_seconds)
    handler.addFilter(repeats)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    return repeats
