"""The sans-IO session: handshake, FIFO answer matching with notifications in between, protocol
violations, timers, the re-send plan and the backoff."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import qel
import wire
from peer.session import (
    Answered,
    Backoff,
    Ended,
    Established,
    Notified,
    RequestTooLarge,
    Session,
    SessionError,
    plan_resend,
    request_label,
)
from tests.peer.helpers import TITLE_QUERY, notify, publication
from wire import messages as m
from wire.framing import Link, frame

QUERY = qel.parse_subscription(TITLE_QUERY)
WELCOME = m.Welcome(node_id="sp0", address="127.0.0.1:7400")


def access_point_frames(*messages: object) -> bytes:
    return b"".join(frame(wire.encode(x)) for x in messages)


def established(timeout: float = 30.0) -> Session[str]:
    session: Session[str] = Session("peer-a", timeout=timeout)
    hello = session.hello(now=0.0)
    server = Link(accepting=True)
    [received] = server.receive_data(hello)
    assert received.message == m.Hello(
        role="peer", node_id="peer-a", address="", protocol=wire.PROTOCOL_VERSION
    )
    assert session.receive_data(access_point_frames(WELCOME), 0.0) == [
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
        1.0,
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
        events = session.receive_data(welcome[:cut], 0.0) + session.receive_data(welcome[cut:], 0.0)
        assert events == [Established("sp0", "127.0.0.1:7400")]
    for cut in range(len(rest) + 1):
        session = established()
        send(session, m.Advertise(advertisement=qel.parse_advertisement({})), "ad")
        events = session.receive_data(rest[:cut], 0.0) + session.receive_data(rest[cut:], 0.0)
        assert [type(e) for e in events] == [Notified, Answered]


def test_the_label_is_reported_but_the_order_decides():
    session = established()
    send(session, m.Unsubscribe(id="s1"), "token")
    [event] = session.receive_data(access_point_frames(m.Ack(request="something else")), 0.0)
    assert event == Answered("token", m.Ack(request="something else"), "unsubscribe s1")


def test_an_answer_with_nothing_pending_is_a_violation_answered_with_a_link_error():
    session = established()
    [event] = session.receive_data(access_point_frames(m.Ack(request="advertise")), 0.0)
    assert isinstance(event, Ended)
    assert "with no request pending" in event.reason
    reply, _ = wire.decode(event.reply[4:])
    assert isinstance(reply, m.LinkError)
    assert not session.established
    with pytest.raises(SessionError):
        session.receive_data(b"", 0.0)


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
    events = session.receive_data(access_point_frames(message, m.Ack(request="x")), 0.0)
    assert len(events) == 1, "nothing after the end is looked at"
    assert isinstance(events[0], Ended)
    assert events[0].reason.startswith(reason)
    assert session.close() == ["in doubt"]


def test_a_refused_handshake_ends_the_session():
    session: Session[str] = Session("peer-a")
    session.hello(0.0)
    [event] = session.receive_data(access_point_frames(m.LinkError(reason="full")), 0.0)
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
    [answered] = session.receive_data(access_point_frames(m.Ack(request="unsubscribe s1")), 0.0)
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
    assert session.handle_timer(14.9) is None
    ended = session.handle_timer(15.0)
    assert ended is not None
    assert ended.reason == "no welcome from the access point within 5 s"


def test_the_oldest_request_must_be_answered_within_the_timeout():
    session = established(timeout=5.0)
    assert session.get_timer() is None
    send(session, m.Unsubscribe(id="a"), "a", now=1.0)
    send(session, m.Unsubscribe(id="b"), "b", now=3.0)
    assert session.get_timer() == 6.0
    session.receive_data(access_point_frames(m.Ack(request="unsubscribe a")), 4.0)
    assert session.get_timer() == 8.0
    assert session.handle_timer(7.9) is None
    ended = session.handle_timer(8.0)
    assert ended is not None
    assert "no answer to 'unsubscribe b'" in ended.reason
    assert session.close() == ["b"]
    assert session.get_timer() is None


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
            assert session.receive_data(access_point_frames(notify()), 0.0) == [Notified(notify())]
        elif len(answered) < len(sent):
            [event] = session.receive_data(access_point_frames(m.Ack(request="x")), 0.0)
            assert isinstance(event, Answered)
            answered.append(event.token)
    assert answered == sent[: len(answered)]
    assert session.close() == sent[len(answered) :]
