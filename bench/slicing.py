"""How long a burst of subscriptions holds a super-peer, and whether its neighbour declares it
failed meanwhile (issue 34, "Never hold the loop"; ``superpeer._backlog``).

The simulator's time does not pass while a node computes, so it would never see a burst hold a
node. ``TimedSimulation`` makes it pass: each call into a node (a delivery, a timer) takes the
CPU time the node's code took, each node a process of its own. A node that computes for 12 s is
silent for 12 s, and its neighbour's failure detector sees it.

The burst: super-peer ``sp0`` hands ``sp1`` (its neighbour) N distinct subscriptions at once,
as when it leaves: its peers' (``Adopt``, 1,000 per peer, each one input), or as its routes
after a join or a heal (``--kind forward``: one frame each; the runtime, like the trio daemon,
gets its turn between frames). Measured: the longest call into ``sp1``, the longest time
``sp1`` sent its neighbour nothing (the loop held, as the neighbour sees it), the time until all
are placed, whether a node declared the other failed. Once with every subscription placed as it
comes (the baseline: ``placements_per_step`` beyond the burst) and once in slices (the
default)::

    python -m bench.slicing --subscriptions 20000 --workload listings

``--kind restart``: a neighbour restarts, and ``sp1`` routes every subscription it holds again
(in passes of ``--routings-per-step``, ``superpeer.rerouting``); ``--kind removal``: the other
way round, ``sp1`` removes every route the restarted neighbour had forwarded to it (``restart``).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import qel
from superpeer._node_base import NodeConfig
from superpeer.actions import ToSuperPeer
from superpeer.core import CoreConfig, peer_source, superpeer_source
from superpeer.sim import Simulation
from wire import messages as m
from workloads.digital_library import DC, LIB, DigitalLibrary
from workloads.listings import HOME, Listings
from workloads.shapes import CAR, Shapes

T = TypeVar("T")


INPUTS = (
    "superpeer_message",
    "superpeer_hello",
    "superpeer_heard",
    "peer_message",
    "connection_closed",
    "timer",
)
"""The node's inputs the simulator calls for what the burst involves, timed."""


class TimedSimulation(Simulation):
    """The simulator, with each call into a node taking the CPU time the node's code took (not
    the simulator's own bookkeeping, nor other processes' turns on a loaded machine), each node a process of its own: a call that starts at t
    and takes d sends its outputs at t + d, and the node is busy until then (what arrives for
    it meanwhile, and its timer, wait), while the other nodes go on at their own times."""

    def __init__(self, superpeers: int, **options: object) -> None:
        self._took = 0.0
        """CPU seconds spent in node code since the last outputs left."""
        self._inside = False
        self.busy_until: dict[str, float] = {}
        """Per node, when the call it is in ends."""
        self.longest: dict[str, float] = {}
        """Per node, the longest call into it (seconds)."""
        self.spoke: dict[str, float] = {}
        """Per node watched, when it last sent a super-peer anything."""
        self.silence: dict[str, float] = {}
        """Per node watched, the longest time it sent no super-peer anything."""
        super().__init__(superpeers, **options)  # type: ignore[arg-type]

    def watch_ends(self, node_id: str) -> None:
        """The silence up to now counts too."""
        quiet = self.now - self.spoke.pop(node_id)
        self.silence[node_id] = max(self.silence[node_id], quiet)

    def watch(self, node_id: str) -> None:
        """Measure ``node_id``'s silences from now on."""
        self.spoke[node_id] = self.now
        self.silence[node_id] = 0.0

    def _start(self, node_id: str) -> None:
        super()._start(node_id)
        node = self.nodes[node_id]
        for name in INPUTS:
            setattr(node, name, self._timed(getattr(node, name)))

    def _timed(self, call: Callable[..., T]) -> Callable[..., T]:
        def timed(*arguments: object) -> T:
            if self._inside:  # an input that calls another (``superpeer_welcomed``)
                return call(*arguments)
            self._inside = True
            started = time.thread_time()
            try:
                return call(*arguments)
            finally:
                self._took += time.thread_time() - started
                self._inside = False

        return timed

    def _deliver(self, pending: Any) -> None:
        free = self.busy_until.get(pending.receiver, -math.inf)
        if pending.receiver in self.nodes and pending.at < free:
            self._requeue(pending, free)  # the receiver is still busy: it reads this later
            return
        super()._deliver(pending)

    def _fire(self, timer: tuple[float, str]) -> None:
        at, node_id = timer
        free = self.busy_until.get(node_id, -math.inf)
        if at < free:  # still busy: its timer runs when the call is over
            heapq.heappop(self._deadlines)
            self._deadline_of[node_id] = free
            self._sequence += 1
            heapq.heappush(self._deadlines, (free, self._sequence, node_id))
            return
        super()._fire(timer)

    def _execute(self, node_id: str, outputs: list) -> None:
        """What the call produced leaves when the node's work on it is over."""
        started = self.now
        if self._took:
            took, self._took = self._took, 0.0
            self.now += took
            self.busy_until[node_id] = self.now
            self.longest[node_id] = max(self.longest.get(node_id, 0.0), took)
        if node_id in self.spoke and any(isinstance(o, ToSuperPeer) for o in outputs):
            quiet = self.now - self.spoke[node_id]
            self.silence[node_id] = max(self.silence[node_id], quiet)
            self.spoke[node_id] = self.now
        super()._execute(node_id, outputs)
        self.now = started  # the other nodes go on from when the call started


@dataclass(frozen=True)
class BurstResult:
    subscriptions: int
    longest_call: float
    """The longest call into the receiving node (seconds)."""
    longest_silence: float
    """The longest time the receiving node sent its neighbour nothing, not even a heartbeat
    (seconds): how long its loop was held, as its neighbour sees it."""
    placed_after: float
    """Simulated (= real, for the receiver) seconds from the burst until all were placed."""
    declared_failed: int
    """Failures the sender detected (0: the receiver stayed a member)."""
    waited: int
    """Inputs that waited behind the burst at the receiver."""


WORKLOADS: dict[str, Callable[[int], DigitalLibrary | Listings | Shapes]] = {
    "library": lambda seed: DigitalLibrary(seed=seed),
    "listings": lambda seed: Listings(seed=seed),
    "shapes": lambda seed: Shapes(seed=seed),
}
"""Where the subscriptions come from: the digital library's, the listings' or every shape of the
language (since the poset keeps no Hasse diagram, stop 74, placing any of them is index
insertions: 10,000 library subscriptions in 0.48 s, where they took some 2 s before)."""


ADVERTISED = {"library": [DC, LIB], "listings": [HOME], "shapes": [CAR]}
"""The schemas a publisher of each workload advertises (``restart``)."""


def subscriptions(count: int, workload: str = "library", seed: int = 0) -> list[qel.Subscription]:
    """``count`` distinct subscriptions of ``workload``."""
    generator = WORKLOADS[workload](seed)
    found: dict[str, qel.Subscription] = {}
    while len(found) < count:
        text = generator.subscription()
        if text not in found:
            found[text] = qel.parse_subscription(text)
    return list(found.values())


def burst(
    count: int,
    kind: str = "adopt",
    *,
    placements_per_step: int,
    heartbeat_seconds: float | None = None,
    failure_seconds: float = 10.0,
    workload: str = "library",
    seed: int = 0,
    per_peer: int | None = None,
) -> BurstResult:
    """``sp0`` sends ``sp1`` ``count`` subscriptions at once: ``kind`` "adopt", as it leaves,
    its peers', each with ``per_peer`` (``max_subscriptions_per_peer``; None: its default,
    1,000; one input places a peer's whole); "forward", as its routes after a join or a heal
    (one frame each). The network runs until all are placed, or a node declared the other
    failed."""
    routing = CoreConfig() if per_peer is None else CoreConfig(max_subscriptions_per_peer=per_peer)
    config = NodeConfig(
        routing=routing,
        heartbeat_seconds=heartbeat_seconds or failure_seconds / 10,
        failure_seconds=failure_seconds,
        placements_per_step=placements_per_step,
    )
    queries = subscriptions(count, workload, seed)
    simulation = TimedSimulation(2, node_config=config, verify_wire=False)
    simulation.apply({"op": "join", "peer": "library", "superpeer": 1})
    simulation.apply({"op": "advertise", "peer": "library", "schemas": ["dc", "rdf", LIB]})
    sender, receiver = simulation.nodes["sp0"], simulation.nodes["sp1"]
    position = simulation.cores["sp0"].origin_positions["sp1"]
    started = simulation.now
    if kind == "adopt":
        most = config.routing.max_subscriptions_per_peer
        ids = [(f"b{number}", query) for number, query in enumerate(queries)]
        messages: list[object] = [
            m.Adopt(
                peer=f"reader{start}",
                public_key=b"",
                advertisement=None,
                subscriptions=tuple(ids[start : start + most]),
            )
            for start in range(0, count, most)
        ]
        sources = [peer_source(f"reader{start}") for start in range(0, count, most)]
    else:
        messages = [
            m.Forward(id=f"b{number}", subscription=query, toward=(("sp1", position),))
            for number, query in enumerate(queries)
        ]
        sources = [superpeer_source("sp0")]
    for number, message in enumerate(messages):
        simulation._enqueue(  # what sp0's link carries
            "sp",
            "sp0",
            "sp1",
            incarnation=sender.incarnation,
            message=message,
            message_id=f"burst-{number}",
            meant_for=receiver.incarnation,
        )
    simulation.watch("sp1")
    core = simulation.cores["sp1"]
    placed: list[float] = []

    def all_placed() -> bool:
        if not placed and sum(core.poset.count_of(source) for source in sources) >= count:
            placed.append(simulation.now)
        return bool(placed)

    def trouble() -> bool:
        return any(
            node.statistics.failures_detected or node.statistics.rejoins
            for node in (sender, receiver)
        )

    # What was alive before the burst (other posets of the process: a test worker's, a
    # benchmark's) is left out of the collector's passes, which a node's call pays for in its
    # CPU time: each node is a process of its own, whose passes walk its own objects only.
    gc.collect()
    gc.freeze()
    try:
        # stopped at the first failure: a node that places the burst in one call longer than
        # the failure timeout is declared failed, rejoins and places it again, for ever (a
        # clean-clone CI ran that for 600 s)
        simulation.run_until_quiet(all_placed, stop=trouble)
    finally:
        gc.unfreeze()
    simulation.watch_ends("sp1")
    return BurstResult(
        subscriptions=count,
        longest_call=simulation.longest.get("sp1", 0.0),
        longest_silence=simulation.silence["sp1"],
        placed_after=(placed[0] if placed else simulation.now) - started,
        declared_failed=sender.statistics.failures_detected,
        waited=simulation.nodes["sp1"].statistics.waited,
    )


def restart(
    count: int,
    *,
    routings_per_step: int,
    failure_seconds: float = 10.0,
    workload: str = "shapes",
    seed: int = 0,
    forwarded: bool = False,
) -> BurstResult:
    """``sp1`` holds ``count`` distinct subscriptions of one local peer, all going toward
    ``sp0`` (its peer advertises what they ask); ``sp0`` is killed and started again at once,
    so ``sp1`` must send every route again (``SuperPeerCore.neighbour_restarted``, then the
    change of the cube and the settle window's end: ``superpeer.rerouting``). With
    ``forwarded``, the other way round: the peer is at ``sp0``, whose routes ``sp1`` holds, and
    ``sp1`` must remove every one of them (the restarted ``sp0`` comes back without them).
    ``placed_after`` is the time until ``sp1`` has none left to route again (or to remove);
    ``declared_failed`` counts the failures ``sp0`` detected and the rejoins of either (``sp1``
    detecting the restart is the rule, not counted); ``waited``, the slices the routes took."""
    config = NodeConfig(
        routing=CoreConfig(max_subscriptions_per_peer=count, routings_per_step=routings_per_step),
        heartbeat_seconds=failure_seconds / 10,
        failure_seconds=failure_seconds,
    )
    simulation = TimedSimulation(2, node_config=config, verify_wire=False)
    seller, buyer = ("sp1", "sp0") if forwarded else ("sp0", "sp1")
    simulation.apply({"op": "join", "peer": "seller", "superpeer": int(seller[2:])})
    simulation.apply({"op": "advertise", "peer": "seller", "schemas": ADVERTISED[workload]})
    simulation.apply({"op": "join", "peer": "buyer", "superpeer": int(buyer[2:])})
    queries = subscriptions(count, workload, seed)
    batch = [("buyer", f"s{number}", query, False) for number, query in enumerate(queries)]
    placing: list = []
    # as a restart restores them
    simulation.cores[buyer].subscribe_many(batch, simulation.now, placing)
    if forwarded:  # routed to sp1 (a restart of sp1 routes them anyway)
        node, out = simulation.nodes[buyer], []
        node._core(placing, simulation.now, out)
        simulation._execute(buyer, out)
    simulation.run_until_quiet()
    core = simulation.cores["sp1"]
    if forwarded:
        assert core.poset.count_of(superpeer_source("sp0")) > 0
    slices = core.statistics.rerouted
    gc.collect()
    gc.freeze()
    simulation.watch("sp1")
    started = simulation.now
    try:
        simulation.apply({"op": "superpeer_bounce", "superpeer": 0})
    finally:
        gc.unfreeze()
    simulation.watch_ends("sp1")
    restarted, holder = simulation.nodes["sp0"], simulation.nodes["sp1"]
    after = simulation.cores["sp1"]  # a new one if it rejoined
    return BurstResult(
        subscriptions=count,
        longest_call=simulation.longest.get("sp1", 0.0),
        longest_silence=simulation.silence["sp1"],
        placed_after=simulation.now - started,
        declared_failed=restarted.statistics.failures_detected
        + restarted.statistics.rejoins
        + holder.statistics.rejoins,
        waited=after.statistics.rerouted - (slices if after is core else 0),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--subscriptions", type=int, default=20_000)
    parser.add_argument("--placements-per-step", type=int, default=NodeConfig().placements_per_step)
    parser.add_argument("--routings-per-step", type=int, default=CoreConfig().routings_per_step)
    parser.add_argument("--failure-seconds", type=float, default=10.0)
    parser.add_argument(
        "--kind", choices=("adopt", "forward", "restart", "removal"), default="adopt"
    )
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="library")
    arguments = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    count = arguments.subscriptions
    failure = arguments.failure_seconds
    workload = arguments.workload
    if arguments.kind in ("restart", "removal"):
        step = arguments.routings_per_step
        forwarded = arguments.kind == "removal"
        runs = {
            "in one go (baseline)": restart(
                count,
                routings_per_step=count + 1,
                failure_seconds=failure,
                workload=workload,
                forwarded=forwarded,
            ),
            f"in slices of {step}": restart(
                count,
                routings_per_step=step,
                failure_seconds=failure,
                workload=workload,
                forwarded=forwarded,
            ),
        }
        done, waited = "all routed again after", "slices"
    else:
        step = arguments.placements_per_step
        runs = {
            "in one go (baseline)": burst(
                count,
                arguments.kind,
                placements_per_step=count + 1,
                failure_seconds=failure,
                workload=workload,
            ),
            f"in slices of {step}": burst(
                count,
                arguments.kind,
                placements_per_step=step,
                failure_seconds=failure,
                workload=workload,
            ),
        }
        done, waited = "all placed after", "inputs waited"
    for name, result in runs.items():
        print(
            f"{name:22} {count} {workload} subscriptions ({arguments.kind}): "
            f"silent at most {result.longest_silence:.2f} s, "
            f"longest call {result.longest_call:.3f} s, "
            f"{done} {result.placed_after:.1f} s, {waited} {result.waited}, "
            f"neighbour declared it failed {result.declared_failed} times"
        )
    baseline, sliced = runs.values()
    ratio = baseline.longest_silence / sliced.longest_silence
    print(f"longest silence: {ratio:.1f}x shorter in slices")


if __name__ == "__main__":
    main()
