"""The report's tables in plain Python: their columns, and every table finished on the driver.

Spark reduces the events to small aggregates (``analytics.figures``: the tallies, the traffic per
time bucket, the latency percentiles ...), which reach the driver once; the tables are read off
them here, in plain Python, instead of by one Spark job each (a job costs the driver a plan, code
generation and scheduling, whatever its size). The pure-Python reference (``analytics.reference``)
finishes its tables with the same functions, so each rule is written once. No PySpark here.

Tables are lists of tuples in the columns of ``TABLES`` and in report order; sorting follows
Spark's (ascending, nulls first), so a table read back from Spark compares equal with ``==``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from analytics.definitions import SUMMARY_PERCENTS

Table = list[tuple[Any, ...]]

TABLES: Final[dict[str, str]] = {
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
"""Every table of the report, by name in report order: its columns as Spark DDL (the schema its
Parquet and CSV files are written with)."""

GROWING: Final = ("duplicates", "subscriptions", "traffic_per_second")
"""Tables whose size grows with the input (a pair, a subscription, a second each): they stay in
Spark (written from there, collected whole only by those who ask); the driver gets their first
rows, or their peak."""


def columns(name: str) -> list[str]:
    """The column names of table ``name``."""
    return [part.strip().split(" ")[0] for part in TABLES[name].split(",")]


def nulls_first(row: Sequence[Any]) -> tuple[tuple[bool, Any], ...]:
    """A sort key that orders as Spark's ascending sort: null before any value."""
    return tuple((value is not None, value) for value in row)


# -- from the tallies -----------------------------------------------------------------------------
class Tally(NamedTuple):
    """One row of ``analytics.figures.tallies``: lines counted by the keys the figures tell
    apart (null where a figure does not need the key; every key null on the invalid row)."""

    valid: bool
    node: str | None
    event: str | None
    kind: str | None
    neighbour: str | None
    peer_request: bool
    origin: str | None
    hops: int | None
    events: int
    bytes: int | None
    first_ts: float | None
    last_ts: float | None


class Counts(NamedTuple):
    """What the later passes need from the tallies."""

    span: float
    publications: int
    online: int
    flushed: int
    stored_offline: int


def from_tallies(rows: Iterable[Sequence[Any]]) -> tuple[dict[str, Table], Counts]:
    """The tables read off the tallies (quality, overview, kinds, super-peers, links, load curve
    and Gini coefficient, hop counts, forwarding trees), and the counts the later passes need."""
    tallies = [Tally(*row) for row in rows]
    valid = [t for t in tallies if t.valid]
    lines = sum(t.events for t in tallies)
    valid_lines = sum(t.events for t in valid)
    kinds: dict[str, list[int]] = {}
    per_node: dict[str, list[int]] = {}
    links: dict[tuple[str, str], list[int]] = {}
    hops: Counter[int | None] = Counter()
    edges: dict[tuple[str | None, int | None, str, str | None], list[int]] = {}
    publications: Counter[str] = Counter()
    by_event: Counter[str] = Counter()
    messages = total_bytes = 0
    for t in valid:
        assert t.node is not None and t.event is not None and t.kind is not None
        size = t.bytes or 0
        by_event[t.event] += t.events
        node = per_node.setdefault(t.node, [0, 0, 0, 0])
        if t.event in ("send", "deliver", "flush") or t.peer_request:
            _add(kinds, t.kind, t.events, size)
            messages += t.events
            total_bytes += size
        if t.event in ("send", "deliver", "flush"):
            node[0] += t.events
            node[1] += size
        elif t.event == "receive":
            node[2] += t.events
            node[3] += size
        if t.event == "send" and t.neighbour is not None:
            _add(links, (t.node, t.neighbour), t.events, size)
        if t.event == "send" and t.kind == "sp.notification":
            _add(edges, (t.origin, t.hops, t.node, t.neighbour), t.events, size)
        if t.event in ("deliver", "flush"):
            hops[t.hops] += t.events
        if t.event == "publish":
            publications[t.node] += t.events
    first = min((t.first_ts for t in valid if t.first_ts is not None), default=None)
    last = max((t.last_ts for t in valid if t.last_ts is not None), default=None)
    tables: dict[str, Table] = {
        "quality": [(lines, valid_lines, lines - valid_lines)],
        "overview": [(valid_lines, len(per_node), first, last, messages, total_bytes)],
        "kinds": [(kind, c, b) for kind, (c, b) in sorted(kinds.items())],
        "superpeers": [(n, *totals) for n, totals in sorted(per_node.items())],
        "links": [(n, m, c, b) for (n, m), (c, b) in sorted(links.items())],
        "hops": sorted(hops.items(), key=nulls_first),
    }
    tables["load_curve"], tables["load_gini"] = load_tables(
        {n: totals[2] for n, totals in per_node.items()}
    )
    tables["tree_edges"] = sorted(((*key, c, b) for key, (c, b) in edges.items()), key=nulls_first)
    tables["tree_shape"] = tree_shape(tables["tree_edges"], publications)
    counts = Counts(
        span=0.0 if first is None or last is None else last - first,
        publications=by_event["publish"],
        online=by_event["deliver"],
        flushed=by_event["flush"],
        stored_offline=by_event["offline"],
    )
    return tables, counts


def _add(table: dict[Any, list[int]], key: Any, count: int, size: int) -> None:
    totals = table.setdefault(key, [0, 0])
    totals[0] += count
    totals[1] += size


def load_tables(load: Mapping[str, int]) -> tuple[Table, Table]:
    """``load_curve`` and ``load_gini`` of the loads per super-peer (``analytics.figures``
    defines both)."""
    n, total = len(load), sum(load.values())
    curve: Table = []
    upto = 0
    for rank, (node, value) in enumerate(sorted(load.items(), key=lambda i: (-i[1], i[0])), 1):
        upto += value
        curve.append((rank, node, value, rank / n, upto / total if total > 0 else None))
    ascending = sorted(load.items(), key=lambda i: (i[1], i[0]))
    weighted = sum(i * value for i, (_node, value) in enumerate(ascending, 1))
    gini = 2 * weighted / (n * total) - (n + 1) / n if total > 0 else None
    return curve, [(n, total, gini)]


def tree_shape(edges: Table, publications: Mapping[str, int]) -> Table:
    """``tree_shape`` from the ``tree_edges`` rows and the publications per origin."""
    trees: dict[str | None, tuple[set[tuple[str, str]], set[str], list[int]]] = {}
    for origin, hops, node, neighbour, messages, _size in edges:
        links, reached, totals = trees.setdefault(origin, (set(), set(), [0, -1]))
        if neighbour is not None:
            links.add((node, neighbour))
            reached.add(neighbour)
        totals[0] += messages
        if hops is not None:
            totals[1] = max(totals[1], hops)
    rows: Table = []
    for origin in sorted(set(trees) | set(publications), key=lambda o: (o is not None, o)):
        links, reached, (messages, depth) = trees.get(origin, (set(), set(), [0, -1]))
        count = publications.get(origin, 0) if origin is not None else 0
        rows.append(
            (origin, count, len(links), len(reached), depth if depth >= 0 else None, messages,
             messages / count if count > 0 else None)
        )  # fmt: skip
    return rows


# -- over time ------------------------------------------------------------------------------------
def traffic_over_time(per_bucket: Mapping[float, Sequence[int]], bucket: float) -> Table:
    """``traffic_over_time`` from (messages, bytes) per bucket start."""
    return [
        (start, bucket, c, b, c / bucket, b / bucket)
        for start, (c, b) in sorted(per_bucket.items())
    ]


def incidents_over_time(per_bucket: Mapping[tuple[float, str], int], bucket: float) -> Table:
    """``incidents_over_time`` from the events per (bucket start, event)."""
    return [(start, bucket, event, n) for (start, event), n in sorted(per_bucket.items())]


# -- latencies ------------------------------------------------------------------------------------
def percentiles(ordered: Sequence[float], percents: Sequence[int]) -> list[float]:
    """Nearest rank: the value at 1-based rank ceil(p * n / 100), in integers."""
    n = len(ordered)
    return [ordered[(p * n + 99) // 100 - 1] for p in percents]


def latency_tables(ranks: Iterable[Sequence[Any]], bucket: float) -> tuple[dict[str, Table], int]:
    """``latency_summary``, ``latency_cdf`` and ``latency_over_time`` from the rows of
    ``analytics.figures.latency_ranks`` (``delivery, bucket_start, percent, latency, total,
    min``), and the number of deliveries with a latency."""
    cdf: dict[str, dict[int, float]] = {}
    groups: dict[str, tuple[int, float]] = {}
    buckets: dict[float, dict[int, float]] = {}
    sizes: dict[float, int] = {}
    for delivery, start, percent, latency, total, smallest in ranks:
        if delivery is not None:
            cdf.setdefault(delivery, {})[percent] = latency
            groups[delivery] = (total, smallest)
        else:
            buckets.setdefault(start, {})[percent] = latency
            sizes[start] = total
    tables: dict[str, Table] = {
        "latency_summary": [
            (d, groups[d][0], groups[d][1], *(cdf[d][p] for p in SUMMARY_PERCENTS), cdf[d][100])
            for d in sorted(cdf)
        ],
        "latency_cdf": [(d, p, v) for d in sorted(cdf) for p, v in sorted(cdf[d].items())],
        "latency_over_time": [
            (start, bucket, sizes[start], *(buckets[start][p] for p in SUMMARY_PERCENTS))
            for start in sorted(buckets)
        ],
    }
    return tables, sum(total for total, _ in groups.values())


def deliveries(
    counts: Counts, *, timed: int, still_stored: int, duplicate_pairs: int
) -> tuple[Any, ...]:
    """The one row of ``deliveries``: deliveries with no latency are those whose publication has
    no ``publish`` event in the logs."""
    return (
        counts.online,
        counts.flushed,
        counts.stored_offline,
        still_stored,
        counts.online + counts.flushed - timed,
        duplicate_pairs,
    )


# -- subscriptions --------------------------------------------------------------------------------
def forwarding_total(per_superpeer: Table) -> Table:
    """``forwarding_total`` from the ``forwarding`` rows (each forwarded subscription has one
    receiving super-peer, so the sums count each once)."""
    forwarded = sum(row[1] for row in per_superpeer)
    routed = sum(row[2] for row in per_superpeer)
    return [(forwarded, routed, routed / forwarded if forwarded > 0 else None)]
