"""Drive a real cluster from one process: many peers, each over its own TCP connection.

``RemotePeer`` speaks the peer side of the protocol (TLS trusting the cluster's CA, ``Hello`` as a
peer, secure identification with its own RSA key: registration the first time, re-identification
with its private identifier afterwards; then requests answered in order by ``Ack``/``Refused``,
``Notify`` at any time) and records everything it receives, for the replay tool and the demo. ``wait_quiet`` waits until the backbone has nothing in flight: every super-peer
to super-peer message sent has been received, no link has anything queued, and every notification a
super-peer handed to a peer has reached it, the same point the simulator reaches after each
operation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import trio

import crypto
import wire
from deploy.cluster import Cluster
from wire import messages as m
from wire.framing import Link, Received, Violation


class DriverError(RuntimeError):
    """The cluster did not behave (a connection refused, the network never quiet, ...)."""


_KEYS: dict[str, object] = {}


def peer_key(name: str) -> object:
    """A 2048-bit key per peer name, made once per process (driving many peers stays fast)."""
    if name not in _KEYS:
        _KEYS[name] = crypto.generate_private_key(2048)
    return _KEYS[name]


@dataclass
class RemotePeer:
    name: str
    address: str
    ca: Path | None = None
    """The network CA to trust (TLS and identification); None for a plaintext cluster."""
    private_identifier: crypto.PrivateIdentifier | None = None
    issued_by: str | None = None
    stream: trio.abc.Stream | None = None
    link: Link | None = None
    notifications: list[m.Notify] = field(default_factory=list)
    answers: trio.MemorySendChannel | None = None
    pending: trio.MemoryReceiveChannel | None = None
    sent: Counter[str] = field(default_factory=Counter)
    sent_bytes: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    received_bytes: Counter[str] = field(default_factory=Counter)
    closed: trio.Event = field(default_factory=trio.Event)
    _scope: trio.CancelScope | None = None

    @property
    def connected(self) -> bool:
        return self.stream is not None

    @property
    def network_id(self) -> str:
        """How the network knows this peer: its public identifier (its name without TLS)."""
        if self.ca is None:
            return self.name
        return crypto.public_identifier(peer_key(self.name))  # type: ignore[arg-type]

    async def connect(self, nursery: trio.Nursery) -> None:
        host, _, port = self.address.rpartition(":")
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, int(port))
        try:
            if self.ca is not None:
                stream = trio.SSLStream(
                    stream, crypto.peer_client_context(ca=self.ca), server_hostname=host
                )
                await stream.do_handshake()
            link = Link(accepting=False)
            hello = m.Hello(
                role="peer", node_id=self.network_id, address="", protocol=wire.PROTOCOL_VERSION
            )
            await stream.send_all(link.send(hello))
            with trio.fail_after(30):
                leftovers = await self._handshake(stream, link)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        self.answers, self.pending = trio.open_memory_channel(100)
        self.stream, self.link = stream, link
        self.closed = trio.Event()
        nursery.start_soon(self._read, stream, link, leftovers)

    async def _handshake(self, stream: trio.abc.Stream, link: Link) -> list[Received]:
        """Until welcomed and (with TLS) identified; the messages that came after, in order."""
        prover = None
        if self.ca is not None:
            prover = crypto.Prover(
                peer_key(self.name),  # type: ignore[arg-type]
                verifier_fingerprint=crypto.peer_fingerprint(stream),  # type: ignore[arg-type]
                verifier_node_id=crypto.verified_peer_certificate_node_id(stream),  # type: ignore[arg-type]
                private_identifier=self.private_identifier,
                issued_by=self.issued_by,
            )
        done = False
        leftovers: list[Received] = []
        while not done:
            data = await stream.receive_some(65536)
            if not data:
                raise DriverError(f"{self.name}: the access point closed the connection")
            for event in link.receive_data(data):
                if isinstance(event, Violation):
                    raise DriverError(f"{self.name}: {event.reason}")
                if done:
                    leftovers.append(event)
                elif isinstance(event.message, m.Welcome):
                    done = prover is None
                elif prover is not None:
                    done = await self._identify(prover, event.message, stream, link)
        return leftovers

    async def _identify(
        self, prover: crypto.Prover, message: object, stream: trio.abc.Stream, link: Link
    ) -> bool:
        for output in prover.receive(message):
            if isinstance(output, crypto.Send):
                await stream.send_all(link.send(output.message))
            elif isinstance(output, crypto.IdentifierIssued):
                self.private_identifier = output.private_identifier
                await stream.send_all(link.send(prover.confirm()))
            elif isinstance(output, crypto.Identified):
                self.issued_by = output.verifier_id
                return True
            elif isinstance(output, crypto.Refused):
                raise DriverError(
                    f"{self.name}: identification refused ({output.code}: {output.reason})"
                )
        return False

    async def _read(self, stream: trio.abc.Stream, link: Link, leftovers: list[Received]) -> None:
        self._scope = trio.CancelScope()
        with self._scope:
            for event in leftovers:
                self._take(event)
            try:
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        break
                    for event in link.receive_data(data):
                        if isinstance(event, Violation):
                            raise DriverError(f"{self.name}: {event.reason}")
                        self._take(event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        self.closed.set()

    def _take(self, event: Received) -> None:
        message = event.message
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.received[kind] += 1
        self.received_bytes[kind] += event.size
        if isinstance(message, m.Notify):
            self.notifications.append(message)
        elif isinstance(message, m.Ack | m.Refused | m.Located) and self.answers is not None:
            self.answers.send_nowait(message)

    def ignore_answers(self) -> None:
        """From now on answers are dropped on arrival (a publisher streaming without waiting)."""
        self.answers = None

    async def request(self, message: object) -> m.Ack | m.Refused | m.Located | None:
        """Send a request; its answer (None for ``Leave``, which has none)."""
        if self.stream is None or self.link is None or self.pending is None:
            raise DriverError(f"{self.name} is not connected")
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.sent[kind] += 1
        self.sent_bytes[kind] += len(wire.encode(message, f"{self.name}#{sum(self.sent.values())}"))
        await self.stream.send_all(
            self.link.send(message, f"{self.name}#{sum(self.sent.values())}")
        )
        if isinstance(message, m.Leave):
            return None
        with trio.fail_after(30):
            return await self.pending.receive()

    async def disconnect(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
        if self._scope is not None:
            self._scope.cancel()
        self.stream = self.link = None


async def wait_quiet(cluster: Cluster, peers: list[RemotePeer], *, timeout: float = 60) -> None:
    """Until nothing is in flight anywhere (checked twice in a row, to be sure): every backbone
    message sent has been received, no link has anything queued, and each of ``peers`` has
    received every notification a super-peer handed to its connection (peers are counted by
    network id, so give every ``RemotePeer`` object that spoke for an id)."""
    stable = 0
    with trio.move_on_after(timeout) as scope:
        while stable < 2:
            statuses = await cluster.statuses()
            sent = received = in_flight = 0
            handed: Counter[str] = Counter()
            for status in statuses:
                messages = status.get("messages", {})
                sent += sum(v for k, v in messages.get("sent", {}).items() if k.startswith("sp."))
                received += sum(
                    v for k, v in messages.get("received", {}).items() if k.startswith("sp.")
                )
                in_flight += status.get("backbone_in_flight", 0)
                handed.update(status.get("handed", {}))
            arrived: Counter[str] = Counter()
            for peer in peers:
                arrived[peer.network_id] += len(peer.notifications)
            quiet = (
                sent == received
                and not in_flight
                and all(handed[peer.network_id] <= arrived[peer.network_id] for peer in peers)
            )
            stable = stable + 1 if quiet else 0
            await trio.sleep(0.005 if quiet else 0.01)
    if scope.cancelled_caught:
        raise DriverError("the network did not go quiet")
