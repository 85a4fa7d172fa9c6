"""What has been captured from agent sessions: per runtime, the turns already stored (by the runtime's own message
id) and, per session, where in its transcript the next capture starts and how much it has stored.

Kept in ``.memvault/captures.db``, local like the index (transcripts are this host's files), never derived from
the vault: deleting it would make the next capture store a session's turns again. A turn id seen in any session of
its runtime is never stored twice, so a resumed session that replays its history (same message ids in a new
transcript) adds only its new turns.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..rules.errors import MemvaultError
from ..rules.fsutil import sqlite_path
from ..rules.migrations import migrate, transaction

MIGRATIONS = [
    (
        "0001_agents_captures",
        """
        CREATE TABLE turns(runtime TEXT NOT NULL, turn_id TEXT NOT NULL, session_id TEXT NOT NULL,
            captured_at REAL NOT NULL, PRIMARY KEY(runtime, turn_id)) WITHOUT ROWID;
        CREATE TABLE sessions(runtime TEXT NOT NULL, session_id TEXT NOT NULL, transcript TEXT NOT NULL,
            offset INTEGER NOT NULL DEFAULT 0, stored_bytes INTEGER NOT NULL DEFAULT 0,
            capped INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL, PRIMARY KEY(runtime, session_id));
        """,
    ),
]
#: Rows of turns older than this are forgotten (a transcript is kept 30 days by Claude Code and Gemini CLI).
FORGET_AFTER = 400 * 86400.0


@dataclass
class SessionCursor:
    """Where the next capture of one session starts (a byte offset in its transcript) and what it has stored."""

    runtime: str
    session_id: str
    transcript: str
    offset: int = 0
    stored_bytes: int = 0
    capped: bool = False


class CaptureLog:
    """``.memvault/captures.db``: the captured turns and the session cursors of one vault."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(sqlite_path(self.path), timeout=10.0, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                migrate(conn, MIGRATIONS)
            except sqlite3.Error as exc:
                raise MemvaultError(f"{self.path}: {exc}") from None
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def cursor(self, runtime: str, session_id: str, transcript: str) -> SessionCursor:
        """The session's cursor; a new one (start of the transcript) when it was never captured, or when its
        transcript moved (the offset belongs to the old file)."""
        row = self._db().execute("SELECT transcript, offset, stored_bytes, capped FROM sessions "
                                 "WHERE runtime = ? AND session_id = ?", (runtime, session_id)).fetchone()
        if row is None:
            return SessionCursor(runtime, session_id, transcript)
        offset = row[1] if row[0] == transcript else 0
        return SessionCursor(runtime, session_id, transcript, offset, row[2], bool(row[3]))

    def seen(self, runtime: str, turn_ids: Sequence[str]) -> set[str]:
        """Which of ``turn_ids`` were already captured (in any session of ``runtime``)."""
        found: set[str] = set()
        conn = self._db()
        for i in range(0, len(turn_ids), 500):
            batch = list(turn_ids[i:i + 500])
            marks = ",".join("?" * len(batch))
            found.update(r[0] for r in conn.execute(
                f"SELECT turn_id FROM turns WHERE runtime = ? AND turn_id IN ({marks})", [runtime, *batch]))
        return found

    def record(self, cursor: SessionCursor, turn_ids: Iterable[str]) -> None:
        """Mark ``turn_ids`` captured and save the cursor, in one transaction."""
        conn = self._db()
        stamp = time.time()
        with transaction(conn):
            conn.executemany("INSERT OR IGNORE INTO turns VALUES (?, ?, ?, ?)",
                             [(cursor.runtime, t, cursor.session_id, stamp) for t in turn_ids])
            conn.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (cursor.runtime, cursor.session_id, cursor.transcript, cursor.offset, cursor.stored_bytes,
                          int(cursor.capped), stamp))
            conn.execute("DELETE FROM turns WHERE captured_at < ?", (stamp - FORGET_AFTER,))
            conn.execute("DELETE FROM sessions WHERE updated_at < ?", (stamp - FORGET_AFTER,))

    def sessions(self) -> list[SessionCursor]:
        """Every session captured, most recent first (``memvault agent status``)."""
        rows = self._db().execute("SELECT runtime, session_id, transcript, offset, stored_bytes, capped FROM sessions "
                                  "ORDER BY updated_at DESC").fetchall()
        return [SessionCursor(r[0], r[1], r[2], r[3], r[4], bool(r[5])) for r in rows]
