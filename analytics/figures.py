"""The figures of the traffic report: the Spark side, events in, small aggregates out.

Every transform takes DataFrames and returns a DataFrame, lazily; ``analyze`` runs them. A Spark
job costs the driver a plan, generated code and scheduling whatever its size (33 jobs, one or more
per table, cost about 21 CPU s before), and reading the events is what costs the tasks (JSON
parsing first, then every scan). So ``analyze`` makes two passes, each one Spark action whose
small result reaches the driver once, and ``analytics.tables`` finishes the tables there:

1. ``tallies``: one aggregation over every line, keyed by the few columns the counting figures
   need (a few thousand rows whatever the input size): input quality, the overview, messages per
   kind, per super-peer and per link, load, hop counts, the forwarding trees, the delivery counts,
   and the time span, which sets the time buckets of pass 2;
2. one query (``collect_parts``), the union of: the ``timeline`` (super-peer messages per second
   and per time bucket, incidents per bucket); the deliveries joined to their publications' times
   (the publications, small beside the deliveries, broadcast when few enough) and their
   nearest-rank percentiles (``latency_ranks``); the duplicate deliveries and the notifications
   still stored; the ``subscription_routes`` (forwarded subscriptions and the notifications that
   answered them: forwarding efficiency and the hot subscriptions); the first invalid lines.

Its broadcasts are Spark jobs of their own, so an analysis is four jobs. The tables that grow
with the input (``tables.GROWING``) stay in Spark, persisted, and only their first rows (for the
traffic, its busiest second) reach the driver; no global sort runs (each would sample its input in
a job of its own): the driver sorts what it gets, and a growing table is sorted in one partition
where it is written or collected whole (``Figures.whole``).

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
from dataclasses import dataclass
from functools import reduce
from typing import Final, Literal

from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F
from pyspark.storagelevel import StorageLevel

from analytics import tables
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
    )


def traffic_per_bucket(times: DataFrame) -> DataFrame:
    """``bucket_start, messages, bytes``: ``send`` events per time bucket (``times`` is
    ``timeline``)."""
    return (
        times.where(F.col("event") == "send")
        .groupBy("bucket_start")
        .agg(F.sum("events").alias("messages"), F.sum("bytes").alias("bytes"))
    )


def incidents_per_bucket(times: DataFrame) -> DataFrame:
    """``bucket_start, event, events``: incidents per time bucket and event (``times`` is
    ``timeline``); no rows when the logs hold none."""
    return (
        times.where(F.col("event") != "send")
        .groupBy("bucket_start", "event")
        .agg(F.sum("events").alias("events"))
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
        # Joined by shuffling both small sides: a broadcast would be one more Spark job.
        wanted.hint("shuffle_hash")
        .alias("_wanted")
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
    )


def hot_subscriptions(routes: DataFrame) -> DataFrame:
    """``level, holder, sub, notifications``: every subscription answered at least once, by the
    notifications that answered it wherever it was sent, busiest first."""
    return (
        routes.where(F.col("notifications") > 0)
        .groupBy("level", "holder", "sub")
        .agg(F.sum("notifications").alias("notifications"))
    )


# -- all of them ----------------------------------------------------------------------------------
ORDER: Final[dict[str, tuple[str, ...]]] = {
    "duplicates": ("peer", "pub"),
    "subscriptions": ("-notifications", "level", "holder", "sub"),
    "traffic_per_second": ("second",),
}
"""The report order of the tables that stay in Spark (``tables.GROWING``), ascending (nulls
first) but for a leading ``-``: the unsorted DataFrames are sorted only where they are written or
collected whole."""
PEAK: Final = ("-messages", "second")
"""The busiest second first (the earliest of equals): what the report shows of the traffic per
second."""

Keep = Literal["rows", "columns", "none"]


@dataclass(frozen=True, slots=True)
class Figures:
    """Every table of the report: those on the driver as rows (``tables``), the growing ones
    (``analytics.tables.GROWING``) whole in Spark (``growing``, persisted, unsorted; ``whole``
    sorts one) with their first rows on the driver (``shown``: their first ``first_rows`` rows,
    and for ``traffic_per_second`` its busiest second); the time-bucket size; the intermediates
    ``analyze`` persisted, in the order it persisted them (``unpersist`` releases them)."""

    bucket_seconds: float
    tables: dict[str, list[Row]]
    shown: dict[str, list[Row]]
    growing: dict[str, DataFrame]
    persisted: tuple[DataFrame, ...] = ()

    def whole(self, name: str) -> DataFrame:
        """The growing table ``name``, whole, in report order, in one partition (to be written
        as one file or collected)."""
        return self.growing[name].coalesce(1).sortWithinPartitions(*_order(ORDER[name]))

    def collect(self, name: str) -> list[Row]:
        """Every row of table ``name``, in report order (a Spark job for a growing one)."""
        return self.tables[name] if name in self.tables else self.whole(name).collect()

    def unpersist(self) -> None:
        """Release the persisted intermediates, each before those it was computed from."""
        _release_all(self.persisted)


class NoTraceLines(ValueError):
    """The traces hold no line at all (blank ones aside): nothing to analyse."""


def analyze(raw: DataFrame, *, keep: Keep = "rows", first_rows: int = 30) -> Figures:
    """All figures of ``raw`` (``read_traces``), in two passes over the events, each one Spark
    action whose small result reaches the driver once; ``analytics.tables`` finishes the tables
    there.

    Pass 1 collects the ``tallies``: the tables they give (``tables.from_tallies``), the time
    span, which sets the time buckets, and the number of publications, which chooses how
    deliveries meet them. Pass 2 is one query, the union of every other aggregate the tables
    need (``collect_parts``): the traffic per time bucket and its busiest second, incidents per
    bucket, the latency percentiles (``latency_ranks``), the duplicates, the notifications still
    stored, forwarding per super-peer, the hot subscriptions, the first invalid lines. Its
    intermediates read more than once are persisted, and so computed once within it: the
    timeline, the deliveries with their latencies (read twice by the percentiles), the
    subscription routes, and the growing tables (the report writes them afterwards).

    ``keep`` keeps ``raw`` (without ``msg``, which no figure reads) for the two passes: ``rows``
    as a local checkpoint, rows as they are; ``columns`` in Spark's cache, compressed columns
    (about a fifth of the memory; ``session.rows_fit`` chooses, building them costs as much
    again as parsing the JSON); ``none`` reads ``raw`` again in each pass, as suits the Parquet
    copy (each scan reads only the columns it needs). ``first_rows`` is how many rows of the
    growing tables reach the driver. Raises ``NoTraceLines`` when ``raw`` has no row."""
    kept = raw.drop("msg")
    if keep == "rows":
        kept = kept.localCheckpoint(eager=False, storageLevel=StorageLevel.MEMORY_AND_DISK)
    elif keep == "columns":
        kept = kept.persist(StorageLevel.MEMORY_AND_DISK)
    persisted = [kept] if keep != "none" else []
    try:
        small, counts = tables.from_tallies(tallies(kept).collect())
        if small["quality"][0][0] > 0:
            bucket = bucket_seconds(counts.span)
            growing, parts = _second_pass(kept, bucket, counts, first_rows, persisted)
    except BaseException:
        _release_all(persisted)
        raise
    if small["quality"][0][0] == 0:
        _release_all(persisted)
        raise NoTraceLines("the trace files hold no lines")
    latency, timed = tables.latency_tables(parts["ranks"], bucket)
    forwarding = sorted((tuple(r) for r in parts["forwarding"]), key=tables.nulls_first)
    small |= latency
    small |= {
        "invalid_examples": [tuple(r) for r in parts["invalid_examples"]],
        "deliveries": [
            tables.deliveries(
                counts,
                timed=timed,
                still_stored=parts["still_stored"][0]["still_stored"],
                duplicate_pairs=parts["duplicate_pairs"][0]["pairs"],
            )
        ],
        "forwarding": forwarding,
        "forwarding_total": tables.forwarding_total(forwarding),
        "traffic_over_time": tables.traffic_over_time(
            {r["bucket_start"]: (r["messages"], r["bytes"]) for r in parts["traffic"]}, bucket
        ),
        "incidents_over_time": tables.incidents_over_time(
            {(r["bucket_start"], r["event"]): r["events"] for r in parts["incidents"]}, bucket
        ),
    }
    return Figures(
        bucket_seconds=bucket,
        tables={
            name: [_row(name, values) for values in small[name]]
            for name in tables.TABLES
            if name not in tables.GROWING
        },
        shown={
            "duplicates": parts["duplicates"],
            "subscriptions": parts["subscriptions"],
            "traffic_per_second": parts["peak"],
        },
        growing=growing,
        persisted=tuple(persisted),
    )


def _second_pass(
    kept: DataFrame,
    bucket: float,
    counts: tables.Counts,
    first_rows: int,
    persisted: list[DataFrame],
) -> tuple[dict[str, DataFrame], dict[str, list[Row]]]:
    """Pass 2 of ``analyze``: the growing tables (persisted) and the collected parts; what it
    persists is appended to ``persisted`` as it goes."""
    events = valid_events(kept)
    times = timeline(events, bucket).persist()
    per_second = traffic_per_second(times).persist()
    deliveries = delivery_latencies(
        events, broadcast=counts.publications <= BROADCAST_PUBLICATIONS
    ).persist(StorageLevel.MEMORY_AND_DISK)
    duplicates = duplicate_deliveries(events).persist()
    routes = subscription_routes(events).persist(StorageLevel.MEMORY_AND_DISK)
    hot = hot_subscriptions(routes).persist()
    persisted += [times, per_second, deliveries, duplicates, routes, hot]
    parts = collect_parts(
        {
            "traffic": traffic_per_bucket(times),
            "incidents": incidents_per_bucket(times),
            "peak": per_second.orderBy(*_order(PEAK)).limit(1),
            "ranks": latency_ranks(deliveries, bucket),
            "duplicate_pairs": duplicates.agg(F.count(F.lit(1)).alias("pairs")),
            "duplicates": duplicates.orderBy(*_order(ORDER["duplicates"])).limit(first_rows),
            "still_stored": still_stored(events),
            "forwarding": forwarding_efficiency(routes),
            "subscriptions": hot.orderBy(*_order(ORDER["subscriptions"])).limit(first_rows),
            "invalid_examples": invalid_examples(kept),
        }
    )
    growing = {"duplicates": duplicates, "subscriptions": hot, "traffic_per_second": per_second}
    return growing, parts


def collect_parts(parts: dict[str, DataFrame]) -> dict[str, list[Row]]:
    """The rows of every frame in ``parts``, by name, from one Spark action: the frames become
    one union, each row carrying its frame's name and its columns in a struct named for it (the
    other structs null), so frames of any schema travel together. Each frame should be small:
    all of it reaches the driver."""
    frames = [
        frame.select(F.lit(name).alias("_part"), F.struct(*frame.columns).alias(name))
        for name, frame in parts.items()
    ]
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    rows: dict[str, list[Row]] = {name: [] for name in parts}
    for row in union.collect():
        rows[row["_part"]].append(row[row["_part"]])
    return rows


def _order(columns: Sequence[str]) -> list[Column]:
    return [F.desc(c[1:]) if c.startswith("-") else F.asc(c) for c in columns]


def _row(name: str, values: Sequence[object]) -> Row:
    return Row(**dict(zip(tables.columns(name), values, strict=True)))


# -- helpers --------------------------------------------------------------------------------------
def _release_all(frames: Sequence[DataFrame]) -> None:
    for frame in reversed(frames):
        _release(frame)


def _release(frame: DataFrame) -> None:
    """Unpersist ``frame``, a cached DataFrame or a local checkpoint: the blocks of a checkpoint
    belong to the RDD under its plan, which ``DataFrame.unpersist`` does not reach."""
    plan = frame._jdf.queryExecution().logical()  # type: ignore[operator]
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)
    else:
        frame.unpersist()


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


def _share(part: str, whole: str) -> Column:
    return F.when(F.col(whole) > 0, F.col(part) / F.col(whole)).alias("share")
