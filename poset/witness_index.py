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
from math import inf
from operator import itemgetter

from sortedcontainers import SortedList

from qel import Subscription
from qel.domains import AnyDomain, Domain, PointDomain, RangeDomain
from qel.filters import Filter, witness
from qel.matching import filter_matches
from qel.model import Publication
from qel.terms import KIND_DATE, KIND_NUMBER, KIND_STRING, URI, Term


@dataclass
class _PredicateWitnesses:
    """Witness objects of every stored subscription on one predicate.

    ``ordered`` holds the numbers' and dates' ``(rounded, value, key)`` entries (``_rounded``),
    keys being integers: entries of equal value (every chain bottom of a busy city) then still
    have a total order, so removing one is a bisection, not a scan of its equals (which made
    removal linear in the busiest value: 15% of a bulk build at 10^5).

    ``by_value`` holds the keys of one string or URI as a tuple while they are few (most values
    are one chain bottom's: a set of one key takes 216 bytes), a set beyond ``_FEW_KEYS``:
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
    holders: set[Hashable] = field(default_factory=set)
    strings: int = 0

    def add(self, key: int, kind: str, value: object) -> None:
        self.holders.add(key)
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
            return len(self.holders)
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
            return self.holders
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


def _keys_of(groups: Iterable[_Group], compiled: Filter, skip: Hashable) -> list[set[Hashable]]:
    """The keys of each of ``groups``, not tagged ``skip`` (if any), whose witnesses
    ``compiled`` may match."""
    return [
        group.keys
        for group in groups
        if (skip is None or group.tag is not skip) and group.may_hold(compiled)
    ]


class _Group:
    """The keys whose witness has the same predicates and the same ``tag`` (``WitnessIndex.add``),
    and, for a tag, the witness terms its members share: those of every pattern not a range."""

    __slots__ = ("fixed", "keys", "predicates", "tag")

    def __init__(self, predicates: frozenset[URI], tag: Hashable, fixed: dict[URI, Term]) -> None:
        self.predicates = predicates
        self.tag = tag
        self.fixed = fixed
        self.keys: set[Hashable] = set()

    def may_hold(self, compiled: Filter) -> bool:
        """Whether ``compiled`` may match some member's witness: it has every predicate the
        filter needs, and each of the filter's patterns that is not a range admits the shared
        term, if any, on its predicate (a range of the filter: its bounds vary, so yes)."""
        if not compiled.predicates <= self.predicates:
            return False
        fixed = self.fixed
        return all(
            type(domain) is RangeDomain
            or (term := fixed.get(predicate)) is None
            or domain.admits(term.kind, term.value)
            for predicate, domain in compiled.patterns
        )


class Sample:
    """What the index keeps of a witness: its subject and its objects by predicate, which is all
    that matching it (``qel.matching.filter_matches``) reads; the publication's statements and
    terms took as much again (a chain bottom each: thousands on a workload of many shapes).
    The objects of a predicate that are neither numbers nor dates are kept once for all samples
    (``_shared_objects``)."""

    __slots__ = ("subject", "values")

    def __init__(self, publication: Publication) -> None:
        self.subject = publication.subject
        self.values = {
            predicate: _shared_objects(objects) for predicate, objects in publication.values.items()
        }


SHARED_OBJECTS_KEPT = 16_384
"""Most distinct witness objects of one predicate kept once each (``_SHARED_OBJECTS``)."""

_SHARED_OBJECTS: dict[tuple[tuple[str, object], ...], tuple[tuple[str, object], ...]] = {}
"""A sample's objects on one predicate, ``((kind, value), ...)``, once each when none is a
number or a date: a class, a maker, a fuel, a ``contains`` witness, the fresh URI of an
unconstrained object recur in thousands of chain bottoms' witnesses (on shapes at 10^4, 3.4
such tuples per sample, each with its pairs, some 300 bytes per subscription), while a range's
middle is a value of its own (not kept: it would fill the table). Bounded: past
``SHARED_OBJECTS_KEPT`` a new tuple is simply not shared; nothing depends on it but memory."""

_UNSHARED_KINDS = frozenset((KIND_NUMBER, KIND_DATE))


def _shared_objects(objects: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object], ...]:
    kept = _SHARED_OBJECTS.get(objects)
    if kept is not None:
        return kept
    if len(_SHARED_OBJECTS) >= SHARED_OBJECTS_KEPT or any(
        kind in _UNSHARED_KINDS for kind, _ in objects
    ):
        return objects
    _SHARED_OBJECTS[objects] = objects
    return objects


class WitnessIndex:
    """Maps integer keys to their subscriptions' witnesses; ``covered_candidates(q)`` is a
    superset of the keys whose subscription ``q`` covers (exactly the keys whose first witness
    ``q`` matches).

    Keys are also grouped by the predicates of their witness and a *tag* given with them: the
    poset tags a chain of an indexed family with its family, whose members share every witness
    term but their ranges'. A caller that places a family member asks ``groups`` once per family
    for the groups its filter may match (``_Group.may_hold``: not a price range of another city
    or kind, not a family whose filters have a predicate a price range lacks), and the candidates
    come from those groups only, its own family's left out: they were most of the candidates a
    value look-up gives (the chain bottoms of its own city) and all of them are skipped."""

    def __init__(self) -> None:
        self._predicates: dict[URI, _PredicateWitnesses] = {}
        self._witnesses: dict[int, Sample] = {}
        self._groups: dict[tuple[frozenset[URI], Hashable], _Group] = {}
        self.version = 0
        """Changes whenever a group appears: what a caller learnt from ``groups`` holds while
        it is the same (the groups' keys change, their sets are the same; a group that went is
        an empty set, which a caller may go on holding, and comes back as a new one)."""
        self._appeared: list[_Group] = []
        """The groups that appeared after version ``_appeared_after``, in order: a caller
        whose ``groups`` are of a version since then adds what ``groups_since`` gives instead
        of asking ``groups`` again (on the listings at 10^4 a group appeared for one placement
        of a family member in five, and ``groups`` tested every group, 150 of them, each time:
        a tenth of such a placement). Emptied once longer than the groups there are."""
        self._appeared_after = 0

    def __len__(self) -> int:
        return len(self._witnesses)

    def add(self, key: int, subscription: Subscription, tag: Hashable = None) -> None:
        """Indexes the witness of the subscription's first filter under ``key``; ``tag`` (not
        None) promises that every key of that tag with the same predicates has the same witness
        terms but on the filter's ranges."""
        if key in self._witnesses:
            raise KeyError(f"{key!r} is already indexed")
        first = subscription.filters[0]
        sample = witness(first)
        for predicate, kind, value in _values(sample):
            self._predicates.setdefault(predicate, _PredicateWitnesses()).add(key, kind, value)
        group = self._groups.get((first.predicates, tag))
        if group is None:
            fixed: dict[URI, Term] = {}
            if tag is not None:
                ranges = {p for p, domain in first.patterns if type(domain) is RangeDomain}
                fixed = {p: term for p, term in sample.statements if p not in ranges}
            group = self._groups[first.predicates, tag] = _Group(first.predicates, tag, fixed)
            self.version += 1
            if len(self._appeared) >= len(self._groups):
                self._appeared.clear()
                self._appeared_after = self.version - 1
            self._appeared.append(group)
        group.keys.add(key)
        self._witnesses[key] = Sample(sample)

    def remove(self, key: int, tag: Hashable = None) -> None:
        """Forgets ``key``, added with ``tag``."""
        sample = self._witnesses.pop(key)
        predicates = frozenset(sample.values)
        for predicate, kind, value in _values(sample):
            self._predicates[predicate].remove(key, kind, value)
        for predicate in predicates:
            entry = self._predicates[predicate]
            entry.holders.discard(key)
            if not entry.holders:
                del self._predicates[predicate]
        group = self._groups[predicates, tag]
        group.keys.discard(key)
        if not group.keys:
            del self._groups[predicates, tag]

    def witness(self, key: int) -> Sample:
        """The witness indexed under ``key``."""
        return self._witnesses[key]

    def groups(self, compiled: Filter, skip: Hashable) -> list[set[Hashable]]:
        """The keys of each group, not tagged ``skip`` (if any), whose witnesses ``compiled``
        may match (``_Group.may_hold``; with no range of ``compiled`` looked at, the same for
        every filter that differs from it only in the bounds of ranges)."""
        return _keys_of(self._groups.values(), compiled, skip)

    def groups_since(
        self, version: int, compiled: Filter, skip: Hashable
    ) -> list[set[Hashable]] | None:
        """What ``groups`` gives now and did not at ``version``: the keys of each group that
        appeared since, as there (a group that appeared and went is an empty set); None if
        that is no longer known (ask ``groups``)."""
        if version < self._appeared_after:
            return None
        return _keys_of(self._appeared[version - self._appeared_after :], compiled, skip)

    def group_count(self) -> int:
        """How many groups there are (what bounds the sets a caller of ``groups_since`` holds)."""
        return len(self._groups)

    def covered_candidates(self, subscription: Subscription) -> set[Hashable]:
        found: set[Hashable] = set()
        for compiled in subscription.filters:
            found |= self._filter_candidates(compiled)
        return found

    def rough_candidates(
        self, subscription: Subscription, among: list[list[set[Hashable]]] | None = None
    ) -> set[Hashable]:
        """A superset of ``covered_candidates``, without checking whole witnesses: per filter, the
        keys whose witness its most selective patterns admit (``_intersected``), among the keys
        of ``among[i]`` (``groups`` of the ``i``-th filter) if given. For a caller that tests
        each key with ``covers`` anyway (often a comparison of bounds: ``poset.families``)."""
        found: set[Hashable] = set()
        for position, compiled in enumerate(subscription.filters):
            found |= self._intersected(compiled, None if among is None else among[position])
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
        return {key for key in candidates if filter_matches(compiled, witnesses[key])}  # type: ignore[arg-type]

    def _intersected(self, compiled: Filter, groups: list[set[Hashable]] | None) -> set[Hashable]:
        """The candidates of the filter's most selective pattern, or the keys of ``groups`` if
        given and fewer (then the pattern's candidates are kept to those), intersected with
        those of the next patterns while that is cheaper than the caller's tests it spares (a
        price range of one city and kind: the kind's witnesses alone are every other city's
        too). A fixed value's or a predicate's candidates are a set already (intersecting costs
        the smaller side, in C); a range's are built from a slice, which pays only while the
        slice is at most ``_WORTH`` times what is left. A range not looked up still keeps the
        keys with an object on its predicate (``holders``, unless every witness has one): the
        filter matches no witness without one, and the intersection, in C, costs the smaller
        side. On shapes at 10^4, 54% of the candidates lacked a predicate of the probe's
        filter, each a filter match in ``highest_covered`` to reject."""
        if groups is not None and not groups:
            return set()
        sized = self._sized(compiled)
        if not sized:
            return set()
        if groups is not None and sum(map(len, groups)) <= sized[0][0]:
            found = set().union(*groups)
        else:
            _, entry, domain = sized.pop(0)
            found = set(entry.candidates(domain))
            if groups is not None:
                found = set().union(*(found & keys for keys in groups))
        for size, entry, domain in sized:
            if len(found) <= _FEW:
                break
            if isinstance(domain, (AnyDomain, PointDomain)) or size <= _WORTH * len(found):
                found.intersection_update(entry.candidates(domain))
            elif len(entry.holders) < len(self._witnesses):
                found.intersection_update(entry.holders)
        return found


_FEW = 4
_FEW_KEYS = 8
_WORTH = 4


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
