"""The wire: message types, their msgpack encoding, and (for the daemons) framing and limits."""

from wire import messages
from wire.codec import (
    DEFAULT_WIRE_LIMITS,
    PROTOCOL_VERSION,
    WireError,
    WireLimits,
    decode,
    encode,
    kinds,
    register,
)

register(*messages.PEER_REQUESTS, *messages.PEER_REPLIES, *messages.BACKBONE)

__all__ = [
    "DEFAULT_WIRE_LIMITS",
    "PROTOCOL_VERSION",
    "WireError",
    "WireLimits",
    "decode",
    "encode",
    "kinds",
    "messages",
    "register",
]
