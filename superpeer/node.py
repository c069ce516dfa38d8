"""``SuperPeerNode``: one super-peer, sans-IO. The daemon and the simulator drive the same object.

It owns everything a super-peer decides: the topology protocol (``hypercup.HypercupNode``), routing
(``SuperPeerCore``), peer connections (``AccessPointSession``: admission, identification, newest
connection wins), delivery to peers (``Mailroom``: durable mail, acknowledged window), link
supervision (heartbeats, silence, failure), recovery (catch-up from origins' publication logs,
migration of peers between access points, adoption of a leaving super-peer's peers) and restarts
(everything durable is in the ``Store``). Inputs are method calls with the time passed in; outputs
are ``superpeer.actions`` and ``TraceRecord`` s. The node reads no clock, opens no socket.

Inputs: ``start`` / ``leave``; ``superpeer_hello`` (another super-peer connected, with its
incarnation), ``superpeer_message``, ``superpeer_heard`` (any sign of life on a link),
``superpeer_unreachable`` (the runtime gave up on a link); ``accept`` / ``peer_message`` /
``peer_violation`` / ``connection_closed`` for peer connections; ``timer`` (call it at
``next_deadline``). The control commands read ``status``, ``peer_report``, ``subscription_report``
and call ``forget_peer``.

Rules, beyond the routing core's:

* **Incarnations.** Every start and every rejoin takes a new incarnation number from the store;
  super-peers learn each other's from ``Hello``. A neighbour that shows up with a newer one has
  restarted: it is declared failed at once (no need to wait for silence).
* **Failure detection.** A link to a neighbour that has carried nothing for ``heartbeat_seconds``
  carries a ``Heartbeat``; a neighbour not heard from for ``failure_seconds`` is reported to the
  topology protocol (``neighbour_failed``; retried while the protocol is busy with another
  operation; after each further ``failure_seconds`` unrepaired, with a larger ``fallback``, in
  case the designated repairer failed too). If the node itself was stalled (its timer fired late
  by more than half of ``failure_seconds``: a paused process), everyone gets a fresh
  ``failure_seconds`` first.
* **Failures in the middle of topology operations.** Messages of a later epoch held back for
  ``failure_seconds``: the node asks for the change of dimension it missed. The topology
  protocol ticks every ``failure_seconds`` (lost join admissions expire). A protocol busy for
  ``wedged_seconds`` without a break is wedged: the node rejoins, as after a protocol error.
  A rejoining node that finds every super-peer it knows out of the cube (refusing as
  non-members, or silent for ``wedged_seconds``: a busy member can be silent that long, and a
  new cube beside a live one splits the network for good), and has the smallest id among those
  that answered, creates a new cube; the others join it.
* **Eviction.** A member that hears from an incarnation that departed answers ``Evicted``; the
  evicted node (and one whose topology protocol broke) *rejoins*: a new incarnation, its durable
  state restored, its peers asked to reconnect.
* **Departures.** The node that takes a departed member's place (``hypercup.Departed``) broadcasts
  ``sp.departed``; every access point then asks the origins whose trees ran through the departed
  positions for what they published since it was last heard from (``CatchUp``, after the routes
  settled), and their answers (``Mail``) go into its peers' mail, where repeats are dropped.
* **Restart.** A node started on a store with peers in it restores them (detached), routes their
  subscriptions and advertisements once it is a member, asks the origins for what was published
  since it was last alive, and replays its own publication log since then (a publication it
  accepted just before it crashed may not have left).
* **Migration** (seed 004, Section 5.1). A peer that was attached to another super-peer says so
  first (``Moved``, signed). This node asks the previous one (``Handover``), which sends what it
  kept (``Mail``), forgets the peer (subscriptions retracted network-wide after ``settle_seconds``,
  registration dropped) and answers ``HandoverDone`` with the number of notifications sent. The
  previous one deletes that mail only when this node says it has all of it (``HandoverReceived``);
  ``HandoverDone`` also lists the rendezvous files it holds for the peer, which this node pulls and
  releases (``superpeer.rendezvous``); a short count (mail lost with a broken link or a rejoin)
  makes this node ask again. What still reaches the previous one for the peer (its tree before the
  subscriptions go, a late catch-up, mail from further back) follows the peer's forwarding address,
  kept for ``retention_seconds``; a handover that describes a move older than the peer's latest
  arrival (both times on the peer's clock) is refused as stale, so forwarding addresses lead to
  where the peer is. Direct look-ups (``superpeer.locating``) and rendezvous requests that reach
  the previous one follow them too. If the previous one does not answer within
  ``handover_seconds``, the node asks the origins for what was published since the peer last heard
  from it, and keeps asking the previous one (durably) until it answers: when it comes back, what
  it kept is handed over.
* **Leaving.** A super-peer that leaves cleanly hands its peers (their subscriptions,
  advertisement and mail) to a neighbour (``Adopt``), tells its attached peers where they went
  (``Goodbye.successor``), withdraws its advertisement and leaves the cube.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import crypto
import qel
import wire
from hypercup import HypercupNode, NodeState
from hypercup.errors import HypercupError, LocalProtocolError
from hypercup.events import Departed, Joined, JoinFailed, Left, Send, TopologyChanged
from hypercup.positions import tree_parent_position
from superpeer import versions
from superpeer.access import AccessPointSession, Ended, Established, Reply, Request
from superpeer.actions import (
    Action,
    CloseConnection,
    Deliver,
    Forgotten,
    Found,
    LogPublication,
    Replay,
    Stopped,
    ToConnection,
    ToPeer,
    ToSuperPeer,
)
from superpeer.core import CoreConfig, SuperPeerCore, TopologyView, broadcast_key, trace_record
from superpeer.expiry import SubscriptionExpiries
from superpeer.locating import Locator, LocatorConfig
from superpeer.mailroom import Mailroom, mail_key
from superpeer.rendezvous import Rendezvous, RendezvousConfig
from superpeer.routes import Whereabouts
from superpeer.store import Store
from superpeer.trace import TraceRecord
from wire import messages as m
from wire.framing import Received

log = logging.getLogger("superpeer")
# peer messages the node handles itself (the core traces the others when it handles them)
_OUTSIDE_CORE = (m.Delivered, m.Moved, m.Leave)
# backbone messages the node handles itself
_FROM_ANY = (
    m.Evicted,
    m.CatchUp,
    m.ReplayRequest,
    m.Mail,
    m.HandoverDone,
    m.HandoverReceived,
)
"""What is taken from a departed or replaced incarnation too: it does not depend on its routing
state (mail is publications, kept once; an eviction names the incarnation it is about)."""
_RENDEZVOUS = (m.RendezvousRequest, m.RendezvousChunk)
_DIRECT_LOOKUPS = (m.LocateDirect, m.LocateReply)
_NODE_HANDLED = (
    m.Evicted,
    m.Heartbeat,
    m.CatchUp,
    m.ReplayRequest,
    m.Mail,
    m.Handover,
    m.HandoverDone,
    m.HandoverReceived,
    m.AdoptLog,
    *_RENDEZVOUS,
    *_DIRECT_LOOKUPS,
)
_RESOURCE_REQUESTS = (m.Fetch, m.Upload, m.Collect, m.Collected)
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
    """Notifications per ``Mail`` message."""
    rendezvous: RendezvousConfig = field(default_factory=RendezvousConfig)
    locating: LocatorConfig = field(default_factory=LocatorConfig)


@dataclass
class _Forward:
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
    def restored(cls, entry: dict) -> _Forward:
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
class _Connection:
    session: AccessPointSession
    host: str
    counted: bool = True
    """Still counted against its address's limit of unidentified connections."""


@dataclass
class _CatchUp:
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


class SuperPeerNode:
    """One super-peer; see the module docstring."""

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
        self._connections: dict[int, _Connection] = {}
        self._next_connection = 1
        self._unidentified: Counter[str] = Counter()
        self._peer_connection: dict[str, int] = {}
        self._catchups: list[_CatchUp] = []
        self._subscribed_at: dict[tuple[str, str], float] = {}
        self._unsubscribed_at: dict[tuple[str, str], float] = {}
        """When each subscription made here in this incarnation was made (catch-up never asks
        for what was published before a subscription existed)."""
        self._withdrawn: dict[str, dict[str, tuple[qel.Subscription, float, float]]] = {}
        """Subscriptions withdrawn in the last ``log_seconds``, with when they were made and
        withdrawn: a repair catches up for them too, for the time they were active (a route
        broken before the withdrawal may have lost what they were owed)."""
        self.expiries = SubscriptionExpiries()
        self._moved_away: dict[str, _Forward] = {}
        self._handover_due: dict[str, float] = {}
        """Pending handovers (request -> when to ask again)."""
        self._handover_tries: dict[str, int] = {}
        self._awaiting: set[str] = set()
        self._handed_in: dict[str, set[str]] = {}
        """Per handover asked for, the notifications (mail keys) its answers brought so far:
        the previous access point keeps everything until told, so each answer holds all the
        earlier ones did; an answer is complete when as many distinct ones came as it counts."""
        """Handovers whose first answer (or the catch-up instead) is still awaited."""
        self._restored_since: float | None = None
        self._replay: list[tuple[float, m.Notification]] = []
        self._before_member: list[tuple[str, int, Received]] = []
        self._housekeeping_at = 0.0
        self._message_number = 0

    # == lifecycle =================================================================================
    def start(self, now: float, contacts: list[tuple[str, str]]) -> list[Output]:
        """Start (or restart, on a store that holds state): create a cube when ``contacts`` is
        empty, else join through the first contact that accepts (node id, address)."""
        out: list[Output] = []
        self.incarnation = self.store.next_incarnation()
        alive = self.store.get_meta("alive_at")
        if alive is not None and (self.store.local_peers() or self.store.registered()):
            self._restored_since = float(alive) - self.config.catchup_margin_seconds
        previous = self.store.get_meta("neighbours")
        old_neighbours = []
        if previous:
            # tell the old neighbours at once that this incarnation replaced the one they knew
            for entry in previous.split(","):
                node, _, address = entry.partition("=")
                if node and node != self.node_id:
                    self.addresses[node] = address
                    old_neighbours.append((node, address))
                    self._send(node, m.Heartbeat(), now, out)
        # join through the old neighbours that answered first: they refuse until the old
        # incarnation's place is repaired, where another member might admit this one into a
        # cube still repairing it
        self._contacts = [c for c in contacts if c[0] != self.node_id]
        self._old_neighbours = {node for node, _ in old_neighbours} & {
            node for node, _ in self._contacts
        }
        self._old_neighbours_until = now + 5 * self.config.failure_seconds
        if not self._contacts:
            self._topology(self.topology.create(), now, out)
        else:
            self._join(now, out)
        self._housekeeping_at = now
        return out

    def _join(self, now: float, out: list[Output]) -> None:
        self._join_at = None
        if self._nobody_in_the_cube(now):
            # every super-peer this node knows is out of the cube (a failure in the middle of a
            # join or a grow broke them all): the smallest live one starts a new cube, the
            # others join it
            log.warning("event=cube_recreated node=%s", self.node_id)
            self._outside.clear()
            self._silent_since.clear()
            self._topology(self.topology.create(), now, out)
            return
        if now < self._old_neighbours_until and self._old_neighbours:
            # a restart: only the old neighbours, while they may still be repairing its place
            while self._contacts[0][0] not in self._old_neighbours:
                self._contacts.append(self._contacts.pop(0))
        contact_id, contact_address = self._contacts[0]
        self._contacts.append(self._contacts.pop(0))
        self.addresses[contact_id] = contact_address
        self._join_contact = (contact_id, now)
        log.info("event=joining node=%s contact=%s", self.node_id, contact_id)
        try:
            self._topology(self.topology.join_via(contact_id, contact_address), now, out)
        except HypercupError as error:
            log.warning("event=join_error node=%s error=%r", self.node_id, str(error))
            self._join_at = now + self.config.rejoin_seconds

    def _nobody_in_the_cube(self, now: float) -> bool:
        contacts = {node for node, _ in self._contacts}
        if not contacts or not contacts <= set(self._outside):
            return False
        alive = [node for node in contacts if self._outside[node]]
        if any(
            now - self._silent_since.get(node, now) < self.config.wedged_seconds
            for node in contacts
            if not self._outside[node]
        ):
            return False
        return bool(alive) and self.node_id < min(alive)

    def _abandon_join(self, contact: str, now: float, out: list[Output]) -> None:
        """The member asked to admit this node has said nothing (it died, stalled, or left):
        ask another one, as a new incarnation, so that if the silent one admitted this node
        after all, the place it was given is repaired as a restarted node's."""
        log.warning("event=join_abandoned node=%s contact=%s", self.node_id, contact)
        self._outside.setdefault(contact, False)
        self._silent_since.setdefault(contact, now)
        self.incarnation = self.store.next_incarnation()
        out += [Forgotten(n, drain=False) for n in sorted(self.addresses) if n != self.node_id]
        self.topology = HypercupNode(self.node_id, self.address)
        self._join_contact = None
        self._join(now, out)

    def leave(self, now: float) -> list[Output]:
        """Leave cleanly: hand the peers to a neighbour, tell them, withdraw what this origin
        announced, leave the cube (``Stopped`` follows ``hypercup.Left``)."""
        out: list[Output] = []
        if self.stopping:
            return out
        self.stopping = True
        core = self.core
        successor = None
        if core is not None and self.topology.state is NodeState.MEMBER:
            successor = self.successor()
        if successor is not None:
            for peer in sorted(set(self.store.local_peers()) | set(self._peer_connection)):
                self._adopt_out(peer, successor, now, out)
            self._adopt_log_out(successor, now, out)
            assert core is not None
            self._core(
                core.announce_departure(
                    self.node_id,
                    self.incarnation,
                    tuple(sorted(core.view.positions)),
                    failed=False,
                    since=now,
                    now=now,
                    successor=successor,
                ),
                now,
                out,
            )
        for connection in sorted(self._peer_connection.values()):
            goodbye = m.Goodbye(
                reason="the super-peer is leaving the network",
                successor=self.addresses.get(successor, "") if successor else "",
            )
            out.append(ToConnection(connection, goodbye, wire.encode(goodbye)))
            out.append(CloseConnection(connection, "leaving"))
        if core is not None:
            out += core.retire(now)
        self._leave_cube(now, out)
        return out

    def _leave_cube(self, now: float, out: list[Output]) -> None:
        if self.topology.state is not NodeState.MEMBER:
            self.stopped = True
            out.append(Stopped("left"))
            return
        try:
            self._topology(self.topology.leave(), now, out)
        except LocalProtocolError:
            self._join_at = now + self.config.rejoin_seconds  # busy: ``timer`` tries again

    def successor(self) -> str | None:
        """The neighbour that adopts this node's peers when it leaves."""
        if self.core is None:
            return None
        neighbours = sorted(self.core.view.neighbours())
        return neighbours[0] if neighbours else None

    # == the topology ==============================================================================
    def _topology(self, outputs: list, now: float, out: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, Send):
                self.addresses.setdefault(output.to, output.address)
                self._send(output.to, output.message, now, out, address=output.address)
            elif isinstance(output, Joined):
                self._join_contact = None
                self._joined(now, out)
            elif isinstance(output, TopologyChanged):
                self._changed(output, now, out)
            elif isinstance(output, JoinFailed):
                if self._join_contact is not None:
                    self._silent_since.pop(self._join_contact[0], None)
                    if output.member:
                        self._outside.pop(self._join_contact[0], None)
                    else:
                        self._outside[self._join_contact[0]] = True
                self._join_contact = None
                log.info("event=join_refused node=%s reason=%r", self.node_id, output.reason)
                self._join_at = now + self.config.rejoin_seconds
            elif isinstance(output, Departed):
                self._took_place_of(output, now, out)
            elif isinstance(output, Left):
                self.stopped = True
                log.info("event=left node=%s", self.node_id)
                out.append(Stopped("left the cube"))

    def _joined(self, now: float, out: list[Output]) -> None:
        self._outside.clear()
        self._silent_since.clear()
        view = self.topology.view()
        self.core = SuperPeerCore(
            self.node_id, self.address, view, self.config.routing, incarnation=self.incarnation
        )
        log.info(
            "event=member node=%s incarnation=%d positions=%s",
            self.node_id,
            self.incarnation,
            sorted(view.positions),
        )
        self._trace_event(out, now, "member", kind="hypercup.joined")
        # alive from now on (housekeeping renews it): a crash before the first renewal must
        # still catch up from here when it restarts, not skip the catch-up for want of a time
        self.store.set_meta("alive_at", repr(now))
        self._restore(now, out)
        early, self._before_member = self._before_member, []
        for sender, incarnation, received in early:
            out += self.superpeer_message(sender, incarnation, received, now)

    def _changed(self, change: TopologyChanged, now: float, out: list[Output]) -> None:
        self.addresses.update(change.addresses)
        view = change.view
        neighbours = view.neighbours()
        for neighbour in neighbours:
            self._last_heard.setdefault(neighbour, now)
        for gone in set(self._last_heard) - neighbours:
            del self._last_heard[gone]
            if self._has_left(gone):
                out.append(Forgotten(gone))  # re-opened by what was routed to it while it left
        for gone in set(self._neighbour_incarnations) - neighbours:
            del self._neighbour_incarnations[gone]
        self._suspected = {n: t for n, t in self._suspected.items() if n in neighbours}
        self.store.set_meta(
            "neighbours", ",".join(f"{n}={change.addresses[n]}" for n in sorted(neighbours))
        )
        if self.core is not None:
            self._core(self.core.topology_changed(view, now), now, out)

    def _took_place_of(self, departed: Departed, now: float, out: list[Output]) -> None:
        out.append(Forgotten(departed.node))
        self._renewed.add(departed.node)
        # the incarnation it had as our neighbour; else the newest we heard of (a node that
        # joined next to it and was never sent anything by it): with 0, nobody would evict it
        incarnation = self._neighbour_incarnations.get(
            departed.node, self.incarnations.get(departed.node, 0)
        )
        if departed.failed:
            self.departed[departed.node] = incarnation
        else:
            self._left[departed.node] = max(self._left.get(departed.node, 0), incarnation)
        self.statistics.repairs += int(departed.failed)
        self._trace_event(
            out,
            now,
            "repair" if departed.failed else "departure",
            kind="sp.departed",
            neighbour=departed.node,
        )
        if self.core is None:
            return
        since = self._last_heard.get(departed.node, now)
        self._core(
            self.core.announce_departure(
                departed.node,
                incarnation,
                departed.positions,
                failed=departed.failed,
                since=since,
                now=now,
            ),
            now,
            out,
        )
        self._plan_catchup(departed.positions, since, now)

    # == other super-peers =========================================================================
    def superpeer_hello(
        self, node: str, incarnation: int, address: str, now: float
    ) -> list[Output]:
        """Super-peer ``node`` (at ``address``) opened a connection to this one."""
        out: list[Output] = []
        if address:
            self.addresses[node] = address
        self._heard(node, now)
        self._incarnation(node, incarnation, now, out)
        return out

    def _incarnation(self, node: str, incarnation: int, now: float, out: list[Output]) -> None:
        previous = self.incarnations.get(node, 0)
        self.incarnations[node] = max(incarnation, previous)
        if incarnation > previous > 0:
            if self.core is not None:
                self._core(self.core.neighbour_restarted(node, now), now, out)
            if node in self._renewed:
                self._renewed.discard(node)
            else:
                out.append(Forgotten(node, drain=False))
        if not self._is_neighbour(node):
            return
        known = self._neighbour_incarnations.setdefault(node, self.incarnations[node])
        if incarnation > known:
            self._restarted(node, now, out)

    def superpeer_heard(self, node: str, now: float) -> None:
        """Any sign of life on a link with ``node`` (an acknowledgement, a frame)."""
        self._heard(node, now)

    def _heard(self, node: str, now: float) -> None:
        if self._join_contact is not None and self._join_contact[0] == node:
            self._join_contact = (node, now)
        if node in self._last_heard:
            self._last_heard[node] = now
        known = self._neighbour_incarnations.get(node)
        if known is not None and self.incarnations.get(node, 0) > known:
            return  # a new incarnation: the one in our table is still dead, and unrepaired
        self._suspected.pop(node, None)

    def superpeer_unreachable(self, node: str, now: float) -> list[Output]:
        """The runtime gave up on its link to ``node`` (its queue overflowed)."""
        out: list[Output] = []
        if self._is_neighbour(node):
            self._fail(node, now, out)
        return out

    def superpeer_message(
        self, sender: str, incarnation: int, received: Received, now: float
    ) -> list[Output]:
        """A message from super-peer ``sender`` (whose connection said ``incarnation``)."""
        message, message_id, size = received.message, received.message_id, received.size
        out: list[Output] = []
        self._heard(sender, now)
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.statistics.received[kind] += 1
        self._incarnation(sender, incarnation, now, out)
        if incarnation < self.incarnations[sender] and not isinstance(message, _FROM_ANY):
            # still in flight from an incarnation that a newer one replaced: its state is gone
            self._trace(out, now, "drop", message, neighbour=sender, size=size, msg=message_id)
            return out
        if self.departed.get(sender, -1) >= incarnation and not isinstance(message, _FROM_ANY):
            self._trace(out, now, "drop", message, neighbour=sender, size=size, msg=message_id)
            evicted = m.Evicted(
                reason=f"{sender} incarnation {incarnation} departed the cube",
                incarnation=incarnation,
            )
            self._send(sender, evicted, now, out)
            return out
        if (
            kind.startswith("hypercup.")
            or isinstance(message, _NODE_HANDLED)
            or (isinstance(message, m.Adopt) and self.core is not None)
        ):
            # the node handles these itself (the core traces what it handles)
            self._trace(out, now, "receive", message, neighbour=sender, size=size, msg=message_id)
        if isinstance(message, m.Evicted):
            # the cube replaced this incarnation while it was unreachable (paused, cut off):
            # whatever its own view says, it is not a member any more
            if self.topology.state is NodeState.MEMBER and message.incarnation == self.incarnation:
                self._rejoin(f"evicted: {message.reason}", now, out)
            return out
        if kind.startswith("hypercup."):
            self._hypercup(sender, message, now, out)
        elif isinstance(message, m.Heartbeat):
            pass  # a sign of life, noted above
        elif isinstance(message, m.CatchUp):
            self._serve_catchup(sender, message, now, out)
        elif isinstance(message, m.ReplayRequest):
            self._replay_for_late(Replay(sender, message.subscription, message.since), now, out)
        elif isinstance(message, m.Mail):
            self._mail_in(message, now, out)
        elif isinstance(message, m.Handover):
            self._handover_out(sender, message, now, out)
        elif isinstance(message, m.HandoverDone):
            self._handover_done(sender, message, now, out)
        elif isinstance(message, m.HandoverReceived):
            self._handover_received(sender, message)
        elif isinstance(message, m.AdoptLog):
            self._adopt_log_in(message)
        elif isinstance(message, _RENDEZVOUS):
            produced: list = []
            self.rendezvous.route(message, now, produced)
            self._core(produced, now, out)
        elif isinstance(message, _DIRECT_LOOKUPS):
            produced = []
            self.locator.route(message, now, produced)
            self._core(produced, now, out)
        elif isinstance(message, m.Adopt) and self.core is not None:
            self._adopt_in(sender, message, now, out)
        elif self.core is None:
            # from members that already count this newcomer as a neighbour: its Welcome may
            # still be on its way (another sender, another link)
            self._before_member.append((sender, incarnation, received))
        else:
            # a broadcast may arrive again down another tree: only its first arrival counts
            fresh = not isinstance(message, m.Departed | m.Returned) or not self.core.has_seen(
                broadcast_key(message), now
            )
            self._core(
                self.core.superpeer_message(sender, message, size, now, message_id), now, out
            )
            if fresh:
                self._broadcast_in(message, now, out)
        return out

    def _broadcast_in(self, message: object, now: float, out: list[Output]) -> None:
        """What the node itself does with the first arrival of ``sp.departed`` or
        ``sp.returned`` (the core relayed it and updated its routes)."""
        if isinstance(message, m.Departed) and message.node == self.node_id:
            if message.failed and message.incarnation == self.incarnation:
                # the cube declared this incarnation failed (it was paused, or cut off) and
                # the news came down a tree that still ran through it
                self._rejoin("the cube declared this super-peer failed", now, out)
        elif isinstance(message, m.Departed):
            # what is queued for it still goes out (a goodbye is answered): Forgotten drains
            if self.incarnations.get(message.node, 0) <= message.incarnation:
                # (not when a newer incarnation spoke already: the link is its)
                out.append(Forgotten(message.node))
                self._renewed.add(message.node)
            if message.failed:  # a node declared failed may still be alive: evict it
                self.departed[message.node] = max(
                    self.departed.get(message.node, 0), message.incarnation
                )
            else:
                self._left[message.node] = max(self._left.get(message.node, 0), message.incarnation)
            if message.successor:
                self.successors[message.node] = message.successor
                if message.successor_address:
                    self.addresses.setdefault(message.successor, message.successor_address)
            # a clean departure too: what was in flight through the leaver when it went is
            # gone with it
            self._plan_catchup(message.positions, message.since, now)
        elif isinstance(message, m.Returned):
            self._returned(message, now, out)

    def _hypercup(self, sender: str, message: object, now: float, out: list[Output]) -> None:
        try:
            self._topology(self.topology.receive(sender, message), now, out)  # type: ignore[arg-type]
        except HypercupError as error:
            log.warning(
                "event=topology_error node=%s sender=%s error=%r", self.node_id, sender, str(error)
            )
            if self.topology.state is NodeState.BROKEN:
                self._rejoin(f"the topology protocol broke: {error}", now, out)

    def _restarted(self, node: str, now: float, out: list[Output]) -> None:
        if self._is_neighbour(node):
            log.warning("event=neighbour_restarted node=%s neighbour=%s", self.node_id, node)
            self._fail(node, now, out)

    def _has_left(self, node: str) -> bool:
        """``node`` left cleanly and is out of our view, and no newer incarnation showed up."""
        left = self._left.get(node)
        return (
            left is not None
            and self.incarnations.get(node, 0) <= left
            and not self._is_neighbour(node)
        )

    def _dropped(self, target: str, message: object, now: float, out: list[Output]) -> bool:
        """Whether ``message`` is not sent, ``target`` having left (the one place this is
        decided, for the node's messages and the core's alike). The topology protocol's own
        messages still reach a leaver: its ``Released``."""
        kind: str = type(message).KIND  # type: ignore[attr-defined]
        if self._has_left(target) and not kind.startswith("hypercup."):
            self._trace(out, now, "drop", message, neighbour=target)
            return True
        return False

    def _is_neighbour(self, node: str) -> bool:
        return self.topology.state is NodeState.MEMBER and node in self.topology.view().neighbours()

    def _fail(self, node: str, now: float, out: list[Output]) -> None:
        if node not in self._suspected:
            self.statistics.failures_detected += 1
            log.error("event=neighbour_failed node=%s neighbour=%s", self.node_id, node)
            self._trace_event(out, now, "neighbour_failed", kind="sp.heartbeat", neighbour=node)
        since = self._suspected.setdefault(node, now)
        self._retry_at = now + (self.config.heartbeat_seconds or self.config.rejoin_seconds)
        # still unrepaired after failure_seconds: the designated repairer may be dead too
        fallback = int((now - since) // self.config.failure_seconds)
        try:
            self._topology(self.topology.neighbour_failed(node, fallback=fallback), now, out)
        except LocalProtocolError as error:
            log.info(
                "event=repair_deferred node=%s neighbour=%s reason=%r",
                self.node_id,
                node,
                str(error),
            )
        except HypercupError as error:
            log.warning("event=repair_error node=%s error=%r", self.node_id, str(error))
            if self.topology.state is NodeState.BROKEN:
                self._rejoin(f"the topology protocol broke: {error}", now, out)

    def _rejoin(self, reason: str, now: float, out: list[Output]) -> None:
        """Out of the cube while alive (evicted, or the protocol broke): start again as a new
        incarnation, on the durable state, through the members this node knows."""
        log.error("event=rejoin node=%s reason=%r", self.node_id, reason)
        self.statistics.rejoins += 1
        self._trace_event(out, now, "rejoin", kind="hypercup.join_request")
        since = min(self._last_heard.values(), default=now) - self.config.catchup_margin_seconds
        contacts = [
            (n, a)
            for n, a in sorted(self.addresses.items())
            if n != self.node_id and not self._has_left(n)
        ]
        # the members we heard from last are the likeliest to answer
        contacts.sort(key=lambda c: -self._last_heard.get(c[0], -math.inf))
        for connection in list(self._peer_connection.values()):
            goodbye = m.Goodbye(reason="the super-peer is rejoining the network")
            out.append(ToConnection(connection, goodbye, wire.encode(goodbye)))
            self._close(connection, "rejoining", now, out)
        self.incarnation = self.store.next_incarnation()
        # every link said the old incarnation in its Hello: open them again as the new one (the
        # members drop what the old one sends), and drop what was queued for the old cube
        out += [Forgotten(node, drain=False) for node, _ in contacts]
        self.topology = HypercupNode(self.node_id, self.address)
        self.core = None
        self._last_heard.clear()
        self._suspected.clear()
        self._neighbour_incarnations.clear()  # the next cube's neighbours are new acquaintances
        self._busy_since = None
        self._lagging_since = None
        self._catchups.clear()
        self._timer_due = None
        self._before_member.clear()
        self._restored_since = since
        self._contacts = contacts
        self._old_neighbours = set()  # the cube replaced this incarnation already
        if contacts:
            self._join(now, out)
        else:
            self._topology(self.topology.create(), now, out)

    # == the routing core ==========================================================================
    def _core(self, outputs: list, now: float, out: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, ToSuperPeer):
                if self._dropped(output.node, output.message, now, out):
                    continue
                address = output.address or self.addresses.get(output.node, "")
                self._last_sent[output.node] = now
                out.append(dataclasses.replace(output, address=address))
            elif isinstance(output, Deliver):
                self._deliver(output.peer, output.notify, now, out)
            elif isinstance(output, ToPeer):
                connection = self._peer_connection.get(output.peer)
                if connection is not None:
                    out.append(ToConnection(connection, output.message, output.data))
            elif isinstance(output, LogPublication):
                notification = output.notification
                self.store.log_publication(
                    mail_key(notification.owner, notification.publication.id, notification.version),
                    wire.encode(notification),
                    notification.published_at,
                )
                self.store.set_pending(versions.RECORDS, *versions.record_of(notification))
            elif isinstance(output, Found):
                produced: list = []
                self.rendezvous.found(output.request, output.superpeer, now, produced)
                self._core(produced, now, out)
            elif isinstance(output, Replay) and output.origin:
                request = m.ReplayRequest(subscription=output.subscription, since=output.since)
                self._send(output.origin, request, now, out, address=output.address)
            elif isinstance(output, Replay):
                self._replay_for_late(output, now, out)
            else:
                out.append(output)

    def _deliver(
        self, peer: str, notify: m.Notify, now: float, out: list[Output], *, kept: bool = False
    ) -> None:
        # a publication replayed by an origin that restarted, or caught up, may be older than
        # the subscription it matches now: a subscription gets what was published after it was
        # made (less the margin that covers clocks), not the network's history. Not so for mail
        # kept by the peer's previous access point (``kept``): it matched there, while the
        # subscription stood, and is owed however old it is (the subscription's time here is
        # when the peer brought it, after the move)
        # and nothing is owed for a subscription the peer withdrew here before the publication
        # (mail forwarded by a previous access point matched what the peer had there)
        margin = self.config.catchup_margin_seconds
        published = notify.published_at

        def stands(sid: str) -> bool:
            ended = self._unsubscribed_at.get((peer, sid))
            if ended is not None and ended <= published and (peer, sid) not in self._subscribed_at:
                return False
            return kept or published >= self._subscribed_at.get((peer, sid), -math.inf) - margin

        standing = tuple(sid for sid in notify.subscriptions if stands(sid))
        if not standing:
            self._trace(out, now, "drop", notify, peer=peer)
            return
        if standing != notify.subscriptions:
            notify = dataclasses.replace(notify, subscriptions=standing)
        if peer in self._moved_away:
            # the peer moved away; its subscriptions here go after ``settle_seconds``
            self._forward(peer, (notify,), 1, now, out)
            return
        core = self.core
        assert core is not None
        news = versions.narrowed(notify, lambda sid: core.on_change(peer, sid))
        if news is None:
            self._trace(out, now, "drop", notify, peer=peer)
            return
        out += self.mail.deliver(peer, news, now)

    def _forward(
        self, peer: str, notifications: tuple[m.Notify, ...], hops: int, now: float, out: list
    ) -> None:
        """What reaches this node for a peer that moved away follows it, whatever way it came
        (its tree before the subscriptions here go, a catch-up asked before it moved, mail
        handed over or forwarded to this node before it learned that the peer moved on):
        dropping it here would lose it. Forwarding addresses point to where the peer went
        after its stay here and a stale handover is refused (``_check_handover``), so the
        chain ends where the peer is; ``MAX_FORWARD_HOPS`` bounds it all the same."""
        forward = self._moved_away[peer]
        if hops > MAX_FORWARD_HOPS:
            log.error(
                "event=forward_dropped node=%s peer=%s notifications=%d hops=%d",
                self.node_id,
                peer,
                len(notifications),
                hops,
            )
            for notify in notifications:
                self._trace(out, now, "drop", notify, peer=peer)
            return
        self.statistics.forwarded += len(notifications)
        batch = self.config.mail_batch
        for start in range(0, len(notifications), batch):
            mail = m.Mail(
                request="",
                purpose="forward",
                peer=peer,
                notifications=notifications[start : start + batch],
                last=True,
                hops=hops,
            )
            self._send(forward.node, mail, now, out, address=forward.address)

    def _restore(self, now: float, out: list[Output]) -> None:
        """A new member on a store that holds peers: route their state again; then, once the
        routes settled, catch up on what was published while this node was away."""
        core = self.core
        assert core is not None
        for peer in self.store.local_peers():
            state = self.store.local_state(peer)
            core.attach(peer, now)
            connection = self._peer_connection.get(peer)
            if connection is None:
                core.detach(peer, now)
            if state.advertisement is not None:
                advertise = _decoded(state.advertisement, m.Advertise)
                if advertise is not None:
                    self._core_call(
                        lambda o, a=advertise, p=peer: core.advertise(p, a.advertisement, now, o),
                        now,
                        out,
                    )
            schema = _decoded(state.schema, m.PublishSchema)
            if schema is not None:
                self._core_call(
                    lambda o, s=schema, p=peer: core.publish_schema(p, frozenset(s.axioms), now, o),
                    now,
                    out,
                )
            for sid, made in state.subscribed_at.items():
                self._subscribed_at.setdefault((peer, sid), made)
            for data in state.subscriptions.values():
                subscribe = _decoded(data, m.Subscribe)
                if subscribe is not None:
                    self._core_call(
                        lambda o, s=subscribe, p=peer: core.subscribe(
                            p, s.id, s.subscription, now, o, on_change=s.on_change
                        ),
                        now,
                        out,
                    )
                    self.expiries.set(peer, subscribe.id, subscribe.expires)
        for peer in self._peer_connection:
            core.attach(peer, now)
        versions.restore(core.versions, self.store.pending(versions.RECORDS))
        for pending in self.store.pending(HANDOVERS):
            self._handover_due[pending] = now
        for peer, entry in self.store.pending(MOVED).items():
            self._moved_away[peer] = _Forward.restored(entry)
        since = self._restored_since
        restored = tuple(self.store.local_peers())
        if restored:
            self._core_call(
                lambda o: core.broadcast(
                    m.Returned(
                        origin=self.node_id,
                        origin_position=core.view.root_position,
                        incarnation=self.incarnation,
                        peers=restored,
                    ),
                    now,
                    o,
                ),
                now,
                out,
            )
        if since is not None:
            self._restored_since = None
            due = now + self.config.routing.settle_seconds
            self._catchups.append(_CatchUp(due, since, None, None))
            for data in self.store.logged_since(since):
                notification = _decoded(data, m.Notification)
                if notification is not None:
                    self._replay.append((due, notification))

    def _core_call(self, call: Callable[[list], object], now: float, out: list[Output]) -> None:
        produced: list = []
        call(produced)
        self._core(produced, now, out)

    # == catch-up ==================================================================================
    def _plan_catchup(self, positions: tuple[int, ...], since: float, now: float) -> None:
        """Routes through ``positions`` broke: after the new ones settle, ask the origins whose
        trees ran through them for what was published since ``since``."""
        core = self.core
        if core is None or not (self.store.local_peers() or self._withdrawn):
            return
        lost = set(positions)
        mine = core.recent_positions()
        origins = set()
        for origin, position in core.origin_positions.items():
            if any(lost & _tree_path(position, own) for own in mine) or position in lost:
                origins.add(origin)
        if not origins:
            return
        due = now + self.config.routing.settle_seconds
        self._catchups.append(
            _CatchUp(due, since - self.config.catchup_margin_seconds, None, frozenset(origins))
        )

    def _ask_catchups(self, now: float, out: list[Output]) -> None:
        core = self.core
        if core is None:
            return
        due = [c for c in self._catchups if c.due <= now]
        self._catchups = [c for c in self._catchups if c.due > now]
        for catchup in due:
            peers = catchup.peers
            if peers is None:
                peers = set(self.store.local_peers()) | set(self._withdrawn)
            wanted: dict[str, list[tuple[str, str, qel.Subscription, float, float]]] = {}
            margin = self.config.catchup_margin_seconds
            # every super-peer it knows, not only the origins whose advertisements cover the
            # subscription now: a publisher that published while this node was away may have
            # left or moved since (its advertisement withdrawn there), and what it published
            # is still in that origin's log
            origins = sorted(
                {self.node_id, *core.origin_positions}
                | {n for n in self.addresses if not self._has_left(n)}
            )
            for peer in sorted(peers):
                if peer in self._moved_away:
                    continue  # it moved on: its new access point catches up for it
                if catchup.subscriptions is not None:
                    subscriptions = catchup.subscriptions.get(peer, {})
                else:
                    subscriptions = core.subscriptions_of(peer)
                for sid, subscription in sorted(subscriptions.items()):
                    since, until = catchup.since, catchup.until
                    if catchup.subscriptions is None:
                        since = max(since, self._subscribed_at.get((peer, sid), -math.inf) - margin)
                    else:
                        until = min(until, self._unsubscribed_at.get((peer, sid), math.inf))
                    entry = (peer, sid, subscription, since, until)
                    for origin in origins:
                        if catchup.origins is None or origin in catchup.origins:
                            wanted.setdefault(origin, []).append(entry)
                if catchup.subscriptions is not None:
                    continue
                for sid, (subscription, made, ended) in sorted(
                    self._withdrawn.get(peer, {}).items()
                ):
                    if ended <= catchup.since:
                        continue
                    since = max(catchup.since, made - margin)
                    entry = (peer, sid, subscription, since, min(catchup.until, ended))
                    for origin in origins:
                        if catchup.origins is None or origin in catchup.origins:
                            wanted.setdefault(origin, []).append(entry)
            for origin, entries in sorted(wanted.items()):
                if origin == self.node_id:
                    self._catch_up_locally(entries, now, out)
                    continue
                if self.departed.get(origin, -1) >= core.origin_versions.get(origin, (0, 0))[0]:
                    continue
                self.statistics.catchups_asked += 1
                request = m.CatchUp(request=self._next_id(), entries=tuple(entries))
                address = core.origin_addresses.get(origin) or self.addresses.get(origin, "")
                self._send(origin, request, now, out, address=address)

    def _matches(
        self, entries: tuple[tuple[str, str, qel.Subscription, float, float], ...] | list
    ) -> dict[str, list[m.Notify]]:
        """Per peer, the logged publications that its entries match, each in its window."""
        found: dict[str, list[m.Notify]] = {}
        if not entries:
            return found
        for data in self.store.logged_since(min(entry[3] for entry in entries)):
            notification = _decoded(data, m.Notification)
            if notification is None:
                continue
            matched: dict[str, dict[str, list[bool]]] = {}
            for peer, sid, subscription, since, until in entries:
                if since <= notification.published_at < until:
                    old, new = versions.concerns(subscription, notification)
                    if old or new:
                        matched.setdefault(peer, {})[sid] = [old, new]
            for peer, sids in matched.items():
                notify = versions.notify_of(notification, sids)
                found.setdefault(peer, []).append(dataclasses.replace(notify, hops=0))
        return found

    def _replay_for_late(self, replay: Replay, now: float, out: list[Output]) -> None:
        """What this origin published since a late subscription was made, and it matches, to
        the neighbour it came from, marked ``replayed`` (relayed again down its new path). A
        subscription later than ``failure_seconds`` went over a link that was declared failed,
        and the repair's catch-up covers it: the replay goes back no further than that."""
        margin = self.config.catchup_margin_seconds
        horizon = self.config.failure_seconds + self.config.routing.settle_seconds + margin
        since = max(replay.since - margin, now - horizon)
        sent = 0
        for data in self.store.logged_since(since):
            notification = _decoded(data, m.Notification)
            if notification is None or notification.published_at < since:
                continue
            old, new = versions.concerns(replay.subscription, notification)
            if old or new:
                again = dataclasses.replace(notification, hops=notification.hops + 1, replayed=True)
                self._send(replay.neighbour, again, now, out)
                sent += 1
        self.statistics.replayed += sent

    def _catch_up_locally(self, entries: list, now: float, out: list[Output]) -> None:
        for peer, notifications in self._matches(entries).items():
            for notify in notifications:
                self._recover(peer, notify, now, out)

    def _serve_catchup(
        self, sender: str, message: m.CatchUp, now: float, out: list[Output]
    ) -> None:
        self.statistics.catchups_served += 1
        found = self._matches(message.entries)
        peers = sorted({peer for peer, *_ in message.entries})
        for peer in peers:
            self._send_mail(
                sender,
                peer,
                found.get(peer, []),
                now,
                out,
                request=message.request,
                purpose="catchup",
            )

    def _send_mail(
        self,
        target: str,
        peer: str,
        notifications: list[m.Notify],
        now: float,
        out: list[Output],
        *,
        request: str,
        purpose: str,
        address: str = "",
    ) -> None:
        batch = self.config.mail_batch
        chunks = [notifications[i : i + batch] for i in range(0, len(notifications), batch)] or [[]]
        for number, chunk in enumerate(chunks):
            mail = m.Mail(
                request=request,
                purpose=purpose,
                peer=peer,
                notifications=tuple(chunk),
                last=number == len(chunks) - 1,
            )
            self._send(target, mail, now, out, address=address)

    def _mail_in(self, message: m.Mail, now: float, out: list[Output]) -> None:
        if message.purpose == "handover":
            self._handed_in.setdefault(message.request, set()).update(
                mail_key(n.owner, n.publication.id, n.version) for n in message.notifications
            )
            if message.request in self._handover_due:
                # a long answer is still coming: asking again now would only send it twice
                wait = now + self.config.handover_seconds
                self._handover_due[message.request] = max(self._handover_due[message.request], wait)
        if message.peer in self._moved_away:
            self._forward(message.peer, message.notifications, message.hops + 1, now, out)
            return
        # kept by another access point: it matched there while the subscription stood
        kept = message.purpose in ("handover", "forward", "adopt")
        for notify in message.notifications:
            self._recover(message.peer, notify, now, out, kept=kept)

    def _recover(
        self, peer: str, notify: m.Notify, now: float, out: list[Output], *, kept: bool = False
    ) -> None:
        known = self.core is not None and peer in self.core.peers
        if not known and peer not in self.store.local_peers() and peer not in self._moved_away:
            return
        before = self.mail.statistics.repeats
        self._deliver(peer, dataclasses.replace(notify, delivery=0), now, out, kept=kept)
        if self.mail.statistics.repeats == before:
            self.statistics.recovered += 1

    # == migration =================================================================================
    def _moved(self, peer: str, message: m.Moved, now: float, out: list[Output]) -> None:
        """The peer was attached to ``message.previous`` before: fetch what it kept."""
        if message.previous in ("", self.node_id):
            return
        request = f"{self.node_id}:{peer}:{self._next_id()}"
        entry = {
            "request": request,
            "peer": peer,
            "previous": message.previous,
            "address": message.previous_address,
            "since": message.since,
            "signature": message.signature.hex(),
            "caught_up": False,
            "asked_at": now,
            "subscriptions": {
                sid: wire.encode(m.Subscribe(id=sid, subscription=q)).hex()
                for sid, q in sorted(self.core.subscriptions_of(peer).items())
            }
            if self.core is not None
            else {},
        }
        for key, old in self.store.pending(HANDOVERS).items():
            if old["peer"] == peer and old["previous"] == message.previous:
                self._forget_handover(key)
        self.store.set_pending(HANDOVERS, request, entry)
        self.store.set_pending(MOVES, peer, entry)
        self._awaiting.add(request)
        self.addresses.setdefault(message.previous, message.previous_address)
        self._ask_handover(request, entry, now, out)

    def _ask_handover(self, request: str, entry: dict, now: float, out: list[Output]) -> None:
        """Ask the previous access point (again): the first wait is ``handover_seconds``, then
        it doubles (up to ten minutes) while the previous one does not answer."""
        self.statistics.handovers_in += 1
        tries = self._handover_tries.get(request, 0)
        self._handover_tries[request] = tries + 1
        wait = min(self.config.handover_seconds * 2**tries, 600.0)
        self._handover_due[request] = now + wait
        handover = m.Handover(
            request=request,
            peer=entry["peer"],
            moved_at=entry["asked_at"],
            previous=entry["previous"],
            superpeer=self.node_id,
            address=self.address,
            since=entry["since"],
            signature=bytes.fromhex(entry["signature"]),
        )
        holder, address = self._holder(entry["previous"], entry["address"])
        if holder == self.node_id:  # the peer's state came here with an adoption
            self._forget_handover(request)
            return
        self._send(holder, handover, now, out, address=address)

    def _holder(self, previous: str, address: str) -> tuple[str, str]:
        """Who keeps what ``previous`` kept: itself, or the super-peer that adopted its peers
        when it left (and so on)."""
        holder = previous
        for _ in range(16):
            if holder not in self.successors:
                break
            holder = self.successors[holder]
            address = self.addresses.get(holder, "")
        return holder, address

    def _returned(self, message: m.Returned, now: float, out: list[Output]) -> None:
        """``message.origin`` is back with the state of some peers: ask again at once for the
        ones it still holds that moved here; and claim the peers it holds an older copy of
        (they moved on, maybe through access points that are gone): showing the peer's latest
        move statement, which names this node and postdates their time there."""
        wanted = set(message.peers)
        asked = set()
        for request, entry in sorted(self.store.pending(HANDOVERS).items()):
            if entry["peer"] in wanted and entry["previous"] == message.origin:
                self._handover_tries[request] = 0
                self._ask_handover(request, entry, now, out)
                asked.add(entry["peer"])
        local = set(self.store.local_peers()) | set(self._peer_connection)
        for peer, statement in sorted(self.store.pending(MOVES).items()):
            if peer in wanted and peer in local and peer not in asked:
                claim = m.Handover(
                    request=f"{self.node_id}:claim:{self._next_id()}",
                    peer=peer,
                    moved_at=statement["asked_at"],
                    previous=statement["previous"],
                    superpeer=self.node_id,
                    address=self.address,
                    since=statement["since"],
                    signature=bytes.fromhex(statement["signature"]),
                )
                self._send(message.origin, claim, now, out)

    def _forget_handover(self, request: str) -> None:
        self.store.set_pending(HANDOVERS, request, None)
        self._handed_in.pop(request, None)
        self._handover_due.pop(request, None)
        self._handover_tries.pop(request, None)
        self._awaiting.discard(request)

    def _handover_timer(self, now: float, out: list[Output]) -> None:
        pending = self.store.pending(HANDOVERS)
        for request, due in sorted(self._handover_due.items()):
            if due > now:
                continue
            entry = pending.get(request)
            if entry is None:
                self._forget_handover(request)
                continue
            self._awaiting.discard(request)
            if not entry["caught_up"]:
                # the previous access point does not answer: take from the origins what was
                # published since the peer last heard from it; keep asking it for what it kept
                entry["caught_up"] = True
                self.store.set_pending(HANDOVERS, request, entry)
                self._catchups.append(self._moved_catchup(entry, now))
            if now - entry["asked_at"] > self.config.retention_seconds:
                self._forget_handover(request)
                continue
            self._ask_handover(request, entry, now, out)

    def _moved_catchup(self, entry: dict, now: float) -> _CatchUp:
        """What a moved peer may have missed: what its subscriptions (as it brought them)
        matched since it last heard from its previous access point."""
        subscriptions = {}
        for sid, data in entry.get("subscriptions", {}).items():
            subscribe = _decoded(bytes.fromhex(data), m.Subscribe)
            if subscribe is not None:
                subscriptions[sid] = subscribe.subscription
        settled = self.config.routing.settle_seconds + self.config.catchup_margin_seconds
        return _CatchUp(
            now,
            entry["since"] - self.config.catchup_margin_seconds,
            frozenset({entry["peer"]}),
            None,
            {entry["peer"]: subscriptions},
            until=entry["asked_at"] + settled,
        )

    def _handover_out(
        self, sender: str, message: m.Handover, now: float, out: list[Output]
    ) -> None:
        """A peer of ours moved to ``sender``: hand over what we keep and forget it."""
        refusal = self._check_handover(sender, message)
        if refusal is not None:
            log.warning(
                "event=handover_refused node=%s peer=%s to=%s reason=%r",
                self.node_id,
                message.peer,
                sender,
                refusal,
            )
            done = m.HandoverDone(
                request=message.request,
                peer=message.peer,
                accepted=False,
                reason=refusal,
                expired=0,
            )
            self._send(sender, done, now, out, address=message.address)
            return
        peer = message.peer
        self.statistics.handovers_out += 1
        kept, through = self.mail.handed_over(peer)
        if kept:
            self.store.set_pending(
                HANDED, message.request, {"peer": peer, "to": sender, "through": through}
            )
        expired = self.store.take_expired(peer)
        self._send_mail(
            sender,
            peer,
            kept,
            now,
            out,
            request=message.request,
            purpose="handover",
            address=message.address,
        )
        forward = _Forward(
            sender,
            message.address,
            forget_at=now + self.config.routing.settle_seconds,
            expires_at=now + self.config.retention_seconds,
        )
        self._moved_away[peer] = forward
        self.store.set_pending(MOVED, peer, forward.saved())
        self.store.remove(peer)  # its registration moves: moving back registers again
        self.store.set_pending(ADOPTED, peer, None)
        produced: list = []
        held = self.rendezvous.moved_away(
            peer, Whereabouts(forward=sender, forward_address=message.address), now, produced
        )
        self._core(produced, now, out)
        done = m.HandoverDone(
            request=message.request,
            peer=peer,
            accepted=True,
            reason="",
            expired=expired,
            count=len(kept),
            rendezvous=held,
        )
        self._send(sender, done, now, out, address=message.address)
        log.info(
            "event=handover node=%s peer=%s to=%s kept=%d", self.node_id, peer, sender, len(kept)
        )

    def _check_handover(self, sender: str, message: m.Handover) -> str | None:
        peer = message.peer
        if message.superpeer != sender:
            return f"the handover names {message.superpeer}, but {sender} sent it"
        if peer in self._peer_connection:
            return "the peer is attached here now"
        arrival = self.store.pending(MOVES).get(peer)
        if arrival is not None and arrival["since"] > message.since:
            # the move it describes is older than the peer's latest arrival here (both times
            # are the peer's clock): it came back since, and what is kept now is not the asker's
            return "the peer came back here after that move"
        if peer in self._moved_away and self._moved_away[peer].node == sender:
            return None  # asked again: what reached this node since goes too
        known = peer in self.store.local_peers() or self.store.get(peer) is not None
        if not known:
            return "the peer is unknown here"
        adopted = self.store.pending(ADOPTED).get(peer, {}).get("from")
        here_until = self.store.pending(ATTACHED).get(peer, {}).get("at", float("inf"))
        moved_on = message.since >= here_until  # it was elsewhere after it was last here
        # A detached peer is adopted again and again as its access points leave (sp0 -> sp1 ->
        # here) and still names the one it was attached to: the asker found this node by
        # following the successors from there (``_holder``), and so does this check; the
        # super-peer it adopted the peer from alone is not enough.
        inherited = self._holder(message.previous, "")[0] == self.node_id
        if message.previous not in (self.node_id, adopted) and not inherited and not moved_on:
            return f"the peer says it moved from {message.previous}, not from here"
        if self.fingerprint is None:
            return None
        record = self.store.get(peer)
        key = record.public_key if record is not None else self.store.local_state(peer).public_key
        if not key:
            return "no key to check the peer's signature against"
        signed = crypto.verify_move(
            key,
            message.signature,
            public_id=peer,
            previous=message.previous,
            current=sender,
            since=message.since,
        )
        return None if signed else "the move statement is not signed by the peer's key"

    def _handover_done(
        self, sender: str, message: m.HandoverDone, now: float, out: list[Output]
    ) -> None:
        entry = self.store.pending(HANDOVERS).get(message.request)
        if message.accepted:
            received = len(self._handed_in.get(message.request, ()))
            if received < message.count:
                # some of its mail was lost on the way (a broken link, a rejoin): the previous
                # access point still keeps it all, and sends it again when asked again
                log.warning(
                    "event=handover_incomplete node=%s peer=%s from=%s received=%d of=%d",
                    self.node_id,
                    message.peer,
                    sender,
                    received,
                    message.count,
                )
                if entry is not None:
                    self._handover_tries[message.request] = 0
                    self._ask_handover(message.request, entry, now, out)
                return
            self._handed_in.pop(message.request, None)
            received_all = m.HandoverReceived(request=message.request, peer=message.peer)
            self._send(sender, received_all, now, out)
            if message.rendezvous:
                address = self.addresses.get(sender) or (entry or {}).get("address", "")
                produced: list = []
                self.rendezvous.offered(sender, address, message.rendezvous, now, produced)
                self._core(produced, now, out)
        if entry is None:
            return
        self._forget_handover(message.request)
        if message.expired:
            self.store.add_expired(message.peer, message.expired)
        if not message.accepted and not entry["caught_up"]:
            self._catchups.append(self._moved_catchup(entry, now))
        log.info(
            "event=handover_done node=%s peer=%s accepted=%s reason=%r",
            self.node_id,
            message.peer,
            message.accepted,
            message.reason,
        )

    def _handover_received(self, sender: str, message: m.HandoverReceived) -> None:
        entry = self.store.pending(HANDED).get(message.request)
        if entry is None or entry["to"] != sender or entry["peer"] != message.peer:
            return
        self.store.set_pending(HANDED, message.request, None)
        if not self.mail.attached(message.peer):
            # attached: it came back, and acknowledges what it is sent (dropping rows in its
            # window would leave the window counting them)
            self.mail.drop(message.peer, entry["through"])

    def _forget_moved(self, now: float, out: list[Output]) -> None:
        """The peers that moved away: after ``settle_seconds`` their subscriptions go; their
        forwarding address stays for ``retention_seconds`` (mail still on its way here)."""
        for peer, forward in sorted(self._moved_away.items()):
            if forward.forget_at is not None and forward.forget_at <= now:
                handed = any(e["peer"] == peer for e in self.store.pending(HANDED).values())
                self._forget_local(peer, keep_mail=handed)
                if self.core is not None and peer in self.core.peers:
                    self._core(self.core.leave(peer, now, moved=True), now, out)
                forward.forget_at = None
                self.store.set_pending(MOVED, peer, forward.saved())
            if forward.expires_at <= now:
                del self._moved_away[peer]
                self.store.set_pending(MOVED, peer, None)

    def _forget_local(self, peer: str, *, keep_mail: bool = False) -> None:
        """Everything kept here for ``peer`` (it left, or moved away) but its registration (and
        its mail, with ``keep_mail``: handed over, not yet received there)."""
        for kind in (MOVED, ATTACHED, MOVES, ADOPTED):
            self.store.set_pending(kind, peer, None)
        self.store.forget_local(peer, keep_mail=keep_mail)
        self.expiries.forget(peer)

    # == adoption (a leaving super-peer's peers) ===================================================
    def _adopt_out(self, peer: str, successor: str, now: float, out: list[Output]) -> None:
        state = self.store.local_state(peer)
        advertise = _decoded(state.advertisement, m.Advertise) if state.advertisement else None
        kept = sorted(
            (s for data in state.subscriptions.values() if (s := _decoded(data, m.Subscribe))),
            key=lambda s: s.id,
        )
        record = self.store.get(peer)
        key = record.public_key if record is not None else state.public_key
        schema = _decoded(state.schema, m.PublishSchema)
        adopt = m.Adopt(
            peer=peer,
            public_key=key or b"",
            advertisement=advertise.advertisement if advertise is not None else None,
            subscriptions=tuple((s.id, s.subscription) for s in kept),
            axioms=schema.axioms if schema is not None else (),
            kept=tuple(kept),
        )
        self._send(successor, adopt, now, out)
        self._send_mail(
            successor,
            peer,
            self.mail.take(peer, now),
            now,
            out,
            request=f"adopt:{peer}",
            purpose="adopt",
        )
        expired = self.store.take_expired(peer)
        if expired:
            self.store.add_expired(peer, expired)

    def _adopt_log_out(self, successor: str, now: float, out: list[Output]) -> None:
        logged = [
            n
            for data in self.store.logged_since(now - self.config.log_seconds)
            if (n := _decoded(data, m.Notification)) is not None
        ]
        batch = self.config.mail_batch
        for start in range(0, len(logged), batch):
            chunk = tuple(logged[start : start + batch])
            self._send(successor, m.AdoptLog(notifications=chunk), now, out)

    def _adopt_log_in(self, message: m.AdoptLog) -> None:
        for notification in message.notifications:
            self.store.log_publication(
                mail_key(notification.owner, notification.publication.id, notification.version),
                wire.encode(notification),
                notification.published_at,
            )

    def _adopt_in(self, sender: str, message: m.Adopt, now: float, out: list[Output]) -> None:
        core = self.core
        if core is None:
            return
        peer = message.peer
        self.store.set_pending(ADOPTED, peer, {"from": sender})
        if message.public_key:
            self.store.set_public_key(peer, message.public_key)
        known = peer in core.peers
        if not known:
            core.attach(peer, now)
            core.detach(peer, now)
        if message.advertisement is not None:
            self.store.set_advertisement(
                peer, wire.encode(m.Advertise(advertisement=message.advertisement))
            )
            self._core_call(lambda o: core.advertise(peer, message.advertisement, now, o), now, out)
        if message.axioms:
            self._core_call(
                lambda o: core.publish_schema(peer, frozenset(message.axioms), now, o), now, out
            )
            self._store_schema(peer)
        kept = message.kept or tuple(
            m.Subscribe(id=sid, subscription=q) for sid, q in message.subscriptions
        )
        for subscribe in kept:
            self.store.set_subscription(peer, subscribe.id, wire.encode(subscribe))
            self._core_call(
                lambda o, s=subscribe: core.subscribe(
                    peer, s.id, s.subscription, now, o, on_change=s.on_change
                ),
                now,
                out,
            )
            self.expiries.set(peer, subscribe.id, subscribe.expires)
        # what reached the leaver for this peer after it handed it over went nowhere
        self._catchups.append(
            _CatchUp(
                now + self.config.routing.settle_seconds,
                now - self.config.catchup_margin_seconds,
                frozenset({peer}),
                None,
            )
        )
        log.info(
            "event=adopted node=%s peer=%s subscriptions=%d",
            self.node_id,
            peer,
            len(message.subscriptions),
        )

    # == peers =====================================================================================
    def accept(self, remote: str, now: float) -> int | None:
        """A connection was accepted from ``remote`` (host:port); its id, or None when the address
        has too many connections that have not identified yet (the runtime closes it)."""
        host = remote.rpartition(":")[0] or remote
        if self._unidentified[host] >= self.config.max_unidentified_per_address:
            self.statistics.refused_connections += 1
            log.warning(
                "event=connection_refused remote=%s reason=%r",
                remote,
                "max_unidentified_per_address",
            )
            return None
        connection = self._next_connection
        self._next_connection += 1
        verifier = None
        if self.fingerprint is not None:
            fingerprint = self.fingerprint

            def verifier() -> crypto.Verifier:
                return crypto.Verifier(
                    node_id=self.node_id,
                    fingerprint=fingerprint,
                    registry=self.store,
                    address=remote,
                    random=self._random,
                    lifetime=self.config.admission_seconds,
                )

        session = AccessPointSession(
            connection,
            remote,
            node_id=self.node_id,
            address=self.address,
            opened_at=now,
            admission_seconds=self.config.admission_seconds,
            verifier=verifier,
            admit=self._admit,
        )
        self._connections[connection] = _Connection(session, host)
        self._unidentified[host] += 1
        return connection

    def is_superpeer_connection(self, connection: int) -> None:
        """The connection turned out to be another super-peer's (the runtime handles it)."""
        self._forget_connection(connection)

    def _admit(self, hello: m.Hello) -> str | None:
        if self.core is None or self.stopping or self.topology.state is not NodeState.MEMBER:
            return "this super-peer is not serving peers (joining or shutting down)"
        return None

    def peer_message(
        self, connection: int, message: object, size: int, message_id: str, now: float
    ) -> list[Output]:
        out: list[Output] = []
        entry = self._connections.get(connection)
        if entry is None:
            return out
        if not entry.session.established or isinstance(message, _OUTSIDE_CORE + _RESOURCE_REQUESTS):
            # the core traces what it handles; the handshake and acknowledgements are traced here
            who = message.node_id if isinstance(message, m.Hello) else entry.session.peer
            self._trace(out, now, "receive", message, peer=who, size=size, msg=message_id)
        for event in entry.session.receive(message, size, message_id, now):
            self._session_event(connection, entry, event, now, out)
        return out

    def peer_violation(self, connection: int, reason: str, now: float) -> list[Output]:
        out: list[Output] = []
        entry = self._connections.get(connection)
        if entry is None:
            return out
        for event in entry.session.violation(reason):
            self._session_event(connection, entry, event, now, out)
        return out

    def connection_closed(self, connection: int, now: float) -> list[Output]:
        out: list[Output] = []
        entry = self._connections.get(connection)
        if entry is None:
            return out
        entry.session.close()
        self._forget_connection(connection)
        peer = entry.session.peer
        if peer is not None and self._peer_connection.get(peer) == connection:
            del self._peer_connection[peer]
            self.store.set_pending(ATTACHED, peer, {"at": now})
            self.mail.detach(peer)
            self.rendezvous.detached(peer)
            if self.core is not None and peer in self.core.peers:
                self._core(self.core.detach(peer, now), now, out)
            log.info("event=peer_detached peer=%s", peer)
        return out

    def _forget_connection(self, connection: int) -> None:
        entry = self._connections.pop(connection, None)
        if entry is not None and entry.counted:
            entry.counted = False
            self._unidentified[entry.host] -= 1
            if self._unidentified[entry.host] <= 0:
                del self._unidentified[entry.host]

    def _close(self, connection: int, reason: str, now: float, out: list[Output]) -> None:
        out.append(CloseConnection(connection, reason))
        out += self.connection_closed(connection, now)

    def _session_event(
        self, connection: int, entry: _Connection, event: object, now: float, out: list[Output]
    ) -> None:
        if isinstance(event, Reply):
            data = wire.encode(event.message)
            out.append(ToConnection(connection, event.message, data))
            self._trace(out, now, "send", event.message, peer=entry.session.peer, size=len(data))
        elif isinstance(event, Established):
            self._established(connection, entry, event, now, out)
        elif isinstance(event, Request):
            self._request(connection, entry, event, now, out)
        elif isinstance(event, Ended):
            if event.auth_failure is not None:
                self.statistics.auth_failures += 1
                self._trace_event(
                    out,
                    now,
                    "auth_failure",
                    kind=event.auth_failure,
                    peer=event.who,
                    msg=f"{entry.session.remote}: {event.reason}",
                )
                log.warning(
                    "event=auth_failure who=%s remote=%s code=%s reason=%r",
                    event.who,
                    entry.session.remote,
                    event.auth_failure,
                    event.reason,
                )
            elif event.reply is not None and isinstance(event.reply, m.LinkError):
                self.statistics.violations += 1
                self._trace_event(
                    out,
                    now,
                    "drop",
                    kind="link.error",
                    peer=entry.session.peer,
                    msg=event.reason[:200],
                )
            if event.reply is not None:
                out.append(ToConnection(connection, event.reply, wire.encode(event.reply)))
            self._close(connection, event.reason, now, out)

    def _established(
        self, connection: int, entry: _Connection, event: Established, now: float, out: list[Output]
    ) -> None:
        peer = event.peer
        if entry.counted:
            entry.counted = False
            self._unidentified[entry.host] -= 1
            if self._unidentified[entry.host] <= 0:
                del self._unidentified[entry.host]
        previous = self._peer_connection.get(peer)
        if previous is not None:
            self._close(previous, "the peer connected again (the newest connection wins)", now, out)
        self._peer_connection[peer] = connection
        self.store.set_pending(ATTACHED, peer, {"at": now})
        self._moved_away.pop(peer, None)
        self.store.set_pending(MOVED, peer, None)
        core = self.core
        assert core is not None
        core.attach(peer, now, entry.session.remote)
        log.info(
            "event=peer_identified peer=%s registered=%s address=%s",
            peer,
            event.registered,
            entry.session.remote,
        )
        out += self.mail.attach(peer, connection, now)
        produced: list = []
        self.rendezvous.attached(peer, produced)
        self._core(produced, now, out)

    def _request(
        self, connection: int, entry: _Connection, event: Request, now: float, out: list[Output]
    ) -> None:
        peer = entry.session.peer
        core = self.core
        message = event.message
        assert peer is not None
        if core is None:
            return
        if isinstance(message, m.Delivered):
            out += self.mail.acknowledged(peer, message.through, now)
            return
        self.statistics.received[type(message).KIND] += 1  # type: ignore[attr-defined]
        if isinstance(message, _RESOURCE_REQUESTS):
            self._resource_request(peer, message, now, out)
            return
        if isinstance(message, m.Moved):
            self._moved(peer, message, now, out)
            ack = m.Ack(request="moved")
            out.append(ToConnection(connection, ack, wire.encode(ack)))
            return
        if isinstance(message, m.Leave):
            self._core(core.leave(peer, now), now, out)
            for key in versions.forget_records(self.store.pending(versions.RECORDS), peer):
                self.store.set_pending(versions.RECORDS, key, None)
            self._forget_local(peer)
            self.store.remove(peer)  # gone for good: its identity may register afresh
            self.mail.detach(peer)
            self._close(connection, "the peer left", now, out)
            return
        if isinstance(message, m.Locate) and self._locate(peer, message, now, out):
            self._trace(out, now, "receive", message, peer=peer, size=event.size)
            return
        withdrawn = (
            core.subscriptions_of(peer).get(message.id)
            if isinstance(message, m.Unsubscribe)
            else None
        )
        self._core(core.peer_message(peer, message, event.size, now, event.message_id), now, out)
        if isinstance(message, m.Advertise):
            self.store.set_advertisement(peer, wire.encode(message))
        elif isinstance(message, m.PublishSchema):
            self._store_schema(peer)
        elif isinstance(message, m.Subscribe):
            # keep what the core holds: a second Subscribe with the same id and another query
            # is refused, and the first one stays (stored otherwise, a restart or an adoption
            # would bring back the refused query instead)
            held = core.subscriptions_of(peer).get(message.id)
            if held is not None:
                expires = self.expiries.at(peer, message.id)
                if held.key == message.subscription.key:
                    expires = message.expires
                    self.expiries.set(peer, message.id, expires)
                kept = m.Subscribe(
                    id=message.id,
                    subscription=held,
                    expires=expires,
                    on_change=core.on_change(peer, message.id),
                )
                made = self._subscribed_at.setdefault((peer, message.id), now)
                self.store.set_subscription(peer, message.id, wire.encode(kept), made)
        elif isinstance(message, m.Unsubscribe):
            self._unsubscribed(peer, message.id, withdrawn, now)

    def _store_schema(self, peer: str) -> None:
        """Keep the union of ``peer``'s schemas as the core holds it (a refused one is not in
        it)."""
        assert self.core is not None
        axioms = self.core.schemas.of_peer(peer)
        data = wire.encode(m.PublishSchema(axioms=tuple(sorted(axioms, key=repr))))
        self.store.set_schema(peer, data if axioms else None)

    def _unsubscribed(
        self, peer: str, sid: str, withdrawn: qel.Subscription | None, now: float
    ) -> None:
        """What the node keeps of a subscription retracted (by its peer, or expired)."""
        self.expiries.set(peer, sid, None)
        self.store.set_subscription(peer, sid, None)
        made = self._subscribed_at.pop((peer, sid), -math.inf)
        self._unsubscribed_at[(peer, sid)] = now
        if withdrawn is not None:
            self._withdrawn.setdefault(peer, {})[sid] = (withdrawn, made, now)

    def _expire(self, now: float, out: list[Output]) -> None:
        """Subscriptions whose expiry passed are retracted; so is expired resources' content."""
        core = self.core
        if core is None:
            return
        for peer, sid in self.expiries.due(now):
            withdrawn = core.subscriptions_of(peer).get(sid)
            if withdrawn is None:
                continue
            produced: list = []
            core.unsubscribe(peer, sid, now, produced)
            self._core(produced, now, out)
            self._unsubscribed(peer, sid, withdrawn, now)
        for owner, tombstone in core.versions.expire(now):
            self.store.set_pending(versions.RECORDS, *versions.tombstone_record(owner, tombstone))

    def _resource_request(self, peer: str, message: object, now: float, out: list[Output]) -> None:
        produced: list = []
        if isinstance(message, m.Fetch):
            self.rendezvous.fetch(peer, message, now, produced)
        elif isinstance(message, m.Upload):
            self.rendezvous.upload(peer, message, now, produced)
        elif isinstance(message, m.Collect):
            self.rendezvous.collect(peer, message, produced)
        elif isinstance(message, m.Collected):
            self.rendezvous.collected(peer, message)
        self._core(produced, now, out)

    def _whereabouts(self, peer: str) -> Whereabouts:
        """Where this node knows ``peer`` to be (direct look-ups and rendezvous requests that
        reach it ask): moved on (its forwarding address: the subscriptions it left here may not
        have gone yet), attached here (online or not), or unknown."""
        forward = self._moved_away.get(peer)
        if forward is not None:
            return Whereabouts(forward=forward.node, forward_address=forward.address)
        state = None if self.core is None else self.core.peers.get(peer)
        if state is None:
            return Whereabouts()
        return Whereabouts(attached=True, online=state.attached, address=state.address)

    def _look_up(self, public_id: str, request: str, now: float, out: list) -> None:
        """The rendezvous' network-wide look-up of an owner (answered by ``Found``)."""
        if self.core is not None:
            out += self.core.look_up(public_id, request, now)

    def _locate_everywhere(self, peer: str, message: m.Locate, now: float, out: list) -> None:
        """A direct look-up fell back to the network-wide one."""
        if self.core is not None:
            out += self.core.locate(peer, message, now)

    def _locate(self, peer: str, message: m.Locate, now: float, out: list[Output]) -> bool:
        """A look-up that names a super-peer goes there first (``superpeer.locating``); False:
        the core asks the network (or answers from here)."""
        core = self.core
        if core is None or not message.superpeer:
            return False
        limit = self.config.routing.max_lookups_per_peer
        waiting = core.lookups_waiting(peer) + self.locator.waiting(peer)
        produced: list = []
        if waiting >= limit:
            refused = m.Refused(
                request=f"locate {message.id}",
                reason=f"{waiting} look-ups are already waiting (max_lookups_per_peer = {limit})",
            )
            produced.append(ToPeer(peer, refused, wire.encode(refused)))
        elif not self.locator.start(peer, message, now, produced):
            return False
        self._core(produced, now, out)
        return True

    def _cube(self) -> tuple[TopologyView, dict[str, int]] | None:
        """The view and the origins' root positions the rendezvous routes with."""
        if self.core is None:
            return None
        positions = dict(self.core.origin_positions)
        positions[self.node_id] = self.core.view.root_position
        return self.core.view, positions

    # == time ======================================================================================
    def next_deadline(self) -> float | None:
        deadlines = [t for t in (self._join_at, self._timer_due) if t is not None]
        if self._join_contact is not None:
            deadlines.append(self._join_contact[1] + self.config.failure_seconds)
        if self.core is not None and (deadline := self.core.next_deadline()) is not None:
            deadlines.append(deadline)
        if self.core is not None:
            expiries = (self.expiries.next_deadline(), self.core.versions.next_expiry())
            deadlines += [t for t in expiries if t is not None]
        for entry in self._connections.values():
            if (deadline := entry.session.get_timer()) is not None:
                deadlines.append(deadline)
        deadlines += [c.due for c in self._catchups]
        deadlines += [due for due, _ in self._replay]
        deadlines += list(self._handover_due.values())
        if self.core is not None and (deadline := self.rendezvous.next_deadline()) is not None:
            deadlines.append(deadline)
        if (deadline := self.locator.next_deadline()) is not None:
            deadlines.append(deadline)
        for forward in self._moved_away.values():
            deadlines.append(min(forward.forget_at or math.inf, forward.expires_at))
        if self.config.heartbeat_seconds is not None and self.core is not None:
            deadlines.append(self._supervision_due())
        deadlines.append(self._housekeeping_at)
        return min(deadlines, default=None)

    def busy(self) -> bool:
        """Work that is waited for (not the periodic kind): the simulator runs until none is."""
        return bool(self.waiting_for())

    def waiting_for(self) -> list[str]:
        """What the node waits for, for humans (``superpeer status``) and the simulator."""
        reasons = []
        if self._join_at is not None:
            reasons.append("a join to retry")
        if self.core is not None and self.core.settling():
            reasons.append("routes to settle")
        if self._catchups:
            reasons.append("catch-ups to ask")
        if self._replay:
            reasons.append("publications to replay")
        if self._awaiting:
            reasons.append("handovers (first answer)")
        if self.locator.next_deadline() is not None:
            reasons.append("look-ups sent to the super-peer their asker named")
        if any(forward.forget_at is not None for forward in self._moved_away.values()):
            reasons.append("peers that moved away (their subscriptions to forget)")
        if self._suspected:
            reasons.append(f"failed neighbours to repair: {sorted(self._suspected)}")
        state = self.topology.state
        if state in (NodeState.JOINING, NodeState.LEAVING):
            reasons.append(f"the topology protocol ({state.value})")
        elif state is NodeState.MEMBER and self.topology.busy():
            reasons.append("a topology operation")
        return reasons

    def _supervision_due(self) -> float:
        interval = self.config.heartbeat_seconds
        assert interval is not None and self.core is not None
        neighbours = self.core.view.neighbours()
        due = [self._last_sent.get(n, -1e18) + interval for n in neighbours]
        due += [
            t + self.config.failure_seconds
            for n, t in self._last_heard.items()
            if n in neighbours and n not in self._suspected
        ]
        if self._suspected:
            due.append(self._retry_at)
        if self._busy_since is not None:
            due.append(self._busy_since + self.config.wedged_seconds + interval)
        if self._lagging_since is not None:
            due.append(self._lagging_since + self.config.failure_seconds)
        return min(due, default=self._housekeeping_at)

    def timer(self, now: float) -> list[Output]:
        out: list[Output] = []
        if self._join_at is not None and now >= self._join_at:
            if self.stopping:
                self._join_at = None
                self._leave_cube(now, out)
            elif self.topology.state is NodeState.IDLE:
                self._join(now, out)
            else:
                self._join_at = None
        if self._join_contact is not None and self.topology.state is NodeState.JOINING:
            contact, heard = self._join_contact
            if now - heard >= self.config.failure_seconds:
                self._abandon_join(contact, now, out)
        if self.core is not None:
            self._core(self.core.timer(now), now, out)
        for connection, entry in list(self._connections.items()):
            for event in entry.session.handle_timer(now):
                self._session_event(connection, entry, event, now, out)
        if self.config.heartbeat_seconds is not None and self.core is not None:
            self._supervise(now, out)
        self._ask_catchups(now, out)
        self._replay_due(now, out)
        self._handover_timer(now, out)
        self._forget_moved(now, out)
        self._expire(now, out)
        if self.core is not None:
            produced: list = []
            self.rendezvous.timer(now, produced)
            self.locator.timer(now, produced)
            self._core(produced, now, out)
        if now >= self._housekeeping_at:
            self._housekeeping(now, out)
        return out

    def _supervise(self, now: float, out: list[Output]) -> None:
        interval = self.config.heartbeat_seconds
        assert interval is not None and self.core is not None
        expected = self._timer_due
        if expected is not None and now - expected > self.config.failure_seconds / 2:
            # this process was stalled (paused): give everyone a fresh chance before judging
            stalled = now - expected
            log.warning("event=stalled node=%s seconds=%.1f", self.node_id, stalled)
            if stalled >= self.config.failure_seconds - interval:
                # silent that long, its neighbours have most likely declared it failed and
                # repaired its place; holding on to it (when no eviction reaches it) would keep
                # a second member at those positions
                self._rejoin(f"stalled for {stalled:.1f} s", now, out)
                return
            for neighbour in self._last_heard:
                self._last_heard[neighbour] = now
        if self._wedged(now):
            self._rejoin("the topology protocol is wedged", now, out)
            return
        self._catch_up_epochs(now, out)
        if now >= self._tick_at:
            self._tick_at = now + self.config.failure_seconds
            self._topology(self.topology.tick(), now, out)
        retry = now >= self._retry_at
        neighbours = self.core.view.neighbours()
        # gone from the view: repaired, or the cube moved on
        self._suspected = {n: t for n, t in self._suspected.items() if n in neighbours}
        if retry and self._suspected:
            self._retry_at = now + interval
        for neighbour in sorted(neighbours):
            if now - self._last_sent.get(neighbour, -1e18) >= interval:
                self._send(neighbour, m.Heartbeat(), now, out)
            heard = self._last_heard.setdefault(neighbour, now)
            silent = now - heard >= self.config.failure_seconds
            suspected = neighbour in self._suspected
            if not ((silent and not suspected) or (suspected and retry)):
                continue
            if self._is_neighbour(neighbour):
                self._fail(neighbour, now, out)
                if self.core is None:
                    return  # it rejoined: the new incarnation supervises its own neighbours
            else:  # the cube is changing around it: look again soon
                self._suspected.setdefault(neighbour, now)
                self._retry_at = now + interval
        self._timer_due = self._supervision_due()

    def _catch_up_epochs(self, now: float, out: list[Output]) -> None:
        """Messages of a later epoch held back for ``failure_seconds``: the ``Grow`` or
        ``Shrink`` that began it came down a tree through a member that failed. Ask their
        senders for it (again every ``failure_seconds``)."""
        if not self.topology.lagging():
            self._lagging_since = None
            return
        if self._lagging_since is None:
            self._lagging_since = now
        elif now - self._lagging_since >= self.config.failure_seconds:
            log.warning("event=missed_change node=%s epoch=%d", self.node_id, self.topology.epoch)
            self._lagging_since = now
            self._topology(self.topology.ask_for_missed_changes(self.addresses), now, out)

    def _wedged(self, now: float) -> bool:
        """Whether the topology protocol has been busy, or a failed neighbour unrepaired, for
        longer than any operation takes: what HyperCuP cannot untangle (two neighbouring
        members failing at once, a grow or shrink overtaking a repair) leaves it so. A
        crash-recovery is the way out: this node rejoins (as after a stall), its neighbours
        repair its place, or, if every member is wedged, they start a new cube."""
        unrepaired = min(self._suspected.values(), default=None)
        if unrepaired is not None and now - unrepaired > self.config.wedged_seconds:
            return True
        if not self.topology.busy():
            self._busy_since = None
            return False
        if self._busy_since is None:
            self._busy_since = now
        return now - self._busy_since > self.config.wedged_seconds

    def _replay_due(self, now: float, out: list[Output]) -> None:
        core = self.core
        if core is None or not self._replay:
            return
        due = [n for at, n in self._replay if at <= now]
        self._replay = [(at, n) for at, n in self._replay if at > now]
        for notification in due:
            produced: list = []
            core.dispatch_own(notification, now, produced)
            self._core(produced, now, out)

    def _housekeeping(self, now: float, out: list[Output]) -> None:
        self._housekeeping_at = now + self.config.housekeeping_seconds
        horizon = now - self.config.log_seconds  # older withdrawals are past any catch-up
        for peer, withdrawn in list(self._withdrawn.items()):
            for sid in [sid for sid, (_, _, ended) in withdrawn.items() if ended < horizon]:
                del withdrawn[sid]
            if not withdrawn:
                del self._withdrawn[peer]
        if self.core is not None:
            self.store.set_meta("alive_at", repr(now))
        out += self.mail.expire(
            now - self.config.retention_seconds, self.config.max_kept_per_peer, now
        )
        self.store.prune_log(now - self.config.log_seconds, self.config.max_logged)
        # a notification can come back as long as an origin's log holds it (catch-up)
        self.store.forget_delivered(now - self.config.log_seconds - 60.0)

    # == control ===================================================================================
    def forget_peer(self, public_id: str) -> str | None:
        """The operator's way out of ``already_registered``: drop the registration (the peer's
        subscriptions and mail stay). None when done, else why not."""
        if public_id in self._peer_connection:
            return f"peer {public_id} is connected now"
        if not self.store.remove(public_id):
            return f"no peer {public_id} is registered here"
        log.info("event=peer_forgotten peer=%s", public_id)
        return None

    def peer_report(self) -> list[dict[str, object]]:
        """Every peer this node holds something for: attached or not, mail, unacknowledged."""
        counts = self.store.mail_counts()
        waiting = self.mail.unacknowledged()
        names = set(self.store.local_peers()) | set(self.store.registered()) | set(counts)
        if self.core is not None:
            names |= set(self.core.peers)
        report = []
        for peer in sorted(names):
            subscriptions = self.core.subscriptions_of(peer) if self.core is not None else {}
            report.append(
                {
                    "peer": peer,
                    "state": "attached" if peer in self._peer_connection else "detached",
                    "registered": self.store.get(peer) is not None,
                    "subscriptions": len(subscriptions),
                    "mail": counts.get(peer, 0),
                    "unacknowledged": waiting.get(peer, 0),
                    "expired": self.mail.statistics.expired.get(peer, 0),
                    "moved_to": self._moved_away[peer].node if peer in self._moved_away else None,
                }
            )
        return report

    def subscription_report(self, peer: str | None = None) -> list[dict[str, object]]:
        core = self.core
        if core is None:
            return []
        rows = []
        for node in core.poset:
            for source, ids in sorted(node.sources.items()):
                if peer is not None and (source.kind != "peer" or source.name != peer):
                    continue
                for sid in sorted(ids):
                    rows.append(
                        {
                            "source": str(source),
                            "id": sid,
                            "query": str(node.subscription),
                            "sent_to": {d: sorted(o) for d, o in sorted(node.sent.items())},
                        }
                    )
        return rows

    def status(self, now: float) -> dict[str, object]:
        report: dict[str, object] = {
            "node": self.node_id,
            "address": self.address,
            "incarnation": self.incarnation,
            "state": self.topology.state.name.lower(),
            "topology_busy": self.topology.state is NodeState.MEMBER and self.topology.busy(),
            "settling": self.core is not None and self.core.settling(),
            "waiting": self.waiting_for(),
            "violations": self.statistics.violations,
            "auth_failures": self.statistics.auth_failures,
            "refused_connections": self.statistics.refused_connections,
            "failures_detected": self.statistics.failures_detected,
            "repairs": self.statistics.repairs,
            "rejoins": self.statistics.rejoins,
            "catchups": {
                "asked": self.statistics.catchups_asked,
                "served": self.statistics.catchups_served,
                "recovered": self.statistics.recovered,
                "replayed": self.statistics.replayed,
                "late": self.core.statistics.late if self.core is not None else 0,
            },
            "handovers": {
                "asked": self.statistics.handovers_in,
                "given": self.statistics.handovers_out,
                "pending": len(self._handover_due),
                "forwarded": self.statistics.forwarded,
            },
            "mail": {
                "kept": self.store.mail_counts(),
                "unacknowledged": self.mail.unacknowledged(),
                "delivered": self.mail.statistics.delivered,
                "stored_offline": self.mail.statistics.kept,
                "flushed": self.mail.statistics.flushed,
                "resent": self.mail.statistics.resent,
                "acknowledged": self.mail.statistics.acknowledged,
                "repeats": self.mail.statistics.repeats,
                "expired": dict(self.mail.statistics.expired),
                "retention_seconds": self.config.retention_seconds,
                "max_kept_per_peer": self.config.max_kept_per_peer,
            },
            "peers": {
                "attached": sorted(self._peer_connection),
                "detached": sorted(
                    (set(self.store.local_peers()) | set(self.core.peers if self.core else ()))
                    - set(self._peer_connection)
                ),
            },
        }
        if self.topology.state is NodeState.MEMBER:
            view = self.topology.view()
            report["positions"] = sorted(view.positions)
            report["dimension"] = view.dimension
            report["table"] = {str(p): n for p, n in sorted(view.table.items())}
            report["neighbours"] = {
                n: {
                    "address": self.addresses.get(n),
                    "silent_seconds": round(now - self._last_heard.get(n, now), 3),
                    "suspected": n in self._suspected,
                }
                for n in sorted(view.neighbours())
            }
        core = self.core
        if core is not None:
            stats = core.statistics
            poset = core.poset.statistics()
            report["subscriptions"] = {
                "distinct": poset.nodes,
                "held": poset.sources,
                "roots": poset.roots,
            }
            report["advertisements"] = {
                "origins": len(core.ads.origins()),
                "elements": core.ads.element_count(),
                "local_elements": len(core.ads.elements(self.node_id)),
                "schema_axioms": len(core.schemas.schema.axioms),
                "local_schema_axioms": len(core.schemas.local()),
            }
            sent = stats.sent + self.statistics.sent
            report["messages"] = {
                "sent": dict(sent),
                "received": dict(
                    self.statistics.received
                    + Counter({k: v for k, v in stats.received.items() if not k.startswith("sp.")})
                ),
                "bytes_sent": dict(stats.bytes_sent + self.statistics.bytes_sent),
                "delivered": self.mail.statistics.delivered,
                "refused": stats.refused,
                "dropped": stats.dropped,
                "repeats": stats.repeats,
            }
            report["rendezvous"] = self.rendezvous.status()
            report["locating"] = self.locator.status()
        return report

    # == plumbing ==================================================================================
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
        address = address or self.addresses.get(target, "")
        self._last_sent[target] = now
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.statistics.sent[kind] += 1
        self.statistics.bytes_sent[kind] += len(data)
        out.append(ToSuperPeer(target, message, data, message_id, address))
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
                )
            )


def _tree_path(root: int, position: int) -> set[int]:
    """The positions from ``position`` up to ``root`` in ``root``'s tree, both included."""
    path = {position}
    current: int | None = position
    while current is not None and current != root:
        current = tree_parent_position(root, current)
        if current is not None:
            path.add(current)
    return path


def _decoded(data: bytes | None, cls: type[T]) -> T | None:
    if data is None:
        return None
    try:
        message, _ = wire.decode(data)
    except wire.WireError:
        log.error("event=unreadable_state kind=%s", cls.__name__)  # noqa: TRY400 -- no traceback: the state is what is wrong
        return None
    return message if isinstance(message, cls) else None
