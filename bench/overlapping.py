"""Overlapping faults around one super-peer, in the simulator:
``python -m bench.overlapping [--fault pair|crash-cut|kill-pause|kill-leave] [--sizes 4,8,16,32]
[--seeds 20] [--json]``.

For each size N and seed the simulator (``superpeer.sim.Simulation``: the real sans-IO
``SuperPeerNode`` s, heartbeat 0.5 s, failure timeout 2 s, 2 ms per hop) builds the cube, picks a
seeded member and one of its neighbours, and:

* ``pair``: kills both at the same instant (kill -9 of two machines in one rack); the figure is
  the time from the crash to one cube that holds neither.
* ``crash-cut``: kills the member for good while the neighbour is cut off from everyone for 30 s
  (the chaos harness's crash during an isolate); the figure is the time from the heal to one
  cube of every live member, the cut-off one included (it rejoins).
* ``kill-pause``: after one member left, kills the member and stops the neighbour (``SIGSTOP``)
  for 4.8 s at the same instant, and starts the killed one again 6 s after the kill (the chaos
  harness's kill and pause overlapping); the figure is the time from the kill to one cube of
  every member.
* ``kill-leave``: kills the member while the neighbour leaves cleanly (SIGTERM: its walk hands
  its place on) at the same instant, and starts the killed one again ``KILL_LEAVE_RESTART``
  seconds later, while its old place is still being repaired (the chaos harness's kill and
  leave overlapping); the figure is the time from the kill to one cube of every member left.

A run that is not one cube after an hour of simulated time counts as 3,600 s. The baseline,
measured in the same run on the same cubes: the member crashing alone, and each figure's ratio to
it. ``BOUND`` is what ``tests/superpeer/test_concurrent_faults`` holds ``pair`` and
``crash-cut`` to.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
from collections.abc import Callable, Sequence

from superpeer.sim import Simulation
from superpeer.sim.network import SimulationStuck

BOUND = 12.0
DEFAULT_SIZES = (4, 6, 7, 8, 9, 12, 16, 32)
CUT_SECONDS = 30.0
PAUSE_SECONDS = 4.8
RESTART_SECONDS = 6.0
KILL_LEAVE_RESTART = 1.6


def _pick(simulation: Simulation, seed: int) -> tuple[str, str]:
    """A seeded member and one of its neighbours."""
    chosen = random.Random(seed)
    first = chosen.choice([n for n in simulation.ids if n in simulation.nodes])
    neighbours = sorted(simulation.nodes[first].core.view.neighbours())
    return first, chosen.choice(neighbours)


def _settle(simulation: Simulation, done: Callable[[], bool], since: float) -> float:
    try:
        simulation.run_until_quiet(until=done)
    except SimulationStuck:
        return 3600.0
    return simulation.now - since


def _one_cube(simulation: Simulation, gone: Sequence[str], *, everyone: bool) -> bool:
    cubes = simulation.cubes()
    return (
        len(cubes) == 1
        and None not in cubes
        and all(map(simulation._repaired, gone))
        and (not everyone or set(next(iter(cubes.values()))) == set(simulation.nodes))
    )


def time_to_one_cube(superpeers: int, seed: int, *, fault: str) -> float:
    """Simulated seconds to one cube after ``fault`` (``alone``: the member crashes alone)."""
    simulation = Simulation(superpeers, seed=seed)
    simulation.run_until_quiet()
    if fault == "kill-pause":
        simulation._superpeer_leave(random.Random(-seed).randrange(superpeers))
        simulation.run_until_quiet()
    first, neighbour = _pick(simulation, seed)
    started = simulation.now
    if fault in ("alone", "pair"):
        victims = [first, neighbour] if fault == "pair" else [first]
        for victim in victims:
            simulation._kill(victim)
        return _settle(simulation, lambda: _one_cube(simulation, victims, everyone=False), started)
    simulation._kill(first)
    if fault == "kill-leave":
        leaver = simulation.nodes[neighbour]
        simulation._execute(neighbour, leaver.leave(simulation._clock(neighbour)))
        simulation._advance(started + KILL_LEAVE_RESTART)
        simulation._start(first)
        return _settle(simulation, lambda: _one_cube(simulation, [], everyone=True), started)
    if fault == "crash-cut":
        simulation._partition([[simulation.ids.index(neighbour)]])
        simulation._advance(simulation.now + CUT_SECONDS)
        simulation._heal()
        healed = simulation.now
        return _settle(simulation, lambda: _one_cube(simulation, [first], everyone=True), healed)
    # kill-pause: what the process would have read waits in its sockets, then it goes on
    simulation._paused[neighbour] = []
    simulation._advance(simulation.now + PAUSE_SECONDS)
    held = simulation._paused.pop(neighbour)
    simulation._deadline_of[neighbour] = None
    simulation._execute(neighbour, simulation.nodes[neighbour].timer(simulation._clock(neighbour)))
    for pending in held:
        simulation._requeue(pending, simulation.now)
    simulation._advance(started + RESTART_SECONDS)
    simulation._start(first)
    return _settle(simulation, lambda: _one_cube(simulation, [], everyone=True), started)


def measure(sizes: Sequence[int], seeds: int, fault: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for superpeers in sizes:
        alone = [time_to_one_cube(superpeers, s, fault="alone") for s in range(seeds)]
        both = [time_to_one_cube(superpeers, s, fault=fault) for s in range(seeds)]
        rows.append(
            {
                "superpeers": superpeers,
                "seeds": seeds,
                "alone_median": statistics.median(alone),
                "together_median": statistics.median(both),
                "together_max": max(both),
                "over_bound": sum(t > BOUND for t in both),
                "ratio_median": statistics.median(both) / statistics.median(alone),
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overlapping", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--fault", choices=("pair", "crash-cut", "kill-pause", "kill-leave"), default="pair"
    )
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the simulated daemons log every failure they see
    rows = measure([int(n) for n in args.sizes.split(",")], args.seeds, args.fault)
    if args.json:
        print(
            json.dumps(
                {"fault": args.fault, "bound": BOUND, "load": os.getloadavg()[0], "rows": rows}
            )
        )
        return
    print(
        f"{args.fault}: simulated seconds to one cube (bound {BOUND:.0f} s), load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'N':>4} {'alone p50':>10} {'fault p50':>9} {'fault max':>9} {'over':>6} {'ratio':>6}")
    for row in rows:
        print(
            f"{row['superpeers']:>4} {row['alone_median']:>10.1f} {row['together_median']:>9.1f} "
            f"{row['together_max']:>9.1f} {row['over_bound']:>3}/{row['seeds']:<2} "
            f"{row['ratio_median']:>6.2f}"
        )


if __name__ == "__main__":
    main()
