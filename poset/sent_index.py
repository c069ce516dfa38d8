"""The nodes that were sent somewhere, indexed, to answer "for which labels was this subscription,
or one covering it, sent to that destination" without walking every ancestor.

Why. With dense covering a node has thousands of ancestors (every larger price ceiling), and the
old answer was their union. But only a few nodes are ever sent: a super-peer forwards a
subscription only where nothing covering it went already, so the sent nodes are about the roots.
Those covering a node all match the node's witnesses, so a ``PredicateIndex`` over the sent nodes,
asked with the witnesses, yields a small superset of them; ``covers`` confirms each. The answer is
the union over exactly the covering nodes, as before (the Hasse diagram's ancestors are exactly the
nodes that cover).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

from poset.families import Signed
from poset.predicate_index import PredicateIndex
from qel.filters import witness
from qel.model import Publication


class Sendable(Signed, Protocol):
    id: int
    sent: dict[str, set[str]]


class SentIndex:
    """Nodes with a non-empty ``sent``, by id; the caller reports every change of emptiness."""

    def __init__(self, covers: Callable[[Signed, Signed], bool]) -> None:
        self._covers = covers
        self._nodes: dict[int, Sendable] = {}
        self._index = PredicateIndex()

    def __bool__(self) -> bool:
        return bool(self._nodes)

    def update(self, node: Sendable) -> None:
        """Records whether ``node`` now has something sent."""
        held = node.id in self._nodes
        if node.sent and not held:
            self._nodes[node.id] = node
            self._index.add(node.id, node.subscription)
        elif not node.sent and held:
            self.discard(node)

    def discard(self, node: Sendable) -> None:
        if self._nodes.pop(node.id, None) is not None:
            self._index.remove(node.id)

    def covering(
        self,
        target: Signed,
        witnesses: tuple[Publication, ...] | None = None,
        covered_by: Callable[[Sendable], bool] | None = None,
    ) -> list[Sendable]:
        """The sent nodes whose subscription covers ``target``'s (itself included), by id;
        ``witnesses``, if the caller has them, are those of its filters or of an equivalent
        subscription's (a placement computed them already), and ``covered_by(node)``, if given,
        whether ``node`` covers it (a placement's probe, which keeps its answers)."""
        if not self._nodes:
            return []
        if witnesses is None:
            witnesses = tuple(witness(compiled) for compiled in target.subscription.filters)
        candidates: set[Hashable] | None = None
        for sample in witnesses:
            matched = self._index.match(sample)
            candidates = matched if candidates is None else candidates & matched
            if not candidates:
                return []
        nodes = self._nodes
        if covered_by is None:
            covers = self._covers
            return [
                nodes[i]  # type: ignore[index]
                for i in sorted(candidates)  # type: ignore[type-var]
                if covers(nodes[i], target)  # type: ignore[index, arg-type]
            ]
        return [
            nodes[i]  # type: ignore[index]
            for i in sorted(candidates)  # type: ignore[type-var]
            if covered_by(nodes[i])  # type: ignore[index]
        ]
