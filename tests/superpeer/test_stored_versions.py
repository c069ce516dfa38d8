"""The versions of an owner's resources beyond ``max_cached_versions`` are read from the store
(``superpeer.versions.ResourceVersions`` with ``StoredVersions``): against the table that holds
every version in memory (the oracle), the same answers to every request, the same expiries, the
same limit, across restarts, with at most the bound held; the store written as the node writes
it (``SuperPeerNode``: each change a call returns, before the next call)."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import qel
from superpeer import versions
from superpeer.config import ConfigError, config_from_mapping
from superpeer.store import MemoryStore, SqliteStore

DC = "http://purl.org/dc/elements/1.1/"
OWNERS = ("a", "b")
RESOURCES = tuple(f"r{k}" for k in range(6))
LIMITS = versions.VersionLimits(max_resources_per_peer=5, max_cached_versions=3)


def publication(owner: str, resource: str, text: str) -> qel.Publication:
    return qel.Publication(
        qel.URI(f"http://example.org/{resource}"),
        frozenset({(qel.URI(DC + "title"), qel.Literal(text))}),
        owner,
        resource,
    )


operations = st.lists(
    st.tuples(
        st.sampled_from(("publish", "update", "extend", "withdraw", "expire", "leave", "restart")),
        st.sampled_from(OWNERS),
        st.sampled_from(RESOURCES),
        st.sampled_from(("x", "y")),
        st.sampled_from((None, 5.0, 20.0)),
    ),
    max_size=80,
)


class Stored:
    """The bounded table over a store, written as the node writes it."""

    def __init__(self, store) -> None:
        self.store = store
        self.table = versions.ResourceVersions(LIMITS, versions.StoredVersions(store))

    def restart(self) -> None:
        self.table = versions.ResourceVersions(LIMITS, versions.StoredVersions(self.store))
        self.table.restore_stored()

    def wrote(self, owner: str, change: versions.Change | None) -> None:
        if change is not None:
            version = versions.Version.of(
                change.number, change.publication, change.retracted, change.expires
            )
            self.store.set_pending(versions.RECORDS, *versions.version_record(owner, version))


def attempt(
    table: versions.ResourceVersions,
    action: str,
    new: qel.Publication,
    now: float,
    expires: float | None,
) -> tuple[versions.Change | None, str | None]:
    """What ``table`` answers to the owner's request: the change, or why it is refused."""
    try:
        if action == "withdraw":
            return table.withdraw(new.publisher, new.id, now), None
        return table.publish(new.publisher, new, action, now, expires), None
    except versions.VersionError as error:
        return None, str(error)


@settings(max_examples=300, deadline=None)
@given(operations, st.sampled_from(("memory", "sqlite")))
def test_a_bounded_table_answers_as_the_table_of_everything(tmp_path_factory, steps, kind):
    store = (
        MemoryStore()
        if kind == "memory"
        else SqliteStore(tmp_path_factory.mktemp("s") / "db", sync="normal")
    )
    oracle = versions.ResourceVersions(LIMITS)
    bounded = Stored(store)
    now = 0.0
    spilled = False
    for step, (action, owner, resource, text, expires) in enumerate(steps):
        now += 1.0
        if action == "restart":
            bounded.restart()
        elif action == "expire":
            now += 10.0
            expected = oracle.expire(now)
            got = bounded.table.expire(now)
            assert sorted(got, key=repr) == sorted(expected, key=repr), step
            for holder, tombstone in got:
                key, value = versions.version_record(holder, tombstone)
                store.set_pending(versions.RECORDS, key, value)
        elif action == "leave":  # the node deletes the owner's records (``m.Leave``)
            oracle.forget(owner)
            bounded.table.forget(owner)
            for key in versions.forget_records(store, owner):
                store.set_pending(versions.RECORDS, key, None)
        else:
            new = publication(owner, resource, f"{text}{step % 2}")
            got = attempt(bounded.table, action, new, now, expires)
            assert got == attempt(oracle, action, new, now, expires), step
            bounded.wrote(owner, got[0])
        assert bounded.table.next_expiry() == oracle.next_expiry(), step
        for holder in OWNERS:
            for name in RESOURCES:
                assert bounded.table.current(holder, name) == oracle.current(holder, name), step
            assert bounded.table.resources_of(holder) == oracle.resources_of(holder), step
        assert len(bounded.table._held) <= LIMITS.max_cached_versions + 1
        spilled |= bool(bounded.table._spilled)
    event(f"read from the store: {spilled}")


def test_the_bounds_are_configured_in_limits_and_refused_when_not_positive():
    limits = {"max_resources_per_peer": 1_000_000, "max_cached_versions": 50}
    config = config_from_mapping({"limits": limits}).node_config(tracing=False)
    assert config.routing.versions == versions.VersionLimits(**limits)
    defaults = config_from_mapping({}).node_config(tracing=False).routing.versions
    assert (defaults.max_resources_per_peer, defaults.max_cached_versions) == (10**7, 10_000)
    with pytest.raises(ConfigError, match="max_cached_versions"):
        config_from_mapping({"limits": {"max_cached_versions": 0}})


def test_an_owner_beyond_the_cache_is_counted_against_its_limit_from_the_store():
    store = MemoryStore()
    bounded = Stored(store)
    for k in range(5):  # the limit (5), three held at most
        new = publication("a", f"r{k}", "x")
        bounded.wrote("a", attempt(bounded.table, "publish", new, 1.0, None)[0])
    assert len(bounded.table._held) <= LIMITS.max_cached_versions + 1
    bounded.restart()  # nothing held: the count comes from the store
    refused = attempt(bounded.table, "publish", publication("a", "r9", "x"), 2.0, None)
    assert refused == (
        None,
        "you have 5 resources at this access point, the most "
        "max_resources_per_peer allows: retract one, or publish elsewhere",
    )
    assert attempt(bounded.table, "publish", publication("b", "r9", "x"), 2.0, None)[1] is None
