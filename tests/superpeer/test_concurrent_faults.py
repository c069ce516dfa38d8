"""Faults in the middle of a join, in the simulator. A newcomer that dies while it joins is
handled (the members that admitted it repair its place). A member that fails while a join is
in progress is not: HyperCuP's departures assume they run alone (``hypercup.node``), and the
repair either waits for the join for ever or trips the protocol's own invariant. Found with
``deploy.delivery`` on a loaded machine, where stalls made super-peers rejoin while others
joined; kept here as the open case until the topology protocol takes concurrent departures."""

import heapq

import pytest

from superpeer.sim import Simulation
from superpeer.sim.network import SimulationStuck
from superpeer.store import MemoryStore


def joining(superpeers: int, steps: int) -> tuple[Simulation, str]:
    """A cube of ``superpeers`` with a newcomer ``steps`` messages into its join."""
    simulation = Simulation(superpeers)
    newcomer = f"sp{superpeers}"
    simulation.ids.append(newcomer)
    simulation.stores[newcomer] = MemoryStore()
    simulation._start(newcomer)
    for _ in range(steps):
        if simulation._queue:
            simulation._deliver(heapq.heappop(simulation._queue))
    return simulation, newcomer


@pytest.mark.parametrize("superpeers", [4, 5, 8])
@pytest.mark.parametrize("steps", [1, 3, 6, 10, 20])
def test_a_newcomer_that_dies_while_it_joins_is_repaired(superpeers, steps):
    simulation, newcomer = joining(superpeers, steps)
    simulation._kill(newcomer)
    simulation.run_until_quiet()
    members = sorted(k for k, node in simulation.nodes.items() if node.core is not None)
    assert members == [f"sp{k}" for k in range(superpeers)]
    for node in simulation.nodes.values():
        assert newcomer not in node.core.view.neighbours()


@pytest.mark.xfail(
    strict=True,
    raises=(SimulationStuck, AssertionError),
    reason="open (backbone issue): a member failing while a join is in progress wedges the "
    "cube: its repair waits for the join, which waits for the failed member",
)
def test_a_member_that_fails_while_another_joins_is_repaired():
    simulation, _ = joining(4, 3)
    simulation._kill("sp0")
    simulation.run_until_quiet()
