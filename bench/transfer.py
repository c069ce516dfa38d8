"""Resource transfer on real daemons (``python -m bench.transfer``): the rate of ``peer fetch`` for
a large file (owner online, relayed by the two access points over TLS, loopback) against ``cat``
of the same file over one plain TLS socket in the same run, and the backbone messages one
rendezvous costs for each cube size asked for.

The fetch is timed twice: the daemon's work (the ``fetch`` command sent on its control socket
from this process: the request, the relay, the verification, the file in place), and the
``peer fetch`` command line of the same file once it is here (the command's own start-up, a
constant of the Python interpreter and the imports, paid on top by a user who types it).

    python -m bench.transfer [--megabytes 100] [--superpeers 2 4 8]

The first size of ``--superpeers`` runs the rate; every size runs a small (one chunk) rendezvous
whose ``sp.rendezvous`` / ``sp.rendezvous_chunk`` messages are counted from the daemons' status.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import crypto
from bench.columns import aligned
from bench.rates import cpu_seconds
from deploy.cluster import Cluster
from deploy.delivery import wait_for
from peer.control import ControlClient

PEER = [sys.executable, "-m", "peer.cli"]
PAPER = '@prefix dc: <http://purl.org/dc/elements/1.1/> .\n<http://example.org/{name}> dc:title "{name}" .\n'
KINDS = ("sp.rendezvous", "sp.rendezvous_chunk")


def peer(cluster: Cluster, j: int, *args: str) -> str:
    return subprocess.run(
        [*PEER, *args, "--data-dir", str(cluster.peer_directories[j])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def tls_cat(cluster: Cluster, path: Path) -> float:
    """Seconds to send ``path`` over one TLS 1.3 connection on loopback and read it all."""
    identity = cluster.directories[0] / "identity"
    server = crypto.server_context(
        certificate=identity / "cert.pem", key=identity / "key.pem", ca=identity / "ca.pem"
    )
    client = crypto.peer_client_context(ca=identity / "ca.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        with server.wrap_socket(connection, server_side=True) as secure, path.open("rb") as f:
            while block := f.read(1 << 20):
                secure.sendall(block)

    thread = threading.Thread(target=serve)
    thread.start()
    started = time.perf_counter()
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        client.wrap_socket(raw, server_hostname="127.0.0.1") as secure,
    ):
        try:
            while secure.recv(1 << 20):
                pass
        except ssl.SSLEOFError:
            pass
    elapsed = time.perf_counter() - started
    thread.join()
    listener.close()
    return elapsed


def network(size: int, root: Path) -> Cluster:
    cluster = Cluster(size, directory=root / f"n{size}", trace=False)
    cluster.__enter__()
    cluster.peer_directories = [cluster.root / "owner", cluster.root / "requester"]
    cluster.start_peer(0, 0)
    cluster.start_peer(1, size - 1)  # the farthest super-peer: log2 N hops
    ad = cluster.root / "ad.json"
    ad.write_text(json.dumps({"schemas": ["dc"]}))
    peer(cluster, 0, "advertise", str(ad))
    peer(cluster, 1, "subscribe", "X : t(X, dc:title, T)")
    return cluster


@dataclass(frozen=True)
class Timing:
    published: float
    """Seconds of ``peer publish --file``."""
    fetched: float
    """Seconds of the fetch, as the requester's daemon does it."""
    command: float
    """Seconds of ``peer fetch`` of the file once it is here (the command's start-up)."""
    cpu: dict[str, float]
    """CPU seconds (user + system, every thread) each daemon spent during the fetch."""


def daemons(cluster: Cluster) -> dict[str, int]:
    """The process ids of the super-peers and of the two peers (owner, requester)."""
    found = {f"sp{k}": p.pid for k, p in enumerate(cluster.processes) if p is not None}
    names = ("owner", "requester")
    found.update(
        {n: p.pid for n, p in zip(names, cluster.peer_processes, strict=True) if p is not None}
    )
    return found


def publish_and_fetch(cluster: Cluster, name: str, data: Path) -> Timing:
    """Publish ``data`` with ``name``, fetch it (the daemon's work, timed with the CPU each
    daemon spent) and run ``peer fetch`` on it once it is here (the command line's start-up)."""
    document = cluster.root / f"{name}.ttl"
    document.write_text(PAPER.format(name=name))
    started = time.perf_counter()
    peer(cluster, 0, "publish", str(document), "--id", name, "--file", str(data))
    published = time.perf_counter() - started
    wait_for(lambda: name in peer(cluster, 1, "inbox", "--json"), 60, f"{name}'s notification")
    control = cluster.peer_directories[1] / "control.sock"
    pids = daemons(cluster)
    before = {n: cpu_seconds([pid]) for n, pid in pids.items()}
    started = time.perf_counter()
    with ControlClient(control, timeout=900.0) as client:
        ok, found = client.call("fetch", publication=name, wait="900")
    fetched = time.perf_counter() - started
    cpu = {n: cpu_seconds([pid]) - before[n] for n, pid in pids.items()}
    if not ok or found["state"] != "done":
        raise RuntimeError(f"the fetch did not complete: {found}")
    started = time.perf_counter()
    found = json.loads(peer(cluster, 1, "fetch", name, "--json"))
    command = time.perf_counter() - started
    if found["state"] != "done":
        raise RuntimeError(f"the fetch is not done: {found}")
    return Timing(published=published, fetched=fetched, command=command, cpu=cpu)


def messages(cluster: Cluster) -> int:
    total = 0
    for k in cluster.live():
        sent = cluster.status(k).get("messages", {}).get("sent", {})
        total += sum(sent.get(kind, 0) for kind in KINDS)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--superpeers", type=int, nargs="+", default=[2])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-transfer-") as directory:
        return _run(args, Path(directory))  # the file, its copies and the stores: gone after


def _run(args: argparse.Namespace, root: Path) -> int:
    big = root / "big.bin"
    with big.open("wb") as f:
        for _ in range(args.megabytes):
            f.write(os.urandom(1 << 20))
    small = root / "small.bin"
    small.write_bytes(os.urandom(100_000))
    rows = [["superpeers", "messages / rendezvous (100 kB)", "bit-fixing hops"]]
    for number, size in enumerate(args.superpeers):
        cluster = network(size, root)
        try:
            if number == 0:
                baseline = tls_cat(cluster, big)
                timing = publish_and_fetch(cluster, "big", big)
                published, fetched, command = timing.published, timing.fetched, timing.command
                megabytes = args.megabytes
                print(
                    aligned(
                        [
                            ["what", "seconds", "MB/s"],
                            [
                                "cat over one TLS socket",
                                f"{baseline:.2f}",
                                f"{megabytes / baseline:.1f}",
                            ],
                            [
                                "peer publish --file (copy + hash)",
                                f"{published:.2f}",
                                f"{megabytes / published:.1f}",
                            ],
                            [
                                "fetch (owner online, relayed)",
                                f"{fetched:.2f}",
                                f"{megabytes / fetched:.1f}",
                            ],
                            ["peer fetch start-up (file here)", f"{command:.2f}", ""],
                        ]
                    )
                )
                print(f"ratio fetch / cat (time): {fetched / baseline:.1f}")
                print(
                    f"ratio (fetch + start-up) / cat (time): {(fetched + command) / baseline:.1f}"
                )
                spent = ", ".join(f"{n} {seconds:.2f}" for n, seconds in timing.cpu.items())
                print(f"CPU seconds during the fetch: {spent}")
                print(
                    "load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}\n".format(*os.getloadavg())
                )
            before = messages(cluster)
            publish_and_fetch(cluster, f"small{size}", small)
            first = cluster.status(0)["positions"][0]
            last = cluster.status(size - 1)["positions"][0]
            hops = (first ^ last).bit_count()
            rows.append([str(size), str(messages(cluster) - before), str(hops)])
        finally:
            cluster.stop()
    print(aligned(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
