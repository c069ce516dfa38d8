"""What a ``HypercupNode`` hands back to its runtime: messages to send and events for the core."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from hypercup.messages import Message
from hypercup.view import LocalView


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """Send ``message`` to node ``to``, reachable at ``address``."""

    to: str
    address: str
    message: Message


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyChanged:
    """This node's positions, the cube's dimension or the neighbour table changed.

    ``view`` is the new local view (a ``superpeer.core.TopologyView``); ``addresses`` gives the
    address of every neighbour in it. Routing state built on the old trees must be revised: every
    tree changes when the dimension does, and a change of neighbours changes the trees through
    them."""

    epoch: int
    view: LocalView
    addresses: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "addresses", MappingProxyType(dict(self.addresses)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """This node is now a member of the cube (a ``TopologyChanged`` follows)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinFailed:
    """The contact refused to integrate this node for now (``reason``); the node is idle again
    and may ask again (``join_via``)."""

    reason: str
    member: bool
    """Whether the contact is a member (it may admit this node later)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Departed:
    """This node took the place of member ``node`` (which held ``positions``), which left or, with
    ``failed``, was declared failed: exactly one node emits it per departure, so the super-peer
    can tell the whole cube."""

    node: str
    positions: tuple[int, ...]
    failed: bool
    incarnation: int = 0
    """``node``'s incarnation as the repair or the departure named it (0: not known): the one
    the cube is to forget, whoever takes its place (often a node that never heard from it)."""
    last_heard: float = 0.0
    """When ``node`` was last heard from, in the runtime's terms, as the node that repaired its
    failure (a neighbour of it) or the leaver itself said (0.0: not said); the protocol does
    not use it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Left:
    """This node is no longer a member: its positions have a new holder (or the cube is empty)."""


Output = Send | TopologyChanged | Joined | JoinFailed | Departed | Left
