"""Migration under faults, in the simulator: what an access point hands over or forwards for a
peer that moved is never lost on the way. Found by ``deploy.delivery``'s 50 moves during a
stream on real daemons, which lost up to three quarters of what was published while the peer
moved: handed-over mail was deleted before it arrived (a rejoin dropped it with the link), and
mail that reached an access point after it forgot the peer was dropped."""

import dataclasses
import heapq

import pytest

import qel
import wire
from superpeer import versions
from superpeer._node_base import NodeConfig
from superpeer.config import ConfigError, config_from_mapping
from superpeer.core import tree_parent
from superpeer.sim import Simulation
from superpeer.sim.network import BOUNCE_SECONDS, address_of
from superpeer.sim.workload import Send, peer_requests
from tests.superpeer.oracle import expected_deliveries
from wire import messages as m

BROAD = {"schemas": ["dc", "rdf", "http://example.org/"]}
QUERY = "X : t(X, dc:title, T)"
DC = "http://purl.org/dc/elements/1.1/"


def document(n: int) -> str:
    return f'<http://example.org/d{n}> <{DC}title> "t{n}" .'


def kept_at_the_first_access_point(count: int) -> list[dict]:
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "detach", "peer": "sub"},
    ]
    ops += [
        {"op": "publish", "peer": "pub", "id": f"n{n}", "format": "nt", "data": document(n)}
        for n in range(count)
    ]
    return ops


def is_handover_mail(pending) -> bool:
    return isinstance(pending.message, m.Mail) and pending.message.purpose == "handover"


def moving_with_mail_in_flight(ops: list[dict], move: dict) -> Simulation:
    """The simulation after ``ops``, stopped in ``move`` as soon as the old access point's
    handover mail is on its way."""
    simulation = Simulation(2)
    for op in ops:
        simulation.apply(op)
    for step in simulation.planner.plan(move, str):
        simulation._step(step)
    while not any(is_handover_mail(pending) for pending in simulation._queue):
        simulation._deliver(heapq.heappop(simulation._queue))
    return simulation


def arrives_late(simulation: Simulation, publication: qel.Publication, published_at: float):
    """``publication``, published by ``pub`` at sp1 at ``published_at``, reaches sp0 now (it was
    held up on the link)."""
    late = m.Notification(
        origin="sp1",
        origin_position=simulation.cores["sp1"].view.root_position,
        publication=publication,
        owner="pub",
        access_point="sp1",
        hops=1,
        published_at=published_at,
    )
    sp1_to_sp0(simulation, late)


def sp1_to_sp0(simulation: Simulation, message: object) -> None:
    """``message`` from sp1 reaches sp0 now (it was held up on the link)."""
    simulation._enqueue(
        "sp",
        "sp1",
        "sp0",
        incarnation=simulation.nodes["sp1"].incarnation,
        data=wire.encode(message),
        message=message,
    )


def holding_forwards(simulation: Simulation, subscribe: dict) -> list:
    """Apply ``subscribe`` but hold every ``Forward`` it sends (a link holds them up)."""
    for step in simulation.planner.plan(subscribe, str, simulation.now):
        simulation._step(step)
    held = []
    while simulation._queue:
        pending = heapq.heappop(simulation._queue)
        if isinstance(pending.message, m.Forward):
            held.append(pending)
        else:
            simulation._deliver(pending)
    return held


def relayed(simulation: Simulation) -> tuple[str, str, str]:
    """An origin, an access point and the relay between them (its parent in the origin's
    tree, not the origin itself)."""
    return next(
        (o, s, parent)
        for o in sorted(simulation.nodes)
        for s in sorted(simulation.nodes)
        if (parent := tree_parent(simulation.cores[s].view, simulation.cores[o].view.root_position))
        not in (None, o)
    )


def release(simulation: Simulation, held: list) -> None:
    """What ``holding_forwards`` held arrives now."""
    for pending in held:
        heapq.heappush(simulation._queue, dataclasses.replace(pending, at=simulation.now))
    simulation.run_until_quiet()


def test_handover_mail_lost_with_its_sender_is_sent_again():
    """The old access point is killed right after it sent what it kept, before it arrived, and
    comes back: it still holds the mail (deleted only once the new access point says it has it
    all), and the new one, still waiting for the answer, asks again."""
    ops = kept_at_the_first_access_point(5)
    move = {"op": "move", "peer": "sub", "superpeer": 1}
    simulation = moving_with_mail_in_flight(ops, move)
    simulation._kill("sp0")  # the mail goes with it
    simulation._advance(simulation.now + BOUNCE_SECONDS)
    simulation._start("sp0")
    simulation.run_until_quiet()
    assert simulation.deliveries() == expected_deliveries(2, [*ops, move])
    assert simulation.stores["sp0"].mail_counts() == {}, "the old access point forgot it"


def test_handover_mail_lost_on_the_way_is_asked_for_again():
    """Some of the handover's ``Mail`` is lost on the way but its ``HandoverDone`` arrives (it
    counts what its mail carried): the new access point asks again, and the old one, which
    deleted nothing, sends it all again. Before, the old one had deleted it when it sent it."""
    ops = kept_at_the_first_access_point(5)
    move = {"op": "move", "peer": "sub", "superpeer": 1}
    simulation = moving_with_mail_in_flight(ops, move)
    simulation._queue = [p for p in simulation._queue if not is_handover_mail(p)]
    heapq.heapify(simulation._queue)
    simulation.run_until_quiet()
    assert simulation.deliveries() == expected_deliveries(2, [*ops, move])
    assert simulation.stores["sp0"].mail_counts() == {}


def test_mail_for_a_peer_that_moved_on_follows_it_after_its_subscriptions_went():
    """Mail reaching an access point after it forgot a peer that moved away (a catch-up it
    asked for, or a handover from further back, slower than ``settle_seconds``) was dropped:
    the forwarding address now outlives the subscriptions, and chains of moves are followed."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "move", "peer": "sub", "superpeer": 2},
        {"op": "move", "peer": "sub", "superpeer": 3},
    ]
    simulation = Simulation(4)
    for op in ops:
        simulation.apply(op)
    assert "sub" not in simulation.cores["sp0"].peers, "sp0 forgot it"
    [publication] = qel.parse_publications(document(9), "nt", publisher="pub", id="late")
    notify = m.Notify(
        publication=publication,
        subscriptions=("s1",),
        owner="pub",
        access_point="",
        origin="sp1",
        hops=0,
        published_at=simulation.now,
    )
    late = m.Mail(request="r", purpose="catchup", peer="sub", notifications=(notify,), last=True)
    simulation._enqueue(
        "sp",
        "sp1",
        "sp0",
        incarnation=simulation.nodes["sp1"].incarnation,
        data=wire.encode(late),
        message=late,
    )
    simulation.run_until_quiet()
    assert simulation.deliveries()["sub"] == ["late"]


def test_a_notification_that_reaches_the_old_access_point_late_follows_the_peer():
    """A notification routed to the old access point before the peer moved, held up on a link
    (behind a busy node: 7 s in a 40-move run on real daemons) until after the subscriptions
    there went, was matched against nothing and lost: the old access point keeps matching the
    peer's subscriptions for as long as its forwarding address lives."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "move", "peer": "sub", "superpeer": 2},
    ]
    simulation = Simulation(4)
    for op in ops:
        simulation.apply(op)
        if op["op"] == "subscribe":
            published_at = simulation.now  # while the subscription stood at sp0
    assert "sub" not in simulation.cores["sp0"].peers, "sp0 forgot it"
    [publication] = qel.parse_publications(document(9), "nt", publisher="pub", id="late")
    [other] = qel.parse_publications(
        '<http://example.org/x> <http://example.org/p> "x" .', "nt", publisher="pub", id="other"
    )
    for held_up in (publication, other):
        arrives_late(simulation, held_up, published_at)
    simulation.run_until_quiet()
    assert simulation.deliveries()["sub"] == ["late"], "what its subscription matches, only"
    assert simulation.nodes["sp0"].status(simulation.now)["catchups"]["late"] == 1


def test_a_notification_that_arrives_after_its_subscription_was_withdrawn_is_still_owed():
    """Published while the subscription stood, held up on a cut link until after the peer
    withdrew it (``deploy.chaos`` seed 5: a cut of 1.6 s): the access point matched it
    against nothing. It is matched against what the peer withdrew, for what was published
    before the withdrawal; what was published after is not delivered."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
    ]
    simulation = Simulation(2)
    for op in ops:
        simulation.apply(op)
    standing = simulation.now - 0.001  # the subscription was made just before
    simulation.apply({"op": "unsubscribe", "peer": "sub", "id": "s1"})
    for name, published_at in (("before", standing), ("after", simulation.now + 1.0)):
        [publication] = qel.parse_publications(document(1), "nt", publisher="pub", id=name)
        arrives_late(simulation, publication, published_at)
    simulation.run_until_quiet()
    assert simulation.deliveries()["sub"] == ["before"]


def test_what_the_old_access_point_matches_late_is_only_what_was_published_before():
    """The old access point's copy of a moved peer's subscriptions is for what was published
    while they stood there: after the peer withdrew one at its new access point, a later
    publication reaching the old one late, or mail it forwards, is not delivered for it
    (``deploy.chaos`` in CI: two notifications for a withdrawn subscription)."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "move", "peer": "sub", "superpeer": 2},
        {"op": "unsubscribe", "peer": "sub", "id": "s1"},
    ]
    simulation = Simulation(4)
    for op in ops:
        simulation.apply(op)
    [publication] = qel.parse_publications(document(3), "nt", publisher="pub", id="after")
    arrives_late(simulation, publication, simulation.now)
    notify = m.Notify(
        publication=publication,
        subscriptions=("s1",),
        owner="pub",
        access_point="",
        origin="sp1",
        hops=0,
        published_at=simulation.now,
    )
    forwarded = m.Mail(
        request="", purpose="forward", peer="sub", notifications=(notify,), last=True, hops=1
    )
    simulation._enqueue(
        "sp",
        "sp0",
        "sp2",
        incarnation=simulation.nodes["sp0"].incarnation,
        data=wire.encode(forwarded),
        message=forwarded,
    )
    simulation.run_until_quiet()
    assert simulation.deliveries()["sub"] == []
    assert simulation.nodes["sp0"].status(simulation.now)["catchups"]["late"] == 0


def test_a_subscription_that_reaches_the_origin_late_gets_what_was_published_meanwhile():
    """The subscription's ``Forward`` is held up on its way to the publisher's access point
    (a cut link, shorter than ``failure_seconds``: ``deploy.chaos`` in CI lost three
    publications so) while the origin publishes: when it arrives, later than routes take,
    the origin replays what it published since the subscription was made and it matches."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 3},
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "advertise", "peer": "pub", **BROAD},
    ]
    simulation = Simulation(4)
    for op in ops:
        simulation.apply(op)
    subscribe = {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY}
    held = holding_forwards(simulation, subscribe)
    assert held, "the subscription is on its way"
    publish = {"op": "publish", "peer": "pub", "id": "meanwhile", "format": "nt",
               "data": document(1)}  # fmt: skip
    simulation.apply(publish)
    assert simulation.deliveries()["sub"] == []
    simulation._advance(simulation.now + 3 * simulation.nodes["sp0"].config.routing.settle_seconds)
    release(simulation, held)
    assert simulation.deliveries()["sub"] == ["meanwhile"]
    assert simulation.nodes["sp0"].status(simulation.now)["catchups"]["replayed"] == 1


def test_a_late_subscription_covered_on_the_way_gets_what_was_published_meanwhile():
    """As above, but the subscription is held up before a super-peer that already routes a
    covering subscription toward the origin: it goes no further there (SIENA), so the origin
    never sees it late; that super-peer asks the origin to replay to it (``ReplayRequest``)."""
    simulation = Simulation(4)
    # an access point whose route to the origin passes through another super-peer
    origin, access_point, through = relayed(simulation)
    number = {name: int(name[2:]) for name in simulation.nodes}
    ops = [
        {"op": "join", "peer": "pub", "superpeer": number[origin]},
        {"op": "join", "peer": "wide", "superpeer": number[through]},
        {"op": "join", "peer": "narrow", "superpeer": number[access_point]},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "wide", "id": "w", "query": QUERY},
    ]
    for op in ops:
        simulation.apply(op)
    subscribe = {"op": "subscribe", "peer": "narrow", "id": "n",
                 "query": 'X : t(X, dc:title, T), T contains "t1"'}  # fmt: skip
    held = holding_forwards(simulation, subscribe)
    assert held
    publish = {"op": "publish", "peer": "pub", "id": "meanwhile", "format": "nt",
               "data": document(1)}  # fmt: skip
    simulation.apply(publish)
    assert simulation.deliveries() == {"narrow": [], "pub": [], "wide": ["meanwhile"]}
    simulation._advance(simulation.now + 3 * simulation.nodes[origin].config.routing.settle_seconds)
    release(simulation, held)
    assert simulation.deliveries()["narrow"] == ["meanwhile"]
    assert simulation.messages["sp.replay"] == 1


def test_a_notification_held_up_before_a_relay_until_after_a_retraction_is_still_owed():
    """Published while the subscription stood, held up on the link into a relay until after
    the subscription's ``Retract`` passed there (``deploy.chaos`` seed 3, 600 s: a cut relay):
    the relay routed it nowhere. A relay keeps what its neighbours retracted for
    ``retracted_seconds`` and routes what was published before the retraction."""
    simulation = Simulation(4)
    origin, access_point, relay = relayed(simulation)
    number = {name: int(name[2:]) for name in simulation.nodes}
    ops = [
        {"op": "join", "peer": "pub", "superpeer": number[origin]},
        {"op": "join", "peer": "sub", "superpeer": number[access_point]},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
    ]
    for op in ops:
        simulation.apply(op)
    standing = simulation.now - 0.001
    simulation.apply({"op": "unsubscribe", "peer": "sub", "id": "s1"})
    [publication] = qel.parse_publications(document(2), "nt", publisher="pub", id="held")
    late = m.Notification(
        origin=origin,
        origin_position=simulation.cores[origin].view.root_position,
        publication=publication,
        owner="pub",
        access_point=origin,
        hops=1,
        published_at=standing,
    )
    simulation._enqueue(
        "sp",
        origin,
        relay,
        incarnation=simulation.nodes[origin].incarnation,
        data=wire.encode(late),
        message=late,
    )
    simulation.run_until_quiet()
    assert simulation.deliveries()["sub"] == ["held"]


def test_the_retraction_horizon_is_configurable_and_checked():
    config = config_from_mapping({"recovery": {"retracted_seconds": 7.5}})
    assert config.node_config(tracing=False).routing.retracted_seconds == 7.5
    with pytest.raises(ConfigError, match="retracted_seconds"):
        config_from_mapping({"recovery": {"retracted_seconds": -1}})


ARTICLE = '<http://example.org/{n}> <http://purl.org/dc/elements/1.1/title> "{t}" .'


def changed(op: str, n: str, title: str) -> dict:
    return {"op": op, "peer": "pub", "id": n, "format": "nt", "data": ARTICLE.format(n=n, t=title)}


PUBLISHED_AT_SP0 = [
    {"op": "join", "peer": "sub", "superpeer": 2},
    {"op": "join", "peer": "pub", "superpeer": 0},
    {"op": "advertise", "peer": "pub", **BROAD},
    {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY, "on": "change"},
    changed("publish", "a", "first"),
    changed("publish", "b", "second"),
]


def ran_without_errors(ops: list[dict]) -> Simulation:
    """Four super-peers that ran ``ops`` until quiet, every operation accepted."""
    simulation = Simulation(4)
    for op in ops:
        simulation.apply(op)
    simulation.run_until_quiet()
    assert simulation.errors == []
    return simulation


def held_versions(simulation: Simulation, superpeer: str) -> dict[str, tuple[int, bool]]:
    held = simulation.cores[superpeer].versions.resources_of("pub")
    return {k: (v.number, v.retracted) for k, v in held.items()}


def test_a_peer_changes_its_resources_at_the_super_peer_that_adopted_it():
    """The access point a peer published through leaves: its adopter gets the versions of the
    peer's resources (``Versions``), durably, so the owner goes on updating, extending and
    retracting them there, also after the adopter restarted. Before, the adopter refused every
    such change ("you have no resource under the id ..."), for good."""
    ops = [
        *PUBLISHED_AT_SP0,
        {"op": "superpeer_leave", "superpeer": 0},
        changed("update", "a", "first, again"),
        changed("extend", "b", "second, more"),
        {"op": "detach", "peer": "pub"},  # else it would move when its access point fails
        {"op": "superpeer_fail", "superpeer": 1},
        {"op": "superpeer_restart", "superpeer": 1},
        {"op": "attach", "peer": "pub"},
        changed("update", "a", "first, a third time"),
        {"op": "retract", "peer": "pub", "id": "b"},
    ]
    simulation = ran_without_errors(ops)
    assert simulation.planner.peers["pub"].superpeer == 1, "adopted by sp1"
    assert simulation.changes()["sub"] == [
        ["a", "added"],
        ["b", "added"],
        ["a", "changed"],
        ["b", "changed"],
        ["a", "changed"],
        ["b", "removed"],
    ]
    assert held_versions(simulation, "sp1") == {"a": (2, False), "b": (2, True)}


def test_a_peer_that_moved_changes_its_resources_at_its_new_access_point():
    """The handover brings the versions of the resources the peer published through its
    previous access point (``Versions``, counted in ``HandoverDone``); that one forgets them
    once the new one has them, records included, so a restart does not bring them back. Before,
    the new access point refused every change of them, for good."""
    ops = [
        *PUBLISHED_AT_SP0,
        {"op": "move", "peer": "pub", "superpeer": 1},
        changed("update", "a", "first, again"),
        changed("extend", "b", "second, more"),
        {"op": "move", "peer": "pub", "superpeer": 3},
        {"op": "retract", "peer": "pub", "id": "b"},
        {"op": "superpeer_fail", "superpeer": 1},
        {"op": "superpeer_restart", "superpeer": 1},
        {"op": "move", "peer": "pub", "superpeer": 0},
        changed("update", "a", "first, a third time"),
    ]
    simulation = ran_without_errors(ops)
    assert simulation.changes()["sub"] == [
        ["a", "added"],
        ["b", "added"],
        ["a", "changed"],
        ["b", "changed"],
        ["b", "removed"],
        ["a", "changed"],
    ]
    assert held_versions(simulation, "sp0") == {"a": (2, False), "b": (2, True)}
    for gone in ("sp1", "sp3"):
        assert held_versions(simulation, gone) == {}
        assert not any(
            r["owner"] == "pub" for r in simulation.stores[gone].pending(versions.RECORDS).values()
        ), f"{gone} keeps no record of what it handed over"


def test_a_change_sent_before_the_handover_answered_waits_for_the_versions():
    """The peer updates a resource right after it moved, before its previous access point
    answered the handover: the new access point holds the request, and what follows it, until
    the versions are in, then applies them in order."""
    simulation = Simulation(3)
    for op in PUBLISHED_AT_SP0:
        simulation.apply(op)
    changes = [changed("update", "a", "first, again"), {"op": "retract", "peer": "pub", "id": "b"}]
    slow = moved_with_a_slow_handover(simulation, changes)
    assert len(simulation.nodes["sp1"]._held["pub"]) == 2, "held while the versions come"
    [handover] = slow
    heapq.heappush(simulation._queue, dataclasses.replace(handover, at=simulation.now))
    simulation.run_until_quiet()
    assert simulation.errors == []
    assert simulation.changes()["sub"] == [
        ["a", "added"],
        ["b", "added"],
        ["a", "changed"],
        ["b", "removed"],
    ]
    assert held_versions(simulation, "sp1") == {"a": (1, False), "b": (1, True)}


def moved_with_a_slow_handover(simulation: Simulation, ops: list[dict]) -> list:
    """``pub`` moves to sp1 and sends ``ops`` at once; everything but the handover request
    arrives (routes settle). Returns the handover request, held back."""
    move = {"op": "move", "peer": "pub", "superpeer": 1}
    for op in [move, *ops]:
        for step in simulation.planner.plan(op, str, simulation.now):
            simulation._step(step)
    slow = []
    while any(p.kind != "sp" or not isinstance(p.message, m.Heartbeat) for p in simulation._queue):
        pending = heapq.heappop(simulation._queue)
        if isinstance(pending.message, m.Handover):
            slow.append(pending)
        else:
            simulation._deliver(pending)
    return slow


def test_requests_held_for_a_handover_are_bounded():
    config = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, max_held_requests=1)
    simulation = Simulation(3, node_config=config)
    for op in PUBLISHED_AT_SP0:
        simulation.apply(op)
    updates = [changed("update", "a", "again"), changed("update", "b", "again")]
    moved_with_a_slow_handover(simulation, updates)
    assert "pub" not in simulation.nodes["sp1"]._held
    assert simulation.peers["pub"].connection is None, "closed: more than max_held_requests"


def test_a_publication_sent_right_after_its_advertisement_reaches_a_remote_subscriber():
    """The peer advertises and publishes at once: the subscription's route toward the new
    origin forms after the publication. Found while testing a moved peer's changes: the origin
    now replays what it published since it announced new elements to a route that formed
    within ``settle_seconds`` of the announcement (before, nobody heard of it)."""
    simulation = Simulation(3)
    for op in [
        {"op": "join", "peer": "sub", "superpeer": 2},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "join", "peer": "pub", "superpeer": 1},
    ]:
        simulation.apply(op)
    for op in [{"op": "advertise", "peer": "pub", **BROAD}, changed("publish", "a", "first")]:
        for step in simulation.planner.plan(op, str, simulation.now):
            simulation._step(step)
    simulation.run_until_quiet()
    assert simulation.errors == []
    assert simulation.changes()["sub"] == [["a", "added"]]
    assert simulation.nodes["sp1"].status(simulation.now)["catchups"]["replayed"] == 1


def test_versions_lost_on_the_way_come_again_from_the_store_after_the_peer_state_went():
    """The handover's ``Versions`` are lost and the new access point asks again only after the
    previous one forgot the peer's state (``settle_seconds``): they come from its store."""
    simulation = Simulation(3)
    for op in PUBLISHED_AT_SP0:
        simulation.apply(op)
    move = {"op": "move", "peer": "pub", "superpeer": 1}
    for step in simulation.planner.plan(move, str, simulation.now):
        simulation._step(step)
    handovers = 0
    while simulation._queue:
        pending = heapq.heappop(simulation._queue)
        if isinstance(pending.message, m.Versions) and handovers == 1:
            continue  # lost on the way
        if isinstance(pending.message, m.Handover):
            handovers += 1
            if handovers == 2:  # asked again: slow, the peer's state at sp0 goes meanwhile
                settle = simulation.nodes["sp0"].config.routing.settle_seconds
                simulation._advance(simulation.now + 3 * settle)
                assert "pub" not in simulation.cores["sp0"].peers
                simulation._deliver(dataclasses.replace(pending, at=simulation.now))
                break
        simulation._deliver(pending)
    assert handovers == 2
    simulation.run_until_quiet()
    simulation.apply(changed("update", "a", "first, again"))
    assert simulation.errors == []
    assert held_versions(simulation, "sp1") == {"a": (1, False), "b": (0, False)}
    assert ["a", "changed"] in simulation.changes()["sub"]


def test_a_change_while_the_previous_access_point_is_down_is_refused_until_it_is_back():
    """The previous access point failed: the new one cannot know the peer's resources, and
    says where they are; once the failed one is back, its handover brings them and the same
    change is accepted."""
    simulation = Simulation(3)
    for op in [
        *PUBLISHED_AT_SP0,
        {"op": "detach", "peer": "pub"},
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "move", "peer": "pub", "superpeer": 1},
    ]:
        simulation.apply(op)
    update = changed("update", "a", "first, again")
    # the planner refuses it before sending (``ElsewhereError``): sent as a client would
    [publish] = peer_requests(update, str, simulation.now)
    simulation._step(Send("pub", publish))
    simulation.run_until_quiet()
    [refused] = [a for a in simulation.peers["pub"].answers if isinstance(a, m.Refused)]
    assert "may be kept by your previous access point sp0" in refused.reason
    simulation.apply({"op": "superpeer_restart", "superpeer": 0})
    assert held_versions(simulation, "sp1") == {"a": (0, False), "b": (0, False)}
    simulation._step(Send("pub", publish))
    simulation.run_until_quiet()
    assert ["a", "changed"] in simulation.changes()["sub"]
    assert held_versions(simulation, "sp1")["a"] == (1, False)


def test_a_peer_whose_access_point_died_gets_what_it_kept_from_the_origins_logs():
    """The subscriber was offline at sp0 when publications came, and sp0 died with its mail:
    at its next access point, the peer's move brings its subscriptions with the time each was
    activated, and the catch-up from the origins' logs delivers what they matched, none
    older than its subscription (its activation was once taken as when it was re-sent to the
    new access point, older than which nothing a catch-up found was delivered)."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "publish", "peer": "pub", "id": "before", "format": "nt", "data": document(99)},
        {"op": "wait", "seconds": 20},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "wait", "seconds": 5},
        {"op": "detach", "peer": "sub"},
        *[
            {"op": "publish", "peer": "pub", "id": f"n{n}", "format": "nt", "data": document(n)}
            for n in range(5)
        ],
        {"op": "wait", "seconds": 20},
        {"op": "superpeer_fail", "superpeer": 0},
        {"op": "wait", "seconds": 30},
        {"op": "move", "peer": "sub", "superpeer": 2},
        {"op": "wait", "seconds": 60},
    ]
    simulation = Simulation(3)
    for op in ops:
        simulation.apply(dict(op))
    assert simulation.deliveries() == expected_deliveries(3, ops)
    assert sorted(simulation.deliveries()["sub"]) == [f"n{n}" for n in range(5)]
    assert simulation.peers["sub"].filtered == 0


def moving_while_the_old_connection_dies_silently(simulation: Simulation, move: dict) -> list:
    """Apply ``move``, but the old access point does not hear that the peer's connection
    closed (a partition cut it, or it died without a word): the close is held, for the test to
    release when that access point notices."""
    for step in simulation.planner.plan(move, str, simulation.now):
        simulation._step(step)
    held = [p for p in simulation._queue if p.kind == "close_in"]
    simulation._queue = [p for p in simulation._queue if p.kind != "close_in"]
    heapq.heapify(simulation._queue)
    simulation.run_until_quiet()
    return held


SUBSCRIBED_AT_SP0 = [
    {"op": "join", "peer": "sub", "superpeer": 0},
    {"op": "join", "peer": "pub", "superpeer": 2},
    {"op": "advertise", "peer": "pub", **BROAD},
    {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
]
MOVED_TO_SP1 = {"op": "move", "peer": "sub", "superpeer": 1}
BACK_TO_SP0 = {"op": "move", "peer": "sub", "superpeer": 0}
CHANGED_AT_SP1 = [
    {"op": "publish", "peer": "pub", "id": "owed", "format": "nt", "data": document(0)},
    {"op": "unsubscribe", "peer": "sub", "id": "s1"},
    {"op": "subscribe", "peer": "sub", "id": "s2", "query": "X : t(X, dc:creator, C)"},
    *[
        {"op": "publish", "peer": "pub", "id": f"n{n}", "format": "nt", "data": document(n)}
        for n in range(1, 4)
    ],
    {
        "op": "publish",
        "peer": "pub",
        "id": "c",
        "format": "nt",
        "data": f'<http://example.org/c> <{DC}creator> "Nejdl" .',
    },
]
"""At the new access point the peer drops ``s1`` for ``s2``; ``owed`` was published while
``s1`` stood, ``n1`` to ``n3`` match ``s1`` only (after it went), ``c`` matches ``s2``."""


def refused_while_attached_at_sp0() -> tuple[Simulation, list]:
    """``sub`` moved from sp0 to sp1, and sp0, which did not hear the old connection close,
    refused the handover; then the peer changed its subscriptions at sp1 and ``pub``
    published (all before sp0's ``Clock`` to the peer went unanswered for ``failure_seconds``).
    Returns the simulation and the held close."""
    simulation = Simulation(3)
    for op in SUBSCRIBED_AT_SP0:
        simulation.apply(op)
    closes = moving_while_the_old_connection_dies_silently(simulation, MOVED_TO_SP1)
    assert [p.receiver for p in closes] == ["sp0"]
    assert "sub" in simulation.cores["sp0"].peers, "sp0 refused: the peer is attached there"
    assert simulation.nodes["sp1"]._handovers_of("sub"), "sp1 keeps its request"
    for op in CHANGED_AT_SP1:
        simulation.apply(op)
    assert "sub" in simulation.cores["sp0"].peers
    return simulation, closes


def back_at_sp0_without_stale_mail(simulation: Simulation) -> None:
    """The peer comes back to sp0: it gets nothing for the subscription it withdrew at sp1,
    and everything it was owed, once."""
    simulation.apply(BACK_TO_SP0)
    assert simulation.peers["sub"].filtered == 0, "nothing for the withdrawn subscription"
    ops = [*SUBSCRIBED_AT_SP0, MOVED_TO_SP1, *CHANGED_AT_SP1, BACK_TO_SP0]
    assert simulation.deliveries() == expected_deliveries(3, ops)
    assert simulation.deliveries()["sub"] == ["c", "owed"]


def test_a_handover_refused_while_the_old_connection_seemed_alive_completes_once_it_is_dead():
    """``deploy.chaos``: the old access point, cut off from the peer, still held its connection
    and refused the handover ("the peer is attached here now"); the new one took that as final,
    and the old one kept the peer's old subscriptions (36 minutes) and the mail they matched,
    published after the peer withdrew them elsewhere: 1,198 notifications when the peer came
    back, 21 for nothing it still subscribed to. The refusal holds only while the peer is
    attached there: the old access point answers the request when the connection ends (its
    subscriptions go after ``settle_seconds``), and the new one drops what matched only what
    the peer withdrew there before it was published."""
    simulation, closes = refused_while_attached_at_sp0()
    noticed = simulation.now
    release(simulation, closes)  # the runtime tells sp0 the connection ended
    assert "sub" not in simulation.cores["sp0"].peers, "handed over: its old subscriptions went"
    assert simulation.now - noticed <= simulation.node_config.routing.settle_seconds + 0.1
    assert simulation.stores["sp0"].mail_counts() == {}
    assert not simulation.nodes["sp1"]._handovers_of("sub")
    back_at_sp0_without_stale_mail(simulation)


def test_a_connection_silent_after_a_refused_handover_is_closed_as_dead():
    """The runtime does not notice (a half-open connection lives until the operating system
    gives up on it, minutes later): the old access point asked the peer for a ``Clock`` as it
    refused, and closes the connection once it has been silent for ``failure_seconds``."""
    simulation, _ = refused_while_attached_at_sp0()
    config = simulation.node_config
    simulation.apply({"op": "wait", "seconds": config.failure_seconds})
    assert "sub" not in simulation.cores["sp0"].peers, "closed, handed over, forgotten"
    assert simulation.stores["sp0"].mail_counts() == {}
    assert not simulation.nodes["sp1"]._handovers_of("sub")
    back_at_sp0_without_stale_mail(simulation)


def test_a_handover_refused_for_now_is_asked_again_when_the_old_access_point_restarts():
    """The old access point restarted with the refusal in mind only (the peer is detached
    there since): the new access point kept its request, asks again when the old one says it
    is back (``Returned``), and gets what was kept."""
    simulation, _ = refused_while_attached_at_sp0()
    simulation.apply({"op": "superpeer_bounce", "superpeer": 0})
    assert "sub" not in simulation.cores["sp0"].peers
    assert simulation.stores["sp0"].mail_counts() == {}
    assert not simulation.nodes["sp1"]._handovers_of("sub")
    back_at_sp0_without_stale_mail(simulation)


def test_a_peer_that_comes_back_over_a_refused_handover_stays_where_it_is():
    """The peer came back to the old access point (a new connection: the old one closes as
    it attaches) before the refused handover was answered: nothing is handed over to where
    it no longer is, and the new access point, which hands the peer back, stops asking. A
    late copy of its request is refused for now again, and the peer, alive, answers the
    ``Clock`` that comes with the refusal: its connection stays. (The mail sp0 kept for ``s1``
    reaches the peer as it attaches, before it tells sp0 it withdrew ``s1``: the peer's inbox
    filters what was published after that, ``withdrawn_before``.) When that connection ends,
    the late request is found stale."""
    simulation, closes = refused_while_attached_at_sp0()
    [(request, entry)] = simulation.nodes["sp1"]._handovers_of("sub").items()
    simulation.apply(BACK_TO_SP0)
    release(simulation, closes)  # that connection is gone already
    assert simulation.cores["sp0"].peers["sub"].attached
    assert list(simulation.cores["sp0"].subscriptions_of("sub")) == ["s2"]
    assert not simulation.nodes["sp1"]._handovers_of("sub")
    ops = [*SUBSCRIBED_AT_SP0, MOVED_TO_SP1, *CHANGED_AT_SP1, BACK_TO_SP0]
    assert simulation.deliveries() == expected_deliveries(3, ops)
    sp1_to_sp0(simulation, simulation.nodes["sp1"]._handover_request(request, "sub", entry))
    connection = simulation.peers["sub"].connection
    simulation.run_until_quiet()
    assert simulation.nodes["sp0"]._refused_for_now["sub"].silent_by is None, "it answered"
    simulation.apply({"op": "wait", "seconds": 2 * simulation.node_config.failure_seconds})
    assert simulation.peers["sub"].connection == connection
    assert simulation.cores["sp0"].peers["sub"].attached
    simulation.apply({"op": "detach", "peer": "sub"})
    assert "sub" in simulation.cores["sp0"].peers, "the late request was stale: nothing handed"
    assert not simulation.nodes["sp0"]._refused_for_now


def test_a_publisher_back_through_a_newcomer_finds_its_state_at_the_successor_it_never_heard_of():
    """The publisher's access point left while the publisher was offline; its successor
    adopted the publisher's state (versions included). The publisher comes back through a
    super-peer that joined after the departure, so never heard of the successor: the
    handover, unanswered by the departed access point, is asked of every live super-peer,
    and the successor answers. Before, every change of the publisher's resources was refused
    for good ("may be kept by your previous access point sp0 ... it does not answer")."""
    ops = [
        *PUBLISHED_AT_SP0,
        {"op": "detach", "peer": "pub"},
        {"op": "superpeer_leave", "superpeer": 0},
        {"op": "wait", "seconds": 5},
        {"op": "superpeer_join"},
        {"op": "wait", "seconds": 10},
        {"op": "move", "peer": "pub", "superpeer": 4},
        {"op": "wait", "seconds": 30},
        changed("update", "a", "first, again"),
    ]
    simulation = ran_without_errors(ops)
    assert simulation.changes()["sub"] == [["a", "added"], ["b", "added"], ["a", "changed"]]
    assert held_versions(simulation, "sp4") == {"a": (1, False), "b": (0, False)}
    assert all(held_versions(simulation, other) == {} for other in ("sp1", "sp2", "sp3"))


def received_by_peers(monkeypatch, kind: type) -> list:
    """Every message of ``kind`` the simulated peers receive from now on, in order."""
    messages: list = []
    received = Simulation._peer_receives

    def recording(self, pending, message):  # type: ignore[no-untyped-def]
        if isinstance(message, kind):
            messages.append(message)
        received(self, pending, message)

    monkeypatch.setattr(Simulation, "_peer_receives", recording)
    return messages


def test_a_peer_is_told_of_other_live_super_peers_where_it_may_go(monkeypatch):
    """``Welcome.alternates``: the access point names its neighbours in the cube first, then
    other live super-peers, at most four, itself and any that left never: where the peer goes
    when it cannot reach its access point (``peer.client``), which may have left the cube
    meanwhile without a word to it (a chaos run's peer knocked for 170 s at an address gone)."""
    welcomes = received_by_peers(monkeypatch, m.Welcome)
    simulation = Simulation(8)
    simulation.apply({"op": "join", "peer": "p", "superpeer": 0})
    neighbours = sorted(simulation.nodes["sp0"].core.view.neighbours())
    named = welcomes[-1].alternates
    assert named[:3] == tuple(address_of(n) for n in neighbours) and len(set(named)) == 4
    assert address_of("sp0") not in named
    simulation.apply({"op": "superpeer_leave", "superpeer": simulation.ids.index(neighbours[0])})
    simulation.apply({"op": "detach", "peer": "p"})
    simulation.apply({"op": "attach", "peer": "p"})
    assert len(welcomes) == 2 and address_of(neighbours[0]) not in welcomes[-1].alternates


def test_an_attached_peer_is_told_again_in_each_clock_where_it_may_go(monkeypatch):
    """``Clock.alternates``: the cube changes while the peer stays attached (a neighbour of its
    access point leaves): the next ``Clock`` names the super-peers as they are now, not as its
    ``Welcome`` did (a chaos run, stop 79, seed 795: every super-peer a peer attached for 150 s
    had been told of was gone when its access point left)."""
    clocks = received_by_peers(monkeypatch, m.Clock)
    simulation = Simulation(8)
    simulation.apply({"op": "join", "peer": "p", "superpeer": 0})
    node = simulation.nodes["sp0"]
    neighbours = sorted(node.core.view.neighbours())
    simulation.apply({"op": "wait", "seconds": node.config.clock_sample_seconds + 1})
    assert clocks and clocks[-1].alternates == node.alternates()
    assert address_of(neighbours[0]) in clocks[-1].alternates
    simulation.apply({"op": "superpeer_leave", "superpeer": simulation.ids.index(neighbours[0])})
    told = len(clocks)
    simulation.apply({"op": "wait", "seconds": node.config.clock_sample_seconds + 1})
    assert len(clocks) > told and address_of(neighbours[0]) not in clocks[-1].alternates


@pytest.mark.parametrize("search", [False, True])
def test_only_a_holder_of_the_previous_access_points_state_answers_a_search(search):
    """``Handover.search``: asked because the peer's previous access point is silent, a
    super-peer that keeps an older copy of the peer (it was attached there before, and that
    one never handed it over) does not hand it over; asked directly, as the previous one or
    its successor, it would (the peer moved on since it was last there). Its acceptance would
    end the asker's request, and a lost answer of the real holder would not be asked for
    again."""
    simulation = Simulation(4)
    for op in (
        {"op": "join", "peer": "p", "superpeer": 2},
        {"op": "subscribe", "peer": "p", "id": "s1", "query": QUERY},
        {"op": "detach", "peer": "p"},
    ):
        simulation.apply(op)
    simulation.run_until_quiet()
    handover = m.Handover(
        request="sp3:p:1",
        peer="p",
        moved_at=simulation.now + 200,
        previous="sp1",
        superpeer="sp3",
        address="sp3.sim:7400",
        since=simulation.now + 100,  # the peer was at sp1 after it was last at sp2
        signature=b"",
        search=search,
    )
    refusal = simulation.nodes["sp2"]._check_handover("sp3", handover)
    assert refusal == ("the peer is unknown here" if search else None)
