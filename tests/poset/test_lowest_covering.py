"""``ChainDecomposition.lowest_covering`` refutes a node by a parent below the lowest covering node
of the parent's chain, searching the parents' chains first (``_search``): against brute force over
every chain, at every bound on that recursion, on hypothesis posets and on the shapes workload."""

from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset import chains as chains_module
from poset.chains import Probe
from poset.poset import SubscriptionPoset, _covers_signed
from tests.poset.test_placement import _TOPS, _ranged, placed_then_removed
from workloads.shapes import Shapes


@contextmanager
def _searching_at_most(depth: int):
    kept = chains_module._PARENTS_SEARCHED
    chains_module._PARENTS_SEARCHED = depth
    try:
        yield
    finally:
        chains_module._PARENTS_SEARCHED = kept


def _brute(poset: SubscriptionPoset, probe: qel.Subscription) -> list[tuple[int, int]]:
    """Per chain holding a node that covers ``probe``, by chain id, the index of the lowest."""
    return [
        (chain_id, max(i for i, n in enumerate(chain.nodes) if qel.covers(n.subscription, probe)))
        for chain_id, chain in sorted(poset._chains._chains.items())
        if qel.covers(chain.nodes[0].subscription, probe)
    ]


def _lowest(poset: SubscriptionPoset, probe: qel.Subscription) -> list[tuple[int, int]]:
    found = poset._chains.lowest_covering(Probe(probe, _covers_signed))
    return [(chain.id, index) for chain, index in found]


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.lists(st.tuples(_TOPS, st.booleans()), min_size=1, max_size=20),
        st.lists(st.tuples(_ranged(), st.booleans()), min_size=1, max_size=30),
    ),
    st.one_of(_TOPS, _ranged()),
    st.sampled_from([0, 1, 32]),
)
def test_lowest_covering_is_each_chains_lowest_covering_node(entries, probe, depth):
    """Through insertions and removals, whatever the bound on the parents' chains searched
    first (none, one level, the default): the same answer as testing every node. (Posets of
    ranges on two predicates nest and overlap: a parent that is the lowest covering node of
    its chain, taken as refuting, fails it.)"""
    poset = placed_then_removed(entries)
    with _searching_at_most(depth):
        assert _lowest(poset, probe) == _brute(poset, probe)


def test_lowest_covering_on_shapes_refutes_by_parents_and_agrees_with_brute_force():
    """On 1,000 shapes subscriptions (wide: chains of one node mostly), for 60 more: the answer
    of brute force, at every bound; and with the parents' chains searched, fewer tests (a few
    here: 246 against 242; at 10^4 a quarter)."""
    shapes = Shapes(seed=3)
    subscriptions = [qel.parse_subscription(shapes.subscription()) for _ in range(1_060)]
    poset = SubscriptionPoset()
    poset.insert_many((s, "peer", str(n)) for n, s in enumerate(subscriptions[:1_000]))
    tests = {}
    for depth in (0, 32):
        with _searching_at_most(depth):
            tests[depth] = 0
            for probe in subscriptions[1_000:]:
                placed = Probe(probe, _covers_signed)
                found = poset._chains.lowest_covering(placed)
                assert [(chain.id, index) for chain, index in found] == _brute(poset, probe)
                tests[depth] += len(placed._covered_by)
    assert tests[32] < tests[0]
