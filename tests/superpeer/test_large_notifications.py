"""Large publications: every notification an access point accepts can travel, alone and in the
long answers that carry many (``Mail``, ``CatchUp``, ``AdoptLog``).

Before: an update of a 600 KB resource made a notification of 1.2 MB (it carries the version it
replaces), which no frame carries. The publisher had its ``Ack``; the runtime dropped the
notification (``event=message_too_large``) and no subscriber ever heard of the update. And mail
was cut into ``Mail`` messages by count alone, so five kept notifications of 300 KB made one
message of 1.5 MB: dropped whenever it was sent, and so asked for again forever."""

import pytest

from superpeer._batches import ENVELOPE_BYTES, fitting
from superpeer.config import FRAME_HEADROOM, ConfigError, config_from_mapping
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


def versions_received(simulation: Simulation) -> list[tuple[str, int]]:
    return [(n.publication.id, n.version) for n in simulation.peers["sub"].notifications]


def test_an_update_whose_notification_no_frame_carries_is_refused_and_changes_nothing():
    simulation = Simulation(2)
    ops = [*SETUP, publish(1, 300), publish(1, 300, "update", tag="b")]
    for op in ops:
        simulation.apply(op)
    simulation.run_until_quiet()
    [refused] = simulation.errors
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
    for op in [*SETUP[:1], {**SETUP[1], "superpeer": 0}, *SETUP[2:], publish(1, 600)]:
        simulation.apply(op)
    simulation.run_until_quiet()
    [refused] = simulation.errors
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


def test_the_notification_limit_is_configurable_and_leaves_room_in_a_frame():
    assert config_from_mapping({}).limits.max_notification_bytes == 512 * 1024
    small = config_from_mapping({"limits": {"max_frame_bytes": 256 * 1024}})
    assert small.limits.max_notification_bytes == 128 * 1024, "half the frame if not given"
    given = config_from_mapping({"limits": {"max_notification_bytes": 900_000}})
    assert given.node_config(tracing=False).routing.max_notification_bytes == 900_000
    assert given.node_config(tracing=False).max_frame_bytes == 1024 * 1024
    with pytest.raises(ConfigError, match=f"max_frame_bytes - {FRAME_HEADROOM}"):
        config_from_mapping({"limits": {"max_notification_bytes": 1024 * 1024}})
