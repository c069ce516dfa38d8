"""A necessary condition for covering, one dimension at a time: a DNF subscription covers a
filter only if, on each predicate the filter has once (and on the subject), the filter's domain
lies within the union of the subscription's filters' domains there.

Why. Placing a DNF subscription tests it against tens of nodes, and most of these tests say "no";
``qel.covering.filter_covered`` says it through its corners, the search along one predicate, the
escape or the cell search, 12 to 70 microseconds a filter on the shapes workload (issue 34). Most
of those "no"s have a witness in one dimension: ``price < 3000`` is not covered by
``price > 898 ; price >= 8612``, whatever the other patterns say.

Exactness (a refutation only; a "maybe" leaves the answer to the full test). Let ``F`` be a filter
with exactly one pattern on predicate ``p``, of domain ``d``, and ``H1..Hk`` the filters of the
general subscription. A publication holding exactly one object per pattern of ``F`` (its subject
in ``F``'s subject domain; the filter is satisfiable) matches ``F``; its only ``p`` object is the
one chosen for ``d``. ``Hi`` accepts it only if that object lies in every domain ``Hi`` puts on
``p`` (their intersection, ``e_i``; a filter without a pattern on ``p`` puts no condition there).
So if some value of ``d`` is in no ``e_i``, the publication with that value matches ``F`` and no
``Hi``: the subscription does not cover ``F``. The same holds for the subject (one per
publication). Within a dimension, whether ``d`` lies within the union of the ``e_i`` is decided
exactly by ``Column.holds``: ranges of numbers or dates are dense (the union of the ranges merged
into disjoint intervals, by a sweep over their lower ends, points and open ends included, an
unbounded end as in ``qel.domains``; a range lies within the union iff within one of them), a
``contains`` domain holds strings that no single other ``contains`` domain or finitely many points
hold unless one ``contains`` domain holds it all (``qel.covering``'s argument: join its substrings
with a character no constant has, repeated as often as needed to avoid the points), a point is
within iff some ``e_i`` admits it, and "every term" never is (the ``e_i`` kept are all
constraints).
"""

from __future__ import annotations

from fractions import Fraction

from qel.domains import (
    AnyDomain,
    ContainsDomain,
    Domain,
    PointDomain,
    RangeDomain,
    intersect,
    subset,
)
from qel.filters import Filter

SUBJECT = object()
"""The key of the subject dimension in ``Columns``."""

_NOTHING: frozenset[tuple[str, object]] = frozenset()


class Column:
    """The union of the domains of one dimension (a tuple of domains, none every term, none
    empty), compiled once so that each test against it is a few comparisons: the ranges merged
    into disjoint intervals of one kind each, a value left out between any two of a kind (a
    range lies within the union of its kind's ranges iff within one merged interval: the
    intervals are connected and the values dense), the fixed values in a set, the ``contains``
    domains kept. Why: a placement tests a DNF against tens of filters, each pattern against
    the union of its domains there; swept anew per test (``subset`` calls, a sort), that was 5
    microseconds a filter on shapes, the largest block of a DNF's covering test (issue 34,
    stop 57)."""

    __slots__ = ("fixed", "spans", "texts")

    def __init__(self, held: tuple[Domain, ...]) -> None:
        ranges: list[RangeDomain] = []
        fixed: list[tuple[str, object]] = []
        texts: list[ContainsDomain] = []
        for domain in held:
            if type(domain) is RangeDomain:
                ranges.append(domain)
            elif type(domain) is PointDomain:
                fixed.append((domain.kind, domain.value))
            else:
                texts.append(domain)  # type: ignore[arg-type]  # none is every term
        self.fixed = frozenset(fixed) if fixed else _NOTHING
        self.texts = tuple(texts)
        self.spans = _merged(ranges) if len(ranges) > 1 else tuple(ranges)

    def admits(self, kind: str, value: object) -> bool:
        """Whether some domain of the union admits the value (``Domain.admits``)."""
        return (
            (kind, value) in self.fixed
            or any(span.admits(kind, value) for span in self.spans)
            or any(text.admits(kind, value) for text in self.texts)
        )

    def holds(self, inner: Domain) -> bool:
        """Whether every term of ``inner`` is in the union (its range within a merged one:
        ``subset``, inlined)."""
        if type(inner) is RangeDomain:
            low, high, kind = inner.low, inner.high, inner.kind
            if low is not None and low == high:
                return self.admits(kind, low)
            for span in self.spans:
                if span.kind != kind:
                    continue
                bound = span.low
                if bound is not None and (
                    low is None
                    or low < bound
                    or (low == bound and inner.low_inclusive and not span.low_inclusive)
                ):
                    continue
                bound = span.high
                if bound is None or (
                    high is not None
                    and (
                        high < bound
                        or (high == bound and (span.high_inclusive or not inner.high_inclusive))
                    )
                ):
                    return True
            return False
        if type(inner) is PointDomain:
            return self.admits(inner.kind, inner.value)
        if type(inner) is ContainsDomain:
            return any(subset(inner, outer) for outer in self.texts)
        return False  # every term: the union holds no fresh one


Columns = dict[object, Column]
"""Per dimension (``SUBJECT``, or the identity of a predicate: filters share one object per
predicate, ``qel.filters._interned``) that every filter of a subscription constrains, the union
of each filter's domains there for a publication with one object of that predicate, the empty
ones left out. A predicate that is not shared (past the interning bound) finds no column: no
refutation there, which is sound."""


def columns(filters: tuple[Filter, ...]) -> Columns:
    """The dimensions ``escapes`` tests a filter against: those where every one of ``filters``
    constrains the one object (a filter leaving one unconstrained there accepts every value)."""
    found: Columns = {}
    if all(type(compiled.subject) is not AnyDomain for compiled in filters):
        found[SUBJECT] = Column(tuple(compiled.subject for compiled in filters))
    first = filters[0]
    for predicate in first.predicates:
        held: list[Domain] = []
        for compiled in filters:
            domain: Domain | None = None
            seen = False
            for other, pattern_domain in compiled.patterns:
                if other is predicate:
                    domain = pattern_domain if not seen else intersect(domain, pattern_domain)
                    seen = True
            if not seen or type(domain) is AnyDomain:
                break  # unconstrained in this filter, or not on this predicate: no gap here
            if domain is not None:
                held.append(domain)
        else:
            found[id(predicate)] = Column(tuple(held))
    return found


def escapes(found: Columns, part: Filter) -> bool:
    """Whether ``part`` has a value, on its subject or on a predicate it has once, that no domain
    of ``found`` (``columns`` of a subscription's filters) holds: then that subscription does
    not cover ``part`` (module docstring)."""
    held = found.get(SUBJECT)
    if held is not None and not held.holds(part.subject):
        return True
    patterns = part.patterns
    repeated = len(patterns) != len(part.predicates)
    for position, (predicate, domain) in enumerate(patterns):
        held = found.get(id(predicate))
        if held is None:
            continue
        if repeated and repeats(patterns, position):
            continue
        if not held.holds(domain):
            return True
    return False


def repeats(patterns: tuple[tuple[object, Domain], ...], position: int) -> bool:
    """Whether the predicate at ``position`` has another pattern (sorted: a neighbour)."""
    predicate = patterns[position][0]
    return (position > 0 and patterns[position - 1][0] is predicate) or (
        position + 1 < len(patterns) and patterns[position + 1][0] is predicate
    )


def _merged(ranges: list[RangeDomain]) -> tuple[RangeDomain, ...]:
    """The union of ``ranges`` as disjoint ranges, by kind, with a value left out between each
    two of a kind, by a sweep over their lower ends: each range that starts no later than the
    first value the current one leaves out extends it to the later of the two upper ends."""
    merged: list[RangeDomain] = []
    for outer in sorted(ranges, key=_lower_end):
        last = merged[-1] if merged else None
        if last is not None and last.kind == outer.kind:
            high, low = last.high, outer.low
            if (
                high is None
                or low is None
                or low < high
                or (low == high and (last.high_inclusive or outer.low_inclusive))
            ):
                if high is not None and not _high_within(outer, last):
                    merged[-1] = RangeDomain(
                        last.kind, last.low, last.low_inclusive, outer.high, outer.high_inclusive
                    )
                continue
        merged.append(outer)
    return tuple(merged)


def _high_within(inner: RangeDomain, outer: RangeDomain) -> bool:
    high = outer.high
    if high is None:
        return True
    if inner.high is None:
        return False
    if inner.high != high:
        return inner.high < high
    return outer.high_inclusive or not inner.high_inclusive


def _lower_end(domain: RangeDomain) -> tuple[str, bool, int | Fraction, bool]:
    """By kind, then lower ends in increasing order: unbounded first, then by value, an
    included end first."""
    low = domain.low
    return (domain.kind, low is not None, 0 if low is None else low, not domain.low_inclusive)
