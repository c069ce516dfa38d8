"""What one routing step sends to one destination, chosen most general first and thinned so that
no subscription goes for labels a subscription covering it carries there.

Why. A super-peer sends a subscription to a destination only for the labels that nothing
covering it was sent there for. Routing many subscriptions at once (a restart, a change of the
cube, a sent subscription withdrawn with thousands under it) in an order that puts each after
every subscription covering it would send exactly those; the poset keeps no such order
(``poset.poset``, "Order"), only a cheap guess at it. A plan takes the subscriptions in the
guessed order and chooses each for what neither the sent subscriptions nor those chosen before
it cover (``missing`` asks an index of the chosen ones, which stay few: the most general),
then ``thinned`` takes from each chosen one the labels that chosen ones covering it carry, so a
wrong guess costs a look-up and never an extra message. Among subscriptions that cover each
other, the one with the lower id is the one kept.

A plan also tells the poset (``stands_in``), once thinned, which sent subscription stands in
for each one it left out (``poset.poset``, "Stand-ins"): a chosen one for what it covered in
``missing``, and for a chosen one that lost labels to others, those others, or what stands in
for them in turn when they lost theirs (never a subscription left unsent: what stands in for
another must carry what that one wants).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

import qel
from poset.predicate_index import PredicateIndex

RECENT_COVERING: Final = 32
"""Chosen subscriptions that covered the latest look-ups, tested first (``Plan.missing``)."""


class Plannable(Protocol):
    id: int
    subscription: qel.Subscription


Resend = tuple[tuple[Plannable, frozenset[str]], ...]
"""Subscriptions with the labels to send them for, the most general first."""

StandsIn = Callable[[Plannable, Plannable], None]
"""``stands_in(holder, node)``: ``holder``, sent (or about to be), covers ``node`` and carries
labels ``node`` was not sent for."""


class Plan:
    """The subscriptions chosen for one destination, with their labels, in the order chosen."""

    def __init__(
        self,
        covers: Callable[[Plannable, Plannable, object], bool],
        compile_general: Callable[[Plannable], object],
        sample: Callable[[Plannable], object],
        stands_in: StandsIn,
    ) -> None:
        self._covers = covers
        self._compile = compile_general
        self._compiled: dict[int, object] = {}
        """Per chosen one, what ``covers`` reuses of it as the general side (a DNF's columns
        and alternatives): a chosen one is tested against many. Built per test they were a
        quarter of a profile of removals (shapes at 3 x 10^4); built once, with the flat
        samples (``poset.samples``), 2,000 removals took 0.27 CPU s instead of 0.31."""
        self._sample = sample
        self._stands_in = stands_in
        self._covered: dict[int, list[Plannable]] = {}
        """Per chosen one, what it took labels from in ``missing``."""
        self._chosen: dict[int, tuple[Plannable, set[str]]] = {}
        self._index = PredicateIndex(predicates_first=True)
        self._recent: list[tuple[Plannable, set[str]]] = []
        """The chosen ones that covered the latest look-ups, the latest first (at most
        ``RECENT_COVERING``): asked before the index. Taken most general first, subscriptions
        that follow each other are often covered by the same few chosen ones; a look-up that
        one of them answers skips the index's match, which was 60% of routing 10^5 shapes
        toward a new neighbour (2.5x faster at 3 x 10^4, 2.4x at 10^5)."""

    def __bool__(self) -> bool:
        return bool(self._chosen)

    def missing(self, node: Plannable, labels: set[str]) -> set[str]:
        """``labels`` less those of the chosen subscriptions that cover ``node`` (itself, if
        chosen): a chosen one is tested only if it carries a label still missing, and the
        look-up ends once none is."""
        if not self._chosen or not labels:
            return labels
        left = set(labels)
        covers = self._covers
        compiled = self._compiled_of
        recent = self._recent
        tested = set()
        for entry in list(recent):
            other, carried = entry
            tested.add(other.id)
            if left.isdisjoint(carried) or not (
                other is node or covers(other, node, compiled(other))
            ):
                continue
            left -= carried
            self._took(other, node)
            recent.remove(entry)
            recent.insert(0, entry)
            if not left:
                return left
        chosen = self._chosen
        for key in self._index.match(self._sample(node)):  # type: ignore[arg-type]
            if key in tested:
                continue
            other, carried = chosen[key]  # type: ignore[index]
            if left.isdisjoint(carried) or not (
                other is node or covers(other, node, compiled(other))
            ):
                continue
            left -= carried
            self._took(other, node)
            recent.insert(0, chosen[key])  # type: ignore[index]
            del recent[RECENT_COVERING:]
            if not left:
                break
        return left

    def _compiled_of(self, node: Plannable) -> object:
        """``compile_general(node)``, built at its first test."""
        try:
            return self._compiled[node.id]
        except KeyError:
            found = self._compiled[node.id] = self._compile(node)
            return found

    def _took(self, chosen: Plannable, node: Plannable) -> None:
        if chosen is not node:
            self._covered.setdefault(chosen.id, []).append(node)

    def choose(self, node: Plannable, labels: set[str]) -> None:
        held = self._chosen.get(node.id)
        if held is not None:
            held[1].update(labels)
            return
        self._chosen[node.id] = (node, set(labels))
        self._index.add(node.id, node.subscription)

    def thinned(self) -> Resend:
        """The chosen subscriptions in the order chosen, each less the labels of the chosen
        ones that cover it (of two that cover each other, only the higher id loses them): what
        remains is what must be sent, and nothing of it is carried by another."""
        chosen = self._chosen
        covers = self._covers
        compiled = self._compiled_of
        kept = []
        over_by: dict[int, list[int]] = {}
        for key, (node, labels) in chosen.items():
            over: set[str] = set()
            for other_key in self._index.match(self._sample(node)):  # type: ignore[arg-type]
                if other_key == key:
                    continue
                other, other_labels = chosen[other_key]  # type: ignore[index]
                if other_labels <= over or not covers(other, node, compiled(other)):
                    continue
                if other.id < node.id or not covers(node, other, compiled(node)):
                    over |= other_labels
                    over_by.setdefault(key, []).append(other_key)  # type: ignore[arg-type]
            rest = labels - over
            if rest:
                kept.append((node, frozenset(rest)))
        self._tell_stand_ins({node.id for node, _ in kept}, over_by)
        return tuple(kept)

    def hold(self) -> None:
        """Tells ``stands_in`` what each chosen one covered in ``missing``, for a plan whose
        chosen ones are all sent already (the sent ones met while looking through what a
        removed subscription stood in for: ``SubscriptionPoset._uncovered``)."""
        self._tell_stand_ins(set(self._chosen), {})

    def _tell_stand_ins(self, sent: set[int], over_by: dict[int, list[int]]) -> None:
        """``stands_in`` for each chosen one's covered, under the sent ones that stand in for
        it: itself if ``sent`` holds it, and those that stand in for the chosen ones it lost
        labels to (``over_by``: one that covers it and is not covered back, or, among
        equivalents, one of a lower id: no cycle; one on the path being resolved is not waited
        for again, should the covering tests ever say otherwise)."""
        stands_in = self._stands_in
        chosen = self._chosen
        holders: dict[int, list[Plannable]] = {}

        def holders_of(key: int) -> list[Plannable]:
            found = holders.get(key)
            if found is not None:
                return found
            stack = [(key, iter(over_by.get(key, ())))]
            on_path = {key}
            while stack:  # depth first without recursion: chosen ones can nest deep
                top, others = stack[-1]
                for other_key in others:
                    if other_key not in holders and other_key not in on_path:
                        stack.append((other_key, iter(over_by.get(other_key, ()))))
                        on_path.add(other_key)
                        break
                else:
                    stack.pop()
                    on_path.discard(top)
                    mine = [chosen[top][0]] if top in sent else []
                    for other_key in over_by.get(top, ()):
                        mine.extend(h for h in holders.get(other_key, ()) if h not in mine)
                    holders[top] = mine
            return holders[key]

        for key, covered in self._covered.items():
            for holder in holders_of(key):
                for node in covered:
                    stands_in(holder, node)
        for key, others in over_by.items():
            node = chosen[key][0]
            for other_key in others:
                for holder in holders_of(other_key):
                    stands_in(holder, node)
