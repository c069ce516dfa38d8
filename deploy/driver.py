"""Drive a real cluster from one process: many peers, each over its own TCP connection.

``RemotePeer`` is a peer without a daemon: the peer's own protocol object (``peer.session.Session``:
``Hello``, secure identification with its RSA key, requests answered in order, notifications
acknowledged once kept) over a trio connection, recording what it receives for the replay tool,
the demo and the tests. Like the peer daemon's inbox it keeps one copy of each publication, and
only what one of its subscriptions matched when it was published (``owed``), acknowledging every
copy. ``wait_quiet`` waits until the network has nothing left to do: no super-peer waits for
anything (a join, routes settling, a repair, a catch-up, a handover), no backbone frame is
unacknowledged (a super-peer processes a frame as it acknowledges it), every notification a
super-peer sent to a peer was acknowledged, and no resource transfer waits for an attached peer:
the point the simulator reaches after each operation.

Each connection has one writer, as the peer daemon's (``peer.client``): whatever sends (the
reader acknowledging notifications and answering the handshake and resource messages, the
caller's requests, fetches re-sent after a reconnection) queues its bytes, and one task writes
them in order. Two tasks writing on one stream at once is an error in trio
(``BusyResourceError``), and the order of the session's frames is the order they were queued in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import trio

import crypto
import qel
import wire
from deploy.cluster import Cluster
from peer.resources import Resources
from peer.session import (
    Answered,
    Clocked,
    Ended,
    Established,
    Identification,
    LookupAnswered,
    Notified,
    Registration,
    Reply,
    ResourceMessage,
    ResourceTraffic,
    Session,
    Store,
)
from superpeer import versions
from wire import messages as m
from wire.acknowledging import ACK_DELAY_SECONDS

READ_SIZE = 65536
DRAIN_SECONDS = 5.0
"""How long a connection that ends (its reader ended: a goodbye, a refusal; or ``disconnect``)
may take to send what is still queued (the reply to a goodbye, a ``Leave``) before it is
closed."""


class DriverError(RuntimeError):
    """The cluster did not behave (a connection refused, the network never quiet, ...)."""


_KEYS: dict[str, object] = {}


def peer_key(name: str) -> object:
    """A 2048-bit key per peer name, made once per process (driving many peers stays fast)."""
    if name not in _KEYS:
        _KEYS[name] = crypto.generate_private_key(2048)
    return _KEYS[name]


@dataclass
class _Waiting:
    done: trio.Event = field(default_factory=trio.Event)
    answer: object = None


class _Connection:
    """One connection's stream, session and writer queue; ``scope`` stops its tasks."""

    def __init__(self, stream: trio.abc.Stream, session: Session[_Waiting]) -> None:
        self.stream = stream
        self.session = session
        self.outgoing, self.queued = trio.open_memory_channel[bytes](math.inf)
        self.scope = trio.CancelScope()
        self.reading = trio.CancelScope()
        """Stops the reader alone (``disconnect``: nothing more is taken, what is queued still
        goes out)."""
        self.drained = trio.Event()
        """The writer ended: what was queued before ``outgoing`` closed is written (or the
        stream broke)."""
        self.owing = trio.Event()
        """A ``Delivered`` began to wait (``RemotePeer._acknowledge`` sends it when due)."""

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the writer (dropped once the connection is closing)."""
        if data:
            with contextlib.suppress(trio.ClosedResourceError):
                self.outgoing.send_nowait(data)


@dataclass
class RemotePeer:
    name: str
    address: str
    ca: Path | None = None
    """The network CA to trust (TLS and identification); None for a plaintext cluster."""
    registration: Registration | None = None
    notifications: list[m.Notify] = field(default_factory=list)
    redeliveries: int = 0
    filtered: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    sent_bytes: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    received_bytes: Counter[str] = field(default_factory=Counter)
    history: list[tuple[str, qel.Subscription, float, float]] = field(default_factory=list)
    superpeer: str | None = None
    """The node id of the super-peer it is (or was last) attached to."""
    resources: Resources | None = None
    """Files it offers and fetches, as a peer daemon keeps them (None: none)."""
    resource_events: list[object] = field(default_factory=list)
    """Every resource message received, in order."""
    _resources_changed: trio.Event = field(default_factory=trio.Event)
    _received_more: trio.Event = field(default_factory=trio.Event)
    _connection: _Connection | None = None
    _established: trio.Event = field(default_factory=trio.Event)
    _seen: set[tuple[str, str, int]] = field(default_factory=set)
    _ended: str | None = None
    arrival_clock: float = 0.0
    """Its access point's latest hybrid time, from its ``Welcome`` and ``Clock`` s (a move
    statement's ``since``: ``clocks``, rule 6, as the peer daemon notes it)."""
    missing: float = 0.0
    """From when its access point said, in the latest of them, that what it delivers may be
    incomplete (a move statement's ``missing_since``)."""
    carried_clock: float = 0.0
    """The latest hybrid time an access point gave it (its ``Hello`` carries it)."""
    ack_delay: float = ACK_DELAY_SECONDS
    ack_every: int = 16
    """When it acknowledges notifications, as the peer daemon does (``peer.session``)."""
    clock_lead: float = 0.0
    """How far its access point's hybrid time runs ahead of this process's clock (what
    ``owed`` takes off a ``published_at`` to compare it with this process's times)."""

    @property
    def connected(self) -> bool:
        return self._connection is not None

    @property
    def private_identifier(self) -> crypto.PrivateIdentifier | None:
        """The identifier its access point issued (None before registration, or plaintext)."""
        return self.registration.private_identifier if self.registration else None

    @property
    def network_id(self) -> str:
        """How the network knows this peer: its public identifier (its name without TLS)."""
        if self.ca is None:
            return self.name
        return crypto.public_identifier(peer_key(self.name))  # type: ignore[arg-type]

    async def connect(self, nursery: trio.Nursery, address: str | None = None) -> str:
        """Connect (to ``address`` if given) and identify; the access point's node id."""
        self.address = address or self.address
        host, _, port = self.address.rpartition(":")
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, int(port))
        identification = None
        connection: _Connection | None = None
        try:
            if self.ca is not None:
                secure = trio.SSLStream(
                    stream, crypto.peer_client_context(ca=self.ca), server_hostname=host
                )
                await secure.do_handshake()
                stream = secure
                identification = Identification(
                    key=peer_key(self.name),  # type: ignore[arg-type]
                    server_fingerprint=crypto.peer_fingerprint(secure),
                    server_node_id=crypto.verified_peer_certificate_node_id(secure),
                    registration=self.registration,
                )
            session: Session[_Waiting] = Session(
                self.network_id,
                identification=identification,
                ack_every=self.ack_every,
                ack_delay=self.ack_delay,
            )
            connection = self._connection = _Connection(stream, session)
            self._established = trio.Event()
            self._ended = None
            hello = session.hello(trio.current_time(), wall=time.time(), clock=self.carried_clock)
            connection.write(hello)
            nursery.start_soon(self._run, connection)
            with trio.fail_after(30):
                await self._established.wait()
        except BaseException:
            self._drop(connection)
            await trio.aclose_forcefully(stream)
            raise
        if self._ended is not None:
            self._drop(connection)
            await trio.aclose_forcefully(stream)
            raise DriverError(f"{self.name}: {self._ended}")
        assert self.superpeer is not None
        return self.superpeer

    def _drop(self, connection: _Connection | None) -> None:
        """Forget ``connection`` (if it is the current one) and stop its tasks."""
        if connection is not None:
            if self._connection is connection:
                self._connection = None
            connection.scope.cancel()

    async def _run(self, connection: _Connection) -> None:
        """The connection's reader and writer, until it breaks, ends or is dropped."""
        session = connection.session
        with connection.scope:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._write_queued, connection)
                    with connection.reading:
                        async with trio.open_nursery() as reading:
                            reading.start_soon(self._acknowledge, connection)
                            await self._read(connection)
                            reading.cancel_scope.cancel()
                    # the writer sends what is still queued (a goodbye's reply), then stops
                    connection.outgoing.close()
                    nursery.cancel_scope.deadline = trio.current_time() + DRAIN_SECONDS
            finally:
                if self._connection is connection:
                    self._connection = None
                if not self._established.is_set():  # refused, or closed before it identified
                    self._ended = self._ended or "the connection closed before identification"
                    self._established.set()
                for waiting in session.close():
                    waiting.done.set()
                # broken or ended: its socket too. Shielded: when the writer found the stream
                # broken it cancelled ``scope``, and an await here would raise at once
                with trio.CancelScope(shield=True):
                    await trio.aclose_forcefully(connection.stream)

    async def _write_queued(self, connection: _Connection) -> None:
        """The connection's only writer: what was queued, in order."""
        try:
            async for data in connection.queued:
                await connection.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            connection.scope.cancel()  # the stream is gone: the reader stops too
        finally:
            connection.drained.set()

    async def _read(self, connection: _Connection) -> None:
        stream, session = connection.stream, connection.session
        try:
            while data := await stream.receive_some(READ_SIZE):
                # the notifications of one read are acknowledged together when the session
                # says, as the peer daemon does (``Delivered`` is cumulative, may wait a moment
                # for more, and goes before anything the session sends after them)
                kept: list[m.Notify] = []
                for event in session.receive_data(data):
                    if isinstance(event, Notified):
                        self._take(event.notify)
                        kept.append(event.notify)
                        continue
                    self._delivered(connection, kept)
                    kept = []
                    await self._event(connection, event)
                    if isinstance(event, Ended):
                        return
                self._delivered(connection, kept)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _delivered(self, connection: _Connection, kept: list[m.Notify]) -> None:
        if not kept:
            return
        session = connection.session
        last = max(kept, key=lambda notify: notify.delivery)
        data = session.delivered(last, trio.current_time(), len(kept))
        if data:
            connection.write(data)
        elif session.delivered_deadline is not None:
            connection.owing.set()

    async def _acknowledge(self, connection: _Connection) -> None:
        """Sends each ``Delivered`` that waited, when it falls due (the session's other timers
        are not run: the driver waits for its answers itself)."""
        session = connection.session
        while True:
            deadline = session.delivered_deadline
            if deadline is None:
                await connection.owing.wait()
                connection.owing = trio.Event()
                continue
            await trio.sleep_until(deadline)
            connection.write(session.delivered_due(trio.current_time()))

    async def _event(self, connection: _Connection, event: object) -> None:
        session = connection.session
        if isinstance(event, Reply):
            connection.write(event.data)
        elif isinstance(event, Store):
            self.registration = event.registration
            connection.write(session.stored())
        elif isinstance(event, Established):
            self.superpeer = event.superpeer_id
            self._established.set()
        elif isinstance(event, Clocked):
            message = event.message
            if message.clock:
                self.carried_clock = max(self.carried_clock, message.clock)
                self.clock_lead = message.clock - time.time()
                self.missing = message.missing_since
                if isinstance(message, m.Welcome):
                    self.arrival_clock = message.clock
                else:
                    self.arrival_clock = max(self.arrival_clock, message.clock)
            if isinstance(message, m.Clock):
                connection.write(session.clock_answer(message, time.time()))
        elif isinstance(event, ResourceTraffic):
            self._count(event.message)
            self.resource_events.append(event.message)
            await self._resource(event.message)
            self._resources_changed.set()
            self._resources_changed = trio.Event()
        elif isinstance(event, Answered | LookupAnswered):
            self._count(event.answer)
            event.token.answer = event.answer
            event.token.done.set()
        elif isinstance(event, Ended):
            self._ended = f"{event.refusal}: {event.reason}" if event.refusal else event.reason
            connection.write(event.reply)

    async def _resource(self, message: ResourceMessage) -> None:
        """What a peer daemon answers (``peer.client``), with the same ``peer.resources``."""
        resources = self.resources
        if resources is None:
            return
        for reply in resources.answer(message):
            await self.transfer(reply)

    async def transfer(self, message: m.Upload | m.Collect | m.Collected) -> None:
        """Send a transfer frame (not answered)."""
        connection = self._connection
        if connection is not None:
            self.sent[message.KIND] += 1
            connection.write(connection.session.transfer(message))
        await trio.lowlevel.checkpoint()

    async def wait_for_resource(self) -> None:
        """Until the next resource message has been handled."""
        await self._resources_changed.wait()

    def _take(self, notify: m.Notify) -> None:
        self._count(notify)
        key = versions.change_key(notify)
        if not self.owed(notify):
            self.filtered += 1
        elif key in self._seen:
            self.redeliveries += 1
        else:
            self._seen.add(key)
            self.notifications.append(notify)

    def owed(self, notify: m.Notify) -> bool:
        """Whether one of this peer's subscriptions matched ``notify`` when it was published
        (its hybrid time brought to this process's clock)."""
        return versions.owed(self.history, notify, notify.published_at - self.clock_lead)

    def _count(self, message: object) -> None:
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.received[kind] += 1
        self.received_bytes[kind] += len(wire.encode(message))
        self._received_more.set()
        self._received_more = trio.Event()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Until ``condition`` holds, tested again each time this peer receives a message (what
        it counts, its notifications and answers, changes only then)."""
        while not condition():
            await self._received_more.wait()

    async def request(self, message: object) -> object:
        """Send a request; its answer (None for ``Leave``, which has none)."""
        waiting = await self._send(message)
        if waiting is None:
            return None
        with trio.fail_after(60):
            await waiting.done.wait()
        if waiting.answer is None:
            raise DriverError(f"{self.name}: the connection was lost before an answer")
        return waiting.answer

    async def request_nowait(self, message: object) -> None:
        """Send a request without waiting for its answer (counted in ``received`` when it
        comes): for a sender that keeps many requests in flight, as ``bench.network`` does."""
        await self._send(message)

    async def _send(self, message: object) -> _Waiting | None:
        """Queue the request; what its answer will be handed to (None for ``Leave``)."""
        await trio.lowlevel.checkpoint()
        connection = self._connection
        if connection is None:
            raise DriverError(f"{self.name} is not connected")
        session = connection.session
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.sent[kind] += 1
        self.sent_bytes[kind] += len(wire.encode(message))
        now = trio.current_time()
        self._remember(message)
        if isinstance(message, m.Subscribe | m.Publish) and message.expires is not None:
            message = dataclasses.replace(message, sent_at=time.time())  # as ``peer.client``
        if isinstance(message, m.Leave):
            connection.write(session.leave())
            return None
        waiting = _Waiting()
        connection.write(session.send(session.prepare(message), waiting, now))  # type: ignore[arg-type]
        return waiting

    def _remember(self, message: object) -> None:
        """The peer's own record of its subscriptions over time (what ``owed`` checks)."""
        now = time.time()
        if isinstance(message, m.Subscribe):
            if not any(h[0] == message.id and h[3] == math.inf for h in self.history):
                self.history.append((message.id, message.subscription, now, math.inf))
        elif isinstance(message, m.Unsubscribe):
            self.history = [
                (i, q, s, now if i == message.id and e == math.inf else e)
                for i, q, s, e in self.history
            ]

    async def disconnect(self) -> None:
        """Close the connection once what was queued is written (a ``Leave`` goes out before
        the connection closes, as when every write was awaited), with the ``Delivered`` that
        waited."""
        connection = self._connection
        if connection is None:
            await trio.lowlevel.checkpoint()
            return
        self._connection = None
        connection.reading.cancel()
        connection.write(connection.session.delivered_now())
        connection.outgoing.close()
        with trio.move_on_after(DRAIN_SECONDS):
            await connection.drained.wait()
        self._drop(connection)
        await trio.aclose_forcefully(connection.stream)


async def wait_quiet(cluster: Cluster, peers: list[RemotePeer], *, timeout: float = 60) -> None:
    """Until nothing is left to do anywhere (checked twice in a row, to be sure); see the module
    docstring. ``DriverError`` with what was still busy if it never happens."""
    stable = 0
    busy: object = None
    with trio.move_on_after(timeout) as scope:
        while stable < 2:
            statuses = [s for s in await cluster.statuses() if s]
            busy = quiet_problems(statuses)
            stable = stable + 1 if not busy else 0
            await trio.sleep(0.005 if not busy else 0.02)
    if scope.cancelled_caught:
        raise DriverError(f"the network did not go quiet: {busy}")


def quiet_problems(statuses: list[dict]) -> list[str]:
    """What still keeps a cluster busy, from its live daemons' statuses (empty when quiet).

    Frames queued toward a super-peer that is down (no status among ``statuses``) do not count:
    nobody can acknowledge them until it restarts, and then they are dropped, since they were
    meant for its old incarnation. What they asked for is the sender's to ask again (a handover
    is asked again on a timer until the old access point answers): the simulator, too, is quiet
    with a message toward a failed super-peer unanswered."""
    live = {status.get("node") for status in statuses}
    problems = []
    for status in statuses:
        node = status.get("node")
        if status.get("waiting"):
            problems.append(f"{node} waits for {status['waiting']}")
        in_flight = sum(
            link.get("unacknowledged", 0)
            for neighbour, link in status.get("links", {}).items()
            if neighbour in live
        )
        if in_flight:
            problems.append(f"{node} has {in_flight} frames unacknowledged")
        unacknowledged = status.get("mail", {}).get("unacknowledged")
        if unacknowledged:
            problems.append(f"{node} waits for peers' acknowledgements {unacknowledged}")
        transfers = status.get("rendezvous", {}).get("in_progress")
        if transfers:
            problems.append(f"{node} has {transfers} resource transfers under way")
    return problems


def cube_problems(statuses: list[dict], dead: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """Why the live super-peers (their statuses) do not form a whole cube without the ``dead``
    ones (empty when they do): each a member, nobody naming a dead one as neighbour, the
    positions covering the cube exactly once."""
    live = [s for s in statuses if s]
    problems = [f"{s['node']} is {s['state']}" for s in live if s["state"] != "member"]
    if problems:
        return problems
    for status in live:
        named = dead & set(status.get("neighbours", {}))
        if named:
            problems.append(f"{status['node']} names {sorted(named)} as neighbour")
    dimensions = {s["dimension"] for s in live}
    positions = sorted(p for s in live for p in s["positions"])
    if len(dimensions) != 1 or positions != list(range(2 ** next(iter(dimensions)))):
        problems.append(f"positions {positions} in dimensions {sorted(dimensions)}")
    return problems
