"""The Parquet copy of the trace logs: trace files appended as they arrive, each at most once,
with a durable record of which files went in.

Repeated analysis should not parse the same JSON again and again (parsing is most of its cost):
``append_parquet`` parses each new trace file once into a Parquet table partitioned by the UTC
date of ``ts`` and by ``node``, and the analysis reads the table, only the columns it needs.

The copy::

    COPY/date=2026-01-01/node=sp0/part-...parquet     the rows, as ``read_traces`` gives them
    COPY/_ingested/batch-000000.json                   one record per run that added files

A record lists the trace files the run parsed (their qualified path, size in bytes and
modification time in ms) and the Parquet files it wrote. The rules:

- a trace file is known by its path: a path in a record is never parsed again; one whose size
  differs from its record's has changed since it was copied, which a log file shipped whole must
  not do (``deploy.collect_traces`` never changes one), and the run stops with
  ``TraceInputError`` before writing anything (a changed modification time alone is taken as a
  copy that kept the contents, as ``touch`` or a sync without times leaves);
- a run writes its Parquet files with Spark (whose job commit makes them appear together), then
  its record, under a hidden name renamed into place: the record is the commit. Readers read the
  Parquet files the records name (``data_files``), never a listing of the folders, so a run that
  failed after its Spark job and before its record adds nothing; the next run deletes the Parquet
  files no record names, then parses those trace files again;
- one run at a time per copy (as from cron): a second run at the same time could take the
  first's Parquet files for leftovers.

Durability is the file system's: HDFS and S3 keep what a closed file holds; a local file system
keeps it once the kernel has written it out (neither Spark nor this module calls ``fsync``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analytics.definitions import TRACE_SUFFIXES, hidden
from analytics.load import TraceInputError, hadoop_path, parse_lines, ts_in_range
from analytics.schema import DATE_COLUMN, PARQUET_SCHEMA, RAW_SCHEMA

RECORD: Final = "_ingested"
"""The folder of the records, inside the copy (hidden from Spark's readers by its ``_``)."""
STREAM_CHECKPOINT: Final = "_checkpoint"
"""Where the earlier version of ``--parquet`` (a Spark file stream) kept its state."""
_BATCH: Final = "batch-{:06d}.json"


@dataclass(frozen=True, slots=True)
class TraceFile:
    """A trace file as the copy records it: qualified path, bytes, modification time (ms)."""

    path: str
    size: int
    mtime: int


@dataclass(frozen=True, slots=True)
class Appended:
    """What one ``append_parquet`` did: its batch number (None when nothing was new), the trace
    files it parsed, how many it found in the records already, and the Parquet files it wrote;
    ``removed`` are Parquet files of an unrecorded run that it deleted first."""

    batch: int | None
    added: tuple[TraceFile, ...]
    known: int
    written: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Records:
    """Every record of a copy, read together."""

    files: dict[str, TraceFile]
    data: tuple[str, ...]
    batches: int


def append_parquet(spark: SparkSession, logdir: str, copy: str) -> Appended:
    """Append to the Parquet copy at ``copy`` the trace files under ``logdir`` that its records do
    not name (module docstring); the first run copies them all. Invalid lines go along with their
    text, so an analysis of the copy reports them as the analysis of the logs does."""
    fs, root = hadoop_path(spark, copy)
    if fs.exists(root.suffix(f"/{STREAM_CHECKPOINT}")) and not fs.exists(root.suffix(f"/{RECORD}")):
        raise TraceInputError(
            f"{copy}: made by an earlier hypercup-analyze (a Spark file stream, which recorded "
            "paths only); start a new copy elsewhere, or remove this one"
        )
    records = read_records(spark, copy)
    new: list[TraceFile] = []
    changed: list[str] = []
    for found in trace_files(spark, logdir):
        known = records.files.get(found.path)
        if known is None:
            new.append(found)
        elif known.size != found.size:
            changed.append(f"{found.path} ({known.size} bytes when copied, {found.size} now)")
    if changed:
        raise TraceInputError(
            f"{logdir}: {len(changed)} trace files changed since they were copied to {copy}, "
            f"and a file must not change once there; nothing was appended: {'; '.join(changed)}"
        )
    removed = _remove_unrecorded(spark, copy, records)
    if not new:
        return Appended(None, (), len(records.files), (), removed)
    lines = spark.read.text([f.path for f in new])
    dated = parse_lines(lines).withColumn(
        DATE_COLUMN, F.when(ts_in_range(), F.to_date(F.timestamp_seconds(F.col("ts"))))
    )
    dated.write.mode("append").partitionBy(DATE_COLUMN, "node").parquet(copy)
    written = tuple(sorted(set(parquet_files(spark, copy)) - set(records.data)))
    _write_record(spark, copy, records.batches, new, written)
    return Appended(records.batches, tuple(new), len(records.files), written, removed)


def trace_files(spark: SparkSession, logdir: str) -> list[TraceFile]:
    """The trace files under ``logdir`` (any Hadoop URI), skipping hidden files and folders."""
    return [
        TraceFile(str(status.getPath().toString()), status.getLen(), status.getModificationTime())
        for relative, status in _listing(spark, logdir)
        if relative.endswith(TRACE_SUFFIXES)
    ]


def parquet_files(spark: SparkSession, copy: str) -> list[str]:
    """The Parquet files under ``copy``, as paths relative to it."""
    fs, root = hadoop_path(spark, copy)
    if not fs.exists(root):
        return []
    return [relative for relative, _ in _listing(spark, copy) if relative.endswith(".parquet")]


def read_records(spark: SparkSession, copy: str) -> Records:
    """The records of the copy at ``copy`` (none yet: empty)."""
    fs, root = hadoop_path(spark, copy)
    folder = root.suffix(f"/{RECORD}")
    files: dict[str, TraceFile] = {}
    data: list[str] = []
    batches = 0
    if fs.exists(folder):
        for status in sorted(fs.listStatus(folder), key=lambda s: s.getPath().getName()):
            name = status.getPath().getName()
            if hidden(name) or not name.startswith("batch-"):
                continue
            record = json.loads(_read_text(fs, status.getPath()))
            files |= {f["path"]: TraceFile(**f) for f in record["files"]}
            data += record["data"]
            batches = max(batches, record["batch"] + 1)
    return Records(files, tuple(data), batches)


def recorded(spark: SparkSession, copy: str) -> bool:
    """Whether ``copy`` is a copy with records (so read through them)."""
    fs, root = hadoop_path(spark, copy)
    return bool(fs.exists(root.suffix(f"/{RECORD}")))


def read_copy(spark: SparkSession, copy: str) -> DataFrame:
    """The rows of the copy at ``copy`` (``RAW_SCHEMA``): the Parquet files its records name,
    as written (the lines were checked when they were parsed)."""
    data = read_records(spark, copy).data
    if not data:
        return spark.createDataFrame([], RAW_SCHEMA)
    base = copy.rstrip("/")
    stored = (
        spark.read.schema(PARQUET_SCHEMA)
        .option("basePath", base)
        .parquet(*[f"{base}/{relative}" for relative in data])
    )
    return stored.select(*RAW_SCHEMA.fieldNames())


def _remove_unrecorded(spark: SparkSession, copy: str, records: Records) -> tuple[str, ...]:
    fs, _ = hadoop_path(spark, copy)
    leftovers = sorted(set(parquet_files(spark, copy)) - set(records.data))
    for relative in leftovers:
        fs.delete(hadoop_path(spark, f"{copy.rstrip('/')}/{relative}")[1], False)
    return tuple(leftovers)


def _write_record(
    spark: SparkSession,
    copy: str,
    batch: int,
    files: Sequence[TraceFile],
    written: Sequence[str],
) -> None:
    record: dict[str, Any] = {
        "batch": batch,
        "at": datetime.now(tz=UTC).isoformat(timespec="seconds"),
        "files": [asdict(f) for f in files],
        "data": list(written),
    }
    fs, root = hadoop_path(spark, copy)
    folder = root.suffix(f"/{RECORD}")
    fs.mkdirs(folder)
    name = _BATCH.format(batch)
    partial = folder.suffix(f"/.{name}.partial")
    stream = fs.create(partial, True)
    try:
        stream.write(json.dumps(record, indent=1).encode())
        stream.hsync()
    finally:
        stream.close()
    if not fs.rename(partial, folder.suffix(f"/{name}")):
        raise TraceInputError(f"{copy}: could not commit the record {name} (is another run on?)")


def _read_text(fs: Any, path: Any) -> str:
    stream = fs.open(path)
    try:
        return bytes(stream.readAllBytes()).decode()  # Py4J hands a Java byte[] over as bytes
    finally:
        stream.close()


def _listing(spark: SparkSession, path: str) -> list[tuple[str, Any]]:
    """(path relative to ``path``, file status) of every file under ``path`` not hidden."""
    fs, root = hadoop_path(spark, path)
    if not fs.exists(root):
        raise TraceInputError(f"{path}: no such log directory")
    if fs.getFileStatus(root).isFile():
        return [(root.getName(), fs.getFileStatus(root))]
    prefix = str(fs.makeQualified(root).toUri().getPath()).rstrip("/")
    found: list[tuple[str, Any]] = []
    files = fs.listFiles(root, True)
    while files.hasNext():
        status = files.next()
        relative = str(status.getPath().toUri().getPath())[len(prefix) + 1 :]
        if not any(hidden(part) for part in relative.split("/")):
            found.append((relative, status))
    return found
