"""Clocks that disagree, in the simulator (``clocks``): the cases found on real daemons, kept as
examples beside the properties (``test_completeness.py`` draws skews for every process)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superpeer.sim import Simulation
from tests.superpeer.oracle import expected_deliveries

BROAD = {"schemas": ["dc", "rdf", "http://example.org/"]}
DC = "http://purl.org/dc/elements/1.1/"


def publish(n: int, peer: str = "pub") -> dict:
    data = f'<http://example.org/d{n}> <{DC}title> "t{n}" ; <{DC}date> {2000 + n % 20} .'
    return {"op": "publish", "peer": peer, "id": f"n{n}", "format": "turtle", "data": data}


def scenario(publications: int = 20) -> list[dict]:
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 2},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": "X : t(X, dc:title, T)"},
    ]
    return ops + [publish(n) for n in range(publications)]


def run(ops: list[dict], **options) -> Simulation:
    peer_skews = options.pop("peer_skews", {})
    simulation = Simulation(4, **options)
    simulation.peer_skews.update(peer_skews)
    for op in ops:
        simulation.apply(dict(op))
    return simulation


@pytest.mark.parametrize("skew", [45.0, -45.0, 3600.0, -3600.0])
def test_an_access_point_with_its_clock_off_delivers_everything(skew):
    """On real daemons, an access point 45 s ahead delivered none of 160 notifications ("published
    before its subscriptions"): its subscriber's are now owed whatever the clocks say."""
    ops = scenario()
    simulation = run(ops, skews={0: skew})
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert len(simulation.deliveries()["sub"]) == 20


def test_a_publisher_and_an_origin_on_clocks_of_their_own():
    ops = scenario()
    simulation = run(ops, skews={2: -45.0, 1: 600.0}, peer_skews={"pub": -90.0, "sub": 300.0})
    assert simulation.deliveries() == expected_deliveries(4, ops)


def test_a_restart_under_a_clock_set_back_catches_up_from_where_it_was():
    """The access point is restarted with its clock an hour behind while the publisher goes on
    (a VM restored from a snapshot): its hybrid time goes on from what it kept, and its catch-up
    asks for what it missed, not for an hour of nothing."""
    ops = scenario(5)
    ops += [{"op": "superpeer_fail", "superpeer": 0}]
    ops += [publish(n) for n in range(5, 10)]
    ops += [{"op": "skew", "superpeer": 0, "seconds": -3600.0}]
    ops += [
        {"op": "superpeer_restart", "superpeer": 0},
        {"op": "move", "peer": "sub", "superpeer": 0},
    ]
    ops += [publish(n) for n in range(10, 15)]
    simulation = run(ops)
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert len(simulation.deliveries()["sub"]) == 15


def test_expiries_keep_the_time_they_have_left_whatever_the_clocks():
    """A subscription for 60 s from a peer an hour ahead, at an access point 10 minutes behind:
    it lasts 60 s (what it matches before is owed, after is not)."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 2},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": "X : t(X, dc:title, T)",
         "expires": 60},
        publish(1),
        {"op": "wait", "seconds": 50},
        publish(2),
        {"op": "wait", "seconds": 20},
        publish(3),
    ]  # fmt: skip
    simulation = run(ops, skews={0: -600.0}, peer_skews={"sub": 3600.0})
    assert simulation.deliveries()["sub"] == ["n1", "n2"]
    assert simulation.deliveries() == expected_deliveries(4, ops)


def test_the_offsets_measured_are_the_offsets_given():
    ops = [*scenario(2), {"op": "wait", "seconds": 30}]
    simulation = run(ops, skews={0: 45.0, 1: -600.0}, peer_skews={"sub": 120.0})
    sp0 = simulation.nodes["sp0"]
    report = sp0.clock_report(simulation.now + 45.0)
    for neighbour, measured in report["neighbours"].items():
        given = {"sp1": -600.0, "sp2": 0.0, "sp3": 0.0}[neighbour] - 45.0
        assert abs(measured["offset"] - given) < 0.01, (neighbour, measured)
    assert abs(report["peers"]["sub"]["offset"] - 75.0) < 0.01  # its clock minus sp0's
    assert "super-peer sp1's clock is off by -645.000 s" in report["beyond_bound"]
    assert report["largest_peer_offset"]["peer"] == "sub"
    # its neighbours' clocks outvote its own: sp2's and sp3's are 45 s behind it (``clocks``, 0)
    assert report["correction_seconds"] == pytest.approx(-45.0, abs=0.01)
    assert simulation.nodes["sp2"].clock_report(simulation.now)["correction_seconds"] == 0.0


def clock_in_a_cut(skewed: int, skew: float, groups: list[list[int]], late: str) -> list[dict]:
    """Eight super-peers cut in two; during the cut, super-peer ``skewed`` restarts under a clock
    ``skew`` seconds off, the publisher on its side (at another super-peer of it: one that
    restarts in a cut may stay out of the cube until the heal, and accepts nothing meanwhile)
    publishes, and then the subscriber on the other side withdraws its subscription
    (``late="unsubscribe"``) or makes a second one (``late="subscribe"``); the cut heals."""
    side, other = groups
    pub, sub = next(k for k in side if k != skewed), other[-1]
    ops = [
        {"op": "join", "peer": "sub", "superpeer": sub},
        {"op": "join", "peer": "pub", "superpeer": pub},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": "X : t(X, dc:title, T)"},
        publish(0),
        {"op": "wait", "seconds": 2},
        {"op": "partition", "groups": groups},
        {"op": "wait", "seconds": 5},
        {"op": "skew", "superpeer": skewed, "seconds": skew},
        {"op": "wait", "seconds": 5},
        *[publish(n) for n in range(1, 6)],
        {"op": "wait", "seconds": 5},
    ]
    if late == "unsubscribe":
        ops.append({"op": "unsubscribe", "peer": "sub", "id": "s1"})
    else:
        ops.append({"op": "subscribe", "peer": "sub", "id": "s2", "query": "X : t(X, dc:date, D)"})
        ops += [publish(n) for n in range(6, 9)]
    return [*ops, {"op": "wait", "seconds": 5}, {"op": "heal"}, {"op": "wait", "seconds": 60}]


def test_a_clock_stepped_ahead_on_one_side_of_a_cut_orders_nothing_after_the_other_side():
    """Found on hosts: a super-peer restarted with its clock 400 s ahead on one side of a cut
    dragged that side's hybrid time with it, and a subscription withdrawn on the other side
    after that side's publications was judged withdrawn before them: all lost. Its neighbours'
    clocks now discipline it (``clocks``, rule 0)."""
    ops = clock_in_a_cut(5, 400.0, [[4, 5, 6, 7], [0, 1, 2, 3]], "unsubscribe")
    assert ops[1] == {"op": "join", "peer": "pub", "superpeer": 4}
    simulation = Simulation(8, seed=1)
    for op in ops:
        simulation.apply(dict(op))
    assert simulation.deliveries()["sub"] == ["n0", "n1", "n2", "n3", "n4", "n5"]
    assert simulation.deliveries() == expected_deliveries(8, ops)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    st.integers(0, 7),
    st.sampled_from([-3600.0, -400.0, -45.0, 45.0, 400.0, 3600.0]) | st.floats(-3600.0, 3600.0),
    st.permutations(range(8)),
    st.integers(1, 6),
    st.sampled_from(["unsubscribe", "subscribe"]),
    st.integers(0, 3),
)
def test_a_clock_set_anywhere_during_a_cut_moves_no_publication_across_a_withdrawal(
    skewed, skew, order, cut, late, seed
):
    """Any cut, any super-peer restarted under any clock during it: what was published before
    a withdrawal on the other side is owed, what a subscription made after it matches is not."""
    members = [k for k in order if k != skewed]
    side, other = sorted([skewed, *members[:cut]]), sorted(members[cut:])
    ops = clock_in_a_cut(skewed, skew, [side, other], late)
    simulation = Simulation(8, seed=seed)
    for op in ops:
        simulation.apply(dict(op))
    assert simulation.deliveries() == expected_deliveries(8, ops)
