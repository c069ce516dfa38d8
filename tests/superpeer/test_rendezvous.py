"""``superpeer.rendezvous`` without sockets: the named limits and who may do what."""

import pytest

from superpeer.actions import ToPeer
from superpeer.config import ConfigError, config_from_mapping
from superpeer.rendezvous import Rendezvous, RendezvousConfig
from superpeer.routes import Whereabouts
from superpeer.store import MemoryStore
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


def test_only_the_owner_answers_and_only_the_requester_collects():
    store = MemoryStore()
    node = Rendezvous(
        "sp-here",
        store,
        send=lambda *a, **k: None,
        where=lambda: None,
        whereabouts=lambda peer: Whereabouts(attached=True),
        look_up=lambda *a: None,
    )
    out: list = []
    request = m.RendezvousRequest(
        rendezvous="k1",
        target="sp-here",
        target_position=0,
        requester="alice",
        requester_superpeer="sp-here",
        requester_position=0,
        owner="owner",
        publication="p1",
        offset=0,
        length=10,
        hops=0,
    )
    node.route(request, 0.0, out)
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
