"""The definitions the Spark job and the pure-Python reference share, without Spark.

``analytics.reference`` computes the same figures in one plain Python process (for the benchmark,
and as a second opinion); it must not import PySpark, so the constants both sides rely on live
here. The meaning of each figure is in ``analytics.figures``. The trace record itself (its fields,
their types, ``EVENTS``) is imported from ``superpeer.trace``, which needs nothing but the standard
library either; ``deploy/spark-submit.sh`` ships it beside this package.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

MAX_TS: Final = 253_402_300_800.0
"""10000-01-01T00:00:00Z in seconds: the first instant Spark's timestamps cannot hold."""

TRACE_SUFFIXES: Final = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
"""The file names read as JSON-lines traces (``.gz`` ones decompressed)."""

BLANK: Final = " \t\n\x0b\f\r"
"""Whitespace as Java's regular expressions define ``\\s``: a line of nothing else is blank."""

ONLINE: Final = "online"
FLUSHED: Final = "flushed"
SUMMARY_PERCENTS: Final = (50, 90, 99)
CDF_PERCENTS: Final = tuple(range(1, 101))

BUCKET_SIZES: Final = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    10800.0,
    21600.0,
    43200.0,
    86400.0,
    604800.0,
    2592000.0,
    31536000.0,
)
"""Candidate time-bucket sizes in seconds: round numbers a reader can take in at a glance."""
MAX_BUCKETS: Final = 60


def bucket_seconds(span: float) -> float:
    """The smallest of ``BUCKET_SIZES`` that covers ``span`` seconds in ``MAX_BUCKETS`` buckets
    (the largest for longer spans): fine enough to show change, coarse enough to stay readable."""
    for size in BUCKET_SIZES:
        if span <= size * MAX_BUCKETS:
            return size
    return BUCKET_SIZES[-1]


def hidden(name: str) -> bool:
    """Whether Spark skips a file or folder of this name: one starting with ``_`` or ``.``."""
    return name.startswith(("_", "."))


def local_files(path: str | Path) -> list[Path]:
    """The files under the local ``path`` (or ``path`` itself, if a file) that are not
    ``hidden`` and not in a ``hidden`` folder below ``path``, in name order."""
    root = Path(path)
    if root.is_file():
        return [root]
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not hidden(d))
        found += [Path(folder, f) for f in sorted(files) if not hidden(f)]
    return found


INCIDENT_EVENTS: Final = ("neighbour_failed", "repair", "drop", "auth_failure")
"""The trace events the report counts over time as faults and repairs: a neighbour found failed
and a topology repair (once the daemons trace them, in ``superpeer.trace.EVENTS``), a message
dropped, a failed identification. An event not in the logs has no rows."""

BROADCAST_PUBLICATIONS: Final = 1_000_000
"""Up to this many publications, the deliveries meet their publications' times in a broadcast
join (each task gets every publication, about 50 bytes each, and no delivery is shuffled); above
it, in a shuffled join, which takes any size."""
