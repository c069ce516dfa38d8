"""An index of one witness publication per stored subscription, to find the subscriptions that a new
one covers without testing every stored subscription: the previous poset's (``bench.poset_baseline``,
the Hasse diagram kept for comparison). ``SubscriptionPoset`` asked it for what a removed sent
node covered until stop 77; it now looks only at what that node stood in for (``poset.poset``,
"Stand-ins") and keeps the witnesses alone (``poset.samples``).

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
from math import inf
from operator import itemgetter

from sortedcontainers import SortedList

from poset.samples import Sample, compact
from qel import Subscription
from qel.domains import AnyDomain, Domain, PointDomain, RangeDomain
from qel.filters import Filter, witness
from qel.matching import filter_matches
from qel.model import Publication
from qel.terms import KIND_DATE, KIND_NUMBER, KIND_STRING, URI


@dataclass
class _PredicateWitnesses:
    """Witness objects of every stored subscription on one predicate.

    ``ordered`` holds the numbers' and dates' ``(rounded, value, key)`` entries (``_rounded``),
    keys being integers: entries of equal value (the alerts of a busy city, alike) then still
    have a total order, so removing one is a bisection, not a scan of its equals (which made
    removal linear in the busiest value: 15% of a bulk build at 10^5).

    ``by_value`` holds the keys of one string or URI as a tuple while they are few (most values
    are one subscription's: a set of one key takes 216 bytes), a set beyond ``_FEW_KEYS``:
    what a fixed value or ``contains`` looks up. A number's or a date's keys are the entries
    between two bisections instead (``_equal``): with ranges, nearly every witness has a value
    of its own there (a range's middle), and a dictionary entry each beside the entries took
    some 250 bytes per subscription on the shapes workload. Strings and URIs have no sorted
    entries (nothing looks them up in order; ``size`` of a ``contains`` counts the strings,
    ``strings``): an entry each, with its share of the sorted list, took some 200 bytes per
    subscription on shapes (classes, makers, fuels, fresh URIs, ``contains`` witnesses)."""

    by_value: dict[tuple[str, object], tuple[Hashable, ...] | set[Hashable]] = field(
        default_factory=dict
    )
    ordered: dict[str, SortedList] = field(default_factory=dict)
    keys: int = 0
    """How many keys have a witness object on the predicate (the caller counts each once):
    what an unconstrained pattern's candidates number. A set of them took 246 bytes per
    subscription on shapes, for the rare look-up where such a pattern is the most selective."""
    strings: int = 0

    def add(self, key: int, kind: str, value: object) -> None:
        if kind in _ORDERED_ONLY:
            self.ordered.setdefault(kind, SortedList()).add((_rounded(value), value, key))
            return
        if kind == KIND_STRING:
            self.strings += 1
        bucket = self.by_value.get((kind, value), ())
        if type(bucket) is tuple:
            grown = (*bucket, key) if len(bucket) < _FEW_KEYS else {*bucket, key}
            self.by_value[kind, value] = grown
        else:
            bucket.add(key)

    def remove(self, key: int, kind: str, value: object) -> None:
        if kind not in _ORDERED_ONLY:
            if kind == KIND_STRING:
                self.strings -= 1
            bucket = self.by_value[kind, value]
            if type(bucket) is tuple:
                bucket = self.by_value[kind, value] = tuple(h for h in bucket if h != key)
            else:
                bucket.discard(key)
            if not bucket:
                del self.by_value[kind, value]
            return
        entries = self.ordered[kind]
        entries.remove((_rounded(value), value, key))
        if not entries:
            del self.ordered[kind]

    def size(self, domain: Domain) -> int:
        """How many ``candidates(domain)`` would give, without building them (a ``contains``
        counts every string: its candidates need a scan)."""
        if isinstance(domain, AnyDomain):
            return self.keys
        if isinstance(domain, PointDomain):
            if domain.kind in _ORDERED_ONLY:
                start, stop = self._equal(domain)
                return stop - start
            return len(self.by_value.get((domain.kind, domain.value), ()))
        if isinstance(domain, RangeDomain):
            entries = self.ordered.get(domain.kind)
            if not entries:
                return 0
            start, stop = _span(entries, domain)
            return max(0, stop - start)
        return self.strings

    def candidates(self, domain: Domain) -> Iterable[Hashable]:
        if isinstance(domain, AnyDomain):
            found: set[Hashable] = set()
            for bucket in self.by_value.values():
                found.update(bucket)
            for entries in self.ordered.values():
                found.update(map(_KEY, entries))
            return found
        if isinstance(domain, PointDomain):
            if domain.kind in _ORDERED_ONLY:
                start, stop = self._equal(domain)
                return map(_KEY, self.ordered[domain.kind][start:stop]) if start < stop else ()
            return self.by_value.get((domain.kind, domain.value), ())
        if isinstance(domain, RangeDomain):
            entries = self.ordered.get(domain.kind)
            if not entries:
                return ()
            start, stop = _span(entries, domain)
            # a slice of a SortedList is built from its sublists' slices, and the keys taken
            # from it, in C: the most selective pattern of a shape is often a range that
            # thousands of witnesses fall in (an ``islice`` and a comprehension took twice as long)
            return map(_KEY, entries[start:stop]) if start < stop else ()
        parts = domain.substrings  # type: ignore[union-attr]  # a ``contains``: scanned
        if len(parts) == 1:  # the usual case, written out (``admits`` per string: 7 times the cost)
            part = parts[0]
            return [
                key
                for (kind, value), keys in self.by_value.items()
                if kind == KIND_STRING and part in value  # type: ignore[operator]
                for key in keys
            ]
        return [
            key
            for (kind, value), keys in self.by_value.items()
            if kind == KIND_STRING and all(part in value for part in parts)  # type: ignore[operator]
            for key in keys
        ]

    def _equal(self, domain: PointDomain) -> tuple[int, int]:
        """The slice of the entries of the point's kind (a number or a date) that hold its
        value."""
        entries = self.ordered.get(domain.kind)
        if not entries:
            return 0, 0
        value = domain.value
        rounded = _rounded(value)
        return (
            entries.bisect_left((rounded, value)),
            entries.bisect_left((rounded, value, *_AFTER)),
        )


_ORDERED_ONLY = frozenset({KIND_NUMBER, KIND_DATE})
"""The kinds whose values ``_PredicateWitnesses.by_value`` leaves to the sorted entries."""

_KEY = itemgetter(2)
"""An entry's key (entries are ``(rounded, value, key)``)."""

_EXACT = 2**53
"""Integers up to this magnitude are floats exactly: ``_rounded`` keeps them."""


def _rounded(value: object) -> int | float:
    """The float nearest ``value`` (a number or a date: an int, a ``Fraction`` or a float), or
    an int that is one exactly, put before the value in the sorted entries. Why: a range's
    middle is a ``Fraction`` (``qel.domains.range_sample``: on shapes at 10^4, 3,620 of the
    12,229 entries), and each comparison of two was a Python call (``Fraction._richcmp``); a
    pair of bisections took 6.8 microseconds, 2.8 with the rounded values compared first, in C.
    Exact: correct rounding is monotone (``a < b`` gives ``_rounded(a) <= _rounded(b)``), so
    entries and bisection keys ordered by rounded value, then by value, are in the order of
    their values; two that round alike are compared by value. Past the largest float a value
    rounds to an infinity, as monotone."""
    if type(value) is int and -_EXACT <= value <= _EXACT:
        return value
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        return inf if value > 0 else -inf  # type: ignore[operator]


_AFTER = (inf,)
"""Appended to a rounded value and a value, sorts after every entry of that value (keys are
finite integers)."""


def _span(entries: SortedList, domain: RangeDomain) -> tuple[int, int]:
    """The slice of ``entries`` (sorted by value, one kind, no NaN: witnesses of satisfiable
    domains) whose values the range admits: two bisections, an excluded end bisected past its
    equal values."""
    low, high = domain.low, domain.high
    if low is None:
        start = 0
    elif domain.low_inclusive:
        start = entries.bisect_left((_rounded(low), low))
    else:
        start = entries.bisect_left((_rounded(low), low, *_AFTER))
    if high is None:
        stop = len(entries)
    elif domain.high_inclusive:
        stop = entries.bisect_left((_rounded(high), high, *_AFTER))
    else:
        stop = entries.bisect_left((_rounded(high), high))
    return start, stop


class WitnessIndex:
    """Maps integer keys to their subscriptions' witnesses; ``covered_candidates(q)`` is a
    superset of the keys whose subscription ``q`` covers (exactly the keys whose first witness
    ``q`` matches). ``witness(key)`` is what every subscription covering the key's matches: the
    poset asks its sent nodes and its plans with it (``poset.sent_index``, ``poset.plans``)."""

    def __init__(self) -> None:
        self._predicates: dict[URI, _PredicateWitnesses] = {}
        self._witnesses: dict[int, Sample] = {}

    def __len__(self) -> int:
        return len(self._witnesses)

    def add(self, key: int, subscription: Subscription) -> None:
        """Indexes the witness of the subscription's first filter under ``key``."""
        if key in self._witnesses:
            raise KeyError(f"{key!r} is already indexed")
        sample = witness(subscription.filters[0])
        for predicate, kind, value in _values(sample):
            self._predicates.setdefault(predicate, _PredicateWitnesses()).add(key, kind, value)
        for predicate in sample.values:
            self._predicates[predicate].keys += 1
        self._witnesses[key] = Sample(compact(sample))

    def remove(self, key: int) -> None:
        """Forgets ``key``."""
        sample = self._witnesses.pop(key)
        for predicate, kind, value in _values(sample):
            self._predicates[predicate].remove(key, kind, value)
        for predicate in sample.values:
            entry = self._predicates[predicate]
            entry.keys -= 1
            if not entry.keys:
                del self._predicates[predicate]

    def witness(self, key: int) -> Sample:
        """The witness indexed under ``key``."""
        return self._witnesses[key]

    def covered_candidates(self, subscription: Subscription) -> set[Hashable]:
        """The keys whose witness some filter of ``subscription`` matches: every key whose
        subscription it covers, and others (the caller confirms each with ``covers``)."""
        found: set[Hashable] = set()
        for compiled in subscription.filters:
            found |= self._filter_candidates(compiled)
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
        if len(sized) > 1 and sized[0][0] > _FEW_CANDIDATES:
            # the next pattern's candidates first, intersected in C, when they are not many
            # more: each key it leaves out spares a filter match (on shapes, half a sent
            # node's removal was matching the candidates of its most selective pattern)
            size, second, other = sized[1]
            if size <= _NEXT_AT_MOST * sized[0][0]:
                candidates = set(candidates).intersection(second.candidates(other))
        witnesses = self._witnesses
        return {key for key in candidates if filter_matches(compiled, witnesses[key])}  # type: ignore[arg-type]


_FEW_KEYS = 8
_FEW_CANDIDATES = 16
_NEXT_AT_MOST = 4


def _count(sized: tuple[int, _PredicateWitnesses, Domain]) -> int:
    return sized[0]


def _values(sample: Publication | Sample) -> set[tuple[URI, str, object]]:
    """A witness's statements as the index keys them. Two terms of one predicate can have the
    same kind and value (a plain string and one with a language, say): indexed under one key
    twice, the first removal took both and the second found nothing (a ``KeyError`` that took
    the super-peer down, found by the churn property)."""
    return {
        (predicate, kind, value)
        for predicate, objects in sample.values.items()
        for kind, value in objects
    }
