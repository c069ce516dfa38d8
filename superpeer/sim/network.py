"""The deterministic in-memory network: N super-peer cores and their peers in one process.

Every message really goes through the wire codec (encoded by the sender's core, decoded on
arrival), so byte counts are the msgpack sizes the daemons would send. Messages wait in a queue
ordered by delivery time; each link is FIFO (a message never overtakes an earlier one on the same
link). Simulated time starts at ``START`` and each workload operation starts ``op_interval`` after
the previous one, once the network has gone quiet; a message takes ``latency`` seconds per hop, plus,
with ``interleave``, a seeded random jitter that reorders messages across links (never within one).
The same seed and workload always give the same run.

With ``verify_wire`` (the default) every message is decoded from its bytes on arrival, as a daemon
does; without it the receiver gets the sender's (immutable) message object, which is equal to the
decoded one (the codec's round trip is tested on its own) and makes large runs about twice as fast.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

import wire
from superpeer.actions import DiscardOffline, FlushOffline, ToNeighbour, ToOffline, ToPeer
from superpeer.core import CoreConfig, Output, SuperPeerCore
from superpeer.sim.topology import hypercube_views
from superpeer.sim.workload import REQUESTS, OperationError, peer_requests
from superpeer.trace import TraceRecord, flush_record
from wire import messages as m

START: Final = 1_767_225_600.0
"""2026-01-01T00:00:00Z: simulated time starts here, so traces fall on real calendar dates."""


@dataclass
class SimPeer:
    name: str
    access_point: str
    attached: bool = True
    received: Counter[str] = field(default_factory=Counter)


@dataclass(order=True)
class _Pending:
    at: float
    sequence: int
    sender: str = field(compare=False)
    receiver: str = field(compare=False)
    to_peer: bool = field(compare=False)
    from_peer: bool = field(compare=False)
    data: bytes = field(compare=False)
    message: object = field(compare=False)
    message_id: str = field(compare=False)


class Simulation:
    """Apply workload operations (``superpeer.sim.workload``) and report what every peer got."""

    def __init__(
        self,
        superpeers: int,
        *,
        seed: int = 0,
        interleave: bool = False,
        latency: float = 0.002,
        op_interval: float = 0.01,
        trace_dir: str | Path | None = None,
        config: CoreConfig | None = None,
        verify_wire: bool = True,
    ) -> None:
        if superpeers < 1:
            raise ValueError("a network needs at least one super-peer")
        self.ids = [f"sp{k}" for k in range(superpeers)]
        views = hypercube_views(self.ids, seed=seed)
        tracing = trace_dir is not None
        base = config or CoreConfig()
        core_config = CoreConfig(
            summarise_values_above=base.summarise_values_above, tracing=tracing
        )
        self.cores = {
            sp: SuperPeerCore(sp, f"{sp}.sim:7400", views[sp], core_config) for sp in self.ids
        }
        self.peers: dict[str, SimPeer] = {}
        self.outboxes: dict[str, list[tuple[m.Notify, bytes]]] = {}
        self.now = START
        self.latency = latency
        self.op_interval = op_interval
        self._random = random.Random(seed) if interleave else None
        self.verify_wire = verify_wire
        self._queue: list[_Pending] = []
        self._sequence = 0
        self._link_clock: dict[tuple[str, str], float] = {}
        self.messages: Counter[str] = Counter()
        self.message_bytes: Counter[str] = Counter()
        self.hops: Counter[int] = Counter()
        self.errors: list[dict[str, object]] = []
        self.locations: dict[str, dict[str, str | None]] = {}
        self.duplicates = 0
        self.operations = 0
        self._op_label = ""
        self._trace_files: dict[str, IO[str]] = {}
        self._trace_dir = Path(trace_dir) if trace_dir is not None else None
        if self._trace_dir is not None:
            self._trace_dir.mkdir(parents=True, exist_ok=True)

    # -- operations ---------------------------------------------------------------------------
    def apply(self, op: dict, number: int | None = None) -> None:
        """One workload operation, then run the network until it is quiet."""
        self.operations += 1
        self.now = max(self.now, START + (self.operations - 1) * self.op_interval)
        self._op_label = f"{number if number is not None else self.operations}:{op['op']}"
        if op["op"] in REQUESTS:
            self._requests(op)
        else:
            getattr(self, "_op_" + op["op"])(op)
        self.run_until_quiet()

    def _op_join(self, op: dict) -> None:
        name, index = op["peer"], op["superpeer"]
        if not 0 <= index < len(self.ids):
            self._error(op, f"there is no super-peer {index} (0..{len(self.ids) - 1})")
            return
        if name in self.peers:
            self._error(op, f"peer {name} has already joined")
            return
        peer = SimPeer(name, self.ids[index])
        self.peers[name] = peer
        self._attach(peer)

    def _op_detach(self, op: dict) -> None:
        peer = self._known(op)
        if peer is not None and peer.attached:
            peer.attached = False
            self._execute(
                peer.access_point, self.cores[peer.access_point].detach(peer.name, self.now)
            )

    def _op_attach(self, op: dict) -> None:
        peer = self._known(op)
        if peer is not None and not peer.attached:
            peer.attached = True
            self._attach(peer)

    def _op_leave(self, op: dict) -> None:
        peer = self._known(op)
        if peer is None:
            return
        if not peer.attached:
            peer.attached = True
            self._attach(peer)
        self._request(op, m.Leave())
        del self.peers[peer.name]

    def _requests(self, op: dict) -> None:
        try:
            messages = peer_requests(op)
        except OperationError as error:
            self._error(op, str(error))
            return
        for message in messages:
            self._request(op, message)

    def _attach(self, peer: SimPeer) -> None:
        core = self.cores[peer.access_point]
        self._execute(peer.access_point, core.attach(peer.name, self.now, f"{peer.name}.peer.sim"))

    def _known(self, op: dict) -> SimPeer | None:
        peer = self.peers.get(op["peer"])
        if peer is None:
            self._error(op, f"peer {op['peer']} has not joined")
        return peer

    def _request(self, op: dict, message: object) -> None:
        peer = self._known(op)
        if peer is None:
            return
        if not peer.attached:
            self._error(op, f"peer {peer.name} is detached")
            return
        message_id = f"{peer.name}#{self._sequence}"
        data = wire.encode(message, message_id)
        self._count(message, data)
        self._enqueue(peer.name, peer.access_point, message, data, to_peer=False, from_peer=True)

    def _error(self, op: dict, text: str) -> None:
        self.errors.append({"op": self._op_label, "peer": op.get("peer"), "error": text})

    # -- the network --------------------------------------------------------------------------
    def _enqueue(
        self,
        sender: str,
        receiver: str,
        message: object,
        data: bytes,
        *,
        to_peer: bool,
        from_peer: bool,
        message_id: str = "",
    ) -> None:
        delay = self.latency
        if self._random is not None:
            delay += self._random.uniform(0, 4 * self.latency)
        link = (sender, receiver)
        at = max(self.now + delay, self._link_clock.get(link, 0.0))
        self._link_clock[link] = at
        self._sequence += 1
        heapq.heappush(
            self._queue,
            _Pending(
                at, self._sequence, sender, receiver, to_peer, from_peer, data, message, message_id
            ),
        )

    def run_until_quiet(self) -> None:
        while self._queue:
            pending = heapq.heappop(self._queue)
            self.now = max(self.now, pending.at)
            if self.verify_wire:
                message, message_id = wire.decode(pending.data)
            else:
                message, message_id = pending.message, pending.message_id
            if pending.to_peer:
                self._to_peer(pending.receiver, message)
                continue
            core = self.cores[pending.receiver]
            if pending.from_peer:
                outputs = core.peer_message(
                    pending.sender, message, len(pending.data), self.now, message_id
                )
            else:
                outputs = core.neighbour_message(
                    pending.sender, message, len(pending.data), self.now, message_id
                )
            self._execute(pending.receiver, outputs)

    def _execute(self, node: str, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, ToNeighbour):
                self._count(output.message, output.data)
                self._enqueue(
                    node,
                    output.neighbour,
                    output.message,
                    output.data,
                    to_peer=False,
                    from_peer=False,
                    message_id=output.message_id,
                )
            elif isinstance(output, ToPeer):
                self._count(output.message, output.data)
                self._enqueue(
                    node, output.peer, output.message, output.data, to_peer=True, from_peer=False
                )
            elif isinstance(output, ToOffline):
                self.outboxes.setdefault(output.peer, []).append((output.message, output.data))
            elif isinstance(output, FlushOffline):
                for notify, data in self.outboxes.pop(output.peer, []):
                    self._count(notify, data)
                    self._write_trace(flush_record(self.now, node, notify, output.peer, len(data)))
                    self._enqueue(node, output.peer, notify, data, to_peer=True, from_peer=False)
            elif isinstance(output, DiscardOffline):
                self.outboxes.pop(output.peer, None)
            elif isinstance(output, TraceRecord):
                self._write_trace(output)

    def _to_peer(self, name: str, message: object) -> None:
        peer = self.peers.get(name)
        if isinstance(message, m.Notify):
            if peer is None:
                return
            publication = message.publication.id
            if peer.received[publication]:
                self.duplicates += 1
            peer.received[publication] += 1
            self.hops[message.hops] += 1
        elif isinstance(message, m.Refused):
            self.errors.append({"op": self._op_label, "peer": name, "error": message.reason})
        elif isinstance(message, m.Located):
            where = message.superpeer if message.online else None
            self.locations.setdefault(name, {})[message.id] = where

    def _count(self, message: object, data: bytes) -> None:
        kind = type(message).KIND  # type: ignore[attr-defined]
        self.messages[kind] += 1
        self.message_bytes[kind] += len(data)

    # -- traces -------------------------------------------------------------------------------
    def _write_trace(self, record: TraceRecord) -> None:
        if self._trace_dir is None:
            return
        handle = self._trace_files.get(record.node)
        if handle is None:
            handle = (self._trace_dir / f"{record.node}.jsonl").open("w", encoding="utf-8")
            self._trace_files[record.node] = handle
        handle.write(record.to_json() + "\n")

    def close(self) -> None:
        for handle in self._trace_files.values():
            handle.close()
        self._trace_files.clear()

    # -- results ------------------------------------------------------------------------------
    def deliveries(self) -> dict[str, list[str]]:
        """Per peer, the publication ids it received, online or kept in its offline outbox."""
        result: dict[str, set[str]] = {
            name: set(peer.received) for name, peer in self.peers.items()
        }
        for name, kept in self.outboxes.items():
            if name in result:
                result[name].update(notify.publication.id for notify, _ in kept)
        return {name: sorted(ids) for name, ids in sorted(result.items())}

    def report(self) -> dict[str, object]:
        deliveries = self.deliveries()
        kept = sum(len(v) for v in self.outboxes.values())
        return {
            "deliveries": deliveries,
            "errors": self.errors,
            "messages": {
                kind: {"count": self.messages[kind], "bytes": self.message_bytes[kind]}
                for kind in sorted(self.messages)
            },
            "hops": {str(h): self.hops[h] for h in sorted(self.hops)},
            "locations": {
                name: dict(sorted(found.items())) for name, found in sorted(self.locations.items())
            },
            "totals": {
                "superpeers": len(self.ids),
                "peers": len(self.peers),
                "operations": self.operations,
                "messages": sum(self.messages.values()),
                "bytes": sum(self.message_bytes.values()),
                "backbone_messages": sum(
                    c for k, c in self.messages.items() if k.startswith("sp.")
                ),
                "deliveries": sum(len(v) for v in deliveries.values()),
                "kept_offline": kept,
                "duplicates": self.duplicates,
                "errors": len(self.errors),
                "simulated_seconds": round(self.now - START, 6),
            },
        }
