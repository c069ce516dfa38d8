"""Expiry (seed 000, ``superpeer.expiry``) in the simulator against the brute-force oracle:
subscriptions stop matching when they expire, a detached subscriber gets an expired
publication's changes only if it came back before the expiry, and the network's timers do it."""

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from superpeer.sim import Simulation
from tests.superpeer.oracle import expected_changes, expected_deliveries
from tests.superpeer.test_completeness import BROAD, run
from tests.superpeer.test_living import LINES, QUERIES, _document

EXPIRIES = [15, 45]
WAITS = [10, 20]
"""Expiries fall half-way between the times operations happen (multiples of 10 s): the
simulator's few milliseconds per operation never move an operation across one."""


def _expiring(draw: st.DrawFn, op: dict) -> dict:
    if draw(st.booleans()):
        op["expires"] = draw(st.sampled_from(EXPIRIES))
    return op


@st.composite
def expiring_workloads(draw: st.DrawFn) -> tuple[int, list[dict]]:
    """Subscriptions and resources that expire, time passing, readers going offline."""
    superpeers = draw(st.integers(1, 4))
    peers = ["owner", "reader", "other"]
    ops: list[dict] = [
        {"op": "join", "peer": p, "superpeer": draw(st.integers(0, superpeers - 1))} for p in peers
    ]
    ops += [{"op": "advertise", "peer": p, **BROAD} for p in peers]
    ops.append({"op": "subscribe", "peer": "reader", "id": "s0", "query": QUERIES[0]})
    if draw(st.booleans()):
        ops.append({"op": "detach", "peer": "reader"})
    for _ in range(draw(st.integers(2, 16))):
        kind = draw(
            st.sampled_from(
                ["subscribe", "publish", "publish", "update", "extend", "retract", "churn", "wait"]
            )
        )
        if kind == "wait":
            ops.append({"op": "wait", "seconds": draw(st.sampled_from(WAITS))})
        elif kind == "churn":
            reader = draw(st.sampled_from(["reader", "other"]))
            ops.append({"op": draw(st.sampled_from(["detach", "attach"])), "peer": reader})
        elif kind == "subscribe":
            peer = draw(st.sampled_from(["reader", "other"]))
            sid = draw(st.sampled_from(["s0", "s1"]))
            query = draw(st.sampled_from(QUERIES))
            ops.append(_expiring(draw, {"op": kind, "peer": peer, "id": sid, "query": query}))
        else:
            op = {"op": kind, "peer": "owner", "id": draw(st.sampled_from(["r0", "r1"]))}
            if kind != "retract":
                op.update(format="nt", data=_document(draw))
            ops.append(_expiring(draw, op) if kind == "publish" else op)
    ops += [{"op": "attach", "peer": p} for p in peers]
    return superpeers, ops


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(expiring_workloads(), st.booleans())
def test_expired_subscriptions_and_publications_are_not_delivered(workload, interleave):
    superpeers, ops = workload
    simulation = run(superpeers, ops, interleave=interleave, seed=2)
    changes = expected_changes(superpeers, ops)
    event(f"expired mail: {'yes' if any(p.expired for p in simulation.peers.values()) else 'no'}")
    assert simulation.report()["changes"] == changes
    assert simulation.deliveries() == expected_deliveries(superpeers, ops)


def _ops(*later: dict) -> list[dict]:
    return [
        {"op": "join", "peer": "owner", "superpeer": 0},
        {"op": "join", "peer": "reader", "superpeer": 1},
        {"op": "advertise", "peer": "owner", **BROAD},
        *later,
    ]


def _publish(resource: str, **extra: object) -> dict:
    data = LINES[1] + "\n" + LINES[2] + "\n"
    return {"op": "publish", "peer": "owner", "id": resource, "format": "nt", "data": data, **extra}


def test_an_expired_subscription_is_retracted_network_wide():
    ops = _ops(
        {"op": "subscribe", "peer": "reader", "id": "s", "query": QUERIES[2], "expires": 30},
        _publish("before"),
        {"op": "wait", "seconds": 60},
        _publish("after"),
    )
    simulation = run(2, ops)
    assert simulation.deliveries() == {"owner": [], "reader": ["before"]}
    # the retraction went network-wide: no super-peer holds a subscription any more
    assert all(len(core.poset) == 0 for core in simulation.cores.values())


def test_a_detached_subscriber_gets_a_publication_only_before_its_expiry():
    ops = _ops(
        {"op": "subscribe", "peer": "reader", "id": "s", "query": QUERIES[2]},
        {"op": "detach", "peer": "reader"},
        _publish("short", expires=30),
        _publish("long", expires=300),
        {"op": "wait", "seconds": 60},
        {"op": "attach", "peer": "reader"},
    )
    simulation: Simulation = run(2, ops)
    assert simulation.deliveries()["reader"] == ["long"]
    assert simulation.peers["reader"].expired == 1
    assert simulation.deliveries() == expected_deliveries(2, ops)


def test_expiries_survive_a_restart_of_the_access_points():
    """The reader's access point restarts on its store: the subscription still expires; the
    owner's restarts: its resource still expires (an update after it is refused)."""
    ops = _ops(
        {"op": "subscribe", "peer": "reader", "id": "s", "query": QUERIES[2], "expires": 30},
        _publish("r", expires=30),
        {"op": "superpeer_bounce", "superpeer": 1},
        {"op": "superpeer_bounce", "superpeer": 0},
        {"op": "wait", "seconds": 60},
        _publish("after"),
        {"op": "update", "peer": "owner", "id": "r", "format": "nt", "data": LINES[1] + "\n"},
    )
    simulation = run(2, ops)
    assert simulation.deliveries() == {"owner": [], "reader": ["r"]}
    assert "to update" in simulation.errors[-1]["error"]
    assert all(len(core.poset) == 0 for core in simulation.cores.values())
