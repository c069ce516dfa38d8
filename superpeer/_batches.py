"""Long answers cut into messages that a frame carries.

A ``Mail`` of 200 notifications of 100 KB each, or a ``CatchUp`` naming 200 subscriptions of
64 KB of text each, is tens of megabytes: no frame carries it, the runtime drops it
(``event=message_too_large``), and what it held never arrives, however often it is asked for
again. So such messages are cut by size as well as by count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Final, TypeVar

import wire

T = TypeVar("T")
M = TypeVar("M")

ENVELOPE_BYTES: Final = 1024
"""What a backbone frame adds around a message's encoding (its length, the channel's sequence
number, the message id), with room to spare."""


def fitting(
    items: Sequence[T], one: Callable[[T], object], *, count: int, frame_bytes: int
) -> list[list[T]]:
    """``items`` in order, in chunks of at most ``count`` whose message fits a frame of
    ``frame_bytes``. ``one(item)`` is the message that would carry ``item`` alone: its encoding
    counts for the item (an over-estimate, since each counts the message's other fields again).
    An item too large for a frame even alone gets a chunk of its own. No items: one empty chunk
    (a long answer always ends with a message)."""
    budget = frame_bytes - ENVELOPE_BYTES
    chunks: list[list[T]] = []
    chunk: list[T] = []
    used = 0
    for item in items:
        size = len(wire.encode(one(item)))
        if chunk and (len(chunk) >= count or used + size > budget):
            chunks.append(chunk)
            chunk, used = [], 0
        chunk.append(item)
        used += size
    chunks.append(chunk)
    return chunks


def messages_fitting(
    items: Sequence[T],
    make: Callable[[list[T]], M],
    one: Callable[[T], object],
    *,
    count: int,
    frame_bytes: int,
) -> Iterator[M]:
    """``make`` of ``items`` in order, in chunks of at most ``count`` whose message fits a
    frame of ``frame_bytes``, made once each: a chunk of ``count`` is made and measured whole,
    and the message measured is the one the caller sends (the codec keeps the encoding of the
    last few messages it encoded: send each before taking the next). ``fitting`` measures
    every item alone and the caller encodes them again: a node that caught up for a peer's
    10,000 subscriptions converted each twice, half a second in one call, longer than a
    neighbour's failure timeout of 0.5 s (``tests/superpeer/test_slicing.py``). A chunk too
    large falls back to ``fitting`` for its items, measured by ``one`` (as there: the message
    that would carry the item alone; not ``make``, which may number what it makes). No items:
    one message of none."""
    budget = frame_bytes - ENVELOPE_BYTES
    for start in range(0, max(len(items), 1), count):
        chunk = list(items[start : start + count])
        message = make(chunk)
        if len(chunk) <= 1 or len(wire.encode(message)) <= budget:
            yield message
            continue
        for part in fitting(chunk, one, count=count, frame_bytes=frame_bytes):
            yield make(part)
