"""Routing at one super-peer, sans-IO: events in, actions out (design paper Section 4).

Inputs are method calls: a local peer attaches, detaches or leaves; a local peer's request
(``wire.messages`` Advertise / Subscribe / Unsubscribe / Publish / Locate); a message from another
super-peer; a change of the hypercube around this node; time passing (``timer``). Each returns a
list of ``superpeer.actions`` and ``TraceRecord`` s. Time (``now``) is an argument; the core reads
no clock, opens no socket, keeps no global state. ``SuperPeerNode`` owns the core and everything
around it (the topology protocol, peer connections, mail, failure detection, restarts).

Routing (ARCHITECTURE.md, "Routing that never loses a notification"):

1. **Advertisements** spread down the spanning tree of their *origin* super-peer. Every super-peer
   indexes, per origin, the elements that origin stands for (``indices.AdvertisementIndex``); the
   origin itself keeps per-peer reference counts and broadcasts an element when its first peer
   advertises it and its withdrawal when its last peer stops.
2. **Subscriptions** travel toward every origin whose elements cover them, one hop at a time to
   ``parent_O(Y)``. The subscriber's access point decides the origins; every hop carries them
   (``Forward.toward``, the complete list for that subscription on that link) and a super-peer
   relays a subscription only toward the origins it was sent toward. A subscription goes to a
   neighbour for an origin only if no subscription covering it was already sent there for that
   origin (the poset's per destination and per origin bookkeeping). Subscriptions routed together
   (a restart, a change of the cube, a trigger, what a withdrawn one covered) are planned per
   neighbour (``poset.plans``): none goes for origins that one going with it and covering it
   carries, whatever order they were taken in.
3. **Notifications** go down the origin's tree: Y passes a notification to a child M only if a
   subscription that M sent toward that origin matches; every local peer with a matching
   subscription gets it once.
4. **Triggering**: when new elements of origin O arrive, the local subscriptions O now covers are
   sent toward O unless something covering them already went that way for O.
5. **Unsubscription** (SIENA): the subscriptions a withdrawn one was covering are sent where they
   are needed, for the origins they need, before the withdrawal itself.

By induction along the path from a subscriber's access point to a publisher's, a subscription that
covers every matching one is present at each hop before the publication, and the notification comes
back down the same hops, once per hop: nothing matched and covered is lost, nothing is duplicated.

**When the cube changes** (``topology_changed``), routing state follows the new shape, *make before
break*, so that no route is missing while the new ones are built:

* additions start at once: every subscription is forwarded to its new next hops (in slices of
  ``routings_per_step``, the first at once and the rest from the timer, so that a node holding
  10^5 subscriptions is not silent for longer than its neighbours wait: ``superpeer.rerouting``;
  each slice is state-based, and its ``Forward`` s say since when the route was needed, so the
  origins replay what a later slice would otherwise have missed); every new edge
  of an origin's tree gets that origin's whole advertisement (a newcomer learns everything that
  was advertised before it joined); an origin whose position moved announces itself again;
* removals wait ``settle_seconds``: a neighbour that left the view stays a *ghost* source (its
  subscriptions keep the routes above alive, and notifications matching them are still sent to
  it), labels sent to hops that are no longer next hops stay, and notifications go down the
  origin's tree in every view of the last ``settle_seconds`` (old and new children alike, and an
  origin that moved publishes in its old trees too). When the window closes (``timer``), ghosts
  are removed (SIENA removal), everything is *reconciled* to exactly what the current view needs
  (a shorter ``Forward`` or a ``Retract`` where a hop is no longer needed), and old views are
  forgotten. Once quiet, every super-peer holds what a network built from scratch in the new shape
  would hold.
* A subscription that reaches an origin it newly goes toward makes that origin replay, from its
  log, what it published since the subscription was made (``Replay``; repeats and what is older
  than the subscription are dropped at the access point): it may have been held up on its way
  (a cut shorter than the failure timeout, whose links held it), and what the origin published
  meanwhile went nowhere for it.
* A notification may then arrive twice on one tree (through an old and a new parent): each node
  keeps the (origin, publication, tree) triples it relayed in the last ``settle_seconds`` and
  drops repeats; the access point's mail keeps one copy per peer whatever the tree.
* A member that **departed** (``sp.departed``, broadcast by the super-peer that took its place):
  its advertisement is forgotten everywhere (only the incarnation that departed: a restarted
  member announces a newer one), and the subscriptions travelling toward it are narrowed at once.
  The departed incarnation is remembered: its elements, still spread on new edges by members
  that have not heard yet, are refused.
* An origin that crashed for good while the cube was rebuilt by rejoins (every repair wedged,
  and the watchdogs rejoined the members one by one) is named in no ``Departed``. Two rules keep
  its elements from living on: a super-peer alone in its cube (dimension 0: it stood alone, or
  its cube shrank to it) forgets every other origin, as departed; and what a super-peer that is
  no neighbour sends (advertisements included) is held ``settle_seconds``, taken if the sender
  enters the view by then (a ``Welcome`` racing a member's first messages), else dropped: one
  relayed from a cube its sender has left since would reach the next cube after the sender
  itself forgot the origin.
* A broadcast (``sp.departed``, ``sp.returned``) relayed on a view about to change misses the
  subtree the new view gives the relay: each node keeps the broadcasts of the last
  ``settle_seconds`` and sends them on the edges a change adds to their trees (repeats dropped).
* What a super-peer was sent and no longer needs is retracted even when it is no longer a
  neighbour: at once while it is a ghost, else when it comes back into the view (its own ghost
  period may not have been over, and it kept what it had).
  What a *failed* member took with it (notifications in its queues, publications routed while the
  cube was repaired) is recovered by the access points, from the origins' publication logs
  (``SuperPeerNode``'s catch-up), not by this core.
* A super-peer that **restarted** (``neighbour_restarted``: a newer incarnation spoke) lost its
  state: what it forwarded here is removed at once (its new incarnation forwards its own), what
  was sent to it no longer counts as sent (routes to it are sent again), and when it comes back
  into the view after the cube repaired its old place, it is sent everything again, as a newcomer
  would be, and what it may hold from here and no longer needs is withdrawn (its new incarnation
  may have been a neighbour already, and got routes sent to it then). (Kept as a ghost instead,
  a super-peer that failed and rejoined within ``settle_seconds`` was taken for the same one
  returning, and was never sent the routes it had lost.) Once it enters the view as a member
  (not as a returning ghost), it is a neighbour like any other: what it is sent from then on
  reaches the member it is, and leaving the view and returning later withdraws nothing before
  the window closes (a relay it had become lost a notification on its way when it did).
"""

from __future__ import annotations

import functools
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol

import qel
import wire
from clocks import HybridClock
from indices.routing import AdvertisementIndex
from poset.plans import Plan
from poset.poset import PosetNode, Removed, SubscriptionPoset
from qel.advertisements import Element, element_allows_triple, summarise
from superpeer.actions import (
    CoreAction,
    Deliver,
    Found,
    LogPublication,
    Repeated,
    Replay,
    ToPeer,
    ToSuperPeer,
)
from superpeer.rerouting import Rerouting
from superpeer.schemas import SchemaBook, SchemaLimits, SchemaRefused
from superpeer.trace import TraceRecord
from superpeer.versions import (
    NEITHER,
    ONLY,
    Change,
    ResourceVersions,
    VersionError,
    VersionLimits,
    concerns,
    notify_of,
    sides,
)
from wire import messages as m
from wire.requests import request_label

Output = CoreAction | TraceRecord

PeerSubscription = tuple[str, str, qel.Subscription, bool]
"""What ``SuperPeerCore.subscribe_many`` takes per subscription: the peer, its id for the
subscription, the subscription and whether it asked for ``on_change``."""

PEER: Final = "peer"
SUPERPEER: Final = "superpeer"
Broadcast = m.Departed | m.Returned | m.Merge | m.Reconnected
"""What travels down its origin's whole tree, once per node (``SuperPeerCore.broadcast``)."""


@dataclass(frozen=True, slots=True, order=True)
class Source:
    """Where a subscription in the poset came from: a local peer, or another super-peer that
    forwarded it."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


@functools.lru_cache(maxsize=8192)
def peer_source(name: str) -> Source:
    """One object per recent name: every subscription held keeps its source in its keys."""
    return Source(PEER, name)


@functools.lru_cache(maxsize=8192)
def superpeer_source(name: str) -> Source:
    return Source(SUPERPEER, name)


_TOWARD_SETS: dict[frozenset[str], frozenset[str]] = {}
_TOWARD_SETS_AT_MOST = 100_000
_COVERING_MEMO = 4096
"""Nodes whose covering origins a core remembers at most (``_covering_origins``): a slice of a
rerouting asks each of its nodes' several times (a node's, those it covered)."""


def shared_origins(origins: frozenset[str]) -> frozenset[str]:
    """One object per set of origins that subscriptions travel toward: a super-peer holds one
    for each subscription a neighbour sent it, and most of them name the same one or two
    origins (a small set costs some 200 bytes). Bounded: past it a set is simply not shared."""
    if len(_TOWARD_SETS) >= _TOWARD_SETS_AT_MOST:
        return _TOWARD_SETS.get(origins, origins)
    return _TOWARD_SETS.setdefault(origins, origins)


class TopologyView(Protocol):
    """What a super-peer knows of the hypercube: its own positions and, for the spanning tree
    rooted at any position, its parent and children among its neighbours (``hypercup``). The
    core asks for them on every message it routes, so a view should answer from memory
    (``hypercup.LocalView`` computes each tree once)."""

    @property
    def root_position(self) -> int: ...

    @property
    def positions(self) -> frozenset[int]: ...

    @property
    def dimension(self) -> int: ...

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
    settle_seconds: float = 2.0
    """How long old routes are kept after a change of the cube, while the new ones are built
    (make before break): longer than a message takes to cross the backbone."""
    retracted_seconds: float = 20.0
    """How long a retracted subscription (a neighbour's, a local peer's, or a moved peer's)
    still routes what was published before the retraction and arrives late (a link held it up:
    less than a failure takes to detect)."""
    versions: VersionLimits = field(default_factory=VersionLimits)
    """Bounds of the versions kept of local peers' resources (``superpeer.versions``)."""
    schemas: SchemaLimits = field(default_factory=SchemaLimits)
    """Bounds of the RDFS axioms local peers publish (``superpeer.schemas``)."""
    max_elements_bytes: int = 768 * 1024
    """The largest ``Elements`` this origin may send, encoded (all its peers' advertisements
    and axioms, after summarising): an advertisement or schema beyond it is refused to the
    peer. Below the frame size: the whole set travels in one message."""
    max_subscriptions_per_peer: int = 1000
    """Subscriptions one local peer may hold here; more are refused."""
    routings_per_step: int = 500
    """Subscriptions routed in one go at most when every one held must be routed again (a
    change of the cube, a neighbour restarted, the settle window's end, an origin's news): the
    rest is routed in slices from the timer (``superpeer.rerouting``)."""
    max_subscription_id_bytes: int = 64
    """Longest subscription id (UTF-8 bytes); longer are refused."""
    max_notification_bytes: int = 512 * 1024
    """The largest notification a change may make, encoded: more is refused to the publisher.
    Below the frame size with room to spare, so that every notification the access point
    accepts can travel the backbone, in a ``Mail`` and to a peer (an update carries the version
    it replaces too, so it is up to twice the publication)."""


@dataclass
class CoreStatistics:
    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    bytes_sent: Counter[str] = field(default_factory=Counter)
    delivered: int = 0
    refused: int = 0
    dropped: int = 0
    repeats: int = 0
    """Notifications that reached this node twice on one tree during a change of the cube."""
    late: int = 0
    """Routed or delivered for a subscription retracted after they were published."""
    rerouted: int = 0
    """Slices of reroutings taken (``superpeer.rerouting``)."""


class SuperPeerCore:
    """One super-peer's routing state; see the module docstring for the rules."""

    def __init__(
        self,
        node_id: str,
        address: str,
        view: TopologyView,
        config: CoreConfig | None = None,
        *,
        incarnation: int = 0,
        poset: SubscriptionPoset | None = None,
        clock: HybridClock | None = None,
        versions: ResourceVersions | None = None,
    ) -> None:
        """``poset``: local peers' subscriptions placed already, nothing sent (a restart's,
        ``superpeer._restoring``); ``subscribe_placed`` then routes them. ``clock``: the
        node's hybrid clock (``clocks``): what this origin publishes, when subscriptions
        were made and withdrawn, are its readings; ``now`` stays this process's own time
        (timers, traces)."""
        self.node_id = node_id
        self.clock = clock if clock is not None else HybridClock()
        self.address = address
        self.view = view
        self.config = config or CoreConfig()
        self.incarnation = incarnation
        self.ads = AdvertisementIndex()
        self._advertised: dict[str, frozenset[Element]] = {}
        """Per local peer, its advertisement's elements (what ``ads`` holds for it, without a
        scan of every element of this origin for each publication)."""
        self.poset = poset if poset is not None else SubscriptionPoset()
        self.versions = versions if versions is not None else ResourceVersions(self.config.versions)
        """The versions of local peers' resources (a node's table reads them from its store,
        ``StoredVersions``, so that they need not all be held in memory)."""
        self.schemas = SchemaBook(self.config.schemas)
        self._on_change: set[tuple[str, str]] = set()
        """Local peers' subscriptions that hear of extensions they matched already."""
        self.peers: dict[str, PeerState] = {}
        self.origin_positions: dict[str, int] = {}
        self.origin_versions: dict[str, tuple[int, int]] = {}
        """Per origin, the (incarnation, version) of the advertisement held."""
        self.origin_addresses: dict[str, str] = {}
        self.statistics = CoreStatistics()
        self._announced: frozenset[Element] = frozenset()
        self._announced_axioms: frozenset[qel.Axiom] = frozenset()
        self._moved = False
        self._version = 0
        self._seen_broadcasts: dict[tuple[object, ...], float] = {}
        self._broadcasts: dict[tuple[object, ...], tuple[Broadcast, float]] = {}
        """The broadcasts seen in the last ``settle_seconds`` (the make-before-break window),
        relayed again on the edges a change of the cube adds to their trees: a relay that ran
        on a view about to change misses the subtree the new view gives it. (Not longer: a
        super-peer that joins later must not take old news for new.)"""
        self._toward: dict[tuple[Source, str], frozenset[str]] = {}
        self._routes_changed_at = -math.inf
        """The hybrid time this origin last announced new elements or its view changed."""
        self._retracted: OrderedDict[
            tuple[Source, str], tuple[qel.Subscription, float, float, frozenset[str] | None]
        ] = OrderedDict()
        """Subscriptions retracted in the last ``retracted_seconds``, oldest first: (the
        subscription, when (this process's time), its hybrid time then (``clocks``, rule 3),
        the origins a neighbour's went toward; None for a local peer's)."""
        self._moved_away: dict[str, float] = {}
        """Local peers that moved to another access point in the last ``retracted_seconds``
        (when): what their retracted subscriptions match goes to them (the node forwards it)."""
        """When this origin last announced new elements or its view changed: subscriptions
        that this makes travel toward it are expected, not late."""
        """When each subscription held here was made (a peer's: when it came here; a
        neighbour's: as its ``Forward.since`` says), for the ``since`` of what is sent on."""
        self._message_number = 0
        self._lookups: dict[tuple[str, str], _Lookup] = {}
        self._recent: list[tuple[TopologyView, float]] = []
        """Views replaced less than ``settle_seconds`` ago, with the time they expire."""
        self._ghosts: dict[str, float] = {}
        self._departed_incarnations: dict[str, int] = {}
        """Per origin, the last incarnation that departed: its advertisement, still spread by
        members that did not hear of the departure yet, must not come back."""
        self._owed_retracts: dict[str, set[str]] = {}
        """Per former neighbour (out of the view, ghost period over), the ids of what it was sent
        and no longer needs: retracted if it comes back into the view (it may have kept them, its
        own ghost period not over when the view changed back)."""
        self._restarted: set[str] = set()
        """Super-peers that restarted, until they are back in the view after leaving it."""
        """Neighbours that left the view, until their subscriptions go (make before break)."""
        self._settle_at: float | None = None
        self._rerouting = Rerouting()
        """Subscriptions still to route again, in slices (``superpeer.rerouting``)."""
        self._owed_after: set[str] = set()
        """Neighbours back in the view whose owed retracts wait for the rerouting to end: what
        it sends them again is not withdrawn (``_pay_owed_retracts``)."""
        self._covering: dict[int, frozenset[str]] = {}
        """Per peer's node id, the origins whose elements cover it, while the advertisements
        stay as they are (``ads.generation``): a rerouting asks each node's several times."""
        self._covering_generation = -1
        self._relayed: OrderedDict[tuple[str, tuple[str, str, int], int], float] = OrderedDict()
        self._early: list[tuple[str, object, tuple[int, str | None], float]] = []
        """Routing messages from a super-peer that is not (yet) a neighbour here: the news that
        made it one may still be on its way (another sender, another link). Replayed when the
        view changes, dropped after ``settle_seconds``."""

    # -- local peers --------------------------------------------------------------------------
    def attach(self, peer: str, now: float, address: str = "") -> list[Output]:
        """A peer connects (first time or again, from ``address``)."""
        self._moved_away.pop(peer, None)
        state = self.peers.get(peer)
        if state is None:
            self.peers[peer] = PeerState(address=address)
        else:
            state.attached = True
            state.address = address
        return []

    def detach(self, peer: str, now: float) -> list[Output]:
        """The peer goes offline for a while: it keeps its subscriptions and advertisement."""
        state = self.peers.get(peer)
        if state is not None:
            state.attached = False
        return []

    def leave(self, peer: str, now: float, *, moved: bool = False) -> list[Output]:
        """The peer leaves for good (or ``moved`` to another access point): its subscriptions
        are withdrawn (SIENA unsubscription) and the elements no other local peer advertises are
        withdrawn network-wide. A moved peer's subscriptions still match what was published
        before and arrives late (``_retracted``)."""
        out: list[Output] = []
        source = peer_source(peer)
        for sid in self.poset.ids_of(source):
            if moved:
                self._retract(source, sid, now, None)
            self._after_removal(self.poset.remove(source, sid, self._wants), now, out)
        if moved:
            self._moved_away[peer] = now
        self.ads.remove(self.node_id, peer, self._advertised.pop(peer, frozenset()))
        self.schemas.forget_peer(peer)
        self._on_change = {key for key in self._on_change if key[0] != peer}
        self._announce(now, out)
        self.peers.pop(peer, None)
        self.versions.forget(peer)
        return out

    def peer_message(
        self,
        peer: str,
        message: object,
        size: int,
        now: float,
        message_id: str | None = None,
        *,
        active_since: float = 0.0,
        withdrawn_at: float = 0.0,
    ) -> list[Output]:
        """A request from a local peer (``Advertise``, ``Subscribe``, ``Unsubscribe``,
        ``Publish``, ``Locate``). ``active_since``: for a ``Subscribe``, the activation its
        ``Ack`` tells the peer; ``withdrawn_at``, for an ``Unsubscribe``, the withdrawal's (the
        node keeps both: ``clocks``, rule 5)."""
        out: list[Output] = []
        self._trace(out, now, "receive", message, peer=peer, size=size, msg=message_id)
        if peer not in self.peers:
            self.statistics.dropped += 1
            self._trace(
                out, now, "drop", message, peer=peer, reason="the peer is not attached here"
            )
            return out
        self.statistics.received[type(message).KIND] += 1  # type: ignore[attr-defined]
        if isinstance(message, m.Advertise):
            if self.advertise(peer, message.advertisement, now, out, checked=True):
                self._reply(peer, m.Ack(request=request_label(message)), now, out)
        elif isinstance(message, m.PublishSchema):
            if self.publish_schema(peer, frozenset(message.axioms), now, out, checked=True):
                self._reply(peer, m.Ack(request=request_label(message)), now, out)
        elif isinstance(message, m.Subscribe):
            if (reason := self._beyond_subscription_limits(peer, message.id)) is not None:
                self._refuse(peer, request_label(message), reason, now, out)
            elif self.subscribe(
                peer, message.id, message.subscription, now, out, on_change=message.on_change
            ):
                ack = m.Ack(request=request_label(message), active_since=active_since)
                self._reply(peer, ack, now, out)
        elif isinstance(message, m.Unsubscribe):
            self._unsubscribe(peer, message, now, out, withdrawn_at)
        elif isinstance(message, m.Publish):
            self._publish(peer, message, now, out)
        elif isinstance(message, m.Withdraw):
            self._withdraw(peer, message, now, out)
        elif isinstance(message, m.Locate):
            self._locate(peer, message, now, out)
        else:
            self._refuse(peer, type(message).__name__, "not a request a peer can make", now, out)
        return out

    def advertise(
        self,
        peer: str,
        advertisement: qel.Advertisement,
        now: float,
        out: list[Output],
        *,
        checked: bool = False,
    ) -> bool:
        """Replace ``peer``'s advertisement (also used to restore it after a restart). When
        ``checked`` (a peer's request), an advertisement after which this origin's ``Elements``
        would not fit ``max_elements_bytes`` is refused (False, with the refusal sent) and
        nothing changes; a restored or adopted one is taken as it is."""
        old = self._advertised.get(peer, frozenset())
        new = advertisement.elements
        self.ads.remove(self.node_id, peer, old - new)
        self.ads.add(self.node_id, peer, new - old)
        self._advertised[peer] = new

        def undo() -> None:
            self.ads.remove(self.node_id, peer, new - old)
            self.ads.add(self.node_id, peer, old - new)
            self._advertised[peer] = old

        label = request_label(m.Advertise(advertisement=advertisement))
        return self._announce_within_limit(
            peer, label, now, out, what="this advertisement", undo=undo, checked=checked
        )

    def publish_schema(
        self,
        peer: str,
        axioms: frozenset[qel.Axiom],
        now: float,
        out: list[Output],
        *,
        checked: bool = False,
    ) -> bool:
        """Add ``axioms`` to ``peer``'s schemas (also used to restore them); False, with a
        refusal sent, beyond a bound (``superpeer.schemas``), and when ``checked`` (a peer's
        request) beyond ``max_elements_bytes`` as ``advertise`` is."""
        label = request_label(m.PublishSchema(axioms=tuple(axioms)))
        held = self.schemas.of_peer(peer)
        try:
            self.schemas.publish(peer, axioms)
        except SchemaRefused as error:
            self._refuse(peer, label, str(error), now, out)
            return False
        return self._announce_within_limit(
            peer,
            label,
            now,
            out,
            what="these axioms",
            undo=lambda: self.schemas.set_peer(peer, held),
            checked=checked,
        )

    def _announce_within_limit(
        self,
        peer: str,
        label: str,
        now: float,
        out: list[Output],
        *,
        what: str,
        undo: Callable[[], object],
        checked: bool,
    ) -> bool:
        """Announce this origin's changed elements; when ``checked`` (a peer's request) and
        they would not fit ``max_elements_bytes``, ``undo`` the change and refuse it instead."""
        announcement = self._announcement()
        if checked and (reason := self._too_large(announcement)):
            undo()
            self._refuse(peer, label, f"after {what} {reason}", now, out)
            return False
        self._announce(now, out, announcement)
        return True

    def subscribe(
        self,
        peer: str,
        subscription_id: str,
        subscription: qel.Subscription,
        now: float,
        out: list[Output],
        *,
        on_change: bool = False,
    ) -> bool:
        """Add ``peer``'s subscription (also used to restore it); False, with a refusal sent,
        when the id is taken by another subscription. ``on_change``: it hears of extensions it
        matched already (``superpeer.versions``)."""
        source = peer_source(peer)
        existing = self.poset.node_of(source, subscription_id)
        if existing is not None and not same_subscription(existing.subscription, subscription):
            self._refuse_taken(peer, subscription_id, subscription, now, out)
            return False
        inserted = self.poset.insert(subscription, source, subscription_id)
        if on_change:
            self._on_change.add((peer, subscription_id))
        else:
            self._on_change.discard((peer, subscription_id))
        self._route(inserted.node, now, out)
        return True

    def _beyond_subscription_limits(self, peer: str, subscription_id: str) -> str | None:
        """Why a peer's new subscription is refused, if it is. A notification names every
        subscription of its peer that it matches, and travels in one frame: these bounds, with
        ``max_notification_bytes``, keep it within one (``superpeer.config`` checks the sum)."""
        size = len(subscription_id.encode())
        most = self.config.max_subscription_id_bytes
        if size > most:
            return f"the id is {size} bytes long, more than max_subscription_id_bytes ({most})"
        source = peer_source(peer)
        held = self.poset.count_of(source)
        most = self.config.max_subscriptions_per_peer
        if held >= most and self.poset.node_of(source, subscription_id) is None:
            return (
                f"you have {held} subscriptions here, the most max_subscriptions_per_peer "
                "allows: unsubscribe one first"
            )
        return None

    def subscribe_many(
        self, subscriptions: list[PeerSubscription], now: float, out: list[Output]
    ) -> None:
        """``subscribe`` for a batch, as a restart restores its peers' whole state: one bulk
        insertion (``SubscriptionPoset.insert_many``), then the new nodes routed together
        (``_route_many``), so that none is sent for what one covering it carries. An id already
        taken by another subscription is refused as ``subscribe`` refuses it."""
        batch: list[tuple[qel.Subscription, str, str]] = []
        taken: dict[tuple[str, str], qel.Subscription] = {}
        for peer, subscription_id, subscription, on_change in subscriptions:
            source = peer_source(peer)
            existing = self.poset.node_of(source, subscription_id)
            held = existing.subscription if existing is not None else None
            held = taken.get((source, subscription_id), held)
            if held is not None and not same_subscription(held, subscription):
                self._refuse_taken(peer, subscription_id, subscription, now, out)
                continue
            taken[source, subscription_id] = subscription
            batch.append((subscription, source, subscription_id))
            if on_change:
                self._on_change.add((peer, subscription_id))
            else:
                self._on_change.discard((peer, subscription_id))
        placed = {inserted.node.id for inserted in self.poset.insert_many(batch)}
        nodes = [node for node in self.poset.general_first() if node.id in placed]
        self._reroute(now, out, only=nodes)

    def subscribe_placed(
        self, subscriptions: list[PeerSubscription], now: float, out: list[Output]
    ) -> None:
        """``subscribe_many`` of what the poset given to this core holds already, and only
        that (a restart's, ``superpeer._restoring``): their flags, then every node routed,
        top-down. Inserting them again only to find each there took 2.5 s at 10^5."""
        for peer, subscription_id, _, on_change in subscriptions:
            if on_change:
                self._on_change.add((peer, subscription_id))
        self._reroute(now, out)

    def _refuse_taken(
        self,
        peer: str,
        subscription_id: str,
        subscription: qel.Subscription,
        now: float,
        out: list[Output],
    ) -> None:
        self._refuse(
            peer,
            request_label(m.Subscribe(id=subscription_id, subscription=subscription)),
            f"the id {subscription_id!r} is already used for another subscription; "
            "unsubscribe it first",
            now,
            out,
        )

    def on_change(self, peer: str, subscription_id: str) -> bool:
        return (peer, subscription_id) in self._on_change

    def subscription_of(self, peer: str, subscription_id: str) -> qel.Subscription | None:
        """``peer``'s subscription ``subscription_id``, if it holds one: one look-up, where
        ``subscriptions_of`` builds all of them (a peer's every subscribe and unsubscribe asks,
        and it may hold ``max_subscriptions_per_peer``)."""
        node = self.poset.node_of(peer_source(peer), subscription_id)
        return None if node is None else node.subscription

    def subscriptions_of(self, peer: str) -> dict[str, qel.Subscription]:
        source = peer_source(peer)
        found = {}
        for sid in self.poset.ids_of(source):
            node = self.poset.node_of(source, sid)
            assert node is not None
            found[sid] = node.subscription
        return found

    def _unsubscribe(
        self, peer: str, message: m.Unsubscribe, now: float, out: list[Output], withdrawn_at: float
    ) -> None:
        source = peer_source(peer)
        if self.poset.node_of(source, message.id) is None:
            if message.subscription is not None:
                # a withdrawal made elsewhere, told again after a move: nothing to withdraw here
                ack = m.Ack(request=request_label(message), withdrawn_at=message.withdrawn_at)
                self._reply(peer, ack, now, out)
                return
            self._refuse(
                peer,
                request_label(message),
                f"no subscription with id {message.id!r}",
                now,
                out,
            )
            return
        self.unsubscribe(peer, message.id, now, out)
        self._reply(
            peer, m.Ack(request=request_label(message), withdrawn_at=withdrawn_at), now, out
        )

    def unsubscribe(self, peer: str, subscription_id: str, now: float, out: list[Output]) -> None:
        """Retract ``peer``'s subscription (it asked, or it expired: ``superpeer.expiry``)."""
        self._retract(peer_source(peer), subscription_id, now, None)
        removed = self.poset.remove(peer_source(peer), subscription_id, self._wants)
        self._on_change.discard((peer, subscription_id))
        self._after_removal(removed, now, out)

    def _publish(self, peer: str, message: m.Publish, now: float, out: list[Output]) -> None:
        publication = message.publication
        request = request_label(message)
        elements = self._advertised.get(peer, ())
        outside = [
            (p, o)
            for p, o in publication.statements
            if not any(element_allows_triple(e, p, o) for e in elements)
        ]
        if outside:
            outside.sort(key=repr)
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
        publication = self.schemas.schema.entail(publication)
        most = self.config.versions.max_triples_per_resource
        if len(publication.statements) > most:
            self._refuse(
                peer,
                request,
                f"under the schemas advertised the publication entails {len(publication.statements)}"
                f" triples, more than max_triples_per_resource ({most})",
                now,
                out,
            )
            return
        made: list[m.Notification] = []
        stamp = self.clock.now(now)

        def fits(change: Change) -> None:
            notification = self._notification_of(peer, change, stamp)
            size = len(wire.encode(notification))
            most = self.config.max_notification_bytes
            if size > most:
                carried = (
                    " (an update carries the version it replaces too)" if change.previous else ""
                )
                raise VersionError(
                    f"its notification would be {size} bytes{carried}, more than "
                    f"max_notification_bytes ({most}): publish less about one resource"
                )
            made.append(notification)

        try:
            accepted = self.versions.publish(
                peer, publication, message.change, stamp, message.expires, fits=fits
            )
        except VersionError as error:
            self._refuse(peer, request, str(error), now, out)
            return
        ack = self._to_peer(peer, m.Ack(request=request))
        if accepted is None:
            # the same version: logged already
            out.append(Repeated(ack, message.publication.id, message.again))
        else:
            self._originate(peer, accepted, now, out, *made, ack=ack)

    def _withdraw(self, peer: str, message: m.Withdraw, now: float, out: list[Output]) -> None:
        request = request_label(message)
        try:
            accepted = self.versions.withdraw(peer, message.id, self.clock.now(now))
        except VersionError as error:
            self._refuse(peer, request, str(error), now, out)
            return
        ack = self._to_peer(peer, m.Ack(request=request))
        self._originate(peer, accepted, now, out, ack=ack)

    def _originate(
        self,
        peer: str,
        change: Change,
        now: float,
        out: list[Output],
        notification: m.Notification | None = None,
        *,
        ack: ToPeer | None = None,
    ) -> None:
        if notification is None:
            notification = self._notification_of(peer, change, self.clock.now(now))
        self._trace(out, now, "publish", notification, peer=peer, origin=self.node_id)
        out.append(LogPublication(notification, ack))
        self.dispatch_own(notification, now, out)

    def _notification_of(self, peer: str, change: Change, stamp: float) -> m.Notification:
        """``change`` as it leaves this origin, published at the hybrid time ``stamp``."""
        return m.Notification(
            origin=self.node_id,
            origin_position=self.view.root_position,
            publication=change.publication,
            owner=peer,
            access_point=self.address,
            hops=0,
            published_at=stamp,
            version=change.number,
            previous=change.previous,
            retracted=change.retracted,
            expires=change.expires,
            extension=change.extension,
        )

    def dispatch_own(self, notification: m.Notification, now: float, out: list[Output]) -> None:
        """Send a publication accepted here down this origin's trees: the current one, and during
        a change of the cube the trees of the positions it held just before (also how a restarted
        origin replays what its log holds)."""
        roots = {self.view.root_position}
        roots.update(view.root_position for view, _ in self._recent)
        for root in sorted(roots):
            copy = notification
            if root != notification.origin_position or notification.origin != self.node_id:
                copy = _with(notification, origin=self.node_id, origin_position=root)
            self._dispatch(copy, now, out)

    # -- other super-peers --------------------------------------------------------------------
    def superpeer_message(
        self, sender: str, message: object, size: int, now: float, message_id: str | None = None
    ) -> list[Output]:
        """A routing message from another super-peer (a neighbour, a ghost, or any member for
        a notification on a tree that is changing)."""
        out: list[Output] = []
        self._trace(out, now, "receive", message, neighbour=sender, size=size, msg=message_id)
        self.statistics.received[type(message).KIND] += 1  # type: ignore[attr-defined]
        self._route_message(sender, message, (size, message_id), now, out)
        return out

    def _route_message(
        self,
        sender: str,
        message: object,
        received: tuple[int, str | None],
        now: float,
        out: list[Output],
    ) -> None:
        known = sender in self.view.neighbours() or sender in self._ghosts
        if isinstance(message, m.Notification):
            self._notification(sender, message, now, out)
        elif isinstance(message, m.Departed):
            self._departed(sender, message, now, out)
        elif isinstance(message, m.Returned | m.Merge | m.Reconnected):
            self._relay(sender, message, now, out)
        elif not known:
            self._early.append((sender, message, received, now + self.config.settle_seconds))
            self._schedule_settle(now)
        elif isinstance(message, m.Elements):
            self._elements(sender, message, now, out)
        elif isinstance(message, m.Forward):
            self._forwarded(sender, message, now, out)
        elif isinstance(message, m.Retract):
            source = superpeer_source(sender)
            if self.poset.node_of(source, message.id) is None:
                self._drop(out, now, message, sender, "retracts a subscription not held from it")
            else:
                toward = self._toward.pop((source, message.id), frozenset())
                if toward:
                    self._retract(source, message.id, now, toward)
                self._after_removal(self.poset.remove(source, message.id, self._wants), now, out)
        elif isinstance(message, m.LocateQuery):
            self._locate_query(sender, message, now, out)
        elif isinstance(message, m.LocateAnswer):
            self._locate_answer(sender, message, now, out)
        else:
            self._drop(out, now, message, sender, "routing takes no such message")

    def _drop(
        self, out: list[Output], now: float, message: object, sender: str, reason: str
    ) -> None:
        self.statistics.dropped += 1
        self._trace(out, now, "drop", message, neighbour=sender, reason=reason)

    def _forwarded(self, sender: str, message: m.Forward, now: float, out: list[Output]) -> None:
        source = superpeer_source(sender)
        existing = self.poset.node_of(source, message.id)
        if existing is not None and not same_subscription(
            existing.subscription, message.subscription
        ):
            self._drop(out, now, message, sender, "the id of another subscription from it")
            return
        inserted = self.poset.insert(message.subscription, source, message.id)
        node = inserted.node
        before = self._toward.get((source, message.id), frozenset())
        toward = shared_origins(frozenset(origin for origin, _ in message.toward))
        self._toward[(source, message.id)] = toward
        for origin, position in message.toward:
            self.origin_positions.setdefault(origin, position)
        # it took longer than routes take to get here (a link cut for a while, a backed-up
        # queue): what the origins published meanwhile went nowhere for it. Hybrid times: the
        # frame that brought it pushed this clock past its sender's (``clocks``, rule 4)
        stamp = self.clock.now(now)
        late = bool(message.since) and (
            stamp - max(message.since, self._routes_changed_at) > self.config.settle_seconds
        )
        sent_before = {hop: set(labels) for hop, labels in node.sent.items()} if late else {}
        self._route(node, now, out, since=message.since or stamp)
        if before - toward:
            self._reconcile(node, now, out)
        if late:
            passed_on = {
                origin
                for hop, labels in node.sent.items()
                for origin in labels - sent_before.get(hop, set())
            }
            self._replay_late(sender, message, (toward - before) - passed_on, out)
        elif self.node_id in toward - before and message.since and message.since < stamp:
            # held up a little on its way (a cut shorter than the failure timeout: the link
            # held it): what this origin published since the subscription was made went
            # nowhere for it (issue 33); the access point drops what is older than that
            out.append(Replay(sender, message.subscription, message.since))
        elif (
            self.node_id in toward - before
            and stamp - self._routes_changed_at <= self.config.settle_seconds
        ):
            # a route to this origin that formed after it announced new elements: what its
            # peers published under them before the route arrived went nowhere for it (a peer
            # that advertises and publishes at once, or moves and publishes at once); no
            # further back than the subscription itself
            replay = Replay(
                sender,
                message.subscription,
                self._routes_changed_at,
                own_clock=True,
                not_before=message.since,
            )
            out.append(replay)

    def _replay_late(
        self, sender: str, message: m.Forward, origins: set[str], out: list[Output]
    ) -> None:
        """For a subscription that arrived late: replay what this origin published, and ask
        each origin it was not passed on toward (a route was there already, so that origin
        would never see it late) to replay to this node. The origins it was passed on toward
        see it late themselves."""
        for origin in sorted(origins):
            if origin == self.node_id:
                out.append(Replay(sender, message.subscription, message.since))
            else:
                address = self.origin_addresses.get(origin, "")
                replay = Replay(sender, message.subscription, message.since, origin, address)
                out.append(replay)

    def _notification(
        self, sender: str, message: m.Notification, now: float, out: list[Output]
    ) -> None:
        """A notification down a tree: processed once per (origin, publication, tree); a repeat
        (an old and a new parent during a change of the cube) is dropped."""
        key = (message.origin, relay_key(message), message.origin_position)
        if key in self._relayed and not message.replayed:
            self.statistics.repeats += 1
            self._drop(out, now, message, sender, "a repeat: relayed down this tree already")
            return
        if message.hops > 2 * self.view.dimension + 2:
            # a stale tree sent it around: nothing new
            self._drop(out, now, message, sender, "more hops than a tree of the cube has")
            return
        self._dispatch(message, now, out)

    def _elements(self, sender: str, message: m.Elements, now: float, out: list[Output]) -> None:
        origin = message.origin
        if origin == self.node_id:
            return
        version = (message.incarnation, message.version)
        if message.incarnation <= self._departed_incarnations.get(origin, -1):
            self.statistics.repeats += 1  # spread by a member that missed the departure
            return
        if version <= self.origin_versions.get(origin, (-1, -1)):
            self.statistics.repeats += 1  # an older or the same set, on another tree
            return
        self.origin_versions[origin] = version
        if message.address:
            self.origin_addresses[origin] = message.address
        moved = self.origin_positions.get(origin) != message.origin_position
        self.origin_positions[origin] = message.origin_position
        old = self.ads.elements(origin)
        new = frozenset(message.elements)
        gone = self.ads.remove(origin, origin, old - new)
        fresh = self.ads.add(origin, origin, new - old)
        for child in self._children(message.origin_position):
            if child != sender:
                self._send(child, message, now, out, origin=origin)
        if self.schemas.set_origin(origin, frozenset(message.axioms)):
            self._announce(now, out)  # this origin's elements, closed under the new schema
        if moved or gone:
            self._schedule_settle(now)
        if moved or gone or fresh:
            # what goes toward it now (rule 4, triggering: the local subscriptions its new
            # elements cover) is sent where it is missing
            self._reroute(now, out, toward=origin)

    def has_seen(self, key: tuple[object, ...], now: float) -> bool:
        """Whether the broadcast ``key`` came here in the last ``10 * settle_seconds``."""
        return self._seen_broadcasts.get(key, -math.inf) >= now

    def first_time(self, key: tuple[object, ...], now: float) -> bool:
        """Whether a broadcast (``sp.departed``, ``sp.returned``) is new here: during a change
        of the cube it may come down an old and a new tree."""
        for seen, at in list(self._seen_broadcasts.items()):
            if at < now:
                del self._seen_broadcasts[seen]
        for kept, (_, until) in list(self._broadcasts.items()):
            if until < now:
                del self._broadcasts[kept]
        if key in self._seen_broadcasts:
            return False
        self._seen_broadcasts[key] = now + 10 * self.config.settle_seconds
        return True

    def _relay(self, sender: str, message: Broadcast, now: float, out: list[Output]) -> bool:
        """Pass a broadcast down its tree, once; kept to be relayed again on new edges."""
        key = broadcast_key(message)
        if not self.first_time(key, now):
            return False
        self._broadcasts[key] = (message, now + self.config.settle_seconds)
        for child in self._children(message.origin_position):
            if child != sender:
                self._send(child, message, now, out, origin=message.origin)
        return True

    def _departed(self, sender: str, message: m.Departed, now: float, out: list[Output]) -> None:
        """A member is out of the cube: forget its advertisement (if it is the incarnation that
        departed) and stop routing toward it; pass the news down the broadcast tree."""
        if self._relay(sender, message, now, out):
            self.forget_origin(message.node, message.incarnation, now, out)

    def forget_origin(self, origin: str, incarnation: int, now: float, out: list[Output]) -> None:
        if origin == self.node_id:
            return
        self._owed_retracts.pop(origin, None)  # out of the cube, with what it held
        known = self.origin_versions.get(origin)
        gone = incarnation or (known[0] if known is not None else 0)  # 0: the one known
        if gone:
            self._departed_incarnations[origin] = max(
                gone, self._departed_incarnations.get(origin, 0)
            )
        if known is None or (incarnation and known[0] > incarnation):
            return
        self.origin_versions.pop(origin, None)
        self.origin_positions.pop(origin, None)
        self.origin_addresses.pop(origin, None)
        self.ads.remove_holder(origin, origin)
        if self.schemas.set_origin(origin, frozenset()):
            self._announce(now, out)
        for key, toward in self._toward.items():
            if origin in toward:
                self._toward[key] = shared_origins(toward - {origin})
        # only what was sent toward it changes: narrowed (what such a node covered and still
        # needs is sent where it went, ``_narrow``); nothing goes anywhere new
        sent_toward = [
            node for node in self.poset if any(origin in labels for labels in node.sent.values())
        ]
        self._reroute(now, out, only=sent_toward, reconcile=True)

    def announce_departure(
        self,
        node: str,
        incarnation: int,
        positions: tuple[int, ...],
        *,
        failed: bool,
        since: float,
        now: float,
        successor: str = "",
        successor_address: str = "",
    ) -> list[Output]:
        """This node took the place of ``node`` (or is ``node``, leaving, with the ``successor``
        that adopted its peers): tell the whole cube (``sp.departed``)."""
        out: list[Output] = []
        message = m.Departed(
            origin=self.node_id,
            origin_position=self.view.root_position,
            node=node,
            incarnation=incarnation or self.origin_versions.get(node, (0, 0))[0],
            positions=positions,
            failed=failed,
            since=since,
            successor=successor,
            successor_address=successor_address,
        )
        self.broadcast(message, now, out)
        self.forget_origin(node, message.incarnation, now, out)
        return out

    def broadcast(self, message: Broadcast, now: float, out: list[Output]) -> None:
        """Send ``message`` (its ``origin_position`` is this node's root) down this node's tree;
        the receivers relay it (``sp.departed``, ``sp.returned``, ``sp.merge``,
        ``sp.reconnected``)."""
        self._relay(self.node_id, message, now, out)

    # -- the cube changes ---------------------------------------------------------------------
    def neighbour_restarted(self, node: str, now: float) -> list[Output]:
        """``node`` restarted (a newer incarnation spoke): see "When the cube changes"."""
        out: list[Output] = []
        source = superpeer_source(node)
        for sid in list(self.poset.ids_of(source)):
            self._toward.pop((source, sid), None)
            self._after_removal(self.poset.remove(source, sid, self._wants), now, out)
        self._ghosts.pop(node, None)
        self._owed_retracts.pop(node, None)  # it restarted empty
        self._early = [entry for entry in self._early if entry[0] != node]
        neighbour = node in self.view.neighbours()
        # What was sent to it may have reached the new incarnation (sent once this node knew
        # of it) or been lost with the old one (a link's queue is dropped when the other side
        # turns out to be new): send again what it must hold, withdraw the rest.
        self._unmark_sent(node, now, out, retract=neighbour)
        self._restarted.add(node)
        if neighbour:
            self._lookups_lost(node, now, out)
            self._advertise_to(node, now, out)
        self._reroute(now, out)
        return out

    def _advertise_to(self, node: str, now: float, out: list[Output]) -> None:
        """Every advertisement whose tree goes from here to ``node``: a new incarnation of it
        starts with an empty index, and what was sent to its place may be lost (above)."""
        for position, message in self._advertisements():
            if node in tree_children(self.view, position):
                self._send(node, message, now, out, origin=message.origin)

    def _unmark_sent(self, node: str, now: float, out: list[Output], *, retract: bool) -> None:
        """Nothing sent to ``node`` counts as held there any more (the caller routes again what
        it must hold). With ``retract``, what it may hold and no longer needs is withdrawn: it
        may have got it after all (a restart known while it was in the view was sent routes at
        once, and they reached the new incarnation)."""
        for held in self.poset:
            if node in held.sent:
                self.poset.unmark_sent(held, node)
                if retract and not self._wants(held, node):
                    self._send(node, m.Retract(id=held.wire_id), now, out, sub=held.wire_id)

    def topology_changed(self, view: TopologyView, now: float) -> list[Output]:
        """The hypercube around this node changed; see "When the cube changes" in the module
        docstring."""
        out: list[Output] = []
        old = self.view
        if old is view:
            return out
        self._routes_changed_at = self.clock.now(now)
        settle = now + self.config.settle_seconds
        self._recent.append((old, settle))
        self.view = view
        if view.dimension == 0:
            # alone in a cube: every other origin is out of it, its departure announced here
            # or not (see "When the cube changes")
            for origin in sorted(set(self.origin_versions) - {self.node_id}):
                self.forget_origin(origin, 0, now, out)
        for departed in sorted(old.neighbours() - view.neighbours()):
            self._ghosts[departed] = settle
            self._lookups_lost(departed, now, out)
        for returned in view.neighbours() & self._ghosts.keys():
            del self._ghosts[returned]
            if returned in self._restarted:
                # what was sent to its place went to the process it restarted as, before it
                # was a member there: none of it counts
                self._restarted.discard(returned)
                self._unmark_sent(returned, now, out, retract=True)
        # one that restarted away from the view and enters it now is a member: what it is sent
        # from now on reaches the process it is (a later flap out of the view and back is an
        # ordinary ghost's, whose routes stay until the window closes)
        self._restarted -= view.neighbours() - old.neighbours()
        early, self._early = self._early, []
        for sender, message, received, at in early:
            if sender in view.neighbours():
                self._route_message(sender, message, received, now, out)
            elif at > now:
                self._early.append((sender, message, received, at))
        if view.root_position != old.root_position:
            self._moved = True
        self._announce(now, out)
        self._spread_elements(old, now, out)
        self._spread_broadcasts(old, now, out)
        self._owed_after |= view.neighbours() - old.neighbours()
        self._reroute(now, out)
        self._schedule_settle(now)
        return out

    def _spread_broadcasts(self, old: TopologyView, now: float, out: list[Output]) -> None:
        """Every new edge of a recent broadcast's tree carries it (the receivers drop repeats)."""
        for message, until in list(self._broadcasts.values()):
            if until < now:
                continue
            before = set(tree_children(old, message.origin_position))
            for child in tree_children(self.view, message.origin_position):
                if child not in before:
                    self._send(child, message, now, out, origin=message.origin)

    def _spread_elements(self, old: TopologyView, now: float, out: list[Output]) -> None:
        """Every new edge of an origin's tree carries that origin's whole advertisement (this
        node's own included, unless it moved and announced itself anew)."""
        for position, message in self._advertisements():
            if message.origin == self.node_id and position != old.root_position:
                continue  # it moved: ``_announce`` sent it down the whole new tree
            before = set(tree_children(old, position))
            for child in tree_children(self.view, position):
                if child not in before:
                    self._send(child, message, now, out, origin=message.origin)

    def _advertisements(self) -> Iterator[tuple[int, m.Elements]]:
        """What this node passes on, each with its tree's root position: its own advertisement
        (once announced) and every other origin's that it holds."""
        if self._version:
            yield (
                self.view.root_position,
                m.Elements(
                    origin=self.node_id,
                    origin_position=self.view.root_position,
                    elements=tuple(sorted(self._announced, key=repr)),
                    version=self._version,
                    incarnation=self.incarnation,
                    address=self.address,
                    axioms=tuple(sorted(self._announced_axioms, key=repr)),
                ),
            )
        for origin in sorted(set(self.ads.origins()) | set(self.schemas.origins())):
            if origin == self.node_id:
                continue
            position = self.origin_positions.get(origin)
            elements = self.ads.elements(origin)
            axioms = self.schemas.of_origin(origin)
            if position is None or not (elements or axioms):
                continue
            incarnation, version = self.origin_versions.get(origin, (0, 0))
            yield (
                position,
                m.Elements(
                    origin=origin,
                    origin_position=position,
                    elements=tuple(sorted(elements, key=repr)),
                    version=version,
                    incarnation=incarnation,
                    address=self.origin_addresses.get(origin, ""),
                    axioms=tuple(sorted(axioms, key=repr)),
                ),
            )

    def _schedule_settle(self, now: float) -> None:
        at = now + self.config.settle_seconds
        self._settle_at = at if self._settle_at is None else max(self._settle_at, at)

    def recent_positions(self) -> set[int]:
        """The positions this node holds, and held in the views of the last ``settle_seconds``."""
        positions = set(self.view.positions)
        for view, _ in self._recent:
            positions |= set(view.positions)
        return positions

    def next_deadline(self) -> float | None:
        """When ``timer`` must next be called (None: nothing is waited for)."""
        due = self._rerouting.due_at
        if due is None or (self._settle_at is not None and self._settle_at < due):
            return self._settle_at
        return due

    def settling(self) -> bool:
        """Whether old routes are still kept after a change (the simulator waits for the end)."""
        return self._settle_at is not None

    def rerouting(self) -> int:
        """Subscriptions still to route again in the running pass, plus one for a next pass
        (``superpeer.rerouting``): while any is left, the timer is due at once."""
        return len(self._rerouting)

    def timer(self, now: float) -> list[Output]:
        """The settle window closed: remove ghosts, keep exactly what the current view needs.
        And the next slice of a rerouting."""
        out: list[Output] = []
        self._prune_relayed(now)
        if self._settle_at is not None and now >= self._settle_at:
            self._settled(now, out)
        self._continue_rerouting(now, out)
        return out

    def _settled(self, now: float, out: list[Output]) -> None:
        self._settle_at = None
        self._recent = [(v, at) for v, at in self._recent if at > now]
        for sender, message, _, at in self._early:
            if at <= now:
                self._drop(out, now, message, sender, "its sender never became a neighbour")
        self._early = [entry for entry in self._early if entry[3] > now]
        for ghost, at in sorted(self._ghosts.items()):
            if at > now:
                continue
            del self._ghosts[ghost]
            self._restarted.discard(ghost)
            source = superpeer_source(ghost)
            for sid in self.poset.ids_of(source):
                self._toward.pop((source, sid), None)
                self._after_removal(self.poset.remove(source, sid, self._wants), now, out)
        self._rerouting.ask(self.clock.now(now), now, reconcile=True)
        later = [at for _, at in self._recent] + list(self._ghosts.values())
        later += [entry[3] for entry in self._early]
        if later:
            self._settle_at = min(later)

    def retire(self, now: float) -> list[Output]:
        """This super-peer is leaving the backbone: withdraw, network-wide, every element it
        announced, so no subscription keeps travelling toward an origin that is gone."""
        out: list[Output] = []
        if self._announced or self._announced_axioms:
            self._version += 1
            message = m.Elements(
                origin=self.node_id,
                origin_position=self.view.root_position,
                elements=(),
                version=self._version,
                incarnation=self.incarnation,
                address=self.address,
            )
            self._announced = frozenset()
            self._announced_axioms = frozenset()
            for child in self.view.children(self.view.root_position):
                self._send(child, message, now, out, origin=self.node_id)
        return out

    # -- locating peers -----------------------------------------------------------------------
    # A look-up goes down the asker's spanning tree (N - 1 messages) and the answers come back up
    # it, each node answering its parent once the peer is found below it or every child has said
    # no (N - 1 more): a definite "not online" without timers. A look-up whose answers can no
    # longer arrive (a neighbour on the way departed) ends as "not online" at once.

    def locate(self, peer: str, message: m.Locate, now: float) -> list[Output]:
        """The network-wide look-up of ``message`` for local peer ``peer``, whatever super-peer
        it names (the node's direct look-up fell back to it: ``superpeer.locating``)."""
        out: list[Output] = []
        if peer in self.peers:
            self._locate(peer, message, now, out)
        return out

    def look_up(self, public_id: str, request: str, now: float) -> list[Output]:
        """A network-wide look-up for this node itself (a rendezvous whose owner is not where
        the notification said): answered by a ``Found`` action under ``request``."""
        out: list[Output] = []
        found = self._online_here(public_id)
        children = self.view.children(self.view.root_position)
        if found is not None or not children:
            out.append(Found(request, public_id, str((found or _NOWHERE)["superpeer"])))
            return out
        query = self._next_id()
        self._lookups[(self.node_id, query)] = _Lookup(
            public_id, None, set(children), request=request
        )
        relay = m.LocateQuery(
            query=query,
            origin=self.node_id,
            origin_position=self.view.root_position,
            public_id=public_id,
        )
        for child in children:
            self._send(child, relay, now, out, origin=self.node_id)
        return out

    def lookups_waiting(self, peer: str) -> int:
        state = self.peers.get(peer)
        return 0 if state is None else state.lookups

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
                request_label(message),
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
            self._drop(out, now, message, neighbour, "not down the query's tree, or a repeat")
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
            self._drop(out, now, message, neighbour, "an answer nobody here waits for")
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
        if lookup.asker is None:  # this node's own (``look_up``)
            out.append(Found(lookup.request, lookup.public_id, found.superpeer if found else ""))
            return
        assert lookup.peer is not None
        state = lookup.asker
        state.lookups -= 1
        if self.peers.get(lookup.peer) is not state or not state.attached:
            return  # an answer is only worth something now: nothing is kept for later
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
    def _targets(self, node: PosetNode) -> set[str]:
        """The origins ``node``'s subscription travels toward: for a local subscriber every
        origin covering it, for a relayed one what its senders asked."""
        targets: set[str] = set()
        positions = self.origin_positions
        if len(positions) <= 1 and (not positions or self.node_id in positions):
            return targets  # no other origin known (a core just made): nowhere to go
        for source, ids in node.sources.items():
            if source.kind == PEER:
                targets.update(self._covering_origins(node))
            else:
                for sid in ids:
                    targets.update(self._toward.get((source, sid), ()))
        targets.discard(self.node_id)
        return {t for t in targets if t in self.origin_positions}

    def _goes_toward(self, node: PosetNode, origin: str) -> bool:
        """Whether ``origin`` is among ``_targets(node)``: asked of every node each time an
        origin's elements change, so one origin's elements are looked at, not every origin's
        (``ads.covers`` decides as ``ads.covering_origins`` does)."""
        if origin == self.node_id or origin not in self.origin_positions:
            return False
        for source, ids in node.sources.items():
            if source.kind == PEER:
                if self.ads.covers(origin, node.subscription):
                    return True
            elif any(origin in self._toward.get((source, sid), ()) for sid in ids):
                return True
        return False

    def _covering_origins(self, node: PosetNode) -> frozenset[str]:
        """``ads.covering_origins`` of ``node``'s subscription, remembered until the
        advertisements change (at most ``_COVERING_MEMO`` nodes)."""
        if self._covering_generation != self.ads.generation or len(self._covering) > _COVERING_MEMO:
            self._covering.clear()
            self._covering_generation = self.ads.generation
        found = self._covering.get(node.id)
        if found is None:
            found = shared_origins(frozenset(self.ads.covering_origins(node.subscription)))
            self._covering[node.id] = found
        return found

    def _destinations(self, node: PosetNode) -> dict[str, set[str]]:
        """Per neighbour, the origins ``node`` must be sent toward through it (current view)."""
        hops: dict[str, set[str]] = {}
        for origin in self._targets(node):
            hop = tree_parent(self.view, self.origin_positions[origin])
            if hop is not None:
                hops.setdefault(hop, set()).add(origin)
        return hops

    def _wants(self, node: PosetNode, destination: str) -> set[str]:
        return self._destinations(node).get(destination, set())

    def _route(
        self, node: PosetNode, now: float, out: list[Output], *, since: float | None = None
    ) -> None:
        """Send ``node`` where it is missing (additions only: removals wait for ``_reconcile``)."""
        missing = self.poset.missing(node, self._destinations(node))
        for destination, origins in sorted(missing.items()):
            self._forward(node, destination, origins, now, out, since=since)

    def _reroute(
        self,
        now: float,
        out: list[Output],
        *,
        only: list[PosetNode] | None = None,
        toward: str | None = None,
        reconcile: bool = False,
    ) -> None:
        """Route again (``_route``) every subscription held, or ``only`` those, those going
        ``toward`` an origin if given, reconciled first if ``reconcile``: a pass asked of
        ``superpeer.rerouting``, its first slice now and the rest from the timer."""
        self._rerouting.ask(self.clock.now(now), now, only=only, toward=toward, reconcile=reconcile)
        self._continue_rerouting(now, out)

    def _continue_rerouting(self, now: float, out: list[Output]) -> None:
        """The next ``routings_per_step`` subscriptions of the rerouting's pass
        (``superpeer.rerouting``): each reconciled (``_narrow``) if asked, then all routed
        together (``_route_many``), as routes needed since the pass was asked for. Once no
        pass is left, what is owed to neighbours back in the view is retracted, less what was
        sent to them again."""
        queue = self._rerouting
        if queue:
            self.statistics.rerouted += 1
            since, steps = queue.take(self.config.routings_per_step, self.poset.general_first)
            nodes = []
            for step in steps:
                node = step.node
                if not self.poset.holds(node):
                    continue  # removed since the pass began
                if step.toward is not None and not any(
                    self._goes_toward(node, origin) for origin in step.toward
                ):
                    continue
                if step.reconcile:
                    self._narrow(node, now, out)
                nodes.append(node)
            self._route_many(nodes, now, out, since=since)
        if not queue and self._owed_after:
            for neighbour in sorted(self._owed_after & self.view.neighbours()):
                self._pay_owed_retracts(neighbour, now, out)
            self._owed_after.clear()

    def _route_many(
        self, nodes: list[PosetNode], now: float, out: list[Output], *, since: float | None = None
    ) -> None:
        """``_route`` of each of ``nodes`` (given most general first, ``general_first``), planned
        per destination (``poset.plans``): none is sent for labels that another of them, sent
        now and covering it, carries there, whatever the order guessed."""
        plans: dict[str, Plan] = {}
        for node in nodes:
            for destination, needed in self.poset.missing(node, self._destinations(node)).items():
                plan = plans.get(destination)
                if plan is None:
                    plan = plans[destination] = self.poset.plan()
                missing = plan.missing(node, needed)
                if missing:
                    plan.choose(node, missing)
        for destination in sorted(plans):
            for node, labels in plans[destination].thinned():
                self._forward(node, destination, set(labels), now, out, since=since)  # type: ignore[arg-type]

    def _reconcile(self, node: PosetNode, now: float, out: list[Output]) -> None:
        """Keep exactly what the current view needs of ``node``: narrow or withdraw it where it
        went for origins that no longer route through that hop, then add what is missing."""
        self._narrow(node, now, out)
        self._route(node, now, out)

    def _narrow(self, node: PosetNode, now: float, out: list[Output]) -> None:
        """Narrow or withdraw ``node`` where it went for origins that no longer route through
        that hop, sending there instead what it covered and still needs that hop."""
        if not node.sent:
            return
        wanted = self._destinations(node)
        neighbours = self.view.neighbours()
        for destination in sorted(node.sent):
            have = set(node.sent[destination])
            keep = have & wanted.get(destination, set())
            if keep == have:
                continue
            if destination not in neighbours:
                # nothing goes there any more: what it covered is not asked for (a withdrawal
                # per sent node, each looking through what it covers, took 1.7 s at 20,000
                # subscriptions when a neighbour failed)
                self.poset.unmark_sent(node, destination)
                self._retract_from_former(destination, node.wire_id, now, out)
                continue
            resend = self.poset.withdraw(node, destination, self._wants)
            if keep:
                self.poset.mark_sent(node, destination, keep)
                self._send_forward(node, destination, now, out)
            else:
                self._send(destination, m.Retract(id=node.wire_id), now, out, sub=node.wire_id)
            for below, labels in resend:
                missing = set(labels) - keep
                if missing:
                    self._forward(below, destination, missing, now, out)

    def _forward(
        self,
        node: PosetNode,
        destination: str,
        origins: set[str],
        now: float,
        out: list[Output],
        *,
        since: float | None = None,
    ) -> None:
        self.poset.mark_sent(node, destination, origins)
        self._send_forward(node, destination, now, out, since=since)

    def _send_forward(
        self,
        node: PosetNode,
        destination: str,
        now: float,
        out: list[Output],
        *,
        since: float | None = None,
    ) -> None:
        """``Forward`` with every origin ``node`` is now sent toward through ``destination``.
        ``since``: when the route became needed, if before now (a subscription passed on as it
        arrives keeps the time its access point took it; a route opened here now, by a new
        origin, a change of the cube or a covering subscription withdrawn, is not late)."""
        labels = sorted(node.sent.get(destination, ()))
        stamp = self.clock.now(now)
        message = m.Forward(
            id=node.wire_id,
            subscription=node.subscription,
            toward=tuple(
                (o, self.origin_positions[o]) for o in labels if o in self.origin_positions
            ),
            since=stamp if since is None else min(since, stamp),
        )
        self._send(destination, message, now, out, sub=node.wire_id)

    def _resend(self, resend: tuple, destination: str, now: float, out: list[Output]) -> None:
        for node, labels in resend:
            known = {o for o in labels if o in self.origin_positions}
            if known:
                self._forward(node, destination, known, now, out)

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
                else:
                    self._retract_from_former(destination, removed.node.wire_id, now, out)
            return
        self._reconcile(removed.node, now, out)

    def _retract_from_former(
        self, destination: str, wire_id: str, now: float, out: list[Output]
    ) -> None:
        """Withdraw ``wire_id`` from a super-peer that is no longer a neighbour: at once while
        it is a ghost (it still holds what came from here), else when it comes back."""
        if destination in self._ghosts:
            self._send(destination, m.Retract(id=wire_id), now, out, sub=wire_id)
        else:
            self._owed_retracts.setdefault(destination, set()).add(wire_id)

    def _pay_owed_retracts(self, neighbour: str, now: float, out: list[Output]) -> None:
        """``neighbour`` is back in the view: withdraw what it was sent while it was away and
        may still hold (not what was sent there again since: that ``Forward`` replaced it)."""
        owed = self._owed_retracts.pop(neighbour, set())
        sent_again = {n.wire_id for n in self.poset if neighbour in n.sent}
        for wire_id in sorted(owed - sent_again):
            self._send(neighbour, m.Retract(id=wire_id), now, out, sub=wire_id)

    def _announcement(self) -> tuple[frozenset[Element], frozenset[qel.Axiom]]:
        """What this origin stands for: its peers' elements closed under every schema axiom it
        knows (it entails its peers' publications under the same axioms:
        ``superpeer.schemas``), summarised as configured, and its peers' axioms."""
        current = self.schemas.schema.close(self.ads.elements(self.node_id))
        if self.config.summarise_values_above is not None:
            current = summarise(current, self.config.summarise_values_above)
        return current, self.schemas.local()

    def _too_large(self, announcement: tuple[frozenset[Element], frozenset[qel.Axiom]]) -> str:
        """Why the ``Elements`` announcing ``announcement`` could not travel ("": it can). It
        is the whole set, so one message that no frame carries would leave every other
        super-peer with the previous one, and subscriptions unforwarded."""
        current, axioms = announcement
        message = m.Elements(
            origin=self.node_id,
            origin_position=self.view.root_position,
            elements=tuple(current),
            version=self._version + 1,
            incarnation=self.incarnation,
            address=self.address,
            axioms=tuple(axioms),
        )
        size = len(wire.encode(message))
        most = self.config.max_elements_bytes
        if size <= most:
            return ""
        return (
            f"this super-peer's advertisement to the network would be {size} bytes, more than "
            f"max_elements_bytes ({most}): advertise a schema rather than its properties, or a "
            "property rather than its values"
        )

    def _announce(
        self,
        now: float,
        out: list[Output],
        announcement: tuple[frozenset[Element], frozenset[qel.Axiom]] | None = None,
    ) -> None:
        """Broadcast to the whole backbone the change in what this origin stands for
        (``_announcement``)."""
        current, axioms = announcement or self._announcement()
        if current == self._announced and axioms == self._announced_axioms and not self._moved:
            return
        self._announced = current
        self._announced_axioms = axioms
        self._moved = False
        if not current and not axioms and self._version == 0:
            return  # nothing ever announced: nothing to say
        self._version += 1
        self._routes_changed_at = self.clock.now(now)
        message = m.Elements(
            origin=self.node_id,
            origin_position=self.view.root_position,
            elements=tuple(sorted(current, key=repr)),
            version=self._version,
            incarnation=self.incarnation,
            address=self.address,
            axioms=tuple(sorted(axioms, key=repr)),
        )
        for child in self.view.children(self.view.root_position):
            self._send(child, message, now, out, origin=self.node_id)

    def _retract(self, source: Source, sid: str, now: float, toward: frozenset[str] | None) -> None:
        node = self.poset.node_of(source, sid)
        if node is not None:
            self._retracted.pop((source, sid), None)
            self._retracted[(source, sid)] = (node.subscription, now, self.clock.now(now), toward)

    def _late_for_retracted(
        self,
        notification: m.Notification,
        now: float,
        superpeers: dict[str, set[str]],
        matched: dict[str, dict[str, list[bool]]],
    ) -> None:
        """A notification published before a subscription was retracted, and arriving after
        (routes take time to change: ``settle_seconds`` is a guess, and a link backed up behind
        a busy node, or cut for a while, delivers seconds later): it still goes where the
        subscription came from. A neighbour's access point delivers what its peer withdrew
        after it was published; a moved peer's old access point forwards it (the node)."""
        horizon = now - self.config.retracted_seconds
        while self._retracted and next(iter(self._retracted.values()))[1] < horizon:
            self._retracted.popitem(last=False)
        for peer in [p for p, at in self._moved_away.items() if at < horizon]:
            del self._moved_away[peer]
        for (source, sid), (subscription, _, stamp, toward) in reversed(self._retracted.items()):
            if stamp <= notification.published_at:
                break  # newest first: the rest were retracted before it was published
            if toward is not None and notification.origin not in toward:
                continue
            old, new = concerns(subscription, notification)
            if not (old or new):
                continue
            self.statistics.late += 1
            if source.kind == PEER:
                mine = matched.setdefault(source.name, {})
                was_old, was_new = mine.get(sid, NEITHER)
                mine[sid] = (was_old or old, was_new or new)
            elif source.name not in superpeers:
                superpeers.setdefault(source.name, set()).add(sid)

    def _children(self, root_position: int) -> list[str]:
        """Our children in the tree rooted at ``root_position``, in the current view and in the
        views of the last ``settle_seconds`` (make before break)."""
        children = list(tree_children(self.view, root_position))
        for view, _ in self._recent:
            children += [c for c in tree_children(view, root_position) if c not in children]
        return children

    def _dispatch(self, notification: m.Notification, now: float, out: list[Output]) -> None:
        """Down the origin's tree to the children whose subscriptions match either side of the
        change (``superpeer.versions``), and to every local peer that one of its subscriptions
        makes concerned, with what the change is for it."""
        origin = notification.origin
        self._relayed[(origin, relay_key(notification), notification.origin_position)] = (
            now + self.config.settle_seconds
        )
        matched: dict[str, dict[str, tuple[bool, bool]]] = {}
        """Per local peer, per subscription, which sides it matches (old, new)."""
        superpeers: dict[str, set[str]] = {}
        toward = self._toward
        for side, version in enumerate(sides(notification)):
            if version is None:
                continue
            for node in self.poset.match_index(version):
                for source, ids in node.sources.items():
                    if source.kind == PEER:
                        mine = matched.get(source.name)
                        if mine is None:
                            # the common case, in one pass in C (a peer may name 1,000)
                            matched[source.name] = dict.fromkeys(ids, ONLY[side])
                            continue
                        for sid in ids:
                            was_old, was_new = mine.get(sid, NEITHER)
                            mine[sid] = (was_old or side == 0, was_new or side == 1)
                    else:
                        wanted = [sid for sid in ids if origin in toward.get((source, sid), ())]
                        if wanted:
                            superpeers.setdefault(source.name, set()).update(wanted)
        if self._retracted:
            self._late_for_retracted(notification, now, superpeers, matched)
        if superpeers:
            relay = _with(notification, hops=notification.hops + 1)
            targets = [c for c in self._children(notification.origin_position) if c in superpeers]
            targets += sorted(g for g in self._ghosts if g in superpeers and g not in targets)
            for target in targets:
                # ``sub`` names the target's subscriptions this notification answers (the
                # analytics measure forwarding efficiency with it).
                answered = ",".join(sorted(superpeers[target]))
                self._send(target, relay, now, out, origin=origin, sub=answered)
        for peer in sorted(matched):
            if peer not in self.peers and peer not in self._moved_away:
                continue
            self.statistics.delivered += 1
            notify = notify_of(notification, matched[peer])
            out.append(Deliver(peer, notify))

    def _prune_relayed(self, now: float) -> None:
        relayed = self._relayed
        while relayed:
            key, at = next(iter(relayed.items()))
            if at > now:
                break
            del relayed[key]

    # -- plumbing -----------------------------------------------------------------------------
    def _next_id(self) -> str:
        self._message_number += 1
        return f"{self.node_id}#{self._message_number}"

    def _send(
        self, target: str, message: object, now: float, out: list[Output], **trace: str | None
    ) -> None:
        message_id = self._next_id()
        data = wire.encode(message, message_id)
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.statistics.sent[kind] += 1
        self.statistics.bytes_sent[kind] += len(data)
        out.append(ToSuperPeer(target, message, data, message_id))
        self._trace(
            out, now, "send", message, neighbour=target, size=len(data), msg=message_id, **trace
        )

    def _reply(self, peer: str, message: object, now: float, out: list[Output]) -> None:
        out.append(self._to_peer(peer, message))

    def _to_peer(self, peer: str, message: object) -> ToPeer:
        """``message`` for local peer ``peer``, encoded (a publisher's ``Ack`` is carried in the
        ``LogPublication`` it waits for: ``superpeer._replication``)."""
        return ToPeer(peer, message, wire.encode(message, self._next_id()))

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
        reason: str | None = None,
    ) -> None:
        if not self.config.tracing:
            return
        out.append(
            trace_record(
                self.node_id,
                now,
                event,
                message,
                size=size,
                msg=msg,
                peer=peer,
                neighbour=neighbour,
                origin=origin,
                sub=sub,
                hops=hops,
                reason=reason,
            )
        )


def relay_key(notification: m.Notification) -> tuple[str, str, int]:
    """One change of a resource: its owner, its id and its version. The owner too: ids are the
    publisher's own, and two peers behind one origin may publish under the same id (the second
    was dropped here as a repeat of the first)."""
    return (notification.owner, notification.publication.id, notification.version)


def same_subscription(held: qel.Subscription, subscription: qel.Subscription) -> bool:
    """Whether ``subscription``, sent under an id that already names the poset node holding
    ``held``, is that same subscription again (a repeat, or a ``Forward`` that changes only where
    it travels), as ``SubscriptionPoset.insert`` has it: the same key, or an equivalent one.

    Comparing keys alone is wrong here: equivalent subscriptions share one node, and its
    subscription is whichever made the node (another source's, or another one again once that
    source is gone), so what a source holds under an id is only known up to equivalence. With
    keys, a neighbour's ``Forward`` of a subscription equivalent to one held here already was
    taken the first time and dropped every later time, so the routes it narrows or widens
    stayed as they were; and a peer repeating its own subscription was refused ("already used
    for another subscription") because another peer had made the node."""
    if held.key == subscription.key:
        return True
    return qel.covers(held, subscription) and qel.covers(subscription, held)


def broadcast_key(message: Broadcast) -> tuple[object, ...]:
    """What tells one broadcast from another (a repeat down another tree has the same key)."""
    if isinstance(message, m.Departed):
        return (m.Departed.KIND, message.origin, message.node, message.incarnation, message.failed)
    if isinstance(message, m.Merge):
        return (m.Merge.KIND, message.origin, message.incarnation, message.into_root)
    if isinstance(message, m.Reconnected):
        return (m.Reconnected.KIND, message.origin, message.neighbour, message.since)
    return (m.Returned.KIND, message.origin, message.incarnation)


def tree_children(view: TopologyView, root_position: int) -> tuple[str, ...]:
    """``view.children``, or none when ``root_position`` is outside the view's cube (an origin
    whose position the cube lost when it shrank, until it announces its new one)."""
    if not 0 <= root_position < 1 << view.dimension:
        return ()
    return view.children(root_position)


def tree_parent(view: TopologyView, root_position: int) -> str | None:
    """``view.parent``, or None when ``root_position`` is outside the view's cube."""
    if not 0 <= root_position < 1 << view.dimension:
        return None
    return view.parent(root_position)


def trace_record(
    node: str,
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
    reason: str | None = None,
) -> TraceRecord:
    """The trace record of ``event`` for ``message``, its fields filled from the message where it
    has them."""
    publication = getattr(message, "publication", None)
    if isinstance(publication, qel.Publication):
        publication = publication.id  # resource messages name it by its id
    if hops is None and isinstance(message, m.Notification | m.Notify):
        hops = message.hops
    if sub is None and isinstance(message, m.Subscribe | m.Unsubscribe | m.Forward | m.Retract):
        sub = message.id
    if origin is None and isinstance(message, m.Notification | m.Elements | m.Notify):
        origin = message.origin
    return TraceRecord(
        ts=now,
        node=node,
        event=event,
        kind=type(message).KIND,  # type: ignore[attr-defined]
        msg=msg,
        pub=publication,
        sub=sub,
        origin=origin,
        peer=peer,
        neighbour=neighbour,
        bytes=size,
        hops=hops,
        reason=reason,
    )


def _with(notification: m.Notification, **changes: object) -> m.Notification:
    fields = {
        "origin": notification.origin,
        "origin_position": notification.origin_position,
        "publication": notification.publication,
        "owner": notification.owner,
        "access_point": notification.access_point,
        "hops": notification.hops,
        "published_at": notification.published_at,
        "version": notification.version,
        "previous": notification.previous,
        "retracted": notification.retracted,
        "expires": notification.expires,
        "extension": notification.extension,
        "replayed": notification.replayed,
    }
    fields.update(changes)
    return m.Notification(**fields)  # type: ignore[arg-type]


_NOWHERE: dict[str, object] = {"online": False, "address": "", "superpeer": "", "access_point": ""}


def _fields_of_where(answer: m.LocateAnswer) -> dict[str, object]:
    return {name: getattr(answer, name) for name in _NOWHERE}


def _term_text(term: qel.Term) -> str:
    if isinstance(term, qel.URI):
        return f"<{term.value}>"
    return repr(term.lexical)
