"""Length-prefixed frames and the sans-IO link: what a daemon feeds the bytes it reads into.

A frame is a 4-byte big-endian length followed by that many bytes of one encoded message
(``wire.codec``). ``FrameDecoder`` refuses a frame whose announced length exceeds the limit as soon
as it reads the header, so a peer can never make it buffer more than one frame's limit (plus the
chunk being fed). ``Link`` is one end of a connection, in the style of h11: the daemon owns the
socket, feeds received bytes to ``receive_data`` and gets back messages or a ``Violation`` that
carries the error frame to send before closing; ``send`` turns a message into frame bytes. The
first frame each way is the handshake (``Hello`` from the connecting side, ``Welcome`` back); any
other frame first is out of order. After a violation or a close, the link refuses further use.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from wire import codec
from wire import messages as m
from wire.codec import DEFAULT_WIRE_LIMITS, WireError, WireLimits

HEADER: Final = struct.Struct(">I")


class FrameError(WireError):
    """The byte stream is not a sequence of acceptable frames."""


class LinkClosed(RuntimeError):
    """Local misuse: the link was already closed or broken."""


def frame(payload: bytes, limits: WireLimits = DEFAULT_WIRE_LIMITS, *, head: bytes = b"") -> bytes:
    """The frame of ``head + payload`` (a header of the payload's own, ``superpeer.channel``'s
    sequence number and time), built with one copy of ``payload``: a chunk of a file is
    hundreds of kilobytes, and every copy of it is paid at every relay."""
    length = len(head) + len(payload)
    if not payload or length > limits.max_frame_bytes:
        raise FrameError(
            f"a frame carries 1..{limits.max_frame_bytes} bytes (max_frame_bytes), not {length}"
        )
    return HEADER.pack(length) + head + payload


class FrameDecoder:
    """Splits a byte stream into frames, refusing oversized and empty ones."""

    def __init__(self, limits: WireLimits = DEFAULT_WIRE_LIMITS) -> None:
        self.limits = limits
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes, in order. Each frame's bytes are copied out of the
        buffer once (through a view, not a slice and then ``bytes``), and what they took is
        cut from the buffer once per call, not once per frame."""
        self._buffer += data
        frames = []
        start = 0
        refused = None
        with memoryview(self._buffer) as view:
            while len(view) - start >= HEADER.size:
                (length,) = HEADER.unpack_from(view, start)
                if length == 0 or length > self.limits.max_frame_bytes:
                    refused = length
                    break
                end = start + HEADER.size + length
                if len(view) < end:
                    break
                frames.append(bytes(view[start + HEADER.size : end]))
                start = end
        if refused is not None:
            self._buffer.clear()
            raise FrameError(
                f"a frame announces {refused} bytes; the limit is "
                f"{self.limits.max_frame_bytes} (max_frame_bytes) and frames are never empty"
            )
        del self._buffer[:start]
        return frames


@dataclass(frozen=True, slots=True)
class Received:
    message: object
    message_id: str
    size: int = 0
    """Bytes of the encoded message (the frame without its header)."""
    clock: float = 0.0
    """The sender's hybrid time, from a sequenced frame's header (``clocks``; 0: none)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """The other side broke the protocol: send ``reply`` (an error frame), then close."""

    reason: str
    reply: bytes


class Link:
    """One end of a connection. ``accepting=True`` for the side that accepted it (expects
    ``Hello`` first); False for the side that connected (sends ``Hello``, expects ``Welcome``)."""

    def __init__(self, *, accepting: bool, limits: WireLimits = DEFAULT_WIRE_LIMITS) -> None:
        self.accepting = accepting
        self.limits = limits
        self.peer_hello: m.Hello | None = None
        self.peer_welcome: m.Welcome | None = None
        self._decoder = FrameDecoder(limits)
        self._open = False
        self._closed = False

    @property
    def open(self) -> bool:
        """Whether the handshake is complete and the link still usable."""
        return self._open and not self._closed

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, message: object, message_id: str = "") -> bytes:
        if self._closed:
            raise LinkClosed("the link is closed")
        return frame(codec.encode(message, message_id), self.limits)

    def close(self) -> None:
        self._closed = True

    def receive_data(self, data: bytes) -> list[Received | Violation]:
        """Messages decoded from ``data``; a ``Violation`` ends the list and closes the link."""
        if self._closed:
            raise LinkClosed("the link is closed")
        events: list[Received | Violation] = []
        try:
            frames = self._decoder.feed(data)
        except FrameError as error:
            return [self._violation(str(error))]
        for payload in frames:
            try:
                message, message_id = codec.decode(payload, self.limits)
            except WireError as error:
                events.append(self._violation(str(error)))
                return events
            problem = self._check_order(message)
            if problem is not None:
                events.append(self._violation(problem))
                return events
            events.append(Received(message, message_id, len(payload)))
        return events

    def _check_order(self, message: object) -> str | None:
        if not self._open:
            if self.accepting:
                if not isinstance(message, m.Hello):
                    return f"expected link.hello first, got {type(message).KIND}"  # type: ignore[attr-defined]
                if message.protocol != codec.PROTOCOL_VERSION:
                    return f"protocol {message.protocol} is not supported (this is {codec.PROTOCOL_VERSION})"
                self.peer_hello = message
            else:
                if isinstance(message, m.LinkError):
                    return f"refused: {message.reason}"
                if not isinstance(message, m.Welcome):
                    return f"expected link.welcome first, got {type(message).KIND}"  # type: ignore[attr-defined]
                self.peer_welcome = message
            self._open = True
            return None
        if isinstance(message, m.Hello | m.Welcome):
            return f"{message.KIND} after the handshake"
        return None

    def _violation(self, reason: str) -> Violation:
        reply = frame(codec.encode(m.LinkError(reason=reason)), self.limits)
        self._closed = True
        return Violation(reason, reply)
