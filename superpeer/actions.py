"""What the sans-IO super-peer (``SuperPeerCore`` inside ``SuperPeerNode``) asks its runtime to
do. The runtime (simulator or daemon) owns sockets, clocks and storage; the protocol objects only
return these.

Messages that go on a wire are already encoded (``data``), once, by the object that made them: the
runtime sends the bytes and the traces report their size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import qel
from wire import messages

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ToSuperPeer:
    """Send to super-peer ``node`` (a neighbour, or any member reachable at ``address``: a ghost
    neighbour during a change of the cube, an origin asked for a catch-up, a peer's previous
    access point)."""

    node: str
    message: object
    data: bytes
    message_id: str
    address: str = ""
    incarnation: int = 0
    """The incarnation of ``node`` the sender knew of when it sent (0: none yet). The channel
    drops the frame if an older one's successor turns out to be at the other end, and keeps it
    for the one it was meant for however stale the connection it waited on."""
    clock: float = 0.0
    """The sender's hybrid time, for the frame's header (``clocks``)."""


@dataclass(frozen=True, slots=True)
class ToPeer:
    """An answer for local peer ``peer`` on its current connection (dropped if it has none)."""

    peer: str
    message: object
    data: bytes


@dataclass(frozen=True, slots=True)
class Deliver:
    """A notification for local peer ``peer``: the node puts it in the peer's durable mail and
    sends it when the peer's window allows."""

    peer: str
    notify: messages.Notify


@dataclass(frozen=True, slots=True)
class LogPublication:
    """This node accepted ``notification`` as its origin: keep it in the publication log (for
    catch-up and for replay after a crash) before the publisher is told: ``ack``, its answer to
    the publisher, leaves once the log and a neighbour's copy of the entry are durable
    (``superpeer._replication``)."""

    notification: messages.Notification
    ack: ToPeer | None = None


@dataclass(frozen=True, slots=True)
class Repeated:
    """``ack`` answers a publication its publisher sent again (a reconnected peer repeats what
    went unanswered) of the version this node logged already: nothing to log or copy, but the
    answer says what the first one says, so it waits for that version's copy if it is still
    awaited (``superpeer._replication``)."""

    ack: ToPeer
    publication_id: str
    again: bool = False
    """Sent again because an ``Ack`` said ``alone`` (``Publish.again``): answered ``alone``
    too when this node does not log the version (handed over: it vouches for no copy)."""


@dataclass(frozen=True, slots=True)
class Found:
    """The answer to the node's own look-up ``request`` (``SuperPeerCore.look_up``): the
    super-peer ``public_id`` is online at, or empty when it is online nowhere."""

    request: str
    public_id: str
    superpeer: str


@dataclass(frozen=True, slots=True)
class Replay:
    """A subscription whose route was needed since ``since`` reached this node late, from
    ``neighbour``. Without ``origin``, this node is an origin it goes to: send that neighbour
    what this node published since that the subscription matches (from its log), so that a
    route that was late to form loses nothing (``Notification.replayed``). With ``origin``: a
    route toward that origin was there already, so the subscription goes no further and the
    origin would never see it late: ask it to replay to this node (``ReplayRequest``)."""

    neighbour: str
    subscription: qel.Subscription
    since: float
    origin: str = ""
    address: str = ""
    """The origin's address, to ask it directly."""
    own_clock: bool = False
    """``since`` is this node's own hybrid time, which its log is in: no margin for a reading
    that had yet to reach it (``clocks``, rule 4)."""
    not_before: float = 0.0
    """The subscription's own start (``Forward.since``, another node's hybrid time), when
    ``since`` is this node's: what was published before it is owed to nobody, less the margin
    for that reading."""


@dataclass(frozen=True, slots=True)
class ToConnection:
    """Bytes (one encoded message, to be framed) for peer connection ``connection``."""

    connection: int
    message: object
    data: bytes


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """End peer connection ``connection`` (after sending what was queued for it)."""

    connection: int
    reason: str


@dataclass(frozen=True, slots=True)
class PauseReading:
    """Read nothing more from peer connection ``connection`` for ``seconds``: its peer sends
    faster than its rate (``superpeer.ratelimit``). What was read is handled; the peer's writes
    wait in the socket's buffers, so it slows down and loses nothing. A runtime may ignore it
    (the simulator does): the peer is then not limited."""

    connection: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Forgotten:
    """Super-peer ``node`` is out of the cube (it failed, or left): what still waits to be sent
    to it may be dropped (recovering what it took along is the node's business)."""

    node: str
    drain: bool = True
    """Let what is queued go out first (a goodbye's answer), bounded in time: the runtime
    carries a draining ``Forgotten`` out after the rest of its step (``in_runtime_order``), so
    what the same step sends the node goes with the drain rather than opening a new link
    that nothing would end (a leaver's ``Released``, an ``Evicted``). False when ``node``
    restarted: what was queued was for the incarnation that is gone, and what follows is for
    the new one, so the old queue must not hold it up or take it along when it is dropped
    (carried out in place)."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The node is out of the cube for good (it left): the runtime may exit."""

    reason: str


CoreAction = ToSuperPeer | ToPeer | Deliver | LogPublication | Repeated | Found | Replay
Action = CoreAction | ToConnection | CloseConnection | PauseReading | Forgotten | Stopped


def in_runtime_order(outputs: list[T]) -> list[T]:
    """One step's outputs in the order a runtime carries them out: draining ``Forgotten`` s
    last (see ``Forgotten.drain``), everything else as it came."""
    draining = [o for o in outputs if isinstance(o, Forgotten) and o.drain]
    if not draining:
        return outputs
    return [o for o in outputs if not (isinstance(o, Forgotten) and o.drain)] + draining


def leaves_unsynced(output: object, node_id: str) -> bool:
    """Whether ``output`` of super-peer ``node_id`` may leave before the commit of the input
    that made it is synced (``superpeer._commits``; README, "What is durable where").

    A notification from another origin, handed to an attached peer or forwarded down its
    origin's tree to another super-peer: that origin logged it durably before it sent it on,
    and a power loss here loses what this store had not synced whether or not the next hop got
    it first (the restart is a new incarnation and catches up from the origins' logs, the
    peer's inbox keeps one copy). So a relay's fsync, of a neighbour's log copy for one
    (``superpeer._replication``), never sits on another origin's notification's path. One this
    node is the origin of waits for its own log: lost unsynced, the version it had would be
    given again to the next publication of the resource, which a subscriber holding this one
    would then ignore. Everything else waits: what it promises (an ``Ack``, mail dropped on a
    ``Delivered``, a handover accepted, a ``LogCopied``) is on disk first."""
    if isinstance(output, ToConnection):
        notify = output.message
        return isinstance(notify, messages.Notify) and notify.origin != node_id
    if isinstance(output, ToSuperPeer):
        notification = output.message
        return isinstance(notification, messages.Notification) and notification.origin != node_id
    return False


def lane_of(output: object) -> int | tuple[str, str] | None:
    """The stream ``output`` is written to, whose bytes keep the order they were made in
    (``superpeer._commits``' lanes): a peer connection, or the link to super-peer ``node``
    (a notification may leave on it unsynced, but never ahead of a frame, or the link's end,
    held before it)."""
    if isinstance(output, ToConnection | CloseConnection):
        return output.connection
    if isinstance(output, ToSuperPeer | Forgotten):
        return ("node", output.node)
    return None
