"""End-to-end latency and throughput of a loopback cluster, beside the transport's floor.

    python -m bench.network [--sizes 8,16] [--rate 1000] [--seconds 5] [--burst 5000]
                            [--handshakes 200] [--json]

For each cluster size, with TLS and identification (the default) and again in plaintext: N
super-peer daemons on 127.0.0.1 (separate processes, trace logs off), a publisher attached to the
super-peer at position 0 and a subscriber three hops away (position 7).
The subscriber takes everything the publisher publishes. Measured, with one clock (both ends live
in this process):

* latency at a fixed offered load (``--rate`` publications/s for ``--seconds``): publish sent ->
  notification in the subscriber's hands, p50/p90/p99, and the super-peer hops taken;
* sustained throughput: ``--burst`` publications sent as fast as the publisher's connection takes
  them, notifications delivered per second at the subscriber.

The floor, in the same run: the same notifications (same framing, same msgpack encoding, decoded at
the other end) sent over one TCP connection to a second process, at the same rate and as a burst.
Connection set-up: peers connecting to one super-peer one after the other, each a TCP connection,
a TLS 1.3 handshake and a secure identification (registration, then re-identification), beside
plaintext connections, per second.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time

import trio

import qel
import wire
from deploy.cluster import Cluster, free_ports
from deploy.driver import RemotePeer, wait_quiet
from qel.terms import XSD_INTEGER
from wire import messages as m
from wire.framing import frame

TITLE = "http://purl.org/dc/elements/1.1/title"
DATE = "http://purl.org/dc/elements/1.1/date"


def publication(number: int) -> qel.Publication:
    statements = {
        (qel.URI(TITLE), qel.Literal(f"Document {number} on semantic publish/subscribe")),
        (qel.URI(DATE), qel.Literal(str(2000 + number % 25), XSD_INTEGER)),
    }
    return qel.Publication(
        qel.URI(f"http://bench.example.org/doc{number}"),
        frozenset(statements),
        "publisher",
        f"n{number}",
    )


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered)) - 1))]

    return {
        "p50_ms": round(rank(0.50) * 1000, 3),
        "p90_ms": round(rank(0.90) * 1000, 3),
        "p99_ms": round(rank(0.99) * 1000, 3),
        "p999_ms": round(rank(0.999) * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


async def _publish_stream(
    publisher: RemotePeer,
    numbers: range,
    rate: float | None,
    sent_at: dict[str, float],
    subscriber: RemotePeer,
    window: int = 500,
) -> None:
    """Publish without waiting for each Ack (``request_nowait``): at ``rate``, or as fast as the
    network delivers, keeping at most ``window`` notifications in flight (more would only fill the
    subscriber's queue at its access point, which then detaches it, by design)."""
    start = time.perf_counter()
    already = len(subscriber.notifications)
    for index, number in enumerate(numbers):
        if rate is not None:
            target = start + index / rate
            delay = target - time.perf_counter()
            if delay > 0:
                await trio.sleep(delay)
        else:
            while index - (len(subscriber.notifications) - already) >= window:
                await trio.sleep(0.0005)
        sent_at[f"n{number}"] = time.perf_counter()
        await publisher.request_nowait(m.Publish(publication=publication(number)))


async def _until_received(subscriber: RemotePeer, count: int, timeout: float) -> None:
    with trio.fail_after(timeout):
        while len(subscriber.notifications) < count:
            if not subscriber.connected:
                raise RuntimeError("the subscriber's access point disconnected it (queue full)")
            await trio.sleep(0.002)


async def measure_cluster(
    size: int, rate: float, seconds: float, burst: int, tls: bool
) -> dict[str, object]:
    with Cluster(size, trace=False, tls=tls) as cluster:
        ca = cluster.ca_certificate if tls else None
        publisher = RemotePeer("publisher", cluster.addresses[0], ca=ca)
        subscriber = RemotePeer("subscriber", cluster.addresses[7], ca=ca)
        received_at: dict[str, float] = {}
        async with trio.open_nursery() as nursery:
            await publisher.connect(nursery)
            await subscriber.connect(nursery)
            original = subscriber._take

            def stamp(notify: m.Notify) -> None:
                received_at[notify.publication.id] = time.perf_counter()
                original(notify)

            subscriber._take = stamp  # type: ignore[method-assign]
            await publisher.request(
                m.Advertise(advertisement=qel.parse_advertisement({"schemas": ["dc"]}))
            )
            await subscriber.request(
                m.Subscribe(id="all", subscription=qel.parse_subscription("X : t(X, dc:title, T)"))
            )
            await wait_quiet(cluster, [publisher, subscriber])
            sent_at: dict[str, float] = {}
            paced = range(int(rate * seconds))
            # The measuring process's own pauses must not count as network latency: a full
            # collection over the notifications kept so far stalls both ends here for ~20 ms.
            gc.collect()
            gc.disable()
            try:
                await _publish_stream(publisher, paced, rate, sent_at, subscriber)
                await _until_received(subscriber, len(paced), 120)
            finally:
                gc.enable()
            latency = [received_at[k] - sent_at[k] for k in sent_at]
            hops = {n.hops for n in subscriber.notifications}
            subscriber.notifications.clear()
            burst_sent: dict[str, float] = {}
            numbers = range(len(paced), len(paced) + burst)
            start = time.perf_counter()
            await _publish_stream(publisher, numbers, None, burst_sent, subscriber)
            await _until_received(subscriber, burst, 300)
            elapsed = max(received_at[f"n{n}"] for n in numbers) - start
            for peer in (publisher, subscriber):
                await peer.disconnect()
            nursery.cancel_scope.cancel()
    return {
        "superpeers": size,
        "tls": tls,
        "hops": sorted(hops),
        "offered_per_s": rate,
        "latency": percentiles(latency),
        "throughput_per_s": round(burst / elapsed),
    }


RECEIVER = """
import socket, sys, time, json
import wire
from wire.framing import FrameDecoder
server = socket.socket(); server.bind(("127.0.0.1", int(sys.argv[1]))); server.listen(1)
print("ready", flush=True)
conn, _ = server.accept(); decoder = FrameDecoder(); stamps = {}
while True:
    data = conn.recv(65536)
    if not data:
        break
    now = time.time()
    for payload in decoder.feed(data):
        message, _ = wire.decode(payload)
        stamps[message.publication.id] = now
print(json.dumps(stamps), flush=True)
"""


def measure_floor(rate: float, seconds: float, burst: int) -> dict[str, object]:
    """One TCP connection to another process, same frames, same decoding at the other end."""
    results = {}
    for count, paced in ((int(rate * seconds), True), (burst, False)):
        port = free_ports(1)[0]
        process = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, str(port)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert process.stdout is not None
            process.stdout.readline()
            import socket

            with socket.create_connection(("127.0.0.1", port)) as sock:
                sent = {}
                start = time.time()
                for index in range(count):
                    if paced:
                        delay = start + index / rate - time.time()
                        if delay > 0:
                            time.sleep(delay)
                    notify = m.Notify(
                        publication=publication(index),
                        subscriptions=("all",),
                        owner="publisher",
                        access_point="127.0.0.1:1",
                        origin="sp0",
                        hops=3,
                        published_at=time.time(),
                    )
                    data = frame(wire.encode(notify))
                    sent[f"n{index}"] = time.time()
                    sock.sendall(data)
            stamps = json.loads(process.stdout.readline())
        finally:
            process.wait(timeout=30)
        if paced:
            results["latency"] = percentiles([stamps[k] - sent[k] for k in sent])
        else:
            results["throughput_per_s"] = round(count / (max(stamps.values()) - start))
    return results


async def measure_handshakes(count: int, tls: bool) -> dict[str, object]:
    """Connections per second to one super-peer: TCP, TLS, identification, Welcome."""
    with Cluster(1, trace=False, tls=tls) as cluster:
        ca = cluster.ca_certificate if tls else None
        peers = [RemotePeer(f"h{k}", cluster.addresses[0], ca=ca) for k in range(count)]
        for peer in peers:
            _ = peer.network_id  # make the keys before timing
        rates = {}
        async with trio.open_nursery() as nursery:
            for phase in ("first contact", "again"):
                start = time.perf_counter()
                for peer in peers:
                    await peer.connect(nursery)
                    await peer.disconnect()
                rates[phase] = round(count / (time.perf_counter() - start), 1)
            nursery.cancel_scope.cancel()
    return {"tls": tls, "connections_per_s": rates}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="8,16")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--burst", type=int, default=5000)
    parser.add_argument("--handshakes", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    clusters = [
        trio.run(measure_cluster, int(s), args.rate, args.seconds, args.burst, tls)
        for s in args.sizes.split(",")
        for tls in (True, False)
    ]
    handshakes = [trio.run(measure_handshakes, args.handshakes, tls) for tls in (True, False)]
    floor = measure_floor(args.rate, args.seconds, args.burst)
    plain = {row["superpeers"]: row for row in clusters if not row["tls"]}
    for row in clusters:
        if row["tls"]:
            row["throughput_vs_plaintext"] = round(
                row["throughput_per_s"] / plain[row["superpeers"]]["throughput_per_s"],
                2,  # type: ignore[operator]
            )
        row["latency_p50_vs_floor"] = round(
            row["latency"]["p50_ms"] / max(floor["latency"]["p50_ms"], 1e-3), 1
        )  # type: ignore[index]
        row["throughput_vs_floor"] = round(row["throughput_per_s"] / floor["throughput_per_s"], 3)  # type: ignore[operator]
    report = {
        "clusters": clusters,
        "handshakes": handshakes,
        "floor": floor,
        "rate": args.rate,
        "seconds": args.seconds,
        "burst": args.burst,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"offered {args.rate:.0f} publications/s for {args.seconds} s; burst of {args.burst}")
    print(f"{'setup':<28} {'hops':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max/s':>8}")
    for row in clusters:
        lat = row["latency"]
        label = f"{row['superpeers']} super-peers, {'TLS' if row['tls'] else 'plaintext'}"
        print(
            f"{label:<28} {','.join(map(str, row['hops'])):>5} {lat['p50_ms']:>8} {lat['p90_ms']:>8} {lat['p99_ms']:>8} {row['throughput_per_s']:>8}"
        )  # type: ignore[index]
    lat = floor["latency"]
    print(
        f"{'direct TCP (floor)':<28} {'-':>5} {lat['p50_ms']:>8} {lat['p90_ms']:>8} {lat['p99_ms']:>8} {floor['throughput_per_s']:>8}"
    )  # type: ignore[index]
    for row in handshakes:
        rates = row["connections_per_s"]
        print(
            f"connection set-up ({'TLS + identification' if row['tls'] else 'plaintext'}): "
            f"{rates['first contact']}/s first contact, {rates['again']}/s again"  # type: ignore[index]
        )


if __name__ == "__main__":
    main()
