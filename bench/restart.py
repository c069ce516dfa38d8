"""A super-peer restarting on a large store, on real daemons: does it become a member and stay one?

    python -m bench.restart [--subscriptions 100000] [--watch 60] [--json] [--keep-logs DIR]

Two super-peers on 127.0.0.1 (plaintext: TLS changes nothing here). sp0 starts alone; sp1's data
directory is filled beforehand with ``--subscriptions`` stored subscriptions of 1,000 peers (the
listings workload of ``bench.matching``, as a restart finds them), and sp1 starts and joins sp0.
Then sp1 is killed (``kill -9``) and started again on the same directory. Each time, from the
daemons' own logs:

* **prepared**: start -> ``joining`` (the decoding and the bulk insertion, before the join
  request leaves);
* **member -> started**: what is left of the restore once a member (its new neighbours expect to
  hear from it within ``failure_seconds``, 10 s);
* **declared failed**: how often sp0 declared sp1 failed while sp1 ran (``neighbour_failed``
  after sp1's ``member``), and sp1's rejoins and stalls, over ``--watch`` seconds.

Before the restore moved ahead of the join (stop 28), the restart with 10^5 was declared failed
10 s after it joined, and rejoined for ever.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import wire
from bench.poset_scale import _items
from deploy.cluster import free_ports
from superpeer.store import SqliteStore
from wire import messages as m
from workloads.listings import Listings

LINE = re.compile(r"ts=(\S+ \S+) level=\w+ logger=\w+ event=(\w+)")


def fill(directory: Path, count: int) -> None:
    directory.mkdir(parents=True)
    store = SqliteStore(directory / "state.sqlite")
    for subscription, peer, sid in _items(Listings(seed=1), count, 0):
        data = wire.encode(m.Subscribe(id=sid, subscription=subscription))
        store.set_subscription(peer, sid, data, made=1.0)
    store.set_meta("alive_at", "1.0")
    store.commit(synced=False)
    store.sync()
    store.close()  # the store keeps its transaction open to the fold: the daemon found it locked


def daemon(directory: Path, port: int, node: str, join: int | None) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "superpeer.cli", "run", "--listen", f"127.0.0.1:{port}",
        "--data-dir", str(directory), "--no-tls", "--node-id", node,
    ]  # fmt: skip
    if join is not None:
        command += ["--join", f"127.0.0.1:{join}"]
    log = (directory.parent / f"{node}.{time.monotonic_ns()}.log").open("wb")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    process.log = Path(log.name)  # type: ignore[attr-defined]
    return process


def events(path: Path) -> list[tuple[float, str]]:
    found = []
    for line in path.read_text().splitlines():
        match = LINE.match(line)
        if match:
            at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((at, match[2]))
    return found


def first(found: list[tuple[float, str]], event: str, after: float = 0.0) -> float | None:
    return next((at for at, name in found if name == event and at >= after), None)


def wait_for(process: subprocess.Popen, event: str, after: float, timeout: float) -> None:
    """Until ``process`` logs ``event`` at ``after`` or later (``RuntimeError`` past
    ``timeout``)."""
    deadline = time.monotonic() + timeout
    while first(events(process.log), event, after) is None:  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {event} from {process.log} within {timeout} s")  # type: ignore[attr-defined]
        time.sleep(0.2)


def run_once(sp0: subprocess.Popen, directory: Path, ports: list[int], watch: float) -> dict:
    started = time.time()
    sp1 = daemon(directory, ports[1], "sp1", ports[0])
    time.sleep(watch)
    sp1_events = events(sp1.log)  # type: ignore[attr-defined]
    member = first(sp1_events, "member")
    joining = first(sp1_events, "joining")
    ready = first(sp1_events, "started")
    failed = [at for at, name in events(sp0.log) if name == "neighbour_failed"]  # type: ignore[attr-defined]
    return {
        "prepared_s": None if joining is None else round(joining - started, 1),
        "member_to_started_s": None
        if member is None or ready is None
        else round(ready - member, 2),
        "declared_failed_while_running": sum(member is not None and at > member for at in failed),
        "rejoins": sum(name == "rejoin" for _, name in sp1_events),
        "stalls": sum(name == "stalled" for _, name in sp1_events),
        "process": sp1,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscriptions", type=int, default=100_000)
    parser.add_argument("--watch", type=float, default=60.0, help="seconds each start is watched")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep-logs", type=Path, help="copy the daemons' logs to this directory")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="restart-") as tmp:
        base = Path(tmp)
        fill(base / "sp1", args.subscriptions)
        ports = free_ports(2)
        sp0 = daemon(base / "sp0", ports[0], "sp0", None)
        rows = []
        try:
            wait_for(sp0, "started", 0.0, timeout=30)
            for label in ("first start", "after kill -9"):
                row = run_once(sp0, base / "sp1", ports, args.watch)
                process = row.pop("process")
                killed = time.time()
                process.send_signal(signal.SIGKILL)
                process.wait()
                rows.append({"start": label, **row})
                if row["member_to_started_s"] is None:
                    break  # not a member within --watch: nothing for sp0 to notice
                # sp0 notices the failure (and, alone then, repairs at once) before the restart
                try:
                    wait_for(sp0, "neighbour_failed", killed, timeout=60)
                except RuntimeError as error:
                    rows[-1]["after_the_kill"] = str(error)
                    break
        finally:
            sp0.send_signal(signal.SIGTERM)
            sp0.wait(timeout=30)
            if args.keep_logs is not None:
                for log in base.glob("*.log"):
                    shutil.copy(log, args.keep_logs)
    report = {"subscriptions": args.subscriptions, "watch_s": args.watch, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"sp1 restarting on {args.subscriptions} stored subscriptions, watched {args.watch:.0f} s"
    )
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
