"""``--expires``: when a subscription or a publication stops counting (seed 000).

The user gives a duration from now (``90s``, ``30m``, ``2h``, ``7d``; a bare number is seconds)
or an absolute ISO 8601 time (``2026-12-01T12:00:00Z``; without a zone it is UTC). The wire
carries an absolute time (seconds since the epoch) because the message may wait in queues and
the access point applies it later: ``parse_expires`` turns the text into one, from ``now``.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Final

UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


def parse_expires(text: str, now: float) -> float:
    """The absolute expiry ``text`` means at time ``now``; ``ValueError`` saying what is
    accepted."""
    found = _DURATION.fullmatch(text.strip())
    if found is not None:
        return now + float(found[1]) * UNITS[found[2] or "s"]
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--expires {text!r} is neither a duration (90s, 30m, 2h, 7d) nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()
