"""The witness index against brute force: its sorted entries of numbers and dates, bisected by
their values rounded to floats first (``_rounded``), and its groups, found through their sets of
predicates (``WitnessIndex.groups``)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from poset.families import signature
from poset.witness_index import WitnessIndex, _keys_of, _PredicateWitnesses, _rounded
from qel.domains import RangeDomain
from qel.terms import KIND_DATE, KIND_NUMBER
from tests.strategies import subscriptions

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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(subscriptions(max_patterns=3), st.booleans(), st.booleans()),
        min_size=1,
        max_size=16,
    ),
    subscriptions(max_patterns=3),
    st.booleans(),
)
def test_groups_are_every_group_the_filter_may_match(steps, probe, skipping):
    """``groups`` (the groups of the sets of predicates that hold the filter's) gives the keys
    of every group ``_Group.may_hold`` keeps, tagged or not, after removals that empty groups."""
    index = WitnessIndex()
    tags = [signature(s)[0] if tagged else None for s, tagged, _ in steps]
    for key, (subscription, _, _) in enumerate(steps):
        index.add(key, subscription, tags[key])
    for key, (_, _, drop) in enumerate(steps):
        if drop:
            index.remove(key, tags[key])
    skip = signature(probe)[0] if skipping else None
    every = list(index._groups.values())
    assert sorted(len(alike) for alike in index._by_predicates.values()) == sorted(
        sum(1 for group in every if group.predicates == predicates)
        for predicates in {group.predicates for group in every}
    )
    for compiled in probe.filters:
        found = index.groups(compiled, skip)
        assert sorted(map(id, found)) == sorted(map(id, _keys_of(every, compiled, skip)))
