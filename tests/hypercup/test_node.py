"""``HypercupNode`` as a state machine: outputs of single inputs, held-back messages, errors."""

import contextlib
from dataclasses import replace

import pytest

from hypercup import (
    Census,
    CensusReply,
    ChangeRequest,
    Grow,
    HypercupNode,
    JoinDone,
    Joined,
    JoinFailed,
    JoinRefused,
    JoinRequest,
    JoinWalk,
    LeaveWalk,
    Left,
    LocalProtocolError,
    Lookup,
    LookupReply,
    NeighbourUpdate,
    NodeState,
    Reclaim,
    Released,
    RemoteProtocolError,
    ReturnTop,
    Send,
    Shrink,
    TopologyChanged,
    UpdateAck,
    Welcome,
)
from hypercup._core import Admitted
from hypercup._departures import DEFERRED_TICKS
from hypercup._neighbourhood import KnowledgeError, Peer
from hypercup.events import Departed
from hypercup.node import STALE_TICKS
from hypercup.testing import Network, address_of


def node(name: str) -> HypercupNode:
    return HypercupNode(name, address_of(name))


def pair() -> tuple[HypercupNode, HypercupNode]:
    """``a`` created the cube and ``b`` joined it, messages delivered by hand."""
    a, b = node("a"), node("b")
    a.create()
    (request,) = b.join_via("a", address_of("a"))
    (welcome, _) = a.receive("b", request.message)
    b.receive("a", welcome.message)
    return a, b


def test_create_makes_a_cube_of_one() -> None:
    a = node("a")
    joined, changed = a.create()
    assert joined == Joined()
    assert isinstance(changed, TopologyChanged)
    assert changed.epoch == 0 and changed.view.dimension == 0
    assert changed.view.positions == {0} and dict(changed.view.table) == {}


def test_a_join_step_by_step() -> None:
    a, b = node("a"), node("b")
    a.create()
    (request,) = b.join_via("a", address_of("a"))
    assert request == Send(
        to="a", address=address_of("a"), message=JoinRequest(address="b.sim:4000")
    )
    assert b.state is NodeState.JOINING
    # a is alone (dimension 0, a full cube): it grows to dimension 1 and hands position 1 over.
    welcome, changed = a.receive("b", request.message)
    assert welcome.to == "b"
    assert welcome.message == Welcome(
        epoch=1, dimension=1, position=1, peers={"a": (address_of("a"), (0,))}
    )
    assert isinstance(changed, TopologyChanged)
    assert changed.view.positions == {0} and dict(changed.view.table) == {1: "b"}
    assert dict(changed.addresses) == {"b": address_of("b")}
    joined, changed = b.receive("a", welcome.message)
    assert joined == Joined()
    assert isinstance(changed, TopologyChanged)
    assert changed.view.positions == {1} and dict(changed.view.table) == {0: "a"}
    assert not a.busy() and not b.busy()


def test_a_newcomer_holds_messages_back_until_welcomed() -> None:
    a, b = node("a"), node("b")
    a.create()
    (request,) = b.join_via("a", address_of("a"))
    (welcome, _) = a.receive("b", request.message)
    early = NeighbourUpdate(
        epoch=1, holders={"a": (address_of("a"), (0,))}, relay=False, ack_id=None
    )
    assert b.receive("a", early) == []
    assert b.busy()
    outputs = b.receive("a", welcome.message)
    assert outputs[0] == Joined()
    assert not b.busy()


def test_messages_from_a_later_epoch_wait_for_the_change_of_dimension() -> None:
    _a, b = pair()
    later = NeighbourUpdate(
        epoch=2, holders={"a": (address_of("a"), (0, 2))}, relay=False, ack_id=None
    )
    assert b.receive("a", later) == []
    assert b.busy()
    grow = Grow(epoch=2, dimension=2, root=0)
    outputs = b.receive("a", grow)
    assert not b.busy()
    (changed,) = outputs
    assert isinstance(changed, TopologyChanged)
    assert changed.epoch == 2 and changed.view.positions == {1, 3}
    assert dict(changed.view.table) == {0: "a", 2: "a"}


def test_a_stale_message_breaks_the_node() -> None:
    _a, b = pair()
    stale = NeighbourUpdate(
        epoch=0, holders={"a": (address_of("a"), (0,))}, relay=False, ack_id=None
    )
    with pytest.raises(RemoteProtocolError, match="epoch 0 reached b in epoch 1"):
        b.receive("a", stale)
    assert b.state is NodeState.BROKEN
    with pytest.raises(LocalProtocolError, match="refuses further use"):
        b.leave()


def test_a_member_asking_to_join_again_is_refused_and_nothing_breaks():
    """A restarted super-peer asks to join while its old incarnation is still in the cube: it is
    told to come back later, and neither side breaks."""
    a, _ = pair()
    [send] = a.receive("b", JoinRequest(address=address_of("b")))
    assert isinstance(send.message, JoinRefused) and "still a member" in send.message.reason
    assert a.state is NodeState.MEMBER
    newcomer = HypercupNode("c", address_of("c"))
    newcomer.join_via("a", address_of("a"))
    [failed] = newcomer.receive("a", JoinRefused(reason="busy", member=True))
    assert isinstance(failed, JoinFailed) and failed.reason == "busy"
    assert newcomer.state is NodeState.IDLE
    assert newcomer.receive("a", JoinRefused(reason="late", member=True)) == []


@pytest.mark.parametrize("joining", [False, True])
def test_a_join_through_a_node_out_of_the_cube_is_refused_and_nothing_breaks(joining):
    """Two super-peers rejoining at once (both stalled on a loaded machine) picked each other as
    contact: the one between two attempts was broken by the other's ``JoinRequest`` ("reached
    sp0, which is idle"), rejoined, and broke the other in turn, again and again. A node out of
    the cube (idle, or joining itself) answers ``JoinRefused``; the asker tries another."""
    a = node("a")
    if joining:
        a.join_via("c", address_of("c"))
    [send] = a.receive("b", JoinRequest(address=address_of("b")))
    assert send.to == "b" and isinstance(send.message, JoinRefused)
    assert "not a member" in send.message.reason
    assert a.state is (NodeState.JOINING if joining else NodeState.IDLE)


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (UpdateAck(epoch=1, ack_id=9), "did not send"),
        (ReturnTop(epoch=1, column=1, leaver="x", peers={}), "does not hold next to us"),
        (Welcome(epoch=1, dimension=1, position=1, peers={}), "which is member"),
        (Grow(epoch=2, dimension=3, root=0), "Grow to dimension 3"),
    ],
)
def test_messages_the_protocol_does_not_allow(message, text: str) -> None:
    a, _ = pair()
    with pytest.raises(RemoteProtocolError, match=text) as raised:
        a.receive("b", message)
    assert raised.value.sender == "b"
    assert a.state is NodeState.BROKEN


def test_a_released_for_a_departure_given_up_is_ignored() -> None:
    """A ``Released`` answers a leave; it may arrive after the leaver was evicted meanwhile or
    gave a wedged leave up and joined again (held back behind its Welcome, it would reach a
    member): its old positions have their holder, so it is dropped, whatever the state."""
    a, _ = pair()
    assert a.receive("b", Released()) == [] and a.state is NodeState.MEMBER
    joining = node("c")
    joining.join_via("a", address_of("a"))
    assert joining.receive("a", Released()) == [] and joining.state is NodeState.JOINING
    lonely = node("x")
    assert lonely.receive("a", Released()) == [] and lonely.state is NodeState.IDLE


def test_local_misuse_changes_nothing() -> None:
    lonely = node("x")
    with pytest.raises(LocalProtocolError, match="x is idle, not member"):
        lonely.leave()
    with pytest.raises(LocalProtocolError, match="through itself"):
        lonely.join_via("x", address_of("x"))
    a, _ = pair()
    with pytest.raises(LocalProtocolError, match="nobody is not a neighbour"):
        a.neighbour_failed("nobody")
    with pytest.raises(LocalProtocolError, match="a is member, not idle"):
        a.create()
    assert a.state is NodeState.MEMBER
    # meant for a previous membership of a node that starts over (it rejoins): dropped
    assert lonely.receive("a", Released()) == []
    assert lonely.state is NodeState.IDLE


def test_a_node_alone_leaves_at_once_and_a_leaving_node_takes_its_release_and_drops_lookups() -> (
    None
):
    a = node("a")
    a.create()
    assert a.leave() == [Left()]
    assert a.state is NodeState.LEFT
    a, b = pair()
    outputs = b.leave()
    assert all(isinstance(o, Send) for o in outputs)
    assert b.state is NodeState.LEAVING
    with pytest.raises(RemoteProtocolError, match="departure runs alone"):
        b.receive("a", Grow(epoch=2, dimension=2, root=0))
    a, b = pair()
    b.leave()
    # a repair beside the departure looks a holder up through the leaver: dropped (asked
    # again later), where it broke the leaver, which rejoined instead of leaving
    lookup = Lookup(epoch=1, target=0, avoid="x", requester="y", requester_address="y:1")
    assert b.receive("a", lookup) == []
    assert b.state is NodeState.LEAVING
    _, c = pair()
    c.leave()
    assert c.receive("a", Released()) == [Left()]
    assert c.state is NodeState.LEFT


def test_only_the_designated_neighbour_repairs_a_failure() -> None:
    network = Network(seed=3)
    network.create("n0")
    for i in range(1, 8):
        network.join(f"n{i}")
    topology = network.check()
    failed = topology.holder(5)  # d = 3, every column split: lowest position 5, repairer at 4
    for watcher in sorted(topology.neighbours(failed)):
        outputs = network.node(watcher).neighbour_failed(failed)
        assert bool(outputs) == (watcher == topology.holder(4))


def test_a_failure_reported_again_before_the_repair_is_announced_is_not_repaired_twice() -> None:
    network = cube(8)
    topology = network.check()
    failed, repairer = topology.holder(5), network.node(topology.holder(4))
    assert repairer.neighbour_failed(failed), "the walk starts"
    assert repairer.neighbour_failed(failed) == [], "reported again (a restart seen twice)"


def messages(outputs: list, to: str) -> list:
    return [o.message for o in outputs if isinstance(o, Send) and o.to == to]


def c_joining() -> tuple[HypercupNode, HypercupNode, Grow, JoinWalk]:
    """A cube of two (a, b), full: c asks a to join; a takes its census (b holds one position),
    grows the cube and sends the walk on to the new anchor, b. Returns a, b, the Grow and the
    walk, both on their way to b."""
    a, b = pair()
    (request,) = node("c").join_via("a", address_of("a"))
    (census,) = messages(a.receive("c", request.message), "b")
    (reply,) = messages(b.receive("a", census), "a")
    assert reply == CensusReply(epoch=1, origin="a", census=1, doubled=(), ready=True)
    grow, walk = messages(a.receive("b", reply), "b")
    return a, b, grow, walk


def taking() -> tuple[HypercupNode, HypercupNode, list]:
    """``c_joining`` on: b admits the walk, a takes (hands its mirror to c): a's outputs."""
    a, b, grow, walk = c_joining()
    b.receive("a", grow)
    (walk,) = messages(b.receive("a", walk), "a")  # column 1 is doubled, so is column 0: to a
    return a, b, a.receive("b", walk)


def test_a_node_refuses_to_leave_in_the_middle_of_a_join() -> None:
    a, b, outputs = taking()
    (welcome,) = messages(outputs, "c")
    (update,) = messages(outputs, "b")
    assert welcome.position == 2 and update.relay
    assert a.busy()
    assert a.activity() == "its mirror handed to c, acks due from b"
    with pytest.raises(LocalProtocolError, match=r"\(its mirror handed to c, .*runs alone"):
        a.leave()
    (ack,) = messages(b.receive("a", update), "a")
    assert ack == UpdateAck(epoch=2, ack_id=update.ack_id)
    (done,) = messages(a.receive("b", ack), "b")  # b admitted the walk: it is the anchor
    assert isinstance(done, JoinDone)
    assert not a.busy() and b.busy()
    assert a.activity() == "nothing" and b.activity() == "joins admitted of c"
    assert b.receive("a", done) == []
    assert not b.busy()


def cube(n: int) -> Network:
    network = Network(seed=n)
    network.create("n0")
    for i in range(1, n):
        network.join(f"n{i}")
    network.check()
    return network


def some_walk(position: int, dimension: int = 3, epoch: int = 3) -> LeaveWalk:
    return LeaveWalk(
        epoch=epoch,
        dimension=dimension,
        leaver="gone",
        leaver_address=address_of("gone"),
        leaver_positions=(7,),
        leaver_peers={},
        failed=True,
        phase="route",
        position=position,
        bit=-1,
    )


def test_what_a_node_cannot_be_told() -> None:
    network = cube(8)  # d = 3, epoch 3, every column split
    topology = network.check()
    holder0, holder1 = topology.holder(0), topology.holder(1)
    cases = [
        (some_walk(position=1), "not held by"),
        (
            Reclaim(
                epoch=3,
                dimension=3,
                column=1,
                base_holder=holder1,
                base_address=address_of(holder1),
                leaver="gone",
                leaver_address=address_of("gone"),
                leaver_positions=(7,),
                leaver_peers={},
                failed=True,
            ),
            "Reclaim of the mirror 5",
        ),
        (JoinDone(epoch=3, newcomer="n"), "admitted no join"),
        (
            NeighbourUpdate(
                epoch=3, holders={holder0: (address_of(holder0), (0,))}, relay=False, ack_id=None
            ),
            f"about {holder0} reached {holder0} itself",
        ),
        (
            NeighbourUpdate(
                epoch=3, holders={"x": (address_of("x"), (0,))}, relay=False, ack_id=None
            ),
            "claims positions",
        ),
    ]
    for message, text in cases:
        with pytest.raises(RemoteProtocolError, match=text):
            network.node(holder0).receive(holder1, message)
        network = cube(8)
    stranger = NeighbourUpdate(
        epoch=3, holders={"x": (address_of("x"), (6,))}, relay=True, ack_id=1
    )
    with pytest.raises(RemoteProtocolError, match="x is not a neighbour"):
        network.node(holder0).receive("x", stranger)


def test_a_failures_walk_overtaken_by_a_change_of_dimension_is_dropped() -> None:
    """Two repairs at once: one shrank the cube while the other's walk was on its way. The
    late walk is dropped where the new cube has it (its repairer starts over when the runtime
    asks again); a departure that is not a failure's still breaks the node, as before."""
    network = cube(8)  # epoch 3
    topology = network.check()
    holder0, holder1 = topology.holder(0), topology.holder(1)
    receiver = network.node(holder0)
    late = some_walk(position=0, epoch=2)
    assert receiver.receive(holder1, late) == []
    assert receiver.state is NodeState.MEMBER and not receiver.busy()
    network.check()
    with pytest.raises(RemoteProtocolError, match="changed dimension while it was in flight"):
        receiver.receive(holder1, replace(late, failed=False))


def test_a_relay_is_only_asked_of_a_base_holder() -> None:
    network = cube(8)
    topology = network.check()
    newcomer, base = topology.holder(4), topology.holder(0)
    update = NeighbourUpdate(
        epoch=3, holders={base: (address_of(base), (0,))}, relay=True, ack_id=1
    )
    with pytest.raises(RemoteProtocolError, match="holds no base position"):
        network.node(newcomer).receive(base, update)


def test_a_welcome_that_leaves_a_neighbour_unknown_is_refused() -> None:
    a = node("a")
    a.join_via("b", address_of("b"))
    with pytest.raises(RemoteProtocolError, match="nobody is known to hold positions"):
        a.receive("b", Welcome(epoch=1, dimension=2, position=2, peers={"b": ("b.sim:4000", (0,))}))


def test_joins_and_repairs_do_not_overlap() -> None:
    network = cube(8)
    topology = network.check()
    failed = topology.holder(5)
    repairer = network.node(topology.holder(4))
    assert repairer.neighbour_failed(failed)  # it starts asking around
    assert repairer.busy()
    [refusal] = repairer.receive("newcomer", JoinRequest(address=address_of("newcomer")))
    assert isinstance(refusal.message, JoinRefused)
    assert "departure" in refusal.message.reason
    assert repairer.state is NodeState.MEMBER
    assert repairer.neighbour_failed(failed) == [], "the same failure again: already repairing"
    assert repairer.busy()


def test_a_departure_reaching_a_node_in_the_middle_of_a_join_waits_for_the_join() -> None:
    a, b, outputs = taking()
    (update,) = messages(outputs, "b")
    assert a.busy()
    departure = some_walk(position=0, dimension=2, epoch=2)
    assert a.receive("b", departure) == [], "held back while the take is unfinished"
    assert a.state is NodeState.MEMBER and a.busy()
    (ack,) = messages(b.receive("a", update), "a")
    outputs = [o.message for o in a.receive("b", ack) if isinstance(o, Send)]
    # the take completes first, then the departure goes on (Reclaim of the mirror c holds)
    assert [type(m) for m in outputs] == [JoinDone, Reclaim]
    assert outputs[1].leaver == "gone"


def test_a_take_waiting_on_a_failed_neighbour_goes_on_without_it() -> None:
    a, _, outputs = taking()
    assert messages(outputs, "b"), "a waits for b to acknowledge the update"
    assert a.busy()
    outputs = a.neighbour_failed("b")
    (done,) = [m for m in messages(outputs, "b") if isinstance(m, JoinDone)]
    assert done.newcomer == "c", "the take is complete without b's acknowledgement"


def test_a_failure_whose_designated_repairer_failed_too_is_repaired_by_the_next() -> None:
    network = cube(8)
    topology = network.check()
    failed = topology.holder(5)  # lowest position 5: repairer at 4, then 7, then 1
    first, second = topology.holder(4), topology.holder(7)
    watcher = network.node(second)
    assert watcher.neighbour_failed(failed) == [], "not its turn while the first may repair"
    assert watcher.neighbour_failed(failed, fallback=1), "the first one failed too: it repairs"
    assert first != second


def test_a_node_that_missed_a_grow_asks_for_it_and_catches_up() -> None:
    a, b, grow, walk = c_joining()
    # the Grow is lost (the tree ran through a member that failed); the walk arrives
    assert b.receive("a", walk) == []
    assert b.lagging() and b.epoch == 1
    (ask,) = messages(b.ask_for_missed_changes({}), "a")
    assert ask == ChangeRequest(since=1, address=address_of("b"))
    (again,) = messages(a.receive("b", ask), "b")
    assert again == replace(grow, resent=True)
    outputs = b.receive("a", again)
    assert b.epoch == 2 and not b.lagging()
    (walk_on,) = messages(outputs, "a")  # the held walk went on, in the new cube
    assert isinstance(walk_on, JoinWalk) and walk_on.admitted
    assert b.receive("a", again) == [], "sent again once more: already applied, ignored"


def test_an_admitted_join_whose_walk_was_lost_is_forgotten_after_some_ticks() -> None:
    _, b, grow, walk = c_joining()
    b.receive("a", grow)
    messages(b.receive("a", walk), "a")  # admitted by b, the anchor; lost on its way to a
    assert b.busy()
    for _ in range(STALE_TICKS - 1):
        b.tick()
        assert b.busy()
    b.tick()
    assert not b.busy()


def test_a_queued_join_freed_by_a_lost_walk_finds_the_cube_not_full_and_goes_on() -> None:
    """An admitted join given up lets a queued one go on in a cube that is not full (a replay
    of the chaos schedule in the simulator): it used to grow it there and break the anchor.
    The anchor takes its census first, finds its own column doubled, and starts the queued
    walk over: it searches, as any walk in a cube that is not full, for the lowest doubled
    column (a's)."""
    _, b, grow, walk = c_joining()
    b.receive("a", grow)
    (lost,) = messages(b.receive("a", walk), "a")  # admitted by b; lost on its way to a
    b._queued.append(replace(lost, newcomer="d", newcomer_address=address_of("d")))
    for _ in range(STALE_TICKS - 1):
        assert messages(b.tick(), "a") == []
    (census,) = messages(b.tick(), "a")
    assert isinstance(census, Census) and b.state is NodeState.MEMBER
    reply = CensusReply(epoch=b.epoch, origin="b", census=census.census, doubled=(), ready=True)
    (search,) = messages(b.receive("a", reply), "a")
    assert isinstance(search, JoinWalk) and search.newcomer == "d" and search.position == 0
    assert not b._queued and b.state is NodeState.MEMBER


def test_knowledge_that_does_not_fit_together_at_a_tick_breaks_the_node_not_its_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tick that finds the node's own knowledge contradicting itself (a ``KnowledgeError``
    raised by what a tick does: once, a grow of a cube whose table was not full, which the
    census now prevents) breaks the node as a message breaking the protocol does, and says so
    as a ``HypercupError``: a ``ValueError`` out of ``tick`` used to end the daemon's timer."""
    a, _ = pair()

    def contradiction() -> None:
        raise KnowledgeError("a: position 1 is claimed by both b and x")

    monkeypatch.setattr(a, "_expire_censuses", contradiction)
    with pytest.raises(RemoteProtocolError, match="claimed by both"):
        a.tick()
    assert a.state is NodeState.BROKEN


def test_the_welcome_names_the_incarnation_that_asked_to_join() -> None:
    """The member that hands a position over may never have heard from the newcomer (the walk
    brought it): the runtime fills the request in from the link it came on, and the
    ``Welcome`` names it, so the runtime sends it to that incarnation and not to one it knew
    before (chaos seed 43)."""
    a, b = pair()
    (request,) = node("c").join_via("a", address_of("a"))
    (census,) = messages(a.receive("c", replace(request.message, incarnation=5)), "b")
    grow, walk = messages(a.receive("b", *messages(b.receive("a", census), "a")), "b")
    b.receive("a", grow)
    (walk,) = messages(b.receive("a", walk), "a")
    assert walk.newcomer_incarnation == 5
    (welcome,) = [w for w in messages(a.receive("b", walk), "c") if isinstance(w, Welcome)]
    assert welcome.incarnation == 5


def departures(network: Network) -> list[Departed]:
    return [e for events in network.events.values() for e in events if isinstance(e, Departed)]


@pytest.mark.parametrize("size", [2, 3, 5, 8, 11])
def test_the_successor_names_the_incarnation_that_departed(size: int) -> None:
    """Whoever takes a departed node's place (often a node that never heard from it) names the
    incarnation the repair or the leaver gave: the cube forgets that one, and not a newer one
    that restarted meanwhile."""
    for position in range(size):
        network = cube(size)
        topology = network.check()
        failed = topology.holder(position)
        network.fail(failed, incarnation=7)
        network.check()
        assert [(d.node, d.incarnation, d.failed) for d in departures(network)] == [
            (failed, 7, True)
        ]
    network = cube(size)
    leaver = network.check().holder(size - 1)
    network.leave(leaver, incarnation=3)
    assert [(d.node, d.incarnation, d.failed) for d in departures(network)] == [(leaver, 3, False)]


@pytest.mark.parametrize("position", [0, 1])
def test_the_last_one_standing_keeps_the_cube_alone(position: int) -> None:
    """(Issue 33) a small cube cut apart, or two failures that overlap: a member whose every
    neighbour is reported failed, and who knows they held the rest of the cube, takes it alone
    at once (a repair of one at a time would wait on the other), and names each one
    ``Departed``; a new epoch, so the old cube's stray messages are not taken for this one's."""
    network = cube(3)
    topology = network.check()
    survivor = network.node(topology.holder(position))  # position 1: it holds 3 as well
    others = sorted(set(network.members) - {survivor.node_id})
    assert set(topology.neighbours(survivor.node_id)) == set(others)
    epoch = survivor.epoch
    first = survivor.neighbour_failed(others[0], incarnation=1, last_heard=7.0, fallback=1)
    assert not any(isinstance(o, Departed) for o in first), "the other one may still repair"
    outputs = survivor.neighbour_failed(others[1], incarnation=2, last_heard=7.0)
    departed = [o for o in outputs if isinstance(o, Departed)]
    assert [(d.node, d.incarnation, d.failed, d.last_heard) for d in departed] == [
        (others[0], 1, True, 7.0),
        (others[1], 2, True, 7.0),
    ]
    assert survivor.view().dimension == 0 and survivor.view().positions == {0}
    assert survivor.epoch == epoch + 1 and not survivor.busy()


def test_a_member_with_a_live_neighbour_does_not_stand_alone() -> None:
    """Every neighbour failed, but the cube has a position none of them held: someone else may
    be alive there, so the usual repairs go on (and the runtime's watchdog, if they wedge)."""
    network = cube(4)
    topology = network.check()
    survivor = network.node(topology.holder(0))
    for failed in sorted(topology.neighbours(survivor.node_id)):
        with contextlib.suppress(LocalProtocolError):  # busy with the first repair
            outputs = survivor.neighbour_failed(failed, fallback=3)
            assert not any(isinstance(o, Departed) for o in outputs)
    assert survivor.view().dimension == 2


@pytest.mark.parametrize("all_restarted", [True, False])
def test_a_member_whose_every_neighbour_restarted_stands_alone(all_restarted: bool) -> None:
    """(Issue 33) a heal whose repairs wedged: the watchdog rejoined every member but one, whose
    every neighbour is a later incarnation now, out of the cube. It cannot repair anything
    (every message it sends goes to a failed neighbour) and refused the rejoining super-peers
    for the watchdog's 30 s more (chaos replays, 16 super-peers, seed 6). Seen restarted, each
    of them counts as out of the cube: the member takes it alone, and they can join it. With
    one neighbour only failed (it may be repaired by others), it waits as before."""
    network = cube(16)
    topology = network.check()
    survivor = network.node(topology.holder(5))
    neighbours = sorted(topology.neighbours(survivor.node_id))
    departed: list[Departed] = []
    for n, failed in enumerate(neighbours):
        restarted = all_restarted or n > 0
        with contextlib.suppress(LocalProtocolError):  # busy with the first repair
            outputs = survivor.neighbour_failed(failed, fallback=3, restarted=restarted)
            departed += [o for o in outputs if isinstance(o, Departed)]
    if all_restarted:
        assert sorted(d.node for d in departed) == neighbours
        assert survivor.view().dimension == 0 and not survivor.busy()
    else:
        assert departed == [] and survivor.view().dimension == 4


@pytest.mark.parametrize("kind", ["grow", "shrink"])
def test_a_change_of_dimension_from_a_cube_of_another_size_is_the_senders_error(kind) -> None:
    """(Issue 33) two cubes whose epochs happen to match (the sides of a healed cut, one that
    stood alone): a ``Grow`` or ``Shrink`` of a larger cube names a root this one has no
    position for. Its sender's error, not a ``ValueError`` a daemon would not survive."""
    network = cube(2)
    member = network.node(network.check().holder(1))
    change = (
        Grow(epoch=member.epoch + 1, dimension=4, root=3)
        if kind == "grow"
        else Shrink(epoch=member.epoch + 1, dimension=0, root=6, absent="x")
    )
    with pytest.raises(RemoteProtocolError, match="dimension"):
        member.receive("stranger", change)


def test_a_leave_walk_of_a_node_this_one_repairs_as_failed_is_dropped() -> None:
    """(Issue 33) a leaver cut off from the cube: its neighbours declared it failed and the
    designated one repaired its place; when the cut heals its own walk arrives there too, and a
    second departure of it would take a place twice (and break the node that took it)."""
    network = cube(3)
    topology = network.check()
    leaver = network.node(topology.holder(1))  # it holds 1 and 3: sp0's walk goes to 0
    (walk,) = [o for o in leaver.leave(incarnation=1) if isinstance(o, Send)]
    repairer = network.node(walk.to)
    assert repairer.neighbour_failed(leaver.node_id, fallback=1), "it repairs"
    assert repairer.receive(leaver.node_id, walk.message) == []


def lookups(outputs: list) -> list[Send]:
    return [o for o in outputs if isinstance(o, Send) and isinstance(o.message, Lookup)]


def answered(network: Network, requester: str, sent: Send) -> LookupReply:
    """The answer to a lookup ``requester`` sent, passed from hop to hop until a member knows."""
    sender, hop = requester, sent
    while isinstance(hop.message, Lookup):
        receiver = hop.to
        (hop,) = network.node(receiver).receive(sender, hop.message)
        sender = receiver
    assert hop.to == requester and isinstance(hop.message, LookupReply)
    return hop.message


def test_a_repair_whose_lookups_were_lost_asks_again_and_takes_a_late_answer_calmly() -> None:
    # a lookup passed to a member that failed, or was paused, before anyone knew is lost: the
    # repair waited on it until the wedge watchdog (a kill and a pause together, on daemons)
    network = cube(8)
    topology = network.check()
    failed = topology.holder(5)  # d = 3, every column split: the repairer at 4
    name = topology.holder(4)
    repairer = network.node(name)
    first = lookups(repairer.neighbour_failed(failed))
    assert first, "the holders around the failed node not known here are looked up"
    late = [answered(network, name, sent) for sent in first]  # held up, they come later
    assert lookups(repairer.tick()) == [] and repairer.busy(), "one tick: still waiting"
    again = lookups(repairer.tick())
    assert sorted(s.message.target for s in again) == sorted(s.message.target for s in first)
    for sent in again:
        repairer.receive(sent.to, answered(network, name, sent))
    for reply in late:
        assert repairer.receive("anyone", reply) == [], "answered twice: the late one is dropped"
    assert repairer.state is NodeState.MEMBER


def contradicting(network: Network, name: str, sent: Send) -> LookupReply:
    """An answer to ``sent`` that says ``name`` (the asker) holds the target: it contradicts
    what the asker knows of itself, as answers from two moments would."""
    reply = answered(network, name, sent)
    return replace(reply, holder=name, address=address_of(name), positions=(reply.target,))


def started_over(network: Network) -> tuple[HypercupNode, str, list[Send], list[Send]]:
    """The repairer of a failed member of an 8-cube, its name, its first lookups, and the
    lookups it sent again when an answer to the first contradicted what it knew."""
    topology = network.check()
    name = topology.holder(4)
    repairer = network.node(name)
    first = lookups(repairer.neighbour_failed(topology.holder(5)))
    again = lookups(repairer.receive(first[0].to, contradicting(network, name, first[0])))
    return repairer, name, first, again


def test_lookup_answers_that_contradict_each_other_start_the_repair_over_once() -> None:
    # a holder's positions changed while the lookups were out: the node broke and rejoined
    # (10 times in a 16-super-peer chaos run); starting over without a bound livelocked
    network = cube(8)
    repairer, name, first, again = started_over(network)
    assert sorted(s.message.target for s in again) == sorted(s.message.target for s in first)
    assert repairer.state is NodeState.MEMBER and repairer.busy()
    with pytest.raises(RemoteProtocolError, match=f"contradicts what is known of {name}"):
        repairer.receive(again[0].to, contradicting(network, name, again[0]))


def test_a_repair_started_over_on_contradicting_answers_goes_on_to_its_walk() -> None:
    network = cube(8)
    failed = network.check().holder(5)
    repairer, name, _, again = started_over(network)
    outputs = []
    for sent in again:
        outputs += repairer.receive(sent.to, answered(network, name, sent))
    walks = [o for o in outputs if isinstance(o, Send) and isinstance(o.message, LeaveWalk)]
    assert walks and walks[0].message.leaver == failed


def walk_at_3(member: HypercupNode, newcomer: str, **fields: object) -> JoinWalk:
    """``newcomer``'s join walk at position 3 (a cube of 8's anchor) in ``member``'s epoch, on
    its way to the anchor unless ``fields`` say otherwise."""
    route: dict[str, object] = {
        "phase": "route",
        "admitted": False,
        "anchor": None,
        "anchor_address": None,
    }
    return JoinWalk(
        epoch=member.epoch,
        newcomer=newcomer,
        newcomer_address=address_of(newcomer),
        position=3,
        bit=-1,
        **(route | fields),
    )


def test_a_members_own_join_walk_coming_back_to_it_is_dropped() -> None:
    # a retry of its join, still going round after another attempt made it a member: a daemon
    # crashed welcoming itself (a chaos run at 16 super-peers). Its anchor hears it is over,
    # and does not hold its next grow back for ``STALE_TICKS``
    network = cube(8)
    topology = network.check()
    name = topology.holder(3)
    member = network.node(name)
    anchor = topology.holder(0)
    walk = walk_at_3(
        member,
        name,
        phase="search",
        admitted=True,
        anchor=anchor,
        anchor_address=address_of(anchor),
    )
    assert member.receive(topology.holder(1), walk) == [
        Send(
            to=anchor,
            address=address_of(anchor),
            message=JoinDone(epoch=member.epoch, newcomer=name),
        )
    ]
    assert member.state is NodeState.MEMBER
    network.check()


def full_cube_of_two_with_c_admitted() -> tuple[HypercupNode, HypercupNode, JoinWalk]:
    """``c_joining`` on: b, the anchor, admitted c's walk, on its way to a."""
    _, b, grow, walk = c_joining()
    b.receive("a", grow)
    (admitted,) = messages(b.receive("a", walk), "a")
    assert admitted.admitted and admitted.anchor == "b"
    return _, b, admitted


def test_a_second_walk_of_a_newcomer_already_admitted_is_dropped_at_the_anchor() -> None:
    """A newcomer whose answer is slow asks another contact, whose walk reaches the anchor
    while the first is in flight: admitted again, it would search beside the first, and the
    second take would find the newcomer a member already. A later incarnation's walk is a new
    join, and is admitted."""
    _, b, admitted = full_cube_of_two_with_c_admitted()
    again = replace(admitted, phase="route", position=1, bit=-1, admitted=False, anchor=None,
                    anchor_address=None)  # fmt: skip
    assert b.receive("a", again) == []
    assert set(b._admitted) == {"c"}
    later = replace(again, newcomer_incarnation=again.newcomer_incarnation + 1)
    (walk_on,) = messages(b.receive("a", later), "a")
    assert walk_on.admitted and walk_on.newcomer_incarnation == later.newcomer_incarnation


def test_a_report_on_an_earlier_incarnations_walk_ends_no_wait_for_a_later_ones() -> None:
    """The anchor admits a later incarnation's walk beside an earlier one's (``_duplicate``).
    The earlier walk's report (``JoinDone``), overtaken, ended the wait for the later one, and
    the anchor could grow while the later take was under way; the grow met a doubled column
    ("a full cube grows, and in a full cube every super-peer holds one position")."""
    _, b, admitted = full_cube_of_two_with_c_admitted()
    first = max(admitted.newcomer_incarnation, 1)
    for incarnation in (first, first + 1):
        walk = replace(admitted, phase="route", position=1, bit=-1, admitted=False,
                       anchor=None, anchor_address=None, newcomer_incarnation=incarnation)  # fmt: skip
        b.receive("a", walk)
    assert b._admitted["c"].incarnation == first + 1
    earlier = JoinDone(epoch=b.epoch, newcomer="c", newcomer_incarnation=first)
    assert b.receive("a", earlier) == []
    assert b._admitted["c"].incarnation == first + 1, "still waited for"
    b.receive("a", replace(earlier, newcomer_incarnation=first + 1))
    assert "c" not in b._admitted
    untold = JoinDone(epoch=b.epoch, newcomer="c")  # an older sender's: any incarnation
    b._admitted["c"] = Admitted(incarnation=first + 1)
    b.receive("a", untold)
    assert "c" not in b._admitted


def test_a_joins_report_of_an_earlier_epoch_is_dropped_at_the_anchor() -> None:
    """A take's report overtaken by a grow (the anchor took the join for lost at a tick) or a
    shrink: the change cleared the admitted joins it reports on. It broke the anchor, which
    rejoined in the middle of sixteen joins (32 super-peers, a 60-s bridge, seed 2)."""
    _, b, grow, _ = c_joining()
    b.receive("a", grow)
    assert b.epoch == grow.epoch
    assert b.receive("a", JoinDone(epoch=grow.epoch - 1, newcomer="x")) == []
    assert b.state is NodeState.MEMBER


def test_the_anchors_own_retry_of_a_walk_it_admitted_is_admitted_again() -> None:
    """A walk that found its column taken by a concurrent join comes back to its anchor
    (``_retry``): not a duplicate."""
    _, b, admitted = full_cube_of_two_with_c_admitted()
    retry = replace(admitted, phase="route", position=1, bit=-1)
    (walk_on,) = messages(b.receive("a", retry), "a")
    assert walk_on.phase == "search" and walk_on.anchor == "b"


def test_a_full_cube_queues_one_walk_per_newcomer_for_its_grow() -> None:
    """While a join is in flight, a full cube queues the walks that wait for its grow. Sixteen
    super-peers joining at once asked again every few seconds, and the grow restarted every walk
    queued, duplicates among them: their second takes broke the new cube (``python -m
    bench.chaos_replay --superpeers 32 --cut-only 60``, seed 8). A later incarnation's walk
    takes the place of an earlier one's."""
    network = cube(4)  # full; its anchor holds position 1
    anchor_name = network.check().holder(1)
    anchor = network.node(anchor_name)
    anchor._admitted["y"] = Admitted(incarnation=1)  # a join in flight: no grow yet
    d_walk = replace(walk_at_3(anchor, "d", newcomer_incarnation=2), position=1)
    for walk in (d_walk, d_walk, replace(d_walk, newcomer_incarnation=1)):
        assert anchor.receive(anchor_name, walk) == []
    assert [(w.newcomer, w.newcomer_incarnation) for w in anchor._queued] == [("d", 2)]
    anchor.receive(anchor_name, replace(d_walk, newcomer_incarnation=3))
    assert [(w.newcomer, w.newcomer_incarnation) for w in anchor._queued] == [("d", 3)]


def test_a_lookup_with_no_live_hop_closer_takes_a_detour_and_is_answered() -> None:
    """The holders of 1, 2 and 3 fail together in a cube of 16. The holder of 0 repairs the
    holder of 1 and must look up who holds 3: its first lookup went to the holder of 2 before
    anyone knew it had failed, and was lost. Asked again, the only hops closer to 3 are 1 and
    2, both known failed, and a lookup passed to either was lost every time (the repair waited
    for the watchdog, on daemons: stop 51's 8-super-peer run). It goes round through a live
    neighbour farther from 3 instead, and a member next to 3 answers (that its holder failed
    too)."""
    network = cube(16)  # d = 4, every column split
    topology = network.check()
    holder0 = topology.holder(0)
    dead = {topology.holder(p) for p in (1, 2, 3)}
    for failed in dead:  # all at once: nobody notices before all three are gone
        del network._nodes[failed]
        network._failed.add(failed)
    repairer = network.node(holder0)
    for failed in sorted(dead & set(repairer.known_peers())):
        with contextlib.suppress(LocalProtocolError):  # one repair at a time
            network._process(holder0, repairer.neighbour_failed(failed))
    network._deliver_all()
    assert "positions [3] looked up" in repairer.activity()  # the first lookup was lost
    for _ in range(DEFERRED_TICKS):  # asked again
        network._process(holder0, repairer.tick())
    network._deliver_all()
    assert "looked up" not in repairer.activity(), repairer.activity()


def test_a_lookup_goes_to_no_member_it_passed_and_is_answered() -> None:
    """16 super-peers, seed 2 of the chaos schedules replayed: the holder of 1 repairs the
    holder of 3 and looks 11 up, while the holders of 2, 8, 9 and 13 have failed too (each
    known failed by its neighbours). The detours went 1, 0, 4, 5 and back to 1: only the member
    that passed it was excluded, the requester was the nearest hop from 5, and each round of
    asking again went the same way until the watchdog (30 s). Excluding every member it
    passed, it goes from 5 to 7, and 15, next to 11, answers."""
    network = cube(16)
    topology = network.check()
    holder = topology.holder
    dead = [holder(p) for p in (3, 2, 8, 9, 13)]
    for failed in dead:
        del network._nodes[failed]
        network._failed.add(failed)
    repairer = network.node(holder(1))
    repairer.neighbour_failed(holder(3), fallback=4)  # whichever neighbour is designated
    for position, failed in ((0, 2), (0, 8), (5, 13), (1, 9)):
        # each neighbour learns of its failed neighbours; their own repairs' steps are lost
        with contextlib.suppress(LocalProtocolError):  # one repair at a time
            network.node(holder(position)).neighbour_failed(holder(failed))
    assert "looked up" in repairer.activity()
    for _ in range(DEFERRED_TICKS):  # its first lookups went where failed members were
        network._process(holder(1), repairer.tick())
    network._deliver_all()
    assert "[11]" not in repairer.activity(), repairer.activity()


def repair_walk(network: Network, repairer: str, failed: str, *, fallback: int = 0) -> Send:
    """The walk ``repairer`` starts for ``failed``, its lookups answered."""
    node = network.node(repairer)
    outputs = []
    for sent in lookups(node.neighbour_failed(failed, fallback=fallback)):
        outputs += node.receive(sent.to, answered(network, repairer, sent))
    (walk,) = [o for o in outputs if isinstance(o, Send) and isinstance(o.message, LeaveWalk)]
    return walk


def walked_to(network: Network, sender: str, sent: Send, to: str) -> tuple[str, Send]:
    """A departure's walk passed from hop to hop until its step to ``to``: that step's
    sender, and the step (not delivered)."""
    while sent.to != to:
        receiver = sent.to
        (sent,) = [
            o
            for o in network.node(receiver).receive(sender, sent.message)
            if isinstance(o, Send) and isinstance(o.message, LeaveWalk)
        ]
        sender = receiver
    return sender, sent


def test_a_second_repair_is_dropped_where_its_search_reads_the_place_taken() -> None:
    """pair at 32, seed 11: the designated repairer began its walk as the runtime's fallback let
    the next neighbour begin one too. The first took the place: the failed node was the last
    split column's newcomer, whose base holder took its mirror back. The second search read
    that column doubled at a node next to it (not next to the failed node), turned to the
    split column below, and its newcomer took the place a second time. That node knows, from
    the base holder's announcement, who holds the place now: the walk is dropped there."""
    network = cube(8)
    topology = network.check()
    failed = topology.holder(7)  # the newcomer of column 3, the last split one
    designated, fallback, reader = topology.holder(6), topology.holder(5), topology.holder(2)
    del network._nodes[failed]
    network._failed.add(failed)
    second = repair_walk(network, fallback, failed, fallback=1)
    sender, second = walked_to(network, fallback, second, reader)  # 7, 6, 4, 0, then 2
    network._process(designated, network.node(designated).neighbour_failed(failed))
    network._deliver_all()  # the first repair: the base holder of 3 takes 7 back
    assert network.node(reader).known_peers()[topology.holder(3)][1] == {3, 7}
    outputs = network.node(reader).receive(sender, second.message)
    steps = [
        o for o in outputs if isinstance(o, Send) and isinstance(o.message, LeaveWalk | Reclaim)
    ]
    assert steps == [], "no search goes on to the column below"
    network._process(reader, outputs)
    network._deliver_all()
    network.check()


def test_a_base_holder_whose_mirror_is_on_its_way_back_repairs_nothing_yet() -> None:
    """pair at 32, seed 15: a base holder sent its newcomer a ``Reclaim`` and began the repair
    of another failed neighbour; the newcomer's ``ReturnTop`` waited behind the repair, its
    announcement of the place it took overtook it, and the mirror taken back with a table
    that said otherwise broke the base holder. It repairs once the mirror is back."""
    network = cube(8)
    topology = network.check()
    # the repair of 5 ends at the last split column, 3: its base holder reclaims 7
    base, newcomer = topology.holder(3), topology.holder(7)
    sender, walk = walked_to(
        network,
        topology.holder(4),
        repair_walk(network, topology.holder(4), topology.holder(5)),
        base,
    )
    (reclaim,) = messages(network.node(base).receive(sender, walk.message), newcomer)
    assert isinstance(reclaim, Reclaim)
    holder = network.node(base)
    other = topology.holder(2)  # fails too: the base holder (of 3) is its designated repairer
    with pytest.raises(LocalProtocolError, match="mirror on its way back from"):
        holder.neighbour_failed(other)
    back = messages(network.node(newcomer).receive(base, reclaim), base)
    assert isinstance(back[0], ReturnTop)
    for message in back:  # and the newcomer's announcement of the place it took, after it
        holder.receive(newcomer, message)
    assert lookups(holder.neighbour_failed(other)), "its mirror is back: it repairs"


def test_a_walk_whose_newcomer_is_in_the_takers_table_is_refused_and_its_anchor_told() -> None:
    """The member that would give the newcomer a column finds it in its table (a member by
    now, through another of its walks, or its old incarnation not repaired away): no take. Its
    anchor hears that the walk is over (``JoinDone``): unreported, it held every grow back for
    ``STALE_TICKS``, and the joins queued for it with it (32 super-peers, seed 8: 15 s)."""
    network = cube(6)  # d = 3: columns 0 and 1 split, 2 and 3 doubled
    topology = network.check()
    taker, anchor = network.node(topology.holder(2)), topology.holder(3)
    newcomer = topology.holder(0)  # a neighbour of the taker's column
    walk = replace(
        walk_at_3(taker, newcomer, phase="search", admitted=True, anchor=anchor,
                  anchor_address=address_of(anchor)),
        position=2,
    )  # fmt: skip
    outputs = taker.receive(anchor, walk)
    refusal, done = [(o.to, o.message) for o in outputs if isinstance(o, Send)]
    assert refusal[0] == newcomer and isinstance(refusal[1], JoinRefused)
    assert done == (anchor, JoinDone(epoch=taker.epoch, newcomer=newcomer))
    network.check()


def test_a_lookup_coming_back_to_its_requester_is_answered_there() -> None:
    """A lookup whose requester is this node (its own, back by a detour, or its old
    incarnation's, passed on by a member that never heard of its rejoin) is answered here:
    sent to itself, it ended a daemon (chaos at 16 super-peers, stop 60)."""
    network = cube(8)
    topology = network.check()
    member = network.node(topology.holder(0))
    lookup = Lookup(
        epoch=member.epoch,
        target=1,
        avoid="gone",
        requester=member.node_id,
        requester_address=address_of(member.node_id),
        visited=(topology.holder(2),),
    )
    assert member.receive(topology.holder(2), lookup) == []
    assert member.state is NodeState.MEMBER
    network.check()


def test_a_full_cubes_anchor_refuses_a_newcomer_whose_old_place_is_next_to_it() -> None:
    """kill-pause at 9, seed 6: a restarted member's join walk reached the anchor of a full
    cube while its old incarnation's place, next to the anchor, was still being repaired. The
    anchor grew the cube for it, the repair's walk (of the cube before) was dropped where it
    met the new one, and the cube took 89 s to become one. The anchor refuses it instead, as
    the member that would give it a column does; it asks again, and the repair frees a place."""
    network = cube(8)  # d = 3, full: the anchor holds position 3
    topology = network.check()
    anchor, restarted = network.node(topology.holder(3)), topology.holder(2)
    outputs = anchor.receive(topology.holder(1), walk_at_3(anchor, restarted))
    (refusal,) = [o.message for o in outputs if isinstance(o, Send)]
    assert isinstance(refusal, JoinRefused) and "still a member" in refusal.reason
    assert anchor.epoch == 3 and not anchor.busy(), "no grow"
    network.check()


def test_a_walk_ending_beside_a_place_taken_since_its_repair_began_hands_on_who_holds_it():
    """kill-pause at 16, seed 13: the repair of a paused member looked a neighbouring position
    up just before the killed member's place there was taken; its walk ended at the member that
    took it, stepping for the departed base holder of the last split column, and the
    ``Reclaim`` gave the newcomer the departed node at that position (not a neighbour of the
    newcomer before, it had no other way to know). Its announcements went to the dead, so did
    its next take's updates, and a repair of the replaced node broke the node's new process:
    169 s to one cube. The node ending a walk puts what it knows over the table it hands on."""
    network = cube(6)  # d = 3: columns 0 and 1 split, 2 and 3 doubled
    topology = network.check()
    holder0, leaver, newcomer = topology.holder(0), topology.holder(1), topology.holder(5)
    table = {
        peer: (address, tuple(sorted(positions)))
        for peer, (address, positions) in network.node(leaver).known_peers().items()
        if peer != holder0
    }
    table["gone"] = (address_of("gone"), (0,))  # the holder of 0 took its place since
    repairer = topology.holder(3)
    walk = LeaveWalk(
        epoch=network.node(holder0).epoch,
        dimension=3,
        leaver=leaver,
        leaver_address=address_of(leaver),
        leaver_positions=(1,),
        leaver_peers=table,
        failed=True,
        phase="route",
        position=0,
        bit=-1,
        repairer=repairer,
    )
    (reclaim,) = messages(network.node(holder0).receive(repairer, walk), newcomer)
    assert isinstance(reclaim, Reclaim) and reclaim.base_holder == leaver
    assert "gone" not in reclaim.leaver_peers
    assert reclaim.leaver_peers[holder0] == (address_of(holder0), (0,))


def lookups_answered(network: Network, repairer: str, failed: str) -> list:
    """``repairer`` is told ``failed`` failed, and its lookups are answered: what it sends
    next (its walk, or the steps it took itself), undelivered."""
    pending = [(repairer, o) for o in network.node(repairer).neighbour_failed(failed)]
    onward = []
    while pending:
        sender, output = pending.pop(0)
        if not isinstance(output, Send):
            continue
        if not isinstance(output.message, Lookup | LookupReply):
            assert sender == repairer
            onward.append(output.message)
            continue
        answered = network.node(output.to).receive(sender, output.message)
        pending += [(output.to, o) for o in answered]
    return onward


def test_a_repair_walked_before_the_cube_changed_dimension_is_started_over_when_reported():
    """kill-pause at 9, seed 6: a member's repair walked toward position 0 while another
    departure shrank the cube there; its walk, of the cube before, was dropped, and the
    repairer started over only when the runtime's fallback had grown by ``RETRY_REPAIR`` (4 s
    with the simulator's timing), and the paused member's restarted process was refused
    meanwhile. A repair walked in a cube that changed dimension since starts over at the
    next report; the one whose own walk shrank the cube goes on in the new one."""
    network = cube(8)  # d = 3, full: the holder of 5 fails, the holder of 4 repairs
    topology = network.check()
    failed, repairer = topology.holder(5), topology.holder(4)
    (walk,) = lookups_answered(network, repairer, failed)
    assert isinstance(walk, LeaveWalk) and walk.leaver == failed  # on its way to position 0
    node_r = network.node(repairer)
    assert node_r.neighbour_failed(failed) == [], "reported again: its walk is on its way"
    # another departure's change of dimension (here a grow, sent again) reaches it
    node_r.receive(topology.holder(0), Grow(epoch=4, dimension=4, root=3, resent=True))
    again = [o.message for o in node_r.neighbour_failed(failed) if isinstance(o, Send)]
    assert again and all(isinstance(m, Lookup) and m.epoch == 4 for m in again)

    network = cube(5)
    network.leave(network.check().holder(4))  # d = 3, every column doubled
    topology = network.check()
    failed, repairer = topology.holder(1), topology.holder(0)
    onward = lookups_answered(network, repairer, failed)
    assert any(isinstance(m, Shrink) and m.absent == failed for m in onward)  # its own
    assert network.node(repairer).neighbour_failed(failed) == [], "its walk goes on"


def test_a_repair_of_a_neighbour_known_to_hold_no_position_breaks_the_node() -> None:
    """A neighbour named among the holders but holding no position in the table (knowledge that
    does not fit together, seen after a shrink crossed overlapping changes) leaves a repair
    nothing to walk for: the node breaks (its runtime rejoins) instead of raising a ValueError
    out of the walk's lowest position, which a daemon would not survive."""
    network = Network(seed=3)
    network.create("n0")
    for i in range(1, 8):
        network.join(f"n{i}")
    topology = network.check()
    failed, repairer = topology.holder(5), network.node(topology.holder(4))
    hood = repairer._hood
    assert hood is not None
    hood.peers[failed] = Peer(hood.peers[failed].address, frozenset())
    with pytest.raises(RemoteProtocolError, match="holding no position"):
        repairer._run(lambda: repairer._start_repair(failed, 0))
    assert repairer.state is NodeState.BROKEN
