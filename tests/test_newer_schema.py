"""A database written by a newer memvault (a migration recorded that this one does not know) is refused with one
line naming the file, never written in the old form, never moved aside as damaged. The case: a hook or a server
started from an older install (another venv, a pipx copy, a long-running MCP server from before `pip install -U`)
beside a newer one that migrated the index or the state database in place; before, the older one went on writing
rows in the old form (migration 0008 rewrote times into a new form: an old writer's rows sorted wrong after it)."""
from __future__ import annotations

import sqlite3
import time
from types import SimpleNamespace

import pytest

from memvault import Vault
from memvault.index.db import sqlite_module
from memvault.rules.errors import SchemaTooNew
from memvault.rules.migrations import migrate

FUTURE = "9999_written_by_a_newer_memvault"


def record(path, name: str = FUTURE) -> None:
    conn = sqlite_module().connect(str(path), isolation_level=None)
    try:
        conn.execute("INSERT INTO migrations VALUES (?, '2027-01-01T00:00:00Z')", (name,))
    finally:
        conn.close()


def a_second_later(monkeypatch) -> None:
    """A process that keeps its connection looks again at most every second (SchemaWatch.every)."""
    import memvault.rules.migrations as migrations

    real = time.monotonic
    monkeypatch.setattr(migrations, "time", SimpleNamespace(monotonic=lambda: real() + 1.5))


def test_migrate_refuses_a_database_with_a_migration_it_does_not_know(tmp_path):
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, [("0001_a", "CREATE TABLE a(x)")])
    conn.execute("INSERT INTO migrations VALUES (?, 'now')", (FUTURE,))
    with pytest.raises(SchemaTooNew) as info:
        migrate(conn, [("0001_a", "CREATE TABLE a(x)"), ("0002_b", "CREATE TABLE b(y)")])
    message = str(info.value)
    assert str(path) in message and FUTURE in message and "\n" not in message
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'b'").fetchone() is None  # nothing applied


def test_an_index_a_newer_memvault_migrated_is_refused_not_rebuilt(vault, invoke):
    vault.facts.set("db/primary", "The primary database runs on db-billing-1.", source="user:admin")
    vault.reindex()
    target = vault.index.current_target()
    record(target)
    again = Vault.open(vault.root)
    with pytest.raises(SchemaTooNew):
        again.recall("primary database", record_access=False)
    assert again.index.current_target() == target and target.exists()  # not moved aside, not replaced
    result = invoke("recall", "primary database")
    assert result.exit_code != 0
    assert "newer memvault" in result.output and str(target) in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_process_that_opened_the_index_before_a_newer_one_migrated_it_stops_writing(vault, monkeypatch):
    """The long-running case: the connection is open (a server, a watcher) when a newer process migrates the file
    in place."""
    vault.facts.set("db/primary", "The primary database runs on db-billing-1.", source="user:admin")
    vault.reindex()
    assert vault.recall("primary database", record_access=False)
    record(vault.index.current_target())
    a_second_later(monkeypatch)
    with pytest.raises(SchemaTooNew):
        vault.facts.set("db/replica", "The replica runs on db-billing-2.", source="user:admin")
        vault.reindex()


def newer_state(vault):
    """The vault's state database as a newer memvault left it, and the vault opened again."""
    state = vault.state
    state.connection()
    path = state.path
    state.close()
    record(path)
    return path, Vault.open(vault.root)


def test_a_state_database_a_newer_memvault_migrated_is_refused_not_moved_aside(vault):
    path, again = newer_state(vault)
    with pytest.raises(SchemaTooNew):
        again.state.connection()
    assert path.exists() and not list(path.parent.glob(path.name + ".*corrupt*"))


def test_a_process_that_opened_the_state_before_a_newer_one_migrated_it_stops_writing(vault, monkeypatch):
    state = vault.state
    state.connection()
    record(state.path)
    state.connection()  # within the second: not looked at again
    a_second_later(monkeypatch)
    with pytest.raises(SchemaTooNew):
        state.connection()


def test_a_refused_state_database_is_refused_at_every_call_not_only_the_first(vault):
    """The connection was kept although migrate() refused it: the next call within a second (SchemaWatch.every)
    used it, and two recalls wrote to the newer memvault's recall log."""
    _path, again = newer_state(vault)
    for _ in range(3):
        with pytest.raises(SchemaTooNew):
            again.state.connection()
