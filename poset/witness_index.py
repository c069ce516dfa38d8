"""An index of one witness publication per stored subscription, to find the subscriptions that a new
one covers without testing every stored subscription.

If ``q`` covers a stored subscription ``n``, then ``q`` matches every publication that matches ``n``,
in particular ``n``'s witness (``qel.filters.witness``). So the subscriptions ``q`` covers are among
those whose witness ``q`` matches: this index answers that question by looking up, per pattern of
``q``, the witnesses whose object on that predicate lies in the pattern's domain (a hash look-up for
a fixed value, a range scan for a range, a scan of the predicate's distinct strings for
``contains``), starting from the most selective pattern. The caller then confirms with ``covers``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from qel import Subscription
from qel.domains import AnyDomain, Domain, PointDomain, RangeDomain
from qel.filters import Filter, witness
from qel.matching import filter_matches
from qel.model import Publication
from qel.terms import KIND_STRING, URI


@dataclass
class _PredicateWitnesses:
    """Witness objects of every stored subscription on one predicate."""

    by_value: dict[tuple[str, object], set[Hashable]] = field(default_factory=dict)
    ordered: dict[str, SortedList] = field(default_factory=dict)
    holders: set[Hashable] = field(default_factory=set)

    def add(self, key: Hashable, kind: str, value: object) -> None:
        self.holders.add(key)
        self.by_value.setdefault((kind, value), set()).add(key)
        self.ordered.setdefault(kind, SortedList(key=_order)).add((value, key))

    def remove(self, key: Hashable, kind: str, value: object) -> None:
        bucket = self.by_value[kind, value]
        bucket.discard(key)
        if not bucket:
            del self.by_value[kind, value]
        entries = self.ordered[kind]
        entries.remove((value, key))
        if not entries:
            del self.ordered[kind]

    def size(self, domain: Domain) -> int:
        """How many ``candidates(domain)`` would give, without building them (a ``contains``
        counts every string: its candidates need a scan)."""
        if isinstance(domain, AnyDomain):
            return len(self.holders)
        if isinstance(domain, PointDomain):
            return len(self.by_value.get((domain.kind, domain.value), ()))
        if isinstance(domain, RangeDomain):
            entries = self.ordered.get(domain.kind)
            if not entries:
                return 0
            start, stop = _span(entries, domain)
            return max(0, stop - start)
        return len(self.ordered.get(KIND_STRING, ()))

    def candidates(self, domain: Domain) -> Iterable[Hashable]:
        if isinstance(domain, AnyDomain):
            return self.holders
        if isinstance(domain, PointDomain):
            return self.by_value.get((domain.kind, domain.value), ())
        if isinstance(domain, RangeDomain):
            entries = self.ordered.get(domain.kind)
            if not entries:
                return ()
            start, stop = _span(entries, domain)
            return [key for _, key in entries.islice(start, stop)] if start < stop else ()
        return [
            key
            for (kind, value), keys in self.by_value.items()
            if kind == KIND_STRING and domain.admits(kind, value)
            for key in keys
        ]


def _span(entries: SortedList, domain: RangeDomain) -> tuple[int, int]:
    """The slice of ``entries`` (sorted by value, one kind, no NaN: witnesses of satisfiable
    domains) whose values the range admits: two bisections, an excluded end bisected past its
    equal values."""
    low, high = domain.low, domain.high
    if low is None:
        start = 0
    elif domain.low_inclusive:
        start = entries.bisect_key_left(low)
    else:
        start = entries.bisect_key_right(low)
    if high is None:
        stop = len(entries)
    elif domain.high_inclusive:
        stop = entries.bisect_key_right(high)
    else:
        stop = entries.bisect_key_left(high)
    return start, stop


def _order(entry: tuple[object, Hashable]) -> object:
    return entry[0]


class WitnessIndex:
    """Maps keys to their subscriptions' witnesses; ``covered_candidates(q)`` is a superset of the
    keys whose subscription ``q`` covers (exactly the keys whose first witness ``q`` matches)."""

    def __init__(self) -> None:
        self._predicates: dict[URI, _PredicateWitnesses] = {}
        self._witnesses: dict[Hashable, Publication] = {}

    def __len__(self) -> int:
        return len(self._witnesses)

    def add(self, key: Hashable, subscription: Subscription) -> None:
        if key in self._witnesses:
            raise KeyError(f"{key!r} is already indexed")
        sample = witness(subscription.filters[0])
        self._witnesses[key] = sample
        for predicate, term in sample.statements:
            self._predicates.setdefault(predicate, _PredicateWitnesses()).add(
                key, term.kind, term.value
            )

    def remove(self, key: Hashable) -> None:
        sample = self._witnesses.pop(key)
        for predicate, term in sample.statements:
            self._predicates[predicate].remove(key, term.kind, term.value)
        for predicate in {p for p, _ in sample.statements}:
            entry = self._predicates[predicate]
            entry.holders.discard(key)
            if not entry.holders:
                del self._predicates[predicate]

    def covered_candidates(self, subscription: Subscription) -> set[Hashable]:
        found: set[Hashable] = set()
        for compiled in subscription.filters:
            found |= self._filter_candidates(compiled)
        return found

    def rough_candidates(self, subscription: Subscription) -> set[Hashable]:
        """A superset of ``covered_candidates``, without checking whole witnesses: per filter, the
        keys whose witness its most selective patterns admit (``_intersected``). For a caller that
        tests each key with ``covers`` anyway (often a comparison of bounds: ``poset.families``)."""
        found: set[Hashable] = set()
        for compiled in subscription.filters:
            found |= self._intersected(compiled)
        return found

    def _sized(self, compiled: Filter) -> list[tuple[int, _PredicateWitnesses, Domain]] | None:
        """The filter's patterns with how many candidates each gives, fewest first; None when a
        predicate has no witness at all (then no key is a candidate)."""
        sized = []
        for predicate, domain in compiled.patterns:
            entry = self._predicates.get(predicate)
            if entry is None:
                return None
            sized.append((entry.size(domain), entry, domain))
        sized.sort(key=_count)
        return sized

    def _filter_candidates(self, compiled: Filter) -> set[Hashable]:
        """The keys whose witness ``compiled`` matches: the candidates of its most selective
        pattern (sized first, built once), checked against the whole filter unless that one
        pattern is all of it."""
        sized = self._sized(compiled)
        if not sized:
            return set()
        _, entry, domain = sized[0]
        candidates = entry.candidates(domain)
        if len(compiled.patterns) == 1 and isinstance(compiled.subject, AnyDomain):
            return set(candidates)
        witnesses = self._witnesses
        return {key for key in candidates if filter_matches(compiled, witnesses[key])}

    def _intersected(self, compiled: Filter) -> set[Hashable]:
        """The candidates of the filter's most selective pattern, intersected with those of the
        next ones while that is cheaper than the caller's tests it spares (a price range of one
        city and kind: the kind's witnesses alone are every other city's too). A fixed value's
        or a predicate's candidates are a set already (intersecting costs the smaller side, in
        C); a range's are built from a slice, which pays only while the slice is at most
        ``_WORTH`` times what is left."""
        sized = self._sized(compiled)
        if not sized:
            return set()
        _, entry, domain = sized[0]
        found = set(entry.candidates(domain))
        for size, entry, domain in sized[1:]:
            if len(found) <= _FEW:
                break
            if isinstance(domain, (AnyDomain, PointDomain)) or size <= _WORTH * len(found):
                found.intersection_update(entry.candidates(domain))
        return found


_FEW = 4
_WORTH = 4


def _count(sized: tuple[int, _PredicateWitnesses, Domain]) -> int:
    return sized[0]
