"""The tables of ``SqliteStore``, and the one change of their shape an older database needs.

The large tables (the publication log, the bodies and their counts, the keys delivered) grow by
a row per notification and are looked up by a record's key: a JSON text of some 100 characters
(``json_key``), random in its order. Kept as the tables' primary keys, those texts made an index
whose leaf pages a fold's inserts touch at random, up to every page of it: at 150,000
notifications stored, 5,400 of a fold's 6,321 pages (``bench.folds``, BENCHMARKS.md, issue 37,
stop 80), and a fold stalls the trio thread for as long as it writes them. So (at 150,000,
2,712 pages a fold, 29.5 ms against 62.2 in the same run: ``bench.folds``):

* each of these tables is appended in the order rows come (its rowid), and indexed by
  ``key_hash`` of its key: an 8-byte integer against the text's 100 bytes, so the index has a
  fraction of the leaf pages to touch. A lookup reads the rows of the hash and compares the
  text (two keys of one hash are two rows, both found);
* a body's count of references is keyed by the body's ``id`` (its rowid, in the order bodies
  come): a new body's count is appended, and the counts that change are the recent ones.

A database an earlier version made (its large tables keyed by their text) is rebuilt into these
once, when the store opens, after the redo journal's frames (written by that version, for its
tables) ran again: ``rehash``, in one transaction, so that a crash during it leaves the old
tables whole and the next open begins again.
"""

from __future__ import annotations

import sqlite3
from hashlib import blake2b
from typing import Final


def key_hash(*parts: str) -> int:
    """A 64-bit hash of a record's key (its parts joined), stable across processes and versions:
    what the large tables are indexed by (registered as the SQL function ``key_hash``, for the
    joins and the trigger)."""
    digest = blake2b("\x00".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _sql_key_hash(*parts: str | None) -> int | None:
    """``key_hash`` in SQL: NULL for a NULL part (a row that refers to no body)."""
    return None if None in parts else key_hash(*parts)  # type: ignore[arg-type]


BODY_KEY: Final = "json_extract(OLD.value, '$.body')"
"""The key of the body a deleted version record referred to (``store.BODY``)."""

TABLES: Final = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS registrations (public_id TEXT PRIMARY KEY,"
    " public_key BLOB NOT NULL, private_id_hash BLOB NOT NULL, address TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS local_state (peer TEXT NOT NULL, item TEXT NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (peer, item))",
    "CREATE TABLE IF NOT EXISTS expired (peer TEXT PRIMARY KEY, count INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS pending (kind TEXT NOT NULL, key TEXT NOT NULL,"
    " value TEXT NOT NULL, PRIMARY KEY (kind, key))",
    "CREATE TABLE IF NOT EXISTS rendezvous_chunks (key TEXT NOT NULL, start INTEGER NOT NULL,"
    " data BLOB NOT NULL, PRIMARY KEY (key, start))",
)
"""The tables whose shape is as it was."""

HASHED: Final = {
    # a body is written once; its count of references is a row of its own, since sqlite
    # rewrites a whole row to change one column (the kilobyte again with every reference)
    "bodies": "CREATE TABLE IF NOT EXISTS bodies (id INTEGER PRIMARY KEY, key TEXT NOT NULL,"
    " hash INTEGER NOT NULL, data BLOB NOT NULL)",
    "body_refs": "CREATE TABLE IF NOT EXISTS body_refs (body INTEGER PRIMARY KEY,"
    " refs INTEGER NOT NULL)",
    # ``body``: the id of the row's body (``data`` is then a shell: ``store.filled``), or NULL
    # (``data`` is whole, as an earlier version wrote every row)
    "publications": "CREATE TABLE IF NOT EXISTS publications (key TEXT NOT NULL,"
    " data BLOB NOT NULL, at REAL NOT NULL, body INTEGER, hash INTEGER NOT NULL)",
    # Mail is small (what peers have not acknowledged yet), so its key stays its own; its
    # ``hash`` (key_hash(peer, key)) goes with it to ``delivered`` when it is acknowledged.
    "mail": "CREATE TABLE IF NOT EXISTS mail (delivery INTEGER PRIMARY KEY AUTOINCREMENT,"
    " peer TEXT NOT NULL, key TEXT NOT NULL, data BLOB NOT NULL, at REAL NOT NULL,"
    " body INTEGER, hash INTEGER NOT NULL, UNIQUE (peer, key))",
    # ``hash``: key_hash(peer, key)
    "delivered": "CREATE TABLE IF NOT EXISTS delivered (peer TEXT NOT NULL, key TEXT NOT NULL,"
    " at REAL NOT NULL, hash INTEGER NOT NULL)",
}
"""The large tables, by name: appended in order, indexed by ``key_hash`` (``INDEXES``)."""

INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS mail_at ON mail (at)",
    # a peer's mail in delivery order: the window's refill and an acknowledgement read a few
    # rows at the front, not every row the peer has kept (a backlog made each a scan)
    "CREATE INDEX IF NOT EXISTS mail_peer ON mail (peer, delivery)",
    "CREATE INDEX IF NOT EXISTS delivered_hash ON delivered (hash)",
    "CREATE INDEX IF NOT EXISTS delivered_at ON delivered (at)",
    "CREATE INDEX IF NOT EXISTS publications_hash ON publications (hash)",
    "CREATE INDEX IF NOT EXISTS publications_at ON publications (at)",
    "CREATE INDEX IF NOT EXISTS bodies_hash ON bodies (hash)",
    # Every reference to a body is counted by the store as it writes the row, a sum per body
    # added at the commit (``SqliteStore._refs``): sqlite's triggers cost more per row than
    # the copies they save. The one trigger: the version record a new one replaces, whose
    # value the store does not read. A body nothing refers to waits in ``bodies_unused`` for
    # ``drop_bodies``, which is also what makes a body put in once safe to refer to again
    # until then (``SqliteStore._held``).
    "CREATE INDEX IF NOT EXISTS bodies_unused ON body_refs (body) WHERE refs <= 0",
    "CREATE TRIGGER IF NOT EXISTS pending_unrefers AFTER DELETE ON pending "
    f"WHEN {BODY_KEY} IS NOT NULL BEGIN "
    f"INSERT INTO body_refs SELECT id, -1 FROM bodies WHERE hash = key_hash({BODY_KEY}) "
    f"AND key = {BODY_KEY} ON CONFLICT (body) DO UPDATE SET refs = refs - 1; END",
)
"""The large tables' indexes, and the trigger that counts a body down."""

_BODIED: Final = ("mail", "publications")
"""Tables a version before bodies made without their ``body`` column (added at open)."""

_BODY_ID: Final = (
    "(SELECT id FROM bodies WHERE bodies.hash = key_hash({old}.body) AND bodies.key = {old}.body)"
)
"""The id of the body an earlier version's row named by its key."""
_COPIES: Final = {
    "bodies": "INSERT INTO bodies (id, key, hash, data)"
    " SELECT rowid, key, key_hash(key), data FROM {old} ORDER BY rowid",
    # (a count of no body had nothing to count)
    "body_refs": "INSERT INTO body_refs SELECT bodies.id, {old}.refs FROM {old}"
    " JOIN bodies ON bodies.hash = key_hash({old}.key) AND bodies.key = {old}.key",
    "publications": "INSERT INTO publications (key, data, at, body, hash)"
    f" SELECT key, data, at, {_BODY_ID}, key_hash(key) FROM {{old}} ORDER BY rowid",
    "mail": "INSERT INTO mail (delivery, peer, key, data, at, body, hash)"
    f" SELECT delivery, peer, key, data, at, {_BODY_ID}, key_hash(peer, key) FROM {{old}}",
    "delivered": "INSERT INTO delivered (peer, key, at, hash)"
    " SELECT peer, key, at, key_hash(peer, key) FROM {old} ORDER BY rowid",
}
"""How each large table's rows come over from the one an earlier version keyed by text, in
this order (a row's body before the row)."""
_REFERRING: Final = ("publications", "mail")
"""The tables whose rows name their body (by its key before, by its id now)."""


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


_NEW_COLUMN: Final = {
    "bodies": "hash",
    "body_refs": "body",
    "publications": "hash",
    "mail": "hash",
    "delivered": "hash",
}
"""A column each large table has in ``HASHED``'s shape and had not in the earlier one."""


def keyed_by_text(db: sqlite3.Connection) -> list[str]:
    """The large tables ``db`` holds in the shape an earlier version made (keyed by text)."""
    return [
        table
        for table, column in _NEW_COLUMN.items()
        if (columns := _columns(db, table)) and column not in columns
    ]


def prepare(db: sqlite3.Connection) -> bool:
    """Registers ``key_hash`` and makes the tables that are missing; whether the large ones are
    in an earlier version's shape (then only the old tables are there, as that version's redo
    frames expect, until ``rehash``)."""
    db.create_function("key_hash", -1, _sql_key_hash, deterministic=True)
    for statement in TABLES:
        db.execute(statement)
    for table in _BODIED:
        columns = _columns(db, table)
        if columns and "body" not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN body TEXT")
    if keyed_by_text(db):
        return True
    for statement in (*HASHED.values(), *INDEXES):
        db.execute(statement)
    return False


def rehash(db: sqlite3.Connection) -> list[str]:
    """Rebuilds the large tables an earlier version keyed by text into ``HASHED``'s shape, in
    the transaction open on ``db`` (the caller commits it: all of it, or, after a crash, none);
    which ones."""
    old = keyed_by_text(db)
    db.execute("DROP TRIGGER IF EXISTS pending_unrefers")
    for table in old:
        db.execute(f"ALTER TABLE {table} RENAME TO {table}_keyed")
    # the old tables' indexes go first, their names free for the new ones, made before the
    # rows come over: each row's body is looked up by its hash (a scan of the bodies each, else)
    for (index,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN"
        f" ({', '.join('?' * len(old))})",
        [f"{table}_keyed" for table in old],
    ).fetchall():
        db.execute(f"DROP INDEX {index}")
    for statement in (*HASHED.values(), *INDEXES):
        db.execute(statement)
    for table in _COPIES:
        if table in old:
            db.execute(_COPIES[table].format(old=f"{table}_keyed"))
    for table in _REFERRING:
        if table in old:  # (a shell whose body is gone would be read as whole bytes)
            gone = f"SELECT COUNT(*) FROM {{old}} WHERE body IS NOT NULL AND {_BODY_ID} IS NULL"
            ((count,),) = db.execute(gone.format(old=f"{table}_keyed")).fetchall()
            if count:
                raise sqlite3.IntegrityError(
                    f"{count} rows of {table} refer to a body the store does not hold"
                )
    if "mail" in old:  # the next delivery's number goes on from the old table's
        db.execute("DELETE FROM sqlite_sequence WHERE name = 'mail'")
        db.execute(
            "INSERT INTO sqlite_sequence SELECT 'mail', seq FROM sqlite_sequence"
            " WHERE name = 'mail_keyed'"
        )
    for table in old:
        db.execute(f"DROP TABLE {table}_keyed")
    return old
