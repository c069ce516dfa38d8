"""The stderr log both daemons (``superpeer run``, ``peer run``) write: ``key=value`` text or
JSON lines, with repeated warnings held back. Shared by the two daemons, so it sits below both
(``superpeer`` and ``peer`` import it; it imports neither)."""

from daemonlog._logs import (
    DEFAULT_REPEAT_SECONDS,
    FORMATS,
    MAX_TRACKED_KINDS,
    JsonFormatter,
    RepeatFilter,
    TextFormatter,
    configure,
    fields_of,
)

__all__ = [
    "DEFAULT_REPEAT_SECONDS",
    "FORMATS",
    "MAX_TRACKED_KINDS",
    "JsonFormatter",
    "RepeatFilter",
    "TextFormatter",
    "configure",
    "fields_of",
]
