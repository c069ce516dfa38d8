"""A poset node's parents or children, held as compactly as the poset's shape allows.

Why. With mostly distinct subscriptions a node has about two parents and two children, and a
dictionary of one to five entries takes 184 bytes: the two of a node were a fifth of the poset's
memory per subscription (``BENCHMARKS.md``, issue 16). A tuple of two nodes takes 56 and an empty
one is shared. A few nodes (a subscription to a whole class) have thousands of children, and
adding or removing one in a tuple copies it, which over a build is quadratic: beyond ``FEW`` the
edges are a dictionary keyed by the node itself (insertion-ordered, so either form iterates in
the order the edges were made, as the poset's dictionaries keyed by id did).

Readers outside the poset see the edges as before, a read-only mapping from node id to node
(``EdgeView``), made on demand.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, Generic, Protocol, TypeVar

FEW: Final = 32
"""The most edges a tuple holds; one more makes a dictionary, one fewer than that a tuple. Copying
32 pointers costs about what a dictionary operation does, while a dictionary of 9 to 32 nodes
takes 2 to 6 times the tuple's memory (with 8 here, the few such nodes took 43 bytes per
subscription at 10^5)."""


class Identified(Protocol):
    id: int


N = TypeVar("N", bound=Identified)

Edges = tuple[N, ...] | dict[N, None]
"""Either form iterates over the nodes, tests membership of a node and has a length."""


def added(edges: Edges[N], node: N) -> Edges[N]:
    """``edges`` with ``node`` (not already there) last; a dictionary is changed in place."""
    if type(edges) is dict:
        edges[node] = None
        return edges
    if len(edges) < FEW:
        return (*edges, node)
    return dict.fromkeys((*edges, node))


def removed(edges: Edges[N], node: N) -> Edges[N]:
    """``edges`` without ``node`` (which is there), the order of the others kept."""
    if type(edges) is dict:
        del edges[node]
        return tuple(edges) if len(edges) < FEW else edges
    at = edges.index(node)
    return edges[:at] + edges[at + 1 :]


class EdgeView(Mapping[int, N], Generic[N]):
    """Node id -> node over one node's edges, what the poset's readers iterate. A look-up by id
    scans the edges (readers iterate; the poset itself reads the edges directly)."""

    __slots__ = ("_edges",)

    def __init__(self, edges: Edges[N]) -> None:
        self._edges = edges

    def __getitem__(self, node_id: int) -> N:
        for node in self._edges:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def __iter__(self) -> Iterator[int]:
        return (node.id for node in self._edges)

    def __len__(self) -> int:
        return len(self._edges)

    def __contains__(self, node_id: object) -> bool:
        return any(node.id == node_id for node in self._edges)

    def values(self) -> tuple[N, ...]:  # type: ignore[override]
        return tuple(self._edges)

    def __repr__(self) -> str:
        return f"EdgeView({dict(self.items())!r})"
