"""Named, ordered schema migrations for memvault's SQLite files (the index and the local state), recorded in the
database they were applied to. Pure sqlite3 helpers: no knowledge of what the tables hold."""
from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Union

from .errors import SchemaTooNew
from .timeutil import format_time, now


#: A migration is SQL, or a function of the connection for what SQL alone cannot do (text cut in Python, a table
#: that may or may not exist); either runs inside the migration's transaction.
Step = Union[str, Callable[[Any], None]]


def migrate(conn: Any, migrations: Sequence[tuple[str, Step]]) -> list[str]:
    """Apply the named migrations this database has not recorded, in order, each in its own transaction. Another
    process may apply them meanwhile (two opening the file just after an upgrade): each is looked up again once the
    write lock is held, and one found applied is not applied again."""
    conn.execute("CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = recorded(conn)
    refuse_newer(conn, done, migrations)
    applied = []
    for name, sql in migrations:
        if name in done:
            continue
        with transaction(conn):
            now_done = recorded(conn)
            refuse_newer(conn, now_done, migrations)
            if name in now_done:
                continue
            if callable(sql):
                sql(conn)
            else:
                for statement in statements(sql):
                    conn.execute(statement)
            conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, format_time(now())))
        applied.append(name)
    return applied


def recorded(conn: Any) -> set[str]:
    """The names of the migrations the database records."""
    return {row[0] for row in conn.execute("SELECT name FROM migrations")}


def refuse_newer(conn: Any, done: set[str], migrations: Sequence[tuple[str, Step]]) -> None:
    """Raise :class:`SchemaTooNew` when ``done`` (the migrations the database records) holds one ``migrations``
    does not name: a newer memvault wrote the file, and this one would write rows in the form it replaced."""
    unknown = sorted(done - {name for name, _ in migrations})
    if unknown:
        raise SchemaTooNew(database_file(conn), unknown)


class SchemaWatch:
    """For a process that keeps its connection (a server, the watcher): at most every :attr:`every` seconds, and only
    when another connection has written since (``PRAGMA data_version``), the migrations are read again; one a
    newer memvault applied in place meanwhile raises SchemaTooNew before this process writes the form it replaced.
    (Every time would cost ~7 µs a look, 17 looks a recall: 1.4 % of a warm one.)"""

    def __init__(self, migrations: Sequence[tuple[str, Step]], every: float = 1.0) -> None:
        self.migrations = migrations
        self.every = every
        self.reset()

    def reset(self) -> None:
        """A new connection: its migrations were just applied (or refused) by :func:`migrate`."""
        self._seen: int | None = None
        self._next = time.monotonic() + self.every

    def check(self, conn: Any) -> None:
        """Raise SchemaTooNew when a newer memvault has migrated the file, at every call from then on (a caller
        that carries on past the first, keeping the error as a warning, is stopped again at its next use)."""
        if time.monotonic() < self._next:
            return
        version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        if version != self._seen:
            refuse_newer(conn, recorded(conn), self.migrations)
        self._seen = version
        self._next = time.monotonic() + self.every


def database_file(conn: Any) -> str:
    """The file of the connection's main database (":memory:" for none)."""
    for _seq, name, file in conn.execute("PRAGMA database_list"):
        if name == "main":
            return file or ":memory:"
    return ":memory:"


def statements(sql: str) -> list[str]:
    """Split a migration script on ';' outside trigger bodies (sqlite3.complete_statement does the parsing)."""
    out, buf = [], ""
    for piece in sql.split(";"):  # each ';' may end a statement: two on one line are two
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \t\r\n;"):
                out.append(buf.strip())
            buf = ""
    if buf.strip(" \t\r\n;"):
        out.append(buf.strip().removesuffix(";"))
    return out


@contextlib.contextmanager
def transaction(conn: Any) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception (the connection is in autocommit mode)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
