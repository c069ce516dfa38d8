"""A super-peer that restarts and rejoins while other members still hold links to its old
process (chaos seed 43, on daemons).

A link keeps what it could not deliver, and when it connects again, the process that answers
names its incarnation: what was meant for an older one is dropped. Two things went wrong with
that:

* the member that welcomed the restarted super-peer had never heard from its new incarnation
  (the join came through other members), so it sent the ``Welcome`` meant for the old one, on
  the old link, which dropped it. The cube counted a member that never knew it was one, and
  every route through its place was lost until its silence was noticed;
* the new process acknowledged the old link's frames, and acknowledgements counted as signs of
  life of the incarnation it replaced: the member the cube counted stayed "alive" for 37 s, and
  the catch-up after its repair started from then, not from when it died.

The simulator models the link: a new connection to a newer incarnation drops what was meant
for an older one (``superpeer.sim``), and tells the sender which incarnation answered.
"""

import pytest

from superpeer.sim import Simulation
from tests.superpeer.oracle import expected_deliveries
from tests.superpeer.test_bounce import document, first_publication


def kill_with_no_neighbours_to_tell(simulation: Simulation, index: int) -> None:
    """Kill super-peer ``index``, with a store that names no neighbours for its restart to tell
    at once (as when it had rejoined elsewhere shortly before): only the members its new join
    reaches will learn of its new incarnation."""
    node_id = simulation.ids[index]
    simulation.apply({"op": "superpeer_fail", "superpeer": index})
    simulation.stores[node_id].set_meta("neighbours", "")


def member_again(simulation: Simulation, node_id: str) -> bool:
    node = simulation.nodes.get(node_id)
    return node is not None and node.core is not None


CASES = [(superpeers, victim) for superpeers in (4, 6, 8) for victim in range(3)]


@pytest.mark.parametrize(("superpeers", "victim"), CASES)
def test_a_restarted_super_peer_is_welcomed_at_its_first_attempt(superpeers, victim):
    simulation = Simulation(superpeers)
    node_id = simulation.ids[victim]
    simulation.apply({"op": "wait", "seconds": 5.0})  # every link has carried heartbeats
    kill_with_no_neighbours_to_tell(simulation, victim)
    simulation.apply({"op": "superpeer_restart", "superpeer": victim})
    assert member_again(simulation, node_id)
    assert simulation.dropped_by_links["hypercup.welcome"] == 0
    restarted = simulation.nodes[node_id]
    assert restarted.statistics.rejoins == 0, "its first join went through"
    repairs = sum(node.statistics.repairs for node in simulation.nodes.values())
    assert repairs == 1, "only its old incarnation's place was repaired, not a phantom's"


@pytest.mark.parametrize(("superpeers", "victim"), CASES)
def test_what_is_published_while_a_restarted_super_peer_rejoins_reaches_its_subscribers(
    superpeers, victim
):
    """The publisher goes on while the restarted super-peer joins. (On daemons this lost every
    publication of the 37 s the dead incarnation seemed alive. The simulator's links connect at
    once, so it held before the fix as well: it is here as the property the fix must keep.)"""
    others = [k for k in range(superpeers) if k != victim]
    subscriber, publisher = others[0], others[-1]
    ops = first_publication(subscriber, publisher)
    simulation = Simulation(superpeers)
    for op in ops:
        simulation.apply(dict(op))
    node_id = simulation.ids[victim]
    kill_with_no_neighbours_to_tell(simulation, victim)
    # the restarted process starts joining, and the publisher goes on while it does
    simulation._superpeer_restart(victim)
    simulation._advance(simulation.now + 0.2)
    during = {"op": "publish", "peer": "pub", "id": "during", "format": "nt", "data": document(2)}
    simulation.apply(during)
    after = {"op": "publish", "peer": "pub", "id": "after", "format": "nt", "data": document(3)}
    simulation.apply(after)
    assert member_again(simulation, node_id)
    assert sorted(simulation.deliveries()["sub"]) == ["after", "before", "during"]
    everything = [*ops, during, after]
    assert simulation.deliveries() == expected_deliveries(superpeers, everything)
