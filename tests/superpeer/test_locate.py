"""Looking a peer up by its public identifier: the address while it is online, nothing otherwise,
at 2(N - 1) backbone messages at most, with no state left behind, and a bounded number of look-ups
waiting per peer."""

import pytest

from superpeer.actions import ToPeer, ToSuperPeer
from superpeer.core import CoreConfig, SuperPeerCore
from superpeer.sim import Simulation
from superpeer.sim.topology import hypercube_views
from wire import messages as m


def backbone(simulation: Simulation) -> int:
    return simulation.messages["sp.locate"] + simulation.messages["sp.located"]


@pytest.mark.parametrize("superpeers", [1, 2, 5, 8, 13, 16])
def test_an_online_peer_is_found_wherever_it_is_and_an_offline_one_is_not(superpeers):
    simulation = Simulation(superpeers)
    simulation.apply({"op": "join", "peer": "asker", "superpeer": 0})
    for k in range(superpeers):
        simulation.apply({"op": "join", "peer": f"owner{k}", "superpeer": k})
        simulation.apply({"op": "locate", "peer": "asker", "id": f"at{k}", "target": f"owner{k}"})
    simulation.apply({"op": "join", "peer": "sleeper", "superpeer": superpeers - 1})
    simulation.apply({"op": "detach", "peer": "sleeper"})
    before = backbone(simulation)
    simulation.apply({"op": "locate", "peer": "asker", "id": "away", "target": "owner0"})
    simulation.apply({"op": "locate", "peer": "asker", "id": "gone", "target": "nobody"})
    not_found = backbone(simulation) - before
    simulation.apply({"op": "locate", "peer": "asker", "id": "off", "target": "sleeper"})
    located = simulation.report()["locations"]["asker"]
    for k in range(superpeers):
        assert located[f"at{k}"] == f"sp{k}"
    assert located["away"] == "sp0"
    assert located["gone"] is None
    assert located["off"] is None
    # found at the asker's own super-peer: no backbone message; not found: the whole tree, twice
    assert not_found == 2 * (superpeers - 1)
    assert simulation.errors == []
    for core in simulation.cores.values():
        assert not core._lookups


def test_the_answer_carries_the_owners_address_and_access_point():
    simulation = Simulation(4)
    simulation.apply({"op": "join", "peer": "asker", "superpeer": 0})
    simulation.apply({"op": "join", "peer": "owner", "superpeer": 3})
    simulation.apply({"op": "locate", "peer": "asker", "id": "q", "target": "owner"})
    [answer] = [a for a in simulation.peers["asker"].answers if isinstance(a, m.Located)]
    assert answer == m.Located(
        id="q",
        public_id="owner",
        online=True,
        address="owner.peer.sim:1",
        superpeer="sp3",
        access_point="sp3.sim:7400",
    )


def cores(count: int, config: CoreConfig | None = None) -> dict[str, SuperPeerCore]:
    ids = [f"sp{k}" for k in range(count)]
    views = hypercube_views(ids)
    return {sp: SuperPeerCore(sp, f"{sp}:1", views[sp], config) for sp in ids}


def test_look_ups_waiting_per_peer_are_limited_and_the_limit_is_named():
    network = cores(4, CoreConfig(max_lookups_per_peer=2))
    core = network["sp0"]
    core.attach("asker", 0.0)
    replies = []
    for number in range(3):
        out = core.peer_message("asker", m.Locate(id=f"q{number}", public_id="x"), 10, 0.0)
        replies += [o.message for o in out if isinstance(o, ToPeer)]
    [refused] = replies
    assert isinstance(refused, m.Refused) and refused.request == "locate q2"
    assert "max_lookups_per_peer = 2" in refused.reason


def test_a_neighbour_departing_mid_look_up_ends_it_as_not_online():
    network = cores(2)
    core = network["sp0"]
    core.attach("asker", 0.0)
    out = core.peer_message("asker", m.Locate(id="q", public_id="x"), 10, 0.0)
    assert [o.node for o in out if isinstance(o, ToSuperPeer)] == ["sp1"]
    alone = hypercube_views(["sp0"])["sp0"]
    out = core.topology_changed(alone, 1.0)
    [answer] = [o.message for o in out if isinstance(o, ToPeer)]
    assert isinstance(answer, m.Located) and not answer.online
    assert not core._lookups
    assert core.peers["asker"].lookups == 0


def test_answers_from_nowhere_are_dropped():
    network = cores(2)
    core = network["sp0"]
    bogus = m.LocateAnswer(
        query="sp0#99", origin="sp0", public_id="x", online=True, address="evil",
        superpeer="sp1", access_point="sp1:1",
    )  # fmt: skip
    out = core.superpeer_message("sp1", bogus, 10, 0.0)
    assert not [o for o in out if isinstance(o, ToPeer)]
    assert core.statistics.dropped == 1


def test_an_answer_for_a_peer_that_left_is_not_counted_against_its_successor():
    network = cores(2, CoreConfig(max_lookups_per_peer=1))
    core, other = network["sp0"], network["sp1"]
    core.attach("asker", 0.0)
    [query] = [
        o.message
        for o in core.peer_message("asker", m.Locate(id="q", public_id="x"), 10, 0.0)
        if isinstance(o, ToSuperPeer)
    ]
    core.leave("asker", 1.0)
    core.attach("asker", 2.0)
    [answer] = [
        o.message
        for o in other.superpeer_message("sp0", query, 10, 3.0)
        if isinstance(o, ToSuperPeer)
    ]
    assert [
        o for o in core.superpeer_message("sp1", answer, 10, 4.0) if isinstance(o, ToPeer)
    ] == []
    assert core.peers["asker"].lookups == 0
    out = core.peer_message("asker", m.Locate(id="again", public_id="x"), 10, 5.0)
    assert not [o for o in out if isinstance(o, ToPeer)], "one look-up may wait: not refused"
