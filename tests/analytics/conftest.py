"""One Spark session for the whole run, and simulator traces to analyse.

Starting a JVM costs seconds, so every Spark test shares the session-scoped ``spark`` fixture
(the command-line tests run ``main`` in-process, where ``open_spark_session`` picks it up). The
settings suit tiny inputs, where a query's time goes to planning and scheduling, not to data: one
shuffle partition, no adaptive re-planning, and no whole-stage code generation (compiling the
generated Java costs more than it saves on a few thousand rows; the results are the same, and the
``spark-submit`` test and the benchmark run with it). The driver listens on 127.0.0.1 only.
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from superpeer.core import CoreConfig
from superpeer.sim import Simulation
from superpeer.sim.generate import generate

WORKLOAD = {
    "superpeers": 16,
    "peers": 40,
    "subscriptions": 200,
    "publications": 100,
    "seed": 1,
    "churn": 0.1,
}
"""Small, with churn: some peers are detached when notifications arrive, so ``offline`` and
``flush`` events exist."""

GARBAGE = (
    "not json at all",
    '{"ts": 1767225601.5, "node": "sp3"',
    '{"ts": "yesterday", "node": "sp3", "event": "send", "kind": "sp.forward"}',
    "{}",
    "[1, 2]",
    '{"ts": 1767225601.5, "node": "sp3", "event": "teleport", "kind": "sp.forward"}',
    '{"ts": 1767225601.5, "node": "sp3", "event": "send", "kind": "sp.forward", "bytes": 1.5}',
    '{"ts": NaN, "node": "sp3", "event": "send", "kind": "sp.forward"}',
    '{"ts": -1.0, "node": "sp3", "event": "send", "kind": "sp.forward"}',
    '{"ts": 1767225601.5, "event": "send", "kind": "sp.forward"}',
)
"""Lines a broken writer could leave behind: none is valid, each for its own reason."""


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tests-analytics")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulator's traces of ``WORKLOAD``: one ``sp<k>.jsonl`` per super-peer."""
    directory = tmp_path_factory.mktemp("traces")
    simulate(directory).close()
    return directory


def simulate(trace_dir: Path | None = None) -> Simulation:
    """``WORKLOAD`` run in the simulator. Routing changes settle in 0.1 s (plenty at 2 ms per
    hop): the cube is built in under 2 simulated seconds, so the traces span a few seconds."""
    simulation = Simulation(
        WORKLOAD["superpeers"], trace_dir=trace_dir, config=CoreConfig(settle_seconds=0.1)
    )
    for op in generate(**WORKLOAD):
        simulation.apply(op)
    return simulation


@pytest.fixture(scope="session")
def corrupt_traces(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``traces`` with ``GARBAGE`` lines and blank lines spread over two files."""
    directory = tmp_path_factory.mktemp("corrupt")
    for file in traces.iterdir():
        shutil.copy(file, directory / file.name)
    with (directory / "sp0.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("\n".join(GARBAGE[:5]) + "\n\n   \n")
    with (directory / "sp7.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("\n" + "\n".join(GARBAGE[5:]) + "\n")
    return directory


@pytest.fixture(scope="session")
def gzip_traces(traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``traces`` gzipped (``sp<k>.jsonl.gz``) in one folder per host, as logs gathered from
    several hosts would be, beside files a reader must skip: hidden ones (``.``, ``_``) and
    others that are not traces."""
    directory = tmp_path_factory.mktemp("gzip")
    for number, file in enumerate(sorted(traces.iterdir())):
        target = directory / ("host-b" if number % 2 else "host-a") / (file.name + ".gz")
        target.parent.mkdir(exist_ok=True)
        with file.open("rb") as source, gzip.open(target, "wb") as sink:
            shutil.copyfileobj(source, sink)
    (directory / ".sp0.jsonl.crc").write_text("hidden: not read\n")
    (directory / "_temporary.jsonl").write_text("hidden: not read\n")
    (directory / "host-a" / "notes.txt").write_text("not a trace file: not read\n")
    return directory
