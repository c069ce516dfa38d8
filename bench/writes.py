"""What one notification writes to the store of a super-peer that is its origin and its
subscribers' access point (issue 37, item 1, "write once").

One super-peer in the simulator on a real ``SqliteStore`` (committed after each step, as the
daemon's group commit does at its smallest group), a publisher and ``--subscribers`` peers
attached to it, ``--publications`` publications of about a kilobyte each, every one matching
every subscription and acknowledged by every subscriber. Counted, per publication: the
statements that wrote (``SqliteStore._write``), the queries that read (``SqliteStore._read``),
the bytes their arguments carried (blobs and texts), the bytes of the redo journal's frames (a
commit is one: ``superpeer.redo``), and the pages sqlite's write-ahead log received by the end,
the store folded once more then (each fold appends every page its commits changed, once). The store's files are measured at the end too
(what is still held after the acknowledgements).

    python -m bench.writes --subscribers 1,10

Run it from a checkout's directory to measure that checkout (main's and a branch's, side by
side: the current directory comes first on ``sys.path``)."""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
from pathlib import Path

from superpeer.sim import Simulation
from superpeer.store import SqliteStore

DC = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
SUBSCRIPTION = 'SELECT ?x WHERE { ?x dc:creator ?y . FILTER (CONTAINS(?y, "Nejdl")) }'
FILLER = "x" * 900
"""A literal that makes a publication about a kilobyte, as the brokers' benchmark sends."""


class CountingStore(SqliteStore):
    """A real store (``sync = "normal"``) that counts what it is asked to write and to read,
    and the commits that carried writes; the tests that count writes use it too."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.statements = self.reads = self.argument_bytes = self.journal_bytes = 0
        self.commits = 0
        self.written: list[str] = []
        """The statements that wrote, in order (``executemany`` counts as one)."""
        super().__init__(path, sync="normal")  # which reads already

    def commit(self, *, synced: bool = True) -> None:
        if self.uncommitted:
            self.commits += 1
        start, generation = self.journal.offset, self.journal.generation
        super().commit(synced=synced)
        if self.journal.generation == generation:  # a fold took the frame instead
            self.journal_bytes += self.journal.offset - start

    def _write(self, sql: str, arguments: object = ()) -> sqlite3.Cursor:  # type: ignore[override]
        self.statements += 1
        self.written.append(sql)
        self.argument_bytes += sum(
            len(a)
            for a in arguments
            if isinstance(a, bytes | str)  # type: ignore[attr-defined]
        )
        return super()._write(sql, arguments)  # type: ignore[arg-type]

    def _write_many(self, sql: str, rows: list[tuple]) -> None:
        self.statements += 1
        self.written.append(sql)
        self.argument_bytes += sum(
            len(a) for row in rows for a in row if isinstance(a, bytes | str)
        )
        super()._write_many(sql, rows)

    def _read(self, sql: str, arguments: object = ()) -> list[tuple]:  # type: ignore[override]
        self.reads += 1
        return super()._read(sql, arguments)  # type: ignore[arg-type]


def wal_frames(path: Path, page: int) -> int:
    """Frames (pages) in the write-ahead log: its size less the header, by frame size."""
    size = os.path.getsize(f"{path}-wal") if os.path.exists(f"{path}-wal") else 0
    return max(0, size - 32) // (page + 24)


def run(subscribers: int, publications: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        stores: list[CountingStore] = []

        def new_store(node_id: str) -> CountingStore:
            store = CountingStore(Path(directory) / f"{node_id}.sqlite")
            # no checkpoint during the run: the log's size is what every commit appended
            store._db.execute("PRAGMA wal_autocheckpoint=0")
            stores.append(store)
            return store

        simulation = Simulation(1, new_store=new_store)
        ops: list[dict] = [
            {"op": "join", "peer": "pub", "superpeer": 0},
            {"op": "advertise", "peer": "pub", "schemas": ["dc"]},
        ]
        for k in range(subscribers):
            ops.append({"op": "join", "peer": f"sub{k}", "superpeer": 0})
            ops.append({"op": "subscribe", "peer": f"sub{k}", "id": "s", "query": SUBSCRIPTION})
        for op in ops:
            simulation.apply(op)
        store = stores[-1]
        store.commit()
        store.fold()
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        statements, argument_bytes = store.statements, store.argument_bytes
        reads = store.reads
        journal_bytes = store.journal_bytes
        for number in range(publications):
            simulation.apply(
                {
                    "op": "publish",
                    "peer": "pub",
                    "id": f"d{number}",
                    "data": DC
                    + f'<http://l3s.de/d{number}> dc:creator "W. Nejdl {number} {FILLER}" .',
                }
            )
        delivered = simulation.deliveries()
        assert all(len(delivered[f"sub{k}"]) == publications for k in range(subscribers))
        store.commit()
        journal_bytes = store.journal_bytes - journal_bytes
        store.fold()
        (page,) = store._db.execute("PRAGMA page_size").fetchone()
        frames = wal_frames(store.path, page)
        store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        held = os.path.getsize(store.path)
        return {
            "statements": (store.statements - statements) / publications,
            "reads": (store.reads - reads) / publications,
            "argument_bytes": (store.argument_bytes - argument_bytes) / publications,
            "journal_kib": journal_bytes / publications / 1024,
            "wal_kib": frames * page / publications / 1024,
            "file_kib": held / 1024,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", default="1,10")
    parser.add_argument("--publications", type=int, default=200)
    args = parser.parse_args()
    print(
        "| subscribers | statements / notification | reads / notification "
        "| argument bytes / notification "
        "| journal KiB / notification | WAL KiB / notification | database KiB after |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for subscribers in (int(s) for s in args.subscribers.split(",")):
        figures = run(subscribers, args.publications)
        print(
            f"| {subscribers} | {figures['statements']:.2f} | {figures['reads']:.2f} "
            f"| {figures['argument_bytes']:,.0f} "
            f"| {figures['journal_kib']:.1f} | {figures['wal_kib']:.1f} "
            f"| {figures['file_kib']:,.0f} |"
        )


if __name__ == "__main__":
    main()
