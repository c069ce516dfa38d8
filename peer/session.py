"""The peer's end of one connection to its access point, sans-IO: bytes in, events out.

The trio client (``peer.client``) owns the socket, the TLS channel, the files and the clock, and
drives a ``Session``; every protocol decision is here, in plain synchronous code. The rules, from
the access point's contract:

* The peer connects and sends ``Hello(role="peer", node_id=<peer id>)``; the access point answers
  ``Welcome`` or ``LinkError`` and closes. The peer id is the key's public identifier (``pk1-...``)
  on a TLS connection, the peer's name on a plaintext one.
* With TLS (an ``Identification``), secure identification follows the ``Welcome``
  (``crypto.identification``): the access point sends ``auth.challenge``, and the session builds
  its ``crypto.Prover`` from the challenge. It *identifies* (``auth.identify``, with the private
  identifier) when the peer holds a registration issued by the super-peer that challenges, and
  *registers* (``auth.register``) otherwise: never registered, or registered with another super-peer
  (the peer moved: it becomes a new peer there, and the private identifier it holds is never sent
  to anyone but its issuer; the new registration replaces it, see ``peer.identity``, and the
  notifications the previous access point keeps for the peer are not fetched: migrating them is
  the next issue's work). The ``Prover`` checks the challenge against what the TLS handshake
  authenticated (the server's key; its node id when a CA vouched for it). A registration yields
  ``Store``: the client stores it durably, then calls ``stored`` and sends the ``auth.confirm``
  it returns, if any (the access point keeps the registration only once confirmed; nothing is
  confirmed when a later frame of the same read ended the session).
* The session is *established* (``Established``) on ``Welcome`` without TLS, on ``auth.accepted``
  with it; only then does the client count as connected and re-send its state, and only then may
  requests be sent. Anything else before that is a protocol violation.
* A refused identification (``auth.rejected``) ends the session. ``unknown_identifier`` for a
  private identifier means its issuer lost it (or never got the confirmation): ``Forget`` comes
  first, and the next connection registers again. Other refusals are reported (the client retries
  with backoff); ``already_registered`` and ``bad_private_identifier`` need the operator.
* After ``Established``, the access point sends ``Notify`` frames at any time, and exactly one
  answer (``Ack`` or ``Refused``) per request, in the order the requests were sent. A ``Notify``
  is acknowledged (``delivered``, a ``Delivered`` frame) once the client has it durably in its
  inbox (or found it there already): only then does the access point forget it, and what was not
  acknowledged comes again on the next connection. ``Delivered`` is cumulative, and owed as
  ``wire.acknowledging`` says: at once when ``ack_every`` notifications wait for it, else
  ``ack_delay`` after the first of them (``get_timer``; ``handle_timer`` then gives it as a
  ``Reply``), so that a paced stream's notifications share one; and before anything else the
  session sends (every frame it makes carries the owed ``Delivered`` first). A later
  ``Delivered`` costs the access point memory for a few milliseconds: a notification stored and
  not acknowledged when the connection ends comes again, and the client finds it in the inbox.
  ``Expired`` tells how many kept notifications the network had to drop while the peer was away
  (``ExpiredNotice``). The session keeps the requests sent and not yet answered in a FIFO and
  each answer completes the oldest; the answer's ``request`` label is only compared with the
  expected one for the logs (labels are descriptive, the order is the contract). ``Leave`` has
  no answer.
* Resource transfers (``peer.resources``): ``UploadWanted``, ``FileReady``, ``FileChunk`` and
  ``FetchFailed`` come at any time (``ResourceTraffic``); the peer's ``Upload``, ``Collect`` and
  ``Collected`` frames (``transfer``) are not answered. ``Fetch`` is an ordinary request.
* Look-ups (``Locate``) are the exception: the access point may have to ask the whole backbone,
  so their answers come whenever they are ready, after later requests' answers and notifications.
  They are kept apart, by id, and matched by id: ``Located`` by its ``id``, ``Refused`` by its
  ``request`` label ``locate <id>`` (the label is the contract here, and no other request has such
  a label). The access point answers on the peer's *current* connection, so an answer to a
  look-up asked before a reconnection (or a daemon restart) can arrive on a new session: look-up
  ids are random (``new_lookup_id``), never reused, and an answer to an id this session does not
  wait for is ignored (``StaleLookupAnswer``), not a violation.
* An answer with nothing pending, or a message the access point never sends to a peer, is a
  protocol violation: the session ends with a ``LinkError`` frame to send before closing.
  ``Goodbye`` and ``LinkError`` from the access point end the session; a ``Goodbye`` from a
  super-peer that leaves names the one that now keeps the peer's state (``Ended.successor``).
* Timers (time is an argument): the handshake (``Welcome`` and the identification) must complete
  within ``timeout`` of the ``Hello``, and the oldest pending request must be answered within
  ``timeout`` of being sent. A stuck or half-open connection cannot be told from a dead one, so
  the session ends and the client reconnects. A look-up must be answered within
  ``locate_timeout``; when it is not, only the look-up fails (``LookupExpired``): a slow backbone
  says nothing about this connection, and the answer is only worth something now.
* Ending a session returns the requests and look-ups that were sent and never answered: a
  request's outcome is unknown (the access point may have applied it), which the caller must say
  to its user; a look-up changed nothing and simply has no answer.

After every (re)connection the peer re-sends its whole state (``plan_resend``): re-sending is
idempotent for the access point and repairs one that lost its state.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from cryptography.hazmat.primitives.asymmetric import rsa

import crypto
import qel
from wire import codec
from wire import messages as m
from wire.acknowledging import DelayedAck
from wire.codec import DEFAULT_WIRE_LIMITS, WireError, WireLimits
from wire.framing import Link, Received, frame
from wire.requests import Request, request_label

T = TypeVar("T")
ResourceMessage = m.UploadWanted | m.FileReady | m.FileChunk | m.FetchFailed
LookupAnswer = m.Located | m.Refused
AUTH_MESSAGES: Final = tuple(crypto.MESSAGE_TYPES.values())
UNKNOWN_IDENTIFIER: Final = "unknown_identifier"
MAX_REASON_CHARS: Final = 300
_OPERATOR_HINTS: Final = {
    "already_registered": (
        "this key is registered there, but the peer holds no private identifier from it (lost, "
        "or replaced by a registration elsewhere): the super-peer's operator must forget the "
        "registration (`superpeer forget-peer ID`), or the peer needs a new key (`peer keygen --force`)"
    ),
    "bad_private_identifier": (
        "the stored private identifier is not the one it issued: the super-peer's operator must "
        "forget the registration (`superpeer forget-peer ID`), or the peer needs a new key "
        "(`peer keygen --force`)"
    ),
}


class SessionError(RuntimeError):
    """Local misuse: a request before the session is established, or after it ended."""


class RequestTooLarge(ValueError):
    """The request does not fit the wire's limits; the access point would refuse the frame and
    drop the connection, so it is refused here, before it is sent."""


@dataclass(frozen=True, slots=True)
class Registration:
    """A private identifier and the node id of the access point that issued it, its only
    legitimate recipient. ``repr`` never shows the secret (``crypto.PrivateIdentifier``)."""

    private_identifier: crypto.PrivateIdentifier
    issued_by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Identification:
    """What secure identification on one TLS connection needs: the peer's key, what the TLS
    handshake authenticated about the access point (``crypto.peer_fingerprint``;
    ``crypto.verified_peer_certificate_node_id``, None when the key was pinned), and the
    registration the peer holds, if any."""

    key: rsa.RSAPrivateKey
    server_fingerprint: str
    server_node_id: str | None
    registration: Registration | None
    """The latest registration (the one a new registration replaces)."""
    earlier: Mapping[str, Registration] = field(default_factory=dict)
    """Registrations with access points the peer was attached to before, by issuer."""


@dataclass(frozen=True, slots=True)
class Established:
    """The session accepts requests. ``registered``: None without identification (plaintext),
    else whether the peer registered on this connection (False: it identified)."""

    superpeer_id: str
    address: str
    registered: bool | None = None
    alternates: tuple[str, ...] = ()
    """The other super-peers its ``Welcome`` named (``peer.client``)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Handshake bytes to send now (``auth.register`` or ``auth.identify``)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Store:
    """The access point registered the peer: store ``registration`` durably (it replaces the one
    issued by ``replaces``, if not None), then send what ``Session.stored`` returns."""

    registration: Registration
    replaces: str | None


@dataclass(frozen=True, slots=True)
class Forget:
    """``issued_by`` no longer knows the peer's private identifier: delete the registration (the
    next connection registers again). The session's ``Ended`` follows."""

    issued_by: str


@dataclass(frozen=True, slots=True)
class Notified:
    notify: m.Notify


@dataclass(frozen=True, slots=True)
class Answered(Generic[T]):
    """The answer to the oldest pending request, ``token`` (what the caller passed to ``send``);
    ``expected`` is the label this side computed for it."""

    token: T
    answer: m.Ack | m.Refused
    expected: str


@dataclass(frozen=True, slots=True)
class LookupAnswered(Generic[T]):
    """The answer to the look-up ``token`` (what the caller passed to ``send``): ``Located``,
    or ``Refused`` (e.g. too many look-ups waiting at the access point)."""

    token: T
    answer: LookupAnswer


@dataclass(frozen=True, slots=True)
class LookupExpired(Generic[T]):
    """The look-up ``token`` had no answer within ``locate_timeout``; the session forgot it (an
    answer arriving later is a ``StaleLookupAnswer``). The connection is not in question."""

    token: T
    reason: str


@dataclass(frozen=True, slots=True)
class StaleLookupAnswer:
    """An answer to a look-up this session does not wait for: it expired, or it was asked on an
    earlier connection. Ignored; for the logs."""

    answer: LookupAnswer


@dataclass(frozen=True, slots=True)
class ExpiredNotice:
    """The access point had to drop ``count`` notifications kept for the peer (``reason``)."""

    count: int
    reason: str


@dataclass(frozen=True, slots=True)
class ResourceTraffic:
    """A message about a resource transfer (``peer.resources``): asked to upload, a file ready
    to collect, its bytes, a fetch that failed. Not answers: they come at any time."""

    message: ResourceMessage


@dataclass(frozen=True, slots=True)
class Clocked:
    """The access point's clock spoke (its ``Welcome``, or a ``Clock``): the client measures the
    offset with its wall time now (``clocks.sample_of``) and keeps the access point's hybrid
    time (``clocks``, rule 6). A ``Clock`` is answered at once (``Session.clock_answer``)."""

    message: m.Welcome | m.Clock


@dataclass(frozen=True, slots=True)
class Ended:
    """The session is over; send ``reply`` (may be empty) and close the connection. ``refusal``
    is the rejection code when the access point refused the identification; ``successor`` the
    address of the super-peer that adopted the peer when its access point left."""

    reason: str
    reply: bytes = b""
    refusal: str | None = None
    successor: str = ""


Event = (
    Established
    | Reply
    | Store
    | Forget
    | Notified
    | Answered[T]
    | LookupAnswered[T]
    | LookupExpired[T]
    | StaleLookupAnswer
    | ExpiredNotice
    | ResourceTraffic
    | Clocked
    | Ended
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A request encoded and checked against the limits, ready to be sent."""

    message: Request
    label: str
    data: bytes


def new_lookup_id() -> str:
    """A fresh look-up id: random rather than a counter, so that an answer to a look-up of an
    earlier connection (or of a daemon that was restarted) can never be taken for the answer to
    a new one."""
    return secrets.token_hex(8)


@dataclass(slots=True)
class _Pending(Generic[T]):
    token: T
    label: str
    deadline: float


@dataclass(slots=True)
class _Lookup(Generic[T]):
    token: T
    public_id: str
    deadline: float


class Session(Generic[T]):
    """One connection's protocol state; ``T`` is whatever the caller uses to track a request.
    With ``identification`` (a TLS connection), ``peer_id`` must be the key's public identifier."""

    def __init__(
        self,
        peer_id: str,
        *,
        limits: WireLimits = DEFAULT_WIRE_LIMITS,
        timeout: float = 30.0,
        locate_timeout: float = 10.0,
        identification: Identification | None = None,
        silence: float | None = None,
        ack_every: int = 16,
        ack_delay: float = 0.0,
    ) -> None:
        if identification is not None and crypto.public_identifier(identification.key) != peer_id:
            raise ValueError("with identification, the peer id is the key's public identifier")
        self.peer_id = peer_id
        self.limits = limits
        self.timeout = timeout
        self.locate_timeout = locate_timeout
        self.silence = silence
        """An access point that sends ``Clock`` s and has sent nothing for this long is gone
        (a path that vanished: no reset comes); None: wait for the kernel's keepalive."""
        self._silent_at: float | None = None
        self._clocked = False
        self._link = Link(accepting=False, limits=limits)
        self._pending: deque[_Pending[T]] = deque()
        self._lookups: dict[str, _Lookup[T]] = {}
        self._handshake_deadline: float | None = None
        self._identification = identification
        self._welcome: m.Welcome | None = None
        self._prover: crypto.Prover | None = None
        self._challenger: str | None = None
        self._identifying_with: Registration | None = None
        self._identified = False
        self._leaving = False
        self._ended = False
        self._owed = DelayedAck(ack_every, ack_delay)
        """Notifications stored and not acknowledged yet (``delivered``); ``ack_every`` must stay
        below the access point's window (``[delivery] window``, 64), which it refills only on
        a ``Delivered``."""
        self._owed_through = 0

    @property
    def established(self) -> bool:
        identified = self._identification is None or self._identified
        return self._link.open and identified and not self._ended

    @property
    def welcomed(self) -> bool:
        """Whether the access point answered the ``Hello`` (whatever came of it after)."""
        return self._welcome is not None or self._identified

    @property
    def identifying(self) -> bool:
        """Welcomed, and the identification is under way."""
        return self._welcome is not None and not self._identified and not self._ended

    def hello(self, now: float, *, wall: float = 0.0, clock: float = 0.0) -> bytes:
        """The ``Hello`` frame: with the peer's ``wall`` time (echoed by the ``Welcome``) and the
        latest hybrid time an access point gave it (``clocks``, rule 6)."""
        self._handshake_deadline = now + self.timeout
        hello = m.Hello(
            role="peer",
            node_id=self.peer_id,
            address="",
            protocol=codec.PROTOCOL_VERSION,
            wall=wall,
            clock=clock,
        )
        return self._frame(hello)

    def clock_answer(self, clock: m.Clock, wall: float, held: float = 0.0) -> bytes:
        """The answer to the access point's ``Clock``: the peer's ``wall`` time, echoing it
        (empty once the session has ended)."""
        if self._ended:
            return b""
        return self._frame(m.Clock(wall=wall, echo=clock.wall, held=held))

    def prepare(self, message: Request) -> Outgoing:
        """Encodes ``message`` and checks that an access point with the same limits accepts it
        (by decoding it as the access point would); raises ``RequestTooLarge`` otherwise."""
        try:
            payload = codec.encode(message)
            codec.decode(payload, self.limits)
            data = frame(payload, self.limits)
        except WireError as error:
            raise RequestTooLarge(f"the request is too large for the network: {error}") from None
        return Outgoing(message, request_label(message), data)

    def send(self, outgoing: Outgoing, token: T, now: float) -> bytes:
        """The bytes to write for ``outgoing``; its answer will complete ``token``."""
        if not self.established or self._leaving:
            raise SessionError("requests need an established session the peer has not left")
        message = outgoing.message
        if isinstance(message, m.Locate):
            if message.id in self._lookups:
                raise SessionError(f"a look-up with id {message.id!r} is already waiting")
            deadline = now + self.locate_timeout
            self._lookups[message.id] = _Lookup(token, message.public_id, deadline)
        else:
            self._pending.append(_Pending(token, outgoing.label, now + self.timeout))
        return self.delivered_now() + outgoing.data

    @property
    def ended(self) -> bool:
        """Whether the session ended: nothing more is read or sent on it."""
        return self._ended

    def leave(self) -> bytes:
        """The ``Leave`` frame. No answer comes and nothing more may be sent, but the answers to
        earlier requests (and notifications) are still read until the access point closes."""
        if not self.established or self._leaving:
            raise SessionError("leaving needs an established session the peer has not left")
        self._leaving = True
        return self._frame(m.Leave())

    def receive_data(self, data: bytes, now: float | None = None) -> list[Event[T]]:
        """The events ``data`` makes; ``now`` (when the caller gives it) keeps the silence
        deadline (``silence``) moving."""
        if self._ended:
            raise SessionError("the session has ended")
        if now is not None and self._clocked and self.silence is not None:
            self._silent_at = now + self.silence
        events: list[Event[T]] = []
        for item in self._link.receive_data(data):
            if not isinstance(item, Received):
                handshake = self._handshake_deadline is not None
                stage = "handshake failed" if handshake else "protocol violation"
                events.append(self._end(f"{stage}: {item.reason}", item.reply))
                break
            handled = self._handle(item.message)
            events += handled
            if handled and isinstance(handled[-1], Ended):
                break
        return events

    def stored(self) -> bytes:
        """The ``auth.confirm`` frame, once the client has stored the registration of ``Store``
        durably (never before: the access point keeps it on confirmation). Empty when the session
        has ended since (a later frame of the same read ended it): nothing is confirmed, and the
        access point keeps nothing unconfirmed."""
        prover = self._prover
        if prover is None or prover.state is not crypto.ProverState.AWAIT_STORED:
            raise SessionError("stored() follows a Store event, once")
        if self._ended:
            return b""
        return self._frame(prover.confirm())

    def delivered(self, notify: m.Notify, now: float, count: int = 1) -> bytes:
        """``notify`` (the last of ``count`` stored together) is durably in the inbox: the
        ``Delivered`` frame to send if one is owed at ``now``, else empty (it waits: the module
        docstring; also empty when the access point does not number its notifications or the
        session has ended)."""
        if notify.delivery <= 0 or self._ended:
            return b""
        self._owed_through = max(self._owed_through, notify.delivery)
        self._owed.note(now, count)
        return self.delivered_due(now)

    def _handle(self, message: object) -> list[Event[T]]:
        if isinstance(message, m.Goodbye):
            ended = self._end(f"the access point said goodbye ({message.reason})")
            return [Ended(ended.reason, ended.reply, ended.refusal, message.successor)]
        if isinstance(message, m.LinkError):
            return [self._end(f"the access point reported an error: {message.reason}")]
        if isinstance(message, m.Welcome):
            clocked: list[Event[T]] = [Clocked(message)] if message.wall or message.clock else []
            if self._identification is not None:
                self._welcome = message
                return clocked
            self._handshake_deadline = None
            established = Established(
                message.node_id, message.address, alternates=message.alternates
            )
            return [*clocked, established]
        if isinstance(message, m.Clock) and self.established:
            self._clocked = True  # it speaks at least every few seconds: silence means gone
            return [Clocked(message)]
        if self.identifying:
            return self._identify(message)
        return [self._request_traffic(message)]

    def transfer(self, message: m.Upload | m.Collect | m.Collected) -> bytes:
        """The frame of a transfer message (not answered; empty once the session has ended)."""
        if not self.established or self._ended:
            return b""
        return self._frame(message)

    def _request_traffic(self, message: object) -> Event[T]:
        if isinstance(message, m.Notify):
            return Notified(message)
        if isinstance(message, m.Expired):
            return ExpiredNotice(message.count, message.reason[:MAX_REASON_CHARS])
        if isinstance(message, m.Located):
            return self._lookup_answer(message.id, message)
        if isinstance(message, m.UploadWanted | m.FileReady | m.FileChunk | m.FetchFailed):
            return ResourceTraffic(message)
        if isinstance(message, m.Refused) and message.request.startswith("locate "):
            return self._lookup_answer(message.request.removeprefix("locate "), message)
        if isinstance(message, m.Ack | m.Refused):
            if not self._pending:
                return self._violation(
                    f"{message.KIND} {message.request!r} with no request pending"
                )
            pending = self._pending.popleft()
            return Answered(pending.token, message, pending.label)
        return self._violation(f"unexpected {type(message).KIND} from the access point")  # type: ignore[attr-defined]

    def _lookup_answer(self, lookup_id: str, answer: LookupAnswer) -> Event[T]:
        lookup = self._lookups.pop(lookup_id, None)
        if lookup is None:
            return StaleLookupAnswer(answer)
        return LookupAnswered(lookup.token, answer)

    # -- identification -----------------------------------------------------------------------
    def _identify(self, message: object) -> list[Event[T]]:
        kind = getattr(type(message), "KIND", type(message).__name__)
        if not isinstance(message, AUTH_MESSAGES):
            return [self._violation(f"{kind} before the identification completed")]
        if self._prover is None:
            if isinstance(message, crypto.Rejected):
                return self._refused(str(message.code), str(message.reason))
            if not isinstance(message, crypto.Challenge):
                return [self._violation(f"{kind} before the access point's challenge")]
            self._prover = self._new_prover(message)
        try:
            outputs = self._prover.receive(message)
        except crypto.RemoteProtocolError as error:
            return [self._violation(f"identification failed: {error}")]
        events: list[Event[T]] = []
        for output in outputs:
            if isinstance(output, crypto.Send):
                events.append(Reply(self._frame(output.message)))
            elif isinstance(output, crypto.IdentifierIssued):
                assert self._challenger is not None and self._identification is not None
                held = self._identification.registration
                events.append(
                    Store(
                        Registration(output.private_identifier, self._challenger),
                        replaces=held.issued_by if held is not None else None,
                    )
                )
            elif isinstance(output, crypto.Identified):
                self._identified = True
                self._handshake_deadline = None
                assert self._welcome is not None
                events.append(
                    Established(
                        output.verifier_id,
                        self._welcome.address,
                        output.registered,
                        self._welcome.alternates,
                    )
                )
            else:
                assert isinstance(output, crypto.Refused)
                events += self._refused(output.code, output.reason)
        return events

    def _new_prover(self, challenge: crypto.Challenge) -> crypto.Prover:
        """Identify with the registration if the challenger issued it, else register. The
        ``Prover`` then checks the challenge against the TLS channel (and, identifying, that it
        comes from the issuer), so the private identifier only ever goes to its issuer."""
        identification = self._identification
        assert identification is not None
        held = identification.registration
        if held is not None and held.issued_by == challenge.verifier_id:
            self._identifying_with = held
        else:
            self._identifying_with = identification.earlier.get(str(challenge.verifier_id))
        self._challenger = str(challenge.verifier_id)
        using = self._identifying_with
        return crypto.Prover(
            identification.key,
            verifier_fingerprint=identification.server_fingerprint,
            verifier_node_id=identification.server_node_id,
            private_identifier=using.private_identifier if using is not None else None,
            issued_by=using.issued_by if using is not None else None,
        )

    def _refused(self, code: str, reason: str) -> list[Event[T]]:
        text = f"the access point refused the identification ({code}): {reason[:MAX_REASON_CHARS]}"
        events: list[Event[T]] = []
        if code == UNKNOWN_IDENTIFIER and self._identifying_with is not None:
            events.append(Forget(self._identifying_with.issued_by))
            text += "; the peer registers again on the next connection"
        elif code in _OPERATOR_HINTS:
            text += f"; {_OPERATOR_HINTS[code]}"
        return [*events, self._end(text, refusal=code)]

    def get_timer(self) -> float | None:
        """When ``handle_timer`` must next be called, or None if nothing is waited for."""
        if self._ended:
            return None
        deadlines = [] if self._handshake_deadline is None else [self._handshake_deadline]
        if self._pending:
            deadlines.append(self._pending[0].deadline)
        deadlines += (lookup.deadline for lookup in self._lookups.values())
        if self._silent_at is not None:
            deadlines.append(self._silent_at)
        if self._owed.deadline is not None:
            deadlines.append(self._owed.deadline)
        return min(deadlines, default=None)

    def handle_timer(self, now: float) -> list[Event[T]]:
        """What the deadlines passed at ``now`` mean: ``[Ended]`` when the handshake or the
        oldest request took too long, else a ``LookupExpired`` per look-up that did, and a
        ``Reply`` with the ``Delivered`` owed by now."""
        if self._ended:
            return []
        if self._handshake_deadline is not None and now >= self._handshake_deadline:
            if self._welcome is not None:
                return [
                    self._end(
                        f"the access point did not complete the identification within "
                        f"{self.timeout:g} s"
                    )
                ]
            return [self._end(f"no welcome from the access point within {self.timeout:g} s")]
        if self._pending and now >= self._pending[0].deadline:
            label = self._pending[0].label
            return [
                self._end(f"no answer to {label!r} from the access point within {self.timeout:g} s")
            ]
        if self._silent_at is not None and now >= self._silent_at:
            return [self._end(f"the access point has said nothing for {self.silence:g} s")]
        expired = [name for name, lookup in self._lookups.items() if now >= lookup.deadline]
        events: list[Event[T]] = [self._expire(name) for name in expired]
        if delivered := self.delivered_due(now):
            events.append(Reply(delivered))
        return events

    def _expire(self, lookup_id: str) -> LookupExpired[T]:
        lookup = self._lookups.pop(lookup_id)
        return LookupExpired(
            lookup.token,
            f"no answer from the network to the look-up of {lookup.public_id} within "
            f"{self.locate_timeout:g} s (locate_timeout)",
        )

    def close(self) -> list[T]:
        """Ends the session; returns the requests sent and never answered, oldest first, then
        the look-ups never answered."""
        self._ended = True
        self._link.close()
        unanswered = [p.token for p in self._pending]
        unanswered += [lookup.token for lookup in self._lookups.values()]
        self._pending.clear()
        self._lookups.clear()
        return unanswered

    def _violation(self, reason: str) -> Ended:
        return self._end(f"protocol violation: {reason}", self._frame(m.LinkError(reason=reason)))

    def _frame(self, message: object) -> bytes:
        """What the session sends, framed, after the ``Delivered`` owed if any. Not
        ``Link.send``: the link closes as soon as it reads a broken frame, and a message read
        before it in the same chunk is still answered (a handshake ``Reply``, a ``LinkError``)
        before the session ends."""
        return self.delivered_now() + frame(codec.encode(message), self.limits)

    @property
    def delivered_deadline(self) -> float | None:
        """When a ``Delivered`` falls owed by time (None: none waits). ``get_timer`` counts it;
        a client that runs no other timer watches this one alone."""
        return self._owed.deadline

    def delivered_due(self, now: float) -> bytes:
        """The ``Delivered`` frame owed by ``now`` (``handle_timer`` gives it too), or empty."""
        return self._delivered_frame() if self._owed.take(now) else b""

    def delivered_now(self) -> bytes:
        """The ``Delivered`` for what waits, ahead of its time (another frame goes: it takes it
        along first; the connection closes), or empty when nothing waits."""
        if not self._owed.waiting:
            return b""
        self._owed.clear()
        return self._delivered_frame()

    def farewell(self) -> bytes:
        """The last frame of a peer that stops while connected: a ``Delivered`` for everything
        stored on this session, whether its own ``Delivered`` waited for more or sat unwritten
        in the caller's queue (one cumulative frame covers both; the access point ignores what
        it already had). Without it the access point sends that mail again on the next
        connection. Empty when nothing was stored, or the session ended (a goodbye, an error:
        the access point reads no more)."""
        if self._ended or not self._owed_through:
            return b""
        self._owed.clear()
        return self._delivered_frame()

    def _delivered_frame(self) -> bytes:
        return frame(codec.encode(m.Delivered(through=self._owed_through)), self.limits)

    def _end(self, reason: str, reply: bytes = b"", *, refusal: str | None = None) -> Ended:
        self._ended = True
        self._link.close()
        return Ended(reason, reply, refusal)


def plan_resend(
    advertisement: qel.Advertisement,
    subscriptions: Mapping[str, qel.Subscription],
    withdraw: Iterable[str],
    *,
    expires: Mapping[str, float] | None = None,
    axioms: frozenset[qel.Axiom] = frozenset(),
    on_change: frozenset[str] = frozenset(),
    active_since: Mapping[str, float] | None = None,
    withdrawn: Mapping[str, tuple[qel.Subscription, float, float]] | None = None,
    kept: Sequence[m.Publish] = (),
) -> list[Request]:
    """What to send after every (re)connection, in order: the advertisement first (an empty one if
    the peer never advertised, which also withdraws one whose ``Advertise`` was left in doubt),
    the union of the schemas it published (``axioms``; nothing if none), then withdrawals of the
    subscriptions left in doubt (``withdraw``; an id that is subscribed again is not withdrawn),
    then every subscription, by id, with its expiry (``expires``), whether it hears of every
    extension (``on_change``, the ids made with ``--on change``) and from when an access point
    had it active (``active_since``: ``Subscribe.active_since``). The recent withdrawals
    (``withdrawn``: subscription, active since, withdrawn at) are told again with their windows
    before the subscriptions (an id subscribed again is not: ``Unsubscribe.subscription``).
    Last, the publications one super-peer alone acknowledged (``kept``: ``peer.kept``), once the
    access point has the subscriptions they may match: a repeat at their origin, the second copy
    anywhere else (a move statement, if any, comes after the whole plan)."""
    deadlines = expires or {}
    activations = active_since or {}
    withdraw = set(withdraw)
    plan: list[Request] = [m.Advertise(advertisement=advertisement)]
    if axioms:
        plan.append(m.PublishSchema(axioms=tuple(sorted(axioms, key=repr))))
    plan += [m.Unsubscribe(id=name) for name in sorted(withdraw - set(subscriptions))]
    plan += _withdrawals_told_again(withdrawn or {}, set(subscriptions) | withdraw)
    plan += [
        m.Subscribe(
            id=name,
            subscription=s,
            expires=deadlines.get(name),
            on_change=name in on_change,
            active_since=activations.get(name, 0.0),
        )
        for name, s in sorted(subscriptions.items())
    ]
    plan += kept
    return plan


def _withdrawals_told_again(
    withdrawn: Mapping[str, tuple[qel.Subscription, float, float]], excluded: set[str]
) -> list[m.Unsubscribe]:
    """The recent withdrawals (subscription, active since, withdrawn at), by id, as told again
    after a connection (``Unsubscribe.subscription``); not those in ``excluded`` (an id
    subscribed again, or one whose withdrawal is in doubt)."""
    return [
        m.Unsubscribe(id=name, subscription=query, active_since=made, withdrawn_at=ended)
        for name, (query, made, ended) in sorted(withdrawn.items())
        if name not in excluded
    ]


class Backoff:
    """Capped exponential backoff with "equal jitter": the n-th delay is uniform in
    [b/2, b] with b = min(maximum, initial * 2**n), so peers that lost the same super-peer do not
    all come back at the same instant. ``random`` returns floats in [0, 1)."""

    def __init__(self, initial: float, maximum: float, random: Callable[[], float]) -> None:
        self.initial = initial
        self.maximum = maximum
        self._random = random
        self._base = initial

    def next_delay(self) -> float:
        base = self._base
        self._base = min(self.maximum, base * 2)
        return base / 2 + base / 2 * self._random()

    def reset(self) -> None:
        """After a successful connection: the next failure starts from ``initial`` again."""
        self._base = self.initial
