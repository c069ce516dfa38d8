"""What a placement reports as sent above the new subscription (``SubscriptionPoset._holders``:
read from the chains it searched, from the sent index with its probe's answers, or from a few
ancestors) against brute force: what every node that covers it was sent."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset import poset as poset_module
from poset.poset import SubscriptionPoset
from tests.poset.test_dominance import P, alerts
from tests.poset.test_placement import _patched
from tests.strategies import subscriptions


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
