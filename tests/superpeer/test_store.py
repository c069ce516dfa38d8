"""Both stores keep a local peer's routing state the same way, and the SQLite one keeps it
across a reopen (a restart)."""

import pytest

from superpeer.store import LocalPeerState, MemoryStore, SqliteStore


@pytest.fixture(params=["memory", "sqlite"])
def reopen(request, tmp_path):
    """A function that returns the store as a restarted daemon would find it."""
    if request.param == "memory":
        store = MemoryStore()
        yield lambda: store
        return
    stores: list[SqliteStore] = []

    def again() -> SqliteStore:
        if stores:
            stores[-1].commit()
            stores[-1].close()
        stores.append(SqliteStore(tmp_path / "state.sqlite"))
        return stores[-1]

    yield again
    stores[-1].close()


def test_a_local_peers_state_with_subscription_times_and_key_survives(reopen):
    store = reopen()
    store.set_advertisement("p", b"ad")
    store.set_subscription("p", "s1", b"one", 10.5)
    store.set_subscription("p", "s2", b"two")
    store.set_public_key("p", b"key")
    store = reopen()
    assert store.local_peers() == ["p"]
    assert store.local_state("p") == LocalPeerState(
        b"ad", {"s1": b"one", "s2": b"two"}, b"key", {"s1": 10.5}
    )
    store.set_subscription("p", "s1", None)
    store = reopen()
    assert store.local_state("p") == LocalPeerState(b"ad", {"s2": b"two"}, b"key", {})
    store.forget_local("p")
    store = reopen()
    assert store.local_peers() == []
