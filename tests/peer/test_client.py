"""The trio client: against the fake access point over real 127.0.0.1 sockets (connection,
re-send, notifications, refusals, reconnection, requests left in doubt), and against an access
point played by hand on in-memory streams with trio's autojump clock (timeouts, protocol
violations, requests queued behind a stuck write), so no test waits for real time."""

import dataclasses
import shutil

import pytest
import trio
import trio.testing

import qel
from peer.client import PeerClient, PeerRequest, RequestFailed, _Connection
from peer.kept import Kept, KeptLimits
from peer.session import Session, request_label
from peer.state import STATE_FILE
from tests.peer.fake_access_point import FakeAccessPoint, FakePeer
from tests.peer.helpers import (
    DC_ADVERTISEMENT,
    TITLE_QUERY,
    attached,
    make_client,
    notify,
    publication,
)
from wire import messages as m
from wire.framing import Link, Received

QUERY = qel.parse_subscription(TITLE_QUERY)


async def barrier(client: PeerClient) -> None:
    """Answers come in order: once this one is back, everything before it was handled."""
    await client.request(PeerRequest(message=m.Unsubscribe(id="barrier")))


async def test_it_connects_and_resends_its_state_advertisement_first(
    tmp_path, access_point, nursery
):
    client = make_client(tmp_path, access_point.port)
    client.store.set_advertisement(DC_ADVERTISEMENT)
    client.store.add_subscription("s2", "X : t(X, dc:creator, C)")
    client.store.add_subscription("s1", TITLE_QUERY)
    client.store.mark_in_doubt("s9")
    nursery.start_soon(client.serve)
    await attached(access_point)
    await barrier(client)
    assert access_point.requests_from("alice")[:4] == [
        m.Advertise(advertisement=qel.parse_advertisement(DC_ADVERTISEMENT)),
        m.Unsubscribe(id="s9"),
        m.Subscribe(id="s1", subscription=QUERY),
        m.Subscribe(id="s2", subscription=qel.parse_subscription("X : t(X, dc:creator, C)")),
    ]
    assert client.store.current.in_doubt == frozenset(), "refused or not, the withdrawal is done"
    statistics = client.statistics()
    assert statistics.connected
    assert statistics.superpeer_id == "sp-fake"
    assert statistics.resend_problems == ()


async def test_notifications_are_stored_once(tmp_path, access_point, nursery):
    client = make_client(tmp_path, access_point.port)
    nursery.start_soon(client.serve)
    await attached(access_point)
    await access_point.deliver("alice", notify())
    await access_point.deliver("alice", notify())
    await client.wait_for_record_after(0)
    await barrier(client)
    assert (client.inbox.count, client.inbox.duplicates) == (1, 1)
    [record] = client.inbox.records_after(0, max_bytes=10**6)
    assert (record["publication"], record["owner"], record["subscriptions"]) == (
        "n1",
        "peer-owner",
        ["s1"],
    )
    assert client.statistics().notifications == 1


async def test_answers_reach_their_requests_with_notifications_in_between(
    tmp_path, access_point, nursery
):
    client = make_client(tmp_path, access_point.port)
    nursery.start_soon(client.serve)
    await attached(access_point)
    access_point.peers["alice"].interleave.append(notify())
    answered = []
    refused = await client.request(
        PeerRequest(message=m.Publish(publication=publication()), on_answer=answered.append)
    )
    assert refused == m.Refused(
        request="publish n1", reason="the publication is outside your advertisement"
    )
    assert answered == [refused], "on_answer ran before the waiter woke"
    assert client.inbox.count == 1, "the notification before the answer was stored first"
    advertise = m.Advertise(advertisement=qel.parse_advertisement(DC_ADVERTISEMENT))
    assert await client.request(PeerRequest(message=advertise)) == m.Ack(request="advertise")
    assert await client.request(PeerRequest(message=m.Publish(publication=publication()))) == (
        m.Ack(request="publish n1")
    )
    statistics = client.statistics()
    assert (statistics.acknowledged, statistics.refused) == (3, 1)  # with the re-sent advertisement


async def test_it_reconnects_and_repairs_an_access_point_that_lost_its_state(
    tmp_path, access_point, nursery
):
    client = make_client(tmp_path, access_point.port)
    client.store.add_subscription("s1", TITLE_QUERY)
    nursery.start_soon(client.serve)
    await attached(access_point)
    await access_point.restart()
    assert access_point.peers == {}
    await attached(access_point, times=2)
    await barrier(client)
    assert access_point.peers["alice"].subscriptions == {"s1": QUERY}
    await access_point.goodbye("maintenance")
    await attached(access_point, times=3)
    assert client.statistics().connections == 3


async def test_a_request_lost_with_the_connection_is_in_doubt_and_withdrawn_later(
    tmp_path, access_point, nursery
):
    client = make_client(tmp_path, access_point.port)
    store = client.store
    nursery.start_soon(client.serve)
    await attached(access_point)
    access_point.hold_answers = True
    ticket = client.submit(
        PeerRequest(
            message=m.Subscribe(id="s1", subscription=QUERY),
            on_answer=lambda answer: store.add_subscription("s1", TITLE_QUERY),
            on_doubt=lambda: store.mark_in_doubt("s1"),
        )
    )
    await access_point.wait_until(lambda: "s1" in access_point.peers["alice"].subscriptions)
    access_point.hold_answers = False
    await access_point.drop("alice")
    with pytest.raises(RequestFailed, match="lost before it answered") as failure:
        await ticket.wait()
    assert failure.value.sent
    assert store.current.subscriptions == {}
    assert store.current.in_doubt == frozenset({"s1"})
    await attached(access_point, times=2)
    await barrier(client)
    assert access_point.peers["alice"].subscriptions == {}, "the access point had applied it"
    assert store.current.in_doubt == frozenset()
    assert client.statistics().failed == 1


async def test_a_refused_resend_is_reported(tmp_path, access_point, nursery):
    client = make_client(tmp_path, access_point.port)
    client.store.add_subscription("s1", TITLE_QUERY)
    other = qel.parse_subscription("X : t(X, dc:creator, C)")
    access_point.peers["alice"] = FakePeer(subscriptions={"s1": other})
    nursery.start_soon(client.serve)
    await attached(access_point)
    await barrier(client)
    [problem] = client.statistics().resend_problems
    assert problem.startswith("subscribe s1: the id 's1' is already used")


async def test_requests_need_a_connection(tmp_path, closed_port):
    client = make_client(tmp_path, closed_port)
    with pytest.raises(
        RequestFailed, match=f"not connected to the access point 127.0.0.1:{closed_port}"
    ):
        client.submit(PeerRequest(message=m.Unsubscribe(id="s1")))
    with pytest.raises(RequestFailed) as failure:
        await client.leave()
    assert not failure.value.sent


async def test_leaving_sends_leave_and_stops(tmp_path, access_point):
    client = make_client(tmp_path, access_point.port)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.serve)
        await attached(access_point)
        await client.leave()
    assert access_point.requests_from("alice")[-1] == m.Leave()
    assert "alice" not in access_point.peers
    assert not client.statistics().connected


# -- an access point played by hand on in-memory streams, with the autojump clock -------------


class HandPlayed:
    """Accepts the client's connections as in-memory streams; the test speaks for the access
    point, frame by frame."""

    def __init__(self, *, lockstep: bool = False) -> None:
        self.lockstep = lockstep
        self._send, self._receive = trio.open_memory_channel(10)

    async def open_stream(self) -> trio.abc.Stream:
        pair = (
            trio.testing.lockstep_stream_pair if self.lockstep else trio.testing.memory_stream_pair
        )
        client_end, access_point_end = pair()
        self._send.send_nowait(access_point_end)
        return client_end

    async def accept(self) -> "Conversation":
        conversation = Conversation(await self._receive.receive())
        assert isinstance(await conversation.receive(), m.Hello)
        return conversation


def serve_hand_played(
    tmp_path, nursery, *, lockstep: bool = False, **options: float
) -> tuple[HandPlayed, PeerClient]:
    """A client, serving, whose access point the test plays by hand."""
    access_point = HandPlayed(lockstep=lockstep)
    client = make_client(tmp_path, 1, open_stream=access_point.open_stream, **options)
    nursery.start_soon(client.serve)
    return access_point, client


class Conversation:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.link = Link(accepting=True)
        self.events: list[object] = []

    async def receive(self) -> object | None:
        while not self.events:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.events.extend(self.link.receive_data(data))
        event = self.events.pop(0)
        assert isinstance(event, Received), event
        return event.message

    async def send(self, *messages: object) -> None:
        for message in messages:
            await self.stream.send_all(self.link.send(message))

    async def welcome(self) -> None:
        await self.send(m.Welcome(node_id="sp-hand", address="127.0.0.1:1"))
        assert isinstance(await self.receive(), m.Advertise)
        await self.send(m.Ack(request="advertise"))


async def test_an_unanswered_request_ends_the_connection_after_the_timeout(
    tmp_path, autojump_clock, nursery
):
    access_point, client = serve_hand_played(tmp_path, nursery, timeout=30.0)
    first = await access_point.accept()
    await first.welcome()
    started = trio.current_time()
    ticket = client.submit(PeerRequest(message=m.Unsubscribe(id="s1")))
    assert await first.receive() == m.Unsubscribe(id="s1")
    with pytest.raises(
        RequestFailed, match=r"no answer to 'unsubscribe s1' .* within 30 s"
    ) as failure:
        await ticket.wait()
    assert failure.value.sent
    assert trio.current_time() - started == pytest.approx(30.0)
    assert await first.receive() is None, "the client closed the connection"
    second = await access_point.accept()
    await second.welcome()
    assert client.statistics().connected


async def test_an_unanswered_lookup_fails_alone_on_time_and_its_late_answer_is_ignored(
    tmp_path, autojump_clock, nursery
):
    """Sent while the watcher sleeps toward a later request's deadline, the look-up still fails
    exactly ``locate_timeout`` after it was sent, and the connection goes on."""
    access_point, client = serve_hand_played(tmp_path, nursery, timeout=30.0, locate_timeout=10.0)
    first = await access_point.accept()
    await first.welcome()
    request = client.submit(PeerRequest(message=m.Unsubscribe(id="s1")))
    assert await first.receive() == m.Unsubscribe(id="s1")
    await trio.sleep(3.0)
    started = trio.current_time()
    lookup = client.locate("bob")
    asked = await first.receive()
    assert isinstance(asked, m.Locate)
    assert asked.public_id == "bob"
    with pytest.raises(RequestFailed, match=r"look-up of bob within 10 s \(locate_timeout\)"):
        await lookup.wait()
    assert trio.current_time() - started == pytest.approx(10.0)
    await first.send(
        m.Located(
            id=asked.id, public_id="bob", online=False, address="", superpeer="", access_point=""
        ),
        m.Ack(request="unsubscribe s1"),
    )
    assert await request.wait() == m.Ack(request="unsubscribe s1")
    statistics = client.statistics()
    assert (statistics.connected, statistics.connections) == (True, 1)


async def test_a_silent_or_refusing_access_point_is_retried_with_backoff(
    tmp_path, autojump_clock, nursery
):
    access_point, client = serve_hand_played(tmp_path, nursery, timeout=10.0)
    silent = await access_point.accept()
    started = trio.current_time()
    refusing = await access_point.accept()
    assert trio.current_time() - started == pytest.approx(10.0, abs=0.06), "handshake timeout"
    assert client.statistics().last_error == "no welcome from the access point within 10 s"
    await refusing.send(m.LinkError(reason="full"))
    third = await access_point.accept()
    assert client.statistics().last_error == "handshake failed: refused: full"
    await third.welcome()
    assert client.statistics().last_error is None
    assert await silent.receive() is None, "the silent connection was closed"


async def test_an_answer_nobody_asked_for_is_a_violation_answered_with_a_link_error(
    tmp_path, autojump_clock, nursery
):
    access_point, _ = serve_hand_played(tmp_path, nursery)
    first = await access_point.accept()
    await first.welcome()
    await first.send(m.Ack(request="advertise"))
    error = await first.receive()
    assert isinstance(error, m.LinkError)
    assert "with no request pending" in error.reason
    assert await first.receive() is None
    await (await access_point.accept()).welcome()


async def test_a_request_stuck_in_a_write_is_in_doubt_and_the_queued_ones_were_not_sent(
    tmp_path, autojump_clock, nursery
):
    access_point, client = serve_hand_played(tmp_path, nursery, lockstep=True)
    first = await access_point.accept()
    await first.welcome()
    writing = client.submit(PeerRequest(message=m.Unsubscribe(id="a")))
    queued = client.submit(PeerRequest(message=m.Unsubscribe(id="b")))
    await trio.testing.wait_all_tasks_blocked()
    await first.stream.aclose()
    with pytest.raises(RequestFailed) as in_doubt:
        await writing.wait()
    with pytest.raises(RequestFailed, match="not connected") as not_sent:
        await queued.wait()
    assert (in_doubt.value.sent, not_sent.value.sent) == (True, False)


async def test_a_request_taken_behind_frames_whose_write_breaks_fails_unsent(tmp_path, nursery):
    """The writer sends the frames queued together in one write and takes the request behind
    them meanwhile: when that write breaks the connection, the request was not sent and says so
    (it was no longer in the queue the teardown answers). Real clock: the inbox write runs in a
    thread. No delay: the notification's ``Delivered`` is queued as soon as it is stored."""
    access_point, client = serve_hand_played(tmp_path, nursery, lockstep=True, ack_delay=0.0)
    first = await access_point.accept()
    await first.welcome()
    writing = client.submit(PeerRequest(message=m.Unsubscribe(id="a")))
    await trio.testing.wait_all_tasks_blocked()  # the writer is in the write of "a"
    await first.send(dataclasses.replace(notify(), delivery=1))
    await client.wait_for_record_after(0)
    await trio.testing.wait_all_tasks_blocked()  # its ``Delivered`` is queued behind "a"
    queued = client.submit(PeerRequest(message=m.Unsubscribe(id="b")))
    assert await first.receive() == m.Unsubscribe(id="a")
    await trio.testing.wait_all_tasks_blocked()  # in the write of the acknowledgement
    await first.stream.aclose()
    with pytest.raises(RequestFailed, match="not connected") as not_sent:
        await queued.wait()
    assert not not_sent.value.sent
    with pytest.raises(RequestFailed):
        await writing.wait()


@pytest.mark.parametrize(
    ("group", "written", "acknowledged"), [(64, [4], [5]), (2, [2, 1, 1], [2, 4, 5])]
)
async def test_the_notifications_of_one_read_are_stored_in_groups_and_acknowledged_per_group(
    tmp_path, nursery, monkeypatch, group, written, acknowledged
):
    """One pair of syncs per group of notifications, not per notification (``peer.inbox``):
    five notifications written in one go by the access point, one of them a repeat, are
    written in groups of ``inbox_group`` at most, each group acknowledged once it is in the
    inbox. A resource changed twice in one group keeps its newer version. Real clock: the
    inbox write runs in a thread. No delay (``ack_delay``), else the groups share one."""
    access_point, client = serve_hand_played(tmp_path, nursery, inbox_group=group, ack_delay=0.0)
    groups: list[int] = []
    write = client.inbox.write
    monkeypatch.setattr(
        client.inbox, "write", lambda records: (groups.append(len(records)), write(records))
    )
    first = await access_point.accept()
    await first.welcome()
    notified = [
        notify(publication(id="n1")),
        notify(publication(id="n2")),
        notify(publication(id="n1")),  # a repeat: acknowledged, not stored
        dataclasses.replace(notify(publication(id="n2", title="changed")), version=1),
        notify(publication(id="n3")),
    ]
    await first.stream.send_all(
        b"".join(
            first.link.send(dataclasses.replace(n, delivery=number))
            for number, n in enumerate(notified, start=1)
        )
    )
    throughs = []
    while not throughs or throughs[-1] < 5:
        answer = await first.receive()
        assert isinstance(answer, m.Delivered), answer
        throughs.append(answer.through)
    assert throughs == acknowledged
    assert groups == written
    assert (client.inbox.count, client.inbox.duplicates) == (3, 1)
    records = client.inbox.records_after(0, max_bytes=10**6)
    assert [(r["publication"], r["version"]) for r in records] == [("n1", 0), ("n2", 1), ("n3", 0)]
    assert client.statistics().notifications == 4


async def test_notifications_stored_one_by_one_share_one_delivered_a_delay_later(tmp_path, nursery):
    """A paced stream, each notification alone in its read: one ``Delivered`` for them all,
    ``ack_delay`` after the first is stored (``peer.session``). Real clock (the inbox write runs
    in a thread); the delay is long enough that the three are stored well within it."""
    access_point, client = serve_hand_played(tmp_path, nursery, ack_delay=1.0)
    first = await access_point.accept()
    await first.welcome()
    started = trio.current_time()
    for number in range(1, 4):
        await first.send(dataclasses.replace(notify(publication(id=f"n{number}")), delivery=number))
        await client.wait_for_record_after(number - 1)
    with trio.fail_after(5):  # the client's watch wakes for it (its next look is 10 s away)
        assert await first.receive() == m.Delivered(through=3), "one, for the three"
    assert trio.current_time() - started >= 1.0, "not before the delay"


async def test_a_request_after_stored_notifications_goes_behind_their_delivered(tmp_path, nursery):
    """``Delivered`` waits for more, but not past anything the peer sends after the
    notifications it acknowledges: a request takes it along, first."""
    access_point, client = serve_hand_played(tmp_path, nursery, ack_delay=60.0)
    first = await access_point.accept()
    await first.welcome()
    await first.send(dataclasses.replace(notify(), delivery=1))
    await client.wait_for_record_after(0)
    client.submit(PeerRequest(message=m.Unsubscribe(id="a")))
    with trio.fail_after(5):
        assert await first.receive() == m.Delivered(through=1)
        assert await first.receive() == m.Unsubscribe(id="a")


@pytest.mark.parametrize("stored", [0, 2])
async def test_a_peer_that_stops_says_what_its_inbox_holds_before_it_closes(
    tmp_path, nursery, stored
):
    """Stopping is cancellation; the ``Delivered`` that waited goes out first (shielded, the
    writer was not mid-write), so the access point need not send that mail again next time.
    With nothing stored the connection just closes."""
    access_point = HandPlayed()
    client = make_client(tmp_path, 1, open_stream=access_point.open_stream, ack_delay=60.0)
    stopping = trio.CancelScope()

    async def serve() -> None:
        with stopping:
            await client.serve()

    nursery.start_soon(serve)
    first = await access_point.accept()
    await first.welcome()
    for number in range(1, stored + 1):
        await first.send(dataclasses.replace(notify(publication(id=f"n{number}")), delivery=number))
        await client.wait_for_record_after(number - 1)
    stopping.cancel()
    with trio.fail_after(5):
        if stored:
            assert await first.receive() == m.Delivered(through=stored)
        assert await first.receive() is None, "then it closes"


async def test_a_request_queued_when_the_access_point_says_goodbye_fails_unsent(tmp_path, nursery):
    """The goodbye ends the session while the reader still stores a notification read before
    it; the writer, unblocked meanwhile, must not send on the ended session (it used to crash
    the daemon). Real clock: the inbox write runs in a thread, which the autojump clock would
    jump over."""
    access_point, client = serve_hand_played(tmp_path, nursery, lockstep=True)
    first = await access_point.accept()
    await first.welcome()
    writing = client.submit(PeerRequest(message=m.Unsubscribe(id="a")))
    queued = client.submit(PeerRequest(message=m.Unsubscribe(id="b")))
    await trio.testing.wait_all_tasks_blocked()
    # one write: the reader takes both frames in one read
    await first.stream.send_all(
        first.link.send(notify()) + first.link.send(m.Goodbye(reason="rejoining"))
    )
    assert await first.receive() == m.Unsubscribe(id="a")
    with pytest.raises(RequestFailed, match="not connected") as not_sent:
        await queued.wait()
    assert not not_sent.value.sent
    with pytest.raises(RequestFailed):
        await writing.wait()
    await (await access_point.accept()).welcome()
    assert client.inbox.count == 1, "the notification read before the goodbye was kept"


async def test_the_access_points_since_is_its_latest_hybrid_time_never_the_peers_wall_time(
    tmp_path, access_point, nursery
):
    """Found by the skewed chaos plan (issue 39): on a lost connection the client noted its
    own wall time of its last contact as its access point's ``since``, so the next
    ``Moved.since`` was off by the desktop's clock error (300 s ahead: the next access point's
    catch-up began after what it had to find). It notes the latest hybrid time the access
    point gave it (``Welcome.clock``, then ``Clock.clock``)."""
    access_point.clock = 1000.0
    client = make_client(tmp_path, access_point.port)
    noted: list[float] = []
    keep = client.store.set_access_point

    def set_access_point(node: str, address: str, since: float, missing: float = 0.0) -> None:
        noted.append(since)
        keep(node, address, since, missing)

    client.store.set_access_point = set_access_point  # type: ignore[method-assign]
    nursery.start_soon(client.serve)
    await attached(access_point)
    await barrier(client)
    await access_point.send_clock("alice", 1500.0)
    await barrier(client)
    await access_point.drop("alice")
    await attached(access_point, times=2)
    await barrier(client)
    assert noted == [1000.0, 1500.0, 1000.0]


async def moved_to(conversation: "Conversation", node_id: str, clock: float) -> m.Moved:
    """Welcomes the client as ``node_id`` at hybrid time ``clock``, acknowledges what it sends
    again, and returns its move statement."""
    await conversation.send(m.Welcome(node_id=node_id, address="127.0.0.1:2", clock=clock))
    while not isinstance(message := await conversation.receive(), m.Moved):
        await conversation.send(m.Ack(request=request_label(message)))
    return message


async def test_a_move_statement_says_from_when_the_last_clock_said_things_may_be_missing(
    tmp_path, autojump_clock, nursery
):
    """Found by chaos seed 723: the peer was attached to an access point when that one was
    cut off; its ``Clock`` s went on, the peer left with the latest one's hybrid time, the
    publications the access point missed reached it after the peer had left, and it died
    for good with them. The move statement orders the move from the latest hybrid time
    (``Moved.since``) and says from when the latest ``Clock`` said things may be missing
    (``Moved.missing_since``), where the next access point's catch-up starts. At the access
    point moved to, the statement's start is kept until a ``Clock`` after the move's ``Ack``
    says what that one still owes (what the previous one handed over, if it is lost for good
    before the peer has it)."""
    access_point, client = serve_hand_played(tmp_path, nursery)
    first = await access_point.accept()
    await first.send(m.Welcome(node_id="sp-a", address="127.0.0.1:1", clock=1000.0))
    assert isinstance(await first.receive(), m.Advertise)
    await first.send(m.Ack(request="advertise"))
    await first.send(m.Clock(wall=1.0, clock=1500.0, missing_since=1200.0))
    assert isinstance(await first.receive(), m.Clock), "answered"
    await trio.aclose_forcefully(first.stream)
    second = await access_point.accept()
    message = await moved_to(second, "sp-b", 2000.0)
    assert (message.previous, message.since, message.missing_since) == ("sp-a", 1500.0, 1200.0)
    await second.send(m.Ack(request="moved"))
    await trio.testing.wait_all_tasks_blocked()
    assert client.store.current.access_point == {
        "node": "sp-b",
        "address": "127.0.0.1:1",
        "since": 2000.0,
        "missing": 1200.0,
    }, "what sp-a kept, handed over to sp-b, is owed until sp-b says otherwise"
    await second.send(m.Clock(wall=2.0, clock=2100.0, missing_since=0.0))
    assert isinstance(await second.receive(), m.Clock), "answered"
    await trio.aclose_forcefully(second.stream)
    message = await moved_to(await access_point.accept(), "sp-c", 2200.0)
    assert (message.previous, message.since, message.missing_since) == ("sp-b", 2100.0, 0.0), (
        "a Clock after the move's acknowledgement says what sp-b still owes: nothing"
    )


async def test_a_request_refused_for_the_rate_is_sent_again_after_retry_after_in_order(
    tmp_path, autojump_clock, nursery
):
    """A refusal that says when to ask again (``superpeer.ratelimit``) is no answer yet: the
    request goes again then, and one submitted meanwhile waits behind it (the user's order)."""
    access_point, client = serve_hand_played(tmp_path, nursery)
    first = await access_point.accept()
    await first.welcome()
    subscribe = m.Subscribe(id="s1", subscription=QUERY)
    ticket = client.submit(PeerRequest(message=subscribe))
    assert await first.receive() == subscribe
    refused_at = trio.current_time()
    await first.send(
        m.Refused(request="subscribe s1", reason="more subscriptions than 100", retry_after=2.5)
    )
    await trio.testing.wait_all_tasks_blocked()
    later = client.submit(PeerRequest(message=m.Unsubscribe(id="s1")))
    assert await first.receive() == subscribe
    assert trio.current_time() - refused_at == pytest.approx(2.5)
    assert await first.receive() == m.Unsubscribe(id="s1"), "the later one waited its turn"
    await first.send(m.Ack(request="subscribe s1"), m.Ack(request="unsubscribe s1"))
    assert await ticket.wait() == m.Ack(request="subscribe s1")
    assert await later.wait() == m.Ack(request="unsubscribe s1")
    statistics = client.statistics()
    assert (statistics.acknowledged, statistics.refused) == (3, 0)  # with the advertisement


async def test_a_request_refused_for_the_rate_too_often_ends_refused_with_the_reason(
    tmp_path, autojump_clock, nursery
):
    access_point, client = serve_hand_played(tmp_path, nursery, max_rate_retries=2)
    first = await access_point.accept()
    await first.welcome()
    ticket = client.locate("bob")
    for _ in range(3):
        asked = await first.receive()
        assert isinstance(asked, m.Locate)
        await first.send(
            m.Refused(request=f"locate {asked.id}", reason="more lookups", retry_after=1.0)
        )
    answer = await ticket.wait()
    assert isinstance(answer, m.Refused) and answer.reason == "more lookups"
    assert client.statistics().refused == 1


async def test_a_notification_published_after_its_subscriptions_were_withdrawn_is_not_kept(
    tmp_path, access_point, nursery
):
    """An old access point that never handed the peer over keeps routing to the subscriptions
    it still holds for it and hands that mail over later (a chaos run delivered some up to
    124 s after their withdrawal): the peer knows when it withdrew them, and keeps only what
    was published before (as the access point's rule for a withdrawal, ``clocks`` rule 3), or
    names a subscription it holds or knows nothing of. (With a margin of 5 s the peer kept two
    published 3.2 s after the withdrawal, in a chaos run on hosts.)"""
    withdrawn = 1764108000.0
    client = make_client(tmp_path, access_point.port)
    client.store.add_subscription("s1", TITLE_QUERY)
    client.store.set_active_since("s1", withdrawn - 100)
    client.store.remove_subscription("s1", withdrawn_at=withdrawn, now=withdrawn)
    client.store.add_subscription("s2", TITLE_QUERY)
    nursery.start_soon(client.serve)
    await attached(access_point)

    def at(n: int, published_at: float, subscriptions: tuple[str, ...]) -> m.Notify:
        item = dataclasses.replace(publication(), id=f"n{n}")
        return dataclasses.replace(
            notify(item, subscriptions=subscriptions), published_at=published_at
        )

    for message in (
        at(1, withdrawn + 30, ("s1",)),  # withdrawn 30 s before: not kept
        at(2, withdrawn - 1, ("s1",)),  # published before the withdrawal: kept
        at(3, withdrawn + 30, ("s1", "s2")),  # s2 is held: kept
        at(4, withdrawn + 30, ("s7",)),  # nothing known of s7: kept
        at(5, withdrawn + 3.2, ("s1",)),  # 3.2 s after: not kept
    ):
        await access_point.deliver("alice", message)
    await barrier(client)
    kept = [r["publication"] for r in client.inbox.records_after(0, max_bytes=10**6)]
    assert kept == ["n2", "n3", "n4"] and client.inbox.withdrawn == 2


async def test_a_peer_whose_access_point_is_gone_goes_to_another_it_was_told_of(tmp_path, nursery):
    """The access point names other super-peers of its cube (``Welcome.alternates``); once it
    cannot be reached the peer goes to one of them, though it was configured with the first
    alone, and a restart of the peer still knows them (``state.json``). Before, a peer cut
    off from an access point that left the cube knocked at its address until restarted."""
    first, second = FakeAccessPoint(), FakeAccessPoint()
    await nursery.start(second.serve)
    async with trio.open_nursery() as gone:
        await gone.start(first.serve)
        first.alternates = ("not an address", second.address)
        client = make_client(tmp_path, first.port)
        nursery.start_soon(client.serve)
        await attached(first)  # (its Welcome was read before the advertisement went)
        assert client.superpeers == [("127.0.0.1", first.port), ("127.0.0.1", second.port)]
        gone.cancel_scope.cancel()
    await attached(second)
    assert client.store.current.alternates == (second.address,)
    restarted = tmp_path / "restarted"
    restarted.mkdir()
    shutil.copy(tmp_path / STATE_FILE, restarted / STATE_FILE)
    assert make_client(restarted, first.port).superpeers == client.superpeers


async def test_a_peer_learns_the_super_peers_its_access_point_names_in_each_clock(
    tmp_path, nursery
):
    """``Clock.alternates``: the access point named nobody when the peer arrived (alone in its
    cube); later its ``Clock`` names another super-peer, and once the access point is gone the
    peer goes there (a chaos run, stop 79, seed 795: a peer attached for 150 s knew only the
    super-peers its ``Welcome`` had named, all gone by then, and knocked at them for three
    minutes). The same list again is not written again."""
    first, second = FakeAccessPoint(), FakeAccessPoint()
    await nursery.start(second.serve)
    async with trio.open_nursery() as gone:
        await gone.start(first.serve)
        client = make_client(tmp_path, first.port)
        nursery.start_soon(client.serve)
        await attached(first)
        assert client.superpeers == [("127.0.0.1", first.port)]
        await first.send_clock("alice", 1500.0, alternates=(second.address,))
        await barrier(client)
        assert client.superpeers == [("127.0.0.1", first.port), ("127.0.0.1", second.port)]
        assert client.store.current.alternates == (second.address,)
        written = (tmp_path / STATE_FILE).stat().st_mtime_ns
        await first.send_clock("alice", 1501.0, alternates=(second.address,))
        await barrier(client)
        assert (tmp_path / STATE_FILE).stat().st_mtime_ns == written
        gone.cancel_scope.cancel()
    await attached(second)


async def test_what_arrives_after_the_session_ended_is_not_read(tmp_path):
    """Another task may end the session while a read is under way (the silence timer, a
    failed write): the read stops there and the connection ends, the daemon lives on (a chaos
    run's peer daemon died of ``SessionError: the session has ended``)."""
    client = make_client(tmp_path, 1)
    ours, theirs = trio.testing.memory_stream_pair()
    session: Session[object] = Session("alice")
    connection = _Connection(ours, session)
    session.close()
    await theirs.send_all(b"\x00\x00\x00\x05hello")
    await client._read(connection)
    assert connection.reason == "the session ended"


def sent_again(request: m.Publish) -> m.Publish:
    return dataclasses.replace(request, again=True)


async def kept_is(client: PeerClient, count: int) -> None:
    with trio.fail_after(10):
        while len(client.kept) != count:
            await trio.sleep(0.01)


async def test_a_publication_acknowledged_alone_is_kept_and_sent_again_until_copied(
    tmp_path, access_point, nursery
):
    """``peer.kept``: an ``Ack`` that says the access point holds the publication alone makes
    the client keep it, on disk, and send it again on its next connection; an ``Ack`` without
    ``alone`` (the same access point copied it since, or another took it) ends that."""
    client = make_client(tmp_path, access_point.port)
    client.kept = Kept(tmp_path / "kept")
    client.store.set_advertisement(DC_ADVERTISEMENT)
    nursery.start_soon(client.serve)
    await attached(access_point)
    access_point.alone = True
    first = m.Publish(publication=publication(id="n1"))
    answer = await client.request(PeerRequest(message=first))
    assert answer == m.Ack(request="publish n1", alone=True)
    assert len(client.kept) == 1
    assert len(Kept(tmp_path / "kept")) == 1, "on disk before the answer is handed on"
    await access_point.drop("alice")
    await attached(access_point, times=2)
    await barrier(client)
    received = access_point.requests_from("alice")
    assert received.count(sent_again(first)) == 1, "sent again (marked so), still alone"
    assert len(client.kept) == 1
    access_point.alone = False
    await access_point.drop("alice")
    await attached(access_point, times=3)
    await kept_is(client, 0)
    assert access_point.requests_from("alice").count(sent_again(first)) == 2
    assert len(Kept(tmp_path / "kept")) == 0


async def test_the_longest_kept_is_sent_again_while_connected_then_the_others(
    tmp_path, access_point, nursery
):
    """Every ``resend_seconds`` the one kept longest goes again (a probe); once its answer says
    it is copied, the others go at once, and a later change of a resource ends its keeping."""
    client = make_client(tmp_path, access_point.port)
    client.kept = Kept(None, KeptLimits(resend_seconds=0.05))
    client.store.set_advertisement(DC_ADVERTISEMENT)
    nursery.start_soon(client.serve)
    await attached(access_point)
    access_point.alone = True
    sent = [m.Publish(publication=publication(id=f"n{n}", title=f"t{n}")) for n in range(3)]
    for request in sent:
        await client.request(PeerRequest(message=request))
    await kept_is(client, 3)
    withdraw = m.Withdraw(id="n2")
    await client.request(PeerRequest(message=withdraw))  # acknowledged: n2 is not brought back
    await kept_is(client, 2)
    with trio.fail_after(10):
        await access_point.wait_until(
            lambda: sent_again(sent[0]) in access_point.requests_from("alice")
        )
    assert sent_again(sent[1]) not in access_point.requests_from("alice"), "only the probe"
    access_point.alone = False
    await kept_is(client, 0)
    received = access_point.requests_from("alice")
    assert sent_again(sent[1]) in received and sent_again(sent[2]) not in received
