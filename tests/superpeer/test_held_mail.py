"""What an access point holds for a peer and has not had acknowledged, told to the peer as from
when its next access point must catch up if this one is lost for good (``Mailroom.floor``,
``SuperPeerNode.missing_for``, ``Clock.missing_since``)."""

import dataclasses

from superpeer.mailroom import Mailroom
from superpeer.sim import Simulation
from superpeer.store import MemoryStore
from tests.peer.helpers import notify, publication
from tests.superpeer.test_clocks import BROAD, publish
from tests.superpeer.test_partitions import QUERY
from wire import messages as m


def held(number: int, published_at: float) -> m.Notify:
    return dataclasses.replace(
        notify(publication(id=f"p{number}", subject=f"http://example.org/p{number}")),
        published_at=published_at,
    )


def notified(outputs: list) -> list[int]:
    """The delivery numbers of the notifications among ``outputs``."""
    return [
        o.message.delivery for o in outputs if isinstance(getattr(o, "message", None), m.Notify)
    ]


def test_the_floor_is_the_earliest_publication_held_until_the_mail_is_empty():
    store = MemoryStore()
    mail = Mailroom("sp0", store, window=2)
    assert mail.floor("alice") is None
    for number, at in ((0, 500.0), (1, 300.0), (2, 400.0)):
        mail.deliver("alice", held(number, at), now=1.0)  # detached: kept
    assert mail.floor("alice") == 300.0
    out = mail.attach("alice", connection=7, now=2.0)
    sent = notified(out)
    assert len(sent) == 2, "a window of two: the third waits"
    assert notified(mail.acknowledged("alice", sent[-1], now=3.0)) == [3]
    assert mail.floor("alice") == 300.0, "the third is still held: no later than its own"
    mail.acknowledged("alice", 3, now=4.0)
    assert mail.floor("alice") is None, "everything acknowledged: nothing held"
    mail.deliver("alice", held(3, 900.0), now=5.0)
    assert mail.floor("alice") == 900.0


def test_a_mail_room_started_on_a_store_with_mail_reads_its_floor_from_the_store():
    store = MemoryStore()
    before = Mailroom("sp0", store, window=8)
    before.deliver("bob", held(0, 700.0), now=1.0)
    before.deliver("bob", held(1, 600.0), now=1.0)
    after = Mailroom("sp0", store, window=8)  # a restart: the store kept the mail
    after.deliver("bob", held(2, 800.0), now=2.0)
    assert after.floor("bob") == 600.0


def test_an_access_point_tells_a_returning_peer_from_when_it_holds_its_mail():
    """A subscriber away while its access point keeps what is published: its access point's
    ``missing_for`` (its ``Welcome`` and every ``Clock`` to it) is no later than the earliest
    of them, less the margin, until the peer has acknowledged them all; then it says
    nothing."""
    simulation = Simulation(4, seed=0)
    ops = [
        {"op": "join", "peer": "pub", "superpeer": 0},
        {"op": "join", "peer": "sub", "superpeer": 2},
        {"op": "advertise", "peer": "pub", **BROAD},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {"op": "detach", "peer": "sub"},
        *[publish(n, "pub") for n in range(3)],
    ]
    for op in ops:
        simulation.apply(dict(op))
    node = simulation.nodes["sp2"]
    [peer] = node.store.local_peers()
    floor = node.mail.floor(peer)
    assert floor is not None
    assert node.missing_for(peer) == floor - node.config.catchup_margin_seconds
    simulation.apply({"op": "attach", "peer": "sub"})
    assert node.mail.floor(peer) is None
    assert node.missing_for(peer) is None
    assert len(simulation.deliveries()["sub"]) == 3
