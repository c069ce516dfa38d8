"""Throughput of a piece of work, measured the same way by every benchmark."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


def per_second(items: Sequence, work: Callable[[object], object], budget: float) -> float:
    """Items/s for ``work`` over ``items``, stopping early after ``budget`` seconds (so that a
    slow candidate does not hold the whole run up)."""
    done = 0
    start = time.perf_counter()
    for item in items:
        work(item)
        done += 1
        if time.perf_counter() - start > budget:
            break
    return done / (time.perf_counter() - start)
