"""Traffic analytics on Spark, in local mode and on a standalone cluster, against the same figures
in one plain Python process, all in the same run.

    python -m bench.analytics [--events 1000000,10000000] [--engines local,python,cluster]
                              [--superpeers 64] [--seed 1] [--driver-memory 6g] [--workers 2]
                              [--worker-memory 4g] [--executor-memory 3g] [--traces DIR] [--json]

For each size, a synthetic trace (``generate_traces``: the schema of ``superpeer.trace``, one
JSON-lines file per super-peer, seeded) is written under /tmp and deleted afterwards, or kept in
``--traces DIR`` and reused by later runs (10^8 events take most of an hour to generate). The
simulator itself writes about 9,000 trace events a second, too slow for 10^7; the generator
mimics what it writes instead: subscriptions forwarded hop by hop along hypercube paths toward
popular origins, notifications down the origins' spanning trees to the super-peers whose
subscriptions they answer (``sub`` naming the ids those sent), deliveries to local peers (naming
the peer's subscriptions they answer, as the daemons will once they trace ``Notify``'s ids), some
stored offline and flushed later, advertisement broadcasts, retractions, refusals, drops, and one
line in 100,000 cut short (invalid). Origins are Zipf-popular, so load is uneven; hop delays are
lognormal; the event rate swings over the run, so traffic over time has a shape.

Engines, each timed per size; Spark after its session has started and made one untimed pass over
a small trace (the JVMs compile Spark's hot paths on first use; Python has nothing to warm up):

- ``local``: Spark ``local[2]`` in this process: read the JSON lines, keep the events once,
  compute every table of ``analytics.figures`` and collect it (the per-second traffic and the hot
  subscriptions in full too, to compare): the work the report is built on.
- ``python``: ``analytics.reference.compute``, one process, one pass; each size right after the
  local Spark run of that size, so that both meet the same load.
- ``cluster``: the same Spark work on a standalone cluster of ``--workers`` workers of one core
  each on 127.0.0.1 (``deploy.spark_cluster``), this process being the driver.

Every engine must give the tables Python gives (checked, reported as ``agrees``). Reported:
events, input bytes, and for each engine seconds, events/s, speed over Python, the CPU seconds it
used (Python: this process; Spark: this process and every process it started, the JVMs of the
driver, and of the cluster's daemons and executors), and the machine's 1-minute load average
before and after (other work on the machine slows every engine; CPU seconds much less).
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

from bench.rates import cpu_seconds, process_tree
from superpeer.trace import FIELDS

START = 1_767_225_600.0
EVENTS_PER_SECOND = 2_000
"""Mean trace events per second of simulated time: 10^7 events span about 83 minutes."""
INVALID_EVERY = 100_000
PEER_SUBSCRIPTIONS = [1 / (rank + 1) for rank in range(8)]
"""Each peer's subscriptions q0..q7 answer notifications Zipf-often: some are hot."""


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
            answered = sorted(
                {f"q{rng.choices(range(8), PEER_SUBSCRIPTIONS)[0]}" for _ in range(2)}
            )
            fields = {"pub": pub, "origin": origin, "peer": peer, "sub": ",".join(answered),
                      "hops": hops, "bytes": volume}  # fmt: skip
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
    """Read, size the shuffles, analyse (which keeps the events once), and collect every table
    (as ``analytics.reference`` returns them)."""
    from analytics.figures import analyze
    from analytics.load import input_bytes, read_traces
    from analytics.session import rows_fit, tune_for_input

    size = input_bytes(spark, str(traces))
    tune_for_input(spark, size)
    figures = analyze(read_traces(spark, str(traces)), keep_rows=rows_fit(spark, size))
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(t.collect) for name, t in figures.tables().items()}
        tables = {name: [tuple(row) for row in f.result()] for name, f in futures.items()}
    finally:
        figures.unpersist()
    tables["bucket_seconds"] = [(figures.bucket_seconds,)]
    return tables


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def timed(
    run: Callable[[], Any], processes: Callable[[], list[int]]
) -> tuple[Any, float, float, list[float]]:
    """``run()``'s result, its wall seconds, the CPU seconds the ``processes()`` spent meanwhile,
    and the 1-minute load average before and after."""
    before, pids = load_average(), processes()
    cpu, started = cpu_seconds(pids), time.perf_counter()
    result = run()
    wall = time.perf_counter() - started
    return result, wall, cpu_seconds(pids) - cpu, [before, load_average()]


def traces_for(root: Path, events: int, superpeers: int, seed: int) -> tuple[Path, int, float]:
    """The trace directory for ``events`` under ``root`` (generated unless a complete one is
    there from an earlier run), the lines in it, and the seconds generating them took (0 when
    reused)."""
    directory = root / f"events-{events}-sp{superpeers}-seed{seed}"
    done = directory / "_lines"  # hidden from the readers, written last
    if done.exists():
        return directory, int(done.read_text()), 0.0
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    started = time.perf_counter()
    lines = generate_traces(directory, events, superpeers=superpeers, seed=seed)
    done.write_text(str(lines))
    return directory, lines, time.perf_counter() - started


def warm_up(spark: Any, superpeers: int, seed: int) -> None:
    """One untimed pass over a small trace (see the module docstring)."""
    directory = Path(tempfile.mkdtemp(prefix="hypercup-bench-warm-up-", dir="/tmp"))
    try:
        generate_traces(directory, 100_000, superpeers=superpeers, seed=seed + 1)
        spark_tables(spark, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def measured(
    engine: str, lines: int, run: Callable[[], Any], processes: Callable[[], list[int]]
) -> dict[str, Any]:
    tables, seconds, cpu, load = timed(run, processes)
    print(f"  {engine}: {lines:,} events in {seconds:.1f} s ({cpu:.1f} CPU s), load {load}",
          flush=True)  # fmt: skip
    return {"engine": engine, "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
            "events_per_second": round(lines / seconds), "load": load, "tables": tables}  # fmt: skip


def this_process() -> list[int]:
    return [os.getpid()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from analytics import reference
    from analytics.session import open_spark_session
    from deploy.spark_cluster import SparkStandalone

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver listens where the cluster does
    engines = args.engines.split(",")
    root = Path(args.traces or tempfile.mkdtemp(prefix="hypercup-bench-", dir="/tmp"))
    sizes: list[tuple[Path, int]] = []
    rows: dict[int, dict[str, Any]] = {}
    version = "-"
    try:
        for events in (int(size) for size in args.events.split(",")):
            directory, lines, seconds = traces_for(root, events, args.superpeers, args.seed)
            size = sum(f.stat().st_size for f in directory.glob("*.jsonl"))
            sizes.append((directory, lines))
            rows[lines] = {"events": lines, "input_bytes": size, "generate_seconds": round(seconds)}
            print(f"traces: {lines:,} events, {size / 1e6:,.0f} MB, generated in {seconds:.0f} s "
                  "(0: reused)", flush=True)  # fmt: skip
        if "local" in engines or "python" in engines:
            with open_spark_session(
                "local[2]", driver_memory=args.driver_memory, log_level="ERROR"
            ) as spark:
                version = spark.version
                if "local" in engines:
                    warm_up(spark, args.superpeers, args.seed)
                for traces, lines in sizes:
                    if "local" in engines:
                        rows[lines]["local"] = measured(
                            "local[2]",
                            lines,
                            lambda t=traces: spark_tables(spark, t),
                            process_tree,
                        )
                    if "python" in engines:
                        rows[lines]["python"] = measured(
                            "python", lines, lambda t=traces: reference.compute(t), this_process
                        )
        if "cluster" in engines:
            with (
                SparkStandalone(
                    root / "spark-cluster", workers=args.workers, memory=args.worker_memory
                ) as cluster,
                open_spark_session(
                    cluster.master_url, executor_memory=args.executor_memory, log_level="ERROR"
                ) as spark,
            ):
                version = spark.version
                warm_up(spark, args.superpeers, args.seed)
                for traces, lines in sizes:
                    rows[lines]["cluster"] = measured(
                        f"standalone {args.workers}x1 core",
                        lines,
                        lambda t=traces: spark_tables(spark, t),
                        process_tree,
                    )
    finally:
        if not args.traces:
            shutil.rmtree(root, ignore_errors=True)
    for row in rows.values():
        expected = (row.get("python") or row.get("local") or row["cluster"])["tables"]
        for engine in ("local", "python", "cluster"):
            if engine in row:
                tables = row[engine].pop("tables")
                differing = sorted(n for n in expected if tables.get(n) != expected[n])
                row[engine]["agrees"] = differing or True
    return {"spark": version, "cores": os.cpu_count(), "sizes": list(rows.values())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--engines", default="local,python,cluster", help="comma-separated")
    parser.add_argument("--superpeers", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-memory", default="4g")
    parser.add_argument("--executor-memory", default="3g")
    parser.add_argument("--traces", metavar="DIR", help="keep the traces in DIR, reuse them")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report))
        return
    print(f"Spark {report['spark']}, {report['cores']} cores")
    print(
        "events | input MB | engine | seconds | events/s | speed over Python | CPU s"
        " | CPU s over Python's | agrees | load"
    )
    for row in report["sizes"]:
        python = row.get("python")
        for engine in ("local", "cluster", "python"):
            if engine in row:
                r = row[engine]
                ratio = f"{python['seconds'] / r['seconds']:.2f}x" if python else "-"
                cpu = f"{r['cpu_seconds'] / python['cpu_seconds']:.2f}x" if python else "-"
                print(" | ".join(str(v) for v in (
                    f"{row['events']:,}", round(row["input_bytes"] / 1e6), r["engine"],
                    r["seconds"], f"{r['events_per_second']:,}", ratio, r["cpu_seconds"], cpu,
                    r["agrees"], r["load"],
                )))  # fmt: skip


if __name__ == "__main__":
    main()
