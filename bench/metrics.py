"""What counting metrics costs: notification throughput, and the super-peers' CPU time per
notification, with the operator endpoint on and off.

    python -m bench.metrics [--superpeers 8] [--burst 3000] [--publishers 8] [--rounds 3]
                            [--data-dir DIR] [--json]

Each round starts a fresh TLS cluster (trace files off) twice: once without the HTTP endpoint (the
baseline: no metrics counted, the node emits no trace records) and once with it (``--http``:
every trace record and every notification handed to a peer is counted; nobody scrapes during the
burst, since a scrape every 15 s costs nothing measurable). ``--publishers`` peers attached to
the super-peer at position 0 publish ``--burst`` publications between them, each waiting for the
answer to its previous one; a subscriber three hops away (position 7) takes them all.

Two figures per side: notifications delivered per second at the subscriber, from the first
publication sent to the last notification kept; and the CPU seconds (user + system, from
``/proc``) that all super-peer processes spent during that interval, per 1000 notifications.
Throughput is bounded by each super-peer's ``synchronous=FULL`` commits (one fsync per input that
changed its store), so on a shared disk it follows other programs' I/O; the CPU figure is what
the counting itself costs. ``--data-dir /dev/shm`` puts the clusters on tmpfs, where fsync is
free and the daemons are CPU-bound: the harsher test for the counting. The order alternates from
round to round so that a drift of the machine favours neither side; figures are medians, ratios
are on / off. The 1-minute load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass

import trio

import qel
from bench.analytics import load_average
from bench.network import publication
from bench.rates import cpu_seconds
from deploy.cluster import Cluster
from deploy.driver import RemotePeer, wait_quiet
from wire import messages as m


@dataclass(frozen=True, slots=True)
class Figures:
    per_second: float
    cpu_per_1000: float
    """CPU seconds of all super-peers per 1000 notifications delivered."""


async def throughput(
    superpeers: int, burst: int, publishers: int, *, http: bool, parent: str | None = None
) -> Figures:
    """See the module docstring; ``parent`` is where the cluster's directory goes."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-metrics-", dir=parent) as directory,
        Cluster(superpeers, directory=directory, trace=False, http=http) as cluster,
    ):
        ca = cluster.ca_certificate
        pids = [process.pid for process in cluster.processes if process is not None]
        sources = [
            RemotePeer(f"publisher{k}", cluster.addresses[0], ca=ca) for k in range(publishers)
        ]
        subscriber = RemotePeer("subscriber", cluster.addresses[7], ca=ca)
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

            cpu_before = cpu_seconds(pids)
            start = time.perf_counter()
            async with trio.open_nursery() as workers:
                for publisher in sources:
                    workers.start_soon(publish, publisher)
            with trio.fail_after(300):
                while len(subscriber.notifications) < burst:
                    await trio.sleep(0.005)
            elapsed = time.perf_counter() - start
            cpu = cpu_seconds(pids) - cpu_before
            for peer in (*sources, subscriber):
                await peer.disconnect()
            nursery.cancel_scope.cancel()
    return Figures(burst / elapsed, cpu / burst * 1000)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--superpeers", type=int, default=8)
    parser.add_argument("--burst", type=int, default=3000)
    parser.add_argument("--publishers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", help="where the clusters go (default: the temp directory)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures: dict[str, list[Figures]] = {"off": [], "on": []}
    load = [load_average()]
    for round_number in range(args.rounds):
        order = ("off", "on") if round_number % 2 == 0 else ("on", "off")
        for side in order:
            figures[side].append(
                trio.run(
                    lambda side=side: throughput(
                        args.superpeers,
                        args.burst,
                        args.publishers,
                        http=side == "on",
                        parent=args.data_dir,
                    )
                )
            )
    load.append(load_average())
    rates = {side: [round(f.per_second) for f in figures[side]] for side in figures}
    cpus = {side: [round(f.cpu_per_1000, 2) for f in figures[side]] for side in figures}
    rate = {side: statistics.median(rates[side]) for side in rates}
    cpu = {side: statistics.median(cpus[side]) for side in cpus}
    report = {
        "superpeers": args.superpeers,
        "burst": args.burst,
        "publishers": args.publishers,
        "data_dir": args.data_dir or tempfile.gettempdir(),
        "load_average_1m": load,
        "notifications_per_s": rates,
        "cpu_s_per_1000": cpus,
        "throughput_on_vs_off": round(rate["on"] / rate["off"], 3),
        "cpu_on_vs_off": round(cpu["on"] / cpu["off"], 3),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{args.superpeers} super-peers, TLS, burst of {args.burst} ({args.publishers} publishers),"
        f" {args.rounds} rounds, data in {report['data_dir']},"
        f" load average (1 min) {load[0]} before, {load[1]} after"
    )
    print(
        f"{'metrics':<8} {'notifications/s':<28} {'median':>7}   {'CPU s/1000':<34} {'median':>6}"
    )
    for side in ("off", "on"):
        print(
            f"{side:<8} {', '.join(map(str, rates[side])):<28} {rate[side]:>7.0f}   "
            f"{', '.join(map(str, cpus[side])):<34} {cpu[side]:>6.2f}"
        )
    print(
        f"on / off: throughput {report['throughput_on_vs_off']},"
        f" CPU per notification {report['cpu_on_vs_off']}"
    )


if __name__ == "__main__":
    main()
