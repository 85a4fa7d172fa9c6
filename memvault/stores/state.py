"""Local state that is not derived from the vault: how much each memory has been used, what recall returned, and
the log of recalls (who asked what, and what they were told).

Kept in ``state.db`` in the vault's state directory (:mod:`memvault.rules.places`), apart from the index, so deleting
or rebuilding the index never loses it. A damaged file is moved aside and a fresh one started (usage is a ranking
hint, not memory): recall goes on, with a warning.

Usage is two decaying counters per memory: ``uses`` (a fact fetched by key, a procedure run, an explicit ``used``
report) and ``shown`` (recall returned it, weighted by rank and relevance). Each is stored as its value at its
last update and decays with a half-life when read, so an unused memory's count fades without any job rewriting
rows. An untrusted source's use reports count at most once per memory per day.

The recall log (``recall_log``) keeps one row per recall made through the facade, from any interface: when, the
asking source, the question (private spans dropped and secrets redacted, as capture stores a turn), what came back (kind, id, score, trusted — not the text, which the vault and its git
history keep) or why nothing did, and how long it took. It is local (never pushed) and pruned with the retention
of raw episodes (``memvault prune``).
"""
from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..rules.errors import SearchIndexError
from ..rules.fsutil import drop_links, ensure_dir, remove, replace, sqlite_path
from ..rules.migrations import SchemaWatch, migrate
from ..rules.timeutil import decayed, format_time, from_timestamp, now

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
    (
        # Use, not exposure: being returned by recall no longer counts as a use (a memory gained rank by having
        # been shown). Old access counts are kept as "shown"; nothing counted as a use before.
        "0003_usage",
        """
        CREATE TABLE usage(
            kind TEXT NOT NULL, item_id TEXT NOT NULL,
            uses REAL NOT NULL DEFAULT 0, used_at REAL,
            shown REAL NOT NULL DEFAULT 0, shown_at REAL,
            PRIMARY KEY(kind, item_id));
        INSERT INTO usage(kind, item_id, shown, shown_at)
            SELECT kind, item_id, count, strftime('%s', last_access) FROM access;
        CREATE TABLE reports(source TEXT NOT NULL, kind TEXT NOT NULL, item_id TEXT NOT NULL, day TEXT NOT NULL,
            PRIMARY KEY(source, kind, item_id, day));
        CREATE INDEX recalled_item ON recalled(kind, item_id);
        """,
    ),
    (
        # What the agents were told: one row per recall, from every interface (the web view's audit log).
        "0004_web_recall_log",
        """
        CREATE TABLE recall_log(
            id INTEGER PRIMARY KEY,
            at REAL NOT NULL,
            source TEXT NOT NULL,
            query TEXT NOT NULL,
            options TEXT NOT NULL DEFAULT '{}',
            hits TEXT NOT NULL DEFAULT '[]',
            nothing_found TEXT,
            warnings INTEGER NOT NULL DEFAULT 0,
            ms REAL NOT NULL);
        CREATE INDEX recall_log_at ON recall_log(at);
        CREATE INDEX recall_log_source ON recall_log(source, at);
        """,
    ),
]
#: The newest recall log entries a page asks for at most.
RECALL_LOG_PAGE_MAX = 500

Key = tuple[str, str]


def _tables(migrations: list[tuple[str, str]]) -> frozenset[str]:
    """The tables the migrations leave behind (created and not dropped since)."""
    import re

    tables: set[str] = set()
    for _name, sql in migrations:
        for verb, table in re.findall(r"(CREATE|DROP)\s+TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(\w+)", sql, re.I):
            (tables.add if verb.upper() == "CREATE" else tables.discard)(table)
    return frozenset(tables)


#: What a state database must hold; one that lacks a table is moved aside and started afresh.
TABLES = _tables(MIGRATIONS)


@dataclass(frozen=True)
class Usage:
    """Decayed counters of one memory, as of the time they were read."""

    uses: float = 0.0
    shown: float = 0.0
    last_used: datetime | None = None
    last_shown: datetime | None = None


class State:
    """Usage counters per (kind, id) and the hashes of texts recall returned."""

    def __init__(self, path: Path, *, half_life: float = 90 * 86400) -> None:
        self.path = path
        self.half_life = half_life
        self._conn: sqlite3.Connection | None = None
        self.warnings: list[str] = []
        self._said: tuple[str, str] | None = None  # the last question redacted ahead (see redact_ahead)
        self._schema = SchemaWatch(MIGRATIONS)  # a newer memvault migrating the file while this process has it open

    def connection(self) -> sqlite3.Connection:
        if self._conn is not None:  # a long-running process: a newer memvault may have migrated the file since
            self._schema.check(self._conn)
        if self._conn is None:
            ensure_dir(self.path.parent)
            for link in drop_links([self.path, *(Path(str(self.path) + s) for s in ("-wal", "-shm", "-journal"))]):
                self.warnings.append(f"{link} was a symlink, not memvault's file: removed, never written through "
                                     "(usage counts start afresh)")
            try:
                self._conn = self._open_migrated()
            except sqlite3.DatabaseError as exc:
                self.close()
                aside = self._move_aside(exc)
                try:
                    self._conn = self._open_migrated()
                except sqlite3.Error as again:
                    raise SearchIndexError(f"{self.path}: cannot open the state database: {again}") from None
                self.warnings.append(f"{self.path.name} was damaged ({exc}); moved aside to {aside.name} and "
                                     "started afresh (usage counts restart)")
        return self._conn

    def _open_migrated(self) -> sqlite3.Connection:
        """A connection with every migration applied and the tables there; closed, not kept, when anything fails
        (a file a newer memvault migrated is refused at every call, never used for a second)."""
        conn = self._open()
        try:
            migrate(conn, MIGRATIONS)
            self._check_tables(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _check_tables(conn: sqlite3.Connection) -> None:
        """A file whose migrations are recorded but a table is gone (dropped by hand, a broken copy) is damaged:
        every query would fail on it for ever. Raised as a DatabaseError, it is moved aside like any other."""
        have = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = sorted(TABLES - have)
        if missing:
            raise sqlite3.DatabaseError(f"table {', '.join(missing)} missing")

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(sqlite_path(self.path)), timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        # As the index: a commit does not wait for the disk (WAL stays consistent; a power cut may lose the last
        # usage counts and recall-log lines). A warm recall spent 35 ms of 80 in the log line's fsync under load.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA secure_delete=ON")
        return conn

    def _move_aside(self, exc: BaseException) -> Path:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.time_ns()}")
        with contextlib.suppress(FileNotFoundError):
            replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            remove(Path(str(self.path) + suffix))
        return aside

    def _guarded(self, fn, *args):  # type: ignore[no-untyped-def]
        """Run a query; a damaged file found mid-way is moved aside once and the query run on a fresh one."""
        try:
            return fn(self.connection(), *args)
        except sqlite3.DatabaseError as exc:
            if not any(word in str(exc) for word in ("malformed", "not a database", "no such table")):
                raise SearchIndexError(f"{self.path}: {exc}") from None
            self.close()
            aside = self._move_aside(exc)
            self.warnings.append(f"{self.path.name} was damaged ({exc}); moved aside to {aside.name} and started "
                                 "afresh (usage counts restart)")
            return fn(self.connection(), *args)

    # -- reading -----------------------------------------------------------------------------------------
    def get(self, keys: Iterable[Key], at: datetime | None = None) -> dict[Key, Usage]:
        keys = list(keys)
        if not keys or not self.path.exists():
            return {}
        t = (at or now()).timestamp()

        def query(conn: sqlite3.Connection) -> dict[Key, Usage]:
            out = {}
            for start in range(0, len(keys), 400):
                batch = keys[start : start + 400]
                clauses = " OR ".join("(kind = ? AND item_id = ?)" for _ in batch)
                for kind, item_id, uses, used_at, shown, shown_at in conn.execute(
                        f"SELECT kind, item_id, uses, used_at, shown, shown_at FROM usage WHERE {clauses}",
                        tuple(x for pair in batch for x in pair)):
                    out[(kind, item_id)] = Usage(
                        decayed(uses, used_at, t, self.half_life), decayed(shown, shown_at, t, self.half_life),
                        from_timestamp(used_at), from_timestamp(shown_at))
            return out

        return self._guarded(query)

    def recalled_hashes(self) -> set[str]:
        if not self.path.exists():
            return set()
        return self._guarded(lambda conn: {row[0] for row in conn.execute("SELECT hash FROM recalled")})

    # -- writing -----------------------------------------------------------------------------------------
    def _bump(self, conn: sqlite3.Connection, column: str, weights: dict[Key, float], t: float) -> None:
        stamp = "used_at" if column == "uses" else "shown_at"
        for (kind, item_id), weight in weights.items():
            row = conn.execute(f"SELECT {column}, {stamp} FROM usage WHERE kind = ? AND item_id = ?",
                               (kind, item_id)).fetchone()
            current = decayed(row[0], row[1], t, self.half_life) if row else 0.0
            conn.execute(f"""INSERT INTO usage(kind, item_id, {column}, {stamp}) VALUES (?, ?, ?, ?)
                             ON CONFLICT(kind, item_id) DO UPDATE SET {column} = excluded.{column},
                                                                      {stamp} = excluded.{stamp}""",
                         (kind, item_id, current + weight, t))

    def record_shown(self, weights: dict[Key, float], *, texts: Iterable[tuple[str, str, str]] = (),
                     at: datetime | None = None) -> None:
        """Recall returned these memories (each with its exposure weight), and these texts ((hash, kind, id): an
        extractor cannot feed a recalled memory back in as new)."""
        t = (at or now()).timestamp()
        stamp = format_time(at or now())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._bump(conn, "shown", weights, t)
                conn.executemany("INSERT OR REPLACE INTO recalled(hash, kind, item_id, at) VALUES (?, ?, ?, ?)",
                                 [(h, k, i, stamp) for h, k, i in texts])
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        self._guarded(write)

    def record_use(self, keys: Iterable[Key], *, source: str | None = None, limited: bool = False,
                   at: datetime | None = None) -> list[Key]:
        """Count one use of each memory. ``limited`` (an untrusted source) counts at most one use per memory per
        source per day. Returns the keys that counted."""
        when = at or now()
        t = when.timestamp()
        day = when.date().isoformat()

        def write(conn: sqlite3.Connection) -> list[Key]:
            counted = []
            conn.execute("BEGIN IMMEDIATE")
            try:
                for key in dict.fromkeys(keys):
                    if limited:
                        cur = conn.execute("INSERT OR IGNORE INTO reports VALUES (?, ?, ?, ?)",
                                           (source or "", key[0], key[1], day))
                        if not cur.rowcount:
                            continue
                    self._bump(conn, "uses", {key: 1.0}, t)
                    counted.append(key)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return counted

        return self._guarded(write)

    def forget(self, keys: Iterable[Key]) -> None:
        """Drop every row about these memories (a purge): counters, reports, recalled texts, and the recall-log
        entries that returned one of them (their question may quote it); then checkpoint, so nothing about them is
        left in the file or its WAL (``secure_delete`` zeroes the freed pages)."""
        import json

        keys = list(keys)
        if not keys or not self.path.exists():
            return

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for table in ("usage", "reports", "recalled"):
                    conn.executemany(f"DELETE FROM {table} WHERE kind = ? AND item_id = ?", keys)
                # hits are stored as [kind, id, score, trusted]: "[kind, id" is in the JSON text exactly so
                conn.executemany("DELETE FROM recall_log WHERE instr(hits, ?) > 0",
                                 [(json.dumps([kind, item])[:-1],) for kind, item in keys])
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        self._guarded(write)

    # -- the recall log ----------------------------------------------------------------------------------
    def redact_ahead(self, query: str) -> None:
        """Redact a question now that :meth:`log_recall` will store: a recall does it while its query embeds, so
        the log's write after the answer does not (0.1-0.2 ms a question)."""
        from ..rules.redaction import clean

        self._said = (query, clean(query))

    def log_recall(self, entry: RecallLogEntry) -> None:
        """Append one recall to the log (one short autocommit insert). The question is stored as capture stores a
        turn (:func:`memvault.rules.redaction.clean`): a prompt an agent hook passes on may hold a key, a
        password or a private span, and this file is outside the write gate."""
        import json

        from ..rules.redaction import clean  # its rules compile in ~25 ms: only a recall that is logged pays

        said = self._said
        query = said[1] if said is not None and said[0] == entry.query else clean(entry.query)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO recall_log(at, source, query, options, hits, nothing_found, warnings, ms) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (entry.at, entry.source, query, json.dumps(entry.options, sort_keys=True),
                          json.dumps(entry.hits), None if entry.nothing_found is None else clean(entry.nothing_found),
                          entry.warnings, entry.ms))

        self._guarded(write)

    def forget_source(self, pattern: str) -> int:
        """Drop the recall log's entries asked by a source matching ``pattern`` (exact, or a prefix ending in
        ``*``: a purge by source), then checkpoint so their questions are not left in the WAL. How many went."""
        if not self.path.exists():
            return 0
        if pattern.endswith("*"):  # as source_matches: case-sensitive, so not LIKE
            where, args = "substr(source, 1, ?) = ?", (len(pattern) - 1, pattern[:-1])
        else:
            where, args = "source = ?", (pattern,)

        def write(conn: sqlite3.Connection) -> int:
            removed = conn.execute(f"DELETE FROM recall_log WHERE {where}", args).rowcount
            if removed:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return int(removed)

        return self._guarded(write)

    def recalls(self, *, limit: int = 100, before: int | None = None,
                source: str | None = None) -> list[RecallLogEntry]:
        """The newest log entries first (``before``: only entries with a smaller id, for paging)."""
        if not self.path.exists():
            return []
        limit = max(1, min(limit, RECALL_LOG_PAGE_MAX))
        where, args = [], []
        if before is not None:
            where.append("id < ?")
            args.append(before)
        if source is not None:
            where.append("source = ?")
            args.append(source)
        sql = ("SELECT id, at, source, query, options, hits, nothing_found, warnings, ms FROM recall_log"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC LIMIT ?")
        rows = self._guarded(lambda conn: conn.execute(sql, (*args, limit)).fetchall())
        return [RecallLogEntry.from_row(row) for row in rows]

    def recall_times(self, since: float) -> list[tuple[float, float]]:
        """(time, milliseconds) of every recall since ``since`` (unix seconds), oldest first: volume and latency."""
        if not self.path.exists():
            return []
        return self._guarded(lambda conn: conn.execute(
            "SELECT at, ms FROM recall_log WHERE at >= ? ORDER BY at", (since,)).fetchall())

    def prune_recalls(self, before: float, *, dry_run: bool = False) -> tuple[int, int]:
        """Drop log entries older than ``before`` (unix seconds). Returns (kept, removed)."""
        if not self.path.exists():
            return 0, 0

        def run(conn: sqlite3.Connection) -> tuple[int, int]:
            total, old = conn.execute("SELECT COUNT(*), COALESCE(SUM(at < ?), 0) FROM recall_log",
                                      (before,)).fetchone()
            if old and not dry_run:
                conn.execute("DELETE FROM recall_log WHERE at < ?", (before,))
            return total - old, old

        return self._guarded(run)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._schema.reset()


@dataclass
class RecallLogEntry:
    """One recall as the log keeps it. ``hits`` are ``[kind, id, score, trusted]``; ``at`` is unix seconds."""

    at: float
    source: str
    query: str
    options: dict[str, object]
    hits: list[list[object]]
    nothing_found: str | None
    warnings: int
    ms: float
    id: int | None = None

    @classmethod
    def from_row(cls, row: tuple[object, ...]) -> RecallLogEntry:
        import json

        from ..rules.redaction import clean

        id_, at, source, query, options, hits, nothing, warnings, ms = row
        # Shown redacted too: an entry written before questions were redacted on the way in.
        return cls(float(at), str(source), clean(str(query)), json.loads(str(options)), json.loads(str(hits)),
                   nothing if nothing is None else str(nothing), int(warnings), float(ms), int(id_))

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "at": format_time(datetime.fromtimestamp(self.at, timezone.utc)), "source": self.source, "query": self.query,
                "options": self.options, "nothing_found": self.nothing_found, "warnings": self.warnings,
                "ms": round(self.ms, 3),
                "hits": [{"kind": h[0], "id": h[1], "score": h[2], "trusted": h[3]} for h in self.hits]}
