"""Named, ordered schema migrations for memvault's SQLite files (the index and the local state), recorded in the
database they were applied to. Pure sqlite3 helpers: no knowledge of what the tables hold."""
from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Union

from .timeutil import format_time, now


#: A migration is SQL, or a function of the connection for what SQL alone cannot do (text cut in Python, a table
#: that may or may not exist); either runs inside the migration's transaction.
Step = Union[str, Callable[[Any], None]]


def migrate(conn: Any, migrations: Sequence[tuple[str, Step]]) -> list[str]:
    """Apply the named migrations this database has not recorded, in order, each in its own transaction. Another
    process may apply them meanwhile (two opening the file just after an upgrade): each is looked up again once the
    write lock is held, and one found applied is not applied again."""
    conn.execute("CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    applied = []
    for name, sql in migrations:
        if name in done:
            continue
        with transaction(conn):
            if conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone() is not None:
                continue
            if callable(sql):
                sql(conn)
            else:
                for statement in statements(sql):
                    conn.execute(statement)
            conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, format_time(now())))
        applied.append(name)
    return applied


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
