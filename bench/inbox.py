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
from pathlib import Path

from bench.catalogue import catalogue, peer, publish
from bench.columns import aligned
from deploy.cluster import Cluster

EVERY_BOOK = "X : t(X, dc:title, T)"


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drained(cluster: Cluster, j: int, count: int, timeout: float) -> tuple[float, float, float]:
    """Start subscriber ``j``; once its first record is in, the seconds until its inbox holds
    ``count`` records, with the CPU seconds its daemon and the access point took meanwhile."""
    started = time.perf_counter()
    cluster.start_peer(j, 0)
    inbox = cluster.peer_directories[j] / "notifications"
    subscriber, access_point = cluster.peer_processes[j], cluster.processes[0]
    assert subscriber is not None and access_point is not None
    while not any(inbox.glob("*.json")):
        time.sleep(0.01)
    first = time.perf_counter()
    cpu = cpu_seconds(subscriber.pid), cpu_seconds(access_point.pid)
    held = 0
    while (held := sum(1 for _ in inbox.glob("*.json"))) < count:
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"subscriber {j}'s inbox holds {held} of {count} after {timeout} s")
        time.sleep(0.05)
    return (
        time.perf_counter() - first,
        cpu_seconds(subscriber.pid) - cpu[0],
        cpu_seconds(access_point.pid) - cpu[1],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=5_000)
    parser.add_argument("--group", type=int, default=64, help="the daemon's inbox_group")
    parser.add_argument("--settings", default="", help="more of the super-peer's TOML")
    args = parser.parse_args(argv)
    print(f"load average at start {os.getloadavg()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench-inbox-"))
    cluster = Cluster(1, directory=root / "net", trace=False, settings=args.settings)
    cluster.__enter__()
    try:
        cluster.peer_directories = [root / f"peer{j}" for j in range(3)]
        groups = {1: 1, 2: args.group}  # subscriber -> its inbox_group
        cluster.start_peer(0, 0)
        for j, group in groups.items():
            cluster._peer_settings = f"inbox_group = {group}\n"
            cluster.start_peer(j, 0)
            answer = peer(cluster, j, "subscribe", EVERY_BOOK)
            if answer.returncode != 0:
                raise RuntimeError(f"subscribe failed: {answer.stderr}")
            cluster.stop_peer(j)
        cluster._peer_settings = ""
        advertisement = root / "ad.json"
        advertisement.write_text(json.dumps({"schemas": ["dc"]}))
        peer(cluster, 0, "advertise", str(advertisement))
        document = root / "catalogue.ttl"
        catalogue(document, args.resources, "b")
        seconds, report = publish(cluster, document)
        published = report.get("published")
        if published is None:  # a document smaller than a batch goes in one request
            published = sum(r["outcome"] == "published" for r in report.get("results", ()))
        if published != args.resources:
            raise RuntimeError(f"{published} of {args.resources} resources were published")
        print(f"published {args.resources:,} resources in {seconds:.1f} s", flush=True)
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
        rates = {}
        for j, group in groups.items():
            cluster._peer_settings = f"inbox_group = {group}\n"
            taken, subscriber, access_point = drained(cluster, j, args.resources, timeout=1800)
            rates[group] = args.resources / taken
            name = "baseline (a pair of syncs each)" if group == 1 else "groups"
            rows.append(
                [
                    name,
                    str(group),
                    f"{taken:.1f}",
                    f"{rates[group]:,.0f}",
                    f"{subscriber * 1e6 / args.resources:,.0f}",
                    f"{access_point * 1e6 / args.resources:,.0f}",
                    f"{args.resources / written(cluster, j):.1f}",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
        print(aligned(rows))
        print(f"ratio groups / baseline (notifications/s): {rates[args.group] / rates[1]:.1f}")
        print(f"fsync of a 1 KiB write here: {sync_milliseconds(root):.2f} ms")
        print(f"load average at end {os.getloadavg()}")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
