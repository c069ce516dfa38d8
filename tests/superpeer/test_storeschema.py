"""The store's large tables are indexed by a 64-bit hash of their keys (``superpeer.storeschema``),
and a database an earlier version made opens into that shape.

``stores/stop80_crashed.tar.gz`` is a store as stop 80's code (``cad54b6``, its tables keyed by
their text) left it when killed: commits folded into the database, and more in frames of its redo
journal. ``stores/stop80_answers.json`` is what that code answered after opening a copy of the
same files (the frames ran again). Both were made by ``stores/make_stop80.py`` with that code on
``sys.path``; the answers name each row's bytes by a SHA-256 prefix."""

import hashlib
import json
import shutil
import sqlite3
import tarfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings

from superpeer import storeschema
from superpeer.store import SqliteStore
from tests.superpeer.test_bodies import OPS, stores_agree

STORES = Path(__file__).parent / "stores"
KEYS = [f'["pk1-owner", "urn:r:{i}", 0]' for i in range(40)]


def short(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def crashed_store(directory: Path) -> Path:
    with tarfile.open(STORES / "stop80_crashed.tar.gz") as archive:
        archive.extractall(directory, filter="data")
    return directory / "state.sqlite"


def answers(store: SqliteStore) -> dict:
    """What ``make_stop80.py`` recorded, read from ``store``."""
    return {
        "replayed": store.replayed,
        "last_delivery": store.last_delivery(),
        "mail": {p: [[n, short(d)] for n, d in store.mail_after(p, 0, 100)] for p in "pq"},
        "log": [short(d) for d in store.logged_since(0.0)],
        "bodies": {k: (short(b) if (b := store.body(k)) else None) for k in KEYS},
        "logged": {k: store.is_logged(k) for k in KEYS},
        "versions": store.pending("versions"),
        "refs": dict(store._read("SELECT key, refs FROM body_refs JOIN bodies ON id = body")),
        "delivered": sorted(map(list, store._read("SELECT peer, key, at FROM delivered"))),
    }


def test_a_store_stop_80_left_opens_rebuilt_and_answers_as_that_code_did(tmp_path):
    expected = json.loads((STORES / "stop80_answers.json").read_text())
    assert expected["replayed"] > 0, "the fixture has frames to run again"
    store = SqliteStore(crashed_store(tmp_path), sync="normal")
    try:
        assert answers(store) == expected
        assert store.rebuilt == ["bodies", "body_refs", "publications", "mail", "delivered"]
        assert storeschema.keyed_by_text(store._db) == []
        indexes = {row[0] for row in store._read("SELECT name FROM sqlite_master")}
        assert {"bodies_hash", "delivered_hash", "publications_hash", "bodies_unused"} <= indexes
        assert not any(name.endswith("_keyed") or "autoindex_bodies" in name for name in indexes)
        # and it goes on: a repeat of what p acknowledged is refused, a new body counted, and
        # once nothing refers to them every body goes
        (peer, key, _), *_ = expected["delivered"]
        assert store.put_mail(peer, key, b"again", 99.0) is None
        assert store.log_publication("new", b"[x]" + b"b" * 64 + b"[y]", 99.0, b"b" * 64)
        store.commit()
    finally:
        store.close()
    store = SqliteStore(tmp_path / "state.sqlite", sync="normal")
    try:
        assert store.rebuilt == [] and answers(store)["mail"] == expected["mail"]
        for peer in "pq":
            store.acknowledge(peer, 10**9, 100.0)
        store.prune_log(1000.0, 0)
        for name in store.pending("versions"):
            store.set_pending("versions", name, None)
        assert store.drop_bodies() == len([b for b in expected["bodies"].values() if b]) + 1
        assert store._read("SELECT COUNT(*) FROM bodies") == [(0,)]
        assert store._read("SELECT COUNT(*) FROM body_refs") == [(0,)]
    finally:
        store.close()


def test_a_crash_while_the_tables_are_rebuilt_leaves_the_old_ones_and_the_next_open_rebuilds(
    tmp_path,
):
    path = crashed_store(tmp_path / "first")
    broken = dict(storeschema._COPIES, body_refs="INSERT INTO nowhere SELECT 1")
    with mock.patch.object(storeschema, "_COPIES", broken), pytest.raises(sqlite3.Error):
        SqliteStore(path, sync="normal")
    # the files as the failed open left them (its connection still open: a crash)
    again = tmp_path / "again"
    shutil.copytree(tmp_path / "first", again)
    store = SqliteStore(again / "state.sqlite", sync="normal")
    try:
        expected = json.loads((STORES / "stop80_answers.json").read_text())
        assert answers(store) | {"replayed": 0} == expected | {"replayed": 0}
        assert storeschema.keyed_by_text(store._db) == []
    finally:
        store.close()


def test_a_row_whose_body_is_gone_stops_the_rebuild_and_leaves_the_store_as_it_was(tmp_path):
    """Read by an earlier version, such a row was an error; rebuilt without its body it would
    be a shell read as whole bytes. The open fails with the count, and changes nothing."""
    path = crashed_store(tmp_path / "first")
    old = sqlite3.connect(path)
    old.execute(
        "UPDATE mail SET body = 'a key of no body' WHERE delivery = (SELECT MAX(delivery) FROM mail)"
    )
    old.commit()
    old.close()
    with pytest.raises(sqlite3.IntegrityError, match="1 rows of mail refer to a body"):
        SqliteStore(path, sync="normal")
    again = tmp_path / "again"
    shutil.copytree(tmp_path / "first", again)
    check = sqlite3.connect(again / "state.sqlite")
    assert "key" in {row[1] for row in check.execute("PRAGMA table_info(body_refs)")}
    check.close()


@settings(max_examples=30, deadline=None)
@given(OPS)
def test_keys_of_one_hash_are_told_apart_by_their_text(ops):
    """Every key hashed alike: each lookup finds the rows of all of them and keeps its own."""
    with (
        mock.patch("superpeer.storeschema.key_hash", lambda *parts: 7),
        mock.patch("superpeer.store.key_hash", lambda *parts: 7),
    ):
        stores_agree(ops)


def test_the_hash_is_the_same_in_every_process():
    """Stored hashes outlive the process (``hash()`` of a str does not)."""
    assert storeschema.key_hash('["a", "b", 0]') == 4962690000256899010
    assert storeschema.key_hash("p", "k") != storeschema.key_hash("pk")
