"""The predecessors of a placement (``poset._minimal``): among each chain's lowest node covering
the probe, the minimal ones, read from the Hasse diagram (a node is not minimal iff it is an
ancestor of another) while their ancestors are few, else decided by tests; brute force agrees at
any bound on the ancestors walked, and so does the whole diagram after placements made with the
bound at 0 (every decision by tests) or at 1 (a walk given up on as it starts)."""

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset import poset as poset_module
from poset.chains import Probe
from poset.poset import SubscriptionPoset, _covers_signed, _minimal
from tests.poset.test_placement import _TOPS, _patched, _ranged, placed_then_removed
from tests.poset.test_poset import check_invariants
from tests.poset.test_successors import _POSETS, shapes_poset


def _walking_at_most(walked: int):
    return _patched(poset_module, "_UP_SET_WALKED", walked)


def _minimal_covering(nodes: list, probe: qel.Subscription) -> list[int]:
    covering = [n for n in nodes if qel.covers(n.subscription, probe)]
    return sorted(
        n.id
        for n in covering
        if not any(o is not n and qel.covers(n.subscription, o.subscription) for o in covering)
    )


def _predecessors(poset: SubscriptionPoset, probe: qel.Subscription) -> list[int]:
    placed = Probe(probe, _covers_signed)
    lowest = [chain.nodes[i] for chain, i in poset._chains.lowest_covering(placed)]
    return sorted(n.id for n in _minimal(lowest, placed, None))


@settings(max_examples=300, deadline=None)
@given(_POSETS, st.one_of(_TOPS, _ranged()), st.sampled_from([0, 1, 2, 1024]))
def test_predecessors_are_the_minimal_nodes_covering_the_probe(entries, probe, walked):
    poset = placed_then_removed(entries)
    with _walking_at_most(walked):
        assert _predecessors(poset, probe) == _minimal_covering(list(poset), probe)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_TOPS, st.booleans()), min_size=1, max_size=14), st.sampled_from([0, 1]))
def test_the_diagram_is_the_same_when_every_predecessor_is_decided_by_tests(entries, walked):
    with _walking_at_most(walked):
        poset = placed_then_removed(entries)
    check_invariants(poset)


def test_predecessors_on_shapes_where_ancestors_run_deep():
    """On 1,500 shapes subscriptions, for 60 more (broad ones stack up: a probe's lowest
    covering nodes have ancestors of their own among them), at the default bound."""
    poset, probes = shapes_poset(seed=5, size=1_500, probes=60)
    nodes = list(poset)
    pruned = 0
    for probe in probes:
        placed = Probe(probe, _covers_signed)
        lowest = [chain.nodes[i] for chain, i in poset._chains.lowest_covering(placed)]
        found = sorted(n.id for n in _minimal(lowest, placed, None))
        assert found == _minimal_covering(nodes, probe)
        pruned += len(lowest) - len(found)
    assert pruned  # some lowest covering nodes were ancestors of others
