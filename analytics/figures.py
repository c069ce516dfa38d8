"""The figures of the traffic report: one DataFrame transform each, events in, aggregate out.

Every transform takes DataFrames and returns a DataFrame, lazily: nothing here collects data to
the driver except ``analyze``, which reads the time span (two numbers) to size the time buckets.
Outputs are sorted in report order, so their rows can be collected and shown as they are.

``events`` below is ``valid_events(raw)``, the valid rows of ``analytics.load.read_traces``;
``deliveries`` is ``delivery_latencies(events)``.

Definitions (the report repeats them):

wire message
    a message on a wire, counted once: a ``send`` (super-peer to neighbour super-peer), a
    ``receive`` with a ``peer`` (a request from a local peer), a ``deliver`` or a ``flush`` (a
    notification handed to a local peer). Acknowledgements and refusals to peers are not traced.
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
traffic
    ``send`` events (super-peer to super-peer messages) and their bytes, per second of ``ts``
    (``floor(ts)``) and per time bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from analytics.definitions import (
    CDF_PERCENTS,
    FLUSHED,
    ONLINE,
    SUMMARY_PERCENTS,
    bucket_seconds,
)
from analytics.schema import INVALID_COLUMN


# -- input ----------------------------------------------------------------------------------------
def valid_events(raw: DataFrame) -> DataFrame:
    """The valid rows of ``read_traces``, without the invalid-line column."""
    return raw.where(F.col(INVALID_COLUMN).isNull()).drop(INVALID_COLUMN)


def input_quality(raw: DataFrame) -> DataFrame:
    """``lines, valid, invalid``: the non-blank lines read, and how many were (in)valid."""
    invalid = F.col(INVALID_COLUMN).isNotNull()
    return raw.agg(
        F.count(F.lit(1)).alias("lines"),
        F.count(F.when(~invalid, True)).alias("valid"),
        F.count(F.when(invalid, True)).alias("invalid"),
    )


def invalid_examples(raw: DataFrame, limit: int = 5) -> DataFrame:
    """``line``: up to ``limit`` invalid lines, the first in text order (an order that does not
    depend on file names or partitioning, so a run on the Parquet copy shows the same ones)."""
    return (
        raw.where(F.col(INVALID_COLUMN).isNotNull())
        .select(F.col(INVALID_COLUMN).alias("line"))
        .orderBy("line")
        .limit(limit)
    )


def overview(events: DataFrame) -> DataFrame:
    """``events, superpeers, first_ts, last_ts, messages, bytes``: one row about the whole run
    (messages and bytes are wire messages)."""
    wire = _wire_message()
    return events.agg(
        F.count(F.lit(1)).alias("events"),
        F.countDistinct("node").alias("superpeers"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.count(F.when(wire, True)).alias("messages"),
        F.coalesce(F.sum(F.when(wire, F.col("bytes"))), F.lit(0)).alias("bytes"),
    )


# -- messages and load ----------------------------------------------------------------------------
def messages_by_kind(events: DataFrame) -> DataFrame:
    """``kind, messages, bytes``: wire messages per message kind."""
    return (
        events.where(_wire_message())
        .groupBy("kind")
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("kind")
    )


def traffic_by_superpeer(events: DataFrame) -> DataFrame:
    """``node, sent, sent_bytes, received, received_bytes`` per super-peer in the logs: sent are
    its ``send``, ``deliver`` and ``flush`` events (to neighbours and to its peers), received its
    ``receive`` events (so ``received`` is its load)."""
    sending = F.col("event").isin("send", "deliver", "flush")
    receiving = F.col("event") == "receive"
    return (
        events.groupBy("node")
        .agg(
            F.count(F.when(sending, True)).alias("sent"),
            F.coalesce(F.sum(F.when(sending, F.col("bytes"))), F.lit(0)).alias("sent_bytes"),
            F.count(F.when(receiving, True)).alias("received"),
            F.coalesce(F.sum(F.when(receiving, F.col("bytes"))), F.lit(0)).alias("received_bytes"),
        )
        .orderBy("node")
    )


def traffic_by_link(events: DataFrame) -> DataFrame:
    """``node, neighbour, messages, bytes``: super-peer to super-peer ``send`` events per
    directed link."""
    return (
        events.where((F.col("event") == "send") & F.col("neighbour").isNotNull())
        .groupBy("node", "neighbour")
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("bytes").alias("bytes"))
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
        .crossJoin(totals)
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


# -- notifications --------------------------------------------------------------------------------
def delivery_latencies(events: DataFrame) -> DataFrame:
    """``delivery, node, peer, pub, origin, hops, delivered, published, latency``: every delivery,
    with its publication's time and its latency when the ``publish`` event is in the logs (null
    otherwise). The one join of deliveries to publications, shared by the hop, latency, duplicate
    and delivery tables (``analyze`` persists it)."""
    return (
        events.where(F.col("event").isin("deliver", "flush"))
        .join(_publications(events), ["pub", "origin"], "left")
        .select(
            F.when(F.col("event") == "deliver", F.lit(ONLINE))
            .otherwise(F.lit(FLUSHED))
            .alias("delivery"),
            "node",
            "peer",
            "pub",
            "origin",
            "hops",
            F.col("ts").alias("delivered"),
            "published",
            (F.col("ts") - F.col("published")).alias("latency"),
        )
    )


def hop_histogram(deliveries: DataFrame) -> DataFrame:
    """``hops, deliveries``: deliveries (online and flushed) per super-peer hop count
    (``deliveries`` is ``delivery_latencies``)."""
    return deliveries.groupBy("hops").agg(F.count(F.lit(1)).alias("deliveries")).orderBy("hops")


def latency_cdf(deliveries: DataFrame) -> DataFrame:
    """``delivery, percent, latency``: the nearest-rank percentiles 1..100 of online and of
    flushed latencies, the points of the latency CDF."""
    return nearest_rank(
        deliveries.where(F.col("latency").isNotNull()), ["delivery"], "latency", CDF_PERCENTS
    ).orderBy("delivery", "percent")


def latency_summary(deliveries: DataFrame, cdf: DataFrame) -> DataFrame:
    """``delivery, deliveries, min, p50, p90, p99, max`` for online and for flushed deliveries
    with a latency; the percentiles are read off ``cdf`` (``latency_cdf``), not ranked again."""
    counts = (
        deliveries.where(F.col("latency").isNotNull())
        .groupBy("delivery")
        .agg(
            F.count(F.lit(1)).alias("deliveries"),
            F.min("latency").alias("min"),
            F.max("latency").alias("max"),
        )
    )
    return (
        counts.join(_pivot(cdf, ["delivery"]), "delivery")
        .select("delivery", "deliveries", "min", *_percent_columns(), "max")
        .orderBy("delivery")
    )


def latency_over_time(deliveries: DataFrame, bucket: float) -> DataFrame:
    """``bucket_start, bucket_seconds, deliveries, p50, p90, p99`` of online deliveries, by the
    time bucket of their publication."""
    online = deliveries.where(
        (F.col("delivery") == ONLINE) & F.col("latency").isNotNull()
    ).withColumn("bucket_start", _bucket(F.col("published"), bucket))
    counts = online.groupBy("bucket_start").agg(F.count(F.lit(1)).alias("deliveries"))
    percentiles = _pivot(
        nearest_rank(online, ["bucket_start"], "latency", SUMMARY_PERCENTS), ["bucket_start"]
    )
    return (
        counts.join(percentiles, "bucket_start")
        .select(
            "bucket_start",
            F.lit(bucket).alias("bucket_seconds"),
            "deliveries",
            *_percent_columns(),
        )
        .orderBy("bucket_start")
    )


def nearest_rank(
    values: DataFrame, keys: Sequence[str], value: str, percents: Sequence[int]
) -> DataFrame:
    """``*keys, percent, <value>``: the nearest-rank ``percents`` (integers 1..100) of ``value``
    within each group of ``keys``, exactly.

    Equal values are counted first; then each distinct value, holding the 1-based ranks
    (before, upto] of its group's sorted values, is the P-th percentile for exactly the P whose
    rank ceil(P * total / 100) falls there: P from floor(100 * before / total) + 1 to
    floor(100 * upto / total). All in integers (no floating-point rank to round the wrong way),
    and no join: the rows explode into at most 100 per group."""
    counted = values.groupBy(*keys, value).agg(F.count(F.lit(1)).alias("_count"))
    ordered = (
        Window.partitionBy(*keys)
        .orderBy(value)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    ranked = counted.select(
        *keys,
        value,
        F.col("_count"),
        F.sum("_count").over(ordered).alias("_upto"),
        F.sum("_count").over(Window.partitionBy(*keys)).alias("_total"),
    )
    first = F.expr("(100 * (_upto - _count)) div _total + 1")
    last = F.expr("(100 * _upto) div _total")
    return (
        ranked.where(first <= last)
        .select(*keys, value, F.explode(F.sequence(first, last)).alias("percent"))
        .where(F.col("percent").isin(*percents))
        .select(*keys, F.col("percent").cast("int").alias("percent"), value)
    )


# -- deliveries -----------------------------------------------------------------------------------
def duplicate_deliveries(deliveries: DataFrame) -> DataFrame:
    """``peer, pub, deliveries``: the (peer, pub) pairs delivered more than once."""
    return (
        deliveries.groupBy("peer", "pub")
        .agg(F.count(F.lit(1)).alias("deliveries"))
        .where(F.col("deliveries") > 1)
        .orderBy("peer", "pub")
    )


def delivery_summary(events: DataFrame, deliveries: DataFrame, duplicates: DataFrame) -> DataFrame:
    """``online, flushed, stored_offline, still_stored, without_publish, duplicate_pairs``: one
    row. ``stored_offline`` counts ``offline`` events, ``still_stored`` the (node, peer, pub)
    stored offline and never flushed, ``without_publish`` the deliveries whose publication has
    no ``publish`` event in the logs (so no latency), ``duplicate_pairs`` the rows of
    ``duplicates`` (``duplicate_deliveries``)."""
    counts = deliveries.agg(
        F.count(F.when(F.col("delivery") == ONLINE, True)).alias("online"),
        F.count(F.when(F.col("delivery") == FLUSHED, True)).alias("flushed"),
        F.count(F.when(F.col("latency").isNull(), True)).alias("without_publish"),
    )
    key = ["node", "peer", "pub"]
    offline = events.where(F.col("event") == "offline")
    stored = offline.agg(F.count(F.lit(1)).alias("stored_offline"))
    still = (
        offline.select(*key)
        .distinct()
        .join(events.where(F.col("event") == "flush").select(*key).distinct(), key, "left_anti")
        .agg(F.count(F.lit(1)).alias("still_stored"))
    )
    pairs = duplicates.agg(F.count(F.lit(1)).alias("duplicate_pairs"))
    return (
        counts.crossJoin(stored)
        .crossJoin(still)
        .crossJoin(pairs)
        .select(
            "online",
            "flushed",
            "stored_offline",
            "still_stored",
            "without_publish",
            "duplicate_pairs",
        )
    )


# -- subscriptions --------------------------------------------------------------------------------
def forwarding_efficiency(events: DataFrame) -> DataFrame:
    """``superpeer, forwarded, routed, share`` per super-peer that subscriptions were forwarded
    to: how many distinct ones it received, and how many it routed a notification back for."""
    sends = events.where(F.col("event") == "send")
    forwarded = (
        sends.where((F.col("kind") == "sp.forward") & F.col("sub").isNotNull())
        .select(F.col("node").alias("sender"), F.col("neighbour").alias("superpeer"), "sub")
        .distinct()
    )
    answered = (
        sends.where((F.col("kind") == "sp.notification") & F.col("sub").isNotNull())
        .select(
            F.col("neighbour").alias("sender"),
            F.col("node").alias("superpeer"),
            F.explode(F.split("sub", ",")).alias("sub"),
        )
        .where(F.col("sub") != "")
        .distinct()
        .withColumn("_routed", F.lit(True))
    )
    return (
        forwarded.join(answered, ["sender", "superpeer", "sub"], "left")
        .groupBy("superpeer")
        .agg(F.count(F.lit(1)).alias("forwarded"), F.count("_routed").alias("routed"))
        .select("superpeer", "forwarded", "routed", _share("routed", "forwarded"))
        .orderBy("superpeer")
    )


def forwarding_total(per_superpeer: DataFrame) -> DataFrame:
    """``forwarded, routed, share`` over all super-peers (``per_superpeer`` is
    ``forwarding_efficiency``; each forwarded subscription has one receiving super-peer, so the
    sums count each once)."""
    return per_superpeer.agg(
        F.coalesce(F.sum("forwarded"), F.lit(0)).alias("forwarded"),
        F.coalesce(F.sum("routed"), F.lit(0)).alias("routed"),
    ).select("forwarded", "routed", _share("routed", "forwarded"))


# -- traffic over time ----------------------------------------------------------------------------
def traffic_per_second(events: DataFrame) -> DataFrame:
    """``second, messages, bytes``: ``send`` events per second of ``ts`` (``floor(ts)``)."""
    return (
        events.where(F.col("event") == "send")
        .groupBy(F.floor("ts").alias("second"))
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("bytes").alias("bytes"))
        .orderBy("second")
    )


def traffic_over_time(events: DataFrame, bucket: float) -> DataFrame:
    """``bucket_start, bucket_seconds, messages, bytes, messages_per_second, bytes_per_second``:
    ``send`` events per time bucket, and their mean rates over the bucket."""
    return (
        events.where(F.col("event") == "send")
        .groupBy(_bucket(F.col("ts"), bucket).alias("bucket_start"))
        .agg(F.count(F.lit(1)).alias("messages"), F.sum("bytes").alias("bytes"))
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
    traffic_per_second: DataFrame
    traffic_over_time: DataFrame
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
            frame.unpersist()


def analyze(raw: DataFrame) -> Figures:
    """All figures of ``raw`` (``read_traces``).

    Persists ``raw`` (without ``msg``, which no figure reads), since every table reads it, and
    collects one row, the overview with the time span, to choose the bucket size; everything
    else stays lazy. The intermediates that several tables read are persisted, so that each is
    computed once: the overview, the deliveries with their latencies (one join), and the small
    aggregates other tables derive from (traffic and so load per super-peer, forwarding per
    super-peer, the latency CDF, the duplicate pairs). ``Figures.unpersist`` releases them all."""
    cached = raw.drop("msg").persist(StorageLevel.MEMORY_AND_DISK)
    events = valid_events(cached)
    summary = overview(events).persist()
    span = summary.select((F.col("last_ts") - F.col("first_ts")).alias("span")).first()
    bucket = bucket_seconds(span["span"] if span and span["span"] is not None else 0.0)
    deliveries = delivery_latencies(events).persist()
    superpeers = traffic_by_superpeer(events).persist()
    load = load_by_superpeer(superpeers)
    forwarding = forwarding_efficiency(events).persist()
    cdf = latency_cdf(deliveries).persist()
    duplicates = duplicate_deliveries(deliveries).persist()
    return Figures(
        bucket_seconds=bucket,
        quality=input_quality(cached),
        invalid_examples=invalid_examples(cached),
        overview=summary,
        kinds=messages_by_kind(events),
        superpeers=superpeers,
        links=traffic_by_link(events),
        load_curve=load_curve(load),
        load_gini=load_gini(load),
        hops=hop_histogram(deliveries),
        latency_summary=latency_summary(deliveries, cdf),
        latency_cdf=cdf,
        latency_over_time=latency_over_time(deliveries, bucket),
        deliveries=delivery_summary(events, deliveries, duplicates),
        duplicates=duplicates,
        forwarding=forwarding,
        forwarding_total=forwarding_total(forwarding),
        traffic_per_second=traffic_per_second(events),
        traffic_over_time=traffic_over_time(events, bucket),
        persisted=(cached, summary, deliveries, superpeers, forwarding, cdf, duplicates),
    )


# -- helpers --------------------------------------------------------------------------------------
def _wire_message() -> Column:
    event = F.col("event")
    return (
        (event == "send")
        | ((event == "receive") & F.col("peer").isNotNull())
        | event.isin("deliver", "flush")
    )


def _publications(events: DataFrame) -> DataFrame:
    return (
        events.where(F.col("event") == "publish")
        .groupBy("pub", F.col("node").alias("origin"))
        .agg(F.min("ts").alias("published"))
    )


def _bucket(ts: Column, size: float) -> Column:
    return F.floor(ts / F.lit(size)) * F.lit(size)


def _pivot(percentiles: DataFrame, keys: Sequence[str]) -> DataFrame:
    return percentiles.groupBy(*keys).agg(
        *[
            F.max(F.when(F.col("percent") == p, F.col("latency"))).alias(f"p{p}")
            for p in SUMMARY_PERCENTS
        ]
    )


def _percent_columns() -> list[str]:
    return [f"p{p}" for p in SUMMARY_PERCENTS]


def _share(part: str, whole: str) -> Column:
    return F.when(F.col(whole) > 0, F.col(part) / F.col(whole)).alias("share")
