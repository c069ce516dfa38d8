"""The SparkSession for the analysis: local mode on one machine by default, unchanged under
``spark-submit`` on a cluster, and a clear error before the JVM starts when Java is missing or
too old (PySpark's own failure is a Py4J traceback that names neither).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import pyspark
from pyspark.sql import SparkSession

MINIMUM_JAVA: Final = 17 if int(pyspark.__version__.split(".")[0]) >= 4 else 8
"""Spark 4 runs on Java 17 or newer; Spark 3.5 still ran on Java 8."""

SHUFFLE_INPUT_BYTES: Final = 256 * 1024 * 1024
"""Trace bytes per shuffle partition. The large shuffles (deliveries, subscription routes) carry
a fraction of the input's columns and rows, so 256 MiB of JSON gives partitions of a few tens of
MiB; adaptive execution merges the small ones of the small shuffles."""

CODEGEN_CACHE: Final = 1000
"""Classes of generated code Spark keeps compiled (its default is 100). One analysis has 26
stages, each with its whole-stage code and more generated classes beside; when they do not all
stay compiled, the next analysis in the session compiles them again, and the JIT them after it. A
repeated analysis of 10^6 events spent 12.2 CPU s in the JIT compiler's threads with 100, 8.5 s
with 2,000 (one sample each, load 8)."""

LOCAL_DRIVER_MEMORY: Final = "4g"
"""Local mode runs everything in the driver JVM, whose default heap (1 GiB) is too small to cache
the events of a few million trace lines."""


class JavaRuntimeError(RuntimeError):
    """No usable Java runtime for Spark: none found, or one too old. The message says which."""


def java_major_version(version_output: str) -> int:
    """The major version in the output of ``java -version``: ``"1.8.0_392"`` is 8, ``"17.0.9"``
    is 17, ``"21"`` and ``"21-ea"`` are 21."""
    match = re.search(r'version "([^"]+)"', version_output)
    if match is None:
        raise JavaRuntimeError(f"cannot read the Java version from: {version_output.strip()!r}")
    parts = re.findall(r"\d+", match.group(1))
    if not parts:
        raise JavaRuntimeError(f"cannot read the Java version from: {match.group(1)!r}")
    if parts[0] == "1" and len(parts) > 1:
        return int(parts[1])
    return int(parts[0])


def find_java() -> str | None:
    """The ``java`` Spark would start: ``$JAVA_HOME/bin/java`` if set, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def check_java(java: str | None = None, minimum: int = MINIMUM_JAVA) -> int:
    """The major version of ``java`` (by default ``find_java()``), or ``JavaRuntimeError`` if there
    is none or it is older than ``minimum``."""
    java = java or find_java()
    if java is None:
        where = "JAVA_HOME/bin/java" if os.environ.get("JAVA_HOME") else "PATH"
        raise JavaRuntimeError(
            f"no Java runtime found (looked in {where}): Spark {pyspark.__version__} needs Java "
            f"{minimum} or newer; install one or set JAVA_HOME"
        )
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except OSError as error:
        raise JavaRuntimeError(f"cannot run {java}: {error}") from error
    version = java_major_version(result.stderr + result.stdout)
    if version < minimum:
        raise JavaRuntimeError(
            f"Java {version} at {java} is too old: Spark {pyspark.__version__} needs Java "
            f"{minimum} or newer; install one or point JAVA_HOME at it"
        )
    return version


def under_spark_submit() -> bool:
    """Whether ``spark-submit`` started this Python: then its JVM is already running and its
    options (master, memory, ...) are the ones to keep."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def local_mode(master: str | None) -> bool:
    """Whether ``open_spark_session(master)`` starts Spark in local mode here: a ``local`` master
    (the default), and not under ``spark-submit``, whose master stands."""
    return (master or "local").startswith("local") and not under_spark_submit()


@contextmanager
def open_spark_session(
    master: str | None = None,
    *,
    app_name: str = "hypercup-analyze",
    progress: bool = False,
    log_level: str = "WARN",
    driver_memory: str | None = None,
    executor_memory: str | None = None,
    ui: bool = False,
) -> Iterator[SparkSession]:
    """A SparkSession, stopped on exit if this call started it.

    An active session (a test suite's, a notebook's) is used as it is and left running. Otherwise:
    under ``spark-submit`` its master and resources stand; elsewhere ``master`` (default
    ``local[*]``) and, in local mode, no web UI, the driver memory above, and the driver on
    127.0.0.1 (it talks to nobody else); on a cluster,
    ``executor_memory`` if given; ``tune_for_input`` tunes it once the input's size is known.
    ``progress`` shows Spark's console progress bar; ``ui`` keeps the web UI (and its REST API,
    which the benchmark reads) in local mode, on 127.0.0.1. Times are UTC, so dates (the
    Parquet partitions) do not depend on where the job runs."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "true" if progress else "false")
        .config("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE))
    )
    submitted = under_spark_submit()
    if not submitted:
        check_java()
    if master is not None or not submitted:
        builder = builder.master(master or "local[*]")
    if local_mode(master):
        builder = (
            builder.config("spark.ui.enabled", "true" if ui else "false")
            .config("spark.driver.memory", driver_memory or LOCAL_DRIVER_MEMORY)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
    else:
        if driver_memory is not None:
            builder = builder.config("spark.driver.memory", driver_memory)
        if executor_memory is not None:
            builder = builder.config("spark.executor.memory", executor_memory)
    spark = builder.getOrCreate()
    configure_logging(spark, log_level)
    try:
        yield spark
    finally:
        spark.stop()


def tune_for_input(spark: SparkSession, input_bytes: int) -> int:
    """Tune the session for ``input_bytes`` of traces; return the number of shuffle partitions.

    Shuffle partitions: one per ``SHUFFLE_INPUT_BYTES``, and at least two per core, so every core
    has work (Spark's default of 200 is for large clusters: on a small input each partition
    costs a task of its own in every shuffle). Adaptive query execution off: it plans each
    shuffle stage once the one before has finished, which serialises the report's many small
    queries that otherwise run side by side (the report of 5,000 events took 20 s with it and 12
    s without on 2 cores, and 10^6 events the same time either way); what it would adapt is
    chosen here instead (partitions by input size, broadcasts by count in ``analyze``). Settings
    made explicitly (``spark-submit --conf``) stand."""
    configured = spark.sparkContext.getConf()
    if not configured.contains("spark.sql.adaptive.enabled"):
        spark.conf.set("spark.sql.adaptive.enabled", "false")
    if configured.contains("spark.sql.shuffle.partitions"):
        return int(spark.conf.get("spark.sql.shuffle.partitions") or 0)
    partitions = max(
        2 * spark.sparkContext.defaultParallelism, math.ceil(input_bytes / SHUFFLE_INPUT_BYTES)
    )
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    return partitions


ROW_BYTES_PER_TRACE_BYTE: Final = 0.5
"""Memory the events take kept as rows, per byte of JSON lines (measured: 10^7 events, 2.0 GB of
JSON, took 0.46 GB by Spark's estimate and 1.0 GB more of the driver's heap)."""


def rows_fit(spark: SparkSession, input_bytes: int) -> bool:
    """Whether the events of ``input_bytes`` of traces, kept as rows, take at most half of the
    memory Spark can store blocks in (the other half is left to the intermediates and to
    execution); if not, ``analytics.figures.analyze`` keeps them as compressed columns, which
    take about a fifth of that and cost more time to build."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()  # type: ignore[union-attr]
    storage = sum(info.totalOnHeapStorageMemory() for info in infos)
    return input_bytes * ROW_BYTES_PER_TRACE_BYTE <= storage / 2


def configure_logging(spark: SparkSession, log_level: str = "WARN") -> None:
    """Spark's log level, without its "No Partition Defined for Window operation" warning.

    The load curve and the Gini coefficient rank the super-peers with a window over the whole
    load table, which has one row per super-peer: one partition is what that needs, and the
    warning (written again for every plan that contains such a window) would bury the progress
    bar. Spark drops constant partition keys, so the window cannot be written to avoid it; this
    silences that one logger and nothing else."""
    spark.sparkContext.setLogLevel(log_level)
    jvm = spark._jvm  # type: ignore[attr-defined]
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.execution.window.WindowExec", jvm.org.apache.logging.log4j.Level.ERROR
    )
