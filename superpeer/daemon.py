"""The super-peer daemon: the trio runtime around ``SuperPeerNode``.

The runtime moves bytes and reads the clock; every decision is the node's. It

* listens on TCP. Each accepted connection is first *admitted* by the node (a per-address limit
  on connections that have not identified yet), runs TLS, and its first frame (``Hello``) says who
  calls: a peer (every later frame goes to the node, which runs the connection's
  ``AccessPointSession``), or another super-peer (its certificate must name the node id it claims;
  then its sequenced frames, ``superpeer.channel``, go to the node, and acknowledgements go back).
  The node closes a connection that does not identify within ``admission_seconds`` of being
  accepted, TLS included;
* keeps a link to every super-peer the node sends to (``superpeer._links``), re-opened after any
  break, with nothing lost or repeated across it;
* calls the node's ``timer`` at its ``next_deadline``; commits the store before it sends anything
  an input produced (what a message promises is on disk first), once for all the inputs that
  arrive together (``superpeer._commits``: group commit, one fsync per group), but for a
  notification from another origin (to an attached peer, or down its tree to a neighbour), which
  promises nothing this store keeps (``superpeer.actions.leaves_unsynced``);
* writes the trace log (rotating JSON-lines files in the data directory) and ``key=value`` lines
  on stderr (``daemonlog``);
* pauses while its data directory's disk is nearly full (``superpeer.diskspace``: no input
  applied, a peer's frame answered with the reason, ``/readyz`` at 503) and goes on by itself;
* counts what it sees for ``/metrics`` (``superpeer.metrics``: the trace records the node emits,
  the notifications it hands to peers) and, when configured, serves the operator's HTTP endpoint
  (``superpeer.http``: metrics, health, readiness, the status page);
* answers the control socket (``superpeer status``, ``peers``, ``subscriptions``, ``stop``,
  ``forget-peer``);
* shuts down cleanly (``shutdown``): the node hands its peers to a neighbour, withdraws its
  advertisement and leaves the cube; the daemon then flushes its links and exits.

One connection's error ends that connection only: malformed or oversized frames, unknown kinds,
broken TLS, a peer that vanishes: the connection's task ends, the node is told, the daemon goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import sqlite3
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import trio
from cryptography import x509

import crypto
import wire
from clocks import SteadyWallClock
from superpeer._commits import GroupCommit
from superpeer._groups import unwrapped
from superpeer._links import Links
from superpeer.actions import (
    CloseConnection,
    Forgotten,
    PauseReading,
    Stopped,
    ToConnection,
    ToSuperPeer,
    in_runtime_order,
    lane_of,
    leaves_unsynced,
)
from superpeer.channel import Inbound, split
from superpeer.config import SuperPeerConfig
from superpeer.diskspace import DiskGuard, NoRoom
from superpeer.http import Endpoints, readiness, serve_operator_endpoint
from superpeer.metrics import Metrics
from superpeer.node import SuperPeerNode
from superpeer.security import Identity, prepare_identity
from superpeer.store import SqliteStore
from superpeer.trace import TraceRecord
from superpeer.tracelog import TraceLog
from wire import messages as m
from wire.codec import WireError, WireLimits
from wire.framing import FrameDecoder, FrameError, Received, frame
from wire.streams import WideReads, receive

log = logging.getLogger("superpeer")
_BROKEN = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    OSError,
    ssl.SSLError,
)
"""What a connection that broke raises: it ends, the daemon goes on."""
CONTACT_ANSWER_SECONDS = 5.0
"""How long a join address has to say who it is (``_find_contacts``), and the pause between two
rounds of asking."""


class HandshakeRefused(OSError):
    """A TLS handshake with a super-peer failed on a certificate (not on a broken or silent
    connection): asking again would fail again."""


def _certificate_refused(error: BaseException) -> bool:
    """Whether a failed handshake was a refusal (a certificate or a protocol version one side
    does not accept), not a connection closed or reset under it."""
    cause = error if isinstance(error, ssl.SSLError) else error.__cause__
    closed = ssl.SSLEOFError | ssl.SSLSyscallError | ssl.SSLZeroReturnError
    return isinstance(error, crypto.CryptoError) or (
        isinstance(cause, ssl.SSLError) and not isinstance(cause, closed)
    )


def _unanswered(error: Exception) -> bool:
    """Whether ``error`` means nobody answered (yet): silence, or a connection refused, reset or
    unreachable, as while members restart or a cut lasts. A certificate refused is an answer."""
    return isinstance(error, trio.TooSlowError) or (
        isinstance(error, OSError) and not isinstance(error, HandshakeRefused | ssl.SSLError)
    )


async def unverified_certificate(host: str, port: int) -> x509.Certificate | None:
    """The certificate a TLS server at ``host:port`` presents, unverified (to say why it was
    refused: its validity against this host's clock); None if it cannot be had in 2 s."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with trio.move_on_after(2.0):
        try:
            stream = trio.SSLStream(await trio.open_tcp_stream(host, port), context)
            async with stream:
                await stream.do_handshake()
                der = stream.getpeercert(binary_form=True)
            return x509.load_der_x509_certificate(der) if der else None
        except (OSError, trio.BrokenResourceError, ssl.SSLError, ValueError):
            return None
    return None


class DaemonError(RuntimeError):
    """The daemon cannot start or go on (bad data directory, no contact to join through, ...)."""


@dataclass
class _PeerConnection:
    send: trio.MemorySendChannel[bytes]
    receive: trio.MemoryReceiveChannel[bytes]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    closing: bool = False
    """The node ended the connection: nothing more is read; what is queued (and what the node
    produced before the close, still held for the group's commit) is written, then it closes."""
    closed: bool = False
    """The close was carried out (the queue is closed)."""
    writing: bool = False
    """The writer runs (after TLS); before, nothing could be written and a close ends it at once."""
    paused_until: float = 0.0
    """Trio time before which nothing more is read (``PauseReading``: the peer is over its
    publication rate)."""


class _Acknowledger:
    """Writes the ``ChannelAck`` s of one backbone connection this daemon accepted, when the
    ``Inbound`` says they are due (``superpeer.channel``: at once after a read that left
    ``ack_every`` frames waiting, else ``ack_delay_seconds`` after the first that waits, which
    ``run`` sleeps until). Every write on the connection goes through ``send`` (trio allows one
    at a time)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        inbound: Inbound,
        sender: str,
        incarnation: int,
        *,
        limits: WireLimits,
    ) -> None:
        self.stream = stream
        self.sender = sender
        self.incarnation = incarnation
        self._inbound = inbound
        self._limits = limits
        self._writing = trio.Lock()
        self._read = trio.Event()

    async def send(self, data: bytes) -> None:
        async with self._writing:
            await self.stream.send_all(data)

    async def acknowledge(self) -> None:
        """Sends the acknowledgement due now, if any."""
        ack = self._inbound.ack_due(self.sender, self.incarnation, trio.current_time())
        if ack is not None:
            await self.send(frame(wire.encode(m.ChannelAck(received=ack)), self._limits))

    async def after_read(self) -> None:
        """The reader accepted a read's frames: what is due now is sent, the rest when due."""
        await self.acknowledge()
        self._read.set()

    async def run(self) -> None:
        while True:
            deadline = self._inbound.ack_deadline(self.sender, self.incarnation)
            if deadline is None:
                await self._read.wait()
                self._read = trio.Event()
                continue
            await trio.sleep_until(deadline)
            await self.acknowledge()


def _remote_address(stream: trio.abc.Stream) -> str:
    sock = getattr(stream, "socket", None)
    if sock is None:
        return "unknown:0"
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "unknown:0"
    return f"{host}:{port}"


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

    def __init__(
        self,
        config: SuperPeerConfig,
        *,
        clock: Callable[[], float] | None = None,
        suppressed_logs: Callable[[], int] = lambda: 0,
    ) -> None:
        self.config = config
        self.directory = config.directory
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DaemonError(
                f"cannot use the data directory {self.directory}: {error.strerror}"
            ) from None
        self.disk = DiskGuard(
            self.directory,
            min_free_bytes=config.store.min_free_bytes,
            resume_free_bytes=config.store.resume_free_bytes,
        )
        if self.disk.check():
            raise NoRoom(f"not starting: {self.disk.paused}")
        self.node_id = node_id_for(self.directory, config.node_id)
        self.address = config.address
        self.clock = clock if clock is not None else SteadyWallClock()
        """The node's time (``clocks``, rule 11): the wall time, but never stepped."""
        self.identity: Identity | None = None
        self._server_context: ssl.SSLContext | None = None
        self._client_context: ssl.SSLContext | None = None
        if config.security.tls:
            self.identity = prepare_identity(
                self.directory, self.node_id, config.security, config.host
            )
            self._server_context = self.identity.server_context()
            self._client_context = self.identity.client_context()
        self.limits = config.wire_limits()
        opened = time.monotonic()
        self.store = SqliteStore(
            self.directory / "state.sqlite",
            sync=config.store.sync,
            max_log_bytes=config.store.log_bound,
            fold_bytes=config.store.fold_bytes,
            cache_bytes=config.store.cache_bytes,
        )
        if self.store.replayed:  # the commits a crash left in the redo journal only
            log.info(
                "event=store_replayed node=%s statements=%d", self.node_id, self.store.replayed
            )
        if self.store.rebuilt:  # an earlier version's store, once
            log.info(
                "event=store_rebuilt node=%s tables=%s seconds=%.1f",
                self.node_id,
                ",".join(self.store.rebuilt),
                time.monotonic() - opened,
            )
        self.disk.reclaim = self.store.reclaim
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
        self.metrics = (
            Metrics(self.status, suppressed_logs=suppressed_logs)
            if config.http.enabled and config.http.metrics
            else None
        )
        self.http_address: str | None = None
        """``http://HOST:PORT`` of the operator's endpoint, once it listens."""
        self.node = SuperPeerNode(
            self.node_id,
            self.address,
            self.store,
            config.node_config(tracing=self.trace is not None or self.metrics is not None),
            fingerprint=self.identity.fingerprint if self.identity is not None else None,
        )
        self.started_at = self.clock()
        self.read_turns = 0
        """Times the rest of a peer's read waited, for the other connections or for the peer's
        rate (``_peer_frames``; ``status``: ``read_turns``)."""
        self._inbound = Inbound(ack_delay=self.config.limits.ack_delay_seconds)
        self._commits = GroupCommit(
            self.store,
            self._carry_out,
            max_inputs=config.store.max_inputs_per_commit,
            inline_sync_seconds=config.store.inline_sync_seconds,
            committed=self._committed,
            unsynced=lambda output: leaves_unsynced(output, self.node_id),
            lane=lane_of,
        )
        self._peers: dict[int, _PeerConnection] = {}
        self._links: Links | None = None
        self._nursery: trio.Nursery | None = None
        self._wake = trio.Event()
        self._armed = math.inf
        """The deadline the timer task waits for (``_timers``)."""
        self._done = trio.Event()
        self._stopping = False

    # -- running ------------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, join (or create) the backbone, report the address once a member, run until
        ``shutdown`` finishes."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._links = Links(
                    nursery,
                    limits=self.limits,
                    max_unacknowledged=self.config.limits.max_neighbour_queue,
                    hello=self._hello,
                    open_stream=self._open_backbone,
                    heard=lambda node: self.node.superpeer_heard(node, self.clock()),
                    welcomed=lambda node, incarnation: self._run(
                        lambda now: self.node.superpeer_welcomed(node, incarnation, now)
                    ),
                    overflow=lambda node: self._run(
                        lambda now: self.node.superpeer_unreachable(node, now)
                    ),
                    handshake_seconds=self.config.limits.admission_seconds,
                )
                listeners = await trio.open_tcp_listeners(self.config.port, host=self.config.host)
                nursery.start_soon(trio.serve_listeners, self._serve_connection, listeners)
                await nursery.start(self._serve_control)
                if self.config.http.enabled:
                    await self._serve_http(nursery)
                nursery.start_soon(self._flush_traces)
                nursery.start_soon(self._commits.run)
                nursery.start_soon(self._timers)
                nursery.start_soon(self._watch_disk)
                contacts = await self._find_contacts()
                self._run(lambda now: self.node.start(now, contacts))
                await self._wait_member()
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

    async def _serve_http(self, nursery: trio.Nursery) -> None:
        endpoints = Endpoints(
            snapshot=self.operator_status,
            readiness=lambda: readiness(self.status(), stopping=self._stopping),
            registry=self.metrics.registry() if self.metrics is not None else None,
        )
        binds = await nursery.start(serve_operator_endpoint, self.config.http, endpoints)
        self.http_address = binds[0]
        log.info("event=http node=%s address=%s", self.node_id, self.http_address)

    async def _wait_member(self) -> None:
        """Until the node is a member. A join may be refused for as long as the cube repairs
        this node's previous incarnation (killed and restarted while a partition or another
        failure holds the repair up): the node asks again every ``rejoin_seconds``, and the
        daemon says every ``max(60, 6 x failure_seconds)`` that it still waits and why, rather
        than exit, which would leave its peers' mail unserved until someone started it again
        (members that never answer at all are an error once ``join_contact_seconds`` have passed:
        ``_find_contacts``)."""
        every = max(60.0, self.config.limits.failure_seconds * 6)
        started = trio.current_time()
        warn_at = started + every
        while self.node.core is None:
            await trio.sleep(0.02)
            if trio.current_time() >= warn_at:
                log.warning(
                    "event=not_member_yet node=%s seconds=%.0f waiting=%r",
                    self.node_id,
                    trio.current_time() - started,
                    self.node.waiting_for(),
                )
                warn_at += every

    async def _find_contacts(self) -> list[tuple[str, str]]:
        """The node id behind every configured member address that answers (asked concurrently,
        in the configured order). While none answers at all (every one silent or unreachable: a
        cube busy repairing, a cut, members restarting), they are asked again for
        ``join_contact_seconds``, with a warning each round: a super-peer started in a storm
        joins when it passes rather than exit. A refusal (a certificate from another CA, a TLS
        or protocol error) ends it at once: asking again would not change it."""
        if not self.config.join:
            return []
        deadline = trio.current_time() + self.config.limits.join_contact_seconds
        while True:
            contacts, problems = await self._ask_contacts()
            if contacts:
                return contacts
            refused = [text for text, error in problems if not _unanswered(error)]
            reasons = "; ".join(text for text, _ in problems)
            if refused or not problems or trio.current_time() >= deadline:
                raise DaemonError(f"cannot join: no member answered ({reasons})")
            log.warning("event=join_contacts_unanswered node=%s problems=%r", self.node_id, reasons)
            await trio.sleep(min(CONTACT_ANSWER_SECONDS, max(0.0, deadline - trio.current_time())))

    async def _ask_contacts(self) -> tuple[list[tuple[str, str]], list[tuple[str, Exception]]]:
        """One round of ``_find_contacts``: the members that answered, and what the others did."""
        found: list[tuple[str, str] | None] = [None] * len(self.config.join)
        problems: list[tuple[str, Exception]] = []

        async def ask(index: int, host: str, port: int) -> None:
            try:
                with trio.fail_after(CONTACT_ANSWER_SECONDS):
                    found[index] = (await self._ask_id(host, port), f"{host}:{port}")
            except trio.TooSlowError as error:
                problems.append(
                    (f"{host}:{port}: no answer in {CONTACT_ANSWER_SECONDS:g} s", error)
                )
            except (OSError, DaemonError, FrameError, WireError, crypto.CryptoError) as error:
                problems.append((f"{host}:{port}: {error}", error))

        async with trio.open_nursery() as nursery:
            for index, (host, port) in enumerate(self.config.join):
                nursery.start_soon(ask, index, host, port)
        contacts = [c for c in found if c is not None and c[0] != self.node_id]
        return contacts, problems

    async def _ask_id(self, host: str, port: int) -> str:
        stream = await self._open_backbone(None, f"{host}:{port}")
        async with stream:
            decoder = FrameDecoder(self.limits)
            probe = m.Hello(
                role="superpeer", node_id=self.node_id, address="", protocol=wire.PROTOCOL_VERSION
            )
            await stream.send_all(frame(wire.encode(probe), self.limits))
            while True:
                data = await receive(stream)
                if not data:
                    raise DaemonError("closed before welcoming")
                for payload in decoder.feed(data):
                    message, _ = wire.decode(payload, self.limits)
                    if isinstance(message, m.LinkError):
                        raise DaemonError(message.reason)
                    if isinstance(message, m.Welcome):
                        if self._client_context is not None:
                            crypto.check_peer_node_id(stream, message.node_id)  # type: ignore[arg-type]
                        return message.node_id

    def _hello(self) -> m.Hello:
        return m.Hello(
            role="superpeer",
            node_id=self.node_id,
            address=self.address,
            protocol=wire.PROTOCOL_VERSION,
            incarnation=self.node.incarnation,
        )

    async def _open_backbone(self, expected: str | None, address: str) -> trio.abc.Stream:
        """A connection to a super-peer: TLS with our certificate, the other end's certificate
        verified against the network CA and (when known) checked for ``expected``'s node id."""
        host, _, port = address.rpartition(":")
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, int(port))
        if self._client_context is None:
            return stream
        secure = trio.SSLStream(WideReads(stream), self._client_context, server_hostname=host)
        try:
            with trio.fail_after(self.config.limits.admission_seconds):
                await secure.do_handshake()
            if expected is not None:
                crypto.check_peer_node_id(secure, expected)  # type: ignore[arg-type]
        except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError,
                crypto.CryptoError) as error:  # fmt: skip
            await trio.aclose_forcefully(stream)
            why = await self._handshake_failure(error, expected, host, int(port))
            reason = f"TLS to {address} failed: {why}"
            self._trace_event("auth_failure", "tls_client", neighbour=expected, msg=reason)
            log.warning("event=tls_failed to=%s reason=%r", address, why)
            if _certificate_refused(error):
                raise HandshakeRefused(reason) from None
            raise OSError(reason) from None
        return secure

    async def _handshake_failure(
        self, error: BaseException, node: str | None, host: str | None, port: int = 0
    ) -> str:
        """Why a handshake with ``node`` (at ``host``, when this side dialled) failed, with
        what the clocks say when a certificate's validity was the reason (``clocks``, 10)."""
        if isinstance(error, crypto.CryptoError | trio.TooSlowError):
            return str(error) or "no answer in time"
        remote = None
        if host is not None and isinstance(error.__cause__, ssl.SSLCertVerificationError):
            remote = await unverified_certificate(host, port)
        own = None
        if self.identity is not None:
            own = crypto.load_certificate(self.identity.certificate)
        measured = self.node.offsets.get(node) if node is not None else None
        return crypto.handshake_failure(
            error,
            now=self.clock(),
            own=own,
            remote=remote,
            offset=measured.offset if measured is not None else None,
        )

    async def shutdown(self) -> None:
        """Leave cleanly: the node hands its peers over, withdraws and leaves the cube; then
        everything queued is flushed. Safe to call more than once."""
        if self._stopping:
            return
        self._stopping = True
        log.info("event=stopping node=%s", self.node_id)
        self._run(self.node.leave)
        limits = self.config.limits
        # heard from nobody, the node waits up to ``reform_seconds`` for a successor first
        with trio.move_on_after(max(10.0, limits.failure_seconds) + limits.reform_seconds):
            while not self.node.stopped:
                await trio.sleep(0.02)
        self._commits.flush()
        # the hand-over (the peers' mail, the log) is the last copy of what it holds: it waits
        # for the acknowledgements as long as a neighbour is given to answer
        with trio.move_on_after(limits.failure_seconds):
            while self._links is not None and self._links.in_flight():
                await trio.sleep(0.01)
        waiting = self._links.waiting() if self._links is not None else {}
        if waiting:
            # what the adopter did not acknowledge is what its peers may miss until the origins'
            # logs replay it (a move's catch-up); other links carry copies and heartbeats
            log.error(
                "event=left_unacknowledged node=%s adopter=%s frames=%s",
                self.node_id,
                self.node.adopter,
                ",".join(f"{node}:{count}" for node, count in sorted(waiting.items())),
            )
        with trio.move_on_after(1.0):
            while any(c.send.statistics().current_buffer_used for c in self._peers.values()):
                await trio.sleep(0.01)
        self._done.set()

    async def _flush_traces(self) -> None:
        while True:
            await trio.sleep(1.0)
            if self.trace is not None:
                self.trace.flush_if_due(self.clock())

    def _close_files(self) -> None:
        if self.trace is not None:
            self.trace.close()
        try:
            self.store.close()
        except sqlite3.Error as error:  # a commit failed (a full disk): no transaction to end
            # what was committed before stays; the error that stopped the daemon is reported
            log.warning("event=store_not_closed node=%s error=%r", self.node_id, str(error))

    async def _timers(self) -> None:
        """Calls the node's timer at its next deadline, looked at again after each group commit
        (an input may have brought it forward; the group's outputs, a timer's included, leave
        after that commit anyway). Not after each input: under a stream of notifications that
        was one deadline computation, cancel scope and wake-up per message. A node placing a
        burst of subscriptions (``superpeer._backlog``) is due at once after each slice: the
        ``trio.sleep(0)`` after each call lets every other task run (reads, acknowledgements,
        the links' writers with the heartbeats) before the next slice."""
        while True:
            deadline = self.node.next_deadline()
            self._armed = math.inf if deadline is None else deadline
            self._wake = trio.Event()
            if deadline is None:
                await self._wake.wait()
                continue
            wait = deadline - self.clock()
            if wait > 0:
                with trio.move_on_after(wait):
                    await self._wake.wait()
                continue
            await self.disk.wait_room()
            self._run(self.node.timer)
            await trio.sleep(0)

    def _committed(self) -> None:
        """A group was committed: if the node's next deadline is now earlier than the one the
        timer task waits for, it is woken (its event is renewed each time it waits: set the
        current one); else it sleeps on (a later one it finds when it wakes: at a paced 1,000
        publications/s, a wake-up per group cost more than the deadline). And the free space is
        looked at (what the group wrote may have taken the reserve)."""
        deadline = self.node.next_deadline()
        if deadline is not None and deadline < self._armed:
            self._wake.set()
        if self.disk.check():
            self._disk_changed()

    async def _watch_disk(self) -> None:
        """The free space, between commits too (another process may fill the disk; a paused
        daemon waits for room)."""
        while True:
            await trio.sleep(self.config.store.disk_check_seconds)
            if self.disk.check():
                self._disk_changed()

    def _disk_changed(self) -> None:
        reason = self.disk.paused
        if reason is not None:
            log.error("event=disk_full node=%s action=paused reason=%r", self.node_id, reason)
            return
        free = self.disk.space.free if self.disk.space is not None else None
        log.warning("event=disk_space_back node=%s action=resumed free=%s", self.node_id, free)
        self._wake.set()

    def _refuse_paused(self, connection_id: int) -> None:
        """A peer's frame while paused (``superpeer.diskspace``) is not applied: the peer hears
        why, and its connection closes (it may ask again, here later or elsewhere)."""
        connection = self._peers.get(connection_id)
        if connection is None or connection.closed:
            return
        refusal = frame(wire.encode(m.LinkError(reason=str(self.disk.paused))), self.limits)
        with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
            connection.send.send_nowait(refusal)
        connection.closing = connection.closed = True
        connection.send.close()  # the writer sends the refusal, then closes the connection

    # -- the node's inputs and outputs --------------------------------------------------------
    def _run(self, call: Callable[[float], list]) -> None:
        """One input to the node. Its outputs are held until the group's commit
        (``superpeer._commits``): no byte the input produced leaves before it is on disk. A
        connection the node ends is read no further from now on, as when outputs left at once."""
        now = self.clock()
        outputs = call(now)
        for output in outputs:
            if isinstance(output, CloseConnection):
                connection = self._peers.get(output.connection)
                if connection is not None:
                    connection.closing = True
            elif isinstance(output, PauseReading):
                # at once, not after the commit: the next read waits (``_peer_frames``)
                connection = self._peers.get(output.connection)
                if connection is not None:
                    connection.paused_until = max(
                        connection.paused_until, trio.current_time() + output.seconds
                    )
        self._commits.add(now, outputs)

    def _carry_out(self, now: float, outputs: list) -> None:
        """The outputs of one input applied at ``now``, once committed."""
        for output in in_runtime_order(outputs):
            if isinstance(output, ToSuperPeer):
                assert self._links is not None
                try:
                    self._links.send(
                        output.node, output.address, output.data, output.incarnation, output.clock
                    )
                except FrameError as error:
                    self._too_large(output.message, output.node, error)
            elif isinstance(output, ToConnection):
                if self.metrics is not None:
                    # latency in hybrid time, as ``published_at`` is (``clocks``)
                    self.metrics.to_peer(output.message, self.node.clock.read(now))
                try:
                    self._to_connection(output.connection, output.data)
                except FrameError as error:
                    self._too_large(output.message, f"connection {output.connection}", error)
            elif isinstance(output, CloseConnection):
                connection = self._peers.get(output.connection)
                if connection is not None and not connection.closed:
                    connection.closed = True
                    connection.send.close()
                    if not connection.writing:  # in the TLS handshake (the admission deadline)
                        connection.scope.cancel()
            elif isinstance(output, Forgotten):
                assert self._links is not None
                self._links.forget(output.node, drain=output.drain)
            elif isinstance(output, Stopped):
                log.info("event=stopped node=%s reason=%r", self.node_id, output.reason)
                if not self._stopping:
                    self._done.set()
            elif isinstance(output, TraceRecord):
                self._record(output)

    def _too_large(self, message: object, to: str, error: FrameError) -> None:
        """A message the node made that no frame can carry is a bug in the node (it splits
        what can grow: ``Mail``, ``CatchUp``); it is dropped, loudly, and the daemon goes on,
        where it used to die with it."""
        kind = getattr(message, "KIND", type(message).__name__)
        log.error(
            "event=message_too_large node=%s to=%r kind=%s error=%r",
            self.node_id,
            to,
            kind,
            str(error),
        )

    def _record(self, record: TraceRecord) -> None:
        if self.trace is not None:
            self.trace.write(record)
        if self.metrics is not None:
            self.metrics.record(record)

    def _to_connection(self, connection_id: int, data: bytes) -> None:
        connection = self._peers.get(connection_id)
        if connection is None:
            return
        try:
            connection.send.send_nowait(frame(data, self.limits))
        except trio.WouldBlock:
            log.warning("event=peer_queue_full connection=%d action=closed", connection_id)
            connection.scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return

    def _trace_event(self, event: str, kind: str, **fields: str | None) -> None:
        if self.trace is not None or self.metrics is not None:
            self._record(
                TraceRecord(ts=self.clock(), node=self.node_id, event=event, kind=kind, **fields)  # type: ignore[arg-type]
            )

    # -- incoming connections -----------------------------------------------------------------
    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        remote = _remote_address(stream)
        connection_id = self.node.accept(remote, self.clock())
        if connection_id is None:
            await trio.aclose_forcefully(stream)
            return
        self._wake.set()  # its admission deadline may be the node's next one
        send, receive = trio.open_memory_channel[bytes](self.config.limits.max_peer_queue)
        connection = _PeerConnection(send, receive)
        self._peers[connection_id] = connection
        try:
            with connection.scope, unwrapped(*_BROKEN):
                async with stream:
                    await self._converse(connection_id, connection, stream, remote)
        except _BROKEN:
            pass
        except Exception:  # one connection's bug must not end the daemon
            log.exception("event=connection_error remote=%s", remote)
        finally:
            self._peers.pop(connection_id, None)
            self._run(lambda now: self.node.connection_closed(connection_id, now))

    async def _converse(
        self,
        connection_id: int,
        connection: _PeerConnection,
        stream: trio.abc.Stream,
        remote: str,
    ) -> None:
        if self._server_context is not None:
            secure = trio.SSLStream(WideReads(stream), self._server_context, server_side=True)
            try:
                await secure.do_handshake()
            except (trio.BrokenResourceError, ssl.SSLError) as error:
                self.node.statistics.auth_failures += 1
                why = await self._handshake_failure(error, None, None)
                self._trace_event(
                    "auth_failure", "tls_handshake", msg=f"{remote}: TLS handshake failed: {why}"
                )
                if "this host's certificate" in why:
                    log.warning("event=tls_failed from=%s reason=%r", remote, why)
                return
            stream = secure
        decoder = FrameDecoder(self.limits)
        async with trio.open_nursery() as nursery:
            connection.writing = True
            nursery.start_soon(self._write_peer, stream, connection, nursery.cancel_scope)
            payloads = await self._first_frames(stream, decoder, connection_id)
            if not payloads:
                if not connection.closing:
                    nursery.cancel_scope.cancel()
                return
            try:
                hello, _ = wire.decode(payloads[0], self.limits)
            except WireError as error:
                self._violation(connection_id, str(error))
                return
            if isinstance(hello, m.Hello) and hello.role == "superpeer":
                self.node.is_superpeer_connection(connection_id)
                await self._backbone(stream, decoder, hello, remote, payloads[1:])
                nursery.cancel_scope.cancel()
                return
            await self._peer_frames(stream, decoder, connection_id, payloads)
            if not connection.closing:
                nursery.cancel_scope.cancel()  # the peer went away
            # else the writer ends the connection, after the frames queued before the close

    async def _first_frames(
        self, stream: trio.abc.Stream, decoder: FrameDecoder, connection_id: int
    ) -> list[bytes]:
        """The frames of the first read that completes one (the first says who is calling)."""
        while True:
            data = await receive(stream)
            if not data:
                return []
            try:
                payloads = decoder.feed(data)
            except FrameError as error:
                self._violation(connection_id, str(error))
                return []
            if payloads:
                return payloads

    def _violation(self, connection_id: int, reason: str) -> None:
        self._run(lambda now: self.node.peer_violation(connection_id, reason, now))

    async def _peer_frames(
        self,
        stream: trio.abc.Stream,
        decoder: FrameDecoder,
        connection_id: int,
        first: list[bytes],
    ) -> None:
        """Feed the node every message the peer sends, until it closes, breaks a rule or the
        node ends the connection."""
        for payload in first:
            if not self._peer_payload(connection_id, payload):
                return
        connection = self._peers[connection_id]
        slice_seconds = self.config.limits.read_slice_seconds
        while True:
            data = await receive(stream)
            if not data:
                return
            try:
                payloads = decoder.feed(data)
            except FrameError as error:
                self._violation(connection_id, str(error))
                return
            # a peer over its rate (``PauseReading``) waits for it before each message, not only
            # before its next read: one read of a peer that sends as fast as it can holds up to
            # 64 KiB (``wire.streams.READ_BYTES``: some 45 publications), and applied in one go
            # they held every other connection for 20 to 40 ms (BENCHMARKS.md, issue 37, stop
            # 79). Within its rate, a read takes turns with the other connections once it has
            # run ``read_slice_seconds``. (The test comes first: a past deadline still costs a
            # pass through trio's deadlines and a Cancelled, not to be paid on every message.)
            turn = trio.current_time()
            for payload in payloads:
                now = trio.current_time()
                if connection.paused_until > now or now - turn >= slice_seconds:
                    self.read_turns += 1
                    await trio.sleep_until(connection.paused_until)  # (or a pass: past)
                    if connection.closing:
                        return  # ended meanwhile (by another input): read no further
                    turn = trio.current_time()
                if not self._peer_payload(connection_id, payload):
                    return

    def _peer_payload(self, connection_id: int, payload: bytes) -> bool:
        if self.disk.paused is not None:
            self._refuse_paused(connection_id)
            return False
        try:
            message, message_id = wire.decode(payload, self.limits)
        except WireError as error:
            self._violation(connection_id, str(error))
            return False
        self._run(
            lambda now: self.node.peer_message(
                connection_id, message, len(payload), message_id, now
            )
        )
        connection = self._peers.get(connection_id)
        return connection is not None and not connection.closing

    async def _write_peer(
        self, stream: trio.abc.Stream, connection: _PeerConnection, scope: trio.CancelScope
    ) -> None:
        """Write what the node queued for the connection, many frames per write; when the node
        ends the connection (the channel closes), everything queued before is written first."""
        async for data in connection.receive:
            batch = [data]
            while True:
                try:
                    batch.append(connection.receive.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            await stream.send_all(b"".join(batch))
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await trio.aclose_forcefully(stream)
        scope.cancel()

    # -- super-peers ----------------------------------------------------------------------------
    async def _backbone(
        self,
        stream: trio.abc.Stream,
        decoder: FrameDecoder,
        hello: m.Hello,
        remote: str,
        first: list[bytes],
    ) -> None:
        refusal = self._check_superpeer(stream, hello, remote)
        if refusal is not None:
            await stream.send_all(frame(wire.encode(m.LinkError(reason=refusal)), self.limits))
            return
        sender, incarnation = hello.node_id, hello.incarnation
        if hello.address and not self.node.started:
            # before ``start`` this process has no incarnation: what it answered would come
            # from incarnation 0, which the members drop as replaced (a handover asked of a
            # restarting node went back and forth 7,000 times); the sender tries again
            refusal = "the super-peer is starting: no backbone links yet"
            await stream.send_all(frame(wire.encode(m.LinkError(reason=refusal)), self.limits))
            return
        resume = self._inbound.resume(sender, incarnation)
        welcome = m.Welcome(
            node_id=self.node_id,
            address=self.address,
            incarnation=self.node.incarnation,
            resume=resume,
        )
        await stream.send_all(frame(wire.encode(welcome), self.limits))
        if not hello.address:
            return  # a probe asking who we are (``_find_contacts``)
        await self.disk.wait_room()
        self._run(lambda now: self.node.superpeer_hello(sender, incarnation, hello.address, now))
        acks = _Acknowledger(
            stream,
            self._inbound,
            sender,
            incarnation,
            limits=self.limits,
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acks.run)
            try:
                await self._backbone_frames(decoder, first, acks)
            finally:
                nursery.cancel_scope.cancel()

    async def _backbone_frames(
        self, decoder: FrameDecoder, payloads: list[bytes], acks: _Acknowledger
    ) -> None:
        """Reads a welcomed link's frames (``payloads`` read already) and hands them to the
        node, until the link ends."""
        stream, sender, incarnation = acks.stream, acks.sender, acks.incarnation
        welcomed_as = self.node.incarnation
        while True:
            if self.disk.paused is not None:  # unread and unacknowledged: the sender keeps it
                await self.disk.wait_room()
            read_at = trio.current_time()  # the frames of a read came together
            for payload in payloads:
                if self.node.incarnation != welcomed_as:
                    # this node rejoined since its old incarnation welcomed the link: what
                    # comes on it was meant for that one (a pause's frames, read after the
                    # rejoin, gave a newcomer the table of the member it had been). Closed
                    # unread, the sender connects again, is welcomed by this incarnation, and
                    # its channel drops what was meant for the old one
                    log.info(
                        "event=link_closed node=%s neighbour=%s reason=rejoined",
                        self.node_id,
                        sender,
                    )
                    return
                try:
                    number, clock, body = split(payload)
                    message, message_id = wire.decode(body, self.limits)
                except (FrameError, WireError) as error:
                    await self._refuse_frame(acks.send, sender, str(error))
                    return
                if not self._inbound.accept(sender, incarnation, number, read_at):
                    continue
                received = Received(message, message_id, len(body), clock)
                self._run(
                    lambda now, r=received: self.node.superpeer_message(sender, incarnation, r, now)
                )
            # a ChannelAck (and a Welcome's ``resume``) does not wait for the group's commit:
            # it promises only that this process has the frame, and a restart is a new
            # incarnation, for which the sender drops what it kept, acknowledged or not
            # (``superpeer.channel``); what the node promises goes out as its outputs
            await acks.after_read()
            data = await receive(stream)
            if not data:
                return
            self.node.superpeer_heard(sender, self.clock())
            try:
                payloads = decoder.feed(data)
            except FrameError as error:
                await self._refuse_frame(acks.send, sender, str(error))
                return

    def _check_superpeer(self, stream: trio.abc.Stream, hello: m.Hello, remote: str) -> str | None:
        if not hello.node_id:
            return "a Hello must name its sender"
        if hello.protocol != wire.PROTOCOL_VERSION:
            return (
                f"this super-peer speaks protocol {wire.PROTOCOL_VERSION}, {hello.node_id} "
                f"{hello.protocol}: run the same version of the software on both"
            )
        if self.identity is None:
            return None
        certified = crypto.verified_peer_certificate_node_id(stream)  # type: ignore[arg-type]
        if certified == hello.node_id:
            return None
        reason = (
            "a backbone member needs a certificate from this network's CA for its node id"
            f" ({hello.node_id!r}); "
            + ("none was presented" if certified is None else f"it names {certified!r}")
        )
        self.node.statistics.auth_failures += 1
        log.warning(
            "event=auth_failure role=superpeer who=%s remote=%s reason=%r",
            hello.node_id,
            remote,
            reason,
        )
        self._trace_event(
            "auth_failure", "certificate", neighbour=hello.node_id, msg=f"{remote}: {reason}"[:300]
        )
        return reason

    async def _refuse_frame(
        self, send: Callable[[bytes], Awaitable[None]], sender: str, reason: str
    ) -> None:
        self.node.statistics.violations += 1
        log.warning("event=violation role=superpeer sender=%s reason=%r", sender, reason)
        self._trace_event("drop", "link.error", neighbour=sender, reason=reason[:200])
        with trio.move_on_after(1):
            await send(frame(wire.encode(m.LinkError(reason=reason)), self.limits))

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
        decoder = FrameDecoder(self.limits)
        try:
            async with stream:
                while True:
                    data = await receive(stream)
                    if not data:
                        return
                    for payload in decoder.feed(data):
                        message, _ = wire.decode(payload, self.limits)
                        if isinstance(message, m.Hello):
                            if message.role != "control":
                                reply: object = m.LinkError(
                                    reason="the control socket only takes role=control"
                                )
                                await stream.send_all(frame(wire.encode(reply), self.limits))
                                return
                            reply = m.Welcome(node_id=self.node_id, address=self.address)
                        elif isinstance(message, m.ControlRequest):
                            reply = self._control(message)
                        else:
                            return
                        await stream.send_all(frame(wire.encode(reply), self.limits))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, FrameError,
                WireError):  # fmt: skip
            return

    def _control(self, request: m.ControlRequest) -> m.ControlReply:
        command, arguments = request.command, request.arguments
        if command == "status":
            return _reply(self.status())
        if command == "stop":
            assert self._nursery is not None
            self._nursery.start_soon(self.shutdown)
            return _reply({"stopping": True})
        if command == "forget-peer":
            problem = self.node.forget_peer(arguments.get("peer", ""))
            self.store.commit()
            if problem is not None:
                return m.ControlReply(ok=False, body=problem)
            return _reply({"forgotten": arguments.get("peer", "")})
        if command == "peers":
            return _reply(self.node.peer_report())
        if command == "subscriptions":
            return _reply(self.node.subscription_report(arguments.get("peer") or None))
        return m.ControlReply(
            ok=False,
            body=f"unknown command {command!r} (status, peers, subscriptions, stop, forget-peer)",
        )

    def status(self) -> dict[str, object]:
        """What ``superpeer status`` shows: the node's report and the runtime's own figures."""
        now = self.clock()
        report = self.node.status(now)
        report["uptime_seconds"] = round(now - self.started_at, 1)
        links = self._links.links if self._links is not None else {}
        report["links"] = {n: link.statistics() for n, link in sorted(links.items())}
        report["backbone_in_flight"] = self._links.in_flight() if self._links is not None else 0
        report["connections"] = len(self._peers)
        report["read_turns"] = self.read_turns
        report["commits"] = asdict(self._commits.statistics())
        report["disk"] = self.disk.status()
        report["store"] = {"checkpoints_failed": self.store.checkpoints_failed}
        report["peer_queue_frames"] = sum(
            c.send.statistics().current_buffer_used for c in self._peers.values()
        )
        return report

    def operator_status(self) -> dict[str, object]:
        """The status page's data: ``status`` and the per-peer rows of ``superpeer peers``."""
        report = self.status()
        report["peer_rows"] = self.node.peer_report()
        report["http"] = self.http_address
        return report


def _reply(body: object) -> m.ControlReply:
    return m.ControlReply(ok=True, body=json.dumps(body, sort_keys=True))
