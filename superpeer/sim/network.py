"""The deterministic in-memory network: ``SuperPeerNode`` s and their peers in one process.

The nodes are the daemons' own protocol objects; the simulator only moves messages and time. The
cube is built by the topology protocol itself (each super-peer joins through a member chosen at
random, seeded), peers connect, identify (plaintext), send requests and acknowledge what they
receive, and super-peers join, leave, fail (their links go silent and their neighbours find out by
themselves) and restart on their stores (``MemoryStore`` objects that outlive a failure).

Every message really goes through the wire codec (encoded by the sender, decoded on arrival), so
byte counts are the msgpack sizes the daemons would send. Messages wait in a queue ordered by
delivery time; each link is FIFO (a message never overtakes an earlier one on the same link).
Links behave as the daemons' (``superpeer.channel``): a new connection says ``Hello`` and is
answered with the receiver's incarnation, which the sender's node is told
(``superpeer_welcomed``); it drops what was meant for an older incarnation than the one that
answers, if another one answered that link before; and every message a node receives is
acknowledged, a sign of life of whichever process received it (``superpeer_heard``).
Timers fire in time order with the messages. Simulated time starts at ``START``; the cube is built first; each workload
operation starts ``op_interval`` after the previous one (or later, if the previous one took
longer), and runs until the network is *quiet*: no message in flight and no node waiting for
anything (a join, the end of a routing change, a failure being repaired, a catch-up, a
handover). A ``wait`` lets its seconds pass (every timer due meanwhile fires: expiries, mail
retention, heartbeats) and the operations after it are paced from its end. A message takes ``latency`` seconds per hop, plus, with ``interleave``, a seeded random
jitter that reorders messages across links (never within one). The same seed and workload always
give the same run.

Every process has a clock of its own: a super-peer's or a peer's wall clock is the simulated time
plus its skew (``skews`` at the start, per super-peer index; then ``skew`` operations:
``{"op": "skew", "superpeer": k, "seconds": s}`` restarts super-peer k on its store under that
clock, as the chaos harness does with ``faketime``; ``"peer"`` changes a peer's clock at once). A
node's timers run on its clock, as a daemon's do; what is owed does not change (``clocks``). What a peer
is owed is checked against when each publication was made in simulated time: the simulator keeps,
per super-peer, which hybrid times its clock gave when (``_readings``).

Peers offer and fetch resources (the workload's ``file`` and ``fetch``) with the peer daemon's own
``peer.resources``, in a temporary directory per peer, made when a peer first needs one and
removed by ``close``; a fetch's bytes travel through the access points' ``superpeer.rendezvous``
like any other message.

With ``verify_wire`` (the default) every message is decoded from its bytes on arrival, as a daemon
does; without it the receiver gets the sender's (immutable) message object, which is equal to the
decoded one (the codec's round trip is tested on its own) and makes large runs about twice as fast.
"""

from __future__ import annotations

import bisect
import heapq
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Final

import qel
import wire
from clocks import earliest
from peer.kept import Kept
from peer.resources import Resources
from superpeer import versions
from superpeer.actions import (
    CloseConnection,
    Forgotten,
    Stopped,
    ToConnection,
    ToSuperPeer,
    in_runtime_order,
)
from superpeer.core import CoreConfig, SuperPeerCore
from superpeer.node import NodeConfig, SuperPeerNode
from superpeer.sim.fetching import fetch_request, offer, open_resources, sent, unfinished
from superpeer.sim.report import RunReport
from superpeer.sim.workload import (
    Connect,
    Disconnect,
    Forget,
    Offer,
    OperationError,
    Planner,
    Send,
    SuperPeerBounce,
    SuperPeerCut,
    SuperPeerFail,
    SuperPeerJoin,
    SuperPeerLeave,
    SuperPeerPause,
    SuperPeerRestart,
    Want,
)
from superpeer.store import MemoryStore, Store
from superpeer.trace import TraceRecord
from wire import messages as m
from wire.framing import Received
from wire.requests import answered_in_order

START: Final = 1_767_225_600.0
"""2026-01-01T00:00:00Z: simulated time starts here, so traces fall on real calendar dates."""
BOUNCE_SECONDS: Final = 0.5
"""How long a bounced super-peer is down: less than any failure timeout."""
ANSWERED: Final = (
    m.Advertise, m.PublishSchema, m.Subscribe, m.Unsubscribe, m.Publish, m.Withdraw, m.Fetch,
)  # fmt: skip
"""Peer requests answered in order (``Ack`` or ``Refused``), sent again if the connection
closed before their answer."""
PARTITIONED_STEP_SECONDS: Final = 1.0
"""Simulated time an operation runs for at most while a partition lasts."""
STUCK_SECONDS: Final = 3600.0
"""Simulated time one operation may take before the simulation is declared stuck."""


class SimulationStuck(RuntimeError):
    """The network never went quiet (a protocol that waits forever)."""


class Unaddressed(RuntimeError):
    """A node sent to a super-peer it had no link to without knowing its address: the daemon
    would drop the message (``superpeer._links``), so the simulator, which needs no address,
    stops instead of hiding the loss."""


def address_of(node: str) -> str:
    return f"{node}.sim:7400"


@dataclass
class SimPeer:
    name: str
    access_point: str
    connection: int | None = None
    last_contact: float = 0.0
    """When the peer last heard from its access point (what a ``Moved`` says)."""
    received: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    """Per change (owner, publication id, version), how many times it arrived."""
    notifications: list[m.Notify] = field(default_factory=list)
    """Every notification received, in order (repeats included)."""
    answers: list[object] = field(default_factory=list)
    """Every answer (``Ack``, ``Refused``, ``Located``) received, in order."""
    expired: int = 0
    history: list[tuple[str, object, float, float]] = field(default_factory=list)
    """The peer's subscriptions over time: (id, subscription, from, until)."""
    filtered: int = 0
    """Notifications for none of the peer's subscriptions at their publication time (an access
    point that returned with an old copy of the peer's state): the inbox does not keep them."""
    early: int = 0
    """Notifications published less than ``catchup_margin_seconds`` before a subscription they
    match was made: what the delivery contract allows (concurrent with its acknowledgement),
    and the inbox does not keep either."""
    resources: Resources | None = None
    """Its offered and fetched files (made when first needed)."""
    arrival_clock: float = 0.0
    """Its access point's latest hybrid time, from its ``Welcome`` and ``Clock`` s (a move
    statement's ``since``, as the peer daemon notes it when the connection ends)."""
    missing: float = 0.0
    """A move statement's ``missing_since``, as the peer daemon keeps it: from when its access
    point said, in the latest of them, that what it delivers may be incomplete; after a move,
    until a ``Clock`` that came after the move's ``Ack``, the previous statement's start if
    earlier."""
    heard_missing: float = 0.0
    """The latest ``missing_since`` its access point gave."""
    recorded: bool = True
    """Its access point is the one its state names (no move waits for an ``Ack``)."""
    carry: float = 0.0
    """The start of its last move statement (kept by the access point moved to's record)."""
    carried_clock: float = 0.0
    """The latest hybrid time an access point gave it (its ``Hello`` carries it)."""
    waiting: list[object] = field(default_factory=list)
    """Requests made while it had no connection (its access point rejoining during a
    partition): sent once it connects again, in order, as a client that waits would."""
    gaps: list[m.Notify] = field(default_factory=list)
    """Gap notices received (an origin's log no longer reached back far enough)."""
    unanswered: list[object] = field(default_factory=list)
    """Requests sent on its connection and not answered yet (in order): if the connection
    closes first, their outcome is unknown, and they are sent again on the next one (each is
    idempotent: the same content again changes nothing)."""
    kept: Kept = field(default_factory=lambda: Kept(None))
    """Its publications acknowledged with their access point's copy alone (``Ack.alone``):
    sent again on each connection, as the peer daemon does (``peer.kept``; the daemon's probe
    every ``resend_seconds`` only makes it forget them sooner, and is not simulated)."""
    active_since: dict[str, float] = field(default_factory=dict)
    """Per subscription id, what its access point's ``Ack`` said (``Ack.active_since``): sent
    again with it, as the peer daemon does."""
    withdrawals: dict[str, tuple[qel.Subscription, float, float]] = field(default_factory=dict)
    """Per subscription id withdrawn, (subscription, active since, withdrawn at) in its access
    point's hybrid times: told again after each move, as the peer daemon does."""

    withdrawing: dict[str, float] = field(default_factory=dict)
    """Per subscription id whose withdrawal was sent, its ``active_since`` until the answer."""

    def withdrew(self, sid: str, withdrawn_at: float) -> None:
        """Its access point acknowledged the withdrawal of ``sid`` at ``withdrawn_at``."""
        made = self.withdrawing.pop(sid, 0.0)
        queries = [q for i, q, _, _ in self.history if i == sid]
        if queries and made > 0:
            self.withdrawals[sid] = (queries[-1], made, withdrawn_at)

    def subscribed(
        self, sid: str, subscription: object, now: float, expires: float | None = None
    ) -> None:
        active = [h for h in self.history if h[0] == sid and h[3] > now]
        if not active:
            until = float("inf") if expires is None else expires
            self.history.append((sid, subscription, now, until))

    def unsubscribed(self, sid: str, now: float) -> None:
        self.history = [
            (i, q, start, now if i == sid and end > now else end)
            for i, q, start, end in self.history
        ]

    def owed(self, notify: m.Notify, at: float) -> bool:
        """Whether one of its subscriptions matched ``notify`` when it was published, at ``at``
        in simulated time."""
        return versions.owed(self.history, notify, at)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Pending:
    """A message in flight, queued in order of ``(at, sequence)``."""

    at: float
    sequence: int
    kind: str
    """``sp`` (super-peer to super-peer), ``hello`` (a new connection between super-peers),
    ``welcomed`` (the connection's answer: the receiver's incarnation, back to the sender),
    ``to_peer``, ``from_peer``, ``close`` (the access point closed a peer's connection)."""
    sender: str
    receiver: str
    connection: int = 0
    incarnation: int = 0
    data: bytes = b""
    message: object = None
    message_id: str = ""
    meant_for: int = 0
    """The receiver's incarnation the sender knew of (``ToSuperPeer.incarnation``)."""
    clock: float = 0.0
    """The sender's hybrid time (``ToSuperPeer.clock``), as a frame's header carries it."""
    welcomed: int = 0
    """The receiver's incarnation that welcomed the connection it went on (0: not known)."""

    def __lt__(self, other: _Pending) -> bool:
        # what ``order=True`` compares, without building two tuples per comparison (the heap
        # makes some twenty for each of millions of messages)
        if self.at != other.at:
            return self.at < other.at
        return self.sequence < other.sequence


class Simulation:
    """Apply workload operations (``superpeer.sim.workload``) and report what every peer got."""

    def __init__(
        self,
        superpeers: int,
        *,
        seed: int = 0,
        interleave: bool = False,
        latency: float = 0.002,
        op_interval: float = 0.01,
        trace_dir: str | Path | None = None,
        config: CoreConfig | None = None,
        node_config: NodeConfig | None = None,
        verify_wire: bool = True,
        keep_notifications: bool = True,
        skews: dict[int, float] | None = None,
        new_store: Callable[[str], Store] | None = None,
    ) -> None:
        if superpeers < 1:
            raise ValueError("a network needs at least one super-peer")
        base = node_config or NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0)
        routing = config or base.routing
        self.node_config = replace(base, routing=replace(routing, tracing=trace_dir is not None))
        self.now = START
        self.latency = latency
        self.op_interval = op_interval
        self.verify_wire = verify_wire
        self.keep_notifications = keep_notifications
        """Whether each peer keeps every notification it received (``SimPeer.notifications``:
        what ``fetch`` and ``changes`` read); without, a large run saves their memory (at 1,000
        super-peers and 8K publications, some 3 million of them)."""
        self._topology_random = random.Random(seed)
        self._random = random.Random(seed) if interleave else None
        self.ids: list[str] = []
        self.nodes: dict[str, SuperPeerNode] = {}
        self.stores: dict[str, Store] = {}
        self._new_store: Callable[[str], Store] = new_store or (lambda _: MemoryStore())
        """Makes a new super-peer's store from its node id: a ``MemoryStore`` unless a test
        needs what a real one does (``SqliteStore``: what each call writes and commits)."""
        self.peers: dict[str, SimPeer] = {}
        self.planner = Planner(0)
        self._queue: list[_Pending] = []
        self._sequence = 0
        self._link_clock: dict[tuple[str, str], float] = {}
        self._connections: dict[tuple[str, int], str] = {}
        self._deadlines: list[tuple[float, int, str]] = []
        self._deadline_of: dict[str, float | None] = {}
        self._busy: set[str] = set()
        """Nodes found busy when last asked (``_any_busy``)."""
        self._unchecked: set[str] = set()
        """Nodes called since they were last asked whether they are busy."""
        self.unreplicated_when_killed: dict[str, int] = {}
        """Per super-peer killed, the publications it had acknowledged with its own log's copy
        alone, copied since or not."""
        self.uncopied_when_killed: dict[str, int] = {}
        """Per super-peer killed (its process gone), the publications it had acknowledged with
        its own log's copy alone and not copied since (``superpeer._replication``, rule 6):
        kept for good, what it lost of them is not owed."""
        self._links: set[tuple[str, str]] = set()
        """(sender, receiver) pairs with a link open, as the daemon's ``Links`` keeps them: a
        message to a super-peer without one needs its address, or the daemon drops it."""
        self._connected: set[tuple[str, str]] = set()
        """Links connected to the receiver's current process (a new connection says Hello)."""
        self._welcomed: dict[tuple[str, str], int] = {}
        """Per link, the receiver's incarnation that welcomed its channel last
        (``superpeer.channel.Outbound.incarnation``): a new connection to a newer one drops
        what was meant for an older one, whenever it was sent."""
        self.dropped_by_links: Counter[str] = Counter()
        """Per message kind, what links dropped as meant for an older incarnation than the one
        that answered."""
        self._paused: dict[str, list[_Pending]] = {}
        """Stopped processes (``superpeer_pause``) and what was sent to them meanwhile."""
        self._cut: dict[str, list[_Pending]] = {}
        """Super-peers cut off (``superpeer_cut``) and what their links hold meanwhile."""
        self._groups: list[frozenset[str]] | None = None
        """The sides of a partition (``partition``): who reaches whom; None: everyone."""
        self._partitioned: list[_Pending] = []
        """What links between the sides held during the partition (delivered at ``heal``)."""
        self._partition_incarnations: dict[str, int] = {}
        self.messages: Counter[str] = Counter()
        self.message_bytes: Counter[str] = Counter()
        self.hops: Counter[int] = Counter()
        self._change_keys: dict[tuple[str, str, int], tuple[str, str, int]] = {}
        """Every change a peer received, as the one key object the peers' counts share."""
        self.errors: list[dict[str, object]] = []
        self.locations: dict[str, dict[str, str | None]] = {}
        """Publications a peer's user saw twice (its inbox keeps one copy: always 0; kept so that
        reports compare with the replay tool's, which counts what the access points sent)."""
        self.redeliveries = 0
        """Notifications a peer received again (at least once on the wire: a repeat after a
        reconnection, or from two access points after a move); its inbox ignored them."""
        self.operations = 0
        self.deferred = 0
        """Peers whose requests waited for a connection past the operation that made them (an
        access point refused peers that long: it was joining the cube again). What such a
        request changes starts when it is acknowledged, not when the workload made it."""
        self._waiting_since: dict[str, int] = {}
        """Per peer with requests waiting for a connection, the operation that made the first."""
        self._reconnecting: set[str] = set()
        """Peers whose access point closed their connection, to come back (``_reconnect``)."""
        self._leaving: dict[str, SimPeer] = {}
        """Peers that left while their access point was out of the cube, with requests made
        meanwhile (publications among them): they leave once they reach it, those sent first,
        as the peer daemon's outbox does (what it never sent is not owed, and the oracle
        counts every publication made)."""
        self._op_label = ""
        self.skews: dict[str, float] = {f"sp{k}": s for k, s in (skews or {}).items()}
        """Per super-peer, how far its wall clock is from simulated time (``skew``)."""
        self._started_skews: dict[str, float] = {}
        """Per super-peer process, the skew it started with: its clock (a running daemon's
        clock does not step: ``clocks``, rule 11)."""
        self.peer_skews: dict[str, float] = {}
        """Per peer, likewise."""
        self._readings: dict[str, tuple[list[float], list[float]]] = {}
        """Per super-peer, its hybrid time after each call (increasing) and the simulated time
        of the call: which simulated time a publication's ``published_at`` stands for."""
        self._files: Path | None = None
        """The peers' resource directories (``_resources``)."""
        self._file_owners = 0
        self._trace_files: dict[str, IO[str]] = {}
        self._trace_dir = Path(trace_dir) if trace_dir is not None else None
        if self._trace_dir is not None:
            self._trace_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(superpeers):
            self._superpeer_join()
        self.planner.superpeers = superpeers
        self._workload_start = self.now
        """Operations are paced from here: the cube is built first, in the time that takes."""

    # -- operations ---------------------------------------------------------------------------
    def apply(self, op: dict, number: int | None = None) -> None:
        """One workload operation, then run the network until it is quiet."""
        self.operations += 1
        self._advance(self._workload_start + (self.operations - 1) * self.op_interval)
        self._op_label = f"{number if number is not None else self.operations}:{op['op']}"
        if op["op"] == "wait":
            self._advance(self.now + op["seconds"])
            self._workload_start = self.now - (self.operations - 1) * self.op_interval
        self._reconnect()
        try:
            steps = self.planner.plan(op, str, self.now)
        except OperationError as error:
            self.errors.append({"op": self._op_label, "peer": op.get("peer"), "error": str(error)})
            return
        if op["op"] == "partition":
            self._partition(op["groups"])
        elif op["op"] == "heal":
            self._heal()
        if op["op"] == "skew":  # before its steps: a super-peer restarts under the new clock
            if "superpeer" in op:
                self.skews[self.ids[op["superpeer"]]] = op["seconds"]
            else:
                self.peer_skews[op["peer"]] = op["seconds"]
        for step in steps:
            self._step(step)
        self.run_until_quiet()

    def _clock(self, node_id: str) -> float:
        """Super-peer ``node_id``'s clock now."""
        return self.now + self._started_skews.get(node_id, 0.0)

    def _peer_clock(self, peer: str) -> float:
        return self.now + self.peer_skews.get(peer, 0.0)

    def published_when(self, notify: m.Notify) -> float:
        """The simulated time at which ``notify``'s origin gave it its ``published_at``: the
        time of the call after which its clock first reached that reading (for a time its clock
        gave, exact; for one a test made up, as far after the reading before it as it is)."""
        published = notify.published_at
        readings = self._readings.get(notify.origin)
        if not readings:
            return published
        clocks, times = readings
        index = bisect.bisect_left(clocks, published)
        if index == 0:
            return times[0] - (clocks[0] - published)
        after = times[index] if index < len(times) else self.now
        return min(after, times[index - 1] + (published - clocks[index - 1]))

    def _step(self, step: object) -> None:
        if isinstance(step, Connect):
            self._leaving.pop(step.peer, None)  # back under its name: a new start
            self._connect(step)
        elif isinstance(step, Disconnect):
            self._disconnect(self.peers[step.peer])
        elif isinstance(step, Send):
            peer = self.peers[step.peer]
            self._send_request(peer, sent(peer.resources, step.message, peer.notifications))
        elif isinstance(step, Offer):
            offer(self._resources(self.peers[step.peer]), step.publication, step.content)
        elif isinstance(step, Want):
            self._want(self.peers[step.peer], step.publication)
        elif isinstance(step, Forget):
            peer = self.peers.pop(step.peer)
            if peer.connection is None and peer.waiting:
                self._leaving[step.peer] = peer
                self._reconnecting.add(step.peer)
            else:
                self._disconnect(peer)
        elif isinstance(step, SuperPeerJoin):
            self._superpeer_join()
        elif isinstance(step, SuperPeerLeave):
            self._superpeer_leave(step.superpeer)
        elif isinstance(step, SuperPeerFail):
            self._superpeer_fail(step.superpeer)
        elif isinstance(step, SuperPeerRestart):
            self._superpeer_restart(step.superpeer)
        elif isinstance(step, SuperPeerBounce):
            self._superpeer_bounce(step.superpeer)
        elif isinstance(step, SuperPeerPause):
            self._superpeer_pause(step.superpeer, step.seconds)
        elif isinstance(step, SuperPeerCut):
            self._superpeer_cut(step.superpeer, step.seconds)

    # -- super-peers --------------------------------------------------------------------------
    def _superpeer_join(self) -> None:
        node_id = f"sp{len(self.ids)}"
        self.ids.append(node_id)
        self.stores[node_id] = self._new_store(node_id)
        self._start(node_id)
        self.run_until_quiet()

    def _start(self, node_id: str) -> None:
        self._started_skews[node_id] = self.skews.get(node_id, 0.0)
        node = SuperPeerNode(node_id, address_of(node_id), self.stores[node_id], self.node_config)
        live = sorted(n for n in self.nodes if n != node_id)
        self.nodes[node_id] = node
        contacts = []
        if live:
            contact = self._topology_random.choice(live)
            contacts = [(contact, address_of(contact))]
            contacts += [(n, address_of(n)) for n in live if n != contact]
        self._execute(node_id, node.start(self._clock(node_id), contacts))

    def _superpeer_leave(self, index: int) -> None:
        node_id = self.ids[index]
        node = self.nodes[node_id]
        self._execute(node_id, node.leave(self._clock(node_id)))
        # heard from nobody, it hails and waits for a successor, ``reform_seconds`` at most
        # (``SuperPeerNode.leave``): as the daemon's shutdown does, the operation waits until it
        # handed over, across the one-second steps of a partition
        bound = self.now + node.config.reform_seconds + PARTITIONED_STEP_SECONDS
        while node.adopter is None and not node.stopped and self.now < bound:
            self.run_until_quiet(until=lambda: node.adopter is not None)
        self.run_until_quiet()
        successor = node.adopter or None
        if successor in self.nodes:
            for step in self.planner.after_leave(index, self.ids.index(successor)):
                self._connect(step)
        elif successor is not None:
            # it named one that crashed for good, unrepaired yet in its view: as the peer
            # daemon does, its peers find the successor unreachable and go on down their
            # lists of super-peers (a move, as when their access point fails)
            for step in self.planner.after_failure(index):
                self._connect(step)

    def _superpeer_fail(self, index: int) -> None:
        """The process dies: its messages and timers stop, its peers' connections break."""
        node_id = self.ids[index]
        self._kill(node_id)
        for step in self.planner.after_failure(index):
            self._connect(step)
        # the failure is found by silence: time passes until the cube no longer holds it
        self.run_until_quiet(until=lambda: self._repaired(node_id))

    def _kill(self, node_id: str) -> None:
        node = self.nodes.pop(node_id)
        self.unreplicated_when_killed[node_id] = node.statistics.unreplicated
        self.uncopied_when_killed[node_id] = node.copies_owed()
        self._forget_links(node_id)
        self._unchecked.add(node_id)
        self._deadline_of.pop(node_id, None)
        self._queue = [p for p in self._queue if node_id not in (p.receiver, p.sender)]
        heapq.heapify(self._queue)
        for peer in self.peers.values():
            if peer.access_point == node_id and peer.connection is not None:
                peer.connection = None
                peer.last_contact = self.now

    def _requeue(self, pending: _Pending, at: float) -> None:
        """A message held back (a paused receiver, a cut link) goes on at ``at``, after what
        was queued before it."""
        self._sequence += 1
        pending.at, pending.sequence = at, self._sequence
        heapq.heappush(self._queue, pending)

    def _drop_queued(self, sender: str, receiver: str) -> None:
        """A link dropped at once loses what it still held (the daemon cancels it): here, what
        is still in flight on it (the pessimistic case: in a daemon, some of it may already
        have reached the other side)."""
        kept = [p for p in self._queue if not (p.sender == sender and p.receiver == receiver)]
        if len(kept) != len(self._queue):
            self._queue = kept
            heapq.heapify(self._queue)

    def _forget_links(self, node_id: str) -> None:
        """The process ended: a new one starts with no link open, and the links toward it
        connect again (with a Hello) when they next have something to send."""
        self._links = {link for link in self._links if link[0] != node_id}
        self._connected = {link for link in self._connected if node_id not in link}
        self._welcomed = {link: i for link, i in self._welcomed.items() if link[0] != node_id}

    def _superpeer_bounce(self, index: int) -> None:
        """Killed and started again on its store within ``BOUNCE_SECONDS``, before its silence is
        noticed; its peers reconnect to it."""
        node_id = self.ids[index]
        attached = [p for p in self.peers.values() if p.access_point == node_id and p.connection]
        self._kill(node_id)
        self._advance(self.now + BOUNCE_SECONDS)
        self._start(node_id)
        self.run_until_quiet(until=lambda: self.nodes[node_id].core is not None)
        for peer in attached:
            self._connect(Connect(peer.name, index))

    def _superpeer_pause(self, index: int, seconds: float) -> None:
        """The process stops (``SIGSTOP``) for ``seconds``: no timer fires and nothing is read,
        what is sent to it waits in its sockets, its connections stay open. Then it goes on:
        its overdue timer first (it finds it was stalled), then what waited, in order."""
        node_id = self.ids[index]
        if node_id not in self.nodes:
            return
        self._paused[node_id] = []
        self._advance(self.now + seconds)
        held = self._paused.pop(node_id)
        if node_id not in self.nodes:
            return
        self._deadline_of[node_id] = None
        self._execute(node_id, self.nodes[node_id].timer(self._clock(node_id)))
        for pending in held:
            self._requeue(pending, self.now)
        self.run_until_quiet()

    def _superpeer_cut(self, index: int, seconds: float) -> None:
        """Every connection of the super-peer breaks, and none can be made, for ``seconds``;
        both sides run on. Its peers' connections break (they come back afterwards). Then the
        links connect again: each says Hello again, and sends again what the other side had
        not acknowledged, but for what its channel drops: everything, if the sender is a new
        incarnation by then; if the receiver is, what was not meant for that one."""
        node_id = self.ids[index]
        if node_id not in self.nodes:
            return
        incarnations = {n: node.incarnation for n, node in self.nodes.items()}
        for peer in sorted(self.peers.values(), key=lambda p: p.name):
            if peer.access_point == node_id and peer.connection is not None:
                self._disconnect(peer)
                self._reconnect_later(peer)
        self._cut[node_id] = []
        self._advance(self.now + seconds)
        held = self._cut.pop(node_id)
        self._connected = {link for link in self._connected if node_id not in link}
        self._release(
            held + self._in_flight(lambda p: node_id in (p.sender, p.receiver)), incarnations
        )
        self.run_until_quiet()

    def _partition(self, groups: list[list[int]]) -> None:
        """From now on super-peers reach each other only within a group (``partition``)."""
        named = [frozenset(f"sp{k}" for k in group) for group in groups]
        listed = frozenset().union(*named)
        rest = frozenset(self.ids) - listed
        self._groups = [*named, rest] if rest else named
        self._partition_incarnations = {n: node.incarnation for n, node in self.nodes.items()}

    def _reaches(self, sender: str, receiver: str) -> bool:
        groups = self._groups
        return groups is None or any(sender in g and receiver in g for g in groups)

    def _heal(self) -> None:
        """The partition ends: links between the sides connect again (a Hello each), and what
        they held goes through, but for what their channels drop (``_release``)."""
        if self._groups is None:
            return
        groups, self._groups = self._groups, None
        self._connected = {link for link in self._connected if any(set(link) <= g for g in groups)}
        held, self._partitioned = self._partitioned, []
        crossed = self._in_flight(
            lambda p: not any(p.sender in g and p.receiver in g for g in groups)
        )
        self._release(held + crossed, self._partition_incarnations)

    def _in_flight(self, crossed: Callable[[_Pending], bool]) -> list[_Pending]:
        """Taken out of the queue, in their order: what is still on its way on the links a cut
        that ends now broke (``crossed``). It goes on the new connections, after their Hello
        (``_release``), as a channel sends again what the old connection did not deliver: let
        through as it was, a frame sent just before a heal reached a receiver that had never
        heard the link's Hello, which knew no address to answer it at (a rejoined super-peer
        evicted, the eviction dropped: ``Unaddressed``)."""
        taken = [p for p in self._queue if p.kind in ("sp", "hello", "welcomed") and crossed(p)]
        if taken:
            kept = set(map(id, taken))
            self._queue = [p for p in self._queue if id(p) not in kept]
            heapq.heapify(self._queue)
        return sorted(taken, key=lambda p: (p.at, p.sequence))

    def _release(self, held: list[_Pending], incarnations: dict[str, int]) -> None:
        """Messages a cut held, sent again on new connections as the channels do: dropped if
        the sender is a new incarnation by then; if the receiver is, unless meant for it."""
        for pending in held:
            sender, receiver = self.nodes.get(pending.sender), self.nodes.get(pending.receiver)
            if sender is None or receiver is None:
                continue
            if pending.kind == "sp" and (
                sender.incarnation != pending.incarnation
                or (
                    receiver.incarnation != incarnations.get(pending.receiver)
                    and pending.meant_for < receiver.incarnation
                )
            ):
                continue
            if pending.kind == "hello":
                continue  # the connection is new: it says Hello again, below
            link = (pending.sender, pending.receiver)
            if link not in self._connected:
                self._connected.add(link)
                self._enqueue("hello", *link, incarnation=sender.incarnation)
            self._requeue(pending, self._link_clock[link])

    def cubes(self) -> dict[tuple[int, str] | None, list[str]]:
        """The live super-peers by the cube they say they are in (dimension, holder of position
        0; None: not a member, or it has not heard yet). One key: one cube."""
        found: dict[tuple[int, str] | None, list[str]] = {}
        for node_id, node in sorted(self.nodes.items()):
            found.setdefault(node.cube_identity(), []).append(node_id)
        return found

    def _repaired(self, node_id: str) -> bool:
        return not any(
            node.core is not None and node_id in node.core.view.neighbours()
            for node in self.nodes.values()
        )

    def _superpeer_restart(self, index: int) -> None:
        self._start(self.ids[index])

    # -- peers --------------------------------------------------------------------------------
    def _connect(self, step: Connect) -> None:
        node_id = self.ids[step.superpeer]
        peer = self.peers.get(step.peer)
        if peer is None:
            peer = self.peers[step.peer] = SimPeer(step.peer, node_id)
        if peer.connection is not None:
            self._disconnect(peer)
        peer.access_point = node_id
        node = self.nodes[node_id]
        connection = node.accept(f"{peer.name}.peer.sim:1", self._clock(node_id))
        self._unchecked.add(node_id)
        assert connection is not None
        peer.connection = connection
        self._connections[(node_id, connection)] = peer.name
        hello = m.Hello(
            role="peer",
            node_id=peer.name,
            address="",
            protocol=wire.PROTOCOL_VERSION,
            wall=self._peer_clock(peer.name),
            clock=peer.carried_clock,
        )
        self._from_peer(peer, hello)
        # as the peer daemon does (``peer.session.plan_resend``): after a move its whole state
        # (its recent withdrawals with their windows among it), and on every connection its
        # publications held by one super-peer alone; then where it comes from
        kept = peer.kept.due(self.now)
        plan = (
            kept
            if step.resend is None
            else step.resend.plan(
                active_since=peer.active_since, withdrawn=peer.withdrawals, kept=kept
            )
        )
        for message in plan:
            self._from_peer(peer, message)
        if step.moved_from is not None:
            # as the peer daemon says it: when it arrived at the previous access point, in that
            # one's hybrid time (``clocks``, rule 6)
            moved = m.Moved(
                previous=self.ids[step.moved_from],
                previous_address=address_of(self.ids[step.moved_from]),
                since=peer.arrival_clock or peer.last_contact,
                signature=b"",
                missing_since=peer.missing,
            )
            peer.carry = earliest(moved.since, peer.missing)
            peer.recorded = False
            self._from_peer(peer, moved)
        if peer.resources is not None:
            for fetch in unfinished(peer.resources):
                self._from_peer(peer, fetch)
        if self._waiting_since.pop(peer.name, self.operations) != self.operations:
            self.deferred += 1
        waiting, peer.waiting = [*peer.unanswered, *peer.waiting], []
        peer.unanswered = []
        for message in waiting:
            self._from_peer(peer, message)

    def _disconnect(self, peer: SimPeer) -> None:
        if peer.connection is None:
            return
        node = self.nodes.get(peer.access_point)
        connection, peer.connection = peer.connection, None
        peer.last_contact = self.now
        self._connections.pop((peer.access_point, connection), None)
        if node is not None:
            self._enqueue("close_in", peer.name, peer.access_point, connection=connection)

    def _send_request(self, peer: SimPeer, message: object) -> None:
        """A request, and what it means for the peer's own record of its subscriptions (kept
        as the network accepts them: an id reused for another query is refused)."""
        planned = self.planner.peers.get(peer.name)
        if isinstance(message, m.Subscribe) and planned is not None:
            if planned.keys.get(message.id) == message.subscription.key:
                peer.subscribed(message.id, message.subscription, self.now, message.expires)
        elif isinstance(message, m.Unsubscribe):
            peer.unsubscribed(message.id, self.now)
            peer.withdrawing[message.id] = peer.active_since.pop(message.id, 0.0)
        self._from_peer(peer, message)

    def _resources(self, peer: SimPeer) -> Resources:
        if peer.resources is None:
            if self._files is None:
                self._files = Path(tempfile.mkdtemp(prefix="sim-resources-"))
            self._file_owners += 1  # a peer that left and joined again starts afresh
            directory = self._files / f"{self._file_owners}-{peer.name}"
            peer.resources = open_resources(directory, peer.name)
        return peer.resources

    def _want(self, peer: SimPeer, publication: str) -> None:
        """``fetch``: from the peer's notification of ``publication``, as ``peer fetch`` does."""
        notify = next((n for n in peer.notifications if n.publication.id == publication), None)
        try:
            fetch = fetch_request(self._resources(peer), notify, publication)
        except OperationError as error:
            self.errors.append({"op": self._op_label, "peer": peer.name, "error": str(error)})
            return
        if fetch is not None:
            self._from_peer(peer, fetch)

    def _from_peer(self, peer: SimPeer, message: object) -> None:
        if peer.connection is None:
            peer.waiting.append(message)
            if isinstance(message, ANSWERED):
                self._waiting_since.setdefault(peer.name, self.operations)
            return
        if isinstance(message, ANSWERED):
            peer.unanswered.append(message)
        if isinstance(message, m.Subscribe | m.Publish) and message.expires is not None:
            # an expiry is in simulated time here: on the wire, on the peer's clock, with the
            # time it was sent (as ``peer.client`` sends it)
            skew = self.peer_skews.get(peer.name, 0.0)
            message = replace(message, expires=message.expires + skew, sent_at=self.now + skew)
        data = wire.encode(message, f"{peer.name}#{self._sequence}")
        self._count(message, data)
        self._enqueue(
            "from_peer",
            peer.name,
            peer.access_point,
            connection=peer.connection,
            data=data,
            message=message,
        )

    def _peer_receives(self, pending: _Pending, message: object) -> None:
        peer = self.peers.get(pending.receiver)
        if peer is None or peer.connection != pending.connection:
            return  # a connection closed since: what was on it is lost with it
        peer.last_contact = self.now
        if isinstance(message, m.Welcome | m.Clock) and message.clock:
            peer.carried_clock = max(peer.carried_clock, message.clock)
            peer.heard_missing = message.missing_since
            if peer.recorded:
                peer.missing = message.missing_since
            if isinstance(message, m.Welcome):
                peer.arrival_clock = message.clock
            else:
                peer.arrival_clock = max(peer.arrival_clock, message.clock)
        if isinstance(message, m.Clock):  # answered, as the peer daemon does
            clock = m.Clock(wall=self._peer_clock(peer.name), echo=message.wall)
            self._from_peer(peer, clock)
        if isinstance(message, m.Notify):
            # the peer's inbox keeps one copy per publication and acknowledges every copy
            key = versions.change_key(message)
            # one key object per change, shared by every peer's count (millions of entries)
            publication = self._change_keys.setdefault(key, key)
            if message.kind == m.GAP:
                peer.gaps.append(message)
            elif not peer.owed(message, at := self.published_when(message)):
                margin = self.node_config.catchup_margin_seconds
                if peer.owed(message, at + margin):
                    peer.early += 1
                else:
                    peer.filtered += 1
            elif peer.received[publication]:
                self.redeliveries += 1
            else:
                self.hops[message.hops] += 1
                peer.received[publication] += 1
                if self.keep_notifications:
                    peer.notifications.append(message)
            self._from_peer(peer, m.Delivered(through=message.delivery))
        if isinstance(message, m.Ack) and message.request == "moved" and not peer.recorded:
            # the peer daemon's record of its new access point (``PeerClient._arrived``)
            peer.missing = earliest(peer.carry, peer.heard_missing)
            peer.recorded = True
        if isinstance(message, m.Ack | m.Refused | m.Located):
            peer.answers.append(message)
            if answered_in_order(message) and peer.unanswered:
                answered = peer.unanswered.pop(0)
                if isinstance(answered, m.Publish | m.Withdraw) and not isinstance(
                    message, m.Located
                ):
                    peer.kept.answered(answered, message, self.now)
                acked = isinstance(answered, m.Subscribe) and isinstance(message, m.Ack)
                if acked and message.active_since > 0:
                    peer.active_since[answered.id] = message.active_since
                withdrew = isinstance(answered, m.Unsubscribe) and isinstance(message, m.Ack)
                if withdrew and answered.subscription is None and message.withdrawn_at > 0:
                    peer.withdrew(answered.id, message.withdrawn_at)
        if isinstance(message, m.Refused):
            self.errors.append({"op": self._op_label, "peer": peer.name, "error": message.reason})
        if isinstance(message, m.Located):
            where = message.superpeer if message.online else None
            self.locations.setdefault(peer.name, {})[message.id] = where
        if isinstance(message, m.Expired):
            peer.expired += message.count
        if isinstance(message, m.UploadWanted | m.FileReady | m.FileChunk | m.FetchFailed):
            for reply in self._resources(peer).answer(message):
                self._from_peer(peer, reply)

    # -- the network --------------------------------------------------------------------------
    def _enqueue(
        self,
        kind: str,
        sender: str,
        receiver: str,
        *,
        connection: int = 0,
        incarnation: int = 0,
        data: bytes = b"",
        message: object = None,
        message_id: str = "",
        meant_for: int = 0,
        clock: float = 0.0,
    ) -> None:
        delay = self.latency
        if self._random is not None:
            delay += self._random.uniform(0, 4 * self.latency)
        link = (sender, receiver)
        at = max(self.now + delay, self._link_clock.get(link, 0.0))
        self._link_clock[link] = at
        self._sequence += 1
        pending = _Pending(
            at,
            self._sequence,
            kind,
            sender,
            receiver,
            connection,
            incarnation,
            data,
            message,
            message_id,
            meant_for,
            clock,
            self._welcomed.get(link, 0) if kind == "sp" else 0,
        )
        heapq.heappush(self._queue, pending)

    def run_until_quiet(
        self, until: Callable[[], bool] | None = None, *, stop: Callable[[], bool] | None = None
    ) -> None:
        """Deliver messages and fire timers until nothing is in flight, no node waits for
        anything, and ``until`` (if given) holds; or, quiet or not, as soon as ``stop`` (if
        given) holds. While a partition lasts, at most ``PARTITIONED_STEP_SECONDS`` of it: the
        workload goes on whether or not each side settled (some cuts, a bridge across one,
        never let the sides settle)."""
        started = self.now
        while self._queue or self._any_busy() or (until is not None and not until()):
            if self._groups is not None and self.now - started >= PARTITIONED_STEP_SECONDS:
                return
            if stop is not None and stop():
                return
            timer = self._next_timer()
            if self._queue and (timer is None or self._queue[0].at < timer[0]):
                self._deliver(heapq.heappop(self._queue))
            elif timer is not None:
                self._fire(timer)
            else:
                break
            if self.now - started > STUCK_SECONDS:
                busy = {n: node.waiting_for() for n, node in self.nodes.items() if node.busy()}
                raise SimulationStuck(
                    f"{self._op_label}: not quiet after {STUCK_SECONDS} s (busy: {busy})"
                )

    def _any_busy(self) -> bool:
        """``any(node.busy() for node in self.nodes.values())``, asking only the nodes called
        since they were last asked: whether a node is busy changes only when it is called, and
        the simulator calls a node only through ``_execute`` (and ``accept``), which mark it."""
        busy = self._busy
        for node_id in self._unchecked:
            node = self.nodes.get(node_id)
            if node is not None and node.busy():
                busy.add(node_id)
            else:
                busy.discard(node_id)
        self._unchecked.clear()
        return bool(busy)

    def _advance(self, until: float) -> None:
        """Let time pass to ``until``, firing every timer due meanwhile, in order."""
        while True:
            timer = self._next_timer()
            if (
                self._queue
                and self._queue[0].at <= until
                and (timer is None or self._queue[0].at < timer[0])
            ):
                self._deliver(heapq.heappop(self._queue))
            elif timer is not None and timer[0] <= until:
                self._fire(timer)
            else:
                break
        self.now = max(self.now, until)

    def _next_timer(self) -> tuple[float, str] | None:
        while self._deadlines:
            at, _, node_id = self._deadlines[0]
            if (
                self._deadline_of.get(node_id) == at
                and node_id in self.nodes
                and node_id not in self._paused
            ):
                return at, node_id
            heapq.heappop(self._deadlines)  # a paused node's is set again when it goes on
        return None

    def _fire(self, timer: tuple[float, str]) -> None:
        at, node_id = timer
        heapq.heappop(self._deadlines)
        self._deadline_of[node_id] = None
        self.now = max(self.now, at)
        node = self.nodes[node_id]
        self._execute(node_id, node.timer(self._clock(node_id)))

    def _deliver(self, pending: _Pending) -> None:
        self.now = max(self.now, pending.at)
        held = self._paused.get(pending.receiver)
        if held is None and pending.kind in ("sp", "hello", "welcomed"):
            held = self._cut.get(pending.receiver, self._cut.get(pending.sender))
            if held is None and not self._reaches(pending.sender, pending.receiver):
                held = self._partitioned
        if held is not None:
            held.append(pending)
            return
        if pending.kind == "to_peer":
            message = self._decode(pending)
            self._peer_receives(pending, message)
            return
        if pending.kind == "close_out":
            peer = self.peers.get(pending.receiver)
            if peer is not None and peer.connection == pending.connection:
                peer.connection = None
                self._reconnect_later(peer)
            return
        node = self.nodes.get(pending.receiver)
        if node is None:
            return
        if pending.kind == "hello":
            outputs = node.superpeer_hello(
                pending.sender,
                pending.incarnation,
                address_of(pending.sender),
                self._clock(pending.receiver),
            )
            self._execute(pending.receiver, outputs)
            # the connection's Welcome names this process's incarnation to the sender
            self._enqueue(
                "welcomed", pending.receiver, pending.sender, incarnation=node.incarnation
            )
            return
        if pending.kind == "welcomed":
            outputs = node.superpeer_welcomed(
                pending.sender, pending.incarnation, self._clock(pending.receiver)
            )
            self._execute(pending.receiver, outputs)
            return
        if pending.kind == "close_in":
            self._execute(
                pending.receiver,
                node.connection_closed(pending.connection, self._clock(pending.receiver)),
            )
            return
        if pending.kind == "sp" and pending.welcomed and pending.welcomed < node.incarnation:
            # the receiver rejoined since its old incarnation welcomed this connection: the
            # new one closed it (``SuperPeerDaemon._backbone``), and the sender's channel,
            # connecting again, drops what was meant for the old one
            link = (pending.sender, pending.receiver)
            if self._welcomed.get(link) == pending.welcomed:
                self._connected.discard(link)
            if pending.meant_for < node.incarnation:
                self.dropped_by_links[type(pending.message).KIND] += 1  # type: ignore[attr-defined]
                return
        message = self._decode(pending)
        if pending.kind == "from_peer":
            outputs = node.peer_message(
                pending.connection,
                message,
                len(pending.data),
                pending.message_id,
                self._clock(pending.receiver),
            )
        else:
            received = Received(message, pending.message_id, len(pending.data), pending.clock)
            outputs = node.superpeer_message(
                pending.sender, pending.incarnation, received, self._clock(pending.receiver)
            )
            sender = self.nodes.get(pending.sender)
            if sender is not None and pending.sender not in self._paused:
                # the link's acknowledgement: a sign of life of whichever process received it
                sender.superpeer_heard(pending.receiver, self._clock(pending.sender))
        self._execute(pending.receiver, outputs)

    def _reconnect_later(self, peer: SimPeer) -> None:
        """The access point closed the connection (it rejoins the cube, or left: ``Goodbye``
        told the peer where to go): the peer comes back by itself, as the peer daemon does,
        once that super-peer is a member again (before the next operation)."""
        self._reconnecting.add(peer.name)

    def _reconnect(self) -> None:
        for name in sorted(self._reconnecting):
            leaving = self._leaving.get(name)
            peer = self.peers.get(name, leaving)
            if peer is None or peer.connection is not None:
                self._reconnecting.discard(name)
                continue
            node = self.nodes.get(peer.access_point)
            if node is not None and node.core is not None:
                self._reconnecting.discard(name)
                if leaving is not None:  # what it asked meanwhile goes, its Leave last
                    self.peers[name] = self._leaving.pop(name)
                self._connect(Connect(name, self.ids.index(peer.access_point)))
                if leaving is not None:
                    self._disconnect(self.peers.pop(name))

    def _decode(self, pending: _Pending) -> object:
        if self.verify_wire:
            message, message_id = wire.decode(pending.data)
            pending.message_id = message_id
            return message
        return pending.message

    def _execute(self, node_id: str, outputs: list) -> None:
        # what the call wrote is committed before its outputs go, as the daemon's group commit
        # does (``MemoryStore``: nothing to do)
        self.stores[node_id].commit()
        node = self.nodes.get(node_id)
        self._unchecked.add(node_id)
        for output in in_runtime_order(outputs):
            if isinstance(output, ToSuperPeer):
                self._count(output.message, output.data)
                link = (node_id, output.node)
                if link not in self._links:
                    if not output.address:
                        kind = type(output.message).KIND  # type: ignore[attr-defined]
                        raise Unaddressed(
                            f"{self._op_label}: {node_id} sent {kind} to {output.node} "
                            "without knowing its address"
                        )
                    self._links.add(link)
                receiver = self.nodes.get(output.node)
                stale = False
                if link not in self._connected and receiver is not None:
                    # a new connection starts with the link's Hello (the sender's address);
                    # the receiver's Welcome names its incarnation, and the channel drops what
                    # was meant for an older one if another one welcomed it before
                    self._connected.add(link)
                    self._enqueue(
                        "hello",
                        node_id,
                        output.node,
                        incarnation=node.incarnation if node is not None else 0,
                    )
                    before = self._welcomed.get(link)
                    self._welcomed[link] = receiver.incarnation
                    stale = (
                        before is not None
                        and before != receiver.incarnation
                        and output.incarnation < receiver.incarnation
                    )
                if stale:
                    self.dropped_by_links[type(output.message).KIND] += 1  # type: ignore[attr-defined]
                elif receiver is not None:
                    self._enqueue(
                        "sp",
                        node_id,
                        output.node,
                        incarnation=node.incarnation if node is not None else 0,
                        data=output.data,
                        message=output.message,
                        message_id=output.message_id,
                        meant_for=output.incarnation,
                        clock=output.clock,
                    )
            elif isinstance(output, ToConnection):
                self._count(output.message, output.data)
                peer = self._connections.get((node_id, output.connection))
                if peer is not None:
                    self._enqueue(
                        "to_peer",
                        node_id,
                        peer,
                        connection=output.connection,
                        data=output.data,
                        message=output.message,
                    )
            elif isinstance(output, CloseConnection):
                peer = self._connections.pop((node_id, output.connection), None)
                if peer is not None:
                    self._enqueue("close_out", node_id, peer, connection=output.connection)
            elif isinstance(output, Forgotten):
                self._links.discard((node_id, output.node))
                self._connected.discard((node_id, output.node))
                self._welcomed.pop((node_id, output.node), None)
                if not output.drain:
                    self._drop_queued(node_id, output.node)
            elif isinstance(output, Stopped):
                self._forget_links(node_id)
                self.nodes.pop(node_id, None)
                self._deadline_of.pop(node_id, None)
            elif isinstance(output, TraceRecord):
                self._write_trace(output)
        if node is not None and node_id in self.nodes:
            reading = node.clock.read(self._clock(node_id))  # its hybrid time now
            clocks, times = self._readings.setdefault(node_id, ([], []))
            if not clocks or reading > clocks[-1]:
                clocks.append(reading)
                times.append(self.now)
            deadline = node.next_deadline()
            if deadline is not None:
                deadline -= self._started_skews.get(node_id, 0.0)  # its clock, in simulated time
            if deadline is not None and deadline != self._deadline_of.get(node_id):
                self._deadline_of[node_id] = deadline
                self._sequence += 1
                heapq.heappush(self._deadlines, (deadline, self._sequence, node_id))

    def _count(self, message: object, data: bytes) -> None:
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.messages[kind] += 1
        self.message_bytes[kind] += len(data)

    # -- traces -------------------------------------------------------------------------------
    def _write_trace(self, record: TraceRecord) -> None:
        if self._trace_dir is None:
            return
        handle = self._trace_files.get(record.node)
        if handle is None:
            handle = (self._trace_dir / f"{record.node}.jsonl").open("a", encoding="utf-8")
            self._trace_files[record.node] = handle
        handle.write(record.to_json() + "\n")

    def close(self) -> None:
        for handle in self._trace_files.values():
            handle.close()
        self._trace_files.clear()
        if self._files is not None:
            shutil.rmtree(self._files)
            self._files = None

    # -- results ------------------------------------------------------------------------------
    @property
    def cores(self) -> dict[str, SuperPeerCore]:
        """The routing core of every live member."""
        return {n: node.core for n, node in sorted(self.nodes.items()) if node.core is not None}

    def kept_mail(self, name: str) -> list[m.Notify]:
        """The notifications kept for ``name`` in any live super-peer's mail (that its inbox
        would keep: see ``SimPeer.owed``), in mail order."""
        found: list[m.Notify] = []
        peer = self.peers.get(name)
        for node_id in self.nodes:
            for _, data in self.stores[node_id].mail_after(name, 0, 1 << 40):
                notify, _ = wire.decode(data)
                assert isinstance(notify, m.Notify)
                if peer is None or peer.owed(notify, self.published_when(notify)):
                    found.append(notify)
        return found

    def kept(self, name: str) -> set[str]:
        """Publication ids kept for ``name`` (``kept_mail``)."""
        return {notify.publication.id for notify in self.kept_mail(name)}

    def deliveries(self) -> dict[str, list[str]]:
        """Per peer, the publication ids it received, online or kept in its mail."""
        return {
            name: sorted({pid for _, pid, _ in peer.received} | self.kept(name))
            for name, peer in sorted(self.peers.items())
        }

    def changes(self) -> dict[str, list[list[str]]]:
        """Per peer, ``[publication id, kind]`` of every change it received, in order, then of
        those still kept in its mail."""
        found: dict[str, list[list[str]]] = {}
        for name, peer in sorted(self.peers.items()):
            seen = set(peer.received)
            changes = [[n.publication.id, n.kind] for n in peer.notifications]
            for notify in self.kept_mail(name):
                if versions.change_key(notify) not in seen:
                    seen.add(versions.change_key(notify))
                    changes.append([notify.publication.id, notify.kind])
            found[name] = changes
        return found

    def fetched(self) -> dict[str, list[str]]:
        """Per peer, the publications whose resource it holds, verified (fetched directly or by
        rendezvous)."""
        return {
            name: peer.resources.fetched() if peer.resources is not None else []
            for name, peer in sorted(self.peers.items())
        }

    def report(self) -> dict[str, object]:
        return RunReport(
            deliveries=self.deliveries(),
            changes=self.changes(),
            errors=self.errors,
            fetched=self.fetched(),
            locations=self.locations,
            messages=self.messages,
            message_bytes=self.message_bytes,
            hops=self.hops,
            superpeers=len(self.nodes),
            peers=len(self.peers),
            operations=self.operations,
            redeliveries=self.redeliveries,
            more_totals={
                "kept_offline": sum(len(self.kept(name)) for name in self.peers),
                "simulated_seconds": round(self.now - START, 6),
            },
        ).as_dict()
