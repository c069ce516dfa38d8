"""The simulator asks a node whether it is busy only when it called the node since it last asked
(``Simulation._any_busy``): after every operation, through failures, restarts, bounces, departures
and joins, nothing is in flight and no node waits for anything, as when it asked every node. And
``busy`` (the quick test) says what ``waiting_for`` says, after every input."""

from superpeer.sim import Simulation
from superpeer.sim.generate import generate

BACKBONE = {
    10: {"op": "superpeer_fail", "superpeer": 5},
    20: {"op": "superpeer_restart", "superpeer": 5},
    30: {"op": "superpeer_bounce", "superpeer": 2},
    40: {"op": "superpeer_leave", "superpeer": 7},
    50: {"op": "superpeer_join"},
}


class _Checked(Simulation):
    """Asks every node it called whether it is busy both ways."""

    def _execute(self, node_id: str, outputs: list) -> None:
        super()._execute(node_id, outputs)
        node = self.nodes.get(node_id)
        if node is not None:
            assert node.busy() == bool(node.waiting_for()), node.waiting_for()


def test_quiet_after_every_operation() -> None:
    simulation = _Checked(8, seed=3)
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
