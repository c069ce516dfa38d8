"""Partitions in the simulator (``superpeer._merging``): each side keeps delivering inside
itself, the sides become one cube again within the bound after the cut heals, and every
publication either side accepted reaches every matching subscriber on the other, exactly once,
from the origins' logs; a log that no longer reaches back says so (a gap notice)."""

import heapq
from dataclasses import replace

import pytest

from bench.chaos_replay import Replay, cut_plans
from hypercup import ChangeRequest, NeighbourUpdate
from hypercup.errors import RemoteProtocolError
from superpeer import _merging
from superpeer.actions import Stopped
from superpeer.config import ConfigError, config_from_mapping
from superpeer.core import broadcast_key
from superpeer.node import NodeConfig, SuperPeerNode
from superpeer.sim import Simulation
from tests.superpeer.invariants import check_routing
from tests.superpeer.oracle import expected_deliveries
from tests.superpeer.test_clocks import BROAD, clock_in_a_cut, publish
from wire import messages as m
from wire.framing import Received

REFORMING = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, reform_seconds=6.0)
"""The simulator's timeouts, with ``reform_seconds`` three failure timeouts, as the defaults."""
HEAL_BOUND = 30.0
"""Seconds after a heal within which the super-peers are one cube again (the README's bound)."""
QUERY = "X : t(X, dc:title, T)"


def two_sides(superpeers: int) -> list[dict]:
    """A publisher and a subscriber at each end of the cube."""
    last = superpeers - 1
    return [
        {"op": "join", "peer": "subA", "superpeer": 0},
        {"op": "join", "peer": "pubA", "superpeer": 1},
        {"op": "join", "peer": "subB", "superpeer": last},
        {"op": "join", "peer": "pubB", "superpeer": last - 1},
        {"op": "advertise", "peer": "pubA", **BROAD},
        {"op": "advertise", "peer": "pubB", **BROAD},
        {"op": "subscribe", "peer": "subA", "id": "s1", "query": QUERY},
        {"op": "subscribe", "peer": "subB", "id": "s1", "query": QUERY},
    ]


def streaming(first: int, pairs: int, every: float = 0.5) -> list[dict]:
    ops = []
    for n in range(first, first + 2 * pairs, 2):
        ops += [publish(n, "pubA"), publish(n + 1, "pubB"), {"op": "wait", "seconds": every}]
    return ops


def heal_time(simulation: Simulation, ops: list[dict], heal: dict) -> float:
    """Apply ``ops`` up to ``heal``, then the heal, then time in small steps: the seconds
    until the live super-peers are one cube."""
    for op in ops:
        simulation.apply(dict(op))
    simulation.apply(dict(heal))
    healed = simulation.now
    while True:
        cubes = simulation.cubes()
        if len(cubes) == 1 and None not in cubes:
            return simulation.now - healed
        assert simulation.now - healed < 4 * HEAL_BOUND, cubes
        simulation.apply({"op": "wait", "seconds": 0.25})


@pytest.mark.slow
@pytest.mark.parametrize(
    ("superpeers", "groups"),
    [
        (8, [[0, 1, 2, 3], [4, 5, 6, 7]]),  # halves
        (8, [[6]]),  # a minority of one
        (8, [[0, 1, 2], [3, 4, 5, 6, 7]]),  # k | N - k
        (8, [[0, 1, 2, 3, 4], [4, 5, 6, 7]]),  # a bridge that reaches both sides
        (32, [list(range(16)), list(range(16, 32))]),
    ],
    ids=["halves", "isolated", "three-five", "bridge", "halves-of-32"],
)
def test_the_sides_of_a_partition_become_one_and_lose_nothing(superpeers, groups):
    """Publishing on both sides for 60 s of cut (and more while each side settles), then the
    heal: one cube within the bound, and each subscriber has everything, once."""
    before = [*two_sides(superpeers), *streaming(0, 3)]
    cut = [{"op": "partition", "groups": groups}, *streaming(6, 120)]
    simulation = Simulation(superpeers)
    seconds = heal_time(simulation, before + cut, {"op": "heal"})
    assert seconds < HEAL_BOUND
    after = [*streaming(246, 10), {"op": "wait", "seconds": 30}]
    for op in after:
        simulation.apply(dict(op))
    ops = [*before, *cut, {"op": "heal"}, *after]
    expected = expected_deliveries(superpeers, ops)
    assert len(expected["subA"]) == len(expected["subB"]) == 266
    assert simulation.deliveries() == expected
    assert all(p.filtered == 0 and not p.gaps for p in simulation.peers.values())


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "shape"), [(1, "cut"), (1, "bridge"), (8, "cut")])
def test_a_long_cut_of_32_super_peers_heals_into_one_cube_within_the_bound(seed, shape):
    """60 s of cut on a quiet cube of 32 (``python -m bench.chaos_replay --superpeers 32
    --cut-only 60``): longer than the watchdog, so whole sides rejoin at once after the heal,
    up to sixteen through one full cube. Three cuts that took 60 s or never healed: a join's
    report to its anchor went to the anchor's incarnation of before the cut and was dropped
    (``JoinWalk.anchor_incarnation``), and every grow waited ``STALE_TICKS`` for it; the
    newcomers' walks asked again meanwhile were all queued, and the grow restarted the
    duplicates with them (``hypercup._joins``)."""
    plan = next(p for p in cut_plans(32, seed, 60.0) if p["faults"][0]["shape"] == shape)
    config = NodeConfig(
        heartbeat_seconds=0.5, failure_seconds=3.0, wedged_seconds=30.0, reform_seconds=9.0
    )
    (record,) = Replay(plan, config, seed).run()
    assert record.one_cube is not None and record.one_cube < HEAL_BOUND


def test_a_relay_killed_for_good_loses_nothing_it_was_relaying():
    """Four super-peers, a publisher streaming on one, its subscriber two hops away, the relay
    between them killed and never restarted: its place is repaired, and the subscriber's access
    point catches up from when the relay was last heard from, as its repairer said (a member
    that took its place and never heard from it started the catch-up 5 s late: 91 of 535)."""
    ops = [
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "sub", "superpeer": 3},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
    ]
    simulation = Simulation(4, interleave=True, seed=3)
    for op in ops:
        simulation.apply(dict(op))
    relay = next(
        int(node[2:])
        for node in simulation.nodes["sp0"].core.view.neighbours()
        if "sp3" in simulation.nodes[node].core.view.neighbours()
    )
    stream = [publish(n, "pub") for n in range(40)]
    for op in stream[:20]:
        simulation.apply(dict(op))
    crash = {"op": "superpeer_fail", "superpeer": relay}
    simulation.apply(dict(crash))
    for op in stream[20:]:
        simulation.apply(dict(op))
    all_ops = [*ops, *stream[:20], crash, *stream[20:]]
    assert simulation.deliveries() == expected_deliveries(4, all_ops)
    assert len(simulation.deliveries()["sub"]) == 40


@pytest.mark.slow
def test_a_partition_longer_than_the_log_is_told_as_a_gap():
    """Each origin keeps 30 s of log here; the cut lasts longer: what the other side published
    more than that before the heal is gone from the logs, and each subscriber hears so (a gap
    notice naming the origin), never silence. What the logs still hold arrives."""
    config = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, log_seconds=30.0)
    config = replace(config, housekeeping_seconds=1.0)
    simulation = Simulation(8, node_config=config)
    ops = [*two_sides(8), {"op": "partition", "groups": [[0, 1, 2, 3], [4, 5, 6, 7]]}]
    ops += streaming(0, 100)  # 100 s and more of cut
    for op in ops:
        simulation.apply(dict(op))
    for op in [{"op": "heal"}, {"op": "wait", "seconds": 30}]:
        simulation.apply(dict(op))
    for subscriber, side in (("subA", 1), ("subB", 0)):
        peer = simulation.peers[subscriber]
        # the other side's origin, at least (the side that rejoined asks every origin, its own
        # too, and cannot tell which publications it had: it says so rather than stay silent)
        assert f"sp{6 if side else 1}" in {gap.owner for gap in peer.gaps}
        got = {pid for _, pid, _ in peer.received}
        theirs = {f"n{n}" for n in range(side, 200, 2)}
        assert got & theirs, "what the log still held arrived"
        assert theirs - got, "some were pruned: that is what the gap notice says"
        assert "may be missing" in str(peer.gaps[0].publication.statements)


def test_what_a_partition_held_up_goes_to_no_subscription_made_meanwhile():
    """A link between the sides holds the origin's notifications for the cut's length; they
    arrive at the access point along the route an older subscription had built, after that
    one was withdrawn and a new one made: the new one is owed nothing published before it (a
    16-super-peer netns chaos run delivered 10 such, 3 to 14 s older than the subscription)."""
    ops = [
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "sub", "superpeer": 7},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "old", "query": QUERY},
        {"op": "wait", "seconds": 2},
        {"op": "partition", "groups": [[0, 1, 2, 3], [4, 5, 6, 7]]},
        {"op": "wait", "seconds": 1},
        {"op": "unsubscribe", "peer": "sub", "id": "old"},
        {"op": "wait", "seconds": 1},
        *[publish(n, "pub") for n in range(5)],
        {"op": "wait", "seconds": 10},
        {"op": "subscribe", "peer": "sub", "id": "new", "query": QUERY},
        {"op": "wait", "seconds": 5},
        {"op": "heal"},
        {"op": "wait", "seconds": 30},
        publish(5, "pub"),
        {"op": "wait", "seconds": 5},
    ]
    simulation = Simulation(8, keep_notifications=True)
    for op in ops:
        simulation.apply(dict(op))
    sub = simulation.peers["sub"]
    assert sub.filtered == sub.early == 0
    assert [(n.publication.id, n.subscriptions) for n in sub.notifications] == [("n5", ("new",))]
    assert simulation.deliveries() == expected_deliveries(8, ops)


def test_a_subscriber_that_withdrew_during_a_cut_gets_what_the_other_side_published_before():
    """The subscriber's access point is evicted at the heal and rejoins; the catch-up for the
    window of the subscription withdrawn during the cut is answered before the subscriber
    reconnects, and it has nothing else left there (no subscription, no advertisement): the
    answer was dropped as for a peer unknown (found by the clocks-in-a-cut property, with no
    clock off at all)."""
    ops = clock_in_a_cut(0, 0.0, [[0, 1, 2, 3], [4, 5, 6, 7]], "unsubscribe")
    simulation = Simulation(8, seed=0)
    for op in ops:
        simulation.apply(dict(op))
    assert simulation.deliveries()["sub"] == ["n0", "n1", "n2", "n3", "n4", "n5"]
    assert simulation.deliveries() == expected_deliveries(8, ops)


def test_a_replay_stays_a_replay_down_the_tree():
    """An origin back on its data replays its recent log down its trees, marked ``replayed``:
    each relay keeps the mark, so an access point further down delivers what the replay
    brings only to subscriptions older than the publication (the relay once dropped the
    mark, and a subscription made after a publication received it: 68 in a netns chaos run)."""
    ops = [
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "sub", "superpeer": 3},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "wait", "seconds": 5},
        *[publish(n, "pub") for n in range(5)],
        {"op": "wait", "seconds": 8},
        {"op": "subscribe", "peer": "sub", "id": "late", "query": QUERY},
        {"op": "wait", "seconds": 1},
        {"op": "superpeer_bounce", "superpeer": 0},
        {"op": "wait", "seconds": 30},
    ]
    simulation = Simulation(4, keep_notifications=True)
    for op in ops:
        simulation.apply(dict(op))
    sub = simulation.peers["sub"]
    assert sub.filtered == 0
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert sub.notifications == []


def test_the_simulator_waits_for_a_merge_under_way():
    """A cut off super-peer of a two-node cube heals into two one-node cubes; the weaker one's
    merge waits ``merge_delay_seconds`` after it met the stronger: the operation is not over
    (``busy``) until it rejoined and holds the other's advertisements again."""
    ops = [*two_sides(2)[:-2], {"op": "superpeer_cut", "superpeer": 0, "seconds": 8.0}]
    simulation = Simulation(1)
    simulation.apply({"op": "superpeer_join"})
    for op in ops:
        simulation.apply(op)
    assert all(node._merging is None for node in simulation.nodes.values())
    check_routing(simulation)


def cut_while_publishing(cut_off: int, publications: int) -> list[dict]:
    """Four super-peers, a publisher at 0 and a subscriber at 2; after three publications
    super-peer ``cut_off`` is cut off alone, and the publisher goes on, one every half
    second, to ``publications`` in all."""
    ops = [
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "sub", "superpeer": 2},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        *[publish(n, "pub") for n in range(3)],
        {"op": "partition", "groups": [[cut_off], [k for k in range(4) if k != cut_off]]},
    ]
    for n in range(3, publications):
        ops += [publish(n, "pub"), {"op": "wait", "seconds": 0.5}]
    return ops


def deliveries_as_the_oracle_says(ops: list[dict]) -> dict:
    """The four super-peers run ``ops``; every inbox is the oracle's."""
    simulation = Simulation(4, interleave=True, seed=0)
    for op in ops:
        simulation.apply(dict(op))
    assert simulation.deliveries() == expected_deliveries(4, ops)
    return simulation.deliveries()


@pytest.mark.parametrize("gone", ["leave", "move"])
def test_a_publisher_gone_from_an_access_point_cut_off_alone_loses_nothing(gone):
    """The publisher's access point is cut off alone while it publishes, and the publisher
    leaves (or moves to the other side) before the heal: the access point rejoins with nothing
    to advertise, so no ``Elements`` says it is back; its return does, and the subscriber's
    access point asks its log for what it accepted while apart (the chaos run on hosts of
    their own lost those: the origin still counted as failed)."""
    ops = cut_while_publishing(0, 23)
    away = {"op": "leave", "peer": "pub"}
    if gone == "move":
        away = {"op": "move", "peer": "pub", "superpeer": 3}
    ops += [away, {"op": "wait", "seconds": 1}, {"op": "heal"}, {"op": "wait", "seconds": 60}]
    assert len(deliveries_as_the_oracle_says(ops)["sub"]) == 23


@pytest.mark.parametrize("again", [False, True])
def test_a_subscriber_moving_from_an_access_point_that_died_cut_off_loses_nothing(again):
    """The subscriber's access point is cut off alone while the publisher publishes; the
    subscriber reconnects to it (``again``) during the cut, the access point dies for good
    before the heal, and the subscriber moves on. Its move statement starts no later than
    when that access point began to miss the other side (``Welcome.missing_since``), not at
    its reconnection: the access point it moves to catches up on everything (a chaos run
    on hosts of their own lost 102 such publications)."""
    ops = cut_while_publishing(2, 13)
    if again:
        ops += [{"op": "detach", "peer": "sub"}, {"op": "attach", "peer": "sub"}]
    ops += [
        {"op": "wait", "seconds": 1},
        {"op": "superpeer_fail", "superpeer": 2},
        {"op": "move", "peer": "sub", "superpeer": 3},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ]
    assert len(deliveries_as_the_oracle_says(ops)["sub"]) == 13


@pytest.mark.parametrize("healed_first", [False, True])
def test_a_subscriber_attached_through_a_cut_moves_from_its_dead_access_point_losing_nothing(
    healed_first,
):
    """The subscriber stays attached to its access point through the cut, long enough for
    ``Clock`` s to carry the access point's hybrid time past the publications it missed; it
    detaches, (``healed_first``: the cut heals and the missed publications reach the access
    point late, as mail), the access point dies for good, and the subscriber moves on. Its
    move statement says from when that access point was missing things
    (``Moved.missing_since``, from the latest ``Clock``), and the access point it moves to
    catches up from there, not from the last ``Clock``'s time (seed 723 of the chaos run on
    hosts of their own lost five such publications)."""
    ops = cut_while_publishing(2, 13)
    ops += [{"op": "wait", "seconds": 30}, {"op": "detach", "peer": "sub"}]
    if healed_first:
        ops += [{"op": "heal"}, {"op": "wait", "seconds": 30}]
    ops += [
        {"op": "superpeer_fail", "superpeer": 2},
        {"op": "move", "peer": "sub", "superpeer": 3},
    ]
    if not healed_first:
        ops += [{"op": "heal"}]
    ops += [{"op": "wait", "seconds": 60}]
    assert len(deliveries_as_the_oracle_says(ops)["sub"]) == 13


def test_a_leaver_whose_table_does_not_fit_together_stops_and_is_repaired(monkeypatch):
    """A member asked to leave whose knowledge of its neighbourhood does not fit together
    cannot start a leave walk: it stops, and its place is repaired as a failure's. The
    topology protocol's error came out of ``leave`` (a replay of the chaos schedules in the
    simulator: "sp6: nobody is known to hold positions [6, 14]", after overlapping repairs
    that no smaller case reproduces), which a daemon's signal handler does not survive: here
    the protocol is made to refuse as it did."""
    simulation = Simulation(8, seed=1)
    simulation.run_until_quiet()
    node = simulation.nodes["sp3"]

    def refused(**_: object) -> list:
        raise RemoteProtocolError("", "sp3: nobody is known to hold positions [2]")

    monkeypatch.setattr(node.topology, "leave", refused)
    outputs = node.leave(simulation._clock("sp3"))
    assert [o for o in outputs if isinstance(o, Stopped)]
    simulation._execute("sp3", outputs)
    simulation.run_until_quiet()
    cubes = simulation.cubes()
    assert "sp3" not in simulation.nodes
    assert len(cubes) == 1 and set(next(iter(cubes.values()))) == set(simulation.nodes)


@pytest.mark.parametrize("dead", [1, 3])
def test_super_peers_all_out_of_the_cube_become_one_cube_again(dead):
    """Half of six super-peers gone for good, the others each out of the cube at once (a
    protocol break each): the smallest live one starts a cube, the others join it. Two took
    themselves for the smallest (each had the other for dead) and started a cube each at the
    same instant; neither knew the other as lost, so neither probed the other, and the two
    cubes never merged (a ten-minute chaos run: none for six minutes, until a new super-peer
    joined). Now a node that starts a cube counts every other it knows as lost."""
    simulation = Simulation(6, seed=1)
    simulation.run_until_quiet()
    started = simulation.now
    for k in range(dead):
        simulation._kill(f"sp{k}")
    for node_id in sorted(simulation.nodes):
        out: list = []
        simulation.nodes[node_id]._rejoin("test", simulation._clock(node_id), out)
        simulation._execute(node_id, out)

    def one_cube() -> bool:
        cubes = simulation.cubes()
        return (
            len(cubes) == 1
            and None not in cubes
            and set(next(iter(cubes.values()))) == set(simulation.nodes)
        )

    simulation.run_until_quiet(until=one_cube)
    assert simulation.now - started < 2 * NodeConfig().wedged_seconds


def test_a_node_evicted_a_moment_after_its_welcome_keeps_its_contacts():
    """A rejoin soon after a join, with neighbours that never spoke, means a cube reached
    partly (a bridge across a cut): its members are no contacts for ``wedged_seconds``. But a
    neighbour is silent only once it had ``failure_seconds`` to speak. A process evicted a
    moment after its welcome (a neighbour the welcome's update had not reached) marked every
    member unusable, and asked for a minute only the one contact left: a super-peer that had
    left (a kill and a leave together, 9 super-peers)."""
    simulation = Simulation(8, seed=1)
    simulation.run_until_quiet()
    node = simulation.nodes["sp3"]

    def evict_by_a_neighbour() -> None:
        neighbour = min(node.core.view.neighbours())
        # (the neighbour's: a newcomer knows no root until its tree parent reports one)
        dimension, root = simulation.nodes[neighbour].cube_identity()
        evicted = m.Evicted(
            reason="replaced",
            incarnation=node.incarnation,
            root=root,
            dimension=dimension,
            address=simulation.nodes[neighbour].address,
        )
        at = simulation._clock("sp3")
        received = Received(evicted, "e")
        incarnation = simulation.nodes[neighbour].incarnation
        simulation._execute("sp3", node.superpeer_message(neighbour, incarnation, received, at))

    evict_by_a_neighbour()
    while node._joined_at is None:  # one step at a time, to the welcome
        timer = simulation._next_timer()
        if simulation._queue and (timer is None or simulation._queue[0].at < timer[0]):
            simulation._deliver(heapq.heappop(simulation._queue))
        else:
            simulation._fire(timer)
    evict_by_a_neighbour()
    now = simulation._clock("sp3")
    assert not [n for n in simulation.nodes if node._unusable_until(n, now)]
    simulation.run_until_quiet()
    cubes = simulation.cubes()
    assert len(cubes) == 1 and set(next(iter(cubes.values()))) == set(simulation.nodes)


def a_claim_across_the_cube() -> tuple[Simulation, SuperPeerNode, int, str, str]:
    """A quiet cube of 8; sp0, a position its table gives to a neighbour (the holder), and a
    member that is no neighbour of sp0 (to claim that position)."""
    simulation = Simulation(8, seed=1)
    simulation.run_until_quiet()
    receiver = simulation.nodes["sp0"]
    position, holder = min(receiver.topology.view().table.items())
    claimer = next(
        k
        for k in sorted(simulation.nodes)
        if k not in (receiver.node_id, holder) and not receiver.topology.is_neighbour(k)
    )
    return simulation, receiver, position, holder, claimer


@pytest.mark.parametrize("kind", ["taken", "beside-none", "taken-rootless", "taken-reborn"])
def test_a_member_claiming_a_place_its_neighbours_give_to_another_is_evicted_and_rejoins(kind):
    """Two overlapping repairs can leave a member holding a place the cube gave to another,
    with nothing telling it (the 16-super-peer chaos run ended with two members at position
    8). Its heartbeats say which positions it holds: a member whose table gives one of them to
    another live neighbour, for ``failure_seconds`` on end, evicts it, and it rejoins. So does
    a member that holds no position next to them: the sender's table gives it a place it left
    (a kill and a pause together, 32 super-peers: ``test_concurrent_faults``). And so is one
    whose heartbeats name no cube: its tree parent never told it the root, so they used to be
    read as no claim at all (a kill and a pause, 9 super-peers, seed 10: not one cube for the
    simulated hour). The ``failure_seconds`` count from the claiming incarnation's first claim:
    a process just welcomed claims its place before the welcome's update reaches every
    neighbour, and its earlier incarnation's claims say nothing of it (a kill and a leave
    together, 9 super-peers: the new process evicted a moment after its welcome, again and
    again, for a minute)."""
    simulation, receiver, position, holder, claimer = a_claim_across_the_cube()
    dimension, root = receiver.cube_identity()
    incarnation = simulation.nodes[claimer].incarnation

    def heartbeat(positions: tuple[int, ...], at: float, by: int = incarnation) -> list:
        if kind.endswith("rootless"):
            claim = m.Heartbeat(wall=at, positions=positions)
        else:
            claim = m.Heartbeat(wall=at, root=root, dimension=dimension, positions=positions)
        return receiver.superpeer_message(claimer, by, Received(claim, "h"), at)

    def evictions(outputs: list) -> list:
        return [o.message for o in outputs if isinstance(getattr(o, "message", None), m.Evicted)]

    now = simulation._clock("sp0")
    own = tuple(sorted(simulation.nodes[claimer].core.view.positions))
    if kind.startswith("taken"):  # a place the receiver's table gives to another live neighbour
        claimed, named = (position,), holder
    else:  # its own place, next to none of the receiver's: its table gives the receiver one
        claimed, named = own, "next to none of"
    claiming = incarnation
    if kind.endswith("reborn"):  # the incarnation before claimed it long ago, then a new one
        earlier = now - 2 * receiver.config.failure_seconds
        assert not evictions(heartbeat(claimed, earlier))
        claiming = incarnation + 1
    assert not evictions(heartbeat(claimed, now, by=claiming))  # once is a race, not a claim
    [evicted] = evictions(heartbeat(claimed, now + receiver.config.failure_seconds, by=claiming))
    assert named in evicted.reason and evicted.incarnation == claiming
    if kind.endswith("reborn"):
        return  # that incarnation is not the process here: the rejoin is the other kinds'
    outputs = simulation.nodes[claimer].superpeer_message(
        "sp0", receiver.incarnation, Received(evicted, "e"), simulation._clock(claimer)
    )
    assert simulation.nodes[claimer].incarnation > incarnation  # it rejoins
    simulation._execute(claimer, outputs)
    simulation.run_until_quiet()
    cubes = simulation.cubes()
    assert len(cubes) == 1 and set(next(iter(cubes.values()))) == set(simulation.nodes)


@pytest.mark.parametrize("handed_over", [True, False])
def test_a_place_its_holder_no_longer_claims_is_not_taken_from_the_member_claiming_it(
    handed_over,
):
    """(Issue 33, 16 super-peers, seed 8) sp15 handed position 15 to the newcomer sp19, and its
    take waited on the acks of a member evicted meanwhile, so sp11's table still gave 15 to
    sp15: after ``failure_seconds`` sp11 evicted sp19, which every member then refused as
    "still a member here" until sp15's watchdog fired, and one cube never came. The holder's
    own heartbeats claimed 15 no more: a place its holder no longer claims is not a stale
    claim. (Still claiming it, it is: two members hold one place.)"""
    simulation, receiver, position, holder, claimer = a_claim_across_the_cube()
    dimension, root = receiver.cube_identity()
    kept = tuple(p for p in range(1 << dimension) if p != position)[:1]

    def heartbeat(sender: str, positions: tuple[int, ...], at: float) -> list:
        claim = m.Heartbeat(wall=at, root=root, dimension=dimension, positions=positions)
        incarnation = simulation.nodes[sender].incarnation
        return receiver.superpeer_message(sender, incarnation, Received(claim, "h"), at)

    def evicted(outputs: list) -> bool:
        return any(isinstance(getattr(o, "message", None), m.Evicted) for o in outputs)

    now = simulation._clock("sp0")
    failure = receiver.config.failure_seconds
    outputs: list = []
    for step in range(3):
        at = now + step * failure
        heartbeat(holder, kept if handed_over else (position,), at)
        outputs += heartbeat(claimer, (position,), at)
    assert evicted(outputs) is not handed_over


@pytest.mark.parametrize("lagging", [False, True])
def test_a_member_that_missed_a_change_of_dimension_takes_no_member_for_another_cube(lagging):
    """kill-pause at 9, seed 19: a member that had missed a shrink (its tree parent was the
    paused one) heard a member of the smaller cube, no neighbour of it in the old one, name
    another root, took it for a weaker cube's and evicted it; the rejoins that followed took
    166 s. A member that knows it lags (it holds messages of an epoch it has not reached)
    judges no other cube by its stale identity, until the change it asks for comes."""
    simulation = Simulation(8, seed=1)
    simulation.run_until_quiet()
    receiver = simulation.nodes["sp0"]
    view = receiver.topology.view()
    neighbour = view.table[min(view.table)]
    stranger = next(
        k
        for k in sorted(simulation.nodes)
        if k not in (receiver.node_id, neighbour) and not receiver.topology.is_neighbour(k)
    )
    if lagging:  # a message of the next epoch came, not the change that begins it
        later = NeighbourUpdate(
            epoch=receiver.topology.epoch + 1,
            holders={neighbour: (receiver.addresses[neighbour], (0,))},
            relay=False,
            ack_id=None,
        )
        receiver.topology.receive(neighbour, later)
    assert receiver.topology.lagging() is lagging
    dimension, _ = receiver.cube_identity()
    now = simulation._clock("sp0")
    smaller = m.Heartbeat(wall=now, root=stranger, dimension=dimension - 1, positions=(1,))
    incarnation = simulation.nodes[stranger].incarnation
    outputs = receiver.superpeer_message(stranger, incarnation, Received(smaller, "h"), now)
    evicted = [o for o in outputs if isinstance(getattr(o, "message", None), m.Evicted)]
    assert bool(evicted) is not lagging


@pytest.mark.parametrize("one_agrees", [False, True])
def test_a_member_whose_neighbours_all_name_another_dimension_asks_then_rejoins(one_agrees):
    """(Issue 33, 16 super-peers, seed 28 of the replayed schedules) a member missed a shrink
    and nothing of the new epoch ever reached it after: only heartbeats, which named its own
    root and a dimension of 4 beside its 5. It stayed in the old view, a second cube of one,
    for the rest of the run. When every neighbour's heartbeats name another dimension for
    ``failure_seconds``, it asks them for the changes (``ChangeRequest``, as a lagging node
    does), and rejoins ``failure_seconds`` later if that did not help. Not if one neighbour
    names its dimension: that neighbour and it may be right, the others lagging."""
    simulation = Simulation(8, seed=1)
    simulation.run_until_quiet()
    receiver = next(n for _, n in sorted(simulation.nodes.items()) if 3 in n.core.view.positions)
    dimension, root = receiver.cube_identity()
    neighbours = sorted(receiver.core.view.neighbours())
    incarnation = receiver.incarnation
    failure = receiver.config.failure_seconds
    start = simulation._clock(receiver.node_id)
    asked: list[str] = []
    at = start
    while at < start + 2.5 * failure and receiver.incarnation == incarnation:
        at += receiver.config.heartbeat_seconds
        for neighbour in neighbours:
            named = dimension if one_agrees and neighbour == neighbours[0] else dimension - 1
            heartbeat = m.Heartbeat(wall=at, root=root, dimension=named, positions=())
            node = simulation.nodes[neighbour]
            receiver.superpeer_message(neighbour, node.incarnation, Received(heartbeat, "h"), at)
        outputs = receiver.timer(at)
        asked += [o.node for o in outputs if isinstance(getattr(o, "message", None), ChangeRequest)]
    if one_agrees:
        assert not asked and receiver.incarnation == incarnation
        return
    assert sorted(asked) == neighbours  # once, after failure_seconds
    assert receiver.incarnation > incarnation  # and it rejoined after as long again
    assert start + 2 * failure <= at < start + 2 * failure + 1


def test_a_neighbour_declared_failed_that_heartbeats_in_place_keeps_its_place():
    """(Issue 33) a member cut off declares its neighbours failed and starts the repairs it is
    designated for; their lookups go nowhere while it is cut off. After the heal a neighbour
    that never stopped heartbeats in place, in this cube: the repair of it is dropped before
    it walks (it used to keep the member busy, other departures waiting behind it, until the
    wedge watchdog; every heal over 30 s of the replayed chaos schedules had a watchdog
    rejoin), and the neighbour keeps its place. Nothing was repaired, so no ``sp.departed``
    makes anyone catch up on what the link dropped meanwhile: the member broadcasts
    ``sp.reconnected`` (from when it last heard from the neighbour), and every access point,
    this one included, catches up on what went through the two places."""
    simulation = Simulation(8, seed=1)
    for op in [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 7},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        publish(0),
    ]:
        simulation.apply(op)
    simulation.run_until_quiet()
    member = simulation.nodes["sp0"]
    now = simulation._clock("sp0")
    cut_off: list = []
    repaired = None
    for neighbour in sorted(member.topology.view().neighbours()):
        member._fail(neighbour, now, cut_off)  # what it decides cut off: sent nowhere yet
        if member.topology.busy():
            repaired = neighbour  # the one whose repair it is designated for
            break
    assert repaired is not None
    last_heard = member.topology.last_heard_if_failed(repaired)
    assert last_heard is not None and 0 < last_heard <= member.clock.now(now)
    incarnation = simulation.nodes[repaired].incarnation
    dimension, root = member.cube_identity()
    positions = tuple(sorted(simulation.nodes[repaired].core.view.positions))
    beat = m.Heartbeat(wall=now, root=root, dimension=dimension, positions=positions)
    member._catchups.clear()
    healed = member.superpeer_message(repaired, incarnation, Received(beat, "h"), now + 0.5)
    assert member.topology.last_heard_if_failed(repaired) is None
    assert not member.topology.busy()
    [reconnected] = {
        o.message for o in healed if isinstance(getattr(o, "message", None), m.Reconnected)
    }
    assert reconnected.neighbour == repaired and reconnected.since == last_heard
    assert set(positions) | member.core.view.positions == set(reconnected.positions)
    assert [c.since for c in member._catchups] == [
        last_heard - member.config.catchup_margin_seconds
    ]
    simulation._execute("sp0", cut_off + healed)  # its lookups arrive late, after the heal
    simulation.run_until_quiet()
    assert simulation.nodes[repaired].incarnation == incarnation, "repaired away, rejoined"
    cubes = simulation.cubes()
    assert len(cubes) == 1 and set(next(iter(cubes.values()))) == set(simulation.nodes)
    key = broadcast_key(reconnected)
    assert all(key in node.core._broadcasts for node in simulation.nodes.values())
    assert simulation.deliveries()["sub"] == ["n0"]


@pytest.mark.parametrize("grows", [True, False], ids=["grew-meanwhile", "still-weaker"])
def test_a_cube_that_grew_while_its_merge_drained_stays(grows):
    """A member of the weaker of two cubes that met rejoins through the stronger one
    ``merge_delay_seconds`` later, unless its own cube is the stronger by then: three super-peers
    cut apart and healed together (a chaos schedule, 8 super-peers, seed 3) each found another
    stronger, and each left its cube as a newcomer made it the stronger one, for the one the
    next had just left: a cycle of rejoins every 0.75 s, never one cube."""
    simulation = Simulation(2, seed=1)
    simulation.run_until_quiet()
    member = simulation.nodes["sp1"]
    dimension, root = member.cube_identity()
    assert (dimension, root) == (1, "sp0")
    rejoins = member.statistics.rejoins
    stronger = (1, "sp")  # the same dimension, a smaller root: it stays
    out: list = []
    member._merge_into(stronger, [("sp", "sp.sim:7400")], root, simulation._clock("sp1"), out)
    if grows:
        simulation._superpeer_join()  # a newcomer before the merge is due: dimension 2
    simulation.apply({"op": "wait", "seconds": 2 * member.config.merge_delay_seconds})
    if grows:
        assert member.statistics.rejoins == rejoins
        assert member.cube_identity() == (2, "sp0")
    else:
        assert member.statistics.rejoins == rejoins + 1


def test_a_contact_that_said_it_was_out_of_the_cube_and_fell_silent_counts_as_silent():
    """A joiner waits for the smallest live super-peer out of the cube to start one. A contact
    that once answered that it was out of the cube, then said nothing more (a leaver whose
    walk never ended, stopped), stayed "alive" for good: it was the smallest, so nobody started
    the cube (a chaos schedule, 8 super-peers, seed 2: not one cube for twenty minutes)."""
    simulation = Simulation(6, seed=1)
    simulation.run_until_quiet()
    simulation._kill("sp0")
    started = simulation.now
    survivors = sorted(simulation.nodes)
    for node_id in survivors:
        node = simulation.nodes[node_id]
        node._outside["sp0"] = True  # as if it had answered, out of the cube, before it died
        out: list = []
        node._rejoin("test", simulation._clock(node_id), out)
        simulation._execute(node_id, out)

    def one_cube() -> bool:
        cubes = simulation.cubes()
        return len(cubes) == 1 and None not in cubes and set(*cubes.values()) == set(survivors)

    simulation.run_until_quiet(until=one_cube)
    assert simulation.now - started < 2 * NodeConfig().wedged_seconds


def parity_sides(simulation: Simulation) -> list[list[int]]:
    """The super-peers at even positions and those at odd ones: every link of a full cube joins
    one of each, so a cut between them leaves no member a neighbour of another on its side."""
    sides: list[list[int]] = [[], []]
    for index, node_id in enumerate(simulation.ids):
        (position,) = simulation.nodes[node_id].core.view.positions
        sides[bin(position).count("1") % 2].append(index)
    return sides


@pytest.mark.parametrize("side", [0, 1])
def test_a_side_whose_every_cube_link_crossed_the_cut_delivers_inside_itself(side):
    """Found by the stop-68 probe of deliveries inside a side during a cut: no repair can
    finish on such a side (position 0 and every member a lookup needs are across), and what
    its publisher published reached its subscriber only after the heal, by catch-up. Its
    members re-form (``reform_seconds``, found through the addresses heartbeats spread) and
    deliver inside the side before the heal; after it, one cube and every inbox the oracle's."""
    simulation = Simulation(8, seed=3, node_config=REFORMING)
    groups = parity_sides(simulation)
    sub, pub = groups[side][0], groups[side][-1]
    before = [
        {"op": "join", "peer": "sub", "superpeer": sub},
        {"op": "join", "peer": "pub", "superpeer": pub},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "wait", "seconds": 2},
        {"op": "partition", "groups": groups},
        {"op": "wait", "seconds": 20},  # declared failed, then re-formed
    ]
    cut = [op for n in range(10) for op in (publish(n), {"op": "wait", "seconds": 1})]
    for op in before + cut:
        simulation.apply(dict(op))
    assert simulation.deliveries()["sub"] == [f"n{n}" for n in range(10)]
    assert len(simulation.cubes()) == 2
    seconds = heal_time(simulation, [], {"op": "heal"})
    assert seconds < HEAL_BOUND
    after = [publish(10), {"op": "wait", "seconds": 30}]
    for op in after:
        simulation.apply(dict(op))
    ops = [*before, *cut, {"op": "heal"}, *after]
    assert simulation.deliveries() == expected_deliveries(8, ops)


def test_a_super_peer_cut_off_from_everyone_re_forms_alone_and_serves_its_peers():
    """Isolated, it can repair none of its neighbours: after ``reform_seconds`` it rejoins,
    finds every contact out of reach (its failed neighbours left aside, the others silent to
    the word it sent them) and starts a cube of its own, where its peers go on publishing to
    each other; what they published meanwhile waited for it. At the heal the two cubes meet
    (it probes every super-peer it lost) and become one, and the oracle has it all."""
    simulation = Simulation(8, seed=1, node_config=REFORMING)
    lone = 5
    before = [
        {"op": "join", "peer": "sub", "superpeer": lone},
        {"op": "join", "peer": "pub", "superpeer": lone},
        {"op": "join", "peer": "far", "superpeer": 0},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "subscribe", "peer": "far", "id": "s1", "query": QUERY},
        {"op": "wait", "seconds": 2},
        {"op": "partition", "groups": [[lone]]},
        {"op": "wait", "seconds": 20},
    ]
    cut = [op for n in range(5) for op in (publish(n), {"op": "wait", "seconds": 1})]
    for op in before + cut:
        simulation.apply(dict(op))
    node = simulation.nodes[simulation.ids[lone]]
    assert node.cube_identity() == (0, simulation.ids[lone])
    assert simulation.deliveries()["sub"] == [f"n{n}" for n in range(5)]
    assert heal_time(simulation, [], {"op": "heal"}) < HEAL_BOUND
    after = [{"op": "wait", "seconds": 30}]
    for op in after:
        simulation.apply(dict(op))
    ops = [*before, *cut, {"op": "heal"}, *after]
    assert simulation.deliveries() == expected_deliveries(8, ops)


def test_every_member_learns_every_super_peer_from_heartbeats():
    """A member knows its neighbours' addresses from its table; heartbeats name the others
    (``Heartbeat.known``), a few at a time, so that a member whose neighbours are all across a
    cut can still rejoin through the members of its own side."""
    simulation = Simulation(16, seed=2)
    simulation.apply({"op": "wait", "seconds": 10})
    for node_id, node in simulation.nodes.items():
        assert set(node.addresses) >= set(simulation.ids) - {node_id}, node_id


def test_a_heartbeat_names_a_few_super_peers_and_a_node_learns_a_bounded_number(monkeypatch):
    """``KNOWN_PER_HEARTBEAT`` of a heartbeat's names are read, the rest ignored; addresses a
    node has already are kept (its own evidence); past ``MAX_KNOWN`` learnt, no more."""
    simulation = Simulation(4, seed=1)
    receiver = simulation.nodes["sp0"]
    sender = next(iter(sorted(receiver.core.view.neighbours())))
    incarnation = simulation.nodes[sender].incarnation
    known = receiver.addresses[sender]
    names = ((sender, "elsewhere:1"), *((f"x{n}", f"x{n}.sim:7400") for n in range(10)))
    at = simulation._clock("sp0")
    heartbeat = m.Heartbeat(wall=at, known=names)
    receiver.superpeer_message(sender, incarnation, Received(heartbeat, "h"), at)
    assert receiver.addresses[sender] == known
    assert {n for n in receiver.addresses if n.startswith("x")} == {"x0", "x1", "x2"}
    monkeypatch.setattr(_merging, "MAX_KNOWN", len(receiver._learnt) + 1)
    later = m.Heartbeat(wall=at, known=names[4:])
    receiver.superpeer_message(sender, incarnation, Received(later, "h"), at)
    assert {n for n in receiver.addresses if n.startswith("x")} == {"x0", "x1", "x2", "x3"}


def test_a_heartbeat_names_the_super_peers_in_turn_and_never_a_lost_one():
    """Each link goes through the sender's list in turn (every neighbour hears of all), names
    neither end of the link, nor a super-peer the sender lost (a side of a cut names its own)."""
    simulation = Simulation(2, seed=1)
    node = simulation.nodes["sp0"]
    for n in range(6):
        node.addresses[f"x{n}"] = f"x{n}.sim:7400"
    node._lost["x5"] = (0.0, 0.0)
    now = simulation._clock("sp0")
    heard = [name for _ in range(3) for name, _ in node._heartbeat("sp1", now).known]
    assert heard == ["x0", "x1", "x2", "x3", "x4", "x0", "x1", "x2", "x3", "x4", "x0", "x1"]


def test_a_neighbour_that_probes_from_another_cube_is_failed_at_once():
    """A neighbour whose heartbeat is a probe (no positions) naming another cube has left this
    one (it stood alone, or re-formed, while this node still heard from it): failed at once,
    not kept in the table for as long as it answers (found in a replay at 8 super-peers, seed
    13: each of two members waited on the other for good). A probe naming this very cube, or a
    heartbeat that claims positions, changes nothing (nor one naming this cube's root in
    another dimension: a change of dimension it missed, ``superpeer.node``)."""
    simulation = Simulation(4, seed=1)
    receiver = simulation.nodes["sp0"]
    sender = sorted(receiver.core.view.neighbours())[0]
    incarnation = simulation.nodes[sender].incarnation
    dimension, root = receiver.cube_identity()
    at = simulation._clock("sp0")
    for same in (
        m.Heartbeat(wall=at, root=root, dimension=dimension),
        m.Heartbeat(wall=at, root=root, dimension=dimension - 1),
        m.Heartbeat(wall=at, root=sender, dimension=0, positions=(1,)),
    ):
        receiver.superpeer_message(sender, incarnation, Received(same, "h"), at)
        assert sender not in receiver._suspected
    probe = m.Heartbeat(wall=at, root=sender, dimension=0)
    receiver.superpeer_message(sender, incarnation, Received(probe, "h"), at)
    assert sender in receiver._suspected


def test_reform_seconds_is_configured_and_must_outlast_the_failure_timeout():
    assert config_from_mapping({"limits": {"reform_seconds": 12.5}}).limits.reform_seconds == 12.5
    node_config = config_from_mapping({"limits": {"reform_seconds": 12.5}}).node_config(
        tracing=False
    )
    assert node_config.reform_seconds == 12.5
    with pytest.raises(ConfigError, match=r"reform_seconds \(10.0\) must be more than"):
        config_from_mapping({"limits": {"reform_seconds": 10.0}})


def leaving_across_a_cut(simulation: Simulation, wait: float) -> tuple[SuperPeerNode, str]:
    """sp0 holds an offline subscriber's mail (ten publications of its own publisher) and is
    cut off with ``beside``, a super-peer that is not its neighbour; the neighbour that holds
    the copies of its log crashes for good; ``wait`` seconds later sp0 leaves, and the cut
    heals after. The 300-s chaos run on hosts of their own lost five publications so
    (issue 33): the leaver handed over to a neighbour it had not heard from, and its
    re-forming rule, fired during the leave, dropped the hand-over still queued."""
    simulation.run_until_quiet()
    leaver = simulation.nodes["sp0"]
    neighbours = sorted(leaver.core.view.neighbours())
    beside = next(n for n in simulation.ids if n != "sp0" and n not in neighbours)
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "detach", "peer": "sub"},
        *[publish(n) for n in range(10)],
        {"op": "partition", "groups": [[0, simulation.ids.index(beside)]]},
        {"op": "superpeer_fail", "superpeer": simulation.ids.index(neighbours[0])},
        {"op": "wait", "seconds": wait},
        {"op": "superpeer_leave", "superpeer": 0},
        {"op": "wait", "seconds": 10},
        {"op": "heal"},
        {"op": "wait", "seconds": 40},
        {"op": "attach", "peer": "sub"},
        {"op": "wait", "seconds": 10},
    ]
    for op in ops:
        simulation.apply(dict(op))
    return leaver, beside


@pytest.mark.parametrize("wait", [3.0, 5.0])
def test_a_leaver_cut_from_its_neighbours_hands_over_to_one_it_reaches(wait):
    """Its neighbours silent (one crashed, the others across the cut), the leaver hails the
    super-peers it knows and hands its peers and log to the one that answers: the subscriber
    gets all ten after the heal (none before the fix)."""
    simulation = Simulation(8, seed=1, node_config=REFORMING)
    leaver, beside = leaving_across_a_cut(simulation, wait)
    assert simulation.deliveries()["sub"] == sorted(f"n{n}" for n in range(10))
    assert leaver.adopter == beside
    assert leaver.stopped and leaver.statistics.rejoins == 0


def isolated_leaver(simulation: Simulation) -> SuperPeerNode:
    """sp5, with a peer, cut off from everyone until its neighbours are declared failed, then
    asked to leave (as the daemon's SIGTERM asks)."""
    simulation.run_until_quiet()
    for op in [
        {"op": "join", "peer": "p", "superpeer": 5},
        {"op": "partition", "groups": [[5]]},
        {"op": "wait", "seconds": 3},
    ]:
        simulation.apply(dict(op))
    leaver = simulation.nodes["sp5"]
    assert leaver.successor(simulation._clock("sp5")) is None
    simulation._execute("sp5", leaver.leave(simulation._clock("sp5")))
    return leaver


def test_a_leaver_that_hears_from_nobody_waits_for_one_that_answers():
    """Heard from nobody, it hands nothing over yet: once the cut heals, the first super-peer
    that answers its hail adopts its peer, and it stops without rejoining."""
    simulation = Simulation(8, seed=1, node_config=REFORMING)
    leaver = isolated_leaver(simulation)
    simulation.apply({"op": "wait", "seconds": 1})
    assert leaver.adopter is None and not leaver.stopped
    simulation.apply({"op": "heal"})
    simulation.apply({"op": "wait", "seconds": 10})
    assert leaver.adopter in simulation.ids and leaver.adopter != "sp5"
    assert leaver.stopped and leaver.statistics.rejoins == 0


def test_a_leaver_that_a_cut_keeps_from_everyone_stops_instead_of_rejoining():
    """Still cut off when its re-forming rule fires (or ``reform_seconds`` after it was asked
    to leave), it hands over to its first neighbour by name (the link keeps the hand-over until
    the cut heals) and stops: a new incarnation would have dropped what was queued."""
    simulation = Simulation(8, seed=1, node_config=REFORMING)
    leaver = isolated_leaver(simulation)
    incarnation = leaver.incarnation
    first = sorted(leaver.core.view.neighbours())[0]
    simulation.apply({"op": "wait", "seconds": REFORMING.reform_seconds + 1})
    assert leaver.adopter == first
    assert leaver.stopped and leaver.incarnation == incarnation
    assert leaver.statistics.rejoins == 0
