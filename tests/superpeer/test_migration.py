"""Migration under faults, in the simulator: what an access point hands over or forwards for a
peer that moved is never lost on the way. Found by ``deploy.delivery``'s 50 moves during a
stream on real daemons, which lost up to three quarters of what was published while the peer
moved: handed-over mail was deleted before it arrived (a rejoin dropped it with the link), and
mail that reached an access point after it forgot the peer was dropped."""

import heapq

import qel
import wire
from superpeer.sim import Simulation
from superpeer.sim.network import BOUNCE_SECONDS
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
