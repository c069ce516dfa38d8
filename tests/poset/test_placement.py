"""What the poset's placement relies on: its shortcut of ``qel.covers``, and the chain decomposition
(every node in one chain, each chain ordered by covering, ranks increasing down it), after random
insertions and removals, with the lookups that use it checked against brute force."""

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset.poset import SubscriptionPoset, _covers
from tests.strategies import subscriptions


@settings(max_examples=300)
@given(
    subscriptions(max_patterns=3, repeat_predicates=True),
    subscriptions(max_patterns=3, repeat_predicates=True),
)
def test_the_placement_covering_test_is_qel_covers(general, specific):
    assert _covers(general, specific) == qel.covers(general, specific)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(subscriptions(max_patterns=2), st.booleans()), min_size=1, max_size=16),
    subscriptions(max_patterns=2),
)
def test_chains_partition_the_nodes_in_covering_order(entries, probe):
    poset = SubscriptionPoset()
    for number, (subscription, _) in enumerate(entries):
        poset.insert(subscription, "peer", str(number))
    for number, (_, removed) in enumerate(entries):
        if removed:
            poset.remove("peer", str(number))
    chains = {id(node.chain): node.chain for node in poset}
    assert sorted(n.id for chain in chains.values() for n in chain.nodes) == [n.id for n in poset]
    for chain in chains.values():
        assert chain.ranks == sorted(set(chain.ranks))
        assert [n.rank for n in chain.nodes] == chain.ranks
        for upper, lower in zip(chain.nodes, chain.nodes[1:], strict=False):
            assert qel.covers(upper.subscription, lower.subscription)
    nodes = list(poset)
    assert [n.id for n in poset.covering(probe)] == [
        n.id for n in nodes if qel.covers(n.subscription, probe)
    ]
    assert [n.id for n in poset.covered(probe)] == [
        n.id for n in nodes if qel.covers(probe, n.subscription)
    ]
