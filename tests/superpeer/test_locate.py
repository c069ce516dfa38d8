"""Looking a peer up by its public identifier: the address while it is online, nothing otherwise,
at 2(N - 1) backbone messages at most, with no state left behind, and a bounded number of look-ups
waiting per peer; asked first, at 2 log2 N messages at most, of the super-peer the asker's
notification named (``superpeer.locating``)."""

import math

import pytest

from superpeer.actions import ToPeer, ToSuperPeer
from superpeer.config import ConfigError, config_from_mapping
from superpeer.core import CoreConfig, SuperPeerCore
from superpeer.locating import Locator, LocatorConfig
from superpeer.node import NodeConfig
from superpeer.rendezvous import Rendezvous
from superpeer.routes import Whereabouts
from superpeer.sim import Simulation
from superpeer.sim.topology import hypercube_views
from superpeer.store import MemoryStore
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


def published(superpeers: int, owner_at: int, asker_at: int = 0) -> Simulation:
    """``asker`` (at ``asker_at``) holds a notification of ``owner``'s paper, published through
    super-peer ``owner_at``: its look-ups of the owner name that super-peer."""
    simulation = Simulation(superpeers)
    for op in [
        {"op": "join", "peer": "owner", "superpeer": owner_at},
        {"op": "join", "peer": "asker", "superpeer": asker_at},
        {"op": "advertise", "peer": "owner", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "asker", "id": "all", "query": f": t(?s, <{DC}title>, ?t)"},
        {
            "op": "publish",
            "peer": "owner",
            "id": "paper",
            "format": "nt",
            "data": f'<http://example.org/paper> <{DC}title> "RDF" .\n',
        },
    ]:
        simulation.apply(op)
    return simulation


DC = "http://purl.org/dc/elements/1.1/"
LOOK_UPS = ("sp.locate_direct", "sp.locate_reply", "sp.locate", "sp.located")


def look_up(simulation: Simulation, name: str) -> tuple[str | None, dict[str, int]]:
    """The asker locates the owner: where it was found, and the backbone messages it cost."""
    before = {kind: simulation.messages[kind] for kind in LOOK_UPS}
    simulation.apply({"op": "locate", "peer": "asker", "id": name, "target": "owner"})
    cost = {kind: simulation.messages[kind] - before[kind] for kind in LOOK_UPS}
    return simulation.report()["locations"]["asker"][name], cost


@pytest.mark.parametrize("superpeers", [2, 4, 5, 8, 13, 16])
def test_a_look_up_goes_to_the_access_point_of_the_notification_and_follows_the_owner(superpeers):
    """Issue 14: the look-up is routed to the super-peer the asker's notification named, by
    bit-fixing (at most log2 N hops each way), not broadcast; it follows the forwarding address
    of an owner that moved (at most log2 N more), and only a super-peer that knows nothing of
    the owner makes the asker's access point ask the whole network (2(N - 1) messages)."""
    dimension = max(1, math.ceil(math.log2(superpeers)))
    simulation = published(superpeers, owner_at=superpeers - 1)
    [notify] = simulation.peers["asker"].notifications
    assert notify.origin == f"sp{superpeers - 1}"

    found, cost = look_up(simulation, "online")
    assert found == f"sp{superpeers - 1}"
    assert cost["sp.locate"] == cost["sp.located"] == 0
    assert 1 <= cost["sp.locate_direct"] <= dimension and cost["sp.locate_reply"] <= dimension

    simulation.apply({"op": "detach", "peer": "owner"})
    found, cost = look_up(simulation, "offline")  # attached there, offline: a definite answer
    assert found is None and cost["sp.locate"] == 0
    assert cost["sp.locate_direct"] <= dimension and cost["sp.locate_reply"] <= dimension

    elsewhere = (superpeers - 1) // 2
    simulation.apply({"op": "move", "peer": "owner", "superpeer": elsewhere})
    found, cost = look_up(simulation, "moved")
    assert found == f"sp{elsewhere}" and cost["sp.locate"] == 0
    assert cost["sp.locate_direct"] <= 2 * dimension and cost["sp.locate_reply"] <= dimension

    simulation.apply({"op": "leave", "peer": "owner"})  # nobody knows it: the network is asked
    found, cost = look_up(simulation, "gone")
    assert found is None
    assert cost["sp.locate_direct"] <= 2 * dimension and cost["sp.locate_reply"] <= dimension
    assert cost["sp.locate"] == cost["sp.located"] == superpeers - 1
    assert simulation.errors == []
    for node in simulation.nodes.values():
        assert node.locator.next_deadline() is None


def test_a_look_up_for_a_super_peer_that_left_the_cube_is_answered_not_here_by_its_position():
    """The route to a named super-peer that left ends at whoever holds its position now: that
    one answers "not known" (the asker's access point then asks the network) rather than
    dropping the look-up; a rendezvous request gets "not here" the same way."""
    ids = ["sp0", "sp1", "sp2", "sp3"]
    views = hypercube_views(ids)
    positions = {sp: views[sp].root_position for sp in ids}
    sent: list = []

    def send(target, message, now, out, *, address=""):
        sent.append((target, message))

    locator = Locator(
        "sp3",
        "sp3:1",
        send=send,
        where=lambda: (views["sp3"], positions),
        whereabouts=lambda peer: Whereabouts(),
        fallback=lambda *a: None,
    )
    held = views["sp3"].root_position
    asked = m.LocateDirect(
        query="q", origin="sp0", origin_position=positions["sp0"], target="sp-left",
        target_position=held, public_id="owner", hops=2,
    )  # fmt: skip
    locator.route(asked, 0.0, [])
    [(towards, reply)] = sent
    assert isinstance(reply, m.LocateReply) and not reply.known and reply.target == "sp0"
    assert towards == views["sp3"].parent(positions["sp0"])

    sent.clear()
    rendezvous = Rendezvous(
        "sp3",
        MemoryStore(),
        send=send,
        where=lambda: (views["sp3"], positions),
        whereabouts=lambda peer: Whereabouts(),
        look_up=lambda *a: None,
    )
    request = m.RendezvousRequest(
        rendezvous="k", target="sp-left", target_position=held, requester="reader",
        requester_superpeer="sp0", requester_position=positions["sp0"], owner="owner",
        publication="p", offset=0, length=10, hops=2,
    )  # fmt: skip
    rendezvous.route(request, 0.0, [])
    [(_, answer)] = sent
    assert isinstance(answer, m.RendezvousChunk) and answer.not_here and answer.target == "sp0"
    assert rendezvous.statistics.not_here == 1


def test_a_direct_look_up_lost_on_the_way_falls_back_and_counts_against_the_limit():
    """A ``LocateDirect`` lost with a super-peer on its way: after ``direct_seconds`` the
    access point asks the network; meanwhile it counts against ``max_lookups_per_peer``."""
    config = NodeConfig(
        heartbeat_seconds=0.5,
        failure_seconds=2.0,
        routing=CoreConfig(max_lookups_per_peer=1),
        locating=LocatorConfig(direct_seconds=1.5),
    )
    simulation = Simulation(4, node_config=config)
    for op in [
        {"op": "join", "peer": "owner", "superpeer": 3},
        {"op": "join", "peer": "asker", "superpeer": 0},
        {"op": "advertise", "peer": "owner", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "asker", "id": "all", "query": f": t(?s, <{DC}title>, ?t)"},
        {"op": "publish", "peer": "owner", "id": "p", "format": "nt",
         "data": f'<http://example.org/p> <{DC}title> "RDF" .\n'},
    ]:  # fmt: skip
        simulation.apply(op)
    enqueue = simulation._enqueue

    def lossy(kind, sender, receiver, **fields):
        if not isinstance(fields.get("message"), m.LocateDirect):
            enqueue(kind, sender, receiver, **fields)

    simulation._enqueue = lossy
    asker = simulation.peers["asker"]
    started = simulation.now
    for number in range(2):
        simulation._from_peer(asker, m.Locate(id=f"q{number}", public_id="owner", superpeer="sp3"))
    simulation.run_until_quiet()
    answers = [a for a in asker.answers if isinstance(a, m.Located | m.Refused)]
    refused, located = answers
    assert isinstance(refused, m.Refused) and "max_lookups_per_peer = 1" in refused.reason
    assert isinstance(located, m.Located) and located.online and located.superpeer == "sp3"
    assert simulation.now - started >= 1.5
    status = simulation.nodes["sp0"].status(simulation.now)["locating"]
    assert status["statistics"]["fallbacks"] == 1 and status["direct_seconds"] == 1.5
    assert simulation.messages["sp.locate"] > 0


def test_the_direct_look_up_wait_is_configurable_and_checked():
    config = config_from_mapping({"limits": {"locate_direct_seconds": 0.5}})
    assert config.node_config(tracing=False).locating.direct_seconds == 0.5
    with pytest.raises(ConfigError, match="locate_direct_seconds"):
        config_from_mapping({"limits": {"locate_direct_seconds": -1}})
