"""Public and private identifiers of peers.

Public identifier
    ``pk1-`` followed by the SHA-256 digest of the key's DER SubjectPublicKeyInfo in lowercase
    base32 (RFC 4648 alphabet ``a-z2-7``) without padding: 56 characters, e.g.
    ``pk1-fvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jcaq``. Anyone holding the key can
    recompute it, so an identifier cannot be claimed by another key (that would take a SHA-256
    second preimage). Why this text form:

    * base32 has one letter case, so identifiers survive case-folding file systems (macOS,
      Windows), DNS labels, e-mail addresses and people reading them aloud; base64url does not.
      Upper-case input is accepted and normalised; the canonical form is lower case;
    * its alphabet is safe in URLs, file names, JSON, TOML and shell words without quoting;
    * the prefix names the rule (``pk`` = hash of a public key, ``1`` = SHA-256 over DER SPKI) so a
      later rule can coexist, and it makes identifiers recognisable in logs and configs;
    * parsing is strict: a wrong prefix, length or alphabet, or unused trailing bits that are not
      zero (so two strings can never name the same digest) are ``IdentifierError``.

    The same function gives a super-peer's key fingerprint (``crypto.tls.fingerprint``): one text
    form for "the hash of this public key" wherever the network shows one.

Private identifier
    256 random bits from ``secrets`` (or an injected source), issued by the access point when a
    peer registers. It is a bearer secret shared by exactly two parties: the peer (in a 0600 file,
    ``save_private_identifier``) and its access point (which keeps only a hash). It travels only
    inside the TLS channel, in ``auth.registered`` (once) and ``auth.identify``. Its text form is
    ``secret1-`` + lowercase base32 (the prefix makes a leaked one easy to spot and to scan for).
    ``PrivateIdentifier`` never shows the secret in ``repr``/``str``/f-strings, so it cannot end up
    in a log by accident; ``reveal()`` is the one explicit way to get the bytes.

Storing private identifiers
    The access point stores ``hash_private_identifier(secret, public_id)``: SHA-256 over a context
    string, the public identifier and the secret, each length-prefixed. A plain hash is enough
    because the secret is uniformly random with 256 bits of entropy: nobody can search that space,
    so the slow, salted password hashes (scrypt, Argon2) that protect low-entropy passwords would
    only add cost. Someone who reads the super-peer's database learns hashes that cannot be
    inverted and are useless to present (the verifier hashes what it is given). Including the
    public identifier binds a hash to its record: a hash copied into another record never matches.
    Comparison is constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.asymmetric import rsa

from crypto import _files
from crypto.errors import IdentifierError, KeyFileError
from crypto.keys import public_key_der

PUBLIC_PREFIX: Final = "pk1-"
PRIVATE_PREFIX: Final = "secret1-"
PRIVATE_BYTES: Final = 32
MAX_NODE_ID_CHARS: Final = 64
"""Super-peer node ids fit a certificate's common name (X.509 ub-common-name is 64)."""
_ENCODED_LENGTH: Final = 52  # ceil(256 / 5) base32 characters
_BASE32_ALPHABET: Final = frozenset("abcdefghijklmnopqrstuvwxyz234567")
_HASH_CONTEXT: Final = b"semantic-pubsub private identifier hash v1"

RandomSource = Callable[[int], bytes]
"""``random(n)`` returns ``n`` unpredictable bytes (``secrets.token_bytes`` unless injected)."""


def _encode(prefix: str, data: bytes) -> str:
    return prefix + base64.b32encode(data).decode("ascii").rstrip("=").lower()


def _decode(prefix: str, text: str, what: str) -> bytes:
    """The 32 bytes ``text`` encodes; ``IdentifierError`` unless it is the canonical encoding
    (modulo letter case). The message never repeats ``text``: it may be a secret, or hostile."""
    if not isinstance(text, str):
        raise IdentifierError(f"a {what} is a string, not {type(text).__name__}")
    if len(text) != len(prefix) + _ENCODED_LENGTH:
        raise IdentifierError(f"a {what} is {len(prefix) + _ENCODED_LENGTH} characters long")
    lowered = text.lower()
    if not lowered.startswith(prefix):
        raise IdentifierError(f"a {what} starts with {prefix!r}")
    body = lowered[len(prefix) :]
    if not set(body) <= _BASE32_ALPHABET:
        raise IdentifierError(f"a {what} is {prefix!r} followed by characters of a-z and 2-7")
    data = base64.b32decode(body.upper() + "====")
    if _encode(prefix, data) != lowered:
        raise IdentifierError(f"a {what} must be canonical (its unused last bits are zero)")
    return data


# -- public identifiers ---------------------------------------------------------------------------


def public_identifier(key: rsa.RSAPublicKey | rsa.RSAPrivateKey | bytes) -> str:
    """The public identifier of ``key`` (a key object, or its canonical DER SubjectPublicKeyInfo
    as bytes)."""
    der = key if isinstance(key, bytes) else public_key_der(key)
    return _encode(PUBLIC_PREFIX, hashlib.sha256(der).digest())


def parse_public_identifier(text: str) -> str:
    """The canonical (lower-case) form of ``text``; ``IdentifierError`` if it is not one."""
    _decode(PUBLIC_PREFIX, text, "public identifier")
    return text.lower()


def matches(key: rsa.RSAPublicKey | rsa.RSAPrivateKey | bytes, identifier: str) -> bool:
    """Whether ``identifier`` is the public identifier of ``key``; False for malformed text."""
    try:
        return parse_public_identifier(identifier) == public_identifier(key)
    except IdentifierError:
        return False


# -- private identifiers --------------------------------------------------------------------------


class PrivateIdentifier:
    """A peer's private identifier: 32 secret bytes that never show in ``repr`` or ``str``.

    Equality is constant-time; instances are unhashable (a secret has no business being a dict
    key, where its hash could leak through timing or a debugger's view of the table).
    """

    __slots__ = ("_secret",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) != PRIVATE_BYTES:
            raise IdentifierError(f"a private identifier is exactly {PRIVATE_BYTES} bytes")
        self._secret = secret

    @classmethod
    def generate(cls, random: RandomSource = secrets.token_bytes) -> PrivateIdentifier:
        """A fresh private identifier from ``random`` (a CSPRNG; tests inject a seeded one)."""
        return cls(random(PRIVATE_BYTES))

    @classmethod
    def from_text(cls, text: str) -> PrivateIdentifier:
        """Reads the ``secret1-...`` text form; the error message never repeats the input."""
        return cls(_decode(PRIVATE_PREFIX, text, "private identifier"))

    def reveal(self) -> bytes:
        """The secret bytes: call this only to put them in ``auth.registered`` /
        ``auth.identify`` inside the TLS channel, or to hash them."""
        return self._secret

    def reveal_text(self) -> str:
        """The secret in its text form, for the peer's 0600 file and nothing else."""
        return _encode(PRIVATE_PREFIX, self._secret)

    def __repr__(self) -> str:
        return "PrivateIdentifier(<hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrivateIdentifier):
            return NotImplemented
        return hmac.compare_digest(self._secret, other._secret)


def hash_private_identifier(private_identifier: PrivateIdentifier | bytes, public_id: str) -> bytes:
    """What the access point stores for ``private_identifier`` issued to ``public_id``: SHA-256 of
    the length-prefixed context, public identifier and secret (see the module docstring)."""
    secret = (
        private_identifier.reveal()
        if isinstance(private_identifier, PrivateIdentifier)
        else private_identifier
    )
    digest = hashlib.sha256()
    for part in (_HASH_CONTEXT, public_id.encode("utf-8"), secret):
        digest.update(len(part).to_bytes(4, "big"))
        digest.update(part)
    return digest.digest()


def check_private_identifier(presented: bytes, public_id: str, stored_hash: bytes) -> bool:
    """Whether ``presented`` is the private identifier whose hash is ``stored_hash``, compared in
    constant time (the time taken reveals nothing about how much of the hash matched)."""
    return hmac.compare_digest(hash_private_identifier(presented, public_id), stored_hash)


def save_private_identifier(
    private_identifier: PrivateIdentifier, path: str | Path, *, overwrite: bool = False
) -> Path:
    """Writes the text form at ``path`` with mode 0600, atomically (the peer's copy)."""
    return _files.save_file(
        Path(path),
        (private_identifier.reveal_text() + "\n").encode("ascii"),
        mode=_files.PRIVATE_MODE,
        overwrite=overwrite,
        what="private identifier file",
    )


def load_private_identifier(
    path: str | Path, *, allow_insecure_permissions: bool = False
) -> PrivateIdentifier:
    """The private identifier saved at ``path``; ``KeyFileError`` (without the file's content) if
    the file is missing, accessible by others, or does not hold one."""
    path = Path(path)
    data = _files.read_secret_file(
        path,
        what="private identifier file",
        allow_insecure_permissions=allow_insecure_permissions,
        missing_hint="the peer receives one when it registers with its access point",
    )
    try:
        return PrivateIdentifier.from_text(data.decode("ascii").strip())
    except (UnicodeDecodeError, IdentifierError):
        raise KeyFileError(
            f"private identifier file {path} does not hold a private identifier"
        ) from None
