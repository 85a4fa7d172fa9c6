"""memvault.rules.migrations: named, ordered, recorded once; a failing migration leaves nothing half applied."""
from __future__ import annotations

import sqlite3

import pytest

from memvault.rules.migrations import migrate, statements, transaction

STEPS = [
    ("0001_a", "CREATE TABLE a(x INTEGER); INSERT INTO a VALUES (1);"),
    ("0002_b", """
        CREATE TABLE b(y TEXT);
        CREATE TRIGGER a_to_b AFTER INSERT ON a BEGIN
            INSERT INTO b VALUES ('from a; with a semicolon');
        END;
    """),
]


def conn():
    return sqlite3.connect(":memory:", isolation_level=None)


def test_migrations_apply_in_order_once_and_are_recorded():
    c = conn()
    assert migrate(c, STEPS) == ["0001_a", "0002_b"]
    assert migrate(c, STEPS) == []  # idempotent
    assert [r[0] for r in c.execute("SELECT name FROM migrations ORDER BY name")] == ["0001_a", "0002_b"]
    c.execute("INSERT INTO a VALUES (2)")
    assert c.execute("SELECT y FROM b").fetchall() == [("from a; with a semicolon",)]  # the trigger was whole


def test_a_new_migration_is_applied_to_a_database_that_has_the_old_ones():
    c = conn()
    migrate(c, STEPS[:1])
    assert migrate(c, STEPS) == ["0002_b"]


def test_a_failing_migration_is_rolled_back_and_not_recorded():
    c = conn()
    broken = [*STEPS, ("0003_broken", "CREATE TABLE c(z); INSERT INTO no_such_table VALUES (1);")]
    with pytest.raises(sqlite3.OperationalError):
        migrate(c, broken)
    assert c.execute("SELECT name FROM sqlite_master WHERE name = 'c'").fetchone() is None
    assert "0003_broken" not in {r[0] for r in c.execute("SELECT name FROM migrations")}
    assert migrate(c, broken[:2]) == []  # the good ones stay applied


def test_statements_split_on_semicolons_outside_trigger_bodies():
    parts = statements(STEPS[1][1])
    assert len(parts) == 2 and parts[1].startswith("CREATE TRIGGER") and parts[1].endswith("END;")


def test_a_transaction_rolls_back_on_any_exception():
    c = conn()
    c.execute("CREATE TABLE t(x)")
    with pytest.raises(KeyboardInterrupt), transaction(c):
        c.execute("INSERT INTO t VALUES (1)")
        raise KeyboardInterrupt
    assert c.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0


def test_a_migration_another_process_applied_meanwhile_is_not_applied_again(tmp_path):
    """Two processes open an index just after an upgrade (the web view and an agent's hook): both read which
    migrations are done before either takes the write lock. The second, once it has the lock, finds the first has
    applied it: it goes on instead of applying it again (a long data migration, then 'UNIQUE constraint failed' or
    'table already exists': the index could not be opened)."""
    import threading

    from memvault.rules.migrations import migrate

    path = tmp_path / "x.db"
    runs = []

    def add_column(conn):
        runs.append(1)
        conn.execute("ALTER TABLE t ADD COLUMN b TEXT")

    steps = [("0001_t", "CREATE TABLE t(a TEXT)"), ("0002_b", add_column)]
    read, go = threading.Event(), threading.Event()

    class Paused(list):
        def __iter__(self):  # migrate has read what is done: let the other process migrate first
            read.set()
            go.wait(10)
            return super().__iter__()

    errors = []

    def slow():
        try:
            migrate(sqlite3.connect(path, isolation_level=None, check_same_thread=False), Paused(steps))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=slow)
    worker.start()
    assert read.wait(10)
    assert migrate(sqlite3.connect(path, isolation_level=None), steps) == ["0001_t", "0002_b"]
    go.set()
    worker.join(10)
    assert not errors and runs == [1]
    names = [r[0] for r in sqlite3.connect(path).execute("SELECT name FROM migrations ORDER BY name")]
    assert names == ["0001_t", "0002_b"]
