"""The super-peer daemon: the trio runtime around ``SuperPeerCore`` and ``HypercupNode``.

The runtime owns what the cores may not touch: sockets, the clock, the disk. It

* listens on TCP; a connection's first frame (``Hello``) says who is calling: a peer (its access
  point is this node), a super-peer (backbone traffic: topology messages for ``HypercupNode``,
  routing messages for the core), or, on the local control socket, the command-line client;
* keeps one outgoing connection per super-peer it has to talk to, opened on demand at the address
  the topology protocol gave, re-opened with capped exponential backoff; a super-peer unreachable
  for ``failure_seconds`` is reported to ``HypercupNode.neighbour_failed``;
* gives every connection a bounded send queue: a peer whose queue overflows is treated as detached
  (what it would have missed goes to its offline outbox, which is durable, in sqlite); a neighbour
  whose queue overflows has failed. A slow or stuck connection never blocks anyone else;
* answers a malformed, oversized or out-of-order frame with a ``LinkError`` frame saying what was
  wrong, logs it, closes that connection, and keeps serving everyone else;
* writes the trace log (rotating JSON-lines files in the data directory) and structured log lines
  on stderr;
* shuts down cleanly (``shutdown``): withdraws its advertisements and subscriptions, leaves the
  cube (its positions go to another super-peer), says ``Goodbye`` to its peers, flushes the logs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import secrets
import ssl
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import trio

import crypto
import wire
from hypercup import HypercupNode, NodeState
from hypercup.errors import HypercupError
from hypercup.events import Joined, Left, Send, TopologyChanged
from hypercup.events import Output as TopologyOutput
from superpeer.actions import DiscardOffline, FlushOffline, ToNeighbour, ToOffline, ToPeer
from superpeer.config import SuperPeerConfig
from superpeer.core import CoreConfig, Output, SuperPeerCore
from superpeer.offline import SqliteOutbox
from superpeer.security import Identity, SqliteRegistry, prepare_identity
from superpeer.trace import TraceRecord, flush_record
from superpeer.tracelog import TraceLog
from wire import messages as m
from wire.framing import FrameError, Link, Received, Violation, frame

log = logging.getLogger("superpeer")
BACKBONE = tuple(cls.KIND for cls in m.BACKBONE)
READ_SIZE = 65536


class DaemonError(RuntimeError):
    """The daemon cannot start or go on (bad data directory, no contact to join through, ...)."""


@dataclass
class PeerSession:
    peer: str
    send: trio.MemorySendChannel[bytes]
    scope: trio.CancelScope
    connected_at: float


@dataclass
class NeighbourLink:
    node_id: str
    address: str
    send: trio.MemorySendChannel[bytes]
    receive: trio.MemoryReceiveChannel[bytes]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    connected: bool = False
    unreachable_since: float | None = None


class _Connection:
    """An accepted connection: its stream, its ``Link``, and the events read but not yet used
    (one read can carry several frames)."""

    def __init__(self, stream: trio.abc.Stream, link: Link) -> None:
        self.stream = stream
        self.link = link
        self._events: deque[Received | Violation] = deque()

    async def next(self) -> Received | Violation | None:
        """The next message or violation; None when the other side closed the connection."""
        while not self._events:
            if self.link.closed:
                return None
            data = await self.stream.receive_some(READ_SIZE)
            if not data:
                return None
            self._events.extend(self.link.receive_data(data))
        return self._events.popleft()

    async def send(self, message: object) -> None:
        await self.stream.send_all(self.link.send(message))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)


def _remote_address(stream: trio.abc.Stream) -> str:
    sock = getattr(stream, "socket", None)
    if sock is None:
        return "unknown"
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "unknown"
    return f"{host}:{port}"


def _short(error: BaseException) -> str:
    cause = error.__cause__ or error
    return getattr(cause, "reason", None) or type(cause).__name__


def _with_waiting(first: bytes, channel: trio.MemoryReceiveChannel[bytes]) -> bytes:
    """``first`` and every frame already waiting behind it, as one write: under load, one system
    call and one wake-up carry many frames (they stay in order, and a frame is never split)."""
    batch = [first]
    while len(batch) < 256:
        try:
            batch.append(channel.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    return b"".join(batch) if len(batch) > 1 else first


def node_id_for(directory: Path, configured: str | None) -> str:
    """The configured id, else the one kept in the data directory, else a new one kept there."""
    path = directory / "node_id"
    if configured:
        return configured
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    generated = f"sp-{secrets.token_hex(4)}"
    path.write_text(generated + "\n", encoding="utf-8")
    return generated


class SuperPeerDaemon:
    """One super-peer process. ``serve`` runs it until ``shutdown``."""

    def __init__(self, config: SuperPeerConfig) -> None:
        self.config = config
        self.directory = config.directory
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DaemonError(
                f"cannot use the data directory {self.directory}: {error.strerror}"
            ) from None
        self.node_id = node_id_for(self.directory, config.node_id)
        self.address = config.address
        self.identity: Identity | None = None
        self._server_context: ssl.SSLContext | None = None
        self._client_context: ssl.SSLContext | None = None
        if config.security.tls:
            self.identity = prepare_identity(
                self.directory, self.node_id, config.security, config.host
            )
            self._server_context = self.identity.server_context()
            self._client_context = self.identity.client_context()
        self.registry = SqliteRegistry(self.directory / "peers.sqlite")
        self.limits = config.wire_limits()
        self.topology = HypercupNode(self.node_id, self.address)
        self.core: SuperPeerCore | None = None
        self.outbox = SqliteOutbox(self.directory / "offline.sqlite")
        self.trace = (
            TraceLog(
                self.directory / "traces",
                self.node_id,
                max_bytes=config.trace.max_bytes,
                keep=config.trace.keep,
            )
            if config.trace.enabled
            else None
        )
        self.peers: dict[str, PeerSession] = {}
        self.links: dict[str, NeighbourLink] = {}
        self.addresses: dict[str, str] = {}
        self.started_at = time.time()
        self.violations = 0
        self.auth_failures = 0
        self.flushed = 0
        self.handed: Counter[str] = Counter()
        """Notifications queued for each peer's connection (online or flushed)."""
        self._joined = trio.Event()
        self._left = trio.Event()
        self._done = trio.Event()
        self._stopping = False
        self._nursery: trio.Nursery | None = None
        self._number = 0
        self._random = random.Random()

    # -- running ------------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, join (or create) the backbone, report the listening address, run until
        ``shutdown`` finishes."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                listeners = await trio.open_tcp_listeners(self.config.port, host=self.config.host)
                nursery.start_soon(trio.serve_listeners, self._serve_connection, listeners)
                await nursery.start(self._serve_control)
                nursery.start_soon(self._flush_traces)
                await self._enter_backbone()
                log.info(
                    "event=started node=%s address=%s data=%s",
                    self.node_id,
                    self.address,
                    self.directory,
                )
                task_status.started(self.address)
                await self._done.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._close_files()

    async def _enter_backbone(self) -> None:
        if not self.config.join:
            self._topology(self.topology.create())
        else:
            contact_id, contact_address = await self._find_contact()
            self._topology(self.topology.join_via(contact_id, contact_address))
        with trio.fail_after(max(30.0, self.config.limits.failure_seconds * 3)):
            await self._joined.wait()

    async def _find_contact(self) -> tuple[str, str]:
        """The id of the first configured member that answers a ``Hello``."""
        problems = []
        for host, port in self.config.join:
            try:
                with trio.fail_after(5):
                    return await self._ask_id(host, port), f"{host}:{port}"
            except (
                OSError,
                trio.TooSlowError,
                DaemonError,
                FrameError,
                crypto.CryptoError,
            ) as error:
                problems.append(f"{host}:{port}: {error}")
        raise DaemonError("cannot join: no member answered (" + "; ".join(problems) + ")")

    async def _open_backbone(self, host: str, port: int, expected: str | None) -> trio.abc.Stream:
        """A connection to a super-peer: TLS with our certificate, the other end's certificate
        verified against the network CA and (when known) checked for ``expected``'s node id."""
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        if self._client_context is None:
            return stream
        secure = trio.SSLStream(stream, self._client_context, server_hostname=host)
        try:
            with trio.fail_after(self.config.limits.handshake_seconds):
                await secure.do_handshake()
            if expected is not None:
                crypto.check_peer_node_id(secure, expected)  # type: ignore[arg-type]
        except (
            trio.BrokenResourceError,
            trio.TooSlowError,
            ssl.SSLError,
            crypto.CryptoError,
        ) as error:
            await stream.aclose()
            reason = f"TLS to {host}:{port} failed: {_short(error) if not isinstance(error, crypto.CryptoError) else error}"
            self._auth_failure(expected, "superpeer", f"{host}:{port}", "tls_client", reason)
            raise OSError(reason) from None
        return secure

    async def _ask_id(self, host: str, port: int) -> str:
        stream = await self._open_backbone(host, port, None)
        async with stream:
            link = Link(accepting=False, limits=self.limits)
            await stream.send_all(link.send(self._hello()))
            while not link.open:
                data = await stream.receive_some(READ_SIZE)
                if not data:
                    raise DaemonError("closed before welcoming")
                violations = [e for e in link.receive_data(data) if isinstance(e, Violation)]
                if violations:
                    raise DaemonError(violations[0].reason)
            assert link.peer_welcome is not None
            node_id = link.peer_welcome.node_id
            if self._client_context is not None:
                crypto.check_peer_node_id(stream, node_id)  # type: ignore[arg-type]
            return node_id

    def _hello(self) -> m.Hello:
        return m.Hello(
            role="superpeer",
            node_id=self.node_id,
            address=self.address,
            protocol=wire.PROTOCOL_VERSION,
        )

    async def shutdown(self) -> None:
        """Leave cleanly: withdraw what this node announced, hand its positions over, tell the
        peers, flush. Safe to call more than once."""
        if self._stopping:
            return
        self._stopping = True
        log.info("event=stopping node=%s", self.node_id)
        if self.core is not None:
            self._execute(self.core.retire(time.time()))
        deadline = trio.current_time() + max(10.0, self.config.limits.failure_seconds)
        while self.topology.state == NodeState.MEMBER and trio.current_time() < deadline:
            try:
                self._topology(self.topology.leave())
                break
            except HypercupError as error:
                log.info("event=leave_deferred reason=%r", str(error))
                await trio.sleep(0.05)
        with trio.move_on_at(deadline):
            await self._left.wait()
        with trio.move_on_after(2.0):
            await self._drain_links()
        for session in list(self.peers.values()):
            self._enqueue_peer(
                session,
                frame(wire.encode(m.Goodbye(reason="super-peer shutting down")), self.limits),
            )
        with trio.move_on_after(1.0):
            await self._drain_peers()
        self._done.set()

    async def _drain_links(self) -> None:
        while any(link.receive.statistics().current_buffer_used for link in self.links.values()):
            await trio.sleep(0.01)

    async def _drain_peers(self) -> None:
        while any(s.send.statistics().current_buffer_used for s in self.peers.values()):
            await trio.sleep(0.01)

    async def _flush_traces(self) -> None:
        while True:
            await trio.sleep(1.0)
            if self.trace is not None:
                self.trace.flush_if_due(time.time())

    def _close_files(self) -> None:
        if self.trace is not None:
            self.trace.close()
        self.outbox.close()
        self.registry.close()

    # -- incoming connections -----------------------------------------------------------------
    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        remote = _remote_address(stream)
        try:
            async with stream:
                if self.identity is not None:
                    stream = await self._accept_tls(stream, remote)
                    if stream is None:
                        return
                await self._converse(
                    _Connection(stream, Link(accepting=True, limits=self.limits)), remote
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return

    async def _accept_tls(self, stream: trio.abc.Stream, remote: str) -> trio.SSLStream | None:
        assert self._server_context is not None
        secure = trio.SSLStream(stream, self._server_context, server_side=True)
        try:
            with trio.fail_after(self.config.limits.handshake_seconds):
                await secure.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError) as error:
            reason = f"TLS handshake failed: {_short(error)}"
            self._auth_failure(None, None, remote, "tls_handshake", reason)
            return None
        return secure

    async def _converse(self, connection: _Connection, remote: str) -> None:
        event = await connection.next()
        if event is None or not await self._check(connection, event, None, ""):
            return
        hello = event.message
        assert isinstance(hello, m.Hello)
        refusal = self._admit(hello, connection.stream, remote)
        if refusal is not None:
            await connection.send(m.LinkError(reason=refusal))
            return
        await connection.send(m.Welcome(node_id=self.node_id, address=self.address))
        if hello.role == "superpeer":
            while (event := await connection.next()) is not None:
                if not await self._check(connection, event, "superpeer", hello.node_id):
                    return
                self._from_superpeer(hello.node_id, event)
            return
        peer = hello.node_id
        if self.identity is not None:
            peer = await self._identify(connection, hello.node_id, remote)
            if peer is None:
                return
        session = await self._open_peer(peer, connection, remote)
        try:
            while (event := await connection.next()) is not None:
                if isinstance(event, Violation):
                    self._violation("peer", peer, event.reason)
                    self._enqueue_peer(session, event.reply)
                    return
                self._from_peer(peer, event)
        finally:
            self._close_peer(session)

    async def _check(
        self, connection: _Connection, event: Received | Violation, role: str | None, sender: str
    ) -> bool:
        """False (after answering with the error frame) for a protocol violation."""
        if isinstance(event, Violation):
            self._violation(role, sender, event.reason)
            with trio.move_on_after(1):
                await connection.send_raw(event.reply)
            return False
        return True

    def _violation(self, role: str | None, sender: str, reason: str) -> None:
        self.violations += 1
        log.warning("event=violation role=%s sender=%s reason=%r", role, sender, reason)
        self._trace_drop(sender, role, reason)

    async def _identify(self, connection: _Connection, claimed: str, remote: str) -> str | None:
        """Secure identification (``crypto.Verifier``) inside the TLS channel; the peer's public
        identifier, or None after a failure (traced, counted, answered, connection closed)."""
        assert self.identity is not None
        verifier = crypto.Verifier(
            node_id=self.node_id,
            fingerprint=self.identity.fingerprint,
            registry=self.registry,
            address=remote,
        )
        await connection.send(verifier.challenge(time.time()))
        deadline = verifier.get_timer()
        with trio.move_on_at(trio.current_time() + max(0.0, (deadline or 0) - time.time())):
            while (event := await connection.next()) is not None:
                if not await self._check(connection, event, "peer", claimed):
                    return None
                if (
                    isinstance(event.message, crypto.Register | crypto.Identify)
                    and event.message.public_id != claimed
                ):
                    # refused before the verifier sees it, so no record is made for a key that
                    # the Hello did not name
                    await connection.send(m.LinkError(reason="the Hello named another peer"))
                    self._auth_failure(
                        claimed,
                        "peer",
                        remote,
                        "identifier_mismatch",
                        "the Hello named another peer than the key",
                    )
                    return None
                for output in verifier.receive(event.message, time.time()):
                    if isinstance(output, crypto.Send):
                        await connection.send(output.message)
                    elif isinstance(output, crypto.AuthFailure):
                        self._auth_failure(
                            output.public_id or claimed, "peer", remote, output.code, output.reason
                        )
                        return None
                    elif isinstance(output, crypto.PeerAuthenticated):
                        public_id = output.record.public_id
                        log.info(
                            "event=peer_identified peer=%s registered=%s address=%s",
                            public_id,
                            output.registered,
                            remote,
                        )
                        return public_id
            if event is None:
                return None
        for output in verifier.handle_timer(time.time()):
            if isinstance(output, crypto.Send):
                with trio.move_on_after(1):
                    await connection.send(output.message)
            elif isinstance(output, crypto.AuthFailure):
                self._auth_failure(claimed, "peer", remote, output.code, output.reason)
        return None

    def _auth_failure(
        self, who: str | None, role: str | None, remote: str, code: str, reason: str
    ) -> None:
        self.auth_failures += 1
        log.warning(
            "event=auth_failure role=%s who=%s remote=%s code=%s reason=%r",
            role,
            who,
            remote,
            code,
            reason,
        )
        if self.trace is not None:
            self.trace.write(
                TraceRecord(
                    ts=time.time(),
                    node=self.node_id,
                    event="auth_failure",
                    kind=code,
                    peer=who if role == "peer" else None,
                    neighbour=who if role == "superpeer" else None,
                    msg=f"{remote}: {reason}"[:300],
                )
            )

    def _admit(self, hello: m.Hello, stream: trio.abc.Stream, remote: str) -> str | None:
        if hello.role not in ("peer", "superpeer"):
            return f"unknown role {hello.role!r} on this port"
        if not hello.node_id:
            return "a Hello must name its sender"
        if hello.role == "peer" and (self.core is None or self._stopping):
            return "this super-peer is not serving peers (joining or shutting down)"
        if hello.role == "superpeer" and self.identity is not None:
            certified = crypto.verified_peer_certificate_node_id(stream)  # type: ignore[arg-type]
            if certified != hello.node_id:
                reason = (
                    "a backbone member needs a certificate from this network's CA for its node id"
                    f" ({hello.node_id!r}); "
                    + ("none was presented" if certified is None else f"it names {certified!r}")
                )
                self._auth_failure(hello.node_id, "superpeer", remote, "certificate", reason)
                return reason
        return None

    # -- peers --------------------------------------------------------------------------------
    async def _open_peer(self, peer: str, connection: _Connection, remote: str) -> PeerSession:
        previous = self.peers.get(peer)
        if previous is not None:
            previous.scope.cancel()
        send, receive = trio.open_memory_channel[bytes](self.config.limits.max_peer_queue)
        scope = trio.CancelScope()
        session = PeerSession(peer, send, scope, time.time())
        self.peers[peer] = session
        assert self._nursery is not None
        self._nursery.start_soon(self._pump_peer, session, connection.stream, receive)
        log.info("event=peer_attached peer=%s", peer)
        assert self.core is not None
        self._execute(self.core.attach(peer, time.time(), remote))
        return session

    async def _pump_peer(
        self,
        session: PeerSession,
        stream: trio.abc.Stream,
        receive: trio.MemoryReceiveChannel[bytes],
    ) -> None:
        """Write the session's queue to the peer. When the session is cancelled (the peer
        reconnected elsewhere, overflowed its queue, or left), close the connection too, which
        ends the reading side in ``_converse``."""
        with session.scope:
            try:
                async for data in receive:
                    await stream.send_all(_with_waiting(data, receive))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await trio.aclose_forcefully(stream)

    def _close_peer(self, session: PeerSession) -> None:
        session.scope.cancel()
        if self.peers.get(session.peer) is session:
            del self.peers[session.peer]
            if self.core is not None and session.peer in self.core.peers:
                self._execute(self.core.detach(session.peer, time.time()))
            log.info("event=peer_detached peer=%s", session.peer)

    def _from_peer(self, peer: str, event: Received) -> None:
        assert self.core is not None
        if peer not in self.core.peers:
            return
        self._execute(
            self.core.peer_message(peer, event.message, event.size, time.time(), event.message_id)
        )
        if isinstance(event.message, m.Leave):
            self.registry.remove(peer)  # gone for good: its identity may register afresh
            session = self.peers.get(peer)
            if session is not None:
                session.scope.cancel()

    def _enqueue_peer(self, session: PeerSession, data: bytes) -> bool:
        try:
            session.send.send_nowait(data)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    # -- super-peers ----------------------------------------------------------------------------
    def _from_superpeer(self, sender: str, event: Received) -> None:
        message = event.message
        kind = type(message).KIND  # type: ignore[attr-defined]
        if kind.startswith("hypercup."):
            try:
                self._topology(self.topology.receive(sender, message))  # type: ignore[arg-type]
            except HypercupError as error:
                log.warning("event=topology_error sender=%s error=%r", sender, str(error))
        elif kind in BACKBONE and self.core is not None:
            self._execute(
                self.core.neighbour_message(
                    sender, message, event.size, time.time(), event.message_id
                )
            )
        elif isinstance(message, m.Goodbye):
            log.info("event=neighbour_goodbye neighbour=%s reason=%r", sender, message.reason)

    def _link(self, node_id: str, address: str | None = None) -> NeighbourLink:
        link = self.links.get(node_id)
        address = address or self.addresses.get(node_id)
        if link is None:
            if address is None:
                raise DaemonError(f"no address known for super-peer {node_id}")
            send, receive = trio.open_memory_channel[bytes](self.config.limits.max_neighbour_queue)
            link = NeighbourLink(node_id, address, send, receive)
            self.links[node_id] = link
            assert self._nursery is not None
            self._nursery.start_soon(self._run_link, link)
        elif address is not None and address != link.address:
            link.address = address
        return link

    def _send_backbone(self, node_id: str, data: bytes, address: str | None = None) -> None:
        link = self._link(node_id, address)
        with contextlib.suppress(trio.WouldBlock):
            link.send.send_nowait(frame(data, self.limits))
            return
        log.error(  # an error, not an exception: a full queue has no traceback worth reading
            "event=neighbour_backlog neighbour=%s queue=%d",
            node_id,
            self.config.limits.max_neighbour_queue,
        )
        self._neighbour_failed(node_id)

    async def _run_link(self, link: NeighbourLink) -> None:
        """Keep a connection to ``link``'s super-peer and write its queue to it, reconnecting
        with capped exponential backoff; after ``failure_seconds`` of failures, report it."""
        delay = 0.05
        pending: bytes | None = None
        with link.scope:
            while True:
                host, _, port = link.address.rpartition(":")
                try:
                    stream = await self._open_backbone(host, int(port), link.node_id)
                except OSError as error:
                    self._unreachable(link, str(error))
                    await trio.sleep(delay * (1 + self._random.random()))
                    delay = min(delay * 2, 2.0)
                    continue
                async with stream:
                    try:
                        handshake = Link(accepting=False, limits=self.limits)
                        await stream.send_all(handshake.send(self._hello()))
                        link.connected = True
                        link.unreachable_since = None
                        delay = 0.05
                        if pending is not None:
                            await stream.send_all(pending)
                            pending = None
                        async for data in link.receive:
                            pending = _with_waiting(data, link.receive)
                            await stream.send_all(pending)
                            pending = None
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                        link.connected = False
                        self._unreachable(link, str(error))
                return

    def _unreachable(self, link: NeighbourLink, reason: str) -> None:
        now = time.time()
        if link.unreachable_since is None:
            link.unreachable_since = now
            log.warning("event=neighbour_unreachable neighbour=%s reason=%r", link.node_id, reason)
        elif now - link.unreachable_since >= self.config.limits.failure_seconds:
            link.unreachable_since = now
            self._neighbour_failed(link.node_id)

    def _neighbour_failed(self, node_id: str) -> None:
        if self.topology.state != NodeState.MEMBER:
            return
        if node_id not in self.topology.view().neighbours():
            return
        log.error("event=neighbour_failed neighbour=%s", node_id)
        try:
            self._topology(self.topology.neighbour_failed(node_id))
        except HypercupError as error:
            log.warning("event=repair_deferred neighbour=%s reason=%r", node_id, str(error))

    # -- the cores' outputs ---------------------------------------------------------------------
    def _topology(self, outputs: list[TopologyOutput]) -> None:
        for output in outputs:
            if isinstance(output, Send):
                self._number += 1
                data = wire.encode(output.message, f"{self.node_id}#h{self._number}")
                self.addresses.setdefault(output.to, output.address)
                self._send_backbone(output.to, data, output.address)
            elif isinstance(output, TopologyChanged):
                self.addresses.update(output.addresses)
                if self.core is None:
                    self._start_core()
                else:
                    self._execute(self.core.topology_changed(output.view, time.time()))
                self._forget_strangers()
            elif isinstance(output, Joined):
                self._start_core()
                self._joined.set()
            elif isinstance(output, Left):
                log.info("event=left node=%s", self.node_id)
                self._left_cube()

    def _start_core(self) -> None:
        if self.core is None:
            self.core = SuperPeerCore(
                self.node_id,
                self.address,
                self.topology.view(),
                CoreConfig(
                    summarise_values_above=self.config.summarise_values_above,
                    tracing=self.trace is not None,
                    max_lookups_per_peer=self.config.limits.max_lookups_per_peer,
                ),
            )

    def _left_cube(self) -> None:
        """Out of the cube: during a shutdown, that finishes it; otherwise (the cube dissolved
        around us) there is nothing left to serve."""
        self._left.set()
        if not self._stopping:
            self._done.set()

    def _forget_strangers(self) -> None:
        """Close links to super-peers that are no longer neighbours (after their queue drained)."""
        if self.topology.state != NodeState.MEMBER:
            return
        keep = self.topology.view().neighbours()
        for node_id, link in list(self.links.items()):
            if node_id not in keep and not link.receive.statistics().current_buffer_used:
                link.send.close()
                del self.links[node_id]

    def _execute(self, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, ToNeighbour):
                self._send_backbone(output.neighbour, output.data)
            elif isinstance(output, ToPeer):
                self._to_peer(output)
            elif isinstance(output, ToOffline):
                self.outbox.put(output.peer, output.data)
            elif isinstance(output, FlushOffline):
                self._flush_offline(output.peer)
            elif isinstance(output, DiscardOffline):
                self.outbox.discard(output.peer)
            elif isinstance(output, TraceRecord) and self.trace is not None:
                self.trace.write(output)

    def _to_peer(self, output: ToPeer) -> None:
        session = self.peers.get(output.peer)
        data = frame(output.data, self.limits)
        if session is not None and self._enqueue_peer(session, data):
            if isinstance(output.message, m.Notify):
                self.handed[output.peer] += 1
            return
        if isinstance(output.message, m.Notify):
            self.outbox.put(output.peer, output.data)
            if session is not None:
                log.warning("event=peer_backlog peer=%s action=detached", output.peer)
                self._close_peer(session)

    def _flush_offline(self, peer: str) -> None:
        kept = self.outbox.take(peer)
        session = self.peers.get(peer)
        for number, data in enumerate(kept):
            if session is None or not self._enqueue_peer(session, frame(data, self.limits)):
                for rest in kept[number:]:
                    self.outbox.put(peer, rest)
                return
            self.flushed += 1
            self.handed[peer] += 1
            if self.trace is not None:
                notify, _ = wire.decode(data, self.limits)
                self.trace.write(flush_record(time.time(), self.node_id, notify, peer, len(data)))

    def _trace_drop(self, sender: str, role: str | None, reason: str) -> None:
        if self.trace is None:
            return
        self.trace.write(
            TraceRecord(
                ts=time.time(),
                node=self.node_id,
                event="drop",
                kind="link.error",
                peer=sender if role == "peer" else None,
                neighbour=sender if role == "superpeer" else None,
                msg=reason[:200],
            )
        )

    # -- control --------------------------------------------------------------------------------
    async def _serve_control(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        path = self.directory / "control.sock"
        path.unlink(missing_ok=True)
        listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(16)
        try:
            await trio.serve_listeners(
                self._serve_control_connection,
                [trio.SocketListener(listener)],
                task_status=task_status,
            )
        finally:
            path.unlink(missing_ok=True)

    async def _serve_control_connection(self, stream: trio.abc.Stream) -> None:
        link = Link(accepting=True, limits=self.limits)
        try:
            async with stream:
                while True:
                    data = await stream.receive_some(READ_SIZE)
                    if not data:
                        return
                    for event in link.receive_data(data):
                        if isinstance(event, Violation):
                            await stream.send_all(event.reply)
                            return
                        message = event.message
                        if isinstance(message, m.Hello):
                            if message.role != "control":
                                await stream.send_all(
                                    link.send(
                                        m.LinkError(
                                            reason="the control socket only takes role=control"
                                        )
                                    )
                                )
                                return
                            await stream.send_all(
                                link.send(m.Welcome(node_id=self.node_id, address=self.address))
                            )
                        elif isinstance(message, m.ControlRequest):
                            reply = await self._control(message)
                            await stream.send_all(link.send(reply))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return

    async def _control(self, request: m.ControlRequest) -> m.ControlReply:
        if request.command == "status":
            return m.ControlReply(ok=True, body=json.dumps(self.status(), sort_keys=True))
        if request.command == "stop":
            assert self._nursery is not None
            self._nursery.start_soon(self.shutdown)
            return m.ControlReply(ok=True, body=json.dumps({"stopping": True}))
        if request.command == "forget-peer":
            return self._forget_peer(request.arguments.get("peer", ""))
        return m.ControlReply(
            ok=False, body=f"unknown command {request.command!r} (status, stop, forget-peer)"
        )

    def _forget_peer(self, public_id: str) -> m.ControlReply:
        """The operator's way out of ``already_registered`` (a peer that lost its private
        identifier, or registered elsewhere and came back): drop the registration, keep the
        peer's subscriptions and kept notifications for when it registers again."""
        if public_id in self.peers:
            return m.ControlReply(ok=False, body=f"peer {public_id} is connected now")
        if not self.registry.remove(public_id):
            return m.ControlReply(ok=False, body=f"no peer {public_id} is registered here")
        log.info("event=peer_forgotten peer=%s", public_id)
        return m.ControlReply(ok=True, body=json.dumps({"forgotten": public_id}))

    def status(self) -> dict[str, object]:
        """What ``superpeer status`` shows."""
        report: dict[str, object] = {
            "node": self.node_id,
            "address": self.address,
            "state": self.topology.state.name.lower(),
            "topology_busy": self.topology.state == NodeState.MEMBER and self.topology.busy(),
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "violations": self.violations,
            "flushed": self.flushed,
            "handed": dict(self.handed),
            "auth_failures": self.auth_failures,
            "offline_kept": self.outbox.counts(),
            "links": {
                node_id: {
                    "address": link.address,
                    "connected": link.connected,
                    "queued": link.receive.statistics().current_buffer_used,
                }
                for node_id, link in sorted(self.links.items())
            },
        }
        if self.topology.state == NodeState.MEMBER:
            view = self.topology.view()
            report["positions"] = sorted(view.positions)
            report["dimension"] = view.dimension
            report["neighbours"] = {n: self.addresses.get(n) for n in sorted(view.neighbours())}
        core = self.core
        if core is not None:
            stats = core.statistics
            report["peers"] = {
                "attached": sorted(p for p, s in core.peers.items() if s.attached),
                "detached": sorted(p for p, s in core.peers.items() if not s.attached),
            }
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
            }
            report["messages"] = {
                "sent": dict(stats.sent),
                "received": dict(stats.received),
                "bytes_sent": dict(stats.bytes_sent),
                "delivered": stats.delivered,
                "stored_offline": stats.stored_offline,
                "refused": stats.refused,
                "dropped": stats.dropped,
            }
            report["backbone_in_flight"] = sum(
                link.receive.statistics().current_buffer_used for link in self.links.values()
            )
        return report
