"""The previous poset's witness index (``bench.witness_index``) against brute force: its candidates are the keys
whose witness the probe matches, through additions and removals; a ``contains`` look-up, ranges
at the witnesses' own values; the sorted
entries of numbers and dates, bisected by their values rounded to floats first (``_rounded``)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from bench import witness_index as witness_module
from bench.witness_index import WitnessIndex, _PredicateWitnesses, _rounded
from qel.domains import ContainsDomain, RangeDomain
from qel.filters import witness
from qel.matching import filter_matches
from qel.terms import KIND_DATE, KIND_NUMBER
from tests.poset.oracle import dnf_ranges
from tests.strategies import subscriptions

_probes = st.one_of(subscriptions(max_patterns=3, repeat_predicates=True), dnf_ranges())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_probes, min_size=1, max_size=12),
    st.sets(st.integers(0, 11)),
    _probes,
)
def test_witness_index_candidates_are_the_witnesses_the_probe_matches(entries, gone, probe):
    """After additions and removals: the candidates are the keys whose first filter's witness
    the probe matches (among them every key whose subscription it covers), the witness kept
    for a key matches as that witness does, and each predicate counts its strings."""
    index = WitnessIndex()
    for key, subscription in enumerate(entries):
        index.add(key, subscription)
    for key in gone:
        if key < len(entries):
            index.remove(key)
    live = {k: s for k, s in enumerate(entries) if k not in gone}
    assert len(index) == len(live)
    expected = {k for k, s in live.items() if qel.matches(probe, witness(s.filters[0]))}
    assert index.covered_candidates(probe) == expected
    assert expected >= {k for k, s in live.items() if qel.covers(probe, s)}
    for key, subscription in live.items():
        for compiled in probe.filters:
            assert filter_matches(compiled, index.witness(key)) == filter_matches(  # type: ignore[arg-type]
                compiled, witness(subscription.filters[0])
            )
    strings: dict = {}  # what a ``contains`` look-up counts (``size``): the live strings
    for subscription in live.values():
        for predicate, objects in witness(subscription.filters[0]).values.items():
            distinct = {(kind, value) for kind, value in objects if kind == "string"}
            strings[predicate] = strings.get(predicate, 0) + len(distinct)
    assert {p: held.strings for p, held in index._predicates.items()} == {
        p: strings.get(p, 0) for p in index._predicates
    }
    for key in live:
        index.remove(key)
    assert len(index) == 0 and index._predicates == {}, "nothing left once every key went"


def test_a_key_is_indexed_once():
    index = WitnessIndex()
    subscription = qel.parse_subscription("X : t(X, dc:title, T)")
    index.add(1, subscription)
    with pytest.raises(KeyError, match="1 is already indexed"):
        index.add(1, subscription)
    index.remove(1)
    index.add(1, subscription)
    assert len(index) == 1


@settings(max_examples=300)
@given(
    st.lists(st.tuples(st.sampled_from(["string", "uri"]), st.text("abc", max_size=4))),
    st.lists(st.text("abc", min_size=1, max_size=2), max_size=3),
)
def test_a_contains_look_up_gives_the_strings_that_hold_every_substring(objects, parts):
    """The scan of one predicate's strings for a ``contains`` (one substring written out,
    several, none) gives the keys ``admits`` gives."""
    held = witness_module._PredicateWitnesses()
    for key, (kind, value) in enumerate(objects):
        held.add(key, kind, value)
    domain = ContainsDomain(tuple(sorted(set(parts))))
    expected = sorted(k for k, (kind, value) in enumerate(objects) if domain.admits(kind, value))
    assert sorted(held.candidates(domain)) == expected


def test_witness_index_ranges_at_the_witnesses_own_values():
    def sub(constraint: str) -> qel.Subscription:
        return qel.parse_subscription(
            f"@prefix ex: <http://example.org/> .\nX : t(X, ex:p, P), {constraint}"
        )

    stored = ["P >= 2", "P <= 2", "P = 2", "P >= 1", "P <= 3", "P > 1, P < 3"]
    index = WitnessIndex()
    for key, constraint in enumerate(stored):
        index.add(key, sub(constraint))
    for constraint in ["P > 2", "P < 2", "P >= 2", "P <= 2", "P > 1", "P < 3", "P >= 1, P <= 3"]:
        probe = sub(constraint)
        expected = {
            key
            for key, text in enumerate(stored)
            if qel.matches(probe, witness(sub(text).filters[0]))
        }
        assert index.covered_candidates(probe) == expected, constraint


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
