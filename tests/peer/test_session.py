"""The sans-IO session: handshake, secure identification (against the access point's real
``crypto.Verifier``, no sockets), FIFO answer matching with notifications in between, look-ups
matched by id whenever their answers come, protocol violations, timers, the re-send plan and the
backoff."""

import dataclasses
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

import crypto
import qel
import wire
from crypto import MemoryRegistry
from peer.session import (
    Answered,
    Backoff,
    Ended,
    Established,
    Forget,
    Identification,
    LookupAnswered,
    LookupExpired,
    Notified,
    Registration,
    Reply,
    RequestTooLarge,
    Session,
    SessionError,
    StaleLookupAnswer,
    Store,
    new_lookup_id,
    plan_resend,
)
from tests.peer.helpers import TITLE_QUERY, notify, publication
from wire import messages as m
from wire.framing import FrameDecoder, Link, frame
from wire.requests import request_label

QUERY = qel.parse_subscription(TITLE_QUERY)
WELCOME = m.Welcome(node_id="sp0", address="127.0.0.1:7400")


def access_point_frames(*messages: object) -> bytes:
    return b"".join(frame(wire.encode(x)) for x in messages)


def established(timeout: float = 30.0, locate_timeout: float = 10.0) -> Session[str]:
    session: Session[str] = Session("peer-a", timeout=timeout, locate_timeout=locate_timeout)
    hello = session.hello(now=0.0)
    server = Link(accepting=True)
    [received] = server.receive_data(hello)
    assert received.message == m.Hello(
        role="peer", node_id="peer-a", address="", protocol=wire.PROTOCOL_VERSION
    )
    assert session.receive_data(access_point_frames(WELCOME)) == [
        Established("sp0", "127.0.0.1:7400")
    ]
    assert session.established
    return session


def send(session: Session[str], message: object, token: str, now: float = 0.0) -> None:
    session.send(session.prepare(message), token, now)


def test_labels_name_requests_as_the_access_point_does():
    assert request_label(m.Advertise(advertisement=qel.parse_advertisement({}))) == "advertise"
    assert request_label(m.Subscribe(id="s1", subscription=QUERY)) == "subscribe s1"
    assert request_label(m.Unsubscribe(id="s1")) == "unsubscribe s1"
    assert request_label(m.Publish(publication=publication(id="n7"))) == "publish n7"
    assert request_label(m.Locate(id="l1", public_id="bob")) == "locate l1"


def test_answers_complete_requests_in_order_with_notifications_in_between():
    session = established()
    send(session, m.Subscribe(id="s1", subscription=QUERY), "first")
    send(session, m.Publish(publication=publication()), "second")
    note = notify()
    events = session.receive_data(
        access_point_frames(
            note,
            m.Ack(request="subscribe s1"),
            note,
            m.Refused(request="publish n1", reason="outside"),
        ),
    )
    assert events == [
        Notified(note),
        Answered("first", m.Ack(request="subscribe s1"), "subscribe s1"),
        Notified(note),
        Answered("second", m.Refused(request="publish n1", reason="outside"), "publish n1"),
    ]
    assert session.close() == []


def test_frames_split_anywhere_give_the_same_events():
    welcome = access_point_frames(WELCOME)
    rest = access_point_frames(notify(), m.Ack(request="advertise"))
    for cut in range(len(welcome) + 1):
        session: Session[str] = Session("peer-a")
        session.hello(0.0)
        events = session.receive_data(welcome[:cut]) + session.receive_data(welcome[cut:])
        assert events == [Established("sp0", "127.0.0.1:7400")]
    for cut in range(len(rest) + 1):
        session = established()
        send(session, m.Advertise(advertisement=qel.parse_advertisement({})), "ad")
        events = session.receive_data(rest[:cut]) + session.receive_data(rest[cut:])
        assert [type(e) for e in events] == [Notified, Answered]


def test_the_label_is_reported_but_the_order_decides():
    session = established()
    send(session, m.Unsubscribe(id="s1"), "token")
    [event] = session.receive_data(access_point_frames(m.Ack(request="something else")))
    assert event == Answered("token", m.Ack(request="something else"), "unsubscribe s1")


def test_an_answer_with_nothing_pending_is_a_violation_answered_with_a_link_error():
    session = established()
    [event] = session.receive_data(access_point_frames(m.Ack(request="advertise")))
    assert isinstance(event, Ended)
    assert "with no request pending" in event.reason
    reply, _ = wire.decode(event.reply[4:])
    assert isinstance(reply, m.LinkError)
    assert not session.established
    with pytest.raises(SessionError):
        session.receive_data(b"")


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (m.Goodbye(reason="maintenance"), "the access point said goodbye (maintenance)"),
        (m.LinkError(reason="bad frame"), "the access point reported an error: bad frame"),
        (m.Unsubscribe(id="s1"), "protocol violation: unexpected peer.unsubscribe"),
        (WELCOME, "protocol violation: link.welcome after the handshake"),
    ],
)
def test_what_ends_an_established_session(message, reason):
    session = established()
    send(session, m.Unsubscribe(id="s1"), "in doubt")
    events = session.receive_data(access_point_frames(message, m.Ack(request="x")))
    assert len(events) == 1, "nothing after the end is looked at"
    assert isinstance(events[0], Ended)
    assert events[0].reason.startswith(reason)
    assert session.close() == ["in doubt"]


def test_a_refused_handshake_ends_the_session():
    session: Session[str] = Session("peer-a")
    session.hello(0.0)
    [event] = session.receive_data(access_point_frames(m.LinkError(reason="full")))
    assert isinstance(event, Ended)
    assert event.reason == "handshake failed: refused: full"


def test_requests_need_an_established_session():
    session: Session[str] = Session("peer-a")
    outgoing = session.prepare(m.Unsubscribe(id="s1"))
    with pytest.raises(SessionError):
        session.send(outgoing, "token", 0.0)
    with pytest.raises(SessionError):
        session.leave()


def test_after_leave_nothing_is_sent_but_earlier_answers_are_read():
    session = established()
    send(session, m.Unsubscribe(id="s1"), "earlier")
    data = session.leave()
    assert wire.decode(data[4:]) == (m.Leave(), "")
    with pytest.raises(SessionError):
        send(session, m.Unsubscribe(id="s2"), "too late")
    [answered] = session.receive_data(access_point_frames(m.Ack(request="unsubscribe s1")))
    assert isinstance(answered, Answered)
    assert session.get_timer() is None


def test_requests_too_large_for_the_wire_are_refused_before_sending():
    session: Session[str] = Session("peer-a", limits=wire.WireLimits(max_frame_bytes=300))
    with pytest.raises(RequestTooLarge, match="too large for the network"):
        session.prepare(m.Publish(publication=publication(title="x" * 400)))
    narrow: Session[str] = Session("peer-a", limits=wire.WireLimits(max_string_bytes=100))
    with pytest.raises(RequestTooLarge):
        narrow.prepare(m.Publish(publication=publication(title="y" * 101)))


def test_the_welcome_must_come_within_the_timeout():
    session: Session[str] = Session("peer-a", timeout=5.0)
    session.hello(now=10.0)
    assert session.get_timer() == 15.0
    assert session.handle_timer(14.9) == []
    [ended] = session.handle_timer(15.0)
    assert isinstance(ended, Ended)
    assert ended.reason == "no welcome from the access point within 5 s"


def test_the_oldest_request_must_be_answered_within_the_timeout():
    session = established(timeout=5.0)
    assert session.get_timer() is None
    send(session, m.Unsubscribe(id="a"), "a", now=1.0)
    send(session, m.Unsubscribe(id="b"), "b", now=3.0)
    assert session.get_timer() == 6.0
    session.receive_data(access_point_frames(m.Ack(request="unsubscribe a")))
    assert session.get_timer() == 8.0
    assert session.handle_timer(7.9) == []
    [ended] = session.handle_timer(8.0)
    assert isinstance(ended, Ended)
    assert "no answer to 'unsubscribe b'" in ended.reason
    assert session.close() == ["b"]
    assert session.get_timer() is None


def frames_of(data: bytes) -> list[object]:
    """The messages of what the session sends, in order."""
    return [wire.decode(payload)[0] for payload in FrameDecoder().feed(data)]


def delaying(ack_every: int = 16, ack_delay: float = 0.005) -> Session[str]:
    session: Session[str] = Session("peer-a", ack_every=ack_every, ack_delay=ack_delay)
    session.hello(now=0.0)
    session.receive_data(access_point_frames(WELCOME))
    return session


def numbered(delivery: int) -> m.Notify:
    return dataclasses.replace(notify(), delivery=delivery)


def test_stored_notifications_share_one_delivered_a_delay_after_the_first():
    session = delaying()
    assert session.delivered(numbered(1), 1.000) == b"", "it waits"
    assert session.get_timer() == 1.005, "from the first stored"
    assert session.delivered(numbered(2), 1.002) == b""
    assert session.delivered(numbered(3), 1.004) == b""
    assert session.handle_timer(1.0049) == []
    [reply] = session.handle_timer(1.005)
    assert isinstance(reply, Reply)
    assert frames_of(reply.data) == [m.Delivered(through=3)], "one for the three"
    assert session.get_timer() is None
    assert session.handle_timer(2.0) == [], "nothing is acknowledged twice"


def test_ack_every_stored_notifications_are_acknowledged_at_once():
    session = delaying(ack_every=4)
    assert session.delivered(numbered(2), 0.0, count=2) == b""
    assert frames_of(session.delivered(numbered(4), 0.0, count=2)) == [m.Delivered(through=4)]
    assert session.get_timer() is None


def test_no_delay_acknowledges_each_group_as_it_is_stored():
    session = delaying(ack_delay=0.0)
    assert frames_of(session.delivered(numbered(1), 0.0)) == [m.Delivered(through=1)]
    assert frames_of(session.delivered(numbered(2), 0.0)) == [m.Delivered(through=2)]


@pytest.mark.parametrize("then", ["request", "leave", "clock", "transfer"])
def test_whatever_the_session_sends_next_carries_the_owed_delivered_first(then):
    """``Delivered`` precedes anything that follows the notifications it acknowledges (a
    ``Leave``, a move's requests, a clock answer, a transfer step), as it did when it was sent
    at once."""
    session = delaying()
    session.delivered(numbered(7), 0.0)
    if then == "request":
        data = session.send(session.prepare(m.Unsubscribe(id="s1")), "t", 0.001)
        message: object = m.Unsubscribe(id="s1")
    elif then == "leave":
        data, message = session.leave(), m.Leave()
    elif then == "clock":
        clock = m.Clock(wall=5.0)
        data, message = session.clock_answer(clock, 6.0), m.Clock(wall=6.0, echo=5.0)
    else:
        data, message = (
            session.transfer(m.Collected(rendezvous="r", ok=True)),
            m.Collected(rendezvous="r", ok=True),
        )
    assert frames_of(data) == [m.Delivered(through=7), message]
    assert session.get_timer() != 0.005, "nothing owed any more"
    assert session.handle_timer(0.005) == []


def test_a_repeat_or_an_unnumbered_notification_owes_nothing_more_than_before():
    session = delaying()
    assert session.delivered(notify(), 0.0) == b"", (
        "delivery 0: an access point that does not number"
    )
    assert session.get_timer() is None
    session.delivered(numbered(5), 0.0)
    session.delivered(numbered(3), 0.001)  # an older one found again in the inbox
    [reply] = session.handle_timer(0.005)
    assert frames_of(reply.data) == [m.Delivered(through=5)], "cumulative: the highest"


def test_a_farewell_acknowledges_everything_stored_whether_its_delivered_waited_or_went():
    """A peer that stops says once what its inbox holds: the ``Delivered`` given to the caller
    (perhaps still in its queue, unwritten) and the one that waits, in one cumulative frame."""
    session = delaying()
    assert session.farewell() == b"", "nothing stored: nothing to say"
    given = session.delivered(numbered(2), 0.0, count=16)
    assert frames_of(given) == [m.Delivered(through=2)]
    assert frames_of(session.farewell()) == [m.Delivered(through=2)], "perhaps never written"
    session.delivered(numbered(3), 0.001)
    assert frames_of(session.farewell()) == [m.Delivered(through=3)]
    assert session.get_timer() is None, "nothing waits after it"


def test_an_ended_session_says_no_farewell():
    """After a goodbye or an error the access point reads nothing more."""
    session = delaying()
    session.delivered(numbered(1), 0.0)
    session.close()
    assert session.farewell() == b""


def test_a_closed_session_owes_no_delivered():
    """What was stored and not acknowledged comes again on the next connection, and the client
    finds it in its inbox."""
    session = delaying()
    session.delivered(numbered(1), 0.0)
    session.close()
    assert session.get_timer() is None
    assert session.handle_timer(1.0) == []


def test_the_resend_plan_puts_the_advertisement_first_then_withdrawals_then_subscriptions():
    advertisement = qel.parse_advertisement({"schemas": ["dc"]})
    other = qel.parse_subscription("X : t(X, dc:creator, C)")
    plan = plan_resend(advertisement, {"s2": other, "s1": QUERY}, ["gone", "also-gone"])
    assert plan == [
        m.Advertise(advertisement=advertisement),
        m.Unsubscribe(id="also-gone"),
        m.Unsubscribe(id="gone"),
        m.Subscribe(id="s1", subscription=QUERY),
        m.Subscribe(id="s2", subscription=other),
    ]


def test_the_resend_plan_sends_the_schemas_after_the_advertisement_and_on_change():
    advertisement = qel.parse_advertisement({"schemas": ["dc"]})
    axioms = qel.parse_schema(
        "<http://example.org/A> <http://www.w3.org/2000/01/rdf-schema#subClassOf> "
        "<http://example.org/B> .",
        "nt",
    )
    assert plan_resend(
        advertisement, {"s1": QUERY, "s2": QUERY}, [], axioms=axioms, on_change=frozenset({"s2"})
    ) == [
        m.Advertise(advertisement=advertisement),
        m.PublishSchema(axioms=tuple(axioms)),
        m.Subscribe(id="s1", subscription=QUERY),
        m.Subscribe(id="s2", subscription=QUERY, on_change=True),
    ]


def test_the_resend_plan_never_withdraws_a_subscription_it_sends_again():
    empty = qel.parse_advertisement({})
    assert plan_resend(empty, {"s1": QUERY}, ["s1", "gone"]) == [
        m.Advertise(advertisement=empty),
        m.Unsubscribe(id="gone"),
        m.Subscribe(id="s1", subscription=QUERY),
    ]


def test_the_resend_plan_sends_kept_publications_last_after_the_subscriptions_they_may_match():
    empty = qel.parse_advertisement({})
    [publication] = qel.parse_publications(
        '<http://example.org/r> <http://purl.org/dc/elements/1.1/title> "T" .',
        "nt",
        publisher="p",
        id="r",
    )
    kept = m.Publish(publication=publication, again=True)
    withdrawn = {"old": (QUERY, 1.0, 2.0)}
    assert plan_resend(empty, {"s1": QUERY}, [], withdrawn=withdrawn, kept=[kept]) == [
        m.Advertise(advertisement=empty),
        m.Unsubscribe(id="old", subscription=QUERY, active_since=1.0, withdrawn_at=2.0),
        m.Subscribe(id="s1", subscription=QUERY),
        kept,
    ]


def test_backoff_doubles_up_to_the_cap_with_jitter_and_resets():
    low = Backoff(1.0, 8.0, lambda: 0.0)
    assert [low.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    high = Backoff(1.0, 8.0, lambda: 0.999)
    delays = [high.next_delay() for _ in range(6)]
    assert delays == pytest.approx([1.0, 2.0, 4.0, 8.0, 8.0, 8.0], rel=1e-3)
    high.reset()
    assert high.next_delay() == pytest.approx(1.0, rel=1e-3)


@given(st.lists(st.sampled_from(["request", "notify", "answer"]), max_size=40))
def test_answers_always_go_to_the_oldest_pending_request(script):
    session = established()
    sent: list[str] = []
    answered: list[str] = []
    for number, step in enumerate(script):
        if step == "request":
            token = f"t{number}"
            send(session, m.Unsubscribe(id=token), token)
            sent.append(token)
        elif step == "notify":
            assert session.receive_data(access_point_frames(notify())) == [Notified(notify())]
        elif len(answered) < len(sent):
            [event] = session.receive_data(access_point_frames(m.Ack(request="x")))
            assert isinstance(event, Answered)
            answered.append(event.token)
    assert answered == sent[: len(answered)]
    assert session.close() == sent[len(answered) :]


# -- look-ups: matched by id, whenever their answers come ---------------------------------------


def located(lookup_id: str, public_id: str = "bob", *, online: bool = True) -> m.Located:
    return m.Located(
        id=lookup_id,
        public_id=public_id,
        online=online,
        address="10.0.0.7:51000" if online else "",
        superpeer="sp3" if online else "",
        access_point="127.0.0.1:7403" if online else "",
    )


def locate(session: Session[str], lookup_id: str, token: str, now: float = 0.0) -> None:
    send(session, m.Locate(id=lookup_id, public_id=f"peer-{lookup_id}"), token, now)


def test_lookups_are_answered_by_id_after_notifications_and_later_answers():
    """The backbone answers when it is ready: after notifications, after the answers to requests
    sent later, and in any order among look-ups; the FIFO of requests is left alone."""
    session = established()
    send(session, m.Subscribe(id="s1", subscription=QUERY), "subscribe")
    locate(session, "l1", "first look-up")
    locate(session, "l2", "second look-up")
    send(session, m.Publish(publication=publication()), "publish")
    note = notify()
    online, offline = located("l2"), located("l1", online=False)
    events = session.receive_data(
        access_point_frames(
            note,
            m.Ack(request="subscribe s1"),
            online,
            note,
            m.Ack(request="publish n1"),
            offline,
        ),
    )
    assert events == [
        Notified(note),
        Answered("subscribe", m.Ack(request="subscribe s1"), "subscribe s1"),
        LookupAnswered("second look-up", online),
        Notified(note),
        Answered("publish", m.Ack(request="publish n1"), "publish n1"),
        LookupAnswered("first look-up", offline),
    ]
    assert session.get_timer() is None
    assert session.close() == []


def test_a_refused_lookup_is_matched_by_its_label_not_by_the_order():
    session = established()
    send(session, m.Unsubscribe(id="s1"), "unsubscribe")
    locate(session, "l1", "look-up")
    refused = m.Refused(request="locate l1", reason="16 look-ups are already waiting")
    events = session.receive_data(
        access_point_frames(refused, m.Refused(request="unsubscribe s1", reason="unknown"))
    )
    assert events == [
        LookupAnswered("look-up", refused),
        Answered(
            "unsubscribe", m.Refused(request="unsubscribe s1", reason="unknown"), "unsubscribe s1"
        ),
    ]


def test_a_lookup_without_answer_expires_alone_and_a_late_answer_is_ignored():
    session = established(timeout=30.0, locate_timeout=5.0)
    send(session, m.Unsubscribe(id="s1"), "request", now=0.0)
    locate(session, "l1", "look-up", now=1.0)
    assert session.get_timer() == 6.0, "the look-up is due before the request"
    assert session.handle_timer(5.9) == []
    assert session.handle_timer(6.0) == [
        LookupExpired(
            "look-up",
            "no answer from the network to the look-up of peer-l1 within 5 s (locate_timeout)",
        )
    ]
    assert session.established, "a slow backbone says nothing about the connection"
    assert session.get_timer() == 30.0
    late = located("l1")
    assert session.receive_data(access_point_frames(late)) == [StaleLookupAnswer(late)]
    assert session.established
    assert session.close() == ["request"]


@pytest.mark.parametrize(
    "answer",
    [located("l9"), m.Refused(request="locate l9", reason="too many look-ups waiting")],
)
def test_an_answer_to_a_lookup_of_an_earlier_connection_is_ignored(answer):
    """The access point answers on the peer's current connection, whichever asked."""
    session = established()
    send(session, m.Unsubscribe(id="s1"), "request")
    assert session.receive_data(access_point_frames(answer)) == [StaleLookupAnswer(answer)]
    assert session.established
    assert session.close() == ["request"], "the request still waits for its own answer"


def test_lookups_need_an_established_session_and_unanswered_ones_are_returned_on_close():
    session: Session[str] = Session("peer-a")
    with pytest.raises(SessionError):
        locate(session, "l1", "too early")
    session = established()
    locate(session, "l1", "look-up")
    with pytest.raises(SessionError, match="already waiting"):
        locate(session, "l1", "same id")
    send(session, m.Unsubscribe(id="s1"), "request")
    assert session.close() == ["request", "look-up"]
    assert session.get_timer() is None


def test_lookup_ids_are_never_reused():
    ids = {new_lookup_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(name) == 16 and " " not in name for name in ids)


@given(st.data())
def test_requests_go_in_order_and_lookups_by_id_however_answers_interleave(data):
    session = established()
    requests: list[str] = []
    lookups: list[str] = []
    answered: list[str] = []
    found: set[str] = set()
    for number in range(data.draw(st.integers(0, 30))):
        step = data.draw(st.sampled_from(["request", "lookup", "notify", "answer", "located"]))
        token = f"t{number}"
        if step == "request":
            send(session, m.Unsubscribe(id=token), token)
            requests.append(token)
        elif step == "lookup":
            locate(session, token, token)
            lookups.append(token)
        elif step == "notify":
            assert session.receive_data(access_point_frames(notify())) == [Notified(notify())]
        elif step == "answer" and len(answered) < len(requests):
            [event] = session.receive_data(access_point_frames(m.Ack(request="x")))
            assert isinstance(event, Answered)
            answered.append(event.token)
        elif step == "located" and set(lookups) - found:
            chosen = data.draw(st.sampled_from(sorted(set(lookups) - found)))
            [event] = session.receive_data(access_point_frames(located(chosen)))
            assert event == LookupAnswered(chosen, located(chosen))
            found.add(chosen)
    assert answered == requests[: len(answered)]
    assert session.close() == requests[len(answered) :] + [t for t in lookups if t not in found]


# -- secure identification, against the access point's real Verifier, without sockets ----------


class VerifyingAccessPoint:
    """The super-peer's side of one connection, as ``superpeer.daemon`` runs it: ``Welcome`` and
    ``auth.challenge`` after the ``Hello``, then ``crypto.Verifier`` for every message."""

    def __init__(self, node_id: str, fingerprint: str, registry: crypto.Registry) -> None:
        self.node_id = node_id
        self.link = Link(accepting=True)
        self.verifier = crypto.Verifier(
            node_id=node_id, fingerprint=fingerprint, registry=registry, address="127.0.0.1:9"
        )
        self.received: list[object] = []
        self.outcome: list[object] = []

    def accept(self, hello: bytes) -> bytes:
        [received] = self.link.receive_data(hello)
        assert isinstance(received.message, m.Hello)
        return access_point_frames(
            m.Welcome(node_id=self.node_id, address="127.0.0.1:7400"),
            self.verifier.challenge(0.0),
        )

    def answer(self, data: bytes) -> bytes:
        frames = b""
        for event in self.link.receive_data(data):
            self.received.append(event.message)
            for output in self.verifier.receive(event.message, 1.0):
                if isinstance(output, crypto.Send):
                    frames += access_point_frames(output.message)
                else:
                    self.outcome.append(output)
        return frames


def identifying(
    tls_world, registration: Registration | None = None, **server: str | None
) -> Session[str]:
    key = tls_world.peer_keys[0]
    identification = Identification(
        key=key,
        server_fingerprint=server.get("fingerprint") or tls_world.network.fingerprint,
        server_node_id=server.get("node_id", "sp0"),
        registration=registration,
    )
    return Session(crypto.public_identifier(key), identification=identification)


def register(tls_world, registry: crypto.Registry) -> Registration:
    """A first connection, to its end: the registration the session handed over to store."""
    session = identifying(tls_world)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, registry)
    [reply] = session.receive_data(access_point.accept(session.hello(0.0)))
    [store] = session.receive_data(access_point.answer(reply.data))
    session.receive_data(access_point.answer(session.stored()))
    assert session.established
    return store.registration


def test_a_first_connection_registers_and_confirms_only_once_stored(tls_world):
    registry = crypto.MemoryRegistry()
    session = identifying(tls_world)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, registry)
    public_id = crypto.public_identifier(tls_world.peer_keys[0])

    [reply] = session.receive_data(access_point.accept(session.hello(0.0)))
    assert isinstance(reply, Reply)
    assert not session.established, "welcomed, not yet identified"
    with pytest.raises(SessionError):
        send(session, m.Unsubscribe(id="s1"), "too early")
    with pytest.raises(SessionError):
        session.stored()

    [store] = session.receive_data(access_point.answer(reply.data))
    assert isinstance(access_point.received[-1], crypto.Register)
    assert isinstance(store, Store)
    assert store.registration.issued_by == "sp0"
    assert store.replaces is None
    assert len(registry) == 0, "nothing is kept before the peer confirms"
    assert not session.established

    events = session.receive_data(access_point.answer(session.stored()))
    assert events == [Established("sp0", "127.0.0.1:7400", registered=True)]
    assert registry.get(public_id) is not None
    assert session.established
    with pytest.raises(SessionError):
        session.stored()
    send(session, m.Unsubscribe(id="s1"), "now")


def test_a_registration_whose_session_ended_in_the_same_read_is_not_confirmed(tls_world):
    """The access point issues and says goodbye in one chunk: the client stores the registration
    (it cannot know yet), then has nothing to confirm, and the access point kept nothing."""
    registry = crypto.MemoryRegistry()
    session = identifying(tls_world)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, registry)
    [reply] = session.receive_data(access_point.accept(session.hello(0.0)))
    goodbye = access_point_frames(m.Goodbye(reason="stopping"))
    store, ended = session.receive_data(access_point.answer(reply.data) + goodbye)
    assert isinstance(store, Store)
    assert ended == Ended("the access point said goodbye (stopping)")
    assert session.stored() == b""
    assert len(registry) == 0


def test_a_broken_frame_read_with_the_challenge_ends_the_session(tls_world):
    """The link closes on the broken frame before the session handles the challenge read just
    before it; the answer to the challenge is still made, then the session ends (never raises)."""
    session = identifying(tls_world)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, MemoryRegistry())
    broken = struct.pack(">I", 3) + b"\xc1\xc1\xc1"
    reply, ended = session.receive_data(access_point.accept(session.hello(0.0)) + broken)
    assert isinstance(reply, Reply)
    assert isinstance(ended, Ended)
    assert ended.reason.startswith("handshake failed: ")
    assert ended.reply, "a LinkError for the access point"
    assert not session.established


def test_a_later_connection_identifies_with_the_private_identifier(tls_world):
    registry = crypto.MemoryRegistry()
    registration = register(tls_world, registry)
    session = identifying(tls_world, registration)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, registry)
    [reply] = session.receive_data(access_point.accept(session.hello(0.0)))
    events = session.receive_data(access_point.answer(reply.data))
    identify = access_point.received[-1]
    assert isinstance(identify, crypto.Identify)
    assert identify.private_id == registration.private_identifier.reveal()
    assert events == [Established("sp0", "127.0.0.1:7400", registered=False)]


def test_a_peer_registered_elsewhere_registers_here_and_keeps_its_secret_to_itself(tls_world):
    registration = register(tls_world, crypto.MemoryRegistry())
    moved = Registration(registration.private_identifier, "sp-old")
    session = identifying(tls_world, moved)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, MemoryRegistry())
    [reply] = session.receive_data(access_point.accept(session.hello(0.0)))
    [store] = session.receive_data(access_point.answer(reply.data))
    assert isinstance(access_point.received[-1], crypto.Register)
    assert registration.private_identifier.reveal() not in reply.data, "only to its issuer"
    assert store.replaces == "sp-old"
    assert store.registration.issued_by == "sp0"


def test_an_access_point_that_lost_the_registration_makes_the_peer_forget_it(tls_world):
    registration = register(tls_world, crypto.MemoryRegistry())
    session = identifying(tls_world, registration)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, MemoryRegistry())
    [reply] = session.receive_data(access_point.accept(session.hello(0.0)))
    forget, ended = session.receive_data(access_point.answer(reply.data))
    assert forget == Forget("sp0")
    assert isinstance(ended, Ended)
    assert ended.refusal == "unknown_identifier"
    assert ended.reason.endswith("the peer registers again on the next connection")
    assert not session.established


def test_a_key_registered_without_its_secret_needs_the_operator(tls_world):
    registry = crypto.MemoryRegistry()
    register(tls_world, registry)
    session = identifying(tls_world)  # the peer lost its registration
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, registry)
    [reply] = session.receive_data(access_point.accept(session.hello(0.0)))
    [ended] = session.receive_data(access_point.answer(reply.data))
    assert isinstance(ended, Ended)
    assert ended.refusal == "already_registered"
    assert "operator must forget the registration" in ended.reason
    assert "peer keygen --force" in ended.reason


@pytest.mark.parametrize(
    ("server", "problem"),
    [
        ({"fingerprint": "OTHER"}, "names a server key other than the one the TLS channel"),
        ({"node_id": "sp9"}, "claims a node id other than the one in the server's certificate"),
    ],
)
def test_a_challenge_for_another_server_is_refused_before_signing(tls_world, server, problem):
    """A relay: the challenge names another key (or node) than the TLS handshake authenticated."""
    if server.get("fingerprint") == "OTHER":
        server["fingerprint"] = tls_world.rogue.fingerprint
    session = identifying(tls_world, **server)
    access_point = VerifyingAccessPoint("sp0", tls_world.network.fingerprint, MemoryRegistry())
    [ended] = session.receive_data(access_point.accept(session.hello(0.0)))
    assert isinstance(ended, Ended)
    assert ended.reason.startswith("protocol violation: identification failed: access point: ")
    assert problem in ended.reason
    reply, _ = wire.decode(ended.reply[4:])
    assert isinstance(reply, m.LinkError)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (notify(), "peer.notify before the identification completed"),
        (m.Ack(request="advertise"), "peer.ack before the identification completed"),
        (crypto.Accepted(public_id="pk1-x"), "auth.accepted before the access point's challenge"),
    ],
)
def test_nothing_but_the_identification_comes_between_welcome_and_accepted(
    tls_world, message, reason
):
    session = identifying(tls_world)
    session.hello(0.0)
    [ended] = session.receive_data(access_point_frames(WELCOME, message))
    assert isinstance(ended, Ended)
    assert ended.reason == f"protocol violation: {reason}"


def test_a_rejection_before_the_challenge_ends_the_session(tls_world):
    session = identifying(tls_world)
    session.hello(0.0)
    rejected = crypto.Rejected(code="malformed", reason="no")
    [ended] = session.receive_data(access_point_frames(WELCOME, rejected))
    assert ended == Ended(
        "the access point refused the identification (malformed): no", b"", "malformed"
    )


def test_the_identification_must_complete_within_the_timeout(tls_world):
    key = tls_world.peer_keys[0]
    identification = Identification(
        key=key,
        server_fingerprint=tls_world.network.fingerprint,
        server_node_id=None,
        registration=None,
    )
    session: Session[str] = Session(
        crypto.public_identifier(key), timeout=5.0, identification=identification
    )
    session.hello(0.0)
    session.receive_data(access_point_frames(WELCOME))
    assert session.get_timer() == 5.0
    [ended] = session.handle_timer(5.0)
    assert isinstance(ended, Ended)
    assert ended.reason == "the access point did not complete the identification within 5 s"


def test_with_identification_the_peer_id_is_the_keys_public_identifier(tls_world):
    identification = Identification(
        key=tls_world.peer_keys[0],
        server_fingerprint=tls_world.network.fingerprint,
        server_node_id=None,
        registration=None,
    )
    with pytest.raises(ValueError, match="public identifier"):
        Session("alice", identification=identification)


def test_the_private_identifier_never_shows_in_an_event(tls_world):
    registration = register(tls_world, crypto.MemoryRegistry())
    secret = registration.private_identifier
    shown = repr(Store(registration, replaces=None)) + str(registration)
    assert secret.reveal_text() not in shown
    assert secret.reveal().hex() not in shown
    assert "<hidden>" in shown
