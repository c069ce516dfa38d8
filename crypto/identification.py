"""Secure identification of a peer by its access point: registration and re-identification, sans-IO.

Both ends run inside a TLS 1.3 channel that already authenticated the super-peer (``crypto.tls``)
and after the link handshake (``link.hello`` / ``link.welcome``). The ``Verifier`` is the access
point's side of one connection, the ``Prover`` the peer's. Neither touches a socket or a clock: the
daemon feeds messages in, sends what comes out, and passes the time (``now``, seconds) in.

Flow
----
::

    verifier                                     prover
    auth.challenge(nonce, verifier_id, fp)  ->
                                            <-   auth.register(public_id, public_key, signature)
    auth.registered(public_id, private_id)  ->   (first contact; the peer stores private_id)
                                            <-   auth.confirm(public_id)
    auth.accepted(public_id)                ->
                                 or
                                            <-   auth.identify(public_id, private_id, signature)
    auth.accepted(public_id)                ->   (re-connection, from any address)

Any failure: ``auth.rejected(code, reason)``, then the daemon closes the connection.

States (the verifier; a transition not in the table is ``unexpected``)::

    IDLE           challenge()                       -> CHALLENGED
    CHALLENGED     auth.register, all checks pass    -> AWAIT_CONFIRM  (sends auth.registered)
    CHALLENGED     auth.identify, all checks pass    -> ACCEPTED       (sends auth.accepted)
    AWAIT_CONFIRM  auth.confirm, record stored       -> ACCEPTED       (sends auth.accepted)
    any open state a check fails / deadline passes   -> REJECTED       (sends auth.rejected)

Transcript (what the prover signs)
----------------------------------
The concatenation of seven fields, each a 4-byte big-endian length followed by its bytes:

1. the context ``b"semantic-pubsub peer identification v1"`` (domain separation: a signature made
   here is useless in any other protocol or version, and vice versa);
2. the purpose, ``b"register"`` or ``b"identify"`` (a registration signature cannot identify);
3. the 32-byte challenge nonce;
4. the verifier's node id (UTF-8);
5. the verifier's key fingerprint (``crypto.tls.fingerprint``: the public identifier of the key
   in its TLS certificate, canonical text, ASCII);
6. the prover's public identifier (canonical text, ASCII);
7. the channel binding: bytes both sides derive from the TLS session, or empty.

Length prefixes make the encoding injective (no two field lists give the same bytes). The
signature is RSA-PSS with SHA-256, MGF1-SHA-256 and the maximum salt length, the scheme the
``cryptography`` documentation recommends for new protocols. The verifier rebuilds the transcript
from its own values (its nonce, id, fingerprint, binding), never from what the response echoes.

What each check defends against
-------------------------------
* Fresh nonce per connection, one response accepted, then the verifier is spent: a response
  captured earlier, or on another connection, was signed over another nonce and fails
  (``bad_signature``); a second response on the same connection is ``unexpected``.
* A deadline (``lifetime`` seconds after the challenge): a challenge cannot be held open while
  someone works on it; ``get_timer`` / ``handle_timer`` let the daemon enforce it.
* The verifier's fingerprint in the transcript, compared by the prover with the key the TLS
  handshake authenticated: a relay (a rogue super-peer with a valid certificate forwarding an
  honest access point's challenge to a peer that connected to it) fails, because the peer refuses
  a challenge naming a key that is not the one it is talking to, and a signature over the rogue's
  fingerprint does not verify at the honest access point. This is the ``tls-server-end-point``
  channel binding of RFC 5929 in effect, and it works with the standard library's ``ssl``, which
  exposes no TLS 1.3 exporter (``tls-unique`` is undefined for TLS 1.3). The ``channel_binding``
  argument carries a real exporter value (RFC 9266) when the TLS stack offers one.
* The prover sends its private identifier only to the access point that issued it, recognised
  by the node id that TLS authenticated (the CA-verified certificate's, or the pinned key's
  holder's word): a rogue super-peer with a valid certificate of its own cannot collect it.
* The public identifier must be the hash of the presented key (register), and the key used for
  ``identify`` is the stored one: knowing a public identifier is not enough to sign for it.
* ``identify`` checks the signature before the private identifier: without the key, nobody learns
  anything about a guessed private identifier, and every answer beyond ``bad_signature`` goes
  only to the key's holder.
* Key policy (RSA, 2048..16384 bits, e = 65537, canonical DER): bounds what a remote peer can make
  the verifier compute, and one key has exactly one identifier.
* Not an oracle: the verifier never signs or decrypts anything, and the prover signs only
  transcripts that start with the context string and name the server key it is talking to (the
  paper's "decrypt my challenge" turned the peer into a decryption oracle for anyone).
* ``Rejected.reason`` and ``AuthFailure`` are built from fixed texts and validated public
  identifiers only: never a private identifier, a signature, or any text the remote side chose
  (which could inject lines into logs).

Registration of a known identifier: rejected
--------------------------------------------
``auth.register`` for an identifier already registered here is ``already_registered``; the peer
must ``identify`` with its private identifier. Allowing it (as "re-registration") would issue a new
private identifier to anyone holding the key file, and so:

* a thief of the key alone could take the record over (collect the stored notifications, change
  the subscriptions) and lock the owner out by replacing its private identifier; requiring both
  the key and the private identifier makes them two factors (a thief needs both files);
* the private identifier would add nothing over the key, contrary to the design.

The risk of refusing is a peer that registered but lost its private identifier (the connection
broke before it stored it) being locked out. The confirmation step removes that risk: the record
is stored only when ``auth.confirm`` arrives, which the peer sends after it has stored the private
identifier durably (``Prover.confirm``). If the connection breaks before, nothing is stored: the
peer's next ``identify`` gets ``unknown_identifier`` and it registers again. A peer that really
lost a confirmed private identifier needs the operator to delete its record (out of band), or a
new key (a new identity). Two concurrent registrations of one key: the second ``auth.confirm``
finds the record present (``Registry.add`` inserts only if absent) and is ``already_registered``.

Rejection codes
---------------
``malformed`` (wrong types, lengths, or not an identifier), ``unexpected`` (a message out of
order), ``expired`` (the deadline passed), ``key_refused`` (the key breaks the policy),
``identifier_mismatch`` (public identifier is not the key's hash), ``bad_signature``,
``already_registered``, ``unknown_identifier``, ``bad_private_identifier``.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar, Final, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from crypto.errors import (
    IdentifierError,
    KeyPolicyError,
    LocalProtocolError,
    RemoteProtocolError,
)
from crypto.identifiers import (
    MAX_NODE_ID_CHARS,
    PRIVATE_BYTES,
    PrivateIdentifier,
    RandomSource,
    check_private_identifier,
    hash_private_identifier,
    parse_public_identifier,
    public_identifier,
)
from crypto.keys import MAX_BITS, MIN_BITS, check_key_policy, load_public_key_der, public_key_der

CONTEXT: Final = b"semantic-pubsub peer identification v1"
REGISTER: Final = "register"
IDENTIFY: Final = "identify"
NONCE_BYTES: Final = 32
DEFAULT_LIFETIME: Final = 30.0
"""Seconds from challenge to the end of the identification: a peer answers in milliseconds; a
slow link or an encrypted key being unlocked fits comfortably."""
MAX_SIGNATURE_BYTES: Final = MAX_BITS // 8
MAX_PUBLIC_KEY_BYTES: Final = 4096
"""The DER SubjectPublicKeyInfo of an RSA-16384 key is about 2,100 bytes."""
MAX_CHANNEL_BINDING_BYTES: Final = 1024

MALFORMED: Final = "malformed"
UNEXPECTED: Final = "unexpected"
EXPIRED: Final = "expired"
KEY_REFUSED: Final = "key_refused"
IDENTIFIER_MISMATCH: Final = "identifier_mismatch"
BAD_SIGNATURE: Final = "bad_signature"
ALREADY_REGISTERED: Final = "already_registered"
UNKNOWN_IDENTIFIER: Final = "unknown_identifier"
BAD_PRIVATE_IDENTIFIER: Final = "bad_private_identifier"
REJECTION_CODES: Final = (
    MALFORMED,
    UNEXPECTED,
    EXPIRED,
    KEY_REFUSED,
    IDENTIFIER_MISMATCH,
    BAD_SIGNATURE,
    ALREADY_REGISTERED,
    UNKNOWN_IDENTIFIER,
    BAD_PRIVATE_IDENTIFIER,
)


# -- messages -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Challenge:
    """Verifier -> prover: sign this fresh ``nonce`` for me, ``verifier_id``, whose TLS key has
    the fingerprint ``verifier_fingerprint``."""

    KIND: ClassVar[str] = "auth.challenge"
    nonce: bytes
    verifier_id: str
    verifier_fingerprint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Register:
    """Prover -> verifier, first contact: my key (DER SubjectPublicKeyInfo), its identifier, and
    my signature over the ``register`` transcript."""

    KIND: ClassVar[str] = "auth.register"
    public_id: str
    public_key: bytes
    signature: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Identify:
    """Prover -> verifier, re-connection: my identifier, the private identifier you issued me,
    and my signature over the ``identify`` transcript. ``private_id`` never shows in ``repr``."""

    KIND: ClassVar[str] = "auth.identify"
    public_id: str
    private_id: bytes = field(repr=False)
    signature: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Registered:
    """Verifier -> prover: your new private identifier (sent once, inside the TLS channel).
    ``private_id`` never shows in ``repr``."""

    KIND: ClassVar[str] = "auth.registered"
    public_id: str
    private_id: bytes = field(repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Confirm:
    """Prover -> verifier: I have stored my private identifier; store my record."""

    KIND: ClassVar[str] = "auth.confirm"
    public_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """Verifier -> prover: you are identified as ``public_id`` on this connection."""

    KIND: ClassVar[str] = "auth.accepted"
    public_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """Verifier -> prover: identification failed (``code`` is one of ``REJECTION_CODES``;
    ``reason`` explains it to a person and never contains a secret). The connection closes."""

    KIND: ClassVar[str] = "auth.rejected"
    code: str
    reason: str


Message = Challenge | Register | Identify | Registered | Confirm | Accepted | Rejected

MESSAGE_TYPES: Final[Mapping[str, type[Message]]] = {
    cls.KIND: cls
    for cls in (Challenge, Register, Identify, Registered, Confirm, Accepted, Rejected)
}
"""Every message class by its ``KIND``, for ``wire.codec.register``."""


# -- the transcript and its signature -------------------------------------------------------------


def transcript(
    *,
    purpose: str,
    nonce: bytes,
    verifier_id: str,
    verifier_fingerprint: str,
    public_id: str,
    channel_binding: bytes,
) -> bytes:
    """The bytes the prover signs (see the module docstring for the format)."""
    if purpose not in (REGISTER, IDENTIFY):
        raise ValueError(f"purpose is {REGISTER!r} or {IDENTIFY!r}, not {purpose!r}")
    fields = (
        CONTEXT,
        purpose.encode("ascii"),
        nonce,
        verifier_id.encode("utf-8"),
        verifier_fingerprint.encode("ascii"),
        public_id.encode("ascii"),
        channel_binding,
    )
    return b"".join(len(part).to_bytes(4, "big") + part for part in fields)


def _pss() -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.MAX_LENGTH)


def sign_transcript(key: rsa.RSAPrivateKey, data: bytes) -> bytes:
    """RSA-PSS (SHA-256, MGF1-SHA-256, maximum salt) signature of ``data``."""
    return key.sign(data, _pss(), hashes.SHA256())


def verify_transcript(key: rsa.RSAPublicKey, signature: bytes, data: bytes) -> bool:
    """Whether ``signature`` is ``key``'s RSA-PSS signature of ``data`` (salt length must be the
    maximum, as ``sign_transcript`` makes it: one accepted form, nothing to negotiate)."""
    try:
        key.verify(signature, data, _pss(), hashes.SHA256())
    except InvalidSignature:
        return False
    return True


# -- the verifier's stored records ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerRecord:
    """What an access point keeps about a registered peer. ``private_id_hash`` is not secret
    (nobody can invert it or present it) but stays out of ``repr`` all the same."""

    public_id: str
    public_key: bytes
    private_id_hash: bytes = field(repr=False)
    address: str


class Registry(Protocol):
    """The verifier's store of peer records (in memory here; sqlite in the daemon).

    ``add`` inserts only if no record has that identifier and says whether it did: a replacing
    ``put`` would let a second registration of the same key silently invalidate the first one's
    private identifier."""

    def get(self, public_id: str) -> PeerRecord | None: ...

    def add(self, record: PeerRecord) -> bool: ...

    def update_address(self, public_id: str, address: str) -> None: ...


class MemoryRegistry:
    """A ``Registry`` in a dict."""

    def __init__(self) -> None:
        self._records: dict[str, PeerRecord] = {}

    def get(self, public_id: str) -> PeerRecord | None:
        return self._records.get(public_id)

    def add(self, record: PeerRecord) -> bool:
        if record.public_id in self._records:
            return False
        self._records[record.public_id] = record
        return True

    def update_address(self, public_id: str, address: str) -> None:
        self._records[public_id] = replace(self._records[public_id], address=address)

    def __len__(self) -> int:
        return len(self._records)


# -- outputs --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """Send ``message`` to the other end (inside the TLS channel)."""

    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerAuthenticated:
    """Verifier: the peer on this connection is ``record.public_id``, now at ``record.address``.
    ``registered``: this was its first contact. ``previous_address``: where it was before (None
    after a registration); differing from ``record.address``, the peer moved, and what was kept
    for it offline can now be delivered here."""

    record: PeerRecord
    registered: bool
    previous_address: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthFailure:
    """Verifier: identification failed, for the trace log (``auth_failure``) and ``superpeer
    status``. ``public_id`` is the identifier claimed, when it was well formed; ``kind`` the
    message that failed (``auth.challenge`` when the deadline passed); ``address`` the remote
    address. Never carries a secret."""

    code: str
    reason: str
    kind: str
    public_id: str | None
    address: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IdentifierIssued:
    """Prover: the access point issued this private identifier. Store it durably (0600,
    ``crypto.identifiers.save_private_identifier``), then call ``Prover.confirm()``."""

    private_identifier: PrivateIdentifier


@dataclass(frozen=True, slots=True, kw_only=True)
class Identified:
    """Prover: the access point ``verifier_id`` accepted us as ``public_id`` (``registered``:
    by a new registration). A peer remembers ``verifier_id`` with its private identifier."""

    public_id: str
    verifier_id: str
    registered: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    """Prover: the access point rejected us. ``unknown_identifier`` means register again (with a
    new connection and a ``Prover`` without a private identifier)."""

    code: str
    reason: str


VerifierOutput = Send | PeerAuthenticated | AuthFailure
ProverOutput = Send | IdentifierIssued | Identified | Refused


# -- the verifier ---------------------------------------------------------------------------------


class VerifierState(enum.Enum):
    IDLE = "idle"
    CHALLENGED = "challenged"
    AWAIT_CONFIRM = "await_confirm"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class Verifier:
    """The access point's side of one connection's identification.

    ``node_id`` and ``fingerprint`` name this super-peer: the node id in its TLS certificate and
    the fingerprint of that certificate's key (``crypto.tls.fingerprint``), which the peer
    compares with what its TLS handshake authenticated; ``address`` is the peer's remote address on this connection;
    ``channel_binding`` what both sides derive from the TLS session (empty if unavailable);
    ``random`` the source of nonces and private identifiers; ``lifetime`` the seconds allowed from
    the challenge to the end.
    """

    def __init__(
        self,
        *,
        node_id: str,
        fingerprint: str,
        registry: Registry,
        address: str,
        channel_binding: bytes = b"",
        random: RandomSource = secrets.token_bytes,
        lifetime: float = DEFAULT_LIFETIME,
        min_bits: int = MIN_BITS,
    ) -> None:
        if not node_id or len(node_id) > MAX_NODE_ID_CHARS:
            raise ValueError(f"node_id must be 1..{MAX_NODE_ID_CHARS} characters")
        if len(channel_binding) > MAX_CHANNEL_BINDING_BYTES:
            raise ValueError(f"channel_binding is at most {MAX_CHANNEL_BINDING_BYTES} bytes")
        if lifetime <= 0:
            raise ValueError("lifetime must be positive")
        if min_bits < MIN_BITS:
            raise ValueError(f"min_bits may not be below {MIN_BITS}")
        self.node_id = node_id
        self.fingerprint = parse_public_identifier(fingerprint)
        self.address = address
        self._registry = registry
        self._channel_binding = channel_binding
        self._random = random
        self._lifetime = lifetime
        self._min_bits = min_bits
        self._state = VerifierState.IDLE
        self._nonce = b""
        self._deadline: float | None = None
        self._pending: PeerRecord | None = None

    @property
    def state(self) -> VerifierState:
        return self._state

    def challenge(self, now: float) -> Challenge:
        """The challenge to send first; it is valid until ``now + lifetime``."""
        if self._state is not VerifierState.IDLE:
            raise LocalProtocolError(
                "a verifier issues one challenge; use a new one per connection"
            )
        nonce = self._random(NONCE_BYTES)
        if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
            raise LocalProtocolError(f"the random source must return {NONCE_BYTES} bytes")
        self._nonce = nonce
        self._deadline = now + self._lifetime
        self._state = VerifierState.CHALLENGED
        return Challenge(
            nonce=nonce, verifier_id=self.node_id, verifier_fingerprint=self.fingerprint
        )

    def get_timer(self) -> float | None:
        """When the identification expires, while it is in progress; None otherwise."""
        if self._state in (VerifierState.CHALLENGED, VerifierState.AWAIT_CONFIRM):
            return self._deadline
        return None

    def handle_timer(self, now: float) -> list[VerifierOutput]:
        """Rejects an identification whose deadline has passed (nothing to do otherwise)."""
        deadline = self.get_timer()
        if deadline is None or now < deadline:
            return []
        return self._reject(EXPIRED, "the challenge expired", Challenge.KIND, self._claimed())

    def receive(self, message: object, now: float) -> list[VerifierOutput]:
        """Handles one message from the prover: the outputs are the reply to send, then an event
        (``PeerAuthenticated`` or ``AuthFailure``) when the identification ends. Never raises for
        what the remote side sent; ``LocalProtocolError`` if called before ``challenge`` or after
        the end."""
        if self._state is VerifierState.IDLE:
            raise LocalProtocolError("send the challenge first")
        if self._state in (VerifierState.ACCEPTED, VerifierState.REJECTED):
            raise LocalProtocolError(f"the identification is over ({self._state.value})")
        kind = _kind(message)
        assert self._deadline is not None
        if now >= self._deadline:
            return self._reject(EXPIRED, "the challenge expired", kind, self._claimed())
        if self._state is VerifierState.CHALLENGED:
            if isinstance(message, Register):
                return self._register(message)
            if isinstance(message, Identify):
                return self._identify(message)
            expected = f"{Register.KIND} or {Identify.KIND}"
        else:
            if isinstance(message, Confirm):
                return self._confirm(message)
            expected = Confirm.KIND
        return self._reject(UNEXPECTED, f"expected {expected}, got {kind}", kind, self._claimed())

    # -- the three answers

    def _register(self, message: Register) -> list[VerifierOutput]:
        kind = Register.KIND
        problem = _check_bytes(message, "public_key", MAX_PUBLIC_KEY_BYTES) or _check_bytes(
            message, "signature", MAX_SIGNATURE_BYTES
        )
        public_id = _parse_claim(message.public_id)
        if public_id is None:
            problem = problem or "public_id is not a public identifier"
        if problem is not None:
            return self._reject(MALFORMED, f"{kind}: {problem}", kind, public_id)
        assert public_id is not None
        try:
            key = load_public_key_der(message.public_key, min_bits=self._min_bits)
        except KeyPolicyError as error:
            return self._reject(KEY_REFUSED, f"{kind}: {error}", kind, public_id)
        if public_identifier(message.public_key) != public_id:
            return self._reject(
                IDENTIFIER_MISMATCH,
                f"{kind}: the public identifier is not the SHA-256 of the public key",
                kind,
                public_id,
            )
        if not verify_transcript(key, message.signature, self._transcript(REGISTER, public_id)):
            return self._reject(
                BAD_SIGNATURE,
                f"{kind}: the signature does not verify for this challenge and key",
                kind,
                public_id,
            )
        if self._registry.get(public_id) is not None:
            return self._already_registered(kind, public_id)
        private_identifier = PrivateIdentifier.generate(self._random)
        self._pending = PeerRecord(
            public_id=public_id,
            public_key=message.public_key,
            private_id_hash=hash_private_identifier(private_identifier, public_id),
            address=self.address,
        )
        self._state = VerifierState.AWAIT_CONFIRM
        return [
            Send(message=Registered(public_id=public_id, private_id=private_identifier.reveal()))
        ]

    def _confirm(self, message: Confirm) -> list[VerifierOutput]:
        kind = Confirm.KIND
        pending = self._pending
        assert pending is not None
        if message.public_id != pending.public_id:
            return self._reject(
                MALFORMED, f"{kind}: not the identifier being registered", kind, pending.public_id
            )
        if not self._registry.add(pending):
            return self._already_registered(kind, pending.public_id)
        self._pending = None
        self._state = VerifierState.ACCEPTED
        return [
            Send(message=Accepted(public_id=pending.public_id)),
            PeerAuthenticated(record=pending, registered=True, previous_address=None),
        ]

    def _identify(self, message: Identify) -> list[VerifierOutput]:
        kind = Identify.KIND
        problem = _check_bytes(message, "signature", MAX_SIGNATURE_BYTES)
        if not isinstance(message.private_id, bytes) or len(message.private_id) != PRIVATE_BYTES:
            problem = problem or f"private_id must be {PRIVATE_BYTES} bytes"
        public_id = _parse_claim(message.public_id)
        if public_id is None:
            problem = problem or "public_id is not a public identifier"
        if problem is not None:
            return self._reject(MALFORMED, f"{kind}: {problem}", kind, public_id)
        assert public_id is not None
        record = self._registry.get(public_id)
        if record is None:
            return self._reject(
                UNKNOWN_IDENTIFIER,
                f"{kind}: no peer is registered here under this identifier; register first",
                kind,
                public_id,
            )
        try:
            key = load_public_key_der(record.public_key, min_bits=self._min_bits)
        except KeyPolicyError as error:
            return self._reject(
                KEY_REFUSED, f"{kind}: the registered key: {error}", kind, public_id
            )
        if not verify_transcript(key, message.signature, self._transcript(IDENTIFY, public_id)):
            return self._reject(
                BAD_SIGNATURE,
                f"{kind}: the signature does not verify for this challenge and the registered key",
                kind,
                public_id,
            )
        if not check_private_identifier(message.private_id, public_id, record.private_id_hash):
            return self._reject(
                BAD_PRIVATE_IDENTIFIER,
                f"{kind}: the private identifier is not the one issued to this identifier",
                kind,
                public_id,
            )
        if record.address != self.address:
            self._registry.update_address(public_id, self.address)
        self._state = VerifierState.ACCEPTED
        return [
            Send(message=Accepted(public_id=public_id)),
            PeerAuthenticated(
                record=replace(record, address=self.address),
                registered=False,
                previous_address=record.address,
            ),
        ]

    # -- helpers

    def _transcript(self, purpose: str, public_id: str) -> bytes:
        return transcript(
            purpose=purpose,
            nonce=self._nonce,
            verifier_id=self.node_id,
            verifier_fingerprint=self.fingerprint,
            public_id=public_id,
            channel_binding=self._channel_binding,
        )

    def _claimed(self) -> str | None:
        return self._pending.public_id if self._pending is not None else None

    def _already_registered(self, kind: str, public_id: str) -> list[VerifierOutput]:
        return self._reject(
            ALREADY_REGISTERED,
            f"{kind}: this identifier is already registered here; identify with its private "
            "identifier",
            kind,
            public_id,
        )

    def _reject(
        self, code: str, reason: str, kind: str, public_id: str | None
    ) -> list[VerifierOutput]:
        self._state = VerifierState.REJECTED
        self._pending = None
        return [
            Send(message=Rejected(code=code, reason=reason)),
            AuthFailure(
                code=code, reason=reason, kind=kind, public_id=public_id, address=self.address
            ),
        ]


def _kind(message: object) -> str:
    """What ``message`` is, for errors: its ``KIND``, or the name of an unknown type."""
    return getattr(type(message), "KIND", type(message).__name__)


def _check_bytes(message: object, name: str, limit: int) -> str | None:
    value = getattr(message, name)
    if not isinstance(value, bytes) or not 0 < len(value) <= limit:
        return f"{name} must be 1..{limit} bytes"
    return None


def _parse_claim(value: object) -> str | None:
    """The canonical public identifier ``value`` claims, or None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return parse_public_identifier(value)
    except IdentifierError:
        return None


# -- the prover -----------------------------------------------------------------------------------


class ProverState(enum.Enum):
    START = "start"
    AWAIT_REGISTERED = "await_registered"
    AWAIT_STORED = "await_stored"
    AWAIT_ACCEPTED = "await_accepted"
    DONE = "done"
    FAILED = "failed"


class Prover:
    """The peer's side of one connection's identification.

    What the TLS handshake authenticated about the server, passed in by the daemon:

    * ``verifier_fingerprint``: the fingerprint of its key (``crypto.tls.peer_fingerprint``); a
      challenge naming another key is refused (relay defence);
    * ``verifier_node_id``: the node id in its CA-verified certificate
      (``crypto.tls.verified_peer_certificate_node_id``), or None when the server was
      authenticated by a pinned key (the pinned key's holder is then trusted to state its own
      id); a challenge claiming another node id is refused.

    With a ``private_identifier`` the prover identifies, else it registers. Identifying requires
    ``issued_by``, the node id of the access point that issued the private identifier (the peer
    remembers it from ``Identified``): since the challenge's node id is authenticated as above,
    the private identifier is sent only to the access point that already knows it, never to
    another super-peer with a valid certificate.
    """

    def __init__(
        self,
        key: rsa.RSAPrivateKey,
        *,
        verifier_fingerprint: str,
        verifier_node_id: str | None,
        private_identifier: PrivateIdentifier | None = None,
        issued_by: str | None = None,
        channel_binding: bytes = b"",
    ) -> None:
        check_key_policy(key)
        if (private_identifier is None) != (issued_by is None):
            raise LocalProtocolError(
                "identifying needs both private_identifier and issued_by (the access point that "
                "issued it); registering needs neither"
            )
        self._key = key
        self._public_key = public_key_der(key)
        self.public_id = public_identifier(self._public_key)
        self._verifier_fingerprint = parse_public_identifier(verifier_fingerprint)
        self._verifier_node_id = verifier_node_id
        self._issued_by = issued_by
        self._private_identifier = private_identifier
        self._channel_binding = channel_binding
        self._state = ProverState.START
        self._challenger = ""

    @property
    def state(self) -> ProverState:
        return self._state

    def receive(self, message: object) -> list[ProverOutput]:
        """Handles one message from the verifier. ``RemoteProtocolError`` if it breaks the
        protocol (a challenge for another server, a message out of order); the prover is then
        spent and the connection should close."""
        if self._state in (ProverState.DONE, ProverState.FAILED):
            raise LocalProtocolError(f"the identification is over ({self._state.value})")
        if isinstance(message, Rejected):
            self._state = ProverState.FAILED
            return [Refused(code=str(message.code), reason=str(message.reason))]
        if self._state is ProverState.START and isinstance(message, Challenge):
            return [Send(message=self._answer(message))]
        if self._state is ProverState.AWAIT_REGISTERED and isinstance(message, Registered):
            return [IdentifierIssued(private_identifier=self._issued(message))]
        if self._state is ProverState.AWAIT_ACCEPTED and isinstance(message, Accepted):
            if message.public_id != self.public_id:
                raise self._broken("accepted under another identifier")
            self._state = ProverState.DONE
            return [
                Identified(
                    public_id=self.public_id,
                    verifier_id=self._challenger,
                    registered=self._private_identifier is None,
                )
            ]
        raise self._broken(f"{_kind(message)} is out of order ({self._state.value})")

    def confirm(self) -> Confirm:
        """The confirmation to send once the issued private identifier is stored durably."""
        if self._state is not ProverState.AWAIT_STORED:
            raise LocalProtocolError("confirm() comes after IdentifierIssued, once")
        self._state = ProverState.AWAIT_ACCEPTED
        return Confirm(public_id=self.public_id)

    def _answer(self, challenge: Challenge) -> Register | Identify:
        if not isinstance(challenge.nonce, bytes) or len(challenge.nonce) != NONCE_BYTES:
            raise self._broken(f"the challenge nonce must be {NONCE_BYTES} bytes")
        if (
            not isinstance(challenge.verifier_id, str)
            or not 0 < len(challenge.verifier_id) <= MAX_NODE_ID_CHARS
        ):
            raise self._broken("the challenge's verifier_id is not a node id")
        if _parse_claim(challenge.verifier_fingerprint) != self._verifier_fingerprint:
            raise self._broken(
                "the challenge names a server key other than the one the TLS channel "
                "authenticated (a relay, or a misconfigured server)"
            )
        if self._verifier_node_id is not None and challenge.verifier_id != self._verifier_node_id:
            raise self._broken(
                "the challenge claims a node id other than the one in the server's certificate"
            )
        if self._issued_by is not None and challenge.verifier_id != self._issued_by:
            raise self._broken(
                "the challenge comes from a super-peer other than the access point that issued "
                "our private identifier"
            )
        self._challenger = challenge.verifier_id
        purpose = REGISTER if self._private_identifier is None else IDENTIFY
        signature = sign_transcript(
            self._key,
            transcript(
                purpose=purpose,
                nonce=challenge.nonce,
                verifier_id=challenge.verifier_id,
                verifier_fingerprint=self._verifier_fingerprint,
                public_id=self.public_id,
                channel_binding=self._channel_binding,
            ),
        )
        if self._private_identifier is None:
            self._state = ProverState.AWAIT_REGISTERED
            return Register(
                public_id=self.public_id, public_key=self._public_key, signature=signature
            )
        self._state = ProverState.AWAIT_ACCEPTED
        return Identify(
            public_id=self.public_id,
            private_id=self._private_identifier.reveal(),
            signature=signature,
        )

    def _issued(self, message: Registered) -> PrivateIdentifier:
        if message.public_id != self.public_id:
            raise self._broken("registered under another identifier")
        try:
            private_identifier = PrivateIdentifier(message.private_id)
        except IdentifierError:
            raise self._broken(
                f"the issued private identifier is not {PRIVATE_BYTES} bytes"
            ) from None
        self._state = ProverState.AWAIT_STORED
        return private_identifier

    def _broken(self, text: str) -> RemoteProtocolError:
        """Spends the prover and returns the error to raise (the access point is at fault)."""
        self._state = ProverState.FAILED
        return RemoteProtocolError(f"access point: {text}")
