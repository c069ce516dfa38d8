"""Fault injection with loss accounting, in the style of Jepsen, on real daemons.

    python -m deploy.chaos [--seed 1] [--duration 60] [--superpeers 4] [--peers 4]
                           [--faults kill,pause,peer-kill,move,leave,join,cut,slow,stall,skew,
                                     partition,isolate,crash,peer-isolate]
                           [--hosts loopback|netns] [--overlap N] [--skews SECONDS] [--rate 4]
                           [--report chaos.json] [--plan PLAN.json] [--keep DIR]

starts a TLS cluster of super-peer and peer daemons (on 127.0.0.1 behind TCP proxies,
``deploy.proxy``; or, with ``--hosts netns``, each on a host of its own, ``deploy.hosts``, root
only), runs a generated workload through the peers' control sockets (every peer advertises,
subscribes, unsubscribes and publishes; publications at ``--rate`` per second in all) and, on a
seeded schedule, injects faults, up to ``--overlap`` at once (each on daemons no other fault holds):

==========  ==========================================================================
kill        ``kill -9`` a super-peer, restart it on its data directory after a while
pause       ``SIGSTOP`` a super-peer, ``SIGCONT`` after a while (longer than the failure
            timeout: its neighbours declare it failed, it finds itself evicted and rejoins)
peer-kill   ``kill -9`` a peer daemon, restart it after a while
move        stop a peer daemon, start it again attached to another super-peer
leave       a super-peer leaves cleanly (SIGTERM: its peers are handed over)
join        a new super-peer joins the running backbone
cut         every connection to a super-peer is closed, and new ones refused, for a while
slow        every chunk to and from a super-peer waits 0.2 s, for a while
stall       connections to a super-peer stay open and carry nothing, for a while
skew        ``kill -9`` a super-peer or a peer daemon and restart it at once with its wall
            clock off by up to ten minutes either way (Debian's ``faketime``, its monotonic
            clock untouched: ``deploy.cluster.skewed_environment``)
partition   the super-peers split for a while: two sides of any sizes, halves of the cube, or
            two sides and a bridge that reaches both; packets between the sides vanish (peers
            reach every super-peer); ``--hosts netns`` only
isolate     one super-peer cut from every other one and its peers, for a while (with the
            proxies: its connections closed and refused)
crash       ``kill -9`` a super-peer and never restart it: its place is repaired and its peers
            go to the next super-peer of their lists
peer-isolate  a peer cut from its access point (only), longer than it waits for a silent one:
            it goes to the next super-peer of its list, as in a move; ``--hosts netns`` only
==========  ==========================================================================

With ``--hosts netns``, ``cut`` and ``stall`` isolate the super-peer (packets vanish) and ``slow``
delays every packet out of its host (``tc netem``); every cut is a set of nftables rules on the
hosts, several may hold at once.

``--skews S`` starts every daemon with its wall clock off by a random amount within S seconds
either way (seeded, in the plan). The report's ``clocks`` holds the offsets injected and the
offsets the daemons measured (every super-peer's of its neighbours, every peer's of its access
point), side by side.

After each fault is healed the harness measures the time until the live super-peers are one cube
again (every one a member naming the same cube: ``superpeer._merging``); that time, from
injection, is the fault's time to repair, and from the heal its time to one cube. At the end
everything is healed, the network goes quiet (every super-peer a member with nothing to wait
for, every peer connected), and every peer's inbox is checked against an oracle that knows when
each subscription was active:

* a publication counts once its publisher's daemon acknowledged it (outcome ``published``); one
  whose outcome is unknown (the connection broke before the answer) may or may not be delivered;
  one acknowledged with its access point's copy alone (``alone``) is kept by its peer daemon and
  sent again, maybe through another access point (``peer.kept``), so it may be accepted again
  any time later;
* it is *owed* to a peer with a matching subscription acknowledged more than ``--settle`` seconds
  before the publication was sent and not withdrawn until after it was acknowledged (a
  subscription needs a moment to reach the whole backbone; withdrawal likewise);
* it is *allowed* for a matching subscription whose window overlaps the publication's at all,
  extended by ``--settle`` at the end and by the daemons' catch-up margin (5 s) at the start (a
  catch-up asks for a little more than strictly needed, against clock differences); a request
  whose outcome is unknown counts as possibly done, at any time after it was sent (its peer
  daemon keeps it in doubt and sends it again once connected);
* **lost**: owed and not in the inbox; **unexpected**: in the inbox and not allowed;
  **duplicated**: in the inbox more than once.

Losses are attributed to the faults whose window (injection to repair, plus ``--settle``) contains
the publication's time. Any daemon that exited on its own or wrote a traceback is a crash.
The exit code is 1 on any loss, duplicate, unexpected notification or crash. The report (JSON) holds
the plan (faults and operations with their times), every operation's outcome, per-peer and
per-fault figures; ``--plan`` runs a report's plan again exactly (same faults, same operations at
the same offsets). The daemons run on short timeouts (``SUPERPEER_SETTINGS``) so that many faults
fit in a run; ``--default-timeouts`` runs them on their own defaults, as deployed (the plan keeps
it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import qel
from deploy.cluster import Cluster, ClusterError, free_ports
from deploy.driver import cube_problems, quiet_problems
from deploy.hosts import HostsError, NetnsHosts, slow_unavailable, unavailable
from deploy.proxy import Proxies
from peer.control import ControlClient, ControlUnavailable
from superpeer.cli import ControlUnavailable as SuperPeerUnavailable

FAULTS: Final = (
    "kill", "pause", "peer-kill", "move", "leave", "join", "cut", "slow", "stall", "skew",
    "partition", "isolate", "crash", "peer-isolate",
)  # fmt: skip
UNREACHABLE: Final = (ControlUnavailable, SuperPeerUnavailable, OSError)
"""A daemon's control socket does not answer (it is down, or was never started)."""
HOSTS_ONLY: Final = frozenset({"partition", "peer-isolate"})
"""Faults that need hosts of their own (``--hosts netns``): the proxies cut a super-peer from
all or nothing."""
HOLDS: Final = {
    "pause": (4.0, 5.0),
    "partition": (8.0, 20.0),
    "isolate": (4.0, 8.0),
    "peer-isolate": (12.0, 16.0),
    "crash": (0.0, 0.0),
}
"""How long a fault of each kind holds (seconds, drawn between); (1, 3) for the others."""
MAX_SKEW: Final = 600.0
"""The largest clock error the ``skew`` fault gives a daemon (seconds, either way)."""
SUPERPEER_SETTINGS: Final = """[limits]
heartbeat_seconds = 0.5
failure_seconds = 3.0
wedged_seconds = 30.0
reform_seconds = 9.0
clock_sample_seconds = 2.0
[recovery]
handover_seconds = 3.0
"""
"""Failures are detected in 3 s (the default 10 s would let few faults fit in a short run), and
peers hear from their access point every 2 s. The wedge watchdog scales with them: 10 failure
timeouts (the defaults give it 6). At 60 s, 20 of them, it left super-peers that no repair
could reach out of the cube for a minute after each heal; at 30 s a replay of the harness's
schedules in the simulator had one fault in 30 (against one in 4) not followed by one cube
within 90 s, and at 20 s more rejoins than it saved (``BENCHMARKS.md``, stop 53). A side of a
cut re-forms after three failure timeouts, as with the defaults (``BENCHMARKS.md``, stop 68)."""
PEER_SETTINGS: Final = "silence_seconds = 8.0\n"
"""A peer takes its access point for gone after 8 s without a word (the default 45 s would let
few faults fit)."""
PREFIX: Final = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
CREATORS: Final = ("Nejdl", "Koubarakis", "Chirita", "Siberski", "Tryfonopoulos", "Idreos")
REQUEST_TIMEOUT: Final = 60.0
CATCHUP_MARGIN: Final = 5.0
"""The daemons' ``catchup_margin_seconds``: a catch-up (after a repair, a restart, a move) asks
for a little more than strictly needed, so a new subscription may be served publications made
up to this long before it; the oracle allows them (and only them)."""


# -- the plan --------------------------------------------------------------------------------------
def make_plan(
    *,
    seed: int,
    duration: float,
    superpeers: int,
    peers: int,
    faults: list[str],
    rate: float,
    skews: float = 0.0,
    overlap: int = 1,
    hosts: str = "loopback",
) -> dict[str, Any]:
    """Operations and faults, with their offsets from the start of the run: everything a run
    does that is not timing."""
    rng = random.Random(seed)
    clocks = {
        "superpeers": {str(k): round(rng.uniform(-skews, skews)) for k in range(superpeers)},
        "peers": {str(j): round(rng.uniform(-skews, skews)) for j in range(peers)},
    }
    ops: list[dict[str, Any]] = []
    for j in range(peers):
        ops.append({"at": 0.0, "peer": j, "op": "advertise"})
    subscriptions: dict[int, list[str]] = {j: [] for j in range(peers)}
    count = 0

    def subscribe(at: float, j: int) -> None:
        nonlocal count
        count += 1
        sid = f"s{count}"
        subscriptions[j].append(sid)
        ops.append({"at": at, "peer": j, "op": "subscribe", "id": sid, "query": query(rng)})

    for j in range(peers):
        subscribe(0.0, j)
    t = 1.0
    publications = 0
    while t < duration:
        j = rng.randrange(peers)
        roll = rng.random()
        if roll < 0.8:
            publications += 1
            ops.append({"at": round(t, 3), "peer": j, "op": "publish", "id": f"p{publications}",
                        "document": document(rng, f"p{publications}")})  # fmt: skip
        elif roll < 0.9 or not subscriptions[j]:
            subscribe(round(t, 3), j)
        else:
            sid = subscriptions[j].pop(rng.randrange(len(subscriptions[j])))
            ops.append({"at": round(t, 3), "peer": j, "op": "unsubscribe", "id": sid})
        t += rng.expovariate(rate / 0.8)
    schedule = []
    t = 3.0
    kinds = list(faults)
    rng.shuffle(kinds)
    while t < duration - 8 and kinds:
        kind = kinds[len(schedule) % len(kinds)]
        hold = round(rng.uniform(*HOLDS.get(kind, (1.0, 3.0))), 2)
        fault = {"at": round(t, 2), "kind": kind, "hold": hold, "pick": rng.random()}
        if kind == "skew":
            fault["seconds"] = round(rng.uniform(-MAX_SKEW, MAX_SKEW))
        if kind == "partition":
            fault["shape"] = rng.choice(["halves", "split", "bridge"])
            fault["cut"] = rng.random()
        schedule.append(fault)
        t += (hold + rng.uniform(1.0, 3.0)) / overlap
    return {"seed": seed, "duration": duration, "superpeers": superpeers, "peers": peers,
            "faults": schedule, "ops": ops, "clocks": clocks, "overlap": overlap,
            "hosts": hosts}  # fmt: skip


def picked(free: list[int], pick: float) -> int:
    """The one of ``free`` that a fault's ``pick`` (in [0, 1)) names."""
    return free[int(pick * len(free)) % len(free)]


def partition_sides(free: list[int], fault: dict[str, Any]) -> tuple[list[int], list[int]]:
    """The two sides a ``partition`` fault cuts ``free`` into (``fault["shape"]``): halves, two
    sides of any sizes (``fault["cut"]``), or two sides and a bridge (in both)."""
    order = random.Random(fault["pick"]).sample(free, len(free))
    size = (
        len(order) // 2 if fault["shape"] == "halves" else 1 + int(fault["cut"] * (len(order) - 1))
    )
    side, other = order[:size], order[size:]
    if fault["shape"] == "bridge" and len(other) > 1:
        side = [*side, other[0]]
    return side, other


def query(rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:
        return f"X : t(X, dc:date, D), D >= {rng.randrange(1990, 2025)}"
    if kind == 1:
        return f'X : t(X, dc:creator, C), C contains "{rng.choice(CREATORS)}"'
    return (
        f"X : t(X, dc:title, T), t(X, dc:date, D), D < {rng.randrange(1995, 2030)}, "
        f"D > {rng.randrange(1985, 2000)}"
    )


def document(rng: random.Random, pid: str) -> str:
    return (
        f'{PREFIX}<http://example.org/chaos/{pid}> dc:title "On {pid}" ; '
        f'dc:creator "{rng.choice(CREATORS)}" ; dc:date {rng.randrange(1985, 2030)} .\n'
    )


# -- running ---------------------------------------------------------------------------------------
@dataclass
class Outcome:
    op: dict[str, Any]
    sent: float = 0.0
    done: float = 0.0
    outcome: str = "not run"
    """``ok``, ``failed`` (definitely not done), ``unknown`` (may or may not be done)."""
    detail: str = ""


@dataclass
class FaultRecord:
    kind: str
    target: str
    at: float
    hold: float
    healed: float = 0.0
    repaired: float | None = None
    """When the live super-peers were one cube again after the heal."""
    note: str = ""

    @property
    def repair_seconds(self) -> float | None:
        return None if self.repaired is None else round(self.repaired - self.at, 3)

    @property
    def one_cube_seconds(self) -> float | None:
        """From the heal to one cube again."""
        return None if self.repaired is None else round(max(0.0, self.repaired - self.healed), 3)


@dataclass
class Run:
    plan: dict[str, Any]
    settle: float
    early: float
    cluster: Cluster
    proxies: Proxies | None
    hosts: NetnsHosts | None = None
    started: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    expected_exits: set[int] = field(default_factory=set)  # pids we killed or stopped
    crashed: set[int] = field(default_factory=set)
    """Super-peers killed for good (``crash``)."""
    held: set[str] = field(default_factory=set)
    """Daemons a fault holds now (``sp3``, ``peer1``): another fault picks others."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.started

    # -- operations ----------------------------------------------------------------------------
    def worker(self, j: int, jobs: queue.Queue) -> None:
        while (op := jobs.get()) is not None:
            outcome = Outcome(op, sent=self.now())
            outcome.outcome, outcome.detail = self.execute(j, op)
            outcome.done = self.now()
            with self._lock:
                self.outcomes.append(outcome)

    def execute(self, j: int, op: dict[str, Any]) -> tuple[str, str]:
        path = self.cluster.peer_directories[j] / "control.sock"
        arguments = {
            "advertise": lambda: {"advertisement": json.dumps({"schemas": ["dc"]})},
            "subscribe": lambda: {"query": op["query"], "id": op["id"]},
            "unsubscribe": lambda: {"id": op["id"]},
            "publish": lambda: {"data": op["document"], "id": op["id"]},
        }[op["op"]]()
        client = ControlClient(path, timeout=REQUEST_TIMEOUT)
        try:
            control = client.__enter__()
        except UNREACHABLE as error:
            return "failed", f"daemon not running: {error}"[:200]
        try:
            ok, body = control.call(op["op"], **arguments)
        except UNREACHABLE as error:
            # the daemon stopped with the request in hand: it may have gone out
            return "unknown", f"control socket: {error}"[:200]
        finally:
            client.close()
        if ok:
            # held by its access point alone: its peer daemon keeps it and sends it again,
            # maybe through another access point later (``peer.kept``)
            alone = any(r.get("alone") for r in body.get("results", ()))
            return "ok", "alone" if alone else ""
        if body.get("error") == "unavailable":
            results = body.get("results", [])
            if results and all(r.get("outcome") == "not sent" for r in results):
                return "failed", str(body.get("message"))[:200]
            return "unknown", str(body.get("message"))[:200]
        return "failed", f"{body.get('error')}: {body.get('message')}"[:200]

    # -- faults --------------------------------------------------------------------------------
    def _take(self, candidates: list[int], pick: float, prefix: str) -> int | None:
        """One of ``candidates`` no other fault holds (by ``pick``), now held; None: none."""
        with self._lock:
            free = [c for c in candidates if f"{prefix}{c}" not in self.held]
            if not free:
                return None
            chosen = picked(free, pick)
            self.held.add(f"{prefix}{chosen}")
            return chosen

    def inject(self, fault: dict[str, Any]) -> FaultRecord:
        """Inject ``fault``, hold it, heal it, and wait for one cube again (the record)."""
        record = FaultRecord(fault["kind"], "", self.now(), fault["hold"])
        with self._lock:
            self.faults.append(record)
        try:
            self._inject(fault, record)
        except (ClusterError, HostsError, *UNREACHABLE) as error:
            # a daemon that would not come back (it is also a crash, if it exited), or a host
            # that would not take the fault: it is recorded with why, and the run goes on
            record.note += f" failed: {error}"
        finally:
            with self._lock:
                self.held -= {t for t in record.target.split(",") if t}
        record.healed = self.now()
        record.repaired = self.wait_one_cube(90)
        if record.repaired is None:
            record.note += " not one cube within 90 s"
        return record

    def _inject(self, fault: dict[str, Any], record: FaultRecord) -> None:
        kind, hold, pick = fault["kind"], fault["hold"], fault["pick"]
        cluster = self.cluster
        live = [k for k in cluster.live() if k not in self.crashed]
        k = -1
        if kind in ("kill", "pause", "leave", "cut", "slow", "stall", "isolate", "crash"):
            if kind in ("leave", "crash") and len(live) <= 2:
                kind = record.kind = "join"  # keep a backbone to speak of
            else:
                taken = self._take(live, pick, "sp")
                if taken is None:
                    record.note = "every super-peer is held by another fault: none injected"
                    return
                k = taken
                record.target = f"sp{k}"
        if kind == "kill":
            self._expect(cluster.processes[k])
            cluster.kill(k)
            time.sleep(hold)
            cluster.restart(k)
        elif kind == "pause":
            cluster.pause(k)
            time.sleep(hold)
            cluster.resume(k)
        elif kind == "leave":
            self._expect(cluster.processes[k])
            cluster.leave(k)
        elif kind == "join":
            k = cluster.add()
            record.target = f"sp{k}"
        elif kind in ("cut", "slow", "stall", "isolate") and self.hosts is not None:
            host = f"sp{k}"
            if kind == "slow":
                self.hosts.slow(host, 0.2)
                time.sleep(hold)
                self.hosts.slow(host, 0.0)
            else:  # packets vanish, both ways, while the process runs on
                cut = self.hosts.isolate(host)
                time.sleep(hold)
                self.hosts.heal(cut)
        elif kind in ("cut", "slow", "stall", "isolate"):
            assert self.proxies is not None
            listen = cluster.addresses[k]
            state = "cut" if kind == "isolate" else kind
            self.proxies.set(listen, state, 0.2 if kind == "slow" else 0.0)
            time.sleep(hold)
            self.proxies.set(listen, "pass")
        elif kind == "crash":
            self._expect(cluster.processes[k])
            cluster.kill(k)
            with self._lock:
                self.crashed.add(k)
        elif kind == "partition":
            self._partition(fault, record, live, hold)
        elif kind == "peer-isolate":
            assert self.hosts is not None, "peer-isolate needs --hosts netns"
            j = self._take(list(range(len(cluster.peer_directories))), pick, "peer")
            if j is None:
                return
            record.target = f"peer{j}"
            access = self.superpeer_of(j)
            if access is None:
                record.note = "its access point is not known: nothing cut"
                return
            record.note = f"from {access}"
            cut = self.hosts.cut_pair(f"peer{j}", access)
            time.sleep(hold)
            self.hosts.heal(cut)
        elif kind == "skew":
            self._skew(record, fault["seconds"], pick, live)
        elif kind in ("peer-kill", "move"):
            j = self._take(list(range(len(cluster.peer_directories))), pick, "peer")
            if j is None:
                return
            record.target = f"peer{j}"
            self._expect(cluster.peer_processes[j])
            if kind == "peer-kill":
                cluster.kill_peer(j)
                time.sleep(hold)
                cluster.start_peer(j, self.access_point(j), wait=False)
            else:
                cluster.stop_peer(j)
                others = [k for k in live if f"sp{k}" != self.superpeer_of(j)] or live
                k = others[int(pick * 7919) % len(others)]
                record.note = f"to sp{k}"
                cluster.start_peer(j, k, wait=False)

    def _partition(
        self, fault: dict[str, Any], record: FaultRecord, live: list[int], hold: float
    ) -> None:
        """Split the live super-peers (``fault["shape"]``): halves, two sides of any sizes, or
        two sides and a bridge; every peer reaches both sides."""
        assert self.hosts is not None, "partition needs --hosts netns"
        with self._lock:
            free = [k for k in live if f"sp{k}" not in self.held]
            if len(free) < 2:
                record.note = "too few super-peers free of other faults: none injected"
                return
            self.held |= {f"sp{k}" for k in free}
        side, other = partition_sides(free, fault)
        peers = [f"peer{j}" for j in range(len(self.cluster.peer_directories))]
        rest = [k for k in self.cluster.live() if k not in free]  # held by other faults
        groups = [
            [*(f"sp{k}" for k in side), *(f"sp{k}" for k in rest), *peers],
            [*(f"sp{k}" for k in other), *(f"sp{k}" for k in rest), *peers],
        ]
        record.target = ",".join(f"sp{k}" for k in free)
        record.note = f"{fault['shape']}: {sorted(side)} | {sorted(other)}"
        cut = self.hosts.partition(groups)
        time.sleep(hold)
        self.hosts.heal(cut)

    def _skew(self, record: FaultRecord, seconds: float, pick: float, live: list[int]) -> None:
        """Restart a super-peer (half the draws) or a peer daemon with its clock ``seconds``
        off: killed (-9), started again at once under ``faketime``."""
        cluster = self.cluster
        record.note = f"{seconds:+.0f} s"
        if pick < 0.5:
            k = self._take(live, pick * 2, "sp")
            if k is None:
                return
            record.target = f"sp{k}"
            cluster.skews[k] = seconds
            self._expect(cluster.processes[k])
            cluster.kill(k)
            cluster.restart(k)
        else:
            j = self._take(list(range(len(cluster.peer_directories))), (pick - 0.5) * 2, "peer")
            if j is None:
                return
            record.target = f"peer{j}"
            cluster.peer_skews[j] = seconds
            self._expect(cluster.peer_processes[j])
            cluster.kill_peer(j)
            cluster.start_peer(j, self.access_point(j), wait=False)

    def clock_figures(self) -> dict[str, Any]:
        """The offsets injected and those the daemons measured, side by side (each as the other
        clock minus this one, as the daemons report them)."""
        cluster = self.cluster
        skew = {f"sp{k}": cluster.skews.get(k, 0.0) for k in range(len(cluster.directories))}
        pairs = []
        for k in cluster.live():
            try:
                measured = cluster.status(k).get("clock", {})
            except (*UNREACHABLE, ValueError):
                continue
            for node, figures in sorted(measured.get("neighbours", {}).items()):
                injected = skew.get(node, 0.0) - skew[f"sp{k}"]
                pairs.append({"clock": node, "seen_by": f"sp{k}", "injected": injected,
                              "measured": figures["offset"], "error": figures["error"]})  # fmt: skip
        for j, directory in enumerate(cluster.peer_directories):
            try:
                with ControlClient(directory / "control.sock", timeout=5) as control:
                    ok, body = control.call("status")
            except UNREACHABLE:
                continue
            if not ok or body.get("clock_offset_seconds") is None:
                continue
            access = body.get("superpeer_id") or ""
            injected = skew.get(access, 0.0) - cluster.peer_skews.get(j, 0.0)
            pairs.append({"clock": access, "seen_by": f"peer{j}", "injected": injected,
                          "measured": body["clock_offset_seconds"],
                          "error": body.get("clock_error_seconds")})  # fmt: skip
        worst = max((abs(p["measured"] - p["injected"]) for p in pairs), default=None)
        return {"superpeers": cluster.skews, "peers": cluster.peer_skews,
                "measured": pairs, "largest_difference": worst}  # fmt: skip

    def _expect(self, process: subprocess.Popen | None) -> None:
        if process is not None:
            self.expected_exits.add(process.pid)

    def superpeer_of(self, j: int) -> str | None:
        try:
            with ControlClient(self.cluster.peer_directories[j] / "control.sock", timeout=5) as c:
                ok, body = c.call("status")
        except UNREACHABLE:
            return None
        return body.get("superpeer_id") if ok else None

    def access_point(self, j: int) -> int:
        """Where peer ``j`` was attached last (a restarted peer goes back there; its daemon
        follows a hand-over on its own)."""
        state = json.loads((self.cluster.peer_directories[j] / "state.json").read_text())
        address = (state.get("access_point") or {}).get("address", "")
        live = self.cluster.live()
        if address in self.cluster.addresses and self.cluster.addresses.index(address) in live:
            return self.cluster.addresses.index(address)
        return live[j % len(live)]

    # -- quiet -----------------------------------------------------------------------------------
    def quiet_problems(self) -> list[str]:
        problems = []
        statuses = []
        for k in self.cluster.live():
            try:
                statuses.append(self.cluster.status(k))
            except Exception as error:
                problems.append(f"sp{k}: {error}")
        problems += quiet_problems(statuses)
        # one cube, its positions held exactly once: a super-peer the others repaired out of
        # the cube during a cut may still take itself for a member until it hears so (it is
        # evicted, rejoins and catches up afterwards; quiet before then is not quiet)
        problems += cube_problems(statuses) if len(statuses) == len(self.cluster.live()) else []
        for j in range(len(self.cluster.peer_directories)):
            if not self.cluster.peer_running(j):
                problems.append(f"peer{j} is not running")
                continue
            try:
                with ControlClient(
                    self.cluster.peer_directories[j] / "control.sock", timeout=5
                ) as control:
                    ok, body = control.call("status")
            except UNREACHABLE as error:
                problems.append(f"peer{j}: {error}")
                continue
            if not ok or not body.get("connected"):
                problems.append(f"peer{j} is not connected")
            elif body.get("in_doubt"):
                problems.append(f"peer{j} has requests in doubt")
        return problems

    def wait_one_cube(self, timeout: float) -> float | None:
        """When (run time) the live super-peers are all members of one cube; None if not
        within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            cubes = set()
            for k in self.cluster.live():
                try:
                    status = self.cluster.status(k)
                except (*UNREACHABLE, ValueError):
                    cubes.add(None)
                    continue
                cube = status.get("cube")
                cubes.add(None if status.get("state") != "member" or not cube else tuple(cube))
            if len(cubes) == 1 and None not in cubes:
                return self.now()
            time.sleep(0.2)
        return None

    def wait_quiet(self, timeout: float) -> tuple[bool, list[str]]:
        deadline = time.monotonic() + timeout
        stable, problems = 0, ["not asked"]
        while time.monotonic() < deadline:
            problems = self.quiet_problems()
            stable = stable + 1 if not problems else 0
            if stable >= 2:
                return True, []
            time.sleep(0.2)
        return False, problems


def inbox_of(directory: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    after = 0
    with ControlClient(directory / "control.sock", timeout=30) as control:
        while True:
            ok, body = control.call("inbox", after=str(after))
            if not ok or not body["records"]:
                return records
            records += body["records"]
            after = body["records"][-1]["sequence"]


# -- the oracle ------------------------------------------------------------------------------------
def judge(run: Run, inboxes: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    settle, early = run.settle, run.early
    publications: dict[str, tuple[Outcome, qel.Publication]] = {}
    windows: dict[int, list[tuple[Any, float, float, float, float]]] = {}
    """Per peer: (query, required_from, required_until, allowed_from, allowed_until)."""
    subscribed: dict[str, Outcome] = {}
    withdrawn: dict[str, Outcome] = {}
    owners = {}
    for outcome in run.outcomes:
        op = outcome.op
        if op["op"] == "publish":
            [publication] = qel.parse_publications(op["document"], "turtle", id=op["id"])
            publications[op["id"]] = (outcome, publication)
            owners[op["id"]] = op["peer"]
        elif op["op"] == "subscribe":
            subscribed[op["id"]] = outcome
        elif op["op"] == "unsubscribe":
            withdrawn[op["id"]] = outcome
    inf = float("inf")
    for sid, outcome in subscribed.items():
        if outcome.outcome == "failed":
            continue
        query = qel.parse_subscription(outcome.op["query"])
        required_from = outcome.done + settle if outcome.outcome == "ok" else inf
        allowed_from = outcome.sent - early
        end = withdrawn.get(sid)
        if end is None or end.outcome == "failed":
            required_until, allowed_until = inf, inf
        elif end.outcome == "ok":
            required_until, allowed_until = end.sent, end.done + settle
        else:
            required_until, allowed_until = end.sent, inf
        windows.setdefault(outcome.op["peer"], []).append(
            (query, required_from, required_until, allowed_from, allowed_until)
        )
    per_peer = {}
    lost_at: list[tuple[str, int, float]] = []
    totals = {"owed": 0, "delivered": 0, "lost": 0, "duplicated": 0, "unexpected": 0}
    for j in range(len(run.cluster.peer_directories)):
        records = inboxes.get(j, [])
        seen: dict[str, int] = {}
        for record in records:
            seen[record["publication"]] = seen.get(record["publication"], 0) + 1
        owed, allowed = set(), set()
        for pid, (outcome, publication) in publications.items():
            if outcome.outcome == "failed":
                continue
            # one whose outcome is unknown stays in doubt at its peer daemon, which sends it
            # again once connected: it may be accepted any time after it was sent; so may one
            # acknowledged alone (``peer.kept``: sent again until a second copy is made)
            accepted_by = outcome.done if (outcome.outcome, outcome.detail) == ("ok", "") else inf
            for query, rf, ru, af, au in windows.get(j, []):
                if not qel.matches(query, publication):
                    continue
                if outcome.outcome == "ok" and rf < outcome.sent and ru > outcome.done:
                    owed.add(pid)
                if af < accepted_by and au > outcome.sent:
                    allowed.add(pid)
        lost = sorted(owed - set(seen))
        unexpected = sorted(set(seen) - allowed - owed)
        duplicated = sorted(pid for pid, n in seen.items() if n > 1)
        per_peer[f"peer{j}"] = {
            "owed": len(owed), "delivered": len(seen), "lost": lost,
            "unexpected": unexpected, "duplicated": duplicated,
        }  # fmt: skip
        lost_at += [(pid, j, publications[pid][0].sent) for pid in lost]
        totals["owed"] += len(owed)
        totals["delivered"] += len(set(seen) & owed)
        totals["lost"] += len(lost)
        totals["duplicated"] += len(duplicated)
        totals["unexpected"] += len(unexpected)
    per_fault: dict[str, dict[str, Any]] = {}
    for record in run.faults:
        entry = per_fault.setdefault(
            record.kind,
            {"injected": 0, "lost": 0, "repair_seconds": [], "one_cube": [], "unrepaired": 0},
        )
        entry["injected"] += 1
        if record.repair_seconds is None:
            entry["unrepaired"] += 1
        else:
            entry["repair_seconds"].append(record.repair_seconds)
            entry["one_cube"].append(record.one_cube_seconds)
        end = (record.repaired or run.now()) + settle
        entry["lost"] += sum(1 for _, _, t in lost_at if record.at - settle <= t <= end)
    for entry in per_fault.values():
        times = entry.pop("repair_seconds")
        entry["mean_repair_seconds"] = round(sum(times) / len(times), 3) if times else None
        entry["max_repair_seconds"] = max(times) if times else None
        after = entry.pop("one_cube")
        entry["max_one_cube_seconds"] = max(after) if after else None
    operations: dict[str, dict[str, int]] = {}
    for outcome in run.outcomes:
        counts = operations.setdefault(outcome.op["op"], {})
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
        if outcome.detail == "alone":  # (``peer.kept``)
            counts["ok_alone"] = counts.get("ok_alone", 0) + 1
    return {"totals": totals, "per_peer": per_peer, "per_fault": per_fault,
            "operations": operations}  # fmt: skip


def crashes(run: Run) -> list[str]:
    found = []
    cluster = run.cluster
    logs = [d / "stderr.log" for d in cluster.directories]
    logs += [d / "daemon.log" for d in cluster.peer_directories]
    for log in logs:
        if log.exists() and "Traceback" in log.read_text(errors="replace"):
            found.append(f"{log.parent.name}: a traceback in {log.name}")
    processes = [p for p in cluster.processes if p is not None]
    processes += [p for p in cluster.peer_processes if p is not None]
    for process in processes:
        code = process.poll()
        if code is not None and process.pid not in run.expected_exits:
            found.append(f"pid {process.pid} ({' '.join(process.args[3:5])}) exited with {code}")
    return found


# -- main ------------------------------------------------------------------------------------------
def run_plan(plan: dict[str, Any], *, settle: float, directory: Path) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        hosts = None
        proxies: Proxies | None = None
        front = None
        if plan.get("hosts", "loopback") == "netns":
            hosts = stack.enter_context(NetnsHosts())
        else:
            proxies = Proxies()
            stack.callback(proxies.close)

            def front(listen: str) -> str:
                public = f"127.0.0.1:{free_ports(1)[0]}"
                proxies.add(public, listen)
                return public

        clocks = plan.get("clocks", {})
        cluster = Cluster(
            plan["superpeers"], directory=directory, peers=plan["peers"], front=front,
            settings=plan.get("settings", SUPERPEER_SETTINGS), trace=True, hosts=hosts,
            peer_settings=plan.get("peer_settings", PEER_SETTINGS),
            skews={int(k): s for k, s in clocks.get("superpeers", {}).items()},
            peer_skews={int(j): s for j, s in clocks.get("peers", {}).items()},
            peer_fallbacks=True,
        )  # fmt: skip
        with cluster:
            run = Run(plan, settle, CATCHUP_MARGIN, cluster, proxies, hosts)
            return play(run, plan)
    raise AssertionError("unreachable")


def play(run: Run, plan: dict[str, Any]) -> dict[str, Any]:
    """The workload and the faults (up to ``plan["overlap"]`` at once), then the verdict."""
    cluster = run.cluster
    report: dict[str, Any] = {"plan": plan}
    ok, problems = run.wait_quiet(60)
    if not ok:
        raise ClusterError(f"the cluster did not go quiet before the run: {problems}")
    jobs = [queue.Queue() for _ in range(plan["peers"])]
    workers = [
        threading.Thread(target=run.worker, args=(j, jobs[j]), daemon=True)
        for j in range(plan["peers"])
    ]
    for worker in workers:
        worker.start()
    run.started = time.monotonic()

    def feed() -> None:
        for op in plan["ops"]:
            delay = op["at"] - run.now()
            if delay > 0:
                time.sleep(delay)
            jobs[op["peer"]].put(op)

    slots = threading.BoundedSemaphore(plan.get("overlap", 1))  # a fault active at most each

    def fault(planned: dict[str, Any]) -> None:
        try:
            record = run.inject(planned)
        finally:
            slots.release()
        one = record.one_cube_seconds
        after = "not one cube" if one is None else f"one cube {one:.1f} s after the heal"
        print(f"{record.at:7.1f}s  {record.kind:<12} {record.target} {record.note}; {after}",
              flush=True)  # fmt: skip

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    active: list[threading.Thread] = []
    for planned in plan["faults"]:
        delay = planned["at"] - run.now()
        if delay > 0:
            time.sleep(delay)
        slots.acquire()  # wait for a fault to end when as many as --overlap are active
        thread = threading.Thread(target=fault, args=(planned,), daemon=True)
        thread.start()
        active.append(thread)
    for thread in active:
        thread.join()
    feeder.join()
    for job in jobs:
        job.put(None)
    for worker in workers:
        worker.join(timeout=2 * REQUEST_TIMEOUT)
    if run.proxies is not None:
        run.proxies.heal()
    if run.hosts is not None:
        run.hosts.heal()
    for j in range(plan["peers"]):
        if not cluster.peer_running(j):
            cluster.start_peer(j, run.access_point(j), wait=False)
    quiet, problems = run.wait_quiet(120)
    report["quiet"] = quiet
    report["problems_at_end"] = problems
    inboxes = {}
    for j, peer_directory in enumerate(cluster.peer_directories):
        try:
            inboxes[j] = inbox_of(peer_directory)
        except UNREACHABLE as error:
            report.setdefault("problems_at_end", []).append(f"peer{j} inbox: {error}")
    report.update(judge(run, inboxes))
    report["clocks"] = run.clock_figures()
    report["faults"] = [
        {**asdict(r), "repair_seconds": r.repair_seconds, "one_cube_seconds": r.one_cube_seconds}
        for r in run.faults
    ]
    report["operations_log"] = [asdict(o) for o in run.outcomes]
    report["crashes"] = crashes(run)
    return report


def table(report: dict[str, Any]) -> str:
    lines = [
        "fault         injected  lost  mean repair s  max repair s  max heal->one cube s  "
        "unrepaired"
    ]
    for kind, entry in sorted(report["per_fault"].items()):
        mean = entry["mean_repair_seconds"]
        peak = entry["max_repair_seconds"]
        after = entry.get("max_one_cube_seconds")
        lines.append(
            f"{kind:<13} {entry['injected']:>8}  {entry['lost']:>4}  "
            f"{'-' if mean is None else f'{mean:.2f}':>13}  "
            f"{'-' if peak is None else f'{peak:.2f}':>12}  "
            f"{'-' if after is None else f'{after:.2f}':>20}  {entry['unrepaired']:>10}"
        )
    totals = report["totals"]
    lines.append(
        f"notifications owed {totals['owed']}, delivered {totals['delivered']}, "
        f"lost {totals['lost']}, duplicated {totals['duplicated']}, "
        f"unexpected {totals['unexpected']}; crashes {len(report['crashes'])}; "
        f"quiet at the end: {report['quiet']}"
    )
    ops = ", ".join(
        f"{op} " + "/".join(f"{n} {o}" for o, n in sorted(c.items()))
        for op, c in sorted(report["operations"].items())
    )
    lines.append(f"operations: {ops}")
    return "\n".join(lines)


def failed(report: dict[str, Any]) -> bool:
    totals = report["totals"]
    return bool(
        totals["lost"] or totals["duplicated"] or totals["unexpected"] or report["crashes"]
        or not report["quiet"]
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.chaos", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of workload")
    parser.add_argument("--superpeers", type=int, default=4)
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument(
        "--faults", help="comma-separated fault kinds (default: every kind the hosts allow)"
    )
    parser.add_argument("--rate", type=float, default=4.0, help="operations per second")
    parser.add_argument("--skews", type=float, default=0.0,
                        help="every daemon's clock off by up to this many seconds either way")  # fmt: skip
    parser.add_argument("--overlap", type=int, default=1, help="faults active at once, at most")
    parser.add_argument("--hosts", choices=("loopback", "netns"), default="loopback",
                        help="netns: every daemon on a host of its own (root only)")  # fmt: skip
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds a subscription or withdrawal takes to reach everywhere")  # fmt: skip
    parser.add_argument("--default-timeouts", action="store_true",
                        help="the daemons' own timeouts (failure 10 s, re-forming 30 s), not the "
                        "harness's short ones: as a deployment runs")  # fmt: skip
    parser.add_argument("--report", default="chaos-report.json")
    parser.add_argument("--plan", help="run the plan of an earlier report again")
    parser.add_argument("--keep", help="keep the daemons' data here (default: a temp dir)")
    args = parser.parse_args(argv)
    every = [f for f in FAULTS if args.hosts == "netns" or f not in HOSTS_ONLY]
    no_slow = slow_unavailable() if args.hosts == "netns" and unavailable() is None else None
    if no_slow is not None:
        if args.faults and "slow" in args.faults.split(","):
            parser.error(f"slow on --hosts netns: {no_slow}")
        every.remove("slow")
        if not args.faults:
            print(f"slow is left out of the default kinds: {no_slow}", file=sys.stderr)
    faults = [f for f in args.faults.split(",") if f] if args.faults else every
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        parser.error(f"unknown fault kinds {unknown} (known: {', '.join(FAULTS)})")
    if args.superpeers < 2 or args.peers < 2:
        parser.error("--superpeers and --peers must be at least 2")
    if args.overlap < 1:
        parser.error("--overlap must be at least 1")
    needing = sorted(set(faults) & HOSTS_ONLY)
    if needing and args.hosts != "netns":
        parser.error(f"{', '.join(needing)} need --hosts netns (the proxies cut all or nothing)")
    if args.plan:
        plan = json.loads(Path(args.plan).read_text())["plan"]
    else:
        plan = make_plan(
            seed=args.seed, duration=args.duration, superpeers=args.superpeers,
            peers=args.peers, faults=faults, rate=args.rate, skews=args.skews,
            overlap=args.overlap, hosts=args.hosts,
        )  # fmt: skip
    if args.default_timeouts:
        plan["settings"] = plan["peer_settings"] = ""  # kept in the report: ``--plan`` repeats it
    directory = Path(args.keep or tempfile.mkdtemp(prefix="chaos-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    report = run_plan(plan, settle=args.settle, directory=directory)
    Path(args.report).write_text(json.dumps(report, indent=1, default=str))
    print(table(report))
    for problem in report["crashes"] + report.get("problems_at_end", []):
        print(f"problem: {problem}")
    for peer, figures in sorted(report["per_peer"].items()):
        for what in ("lost", "unexpected", "duplicated"):
            if figures[what]:
                print(f"{peer} {what}: {' '.join(figures[what][:20])}")
    print(f"report: {args.report}; daemons' data: {directory}")
    return 1 if failed(report) else 0


if __name__ == "__main__":
    sys.exit(main())
