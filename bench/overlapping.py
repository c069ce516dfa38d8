"""Two neighbouring super-peers that crash at once, in the simulator:
``python -m bench.overlapping [--sizes 4,8,16,32] [--seeds 20] [--json]``.

For each size N and seed the simulator (``superpeer.sim.Simulation``: the real sans-IO
``SuperPeerNode`` s, heartbeat 0.5 s, failure timeout 2 s, 2 ms per hop) builds the cube, then
kills a seeded member and one of its neighbours at the same instant (kill -9 of two machines in
one rack). The figure is the simulated time from the crash to one cube that holds neither: every
live member a member of the same cube (same dimension and root) and no member's table naming
either. A run that is not one cube after an hour of simulated time counts as 3,600 s.

The baseline, measured in the same run on the same cubes: one member crashing alone (the first of
the two), and each figure's ratio to it. ``BOUND`` is what ``tests/superpeer/test_concurrent_faults``
holds the two-at-once repair to.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
from collections.abc import Sequence

from superpeer.sim import Simulation
from superpeer.sim.network import SimulationStuck

BOUND = 12.0
DEFAULT_SIZES = (4, 6, 7, 8, 9, 12, 16, 32)


def time_to_one_cube(superpeers: int, seed: int, *, together: bool) -> float:
    """Simulated seconds from the crash of one member (and, with ``together``, one of its
    neighbours at the same instant) to one cube without them."""
    simulation = Simulation(superpeers, seed=seed)
    simulation.run_until_quiet()
    chosen = random.Random(seed)
    first = chosen.choice(simulation.ids)
    neighbours = sorted(simulation.nodes[first].core.view.neighbours())
    victims = [first, chosen.choice(neighbours)] if together else [first]
    crashed = simulation.now
    for victim in victims:
        simulation._kill(victim)

    def one_cube() -> bool:
        cubes = simulation.cubes()
        return len(cubes) == 1 and None not in cubes and all(map(simulation._repaired, victims))

    try:
        simulation.run_until_quiet(until=one_cube)
    except SimulationStuck:
        return 3600.0
    return simulation.now - crashed


def measure(sizes: Sequence[int], seeds: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for superpeers in sizes:
        alone = [time_to_one_cube(superpeers, s, together=False) for s in range(seeds)]
        both = [time_to_one_cube(superpeers, s, together=True) for s in range(seeds)]
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
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the simulated daemons log every failure they see
    rows = measure([int(n) for n in args.sizes.split(",")], args.seeds)
    if args.json:
        print(json.dumps({"bound": BOUND, "load": os.getloadavg()[0], "rows": rows}))
        return
    print(f"two neighbours crashing at once; simulated seconds to one cube (bound {BOUND:.0f} s)")
    print(f"{'N':>4} {'alone p50':>10} {'both p50':>9} {'both max':>9} {'over':>6} {'ratio':>6}")
    for row in rows:
        print(
            f"{row['superpeers']:>4} {row['alone_median']:>10.1f} {row['together_median']:>9.1f} "
            f"{row['together_max']:>9.1f} {row['over_bound']:>3}/{row['seeds']:<2} "
            f"{row['ratio_median']:>6.2f}"
        )


if __name__ == "__main__":
    main()
