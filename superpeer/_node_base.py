"""What every part of ``SuperPeerNode`` shares: its state (built in one place, so that the
parts cannot disagree on it), the constants of its store's pending tables, and the plumbing
(sending, tracing, numbering). The parts are mixins over ``NodeBase``, as ``hypercup``'s
``Joins`` and ``Departures`` are over its ``NodeCore``; the spec is ``superpeer.node``'s
docstring."""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import qel
import wire
from hypercup import HypercupNode
from hypercup.positions import tree_parent_position
from superpeer.access import AccessPointSession, Request
from superpeer.actions import (
    Action,
    ToSuperPeer,
)
from superpeer.core import CoreConfig, SuperPeerCore, trace_record
from superpeer.expiry import SubscriptionExpiries
from superpeer.locating import Locator, LocatorConfig
from superpeer.mailroom import Mailroom
from superpeer.rendezvous import Rendezvous, RendezvousConfig
from superpeer.store import Store
from superpeer.trace import TraceRecord
from wire import messages as m
from wire.framing import Received

if TYPE_CHECKING:
    from superpeer._restoring import PreparedRestore

log = logging.getLogger("superpeer")
# peer messages the node handles itself (the core traces the others when it handles them)
OUTSIDE_CORE = (m.Delivered, m.Moved, m.Leave)
# backbone messages the node handles itself
FROM_ANY = (
    m.Evicted,
    m.CatchUp,
    m.ReplayRequest,
    m.Mail,
    m.HandoverDone,
    m.HandoverReceived,
)
"""What is taken from a departed or replaced incarnation too: it does not depend on its routing
state (mail is publications, kept once; an eviction names the incarnation it is about)."""
RENDEZVOUS_MESSAGES = (m.RendezvousRequest, m.RendezvousChunk)
DIRECT_LOOKUPS = (m.LocateDirect, m.LocateReply)
NODE_HANDLED = (
    m.Evicted,
    m.Heartbeat,
    m.CatchUp,
    m.ReplayRequest,
    m.Mail,
    m.Handover,
    m.HandoverDone,
    m.HandoverReceived,
    m.AdoptLog,
    *RENDEZVOUS_MESSAGES,
    *DIRECT_LOOKUPS,
)
RESOURCE_REQUESTS = (m.Fetch, m.Upload, m.Collect, m.Collected)
"""Peer messages for ``superpeer.rendezvous``; only ``Fetch`` is answered."""
T = TypeVar("T")
Output = Action | TraceRecord
HANDOVERS = "handover"
HANDED = "handed"
"""Handovers answered, whose mail is kept until the asker says it has it."""
MAX_FORWARD_HOPS = 16
"""Forwarding addresses lead to where a peer is; a chain longer than this is a bug (logged)."""
MOVED = "moved"
ADOPTED = "adopted"
MOVES = "move-statement"
"""Per local peer, its last move statement (what a holder shows to claim the peer back from an
access point that returned with an older copy of its state)."""
ATTACHED = "attached"
"""Per local peer, the last time it was attached here."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    routing: CoreConfig = field(default_factory=CoreConfig)
    heartbeat_seconds: float | None = 1.0
    """A link idle this long carries a ``Heartbeat`` (None: no supervision, for simulations
    without failures)."""
    failure_seconds: float = 10.0
    """A neighbour silent this long has failed."""
    wedged_seconds: float = 60.0
    """A topology operation still unfinished after this long is wedged (what HyperCuP cannot
    untangle: a grow or shrink overtaking a repair): this node rejoins."""
    admission_seconds: float = 10.0
    """TLS, ``Hello`` and identification of a peer connection, all of it."""
    max_unidentified_per_address: int = 32
    """Peer connections from one address that have not identified yet."""
    window: int = 64
    """Notifications sent to a peer and not yet acknowledged."""
    retention_seconds: float = 7 * 86400.0
    """How long mail is kept for a peer that does not come back."""
    max_kept_per_peer: int = 100_000
    """Mail kept per peer; beyond it, the oldest goes (counted and told)."""
    log_seconds: float = 3600.0
    """How long an origin keeps its publications for catch-up."""
    max_logged: int = 100_000
    catchup_margin_seconds: float = 5.0
    """Catch-up asks for a little more than strictly needed: clocks differ, repeats are free."""
    rejoin_seconds: float = 1.0
    """Wait before asking again after a refused join."""
    handover_seconds: float = 5.0
    """Wait for a previous access point's answer before catching up from the origins."""
    housekeeping_seconds: float = 5.0
    """How often the node notes it is alive, expires mail and prunes its log."""
    mail_batch: int = 200
    """Notifications per ``Mail`` message at most (fewer when they would not fit a frame)."""
    max_held_requests: int = 1000
    """Requests of a peer held while its previous access point hands over the versions of its
    resources (``Migrations._release_held``); more close its connection."""
    max_frame_bytes: int = 1024 * 1024
    """The largest frame a link carries (``[limits] max_frame_bytes``): a ``Mail``, ``CatchUp``
    or ``AdoptLog`` is split to fit it (``superpeer._batches``)."""
    restore_collection_from: int = 10_000
    """A restore of this many subscriptions or more ends with a full garbage collection, before
    the join request leaves (``superpeer._restoring.prepare_restore``)."""
    catchup_batch: int = 200
    """Subscriptions per ``CatchUp`` request: a restart with 10^5 asked for all of them in one
    request of 27 MB, beyond any frame, and the daemon died sending it."""
    rendezvous: RendezvousConfig = field(default_factory=RendezvousConfig)
    locating: LocatorConfig = field(default_factory=LocatorConfig)


@dataclass
class ForwardingAddress:
    """Where a peer that moved away went (its forwarding address)."""

    node: str
    address: str
    forget_at: float | None
    """When its subscriptions here go (None: gone)."""
    expires_at: float
    """When the address is forgotten (``retention_seconds``: nothing kept lives longer)."""

    def saved(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def restored(cls, entry: dict) -> ForwardingAddress:
        forget_at = entry.get("forget_at", entry.get("until"))  # "until": stores before 2026-11
        expires_at = entry.get("expires_at", forget_at or 0.0)
        return cls(entry["node"], entry["address"], forget_at, expires_at)


@dataclass
class NodeStatistics:
    auth_failures: int = 0
    violations: int = 0
    refused_connections: int = 0
    failures_detected: int = 0
    repairs: int = 0
    rejoins: int = 0
    catchups_asked: int = 0
    catchups_served: int = 0
    recovered: int = 0
    replayed: int = 0
    """Notifications this origin sent again for subscriptions that reached it late."""
    handovers_in: int = 0
    handovers_out: int = 0
    forwarded: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    bytes_sent: Counter[str] = field(default_factory=Counter)


@dataclass
class PeerConnection:
    session: AccessPointSession
    host: str
    counted: bool = True
    """Still counted against its address's limit of unidentified connections."""


@dataclass
class PlannedCatchUp:
    due: float
    since: float
    peers: frozenset[str] | None
    """Only these peers' subscriptions (None: every local peer's)."""
    origins: frozenset[str] | None
    """Only these origins (None: every origin that covers a subscription)."""
    subscriptions: dict[str, dict[str, qel.Subscription]] | None = None
    """The subscriptions to catch up for (a moved peer's, as they were when it arrived); None:
    each peer's current ones, each since it was made here at the earliest."""
    until: float = math.inf
    """For ``subscriptions``: until when they stood for the peer (after that, the ones it has
    here do, and routing brings what they match)."""


class NodeBase:
    """The state of a ``SuperPeerNode`` and the plumbing its parts share."""

    def __init__(
        self,
        node_id: str,
        address: str,
        store: Store,
        config: NodeConfig | None = None,
        *,
        fingerprint: str | None = None,
        random: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.store = store
        self.config = config or NodeConfig()
        self.fingerprint = fingerprint
        """This node's TLS key fingerprint: peers identify themselves (None: plaintext)."""
        self._random = random
        self.incarnation = 0
        self.topology = HypercupNode(node_id, address)
        self.core: SuperPeerCore | None = None
        self.mail = Mailroom(
            node_id, store, window=self.config.window, tracing=self.config.routing.tracing
        )
        self.statistics = NodeStatistics()
        self.rendezvous = Rendezvous(
            node_id,
            store,
            send=self._send,
            where=self._cube,
            whereabouts=self._whereabouts,
            look_up=self._look_up,
            config=self.config.rendezvous,
        )
        self.locator = Locator(
            node_id,
            address,
            send=self._send,
            where=self._cube,
            whereabouts=self._whereabouts,
            fallback=self._locate_everywhere,
            config=self.config.locating,
        )
        self.addresses: dict[str, str] = {}
        self.incarnations: dict[str, int] = {}
        """The newest incarnation heard of, per super-peer."""
        self._neighbour_incarnations: dict[str, int] = {}
        """Per current neighbour, the incarnation heard from while it is our neighbour: a newer
        one means it restarted (and the one in our view is dead)."""
        self.departed: dict[str, int] = {}
        self._left: dict[str, int] = {}
        """Super-peers that left cleanly, with the incarnation that left: once out of our view,
        nothing more is sent to them (a link to a process that exited would wait forever)."""
        self._renewed: set[str] = set()
        """Super-peers whose link was dropped when they departed: what was sent to them since is
        for their next incarnation (a ``Welcome`` when it joins again), which its ``Hello`` must
        not drop as if it were for the old one."""
        self.successors: dict[str, str] = {}
        """Departed super-peers whose peers another one adopted (where to ask for them)."""
        self.stopping = False
        self.stopped = False
        self._contacts: list[tuple[str, str]] = []
        self._outside: dict[str, bool] = {}
        """Contacts found out of the cube in this round of attempts to join: True if one
        answered so (alive), False if it said nothing."""
        self._silent_since: dict[str, float] = {}
        """When each contact that says nothing first failed to answer: a member is silent at
        most ``wedged_seconds`` (busy that long, it rejoins and answers as a non-member), so
        only one silent longer counts as out of the cube (else a new cube splits the network)."""
        self._join_at: float | None = None
        self._join_contact: tuple[str, float] | None = None
        """The member a join attempt asked, and when it was last heard from (or asked): one
        silent for ``failure_seconds`` is dead or stalled, and the join goes elsewhere."""
        self._joining_since: float | None = None
        """When the current join request went out: a join still unanswered ``wedged_seconds``
        later is wedged (its ``Welcome`` lost), however lively its contact."""
        self._old_neighbours: set[str] = set()
        self._old_neighbours_until = -math.inf
        self._last_heard: dict[str, float] = {}
        self._last_sent: dict[str, float] = {}
        self._suspected: dict[str, float] = {}
        """Neighbours taken for failed and not repaired yet, and since when."""
        self._retry_at = 0.0
        self._busy_since: float | None = None
        self._lagging_since: float | None = None
        self._tick_at = 0.0
        """When the topology protocol's next tick is due (``HypercupNode.tick``)."""
        """Since when the topology protocol has held messages of an epoch it has not reached."""
        """Since when the topology protocol has had an operation in progress, without a break."""
        """When to ask the topology protocol again about suspected neighbours (it may have been
        busy with another operation)."""
        self._timer_due: float | None = None
        self._connections: dict[int, PeerConnection] = {}
        self._next_connection = 1
        self._unidentified: Counter[str] = Counter()
        self._peer_connection: dict[str, int] = {}
        self._catchups: list[PlannedCatchUp] = []
        self._subscribed_at: dict[tuple[str, str], float] = {}
        self._unsubscribed_at: dict[tuple[str, str], float] = {}
        """When each subscription made here in this incarnation was made (catch-up never asks
        for what was published before a subscription existed)."""
        self._withdrawn: dict[str, dict[str, tuple[qel.Subscription, float, float]]] = {}
        """Subscriptions withdrawn in the last ``log_seconds``, with when they were made and
        withdrawn: a repair catches up for them too, for the time they were active (a route
        broken before the withdrawal may have lost what they were owed)."""
        self.expiries = SubscriptionExpiries()
        self._moved_away: dict[str, ForwardingAddress] = {}
        self._handover_due: dict[str, float] = {}
        """Pending handovers (request -> when to ask again)."""
        self._handover_tries: dict[str, int] = {}
        self._awaiting: set[str] = set()
        """Handovers whose first answer (or the catch-up instead) is still awaited."""
        self._handed_in: dict[str, set[str]] = {}
        """Per handover asked for, the notifications (mail keys) and versions its answers
        brought so far: the previous access point keeps everything until told, so each answer
        holds all the earlier ones did; an answer is complete when as many distinct ones came
        as it counts."""
        self._held: dict[str, list[tuple[int, Request]]] = {}
        """Per peer, its requests held while the versions of its resources are on their way
        from its previous access point (``Migrations._release_held``), in arrival order."""
        self._restored_since: float | None = None
        self._prepared: PreparedRestore | None = None
        """The peers' subscriptions, decoded and placed before the join request left, for the core
        the join makes (``superpeer._restoring``)."""
        self._replay: list[tuple[float, m.Notification]] = []
        self._before_member: list[tuple[str, int, Received]] = []
        self._housekeeping_at = 0.0
        self._message_number = 0

    def _next_id(self) -> str:
        self._message_number += 1
        return f"{self.node_id}~{self.incarnation}#{self._message_number}"

    def _send(
        self, target: str, message: object, now: float, out: list[Output], *, address: str = ""
    ) -> None:
        if self._dropped(target, message, now, out):
            return
        message_id = self._next_id()
        data = wire.encode(message, message_id)
        self._last_sent[target] = now
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.statistics.sent[kind] += 1
        self.statistics.bytes_sent[kind] += len(data)
        out.append(self._to_superpeer(target, message, data, message_id, address))
        if self.config.routing.tracing:
            out.append(
                trace_record(
                    self.node_id,
                    now,
                    "send",
                    message,
                    neighbour=target,
                    size=len(data),
                    msg=message_id,
                )
            )

    def _to_superpeer(
        self, target: str, message: object, data: bytes, message_id: str, address: str
    ) -> ToSuperPeer:
        """The send as the runtime carries it out: to ``address`` if given, else where
        ``target`` is known to be, and meant for the incarnation of it this node knows (the
        channel drops it if a newer one is there by then)."""
        return ToSuperPeer(
            target,
            message,
            data,
            message_id,
            address or self.addresses.get(target, ""),
            self.incarnations.get(target, 0),
        )

    def _trace(self, out: list[Output], now: float, event: str, message: object, **fields) -> None:
        if self.config.routing.tracing:
            out.append(trace_record(self.node_id, now, event, message, **fields))

    def _trace_event(
        self,
        out: list[Output],
        now: float,
        event: str,
        *,
        kind: str,
        neighbour: str | None = None,
        peer: str | None = None,
        msg: str | None = None,
        reason: str | None = None,
    ) -> None:
        if self.config.routing.tracing:
            out.append(
                TraceRecord(
                    ts=now,
                    node=self.node_id,
                    event=event,
                    kind=kind,
                    neighbour=neighbour,
                    peer=peer,
                    msg=msg,
                    reason=reason,
                )
            )


def tree_positions_between(root: int, position: int) -> set[int]:
    """The positions from ``position`` up to ``root`` in ``root``'s tree, both included."""
    path = {position}
    current: int | None = position
    while current is not None and current != root:
        current = tree_parent_position(root, current)
        if current is not None:
            path.add(current)
    return path


def decoded_as(data: bytes | None, cls: type[T]) -> T | None:
    if data is None:
        return None
    try:
        message, _ = wire.decode(data)
    except wire.WireError:
        log.error("event=unreadable_state kind=%s", cls.__name__)  # noqa: TRY400 -- no traceback: the state is what is wrong
        return None
    return message if isinstance(message, cls) else None
