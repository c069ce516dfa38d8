"""The store's CPU per notification where origin and access point are one super-peer (issue 37).

What the node asks of its ``SqliteStore`` for each publication of the brokers' benchmark (its
kilobyte publication, ``bench.brokers.publication``) with ``--subscribers`` attached: the log
entry and the version record (``Store.log_publication``, ``Store.set_pending``), each subscriber's
mail (``Store.put_mail``, held unwritten as the mail room holds an attached peer's recent mail:
``recoverable``), then each subscriber's ``Delivered`` (``Store.acknowledge``) for its group; a
commit after every ``--group`` publications, as group commit makes them under that stream.
``--parts`` times each of these apart (a clock read around every call, which adds its own
fraction of a microsecond to each): what the durable work of one publication costs, part by
part.
The encodings are the node's own (``wire.encode`` of the ``Notification`` and the ``Notify``).
Timed: the process's CPU (``time.process_time``) per notification (one subscriber's mail), best
of ``--runs``, each run
on a new store, for every write-ahead log bound in ``--log-bytes`` in turn (alternating, so that
the machine's load falls on each alike). No fsync by default (``--sync normal``): what the
commits and the checkpoints cost the process, not the disk; ``--sync full`` fsyncs at every
commit, as the daemon does (the CPU of the calls, not the wait).

    python -m bench.storecpu --log-bytes 4194304,16777216 --notifications 5000,20000
    python -m bench.storecpu --subscribers 10 --notifications 20000
    python -m bench.storecpu --baseline /path/to/main --sync full --notifications 20000
    python -m bench.storecpu --parts --group 18 --sync full --notifications 20000

Run it from a checkout's directory to measure that checkout's store; ``--baseline`` measures
another checkout's store beside it, each run in a process of its own (this script, with the
other checkout's packages first on its path), alternating, with the ratio of the best runs."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import wire
from bench.brokers import publication
from superpeer import versions
from superpeer.mailroom import mail_key
from superpeer.store import SqliteStore
from wire import messages as m


def stream_messages(number: int) -> tuple[m.Notification, m.Notify]:
    """Notification ``number`` of the brokers' stream as the origin logs it, and the mail the
    access point keeps of it for one subscriber."""
    notification = m.Notification(
        origin="sp0",
        origin_position=0,
        publication=publication(number),
        owner="publisher",
        access_point="127.0.0.1:1",
        hops=0,
        published_at=1e9 + number,
    )
    notify = m.Notify(
        publication=notification.publication,
        subscriptions=("s",),
        owner="publisher",
        access_point="127.0.0.1:1",
        origin="sp0",
        hops=0,
        published_at=notification.published_at,
    )
    return notification, notify


PARTS: Final = ("log entry", "version record", "mail", "acknowledgements", "commits")
"""What ``run`` does for a stream, in the order ``--parts`` prints it."""


def run(
    notifications: int,
    group: int,
    log_bytes: int,
    subscribers: int = 1,
    sync: str = "normal",
    parts: dict[str, float] | None = None,
) -> float:
    """CPU seconds per notification of one run on a new store (``notifications`` to each of
    ``subscribers``: that many divided among them as publications). With ``parts``, it is also
    filled with the CPU seconds per notification of each of ``PARTS`` (the clock read after
    every part)."""
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(Path(directory) / "state.sqlite", sync=sync, max_log_bytes=log_bytes)
        made = []
        for number in range(max(1, notifications // subscribers)):
            notification, notify = stream_messages(number)
            made.append((notification, wire.encode(notification), wire.encode(notify)))
        peers = [f"subscriber{k}" for k in range(subscribers)]
        clock = time.process_time
        spent = dict.fromkeys(PARTS, 0.0)
        start = clock()
        lap = _laps(spent, clock) if parts is not None else _not_timed  # laps within the total
        last = dict.fromkeys(peers, 0)
        for index, (notification, logged, mail) in enumerate(made):
            at = notification.published_at
            key = mail_key(notification.owner, notification.publication.id, 0)
            body = wire.packed_publication(notification.publication)
            held = store.log_publication(key, logged, at, body)
            lap("log entry")
            store.set_pending(
                versions.RECORDS, *versions.record_of(notification, key if held else None)
            )
            lap("version record")
            for peer in peers:
                number = store.put_mail(peer, key, mail, at, body, recoverable=True)
                last[peer] = number or last[peer]
            lap("mail")
            closing = index % group == group - 1
            if closing:
                for peer in peers:
                    store.acknowledge(peer, last[peer], at)
            lap("acknowledgements")
            if closing:
                store.commit()
            lap("commits")
        store.commit()
        total = clock() - start
        # every notification acknowledged (the last group's with it): the stream was the node's
        assert len(made) % group or not store.mail_counts()
        store.close()
    count = len(made) * subscribers
    if parts is not None:
        parts.update((part, spent[part] / count) for part in PARTS)
    return total / count


def _laps(spent: dict[str, float], clock: Callable[[], float]) -> Callable[[str], None]:
    """``run``'s lap when the parts are asked for: the CPU since the last lap goes to the part
    named."""
    lapped = clock()

    def lap(part: str) -> None:
        nonlocal lapped
        now = clock()
        spent[part] += now - lapped
        lapped = now

    return lap


def _not_timed(part: str) -> None:
    """``run``'s lap when the parts are not asked for: no clock read between the parts."""


def run_in(
    root: Path, notifications: int, group: int, log_bytes: int, subscribers: int, sync: str
) -> float:
    """``run`` in a process of its own on the checkout at ``root``'s packages."""
    arguments = [str(a) for a in (notifications, group, log_bytes, subscribers, sync)]
    done = subprocess.run(
        [sys.executable, "-P", __file__, "--one", *arguments],  # -P: not bench/ first
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.split()[-1])


def compare(args: argparse.Namespace, bound: int) -> None:
    """This checkout's store beside ``--baseline``'s, run after run."""
    here = Path(__file__).resolve().parent.parent
    sides = {"this": here, "baseline": Path(args.baseline).resolve()}
    print(f"| notifications | store | µs CPU / notification (best) | runs | sync {args.sync} |")
    print("| ---: | --- | ---: | --- | ---: |")
    for count in (int(n) for n in args.notifications.split(",")):
        times: dict[str, list[float]] = {side: [] for side in sides}
        for turn in range(args.runs):
            for side in sorted(sides, reverse=turn % 2 == 1):  # each first in turn
                times[side].append(
                    run_in(sides[side], count, args.group, bound, args.subscribers, args.sync) * 1e6
                )
        base = min(times["baseline"])
        for side, root in sides.items():
            runs = ", ".join(f"{t:.1f}" for t in times[side])
            print(
                f"| {count:,} | {side} ({root}) | {min(times[side]):.1f} | {runs} "
                f"| {min(times[side]) / base:.2f}x |"
            )


def parts_table(args: argparse.Namespace, bound: int) -> None:
    """Each part's CPU per notification, from the run whose total was the least."""
    print(f"| notifications | {' | '.join(PARTS)} | total (µs CPU / notification, best run) |")
    print("| ---: |" + " ---: |" * (len(PARTS) + 1))
    for count in (int(n) for n in args.notifications.split(",")):
        best: tuple[float, dict[str, float]] | None = None
        for _ in range(args.runs):
            parts: dict[str, float] = {}
            total = run(count, args.group, bound, args.subscribers, args.sync, parts)
            if best is None or total < best[0]:
                best = (total, parts)
        assert best is not None
        total, parts = best
        cells = " | ".join(f"{parts[part] * 1e6:.1f}" for part in PARTS)
        print(f"| {count:,} | {cells} | {total * 1e6:.1f} |")


def main() -> None:
    if sys.argv[1:2] == ["--one"]:  # one run, for ``run_in``
        count, group, bound, subscribers, sync = sys.argv[2:]
        print(run(int(count), int(group), int(bound), int(subscribers), sync))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log-bytes", default="4194304,16777216")
    parser.add_argument("--notifications", default="5000")
    parser.add_argument("--group", type=int, default=12, help="publications per commit")
    parser.add_argument("--subscribers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sync", choices=("normal", "full"), default="normal")
    parser.add_argument("--baseline", help="another checkout whose store is measured beside")
    parser.add_argument("--parts", action="store_true", help="the CPU of each part apart")
    args = parser.parse_args()
    bounds = [int(b) for b in args.log_bytes.split(",")]
    if args.baseline:
        compare(args, bounds[-1])
        return
    if args.parts:
        parts_table(args, bounds[-1])
        return
    print("| notifications | log bound | µs CPU / notification (best) | runs | vs first bound |")
    print("| ---: | ---: | ---: | --- | ---: |")
    for count in (int(n) for n in args.notifications.split(",")):
        times: dict[int, list[float]] = {b: [] for b in bounds}
        for _ in range(args.runs):
            for bound in bounds:
                times[bound].append(
                    run(count, args.group, bound, args.subscribers, args.sync) * 1e6
                )
        base = min(times[bounds[0]])
        for bound in bounds:
            runs = ", ".join(f"{t:.1f}" for t in times[bound])
            print(
                f"| {count:,} | {bound / 2**20:g} MiB | {min(times[bound]):.1f} | {runs} "
                f"| {min(times[bound]) / base:.2f}x |"
            )


if __name__ == "__main__":
    main()
