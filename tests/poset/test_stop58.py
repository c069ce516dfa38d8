"""Issue 34, stop 58: the witness index's sorted entries bisected by rounded values, its groups
found through their sets of predicates, and a placement's probe answering for the sent index;
each against a brute force."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset import poset as poset_module
from poset.poset import SubscriptionPoset
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
a new one has many ancestors, several of them sent."""


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(_ranged_subscriptions, subscriptions(max_patterns=2, max_disjuncts=3)),
            st.booleans(),
        ),
        min_size=1,
        max_size=14,
    ),
    st.lists(
        st.one_of(_ranged_subscriptions, subscriptions(max_patterns=2, max_disjuncts=3)),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 4),
)
def test_what_was_sent_above_a_new_subscription_is_what_its_coverers_were_sent(
    placed, later, walked
):
    """A placement's report of what was sent above the new subscription (its probe answering
    for the sent index when the ancestors are more than ``_ANCESTORS_WALKED``, at any bound):
    the union over every node that covers it, by ``qel.covers``, of what each was sent."""
    poset = SubscriptionPoset()
    with _patched(poset_module, "_ANCESTORS_WALKED", walked):
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
