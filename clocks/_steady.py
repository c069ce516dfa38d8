"""The daemons' clock (``clocks``, rule 11): wall time that never steps while a process runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

MAX_SLEW: Final = 0.0005
"""How fast a steady clock moves toward the wall clock when they differ: 500 parts per million,
NTP's largest slew (a wall clock stepped by 45 s is followed within 25 hours)."""


class SteadyWallClock:
    """Reads like ``time.time`` but advances with ``time.monotonic``: a wall clock stepped while
    the process runs (a bad NTP step, a VM resumed from a snapshot) moves no timer at once (a
    step forward would declare every neighbour silent; one back would hold every timer). It
    slews toward the wall clock at most ``MAX_SLEW``, so a corrected clock is followed slowly, as
    ``ntpd`` slews. ``wall`` and ``monotonic`` are the process's clocks (tests give others)."""

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._base = wall()
        self._at = monotonic()

    def __call__(self) -> float:
        now = self._monotonic()
        elapsed = max(0.0, now - self._at)
        steady = self._base + elapsed
        error = self._wall() - steady
        most = elapsed * MAX_SLEW
        self._base = steady + max(-most, min(most, error))
        self._at = now
        return self._base

    def step(self) -> float:
        """How far the wall clock is from this clock now (what a step left to slew)."""
        return self._wall() - self()
