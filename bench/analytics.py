"""Traffic analytics on Spark, in local mode and on a standalone cluster, from the JSON lines and
from the Parquet copy, against the same figures in one plain Python process, all in the same run.

    python -m bench.analytics [--events 1000000,10000000] [--engines python,local,parquet,cluster]
                              [--superpeers 64] [--seed 1] [--driver-memory 6g] [--workers 2]
                              [--worker-memory 4g] [--executor-memory 3g] [--fresh 0.125]
                              [--traces DIR] [--json]

For each size, a synthetic trace (``generate_traces``: the schema of ``superpeer.trace``, one
JSON-lines file per super-peer, seeded) is written under /tmp and deleted afterwards, or kept in
``--traces DIR`` and reused by later runs. The simulator itself writes about 9,000 trace events a
second, too slow for 10^7; the generator mimics what it writes instead: subscriptions forwarded
hop by hop along hypercube paths toward popular origins, notifications down the origins' spanning
trees to the super-peers whose subscriptions they answer (``sub`` naming the ids those sent),
deliveries to local peers (naming the peer's subscriptions they answer), some stored offline and
flushed later, advertisement broadcasts, retractions, refusals, drops, and one line in 100,000
cut short (invalid). Origins are Zipf-popular, so load is uneven; hop delays are lognormal; the
event rate swings over the run, so traffic over time has a shape.

Engines, each timed per size; each Spark session first makes one untimed pass of each kind over a
small trace (the JVMs compile Spark's hot paths on first use; Python has nothing to warm up):

- ``python``: ``analytics.reference.compute`` on the JSON lines, one process, one pass;
- ``local``: Spark ``local[2]`` in this process on the JSON lines: what the report computes
  (``analytics.figures.analyze``: both passes, the growing tables kept in Spark, the rest on the
  driver); the growing tables are then collected whole, untimed, to compare;
- ``parquet``: the Parquet copy made as a pipeline makes it (``analytics.ingest``): a first run
  appends all files but the newest ``--fresh`` share, a second the rest, a third finds nothing
  new, each timed; then the same analysis as ``local``, of the copy;
- ``cluster``: the same Spark work on a standalone cluster of ``--workers`` workers of one core
  each on 127.0.0.1 (``deploy.spark_cluster``), this process being the driver, of the JSON lines
  and of the copy.

Every engine must give the tables Python gives (checked, reported as ``agrees``). Reported per
engine: seconds, events/s, speed over Python, the CPU seconds of this process and every process
it started (the driver's JVM, the cluster's daemons and executors), and for Spark (``SparkMeter``)
the jobs it ran and the CPU of their tasks (Spark's REST API), the driver's own CPU, and the
driver JVM's CPU by kind of thread (``/proc``); and the machine's 1-minute load average before
and after (other work on the machine slows every engine; CPU seconds much less).
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
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.rates import CLOCK_TICKS, cpu_seconds, process_tree
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


@dataclass
class Measured:
    """One engine's analysis (or ingest) of one input: wall and CPU seconds, and for Spark the
    jobs it ran and where its CPU went (``SparkMeter``)."""

    engine: str
    seconds: float
    cpu_seconds: float
    load: list[float]
    spark: dict[str, Any] = field(default_factory=dict)
    agrees: Any = None


class SparkMeter:
    """Where a Spark session's time goes, from its REST API (the jobs an analysis ran, and the
    CPU time of their tasks: ``executorCpuTime`` and ``executorDeserializeCpuTime`` of every
    stage) and from ``/proc``: the CPU of this Python process, of the driver's JVM and of each of
    its threads by name (task threads, the JIT compiler's, the garbage collector's, the rest:
    the driver's own planning, scheduling and bookkeeping), and of every other process this one
    started (a standalone cluster's daemons and executors).

    The driver's CPU is this process's and the driver JVM's. In local mode that JVM runs the tasks
    too, so their CPU (the REST API's), the JIT compiler's and the collector's are taken out (the
    JIT compiles mostly the tasks' generated code; on a cluster the executors' JVMs do that); on a
    cluster, all of the driver JVM's CPU is the driver's."""

    def __init__(self, spark: Any) -> None:
        context = spark.sparkContext
        self.local = context.master.startswith("local")
        self.api = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}"
        self.jvm = context._gateway.proc.pid

    def measure(self, engine: str, run: Callable[[], Any]) -> tuple[Any, Measured]:
        known = {job["jobId"] for job in self._get("jobs")}
        tree = process_tree()
        load = [load_average()]
        python, jvm, threads = time.process_time(), cpu_seconds([self.jvm]), _threads(self.jvm)
        everything, started = cpu_seconds(tree), time.perf_counter()
        result = run()
        wall = time.perf_counter() - started
        everything = cpu_seconds(process_tree()) - everything  # executors started meanwhile
        python, jvm = time.process_time() - python, cpu_seconds([self.jvm]) - jvm
        by_kind = _thread_kinds(threads, _threads(self.jvm))
        load.append(load_average())
        jobs = sorted(job["jobId"] for job in self._get("jobs") if job["jobId"] not in known)
        stages = {stage for job in jobs for stage in self._get(f"jobs/{job}")["stageIds"]}
        task_cpu = sum(
            (attempt["executorCpuTime"] + attempt["executorDeserializeCpuTime"]) / 1e9
            for stage in stages
            for attempt in self._get(f"stages/{stage}")
        )
        # In local mode the JVM's task threads ran the tasks, whose CPU the REST API has whole
        # (a task thread that ends, idle for a minute, takes its CPU out of the /proc reading).
        driver_jvm = jvm - (task_cpu + by_kind["jit"] + by_kind["gc"] if self.local else 0)
        details = {
            "jobs": len(jobs),
            "stages": len(stages),
            "task_cpu": round(task_cpu, 1),
            "driver_cpu": round(python + driver_jvm, 1),
            "python_cpu": round(python, 1),
            "jvm_cpu": round(jvm, 1),
            "jvm_threads": {kind: round(cpu, 1) for kind, cpu in by_kind.items()},
        }
        measured = Measured(engine, round(wall, 1), round(everything, 1), load, details)
        print(f"  {engine}: {wall:.1f} s, {everything:.1f} CPU s, load {load}, {details}",
              flush=True)  # fmt: skip
        return result, measured

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.api}/{path}", timeout=60) as answer:
            return json.load(answer)


def _threads(pid: int) -> dict[int, tuple[str, float]]:
    """Name and CPU seconds of each thread of ``pid`` (``/proc/PID/task``)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:
            continue  # ended while we looked
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rpartition(")")[2].split()
        found[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return found


def _thread_kinds(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds spent between two ``_threads`` readings, by kind of JVM thread (threads that
    ended in between are not counted)."""
    kinds = dict.fromkeys(("tasks", "jit", "gc", "other"), 0.0)
    for tid, (name, cpu) in after.items():
        spent = cpu - before.get(tid, (name, 0.0))[1]
        if name.startswith("Executor task"):
            kinds["tasks"] += spent
        elif "CompilerThre" in name:
            kinds["jit"] += spent
        elif name.startswith(("GC Thread", "G1 ", "VM Thread")):
            kinds["gc"] += spent
        else:
            kinds["other"] += spent
    return kinds


def analyse(spark: Any, traces: Path, keep: str) -> Any:
    """What the report computes, timed: read, size the shuffles, both passes of ``analyze``
    (the growing tables computed and kept in Spark, their first rows on the driver)."""
    from analytics.figures import analyze
    from analytics.load import input_bytes, read_traces
    from analytics.session import rows_fit, tune_for_input

    size = input_bytes(spark, str(traces))
    tune_for_input(spark, size)
    if keep == "json":
        keep = "rows" if rows_fit(spark, size) else "columns"
    return analyze(read_traces(spark, str(traces)), keep=keep)  # type: ignore[arg-type]


def tables_of(figures: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every table whole (untimed: the growing ones collected from Spark), to compare."""
    from analytics.tables import TABLES

    try:
        tables = {name: [tuple(row) for row in figures.collect(name)] for name in TABLES}
    finally:
        figures.unpersist()
    tables["bucket_seconds"] = [(figures.bucket_seconds,)]
    return tables


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


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


def warm_up(spark: Any, root: Path, superpeers: int, seed: int) -> None:
    """One untimed pass of each kind over a small trace (see the module docstring)."""
    from analytics.ingest import append_parquet

    directory = Path(tempfile.mkdtemp(prefix="hypercup-bench-warm-up-", dir=root))
    try:
        (directory / "logs").mkdir()
        generate_traces(directory / "logs", 100_000, superpeers=superpeers, seed=seed + 1)
        tables_of(analyse(spark, directory / "logs", "json"))
        append_parquet(spark, str(directory / "logs"), str(directory / "copy"))
        tables_of(analyse(spark, directory / "copy", "none"))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def ingest(
    meter: SparkMeter, spark: Any, traces: Path, copy: Path, logs: Path, fresh: float
) -> dict[str, Measured]:
    """The Parquet copy of ``traces`` at ``copy``, made as a pipeline makes it: the first run
    appends all but the newest files (``1 - fresh`` of them, hard links in ``logs``), the
    second the files that arrived since, a third finds nothing new."""
    from analytics.ingest import append_parquet

    files = sorted(traces.glob("*.jsonl"))
    first = files[: max(1, round(len(files) * (1 - fresh)))]
    logs.mkdir(parents=True)
    rounds = {}
    for name, shipped in (("ingest", first), ("ingest new", files[len(first) :]), ("none new", [])):
        for file in shipped:
            os.link(file, logs / file.name)
        size = sum(f.stat().st_size for f in shipped)
        done, rounds[name] = meter.measure(
            f"{name} ({len(shipped)} files, {size / 1e6:,.0f} MB)",
            lambda: append_parquet(spark, str(logs), str(copy)),
        )
        assert len(done.added) == len(shipped), (name, done)
    return rounds


def run(args: argparse.Namespace) -> dict[str, Any]:
    from analytics import reference
    from analytics.session import open_spark_session
    from deploy.spark_cluster import SparkStandalone

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver listens where the cluster does
    engines = args.engines.split(",")
    root = Path(args.traces or tempfile.mkdtemp(prefix="hypercup-bench-", dir="/tmp"))
    work = Path(tempfile.mkdtemp(prefix="hypercup-bench-work-", dir=root))
    sizes: list[tuple[Path, int]] = []
    rows: dict[int, dict[str, Any]] = {}
    tables: dict[int, dict[str, Any]] = {}
    version = "-"
    try:
        for events in (int(size) for size in args.events.split(",")):
            directory, lines, seconds = traces_for(root, events, args.superpeers, args.seed)
            size = sum(f.stat().st_size for f in directory.glob("*.jsonl"))
            sizes.append((directory, lines))
            rows[lines] = {"events": lines, "input_bytes": size, "generate_seconds": round(seconds)}
            tables[lines] = {}
            print(f"traces: {lines:,} events, {size / 1e6:,.0f} MB, generated in {seconds:.0f} s "
                  "(0: reused)", flush=True)  # fmt: skip
        copies = {lines: work / f"copy-{lines}" for _, lines in sizes}
        with open_spark_session(
            "local[2]", driver_memory=args.driver_memory, log_level="ERROR", ui=True
        ) as spark:
            version = spark.version
            meter = SparkMeter(spark)
            warm_up(spark, work, args.superpeers, args.seed)
            for traces, lines in sizes:
                row = rows[lines]
                if "python" in engines:
                    before, started = load_average(), time.perf_counter()
                    cpu = time.process_time()
                    tables[lines]["python"] = reference.compute(traces)
                    row["python"] = Measured(
                        "python, JSON", round(time.perf_counter() - started, 1),
                        round(time.process_time() - cpu, 1), [before, load_average()],
                    )  # fmt: skip
                    print(f"  python: {row['python']}", flush=True)
                if "local" in engines:
                    figures, row["local"] = meter.measure(
                        "local[2], JSON", lambda t=traces: analyse(spark, t, "json")
                    )
                    tables[lines]["local"] = tables_of(figures)
                if "parquet" in engines:
                    row["ingest"] = ingest(
                        meter, spark, traces, copies[lines], work / f"logs-{lines}", args.fresh
                    )
                    figures, row["parquet"] = meter.measure(
                        "local[2], Parquet", lambda c=copies[lines]: analyse(spark, c, "none")
                    )
                    tables[lines]["parquet"] = tables_of(figures)
        if "cluster" in engines:
            with (
                SparkStandalone(
                    work / "spark-cluster", workers=args.workers, memory=args.worker_memory
                ) as cluster,
                open_spark_session(
                    cluster.master_url, executor_memory=args.executor_memory, log_level="ERROR"
                ) as spark,
            ):
                meter = SparkMeter(spark)
                warm_up(spark, work, args.superpeers, args.seed)
                for traces, lines in sizes:
                    label = f"standalone {args.workers}x1 core"
                    figures, rows[lines]["cluster"] = meter.measure(
                        f"{label}, JSON", lambda t=traces: analyse(spark, t, "json")
                    )
                    tables[lines]["cluster"] = tables_of(figures)
                    if copies[lines].exists():
                        figures, rows[lines]["cluster parquet"] = meter.measure(
                            f"{label}, Parquet",
                            lambda c=copies[lines]: analyse(spark, c, "none"),
                        )
                        tables[lines]["cluster parquet"] = tables_of(figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.traces:
            shutil.rmtree(root, ignore_errors=True)
    for lines, row in rows.items():
        computed = tables[lines]
        if not computed:
            continue
        expected = computed.get("python") or next(iter(computed.values()))
        for engine, got in computed.items():
            differing = sorted(n for n in expected if got.get(n) != expected[n])
            row[engine].agrees = differing or True
    return {"spark": version, "cores": os.cpu_count(), "sizes": list(rows.values())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", default="1000000,10000000", help="comma-separated sizes")
    parser.add_argument("--engines", default="python,local,parquet,cluster", help="comma-separated")
    parser.add_argument("--superpeers", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-memory", default="4g")
    parser.add_argument("--executor-memory", default="3g")
    parser.add_argument(
        "--fresh", type=float, default=0.125, help="share of the files the second ingest appends"
    )
    parser.add_argument("--traces", metavar="DIR", help="keep the traces in DIR, reuse them")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, default=asdict))
        return
    print(f"Spark {report['spark']}, {report['cores']} cores")
    print(
        "events | input MB | engine | seconds | events/s | speed over Python | CPU s | jobs"
        " | task CPU s | driver CPU s | JVM threads: tasks, JIT, GC, other | agrees | load"
    )
    for row in report["sizes"]:
        python = row.get("python")
        measured = [row[e] for e in ("python", "local", "parquet", "cluster", "cluster parquet")
                    if e in row] + list(row.get("ingest", {}).values())  # fmt: skip
        for r in measured:
            ratio = f"{python.seconds / r.seconds:.2f}x" if python and r.agrees else "-"
            s = r.spark
            threads = s.get("jvm_threads", {})
            print(" | ".join(str(v) for v in (
                f"{row['events']:,}", round(row["input_bytes"] / 1e6), r.engine, r.seconds,
                f"{round(row['events'] / r.seconds):,}", ratio, r.cpu_seconds,
                s.get("jobs", "-"), s.get("task_cpu", "-"), s.get("driver_cpu", "-"),
                ", ".join(str(threads.get(k, "-")) for k in ("tasks", "jit", "gc", "other")),
                r.agrees if r.agrees is not None else "-", r.load,
            )))  # fmt: skip


if __name__ == "__main__":
    main()
