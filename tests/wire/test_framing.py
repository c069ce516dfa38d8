"""Frames and the sans-IO link: handshake order, violations answered with an error frame, and a
decoder that never buffers more than one frame's limit."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wire
from wire import messages as m
from wire.framing import FrameDecoder, FrameError, Link, LinkClosed, Received, Violation, frame

HELLO = m.Hello(role="peer", node_id="alice", address="", protocol=wire.PROTOCOL_VERSION)
WELCOME = m.Welcome(node_id="sp0", address="127.0.0.1:7400")


def frames_of(*messages) -> bytes:
    return b"".join(frame(wire.encode(x)) for x in messages)


def test_frames_split_at_any_boundary():
    stream = frames_of(m.Ack(request="a"), m.Ack(request="bb"), m.Leave())
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert [wire.decode(f)[0] for f in got] == [
            m.Ack(request="a"),
            m.Ack(request="bb"),
            m.Leave(),
        ]
        assert decoder.buffered == 0


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.binary(max_size=8), st.binary(min_size=1, max_size=40)), max_size=8),
    st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_frames_with_heads_come_out_whole_in_order_however_the_stream_is_cut(framed, cuts):
    """A frame built of a head and a payload (``frame(payload, head=...)``, how a sequenced
    frame is built) reads as the two together; many frames fed in pieces cut anywhere give back
    exactly those payloads, in order, and leave nothing buffered."""
    stream = b"".join(frame(payload, head=head) for head, payload in framed)
    decoder = FrameDecoder()
    got: list[bytes] = []
    start = 0
    for cut in [*sorted(c for c in cuts if c <= len(stream)), len(stream)]:
        got += decoder.feed(stream[start:cut])
        start = cut
    assert got == [head + payload for head, payload in framed]
    assert decoder.buffered == 0


def test_a_head_counts_toward_the_frame_limit():
    limits = wire.WireLimits(max_frame_bytes=10)
    assert frame(b"12345", limits, head=b"abcde") == struct.pack(">I", 10) + b"abcde12345"
    with pytest.raises(FrameError, match="not 11"):
        frame(b"123456", limits, head=b"abcde")


def test_an_oversized_frame_is_refused_from_its_header_alone():
    decoder = FrameDecoder(wire.WireLimits(max_frame_bytes=100))
    with pytest.raises(FrameError, match="announces 101 bytes; the limit is 100"):
        decoder.feed(struct.pack(">I", 101))
    assert decoder.buffered == 0
    with pytest.raises(FrameError, match="never empty"):
        FrameDecoder().feed(struct.pack(">I", 0))


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_the_decoder_never_holds_more_than_one_frame_limit(chunks):
    limits = wire.WireLimits(max_frame_bytes=256)
    decoder = FrameDecoder(limits)
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except FrameError:
            return
        assert decoder.buffered <= 4 + limits.max_frame_bytes


def test_handshake_then_messages():
    server, client = Link(accepting=True), Link(accepting=False)
    events = server.receive_data(client.send(HELLO) + client.send(m.Unsubscribe(id="s1"), "x1"))
    assert [(e.message, e.message_id) for e in events] == [
        (HELLO, ""),
        (m.Unsubscribe(id="s1"), "x1"),
    ]
    assert all(isinstance(e, Received) and e.size > 0 for e in events)
    assert server.open and server.peer_hello == HELLO
    [welcome] = client.receive_data(server.send(WELCOME))
    assert isinstance(welcome, Received) and welcome.message == WELCOME
    assert client.open and client.peer_welcome == WELCOME


@pytest.mark.parametrize(
    ("accepting", "first", "reason"),
    [
        (True, m.Leave(), "expected link.hello first, got peer.leave"),
        (False, m.Leave(), "expected link.welcome first, got peer.leave"),
        (
            True,
            m.Hello(role="peer", node_id="a", address="", protocol=99),
            "protocol 99 is not supported",
        ),
        (False, m.LinkError(reason="full"), "refused: full"),
    ],
)
def test_out_of_order_first_frames_are_violations(accepting, first, reason):
    link = Link(accepting=accepting)
    [event] = link.receive_data(frames_of(first))
    assert isinstance(event, Violation) and reason in event.reason
    assert wire.decode(event.reply[4:])[0] == m.LinkError(reason=event.reason)
    assert link.closed
    with pytest.raises(LinkClosed):
        link.receive_data(b"")
    with pytest.raises(LinkClosed):
        link.send(m.Leave())


def test_a_second_hello_and_garbage_after_the_handshake_are_violations():
    link = Link(accepting=True)
    events = link.receive_data(frames_of(HELLO, m.Leave(), HELLO, m.Leave()))
    assert (
        isinstance(events[-1], Violation) and "link.hello after the handshake" in events[-1].reason
    )
    assert len(events) == 3, "nothing is processed after a violation"
    other = Link(accepting=True)
    other.receive_data(frames_of(HELLO))
    [violation] = other.receive_data(struct.pack(">I", 3) + b"\xc1\xc1\xc1")
    assert "not a msgpack message" in violation.reason


@settings(max_examples=300)
@given(st.binary(max_size=500))
def test_random_bytes_after_a_hello_only_ever_give_messages_or_a_violation(data):
    link = Link(accepting=True)
    link.receive_data(frames_of(HELLO))
    events = link.receive_data(data)
    assert all(isinstance(e, Received) for e in events[:-1])
    if events and isinstance(events[-1], Violation):
        assert link.closed
