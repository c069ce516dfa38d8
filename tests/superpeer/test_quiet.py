"""The simulator asks a node whether it is busy only when it called the node since it last asked
(``Simulation._any_busy``): after every operation, through failures, restarts, bounces, departures
and joins, nothing is in flight and no node waits for anything, as when it asked every node."""

from superpeer.sim import Simulation
from superpeer.sim.generate import generate

BACKBONE = {
    10: {"op": "superpeer_fail", "superpeer": 5},
    20: {"op": "superpeer_restart", "superpeer": 5},
    30: {"op": "superpeer_bounce", "superpeer": 2},
    40: {"op": "superpeer_leave", "superpeer": 7},
    50: {"op": "superpeer_join"},
}


def test_quiet_after_every_operation() -> None:
    simulation = Simulation(8, seed=3)
    ops = list(
        generate(superpeers=8, peers=12, subscriptions=20, publications=30, churn=0.2, seed=3)
    )
    for number, op in enumerate(ops):
        if number in BACKBONE:
            simulation.apply(BACKBONE[number])
            assert not simulation.errors
        simulation.apply(op)
        assert not simulation._queue
        assert not [n for n, node in simulation.nodes.items() if node.busy()]
    assert sum(simulation.hops.values()) > 0
    simulation.close()
