"""Every message the network exchanges, defined once: what the sans-IO cores consume and produce and
what the daemons put on the wire.

Messages are frozen, keyword-only dataclasses carrying language objects (``qel.Subscription``, ...);
``wire.codec`` turns them into msgpack and back by field type. Each has a ``KIND`` that names it on
the wire. Three families:

* peer -> access point: ``Advertise``, ``PublishSchema`` (RDFS axioms entailment uses),
  ``Subscribe``, ``Unsubscribe``, ``Publish`` (a first
  publication, an update or an extension of a resource), ``Withdraw`` (a retraction), ``Leave``,
  ``Locate``, ``Moved`` (the peer was attached elsewhere before), ``Delivered`` (notifications
  are safely in the peer's inbox);
* access point -> peer: ``Notify``, ``Ack``, ``Refused``, ``Located``, ``Expired`` (kept
  notifications that were dropped while the peer was away);
* super-peer <-> super-peer: ``Elements`` (advertisement elements spreading down their origin's
  tree), ``Forward`` / ``Retract`` (a subscription travelling toward covering origins, and its
  withdrawal), ``Notification`` (a publication travelling down its origin's tree), ``LocateQuery``
  / ``LocateAnswer`` (a look-up of a peer's address down the asker's tree, and the answers gathered
  back up), ``LocateDirect`` / ``LocateReply`` (a look-up sent to the one super-peer the asker
  named, and its answer), ``Heartbeat`` (an idle link is alive), ``Departed`` (a member left or
  failed, broadcast), ``Reconnected`` (a neighbour taken for failed is back in place,
  broadcast), ``Evicted`` (the sender was removed from the cube), ``CatchUp`` / ``Mail``
  (publications an access point missed, from their origin's log), ``Handover`` / ``HandoverDone`` /
  ``HandoverReceived`` (a peer's kept notifications move to its new access point, deleted there
  once received), ``Adopt`` (a leaving super-peer hands its peers to a successor),
  ``RendezvousRequest`` / ``RendezvousChunk`` (a resource asked of its owner's access point, and
  its bytes on their way to the requester's; ``superpeer.rendezvous``).

Resources (seed 004, Section 5.1): ``Fetch``, ``Upload``, ``Collect``, ``Collected`` (peer ->
access point) and ``UploadWanted``, ``FileReady``, ``FileChunk``, ``FetchFailed`` (access point ->
peer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Final

import qel
from qel.advertisements import Element
from qel.axioms import Axiom

# -- peer -> access point -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Advertise:
    """The peer's whole advertisement; it replaces the previous one."""

    KIND: ClassVar[str] = "peer.advertise"
    advertisement: qel.Advertisement


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishSchema:
    """RDFS axioms the peer publishes (seed 000): added to those it published before; they
    spread with the advertisements and publications are matched under their closure
    (``superpeer.schemas``)."""

    KIND: ClassVar[str] = "peer.publish_schema"
    axioms: tuple[Axiom, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """A subscription under an id the peer chose (unique among the peer's subscriptions)."""

    KIND: ClassVar[str] = "peer.subscribe"
    id: str
    subscription: qel.Subscription
    expires: float | None = None
    """When the access point retracts it as an unsubscription (an absolute time, seconds since
    the epoch, on the sender's clock; ``superpeer.expiry``); None: when the peer says so."""
    sent_at: float = 0.0
    """The sender's wall time when it sent this: the access point keeps ``expires - sent_at``
    of its own time (``clocks``, rule 8). 0: ``expires`` is on the receiver's clock already
    (a record written by the access point itself, or by an earlier version)."""
    on_change: bool = False
    """Also hear of extensions of a resource it matched already (``changed``, ``peer subscribe
    --on change``); by default a resource described in steps is heard of once, when what is
    known about it starts matching (``superpeer.versions``)."""
    active_since: float = 0.0
    """A subscription the peer sends again (``peer.session.plan_resend``): the hybrid time from
    which an access point had it active (``Ack.active_since``). Where the peer arrives after a
    move, its new access point takes it as the subscription's activation, never later than
    now: what a catch-up finds for it is owed from then, not from when it was sent again
    (``clocks``, rule 5). 0: a new subscription, active from when it arrives."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsubscribe:
    """Withdraw subscription ``id``. With ``subscription``: a withdrawal told again after a move
    (``peer.session.plan_resend``): the subscription was active at a previous access point from
    ``active_since`` until ``withdrawn_at`` (the hybrid readings that access point's ``Ack``s
    gave), and that access point may have failed before it caught up what the subscription was
    owed in that window; the new one's catch-up covers it. Acknowledged whether or not it holds
    the id."""

    KIND: ClassVar[str] = "peer.unsubscribe"
    id: str
    subscription: qel.Subscription | None = None
    active_since: float = 0.0
    withdrawn_at: float = 0.0


CHANGE_KINDS = ("added", "changed", "removed")
"""What a change of a resource is for one subscriber (MDV, seed 003): it matches the new version
and did not match the old one, it matches both, it matched the old one and not the new one (or
the resource was retracted)."""
GAP: Final = "gap"
"""A ``Notify`` that is no publication: an origin's log no longer reaches back to where a
catch-up for these subscriptions had to start (a partition or an absence longer than the log
keeps: ``superpeer._catchup``), so what it published before ``published_at`` may be missing."""
CHANGES = ("publish", "update", "extend")
"""What a ``Publish`` does to the owner's resource under the publication's id: a first
publication, a new version that replaces it (``update``), or triples added to it (``extend``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish:
    KIND: ClassVar[str] = "peer.publish"
    publication: qel.Publication
    change: str = "publish"
    expires: float | None = None
    """When the resource expires (absolute, like ``Subscribe.expires``): its notifications are
    no longer delivered from outboxes and its versions are forgotten. An update or extension
    without one keeps the resource's."""
    sent_at: float = 0.0
    """The sender's wall time when it sent this (``Subscribe.sent_at``; ``clocks``, rule 7)."""
    again: bool = False
    """Sent again because an access point acknowledged it with its own copy alone
    (``Ack.alone``, ``peer.kept``): where this node logged that very version it is answered
    as a repeat (whether a second copy is made since), not published again; anywhere else it
    is a publication like any other."""

    def __post_init__(self) -> None:
        if self.change not in CHANGES:
            raise ValueError(f"change must be one of {', '.join(CHANGES)}, not {self.change!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Withdraw:
    """The owner retracts its resource published under ``id``: subscribers it matched hear
    ``removed``."""

    KIND: ClassVar[str] = "peer.withdraw"
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Leave:
    """The peer leaves for good: its subscriptions and advertisement go with it."""

    KIND: ClassVar[str] = "peer.leave"


@dataclass(frozen=True, slots=True, kw_only=True)
class Moved:
    """The peer was attached to ``previous`` (at ``previous_address``) since ``since``: the
    hybrid time ``previous`` gave the peer when it arrived there (``Welcome.clock``; the peer's
    own wall time for a statement made before hybrid times existed). Sent first on a connection to another super-peer:
    the access point fetches what ``previous`` kept (``Handover``) and what was published while
    the peer had no working access point (``CatchUp``). ``signature`` (RSA-PSS over
    ``crypto.move_transcript``; empty on a plaintext network) lets ``previous`` check that the
    peer itself asked for the move. Answered by ``Ack`` (``moved``)."""

    KIND: ClassVar[str] = "peer.moved"
    previous: str
    previous_address: str
    since: float
    signature: bytes
    missing_since: float = 0.0
    """From when ``previous`` said, in the last ``Welcome`` or ``Clock`` the peer heard from
    it, that what it delivered may be incomplete (0: it did not). If ``previous`` never
    answers (lost for good), the catch-up starts there when that is earlier than ``since``:
    what reached ``previous`` late (a healed partition's publications, a catch-up's answer)
    after the peer left it is lost with it. Not part of the signed statement: ``since`` orders
    the peer's moves; this only widens what the new access point asks the origins for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivered:
    """Every ``Notify`` up to ``through`` (its ``delivery`` number) is durably in the peer's
    inbox: the access point may forget them. Not answered."""

    KIND: ClassVar[str] = "peer.delivered"
    through: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Locate:
    """Where is the peer named ``public_id`` now (to fetch a resource from it directly)? Answered
    by ``Located`` under the same ``id``. Knowing a peer's public identifier gives its address
    only while it is online, and nothing else."""

    KIND: ClassVar[str] = "peer.locate"
    id: str
    public_id: str
    superpeer: str = ""
    """The super-peer the asker last knew the peer at (its notification's ``origin``): the
    access point asks it first, over the cube (``superpeer.locating``), and asks the whole
    network only when that one no longer knows where the peer is. Empty: ask the network."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetch:
    """The peer wants the resource of ``publication`` (owned by ``owner``, whose access point
    ``superpeer`` at ``access_point`` the notification named), checked against ``sha256`` and
    ``size`` (from the notification). The access point asks the owner's access point for a
    rendezvous and receives the file for the peer, whether the owner is online now or later
    (``superpeer.rendezvous``). Answered by ``Ack`` (``fetch <publication>``) once the request is
    durable, or ``Refused``. Asking again is the same rendezvous."""

    KIND: ClassVar[str] = "peer.fetch"
    publication: str
    owner: str
    superpeer: str
    access_point: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Upload:
    """The owner's answer to ``UploadWanted``: ``data`` from ``offset`` of the resource of
    rendezvous ``rendezvous``; ``error`` non-empty when the owner cannot serve it (the requester
    is told). Not answered."""

    KIND: ClassVar[str] = "peer.upload"
    rendezvous: str
    offset: int
    data: bytes
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Collect:
    """The requester asks its access point for ``length`` bytes of a rendezvous file from
    ``offset`` (at most the access point's window), as ``FileChunk`` s."""

    KIND: ClassVar[str] = "peer.collect"
    rendezvous: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Collected:
    """The requester holds the rendezvous file durably, verified (``ok``), or refused it
    (``ok`` false: its hash did not match): either way the access point forgets it."""

    KIND: ClassVar[str] = "peer.collected"
    rendezvous: str
    ok: bool


# -- access point -> peer -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Notify:
    """A publication for the peer, with the ids of the peer's subscriptions it matches.

    ``owner`` is the publishing peer's id and ``access_point`` its super-peer's address, so the
    subscriber can later fetch the resource or ask for a rendezvous. ``hops`` counts super-peer to
    super-peer messages on the way; ``published_at`` is the time the origin accepted it.
    ``delivery`` numbers the notifications of one access point's outbox for this peer, in order:
    the peer acknowledges them with ``Delivered`` (0 where no outbox is involved).
    """

    KIND: ClassVar[str] = "peer.notify"
    publication: qel.Publication
    subscriptions: tuple[str, ...]
    owner: str
    access_point: str
    origin: str
    hops: int
    published_at: float
    delivery: int = 0
    version: int = 0
    """The resource's version (0: its first publication); with ``owner`` and the publication's
    id it names one change, which the peer's inbox takes once."""
    kind: str = "added"
    """What changed for this peer (``superpeer.versions``): ``added``, ``changed``, ``removed``."""
    expires: float | None = None
    """``Notification.expires``: an outbox drops it, unsent, after this time."""
    steady: tuple[str, ...] = ()
    """Those of ``subscriptions`` that the resource matched already before this extension: the
    access point delivers it for them only if they asked (``Subscribe.on_change``)."""

    def __post_init__(self) -> None:
        if self.kind not in CHANGE_KINDS and self.kind != GAP:
            kinds = ", ".join((*CHANGE_KINDS, GAP))
            raise ValueError(f"kind must be one of {kinds}, not {self.kind!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """A request was applied; ``request`` names it (e.g. ``subscribe s1``)."""

    KIND: ClassVar[str] = "peer.ack"
    request: str
    active_since: float = 0.0
    """For a ``Subscribe``: the hybrid time from which the access point has the subscription
    active (for one it held already, from when it first had it); the peer keeps it and sends
    it back with the subscription (``Subscribe.active_since``). 0 for other requests."""
    withdrawn_at: float = 0.0
    """For an ``Unsubscribe``: the hybrid time of the withdrawal; the peer keeps it with the
    subscription's ``active_since`` for a while (``Unsubscribe.withdrawn_at``). 0 otherwise."""
    alone: bool = False
    """For a ``Publish``: the access point acknowledged it with its own log's copy alone (no
    neighbour answered for a second copy: ``superpeer._replication``, rule 3), so the
    publication is lost if that super-peer is lost for good before a neighbour answers. The
    peer keeps such a publication and sends it again on every connection, and now and then
    (``peer.kept``), until an ``Ack`` without ``alone``: its access point copied it since, or
    another one accepted it after a failover."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Located:
    """The answer to ``Locate``: whether the peer is online and, if so, its address as its
    access point sees it, and that super-peer's node id and address (all empty when offline or
    unknown)."""

    KIND: ClassVar[str] = "peer.located"
    id: str
    public_id: str
    online: bool
    address: str
    superpeer: str
    access_point: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    """A request was refused and changed nothing; ``reason`` says why, for the user."""

    KIND: ClassVar[str] = "peer.refused"
    request: str
    reason: str
    retry_after: float = 0.0
    """Seconds after which the same request would be accepted (the peer asked faster than its
    rate: ``superpeer.ratelimit``); the peer client sends it again then. 0: asking again will
    not help (and what older access points send)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.retry_after < math.inf:
            raise ValueError(f"retry_after must be a finite number >= 0, not {self.retry_after}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Expired:
    """``count`` notifications kept for the peer were dropped while it was away (``reason``: the
    retention period passed, or the per-peer cap was reached). Sent on the next connection; never
    silent."""

    KIND: ClassVar[str] = "peer.expired"
    count: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadWanted:
    """To an owner: send ``length`` bytes from ``offset`` of the resource of ``publication`` for
    rendezvous ``rendezvous`` (``requester`` asked for it), as ``Upload`` frames."""

    KIND: ClassVar[str] = "peer.upload_wanted"
    rendezvous: str
    publication: str
    requester: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FileReady:
    """To a requester: the resource of ``publication`` is in the access point's rendezvous
    directory, complete and checked against ``sha256`` and ``size``, or on its way there (sent
    when the fetch is accepted too); collect it (``Collect``): a window not all there yet is
    served as its bytes come. The requester checks ``sha256`` and ``size`` itself."""

    KIND: ClassVar[str] = "peer.file_ready"
    rendezvous: str
    publication: str
    owner: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FileChunk:
    """Bytes of a rendezvous file, from ``offset``, for its requester. ``window_end`` is where
    the bytes served for this ``Collect`` end (the access point serves at most its own window,
    which may be less than was asked): the requester asks for more when it has them all."""

    KIND: ClassVar[str] = "peer.file_chunk"
    rendezvous: str
    offset: int
    data: bytes
    window_end: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchFailed:
    """A fetch ended without the resource (the upload did not match the notification's hash,
    the owner could not serve it, ...); ``reason`` is for the user. Fetching again retries."""

    KIND: ClassVar[str] = "peer.fetch_failed"
    rendezvous: str
    publication: str
    owner: str
    reason: str


# -- super-peer <-> super-peer --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Elements:
    """Every advertisement element ``origin`` stands for now (version ``version`` of its
    ``incarnation``), spreading down the spanning tree rooted at ``origin_position``.

    The whole set, not a change: while the cube changes, two versions may reach a super-peer
    along different trees in either order, and a receiver keeps the newest (``incarnation``,
    ``version``) it has seen and ignores the others, so what it holds never goes back in time
    (an origin's advertisement changes rarely; the bytes are worth the certainty)."""

    KIND: ClassVar[str] = "sp.elements"
    origin: str
    origin_position: int
    elements: tuple[Element, ...]
    version: int
    incarnation: int = 0
    address: str = ""
    """Where the origin can be reached (to ask it for a catch-up)."""
    axioms: tuple[Axiom, ...] = ()
    """The RDFS axioms the origin's peers published (``superpeer.schemas``); ``elements`` are
    closed under every axiom the origin knows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """A subscription sent one hop toward some of the origins that may publish what it matches.

    ``id`` is the sender's id for it on this link; ``toward`` lists the origins (with their root
    positions) this hop is on the way to, all of them: sending the same id again replaces the
    list (a shorter list withdraws the subscription from the origins left out).
    """

    KIND: ClassVar[str] = "sp.forward"
    id: str
    subscription: qel.Subscription
    toward: tuple[tuple[str, int], ...]
    since: float = 0.0
    """When the subscription was made (the earliest of those it stands for, on their access
    points' clocks; 0: unknown): an origin it reaches later than routes take replays what it
    published since (``SuperPeerCore``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retract:
    """The sender withdraws the subscription it forwarded under ``id``."""

    KIND: ClassVar[str] = "sp.retract"
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Notification:
    """A publication travelling down the tree of ``origin`` (rooted at ``origin_position``)."""

    KIND: ClassVar[str] = "sp.notification"
    origin: str
    origin_position: int
    publication: qel.Publication
    owner: str
    access_point: str
    hops: int
    published_at: float
    version: int = 0
    previous: qel.Publication | None = None
    """The resource as it was before this version (for ``changed`` and ``removed``)."""
    retracted: bool = False
    """The resource is withdrawn: ``publication`` is its last version, matched as the old one."""
    extension: bool = False
    """``publication`` is ``previous`` with triples added (``Publish.change`` ``extend``)."""
    expires: float | None = None
    """The resource's expiry (``Publish.expires``): access points do not deliver it after."""
    replayed: bool = False
    """Sent again by its origin for a subscription that reached it late: relayed even where it
    passed before (the subscription's path is new), repeats dropped at the access points."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocateQuery:
    """A look-up of ``public_id`` started by ``origin`` (its ``query``), spreading down the
    spanning tree rooted at ``origin_position``."""

    KIND: ClassVar[str] = "sp.locate"
    query: str
    origin: str
    origin_position: int
    public_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LocateAnswer:
    """A subtree's answer to a ``LocateQuery``, sent to the neighbour the query came from once
    the peer is found or every child has answered (``online`` false: not in this subtree)."""

    KIND: ClassVar[str] = "sp.located"
    query: str
    origin: str
    public_id: str
    online: bool
    address: str
    superpeer: str
    access_point: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """Sent on a link to a neighbour that has carried nothing for a while (silence means
    failure), and at least every ``clock_sample_seconds`` on a busy one: each measures the
    neighbour's clock offset (``clocks.sample_of``). ``wall`` is the sender's wall time when it
    sent this; ``echo`` the ``wall`` of the last heartbeat it received from the receiver (0:
    none yet), which it held for ``held`` seconds."""

    KIND: ClassVar[str] = "sp.heartbeat"
    wall: float = 0.0
    echo: float = 0.0
    held: float = 0.0
    root: str = ""
    """The holder of position 0 of the sender's cube, as the sender knows it, and the cube's
    ``dimension``: what two cubes that meet after a partition compare (``superpeer._merging``);
    a member learns it from its parent in the tree of position 0. Empty: not known."""
    dimension: int = -1
    positions: tuple[int, ...] = ()
    """The positions the sender holds, in a heartbeat to a neighbour (empty in a probe): a
    member whose table gives one of them to another live member tells the sender it holds that
    place no more (``superpeer._merging``, "Stale holders")."""
    known: tuple[tuple[str, str], ...] = ()
    """Super-peers the sender knows, as ``(id, address)``, a few per heartbeat in turn
    (``superpeer._merging``, "Directory"): every member comes to know every other one's
    address, which a side of a cut needs to re-form when no member of it is a neighbour of
    another in the cube."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Departed:
    """Member ``node`` (its ``incarnation``; 0 if unknown) is out of the cube: it left, or it
    failed (``failed``) and was last heard from at ``since``. Broadcast down the tree rooted at
    ``origin_position`` by the super-peer that took its place: everyone forgets its
    advertisement; access points whose routes went through ``positions`` catch up on what they
    may have missed."""

    KIND: ClassVar[str] = "sp.departed"
    origin: str
    origin_position: int
    node: str
    incarnation: int
    positions: tuple[int, ...]
    failed: bool
    since: float
    """The hybrid time of the last frame the departed member is known to have sent (``clocks``,
    rule 5): what was published since may have been lost with it."""
    successor: str = ""
    """The super-peer that adopted the departed one's peers (a clean departure), where their
    kept notifications are to be asked for."""
    successor_address: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Returned:
    """``origin`` came back (restarted, or rejoined after an eviction) with the state of
    ``peers``: whoever now serves one of them and still waits for its handover asks again.
    Broadcast down the tree rooted at ``origin_position``."""

    KIND: ClassVar[str] = "sp.returned"
    origin: str
    origin_position: int
    incarnation: int
    peers: tuple[str, ...]
    address: str = ""
    """Where ``origin`` listens: a member that never met it may have to ask it for a peer."""
    cube: str = ""
    """When ``origin`` rejoined from another cube (a partition healed: ``superpeer._merging``),
    that cube's holder of position 0; every member that was not in it asks ``origin`` for what
    it published since the hybrid time ``since``."""
    since: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconnected:
    """``origin`` took its neighbour ``neighbour`` for failed and hears it again, the same
    process at the same place in this cube (one of the two was cut off, and the cut healed
    before the place changed hands): nothing was repaired, so no ``Departed`` says what the
    link between them dropped meanwhile. Every access point catches up on what its origins
    published since ``since`` (hybrid time: the last frame ``origin`` had from ``neighbour``)
    through ``positions`` (both ends' places). Broadcast down the tree rooted at
    ``origin_position``."""

    KIND: ClassVar[str] = "sp.reconnected"
    origin: str
    origin_position: int
    neighbour: str
    positions: tuple[int, ...]
    since: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Evicted:
    """The receiver is no longer a member (it was declared failed while it was unreachable):
    it must rejoin."""

    KIND: ClassVar[str] = "sp.evicted"
    reason: str
    incarnation: int
    """The receiver's incarnation that departed (an older one's eviction is stale)."""
    root: str = ""
    """The sender's cube (its holder of position 0 and its ``dimension``: ``Heartbeat.root``)
    and where the sender listens: if that cube is not the receiver's own and is the stronger
    of the two, the receiver's whole cube joins it (``superpeer._merging``); if it is the
    receiver's own, the receiver was replaced while unreachable and rejoins."""
    dimension: int = -1
    address: str = ""
    members: tuple[tuple[str, str], ...] = ()
    """Other members of the sender's cube (node, address), its neighbours: a receiver in the
    weaker cube probes them, so that it hears from a second member of the stronger one (it
    leaves its cube only for one it reaches twice over) even when it lost nobody else there."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Merge:
    """Two cubes met after a partition healed and the sender's cube is the weaker
    (``superpeer._merging``): every member of it (``root``, its holder of position 0) joins the
    stronger one through ``contacts`` (node, address). Broadcast down the tree rooted at
    ``origin_position``."""

    KIND: ClassVar[str] = "sp.merge"
    origin: str
    origin_position: int
    incarnation: int
    root: str
    into_root: str
    into_dimension: int
    contacts: tuple[tuple[str, str], ...]
    since: float = 0.0
    """From when the sender's side may have missed what the other side published (hybrid
    time): every member catches up from the earliest it knows (0: not known)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchUp:
    """From an access point to an origin: send the publications you accepted that match these
    subscriptions of my peers, each between its own hybrid times (``clocks``, rule 5; compared
    with ``Notification.published_at``): ``entries`` are (peer, subscription id, subscription,
    since, until). Answered by ``Mail`` (purpose ``catchup``)."""

    KIND: ClassVar[str] = "sp.catchup"
    request: str
    entries: tuple[tuple[str, str, qel.Subscription, float, float], ...]
    origin: str = ""
    """Only the publications of this origin (empty: all the log holds). Asked of every live
    super-peer when the origin itself is gone: its log's copies (``LogCopy``) and a leaver's
    hand-over (``AdoptLog``) are wherever they were sent."""
    lost: tuple[str, ...] = ()
    """Origins the asker knows gone or left: the answer tells the gaps of their copies
    naming them, as it would if the answering node knew (``superpeer._catchup``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayRequest:
    """From a super-peer a subscription reached late, where a route toward this origin was
    there already (so it was not passed on, and the origin never sees it late): send me what
    you published since the hybrid time ``since`` that it matches, as replayed
    notifications (``Notification.replayed``)."""

    KIND: ClassVar[str] = "sp.replay"
    subscription: qel.Subscription
    since: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Mail:
    """Notifications for ``peer``, a local peer of the receiver: what an origin found for a
    ``CatchUp``, what the old access point kept (``handover``), what a leaving super-peer kept
    (``adopt``), or what reached the old access point after the peer moved (``forward``; a
    catch-up answer that reached it goes on as ``catchup``, its ``request`` empty: the rule of
    order is kept where the peer is).
    Long answers come in several ``Mail`` of one ``request``; ``last`` ends it. ``hops``: how
    many forwarding addresses it followed (bounded, in case one is wrong)."""

    KIND: ClassVar[str] = "sp.mail"
    request: str
    purpose: str
    peer: str
    notifications: tuple[Notify, ...]
    last: bool
    hops: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Handover:
    """From a peer's new access point to its previous one: the peer moved (``Moved``, with its
    signature); hand over what you keep for it and forget it."""

    KIND: ClassVar[str] = "sp.handover"
    request: str
    peer: str
    moved_at: float
    """When the peer connected to the sender: what the receiver kept since is not handed over
    (the sender has been the peer's access point since, with the peer's current
    subscriptions)."""
    previous: str
    """The access point the peer's move statement names as its previous one (the receiver, or
    the super-peer whose peers the receiver adopted)."""
    superpeer: str
    address: str
    since: float
    signature: bytes
    search: bool = False
    """Sent to a super-peer other than ``previous`` (or its known successor), because that one
    does not answer: only a holder of what ``previous`` kept hands over, by succession or
    adoption (``superpeer._migration``); an earlier access point's older copy does not."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HandoverDone:
    """The previous access point's answer to ``Handover``, after its ``Mail``: ``accepted`` (it
    forgot the peer) or refused with ``reason``; ``expired`` notifications had been dropped."""

    KIND: ClassVar[str] = "sp.handover_done"
    request: str
    peer: str
    accepted: bool
    reason: str
    expired: int
    count: int = 0
    """Notifications its ``Mail`` carried: the asker acknowledges (``HandoverReceived``) once it
    has them all, else it asks again."""
    rendezvous: tuple[tuple[str, int], ...] = ()
    """The peer's rendezvous files the sender holds (key, bytes held: complete, or the part
    received): the asker pulls them (``superpeer.rendezvous``); the sender keeps each until the
    asker says it has its bytes."""
    unvouched_since: float = 0.0
    """Hybrid time from which the sender cannot vouch that its ``Mail`` holds everything the
    peer was owed (a catch-up covering the peer was still to come there: after a restart, a
    broken route, a move of its own whose handover had not come): the asker catches up from
    the origins from then. 0: it vouches for all of it."""
    retry: bool = False
    """Refused for now: the peer is attached to the sender, over a connection that may be dead
    without the sender knowing yet (a partition cut it). The asker keeps its request (and asks
    again on its timer); the sender answers it when that connection ends."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HandoverReceived:
    """The new access point has what a ``Handover`` sent, durably: the previous one may now
    delete it (until then it keeps it, and sends it again if asked again: a handover lost with
    a broken link or a rejoin costs a repeat, never the mail)."""

    KIND: ClassVar[str] = "sp.handover_received"
    request: str
    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Adopt:
    """A leaving super-peer hands one of its peers to the receiver: its advertisement and
    subscriptions (its kept notifications follow as ``Mail``, purpose ``adopt``). The receiver
    keeps the peer as detached until it connects."""

    KIND: ClassVar[str] = "sp.adopt"
    peer: str
    public_key: bytes
    """The peer's registered public key (DER; empty on a plaintext network): the adopter checks
    the peer's signature with it when the peer moves on."""
    advertisement: qel.Advertisement | None
    subscriptions: tuple[tuple[str, qel.Subscription], ...]
    axioms: tuple[Axiom, ...] = ()
    """The schemas the peer published (``PublishSchema``)."""
    kept: tuple[Subscribe, ...] = ()
    """The subscriptions as the leaver kept them, with their expiry and ``on_change`` (the
    adopter restores them so; from an older leaver, only ``subscriptions``)."""
    unvouched_since: float = 0.0
    """Hybrid time from which the leaver cannot vouch that the mail it hands over holds
    everything the peer was owed (a catch-up covering the peer still to be asked, or asked and
    not answered: its answer would come to a super-peer that is gone): the adopter catches up
    from the origins from then. 0: it vouches for all of it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdoptLog:
    """A leaving super-peer hands the publications it accepted as origin (its log, for catch-up)
    to the super-peer that adopts its peers: an access point that later asks the adopter for a
    catch-up still finds them."""

    KIND: ClassVar[str] = "sp.adopt_log"
    notifications: tuple[Notification, ...]
    floor: float | None = None
    """Every entry the leaver held later than this is in its hand-over (the latest time it
    pruned, or did not hand over: ``superpeer._replication``, rule 7). None: an older leaver,
    which did not say."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogCopy:
    """An origin's copy of a publication it accepted, for a neighbour's log
    (``superpeer._replication``): if the origin is lost for good, disk and all, a catch-up
    still finds it there. Answered by ``LogCopied`` once the copy is durable."""

    KIND: ClassVar[str] = "sp.log_copy"
    request: str
    notifications: tuple[Notification, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LogCopied:
    """The copies of ``LogCopy`` ``request`` are durable here: the origin may tell the
    publisher (its ``Ack``)."""

    KIND: ClassVar[str] = "sp.log_copied"
    request: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceVersion:
    """The current version of one resource at its owner's access point
    (``superpeer.versions``): carried inside ``Versions``, never alone."""

    KIND: ClassVar[str] = "sp.resource_version"
    id: str
    number: int
    publication: qel.Publication
    retracted: bool = False
    expires: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Versions:
    """The resources a peer published through the sender, handed to the super-peer that keeps
    the peer now: their current versions, so that the owner goes on changing them there
    (updates, extensions, retractions). Sent by a leaving super-peer after its ``Adopt``
    (``request`` empty), and by a previous access point before its ``HandoverDone``, whose
    ``count`` includes them (``request``: the handover's)."""

    KIND: ClassVar[str] = "sp.versions"
    request: str
    peer: str
    versions: tuple[ResourceVersion, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RendezvousRequest:
    """From a requester's access point to the owner's (``target``, at ``target_position``),
    routed hop by hop over the cube (bit-fixing: at most log2 N hops, no look-up): ``requester``
    wants ``length`` bytes from ``offset`` of the resource of ``publication`` owned by ``owner``;
    send them, as the owner uploads them, to ``requester_superpeer`` (at
    ``requester_position``). The owner's access point keeps the newest request durably until the
    owner answers it."""

    KIND: ClassVar[str] = "sp.rendezvous"
    rendezvous: str
    target: str
    target_position: int
    requester: str
    requester_superpeer: str
    requester_position: int
    owner: str
    publication: str
    offset: int
    length: int
    hops: int
    held: bool = False
    """Asked of the requester's previous access point for the bytes it holds for the requester
    (``HandoverDone.rendezvous``), not of the owner; ``offset`` at or past them says the asker
    holds them all durably (``length`` 0: only that), and the target forgets its copy."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RendezvousChunk:
    """Bytes of a rendezvous file from the owner's access point to the requester's (``target``),
    routed like ``RendezvousRequest``; ``error`` non-empty: the owner could not serve it."""

    KIND: ClassVar[str] = "sp.rendezvous_chunk"
    rendezvous: str
    target: str
    target_position: int
    offset: int
    data: bytes
    error: str
    hops: int
    superpeer: str = ""
    """The owner's access point that relayed it (where the owner is attached now, after a
    move): the requester's access point asks it for the next windows. With ``not_here``: the
    super-peer that answered."""
    not_here: bool = False
    """The answer of the super-peer a ``RendezvousRequest`` was routed to when it cannot serve
    it: the owner is not attached there and it knows no forwarding address (or the named
    super-peer left the cube and this one holds its position now). The requester's access
    point looks the owner up network-wide."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocateDirect:
    """A look-up of ``public_id`` (the asker's ``query``) sent by ``origin`` (at
    ``origin_position``) to the super-peer the asker named (``Locate.superpeer``), routed like
    ``RendezvousRequest`` (bit-fixing toward ``target_position``); passed on along forwarding
    addresses (``forwards`` counts them) when the peer moved away."""

    KIND: ClassVar[str] = "sp.locate_direct"
    query: str
    origin: str
    origin_position: int
    target: str
    target_position: int
    public_id: str
    hops: int
    forwards: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LocateReply:
    """The answer to ``LocateDirect``, routed back to the asker's access point (``target``):
    ``known`` the peer is attached at ``superpeer`` (``online`` or not, with its address when
    online); not ``known``: the super-peer reached knows nothing of it (the asker's access
    point asks the whole network)."""

    KIND: ClassVar[str] = "sp.locate_reply"
    query: str
    target: str
    target_position: int
    public_id: str
    known: bool
    online: bool
    address: str
    superpeer: str
    access_point: str
    hops: int


PEER_REQUESTS = (
    Advertise,
    PublishSchema,
    Subscribe,
    Unsubscribe,
    Publish,
    Withdraw,
    Leave,
    Locate,
    Moved,
    Delivered,
    Fetch,
    Upload,
    Collect,
    Collected,
)
PEER_REPLIES = (
    Notify,
    Ack,
    Refused,
    Located,
    Expired,
    UploadWanted,
    FileReady,
    FileChunk,
    FetchFailed,
)
BACKBONE = (
    Elements,
    Forward,
    Retract,
    Notification,
    LocateQuery,
    LocateAnswer,
    Heartbeat,
    Departed,
    Returned,
    Reconnected,
    Evicted,
    Merge,
    CatchUp,
    ReplayRequest,
    Mail,
    Handover,
    HandoverDone,
    HandoverReceived,
    Adopt,
    AdoptLog,
    LogCopy,
    LogCopied,
    Versions,
    RendezvousRequest,
    RendezvousChunk,
    LocateDirect,
    LocateReply,
)


# -- links: the first frames of a connection, errors, goodbyes, control -------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """The first frame a connecting side sends: who it is and which protocol it speaks.

    ``role`` is ``peer``, ``superpeer`` or ``control`` (a local command-line client); ``node_id``
    and ``address`` name the sender (a super-peer's advertised address; empty for others).
    ``incarnation`` numbers a super-peer's runs (it grows at every start and every rejoin), so the
    other side tells a restarted neighbour from a reconnecting one.
    """

    KIND: ClassVar[str] = "link.hello"
    role: str
    node_id: str
    address: str
    protocol: int
    incarnation: int = 0
    wall: float = 0.0
    """The sender's wall time when it sent this (0: not said): the ``Welcome`` echoes it, so
    the connecting side measures the other's clock offset at once."""
    clock: float = 0.0
    """A peer's: the latest hybrid time an access point gave it (``clocks``, rule 6), absorbed
    by the new access point so that what happens there is ordered after what it knew."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Welcome:
    """The accepting side's answer to ``Hello``. Between super-peers, ``resume`` is the last
    sequence number received from the caller's incarnation on earlier connections: the caller
    sends again what came after it (``superpeer.channel``)."""

    KIND: ClassVar[str] = "link.welcome"
    node_id: str
    address: str
    incarnation: int = 0
    resume: int = 0
    wall: float = 0.0
    """The sender's wall time when it sent this; ``echo`` is the ``Hello``'s ``wall``, held
    for ``held`` seconds (``clocks.sample_of``)."""
    echo: float = 0.0
    held: float = 0.0
    clock: float = 0.0
    """To a peer: the access point's hybrid time (``clocks``, rule 6): the ``since`` of the
    peer's next move statement."""
    missing_since: float = 0.0
    """To a peer: the hybrid time from which what this access point delivers may be incomplete
    (``SuperPeerNode.missing_since``; 0: nothing says so). The peer's next move statement
    starts no later than this."""
    alternates: tuple[str, ...] = ()
    """To a peer: other super-peers of the cube it may go to when this one cannot be reached
    (this one's neighbours first; ``SuperPeerNode.alternates``). A peer cut off from its
    access point while that one left the cube never hears of its successor, and the
    super-peers it was configured with may all be gone by then (``peer.client``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkError:
    """Sent just before closing a connection because of what the other side sent."""

    KIND: ClassVar[str] = "link.error"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodbye:
    """The sender is shutting down cleanly; ``reason`` is for logs. To a peer, ``successor`` is
    the address of the super-peer that now keeps the peer's subscriptions and notifications
    (empty if none)."""

    KIND: ClassVar[str] = "link.goodbye"
    reason: str
    successor: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelAck:
    """On a super-peer connection, from the accepting side: every sequenced frame up to
    ``received`` arrived (the sender may forget them)."""

    KIND: ClassVar[str] = "link.ack"
    received: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Clock:
    """Between a peer and its access point, both ways, to measure their clocks' offset (NTP's
    on-wire calculation, ``clocks.sample_of``): ``wall`` is the sender's wall time when it sent
    this, ``echo`` the ``wall`` of the last ``Clock`` or ``Hello`` it received from the other
    side (0: none), which it held for ``held`` seconds. The access point sends one when the
    peer is established and then every ``clock_sample_seconds``; the peer answers each. From an
    access point, ``clock`` is its hybrid time (``Welcome.clock``). Not answered otherwise."""

    KIND: ClassVar[str] = "link.clock"
    wall: float
    echo: float = 0.0
    held: float = 0.0
    clock: float = 0.0
    missing_since: float = 0.0
    """From an access point, as in its ``Welcome``: from when what it delivers may be
    incomplete, now (0: nothing says so). A cut or a catch-up that begins while the peer is
    attached is told by the next ``Clock``; the peer's next move statement carries the latest
    (``Moved.missing_since``)."""
    alternates: tuple[str, ...] = ()
    """From an access point, as in its ``Welcome``, now: the other super-peers its peer may go
    to when it cannot reach this one. The cube changes while a peer stays attached: a chaos run
    (stop 79, seed 795) had a peer attached for 150 s whose access point left while it was cut
    off from it, its successor crashed, and every super-peer its ``Welcome`` had named was gone
    too; it knocked at dead addresses for three minutes while others served."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRequest:
    """A command from a local command-line client: ``command`` and its arguments as strings."""

    KIND: ClassVar[str] = "control.request"
    command: str
    arguments: dict[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlReply:
    """The answer to a ``ControlRequest``: ``ok`` and a JSON document (or an error text)."""

    KIND: ClassVar[str] = "control.reply"
    ok: bool
    body: str


LINK = (Hello, Welcome, LinkError, Goodbye, ChannelAck, Clock, ControlRequest, ControlReply)
