"""Gather super-peers' trace logs into one log directory, the LOGDIR the analysis reads.

    python -m deploy.collect_traces DATADIR [DATADIR ...] --to LOGDIR [--rotated-only]

A DATADIR is a super-peer's data directory (the one holding ``traces/``) or a directory of them
(a ``deploy.cluster`` directory, or ``deploy.replay --keep DIR``). Each super-peer's files go to
``LOGDIR/<its data directory's name>/`` under their own names: rotated files (closed for good,
``<node>-<n>.jsonl``) gzipped on the way, files gzipped already as they are, and the current file
(``<node>.jsonl``) plain, unless ``--rotated-only``: while a daemon runs, its current file is
still growing, so collect it only once the daemon has stopped.

Files in LOGDIR never change once there: a file already there is not copied again, and each one
appears whole (written under a hidden name, then renamed). That is what ``hypercup-analyze
--parquet`` needs to append only the files that arrived since its last run; and the order to keep
on a cluster, where the same files go to shared storage (``deploy/README-spark.md``).
"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TRACES = "traces"


@dataclass(frozen=True, slots=True)
class Collected:
    """What one ``collect`` did: the files it wrote, and those already in LOGDIR."""

    copied: tuple[Path, ...]
    present: tuple[Path, ...]


def trace_directories(sources: Iterable[Path]) -> list[Path]:
    """The ``traces/`` directories of the given data directories or of their subdirectories."""
    found: list[Path] = []
    for source in sources:
        if (source / TRACES).is_dir():
            found.append(source / TRACES)
        else:
            found += sorted(d / TRACES for d in source.iterdir() if (d / TRACES).is_dir())
    return found


def split_current(files: list[Path]) -> tuple[Path | None, list[Path]]:
    """One super-peer's trace files as (current, rotated): the current one is ``<node>.jsonl``
    when every other file is ``<node>-<n>.jsonl`` (or gzipped), which is how
    ``superpeer.tracelog`` names them; without such a file every file is a rotated one."""
    for candidate in sorted(files, key=lambda f: (len(f.name), f.name)):
        if not candidate.name.endswith(".jsonl"):
            continue
        rotated = re.compile(re.escape(candidate.name[: -len(".jsonl")]) + r"-\d+\.jsonl(\.gz)?")
        others = [f for f in files if f != candidate]
        if all(rotated.fullmatch(f.name) for f in others):
            return candidate, sorted(others)
    return None, sorted(files)


def collect(sources: Iterable[Path], logdir: Path, *, rotated_only: bool = False) -> Collected:
    """Copy the trace files of the super-peers under ``sources`` into ``logdir`` (module
    docstring)."""
    copied: list[Path] = []
    present: list[Path] = []
    for traces in trace_directories(sources):
        files = [f for f in traces.iterdir() if f.name.endswith((".jsonl", ".jsonl.gz"))]
        current, rotated = split_current(files)
        target_dir = logdir / traces.parent.name
        wanted = [(f, not f.name.endswith(".gz")) for f in rotated]
        if current is not None and not rotated_only:
            wanted.append((current, False))
        for source, compress in wanted:
            target = target_dir / (source.name + ".gz" if compress else source.name)
            if target.exists():
                present.append(target)
                continue
            target_dir.mkdir(parents=True, exist_ok=True)
            partial = target_dir / f".{target.name}.partial"
            with (
                source.open("rb") as reader,
                gzip.open(partial, "wb") if compress else partial.open("wb") as writer,
            ):
                shutil.copyfileobj(reader, writer)
            partial.rename(target)
            copied.append(target)
    return Collected(tuple(copied), tuple(present))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.collect_traces", description=__doc__.split("\n")[0]
    )
    parser.add_argument("sources", nargs="+", type=Path, metavar="DATADIR")
    parser.add_argument("--to", required=True, type=Path, metavar="LOGDIR")
    parser.add_argument(
        "--rotated-only",
        action="store_true",
        help="leave the current files (their daemons are still writing them)",
    )
    args = parser.parse_args(argv)
    missing = [str(s) for s in args.sources if not s.is_dir()]
    if missing:
        print(f"collect_traces: error: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    done = collect(args.sources, args.to, rotated_only=args.rotated_only)
    print(f"{len(done.copied)} trace files copied to {args.to}, {len(done.present)} already there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
