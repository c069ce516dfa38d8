"""Bulk publication on real daemons (``python -m bench.catalogue``): ``peer publish`` of a
generated catalogue end to end (one TLS super-peer on loopback, the owner's peer daemon and
subscribers' daemons), against today's one-request path for a smaller document in the same run.

    python -m bench.catalogue [--resources 200000] [--baseline 2000] [--subscribers 2]

Prints the command's rate (resources/s; reading the document with rdflib included), what each
subscriber received (its query matches a part of the catalogue: one date in 120, one author in
977) and the access point's resident memory before and after (``VmRSS``, ``VmHWM``).
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
        small, big = root / "small.ttl", root / "catalogue.ttl"
        catalogue(small, args.baseline, "s")
        catalogue(big, args.resources, "b")
        one_request, _ = publish(cluster, small, "--batch-bytes", str(1 << 30))
        seconds, report = publish(cluster, big)
        after = memory(process.pid)
        wanted = [
            a + b for a, b in zip(expected(args.baseline), expected(args.resources), strict=True)
        ]
        delivered = wait_for_inboxes(cluster, wanted[: args.subscribers], 3600)
        print(
            aligned(
                [
                    ["what", "resources", "seconds", "resources/s"],
                    [
                        "one request (today's path)",
                        f"{args.baseline:,}",
                        f"{one_request:.1f}",
                        f"{args.baseline / one_request:,.0f}",
                    ],
                    [
                        "peer publish in batches",
                        f"{args.resources:,}",
                        f"{seconds:.1f}",
                        f"{args.resources / seconds:,.0f}",
                    ],
                ]
            )
        )
        print(f"published {report['published']:,}, refused {report['refused']}")
        print(
            f"subscribers' inboxes: {wanted[: args.subscribers]} records, complete "
            f"{delivered:.1f} s after the command returned"
        )
        print(
            f"access point memory: {before[0]} MiB before, {after[0]} MiB after "
            f"(peak {after[1]} MiB)"
        )
        print(
            f"size {big.stat().st_size:,} bytes; load average {Path('/proc/loadavg').read_text()}"
        )
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
