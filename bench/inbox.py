"""How fast a desktop peer's daemon takes notifications into its inbox (``python -m
bench.inbox``): one TLS super-peer on loopback, a publisher's daemon and two subscribers'
daemons, each subscribed to every book of a generated catalogue.

    python -m bench.inbox [--resources 5000] [--group 64]

Both subscribers are stopped while the catalogue is published (``peer publish``), so that their
access point keeps every notification for them; then each is started alone, and the time from
its start until its inbox holds the whole catalogue is its rate. The baseline, in the same run,
is a subscriber whose daemon stores each notification with a pair of syncs of its own
(``inbox_group = 1``, the path before group commits); the other stores the notifications of one
read together (``--group``, the daemon's default). The records are counted in the inbox's
directory (each is renamed into place once synced), every 50 ms, from the first one (the
daemon's start and connection left out), with the CPU time the subscriber's daemon and the
access point took meanwhile, per notification.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.catalogue import catalogue, peer, publish
from bench.columns import aligned
from bench.rates import cpu_seconds
from deploy.cluster import Cluster
from deploy.delivery import wait_for

EVERY_BOOK = "X : t(X, dc:title, T)"


def drained(
    cluster: Cluster, j: int, settings: str, count: int, timeout: float
) -> tuple[float, float, float]:
    """Start subscriber ``j`` (``settings``: its TOML); once its first record is in, the seconds
    until its inbox holds ``count`` records, with the CPU seconds its daemon and the access
    point took meanwhile."""
    started = time.perf_counter()
    cluster.start_peer(j, 0, settings=settings)
    inbox = cluster.peer_directories[j] / "notifications"
    subscriber, access_point = cluster.peer_processes[j], cluster.processes[0]
    assert subscriber is not None and access_point is not None
    wait_for(lambda: any(inbox.glob("*.json")), timeout, f"subscriber {j}'s first record")
    first = time.perf_counter()
    cpu = cpu_seconds([subscriber.pid]), cpu_seconds([access_point.pid])
    left = timeout - (first - started)
    wait_for(
        lambda: sum(1 for _ in inbox.glob("*.json")) >= count,
        left,
        f"subscriber {j}'s inbox to hold {count} records",
    )
    return (
        time.perf_counter() - first,
        cpu_seconds([subscriber.pid]) - cpu[0],
        cpu_seconds([access_point.pid]) - cpu[1],
    )


def written(cluster: Cluster, j: int) -> int:
    """How many groups subscriber ``j``'s daemon wrote (each with its own pair of syncs)."""
    status = peer(cluster, j, "status", "--json")
    return int(json.loads(status.stdout)["inbox"]["writes"])


def sync_milliseconds(directory: Path, count: int = 200) -> float:
    """This disk's fsync of a small write, in the inbox's file system: what each group pays
    twice."""
    path = directory / "sync.test"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(count):
            os.write(descriptor, b"x" * 1024)
            os.fsync(descriptor)
        return (time.perf_counter() - started) * 1000 / count
    finally:
        os.close(descriptor)
        path.unlink()


@dataclass(frozen=True, slots=True)
class Drain:
    """One subscriber's drain: what ``drained`` measured, and how many groups it wrote."""

    group: int
    seconds: float
    subscriber_cpu: float
    access_point_cpu: float
    writes: int


def measure(resources: int, group: int, *, settings: str = "") -> list[Drain]:
    """The catalogue of ``resources`` published while both subscribers are away, then taken by
    the baseline (``inbox_group = 1``) and by one with ``group``, each alone."""
    root = Path(tempfile.mkdtemp(prefix="bench-inbox-"))
    cluster = Cluster(1, directory=root / "net", trace=False, settings=settings)
    cluster.__enter__()
    try:
        cluster.peer_directories = [root / f"peer{j}" for j in range(3)]
        groups = {1: 1, 2: group}  # subscriber -> its inbox_group
        cluster.start_peer(0, 0)
        for j, size in groups.items():
            cluster.start_peer(j, 0, settings=f"inbox_group = {size}\n")
            answer = peer(cluster, j, "subscribe", EVERY_BOOK)
            if answer.returncode != 0:
                raise RuntimeError(f"subscribe failed: {answer.stderr}")
            cluster.stop_peer(j)
        advertisement = root / "ad.json"
        advertisement.write_text(json.dumps({"schemas": ["dc"]}))
        peer(cluster, 0, "advertise", str(advertisement))
        document = root / "catalogue.ttl"
        catalogue(document, resources, "b")
        seconds, report = publish(cluster, document)
        published = report.get("published")
        if published is None:  # a document smaller than a batch goes in one request
            published = sum(r["outcome"] == "published" for r in report.get("results", ()))
        if published != resources:
            raise RuntimeError(f"{published} of {resources} resources were published")
        print(f"published {resources:,} resources in {seconds:.1f} s", flush=True)
        drains = []
        for j, size in groups.items():
            settings = f"inbox_group = {size}\n"
            taken, subscriber, access_point = drained(cluster, j, settings, resources, 1800)
            drains.append(Drain(size, taken, subscriber, access_point, written(cluster, j)))
        return drains
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=5_000)
    parser.add_argument("--group", type=int, default=64, help="the daemon's inbox_group")
    parser.add_argument("--settings", default="", help="more of the super-peer's TOML")
    args = parser.parse_args(argv)
    print(f"load average at start {os.getloadavg()}", flush=True)
    drains = measure(args.resources, args.group, settings=args.settings)
    rows = [
        [
            "subscriber",
            "inbox_group",
            "seconds, first record to all",
            "notifications/s",
            "CPU us each, subscriber",
            "CPU us each, access point",
            "notifications per write",
        ]
    ]
    for drain in drains:
        count = args.resources
        rows.append(
            [
                "baseline (a pair of syncs each)" if drain.group == 1 else "groups",
                str(drain.group),
                f"{drain.seconds:.1f}",
                f"{count / drain.seconds:,.0f}",
                f"{drain.subscriber_cpu * 1e6 / count:,.0f}",
                f"{drain.access_point_cpu * 1e6 / count:,.0f}",
                f"{count / drain.writes:.1f}",
            ]
        )
    print(aligned(rows))
    baseline, grouped = drains
    print(f"ratio groups / baseline (notifications/s): {baseline.seconds / grouped.seconds:.1f}")
    with tempfile.TemporaryDirectory() as directory:
        print(f"fsync of a 1 KiB write here: {sync_milliseconds(Path(directory)):.2f} ms")
    print(f"load average at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
