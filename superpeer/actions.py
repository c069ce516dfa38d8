"""What the sans-IO core asks its runtime to do. The runtime (simulator or daemon) owns sockets,
clocks and storage; the core only returns these.

Messages that go on a wire are already encoded (``data``), once, by the core: the runtime sends the
bytes and the traces report their size.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire import messages


@dataclass(frozen=True, slots=True)
class ToNeighbour:
    neighbour: str
    message: object
    data: bytes
    message_id: str


@dataclass(frozen=True, slots=True)
class ToPeer:
    peer: str
    message: object
    data: bytes


@dataclass(frozen=True, slots=True)
class ToOffline:
    """Keep this notification for a detached peer until it attaches again."""

    peer: str
    message: messages.Notify
    data: bytes


@dataclass(frozen=True, slots=True)
class FlushOffline:
    """The peer is attached again: deliver what was kept for it, in order, then forget it."""

    peer: str


@dataclass(frozen=True, slots=True)
class DiscardOffline:
    """The peer left for good: what was kept for it goes."""

    peer: str


Action = ToNeighbour | ToPeer | ToOffline | FlushOffline | DiscardOffline
