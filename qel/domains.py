"""Value domains: the set of RDF terms a variable may take under a conjunction of atomic constraints.

Every atomic constraint of the language names one variable (``X = c``, ``X < n``, ``X contains s``),
so inside one disjunct of a DNF the variables are independent and the constraints on one variable
collapse into one domain. A domain is one of:

* ``ANY``: no constraint, every term;
* ``PointDomain(term)``: exactly one value (``X = uri``, ``X = "s"``, ``X = other-literal``);
  for strings the language tag is ignored, for numbers and dates the value is compared, not the
  lexical form;
* ``RangeDomain``: numbers or dates between two bounds, either end open or unbounded;
* ``ContainsDomain``: string literals containing every one of a set of substrings;
* ``None`` stands for the empty domain (an unsatisfiable conjunction).

Numbers and dates are taken as dense (any rational number of seconds, any decimal): that is what the
XSD value spaces allow, and it keeps covering sound (a gap we cannot see is a value that could arrive).
An unbounded numeric end includes the infinities of ``xsd:double``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

from qel.terms import (
    KIND_DATE,
    KIND_NUMBER,
    KIND_STRING,
    Literal,
    Term,
    instant_literal,
    number,
)

Value = object


@dataclass(frozen=True, slots=True)
class AnyDomain:
    """Every term."""

    def admits(self, kind: str, value: Value) -> bool:
        return True


ANY: Final = AnyDomain()


@dataclass(frozen=True, slots=True)
class PointDomain:
    """Exactly one value: ``kind`` and ``value`` as in ``qel.terms``; ``term`` is how it was written."""

    kind: str
    value: Value
    term: Term = field(compare=False)

    def admits(self, kind: str, value: Value) -> bool:
        return kind == self.kind and value == self.value


@dataclass(frozen=True, slots=True)
class RangeDomain:
    """Numbers or dates (``kind``) between ``low`` and ``high``; ``None`` is an unbounded end."""

    kind: str
    low: int | Fraction | None = None
    low_inclusive: bool = False
    high: int | Fraction | None = None
    high_inclusive: bool = False

    def admits(self, kind: str, value: Value) -> bool:
        if kind != self.kind:
            return False
        # Written so that NaN, which compares false with everything, is outside every bound.
        low, high = self.low, self.high
        if low is not None and not (value > low or (self.low_inclusive and value == low)):  # type: ignore[operator]
            return False
        return high is None or value < high or (self.high_inclusive and value == high)  # type: ignore[operator]

    @property
    def is_point(self) -> bool:
        return self.low is not None and self.low == self.high


@dataclass(frozen=True, slots=True)
class ContainsDomain:
    """String literals containing each of ``substrings`` (no element is a substring of another)."""

    substrings: tuple[str, ...]

    def admits(self, kind: str, value: Value) -> bool:
        if kind != KIND_STRING:
            return False
        return all(part in value for part in self.substrings)  # type: ignore[operator]


Domain = AnyDomain | PointDomain | RangeDomain | ContainsDomain


def point(term: Term) -> Domain:
    """The domain ``X = term``: value equality, so ``2004`` and ``2004.0`` are the same point."""
    if term.kind in (KIND_NUMBER, KIND_DATE):
        value = term.value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"{term.lexical!r} is not a finite number")
            value = Fraction(value)
        return range_point(term.kind, value)
    return PointDomain(term.kind, term.value, term)


def range_point(kind: str, value: int | Fraction) -> Domain:
    return RangeDomain(kind, value, True, value, True)


def contains(*substrings: str) -> Domain:
    return _contains_normalised(frozenset(substrings))


def _contains_normalised(parts: frozenset[str]) -> ContainsDomain:
    kept = sorted(
        part
        for part in parts
        if part and not any(part != other and part in other for other in parts)
    )
    return ContainsDomain(tuple(kept))


def intersect(first: Domain | None, second: Domain | None) -> Domain | None:
    """The domain of values in both, or None when no term is in both."""
    if first is None or second is None:
        return None
    if isinstance(first, AnyDomain):
        return second
    if isinstance(second, AnyDomain):
        return first
    if isinstance(first, PointDomain):
        return _point_in(first, second)
    if isinstance(second, PointDomain):
        return _point_in(second, first)
    if isinstance(first, RangeDomain) and isinstance(second, RangeDomain):
        return _intersect_ranges(first, second)
    if isinstance(first, ContainsDomain) and isinstance(second, ContainsDomain):
        return _contains_normalised(frozenset(first.substrings) | frozenset(second.substrings))
    return None


def _point_in(single: PointDomain, other: Domain) -> Domain | None:
    if isinstance(other, PointDomain):
        return single if (single.kind, single.value) == (other.kind, other.value) else None
    return single if other.admits(single.kind, single.value) else None


def _intersect_ranges(first: RangeDomain, second: RangeDomain) -> Domain | None:
    if first.kind != second.kind:
        return None
    low, low_inclusive = _tighter_low(
        (first.low, first.low_inclusive), (second.low, second.low_inclusive)
    )
    high, high_inclusive = _tighter_high(
        (first.high, first.high_inclusive), (second.high, second.high_inclusive)
    )
    result = RangeDomain(first.kind, low, low_inclusive, high, high_inclusive)
    return result if range_is_satisfiable(result) else None


def _tighter_low(
    first: tuple[int | Fraction | None, bool], second: tuple[int | Fraction | None, bool]
) -> tuple[int | Fraction | None, bool]:
    if first[0] is None:
        return second
    if second[0] is None:
        return first
    if first[0] != second[0]:
        return first if first[0] > second[0] else second
    return first[0], first[1] and second[1]


def _tighter_high(
    first: tuple[int | Fraction | None, bool], second: tuple[int | Fraction | None, bool]
) -> tuple[int | Fraction | None, bool]:
    if first[0] is None:
        return second
    if second[0] is None:
        return first
    if first[0] != second[0]:
        return first if first[0] < second[0] else second
    return first[0], first[1] and second[1]


def range_is_satisfiable(domain: RangeDomain) -> bool:
    if domain.low is None or domain.high is None:
        return True
    if domain.low < domain.high:
        return True
    return domain.low == domain.high and domain.low_inclusive and domain.high_inclusive


def subset(inner: Domain, outer: Domain) -> bool:
    """Whether every term of ``inner`` is in ``outer`` (exact for these domains).

    By exact type (no domain class has subclasses) and with two ranges compared inline: a
    placement into the subscription poset asks this some hundred times (``filter_within``, the
    proofs of ``poset.ends``), and the ``isinstance`` chain, the ``is_point`` property and the
    two calls per pair of ranges were a fifth of its cost (issue 34, stop 60)."""
    outer_type = type(outer)
    if outer_type is AnyDomain:
        return True
    inner_type = type(inner)
    if inner_type is RangeDomain:
        low, high = inner.low, inner.high
        if low is not None and low == high:
            return outer.admits(inner.kind, low)
        if outer_type is not RangeDomain or outer.kind != inner.kind:
            return False
        bound = outer.low
        if bound is not None:
            if low is None:
                return False
            if low != bound:
                if low < bound:
                    return False
            elif inner.low_inclusive and not outer.low_inclusive:
                return False
        bound = outer.high
        if bound is None:
            return True
        if high is None:
            return False
        if high != bound:
            return high < bound
        return outer.high_inclusive or not inner.high_inclusive
    if inner_type is PointDomain:
        return outer.admits(inner.kind, inner.value)
    if inner_type is ContainsDomain and outer_type is ContainsDomain:
        return all(any(part in held for held in inner.substrings) for part in outer.substrings)
    return False


def overlaps(first: Domain, second: Domain) -> bool:
    return intersect(first, second) is not None


def witness(domain: Domain) -> Term | None:
    """A term of the domain, to build example publications (None for ANY: the caller chooses)."""
    if isinstance(domain, PointDomain):
        return domain.term
    if isinstance(domain, ContainsDomain):
        return Literal(" ".join(domain.substrings))
    if isinstance(domain, RangeDomain):
        value = range_sample(domain)
        if domain.kind == KIND_NUMBER:
            return number(value)
        return instant_literal(value)
    return None


def range_sample(domain: RangeDomain) -> int | Fraction:
    """Some value inside a satisfiable range."""
    low, high = domain.low, domain.high
    if low is not None and high is not None:
        if low == high:
            return low
        return Fraction(low + high, 2)
    if low is not None:
        return low if domain.low_inclusive else low + 1
    if high is not None:
        return high if domain.high_inclusive else high - 1
    return 0


__all__ = [
    "ANY",
    "AnyDomain",
    "ContainsDomain",
    "Domain",
    "PointDomain",
    "RangeDomain",
    "contains",
    "intersect",
    "overlaps",
    "point",
    "range_point",
    "subset",
    "witness",
]
