"""Faults in the middle of a join, in the simulator. A newcomer that dies while it joins is
handled (the members that admitted it repair its place). A member that fails while a join is
in progress is too: the join goes on without it, the departure waits for the join, and what
the protocol still cannot untangle (a grow or a shrink overtaking a repair) ends in rejoins
(``superpeer.node``: the wedge watchdog, a new cube when nobody is left in one). Found with
``deploy.delivery`` on a loaded machine, where stalls made super-peers rejoin while others
joined."""

import heapq

import pytest

from hypercup import Topology
from superpeer.config import ConfigError, config_from_mapping
from superpeer.sim import Simulation
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


def assert_one_cube(simulation: Simulation, members: set[str]) -> None:
    """``members`` and nobody else hold the cube, every position once, and each member's own
    neighbour table is the one the global picture gives it."""
    nodes = {k: node for k, node in simulation.nodes.items() if node.core is not None}
    assert set(nodes) == members
    views = {k: node.topology.view() for k, node in nodes.items()}
    (dimension,) = {view.dimension for view in views.values()}
    topology = Topology.from_positions(
        dimension=dimension, positions={k: view.positions for k, view in views.items()}
    )
    topology.check()
    for k, view in views.items():
        assert view.table == topology.local_view(k).table, k
        assert nodes[k].core.view.neighbours() == topology.neighbours(k)


@pytest.mark.parametrize("superpeers", [4, 5, 8])
@pytest.mark.parametrize("steps", [1, 3, 6, 10])
@pytest.mark.parametrize("victim", [0, 1, 2])
def test_a_member_that_fails_while_another_joins_is_repaired(superpeers, steps, victim):
    simulation, newcomer = joining(superpeers, steps)
    simulation._kill(f"sp{victim}")
    simulation.run_until_quiet()
    alive = {f"sp{k}" for k in range(superpeers) if k != victim} | {newcomer}
    assert_one_cube(simulation, alive)


def test_the_wedge_limit_is_configurable_and_checked():
    config = config_from_mapping({"limits": {"wedged_seconds": 12.5}})
    assert config.node_config(tracing=False).wedged_seconds == 12.5
    with pytest.raises(ConfigError, match="wedged_seconds"):
        config_from_mapping({"limits": {"wedged_seconds": 0}})
