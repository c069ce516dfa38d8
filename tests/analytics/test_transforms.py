"""The transforms on small inline DataFrames: the cases a healthy simulation never produces
(duplicates, deliveries without a publication, notifications never flushed) and the edges of the
definitions (ties in percentiles, Gini extremes, several subscription ids on one notification)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from analytics.figures import (
    delivery_latencies,
    delivery_summary,
    duplicate_deliveries,
    forwarding_efficiency,
    forwarding_total,
    load_curve,
    load_gini,
    nearest_rank,
)
from analytics.schema import TRACE_SCHEMA

pytestmark = pytest.mark.spark


def events(spark: SparkSession, *records: dict[str, Any]) -> DataFrame:
    """Valid trace events: each record's fields, null where absent (``bytes`` 0)."""
    default = {"bytes": 0}
    return spark.createDataFrame(
        [tuple(r.get(f, default.get(f)) for f in TRACE_SCHEMA.fieldNames()) for r in records],
        TRACE_SCHEMA,
    )


def assert_equal(actual: DataFrame, expected: DataFrame) -> None:
    assertDataFrameEqual(actual, expected, checkRowOrder=True, rtol=0.0, atol=0.0)


def test_nearest_rank_percentiles_with_ties(spark: SparkSession) -> None:
    values = spark.createDataFrame(
        [("a", float(v)) for v in range(10, 0, -1)] + [("b", v) for v in (5.0, 1.0, 5.0, 5.0)],
        "key string, latency double",
    )
    # a: 1..10, rank ceil(P * 10 / 100); b: 1, 5, 5, 5, rank ceil(P * 4 / 100).
    expected = spark.createDataFrame(
        [
            ("a", 1, 1.0),
            ("a", 25, 3.0),
            ("a", 26, 3.0),
            ("a", 50, 5.0),
            ("a", 90, 9.0),
            ("a", 99, 10.0),
            ("a", 100, 10.0),
            ("b", 1, 1.0),
            ("b", 25, 1.0),
            ("b", 26, 5.0),
            ("b", 50, 5.0),
            ("b", 90, 5.0),
            ("b", 99, 5.0),
            ("b", 100, 5.0),
        ],
        "key string, percent int, latency double",
    )
    actual = nearest_rank(values, ["key"], "latency", (1, 25, 26, 50, 90, 99, 100))
    assert_equal(actual.orderBy("key", "percent"), expected)


def test_gini_of_equal_loads_one_carrier_and_no_load(spark: SparkSession) -> None:
    schema = "node string, load bigint"
    equal = spark.createDataFrame([("a", 5), ("b", 5), ("c", 5), ("d", 5)], schema)
    one = spark.createDataFrame([("a", 0), ("b", 0), ("c", 10), ("d", 0)], schema)
    none = spark.createDataFrame([("a", 0), ("b", 0)], schema)
    gini = "superpeers bigint, total_load bigint, gini double"
    assert_equal(load_gini(equal), spark.createDataFrame([(4, 20, 0.0)], gini))
    assert_equal(load_gini(one), spark.createDataFrame([(4, 10, 0.75)], gini))  # (n - 1) / n
    assert_equal(load_gini(none), spark.createDataFrame([(2, 0, None)], gini))
    assert_equal(
        load_curve(none),
        spark.createDataFrame(
            [(1, "a", 0, 0.5, None), (2, "b", 0, 1.0, None)],
            "rank bigint, node string, load bigint, superpeer_share double, "
            "cumulative_load_share double",
        ),
    )


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
    deliveries = delivery_latencies(trace)
    duplicates = duplicate_deliveries(deliveries)
    assert_equal(
        duplicates,
        spark.createDataFrame([("alice", "p1", 2)], "peer string, pub string, deliveries bigint"),
    )
    assert_equal(
        delivery_summary(trace, deliveries, duplicates),
        spark.createDataFrame(
            [(3, 1, 2, 1, 1, 1)],
            "online bigint, flushed bigint, stored_offline bigint, still_stored bigint, "
            "without_publish bigint, duplicate_pairs bigint",
        ),
    )


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
    per_superpeer = forwarding_efficiency(trace)
    assert_equal(
        per_superpeer,
        spark.createDataFrame(
            [("sp1", 2, 1, 0.5), ("sp2", 1, 0, 0.0)],
            "superpeer string, forwarded bigint, routed bigint, share double",
        ),
    )
    assert_equal(
        forwarding_total(per_superpeer),
        spark.createDataFrame([(3, 1, 1 / 3)], "forwarded bigint, routed bigint, share double"),
    )
