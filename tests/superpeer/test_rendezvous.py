"""``superpeer.rendezvous`` without sockets: the named limits and who may do what."""

import dataclasses
import hashlib

import pytest

from superpeer.actions import ToPeer
from superpeer.config import ConfigError, config_from_mapping
from superpeer.rendezvous import INCOMING, Rendezvous, RendezvousConfig
from superpeer.routes import Whereabouts
from superpeer.store import MemoryStore, SqliteStore
from wire import messages as m

SHA = "ab" * 32


def fetch(size: int, publication: str = "p1") -> m.Fetch:
    return m.Fetch(
        publication=publication,
        owner="owner",
        superpeer="sp-far",
        access_point="127.0.0.1:1",
        sha256=SHA,
        size=size,
    )


def replies(out: list) -> list[object]:
    return [o.message for o in out if isinstance(o, ToPeer)]


def test_a_fetch_beyond_the_quota_is_refused_and_one_within_it_counts_once():
    sent: list = []
    node = Rendezvous(
        "sp-here",
        MemoryStore(),
        send=lambda *a, **k: sent.append(a),
        where=lambda: None,
        whereabouts=lambda peer: Whereabouts(),
        look_up=lambda *a: None,
        config=RendezvousConfig(max_bytes=1000),
    )
    out: list = []
    node.fetch("alice", fetch(600), 0.0, out)
    node.fetch("alice", fetch(600), 1.0, out)  # the same rendezvous: not counted twice
    node.fetch("alice", fetch(600, "p2"), 2.0, out)
    answers = replies(out)
    assert [type(a) for a in answers] == [m.Ack, m.Ack, m.Refused]
    assert "max_bytes = 1000" in answers[2].reason
    status = node.status()
    assert status["files"] == 1 and status["reserved_bytes"] == 600 and status["max_bytes"] == 1000


def _over(store) -> Rendezvous:
    """A node whose owner ``owner`` is attached and which is not a cube member (what it would
    send on is dropped: the records are what is looked at)."""
    return Rendezvous(
        "sp-here",
        store,
        send=lambda *a, **k: None,
        where=lambda: None,
        whereabouts=lambda peer: Whereabouts(attached=True),
        look_up=lambda *a: None,
    )


def _request(key: str, *, requester: str, length: int) -> m.RendezvousRequest:
    """A request for the first ``length`` bytes of ``owner`` 's ``p1``, reaching sp-here."""
    return m.RendezvousRequest(
        rendezvous=key,
        target="sp-here",
        target_position=0,
        requester=requester,
        requester_superpeer="sp-far",
        requester_position=1,
        owner="owner",
        publication="p1",
        offset=0,
        length=length,
        hops=0,
    )


def test_only_the_owner_answers_and_only_the_requester_collects():
    store = MemoryStore()
    node = _over(store)
    out: list = []
    node.route(_request("k1", requester="alice", length=10), 0.0, out)
    node.upload("mallory", m.Upload(rendezvous="k1", offset=0, data=b"forged"), 0.0, out)
    assert node.statistics.refused == 1 and "k1" in store.pending("rendezvous-out")
    node.collect("mallory", m.Collect(rendezvous="k1", offset=0, length=10), out)
    [refusal] = replies(out)
    assert isinstance(refusal, m.FetchFailed)


def test_rendezvous_limits_are_configurable_and_checked():
    config = config_from_mapping({"rendezvous": {"max_bytes": 5, "retention_seconds": 60}})
    assert (
        config.rendezvous.max_bytes == 5
        and config.node_config(tracing=False).rendezvous.max_bytes == 5
    )
    with pytest.raises(ConfigError, match="chunk_bytes"):
        config_from_mapping({"rendezvous": {"chunk_bytes": 1 << 20}})
    with pytest.raises(ConfigError, match="unknown"):
        config_from_mapping({"rendezvous": {"quota": 5}})


def test_chunks_relayed_and_received_read_no_record_from_the_store_and_the_records_last(
    tmp_path,
):
    """The records are read from sqlite once and written through: the owner's uploads relayed
    and the chunks received (each a read and a JSON decoding of the record before) make no
    SELECT; what they change the store keeps, as a restarted node finds it."""
    data = b"abcdefghi"
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path)
    node = _over(store)
    out: list = []
    requested = fetch(len(data))
    node.fetch(
        "alice", dataclasses.replace(requested, sha256=hashlib.sha256(data).hexdigest()), 0.0, out
    )
    [key] = store.pending(INCOMING)
    node.route(_request("k-out", requester="bob", length=len(data)), 0.0, out)
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    for offset in range(0, len(data), 3):
        piece = data[offset : offset + 3]
        node.upload("owner", m.Upload(rendezvous="k-out", offset=offset, data=piece), 1.0, out)
        chunk = m.RendezvousChunk(
            rendezvous=key,
            target="sp-here",
            target_position=0,
            offset=offset,
            data=piece,
            error="",
            hops=0,
        )
        node.route(chunk, 1.0, out)
    store._db.set_trace_callback(None)
    assert statements and not [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert node.status()["ready"] == 1 and node.status()["waiting_for_owners"] == 0
    store.close()
    again = _over(SqliteStore(path))
    try:
        status = again.status()
        assert status["ready"] == 1 and status["bytes"] == len(data)
        assert status["waiting_for_owners"] == 0
    finally:
        again.store.close()
