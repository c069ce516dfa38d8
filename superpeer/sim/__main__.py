"""``python -m superpeer.sim WORKLOAD.jsonl --superpeers 16 [--seed 1] [--trace DIR] [--json]``"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from superpeer.core import CoreConfig
from superpeer.sim.network import Simulation
from superpeer.sim.workload import WorkloadError, read_workload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m superpeer.sim",
        description="Run a workload on a simulated super-peer network and report what each peer received.",
    )
    parser.add_argument("workload", help="JSON-lines workload (see superpeer/sim/workload.py)")
    parser.add_argument("--superpeers", type=int, default=16, help="number of super-peers (>= 1)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for the topology and interleaving"
    )
    parser.add_argument(
        "--interleave", action="store_true", help="seeded random reordering across links"
    )
    parser.add_argument("--trace", metavar="DIR", help="write one JSON-lines trace per super-peer")
    parser.add_argument(
        "--summarise-values-above",
        type=int,
        metavar="N",
        help="summarise advertised value sets larger than N (ranges / Bloom filters)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.superpeers < 1:
        parser.error("--superpeers must be at least 1")
    started = time.perf_counter()
    simulation = Simulation(
        args.superpeers,
        seed=args.seed,
        interleave=args.interleave,
        trace_dir=args.trace,
        config=CoreConfig(summarise_values_above=args.summarise_values_above),
    )
    try:
        for number, op in enumerate(read_workload(args.workload), start=1):
            simulation.apply(op, number)
        report = simulation.report()  # before ``close``, which removes the peers' files
    except (WorkloadError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        simulation.close()
    report["totals"]["wall_seconds"] = round(time.perf_counter() - started, 3)  # type: ignore[index]
    report["totals"]["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # type: ignore[index]
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        _print_human(report)
    return 0


def _print_human(report: dict) -> None:
    totals = report["totals"]
    print(
        f"{totals['superpeers']} super-peers, {totals['peers']} peers, "
        f"{totals['operations']} operations in {totals['wall_seconds']} s"
    )
    print(
        f"messages: {totals['messages']} ({totals['bytes']} bytes), backbone {totals['backbone_messages']}"
    )
    for kind, figures in report["messages"].items():
        print(f"  {kind:<18} {figures['count']:>10} {figures['bytes']:>14} bytes")
    print(
        f"deliveries: {totals['deliveries']} (kept offline: {totals['kept_offline']}, sent again: {totals['redeliveries']})"
    )
    print("hops: " + ", ".join(f"{h}: {n}" for h, n in report["hops"].items()))
    for error in report["errors"][:20]:
        print(f"error at op {error['op']} ({error['peer']}): {error['error']}")
    if len(report["errors"]) > 20:
        print(f"... and {len(report['errors']) - 20} more errors")


if __name__ == "__main__":
    sys.exit(main())
