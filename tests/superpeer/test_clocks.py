"""Clocks that disagree, in the simulator (``clocks``): the cases found on real daemons, kept as
examples beside the properties (``test_completeness.py`` draws skews for every process)."""

import pytest

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
