"""Direct look-ups: where is a peer, asked of the super-peer that last had it, sans-IO (seed 004,
Section 5.1).

A peer asks its access point AP where peer B is (``Locate``) and names the super-peer its
notification of B's publication came from (``Locate.superpeer``: B's access point then). As in
the paper, AP asks that one, not the network: ``LocateDirect`` goes over the cube by bit-fixing
(``superpeer.routes``, at most log2 N hops) and the ``LocateReply`` comes back the same way.
The super-peer reached answers from what it knows of B (``routes.Whereabouts``):

* B is attached there: *known*, online (with its address) or not. That is definite: a peer is
  attached at one access point, and one it left for another holds a forwarding address;
* B moved away: the look-up follows the forwarding address (``LocateDirect.forwards`` counts
  them, at most ``MAX_FORWARDS``) and the super-peer there answers;
* it knows nothing of B (B was never there, or its forwarding address expired): *not known*,
  and AP falls back to the network-wide look-up (``SuperPeerCore.locate``, 2(N - 1) messages).

If the named super-peer left the cube, the route ends at whoever holds its position now, which
answers the same way from what it knows (B may be attached there, adopted when its access
point left; most often it is *not known*).

So a look-up costs 2 log2 N messages at most, plus at most log2 N per forwarding address
followed, where the network-wide one costs 2(N - 1). A direct look-up not answered within
``direct_seconds`` (a super-peer on the way failed with it) falls back too; AP falls back at once
when it knows no position for the named super-peer (it advertises nothing: it left). A look-up
waiting here counts against the asker's ``max_lookups_per_peer`` like a network-wide one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from superpeer.actions import ToPeer
from superpeer.core import TopologyView
from superpeer.routes import HERE, UNKNOWN_POSITION, Hop, Whereabouts, aim, pass_on, step
from wire import encode
from wire import messages as m

MAX_FORWARDS: Final = 16
"""Forwarding addresses lead to where a peer is; a chain longer than this is a bug, and the
look-up falls back to the network."""

Send = Callable[..., None]
"""How the node sends a backbone message (``SuperPeerNode._send``: target, message, now, out,
and the target's address for a super-peer that is not a neighbour)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocatorConfig:
    direct_seconds: float = 3.0
    """A direct look-up not answered within this time falls back to the network-wide one (a
    super-peer on its way failed). Longer than a message takes to cross the cube and back."""


@dataclass
class LocatorStatistics:
    direct: int = 0
    """Look-ups sent to the super-peer the asker named."""
    answered: int = 0
    """... answered by it (or where its forwarding addresses led)."""
    fallbacks: int = 0
    """... that fell back to the network-wide look-up."""
    forwarded: int = 0
    """Look-ups passed on along a forwarding address here."""


Fallback = Callable[[str, m.Locate, float, list], None]
"""How the node asks the network for a peer's look-up (``SuperPeerCore.locate``)."""


@dataclass
class _Waiting:
    peer: str
    request: m.Locate
    due: float


class Locator:
    """One super-peer's direct look-ups, as asker's access point and as the super-peer asked;
    see the module docstring."""

    def __init__(
        self,
        node_id: str,
        access_point: str,
        *,
        send: Send,
        where: Callable[[], tuple[TopologyView, dict[str, int]] | None],
        whereabouts: Callable[[str], Whereabouts],
        fallback: Fallback,
        config: LocatorConfig | None = None,
    ) -> None:
        self.node_id = node_id
        self.access_point = access_point
        """This super-peer's address (what a ``Located`` names)."""
        self._send = send
        self._where = where
        self._whereabouts = whereabouts
        self._fallback = fallback
        self.config = config or LocatorConfig()
        self.statistics = LocatorStatistics()
        self._waiting: dict[str, _Waiting] = {}
        self._number = 0

    def waiting(self, peer: str) -> int:
        """Direct look-ups of ``peer`` waiting for their answer."""
        return sum(1 for w in self._waiting.values() if w.peer == peer)

    def start(self, peer: str, message: m.Locate, now: float, out: list) -> bool:
        """Ask the super-peer ``message`` names; False when there is none to ask (no name, or
        no position known for it): the caller asks the network."""
        where = self._where()
        if not message.superpeer or where is None:
            return False
        view, positions = where
        if message.superpeer == self.node_id:
            first: Hop | str = HERE
        elif message.superpeer in positions:
            first = aim(view, positions, self.node_id, message.superpeer)
        else:
            return False  # it advertises nothing (it left the cube): only the network knows
        self._number += 1
        query = f"{self.node_id}#{self._number}"
        self._waiting[query] = _Waiting(peer, message, now + self.config.direct_seconds)
        self.statistics.direct += 1
        direct = m.LocateDirect(
            query=query,
            origin=self.node_id,
            origin_position=view.root_position,
            target=message.superpeer,
            target_position=positions.get(message.superpeer, UNKNOWN_POSITION),
            public_id=message.public_id,
            hops=0,
        )
        if isinstance(first, Hop):
            self._pass(first, direct, now, out)
        else:
            self._asked(direct, now, out)
        return True

    def route(self, message: m.LocateDirect | m.LocateReply, now: float, out: list) -> None:
        """Handle ``message`` here or pass it one hop on."""
        where = self._where()
        if where is None:
            return
        view, positions = where
        found = step(view, positions, self.node_id, message.target, message.target_position)
        if isinstance(found, Hop):
            self._pass(found, message, now, out)
        elif isinstance(message, m.LocateReply):
            # not here: the asker's access point is out of reach (it left, nobody to answer to)
            if found == HERE:
                self._replied(message, now, out)
        else:
            # here, or the named super-peer is out of the cube and this one holds its position
            # now: either way, the answer is what this one knows of the peer
            self._asked(message, now, out)

    def _asked(self, message: m.LocateDirect, now: float, out: list) -> None:
        """The look-up reached the super-peer it names: answer, or follow the peer."""
        whereabouts = self._whereabouts(message.public_id)
        if whereabouts.forward and message.forwards < MAX_FORWARDS:
            where = self._where()
            assert where is not None
            view, positions = where
            self.statistics.forwarded += 1
            onward = dataclasses.replace(
                message,
                target=whereabouts.forward,
                target_position=positions.get(whereabouts.forward, UNKNOWN_POSITION),
                forwards=message.forwards + 1,
            )
            hop = aim(view, positions, self.node_id, whereabouts.forward)
            if isinstance(hop, Hop):
                self._pass(hop, onward, now, out, address=whereabouts.forward_address)
            return
        self._reply(message, whereabouts, now, out)

    def _reply(
        self, message: m.LocateDirect, whereabouts: Whereabouts, now: float, out: list
    ) -> None:
        reply = m.LocateReply(
            query=message.query,
            target=message.origin,
            target_position=message.origin_position,
            public_id=message.public_id,
            known=whereabouts.attached,
            online=whereabouts.online,
            address=whereabouts.address if whereabouts.online else "",
            superpeer=self.node_id if whereabouts.online else "",
            access_point=self.access_point if whereabouts.online else "",
            hops=0,
        )
        if message.origin == self.node_id:
            self._replied(reply, now, out)
            return
        where = self._where()
        assert where is not None
        view, positions = where
        hop = step(view, positions, self.node_id, reply.target, reply.target_position)
        if isinstance(hop, Hop):
            self._pass(hop, reply, now, out)

    def _replied(self, reply: m.LocateReply, now: float, out: list) -> None:
        waiting = self._waiting.pop(reply.query, None)
        if waiting is None:
            return  # answered already (it fell back after ``direct_seconds``)
        if not reply.known:
            self.statistics.fallbacks += 1
            self._fallback(waiting.peer, waiting.request, now, out)
            return
        self.statistics.answered += 1
        located = m.Located(
            id=waiting.request.id,
            public_id=reply.public_id,
            online=reply.online,
            address=reply.address,
            superpeer=reply.superpeer,
            access_point=reply.access_point,
        )
        out.append(ToPeer(waiting.peer, located, encode(located)))

    def _pass(
        self,
        hop: Hop,
        message: m.LocateDirect | m.LocateReply,
        now: float,
        out: list,
        *,
        address: str = "",
    ) -> None:
        pass_on(self._send, hop, message, now, out, address=address)

    def timer(self, now: float, out: list) -> None:
        """The look-ups that waited ``direct_seconds`` in vain ask the network."""
        for query in sorted(q for q, w in self._waiting.items() if w.due <= now):
            waiting = self._waiting.pop(query)
            self.statistics.fallbacks += 1
            self._fallback(waiting.peer, waiting.request, now, out)

    def next_deadline(self) -> float | None:
        return min((w.due for w in self._waiting.values()), default=None)

    def status(self) -> dict[str, object]:
        """For ``superpeer status``: what direct look-ups cost, and how often they fell back."""
        return {
            "waiting": len(self._waiting),
            "direct_seconds": self.config.direct_seconds,
            "statistics": dataclasses.asdict(self.statistics),
        }
