"""The hybrid logical clock (``clocks``, rules 1 to 9)."""

from __future__ import annotations

import math
from typing import Final

TICK: Final = 1e-6
"""The logical step: a reading is at least this much above the previous one (a microsecond,
which a float near today's times in seconds still tells apart)."""


class HybridClock:
    """A super-peer's hybrid time: never below its wall time, strictly increasing, above every
    reading it absorbed, and running at the rate of its own clock from the latest of them.
    Sans-IO: the wall time is an argument, read from a clock that does not step (the daemon's
    ``SteadyWallClock``, the simulator's per-node clock).

    The classic hybrid logical clock stands still (logical steps only) while a reading it
    absorbed is ahead of its wall clock. Once the fastest clock of the backbone stopped
    speaking (restarted slower, set right, gone), every hybrid clock stood still until the wall
    clocks caught up: ten seconds of real time could pass in two of hybrid time, and a catch-up's
    margin then reached publications made far longer before a subscription than the margin
    says (on daemons, a restart under a clock 200 s slower did this). Here a reading absorbed
    keeps its lead over the wall clock as time passes: intervals of hybrid time are intervals of
    real time (at the local clock's rate), and hybrid times of different super-peers differ by
    at most how long a reading takes to reach them (``L``), whatever the clocks did.

    The physical part of a reading is the wall time *corrected* by what this node measured of
    its neighbours' clocks (``discipline``, ``clocks.correction_of``), and a restarted node
    takes no physical part at all until it has measured them (``unmeasured``): a clock that
    leads the others would otherwise put its lead into every reading it gives, and the lead of
    one side of a partition orders that side's events after the other side's concurrent ones
    (a publication made during a cut judged later than a withdrawal made after it elsewhere).

    Readings are seconds since the epoch, like wall times, so that records written before hybrid
    times existed (wall times) compare with them.
    """

    def __init__(self, *, max_lead: float = 86400.0) -> None:
        self.max_lead = max_lead
        """A reading further ahead of this node's wall time is not absorbed (``clocks``, 9)."""
        self._last = 0.0
        self._since: float | None = None
        """The wall time when ``_last`` was taken (None: not known, after a restore; hybrid time
        then runs from the next event on)."""
        self._wall = 0.0
        """The latest wall time given (what ``lead`` is measured from by default)."""
        self._correction: float | None = 0.0
        """Added to the wall time for the physical part of a reading (``discipline``); None
        while unmeasured after a restart (``unmeasured``)."""
        self.refused = 0
        """Readings not absorbed because they were too far ahead."""
        self.largest_refused_lead = 0.0

    @property
    def last(self) -> float:
        """The latest reading given or absorbed."""
        return self._last

    def carried(self) -> float:
        """What a frame sent now carries: the latest reading, run on to the latest wall time
        this clock was given (a quiet node's frames do not hold the receivers back)."""
        return self._running(self._wall)

    def _running(self, wall: float) -> float:
        """The latest reading, run on by the wall time passed since it was taken (never back:
        a wall time given out of order adds nothing)."""
        if self._since is None or wall <= self._since:
            return self._last
        return self._last + (wall - self._since)

    @property
    def correction(self) -> float | None:
        """What the physical part adds to this node's wall time (None: not measured yet)."""
        return self._correction

    def _physical(self, wall: float) -> float:
        """The physical part of a reading at ``wall``: the corrected wall time; while
        unmeasured, none (readings run on from the latest kept or absorbed)."""
        return -math.inf if self._correction is None else wall + self._correction

    def _corrected(self, wall: float) -> float:
        """``wall`` corrected (as it is while unmeasured)."""
        return wall if self._correction is None else wall + self._correction

    def discipline(self, correction: float) -> None:
        """From now on the physical part is the wall time plus ``correction`` (seconds): what
        this node's neighbours' clocks say of its own (``clocks.correction_of``). Readings
        already given stay given: a correction that sets the clock back leaves hybrid time
        running on from the latest reading, never back."""
        self._correction = correction

    def unmeasured(self, wall: float) -> None:
        """A restart: the wall clock is not trusted until ``discipline`` (it may have been set
        anywhere meanwhile). Hybrid time runs on from the latest reading kept, at the rate of
        the wall clock from ``wall`` (behind the backbone's by how long the node was down,
        until the first reading absorbed brings it up). A clock that kept no reading (a node's
        first start) has nothing else than its wall clock, and stays on it."""
        if self._last <= 0.0:
            return
        self._correction = None
        if self._since is None:
            self._since = wall
        self._wall = wall

    def now(self, wall: float) -> float:
        """A new reading: for an event of this node (a publication accepted, a subscription
        accepted, ...), after every reading before it."""
        before = self._running(wall)
        reading = max(self._physical(wall), before + TICK)
        if reading <= before:  # the step vanished in rounding, far from today's times
            reading = math.nextafter(before, math.inf)
        self._last = reading
        self._since = wall if self._since is None else max(self._since, wall)
        self._wall = wall
        return reading

    def read(self, wall: float) -> float:
        """Hybrid time now, to judge by (is an expiry past?), not to stamp an event with."""
        self._wall = wall
        return max(self._physical(wall), self._running(wall))

    def earlier(self, wall: float) -> float:
        """The earlier of ``wall`` and hybrid time now: where a window of hybrid times that must
        hold at least so many seconds starts counting back from (``clocks``, rule 11)."""
        return min(wall, self.read(wall))

    def observe(self, remote: float, wall: float) -> bool:
        """A reading that came with a message: every later reading of this node exceeds it.
        False (and nothing changes) when it is more than ``max_lead`` ahead of the physical
        part (of ``wall`` while unmeasured)."""
        if remote <= self._running(wall):
            return True
        ahead = remote - self._corrected(wall)
        if ahead > self.max_lead:
            self.refused += 1
            self.largest_refused_lead = max(self.largest_refused_lead, ahead)
            return False
        self._last = remote
        self._since = wall if self._since is None else max(self._since, wall)
        self._wall = wall
        return True

    def restore(self, reading: float) -> None:
        """A reading this node gave before a restart (kept in its store): never go below it,
        whatever the wall clock says now (how much time passed since is not known here: the
        neighbours' readings bring it)."""
        if math.isfinite(reading) and reading > self._running(self._wall):
            self._last = reading
            self._since = None

    def lead(self, wall: float | None = None) -> float:
        """How far hybrid time runs ahead of this node's wall time (negative: behind it, the
        node's own clock leading its neighbours'; ``wall``: the wall time now, by default the
        last one this clock was given). A deadline in hybrid time falls this much earlier on
        the wall clock."""
        wall = self._wall if wall is None else wall
        return max(self._physical(wall), self._running(wall)) - wall


def earliest(*times: float) -> float:
    """The earliest of ``times`` that are set (0: unset, as in ``Moved.missing_since``); 0 if
    none is: where a catch-up starts, from a move statement's times (``Moved.since``,
    ``Moved.missing_since``) and what an access point said since (``Clock.missing_since``)."""
    return min((t for t in times if t), default=0.0)
