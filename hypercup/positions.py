"""Bit arithmetic on hypercube positions: pure functions, no state.

A position of a cube of dimension ``d`` is an int in ``[0, 2**d)``. Two positions are neighbours
when they differ in exactly one bit, and the edge between them is labelled with that bit's index,
its *dimension*.

Broadcast trees follow HyperCuP's rule: the root sends on every dimension, and a position that
received on dimension ``k`` forwards on the dimensions above ``k``. So in the tree rooted at ``r``,
position ``p`` is reached by flipping the bits of ``r ^ p`` from the lowest to the highest:

* ``p``'s parent is ``p`` with the highest bit of ``r ^ p`` flipped;
* ``p``'s depth is ``popcount(r ^ p) <= d``;
* every position is reached exactly once, so a broadcast costs ``2**d - 1`` edges.

``path_positions`` uses the same order (lowest differing bit first), so the path from ``a`` to ``b``
is the branch of ``a``'s tree that leads to ``b``.
"""

from __future__ import annotations

from collections.abc import Iterable


def check_position(position: int, dimension: int) -> None:
    """Raises ``ValueError`` unless ``position`` is a position of a ``dimension``-cube."""
    if dimension < 0:
        raise ValueError(f"a cube's dimension is >= 0, not {dimension}")
    if not 0 <= position < 1 << dimension:
        raise ValueError(f"position {position} is outside a cube of dimension {dimension}")


def top_bit(dimension: int) -> int:
    """The bit of the highest dimension (``TOP``): mirror positions ``TOP | x`` have it set."""
    if dimension < 1:
        raise ValueError(f"a cube of dimension {dimension} has no top dimension")
    return 1 << (dimension - 1)


def neighbour_position(position: int, dimension: int) -> int:
    """The neighbour of ``position`` across ``dimension``."""
    return position ^ (1 << dimension)


def neighbour_positions(position: int, dimension: int) -> tuple[int, ...]:
    """The ``dimension`` neighbours of ``position``, by increasing edge label."""
    return tuple(position ^ (1 << j) for j in range(dimension))


def surrounding_positions(positions: Iterable[int], dimension: int) -> frozenset[int]:
    """The positions adjacent to one of ``positions`` and not among them: those whose holders a
    super-peer holding ``positions`` must know."""
    held = frozenset(positions)
    return frozenset(q for p in held for q in neighbour_positions(p, dimension)) - held


def hamming(a: int, b: int) -> int:
    """The number of dimensions in which ``a`` and ``b`` differ (their distance in the cube)."""
    return (a ^ b).bit_count()


def adjacent(a: int, b: int) -> bool:
    """Whether ``a`` and ``b`` are joined by an edge."""
    return hamming(a, b) == 1


def highest_differing_bit(a: int, b: int) -> int:
    """The highest dimension in which ``a`` and ``b`` differ; ``ValueError`` if they are equal."""
    if a == b:
        raise ValueError(f"positions {a} and {b} are equal")
    return (a ^ b).bit_length() - 1


def lowest_differing_bit(a: int, b: int) -> int:
    """The lowest dimension in which ``a`` and ``b`` differ; ``ValueError`` if they are equal."""
    if a == b:
        raise ValueError(f"positions {a} and {b} are equal")
    difference = a ^ b
    return (difference & -difference).bit_length() - 1


def next_hop_position(position: int, target: int) -> int:
    """The first step from ``position`` toward ``target`` (fixing the lowest differing bit)."""
    return position ^ (1 << lowest_differing_bit(position, target))


def path_positions(a: int, b: int) -> list[int]:
    """The positions from ``a`` to ``b`` inclusive, fixing the lowest differing bit first.

    This is the branch of the broadcast tree rooted at ``a`` that reaches ``b``."""
    path = [a]
    while path[-1] != b:
        path.append(next_hop_position(path[-1], b))
    return path


def tree_received_dimension(root: int, position: int) -> int | None:
    """The dimension on which ``position`` receives in ``root``'s tree (None for the root)."""
    return None if root == position else highest_differing_bit(root, position)


def tree_parent_position(root: int, position: int) -> int | None:
    """``position``'s parent in the broadcast tree rooted at ``root`` (None for the root)."""
    received = tree_received_dimension(root, position)
    return None if received is None else position ^ (1 << received)


def tree_children_positions(root: int, position: int, dimension: int) -> tuple[int, ...]:
    """``position``'s children in ``root``'s tree: it forwards on the dimensions above the one it
    received on (on all of them if it is the root)."""
    check_position(root, dimension)
    check_position(position, dimension)
    received = tree_received_dimension(root, position)
    first = 0 if received is None else received + 1
    return tuple(position ^ (1 << j) for j in range(first, dimension))
