"""Placement in slices (``superpeer.node``, "Never hold the loop"): a burst of subscriptions is
placed at most ``placements_per_step`` at a time, between the node's other inputs.

Placing a subscription in the poset costs from a fraction of a millisecond to several
milliseconds (issue 34: 269 insertions/s on a mixed workload; the digital library's slower as
the poset grows). Placed as they came, a burst held the runtime's loop for whole inputs: all of
a peer's subscriptions that a leaving neighbour handed over (``Adopt``), a read of a peer's
``Subscribe`` frames (64 KB), 64 of a neighbour's ``Forward`` frames (its acknowledgements'
spacing). With 20,000 digital-library subscriptions handed over, the node sent no heartbeat
for longer than ``failure_seconds`` and its neighbour declared it failed (BENCHMARKS.md, "A
burst of subscriptions and the loop"). So each placement (an ``sp.forward``, a ``peer.subscribe``, each
subscription of an ``sp.adopt``) spends an *allowance* of ``placements_per_step``; once it is
spent, that input and every input after it wait in the backlog, in arrival order, and the
node's ``next_deadline`` is due at once. Each ``timer`` call renews the allowance and handles
waiting inputs until it is spent again. The runtime lets every other task run between two timer
calls (the daemon's ``trio.sleep(0)``; the simulator fires the timer as an event of its own), so
the loop is held for at most one allowance's placements. An ``Adopt`` keeps and places its
subscriptions one piece each, ahead of the inputs that came after it.

What goes ahead of the backlog: the timer (heartbeats out, silence, every deadline) and the signs
of life on links (``superpeer_heard``, and the sender of a waiting frame counts as heard when it
waits, if its incarnation is the one known). Everything else waits behind, which keeps the order
routing depends on (see ``superpeer.node``).
"""

from __future__ import annotations

from collections.abc import Callable

from superpeer._node_base import NodeBase, Output
from wire import messages as m

Waiting = Callable[[float], list[Output]]
"""An input held in the backlog: called with the time it is finally handled."""


def placements(message: object) -> int:
    """How many subscriptions handling ``message`` places in the poset itself (an ``Adopt``
    places its own in slices: ``_place_in_slices``)."""
    return 1 if isinstance(message, m.Forward | m.Subscribe) else 0


class Backlog(NodeBase):
    """The node's inputs held behind a burst of placements."""

    def _waits(self, cost: int, call: Waiting, now: float) -> bool:
        """Whether an input of ``cost`` placements must wait (then it is held); else its
        placements are taken from the allowance and the caller handles it now."""
        if not self._backlog and (cost == 0 or self._allowance > 0):
            self._allowance -= cost
            return False
        self._backlog.append((cost, call))
        self.statistics.waited += 1
        if self._continue_at is None:
            self._continue_at = now
        return True

    def _place_in_slices(
        self, placing: list[tuple[int, Waiting]], now: float, out: list[Output]
    ) -> None:
        """The pieces of one input, with the placements each makes: those the allowance covers
        now, the others first in the backlog, ahead of every input that came after."""
        ahead = 0
        while ahead < len(placing) and self._allowance > 0:
            cost, call = placing[ahead]
            self._allowance -= cost
            out += call(now)
            ahead += 1
        rest = placing[ahead:]
        if rest:
            self._backlog.extendleft(reversed(rest))
            self.statistics.waited += len(rest)
            if self._continue_at is None:
                self._continue_at = now

    def _handle_backlog(self, now: float, out: list[Output], *, everything: bool = False) -> None:
        """A new allowance, and the waiting inputs it covers, oldest first (``everything``:
        all of them, as a node that leaves hands over what it holds)."""
        self._allowance = self.config.placements_per_step
        while self._backlog and (everything or self._allowance > 0):
            cost, call = self._backlog.popleft()
            self._allowance -= cost
            out += call(now)
        self._continue_at = now if self._backlog else None

    def backlog(self) -> int:
        """Inputs waiting behind a burst of placements."""
        return len(self._backlog)
