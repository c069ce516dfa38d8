"""Fixtures shared by the super-peer tests."""

import pytest

from superpeer.store import MemoryStore, SqliteStore


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
