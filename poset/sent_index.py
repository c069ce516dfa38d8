"""The nodes that were sent somewhere, indexed, to answer "for which labels was this subscription,
or one covering it, sent to that destination" without testing every node.

Why. Only a few nodes are ever sent: a super-peer forwards a subscription only where nothing
covering it went already, so the sent nodes are about the most general ones. Those covering a node
all match the node's witness, so a ``PredicateIndex`` over the sent nodes, asked with the witness,
yields a small superset of them; ``covers`` confirms each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import qel
from poset.predicate_index import PredicateIndex
from poset.samples import Sample


class Sendable(Protocol):
    id: int
    subscription: qel.Subscription
    sent: dict[str, set[str]]


class SentIndex:
    """Nodes with a non-empty ``sent``, by id; the caller reports every change of emptiness."""

    def __init__(
        self,
        covers: Callable[[qel.Subscription, qel.Subscription, object], bool],
        compile_general: Callable[[qel.Subscription], object],
    ) -> None:
        self._covers = covers
        self._compile = compile_general
        self._nodes: dict[int, Sendable] = {}
        self._compiled: dict[int, object] = {}
        """Per sent node, what ``covers`` reuses of it as the general side (a DNF's columns and
        alternatives): a look-up tests tens of sent nodes, the same few thousand every time,
        and building them per test was a tenth of a look-up (shapes at 3 x 10^4)."""
        self._index = PredicateIndex()

    def __bool__(self) -> bool:
        return bool(self._nodes)

    def update(self, node: Sendable) -> None:
        """Records whether ``node`` now has something sent."""
        held = node.id in self._nodes
        if node.sent and not held:
            self._nodes[node.id] = node
            self._compiled[node.id] = self._compile(node.subscription)
            self._index.add(node.id, node.subscription)
        elif not node.sent and held:
            self.discard(node)

    def discard(self, node: Sendable) -> None:
        if self._nodes.pop(node.id, None) is not None:
            del self._compiled[node.id]
            self._index.remove(node.id)

    def covering(self, target: Sendable, sample: Sample) -> list[Sendable]:
        """The sent nodes whose subscription covers ``target``'s (itself included), by id;
        ``sample``: the witness of ``target``'s first filter (every node covering it matches
        it)."""
        if not self._nodes:
            return []
        return [
            node
            for node in map(self._nodes.__getitem__, sorted(self._index.match(sample)))  # type: ignore[arg-type, type-var]
            if self._holds(node, target)
        ]

    def missing(
        self,
        target: Sendable,
        sample: Sample,
        wanted: dict[str, set[str]],
        holders: list[Sendable] | None = None,
    ) -> dict[str, set[str]]:
        """``wanted`` (destination -> labels; changed in place and returned) less the labels
        for which ``target``, or a node covering it, was sent to each destination: a
        candidate is tested only if it was sent somewhere for a label still missing, and the
        look-up ends once nothing is. What a router asks ("where must this still go?"): on
        shapes at 6 x 10^4 a node is covered by 11 sent nodes of the 25 that match its
        witness, and testing them all for the union of their labels cost 0.37 ms. The sent
        nodes other than ``target`` that took labels away are appended to ``holders``."""
        for key in self._index.match(sample):  # type: ignore[arg-type]
            node = self._nodes[key]  # type: ignore[index]
            for destination, labels in node.sent.items():
                left = wanted.get(destination)
                if left and not left.isdisjoint(labels):
                    break
            else:
                continue  # nothing still missing was sent for it
            if not self._holds(node, target):
                continue
            if holders is not None and node is not target:
                holders.append(node)
            for destination, labels in node.sent.items():
                left = wanted.get(destination)
                if left:
                    left -= labels
                    if not left:
                        del wanted[destination]
            if not wanted:
                break
        return wanted

    def _holds(self, node: Sendable, target: Sendable) -> bool:
        """Whether sent ``node`` covers ``target``."""
        return node is target or self._covers(
            node.subscription, target.subscription, self._compiled[node.id]
        )
