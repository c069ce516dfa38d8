"""Every message the network exchanges, defined once: what the sans-IO cores consume and produce and
what the daemons put on the wire.

Messages are frozen, keyword-only dataclasses carrying language objects (``qel.Subscription``, ...);
``wire.codec`` turns them into msgpack and back by field type. Each has a ``KIND`` that names it on
the wire. Three families:

* peer -> access point: ``Advertise``, ``Subscribe``, ``Unsubscribe``, ``Publish``, ``Leave``,
  ``Locate``;
* access point -> peer: ``Notify``, ``Ack``, ``Refused``, ``Located``;
* super-peer <-> super-peer: ``Elements`` (advertisement elements spreading down their origin's
  tree), ``Forward`` / ``Retract`` (a subscription travelling toward covering origins, and its
  withdrawal), ``Notification`` (a publication travelling down its origin's tree),
  ``LocateQuery`` / ``LocateAnswer`` (a look-up of a peer's address down the asker's tree, and
  the answers gathered back up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import qel
from qel.advertisements import Element

# -- peer -> access point -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Advertise:
    """The peer's whole advertisement; it replaces the previous one."""

    KIND: ClassVar[str] = "peer.advertise"
    advertisement: qel.Advertisement


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """A subscription under an id the peer chose (unique among the peer's subscriptions)."""

    KIND: ClassVar[str] = "peer.subscribe"
    id: str
    subscription: qel.Subscription


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsubscribe:
    KIND: ClassVar[str] = "peer.unsubscribe"
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish:
    KIND: ClassVar[str] = "peer.publish"
    publication: qel.Publication


@dataclass(frozen=True, slots=True, kw_only=True)
class Leave:
    """The peer leaves for good: its subscriptions and advertisement go with it."""

    KIND: ClassVar[str] = "peer.leave"


@dataclass(frozen=True, slots=True, kw_only=True)
class Locate:
    """Where is the peer named ``public_id`` now (to fetch a resource from it directly)? Answered
    by ``Located`` under the same ``id``. Knowing a peer's public identifier gives its address
    only while it is online, and nothing else."""

    KIND: ClassVar[str] = "peer.locate"
    id: str
    public_id: str


# -- access point -> peer -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Notify:
    """A publication for the peer, with the ids of the peer's subscriptions it matches.

    ``owner`` is the publishing peer's id and ``access_point`` its super-peer's address, so the
    subscriber can later fetch the resource or ask for a rendezvous. ``hops`` counts super-peer to
    super-peer messages on the way; ``published_at`` is the time the origin accepted it.
    """

    KIND: ClassVar[str] = "peer.notify"
    publication: qel.Publication
    subscriptions: tuple[str, ...]
    owner: str
    access_point: str
    origin: str
    hops: int
    published_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """A request was applied; ``request`` names it (e.g. ``subscribe s1``)."""

    KIND: ClassVar[str] = "peer.ack"
    request: str


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


# -- super-peer <-> super-peer --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Elements:
    """Advertisement elements ``origin`` now stands for (``added``) or no longer does
    (``withdrawn``), spreading down the spanning tree rooted at ``origin_position``."""

    KIND: ClassVar[str] = "sp.elements"
    origin: str
    origin_position: int
    added: tuple[Element, ...]
    withdrawn: tuple[Element, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """A subscription sent one hop toward some of the origins that may publish what it matches.

    ``id`` is the sender's id for it on this link; ``toward`` lists the origins (with their root
    positions) this hop is on the way to. Sending the same id again adds origins.
    """

    KIND: ClassVar[str] = "sp.forward"
    id: str
    subscription: qel.Subscription
    toward: tuple[tuple[str, int], ...]


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


PEER_REQUESTS = (Advertise, Subscribe, Unsubscribe, Publish, Leave, Locate)
PEER_REPLIES = (Notify, Ack, Refused, Located)
BACKBONE = (Elements, Forward, Retract, Notification, LocateQuery, LocateAnswer)


# -- links: the first frames of a connection, errors, goodbyes, control -------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """The first frame a connecting side sends: who it is and which protocol it speaks.

    ``role`` is ``peer``, ``superpeer`` or ``control`` (a local command-line client); ``node_id``
    and ``address`` name the sender (a super-peer's listening address; empty for others).
    """

    KIND: ClassVar[str] = "link.hello"
    role: str
    node_id: str
    address: str
    protocol: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Welcome:
    """The accepting side's answer to ``Hello``."""

    KIND: ClassVar[str] = "link.welcome"
    node_id: str
    address: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkError:
    """Sent just before closing a connection because of what the other side sent."""

    KIND: ClassVar[str] = "link.error"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodbye:
    """The sender is shutting down cleanly; ``reason`` is for logs."""

    KIND: ClassVar[str] = "link.goodbye"
    reason: str


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


LINK = (Hello, Welcome, LinkError, Goodbye, ControlRequest, ControlReply)
