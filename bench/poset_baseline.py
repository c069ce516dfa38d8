"""The subscription poset as it was before issue 16 (commit 6765148), kept as the baseline of
``bench.poset_scale``: it finds a new subscription's place by testing every candidate the two
indexes return (every node that covers it and every node it covers), and walks every ancestor for
what was sent. Not used by the super-peer; only measured beside ``poset.SubscriptionPoset``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import qel
from bench.witness_index import WitnessIndex
from poset.predicate_index import PredicateIndex
from qel.filters import witness


@dataclass(eq=False)
class PosetNode:
    """One subscription (up to equivalence) and its routing bookkeeping."""

    id: int
    subscription: qel.Subscription
    sources: dict[str, set[str]] = field(default_factory=dict)
    sent: dict[str, set[str]] = field(default_factory=dict)
    """Destination -> the labels (origins) the subscription was sent there for."""
    parents: dict[int, PosetNode] = field(default_factory=dict, repr=False)
    children: dict[int, PosetNode] = field(default_factory=dict, repr=False)

    def __hash__(self) -> int:
        return self.id

    @property
    def wire_id(self) -> str:
        """The id this super-peer uses for the subscription on every link it sends it over."""
        return f"s{self.id}"


@dataclass(frozen=True, slots=True)
class Inserted:
    node: PosetNode
    created: bool
    already_sent: Mapping[str, frozenset[str]]
    """Per destination, the labels for which this subscription, or one covering it, was already
    sent there: the caller forwards only what is missing."""


Resend = tuple[tuple[PosetNode, frozenset[str]], ...]


@dataclass(frozen=True, slots=True)
class Removed:
    node: PosetNode
    deleted: bool
    """True when the last source went and the node left the poset."""
    resend: Mapping[str, Resend]
    """Per destination the node had been sent to: the subscriptions it was covering, with the
    labels they now miss there (send them before retracting the removed one), parents first."""
    retract: tuple[str, ...]
    """Destinations to send the unsubscription to (empty unless ``deleted``)."""


@dataclass(frozen=True, slots=True)
class PosetStatistics:
    nodes: int
    roots: int
    edges: int
    sources: int
    sent: int
    memory_bytes: int
    """Approximate: the poset's own containers, not the shared subscription objects."""


Wants = Callable[[PosetNode, str], set[str]]
"""``wants(node, destination)``: the labels for which ``destination`` needs ``node``."""


class SubscriptionPoset:
    """Insert, remove, query and match subscriptions; see the module docstring for the costs."""

    def __init__(self) -> None:
        self._nodes: dict[int, PosetNode] = {}
        self._by_key: dict[frozenset[qel.Filter], PosetNode] = {}
        self._by_source: dict[tuple[str, str], PosetNode] = {}
        self._roots: dict[int, PosetNode] = {}
        self._index = PredicateIndex()
        self._witnesses = WitnessIndex()
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[PosetNode]:
        return iter(sorted(self._nodes.values(), key=_by_id))

    def node(self, node_id: int) -> PosetNode:
        return self._nodes[node_id]

    def node_of(self, source: str, subscription_id: str) -> PosetNode | None:
        return self._by_source.get((source, subscription_id))

    def roots(self) -> list[PosetNode]:
        return sorted(self._roots.values(), key=_by_id)

    # -- queries ------------------------------------------------------------------------------
    def covering(self, subscription: qel.Subscription) -> list[PosetNode]:
        """Every node whose subscription covers ``subscription`` (equivalent ones included)."""
        candidates: set[int] | None = None
        for compiled in subscription.filters:
            matched = self._index.match(witness(compiled))
            candidates = matched if candidates is None else candidates & matched
        return sorted(
            (
                self._nodes[i]
                for i in candidates or ()
                if qel.covers(self._nodes[i].subscription, subscription)
            ),
            key=_by_id,
        )

    def covered(self, subscription: qel.Subscription) -> list[PosetNode]:
        """Every node whose subscription ``subscription`` covers (equivalent ones included)."""
        return sorted(
            (
                self._nodes[i]
                for i in self._witnesses.covered_candidates(subscription)
                if qel.covers(subscription, self._nodes[i].subscription)
            ),
            key=_by_id,
        )

    def ancestors(self, node: PosetNode) -> list[PosetNode]:
        """Every node that strictly covers ``node`` (its transitive parents), by id."""
        return sorted(_ancestors(node).values(), key=_by_id)

    def sent_labels(self, node: PosetNode, destination: str) -> set[str]:
        """The labels for which ``node``, or a subscription covering it, was sent to
        ``destination``."""
        found = set(node.sent.get(destination, ()))
        for ancestor in _ancestors(node).values():
            found |= ancestor.sent.get(destination, set())
        return found

    def covered_already_sent(
        self,
        target: PosetNode | qel.Subscription,
        destination: str,
        labels: set[str] | None = None,
    ) -> bool:
        """Whether ``target``, or subscriptions covering it, were already sent to ``destination``
        for every one of ``labels`` (for some label, when ``labels`` is None)."""
        if isinstance(target, PosetNode):
            found = self.sent_labels(target, destination)
        else:
            found = set()
            for node in self.covering(target):
                found |= node.sent.get(destination, set())
        return bool(found) if labels is None else labels <= found

    # -- updates ------------------------------------------------------------------------------
    def insert(self, subscription: qel.Subscription, source: str, subscription_id: str) -> Inserted:
        """Adds ``subscription`` from ``source`` under the id the source uses for it.

        Re-inserting the same (source, id) with the same subscription changes nothing; with a
        different subscription it is an error (the source must unsubscribe first).
        """
        existing = self._by_source.get((source, subscription_id))
        if existing is not None:
            if existing.subscription.key != subscription.key and not _equivalent(
                existing.subscription, subscription
            ):
                raise ValueError(
                    f"{source} already uses the id {subscription_id!r} for another subscription"
                )
            return Inserted(existing, False, self._sent_above(existing, include_self=True))
        node = self._by_key.get(subscription.key)
        created = False
        if node is None:
            covering = self.covering(subscription)
            covered_ids = {n.id for n in self.covered(subscription)}
            equivalent = [n for n in covering if n.id in covered_ids]
            if equivalent:
                node = equivalent[0]
            else:
                node = self._link_new(subscription, covering, covered_ids)
                created = True
        already_sent = self._sent_above(node, include_self=not created)
        node.sources.setdefault(source, set()).add(subscription_id)
        self._by_source[source, subscription_id] = node
        return Inserted(node, created, already_sent)

    def _link_new(
        self, subscription: qel.Subscription, covering: list[PosetNode], covered_ids: set[int]
    ) -> PosetNode:
        covering_ids = {n.id for n in covering}
        predecessors = [n for n in covering if not (n.children.keys() & covering_ids)]
        covered = [self._nodes[i] for i in sorted(covered_ids)]
        successors = [n for n in covered if not (n.parents.keys() & covered_ids)]
        node = PosetNode(self._next_id, subscription)
        self._next_id += 1
        for parent in predecessors:
            for child in successors:
                if child.id in parent.children:
                    del parent.children[child.id]
                    del child.parents[parent.id]
            parent.children[node.id] = node
            node.parents[parent.id] = parent
        for child in successors:
            child.parents[node.id] = node
            node.children[child.id] = child
            self._roots.pop(child.id, None)
        if not predecessors:
            self._roots[node.id] = node
        self._nodes[node.id] = node
        self._by_key[subscription.key] = node
        self._index.add(node.id, subscription)
        self._witnesses.add(node.id, subscription)
        return node

    def mark_sent(self, node: PosetNode, destination: str, labels: Iterable[str]) -> None:
        node.sent.setdefault(destination, set()).update(labels)

    def unmark_sent(self, node: PosetNode, destination: str) -> None:
        node.sent.pop(destination, None)

    def remove(self, source: str, subscription_id: str, wants: Wants | None = None) -> Removed:
        """Removes one (source, id); the node goes when its last source does.

        ``wants(node, destination)`` gives the labels ``destination`` needs ``node`` for (the
        routing decides; by default, the labels the removed node was sent there with). The result
        lists, per destination the removed node had been sent to, the subscriptions below it that
        now miss some of those labels there, with the missing labels.
        """
        node = self._by_source.pop((source, subscription_id), None)
        if node is None:
            raise KeyError(f"{source} has no subscription with id {subscription_id!r}")
        ids = node.sources[source]
        ids.discard(subscription_id)
        if not ids:
            del node.sources[source]
        if node.sources:
            return Removed(node, False, {}, ())
        below = _descendants(node)
        self._unlink(node)
        resend = {}
        for destination in sorted(node.sent):
            chosen = self.uncovered(below, destination, wants or _labels_of(node))
            if chosen:
                resend[destination] = chosen
        return Removed(node, True, resend, tuple(sorted(node.sent)))

    def withdraw(self, node: PosetNode, destination: str, wants: Wants) -> Resend:
        """Stops counting ``node`` as sent to ``destination`` (the caller retracts it there) and
        returns what below it must be sent there instead, as ``remove`` does."""
        below = _descendants(node)
        self.unmark_sent(node, destination)
        return self.uncovered(below, destination, wants)

    def ids_of(self, source: str) -> list[str]:
        """The subscription ids ``source`` holds, sorted (remove them one at a time, acting on each
        result before the next: a removal can ask to resend a subscription the next one removes)."""
        return sorted(sid for src, sid in self._by_source if src == source)

    def _unlink(self, node: PosetNode) -> None:
        parents = list(node.parents.values())
        children = list(node.children.values())
        for parent in parents:
            del parent.children[node.id]
        for child in children:
            del child.parents[node.id]
        for child in children:
            above = set(_ancestors(child))
            for parent in parents:
                if parent.id in above:
                    continue
                parent.children[child.id] = child
                child.parents[parent.id] = parent
                above.add(parent.id)
                above.update(_ancestors(parent))
            if not child.parents:
                self._roots[child.id] = child
        self._roots.pop(node.id, None)
        del self._nodes[node.id]
        del self._by_key[node.subscription.key]
        self._index.remove(node.id)
        self._witnesses.remove(node.id)

    def uncovered(self, nodes: list[PosetNode], destination: str, wants: Wants) -> Resend:
        """Of ``nodes``, those that miss some wanted labels at ``destination``, with the labels,
        ancestors first; what an earlier one will be sent for counts as covering later ones."""
        planned: dict[int, set[str]] = {}
        chosen = []
        ordered = sorted(nodes, key=lambda n: (len(_ancestors(n)), n.id))
        for current in ordered:
            have = self.sent_labels(current, destination)
            for ancestor in _ancestors(current).values():
                have |= planned.get(ancestor.id, set())
            missing = wants(current, destination) - have
            if missing:
                planned[current.id] = missing
                chosen.append((current, frozenset(missing)))
        return tuple(chosen)

    def _sent_above(self, node: PosetNode, *, include_self: bool) -> dict[str, frozenset[str]]:
        found: dict[str, set[str]] = {}
        for holder in ([node] if include_self else []) + self.ancestors(node):
            for destination, labels in holder.sent.items():
                found.setdefault(destination, set()).update(labels)
        return {d: frozenset(labels) for d, labels in sorted(found.items())}

    # -- matching -----------------------------------------------------------------------------
    def match_walk(self, publication: qel.Publication) -> list[PosetNode]:
        """Matching nodes found by walking down from the roots, below matching nodes only (a node
        that does not match has no matching descendant: they are all covered by it)."""
        found: dict[int, PosetNode] = {}
        seen: set[int] = set()
        stack = list(self._roots.values())
        while stack:
            current = stack.pop()
            if current.id in seen:
                continue
            seen.add(current.id)
            if qel.matches(current.subscription, publication):
                found[current.id] = current
                stack.extend(current.children.values())
        return sorted(found.values(), key=_by_id)

    def match_index(self, publication: qel.Publication) -> list[PosetNode]:
        """Matching nodes found by the predicate index: cost proportional to what the publication
        satisfies, whatever the shape of the poset. In no particular order."""
        nodes = self._nodes
        return [nodes[i] for i in set().union(*self._index.match_groups(publication))]

    def match(self, publication: qel.Publication) -> dict[str, set[str]]:
        """For each source, the ids of its subscriptions that match: the notification fan-out."""
        return fan_out(self.match_index(publication))

    # -- figures ------------------------------------------------------------------------------
    def statistics(self) -> PosetStatistics:
        edges = sum(len(n.children) for n in self._nodes.values())
        memory = sum(
            sys.getsizeof(n)
            + sys.getsizeof(n.sources)
            + sum(sys.getsizeof(ids) for ids in n.sources.values())
            + sys.getsizeof(n.sent)
            + sys.getsizeof(n.parents)
            + sys.getsizeof(n.children)
            for n in self._nodes.values()
        )
        memory += sum(
            sys.getsizeof(d) for d in (self._nodes, self._by_key, self._by_source, self._roots)
        )
        return PosetStatistics(
            nodes=len(self._nodes),
            roots=len(self._roots),
            edges=edges,
            sources=len(self._by_source),
            sent=sum(len(labels) for n in self._nodes.values() for labels in n.sent.values()),
            memory_bytes=memory,
        )


def fan_out(nodes: list[PosetNode]) -> dict[str, set[str]]:
    result: dict[str, set[str]] = {}
    for node in nodes:
        for source, ids in node.sources.items():
            result.setdefault(source, set()).update(ids)
    return result


def _labels_of(removed: PosetNode) -> Wants:
    def wants(node: PosetNode, destination: str) -> set[str]:
        return set(removed.sent.get(destination, ()))

    return wants


def _equivalent(first: qel.Subscription, second: qel.Subscription) -> bool:
    return qel.covers(first, second) and qel.covers(second, first)


def _ancestors(node: PosetNode) -> dict[int, PosetNode]:
    return _closure(node, "parents")


def _descendants(node: PosetNode) -> list[PosetNode]:
    return list(_closure(node, "children").values())


def _closure(node: PosetNode, direction: str) -> dict[int, PosetNode]:
    """Every node reachable from ``node`` (not itself) following ``parents`` or ``children``."""
    seen: dict[int, PosetNode] = {}
    stack = list(getattr(node, direction).values())
    while stack:
        current = stack.pop()
        if current.id not in seen:
            seen[current.id] = current
            stack.extend(getattr(current, direction).values())
    return seen


def _by_id(node: PosetNode) -> int:
    return node.id
