"""An immutable snapshot of the whole cube: who holds which position, and the trees it induces.

The protocol (``hypercup.node``) never builds one of these: each super-peer only knows its
``LocalView``. Snapshots are for tests, the simulator and the benchmark, which assemble one from
every node's own state and check it against the invariants.

The shape (the "mirror" scheme). The cube has dimension ``d`` and ``TOP = 2**(d-1)``. Position
``x < TOP`` is a *base* position and ``TOP | x`` its *mirror*; the two form *column* ``x``.

* The ``TOP`` base positions are held by ``TOP`` distinct super-peers.
* A column is *split* when a newcomer holds its mirror (and nothing else), *doubled* when the base
  holder holds the mirror too. Exactly the columns ``x < k`` are split (prefix order), for a count
  ``0 <= k <= TOP``, so ``N = TOP + k`` and ``2**(d-1) <= N <= 2**d``.
* So every super-peer holds one or two positions, and two only when they differ in the top
  dimension. That is what makes every broadcast cost exactly N-1 messages on the wire (see
  ``hypercup.view``), and what keeps balance: after any sequence of joins, leaves and failures no
  super-peer holds more than two positions.
* A cube of one super-peer has ``d = 0``; after leaves it can also be ``d = 1`` with the one column
  doubled (``k = 0``).

Distances: ``depth(r, y)``, the length of ``path(r, y)``, is the number of wire hops in ``r``'s
tree, at most ``d = ceil(log2 N)`` (``d - 1 = log2 N`` when ``k = 0``). ``distance(a, b)`` is the
length of a shortest path in the graph of super-peers; it can be one less than ``depth(a, b)``,
because a tree path starts at the root's lowest position while a shortest path may start at its
mirror.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import networkx as nx

from hypercup.errors import TopologyError
from hypercup.positions import (
    hamming,
    neighbour_positions,
    path_positions,
    surrounding_positions,
    top_bit,
    tree_children_positions,
    tree_parent_position,
)
from hypercup.view import LocalView, check_holding


class Topology:
    """Who holds every position of a ``dimension``-cube; read-only once built."""

    __slots__ = ("_adjacency", "_dimension", "_holders", "_positions")

    def __init__(self, *, dimension: int, holders: Sequence[str]) -> None:
        """``holders[p]`` is the id of the super-peer holding position ``p``.

        Raises ``TopologyError`` unless there is one holder per position and every super-peer holds
        one position or a pair differing only in the top dimension (what the trees rely on); the
        rest of the shape is checked by ``check()``."""
        if dimension < 0 or len(holders) != 1 << dimension:
            raise TopologyError(
                f"a cube of dimension {dimension} has {1 << max(dimension, 0)} positions, "
                f"{len(holders)} holders were given"
            )
        positions: dict[str, set[int]] = {}
        for position, node in enumerate(holders):
            positions.setdefault(node, set()).add(position)
        frozen = {node: frozenset(held) for node, held in positions.items()}
        for node, held in frozen.items():
            try:
                check_holding(held, dimension)
            except ValueError as error:
                raise TopologyError(f"{node}: {error}") from None
        self._dimension = dimension
        self._holders = tuple(holders)
        self._positions = MappingProxyType(frozen)
        adjacency: dict[str, set[str]] = {node: set() for node in frozen}
        for position, node in enumerate(self._holders):
            for other in neighbour_positions(position, dimension):
                if self._holders[other] != node:
                    adjacency[node].add(self._holders[other])
        self._adjacency = MappingProxyType(
            {node: frozenset(linked) for node, linked in adjacency.items()}
        )

    @classmethod
    def from_positions(cls, *, dimension: int, positions: Mapping[str, Iterable[int]]) -> Topology:
        """Assembles a snapshot from what each super-peer says it holds; ``TopologyError`` if a
        position has no holder or several."""
        holders: dict[int, str] = {}
        for node, held in positions.items():
            for position in held:
                if position in holders:
                    raise TopologyError(
                        f"position {position} is held by both {holders[position]} and {node}"
                    )
                holders[position] = node
        missing = sorted(set(range(1 << max(dimension, 0))) - set(holders))
        extra = sorted(set(holders) - set(range(1 << max(dimension, 0))))
        if dimension < 0 or missing or extra:
            raise TopologyError(
                f"dimension {dimension}: positions without a holder {missing}, "
                f"positions outside the cube {extra}"
            )
        return cls(dimension=dimension, holders=[holders[p] for p in range(1 << dimension)])

    # -- the snapshot -------------------------------------------------------------------------

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def size(self) -> int:
        """N, the number of super-peers."""
        return len(self._positions)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self._positions)

    def holder(self, position: int) -> str:
        return self._holders[position]

    def positions(self, node: str) -> frozenset[int]:
        try:
            return self._positions[node]
        except KeyError:
            raise KeyError(f"{node!r} is not a super-peer of this cube") from None

    def root_position(self, node: str) -> int:
        """The root of ``node``'s broadcast tree: its lowest position."""
        return min(self.positions(node))

    def neighbour_table(self, node: str) -> dict[int, str]:
        """What ``node``'s neighbour table must be: holder of every position adjacent to its own."""
        around = surrounding_positions(self.positions(node), self._dimension)
        return {q: self._holders[q] for q in sorted(around)}

    def local_view(self, node: str) -> LocalView:
        return LocalView(
            node_id=node,
            dimension=self._dimension,
            positions=self.positions(node),
            table=self.neighbour_table(node),
        )

    def neighbours(self, node: str) -> frozenset[str]:
        self.positions(node)
        return self._adjacency[node]

    # -- spanning trees -----------------------------------------------------------------------

    def entry_position(self, root: str, node: str) -> int | None:
        """The position through which ``root``'s broadcast enters ``node`` (None for the root)."""
        root_position = self.root_position(root)
        if node == root:
            return None
        held = self.positions(node)
        (entry,) = (p for p in held if tree_parent_position(root_position, p) not in held)
        return entry

    def parent(self, root: str, node: str) -> str | None:
        """``node``'s parent in ``root``'s broadcast tree (None for the root itself)."""
        entry = self.entry_position(root, node)
        if entry is None:
            return None
        parent = tree_parent_position(self.root_position(root), entry)
        assert parent is not None
        return self._holders[parent]

    def children(self, root: str, node: str) -> tuple[str, ...]:
        """The super-peers ``node`` forwards ``root``'s broadcasts to."""
        root_position = self.root_position(root)
        return tuple(
            self._holders[child]
            for position in sorted(self.positions(node))
            for child in tree_children_positions(root_position, position, self._dimension)
            if self._holders[child] != node
        )

    def path(self, a: str, b: str) -> list[str]:
        """The super-peers from ``a`` to ``b`` along ``a``'s broadcast tree (both included): the
        route of ``a``'s notifications to ``b``, and reversed, of ``b``'s subscriptions to ``a``."""
        entry = self.entry_position(a, b)
        if entry is None:
            return [a]
        path = [a]
        for position in path_positions(self.root_position(a), entry)[1:]:
            if self._holders[position] != path[-1]:
                path.append(self._holders[position])
        return path

    def depth(self, root: str, node: str) -> int:
        """Wire hops from ``root`` to ``node`` in ``root``'s tree: ``len(path(root, node)) - 1``."""
        return len(self.path(root, node)) - 1

    def broadcast(self, root: str) -> list[tuple[str, str]]:
        """Every (sender, receiver) message on the wire when ``root`` broadcasts, by depth."""
        root_position = self.root_position(root)
        order = sorted(range(1 << self._dimension), key=lambda p: (hamming(root_position, p), p))
        messages = []
        for position in order:
            parent = tree_parent_position(root_position, position)
            if parent is not None and self._holders[parent] != self._holders[position]:
                messages.append((self._holders[parent], self._holders[position]))
        return messages

    # -- the graph of super-peers -----------------------------------------------------------

    def graph(self) -> nx.Graph:
        """The super-peers and their links (a position edge between two different holders)."""
        graph = nx.Graph()
        graph.add_nodes_from(sorted(self._positions))
        graph.add_edges_from((a, b) for a, linked in self._adjacency.items() for b in linked)
        return graph

    def distance(self, a: str, b: str) -> int:
        """Hops on a shortest path between ``a`` and ``b`` in the graph of super-peers."""
        self.positions(a)
        self.positions(b)
        seen = {a: 0}
        queue = deque([a])
        while queue:
            current = queue.popleft()
            if current == b:
                return seen[current]
            for other in self._adjacency[current]:
                if other not in seen:
                    seen[other] = seen[current] + 1
                    queue.append(other)
        raise TopologyError(f"{b} cannot be reached from {a}")

    # -- invariants ---------------------------------------------------------------------------

    def split_columns(self) -> int:
        """``k``: how many columns are split (their mirror held by a newcomer)."""
        if self._dimension == 0:
            return 0
        top = top_bit(self._dimension)
        return sum(1 for x in range(top) if self._holders[top | x] != self._holders[x])

    def check(self) -> None:
        """Raises ``TopologyError`` unless the columns are split in prefix order. The rest of the
        shape holds by construction: a super-peer holding two base positions, or a base and
        another column's mirror, is refused by the constructor."""
        if self._dimension == 0:
            return
        top = top_bit(self._dimension)
        k = self.split_columns()
        for x in range(top):
            split = self._holders[top | x] != self._holders[x]
            if split != (x < k):
                raise TopologyError(
                    f"columns must be split in prefix order: {k} are split, but column {x} is "
                    f"{'split' if split else 'doubled'}"
                )
