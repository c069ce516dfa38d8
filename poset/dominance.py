"""The members of one family as points under dominance, to find a new subscription's immediate
predecessors and successors in its family with a few array operations instead of chain searches.

Why. Within a family (``poset.families``) covering is a comparison of bounds. A family with one
varying bound (price ceilings) is a chain and a binary search places a new member. With two or
more (price ranges ``[low, high]``, the DNF alerts ``P <= a ; S >= b``, minimum rooms and
surface) the members are points under dominance: random points in two dimensions form about
``2 sqrt(n)`` chains, and the chain searches cost about a thousand covering tests per insertion
(3 to 7 ms). Here a query is one vectorised dominance test over the family's points and a few
more for the minimal (or maximal) ones, which are few (about ``ln n`` for random points).

How. A member's *generality* coordinates are its finite bounds, a lower bound negated, so that a
larger coordinate is a wider range: ``g`` covers ``s`` (same family, ``exact``) iff in every
coordinate ``g``'s value is larger, or equal with an included end wherever ``s``'s end is
included. Coordinates are float64 and exact: a bound is indexed only if ``float`` loses nothing
that can be recovered (an integer of at most 53 bits, or a decimal that ``repr`` of its float
gives back), so distinct bounds stay distinct and their order is kept (``float`` of an integer or
a ``Fraction`` is correctly rounded, hence monotone). A family with a bound that is not is
*abandoned*: its members are placed by the chain searches, as every family was before.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from poset.families import Bounds

Point = tuple[tuple[float, ...], tuple[int, ...]]
"""Generality coordinates and, per coordinate, 1 for an included end."""

_EXACT_INTEGER = 2**53

PAIRS_AS_COMPLEX: Final = 192
"""From how many points ``_pair_order`` sorts complex numbers: where its one sort overtakes
lexsort's two on this machine (1.1x lexsort's time at 128 points, 0.7x at 256, 0.2x at 3,000)."""


class Member(Protocol):
    """A poset node as the index holds it: its position in the arrays."""

    slot: int


def point(bounds: Bounds, flags: int) -> Point | None:
    """The generality coordinates of a family member, or None if a bound is not exactly a float.

    Positions alternate low, high; ``None`` (an open end) has no coordinate, which is the same
    for every member of a family (``poset.families`` keys families by the open ends)."""
    coordinates: list[float] = []
    included: list[int] = []
    for position, bound in enumerate(bounds):
        if bound is None:
            continue
        value = _exact_float(bound)
        if value is None:
            return None
        coordinates.append(value if position & 1 else -value)
        included.append(flags >> position & 1)
    return tuple(coordinates), tuple(included)


def _exact_float(bound: object) -> float | None:
    """``float(bound)`` when ``bound`` can be recovered from it (so that no two distinct bounds
    share a float), else None."""
    if type(bound) is int:
        return float(bound) if -_EXACT_INTEGER <= bound <= _EXACT_INTEGER else None
    if type(bound) is Fraction:
        value = float(bound)
        return value if Fraction(repr(value)) == bound else None
    return None


class FamilyPoints:
    """The members of one family with their points, in growable arrays, one column per member
    and one row per coordinate (a query compares a whole coordinate at a time: contiguous).

    ``usable`` is False once a member had no exact point: the family is then placed by the chain
    searches and the arrays are dropped; ``members`` still counts every member, so that the poset
    knows when the family is gone."""

    __slots__ = ("_coordinates", "_included", "_nodes", "members", "usable")

    def __init__(self, dimensions: int) -> None:
        # Room for one member, doubled as more come: most families of a workload of many
        # shapes never have a second (on shapes at 10^4, room for eight took some 100 bytes per
        # subscription).
        self._coordinates: npt.NDArray[np.float64] = np.empty((dimensions, 1))
        self._included: npt.NDArray[np.int8] = np.empty((dimensions, 1), dtype=np.int8)
        self._nodes: list[Member] = []
        self.members = 0
        self.usable = True

    def add(self, node: Member, at: Point | None) -> None:
        """Takes a new member; one without a point abandons the family."""
        self.members += 1
        if not self.usable:
            return
        if at is None:
            self.usable = False
            self._nodes = []
            self._coordinates = self._included = np.empty((0, 0))
            return
        column = len(self._nodes)
        if column == self._coordinates.shape[1]:
            self._coordinates = np.concatenate(
                [self._coordinates, np.empty_like(self._coordinates)], axis=1
            )
            self._included = np.concatenate([self._included, np.empty_like(self._included)], axis=1)
        self._coordinates[:, column] = at[0]
        self._included[:, column] = at[1]
        self._nodes.append(node)
        node.slot = column

    def remove(self, node: Member) -> None:
        """Drops a member; the last column moves into its place."""
        self.members -= 1
        if not self.usable:
            return
        column, last = node.slot, len(self._nodes) - 1
        moved = self._nodes.pop()
        if column != last:
            self._nodes[column] = moved
            moved.slot = column
            self._coordinates[:, column] = self._coordinates[:, last]
            self._included[:, column] = self._included[:, last]
        node.slot = -1

    def above(self, at: Point) -> list[Member]:
        """The minimal members that cover the point (itself, if a member is at it)."""
        return self._extremes(at, 1)

    def below(self, at: Point) -> list[Member]:
        """The maximal members that the point covers (itself, if a member is at it)."""
        return self._extremes(at, -1)

    def _extremes(self, at: Point, sign: int) -> list[Member]:
        """``above`` (``sign`` 1) or ``below`` (-1, the mirror image: every coordinate and flag
        negated, which only the few points selected pay for)."""
        count = len(self._nodes)
        coordinates, included = self._coordinates[:, :count], self._included[:, :count]
        rows = np.flatnonzero(_selected(coordinates, included, at, sign))
        if sign < 0:
            chosen, flags = -coordinates[:, rows].T, -included[:, rows].T
        else:
            chosen, flags = coordinates[:, rows].T, included[:, rows].T
        return [self._nodes[row] for row in _minima(chosen, flags, rows)]


def _selected(
    coordinates: npt.NDArray[np.float64], included: npt.NDArray[np.int8], at: Point, sign: int
) -> npt.NDArray[np.bool_]:
    """Per member, whether it covers the point (``sign`` 1) or the point covers it (-1): in
    every coordinate strictly beyond it, or equal with an end included wherever the other's
    is. One comparison per coordinate when the point's end makes the flag irrelevant (an
    excluded end of the point above, an included one below)."""
    selected: npt.NDArray[np.bool_] | None = None
    for values, flags, wanted, flag in zip(coordinates, included, at[0], at[1], strict=True):
        if sign > 0:
            test = (
                values >= wanted
                if not flag
                else (values > wanted) | ((values == wanted) & (flags == 1))
            )
        else:
            test = (
                values <= wanted
                if flag
                else (values < wanted) | ((values == wanted) & (flags == 0))
            )
        if selected is None:
            selected = test
        else:
            selected &= test
    assert selected is not None, "a point has at least one coordinate"
    return selected


def _dominating(
    coordinates: npt.NDArray[np.float64],
    included: npt.NDArray[np.int8],
    wanted: npt.NDArray[np.float64],
    flags: npt.NDArray[np.int8],
) -> npt.NDArray[np.bool_]:
    """Per row, whether it covers ``(wanted, flags)``: every coordinate larger, or equal with an
    end included wherever the other's is."""
    return ((coordinates > wanted) | ((coordinates == wanted) & (included >= flags))).all(axis=1)


def _minima(
    coordinates: npt.NDArray[np.float64],
    included: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
) -> list[int]:
    """The rows (of ``rows``, whose points are ``coordinates``, ``included``) that cover no
    other: in one or two dimensions a sweep (``_staircase``); else repeatedly the smallest
    coordinate sum (no point strictly under it has a larger one), walked down while some point
    lies strictly under it, then every point over it dropped."""
    if coordinates.shape[1] <= 2:
        return _staircase(coordinates, included, rows)
    found: list[int] = []
    sums = coordinates.sum(axis=1)
    while len(rows):
        best = int(np.argmin(sums))
        while True:
            under = _dominating(-coordinates, -included, -coordinates[best], -included[best])
            under &= ~((coordinates == coordinates[best]) & (included == included[best])).all(
                axis=1
            )
            if not under.any():
                break
            candidates = np.flatnonzero(under)
            best = int(candidates[np.argmin(sums[candidates])])
        found.append(int(rows[best]))
        keep = ~_dominating(coordinates, included, coordinates[best], included[best])
        coordinates, included, rows, sums = (
            coordinates[keep],
            included[keep],
            rows[keep],
            sums[keep],
        )
    return found


def _staircase(
    coordinates: npt.NDArray[np.float64],
    included: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
) -> list[int]:
    """``_minima`` of distinct points in one or two dimensions with a constant number of array
    operations (a sort or two) instead of a few per minimum, each over every point (the loop of
    ``_minima`` was two thirds of a query). A coordinate and its flag compare as a pair, value
    first (covering, per coordinate, is exactly that order): where the points' flags of a
    coordinate are all the same (all ends included, as people write them) the values alone
    compare so, else each pair is replaced by its rank. Sorted by the first pair, then the
    second, a point covers an earlier one iff its second is not below every earlier one's (an
    equal first pair sorts the smaller second first; distinct points never tie in both); the
    others are the minima. They are given nearest first (smallest coordinate sum), as the loop
    of ``_minima`` finds them: the poset puts a new member into the chain of the first one
    that is a chain's bottom, and the nearest keeps chains few (the farthest first made half
    as many chains again at 10^4)."""
    if not len(rows):
        return []
    first, first_flags = coordinates[:, 0], included[:, 0]
    if coordinates.shape[1] == 1:
        second: npt.NDArray[np.float64] | npt.NDArray[np.intp] = np.zeros(len(rows))
    else:
        second, second_flags = coordinates[:, 1], included[:, 1]
        if second_flags.min() != second_flags.max():
            second = _ranks(second, second_flags)
    if first_flags.min() == first_flags.max():
        order = _pair_order(first, second)
    else:
        order = np.lexsort((second, first_flags, first))
    ranked = second[order]
    keep = np.empty(len(ranked), dtype=np.bool_)
    keep[0] = True
    np.less(ranked[1:], np.minimum.accumulate(ranked)[:-1], out=keep[1:])
    found = order[keep]
    nearest = np.argsort(coordinates[found].sum(axis=1), kind="stable")
    return rows[found[nearest]].tolist()  # type: ignore[no-any-return]


def _pair_order(
    first: npt.NDArray[np.float64], second: npt.NDArray[np.float64] | npt.NDArray[np.intp]
) -> npt.NDArray[np.intp]:
    """``np.lexsort((second, first))`` for distinct pairs: from ``PAIRS_AS_COMPLEX`` points up,
    one sort of complex numbers, which numpy orders by real part, then imaginary part (the
    sort of a narrow alert's thousands of dominating points was a seventh of an insertion at
    10^5; lexsort sorts twice, stably). Distinct pairs do not tie, so stability is moot."""
    if len(first) < PAIRS_AS_COMPLEX:
        return np.lexsort((second, first))
    pairs = np.empty(len(first), dtype=np.complex128)
    pairs.real = first
    pairs.imag = second
    return np.argsort(pairs)


def _ranks(values: npt.NDArray[np.float64], included: npt.NDArray[np.int8]) -> npt.NDArray[np.intp]:
    """Per point, the dense rank of its ``(value, included)`` pair in their order."""
    order = np.lexsort((included, values))
    ordered, flags = values[order], included[order]
    step = np.empty(len(order), dtype=np.intp)
    step[0] = 0
    step[1:] = (ordered[1:] != ordered[:-1]) | (flags[1:] != flags[:-1])
    ranks = np.empty_like(step)
    ranks[order] = np.cumsum(step)
    return ranks
