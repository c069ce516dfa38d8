"""Signed statements a peer makes about itself outside the identification handshake.

A *move statement* says: "I, ``public_id``, was attached to ``previous`` until ``since`` and I am
now attached to ``current``". The peer signs it (RSA-PSS, as ``crypto.identification``) and sends
it to its new access point, which passes it to the previous one with its request to hand the
peer's kept notifications over. The previous access point checks it with the public key it
registered for the peer, so a super-peer cannot collect another peer's notifications by asking:
it needs a statement that names it as the peer's new access point, signed by the peer's key.

The transcript follows the identification transcript's rules (length-prefixed fields, a context
string of its own for domain separation): a move statement can never be mistaken for an
identification response, nor the other way round.
"""

from __future__ import annotations

from typing import Final

from cryptography.hazmat.primitives.asymmetric import rsa

from crypto.errors import KeyPolicyError
from crypto.identification import sign_transcript, verify_transcript
from crypto.keys import load_public_key_der

MOVE_CONTEXT: Final = b"semantic-pubsub peer move v1"


def move_transcript(*, public_id: str, previous: str, current: str, since: float) -> bytes:
    """The bytes a moving peer signs. ``since`` is written with ``repr`` (exact, round-trips)."""
    fields = (
        MOVE_CONTEXT,
        public_id.encode("ascii"),
        previous.encode("utf-8"),
        current.encode("utf-8"),
        repr(float(since)).encode("ascii"),
    )
    return b"".join(len(part).to_bytes(4, "big") + part for part in fields)


def sign_move(
    key: rsa.RSAPrivateKey, *, public_id: str, previous: str, current: str, since: float
) -> bytes:
    return sign_transcript(
        key, move_transcript(public_id=public_id, previous=previous, current=current, since=since)
    )


def verify_move(
    public_key_der: bytes,
    signature: bytes,
    *,
    public_id: str,
    previous: str,
    current: str,
    since: float,
) -> bool:
    """Whether ``signature`` is the registered key's signature of this move statement."""
    try:
        key = load_public_key_der(public_key_der)
    except KeyPolicyError:
        return False
    data = move_transcript(public_id=public_id, previous=previous, current=current, since=since)
    return verify_transcript(key, signature, data)
