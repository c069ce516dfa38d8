"""The census a full cube's anchor takes before it grows (``hypercup._census``).

The cube a departure can leave behind when overlapping failures make its search pass over a
column: the anchor's column split, a column below it doubled. The anchor, judging from its own
column, took the cube for full and grew it: every super-peer holding a doubled column broke
(``a full cube grows``) and rejoined, and the cube fell apart under the joins that waited
(32 super-peers cut once, the heal: 47 s to one cube). The census finds the doubled columns."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hypercup import (
    Census,
    CensusReply,
    Grow,
    JoinRequest,
    Lookup,
    NodeState,
    Send,
)
from hypercup._census import CENSUS_TICKS
from hypercup._neighbourhood import Neighbourhood, Peer
from hypercup.testing import Network, address_of
from tests.hypercup.test_node import cube


def pass_over(network: Network, gone_position: int, to_position: int) -> tuple[str, str]:
    """Leaves ``network`` as a departure that passed over a column does: the holder of
    ``gone_position`` is gone and the holder of ``to_position`` (its column's base) holds it
    too, every table saying so. Returns (gone, doubled holder)."""
    topology = network.topology()
    gone, keeper = topology.holder(gone_position), topology.holder(to_position)
    holdings = {node: set(topology.positions(node)) for node in network.members if node != gone}
    holdings[keeper].add(gone_position)
    del network._nodes[gone]
    network._failed.add(gone)
    for node, positions in holdings.items():
        member = network.node(node)
        member._hood = Neighbourhood(
            node_id=node,
            address=address_of(node),
            dimension=topology.dimension,
            positions=positions,
            peers={
                other: Peer(address_of(other), frozenset(held))
                for other, held in holdings.items()
                if other != node
            },
        )
    return gone, keeper


def test_a_doubled_column_below_a_split_anchor_takes_the_join_and_the_cube_does_not_grow() -> None:
    network = cube(8)
    dimension = network.topology().dimension
    _, keeper = pass_over(network, gone_position=5, to_position=1)
    stats = network.join("newcomer")
    assert "hypercup.grow" not in stats.kinds
    assert stats.kinds["hypercup.census"] == 7 - 1  # down the anchor's tree of 7 members
    topology = network.check()
    assert topology.dimension == dimension
    assert topology.positions("newcomer") == frozenset({5})
    assert topology.positions(keeper) == frozenset({1})


def test_several_doubled_columns_take_the_joins_waiting_one_each_then_the_cube_grows() -> None:
    network = cube(16)
    pass_over(network, gone_position=9, to_position=1)
    pass_over(network, gone_position=12, to_position=4)
    stats = network.join_concurrently(["x", "y", "z"])
    topology = network.check()
    assert topology.dimension == 5, "the third join grew the cube, after the two took 9 and 12"
    assert stats.kinds["hypercup.grow"] == 15
    assert {min(topology.positions(n)) for n in ("x", "y", "z")} >= {9, 12}


def anchor_of(network: Network) -> str:
    topology = network.topology()
    return topology.holder((1 << topology.dimension - 1) - 1)


def sends(outputs: list, kind: type) -> list[Send]:
    return [o for o in outputs if isinstance(o, Send) and isinstance(o.message, kind)]


def waiting_join(network: Network) -> tuple[str, list]:
    """A newcomer asks the anchor of the full ``network`` itself: the anchor's outputs."""
    anchor = anchor_of(network)
    request = JoinRequest(address=address_of("late"))
    return anchor, network.node(anchor).receive("late", request)


def test_a_census_a_child_never_answers_is_given_up_and_taken_again_at_a_later_tick() -> None:
    """A child that does not answer (its link cut) holds no grow for ever: after
    ``CENSUS_TICKS`` its parent answers with what it has, as not ready, and the anchor asks
    again at its next tick."""
    network = cube(4)
    anchor_id, outputs = waiting_join(network)
    anchor = network.node(anchor_id)
    assert len(sends(outputs, Census)) == 2, "one to each child in the anchor's tree of 4"
    for _ in range(CENSUS_TICKS):
        assert sends(anchor.tick(), Census) == []  # the last one gives it up
    again = anchor.tick()
    assert {s.message.census for s in sends(again, Census)} == {2}
    assert sends(again, Grow) == [] and anchor.state is NodeState.MEMBER


def test_a_child_that_fails_counts_as_not_ready_and_no_grow_follows() -> None:
    network = cube(4)
    anchor_id, outputs = waiting_join(network)
    anchor = network.node(anchor_id)
    (census,) = {s.message for s in sends(outputs, Census)}
    answers = {s.to: network.node(s.to).receive(anchor_id, census) for s in sends(outputs, Census)}
    (leaf,) = [child for child, out in answers.items() if sends(out, CensusReply)]
    (inner,) = [child for child, out in answers.items() if sends(out, Census)]  # asks its own
    (answer,) = [s.message for s in sends(answers[leaf], CensusReply)]
    assert answer.ready and answer.doubled == ()
    assert sends(anchor.receive(leaf, answer), Grow) == []
    assert sends(anchor.neighbour_failed(inner), Grow) == [], "a failed child stands in its way"
    assert anchor.busy(), "the join still waits"


def test_a_census_reaching_a_node_out_of_the_cube_or_of_another_epoch_is_answered_not_ready() -> (
    None
):
    network = cube(4)
    member = network.node("n1")
    census = Census(
        epoch=member.epoch + 1, origin="a", census=1, root=0, address=address_of("a"), wanted=1
    )
    (reply,) = [s for s in member.receive("a", census) if isinstance(s, Send)]
    assert reply.to == "a" and reply.message == CensusReply(
        epoch=census.epoch, origin="a", census=1, doubled=(), ready=False
    )
    assert member.receive("a", reply.message) == [], "an answer for no census here: dropped"


@pytest.mark.parametrize("size", [2, 3, 4, 7, 8, 9, 16, 17, 33])
def test_joins_from_a_cube_of_any_size_cost_a_census_per_grow_and_keep_the_shape(size: int) -> None:
    network = cube(size)
    for i in range(size, 2 * size + 1):
        stats = network.join(f"m{i}")
        grows = stats.kinds.get("hypercup.grow", 0)
        assert stats.kinds.get("hypercup.census", 0) == grows
        network.check()


def test_a_stray_message_of_a_later_epoch_held_back_does_not_stand_in_a_grows_way() -> None:
    """A ``Lookup`` of a cube gone by, from a later epoch, is held back for good: counted as
    standing in a grow's way, a cube of sixteen did not grow for sixteen joins until the
    watchdog (32 super-peers, seed 18, a cut alone)."""
    network = cube(4)
    anchor_id, outputs = waiting_join(network)
    (census,) = {s.message for s in sends(outputs, Census)}
    leaf = next(s.to for s in sends(outputs, Census) if not sends(
        network.node(s.to).receive(anchor_id, census), Census
    ))  # fmt: skip
    member = network.node(leaf)
    stray = Lookup(
        epoch=member.epoch + 3, target=0, avoid="gone", requester="gone",
        requester_address=address_of("gone"),
    )  # fmt: skip
    assert member.receive("gone", stray) == [] and member.busy(), "held back"
    again = replace(census, census=census.census + 1)
    (answer,) = [s.message for s in sends(member.receive(anchor_id, again), CensusReply)]
    assert answer.ready
