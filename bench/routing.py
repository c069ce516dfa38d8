"""Routing cost on a large simulated network, beside flooding subscriptions, in the same run.

    python -m bench.routing [--superpeers 1000] [--subscriptions 10000] [--publications 8000]
                            [--peers 2000] [--publishers 0.1] [--seed 1] [--json]

The design space of the DHT seed (Liarou et al., Section 6): 10^3 nodes, 10^4 continuous queries,
then publications in doubling batches (1K, 2K, 4K, 8K), measured after each. For our network: the
simulator runs the generated digital-library workload end to end (advertisements broadcast,
subscriptions routed toward covering origins through the posets, notifications down the origins'
trees). The baseline, computed on the same topology, workload and match results: every subscription
flooded to every super-peer (N-1 messages each, no advertisements, no indices, no poset), each
publication matched at its origin against all subscriptions and sent down the origin's tree to the
super-peers of matching subscribers (the same tree routing, so the difference is what indices and
posets save). Links are not supervised (nothing fails here): ``--heartbeats SECONDS`` adds the
daemons' heartbeats, which then count as backbone messages and load.

Reported per checkpoint: messages (hops) by kind and in total for both, ratios, the load per
super-peer (messages it received) sorted and cumulative (the DHT paper's Figure 5c), its Gini
coefficient and how many super-peers carry 50% and 90% of it; and the run's wall time and peak
memory (maximum resident set).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time
from collections import Counter

import qel
from poset import PredicateIndex
from superpeer.core import CoreConfig, TopologyView
from superpeer.node import NodeConfig
from superpeer.sim import Simulation
from superpeer.sim.generate import generate

FREEZE_EVERY = 1000
"""Workload operations between two ``gc.freeze()``."""


def load_figures(loads: list[int]) -> dict[str, object]:
    """Sorted cumulative load (share of super-peers -> share of load), Gini, and how many carry
    half and nine tenths of it."""
    ordered = sorted(loads, reverse=True)
    total = sum(ordered) or 1
    cumulative = []
    running = 0
    for load in ordered:
        running += load
        cumulative.append(running / total)
    ascending = ordered[::-1]
    n = len(ascending)
    gini = (
        sum((2 * (i + 1) - n - 1) * load for i, load in enumerate(ascending)) / (n * total)
        if n
        else 0.0
    )
    points = [0.01, 0.05, 0.1, 0.2, 0.5, 1.0]
    return {
        "max": ordered[0] if ordered else 0,
        "mean": round(sum(ordered) / max(1, n), 1),
        "gini": round(gini, 3),
        "superpeers_for_half": next(i + 1 for i, c in enumerate(cumulative) if c >= 0.5),
        "superpeers_for_90_percent": next(i + 1 for i, c in enumerate(cumulative) if c >= 0.9),
        "busy_superpeers": sum(1 for load in ordered if load),
        "cumulative": {
            f"{int(p * 100)}%": round(cumulative[max(0, round(p * n) - 1)], 3) for p in points
        },
    }


class FloodingBaseline:
    """Subscriptions flooded to all; publications matched at the origin, sent down its tree."""

    def __init__(self, simulation: Simulation) -> None:
        self.simulation = simulation
        self.index = PredicateIndex()
        self.subscriber_sp: dict[int, str] = {}
        self.messages: Counter[str] = Counter()
        self.load: Counter[str] = Counter()
        self._next = 0

    def subscribe(self, peer: str, query: qel.Subscription) -> None:
        sp = self.simulation.peers[peer].access_point
        self._next += 1
        self.index.add(self._next, query)
        self.subscriber_sp[self._next] = sp
        self.messages["subscription"] += len(self.simulation.ids) - 1
        for other in self.simulation.ids:
            if other != sp:
                self.load[other] += 1

    def publish(self, peer: str, publication: qel.Publication) -> None:
        origin = self.simulation.peers[peer].access_point
        root = self._view(origin).root_position
        edges: set[tuple[str, str]] = set()
        for key in self.index.match(publication):
            node = self.subscriber_sp[key]
            while node != origin:
                parent = self._view(node).parent(root)
                assert parent is not None
                if (parent, node) in edges:
                    break
                edges.add((parent, node))
                node = parent
        self.messages["notification"] += len(edges)
        for _, receiver in edges:
            self.load[receiver] += 1

    def _view(self, sp: str) -> TopologyView:
        """``sp``'s view of the cube (read for every publication: not ``Simulation.cores``,
        which sorts every member)."""
        core = self.simulation.nodes[sp].core
        assert core is not None
        return core.view


def run(args: argparse.Namespace) -> dict[str, object]:
    started = time.perf_counter()
    ops = list(
        generate(
            superpeers=args.superpeers,
            peers=args.peers,
            subscriptions=args.subscriptions,
            publications=args.publications,
            publishers=args.publishers,
            churn=0.0,
            unsubscribe=0.0,
            seed=args.seed,
        )
    )
    simulation = Simulation(
        args.superpeers,
        seed=args.seed,
        config=CoreConfig(tracing=False),
        verify_wire=False,
        keep_notifications=False,
        node_config=NodeConfig(heartbeat_seconds=args.heartbeats, failure_seconds=2.0),
    )
    baseline = FloodingBaseline(simulation)
    checkpoints = []
    target = 1000
    published = 0
    for number, op in enumerate(ops):
        if number % FREEZE_EVERY == 0:
            # what is alive now is the network's state, kept to the end: the cyclic collector
            # need not scan it again (its full passes over some 10^7 objects cost more than
            # the routing did, and find next to nothing: reference counting frees the rest)
            gc.freeze()
        simulation.apply(op)
        if op["op"] == "subscribe":
            baseline.subscribe(op["peer"], qel.parse_subscription(op["query"]))
        elif op["op"] == "publish":
            for publication in qel.parse_publications(
                op["data"], publisher=op["peer"], id=op["id"]
            ):
                baseline.publish(op["peer"], publication)
            published += 1
            if published == min(target, args.publications):
                checkpoints.append(_checkpoint(simulation, baseline, published, started))
                target *= 2
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "superpeers": args.superpeers,
        "peers": args.peers,
        "subscriptions": args.subscriptions,
        "publications": args.publications,
        "publishers": round(args.peers * args.publishers),
        "seed": args.seed,
        "heartbeat_seconds": args.heartbeats,
        "checkpoints": checkpoints,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "peak_rss_bytes": peak,
    }


def _checkpoint(
    simulation: Simulation, baseline: FloodingBaseline, published: int, started: float
) -> dict[str, object]:
    ours = {k: v for k, v in simulation.messages.items() if k.startswith("sp.")}
    ours_total = sum(ours.values())
    flood_total = sum(baseline.messages.values())
    loads = [sum(core.statistics.received.values()) for core in simulation.cores.values()]
    hops = Counter(simulation.hops)
    deliveries = sum(hops.values())
    return {
        "publications": published,
        "messages": ours,
        "messages_total": ours_total,
        "flooding_messages": dict(baseline.messages),
        "flooding_total": flood_total,
        "flooding_over_ours": round(flood_total / max(1, ours_total), 2),
        "notifications_delivered": deliveries,
        "mean_hops": round(sum(h * n for h, n in hops.items()) / max(1, deliveries), 2),
        "load": load_figures(loads),
        "flooding_load": load_figures([baseline.load[sp] for sp in simulation.ids]),
        "elapsed_seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--superpeers", type=int, default=1000)
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--publications", type=int, default=8000)
    parser.add_argument("--peers", type=int, default=2000)
    parser.add_argument("--publishers", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--heartbeats",
        type=float,
        default=None,
        metavar="SECONDS",
        help="supervise links with heartbeats this often (simulated seconds; default: off, "
        "as no super-peer fails here: the simulator's own default, 0.5, adds some 20,000 "
        "heartbeats per simulated second at 1,000 super-peers, and the cube alone takes some "
        "2,000 simulated seconds to build)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{report['superpeers']} super-peers, {report['peers']} peers ({report['publishers']} publishing), "
        f"{report['subscriptions']} subscriptions; wall {report['wall_seconds']} s, "
        f"peak RSS {report['peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    print(
        f"{'pubs':>6} {'ours':>10} {'flooding':>10} {'ratio':>6} {'elements':>9} {'forward':>9} {'notif.':>9} {'hops':>5} {'gini':>6} {'sp 50%':>6} {'sp 90%':>6}"
    )
    for c in report["checkpoints"]:  # type: ignore[union-attr]
        m = c["messages"]
        print(
            f"{c['publications']:>6} {c['messages_total']:>10} {c['flooding_total']:>10} "
            f"{c['flooding_over_ours']:>5}x {m.get('sp.elements', 0):>9} {m.get('sp.forward', 0):>9} "
            f"{m.get('sp.notification', 0):>9} {c['mean_hops']:>5} {c['load']['gini']:>6} "
            f"{c['load']['superpeers_for_half']:>6} {c['load']['superpeers_for_90_percent']:>6}"
        )


if __name__ == "__main__":
    main()
