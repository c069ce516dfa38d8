"""What one fold of the store writes as the store fills (issue 37, the p99's stalls).

``SqliteStore`` keeps sqlite's transaction open between folds (``superpeer.redo``), so a fold
writes every page its commits changed, once. The pages of tables appended in order (the
bodies, the log's rows) are few and new; the pages of indexes on random keys (the hashes of the
log's and the bodies' keys and of the ``delivered`` records: ``superpeer.storeschema``) are as
many as the inserts touch, up to every leaf page of the index. So as the store fills, each fold
writes more, and stalls the trio thread longer, than a short benchmark shows.

The stream is ``bench.storecpu``'s (the brokers' kilobyte publications, the node's own
encodings, one subscriber's mail acknowledged every ``--group``), with owner and subscriber
named as a network with identities names them (``pk1-`` and 52 characters). Every fold is
timed (the ``COMMIT`` and the log's fsync, on the calling thread, as in the daemon), and its
pages are read back from the write-ahead log and counted by the table or index they belong to
(sqlite's ``dbstat``). The log is checkpointed after each fold, untimed (the daemon's
checkpoints, every few folds, come on top), so that each fold's pages are its only frames.

    python -m bench.folds [--notifications 100000] [--steps 5]

Printed per step: the notifications stored so far, the mean fold of that step (ms, MB, pages,
publications per fold), its ratio to the first step's (the baseline of the same run), and the
pages of the step's last fold by table, the largest first."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sqlite3
import struct
import tempfile
import time
from collections import Counter
from pathlib import Path

import wire
from bench.columns import aligned
from bench.storecpu import stream_messages
from superpeer import versions
from superpeer.mailroom import mail_key
from superpeer.store import SqliteStore

OWNER = "pk1-ztxsshfhfngq6x5z3havwfrfgmfwjkjut4ju4tyhz5nx2q2rsgra"
SUBSCRIBER = "pk1-uszydyx5o4ziperkpjr3onccfa5yz3nmtb3vs3rpd7koo3mkrzaa"
FRAME_HEADER = 24
"""Bytes before each page in sqlite's write-ahead log (the page number first, 4 bytes)."""
WAL_HEADER = 32


@dataclasses.dataclass
class Fold:
    seconds: float
    pages: list[int]
    """The page numbers it wrote, in the order of the log."""
    notifications: int
    """Notifications stored since the fold before."""


class TimedStore(SqliteStore):
    """A ``SqliteStore`` whose folds are timed, and their pages read back from the log."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, sync="full", max_log_bytes=1 << 40)
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        (self.page_size,) = self._db.execute("PRAGMA page_size").fetchone()
        self.wal = Path(f"{path}-wal")
        self.folds: list[Fold] = []
        self.stored = 0
        self._stored_at_fold = 0

    def fold(self) -> None:
        start = time.perf_counter()
        super().fold()
        if not hasattr(self, "folds"):
            return  # (the fold of the store's opening)
        seconds = time.perf_counter() - start
        self.folds.append(Fold(seconds, self._pages(), self.stored - self._stored_at_fold))
        self._stored_at_fold = self.stored
        # copied into the database and emptied, untimed: the next fold's pages are the log's
        # only frames, and the log does not grow (a long one slows every read)
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _pages(self) -> list[int]:
        """The page numbers of the log's frames, in order."""
        pages = []
        with open(self.wal, "rb") as log:
            log.seek(WAL_HEADER)
            while len(header := log.read(FRAME_HEADER)) == FRAME_HEADER:
                pages.append(struct.unpack(">I", header[:4])[0])
                log.seek(self.page_size, os.SEEK_CUR)
        return pages

    def owners(self) -> dict[int, str]:
        """Which table or index each page of the database belongs to."""
        return dict(self._read("SELECT pageno, name FROM dbstat"))


def store_stream(store: TimedStore, first: int, count: int, group: int) -> None:
    """Notifications ``first`` to ``first + count`` of the stream, as the node stores them."""
    last = 0
    for number in range(first, first + count):
        notification, notify = stream_messages(number)
        notification = dataclasses.replace(notification, owner=OWNER)
        notify = dataclasses.replace(notify, owner=OWNER)
        key = mail_key(OWNER, notification.publication.id, 0)
        body = wire.packed_publication(notification.publication)
        logged = wire.encode(notification)
        held = store.log_publication(key, logged, notification.published_at, body)
        store.set_pending(
            versions.RECORDS, *versions.record_of(notification, key if held else None)
        )
        mail = wire.encode(notify)
        last = store.put_mail(SUBSCRIBER, key, mail, notification.published_at, body) or last
        store.stored += 1
        if number % group == group - 1:
            store.acknowledge(SUBSCRIBER, last, notification.published_at)
            store.commit()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notifications", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--group", type=int, default=16, help="notifications per commit")
    args = parser.parse_args(argv)
    step = args.notifications // args.steps
    rows = [["stored", "folds", "ms / fold", "MB / fold", "pages / fold", "notif. / fold",
             "ms vs first", "largest in the last fold (pages)"]]  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        store = TimedStore(Path(directory) / "state.sqlite")
        try:
            baseline = None
            for index in range(args.steps):
                counted = len(store.folds)
                store_stream(store, index * step, step, args.group)
                folds = store.folds[counted:]
                if not folds:
                    continue
                ms = sum(f.seconds for f in folds) / len(folds) * 1000
                pages = sum(len(f.pages) for f in folds) / len(folds)
                per_fold = sum(f.notifications for f in folds) / len(folds)
                baseline = baseline or ms
                owners = store.owners()
                largest = Counter(owners.get(p, "?") for p in set(folds[-1].pages))
                named = ", ".join(f"{name} {n}" for name, n in largest.most_common(5))
                rows.append([
                    f"{store.stored:,}", str(len(folds)), f"{ms:.1f}",
                    f"{pages * store.page_size / 1e6:.1f}", f"{pages:,.0f}", f"{per_fold:,.0f}",
                    f"{ms / baseline:.2f}x", named,
                ])  # fmt: skip
        finally:
            store.close()
    print(aligned(rows))


if __name__ == "__main__":
    try:
        main()
    except sqlite3.Error as error:
        raise SystemExit(f"bench.folds: {error}") from error
