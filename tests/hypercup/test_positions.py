"""Bit arithmetic: the broadcast tree of every root, in every cube up to dimension 7."""

import itertools

import pytest

from hypercup import (
    hamming,
    highest_differing_bit,
    lowest_differing_bit,
    neighbour_position,
    neighbour_positions,
    next_hop_position,
    path_positions,
    top_bit,
    tree_children_positions,
    tree_parent_position,
)


@pytest.mark.parametrize("dimension", range(8))
def test_every_tree_reaches_every_position_once_at_depth_hamming(dimension: int) -> None:
    size = 1 << dimension
    for root in range(size):
        reached = {root: 0}
        frontier = [root]
        while frontier:
            position = frontier.pop()
            for child in tree_children_positions(root, position, dimension):
                assert child not in reached
                assert tree_parent_position(root, child) == position
                reached[child] = reached[position] + 1
                frontier.append(child)
        assert len(reached) == size
        assert all(depth == hamming(root, p) for p, depth in reached.items())
        assert tree_parent_position(root, root) is None


@pytest.mark.parametrize("dimension", range(1, 7))
def test_paths_follow_the_tree_of_their_start(dimension: int) -> None:
    for a in range(1 << dimension):
        for b in range(1 << dimension):
            path = path_positions(a, b)
            assert path[0] == a and path[-1] == b
            assert len(path) == hamming(a, b) + 1
            for parent, child in itertools.pairwise(path):
                assert tree_parent_position(a, child) == parent
                assert child in tree_children_positions(a, parent, dimension)


def test_neighbours_and_bits() -> None:
    assert neighbour_positions(0b101, 3) == (0b100, 0b111, 0b001)
    assert neighbour_position(0b101, 2) == 0b001
    assert highest_differing_bit(0b1000, 0b1011) == 1
    assert lowest_differing_bit(0b1000, 0b1110) == 1
    assert next_hop_position(0b000, 0b110) == 0b010
    assert top_bit(1) == 1 and top_bit(4) == 8


def test_the_root_forwards_on_every_dimension_a_leaf_on_none() -> None:
    assert tree_children_positions(0b000, 0b000, 3) == (0b001, 0b010, 0b100)
    assert tree_children_positions(0b000, 0b100, 3) == ()
    assert tree_children_positions(0b000, 0b001, 3) == (0b011, 0b101)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: highest_differing_bit(3, 3), "equal"),
        (lambda: lowest_differing_bit(3, 3), "equal"),
        (lambda: top_bit(0), "no top dimension"),
        (lambda: tree_children_positions(0, 8, 3), "outside a cube of dimension 3"),
        (lambda: tree_children_positions(0, 0, -1), "dimension is >= 0"),
    ],
)
def test_misuse_is_named(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
