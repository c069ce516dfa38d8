"""A chain decomposition of the subscription poset, to place a new subscription with a logarithmic
number of covering tests per chain instead of one per comparable node.

Why. With mostly distinct subscriptions (price ceilings, surfaces, dates) covering is dense: a
ceiling ``P <= 500000`` is covered by every larger ceiling, so the nodes covering a new subscription
(and those it covers) number in the thousands, and testing each of them, as a walk down from the
roots or a candidate set from an index must, costs thousands of ``covers`` calls per insertion.

How. Every node sits in exactly one *chain*: a list of nodes each of which covers the next, most
general first. In a chain, the nodes that cover ``q`` form a prefix (whatever covers a node that
covers ``q`` covers ``q``) and the nodes ``q`` covers form a suffix, so a binary search finds the
lowest covering and the highest covered node of a chain with O(log length) ``covers`` calls. Only
chains that hold such a node need searching: a chain holds a node covering ``q`` iff its top does,
and a node covered by ``q`` iff its bottom is. Chain tops sit in a ``PredicateIndex`` (a top that
covers ``q`` matches ``q``'s witnesses; held with their ranges opened, ``_loosened``, and the tops
it gives matched) and bottoms in a ``WitnessIndex`` (a bottom that ``q`` covers has a witness
that ``q`` matches), so the chains to search come from two index look-ups.
Every minimal node covering ``q`` is the lowest covering node of its chain, and every maximal node
covered by ``q`` the highest covered node of its chain: the poset picks them among these.

A new node joins a chain where it fits (between the last node covering it and the first it covers,
with no node of the chain incomparable to it), else starts one. Positions are float *ranks*,
increasing down a chain, so a node finds its place by bisection and two nodes of one chain compare
without a ``covers`` call. The decomposition is greedy, not minimal (the number of chains is at
least the poset's width, and online it can be more); removal only shortens chains.

A family that ``poset.dominance`` indexes has chains of its own (``Chain.family``): its members
join only those, and nothing else does, so that placing one of its members can skip them (the
index answers for the family) while placing anything else searches them as any chain. Such a
family has some ``2 sqrt(n)`` chains, whose tops would fill the index of tops (every placement
matching its witnesses against them): the family stands there once instead, as its *hull* (its
filters with every range opened to its whole kind, which covers every member), and a probe that
the hull may cover searches all the family's chains.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable
from itertools import count
from operator import is_not
from typing import Protocol

import qel
from poset.ends import Alternatives, alternatives
from poset.families import Bounds, Family, Signed, signature
from poset.gaps import Columns, columns
from poset.predicate_index import PredicateIndex
from poset.witness_index import Sample, WitnessIndex
from qel.covering import Target
from qel.domains import RangeDomain
from qel.filters import Filter, witness
from qel.matching import filter_matches

Covers = Callable[[Signed, Signed], bool]
"""``covers(general, specific)`` on nodes and probes (``poset.families.Signed``)."""


class Ranked(Protocol):
    """What a chain holds: a node with a subscription, its chain and its rank there."""

    id: int
    subscription: qel.Subscription
    family: Family | None
    bounds: Bounds
    flags: int
    chain: Chain | None
    rank: float


class Chain:
    """Nodes each covering the next, most general first, with their increasing ranks; ``family``
    is the indexed family whose members alone it holds, or None."""

    __slots__ = ("family", "id", "nodes", "ranks")

    def __init__(self, chain_id: int, family: Family | None) -> None:
        self.id = chain_id
        self.family = family
        self.nodes: list[Ranked] = []
        self.ranks: list[float] = []

    def __len__(self) -> int:
        return len(self.nodes)

    def position(self, node: Ranked) -> int:
        return bisect_left(self.ranks, node.rank)

    def insert(self, index: int, node: Ranked) -> None:
        """Puts ``node`` at ``index``; ranks between the neighbours, renumbered when floats run
        out of room between two of them (after some fifty insertions into one gap). A rank at
        either end is an integer while the chain only grew there, as it does in a bulk build:
        most are then CPython's shared small integers, where a float each took 24 bytes."""
        ranks = self.ranks
        if not ranks:
            rank: float = 0
        elif index == 0:
            rank = ranks[0] - 1
        elif index == len(ranks):
            rank = ranks[-1] + 1
        else:
            rank = (ranks[index - 1] + ranks[index]) / 2
            if not ranks[index - 1] < rank < ranks[index]:
                self._renumber()
                rank = index - 0.5
        node.chain = self
        node.rank = rank
        self.nodes.insert(index, node)
        ranks.insert(index, rank)

    def remove(self, node: Ranked) -> int:
        index = self.position(node)
        del self.nodes[index]
        del self.ranks[index]
        node.chain = None
        return index

    def _renumber(self) -> None:
        for index, node in enumerate(self.nodes):
            node.rank = index
        self.ranks[:] = range(len(self.nodes))


class ChainDecomposition:
    """The chains, with their tops and bottoms indexed; see the module docstring."""

    def __init__(self) -> None:
        self._chains: dict[int, Chain] = {}
        self._tops = PredicateIndex()
        """The tops of the chains of no family, loosened (``_loosened``), keyed by chain id, and
        per family with chains of its own its hull, keyed by the family: a look-up finds a
        superset of the tops that match, which ``_top_candidates`` narrows by matching, and the
        families whose hull matches. One index for both: a probe's witness is looked up once,
        where an index of hulls beside it was looked up again (on shapes at 10^4, 1,335 hull
        look-ups per 1,000 placements at 27 microseconds, beside 892 of tops at 59)."""
        self._loose: set[int] = set()
        """The chains whose top the index of tops holds loosened (a range opened): only their
        tops need matching after a look-up."""
        self._families: dict[Family, dict[int, Chain]] = {}
        self._bottoms = WitnessIndex()
        """The bottoms of all chains, tagged with the family of a family's chain."""
        self._compatible: dict[Family, tuple[int, list[list[set[Hashable]]], int]] = {}
        """Per indexed family, per filter, the groups of bottoms a member may cover, with the
        ``WitnessIndex.version`` they were found at (``bottom_candidates``) and the number of
        groups added since ``WitnessIndex.groups`` was asked (some may have gone: their empty
        sets are dropped when more were added than there are groups)."""
        self._serial = count(1)

    def __len__(self) -> int:
        return len(self._chains)

    def lowest_covering(self, probe: Probe, skip: Family | None = None) -> list[tuple[Chain, int]]:
        """Per chain holding a node that covers the probe, by chain id: the index of the lowest
        such node (the chain's nodes down to it cover). O(index look-up + log(length) tests per
        such chain); the nodes that match the probe's witnesses are a prefix too, found first
        with the cheap test, and the lowest of them is usually the answer (always, for ranges
        of one predicate). The chain's bottom is tried first: inserting most general first
        (``insert_many``), a subscription usually falls below its own family's chain. Chains of
        the indexed family ``skip`` are left out."""
        found = []
        for chain_id in sorted(self._top_candidates(probe, skip)):  # type: ignore[type-var]
            chain = self._chains[chain_id]  # type: ignore[index]
            if not probe.covered_by(chain.nodes[0]):
                continue
            if probe.covered_by(chain.nodes[-1]):
                found.append((chain, len(chain) - 1))  # the usual case in a bulk insertion
                continue
            found.append((chain, _last_true(chain, 0, len(chain) - 1, probe.covered_by)))
        return found

    def bottom_candidates(self, probe: Probe, family: Family | None = None) -> list[Hashable]:
        """The chains whose bottom's witness the probe's most selective patterns admit, by id: a
        superset of those whose bottom it covers, found by value look-ups (``WitnessIndex``);
        ``highest_covered`` tests each bottom. For a member of the indexed ``family``, among the
        chains of other families and shapes its filters may match only (``WitnessIndex.groups``,
        asked once per family while the index's groups stay the same)."""
        among = None if family is None else self._groups_of(family, probe.subscription.filters)
        return sorted(self._bottoms.rough_candidates(probe.subscription, among))  # type: ignore[type-var]

    def _groups_of(self, family: Family, filters: tuple[Filter, ...]) -> list[list[set[Hashable]]]:
        """Per filter of a member of ``family``, the groups of bottoms it may cover: those kept,
        with the groups that appeared since added (``WitnessIndex.groups_since``), or asked
        again when the index no longer knows which appeared, or when more were added than
        there are groups (the empty sets of groups that went are then dropped)."""
        bottoms = self._bottoms
        known = self._compatible.get(family)
        if known is not None and known[0] == bottoms.version:
            return known[1]
        added = (
            None if known is None else [bottoms.groups_since(known[0], c, family) for c in filters]
        )
        if known is None or added is None or None in added:
            groups, extended = [bottoms.groups(c, family) for c in filters], 0
        else:
            groups, extended = known[1], known[2] + bottoms.version - known[0]
            if extended > bottoms.group_count():
                groups, extended = [bottoms.groups(c, family) for c in filters], 0
            else:
                for held, more in zip(groups, added, strict=True):
                    held.extend(more)  # type: ignore[arg-type]
        self._compatible[family] = bottoms.version, groups, extended
        return groups

    def highest_covered(
        self, probe: Probe, candidates: list[Hashable], skip: Family | None = None
    ) -> list[tuple[Chain, int]]:
        """Per chain holding a node that the probe covers, by chain id: the index of the highest
        such node (the chain's nodes from it down are covered); ``candidates`` are
        ``bottom_candidates(probe)``. Chains of the indexed family ``skip`` are left out.

        A bottom whose witness the probe does not match is not covered (``Probe.admits``, a
        necessary condition): asked of the first ``_ADMITS_ASKED`` candidates, then while it
        refuses at least one in ``_ADMITS_REFUSING`` of those asked (the test decides the
        others alike)."""
        found = []
        asked = refused = 0
        for chain_id in candidates:
            chain = self._chains[chain_id]  # type: ignore[index]
            if skip is not None and chain.family is skip:
                continue
            if asked < _ADMITS_ASKED or refused * _ADMITS_REFUSING >= asked:
                asked += 1
                if not probe.admits(self._bottoms.witness(chain_id)):  # type: ignore[arg-type]
                    refused += 1
                    continue  # the candidates matched only the probe's most selective patterns
            if probe.covers(chain.nodes[-1]):
                found.append((chain, _first_true(chain, probe.covers)))
        return found

    def add(self, node: Ranked, chain: Chain | None, index: int, family: Family | None) -> None:
        """Puts a new node into ``chain`` at ``index`` (the caller checked that it covers the
        nodes from there down and is covered by those above, and that the chain's ``family`` is
        ``family``), or into a chain of its own, of ``family``."""
        if chain is None:
            chain = Chain(next(self._serial), family)
            self._chains[chain.id] = chain
            index = 0
        length = len(chain)
        tops = chain.family is None
        if index == 0 and length and tops:
            self._untop(chain)
        if index == length and length:
            self._bottoms.remove(chain.id, chain.family)
        chain.insert(index, node)
        if not length and not tops:
            self._join(chain, node.subscription)
        if index == 0 and tops:
            self._top(chain, node.subscription)
        if index == length:
            self._bottoms.add(chain.id, node.subscription, chain.family)

    def remove(self, node: Ranked) -> None:
        chain = node.chain
        assert chain is not None, "the node is in no chain"
        last = len(chain) - 1
        index = chain.remove(node)
        tops = chain.family is None
        if index == 0 and tops:
            self._untop(chain)
        if index == last:
            self._bottoms.remove(chain.id, chain.family)
        if not chain.nodes:
            del self._chains[chain.id]
            if not tops:
                self._leave(chain)
            return
        if index == 0 and tops:
            self._top(chain, chain.nodes[0].subscription)
        if index == last:
            self._bottoms.add(chain.id, chain.nodes[-1].subscription, chain.family)

    def _top(self, chain: Chain, subscription: qel.Subscription) -> None:
        """Indexes ``subscription`` as the top of ``chain`` (of no family), loosened."""
        filters = subscription.filters
        loosened = tuple(map(_loosened, filters))
        if any(map(is_not, loosened, filters)):
            self._loose.add(chain.id)
        self._tops.add_filters(chain.id, loosened)

    def _untop(self, chain: Chain) -> None:
        self._tops.remove(chain.id)
        self._loose.discard(chain.id)

    def _join(self, chain: Chain, subscription: qel.Subscription) -> None:
        """Records a new chain of a family (``subscription`` is a member), and the family's hull
        with its first chain."""
        family = chain.family
        held = self._families.get(family)  # type: ignore[arg-type]
        if held is None:
            held = self._families[family] = {}  # type: ignore[index]
            self._tops.add_filters(family, map(_hull, subscription.filters))  # type: ignore[arg-type]
        held[chain.id] = chain

    def _leave(self, chain: Chain) -> None:
        """Forgets an emptied chain of a family, and the family's hull with its last chain."""
        held = self._families[chain.family]  # type: ignore[index]
        del held[chain.id]
        if not held:
            del self._families[chain.family]  # type: ignore[arg-type]
            self._tops.remove(chain.family)
            self._compatible.pop(chain.family, None)  # type: ignore[arg-type]

    def _top_candidates(self, probe: Probe, skip: Family | None) -> set[Hashable]:
        """Chains whose top matches every witness of the probe, and every chain of each family
        but ``skip`` whose hull does: a superset of those whose top covers it, but for the
        chains of ``skip`` (which its own hull always covers: a member's family has some 2
        sqrt(n) chains, and skipping them one by one was a tenth of a member's placement).

        Each witness is looked up in the index of tops and hulls, and what is left of the
        earlier ones kept; the index holds the tops loosened (``_loosened``), so a loosened top
        left after every look-up is then matched against the witnesses (``_matched``), once
        the look-ups narrowed them (matched after each look-up, 18,900 tops were matched per
        1,000 placements on shapes at 10^4; 16,300 this way). (Matching the tops left one by
        one against the other witnesses took as long as looking them up, stop 56; the
        look-up now serves the hulls too.)"""
        candidates: set[Hashable] | None = None
        for sample in probe.witnesses:
            found = self._tops.match(sample)
            candidates = found if candidates is None else candidates & found
            if not candidates:
                return set()
        candidates = self._matched(candidates, probe.witnesses)  # type: ignore[arg-type]
        chains = set()
        for key in candidates:  # type: ignore[union-attr]
            if type(key) is int:
                chains.add(key)
            elif key is not skip:
                chains.update(self._families[key])  # type: ignore[index]
        return chains

    def _matched(
        self, found: set[Hashable], witnesses: tuple[qel.Publication, ...]
    ) -> set[Hashable]:
        """The chains of ``found`` (what the index of tops gave for every one of
        ``witnesses``) whose top matches each witness: those the index holds loosened, matched
        (a top of one filter on its ranges only, ``_within_ranges``)."""
        loose = found & self._loose
        if loose:
            chains = self._chains
            found -= {
                chain_id
                for chain_id in loose
                if not _matches_each(chains[chain_id].nodes[0].subscription, witnesses)  # type: ignore[index]
            }
        return found


_ADMITS_ASKED = 8
_ADMITS_REFUSING = 4
"""How ``highest_covered`` asks whether the probe matches a candidate bottom's witness before
testing it: for the first ``_ADMITS_ASKED`` candidates, then while one in ``_ADMITS_REFUSING``
or more of those asked was refused. Why: on shapes the candidates of a look-up by the probe's
most selective patterns are refused by their witness in 22% of a DNF probe's cases (4.3
microseconds a witness, against 9 for a test that refuses one, which starts with the probe's
compiled columns): asking of every one cost more than the tests it spared (the calls of 1,000
placements at 10^4 took 155 ms asking of every one, 130 ms this way); on the digital library
the witness refuses 88% of a DNF probe's candidates, whose tests take 16 microseconds (10.4
and 10.3 ms)."""


def _loosened(compiled: Filter) -> Filter:
    """The filter with every range of more than one value opened to all values of its kind
    (the filter itself if it has none): what the index of chain tops holds. Why: a witness
    value stabs thousands of the ranges of the tops (most of them half-bounded: on the shapes
    at 10^4 some 740 satisfied patterns per look-up, of which 735 ranges), and the look-up
    cost follows the satisfied patterns and the trie nodes they open; opened, the ranges of
    one predicate and kind are one pattern. The index then gives a superset of the tops that
    match (every publication matching a filter matches it loosened), some 16 where 9.5 match
    on the shapes, and those loosened are matched against the witness (``_matched``); its
    range trees, and their rebuilds while tops change, are gone."""
    patterns = compiled.patterns
    if not any(type(domain) is RangeDomain and not domain.is_point for _, domain in patterns):
        return compiled
    return Filter(
        compiled.subject,
        tuple(
            (
                predicate,
                RangeDomain(domain.kind)
                if type(domain) is RangeDomain and not domain.is_point
                else domain,
            )
            for predicate, domain in patterns
        ),
    )


def _matches_each(top: qel.Subscription, witnesses: tuple[qel.Publication, ...]) -> bool:
    """Whether ``top``, which the index of tops holds loosened and gave for each of
    ``witnesses``, matches each of them."""
    filters = top.filters
    if len(filters) == 1:
        only = filters[0]
        return all(_within_ranges(only, sample) for sample in witnesses)
    return all(qel.matches(top, sample) for sample in witnesses)


def _within_ranges(compiled: Filter, sample: qel.Publication) -> bool:
    """Whether ``compiled`` matches ``sample``, given that the filter loosened (``_loosened``)
    does: it differs only in its ranges of more than one value, each of which must then admit
    an object of its predicate (one is there: the loosened filter matched), where
    ``filter_matches`` checks the subject and every pattern again."""
    values = sample.values
    for predicate, domain in compiled.patterns:
        if type(domain) is RangeDomain and not domain.is_point:
            admits = domain.admits
            for kind, value in values[predicate]:
                if admits(kind, value):
                    break
            else:
                return False
    return True


def _hull(compiled: Filter) -> Filter:
    """The filter with every range opened to all values of its kind: it contains the filter of
    every member of the family in the same position."""
    return Filter(
        compiled.subject,
        tuple(
            (predicate, RangeDomain(domain.kind) if type(domain) is RangeDomain else domain)
            for predicate, domain in compiled.patterns
        ),
    )


class Probe:
    """A subscription being placed, with what every test against it reuses.

    Its witnesses (a node that covers it matches all of them: what the index of chain tops is
    asked with), its family and bounds (``poset.families``: a test against a node of its family
    compares bounds), its filters as ``qel.covering.Target`` (the points each test of a node
    covering it tries, built once), its ``poset.gaps`` columns and ``poset.ends`` alternatives
    (``compiled``, when first tested as the general side), and the answers so far: a placement
    asks about the same node more than once (binary search, minimality, chain choice).
    """

    __slots__ = (
        "_compiled",
        "_covered_by",
        "_covers",
        "_test",
        "above",
        "bounds",
        "family",
        "flags",
        "subscription",
        "targets",
        "witnesses",
    )

    def __init__(self, subscription: qel.Subscription, covers: Covers) -> None:
        self.subscription = subscription
        self.witnesses = tuple(witness(compiled) for compiled in subscription.filters)
        self.family, self.bounds, self.flags = signature(subscription)
        self.targets = tuple(Target(compiled) for compiled in subscription.filters)
        self._test = covers
        self._covered_by: dict[int, bool] = {}
        self._covers: dict[int, bool] = {}
        self._compiled: tuple[Columns, Alternatives] | None = None
        self.above: list[tuple[Chain, int]] | None = None
        """Set by a placement that searched every chain for nodes covering the subscription
        (``ChainDecomposition.lowest_covering`` skipping no family): per chain holding one, the
        index of the lowest (every node covering it is one of a chain's nodes down to there)."""

    def compiled(self) -> tuple[Columns, Alternatives]:
        """``poset.gaps.columns`` and ``poset.ends.alternatives`` of its filters, built on first
        use (a placement tests the probe as the general side of tens of tests)."""
        if self._compiled is None:
            filters = self.subscription.filters
            self._compiled = columns(filters), alternatives(filters)
        return self._compiled

    def matched_by(self, node: Ranked) -> bool:
        """Whether ``node`` matches every witness (necessary for covering the subscription)."""
        general = node.subscription
        return all(qel.matches(general, sample) for sample in self.witnesses)

    def admits(self, sample: qel.Publication | Sample) -> bool:
        """Whether the subscription matches ``sample``: a node whose witness it does not match
        is not covered by it (the witness matches the node), and a filter match costs a fifth
        of a covering test."""
        return any(
            filter_matches(compiled, sample)  # type: ignore[arg-type]  # reads what a Sample has
            for compiled in self.subscription.filters
        )

    def covered_by(self, node: Ranked) -> bool:
        """Whether ``node`` covers the subscription."""
        known = self._covered_by.get(node.id)
        if known is None:
            known = self._covered_by[node.id] = self._test(node, self)
        return known

    def covers(self, node: Ranked) -> bool:
        """Whether the subscription covers ``node``."""
        known = self._covers.get(node.id)
        if known is None:
            known = self._covers[node.id] = self._test(self, node)
        return known


def _last_true(chain: Chain, low: int, high: int, test: Callable[[Ranked], bool]) -> int:
    """The last index below ``high`` where ``test`` holds, given that it holds at ``low`` and on
    a prefix only."""
    nodes = chain.nodes
    while high - low > 1:
        middle = (low + high) // 2
        if test(nodes[middle]):
            low = middle
        else:
            high = middle
    return low


def _first_true(chain: Chain, test: Callable[[Ranked], bool]) -> int:
    """The first index where ``test`` holds, given that it holds at the last index and on a
    suffix only."""
    low, high = -1, len(chain) - 1
    nodes = chain.nodes
    while high - low > 1:
        middle = (low + high) // 2
        if test(nodes[middle]):
            high = middle
        else:
            low = middle
    return high
