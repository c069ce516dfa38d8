"""The wire: message types, their msgpack encoding, and (for the daemons) framing and limits."""

import crypto
import hypercup
from wire import messages
from wire.codec import (
    DEFAULT_WIRE_LIMITS,
    PROTOCOL_VERSION,
    WireError,
    WireLimits,
    decode,
    encode,
    kinds,
    packed_publication,
    plain_publication,
    register,
    renumbered,
    unpacked_publication,
)

register(*messages.PEER_REQUESTS, *messages.PEER_REPLIES, *messages.BACKBONE, *messages.LINK)
register(*hypercup.MESSAGE_TYPES.values())
register(*crypto.MESSAGE_TYPES.values())

__all__ = [
    "DEFAULT_WIRE_LIMITS",
    "PROTOCOL_VERSION",
    "WireError",
    "WireLimits",
    "decode",
    "encode",
    "kinds",
    "messages",
    "packed_publication",
    "plain_publication",
    "register",
    "renumbered",
    "unpacked_publication",
]
