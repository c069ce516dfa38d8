"""Snapshots of the cube: the shape's invariants, the trees, and the local form of the trees."""

import itertools

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypercup import LocalView, Topology, TopologyError
from hypercup.testing import canonical_topology
from tests.hypercup.invariants import assert_cube


def ids(n: int) -> list[str]:
    return [f"s{i:03}" for i in range(n)]


@pytest.mark.parametrize("n", range(1, 130))
def test_the_shape_for_every_size(n: int) -> None:
    assert_cube(canonical_topology(ids(n)), roots=None if n <= 48 else 12, diameter=n <= 64)


@pytest.mark.parametrize("n", [255, 256, 257, 300])
def test_the_shape_beyond(n: int) -> None:
    assert_cube(canonical_topology(ids(n)), roots=8)


def test_a_doubled_node_is_entered_once_and_its_mirror_costs_nothing() -> None:
    topology = canonical_topology(ids(3))  # d = 2: column 0 split (s002 holds 2), s001 holds 1, 3
    assert topology.positions("s001") == {1, 3} and topology.positions("s002") == {2}
    assert topology.broadcast("s001") == [("s001", "s000"), ("s000", "s002")]
    assert topology.broadcast("s002") == [("s002", "s000"), ("s002", "s001")]
    assert topology.entry_position("s002", "s001") == 3
    assert topology.children("s002", "s001") == ()
    assert topology.path("s001", "s002") == ["s001", "s000", "s002"]
    assert topology.depth("s001", "s002") == 2 and topology.distance("s001", "s002") == 1


def test_distance_is_the_graph_distance_and_at_most_one_hop_shorter_than_the_tree() -> None:
    for n in (3, 6, 11, 24, 40):
        topology = canonical_topology(ids(n))
        lengths = dict(nx.all_pairs_shortest_path_length(topology.graph()))
        for a in topology.nodes:
            for b in topology.nodes:
                assert topology.distance(a, b) == lengths[a][b] == topology.distance(b, a)
                assert 0 <= topology.depth(a, b) - topology.distance(a, b) <= 1
                path = topology.path(a, b)
                assert path[0] == a and path[-1] == b
                assert all(y in topology.neighbours(x) for x, y in itertools.pairwise(path))


def test_check_names_the_broken_invariant() -> None:
    # d = 3: base 0..3 held by a, b, c, d; column 1 split (e holds 5), column 0 doubled.
    with pytest.raises(TopologyError, match="prefix order: 1 are split, but column 0"):
        Topology(dimension=3, holders=["a", "b", "c", "d", "a", "e", "c", "d"]).check()
    with pytest.raises(TopologyError, match="not one position or a pair"):
        Topology(dimension=2, holders=["a", "a", "b", "b"])
    with pytest.raises(TopologyError, match="not one position or a pair"):
        Topology(dimension=3, holders=["a", "a", "b", "c", "a", "a", "d", "e"])


def test_snapshots_refuse_impossible_holdings() -> None:
    with pytest.raises(TopologyError, match="has 4 positions, 3 holders"):
        Topology(dimension=2, holders=["a", "b", "c"])
    with pytest.raises(TopologyError, match="not one position or a pair"):
        Topology(dimension=2, holders=["a", "a", "b", "c"])  # 0 and 1 differ in dimension 0
    with pytest.raises(TopologyError, match="held by both"):
        Topology.from_positions(dimension=1, positions={"a": [0, 1], "b": [1]})
    with pytest.raises(TopologyError, match=r"without a holder \[1\]"):
        Topology.from_positions(dimension=1, positions={"a": [0]})
    with pytest.raises(KeyError, match="not a super-peer"):
        canonical_topology(ids(2)).positions("nobody")


def test_local_views_validate_themselves() -> None:
    with pytest.raises(ValueError, match="the neighbours of"):
        LocalView(node_id="a", dimension=2, positions=frozenset({0}), table={1: "b"})
    with pytest.raises(ValueError, match="itself"):
        LocalView(node_id="a", dimension=1, positions=frozenset({0}), table={1: "a"})
    with pytest.raises(ValueError, match="pair differing"):
        LocalView(node_id="a", dimension=2, positions=frozenset({0, 1}), table={2: "b", 3: "c"})
    view = canonical_topology(ids(4)).local_view("s000")
    with pytest.raises(ValueError, match="does not know position 3"):
        view.holder(3)
    assert view.root_position == 0
    assert view.neighbours() == {"s001", "s002"}


@given(
    n=st.integers(1, 90),
    order=st.randoms(use_true_random=False),
    data=st.data(),
)
def test_local_answers_equal_global_answers(n: int, order, data) -> None:
    names = ids(n)
    order.shuffle(names)
    topology = canonical_topology(names)
    root = data.draw(st.sampled_from(names))
    node = data.draw(st.sampled_from(names))
    view = topology.local_view(node)
    root_position = topology.root_position(root)
    assert view.parent(root_position) == topology.parent(root, node)
    assert view.children(root_position) == topology.children(root, node)
    assert view.entry_position(root_position) == topology.entry_position(root, node)
    for position in range(1 << topology.dimension):
        assert view.parent(position) in {None, *view.neighbours()}
