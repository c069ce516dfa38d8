"""The message codec: round trips of every message type, and strict, clear rejection of anything
else (fuzzed with random bytes and random msgpack objects: only ``WireError``, never a crash)."""

import contextlib
import dataclasses

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qel
import wire
from tests.strategies import advertisements, publications, schema_axioms, subscriptions
from wire import codec
from wire import messages as m

V = wire.PROTOCOL_VERSION
RDFS = "http://www.w3.org/2000/01/rdf-schema#"


@st.composite
def any_message(draw: st.DrawFn) -> object:
    text = st.text(max_size=20)
    choice = draw(st.integers(0, 13))
    if choice == 0:
        return m.Advertise(advertisement=draw(advertisements()))
    if choice == 1:
        return m.Subscribe(
            id=draw(text),
            subscription=draw(subscriptions(repeat_predicates=True)),
            on_change=draw(st.booleans()),
        )
    if choice == 2:
        return m.Unsubscribe(id=draw(text))
    if choice == 3:
        return m.Publish(publication=draw(publications()))
    if choice == 4:
        return m.Leave()
    if choice == 5:
        return m.Notify(
            publication=draw(publications()),
            subscriptions=tuple(draw(st.lists(text, max_size=3))),
            owner=draw(text),
            access_point=draw(text),
            origin=draw(text),
            hops=draw(st.integers(0, 20)),
            published_at=draw(st.floats(allow_nan=False, allow_infinity=False)),
            steady=tuple(draw(st.lists(text, max_size=2))),
        )
    if choice == 6:
        return m.Ack(request=draw(text))
    if choice == 7:
        return m.Refused(request=draw(text), reason=draw(text))
    if choice == 8:
        ad = draw(advertisements())
        return m.Elements(
            origin=draw(text),
            origin_position=draw(st.integers(0, 2**20)),
            elements=tuple(sorted(ad.elements, key=repr)),
            version=draw(st.integers(1, 2**31)),
            axioms=tuple(sorted(draw(st.one_of(st.just(frozenset()), schema_axioms())), key=repr)),
        )
    if choice == 9:
        return m.Forward(
            id=draw(text),
            subscription=draw(subscriptions()),
            toward=tuple(draw(st.lists(st.tuples(text, st.integers(0, 1023)), max_size=3))),
        )
    if choice == 10:
        return m.Retract(id=draw(text))
    if choice == 12:
        return m.PublishSchema(axioms=tuple(sorted(draw(schema_axioms()), key=repr)))
    if choice == 13:
        return m.Reconnected(
            origin=draw(text),
            origin_position=draw(st.integers(0, 1023)),
            neighbour=draw(text),
            positions=tuple(draw(st.lists(st.integers(0, 1023), max_size=4))),
            since=draw(st.floats(allow_nan=False, allow_infinity=False)),
        )
    return m.Notification(
        origin=draw(text),
        origin_position=draw(st.integers(0, 1023)),
        publication=draw(publications()),
        owner=draw(text),
        access_point=draw(text),
        hops=draw(st.integers(0, 20)),
        published_at=draw(st.floats(allow_nan=False, allow_infinity=False)),
        extension=draw(st.booleans()),
    )


@settings(max_examples=300)
@given(any_message(), st.text(max_size=10))
def test_every_message_round_trips(message, message_id):
    data = wire.encode(message, message_id)
    decoded, decoded_id = wire.decode(data)
    assert decoded == message and decoded_id == message_id
    assert type(decoded) is type(message)


def _plain_encoding(message: object, message_id: str) -> bytes:
    """The encoding by its definition: the envelope and the fields' plain forms, in one pack."""
    fields = wire.codec._FIELDS[type(message)]
    payload = {name: to_plain(getattr(message, name)) for name, (to_plain, _) in fields}
    return msgpack.packb([V, message.KIND, message_id, payload], use_bin_type=True)


def _same_encoding(data: bytes, message: object, message_id: str) -> bool:
    """``data`` is the plain encoding of ``message``, its map's entries perhaps in another order
    (a publication is spliced in last, packed once; a mail number after it, under a map header
    of 3 bytes: ``wire.renumbered``): the same length but for that header, the same values."""
    plain = _plain_encoding(message, message_id)
    names = [f.name for f in dataclasses.fields(message)]
    wider = 2 if codec.NUMBERED in names and len(names) < 16 else 0
    return len(data) == len(plain) + wider and msgpack.unpackb(data) == msgpack.unpackb(plain)


@settings(max_examples=300)
@given(any_message(), st.lists(st.text(max_size=10), min_size=1, max_size=3))
def test_the_encoding_kept_per_message_is_the_plain_one(message, message_ids):
    # the same object again (a relay to each child) takes its fields' bytes from the cache
    for message_id in message_ids:
        assert _same_encoding(wire.encode(message, message_id), message, message_id)


def test_a_publication_is_packed_once_for_every_message_that_carries_it(monkeypatch):
    publication = qel.Publication(
        qel.URI("http://example.org/r"),
        frozenset({(qel.URI("http://example.org/p"), qel.Literal("x" * 100))}),
        "alice",
        "r1",
    )
    first = m.Notify(
        publication=publication,
        subscriptions=("s",),
        owner="alice",
        access_point="a:1",
        origin="sp0",
        hops=0,
        published_at=1.0,
    )
    again = dataclasses.replace(first, delivery=7)  # another object, the same publication
    before = codec._pack
    packed = []

    def counting(value):
        packed.append(value)
        return before(value)

    monkeypatch.setattr(codec, "_pack", counting)
    data = [wire.encode(first, "1"), wire.encode(again, "2")]
    monkeypatch.undo()
    assert sum(1 for value in packed if isinstance(value, dict) and "statements" in value) == 1
    assert _same_encoding(data[0], first, "1") and _same_encoding(data[1], again, "2")
    assert wire.decode(data[1]) == (again, "2")


@settings(max_examples=100)
@given(
    publication=publications(),
    subscriptions=st.lists(st.text(max_size=8), min_size=1, max_size=3),
    delivery=st.integers(0, 2**40),
    number=st.integers(0, 2**64 - 1),
)
def test_a_notification_renumbered_is_what_encoding_it_with_that_number_makes(
    publication, subscriptions, delivery, number
):
    # an access point keeps a notification's encoding as mail and sends it with the number the
    # mail gave it, changed in the bytes (``wire.renumbered``) rather than encoded again
    notify = m.Notify(
        publication=publication,
        subscriptions=tuple(subscriptions),
        owner="alice",
        access_point="a:1",
        origin="sp0",
        hops=2,
        published_at=1.5,
        delivery=delivery,
        expires=9.0,
    )
    numbered = dataclasses.replace(notify, delivery=number)
    data = wire.renumbered(wire.encode(notify), m.Notify, number)
    assert data == wire.encode(numbered)
    assert wire.decode(data) == (numbered, "")
    # not of that layout: with an id, a message of another class, mail an earlier version kept
    assert wire.renumbered(wire.encode(notify, "7"), m.Notify, number) is None
    assert wire.renumbered(wire.encode(m.Ack(request="x")), m.Ack, number) is None
    earlier = _plain_encoding(notify, "")
    assert wire.decode(earlier) == (notify, "")
    assert wire.renumbered(earlier, m.Notify, number) is None


def test_a_message_with_a_mutable_field_is_encoded_afresh():
    from hypercup import messages as hm

    welcome = hm.Welcome(epoch=1, dimension=1, position=1, peers={"a": ("a:1", (0,))})
    first = wire.encode(welcome, "1")
    welcome.peers["b"] = ("b:1", (3,))  # nothing does this, but nothing forbids it either
    assert _same_encoding(wire.encode(welcome, "2"), welcome, "2")
    assert wire.encode(welcome, "2") != first


def test_language_objects_keep_their_exact_values():
    subscription = qel.parse_subscription(
        "X : t(X, dc:date, D), D > 0.1, D <= 123456789012345678901234567890"
    )
    decoded, _ = wire.decode(wire.encode(m.Subscribe(id="s", subscription=subscription)))
    assert decoded.subscription == subscription
    assert decoded.subscription.key == subscription.key


@settings(max_examples=500)
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash_the_decoder(data):
    with contextlib.suppress(wire.WireError):
        wire.decode(data)


plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@st.composite
def plausible_envelopes(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from([*wire.kinds(), "nope", 7]))
    payload = draw(
        st.dictionaries(
            st.sampled_from(["id", "subscription", "publication", "toward", "origin", "hops", "x"]),
            plain,
            max_size=6,
        )
    )
    version = draw(st.sampled_from([wire.PROTOCOL_VERSION, wire.PROTOCOL_VERSION, 2, "1"]))
    return msgpack.packb([version, kind, draw(st.text(max_size=5)), payload], use_bin_type=True)


@pytest.mark.slow
@settings(max_examples=1000)
@given(plausible_envelopes() | plain.map(lambda v: msgpack.packb(v, use_bin_type=True)))
def test_random_msgpack_objects_give_wire_errors_only(data):
    with contextlib.suppress(wire.WireError):
        wire.decode(data)


@settings(max_examples=300)
@given(any_message(), st.data())
def test_corrupting_a_valid_message_gives_a_wire_error_or_a_valid_message(message, data):
    encoded = bytearray(wire.encode(message))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    try:
        decoded, _ = wire.decode(bytes(encoded))
    except wire.WireError:
        return
    assert wire.decode(wire.encode(decoded))[0] == decoded


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xc1", "not a msgpack message"),
        (msgpack.packb([V, "peer.leave", ""]), "a message is [version, kind, id, fields]"),
        (
            msgpack.packb([V + 1, "peer.leave", "", {}]),
            f"protocol version {V + 1} is not supported",
        ),
        (msgpack.packb([V, "peer.hack", "", {}]), "unknown message kind 'peer.hack'"),
        (msgpack.packb([V, "peer.unsubscribe", "", {}]), "missing fields ['id']"),
        (
            msgpack.packb([V, "peer.unsubscribe", "", {"id": "a", "x": 1}]),
            "unexpected fields ['x']",
        ),
        (
            msgpack.packb([V, "peer.unsubscribe", "", {"id": 5}]),
            "peer.unsubscribe.id: expected a string, got int",
        ),
        (msgpack.packb([V, "peer.unsubscribe", 5, {"id": "a"}]), "a message id is a string"),
        (
            msgpack.packb(
                [
                    V,
                    "peer.subscribe",
                    "",
                    {
                        "id": "a",
                        "subscription": {
                            "subject": "x",
                            "answer": [],
                            "patterns": [],
                            "constraint": [[]],
                        },
                    },
                ]
            ),
            "needs at least one triple pattern",
        ),
        (
            msgpack.packb(
                [
                    V,
                    "peer.subscribe",
                    "",
                    {
                        "id": "a",
                        "subscription": {
                            "subject": "x",
                            "answer": [],
                            "patterns": [["http://p", "y"]],
                            "constraint": [[["y", ">", ["l", "b", None, None]]]],
                        },
                    },
                ]
            ),
            "compares numbers or dates",
        ),
        (
            msgpack.packb(
                [
                    V,
                    "peer.publish",
                    "",
                    {
                        "publication": {
                            "subject": "http://s",
                            "statements": [],
                            "publisher": "",
                            "id": "",
                        },
                        "change": "publish",
                    },
                ]
            ),
            "has no triples",
        ),
        (
            msgpack.packb(
                [
                    V,
                    "peer.publish_schema",
                    "",
                    {"axioms": [["subClassOf", "http://x/C", RDFS + "Resource"]]},
                ]
            ),
            "own vocabulary",
        ),
        (
            msgpack.packb([V, "peer.publish_schema", "", {"axioms": [["sameAs", "a:b", "c:d"]]}]),
            "an axiom is one of",
        ),
    ],
)
def test_malformed_messages_say_what_is_wrong(payload, message):
    with pytest.raises(wire.WireError) as caught:
        wire.decode(payload)
    assert message in str(caught.value)


def test_limits_are_enforced_and_named():
    big = wire.encode(m.Ack(request="x" * 5000))
    with pytest.raises(wire.WireError, match="max_frame_bytes"):
        wire.decode(big, wire.WireLimits(max_frame_bytes=1000))
    with pytest.raises(wire.WireError, match="not a msgpack message"):
        wire.decode(big, wire.WireLimits(max_string_bytes=100))
    nested = msgpack.packb([V, "peer.ack", "", {"request": [[[[[[["x"]]]]]]]}])
    with pytest.raises(wire.WireError, match="max_depth"):
        wire.decode(nested, wire.WireLimits(max_depth=4))
    many = msgpack.packb([V, "peer.ack", "", {"request": list(range(2000))}])
    with pytest.raises(wire.WireError, match="not a msgpack message"):
        wire.decode(many, wire.WireLimits(max_collection_items=1000))


def _nested(depth: int, text: str) -> object:
    value: object = text
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@settings(max_examples=200)
@given(
    depth=st.integers(0, 12),
    limit=st.integers(0, 10),
    text=st.text(max_size=40),
    filler=st.one_of(
        st.binary(max_size=40),
        st.binary(min_size=codec._COUNTED_BYTES, max_size=codec._COUNTED_BYTES + 64),
    ),
)
def test_the_depth_is_refused_exactly_as_walking_every_container_would(depth, limit, text, filler):
    # the decoder walks a short message only when its bytes could hold more than ``max_depth``
    # maps and arrays (``codec._containers_at_most``: strings, binaries and numbers may hold
    # such bytes too), and a long one (over ``codec._COUNTED_BYTES``: a file chunk) always;
    # whatever they hold, a message is refused for its depth exactly when the walk refuses it
    request = [_nested(depth, text), filler, 2**40, -(2**20)]
    data = msgpack.packb([V, "peer.ack", "", {"request": request}], use_bin_type=True)
    walked = True
    try:
        codec._check_depth(msgpack.unpackb(data)[3], limit, "peer.ack")
    except wire.WireError:
        walked = False
    limits = wire.WireLimits(max_depth=limit)
    if walked:
        with pytest.raises(wire.WireError) as caught:  # a list is no request: refused later
            wire.decode(data, limits)
        assert "max_depth" not in str(caught.value)
    else:
        with pytest.raises(wire.WireError, match="max_depth"):
            wire.decode(memoryview(data), limits)


def test_every_thread_packs_with_a_packer_of_its_own():
    import threading

    publication = qel.Publication(
        qel.URI("http://example.org/r"),
        frozenset({(qel.URI("http://example.org/p"), qel.Literal("v" * 3000))}),
        "alice",
        "r1",
    )
    messages = [m.Ack(request=f"publish r{k}") for k in range(300)]
    results: dict[int, list[bytes]] = {}

    def encode_all(worker: int) -> None:
        results[worker] = [wire.encode(message, str(worker)) for message in messages] + [
            codec._pack({"p": model_plain, "w": worker}) for _ in range(50)
        ]

    model_plain = wire.plain_publication(publication)
    threads = [threading.Thread(target=encode_all, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for worker, got in results.items():
        expected = [wire.encode(message, str(worker)) for message in messages]
        assert got[: len(messages)] == expected
        plain = msgpack.packb({"p": model_plain, "w": worker}, use_bin_type=True)
        assert got[len(messages) :] == [plain] * 50


def test_every_hypercup_message_the_protocol_sends_round_trips():
    from hypercup.events import Send
    from hypercup.testing import Network

    captured = []

    class Capturing(Network):
        def _process(self, node_id, outputs):
            captured.extend(o.message for o in outputs if isinstance(o, Send))
            super()._process(node_id, outputs)

    network = Capturing(seed=3)
    network.create("n0")
    for number in range(1, 11):
        network.join(f"n{number}")
    network.leave("n4")
    network.fail("n7")
    network.leave("n0")
    kinds = {type(message).KIND for message in captured}
    assert len(kinds) >= 12, kinds
    for message in captured:
        decoded, _ = wire.decode(wire.encode(message, "h"))
        assert decoded == message


def test_a_message_class_refusing_its_fields_is_a_wire_error():
    bad = msgpack.packb([V, "hypercup.update_ack", "", {"epoch": 0, "ack_id": -1}])
    with pytest.raises(wire.WireError, match=r"hypercup\.update_ack"):
        wire.decode(bad)
