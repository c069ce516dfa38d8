"""What an update costs at the publisher's access point, beside a fresh publication, in one run.

    python -m bench.versions [--subscriptions 10000] [--publications 500] [--seed 1] [--json]

One ``SuperPeerCore`` (a one-node cube) holds ``--subscriptions`` digital-library subscriptions of
100 local peers and one publisher advertising the whole library. Timed, each through
``peer_message`` as the daemon calls it: fresh publications (baseline), updates of those resources
to another document (the version table, the old version carried along, both versions matched
against the poset) and retractions (the last version matched). The ratio is per request.
"""

from __future__ import annotations

import argparse
import json
import time

import qel
from bench.columns import aligned
from superpeer.core import CoreConfig, SuperPeerCore
from superpeer.sim.topology import hypercube_views
from wire import messages as m
from workloads.digital_library import DigitalLibrary


def _timed(core: SuperPeerCore, messages: list[object]) -> tuple[float, int]:
    """Requests per second, and notifications delivered to local peers."""
    delivered = core.statistics.delivered
    start = time.perf_counter()
    for message in messages:
        core.peer_message("publisher", message, 0, 0.0)
    elapsed = time.perf_counter() - start
    return len(messages) / elapsed, core.statistics.delivered - delivered


def run(subscriptions: int, publications: int, seed: int) -> dict[str, object]:
    library = DigitalLibrary(seed=seed)
    view = hypercube_views(["sp0"])["sp0"]
    core = SuperPeerCore("sp0", "sp0:1", view, CoreConfig(tracing=False))
    documents = [library.document(n) for n in range(2 * publications)]
    core.attach("publisher", 0.0)
    core.advertise("publisher", qel.parse_advertisement(library.advertisement(documents)), 0.0, [])
    for number in range(subscriptions):
        peer = f"peer{number % 100}"
        core.attach(peer, 0.0)
        query = qel.parse_subscription(library.subscription())
        core.subscribe(peer, str(number), query, 0.0, [])

    def publication(document: int, resource: int) -> qel.Publication:
        [parsed] = qel.parse_publications(
            library.turtle(documents[document]), publisher="publisher", id=f"r{resource}"
        )
        return parsed

    fresh = [m.Publish(publication=publication(n, n)) for n in range(publications)]
    updates = [
        m.Publish(publication=publication(publications + n, n), change="update")
        for n in range(publications)
    ]
    retractions = [m.Withdraw(id=f"r{n}") for n in range(publications)]
    fresh_rate, fresh_delivered = _timed(core, fresh)
    update_rate, update_delivered = _timed(core, updates)
    retract_rate, retract_delivered = _timed(core, retractions)
    return {
        "subscriptions": subscriptions,
        "requests": publications,
        "fresh_per_s": round(fresh_rate, 1),
        "update_per_s": round(update_rate, 1),
        "retract_per_s": round(retract_rate, 1),
        "update_cost_vs_fresh": round(fresh_rate / update_rate, 2),
        "retract_cost_vs_fresh": round(fresh_rate / retract_rate, 2),
        "fresh_notifications": fresh_delivered,
        "update_notifications": update_delivered,
        "retract_notifications": retract_delivered,
        "seed": seed,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscriptions", type=int, default=10_000)
    parser.add_argument("--publications", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(args.subscriptions, args.publications, args.seed)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        aligned(
            [
                ["request", "per s", "cost vs fresh", "notifications"],
                [
                    "fresh publish",
                    f"{report['fresh_per_s']}",
                    "1.00",
                    f"{report['fresh_notifications']}",
                ],
                [
                    "update",
                    f"{report['update_per_s']}",
                    f"{report['update_cost_vs_fresh']}",
                    f"{report['update_notifications']}",
                ],
                [
                    "retract",
                    f"{report['retract_per_s']}",
                    f"{report['retract_cost_vs_fresh']}",
                    f"{report['retract_notifications']}",
                ],
            ]
        )
    )


if __name__ == "__main__":
    main()
