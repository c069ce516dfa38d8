"""Traffic analytics on Spark against the same figures in one plain Python process, same run.

    python -m bench.analytics [--events 1000000,10000000] [--superpeers 64] [--seed 1]
                              [--master local[2]] [--driver-memory 6g] [--json]

For each size, a synthetic trace (``generate_traces``: the schema of ``superpeer.trace``, one
JSON-lines file per super-peer, seeded) is written to a temporary folder under /tmp and deleted
afterwards. The simulator itself writes about 9,000 trace events a second, too slow for 10^7; the
generator mimics what it writes instead: subscriptions forwarded hop by hop along hypercube paths
toward popular origins, notifications down the origins' spanning trees to the super-peers whose
subscriptions they answer (``sub`` naming the ids those sent), deliveries to local peers, some
stored offline and flushed later, advertisement broadcasts, retractions, refusals, and one line in
100,000 cut short (invalid). Origins are Zipf-popular, so load is uneven; hop delays are
lognormal; the event rate swings over the run, so traffic over time has a shape.

Timed, per size, after the Spark session has started and made one untimed pass over a small
trace (the JVM compiles Spark's hot paths on first use; Python has nothing to warm up):

- Spark (``--master``, default ``local[2]``): read the JSON lines, persist, compute every table of
  ``analytics.figures`` and collect it (the per-second traffic in full too, to compare): the work
  the report is built on. Beside it, not in the ratio: the whole report from the JSON lines again
  (analysis, plots, documents, tables written as Parquet and CSV).
- Python: ``analytics.reference.compute``, one process, one pass.

Both must give identical tables (checked, and reported as ``agree``). Reported: events, input
bytes, seconds and events/s of each, Spark's speed over Python's, the growth of each engine's
time from the smallest to the largest size, and the machine's load average before, between and
after (other work on the machine slows both).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from superpeer.trace import FIELDS

START = 1_767_225_600.0
EVENTS_PER_SECOND = 2_000
"""Mean trace events per second of simulated time: 10^7 events span about 83 minutes."""
INVALID_EVERY = 100_000


class TraceWriter:
    """One buffered JSON-lines file per super-peer, counting the lines it writes."""

    def __init__(self, directory: Path, invalid: Callable[[], bool]) -> None:
        self.directory = directory
        self.invalid = invalid
        self.buffers: dict[str, list[str]] = {}
        self.lines = 0
        self.message = 0

    def write(self, ts: float, node: str, event: str, kind: str, **fields: Any) -> None:
        record = {"ts": ts, "node": node, "event": event, "kind": kind, "bytes": 0, **fields}
        line = json.dumps({name: record.get(name) for name in FIELDS}, separators=(",", ":"))
        if self.invalid():
            line = line[: len(line) // 2]  # a writer cut off mid-line
        buffer = self.buffers.setdefault(node, [])
        buffer.append(line)
        self.lines += 1
        if len(buffer) >= 10_000:
            self._flush(node)

    def message_id(self, node: str) -> str:
        self.message += 1
        return f"{node}#{self.message}"

    def close(self) -> None:
        for node in list(self.buffers):
            self._flush(node)

    def _flush(self, node: str) -> None:
        with (self.directory / f"{node}.jsonl").open("a", encoding="utf-8") as handle:
            handle.write("\n".join(self.buffers[node]) + "\n")
        self.buffers[node] = []


def generate_traces(directory: Path, events: int, *, superpeers: int = 64, seed: int = 1) -> int:
    """Write at least ``events`` trace lines under ``directory``; return how many were written."""
    rng = random.Random(seed)
    dimensions = max(1, math.ceil(math.log2(superpeers)))
    nodes = [f"sp{k}" for k in range(2**dimensions)]
    peers = {node: [f"{node}-p{i}" for i in range(16)] for node in nodes}
    ranked = list(range(len(nodes)))  # origins, most popular first
    rng.shuffle(ranked)
    popularity = [1 / (rank + 1) ** 0.8 for rank in range(len(ranked))]
    forwarded: dict[tuple[int, int], list[str]] = {}  # (receiver, sender) -> sender's sub ids
    out = TraceWriter(directory, lambda: rng.randrange(INVALID_EVERY) == 0)
    span = events / EVENTS_PER_SECOND
    now = START
    counter = 0

    def hop() -> float:
        return 0.003 * rng.lognormvariate(0.0, 0.5)

    def size(median: float) -> int:
        return max(20, int(median * rng.lognormvariate(0.0, 0.3)))

    def send(at: float, sender: int, receiver: int, kind: str, **fields: Any) -> float:
        """A message on a backbone link: ``send`` at the sender, ``receive`` a hop later."""
        message, arrival = out.message_id(nodes[sender]), at + hop()
        common = {"msg": message, "bytes": fields.pop("bytes")}
        out.write(at, nodes[sender], "send", kind, neighbour=nodes[receiver], **common, **fields)
        out.write(
            arrival, nodes[receiver], "receive", kind, neighbour=nodes[sender], **common, **fields
        )
        return arrival

    def subscribe(at: float) -> None:
        nonlocal counter
        node, origin = rng.randrange(len(nodes)), rng.choices(ranked, popularity)[0]
        counter += 1
        out.write(at, nodes[node], "receive", "peer.subscribe", peer=rng.choice(peers[nodes[node]]),
                  sub=f"q{counter}", msg=out.message_id(nodes[node]), bytes=size(270))  # fmt: skip
        for bit in range(dimensions):  # bit-fixing path toward the origin
            if (node ^ origin) >> bit & 1:
                counter += 1
                sid, receiver = f"s{counter}", node ^ (1 << bit)
                at = send(at, node, receiver, "sp.forward", sub=sid, bytes=size(270))
                ids = forwarded.setdefault((receiver, node), [])
                ids.append(sid)
                del ids[:-50]
                node = receiver

    def publish(at: float) -> None:
        nonlocal counter
        origin = rng.choices(ranked, popularity)[0]
        counter += 1
        pub, publisher = f"doc{counter}", rng.choice(peers[nodes[origin]])
        out.write(at, nodes[origin], "receive", "peer.publish", peer=publisher,
                  msg=out.message_id(nodes[origin]), bytes=size(610))  # fmt: skip
        out.write(at, nodes[origin], "publish", "sp.notification", pub=pub, origin=nodes[origin],
                  peer=publisher, hops=0)  # fmt: skip
        volume = size(700)
        stack = [(origin, -1, 0, at)]  # node, dimension it was reached by, hops, arrival time
        while stack:
            node, reached_by, hops, arrival = stack.pop()
            deliver(arrival, node, pub, nodes[origin], hops, volume)
            for bit in range(reached_by + 1, dimensions):
                if rng.random() < 0.45:
                    child = node ^ (1 << bit)
                    ids = forwarded.get((node, child)) or [f"s-{child}"]
                    answers = ",".join(
                        sorted(set(rng.sample(ids, min(len(ids), rng.choice((1, 1, 2))))))
                    )
                    reached = send(arrival, node, child, "sp.notification", pub=pub,
                                   origin=nodes[origin], sub=answers, hops=hops + 1, bytes=volume)  # fmt: skip
                    stack.append((child, bit, hops + 1, reached))

    def deliver(at: float, node: int, pub: str, origin: str, hops: int, volume: int) -> None:
        name = nodes[node]
        for peer in rng.sample(peers[name], rng.choice((0, 0, 1, 1, 2, 3))):
            local = at + 0.0005 * rng.random()
            fields = {"pub": pub, "origin": origin, "peer": peer, "hops": hops, "bytes": volume}
            if rng.random() < 0.06:
                out.write(local, name, "offline", "peer.notify", **fields)
                out.write(local + rng.expovariate(1 / 30), name, "flush", "peer.notify", **fields)
            else:
                out.write(local, name, "deliver", "peer.notify", **fields)

    def retract(at: float) -> None:
        """A peer unsubscribes; one of the subscriptions forwarded on a link is withdrawn."""
        node = rng.choice(nodes)
        out.write(at, node, "receive", "peer.unsubscribe", peer=rng.choice(peers[node]),
                  msg=out.message_id(node), bytes=size(40))  # fmt: skip
        if forwarded:
            receiver, sender = rng.choice(list(forwarded))
            ids = forwarded[receiver, sender]
            if ids:
                send(at, sender, receiver, "sp.retract", sub=ids.pop(), bytes=size(30))

    def advertise(at: float) -> None:
        origin = rng.randrange(len(nodes))
        out.write(at, nodes[origin], "receive", "peer.advertise",
                  peer=rng.choice(peers[nodes[origin]]), msg=out.message_id(nodes[origin]),
                  bytes=size(730))  # fmt: skip
        volume, stack = size(1400), [(origin, -1, at)]
        while stack:
            node, reached_by, arrival = stack.pop()
            for bit in range(reached_by + 1, dimensions):
                child = node ^ (1 << bit)
                reached = send(
                    arrival, node, child, "sp.elements", origin=nodes[origin], bytes=volume
                )
                stack.append((child, bit, reached))

    def refuse(at: float) -> None:
        node = rng.choice(nodes)
        event = rng.choice(("refused", "drop"))
        out.write(at, node, event, "peer.publish", peer=rng.choice(peers[node]))

    episodes = [
        (subscribe, 0.30),
        (publish, 0.58),
        (retract, 0.07),
        (advertise, 0.01),
        (refuse, 0.04),
    ]
    actions, weights = zip(*episodes, strict=True)
    while out.lines < events:
        # The rate swings by half around its mean, three times over the run.
        rate = EVENTS_PER_SECOND / 21 * (1 + 0.5 * math.sin(2 * math.pi * 3 * (now - START) / span))
        now += rng.expovariate(rate)
        rng.choices(actions, weights)[0](now)
    out.close()
    return out.lines


def spark_tables(spark: Any, traces: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Read, analyse (which persists the events), and collect every table (as
    ``analytics.reference`` returns them)."""
    from analytics.figures import analyze
    from analytics.load import read_traces

    figures = analyze(read_traces(spark, str(traces)))
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(t.collect) for name, t in figures.tables().items()}
        tables = {name: [tuple(row) for row in f.result()] for name, f in futures.items()}
    finally:
        figures.unpersist()
    tables["bucket_seconds"] = [(figures.bucket_seconds,)]
    return tables


def run_size(spark: Any, events: int, superpeers: int, seed: int) -> dict[str, Any]:
    from analytics import reference
    from analytics.load import read_traces
    from analytics.report import build_report

    directory = Path(tempfile.mkdtemp(prefix="hypercup-bench-", dir="/tmp"))
    traces = directory / "traces"
    traces.mkdir()
    load = [round(os.getloadavg()[0], 2)]
    try:
        started = time.perf_counter()
        lines = generate_traces(traces, events, superpeers=superpeers, seed=seed)
        generated = time.perf_counter() - started
        size = sum(f.stat().st_size for f in traces.iterdir())

        started = time.perf_counter()
        spark_result = spark_tables(spark, traces)
        spark_seconds = time.perf_counter() - started
        load.append(round(os.getloadavg()[0], 2))

        started = time.perf_counter()
        build_report(read_traces(spark, str(traces)), directory / "report")
        report_seconds = time.perf_counter() - started

        started = time.perf_counter()
        python_tables = reference.compute(traces)
        python_seconds = time.perf_counter() - started
        load.append(round(os.getloadavg()[0], 2))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    differing = sorted(
        name for name in python_tables if spark_result.get(name) != python_tables[name]
    )
    quality = python_tables["quality"][0]
    return {
        "events": lines,
        "invalid_lines": quality[2],
        "input_bytes": size,
        "generate_seconds": round(generated, 1),
        "spark_seconds": round(spark_seconds, 1),
        "spark_events_per_second": round(lines / spark_seconds),
        "spark_full_report_seconds": round(report_seconds, 1),
        "python_seconds": round(python_seconds, 1),
        "python_events_per_second": round(lines / python_seconds),
        "spark_over_python": round(python_seconds / spark_seconds, 2),
        "agree": not differing,
        "differing_tables": differing,
        "load_average_1min": load,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--superpeers", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.events.split(",")]

    from analytics.session import open_spark_session

    started = time.perf_counter()
    with open_spark_session(
        args.master, driver_memory=args.driver_memory, log_level="ERROR"
    ) as spark:
        startup = time.perf_counter() - started
        # One untimed pass first: the JVM compiles Spark's hot paths on first use (the first
        # pass over a small trace takes several times longer than later ones).
        warm_up = Path(tempfile.mkdtemp(prefix="hypercup-bench-warm-up-", dir="/tmp"))
        try:
            generate_traces(warm_up, 100_000, superpeers=args.superpeers, seed=args.seed + 1)
            spark_tables(spark, warm_up)
        finally:
            shutil.rmtree(warm_up, ignore_errors=True)
        results = [run_size(spark, events, args.superpeers, args.seed) for events in sizes]
        version = spark.version
    growth = {}
    if len(results) > 1:
        first, last = results[0], results[-1]
        growth = {
            "events": round(last["events"] / first["events"], 2),
            "spark_seconds": round(last["spark_seconds"] / first["spark_seconds"], 2),
            "python_seconds": round(last["python_seconds"] / first["python_seconds"], 2),
        }
    report = {
        "master": args.master,
        "spark": version,
        "cores": os.cpu_count(),
        "spark_startup_seconds": round(startup, 1),
        "sizes": results,
        "growth_first_to_last": growth,
    }
    if args.json:
        print(json.dumps(report))
        return
    print(
        f"Spark {version}, {args.master}: start-up {report['spark_startup_seconds']} s and a "
        "warm-up pass, not counted"
    )
    header = ("events", "input MB", "Spark s", "Spark ev/s", "report s", "Python s", "Python ev/s",
              "Spark/Python", "agree", "load")  # fmt: skip
    print(" | ".join(header))
    for r in results:
        print(" | ".join(str(v) for v in (
            f"{r['events']:,}", round(r["input_bytes"] / 1e6), r["spark_seconds"],
            f"{r['spark_events_per_second']:,}", r["spark_full_report_seconds"], r["python_seconds"],
            f"{r['python_events_per_second']:,}", f"{r['spark_over_python']}x", r["agree"],
            r["load_average_1min"],
        )))  # fmt: skip
    if growth:
        print(
            f"growth x{growth['events']} events: Spark time x{growth['spark_seconds']}, "
            f"Python time x{growth['python_seconds']}"
        )


if __name__ == "__main__":
    main()
