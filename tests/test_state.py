"""memvault.stores.state: usage counters that decay without a job, untrusted reports counted once a day, a purge
that leaves nothing behind, and a damaged file moved aside instead of breaking recall."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memvault.stores.state import State

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
HALF = 10 * 86400.0
KEY = ("fact", "db/primary")


@pytest.fixture
def state(tmp_path):
    s = State(tmp_path / "state.db", half_life=HALF)
    yield s
    s.close()


def test_a_use_halves_every_half_life_when_read(state):
    state.record_use([KEY], at=T0)
    state.record_use([KEY], at=T0)
    assert state.get([KEY], at=T0)[KEY].uses == pytest.approx(2.0)
    assert state.get([KEY], at=T0 + timedelta(days=10))[KEY].uses == pytest.approx(1.0)
    assert state.get([KEY], at=T0 + timedelta(days=30))[KEY].uses == pytest.approx(0.25)
    # a new use adds to the decayed value, it does not reset it
    state.record_use([KEY], at=T0 + timedelta(days=10))
    assert state.get([KEY], at=T0 + timedelta(days=10))[KEY].uses == pytest.approx(2.0)
    assert state.get([KEY], at=T0 + timedelta(days=10))[KEY].last_used == T0 + timedelta(days=10)


def test_being_shown_counts_apart_from_being_used(state):
    state.record_shown({KEY: 0.1}, at=T0)
    usage = state.get([KEY], at=T0)[KEY]
    assert usage.uses == 0 and usage.shown == pytest.approx(0.1) and usage.last_used is None


def test_an_untrusted_source_counts_once_a_day_per_memory(state):
    assert state.record_use([KEY], source="agent:x", limited=True, at=T0) == [KEY]
    assert state.record_use([KEY], source="agent:x", limited=True, at=T0 + timedelta(hours=1)) == []
    assert state.record_use([KEY], source="agent:y", limited=True, at=T0) == [KEY]  # another source
    assert state.record_use([KEY], source="agent:x", limited=True, at=T0 + timedelta(days=1)) == [KEY]
    assert state.record_use([KEY, KEY], source="user:a", at=T0) == [KEY]  # one report counts a memory once


def test_forget_removes_every_trace_of_a_memory(state):
    state.record_use([KEY], source="agent:x", limited=True, at=T0)
    state.record_shown({KEY: 0.5}, texts=[("h1", *KEY)], at=T0)
    other = ("fact", "web/lb")
    state.record_use([other], at=T0)
    state.forget([KEY])
    assert KEY not in state.get([KEY, other], at=T0) and other in state.get([other], at=T0)
    assert state.recalled_hashes() == set()
    state.close()
    data = (state.path.read_bytes() + (state.path.with_name("state.db-wal").read_bytes()
                                       if state.path.with_name("state.db-wal").exists() else b""))
    assert b"db/primary" not in data  # secure_delete and a truncated WAL: gone from the file, not only unlinked


def test_a_damaged_file_is_moved_aside_and_counting_starts_again(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"this is not a database" * 100)
    s = State(path, half_life=HALF)
    assert s.record_use([KEY], at=T0) == [KEY]
    assert s.warnings and "moved aside" in s.warnings[0]
    assert list(tmp_path.glob("state.db.corrupt-*"))
    s.close()


def test_nothing_is_created_by_reading(tmp_path):
    s = State(tmp_path / "state.db", half_life=HALF)
    assert s.get([KEY]) == {} and s.recalled_hashes() == set()
    assert not (tmp_path / "state.db").exists()


def test_a_question_redacted_ahead_is_stored_redacted_and_only_for_that_question(state):
    """A recall redacts its question while the query embeds; the log stores that text for that question, and
    redacts any other question itself (another thread's recall between the two)."""
    from memvault.stores.state import RecallLogEntry

    key = "AKIAJ7Q3ZTRW5LXN2KPB"
    state.redact_ahead(f"deploy with {key}")
    state.log_recall(RecallLogEntry(1.0, "agent:a", f"rotate {key} today", {}, [], None, 0, 1.0))
    state.log_recall(RecallLogEntry(2.0, "agent:a", f"deploy with {key}", {}, [], None, 0, 1.0))
    stored = [e.query for e in state.recalls()]
    assert stored == ["deploy with <redacted:AWS-access-key-id>", "rotate <redacted:AWS-access-key-id> today"]
