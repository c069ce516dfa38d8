"""Replay a simulator workload on a real cluster and print the simulator's report.

    python -m deploy.replay WORKLOAD.jsonl --superpeers 8 [--json] [--keep DIR]

Starts ``--superpeers`` daemons on 127.0.0.1 (``deploy.cluster``), plays every operation of the
workload (the format of ``superpeer.sim.workload``, backbone operations included: a super-peer
killed with SIGKILL, restarted on its data directory, stopped cleanly, a new one joining) through
real TCP connections, one per peer, waiting after each operation until the network is quiet, and
prints the same JSON report as ``python -m superpeer.sim``: ``deliveries``, ``errors``,
``fetched``, ``messages``, ``hops``, ``locations``, ``totals``. Peers offer and fetch resources
with the peer daemon's ``peer.resources`` (``superpeer.sim.fetching``), in a directory per peer
(under ``--keep DIR``, else a temporary one). What each operation means (which are refused,
where peers go when their access point is down) is ``superpeer.sim.workload.Planner``'s, the
simulator's. Peers still detached at the end are attached once more, so what was kept for them
counts as delivered, as the simulator counts it. Every daemon is stopped before the command
returns.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import trio

import crypto
from deploy.cluster import Cluster, free_ports
from deploy.driver import RemotePeer, peer_key, wait_quiet
from deploy.proxy import Proxies
from peer.resources import Resources
from superpeer.sim.fetching import fetch_request, offer, open_resources, sent, unfinished
from superpeer.sim.report import RunReport
from superpeer.sim.workload import (
    Connect,
    Disconnect,
    Forget,
    Offer,
    OperationError,
    Planner,
    Send,
    SuperPeerBounce,
    SuperPeerCut,
    SuperPeerFail,
    SuperPeerJoin,
    SuperPeerLeave,
    SuperPeerPause,
    SuperPeerRestart,
    Want,
    WorkloadError,
    read_workload,
)
from wire import messages as m


class Replay:
    def __init__(self, cluster: Cluster, files: Path, proxies: Proxies | None = None) -> None:
        self.cluster = cluster
        self.proxies = proxies
        """The proxies in front of the daemons (``superpeer_cut`` needs them)."""
        self.files = files
        """The peers' resource directories, one per peer (a peer that joins again: another)."""
        self.planner = Planner(cluster.size)
        self.peers: dict[str, RemotePeer] = {}
        self.errors: list[dict[str, object]] = []
        self.locations: dict[str, dict[str, str | None]] = {}
        self.operations = 0
        self._label = ""
        self._last_contact: dict[str, float] = {}

    @property
    def everyone(self) -> list[RemotePeer]:
        return list(self.peers.values())

    async def run(self, operations: list[dict], nursery: trio.Nursery) -> None:
        for number, op in enumerate(operations, start=1):
            self.operations += 1
            self._label = f"{number}:{op['op']}"
            if op["op"] == "wait":
                await trio.sleep(op["seconds"])  # real daemons: real time passes
            try:
                steps = self.planner.plan(op, self._public_id, time.time())
            except OperationError as error:
                self.errors.append({"op": self._label, "peer": op.get("peer"), "error": str(error)})
                continue
            for step in steps:
                await self._step(step, op, nursery)
            await wait_quiet(self.cluster, self.everyone)
        for name, peer in sorted(self.peers.items()):
            if not peer.connected:
                for step in self.planner.plan({"op": "attach", "peer": name}, now=time.time()):
                    await self._step(step, {"op": "attach"}, nursery)
        await wait_quiet(self.cluster, self.everyone)

    def _public_id(self, name: str) -> str:
        target = self.peers.get(name)
        return target.network_id if target is not None else name

    async def _step(self, step: object, op: dict, nursery: trio.Nursery) -> None:
        if isinstance(step, Connect):
            await self._connect(step, nursery)
        elif isinstance(step, Disconnect):
            await self._disconnect(self.peers[step.peer])
        elif isinstance(step, Send):
            peer = self.peers[step.peer]
            await self._send(
                peer, sent(self._resources(peer), step.message, peer.notifications), op
            )
        elif isinstance(step, Offer):
            offer(self._resources(self.peers[step.peer]), step.publication, step.content)
        elif isinstance(step, Want):
            await self._want(self.peers[step.peer], step.publication, op)
        elif isinstance(step, Forget):
            await self._disconnect(self.peers.pop(step.peer))
        elif isinstance(step, SuperPeerJoin):
            self.cluster.add()
        elif isinstance(step, SuperPeerLeave):
            successor = self._successor(step.superpeer)
            self.cluster.leave(step.superpeer)
            await wait_quiet(self.cluster, self.everyone)
            for connect in self.planner.after_leave(step.superpeer, successor):
                await self._connect(connect, nursery)
        elif isinstance(step, SuperPeerFail):
            node = f"sp{step.superpeer}"
            self.cluster.kill(step.superpeer)
            for peer in self.everyone:
                if peer.connected and peer.superpeer == node:
                    await self._disconnect(peer)
            for connect in self.planner.after_failure(step.superpeer):
                await self._connect(connect, nursery)
            await self._until_repaired(node)
        elif isinstance(step, SuperPeerRestart):
            self.cluster.restart(step.superpeer)
        elif isinstance(step, SuperPeerPause):
            self.cluster.pause(step.superpeer)
            try:
                await trio.sleep(step.seconds)
            finally:
                self.cluster.resume(step.superpeer)
        elif isinstance(step, SuperPeerCut):
            await self._cut(step.superpeer, step.seconds, nursery)
        elif isinstance(step, SuperPeerBounce):
            node = f"sp{step.superpeer}"
            attached = [p for p in self.everyone if p.connected and p.superpeer == node]
            self.cluster.kill(step.superpeer)
            for peer in attached:
                await self._disconnect(peer)
            self.cluster.restart(step.superpeer)
            for peer in attached:
                await self._connect(Connect(peer.name, step.superpeer), nursery)

    async def _cut(self, index: int, seconds: float, nursery: trio.Nursery) -> None:
        """Every connection to super-peer ``index`` breaks, and none can be made, for
        ``seconds`` (its proxy); then its peers connect again once it is a member, as the
        simulator's do."""
        assert self.proxies is not None, "replay() puts proxies in front of a cut's daemons"
        node, address = f"sp{index}", self.cluster.addresses[index]
        attached = [p for p in self.everyone if p.connected and p.superpeer == node]
        outside_trio(self.proxies.set, address, "cut")
        try:
            for peer in attached:
                await self._disconnect(peer)
            await trio.sleep(seconds)
        finally:
            outside_trio(self.proxies.set, address, "pass")
        with trio.fail_after(120):
            while (await trio.to_thread.run_sync(self.cluster.status, index)).get(
                "state"
            ) != "member":
                await trio.sleep(0.05)
        for peer in attached:
            await self._connect(Connect(peer.name, index), nursery)

    def _successor(self, index: int) -> int:
        status = self.cluster.status(index)
        neighbours = sorted(status.get("neighbours", {}))
        return int(neighbours[0].removeprefix("sp")) if neighbours else index

    async def _until_repaired(self, node: str) -> None:
        """A failure is found by silence: wait until no member has ``node`` as a neighbour."""
        with trio.fail_after(120):
            while True:
                statuses = [s for s in await self.cluster.statuses() if s]
                if not any(node in s.get("neighbours", {}) for s in statuses):
                    return
                await trio.sleep(0.05)

    async def _connect(self, step: Connect, nursery: trio.Nursery) -> None:
        peer = self.peers.get(step.peer)
        address = self.cluster.addresses[step.superpeer]
        if peer is None:
            ca = self.cluster.ca_certificate if self.cluster.tls else None
            peer = self.peers[step.peer] = RemotePeer(step.peer, address, ca=ca)
            directory = self.files / f"{self.operations}-{step.peer}"
            peer.resources = open_resources(directory, peer.network_id)
        elif peer.connected:
            await self._disconnect(peer)
        # when it arrived at the access point it leaves, in that one's hybrid time (as the
        # peer daemon says it: ``clocks``, rule 6)
        arrived, missing = peer.arrival_clock, peer.missing
        await peer.connect(nursery, address)
        if step.moved_from is not None:
            assert step.resend is not None  # planned with every move
            for message in step.resend.plan():
                await peer.request(message)
            since = arrived or self._last_contact.get(step.peer, time.time())
            previous = self.cluster.addresses[step.moved_from]
            moved = m.Moved(
                previous=f"sp{step.moved_from}",
                previous_address=previous,
                since=since,
                signature=self._signature(peer, f"sp{step.moved_from}", since),
                missing_since=missing,
            )
            await peer.request(moved)
        for fetch in unfinished(self._resources(peer)):
            await self._send(peer, fetch, {"op": "fetch"})

    @staticmethod
    def _resources(peer: RemotePeer) -> Resources:
        assert peer.resources is not None  # set when the peer is made (``_connect``)
        return peer.resources

    async def _want(self, peer: RemotePeer, publication: str, op: dict) -> None:
        """``fetch``: from the peer's notification of ``publication``, as ``peer fetch`` does."""
        notify = next((n for n in peer.notifications if n.publication.id == publication), None)
        try:
            fetch = fetch_request(self._resources(peer), notify, publication)
        except OperationError as error:
            self.errors.append({"op": self._label, "peer": peer.name, "error": str(error)})
            return
        if fetch is not None:
            await self._send(peer, fetch, op)

    def _signature(self, peer: RemotePeer, previous: str, since: float) -> bytes:
        if peer.ca is None or peer.superpeer is None:
            return b""
        return crypto.sign_move(
            peer_key(peer.name),  # type: ignore[arg-type]
            public_id=peer.network_id,
            previous=previous,
            current=peer.superpeer,
            since=since,
        )

    async def _disconnect(self, peer: RemotePeer) -> None:
        self._last_contact[peer.name] = time.time()
        await peer.disconnect()

    async def _send(self, peer: RemotePeer, message: object, op: dict) -> None:
        answer = await peer.request(message)
        if isinstance(answer, m.Refused):
            self.errors.append({"op": self._label, "peer": peer.name, "error": answer.reason})
        elif isinstance(answer, m.Located):
            where = answer.superpeer if answer.online else None
            self.locations.setdefault(peer.name, {})[op["id"]] = where

    def report(self, statuses: list[dict]) -> dict[str, object]:
        """The simulator's report; ``statuses`` are the daemons' last (for backbone counts)."""
        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for peer in self.everyone:
            counts.update(peer.sent)
            counts.update(peer.received)
            sizes.update(peer.sent_bytes)
            sizes.update(peer.received_bytes)
        for status in statuses:
            messages = status.get("messages", {})
            for kind, count in messages.get("sent", {}).items():
                if kind.startswith("sp."):
                    counts[kind] += count
                    sizes[kind] += messages.get("bytes_sent", {}).get(kind, 0)
        return RunReport(
            deliveries={
                name: sorted({n.publication.id for n in peer.notifications})
                for name, peer in sorted(self.peers.items())
            },
            changes={
                name: [[n.publication.id, n.kind] for n in peer.notifications]
                for name, peer in sorted(self.peers.items())
            },
            errors=self.errors,
            fetched={
                name: self._resources(peer).fetched() for name, peer in sorted(self.peers.items())
            },
            locations=self.locations,
            messages=counts,
            message_bytes=sizes,
            hops=Counter(n.hops for peer in self.everyone for n in peer.notifications),
            superpeers=len(self.cluster.live()),
            peers=len(self.peers),
            operations=self.operations,
            redeliveries=sum(peer.redeliveries for peer in self.everyone),
        ).as_dict()


def outside_trio(function: Callable[..., object], *args: object) -> None:
    """Call ``function`` (one of ``Proxies``', which talk to the proxies' own trio loop from a
    thread that is not a trio thread) from this trio run, blocking it meanwhile: the calls are
    short, and some come from synchronous code (``Cluster``'s ``front``)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(function, *args).result()


async def replay(
    path: str | Path, superpeers: int, directory: str | None = None, **cluster: object
) -> dict[str, object]:
    operations = list(read_workload(path))
    started = time.perf_counter()
    proxies = Proxies() if any(op["op"] == "superpeer_cut" for op in operations) else None

    def front(listen: str) -> str:
        assert proxies is not None
        public = f"127.0.0.1:{free_ports(1)[0]}"
        outside_trio(proxies.add, public, listen)
        return public

    if proxies is not None:
        cluster = {"front": front, **cluster}
    try:
        with (
            Cluster(
                superpeers, directory=directory, trace=directory is not None, **cluster
            ) as nodes,  # type: ignore[arg-type]
            tempfile.TemporaryDirectory(prefix="replay-peers-") as scratch,
        ):
            files = Path(directory) / "peers" if directory is not None else Path(scratch)
            player = Replay(nodes, files, proxies)
            async with trio.open_nursery() as nursery:
                await player.run(operations, nursery)
                statuses = [s for s in await nodes.statuses() if s]
                for peer in player.everyone:
                    await peer.disconnect()
                nursery.cancel_scope.cancel()
            report = player.report(statuses)
    finally:
        if proxies is not None:
            outside_trio(proxies.close)
    report["totals"]["wall_seconds"] = round(time.perf_counter() - started, 3)  # type: ignore[index]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.replay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("workload")
    parser.add_argument("--superpeers", type=int, default=8)
    parser.add_argument("--keep", metavar="DIR", help="keep the daemons' data (and traces) in DIR")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        report = trio.run(replay, args.workload, args.superpeers, args.keep)
    except (WorkloadError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        totals = report["totals"]
        print(
            f"{totals['superpeers']} super-peers, {totals['peers']} peers, {totals['operations']} "
            f"operations in {totals['wall_seconds']} s; {totals['deliveries']} deliveries, "
            f"{totals['backbone_messages']} backbone messages, {totals['errors']} errors"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
