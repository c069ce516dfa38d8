"""The report directory: ``report.md`` and ``report.html`` with figures and tables, PNG plots, and
every table as Parquet and CSV.

Only aggregates reach the driver: each table of ``analytics.figures`` is small by construction
(per kind, per super-peer, per link, per hop count, per percent, per time bucket) except the
per-second traffic and the duplicate pairs, of which the report collects only the peak second and
the first pairs. The tables are written by Spark (``<warehouse>/tables/<name>.parquet`` and
``.csv``, one file each), so on a cluster they can go to shared storage while the driver writes the
documents and plots locally.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from matplotlib.figure import Figure
from pyspark.sql import DataFrame, Row, SparkSession

from analytics.definitions import FLUSHED, ONLINE
from analytics.figures import Figures, Keep, NoTraceLines, analyze
from analytics.load import TraceInputError
from analytics.tables import TABLES

SECTIONS: Final = (
    "Summary",
    "Input quality",
    "Messages and bytes per kind",
    "Load per super-peer",
    "Traffic per link",
    "Hop counts of notifications",
    "Notification latency",
    "Duplicates and offline storage",
    "Subscription forwarding efficiency",
    "Hot subscriptions",
    "Forwarding trees",
    "Traffic over time",
    "Faults and repairs",
    "Definitions",
    "Tables",
)
PLOTS: Final = (
    "load_curve.png",
    "hops.png",
    "latency_cdf.png",
    "traffic.png",
    "trees.png",
    "incidents.png",
)
SHOWN_ROWS: Final = 30
"""Longer tables show their first rows in the documents; the table files hold all of them."""
SHOWN_DUPLICATES: Final = 20
DRAWN_TREES: Final = 4
"""The forwarding trees drawn: those of the origins whose notifications took the most messages."""
CONCURRENT_JOBS: Final = 4
EXAMPLE_CHARACTERS: Final = 200

DEFINITIONS: Final = (
    ("Wire message", "a message on a wire, counted once: a `send` (to a neighbour or a peer), a "
     "`receive` from a local peer, a `deliver` or a `flush` (a notification to a local peer). "
     "The daemons do not trace every message yet (replies to peers, identification, "
     "topology): what they trace as `send` or `receive` counts."),
    ("Load", "of a super-peer: the messages it received from neighbour super-peers and from "
     "peers (its `receive` events); super-peers in the logs that received nothing count with 0."),
    ("Sorted cumulative load", "super-peers sorted by load, highest first; x = share of "
     "super-peers, y = cumulative share of the total load."),
    ("Gini coefficient", "of the loads sorted ascending x_1..x_n: "
     "2·Σ i·x_i / (n·Σ x_i) − (n+1)/n; 0 for equal loads, (n−1)/n when one carries all."),
    ("Latency", "delivery time (`deliver`, or `flush` for a notification stored while its peer "
     "was detached) minus the time of the publication's `publish` event at its origin. Online "
     "and flushed deliveries are reported apart: flushed ones include the time offline."),
    ("Percentiles", "nearest rank: the P-th percentile of n sorted values is the value at rank "
     "⌈P·n/100⌉, computed exactly in Spark."),
    ("Time bucket", "floor(t / s)·s, with s the smallest round size (1 ms, 2 ms, 5 ms ... 1 min, "
     "2 min, 5 min ... 1 day, 1 week, 30 days, 1 year) that splits the traces' time span into at "
     "most 60 buckets; latency buckets by publication time."),
    ("Duplicate delivery", "a (peer, publication) pair delivered more than once; must be 0."),
    ("Forwarding efficiency", "of the distinct (sender, receiving super-peer, subscription id) "
     "forwarded (`sp.forward` sends), the share for which the receiving super-peer sent the "
     "sender an `sp.notification` listing that id."),
    ("Hot subscription", "a subscription by the notifications that answered it: a super-peer's "
     "forwarded subscription by the `sp.notification` messages listing its id, sent to it by "
     "every super-peer it was forwarded to; a peer's by the deliveries listing its id (where the "
     "trace has them)."),
    ("Forwarding tree", "of an origin: its publications' `sp.notification` messages per edge "
     "(sender, neighbour) and depth (the message's hop count). More edges than super-peers "
     "reached: the tree changed shape during the logs."),
    ("Traffic", "`send` events to a neighbour (super-peer to super-peer messages) and their bytes, per second "
     "of their time and per time bucket."),
    ("Faults and repairs", "the events `neighbour_failed`, `repair`, `drop` and `auth_failure`, "
     "per time bucket; absent when the logs hold none."),
    ("Invalid line", "a non-blank line that is not a JSON object of the trace schema with a "
     "time, node, known event and kind; counted, shown, and left out of every figure."),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What the command line tells when the report is written."""

    directory: Path
    events: int
    invalid: int


def build_report(
    raw: DataFrame,
    out_dir: str | Path,
    *,
    warehouse: str | None = None,
    source: str = "",
    keep: Keep = "rows",
) -> ReportSummary:
    """Analyse ``raw`` (``read_traces``; ``keep`` as for ``analyze``) and write the report into
    ``out_dir``; the tables go to ``<warehouse>/tables`` (default ``out_dir``). ``source`` names
    the traces in the report. Raises ``TraceInputError`` when the traces hold no line."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spark = raw.sparkSession
    provenance = (
        f"Generated {_time(time.time())} by hypercup-analyze on Spark {spark.version} "
        f"(master `{spark.sparkContext.master}`)."
    )
    try:
        figures = analyze(raw, keep=keep, first_rows=max(SHOWN_ROWS, SHOWN_DUPLICATES))
    except NoTraceLines as error:
        raise TraceInputError(f"{source}: {error}") from None
    try:
        _write_tables(figures, spark, f"{warehouse or str(out.resolve())}/tables")
    finally:
        figures.unpersist()
    collected = _collect(figures)
    plot_load_curve(collected["load_curve"], collected["load_gini"][0], out / PLOTS[0])
    plot_hops(collected["hops"], out / PLOTS[1])
    plot_latency_cdf(collected["latency_cdf"], out / PLOTS[2])
    plot_traffic(collected["traffic_over_time"], out / PLOTS[3])
    plot_trees(collected["tree_edges"], out / PLOTS[4])
    plot_incidents(collected["incidents_over_time"], out / PLOTS[5])
    sections = _sections(figures, collected, source, warehouse, provenance)
    (out / "report.md").write_text(render_markdown(sections), encoding="utf-8")
    (out / "report.html").write_text(render_html(sections), encoding="utf-8")
    return ReportSummary(
        out, collected["overview"][0]["events"], collected["quality"][0]["invalid"]
    )


def _collect(figures: Figures) -> dict[str, list[Row]]:
    """The rows the documents and plots need, all on the driver already: the tables, the first
    rows of the growing ones, the busiest second, and the edges of the trees drawn."""
    busiest = {
        row["origin"]
        for row in sorted(
            figures.tables["tree_shape"], key=lambda r: (-r["messages"], r["origin"] or "")
        )[:DRAWN_TREES]
    }
    return {
        **figures.tables,
        "duplicates": figures.shown["duplicates"][:SHOWN_DUPLICATES],
        "subscriptions": figures.shown["subscriptions"][:SHOWN_ROWS],
        "peak_second": figures.shown["traffic_per_second"],
        "tree_edges": [r for r in figures.tables["tree_edges"] if r["origin"] in busiest],
    }


def _write_tables(figures: Figures, spark: SparkSession, directory: str) -> None:
    """Each table as one Parquet file and one CSV file (in Spark's output folders): those on the
    driver from their rows, the growing ones (``tables.GROWING``) from Spark, where they are
    kept whole."""

    def write(name: str) -> None:
        if name in figures.tables:
            table = spark.createDataFrame(figures.tables[name], TABLES[name]).coalesce(1)
        else:
            table = figures.whole(name)
        table.write.mode("overwrite").parquet(f"{directory}/{name}.parquet")
        table.write.mode("overwrite").option("header", "true").csv(f"{directory}/{name}.csv")

    with ThreadPoolExecutor(max_workers=CONCURRENT_JOBS) as pool:
        list(pool.map(write, TABLES))


# -- documents ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Paragraph:
    text: str
    """Markdown-light: `code` spans are the only markup."""


@dataclass(frozen=True, slots=True)
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True, slots=True)
class Image:
    file: str
    alt: str


@dataclass(frozen=True, slots=True)
class Code:
    lines: Sequence[str]


Block = Paragraph | Table | Image | Code


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    blocks: Sequence[Block]


def render_markdown(sections: Sequence[Section]) -> str:
    parts = ["# Super-peer traffic report", ""]
    for section in sections:
        parts += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Paragraph):
                parts.append(block.text)
            elif isinstance(block, Table):
                parts.append("| " + " | ".join(block.headers) + " |")
                parts.append("|" + "|".join("---" for _ in block.headers) + "|")
                parts += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            elif isinstance(block, Image):
                parts.append(f"![{block.alt}]({block.file})")
            else:
                parts += ["```text", *block.lines, "```"]
            parts.append("")
    return "\n".join(parts)


def render_html(sections: Sequence[Section]) -> str:
    body: list[str] = []
    for section in sections:
        body.append(f"<section><h2>{html.escape(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Paragraph):
                body.append(f"<p>{_html_text(block.text)}</p>")
            elif isinstance(block, Table):
                head = "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
                rows = "".join(
                    "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                    for row in block.rows
                )
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            elif isinstance(block, Image):
                body.append(f'<img src="{html.escape(block.file)}" alt="{html.escape(block.alt)}">')
            else:
                body.append("<pre>" + html.escape("\n".join(block.lines)) + "</pre>")
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>Super-peer traffic report</title><style>"
        "body{font-family:sans-serif;max-width:60em;margin:auto;padding:1em}"
        "table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}"
        "th{background:#f3f3f3}img{max-width:100%}pre{background:#f6f6f6;padding:.5em;"
        "overflow-x:auto}code{background:#f3f3f3}"
        "</style></head><body>\n<h1>Super-peer traffic report</h1>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _html_text(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _sections(
    figures: Figures,
    c: dict[str, list[Row]],
    source: str,
    warehouse: str | None,
    provenance: str,
) -> list[Section]:
    overview, quality = c["overview"][0], c["quality"][0]
    gini, deliveries, forwarding = c["load_gini"][0], c["deliveries"][0], c["forwarding_total"][0]
    span = (
        f"{_time(overview['first_ts'])} to {_time(overview['last_ts'])} "
        f"({_number(overview['last_ts'] - overview['first_ts'], 3)} s)"
        if overview["first_ts"] is not None
        else "none"
    )
    summary = Table(
        ("figure", "value"),
        [
            ("traces", source or "-"),
            ("valid events", _count(overview["events"])),
            ("invalid lines", f"{_count(quality['invalid'])} of {_count(quality['lines'])}"),
            ("super-peers", _count(overview["superpeers"])),
            ("time span", span),
            (
                "wire messages",
                f"{_count(overview['messages'])} ({_count(overview['bytes'])} bytes)",
            ),
            ("Gini coefficient of load", _number(gini["gini"], 4)),
            ("duplicate deliveries", _count(deliveries["duplicate_pairs"])),
            ("forwarding efficiency", _percent(forwarding["share"])),
            ("time bucket", f"{_number(figures.bucket_seconds, 3)} s"),
        ],
    )
    return [
        Section(SECTIONS[0], [Paragraph(provenance), summary]),
        Section(SECTIONS[1], _quality_blocks(quality, c["invalid_examples"])),
        Section(SECTIONS[2], [_kinds_table(c["kinds"], overview["messages"])]),
        Section(SECTIONS[3], _load_blocks(c["load_curve"], gini, c["superpeers"])),
        Section(SECTIONS[4], _link_blocks(c["links"])),
        Section(SECTIONS[5], _hop_blocks(c["hops"])),
        Section(SECTIONS[6], _latency_blocks(c, deliveries)),
        Section(SECTIONS[7], _delivery_blocks(deliveries, c["duplicates"])),
        Section(SECTIONS[8], _forwarding_blocks(forwarding, c["forwarding"])),
        Section(SECTIONS[9], _subscription_blocks(c["subscriptions"])),
        Section(SECTIONS[10], _tree_blocks(c["tree_shape"])),
        Section(SECTIONS[11], _traffic_blocks(c["traffic_over_time"], c["peak_second"])),
        Section(SECTIONS[12], _incident_blocks(c["incidents_over_time"])),
        Section(SECTIONS[13], [Table(("term", "definition"), DEFINITIONS)]),
        Section(SECTIONS[14], _table_blocks(figures, warehouse)),
    ]


def _quality_blocks(quality: Row, examples: list[Row]) -> list[Block]:
    blocks: list[Block] = [
        Paragraph(
            f"{_count(quality['lines'])} non-blank lines read: {_count(quality['valid'])} valid, "
            f"{_count(quality['invalid'])} invalid. Invalid lines are left out of every figure "
            "below; they are counted here so that none is lost silently."
        )
    ]
    if examples:
        blocks.append(Paragraph(f"The first {len(examples)} invalid lines (in text order):"))
        blocks.append(Code([_clip(row["line"]) for row in examples]))
    return blocks


def _kinds_table(kinds: list[Row], total: int) -> Table:
    return Table(
        ("kind", "messages", "share", "bytes", "bytes per message"),
        [
            (
                row["kind"],
                _count(row["messages"]),
                _percent(row["messages"] / total if total else None),
                _count(row["bytes"]),
                _number(row["bytes"] / row["messages"], 1),
            )
            for row in kinds
        ],
    )


def _load_blocks(curve: list[Row], gini: Row, superpeers: list[Row]) -> list[Block]:
    by_node = {row["node"]: row for row in superpeers}
    shown = curve[:SHOWN_ROWS]
    blocks: list[Block] = [
        Image(PLOTS[0], "Sorted cumulative load"),
        Paragraph(
            f"Gini coefficient {_number(gini['gini'], 4)} over {_count(gini['superpeers'])} "
            f"super-peers, {_count(gini['total_load'])} messages received in all. The busiest "
            "super-peers first:"
        ),
        Table(
            (
                "rank",
                "super-peer",
                "load (received)",
                "cumulative share",
                "received bytes",
                "sent",
                "sent bytes",
            ),
            [
                (
                    str(row["rank"]),
                    row["node"],
                    _count(row["load"]),
                    _percent(row["cumulative_load_share"]),
                    _count(by_node[row["node"]]["received_bytes"]),
                    _count(by_node[row["node"]]["sent"]),
                    _count(by_node[row["node"]]["sent_bytes"]),
                )
                for row in shown
            ],
        ),
    ]
    return blocks + _more(len(curve), len(shown), "superpeers")


def _link_blocks(links: list[Row]) -> list[Block]:
    busiest = sorted(links, key=lambda r: (-r["messages"], r["node"], r["neighbour"]))
    shown = busiest[:SHOWN_ROWS]
    return [
        Paragraph(
            f"{_count(len(links))} directed links carried super-peer messages; busiest first:"
        ),
        Table(
            ("from", "to", "messages", "bytes"),
            [(r["node"], r["neighbour"], _count(r["messages"]), _count(r["bytes"])) for r in shown],
        ),
        *_more(len(links), len(shown), "links"),
    ]


def _hop_blocks(hops: list[Row]) -> list[Block]:
    total = sum(row["deliveries"] for row in hops)
    return [
        Image(PLOTS[1], "Hop-count distribution of delivered notifications"),
        Table(
            ("hops", "deliveries", "share"),
            [
                (
                    "-" if row["hops"] is None else str(row["hops"]),
                    _count(row["deliveries"]),
                    _percent(row["deliveries"] / total),
                )
                for row in hops
            ],
        ),
    ]


def _latency_blocks(c: dict[str, list[Row]], deliveries: Row) -> list[Block]:
    blocks: list[Block] = [
        Image(PLOTS[2], "Latency CDF of online and flushed deliveries"),
        Paragraph(
            "Publication at the origin to delivery at the subscriber's super-peer, in "
            "milliseconds; nearest-rank percentiles. Flushed deliveries waited for their peer "
            "to come back."
        ),
        Table(
            ("delivery", "deliveries", "min", "p50", "p90", "p99", "max"),
            [
                (
                    row["delivery"],
                    _count(row["deliveries"]),
                    *(_ms(row[k]) for k in ("min", "p50", "p90", "p99", "max")),
                )
                for row in c["latency_summary"]
            ],
        ),
    ]
    if deliveries["without_publish"]:
        blocks.append(
            Paragraph(
                f"{_count(deliveries['without_publish'])} deliveries have no `publish` event of "
                "their publication in the logs (its origin's log is missing?) and no latency."
            )
        )
    over_time = c["latency_over_time"]
    blocks += [
        Paragraph("Online deliveries by the time bucket of their publication:"),
        Table(
            ("publication bucket (UTC)", "deliveries", "p50", "p90", "p99"),
            [
                (
                    _time(row["bucket_start"]),
                    _count(row["deliveries"]),
                    _ms(row["p50"]),
                    _ms(row["p90"]),
                    _ms(row["p99"]),
                )
                for row in over_time[:SHOWN_ROWS]
            ],
        ),
        *_more(len(over_time), min(len(over_time), SHOWN_ROWS), "latency_over_time"),
    ]
    return blocks


def _delivery_blocks(deliveries: Row, duplicates: list[Row]) -> list[Block]:
    pairs = deliveries["duplicate_pairs"]
    blocks: list[Block] = [
        Table(
            ("figure", "count"),
            [
                ("delivered online", _count(deliveries["online"])),
                ("delivered later (flushed)", _count(deliveries["flushed"])),
                ("stored offline", _count(deliveries["stored_offline"])),
                ("still stored (never flushed)", _count(deliveries["still_stored"])),
                ("duplicate deliveries (peer, publication); must be 0", _count(pairs)),
            ],
        )
    ]
    if pairs:
        blocks += [
            Paragraph(f"Duplicated (peer, publication) pairs, the first {len(duplicates)}:"),
            Table(
                ("peer", "publication", "deliveries"),
                [(r["peer"], r["pub"], _count(r["deliveries"])) for r in duplicates],
            ),
        ]
    return blocks


def _forwarding_blocks(total: Row, per_superpeer: list[Row]) -> list[Block]:
    return [
        Paragraph(
            f"{_count(total['routed'])} of {_count(total['forwarded'])} forwarded subscriptions "
            f"({_percent(total['share'])}) routed at least one notification back. Per receiving "
            "super-peer:"
        ),
        Table(
            ("super-peer", "forwarded to it", "routed back", "share"),
            [
                (r["superpeer"], _count(r["forwarded"]), _count(r["routed"]), _percent(r["share"]))
                for r in per_superpeer[:SHOWN_ROWS]
            ],
        ),
        *_more(len(per_superpeer), min(len(per_superpeer), SHOWN_ROWS), "forwarding"),
    ]


def _subscription_blocks(hot: list[Row]) -> list[Block]:
    if not hot:
        return [Paragraph("No notification in the logs names the subscriptions it answers.")]
    return [
        Paragraph(
            "The subscriptions answered by the most notifications (a super-peer's forwarded "
            "subscription, or a peer's own where deliveries name them); all of them in the table "
            "`subscriptions`:"
        ),
        Table(
            ("rank", "level", "holder", "subscription", "notifications"),
            [
                (str(rank), r["level"], r["holder"] or "-", r["sub"], _count(r["notifications"]))
                for rank, r in enumerate(hot, 1)
            ],
        ),
    ]


def _tree_blocks(shapes: list[Row]) -> list[Block]:
    busiest = sorted(shapes, key=lambda r: (-r["messages"], r["origin"] or ""))
    shown = busiest[:SHOWN_ROWS]
    changed = [r["origin"] for r in shapes if r["edges"] > r["superpeers"]]
    blocks: list[Block] = [
        Image(PLOTS[4], "Forwarding trees of the busiest origins"),
        Paragraph(
            f"The notification trees of {_count(len(shapes))} origins, busiest first (the "
            f"drawing shows the first {DRAWN_TREES}, each edge as wide as its messages):"
        ),
        Table(
            (
                "origin",
                "publications",
                "edges",
                "super-peers reached",
                "depth",
                "messages",
                "messages per publication",
            ),
            [
                (
                    r["origin"] or "-",
                    _count(r["publications"]),
                    _count(r["edges"]),
                    _count(r["superpeers"]),
                    _count(r["depth"]),
                    _count(r["messages"]),
                    _number(r["messages_per_publication"], 2),
                )
                for r in shown
            ],
        ),
        *_more(len(shapes), len(shown), "tree_shape"),
    ]
    if changed:
        blocks.append(
            Paragraph(
                f"{_count(len(changed))} trees changed shape during the logs (more edges than "
                f"super-peers reached): {', '.join(str(o) for o in changed[:SHOWN_ROWS])}."
            )
        )
    return blocks


def _incident_blocks(incidents: list[Row]) -> list[Block]:
    if not incidents:
        return [
            Image(PLOTS[5], "Faults and repairs over time"),
            Paragraph("No faults or repairs in the logs."),
        ]
    events = sorted({r["event"] for r in incidents})
    per_bucket: dict[float, dict[str, int]] = {}
    for r in incidents:
        per_bucket.setdefault(r["bucket_start"], {})[r["event"]] = r["events"]
    buckets = sorted(per_bucket)
    return [
        Image(PLOTS[5], "Faults and repairs over time"),
        Table(
            ("bucket (UTC)", *events),
            [
                (_time(b), *(_count(per_bucket[b].get(e, 0)) for e in events))
                for b in buckets[:SHOWN_ROWS]
            ],
        ),
        *_more(len(buckets), min(len(buckets), SHOWN_ROWS), "incidents_over_time"),
    ]


def _traffic_blocks(over_time: list[Row], peak: list[Row]) -> list[Block]:
    blocks: list[Block] = [Image(PLOTS[3], "Super-peer messages per second over time")]
    if peak:
        blocks.append(
            Paragraph(
                f"Busiest second: {_count(peak[0]['messages'])} messages "
                f"({_count(peak[0]['bytes'])} bytes) from {_time(float(peak[0]['second']))}."
            )
        )
    blocks += [
        Table(
            ("bucket (UTC)", "messages", "bytes", "messages/s", "bytes/s"),
            [
                (
                    _time(r["bucket_start"]),
                    _count(r["messages"]),
                    _count(r["bytes"]),
                    _number(r["messages_per_second"], 1),
                    _number(r["bytes_per_second"], 0),
                )
                for r in over_time[:SHOWN_ROWS]
            ],
        ),
        *_more(len(over_time), min(len(over_time), SHOWN_ROWS), "traffic_over_time"),
    ]
    return blocks


def _table_blocks(figures: Figures, warehouse: str | None) -> list[Block]:
    where = f"{warehouse}/tables" if warehouse else "tables"
    return [
        Paragraph(
            f"Every table in full, as Parquet and CSV (one file each, in a Spark output folder), "
            f"in `{where}`:"
        ),
        Table(
            ("table", "Parquet", "CSV"),
            [(n, f"{where}/{n}.parquet", f"{where}/{n}.csv") for n in TABLES],
        ),
    ]


def _more(total: int, shown: int, table: str) -> list[Block]:
    if total <= shown:
        return []
    return [Paragraph(f"{_count(total - shown)} more rows in the table `{table}`.")]


# -- formatting -----------------------------------------------------------------------------------
def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:,.3f}"


def _time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return (
        datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _clip(line: str) -> str:
    return line if len(line) <= EXAMPLE_CHARACTERS else line[:EXAMPLE_CHARACTERS] + " ..."


# -- plots ----------------------------------------------------------------------------------------
def plot_load_curve(curve: list[Row], gini: Row, path: Path) -> None:
    """The sorted cumulative load (as in the DHT seed's Figure 5c), with the equal-load diagonal."""
    figure, axes = _figure()
    if curve and curve[0]["cumulative_load_share"] is not None:
        xs = [0.0] + [row["superpeer_share"] for row in curve]
        ys = [0.0] + [row["cumulative_load_share"] for row in curve]
        axes.plot(xs, ys, marker="o" if len(curve) <= 64 else None, label="observed")
        axes.plot([0, 1], [0, 1], linestyle="--", color="grey", label="equal load")
        axes.legend(loc="lower right")
    else:
        _no_data(axes)
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.02)
    axes.set_xlabel("share of super-peers (sorted by load, highest first)")
    axes.set_ylabel("cumulative share of load")
    axes.set_title(f"Sorted cumulative load (Gini {_number(gini['gini'], 3)})")
    _save(figure, path)


def plot_hops(hops: list[Row], path: Path) -> None:
    figure, axes = _figure()
    known = [row for row in hops if row["hops"] is not None]
    if known:
        axes.bar([row["hops"] for row in known], [row["deliveries"] for row in known])
        axes.set_xticks([row["hops"] for row in known])
    else:
        _no_data(axes)
    axes.set_xlabel("super-peer hops")
    axes.set_ylabel("deliveries")
    axes.set_title("Hop counts of delivered notifications")
    _save(figure, path)


def plot_latency_cdf(cdf: list[Row], path: Path) -> None:
    """One panel each for online and flushed deliveries: their scales differ by orders of
    magnitude (milliseconds against the time a peer stayed away)."""
    figure = Figure(figsize=(10, 4.5), layout="constrained")
    for axes, delivery in zip(figure.subplots(1, 2), (ONLINE, FLUSHED), strict=True):
        points = [row for row in cdf if row["delivery"] == delivery]
        if points:
            axes.step(
                [1000 * row["latency"] for row in points],
                [row["percent"] for row in points],
                where="post",
            )
        else:
            _no_data(axes)
        axes.set_ylim(0, 101)
        axes.set_xlabel("latency (ms)")
        axes.set_ylabel("deliveries (%)")
        axes.set_title(f"{delivery} deliveries")
        axes.grid(alpha=0.3)
    _save(figure, path)


def plot_traffic(over_time: list[Row], path: Path) -> None:
    figure, axes = _figure()
    if over_time:
        start = over_time[0]["bucket_start"]
        span = over_time[-1]["bucket_start"] - start
        unit, name = _time_unit(span)
        # Each step holds its value over its bucket; the last bucket ends one size later.
        ends = [row["bucket_start"] for row in over_time] + [
            over_time[-1]["bucket_start"] + over_time[-1]["bucket_seconds"]
        ]
        xs = [(t - start) / unit for t in ends]
        messages = [row["messages_per_second"] for row in over_time]
        axes.step(xs, [*messages, messages[-1]], where="post", color="tab:blue")
        axes.set_xlabel(f"time since {_time(start)} ({name})")
        axes.set_ylabel("messages/s", color="tab:blue")
        rates = axes.twinx()
        volume = [row["bytes_per_second"] for row in over_time]
        rates.step(xs, [*volume, volume[-1]], where="post", color="tab:orange")
        rates.set_ylabel("bytes/s", color="tab:orange")
    else:
        _no_data(axes)
    axes.set_title("Super-peer messages per second (mean per time bucket)")
    _save(figure, path)


def plot_trees(edges: list[Row], path: Path) -> None:
    """One panel per drawn origin: super-peers in columns by depth, each below its parent's
    place (its busiest parent's, if the tree changed), each edge as wide as its share of that
    origin's busiest edge."""
    origins = sorted({row["origin"] for row in edges}, key=lambda o: (o is None, o))
    columns = min(2, max(1, len(origins)))
    rows = max(1, math.ceil(len(origins) / columns))
    figure = Figure(figsize=(6 * columns, 4.5 * rows), layout="constrained")
    panels = figure.subplots(rows, columns, squeeze=False).flatten()
    if not origins:
        _no_data(panels[0])
    for axes in panels[len(origins) :]:
        axes.set_axis_off()
    for axes, origin in zip(panels, origins, strict=False):
        mine = [row for row in edges if row["origin"] == origin and row["neighbour"] is not None]
        place = _tree_layout(str(origin), mine)
        widest = max((row["messages"] for row in mine), default=1)
        for row in mine:
            if row["node"] in place:
                (x0, y0), (x1, y1) = place[row["node"]], place[row["neighbour"]]
                axes.plot(
                    [x0, x1],
                    [y0, y1],
                    color="tab:blue",
                    linewidth=0.3 + 4 * row["messages"] / widest,
                    alpha=0.7,
                )
        xs, ys = zip(*place.values(), strict=True)
        axes.scatter(xs, ys, s=12, color="black", zorder=3)
        axes.set_xlabel("depth (hops from the origin)")
        axes.set_yticks([])
        axes.set_title(f"origin {origin}: {len(place) - 1} super-peers reached")
    _save(figure, path)


def _tree_layout(origin: str, edges: list[Row]) -> dict[str, tuple[float, float]]:
    """(depth, height) of every super-peer of one origin's tree: a column per depth, each column
    ordered by the heights of the parents, so that edges cross as little as a simple rule can."""
    parent: dict[str, tuple[int, str, int]] = {}  # child -> (messages, parent, depth)
    for row in edges:
        best = parent.get(row["neighbour"])
        if best is None or row["messages"] > best[0]:
            parent[row["neighbour"]] = (row["messages"], row["node"], row["hops"] or 0)
    place = {origin: (0.0, 0.5)}
    for depth in sorted({d for _, _, d in parent.values()}):
        column = [c for c, (_, _, d) in parent.items() if d == depth and c not in place]
        column.sort(key=lambda c: (place.get(parent[c][1], (0.0, 0.5))[1], c))
        for index, child in enumerate(column):
            place[child] = (float(depth), (index + 1) / (len(column) + 1))
    return place


def plot_incidents(incidents: list[Row], path: Path) -> None:
    """Events per time bucket, one line per incident event."""
    figure, axes = _figure()
    events = sorted({row["event"] for row in incidents})
    if events:
        start = min(row["bucket_start"] for row in incidents)
        span = max(row["bucket_start"] for row in incidents) - start
        unit, name = _time_unit(span)
        for event in events:
            points = sorted(
                (row["bucket_start"], row["events"]) for row in incidents if row["event"] == event
            )
            axes.plot(
                [(t - start) / unit for t, _ in points],
                [n for _, n in points],
                marker="o",
                label=event,
            )
        axes.legend()
        axes.set_xlabel(f"time since {_time(start)} ({name})")
    else:
        _no_data(axes)
    axes.set_ylabel("events per bucket")
    axes.set_title("Faults and repairs over time")
    _save(figure, path)


def _time_unit(span: float) -> tuple[float, str]:
    """Hours, minutes or seconds: the unit that keeps a time axis of ``span`` seconds readable."""
    return (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")


def _figure() -> tuple[Figure, Any]:
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    return figure, figure.subplots()


def _no_data(axes: Any) -> None:
    axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)


def _save(figure: Figure, path: Path) -> None:
    figure.savefig(path, dpi=100)
