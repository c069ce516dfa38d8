"""Bulk publication on real daemons (``python -m bench.catalogue``): ``peer publish`` of a
generated catalogue end to end (one TLS super-peer on loopback, the owner's peer daemon and
subscribers' daemons), against today's one-request path for a smaller document in the same run.

    python -m bench.catalogue [--resources 200000] [--documents 1] [--baseline 2000]
                              [--subscribers 2]

Prints the command's rate for each catalogue (resources/s; reading the document with rdflib
included), with the access point's resident memory after it (``VmRSS``, peak ``VmHWM``):
``--documents 5`` makes one owner of a million resources. Then how long the subscribers' inboxes
took to hold what they should (one query matches one date in 120, the other 111 authors in 977).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.columns import aligned
from deploy.cluster import Cluster

PEER = [sys.executable, "-m", "peer.cli"]
PREFIX = (
    "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
    "@prefix lib: <http://library.example.org/item/> .\n"
)
BOOK = (
    'lib:{prefix}{n:07d} a dc:book ; dc:title "Book number {n} of the catalogue" ; '
    'dc:creator "Author {author}" ; dc:date {date} .\n'
)
QUERIES = ("X : t(X, dc:date, D), D = 2004", 'X : t(X, dc:creator, C), C contains "Author 7"')


def catalogue(path: Path, count: int, prefix: str) -> None:
    """``count`` books of four triples (about 114 bytes of Turtle each)."""
    with path.open("w") as out:
        out.write(PREFIX)
        for n in range(count):
            out.write(BOOK.format(prefix=prefix, n=n, author=n % 977, date=1900 + n % 120))


def expected(count: int) -> list[int]:
    """How many books of a catalogue each of ``QUERIES`` matches."""
    return [
        sum(1 for n in range(count) if 1900 + n % 120 == 2004),
        sum(1 for n in range(count) if "Author 7" in f"Author {n % 977}"),
    ]


def peer(cluster: Cluster, j: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PEER, *args, "--data-dir", str(cluster.peer_directories[j])],
        capture_output=True,
        text=True,
        check=False,
    )


def memory(pid: int) -> tuple[int, int]:
    """A process's resident and peak resident memory, in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024


def publish(cluster: Cluster, document: Path, *options: str) -> tuple[float, dict]:
    started = time.perf_counter()
    done = peer(cluster, 0, "publish", str(document), "--json", *options)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1) or not done.stdout:
        raise RuntimeError(f"peer publish failed: {done.stderr}")
    return seconds, json.loads(done.stdout.splitlines()[-1])


def wait_for_inboxes(cluster: Cluster, counts: list[int], timeout: float) -> float:
    """Seconds until every subscriber's inbox holds its count of records (polled)."""
    started = time.perf_counter()
    while True:
        held = [
            json.loads(peer(cluster, j, "status", "--json").stdout)["inbox"]["records"]
            for j in range(1, len(counts) + 1)
        ]
        if held >= counts:
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"the inboxes hold {held}, not {counts}")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=200_000)
    parser.add_argument("--baseline", type=int, default=2_000)
    parser.add_argument(
        "--documents", type=int, default=1, help="catalogues of --resources each, one owner"
    )
    parser.add_argument("--subscribers", type=int, default=2, choices=[0, 1, 2])
    parser.add_argument("--settings", default="", help="more of the super-peer's TOML")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-catalogue-"))
    cluster = Cluster(1, directory=root / "net", trace=False, settings=args.settings)
    cluster.__enter__()
    try:
        cluster.peer_directories = [root / f"peer{j}" for j in range(args.subscribers + 1)]
        for j in range(args.subscribers + 1):
            cluster.start_peer(j, 0)
        ad = root / "ad.json"
        ad.write_text(json.dumps({"schemas": ["dc"]}))
        peer(cluster, 0, "advertise", str(ad))
        for j in range(1, args.subscribers + 1):
            peer(cluster, j, "subscribe", QUERIES[j - 1])
        process = cluster.processes[0]
        assert process is not None
        before = memory(process.pid)
        small = root / "small.ttl"
        catalogue(small, args.baseline, "s")
        one_request, _ = publish(cluster, small, "--batch-bytes", str(1 << 30))
        rows = [
            ["what", "owner's resources", "seconds", "resources/s", "AP RSS MiB (peak)"],
            [
                "one request (today's path)",
                f"{args.baseline:,}",
                f"{one_request:.1f}",
                f"{args.baseline / one_request:,.0f}",
                f"{before[0]} ({before[1]})",
            ],
        ]
        wanted = expected(args.baseline)
        rates = []
        for number in range(args.documents):
            big = root / f"catalogue{number}.ttl"
            catalogue(big, args.resources, f"d{number}-")
            seconds, report = publish(cluster, big)
            if report["published"] != args.resources:
                raise RuntimeError(f"not everything was published: {report}")
            big.unlink()
            now = memory(process.pid)
            rates.append(args.resources / seconds)
            wanted = [a + b for a, b in zip(wanted, expected(args.resources), strict=True)]
            rows.append(
                [
                    f"peer publish in batches ({number + 1})",
                    f"{args.baseline + (number + 1) * args.resources:,}",
                    f"{seconds:.1f}",
                    f"{rates[-1]:,.0f}",
                    f"{now[0]} ({now[1]})",
                ]
            )
            print(" | ".join(rows[-1]), flush=True)
        delivered = wait_for_inboxes(cluster, wanted[: args.subscribers], 7200)
        print(aligned(rows))
        print(
            f"ratio batches / one request (resources/s): {rates[0] * one_request / args.baseline:.1f}"
        )
        print(
            f"subscribers' inboxes: {wanted[: args.subscribers]} records, complete "
            f"{delivered:.1f} s after the last command returned"
        )
        print(f"load average {Path('/proc/loadavg').read_text()}")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
