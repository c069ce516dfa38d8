"""``hypercup-analyze``: clear errors with exit code 2, and a report that renders.

``main`` runs in this process; with the session-scoped ``spark`` fixture active it uses that
session instead of starting another JVM.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PIL import Image
from pyspark.sql import SparkSession

from analytics.cli import main

from .conftest import WORKLOAD, simulate

SECTION_HEADINGS = (
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
PLOTS = (
    "load_curve.png",
    "hops.png",
    "latency_cdf.png",
    "traffic.png",
    "trees.png",
    "incidents.png",
)
TABLES = (
    "quality",
    "invalid_examples",
    "overview",
    "kinds",
    "superpeers",
    "links",
    "load_curve",
    "load_gini",
    "hops",
    "latency_summary",
    "latency_cdf",
    "latency_over_time",
    "deliveries",
    "duplicates",
    "forwarding",
    "forwarding_total",
    "subscriptions",
    "tree_edges",
    "tree_shape",
    "traffic_per_second",
    "traffic_over_time",
    "incidents_over_time",
)


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The error ``main`` ends with: one line, the last on stderr (after the steps it began, if
    the error was found in the analysis)."""
    assert main(list(argv)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line for line in lines if ": error: " in line] == lines[-1:], lines
    assert all(line.startswith("hypercup-analyze: ") for line in lines), lines
    return lines[-1] + "\n"


# -- errors ---------------------------------------------------------------------------------------
def test_missing_log_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    err = error_of(capsys, str(missing), "--out", str(tmp_path / "report"))
    assert err == f"hypercup-analyze: error: {missing}: no such log directory\n"


def test_log_directory_without_trace_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "README.txt").write_text("not a trace\n")
    err = error_of(capsys, str(tmp_path / "logs"), "--out", str(tmp_path / "report"))
    assert "logs: no trace files (*.jsonl" in err


@pytest.mark.slow
@pytest.mark.spark
def test_trace_files_without_lines(
    spark: SparkSession, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "sp0.jsonl").write_text("")
    (tmp_path / "logs" / "sp1.jsonl").write_text("\n  \n")
    err = error_of(capsys, str(tmp_path / "logs"), "--out", str(tmp_path / "report"))
    assert err.endswith("logs: the trace files hold no lines\n")


def test_json_and_parquet_mixed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "sp0.jsonl").write_text("{}\n")
    (tmp_path / "logs" / "part-0.parquet").write_bytes(b"PAR1")
    err = error_of(capsys, str(tmp_path / "logs"), "--out", str(tmp_path / "report"))
    assert "both JSON-lines traces and Parquet files" in err


def test_parquet_copy_may_not_replace_the_logs(
    capsys: pytest.CaptureFixture[str], traces: Path, tmp_path: Path
) -> None:
    err = error_of(
        capsys, str(traces), "--out", str(tmp_path / "r"), "--parquet-dir", str(traces) + "/"
    )
    assert "--parquet-dir must differ from LOGDIR" in err


# -- the report -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report(spark: SparkSession, traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One full run: copy to Parquet, then analyse the copy and write the report."""
    out = tmp_path_factory.mktemp("report")
    assert main([str(traces), "--out", str(out), "--parquet", "--no-progress"]) == 0
    return out


@pytest.mark.slow
@pytest.mark.spark
def test_report_files_exist(report: Path) -> None:
    for name in ("report.md", "report.html", *PLOTS):
        assert (report / name).stat().st_size > 0, name
    for table in TABLES:
        for suffix in ("parquet", "csv"):
            folder = report / "tables" / f"{table}.{suffix}"
            assert len(list(folder.glob(f"part-*.{suffix}"))) == 1, folder


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("plot", PLOTS)
def test_plots_are_png_images(report: Path, plot: str) -> None:
    path = report / plot
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
        assert image.format == "PNG"
        assert image.size[0] >= 600 and image.size[1] >= 400


@pytest.mark.slow
@pytest.mark.spark
def test_html_names_every_section_and_shows_every_plot(report: Path) -> None:
    page = (report / "report.html").read_text(encoding="utf-8")
    for heading in SECTION_HEADINGS:
        assert f"<h2>{heading}</h2>" in page, heading
    for plot in PLOTS:
        assert f'<img src="{plot}"' in page, plot


@pytest.mark.slow
@pytest.mark.spark
def test_markdown_names_every_section_and_links_every_plot(report: Path) -> None:
    text = (report / "report.md").read_text(encoding="utf-8")
    for heading in SECTION_HEADINGS:
        assert f"\n## {heading}\n" in text, heading
    for plot in PLOTS:
        assert f"]({plot})" in text, plot
    assert "| duplicate deliveries (peer, publication); must be 0 | 0 |" in text


@pytest.mark.slow
@pytest.mark.spark
def test_parquet_copy_is_partitioned_by_date_and_node(report: Path) -> None:
    partitions = {
        p.relative_to(report / "events").as_posix() for p in (report / "events").glob("date=*/*")
    }
    assert partitions == {f"date=2026-01-01/node=sp{k}" for k in range(WORKLOAD["superpeers"])}


@pytest.mark.slow
@pytest.mark.spark
def test_tables_hold_the_simulators_own_message_counts(spark: SparkSession, report: Path) -> None:
    """The per-kind table, read back from Parquet and from CSV, against the counts the simulator
    keeps itself (acknowledgements are not traced)."""
    simulation = simulate()
    counted = {
        (kind, counts["count"], counts["bytes"])
        for kind, counts in simulation.report()["messages"].items()  # type: ignore[union-attr]
        if kind != "peer.ack"
    }
    parquet = spark.read.parquet(str(report / "tables" / "kinds.parquet")).collect()
    assert {(r.kind, r.messages, r.bytes) for r in parquet} == counted
    [part] = (report / "tables" / "kinds.csv").glob("part-*.csv")
    with part.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["kind"], int(r["messages"]), int(r["bytes"])) for r in rows} == counted
