"""The peer's end of one connection to its access point, sans-IO: bytes in, events out.

The trio client (``peer.client``) owns the socket and the clock and drives a ``Session``; every
protocol decision is here, in plain synchronous code. The rules, from the access point's contract:

* The peer connects and sends ``Hello(role="peer", node_id=<peer id>)``; the access point answers
  ``Welcome`` (the session is *established*) or ``LinkError`` and closes.
* After ``Welcome``, the access point sends ``Notify`` frames at any time, and exactly one answer
  (``Ack`` or ``Refused``) per request, in the order the requests were sent. The session keeps the
  requests sent and not yet answered in a FIFO and each answer completes the oldest; the answer's
  ``request`` label is only compared with the expected one for the logs (labels are descriptive,
  the order is the contract). ``Leave`` has no answer.
* An answer with nothing pending, or a message the access point never sends to a peer, is a
  protocol violation: the session ends with a ``LinkError`` frame to send before closing.
  ``Goodbye`` and ``LinkError`` from the access point end the session.
* Timers (time is an argument): the ``Welcome`` must come within ``timeout`` of the ``Hello``, and
  the oldest pending request must be answered within ``timeout`` of being sent. A stuck or
  half-open connection cannot be told from a dead one, so the session ends and the client
  reconnects.
* Ending a session returns the requests that were sent and never answered: their outcome is
  unknown (the access point may have applied them), which the caller must say to its user.

After every (re)connection the peer re-sends its whole state (``plan_resend``): re-sending is
idempotent for the access point and repairs one that lost its state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import qel
from wire import codec
from wire import messages as m
from wire.codec import DEFAULT_WIRE_LIMITS, WireError, WireLimits
from wire.framing import Link, Received, frame

T = TypeVar("T")
Request = m.Advertise | m.Subscribe | m.Unsubscribe | m.Publish


class SessionError(RuntimeError):
    """Local misuse: a request before the session is established, or after it ended."""


class RequestTooLarge(ValueError):
    """The request does not fit the wire's limits; the access point would refuse the frame and
    drop the connection, so it is refused here, before it is sent."""


@dataclass(frozen=True, slots=True)
class Established:
    superpeer_id: str
    address: str


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
class Ended:
    """The session is over; send ``reply`` (may be empty) and close the connection."""

    reason: str
    reply: bytes = b""


Event = Established | Notified | Answered[T] | Ended


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A request encoded and checked against the limits, ready to be sent."""

    message: Request
    label: str
    data: bytes


def request_label(message: Request) -> str:
    """The label the access point uses for a request in its answer."""
    if isinstance(message, m.Advertise):
        return "advertise"
    if isinstance(message, m.Subscribe):
        return f"subscribe {message.id}"
    if isinstance(message, m.Unsubscribe):
        return f"unsubscribe {message.id}"
    return f"publish {message.publication.id}"


@dataclass(slots=True)
class _Pending(Generic[T]):
    token: T
    label: str
    deadline: float


class Session(Generic[T]):
    """One connection's protocol state; ``T`` is whatever the caller uses to track a request."""

    def __init__(
        self, peer_id: str, *, limits: WireLimits = DEFAULT_WIRE_LIMITS, timeout: float = 30.0
    ) -> None:
        self.peer_id = peer_id
        self.limits = limits
        self.timeout = timeout
        self._link = Link(accepting=False, limits=limits)
        self._pending: deque[_Pending[T]] = deque()
        self._handshake_deadline: float | None = None
        self._leaving = False
        self._ended = False

    @property
    def established(self) -> bool:
        return self._link.open and not self._ended

    def hello(self, now: float) -> bytes:
        self._handshake_deadline = now + self.timeout
        return self._link.send(
            m.Hello(role="peer", node_id=self.peer_id, address="", protocol=codec.PROTOCOL_VERSION)
        )

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
        self._pending.append(_Pending(token, outgoing.label, now + self.timeout))
        return outgoing.data

    def leave(self) -> bytes:
        """The ``Leave`` frame. No answer comes and nothing more may be sent, but the answers to
        earlier requests (and notifications) are still read until the access point closes."""
        if not self.established or self._leaving:
            raise SessionError("leaving needs an established session the peer has not left")
        self._leaving = True
        return self._link.send(m.Leave())

    def receive_data(self, data: bytes, now: float) -> list[Event[T]]:
        if self._ended:
            raise SessionError("the session has ended")
        events: list[Event[T]] = []
        for item in self._link.receive_data(data):
            if not isinstance(item, Received):
                handshake = self._handshake_deadline is not None
                stage = "handshake failed" if handshake else "protocol violation"
                events.append(self._end(f"{stage}: {item.reason}", item.reply))
                break
            event = self._handle(item.message)
            events.append(event)
            if isinstance(event, Ended):
                break
        return events

    def _handle(self, message: object) -> Event[T]:
        if isinstance(message, m.Welcome):
            self._handshake_deadline = None
            return Established(message.node_id, message.address)
        if isinstance(message, m.Notify):
            return Notified(message)
        if isinstance(message, m.Ack | m.Refused):
            if not self._pending:
                return self._violation(
                    f"{message.KIND} {message.request!r} with no request pending"
                )
            pending = self._pending.popleft()
            return Answered(pending.token, message, pending.label)
        if isinstance(message, m.Goodbye):
            return self._end(f"the access point said goodbye ({message.reason})")
        if isinstance(message, m.LinkError):
            return self._end(f"the access point reported an error: {message.reason}")
        return self._violation(f"unexpected {type(message).KIND} from the access point")  # type: ignore[attr-defined]

    def get_timer(self) -> float | None:
        """When ``handle_timer`` must next be called, or None if nothing is waited for."""
        if self._ended:
            return None
        deadlines = [d for d in (self._handshake_deadline,) if d is not None]
        if self._pending:
            deadlines.append(self._pending[0].deadline)
        return min(deadlines, default=None)

    def handle_timer(self, now: float) -> Ended | None:
        if self._ended:
            return None
        if self._handshake_deadline is not None and now >= self._handshake_deadline:
            return self._end(f"no welcome from the access point within {self.timeout:g} s")
        if self._pending and now >= self._pending[0].deadline:
            label = self._pending[0].label
            return self._end(
                f"no answer to {label!r} from the access point within {self.timeout:g} s"
            )
        return None

    def close(self) -> list[T]:
        """Ends the session; returns the requests sent and never answered, oldest first."""
        self._ended = True
        self._link.close()
        unanswered = [p.token for p in self._pending]
        self._pending.clear()
        return unanswered

    def _violation(self, reason: str) -> Ended:
        return self._end(
            f"protocol violation: {reason}",
            frame(codec.encode(m.LinkError(reason=reason)), self.limits),
        )

    def _end(self, reason: str, reply: bytes = b"") -> Ended:
        self._ended = True
        self._link.close()
        return Ended(reason, reply)


def plan_resend(
    advertisement: qel.Advertisement,
    subscriptions: Mapping[str, qel.Subscription],
    withdraw: Iterable[str],
) -> list[Request]:
    """What to send after every (re)connection, in order: the advertisement first (an empty one if
    the peer never advertised, which also withdraws one whose ``Advertise`` was left in doubt),
    then withdrawals of the subscriptions left in doubt, then every subscription, by id."""
    plan: list[Request] = [m.Advertise(advertisement=advertisement)]
    plan += [m.Unsubscribe(id=name) for name in sorted(set(withdraw))]
    plan += [m.Subscribe(id=name, subscription=s) for name, s in sorted(subscriptions.items())]
    return plan


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
