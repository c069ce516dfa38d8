"""Group commit (``superpeer._commits``): inputs that arrive together share one commit and one
fsync, and no output leaves before a sync that followed the commit of the input that produced it.
"""

import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from superpeer import cli
from superpeer._commits import GroupCommit
from superpeer.config import ConfigError, config_from_mapping
from superpeer.store import SqliteStore


class Journal:
    """A store that keeps one ordered record of writes, commits, syncs and sends: the invariant
    is read off it. ``gate`` (when set) holds each sync until the test releases it."""

    def __init__(self, *, syncs: bool = True) -> None:
        self.syncs = syncs
        self.events: list[tuple[str, object]] = []
        self.written = self.committed = self.durable = 0
        self.gate: threading.Semaphore | None = None
        self.syncing = threading.Event()

    @property
    def uncommitted(self) -> bool:
        return self.written > self.committed

    deferrable = True

    @property
    def unsynced(self) -> bool:
        return self.durable < self.committed

    def write(self) -> int:
        self.written += 1
        self.events.append(("write", self.written))
        return self.written

    def commit(self, *, synced: bool = True) -> None:
        if self.uncommitted:
            self.committed = self.written
            self.events.append(("commit", self.written))
        if (synced or not self.syncs) and self.durable < self.committed:
            self.sync()

    def sync(self) -> None:
        through = self.committed
        if self.gate is not None and threading.current_thread() is not threading.main_thread():
            self.syncing.set()
            self.gate.acquire()
        self.durable = max(self.durable, through)
        self.events.append(("sync", through))

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)


def apply(journal: Journal, group: GroupCommit, name: str) -> None:
    """An input: it writes to the store, then its output is held."""
    group.add(0.0, [(name, journal.write())])


def recorder(journal: Journal, sent: list[str]):  # type: ignore[no-untyped-def]
    def dispatch(_now: float, outputs: list[tuple[str, int]]) -> None:
        for name, written in outputs:
            assert written <= journal.durable, f"{name} left before its write was synced"
            journal.events.append(("send", name))
            sent.append(name)

    return dispatch


def gated() -> tuple[Journal, list[str], GroupCommit]:
    """A group over a store whose worker-thread syncs wait for ``journal.gate``."""
    journal, sent = Journal(), []
    journal.gate = threading.Semaphore(0)
    return journal, sent, GroupCommit(journal, recorder(journal, sent), max_inputs=100)


async def syncing(journal: Journal, group: GroupCommit, name: str) -> None:
    """Apply ``name``; return once its group's fsync is under way on the worker thread."""
    apply(journal, group, name)
    await trio.to_thread.run_sync(journal.syncing.wait)
    journal.syncing.clear()


@contextlib.asynccontextmanager
async def committing(group: GroupCommit) -> AsyncIterator[None]:
    """The committer task runs inside."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        yield
        nursery.cancel_scope.cancel()


async def wait_until(condition) -> None:  # type: ignore[no-untyped-def]
    """The committer's sync runs on a worker thread: wait for what it leads to."""
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.001)


async def test_inputs_that_arrive_together_share_one_commit_and_sync_and_leave_in_order():
    journal, sent = Journal(), []
    group = GroupCommit(journal, recorder(journal, sent), max_inputs=100)
    async with committing(group):
        for k in range(10):
            apply(journal, group, f"a{k}")
        assert sent == [] and journal.count("commit") == 0, "held until the committer runs"
        await wait_until(lambda: len(sent) == 10)
        assert sent == [f"a{k}" for k in range(10)]
        assert journal.count("commit") == journal.count("sync") == 1
        apply(journal, group, "lone")
        await wait_until(lambda: len(sent) == 11)
        assert journal.count("commit") == journal.count("sync") == 2
    statistics = group.statistics()
    assert (statistics.inputs, statistics.groups, statistics.largest) == (11, 2, 10)


async def test_the_runtime_is_told_once_per_group_before_the_group_leaves():
    # the daemon looks at its next timer deadline then, not after every input
    journal, sent = Journal(), []
    told: list[int] = []
    group = GroupCommit(
        journal,
        recorder(journal, sent),
        max_inputs=100,
        committed=lambda: told.append(journal.committed),
    )
    async with committing(group):
        for k in range(10):
            apply(journal, group, f"a{k}")
        assert told == []
        await wait_until(lambda: len(sent) == 10)
        assert told == [10], "once, for the ten inputs of the group, once they are committed"
        apply(journal, group, "lone")
        await wait_until(lambda: len(sent) == 11)
        assert told == [10, 11]


async def test_what_arrives_from_many_tasks_during_a_sync_is_the_next_group_with_one_sync():
    journal, sent, group = gated()
    go = trio.Event()

    async def reader(name: str) -> None:
        await go.wait()
        for k in range(5):  # one record per read: a checkpoint between inputs
            apply(journal, group, f"{name}{k}")
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        for name in "abc":
            nursery.start_soon(reader, name)
        await syncing(journal, group, "first")
        go.set()
        await trio.testing.wait_all_tasks_blocked()  # the readers are done, the sync is not
        assert sent == []
        journal.gate.release()
        await trio.to_thread.run_sync(journal.syncing.wait)  # the next group's one sync
        journal.gate.release()
        await wait_until(lambda: len(sent) == 16)
        nursery.cancel_scope.cancel()
    assert journal.count("commit") == journal.count("sync") == 2
    assert group.statistics().largest == 15


async def test_the_next_group_is_applied_while_the_last_one_syncs_and_waits_for_its_own_sync():
    journal, sent, group = gated()
    async with committing(group):
        await syncing(journal, group, "first")
        apply(journal, group, "second")  # applied meanwhile: the trio thread is free
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [] and journal.count("commit") == 1
        journal.gate.release()
        await wait_until(lambda: sent == ["first"])
        await trio.to_thread.run_sync(journal.syncing.wait)  # the second group's own fsync
        assert sent == ["first"]
        journal.gate.release()
        await wait_until(lambda: sent == ["first", "second"])


async def test_a_group_is_committed_synced_and_sent_at_once_when_it_reaches_its_bound():
    journal, sent = Journal(), []
    group = GroupCommit(journal, recorder(journal, sent), max_inputs=4)
    for k in range(10):  # one task, no checkpoint: only the bound commits
        apply(journal, group, f"a{k}")
    assert sent == [f"a{k}" for k in range(8)]
    assert journal.count("commit") == journal.count("sync") == 2
    group.flush()
    assert len(sent) == 10
    statistics = group.statistics()
    assert (statistics.groups, statistics.largest, statistics.bounded) == (3, 4, 2)


async def test_an_input_applied_while_outputs_are_sent_is_synced_before_its_own_leave():
    journal, sent = Journal(), []
    group: GroupCommit[tuple[str, int]]
    send = recorder(journal, sent)

    def dispatch(now: float, outputs: list[tuple[str, int]]) -> None:
        send(now, outputs)
        if outputs[0][0] == "a0":  # a link overflowed: the node is told at once
            apply(journal, group, "overflow")

    group = GroupCommit(journal, dispatch, max_inputs=100)
    apply(journal, group, "a0")
    apply(journal, group, "a1")
    group.flush()
    assert sent == ["a0", "a1", "overflow"], "after what was held before"
    assert journal.count("sync") == 2


async def test_a_group_that_wrote_nothing_leaves_without_a_sync_but_after_those_before_it():
    journal, sent, group = gated()
    async with committing(group):
        await syncing(journal, group, "written")
        group.add(0.0, [("relayed", 0)])  # wrote nothing, but queued behind "written"
        await trio.testing.wait_all_tasks_blocked()
        assert sent == []
        journal.gate.release()
        await wait_until(lambda: sent == ["written", "relayed"])
        group.add(0.0, [("alone", 0)])
        await wait_until(lambda: sent == ["written", "relayed", "alone"])
    assert journal.count("sync") == 1


async def test_what_promises_nothing_kept_leaves_before_the_sync_unless_its_connection_waits():
    # outputs are "connection:what"; a "!" promises nothing the store keeps (a notification from
    # another origin): it may leave before its input is durable, never before what its
    # connection holds from earlier inputs
    journal, sent = Journal(), []
    journal.gate = threading.Semaphore(0)

    def dispatch(_now: float, outputs: list[tuple[str, int]]) -> None:
        for name, written in outputs:
            assert name.endswith("!") or written <= journal.durable, f"{name} left unsynced"
            sent.append(name)

    group = GroupCommit(
        journal,
        dispatch,
        max_inputs=100,
        unsynced=lambda output: output[0].endswith("!"),
        lane=lambda output: output[0].split(":")[0],
    )
    async with committing(group):
        await syncing(journal, group, "c1:ack")
        group.add(0.0, [("c2:notify!", journal.write()), ("c2:ack", journal.write())])
        assert sent == ["c2:notify!"], "at once, while the sync of what came before runs"
        group.add(0.0, [("c1:notify!", journal.write()), ("c2:later!", journal.write())])
        assert sent == ["c2:notify!"], "each behind what its connection holds"
        journal.gate.release()
        await wait_until(lambda: sent == ["c2:notify!", "c1:ack"])
        await trio.to_thread.run_sync(journal.syncing.wait)  # the second group's fsync
        journal.gate.release()
        await wait_until(lambda: len(sent) == 5)
        assert sent == ["c2:notify!", "c1:ack", "c2:ack", "c1:notify!", "c2:later!"]
        group.add(0.0, [("c1:again!", journal.write())])
        assert sent[-1] == "c1:again!", "nothing held on its connection any more"
        journal.gate.release()
    assert group.statistics().unsynced == 2


async def test_a_flush_while_the_worker_syncs_syncs_again_before_it_sends():
    journal, sent, group = gated()
    async with committing(group):
        await syncing(journal, group, "first")
        group.flush()  # shutting down: this thread's own sync covers it
        assert sent == ["first"] and journal.count("sync") == 1
        journal.gate.release()
        await trio.testing.wait_all_tasks_blocked()
        await wait_until(lambda: journal.count("sync") == 2)
    assert sent == ["first"]


async def test_a_group_that_wrote_and_holds_no_output_is_synced_with_the_next_that_holds_one():
    # a peer's acknowledgement deletes its mail and answers nothing: nothing waits on it
    journal, sent = Journal(), []
    group = GroupCommit(journal, recorder(journal, sent), max_inputs=100)
    async with committing(group):
        journal.write()
        group.add(0.0, [])
        await wait_until(lambda: journal.count("commit") == 1)
        await trio.testing.wait_all_tasks_blocked()
        assert journal.count("sync") == 0 and journal.durable == 0
        assert group.statistics().deferred == 1
        # an input that writes nothing but answers: its output leaves after a sync that
        # covers the commit before it (the recorder checks it)
        group.add(0.0, [("answer", journal.written)])
        await wait_until(lambda: sent == ["answer"])
        assert journal.count("sync") == 1 and journal.durable == 1
        apply(journal, group, "next")  # and the rule goes on as before
        await wait_until(lambda: sent == ["answer", "next"])
        assert journal.count("sync") == 2
    assert group.statistics().deferred == 1


async def test_a_group_that_wrote_a_file_beside_the_store_is_synced_even_without_an_output():
    journal, sent = Journal(), []
    journal.deferrable = False  # a rendezvous chunk: its bytes before the commit that names them
    group = GroupCommit(journal, recorder(journal, sent), max_inputs=100)
    async with committing(group):
        journal.write()
        group.add(0.0, [])
        await wait_until(lambda: journal.count("sync") == 1)
    assert group.statistics().deferred == 0


def test_a_store_may_defer_its_sync_until_a_rendezvous_file_is_written(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite")
    store.set_meta("k", "v")
    store.commit(synced=False)
    assert store.deferrable
    store.put_chunk("key", 0, b"bytes")
    assert not store.deferrable
    store.commit()
    assert store.deferrable
    store.close()


class TimedJournal(Journal):
    """A journal whose syncs say which thread ran them and take ``delay`` seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.0
        self.on_trio_thread: list[bool] = []

    def sync(self) -> None:
        self.on_trio_thread.append(threading.current_thread() is threading.main_thread())
        time.sleep(self.delay)
        super().sync()


async def test_a_fast_sync_brings_the_next_onto_the_trio_thread_and_a_slow_one_sends_it_back():
    journal, sent = TimedJournal(), []
    group = GroupCommit(journal, recorder(journal, sent), max_inputs=100, inline_sync_seconds=0.05)
    delays = [0.0, 0.0, 0.08, 0.0, 0.0]  # the third sync is slow
    async with committing(group):
        for k, delay in enumerate(delays):
            journal.delay = delay
            apply(journal, group, f"a{k}")  # the recorder checks each left after its sync
            await wait_until(lambda k=k: len(sent) == k + 1)
    # the first on the worker (nothing timed yet); after a fast one, the trio thread; after
    # the slow one, the worker again, until a fast one brings the syncs back
    assert journal.on_trio_thread == [False, True, True, False, True]
    assert group.statistics().inline == 3
    assert sent == [f"a{k}" for k in range(5)]


async def test_every_sync_runs_on_a_worker_thread_when_inline_sync_seconds_is_zero():
    journal, sent = TimedJournal(), []
    group = GroupCommit(journal, recorder(journal, sent), max_inputs=100)
    async with committing(group):
        for k in range(3):
            apply(journal, group, f"a{k}")
            await wait_until(lambda k=k: len(sent) == k + 1)
    assert journal.on_trio_thread == [False, False, False]
    assert group.statistics().inline == 0


def test_inline_sync_seconds_is_configured_in_the_store_section_and_never_negative():
    assert config_from_mapping({}).store.inline_sync_seconds == 0.001
    assert config_from_mapping({"store": {"inline_sync_seconds": 0}}).store.inline_sync_seconds == 0
    with pytest.raises(ConfigError, match="inline_sync_seconds"):
        config_from_mapping({"store": {"inline_sync_seconds": -1}})
    with pytest.raises(ValueError, match="negative"):
        GroupCommit(Journal(), lambda _now, _outputs: None, max_inputs=1, inline_sync_seconds=-1)


def test_the_process_sets_its_switch_interval_from_the_store_section(monkeypatch):
    """The super-peer's process entry point sets Python's switch interval before it runs the
    daemon: a worker thread whose fsync is done waits at most that long for a busy loop to let
    it hand the result back (Python's 5 ms held each such group's outputs 5 ms more)."""
    assert config_from_mapping({}).store.switch_interval_seconds == 0.0005
    with pytest.raises(ConfigError, match="switch_interval_seconds"):
        config_from_mapping({"store": {"switch_interval_seconds": 0}})
    seen = []
    monkeypatch.setattr(cli.trio, "run", lambda *_: seen.append(sys.getswitchinterval()))
    before = sys.getswitchinterval()
    try:
        cli._serve(config_from_mapping({"store": {"switch_interval_seconds": 0.002}}), lambda: 0)
    finally:
        sys.setswitchinterval(before)
    assert seen == [pytest.approx(0.002)]


def test_a_group_holds_at_least_one_input():
    with pytest.raises(ValueError, match="at least one"):
        GroupCommit(Journal(), lambda _now, _outputs: None, max_inputs=0)


def test_what_a_store_committed_unsynced_is_durable_after_sync_and_survives_reopening(tmp_path):
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path)
    assert store.syncs and (tmp_path / "state.sqlite-wal").exists()
    store.set_meta("k", "v")
    store.commit(synced=False)
    store.sync()
    store.set_meta("k2", "v2")
    store.close()
    reopened = SqliteStore(path, sync="normal")
    assert not reopened.syncs
    assert (reopened.get_meta("k"), reopened.get_meta("k2")) == ("v", "v2")
    reopened.close()
    with pytest.raises(ValueError, match="sync must be one of"):
        SqliteStore(path, sync="sometimes")
