"""Both stores keep a local peer's routing state the same way, and the SQLite one keeps it
across a reopen (a restart)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from superpeer.config import ConfigError, config_from_mapping
from superpeer.store import LocalPeerState, SqliteStore, json_key


def test_a_local_peers_state_with_subscription_times_key_and_schema_survives(reopen):
    store = reopen()
    store.set_advertisement("p", b"ad")
    store.set_subscription("p", "s1", b"one", 10.5)
    store.set_subscription("p", "s2", b"two")
    store.set_public_key("p", b"key")
    store.set_schema("p", b"schema")
    store = reopen()
    assert store.local_peers() == ["p"]
    assert store.local_state("p") == LocalPeerState(
        b"ad", {"s1": b"one", "s2": b"two"}, b"key", {"s1": 10.5}, b"schema"
    )
    store.set_subscription("p", "s1", None)
    store.set_schema("p", None)
    store = reopen()
    assert store.local_state("p") == LocalPeerState(b"ad", {"s2": b"two"}, b"key", {})
    store.forget_local("p")
    store = reopen()
    assert store.local_peers() == []


def test_a_peer_with_only_a_schema_is_a_local_peer(reopen):
    store = reopen()
    store.set_schema("p", b"schema")
    store = reopen()
    assert store.local_peers() == ["p"]
    store.forget_local("p")
    store = reopen()
    assert store.local_peers() == []


def test_mail_taken_for_a_handover_can_be_kept_again_when_the_peer_comes_back(reopen):
    """A peer moves away with mail it has not acknowledged (the store hands it over), then
    back before its new access point delivered it: that access point hands the same mail
    back, and it must be kept, not dropped as already delivered. (Found by
    ``deploy.delivery``'s migrations: a peer moving sp1 -> sp2 -> sp1 in quick succession lost
    what sp1 had handed to sp2.)"""
    store = reopen()
    assert store.put_mail("p", "k1", b"one", 1.0) is not None
    assert store.put_mail("p", "k2", b"two", 2.0) is not None
    assert store.acknowledge("p", store.mail_after("p", 0, 1)[0][0], 3.0) == 1
    assert store.take_mail("p", 4.0) == [b"two"]
    store = reopen()
    assert store.mail_counts() == {}
    assert store.put_mail("p", "k2", b"two", 5.0) is not None, "handed over, not delivered"
    assert store.put_mail("p", "k1", b"one", 5.0) is None, "acknowledged: a repeat"
    assert store.mail_counts() == {"p": 1}


def test_mail_that_comes_back_after_a_handover_outlives_the_handover_acknowledgement(reopen):
    """Found by ``deploy.delivery``'s 50 moves: sp3 handed a detached peer's mail to sp1 and
    kept it until sp1 confirmed; meanwhile the same notification came back to sp3 with mail
    handed over from sp2 (the peer had gone round), was ignored as a repeat of the row sp3 still
    had, and sp1's late confirmation then deleted that row: the notification was nowhere. A
    repeat renews the row, out of the range the confirmation deletes."""
    store = reopen()
    first = store.put_mail("p", "k1", b"one", 1.0)
    assert first is not None
    handed_through = first  # handed over to another access point, not yet confirmed
    assert store.put_mail("p", "k1", b"one", 2.0) is None  # came back from elsewhere
    renewed = store.renew_mail("p", "k1")
    assert renewed is not None and renewed > handed_through
    assert store.drop_mail("p", handed_through) == 0  # the late confirmation
    store = reopen()
    assert store.mail_after("p", 0, 10) == [(renewed, b"one")]
    assert store.renew_mail("p", "absent") is None


def test_acknowledged_mail_is_a_repeat_until_forgotten_per_peer(reopen):
    """What a peer acknowledged is refused as a repeat (for that peer only) until
    ``forget_delivered`` passes its time."""
    store = reopen()
    for peer in ("p", "q"):
        store.put_mail(peer, "k1", b"one", 1.0)
    store.acknowledge("p", store.mail_after("p", 0, 1)[0][0], 2.0)
    store.put_mail("p", "k2", b"two", 3.0)
    store.acknowledge("p", store.mail_after("p", 0, 1)[0][0], 4.0)
    store = reopen()
    assert store.put_mail("p", "k1", b"one", 5.0) is None
    assert store.put_mail("q", "k1", b"one", 5.0) is None, "kept for q: a repeat too"
    store.forget_delivered(3.0)  # k1's acknowledgement (at 2.0) is older, k2's (4.0) is not
    assert store.put_mail("p", "k1", b"one", 6.0) is not None
    assert store.put_mail("p", "k2", b"two", 6.0) is None
    store.forget_delivered(10.0)
    assert store.put_mail("p", "k2", b"two", 11.0) is not None


def _bytes(store, key: str, start: int, end: int) -> bytes:
    """The bytes held for ``key`` in [start, end), as ``superpeer.rendezvous`` reads them."""
    return b"".join(
        data[max(0, start - offset) : end - offset]
        for offset, data in store.chunks(key, start, end)
    )


def test_rendezvous_bytes_survive_a_restart_and_go_when_dropped(reopen):
    store = reopen()
    store.put_chunk("k", 0, b"abc")
    store.put_chunk("k", 3, b"defg")
    store.put_chunk("other", 0, b"xyz")
    store.drop_chunks("other")
    store = reopen()
    assert _bytes(store, "k", 0, 7) == b"abcdefg"
    assert _bytes(store, "k", 2, 5) == b"cde"
    assert _bytes(store, "k", 7, 9) == b""
    assert _bytes(store, "other", 0, 3) == b""


def test_rendezvous_files_written_in_turns_and_one_dropped_while_written(reopen):
    """Chunks of two files in turns (the store keeps the descriptor of the file written last
    open: it switches), one file dropped while it is being written and then written again
    from nothing, and a restart: every file holds what was written to it, the dropped one
    only what came after."""
    store = reopen()
    store.put_chunk("a", 0, b"ab")
    store.put_chunk("b", 0, b"xy")
    store.put_chunk("a", 2, b"cd")
    store.put_chunk("b", 2, b"zw")
    store.drop_chunks("b")
    assert _bytes(store, "b", 0, 4) == b""
    store.put_chunk("b", 0, b"new")
    assert _bytes(store, "a", 0, 4) == b"abcd"
    store = reopen()
    assert _bytes(store, "a", 0, 4) == b"abcd"
    assert _bytes(store, "b", 0, 4) == b"new"


def test_rendezvous_bytes_an_earlier_version_kept_as_rows_move_to_their_file(tmp_path):
    """Rows of the ``rendezvous_chunks`` table (before the bytes went to files) are read into
    the files when the store opens, and the table is emptied."""
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path)
    store._write("INSERT INTO rendezvous_chunks VALUES (?, ?, ?)", ("k", 0, b"abc"))
    store._write("INSERT INTO rendezvous_chunks VALUES (?, ?, ?)", ("k", 3, b"def"))
    store.close()
    store = SqliteStore(path)
    try:
        assert _bytes(store, "k", 0, 6) == b"abcdef"
        assert store._read("SELECT COUNT(*) FROM rendezvous_chunks") == [(0,)]
    finally:
        store.close()


def test_a_stream_of_small_commits_keeps_the_write_ahead_log_within_its_bound(tmp_path):
    """Each commit appends every page it touched to sqlite's log: 300 notifications kept and
    acknowledged one commit each grew it past 4 MB on a 2 MB disk (the full-disk test's
    paused super-peer died of it after it went on). Checkpointed by every fold and started
    over by the next, the log stays within ``max_log_bytes`` and one fold's pages (a fold
    carries at most half that bound of the redo journal's frames: ``superpeer.redo``)."""
    bound = 96 * 1024
    store = SqliteStore(tmp_path / "state.sqlite", max_log_bytes=bound)
    log = tmp_path / "state.sqlite-wal"
    largest = 0
    for n in range(300):
        store.put_mail("p", f"k{n}", bytes(4000), float(n))
        store.commit()
        largest = max(largest, log.stat().st_size)
    assert largest <= bound + bound // 2 + 64 * 1024
    store.close()


@given(
    st.lists(
        st.one_of(st.text(), st.integers(), st.booleans(), st.none(), st.floats()),
        max_size=4,
    )
)
def test_a_record_key_is_its_parts_in_json(parts):
    # made without json.dumps for strings and integers (every publication has two such keys),
    # the same text: the keys of stores written before are found again
    assert json_key(*parts) == json.dumps(parts)


def test_the_page_cache_is_as_configured_and_a_small_one_is_refused(tmp_path):
    """``[store] cache_bytes``: sqlite's page cache at most (its default 2 MiB made a store of
    an hour's log read its indexes' pages from the system again and again); below 1 MiB the
    configuration is refused with a clear error."""
    store = SqliteStore(tmp_path / "state.sqlite", cache_bytes=8 * 1024 * 1024)
    try:
        assert store._read("PRAGMA cache_size") == [(-8192,)]
    finally:
        store.close()
    assert config_from_mapping({}).store.cache_bytes == 64 * 1024 * 1024
    with pytest.raises(ConfigError, match="cache_bytes"):
        config_from_mapping({"store": {"cache_bytes": 1000}})
