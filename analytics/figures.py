"""The figures of the traffic report: DataFrame transforms, events in, aggregates out.

Every transform takes DataFrames and returns a DataFrame, lazily: nothing here collects data to
the driver except ``analyze``, which reads one row (the time span and the number of publications)
to size the time buckets and to choose the join strategy. Outputs are sorted in report order, so
their rows can be collected and shown as they are.

The work is organised in passes, because reading the events is what costs (JSON parsing first,
then every scan): ``analyze`` caches the events once, and each group of figures is one pass over
that cache, whose small result the figures of the group are read off:

- ``tallies``: one aggregation over every line, keyed by the few columns the counting figures need
  (a few thousand rows whatever the input size): input quality, the overview, messages per kind,
  per super-peer and per link, load, hop counts, the forwarding trees, the delivery counts;
- ``timeline``: super-peer messages per second and per time bucket, and incidents per bucket;
- ``delivery_latencies``: deliveries joined to their publications' times (the publications, small
  beside the deliveries, are broadcast when few enough), for the latency percentiles;
- ``subscription_routes``: forwarded subscriptions and the notifications that answered them, for
  forwarding efficiency and the hot subscriptions.

``events`` below is ``valid_events(raw)``, the valid rows of ``analytics.load.read_traces``.

Definitions (the report repeats them):

wire message
    a message on a wire, counted once: a ``send`` (to a neighbour super-peer or a peer), a
    ``receive`` with a ``peer`` (a request from a local peer), a ``deliver`` or a ``flush`` (a
    notification handed to a local peer). The daemons do not trace every message yet (replies to
    peers, identification, topology): what they trace as ``send`` or ``receive`` counts.
load of a super-peer
    the number of messages it received, from neighbour super-peers and from peers: its
    ``receive`` events. Every super-peer that appears in the logs counts, with load 0 if it
    received nothing.
sorted cumulative load
    super-peers sorted by load, highest first (ties by name); point k is x = k / n (share of
    super-peers), y = the loads of the first k over the total load.
Gini coefficient
    of the per-super-peer loads sorted ascending, x_1 <= ... <= x_n:
    G = 2 * sum(i * x_i) / (n * sum(x_i)) - (n + 1) / n; 0 when every super-peer carries the
    same load, (n - 1) / n when one carries all. Undefined (null) when the total load is 0.
delivery
    a ``deliver`` event (``online``) or a ``flush`` event (``flushed``: stored while the peer
    was detached, delivered when it came back).
latency
    delivery ``ts`` minus the ``ts`` of the publication's ``publish`` event at its origin (the
    earliest, should a publication be published twice at one origin), matched on ``pub`` and
    ``origin``. Deliveries without a matching ``publish`` are counted, not guessed.
nearest-rank percentile
    the P-th percentile (P = 1..100) of n values sorted ascending is the value at 1-based rank
    ceil(P * n / 100), computed in integers; p100 is the maximum.
time bucket
    ``floor(t / s) * s`` for a bucket size s from ``definitions.BUCKET_SIZES``, the smallest that
    splits the traces' time span into at most ``definitions.MAX_BUCKETS`` buckets; latency
    buckets by publication time.
duplicate delivery
    a (peer, pub) pair delivered (``deliver`` or ``flush``) more than once.
forwarded subscription
    a distinct (sender super-peer, receiving super-peer, sub id) of the ``send`` events of kind
    ``sp.forward``. It *routed a notification back* if the receiving super-peer sent the sender
    an ``sp.notification`` whose ``sub`` list holds that id. Forwarding efficiency is routed /
    forwarded, overall and per receiving super-peer.
hot subscription
    a subscription by the notifications that answered it: a super-peer's forwarded subscription
    (its id in the ``sub`` lists of the ``sp.notification`` messages sent to it) or a peer's own
    (its id in the ``sub`` list of a ``deliver`` or ``flush`` to it, where the trace has one).
forwarding tree of an origin
    the ``sp.notification`` messages carrying the origin's publications, per tree edge (sending
    super-peer, receiving neighbour) and depth (the message's hop count, the receiver's depth in
    the origin's tree).
traffic
    ``send`` events to a neighbour (super-peer to super-peer messages) and their bytes, per
    second of ``ts``
    (``floor(ts)``) and per time bucket.
incident
    an event of ``definitions.INCIDENT_EVENTS`` (a fault or a repair), counted per time bucket.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import reduce
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from analytics.definitions import (
    BROADCAST_PUBLICATIONS,
    CDF_PERCENTS,
    FLUSHED,
    INCIDENT_EVENTS,
    ONLINE,
    SUMMARY_PERCENTS,
    bucket_seconds,
)
from analytics.schema import INVALID_COLUMN

NOTIFICATION: Final = "sp.notification"
FORWARD: Final = "sp.forward"
PEER_LEVEL: Final = "peer"
SUPERPEER_LEVEL: Final = "superpeer"


# -- input ----------------------------------------------------------------------------------------
def valid_events(raw: DataFrame) -> DataFrame:
    """The valid rows of ``read_traces``, without the invalid-line column."""
    return raw.where(F.col(INVALID_COLUMN).isNull()).drop(INVALID_COLUMN)


def invalid_examples(raw: DataFrame, limit: int = 5) -> DataFrame:
    """``line``: up to ``limit`` invalid lines, the first in text order (an order that does not
    depend on file names or partitioning, so a run on the Parquet copy shows the same ones)."""
    return (
        raw.where(F.col(INVALID_COLUMN).isNotNull())
        .select(F.col(INVALID_COLUMN).alias("line"))
        .orderBy("line")
        .limit(limit)
    )


# -- pass 1: tallies ------------------------------------------------------------------------------
def tallies(raw: DataFrame) -> DataFrame:
    """``valid, node, event, kind, neighbour, peer_request, origin, hops, events, bytes, first_ts,
    last_ts``: the lines of ``raw`` (``read_traces``) counted by what the counting figures tell
    apart, in one aggregation.

    Invalid lines count in one row with ``valid`` false and every key null. Of valid lines, the
    keys keep only what some figure reads, so the table stays small (thousands of rows, not
    millions): ``neighbour`` on ``send`` events (links), ``peer_request`` on ``receive`` events
    (a request from a local peer is a wire message; a receive from a neighbour is not), ``origin``
    on ``sp.notification`` sends (forwarding trees), ``hops`` on those and on deliveries."""
    valid = F.col(INVALID_COLUMN).isNull()
    event, kind = F.col("event"), F.col("kind")
    tree_edge = (event == "send") & (kind == NOTIFICATION)
    delivery = event.isin("deliver", "flush")

    def kept(column: str, where: Column | None = None) -> Column:
        condition = valid if where is None else valid & where
        return F.when(condition, F.col(column)).alias(column)

    return raw.groupBy(
        valid.alias("valid"),
        kept("node"),
        kept("event"),
        kept("kind"),
        kept("neighbour", event == "send"),
        (valid & (event == "receive") & F.col("peer").isNotNull()).alias("peer_request"),
        kept("origin", tree_edge),
        kept("hops", tree_edge | delivery),
    ).agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(F.when(valid, F.col("bytes"))).alias("bytes"),
        F.min(F.when(valid, F.col("ts"))).alias("first_ts"),
        F.max(F.when(valid, F.col("ts"))).alias("last_ts"),
    )


def input_quality(counted: DataFrame) -> DataFrame:
    """``lines, valid, invalid``: the non-blank lines read, and how many were (in)valid
    (``counted`` is ``tallies``)."""
    valid = F.col("valid")
    return counted.agg(
        _total(F.col("events")).alias("lines"),
        _total(F.when(valid, F.col("events"))).alias("valid"),
        _total(F.when(~valid, F.col("events"))).alias("invalid"),
    )


def overview(counted: DataFrame) -> DataFrame:
    """``events, superpeers, first_ts, last_ts, messages, bytes``: one row about the whole run
    (messages and bytes are wire messages)."""
    wire = _wire_message()
    return (
        counted.where("valid")
        .agg(
            _total(F.col("events")).alias("events"),
            F.countDistinct("node").alias("superpeers"),
            F.min("first_ts").alias("first_ts"),
            F.max("last_ts").alias("last_ts"),
            _total(F.when(wire, F.col("events"))).alias("messages"),
            _total(F.when(wire, F.col("bytes"))).alias("bytes"),
        )
        .select("events", "superpeers", "first_ts", "last_ts", "messages", "bytes")
    )


def messages_by_kind(counted: DataFrame) -> DataFrame:
    """``kind, messages, bytes``: wire messages per message kind."""
    return (
        counted.where(F.col("valid") & _wire_message())
        .groupBy("kind")
        .agg(F.sum("events").alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("kind")
    )


def traffic_by_superpeer(counted: DataFrame) -> DataFrame:
    """``node, sent, sent_bytes, received, received_bytes`` per super-peer in the logs: sent are
    its ``send``, ``deliver`` and ``flush`` events (to neighbours and to its peers), received its
    ``receive`` events (so ``received`` is its load)."""
    sending = F.col("event").isin("send", "deliver", "flush")
    receiving = F.col("event") == "receive"
    return (
        counted.where("valid")
        .groupBy("node")
        .agg(
            _total(F.when(sending, F.col("events"))).alias("sent"),
            _total(F.when(sending, F.col("bytes"))).alias("sent_bytes"),
            _total(F.when(receiving, F.col("events"))).alias("received"),
            _total(F.when(receiving, F.col("bytes"))).alias("received_bytes"),
        )
        .orderBy("node")
    )


def traffic_by_link(counted: DataFrame) -> DataFrame:
    """``node, neighbour, messages, bytes``: super-peer to super-peer ``send`` events per
    directed link."""
    return (
        counted.where(F.col("valid") & (F.col("event") == "send") & F.col("neighbour").isNotNull())
        .groupBy("node", "neighbour")
        .agg(F.sum("events").alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("node", "neighbour")
    )


def load_by_superpeer(superpeers: DataFrame) -> DataFrame:
    """``node, load``: ``receive`` events per super-peer, 0 for one that received nothing, read
    off ``superpeers`` (``traffic_by_superpeer``, whose ``received`` they are)."""
    return superpeers.select("node", F.col("received").alias("load"))


def load_curve(load: DataFrame) -> DataFrame:
    """``rank, node, load, superpeer_share, cumulative_load_share``: the sorted cumulative load
    (``load`` is ``load_by_superpeer``). The share is null when nothing was received at all."""
    order = Window.orderBy(F.desc("load"), F.asc("node"))
    totals = load.agg(F.count(F.lit(1)).alias("_n"), F.sum("load").alias("_total"))
    return (
        load.withColumn("rank", F.row_number().over(order).cast("long"))
        .withColumn(
            "_upto",
            F.sum("load").over(order.rowsBetween(Window.unboundedPreceding, Window.currentRow)),
        )
        .crossJoin(F.broadcast(totals))
        .select(
            "rank",
            "node",
            "load",
            (F.col("rank") / F.col("_n")).alias("superpeer_share"),
            F.when(F.col("_total") > 0, F.col("_upto") / F.col("_total")).alias(
                "cumulative_load_share"
            ),
        )
        .orderBy("rank")
    )


def load_gini(load: DataFrame) -> DataFrame:
    """``superpeers, total_load, gini``: the Gini coefficient of the loads (module docstring)."""
    ascending = Window.orderBy(F.asc("load"), F.asc("node"))
    n, total, weighted = F.col("superpeers"), F.col("total_load"), F.col("_weighted")
    return (
        load.withColumn("_i", F.row_number().over(ascending))
        .agg(
            F.count(F.lit(1)).alias("superpeers"),
            F.coalesce(F.sum("load"), F.lit(0)).alias("total_load"),
            F.sum(F.col("_i") * F.col("load")).alias("_weighted"),
        )
        .select(
            "superpeers",
            "total_load",
            F.when(total > 0, (F.lit(2) * weighted) / (n * total) - (n + 1) / n).alias("gini"),
        )
    )


def hop_histogram(counted: DataFrame) -> DataFrame:
    """``hops, deliveries``: deliveries (online and flushed) per super-peer hop count."""
    return (
        counted.where(F.col("valid") & F.col("event").isin("deliver", "flush"))
        .groupBy("hops")
        .agg(F.sum("events").alias("deliveries"))
        .orderBy("hops")
    )


# -- forwarding trees -----------------------------------------------------------------------------
def tree_edges(counted: DataFrame) -> DataFrame:
    """``origin, hops, node, neighbour, messages, bytes``: the ``sp.notification`` messages of
    each origin's forwarding tree per edge (``node`` sent to ``neighbour``) and depth (``hops``,
    the neighbour's depth in the tree)."""
    return (
        counted.where(F.col("valid") & (F.col("event") == "send") & (F.col("kind") == NOTIFICATION))
        .groupBy("origin", "hops", "node", "neighbour")
        .agg(F.sum("events").alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("origin", "hops", "node", "neighbour")
    )


def tree_shape(counted: DataFrame) -> DataFrame:
    """``origin, publications, edges, superpeers, depth, messages, messages_per_publication`` per
    origin with publications or a forwarding tree in the logs: its ``publish`` events, the
    distinct edges its notifications took and the distinct super-peers they reached (more edges
    than super-peers: its tree changed shape during the logs), the deepest hop count, and the
    notification messages in all and per publication. One aggregation: the edges of a tree are
    few (at most one per super-peer and parent), so sets of them are cheap."""
    event = F.col("event")
    publish = event == "publish"
    edge = (event == "send") & (F.col("kind") == NOTIFICATION)
    link = F.when(edge & F.col("neighbour").isNotNull(), F.struct("node", "neighbour"))
    publications, messages = F.col("publications"), F.col("messages")
    return (
        counted.where(F.col("valid") & (publish | edge))
        .groupBy(F.when(publish, F.col("node")).otherwise(F.col("origin")).alias("origin"))
        .agg(
            _total(F.when(publish, F.col("events"))).alias("publications"),
            F.size(F.collect_set(link)).cast("long").alias("edges"),
            F.size(F.collect_set(F.when(edge, F.col("neighbour"))))
            .cast("long")
            .alias("superpeers"),
            F.max(F.when(edge, F.col("hops"))).alias("depth"),
            _total(F.when(edge, F.col("events"))).alias("messages"),
        )
        .select(
            "origin",
            "publications",
            "edges",
            "superpeers",
            "depth",
            "messages",
            F.when(publications > 0, messages / publications).alias("messages_per_publication"),
        )
        .orderBy("origin")
    )


# -- pass 2: timeline -----------------------------------------------------------------------------
def timeline(events: DataFrame, bucket: float) -> DataFrame:
    """``event, second, bucket_start, events, bytes``: ``send`` events to a neighbour per second
    of ``ts`` and time bucket, and incidents (``INCIDENT_EVENTS``) per event and time bucket, in
    one aggregation (``second`` is null for incidents)."""
    event = F.col("event")
    return (
        events.where(
            ((event == "send") & F.col("neighbour").isNotNull()) | event.isin(*INCIDENT_EVENTS)
        )
        .groupBy(
            "event",
            F.when(event == "send", F.floor("ts")).alias("second"),
            _bucket(F.col("ts"), bucket).alias("bucket_start"),
        )
        .agg(F.count(F.lit(1)).alias("events"), F.sum("bytes").alias("bytes"))
    )


def traffic_per_second(times: DataFrame) -> DataFrame:
    """``second, messages, bytes``: ``send`` events per second of ``ts`` (``floor(ts)``)
    (``times`` is ``timeline``)."""
    return (
        times.where(F.col("event") == "send")
        .groupBy("second")
        .agg(F.sum("events").alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("second")
    )


def traffic_over_time(times: DataFrame, bucket: float) -> DataFrame:
    """``bucket_start, bucket_seconds, messages, bytes, messages_per_second, bytes_per_second``:
    ``send`` events per time bucket, and their mean rates over the bucket."""
    return (
        times.where(F.col("event") == "send")
        .groupBy("bucket_start")
        .agg(F.sum("events").alias("messages"), F.sum("bytes").alias("bytes"))
        .select(
            "bucket_start",
            F.lit(bucket).alias("bucket_seconds"),
            "messages",
            "bytes",
            (F.col("messages") / F.lit(bucket)).alias("messages_per_second"),
            (F.col("bytes") / F.lit(bucket)).alias("bytes_per_second"),
        )
        .orderBy("bucket_start")
    )


def incidents_over_time(times: DataFrame, bucket: float) -> DataFrame:
    """``bucket_start, bucket_seconds, event, events``: incidents per time bucket and event; no
    rows when the logs hold none."""
    return (
        times.where(F.col("event") != "send")
        .groupBy("bucket_start", "event")
        .agg(F.sum("events").alias("events"))
        .select("bucket_start", F.lit(bucket).alias("bucket_seconds"), "event", "events")
        .orderBy("bucket_start", "event")
    )


# -- pass 3: deliveries ---------------------------------------------------------------------------
def publications(events: DataFrame) -> DataFrame:
    """``pub, origin, published``: the earliest ``publish`` event of each publication at each
    origin."""
    return (
        events.where(F.col("event") == "publish")
        .groupBy("pub", F.col("node").alias("origin"))
        .agg(F.min("ts").alias("published"))
    )


def delivery_latencies(events: DataFrame, *, broadcast: bool = True) -> DataFrame:
    """``delivery, published, latency``: every delivery, with its publication's time and its
    latency when the ``publish`` event is in the logs (null otherwise). ``broadcast`` ships the
    publications to every task instead of shuffling the deliveries (``analyze`` decides by their
    number)."""
    published = publications(events)
    return (
        events.where(F.col("event").isin("deliver", "flush"))
        .join(F.broadcast(published) if broadcast else published, ["pub", "origin"], "left")
        .select(
            F.when(F.col("event") == "deliver", F.lit(ONLINE))
            .otherwise(F.lit(FLUSHED))
            .alias("delivery"),
            "published",
            (F.col("ts") - F.col("published")).alias("latency"),
        )
    )


def latency_ranks(deliveries: DataFrame, bucket: float) -> DataFrame:
    """``delivery, bucket_start, percent, latency, _total, _min``: in one computation (one pass of
    ranking over the deliveries for both), the nearest-rank percentiles 1..100 of online and of
    flushed latencies (rows with ``delivery`` and no ``bucket_start``: the points of the latency
    CDF), and the percentiles ``SUMMARY_PERCENTS`` of online latencies per time bucket of their
    publication (rows with ``bucket_start`` and no ``delivery``)."""
    online = F.col("delivery") == ONLINE
    series = F.explode(
        F.array(
            F.struct(F.col("delivery"), F.lit(None).cast("double").alias("bucket_start")),
            F.when(
                online,
                F.struct(
                    F.lit(None).cast("string").alias("delivery"),
                    _bucket(F.col("published"), bucket).alias("bucket_start"),
                ),
            ),
        )
    )
    values = (
        deliveries.where(F.col("latency").isNotNull())
        .select(series.alias("_series"), "latency")
        .where(F.col("_series").isNotNull())
        .select("_series.*", "latency")
    )
    return nearest_rank(
        values,
        ["delivery", "bucket_start"],
        "latency",
        CDF_PERCENTS,
        only=F.col("delivery").isNotNull() | F.col("percent").isin(*SUMMARY_PERCENTS),
    )


def latency_cdf(ranks: DataFrame) -> DataFrame:
    """``delivery, percent, latency, _total, _min``: the points of the latency CDF, read off
    ``ranks`` (``latency_ranks``), with their group's count and minimum."""
    return (
        ranks.where(F.col("delivery").isNotNull())
        .select("delivery", "percent", "latency", "_total", "_min")
        .orderBy("delivery", "percent")
    )


def latency_summary(cdf: DataFrame) -> DataFrame:
    """``delivery, deliveries, min, p50, p90, p99, max`` for online and for flushed deliveries
    with a latency, read off ``cdf`` (``latency_cdf``, whose rows carry their group's count and
    minimum): nothing is ranked or counted again."""
    return (
        cdf.groupBy("delivery")
        .agg(
            F.max("_total").alias("deliveries"),
            F.max("_min").alias("min"),
            *_pivot(),
            F.max("latency").alias("max"),
        )
        .orderBy("delivery")
    )


def latency_over_time(ranks: DataFrame, bucket: float) -> DataFrame:
    """``bucket_start, bucket_seconds, deliveries, p50, p90, p99`` of online deliveries, by the
    time bucket of their publication, read off ``ranks`` (``latency_ranks``)."""
    return (
        ranks.where(F.col("delivery").isNull())
        .groupBy("bucket_start")
        .agg(F.lit(bucket).alias("bucket_seconds"), F.max("_total").alias("deliveries"), *_pivot())
        .orderBy("bucket_start")
    )


def nearest_rank(
    values: DataFrame,
    keys: Sequence[str],
    value: str,
    percents: Sequence[int],
    *,
    only: Column | None = None,
) -> DataFrame:
    """``*keys, percent, <value>, _total, _min``: the nearest-rank ``percents`` (integers 1..100)
    of ``value`` within each group of ``keys`` (a null key is a key like any other), exactly, and
    the group's number of values and smallest value. ``only``, a condition on the keys and
    ``percent``, keeps fewer percentiles in some groups.

    Sorting every value would put each group in one task; instead, two passes over ``values``
    (which should be cheap to read twice). The first counts the values per bin of ``_bin``, a
    map that never decreases, so the bins are sorted as their values are: each bin, holding the
    1-based ranks (before, upto] of its group, holds the P-th percentile for exactly the P whose
    rank ceil(P * total / 100) falls there, P from floor(100 * before / total) + 1 to
    floor(100 * upto / total), all in integers (no floating-point rank to round the wrong way).
    The second sorts only the values of those bins (at most 100 per group, small) and takes
    each percentile at its rank within its bin. The counts per bin are few (thousands per
    group, ``_BINS_PER_DOUBLING``), so they are ranked in one partition, without a shuffle per
    window."""
    binned = values.select(*keys, value, _bin(F.col(value)).alias("_bin"))
    bins = (
        binned.groupBy(*keys, "_bin")
        .agg(F.count(F.lit(1)).alias("_count"), F.min(value).alias("_low"))
        .coalesce(1)
    )
    group = Window.partitionBy(*keys)
    upto = group.orderBy("_bin").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = bins.select(
        *keys,
        "_bin",
        (F.sum("_count").over(upto) - F.col("_count")).alias("_before"),
        F.sum("_count").over(upto).alias("_upto"),
        F.sum("_count").over(group).alias("_total"),
        F.min("_low").over(group).alias("_min"),
    )
    first = F.expr("(100 * _before) div _total + 1")
    last = F.expr("(100 * _upto) div _total")
    wanted = (
        ranked.where(first <= last)
        .select(
            *keys,
            "_bin",
            "_before",
            "_total",
            "_min",
            F.explode(F.sequence(first, last)).alias("percent"),
        )
        .where(
            F.col("percent").isin(*percents)
            if only is None
            else F.col("percent").isin(*percents) & only
        )
        .withColumn("_offset", F.expr("(percent * _total + 99) div 100 - _before"))
    )
    needed = wanted.select(*keys, "_bin").distinct()
    positioned = (
        binned.alias("_value")
        .join(
            F.broadcast(needed.alias("_needed")),
            _same("_value", "_needed", [*keys, "_bin"]),
            "left_semi",
        )
        .withColumn(
            "_offset", F.row_number().over(Window.partitionBy(*keys, "_bin").orderBy(value))
        )
    )
    return (
        wanted.alias("_wanted")
        .join(positioned.alias("_value"), _same("_wanted", "_value", [*keys, "_bin", "_offset"]))
        .select(
            *[F.col(f"_wanted.{key}").alias(key) for key in keys],
            F.col("_wanted.percent").cast("int").alias("percent"),
            F.col(f"_value.{value}").alias(value),
            F.col("_wanted._total").alias("_total"),
            F.col("_wanted._min").alias("_min"),
        )
    )


def duplicate_deliveries(events: DataFrame) -> DataFrame:
    """``peer, pub, deliveries``: the (peer, pub) pairs delivered more than once."""
    return (
        events.where(F.col("event").isin("deliver", "flush"))
        .groupBy("peer", "pub")
        .agg(F.count(F.lit(1)).alias("deliveries"))
        .where(F.col("deliveries") > 1)
        .orderBy("peer", "pub")
    )


def still_stored(events: DataFrame) -> DataFrame:
    """``still_stored``: the (node, peer, pub) stored offline and never flushed (one with a
    missing part never matches a flush)."""
    key = [F.col("node"), F.col("peer"), F.col("pub")]
    stored = (
        events.where(F.col("event").isin("offline", "flush"))
        .groupBy(*key)
        .agg(
            F.count(F.when(F.col("event") == "offline", True)).alias("_offline"),
            F.count(F.when(F.col("event") == "flush", True)).alias("_flushed"),
        )
    )
    unmatched = (F.col("_flushed") == 0) | key[0].isNull() | key[1].isNull() | key[2].isNull()
    return stored.agg(
        F.count(F.when((F.col("_offline") > 0) & unmatched, True)).alias("still_stored")
    )


def delivery_summary(
    counted: DataFrame, cdf: DataFrame, stored: DataFrame, duplicates: DataFrame
) -> DataFrame:
    """``online, flushed, stored_offline, still_stored, without_publish, duplicate_pairs``: one
    row. ``stored_offline`` counts ``offline`` events, ``still_stored`` is ``still_stored``,
    ``without_publish`` the deliveries whose publication has no ``publish`` event in the logs
    (so no latency: the deliveries less those ``cdf``, the ``latency_cdf``, counted),
    ``duplicate_pairs`` the rows of ``duplicates`` (``duplicate_deliveries``)."""
    event = F.col("event")
    counts = counted.where("valid").agg(
        _total(F.when(event == "deliver", F.col("events"))).alias("online"),
        _total(F.when(event == "flush", F.col("events"))).alias("flushed"),
        _total(F.when(event == "offline", F.col("events"))).alias("stored_offline"),
    )
    timed = (
        cdf.groupBy("delivery")
        .agg(F.max("_total").alias("_timed"))
        .agg(_total(F.col("_timed")).alias("_timed"))
    )
    pairs = duplicates.agg(F.count(F.lit(1)).alias("duplicate_pairs"))
    return (
        counts.crossJoin(stored)
        .crossJoin(timed)
        .crossJoin(pairs)
        .select(
            "online",
            "flushed",
            "stored_offline",
            "still_stored",
            (F.col("online") + F.col("flushed") - F.col("_timed")).alias("without_publish"),
            "duplicate_pairs",
        )
    )


# -- pass 4: subscriptions ------------------------------------------------------------------------
def subscription_routes(events: DataFrame) -> DataFrame:
    """``level, holder, at, sub, forwarded, notifications``: every subscription id that was
    forwarded or answered, once per place it was sent to, in one aggregation.

    A super-peer's subscription (``level`` superpeer) is held by the super-peer that forwarded it
    (``holder``, whose id ``sub`` is) at the neighbour it was forwarded to (``at``); it is
    ``forwarded`` when an ``sp.forward`` send says so, and ``notifications`` counts the
    ``sp.notification`` messages ``at`` sent ``holder`` listing ``sub``. A peer's subscription
    (``level`` peer) is held by the peer at its super-peer, and counts the deliveries listing
    it (deliveries with a ``sub``)."""
    send = F.col("event") == "send"
    forward = send & (F.col("kind") == FORWARD)
    # One scan of the events: a forward names one id (kept whole, even empty), an answer a list.
    listed = events.where(
        F.col("sub").isNotNull()
        & (
            forward
            | (send & (F.col("kind") == NOTIFICATION))
            | F.col("event").isin("deliver", "flush")
        )
    ).select(
        F.when(send, F.lit(SUPERPEER_LEVEL)).otherwise(F.lit(PEER_LEVEL)).alias("level"),
        F.when(forward, F.col("node"))
        .when(send, F.col("neighbour"))
        .otherwise(F.col("peer"))
        .alias("holder"),
        F.when(forward, F.col("neighbour")).otherwise(F.col("node")).alias("at"),
        F.explode(F.when(forward, F.array("sub")).otherwise(F.split("sub", ","))).alias("sub"),
        forward.cast("int").alias("_forward"),
    )
    return (
        listed.where((F.col("_forward") == 1) | (F.col("sub") != ""))
        .groupBy("level", "holder", "at", "sub")
        .agg(
            (F.max("_forward") == 1).alias("forwarded"),
            F.count(F.when(F.col("_forward") == 0, True)).alias("notifications"),
        )
    )


def forwarding_efficiency(routes: DataFrame) -> DataFrame:
    """``superpeer, forwarded, routed, share`` per super-peer that subscriptions were forwarded
    to: how many distinct ones it received, and how many it routed a notification back for
    (``routes`` is ``subscription_routes``)."""
    return (
        routes.where((F.col("level") == SUPERPEER_LEVEL) & F.col("forwarded"))
        .groupBy(F.col("at").alias("superpeer"))
        .agg(
            F.count(F.lit(1)).alias("forwarded"),
            F.count(F.when(F.col("notifications") > 0, True)).alias("routed"),
        )
        .select("superpeer", "forwarded", "routed", _share("routed", "forwarded"))
        .orderBy("superpeer")
    )


def forwarding_total(per_superpeer: DataFrame) -> DataFrame:
    """``forwarded, routed, share`` over all super-peers (``per_superpeer`` is
    ``forwarding_efficiency``; each forwarded subscription has one receiving super-peer, so the
    sums count each once)."""
    return per_superpeer.agg(
        _total(F.col("forwarded")).alias("forwarded"),
        _total(F.col("routed")).alias("routed"),
    ).select("forwarded", "routed", _share("routed", "forwarded"))


def hot_subscriptions(routes: DataFrame) -> DataFrame:
    """``level, holder, sub, notifications``: every subscription answered at least once, by the
    notifications that answered it wherever it was sent, busiest first."""
    return (
        routes.where(F.col("notifications") > 0)
        .groupBy("level", "holder", "sub")
        .agg(F.sum("notifications").alias("notifications"))
        .orderBy(F.desc("notifications"), "level", "holder", "sub")
    )


# -- all of them ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Figures:
    """Every table of the report, as lazy DataFrames, the time-bucket size they use, and the
    intermediates ``analyze`` persisted for them, in the order it persisted them
    (``unpersist`` releases those)."""

    bucket_seconds: float
    quality: DataFrame
    invalid_examples: DataFrame
    overview: DataFrame
    kinds: DataFrame
    superpeers: DataFrame
    links: DataFrame
    load_curve: DataFrame
    load_gini: DataFrame
    hops: DataFrame
    latency_summary: DataFrame
    latency_cdf: DataFrame
    latency_over_time: DataFrame
    deliveries: DataFrame
    duplicates: DataFrame
    forwarding: DataFrame
    forwarding_total: DataFrame
    subscriptions: DataFrame
    tree_edges: DataFrame
    tree_shape: DataFrame
    traffic_per_second: DataFrame
    traffic_over_time: DataFrame
    incidents_over_time: DataFrame
    persisted: tuple[DataFrame, ...] = ()

    def tables(self) -> dict[str, DataFrame]:
        """The tables by name, in report order (the names of their Parquet and CSV files)."""
        return {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if field.name not in ("bucket_seconds", "persisted")
        }

    def unpersist(self) -> None:
        """Release the persisted intermediates, each before those it was computed from."""
        for frame in reversed(self.persisted):
            _release(frame)


def analyze(raw: DataFrame, *, keep_rows: bool = True) -> Figures:
    """All figures of ``raw`` (``read_traces``).

    Keeps ``raw`` (without ``msg``, which no figure reads) for the passes: with ``keep_rows`` as
    a local checkpoint, rows as they are; otherwise in Spark's cache, which first turns them into
    compressed columns. Columns take about a fifth of the memory (``session.rows_fit`` chooses),
    but building them costs as much again as parsing the JSON, and makes no later pass faster
    here (the passes read most columns). Then computes ``tallies``, collecting
    one row of it: the time span, to choose the bucket size, and the number of publications, to
    choose how deliveries meet them. Everything else stays lazy; the intermediates several
    tables read are persisted, so each is computed once: the tallies, the timeline, the
    deliveries with their latencies (read twice by the percentile computation), the latency
    ranks (the CDF and the percentiles per time bucket, ranked together), the duplicates, the
    subscription routes. The small ones (tallies, timeline, ranks) are
    kept in one partition: the tables read off them then need no shuffle, and each is one
    short job instead of a job per shuffle.
    ``Figures.unpersist`` releases them all."""
    kept = raw.drop("msg")
    cached = (
        kept.localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK)
        if keep_rows
        else kept.persist(StorageLevel.MEMORY_AND_DISK)
    )
    events = valid_events(cached)
    counted = tallies(cached).coalesce(1).persist()
    sizes = (
        counted.where("valid")
        .agg(
            (F.max("last_ts") - F.min("first_ts")).alias("span"),
            _total(F.when(F.col("event") == "publish", F.col("events"))).alias("publications"),
        )
        .first()
    )
    assert sizes is not None  # an aggregate without grouping has one row
    bucket = bucket_seconds(sizes["span"] if sizes["span"] is not None else 0.0)
    times = timeline(events, bucket).coalesce(1).persist()
    deliveries = delivery_latencies(
        events, broadcast=sizes["publications"] <= BROADCAST_PUBLICATIONS
    ).persist(StorageLevel.MEMORY_AND_DISK)
    ranks = latency_ranks(deliveries, bucket).coalesce(1).persist()
    cdf = latency_cdf(ranks)
    duplicates = duplicate_deliveries(events).persist()
    routes = subscription_routes(events).persist(StorageLevel.MEMORY_AND_DISK)
    superpeers = traffic_by_superpeer(counted)
    load = load_by_superpeer(superpeers)
    forwarding = forwarding_efficiency(routes)
    return Figures(
        bucket_seconds=bucket,
        quality=input_quality(counted),
        invalid_examples=invalid_examples(cached),
        overview=overview(counted),
        kinds=messages_by_kind(counted),
        superpeers=superpeers,
        links=traffic_by_link(counted),
        load_curve=load_curve(load),
        load_gini=load_gini(load),
        hops=hop_histogram(counted),
        latency_summary=latency_summary(cdf),
        latency_cdf=cdf.drop("_total", "_min"),
        latency_over_time=latency_over_time(ranks, bucket),
        deliveries=delivery_summary(counted, cdf, still_stored(events), duplicates),
        duplicates=duplicates,
        forwarding=forwarding,
        forwarding_total=forwarding_total(forwarding),
        subscriptions=hot_subscriptions(routes),
        tree_edges=tree_edges(counted),
        tree_shape=tree_shape(counted),
        traffic_per_second=traffic_per_second(times),
        traffic_over_time=traffic_over_time(times, bucket),
        incidents_over_time=incidents_over_time(times, bucket),
        persisted=(cached, counted, times, deliveries, ranks, duplicates, routes),
    )


# -- helpers --------------------------------------------------------------------------------------
def _release(frame: DataFrame) -> None:
    """Unpersist ``frame``, a cached DataFrame or a local checkpoint: the blocks of a checkpoint
    belong to the RDD under its plan, which ``DataFrame.unpersist`` does not reach."""
    plan = frame._jdf.queryExecution().logical()  # type: ignore[operator]
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)
    else:
        frame.unpersist()


def _wire_message() -> Column:
    """On ``tallies`` rows: the events that are wire messages (module docstring)."""
    event = F.col("event")
    return (event == "send") | F.col("peer_request") | event.isin("deliver", "flush")


def _total(values: Column) -> Column:
    """The sum of ``values``, 0 (not null) when there are none."""
    return F.coalesce(F.sum(values), F.lit(0))


_BINS_PER_DOUBLING: Final = 256
"""Bins per doubling of a value: fine enough that a bin holds a small share of its group's values
(the second pass sorts the values of up to 100 bins per group), coarse enough that the bins are
far fewer than the values (the first pass ranks every bin in one task). Latencies spread over
some 15 doublings here (3 ms hops to half-minute offline storage): under 4,000 bins per group
(at 4,096 per doubling, as before, nearly every delivery had a bin of its own: 340,000 bins for
300,000 deliveries, ranked in one task)."""
_BIN_OFFSET: Final = 1 << 23
"""Above 1075 * 256, the largest |floor(log2 |x|) * 256)| of a finite double other than 0."""


def _bin(value: Column) -> Column:
    """A long that never decreases as ``value`` grows: 0 for 0, and for x != 0
    sign(x) * (2^23 + floor(log2 |x| * 256)), so each bin spans a 256th of a doubling
    (log2 is semi-monotonic, as Java's logarithm is specified to be, and so are the rounded
    product and the floor)."""
    magnitude = F.floor(F.log2(F.abs(value)) * F.lit(float(_BINS_PER_DOUBLING))) + F.lit(
        _BIN_OFFSET
    )
    return F.when(value > 0, magnitude).when(value < 0, -magnitude).otherwise(F.lit(0).cast("long"))


def _same(left: str, right: str, columns: Sequence[str]) -> Column:
    """Rows of the frames aliased ``left`` and ``right`` agree on ``columns``, null equal to null."""
    agree = [F.col(f"{left}.{c}").eqNullSafe(F.col(f"{right}.{c}")) for c in columns]
    return reduce(operator.and_, agree)


def _bucket(ts: Column, size: float) -> Column:
    return F.floor(ts / F.lit(size)) * F.lit(size)


def _pivot() -> list[Column]:
    """``p50, p90, p99`` as aggregates over rows of ``nearest_rank``."""
    return [
        F.max(F.when(F.col("percent") == p, F.col("latency"))).alias(f"p{p}")
        for p in SUMMARY_PERCENTS
    ]


def _share(part: str, whole: str) -> Column:
    return F.when(F.col(whole) > 0, F.col(part) / F.col(whole)).alias("share")
