"""Every figure Spark computes agrees exactly with a plain Python computation written here.

``expected_tables`` reads the raw JSON lines and works each figure out directly from the
definitions (its own parsing, sorting and arithmetic; it shares nothing with ``analytics`` but the
bucket-size rule, a parameter that ``test_bucket_size`` checks on its own). Floating-point
figures are compared with zero tolerance: both sides do the same IEEE operations on the same
numbers, so any difference is a real one.
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from analytics import reference
from analytics.definitions import BUCKET_SIZES, MAX_BUCKETS, bucket_seconds
from analytics.figures import Figures, Keep, analyze
from analytics.load import read_traces
from superpeer.trace import EVENTS

from .conftest import GARBAGE, simulate

SCHEMAS = {
    "quality": "lines bigint, valid bigint, invalid bigint",
    "invalid_examples": "line string",
    "overview": "events bigint, superpeers bigint, first_ts double, last_ts double, "
    "messages bigint, bytes bigint",
    "kinds": "kind string, messages bigint, bytes bigint",
    "superpeers": "node string, sent bigint, sent_bytes bigint, received bigint, "
    "received_bytes bigint",
    "links": "node string, neighbour string, messages bigint, bytes bigint",
    "load_curve": "rank bigint, node string, load bigint, superpeer_share double, "
    "cumulative_load_share double",
    "load_gini": "superpeers bigint, total_load bigint, gini double",
    "hops": "hops bigint, deliveries bigint",
    "latency_summary": "delivery string, deliveries bigint, min double, p50 double, "
    "p90 double, p99 double, max double",
    "latency_cdf": "delivery string, percent int, latency double",
    "latency_over_time": "bucket_start double, bucket_seconds double, deliveries bigint, "
    "p50 double, p90 double, p99 double",
    "deliveries": "online bigint, flushed bigint, stored_offline bigint, still_stored bigint, "
    "without_publish bigint, duplicate_pairs bigint",
    "duplicates": "peer string, pub string, deliveries bigint",
    "forwarding": "superpeer string, forwarded bigint, routed bigint, share double",
    "forwarding_total": "forwarded bigint, routed bigint, share double",
    "subscriptions": "level string, holder string, sub string, notifications bigint",
    "tree_edges": "origin string, hops bigint, node string, neighbour string, messages bigint, "
    "bytes bigint",
    "tree_shape": "origin string, publications bigint, edges bigint, superpeers bigint, "
    "depth bigint, messages bigint, messages_per_publication double",
    "traffic_per_second": "second bigint, messages bigint, bytes bigint",
    "traffic_over_time": "bucket_start double, bucket_seconds double, messages bigint, "
    "bytes bigint, messages_per_second double, bytes_per_second double",
    "incidents_over_time": "bucket_start double, bucket_seconds double, event string, "
    "events bigint",
}


# -- the independent computation ------------------------------------------------------------------
def raw_lines(directory: Path) -> Iterator[str]:
    for path in sorted(directory.rglob("*")):
        if path.name.startswith((".", "_")) or not path.name.endswith((".jsonl", ".jsonl.gz")):
            continue
        text = (
            gzip.decompress(path.read_bytes()).decode()
            if path.suffix == ".gz"
            else path.read_text(encoding="utf-8")
        )
        yield from text.split("\n")


def record_of(line: str) -> dict[str, Any] | None:
    """The trace record of a valid line; None for an invalid one (the garbage in
    ``conftest.GARBAGE`` covers each rule)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(record, dict):
        return None
    ts = record.get("ts")
    if type(ts) not in (int, float) or not 0 <= ts < 253402300800:
        return None
    if record.get("event") not in EVENTS or record.get("node") is None or "kind" not in record:
        return None
    if any(record.get(f) is not None and type(record[f]) is not int for f in ("bytes", "hops")):
        return None
    return record


def nearest_rank(values: list[float], percent: int) -> float:
    ordered = sorted(values)
    return ordered[math.ceil(percent * len(ordered) / 100) - 1]


def expected_tables(directory: Path) -> dict[str, list[tuple[Any, ...]]]:
    lines = [line for line in raw_lines(directory) if line.strip()]
    parsed = [(line, record_of(line)) for line in lines]
    records = [r for _, r in parsed if r is not None]
    invalid = sorted(line for line, r in parsed if r is None)
    t: dict[str, list[tuple[Any, ...]]] = {}
    t["quality"] = [(len(lines), len(records), len(invalid))]
    t["invalid_examples"] = [(line,) for line in invalid[:5]]

    def wire(r: dict[str, Any]) -> bool:
        return r["event"] in ("send", "deliver", "flush") or (
            r["event"] == "receive" and r.get("peer") is not None
        )

    messages = [r for r in records if wire(r)]
    t["overview"] = [
        (
            len(records),
            len({r["node"] for r in records}),
            min(r["ts"] for r in records),
            max(r["ts"] for r in records),
            len(messages),
            sum(r["bytes"] for r in messages),
        )
    ]
    t["kinds"] = [
        (kind, len(group), sum(r["bytes"] for r in group))
        for kind in sorted({r["kind"] for r in messages})
        for group in [[r for r in messages if r["kind"] == kind]]
    ]
    nodes = sorted({r["node"] for r in records})
    t["superpeers"] = []
    for node in nodes:
        out = [
            r for r in records if r["node"] == node and r["event"] in ("send", "deliver", "flush")
        ]
        into = [r for r in records if r["node"] == node and r["event"] == "receive"]
        t["superpeers"].append(
            (node, len(out), sum(r["bytes"] for r in out), len(into), sum(r["bytes"] for r in into))
        )
    sends = [r for r in records if r["event"] == "send"]
    to_neighbours = [r for r in sends if r["neighbour"] is not None]
    link_counts = Counter((r["node"], r["neighbour"]) for r in to_neighbours)
    link_bytes = Counter()
    for r in to_neighbours:
        link_bytes[r["node"], r["neighbour"]] += r["bytes"]
    t["links"] = [(*link, link_counts[link], link_bytes[link]) for link in sorted(link_counts)]

    load = {
        node: sum(1 for r in records if r["node"] == node and r["event"] == "receive")
        for node in nodes
    }
    total = sum(load.values())
    by_load = sorted(nodes, key=lambda n: (-load[n], n))
    t["load_curve"] = [
        (k, node, load[node], k / len(nodes), sum(load[m] for m in by_load[:k]) / total)
        for k, node in enumerate(by_load, start=1)
    ]
    rising = sorted(load.values())
    n = len(rising)
    gini = 2 * sum(i * x for i, x in enumerate(rising, start=1)) / (n * total) - (n + 1) / n
    t["load_gini"] = [(n, total, gini)]

    deliveries = [r for r in records if r["event"] in ("deliver", "flush")]
    t["hops"] = sorted(Counter(r["hops"] for r in deliveries).items())
    published: dict[tuple[str, str], float] = {}
    for r in records:
        if r["event"] == "publish":
            key = (r["pub"], r["node"])
            published[key] = min(published.get(key, math.inf), r["ts"])
    latency: dict[str, list[float]] = defaultdict(list)
    by_bucket: dict[float, list[float]] = defaultdict(list)
    span = t["overview"][0][3] - t["overview"][0][2]
    size = bucket_seconds(span)
    for r in deliveries:
        start = published.get((r["pub"], r["origin"]))
        if start is None:
            continue
        kind = "online" if r["event"] == "deliver" else "flushed"
        latency[kind].append(r["ts"] - start)
        if kind == "online":
            by_bucket[math.floor(start / size) * size].append(r["ts"] - start)
    t["latency_summary"] = [
        (kind, len(v), min(v), *(nearest_rank(v, p) for p in (50, 90, 99)), max(v))
        for kind, v in sorted(latency.items())
    ]
    t["latency_cdf"] = [
        (kind, p, nearest_rank(v, p)) for kind, v in sorted(latency.items()) for p in range(1, 101)
    ]
    t["latency_over_time"] = [
        (start, size, len(v), *(nearest_rank(v, p) for p in (50, 90, 99)))
        for start, v in sorted(by_bucket.items())
    ]

    per_pair = Counter((r["peer"], r["pub"]) for r in deliveries)
    offline = {(r["node"], r["peer"], r["pub"]) for r in records if r["event"] == "offline"}
    flushed = {(r["node"], r["peer"], r["pub"]) for r in records if r["event"] == "flush"}
    t["duplicates"] = sorted((peer, pub, c) for (peer, pub), c in per_pair.items() if c > 1)
    t["deliveries"] = [
        (
            sum(1 for r in deliveries if r["event"] == "deliver"),
            sum(1 for r in deliveries if r["event"] == "flush"),
            sum(1 for r in records if r["event"] == "offline"),
            len(offline - flushed),
            sum(1 for r in deliveries if (r["pub"], r["origin"]) not in published),
            len(t["duplicates"]),
        )
    ]

    forwarded = {
        (r["node"], r["neighbour"], r["sub"])
        for r in sends
        if r["kind"] == "sp.forward" and r["sub"] is not None
    }
    answered = {
        (r["neighbour"], r["node"], sid)
        for r in sends
        if r["kind"] == "sp.notification" and r["sub"]
        for sid in r["sub"].split(",")
    }
    receivers = sorted({receiver for _, receiver, _ in forwarded})
    t["forwarding"] = []
    for receiver in receivers:
        mine = [f for f in forwarded if f[1] == receiver]
        routed = sum(1 for f in mine if f in answered)
        t["forwarding"].append((receiver, len(mine), routed, routed / len(mine)))
    all_routed = sum(1 for f in forwarded if f in answered)
    t["forwarding_total"] = [(len(forwarded), all_routed, all_routed / len(forwarded))]
    hot = Counter(
        ("superpeer", r["neighbour"], sid)
        for r in sends
        if r["kind"] == "sp.notification" and r["sub"]
        for sid in r["sub"].split(",")
    )
    hot.update(
        ("peer", r["peer"], sid) for r in deliveries if r.get("sub") for sid in r["sub"].split(",")
    )
    t["subscriptions"] = sorted(((*key, n) for key, n in hot.items()), key=lambda r: (-r[3], r))

    tree = [r for r in sends if r["kind"] == "sp.notification"]
    edge_counts = Counter((r["origin"], r["hops"], r["node"], r["neighbour"]) for r in tree)
    edge_bytes = Counter()
    for r in tree:
        edge_bytes[r["origin"], r["hops"], r["node"], r["neighbour"]] += r["bytes"]
    t["tree_edges"] = [(*e, edge_counts[e], edge_bytes[e]) for e in sorted(edge_counts)]
    published_at = Counter(r["node"] for r in records if r["event"] == "publish")
    t["tree_shape"] = []
    for origin in sorted({r["origin"] for r in tree} | set(published_at)):
        mine = [r for r in tree if r["origin"] == origin]
        count = published_at[origin]
        t["tree_shape"].append(
            (
                origin,
                count,
                len({(r["node"], r["neighbour"]) for r in mine}),
                len({r["neighbour"] for r in mine}),
                max((r["hops"] for r in mine), default=None),
                len(mine),
                len(mine) / count if count else None,
            )
        )

    seconds: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    buckets: dict[float, list[int]] = defaultdict(lambda: [0, 0])
    for r in sends:
        if r["neighbour"] is None:
            continue  # a reply to a peer, not super-peer traffic
        for table, key in (
            (seconds, math.floor(r["ts"])),
            (buckets, math.floor(r["ts"] / size) * size),
        ):
            table[key][0] += 1
            table[key][1] += r["bytes"]
    t["traffic_per_second"] = [(s, c, b) for s, (c, b) in sorted(seconds.items())]
    t["traffic_over_time"] = [
        (start, size, c, b, c / size, b / size) for start, (c, b) in sorted(buckets.items())
    ]
    incidents = Counter(
        (math.floor(r["ts"] / size) * size, r["event"])
        for r in records
        if r["event"] in ("neighbour_failed", "repair", "drop", "auth_failure")
    )
    t["incidents_over_time"] = [(b, size, e, n) for (b, e), n in sorted(incidents.items())]
    return t


# -- helpers --------------------------------------------------------------------------------------
def collect_all(raw: DataFrame, *, keep: Keep = "rows") -> dict[str, list[Row]]:
    """Every table's rows for ``raw`` (the growing ones collected whole)."""
    figures = analyze(raw, keep=keep)
    try:
        return {name: figures.collect(name) for name in SCHEMAS}
    finally:
        figures.unpersist()


def as_rows(name: str, values: list[tuple[Any, ...]]) -> list[Row]:
    columns = [part.strip().split(" ")[0] for part in SCHEMAS[name].split(",")]
    return [Row(**dict(zip(columns, row, strict=True))) for row in values]


def assert_same_figures(actual: dict[str, list[Row]], expected: dict[str, list[tuple]]) -> None:
    for name, rows in actual.items():
        assertDataFrameEqual(
            rows, as_rows(name, expected[name]), checkRowOrder=True, rtol=0.0, atol=0.0
        )


@pytest.fixture(scope="module")
def figures(spark: SparkSession, traces: Path) -> Iterator[Figures]:
    analysis = analyze(read_traces(spark, str(traces)))
    yield analysis
    analysis.unpersist()


@pytest.fixture(scope="module")
def expected(traces: Path) -> dict[str, list[tuple[Any, ...]]]:
    return expected_tables(traces)


# -- the simulator's traces -----------------------------------------------------------------------
def test_the_workload_exercises_every_figure(expected: dict[str, list[tuple]]) -> None:
    """Guards the fixture: a workload without flushed deliveries or forwarded subscriptions
    would let those figures pass vacuously."""
    online, flushed, stored, _still, _unmatched, _duplicates = expected["deliveries"][0]
    assert online > 100 and flushed > 10 and stored == flushed
    assert 0 < expected["forwarding_total"][0][1] < expected["forwarding_total"][0][0]
    assert len(expected["latency_over_time"]) > 5 and len(expected["hops"]) > 3


@pytest.mark.slow
@pytest.mark.spark
def test_bucket_size(figures: Figures, expected: dict[str, list[tuple]]) -> None:
    first, last = expected["overview"][0][2], expected["overview"][0][3]
    span = last - first
    assert 3 < span < 12  # the simulated run lasts a few seconds ...
    # ... so 0.1 s or 0.2 s buckets: the smallest size that needs at most 60 of them
    size = figures.bucket_seconds
    assert size in (0.1, 0.2)
    assert span <= size * MAX_BUCKETS
    smaller = BUCKET_SIZES[BUCKET_SIZES.index(size) - 1]
    assert span > smaller * MAX_BUCKETS


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_figure_agrees_with_plain_python(
    figures: Figures, expected: dict[str, list[tuple]], name: str
) -> None:
    assertDataFrameEqual(
        figures.collect(name), as_rows(name, expected[name]), checkRowOrder=True, rtol=0.0, atol=0.0
    )


@pytest.mark.slow
@pytest.mark.spark
def test_the_growing_tables_first_rows_reach_the_driver(
    figures: Figures, expected: dict[str, list[tuple]]
) -> None:
    """The report shows the first rows of the tables that grow with the input, and the busiest
    second of the traffic, without collecting them whole."""
    assert [tuple(r) for r in figures.shown["subscriptions"]] == expected["subscriptions"][:30]
    assert [tuple(r) for r in figures.shown["duplicates"]] == expected["duplicates"][:30]
    busiest = min(expected["traffic_per_second"], key=lambda r: (-r[1], r[0]))
    assert [tuple(r) for r in figures.shown["traffic_per_second"]] == [busiest]


@pytest.mark.slow
@pytest.mark.spark
def test_one_analysis_is_a_handful_of_spark_jobs(spark: SparkSession, traces: Path) -> None:
    """Two passes: the tallies, then one query for the rest, whose two broadcasts (the
    publications the deliveries meet, the bins that hold the percentiles) are jobs of their own.
    Before, each table was a job or more: 33 of them."""
    context = spark.sparkContext
    context.setJobGroup("one-analysis", "test_one_analysis_is_a_handful_of_spark_jobs")
    try:
        analyze(read_traces(spark, str(traces))).unpersist()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert len(context.statusTracker().getJobIdsForGroup("one-analysis")) == 4


@pytest.mark.slow
@pytest.mark.spark
def test_figures_match_the_simulators_own_counts(
    figures: Figures, expected: dict[str, list[tuple]]
) -> None:
    """The simulator counts messages and deliveries itself, outside the traces: the analysis of
    its traces must find the same (acknowledgements are not traced, so they are left out)."""
    simulation = simulate()
    report = simulation.report()
    counted = {
        kind: (counts["count"], counts["bytes"])
        for kind, counts in report["messages"].items()  # type: ignore[union-attr]
        if kind != "peer.ack"
    }
    assert {row.kind: (row.messages, row.bytes) for row in figures.tables["kinds"]} == counted
    hops = {int(h): n for h, n in report["hops"].items()}  # type: ignore[union-attr]
    assert dict(expected["hops"]) == hops
    assert report["totals"]["redeliveries"] == 0  # type: ignore[index]


# -- other inputs ---------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.spark
def test_invalid_lines_are_counted_shown_and_left_out(
    spark: SparkSession, corrupt_traces: Path, expected: dict[str, list[tuple]]
) -> None:
    actual = collect_all(read_traces(spark, str(corrupt_traces)))
    with_garbage = expected_tables(corrupt_traces)
    assert with_garbage["quality"] == [
        (expected["quality"][0][0] + len(GARBAGE), expected["quality"][0][1], len(GARBAGE))
    ]
    assert with_garbage["invalid_examples"] == [(line,) for line in sorted(GARBAGE)[:5]]
    for name in SCHEMAS:  # the rest of the analysis is untouched by the garbage
        if name not in ("quality", "invalid_examples"):
            assert with_garbage[name] == expected[name]
    assert_same_figures(actual, with_garbage)


@pytest.mark.slow
@pytest.mark.spark
def test_gzip_input_in_subfolders(
    spark: SparkSession, gzip_traces: Path, expected: dict[str, list[tuple]]
) -> None:
    """Also the events kept as compressed columns, as for inputs too large to keep as rows."""
    raw = read_traces(spark, str(gzip_traces))
    assert_same_figures(collect_all(raw, keep="columns"), expected)


@pytest.mark.parametrize("variant", ["traces", "corrupt_traces", "gzip_traces"])
def test_reference_agrees_with_plain_python(variant: str, request: pytest.FixtureRequest) -> None:
    """``analytics.reference`` (the benchmark's single-process yardstick) against the computation
    above; Spark is held to the same computation, so the benchmark compares equals."""
    directory = request.getfixturevalue(variant)
    tables = reference.compute(directory)
    first, last = tables["overview"][0][2], tables["overview"][0][3]
    assert tables.pop("bucket_seconds") == [(bucket_seconds(last - first),)]
    assert tables == expected_tables(directory)
