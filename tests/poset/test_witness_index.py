"""The witness index's sorted entries of numbers and dates, bisected by their values rounded to
floats first (``_rounded``), against brute force."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from poset.witness_index import _PredicateWitnesses, _rounded
from qel.domains import RangeDomain
from qel.terms import KIND_DATE, KIND_NUMBER

_EDGE = 2**53
_HUGE = 10**400  # past the largest float

_integers = st.one_of(
    st.integers(-3, 3),
    st.integers(_EDGE - 3, _EDGE + 9),
    st.integers(4 * _EDGE - 3, 4 * _EDGE + 9),
    st.sampled_from([_HUGE, _HUGE + 1, -_HUGE]),
)
"""Small integers, and integers about where floats stop holding every integer (spacing 2,
then 4: an integer there lies between two floats, a fraction near it may round below it)."""

_values = st.one_of(
    _integers,
    st.builds(Fraction, _integers, st.sampled_from([1, 2, 3, 4, 10, 7])),
    st.builds(lambda n: n + Fraction(1, 10**30), _integers),
)
"""Numbers as witnesses and bounds hold them: ints, and fractions (a denominator of 1 too,
as ``qel.domains.range_sample`` leaves some), some a hair above an integer."""


@st.composite
def _ranges(draw: st.DrawFn) -> RangeDomain:
    low = draw(st.none() | _values)
    high = draw(st.none() | _values)
    if low is not None and high is not None and high < low:
        low, high = high, low
    return RangeDomain(
        draw(st.sampled_from([KIND_NUMBER, KIND_DATE])),
        low,
        draw(st.booleans()),
        high,
        draw(st.booleans()),
    )


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([KIND_NUMBER, KIND_DATE]), _values), max_size=30),
    st.sets(st.integers(0, 29)),
    st.lists(_ranges(), min_size=1, max_size=6),
)
def test_sorted_entries_answer_ranges_and_points_as_admits(entries, gone, ranges):
    """Numbers and dates bisected by rounded value then value (``_rounded``): the candidates
    and the count of a range, of a point, are the keys whose value it admits, after removals
    too, for integers and fractions about 2^53, 2^55 and past the largest float."""
    held = _PredicateWitnesses()
    for key, (kind, value) in enumerate(entries):
        held.add(key, kind, value)
    live = dict(enumerate(entries))
    for key in gone:
        if key in live:
            held.remove(key, *live.pop(key))
    points = [RangeDomain(kind, value, True, value, True) for kind, value in entries[:6]]
    for domain in ranges + points:
        expected = sorted(k for k, (kind, value) in live.items() if domain.admits(kind, value))
        assert sorted(held.candidates(domain)) == expected
        assert held.size(domain) == len(expected)


@given(_values, _values)
def test_rounding_keeps_the_order_of_values(first, second):
    if first < second:
        assert _rounded(first) <= _rounded(second)
    if first == second:
        assert _rounded(first) == _rounded(second)
