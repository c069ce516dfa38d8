"""A restart restores its peers' subscriptions in one bulk insertion (``subscribe_many``): the
same poset, flags and refusals as subscribing them one at a time, and nothing lost."""

import gc

import pytest

import qel
from hypercup import JoinRequest
from superpeer._restoring import prepare_restore
from superpeer.actions import ToPeer, ToSuperPeer
from superpeer.core import SuperPeerCore, peer_source
from superpeer.node import NodeConfig, SuperPeerNode
from superpeer.sim import Simulation
from superpeer.sim.topology import hypercube_views
from superpeer.store import MemoryStore
from wire import encode
from wire import messages as m

DC = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
QUERIES = [
    'X : t(X, dc:creator, Y), Y contains "Nejdl"',
    "X : t(X, dc:creator, Y)",
    "X : t(X, dc:date, D), D > 2000",
    "X : t(X, dc:date, D), D > 1990",
    "X : t(X, dc:date, D), t(X, dc:title, T), (D > 2000 ; D < 1950)",
    "X : t(X, dc:date, E), E > 2000",  # the third again, with another variable
]


def q(text: str) -> qel.Subscription:
    return qel.parse_subscription(DC + text)


def core() -> SuperPeerCore:
    return SuperPeerCore("sp0", "sp0:1", hypercube_views(["sp0"])["sp0"])


def shape(core: SuperPeerCore) -> list[tuple]:
    return [
        (node.id, node.subscription.key, sorted(node.sources.items()), sorted(node.sent.items()))
        for node in core.poset
    ]


def refusals(out: list) -> list[tuple[str, str]]:
    return [
        (o.peer, o.message.request)
        for o in out
        if isinstance(o, ToPeer) and isinstance(o.message, m.Refused)
    ]


def test_subscribe_many_places_flags_and_refuses_as_subscribing_one_at_a_time_does():
    batch = [
        (f"p{n % 3}", f"s{n % 4}", q(text), n % 2 == 0)
        for n, text in enumerate(QUERIES + QUERIES[::-1])
    ]
    batch.append(("p1", "s1", q(QUERIES[3]), False))  # taken earlier in the batch: refused
    batch.append(("p1", "s1", q(QUERIES[1]), True))  # the same again: now on change
    one, many = core(), core()
    for c in (one, many):  # an id already in use before the batch
        c.attach("p0", 0.0)
        c.subscribe("p0", "s1", q("X : t(X, dc:title, T)"), 0.0, [])
    one_out: list = []
    for peer, sid, subscription, on_change in batch:
        one.subscribe(peer, sid, subscription, 1.0, one_out, on_change=on_change)
    many_out: list = []
    many.subscribe_many(batch, 1.0, many_out)
    assert shape(many) == shape(one)
    assert refusals(many_out) == refusals(one_out) != []
    for peer, sid, _, _ in batch:
        assert many.on_change(peer, sid) == one.on_change(peer, sid)


def test_a_restart_restores_every_subscription_and_resumes_the_collector():
    store = MemoryStore()
    first = SuperPeerNode("sp0", "sp0.test:7400", store, NodeConfig())
    first.start(0.0, [])
    for n, text in enumerate(QUERIES * 3):
        peer = f"p{n % 4}"
        subscribe = m.Subscribe(id=f"s{n}", subscription=q(text), on_change=n % 5 == 0)
        store.set_subscription(peer, subscribe.id, encode(subscribe), made=1.0)
    store.set_meta("alive_at", "5.0")
    restarted = SuperPeerNode("sp0", "sp0.test:7400", store, NodeConfig())
    assert gc.isenabled()
    restarted.start(10.0, [])
    assert gc.isenabled(), "the collector is resumed"
    core = restarted.core
    assert core is not None
    for n, text in enumerate(QUERIES * 3):
        node = core.poset.node_of(peer_source(f"p{n % 4}"), f"s{n}")
        assert node is not None, f"s{n} of p{n % 4} was not restored"
        assert qel.covers(node.subscription, q(text)) and qel.covers(q(text), node.subscription)
        assert core.on_change(f"p{n % 4}", f"s{n}") == (n % 5 == 0)
    assert len(core.poset) == 5, "six forms, two of them the same subscription"


def test_a_joining_restart_places_its_subscriptions_before_its_join_request_leaves():
    """The members that admit a node expect to hear from it within ``failure_seconds``: the
    decoding and placing, which took 19 s at 10^5, happen before it asks, and the join request
    leaves in the next input, at the runtime's time then."""
    store = MemoryStore()
    for n, text in enumerate(QUERIES * 2):
        subscribe = m.Subscribe(id=f"s{n}", subscription=q(text), expires=100.0 + n)
        store.set_subscription(f"p{n % 3}", subscribe.id, encode(subscribe), made=1.0)
    node = SuperPeerNode("sp9", "sp9.test:7400", store, NodeConfig())
    out = node.start(0.0, [("sp0", "sp0.test:7400")])
    assert not [o for o in out if isinstance(o, ToSuperPeer) and isinstance(o.message, JoinRequest)]
    prepared = node._prepared
    assert prepared is not None and len(prepared.poset) == 5
    assert node.next_deadline() == 0.0, "ask at once, in the next input"
    out = node.timer(20.0)  # the runtime's clock moved on meanwhile
    assert [
        o.node for o in out if isinstance(o, ToSuperPeer) and isinstance(o.message, JoinRequest)
    ] == ["sp0"]
    assert node._prepared is prepared, "kept for the core the join makes"


def test_a_catch_up_for_many_subscriptions_is_asked_in_requests_of_catchup_batch():
    """A restart with 10^5 subscriptions asked for all of them in one request of 27 MB, which no
    frame carries (the daemon died sending it). Here 5 subscriptions in requests of 2."""
    config = NodeConfig(heartbeat_seconds=0.5, failure_seconds=2.0, catchup_batch=2)
    simulation = Simulation(4, node_config=config)
    simulation.apply({"op": "join", "peer": "pub", "superpeer": 3})
    simulation.apply({"op": "advertise", "peer": "pub", "schemas": ["dc"]})
    simulation.apply({"op": "join", "peer": "sub", "superpeer": 0})
    for n in range(5):
        query = f'X : t(X, dc:creator, Y), Y contains "author{n}"'
        simulation.apply({"op": "subscribe", "peer": "sub", "id": f"s{n}", "query": query})
    simulation.apply({"op": "superpeer_bounce", "superpeer": 0})
    assert simulation.messages["sp.catchup"] == 3 * 3, "to each of 3 others, 2 + 2 + 1"
    simulation.apply(
        {
            "op": "publish",
            "peer": "pub",
            "id": "paper",
            "format": "nt",
            "data": '<http://example.org/p> <http://purl.org/dc/elements/1.1/creator> "author4" .',
        }
    )
    assert simulation.errors == []
    assert simulation.deliveries()["sub"] == ["paper"]


@pytest.mark.parametrize("collect_from", [1, 10**9])
def test_a_large_prepared_restore_leaves_nothing_young_for_the_collector(collect_from):
    """The collector's first pass over a restore's objects took 1.97 s at 10^5: a large restore
    pays it before the join request leaves, not during the join handshake."""
    store = MemoryStore()
    for n, text in enumerate(QUERIES):
        subscribe = m.Subscribe(id=f"s{n}", subscription=q(text))
        store.set_subscription("p", subscribe.id, encode(subscribe), made=1.0)
    prepared = prepare_restore(store, collect_from=collect_from)
    young = [*gc.get_objects(generation=0), *gc.get_objects(generation=1)]
    nodes = {id(node) for node in prepared.poset}
    assert len(nodes) == 5
    left_young = [o for o in young if id(o) in nodes]
    assert bool(left_young) == (collect_from > len(QUERIES))
