"""The properties the issue asks of every cube, checked on a global snapshot.

``assert_cube`` checks through the package's own API (``Topology``, ``LocalView``) for a sample of
roots, and through ``assert_every_tree``, an independent vectorised oracle built from the tree's
definition alone (a position's parent flips the highest bit in which it differs from the root), for
every root."""

from __future__ import annotations

import math
from collections import Counter

import networkx as nx
import numpy as np

from hypercup import Topology


def ceil_log2(n: int) -> int:
    return 0 if n == 1 else math.ceil(math.log2(n))


def assert_every_tree(topology: Topology) -> None:
    """From every root, every super-peer is entered by exactly one wire message (so N-1 in all)
    and is at most ceil(log2 N) wire hops away."""
    nodes = sorted(topology.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    size = 1 << topology.dimension
    positions = np.arange(size)
    holders = np.array([index[topology.holder(p)] for p in range(size)])
    roots = np.array([min(topology.positions(node)) for node in nodes])
    difference = roots[:, None] ^ positions[None, :]
    bit_length = np.array([p.bit_length() for p in range(size)])
    popcount = np.array([p.bit_count() for p in range(size)])
    parent = np.where(
        difference > 0, positions ^ (1 << np.maximum(bit_length[difference] - 1, 0)), positions
    )
    wire = holders[parent] != holders[positions][None, :]
    receivers = np.broadcast_to(holders, wire.shape)[wire]
    rows = np.broadcast_to(np.arange(len(nodes))[:, None], wire.shape)[wire]
    entries = np.zeros((len(nodes), len(nodes)), dtype=int)
    np.add.at(entries, (rows, receivers), 1)
    assert (entries == 1 - np.eye(len(nodes), dtype=int)).all()
    depth = np.zeros(wire.shape, dtype=int)
    for level in range(1, topology.dimension + 1):
        at_level = popcount[difference] == level
        inherited = np.take_along_axis(depth, parent, axis=1) + wire
        depth = np.where(at_level, inherited, depth)
    assert depth.max(initial=0) <= ceil_log2(len(nodes))


def assert_cube(topology: Topology, *, roots: int | None = None, diameter: bool = True) -> None:
    """One holder per position and at most two positions per super-peer; tables symmetric and
    matching the positions; the graph connected, with diameter <= ceil(log2 N) (networkx's
    all-pairs computation when ``diameter``; in any case every eccentricity is bounded by the tree
    depths ``assert_every_tree`` checks, since tree paths are paths of the graph); every tree as in
    ``assert_every_tree``; and from every root (or ``roots`` of them, spread out) the package's
    broadcast, parents, children and depths agree with each other and with each local view."""
    n = topology.size
    bound = ceil_log2(n)
    topology.check()
    assert n == 1 or 2 ** (topology.dimension - 1) <= n <= 2**topology.dimension
    assert all(len(topology.positions(node)) <= 2 for node in topology.nodes)
    views = {node: topology.local_view(node) for node in topology.nodes}
    linked = {node: view.neighbours() for node, view in views.items()}
    for node, view in views.items():
        assert linked[node] == topology.neighbours(node)
        for position, holder in view.table.items():
            assert position in topology.positions(holder)
            assert node in linked[holder]
    graph = topology.graph()
    assert nx.is_connected(graph)
    assert not diameter or n == 1 or nx.diameter(graph) <= bound
    assert_every_tree(topology)
    nodes = sorted(topology.nodes)
    step = 1 if roots is None else max(1, n // roots)
    for root in nodes[::step]:
        root_position = topology.root_position(root)
        messages = topology.broadcast(root)
        received = Counter(receiver for _, receiver in messages)
        assert len(messages) == n - 1
        assert set(received) == topology.nodes - {root}
        assert set(received.values()) <= {1}
        depth = {root: 0}
        for sender, receiver in messages:
            assert (
                views[receiver].parent(root_position) == sender == topology.parent(root, receiver)
            )
            assert receiver in views[sender].children(root_position)
            depth[receiver] = depth[sender] + 1
        assert views[root].parent(root_position) is None
        assert max(depth.values()) <= bound
        assert all(topology.depth(root, node) == depth[node] for node in nodes[::step])
