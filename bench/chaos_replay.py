"""The chaos harness's fault schedules, replayed in the simulator:
``python -m bench.chaos_replay [--superpeers 8] [--seeds 10] [--first-seed 0] [--duration 150]
[--overlap 2] [--wedged 60,30] [--failure 3] [--reform 9] [--slow-faults] [--json]``.

``deploy.chaos --overlap N`` on hosts of their own takes some ten minutes a run and no two runs
time alike. This replays the same schedules (``deploy.chaos.make_plan``: every kind but
``slow``, up to ``overlap`` at once, each holding its slot until one cube or 90 s after its
heal, as the harness does) on the simulator's super-peers (the real sans-IO ``SuperPeerNode`` s,
heartbeat 0.5 s, the harness's failure timeout), with no peers: what it measures is the cube.
Per fault, the simulated seconds from its heal to one cube of every live member:

* ``kill``: the process dies and starts again on its store after the hold;
* ``pause``: ``SIGSTOP`` for the hold (what was sent waits, then its overdue timer first);
* ``leave``: a clean leave; ``crash``: dies for good; ``join``: a new super-peer;
* ``cut``, ``stall``, ``isolate``: packets to and from it vanish for the hold;
* ``partition``: halves, two sides, or two sides and a bridge, of the super-peers no other
  fault holds (the harness's shapes), for the hold; cuts that overlap compose;
* the peers' faults (``peer-kill``, ``move``, ``peer-isolate``) hold a slot and touch no
  super-peer; ``skew`` is left out (the clocks issue's own checks cover it).

Each ``--wedged`` value (the watchdog, ``wedged_seconds``) runs the same schedules; the first is
the baseline the others' ratios are to; ``--reform`` is ``reform_seconds`` (the harness's, three
failure timeouts, by default). A fault still not followed by one cube 90 s after its
heal counts as ``never`` (and as 90 s in the mean). With faults overlapping, another fault may
hold the cube apart after one heals: each row says too how long one cube took from the last
heal of any fault, and how many of the ``never`` s had another fault still active at the end of
their wait (``held apart``: the cube could not be one; left out of that mean).

``--cut-only HOLD`` replays no schedule: each seed cuts a quiet cube once per shape (halves, two
sides of a drawn size, two sides and a bridge) for ``HOLD`` seconds, alone: the heal of a long
cut, where every member of a side has rejoined by the watchdog, without the storms of other
faults around it.

``--slow-faults`` lists every fault over 30 s or never followed by one cube (its seed, kind,
target, when it healed in the schedule, the seconds): the ones to trace.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from deploy.chaos import FAULTS, make_plan, partition_sides, picked
from superpeer.node import NodeConfig
from superpeer.sim import Simulation

STEP_SECONDS = 0.25
"""How often (simulated) the replay checks for one cube and due faults."""
WAIT_SECONDS = 90.0
"""A fault's slot is free once one cube follows its heal, or this long after it (the harness's
``wait_one_cube(90)``)."""
SUPERPEER_FAULTS = ("kill", "pause", "leave", "cut", "stall", "isolate", "crash")


@dataclass
class Record:
    kind: str
    target: str = ""
    heal_at: float = 0.0
    healed: float | None = None
    one_cube: float | None = None
    after_last_heal: float | None = None
    """Seconds from the last heal of any fault to that one cube (another fault may have held
    the cube apart after this one healed)."""
    held_apart: bool = False
    """Not followed by one cube, and another fault was still active at the end of the wait."""
    node: str | None = None
    held: list[str] = field(default_factory=list)


def one_cube(simulation: Simulation) -> bool:
    cubes = simulation.cubes()
    return (
        len(cubes) == 1
        and None not in cubes
        and set(next(iter(cubes.values()))) == set(simulation.nodes)
    )


class Replay:
    """One schedule on one simulated network."""

    def __init__(self, plan: dict, config: NodeConfig, seed: int) -> None:
        self.simulation = Simulation(plan["superpeers"], seed=seed, node_config=config)
        self.simulation.run_until_quiet()
        self.start = self.simulation.now
        self.plan = plan
        self.cuts: dict[int, list[set[str]]] = {}
        self.held: set[str] = set()
        self.crashed: set[str] = set()
        self.last_heal = self.start

    def _regroup(self) -> None:
        """Who reaches whom, every cut at once: a pair reaches each other if every cut lets it."""
        simulation = self.simulation
        simulation._heal()
        if not self.cuts:
            return
        groups = [set(simulation.ids)]
        for cut in self.cuts.values():
            groups = [g & side for g in groups for side in cut if g & side]
        simulation._partition([[simulation.ids.index(n) for n in sorted(g)] for g in groups])

    def _live(self) -> list[int]:
        simulation = self.simulation
        return [
            k
            for k, n in enumerate(simulation.ids)
            if n in simulation.nodes and n not in self.crashed
        ]

    def _take(self, candidates: list[int], pick: float) -> int | None:
        free = [k for k in candidates if self.simulation.ids[k] not in self.held]
        return picked(free, pick) if free else None

    def inject(self, fault: dict, number: int) -> Record:
        simulation = self.simulation
        kind, hold, pick = fault["kind"], fault["hold"], fault["pick"]
        record = Record(kind, heal_at=simulation.now + hold)
        live = self._live()
        node = None
        if kind in SUPERPEER_FAULTS:
            if kind in ("leave", "crash") and len(live) <= 2:
                kind = record.kind = "join"
            else:
                k = self._take(live, pick)
                if k is None:
                    record.heal_at = simulation.now
                    return record
                node = record.target = simulation.ids[k]
                record.held = [node]
                self.held.add(node)
        if kind == "kill":
            simulation._kill(node)
        elif kind == "pause":
            simulation._paused[node] = []
        elif kind == "leave":
            simulation._execute(node, simulation.nodes[node].leave(simulation._clock(node)))
            record.heal_at = simulation.now
        elif kind == "crash":
            simulation._kill(node)
            self.crashed.add(node)
            record.heal_at = simulation.now
        elif kind == "join":
            node = record.target = f"sp{len(simulation.ids)}"
            simulation.ids.append(node)
            simulation.stores[node] = simulation._new_store(node)
            simulation._start(node)
            record.heal_at = simulation.now
        elif kind in ("cut", "stall", "isolate"):
            self.cuts[number] = [{node}, set(simulation.ids) - {node}]
            self._regroup()
        elif kind == "partition":
            free = [k for k in live if simulation.ids[k] not in self.held]
            if len(free) < 2:
                record.heal_at = simulation.now
                return record
            record.held = [simulation.ids[k] for k in free]
            self.held.update(record.held)
            side, other = partition_sides(free, fault)
            rest = {n for k, n in enumerate(simulation.ids) if k not in free}
            self.cuts[number] = [
                {simulation.ids[k] for k in side} | rest,
                {simulation.ids[k] for k in other} | rest,
            ]
            record.target = ",".join(record.held)
            self._regroup()
        record.node = node
        return record

    def heal(self, record: Record, number: int) -> None:
        simulation = self.simulation
        node = record.node
        if record.kind == "kill" and node is not None:
            simulation._start(node)
        elif record.kind == "pause" and node in simulation._paused:
            waiting = simulation._paused.pop(node)
            if node in simulation.nodes:
                simulation._deadline_of[node] = None
                simulation._execute(node, simulation.nodes[node].timer(simulation._clock(node)))
                for pending in waiting:
                    simulation._requeue(pending, simulation.now)
        if self.cuts.pop(number, None) is not None:
            self._regroup()
        self.held.difference_update(record.held)
        record.healed = self.last_heal = simulation.now

    def run(self) -> list[Record]:
        simulation = self.simulation
        pending = [f for f in self.plan["faults"] if f["kind"] not in ("skew", "slow")]
        active: dict[int, Record] = {}
        records: list[Record] = []
        slots = self.plan["overlap"]
        end = self.start + self.plan["duration"] + 600
        while simulation.now < end and (pending or active):
            while pending and pending[0]["at"] <= simulation.now - self.start and slots:
                slots -= 1
                number = len(records)
                active[number] = self.inject(pending.pop(0), number)
                records.append(active[number])
            for number, record in active.items():
                if record.healed is None and simulation.now >= record.heal_at:
                    self.heal(record, number)
            whole = one_cube(simulation)
            for number, record in list(active.items()):
                if record.healed is None:
                    continue
                if whole or simulation.now - record.healed >= WAIT_SECONDS:
                    record.one_cube = simulation.now - record.healed if whole else None
                    if whole:
                        record.after_last_heal = simulation.now - self.last_heal
                    else:
                        record.held_apart = any(r.healed is None for r in active.values())
                    del active[number]
                    slots += 1
            simulation._advance(simulation.now + STEP_SECONDS)
        return records


def cut_plans(superpeers: int, seed: int, hold: float) -> list[dict]:
    """One plan per shape of cut (``partition_sides``), each a single cut of ``hold`` seconds."""
    return [
        {
            "superpeers": superpeers,
            "overlap": 1,
            "duration": 0.0,
            "faults": [
                {
                    "kind": "partition",
                    "at": 1.0,
                    "hold": hold,
                    "pick": seed * 0.137 % 1,
                    "shape": shape,
                    "cut": seed * 0.31 % 1,
                }
            ],
        }
        for shape in ("halves", "cut", "bridge")
    ]


def measure(
    superpeers: int,
    seeds: int,
    duration: float,
    overlap: int,
    wedged: float,
    failure: float,
    cut_hold: float | None = None,
    first_seed: int = 0,
    reform: float = 9.0,
) -> dict[str, object]:
    config = NodeConfig(
        heartbeat_seconds=0.5,
        failure_seconds=failure,
        wedged_seconds=wedged,
        reform_seconds=reform,
    )
    kinds = [k for k in FAULTS if k != "slow"]
    times: list[float] = []
    quiet: list[float] = []  # from the last heal of any fault, the faults held apart left out
    over = never = quiet_over = held_apart = 0
    worst: dict[str, float] = {}
    slow: list[dict[str, object]] = []
    runs: list[tuple[int, dict]] = []
    for seed in range(first_seed, first_seed + seeds):
        if cut_hold is not None:
            runs += [(seed, plan) for plan in cut_plans(superpeers, seed, cut_hold)]
            continue
        plan = make_plan(
            seed=seed, duration=duration, superpeers=superpeers, peers=4, faults=kinds,
            rate=4.0, overlap=overlap, hosts="netns",
        )  # fmt: skip
        runs.append((seed, plan))
    for seed, plan in runs:
        replay = Replay(plan, config, seed)
        for record in replay.run():
            seconds = WAIT_SECONDS if record.one_cube is None else record.one_cube
            times.append(seconds)
            never += record.one_cube is None
            over += record.one_cube is not None and record.one_cube > 30.0
            held_apart += record.held_apart
            if not record.held_apart:
                after = record.after_last_heal
                quiet.append(WAIT_SECONDS if after is None else after)
                quiet_over += after is not None and after > 30.0
            worst[record.kind] = max(worst.get(record.kind, 0.0), seconds)
            if record.one_cube is None or record.one_cube > 30.0:
                healed = (record.healed or record.heal_at) - replay.start
                slow.append({
                    "seed": seed, "kind": record.kind, "target": record.target,
                    "healed": round(healed, 2), "seconds": record.one_cube,
                })  # fmt: skip
    return {
        "wedged": wedged,
        "faults": len(times),
        "mean": statistics.fmean(times),
        "median": statistics.median(times),
        "over_30": over,
        "never": never,
        "after_last_heal": {
            "mean": statistics.fmean(quiet) if quiet else 0.0,
            "over_30": quiet_over,
            "never": never - held_apart,
            "held_apart": held_apart,
        },
        "worst": dict(sorted(worst.items())),
        "slow_faults": slow,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos_replay", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--superpeers", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--duration", type=float, default=150.0)
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--wedged", default="60,30", help="watchdog values; the first: baseline")
    parser.add_argument("--failure", type=float, default=3.0, help="failure_seconds")
    parser.add_argument("--reform", type=float, default=9.0, help="reform_seconds")
    parser.add_argument("--cut-only", type=float, metavar="HOLD",
                        help="no schedule: one cut of each shape per seed, HOLD seconds long")  # fmt: skip
    parser.add_argument("--slow-faults", action="store_true",
                        help="list each fault over 30 s or never followed by one cube")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the simulated daemons log every failure they see
    rows = []
    for wedged in args.wedged.split(","):
        row = measure(
            args.superpeers, args.seeds, args.duration, args.overlap, float(wedged),
            args.failure, args.cut_only, args.first_seed, args.reform,
        )  # fmt: skip
        if not args.slow_faults:
            del row["slow_faults"]
        rows.append(row)
    if args.json:
        print(json.dumps({"load": os.getloadavg()[0], "rows": rows}))
        return
    what = (
        f"seeds {args.first_seed} to {args.first_seed + args.seeds - 1}, 3 cuts of "
        f"{args.cut_only:g} s each, alone"
        if args.cut_only is not None
        else f"{args.seeds} schedules of {args.duration:.0f} s (seeds {args.first_seed} to "
        f"{args.first_seed + args.seeds - 1}), overlap {args.overlap}"
    )
    print(
        f"{args.superpeers} super-peers, {what}, failure {args.failure:g} s; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'wedged s':>8} {'faults':>6} {'mean s':>7} {'median':>7} {'>30 s':>6} {'never':>6} "
        f"{'ratio':>6}"
    )
    base = rows[0]["mean"]
    for row in rows:
        print(
            f"{row['wedged']:>8.0f} {row['faults']:>6} {row['mean']:>7.1f} {row['median']:>7.1f} "
            f"{row['over_30']:>6} {row['never']:>6} {row['mean'] / base:>6.2f}"
        )
        print(
            "         worst per kind: " + ", ".join(f"{k} {v:.0f}" for k, v in row["worst"].items())
        )
        quiet = row["after_last_heal"]
        print(
            f"         from the last heal of any fault: mean {quiet['mean']:.1f} s, "
            f"{quiet['over_30']} over 30 s, {quiet['never']} never "
            f"({quiet['held_apart']} more held apart by a fault still active at the end)"
        )
        for fault in row.get("slow_faults", []):
            seconds = "never" if fault["seconds"] is None else f"{fault['seconds']:.1f} s"
            print(
                f"         seed {fault['seed']}: {fault['kind']} {fault['target']} healed at "
                f"{fault['healed']:.1f} s: {seconds}"
            )


if __name__ == "__main__":
    main()
