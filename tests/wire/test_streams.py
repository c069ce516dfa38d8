"""``wire.streams.receive``: over TLS, the records at hand in one call, and exactly the stream's
bytes in order whatever way the ciphertext is cut on its way (a partial record waits for its
rest, an error or the end met while draining is reported by the next call)."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import crypto
from tests.peer.tls import ServerIdentity, make_server
from wire.codec import WireLimits
from wire.framing import FrameDecoder, frame
from wire.streams import READ_BYTES, TRANSPORT_READ_BYTES, WideReads, receive

RECORD = 16384
"""TLS 1.3's largest record of plaintext: what one ``SSLStream.receive_some`` returns at most."""
LARGE = WireLimits(max_frame_bytes=100_000)


@pytest.fixture(scope="module")
def identity(tmp_path_factory: pytest.TempPathFactory) -> ServerIdentity:
    return make_server(tmp_path_factory.mktemp("streams"), "sp-0", ca_name="streams CA")


class Wire:
    """A TLS connection in memory whose client-to-server bytes move only when the test says, in
    the pieces it chooses."""

    def __init__(self, identity: ServerIdentity) -> None:
        self.to_server, self.server_side = trio.testing.memory_stream_one_way_pair()
        to_client, client_side = trio.testing.memory_stream_one_way_pair()
        self.client = trio.SSLStream(
            trio.StapledStream(self.to_server, client_side),
            crypto.peer_client_context(ca=identity.ca),
            server_hostname="127.0.0.1",
        )
        self.server = trio.SSLStream(
            trio.StapledStream(to_client, self.server_side),
            identity.server_context(),
            server_side=True,
        )

    async def open(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.client.do_handshake)
            nursery.start_soon(self.server.do_handshake)
        self.to_server.send_all_hook = None  # from now on bytes wait for ``move``

    def move(self, size: int | None = None) -> bool:
        """Moves up to ``size`` bytes of ciphertext (all, with None) to the server's side."""
        return trio.testing.memory_stream_pump(self.to_server, self.server_side, max_bytes=size)


async def opened(identity: ServerIdentity) -> Wire:
    connection = Wire(identity)
    await connection.open()
    return connection


async def test_the_records_at_hand_come_in_one_call(identity):
    connection = await opened(identity)
    sent = os.urandom(4 * RECORD)
    await connection.client.send_all(sent)  # four records
    connection.move()
    assert await receive(connection.server) == sent  # receive_some alone: one record
    await connection.client.send_all(sent)
    connection.move()
    assert await connection.server.receive_some(READ_BYTES) == sent[:RECORD]


async def test_no_more_than_asked_for_and_the_rest_next(identity):
    connection = await opened(identity)
    sent = os.urandom(3 * RECORD)
    await connection.client.send_all(sent)
    connection.move()
    first = await receive(connection.server, RECORD + 100)  # ends inside the second record
    assert first == sent[: RECORD + 100]
    assert await receive(connection.server) == sent[RECORD + 100 :]


async def test_a_partial_record_waits_for_its_rest(identity):
    connection = await opened(identity)
    sent = os.urandom(2 * RECORD)
    await connection.client.send_all(sent)
    connection.move(RECORD + 5000)  # the first record and part of the second
    assert await receive(connection.server) == sent[:RECORD]
    connection.move()
    assert await receive(connection.server) == sent[RECORD:]


async def test_the_end_of_the_stream_after_the_last_records(identity):
    connection = await opened(identity)
    sent = os.urandom(2 * RECORD + 10)
    await connection.client.send_all(sent)
    await connection.client.aclose()  # close_notify, in the same piece as the data
    connection.move()
    assert await receive(connection.server) == sent
    assert await receive(connection.server) == b""


async def test_a_corrupt_record_is_reported_by_the_next_call(identity):
    connection = await opened(identity)
    await connection.client.send_all(os.urandom(2 * RECORD))
    ciphertext = bytearray(connection.to_server.get_data_nowait())
    ciphertext[-100] ^= 1  # in the second record
    connection.server_side.put_data(ciphertext)
    first = await receive(connection.server)
    assert len(first) == RECORD
    with pytest.raises(trio.BrokenResourceError):
        await receive(connection.server)


@settings(max_examples=25)
@given(
    sizes=st.lists(st.integers(1, 70_000), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 40_000), max_size=20),
    read=st.sampled_from([RECORD - 1, READ_BYTES, 200_000]),
)
def test_the_frames_arrive_whole_and_in_order_however_the_bytes_are_cut(
    identity: ServerIdentity, sizes: list[int], cuts: list[int], read: int
) -> None:
    payloads = [os.urandom(size) for size in sizes]

    async def main() -> list[bytes]:
        connection = await opened(identity)
        for payload in payloads:
            await connection.client.send_all(frame(payload, limits=LARGE))
        await connection.client.aclose()
        decoder = FrameDecoder(LARGE)
        received: list[bytes] = []

        async def read_all() -> None:
            while data := await receive(connection.server, read):
                assert len(data) <= read
                received.extend(decoder.feed(data))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_all)
            for cut in cuts:
                connection.move(cut)
                await trio.testing.wait_all_tasks_blocked()
            connection.move()  # the rest
            connection.move()  # the end of the connection
        assert decoder.buffered == 0
        return received

    assert trio.run(main) == payloads


def test_the_transport_is_read_in_wide_pieces() -> None:
    async def main() -> None:
        sending, receiving = trio.testing.memory_stream_one_way_pair()
        wide = WideReads(trio.StapledStream(sending, receiving))
        sent = os.urandom(TRANSPORT_READ_BYTES + 1000)
        await wide.send_all(sent)
        assert await wide.receive_some() == sent[:TRANSPORT_READ_BYTES]
        assert await wide.receive_some(10) == sent[TRANSPORT_READ_BYTES : TRANSPORT_READ_BYTES + 10]
        await wide.aclose()

    trio.run(main)


def test_the_tls_layer_has_what_the_drain_reads(identity) -> None:
    """The two attributes of ``trio.SSLStream`` that are not public, on the installed trio."""
    stream = trio.SSLStream(
        trio.testing.memory_stream_pair()[0], identity.server_context(), server_side=True
    )
    assert hasattr(stream._ssl_object, "read") and hasattr(stream._ssl_object, "pending")
    assert isinstance(stream._incoming.pending, int)
