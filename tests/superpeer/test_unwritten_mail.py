"""Mail held unwritten (``superpeer._unwritten``): the store answers as if it had been written,
and writes nothing for mail acknowledged before anything reads it."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.writes import CountingStore
from superpeer import store as store_module
from superpeer.mailroom import Mailroom
from superpeer.store import MemoryStore, SqliteStore
from tests.peer.helpers import notify, publication
from tests.superpeer.test_redo import crash_copy
from wire import messages as m

PEERS = ("p", "q")
KEYS = tuple(f"k{n}" for n in range(5))

_peer = st.sampled_from(PEERS)
_number = st.integers(min_value=0, max_value=10)
_published = st.integers(min_value=0, max_value=40)
_put = st.tuples(st.just("put"), _peer, st.sampled_from(KEYS), st.booleans(), _published)
_acknowledge = st.tuples(st.just("acknowledge"), _peer, _number)
_after = st.tuples(st.just("after"), _peer, st.just(0), st.integers(min_value=1, max_value=4))
_operation = st.one_of(
    # mostly what a stream does (mail put, acknowledged, read); the rest write what is held
    _put,
    _put,
    _put,
    _acknowledge,
    _acknowledge,
    _after,
    st.tuples(st.just("after"), _peer, _number, st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("forget delivered"), st.integers(min_value=0, max_value=40)),
    st.one_of(
        st.tuples(st.just("take"), _peer),
        st.tuples(st.just("drop"), _peer, _number),
        st.tuples(st.just("renew"), _peer, st.sampled_from(KEYS)),
        st.tuples(st.just("discard"), _peer, _number),
        st.tuples(st.just("counts")),
        st.tuples(st.just("expire"), st.integers(min_value=0, max_value=40), st.integers(1, 3)),
        st.tuples(st.just("forget local"), _peer),
        st.tuples(st.just("flush")),
        st.tuples(st.just("flush before"), _published),
        st.tuples(st.just("reopen")),
    ),
)


def _apply(store, operation: tuple, at: float) -> object:
    match operation:
        case ("put", peer, key, recoverable, published):
            data = f"{key} for {peer}".encode()
            return store.put_mail(
                peer, key, data, at, recoverable=recoverable, published_at=float(published)
            )
        case ("acknowledge", peer, through):
            return store.acknowledge(peer, through, at)
        case ("after", peer, after, limit):
            return store.mail_after(peer, after, limit)
        case ("take", peer):
            return store.take_mail(peer, at)
        case ("drop", peer, through):
            return store.drop_mail(peer, through)
        case ("renew", peer, key):
            return store.renew_mail(peer, key)
        case ("discard", peer, number):
            return store.discard_mail(peer, number)
        case ("counts",):
            return store.mail_counts()
        case ("expire", before, cap):
            return store.expire_mail(before, cap)
        case ("forget delivered", before):
            return store.forget_delivered(before)
        case ("forget local", peer):
            return store.forget_local(peer)
        case ("flush",):
            return store.flush_mail()
        case ("flush before", before):
            return store.flush_mail(before=float(before))
    raise AssertionError(operation)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=st.lists(_operation, max_size=40))
def test_mail_held_unwritten_answers_as_written_mail_does(tmp_path_factory, operations):
    """Against ``MemoryStore`` (which holds nothing apart): every answer the same, the numbers
    included, through reopens (a clean restart writes what is held) and every other use of the
    mail; ``recoverable`` and the publication's time chosen at random for each put, and what
    is written when ``alive_at`` is kept (``flush_mail(before=...)``) too."""
    path = tmp_path_factory.mktemp("unwritten") / "state.sqlite"
    oracle, store = MemoryStore(), SqliteStore(path, sync="normal")
    try:
        for step, operation in enumerate(operations):
            at = float(step)
            if operation == ("reopen",):
                store.commit()
                store.close()
                store = SqliteStore(path, sync="normal")
                assert store.last_delivery() == oracle.last_delivery(), "numbers go on"
                continue
            expected = _apply(oracle, operation, at)
            assert _apply(store, operation, at) == expected, (step, operation)
        assert store.mail_counts() == oracle.mail_counts()
    finally:
        store.close()


def test_recoverable_mail_acknowledged_before_anything_reads_it_writes_only_its_keys(tmp_path):
    store = CountingStore(tmp_path / "state.sqlite")
    numbers = [store.put_mail("p", f"k{n}", b"mail", 1.0, recoverable=True) for n in range(3)]
    assert numbers == [1, 2, 3]
    assert store.put_mail("p", "k1", b"mail", 1.5, recoverable=True) is None, "held: a repeat"
    assert store.acknowledge("p", 3, 2.0) == 3
    assert all("INTO mail" not in sql and "FROM mail" not in sql for sql in store.written)
    assert sum("INTO delivered" in sql for sql in store.written) == 1, "one for the three"
    assert store.put_mail("p", "k2", b"mail", 3.0, recoverable=True) is None, "delivered: a repeat"
    assert store.put_mail("p", "k9", b"mail", 3.0) == 4, "numbers go on"
    assert store.mail_counts() == {"p": 1}
    store.close()


def test_alive_at_writes_only_the_held_mail_a_catch_up_from_it_would_not_find(tmp_path):
    """``flush_mail(before=alive_at - margin)``: the mail published before that is written
    (the catch-up after a crash would start after it), the rest stays held, and only the
    written mail is there after a crash (held mail is lost with the process: what the
    catch-up from the ``alive_at`` on disk brings back, ``superpeer._unwritten``)."""
    path = tmp_path / "state.sqlite"
    store = CountingStore(path)
    for n, published in enumerate((10.0, 14.0, 15.0, 20.0)):
        store.put_mail("p", f"k{n}", b"mail", 30.0, recoverable=True, published_at=published)
    store.put_mail("q", "old", b"mail", 30.0, recoverable=True)  # no time given: written first
    store.flush_mail(before=15.0)  # alive_at 20, a margin of 5
    assert sum("INTO mail" in sql for sql in store.written) == 3, "k0, k1 and q's"
    assert store.mail_after("p", 0, 10) == [(n, b"mail") for n in (1, 2, 3, 4)], "all of it"
    store.commit()
    crashed = SqliteStore(crash_copy(path, tmp_path / "crashed"), sync="normal")
    assert crashed.mail_after("p", 0, 10) == [(1, b"mail"), (2, b"mail")]
    assert crashed.mail_counts() == {"p": 2, "q": 1}
    crashed.close()
    store.close()


def test_no_more_than_held_mail_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "HELD_MAIL", 2)
    store = CountingStore(tmp_path / "state.sqlite")
    for n in range(3):
        store.put_mail("p", f"k{n}", b"mail", 1.0, recoverable=True)
    assert sum("INTO mail" in sql for sql in store.written) == 1, "the third is written"
    assert store.acknowledge("p", 3, 2.0) == 3
    assert store.mail_counts() == {}
    store.close()


def test_held_mail_is_read_as_it_is_and_written_when_its_peers_mail_changes_or_alive_at_is_kept(
    tmp_path,
):
    store = CountingStore(tmp_path / "state.sqlite")
    store.put_mail("p", "k1", b"one", 1.0, recoverable=True)
    store.put_mail("q", "k1", b"one", 1.0, recoverable=True)
    store.put_mail("p", "k2", b"two", 1.0)  # written: numbered between p's held mail
    store.put_mail("p", "k3", b"three", 1.0, recoverable=True)
    assert store.mail_after("p", 0, 10) == [(1, b"one"), (3, b"two"), (4, b"three")]
    assert store.mail_after("p", 1, 1) == [(3, b"two")], "held and written, in number order"
    assert store.mail_after("p", 3, 10) == [(4, b"three")]
    assert sum("INTO mail" in sql for sql in store.written) == 1, "a read writes nothing"
    store.discard_mail("p", 3)
    assert sum("INTO mail" in sql for sql in store.written) == 3, "a change: p's written"
    store.flush_mail()
    assert sum("INTO mail" in sql for sql in store.written) == 4
    assert store.acknowledge("q", 2, 2.0) == 1, "a written row acknowledged as before"
    store.close()
    again = SqliteStore(tmp_path / "state.sqlite", sync="normal")
    assert again.mail_counts() == {"p": 2}
    again.close()


class _Covered(MemoryStore):
    """A store that notes which mail the mail room called recoverable."""

    def __init__(self) -> None:
        super().__init__()
        self.recoverable: dict[str, bool] = {}
        self.published: dict[str, float] = {}

    def put_mail(self, peer, key, data, now, body=None, *, recoverable=False, **given):  # type: ignore[no-untyped-def, override]
        self.recoverable[peer] = recoverable
        self.published[peer] = given["published_at"]
        return super().put_mail(peer, key, data, now, body, recoverable=recoverable, **given)


@pytest.mark.parametrize(
    ("attached", "window", "age", "recoverable"),
    [
        (True, 4, 0.0, True),
        (True, 4, 2.0, True),
        (True, 4, 3.0, False),  # older than recoverable_seconds: a catch-up might not find it
        (False, 4, 0.0, False),  # kept for a detached peer: written
        (True, 0, 0.0, True),  # the window is full: it waits, held, for room
        (True, 0, 3.0, False),
    ],
)
def test_the_mail_room_calls_recoverable_only_mail_for_an_attached_peer_a_catch_up_would_find(
    attached, window, age, recoverable
):
    store = _Covered()
    room = Mailroom("sp", store, window=max(window, 1), recoverable_seconds=2.5)
    now = 1000.0
    if attached:
        room.attach("p", 1, now)
    if window == 0:
        room.deliver("p", _notify("first", now), now)  # fills the window of one
    room.deliver("p", _notify("this", now - age), now)
    assert store.recoverable["p"] is recoverable
    assert store.published["p"] == now - age, "and when it was published, for flush_mail"


def _notify(publication_id: str, published_at: float) -> m.Notify:
    return dataclasses.replace(notify(publication(id=publication_id)), published_at=published_at)


def test_mail_that_waits_for_room_in_a_window_is_held_sent_and_acknowledged_without_a_row(
    tmp_path,
):
    store = CountingStore(tmp_path / "state.sqlite")
    room = Mailroom("sp", store, window=2, recoverable_seconds=2.5, tracing=False)
    now = 1000.0
    room.attach("p", 1, now)
    sent = [
        output.message.delivery
        for n in range(5)
        for output in room.deliver("p", _notify(f"n{n}", now), now)
    ]
    assert sent == [1, 2], "the window holds two; three wait"
    for through in (2, 4, 5):
        sent += [output.message.delivery for output in room.acknowledged("p", through, now)]
    assert sent == [1, 2, 3, 4, 5], "each refill sends what waited, in order"
    assert not any("INTO mail" in sql for sql in store.written), "no row written"
    assert sum("INTO delivered" in sql for sql in store.written) == 3, "one per Delivered"
    assert store.mail_counts() == {}
    store.close()
