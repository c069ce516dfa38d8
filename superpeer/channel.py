"""Reliable, ordered delivery between two super-peer incarnations over connections that break,
sans-IO.

The topology protocol assumes reliable FIFO links, and routing state is built from the messages a
link carries: a ``Forward`` lost in a socket buffer when a connection was cut would leave a route
missing for good. TCP alone does not give that across reconnections, so each direction between two
super-peers is a *channel*:

* the connecting side (``Outbound``) numbers every frame it sends to one incarnation of the other
  side (1, 2, ...), and keeps it until the other side acknowledges it;
* each connection starts with ``Hello`` (naming the sender's incarnation) and ``Welcome`` (naming
  the receiver's incarnation and ``resume``: the last number it received from the sender's
  incarnation on earlier connections); the sender then sends again everything after ``resume``;
* the accepting side (``Inbound``) drops numbers it already has (a frame sent again), and writes
  ``ChannelAck(received)`` back on the same connection once ``ack_every`` frames wait, or
  ``ack_delay`` (``[limits] ack_delay_seconds``) after the first of them, so that the frames of a
  stream share one (``wire.acknowledging``), and the sender can forget what arrived;
* every frame is pushed with the incarnation of the other side its sender knew of (0: none
  yet). When a ``Welcome`` names another incarnation than the channel's previous one, what was
  kept is dropped (its state is gone with the old one; recovering what it took with it is the
  node's business, not the channel's), but for frames meant for the incarnation that welcomes
  (or a later one): the other side may have rejoined in the same process while a connection
  lived, so the last ``Welcome`` can name an incarnation older than the one the sender already
  talks to. A channel's first ``Welcome`` drops nothing: what a new link carries was queued after
  the node dropped the old one, for whoever answers (a joiner's ``Welcome`` is sent by members
  that never heard its new incarnation). Numbering goes on, since a super-peer that rejoins in
  the same process remembers the numbers it received, and ``resume`` always counts.

A sequenced frame is the usual length-prefixed frame (``wire.framing``) whose payload starts with
the 8-byte big-endian sequence number and the sender's hybrid time when it queued the frame (an
8-byte IEEE double: ``clocks``, which every receiver absorbs), followed by one encoded message.
"""

from __future__ import annotations

import math
import struct
from collections import deque
from dataclasses import dataclass
from typing import Final

from wire.acknowledging import DelayedAck
from wire.codec import DEFAULT_WIRE_LIMITS, WireLimits
from wire.framing import FrameError, frame

HEADER: Final = struct.Struct(">Qd")
"""A sequenced frame's header: its number and the sender's hybrid time."""


class ChannelOverflow(RuntimeError):
    """More frames are waiting for the other side's acknowledgement than the channel may keep
    (``max_unacknowledged``): the other side is gone or far too slow."""


def sequenced(
    sequence: int, message: bytes, limits: WireLimits = DEFAULT_WIRE_LIMITS, clock: float = 0.0
) -> bytes:
    return frame(message, limits, head=HEADER.pack(sequence, clock))


def split(payload: bytes) -> tuple[int, float, memoryview]:
    """The sequence number, the sender's hybrid time and the encoded message of a sequenced
    frame's payload (a view of it: the message is decoded, not kept, and a chunk of a file is
    not copied once more for that)."""
    if len(payload) <= HEADER.size:
        raise FrameError("a sequenced frame carries a sequence number, a time and a message")
    number, clock = HEADER.unpack_from(payload)
    if not math.isfinite(clock):
        raise FrameError(f"a sequenced frame carries a finite time, not {clock!r}")
    return number, clock, memoryview(payload)[HEADER.size :]


@dataclass
class Outbound:
    """The sending half of a channel to one super-peer: sequence numbers and what is kept."""

    limits: WireLimits = DEFAULT_WIRE_LIMITS
    max_unacknowledged: int = 100_000
    incarnation: int | None = None
    """The other side's incarnation, once a ``Welcome`` named it."""
    first: int = 1
    """The first number: a channel that replaces another toward the same side (the link was
    dropped and opened again) goes on from the old one's numbers, or the other side, which
    remembers what it received from this incarnation, would take the new frames for repeats."""

    def __post_init__(self) -> None:
        self._next = self.first
        self._kept: deque[tuple[int, bytes, int]] = deque()
        """(number, frame, the incarnation it is meant for), oldest first."""

    @property
    def next_number(self) -> int:
        return self._next

    @property
    def waiting(self) -> int:
        """Frames sent or queued and not acknowledged."""
        return len(self._kept)

    def push(self, message: bytes, meant_for: int = 0, clock: float = 0.0) -> bytes:
        """Number ``message``, meant for the other side's incarnation ``meant_for`` (0: none
        known yet, and dropped as meant for an older one if a ``Welcome`` then shows the other
        side changed incarnation), with the sender's hybrid time ``clock``; the frame to send
        (kept until acknowledged)."""
        if len(self._kept) >= self.max_unacknowledged:
            raise ChannelOverflow(
                f"{len(self._kept)} frames wait for acknowledgement (max_unacknowledged)"
            )
        number = self._next
        data = sequenced(
            number, message, self.limits, clock
        )  # a message no frame can carry: no number
        self._next += 1
        self._kept.append((number, data, meant_for))
        return data

    def welcomed(self, incarnation: int, resume: int) -> list[bytes]:
        """A new connection's ``Welcome``: the frames to send again, oldest first. When the
        incarnation changed, what was meant for an older one is dropped."""
        changed = self.incarnation is not None and incarnation != self.incarnation
        self.incarnation = incarnation
        self.acknowledged(resume)
        if changed:
            self._kept = deque(kept for kept in self._kept if kept[2] >= incarnation)
        return [data for _, data, _ in self._kept]

    def acknowledged(self, received: int) -> None:
        while self._kept and self._kept[0][0] <= received:
            self._kept.popleft()


class Inbound:
    """The receiving half: what was received from each sender incarnation (across connections),
    and when to acknowledge it (``wire.acknowledging``: at once when ``ack_every`` frames wait,
    else ``ack_delay`` after the first of them; time is passed in)."""

    def __init__(self, ack_every: int = 64, ack_delay: float = 0.0) -> None:
        self.ack_every = ack_every
        self.ack_delay = ack_delay
        self._received: dict[tuple[str, int], int] = {}
        self._acks: dict[tuple[str, int], DelayedAck] = {}

    def resume(self, sender: str, incarnation: int) -> int:
        """For the ``Welcome`` of a new connection from ``sender``: the last number received.
        Older incarnations of ``sender`` are forgotten."""
        for key in [k for k in self._received if k[0] == sender and k[1] != incarnation]:
            del self._received[key]
            self._acks.pop(key, None)
        return self._received.setdefault((sender, incarnation), 0)

    def accept(self, sender: str, incarnation: int, number: int, now: float) -> bool:
        """Whether frame ``number``, read at ``now``, is new (False: a repeat sent again after a
        reconnection, which is owed no acknowledgement)."""
        key = (sender, incarnation)
        if number <= self._received.get(key, 0):
            return False
        self._received[key] = number
        ack = self._acks.get(key)
        if ack is None:
            ack = self._acks[key] = DelayedAck(self.ack_every, self.ack_delay)
        ack.note(now)
        return True

    def ack_due(self, sender: str, incarnation: int, now: float) -> int | None:
        """The number to acknowledge at ``now``, or None when nothing is owed yet."""
        key = (sender, incarnation)
        ack = self._acks.get(key)
        return self._received[key] if ack is not None and ack.take(now) else None

    def ack_deadline(self, sender: str, incarnation: int) -> float | None:
        """When an acknowledgement falls due by time (``ack_due`` then returns it), or None when
        nothing waits for one."""
        ack = self._acks.get((sender, incarnation))
        return None if ack is None else ack.deadline
