"""The nodes that were sent somewhere, indexed, to answer "for which labels was this subscription,
or one covering it, sent to that destination" without testing every node.

Why. Only a few nodes are ever sent: a super-peer forwards a subscription only where nothing
covering it went already, so the sent nodes are about the most general ones. Those covering a node
all match the node's witness, so a ``PredicateIndex`` over the sent nodes, asked with the witness,
yields a small superset of them; ``covers`` confirms each.

The broad ones first. A few sent nodes stand in for most of the others (the broad subscriptions
of a workload), and finding one that covers a node ends most look-ups. ``missing`` therefore
tests the ``HOT`` sent nodes that took labels away most often before it asks the index, and asks
the index only for what is still missing. The answer is the same (the index's pass is exact, and
a label is taken away only by a node that covers the target); only the work differs. On shapes
at 10^5 (2,000 placements into ``bench.poset_scale``'s poset of 5,310 sent nodes), the hot nodes
ended 1,237 of the 2,000 look-ups; of the 763 others, the 104 that found no covering node had to
ask the index anyway (it is how a look-up shows there is none). With the index's walk made
cheaper as well (``PredicateIndex``'s ``predicates_first``), a placement with its look-up went
from 315 to 147 us (the insertion itself some 55 us of them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol

import qel
from poset.predicate_index import PredicateIndex
from poset.samples import Sample

HOT = 64
"""How many of the sent nodes that took labels away most often ``missing`` tests first. Where
the sent nodes are few and all broad (the digital library at 10^5: 75), a look-up tests some
four of them before one covers, where the index would have given one or two: placements with
the look-up went from 32,000 to 27,000 per second there (shapes: 3,200 to 6,800). Testing at
most four hot ones gained library little (28,000) and cost shapes a fifth."""

HOT_RANKED_EVERY = 512
"""Look-ups between two rankings of the hot nodes (a ranking sorts the counts of every sent
node that took labels away: about a millisecond at 5,000)."""


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
        self._index = PredicateIndex(predicates_first=True)
        self._taken: dict[int, int] = {}
        """Per sent node (by id), how many look-ups it took labels away in."""
        self._hot: list[int] = []
        """The ids of the ``HOT`` nodes of ``_taken`` with the highest counts when last ranked,
        by count, then id; some may have left the index since (ids, not nodes: a removed node
        is freed by reference counting alone)."""
        self._until_ranked = 0

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
            self._taken.pop(node.id, None)

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
        tested: set[int] = set()
        if self._until_ranked <= 0:
            self._rank()
        self._until_ranked -= 1
        nodes = self._nodes
        for key in self._hot:
            node = nodes.get(key)
            if node is None:
                continue  # left the index since the ranking
            tested.add(key)
            if self._took(node, target, wanted, holders):
                return wanted
        for key in self._index.match(sample):  # type: ignore[arg-type]
            if key not in tested and self._took(nodes[key], target, wanted, holders):  # type: ignore[index]
                break
        return wanted

    def _took(
        self,
        node: Sendable,
        target: Sendable,
        wanted: dict[str, set[str]],
        holders: list[Sendable] | None,
    ) -> bool:
        """Takes from ``wanted`` the labels sent ``node`` carries if it covers ``target`` (it is
        tested only if it was sent for a label still missing); whether nothing is missing now."""
        for destination, labels in node.sent.items():
            left = wanted.get(destination)
            if left and not left.isdisjoint(labels):
                break
        else:
            return False  # nothing still missing was sent for it
        if not self._holds(node, target):
            return False
        if holders is not None and node is not target:
            holders.append(node)
        self._taken[node.id] = self._taken.get(node.id, 0) + 1
        for destination, labels in node.sent.items():
            left = wanted.get(destination)
            if left:
                left -= labels
                if not left:
                    del wanted[destination]
        return not wanted

    def _rank(self) -> None:
        """Ranks the hot nodes anew (``HOT_RANKED_EVERY``)."""
        taken = self._taken
        self._hot = heapq.nsmallest(HOT, taken, key=lambda key: (-taken[key], key))
        self._until_ranked = HOT_RANKED_EVERY

    def _holds(self, node: Sendable, target: Sendable) -> bool:
        """Whether sent ``node`` covers ``target``."""
        return node is target or self._covers(
            node.subscription, target.subscription, self._compiled[node.id]
        )
