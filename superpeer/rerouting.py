"""Routing the whole poset in slices (``superpeer.core``, "When the cube changes"; issue 34,
"Never hold the loop").

Why. A change of the cube, a neighbour that restarted, the end of a settle window, an origin
that departed or announced new elements: each asks the core to bring the routes of every
subscription it holds (or of every one going toward one origin) to what the new state needs.
Done in one call, that held a super-peer with 10^5 subscriptions of every shape for 33 s when
its neighbour restarted, and the neighbour declared it failed (``python -m bench.slicing --kind
restart --subscriptions 100000 --workload shapes``; 20,000 took 7.5 s).

So such work is a *pass* over the subscriptions held, most general first, taken
``routings_per_step`` at a time: the first slice at once, the others from the core's timer, due
at once, so the runtime runs its other tasks (heartbeats, reads) in between. What a pass does to
each subscription (``Pass``): route it (send it where it is missing for the origins it now goes
toward), only if it goes toward one of some origins, only if it is one of some subscriptions,
and for some of them reconcile it first (withdraw or narrow what it was sent with and no longer
needs). Inputs that arrive meanwhile are handled at once, not behind the pass: each step is
*state-based*, computed against the routes, the view and the advertisements as they are when it
is taken, never as they were when it was asked for. A subscription that went meanwhile is
skipped; one whose work a later input did already finds nothing missing.

What is asked while a pass runs is merged into the *next* pass (the union of what each asked:
routing a subscription that needed nothing costs a look-up, never a message), which starts from
the poset as it is then, when the running one ends; a next pass that covers all the running one
does replaces it. So however fast origins announce, at most two passes are kept (a pass per
announcement was 10^5 entries each at 10^5 subscriptions), and each ends.

What this costs routing, and why nothing is lost: a route taken later than it became needed is a
route held up on its way, which the rules handle already. Each ``Forward`` a pass sends says
when the route became needed (``Forward.since``: when the oldest request the pass serves was
made), so the origins replay to it what was published meanwhile, as for a ``Forward`` a link held
up. Subscriptions routed in different slices are not planned together (``poset.plans``): one
taken in a later slice that covers one of an earlier slice (the order is only a guess) may make
the earlier one's ``Forward`` redundant, never missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from poset.poset import PosetNode


@dataclass(slots=True)
class Pass:
    """What a pass does to the subscriptions it goes over, and since when it is needed."""

    since: float
    """The hybrid time the oldest request it serves was made (``Forward.since``)."""
    due_at: float
    """This process's time then (the timer's deadline: due at once)."""
    only: set[int] | None = None
    """The node ids it routes (None: every node held)."""
    toward: set[str] | None = None
    """Only nodes going toward one of these origins (None: whatever they go toward)."""
    reconcile_all: bool = False
    reconcile: set[int] = field(default_factory=set)
    """The node ids reconciled before they are routed (all of them if ``reconcile_all``)."""

    def merge(self, other: Pass) -> None:
        """Also what ``other`` asks (the union: more than each, never less)."""
        self.since = min(self.since, other.since)
        self.due_at = min(self.due_at, other.due_at)
        self.only = None if self.only is None or other.only is None else self.only | other.only
        if self.toward is None or other.toward is None:
            self.toward = None
        else:
            self.toward |= other.toward
        self.reconcile_all = self.reconcile_all or other.reconcile_all
        self.reconcile |= other.reconcile

    def covers(self, other: Pass) -> bool:
        """Whether this pass does at least what ``other`` does, on every node."""
        return (
            (self.only is None or (other.only is not None and other.only <= self.only))
            and (self.toward is None or (other.toward is not None and other.toward <= self.toward))
            and (
                self.reconcile_all
                or (not other.reconcile_all and other.reconcile <= self.reconcile)
            )
        )

    def reconciles(self, node: PosetNode) -> bool:
        return self.reconcile_all or node.id in self.reconcile


@dataclass(slots=True)
class Step:
    """One subscription of a slice, with what the pass asks of it."""

    node: PosetNode
    reconcile: bool
    toward: set[str] | None


class Rerouting:
    """The running pass (its nodes and how far it went) and the next."""

    def __init__(self) -> None:
        self._running: Pass | None = None
        self._nodes: list[PosetNode] = []
        self._at = 0
        self._next: Pass | None = None

    def __bool__(self) -> bool:
        return self._running is not None or self._next is not None

    def __len__(self) -> int:
        """Subscriptions still to go over in the running pass (a next one counts one)."""
        left = len(self._nodes) - self._at if self._running is not None else 0
        return left + (self._next is not None)

    @property
    def since(self) -> float | None:
        """When the oldest request still served was made (hybrid time)."""
        times = [p.since for p in (self._running, self._next) if p is not None]
        return min(times, default=None)

    @property
    def due_at(self) -> float | None:
        """When the timer is due (this process's time; None: nothing to do)."""
        times = [p.due_at for p in (self._running, self._next) if p is not None]
        return min(times, default=None)

    def ask(
        self,
        stamp: float,
        now: float,
        *,
        only: Iterable[PosetNode] | None = None,
        toward: str | None = None,
        reconcile: bool = False,
    ) -> None:
        """A pass routing ``only`` those nodes (None: all), only toward ``toward`` (None: any
        origin), reconciling them first if ``reconcile``: merged into the next pass."""
        ids = None if only is None else {node.id for node in only}
        if ids is not None and not ids:
            return
        asked = Pass(
            since=stamp,
            due_at=now,
            only=ids,
            toward=None if toward is None else {toward},
            reconcile_all=reconcile and ids is None,
            reconcile=ids if reconcile and ids is not None else set(),
        )
        if self._next is None:
            self._next = asked
        else:
            self._next.merge(asked)
        if self._running is not None and self._next.covers(self._running):
            self._next.merge(self._running)  # its time: what it had not sent yet is late
            self._running = None

    def take(
        self, count: int, general_first: Callable[[], list[PosetNode]]
    ) -> tuple[float, list[Step]]:
        """The next ``count`` subscriptions at most, with the ``since`` of their ``Forward`` s;
        a pass ends when its last is taken, and the next starts from ``general_first()`` (the
        poset as it is then)."""
        if self._running is None:
            if self._next is None:
                return 0.0, []
            self._running, self._next = self._next, None
            only = self._running.only
            self._nodes = [n for n in general_first() if only is None or n.id in only]
            self._at = 0
        running = self._running
        nodes = self._nodes[self._at : self._at + count]
        self._at += len(nodes)
        since = running.since
        steps = [Step(node, running.reconciles(node), running.toward) for node in nodes]
        if self._at >= len(self._nodes):
            self._running = None
            self._nodes = []
            self._at = 0
        return since, steps
