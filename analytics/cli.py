"""``hypercup-analyze LOGDIR --out REPORTDIR [--master local[*]] [--parquet]``

Exit codes: 0 the report is written; 2 an error the operator can fix (a missing log directory,
one without trace files or with empty ones only, no usable Java), told in one line on stderr; anything else is a bug and shows its
traceback.
"""

from __future__ import annotations

import argparse
import sys
import time

from analytics.ingest import append_parquet
from analytics.load import (
    TraceInputError,
    input_bytes,
    is_local_path,
    local_layout,
    read_traces,
)
from analytics.session import (
    JavaRuntimeError,
    local_mode,
    open_spark_session,
    rows_fit,
    tune_for_input,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hypercup-analyze",
        description="Traffic analytics of super-peer trace logs on Apache Spark: writes a report "
        "(report.md, report.html, PNG plots, tables as Parquet and CSV).",
    )
    parser.add_argument(
        "logdir",
        metavar="LOGDIR",
        help="trace logs: a directory (or URI) of *.jsonl / *.jsonl.gz files, or a Parquet copy",
    )
    parser.add_argument("--out", required=True, metavar="REPORTDIR", help="report directory")
    parser.add_argument(
        "--master",
        help="Spark master URL (default local[*]; under spark-submit, spark-submit's)",
    )
    parser.add_argument(
        "--parquet",
        action="store_true",
        help="first append the log files not copied yet to a Parquet copy partitioned by date and "
        "node (REPORTDIR/events, or --parquet-dir), then analyse the copy; later runs with the "
        "same copy parse only the files that arrived since (recorded in COPY/_ingested)",
    )
    parser.add_argument(
        "--parquet-dir", metavar="URI", help="where --parquet writes the copy (implies --parquet)"
    )
    parser.add_argument(
        "--warehouse",
        metavar="URI",
        help="where Spark writes the tables (default REPORTDIR); on a cluster, shared storage "
        "such as hdfs:// or s3a://",
    )
    parser.add_argument(
        "--driver-memory", metavar="SIZE", help="driver heap (default 4g in local mode)"
    )
    parser.add_argument(
        "--executor-memory", metavar="SIZE", help="executor heap on a cluster (Spark's default 1g)"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide Spark's progress bar")
    args = parser.parse_args(argv)
    parquet_dir = args.parquet_dir or (f"{args.out}/events" if args.parquet else None)
    if parquet_dir is not None and parquet_dir.rstrip("/") == args.logdir.rstrip("/"):
        return _fail("--parquet-dir must differ from LOGDIR: the copy is made from LOGDIR")
    started = time.perf_counter()
    try:
        if local_mode(args.master) and is_local_path(args.logdir):
            local_layout(args.logdir)
        with open_spark_session(
            args.master,
            progress=not args.no_progress,
            driver_memory=args.driver_memory,
            executor_memory=args.executor_memory,
        ) as spark:
            from analytics.report import build_report

            raw = read_traces(spark, args.logdir)
            size = input_bytes(spark, args.logdir)
            tune_for_input(spark, size)
            keep = "rows" if rows_fit(spark, size) else "columns"
            if parquet_dir is not None:
                _step(f"appending the new files of {args.logdir} to the Parquet copy {parquet_dir}")
                done = append_parquet(spark, args.logdir, parquet_dir)
                _step(
                    f"{len(done.added)} new files appended, {done.known} were in the copy already"
                    + (
                        f", {len(done.removed)} unrecorded Parquet files removed"
                        * bool(done.removed)
                    )
                )
                raw = read_traces(spark, parquet_dir)
                keep = "none"  # each pass reads the columns it needs from Parquet
            _step(f"analysing {parquet_dir or args.logdir}")
            summary = build_report(
                raw,
                args.out,
                warehouse=args.warehouse,
                source=parquet_dir or args.logdir,
                keep=keep,
            )
    except (TraceInputError, JavaRuntimeError) as error:
        return _fail(str(error))
    invalid = f", {summary.invalid} invalid lines (see the report)" if summary.invalid else ""
    print(
        f"report written to {summary.directory}/report.html: {summary.events} events{invalid}, "
        f"{time.perf_counter() - started:.1f} s"
    )
    return 0


def _step(text: str) -> None:
    print(f"hypercup-analyze: {text}", file=sys.stderr, flush=True)


def _fail(text: str) -> int:
    print(f"hypercup-analyze: error: {text}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
