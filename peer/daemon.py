"""The peer daemon: ``serve_peer`` runs the connection to the access point (``peer.client``) and
the local control socket the ``peer`` commands talk to (``peer.control``).

Starting checks what the connection needs before anything runs, and refuses with one clear line
(``DaemonError``, exit 2) rather than retrying what cannot work: with TLS (the default) a way to
authenticate the access point (``--ca`` or ``--pin``; never "trust any server"), a usable CA
certificate, and the peer's key (missing: run ``peer keygen``; unreadable, too small, of the wrong
type, with loose permissions or a wrong passphrase: ``crypto.KeyFileError`` says which) and
consistent registration files (``peer.identity``). With TLS the network knows the peer by its key's
public identifier; the name stays a local label (``peer.state``).

Decisions a user sees:

* **State changes need the access point.** ``advertise``, ``publish-schema``, ``subscribe`` and
  ``unsubscribe`` are
  saved only when the access point acknowledges them; while it is unreachable they fail at once
  (exit 3) and nothing changes. Queuing them durably instead would report success for a change
  the network may later refuse, with nobody left to tell. What *was* acknowledged is kept and
  re-sent after every reconnection, so an outage never loses it.
* **Local errors never reach the network.** Queries, advertisements and documents are parsed here
  first; the access point only sees what the language accepts, under the wire's limits.
* **A lost answer is reported as such** (exit 3): a subscription left in doubt is withdrawn on
  the next connection, an advertisement or unsubscription in doubt is undone by re-sending the
  saved state, a publication in doubt may or may not have gone out (subscribers ignore repeats).
* ``leave`` sends ``Leave``, forgets the subscriptions, the advertisement and the journal of
  what the peer published (the identity and the inbox stay) and stops the daemon: a running
  daemon would otherwise attach again. ``stop`` only stops the daemon (as SIGTERM does): the peer
  stays registered, and its access point keeps its subscriptions and its mail meanwhile.
* **A look-up is only worth something now.** ``locate`` asks the access point where a peer is
  (naming the super-peer the peer's latest notification in the inbox came from, which the
  access point asks first: ``superpeer.locating``);
  while the access point is unreachable it fails at once (exit 3), and it is never queued or
  saved. The network may take a while (the access point may ask the whole backbone), so the
  command waits up to ``locate_timeout``, then fails alone (exit 3); a refusal is exit 1.

One daemon per data directory (an exclusive lock on ``<data>/daemon.lock``); a control socket left
by a daemon that was killed is replaced. Each control connection is served on its own: one that
sends garbage, or the wrong first frame, gets a ``LinkError`` and is closed, and nobody else
notices. Stopping (cancellation: SIGTERM/SIGINT in ``peer run``, or the ``stop`` command) closes
the network connection and removes the socket; every file was already written durably.

With ``[ui] listen`` (on by default, on a free loopback port) the daemon also serves the web app
(``peer.ui``) on the same event loop; its pages act through ``PeerService.execute``, the commands
the control socket serves.
"""

from __future__ import annotations

import json
import logging
import os
import random
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trio
from cryptography.hazmat.primitives.asymmetric import rsa

import crypto
import qel
import wire
from peer.client import Answer, PeerClient, PeerRequest, RequestFailed, Ticket, TlsSettings
from peer.config import ConfigError, PeerConfig, SecurityConfig, check_name, format_address
from peer.control import CONTROL_LIMITS, INBOX_PAGE_BYTES, READ_SIZE
from peer.files import DataDirBusy, hold_data_dir
from peer.identity import IdentityError, PeerIdentity, load_key
from peer.inbox import Inbox
from peer.jobs import Job, Jobs
from peer.kept import Kept, KeptLimits
from peer.published import Published
from peer.resources import ResourceError, Resources
from peer.session import Backoff, RequestTooLarge
from peer.state import ON_CHANGE, StateError, StateStore, subscription_id
from qel.resources import Resource, rendezvous_key, resource_of, with_resource
from wire import messages as m
from wire.codec import WireLimits
from wire.framing import Link, Received, Violation, frame

log = logging.getLogger("peer.daemon")
HANDSHAKE_SECONDS: Final = 10.0
MAX_SOCKET_PATH: Final = 107
MAX_ID_CHARS: Final = 128


class DaemonError(Exception):
    """The daemon cannot start: the message says why and what to do."""


class CommandError(Exception):
    """A command failed; ``kind`` is one of ``peer.control.EXIT_CODES``."""

    def __init__(self, kind: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.extra = extra


@dataclass(frozen=True, slots=True)
class Running:
    """What ``serve_peer`` reports once it accepts commands: ``peer_id`` is how the network knows
    the peer (its public identifier with TLS), ``name`` its local name."""

    peer_id: str
    name: str
    access_point: str
    control_path: Path
    ui_url: str | None = None
    """The web app's address with its access token (``peer.ui``), None when it is off."""


NO_TRUST: Final = (
    "the peer does not know how to authenticate its access point: give --ca FILE (the network "
    "CA's certificate) or --pin FINGERPRINT (a single super-peer's key fingerprint, pk1-..., which "
    "`superpeer run` logs), or --no-tls for a plaintext super-peer (or ca, pin or tls = false in "
    "the [security] table of the config); a peer never trusts a server it cannot authenticate"
)


async def serve_peer(
    config: PeerConfig,
    *,
    passphrase: bytes | None = None,
    task_status: trio.TaskStatus[Running] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Runs the peer until cancelled or until it leaves the network; reports ``Running`` once it
    accepts commands. ``passphrase`` unlocks an encrypted key (``peer run`` reads it from
    ``$PEER_KEY_PASSPHRASE``). Raises ``DaemonError`` if it cannot start."""
    if not config.superpeers:
        raise DaemonError("no access point: give --superpeer HOST:PORT or superpeer in the config")
    if len(os.fsencode(config.control_path)) > MAX_SOCKET_PATH:
        raise DaemonError(
            f"the control socket path {config.control_path} is longer than the {MAX_SOCKET_PATH} "
            "bytes a Unix socket allows; use a shorter --data-dir"
        )
    tls = tls_settings(config.security)
    key = None
    if tls is not None:
        try:
            key = load_key(config.key_path, passphrase)
        except IdentityError as error:
            raise DaemonError(str(error)) from None
    with _hold_data_dir(config.data_dir):
        try:
            store = StateStore.open(config.data_dir, name=config.name)
        except StateError as error:
            raise DaemonError(str(error)) from None
        identity = _open_identity(key, config.identity_dir) if key is not None else None
        if config.advertisement is not None:
            _apply_configured_advertisement(store, config.advertisement)
        inbox = Inbox.open(config.data_dir / "notifications")
        client = PeerClient(
            store=store,
            inbox=inbox,
            superpeers=list(config.superpeers),
            backoff=Backoff(config.reconnect_initial, config.reconnect_max, random.random),
            limits=WireLimits(max_frame_bytes=config.max_frame_bytes),
            request_timeout=config.request_timeout,
            silence=config.silence_seconds,
            locate_timeout=config.locate_timeout,
            max_rate_retries=config.max_rate_retries,
            inbox_group=config.inbox_group,
            ack_every=config.ack_every,
            ack_delay=config.ack_delay_seconds,
            tls=tls,
            identity=identity,
        )
        client.resources = Resources(
            config.data_dir / "resources", config.data_dir / "notifications", client.peer_id
        )
        client.kept = Kept(
            config.data_dir / "kept",
            KeptLimits(
                max_kept=config.max_kept,
                kept_seconds=config.kept_seconds,
                resend_seconds=config.kept_resend_seconds,
            ),
        )
        published = Published.open(config.data_dir / "published")
        jobs = Jobs.open(config.data_dir / "jobs")
        try:
            async with trio.open_nursery() as nursery:
                service = PeerService(
                    config,
                    store,
                    inbox,
                    client,
                    published,
                    jobs=jobs,
                    stop=nursery.cancel_scope.cancel,
                )
                await nursery.start(client.serve)
                await nursery.start(serve_control, config.control_path, service.serve_connection)
                ui_url = None
                if config.ui.listen is not None:
                    from peer.ui import serve_ui  # the web server loads only when it is used

                    try:
                        ui_url = await nursery.start(serve_ui, config, service)
                    except* OSError as group:
                        raise DaemonError(_ui_unavailable(config, group.exceptions[0])) from None
                    service.ui_address = ui_url.partition("?")[0]
                log.info(
                    "event=ready peer=%s name=%s access_point=%s security=%r control=%s "
                    "records=%d ui=%s",
                    client.peer_id,
                    store.current.name,
                    client.address,
                    _security_summary(config.security),
                    config.control_path,
                    inbox.count,
                    service.ui_address,
                )
                task_status.started(
                    Running(
                        client.peer_id,
                        store.current.name,
                        client.address,
                        config.control_path,
                        ui_url,
                    )
                )
        finally:
            log.info("event=stopped peer=%s", client.peer_id)


def _ui_unavailable(config: PeerConfig, error: BaseException) -> str:
    assert config.ui.listen is not None
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return (
        f"cannot serve the web app at {format_address(config.ui.listen)}: {reason}; choose "
        "another address with --ui HOST:PORT (or [ui] listen), or none with --no-ui"
    )


def tls_settings(security: SecurityConfig) -> TlsSettings | None:
    """The TLS context for the access point, None for a plaintext network; ``DaemonError`` when
    the configuration says whom to trust in no usable way."""
    if not security.tls:
        return None
    try:
        if security.ca is not None:
            return TlsSettings(crypto.peer_client_context(ca=security.ca))
        if security.pin is not None:
            return TlsSettings(
                crypto.peer_client_context(pinned_fingerprint=security.pin), pin=security.pin
            )
    except crypto.CertificateError as error:
        raise DaemonError(f"the CA certificate (--ca): {error}") from None
    except ssl.SSLError as error:
        raise DaemonError(f"the CA certificate {security.ca} cannot be used: {error}") from None
    raise DaemonError(NO_TRUST)


def _open_identity(key: rsa.RSAPrivateKey, directory: Path) -> PeerIdentity:
    try:
        identity = PeerIdentity.open(key, directory)
    except IdentityError as error:
        raise DaemonError(str(error)) from None
    registration = identity.registration
    log.info(
        "event=identity peer=%s registered_with=%s",
        identity.public_id,
        registration.issued_by if registration is not None else None,
    )
    return identity


def _security_summary(security: SecurityConfig) -> str:
    if not security.tls:
        return "plaintext (--no-tls)"
    return f"TLS 1.3, trusting {security.trust}"


@contextmanager
def _hold_data_dir(directory: Path) -> Iterator[None]:
    """Creates the data directory (private to the user) and holds its lock while the daemon runs."""
    try:
        with hold_data_dir(directory):
            yield
    except DataDirBusy:
        raise DaemonError(
            f"a peer daemon is already running with the data directory {directory}"
        ) from None
    except OSError as error:
        raise DaemonError(f"cannot use the data directory {directory}: {error.strerror}") from None


def _apply_configured_advertisement(store: StateStore, text: str) -> None:
    """The config file's advertisement replaces the saved one at every start (it is sent first
    on every connection; a refusal shows in ``peer status``)."""
    try:
        qel.parse_advertisement(text)
    except qel.AdvertisementError as error:
        raise DaemonError(f"the configured advertisement is invalid: {error}") from None
    if store.current.advertisement != text:
        store.set_advertisement(text)


async def serve_control(
    path: Path,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    *,
    task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serves ``handler`` on a Unix socket at ``path`` (mode 0600) until cancelled, then removes
    the socket file. The caller holds the data directory's lock, so a file already at ``path`` is
    a leftover of a daemon that was killed."""
    path.unlink(missing_ok=True)
    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await listener.bind(str(path))
        os.chmod(path, 0o600)  # before listen(): nobody can connect in between
        listener.listen(16)
    except OSError as error:
        listener.close()
        raise DaemonError(f"cannot create the control socket {path}: {error.strerror}") from None
    except BaseException:
        listener.close()
        raise
    try:
        task_status.started(path)
        await trio.serve_listeners(handler, [trio.SocketListener(listener)])
    finally:
        path.unlink(missing_ok=True)


class _ControlChannel:
    """Frames in and out of one control connection."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.link = Link(accepting=True, limits=CONTROL_LIMITS)
        self._events: deque[object] = deque()

    async def receive(self) -> object | None:
        """The next message, or None when the connection is over (closed by the other side, or
        a protocol violation, which was answered with a ``LinkError``)."""
        while not self._events:
            data = await self.stream.receive_some(READ_SIZE)
            if not data:
                return None
            self._events.extend(self.link.receive_data(data))
        event = self._events.popleft()
        if isinstance(event, Violation):
            log.warning("event=control_violation reason=%r", event.reason)
            await self.stream.send_all(event.reply)
            return None
        assert isinstance(event, Received)
        return event.message

    async def send(self, message: object) -> None:
        # Not ``link.send``: a violation read in the same chunk as the current request has
        # already closed the link; it is answered by the next ``receive``, after this reply.
        await self.stream.send_all(frame(wire.encode(message), CONTROL_LIMITS))

    async def refuse(self, reason: str) -> None:
        log.warning("event=control_violation reason=%r", reason)
        await self.send(m.LinkError(reason=reason))


class PeerService:
    """The daemon's commands (see ``peer.control`` for the protocol)."""

    def __init__(
        self,
        config: PeerConfig,
        store: StateStore,
        inbox: Inbox,
        client: PeerClient,
        published: Published,
        *,
        jobs: Jobs,
        stop: Callable[[], None],
    ) -> None:
        self.config = config
        self.store = store
        self.inbox = inbox
        self.client = client
        self.published = published
        self.jobs = jobs
        self._jobs_lock = trio.Lock()
        self.ui_address: str | None = None
        """The web app's address (without its token), once it listens."""
        self._stop = stop

    # -- control connections ------------------------------------------------------------------
    async def serve_connection(self, stream: trio.SocketStream) -> None:
        """One control connection. A command side that vanishes ends only its own connection
        (``except*``: the error may come from a task of a nested nursery)."""
        async with stream:
            try:
                await self._converse(_ControlChannel(stream))
            except* trio.BrokenResourceError as group:
                log.info("event=control_client_gone reason=%r", str(group.exceptions[0]))

    async def _converse(self, channel: _ControlChannel) -> None:
        hello = None
        with trio.move_on_after(HANDSHAKE_SECONDS) as waiting:
            hello = await channel.receive()
        if waiting.cancelled_caught:
            await channel.refuse(f"no hello within {HANDSHAKE_SECONDS:g} s")
            return
        if hello is None:
            return
        assert isinstance(hello, m.Hello)  # the link lets nothing else come first
        if hello.role != "control":
            await channel.refuse(
                f"this is a peer's control socket: role must be control, not {hello.role!r}"
            )
            return
        await channel.send(m.Welcome(node_id=self.client.peer_id, address=self.client.address))
        while True:
            request = await channel.receive()
            if request is None:
                return
            if not isinstance(request, m.ControlRequest):
                await channel.refuse(f"expected control.request, got {type(request).KIND}")  # type: ignore[attr-defined]
                return
            waits = request.command == "inbox" and request.arguments.get("wait") == "true"
            if waits and not await self._wait_for_records(channel, request.arguments):
                return
            reply = await self.execute(request)
            try:
                await channel.send(reply)
            finally:
                if request.command in ("leave", "stop") and reply.ok:
                    self._stop()

    async def _wait_for_records(self, channel: _ControlChannel, arguments: dict[str, str]) -> bool:
        """Blocks until the inbox has a record after ``after``; False if the command side went
        away meanwhile (or sent something while it should wait: the connection is then closed)."""
        try:
            after = _sequence_argument(arguments)
        except CommandError:
            return True  # execute() reports the bad argument
        gone = False
        async with trio.open_nursery() as nursery:

            async def watch_client() -> None:
                nonlocal gone
                try:
                    data = await channel.stream.receive_some(READ_SIZE)
                    if data:
                        await channel.refuse("a request arrived while another was in progress")
                except trio.BrokenResourceError as error:
                    log.info("event=control_client_gone reason=%r", str(error))
                gone = True
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_client)
            await self.client.wait_for_record_after(after)
            nursery.cancel_scope.cancel()
        return not gone

    async def execute(self, request: m.ControlRequest) -> m.ControlReply:
        commands = {
            "advertise": self.advertise,
            "publish-schema": self.publish_schema,
            "subscribe": self.subscribe,
            "unsubscribe": self.unsubscribe,
            "publish": self.publish,
            "publish-batch": self.publish_batch,
            "job": self.job,
            "retract": self.retract,
            "inbox": self.inbox_page,
            "status": self.status,
            "locate": self.locate,
            "fetch": self.fetch,
            "leave": self.leave,
            "stop": self.stop,
        }
        command = commands.get(request.command)
        if command is None:
            known = ", ".join(commands)
            return _failure(
                request, CommandError("invalid", f"unknown command {request.command!r} ({known})")
            )
        try:
            body = await command(request.arguments)
        except CommandError as error:
            return _failure(request, error)
        return m.ControlReply(ok=True, body=json.dumps(body))

    # -- commands -----------------------------------------------------------------------------
    async def advertise(self, arguments: dict[str, str]) -> dict[str, Any]:
        text = _argument(arguments, "advertisement")
        try:
            advertisement = qel.parse_advertisement(text)
        except qel.AdvertisementError as error:
            raise CommandError("invalid", f"invalid advertisement: {error}") from None

        def answered(answer: Answer) -> None:
            if isinstance(answer, m.Ack):
                self.store.set_advertisement(text)

        await self._answer(
            self._submit(
                PeerRequest(message=m.Advertise(advertisement=advertisement), on_answer=answered)
            ),
            "the saved advertisement is sent again when the daemon reconnects",
        )
        return {"advertisement": advertisement_summary(advertisement)}

    async def publish_schema(self, arguments: dict[str, str]) -> dict[str, Any]:
        """RDFS axioms for the network's entailment (``superpeer.schemas``): kept once the
        access point accepted them, and re-sent (the union of all) after every connection."""
        text = _argument(arguments, "data")
        format = arguments.get("format") or "turtle"
        try:
            axioms = qel.parse_schema(text, format)
        except qel.SchemaError as error:
            raise CommandError("invalid", f"invalid schema: {error}") from None

        def answered(answer: Answer) -> None:
            if isinstance(answer, m.Ack):
                self.store.add_schema(text, format)

        message = m.PublishSchema(axioms=tuple(sorted(axioms, key=repr)))
        await self._answer(
            self._submit(PeerRequest(message=message, on_answer=answered)),
            "the access point may hold the schema; publish it again to be sure",
        )
        return {"axioms": len(axioms)}

    async def subscribe(self, arguments: dict[str, str]) -> dict[str, Any]:
        text = _argument(arguments, "query")
        try:
            subscription = qel.parse_subscription(text)
        except qel.QueryError as error:
            raise CommandError("invalid", f"the query is outside the language: {error}") from None
        name = arguments.get("id") or subscription_id(subscription)
        _check_id(name)
        existing = self.store.current.subscriptions.get(name)
        if existing is not None and not _same_subscription(existing, subscription):
            raise CommandError(
                "invalid",
                f"the id {name!r} is already used for another subscription ({existing.strip()}); "
                "unsubscribe it first or choose another --id",
            )

        expires = _expires(arguments)
        on = arguments.get("on") or ""
        if on not in ("", ON_CHANGE):
            raise CommandError("invalid", f"on must be {ON_CHANGE!r}, not {on!r}")
        on_change = on == ON_CHANGE

        def answered(answer: Answer) -> None:
            if isinstance(answer, m.Ack):
                self.store.add_subscription(
                    name, text, expires, on_change=on_change, active_since=answer.active_since
                )

        def in_doubt() -> None:
            if name not in self.store.current.subscriptions:
                self.store.mark_in_doubt(name)

        await self._answer(
            self._submit(
                PeerRequest(
                    message=m.Subscribe(
                        id=name, subscription=subscription, expires=expires, on_change=on_change
                    ),
                    on_answer=answered,
                    on_doubt=in_doubt,
                )
            ),
            "the subscription was not saved and is withdrawn when the daemon reconnects",
        )
        return {"id": name, "query": subscription.to_text(), "repeated": existing is not None}

    async def unsubscribe(self, arguments: dict[str, str]) -> dict[str, Any]:
        name = _argument(arguments, "id")
        if name not in self.store.current.subscriptions:
            raise CommandError("invalid", f"no subscription with id {name!r} (see peer status)")

        def answered(answer: Answer) -> None:
            if isinstance(answer, m.Ack) and name in self.store.current.subscriptions:
                self.store.remove_subscription(
                    name, withdrawn_at=answer.withdrawn_at, now=time.time()
                )

        await self._answer(
            self._submit(PeerRequest(message=m.Unsubscribe(id=name), on_answer=answered)),
            "the subscription was kept and is sent again when the daemon reconnects",
        )
        return {"id": name}

    async def retract(self, arguments: dict[str, str]) -> dict[str, Any]:
        name = _argument(arguments, "id")

        def answered(answer: Answer) -> None:
            if isinstance(answer, m.Ack):
                self.published.retracted(name, time.time())

        await self._answer(
            self._submit(PeerRequest(message=m.Withdraw(id=name), on_answer=answered)),
            "retracting it again is safe: a resource is retracted once",
        )
        return {"id": name}

    async def publish(self, arguments: dict[str, str]) -> dict[str, Any]:
        """A first publication, or with ``change`` (``update``, ``extend``) a change of the
        resource published under ``id``."""
        data = _argument(arguments, "data")
        change = arguments.get("change") or "publish"
        if change not in m.CHANGES:
            raise CommandError("invalid", f"change must be one of {', '.join(m.CHANGES)}")
        if change != "publish" and not arguments.get("id"):
            raise CommandError("invalid", f"an {change} names the resource it changes (id)")
        try:
            publications = qel.parse_publications(
                data,
                arguments.get("format") or "turtle",
                publisher=self.client.peer_id,
                id=arguments.get("id") or None,
            )
        except qel.PublicationError as error:
            raise CommandError("invalid", f"cannot publish: {error}") from None
        expires = _expires(arguments)
        files = _files_argument(arguments, publications)
        resources = self.client.resources
        assert resources is not None
        copies: dict[str, tuple[Path, Resource, Path]] = {}
        try:
            for subject, source in files.items():
                copy, resource = await trio.to_thread.run_sync(resources.copy_in, source)
                copies[subject] = (copy, resource, source)
        except ResourceError as error:
            for copy, _, _ in copies.values():
                resources.discard(copy)
            raise CommandError("invalid", f"cannot publish: {error}") from None
        publications = [
            with_resource(p, copies[p.subject.value][1])
            if p.subject.value in copies
            else resources.keeping_file(p)
            if change == "update"
            else p
            for p in publications
        ]

        def offered(publication: qel.Publication) -> Callable[[Answer], None]:
            def answered(answer: Answer) -> None:
                if isinstance(answer, m.Ack):
                    self.published.record(publication, change, expires, time.time())
                entry = copies.pop(publication.subject.value, None)
                if entry is None:
                    return
                copy, resource, source = entry
                if isinstance(answer, m.Ack):
                    resources.offer(publication.id, copy, resource, source)
                else:
                    resources.discard(copy)

            return answered

        try:
            tickets = self._submit_all(
                [
                    PeerRequest(
                        message=m.Publish(publication=p, change=change, expires=expires),
                        on_answer=offered(p),
                    )
                    for p in publications
                ]
            )
        except CommandError:
            for copy, _, _ in copies.values():
                resources.discard(copy)
            raise
        results = await _outcomes(publications, tickets)
        for copy, _, _ in copies.values():  # requests whose answer never came
            resources.discard(copy)
        _raise_unknown(results)
        refused = [r for r in results if r["outcome"] == "refused"]
        if refused:
            raise CommandError(
                "refused",
                f"the access point refused {len(refused)} of {len(results)} publication(s)",
                results=results,
            )
        return {"results": results}

    async def publish_batch(self, arguments: dict[str, str]) -> dict[str, Any]:
        """One batch of a bulk publication (``peer.bulk``): its publications, then, once every
        one was answered, the batch recorded in its job (``peer.jobs``) with the journal of what
        was published. Refusals are the job's to count, not a failure of the command; a lost
        answer is (exit 3), and the batch stays unrecorded, to be sent again."""
        key = _argument(arguments, "job")
        try:
            batch, total, count = (
                int(_argument(arguments, n)) for n in ("batch", "of", "resources")
            )
            job = await trio.to_thread.run_sync(self.jobs.get, key) or Job(key, total, count)
        except ValueError as error:
            raise CommandError("invalid", f"not a batch of a job: {error}") from None
        if (job.batches, job.resources) != (total, count) or not 0 <= batch < total:
            raise CommandError(
                "invalid",
                f"batch {batch} of {total} ({count} resources) is not one of job {key}'s "
                f"{job.batches} batches ({job.resources} resources)",
            )
        try:
            publications = qel.parse_publications(
                _argument(arguments, "data"), "nt", publisher=self.client.peer_id
            )
        except qel.PublicationError as error:
            raise CommandError("invalid", f"cannot publish: {error}") from None
        expires = _expires(arguments)
        tickets = self._submit_all(
            [PeerRequest(message=m.Publish(publication=p, expires=expires)) for p in publications]
        )
        results = await _outcomes(publications, tickets)
        _raise_unknown(results)
        accepted = [
            p for p, r in zip(publications, results, strict=True) if r["outcome"] == "published"
        ]
        refused = [(r["subject"], r["reason"]) for r in results if r["outcome"] == "refused"]

        def record() -> Job:
            self.published.record_all(accepted, expires, time.time())
            # read again: another command may have recorded a batch of the job meanwhile
            done = (self.jobs.get(key) or job).answered(batch, len(accepted), refused)
            self.jobs.put(done)
            return done

        async with self._jobs_lock:  # batches of one job are answered on several connections
            job = await trio.to_thread.run_sync(record)
        return {"job": job.to_plain(), "published": len(accepted), "refused": len(refused)}

    async def job(self, arguments: dict[str, str]) -> dict[str, Any]:
        """The job of a bulk publication (``peer.jobs``); null if none was started."""
        try:
            job = await trio.to_thread.run_sync(self.jobs.get, _argument(arguments, "key"))
        except ValueError as error:
            raise CommandError("invalid", str(error)) from None
        return {"job": None if job is None else job.to_plain()}

    async def fetch(self, arguments: dict[str, str]) -> dict[str, Any]:
        """Asks for the resource of a publication in the inbox, and waits up to ``wait``
        seconds for it (a rendezvous with an owner offline completes later, by itself)."""
        publication = _argument(arguments, "publication")
        owner = arguments.get("owner") or None
        records = [
            r
            for r in await trio.to_thread.run_sync(self.inbox.find, publication)
            if owner is None or r["owner"] == owner
        ]
        if not records:
            raise CommandError("invalid", f"no notification of publication {publication!r} here")
        if len(records) > 1:
            owners = ", ".join(sorted(r["owner"] for r in records))
            raise CommandError(
                "invalid", f"several owners published {publication!r}: give --owner ({owners})"
            )
        [record] = records
        try:
            resource = resource_of(qel.parse_publication_text(record["ntriples"]))
        except qel.QelError as error:
            raise CommandError("invalid", f"the notification cannot be read: {error}") from None
        if resource is None:
            raise CommandError("invalid", f"publication {publication!r} offers no file")
        resources = self.client.resources
        assert resources is not None
        if arguments.get("status") == "true":
            progress = resources.progress(
                rendezvous_key(self.client.peer_id, record["owner"], publication)
            )
            if progress is None:
                raise CommandError("invalid", f"no fetch of {publication!r} was asked for")
            return progress
        out = Path(arguments["out"]).expanduser().resolve() if arguments.get("out") else None
        wanted = {**record, "sha256": resource.sha256, "size": resource.size}
        key, fetch = await trio.to_thread.run_sync(resources.want, wanted, out)
        if fetch["state"] == "waiting":
            await self._answer(
                self._submit(PeerRequest(message=resources.fetch_message(fetch))),
                "the fetch is recorded and is asked again at the next connection",
            )
        wait = float(arguments.get("wait") or 0)
        with trio.move_on_after(wait):
            while (progress := resources.progress(key)) is not None and progress[
                "state"
            ] == "waiting":
                await self.client.wait_for_resources()
        progress = resources.progress(key)
        assert progress is not None
        return progress

    async def inbox_page(self, arguments: dict[str, str]) -> dict[str, Any]:
        after = _sequence_argument(arguments)
        return {
            "records": self.inbox.records_after(after, max_bytes=INBOX_PAGE_BYTES),
            "last": self.inbox.last_sequence,
        }

    async def status(self, arguments: dict[str, str]) -> dict[str, Any]:
        statistics = self.client.statistics()
        state = self.store.current
        advertisement = None
        if state.advertisement is not None:
            try:
                advertisement = advertisement_summary(qel.parse_advertisement(state.advertisement))
            except qel.AdvertisementError as error:
                advertisement = {"problem": str(error)}
        security = self.config.security
        return {
            "peer_id": self.client.peer_id,
            "name": state.name,
            "data_dir": str(self.config.data_dir),
            "access_point": self.client.address,
            "superpeers": [format_address(a) for a in self.client.superpeers],
            "security": {
                "tls": security.tls,
                "trust": security.trust,
                "key": str(self.config.key_path) if security.tls else None,
                "registered_with": statistics.registered_with,
            },
            "superpeer_id": statistics.superpeer_id,
            "connected": statistics.connected,
            "clock_offset_seconds": statistics.clock_offset,
            "clock_error_seconds": statistics.clock_error,
            "since": statistics.since,
            "last_error": statistics.last_error,
            "retry_at": statistics.retry_at,
            "subscriptions": dict(sorted(state.subscriptions.items())),
            "on_change": sorted(state.on_change),
            "in_doubt": sorted(state.in_doubt),
            "advertisement": advertisement,
            "schemas": len(state.schemas),
            "moves": list(self.client.moves),
            "expired_while_away": state.expired,
            "ui": self.ui_address,
            "inbox": {
                "records": self.inbox.count,
                "duplicates_ignored": self.inbox.duplicates,
                "withdrawn_ignored": self.inbox.withdrawn,
                "unreadable": self.inbox.unreadable,
                "writes": self.inbox.writes,
            },
            "counters": {
                "connections": statistics.connections,
                "notifications": statistics.notifications,
                "requests": statistics.requests,
                "acknowledged": statistics.acknowledged,
                "refused": statistics.refused,
                "failed": statistics.failed,
            },
            "problems": list(statistics.resend_problems),
            # publications held by their access point alone, sent again until a second copy
            # is made, and those forgotten unconfirmed (``peer.kept``)
            "kept": {
                "publications": len(self.client.kept),
                "forgotten": self.client.kept.forgotten,
            },
        }

    async def locate(self, arguments: dict[str, str]) -> dict[str, Any]:
        public_id = self._public_id(_argument(arguments, "public_id"))
        # asked first where its latest notification here came from (its access point then)
        superpeer = self.inbox.last_origin(public_id)
        try:
            answer = await self.client.locate(public_id, superpeer).wait()
        except RequestFailed as error:
            raise CommandError("unavailable", error.reason) from None
        except RequestTooLarge as error:
            raise CommandError("invalid", str(error)) from None
        if isinstance(answer, m.Refused):
            raise CommandError("refused", f"refused by the access point: {answer.reason}")
        assert isinstance(answer, m.Located)
        return {
            "id": answer.id,
            "public_id": answer.public_id,
            "online": answer.online,
            "address": answer.address,
            "superpeer": answer.superpeer,
            "access_point": answer.access_point,
        }

    def _public_id(self, text: str) -> str:
        """How the network knows the peer to look up, checked here so that a typo is told apart
        from "not online": with TLS a public identifier (in its canonical lower case, as peers
        name themselves), on a plaintext network a peer name."""
        if self.client.identity is None:
            try:
                return check_name(text, what="the peer")
            except ConfigError as error:
                raise CommandError("invalid", str(error)) from None
        try:
            return crypto.parse_public_identifier(text)
        except crypto.IdentifierError as error:
            raise CommandError(
                "invalid", f"{text!r} is not a peer's public identifier (pk1-...): {error}"
            ) from None

    async def leave(self, arguments: dict[str, str]) -> dict[str, Any]:
        try:
            await self.client.leave()
        except RequestFailed as error:
            detail = (
                "the access point may not have received it; the daemon keeps running"
                if error.sent
                else "nothing was sent"
            )
            raise CommandError("unavailable", f"{error.reason}; {detail}") from None
        self.store.clear_network_state()
        self.published.clear()
        self.client.kept.clear()
        self.jobs.clear()
        return {"peer_id": self.client.peer_id, "left": True}

    async def stop(self, arguments: dict[str, str]) -> dict[str, Any]:
        """Stops the daemon once the reply is sent (``serve_connection``); the peer stays
        registered and its access point keeps what arrives for it meanwhile."""
        log.info("event=stopping reason=%r", "the stop command")
        return {"peer_id": self.client.peer_id, "stopping": True}

    # -- helpers ------------------------------------------------------------------------------
    def _submit(self, request: PeerRequest) -> Ticket:
        [ticket] = self._submit_all([request])
        return ticket

    def _submit_all(self, requests: list[PeerRequest]) -> list[Ticket]:
        try:
            return self.client.submit_all(requests)
        except RequestFailed as error:
            raise CommandError("unavailable", f"{error.reason}; nothing was sent") from None
        except RequestTooLarge as error:
            raise CommandError("invalid", str(error)) from None

    async def _answer(self, ticket: Ticket, when_in_doubt: str) -> m.Ack:
        try:
            answer = await ticket.wait()
        except RequestFailed as error:
            raise CommandError("unavailable", f"{error.reason}; {when_in_doubt}") from None
        if isinstance(answer, m.Refused):
            raise CommandError("refused", f"refused by the access point: {answer.reason}")
        assert isinstance(answer, m.Ack)  # only a look-up is answered otherwise (``locate``)
        return answer


def _same_subscription(stored: str, subscription: qel.Subscription) -> bool:
    try:
        return qel.parse_subscription(stored).key == subscription.key
    except qel.QueryError:  # saved by an older version of the language: not the same
        return False


def advertisement_summary(advertisement: qel.Advertisement) -> dict[str, int]:
    return {
        "schemas": len(advertisement.schemas),
        "properties": len(advertisement.properties),
        "value_sets": len(advertisement.values),
    }


async def _outcomes(
    publications: list[qel.Publication], tickets: list[Ticket]
) -> list[dict[str, Any]]:
    """What became of each publication: ``outcome`` published, refused (with ``reason``),
    unknown (sent, the answer lost) or not sent."""
    results: list[dict[str, Any]] = []
    for publication, ticket in zip(publications, tickets, strict=True):
        result: dict[str, Any] = {"id": publication.id, "subject": publication.subject.value}
        resource = resource_of(publication)
        if resource is not None:
            result["sha256"], result["size"] = resource.sha256, resource.size
        try:
            answer = await ticket.wait()
        except RequestFailed as error:
            result["outcome"] = "unknown" if error.sent else "not sent"
            result["failure"] = error.reason
        else:
            result["outcome"] = "published" if isinstance(answer, m.Ack) else "refused"
            if isinstance(answer, m.Ack) and answer.alone:
                # held by its access point alone: kept here and sent again (``peer.kept``)
                result["alone"] = True
            if isinstance(answer, m.Refused):
                result["reason"] = answer.reason
        results.append(result)
    return results


def _raise_unknown(results: list[dict[str, Any]]) -> None:
    """``unavailable`` (with the results) if an answer was lost."""
    failures = [r.pop("failure") for r in results if "failure" in r]
    if failures:
        raise CommandError(
            "unavailable",
            f"{failures[0]}; a publication whose outcome is unknown may or may not have "
            "gone out (publishing it again is safe: subscribers ignore repeats)",
            results=results,
        )


def _failure(request: m.ControlRequest, error: CommandError) -> m.ControlReply:
    log.info("event=command_failed command=%s kind=%s", request.command, error.kind)
    document = {"error": error.kind, "message": error.message, **error.extra}
    return m.ControlReply(ok=False, body=json.dumps(document))


def _argument(arguments: dict[str, str], name: str) -> str:
    value = arguments.get(name)
    if not value:
        raise CommandError("invalid", f"the argument {name!r} is missing")
    return value


def _expires(arguments: dict[str, str]) -> float | None:
    """The absolute expiry the CLI worked out (``peer.expires``), if any."""
    text = arguments.get("expires")
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise CommandError("invalid", f"expires must be a time in seconds, not {text!r}") from None


def _sequence_argument(arguments: dict[str, str]) -> int:
    text = arguments.get("after") or "0"
    if not text.isdigit():
        raise CommandError("invalid", f"after must be a record sequence number, not {text!r}")
    return int(text)


def _files_argument(
    arguments: dict[str, str], publications: list[qel.Publication]
) -> dict[str, Path]:
    """``files``: a JSON object from subject IRI to file ("" for a one-subject document)."""
    text = arguments.get("files")
    if not text:
        return {}
    try:
        files = json.loads(text)
    except ValueError:
        raise CommandError("invalid", "files must be a JSON object") from None
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise CommandError("invalid", "files must map subjects to file paths")
    subjects = {p.subject.value for p in publications}
    if "" in files:
        if len(publications) != 1 or len(files) != 1:
            raise CommandError(
                "invalid",
                f"the document describes {len(publications)} resources: say which file is "
                "which resource's (--file SUBJECT=PATH)",
            )
        files = {next(iter(subjects)): files[""]}
    unknown = sorted(set(files) - subjects)
    if unknown:
        raise CommandError("invalid", f"the document describes no resource {unknown[0]!r}")
    return {subject: Path(path) for subject, path in files.items()}


def _check_id(name: str) -> None:
    if len(name) > MAX_ID_CHARS or not name.isprintable() or any(c.isspace() for c in name):
        raise CommandError(
            "invalid",
            f"a subscription id is up to {MAX_ID_CHARS} printable characters without spaces, "
            f"not {name!r}",
        )
