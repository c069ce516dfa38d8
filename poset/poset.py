"""The subscriptions of a super-peer and what was sent where (SIENA's poset, design paper Section
4.2), kept as indexes of the covering order, not as its Hasse diagram.

Routing asks three things of the subscriptions a super-peer holds, and none needs the covering
order among all of them:

1. **For a subscription, for which labels it or one covering it was already sent to each
   destination** (``missing``, ``sent_labels``): a super-peer forwards a
   subscription only where nothing covering it went for those labels. Only the *sent* nodes
   count, and they are few (a subscription covered by one sent is not sent): an index of them
   (``poset.sent_index``) asked with the node's witness gives a small superset, ``covers``
   confirms each.
2. **When a sent subscription goes, or is withdrawn from a destination, what it covered that
   must now go there** (``Removed.resend``, ``withdraw``): of the nodes it stood in for (below,
   "Stand-ins"), the most general first, each for the labels that neither a sent node covering
   it nor one chosen before it carries (``poset.plans``), then none kept for labels a chosen
   node covering it carries.
3. **Which subscriptions a publication matches** (``match``): the predicate index
   (``poset.predicate_index``), in proportion to what the publication satisfies.

Stand-ins. Whenever a look-up finds that a sent node carries labels another node was not sent
for (``missing``, a plan, a removal's resend), the sent node is recorded as standing in for
that node (``_stood_in``: per sent node, the ids of those nodes). What holds: a node that wants
a label at a destination, was not sent there for it, and is covered by a node sent there for
it, stands recorded under one such sent node. A router asks ``missing`` whenever a node could
need sending (inserted, its wants grew, a pass of rerouting), and the look-up records what it
finds; nothing else makes a node go unsent. When a sent node goes, or loses a destination's
labels, only what it stood in for can miss them: those are looked up again, and recorded under
what they find. On shapes at 10^5 a sent node's removal looked through the 481 nodes whose
witness it matched, confirming the 180 it covered, to resend 0.2 of them on average (28 ms);
it stood in for fewer, most of them covered by another sent node too. A record is dropped when
its sent node is removed; records of removed nodes are dropped as a set doubles
(``_stands_in``; ids are never reused). ``covered_by`` still answers "what does this cover" in
full (the benches, the tests' oracle).

Why not the Hasse diagram (stops 26 to 73 kept one). Covering densifies as subscriptions come:
on the shapes workload each node had 3.8 parents at 10^4 and 9.7 at 5 x 10^4, and a placement
had to find them and its children among ever more candidates (226 placements per CPU second at
5 x 10^4, BENCHMARKS.md, issue 34, stop 70), for edges routing never read but through the three
questions above. Here placing a subscription is index insertions and, while something is sent,
one look-up among the sent nodes; removing one that was sent nowhere is index removals.

What is kept per node: where the subscription came from (sources: local peer ids or neighbour
super-peer ids, with the subscription ids they used) and where it has been sent: per destination,
the *labels* it was sent for (the super-peer core uses the origins a subscription travels toward;
a covering subscription stands in for another at a destination only for the labels it was sent
with). Subscriptions with the same compiled filters share one node; equivalent ones written
otherwise are nodes of their own, each covering the other (the second is not sent where the
first went; if the first goes, the second is resent in its place).

Order. ``general_first`` lists the nodes by the fewest predicates of their filters, then by id:
a subscription never comes after one it covers with more predicates (a covering subscription
uses no predicate the covered one lacks), and among equal counts by id. It is a cheap guess at
an order that puts every node after those covering it, not that order: a caller routing many
nodes at once plans them per destination (``poset.plans``), which drops what a node chosen later
covers, so that a guess that was wrong costs a look-up, never an extra ``Forward``.

Node ids are integers assigned in insertion order, and every output is ordered (by id, or by
``general_first``'s key), so a sequence of operations always gives the same results (the
simulator relies on it).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

import qel
from poset.ends import Alternatives, alternatives, has_gap, proves, refutes
from poset.gaps import Columns, columns, escapes
from poset.plans import Plan, Resend
from poset.predicate_index import PredicateIndex
from poset.samples import Compact, Sample, compact
from poset.sent_index import SentIndex
from qel.covering import filter_covered
from qel.filters import filter_within, witness
from qel.matching import filter_matches

STOOD_IN_PURGED_FROM = 64
"""Smallest set of stand-in records purged of removed nodes (``SubscriptionPoset._stands_in``)."""

GROUPED_FROM = 64
"""A node with this many (source, id) pairs from more than one source keeps ``sources``
grouped (``PosetNode.grouped``), kept up to date as its pairs change: grouping them anew per
notification matched costs a Python hash and comparison of each source, and a peer making and
withdrawing subscriptions beside a notification stream would make every notification pay it
(0.3 ms each at 1,000 ids: BENCHMARKS.md, issue 37, stop 87)."""

_NONE: Mapping[object, object] = MappingProxyType({})
"""What a node holds as ``sent`` while that is empty (most nodes were sent nowhere): one shared
read-only mapping instead of an empty dictionary each."""


def _shared_empty() -> dict:  # type: ignore[type-arg]
    return _NONE  # type: ignore[return-value]


def _pair_at(origins: tuple[str, ...], source: str, subscription_id: str) -> int:
    """Where in ``origins`` the pair's id is (searched in C: a peer may hold 1,000 here)."""
    at = origins.index(subscription_id, 1)
    while at % 2 == 0 or origins[at - 1] != source:
        at = origins.index(subscription_id, at + 1)
    return at


@dataclass(eq=False, slots=True)
class PosetNode:
    """One subscription (up to the form of its filters) and its routing bookkeeping. ``sent``
    is read-only to everyone but the poset (an empty one is shared)."""

    id: int
    subscription: qel.Subscription
    origins: tuple[str, ...] = ()
    """Pairs ``source, id`` one after the other, in the order they came (``sources`` reads
    them): nearly always one pair, where a dictionary of one source would take 184 bytes more."""
    sent: dict[str, set[str]] = field(default_factory=_shared_empty)
    """Destination -> the labels (origins) the subscription was sent there for."""
    witness: Compact = field(default=(), repr=False)
    """The witness of its first filter (``poset.samples``): what every subscription covering
    it matches."""
    grouped: dict[str, tuple[str, ...]] | None = field(default=None, repr=False)
    """``sources``, for a node of ``GROUPED_FROM`` pairs or more from several sources, kept
    as pairs come and go (None otherwise: computed per call from ``origins``)."""

    def __hash__(self) -> int:
        return self.id

    @property
    def sources(self) -> dict[str, tuple[str, ...]]:
        """Source -> the ids it uses for the subscription (a new dictionary per call). Linear
        in the pairs: it is read for every notification the node matches, and a peer may hold
        ``max_subscriptions_per_peer`` ids of one subscription here (growing a tuple per id made
        that quadratic: 3 ms per notification at 1,000 ids; issue 37)."""
        origins = self.origins
        if len(origins) == 2:
            return {origins[0]: (origins[1],)}
        if self.grouped is not None:
            return dict(self.grouped)
        sources, ids = origins[0::2], origins[1::2]
        if sources.count(sources[0]) == len(sources):  # one source's ids (slices: no loop)
            return {sources[0]: ids}
        found: dict[str, list[str]] = {}
        for source, sid in zip(sources, ids, strict=True):
            held = found.get(source)
            if held is None:
                found[source] = [sid]
            else:
                held.append(sid)
        grouped = {source: tuple(held) for source, held in found.items()}
        if len(origins) >= 2 * GROUPED_FROM:
            self.grouped = grouped
        return dict(grouped)

    @property
    def wire_id(self) -> str:
        """The id this super-peer uses for the subscription on every link it sends it over."""
        return f"s{self.id}"


@dataclass(frozen=True, slots=True)
class Inserted:
    """The node holding an inserted subscription, and whether the insertion made it. What was
    sent for it already is ``missing``, asked by a caller that routes it: a look-up among
    the sent nodes that an insertion with nowhere to go need not pay."""

    node: PosetNode
    created: bool


@dataclass(frozen=True, slots=True)
class Removed:
    node: PosetNode
    deleted: bool
    """True when the last source went and the node left the poset."""
    resend: Mapping[str, Resend]
    """Per destination the node had been sent to: the subscriptions it was covering, with the
    labels they now miss there (send them before retracting the removed one), the most general
    first."""
    retract: tuple[str, ...]
    """Destinations to send the unsubscription to (empty unless ``deleted``)."""


@dataclass(frozen=True, slots=True)
class PosetStatistics:
    nodes: int
    sources: int
    sent_nodes: int
    """Nodes sent to some destination."""
    sent: int
    """(destination, label) pairs sent, over every node."""
    stood_in: int
    """Stand-in records (module docstring, "Stand-ins"), some of removed nodes: what the
    removals of sent nodes look through."""
    stood_in_largest: int
    """The most records under one node."""
    memory_bytes: int
    """Approximate: the nodes with their witnesses and the poset's own dictionaries, not the
    shared subscription objects nor the indexes."""


Wants = Callable[[PosetNode, str], set[str]]
"""``wants(node, destination)``: the labels for which ``destination`` needs ``node``."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused, and resumed as it was, while a large state is built
    that all stays (a bulk insertion, a restart's restore): its passes over the growing state
    free nothing, and took a tenth of a bulk build and a third of a restore at 10^5."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class SubscriptionPoset:
    """Insert, remove, query and match subscriptions; see the module docstring for the costs."""

    def __init__(self) -> None:
        self._nodes: dict[int, PosetNode] = {}
        self._by_source: dict[str, dict[str, PosetNode]] = {}
        """Per source, the node of each id it uses: a source's ids are asked for as a whole
        (a peer leaving, a catch-up), which over a flat index by ``(source, id)`` scanned every
        subscription, once per peer."""
        self._index = PredicateIndex()
        self._sent = SentIndex(_covers_compiled, _compiled)
        self._stood_in: dict[int, set[int]] = {}
        """Per sent node (by id), the ids of the nodes it was found standing in for (module
        docstring, "Stand-ins"); some may have been removed since."""
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[PosetNode]:
        return iter(sorted(self._nodes.values(), key=_by_id))

    def general_first(self) -> list[PosetNode]:
        """Every node, by the fewest predicates of its filters, then by id (module docstring,
        "Order"): what covers a node mostly comes before it."""
        return sorted(self._nodes.values(), key=general_order)

    def node(self, node_id: int) -> PosetNode:
        return self._nodes[node_id]

    def holds(self, node: PosetNode) -> bool:
        """Whether ``node`` is still one of this poset's (not removed since)."""
        return self._nodes.get(node.id) is node

    def node_of(self, source: str, subscription_id: str) -> PosetNode | None:
        return self._by_source.get(source, _NONE).get(subscription_id)  # type: ignore[return-value]

    # -- queries ------------------------------------------------------------------------------
    def sample(self, node: PosetNode) -> Sample:
        """The witness of the node's first filter: what every subscription covering it
        matches."""
        return Sample(node.witness)

    def covered_by(self, node: PosetNode) -> list[PosetNode]:
        """Every other node whose subscription ``node``'s covers, by ``general_order``: a scan
        of every node's witness, each matched one confirmed. Routing never asks it (a removal
        looks at what the node stood in for: module docstring, "Stand-ins"); the benches and
        tests compare with it. An index of the witnesses by predicate answered it in
        proportion to the candidates until stop 77 (``bench.witness_index``): 140 to 230 bytes
        per subscription, a sixth of a placement's time, for this question alone."""
        general = node.subscription
        compiled = _compiled(general)
        filters = general.filters
        found = []
        for other in self._nodes.values():
            if other is node:
                continue
            sample = Sample(other.witness)
            if not any(filter_matches(part, sample) for part in filters):  # type: ignore[arg-type]
                continue
            if _covers_compiled(general, other.subscription, compiled):
                found.append(other)
        found.sort(key=general_order)
        return found

    def missing(self, node: PosetNode, wanted: dict[str, set[str]]) -> dict[str, set[str]]:
        """``wanted`` (destination -> labels; changed in place and returned) less the labels
        for which ``node``, or a subscription covering it, was sent to each destination: where
        a router must still send it (``SentIndex.missing``)."""
        if not self._sent or not wanted:
            return wanted  # nothing sent anywhere (a lone super-peer, a bulk build)
        holders: list[PosetNode] = []
        self._sent.missing(node, self.sample(node), wanted, holders)  # type: ignore[arg-type]
        for holder in holders:
            self._stands_in(holder, node)
        return wanted

    def sent_labels(self, node: PosetNode, destination: str) -> set[str]:
        """The labels for which ``node``, or a subscription covering it, was sent to
        ``destination``."""
        if not self._sent:
            return set()
        found: set[str] = set()
        for holder in self._sent.covering(node, self.sample(node)):
            found |= holder.sent.get(destination, set())
        return found

    def plan(self) -> Plan:
        """An empty plan of what to send to one destination (``poset.plans``); once thinned, it
        records what the nodes it sends stand in for."""
        return Plan(covers, compile_general, self.sample, self._stands_in)  # type: ignore[arg-type]

    # -- updates ------------------------------------------------------------------------------
    def insert(self, subscription: qel.Subscription, source: str, subscription_id: str) -> Inserted:
        """Adds ``subscription`` from ``source`` under the id the source uses for it.

        Re-inserting the same (source, id) with the same subscription, or an equivalent one,
        changes nothing; with another subscription it is an error (the source must unsubscribe
        first).
        """
        existing = self.node_of(source, subscription_id)
        if existing is not None:
            if existing.subscription.key != subscription.key and not _equivalent(
                existing.subscription, subscription
            ):
                raise ValueError(
                    f"{source} already uses the id {subscription_id!r} for another subscription"
                )
            return Inserted(existing, False)
        node = self._holding(subscription.filters)
        created = node is None
        if node is None:
            node = PosetNode(self._next_id, subscription)
            self._next_id += 1
            self._nodes[node.id] = node
            self._index.hold(node.id, subscription.filters)
            node.witness = compact(witness(subscription.filters[0]))
        self._add_source(node, source, subscription_id)
        return Inserted(node, created)

    def insert_many(self, items: Iterable[tuple[qel.Subscription, str, str]]) -> list[Inserted]:
        """Inserts ``(subscription, source, id)`` triples: the same poset and reports as
        ``insert`` called on each in turn. The batch is checked before anything changes: a
        (source, id) used for two different subscriptions raises ``ValueError`` and leaves the
        poset as it was (``insert`` would have taken the items before the offending one).

        The cyclic garbage collector is paused meanwhile (and resumed as it was): a batch creates
        millions of objects that all stay (nodes, index entries), and the collector's passes
        over them, which free nothing, took a tenth of a bulk build at 10^5."""
        batch = list(items)
        self._check_ids(batch)
        with collector_paused():
            return [self.insert(*item) for item in batch]

    def _holding(self, filters: tuple[qel.Filter, ...]) -> PosetNode | None:
        """The node whose subscription has exactly these compiled filters (canonical, and
        already held by the subscription, unlike ``key``, a frozenset built per call), found in
        the predicate index: a dictionary from filters to nodes took 52 bytes per subscription
        at 10^5."""
        for key in self._index.keys_with(filters[0]):
            node = self._nodes[key]  # type: ignore[index]
            if node.subscription.filters == filters:
                return node
        return None

    def _add_source(self, node: PosetNode, source: str, subscription_id: str) -> None:
        """Records that ``source`` uses ``subscription_id`` for the node's subscription (the
        caller checked that it did not already)."""
        key = (source, subscription_id)
        node.origins = (*node.origins, *key) if node.origins else key
        grouped = node.grouped
        if grouped is not None:
            grouped[source] = (*grouped.get(source, ()), subscription_id)
        ids = self._by_source.get(source)
        if ids is None:
            ids = self._by_source[source] = {}
        ids[subscription_id] = node

    def _check_ids(self, batch: list[tuple[qel.Subscription, str, str]]) -> None:
        """Raises ``ValueError`` if a (source, id) of the batch is already used, here or earlier
        in the batch, for a subscription that is not equivalent."""
        used: dict[tuple[str, str], qel.Subscription] = {}
        for subscription, source, subscription_id in batch:
            held = self.node_of(source, subscription_id)
            known = held.subscription if held is not None else used.get((source, subscription_id))
            if known is None:
                used[source, subscription_id] = subscription
            elif known.key != subscription.key and not _equivalent(known, subscription):
                raise ValueError(
                    f"{source} already uses the id {subscription_id!r} for another subscription"
                )

    def mark_sent(self, node: PosetNode, destination: str, labels: Iterable[str]) -> None:
        """Records ``node`` as sent to ``destination`` for ``labels``. A node no longer held (a
        caller acting on a report older than a removal) or no label changes nothing: in the
        sent index, such a node would answer for subscriptions nothing covers any more."""
        labels = set(labels)
        if not labels or self._nodes.get(node.id) is not node:
            return
        if not node.sent:
            node.sent = {}
        node.sent.setdefault(destination, set()).update(labels)
        self._sent.update(node)

    def unmark_sent(self, node: PosetNode, destination: str) -> None:
        if destination in node.sent:
            del node.sent[destination]
            if not node.sent:
                node.sent = _NONE  # type: ignore[assignment]
        self._sent.update(node)

    def remove(self, source: str, subscription_id: str, wants: Wants | None = None) -> Removed:
        """Removes one (source, id); the node goes when its last source does.

        ``wants(node, destination)`` gives the labels ``destination`` needs ``node`` for (the
        routing decides; by default, the labels the removed node was sent there with). The result
        lists, per destination the removed node had been sent to, the subscriptions it covered
        that now miss some of those labels there, with the missing labels.
        """
        ids = self._by_source.get(source)
        node = ids.pop(subscription_id, None) if ids is not None else None
        if node is None:
            raise KeyError(f"{source} has no subscription with id {subscription_id!r}")
        if not ids:
            del self._by_source[source]
        origins = node.origins
        at = _pair_at(origins, source, subscription_id)
        node.origins = origins[: at - 1] + origins[at + 1 :]
        if node.grouped is not None:
            _ungroup(node, source, subscription_id)
        if node.origins:
            return Removed(node, False, {}, ())
        stood_in = self._stood_in.pop(node.id, ())
        below = self._below(node, stood_in) if node.sent else []
        self._sent.discard(node)
        del self._nodes[node.id]
        self._index.release(node.id, node.subscription.filters)
        resend = {}
        for destination in sorted(node.sent):
            chosen = self._uncovered(below, destination, wants or _labels_of(node))
            if chosen:
                resend[destination] = chosen
        return Removed(node, True, resend, tuple(sorted(node.sent)))

    def withdraw(self, node: PosetNode, destination: str, wants: Wants) -> Resend:
        """Stops counting ``node`` as sent to ``destination`` (the caller retracts it there) and
        returns what it covers that must be sent there instead, as ``remove`` does."""
        below = self._below(node, self._stood_in.get(node.id, ()))
        self.unmark_sent(node, destination)
        return self._uncovered(below, destination, wants)

    def count_of(self, source: str) -> int:
        """How many subscriptions ``source`` holds."""
        return len(self._by_source.get(source, ()))

    def ids_of(self, source: str) -> list[str]:
        """The subscription ids ``source`` holds, sorted (remove them one at a time, acting on each
        result before the next: a removal can ask to resend a subscription the next one removes)."""
        return sorted(self._by_source.get(source, ()))

    def _stands_in(self, holder: PosetNode, node: PosetNode) -> None:
        """Records that sent ``holder`` stands in for ``node`` (module docstring, "Stand-ins").
        When a set of records reaches a power of two (from ``STOOD_IN_PURGED_FROM``), the ids of
        removed nodes leave it: amortised, a few look-ups per record."""
        if holder is node:
            return
        ids = self._stood_in.get(holder.id)
        if ids is None:
            self._stood_in[holder.id] = {node.id}
            return
        ids.add(node.id)
        size = len(ids)
        if size >= STOOD_IN_PURGED_FROM and not size & (size - 1):
            nodes = self._nodes
            ids.difference_update([key for key in ids if key not in nodes])

    def _below(self, node: PosetNode, ids: Iterable[int]) -> list[PosetNode]:
        """The nodes of ``ids`` still held, but ``node``, by ``general_order``."""
        nodes = self._nodes
        found = [nodes[key] for key in ids if key in nodes and key != node.id]
        found.sort(key=general_order)
        return found

    def _uncovered(self, nodes: list[PosetNode], destination: str, wants: Wants) -> Resend:
        """Of ``nodes`` (by ``general_order``), those that miss some wanted labels at
        ``destination``, with the labels: a node is chosen for what neither the sent nodes
        covering it nor those chosen before it carry there, and the plan then drops what a node
        chosen later covers (``Plan.thinned``). The sent index is asked only for the labels that
        neither the plan nor the sent nodes it gave so far (``holders``) account for: under a
        broad subscription that goes, a few nodes, chosen or sent, answer for the thousands
        below them (on shapes at 10^5, a look-up per node below took 6.5 s per removal)."""
        plan = self.plan()
        holders = self.plan()  # the sent nodes met so far, with their labels at ``destination``
        for node in nodes:
            missing = plan.missing(node, wants(node, destination))
            if missing:
                missing = holders.missing(node, missing)
            if missing and self._sent:
                for holder in self._sent.covering(node, self.sample(node)):
                    labels = holder.sent.get(destination)
                    if labels and not missing.isdisjoint(labels):
                        holders.choose(holder, labels)
                        self._stands_in(holder, node)
                        missing = missing - labels
            if missing:
                plan.choose(node, missing)
        holders.hold()
        return plan.thinned()

    # -- matching -----------------------------------------------------------------------------
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
        memory = sum(
            sys.getsizeof(n)
            + sys.getsizeof(n.witness)
            + (sys.getsizeof(n.sent) if n.sent else 0)
            + (sys.getsizeof(n.origins) if len(n.origins) > 2 else 0)  # else the key's
            for n in self._nodes.values()
        )
        memory += sum(sys.getsizeof(d) for d in (self._nodes, self._by_source))
        memory += sum(map(sys.getsizeof, self._by_source.values()))
        memory += sys.getsizeof(self._stood_in) + sum(map(sys.getsizeof, self._stood_in.values()))
        sizes = list(map(len, self._stood_in.values()))
        return PosetStatistics(
            nodes=len(self._nodes),
            sources=sum(map(len, self._by_source.values())),
            sent_nodes=sum(1 for n in self._nodes.values() if n.sent),
            sent=sum(len(labels) for n in self._nodes.values() for labels in n.sent.values()),
            stood_in=sum(sizes),
            stood_in_largest=max(sizes, default=0),
            memory_bytes=memory,
        )


def fan_out(nodes: list[PosetNode]) -> dict[str, set[str]]:
    result: dict[str, set[str]] = {}
    for node in nodes:
        origins = node.origins
        for at in range(0, len(origins), 2):
            found = result.get(origins[at])
            if found is None:
                found = result[origins[at]] = set()
            found.add(origins[at + 1])
    return result


def general_order(node: PosetNode) -> tuple[int, int]:
    """The key of ``general_first``: the predicates of the node's filters (every filter of a
    subscription has those of its triple patterns), then its id."""
    return len(node.subscription.filters[0].predicates), node.id


def covers(general: PosetNode, specific: PosetNode, compiled: object = None) -> bool:
    """Whether ``general``'s subscription covers ``specific``'s (``_covers_compiled``;
    ``compiled``: ``compile_general(general)``, when ``general`` is tested against many)."""
    return _covers_compiled(general.subscription, specific.subscription, compiled)  # type: ignore[arg-type]


def compile_general(node: PosetNode) -> tuple[Columns, Alternatives] | None:
    """What ``covers`` reuses of ``node`` as the general side of many tests."""
    return _compiled(node.subscription)


def _labels_of(removed: PosetNode) -> Wants:
    def wants(node: PosetNode, destination: str) -> set[str]:
        return set(removed.sent.get(destination, ()))

    return wants


def _compiled(general: qel.Subscription) -> tuple[Columns, Alternatives] | None:
    """What ``_covers_compiled`` reuses of a DNF tested against many subscriptions."""
    filters = general.filters
    return (columns(filters), alternatives(filters)) if len(filters) > 1 else None


def _covers_compiled(
    general: qel.Subscription,
    specific: qel.Subscription,
    compiled: tuple[Columns, Alternatives] | None,
) -> bool:
    """``qel.covers``, minus what is asked thousands of times a second need not pay: comparing
    the keys (two frozensets built per call), and, against a one-filter subscription,
    ``filter_covered`` (``filter_within`` decides: below).

    Against a DNF (``compiled``: ``general``'s columns and alternatives when the caller tests
    it against many; else its alternatives are built per test), a filter of ``specific`` with a
    value that one dimension of ``general`` leaves out refutes first (``poset.gaps``,
    ``poset.ends.has_gap``): three quarters of the "no"s on shapes, at a few microseconds
    instead of 12 to 70. Then each filter whose predicates do not repeat is covered if
    ``general``'s filters hold it along one dimension at most (``poset.ends.proves``), else
    refuted at the ends of its ranges when it can be (``poset.ends.refutes``);
    ``filter_covered`` decides the rest.

    Against one filter ``H``, ``filter_within`` decides each filter ``F`` of ``specific``, its
    predicates repeated or not: ``H`` covers ``F`` iff ``F``'s subject domain lies within
    ``H``'s and each pattern of ``H`` holds some pattern of ``F`` on its predicate. If one does
    not, a publication of ``F`` with one object per pattern of ``F`` (its patterns name distinct
    variables: the objects are chosen apart), each outside that pattern of ``H`` wherever the
    pattern of ``F`` is not within it, matches ``F`` and not ``H``.

    First what refutes most pairs: a subscription covers another only if it uses no predicate
    the other lacks (every filter of a subscription has the predicates of its triple patterns,
    and a publication of the other need carry no more), one C-level subset test of two interned
    frozensets."""
    candidates = general.filters
    if not candidates[0].predicates <= specific.filters[0].predicates:
        return False
    if len(candidates) > 1:
        if compiled is None:
            ends = alternatives(candidates)
            for part in specific.filters:
                if has_gap(ends, part):
                    return False
        else:
            found, ends = compiled
            for part in specific.filters:
                if escapes(found, part):
                    return False
        for part in specific.filters:
            if len(part.patterns) != len(part.predicates):
                if any(filter_within(part, candidate) for candidate in candidates):
                    continue
            elif proves(ends, part):
                continue
            elif refutes(ends, part):
                return False
            if not filter_covered(part, candidates):
                return False
        return True
    only, parts = candidates[0], specific.filters
    if not filter_within(parts[0], only):
        return False
    return len(parts) == 1 or all(filter_within(part, only) for part in parts[1:])


def _equivalent(first: qel.Subscription, second: qel.Subscription) -> bool:
    return qel.covers(first, second) and qel.covers(second, first)


def _by_id(node: PosetNode) -> int:
    return node.id


def _ungroup(node: PosetNode, source: str, subscription_id: str) -> None:
    """Takes a removed pair out of ``node.grouped`` (already out of ``origins``), or forgets
    the grouping below ``GROUPED_FROM`` pairs. The sources stay in the order ``sources`` gives
    from ``origins``, each where its first pair is: when a source's first pair goes, it may now
    come after another source (a few look-ups in C, one per source)."""
    grouped = node.grouped
    assert grouped is not None
    if len(node.origins) < 2 * GROUPED_FROM:
        node.grouped = None
        return
    held = grouped[source]
    place = held.index(subscription_id)
    if len(held) == 1:
        del grouped[source]
        return
    grouped[source] = held[:place] + held[place + 1 :]
    if place == 0:
        first = {s: _pair_at(node.origins, s, ids[0]) for s, ids in grouped.items()}
        order = sorted(first, key=first.__getitem__)
        if order != list(grouped):
            node.grouped = {s: grouped[s] for s in order}
