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
exactly by ``_within``: ranges of numbers or dates are dense (a sweep over the intervals sorted by
their lower ends, points and open ends included, an unbounded end as in ``qel.domains``), a
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

Columns = dict[object, tuple[Domain, ...]]
"""Per dimension (``SUBJECT``, or a predicate) that every filter of a subscription constrains,
each filter's domain there for a publication with one object of that predicate, the empty ones
left out."""


def columns(filters: tuple[Filter, ...]) -> Columns:
    """The dimensions ``escapes`` tests a filter against: those where every one of ``filters``
    constrains the one object (a filter leaving one unconstrained there accepts every value)."""
    found: Columns = {}
    if all(type(compiled.subject) is not AnyDomain for compiled in filters):
        found[SUBJECT] = tuple(compiled.subject for compiled in filters)
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
            found[predicate] = tuple(held)
    return found


def escapes(found: Columns, part: Filter) -> bool:
    """Whether ``part`` has a value, on its subject or on a predicate it has once, that no domain
    of ``found`` (``columns`` of a subscription's filters) holds: then that subscription does
    not cover ``part`` (module docstring)."""
    held = found.get(SUBJECT)
    if held is not None and not _within(part.subject, held):
        return True
    patterns = part.patterns
    repeated = len(patterns) != len(part.predicates)
    for position, (predicate, domain) in enumerate(patterns):
        held = found.get(predicate)
        if held is None:
            continue
        if repeated and _repeats(patterns, position):
            continue
        if not _within(domain, held):
            return True
    return False


def _repeats(patterns: tuple[tuple[object, Domain], ...], position: int) -> bool:
    """Whether the predicate at ``position`` has another pattern (sorted: a neighbour)."""
    predicate = patterns[position][0]
    return (position > 0 and patterns[position - 1][0] is predicate) or (
        position + 1 < len(patterns) and patterns[position + 1][0] is predicate
    )


def _within(inner: Domain, held: tuple[Domain, ...]) -> bool:
    """Whether every term of ``inner`` is in one of ``held`` (none of which is every term)."""
    kind = type(inner)
    if kind is AnyDomain:
        return False
    if kind is PointDomain:
        return any(outer.admits(inner.kind, inner.value) for outer in held)  # type: ignore[union-attr]
    if kind is ContainsDomain:
        return any(subset(inner, outer) for outer in held)
    assert type(inner) is RangeDomain
    if inner.is_point:
        return any(outer.admits(inner.kind, inner.low) for outer in held)
    ranges = [outer for outer in held if type(outer) is RangeDomain and outer.kind == inner.kind]
    if any(subset(inner, outer) for outer in ranges):
        return True
    return len(ranges) > 1 and _swept(inner, ranges)


def _swept(inner: RangeDomain, ranges: list[RangeDomain]) -> bool:
    """Whether the union of ``ranges`` (of ``inner``'s kind) holds all of ``inner``: from
    ``inner``'s lower end up, each range that starts no later than the first value not yet held
    carries that value to its own upper end. ``value, open``: what is still needed, the values
    above ``value`` (``open``) or from ``value`` on; ``None`` is the unbounded lower end."""
    value: int | Fraction | None = inner.low
    open_ = not inner.low_inclusive
    for outer in sorted(ranges, key=_lower_end):
        low = outer.low
        if low is not None and (
            value is None or low > value or (low == value and not outer.low_inclusive and not open_)
        ):
            return False  # it starts above what is needed, and so does every later one
        high = outer.high
        if high is None:
            return True
        if value is not None and (
            high < value or (high == value and (open_ or not outer.high_inclusive))
        ):
            continue  # it ends below what is needed
        value, open_ = high, outer.high_inclusive
        top = inner.high
        if top is not None and (
            value > top or (value == top and (open_ or not inner.high_inclusive))
        ):
            return True
    return False


def _lower_end(domain: RangeDomain) -> tuple[bool, int | Fraction, bool]:
    """Lower ends in increasing order: unbounded first, then by value, an included end first."""
    low = domain.low
    return (low is not None, 0 if low is None else low, not domain.low_inclusive)
