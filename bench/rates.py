"""Throughput of a piece of work, measured the same way by every benchmark."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes have used so far (Linux ``/proc/PID/stat``)."""
    total = 0
    for pid in pids:
        total += sum(_stat(pid)[11:13])  # utime, stime (fields 14 and 15)
    return total / CLOCK_TICKS


def process_tree(pid: int | None = None) -> list[int]:
    """``pid`` (default: this process) and every process it started, at any depth, that is still
    running (Linux ``/proc``): a Spark driver's JVM, a local cluster's daemons and executors."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(_stat(int(entry.name))[1])
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended while we looked
            children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [os.getpid() if pid is None else pid]
    while pending:
        tree.append(pending.pop())
        pending += children.get(tree[-1], [])
    return tree


def _stat(pid: int) -> list[int | str]:
    """The fields of ``/proc/PID/stat`` after the command name (which may hold spaces), from
    ``state`` (field 3) on; numbers as ints."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return [fields[0], *(int(f) for f in fields[1:])]
