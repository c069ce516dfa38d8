"""Repairs in the simulator, beside rebuilding the same network: ``python -m bench.repair [--json]``.

    python -m bench.repair [--sizes 16,64,256] [--peers-per-superpeer 2] [--seed 1] [--json]

For each size N the simulator (``superpeer.sim.Simulation``, the real sans-IO ``SuperPeerNode`` s,
heartbeat 0.5 s, failure timeout 2 s, 2 ms per hop) builds the cube by N - 1 joins, then gives it
a routing state: ``peers-per-superpeer`` peers on every super-peer (peer i on super-peer i mod N),
each advertising the two digital-library documents it publishes and subscribing once (seeded; all
joins, then all advertisements, then all subscriptions). Then, on that network, one after the other:

* ``fail``: a seeded random super-peer crashes; its neighbours notice the silence, the cube is
  repaired, its peers move to the next live super-peer, and routing recovers (retractions,
  catch-ups, handovers of kept mail);
* ``restart``: the same super-peer comes back on its store and joins again;
* ``bounce``: another super-peer is killed and started again on its store 0.5 s later, before its
  silence is noticed: its neighbours learn it from its new incarnation.

Each event is measured from the moment the process dies (or restarts) until the network is quiet
(nothing in flight, no node waiting for anything): messages by kind, split into the topology
protocol (``hypercup.*``), routing and recovery (``sp.*`` but heartbeats) and the peers' links
(``peer.*``, ``link.*``), and their encoded bytes; heartbeats are periodic whatever happens, so
they are left out of every figure (the JSON gives the count during each event). Times are
simulated seconds: ``cube`` is when the last member's view stopped naming the failed super-peer
(for ``fail``) or when the bounced or restarted one held a position again, ``quiet`` when the
network went quiet.

The baseline, measured in the same run on the same network: what it cost to build it from scratch,
the cube's joins plus every peer's join, advertisement and subscription routed (heartbeats left
out too), and each event's ratio to it.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence

from bench.columns import aligned
from superpeer.core import CoreConfig
from superpeer.sim import Simulation
from superpeer.sim.network import START
from workloads.digital_library import DigitalLibrary

DEFAULT_SIZES = (16, 64, 256)
DOCUMENTS_PER_PEER = 2
HEARTBEAT = "sp.heartbeat"

Figures = dict[str, object]


class TimedSimulation(Simulation):
    """The simulator, noting when a failed super-peer left every view and when a restarted one
    holds a position again (checked after every delivery and timer)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.watched: str | None = None
        self.holders: set[str] = set()
        self.killed_at: float | None = None
        self.cube_at: float | None = None
        self.previous: object = None
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def watch_failure(self, node_id: str) -> None:
        self.watched, self.cube_at = None, None
        self.holders = {
            n
            for n, node in self.nodes.items()
            if node.core is not None and node_id in node.core.view.neighbours()
        }
        self.watched = node_id

    def watch_return(self, node_id: str) -> None:
        self.watched, self.holders, self.cube_at = node_id, set(), None
        self.previous = self.nodes.get(node_id)

    def _kill(self, node_id: str) -> None:
        self.killed_at = self.now
        super()._kill(node_id)

    def _deliver(self, pending) -> None:  # type: ignore[no-untyped-def]
        super()._deliver(pending)
        self._check()

    def _fire(self, timer: tuple[float, str]) -> None:
        super()._fire(timer)
        self._check()

    def _check(self) -> None:
        if self.watched is None or self.cube_at is not None:
            return
        if self.holders:
            self.holders = {
                n
                for n in self.holders
                if n in self.nodes
                and self.nodes[n].core is not None
                and self.watched in self.nodes[n].core.view.neighbours()  # type: ignore[union-attr]
            }
            if not self.holders:
                self.cube_at = self.now
        else:
            node = self.nodes.get(self.watched)
            if node is not None and node is not self.previous and node.core is not None:
                self.cube_at = self.now


def workload(n: int, peers_per_superpeer: int, seed: int) -> list[dict]:
    """Every peer joins, then advertises what it publishes, then subscribes once (in that order,
    as ``superpeer.sim.generate`` does)."""
    library = DigitalLibrary(seed=seed)
    count = n * peers_per_superpeer
    names = [f"peer{i}" for i in range(count)]
    joins = [{"op": "join", "peer": name, "superpeer": i % n} for i, name in enumerate(names)]
    advertisements = []
    for i, name in enumerate(names):
        documents = [
            library.document(i * DOCUMENTS_PER_PEER + d, group=i, groups=count)
            for d in range(DOCUMENTS_PER_PEER)
        ]
        advertisements.append({"op": "advertise", "peer": name, **library.advertisement(documents)})
    subscriptions = [
        {"op": "subscribe", "peer": name, "id": "q0", "query": library.subscription()}
        for name in names
    ]
    return joins + advertisements + subscriptions


def split(messages: Counter[str], sizes: Counter[str]) -> Figures:
    """Messages by class (heartbeats apart), their bytes, and every kind."""
    topology = sum(c for k, c in messages.items() if k.startswith("hypercup."))
    routing = sum(c for k, c in messages.items() if k.startswith("sp.") and k != HEARTBEAT)
    total = sum(c for k, c in messages.items() if k != HEARTBEAT)
    return {
        "topology": topology,
        "routing": routing,
        "peer_links": total - topology - routing,
        "total": total,
        "bytes": sum(b for k, b in sizes.items() if k != HEARTBEAT),
        "heartbeats": messages[HEARTBEAT],
        "kinds": dict(sorted((k, c) for k, c in messages.items() if k != HEARTBEAT)),
    }


def _event(
    simulation: TimedSimulation, op: dict, rebuild: Figures, *, failure: bool = False
) -> Figures:
    before, before_bytes = Counter(simulation.messages), Counter(simulation.message_bytes)
    errors = len(simulation.errors)
    node_id = simulation.ids[op["superpeer"]]
    started = time.perf_counter()
    if failure:
        simulation.watch_failure(node_id)
    else:
        simulation.watch_return(node_id)
    simulation.killed_at = simulation.now  # a failure or bounce sets it again as it kills
    simulation.apply(op)
    assert simulation.killed_at is not None
    if failure:
        assert simulation._repaired(node_id)
    figures = split(
        simulation.messages - before,  # type: ignore[arg-type]
        simulation.message_bytes - before_bytes,  # type: ignore[arg-type]
    )
    cube = simulation.cube_at
    return {
        "event": op["op"].removeprefix("superpeer_"),
        "superpeer": node_id,
        **figures,
        "cube_seconds": round(cube - simulation.killed_at, 3) if cube is not None else None,
        "quiet_seconds": round(simulation.now - simulation.killed_at, 3),
        "errors": len(simulation.errors) - errors,
        "over_rebuild": round(figures["total"] / rebuild["total"], 4),  # type: ignore[operator]
        "bytes_over_rebuild": round(figures["bytes"] / rebuild["bytes"], 4),  # type: ignore[operator]
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def measure(n: int, peers_per_superpeer: int, seed: int, *, verify_wire: bool) -> Figures:
    """Build N super-peers and their routing state (the baseline), then fail, restart, bounce."""
    started = time.perf_counter()
    simulation = TimedSimulation(
        n, seed=seed, config=CoreConfig(tracing=False), verify_wire=verify_wire
    )
    cube = split(simulation.messages, simulation.message_bytes)
    built = simulation.now
    for op in workload(n, peers_per_superpeer, seed):
        simulation.apply(op)
    rebuild = split(simulation.messages, simulation.message_bytes)
    rebuild["cube_topology"] = cube["total"]
    rebuild["simulated_seconds"] = round(simulation.now - START, 1)
    rebuild["routing_state_seconds"] = round(simulation.now - built, 1)
    rebuild["errors"] = len(simulation.errors)
    rebuild["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(f"N={n}: built in {rebuild['wall_seconds']} s", file=sys.stderr, flush=True)
    rng = random.Random(seed)
    failed, bounced = rng.sample(range(n), 2)
    events = [
        _event(simulation, {"op": "superpeer_fail", "superpeer": failed}, rebuild, failure=True),
        _event(simulation, {"op": "superpeer_restart", "superpeer": failed}, rebuild),
        _event(simulation, {"op": "superpeer_bounce", "superpeer": bounced}, rebuild),
    ]
    return {
        "n": n,
        "peers": n * peers_per_superpeer,
        "rebuild": rebuild,
        "events": events,
    }


def table(results: Sequence[Figures]) -> str:
    header = (
        "N",
        "event",
        "topology",
        "routing",
        "peer links",
        "total",
        "KiB",
        "cube s",
        "quiet s",
        "rebuild msgs",
        "rebuild KiB",
        "msgs ratio",
        "bytes ratio",
    )
    rows = [header]
    for result in results:
        rebuild = result["rebuild"]
        assert isinstance(rebuild, dict)
        rows.append(
            (
                str(result["n"]),
                "rebuild",
                str(rebuild["topology"]),
                str(rebuild["routing"]),
                str(rebuild["peer_links"]),
                str(rebuild["total"]),
                f"{rebuild['bytes'] / 1024:.0f}",
                "-",
                "-",
                str(rebuild["total"]),
                f"{rebuild['bytes'] / 1024:.0f}",
                "1",
                "1",
            )
        )
        for event in result["events"]:  # type: ignore[attr-defined]
            rows.append(
                (
                    str(result["n"]),
                    event["event"],
                    str(event["topology"]),
                    str(event["routing"]),
                    str(event["peer_links"]),
                    str(event["total"]),
                    f"{event['bytes'] / 1024:.0f}",
                    "-" if event["cube_seconds"] is None else f"{event['cube_seconds']:.2f}",
                    f"{event['quiet_seconds']:.2f}",
                    str(rebuild["total"]),
                    f"{rebuild['bytes'] / 1024:.0f}",
                    f"{event['over_rebuild']:.3f}",
                    f"{event['bytes_over_rebuild']:.3f}",
                )
            )
    return aligned(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.repair", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, DEFAULT_SIZES)),
        help="comma-separated numbers of super-peers (default: %(default)s)",
    )
    parser.add_argument("--peers-per-superpeer", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    parser.add_argument(
        "--verify-wire",
        action="store_true",
        help="decode every message from its bytes on arrival (about twice as slow)",
    )
    arguments = parser.parse_args(argv)
    sizes = [int(size) for size in arguments.sizes.split(",")]
    if any(size < 4 for size in sizes):
        parser.error("sizes must be at least 4")
    # the nodes log every failure they notice (as errors); the figures say what happened
    logging.disable(logging.ERROR)
    started = time.perf_counter()
    results = [
        measure(
            size, arguments.peers_per_superpeer, arguments.seed, verify_wire=arguments.verify_wire
        )
        for size in sizes
    ]
    elapsed = round(time.perf_counter() - started, 1)
    if arguments.json:
        print(json.dumps({"seed": arguments.seed, "seconds": elapsed, "results": results}))
        return
    print(table(results))
    errors = sum(
        int(result["rebuild"]["errors"]) + sum(e["errors"] for e in result["events"])  # type: ignore[index,union-attr]
        for result in results
    )
    print(
        f"\nseed {arguments.seed}, {arguments.peers_per_superpeer} peers per super-peer, each "
        f"advertising and subscribing once; heartbeats left out; {errors} errors; {elapsed} s."
    )


if __name__ == "__main__":
    main()
