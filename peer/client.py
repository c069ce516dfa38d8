"""The peer's connection to its access point, with trio: the runtime around ``peer.session``.

``PeerClient.serve`` keeps one connection open, reconnecting with capped exponential backoff and
jitter (``peer.session.Backoff``) when it cannot connect, is refused, or loses the connection.
Opening a connection: TCP (with keepalive), then, unless the network is plaintext, TLS 1.3
(``trio.SSLStream`` with the context of ``TlsSettings``, the access point's host as server name)
and, when the access point's key is pinned, ``crypto.check_pinned_connection`` right after the
handshake: a server that fails it has received nothing (the connection is closed at once). Each
connection then runs three tasks in its own nursery:

* the reader feeds received bytes to the ``Session`` and acts on its events: handshake bytes
  (``Reply``) go to the writer; ``Store`` writes the registration the access point issued (in a
  worker thread, durably) *before* the confirmation is queued; ``Forget`` deletes a registration
  the access point no longer knows; on ``Established`` (the ``Welcome`` without TLS, the
  identification accepted with it) the client becomes *connected* and queues the re-send of its
  whole state (advertisement first, then subscriptions); a ``Notify`` is stored in the inbox; an
  answer completes the oldest request, and the answer to a look-up (``Locate``) completes that
  look-up, whenever it comes;
* the writer sends the ``Hello``, then what the connection's queue holds, one item at a time and
  in order: handshake frames, then requests (the order of the queue is the order of the answers,
  look-ups apart);
* the watcher calls the session's timer (handshake, answer and look-up timeouts).

A request (``submit`` / ``request``) is only accepted while connected: what the user asks for
while the access point is unreachable fails at once and changes nothing, rather than being queued
behind an outage of unknown length. A request carries ``on_answer``, applied synchronously when its
answer is read, before anything else happens, so a state change acknowledged by the access point is
persisted before the next frame is even looked at (and before a shutdown can interrupt it); and
``on_doubt``, applied if the connection is lost after the request was sent but before its answer.
A look-up (``locate``) is a request too, but its answer is only worth something now: one without
an answer within ``locate_timeout`` fails alone, and the connection stays.

Which super-peer it connects to: the last one it was attached to if configured, else the first
configured; when one cannot be reached, the next in the list, and a wait only once every one
failed in a row. The list is the configured super-peers, then the others the last access point
named (``Welcome.alternates``: its neighbours in the cube, kept in ``state.json`` for the next
start), then a successor the access point named as it left. Configured super-peers go stale
as the network changes: a peer cut off from its access point while that one left the cube
never hears of the successor, and a chaos run's peer knocked at a departed one's address for
170 s, every super-peer it started with gone by then.

When a connection ends, queued requests fail as *not sent* and sent, unanswered ones as *in doubt*
(``RequestFailed.sent``; a look-up changed nothing either way). Closing the connection is the whole
of a clean shutdown: the access point keeps the peer's subscriptions and notifications while it is
detached.

Nothing here logs the private identifier: events carry it inside ``crypto.PrivateIdentifier``,
whose ``repr`` hides it, and the logs name only the access point that issued it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

import crypto
from clocks import OffsetEstimator, earliest, sample_of
from peer.config import ConfigError, format_address, parse_address
from peer.identity import IdentityError, PeerIdentity
from peer.inbox import Inbox, PendingRecord
from peer.kept import Kept
from peer.resources import Resources
from peer.session import (
    Answered,
    Backoff,
    Clocked,
    Ended,
    Established,
    Event,
    ExpiredNotice,
    Forget,
    Identification,
    LookupAnswered,
    LookupExpired,
    Notified,
    Outgoing,
    Reply,
    RequestTooLarge,
    ResourceMessage,
    ResourceTraffic,
    Session,
    StaleLookupAnswer,
    Store,
    new_lookup_id,
    plan_resend,
)
from peer.state import StateStore, parse_state, withdrawn_before
from wire import messages as m
from wire.acknowledging import ACK_DELAY_SECONDS
from wire.codec import WireLimits
from wire.requests import Request, request_label
from wire.streams import WideReads, receive

log = logging.getLogger("peer.client")
MOVES_KEPT = 20
MAX_ALTERNATES = 8
"""Super-peers named by an access point that the peer keeps (``Welcome.alternates``)."""
WRITE_BATCH_BYTES = 256 * 1024
"""Frames queued together leave in one write up to this size (a window's chunks in a few
writes, not in one copy of 4 MiB)."""
Answer = m.Ack | m.Refused | m.Located


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """TLS to the access point: ``context`` from ``crypto.peer_client_context``; ``pin`` when
    that context trusts a pinned key fingerprint (it verifies nothing by itself: the client checks
    the pin right after the handshake)."""

    context: ssl.SSLContext
    pin: str | None = None


class _ConnectFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RequestFailed(Exception):
    """The request has no answer. If ``sent`` is False nothing reached the access point; if True
    its outcome is unknown (the connection was lost after it was sent)."""

    def __init__(self, reason: str, *, sent: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.sent = sent


@dataclass(eq=False, slots=True, kw_only=True)
class PeerRequest:
    """A request for the access point and what its outcome means for the peer's state."""

    message: Request
    on_answer: Callable[[Answer], None] | None = None
    on_doubt: Callable[[], None] | None = None


class Ticket:
    """A submitted request; ``await ticket.wait()`` returns its answer."""

    def __init__(self, request: PeerRequest, outgoing: Outgoing) -> None:
        self.request = request
        self.outgoing = outgoing
        self._done = trio.Event()
        self.retries = 0
        """Times it was sent again after a ``Refused.retry_after`` (the peer was over a rate)."""
        self._answer: Answer | None = None
        self._failure: RequestFailed | None = None

    async def wait(self) -> Answer:
        await self._done.wait()
        if self._failure is not None:
            raise self._failure
        assert self._answer is not None
        return self._answer

    def _resolve(self, answer: Answer) -> None:
        if self.request.on_answer is not None:
            self.request.on_answer(answer)
        self._answer = answer
        self._done.set()

    def _fail(self, failure: RequestFailed) -> None:
        if failure.sent and self.request.on_doubt is not None:
            self.request.on_doubt()
        self._failure = failure
        self._done.set()


class _Leave:
    """The ``Leave`` frame queued behind earlier requests; ``done`` is set when the connection
    it was queued on has ended, with ``failure`` unless the frame was written whole."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.failure: RequestFailed | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientStatistics:
    connected: bool
    superpeer_id: str | None
    registered_with: str | None
    """The super-peer that issued the private identifier the peer holds (None without TLS)."""
    since: float | None
    """Wall-clock time of the last connection or disconnection (None before the first attempt)."""
    last_error: str | None
    retry_at: float | None
    """Wall-clock time of the next connection attempt, while disconnected."""
    connections: int
    notifications: int
    requests: int
    acknowledged: int
    refused: int
    failed: int
    resend_problems: tuple[str, ...]
    clock_offset: float | None = None
    """The access point's clock minus this peer's, in seconds, as measured on the wire (None:
    not measured yet); ``clock_error`` bounds its error."""
    clock_error: float | None = None


class _Connection:
    """One TCP connection's runtime state; ``end`` stops its three tasks."""

    def __init__(self, stream: trio.abc.Stream, session: Session[Ticket]) -> None:
        self.stream = stream
        self.session = session
        self.queue_in, self.queue_out = trio.open_memory_channel[Ticket | _Leave | bytes](math.inf)
        self.scope = trio.CancelScope()
        self.reason: str | None = None
        self.reply = b""
        self.writing = False
        self.leaving: _Leave | None = None
        self.superpeer_id: str | None = None
        self.arrival_clock = 0.0
        """The access point's hybrid time in its ``Welcome`` (``clocks``, rule 6)."""
        self.missing_since = 0.0
        """From when the access point said, in its latest ``Welcome`` or ``Clock``, that what
        it delivers may be incomplete (0: it did not): the next move statement's
        ``missing_since``."""
        self.recorded = False
        """The access point is the one the peer's state names (its move acknowledged)."""
        self.told_since = False
        """A ``Clock`` came after that: its ``missing_since`` replaces what was recorded (an
        access point the peer moved to tells the handover it still owes only once it has the
        move statement, and the acknowledgement comes first)."""
        self.retry_in, self.retry_out = trio.open_memory_channel[tuple[float, Ticket]](math.inf)
        """Requests to send again (at a trio time), in order: refused for the peer's rate, and
        those submitted after them, which wait their turn (the user's order is kept)."""
        self.retrying = 0
        """How many wait in ``retry_out``."""
        self.taken: Ticket | _Leave | None = None
        """An item taken from ``queue_out`` behind frames being written, not handled yet (if
        that write ends the connection, the teardown answers it with those still queued)."""
        self.transfer_in, self.transfer_out = trio.open_memory_channel[ResourceMessage](math.inf)
        """Transfer steps for the worker thread, in order (``PeerClient._transfer``); what waits
        is at most the windows the access point serves at once."""
        self.watching_until = math.inf
        """When ``_watch`` next looks at the session's timer."""
        self.timer_moved = trio.Event()
        """The session's timer moved before ``watching_until``: ``_watch`` looks now."""

    def end(self, reason: str, reply: bytes = b"") -> None:
        if self.reason is None:
            self.reason, self.reply = reason, reply
        self.scope.cancel()


class PeerClient:
    """Keeps the peer attached to its access point; see the module docstring.

    With ``tls`` and ``identity`` the peer is known by its key's public identifier and identifies
    on every connection; with neither, it is known by its name on a plaintext network.
    ``open_stream`` replaces the TCP connection (tests); TLS, if any, runs on top of it.
    """

    def __init__(
        self,
        *,
        store: StateStore,
        inbox: Inbox,
        superpeers: list[tuple[str, int]],
        backoff: Backoff,
        limits: WireLimits,
        request_timeout: float,
        locate_timeout: float = 10.0,
        max_rate_retries: int = 20,
        inbox_group: int = 64,
        ack_every: int = 16,
        ack_delay: float = ACK_DELAY_SECONDS,
        tls: TlsSettings | None = None,
        identity: PeerIdentity | None = None,
        open_stream: Callable[[], Awaitable[trio.abc.Stream]] | None = None,
        wall_clock: Callable[[], float] = time.time,
        silence: float | None = None,
    ) -> None:
        if (tls is None) != (identity is None):
            raise ValueError("TLS and an identity go together: identification needs the channel")
        self.store = store
        self.tls = tls
        self.identity = identity
        self.inbox = inbox
        self.resources: Resources | None = None
        """Offered and fetched files (the daemon sets them; None: this peer neither serves nor
        fetches any)."""
        self.kept = Kept(None)
        """Publications its access point acknowledged with its own copy alone, sent again
        until a second copy is made (``peer.kept``; the daemon's are on disk)."""
        self._resources_changed = trio.Event()
        if not superpeers:
            raise ValueError("a peer needs at least one super-peer to connect to")
        self._configured = list(superpeers)
        self.superpeers = [*self._configured, *self._named(self.store.current.alternates)]
        """Tried in order when the access point cannot be reached (the module docstring)."""
        self.superpeer = self._first_choice()
        """The super-peer tried now: the last one the peer was attached to if it is in the list,
        else the first; the next one in the list when it cannot be reached."""
        self._failed_in_row = 0
        self._welcomed_last = False
        """Whether the access point tried last answered the ``Hello``."""
        self._backoff = backoff
        self._limits = limits
        self._timeout = request_timeout
        self._locate_timeout = locate_timeout
        self._max_rate_retries = max_rate_retries
        """A request refused for the peer's rate is sent again this many times at most; then
        the refusal is its answer."""
        if inbox_group < 1:
            raise ValueError("inbox_group must be at least 1")
        self._inbox_group = inbox_group
        """The notifications of one read are stored with one pair of syncs, this many at most
        (``peer.inbox``)."""
        self._ack_every = ack_every
        self._ack_delay = ack_delay
        """When stored notifications are acknowledged (``peer.session``, ``wire.acknowledging``)."""
        self._open_stream = open_stream or self._open_tcp_stream
        self._wall_clock = wall_clock
        self._silence = silence
        self._connection: _Connection | None = None
        self._left = False
        self._inbox_changed = trio.Event()
        self._since: float | None = None
        self._last_error: str | None = None
        self._retry_at: float | None = None
        self._connections = 0
        self._notifications = 0
        self._requests = 0
        self._acknowledged = 0
        self._refused = 0
        self._failed = 0
        self._resend_problems: dict[str, str] = {}
        self.clock_offset = OffsetEstimator()
        """The access point's clock offset (``clocks``: its ``Welcome`` and ``Clock`` s)."""
        since = (self.store.current.access_point or {}).get("since")
        self._carried_clock = float(since) if isinstance(since, int | float) else 0.0
        """The latest hybrid time an access point gave this peer: its next ``Hello`` carries it
        (``clocks``, rule 6)."""
        self._moves: deque[dict[str, object]] = deque(maxlen=MOVES_KEPT)

    @property
    def moves(self) -> tuple[dict[str, object], ...]:
        """The moves to another access point since the daemon started, the latest last (at most
        ``MOVES_KEPT``): ``{"from", "to", "at"}``, once the new access point acknowledged."""
        return tuple(self._moves)

    @property
    def address(self) -> str:
        return format_address(self.superpeer)

    def _first_choice(self) -> tuple[str, int]:
        last = self.store.current.access_point
        for candidate in self.superpeers:
            if last is not None and format_address(candidate) == last.get("address"):
                return candidate
        return self.superpeers[0]

    def _next_choice(self) -> None:
        """The access point could not be reached: the next super-peer in the list."""
        if self.superpeer in self.superpeers:
            index = (self.superpeers.index(self.superpeer) + 1) % len(self.superpeers)
        else:
            index = 0
        self.superpeer = self.superpeers[index]

    @property
    def peer_id(self) -> str:
        """How the network knows this peer: its public identifier, or its name without TLS."""
        return self.identity.public_id if self.identity is not None else self.store.current.name

    # -- running ------------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, and reconnect whenever the connection is lost, until cancelled or until the
        peer has left the network."""
        task_status.started()
        while True:
            connected_before = self._connections
            reason = await self._connect_once()
            self._since = self._wall_clock()
            self._last_error = reason
            if self._left:
                log.info("event=left access_point=%s", self.address)
                return
            if self._connections == connected_before:
                # not reached: try the next super-peer of the list at once, and wait only once
                # every one of them failed in a row. One that answered and refused (a
                # registration it forgot: the next connection registers again) is asked again,
                # after the backoff: the peer does not move for a refusal
                self._failed_in_row += 1
                if not self._welcomed_last:
                    self._next_choice()
                    if self._failed_in_row % len(self.superpeers):
                        continue
            else:
                self._failed_in_row = 0
            delay = self._backoff.next_delay()
            self._retry_at = self._wall_clock() + delay
            log.warning(
                "event=disconnected access_point=%s reason=%r retry_in=%.2f",
                self.address,
                reason,
                delay,
            )
            await trio.sleep(delay)
            self._retry_at = None

    async def _open_tcp_stream(self) -> trio.abc.Stream:
        host, port = self.superpeer
        stream = await trio.open_tcp_stream(host, port)
        # The protocol has no heartbeat: let the kernel find a peer that vanished while idle.
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
            if hasattr(socket, option):
                stream.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
        return stream

    async def _secure(self, stream: trio.abc.Stream, tls: TlsSettings) -> trio.SSLStream:
        """The TLS channel over ``stream``, its server authenticated (CA or pin). On any failure,
        cancellation included, the connection is closed before a byte of the protocol was
        sent."""
        secure = trio.SSLStream(WideReads(stream), tls.context, server_hostname=self.superpeer[0])
        try:
            refusal = await self._authenticate(secure, tls)
        except BaseException:
            await trio.aclose_forcefully(secure)
            raise
        if refusal is not None:
            await trio.aclose_forcefully(secure)
            log.error("event=tls_refused access_point=%s reason=%r", self.address, refusal)
            raise _ConnectFailed(refusal)
        return secure

    async def _authenticate(self, secure: trio.SSLStream, tls: TlsSettings) -> str | None:
        """Runs the handshake; None if the server is the one to trust, else why it is not."""
        try:
            await secure.do_handshake()
        except trio.BrokenResourceError as error:
            return self._tls_failure(error)
        if tls.pin is not None:
            try:
                crypto.check_pinned_connection(secure, tls.pin)
            except crypto.CertificateError as error:
                return f"the access point {self.address}: {error}"
        return None

    def _tls_failure(self, error: trio.BrokenResourceError) -> str:
        cause = error.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError) and cause.verify_code in (9, 10):
            # refused for its validity dates: a clock problem, said as one (``clocks``, 10)
            why = crypto.handshake_failure(
                error, now=self._wall_clock(), offset=self.clock_offset.offset
            )
            return f"TLS with the access point {self.address} failed: {why}"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (
                f"the access point {self.address} presented a certificate this peer does not "
                f"trust ({cause.verify_message}): is --ca the certificate of its network's CA?"
            )
        detail = _tls_error_text(cause) if cause is not None else "the connection broke"
        return (
            f"TLS handshake with {self.address} failed ({detail}); a plaintext super-peer needs "
            "--no-tls"
        )

    async def _open_connection(self) -> tuple[trio.abc.Stream, Session[Ticket]]:
        """TCP, TLS and the session to run on them; ``_ConnectFailed`` says why not."""
        stream = None
        with trio.move_on_after(self._timeout):
            try:
                stream = await self._open_stream()
            except OSError as error:
                raise _ConnectFailed(
                    f"cannot connect to {self.address}: {_connect_error(error)}"
                ) from None
        if stream is None:
            raise _ConnectFailed(f"cannot connect to {self.address} within {self._timeout:g} s")
        identification = None
        if self.tls is not None and self.identity is not None:
            secure = None
            with trio.move_on_after(self._timeout):
                secure = await self._secure(stream, self.tls)  # closes the stream if it fails
            if secure is None:
                raise _ConnectFailed(
                    f"no TLS handshake with {self.address} within {self._timeout:g} s"
                )
            stream = secure
            identification = Identification(
                key=self.identity.key,
                server_fingerprint=crypto.peer_fingerprint(secure),
                server_node_id=crypto.verified_peer_certificate_node_id(secure),
                registration=self.identity.registration,
                earlier=dict(self.identity.earlier),
            )
        session: Session[Ticket] = Session(
            self.peer_id,
            limits=self._limits,
            timeout=self._timeout,
            locate_timeout=self._locate_timeout,
            identification=identification,
            silence=self._silence,
            ack_every=self._ack_every,
            ack_delay=self._ack_delay,
        )
        return stream, session

    async def _connect_once(self) -> str:
        """One connection, from connecting to its end; returns why it ended."""
        self._welcomed_last = False
        try:
            stream, session = await self._open_connection()
        except _ConnectFailed as failure:
            return failure.reason
        connection = _Connection(stream, session)
        async with stream:
            try:
                with connection.scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._read, connection)
                        nursery.start_soon(self._write, connection)
                        nursery.start_soon(self._watch, connection)
                        nursery.start_soon(self._retry, connection)
                        nursery.start_soon(self._transfer, connection)
                        nursery.start_soon(self._probe_kept, connection)
            finally:
                self._welcomed_last = session.welcomed
                # stopped from outside (the daemon stops; nothing ended the connection), with
                # no write cut short: the access point learns what the inbox holds before the
                # connection closes, and need not send it again next time
                stopping = connection.reason is None and not connection.writing
                farewell = session.farewell() if stopping else b""
                self._teardown(connection)
                if farewell:
                    with trio.CancelScope(deadline=trio.current_time() + 1.0, shield=True):
                        await self._send_quietly(connection, farewell)
            if connection.reply and not connection.writing:
                with trio.move_on_after(1.0):
                    await self._send_quietly(connection, connection.reply)
        return connection.reason or "the connection ended"

    def _teardown(self, connection: _Connection) -> None:
        """Fails what the connection leaves unanswered: queued requests were not sent; sent ones
        are in doubt. Notes the access point's latest hybrid time the peer heard (its last
        ``Clock`` or ``Welcome``): the next move statement's ``since``. Never the peer's own
        wall time of that contact, which would move the catch-up by this machine's clock error
        (issue 39). And from when the latest of them said what it delivers may be incomplete:
        a cut that began while the peer was attached (a chaos run lost five publications
        that reached the access point late, after the peer had left it, and died with it)."""
        if self._connection is connection:
            self._connection = None
        last = self.store.current.access_point
        if (
            connection.superpeer_id is not None
            and last is not None
            and last.get("node") == connection.superpeer_id
            and connection.arrival_clock > 0
        ):
            since = max(self._carried_clock, float(last["since"]))  # type: ignore[arg-type]
            missing = last.get("missing", 0.0)
            if connection.told_since:
                missing = connection.missing_since
            if since != last["since"] or missing != last.get("missing", 0.0):
                self.store.set_access_point(
                    connection.superpeer_id,
                    self.address,
                    since,
                    float(missing),  # type: ignore[arg-type]
                )
        reason = connection.reason or "the peer daemon is stopping"
        connection.queue_in.close()
        unanswered = connection.session.close()
        queued: list[Ticket | _Leave | bytes] = (
            [] if connection.taken is None else [connection.taken]
        )
        while True:
            try:
                queued.append(connection.queue_out.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        for item in queued:
            if isinstance(item, bytes):
                continue  # a handshake frame: nobody waits for it
            failure = RequestFailed(f"not connected to the access point ({reason})", sent=False)
            if isinstance(item, _Leave):
                item.failure = failure
                item.done.set()
            else:
                self._failed += 1
                item._fail(failure)
        connection.retry_in.close()
        while True:
            try:
                _, ticket = connection.retry_out.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            self._failed += 1
            ticket._fail(RequestFailed(f"not connected to the access point ({reason})", sent=False))
        leaving = connection.leaving
        if leaving is not None:
            if connection.writing:
                leaving.failure = RequestFailed(
                    f"the connection was lost while leaving ({reason})", sent=True
                )
            else:
                self._left = True
            leaving.done.set()
        for ticket in unanswered:
            self._failed += 1
            ticket._fail(
                RequestFailed(
                    f"the connection to the access point was lost before it answered ({reason})",
                    sent=True,
                )
            )

    async def _send_quietly(self, connection: _Connection, data: bytes) -> None:
        """Best effort, for the error frame sent just before closing: the other side may already
        be gone, which is then the expected outcome and only logged."""
        try:
            await connection.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            log.debug("event=error_frame_not_sent reason=%r", str(error))

    # -- the connection's tasks ---------------------------------------------------------------
    async def _read(self, connection: _Connection) -> None:
        while True:
            try:
                data = await receive(connection.stream)
            except trio.BrokenResourceError as error:
                connection.end(f"the connection broke: {error}")
                return
            if connection.session.ended:
                # ended by another task (its timer, a write) between this read's start and
                # its end, before the connection's tasks were cancelled: what came is not read
                # (a chaos run's peer daemon died of reading on, "the session has ended")
                connection.end("the session ended")
                return
            if not data:
                reason = "the access point closed the connection"
                if self.tls is None and not connection.session.established:
                    reason += (
                        " before welcoming the peer (a super-peer with TLS needs --ca or --pin)"
                    )
                connection.end(reason)
                return
            # the notifications of one read are stored in groups, and acknowledged once each
            # is in the inbox: when the session says (``Delivered`` is cumulative and may wait
            # a moment for more), and before anything the session sends after them
            notified: list[m.Notify] = []
            for event in connection.session.receive_data(data, trio.current_time()):
                if isinstance(event, Notified):
                    notified.append(event.notify)
                    continue
                await self._keep(connection, notified)
                notified = []
                await self._handle(connection, event)
            await self._keep(connection, notified)

    async def _keep(self, connection: _Connection, notified: list[m.Notify]) -> None:
        """Store ``notified`` in the inbox in groups of ``inbox_group`` at most, each written
        with one pair of syncs and then acknowledged (repeats and withdrawn ones too: they
        need no delivery again)."""
        size = self._inbox_group
        session = connection.session
        for start in range(0, len(notified), size):
            group = notified[start : start + size]
            await self._store(group)
            now = trio.current_time()
            acknowledgement = session.delivered(max(group, key=_delivery), now, len(group))
            if acknowledgement:
                connection.queue_in.send_nowait(acknowledgement)
            elif (owed := session.delivered_deadline) is not None and (
                owed < connection.watching_until
            ):
                connection.timer_moved.set()

    async def _handle(self, connection: _Connection, event: Event[Ticket]) -> None:
        if isinstance(event, Reply):
            connection.queue_in.send_nowait(event.data)
        elif isinstance(event, Store):
            await self._store_registration(connection, event)
        elif isinstance(event, Forget):
            await self._forget_registration(connection, event)
        elif isinstance(event, Established):
            self._established(connection, event)
        elif isinstance(event, Clocked):
            self._clocked(connection, event.message)
        elif isinstance(event, ResourceTraffic):
            connection.transfer_in.send_nowait(event.message)
        elif isinstance(event, ExpiredNotice):
            log.warning("event=notifications_expired count=%d reason=%r", event.count, event.reason)
            await _in_thread(self.store.add_expired, event.count)
        elif isinstance(event, Answered):
            if event.answer.request != event.expected:
                log.warning(
                    "event=answer_label_mismatch expected=%r got=%r",
                    event.expected,
                    event.answer.request,
                )
            self._answered(connection, event.token, event.answer)
        elif isinstance(event, LookupAnswered):
            answer = event.answer
            if isinstance(answer, m.Located):
                log.info(
                    "event=located id=%s public_id=%s online=%s address=%s superpeer=%s",
                    answer.id,
                    answer.public_id,
                    answer.online,
                    answer.address,
                    answer.superpeer,
                )
            self._answered(connection, event.token, answer)
        elif isinstance(event, LookupExpired):
            self._failed += 1
            log.warning("event=lookup_expired reason=%r", event.reason)
            event.token._fail(RequestFailed(event.reason, sent=True))
        elif isinstance(event, StaleLookupAnswer):
            log.info("event=stale_lookup_answer answer=%r", event.answer)
        else:
            assert isinstance(event, Ended)
            if event.successor:
                self._follow(event.successor)
            if event.refusal is not None:
                log.error(
                    "event=identification_refused access_point=%s code=%s reason=%r",
                    self.address,
                    event.refusal,
                    event.reason,
                )
            connection.end(event.reason, event.reply)

    def _clocked(self, connection: _Connection, message: m.Welcome | m.Clock) -> None:
        """The access point's clock: a measurement when it echoes ours, its hybrid time to
        carry, and an answer to a ``Clock`` (which it measures this peer's clock with)."""
        back = self._wall_clock()
        if isinstance(message, m.Welcome):
            # a new connection, maybe to another access point, maybe to one restarted on
            # another clock: what was measured before says nothing about it
            self.clock_offset = OffsetEstimator()
        if message.echo:
            sample = sample_of(message.echo, message.wall - message.held, message.wall, back)
            self.clock_offset.add(sample)
        if message.clock:
            self._carried_clock = max(self._carried_clock, message.clock)
            connection.missing_since = message.missing_since
            if isinstance(message, m.Clock) and connection.recorded:
                connection.told_since = True
            if isinstance(message, m.Welcome):
                connection.arrival_clock = message.clock
        if isinstance(message, m.Clock):
            self._learn(message.alternates)
            answer = connection.session.clock_answer(message, self._wall_clock())
            if answer:
                connection.queue_in.send_nowait(answer)

    async def _transfer(self, connection: _Connection) -> None:
        """Transfer steps, in order, a batch per worker-thread run: what arrived while the thread
        handled the previous batch goes together (one run per 192 KiB chunk cost the requester
        more than the chunk: the run waits for the interpreter lock on both sides). What the
        steps answer goes out on this connection, in order."""
        async for message in connection.transfer_out:
            batch = [message]
            while True:
                try:
                    batch.append(connection.transfer_out.receive_nowait())
                except trio.WouldBlock:
                    break
            resources = self.resources
            if resources is None:
                for ignored in batch:
                    log.warning("event=resource_ignored kind=%s", type(ignored).KIND)
                continue
            with trio.CancelScope(shield=True):  # a chunk written is answered
                replies = await trio.to_thread.run_sync(_transfer_steps, resources, batch)
            for reply in replies:
                if isinstance(reply, m.Collected):
                    log.info("event=fetched rendezvous=%s ok=%s", reply.rendezvous, reply.ok)
                data = connection.session.transfer(reply)
                if data:
                    connection.queue_in.send_nowait(data)
            if any(isinstance(s, m.FetchFailed) for s in batch) or any(
                isinstance(r, m.Collected) for r in replies
            ):
                self._resources_changed.set()
                self._resources_changed = trio.Event()

    async def wait_for_resources(self) -> None:
        """Returns when a fetch completed or failed."""
        await self._resources_changed.wait()

    def _follow(self, successor: str) -> None:
        """The access point left and another one keeps the peer's state: go there next."""
        target = _parsed(successor)
        if target is None:
            return
        if target not in self.superpeers:
            self.superpeers.append(target)
        self.superpeer = target
        log.info("event=follow_successor access_point=%s", successor)

    def _learn(self, alternates: tuple[str, ...]) -> None:
        """The other super-peers an access point named, in its ``Welcome`` and again in each
        ``Clock``, follow the configured ones in the list (replacing those named before: the
        cube changed since), and are kept for the next start (written when they change). An
        access point that names none (alone in its cube) changes nothing."""
        named = self._named(alternates)
        if not named:
            return
        listed = [*self._configured, *named]
        if self.superpeer not in listed:
            listed.append(self.superpeer)  # (a successor it followed)
        if listed == self.superpeers:
            return
        self.superpeers = listed
        self.store.set_alternates(tuple(format_address(a) for a in named))

    def _named(self, alternates: tuple[str, ...]) -> list[tuple[str, int]]:
        """Of the super-peers an access point named, those not configured, at most
        ``MAX_ALTERNATES``."""
        named: list[tuple[str, int]] = []
        for text in alternates:
            address = _parsed(text)
            if address is not None and address not in self._configured and address not in named:
                named.append(address)
        return named[:MAX_ALTERNATES]

    def _answered(self, connection: _Connection, ticket: Ticket, answer: Answer) -> None:
        """Counts the answer (a ``Located`` counts as acknowledged: the counters count answers,
        whatever they say) and completes its ticket; a refusal that says when to ask again
        (the peer was over a rate) is sent again then, up to ``max_rate_retries`` times."""
        if (
            isinstance(answer, m.Refused)
            and answer.retry_after > 0
            and ticket.retries < self._max_rate_retries
        ):
            ticket.retries += 1
            log.info(
                "event=rate_limited request=%r retry_after=%.3f reason=%r",
                answer.request,
                answer.retry_after,
                answer.reason,
            )
            wait = min(answer.retry_after, self._timeout)  # no access point parks it for good
            self._retry_later(connection, ticket, trio.current_time() + wait)
            return
        if isinstance(answer, m.Refused):
            self._refused += 1
            log.info("event=refused request=%r reason=%r", answer.request, answer.reason)
        else:
            self._acknowledged += 1
        message = ticket.request.message
        if isinstance(message, m.Publish | m.Withdraw) and not isinstance(answer, m.Located):
            now = self._wall_clock()
            probe = self.kept.probe(now) if len(self.kept) else None
            self.kept.answered(message, answer, now)
            if message == probe and isinstance(answer, m.Ack) and not answer.alone:
                self._resend_kept(self.kept.due(now))  # a copy made: the others now
        ticket._resolve(answer)

    def _resend_kept(self, requests: list[m.Publish]) -> None:
        """Sends ``requests`` (kept: ``peer.kept``) again between connections' plans (the
        probe, and the others once it is copied); their answers reach ``kept`` as any
        publication's do, and mean what a re-sent request's do (``_resend_answered``)."""
        try:
            self.submit_all(
                [PeerRequest(message=r, on_answer=self._resend_answered(r)) for r in requests]
            )
        except (RequestFailed, RequestTooLarge) as error:
            log.warning("event=kept_not_sent count=%d reason=%r", len(requests), str(error))

    async def _probe_kept(self, connection: _Connection) -> None:
        """Every ``resend_seconds``, the publication kept longest goes again (``peer.kept``)."""
        while True:
            await trio.sleep(self.kept.limits.resend_seconds)
            probe = self.kept.probe(self._wall_clock())
            if probe is not None and self._connection is connection:
                self._resend_kept([probe])

    async def _store_registration(self, connection: _Connection, event: Store) -> None:
        """Stores the registration durably, then queues the confirmation (never before)."""
        identity = self.identity
        assert identity is not None
        failure = await _in_thread(identity.store, event.registration)
        if failure is not None:
            log.error(
                "event=registration_not_stored access_point=%s error=%r", self.address, failure
            )
            connection.end(
                f"cannot store the private identifier the access point issued: {failure}"
            )
            return
        log.info(
            "event=registration_stored issued_by=%s replaces=%s",
            event.registration.issued_by,
            event.replaces,
        )
        confirmation = connection.session.stored()
        if confirmation:  # else the session ended in the same read: nothing is confirmed
            connection.queue_in.send_nowait(confirmation)

    async def _forget_registration(self, connection: _Connection, event: Forget) -> None:
        identity = self.identity
        assert identity is not None
        failure = await _in_thread(identity.forget, event.issued_by)
        if failure is not None:
            log.error("event=registration_not_forgotten error=%r", failure)
            connection.end(f"{failure} (the access point no longer knows the private identifier)")
            return
        log.warning(
            "event=registration_forgotten issued_by=%s note=%r",
            event.issued_by,
            "the access point no longer knows it; registering again",
        )
        self._backoff.reset()  # understood and repaired: the next attempt registers, soon

    def _established(self, connection: _Connection, event: Established) -> None:
        connection.superpeer_id = event.superpeer_id
        self._learn(event.alternates)
        self._connection = connection
        self._connections += 1
        self._since = self._wall_clock()
        self._last_error = None
        self._backoff.reset()
        log.info(
            "event=connected access_point=%s superpeer=%s peer=%s registered=%s",
            self.address,
            event.superpeer_id,
            self.peer_id,
            event.registered,
        )
        state = self.store.current
        parsed = parse_state(state)
        problems = {f"stored state ({n})": p for n, p in enumerate(parsed.problems, start=1)}
        resend = plan_resend(
            parsed.advertisement,
            parsed.subscriptions,
            state.in_doubt,
            expires=state.expires,
            axioms=parsed.axioms,
            on_change=state.on_change,
            active_since=state.active_since,
            withdrawn=parsed.withdrawn,
            kept=self.kept.due(self._wall_clock()),
        )
        for message in resend:
            try:
                self.submit(PeerRequest(message=message, on_answer=self._resend_answered(message)))
            except RequestTooLarge as error:
                problems[request_label(message)] = str(error)
        if self.resources is not None:
            # unfinished fetches, again: idempotent, and how a rendezvous follows a peer that
            # moved to another access point
            for _, record in self.resources.waiting():
                self.submit(PeerRequest(message=self.resources.fetch_message(record)))
        self._arrived(event.superpeer_id, connection)
        for what, problem in problems.items():
            log.error("event=resend_problem what=%r problem=%r", what, problem)
        self._resend_problems = problems

    def _arrived(self, superpeer_id: str, connection: _Connection) -> None:
        """Connected to ``superpeer_id``: if the peer was attached to another one, say so, after
        its state was sent again (the new access point then knows what the peer subscribed to
        when it left, and fetches what it missed); the new access point is remembered once it
        acknowledged the move, with its hybrid time ``arrival`` (``Welcome.clock``; the next
        move statement's ``since``: ``clocks``, rule 6; the peer's own wall time from an
        access point that gave none) and its ``missing`` (``Welcome.missing_since``), or, after
        a move, the previous statement's start if earlier: what the previous access point kept
        for the peer is handed over to this one, and if this one is lost for good before the
        peer has it, the next one must catch up on it too (until a later ``Clock`` from this
        one says what it still owes)."""
        arrival = connection.arrival_clock or self._wall_clock()
        previous = self.store.current.access_point
        if previous is None or previous.get("node") == superpeer_id:
            self.store.set_access_point(
                superpeer_id, self.address, arrival, connection.missing_since
            )
            connection.recorded = True
            return
        since = float(previous["since"])  # type: ignore[arg-type]
        previous_missing = float(previous.get("missing", 0.0))  # type: ignore[arg-type]
        start = earliest(since, previous_missing)
        signature = b""
        if self.identity is not None:
            signature = crypto.sign_move(
                self.identity.key,
                public_id=self.peer_id,
                previous=str(previous["node"]),
                current=superpeer_id,
                since=since,
            )
        moved = m.Moved(
            previous=str(previous["node"]),
            previous_address=str(previous["address"]),
            since=since,
            signature=signature,
            missing_since=previous_missing,
        )
        address = self.address

        def answered(answer: Answer) -> None:
            if isinstance(answer, m.Ack):
                missing = earliest(start, connection.missing_since)
                self.store.set_access_point(superpeer_id, address, arrival, missing)
                connection.recorded = True
                self._moves.append(
                    {"from": str(previous["node"]), "to": superpeer_id, "at": self._wall_clock()}
                )

        log.info("event=moved from=%s to=%s since=%.3f", previous["node"], superpeer_id, since)
        self.submit(PeerRequest(message=moved, on_answer=answered))

    def _resend_answered(self, message: Request) -> Callable[[Answer], None]:
        """What an answer to a re-sent request means: a withdrawal of an in-doubt subscription is
        settled either way; a refused re-send is a problem the user must see (``status``)."""

        def answered(answer: Answer) -> None:
            if isinstance(message, m.Unsubscribe):
                self.store.resolve_in_doubt(message.id)
            elif isinstance(answer, m.Refused):
                log.error(
                    "event=resend_refused request=%r reason=%r", answer.request, answer.reason
                )
                self._resend_problems[answer.request] = answer.reason
            elif isinstance(answer, m.Ack):
                self._resend_problems.pop(answer.request, None)
                if isinstance(message, m.Subscribe):
                    self.store.set_active_since(message.id, answer.active_since)

        return answered

    async def _store(self, notified: list[m.Notify]) -> None:
        """One group of notifications into the inbox (``peer.inbox``): those whose every
        subscription was withdrawn before they were published and those stored already are
        counted and left out; the others are written together, then committed in order."""
        pending: list[tuple[m.Notify, PendingRecord]] = []
        for notify in notified:
            if notify.kind != m.GAP and withdrawn_before(
                self.store.current, notify.subscriptions, notify.published_at
            ):
                self.inbox.withdrawn += 1
                log.info(
                    "event=withdrawn_ignored publication=%r owner=%s subscriptions=%s",
                    notify.publication.id,
                    notify.owner,
                    ",".join(notify.subscriptions),
                )
                continue
            record = self.inbox.prepare(notify, self._wall_clock())
            if record is None:
                log.info(
                    "event=duplicate_ignored publication=%r owner=%s",
                    notify.publication.id,
                    notify.owner,
                )
                continue
            pending.append((notify, record))
        if not pending:
            return
        # Shielded: a notification read from the socket is kept even if the connection or the
        # daemon is being stopped (the access point counts it as delivered).
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.inbox.write, [record for _, record in pending])
        for notify, record in pending:
            self.inbox.commit(record)
            self._notifications += 1
            log.info(
                "event=notification publication=%r version=%d kind=%s owner=%s subscriptions=%s",
                notify.publication.id,
                notify.version,
                notify.kind,
                notify.owner,
                ",".join(notify.subscriptions),
            )
        self._inbox_changed.set()
        self._inbox_changed = trio.Event()

    async def _write(self, connection: _Connection) -> None:
        hello = connection.session.hello(
            trio.current_time(), wall=self._wall_clock(), clock=self._carried_clock
        )
        await self._send(connection, hello)
        async for first in connection.queue_out:
            item = await self._send_frames(connection, first)
            if item is None:
                continue
            if isinstance(item, _Leave):
                connection.leaving = item
                await self._send(connection, connection.session.leave())
                # The access point closes the connection (the reader then ends it); answers to
                # earlier requests may still come until then.
                await trio.sleep(self._timeout)
                connection.end("left the network; the access point did not close the connection")
                return
            if not connection.session.established:
                # the access point ended the session (a goodbye) while this request was queued:
                # it did not go out, and the connection ends with the session
                self._failed += 1
                reason = connection.reason or "the access point ended the session"
                item._fail(
                    RequestFailed(f"not connected to the access point ({reason})", sent=False)
                )
                connection.end("the access point ended the session")
                await trio.lowlevel.checkpoint()
                continue
            data = connection.session.send(item.outgoing, item, trio.current_time())
            await self._send(connection, data)

    async def _send_frames(
        self, connection: _Connection, item: Ticket | _Leave | bytes
    ) -> Ticket | _Leave | None:
        """Writes ``item`` if it is frames, with the frames queued behind it, in one write
        (acknowledgements, transfer steps: one TLS write, not one each) that takes no more once
        it holds ``WRITE_BATCH_BYTES``; returns the first item that is not frames (None: there
        was none, or the write was full), kept in ``connection.taken`` meanwhile."""
        if not isinstance(item, bytes):
            return item
        batch = [item]
        size = len(item)
        while size < WRITE_BATCH_BYTES:
            try:
                taken = connection.queue_out.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                await self._send(connection, b"".join(batch))
                return None
            if not isinstance(taken, bytes):
                break
            batch.append(taken)
            size += len(taken)
        else:
            await self._send(connection, b"".join(batch))
            return None
        connection.taken = taken
        await self._send(connection, b"".join(batch))
        connection.taken = None
        return taken

    async def _send(self, connection: _Connection, data: bytes) -> None:
        connection.writing = True
        try:
            await connection.stream.send_all(data)
        except trio.BrokenResourceError as error:
            connection.end(f"the connection broke: {error}")
            await trio.lowlevel.checkpoint()  # raises Cancelled: end() stopped the connection
        connection.writing = False

    def _retry_later(self, connection: _Connection, ticket: Ticket, at: float) -> None:
        connection.retrying += 1
        connection.retry_in.send_nowait((at, ticket))

    async def _retry(self, connection: _Connection) -> None:
        """Queues the requests to send again, in order, each when its time comes."""
        async for at, ticket in connection.retry_out:
            await trio.sleep_until(at)
            connection.retrying -= 1
            connection.queue_in.send_nowait(ticket)

    async def _watch(self, connection: _Connection) -> None:
        session = connection.session
        while True:
            deadline = session.get_timer()
            # Look again after the shorter timeout at the latest: anything that starts meanwhile
            # has a deadline at least that far away (a look-up sent now may be due before the
            # oldest request).
            soonest = trio.current_time() + min(session.timeout, session.locate_timeout)
            connection.watching_until = soonest if deadline is None else min(deadline, soonest)
            with trio.move_on_at(connection.watching_until):
                await connection.timer_moved.wait()
            connection.timer_moved = trio.Event()
            for event in session.handle_timer(trio.current_time()):
                await self._handle(connection, event)

    # -- requests -----------------------------------------------------------------------------
    def submit(self, request: PeerRequest) -> Ticket:
        """Queues ``request`` on the current connection. Raises ``RequestFailed`` (not sent) when
        not connected and ``peer.session.RequestTooLarge`` when it cannot go on the wire."""
        [ticket] = self.submit_all([request])
        return ticket

    def submit_all(self, requests: list[PeerRequest]) -> list[Ticket]:
        """Queues all of ``requests``, in order, or (raising as ``submit``) none of them."""
        connection = self._connection
        if connection is None:
            raise RequestFailed(self._not_connected(), sent=False)
        tickets = [
            Ticket(r, connection.session.prepare(self._sent_now(r.message))) for r in requests
        ]
        for ticket in tickets:
            if connection.retrying:  # behind the requests waiting to be sent again
                self._retry_later(connection, ticket, 0.0)
            else:
                connection.queue_in.send_nowait(ticket)
        self._requests += len(tickets)
        return tickets

    def _sent_now(self, message: Request) -> Request:
        """An expiry goes with the wall time it is measured from (``clocks``, rules 7 and 8):
        the access point keeps the time left, whatever the two clocks say."""
        if isinstance(message, m.Subscribe | m.Publish) and message.expires is not None:
            return dataclasses.replace(message, sent_at=self._wall_clock())
        return message

    async def request(self, request: PeerRequest) -> Answer:
        return await self.submit(request).wait()

    def locate(self, public_id: str, superpeer: str = "") -> Ticket:
        """Queues a look-up of ``public_id`` (a fresh ``Locate``, asked first of ``superpeer``:
        where the peer was last known to be); its ticket's answer is ``Located`` or
        ``Refused``. Raises as ``submit``: a look-up is never kept for later."""
        locate = m.Locate(id=new_lookup_id(), public_id=public_id, superpeer=superpeer)
        return self.submit(PeerRequest(message=locate))

    async def leave(self) -> None:
        """Sends ``Leave`` after the requests already queued and stops reconnecting."""
        connection = self._connection
        if connection is None:
            raise RequestFailed(self._not_connected(), sent=False)
        item = _Leave()
        connection.queue_in.send_nowait(item)
        await item.done.wait()
        if item.failure is not None:
            raise item.failure

    def _not_connected(self) -> str:
        reason = f"not connected to the access point {self.address}"
        if self._last_error is not None:
            reason += f" ({self._last_error})"
        if self._retry_at is not None:
            reason += f"; next attempt in {max(0.0, self._retry_at - self._wall_clock()):.0f} s"
        return reason

    async def wait_for_record_after(self, sequence: int) -> None:
        """Returns once the inbox holds a record with a sequence above ``sequence``."""
        while self.inbox.last_sequence <= sequence:
            await self._inbox_changed.wait()

    def statistics(self) -> ClientStatistics:
        connection = self._connection
        registration = self.identity.registration if self.identity is not None else None
        return ClientStatistics(
            connected=connection is not None,
            superpeer_id=connection.superpeer_id if connection is not None else None,
            registered_with=registration.issued_by if registration is not None else None,
            since=self._since,
            last_error=self._last_error,
            retry_at=self._retry_at,
            connections=self._connections,
            notifications=self._notifications,
            requests=self._requests,
            acknowledged=self._acknowledged,
            refused=self._refused,
            failed=self._failed,
            resend_problems=tuple(
                f"{request}: {reason}" for request, reason in self._resend_problems.items()
            ),
            clock_offset=self.clock_offset.offset,
            clock_error=self.clock_offset.error,
        )


def _transfer_steps(
    resources: Resources, steps: list[ResourceMessage]
) -> list[m.Upload | m.Collect | m.Collected]:
    """What ``peer.resources`` answers to each transfer step, in order (it reads and writes
    files: run in a worker thread)."""
    replies: list[m.Upload | m.Collect | m.Collected] = []
    for message in steps:
        if isinstance(message, m.UploadWanted):
            log.info(
                "event=upload publication=%r requester=%s offset=%d length=%d",
                message.publication,
                message.requester,
                message.offset,
                message.length,
            )
            replies.extend(resources.upload(message))
        elif isinstance(message, m.FileReady):
            replies.append(resources.ready(message))
        elif isinstance(message, m.FileChunk):
            reply = resources.chunk(message)
            if reply is not None:
                replies.append(reply)
        else:
            log.warning(
                "event=fetch_failed publication=%r owner=%s reason=%r",
                message.publication,
                message.owner,
                message.reason,
            )
            resources.failed(message)
    return replies


async def _in_thread(function: Callable[..., None], *args: object) -> str | None:
    """Runs a file operation of ``peer.identity`` in a worker thread; its ``IdentityError``
    message, or None when it succeeded."""
    try:
        await trio.to_thread.run_sync(function, *args)
    except IdentityError as error:
        return str(error)
    return None


def _delivery(notify: m.Notify) -> int:
    return notify.delivery


def _tls_error_text(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason).lower().replace("_", " ")
    return str(error) or type(error).__name__


def _connect_error(error: OSError) -> str:
    """What went wrong connecting: trio reports "all attempts to connect failed" and keeps each
    attempt's error as the cause; the first one says why (refused, unreachable, ...)."""
    cause: BaseException = error
    while isinstance(cause.__cause__, BaseException):
        cause = cause.__cause__
        while isinstance(cause, BaseExceptionGroup):
            cause = cause.exceptions[0]
    if isinstance(cause, OSError) and cause.errno is not None:
        return os.strerror(cause.errno)
    return str(cause)


def _parsed(text: str) -> tuple[str, int] | None:
    """A super-peer's address an access point gave, as the list holds it; None if it is not
    one (``parse_address``'s rule, a port in 1..65535)."""
    try:
        return parse_address(text, what="a super-peer's address")
    except ConfigError:
        return None
