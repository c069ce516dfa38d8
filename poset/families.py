"""Families of subscriptions that differ only in the bounds of their ranges, so that covering
between two of one family is a comparison of bounds instead of a ``qel.covers`` call.

Why. Placing a subscription in the poset, and re-linking around a removed one, asks ``covers``
some hundred times, mostly of pairs from one family: price ceilings of one city, price ranges of
one city and kind, the DNF alerts ``P <= a ; S >= b`` of one city. Those of one family form long
chains and wide antichains (nested ranges in two dimensions), and the general test builds and
walks domain objects each time (tens of microseconds for a DNF pair).

What. A subscription's *family* is its filters with every range replaced by its kind and which of
its ends are open (subject, predicates, fixed values, ``contains`` and unconstrained objects kept,
in the filters' order); its *bounds* are the ranges' ends in the same order, and *flags* which of
them are included. The members of a family thus have their finite bounds in the same positions
(``dimensions`` of them), which ``poset.dominance`` indexes as points.
Families are interned: two subscriptions are of one family iff their ``Family`` is the same
object. Only subscriptions whose filters repeat no predicate get one (else ``None``).

Exactness. For one filter without repeated predicates, ``g`` covers ``s`` iff each pattern of
``g`` contains ``s``'s pattern on the same predicate (``qel.filters.filter_within`` is exact
there); in one family the fixed parts are equal, so this is exactly: every range of ``g``
contains the range of ``s`` in the same position, which ``bounds_within`` decides with the
rules of ``qel.domains.subset`` for two ranges of one kind (a point range included). For several
filters (DNF), each filter of ``s`` inside the filter of ``g`` in the same position is sufficient;
it is also necessary when each filter leaves unconstrained a predicate that each other one
constrains (``_separated``: ``P <= a ; S >= b`` over patterns on both), and otherwise a "no" from
the bounds decides nothing and the general test runs.
"""

from __future__ import annotations

import weakref
from typing import Protocol

import qel
from qel.domains import AnyDomain, RangeDomain, subset

Bounds = tuple[object, ...]


Projection = tuple[tuple[int, int], ...] | bool | None
"""How a member of one family covers a member of another (``projection``): ``False`` never,
pairs ``(i, j)`` when exactly if its ``i``-th range contains the other's ``j``-th (every pair;
none: always), ``None`` when the general test must decide."""


class Family:
    """One family (compared by identity); ``exact``: the bounds decide both ways (one filter,
    or filters that are ``_separated``); ``dimensions``: how many of its bounds are finite;
    ``over``: per other family met in a covering test, the ``projection`` of this one's
    members onto its members, or ``MET_ONCE`` (``projected``; None while there is none)."""

    __slots__ = ("__weakref__", "dimensions", "exact", "over")

    def __init__(self, exact: bool, dimensions: int) -> None:
        self.exact = exact
        self.dimensions = dimensions
        self.over: dict[Family, Projection | object] | None = None


_FAMILIES: weakref.WeakValueDictionary[tuple[object, ...], Family] = weakref.WeakValueDictionary()


class Signed(Protocol):
    """A node or a probe: a subscription with its family, bounds and flags."""

    subscription: qel.Subscription
    family: Family | None
    bounds: Bounds
    flags: int


def signature(subscription: qel.Subscription) -> tuple[Family | None, Bounds, int]:
    """``(family, bounds, flags)``; ``(None, (), 0)`` when some filter repeats a predicate."""
    shape: list[object] = []
    bounds: list[object] = []
    flags = 0
    bit = 1
    for compiled in subscription.filters:
        if len(compiled.patterns) != len(compiled.predicates):
            return None, (), 0
        patterns: list[object] = []
        ranged = False
        for pattern in compiled.patterns:
            predicate, domain = pattern
            if type(domain) is RangeDomain:
                ranged = True
                part = (predicate, domain.kind, domain.low is None, domain.high is None)
                if len(_RANGE_PARTS) < RANGE_PARTS_KEPT:
                    part = _RANGE_PARTS.setdefault(part, part)
                patterns.append(part)
                bounds.append(domain.low)
                bounds.append(domain.high)
                if domain.low_inclusive:
                    flags |= bit
                if domain.high_inclusive:
                    flags |= bit << 1
                bit <<= 2
            else:
                patterns.append(pattern)  # the filter's own pair: a family key kept shares it
        shape.append((compiled.subject, tuple(patterns) if ranged else compiled.patterns))
    key = tuple(shape)
    family = _FAMILIES.get(key)
    if family is None:
        family = Family(_separated(key), sum(bound is not None for bound in bounds))
        _FAMILIES[key] = family
    return family, tuple(bounds), flags


RANGE_PARTS_KEPT = 4096
"""Most distinct range parts of family keys kept once each (``_RANGE_PARTS``)."""

_RANGE_PARTS: dict[tuple[object, ...], tuple[object, ...]] = {}
"""Each range part of a family's key, ``(predicate, kind, low open, high open)``, once: a
family's key holds one per range, and on a workload of many shapes nearly every subscription
has a family of its own (some 150 bytes per subscription at 10^4), while the distinct parts
are a few per numeric predicate. Bounded (``RANGE_PARTS_KEPT``): past it, parts are not
shared, which changes nothing but memory."""


def _separated(shape: tuple[object, ...]) -> bool:
    """Whether, for every two filters ``i`` and ``j`` of the family, filter ``i`` leaves some
    predicate unconstrained that filter ``j`` constrains (true of one filter). Then for ``s`` and
    ``g`` of the family, a filter of ``s`` is covered by ``g``'s filters only if it is inside
    ``g``'s filter in the same position: otherwise a value of one of its ranges outside that
    filter's range, with a fresh object on each predicate it leaves unconstrained, is a
    publication that matches it and none of ``g``'s filters (only an unconstrained pattern
    accepts a fresh object). So the bounds decide both ways."""
    unconstrained = [
        {entry[0] for entry in patterns if type(entry[1]) is AnyDomain}
        for _, patterns in shape  # type: ignore[misc]
    ]
    constrained = [
        {entry[0] for entry in patterns if type(entry[1]) is not AnyDomain}
        for _, patterns in shape  # type: ignore[misc]
    ]
    return all(
        unconstrained[i] & constrained[j]
        for i in range(len(shape))
        for j in range(len(shape))
        if i != j
    )


def bounds_within(
    general: Bounds, general_flags: int, specific: Bounds, specific_flags: int
) -> bool:
    """Whether each range of ``general`` contains the range of ``specific`` in the same position:
    bounds alternate low, high; ``None`` is an open end; a flag bit set is an included end."""
    bit = 1
    low = True
    for mine, theirs in zip(general, specific, strict=True):
        if mine is not None:
            if theirs is None:
                return False
            # strictly wider first: one comparison in the usual case (a Fraction's is slow)
            wider = (mine < theirs) if low else (mine > theirs)  # type: ignore[operator]
            if not wider and (
                ((mine > theirs) if low else (mine < theirs))  # type: ignore[operator]
                or (not general_flags & bit and specific_flags & bit)
            ):
                return False
        bit <<= 1
        low = not low
    return True


def projection(general: qel.Subscription, specific: qel.Subscription) -> Projection:
    """How members of ``general``'s family cover members of ``specific``'s, another family (both
    of one filter, so that ``qel.filters.filter_within`` is the exact test, and no predicate
    repeats). The fixed parts of both are the same for every member: a predicate of
    ``general`` missing from ``specific``, a subject or fixed pattern not within, a range over a
    range of another kind decide "never" once; then each range of ``general`` must contain the
    range of ``specific`` on its predicate, a comparison of bounds. A range against a fixed
    value (either way) depends on the bounds otherwise: the general test decides. Why: a price
    range placed under its city's ceilings, or a ceiling's successors among price ranges, took
    a general test per step of each binary search (a third of a price range's placement)."""
    if len(general.filters) != 1 or len(specific.filters) != 1:
        return None
    outer, inner = general.filters[0], specific.filters[0]
    if not outer.predicates <= inner.predicates or not subset(inner.subject, outer.subject):
        return False
    held = {}
    slot = 0
    for predicate, domain in inner.patterns:
        held[predicate] = domain, slot
        slot += type(domain) is RangeDomain
    pairs = []
    slot = 0
    for predicate, domain in outer.patterns:
        other, place = held[predicate]
        if type(domain) is RangeDomain:
            if type(other) is not RangeDomain:
                return None
            if other.kind != domain.kind:
                return False
            pairs.append((slot, place))
            slot += 1
        elif type(other) is RangeDomain and type(domain) is not AnyDomain:
            return None
        elif not subset(other, domain):
            return False
    found = tuple(pairs)
    return _PAIRS.setdefault(found, found)


_PAIRS: dict[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]] = {}
"""Each projection's pairs once (``projected`` keeps one per pair of families met, and a
workload of many shapes has thousands of families but some tens of distinct pairs)."""

PROJECTIONS_KEPT = 4096
"""Most projections kept in all families' ``over`` (``projected``)."""


class _Kept:
    """How many projections were kept since every family's were last forgotten (families that
    died took theirs with them: an upper bound)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


_KEPT = _Kept()


def projected(general: Signed, specific: Signed) -> Projection:
    """``projection`` of the families of ``general`` and ``specific`` (of one filter each),
    kept in ``general``'s family until ``PROJECTIONS_KEPT`` have been kept in all, when every
    family forgets them at once (a cache with an order of use cost more than the projections
    it spares). Why bounded: the listings meet some thousand pairs of families, 99% of their
    look-ups found kept; the shapes meet a pair per few tests, 71% of them once, and keeping
    every pair for as long as its family lived took 243 bytes per subscription at 10^4.

    A pair met for the first time gets None (the general test decides) and is marked
    ``MET_ONCE``; its projection is built when it is met again. Why: on shapes at 10^4, 1,000
    placements built 7,761 projections for 7,539 pairs, 7,326 of them never asked again, at
    some 8 microseconds each where the general test of one filter costs 3."""
    family, other = general.family, specific.family
    over = family.over  # type: ignore[union-attr]
    found = _UNKNOWN if over is None else over.get(other, _UNKNOWN)  # type: ignore[arg-type]
    if found is MET_ONCE:
        found = projection(general.subscription, specific.subscription)
        family.over[other] = found  # type: ignore[union-attr, index]
    elif found is _UNKNOWN:
        if _KEPT.count >= PROJECTIONS_KEPT:
            for held in list(_FAMILIES.values()):
                held.over = None
            _KEPT.count = 0
        if family.over is None:  # type: ignore[union-attr]
            family.over = {}  # type: ignore[union-attr]
        family.over[other] = MET_ONCE  # type: ignore[union-attr, index]
        _KEPT.count += 1
        return None
    return found  # type: ignore[return-value]


MET_ONCE = object()
"""What ``Family.over`` holds for a family met once (``projected``)."""

_UNKNOWN = object()


def ranges_within(
    pairs: tuple[tuple[int, int], ...],
    general: Bounds,
    general_flags: int,
    specific: Bounds,
    specific_flags: int,
) -> bool:
    """Whether, for each pair ``(i, j)`` of a ``projection``, ``general``'s ``i``-th range
    contains ``specific``'s ``j``-th: ``bounds_within`` on the two, written out (placements
    ask it tens of thousands of times a second)."""
    for i, j in pairs:
        mine, theirs = general[2 * i], specific[2 * j]
        if mine is not None:
            if theirs is None:
                return False
            if not mine < theirs and (  # type: ignore[operator]
                mine > theirs  # type: ignore[operator]
                or (not general_flags >> 2 * i & 1 and specific_flags >> 2 * j & 1)
            ):
                return False
        mine, theirs = general[2 * i + 1], specific[2 * j + 1]
        if mine is not None:
            if theirs is None:
                return False
            if not mine > theirs and (  # type: ignore[operator]
                mine < theirs  # type: ignore[operator]
                or (not general_flags >> 2 * i + 1 & 1 and specific_flags >> 2 * j + 1 & 1)
            ):
                return False
    return True


def covers_by_family(general: Signed, specific: Signed) -> bool | None:
    """True or False when the families decide, None when the general test must."""
    family = general.family
    if family is None or family is not specific.family:
        return None
    if bounds_within(general.bounds, general.flags, specific.bounds, specific.flags):
        return True
    return False if family.exact else None
