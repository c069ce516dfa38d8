"""The super-peer as a sans-IO state machine: events in, actions out (design paper Section 4).

Inputs are method calls: a local peer attaches, detaches (temporarily) or leaves (for good); a local
peer's request (``wire.messages`` Advertise / Subscribe / Unsubscribe / Publish / Leave); a message
from a neighbour super-peer; a change of the hypercube around this node. Each returns a list of
``superpeer.actions`` (messages to neighbours and peers, already encoded; offline-store operations)
and ``TraceRecord`` s. Time (``now``) is an argument; the core reads no clock, opens no socket,
keeps no global state.

Routing (ARCHITECTURE.md, "Routing that never loses a notification"):

1. **Advertisements** spread down the spanning tree of their *origin* super-peer. Every super-peer
   indexes, per origin, the elements that origin stands for (``indices.AdvertisementIndex``); the
   origin itself keeps per-peer reference counts and broadcasts an element when its first peer
   advertises it and its withdrawal when its last peer stops.
2. **Subscriptions** travel toward every origin whose elements cover them, one hop at a time to
   ``parent_O(Y)`` (the neighbour through which O's advertisements arrived). The subscriber's access
   point decides the origins; every hop carries them (``Forward.toward``) and a super-peer relays a
   subscription only toward the origins it was sent toward. So for each origin the subscription
   follows the one path up that origin's tree, and the subscriptions that reach a super-peer from
   different directions never keep each other alive after their subscribers are gone (routing
   toward every covering origin from every hop, as a literal reading would, builds cycles). A
   subscription goes to a neighbour for an origin only if no subscription covering it was already
   sent there for that origin (the poset's per destination and per origin bookkeeping).
3. **Notifications** go down the origin's tree: Y passes a notification to a neighbour M only if
   Y is M's parent in that tree and a subscription that M sent toward that origin matches; every
   local peer with a matching subscription gets it once, with the ids of its matching
   subscriptions.
4. **Triggering**: when new elements of origin O arrive, the local subscriptions O now covers are
   sent toward O unless something covering them already went that way for O. (Subscriptions relayed
   for other super-peers need nothing: their own access points trigger when O's elements reach
   them, which is after they reached every super-peer between them and O.)
5. **Unsubscription** (SIENA): the subscriptions a withdrawn one was covering are sent where they
   are needed, for the origins they need, before the withdrawal itself.

By induction along the path from a subscriber's access point to a publisher's, a subscription that
covers every matching one is present at each hop before the publication, and the notification comes
back down the same hops, once per hop: nothing matched and covered is lost, nothing is duplicated.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

import qel
import wire
from indices.routing import AdvertisementIndex
from poset.poset import PosetNode, Removed, SubscriptionPoset
from qel.advertisements import Element, element_allows_triple, summarise
from superpeer.actions import (
    Action,
    DiscardOffline,
    FlushOffline,
    ToNeighbour,
    ToOffline,
    ToPeer,
)
from superpeer.trace import TraceRecord
from wire import messages as m

Output = Action | TraceRecord

_PEER = "p:"
_NEIGHBOUR = "n:"


class TopologyView(Protocol):
    """What a super-peer knows of the hypercube: its own root position and, for the spanning tree
    rooted at any position, its parent and children among its neighbours (``hypercup``). The
    core asks for them on every message it routes, so a view should answer from memory
    (``hypercup.LocalView`` computes each tree once)."""

    @property
    def root_position(self) -> int: ...

    def neighbours(self) -> frozenset[str]: ...

    def parent(self, root_position: int) -> str | None: ...

    def children(self, root_position: int) -> tuple[str, ...]: ...


@dataclass
class PeerState:
    attached: bool = True
    address: str = ""
    """Where the peer connects from, as seen here: what a ``Locate`` for it answers."""
    lookups: int = 0
    """Its ``Locate`` requests still waiting for the backbone's answer."""


@dataclass
class _Lookup:
    """A ``LocateQuery`` this node passed down its tree (or started, ``parent`` None), waiting
    for the answers of ``waiting``."""

    public_id: str
    parent: str | None
    waiting: set[str]
    peer: str | None = None
    asker: PeerState | None = None
    """The asking peer's record: an answer is not counted against a later record of the same
    name (the peer left and joined again meanwhile)."""
    request: str = ""
    answered: bool = False
    """Found below and answered already; kept until the other children have answered too."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreConfig:
    summarise_values_above: int | None = None
    """Summarise an origin's advertised fixed values of one property when they exceed this count
    (ranges for numbers and dates, a Bloom filter otherwise) before broadcasting them; None keeps
    every value (exact routing, more index memory elsewhere)."""
    tracing: bool = True
    """Whether to produce trace records (the simulator turns them off for large runs)."""
    max_lookups_per_peer: int = 16
    """``Locate`` requests one peer may have waiting at once (each costs 2(N - 1) backbone
    messages); more are refused."""


@dataclass
class CoreStatistics:
    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    bytes_sent: Counter[str] = field(default_factory=Counter)
    delivered: int = 0
    stored_offline: int = 0
    refused: int = 0
    dropped: int = 0


class SuperPeerCore:
    """One super-peer's protocol state; see the module docstring for the routing rules."""

    def __init__(
        self, node_id: str, address: str, view: TopologyView, config: CoreConfig | None = None
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.view = view
        self.config = config or CoreConfig()
        self.ads = AdvertisementIndex()
        self.poset = SubscriptionPoset()
        self.peers: dict[str, PeerState] = {}
        self.origin_positions: dict[str, int] = {}
        self.statistics = CoreStatistics()
        self._announced: frozenset[Element] = frozenset()
        self._toward: dict[tuple[str, str], dict[str, int]] = {}
        self._message_number = 0
        self._lookups: dict[tuple[str, str], _Lookup] = {}

    # -- local peers --------------------------------------------------------------------------
    def attach(self, peer: str, now: float, address: str = "") -> list[Output]:
        """A peer connects (first time or again, from ``address``): what was kept while it was
        away is delivered."""
        state = self.peers.get(peer)
        if state is None:
            self.peers[peer] = PeerState(address=address)
            return []
        state.attached = True
        state.address = address
        return [FlushOffline(peer)]

    def detach(self, peer: str, now: float) -> list[Output]:
        """The peer goes offline for a while: it keeps its subscriptions and advertisement, and its
        notifications go to the offline store."""
        state = self._peer(peer)
        state.attached = False
        return []

    def leave(self, peer: str, now: float) -> list[Output]:
        """The peer leaves for good: its subscriptions are withdrawn (SIENA unsubscription) and the
        elements no other local peer advertises are withdrawn network-wide."""
        self._peer(peer)
        out: list[Output] = []
        for sid in self.poset.ids_of(_PEER + peer):
            self._after_removal(self.poset.remove(_PEER + peer, sid, self._wants), now, out)
        self.ads.remove_holder(self.node_id, peer)
        self._announce(now, out)
        del self.peers[peer]
        out.append(DiscardOffline(peer))
        return out

    def peer_message(
        self, peer: str, message: object, size: int, now: float, message_id: str | None = None
    ) -> list[Output]:
        """A request from a local peer (a ``wire.messages`` peer request)."""
        out: list[Output] = []
        self._trace(out, now, "receive", message, peer=peer, size=size, msg=message_id)
        state = self.peers.get(peer)
        if state is None or not state.attached:
            self.statistics.dropped += 1
            self._trace(out, now, "drop", message, peer=peer)
            return out
        self.statistics.received[type(message).KIND] += 1  # type: ignore[attr-defined]
        if isinstance(message, m.Advertise):
            self._advertise(peer, message.advertisement, now, out)
        elif isinstance(message, m.Subscribe):
            self._subscribe(peer, message, now, out)
        elif isinstance(message, m.Unsubscribe):
            self._unsubscribe(peer, message, now, out)
        elif isinstance(message, m.Publish):
            self._publish(peer, message.publication, now, out)
        elif isinstance(message, m.Leave):
            out += self.leave(peer, now)
        elif isinstance(message, m.Locate):
            self._locate(peer, message, now, out)
        else:
            self._refuse(peer, type(message).__name__, "not a request a peer can make", now, out)
        return out

    def _advertise(
        self, peer: str, advertisement: qel.Advertisement, now: float, out: list[Output]
    ) -> None:
        old = self.ads.elements_of(self.node_id, peer)
        new = advertisement.elements
        self.ads.remove(self.node_id, peer, old - new)
        self.ads.add(self.node_id, peer, new - old)
        self._announce(now, out)
        self._reply(peer, m.Ack(request="advertise"), now, out)

    def _subscribe(self, peer: str, message: m.Subscribe, now: float, out: list[Output]) -> None:
        existing = self.poset.node_of(_PEER + peer, message.id)
        if existing is not None and existing.subscription.key != message.subscription.key:
            self._refuse(
                peer,
                f"subscribe {message.id}",
                f"the id {message.id!r} is already used for another subscription; unsubscribe it first",
                now,
                out,
            )
            return
        inserted = self.poset.insert(message.subscription, _PEER + peer, message.id)
        self._route(inserted.node, now, out)
        self._reply(peer, m.Ack(request=f"subscribe {message.id}"), now, out)

    def _unsubscribe(
        self, peer: str, message: m.Unsubscribe, now: float, out: list[Output]
    ) -> None:
        if self.poset.node_of(_PEER + peer, message.id) is None:
            self._refuse(
                peer,
                f"unsubscribe {message.id}",
                f"no subscription with id {message.id!r}",
                now,
                out,
            )
            return
        removed = self.poset.remove(_PEER + peer, message.id, self._wants)
        self._after_removal(removed, now, out)
        self._reply(peer, m.Ack(request=f"unsubscribe {message.id}"), now, out)

    def _publish(
        self, peer: str, publication: qel.Publication, now: float, out: list[Output]
    ) -> None:
        request = f"publish {publication.id}"
        elements = self.ads.elements_of(self.node_id, peer)
        outside = [
            (p, o)
            for p, o in sorted(publication.statements, key=repr)
            if not any(element_allows_triple(e, p, o) for e in elements)
        ]
        if outside:
            shown = "; ".join(f"<{p}> {_term_text(o)}" for p, o in outside[:3])
            more = f" and {len(outside) - 3} more" if len(outside) > 3 else ""
            self._refuse(
                peer,
                request,
                "the publication is outside your advertisement, so the network cannot promise "
                f"its delivery: {shown}{more}",
                now,
                out,
            )
            return
        if publication.publisher != peer:
            publication = qel.Publication(
                publication.subject, publication.statements, peer, publication.id
            )
        notification = m.Notification(
            origin=self.node_id,
            origin_position=self.view.root_position,
            publication=publication,
            owner=peer,
            access_point=self.address,
            hops=0,
            published_at=now,
        )
        self._trace(out, now, "publish", notification, peer=peer, origin=self.node_id)
        self._reply(peer, m.Ack(request=request), now, out)
        self._dispatch(notification, now, out)

    # -- neighbour super-peers ----------------------------------------------------------------------
    def neighbour_message(
        self, neighbour: str, message: object, size: int, now: float, message_id: str | None = None
    ) -> list[Output]:
        """A message from a neighbour super-peer (a ``wire.messages`` backbone message)."""
        out: list[Output] = []
        self._trace(out, now, "receive", message, neighbour=neighbour, size=size, msg=message_id)
        if neighbour not in self.view.neighbours():
            self.statistics.dropped += 1
            self._trace(out, now, "drop", message, neighbour=neighbour)
            return out
        self.statistics.received[type(message).KIND] += 1  # type: ignore[attr-defined]
        if isinstance(message, m.Elements):
            self._elements(neighbour, message, now, out)
        elif isinstance(message, m.Forward):
            source = _NEIGHBOUR + neighbour
            existing = self.poset.node_of(source, message.id)
            if existing is not None and existing.subscription.key != message.subscription.key:
                self.statistics.dropped += 1
                self._trace(out, now, "drop", message, neighbour=neighbour)
                return out
            inserted = self.poset.insert(message.subscription, source, message.id)
            toward = self._toward.setdefault((source, message.id), {})
            for origin, position in message.toward:
                toward[origin] = position
                self.origin_positions.setdefault(origin, position)
            self._route(inserted.node, now, out)
        elif isinstance(message, m.Retract):
            source = _NEIGHBOUR + neighbour
            if self.poset.node_of(source, message.id) is None:
                self.statistics.dropped += 1
                self._trace(out, now, "drop", message, neighbour=neighbour)
            else:
                self._toward.pop((source, message.id), None)
                removed = self.poset.remove(source, message.id, self._wants)
                self._after_removal(removed, now, out)
        elif isinstance(message, m.Notification):
            if self.view.parent(message.origin_position) != neighbour:
                self.statistics.dropped += 1
                self._trace(out, now, "drop", message, neighbour=neighbour, origin=message.origin)
            else:
                self._dispatch(message, now, out)
        elif isinstance(message, m.LocateQuery):
            self._locate_query(neighbour, message, now, out)
        elif isinstance(message, m.LocateAnswer):
            self._locate_answer(neighbour, message, now, out)
        else:
            self.statistics.dropped += 1
            self._trace(out, now, "drop", message, neighbour=neighbour)
        return out

    def _elements(self, neighbour: str, message: m.Elements, now: float, out: list[Output]) -> None:
        origin = message.origin
        if origin == self.node_id:
            return
        moved = self.origin_positions.get(origin) != message.origin_position
        self.origin_positions[origin] = message.origin_position
        fresh = self.ads.add(origin, origin, message.added)
        gone = self.ads.remove(origin, origin, message.withdrawn)
        if fresh or gone or moved:
            relay = m.Elements(
                origin=origin,
                origin_position=message.origin_position,
                added=message.added if moved else tuple(fresh),
                withdrawn=tuple(gone),
            )
            for child in self.view.children(message.origin_position):
                self._send(child, relay, now, out, origin=origin)
        if fresh or moved:
            self._trigger(origin, now, out)

    def topology_changed(self, view: TopologyView, now: float) -> list[Output]:
        """The hypercube around this node changed: forget what went through departed neighbours,
        announce this node's elements again if its position moved, and route every subscription
        again (what was already sent stays; the rest goes to the new next hops)."""
        out: list[Output] = []
        old_neighbours = self.view.neighbours()
        moved = view.root_position != self.view.root_position
        self.view = view
        for departed in sorted(old_neighbours - view.neighbours()):
            self._lookups_lost(departed, now, out)
            for sid in self.poset.ids_of(_NEIGHBOUR + departed):
                self._toward.pop((_NEIGHBOUR + departed, sid), None)
                removed = self.poset.remove(_NEIGHBOUR + departed, sid, self._wants)
                self._after_removal(removed, now, out)
            for node in self.poset:
                self.poset.unmark_sent(node, departed)
            for key in [k for k in self._toward if k[0] == _NEIGHBOUR + departed]:
                del self._toward[key]
        if moved:
            self._announced = frozenset()
        self._announce(now, out)
        for node in self.poset:
            self._route(node, now, out)
        return out

    def retire(self, now: float) -> list[Output]:
        """This super-peer is leaving the backbone: withdraw, network-wide, every element it
        announced, so no subscription keeps travelling toward an origin that is gone."""
        out: list[Output] = []
        if self._announced:
            message = m.Elements(
                origin=self.node_id,
                origin_position=self.view.root_position,
                added=(),
                withdrawn=tuple(sorted(self._announced, key=repr)),
            )
            self._announced = frozenset()
            for child in self.view.children(self.view.root_position):
                self._send(child, message, now, out, origin=self.node_id)
        return out

    # -- locating peers -----------------------------------------------------------------------
    # A look-up goes down the asker's spanning tree (N - 1 messages) and the answers come back up
    # it, each node answering its parent once the peer is found below it or every child has said
    # no (N - 1 more): a definite "not online" without timers. A look-up whose answers can no
    # longer arrive (a neighbour on the way departed) ends as "not online" at once.

    def _locate(self, peer: str, message: m.Locate, now: float, out: list[Output]) -> None:
        state = self.peers[peer]
        found = self._online_here(message.public_id)
        children = self.view.children(self.view.root_position)
        if found is not None or not children:
            where = found or _NOWHERE
            self._reply(
                peer, m.Located(id=message.id, public_id=message.public_id, **where), now, out
            )
            return
        if state.lookups >= self.config.max_lookups_per_peer:
            self._refuse(
                peer,
                f"locate {message.id}",
                f"{state.lookups} look-ups are already waiting "
                f"(max_lookups_per_peer = {self.config.max_lookups_per_peer})",
                now,
                out,
            )
            return
        state.lookups += 1
        query = self._next_id()
        self._lookups[(self.node_id, query)] = _Lookup(
            message.public_id, None, set(children), peer, state, message.id
        )
        relay = m.LocateQuery(
            query=query,
            origin=self.node_id,
            origin_position=self.view.root_position,
            public_id=message.public_id,
        )
        for child in children:
            self._send(child, relay, now, out, peer=peer, origin=self.node_id)

    def _locate_query(
        self, neighbour: str, message: m.LocateQuery, now: float, out: list[Output]
    ) -> None:
        key = (message.origin, message.query)
        if self.view.parent(message.origin_position) != neighbour or key in self._lookups:
            self.statistics.dropped += 1
            self._trace(out, now, "drop", message, neighbour=neighbour, origin=message.origin)
            return
        found = self._online_here(message.public_id)
        children = self.view.children(message.origin_position)
        if found is not None or not children:
            answer = m.LocateAnswer(
                query=message.query,
                origin=message.origin,
                public_id=message.public_id,
                **(found or _NOWHERE),
            )
            self._send(neighbour, answer, now, out, origin=message.origin)
            return
        self._lookups[key] = _Lookup(message.public_id, neighbour, set(children))
        for child in children:
            self._send(child, message, now, out, origin=message.origin)

    def _locate_answer(
        self, neighbour: str, message: m.LocateAnswer, now: float, out: list[Output]
    ) -> None:
        key = (message.origin, message.query)
        lookup = self._lookups.get(key)
        if lookup is None or neighbour not in lookup.waiting:
            self.statistics.dropped += 1
            self._trace(out, now, "drop", message, neighbour=neighbour, origin=message.origin)
            return
        lookup.waiting.discard(neighbour)
        if not lookup.answered and (message.online or not lookup.waiting):
            self._answer_lookup(key, lookup, message if message.online else None, now, out)
        if not lookup.waiting:
            del self._lookups[key]

    def _answer_lookup(
        self,
        key: tuple[str, str],
        lookup: _Lookup,
        found: m.LocateAnswer | None,
        now: float,
        out: list[Output],
    ) -> None:
        lookup.answered = True
        origin, query = key
        if lookup.parent is not None:
            answer = found or m.LocateAnswer(
                query=query, origin=origin, public_id=lookup.public_id, **_NOWHERE
            )
            if lookup.parent in self.view.neighbours():
                self._send(lookup.parent, answer, now, out, origin=origin)
            return
        assert lookup.peer is not None and lookup.asker is not None
        state = lookup.asker
        state.lookups -= 1
        if self.peers.get(lookup.peer) is not state or not state.attached:
            return  # an answer is only worth something now: nothing is kept for later
        # (a peer that detached and came back meanwhile gets it on its new connection: peers
        # match answers by their random look-up ids and ignore those they no longer wait for)
        where = _NOWHERE if found is None else _fields_of_where(found)
        located = m.Located(id=lookup.request, public_id=lookup.public_id, **where)
        self._reply(lookup.peer, located, now, out)

    def _lookups_lost(self, departed: str, now: float, out: list[Output]) -> None:
        for key, lookup in list(self._lookups.items()):
            if lookup.parent == departed:
                del self._lookups[key]  # nobody to answer to
            elif departed in lookup.waiting:
                lookup.waiting.discard(departed)
                if not lookup.waiting:
                    if not lookup.answered:
                        self._answer_lookup(key, lookup, None, now, out)
                    del self._lookups[key]

    def _online_here(self, public_id: str) -> dict[str, object] | None:
        """Where ``public_id`` is, as ``Located``/``LocateAnswer`` fields, if it is online here."""
        state = self.peers.get(public_id)
        if state is None or not state.attached:
            return None
        return {
            "online": True,
            "address": state.address,
            "superpeer": self.node_id,
            "access_point": self.address,
        }

    # -- routing ------------------------------------------------------------------------------
    def _targets(self, node: PosetNode) -> dict[str, int]:
        """The origins ``node``'s subscription travels toward, with their root positions: for a
        local subscriber every origin covering it, for a relayed one what its senders asked."""
        targets: dict[str, int] = {}
        for source, ids in node.sources.items():
            if source.startswith(_PEER):
                for origin in self.ads.covering_origins(node.subscription):
                    position = self.origin_positions.get(origin)
                    if position is not None:
                        targets[origin] = position
            else:
                for sid in ids:
                    targets.update(self._toward.get((source, sid), {}))
        targets.pop(self.node_id, None)
        return targets

    def _destinations(self, node: PosetNode) -> dict[str, dict[str, int]]:
        """Per neighbour, the origins (with positions) ``node`` must be sent toward through it."""
        hops: dict[str, dict[str, int]] = {}
        for origin, position in self._targets(node).items():
            hop = self.view.parent(position)
            if hop is not None:
                hops.setdefault(hop, {})[origin] = position
        return hops

    def _wants(self, node: PosetNode, destination: str) -> set[str]:
        return set(self._destinations(node).get(destination, {}))

    def _route(self, node: PosetNode, now: float, out: list[Output]) -> None:
        for destination, origins in sorted(self._destinations(node).items()):
            missing = origins.keys() - self.poset.sent_labels(node, destination)
            if missing:
                self._forward(node, destination, {o: origins[o] for o in missing}, now, out)

    def _forward(
        self,
        node: PosetNode,
        destination: str,
        origins: dict[str, int],
        now: float,
        out: list[Output],
    ) -> None:
        self.poset.mark_sent(node, destination, origins)
        message = m.Forward(
            id=node.wire_id, subscription=node.subscription, toward=tuple(sorted(origins.items()))
        )
        self._send(destination, message, now, out, sub=node.wire_id)

    def _resend(self, resend: tuple, destination: str, now: float, out: list[Output]) -> None:
        for node, labels in resend:
            positions = {o: self.origin_positions[o] for o in labels if o in self.origin_positions}
            if positions:
                self._forward(node, destination, positions, now, out)

    def _after_removal(self, removed: Removed, now: float, out: list[Output]) -> None:
        """Finish a removal: first what the removed subscription covered, then its withdrawal.
        When the node stays (another source holds it), withdraw it where nothing wants it now."""
        neighbours = self.view.neighbours()
        if removed.deleted:
            for destination, resend in removed.resend.items():
                if destination in neighbours:
                    self._resend(resend, destination, now, out)
            for destination in removed.retract:
                if destination in neighbours:
                    self._send(
                        destination,
                        m.Retract(id=removed.node.wire_id),
                        now,
                        out,
                        sub=removed.node.wire_id,
                    )
            return
        node = removed.node
        wanted = self._destinations(node)
        for destination in sorted(set(node.sent) - set(wanted)):
            resend = self.poset.withdraw(node, destination, self._wants)
            if destination in neighbours:
                self._resend(resend, destination, now, out)
                self._send(destination, m.Retract(id=node.wire_id), now, out, sub=node.wire_id)

    def _trigger(self, origin: str, now: float, out: list[Output]) -> None:
        """Send toward ``origin`` the local subscriptions its elements now cover and that nothing
        covering them already took that way for it (walking down from the roots: what the origin
        does not cover, nothing below it is covered either)."""
        position = self.origin_positions.get(origin)
        hop = None if position is None else self.view.parent(position)
        if hop is None:
            return
        seen: set[int] = set()
        stack = list(reversed(self.poset.roots()))
        while stack:
            node = stack.pop()
            if node.id in seen:
                continue
            seen.add(node.id)
            if not self.ads.covers(origin, node.subscription):
                continue
            if origin in self.poset.sent_labels(node, hop):
                continue
            if any(source.startswith(_PEER) for source in node.sources):
                self._forward(node, hop, {origin: position}, now, out)  # type: ignore[dict-item]
                continue
            stack.extend(sorted(node.children.values(), key=lambda n: n.id, reverse=True))

    def _announce(self, now: float, out: list[Output]) -> None:
        """Broadcast to the whole backbone the change in what this origin stands for."""
        current = self.ads.elements(self.node_id)
        if self.config.summarise_values_above is not None:
            current = summarise(current, self.config.summarise_values_above)
        added = tuple(sorted(current - self._announced, key=repr))
        withdrawn = tuple(sorted(self._announced - current, key=repr))
        self._announced = current
        if not added and not withdrawn:
            return
        message = m.Elements(
            origin=self.node_id,
            origin_position=self.view.root_position,
            added=added,
            withdrawn=withdrawn,
        )
        for child in self.view.children(self.view.root_position):
            self._send(child, message, now, out, origin=self.node_id)

    def _dispatch(self, notification: m.Notification, now: float, out: list[Output]) -> None:
        publication = notification.publication
        peers: dict[str, set[str]] = {}
        neighbours: dict[str, set[str]] = {}
        origin = notification.origin
        toward = self._toward
        for node in self.poset.match_index(publication):
            for source, ids in node.sources.items():
                if source.startswith(_PEER):
                    peers.setdefault(source[len(_PEER) :], set()).update(ids)
                else:
                    wanted = [sid for sid in ids if origin in toward.get((source, sid), ())]
                    if wanted:
                        neighbours.setdefault(source[len(_NEIGHBOUR) :], set()).update(wanted)
        if neighbours:
            relay = m.Notification(
                origin=notification.origin,
                origin_position=notification.origin_position,
                publication=publication,
                owner=notification.owner,
                access_point=notification.access_point,
                hops=notification.hops + 1,
                published_at=notification.published_at,
            )
            for child in self.view.children(notification.origin_position):
                if child in neighbours:
                    # ``sub`` names the child's subscriptions this notification answers (the
                    # analytics measure forwarding efficiency with it).
                    matched = ",".join(sorted(neighbours[child]))
                    self._send(child, relay, now, out, origin=notification.origin, sub=matched)
        for peer in sorted(peers):
            notify = m.Notify(
                publication=publication,
                subscriptions=tuple(sorted(peers[peer])),
                owner=notification.owner,
                access_point=notification.access_point,
                origin=notification.origin,
                hops=notification.hops,
                published_at=notification.published_at,
            )
            data = wire.encode(notify, self._next_id())
            state = self.peers.get(peer)
            online = state is not None and state.attached
            if online:
                self.statistics.delivered += 1
                out.append(ToPeer(peer, notify, data))
            else:
                self.statistics.stored_offline += 1
                out.append(ToOffline(peer, notify, data))
            self._trace(
                out,
                now,
                "deliver" if online else "offline",
                notify,
                peer=peer,
                size=len(data),
                origin=notification.origin,
                hops=notification.hops,
            )

    # -- plumbing -----------------------------------------------------------------------------
    def _peer(self, peer: str) -> PeerState:
        state = self.peers.get(peer)
        if state is None:
            raise KeyError(f"{peer} is not attached to {self.node_id}")
        return state

    def _next_id(self) -> str:
        self._message_number += 1
        return f"{self.node_id}#{self._message_number}"

    def _send(
        self, neighbour: str, message: object, now: float, out: list[Output], **trace: str | None
    ) -> None:
        message_id = self._next_id()
        data = wire.encode(message, message_id)
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.statistics.sent[kind] += 1
        self.statistics.bytes_sent[kind] += len(data)
        out.append(ToNeighbour(neighbour, message, data, message_id))
        self._trace(
            out, now, "send", message, neighbour=neighbour, size=len(data), msg=message_id, **trace
        )

    def _reply(self, peer: str, message: object, now: float, out: list[Output]) -> None:
        data = wire.encode(message, self._next_id())
        out.append(ToPeer(peer, message, data))

    def _refuse(self, peer: str, request: str, reason: str, now: float, out: list[Output]) -> None:
        self.statistics.refused += 1
        refusal = m.Refused(request=request, reason=reason)
        self._trace(out, now, "refused", refusal, peer=peer)
        self._reply(peer, refusal, now, out)

    def _trace(
        self,
        out: list[Output],
        now: float,
        event: str,
        message: object,
        *,
        size: int = 0,
        msg: str | None = None,
        peer: str | None = None,
        neighbour: str | None = None,
        origin: str | None = None,
        sub: str | None = None,
        hops: int | None = None,
    ) -> None:
        if not self.config.tracing:
            return
        publication = getattr(message, "publication", None)
        if hops is None and isinstance(message, m.Notification | m.Notify):
            hops = message.hops
        if sub is None and isinstance(message, m.Subscribe | m.Unsubscribe | m.Forward | m.Retract):
            sub = message.id
        if origin is None and isinstance(message, m.Notification | m.Elements):
            origin = message.origin
        out.append(
            TraceRecord(
                ts=now,
                node=self.node_id,
                event=event,
                kind=type(message).KIND,  # type: ignore[attr-defined]
                msg=msg,
                pub=publication.id if publication is not None else None,
                sub=sub,
                origin=origin,
                peer=peer,
                neighbour=neighbour,
                bytes=size,
                hops=hops,
            )
        )


_NOWHERE: dict[str, object] = {"online": False, "address": "", "superpeer": "", "access_point": ""}


def _fields_of_where(answer: m.LocateAnswer) -> dict[str, object]:
    return {name: getattr(answer, name) for name in _NOWHERE}


def _term_text(term: qel.Term) -> str:
    if isinstance(term, qel.URI):
        return f"<{term.value}>"
    return repr(term.lexical)
