"""The trace record: one line of a super-peer's traffic log. This is the one place its schema is
defined; the simulator and the daemons write it (one JSON object per line), the Spark jobs read it.

Fields (``None`` where a field does not apply):

=========  ======  ===========================================================================
field      type    meaning
=========  ======  ===========================================================================
ts         float   seconds since the epoch (simulated time in the simulator)
node       str     the super-peer writing the record
event      str     ``publish`` (a local peer's publication accepted at its origin), ``send``,
                   ``receive``, ``deliver`` (a notification handed to an attached local peer),
                   ``offline`` (stored for a detached peer), ``flush`` (a stored notification
                   delivered when its peer came back), ``refused`` (a peer request refused),
                   ``drop`` (a message discarded: unknown sender, malformed, out of place),
                   ``auth_failure`` (a failed identification; never carries secrets),
                   ``member`` (the super-peer joined the cube), ``neighbour_failed`` (a
                   neighbour fell silent), ``repair`` / ``departure`` (the cube closed the place
                   of a failed / departed super-peer: ``neighbour`` names it), ``rejoin``
                   (this super-peer was evicted and joins again as a new incarnation)
kind       str     the message kind (``wire`` KIND, e.g. ``sp.notification``)
msg        str     the message id (the sender's), matching ``send`` to ``receive``
pub        str     publication id, for publications and notifications
sub        str     subscription id on the link, for subscriptions and their withdrawal; on a
                   notification sent to a neighbour, the comma-separated ids (that neighbour's own
                   ids, as in its ``sp.forward`` records) of its subscriptions the notification
                   answers
origin     str     the origin super-peer of a notification or of advertisement elements
peer       str     the local peer involved
neighbour  str     the neighbour super-peer involved
bytes      int     size of the message on the wire (msgpack), 0 for local events
hops       int     super-peer to super-peer hops the notification has taken so far
reason     str     why, on a ``drop`` (every drop names one, so an operator can tell a repeat
                   from a loss without reading the code)
=========  ======  ===========================================================================
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Final

EVENTS: Final = (
    "publish",
    "send",
    "receive",
    "deliver",
    "offline",
    "flush",
    "refused",
    "drop",
    "auth_failure",
    "member",
    "neighbour_failed",
    "repair",
    "departure",
    "rejoin",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRecord:
    ts: float
    node: str
    event: str
    kind: str
    msg: str | None = None
    pub: str | None = None
    sub: str | None = None
    origin: str | None = None
    peer: str | None = None
    neighbour: str | None = None
    bytes: int = 0
    hops: int | None = None
    reason: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


FIELDS: Final = tuple(f.name for f in fields(TraceRecord))


def flush_record(ts: float, node: str, notify: Any, peer: str, size: int) -> TraceRecord:
    """A kept notification (a ``wire.messages.Notify``) handed to its peer on its return: the
    daemon and the simulator write the same record."""
    return TraceRecord(
        ts=ts,
        node=node,
        event="flush",
        kind=notify.KIND,
        pub=notify.publication.id,
        origin=notify.origin,
        peer=peer,
        bytes=size,
        hops=notify.hops,
    )
