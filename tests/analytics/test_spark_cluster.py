"""A Spark standalone cluster on 127.0.0.1: ``deploy/spark-cluster.sh start`` (a master and two
workers from the installed PySpark, with their web UIs), ``hypercup-analyze --master spark://...``
there, every table equal to the local analysis of the same traces, ``stop``. The cluster is
stopped whatever happens, and no process of it is left behind.

The analysis runs in its own process (a driver JVM of its own, as a user would run it); the
local analysis is the test session's. ``SPARK_LOCAL_IP`` keeps the driver on 127.0.0.1 too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from analytics.figures import analyze
from analytics.load import read_traces
from analytics.tables import TABLES
from deploy.cluster import free_ports
from deploy.spark_cluster import STATE_FILE, ClusterState, group_alive, master_state

pytestmark = [pytest.mark.process, pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "spark-cluster.sh"


def environment() -> dict[str, str]:
    """This Python, everything on 127.0.0.1, and nothing of the test session's Spark."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")},
        "PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[ClusterState, int]]:
    """A running cluster (its recorded state and the master's web UI port), stopped afterwards:
    ``stop`` ends whatever ``start`` recorded, even if ``start`` itself failed half-way."""
    run = tmp_path / "spark"
    port, webui = free_ports(2)
    try:
        started = subprocess.run(
            ["bash", str(SCRIPT), "start", "--dir", str(run), "--port", str(port),
             "--webui-port", str(webui), "--memory", "1g"],
            env=environment(), capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert started.returncode == 0, started.stderr[-3000:]
        state = ClusterState.from_json((run / STATE_FILE).read_text())
        yield state, webui
    finally:
        recorded = (run / STATE_FILE).read_text() if (run / STATE_FILE).exists() else None
        stopped = subprocess.run(
            ["bash", str(SCRIPT), "stop", "--dir", str(run)],
            env=environment(), capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert stopped.returncode == 0, stopped.stderr
        if recorded is not None:
            left = ClusterState.from_json(recorded)
            assert not any(group_alive(d.pid) for d in (left.master, *left.workers))


def test_analysis_on_the_standalone_cluster_equals_local_mode(
    spark: SparkSession, traces: Path, standalone: tuple[ClusterState, int], tmp_path: Path
) -> None:
    state, webui = standalone
    assert [w["state"] for w in master_state(webui)["workers"]] == ["ALIVE", "ALIVE"]
    for daemon in (state.master, *state.workers):
        with urllib.request.urlopen(daemon.webui, timeout=10) as page:
            assert page.status == 200 and b"Spark" in page.read()

    out = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "analytics.cli", str(traces), "--out", str(out),
         "--master", state.master_url, "--no-progress"],
        env=environment(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    [application] = master_state(webui)["completedapps"]
    assert application["name"] == "hypercup-analyze"
    assert application["cores"] == 2  # one executor on each worker

    local = analyze(read_traces(spark, str(traces)))
    try:
        for name in TABLES:
            written = spark.read.parquet(str(out / "tables" / f"{name}.parquet"))
            assertDataFrameEqual(
                written, local.collect(name), checkRowOrder=True, rtol=0.0, atol=0.0
            )
    finally:
        local.unpersist()
