"""The daemon's connections to other super-peers, with trio: one ``Link`` per super-peer it sends
to, each a ``superpeer.channel.Outbound`` over a connection that is opened on demand and opened
again (capped exponential backoff with jitter) whenever it breaks.

A link writes what the node sends, in order, and what the other side had not acknowledged when the
previous connection broke; it reads the other side's ``ChannelAck`` s (which also tell the node the
other side is alive). Deciding that a silent super-peer has failed is the node's job
(``SuperPeerNode``: heartbeats and silence), not the link's: a link only reports that it can no
longer keep what waits for acknowledgement (``max_neighbour_queue``), after which the node decides.
"""

from __future__ import annotations

import logging
import random
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

import crypto
import wire
from superpeer._groups import unwrapped
from superpeer.channel import ChannelOverflow, Outbound
from wire import messages as m
from wire.codec import WireError, WireLimits
from wire.framing import FrameDecoder, FrameError, frame
from wire.streams import receive

log = logging.getLogger("superpeer")
_BROKEN = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    OSError,
    FrameError,
    WireError,
)
"""What a broken or misbehaving connection raises: the link is down, the daemon goes on."""


class LinkFailed(Exception):
    """This connection attempt failed (why, for the logs); the link tries again."""


@dataclass
class Link:
    node: str
    address: str
    channel: Outbound
    wake: trio.Event = field(default_factory=trio.Event)
    fresh: list[bytes] = field(default_factory=list)
    """Frames pushed since the writer last looked."""
    connected: bool = False
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    forgotten: bool = False
    """Out of the cube: the link ends once what was queued is acknowledged (a goodbye's answer
    is often the last message), or after the handshake time."""

    def statistics(self) -> dict[str, object]:
        return {
            "address": self.address,
            "connected": self.connected,
            "unacknowledged": self.channel.waiting,
        }


class Links:
    """Every link of one daemon. ``hello`` is what to say first (it carries the incarnation of the
    moment); ``open_stream`` opens the (TLS) connection to a super-peer and checks its node id;
    ``heard`` (an acknowledgement), ``welcomed`` (a connection, and the other side's incarnation)
    and ``overflow`` call back into the daemon."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        limits: WireLimits,
        max_unacknowledged: int,
        hello: Callable[[], m.Hello],
        open_stream: Callable[[str, str], Awaitable[trio.abc.Stream]],
        heard: Callable[[str], None],
        welcomed: Callable[[str, int], None],
        overflow: Callable[[str], None],
        handshake_seconds: float,
    ) -> None:
        self._nursery = nursery
        self._limits = limits
        self._max = max_unacknowledged
        self._hello = hello
        self._open = open_stream
        self._heard = heard
        self._welcomed = welcomed
        self._overflow = overflow
        self._handshake_seconds = handshake_seconds
        self._random = random.Random()
        self.links: dict[str, Link] = {}
        self._numbers: dict[str, int] = {}
        """Where the channel to a node whose link was dropped goes on numbering."""

    def send(
        self, node: str, address: str, data: bytes, incarnation: int = 0, clock: float = 0.0
    ) -> None:
        """Queue the encoded message ``data`` for super-peer ``node`` (reached at ``address``),
        meant for its ``incarnation`` (0: whichever is there), with the sender's hybrid time
        ``clock`` in the frame's header."""
        link = self.links.get(node)
        if link is None:
            if not address:
                log.warning("event=no_address node=%s", node)
                return
            link = Link(node, address, self._channel(node))
            self.links[node] = link
            self._nursery.start_soon(self._run, link)
        elif address and address != link.address:
            link.address = address
        try:
            link.fresh.append(link.channel.push(data, incarnation, clock))
        except ChannelOverflow as error:
            log.error("event=link_overflow node=%s reason=%r", node, str(error))  # noqa: TRY400
            self._numbers[node] = link.channel.next_number
            link.channel = self._channel(node)
            link.fresh.clear()
            self._overflow(node)
            return
        link.wake.set()

    def _channel(self, node: str) -> Outbound:
        return Outbound(
            limits=self._limits, max_unacknowledged=self._max, first=self._numbers.get(node, 1)
        )

    def in_flight(self) -> int:
        return sum(self.waiting().values())

    def waiting(self) -> dict[str, int]:
        """Per super-peer, the frames sent to it and not yet acknowledged (those with any)."""
        return {n: link.channel.waiting for n, link in self.links.items() if link.channel.waiting}

    def forget(self, node: str, *, drain: bool = True) -> None:
        """``node`` is out of the cube, or restarted: a later message to it opens a new link.
        With ``drain``, what waits on the old one still goes out (bounded by the handshake
        time); without, it is dropped at once."""
        link = self.links.pop(node, None)
        if link is None:
            return
        self._numbers[node] = link.channel.next_number
        link.forgotten = True
        if drain and link.channel.waiting:
            link.scope.deadline = min(
                link.scope.deadline, trio.current_time() + self._handshake_seconds
            )
        else:
            link.scope.cancel()

    async def _run(self, link: Link) -> None:
        delay = 0.05
        with link.scope:
            while True:
                try:
                    await self._connection(link)
                    delay = 0.05
                except LinkFailed as failure:
                    log.info("event=link_down node=%s reason=%r", link.node, str(failure))
                link.connected = False
                await trio.sleep(delay * (0.5 + self._random.random() / 2))
                delay = min(delay * 2, 2.0)

    async def _connection(self, link: Link) -> None:
        try:
            stream = await self._open(link.node, link.address)
        except (OSError, crypto.CryptoError, trio.TooSlowError, ssl.SSLError) as error:
            raise LinkFailed(f"cannot connect to {link.address}: {error}") from None
        async with stream:
            try:
                decoder = FrameDecoder(self._limits)
                await stream.send_all(frame(wire.encode(self._hello()), self._limits))
                with trio.fail_after(self._handshake_seconds):
                    welcome = await self._welcome(stream, decoder, link)
                resend = link.channel.welcomed(welcome.incarnation, welcome.resume)
                link.fresh.clear()
                link.connected = True
                self._welcomed(link.node, welcome.incarnation)
                if resend:
                    await stream.send_all(b"".join(resend))
                with unwrapped(LinkFailed, *_BROKEN):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._write, stream, link)
                        await self._read_acks(stream, decoder, link)
                        nursery.cancel_scope.cancel()
            except _BROKEN as error:
                raise LinkFailed(str(error) or type(error).__name__) from None

    async def _welcome(
        self, stream: trio.abc.Stream, decoder: FrameDecoder, link: Link
    ) -> m.Welcome:
        while True:
            data = await receive(stream)
            if not data:
                raise LinkFailed("closed before welcoming")
            for payload in decoder.feed(data):
                message, _ = wire.decode(payload, self._limits)
                if isinstance(message, m.LinkError):
                    raise LinkFailed(f"refused: {message.reason}")
                if not isinstance(message, m.Welcome):
                    raise LinkFailed(f"expected link.welcome, got {type(message).KIND}")
                if message.node_id != link.node:
                    raise LinkFailed(f"{link.address} is {message.node_id}, not {link.node}")
                return message

    async def _write(self, stream: trio.abc.Stream, link: Link) -> None:
        while True:
            if not link.fresh:
                link.wake = trio.Event()
                await link.wake.wait()
            batch, link.fresh = link.fresh, []
            await stream.send_all(b"".join(batch))

    async def _read_acks(self, stream: trio.abc.Stream, decoder: FrameDecoder, link: Link) -> None:
        while True:
            data = await receive(stream)
            if not data:
                raise LinkFailed("the other side closed the connection")
            for payload in decoder.feed(data):
                message, _ = wire.decode(payload, self._limits)
                if isinstance(message, m.ChannelAck):
                    link.channel.acknowledged(message.received)
                    self._heard(link.node)
                    if link.forgotten and not link.channel.waiting:
                        link.scope.cancel()
                elif isinstance(message, m.LinkError):
                    raise LinkFailed(f"the other side reported: {message.reason}")
