"""The transforms on small inline DataFrames, with the tables ``analytics.tables`` finishes from
their rows: the cases a healthy simulation never produces (duplicates, deliveries without a
publication, notifications never flushed) and the edges of the definitions (ties in
percentiles, several subscription ids on one notification, trees that change shape)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from analytics import tables
from analytics.figures import (
    collect_parts,
    delivery_latencies,
    duplicate_deliveries,
    forwarding_efficiency,
    hot_subscriptions,
    incidents_per_bucket,
    latency_ranks,
    nearest_rank,
    still_stored,
    subscription_routes,
    tallies,
    timeline,
)
from analytics.schema import INVALID_COLUMN, TRACE_SCHEMA

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def events(spark: SparkSession, *records: dict[str, Any]) -> DataFrame:
    """Valid trace events: each record's fields, null where absent (``bytes`` 0)."""
    default = {"bytes": 0}
    return spark.createDataFrame(
        [tuple(r.get(f, default.get(f)) for f in TRACE_SCHEMA.fieldNames()) for r in records],
        TRACE_SCHEMA,
    )


def counted(trace: DataFrame) -> tuple[dict[str, tables.Table], tables.Counts]:
    """The tables read off the ``tallies`` of valid ``trace`` events."""
    rows = tallies(trace.withColumn(INVALID_COLUMN, F.lit(None).cast("string"))).collect()
    return tables.from_tallies(rows)


def assert_equal(actual: DataFrame, expected: DataFrame) -> None:
    assertDataFrameEqual(actual, expected, checkRowOrder=True, rtol=0.0, atol=0.0)


def test_nearest_rank_percentiles_with_ties(spark: SparkSession) -> None:
    values = spark.createDataFrame(
        [("a", float(v)) for v in range(10, 0, -1)]
        + [("b", v) for v in (5.0, 1.0, 5.0, 5.0)]
        + [("c", v) for v in (-2.0, 0.0, 0.0, 3.0, -0.5, -2.0)],
        "key string, latency double",
    )
    # a: 1..10, rank ceil(P * 10 / 100); b: 1, 5, 5, 5, rank ceil(P * 4 / 100); c: -2, -2,
    # -0.5, 0, 0, 3 (zero and negative values), rank ceil(P * 6 / 100). Each row also carries its
    # group's count and minimum.
    expected = spark.createDataFrame(
        [
            *[("a", p, v, 10, 1.0) for p, v in ((1, 1.0), (25, 3.0), (26, 3.0), (50, 5.0))],
            *[("a", p, v, 10, 1.0) for p, v in ((90, 9.0), (99, 10.0), (100, 10.0))],
            *[("b", p, v, 4, 1.0) for p, v in ((1, 1.0), (25, 1.0), (26, 5.0), (50, 5.0))],
            *[("b", p, v, 4, 1.0) for p, v in ((90, 5.0), (99, 5.0), (100, 5.0))],
            *[("c", p, v, 6, -2.0) for p, v in ((1, -2.0), (25, -2.0), (26, -2.0), (50, -0.5))],
            *[("c", p, v, 6, -2.0) for p, v in ((90, 3.0), (99, 3.0), (100, 3.0))],
        ],
        "key string, percent int, latency double, _total bigint, _min double",
    )
    actual = nearest_rank(values, ["key"], "latency", (1, 25, 26, 50, 90, 99, 100))
    assert_equal(actual.orderBy("key", "percent"), expected)


def test_duplicates_unmatched_and_never_flushed_deliveries(spark: SparkSession) -> None:
    trace = events(
        spark,
        {"ts": 10.0, "node": "sp0", "event": "publish", "kind": "sp.notification", "pub": "p1"},
        *(
            {"ts": t, "node": "sp1", "event": "deliver", "kind": "peer.notify", "pub": "p1",
             "origin": "sp0", "peer": "alice", "hops": 1}
            for t in (10.5, 10.7)
        ),  # delivered twice: a duplicate
        {"ts": 11.0, "node": "sp1", "event": "deliver", "kind": "peer.notify", "pub": "p2",
         "origin": "sp0", "peer": "alice", "hops": 1},  # p2's publish is not in the logs
        {"ts": 11.0, "node": "sp2", "event": "offline", "kind": "peer.notify", "pub": "p1",
         "origin": "sp0", "peer": "bob", "hops": 1},
        {"ts": 20.0, "node": "sp2", "event": "flush", "kind": "peer.notify", "pub": "p1",
         "origin": "sp0", "peer": "bob", "hops": 1},
        {"ts": 12.0, "node": "sp2", "event": "offline", "kind": "peer.notify", "pub": "p1",
         "origin": "sp0", "peer": "carol", "hops": 1},  # never flushed
    )  # fmt: skip
    duplicates = duplicate_deliveries(trace)
    assert_equal(
        duplicates,
        spark.createDataFrame([("alice", "p1", 2)], "peer string, pub string, deliveries bigint"),
    )
    _, counts = counted(trace)
    for broadcast in (True, False):
        ranks = latency_ranks(delivery_latencies(trace, broadcast=broadcast), 1.0).collect()
        _, timed = tables.latency_tables(ranks, 1.0)
        summary = tables.deliveries(
            counts,
            timed=timed,
            still_stored=still_stored(trace).first()["still_stored"],  # type: ignore[index]
            duplicate_pairs=duplicates.count(),
        )
        # online, flushed, stored offline, still stored, without publish, duplicate pairs
        assert summary == (3, 1, 2, 1, 1, 1)


def test_stored_notifications_with_a_missing_part_are_never_flushed(spark: SparkSession) -> None:
    """A key with a null part matches no flush, as in a join (null equals nothing)."""
    trace = events(
        spark,
        {"ts": 1.0, "node": "sp2", "event": "offline", "kind": "peer.notify", "pub": "p1"},
        {"ts": 2.0, "node": "sp2", "event": "flush", "kind": "peer.notify", "pub": "p1"},
        {"ts": 1.0, "node": "sp2", "event": "offline", "kind": "peer.notify", "pub": "p2",
         "peer": "bob"},
        {"ts": 2.0, "node": "sp2", "event": "flush", "kind": "peer.notify", "pub": "p2",
         "peer": "bob"},
    )  # fmt: skip
    assert_equal(still_stored(trace), spark.createDataFrame([(1,)], "still_stored bigint"))


def test_forwarding_counts_distinct_subscriptions_and_every_listed_id(spark: SparkSession) -> None:
    def forward(node: str, neighbour: str, sub: str) -> dict[str, Any]:
        return {"ts": 1.0, "node": node, "event": "send", "kind": "sp.forward", "sub": sub,
                "neighbour": neighbour}  # fmt: skip

    def notify(node: str, neighbour: str, sub: str) -> dict[str, Any]:
        return {"ts": 2.0, "node": node, "event": "send", "kind": "sp.notification", "sub": sub,
                "neighbour": neighbour, "pub": "p1", "origin": node, "hops": 1}  # fmt: skip

    trace = events(
        spark,
        forward("sp0", "sp1", "s1"),
        forward("sp0", "sp1", "s1"),  # sent again (after a topology change): still one
        forward("sp0", "sp1", "s2"),
        forward("sp0", "sp2", "s3"),
        notify("sp1", "sp0", "s2,s9"),  # answers s2; s9 was never forwarded to sp1
        notify("sp2", "sp0", "s1"),  # s1 went to sp1, not to sp2
        {"ts": 2.0, "node": "sp1", "event": "receive", "kind": "sp.notification", "sub": "s1",
         "neighbour": "sp0"},  # a receive does not answer anything
    )  # fmt: skip
    per_superpeer = forwarding_efficiency(subscription_routes(trace)).orderBy("superpeer")
    assert_equal(
        per_superpeer,
        spark.createDataFrame(
            [("sp1", 2, 1, 0.5), ("sp2", 1, 0, 0.0)],
            "superpeer string, forwarded bigint, routed bigint, share double",
        ),
    )
    assert tables.forwarding_total([tuple(r) for r in per_superpeer.collect()]) == [(3, 1, 1 / 3)]


def test_hot_subscriptions_of_super_peers_and_of_peers(spark: SparkSession) -> None:
    """A forwarded subscription counts the notifications sent back listing it, from every
    super-peer it went to; a peer's counts the deliveries listing it (when the trace has them)."""

    def notify(node: str, neighbour: str, sub: str) -> dict[str, Any]:
        return {"ts": 2.0, "node": node, "event": "send", "kind": "sp.notification", "sub": sub,
                "neighbour": neighbour, "pub": "p1", "origin": node, "hops": 1}  # fmt: skip

    def deliver(peer: str, sub: str | None) -> dict[str, Any]:
        return {"ts": 3.0, "node": "sp1", "event": "deliver", "kind": "peer.notify", "pub": "p1",
                "origin": "sp0", "peer": peer, "sub": sub, "hops": 1}  # fmt: skip

    trace = events(
        spark,
        notify("sp1", "sp0", "s1,s2"),
        notify("sp2", "sp0", "s1"),  # s1 went to two super-peers: both answers count
        notify("sp1", "sp0", "s1"),
        deliver("alice", "q1,q2"),
        deliver("alice", "q1"),
        deliver("bob", None),  # a delivery without ids answers nothing
    )
    assert_equal(
        hot_subscriptions(subscription_routes(trace)).orderBy(
            F.desc("notifications"), "level", "holder", "sub"
        ),
        spark.createDataFrame(
            [
                ("superpeer", "sp0", "s1", 3),
                ("peer", "alice", "q1", 2),
                ("peer", "alice", "q2", 1),
                ("superpeer", "sp0", "s2", 1),
            ],
            "level string, holder string, sub string, notifications bigint",
        ),
    )


def test_forwarding_trees_per_origin(spark: SparkSession) -> None:
    """Edges per origin and depth; a tree that changed shape shows more edges than super-peers;
    an origin whose publications reached nobody has an empty tree."""

    def relay(origin: str, node: str, neighbour: str, hops: int) -> dict[str, Any]:
        return {"ts": 2.0, "node": node, "event": "send", "kind": "sp.notification",
                "neighbour": neighbour, "pub": "p", "origin": origin, "hops": hops,
                "bytes": 100}  # fmt: skip

    def publish(node: str) -> dict[str, Any]:
        return {"ts": 1.0, "node": node, "event": "publish", "kind": "sp.notification",
                "pub": "p", "origin": node, "hops": 0}  # fmt: skip

    trace = events(
        spark,
        publish("sp0"),
        publish("sp0"),
        relay("sp0", "sp0", "sp1", 1),
        relay("sp0", "sp0", "sp1", 1),
        relay("sp0", "sp1", "sp3", 2),
        relay("sp0", "sp2", "sp3", 2),  # sp3's parent changed: two edges into it
        publish("sp5"),  # nobody subscribed
        {"ts": 2.0, "node": "sp1", "event": "receive", "kind": "sp.notification",
         "neighbour": "sp0", "origin": "sp0", "hops": 1},  # receives are not edges
    )  # fmt: skip
    small, _ = counted(trace)
    # origin, hops, node, neighbour, messages, bytes
    assert small["tree_edges"] == [
        ("sp0", 1, "sp0", "sp1", 2, 200),
        ("sp0", 2, "sp1", "sp3", 1, 100),
        ("sp0", 2, "sp2", "sp3", 1, 100),
    ]
    # origin, publications, edges, super-peers, depth, messages, messages per publication
    assert small["tree_shape"] == [("sp0", 2, 3, 2, 2, 4, 2.0), ("sp5", 1, 0, 0, None, 0, 0.0)]


def test_incidents_over_time_count_faults_and_repairs_when_present(spark: SparkSession) -> None:
    """Future trace events (a neighbour found failed, a repair) count beside today's (drops,
    failed identifications); other events do not, and logs without any give no rows."""

    def event(ts: float, name: str) -> dict[str, Any]:
        return {"ts": ts, "node": "sp0", "event": name, "kind": "link.error"}

    trace = events(
        spark,
        event(0.5, "neighbour_failed"),
        event(1.5, "repair"),
        event(1.7, "repair"),
        event(1.9, "drop"),
        event(2.5, "auth_failure"),
        event(2.6, "refused"),
        {"ts": 2.7, "node": "sp0", "event": "send", "kind": "sp.forward", "neighbour": "sp1"},
    )

    def over_time(trace: DataFrame) -> tables.Table:
        rows = incidents_per_bucket(timeline(trace, 1.0)).collect()
        return tables.incidents_over_time({(r[0], r[1]): r[2] for r in rows}, 1.0)

    # bucket start, bucket seconds, event, events
    assert over_time(trace) == [
        (0.0, 1.0, "neighbour_failed", 1),
        (1.0, 1.0, "drop", 1),
        (1.0, 1.0, "repair", 2),
        (2.0, 1.0, "auth_failure", 1),
    ]
    assert over_time(trace.where(F.col("event") == "send")) == []


def test_frames_of_any_schema_collected_in_one_job(spark: SparkSession) -> None:
    """``collect_parts``: each frame's rows come back whole under its name, with its own columns
    and types, an empty frame as no rows; one Spark job in all."""
    numbers = spark.createDataFrame([(1, 2.5), (2, None)], "n bigint, x double")
    words = spark.createDataFrame([("a", ["b", "c"])], "w string, more array<string>")
    none = spark.createDataFrame([], "flag boolean")
    context = spark.sparkContext
    context.setJobGroup("parts", "test_frames_of_any_schema_collected_in_one_job")
    try:
        parts = collect_parts({"numbers": numbers, "words": words, "none": none})
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert sorted(parts["numbers"]) == [(1, 2.5), (2, None)]
    assert parts["numbers"][0]["x"] in (2.5, None)
    assert parts["words"] == [("a", ["b", "c"])]
    assert parts["none"] == []
    assert len(context.statusTracker().getJobIdsForGroup("parts")) == 1
