"""Python's cyclic garbage collector in a super-peer process: what it must not walk again.

A full pass (generation 2) of the collector walks every object the process tracks and holds the
trio loop for as long: 11.7 s over 10^6 restored subscriptions, 1.4 s over 10^5 listings placed
while the daemon runs (``BENCHMARKS.md``, ``bench.collector``). A neighbour that hears nothing for ``failure_seconds`` declares
the super-peer failed. Two rules keep such passes short, both by ``gc.freeze()``, which moves
what is tracked now out of every later pass:

* **At start-up** (``freeze_state``), once a member: the restored state, above all. The
  youngest pass is made rarer then too (``young_objects``).
* **After a long full pass** (``FullPassFreezer``): the objects alive when a full pass has just
  finished are not garbage (it would have freed them), so they are frozen too, from the trio loop
  soon after (``keep_frozen_after_full_passes``), if that pass took ``long_full_pass_seconds`` or
  more. A later full pass then walks only what was made since the freeze, so full passes stay
  near ``long_full_pass_seconds`` however much the super-peer gathers (Python starts one when its
  oldest generation has grown by a quarter since the last; the one that first takes that long
  walks a little more).

What it costs. Frozen objects are freed by reference counting as before; only cycles among them
stay for good once they are garbage:

* cyclic garbage made between the end of the pass and the freeze (within ``CHECK_SECONDS``);
* objects in cycles that are alive at a freeze and become garbage later. The poset's nodes form
  none once removed (``tests/poset/test_bulk.py::
  test_removed_nodes_are_freed_by_reference_counting_alone``). Its families do
  (``poset.families.Family``: two families met in a covering test hold each other in ``over``):
  a frozen family stays once its last subscription is removed, and is used again if that shape
  comes back, so what stays is bounded by the shapes ever seen, not by the subscriptions (3,000
  listings subscriptions, all removed, left 344 objects: 115 families and their ``over``).
  What else lives in cycles for a while (a connection's or a task's objects, an exception's
  traceback) stays if a freeze catches it. That is why a pass shorter than
  ``long_full_pass_seconds`` freezes nothing: freezes come at most once per that much new
  long-lived state (some 10^5 objects), not after each of the frequent short passes that
  follow a freeze.

The process entry point (``superpeer.cli``) runs these (``run``), not the daemon, since it owns the
process: a daemon run inside another program, as in the tests, leaves that program's collector
alone."""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass
from typing import Any

import trio

log = logging.getLogger("superpeer")

CHECK_SECONDS = 1.0
"""How often the trio loop looks whether a long full pass has finished since it last looked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectorSettings:
    """The two thresholds, ``[collector]`` in the super-peer's configuration
    (``superpeer.config``), handed to ``run`` by the process entry point."""

    young_objects: int = 10_000
    """Objects the process may gain before the collector's youngest pass, from start-up on
    (Python's default is 700). Under a stream of notifications those passes found nothing to free
    (each notification's objects go by reference counting) and took 2% of the daemon's CPU (0.17 s
    of 8.5, 290 young passes and 3 full ones in 10 s of one subscriber's stream, ``BENCHMARKS.md``);
    at 10,000, 0.03 s. An object a notification leaves behind for a while (its mail waiting, the
    version kept) no longer goes through every older generation's pass on its way."""

    long_full_pass_seconds: float = 0.05
    """A full pass this long or longer (CPU seconds of the loop's thread, so that how often a
    freeze comes does not depend on what else runs on the machine) is followed by a freeze of
    what survived it. Less than ``failure_seconds`` (the configuration checks it): full passes
    stay near this long, and one that lasts ``failure_seconds`` gets the super-peer declared
    failed."""


def freeze_state() -> int:
    """Freeze what the process tracks now; logged as ``event=state_frozen`` (with the youngest
    pass's threshold, ``young_objects`` once ``run`` set it). Returns the number of objects
    frozen in all (``gc.get_freeze_count``).

    A full collection follows, over nothing but what the freeze left (next to nothing): Python
    starts its next full pass when what survived into the oldest generation since the last one
    reaches a quarter of what that one kept, and without it "what that one kept" would still
    count the frozen objects (after a restore of 10^6 subscriptions, the next pass would wait for
    some 6 million new objects and then walk them all at once)."""
    gc.freeze()
    gc.collect()
    frozen = gc.get_freeze_count()
    log.info("event=state_frozen objects=%d young_objects=%d", frozen, gc.get_threshold()[0])
    return frozen


class FullPassFreezer:
    """Notes, from a ``gc.callbacks`` hook, that a full pass of ``long_pass_seconds`` or more has
    just finished, and freezes on ``freeze_if_due``, called from the program's own code.

    Not in the hook itself: the hook runs wherever an allocation starts a collection, in the
    middle of any code (the trio loop's included), and only sets a flag."""

    def __init__(
        self, *, long_pass_seconds: float = CollectorSettings().long_full_pass_seconds
    ) -> None:
        self.long_pass_seconds = long_pass_seconds
        self.freezes = 0
        self._started: float | None = None
        self._due = False

    def __enter__(self) -> FullPassFreezer:
        gc.callbacks.append(self._on_collection)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.thread_time()
        elif self._started is not None:
            if time.thread_time() - self._started >= self.long_pass_seconds:
                self._due = True
            self._started = None

    def freeze_if_due(self) -> int | None:
        """Freeze if a long full pass has finished since the last freeze; the number of objects
        frozen in all, or None if none was due."""
        if not self._due:
            return None
        frozen = freeze_state()
        self._due = False  # its own full pass, over next to nothing, is not one to freeze after
        self.freezes += 1
        return frozen


async def keep_frozen_after_full_passes(
    *,
    check_seconds: float = CHECK_SECONDS,
    long_pass_seconds: float = CollectorSettings().long_full_pass_seconds,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until cancelled: every ``check_seconds``, freeze what survived the last long full
    pass, if one finished since. Started once the hook is in place."""
    with FullPassFreezer(long_pass_seconds=long_pass_seconds) as freezer:
        task_status.started()
        while True:
            await trio.sleep(check_seconds)
            freezer.freeze_if_due()


async def run(
    settings: CollectorSettings,
    *,
    check_seconds: float = CHECK_SECONDS,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Both rules with ``settings``, until cancelled: the start-up ones at once (the youngest
    pass after ``young_objects`` new objects, then ``freeze_state``), started once they are
    done, then ``keep_frozen_after_full_passes``."""
    gc.set_threshold(settings.young_objects, *gc.get_threshold()[1:])
    freeze_state()
    await keep_frozen_after_full_passes(
        check_seconds=check_seconds,
        long_pass_seconds=settings.long_full_pass_seconds,
        task_status=task_status,
    )
