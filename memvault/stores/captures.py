"""What has been captured from agent sessions: per runtime, the turns already stored (by the runtime's own message
id) and, per session, where in its transcript the next capture starts and how much it has stored.

Kept in ``captures.db`` in the vault's state directory, local like the index (transcripts are this host's
files). A damaged file is moved aside and rebuilt: its turns are refilled from the captured episodes (their
``meta.turn_id``), so the next capture does not store a session's turns again. A turn id seen in any session of
its runtime is never stored twice, so a resumed session that replays its history (same message ids in a new
transcript) adds only its new turns.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..rules.errors import MemvaultError
from ..rules.fsutil import ensure_dir, remove, replace, sqlite_path
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
T = TypeVar("T")


@dataclass
class SessionCursor:
    """Where the next capture of one session starts (a byte offset in its transcript) and what it has stored."""

    runtime: str
    session_id: str
    transcript: str
    offset: int = 0
    stored_bytes: int = 0
    capped: bool = False


#: What a damaged file says when queried (it is moved aside then, not reported for ever).
_DAMAGED = ("malformed", "not a database", "no such table", "file is encrypted", "disk image")


class CaptureLog:
    """``captures.db`` in the vault's state directory: the captured turns and the session cursors of one vault.

    A damaged file (not a database, malformed, a table gone) is moved aside once and a fresh one started, with a
    line in :attr:`warnings`; :attr:`rebuilt` tells the caller to refill the turns from the episodes they became
    (:meth:`restore`), so no turn is stored twice."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self.warnings: list[str] = []
        self.rebuilt = False

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(sqlite_path(self.path), timeout=10.0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            migrate(conn, MIGRATIONS)
            have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"turns", "sessions"} <= have:
                raise sqlite3.DatabaseError("no such table: turns or sessions")
        except BaseException:
            conn.close()
            raise
        return conn

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            ensure_dir(self.path.parent)
            try:
                self._conn = self._open()
            except sqlite3.DatabaseError as exc:
                self._heal(exc)
            except sqlite3.Error as exc:
                raise MemvaultError(f"{self.path}: {exc}") from None
        return self._conn  # type: ignore[return-value]

    def _heal(self, exc: BaseException) -> None:
        """Move the damaged file aside and start a fresh one (or raise when even that fails)."""
        self.close()
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.time_ns()}")
        with contextlib.suppress(FileNotFoundError):
            replace(self.path, aside)
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                remove(Path(str(self.path) + suffix))
        try:
            self._conn = self._open()
        except sqlite3.Error as again:
            raise MemvaultError(f"{self.path}: damaged ({exc}), and a fresh one cannot be made: {again}") from None
        self.rebuilt = True
        self.warnings.append(f"{self.path.name} was damaged ({exc}); moved aside to {aside.name} and rebuilt from "
                             "the captured episodes")

    def _guarded(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the database; one found damaged mid-way is healed once and ``fn`` run on the fresh one."""
        try:
            return fn(self._db())
        except sqlite3.DatabaseError as exc:
            if not any(word in str(exc) for word in _DAMAGED):
                raise MemvaultError(f"{self.path}: {exc}") from None
            self._heal(exc)
            return fn(self._db())

    def restore(self, runtime: str, turns: Iterable[tuple[str, str]]) -> int:
        """Mark ``(turn_id, session_id)`` pairs of ``runtime`` captured (a rebuilt file, refilled from the
        episodes); how many."""
        rows = [(runtime, t, session, time.time()) for t, session in turns]

        def write(conn: sqlite3.Connection) -> int:
            with transaction(conn):
                conn.executemany("INSERT OR IGNORE INTO turns VALUES (?, ?, ?, ?)", rows)
            return len(rows)

        return self._guarded(write)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def cursor(self, runtime: str, session_id: str, transcript: str) -> SessionCursor:
        """The session's cursor; a new one (start of the transcript) when it was never captured, or when its
        transcript moved (the offset belongs to the old file)."""
        row = self._guarded(lambda conn: conn.execute("SELECT transcript, offset, stored_bytes, capped FROM sessions "
                                                      "WHERE runtime = ? AND session_id = ?",
                                                      (runtime, session_id)).fetchone())
        if row is None:
            return SessionCursor(runtime, session_id, transcript)
        offset = row[1] if row[0] == transcript else 0
        return SessionCursor(runtime, session_id, transcript, offset, row[2], bool(row[3]))

    def seen(self, runtime: str, turn_ids: Sequence[str]) -> set[str]:
        """Which of ``turn_ids`` were already captured (in any session of ``runtime``)."""
        def query(conn: sqlite3.Connection) -> set[str]:
            found: set[str] = set()
            for i in range(0, len(turn_ids), 500):
                batch = list(turn_ids[i:i + 500])
                marks = ",".join("?" * len(batch))
                found.update(r[0] for r in conn.execute(
                    f"SELECT turn_id FROM turns WHERE runtime = ? AND turn_id IN ({marks})", [runtime, *batch]))
            return found

        return self._guarded(query)

    def record(self, cursor: SessionCursor, turn_ids: Iterable[str]) -> None:
        """Mark ``turn_ids`` captured and save the cursor, in one transaction."""
        stamp = time.time()
        turn_ids = list(turn_ids)

        def write(conn: sqlite3.Connection) -> None:
            with transaction(conn):
                conn.executemany("INSERT OR IGNORE INTO turns VALUES (?, ?, ?, ?)",
                                 [(cursor.runtime, t, cursor.session_id, stamp) for t in turn_ids])
                conn.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (cursor.runtime, cursor.session_id, cursor.transcript, cursor.offset,
                              cursor.stored_bytes, int(cursor.capped), stamp))
                conn.execute("DELETE FROM turns WHERE captured_at < ?", (stamp - FORGET_AFTER,))
                conn.execute("DELETE FROM sessions WHERE updated_at < ?", (stamp - FORGET_AFTER,))

        self._guarded(write)

    def sessions(self) -> list[SessionCursor]:
        """Every session captured, most recent first (``memvault agent status``)."""
        rows = self._guarded(lambda conn: conn.execute(
            "SELECT runtime, session_id, transcript, offset, stored_bytes, capped FROM sessions "
            "ORDER BY updated_at DESC").fetchall())
        return [SessionCursor(r[0], r[1], r[2], r[3], r[4], bool(r[5])) for r in rows]
