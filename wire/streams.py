"""Reading a connection for the frame decoder: every TLS record already at hand in one wake-up.

``trio.SSLStream.receive_some`` returns at most one TLS record (16 KiB of plaintext: OpenSSL's
``SSL_read`` stops at a record's end) and passes through trio's scheduler on every call, even
when the bytes it read from the socket hold several records more. A 100 MB transfer is then some
6,400 wake-ups in each process that receives it, and the relay's cost was those wake-ups, not the
bytes (BENCHMARKS.md, "Issue 37, item 5"). ``receive`` makes one ``receive_some`` (the wait, the
handshake, trio's errors and end of stream as usual) and then decrypts, without waiting, the
records whose bytes trio has already read from the socket, up to ``max_bytes`` in all.

``WideReads`` gives trio's TLS layer a transport that reads up to ``TRANSPORT_READ_BYTES``
from the socket at a time (trio reads 64 KiB), so that one wake-up can find that many records.

What ``receive`` returns is exactly the stream's next bytes, in order, as repeated
``receive_some`` calls would have returned them: a record not complete yet stays in the TLS
layer's buffer for the next call; an error or the end of the stream met while draining ends the
drain, and the next ``receive_some`` meets it again and reports it as trio does (OpenSSL keeps
both); bytes OpenSSL wants to send back (a key update's answer) leave with the stream's next
call. The drain uses two attributes of ``trio.SSLStream`` that are not public (its
``SSLObject`` and incoming memory BIO), checked by ``tests/wire/test_streams.py`` against the
installed trio.
"""

from __future__ import annotations

import ssl
from typing import Final

import trio

READ_BYTES: Final = 65536
"""The most bytes one ``receive`` returns: what a reader handles before it looks at anything
else (a publisher's rate limit pauses between two reads; other tasks run between two reads). A
plain TCP read brought as much; over TLS a read brought one record, 16 KiB, before ``receive``."""
TRANSPORT_READ_BYTES: Final = 256 * 1024
"""The most bytes the TLS layer reads from the socket in one go (trio's own default: 64 KiB)."""


async def receive(stream: trio.abc.ReceiveStream, max_bytes: int = READ_BYTES) -> bytes:
    """The stream's next bytes (``b""`` at its end): one ``receive_some``, then, on TLS, every
    record already received that fits in ``max_bytes``, without another pass through trio's
    scheduler."""
    data = await stream.receive_some(max_bytes)
    if not data or not isinstance(stream, trio.SSLStream):
        return bytes(data)
    return _drained(stream, bytes(data), max_bytes)


def _drained(stream: trio.SSLStream[trio.abc.Stream], data: bytes, max_bytes: int) -> bytes:
    tls: ssl.SSLObject = stream._ssl_object  # private: see the docstring
    incoming: ssl.MemoryBIO = stream._incoming
    parts = [data]
    room = max_bytes - len(data)
    while room > 0 and (incoming.pending or tls.pending()):
        try:
            more = tls.read(room)
        except ssl.SSLError:  # want-read (a record not whole yet), or an error kept for later
            break
        if not more:  # the other side's close_notify: the next receive_some returns b""
            break
        parts.append(more)
        room -= len(more)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class WideReads(trio.abc.Stream):
    """A transport for ``trio.SSLStream`` that reads up to ``TRANSPORT_READ_BYTES`` at a time
    when trio leaves the size to it."""

    def __init__(self, transport: trio.abc.Stream) -> None:
        self.transport = transport

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.transport.receive_some(max_bytes or TRANSPORT_READ_BYTES)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.transport.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.transport.aclose()
