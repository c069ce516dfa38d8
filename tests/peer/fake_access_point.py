"""A minimal access point for the peer's tests: the super-peer's side of the peer protocol, and
nothing else (one super-peer, so routing is "every local peer whose subscription matches").

It follows the contract the peer relies on, exactly:

* a connection's first frame must be ``Hello(role="peer")``: ``Welcome`` back, else ``LinkError``
  and close; a frame that breaks the protocol gets ``LinkError`` and the connection is closed;
* the newest connection of a peer wins (the older one is closed);
* a detached peer keeps its advertisement and subscriptions, and its notifications wait in an
  outbox delivered right after the next ``Welcome``;
* every request gets exactly one answer, in order: ``Ack`` or ``Refused`` (a publication outside
  the advertisement, an unknown subscription id, an id reused for another subscription);
  re-sending the same subscription or advertisement is harmless;
* ``Notify`` frames go out at any time, including between a request and its answer
  (``interleave``), and after the ``Ack`` of the publication that caused them;
* ``Leave`` has no answer: the peer is forgotten and the connection closed;
* ``Withdraw`` of a resource the peer published here is acknowledged and its subscribers are
  told it is ``removed`` (versions are not modelled: a publication is version 0, its removal 1);
* ``Locate`` is answered with ``Located`` under its id, as the real super-peer answers: online
  with the address its connection comes from for a peer attached here, from ``known_peers`` (the
  rest of the network, configured by the test) otherwise, else not online (empty addresses).

Hooks for tests: ``hold_answers`` (apply requests but keep their answers), ``alone``
(acknowledge publications with the access point's copy alone), ``drop`` (close a
peer's connection abruptly), ``restart`` (a super-peer that lost all its state), ``deliver``
(a notification from elsewhere in the network), ``goodbye`` (shutting down); for look-ups,
``hold_lookups`` (keep their answers, as a backbone still searching: ``release_lookups`` sends
them, on the asker's current connection as the real super-peer does) and ``refuse_lookups`` (a
reason: every look-up is refused with it).

With ``tls`` it is a TLS access point (the server side of ``crypto.tls``) that identifies peers
as the real super-peer does (``crypto.Verifier`` after ``Welcome``; the ``Hello`` must name the
identified key), with its registry in memory (``registry``: replace it to make the access point
forget its peers). It records what a test needs to check the peer's side: every byte of the
protocol received (``bytes_received``), failed TLS handshakes, identifications and refusals, and
``before_confirm`` sees the private identifier it issued when the peer's ``auth.confirm`` arrives
(the peer must have stored it by then).
"""

from __future__ import annotations

import ssl
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

import crypto
import qel
import wire
from wire import messages as m
from wire.framing import Link, Received, Violation, frame

NODE_ID = "sp-fake"


class _Connection:
    def __init__(self, peer_id: str, stream: trio.abc.Stream, link: Link, remote: str) -> None:
        self.peer_id = peer_id
        self.stream = stream
        self.link = link
        self.remote = remote
        self._lock = trio.StrictFIFOLock()

    async def send(self, message: object) -> None:
        async with self._lock:  # not link.send: see peer.daemon._ControlChannel.send
            await self.stream.send_all(frame(wire.encode(message)))


@dataclass(frozen=True)
class Location:
    """Where a peer attached elsewhere in the network is: what ``Located`` says of it."""

    address: str
    superpeer: str
    access_point: str


@dataclass(frozen=True)
class FakeTls:
    context: ssl.SSLContext
    node_id: str
    fingerprint: str


class _Reader:
    """The messages of one connection, one at a time; None at the end (a violation is answered
    with its error frame, then the end)."""

    def __init__(self, access_point: FakeAccessPoint, stream: trio.abc.Stream, link: Link) -> None:
        self.access_point = access_point
        self.stream = stream
        self.link = link
        self.events: deque[object] = deque()

    async def next(self) -> object | None:
        while not self.events:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.access_point.bytes_received += len(data)
            self.access_point._touch()
            for event in self.link.receive_data(data):
                if isinstance(event, Violation):
                    await self.stream.send_all(event.reply)
                    return None
                assert isinstance(event, Received)
                self.events.append(event.message)
        return self.events.popleft()


@dataclass
class FakePeer:
    advertisement: qel.Advertisement = field(default_factory=lambda: qel.parse_advertisement({}))
    subscriptions: dict[str, qel.Subscription] = field(default_factory=dict)
    outbox: list[m.Notify] = field(default_factory=list)
    interleave: list[m.Notify] = field(default_factory=list)
    connection: _Connection | None = None
    published: dict[str, qel.Publication] = field(default_factory=dict)


class FakeAccessPoint:
    def __init__(self, *, tls: FakeTls | None = None) -> None:
        self.tls = tls
        self.address = ""
        self.port = 0
        self.peers: dict[str, FakePeer] = {}
        self.received: list[tuple[str, object]] = []
        """(peer id, request) for every request received, in order."""
        self.attachments: Counter[str] = Counter()
        self.refused_hellos: list[str] = []
        self.hold_answers = False
        self.alone = False
        """Publications are acknowledged with the access point's copy alone (``Ack.alone``: a
        super-peer cut off from every neighbour)."""
        self.held: list[tuple[_Connection, m.Ack | m.Refused]] = []
        self.connections = 0
        """Connections accepted and ended (after the TLS handshake, if any)."""
        self.bytes_received = 0
        self.tls_failures = 0
        self.registry = crypto.MemoryRegistry()
        self.identified: list[tuple[str, bool]] = []
        """(public id, registered) for every identification accepted."""
        self.auth_failures: list[str] = []
        self.before_confirm: Callable[[str, crypto.PrivateIdentifier], None] | None = None
        self.known_peers: dict[str, Location] = {}
        """Peers online elsewhere in the network, by public id, for ``Locate``."""
        self.hold_lookups = False
        self.held_lookups: list[tuple[str, m.Located]] = []
        """(asking peer id, answer) for every look-up answer held back."""
        self.refuse_lookups: str | None = None
        self.alternates: tuple[str, ...] = ()
        """The other super-peers its ``Welcome`` names."""
        self.clock = 0.0
        """The hybrid time its ``Welcome`` gives (0: none, as an access point of the wall-clock
        era)."""
        self._issued: dict[str, bytes] = {}
        self._changed = trio.Event()

    # -- running ------------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._serve_connection, listeners)
            task_status.started(self.port)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    def requests_from(self, peer_id: str) -> list[object]:
        return [message for sender, message in self.received if sender == peer_id]

    def _touch(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- hooks --------------------------------------------------------------------------------
    async def drop(self, peer_id: str) -> None:
        connection = self.peers[peer_id].connection
        assert connection is not None, f"{peer_id} is not connected"
        await trio.aclose_forcefully(connection.stream)

    async def send_clock(
        self, peer_id: str, clock: float, alternates: tuple[str, ...] = ()
    ) -> None:
        """A ``Clock`` carrying hybrid time ``clock`` (and the super-peers it names) to
        ``peer_id``."""
        connection = self.peers[peer_id].connection
        assert connection is not None, f"{peer_id} is not connected"
        await connection.send(m.Clock(wall=time.time(), clock=clock, alternates=alternates))

    async def restart(self) -> None:
        """Every connection closes and everything about every peer is forgotten."""
        for peer in list(self.peers.values()):
            if peer.connection is not None:
                await trio.aclose_forcefully(peer.connection.stream)
        self.peers.clear()

    async def deliver(self, peer_id: str, notify: m.Notify) -> None:
        """A notification for ``peer_id`` (sent now if it is attached, else kept)."""
        peer = self.peers.setdefault(peer_id, FakePeer())
        if peer.connection is None:
            peer.outbox.append(notify)
            return
        try:
            await peer.connection.send(notify)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            peer.outbox.append(notify)

    async def release_held(self) -> None:
        held, self.held = self.held, []
        for connection, answer in held:
            await connection.send(answer)

    async def release_lookups(self) -> None:
        """Sends the look-up answers held back, each to its asker if attached (else it is lost:
        an answer is only worth something now)."""
        held, self.held_lookups = self.held_lookups, []
        for peer_id, answer in held:
            peer = self.peers.get(peer_id)
            if peer is not None and peer.connection is not None:
                await peer.connection.send(answer)

    async def goodbye(self, reason: str) -> None:
        for peer in self.peers.values():
            if peer.connection is not None:
                await peer.connection.send(m.Goodbye(reason=reason))
                await trio.aclose_forcefully(peer.connection.stream)

    # -- connections --------------------------------------------------------------------------
    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        if self.tls is not None:
            secure = trio.SSLStream(stream, self.tls.context, server_side=True)
            try:
                await secure.do_handshake()
            except trio.BrokenResourceError:
                self.tls_failures += 1
                self._touch()
                await trio.aclose_forcefully(secure)
                return
            stream = secure
        remote = _remote_address(stream)
        link = Link(accepting=True)
        reader = _Reader(self, stream, link)
        connection: _Connection | None = None
        try:
            hello = await reader.next()
            if hello is None:
                return
            connection = await self._attach(stream, link, reader, hello, remote)
            if connection is None:
                return
            while (message := await reader.next()) is not None:
                if not await self._request(connection, message):
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            # Forcefully: a TLS close_notify is of no use here, and ``drop`` may have closed it.
            await trio.aclose_forcefully(stream)
            self.connections += 1
            if connection is not None:
                peer = self.peers.get(connection.peer_id)
                if peer is not None and peer.connection is connection:
                    peer.connection = None
            self._touch()

    async def _attach(
        self, stream: trio.abc.Stream, link: Link, reader: _Reader, hello: object, remote: str
    ) -> _Connection | None:
        assert isinstance(hello, m.Hello)  # the link lets nothing else come first
        if hello.role != "peer" or not hello.node_id:
            self.refused_hellos.append(hello.role)
            await stream.send_all(
                frame(wire.encode(m.LinkError(reason="this port serves peers only")))
            )
            return None
        connection = _Connection(hello.node_id, stream, link, remote)
        welcome = m.Welcome(
            node_id=NODE_ID, address=self.address, clock=self.clock, alternates=self.alternates
        )
        await connection.send(welcome)
        if self.tls is not None and not await self._identify(connection, reader):
            return None
        peer = self.peers.setdefault(hello.node_id, FakePeer())
        previous = peer.connection
        peer.connection = connection
        if previous is not None:
            await trio.aclose_forcefully(previous.stream)
        outbox, peer.outbox = peer.outbox, []
        for notify in outbox:
            await connection.send(notify)
        self.attachments[hello.node_id] += 1
        self._touch()
        return connection

    async def _identify(self, connection: _Connection, reader: _Reader) -> bool:
        """The super-peer's side of secure identification (as ``superpeer.daemon``)."""
        assert self.tls is not None
        verifier = crypto.Verifier(
            node_id=self.tls.node_id,
            fingerprint=self.tls.fingerprint,
            registry=self.registry,
            address="127.0.0.1",
        )
        await connection.send(verifier.challenge(time.time()))
        while (message := await reader.next()) is not None:
            if isinstance(message, crypto.Confirm) and self.before_confirm is not None:
                issued = self._issued.get(message.public_id)
                assert issued is not None, "a confirmation of nothing issued"
                self.before_confirm(message.public_id, crypto.PrivateIdentifier(issued))
            for output in verifier.receive(message, time.time()):
                if isinstance(output, crypto.Send):
                    if isinstance(output.message, crypto.Registered):
                        self._issued[output.message.public_id] = output.message.private_id
                    await connection.send(output.message)
                elif isinstance(output, crypto.AuthFailure):
                    self.auth_failures.append(output.code)
                    self._touch()
                    return False
                else:
                    assert isinstance(output, crypto.PeerAuthenticated)
                    if output.record.public_id != connection.peer_id:
                        await connection.send(m.LinkError(reason="the Hello named another peer"))
                        return False
                    self.identified.append((connection.peer_id, output.registered))
                    return True
        return False

    async def _request(self, connection: _Connection, message: object) -> bool:
        """Applies one request and answers it; False when the connection must close."""
        peer_id = connection.peer_id
        peer = self.peers.setdefault(peer_id, FakePeer(connection=connection))
        self.received.append((peer_id, message))
        self._touch()
        if isinstance(message, m.Leave):
            del self.peers[peer_id]
            return False
        if isinstance(message, m.Locate):
            await self._locate(connection, message)
            return True
        if isinstance(message, m.Clock):  # the peer's answer to ``send_clock``: offsets are
            return True  # not modelled
        if isinstance(message, m.PublishSchema):
            await connection.send(m.Ack(request="publish-schema"))  # entailment is not modelled
            return True
        if not isinstance(
            message, m.Advertise | m.Subscribe | m.Unsubscribe | m.Publish | m.Withdraw
        ):
            kind = type(message).KIND  # type: ignore[attr-defined]
            await connection.send(m.LinkError(reason=f"{kind} is not a peer request"))
            return False
        answer, notifications = self._apply(peer_id, peer, message)
        if self.hold_answers:
            self.held.append((connection, answer))
            return True
        interleaved, peer.interleave = peer.interleave, []
        for notify in interleaved:
            await connection.send(notify)
        await connection.send(answer)
        for target, notify in notifications:
            await self.deliver(target, notify)
        return True

    async def _locate(self, connection: _Connection, message: m.Locate) -> None:
        if self.refuse_lookups is not None:
            label = f"locate {message.id}"
            await connection.send(m.Refused(request=label, reason=self.refuse_lookups))
            return
        here = self.peers.get(message.public_id)
        if here is not None and here.connection is not None:
            location: Location | None = Location(here.connection.remote, NODE_ID, self.address)
        else:
            location = self.known_peers.get(message.public_id)
        answer = m.Located(
            id=message.id,
            public_id=message.public_id,
            online=location is not None,
            address=location.address if location else "",
            superpeer=location.superpeer if location else "",
            access_point=location.access_point if location else "",
        )
        if self.hold_lookups:
            self.held_lookups.append((connection.peer_id, answer))
            self._touch()
            return
        await connection.send(answer)

    def _apply(
        self,
        peer_id: str,
        peer: FakePeer,
        message: m.Advertise | m.Subscribe | m.Unsubscribe | m.Publish | m.Withdraw,
    ) -> tuple[m.Ack | m.Refused, list[tuple[str, m.Notify]]]:
        if isinstance(message, m.Advertise):
            peer.advertisement = message.advertisement
            return m.Ack(request="advertise"), []
        if isinstance(message, m.Subscribe):
            label = f"subscribe {message.id}"
            existing = peer.subscriptions.get(message.id)
            if existing is not None and existing.key != message.subscription.key:
                reason = f"the id {message.id!r} is already used for another subscription"
                return m.Refused(request=label, reason=reason), []
            peer.subscriptions[message.id] = message.subscription
            return m.Ack(request=label), []
        if isinstance(message, m.Unsubscribe):
            label = f"unsubscribe {message.id}"
            if peer.subscriptions.pop(message.id, None) is None:
                reason = f"no subscription with id {message.id!r}"
                return m.Refused(request=label, reason=reason), []
            return m.Ack(request=label), []
        if isinstance(message, m.Withdraw):
            label = f"retract {message.id}"
            withdrawn = peer.published.pop(message.id, None)
            if withdrawn is None:
                return m.Refused(request=label, reason=f"no resource {message.id!r}"), []
            return m.Ack(request=label), self._notifications(peer_id, withdrawn, "removed")
        publication = message.publication
        label = f"publish {publication.id}"
        if not qel.advertisement_allows(peer.advertisement, publication):
            reason = "the publication is outside your advertisement"
            return m.Refused(request=label, reason=reason), []
        publication = qel.Publication(
            publication.subject, publication.statements, peer_id, publication.id
        )
        peer.published[publication.id] = publication
        ack = m.Ack(request=label, alone=self.alone)
        return ack, self._notifications(peer_id, publication, "added")

    def _notifications(
        self, peer_id: str, publication: qel.Publication, kind: str
    ) -> list[tuple[str, m.Notify]]:
        """Every local subscriber's notification of a change of ``publication`` (one
        super-peer: versions are not modelled; a removal is version 1)."""
        notifications = []
        for target_id, target in self.peers.items():
            matched = sorted(
                name for name, q in target.subscriptions.items() if qel.matches(q, publication)
            )
            if matched:
                notify = m.Notify(
                    publication=publication,
                    subscriptions=tuple(matched),
                    owner=peer_id,
                    access_point=self.address,
                    origin=NODE_ID,
                    hops=0,
                    published_at=time.time(),
                    kind=kind,
                    version=1 if kind == "removed" else 0,
                )
                notifications.append((target_id, notify))
        return notifications


def _remote_address(stream: trio.abc.Stream) -> str:
    """HOST:PORT of the other end (below TLS, if any), as the real super-peer reports it."""
    if isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    assert isinstance(stream, trio.SocketStream)
    host, port = stream.socket.getpeername()[:2]
    return f"{host}:{port}"
