"""``superpeer.diskspace``: when the daemon pauses and goes on, how a full disk is recognised
wherever it was written, and what the daemon says (the real daemon on a full disk:
``tests/deploy/test_full_disk.py``)."""

import errno
import sqlite3
from pathlib import Path

import pytest
import trio
import trio.testing

from superpeer import checkconfig, diskspace
from superpeer.config import ConfigError, config_from_mapping
from superpeer.diskspace import DiskGuard, Space
from superpeer.http import readiness
from superpeer.store import SqliteStore


class Disk:
    """A file system whose free space the test sets (the guard measures it through this)."""

    def __init__(self, free: int) -> None:
        self.free = free

    def measure(self, _: Path) -> Space:
        return Space(self.free, 1000)


def test_the_guard_pauses_below_the_minimum_and_goes_on_at_the_resume_mark(tmp_path):
    disk = Disk(500)
    guard = DiskGuard(tmp_path, min_free_bytes=100, resume_free_bytes=300, measure=disk.measure)
    assert not guard.check() and guard.paused is None
    disk.free = 99
    assert guard.check()
    assert guard.paused is not None
    assert "99 bytes free of 1000" in guard.paused
    assert "less than store.min_free_bytes (100)" in guard.paused
    assert "until 300 bytes are free" in guard.paused
    disk.free = 299  # above the minimum, below the resume mark: still paused
    assert not guard.check() and guard.paused is not None
    disk.free = 300
    assert guard.check() and guard.paused is None
    assert guard.status() == {
        "free_bytes": 300, "total_bytes": 1000, "min_free_bytes": 100,
        "resume_free_bytes": 300, "paused": None, "pauses": 1,
    }  # fmt: skip
    with pytest.raises(ValueError):
        DiskGuard(tmp_path, min_free_bytes=300, resume_free_bytes=100)


async def test_a_paused_guard_holds_the_inputs_until_there_is_room(tmp_path):
    disk = Disk(10)
    guard = DiskGuard(tmp_path, min_free_bytes=100, resume_free_bytes=100, measure=disk.measure)
    guard.check()
    let_in = trio.Event()

    async def reader() -> None:
        await guard.wait_room()
        let_in.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not let_in.is_set()
        disk.free = 100
        guard.check()
        await let_in.wait()


def test_the_guard_reclaims_before_it_pauses_and_while_paused(tmp_path):
    """The store's own reclaimable space (its write-ahead log) is asked for first: a pause
    comes only if that was not enough, and a paused guard asks again at each look."""
    disk = Disk(50)
    reclaimed: list[int] = []

    def reclaim(gives: int) -> bool:
        reclaimed.append(gives)
        disk.free += gives
        return gives > 0

    guard = DiskGuard(tmp_path, min_free_bytes=100, resume_free_bytes=300, measure=disk.measure)
    guard.reclaim = lambda: reclaim(60)
    assert not guard.check() and guard.paused is None  # 50 + 60 free: no pause
    assert reclaimed == [60]
    disk.free = 20
    guard.reclaim = lambda: reclaim(0)  # nothing to give back
    assert guard.check() and guard.paused is not None
    disk.free = 150  # above the minimum, below the resume mark: the log is asked again
    guard.reclaim = lambda: reclaim(200)
    assert guard.check() and guard.paused is None
    assert reclaimed == [60, 0, 200] and guard.pauses == 1
    assert not guard.check() and reclaimed == [60, 0, 200]  # room enough: nothing asked


def test_reclaim_truncates_the_store_log_and_keeps_what_was_committed(tmp_path):
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path)
    for number in range(200):
        store.set_meta(f"key{number}", "x" * 1000)
        store.commit()
    log = Path(f"{path}-wal")
    assert log.stat().st_size > 100_000
    store.set_meta("open", "transaction")
    assert not store.reclaim()  # not inside a transaction
    store.commit()
    assert store.reclaim()
    assert log.stat().st_size == 0
    store.set_meta("after", "reclaim")
    store.commit()
    store.close()
    reopened = SqliteStore(path)
    assert reopened.get_meta("key199") == "x" * 1000
    assert reopened.get_meta("after") == "reclaim"
    reopened.close()


def test_readiness_says_why_a_paused_super_peer_is_not_ready():
    status = {"state": "member", "neighbours": {}, "disk": {"paused": "the disk is full"}}
    assert readiness(status, stopping=False) == (False, "paused: the disk is full")
    status["disk"]["paused"] = None
    assert readiness(status, stopping=False)[0]


def full_sqlite() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = 13  # what sqlite3 sets on SQLITE_FULL
    return error


def test_a_full_disk_is_found_in_groups_causes_and_contexts(tmp_path):
    full = OSError(errno.ENOSPC, "No space left on device")
    assert diskspace.disk_full(full) is full
    assert diskspace.disk_full(OSError(errno.EDQUOT, "Disk quota exceeded")) is not None
    assert diskspace.disk_full(OSError(errno.EADDRINUSE, "Address already in use")) is None
    store = full_sqlite()
    assert diskspace.disk_full(BaseExceptionGroup("tasks", [ValueError(), store])) is store
    try:
        try:
            raise store
        except sqlite3.Error:
            raise sqlite3.OperationalError("cannot commit - no transaction is active")  # noqa: B904
    except sqlite3.Error as later:
        assert diskspace.disk_full(later) is store
    assert diskspace.disk_full(sqlite3.OperationalError("database is locked")) is None


def test_the_message_names_the_file_and_the_space_left(tmp_path):
    said = diskspace.stopped_because(full_sqlite(), tmp_path)
    assert said.startswith(
        f"the store could not write {tmp_path / 'state.sqlite'} (its write-ahead log "
        "state.sqlite-wal): database or disk is full ("
    )
    assert "bytes free of" in said and f"on the file system of {tmp_path})" in said
    assert said.endswith("stopped, having sent nothing it had not made durable: make room and "
                         "start it again")  # fmt: skip
    trace = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "traces/sp0.jsonl"))
    assert "could not write " + str(
        tmp_path / "traces/sp0.jsonl"
    ) + ": No space left on device" in (diskspace.stopped_because(trace, tmp_path))


def test_the_reserve_is_configured_in_the_store_section():
    store = config_from_mapping({}).store
    assert (store.min_free_bytes, store.resume_free_bytes) == (64 * 2**20, 128 * 2**20)
    assert store.disk_check_seconds == 1.0
    mapping = {"store": {"min_free_bytes": 1000, "resume_free_bytes": 2000}}
    assert config_from_mapping(mapping).store.resume_free_bytes == 2000
    [line] = [s for s in checkconfig.summary(config_from_mapping(mapping)) if "store" in s]
    assert line.endswith("paused below 1000 bytes free (goes on at 2000)")
    with pytest.raises(ConfigError, match=r"store\.resume_free_bytes \(10\) must be at least"):
        config_from_mapping({"store": {"min_free_bytes": 100, "resume_free_bytes": 10}})
    with pytest.raises(ConfigError, match=r"store\.min_free_bytes must be positive"):
        config_from_mapping({"store": {"min_free_bytes": 0}})
    assert config_from_mapping({}).store.max_log_bytes == 16 * 2**20
    assert config_from_mapping({"store": {"max_log_bytes": 2**20}}).store.max_log_bytes == 2**20
    with pytest.raises(ConfigError, match=r"store\.max_log_bytes \(1000\) must be at least 65536"):
        config_from_mapping({"store": {"max_log_bytes": 1000}})


def test_the_log_bound_is_the_configured_size_at_most_a_quarter_of_the_reserve():
    """The daemon truncates the log back to ``StoreSettings.log_bound``: the configured size
    while the reserve holds four times it, a quarter of the reserve when it does not."""
    assert config_from_mapping({}).store.log_bound == 16 * 2**20
    small_reserve = {"store": {"min_free_bytes": 8 * 2**20, "resume_free_bytes": 8 * 2**20}}
    assert config_from_mapping(small_reserve).store.log_bound == 2 * 2**20
    large_log = {"store": {"max_log_bytes": 32 * 2**20}}
    assert config_from_mapping(large_log).store.log_bound == 16 * 2**20
