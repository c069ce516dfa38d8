"""Copies of the publication log (``superpeer._replication``): a publication is durable at its
origin and at one neighbour before the publisher's ``Ack``, so that an origin lost for good,
disk and all, loses nothing it acknowledged; an origin that no neighbour answers (cut off
alone) still acknowledges, with its own copy, and says so."""

import dataclasses

import pytest

import qel
import wire
from superpeer._node_base import decoded_as
from superpeer.node import NodeConfig, SuperPeerNode
from superpeer.sim import Simulation
from superpeer.sim.workload import Connect
from tests.superpeer.oracle import expected_deliveries
from tests.superpeer.test_clocks import BROAD, publish
from tests.superpeer.test_partitions import QUERY, cut_while_publishing
from wire import messages as m
from wire.requests import request_label


def publisher_and_subscriber(superpeers: int, publisher: int, subscriber: int) -> list[dict]:
    return [
        {"op": "join", "peer": "pub", "superpeer": publisher},
        {"op": "join", "peer": "sub", "superpeer": subscriber},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
    ]


def played(ops: list[dict], superpeers: int = 4) -> Simulation:
    simulation = Simulation(superpeers, interleave=True, seed=0)
    for op in ops:
        simulation.apply(dict(op))
    return simulation


def log_of(simulation: Simulation, node_id: str) -> list[m.Notification]:
    """The entries of ``node_id``'s log."""
    entries = simulation.stores[node_id].logged_since(float("-inf"))
    return [decoded_as(data, m.Notification) for data in entries]


def logged(simulation: Simulation, node_id: str) -> set[str]:
    """The publication ids in ``node_id``'s log."""
    return {entry.publication.id for entry in log_of(simulation, node_id)}


def acks(simulation: Simulation, peer: str) -> int:
    return sum(isinstance(a, m.Ack) for a in simulation.peers[peer].answers)


def test_the_publishers_ack_leaves_once_a_neighbour_holds_a_copy():
    """Each publication is in the origin's log and in one neighbour's before its ``Ack``; the
    other super-peers hold no copy."""
    simulation = Simulation(8, interleave=True, seed=1)
    for op in publisher_and_subscriber(8, 0, 7):
        simulation.apply(dict(op))
    before = acks(simulation, "pub")
    for n in range(10):
        simulation.apply(publish(n))
    assert acks(simulation, "pub") - before == 10
    origin = simulation.nodes[simulation.ids[0]]
    assert origin.statistics.copies_sent == 10 and origin.statistics.unreplicated == 0
    holders = [n for n in simulation.ids[1:] if logged(simulation, n)]
    assert len(holders) == 1 and holders[0] in origin.core.view.neighbours()
    assert logged(simulation, holders[0]) == {f"n{k}" for k in range(10)}
    assert len(simulation.deliveries()["sub"]) == 10


def test_an_ack_whose_copy_is_never_confirmed_waits_for_two_neighbours_then_leaves(monkeypatch):
    """No ``LogCopied`` reaches the origin: the ``Ack`` waits ``copy_wait_seconds`` for one
    neighbour, as long for another, then leaves with the origin's copy alone, counted."""
    monkeypatch.setattr(SuperPeerNode, "_copied", lambda self, sender, message, now, out: None)
    simulation = Simulation(8, interleave=True, seed=1)
    for op in publisher_and_subscriber(8, 0, 7):
        simulation.apply(dict(op))
    before, started = acks(simulation, "pub"), simulation.now
    simulation.apply(publish(0))
    origin = simulation.nodes[simulation.ids[0]]
    assert acks(simulation, "pub") - before == 1
    assert simulation.now - started >= 2 * simulation.node_config.copy_wait_seconds
    assert origin.statistics.unreplicated == 1
    assert origin.status(simulation.now)["log_copies"]["unreplicated"] == 1
    # two neighbours before the Ack; then the copy owed (rule 6), tried again while unanswered
    assert origin.statistics.copies_sent >= 2 and origin.copies_owed() == 1
    assert simulation.deliveries()["sub"] == ["n0"]  # the notification did not wait


def test_a_super_peer_cut_off_alone_goes_on_acknowledging_with_its_own_copy():
    """Each side keeps working: an origin whose every neighbour is unreachable acknowledges
    (after its attempts), and its own subscriber receives everything."""
    simulation = Simulation(4, interleave=True, seed=0)
    for op in publisher_and_subscriber(4, 0, 0):
        simulation.apply(dict(op))
    simulation.apply({"op": "partition", "groups": [[0], [1, 2, 3]]})
    before = acks(simulation, "pub")
    for n in range(5):
        simulation.apply(publish(n))
    assert acks(simulation, "pub") - before == 5
    assert simulation.nodes[simulation.ids[0]].statistics.unreplicated == 5
    assert len(simulation.deliveries()["sub"]) == 5


@pytest.mark.parametrize(
    "cut", [[[2], [0, 1, 3]], [[0, 1], [2, 3]]], ids=["access-point-alone", "halves"]
)
def test_an_origin_lost_for_good_loses_nothing_it_acknowledged(cut):
    """The subscriber's access point is cut off from the origin while the publisher publishes;
    the origin dies for good, disk and all, before the heal. What it acknowledged is in a
    neighbour's copy, which the access point's catch-up finds (without copies, 10 of 13 were
    lost: the only log went with the origin)."""
    ops = [
        {**op, "groups": cut} if op["op"] == "partition" else op
        for op in cut_while_publishing(2, 13)
    ]
    ops += [
        {"op": "wait", "seconds": 1},
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ]
    simulation = played(ops)
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert len(simulation.deliveries()["sub"]) == 13


def test_a_leaver_whose_successor_is_then_lost_for_good_loses_nothing():
    """The subscriber's access point is cut off while the publisher's publishes; that one
    leaves cleanly, handing its log to its successor and to one more neighbour, and the
    successor dies for good before the heal: the other holder's log still has everything
    (handed to the successor alone, 6 of 13 were lost, copies or not: the leaver's copies were
    at its successor too; a chaos run lost 35 this way)."""
    ops = [
        *publisher_and_subscriber(8, 0, 7),
        *[publish(n) for n in range(3)],
        {"op": "partition", "groups": [[7], [0, 1, 2, 3, 4, 5, 6]]},
    ]
    for n in range(3, 13):
        ops += [publish(n), {"op": "wait", "seconds": 0.5}]
    simulation = Simulation(8, interleave=True, seed=0)
    for op in ops:
        simulation.apply(dict(op))
    successor = simulation.nodes[simulation.ids[0]].successor(simulation.now)
    for op in (
        {"op": "superpeer_leave", "superpeer": 0},
        {"op": "wait", "seconds": 1},
        {"op": "superpeer_fail", "superpeer": simulation.ids.index(successor)},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ):
        simulation.apply(dict(op))
    assert sorted(simulation.deliveries()["sub"]) == sorted(f"n{n}" for n in range(13))


def test_a_catch_up_restricted_to_an_origin_answers_its_entries_only():
    """``CatchUp.origin``: a holder answers from the copies of that origin, not from the rest
    of its log."""
    simulation = Simulation(4, interleave=True, seed=0)
    for op in publisher_and_subscriber(4, 0, 3):
        simulation.apply(dict(op))
    simulation.apply(publish(0))
    holder = next(n for n in simulation.ids[1:] if logged(simulation, n))
    for op in (
        {"op": "join", "peer": "pub2", "superpeer": simulation.ids.index(holder)},
        {"op": "advertise", "peer": "pub2", **BROAD},
        publish(1, "pub2"),
    ):
        simulation.apply(dict(op))
    node = simulation.nodes[holder]
    subscription = simulation.nodes[simulation.ids[3]].core.subscriptions_of("sub")["s1"]
    entries = [("sub", "s1", subscription, float("-inf"), float("inf"))]
    everything = {n.publication.id for ns in node._matches(entries).values() for n in ns}
    only = node._matches(entries, simulation.ids[0])
    assert everything == {"n0", "n1"}
    assert {n.publication.id for ns in only.values() for n in ns} == {"n0"}


def test_answers_keep_the_order_of_the_requests_while_an_ack_waits_for_its_copy(monkeypatch):
    """A peer matches answers to requests in order: a subscription's ``Ack``, made at once,
    leaves after the ``Ack`` of the publication before it, which waits for its copy."""
    monkeypatch.setattr(SuperPeerNode, "_copied", lambda self, sender, message, now, out: None)
    simulation = Simulation(4, interleave=True, seed=0)
    for op in publisher_and_subscriber(4, 0, 3):
        simulation.apply(dict(op))
    peer = simulation.peers["pub"]
    data = publish(0)["data"]
    (publication,) = qel.parse_publications(data, "turtle", publisher="pub", id="n0")
    requests = [
        m.Publish(publication=publication),
        m.Subscribe(id="s9", subscription=qel.parse_subscription(QUERY)),
    ]
    before = len(peer.answers)
    for request in requests:
        simulation._from_peer(peer, request)
    simulation.run_until_quiet()
    answered = [a.request for a in peer.answers[before:] if isinstance(a, m.Ack)]
    assert answered == [request_label(r) for r in requests]


def published_at_once(simulation: Simulation, count: int, first: int = 0) -> list[m.Publish]:
    """``count`` publications sent by ``pub`` in one go, answered or not when this returns."""
    peer = simulation.peers["pub"]
    requests = []
    for n in range(first, first + count):
        data = publish(n)["data"]
        (publication,) = qel.parse_publications(data, "turtle", publisher="pub", id=f"n{n}")
        requests.append(m.Publish(publication=publication))
    for request in requests:
        simulation._from_peer(peer, request)
    return requests


def copies_received(simulation: Simulation, recorded: list, monkeypatch) -> None:
    """Record each ``LogCopy`` a super-peer keeps: its holder, entries and encoded size."""
    keep = SuperPeerNode._copy_in

    def recording(self, sender, message, now, out):  # type: ignore[no-untyped-def]
        recorded.append((self.node_id, len(message.notifications), len(wire.encode(message))))
        keep(self, sender, message, now, out)

    monkeypatch.setattr(SuperPeerNode, "_copy_in", recording)


def test_entries_logged_while_a_copy_is_in_flight_share_the_next_copy(monkeypatch):
    """Rule 2: the first of a burst is copied at once; those logged before its ``LogCopied``
    came back wait for it and go together: every entry copied, every ``Ack`` in order."""
    recorded: list = []
    copies_received(simulation := Simulation(4, interleave=True, seed=0), recorded, monkeypatch)
    for op in publisher_and_subscriber(4, 0, 3):
        simulation.apply(dict(op))
    before = len(simulation.peers["pub"].answers)
    requests = published_at_once(simulation, 20)
    simulation.run_until_quiet()
    answered = [a.request for a in simulation.peers["pub"].answers[before:]]
    assert answered == [request_label(r) for r in requests]
    assert [entries for _, entries, _ in recorded] == [1, 19]
    (holder,) = {node for node, _, _ in recorded}
    assert logged(simulation, holder) == {f"n{k}" for k in range(20)}
    origin = simulation.nodes[simulation.ids[0]]
    assert origin.statistics.copies_sent == 20 and origin.statistics.unreplicated == 0
    assert origin.status(simulation.now)["log_copies"]["waiting"] == 0
    assert len(simulation.deliveries()["sub"]) == 20


def test_a_copy_fits_half_a_frame(monkeypatch):
    """A batch whose encodings would pass half of ``max_frame_bytes`` leaves at once, a second
    copy in flight: no ``LogCopy`` is larger than a frame."""
    recorded: list = []
    config = NodeConfig(max_frame_bytes=8192)
    simulation = Simulation(4, interleave=True, seed=0, node_config=config)
    copies_received(simulation, recorded, monkeypatch)
    for op in publisher_and_subscriber(4, 0, 3):
        simulation.apply(dict(op))
    requests = published_at_once(simulation, 40)
    simulation.run_until_quiet()
    assert sum(entries for _, entries, _ in recorded) == 40
    assert len(recorded) > 2, "the burst does not fit one copy"
    assert all(size <= config.max_frame_bytes for _, _, size in recorded), recorded
    assert acks(simulation, "pub") >= len(requests)


def test_entries_queued_behind_an_unanswered_copy_go_to_the_next_neighbour_with_it(monkeypatch):
    """Rule 3 for a batch: when the copy in flight is given up on, the entries queued behind
    it go with it to a second neighbour (not to the first, which just failed to answer), then
    are acknowledged with the origin's copy alone, in the order they were asked."""
    monkeypatch.setattr(SuperPeerNode, "_copied", lambda self, sender, message, now, out: None)
    recorded: list = []
    copies_received(simulation := Simulation(8, interleave=True, seed=1), recorded, monkeypatch)
    for op in publisher_and_subscriber(8, 0, 7):
        simulation.apply(dict(op))
    before, started = len(simulation.peers["pub"].answers), simulation.now
    requests = published_at_once(simulation, 5)
    simulation.run_until_quiet()
    answered = [a.request for a in simulation.peers["pub"].answers[before:]]
    assert answered == [request_label(r) for r in requests]
    assert simulation.now - started >= 2 * simulation.node_config.copy_wait_seconds
    origin = simulation.nodes[simulation.ids[0]]
    first, second = recorded[0][0], recorded[1][0]
    assert first != second
    assert recorded[:3] == [
        (first, 1, recorded[0][2]),
        (second, 1, recorded[1][2]),
        (second, 4, recorded[2][2]),
    ]
    # after the Acks, the five owed a copy go together, again while unanswered (rule 6)
    assert all(entries == 5 for _, entries, _ in recorded[3:])
    assert origin.statistics.unreplicated == 5 and origin.copies_owed() == 5
    assert origin.status(simulation.now)["log_copies"]["waiting"] == 0


def test_an_update_sent_again_on_a_new_connection_waits_for_the_copy_of_its_entry(monkeypatch):
    """A peer whose connection broke sends its unanswered update again. The origin has that
    version logged already, a repeat that changes nothing; its ``Ack`` still waits for the copy
    that the first one waited for (given up on here after two neighbours): an ``Ack`` never
    says less than the first would have."""
    simulation = Simulation(4, interleave=True, seed=0)
    for op in (*publisher_and_subscriber(4, 0, 3), publish(0)):
        simulation.apply(dict(op))
    monkeypatch.setattr(SuperPeerNode, "_copied", lambda self, sender, message, now, out: None)
    peer, origin = simulation.peers["pub"], simulation.nodes[simulation.ids[0]]
    data = publish(0)["data"].replace('"t0"', '"t0, revised"')
    (publication,) = qel.parse_publications(data, "turtle", publisher="pub", id="n0")
    update = m.Publish(publication=publication, change="update")
    simulation._from_peer(peer, update)
    simulation._advance(simulation.now + 0.2)  # logged, its copy sent, unanswered
    assert origin.copies_waiting() == 1
    before = len(peer.answers)
    simulation._connect(Connect("pub", 0))  # the peer sends its unanswered update again
    again = simulation.now
    simulation._advance(simulation.now + 0.5)
    assert origin.copies_waiting() == 1, "the repeat is no new version"
    assert len(peer.answers) == before, "an Ack that says less than the first"
    simulation.run_until_quiet()
    assert [a.request for a in peer.answers[before:]] == [request_label(update)]
    assert simulation.now - again >= simulation.node_config.copy_wait_seconds
    assert origin.statistics.unreplicated == 1


def offline_subscriber_at_the_origin() -> list[dict]:
    """A publisher and a subscriber at super-peer 0, one publication, the subscriber offline."""
    return [
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        publish(0),
        {"op": "detach", "peer": "sub"},
    ]


def cut_off_alone_then_lost(heal_for: float, *, restart: bool = False) -> list[dict]:
    """The origin holds the subscriber's subscription (its peer offline) and is cut off alone
    while its publisher publishes five (each acknowledged with the origin's copy alone); the
    cut heals, and ``heal_for`` seconds later the origin is lost for good; its subscriber comes
    back at another super-peer. With ``restart``, the origin restarts on its disk while still
    cut off."""
    ops = [
        *offline_subscriber_at_the_origin(),
        {"op": "partition", "groups": [[0], [1, 2, 3]]},
    ]
    for n in range(1, 6):
        ops += [publish(n), {"op": "wait", "seconds": 0.5}]
    if restart:
        ops += [
            {"op": "superpeer_fail", "superpeer": 0},
            {"op": "superpeer_restart", "superpeer": 0},
            {"op": "wait", "seconds": 5},
        ]
    return [
        *ops,
        {"op": "heal"},
        {"op": "wait", "seconds": heal_for},
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "wait", "seconds": 5},
        {"op": "move", "peer": "sub", "superpeer": 1},
        {"op": "wait", "seconds": 60},
    ]


@pytest.mark.parametrize("restart", [False, True], ids=["running", "restarted-while-cut-off"])
def test_what_an_origin_cut_off_alone_acknowledged_is_copied_once_it_is_healed(restart):
    """Rule 6: the entries acknowledged with the origin's copy alone are owed a copy, made as
    soon as a neighbour answers again, so the origin's loss for good a few seconds after the
    heal loses nothing (without it the four acknowledged during the cut were lost: the only
    log went with the origin, as in stop 58's chaos run). The debt is on disk: a restart
    during the cut keeps it."""
    ops = cut_off_alone_then_lost(3.0, restart=restart)
    simulation = Simulation(4, interleave=True, seed=0)
    owed = None
    for op in ops:
        if op["op"] == "heal":
            origin = simulation.nodes[simulation.ids[0]]
            owed = origin.copies_owed()
            assert owed >= 4 and origin.status(simulation.now)["log_copies"]["owed"] == owed
        simulation.apply(dict(op))
        if op["op"] == "wait" and owed is not None and simulation.ids[0] in simulation.nodes:
            origin = simulation.nodes[simulation.ids[0]]
            if origin.copies_owed() == 0:
                assert origin.statistics.copied_late >= owed - (1 if restart else 0)
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert sorted(simulation.deliveries()["sub"]) == [f"n{n}" for n in range(6)]


def test_a_cube_of_one_owes_no_copies():
    """A super-peer alone in its cube has nobody to copy to: its acknowledgements are counted
    unreplicated, and no debt piles up."""
    simulation = Simulation(1, interleave=True, seed=0)
    for op in publisher_and_subscriber(1, 0, 0):
        simulation.apply(dict(op))
    for n in range(3):
        simulation.apply(publish(n))
    node = simulation.nodes[simulation.ids[0]]
    assert node.statistics.unreplicated == 3 and node.copies_owed() == 0


def test_an_origin_left_alone_in_its_cube_by_a_cut_still_owes_its_copies():
    """Two super-peers cut apart each repair into a cube of one. What the origin then
    acknowledges is owed a copy all the same (it knows another super-peer): copied after the
    merge, it survives the origin's loss for good. (Owed only while the view had neighbours,
    they were lost: a chaos run's origin published alone in its cube between rejoins.)"""
    ops = [
        *offline_subscriber_at_the_origin(),
        {"op": "partition", "groups": [[0], [1]]},
        {"op": "wait", "seconds": 30},
    ]
    for n in range(1, 6):
        ops += [publish(n), {"op": "wait", "seconds": 0.5}]
    ops += [
        {"op": "heal"},
        {"op": "wait", "seconds": 20},
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "wait", "seconds": 5},
        {"op": "move", "peer": "sub", "superpeer": 1},
        {"op": "wait", "seconds": 60},
    ]
    simulation = Simulation(2, interleave=True, seed=0)
    for op in ops:
        if op["op"] == "heal":
            origin = simulation.nodes[simulation.ids[0]]
            assert not origin.core.view.neighbours() and origin.copies_owed() == 5
        simulation.apply(dict(op))
    assert simulation.deliveries() == expected_deliveries(2, ops)
    assert sorted(simulation.deliveries()["sub"]) == [f"n{n}" for n in range(6)]


def test_what_an_origin_cut_off_alone_acknowledged_survives_its_loss_during_the_cut():
    """Rule 8: the origin, cut off alone, acknowledges five publications with its own copy
    alone and says so (``Ack.alone``); it is lost for good before the cut heals, so no copy was
    ever made. Its publisher kept them (``peer.kept``) and sends them again through its next
    access point, which accepts them as its own: the subscriber receives each once (without
    the publisher's copies it received only the one published before the cut), and the
    publisher forgets them once acknowledged without ``alone``."""
    ops = [*offline_subscriber_at_the_origin(), {"op": "partition", "groups": [[0], [1, 2, 3]]}]
    for n in range(1, 6):
        ops += [publish(n), {"op": "wait", "seconds": 0.5}]
    ops += [
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "heal"},
        {"op": "wait", "seconds": 5},
        {"op": "move", "peer": "sub", "superpeer": 1},
        {"op": "move", "peer": "pub", "superpeer": 2},
        {"op": "wait", "seconds": 60},
    ]
    # (an origin cut off alone that long would re-form, rejoining: not what this is about)
    config = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, reform_seconds=60.0)
    simulation = Simulation(4, interleave=True, seed=0, node_config=config)
    publisher = None
    for op in ops:
        if op["op"] == "superpeer_fail":
            publisher = simulation.peers["pub"]
            alone = [a.request for a in publisher.answers if isinstance(a, m.Ack) and a.alone]
            assert alone == [f"publish n{n}" for n in range(1, 6)]
            assert len(publisher.kept) == 5
        simulation.apply(dict(op))
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert sorted(simulation.deliveries()["sub"]) == [f"n{n}" for n in range(6)]
    assert publisher is not None and len(publisher.kept) == 0 and publisher.kept.forgotten == 0


def updated_while_cut_off_alone() -> tuple[Simulation, m.Publish]:
    """The publisher's first resource, updated while its origin is cut off alone: the update is
    acknowledged with the origin's copy alone and owed a copy (rule 6)."""
    simulation = Simulation(4, interleave=True, seed=0)
    for op in (*publisher_and_subscriber(4, 0, 3), publish(0)):
        simulation.apply(dict(op))
    data = publish(0)["data"].replace('"t0"', '"t0, revised"')
    (publication,) = qel.parse_publications(data, "turtle", publisher="pub", id="n0")
    update = m.Publish(publication=publication, change="update")
    simulation.apply({"op": "partition", "groups": [[0], [1, 2, 3]]})
    simulation._from_peer(simulation.peers["pub"], update)
    simulation.apply({"op": "wait", "seconds": 20})
    return simulation, update


def test_a_repeat_of_a_version_still_owed_a_copy_is_acknowledged_alone():
    """Rule 8 for repeats: an update acknowledged alone, sent again while the origin still owes
    its copy, is answered ``alone`` again (the publisher keeps it); once the copy is made late,
    the same repeat is answered without it (the publisher forgets it)."""
    simulation, update = updated_while_cut_off_alone()
    peer, origin = simulation.peers["pub"], simulation.nodes[simulation.ids[0]]
    assert peer.answers[-1] == m.Ack(request=request_label(update), alone=True)
    assert origin.copies_owed() == 1 and len(peer.kept) == 1
    simulation._from_peer(peer, update)
    simulation.apply({"op": "wait", "seconds": 20})
    assert peer.answers[-1] == m.Ack(request=request_label(update), alone=True), "still owed"
    simulation.apply({"op": "heal"})
    simulation.apply({"op": "wait", "seconds": 30})
    assert origin.copies_owed() == 0
    simulation._from_peer(peer, update)
    simulation.apply({"op": "wait", "seconds": 20})
    assert peer.answers[-1] == m.Ack(request=request_label(update)), "copied late since"
    assert len(peer.kept) == 0


def test_a_repeat_of_an_entry_whose_late_copy_is_in_flight_is_answered_at_once(monkeypatch):
    """A copy made late releases no answer (rule 6): a repeat of one of its entries, sent while
    it is in flight, is answered at once, ``alone`` (rule 8). It waited for that copy before,
    and with it every later answer on the connection, for as long as the connection lasted."""
    simulation, update = updated_while_cut_off_alone()
    peer, origin = simulation.peers["pub"], simulation.nodes[simulation.ids[0]]
    assert origin.copies_owed() == 1
    monkeypatch.setattr(SuperPeerNode, "_copied", lambda self, sender, message, now, out: None)
    simulation.apply({"op": "heal"})
    simulation.apply({"op": "wait", "seconds": 5})
    origin = simulation.nodes[simulation.ids[0]]
    assert origin._copy_owed_in_flight is not None, "the late copy is unanswered"
    assert peer.connection is not None
    before = len(peer.answers)
    simulation._from_peer(peer, update)
    simulation._advance(simulation.now + 1.0)
    assert peer.answers[before:] == [m.Ack(request=request_label(update), alone=True)]


WITHDRAWN_AFTER_ALONE = [
    *publisher_and_subscriber(4, 0, 1),
    publish(0),
    {"op": "partition", "groups": [[0], [1, 2, 3]]},
    {"op": "wait", "seconds": 20},
    publish(1),
    {"op": "wait", "seconds": 2},
    {"op": "unsubscribe", "peer": "sub", "id": "s1"},
]
"""A publication acknowledged alone at ``sp0``, cut off alone, and the subscriber's
withdrawal at ``sp1`` after it."""


def test_a_kept_publication_sent_again_to_its_origin_keeps_its_place_in_the_log(monkeypatch):
    """Rule 8, ``Publish.again``: the publisher sends a publication kept for its ``alone`` back
    to the origin that logged it (it reconnected during the cut). Answered as a repeat, it is
    not published again: published again, its log entry moved past the cut, the catch-up after
    the heal no longer found it, and a subscription withdrawn after it was published and
    before the heal never had it (stop 62's chaos run, seed 621: one lost)."""
    ops = [
        *WITHDRAWN_AFTER_ALONE,
        {"op": "detach", "peer": "pub"},
        {"op": "attach", "peer": "pub"},
        {"op": "wait", "seconds": 5},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ]
    simulation = played(ops)
    publisher = simulation.peers["pub"]
    alone = [a.alone for a in publisher.answers if a.request == "publish n1"]
    assert alone[:2] == [True, True] and not alone[-1] and len(publisher.kept) == 0
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert sorted(simulation.deliveries()["sub"]) == ["n0", "n1"]


def test_a_later_acceptance_of_a_kept_publication_leaves_its_first_in_every_log():
    """A publication acknowledged alone at an origin cut off alone, a withdrawal after it on
    the other side; the publisher sends it again through another access point, which has no
    version record of it (the origin, its previous access point, is away), accepts it again at
    a later time and copies that entry to its copy holder: the origin. That copy took the
    first entry's place in the origin's log, the catch-up after the heal no longer found it
    in the withdrawn subscription's window, and the subscriber never had it (stop 87's chaos
    run, seed 871: one lost so). The log keeps a publication's first acceptance."""
    simulation = played(WITHDRAWN_AFTER_ALONE)
    origin = simulation.nodes["sp0"]
    (first,) = [n for n in log_of(simulation, "sp0") if n.publication.id == "n1"]
    again = dataclasses.replace(first, origin="sp1", published_at=first.published_at + 10.0)
    copy = m.LogCopy(request="sp1~1#1", notifications=(again,))
    origin._copy_in("sp1", copy, simulation._clock("sp0"), [])  # (its answer goes nowhere: cut)
    (kept,) = [n for n in log_of(simulation, "sp0") if n.publication.id == "n1"]
    assert (kept.origin, kept.published_at) == ("sp0", first.published_at)
    for op in ({"op": "heal"}, {"op": "wait", "seconds": 60}):
        simulation.apply(dict(op))
    assert sorted(simulation.deliveries()["sub"]) == ["n0", "n1"]


def copy_holder(simulation: Simulation) -> int:
    """The index of the one super-peer but the origin (``sp0``) whose log holds copies."""
    (holder,) = [n for n in simulation.ids[1:] if n in simulation.nodes and logged(simulation, n)]
    return simulation.ids.index(holder)


@pytest.mark.parametrize("bounced", [False, True], ids=["running", "origin-restarted"])
def test_copies_lost_with_their_holder_are_made_again_before_the_origin_is_lost(bounced):
    """Rule 9: the subscriber's access point is cut off while the publisher publishes; the
    neighbour holding the copies dies for good, then, once the origin copied them again, the
    origin too, before the heal. The catch-up finds them at the new holder (before, 10 of 13
    were lost: a chaos run, stop 79, seed 795). With ``bounced`` the origin restarts between
    the copies and the loss: where its copies are is in its store."""
    ops = cut_while_publishing(2, 13)
    simulation = played(ops)
    holder = copy_holder(simulation)
    origin = simulation.nodes["sp0"]
    assert origin.status(simulation.now)["log_copies"]["spans_to_copy_again"] == 0
    more = [{"op": "superpeer_bounce", "superpeer": 0}] if bounced else []
    more += [
        {"op": "superpeer_fail", "superpeer": holder},
        {"op": "wait", "seconds": 10},
    ]
    for op in more:
        simulation.apply(dict(op))
    origin = simulation.nodes["sp0"]
    copies = origin.status(simulation.now)["log_copies"]
    assert copies["copied_again"] == 13 and copies["spans_to_copy_again"] == 0
    (again,) = [n for n in simulation.ids[1:] if n in simulation.nodes and logged(simulation, n)]
    assert logged(simulation, again) == {f"n{k}" for k in range(13)}
    last = [
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ]
    for op in last:
        simulation.apply(dict(op))
    ops += more + last
    assert simulation.deliveries() == expected_deliveries(4, ops)
    assert len(simulation.deliveries()["sub"]) == 13


def test_a_leaver_keeps_no_copy_after_its_hand_over():
    """Rule 10: the copies' holder leaves while the publisher publishes; the copies that reach
    it after it handed its log over are not kept there (it answers none), so the origin copies
    them to another neighbour; the origin then dies for good, before the heal of the cut that
    kept the subscriber's access point away. Before, the leaver acknowledged them and took them
    with it (a chaos run, stop 79, seed 795, lost 13 so)."""
    simulation = played(cut_while_publishing(2, 6))
    index = copy_holder(simulation)
    leaver = simulation.nodes[simulation.ids[index]]
    simulation._execute(leaver.node_id, leaver.leave(simulation._clock(leaver.node_id)))
    published_at_once(simulation, 5, first=6)  # their copies cross the leave
    simulation.run_until_quiet()
    assert leaver.stopped and leaver.adopter
    simulation.planner.gone.add(index)
    for step in simulation.planner.after_leave(index, simulation.ids.index(leaver.adopter)):
        simulation._connect(step)
    simulation.apply({"op": "wait", "seconds": 5})
    assert logged(simulation, leaver.adopter) == {f"n{k}" for k in range(11)}
    for op in (
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ):
        simulation.apply(dict(op))
    assert sorted(simulation.deliveries()["sub"]) == sorted(f"n{k}" for k in range(11))
