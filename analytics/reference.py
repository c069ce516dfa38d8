"""The report's figures in one plain Python process: the yardstick the benchmark measures Spark
against, and a second opinion on its results.

One pass over the lines, keeping only what the figures need (counters per kind, node, link,
second and hop count; the publication times; one small tuple per delivery; the sets of forwarded
and answered subscriptions), then the percentiles by sorting. No PySpark: it reads local JSON-lines
files (plain or gzipped) only. Its tables have the columns and row order of the Spark tables in
``analytics.figures`` (nulls sort first, as in Spark), as tuples, so the two compare with ``==``.

Parsing follows Spark's for the trace schema: a JSON value of another type in a string field is
kept as its (compact) JSON text, a number where an integer is expected, or any non-number ``ts``,
makes the line invalid, ``NaN`` and overflowing numbers parse and then fail the ``ts`` range check.
Where JSON syntax is exotic (trailing text after the object, say) the two parsers may disagree.
"""

from __future__ import annotations

import gzip
import heapq
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from analytics.definitions import (
    BLANK,
    CDF_PERCENTS,
    FLUSHED,
    INCIDENT_EVENTS,
    MAX_TS,
    ONLINE,
    SUMMARY_PERCENTS,
    TRACE_SUFFIXES,
    bucket_seconds,
    local_files,
)
from analytics.tables import (
    Table,
    forwarding_total,
    incidents_over_time,
    load_tables,
    nulls_first,
    percentiles,
    traffic_over_time,
    tree_shape,
)
from superpeer.trace import EVENTS

_STRINGS = ("node", "event", "kind", "msg", "pub", "sub", "origin", "peer", "neighbour")
_LONG = 2**63
_KNOWN_EVENTS = frozenset(EVENTS)


def trace_files(path: str | Path) -> list[Path]:
    """The trace files under ``path`` (or ``path`` itself), skipping hidden files and folders
    (names starting with ``_`` or ``.``), as Spark does."""
    return [file for file in local_files(path) if file.name.endswith(TRACE_SUFFIXES)]


def parse(line: str) -> tuple[Any, ...] | None:
    """``(ts, node, event, kind, msg, pub, sub, origin, peer, neighbour, bytes, hops)`` of a
    valid line (``analytics.schema``), or None for an invalid one."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    ts = record.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return None
    try:
        ts = float(ts)
    except OverflowError:
        return None
    if not 0.0 <= ts < MAX_TS:  # also rejects NaN
        return None
    strings = []
    for name in _STRINGS:
        value = record.get(name)
        if value is not None and not isinstance(value, str):
            value = json.dumps(value, separators=(",", ":"))
        strings.append(value)
    numbers = []
    for name in ("bytes", "hops"):
        value = record.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not -_LONG <= value < _LONG
        ):
            return None
        numbers.append(value)
    node, event, kind = strings[0], strings[1], strings[2]
    if node is None or kind is None or event not in _KNOWN_EVENTS:
        return None
    return (ts, *strings, numbers[0] or 0, numbers[1])


def compute(path: str | Path, *, examples: int = 5) -> dict[str, Table]:
    """Every table of ``analytics.figures.Figures`` for the traces under ``path``, plus
    ``bucket_seconds`` (one row, one value)."""
    lines = valid = 0
    smallest_invalid: list[_Reversed] = []  # the first invalid lines in text order, largest on top
    first = last = None
    nodes: set[str] = set()
    messages = total_bytes = 0
    kinds: dict[str, list[int]] = {}
    sent: Counter[str] = Counter()
    sent_bytes: Counter[str] = Counter()
    received: Counter[str] = Counter()
    received_bytes: Counter[str] = Counter()
    links: dict[tuple[str, str], list[int]] = {}
    sends: dict[float, list[int]] = {}
    hops: Counter[int | None] = Counter()
    published: dict[tuple[str, str], float] = {}
    deliveries: list[tuple[str, str | None, str | None, float]] = []
    delivered: Counter[tuple[str | None, str | None]] = Counter()
    stored = 0
    offline: set[tuple[str, str | None, str | None]] = set()
    flushed: set[tuple[str, str | None, str | None]] = set()
    forwarded: set[tuple[str, str | None, str]] = set()
    answered: set[tuple[str, str, str]] = set()
    answers: Counter[tuple[str, str | None, str]] = Counter()  # (level, holder, sub)
    edges: dict[tuple[str | None, int | None, str, str | None], list[int]] = {}
    publications: Counter[str] = Counter()
    incidents: list[tuple[float, str]] = []

    for line in _lines(path):
        if not line.strip(BLANK):
            continue
        lines += 1
        record = parse(line)
        if record is None:
            if len(smallest_invalid) < examples:
                heapq.heappush(smallest_invalid, _Reversed(line))
            elif examples and line < smallest_invalid[0].line:
                heapq.heapreplace(smallest_invalid, _Reversed(line))
            continue
        valid += 1
        ts, node, event, kind, _msg, pub, sub, origin, peer, neighbour, size, hop = record
        nodes.add(node)
        if first is None or ts < first:
            first = ts
        if last is None or ts > last:
            last = ts
        if event == "send":
            _add(kinds, kind, size)
            messages += 1
            total_bytes += size
            sent[node] += 1
            sent_bytes[node] += size
            if neighbour is not None:
                _add(links, (node, neighbour), size)
                _add(sends, ts, size)
            if kind == "sp.notification":
                _add(edges, (origin, hop, node, neighbour), size)
            if sub is not None:
                if kind == "sp.forward":
                    forwarded.add((node, neighbour, sub))
                elif kind == "sp.notification":
                    ids = [s for s in sub.split(",") if s]
                    answers.update(("superpeer", neighbour, s) for s in ids)
                    if neighbour is not None:
                        answered.update((neighbour, node, s) for s in ids)
        elif event == "receive":
            received[node] += 1
            received_bytes[node] += size
            if peer is not None:
                _add(kinds, kind, size)
                messages += 1
                total_bytes += size
        elif event in ("deliver", "flush"):
            _add(kinds, kind, size)
            messages += 1
            total_bytes += size
            sent[node] += 1
            sent_bytes[node] += size
            hops[hop] += 1
            deliveries.append((ONLINE if event == "deliver" else FLUSHED, pub, origin, ts))
            delivered[peer, pub] += 1
            if event == "flush":
                flushed.add((node, peer, pub))
            if sub is not None:
                answers.update(("peer", peer, s) for s in sub.split(",") if s)
        elif event == "publish":
            publications[node] += 1
            if pub is not None:
                key = (pub, node)
                if key not in published or ts < published[key]:
                    published[key] = ts
        elif event == "offline":
            stored += 1
            offline.add((node, peer, pub))
        if event in INCIDENT_EVENTS:
            incidents.append((ts, event))

    span = 0.0 if first is None or last is None else last - first
    bucket = bucket_seconds(span)
    tables: dict[str, Table] = {"bucket_seconds": [(bucket,)]}
    tables["quality"] = [(lines, valid, lines - valid)]
    tables["invalid_examples"] = [(item.line,) for item in sorted(smallest_invalid, reverse=True)]
    tables["overview"] = [(valid, len(nodes), first, last, messages, total_bytes)]
    tables["kinds"] = [(kind, c, b) for kind, (c, b) in sorted(kinds.items())]
    tables["superpeers"] = [
        (n, sent[n], sent_bytes[n], received[n], received_bytes[n]) for n in sorted(nodes)
    ]
    tables["links"] = [(n, m, c, b) for (n, m), (c, b) in sorted(links.items())]
    tables["load_curve"], tables["load_gini"] = load_tables({n: received[n] for n in nodes})
    tables["hops"] = sorted(hops.items(), key=nulls_first)

    latencies: dict[str, list[float]] = {}
    buckets: dict[float, list[float]] = {}
    unmatched = 0
    for delivery, pub, origin, ts in deliveries:
        start = published.get((pub, origin)) if pub is not None and origin is not None else None
        if start is None:
            unmatched += 1
            continue
        latency = ts - start
        latencies.setdefault(delivery, []).append(latency)
        if delivery == ONLINE:
            buckets.setdefault(math.floor(start / bucket) * bucket, []).append(latency)
    tables["latency_summary"] = []
    tables["latency_cdf"] = []
    for delivery, values in sorted(latencies.items()):
        values.sort()
        tables["latency_summary"].append(
            (delivery, len(values), values[0], *percentiles(values, SUMMARY_PERCENTS), values[-1])
        )
        tables["latency_cdf"] += [
            (delivery, p, v)
            for p, v in zip(CDF_PERCENTS, percentiles(values, CDF_PERCENTS), strict=True)
        ]
    tables["latency_over_time"] = [
        (start, bucket, len(values), *percentiles(sorted(values), SUMMARY_PERCENTS))
        for start, values in sorted(buckets.items())
    ]
    duplicates = sorted(
        ((peer, pub, n) for (peer, pub), n in delivered.items() if n > 1), key=nulls_first
    )
    online = sum(1 for d in deliveries if d[0] == ONLINE)
    still = sum(1 for key in offline if None in key or key not in flushed)
    tables["deliveries"] = [
        (online, len(deliveries) - online, stored, still, unmatched, len(duplicates))
    ]
    tables["duplicates"] = duplicates
    tables["forwarding"], tables["forwarding_total"] = _forwarding(forwarded, answered)
    tables["subscriptions"] = sorted(
        ((*key, n) for key, n in answers.items()),
        key=lambda row: (-row[3], *nulls_first(row[:3])),
    )
    tables["tree_edges"] = sorted(((*key, c, b) for key, (c, b) in edges.items()), key=nulls_first)
    tables["tree_shape"] = tree_shape(tables["tree_edges"], publications)
    per_second: dict[int, list[int]] = {}
    per_bucket: dict[float, list[int]] = {}
    for ts, (count, size) in sends.items():
        for table, key in (
            (per_second, math.floor(ts)),
            (per_bucket, math.floor(ts / bucket) * bucket),
        ):
            totals = table.setdefault(key, [0, 0])
            totals[0] += count
            totals[1] += size
    tables["traffic_per_second"] = [(s, c, b) for s, (c, b) in sorted(per_second.items())]
    tables["traffic_over_time"] = traffic_over_time(per_bucket, bucket)
    per_incident = Counter((math.floor(ts / bucket) * bucket, event) for ts, event in incidents)
    tables["incidents_over_time"] = incidents_over_time(per_incident, bucket)
    return tables


def _lines(path: str | Path) -> Iterator[str]:
    for file in trace_files(path):
        opener: Callable[..., IO[str]] = gzip.open if file.name.endswith(".gz") else open
        with opener(file, "rt", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                yield line[:-1] if line.endswith("\n") else line


class _Reversed:
    """A line ordered backwards, so ``heapq`` (a min-heap) keeps the smallest lines seen."""

    __slots__ = ("line",)

    def __init__(self, line: str) -> None:
        self.line = line

    def __lt__(self, other: _Reversed) -> bool:
        return self.line > other.line


def _add(table: dict[Any, list[int]], key: Any, size: int) -> None:
    totals = table.get(key)
    if totals is None:
        table[key] = [1, size]
    else:
        totals[0] += 1
        totals[1] += size


def _forwarding(
    forwarded: set[tuple[str, str | None, str]], answered: set[tuple[str, str, str]]
) -> tuple[Table, Table]:
    per: dict[str | None, list[int]] = {}
    for key in forwarded:
        totals = per.setdefault(key[1], [0, 0])
        totals[0] += 1
        totals[1] += key[1] is not None and key in answered  # type: ignore[operator]
    rows = [(superpeer, f, r, r / f) for superpeer, (f, r) in sorted(per.items(), key=nulls_first)]
    return rows, forwarding_total(rows)
