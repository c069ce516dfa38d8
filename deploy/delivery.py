"""End-to-end delivery under peer faults, on real daemons: loss and duplicate accounting.

    python -m deploy.delivery [--rounds 20] [--publications 1000] [--backlog 10000]
                              [--moves 50] [--seed 1] [--report delivery.json]

Three scenarios, each on its own TLS cluster (``deploy.cluster``); a publisher peer daemon streams
publications (batches of ``BATCH`` subjects per ``publish`` request, at ``--rate`` per second)
and a subscriber peer daemon on another super-peer is faulted:

``kill`` / ``term``
    in every round the subscriber's daemon is killed with ``kill -9`` (``term``: stopped with
    SIGTERM) at a seeded random point of a stream of ``--publications`` and started again on its
    data directory after a short seeded hold; once the network is quiet its inbox must hold every
    acknowledged matching publication exactly once.
``backlog``
    the subscriber's daemon is stopped while ``--backlog`` matching publications are made; a
    healthy subscriber on the same super-peer must receive them all without ever being detached;
    when the stopped one starts again all of them reach its inbox, in publication order, and the
    drain rate (notifications per second from its access point's outbox) is measured.
``move``
    the subscriber moves ``--moves`` times between 4 super-peers (stop, start on another, back to
    the first at the end) during a stream; nothing lost or duplicated, and afterwards the old
    access points hold nothing for it (``superpeer peers``: no subscriptions, no mail).

A publication counts as *owed* once its publisher's daemon acknowledged it (outcome
``published``) and it matches the subscription; **lost**: owed and not in the inbox;
**duplicated**: in the inbox more than once; **unexpected**: in the inbox and not published.
Exit code 1 on any loss, duplicate, unexpected record or failed check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from deploy.chaos import SUPERPEER_SETTINGS, inbox_of
from deploy.cluster import Cluster, ClusterError
from peer.control import ControlClient, ControlUnavailable
from superpeer.cli import control_blocking

PREFIX: Final = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
QUERY: Final = 'X : t(X, dc:creator, C), C contains "Nejdl"'
BATCH: Final = 10
QUIET_TIMEOUT: Final = 120.0
DRAIN_LIMIT: Final = 1800.0
"""However slowly a backlog drains, a scenario gives up after this long."""


MOVE_SETTINGS: Final = """[limits]
heartbeat_seconds = 1.0
failure_seconds = 10.0
[recovery]
handover_seconds = 3.0
"""
"""Moves fault no super-peer: the default failure detection (the chaos settings' 3 s takes a
super-peer stalled 2.5 s by a loaded machine for failed, and its rejoins are a backbone test)."""


class DeliveryError(RuntimeError):
    """The network did not reach the state a scenario waits for."""


def call(directory: Path, command: str, timeout: float = 60.0, **arguments: str) -> dict:
    """One control request to the peer daemon in ``directory``; its body (raises if refused)."""
    with ControlClient(directory / "control.sock", timeout=timeout) as control:
        ok, body = control.call(command, **arguments)
    if not ok:
        raise DeliveryError(f"{command} on {directory.name}: {body}")
    return body


def peer_status(directory: Path) -> dict | None:
    try:
        return call(directory, "status", timeout=10)
    except (ControlUnavailable, OSError, DeliveryError):
        return None


def held_for(cluster: Cluster, k: int) -> list[dict[str, Any]]:
    """``superpeer peers --json`` of super-peer ``k``: what it holds, per peer."""
    return json.loads(control_blocking(cluster.directories[k], "peers").body)


def left_with(cluster: Cluster, peer_id: str, nodes: list[int]) -> list[dict[str, Any]]:
    """What super-peers ``nodes`` still hold for ``peer_id`` (subscriptions, mail, unacknowledged
    notifications): nothing, once a peer that moved away was handed over."""
    return [
        {**row, "at": f"sp{k}"}
        for k in nodes
        for row in held_for(cluster, k)
        if row["peer"] == peer_id and (row["subscriptions"] or row["mail"] or row["unacknowledged"])
    ]


def forgotten_by(cluster: Cluster, peer_id: str, nodes: list[int], timeout: float) -> list[dict]:
    """Wait up to ``timeout`` for ``nodes`` to hold nothing for ``peer_id``; what is left."""
    with contextlib.suppress(DeliveryError):  # what is left is reported
        wait_for(
            lambda: not left_with(cluster, peer_id, nodes),
            timeout,
            "the old access points to forget the peer",
        )
    return left_with(cluster, peer_id, nodes)


@dataclass
class Producer:
    """``stream`` publishing ``total`` at ``rate`` in a thread; ``reached`` is set once ``point``
    publications were made (or the stream failed: ``failure``)."""

    stream: Stream
    total: int
    rate: float
    point: int
    reached: threading.Event = field(default_factory=threading.Event)
    failure: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._produce, daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        try:
            self.stream.run(self.total, self.rate, self._progress)
        except BaseException as error:  # reported by ``join``
            self.failure.append(error)
        self.reached.set()

    def _progress(self, made: int) -> None:
        if made >= self.point:
            self.reached.set()

    def join(self) -> None:
        """Wait for the end of the stream; its failure, if any, is raised here."""
        self._thread.join()
        if self.failure:
            raise self.failure[0]


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; the seconds it took (raises after ``timeout``)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise DeliveryError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - start


@dataclass
class Stream:
    """Publications made through one publisher daemon; what was acknowledged, in order."""

    directory: Path
    rng: random.Random
    match: float = 0.75
    published: list[str] = field(default_factory=list)
    """Acknowledged ids, in publication order."""
    matching: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    probes: set[str] = field(default_factory=set)
    batches: int = 0

    def publish(self, count: int, *, all_match: bool = False) -> None:
        subjects = []
        for i in range(count):
            hit = all_match or self.rng.random() < self.match
            creator = "Nejdl" if hit else "Idreos"
            # zero-padded subjects: the parser orders a batch by subject, so ids follow it
            subjects.append((f"http://example.org/d/b{self.batches}/{i:04d}", creator, hit))
        document = PREFIX + "".join(
            f'<{s}> dc:title "T {s}" ; dc:creator "{c}" .\n' for s, c, _ in subjects
        )
        hits = {s for s, _, hit in subjects if hit}
        batch_id = f"b{self.batches}"
        self.batches += 1
        results = self._publish(document, batch_id)
        for result in results:
            if result["outcome"] == "published":
                self.published.append(result["id"])
                if result["subject"] in hits:
                    self.matching.add(result["id"])
            elif result["subject"] in hits:
                self.unknown.add(result["id"])

    def _publish(self, document: str, batch_id: str) -> list[dict[str, Any]]:
        """The batch's results; a batch refused unsent (the publisher's access point said
        goodbye: it is rejoining after a stall, as a loaded machine makes it) is made again once
        the publisher is back, as a user would."""
        deadline = time.monotonic() + QUIET_TIMEOUT
        while True:
            with ControlClient(self.directory / "control.sock", timeout=60.0) as control:
                ok, body = control.call("publish", data=document, id=batch_id)
            if ok:
                return body["results"]
            if body.get("error") != "unavailable" or time.monotonic() > deadline:
                raise DeliveryError(f"the publisher failed: publish: {body}")
            wait_for(
                lambda: bool((peer_status(self.directory) or {}).get("connected")),
                QUIET_TIMEOUT,
                "the publisher to reconnect",
            )

    def run(self, total: int, rate: float, progress: Callable[[int], None] | None = None) -> None:
        """``total`` publications in batches, at about ``rate`` per second."""
        start = time.monotonic()
        made = 0
        while made < total:
            size = min(BATCH, total - made)
            self.publish(size)
            made += size
            if progress is not None:
                progress(made)
            ahead = start + made / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)

    def probe(self, subscribers: list[Path], timeout: float = 60.0) -> None:
        """Publish matching probes until every subscriber received one: the subscription has
        reached the publisher's side of the network."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = f"probe{len(self.probes)}"
            document = PREFIX + f'<http://example.org/probe/{pid}> dc:creator "Nejdl" .\n'
            call(self.directory, "publish", data=document, id=pid)
            self.probes.add(pid)

            def arrived(pid: str = pid) -> bool:
                return all(pid in ids(inbox_of(d)) for d in subscribers)

            with contextlib.suppress(DeliveryError):
                wait_for(arrived, 2.0, "a probe")
                return
        raise DeliveryError("the subscription did not reach the publisher's super-peer")


def ids(records: list[dict[str, Any]]) -> set[str]:
    return {r["publication"] for r in records}


def judge(stream: Stream, records: list[dict[str, Any]]) -> dict[str, int]:
    seen = Counter(r["publication"] for r in records)
    allowed = stream.matching | stream.unknown | stream.probes
    return {
        "owed": len(stream.matching),
        "delivered": len(stream.matching & set(seen)),
        "lost": len(stream.matching - set(seen)),
        "duplicated": sum(1 for n in seen.values() if n > 1),
        "unexpected": len(set(seen) - allowed),
    }


def wait_delivered(cluster: Cluster, k: int, directory: Path, stream: Stream) -> float:
    """Wait until the subscriber in ``directory`` (attached to ``k``) is connected, has every
    owed publication, and its access point holds nothing unacknowledged for it."""
    owed = stream.matching

    def done() -> bool:
        status = peer_status(directory)
        if status is None or not status.get("connected"):
            return False
        if status["inbox"]["records"] < len(owed):
            return False
        if not owed <= ids(inbox_of(directory)):
            return False
        rows = [r for r in held_for(cluster, k) if r["peer"] == status["peer_id"]]
        return all(r["mail"] == 0 and r["unacknowledged"] == 0 for r in rows)

    started = time.monotonic()
    progress = {"records": -1, "at": started}

    def done_or_stuck() -> bool:
        """Done; or raises once the inbox stopped growing for ``QUIET_TIMEOUT`` (a long backlog
        on a loaded machine drains slowly, and slow is not lost)."""
        if done():
            return True
        records = ((peer_status(directory) or {}).get("inbox") or {}).get("records", -1)
        now = time.monotonic()
        if records != progress["records"]:
            progress.update(records=records, at=now)
        elif now - progress["at"] > QUIET_TIMEOUT:
            raise DeliveryError(
                f"timed out: no new notification in {QUIET_TIMEOUT:.0f} s waiting for "
                f"{directory.name} to receive {len(owed)}"
            )
        return False

    try:
        wait_for(done_or_stuck, DRAIN_LIMIT, f"{directory.name} to receive {len(owed)}")
        return time.monotonic() - started
    except DeliveryError as error:
        status = peer_status(directory) or {}
        missing = sorted(owed - ids(inbox_of(directory))) if status else ["(not running)"]
        held = {
            f"sp{n}": [r for r in held_for(cluster, n) if r["peer"] == status.get("peer_id")]
            for n in cluster.live()
        }
        raise DeliveryError(
            f"{error}: {len(missing)} missing ({' '.join(missing[:10])}); peer status "
            f"{ {k: status.get(k) for k in ('connected', 'superpeer_id', 'inbox')} }; held {held}"
        ) from None


def start(cluster: Cluster, j: int, k: int) -> float:
    """Start peer daemon ``j`` attached to super-peer ``k``; the seconds until it is connected
    there (asked on its control socket, cheaper than ``Cluster.start_peer``'s ``peer status``)."""
    cluster.start_peer(j, k, wait=False)
    directory = cluster.peer_directories[j]
    wanted = f"sp{k}"

    def connected() -> bool:
        if not cluster.peer_running(j):
            tail = (directory / "daemon.log").read_text(errors="replace")[-2000:]
            raise DeliveryError(f"peer {j} exited:\n{tail}")
        status = peer_status(directory)
        return bool(status and status.get("connected") and status.get("superpeer_id") == wanted)

    return wait_for(connected, 30.0, f"peer {j} to connect to {wanted}")


def _setup(cluster: Cluster, publisher: Path, subscribers: list[Path], stream: Stream) -> None:
    call(publisher, "advertise", advertisement=json.dumps({"schemas": ["dc"]}))
    for directory in subscribers:
        call(directory, "subscribe", query=QUERY, id="s1")
    stream.probe(subscribers)


def _daemon_problems(cluster: Cluster) -> list[str]:
    logs = [d / "stderr.log" for d in cluster.directories]
    logs += [d / "daemon.log" for d in cluster.peer_directories]
    return [
        f"{log.parent.name}: a traceback in {log.name}"
        for log in logs
        if log.exists() and "Traceback" in log.read_text(errors="replace")
    ]


# -- scenario 1: kill -9 / SIGTERM at random points of a stream ------------------------------------
def faults(
    kind: str, *, rounds: int, publications: int, seed: int, rate: float = 250.0,
    directory: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``kind`` is ``kill`` (kill -9) or ``term`` (SIGTERM)."""
    if kind not in ("kill", "term"):
        raise ValueError(f"unknown fault {kind!r}")
    rng = random.Random(seed)
    started = time.monotonic()
    with Cluster(2, peers=2, trace=False, directory=directory, settings=SUPERPEER_SETTINGS) as c:
        subscriber, publisher = c.peer_directories  # on sp0 and sp1
        stream = Stream(publisher, random.Random(seed + 1))
        _setup(c, publisher, [subscriber], stream)
        per_round = []
        repeats = 0
        for r in range(rounds):
            point = rng.randrange(1, publications)
            hold = rng.uniform(0.0, 1.0)
            producer = Producer(stream, publications, rate, point)
            producer.reached.wait()
            # repeats the inbox ignored in this run of the daemon (read just before the fault)
            before = peer_status(subscriber) or {}
            repeats += before.get("inbox", {}).get("duplicates_ignored", 0)
            if kind == "kill":
                c.kill_peer(0)
            else:
                code = c.stop_peer(0)
                if code != 0:
                    raise DeliveryError(f"the subscriber exited with {code} on SIGTERM")
            time.sleep(hold)
            start(c, 0, 0)
            producer.join()
            quiet = wait_delivered(c, 0, subscriber, stream)
            records = inbox_of(subscriber)
            verdict = judge(stream, records)
            per_round.append({"round": r, "point": point, "quiet_seconds": round(quiet, 2),
                              **verdict})  # fmt: skip
            print(f"{kind} round {r}: fault after {point} publications; {verdict}",
                  file=sys.stderr, flush=True)  # fmt: skip
        status = peer_status(subscriber) or {}
        repeats += status.get("inbox", {}).get("duplicates_ignored", 0)
        total = judge(stream, inbox_of(subscriber))
        problems = _daemon_problems(c)
    return {
        "scenario": kind, "rounds": rounds, "publications": len(stream.published),
        **total, "repeats_ignored": repeats,
        "unknown_outcome": len(stream.unknown), "rounds_detail": per_round,
        "problems": problems, "seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip


# -- scenario 2: a backlog for a stopped peer beside a healthy one ----------------------------------
def backlog(*, publications: int, seed: int, directory: Path | None = None) -> dict[str, Any]:
    started = time.monotonic()
    with Cluster(2, peers=3, trace=False, directory=directory, settings=SUPERPEER_SETTINGS) as c:
        stopped, publisher, healthy = c.peer_directories  # sp0, sp1, sp0
        stream = Stream(publisher, random.Random(seed))
        _setup(c, publisher, [stopped, healthy], stream)
        healthy_id = (peer_status(healthy) or {})["peer_id"]
        stopped_id = (peer_status(stopped) or {})["peer_id"]
        connections_before = (peer_status(healthy) or {})["counters"]["connections"]
        code = c.stop_peer(0)
        if code != 0:
            raise DeliveryError(f"the subscriber exited with {code} on SIGTERM")
        detached_seen = []

        def healthy_attached() -> bool:
            rows = {r["peer"]: r for r in held_for(c, 0)}
            row = rows.get(healthy_id)
            if row is None or row["state"] != "attached":
                detached_seen.append(time.monotonic())
            return True

        publish_start = time.monotonic()
        made = 0
        while made < publications:
            size = min(BATCH * 10, publications - made)
            stream.publish(size, all_match=True)
            made += size
            healthy_attached()
        publish_seconds = time.monotonic() - publish_start
        owed = stream.matching

        def kept() -> bool:
            healthy_attached()
            rows = {r["peer"]: r for r in held_for(c, 0)}
            return rows.get(stopped_id, {}).get("mail", 0) >= len(owed)

        wait_for(kept, QUIET_TIMEOUT, "the access point to keep every publication")
        wait_delivered(c, 0, healthy, stream)
        restart = time.time()
        start(c, 0, 0)
        connected = (peer_status(stopped) or {}).get("since") or restart
        wait_delivered(c, 0, stopped, stream)
        records = inbox_of(stopped)
        healthy_records = inbox_of(healthy)
        order = {pid: n for n, pid in enumerate(stream.published)}
        received = [r["publication"] for r in sorted(records, key=lambda r: r["sequence"])]
        received = [pid for pid in received if pid in order]
        in_order = received == sorted(received, key=order.__getitem__)
        healthy_status = peer_status(healthy) or {}
        connections_after = healthy_status.get("counters", {}).get("connections")
        log = (healthy / "daemon.log").read_text(errors="replace")
        problems = _daemon_problems(c)
    # when each notification reached the inbox (the daemon's clock is this machine's)
    times = sorted(r["received_at"] for r in records if r["publication"] in owed)
    finished = times[-1]
    drain = len(owed) / max(finished - connected, 1e-6)
    return {
        "scenario": "backlog", "publications": len(stream.published),
        **judge(stream, records),
        "in_publication_order": in_order,
        "healthy": {**judge(stream, healthy_records), "connections_before": connections_before,
                    "connections_after": connections_after,
                    "detached_observations": len(detached_seen),
                    "log_disconnections": log.count("event=disconnected")},
        "publish_rate": round(len(owed) / publish_seconds, 1),
        "drain_seconds_from_start": round(finished - restart, 2),
        "drain_seconds_from_connection": round(finished - connected, 2),
        "drain_seconds_first_to_last": round(times[-1] - times[0], 2),
        "drain_rate": round(drain, 1),
        "problems": problems, "seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip


# -- scenario 3: migrations during a stream ---------------------------------------------------------
def moves(
    *, count: int, seed: int, rate: float = 300.0, directory: Path | None = None
) -> dict[str, Any]:
    if count < 2:
        raise ValueError("at least 2 moves (away and back)")
    rng = random.Random(seed)
    started = time.monotonic()
    with Cluster(4, peers=2, trace=False, directory=directory, settings=MOVE_SETTINGS) as c:
        subscriber, publisher = c.peer_directories  # on sp0 and sp1
        stream = Stream(publisher, random.Random(seed + 1))
        _setup(c, publisher, [subscriber], stream)
        subscriber_id = (peer_status(subscriber) or {})["peer_id"]
        stop = threading.Event()
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                while not stop.is_set():
                    stream.run(BATCH, rate)
            except BaseException as error:  # reported by the main thread
                failure.append(error)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        where = 0
        path = [0]
        repeats = 0
        for n in range(count):
            time.sleep(rng.uniform(0.2, 1.0))
            if n == count - 1:
                target = 0  # back to the first at the end
            else:
                avoid = {where, 0} if n == count - 2 else {where}
                target = rng.choice([k for k in range(4) if k not in avoid])
            if failure:
                break
            moved = time.monotonic()
            before = peer_status(subscriber) or {}
            repeats += before.get("inbox", {}).get("duplicates_ignored", 0)
            code = c.stop_peer(0)
            if code != 0:
                raise DeliveryError(f"the subscriber exited with {code} on SIGTERM")
            start(c, 0, target)
            where = target
            path.append(target)
            print(f"move {n}: to sp{target} in {time.monotonic() - moved:.2f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
        time.sleep(rng.uniform(0.2, 1.0))
        stop.set()
        producer.join()
        if failure:
            raise failure[0]
        quiet = wait_delivered(c, where, subscriber, stream)
        records = inbox_of(subscriber)
        repeats += (peer_status(subscriber) or {}).get("inbox", {}).get("duplicates_ignored", 0)

        left_behind = forgotten_by(c, subscriber_id, [k for k in range(4) if k != where], 30.0)
        problems = _daemon_problems(c)
    return {
        "scenario": "move", "moves": len(path) - 1, "path": path,
        "publications": len(stream.published), **judge(stream, records),
        "repeats_ignored": repeats, "quiet_seconds": round(quiet, 2), "left_at_old_access_points": left_behind,
        "problems": problems, "seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip


# -- scenario 4: the access point killed under its subscriber, which fails over -----------------
def failover(
    *, publications: int, seed: int, rate: float = 250.0, directory: Path | None = None
) -> dict[str, Any]:
    """The subscriber's daemon lists sp0 then sp2 (``--superpeer`` twice); sp0 is killed with
    ``kill -9`` at a seeded point of a stream from sp1, and started again once the stream is
    over. The subscriber goes to sp2 by itself; sp2 finds sp0 silent, catches up from the
    origin for what the subscriber missed, and, once sp0 is back, takes over what sp0 kept.
    Nothing lost or repeated, and sp0 holds nothing for the peer at the end."""
    rng = random.Random(seed)
    started = time.monotonic()
    with Cluster(4, peers=0, trace=False, directory=directory, settings=SUPERPEER_SETTINGS) as c:
        c.peer_directories.extend(c.root / f"peer{j}" for j in range(2))
        c.start_peer(0, 0, fallbacks=(2,))
        c.start_peer(1, 1)
        subscriber, publisher = c.peer_directories
        stream = Stream(publisher, random.Random(seed + 1))
        _setup(c, publisher, [subscriber], stream)
        subscriber_id = (peer_status(subscriber) or {})["peer_id"]
        point = rng.randrange(publications // 4, publications // 2)
        producer = Producer(stream, publications, rate, point)
        producer.reached.wait()
        c.kill(0)
        moved = wait_for(
            lambda: (peer_status(subscriber) or {}).get("superpeer_id") == "sp2",
            QUIET_TIMEOUT,
            "the subscriber to fail over to sp2",
        )
        producer.join()
        c.restart(0)
        quiet = wait_delivered(c, 2, subscriber, stream)
        records = inbox_of(subscriber)
        repeats = (peer_status(subscriber) or {}).get("inbox", {}).get("duplicates_ignored", 0)

        kept = forgotten_by(c, subscriber_id, [0], 60.0)
        problems = _daemon_problems(c)
    return {
        "scenario": "failover", "publications": len(stream.published), "killed_after": point,
        "failover_seconds": round(moved, 2), **judge(stream, records), "repeats_ignored": repeats,
        "quiet_seconds": round(quiet, 2), "left_at_old_access_points": kept,
        "problems": problems, "seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip


def failed(result: dict[str, Any]) -> list[str]:
    """What is wrong in one scenario's result (empty when it passed)."""
    wrong = [f"{k} {result[k]}" for k in ("lost", "duplicated", "unexpected") if result[k]]
    wrong += result["problems"]
    if result["scenario"] == "backlog":
        healthy = result["healthy"]
        wrong += [f"healthy {k} {healthy[k]}" for k in ("lost", "duplicated") if healthy[k]]
        if healthy["connections_after"] != healthy["connections_before"]:
            wrong.append(f"the healthy peer reconnected: {healthy}")
        if healthy["log_disconnections"]:
            wrong.append(f"the healthy peer's daemon log shows disconnections: {healthy}")
        if healthy["detached_observations"]:
            wrong.append(f"the healthy peer was seen detached: {healthy}")
        if not result["in_publication_order"]:
            wrong.append("the backlog arrived out of publication order")
    if result["scenario"] in ("move", "failover") and result["left_at_old_access_points"]:
        wrong.append(f"old access points hold: {result['left_at_old_access_points']}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.delivery", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=20, help="faults per signal (kill, term)")
    parser.add_argument("--publications", type=int, default=1000, help="per round")
    parser.add_argument("--backlog", type=int, default=10000, help="made while a peer is away")
    parser.add_argument("--moves", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenarios", default="kill,term,backlog,move,failover")
    parser.add_argument("--report", default="delivery-report.json")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="delivery-"))
    results = []
    started = time.monotonic()
    for scenario in args.scenarios.split(","):
        where = root / scenario
        try:
            if scenario in ("kill", "term"):
                result = faults(scenario, rounds=args.rounds, publications=args.publications,
                                seed=args.seed, directory=where)  # fmt: skip
            elif scenario == "backlog":
                result = backlog(publications=args.backlog, seed=args.seed, directory=where)
            elif scenario == "move":
                result = moves(count=args.moves, seed=args.seed, directory=where)
            elif scenario == "failover":
                result = failover(publications=args.publications, seed=args.seed, directory=where)
            else:
                parser.error(f"unknown scenario {scenario!r}")
        except (DeliveryError, ClusterError, subprocess.SubprocessError) as error:
            result = {"scenario": scenario, "error": str(error)}
        results.append(result)
        summary = {k: v for k, v in result.items() if k != "rounds_detail"}
        print(json.dumps(summary), flush=True)
    report = {"results": results, "seconds": round(time.monotonic() - started, 1)}
    Path(args.report).write_text(json.dumps(report, indent=1))
    wrong = [(r["scenario"], r["error"]) for r in results if "error" in r]
    wrong += [(r["scenario"], w) for r in results if "error" not in r for w in failed(r)]
    for scenario, problem in wrong:
        print(f"{scenario}: {problem}")
    print(f"{len(results)} scenarios, {len(wrong)} problems, {report['seconds']} s; "
          f"report: {args.report}; daemons' data: {root}")  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
