"""Local state that is not derived from the vault: how often and how recently recall returned each memory.

Kept in ``.memvault/state.db``, apart from the index, so deleting or rebuilding the index never loses it.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from .errors import SearchIndexError
from .timeutil import format_time, now, parse_time

MIGRATIONS = [
    (
        "0001_access",
        """
        CREATE TABLE access(
            kind TEXT NOT NULL, item_id TEXT NOT NULL, count INTEGER NOT NULL, last_access TEXT NOT NULL,
            PRIMARY KEY(kind, item_id));
        """,
    ),
    (
        "0002_recalled_text",
        """
        CREATE TABLE recalled(hash TEXT PRIMARY KEY, kind TEXT NOT NULL, item_id TEXT NOT NULL, at TEXT NOT NULL);
        """,
    ),
]


class State:
    """Access counts and last-access times per (kind, id)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            from .index import migrate

            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                migrate(conn, MIGRATIONS)
            except sqlite3.Error as exc:
                raise SearchIndexError(f"{self.path}: cannot open the state database: {exc}") from None
            self._conn = conn
        return self._conn

    def get(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, datetime]]:
        keys = list(keys)
        if not keys or not self.path.exists():
            return {}
        conn = self.connection()
        out = {}
        for start in range(0, len(keys), 400):
            batch = keys[start : start + 400]
            clauses = " OR ".join("(kind = ? AND item_id = ?)" for _ in batch)
            for kind, item_id, count, last in conn.execute(
                f"SELECT kind, item_id, count, last_access FROM access WHERE {clauses}",
                tuple(x for pair in batch for x in pair),
            ):
                out[(kind, item_id)] = (count, parse_time(last))
        return out

    def record(self, keys: Iterable[tuple[str, str]], at: datetime | None = None,
               texts: Iterable[tuple[str, str, str]] = ()) -> None:
        """Count one access for each (kind, id) and remember the hashes of the texts returned
        (``texts`` = (hash, kind, id)), so an extractor cannot feed a recalled memory back in as new."""
        stamp = format_time(at or now())
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                """INSERT INTO access(kind, item_id, count, last_access) VALUES (?, ?, 1, ?)
                   ON CONFLICT(kind, item_id) DO UPDATE SET count = count + 1, last_access = excluded.last_access""",
                [(k, i, stamp) for k, i in keys],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO recalled(hash, kind, item_id, at) VALUES (?, ?, ?, ?)",
                [(h, k, i, stamp) for h, k, i in texts],
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def recalled_hashes(self) -> set[str]:
        if not self.path.exists():
            return set()
        return {row[0] for row in self.connection().execute("SELECT hash FROM recalled")}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
