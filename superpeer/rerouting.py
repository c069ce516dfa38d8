"""Routing the whole poset in slices (``superpeer.core``, "When the cube changes"; issue 34,
"Never hold the loop").

Why. A change of the cube, a neighbour that restarted, the end of a settle window, an origin
that departed or announced new elements: each asks the core to bring the routes of every
subscription it holds (or of every one going toward one origin) to what the new state needs.
Done in one call, that held a super-peer with 20,000 subscriptions of every shape for 7.6 s
when its neighbour restarted, and that neighbour declared it failed
(``python -m bench.slicing --kind restart``).

So such work is a queue of *entries*, each one subscription to route (send where it is missing
for the origins it now goes toward), with two refinements: ``reconcile`` (first withdraw or
narrow what it was sent with that is no longer needed) and ``origin`` (only if it goes toward
that origin). The core takes ``routings_per_step`` entries at a time: the first slice at once,
the others from its timer, due at once, so the runtime runs its other tasks (heartbeats, reads)
in between. Inputs that arrive meanwhile are handled at once, not behind the queue: each entry
is *state-based*, computed against the routes, the view and the advertisements as they are when
it is taken, never against those of the moment it was queued. An entry whose subscription went
meanwhile is skipped; one whose work a later input did already finds nothing missing.

What this costs routing, and why nothing is lost: a route taken later than it became needed
is a route held up on its way, which the rules handle already. Each ``Forward`` sent from the
queue says when the route became needed (``Forward.since``: the time the oldest entry queued
was), so the origins replay to it what was published meanwhile, as for a ``Forward`` a link held
up. Subscriptions routed in different slices are not planned together (``poset.plans``): one
taken in a later slice that covers one of an earlier slice (the order is only a guess) may make
the earlier one's ``Forward`` redundant, never missing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from poset.poset import PosetNode


@dataclass(frozen=True, slots=True)
class Entry:
    node: PosetNode
    reconcile: bool
    """Withdraw or narrow what it was sent with and no longer needs, before routing it."""
    origin: str | None
    """Only if it goes toward this origin (None: whatever it goes toward)."""


class Rerouting:
    """The entries still to take, in the order queued, and since when they are due."""

    def __init__(self) -> None:
        self._entries: deque[Entry] = deque()
        self.since: float | None = None
        """The hybrid time the oldest entry still queued became needed (``Forward.since``)."""
        self.due_at: float | None = None
        """This process's time the oldest entry still queued was queued (the timer's deadline:
        due at once)."""

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def every(
        self, nodes: Iterable[PosetNode], stamp: float, now: float, *, reconcile: bool
    ) -> None:
        """Every subscription held (``nodes``, most general first): the entries queued so far
        are replaced, since these cover them (a node that was to be reconciled still is)."""
        reconciling = {entry.node.id for entry in self._entries if entry.reconcile}
        self._start(stamp, now)
        self._entries = deque(
            Entry(node, reconcile or node.id in reconciling, None) for node in nodes
        )
        if not self._entries:
            self._done()

    def some(
        self,
        nodes: Iterable[PosetNode],
        stamp: float,
        now: float,
        *,
        reconcile: bool = False,
        origin: str | None = None,
    ) -> None:
        """``nodes`` too, after those queued already."""
        self._start(stamp, now)
        self._entries.extend(Entry(node, reconcile, origin) for node in nodes)
        if not self._entries:
            self._done()

    def take(self, count: int) -> list[Entry]:
        """The next ``count`` entries at most (read ``since`` first: once the last is taken,
        the times are forgotten)."""
        entries = self._entries
        taken = [entries.popleft() for _ in range(min(count, len(entries)))]
        if not entries:
            self._done()
        return taken

    def _start(self, stamp: float, now: float) -> None:
        if self.since is None or not self._entries:
            self.since = stamp
            self.due_at = now

    def _done(self) -> None:
        self.since = None
        self.due_at = None
