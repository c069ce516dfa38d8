"""Offline outboxes: notifications kept for peers that are detached, in arrival order.

The core only says ``ToOffline`` / ``FlushOffline`` / ``DiscardOffline``; where the notifications
live is the runtime's business (the simulator keeps them in a dict). ``SqliteOutbox`` serves the
daemon, so what was kept for a peer survives a restart of its access point: one row per
notification, committed before the call returns.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


class SqliteOutbox:
    """A durable outbox in ``path`` (created if missing)."""

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS outbox ("
            " seq INTEGER PRIMARY KEY AUTOINCREMENT, peer TEXT NOT NULL, data BLOB NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS outbox_peer ON outbox (peer, seq)")

    def put(self, peer: str, data: bytes) -> None:
        self._db.execute("INSERT INTO outbox (peer, data) VALUES (?, ?)", (peer, data))

    def take(self, peer: str) -> list[bytes]:
        """Everything kept for ``peer``, oldest first, and forget it."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            rows = self._db.execute(
                "SELECT data FROM outbox WHERE peer = ? ORDER BY seq", (peer,)
            ).fetchall()
            self._db.execute("DELETE FROM outbox WHERE peer = ?", (peer,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return [bytes(row[0]) for row in rows]

    def discard(self, peer: str) -> None:
        self._db.execute("DELETE FROM outbox WHERE peer = ?", (peer,))

    def counts(self) -> dict[str, int]:
        rows = self._db.execute("SELECT peer, COUNT(*) FROM outbox GROUP BY peer").fetchall()
        return dict(rows)

    def close(self) -> None:
        self._db.close()
