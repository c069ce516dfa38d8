"""A deterministic in-memory network of ``HypercupNode`` objects, for tests, simulations and
benchmarks.

Messages wait on per-link FIFO queues; each delivery picks a non-empty link at random (seeded), so
messages on different links interleave in every order while each link stays FIFO, the protocol's
only timing assumption. An operation (``join``, ``leave``, ``fail``) runs until the network is
quiet and returns how many messages it took. ``join_concurrently`` starts several joins before
delivering anything. Departures are run one at a time, from a quiet network, as the protocol
assumes. A failed node's queued and future messages are dropped (still counted as sent), and every
live neighbour is told ``neighbour_failed``, in random order.

``check()`` assembles the global ``Topology`` from the nodes' own states and checks that it has the
cube's shape, that every node's table matches it, that what each node knows of its neighbours'
positions and addresses is right, and that the last ``TopologyChanged`` each node emitted describes
its current view.
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hypercup.events import Joined, Left, Output, Send, TopologyChanged
from hypercup.messages import Message
from hypercup.node import HypercupNode, NodeState
from hypercup.topology import Topology


def address_of(node_id: str) -> str:
    """The address the driver gives ``node_id``."""
    return f"{node_id}.sim:4000"


def canonical_topology(node_ids: Sequence[str]) -> Topology:
    """The shape the protocol keeps, for ``len(node_ids)`` super-peers, built directly: base
    position ``x`` held by ``node_ids[x]``, the mirrors of the first ``k`` columns by the rest."""
    n = len(node_ids)
    if n == 0 or len(set(node_ids)) != n:
        raise ValueError("a cube needs at least one super-peer, each with a distinct id")
    if n == 1:
        return Topology(dimension=0, holders=list(node_ids))
    dimension = math.ceil(math.log2(n))
    top = 1 << (dimension - 1)
    holders = list(node_ids[:top]) * 2
    for x in range(n - top):
        holders[top | x] = node_ids[top + x]
    return Topology(dimension=dimension, holders=holders)


@dataclass(frozen=True, slots=True)
class OperationStats:
    """The messages one operation sent, in all and by kind."""

    messages: int
    kinds: Mapping[str, int] = field(default_factory=dict)


class NetworkError(AssertionError):
    """The network of nodes broke a property the driver checks."""


class Network:
    """Nodes, the links between them, and the events each node emitted."""

    def __init__(self, *, seed: int = 0) -> None:
        self._random = random.Random(seed)
        self._nodes: dict[str, HypercupNode] = {}
        self._links: dict[tuple[str, str], deque[Message]] = {}
        self._active: list[tuple[str, str]] = []
        self._failed: set[str] = set()
        self._sent: Counter[str] = Counter()
        self.events: dict[str, list[Output]] = {}
        """Everything but ``Send`` that each node has emitted, in order."""

    # -- the nodes ----------------------------------------------------------------------------

    @property
    def members(self) -> list[str]:
        return sorted(n for n, node in self._nodes.items() if node.state is NodeState.MEMBER)

    def node(self, node_id: str) -> HypercupNode:
        return self._nodes[node_id]

    def _random_member(self) -> str:
        return self._random.choice(self.members)

    # -- operations ---------------------------------------------------------------------------

    def create(self, node_id: str) -> None:
        """Starts a new cube with ``node_id`` as its only member."""
        if self._nodes:
            raise NetworkError("the network already has nodes")
        node = self._add(node_id)
        self._process(node_id, node.create())

    def join(self, node_id: str, contact: str | None = None) -> OperationStats:
        """``node_id`` joins through ``contact`` (a random member if None)."""
        return self.join_concurrently([node_id], None if contact is None else [contact])

    def join_concurrently(
        self, node_ids: Sequence[str], contacts: Sequence[str] | None = None
    ) -> OperationStats:
        """Starts every join (each through its contact, random members by default), then
        delivers until quiet."""
        chosen = contacts or [self._random_member() for _ in node_ids]
        if len(chosen) != len(node_ids):
            raise NetworkError("one contact per newcomer")

        def start() -> None:
            for node_id, contact in zip(node_ids, chosen, strict=True):
                node = self._add(node_id)
                self._process(node_id, node.join_via(contact, address_of(contact)))

        stats = self._operation(start)
        for node_id in node_ids:
            if self._nodes[node_id].state is not NodeState.MEMBER:
                raise NetworkError(f"{node_id} did not become a member")
        return stats

    def leave(self, node_id: str, *, incarnation: int = 0) -> OperationStats:
        """``node_id`` (its runtime's ``incarnation``) announces its departure."""
        node = self._nodes[node_id]
        stats = self._operation(lambda: self._process(node_id, node.leave(incarnation=incarnation)))
        if node.state is not NodeState.LEFT:
            raise NetworkError(f"{node_id} was not released")
        del self._nodes[node_id]
        return stats

    def fail(self, node_id: str, *, incarnation: int = 0) -> OperationStats:
        """``node_id`` (its runtime's ``incarnation``) stops answering; its live neighbours
        notice."""
        if self._nodes[node_id].state is not NodeState.MEMBER:
            raise NetworkError(f"{node_id} is not a member")
        del self._nodes[node_id]
        self._failed.add(node_id)

        def notice() -> None:
            watchers = [n for n in self.members if node_id in self._nodes[n].known_peers()]
            self._random.shuffle(watchers)
            for watcher in watchers:
                failed = self._nodes[watcher].neighbour_failed(node_id, incarnation=incarnation)
                self._process(watcher, failed)

        return self._operation(notice)

    def _deliver_all(self) -> None:
        """Delivers messages until none is left."""
        while self._active:
            index = self._random.randrange(len(self._active))
            link = self._active[index]
            queue = self._links[link]
            message = queue.popleft()
            if not queue:
                self._active[index] = self._active[-1]
                self._active.pop()
                del self._links[link]
            sender, receiver = link
            self._process(receiver, self._nodes[receiver].receive(sender, message))

    # -- the global picture -------------------------------------------------------------------

    def topology(self) -> Topology:
        """The cube as the members' own states describe it."""
        members = self.members
        dimensions = {self._nodes[n].view().dimension for n in members}
        if len(dimensions) != 1:
            raise NetworkError(f"members disagree on the dimension: {sorted(dimensions)}")
        (dimension,) = dimensions
        return Topology.from_positions(
            dimension=dimension, positions={n: self._nodes[n].view().positions for n in members}
        )

    def check(self) -> Topology:
        """Checks the invariants listed in the module docstring; returns the topology."""
        if self._active:
            raise NetworkError("messages are still in flight")
        stragglers = sorted(
            n for n, node in self._nodes.items() if node.state is not NodeState.MEMBER
        )
        if stragglers:
            raise NetworkError(f"nodes that are not members: {stragglers}")
        topology = self.topology()
        topology.check()
        epochs = {self._nodes[n].epoch for n in self.members}
        if len(epochs) != 1:
            raise NetworkError(f"members disagree on the epoch: {sorted(epochs)}")
        for node_id in self.members:
            node = self._nodes[node_id]
            if node.busy():
                raise NetworkError(f"{node_id} still takes part in an operation")
            view = node.view()
            if view != topology.local_view(node_id):
                raise NetworkError(
                    f"{node_id}'s table {dict(view.table)} should be "
                    f"{topology.neighbour_table(node_id)}"
                )
            for peer, (address, positions) in node.known_peers().items():
                if address != address_of(peer) or positions != topology.positions(peer):
                    raise NetworkError(
                        f"{node_id} thinks {peer} holds {sorted(positions)} at {address}; it holds "
                        f"{sorted(topology.positions(peer))} at {address_of(peer)}"
                    )
            changes = [e for e in self.events[node_id] if isinstance(e, TopologyChanged)]
            if not changes or changes[-1].view != view:
                raise NetworkError(f"{node_id}'s last TopologyChanged is not its current view")
            if dict(changes[-1].addresses) != {p: address_of(p) for p in view.neighbours()}:
                raise NetworkError(f"{node_id}'s last TopologyChanged has wrong addresses")
            joined = [e for e in self.events[node_id] if isinstance(e, Joined | Left)]
            if joined != [Joined()]:
                raise NetworkError(f"{node_id} emitted {joined}, not one Joined")
        return topology

    # -- plumbing -----------------------------------------------------------------------------

    def _add(self, node_id: str) -> HypercupNode:
        if node_id in self._nodes or node_id in self._failed:
            raise NetworkError(f"node id {node_id!r} is already in use")
        node = HypercupNode(node_id, address_of(node_id))
        self._nodes[node_id] = node
        self.events[node_id] = []
        return node

    def _operation(self, start: Callable[[], None]) -> OperationStats:
        self._sent = Counter()
        start()
        self._deliver_all()
        return OperationStats(messages=sum(self._sent.values()), kinds=dict(self._sent))

    def _process(self, node_id: str, outputs: list[Output]) -> None:
        for output in outputs:
            if not isinstance(output, Send):
                self.events[node_id].append(output)
                if isinstance(output, Left):
                    self._check_departure(node_id)
                continue
            self._sent[output.message.KIND] += 1
            if output.to in self._failed:
                continue
            if output.to not in self._nodes:
                raise NetworkError(f"{node_id} sent {output.message.KIND} to unknown {output.to}")
            if output.address != address_of(output.to):
                raise NetworkError(f"{node_id} used address {output.address} for {output.to}")
            link = (node_id, output.to)
            if link not in self._links:
                self._links[link] = deque()
                self._active.append(link)
            self._links[link].append(output.message)

    def _check_departure(self, node_id: str) -> None:
        if any(receiver == node_id for _, receiver in self._links):
            raise NetworkError(f"{node_id} left with messages still on their way to it")
