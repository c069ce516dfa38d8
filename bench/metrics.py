"""What counting metrics costs: notification throughput with the operator endpoint on and off.

    python -m bench.metrics [--superpeers 8] [--burst 3000] [--publishers 8] [--rounds 3] [--json]

Each round starts a fresh TLS cluster (trace files off) twice: once without the HTTP endpoint (the
baseline: no metrics counted, the node emits no trace records) and once with it (``--http``:
every trace record and every notification handed to a peer is counted; nobody scrapes during the
burst, since a scrape every 15 s costs nothing measurable). ``--publishers`` peers attached to
the super-peer at position 0 publish ``--burst`` publications between them, each waiting for the
answer to its previous one; a subscriber three hops away (position 7) takes them all; the figure is notifications delivered
per second at the subscriber, from the first publication sent to the last notification kept. The
order alternates from round to round so that a drift of the machine favours neither side; the
figures are the medians, and the ratio is on / off.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import trio

import qel
from bench.network import publication
from deploy.cluster import Cluster
from deploy.driver import RemotePeer, wait_quiet
from wire import messages as m


async def throughput(superpeers: int, burst: int, publishers: int, *, http: bool) -> float:
    """Notifications per second delivered to the subscriber (see the module docstring)."""
    with Cluster(superpeers, trace=False, http=http) as cluster:
        ca = cluster.ca_certificate
        sources = [
            RemotePeer(f"publisher{k}", cluster.addresses[0], ca=ca) for k in range(publishers)
        ]
        subscriber = RemotePeer("subscriber", cluster.addresses[7], ca=cluster.ca_certificate)
        async with trio.open_nursery() as nursery:
            await subscriber.connect(nursery)
            advertisement = qel.parse_advertisement({"schemas": ["dc"]})
            for publisher in sources:
                await publisher.connect(nursery)
                await publisher.request(m.Advertise(advertisement=advertisement))
            query = qel.parse_subscription("X : t(X, dc:title, T)")
            await subscriber.request(m.Subscribe(id="all", subscription=query))
            await wait_quiet(cluster, [*sources, subscriber])
            numbers = iter(range(burst))

            async def publish(publisher: RemotePeer) -> None:
                for number in numbers:
                    await publisher.request(m.Publish(publication=publication(number)))

            start = time.perf_counter()
            async with trio.open_nursery() as workers:
                for publisher in sources:
                    workers.start_soon(publish, publisher)
            with trio.fail_after(300):
                while len(subscriber.notifications) < burst:
                    await trio.sleep(0.005)
            elapsed = time.perf_counter() - start
            for peer in (*sources, subscriber):
                await peer.disconnect()
            nursery.cancel_scope.cancel()
    return burst / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--superpeers", type=int, default=8)
    parser.add_argument("--burst", type=int, default=3000)
    parser.add_argument("--publishers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures: dict[str, list[int]] = {"off": [], "on": []}
    for round_number in range(args.rounds):
        order = ("off", "on") if round_number % 2 == 0 else ("on", "off")
        for side in order:
            rate = trio.run(
                lambda side=side: throughput(
                    args.superpeers, args.burst, args.publishers, http=side == "on"
                )
            )
            figures[side].append(round(rate))
    off, on = statistics.median(figures["off"]), statistics.median(figures["on"])
    report = {
        "superpeers": args.superpeers,
        "burst": args.burst,
        "publishers": args.publishers,
        "rounds": figures,
        "median_off_per_s": off,
        "median_on_per_s": on,
        "on_vs_off": round(on / off, 3),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{args.superpeers} super-peers, TLS, burst of {args.burst} ({args.publishers} publishers),"
        f" {args.rounds} rounds"
    )
    print(f"{'metrics':<10} {'rounds (notifications/s)':<32} {'median':>8}")
    for side, median in (("off", off), ("on", on)):
        print(f"{side:<10} {', '.join(map(str, figures[side])):<32} {median:>8.0f}")
    print(f"on / off: {report['on_vs_off']}")


if __name__ == "__main__":
    main()
