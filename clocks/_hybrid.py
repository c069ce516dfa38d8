"""The hybrid logical clock (``clocks``, rules 1 to 9)."""

from __future__ import annotations

import math
from typing import Final

TICK: Final = 1e-6
"""The logical step: a reading is at least this much above the previous one (a microsecond,
which a float near today's times in seconds still tells apart)."""


class HybridClock:
    """A super-peer's hybrid time: never below its wall time, strictly increasing, and above
    every reading it absorbed. Sans-IO: the wall time is an argument.

    Readings are seconds since the epoch, like wall times, so that records written before hybrid
    times existed (wall times) compare with them.
    """

    def __init__(self, *, max_lead: float = 86400.0) -> None:
        self.max_lead = max_lead
        """A reading further ahead of this node's wall time is not absorbed (``clocks``, 9)."""
        self._last = 0.0
        self._wall = 0.0
        """The wall time of the last reading or absorption (what ``lead`` is measured from)."""
        self.refused = 0
        """Readings not absorbed because they were too far ahead."""
        self.largest_refused_lead = 0.0

    @property
    def last(self) -> float:
        """The latest reading given or absorbed (what a frame sent now carries)."""
        return self._last

    def now(self, wall: float) -> float:
        """A new reading: for an event of this node (a publication accepted, a subscription
        accepted, ...), after every reading before it."""
        reading = max(wall, self._last + TICK)
        if reading <= self._last:  # the step vanished in rounding, far from today's times
            reading = math.nextafter(self._last, math.inf)
        self._last = reading
        self._wall = wall
        return reading

    def read(self, wall: float) -> float:
        """Hybrid time now, to judge by (is an expiry past?), not to stamp an event with."""
        self._wall = wall
        return max(wall, self._last)

    def observe(self, remote: float, wall: float) -> bool:
        """A reading that came with a message: every later reading of this node exceeds it.
        False (and nothing changes) when it is more than ``max_lead`` ahead of ``wall``."""
        if remote <= self._last:
            return True
        if remote - wall > self.max_lead:
            self.refused += 1
            self.largest_refused_lead = max(self.largest_refused_lead, remote - wall)
            return False
        self._last = remote
        self._wall = wall
        return True

    def restore(self, reading: float) -> None:
        """A reading this node gave before a restart (kept in its store): never go below it,
        whatever the wall clock says now."""
        if math.isfinite(reading):
            self._last = max(self._last, reading)

    def lead(self, wall: float | None = None) -> float:
        """How far hybrid time runs ahead of this node's wall time (0 when it does not): the
        fastest clock's lead over this one, as far as it reached here (``wall``: the wall time
        now; by default the last one this clock was given). A deadline in hybrid time falls
        this much earlier on the wall clock."""
        return max(0.0, self._last - (self._wall if wall is None else wall))
