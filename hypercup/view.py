"""What one super-peer knows of the cube, and the spanning trees computed from that alone.

A real super-peer only knows its own positions and its neighbour table (the holder of every position
adjacent to one of its own). That is enough to answer, for the broadcast tree rooted at any
position, who its parent and children are, because of the shape the protocol keeps (see
``hypercup.topology``): a super-peer holds one position, or two that differ only in the highest
dimension.

Physical trees from positional ones: a message travels the positional tree, and a hop between two
positions of the same super-peer costs nothing on the wire. The position through which a super-peer
is entered from outside (its *entry position*) is the one whose tree parent belongs to someone else.
A doubled super-peer holds ``x`` and ``TOP | x``; exactly one of them has the same top bit as the
root, and the other one's parent is that one (the top bit is always the highest differing bit), so
the super-peer is entered exactly once and a broadcast costs N-1 messages on the wire. Its second
position received on the top dimension, so it forwards nothing: internal hops only happen at leaves
of the positional tree, and the physical depth of a super-peer is the Hamming distance between the
root position and its entry position.

``LocalView`` provides ``root_position``, ``neighbours()``, ``parent(root_position)`` and
``children(root_position)``, the ``TopologyView`` protocol that ``superpeer.core`` consumes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hypercup.positions import (
    check_position,
    surrounding_positions,
    top_bit,
    tree_children_positions,
    tree_parent_position,
)


def check_holding(positions: frozenset[int], dimension: int) -> None:
    """Raises ``ValueError`` unless ``positions`` is one position, or two that differ only in the
    highest dimension (the only holdings the protocol creates, and what the trees rely on)."""
    if not positions:
        raise ValueError("a super-peer holds at least one position")
    for position in positions:
        check_position(position, dimension)
    if len(positions) == 1:
        return
    low, *rest = sorted(positions)
    if rest != [low | top_bit(dimension)]:
        raise ValueError(
            f"positions {sorted(positions)} are not one position or a pair differing only in the "
            f"top dimension {dimension - 1}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalView:
    """One super-peer's positions and neighbour table, validated when built.

    ``table`` maps every position adjacent to one of ``positions`` (and not itself one of them) to
    the id of the super-peer holding it; it must be complete. A view never changes, so the parent
    and children of each tree, and the neighbours, are computed once, when first asked for (a
    super-peer asks for every message it routes)."""

    node_id: str
    dimension: int
    positions: frozenset[int]
    table: Mapping[int, str]
    _parents: dict[int, str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _children: dict[int, tuple[str, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _neighbours: frozenset[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        positions = frozenset(self.positions)
        check_holding(positions, self.dimension)
        table = MappingProxyType(dict(self.table))
        expected = surrounding_positions(positions, self.dimension)
        if set(table) != expected:
            raise ValueError(
                f"{self.node_id}: the table covers positions {sorted(table)}, "
                f"but the neighbours of {sorted(positions)} are {sorted(expected)}"
            )
        if self.node_id in table.values():
            raise ValueError(f"{self.node_id}: the table lists the node itself as a neighbour")
        object.__setattr__(self, "positions", positions)
        object.__setattr__(self, "table", table)

    @property
    def root_position(self) -> int:
        """The root of this super-peer's own broadcast tree: its lowest position."""
        return min(self.positions)

    def neighbours(self) -> frozenset[str]:
        """The super-peers this one has a link to."""
        if self._neighbours is None:
            object.__setattr__(self, "_neighbours", frozenset(self.table.values()))
        assert self._neighbours is not None
        return self._neighbours

    def holder(self, position: int) -> str:
        """Who holds ``position``, which must be one of ours or adjacent to one of ours."""
        if position in self.positions:
            return self.node_id
        try:
            return self.table[position]
        except KeyError:
            raise ValueError(
                f"{self.node_id} does not know position {position}: it is not adjacent to "
                f"{sorted(self.positions)}"
            ) from None

    def entry_position(self, root_position: int) -> int | None:
        """Our position through which ``root_position``'s broadcast enters us (None if we hold the
        root)."""
        check_position(root_position, self.dimension)
        if root_position in self.positions:
            return None
        entries = [
            p
            for p in sorted(self.positions)
            if tree_parent_position(root_position, p) not in self.positions
        ]
        (entry,) = entries  # check_holding guarantees exactly one
        return entry

    def parent(self, root_position: int) -> str | None:
        """Our parent in the tree rooted at ``root_position`` (None if we hold the root)."""
        try:
            return self._parents[root_position]
        except KeyError:
            pass
        entry = self.entry_position(root_position)
        parent = None if entry is None else tree_parent_position(root_position, entry)
        holder = None if parent is None else self.holder(parent)
        self._parents[root_position] = holder
        return holder

    def children(self, root_position: int) -> tuple[str, ...]:
        """Our children in the tree rooted at ``root_position``: the super-peers we forward its
        broadcasts to, each once (ordered by our position, then by dimension)."""
        try:
            return self._children[root_position]
        except KeyError:
            pass
        check_position(root_position, self.dimension)
        children = tuple(
            self.table[child]
            for position in sorted(self.positions)
            for child in tree_children_positions(root_position, position, self.dimension)
            if child not in self.positions
        )
        self._children[root_position] = children
        return children
