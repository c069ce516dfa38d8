"""Reading trace logs into Spark: JSON lines, or the Parquet copy for repeated analysis
(``analytics.ingest`` writes it).

A trace location is a directory (local path or any Hadoop-compatible URI: ``hdfs://``, ``s3a://``,
``file://`` ...) holding either JSON-lines files (``*.jsonl``, ``*.json``, optionally gzipped as
``*.jsonl.gz``; in subdirectories too, so logs gathered per host can stay in one folder per host) or
the Parquet copy ``analytics.ingest`` writes. Files and folders whose names start with ``_`` or ``.`` are
ignored, as Spark ignores them.

Lines are read as text and parsed with ``from_json`` against the explicit schema rather than with
Spark's JSON reader, so that every invalid line keeps its original text, including well-formed JSON
that breaks the trace rules (``{}``, an unknown event), which the JSON reader would not flag.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Final, Literal
from urllib.parse import urlparse

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from analytics.definitions import MAX_TS, TRACE_SUFFIXES, hidden, local_files
from analytics.schema import (
    INVALID_COLUMN,
    PARQUET_SCHEMA,
    RAW_SCHEMA,
    TRACE_SCHEMA,
)
from superpeer.trace import EVENTS

_TRACE_GLOB: Final = "*.{jsonl,jsonl.gz,json,json.gz}"
_JSON_OPTIONS: Final = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": INVALID_COLUMN,
    # Spark accepts 'single quotes' by default; a trace line is strict JSON.
    "allowSingleQuotes": "false",
}

Layout = Literal["json", "parquet"]


class TraceInputError(Exception):
    """The trace location cannot be analysed: missing, without trace files, or of mixed formats.

    The message names the location and says what is wrong, for the operator to read as it is."""


def is_local_path(path: str) -> bool:
    """Whether ``path`` names the local file system whatever Spark's default file system is."""
    scheme = urlparse(path).scheme
    return scheme == "file" or (scheme == "" and not path.startswith("//"))


def local_layout(path: str) -> Layout:
    """The checks ``read_traces`` makes through Hadoop, on a local path and without Spark, so the
    command line can refuse a wrong directory before it spends seconds starting a JVM."""
    local = urlparse(path).path if path.startswith("file:") else path
    if not os.path.exists(local):
        raise TraceInputError(f"{path}: no such log directory")
    return _classify([file.name for file in local_files(local)], path)


def read_traces(spark: SparkSession, path: str) -> DataFrame:
    """Every non-blank line under ``path`` as a row of ``RAW_SCHEMA``: the trace fields, and the
    original text in ``_corrupt_record`` when the line is invalid (see ``analytics.schema``).

    Reads JSON lines (plain or gzipped) or the Parquet copy, whichever ``path`` holds. Raises
    ``TraceInputError`` when ``path`` is missing or holds no trace files; runs no Spark job (files
    that hold no line are found by the analysis, ``analytics.figures.NoTraceLines``)."""
    from analytics import ingest  # the copy's module builds on this one's parsing

    if ingest.recorded(spark, path):
        return ingest.read_copy(spark, path)
    if _hadoop_layout(spark, path) == "parquet":
        stored = spark.read.schema(PARQUET_SCHEMA).parquet(path)
        # Rows written invalid keep their text; a row that breaks the rules without one (a Parquet
        # copy edited by other tools) is shown as the JSON of its fields.
        fallback = F.to_json(F.struct(*[F.col(f.name) for f in TRACE_SCHEMA.fields]))
        raw = _mark_invalid(stored, F.coalesce(F.col(INVALID_COLUMN), fallback))
    else:
        raw = _read_lines(spark, path)
    return raw


def input_bytes(spark: SparkSession, path: str) -> int:
    """The bytes under ``path`` (any Hadoop URI), to size the job by."""
    fs, where = hadoop_path(spark, path)
    return int(fs.getContentSummary(where).getLength())


def _read_lines(spark: SparkSession, path: str) -> DataFrame:
    lines = (
        spark.read.option("recursiveFileLookup", "true")
        .option("pathGlobFilter", _TRACE_GLOB)
        .text(path)
    )
    return parse_lines(lines)


def parse_lines(lines: DataFrame) -> DataFrame:
    """``RAW_SCHEMA`` rows of the non-blank lines of a ``value`` column."""
    value = F.col("value")
    # A trace line starts with "{"; only others can be blank, and need the regular expression.
    blank = F.when(value.startswith("{"), F.lit(False)).otherwise(value.rlike(r"^\s*$"))
    parsed = (
        lines.where(~blank)
        .select(F.from_json("value", RAW_SCHEMA, _JSON_OPTIONS).alias("record"), F.col("value"))
        .select("record.*", "value")
    )
    return _mark_invalid(parsed, F.col("value"))


def _mark_invalid(parsed: DataFrame, line: Column) -> DataFrame:
    valid = (
        F.col(INVALID_COLUMN).isNull()
        & ts_in_range()
        & F.col("node").isNotNull()
        & F.col("event").isin(*EVENTS)
        & F.col("kind").isNotNull()
    )
    columns = [
        F.coalesce(F.col("bytes"), F.lit(0)).alias("bytes") if f.name == "bytes" else F.col(f.name)
        for f in TRACE_SCHEMA.fields
    ]
    return parsed.select(
        *columns,
        F.when(F.coalesce(valid, F.lit(False)), None).otherwise(line).alias(INVALID_COLUMN),
    )


def ts_in_range() -> Column:
    """``ts`` is a number of seconds in ``[0, MAX_TS)`` (not null, not NaN)."""
    ts = F.col("ts")
    return ts.isNotNull() & ~F.isnan(ts) & (ts >= 0) & (ts < MAX_TS)


def _hadoop_layout(spark: SparkSession, path: str) -> Layout:
    """``local_layout`` through Hadoop's FileSystem API, for any URI Spark can read."""
    fs, where = hadoop_path(spark, path)
    if not fs.exists(where):
        raise TraceInputError(f"{path}: no such log directory")
    if fs.getFileStatus(where).isFile():
        return _classify([where.getName()], path)
    names: list[str] = []
    files = fs.listFiles(where, True)
    while files.hasNext():
        status = files.next()
        relative = str(status.getPath().toUri().getPath())[
            len(str(fs.makeQualified(where).toUri().getPath())) :
        ]
        if not any(hidden(part) for part in relative.split("/") if part):
            names.append(relative)
    return _classify(names, path)


def hadoop_path(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """The Hadoop FileSystem of ``path`` and the Hadoop Path (JVM objects)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]
    return fs, hadoop_path


def _classify(names: Iterable[str], path: str) -> Layout:
    names = list(names)
    traces = any(name.endswith(TRACE_SUFFIXES) for name in names)
    parquet = any(name.endswith(".parquet") for name in names)
    if traces and parquet:
        raise TraceInputError(
            f"{path}: holds both JSON-lines traces and Parquet files; point at one of them"
        )
    if parquet:
        return "parquet"
    if traces:
        return "json"
    raise TraceInputError(
        f"{path}: no trace files (*.jsonl, *.jsonl.gz, *.json, *.json.gz or a Parquet copy)"
    )
