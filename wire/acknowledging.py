"""When a receiver acknowledges what a stream brought: the rule of TCP's delayed
acknowledgement, sans-IO (time is an argument).

Both ends of the network acknowledge cumulatively: a super-peer's backbone frames with a
``ChannelAck`` (``superpeer.channel.Inbound``), a peer's notifications, once in its inbox, with a
``Delivered`` (``peer.session``). An acknowledgement per read was a second message for every
frame of a paced stream, each alone in its read: a TLS record written at one end, a read, a
decoding, a wake-up and (for ``Delivered``) a commit at the other (BENCHMARKS.md, issue 37, stops
82 and 83). So one acknowledgement is owed

* at once, when ``every`` items wait (a burst: the sender's window must not run dry), else
* ``delay`` after the first item that waits, for it and everything that came meanwhile.

A later acknowledgement costs the sender memory for a few milliseconds, never an item: what is
unacknowledged when a connection breaks is sent again, and the receiver knows it for a repeat.
A ``delay`` of 0 acknowledges as soon as asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ACK_DELAY_SECONDS: Final = 0.04
"""The delay both ends use unless configured (``[limits] ack_delay_seconds`` of a super-peer,
``ack_delay_seconds`` of a peer daemon): TCP's delayed acknowledgement on Linux waits 40 ms at
least. 5 ms still meant an acknowledgement for every frame or two of a stream of 100 to 1,000
a second, the rate at which each costs most; at 40 ms the access point of ten subscribers
spends a quarter less CPU per notification in such a stream, each relay a tenth (BENCHMARKS.md,
issue 37, stop 85). The sender holds what it sent for 40 ms longer (``every`` bounds it in a
burst), and a connection that breaks sends that much more again."""


@dataclass(slots=True)
class DelayedAck:
    """What waits for an acknowledgement on one stream, and when it is owed."""

    every: int
    """Items waiting that make the acknowledgement owed at once."""
    delay: float
    """How long the first item waiting may wait."""
    waiting: int = 0
    since: float = 0.0
    """When the first item waiting came (meaningless while none waits)."""

    def __post_init__(self) -> None:
        if self.every < 1 or self.delay < 0:
            raise ValueError("an acknowledgement is owed every 1 item or more, after 0 s or more")

    def note(self, now: float, count: int = 1) -> None:
        """``count`` items came at ``now`` and wait."""
        if not self.waiting:
            self.since = now
        self.waiting += count

    def take(self, now: float) -> bool:
        """Whether an acknowledgement is owed at ``now``; if so, it counts as sent (nothing
        waits any more)."""
        if not self.waiting or (self.waiting < self.every and now < self.since + self.delay):
            return False
        self.waiting = 0
        return True

    def clear(self) -> None:
        """What waits was acknowledged otherwise (with another message)."""
        self.waiting = 0

    @property
    def deadline(self) -> float | None:
        """When the acknowledgement falls owed by time (``take`` then says so), or None while
        nothing waits."""
        return self.since + self.delay if self.waiting else None
