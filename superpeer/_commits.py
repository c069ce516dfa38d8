"""Group commit: the inputs that arrive together share one commit of the store and one fsync.

The daemon's rule is that no byte an input produced leaves before what it promises is on disk
(an ``Ack`` to a publisher, mail dropped after a ``Delivered``, a handover accepted). Committing
and fsyncing after every input keeps it at the price of one fsync per input (4 ms on this
machine's disk), and the fsync, not the work, then sets the pace (BENCHMARKS.md, "Beside MQTT
brokers"). Here an input is applied to the node at once (its writes join the store's open
transaction) and its outputs are *held*. The committer task

1. lets the trio loop make one pass (``trio.sleep(0)``: every ready task runs, so the inputs of
   the reads that completed together join);
2. commits the group (``commit(synced=False)``: the transaction is written to sqlite's log);
3. fsyncs the log on a worker thread (``sync``, which touches a file descriptor, never the
   sqlite connection), while the trio thread reads, decrypts and applies further inputs: their
   writes go to the next transaction, their outputs wait for the next sync. A group that wrote
   nothing skips both: what was committed before it is synced already. A group that wrote but
   holds no output (acknowledgements of mail, a timer's housekeeping) is committed and not
   synced: nothing waits on it, what it wrote may be lost to a power loss at no cost (mail sent
   again, which the inbox keeps once; an older ``alive_at``, a longer catch-up), and the next
   sync makes it durable with the group that needs it. When the last sync took less than
   ``inline_sync_seconds``, this one runs on the trio thread instead (below);
4. hands the outputs of every group committed before that sync to the runtime, oldest input
   first, and starts again with what arrived meanwhile.

A group is thus what arrived during the previous fsync: one input when the daemon is quiet (it
waits for nothing but its own fsync), more the busier it is, one fsync for all of them. (A
committer that waited for the loop to go quiet made larger groups, but under a steady stream it
held the first outputs of a group until the bound: 70 ms at p50 for 100 publications/s to 10
subscribers.)

So an output leaves only after a sync that began after the commit of the input that produced
it, and outputs leave in the order of their inputs, across connections (but for the unsynced
ones, below).

A group is bounded (``max_inputs``): the input that reaches the bound commits and fsyncs on the
trio thread and sends at once (``flush``), so a burst cannot hold the first outputs of a group
back for longer than that many inputs take.

A sync on the trio thread: handing a job to a worker thread and its result back to trio costs
more than a fast disk's fsync (here 85 us of CPU per hand-off, against 52 us for the
``fdatasync`` itself and 130 us of wall; BENCHMARKS.md, issue 37, stop 72), and a daemon at a
thousand commits a second (a paced stream, one input per group) pays it at every commit, on the
origin, the neighbour that keeps the copy and the access point alike. What the worker thread
bought, the inputs applied during the sync, is worth less than that when the sync is that
short: they are applied right after it instead, and leave after the next sync as before. Each
sync is timed; one that took ``inline_sync_seconds`` or more (a slow or busy disk) sends the
next to the worker thread, so the trio thread is never held longer than one slow sync, and a
fast one brings the syncs back. 0: always the worker thread.

Some outputs promise nothing the store must keep first (``unsynced``: the daemon's rule is
``superpeer.actions.leaves_unsynced``, a notification from another origin handed to an attached
peer, which that origin's log covers). They leave as soon as their input is applied, without
waiting for the commit, unless an output held before them goes on the same connection
(``lane``): a connection's bytes keep the order of the inputs that made them (a peer acknowledges
its notifications cumulatively: one that overtook a held one would acknowledge that one too).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import trio

T = TypeVar("T")


class Durable(Protocol):
    """What group commit needs of a store (``superpeer.store.SqliteStore``)."""

    syncs: bool
    """Whether a commit counts only once ``sync`` ran after it."""

    @property
    def unsynced(self) -> bool:
        """Whether a commit was made that no finished sync covers yet."""
        ...

    @property
    def deferrable(self) -> bool:
        """Whether what was committed since the last sync may wait for a later one: nothing was
        written beside the store's own files (a file's bytes must be on disk before the commit
        that names them may be, and only a sync orders them)."""
        ...

    def commit(self, *, synced: bool = True) -> None: ...
    def sync(self) -> None: ...


@dataclass(frozen=True, slots=True)
class GroupStatistics:
    """What ``GroupCommit`` did so far (``superpeer status``: ``commits``)."""

    inputs: int
    """Inputs applied and committed."""
    groups: int
    """Commits that carried at least one input."""
    largest: int
    """The most inputs one commit carried."""
    bounded: int
    """Groups that reached ``max_inputs`` and were committed at once."""
    unsynced: int
    """Outputs that left before their input's commit (``GroupCommit``'s ``unsynced``)."""
    inline: int
    """Syncs run on the trio thread (the one before took under ``inline_sync_seconds``)."""
    deferred: int
    """Groups that held no output after commits no sync covered (their own or earlier ones):
    not synced, left to the next group that holds one."""


@dataclass(slots=True)
class _Written:
    """A group committed, its outputs waiting for the log's fsync."""

    outputs: list[tuple[float, list]]
    applied: int
    """Inputs applied up to this group's commit (all of them are durable with it)."""


class GroupCommit(Generic[T]):
    """Holds each input's outputs until the store has made the input durable, then
    ``dispatch`` es them.

    ``add`` after each input; ``run`` as a task of the daemon's nursery; ``flush`` to commit and
    send now (shutting down)."""

    def __init__(
        self,
        store: Durable,
        dispatch: Callable[[float, list[T]], None],
        *,
        max_inputs: int,
        committed: Callable[[], None] = lambda: None,
        unsynced: Callable[[T], bool] = lambda _: False,
        lane: Callable[[T], Hashable | None] = lambda _: None,
        inline_sync_seconds: float = 0.0,
    ) -> None:
        if max_inputs < 1:
            raise ValueError("a group holds at least one input")
        if inline_sync_seconds < 0:
            raise ValueError("inline_sync_seconds cannot be negative")
        self._store = store
        self._dispatch = dispatch
        self._committed = committed
        """Told after each commit: what the inputs applied so far changed can be looked at once
        per group, not once per input (the daemon's next timer deadline)."""
        self._unsynced = unsynced
        """Whether an output may leave before its input is durable."""
        self._lane = lane
        """The connection an output is written to, in order (None: it keeps no order)."""
        self.max_inputs = max_inputs
        self.inline_sync_seconds = inline_sync_seconds
        self._last_sync = math.inf
        """Seconds the last sync took (none yet: the first runs on the worker thread)."""
        self._lanes: Counter[Hashable] = Counter()
        """Per lane, the outputs held (not yet dispatched): an unsynced output waits behind them."""
        self._held: list[tuple[float, list[T]]] = []
        """Outputs of the inputs applied since the last commit."""
        self._written: list[_Written] = []
        """Groups committed, oldest first, waiting for a sync."""
        self._inputs = 0
        """Inputs applied since the last commit."""
        self._applied = 0
        self._durable = 0
        """Inputs applied, and of those the ones known durable (in order: a prefix)."""
        self._due = trio.Event()
        self._dispatching = False
        self._groups = self._largest = self._bounded = self._early = self._inline = 0
        self._deferred = 0

    def add(self, now: float, outputs: list[T]) -> None:
        """An input was applied at ``now`` and produced ``outputs``: they leave once it is
        durable (at once if the group is full), those that promise nothing the store keeps at
        once unless an output held before them goes the same way."""
        early: list[T] = []
        if outputs and not self._dispatching:
            early, outputs = self._split_unsynced(outputs)
        if outputs:
            for output in outputs:
                lane = self._lane(output)
                if lane is not None:
                    self._lanes[lane] += 1
            self._held.append((now, outputs))
        self._inputs += 1
        self._applied += 1
        self._due.set()
        if early:
            # after this input's held outputs are in line: an input the dispatch applies
            # comes after them
            self._early += len(early)
            self._dispatching = True
            try:
                self._dispatch(now, early)
            finally:
                self._dispatching = False
        if self._inputs >= self.max_inputs and not self._dispatching:
            self._bounded += 1
            self.flush()

    def _split_unsynced(self, outputs: list[T]) -> tuple[list[T], list[T]]:
        """The outputs that may leave before the commit and have nothing held before them on
        their lane, and the rest, in order, to hold."""
        early: list[T] = []
        held: list[T] = []
        blocked: set[Hashable] = set()
        for output in outputs:
            lane = self._lane(output)
            if (
                lane is not None
                and lane not in blocked
                and not self._lanes[lane]
                and self._unsynced(output)
            ):
                early.append(output)
            else:
                held.append(output)
                if lane is not None:
                    blocked.add(lane)  # what follows on this lane waits behind it
        return early, held

    def _commit(self, *, synced: bool) -> None:
        """Commit the open group; its outputs wait in ``_written``."""
        self._store.commit(synced=synced)
        if self._inputs:
            self._groups += 1
            self._largest = max(self._largest, self._inputs)
            self._inputs = 0
        self._written.append(_Written(self._held, self._applied))
        self._held = []
        self._committed()

    def _release(self, through: int) -> None:
        """Dispatch the groups committed before the sync that made input ``through`` durable.

        A dispatch may apply an input of its own (a link that overflows tells the node): its
        outputs are held for the next commit, which runs after this loop (then the group may
        pass the bound by those few), so that outputs still leave in the order of their inputs."""
        self._dispatching = True
        try:
            while self._written and self._written[0].applied <= through:
                group = self._written.pop(0)
                self._durable = max(self._durable, group.applied)
                for now, outputs in group.outputs:
                    for output in outputs:
                        lane = self._lane(output)
                        if lane is not None:
                            self._lanes[lane] -= 1
                            if not self._lanes[lane]:
                                del self._lanes[lane]
                    self._dispatch(now, outputs)
        finally:
            self._dispatching = False

    def flush(self) -> None:
        """Commit durably on this thread, then hand every held output to ``dispatch``, oldest
        input first (those of groups still waiting for the worker thread's sync too: this sync
        covers them). Inputs the dispatches apply are committed and sent in turn."""
        if self._dispatching:
            return  # from a dispatch: that release's caller commits next
        while True:
            self._commit(synced=True)
            self._release(self._applied)
            if not self._held:
                return

    async def run(self) -> None:
        """The committer: once inputs are held, one scheduling pass (every task whose read
        completed applies its inputs), then one commit for all, and its fsync on a worker
        thread, while the trio thread applies the inputs that make the next group (or on the
        trio thread, when the last sync took under ``inline_sync_seconds``)."""
        while True:
            await self._due.wait()
            await trio.sleep(0)  # the tasks whose reads completed with this one's apply theirs
            self._due = trio.Event()  # what is added from now on is the next group's
            if not self._inputs:
                continue  # the bound committed it all
            owed = bool(self._held)  # outputs wait on this sync; none: the next one covers it
            self._commit(synced=False)
            through = self._applied
            # a group that wrote nothing (a relay forwarding, a heartbeat) after commits all
            # synced leaves at once; one that holds outputs syncs what this and any group before
            # it (not synced, as it held none) committed, whether or not it wrote itself
            if self._store.syncs and self._store.unsynced:
                if owed or not self._store.deferrable:
                    await self._sync()
                else:
                    self._deferred += 1
            self._release(through)

    async def _sync(self) -> None:
        """The store's sync, on the trio thread if the last one took under
        ``inline_sync_seconds``, else on a worker thread; timed either way."""
        if self._last_sync < self.inline_sync_seconds:
            self._inline += 1
            self._last_sync = _timed(self._store.sync)
        else:
            self._last_sync = await trio.to_thread.run_sync(_timed, self._store.sync)

    def statistics(self) -> GroupStatistics:
        return GroupStatistics(
            inputs=self._durable,
            groups=self._groups,
            largest=self._largest,
            bounded=self._bounded,
            unsynced=self._early,
            inline=self._inline,
            deferred=self._deferred,
        )


def _timed(sync: Callable[[], None]) -> float:
    """Seconds ``sync`` took."""
    start = time.perf_counter()
    sync()
    return time.perf_counter() - start
