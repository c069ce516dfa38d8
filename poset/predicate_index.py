"""A counting-style predicate index: which subscriptions match a publication, without scanning them.

The poset walk finds matching subscriptions by descending covering relations; when the poset is wide
(few coverings) that walk visits nearly every subscription. This index answers the same question at a
cost that follows what the publication satisfies, not how many subscriptions are stored, in the
spirit of Fabret et al.'s counting/clustering algorithms (SIGMOD 2001).

Two levels:

1. **Atomic patterns.** Every ``(predicate, domain)`` requirement of every filter, and the subject
   domain of a filter, is one *pattern*, stored once however many filters use it (an integer id and
   a reference count). Per predicate, the patterns sit in structures that answer "which patterns
   does this object value satisfy" directly:

   * equality (``PointDomain``, and number or date points ``X = 2004``): a hash map keyed by the
     publication's own ``(kind, value)`` pairs, so ``2004``, ``2004.0`` and ``Fraction(2004)`` meet
     in one bucket; O(1) per value.
   * ranges: per value kind, a segment tree over the sorted distinct bounds; each range is stored in
     O(log n) tree nodes and each elementary slot (a bound, or the open gap between two bounds) keeps
     the list of non-empty nodes on its root path, so a stabbing query is one bisection plus one
     ``set.update`` of O(log n) precomputed tuples: O(log n + k) with the loop in C.
   * ``contains``: per predicate, an Aho-Corasick automaton (``pyahocorasick``) over the distinct
     subscribed substrings, so a string value is scanned once, in time linear in its length plus the
     occurrences, whatever the number of substrings. A pattern with several substrings counts the
     ones found in the *same* value.
   * "any value of this kind" (a range unbounded at both ends, ``contains`` of nothing) and ``ANY``
     (the predicate is present): one id each, added when a value of that kind / the predicate occurs.

   Each pattern is satisfied at most once per publication (the satisfied ids form a set), which is
   the "some value of the predicate" semantics across several values.

   Range trees and automata are static, so they change by Bentley and Saxe's logarithmic method
   (``_Levels``): the distinct ranges or substrings that appeared since the last ``match`` are built,
   at the next ``match``, into a new structure that absorbs the smaller existing ones. A predicate
   keeps O(log n) structures, each item is rebuilt O(log n) times, and a super-peer interleaving new
   subscriptions with publications never pays a full rebuild per publication. Subscriptions that
   only reuse existing ranges and substrings (the common case: popular values) change nothing here.

2. **Filters.** A filter is the sorted tuple of its pattern ids; identical filters (from different
   subscriptions, or with different variable names) are stored once, with the keys of the
   subscriptions that contain them: the key itself while it is the only one (as it nearly always
   is when subscriptions are mostly distinct), a tuple while they are few (a set of one key takes
   four times the memory), a set beyond ``_FEW_KEYS``. The filters form a trie over their sorted
   ids, with every run of nodes that continue one path only held as one node (a radix trie: its
   ``skip``, the ids of the run past the first): with mostly distinct ranges most filters share
   only their first ids, and a node per id of their own took some 280 bytes each (a node and a
   dictionary of one child), two thirds of the trie on the shapes workload. Matching walks
   only the trie nodes whose path is satisfied, intersecting each node's child ids with the
   satisfied ids (a C-level intersection of the smaller side against the larger). A publication
   therefore costs the patterns it satisfies plus the trie prefixes it satisfies, which is the
   counting algorithm's bound with Fabret's refinement that a filter is only looked at once its
   first (most selective) pattern is satisfied. Ids encode a selectivity rank in their high bits
   (subject, then equality, ``contains``, bounded ranges, half-bounded ranges, kinds, presence), so
   sorting puts the patterns least likely to hold first and walks stop early.

The remaining cost is the answer itself: building the result set is linear in the number of matching
keys, done in C by ``set.union`` over the per-filter key sets; with thousands of matching keys it
dominates everything above. Changes (``add``/``remove``) are O(patterns of the subscription), plus the
amortised O(log² n) share of level rebuilds for a new distinct range or substring; removing the
last user of any structure deletes it, so add/remove cycles leave nothing behind.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain, count
from math import isnan
from types import MappingProxyType
from typing import Final, Generic, TypeVar

import ahocorasick

from qel.domains import AnyDomain, ContainsDomain, Domain, PointDomain, RangeDomain
from qel.filters import Filter
from qel.model import Publication, Subscription
from qel.terms import KIND_STRING, KIND_URI

Bound = int | Fraction
K = TypeVar("K")
V = TypeVar("V")
S = TypeVar("S")
Identity = tuple[object, ...]
"""A pattern as the index stores it: its predicate IRI (None for the subject), a tag and the
tag's fields; a range is ``(name, "range", kind, low, low inclusive, high, high inclusive)``. One
tuple is the pattern's key and a range's entry in its stabbing structure (with mostly distinct
subscriptions nearly every range is a pattern of its own)."""
Path = tuple[int, ...]
Keys = tuple[Hashable, ...] | set[Hashable] | list[Hashable]
_FEW_KEYS: Final = 8

# Pattern ids are ``rank << _RANK_SHIFT | serial``: sorting ids sorts by rank first, so a filter's
# trie path starts with its most selective patterns. Ranks, most selective first (in an index of
# ``predicates_first``, every presence pattern has the first):
_RANK_PREDICATES: Final = 0
_RANK_SUBJECT: Final = 1
_RANK_POINT: Final = 2
_RANK_CONTAINS: Final = 3
_RANK_RANGE: Final = 4
_RANK_HALF_RANGE: Final = 5
_RANK_KIND: Final = 6
_RANK_PRESENCE: Final = 7
_RANK_SHIFT: Final = 40


@dataclass(frozen=True, slots=True)
class PredicateIndexStatistics:
    """Sizes of a ``PredicateIndex``; every count is zero for an empty index.

    ``filters`` and ``patterns`` are distinct ones (shared between subscriptions); ``hash_entries``
    are equality patterns, ``ranges`` range patterns in stabbing structures, ``substrings`` distinct
    ``contains`` substrings in automata, ``presence`` the "predicate present" and "any value of a
    kind" patterns. ``levels`` counts the static range trees and automata serving them, ``stale``
    bounds the removed ranges and substrings still inside those (never more than the live ones
    after a ``match``, see ``_Levels``). ``approximate_bytes`` is the shallow size of the index's
    own containers plus the automata: it excludes the keys, URIs and values the caller shares.
    """

    subscriptions: int
    filters: int
    patterns: int
    predicates: int
    hash_entries: int
    ranges: int
    substrings: int
    presence: int
    levels: int
    stale: int
    trie_nodes: int
    approximate_bytes: int


class _Levels(Generic[K, V, S]):
    """A changing set of items served by static structures: Bentley and Saxe's logarithmic method.

    A static structure (range tree, automaton) answers queries fast but cannot take insertions, and
    rebuilding one big structure after every change would make a super-peer that interleaves new
    subscriptions with publications pay O(n log n) per publication. Instead, the items added since
    the last ``refresh`` form a batch; at ``refresh`` the batch absorbs every level no larger than
    itself and is built into one new level. Levels thus shrink geometrically (O(log n) of them, each
    queried) and an item is rebuilt O(log n) times in its life. A removed item stays in its level
    as a harmless dead entry (pattern ids are never reused; a dead substring's payload is empty)
    until removals outnumber the live items, when everything live is rebuilt into one level.

    A live item is in one of two dictionaries, ``built`` (in a level) or ``pending`` (not yet):
    with mostly distinct subscriptions nearly every range is an item, and a dictionary of all
    of them beside the pending ones took some 30 to 40 bytes per subscription until the first
    ``refresh``.
    """

    __slots__ = ("build", "built", "levels", "pending", "stale", "structures")

    def __init__(self, build: Callable[[dict[K, V]], S]) -> None:
        self.build = build
        self.built: dict[K, V] = {}  # live items in a level
        self.pending: dict[K, V] = {}  # live items in no level yet
        self.levels: list[tuple[S, tuple[K, ...]]] = []  # largest first, with the keys built in
        self.structures: list[S] = []  # the levels' structures, what queries read
        self.stale = 0  # removals not yet purged: an upper bound on the dead entries in levels

    def __len__(self) -> int:
        return len(self.built) + len(self.pending)

    def get(self, key: K) -> V | None:
        found = self.pending.get(key)
        return self.built.get(key) if found is None else found

    def values(self) -> list[V]:
        return [*self.built.values(), *self.pending.values()]

    def add(self, key: K, value: V) -> None:
        self.pending[key] = value

    def discard(self, key: K) -> None:
        if self.pending.pop(key, None) is None:
            del self.built[key]
            self.stale += 1

    @property
    def dirty(self) -> bool:
        return bool(self.pending) or self.stale > len(self)

    def refresh(self) -> None:
        if self.stale > len(self):
            batch = {**self.built, **self.pending}
            self.levels.clear()
            self.stale = 0
        else:
            batch = dict(self.pending)
            built = self.built
            while self.levels and len(self.levels[-1][1]) <= len(batch):
                _, keys = self.levels.pop()
                kept = {key: built[key] for key in keys if key in built}
                self.stale -= len(keys) - len(kept)
                batch.update(kept)
        self.built.update(self.pending)
        self.pending.clear()
        if batch:
            self.levels.append((self.build(batch), tuple(batch)))
        self.structures = [structure for structure, _ in self.levels]


class _StabTree:
    """A static set of ranges of one kind answering stabbing queries (value -> ranges holding it).

    A segment tree over the elementary slots cut by the sorted distinct bounds: slot ``2i + 1`` is
    ``endpoints[i]``, slot ``2i`` the open gap just below it, slot ``2m`` everything above the last
    bound. Each range sits in O(log n) tree nodes; each slot keeps the non-empty nodes on its root
    path, so a query is a bisection and one ``set.update`` over O(log n) tuples, done in C.
    """

    __slots__ = ("endpoints", "paths")

    def __init__(self, ranges: dict[int, Identity]) -> None:
        endpoints = sorted(
            {bound for *_, low, _, high, _ in ranges.values() for bound in (low, high)} - {None}
        )
        position = {bound: index for index, bound in enumerate(endpoints)}
        slots = 2 * len(endpoints) + 1
        size = 1 << (slots - 1).bit_length()
        nodes: dict[int, list[int]] = {}
        for pid, (*_, low, low_inclusive, high, high_inclusive) in ranges.items():
            start = 0 if low is None else 2 * position[low] + (1 if low_inclusive else 2)
            stop = slots if high is None else 2 * position[high] + (2 if high_inclusive else 1)
            start += size
            stop += size
            while start < stop:
                if start & 1:
                    nodes.setdefault(start, []).append(pid)
                    start += 1
                if stop & 1:
                    stop -= 1
                    nodes.setdefault(stop, []).append(pid)
                start >>= 1
                stop >>= 1
        # Each tree node's path from the root, parents before children: one step per node,
        # where walking up from every slot took one per slot and level (a rebuild of the sent
        # index's ranges, on shapes at 10^5, was a fifth of a placement).
        paths: list[tuple[tuple[int, ...], ...]] = [()] * (2 * size)
        for node, pids in nodes.items():
            paths[node] = (tuple(pids),)
        for node in range(2, slots + size):
            above = paths[node >> 1]
            if above:
                held = paths[node]
                paths[node] = (*held, *above) if held else above
        self.endpoints = endpoints
        self.paths = paths[size : size + slots]

    def stab(self, value: object, satisfied: set[int]) -> None:
        """Adds the ranges holding ``value`` (not NaN: the caller keeps NaN out of every range)."""
        endpoints = self.endpoints
        index = bisect_left(endpoints, value)
        if index < len(endpoints) and endpoints[index] == value:
            satisfied.update(*self.paths[2 * index + 1])
        else:
            satisfied.update(*self.paths[2 * index])


class _Substring:
    """The ``contains`` patterns of one predicate that need one substring; the automaton's payload."""

    __slots__ = ("multiple", "single")

    def __init__(self) -> None:
        self.single: set[int] = set()  # patterns needing only this substring
        self.multiple: set[int] = set()  # patterns needing this and others, in the same value


def _automaton(substrings: dict[str, _Substring]) -> ahocorasick.Automaton:
    automaton = ahocorasick.Automaton()
    for part, entry in substrings.items():
        automaton.add_word(part, entry)
    automaton.make_automaton()
    return automaton


class _Texts:
    """``contains`` patterns of one predicate: Aho-Corasick automata over their substrings."""

    __slots__ = ("needs", "substrings")

    def __init__(self) -> None:
        self.substrings: _Levels[str, _Substring, ahocorasick.Automaton] = _Levels(_automaton)
        self.needs: dict[int, int] = {}  # multi-substring pattern -> how many substrings it needs

    def add(self, pid: int, parts: frozenset[str]) -> None:
        for part in parts:
            entry = self.substrings.get(part)
            if entry is None:
                entry = _Substring()
                self.substrings.add(part, entry)
            (entry.single if len(parts) == 1 else entry.multiple).add(pid)
        if len(parts) > 1:
            self.needs[pid] = len(parts)

    def discard(self, pid: int, parts: frozenset[str]) -> None:
        for part in parts:
            entry = self.substrings.get(part)
            assert entry is not None, "a substring of an indexed pattern"
            entry.single.discard(pid)
            entry.multiple.discard(pid)
            if not entry.single and not entry.multiple:
                self.substrings.discard(part)
        self.needs.pop(pid, None)

    def scan(self, text: str, satisfied: set[int]) -> None:
        # A substring may occur many times in one value, or in two levels: each counts once.
        found = {
            entry for automaton in self.substrings.structures for _, entry in automaton.iter(text)
        }
        for entry in found:
            satisfied.update(entry.single)
        partial = [entry.multiple for entry in found if entry.multiple]
        if partial:
            needs = self.needs
            counts = Counter(chain.from_iterable(partial))
            satisfied.update(pid for pid, seen in counts.items() if seen == needs[pid])


class _Table:
    """The patterns on one predicate (or on the publication subject), by the structure that finds
    them: equality hash map, "any value of kind" map, presence id, ranges per kind, substrings."""

    __slots__ = ("kinds", "name", "points", "presence", "ranges", "texts")

    def __init__(self, name: str | None) -> None:
        self.name = name  # predicate IRI; None for the subject table
        self.presence: int | None = None
        self.kinds: dict[str, int] = {}
        self.points: dict[tuple[str, object], int] = {}
        self.ranges: dict[str, _Levels[int, Identity, _StabTree]] = {}
        self.texts: _Texts | None = None

    def __bool__(self) -> bool:
        return bool(
            self.presence is not None or self.kinds or self.points or self.ranges or self.texts
        )

    def add(self, pid: int, identity: Identity) -> None:
        match identity:
            case (_, "any"):
                self.presence = pid
            case (_, "kind", str() as kind):
                self.kinds[kind] = pid
            case (_, "point", str() as kind, value):
                self.points[kind, value] = pid
            case (_, "range", str() as kind, *_):
                if kind not in self.ranges:
                    self.ranges[kind] = _Levels(_StabTree)
                self.ranges[kind].add(pid, identity)
            case (_, "contains", frozenset() as parts):
                if self.texts is None:
                    self.texts = _Texts()
                self.texts.add(pid, parts)

    def discard(self, pid: int, identity: Identity) -> None:
        match identity:
            case (_, "any"):
                self.presence = None
            case (_, "kind", str() as kind):
                del self.kinds[kind]
            case (_, "point", str() as kind, value):
                del self.points[kind, value]
            case (_, "range", str() as kind, *_):
                ranges = self.ranges[kind]
                ranges.discard(pid)
                if not ranges:
                    del self.ranges[kind]
            case (_, "contains", frozenset() as parts):
                self.texts.discard(pid, parts)  # type: ignore[union-attr]
                if not self.texts.substrings:  # type: ignore[union-attr]
                    self.texts = None

    def refresh(self) -> None:
        for ranges in self.ranges.values():
            if ranges.dirty:
                ranges.refresh()
        if self.texts is not None and self.texts.substrings.dirty:
            self.texts.substrings.refresh()

    def collect(self, objects: Iterable[tuple[str, object]], satisfied: set[int]) -> None:
        """Adds to ``satisfied`` the ids of this table's patterns that some object satisfies."""
        if self.presence is not None:
            satisfied.add(self.presence)
        points, kinds, ranges, texts = self.points, self.kinds, self.ranges, self.texts
        for item in objects:
            if points:
                pid = points.get(item)
                if pid is not None:
                    satisfied.add(pid)
            kind, value = item
            if kinds:
                pid = kinds.get(kind)
                if pid is not None:
                    satisfied.add(pid)
            if ranges:
                held = ranges.get(kind)
                # NaN is outside every range with a bound (both-unbounded ranges are kinds).
                if held is not None and not (isinstance(value, float) and isnan(value)):
                    for tree in held.structures:
                        tree.stab(value, satisfied)
            if texts is not None and kind == KIND_STRING:
                texts.scan(value, satisfied)  # type: ignore[arg-type]


_EMPTY: Mapping[int, object] = MappingProxyType({})
"""What a trie node holds as a mapping that is empty (``_Node``)."""


class _Node:
    """A trie node: ``children`` continue longer filters; ``one`` holds the key of each filter
    with one key, ``ends`` the keys of each filter with several, under the filter's last pattern
    id. A mapping that is empty is the shared ``_EMPTY`` (most trie nodes end filters and
    continue none: an empty dictionary each took 64 bytes). ``skip`` holds the ids that follow
    the one its parent keys it by, up to the node (the run of a radix trie; a node of the trie,
    but for the root, ends a filter or has two children or more). ``one`` is a pair ``(last id,
    key)`` while it holds one filter, as most do (a dictionary of one took 224 bytes, a pair 56:
    some 400 bytes per subscription on the shapes workload, its two indexes together), a
    dictionary from two on (``_add_one``, ``_pop_one``)."""

    __slots__ = ("children", "ends", "one", "skip")

    def __init__(self, skip: Path = ()) -> None:
        self.skip = skip
        self.children: dict[int, _Node] = _EMPTY  # type: ignore[assignment]
        self.ends: dict[int, Keys] = _EMPTY  # type: ignore[assignment]
        self.one: dict[int, Hashable] | tuple[int, Hashable] = _EMPTY  # type: ignore[assignment]


def _identity(name: str | None, domain: Domain) -> tuple[int, Identity]:
    """The rank and the identity of a domain on predicate ``name`` as the index stores it;
    semantically equal domains written differently (a number point as a range or as a point) get
    the same identity."""
    if isinstance(domain, AnyDomain):
        return _RANK_PRESENCE, (name, "any")
    if isinstance(domain, PointDomain):
        return _RANK_POINT, (name, "point", domain.kind, domain.value)
    if isinstance(domain, RangeDomain):
        if domain.is_point and domain.low_inclusive and domain.high_inclusive:
            return _RANK_POINT, (name, "point", domain.kind, domain.low)
        if domain.low is None and domain.high is None:
            return _RANK_KIND, (name, "kind", domain.kind)
        rank = (
            _RANK_RANGE if domain.low is not None and domain.high is not None else _RANK_HALF_RANGE
        )
        return rank, (
            name,
            "range",
            domain.kind,
            domain.low,
            domain.low_inclusive,
            domain.high,
            domain.high_inclusive,
        )
    if isinstance(domain, ContainsDomain):
        if not domain.substrings:
            return _RANK_KIND, (name, "kind", KIND_STRING)
        return _RANK_CONTAINS, (name, "contains", frozenset(domain.substrings))
    raise TypeError(f"not a domain the predicate index knows: {domain!r}")


def _requirements(compiled: Filter, predicates_first: bool = False) -> list[tuple[int, Identity]]:
    """The filter's patterns as ``(rank, identity)``; the subject is predicate None and, when
    unconstrained, no pattern at all. With ``predicates_first``, the presence of each of its
    predicates too (which every pattern on the predicate implies), of the first rank."""
    found = [_identity(predicate.value, domain) for predicate, domain in compiled.patterns]
    if predicates_first:
        found = [requirement for requirement in found if requirement[0] != _RANK_PRESENCE]
        found += [(_RANK_PREDICATES, (predicate.value, "any")) for predicate in compiled.predicates]
    if not isinstance(compiled.subject, AnyDomain):
        found.append((_RANK_SUBJECT, _identity(None, compiled.subject)[1]))
    return found


class PredicateIndex:
    """Which of many subscriptions match a publication, at a cost following what the publication
    satisfies rather than the number of subscriptions (see the module docstring for the algorithm).

    Keys are any hashable values chosen by the caller. ``match`` gives exactly the keys for which
    ``qel.matches(subscription, publication)`` holds.

    Costs, with P the publication's values, S the satisfied patterns, T the satisfied trie prefixes
    and K the matching keys: ``match`` is O(P log² R + S + T min(S, F) + K), R being the distinct
    ranges of a predicate (O(log R) levels of O(log R) bisections), F a trie node's fan-out (its
    children are intersected with the satisfied ids), plus the length of the string values for
    ``contains``; ``add``/``remove`` are O(size of the subscription)
    plus, for a distinct range or substring that appears, an amortised O(log² R) share of the level
    rebuilds that the next ``match`` performs (``_Levels``).

    ``predicates_first``: every filter's path starts with the presence of each of its predicates,
    so that a match walks only below the filters whose predicates the publication all has. For
    an index asked with the witnesses of subscriptions that may be covered (``poset.sent_index``,
    ``poset.plans``): a subscription covers another only if it uses no predicate the other lacks,
    and on shapes at 10^5 a witness's predicates held those of 386 of the 15,638 sent filters,
    while its values satisfied patterns of nearly every one (a walk went through 298 trie nodes,
    171 of them to fail there). A publication of many predicates gains nothing from it.
    """

    def __init__(self, *, predicates_first: bool = False) -> None:
        self._predicates_first = predicates_first
        self._subscriptions: dict[Hashable, tuple[Filter, ...]] = {}
        """Each key's filters, but for the keys a caller holds itself (``hold``)."""
        self._patterns: dict[Identity, int] = {}
        """Each pattern's id. Nothing maps an id back to its pattern, nor a key to the ids of its
        filters' paths: ``release`` finds both again from the filters, as ``keys_with`` does (a
        few microseconds per removal). Kept, the two took 160 bytes per subscription on shapes
        at 3 x 10^4 (the paths' tuples 114, the dictionary by id 44)."""
        self._shared: dict[int, int] = {}
        """Per pattern used by several distinct filters, how many beyond the first: a count per
        pattern as an object, or in a dictionary, took some 40 to 70 bytes, and with mostly
        distinct ranges nearly every pattern has one user."""
        self._subject = _Table(None)
        self._tables: dict[str, _Table] = {}
        self._dirty: set[_Table] = set()
        self._root = _Node()
        self._serial = count()

    def __len__(self) -> int:
        return len(self._subscriptions)

    def __contains__(self, key: object) -> bool:
        return key in self._subscriptions

    def add(self, key: Hashable, subscription: Subscription) -> None:
        """Indexes ``subscription`` under ``key``; a key already present raises ``KeyError``."""
        if not isinstance(subscription, Subscription):
            raise TypeError(f"expected a qel.Subscription, got {type(subscription).__name__}")
        self.add_filters(key, subscription.filters)

    def add_filters(self, key: Hashable, filters: Iterable[Filter]) -> None:
        """Indexes a disjunction of compiled filters under ``key`` (as ``add`` does a
        subscription's), for a caller that builds filters of its own (``poset.chains``: the
        widest subscription of a family, which it never parses)."""
        if key in self._subscriptions:
            raise KeyError(f"{key!r} is already in the predicate index; remove it first")
        filters = tuple(filters)
        self.hold(key, filters)
        self._subscriptions[key] = filters

    def hold(self, key: Hashable, filters: Iterable[Filter]) -> None:
        """Indexes the filters under ``key`` as ``add_filters`` does, but leaves the key to the
        caller, who gives the same filters back to ``release``: for a caller with an object per
        key anyway (the poset, a node per subscription), where the index's dictionary from key
        to filters took 52 bytes per subscription at 10^5. ``len``, ``in``, ``remove`` and
        ``statistics().subscriptions`` do not see such a key, and nothing checks that it is not
        held twice."""
        # Canonicalise everything before touching the index, so a bad domain leaves it unchanged.
        described = [_requirements(compiled, self._predicates_first) for compiled in filters]
        paths: dict[Path, None] = {}
        fresh: set[int] = set()  # patterns made here, until their first user is counted
        for requirements in described:
            path = tuple(
                sorted({self._intern(*requirement, fresh) for requirement in requirements})
            )
            if path in paths:
                continue  # two filters the index does not tell apart: the key once
            node, new = self._insert(path)
            if new:
                shared = self._shared
                for pid in path:
                    if pid in fresh:
                        fresh.discard(pid)
                    else:
                        shared[pid] = shared.get(pid, 0) + 1
            _with_key(node, path[-1], key, new)
            paths[path] = None

    def keys_with(self, compiled: Filter) -> tuple[Hashable, ...]:
        """The keys holding ``compiled``, or a filter written differently with the same
        patterns; nothing changes. What a caller needs to find the subscription a new one
        repeats, without a dictionary of its own from filters to keys (the poset's took 52
        bytes per subscription at 10^5)."""
        pids = set()
        for requirement in _requirements(compiled, self._predicates_first):
            pid = self._patterns.get(requirement[1])
            if pid is None:
                return ()
            pids.add(pid)
        path = sorted(pids)
        if not path:
            return ()
        node = self._find(tuple(path[:-1]))  # type: ignore[assignment]
        if node is None:
            return ()
        last = path[-1]
        one = _one_key(node, last)
        if one is not None:
            return (one,)
        keys = node.ends.get(last, ())
        return keys if type(keys) is tuple else tuple(keys)

    def remove(self, key: Hashable) -> None:
        """Forgets the subscription under ``key``; an unknown key raises ``KeyError``."""
        try:
            held = self._subscriptions.pop(key)
        except KeyError:
            raise KeyError(f"{key!r} is not in the predicate index") from None
        self.release(key, held)

    def release(self, key: Hashable, filters: Iterable[Filter]) -> None:
        """Forgets the filters ``hold`` indexed under ``key`` (the same filters)."""
        patterns = self._patterns
        paths: dict[Path, dict[int, Identity]] = {}
        for compiled in filters:
            found = {
                patterns[identity]: identity
                for _, identity in _requirements(compiled, self._predicates_first)
            }
            paths.setdefault(tuple(sorted(found)), found)
        for path, found in paths.items():
            if _without_key(self._end(path), path[-1], key):
                continue
            self._delete(path)
            for pid in path:
                self._release(pid, found[pid])

    def match(self, publication: Publication) -> set[Hashable]:
        """The keys of the subscriptions that ``publication`` matches."""
        return set().union(*self.match_groups(publication))

    def match_groups(self, publication: Publication) -> list[Keys]:
        """The same answer as ``match``, as the keys of the matching filters (tuples, sets, and
        a list per trie node of the keys of its matching filters with one key, and one list for
        the nodes that end one filter), without building their union: finding them costs in
        proportion to what the publication satisfies, while a union costs in proportion to the
        number of matching keys. A key may be in several groups; the sets belong to the index and
        must not be changed."""
        if self._dirty:
            for table in self._dirty:
                table.refresh()
            self._dirty.clear()
        satisfied: set[int] = set()
        self._subject.collect(((KIND_URI, publication.subject.value),), satisfied)
        tables = self._tables
        for predicate, objects in publication.values.items():
            table = tables.get(predicate.value)
            if table is not None:
                table.collect(objects, satisfied)
        groups: list[Keys] = []
        single: list[Hashable] = []  # the keys of the matching filters held as pairs
        groups.append(single)
        stack = [self._root]
        while stack:
            node = stack.pop()
            skip = node.skip
            if skip and not satisfied.issuperset(skip):
                continue
            one = node.one
            if one:
                if type(one) is tuple:
                    if one[0] in satisfied:
                        single.append(one[1])
                else:
                    groups.append(list(map(one.__getitem__, one.keys() & satisfied)))
            ends = node.ends
            if ends:
                groups.extend(map(ends.__getitem__, ends.keys() & satisfied))
            children = node.children
            if children:
                stack.extend(map(children.__getitem__, children.keys() & satisfied))
        return groups

    def statistics(self) -> PredicateIndexStatistics:
        """Counts of the index's structures; O(size of the index), meant for monitoring and tests."""
        tables = [self._subject, *self._tables.values()]
        ranges = [held for table in tables for held in table.ranges.values()]
        texts = [table.texts for table in tables if table.texts is not None]
        trees = [tree for held in ranges for tree in held.structures]
        automata = [automaton for held in texts for automaton in held.substrings.structures]
        nodes = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack.extend(node.children.values())
        containers: list[object] = [
            self._subscriptions,
            self._patterns,
            self._shared,
            self._tables,
            *(keys for node in nodes for keys in node.ends.values()),
            *tables,
            *(part for table in tables for part in (table.kinds, table.points, table.ranges)),
            *(
                part
                for held in [*ranges, *(held.substrings for held in texts)]
                for part in (held, held.built, held.pending, held.levels, held.structures)
            ),
            *(keys for held in ranges for _, keys in held.levels),
            *(part for tree in trees for part in (tree, tree.endpoints, tree.paths, *tree.paths)),
            *texts,
            *(held.needs for held in texts),
            *(entry for held in texts for entry in held.substrings.values()),
            *nodes,
            *(part for node in nodes for part in (node.children, node.ends, node.one)),
            *(node.skip for node in nodes if node.skip),
        ]
        return PredicateIndexStatistics(
            subscriptions=len(self._subscriptions),
            filters=sum(
                len(node.ends) + (1 if type(node.one) is tuple else len(node.one)) for node in nodes
            ),
            patterns=len(self._patterns),
            predicates=len(self._tables),
            hash_entries=sum(len(table.points) for table in tables),
            ranges=sum(map(len, ranges)),
            substrings=sum(len(held.substrings) for held in texts),
            presence=sum(len(table.kinds) + (table.presence is not None) for table in tables),
            levels=len(trees) + len(automata),
            stale=sum(held.stale for held in [*ranges, *(held.substrings for held in texts)]),
            trie_nodes=len(nodes) - 1,
            approximate_bytes=sum(map(sys.getsizeof, containers))
            + sum(automaton.get_stats()["total_size"] for automaton in automata),
        )

    # -- patterns -------------------------------------------------------------------------------
    def _intern(self, rank: int, identity: Identity, fresh: set[int]) -> int:
        """The id of the pattern, created (unused, and added to ``fresh``) if new; ``hold``
        counts its users."""
        found = self._patterns.get(identity)
        if found is not None:
            return found
        name: str | None = identity[0]  # type: ignore[assignment]
        if name is None:
            table = self._subject
        else:
            table = self._tables.get(name)
            if table is None:
                table = self._tables[name] = _Table(name)
        pid = rank << _RANK_SHIFT | next(self._serial)
        self._patterns[identity] = pid
        fresh.add(pid)
        table.add(pid, identity)
        self._dirty.add(table)
        return pid

    def _release(self, pid: int, identity: Identity) -> None:
        shared = self._shared
        others = shared.get(pid)
        if others is not None:
            if others > 1:
                shared[pid] = others - 1
            else:
                del shared[pid]
            return
        del self._patterns[identity]
        name: str | None = identity[0]  # type: ignore[assignment]
        table = self._subject if name is None else self._tables[name]
        table.discard(pid, identity)
        if table:
            self._dirty.add(table)
            return
        self._dirty.discard(table)
        if table.name is not None:
            del self._tables[table.name]

    # -- filter trie ----------------------------------------------------------------------------
    def _insert(self, path: Path) -> tuple[_Node, bool]:
        """The node ending the filter's path, and whether the filter is new (then added to the
        trie with no keys yet). The trie is the only index of the distinct filters: a dictionary
        from path to node took some 50 bytes per subscription, a walk down costs a look-up per
        node. A new path's own ids past the shared ones become one node; a run it leaves in the
        middle is split there."""
        prefix = path[:-1]
        node = self._root
        at = 0
        while at < len(prefix):
            child = node.children.get(prefix[at])
            if child is None:
                if not node.children:
                    node.children = {}
                child = node.children[prefix[at]] = _Node(prefix[at + 1 :])
                node = child
                break
            skip = child.skip
            shared = _shared_length(skip, prefix, at + 1)
            if shared < len(skip):
                middle = _Node(skip[:shared])
                middle.children = {skip[shared]: child}
                child.skip = skip[shared + 1 :]
                node.children[prefix[at]] = middle
                child = middle
            node = child
            at += 1 + shared
        return node, _one_key(node, path[-1]) is None and path[-1] not in node.ends

    def _find(self, prefix: Path) -> _Node | None:
        """The node whose path is ``prefix``, if the trie has one."""
        node = self._root
        at = 0
        while at < len(prefix):
            child = node.children.get(prefix[at])
            if child is None:
                return None
            skip = child.skip
            end = at + 1 + len(skip)
            if prefix[at + 1 : end] != skip:
                return None
            node = child
            at = end
        return node

    def _end(self, path: Path) -> _Node:
        """The node ending a filter's path (which is in the trie)."""
        node = self._find(path[:-1])
        assert node is not None, "the filter is in the trie"
        return node

    def _delete(self, path: Path) -> None:
        """Prunes the trie nodes a removed filter leaves empty, and joins a node left with one
        child and no filter to that child (the trie stays as if the filter had never been)."""
        trail = [(self._root, -1)]
        prefix = path[:-1]
        at = 0
        while at < len(prefix):
            child = trail[-1][0].children[prefix[at]]
            trail.append((child, prefix[at]))
            at += 1 + len(child.skip)
        for depth in range(len(trail) - 1, 0, -1):
            node, pid = trail[depth]
            parent = trail[depth - 1][0]
            if node.ends or node.one:
                _join_only_child(parent, pid, node)
                return
            if node.children:
                _join_only_child(parent, pid, node)
                return
            del parent.children[pid]
            if not parent.children:
                parent.children = _EMPTY  # type: ignore[assignment]


def _shared_length(skip: Path, prefix: Path, start: int) -> int:
    """How many ids of ``skip`` ``prefix`` repeats from ``start`` on."""
    shared = 0
    for pid in skip:
        if start + shared >= len(prefix) or prefix[start + shared] != pid:
            break
        shared += 1
    return shared


def _join_only_child(parent: _Node, pid: int, node: _Node) -> None:
    """Joins ``node`` (under ``pid`` in ``parent``) to its only child if it ends no filter."""
    if node.ends or node.one or len(node.children) != 1:
        return
    (first, child), *_ = node.children.items()
    child.skip = (*node.skip, first, *child.skip)
    parent.children[pid] = child


def _with_key(node: _Node, last: int, key: Hashable, new: bool) -> None:
    """Adds ``key`` to the keys of the filter that ends at ``node`` with ``last`` (``new``: it
    has none yet)."""
    if new:
        _add_one(node, last, key)
        return
    if _one_key(node, last) is not None:
        first = _pop_one(node, last)
        if not node.ends:
            node.ends = {}
        node.ends[last] = (first, key)
        return
    keys = node.ends[last]
    if type(keys) is tuple:
        node.ends[last] = (*keys, key) if len(keys) < _FEW_KEYS else {*keys, key}
    else:
        keys.add(key)


def _without_key(node: _Node, last: int, key: Hashable) -> bool:
    """Removes ``key`` from the keys of the filter that ends at ``node`` with ``last``; whether
    the filter has keys left (else it is gone from ``node``)."""
    keys = node.ends.get(last)
    if keys is None:
        _pop_one(node, last)
        return False
    if type(keys) is tuple:
        keys = tuple(held for held in keys if held != key)
    else:
        keys.discard(key)
    if len(keys) > 1:
        node.ends[last] = keys
        return True
    del node.ends[last]
    if not node.ends:
        node.ends = _EMPTY  # type: ignore[assignment]
    _add_one(node, last, next(iter(keys)))
    return True


def _one_key(node: _Node, last: int) -> Hashable | None:
    """The key of the filter of one key that ends at ``node`` with ``last``, if any."""
    one = node.one
    if type(one) is tuple:
        return one[1] if one[0] == last else None
    return one.get(last)  # type: ignore[union-attr]


def _add_one(node: _Node, last: int, key: Hashable) -> None:
    """Records the filter ending at ``node`` with ``last`` as having the one key ``key``."""
    one = node.one
    if not one:
        node.one = (last, key)
    elif type(one) is tuple:
        node.one = {one[0]: one[1], last: key}
    else:
        one[last] = key  # type: ignore[index]


def _pop_one(node: _Node, last: int) -> Hashable:
    """Forgets the filter of one key ending at ``node`` with ``last``; its key."""
    one = node.one
    if type(one) is tuple:
        node.one = _EMPTY  # type: ignore[assignment]
        return one[1]
    key = one.pop(last)  # type: ignore[union-attr]
    if len(one) == 1:
        node.one = next(iter(one.items()))  # type: ignore[union-attr]
    return key
