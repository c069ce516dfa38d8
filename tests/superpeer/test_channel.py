"""The sequenced channel between two super-peers: every message arrives once, in order, across
broken connections, and a channel that replaces another toward the same side loses nothing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superpeer.channel import Inbound, Outbound, split
from wire.codec import DEFAULT_WIRE_LIMITS
from wire.framing import FrameDecoder, FrameError


def payloads(data: bytes) -> list[bytes]:
    return FrameDecoder().feed(data)


class Pair:
    """One sender incarnation talking to one receiver incarnation over connections that break:
    a frame sent on a connection arrives only if the connection lives until it is read."""

    def __init__(self) -> None:
        self.outbound = Outbound()
        self.inbound = Inbound(ack_every=3)
        self.received: list[bytes] = []
        self.wire: list[bytes] = []  # frames written on the current connection, not yet read
        self.connected = False

    def connect(self, incarnation: int = 7) -> None:
        """A new connection, welcomed by the receiver's ``incarnation``."""
        resume = self.inbound.resume("a", 1)
        self.wire = list(self.outbound.welcomed(incarnation, resume))
        self.connected = True

    def send(self, message: bytes, meant_for: int = 0) -> None:
        data = self.outbound.push(message, meant_for)
        if self.connected:
            self.wire.append(data)

    def read(self) -> None:
        for data in self.wire:
            for payload in payloads(data):
                number, _, body = split(payload)
                if self.inbound.accept("a", 1, number, 0.0):
                    self.received.append(body)
        self.wire = []
        ack = self.inbound.ack_due("a", 1, 0.0)
        if ack is not None:
            self.outbound.acknowledged(ack)

    def cut(self) -> None:
        self.wire, self.connected = [], False

    def replace(self) -> None:
        """The link was dropped (the node was forgotten, or it overflowed) and opened again."""
        self.outbound = Outbound(first=self.outbound.next_number)
        self.cut()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["send", "read", "cut", "connect", "replace"]), max_size=60))
def test_every_message_arrives_once_in_order(steps: list[str]) -> None:
    pair = Pair()
    sent: list[bytes] = []
    replaced_with_loss: set[bytes] = set()
    for step in steps:
        if step == "send":
            message = f"m{len(sent)}".encode()
            sent.append(message)
            pair.send(message)
        elif step == "read" and pair.connected:
            pair.read()
        elif step == "cut":
            pair.cut()
        elif step == "connect" and not pair.connected:
            pair.connect()
        elif step == "replace":
            # what the old channel kept is dropped with it (the node decided so): only later
            # messages must arrive
            replaced_with_loss |= {data for data in sent if data not in pair.received}
            pair.replace()
    if not pair.connected:
        pair.connect()
    pair.read()
    expected = [message for message in sent if message not in replaced_with_loss]
    assert [m for m in pair.received if m not in replaced_with_loss] == expected
    assert len(pair.received) == len(set(pair.received))


def test_a_replacement_channel_is_not_taken_for_repeats() -> None:
    """The bug this guards: a link dropped and opened again numbered from 1, and the receiver,
    which had frames up to 3 from this incarnation, dropped the new ones as repeats."""
    pair = Pair()
    pair.connect()
    for n in range(3):
        pair.send(b"old%d" % n)
    pair.read()
    pair.replace()
    pair.send(b"goodbye")
    pair.connect()
    pair.read()
    assert pair.received == [b"old0", b"old1", b"old2", b"goodbye"]


def test_a_receiver_that_rejoined_in_the_same_process_takes_what_follows() -> None:
    """The bug this guards: the receiver rejoined as a new incarnation without restarting (it
    remembers the numbers it received); the sender, welcomed by the new incarnation, numbered
    from 1 again, and everything it sent from then on was dropped as repeats."""
    pair = Pair()
    pair.connect()
    for n in range(3):
        pair.send(b"old%d" % n)
    pair.read()
    pair.send(b"for the old incarnation")
    pair.cut()
    pair.send(b"also for the old one")
    pair.connect(incarnation=8)
    pair.send(b"for the new one")
    pair.read()
    assert pair.received == [b"old0", b"old1", b"old2", b"for the new one"]


def test_what_was_meant_for_the_incarnation_that_welcomes_is_sent_again() -> None:
    """Found by the seed-11 chaos plan (stop 27): the receiver rejoined in the same process
    (incarnation 4, then 5) while the sender's connection, welcomed by 4, lived on; the sender
    went on sending to 5 on it. A cut broke it; the next ``Welcome`` named 5, the channel took
    that for a new incarnation and dropped what the sender had queued for 5 meanwhile (two
    publications a relay never forwarded)."""
    pair = Pair()
    pair.connect(incarnation=4)
    pair.send(b"to 4", meant_for=4)
    pair.send(b"to 4, arriving at 5", meant_for=4)  # in flight when it rejoined
    pair.send(b"to 5", meant_for=5)
    pair.read()
    pair.cut()
    pair.send(b"to 5 while cut", meant_for=5)
    pair.connect(incarnation=5)
    pair.read()
    assert pair.received == [b"to 4", b"to 4, arriving at 5", b"to 5", b"to 5 while cut"]


def test_what_was_meant_for_an_older_incarnation_is_dropped() -> None:
    pair = Pair()
    pair.connect(incarnation=4)
    pair.send(b"to 4", meant_for=4)
    pair.cut()
    pair.send(b"to 4 while cut", meant_for=4)
    pair.send(b"to anyone while cut")
    pair.send(b"to 5 while cut", meant_for=5)  # the sender heard of 5 first
    pair.connect(incarnation=5)
    pair.read()
    assert pair.received == [b"to 5 while cut"]


def test_a_new_channel_sends_everything_to_whoever_welcomes_it() -> None:
    """A joiner's ``Welcome`` is sent by a member that never heard the joiner's new incarnation
    (the join came down a walk): stamped with the old one, on a new link. Dropping it left the
    joiner waiting for ever (the seed-11 chaos plan, while this rule was being written)."""
    pair = Pair()
    pair.send(b"welcome, joiner", meant_for=1)
    pair.connect(incarnation=2)
    pair.read()
    assert pair.received == [b"welcome, joiner"]


def test_a_message_no_frame_can_carry_leaves_the_channel_as_it_was() -> None:
    """The daemon drops such a message (and logs it) and goes on with the same channel."""
    pair = Pair()
    pair.connect()
    pair.send(b"before")
    number = pair.outbound.next_number
    with pytest.raises(FrameError):
        pair.send(b"x" * (DEFAULT_WIRE_LIMITS.max_frame_bytes + 1))
    assert pair.outbound.next_number == number and pair.outbound.waiting == 1
    pair.send(b"after")
    pair.read()
    assert pair.received == [b"before", b"after"]


def test_the_frames_of_a_stream_are_acknowledged_together_a_delay_after_the_first() -> None:
    inbound = Inbound(ack_every=64, ack_delay=0.005)
    inbound.resume("a", 1)
    for number, now in ((1, 0.0), (2, 0.001), (3, 0.002)):
        assert inbound.accept("a", 1, number, now)
    assert inbound.ack_deadline("a", 1) == 0.005, "from the first that waits"
    assert inbound.ack_due("a", 1, 0.0049) is None
    assert inbound.ack_due("a", 1, 0.005) == 3
    assert inbound.ack_deadline("a", 1) is None, "nothing waits"
    assert inbound.ack_due("a", 1, 1.0) is None, "nothing is acknowledged twice"
    assert not inbound.accept("a", 1, 3, 1.0), "a repeat"
    assert inbound.ack_deadline("a", 1) is None, "a repeat is owed nothing"
    assert inbound.accept("a", 1, 4, 2.0)
    assert inbound.ack_deadline("a", 1) == 2.005, "the next wait starts with its first frame"


def test_a_burst_is_acknowledged_at_once_every_ack_every_frames() -> None:
    inbound = Inbound(ack_every=4, ack_delay=10.0)
    inbound.resume("a", 1)
    for number in range(1, 4):
        inbound.accept("a", 1, number, 0.0)
    assert inbound.ack_due("a", 1, 0.0) is None
    inbound.accept("a", 1, 4, 0.0)
    assert inbound.ack_due("a", 1, 0.0) == 4


def test_a_new_incarnation_of_the_sender_forgets_what_the_old_one_left_waiting() -> None:
    inbound = Inbound(ack_delay=0.005)
    inbound.resume("a", 1)
    inbound.accept("a", 1, 1, 0.0)
    assert inbound.resume("a", 2) == 0
    assert inbound.ack_deadline("a", 1) is None
    assert inbound.ack_due("a", 1, 1.0) is None


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 5),
    st.sampled_from([0.0, 0.005, 1.0]),
    st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 10)), max_size=60),
)
def test_acknowledgements_follow_both_rules(
    ack_every: int, delay: float, steps: list[tuple[bool, int, int]]
) -> None:
    """Against an oracle kept by hand: an acknowledgement names the last frame received, comes
    exactly when ``ack_every`` frames wait or the oldest has waited ``ack_delay``, and the
    deadline is when the second rule will hold."""
    inbound = Inbound(ack_every=ack_every, ack_delay=delay)
    inbound.resume("a", 1)
    now, last, waiting, since = 0.0, 0, 0, 0.0
    for is_frame, back, step in steps:
        now += step / 1000
        if is_frame:
            number = max(1, last + 1 - back)  # back > 0: a repeat
            new = number > last
            assert inbound.accept("a", 1, number, now) is new
            if new:
                last = number
                since = now if not waiting else since
                waiting += 1
            continue
        due = waiting and (waiting >= ack_every or now >= since + delay)
        assert inbound.ack_deadline("a", 1) == (since + delay if waiting else None)
        assert inbound.ack_due("a", 1, now) == (last if due else None)
        if due:
            waiting = 0
