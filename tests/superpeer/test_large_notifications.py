"""Large publications and advertisements: every notification an access point accepts can
travel, alone and in the long answers that carry many (``Mail``, ``CatchUp``, ``AdoptLog``), and
so can every origin's ``Elements``.

Before: an update of a 600 KB resource made a notification of 1.2 MB (it carries the version it
replaces), which no frame carries. The publisher had its ``Ack``; the runtime dropped the
notification (``event=message_too_large``) and no subscriber ever heard of the update. And mail
was cut into ``Mail`` messages by count alone, so five kept notifications of 300 KB made one
message of 1.5 MB: dropped whenever it was sent, and so asked for again forever."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wire
from superpeer._batches import ENVELOPE_BYTES, fitting, messages_fitting
from superpeer.config import FRAME_FIELDS, ConfigError, config_from_mapping
from superpeer.core import CoreConfig
from superpeer.sim import Simulation
from tests.superpeer.oracle import expected_deliveries
from wire import messages as m

DC = "http://purl.org/dc/elements/1.1/"
BROAD = {"schemas": ["dc", "rdf", "http://example.org/"]}
QUERY = "X : t(X, dc:title, T)"
LITERAL = 50_000  # the wire's longest string is 64 KiB: large publications have many triples


def document(resource: int, kilobytes: int, tag: str = "") -> str:
    """About ``kilobytes`` KB of N-Triples about one subject."""
    return "\n".join(
        f'<http://example.org/d{resource}> <{DC}title> "{tag}{i} {"x" * LITERAL}" .'
        for i in range(kilobytes * 1000 // LITERAL)
    )


def publish(resource: int, kilobytes: int, op: str = "publish", tag: str = "") -> dict:
    data = document(resource, kilobytes, tag)
    return {"op": op, "peer": "pub", "id": f"n{resource}", "format": "nt", "data": data}


SETUP = [
    {"op": "join", "peer": "sub", "superpeer": 0},
    {"op": "join", "peer": "pub", "superpeer": 1},
    {"op": "advertise", "peer": "pub", **BROAD},
    {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY, "on": "change"},
]


def the_refusal(simulation: Simulation, ops: list[dict]) -> dict:
    """``ops`` applied until quiet: the one error they made."""
    for op in ops:
        simulation.apply(op)
    simulation.run_until_quiet()
    [refused] = simulation.errors
    return refused


def versions_received(simulation: Simulation) -> list[tuple[str, int]]:
    return [(n.publication.id, n.version) for n in simulation.peers["sub"].notifications]


def test_an_update_whose_notification_no_frame_carries_is_refused_and_changes_nothing():
    simulation = Simulation(2)
    refused = the_refusal(simulation, [*SETUP, publish(1, 300), publish(1, 300, "update", tag="b")])
    assert refused["op"].endswith(":update")
    assert "max_notification_bytes (524288)" in refused["error"]
    assert "carries the version it replaces" in refused["error"]
    assert versions_received(simulation) == [("n1", 0)]
    # the resource is as it was: a smaller update is version 1, and it arrives
    simulation.apply(publish(1, 100, "update", tag="c"))
    simulation.run_until_quiet()
    assert versions_received(simulation) == [("n1", 0), ("n1", 1)]


def test_a_publication_over_the_limit_is_refused_with_the_limit_named():
    simulation = Simulation(1)
    ops = [*SETUP[:1], {**SETUP[1], "superpeer": 0}, *SETUP[2:], publish(1, 600)]
    refused = the_refusal(simulation, ops)
    assert "more than max_notification_bytes" in refused["error"]
    assert "carries the version" not in refused["error"]
    assert simulation.peers["sub"].notifications == []


def test_large_mail_kept_for_a_peer_moves_with_it_in_messages_a_frame_carries():
    """Five notifications of 300 KB kept at the old access point: the handover's ``Mail`` is
    cut to fit a frame (the simulator decodes every message with the wire's limits)."""
    ops = [
        *SETUP,
        {"op": "detach", "peer": "sub"},
        *(publish(n, 300) for n in range(5)),
        {"op": "move", "peer": "sub", "superpeer": 1},
    ]
    simulation = Simulation(2)
    for op in ops:
        simulation.apply(op)
    simulation.run_until_quiet()
    assert simulation.errors == []
    assert simulation.deliveries() == expected_deliveries(2, ops)
    assert sorted(versions_received(simulation)) == [(f"n{n}", 0) for n in range(5)]
    assert simulation.messages[m.Mail.KIND] == 2, "three of 300 KB fit in a frame of 1 MiB"


def note(size: int) -> m.Expired:
    return m.Expired(count=1, reason="x" * size)


def test_chunks_keep_the_order_the_count_and_the_frame():
    items = [note(size) for size in (100, 400, 300, 50, 900, 10, 10, 10)]
    chunks = fitting(items, lambda n: n, count=3, frame_bytes=ENVELOPE_BYTES + 1000)
    assert [x for chunk in chunks for x in chunk] == items
    assert [[len(n.reason) for n in chunk] for chunk in chunks] == [
        [100, 400, 300],
        [50],
        [900, 10],
        [10, 10],
    ]


def test_an_item_larger_than_a_frame_goes_alone_and_nothing_makes_one_empty_chunk():
    big = note(5000)
    chunks = fitting([note(1), big, note(1)], lambda n: n, count=10, frame_bytes=4000)
    assert [len(chunk) for chunk in chunks] == [1, 1, 1]
    assert fitting([], lambda n: n, count=10, frame_bytes=4000) == [[]]


@given(
    st.lists(st.integers(min_value=0, max_value=3000), max_size=30),
    st.integers(min_value=1, max_value=6),
)
def test_messages_made_once_per_chunk_keep_the_order_the_count_and_the_frame(sizes, count):
    """``messages_fitting``: each message made from a whole chunk when it fits (measured once,
    and the one returned is the one measured), else its items as ``fitting`` cuts them; every
    message within ``count`` and the frame unless it holds one item too large alone."""
    items = [f"{number}:" + "x" * size for number, size in enumerate(sizes)]
    frame = ENVELOPE_BYTES + 4000

    def make(chunk: list[str]) -> m.CatchUp:
        return m.CatchUp(request="r", entries=(), lost=tuple(chunk))

    messages = list(
        messages_fitting(items, make, lambda item: make([item]), count=count, frame_bytes=frame)
    )
    assert [x for message in messages for x in message.lost] == items
    assert len(messages) >= 1, "no items: one message of none"
    for message in messages:
        assert len(message.lost) <= count
        assert len(message.lost) <= 1 or len(wire.encode(message)) <= frame - ENVELOPE_BYTES
    if all(len(wire.encode(make(items[k : k + count]))) <= frame - ENVELOPE_BYTES
           for k in range(0, len(items), count)):  # fmt: skip
        assert len(messages) == max(1, -(-len(items) // count)), "one message per chunk"


def test_the_limits_are_configurable_and_what_they_bound_fits_a_frame():
    defaults = config_from_mapping({}).limits
    assert defaults.max_notification_bytes == 512 * 1024
    assert defaults.max_elements_bytes == 768 * 1024
    small = config_from_mapping({"limits": {"max_frame_bytes": 256 * 1024}})
    assert small.limits.max_notification_bytes == 128 * 1024, "half the frame if not given"
    assert small.limits.max_elements_bytes == 192 * 1024, "three quarters of the frame"
    given = config_from_mapping(
        {"limits": {"max_notification_bytes": 900_000, "max_subscriptions_per_peer": 10}}
    )
    routing = given.node_config(tracing=False).routing
    assert (routing.max_notification_bytes, routing.max_subscriptions_per_peer) == (900_000, 10)
    assert routing.max_elements_bytes == 768 * 1024
    assert given.node_config(tracing=False).max_frame_bytes == 1024 * 1024
    frame = 1024 * 1024
    with pytest.raises(ConfigError, match="max_elements_bytes must be at most"):
        config_from_mapping({"limits": {"max_elements_bytes": frame - FRAME_FIELDS + 1}})
    with pytest.raises(ConfigError, match=r"max_subscriptions_per_peer \* \(max_subscription_id"):
        config_from_mapping({"limits": {"max_notification_bytes": 1_000_000}})
    with pytest.raises(ConfigError, match="in one frame with the ids of the subscriptions"):
        config_from_mapping({"limits": {"max_subscriptions_per_peer": 10_000}})


def test_a_peer_s_subscriptions_are_bounded_in_number_and_id_length():
    simulation = Simulation(1, config=CoreConfig(max_subscriptions_per_peer=3))
    simulation.apply({"op": "join", "peer": "sub", "superpeer": 0})
    for sid in ["a", "b", "c", "d", "c", "x" * 65, "é" * 32, "é" * 33]:
        simulation.apply({"op": "subscribe", "peer": "sub", "id": sid, "query": QUERY})
    simulation.run_until_quiet()
    refused = {e["op"].split(":")[0]: e["error"] for e in simulation.errors}
    assert set(refused) == {"5", "7", "8", "9"}, "d, the long ids, and a fourth after c again"
    assert "the most max_subscriptions_per_peer allows" in refused["5"]
    assert "65 bytes long, more than max_subscription_id_bytes (64)" in refused["7"]
    assert "the most max_subscriptions_per_peer allows" in refused["8"], "64 bytes: not too long"
    assert "66 bytes long" in refused["9"]
    assert sorted(simulation.cores["sp0"].subscriptions_of("sub")) == ["a", "b", "c"]


# -- advertisements: an origin's ``Elements`` is the whole set, in one message -----------------

RDFS = "http://www.w3.org/2000/01/rdf-schema#"


def properties(prefix: str, count: int) -> dict:
    return {"properties": [f"http://example.org/vocabulary/{prefix}{i:06d}" for i in range(count)]}


def axioms(prefix: str, count: int) -> str:
    return "".join(
        f"<http://example.org/{prefix}{i}> <{RDFS}subClassOf> <http://example.org/thing> .\n"
        for i in range(count)
    )


@pytest.mark.slow
def test_an_advertisement_that_would_make_the_origins_elements_too_large_is_refused():
    """Two peers of one super-peer advertise 570 KB each: each advertisement fits a frame, the
    origin's ``Elements`` of both (1.4 MB) does not. It was acknowledged, and dropped on its way
    to every other super-peer: the second peer's publications never reached a subscriber."""
    ops = [
        {"op": "join", "peer": "sub", "superpeer": 0},
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "join", "peer": "big", "superpeer": 1},
        {"op": "advertise", "peer": "pub", **properties("a", 14_000)},
        {"op": "advertise", "peer": "big", **properties("b", 14_000)},
    ]
    simulation = Simulation(2)
    refused = the_refusal(simulation, ops)
    assert refused["peer"] == "big"
    assert "more than max_elements_bytes (786432)" in refused["error"]
    # nothing changed: the first peer's advertisement stands everywhere; a smaller one passes
    for op in [
        {"op": "advertise", "peer": "big", "schemas": ["http://example.org/vocabulary/"]},
        {"op": "subscribe", "peer": "sub", "id": "s1", "query": QUERY},
        {
            "op": "subscribe",
            "peer": "sub",
            "id": "s2",
            "query": "X : t(X, <http://example.org/vocabulary/b000007>, T)",
        },
        *(
            {"op": "publish", "peer": peer, "id": f"{peer}1", "format": "nt", "data": data}
            for peer, data in [
                ("big", '<http://example.org/x> <http://example.org/vocabulary/b000007> "v" .'),
                ("pub", '<http://example.org/y> <http://example.org/vocabulary/a000003> "v" .'),
            ]
        ),
    ]:
        simulation.apply(op)
    simulation.run_until_quiet()
    assert simulation.errors == [refused]
    assert sorted(n.publication.id for n in simulation.peers["sub"].notifications) == ["big1"]
    elements = simulation.cores["sp0"].ads.elements("sp1")
    assert len(elements) == 14_001, "the first peer's properties and the second's schema"


def test_axioms_that_would_make_the_origins_elements_too_large_are_refused_and_taken_back():
    config = CoreConfig(max_elements_bytes=20_000)
    simulation = Simulation(2, config=config)
    ops = [
        {"op": "join", "peer": "pub", "superpeer": 1},
        {"op": "publish_schema", "peer": "pub", "data": axioms("a", 100), "format": "nt"},
        {"op": "publish_schema", "peer": "pub", "data": axioms("b", 300), "format": "nt"},
    ]
    refused = the_refusal(simulation, ops)
    assert refused["op"].endswith(":publish_schema")
    assert "after these axioms" in refused["error"]
    assert "max_elements_bytes (20000)" in refused["error"]
    assert len(simulation.cores["sp1"].schemas.of_peer("pub")) == 100
    assert len(simulation.cores["sp0"].schemas.of_origin("sp1")) == 100
