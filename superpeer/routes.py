"""Routing one message to one named super-peer over the cube (bit-fixing), sans-IO.

Rendezvous requests and files (``superpeer.rendezvous``) and direct look-ups
(``superpeer.locating``) go from one super-peer to another one they name, as the paper sends a
request to the owner's access point: each hop passes the message to its parent in the spanning
tree rooted at the target's position, which fixes one bit of the position, so a message takes
at most log2 N hops, and nothing is asked of the network or kept on the way.

A position names whoever holds it now. When the route ends at the holder of the target's
position and that is not the target (the target left the cube, or the cube changed since the
sender learned the position), the holder aims once more at the position it knows for the target
(the origins' advertisements say where each origin is); if it knows none, or that one ends
there too, the target is out of reach, and the holder answers from what it knows itself (at
worst "not here", so the sender falls back) rather than dropping the message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from superpeer.core import TopologyView

HERE: Final = "here"
UNKNOWN_POSITION: Final = -1
"""The position of a message sent straight to its target by address (the sender knew no
position for it): only the target handles it."""


@dataclass(frozen=True, slots=True)
class Hop:
    """Pass the message to ``neighbour``, aimed at ``position``."""

    neighbour: str
    position: int


@dataclass(frozen=True, slots=True)
class Whereabouts:
    """What a super-peer knows of a peer's whereabouts: it is attached there (``attached``;
    ``online`` now, from ``address``), or it moved away (``forward``: the super-peer it went
    to, at ``forward_address``), or nothing (all empty)."""

    attached: bool = False
    online: bool = False
    address: str = ""
    forward: str = ""
    forward_address: str = ""


def step(
    view: TopologyView,
    positions: Mapping[str, int],
    node_id: str,
    target: str,
    target_position: int,
) -> Hop | Literal["here"] | None:
    """What ``node_id`` does with a message for ``target`` aimed at ``target_position``: handle
    it (``HERE``), pass it one hop on (``Hop``), or nothing (None: the target is out of reach
    from here)."""
    if target == node_id:
        return HERE
    for position in (target_position, positions.get(target)):
        if position is None or not 0 <= position < 2**view.dimension:
            continue
        hop = view.parent(position)
        if hop is not None:
            return Hop(hop, position)
    return None


def aim(
    view: TopologyView, positions: Mapping[str, int], node_id: str, target: str
) -> Hop | Literal["here"]:
    """The first step of a message to ``target``: over the cube when its position is known,
    else straight to it (``Hop(target, UNKNOWN_POSITION)``: a super-peer a forwarding address or
    a handover named, which need not be an origin)."""
    position = positions.get(target, UNKNOWN_POSITION)
    found = step(view, positions, node_id, target, position)
    return Hop(target, UNKNOWN_POSITION) if found is None else found


def pass_on(
    send: Callable[..., None], hop: Hop, message: Any, now: float, out: list, *, address: str = ""
) -> None:
    """``message`` (a routed message with ``target_position`` and ``hops``) to ``hop``'s
    neighbour, aimed at its position."""
    relayed = dataclasses.replace(message, target_position=hop.position, hops=message.hops + 1)
    send(hop.neighbour, relayed, now, out, address=address)
