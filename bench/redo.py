"""What the store's redo journal costs in time (issue 37): how long a fold holds the loop, and
how long a start takes when a crash left the journal full (``superpeer.redo``).

The node's calls for the brokers' stream (``bench.storecpu``'s: the log entry, the version
record, one subscriber's mail and its acknowledgement), a commit after each notification, with
``sync = "full"``. Each commit is timed without its fsync (the daemon runs that on a worker
thread): the commits that folded apart from the others, per ``--fold-bytes``. Then, for the
largest, the store's files are copied as a killed process leaves them once the journal is full,
and opened: the replay and its fold, against opening the same store again.

    python -m bench.redo --fold-bytes 1048576,4194304 --notifications 12000

Run it from a checkout's directory to measure that checkout's store."""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import wire
from bench.storecpu import stream_messages
from superpeer import versions
from superpeer.mailroom import mail_key
from superpeer.store import SqliteStore


def notify(store: SqliteStore, number: int) -> None:
    """The node's writes for notification ``number`` to one subscriber, acknowledged."""
    notification, mail = stream_messages(number)
    key = mail_key(notification.owner, notification.publication.id, 0)
    body = wire.packed_publication(notification.publication)
    held = store.log_publication(key, wire.encode(notification), notification.published_at, body)
    store.set_pending(versions.RECORDS, *versions.record_of(notification, key if held else None))
    delivery = store.put_mail("subscriber", key, wire.encode(mail), notification.published_at, body)
    assert delivery is not None
    store.acknowledge("subscriber", delivery, notification.published_at)


def folds(fold_bytes: int, notifications: int) -> tuple[list[float], list[float]]:
    """Milliseconds of each commit that did not fold, and of each that did."""
    plain: list[float] = []
    folded: list[float] = []
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(Path(directory) / "state.sqlite", fold_bytes=fold_bytes)
        for number in range(notifications):
            notify(store, number)
            generation = store.journal.generation
            start = time.perf_counter()
            store.commit(synced=False)
            spent = (time.perf_counter() - start) * 1e3
            (folded if store.journal.generation != generation else plain).append(spent)
            store.sync()
        store.close()
    return plain, folded


def replay(fold_bytes: int) -> tuple[int, int, float, float]:
    """Notifications committed until the journal was nearly full, the statements its copy ran
    again when opened, and the seconds of that open and of the next."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.sqlite"
        store = SqliteStore(path, fold_bytes=fold_bytes)
        number = last = 0
        while store.journal.offset + 2 * last < fold_bytes:  # stops before the fold
            before = store.journal.offset
            notify(store, number)
            store.commit()
            last = store.journal.offset - before
            number += 1
        crashed = Path(directory) / "crashed"
        crashed.mkdir()
        for suffix in ("", "-wal", "-redo"):
            shutil.copyfile(f"{path}{suffix}", crashed / f"state.sqlite{suffix}")
        store.close()
        start = time.perf_counter()
        again = SqliteStore(crashed / "state.sqlite", fold_bytes=fold_bytes)
        replaying = time.perf_counter() - start
        ran = again.replayed
        again.close()
        start = time.perf_counter()
        SqliteStore(crashed / "state.sqlite", fold_bytes=fold_bytes).close()
        return number, ran, replaying, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fold-bytes", default="1048576,4194304")
    parser.add_argument("--notifications", type=int, default=12000)
    args = parser.parse_args()
    sizes = [int(size) for size in args.fold_bytes.split(",")]
    print("| fold_bytes | commits | median commit ms | folds | each fold, ms |")
    print("| ---: | ---: | ---: | ---: | --- |")
    for size in sizes:
        plain, folded = folds(size, args.notifications)
        each = ", ".join(f"{ms:.1f}" for ms in folded)
        print(
            f"| {size:,} | {len(plain):,} | {statistics.median(plain):.3f} | {len(folded)} "
            f"| {each} |"
        )
    committed, ran, replaying, opening = replay(sizes[-1])
    print(
        f"\nA journal of {sizes[-1]:,} bytes left nearly full by a crash ({committed:,} "
        f"notifications, a commit each): opened in {replaying:.3f} s, {ran:,} statements run "
        f"again and folded; opened again in {opening:.3f} s."
    )


if __name__ == "__main__":
    main()
