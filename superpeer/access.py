"""The access point's end of one peer connection, sans-IO: messages in, events out (the mirror of
``peer.session.Session``).

The runtime accepts a connection, runs TLS, decodes frames with ``wire.framing.Link`` and feeds
every decoded message here; ``SuperPeerNode`` owns one ``AccessPointSession`` per connection and
turns its events into actions. The rules:

* **One deadline for the whole admission**: TLS, ``Hello`` and identification must complete within
  ``admission_seconds`` of the connection being accepted (``opened_at``); a connection that never
  identifies is closed then (``get_timer`` / ``handle_timer``), whatever it sends or does not send.
* ``Hello`` must come first, say ``role="peer"``, speak this protocol version and name the peer;
  the node decides whether it serves peers now (``admit``), else the session ends with a
  ``LinkError`` that says why. The ``Welcome`` carries this node's wall time, echoes the
  ``Hello``'s (the peer measures the offset at once) and gives the node's hybrid time, after
  absorbing the one the peer carried (``clocks``, rule 6).
* With identification (a TLS network), ``Welcome`` is followed by the ``crypto.Verifier``'s
  challenge; a ``Register`` / ``Identify`` must name the peer the ``Hello`` named (refused before
  the verifier sees it, so no record is made for another key); the session is *established* when
  the verifier accepts. Without identification (plaintext), ``Welcome`` establishes it.
* After establishment every message is a request for the node (``Request``); before it, anything
  but the identification is a violation.
* Any violation, by the remote side's fault, ends this session only: ``Ended`` carries the
  ``LinkError`` to send before closing. The node never raises for what a connection sent.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import crypto
from clocks import HybridClock
from wire import codec
from wire import messages as m


class AccessState(enum.Enum):
    AWAIT_HELLO = "await_hello"
    IDENTIFYING = "identifying"
    ESTABLISHED = "established"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class Reply:
    """Send ``message`` on this connection."""

    message: object


@dataclass(frozen=True, slots=True)
class Established:
    """The connection speaks for ``peer`` (its public identifier with TLS, its name without);
    ``registered`` says whether it registered on this connection (None without identification)."""

    peer: str
    registered: bool | None


@dataclass(frozen=True, slots=True)
class Request:
    message: object
    size: int
    message_id: str


@dataclass(frozen=True, slots=True)
class Ended:
    """Close the connection after sending ``reply`` (if any). ``auth_failure`` is the rejection
    code when identification failed (for counting and tracing), with ``who``: the identifier the
    connection claimed."""

    reason: str
    reply: object | None = None
    auth_failure: str | None = None
    who: str | None = None


Event = Reply | Established | Request | Ended


class AccessPointSession:
    """One peer connection at the access point. ``verifier`` makes the ``crypto.Verifier`` for
    the connection (None on a plaintext network); ``admit`` says why the node cannot take a peer
    now (None when it can)."""

    def __init__(
        self,
        connection: int,
        remote: str,
        *,
        node_id: str,
        address: str,
        opened_at: float,
        admission_seconds: float,
        verifier: Callable[[], crypto.Verifier] | None,
        admit: Callable[[m.Hello], str | None],
        clock: HybridClock | None = None,
        missing_since: Callable[[str], float | None] = lambda _: None,
        alternates: Callable[[], tuple[str, ...]] = tuple,
    ) -> None:
        self.connection = connection
        self.remote = remote
        self.node_id = node_id
        self.address = address
        self.deadline = opened_at + admission_seconds
        self._make_verifier = verifier
        self._admit = admit
        self._clock = clock if clock is not None else HybridClock()
        self._missing_since = missing_since
        self._alternates = alternates
        self._verifier: crypto.Verifier | None = None
        self._claimed = ""
        self.peer: str | None = None
        self.state = AccessState.AWAIT_HELLO

    @property
    def established(self) -> bool:
        return self.state is AccessState.ESTABLISHED

    def receive(self, message: object, size: int, message_id: str, now: float) -> list[Event]:
        if self.state is AccessState.ENDED:
            return []
        if self.state is AccessState.ESTABLISHED:
            if isinstance(message, m.Hello | m.Welcome):
                return [self._violation(f"{type(message).KIND} after the handshake")]
            return [Request(message, size, message_id)]
        if self.state is AccessState.AWAIT_HELLO:
            if not isinstance(message, m.Hello):
                kind = getattr(type(message), "KIND", type(message).__name__)
                return [self._violation(f"expected link.hello first, got {kind}")]
            return self._hello(message, now)
        return self._identify(message, now)

    def violation(self, reason: str) -> list[Event]:
        """The link decoder found a broken frame (``wire.framing.Violation``)."""
        if self.state is AccessState.ENDED:
            return []
        return [self._violation(reason)]

    def get_timer(self) -> float | None:
        if self.state in (AccessState.AWAIT_HELLO, AccessState.IDENTIFYING):
            return self.deadline
        return None

    def handle_timer(self, now: float) -> list[Event]:
        deadline = self.get_timer()
        if deadline is None or now < deadline:
            return []
        stage = "identify" if self.state is AccessState.IDENTIFYING else "say hello"
        self.state = AccessState.ENDED
        return [
            Ended(
                f"the connection did not {stage} within the admission deadline",
                m.LinkError(reason="admission deadline passed (admission_seconds)"),
                auth_failure="expired" if stage == "identify" else None,
                who=self._claimed or None,
            )
        ]

    def close(self) -> None:
        self.state = AccessState.ENDED

    # -- the handshake ------------------------------------------------------------------------
    def _hello(self, hello: m.Hello, now: float) -> list[Event]:
        if hello.role != "peer":
            return [self._refuse(f"unknown role {hello.role!r} for a peer connection")]
        if not hello.node_id:
            return [self._refuse("a Hello must name its sender")]
        if hello.protocol != codec.PROTOCOL_VERSION:
            return [
                self._refuse(
                    f"this access point speaks protocol {codec.PROTOCOL_VERSION}, the peer "
                    f"{hello.protocol}: run the same version of the software on both"
                )
            ]
        refusal = self._admit(hello)
        if refusal is not None:
            return [self._refuse(refusal)]
        self._claimed = hello.node_id
        if hello.clock:
            self._clock.observe(hello.clock, now)
        welcome = Reply(
            m.Welcome(
                node_id=self.node_id,
                address=self.address,
                wall=now,
                echo=hello.wall,
                clock=self._clock.now(now),
                missing_since=self._missing_since(hello.node_id) or 0.0,
                alternates=self._alternates(),
            )
        )
        if self._make_verifier is None:
            return [welcome, self._establish(hello.node_id, None)]
        self._verifier = self._make_verifier()
        self.state = AccessState.IDENTIFYING
        self.deadline = min(self.deadline, now + _verifier_lifetime(self._verifier, now))
        return [welcome, Reply(self._verifier.challenge(now))]

    def _identify(self, message: object, now: float) -> list[Event]:
        verifier = self._verifier
        assert verifier is not None
        if not isinstance(message, crypto.Register | crypto.Identify | crypto.Confirm):
            kind = getattr(type(message), "KIND", type(message).__name__)
            return [self._violation(f"{kind} before the identification completed")]
        if (
            isinstance(message, crypto.Register | crypto.Identify)
            and message.public_id != self._claimed
        ):
            self.state = AccessState.ENDED
            return [
                Ended(
                    "the Hello named another peer than the key",
                    m.LinkError(reason="the Hello named another peer"),
                    auth_failure="identifier_mismatch",
                    who=self._claimed,
                )
            ]
        events: list[Event] = []
        for output in verifier.receive(message, now):
            if isinstance(output, crypto.Send):
                events.append(Reply(output.message))
            elif isinstance(output, crypto.AuthFailure):
                self.state = AccessState.ENDED
                events.append(
                    Ended(
                        output.reason,
                        None,
                        auth_failure=output.code,
                        who=output.public_id or self._claimed,
                    )
                )
            elif isinstance(output, crypto.PeerAuthenticated):
                events.append(self._establish(output.record.public_id, output.registered))
        return events

    def _establish(self, peer: str, registered: bool | None) -> Established:
        self.peer = peer
        self.state = AccessState.ESTABLISHED
        return Established(peer, registered)

    def _refuse(self, reason: str) -> Ended:
        self.state = AccessState.ENDED
        return Ended(reason, m.LinkError(reason=reason))

    def _violation(self, reason: str) -> Ended:
        self.state = AccessState.ENDED
        return Ended(f"protocol violation: {reason}", m.LinkError(reason=reason))


def _verifier_lifetime(verifier: crypto.Verifier, now: float) -> float:
    deadline = verifier.get_timer()
    return float("inf") if deadline is None else deadline - now
