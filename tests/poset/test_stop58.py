"""Issue 34, stop 58: the witness index's sorted entries bisected by rounded values, its groups
found through their sets of predicates, and a placement's probe answering for the sent index;
each against a brute force."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset import poset as poset_module
from poset.families import signature
from poset.poset import SubscriptionPoset
from poset.witness_index import WitnessIndex, _keys_of, _PredicateWitnesses, _rounded
from qel.domains import RangeDomain
from qel.terms import KIND_DATE, KIND_NUMBER
from tests.poset.test_dominance import P, alerts
from tests.poset.test_placement import _patched
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


def _ranged(constraint: str) -> qel.Subscription:
    return qel.parse_subscription(
        "@prefix ex: <http://example.org/> .\nX : t(X, ex:p, P), t(X, ex:q, Q), " + constraint
    )


_bounds = st.integers(0, 6)
_ranged_subscriptions = st.one_of(
    st.builds(lambda a: _ranged(f"P >= {a}"), _bounds),
    st.builds(lambda a, b: _ranged(f"P >= {a}, Q <= {b}"), _bounds, _bounds),
    st.builds(lambda a, b: _ranged(f"(P >= {a} ; Q <= {b})"), _bounds, _bounds),
    st.builds(lambda a, b: _ranged(f"P > {a}, P < {a + b + 1}"), _bounds, _bounds),
)
"""Subscriptions that cover one another often (ceilings and floors, a DNF of two), so that
a new one has many ancestors, several of them sent; with the listings' alerts
(``test_dominance.alerts``), whose families the poset indexes (a placement then skips their
chains)."""


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(
                _ranged_subscriptions,
                alerts(exotic=False),
                subscriptions(max_patterns=2, max_disjuncts=3),
            ),
            st.booleans(),
        ),
        min_size=1,
        max_size=14,
    ),
    st.lists(
        st.one_of(
            _ranged_subscriptions,
            alerts(exotic=False),
            subscriptions(max_patterns=2, max_disjuncts=3),
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 4),
    st.sampled_from([0, 1, 3, 64]),
)
def test_what_was_sent_above_a_new_subscription_is_what_its_coverers_were_sent(
    placed, later, walked, read
):
    """A placement's report of what was sent above the new subscription (read from the chains
    it searched while the nodes there are at most ``_PREFIXES_READ``, else its probe answering
    for the sent index when the ancestors are more than ``_ANCESTORS_WALKED``, at any bounds):
    the union over every node that covers it, by ``qel.covers``, of what each was sent."""
    poset = SubscriptionPoset()
    with (
        _patched(poset_module, "_ANCESTORS_WALKED", walked),
        _patched(poset_module, "_PREFIXES_READ", read),
    ):
        for number, (subscription, sent) in enumerate(placed):
            node = poset.insert(subscription, "peer", str(number)).node
            if sent:
                poset.mark_sent(node, f"sp-{number % 3}", {f"origin-{number % 2}"})
        for number, subscription in enumerate(later):
            expected: dict[str, set[str]] = {}
            for node in poset:
                if node.sent and qel.covers(node.subscription, subscription):
                    for destination, labels in node.sent.items():
                        expected.setdefault(destination, set()).update(labels)
            inserted = poset.insert(subscription, "late", str(number))
            assert {d: set(labels) for d, labels in inserted.already_sent.items()} == expected


def test_what_was_sent_above_a_member_of_an_indexed_family_counts_every_member_above():
    """A member of a family the poset indexes is placed without searching the family's chains
    (the points give only its minimal members above): what was sent above it is then not read
    from the chains searched, and a member above it in another chain counts too."""
    poset = SubscriptionPoset()
    ranges = [(0, 10), (0, 9), (1, 9), (2, 8), (1, 10), (2, 9)]
    for number, (low, high) in enumerate(ranges):
        text = f"X : t(X, ex:city, ex:c1), t(X, ex:price, P), P >= {low}, P <= {high}"
        node = poset.insert(qel.parse_subscription(P + text), "peer", str(number)).node
        poset.mark_sent(node, f"sp-{number}", {"origin"})
    assert any(points.usable for points in poset._families.values())
    text = "X : t(X, ex:city, ex:c1), t(X, ex:price, P), P >= 3, P <= 7"
    inserted = poset.insert(qel.parse_subscription(P + text), "peer", "new")
    assert set(inserted.already_sent) == {f"sp-{number}" for number in range(len(ranges))}
