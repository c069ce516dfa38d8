"""A publication is kept once in a super-peer's store (issue 37, "write once"): the mail of every
peer it is for, the log entry and the version record keep the rest of their bytes and refer to
one body, which goes once nothing refers to it (``drop_bodies``). Both stores do the same; the
SQLite one across a reopen, and it reads what an earlier version wrote whole."""

import json
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from superpeer import versions
from superpeer.sim import Simulation
from superpeer.store import BODY, MemoryStore, SqliteStore, filled, hollowed

BODY_BYTES = b"<the publication, a kilobyte or so>" * 30


def encoded(name: str, body: bytes = BODY_BYTES) -> bytes:
    """A message's bytes with ``body`` inside, as a notification holds its publication."""
    return f"[head of {name}]".encode() + body + f"[tail of {name}]".encode()


@given(st.binary(max_size=40), st.binary(max_size=40), st.binary(min_size=1, max_size=40))
def test_a_shell_filled_with_its_body_is_the_bytes_again(head, tail, body):
    data = head + body + tail
    shell = hollowed(data, body)
    assert shell is not None and len(shell) == len(data) - len(body) + 4
    assert filled(shell, body) == data
    assert hollowed(b"", body) is None


def test_mail_for_many_peers_and_the_log_share_one_body_until_the_last_goes(reopen):
    store = reopen()
    assert store.log_publication("k", encoded("log"), 1.0, BODY_BYTES)
    numbers = {p: store.put_mail(p, "k", encoded(p), 1.0, BODY_BYTES) for p in "abc"}
    assert store.put_mail("a", "k", encoded("a"), 2.0, BODY_BYTES) is None, "a repeat"
    store = reopen()
    assert store.body("k") == BODY_BYTES
    for peer in "abc":
        assert store.mail_after(peer, 0, 10) == [(numbers[peer], encoded(peer))]
    assert list(store.logged_since(0.0)) == [encoded("log")]
    assert store.acknowledge("a", numbers["a"], 3.0) == 1
    assert store.take_mail("b", 3.0) == [encoded("b")]
    store.prune_log(5.0, 100)
    assert store.drop_bodies() == 0, "c's mail still refers to it"
    store = reopen()
    assert store.mail_after("c", 0, 10) == [(numbers["c"], encoded("c"))]
    store.expire_mail(5.0, 100)
    assert store.body("k") == BODY_BYTES, "kept until dropped"
    assert store.drop_bodies() == 1
    assert store.body("k") is None
    # mail for it again (a handover brought it back): the body is put in again
    number = store.put_mail("b", "k", encoded("b"), 6.0, BODY_BYTES)
    store = reopen()
    assert store.mail_after("b", 0, 10) == [(number, encoded("b"))]


def test_a_version_record_keeps_its_body_after_the_log_and_the_mail(reopen):
    store = reopen()
    assert store.log_publication("k", encoded("log"), 1.0, BODY_BYTES)
    store.set_pending(versions.RECORDS, "r", {"number": 1, BODY: "k"})
    number = store.put_mail("p", "k", encoded("p"), 1.0, BODY_BYTES)
    assert number is not None
    store.acknowledge("p", number, 2.0)
    store.prune_log(5.0, 0)
    store = reopen()
    assert store.drop_bodies() == 0
    assert store.body("k") == BODY_BYTES
    other = BODY_BYTES + b"v2"
    assert store.log_publication("k2", encoded("log2", other), 6.0, other)
    store.set_pending(versions.RECORDS, "r", {"number": 2, BODY: "k2"})  # the next version
    assert store.drop_bodies() == 1 and store.body("k") is None
    store.prune_log(10.0, 0)
    store = reopen()
    assert store.body("k2") == other
    store.set_pending(versions.RECORDS, "r", None)
    assert store.drop_bodies() == 1 and store.body("k2") is None


def test_a_body_not_in_the_bytes_or_unlike_the_one_kept_leaves_the_row_whole(reopen):
    store = reopen()
    assert not store.log_publication("k", b"no body in here", 1.0, BODY_BYTES)
    assert store.log_publication("k", encoded("log"), 1.0, BODY_BYTES)
    other = b"another publication under the same key"
    number = store.put_mail("p", "k", encoded("p", other), 1.0, other)
    store = reopen()
    assert store.mail_after("p", 0, 1) == [(number, encoded("p", other))]
    assert store.body("k") == BODY_BYTES
    assert list(store.logged_since(0.0)) == [encoded("log")]


def test_of_two_entries_of_one_version_the_log_keeps_the_earlier_whichever_comes_last(reopen):
    """A version accepted twice (sent again through another access point after an ``Ack``
    that said ``alone``) keeps its first acceptance's time in the log (``clocks``, rule 1):
    a later entry leaves it; an earlier one, or one of the same time (an adopted log, a
    replay), takes its place. Either way the body stays held for a version record."""
    store = reopen()
    first, again, earlier = encoded("first"), encoded("again"), encoded("earlier")
    assert store.log_publication("k", first, 5.0, BODY_BYTES)
    assert store.log_publication("k", again, 7.0, BODY_BYTES)
    store = reopen()
    assert store.logged_between(0.0, 10.0, 10) == [(5.0, first)]
    assert store.log_publication("k", earlier, 3.0, BODY_BYTES)
    assert store.log_publication("k", again, 3.0, BODY_BYTES)
    store = reopen()
    assert store.logged_between(0.0, 10.0, 10) == [(3.0, again)]
    assert not store.log_publication("w", b"whole, no body", 2.0, BODY_BYTES)
    assert not store.log_publication("w", encoded("w"), 4.0, BODY_BYTES), "the whole one stays"
    assert store.logged_between(0.0, 10.0, 10) == [(2.0, b"whole, no body"), (3.0, again)]
    store.set_pending(versions.RECORDS, "r", {BODY: "k"})
    store.prune_log(4.0, 10)
    assert store.drop_bodies() == 0 and store.body("k") == BODY_BYTES


def test_mail_and_a_log_an_earlier_version_wrote_whole_are_read_and_dropped(tmp_path):
    """The tables as the version before bodies made them, with rows in them: the store opens
    them (adding the ``body`` column), reads the rows as they are, and keeps new rows once."""
    path = tmp_path / "state.sqlite"
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE mail (delivery INTEGER PRIMARY KEY AUTOINCREMENT, peer TEXT NOT NULL,"
        " key TEXT NOT NULL, data BLOB NOT NULL, at REAL NOT NULL, UNIQUE (peer, key))"
    )
    old.execute(
        "CREATE TABLE publications (key TEXT PRIMARY KEY, data BLOB NOT NULL, at REAL NOT NULL)"
    )
    old.execute(
        "INSERT INTO mail (peer, key, data, at) VALUES (?, ?, ?, ?)", ("p", "k", encoded("p"), 1.0)
    )
    old.execute("INSERT INTO publications VALUES (?, ?, ?)", ("k", encoded("log"), 1.0))
    old.commit()
    old.close()
    store = SqliteStore(path, sync="normal")
    try:
        [(number, data)] = store.mail_after("p", 0, 10)
        assert data == encoded("p")
        assert list(store.logged_since(0.0)) == [encoded("log")]
        later = store.put_mail("p", "k2", encoded("p2"), 2.0, BODY_BYTES)
        assert store.mail_after("p", 0, 10) == [(number, encoded("p")), (later, encoded("p2"))]
        assert store.acknowledge("p", later, 3.0) == 2
        assert store.drop_bodies() == 1
    finally:
        store.close()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("mail"), st.sampled_from("pq"), st.sampled_from("kl")),
        st.tuples(st.just("log"), st.sampled_from("kl")),
        st.tuples(st.just("record"), st.sampled_from("rs"), st.sampled_from(["k", "l", None])),
        st.tuples(st.just("ack"), st.sampled_from("pq"), st.integers(0, 9)),
        st.tuples(st.just("take"), st.sampled_from("pq")),
        st.tuples(st.just("renew"), st.sampled_from("pq"), st.sampled_from("kl")),
        st.tuples(st.just("expire"), st.integers(0, 9), st.integers(0, 2)),
        st.tuples(st.just("prune"), st.integers(0, 9), st.integers(0, 2)),
        st.tuples(st.just("forget"), st.sampled_from("pq")),
        st.tuples(st.just("drop")),
        st.tuples(st.just("between"), st.integers(0, 9), st.integers(0, 9), st.integers(1, 3)),
    ),
    max_size=25,
)


def run_ops(store, ops: list[tuple]) -> list[object]:
    """What a store answers to ``ops``; a body is referred to by a record only once the log
    said it is held (as the node does). Mail is named by its place in its peer's order, not its
    number: the stores number alike in order, not densely (SQLite's counter moves on a
    repeat)."""
    answers: list[object] = []
    held: set[str] = set()
    for step, (op, *args) in enumerate(ops):
        now = float(step)
        if op == "mail":
            peer, key = args
            data = encoded(peer + key, BODY_BYTES + key.encode())
            answers.append(store.put_mail(peer, key, data, now, BODY_BYTES + key.encode()) is None)
        elif op == "log":
            (key,) = args  # logged in time order, as a node logs (the stores cut the same)
            body = BODY_BYTES + key.encode()
            if store.log_publication(key, encoded(key, body), now, body):
                held.add(key)
        elif op == "record":
            name, key = args
            value = None if key is None or key not in held else {BODY: key}
            store.set_pending(versions.RECORDS, name, value)
        elif op == "ack":
            peer, place = args
            numbers = [number for number, _ in store.mail_after(peer, 0, 100)][: place + 1]
            answers.append(store.acknowledge(peer, numbers[-1] if numbers else 0, now))
        elif op == "take":
            answers.append(store.take_mail(args[0], now))
        elif op == "renew":
            answers.append(store.renew_mail(*args) is not None)
        elif op == "expire":
            answers.append(store.expire_mail(float(args[0]), args[1]))
        elif op == "prune":
            answers.append(store.prune_log(float(args[0]), args[1]))
        elif op == "forget":
            store.forget_local(args[0])
        elif op == "between":
            since, until, limit = args
            answers.append(store.logged_between(float(since), float(until), limit))
        else:
            store.drop_bodies()
            held = {key for key in held if store.body(key) is not None}
        answers.append({p: [data for _, data in store.mail_after(p, 0, 100)] for p in "pq"})
        answers.append(sorted(store.logged_since(0.0)))
    store.drop_bodies()
    answers.append({key: store.body(key) for key in "kl"})
    return answers


def stores_agree(ops: list[tuple]) -> None:
    """Both stores answer ``ops`` alike, and the SQLite one counts every body's references."""
    with_memory = run_ops(MemoryStore(), ops)
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(Path(directory) / "state.sqlite", sync="normal")
        try:
            with_sqlite = run_ops(store, ops)
            # what is left is referred to: counted right, nothing dropped early or kept late
            refs = dict(store._read("SELECT key, refs FROM body_refs JOIN bodies ON id = body"))
            referring = store._read(
                "SELECT bodies.key FROM bodies JOIN mail ON mail.body = id UNION ALL "
                "SELECT bodies.key FROM bodies JOIN publications ON body = id UNION ALL "
                "SELECT json_extract(value, '$.body') FROM pending "
                "WHERE json_extract(value, '$.body') IS NOT NULL"
            )
            counted: dict[str, int] = {}
            for (key,) in referring:
                counted[key] = counted.get(key, 0) + 1
            assert refs == counted
        finally:
            store.close()
    assert with_sqlite == with_memory


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_both_stores_answer_alike_and_keep_a_body_exactly_while_referred_to(ops):
    stores_agree(ops)


DC = "@prefix dc: <http://purl.org/dc/elements/1.1/> .\n"
SUBSCRIPTION = 'SELECT ?x WHERE { ?x dc:creator ?y . FILTER (CONTAINS(?y, "Nejdl")) }'


def test_a_super_peer_keeps_each_publication_once_for_its_log_versions_and_subscribers(tmp_path):
    """The origin is its three subscribers' access point: one body per publication, which the
    log entry, the version record and the mail refer to; the version read back from the store
    is the one the table holds; each subscriber got each publication once."""
    stores: list[SqliteStore] = []

    def new_store(node_id: str) -> SqliteStore:
        stores.append(SqliteStore(tmp_path / f"{node_id}.sqlite", sync="normal"))
        return stores[-1]

    simulation = Simulation(1, new_store=new_store)
    simulation.apply({"op": "join", "peer": "pub", "superpeer": 0})
    simulation.apply({"op": "advertise", "peer": "pub", "schemas": ["dc"]})
    for k in range(3):
        simulation.apply({"op": "join", "peer": f"sub{k}", "superpeer": 0})
        simulation.apply({"op": "subscribe", "peer": f"sub{k}", "id": "s", "query": SUBSCRIPTION})
    for n in range(5):
        simulation.apply(
            {
                "op": "publish",
                "peer": "pub",
                "id": f"d{n}",
                "data": DC + f'<http://l3s.de/d{n}> dc:creator "W. Nejdl {n}" .',
            }
        )
    deliveries = simulation.deliveries()
    assert all(deliveries[f"sub{k}"] == [f"d{n}" for n in range(5)] for k in range(3))
    store = stores[-1]
    assert store._read("SELECT COUNT(*) FROM bodies") == [(5,)]
    assert store._read("SELECT COUNT(*) FROM publications WHERE body IS NULL") == [(0,)]
    table = simulation.nodes[simulation.ids[0]].core.versions
    stored = versions.StoredVersions(store)
    records = store.pending(versions.RECORDS)
    assert len(records) == 5
    for key, record in records.items():
        assert BODY in record and "publication" not in record
        owner, resource = json.loads(key)
        version = stored.get(owner, resource)
        assert version is not None and version == table.current(owner, resource)
        assert version.publication.id == resource
