"""The subscription poset of a super-peer (SIENA's poset, design paper Section 4.2).

A DAG whose nodes are subscriptions ordered by ``qel.covers``: an edge goes from a subscription to
each one it *immediately* covers (the Hasse diagram), and subscriptions that cover each other share
one node. Each node records where the subscription came from (sources: local peer ids or neighbour
super-peer ids, with the subscription ids they used) and where it has been sent: per destination,
the *labels* it was sent for (the super-peer core uses the origins a subscription travels toward; a
covering subscription only stands in for another at a destination for the labels it was sent
with). That bookkeeping is what lets a super-peer forward a subscription only where no covering
subscription was already sent, and, when a subscription goes, resend first what it was covering
(SIENA unsubscription), so no notification is lost on the way.

Finding a new subscription's place without comparing it with every node (``poset.chains``): the
nodes are split into chains (each node covers the next); a chain holds a node covering ``q`` iff
its top covers ``q`` (tops are indexed by a ``PredicateIndex`` matched against ``q``'s witnesses),
and in such a chain a binary search finds the lowest covering node. The immediate predecessors
are the minimal ones of these. The immediate successors are found by the cheaper of two searches
(``_successors``): walks down from the predecessors through the nodes incomparable with ``q``,
or, symmetrically, a binary search in every chain whose bottom ``q`` covers (bottoms are indexed by
a ``WitnessIndex``). Cost of an insertion: index look-ups, O(log length) tests per chain above
``q``, and the cheaper successor search; not one test per comparable node, which with dense
covering (price ceilings under price ceilings) is thousands. Removal re-links the removed node's
parents and children, testing each new pair against the child's other parents only.

Families with two or more varying bounds (price ranges, ``P <= a ; S >= b``: ``poset.dominance``)
are wide, so many chains: a member of one is placed among its family by that family's points
(the minimal members covering it, the maximal ones it covers), and among everything else by the
chains of other families, which the family's members never join.
``insert_many`` places a batch most general first (``poset.generality``).

What was sent where (``sent_labels``, what ``insert`` reports as already sent, what ``remove``
must resend) is the union over the *sent* nodes covering a node, found through an index of the
sent nodes (``poset.sent_index``), which are few, instead of a walk over all its ancestors.

Node ids are integers assigned in insertion order, and every output is ordered by id (``top_down``:
covering before covered, then by id), so a sequence of operations always gives the same results
(the simulator relies on it).
"""

from __future__ import annotations

import gc
import heapq
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

import qel
from poset.chains import Chain, ChainDecomposition, Probe
from poset.dominance import FamilyPoints, point
from poset.edges import Edges, EdgeView, added, removed
from poset.ends import Alternatives, alternatives, has_gap, proves, refutes
from poset.families import (
    MET_ONCE,
    Bounds,
    Family,
    Signed,
    bounds_within,
    projected,
    ranges_within,
)
from poset.gaps import Columns, escapes
from poset.generality import generality_key
from poset.predicate_index import Held, PredicateIndex
from poset.sent_index import SentIndex
from qel.covering import Target, filter_covered
from qel.filters import filter_within

GROUPED_FROM = 64
"""A node with this many (source, id) pairs from more than one source keeps ``sources``
grouped until its pairs change (``PosetNode.grouped``): grouping them anew per notification
matched costs a Python hash of each source."""

_NONE: Mapping[object, object] = MappingProxyType({})
"""What a node holds as ``sent`` while that is empty (most nodes were sent nowhere): one shared
read-only mapping instead of an empty dictionary each."""


def _shared_empty() -> dict:  # type: ignore[type-arg]
    return _NONE  # type: ignore[return-value]


@dataclass(eq=False, slots=True)
class PosetNode:
    """One subscription (up to equivalence) and its routing bookkeeping. ``sent`` is read-only
    to everyone but the poset (an empty one is shared)."""

    id: int
    subscription: qel.Subscription
    origins: tuple[str, ...] = ()
    """Pairs ``source, id`` one after the other, in the order they came (``sources`` reads
    them): nearly always one pair, where a dictionary of one source would take 184 bytes more."""
    sent: dict[str, set[str]] = field(default_factory=_shared_empty)
    """Destination -> the labels (origins) the subscription was sent there for."""
    parent_nodes: Edges[PosetNode] = field(default=(), repr=False)
    child_nodes: Edges[PosetNode] = field(default=(), repr=False)
    """The immediate predecessors and successors (``poset.edges``), for the poset alone."""
    chain: Chain | None = field(default=None, repr=False)
    """The poset's own placement bookkeeping (``poset.chains``, ``poset.families``)."""
    rank: float = field(default=0.0, repr=False)
    family: Family | None = field(default=None, repr=False)
    bounds: Bounds = field(default=(), repr=False)
    flags: int = field(default=0, repr=False)
    slot: int = field(default=-1, repr=False)
    """Its row in its family's points (``poset.dominance``), if the family is indexed."""
    held: Held = field(default=(), repr=False)
    """Its filters' paths in the poset's predicate index (``PredicateIndex.hold``)."""
    grouped: dict[str, tuple[str, ...]] | None = field(default=None, repr=False)
    """``sources`` as last computed, for a node of ``GROUPED_FROM`` pairs or more from several
    sources (None otherwise, and whenever ``origins`` changes)."""

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
    def parents(self) -> EdgeView[PosetNode]:
        """Parent id -> parent (a view made per call)."""
        return EdgeView(self.parent_nodes)

    @property
    def children(self) -> EdgeView[PosetNode]:
        """Child id -> child (a view made per call)."""
        return EdgeView(self.child_nodes)

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
        self._roots: dict[int, PosetNode] = {}
        self._index = PredicateIndex()
        self._chains = ChainDecomposition()
        self._families: dict[Family, FamilyPoints] = {}
        """The points of every family with two or more varying bounds that has members."""
        self._sent = SentIndex(_covers_signed)
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[PosetNode]:
        return iter(sorted(self._nodes.values(), key=_by_id))

    def top_down(self) -> list[PosetNode]:
        """Every node after all its parents (among equals, by id). A router that sends
        subscriptions in this order sends each after those covering it, so that what they
        already carry is not sent again; in id order a subscription made before a broader one
        went too, and stayed."""
        waiting = {node.id: len(node.parent_nodes) for node in self._nodes.values()}
        ready = sorted(self._roots)
        order: list[PosetNode] = []
        while ready:
            node = self._nodes[heapq.heappop(ready)]
            order.append(node)
            for child in node.child_nodes:
                waiting[child.id] -= 1
                if not waiting[child.id]:
                    heapq.heappush(ready, child.id)
        return order

    def node(self, node_id: int) -> PosetNode:
        return self._nodes[node_id]

    def node_of(self, source: str, subscription_id: str) -> PosetNode | None:
        return self._by_source.get(source, _NONE).get(subscription_id)  # type: ignore[return-value]

    def roots(self) -> list[PosetNode]:
        return sorted(self._roots.values(), key=_by_id)

    # -- queries ------------------------------------------------------------------------------
    def covering(self, subscription: qel.Subscription) -> list[PosetNode]:
        """Every node whose subscription covers ``subscription`` (equivalent ones included):
        each chain's covering prefix."""
        found = [
            node
            for chain, index in self._chains.lowest_covering(Probe(subscription, _covers_signed))
            for node in chain.nodes[: index + 1]
        ]
        return sorted(found, key=_by_id)  # type: ignore[arg-type]

    def covered(self, subscription: qel.Subscription) -> list[PosetNode]:
        """Every node whose subscription ``subscription`` covers (equivalent ones included):
        each chain's covered suffix."""
        probe = Probe(subscription, _covers_signed)
        found = [
            node
            for chain, index in self._chains.highest_covered(
                probe, self._chains.bottom_candidates(probe)
            )
            for node in chain.nodes[index:]
        ]
        return sorted(found, key=_by_id)  # type: ignore[arg-type]

    def ancestors(self, node: PosetNode) -> list[PosetNode]:
        """Every node that strictly covers ``node`` (its transitive parents), by id."""
        return sorted(_ancestors(node).values(), key=_by_id)

    def sent_labels(self, node: PosetNode, destination: str) -> set[str]:
        """The labels for which ``node``, or a subscription covering it, was sent to
        ``destination``."""
        return self._labels_sent(node, destination)

    def covered_already_sent(
        self,
        target: PosetNode | qel.Subscription,
        destination: str,
        labels: set[str] | None = None,
    ) -> bool:
        """Whether ``target``, or subscriptions covering it, were already sent to ``destination``
        for every one of ``labels`` (for some label, when ``labels`` is None)."""
        signed = target if isinstance(target, PosetNode) else Probe(target, _covers_signed)
        found = self._labels_sent(signed, destination)
        return bool(found) if labels is None else labels <= found

    def _labels_sent(
        self, target: Signed, destination: str, known: dict[int, list] | None = None
    ) -> set[str]:
        """The labels sent to ``destination`` for ``target`` or what covers it; ``known`` keeps
        the covering sent nodes of each node asked, for a caller asking about several
        destinations."""
        if known is None:
            holders = self._holders(target)
        else:
            holders = known.get(target.id)  # type: ignore[attr-defined]
            if holders is None:
                holders = known[target.id] = self._holders(target)  # type: ignore[attr-defined]
        found: set[str] = set()
        for holder in holders:
            found |= holder.sent.get(destination, set())
        return found

    def _holders(self, target: Signed, probe: Probe | None = None) -> list:
        """The sent nodes covering ``target``: of a node with few ancestors, those of it and
        them that were sent (whatever covers a node is its ancestor, so this is exact; of a
        root, itself), else from the sent index, which spares the walk over thousands of
        ancestors under dense covering.

        ``probe``: the one that placed ``target``, of its subscription or an equivalent one (the
        same nodes cover both). When it searched every chain (``Probe.above``) and the nodes
        covering it there are at most ``_PREFIXES_READ``, those of them that were sent (on
        shapes at 10^4 the 845 placements that searched every chain read 7 nodes each on
        average, at most 63; 38 -> 17 ms per 1,000 placements with what follows). Else its
        witnesses and answers serve the sent index (``Probe.covered_by``): a placement has
        mostly tested the sent nodes the index gives already (on shapes at 10^4, 1,000
        placements asked the index 123 times, for 1,492 candidates, every one tested before:
        66 -> 43 ms)."""
        if not self._sent:
            return []  # nothing sent anywhere (a super-peer alone, or a build one at a time)
        if probe is not None and probe.above is not None:
            above = probe.above
            if sum(index for _, index in above) + len(above) <= _PREFIXES_READ:
                return [
                    node for chain, index in above for node in chain.nodes[: index + 1] if node.sent
                ]
        if type(target) is PosetNode:
            if not target.parent_nodes:
                return [target] if target.sent else []
            above = _few_ancestors(target, _ANCESTORS_WALKED)
            if above is not None:
                return [node for node in (target, *above.values()) if node.sent]
        if probe is None:
            return self._sent.covering(target)
        return self._sent.covering(target, probe.witnesses, probe.covered_by)

    # -- updates ------------------------------------------------------------------------------
    def insert(self, subscription: qel.Subscription, source: str, subscription_id: str) -> Inserted:
        """Adds ``subscription`` from ``source`` under the id the source uses for it.

        Re-inserting the same (source, id) with the same subscription changes nothing; with a
        different subscription it is an error (the source must unsubscribe first).
        """
        existing = self.node_of(source, subscription_id)
        if existing is not None:
            if existing.subscription.key != subscription.key and not _equivalent(
                existing.subscription, subscription
            ):
                raise ValueError(
                    f"{source} already uses the id {subscription_id!r} for another subscription"
                )
            return Inserted(existing, False, self._sent_above(existing))
        node = self._holding(subscription.filters)
        created = False
        probe = None
        if node is None:
            probe = Probe(subscription, _covers_signed)  # of an equivalent node if not created
            node, created = self._place(probe, self._next_id)
            if created:
                self._next_id += 1
                node.held = self._index.hold(node.id, subscription.filters)
        already_sent = self._sent_above(node, probe)
        self._add_source(node, source, subscription_id)
        return Inserted(node, created, already_sent)

    def insert_many(self, items: Iterable[tuple[qel.Subscription, str, str]]) -> list[Inserted]:
        """Inserts ``(subscription, source, id)`` triples: the same poset (node ids included) and
        the same reports as ``insert`` called on each in turn, but faster for a large batch, such
        as a super-peer's whole state after a restart.

        The new distinct subscriptions are placed most general first (``poset.generality``), so
        that a new node seldom covers one already placed and the search for its successors ends
        at once; each gets the id it would have had in the given order. The batch is checked
        before anything changes: a (source, id) used for two different subscriptions raises
        ``ValueError`` and leaves the poset as it was (``insert`` would have taken the items
        before the offending one).

        The cyclic garbage collector is paused meanwhile (and resumed as it was): a batch creates
        millions of objects that all stay (nodes, index entries), and the collector's passes
        over them, which free nothing, took a tenth of a bulk build at 10^5; cycles that become
        garbage meanwhile wait for its next pass.
        """
        batch = list(items)
        self._check_ids(batch)
        with collector_paused():
            return self._insert_batch(batch)

    def _insert_batch(self, batch: list[tuple[qel.Subscription, str, str]]) -> list[Inserted]:
        """``insert_many`` of a checked batch."""
        seen: set[tuple[qel.Filter, ...]] = set()
        new: list[qel.Subscription] = []  # new forms, in order of first occurrence
        for subscription, _, _ in batch:
            key = subscription.filters
            if key not in seen and self._holding(key) is None:
                seen.add(key)
                new.append(subscription)
        del seen  # a batch's transient structures add to the build's peak memory
        start = self._next_id
        placed: dict[tuple[qel.Filter, ...], PosetNode] = {}
        for rank in sorted(range(len(new)), key=lambda r: (generality_key(new[r]), r)):
            node, _ = self._place(Probe(new[rank], _covers_signed), start + rank)
            placed[new[rank].filters] = node
        created = self._number_new(new, placed, start)
        for node in created:
            node.held = self._index.hold(node.id, node.subscription.filters)
        results = []
        announced: set[int] = set()
        for subscription, source, subscription_id in batch:
            existing = self.node_of(source, subscription_id)
            if existing is not None:
                results.append(Inserted(existing, False, self._sent_above(existing)))
                continue
            node = placed.get(subscription.filters) or self._holding(subscription.filters)
            assert node is not None, "placed, or held before the batch"
            fresh = node.id >= start and node.id not in announced
            announced.add(node.id)
            results.append(Inserted(node, fresh, self._sent_above(node)))
            self._add_source(node, source, subscription_id)
        return results

    def _holding(self, filters: tuple[qel.Filter, ...]) -> PosetNode | None:
        """The node whose subscription has exactly these compiled filters (canonical, and
        already held by the subscription, unlike ``key``, a frozenset built per call), found in
        the predicate index: a dictionary from filters to nodes took 52 bytes per subscription
        at 10^5. An equivalent form written otherwise is found by placement."""
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
        node.grouped = None
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

    def _number_new(
        self,
        new: list[qel.Subscription],
        placed: dict[tuple[qel.Filter, ...], PosetNode],
        start: int,
    ) -> list[PosetNode]:
        """The nodes created for ``new`` (in order of first occurrence), numbered as one-at-a-time
        insertion would have: ids in that order, and as a node's subscription the first of those
        that turned out equivalent (its family and bounds stay those it was placed with: they
        describe an equivalent subscription, so every test answers the same). Nothing changes
        unless two of them were equivalent, or one was equivalent to a node already there."""
        earliest: dict[int, int] = {}  # node id as placed -> rank of its class's first subscription
        for rank, subscription in enumerate(new):
            node = placed[subscription.filters]
            if node.id >= start and node.id not in earliest:
                earliest[node.id] = rank
        created = sorted(
            {n.id: n for n in placed.values() if n.id >= start}.values(),
            key=lambda n: earliest[n.id],
        )
        self._next_id = start + len(created)
        if all(
            node.id == number and node.subscription is new[earliest[node.id]]
            for number, node in enumerate(created, start)
        ):
            return created
        for node in created:
            del self._nodes[node.id]
            self._roots.pop(node.id, None)
            representative = new[earliest[node.id]]
            node.subscription = representative
        for number, node in enumerate(created, start):
            node.id = number
            self._nodes[number] = node
            if not node.parent_nodes:
                self._roots[number] = node
        for holder in {n.id: n for node in created for n in _neighbourhood(node)}.values():
            holder.parent_nodes = _rehashed(holder.parent_nodes)
            holder.child_nodes = _rehashed(holder.child_nodes)
        return created

    def _place(self, probe: Probe, node_id: int) -> tuple[PosetNode, bool]:
        """The node equivalent to the probe's subscription (and False), or a new one, ``node_id``,
        linked between its immediate predecessors and successors (and True); the caller indexes
        it."""
        subscription = probe.subscription
        family = probe.family
        wide = family is not None and family.exact and family.dimensions >= 2
        at = point(probe.bounds, probe.flags) if wide else None
        points = self._families.get(family) if wide else None  # type: ignore[arg-type]
        indexed = family if points is not None and points.usable and at is not None else None
        lowest = self._chains.lowest_covering(probe, indexed)
        if indexed is None:
            probe.above = lowest  # its chains' nodes down to there are unchanged below
        if indexed is not None:
            lowest += [(n.chain, n.chain.position(n)) for n in points.above(at)]  # type: ignore[union-attr, arg-type, misc]
        predecessors = _minimal([chain.nodes[i] for chain, i in lowest], probe, indexed)  # type: ignore[misc]
        if len(predecessors) == 1 and probe.covers(predecessors[0]):
            return predecessors[0], False  # the only minimal covering node is equivalent
        if indexed is not None:
            successors = self._family_successors(probe, points.below(at), indexed)  # type: ignore[union-attr, arg-type]
        else:
            successors = self._successors(probe, predecessors)  # type: ignore[arg-type]
        node = PosetNode(node_id, subscription)
        node.family, node.bounds, node.flags = probe.family, probe.bounds, probe.flags
        for parent in predecessors:
            for child in successors:
                if child in parent.child_nodes:
                    _cut(parent, child)
            _link(parent, node)
        for child in successors:
            _link(node, child)
            self._roots.pop(child.id, None)
        if not predecessors:
            self._roots[node.id] = node
        self._nodes[node.id] = node
        tag = None
        if wide:
            if points is None:
                points = self._families[family] = FamilyPoints(family.dimensions)  # type: ignore[index, union-attr]
            points.add(node, at)
            tag = family if points.usable else None
        self._chains.add(node, *_chain_place(probe, lowest, successors, tag), tag)
        return node, True

    def _family_successors(
        self, probe: Probe, within: list[PosetNode], family: Family
    ) -> list[PosetNode]:
        """The maximal nodes a member of an indexed family covers: ``within`` (the maximal ones
        of its family, from the family's points) with each other family's chains' highest
        covered nodes, the maximal of those. (The walks of ``_successors`` would go through the
        family's nodes, which are what the points spare.) The bottoms are looked for among the
        groups the family's filters may match once it has ``_GROUPED_FROM`` members, else by
        value (its own chains are then candidates, skipped one by one)."""
        grouped = family if self._families[family].members >= _GROUPED_FROM else None
        candidates = self._chains.bottom_candidates(probe, grouped)
        highest = [
            chain.nodes[i] for chain, i in self._chains.highest_covered(probe, candidates, family)
        ]
        return _maximal(highest + within, probe, family)  # type: ignore[operator, arg-type]

    def _successors(self, probe: Probe, predecessors: list[PosetNode]) -> list[PosetNode]:
        """The maximal nodes the probe covers, by the cheaper of two searches.

        Each lies below every predecessor, on a path through nodes incomparable with the probe (a
        covering node on it would not be minimal, a covered one would be above it), so a walk
        down from any one predecessor finds them all, visiting only the nodes in between: few
        under a price ceiling, but every subscription of a class under "every article". Walks
        from every predecessor advance in turn (tests are shared through the probe) and the
        first to finish answers. The other search tests the chains whose bottom the probe may
        cover (``ChainDecomposition.bottom_candidates``): few for a narrow subscription, every
        chain of a predicate for a broad one. The walks go first, for ``_QUICK_WALK`` rounds;
        then they go on only while they have cost less than the chain search would: one test
        per candidate chain, its candidates built to count them (an upper bound from counts
        alone, the most selective pattern's, was 12 times the candidates on the shapes at 10^4,
        so the walks went on: 152 tests per placement in this search, 77 weighed this way).

        A walk visits one node a round and finishes only once it visited every child of its
        start (they are incomparable: none is reached through another), so when every
        predecessor has more children than the first rounds, the candidates are counted first,
        and when it has more than all the rounds the walks would be given, they are not taken:
        the chain search would answer after them. On shapes at 10^4, 622 of the 843 searches
        of 1,000 placements ended in the chain search after 16,580 tests in walks (221 walks
        finished, after 3,586), nearly all from predecessors of 9 children or more.
        """
        walks = [_Walk(start, probe) for start in sorted(predecessors, key=_by_id)]
        candidates = None
        rounds = _QUICK_WALK if walks else 0
        fewest = min((len(start.child_nodes) for start in predecessors), default=0)
        if fewest > rounds:  # no walk can finish in the first rounds: weigh them at once
            candidates = self._chains.bottom_candidates(probe)
            rounds = max(rounds, len(candidates) // len(walks))
            if fewest > rounds:
                rounds = 0  # nor in all the rounds they would be given: not walked
        done = 0
        while done < rounds:
            for walk in walks:
                if walk.step():
                    return walk.maximal()
            done += 1
            if done == rounds and candidates is None:
                candidates = self._chains.bottom_candidates(probe)
                rounds = max(rounds, len(candidates) // len(walks))
        if candidates is None:
            candidates = self._chains.bottom_candidates(probe)
        return _maximal_in_chains(self._chains.highest_covered(probe, candidates))

    def mark_sent(self, node: PosetNode, destination: str, labels: Iterable[str]) -> None:
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
        lists, per destination the removed node had been sent to, the subscriptions below it that
        now miss some of those labels there, with the missing labels.
        """
        ids = self._by_source.get(source)
        node = ids.pop(subscription_id, None) if ids is not None else None
        if node is None:
            raise KeyError(f"{source} has no subscription with id {subscription_id!r}")
        if not ids:
            del self._by_source[source]
        origins = node.origins
        at = origins.index(subscription_id, 1)  # searched in C: a peer may hold 1,000 here
        while at % 2 == 0 or origins[at - 1] != source:
            at = origins.index(subscription_id, at + 1)
        node.origins = origins[: at - 1] + origins[at + 1 :]
        node.grouped = None
        if node.origins:
            return Removed(node, False, {}, ())
        # With the default (the same labels for every node), what the children are sent for
        # covers everything below them: only the children can miss anything.
        if not node.sent:
            below = []
        elif wants is None:
            below = list(node.child_nodes)
        else:
            below = _descendants(node)
        self._unlink(node)
        resend = {}
        known: dict[int, list] = {}
        for destination in sorted(node.sent):
            chosen = self._uncovered(below, destination, wants or _labels_of(node), known)
            if chosen:
                resend[destination] = chosen
        return Removed(node, True, resend, tuple(sorted(node.sent)))

    def withdraw(self, node: PosetNode, destination: str, wants: Wants) -> Resend:
        """Stops counting ``node`` as sent to ``destination`` (the caller retracts it there) and
        returns what below it must be sent there instead, as ``remove`` does."""
        below = _descendants(node)
        self.unmark_sent(node, destination)
        return self._uncovered(below, destination, wants)

    def count_of(self, source: str) -> int:
        """How many subscriptions ``source`` holds."""
        return len(self._by_source.get(source, ()))

    def ids_of(self, source: str) -> list[str]:
        """The subscription ids ``source`` holds, sorted (remove them one at a time, acting on each
        result before the next: a removal can ask to resend a subscription the next one removes)."""
        return sorted(self._by_source.get(source, ()))

    def _unlink(self, node: PosetNode) -> None:
        """Takes ``node`` out; a parent becomes a child's parent unless it covers one of the
        child's remaining parents (then a path already leads from it to the child)."""
        parents = list(node.parent_nodes)
        children = list(node.child_nodes)
        linked = {parent.id for parent in parents}
        ancestors: dict[int, dict[int, PosetNode] | None] = {}
        one_filter = all(len(parent.subscription.filters) == 1 for parent in parents)
        for parent in parents:
            _cut(parent, node)
        for child in children:
            _cut(node, child)
        for child in children:
            for parent in parents:
                if one_filter:  # the tests are cheap (``_above_other``): one call less each
                    if any(_above(parent, other) for other in child.parent_nodes):
                        continue
                elif any(
                    _above_other(parent, other, linked, ancestors) for other in child.parent_nodes
                ):
                    continue
                _link(parent, child)
            if not child.parent_nodes:
                self._roots[child.id] = child
        self._roots.pop(node.id, None)
        del self._nodes[node.id]
        self._index.release(node.id, node.held)
        self._chains.remove(node)
        self._sent.discard(node)
        points = self._families.get(node.family) if node.family is not None else None
        if points is not None:
            points.remove(node)
            if not points.members:
                del self._families[node.family]  # type: ignore[arg-type]

    def _uncovered(
        self,
        nodes: list[PosetNode],
        destination: str,
        wants: Wants,
        known: dict[int, list] | None = None,
    ) -> Resend:
        """Of ``nodes`` (closed downwards, or an antichain: no node outside has an ancestor
        inside), those that miss some wanted labels at ``destination``, with the labels,
        ancestors first; what an earlier one will be sent for counts as covering later ones.

        Parents before children, each node's labels (sent to ``destination`` for it or above it,
        or planned for it) are its own and its parents': a look-up in the sent index only for
        parents outside ``nodes``, not a walk over every ancestor of every node, and once per
        parent over the destinations of one removal (``known``).
        """
        inside = {n.id: n for n in nodes}
        waiting = {n.id: sum(1 for p in n.parent_nodes if p.id in inside) for n in nodes}
        ready = [n for n in nodes if not waiting[n.id]]
        heard: dict[int, set[str]] = {}
        outside: dict[int, set[str]] = {}
        chosen = []
        while ready:
            current = ready.pop()
            have = set(current.sent.get(destination, ()))
            for parent in current.parent_nodes:
                if parent.id in inside:
                    have |= heard[parent.id]
                else:
                    if parent.id not in outside:
                        outside[parent.id] = self._labels_sent(parent, destination, known)
                    have |= outside[parent.id]
            missing = wants(current, destination) - have
            if missing:
                chosen.append((current, frozenset(missing)))
                have |= missing
            heard[current.id] = have
            for child in current.child_nodes:
                if child.id in inside:
                    waiting[child.id] -= 1
                    if not waiting[child.id]:
                        ready.append(child)
        return tuple(sorted(chosen, key=lambda item: (len(_ancestors(item[0])), item[0].id)))

    def _sent_above(
        self, node: PosetNode, probe: Probe | None = None
    ) -> Mapping[str, frozenset[str]]:
        """What was sent for ``node`` or what covers it, by destination (``probe`` as
        ``_holders``)."""
        found: dict[str, set[str]] = {}
        for holder in self._holders(node, probe):
            for destination, labels in holder.sent.items():
                found.setdefault(destination, set()).update(labels)
        if not found:  # nearly always in a bulk build: one report per subscription
            return _NONE  # type: ignore[return-value]
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
                stack.extend(current.child_nodes)
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
        edges = sum(len(n.child_nodes) for n in self._nodes.values())
        memory = sum(
            sys.getsizeof(n)
            + sum(sys.getsizeof(m) for m in (n.sent, n.parent_nodes, n.child_nodes) if m)
            + (sys.getsizeof(n.origins) if len(n.origins) > 2 else 0)  # else the key's
            for n in self._nodes.values()
        )
        memory += sum(sys.getsizeof(d) for d in (self._nodes, self._by_source, self._roots))
        memory += sum(map(sys.getsizeof, self._by_source.values()))
        return PosetStatistics(
            nodes=len(self._nodes),
            roots=len(self._roots),
            edges=edges,
            sources=sum(map(len, self._by_source.values())),
            sent=sum(len(labels) for n in self._nodes.values() for labels in n.sent.values()),
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


def _link(parent: PosetNode, child: PosetNode) -> None:
    parent.child_nodes = added(parent.child_nodes, child)
    child.parent_nodes = added(child.parent_nodes, parent)


def _cut(parent: PosetNode, child: PosetNode) -> None:
    parent.child_nodes = removed(parent.child_nodes, child)
    child.parent_nodes = removed(child.parent_nodes, parent)


def _labels_of(removed: PosetNode) -> Wants:
    def wants(node: PosetNode, destination: str) -> set[str]:
        return set(removed.sent.get(destination, ()))

    return wants


def _covers(
    general: qel.Subscription,
    specific: qel.Subscription,
    targets: tuple[Target, ...] | None = None,
    compiled: tuple[Columns, Alternatives] | None = None,
) -> bool:
    """``qel.covers``, minus what a placement, asking it thousands of times a second, need not
    pay: comparing the keys (two frozensets built per call; never equal here) and, against a
    one-filter subscription, ``filter_covered`` (``filter_within`` decides: below).
    ``targets``: ``specific``'s filters as ``qel.covering.Target`` (a probe's, reused by each
    test against it).

    Against a DNF (``compiled``: ``general``'s columns and alternatives, a probe's kept; a
    node's alternatives are built per test: kept for the nodes asked last, compiled forms
    outlived the collector's young generations, and full collections came twice as often,
    BENCHMARKS.md, stop 57), a filter of ``specific`` with a value that one dimension of
    ``general`` leaves out refutes first (``poset.gaps``; against a node, read from its
    alternatives, ``poset.ends.has_gap``, without building its columns): three quarters of the
    "no"s on shapes, at a few microseconds instead of 12 to 70. Then each filter whose
    predicates do not repeat is covered if ``general``'s filters hold it along one dimension
    at most (``poset.ends.proves``: inside one of them, which ``filter_covered`` tries first,
    or their union on that dimension: on shapes, 980 of the 1,090 "yes"es that needed the
    search along one predicate or the cells), else refuted at the ends of its ranges when it
    can be (``poset.ends.refutes``: 2,682 of the 3,147 "no"s the gaps leave), at some 6
    microseconds where ``filter_covered`` took 11 to 100; ``filter_covered`` decides the
    rest.

    Against one filter ``H``, ``filter_within`` decides each filter ``F`` of ``specific``, its
    predicates repeated or not: ``H`` covers ``F`` iff ``F``'s subject domain lies within
    ``H``'s and each pattern of ``H`` holds some pattern of ``F`` on its predicate. If one does
    not, a publication of ``F`` with one object per pattern of ``F`` (its patterns name distinct
    variables: the objects are chosen apart), each outside that pattern of ``H`` wherever the
    pattern of ``F`` is not within it, matches ``F`` and not ``H``. On shapes the "no"s of
    filters with a repeated predicate went to ``filter_covered``'s corners and cells (13 to 54
    microseconds each)."""
    candidates = general.filters
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
        for position, part in enumerate(specific.filters):
            if len(part.patterns) != len(part.predicates):
                if any(filter_within(part, candidate) for candidate in candidates):
                    continue
            elif proves(ends, part):
                continue
            elif refutes(ends, part):
                return False
            if not filter_covered(part if targets is None else targets[position], candidates):
                return False
        return True
    only, parts = candidates[0], specific.filters
    if not filter_within(parts[0], only):  # most often the answer: no generator made
        return False
    return len(parts) == 1 or all(filter_within(part, only) for part in parts[1:])


def _covers_signed(general: Signed, specific: Signed) -> bool:
    """``_covers`` on nodes and probes: a comparison of bounds within a family, or across two
    families of one filter when their fixed parts allow (``poset.families.projection``), the
    test otherwise.

    First, what refutes most pairs on shapes of every kind (60% of the tests of a placement):
    every filter of a subscription has the predicates of its triple patterns, so ``general``
    covers ``specific`` only if it uses no predicate that ``specific`` lacks (a publication of
    ``specific`` need carry no other); one C-level subset test of two interned frozensets,
    instead of the calls down to ``filter_covered``'s own."""
    if (
        not general.subscription.filters[0].predicates
        <= specific.subscription.filters[0].predicates
    ):
        return False
    family = general.family
    if family is not None:
        other = specific.family
        if family is other:  # ``covers_by_family``, inlined
            if bounds_within(general.bounds, general.flags, specific.bounds, specific.flags):
                return True
            if family.exact:
                return False
        elif other is not None and len(general.subscription.filters) == 1 == len(
            specific.subscription.filters
        ):  # else ``projection`` is None: the test decides, and nothing need be kept
            over = family.over  # ``projected``'s look-up, inlined (a call each cost the listings)
            pairs = _UNKNOWN if over is None else over.get(other, _UNKNOWN)
            if pairs is _UNKNOWN or pairs is MET_ONCE:
                pairs = projected(general, specific)
            if pairs is False:
                return False
            if pairs is not None:
                return ranges_within(
                    pairs,  # type: ignore[arg-type]
                    general.bounds,
                    general.flags,
                    specific.bounds,
                    specific.flags,
                )
    return _covers(
        general.subscription,
        specific.subscription,
        specific.targets if type(specific) is Probe else None,
        general.compiled() if type(general) is Probe else None,
    )


_UNKNOWN = object()

_GROUPED_FROM = 8
"""Fewest members of an indexed family for its placements to ask for the groups of bottoms its
filters may match (``ChainDecomposition.bottom_candidates``): a family asks first among every
group (on shapes at 10^4, 5,264: 2 ms a placement, where a look-up by value took a tenth of
that), and most families of a workload of many shapes have one member when the next comes (12
of the 16 family placements per 1,000 there); on the listings a family has 224 members at the
median (10% have fewer than 17)."""

_PREFIXES_READ = 64
"""Most nodes covering a new subscription read from the chains its placement searched
(``SubscriptionPoset._holders``) rather than asking the sent index: on the listings the nodes
covering a new one number in the hundreds (553 at the median, 2,961 at most, at 10^4), and
reading them took longer than a look-up."""

_UP_SET_WALKED = 8
"""Most ancestors walked per lowest covering node of a placement to tell the minimal ones
(``_minimal``); more, and each is decided by tests. Every one of them covers the probe: on
shapes a node has 7 ancestors on average at 10^4 and 17 at 3 x 10^4, for some 5 and 13 lowest
covering nodes; on the listings it has hundreds, for 2 or 3, where walking up to 1,024 of them
made placements 1.5 times slower than the tests, and 16 per node 1.1 times (BENCHMARKS.md,
issue 34, stop 70)."""

_ANCESTORS_WALKED = 16
"""Most ancestors walked to find the sent nodes above a node before asking the sent index, or
whether a removed node's parent covers another parent of its child (``_above_other``) before
testing: a walk of a few costs less than one look-up (witnesses, index, covering tests) or one
test of a DNF. At 10^4, 88% of the shapes workload's nodes have at most 16 ancestors, 17% of
the listings' (dense covering)."""


def _above_other(
    parent: PosetNode,
    other: PosetNode,
    linked: set[int],
    ancestors: dict[int, dict[int, PosetNode] | None],
) -> bool:
    """Whether a removed node's parent strictly covers ``other``, another parent of one of its
    children. Never if ``other`` is one of the ``linked`` parents of the removed node (they are
    incomparable); in one chain, or for a ``parent`` of one filter, by ``_above`` (ranks, bounds,
    or one filter's containment: cheap); else, a DNF above, whose test may search cells, by
    ``other``'s ancestors when there are at most ``_ANCESTORS_WALKED`` (whatever covers a node
    is its ancestor; kept in ``ancestors`` for the rest of the removal), else by a test (on
    the listings at 10^5, whose nodes have hundreds of ancestors, the walk is mostly in vain:
    removals there are slower than by tests alone, BENCHMARKS.md).

    The removal's cuts and links change no such node's ancestors: the removed node is above
    none of them (its edge to their child would not be immediate), nor is any child it had."""
    if other.id in linked:
        return False
    if parent.chain is other.chain or len(parent.subscription.filters) == 1:
        return _above(parent, other)  # ranks, bounds, or ``filter_within``: cheaper than a walk
    if other.id not in ancestors:
        ancestors[other.id] = _few_ancestors(other, _ANCESTORS_WALKED)
    above = ancestors[other.id]
    return parent.id in above if above is not None else _above(parent, other)


def _above(general: PosetNode, specific: PosetNode) -> bool:
    """Whether one node strictly covers another; free within a chain (ranks increase down it)."""
    if general.chain is specific.chain:
        return general.rank < specific.rank
    return _covers_signed(general, specific)


_QUICK_WALK = 8
"""Rounds the walks down from the predecessors take before their cost is weighed against the
chain search. On the listings workload at 3 x 10^4 subscriptions the first walk to finish visits
3 nodes at the median (42 at the 90th percentile, 279 at the 99th)."""


class _Walk:
    """A walk down from ``start`` to the maximal nodes the probe covers, descending only through
    nodes it does not cover, one node per ``step``."""

    __slots__ = ("found", "probe", "seen", "stack")

    def __init__(self, start: PosetNode, probe: Probe) -> None:
        self.probe = probe
        self.stack = list(start.child_nodes)
        self.seen: set[int] = set()
        self.found: dict[int, PosetNode] = {}

    def step(self) -> bool:
        """Visits one more node; True once nothing is left to visit."""
        while self.stack:
            current = self.stack.pop()
            if current.id in self.seen:
                continue
            self.seen.add(current.id)
            if self.probe.covers(current):
                self.found[current.id] = current
            else:
                self.stack.extend(current.child_nodes)
            break
        return not self.stack

    def maximal(self) -> list[PosetNode]:
        return [
            node
            for node in self.found.values()
            if not _covered_above(node, self.probe, highest_in_chain=False, family=None)
        ]


def _chain_place(
    probe: Probe, lowest: list[tuple[Chain, int]], successors: list[PosetNode], tag: Family | None
) -> tuple[Chain | None, int]:
    """A chain of the new node's ``tag`` (``Chain.family``) it fits in (every node of it
    comparable), with the index: under a chain's bottom when that is the lowest covering node
    (no test), else right under the lowest covering node if the probe covers the next one, else
    on top of a chain whose top is a successor; ``(None, 0)`` for a chain of its own."""
    for chain, index in lowest:
        if chain.family is tag and index == len(chain) - 1:
            return chain, index + 1
    for chain, index in lowest:
        if chain.family is tag and probe.covers(chain.nodes[index + 1]):
            return chain, index + 1
    for node in successors:
        chain = node.chain
        if chain is not None and chain.family is tag and chain.nodes[0] is node:
            return chain, 0
    return None, 0


def _minimal(lowest: list[PosetNode], probe: Probe, family: Family | None) -> list[PosetNode]:
    """The minimal nodes covering ``subscription``, given each chain's lowest covering node and,
    for the probe's indexed ``family``, the minimal members covering it (every minimal node is
    one of them: a minimal node under one is some chain's lowest, or a minimal member).

    For a probe of no indexed family, first without a test: the edges are the Hasse diagram, so
    one of them is not minimal iff it is an ancestor of another, and the ancestors of them all
    (each covers the probe) are walked at once while they are few (``_UP_SET_WALKED``). On
    shapes the tests this spares grow with the poset's density: 3.4 of 24.6 covering tests per
    placement at 10^4, 56 of 144 at 5 x 10^4.

    Else one is not minimal iff it covers another of them, iff one of its children covers the
    subscription (a path leads down to any covering node below it); each is decided by
    whichever takes fewer tests. A child in the node's own chain is below the chain's lowest
    covering node and needs no test, nor does a pair of members of ``family`` (neither covers
    the probe while under the other); a pair is read from the other node's ancestors when it
    has few (``_above_by_ancestors``).
    """
    if family is None:
        above = _reachable(
            [p for node in lowest for p in node.parent_nodes],
            "parent_nodes",
            _UP_SET_WALKED * len(lowest),
        )
        if above is not None:
            return [node for node in lowest if node.id not in above]
    kept = []
    ancestors: dict[int, dict[int, PosetNode] | None] = {}
    for node in lowest:
        same = family is not None and node.family is family
        if len(node.child_nodes) < len(lowest):
            covered_below = any(
                child.chain is not node.chain
                and not (same and child.family is family)
                and probe.covered_by(child)
                for child in node.child_nodes
            )
        else:
            covered_below = any(
                other is not node
                and not (same and other.family is family)
                and _above_by_ancestors(node, other, ancestors)
                for other in lowest
            )
        if not covered_below:
            kept.append(node)
    return kept


def _above_by_ancestors(
    general: PosetNode, specific: PosetNode, ancestors: dict[int, dict[int, PosetNode] | None]
) -> bool:
    """``_above``: by ranks in one chain; by the test for two nodes of one filter or of one
    exact family (bounds or ``filter_within``: cheaper than a walk, and the listings' nodes have
    hundreds of ancestors); else, a DNF on either side, from ``specific``'s ancestors when it
    has at most ``_ANCESTORS_WALKED`` (the edges are the Hasse diagram: a node strictly covers
    another iff it is an ancestor of it; kept in ``ancestors`` for the caller's other pairs),
    else by the test. Why: in ``_minimal`` each node of ``lowest`` is tried against every
    other, and on shapes a test with a DNF costs some 20 microseconds when it covers."""
    if general.chain is specific.chain:
        return general.rank < specific.rank
    family = general.family
    if len(general.subscription.filters) == 1 == len(specific.subscription.filters) or (
        family is not None and family is specific.family and family.exact
    ):
        return _covers_signed(general, specific)
    if specific.id not in ancestors:
        ancestors[specific.id] = _few_ancestors(specific, _ANCESTORS_WALKED)
    above = ancestors[specific.id]
    return general.id in above if above is not None else _covers_signed(general, specific)


def _maximal(highest: list[PosetNode], probe: Probe, family: Family | None) -> list[PosetNode]:
    """The maximal nodes ``subscription`` covers, given each chain's highest covered node and,
    for the probe's indexed ``family``, the maximal members it covers; the mirror image of
    ``_minimal``."""
    kept = []
    for node in highest:
        if len(node.parent_nodes) < len(highest):
            covered_above = _covered_above(node, probe, highest_in_chain=True, family=family)
        else:
            same = family is not None and node.family is family
            covered_above = any(
                other is not node and not (same and other.family is family) and _above(other, node)
                for other in highest
            )
        if not covered_above:
            kept.append(node)
    return kept


def _maximal_in_chains(highest: list[tuple[Chain, int]]) -> list[PosetNode]:
    """The maximal nodes a probe covers, given per chain holding one, and for every such chain
    (``ChainDecomposition.highest_covered`` of every candidate), the index of the highest: a
    node is not maximal iff a parent of it is covered, iff the parent's chain is one of those
    and the parent lies at or below that chain's highest covered node (the covered nodes of a
    chain are a suffix). No test: ``_maximal`` tested each parent (on shapes at 10^4, 15,368
    tests per 1,000 placements, all but 34 "no")."""
    covered_from = {chain.id: chain.ranks[index] for chain, index in highest}
    kept = []
    for chain, index in highest:
        node = chain.nodes[index]
        if not any(
            covered_from.get(parent.chain.id, _NOTHING_COVERED) <= parent.rank  # type: ignore[union-attr]
            for parent in node.parent_nodes
        ):
            kept.append(node)
    return kept  # type: ignore[return-value]


_NOTHING_COVERED = float("inf")
"""What ``_maximal_in_chains`` reads for a chain holding no covered node: a rank past every node's."""


def _covered_above(
    node: PosetNode, probe: Probe, *, highest_in_chain: bool, family: Family | None
) -> bool:
    """Whether ``subscription``, which covers ``node``, covers a parent of it too (then ``node``
    is not a maximal covered node). When ``node`` is known to be the highest covered node of its
    chain, a parent in that chain needs no test; when it is a maximal covered member of the
    indexed ``family``, neither does a parent of that family."""
    same = family is not None and node.family is family
    return any(
        not (highest_in_chain and parent.chain is node.chain)
        and not (same and parent.family is family)
        and probe.covers(parent)
        for parent in node.parent_nodes
    )


def _equivalent(first: qel.Subscription, second: qel.Subscription) -> bool:
    return qel.covers(first, second) and qel.covers(second, first)


def _neighbourhood(node: PosetNode) -> list[PosetNode]:
    return [node, *node.parent_nodes, *node.child_nodes]


def _rehashed(edges: Edges[PosetNode]) -> Edges[PosetNode]:
    """``edges`` after their nodes were renumbered: a dictionary keyed by nodes (hashed by id)
    is built again, from an iterator: ``dict.fromkeys`` of a dictionary copies the hashes it
    stored, the stale ones (the node then was not found in it by its new id)."""
    return dict.fromkeys(iter(edges)) if type(edges) is dict else edges


def _ancestors(node: PosetNode) -> dict[int, PosetNode]:
    return _closure(node, "parent_nodes") or {}


def _few_ancestors(node: PosetNode, at_most: int) -> dict[int, PosetNode] | None:
    """Every node above ``node``; None if there are more than ``at_most``."""
    return _closure(node, "parent_nodes", at_most)


def _descendants(node: PosetNode) -> list[PosetNode]:
    return list((_closure(node, "child_nodes") or {}).values())


def _closure(
    node: PosetNode, direction: str, at_most: int | None = None
) -> dict[int, PosetNode] | None:
    """Every node reachable from ``node`` (not itself) following its ``direction`` edges; None
    as soon as there are more than ``at_most``."""
    return _reachable(list(getattr(node, direction)), direction, at_most)


def _reachable(
    stack: list[PosetNode], direction: str, at_most: int | None = None
) -> dict[int, PosetNode] | None:
    """The nodes of ``stack`` and every node reachable from one of them following their
    ``direction`` edges (``stack`` is used up); None as soon as there are more than
    ``at_most``."""
    seen: dict[int, PosetNode] = {}
    while stack:
        current = stack.pop()
        if current.id not in seen:
            seen[current.id] = current
            if at_most is not None and len(seen) > at_most:
                return None
            stack.extend(getattr(current, direction))
    return seen


def _by_id(node: PosetNode) -> int:
    return node.id
