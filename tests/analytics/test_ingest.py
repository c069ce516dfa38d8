"""The Parquet copy (``analytics.ingest``): trace files appended as they arrive, each at most
once, with a record of which went in; its analysis equals the analysis of the JSON lines."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analytics.ingest import RECORD, append_parquet, parquet_files, read_records
from analytics.load import TraceInputError, read_traces

from .test_figures import assert_same_figures, collect_all, expected_tables

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def expected(traces: Path) -> dict[str, list[tuple[Any, ...]]]:
    return expected_tables(traces)


def test_the_copy_gives_the_figures_of_the_logs(
    spark: SparkSession, corrupt_traces: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "events"
    done = append_parquet(spark, str(corrupt_traces), str(copy))
    assert done.batch == 0 and done.known == 0
    assert len(done.added) == len(list(corrupt_traces.iterdir()))
    partitions = sorted(p.relative_to(copy).as_posix() for p in copy.glob("date=*/*"))
    assert "date=2026-01-01/node=sp0" in partitions
    assert "date=2026-01-01/node=sp15" in partitions
    # Invalid lines without a time or a node go along, under Hive's null partition.
    assert any(p.startswith("date=__HIVE_DEFAULT_PARTITION__") for p in partitions)
    assert_same_figures(
        collect_all(read_traces(spark, str(copy)), keep="none"), expected_tables(corrupt_traces)
    )


def ship(source: Path, logs: Path, names: list[str]) -> None:
    """Each trace file of ``source`` as a daemon rotates it, shipped as ``collect_traces`` does:
    its first half rotated and gzipped (``<node>-1.jsonl.gz``), the rest the current file;
    only the files named (by their shipped names) are shipped."""
    for file in sorted(source.iterdir()):
        node = file.name.removesuffix(".jsonl")
        lines = file.read_text(encoding="utf-8").splitlines(keepends=True)
        half = len(lines) // 2
        for name, part in ((f"{node}-1.jsonl.gz", lines[:half]), (f"{node}.jsonl", lines[half:])):
            if name in names:
                target = logs / "host" / name
                target.parent.mkdir(parents=True, exist_ok=True)
                data = "".join(part).encode()
                target.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)


def test_the_copy_appends_only_the_files_that_arrived(
    spark: SparkSession, traces: Path, expected: dict[str, list[tuple]], tmp_path: Path
) -> None:
    """Logs shipped in two rounds (rotated gzipped files first, the current files of half the
    super-peers, then the others), a run after each and one more with nothing new: each file is
    parsed once, the records say which and when, and the copy holds every line once."""
    logs, copy = tmp_path / "logs", tmp_path / "events"
    nodes = sorted(f.name.removesuffix(".jsonl") for f in traces.iterdir())
    first = [f"{n}-1.jsonl.gz" for n in nodes] + [f"{n}.jsonl" for n in nodes[::2]]
    second = [f"{n}.jsonl" for n in nodes[1::2]]
    rounds = []
    for shipped in (first, second, []):
        ship(traces, logs, shipped)
        rounds.append(append_parquet(spark, str(logs), str(copy)))
    assert [r.batch for r in rounds] == [0, 1, None]
    assert [len(r.added) for r in rounds] == [len(first), len(second), 0]
    assert [r.known for r in rounds] == [0, len(first), len(first) + len(second)]
    assert sorted(Path(f.path).name for f in rounds[1].added) == sorted(second)
    for added in rounds[1].added:  # recorded as found: size and modification time
        stat = (logs / "host" / Path(added.path).name).stat()
        assert (added.size, added.mtime) == (stat.st_size, int(stat.st_mtime * 1000))
    records = read_records(spark, str(copy))
    assert set(records.files) == {f.path for r in rounds for f in r.added}
    assert sorted(records.data) == sorted(parquet_files(spark, str(copy)))
    assert [
        json.loads(p.read_text())["batch"] for p in sorted((copy / RECORD).glob("batch-*.json"))
    ] == [0, 1]
    raw = read_traces(spark, str(copy))
    assert raw.count() == expected["quality"][0][0]
    assert_same_figures(collect_all(raw, keep="none"), expected)


def test_a_file_that_changed_is_refused_and_nothing_is_appended(
    spark: SparkSession, traces: Path, tmp_path: Path
) -> None:
    logs, copy = tmp_path / "logs", tmp_path / "events"
    shutil.copytree(traces, logs)
    append_parquet(spark, str(logs), str(copy))
    touched = logs / "sp1.jsonl"
    os.utime(touched, (1, 1))  # a new modification time alone: the same file
    assert append_parquet(spark, str(logs), str(copy)).added == ()
    with touched.open("a", encoding="utf-8") as handle:
        handle.write(touched.read_text(encoding="utf-8").splitlines()[0] + "\n")
    (logs / "sp99.jsonl").write_text((logs / "sp2.jsonl").read_text())  # a new file too
    before = sorted(parquet_files(spark, str(copy)))
    with pytest.raises(TraceInputError, match=r"1 trace files changed .*sp1\.jsonl \(\d+ bytes"):
        append_parquet(spark, str(logs), str(copy))
    assert sorted(parquet_files(spark, str(copy))) == before
    assert read_records(spark, str(copy)).batches == 1


def test_parquet_files_no_record_names_are_never_read_and_then_removed(
    spark: SparkSession, traces: Path, tmp_path: Path
) -> None:
    """What a run that failed between its Spark job and its record leaves: Parquet files no
    record names. Readers do not see them; the next run deletes them."""
    logs, copy = tmp_path / "logs", tmp_path / "events"
    shutil.copytree(traces, logs)
    append_parquet(spark, str(logs), str(copy))
    lines = read_traces(spark, str(copy)).count()
    [kept, *_] = sorted(copy.glob("date=*/node=sp0/*.parquet"))
    stray = kept.with_name("part-99999-unrecorded.c000.snappy.parquet")
    shutil.copy(kept, stray)
    assert read_traces(spark, str(copy)).count() == lines
    done = append_parquet(spark, str(logs), str(copy))
    assert done.removed == (stray.relative_to(copy).as_posix(),) and not stray.exists()


def test_a_copy_of_the_earlier_file_stream_is_refused(
    spark: SparkSession, traces: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "events"
    (copy / "_checkpoint").mkdir(parents=True)
    with pytest.raises(TraceInputError, match="earlier hypercup-analyze"):
        append_parquet(spark, str(traces), str(copy))
