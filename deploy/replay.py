"""Replay a simulator workload on a real cluster and print the simulator's report.

    python -m deploy.replay WORKLOAD.jsonl --superpeers 8 [--json] [--keep DIR]

Starts ``--superpeers`` daemons on 127.0.0.1 (``deploy.cluster``), plays every operation of the
workload (the format of ``superpeer.sim.workload``) through real TCP connections, one per peer,
waiting after each operation until the network is quiet, and prints the same JSON report as
``python -m superpeer.sim``: ``deliveries``, ``errors``, ``messages``, ``hops``, ``totals``. Peers
still detached at the end are attached once more, so what was kept for them counts as delivered,
as the simulator counts it. Every daemon is stopped before the command returns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import trio

from deploy.cluster import Cluster
from deploy.driver import RemotePeer, wait_quiet
from superpeer.sim.workload import (
    REQUESTS,
    OperationError,
    WorkloadError,
    peer_requests,
    read_workload,
)
from wire import messages as m


class Replay:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.peers: dict[str, RemotePeer] = {}
        self.everyone: list[RemotePeer] = []
        self.errors: list[dict[str, object]] = []
        self.locations: dict[str, dict[str, str | None]] = {}
        self.operations = 0
        self._label = ""

    async def run(self, operations: list[dict], nursery: trio.Nursery) -> None:
        for number, op in enumerate(operations, start=1):
            self.operations += 1
            self._label = f"{number}:{op['op']}"
            if op["op"] in REQUESTS:
                await self._requests(op)
            else:
                await getattr(self, "_op_" + op["op"])(op, nursery)
            await wait_quiet(self.cluster, self.everyone)
        for peer in self.peers.values():
            if not peer.connected:
                await peer.connect(nursery)
        await wait_quiet(self.cluster, self.everyone)

    def _error(self, op: dict, text: str) -> None:
        self.errors.append({"op": self._label, "peer": op.get("peer"), "error": text})

    def _known(self, op: dict) -> RemotePeer | None:
        peer = self.peers.get(op["peer"])
        if peer is None:
            self._error(op, f"peer {op['peer']} has not joined")
        return peer

    async def _request(self, op: dict, message: object) -> object:
        """Send ``message`` for ``op``'s peer; its answer (refusals are recorded as errors)."""
        peer = self._known(op)
        if peer is None:
            return None
        if not peer.connected:
            self._error(op, f"peer {peer.name} is detached")
            return None
        answer = await peer.request(message)
        if isinstance(answer, m.Refused):
            self.errors.append({"op": self._label, "peer": peer.name, "error": answer.reason})
        return answer

    async def _op_join(self, op: dict, nursery: trio.Nursery) -> None:
        index = op["superpeer"]
        if not 0 <= index < self.cluster.size:
            self._error(op, f"there is no super-peer {index} (0..{self.cluster.size - 1})")
            return
        if op["peer"] in self.peers:
            self._error(op, f"peer {op['peer']} has already joined")
            return
        ca = self.cluster.ca_certificate if self.cluster.tls else None
        peer = RemotePeer(op["peer"], self.cluster.addresses[index], ca=ca)
        await peer.connect(nursery)
        self.peers[peer.name] = peer
        self.everyone.append(peer)

    async def _op_detach(self, op: dict, nursery: trio.Nursery) -> None:
        peer = self._known(op)
        if peer is not None and peer.connected:
            await peer.disconnect()
            await self._until_detached(peer.network_id)

    async def _until_detached(self, name: str) -> None:
        with trio.fail_after(30):
            while True:
                statuses = await self.cluster.statuses()
                if not any(name in s.get("peers", {}).get("attached", []) for s in statuses):
                    return
                await trio.sleep(0.005)

    async def _op_attach(self, op: dict, nursery: trio.Nursery) -> None:
        peer = self._known(op)
        if peer is not None and not peer.connected:
            await peer.connect(nursery)

    async def _op_leave(self, op: dict, nursery: trio.Nursery) -> None:
        peer = self._known(op)
        if peer is None:
            return
        if not peer.connected:
            await peer.connect(nursery)
        await peer.request(m.Leave())
        await peer.disconnect()
        del self.peers[peer.name]

    async def _requests(self, op: dict) -> None:
        def public_id(name: str) -> str:
            target = self.peers.get(name)
            return target.network_id if target is not None else name

        try:
            messages = peer_requests(op, public_id)
        except OperationError as error:
            self._error(op, str(error))
            return
        for message in messages:
            answer = await self._request(op, message)
            if isinstance(answer, m.Located):
                where = answer.superpeer if answer.online else None
                self.locations.setdefault(op["peer"], {})[op["id"]] = where

    def report(self, statuses: list[dict]) -> dict[str, object]:
        """The simulator's report; ``statuses`` are the daemons' last (for backbone counts)."""
        deliveries = {
            name: sorted({n.publication.id for n in peer.notifications})
            for name, peer in sorted(self.peers.items())
        }
        duplicates = sum(
            count - 1
            for peer in self.peers.values()
            for count in Counter(n.publication.id for n in peer.notifications).values()
            if count > 1
        )
        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for peer in self.everyone:
            counts.update(peer.sent)
            counts.update(peer.received)
            sizes.update(peer.sent_bytes)
            sizes.update(peer.received_bytes)
        for kind in ("link.welcome",):
            counts.pop(kind, None)
            sizes.pop(kind, None)
        for status in statuses:
            messages = status.get("messages", {})
            for kind, count in messages.get("sent", {}).items():
                if kind.startswith("sp."):
                    counts[kind] += count
                    sizes[kind] += messages.get("bytes_sent", {}).get(kind, 0)
        hops = Counter(n.hops for peer in self.everyone for n in peer.notifications)
        return {
            "deliveries": deliveries,
            "errors": self.errors,
            "messages": {k: {"count": counts[k], "bytes": sizes[k]} for k in sorted(counts)},
            "hops": {str(h): hops[h] for h in sorted(hops)},
            "locations": {
                name: dict(sorted(found.items())) for name, found in sorted(self.locations.items())
            },
            "totals": {
                "superpeers": self.cluster.size,
                "peers": len(self.peers),
                "operations": self.operations,
                "messages": sum(counts.values()),
                "bytes": sum(sizes.values()),
                "backbone_messages": sum(c for k, c in counts.items() if k.startswith("sp.")),
                "deliveries": sum(len(v) for v in deliveries.values()),
                "duplicates": duplicates,
                "errors": len(self.errors),
            },
        }


async def replay(
    path: str | Path, superpeers: int, directory: str | None = None
) -> dict[str, object]:
    operations = list(read_workload(path))
    started = time.perf_counter()
    with Cluster(superpeers, directory=directory, trace=directory is not None) as cluster:
        player = Replay(cluster)
        async with trio.open_nursery() as nursery:
            await player.run(operations, nursery)
            statuses = await cluster.statuses()
            for peer in player.everyone:
                await peer.disconnect()
            nursery.cancel_scope.cancel()
    report = player.report(statuses)
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
