"""The poset's covering test (``poset.poset.covers``, and ``_covers_compiled`` with a DNF's
columns and alternatives built once or per test) is ``qel.covers``; a subscription uses every
predicate of one it covers, which ``general_first`` relies on; ``covered_by`` finds exactly the
nodes a node covers, on every kind of small poset."""

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

import qel
from poset.poset import (
    PosetNode,
    _compiled,
    _covers_compiled,
    covers,
    general_order,
)
from tests.poset.oracle import BUDGET, grown, members, subscription_lists, templates
from tests.strategies import subscriptions


def _node(number: int, subscription: qel.Subscription) -> PosetNode:
    return PosetNode(number, subscription)


@settings(max_examples=400, deadline=None)
@given(
    subscriptions(max_patterns=3, repeat_predicates=True),
    subscriptions(max_patterns=3, repeat_predicates=True),
)
def test_the_poset_covering_test_is_qel_covers(general, specific):
    expected = qel.covers(general, specific, budget=BUDGET)
    event(f"covers: {expected}")
    assert covers(_node(1, general), _node(2, specific)) == expected
    assert _covers_compiled(general, specific, None) == expected
    assert _covers_compiled(general, specific, _compiled(general)) == expected


@settings(max_examples=300, deadline=None)
@given(subscription_lists(min_size=2, max_size=6))
def test_the_poset_covering_test_is_qel_covers_on_the_posets_drawn(drawn):
    """Nested ranges and DNFs, equivalents, alerts, the workloads: every pair."""
    for general in drawn:
        for specific in drawn:
            expected = qel.covers(general, specific, budget=BUDGET)
            assert covers(_node(1, general), _node(2, specific)) == expected
            assert _covers_compiled(general, specific, _compiled(general)) == expected
            if expected:  # what ``general_first`` relies on
                assert general.filters[0].predicates <= specific.filters[0].predicates
                assert all(f.predicates == general.filters[0].predicates for f in general.filters)


@settings(max_examples=300, deadline=None)
@given(st.data(), templates(), templates())
def test_the_poset_covering_test_is_qel_covers_on_members_of_templates(data, template, other):
    """Subscriptions that differ in their bounds alone (filters of ranges, fixed values and
    unconstrained objects, one to three alternatives), of one template or of two, both ways."""
    first = data.draw(members(template))
    second = data.draw(members(data.draw(st.sampled_from([template, other]))))
    for general, specific in ((first, second), (second, first)):
        expected = qel.covers(general, specific, budget=BUDGET)
        event(f"covers: {expected}")
        assert covers(_node(1, general), _node(2, specific)) == expected
        assert _covers_compiled(general, specific, _compiled(general)) == expected


@settings(max_examples=500, deadline=None)
@given(
    subscriptions(max_patterns=4, repeat_predicates=True, max_disjuncts=1),
    subscriptions(max_patterns=4, repeat_predicates=True, max_disjuncts=3),
)
def test_one_filter_covers_what_it_holds_a_pattern_of_each_of_its_patterns_in(general, specific):
    """Against a subscription of one filter, ``_covers_compiled`` answers by ``filter_within``
    alone, whether predicates repeat or not: the cell search of ``qel.covers`` (exact) agrees."""
    assume(len(general.filters) == 1)
    assert _covers_compiled(general, specific, None) == qel.covers(general, specific, budget=BUDGET)


@settings(max_examples=100, deadline=None)
@given(subscription_lists(max_size=14), st.data())
def test_covered_by_is_every_other_node_the_node_covers(entries, data):
    """Through insertions, sends and removals, in ``general_order``; and ``general_first`` (a
    guess at an order putting each node after those covering it) never puts a node after one it
    covers with more predicates."""
    poset, _, brute = grown(data, entries)
    order = {node.id: place for place, node in enumerate(poset.general_first())}
    for node in poset:
        found = poset.covered_by(node)
        event(f"covered: {min(len(found), 3)}")
        assert [n.id for n in found] == [n.id for n in brute.covered_by(node)]
        for other in found:
            if general_order(node)[0] < general_order(other)[0]:
                assert order[node.id] < order[other.id]
            else:
                assert (
                    node.subscription.filters[0].predicates
                    == other.subscription.filters[0].predicates
                )
