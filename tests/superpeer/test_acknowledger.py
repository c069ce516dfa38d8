"""The ``ChannelAck`` s of a backbone connection the daemon accepted (``daemon._Acknowledger``)
are written when the ``Inbound`` says (its rules are tested in ``test_channel``): one for the
frames of a stream, ``ack_delay_seconds`` after the first, at once after a read that left
``ack_every`` waiting, and never one the sender was not owed."""

from __future__ import annotations

import trio
import trio.testing

import wire
from superpeer.channel import Inbound
from superpeer.daemon import _Acknowledger
from wire import messages as m
from wire.codec import WireLimits
from wire.framing import FrameDecoder

DELAY = 0.005


class _Sender:
    """The other end: records each ChannelAck as it arrives."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.acks: list[int] = []

    async def read(self) -> None:
        decoder = FrameDecoder(WireLimits())
        while data := await self.stream.receive_some():
            for payload in decoder.feed(data):
                message, _ = wire.decode(payload)
                assert isinstance(message, m.ChannelAck)
                self.acks.append(message.received)

    async def taken(self) -> list[int]:
        """The acks that came since the last call."""
        await trio.testing.wait_all_tasks_blocked()
        taken, self.acks = self.acks, []
        return taken


async def _started(
    nursery: trio.Nursery,
    incarnation: int,
    *,
    delay: float = DELAY,
    ack_every: int = 64,
) -> tuple[_Acknowledger, _Sender, Inbound]:
    inbound = Inbound(ack_every=ack_every, ack_delay=delay)
    inbound.resume("sp1", incarnation)
    ours, theirs = trio.testing.memory_stream_pair()
    acks = _Acknowledger(ours, inbound, "sp1", incarnation, limits=WireLimits())
    sender = _Sender(theirs)
    nursery.start_soon(acks.run)
    nursery.start_soon(sender.read)
    return acks, sender, inbound


async def test_the_frames_of_a_stream_share_one_acknowledgement_a_delay_later(autojump_clock):
    async with trio.open_nursery() as nursery:
        acks, sender, inbound = await _started(nursery, 7)
        for number in range(1, 4):  # three reads, a millisecond apart
            assert inbound.accept("sp1", 7, number, trio.current_time())
            await acks.after_read()
            await trio.sleep(0.001)
        assert await sender.taken() == [], "not before the delay"
        await trio.sleep(DELAY - 0.003)
        assert await sender.taken() == [3], "one for the three, the delay after the first"
        await trio.sleep(10 * DELAY)
        assert await sender.taken() == [], "nothing new, nothing sent"
        assert not inbound.accept("sp1", 7, 3, trio.current_time()), "a repeat is owed no ack"
        await acks.after_read()
        await trio.sleep(2 * DELAY)
        assert await sender.taken() == []
        nursery.cancel_scope.cancel()


async def test_a_read_that_leaves_ack_every_frames_waiting_is_acknowledged_at_once(
    autojump_clock,
):
    async with trio.open_nursery() as nursery:
        acks, sender, inbound = await _started(nursery, 1, ack_every=4)
        for number in range(1, 11):  # one read of ten frames
            inbound.accept("sp1", 1, number, trio.current_time())
        await acks.after_read()
        assert await sender.taken() == [10], "at once, after the read"
        for number in range(11, 13):  # a read of two
            inbound.accept("sp1", 1, number, trio.current_time())
        await acks.after_read()
        assert await sender.taken() == []
        await trio.sleep(DELAY)
        assert await sender.taken() == [12], "those after the delay"
        nursery.cancel_scope.cancel()


async def test_no_delay_acknowledges_each_read_as_it_ends(autojump_clock):
    async with trio.open_nursery() as nursery:
        acks, sender, inbound = await _started(nursery, 1, delay=0.0)
        for number in (1, 2):
            inbound.accept("sp1", 1, number, trio.current_time())
            await acks.after_read()
            assert await sender.taken() == [number]
        nursery.cancel_scope.cancel()
