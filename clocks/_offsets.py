"""Clock offsets measured on the wire (``clocks``, rule 9): NTP's on-wire calculation and a
small clock filter, sans-IO."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """One exchange: the other side's clock minus this one's (``offset``) and the round trip
    less the other side's holding time (``delay``), both in seconds; ``at`` is this side's
    wall time when it was taken."""

    offset: float
    delay: float
    at: float


def sample_of(sent: float, received: float, answered: float, back: float) -> Sample | None:
    """NTP's on-wire calculation. ``sent``: this side's wall time when its message left;
    ``received``: the other side's when it arrived; ``answered``: the other side's when its
    answer left; ``back``: this side's when the answer arrived. None for an impossible
    exchange (a negative round trip: a wall clock stepped meanwhile)."""
    delay = (back - sent) - (answered - received)
    if delay < 0:
        return None
    offset = ((received - sent) + (answered - back)) / 2
    return Sample(offset, delay, back)


class OffsetEstimator:
    """The offset of one other clock, from the exchange with the shortest round trip among the
    last ``keep`` (NTP's clock filter: a sample that waited in a queue is the least accurate,
    and its error is at most half its delay)."""

    def __init__(self, keep: int = 8) -> None:
        self._samples: deque[Sample] = deque(maxlen=keep)

    def add(self, sample: Sample | None) -> None:
        if sample is not None:
            self._samples.append(sample)

    @property
    def best(self) -> Sample | None:
        if not self._samples:
            return None
        return min(self._samples, key=lambda s: s.delay)

    @property
    def offset(self) -> float | None:
        """The other clock minus this one, in seconds (None: never measured)."""
        best = self.best
        return None if best is None else best.offset

    @property
    def error(self) -> float | None:
        """The bound on ``offset``'s error: half the round trip of the sample it comes from."""
        best = self.best
        return None if best is None else best.delay / 2

    def beyond(self, bound: float) -> bool:
        """Whether the other clock is surely more than ``bound`` seconds off: even at the near
        end of the error. A node too busy to answer at once measures long round trips, and a
        large error is no evidence of a wrong clock."""
        best = self.best
        return best is not None and abs(best.offset) - best.delay / 2 > bound

    @property
    def samples(self) -> int:
        return len(self._samples)


def correction_of(offsets: list[float]) -> float:
    """How far a node sets the physical part of its hybrid time from its wall clock
    (``HybridClock.discipline``): the median of its own clock (offset 0) and its neighbours'
    measured offsets, the lower one of an even count. One clock far off among its neighbours
    moves neither itself (it follows them) nor them (they outvote it); of two clocks, both
    follow the slower, which never puts a lead into hybrid time (a lagging physical part is
    carried up by the readings absorbed)."""
    return statistics.median_low([0.0, *offsets])
