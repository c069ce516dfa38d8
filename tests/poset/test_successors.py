"""The successor search of a placement (``SubscriptionPoset._successors``): the walks down from the
predecessors are not taken when every predecessor has more children than the rounds they would be
given (a walk visits one node a round and finishes only after every child of its start); the
answer is the maximal nodes the probe covers (brute force), with the walks given any number of
first rounds."""

from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

import qel
from poset import poset as poset_module
from poset.chains import Probe
from poset.poset import SubscriptionPoset, _covers_signed, _Walk
from tests.poset.test_placement import _TOPS, _ranged, placed_then_removed
from workloads.shapes import Shapes

_POSETS = st.one_of(
    st.lists(st.tuples(_TOPS, st.booleans()), min_size=1, max_size=20),
    st.lists(st.tuples(_ranged(), st.booleans()), min_size=1, max_size=30),
)


@contextmanager
def _first_rounds(rounds: int):
    kept = poset_module._QUICK_WALK
    poset_module._QUICK_WALK = rounds
    try:
        yield
    finally:
        poset_module._QUICK_WALK = kept


def _strictly_covering(poset: SubscriptionPoset, probe: qel.Subscription) -> list:
    """The minimal nodes covering ``probe`` (brute force), none equivalent to it."""
    covering = [n for n in poset if qel.covers(n.subscription, probe)]
    return [
        n
        for n in covering
        if not any(o is not n and qel.covers(n.subscription, o.subscription) for o in covering)
    ]


@settings(max_examples=300, deadline=None)
@given(_POSETS, st.one_of(_TOPS, _ranged()), st.sampled_from([0, 1, 2, 8]))
def test_successors_are_the_maximal_nodes_the_probe_covers(entries, probe, rounds):
    """Whatever the first rounds of the walks (none: candidates counted at once, and the walks
    taken only if some predecessor has no more children than the rounds they would be given)."""
    poset = placed_then_removed(entries)
    predecessors = _strictly_covering(poset, probe)
    if any(qel.covers(probe, n.subscription) for n in predecessors):
        return  # an equivalent node: the placement stops before the successor search
    with _first_rounds(rounds):
        found = poset._successors(Probe(probe, _covers_signed), predecessors)
    covered = [n for n in poset if qel.covers(probe, n.subscription)]
    maximal = {
        n.id
        for n in covered
        if not any(o is not n and qel.covers(o.subscription, n.subscription) for o in covered)
    }
    assert sorted(n.id for n in found) == sorted(maximal)


@settings(max_examples=300, deadline=None)
@given(_POSETS, st.one_of(_TOPS, _ranged()))
def test_a_walk_finishes_only_after_visiting_every_child_of_its_start(entries, probe):
    """What lets ``_successors`` skip the walks: one node visited per step, each child of the
    start visited (none is reached through another: the edges are the Hasse diagram)."""
    poset = placed_then_removed(entries)
    placed = Probe(probe, _covers_signed)
    for start in poset:
        walk = _Walk(start, placed)
        steps = 1
        while not walk.step():
            steps += 1
        assert steps >= len(start.child_nodes)
        assert {n.id for n in start.child_nodes} <= walk.seen


def shapes_poset(
    seed: int, size: int, probes: int
) -> tuple[SubscriptionPoset, list[qel.Subscription]]:
    """A poset of ``size`` shapes subscriptions (``insert_many``) and ``probes`` more, unplaced."""
    shapes = Shapes(seed=seed)
    drawn = [qel.parse_subscription(shapes.subscription()) for _ in range(size + probes)]
    poset = SubscriptionPoset()
    poset.insert_many((s, "peer", str(n)) for n, s in enumerate(drawn[:size]))
    return poset, drawn[size:]


def test_successors_on_shapes_with_walks_not_taken():
    """On 1,000 shapes subscriptions (broad ones have many children), for 60 more: the maximal
    nodes covered (brute force), the walks not taken for some of them."""
    poset, probes = shapes_poset(seed=4, size=1_000, probes=60)
    nodes = list(poset)
    skipped = 0
    for probe in probes:
        covering = [n for n in nodes if qel.covers(n.subscription, probe)]
        predecessors = [
            n for n in covering if not any(c in covering for c in n.child_nodes)
        ]  # minimal: a covering node below one is below one of its children
        if any(qel.covers(probe, n.subscription) for n in predecessors):
            continue
        steps = _counting_steps()
        with steps:
            found = poset._successors(Probe(probe, _covers_signed), predecessors)
        skipped += bool(predecessors) and not steps.count
        covered = [n for n in nodes if qel.covers(probe, n.subscription)]
        maximal = [n for n in covered if not any(p in covered for p in n.parent_nodes)]
        assert sorted(n.id for n in found) == sorted(n.id for n in maximal)
    assert skipped


class _counting_steps:
    """``_Walk.step`` counted while the block runs."""

    def __init__(self) -> None:
        self.count = 0

    def __enter__(self) -> None:
        self.kept = _Walk.step

        def step(walk: _Walk) -> bool:
            self.count += 1
            return self.kept(walk)

        _Walk.step = step  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        _Walk.step = self.kept  # type: ignore[method-assign]
