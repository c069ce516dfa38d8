"""A commit of ``SqliteStore`` is a frame of its redo journal (``superpeer.redo``): whatever the
moment a crash comes (between commits, in the middle of one, just after a fold) the store opened
again holds every commit and nothing written after the last one; a torn frame ends what is run
again; a fold the power took back is made again from the frames it held; frames of a generation
the database does not reach, or of another database, are never run.

A crash is made by copying the store's files (the database, sqlite's write-ahead log, the
journal) while the store is open, and opening the copy: what a killed process leaves, since every
write went to the kernel. A power loss is made by copying them at chosen moments apart."""

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superpeer import redo
from superpeer.config import ConfigError, config_from_mapping
from superpeer.store import BODY, SqliteStore

BODY_BYTES = b"<a publication of a kilobyte or so>" * 30
FILES = ("", "-wal", "-redo")
SMALL = 16 * 1024
"""A journal of 16 KiB (``fold_bytes``): a fold every dozen commits or so."""


def encoded(name: str) -> bytes:
    return f"[{name}]".encode() + BODY_BYTES + b"[end]"


def state(store: SqliteStore) -> dict[str, list[tuple]]:
    """Every row of every table (the journal's own meta entry aside), ordered: what two stores
    must agree on."""
    tables = [row[0] for row in store._read("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {
        table: sorted(
            (tuple(row) for row in store._read(f"SELECT * FROM {table}")
             if not (table == "meta" and row[0] == "redo_folded")),
            key=repr,
        )
        for table in sorted(tables)
    }  # fmt: skip


def crash_copy(path: Path, to: Path) -> Path:
    """The store's files as a killed process leaves them."""
    to.mkdir(exist_ok=True)
    for suffix in FILES:
        source = Path(f"{path}{suffix}")
        if source.exists():
            shutil.copyfile(source, to / f"{path.name}{suffix}")
    return to / path.name


def apply(store: SqliteStore, op: tuple, at: float) -> None:
    kind = op[0]
    if kind == "mail":
        _, peer, key, bodied = op
        body = BODY_BYTES + key.encode() if bodied else None
        store.put_mail(peer, key, encoded(f"{peer}/{key}") + key.encode(), at, body)
    elif kind == "ack":
        store.acknowledge(op[1], op[2], at)
    elif kind == "log":
        store.log_publication(op[1], encoded(op[1]), at, BODY_BYTES + op[1].encode())
    elif kind == "prune":
        store.prune_log(at - op[1], 3)
    elif kind == "version":
        _, key, body = op
        store.set_pending("versions", key, None if body is None else {BODY: body, "n": at})
    elif kind == "bodies":
        store.drop_bodies()
    elif kind == "expire":
        store.expire_mail(at - op[1], 4)
    else:
        raise AssertionError(op)


PEERS = st.sampled_from(["p0", "p1", "p2"])
KEYS = st.sampled_from([f"k{n}" for n in range(8)])
OPS = st.one_of(
    st.tuples(st.just("mail"), PEERS, KEYS, st.booleans()),
    st.tuples(st.just("ack"), PEERS, st.integers(0, 40)),
    st.tuples(st.just("log"), KEYS),
    st.tuples(st.just("prune"), st.integers(0, 20)),
    st.tuples(st.just("version"), st.sampled_from(["v0", "v1"]), st.one_of(st.none(), KEYS)),
    st.tuples(st.just("bodies")),
    st.tuples(st.just("expire"), st.integers(5, 30)),
)


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(st.lists(OPS, min_size=1, max_size=6), min_size=1, max_size=40),
    crash_at=st.integers(0, 39),
    torn=st.booleans(),
)
def test_a_crash_anywhere_keeps_every_commit_and_nothing_after(
    tmp_path_factory, groups, crash_at, torn
):
    """Groups of writes, each committed (a fold every dozen or so); the process is killed after
    group ``crash_at`` was committed, with the next group's writes made but not committed when
    ``torn``: the store opened from what it left holds exactly the committed groups."""
    directory = tmp_path_factory.mktemp("store")
    store = SqliteStore(directory / "state.sqlite", sync="normal", fold_bytes=SMALL)
    at = 0.0
    committed = state(store)
    crash = min(crash_at, len(groups) - 1)
    copy = None
    for number, group in enumerate(groups):
        for op in group:
            at += 1.0
            apply(store, op, at)
        if number == crash + 1 and torn:
            break  # written, not committed
        store.commit()
        committed = state(store)
        if number == crash and not torn:
            break
    copy = crash_copy(directory / "state.sqlite", directory / "crashed")
    store.close()
    again = SqliteStore(copy, sync="normal", fold_bytes=SMALL)
    try:
        assert state(again) == committed
    finally:
        again.close()
    # and once opened, folded: a second open runs nothing again
    third = SqliteStore(copy, sync="normal", fold_bytes=SMALL)
    assert third.replayed == 0 and state(third) == committed
    third.close()


def commits(store: SqliteStore, names: range) -> None:
    for n in names:
        store.put_mail("p", f"k{n}", encoded(f"k{n}"), float(n), BODY_BYTES)
        store.commit()


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_a_power_loss_as_a_fold_starts_the_log_over_keeps_every_commit(tmp_path, monkeypatch, sync):
    """The worst a power loss can leave as a fold commits: every byte written to sqlite's log
    and to the journal landed, the database file only as its last fsync left it (the pages a
    checkpoint copied into it since may not have). A fold's ``COMMIT`` starts the log over the
    frames the checkpoint before it copied (``SqliteStore._copy``), so those pages must be
    durable in the database first. Taken at every fold, as its ``COMMIT`` returns, the files
    open to every commit, the fold's own included."""
    path = tmp_path / "state.sqlite"
    durable = {"database": b""}  # (nothing fsync'd yet)
    images: list[tuple[bytes, bytes, bytes]] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        name = os.readlink(f"/proc/self/fd/{descriptor}")
        if name == f"{path}-wal":  # the fold's, after its COMMIT
            log, journal = Path(name).read_bytes(), Path(f"{path}-redo").read_bytes()
            images.append((durable["database"], log, journal))
        real_fsync(descriptor)
        if name == str(path):
            durable["database"] = path.read_bytes()

    monkeypatch.setattr("superpeer.store.os.fsync", fsync)
    store = SqliteStore(path, sync=sync, fold_bytes=SMALL)
    expected = [state(store)] * len(images)
    for n in range(80):
        taken = len(images)
        apply(store, ("log", f"k{n}"), float(n))
        apply(store, ("mail", "p0", f"k{n}", True), float(n))
        apply(store, ("version", f"v{n % 3}", f"k{n}"), float(n))
        if n % 4 == 3:
            apply(store, ("ack", "p0", 10**6), float(n))
        if n % 9 == 8:
            apply(store, ("bodies",), float(n))
        store.commit()
        expected.extend([state(store)] * (len(images) - taken))
    last = state(store)
    store.close()  # (its fold too)
    monkeypatch.undo()
    expected.extend([last] * (len(images) - len(expected)))
    assert len(images) >= 6, "folds, each after a checkpoint of the one before"
    for number, (database, log, journal) in enumerate(images):
        lost = tmp_path / f"lost{number}"
        lost.mkdir()
        for suffix, data in (("", database), ("-wal", log), ("-redo", journal)):
            Path(f"{lost / 'state.sqlite'}{suffix}").write_bytes(data)
        again = SqliteStore(lost / "state.sqlite", sync="normal", fold_bytes=SMALL)
        try:
            assert again._read("PRAGMA integrity_check") == [("ok",)]
            assert state(again) == expected[number], f"the power lost at fold {number}"
        finally:
            again.close()


def test_commits_since_the_last_fold_are_run_again_and_the_store_folds_once_opened(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite", sync="normal")
    commits(store, range(10))
    expected = state(store)
    copy = crash_copy(tmp_path / "state.sqlite", tmp_path / "crashed")
    store.close()
    again = SqliteStore(copy, sync="normal")
    assert again.replayed >= 10 and state(again) == expected
    assert again.get_meta("redo_folded") == "2", "the fold at the first open, then this one"
    again.close()


def test_a_torn_last_frame_ends_what_is_run_again(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite", sync="normal")
    commits(store, range(4))
    before_last = state(store)
    start = store.journal.offset
    commits(store, range(4, 5))
    end = store.journal.offset
    copy = crash_copy(tmp_path / "state.sqlite", tmp_path / "crashed")
    store.close()
    journal = Path(f"{copy}-redo")
    data = bytearray(journal.read_bytes())
    data[(start + end) // 2] ^= 0xFF  # a sector of the last frame never reached the disk
    journal.write_bytes(bytes(data))
    again = SqliteStore(copy, sync="normal")
    assert state(again) == before_last
    assert [n for n, _ in again.mail_after("p", 0, 10)] == [1, 2, 3, 4]
    again.close()


def test_a_crash_just_after_a_fold_runs_nothing_again(tmp_path):
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path, sync="normal", fold_bytes=SMALL)
    generation = store.journal.generation
    n = 0
    while store.journal.generation == generation:
        commits(store, range(n, n + 1))
        n += 1
    assert store.journal.offset == 0, "folded, no frame of the next generation yet"
    expected = state(store)
    copy = crash_copy(path, tmp_path / "crashed")
    store.close()
    again = SqliteStore(copy, sync="normal", fold_bytes=SMALL)
    assert again.replayed == 0 and state(again) == expected
    again.close()


def test_a_fold_the_power_took_back_is_made_again_from_its_frames(tmp_path):
    """The database's log lost the fold (it was not yet fsync'd), the journal still holds the
    frames the fold was made of: they run again on the database of the fold before."""
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path, sync="normal", fold_bytes=SMALL)
    generation = store.journal.generation
    commits(store, range(3))
    before_fold = crash_copy(path, tmp_path / "before")
    n = 3
    while store.journal.generation == generation:
        shutil.copyfile(f"{path}-redo", tmp_path / "journal")  # the frames, before the fold
        expected = state(store)  # what the frames hold; the fold comes in the next commit
        commits(store, range(n, n + 1))
        n += 1
    # the fold's commit came with a frame that did not fit: its writes went into the fold alone,
    # which the power took, with what had not been acknowledged (no sync came after it)
    store.close()
    shutil.copyfile(tmp_path / "journal", f"{before_fold}-redo")
    again = SqliteStore(before_fold, sync="normal", fold_bytes=SMALL)
    assert again.replayed > 0 and state(again) == expected
    again.close()


def test_frames_of_a_generation_the_database_does_not_reach_are_never_run(tmp_path):
    """A power loss that took a fold back (its log not fsync'd) after the journal had started
    the next generation: those frames need the lost fold, and the store never writes them
    before that fold is durable; if they are found anyway, they are not run."""
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path, sync="normal", fold_bytes=SMALL)
    old = crash_copy(path, tmp_path / "old")  # a database at the first fold
    expected = state(store)
    generation = store.journal.generation
    n = 0
    while store.journal.generation < generation + 2:
        commits(store, range(n, n + 1))
        n += 1
    commits(store, range(n, n + 2))  # frames of generation + 2
    store.close()
    shutil.copyfile(f"{path}-redo", f"{old}-redo")
    again = SqliteStore(old, sync="normal", fold_bytes=SMALL)
    assert again.replayed == 0 and state(again) == expected
    again.close()


def test_a_journal_beside_a_database_that_does_not_name_it_is_not_run(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite", sync="normal")
    commits(store, range(5))
    copy = crash_copy(tmp_path / "state.sqlite", tmp_path / "crashed")
    store.close()
    for suffix in ("", "-wal"):  # the database is made anew; the journal is an old one
        Path(f"{copy}{suffix}").unlink()
    fresh = SqliteStore(copy, sync="normal")
    assert fresh.replayed == 0 and fresh.mail_counts() == {}
    assert redo.frames(Path(f"{copy}-redo")) == [], "zeros again"
    # the old frames' generation is the one the new database writes next: killed now, opened
    # again, it must not find them
    again = SqliteStore(crash_copy(copy, tmp_path / "again"), sync="normal")
    assert again.replayed == 0 and again.mail_counts() == {}
    again.close()
    fresh.close()


def test_a_commit_larger_than_the_journal_is_a_fold(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite", sync="normal", fold_bytes=8192)
    generation = store.journal.generation
    for n in range(20):  # 20 kilobytes in one commit
        store.put_mail("p", f"k{n}", encoded(f"k{n}"), float(n))
    store.commit()
    assert store.journal.generation == generation + 1 and store.journal.offset == 0
    expected = state(store)
    copy = crash_copy(tmp_path / "state.sqlite", tmp_path / "crashed")
    store.close()
    again = SqliteStore(copy, sync="normal", fold_bytes=8192)
    assert again.replayed == 0 and state(again) == expected
    again.close()


def test_reclaim_folds_then_gives_the_log_back_and_never_inside_a_commit(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite", sync="full")
    commits(store, range(5))
    store.put_mail("p", "open", encoded("open"), 9.0)
    assert store.uncommitted and not store.reclaim()
    store.commit()
    assert not store.uncommitted and store.reclaim()
    assert Path(f"{tmp_path / 'state.sqlite'}-wal").stat().st_size == 0
    assert store.journal.offset == 0
    store.close()
    again = SqliteStore(tmp_path / "state.sqlite")
    assert again.replayed == 0 and again.mail_counts() == {"p": 6}
    again.close()


def test_the_journal_is_made_whole_with_zeros_and_its_frames_read_back(tmp_path):
    store = SqliteStore(tmp_path / "state.sqlite", sync="full", fold_bytes=65536)
    journal = Path(f"{tmp_path / 'state.sqlite'}-redo")
    assert journal.stat().st_size == 65536
    commits(store, range(3))
    frames = redo.frames(journal)
    assert len(frames) == 3 and {f.generation for f in frames} == {store.journal.generation}
    first = frames[0].entries
    assert first[0][0] == 0 and first[0][1].startswith("INSERT INTO bodies")
    defined = [entry[1] for frame in frames for entry in frame.entries if entry[0] == 0]
    assert len(defined) == len(set(defined)), "a statement is defined once per generation"
    store.close()
    assert journal.stat().st_size == 65536, "never grows"


def test_a_frame_that_cannot_run_again_is_a_redo_error(tmp_path):
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path, sync="normal")
    store.put_mail("p", "k", encoded("k"), 1.0)
    store.commit()
    copy = crash_copy(path, tmp_path / "crashed")
    store.close()
    journal = Path(f"{copy}-redo")
    [frame] = redo.frames(journal)
    entries = [[0, "INSERT INTO nowhere VALUES (?)"], [1, 0, [1]]]
    payload = redo.msgpack.packb(entries, use_bin_type=True)
    header = redo.HEADER.pack(len(payload), redo._crc(frame.generation, payload), frame.generation)
    journal.write_bytes(header + payload + bytes(4096))
    with pytest.raises(redo.RedoError, match="cannot run again: no such table: nowhere"):
        SqliteStore(copy, sync="normal")


def test_fold_bytes_is_configured_in_the_store_section():
    assert config_from_mapping({}).store.fold_bytes == 4 * 2**20
    assert config_from_mapping({"store": {"fold_bytes": 65536}}).store.fold_bytes == 65536
    with pytest.raises(ConfigError, match=r"store\.fold_bytes \(100\) must be at least 4096"):
        config_from_mapping({"store": {"fold_bytes": 100}})


def test_a_transaction_sqlite_undid_writes_nothing_more_and_the_journal_brings_it_back(tmp_path):
    """sqlite may roll its whole transaction back when a statement or a ``COMMIT`` finds the
    disk full: every commit since the last fold is then in the journal alone. The store must
    not go on writing outside a transaction (on the database of the last fold), nor fold (which
    would name a generation whose commits the database does not hold)."""
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path, sync="normal")
    commits(store, range(5))
    expected = state(store)
    store.put_mail("p", "in the group that failed", encoded("x"), 9.0)
    store._db.execute("ROLLBACK")  # as sqlite does on SQLITE_FULL, at its choice
    with pytest.raises(sqlite3.OperationalError, match="sqlite undid the store's transaction"):
        store.put_mail("p", "after", encoded("y"), 10.0)
    with pytest.raises(sqlite3.OperationalError, match="sqlite undid the store's transaction"):
        store.commit()
    store.close()  # closes the files only
    again = SqliteStore(path, sync="normal")
    assert again.replayed > 0 and state(again) == expected
    again.close()


def test_a_checkpoint_that_cannot_copy_the_whole_log_is_counted_and_the_next_one_copies_it(
    tmp_path,
):
    path = tmp_path / "state.sqlite"
    store = SqliteStore(path, sync="full")
    commits(store, range(3))
    store.fold()
    assert store.checkpoints_failed == 0
    reader = sqlite3.connect(str(path), isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM mail").fetchone()  # a snapshot before the next fold
    commits(store, range(3, 6))
    store.fold()
    assert store.checkpoints_failed == 1, "the frames past the reader's snapshot stay in the log"
    reader.execute("COMMIT")
    reader.close()
    commits(store, range(6, 9))
    store.fold()
    assert store.checkpoints_failed == 1
    assert store.mail_counts() == {"p": 9}
    store.close()
