"""Message economy: broadcasts cost N-1 messages, covered subscriptions cost nothing more, and a
notification crosses each link at most once (checked on the trace logs, which also checks them)."""

import json
from collections import Counter
from pathlib import Path

import pytest

from superpeer.sim import Simulation
from superpeer.sim.generate import generate
from superpeer.trace import FIELDS

DC = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"


@pytest.mark.parametrize("superpeers", [1, 2, 3, 4, 7, 8, 12, 16, 33])
def test_an_advertisement_reaches_every_super_peer_with_n_minus_1_messages(superpeers):
    simulation = Simulation(superpeers)
    simulation.apply({"op": "join", "peer": "pub", "superpeer": superpeers // 2})
    simulation.apply({"op": "advertise", "peer": "pub", "schemas": ["dc"]})
    assert simulation.messages["sp.elements"] == superpeers - 1
    origin = simulation.ids[superpeers // 2]
    for sp, core in simulation.cores.items():
        assert core.ads.origins() == [origin], sp
    # The same elements advertised by a second local peer are not broadcast again.
    simulation.apply({"op": "join", "peer": "pub2", "superpeer": superpeers // 2})
    simulation.apply({"op": "advertise", "peer": "pub2", "schemas": ["dc"]})
    assert simulation.messages["sp.elements"] == superpeers - 1


def test_a_covered_subscription_from_the_same_direction_costs_no_backbone_message():
    simulation = Simulation(8)
    simulation.apply({"op": "join", "peer": "pub", "superpeer": 7})
    simulation.apply({"op": "advertise", "peer": "pub", "schemas": ["dc"]})
    simulation.apply({"op": "join", "peer": "bob", "superpeer": 0})
    simulation.apply({"op": "join", "peer": "alice", "superpeer": 0})
    simulation.apply(
        {"op": "subscribe", "peer": "bob", "id": "all", "query": "X : t(X, dc:creator, Y)"}
    )
    forwarded = simulation.messages["sp.forward"]
    assert forwarded == 3  # one per hop from 000 to 111
    simulation.apply(
        {
            "op": "subscribe",
            "peer": "alice",
            "id": "nejdl",
            "query": 'X : t(X, dc:creator, Y), Y contains "Nejdl"',
        }
    )
    simulation.apply(
        {"op": "subscribe", "peer": "bob", "id": "again", "query": "X : t(X, dc:creator, Z)"}
    )
    assert simulation.messages["sp.forward"] == forwarded


def test_notifications_cross_each_link_at_most_once_and_traces_follow_the_schema(tmp_path):
    ops = list(generate(superpeers=11, peers=30, subscriptions=150, publications=80, seed=4))
    simulation, records = traced(11, ops, tmp_path, seed=2)
    assert {path.stem for path in tmp_path.glob("*.jsonl")} <= set(simulation.ids)
    assert all(tuple(record) == FIELDS for record in records)
    crossings = Counter(
        (r["pub"], r["node"], r["neighbour"])
        for r in records
        if r["event"] == "send" and r["kind"] == "sp.notification"
    )
    assert crossings and max(crossings.values()) == 1
    sends = Counter(r["msg"] for r in records if r["event"] == "send" and r["neighbour"])
    receives = Counter(r["msg"] for r in records if r["event"] == "receive" and r["neighbour"])
    assert sends == receives, "every backbone message sent is received once"
    delivered = Counter(
        (r["peer"], r["pub"]) for r in records if r["event"] in ("deliver", "flush")
    )
    online_or_flushed = sum(delivered.values())
    assert online_or_flushed == sum(p.received.total() for p in simulation.peers.values())


def test_every_drop_says_why(tmp_path):
    """A drop in a trace is either routine (a repeat down a second tree) or the first sign of a
    loss; its ``reason`` tells which without reading the code. Backbone churn (cuts, rejoins,
    departures) makes most kinds of drop happen."""
    found = json.loads(
        (Path(__file__).parent / "churn_counterexample_sent_after_departure.json").read_text()
    )
    superpeers, ops = found["workload"]
    _, records = traced(superpeers, ops, tmp_path, seed=1)
    drops = [record for record in records if record["event"] == "drop"]
    assert drops, "the workload drops something"
    assert all(record["reason"] for record in drops), [r for r in drops if not r["reason"]][:3]


def traced(superpeers: int, ops: list[dict], trace_dir: Path, *, seed: int):
    """The simulation of ``ops`` (interleaved) and every trace record it wrote."""
    simulation = Simulation(superpeers, trace_dir=trace_dir, interleave=True, seed=seed)
    for op in ops:
        simulation.apply(op)
    simulation.close()
    records = [
        json.loads(line)
        for path in sorted(trace_dir.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    return simulation, records


def test_a_restarted_access_point_sends_a_covered_subscription_no_more():
    """One at a time, a subscription made before a broader one goes and stays. A restart sends
    the broader one only (``SuperPeerCore._route_many`` plans both and drops the narrower, which
    the broader one covers), and the peer still hears of what the narrower one matches."""
    simulation = Simulation(8)
    simulation.apply({"op": "join", "peer": "pub", "superpeer": 7})
    simulation.apply({"op": "advertise", "peer": "pub", "schemas": ["dc"]})
    simulation.apply({"op": "join", "peer": "bob", "superpeer": 0})
    nejdl = 'X : t(X, dc:creator, Y), Y contains "Nejdl"'
    simulation.apply({"op": "subscribe", "peer": "bob", "id": "nejdl", "query": nejdl})
    simulation.apply(
        {"op": "subscribe", "peer": "bob", "id": "all", "query": "X : t(X, dc:creator, Y)"}
    )
    assert simulation.messages["sp.forward"] == 6, "the narrower one first: both go, 3 hops each"
    forwarded = simulation.messages["sp.forward"]
    simulation.apply({"op": "superpeer_bounce", "superpeer": 0})
    assert simulation.messages["sp.forward"] - forwarded == 3, "only the broader one, 3 hops"
    relays = [core for name, core in simulation.cores.items() if name not in ("sp0", "sp7")]
    assert sum(len(core.poset) for core in relays) == 2, "the 2 relays hold the broader one"
    simulation.apply(
        {
            "op": "publish",
            "peer": "pub",
            "id": "paper",
            "format": "nt",
            "data": '<http://example.org/p> <http://purl.org/dc/elements/1.1/creator> "W. Nejdl" .',
        }
    )
    assert simulation.errors == []
    assert simulation.deliveries()["bob"] == ["paper"]
