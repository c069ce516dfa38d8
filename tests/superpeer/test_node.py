"""``SuperPeerNode`` rules that need no network around them: fed by hand, time passed in."""

import dataclasses
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
import wire
from crypto.identifiers import public_identifier
from hypercup import JoinRefused, JoinRequest, JoinWalk, LeaveWalk, Send
from superpeer._node_base import AskedCatchUp, PlannedCatchUp
from superpeer.access import AccessState
from superpeer.actions import (
    CloseConnection,
    Forgotten,
    ToConnection,
    ToSuperPeer,
    in_runtime_order,
)
from superpeer.node import NodeConfig, SuperPeerNode
from superpeer.sim import Simulation
from superpeer.store import MemoryStore
from wire import messages as m
from wire.framing import Received

CONFIG = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0)
CONTACTS = [("sp0", "sp0.test:7400"), ("sp1", "sp1.test:7400")]


def sent(outputs: list) -> list[tuple[str, str]]:
    return [(o.node, type(o.message).__name__) for o in outputs if isinstance(o, ToSuperPeer)]


def test_a_join_through_a_silent_member_goes_through_another_as_a_new_incarnation():
    node = SuperPeerNode("sp9", "sp9.test:7400", MemoryStore(), CONFIG)
    out = node.start(0.0, [("sp0", "sp0.test:7400"), ("sp1", "sp1.test:7400")])
    assert sent(out) == [("sp0", JoinRequest.__name__)]
    first = node.incarnation
    assert node.next_deadline() <= CONFIG.failure_seconds
    assert sent(node.timer(1.9)) == [], "not silent for failure_seconds yet"
    out = node.timer(2.0)
    assert Forgotten("sp0", drain=False) in out, "what was queued for sp0 is dropped"
    assert sent(out) == [("sp1", JoinRequest.__name__)]
    assert node.incarnation > first, "a place sp0 gave after all is repaired as a restart's"
    node.superpeer_heard("sp1", 3.0)
    assert sent(node.timer(4.9)) == [], "a member that acknowledges is waited for"
    assert sent(node.timer(5.0)) == [("sp0", JoinRequest.__name__)]


def test_a_contact_that_restarts_before_it_answers_is_given_up():
    """After a cut longer than the watchdog every member of a side rejoins: a contact asked to
    admit this node rejoined as a new incarnation before it answered, and the request went
    with the old one. The new one asks this node to join in turn every second, so the contact
    never seemed silent, and the node waited ``wedged_seconds`` (16 super-peers, 60-s cut: no
    cube for 30 s after the heal). Heard of as a new incarnation and silent
    ``failure_seconds`` more (it may have been a member that passed the request on, whose
    ``Welcome`` comes from another), it is given up: the next contact is asked, as a new
    incarnation."""
    node, first = joining_through_sp0()
    node.superpeer_hello("sp0", 2, "sp0.test:7400", 0.5)  # it rejoined
    assert sent(node.timer(0.5)) == []
    assert node.next_deadline() == pytest.approx(0.5 + CONFIG.failure_seconds)
    node.superpeer_heard("sp0", 1.0)  # the new one talks all the same
    assert sent(node.timer(0.5 + CONFIG.failure_seconds - 0.01)) == [], "a Welcome may come"
    out = node.timer(0.5 + CONFIG.failure_seconds)
    assert sent(out) == [("sp1", JoinRequest.__name__)]
    assert node.incarnation > first, "a place the old one passed it on for is repaired"


def test_a_contact_that_said_it_was_no_member_is_given_up_as_the_same_incarnation():
    """A contact that refused as a non-member earlier in the round passed nothing on: given up
    ``rejoin_seconds`` after it restarts, the next contact is asked by the same incarnation. (A
    new incarnation each time made every node that had asked this one give it up in turn:
    after a 60-s cut at 32 super-peers, hundreds of new incarnations and no cube.)"""
    node, first = joining_through_sp0()
    assert refused_by(node, "sp0", 1, 0.2) == [("sp1", JoinRequest.__name__)]
    assert refused_by(node, "sp1", 1, 0.3) == [], "the round is over"
    assert sent(node.timer(1.3)) == [("sp0", JoinRequest.__name__)]
    node.superpeer_hello("sp0", 2, "sp0.test:7400", 1.4)  # it rejoined
    out = node.timer(1.4 + CONFIG.rejoin_seconds)
    assert sent(out) == [("sp1", JoinRequest.__name__)]
    assert node.incarnation == first
    assert not [o for o in out if isinstance(o, Forgotten)], "its links stay"


def test_a_contact_that_answers_as_a_new_incarnation_is_not_given_up():
    """The frame that says a contact is a new incarnation is often its answer: a refusal in
    time keeps the round going as any refusal does (given up at once, each node asking again
    as a new incarnation made the next node's contact new, for ever)."""
    node, first = joining_through_sp0()
    assert refused_by(node, "sp0", 2, 0.2) == [("sp1", JoinRequest.__name__)]
    assert node.incarnation == first


def joining_through_sp0() -> tuple[SuperPeerNode, int]:
    """A node joining through sp0 (incarnation 1), sp1 its other contact; its incarnation."""
    node = SuperPeerNode("sp9", "sp9.test:7400", MemoryStore(), CONFIG)
    assert sent(node.start(0.0, CONTACTS)) == [("sp0", JoinRequest.__name__)]
    node.superpeer_welcomed("sp0", 1, 0.1)
    return node, node.incarnation


def refused_by(node: SuperPeerNode, contact: str, incarnation: int, at: float) -> list:
    """``contact`` (as ``incarnation``) says it is no member: what the node sends next."""
    refusal = JoinRefused(reason=f"{contact} is not a member (joining)", member=False)
    node.superpeer_message(contact, incarnation, Received(refusal, contact), at)
    return sent(node.timer(at))


def test_a_refusal_from_outside_the_cube_sends_the_next_request_at_once_once_a_round():
    """After a cut longer than the watchdog every member of a side has rejoined: a contact that
    is no member says so at once, and waiting ``rejoin_seconds`` before the next one made a
    node with 15 contacts take 15 s to learn that nobody it knows is in a cube. The next
    contact is asked at once, each once a round; a member's refusal (busy, or still repairing
    this node's old place) is still waited on."""
    contacts = [(f"sp{k}", f"sp{k}.test:7400") for k in range(3)]
    node = SuperPeerNode("sp9", "sp9.test:7400", MemoryStore(), CONFIG)
    assert sent(node.start(0.0, contacts)) == [("sp0", JoinRequest.__name__)]

    def refuse(contact: str, now: float, *, member: bool = False) -> list:
        refusal = JoinRefused(reason=f"{contact} is not a member (idle)", member=member)
        node.superpeer_message(contact, 1, Received(refusal, contact), now)
        return sent(node.timer(now))

    assert refuse("sp0", 0.1) == [("sp1", JoinRequest.__name__)]
    assert refuse("sp1", 0.2) == [("sp2", JoinRequest.__name__)]
    assert refuse("sp2", 0.3) == [], "the round is over: each contact was asked once"
    assert node.next_deadline() == pytest.approx(0.3 + CONFIG.rejoin_seconds)
    assert sent(node.timer(1.3)) == [("sp0", JoinRequest.__name__)]
    assert refuse("sp0", 1.4) == [("sp1", JoinRequest.__name__)], "a new round"
    assert refuse("sp1", 1.5, member=True) == [], "a member that refuses is waited on"
    assert sent(node.timer(2.5)) == [("sp2", JoinRequest.__name__)]
    node._unusable["sp1"] = 100.0  # left aside (``_could_not_stay``): a round skips it
    assert refuse("sp2", 2.6) == [("sp0", JoinRequest.__name__)]
    assert refuse("sp0", 2.7) == [], "a round of the contacts it may ask: no loop at once"
    assert sent(node.timer(3.7)) == [("sp2", JoinRequest.__name__)]


def test_a_new_incarnation_keeps_what_was_sent_to_it_after_the_old_one_departed():
    """What a member queues for a super-peer after hearing that it departed is for its next
    incarnation (the ``Welcome`` of its rejoin): that incarnation's ``Hello`` must not drop it,
    while a restart nobody had noticed yet drops what was queued for the dead one."""
    node = SuperPeerNode("sp0", "sp0.test:7400", MemoryStore(), CONFIG)
    node.start(0.0, [])
    assert Forgotten("sp5", drain=False) not in node.superpeer_hello("sp5", 1, "a5", 1.0)
    assert Forgotten("sp5", drain=False) in node.superpeer_hello("sp5", 2, "a5", 2.0)
    departed = m.Departed(
        origin="sp3", origin_position=0, node="sp5", incarnation=2, positions=(1,),
        failed=True, since=2.0,
    )  # fmt: skip
    out = node.superpeer_message("sp3", 1, Received(departed, "sp3#1"), 3.0)
    assert Forgotten("sp5") in out, "what was queued for the departed one drains, bounded"
    assert Forgotten("sp5", drain=False) not in node.superpeer_hello("sp5", 3, "a5", 4.0)
    assert Forgotten("sp5", drain=False) in node.superpeer_hello("sp5", 4, "a5", 5.0)


def test_a_super_peer_told_that_it_failed_rejoins_as_a_new_incarnation():
    """A paused super-peer whose place was repaired may hear of its own departure down a tree
    that still ran through it (and from nobody else, when no neighbour knew its incarnation)."""
    node = SuperPeerNode("sp0", "sp0.test:7400", MemoryStore(), CONFIG)
    node.start(0.0, [])
    node.superpeer_hello("sp1", 1, "sp1.test:7400", 0.5)
    stale = m.Departed(
        origin="sp3", origin_position=0, node="sp0", incarnation=node.incarnation - 1,
        positions=(0,), failed=True, since=0.0,
    )  # fmt: skip
    node.superpeer_message("sp1", 1, Received(stale, "sp1#1"), 1.0)
    assert node.statistics.rejoins == 0, "an older incarnation's departure is not this one's"
    current = dataclasses.replace(stale, incarnation=node.incarnation)
    before = node.incarnation
    out = node.superpeer_message("sp1", 1, Received(current, "sp1#2"), 2.0)
    assert node.statistics.rejoins == 1 and node.incarnation > before
    assert sent(out) == [("sp1", JoinRequest.__name__)]


def test_a_super_peer_stalled_longer_than_the_failure_timeout_rejoins():
    """Paused (SIGSTOP) for longer than its neighbours wait, it has most likely been replaced;
    it does not wait for an eviction that may never reach it."""
    node = Simulation(2).nodes["sp0"]
    start = node.next_deadline()
    node.timer(start)
    due = node.next_deadline()
    node.timer(due + CONFIG.failure_seconds / 2 + 0.1)
    assert node.statistics.rejoins == 0, "a short stall only gives the neighbours a fresh chance"
    before = node.incarnation
    out = node.timer(start + 100.0)
    assert node.statistics.rejoins == 1 and node.incarnation > before
    assert sent(out) == [("sp1", JoinRequest.__name__)], "it joins again through its neighbour"
    node.timer(node.next_deadline())
    assert node.statistics.rejoins == 1, "and the stall is not counted twice"


def test_a_super_peer_alone_in_its_cube_stays_after_a_stall():
    """Nobody could have replaced it, and a rejoin would look for members that are not there
    (a simulated super-peer alone after the others failed waited for them for good)."""
    node = SuperPeerNode("sp0", "sp0.test:7400", MemoryStore(), CONFIG)
    node.start(0.0, [])
    node.timer(0.0)
    node.timer(100.0)
    assert node.statistics.rejoins == 0 and node.core is not None


def test_a_crash_right_after_joining_still_catches_up_on_restart():
    """``alive_at`` (where a restart's catch-up starts) is written when the node becomes a
    member, not only at the first housekeeping ``housekeeping_seconds`` later: a super-peer
    killed in between restarted without asking for what its peers missed."""
    store = MemoryStore()
    node = SuperPeerNode("sp0", "sp0.test:7400", store, CONFIG)
    node.start(10.0, [])  # a member at once (a new cube); killed before any timer ran
    store.set_subscription("peer", "s1", b"", made=11.0)  # a peer of ours subscribed
    assert store.local_peers() == ["peer"]
    restarted = SuperPeerNode("sp0", "sp0.test:7400", store, CONFIG)
    restarted.start(20.0, [("sp1", "sp1.test:7400")])
    # the hybrid reading when it became a member (its wall time then, and a tick)
    assert restarted._restored_since == pytest.approx(10.0 - CONFIG.catchup_margin_seconds)


def test_what_a_step_sends_a_departed_node_goes_before_its_link_is_forgotten(monkeypatch):
    """The member that takes a leaver's place answers it (``Released``) in the step that
    forgets it. Carried out in the order given, the daemon dropped the leaver's link and then
    opened a new one for the answer, which nothing ended: the leaver was gone, and a frame
    stayed unacknowledged for ever (``deploy.chaos``, seed 5). A runtime carries draining
    ``Forgotten`` s out last (``in_runtime_order``)."""
    steps: list[list] = []
    execute = Simulation._execute

    def recording(self, node_id, outputs):
        steps.append(outputs)
        return execute(self, node_id, outputs)

    monkeypatch.setattr(Simulation, "_execute", recording)
    simulation = Simulation(4)
    simulation.apply({"op": "superpeer_leave", "superpeer": 3})
    [step] = [s for s in steps if Forgotten("sp3") in s and ("sp3", "Released") in sent(s)]
    ordered = in_runtime_order(step)
    assert ordered.index(Forgotten("sp3")) > max(
        k for k, o in enumerate(ordered) if isinstance(o, ToSuperPeer) and o.node == "sp3"
    )
    assert sorted(map(repr, ordered)) == sorted(map(repr, step)), "nothing lost or added"


def test_an_adopted_peer_keeps_its_subscriptions_expiry_and_on_change():
    """A super-peer that leaves hands its detached peer's subscriptions over as it kept them:
    the adopter restores their expiry and ``--on change`` (before, only the queries went, and
    an adopted subscriber stopped hearing of extensions it had asked for)."""
    simulation = Simulation(4)
    ops = [
        {"op": "join", "peer": "p", "superpeer": 1},
        {"op": "subscribe", "peer": "p", "id": "s1", "query": "X : t(X, dc:title, T)",
         "on": "change", "expires": 3600},
        {"op": "detach", "peer": "p"},
        {"op": "superpeer_leave", "superpeer": 1},
    ]  # fmt: skip
    for op in ops:
        simulation.apply(op)
    assert simulation.errors == []
    [adopter] = [n for n in simulation.nodes.values() if n.core is not None and "p" in n.core.peers]
    assert adopter.core.on_change("p", "s1")
    assert adopter.expiries.at("p", "s1") is not None


def test_an_adopted_subscription_keeps_the_time_it_was_made():
    """The leaver says when each subscription it hands over was made (``Subscribe.
    active_since``, hybrid time): the adopter owes a catch-up or a replay for it only from
    then. Without it the adopter held the subscription with no activation time, and
    ``_deliver`` counts such a subscription as owed from the start (when unsure, owed), so
    publications made long before it were delivered."""
    simulation = Simulation(4)
    ops = [
        {"op": "join", "peer": "p", "superpeer": 1},
        {"op": "wait", "seconds": 30},
        {"op": "subscribe", "peer": "p", "id": "s1", "query": "X : t(X, dc:title, T)"},
        {"op": "detach", "peer": "p"},
    ]
    for op in ops:
        simulation.apply(op)
    made = simulation.nodes[simulation.ids[1]]._subscribed_at["p"]["s1"]
    simulation.apply({"op": "superpeer_leave", "superpeer": 1})
    assert simulation.errors == []
    [adopter] = [n for n in simulation.nodes.values() if n.core is not None and "p" in n.core.peers]
    assert adopter._subscribed_at["p"]["s1"] == made
    store = simulation.stores[adopter.node_id]
    assert store.local_state("p").subscribed_at == {"s1": made}


def test_a_peer_forgotten_while_the_join_was_refused_is_not_restored():
    """Seen on daemons in network namespaces (stop 44): a killed super-peer, restarted while a
    partition held up the repair of its old incarnation, was refused for two minutes. Its
    subscriber moved away meanwhile; it handed the subscriber over and forgot it. The poset it
    had prepared before its first join request still held the subscriber's subscriptions, so
    the join brought them back with no activation time, and a catch-up then delivered
    publications made up to 160 s before them. The join now restores from the store as it is
    when the store changed since the poset was prepared."""
    simulation = subscribed(Simulation(4), publisher_at=0, reader_at=1)
    sp1 = simulation.ids[1]
    simulation.apply({"op": "superpeer_fail", "superpeer": 1})
    store = simulation.stores[sp1]
    assert store.local_peers() == ["reader"]  # it died holding the reader
    simulation._start(sp1)  # restarted: its poset is prepared before its join request leaves
    assert simulation.nodes[sp1]._prepared is not None
    store.forget_local("reader")  # handed over meanwhile, as ``_forget_moved`` does
    simulation.run_until_quiet()
    core = simulation.nodes[sp1].core
    assert core is not None and core.subscriptions_of("reader") == {}
    assert not [node for node in core.poset if any(s.name == "reader" for s in node.sources)]


def test_a_late_notification_for_a_withdrawn_subscription_counts_from_when_it_was_made():
    """Found by the seed-11 chaos plan (stop 27): a publication made 5.1 s before a
    subscription, replayed by its origin after a pause, reached the subscriber's access point
    after the peer had withdrawn that subscription. Routing hands a late notification to the
    subscriptions retracted after it was published; the access point's rule (nothing
    published before a subscription, less the clocks' margin) looked up when the subscription
    was made, found nothing (withdrawn), and delivered it."""
    document = '<http://example.org/doc1> <http://purl.org/dc/elements/1.1/subject> "x" .\n'
    simulation = Simulation(2, op_interval=0.1)
    ops = [
        {"op": "join", "peer": "publisher", "superpeer": 1},
        {"op": "join", "peer": "reader", "superpeer": 0},
        {"op": "advertise", "peer": "publisher", "schemas": ["dc"]},
        {"op": "publish", "peer": "publisher", "id": "n1", "format": "nt", "data": document},
        {"op": "wait", "seconds": CONFIG.catchup_margin_seconds + 1.0},
        {"op": "subscribe", "peer": "reader", "id": "s", "query": ': t(?s, dc:subject, "x")'},
        {"op": "unsubscribe", "peer": "reader", "id": "s"},
    ]
    for op in ops:
        simulation.apply(op)
    origin = simulation.nodes["sp1"]
    [logged] = [wire.decode(data)[0] for data in origin.store.logged_since(0.0)]
    late = dataclasses.replace(logged, replayed=True, hops=1)
    reader = simulation.nodes["sp0"]
    now = simulation.now + 0.5
    out = reader.superpeer_message("sp1", origin.incarnation, Received(late, "sp1#99"), now)
    assert not [o for o in out if isinstance(getattr(o, "message", None), m.Notify)]
    assert simulation.kept("reader") == set()


def test_a_join_whose_welcome_was_lost_is_asked_again_however_lively_the_contact():
    """Found by the seed-11 chaos plan (stop 27): members already talked to a rejoining
    super-peer as their neighbour, its contact among them, but its ``Welcome`` had been dropped
    (a link that took it for a message to an older incarnation). The contact was never silent,
    so the join was never abandoned, and the node waited for ever. A join unanswered for
    ``wedged_seconds`` is asked again, as a new incarnation."""
    node = SuperPeerNode("sp9", "sp9.test:7400", MemoryStore(), CONFIG)
    out = node.start(0.0, [("sp0", "sp0.test:7400"), ("sp1", "sp1.test:7400")])
    assert sent(out) == [("sp0", JoinRequest.__name__)]
    first = node.incarnation
    now = 0.0
    while now < CONFIG.wedged_seconds - 1.0:
        now += 1.0
        node.superpeer_heard("sp0", now)  # the contact talks to it all along
        assert sent(node.timer(now)) == []
    assert node.next_deadline() <= CONFIG.wedged_seconds
    out = node.timer(CONFIG.wedged_seconds)
    assert sent(out) == [("sp1", JoinRequest.__name__)]
    assert node.incarnation > first


def test_a_link_welcomed_by_a_newer_incarnation_is_a_restart_and_its_acks_no_sign_of_life():
    """A neighbour killed and started again behind a link that connected again by itself: the
    new process acknowledges the link's frames. Those acknowledgements kept the dead
    incarnation "alive" for 37 s (chaos seed 43), and the catch-up after its repair started
    from then. The link's ``Welcome`` names the new incarnation: the old one is failed at once,
    and what the new process acknowledges is not heard from the old one."""
    simulation = Simulation(8)
    node = simulation.nodes["sp0"]
    assert node.core is not None
    now = simulation.now
    for neighbour in sorted(node.core.view.neighbours()):
        other = simulation.nodes[neighbour]
        assert node.superpeer_welcomed(neighbour, other.incarnation, now) == []
    assert node.statistics.failures_detected == 0, "the same processes"
    # a neighbour whose repair is another's: sp0 only suspects it, and waits
    restarted = max(node.core.view.neighbours())
    out = node.superpeer_welcomed(restarted, simulation.nodes[restarted].incarnation + 1, now)
    assert Forgotten(restarted, drain=False) in out, "what was queued for the dead one is dropped"
    assert node.statistics.failures_detected == 1
    suspected = f"failed neighbours to repair: ['{restarted}']"
    assert suspected in node.waiting_for()
    node.superpeer_heard(restarted, now + 0.5)  # the new process acknowledges a frame
    assert suspected in node.waiting_for(), "not a sign of life of the incarnation that died"


def test_a_member_whose_every_neighbour_restarted_takes_the_cube_alone():
    """(Issue 33) the watchdog rejoined every member around this one: each of its neighbours
    is a later incarnation now, out of the cube, and every rejoining super-peer asked it in
    vain for the watchdog's 30 s more (16-super-peer chaos replays). Seen restarted, they
    count as out of the cube (``HypercupNode.neighbour_failed(restarted=True)``): it takes
    the cube alone at once, and they can join it."""
    simulation = Simulation(8)
    node = simulation.nodes["sp0"]
    assert node.core is not None
    neighbours = sorted(node.core.view.neighbours())
    assert len(neighbours) == 3, "a cube of 8: the neighbours hold 4 of its positions"
    now = simulation.now
    for n, neighbour in enumerate(neighbours):
        node.superpeer_welcomed(neighbour, simulation.nodes[neighbour].incarnation + 1, now)
        assert node.topology.view().dimension == (3 if n < len(neighbours) - 1 else 0)
    assert not node.topology.busy()


def test_a_node_not_started_answers_no_super_peer():
    """Before ``start`` a restarting process has no incarnation: whatever it answered would
    say incarnation 0, which members drop as replaced (a handover asked of it went back and
    forth 7,000 times). It takes nothing from other super-peers until it started; the daemon
    refuses their links meanwhile (``SuperPeerDaemon``)."""
    node = SuperPeerNode("sp0", "sp0.test:7400", MemoryStore(), CONFIG)
    handover = m.Handover(
        request="sp1:r1", peer="p1", moved_at=1.0, previous="sp0", superpeer="sp1",
        address="sp1.test:7400", since=1.0, signature=b"",
    )  # fmt: skip
    assert not node.started
    out = node.superpeer_message("sp1", 1, Received(handover, "sp1~1#1"), 1.0)
    assert not [o for o in out if isinstance(o, ToSuperPeer)]
    node.start(2.0, [])
    assert node.started and node.incarnation == 1


def test_a_withdrawal_told_again_after_a_move_gives_the_new_access_point_its_window():
    """Found by the skewed chaos plan (issue 39): a subscriber withdrew a subscription at an
    access point that failed before it caught up what the subscription was owed, then moved
    on; the next access point caught up for its current subscriptions only. The ``Ack`` of a
    withdrawal says when it was made; the peer tells it again after a move, with the window,
    and the new access point keeps it for its catch-up (``_withdrawn``) and acknowledges it."""
    simulation = subscribed(Simulation(2), publisher_at=1, reader_at=0)
    ops = [
        {"op": "unsubscribe", "peer": "reader", "id": "s"},
        {"op": "move", "peer": "reader", "superpeer": 1},
    ]
    for op in ops:
        simulation.apply(op)
    assert simulation.errors == []
    first, second = simulation.nodes["sp0"], simulation.nodes["sp1"]
    answers = simulation.peers["reader"].answers
    ack = next(a for a in answers if getattr(a, "request", "") == "unsubscribe s")
    assert not [a for a in answers if isinstance(a, m.Refused)]
    assert ack.withdrawn_at == first._unsubscribed_at[("reader", "s")] > 0
    subscription, made, ended = second._withdrawn["reader"]["s"]
    assert (made, ended) == first._withdrawn["reader"]["s"][1:]
    assert subscription == first._withdrawn["reader"]["s"][0]


def _missed_at_sp0(simulation: Simulation) -> tuple[SuperPeerNode, float]:
    """The publisher publishes ``p`` for the detached reader, and sp0, its access point, is
    made to have missed it (as if a route was broken): sp0, and its hybrid time before."""
    first = simulation.nodes["sp0"]
    behind = first.clock.now(simulation._clock("sp0"))
    document = '<http://example.org/p> <http://purl.org/dc/elements/1.1/subject> "x" .\n'
    simulation.apply(
        {"op": "publish", "peer": "publisher", "id": "p", "format": "nt", "data": document}
    )
    kept, through = first.mail.handed_over("reader")
    assert [n.publication.id for n in kept] == ["p"]
    first.mail.drop("reader", through)
    return first, behind


def test_mail_a_previous_access_point_cannot_vouch_for_is_caught_up_by_the_next():
    """Found by the skewed chaos plan (issue 39): a peer moved away from an access point that
    had restarted and not yet caught up for it; that one handed over only the mail it kept, and
    the new access point, its handover accepted, asked the origins for nothing. Now the
    ``HandoverDone`` says from when its mail may lack what the peer was owed
    (``unvouched_since``: a catch-up covering the peer still to come), and the new access point
    catches up from the origins from then."""
    simulation = subscribed(Simulation(2), publisher_at=1, reader_at=0)
    simulation.apply({"op": "detach", "peer": "reader"})
    first, behind = _missed_at_sp0(simulation)
    # the catch-up that would bring it is planned, not asked yet (as after a restart)
    first._catchups.append(PlannedCatchUp(simulation.now + 1.0, behind, None, None))
    simulation.apply({"op": "move", "peer": "reader", "superpeer": 1})
    simulation.apply({"op": "attach", "peer": "reader"})
    assert simulation.errors == []
    assert first.statistics.handovers_out == 1
    assert simulation.deliveries()["reader"] == ["p"]


def _owed_by_an_unanswered_catchup() -> Simulation:
    """The reader, detached from sp0, is owed a publication that never reached sp0 (a route
    was broken); sp0 has asked a catch-up for it, whose answer is still on its way. sp1 has a
    subscriber of its own that covers the reader's: its subscription placed there sends no
    route with a replay (``Forward.since``), and only a catch-up can bring the publication."""
    simulation = subscribed(Simulation(4), publisher_at=3, reader_at=0)
    for op in [
        {"op": "join", "peer": "other", "superpeer": 1},
        {"op": "subscribe", "peer": "other", "id": "s", "query": ': t(?s, dc:subject, "x")'},
        {"op": "detach", "peer": "reader"},
    ]:
        simulation.apply(op)
    first, behind = _missed_at_sp0(simulation)
    simulation.apply({"op": "wait", "seconds": 60.0})  # beyond every margin
    assert first.core is not None
    entries = tuple(
        ("reader", sid, subscription, behind, float("inf"))
        for sid, subscription in sorted(first.core.subscriptions_of("reader").items())
    )
    first._unanswered["asked"] = AskedCatchUp(
        target="sp1",
        origin="",
        entries=entries,
        waiting={"reader"},
        asked_at=simulation.now,
        due=simulation.now + 3600.0,
    )
    return simulation


def test_a_catchup_still_unanswered_when_the_peer_moves_on_is_asked_by_the_next_access_point():
    """Found by the chaos harness (seed 751): a peer's access point had asked the origins for
    what the peer missed and was still waiting for the answer when the peer moved on; it
    handed over its mail saying it vouched for all of it, then stopped before the answer came
    (it was leaving), and the peer lost 24 notifications. An answer still to come is not
    vouched for (``_unvouched_since``): the next access point asks the origins itself."""
    simulation = _owed_by_an_unanswered_catchup()
    simulation.apply({"op": "move", "peer": "reader", "superpeer": 1})
    assert simulation.nodes["sp0"].statistics.handovers_out == 1
    simulation.apply({"op": "superpeer_fail", "superpeer": 0})  # the answer comes to nobody
    simulation.apply({"op": "attach", "peer": "reader"})
    assert simulation.errors == []
    assert simulation.deliveries() == {"publisher": [], "reader": ["p"], "other": ["p"]}


def test_a_leaver_tells_its_adopter_from_when_it_cannot_vouch_for_a_peers_mail():
    """The same for a leaver: a catch-up it asked for a peer it hands over is answered to a
    super-peer that is gone. ``Adopt.unvouched_since`` says from when, and the adopter's
    catch-up starts there, not at the adoption."""
    simulation = _owed_by_an_unanswered_catchup()
    simulation.apply({"op": "superpeer_leave", "superpeer": 0})
    simulation.apply({"op": "attach", "peer": "reader"})
    assert simulation.errors == []
    assert simulation.deliveries()["reader"] == ["p"]


def test_a_peer_arriving_at_the_successor_its_adoption_never_reached_is_caught_up_for():
    """From the chaos harness (seed 741): a super-peer left naming as its successor one that
    was down (``left_unacknowledged``); that one came back, learnt it was the successor, and
    took the leaver's peers as they arrived, asking nobody for their handover ("the peer's
    state came here with an adoption"), and nobody for what they had missed. The adoption never
    came: the node catches up from the peer's move statement, as for a handover unanswered."""
    simulation = subscribed(Simulation(3), publisher_at=2, reader_at=1)
    for op in [
        {"op": "join", "peer": "other", "superpeer": 0},  # covers the reader's at sp0: no replay
        {"op": "subscribe", "peer": "other", "id": "s", "query": ': t(?s, dc:subject, "x")'},
        {"op": "detach", "peer": "reader"},
        {"op": "superpeer_fail", "superpeer": 1},
    ]:
        simulation.apply(op)
    document = '<http://example.org/p> <http://purl.org/dc/elements/1.1/subject> "x" .\n'
    simulation.apply(
        {"op": "publish", "peer": "publisher", "id": "p", "format": "nt", "data": document}
    )
    successor = simulation.nodes["sp0"]
    successor.successors["sp1"] = "sp0"  # as its ``Departed`` said; its ``Adopt`` was lost
    simulation.apply({"op": "move", "peer": "reader", "superpeer": 0})
    simulation.apply({"op": "attach", "peer": "reader"})
    assert simulation.errors == []
    assert successor.statistics.handovers_in == 1
    assert simulation.deliveries() == {"publisher": [], "reader": ["p"], "other": ["p"]}


def test_a_withdrawal_window_outlives_a_restart_of_its_access_point():
    """A withdrawn subscription's window (what a catch-up still owes it for the time it stood) is
    kept in the store: an access point restarted before its catch-up still asks for it."""
    simulation = subscribed(Simulation(2), publisher_at=1, reader_at=0)
    ops = [
        {"op": "unsubscribe", "peer": "reader", "id": "s"},
    ]
    for op in ops:
        simulation.apply(op)
    before = simulation.nodes["sp0"]._withdrawn["reader"]["s"]
    simulation.apply({"op": "superpeer_fail", "superpeer": 0})
    simulation.apply({"op": "superpeer_restart", "superpeer": 0})
    assert simulation.errors == []
    restarted = simulation.nodes["sp0"]
    assert restarted is not None and restarted._withdrawn["reader"]["s"] == before


def test_a_peer_adopted_back_from_the_access_point_it_moved_to_keeps_its_mail():
    """Found by the ten-minute chaos run with skews (issue 39): a peer moved from sp0 to sp1
    and went offline; sp1 kept its notifications, then left the cube and its peers were
    adopted by sp0. sp0 still held the forwarding address toward sp1 from the move, and sent
    the adopted mail after the peer, to the super-peer that had just left: eleven
    notifications dropped. An adoption brings the peer's state here: the forwarding address
    goes."""
    simulation = Simulation(2)
    document = '<http://example.org/p> <http://purl.org/dc/elements/1.1/subject> "x" .\n'
    ops = [
        {"op": "join", "peer": "publisher", "superpeer": 0},
        {"op": "join", "peer": "reader", "superpeer": 0},
        {"op": "advertise", "peer": "publisher", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "reader", "id": "s", "query": ': t(?s, dc:subject, "x")'},
        {"op": "move", "peer": "reader", "superpeer": 1},
        {"op": "detach", "peer": "reader"},
        {"op": "publish", "peer": "publisher", "id": "p", "format": "nt", "data": document},
        {"op": "superpeer_leave", "superpeer": 1},
        {"op": "attach", "peer": "reader"},
    ]
    for op in ops:
        simulation.apply(op)
    assert simulation.errors == []
    assert "reader" not in simulation.nodes["sp0"]._moved_away
    assert simulation.deliveries()["reader"] == ["p"]


def test_a_node_that_joins_again_names_no_cube_it_was_told_of_before(monkeypatch):
    """The roots its neighbours reported were those of the cube it was in before a rejoin: a
    newcomer whose new tree parent had been its neighbour there named that cube as its own
    until the parent's next heartbeat, and a member of the cube it had just joined, probed
    with that identity, took the old cube (dissolved by then) for a stronger one and left it
    (16 super-peers, a 60-s cut: never one cube again)."""
    simulation = Simulation(4)
    node = simulation.nodes["sp3"]
    named: list = []
    joined = SuperPeerNode._joined

    def noting(self, now, out):
        joined(self, now, out)
        if self is node:
            named.append(self.cube_identity())

    monkeypatch.setattr(SuperPeerNode, "_joined", noting)
    node._reported_roots = dict.fromkeys(simulation.ids, "sp-gone")
    out: list = []
    node._rejoin("a test", simulation._clock("sp3"), out)
    simulation._execute("sp3", out)
    simulation.apply({"op": "wait", "seconds": 5})
    assert named and all(identity is None or identity[1] != "sp-gone" for identity in named)
    assert node.cube_identity() == simulation.nodes["sp0"].cube_identity()


def test_a_rejoin_asks_again_from_where_an_unanswered_catch_up_began():
    """Found on daemons in network namespaces (issue 33): a super-peer cut off by a partition
    rejoined after the heal and asked the origins for what it had missed; the members declared
    that incarnation failed and dropped its requests, and it rejoined again. The second
    catch-up began where it last heard from a neighbour (after the first rejoin), and what was
    published during the cut never came. A rejoin now begins no later than a catch-up asked and
    not answered whole, or one planned and not asked yet."""
    simulation = subscribed(Simulation(3), publisher_at=1, reader_at=0)
    ops = [
        {"op": "partition", "groups": [[0]]},
        {"op": "heal"},
        {"op": "wait", "seconds": 60},
    ]
    for op in ops:
        simulation.apply(op)
    assert simulation.errors == []
    assert all(not node._unanswered for node in simulation.nodes.values()), "all answered"
    node = simulation.nodes["sp0"]
    now = simulation._clock("sp0")
    cut_at = node.clock.now(now) - 30.0
    node._unanswered["lost"] = asked_of("sp1", node, cut_at, now)
    out: list = []
    node._rejoin("evicted", now, out)
    assert node._restored_since is not None and node._restored_since <= cut_at
    assert not node._unanswered


def test_a_rejoin_closes_the_peer_connections_still_identifying_too():
    # found by the chaos run on hosts of their own: a connection admitted (its Hello taken)
    # before its super-peer rejoined finished identifying afterwards, at a node without a core,
    # and met an assertion; a rejoin now says Goodbye to every peer connection, identified or
    # identifying. Not to one that has not said Hello: it may be a super-peer's, and a
    # Goodbye written while the runtime takes its link over met a second writer on the stream
    simulation = subscribed(Simulation(3), publisher_at=1, reader_at=0)
    node = simulation.nodes["sp0"]
    now = simulation._clock("sp0")
    node.fingerprint = public_identifier(
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    peer = public_identifier(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    identifying = node.accept("10.0.0.9:5000", now)
    silent = node.accept("10.0.0.10:5000", now)
    assert identifying is not None and silent is not None
    hello = m.Hello(
        role="peer", node_id=peer, address="", protocol=wire.PROTOCOL_VERSION, wall=now, clock=0.0
    )
    node.peer_message(identifying, hello, 100, "hello", now)
    assert node._connections[identifying].session.state is AccessState.IDENTIFYING
    identified = set(node._peer_connection.values())
    assert identified, "the reader is attached here"
    out: list = []
    node._rejoin("stalled", now, out)
    closed = {o.connection for o in out if isinstance(o, CloseConnection)}
    goodbyes = {o.connection for o in out if isinstance(o, ToConnection)}
    assert closed == goodbyes == identified | {identifying}
    assert set(node._connections) == {silent}
    # its Hello, when it comes, is refused: the node serves no peer while it joins
    refused = node.peer_message(silent, replace(hello, node_id="pk1-other"), 100, "hello", now)
    assert any(isinstance(o, CloseConnection) for o in refused)


def test_a_super_peer_found_again_after_it_was_lost_is_asked_for_what_it_published():
    """Found on daemons in network namespaces (issue 33): a super-peer cut off alone was
    declared failed by the other side, could not form a cube of its own, and came back after
    the heal by a plain rejoin (evicted), not by a merge: the other side never asked its log for
    what its peers had published during the cut. Whoever lost it asks it once it is found again
    (a neighbour's heartbeat, or one naming this cube), from when it was last heard from."""
    simulation = subscribed(Simulation(2), publisher_at=0, reader_at=1)
    node = simulation.nodes["sp1"]
    now = simulation._clock("sp1")
    last_heard = node.clock.now(now) - 20.0
    node._lose("sp0", last_heard, now)
    assert node._found("sp0", now) == last_heard - CONFIG.catchup_margin_seconds
    [planned] = node._catchups
    assert planned.origins == frozenset({"sp0"}) and planned.peers is None
    assert planned.since == last_heard - node.config.catchup_margin_seconds
    assert node._found("sp0", now) is None and len(node._catchups) == 1, "once"


def test_a_catch_up_from_an_origin_lost_again_before_it_answered_is_asked_again_whole():
    """On daemons in network namespaces (issue 33): the super-peer found again after a cut was
    asked for what it published, then lost again (its incarnation evicted) before it answered;
    found once more, it was asked only from when it was last heard from the second time."""
    simulation = subscribed(Simulation(2), publisher_at=0, reader_at=1)
    node = simulation.nodes["sp1"]
    now = simulation._clock("sp1")
    first = node.clock.now(now) - 30.0
    node._unanswered["asked"] = asked_of("sp0", node, first, now)
    node._lose("sp0", node.clock.now(now) - 2.0, now)
    assert node._found("sp0", now) == first


def asked_of(target: str, node: SuperPeerNode, since: float, now: float, of: str = ""):
    """A catch-up for the reader asked of ``target`` at ``now``, from ``since``, unanswered."""
    subscription = node.core.subscriptions_of("reader")["s"]
    return AskedCatchUp(
        target=target,
        origin=of,
        entries=(("reader", "s", subscription, since, float("inf")),),
        waiting={"reader"},
        asked_at=now,
        due=now + node.config.catchup_retry_seconds,
    )


def test_a_catch_up_whose_request_is_lost_is_asked_again(monkeypatch):
    """Found by a ten-minute chaos run on hosts (42 lost): a catch-up request sent to a
    super-peer in the middle of a rejoin never arrived, and nothing asked again. Here the
    notification and then the first catch-up request are lost on the way to the origin's
    neighbour; the request is asked again ``catchup_retry_seconds`` later, and what the reader
    missed arrives (the copies of the origin's log that would have served it are lost too)."""
    simulation = subscribed(Simulation(2), publisher_at=0, reader_at=1)
    node = simulation.nodes["sp1"]
    behind = node.clock.now(simulation._clock("sp1"))
    lost: list[str] = []
    arrive = SuperPeerNode._superpeer_message

    def lose_the_first(self, sender, incarnation, received, now):
        message = received.message
        if isinstance(message, m.LogCopy) or (
            isinstance(message, m.Notification | m.CatchUp) and type(message).KIND not in lost
        ):
            lost.append(type(message).KIND)
            return []
        return arrive(self, sender, incarnation, received, now)

    monkeypatch.setattr(SuperPeerNode, "_superpeer_message", lose_the_first)
    document = '<http://example.org/p> <http://purl.org/dc/elements/1.1/subject> "x" .\n'
    simulation.apply(
        {"op": "publish", "peer": "publisher", "id": "p", "format": "nt", "data": document}
    )
    node._catchups.append(PlannedCatchUp(simulation.now + 1.0, behind, None, None))
    simulation.apply({"op": "wait", "seconds": 2.0})
    assert {"sp.notification", "sp.catchup"} <= set(lost)
    assert simulation.deliveries()["reader"] == []
    simulation.apply({"op": "wait", "seconds": node.config.catchup_retry_seconds})
    assert node.statistics.catchups_asked_again == 1
    assert simulation.deliveries()["reader"] == ["p"]
    assert not node._unanswered, "answered whole: not asked a third time"


def test_a_catch_up_unanswered_by_an_origin_gone_since_is_asked_of_its_copies():
    """The origin asked died before it answered, and is gone (declared failed, not heard of
    since): the catch-up goes to every live super-peer, restricted to that origin's log
    (``CatchUp.origin``), as the copies of its log are wherever it sent them."""
    simulation = subscribed(Simulation(3), publisher_at=0, reader_at=2)
    node = simulation.nodes["sp2"]
    now = simulation._clock("sp2")
    since = node.clock.now(now) - 30.0
    node._unanswered["asked"] = asked_of("sp0", node, since, now)
    node.departed["sp0"] = node._newest_incarnation("sp0")
    later = now + node.config.catchup_retry_seconds
    out: list = []
    node._ask_again(later - 0.5, out)
    assert out == [], "not due yet"
    node._ask_again(later, out)
    asked = [o for o in out if isinstance(o, ToSuperPeer) and isinstance(o.message, m.CatchUp)]
    assert [(o.node, o.message.origin) for o in asked] == [("sp1", "sp0")]
    [again] = node._unanswered.values()
    assert (again.target, again.origin, again.tries) == ("sp1", "sp0", 2)
    assert again.due == later + 2 * node.config.catchup_retry_seconds, "twice as long"


def test_a_catch_up_unanswered_by_an_origin_that_left_is_asked_of_its_copies():
    """An origin that left the cube before it answered never will: it handed its log to its
    successor (``AdoptLog``). Asked again, the catch-up goes to the live super-peers, restricted
    to that origin's log, never to the one that left (a ten-minute chaos run lost 20 that an
    access point that left 3 s after a peer's arrival had published)."""
    simulation = subscribed(Simulation(3), publisher_at=0, reader_at=2)
    simulation.apply({"op": "superpeer_leave", "superpeer": 0})
    node = simulation.nodes["sp2"]
    assert node._has_left("sp0")
    now = simulation._clock("sp2")
    node._unanswered["asked"] = asked_of("sp0", node, node.clock.now(now) - 30.0, now)
    out: list = []
    node._ask_again(now + node.config.catchup_retry_seconds, out)
    asked = [o for o in out if isinstance(o, ToSuperPeer) and isinstance(o.message, m.CatchUp)]
    assert [(o.node, o.message.origin) for o in asked] == [("sp1", "sp0")]


def subscribed(simulation: Simulation, *, publisher_at: int, reader_at: int) -> Simulation:
    """A publisher advertising Dublin Core and a reader subscribed to a subject, each attached
    to the super-peer given: the start many of these rules are shown from."""
    for op in [
        {"op": "join", "peer": "publisher", "superpeer": publisher_at},
        {"op": "join", "peer": "reader", "superpeer": reader_at},
        {"op": "advertise", "peer": "publisher", "schemas": ["dc"]},
        {"op": "subscribe", "peer": "reader", "id": "s", "query": ': t(?s, dc:subject, "x")'},
    ]:
        simulation.apply(op)
    return simulation


def test_a_held_back_departure_that_breaks_the_topology_at_a_tick_makes_the_node_rejoin():
    """A tick gives up a wait (a mirror that never came back) and lets the messages held behind
    it go on; one that no longer fits breaks the topology protocol. That is the node's to
    answer as for any message that breaks it (it rejoins), not an error out of its timer."""
    simulation = Simulation(4)
    simulation.run_until_quiet()
    node = simulation.nodes["sp1"]
    topology = node.topology
    held = sorted(topology.view().positions)[0]
    topology._reclaiming = "sp3"  # a mirror on its way back, held up
    assert topology.epoch > 0
    topology._held_back.append(  # a leave's step of the cube before its last grow
        (
            "sp2",
            LeaveWalk(
                epoch=topology.epoch - 1,
                dimension=topology.view().dimension,
                leaver="gone",
                leaver_address="gone.sim:7400",
                leaver_positions=(held,),
                leaver_peers={},
                failed=False,
                phase="search",
                position=held,
                bit=-1,
            ),
        )
    )
    before = node.statistics.rejoins
    simulation._advance(simulation.now + 3 * node.config.failure_seconds)  # the second tick
    assert node.statistics.rejoins == before + 1


def test_a_neighbour_that_asks_to_join_is_failed_even_when_taken_for_its_new_process():
    """kill-pause at 16, seed 0: a member took a place with a departure walk's table, which
    named a neighbour repaired away meanwhile; the first frames it heard from that node came
    from its new process, which it took for the neighbour. It refused the new process's joins
    every second as "still a member here" and never declared the old one failed, until the
    watchdog. A neighbour that asks to join is a dead incarnation: failed at once, and the
    process that asks is not evicted for it (the ``Departed`` names an older incarnation)."""
    simulation = Simulation(4)
    node = simulation.nodes["sp0"]
    neighbour = sorted(node.core.view.neighbours())[0]
    asking = node.incarnations[neighbour] + 1
    # its table came with the place, and the first this node hears of the neighbour is from
    # its new process
    del node._neighbour_incarnations[neighbour]
    node.superpeer_hello(neighbour, asking, f"{neighbour}.sim:7400", simulation.now)
    assert node._neighbour_incarnations[neighbour] == asking
    assert neighbour not in node._suspected
    request = JoinRequest(address=f"{neighbour}.sim:7400", incarnation=0)
    node.superpeer_message(neighbour, asking, Received(request, "x#1"), simulation.now)
    assert neighbour in node._suspected
    assert node._neighbour_incarnations[neighbour] < asking
    node.superpeer_heard(neighbour, simulation.now + 0.1)  # the new process is no sign of life
    assert neighbour in node._suspected


def test_a_late_repeat_of_a_members_join_fails_nobody():
    """A walk for a neighbour whose process heartbeated here as a member is a late repeat of
    its join (it asked two contacts, and the other one made it a member): nobody is failed."""
    simulation = Simulation(4)
    node = simulation.nodes["sp0"]
    neighbour = sorted(node.core.view.neighbours())[0]
    incarnation = node._neighbour_incarnations[neighbour]
    held = tuple(sorted(node.topology.known_peers()[neighbour][1]))
    dimension, root = node.cube_identity()
    now = simulation._clock("sp0")
    beat = m.Heartbeat(wall=now, root=root, dimension=dimension, positions=held)
    node.superpeer_message(neighbour, incarnation, Received(beat, "h"), now)
    walk = JoinWalk(
        epoch=node.topology.epoch,
        newcomer=neighbour,
        newcomer_address=f"{neighbour}.sim:7400",
        newcomer_incarnation=incarnation,
        phase="route",
        position=min(node.topology.view().positions),
        bit=-1,
        admitted=False,
        anchor=None,
        anchor_address=None,
    )
    other = next(n for n in sorted(node.core.view.neighbours()) if n != neighbour)
    node.superpeer_message(other, node.incarnations[other], Received(walk, "w"), now + 0.1)
    assert neighbour not in node._suspected
    assert node._neighbour_incarnations[neighbour] == incarnation


def test_a_join_walk_names_its_anchors_process_and_the_members_it_reaches_learn_it():
    """The member that takes a walk reports to its anchor (``JoinDone``), which it may know
    only as a process from before a cut; the report, meant for that one, was dropped by the
    link, and the anchor held every grow back for ``STALE_TICKS`` (32 super-peers, a 60-s
    cut, seed 8: the joins of sixteen waited 15 s, and never became one cube). The anchor
    names its process in the walks it sends on (``JoinWalk.anchor_incarnation``), and a
    member it reaches knows that one from then on."""
    simulation = Simulation(4)
    node = simulation.nodes["sp0"]
    now = simulation._clock("sp0")
    walk = JoinWalk(
        epoch=node.topology.epoch,
        newcomer="sp9",
        newcomer_address="sp9.sim:7400",
        newcomer_incarnation=1,
        phase="route",
        position=min(node.topology.view().positions),
        bit=-1,
        admitted=True,
        anchor="sp0",
        anchor_address="sp0.sim:7400",
    )
    out: list = []
    node._topology([Send(to="sp1", address="sp1.sim:7400", message=walk)], now, out)
    (sent,) = [o.message for o in out if isinstance(o, ToSuperPeer)]
    assert sent.anchor_incarnation == node.incarnation
    member = simulation.nodes["sp1"]
    anchor = next(n for n in sorted(simulation.nodes) if n not in ("sp1", "sp0"))
    newer = member.incarnations[anchor] + 2
    sender = sorted(member.core.view.neighbours())[0]
    walk_on = replace(walk, anchor=anchor, anchor_address=f"{anchor}.sim:7400",
                      anchor_incarnation=newer)  # fmt: skip
    member.superpeer_message(sender, member.incarnations[sender], Received(walk_on, "w"), now)
    assert member.incarnations[anchor] == newer


def test_a_restarted_neighbour_heartbeating_in_its_old_place_is_the_neighbour_again():
    """Chaos, stop 52: a neighbour killed and restarted rejoined into the very position it had,
    while this node never saw its old incarnation's place change hands. Taken for a restart
    at every new link, it was declared failed and stayed "unrepaired" (its heartbeats, from a
    newer incarnation than the table's, were no sign of life) until the watchdog made this
    node rejoin, 60 s on: 15 of the run's 17 such rejoins. Heartbeating as a member of this
    cube at the positions the table gives it, it is the neighbour again."""
    simulation = Simulation(4)
    node = simulation.nodes["sp0"]
    neighbour = sorted(node.core.view.neighbours())[0]
    held = tuple(sorted(node.topology.known_peers()[neighbour][1]))
    newer = node.incarnations[neighbour] + 1
    now = simulation._clock("sp0")
    node.superpeer_hello(neighbour, newer, f"{neighbour}.sim:7400", now)
    assert neighbour in node._suspected  # taken for a restart
    dimension, root = node.cube_identity()
    elsewhere = m.Heartbeat(wall=now, root=root, dimension=dimension, positions=(held[0] ^ 1,))
    node.superpeer_message(neighbour, newer, Received(elsewhere, "h1"), now + 0.1)
    assert neighbour in node._suspected  # not where the table has it: still failed
    back = m.Heartbeat(wall=now, root=root, dimension=dimension, positions=held)
    node.superpeer_message(neighbour, newer, Received(back, "h2"), now + 0.2)
    assert neighbour not in node._suspected
    assert node._neighbour_incarnations[neighbour] == newer
    assert not node.topology.busy()
    node.superpeer_heard(neighbour, now + 0.3)  # its frames are signs of life again
    assert node._last_heard[neighbour] == now + 0.3


def test_a_catchup_answer_that_reaches_an_access_point_the_peer_left_keeps_the_time_rule():
    """Found by the chaos harness (seed 771: 6 unexpected notifications, none lost): an access
    point asked the origins for what a peer missed; the answer came after the peer moved on
    and was forwarded to the next access point as mail another access point kept, which is
    delivered however old. A catch-up answer names the subscriptions a publication matches
    from the start of the window asked for, not from when each was made: forwarded, it stays
    a catch-up answer, and the access point where the peer is keeps the rule (nothing
    published before a subscription was made is owed to it), and delivers what is owed."""
    simulation = subscribed(Simulation(2), publisher_at=1, reader_at=0)
    simulation.apply({"op": "detach", "peer": "reader"})
    first = simulation.nodes["sp0"]
    old_document = '<http://example.org/old> <http://purl.org/dc/elements/1.1/subject> "x" .\n'
    simulation.apply(
        {"op": "publish", "peer": "publisher", "id": "old", "format": "nt", "data": old_document}
    )
    kept, through = first.mail.handed_over("reader")
    [old] = kept
    first.mail.drop("reader", through)  # owed to "s": not what this test is about
    simulation.apply({"op": "wait", "seconds": 60.0})  # beyond every margin
    simulation.apply({"op": "attach", "peer": "reader"})
    query = ': t(?s, dc:subject, "x")'
    simulation.apply({"op": "subscribe", "peer": "reader", "id": "late", "query": query})
    simulation.apply({"op": "unsubscribe", "peer": "reader", "id": "s"})
    simulation.apply({"op": "move", "peer": "reader", "superpeer": 1})
    simulation.apply({"op": "wait", "seconds": 5.0})
    assert "reader" in first._moved_away
    second = simulation.nodes["sp1"]

    def publication(name: str) -> qel.Publication:
        document = f'<http://example.org/{name}> <http://purl.org/dc/elements/1.1/subject> "x" .\n'
        return qel.parse_publications(document, "nt", id=name)[0]

    answer = m.Mail(
        request="asked",
        purpose="catchup",
        peer="reader",
        notifications=(
            replace(old, publication=publication("older"), subscriptions=("late",)),
            replace(
                old,
                publication=publication("new"),
                subscriptions=("late",),
                published_at=second.clock.now(simulation._clock("sp1")),
            ),
        ),
        last=True,
    )
    out: list = []
    first._mail_in(answer, simulation._clock("sp0"), out)
    simulation._execute("sp0", out)
    simulation.run_until_quiet()
    assert simulation.errors == []
    reader = simulation.peers["reader"]
    assert reader.filtered == 0, "a notification for no subscription standing at its time"
    delivered = simulation.deliveries()["reader"]
    assert "older" not in delivered and "new" in delivered


MADE = st.dictionaries(
    st.sampled_from([f"s{k}" for k in range(8)]), st.floats(0.0, 30.0), min_size=6
)


@settings(max_examples=300, deadline=None)
@given(
    made=MADE,
    withdrawn=st.sets(st.sampled_from([f"s{k}" for k in range(8)]), max_size=3),
    named=st.lists(st.sampled_from([f"s{k}" for k in range(9)]), min_size=1, unique=True),
    published=st.floats(0.0, 40.0),
    kept=st.booleans(),
)
def test_the_one_pass_check_of_a_notifications_subscriptions_decides_as_each_one_would(
    made, withdrawn, named, published, kept
):
    """``_deliver``'s fast path (every subscription named made here, the peer's latest one
    before the publication less the margin: all stand) keeps exactly the subscriptions the
    rule asked of each one keeps (``_latest_made`` unknown: the one-by-one path)."""
    simulation = Simulation(1)
    simulation.apply({"op": "join", "peer": "reader", "superpeer": 0})
    node = simulation.nodes["sp0"]
    for sid, at in made.items():
        node._made_here("reader", sid, at)
    for sid in withdrawn:
        if sid in made:
            node._subscribed_at["reader"].pop(sid)
            node._unsubscribed_at[("reader", sid)] = made[sid] + 1.0
    (publication,) = qel.parse_publications(
        '<http://example.org/n1> <http://purl.org/dc/elements/1.1/title> "t" .',
        "nt",
        publisher="writer",
        id="n1",
    )
    notify = m.Notify(
        publication=publication,
        subscriptions=tuple(named),
        owner="writer",
        access_point="",
        origin="sp1",
        hops=1,
        published_at=published,
    )

    def delivered(fast: bool) -> list:
        taken: list = []
        node.mail.deliver = lambda peer, news, now: taken.append(news.subscriptions) or []
        latest = dict(node._latest_made)
        if not fast:
            node._latest_made.clear()
        node._deliver("reader", notify, simulation.now, [], kept=kept)
        node._latest_made.update(latest)
        return taken

    assert delivered(fast=True) == delivered(fast=False)


def test_withdrawals_are_forgotten_past_the_logs_horizon_however_many_ids_a_peer_used():
    """A peer making and withdrawing subscriptions under new ids: what the access point keeps
    of each withdrawal (its time, its window) goes once it is older than ``log_seconds`` (no
    catch-up reaches before that), so memory follows the withdrawals of the last hour, not
    every one since the daemon started."""
    simulation = subscribed(Simulation(1), publisher_at=0, reader_at=0)
    node = simulation.nodes["sp0"]
    query = ': t(?s, dc:subject, "x")'
    for number in range(30):
        simulation.apply(
            {"op": "subscribe", "peer": "reader", "id": f"old{number}", "query": query}
        )
        simulation.apply({"op": "unsubscribe", "peer": "reader", "id": f"old{number}"})
    assert len(node._unsubscribed_at) == 30 and len(node._withdrawn["reader"]) == 30
    simulation.apply({"op": "wait", "seconds": node.config.log_seconds / 2})
    simulation.apply({"op": "subscribe", "peer": "reader", "id": "new", "query": query})
    simulation.apply({"op": "unsubscribe", "peer": "reader", "id": "new"})
    simulation.apply({"op": "wait", "seconds": node.config.log_seconds / 2 + 60})
    assert simulation.errors == []
    assert list(node._unsubscribed_at) == [("reader", "new")]
    assert list(node._withdrawn["reader"]) == ["new"]
