"""Drive a real cluster from one process: many peers, each over its own TCP connection.

``RemotePeer`` speaks the peer side of the protocol (``Hello`` as a peer, requests answered in order
by ``Ack``/``Refused``, ``Notify`` at any time) and records everything it receives, for the replay
tool and the demo. ``wait_quiet`` waits until the backbone has nothing in flight: every super-peer
to super-peer message sent has been received, no link has anything queued, and every notification a
super-peer handed to a peer has reached it, the same point the simulator reaches after each
operation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import trio

import wire
from deploy.cluster import Cluster
from wire import messages as m
from wire.framing import Link, Received, Violation


class DriverError(RuntimeError):
    """The cluster did not behave (a connection refused, the network never quiet, ...)."""


@dataclass
class RemotePeer:
    name: str
    address: str
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

    async def connect(self, nursery: trio.Nursery) -> None:
        host, _, port = self.address.rpartition(":")
        stream = await trio.open_tcp_stream(host, int(port))
        link = Link(accepting=False)
        hello = m.Hello(role="peer", node_id=self.name, address="", protocol=wire.PROTOCOL_VERSION)
        await stream.send_all(link.send(hello))
        self.answers, self.pending = trio.open_memory_channel(100)
        self.stream, self.link = stream, link
        self.closed = trio.Event()
        welcomed = trio.Event()
        nursery.start_soon(self._read, stream, link, welcomed)
        with trio.fail_after(10):
            await welcomed.wait()

    async def _read(self, stream: trio.abc.Stream, link: Link, welcomed: trio.Event) -> None:
        self._scope = trio.CancelScope()
        with self._scope:
            try:
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        break
                    for event in link.receive_data(data):
                        if isinstance(event, Violation):
                            raise DriverError(f"{self.name}: {event.reason}")
                        self._take(event, welcomed)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        self.closed.set()

    def _take(self, event: Received, welcomed: trio.Event) -> None:
        message = event.message
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.received[kind] += 1
        self.received_bytes[kind] += len(wire.encode(message, event.message_id))
        if isinstance(message, m.Welcome):
            welcomed.set()
        elif isinstance(message, m.Notify):
            self.notifications.append(message)
        elif isinstance(message, m.Ack | m.Refused) and self.answers is not None:
            self.answers.send_nowait(message)

    def ignore_answers(self) -> None:
        """From now on answers are dropped on arrival (a publisher streaming without waiting)."""
        self.answers = None

    async def request(self, message: object) -> m.Ack | m.Refused | None:
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
    """Until nothing is in flight anywhere (checked twice in a row, to be sure)."""
    stable = 0
    with trio.move_on_after(timeout) as scope:
        while stable < 2:
            statuses = await cluster.statuses()
            sent = received = in_flight = handed = 0
            for status in statuses:
                messages = status.get("messages", {})
                sent += sum(v for k, v in messages.get("sent", {}).items() if k.startswith("sp."))
                received += sum(
                    v for k, v in messages.get("received", {}).items() if k.startswith("sp.")
                )
                in_flight += status.get("backbone_in_flight", 0)
                handed += messages.get("delivered", 0) + status.get("flushed", 0)
            arrived = sum(len(p.notifications) for p in peers)
            quiet = sent == received and not in_flight and handed <= arrived
            stable = stable + 1 if quiet else 0
            await trio.sleep(0.005 if quiet else 0.01)
    if scope.cancelled_caught:
        raise DriverError("the network did not go quiet")
