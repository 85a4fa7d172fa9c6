from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from memvault.stores.episodes import new_id
from memvault.rules.errors import InvalidValue


def test_append_writes_one_valid_line_with_required_fields(vault):
    e = vault.episodes.append("deploy v2.15.1 to web1", source="agent:deployer", kind="raw", tags=["deploy"],
                              meta={"host": "web1"})
    path = vault.root / "episodes" / f"{datetime.now(timezone.utc):%Y-%m}.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert list(data) == ["id", "created_at", "source", "kind", "text", "tags", "meta"]
    assert data["id"] == e.id and len(e.id) == 26
    assert data["created_at"].endswith("Z") and data["source"] == "agent:deployer"
    assert data["meta"] == {"host": "web1"}


def test_at_selects_month_file_and_ids_sort_by_time(vault):
    a = vault.episodes.append("later", source="user:a", at="2026-11-20T10:00:00Z")
    b = vault.episodes.append("earlier", source="user:a", at="2026-10-03T08:00:00+02:00")
    assert (vault.root / "episodes/2026-11.jsonl").exists() and (vault.root / "episodes/2026-10.jsonl").exists()
    assert b.created_at == "2026-10-03T06:00:00Z"
    assert b.id < a.id
    assert [e.text for e in vault.episodes.list()] == ["earlier", "later"]


def test_ids_are_unique_and_increasing_within_a_millisecond():
    at = datetime(2026, 12, 1, tzinfo=timezone.utc)
    ids = [new_id(at) for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == 2000


@pytest.mark.parametrize(
    "kwargs, name",
    [({"source": "nocolon"}, "source"), ({"source": "user:x", "kind": "Bad Kind"}, "kind"),
     ({"source": "user:x", "at": "yesterday-ish"}, "at"), ({"source": "user:x", "meta": {"x": object()}}, "meta")],
)
def test_invalid_episodes_are_refused_and_nothing_written(vault, kwargs, name):
    with pytest.raises(InvalidValue, match=name):
        vault.episodes.append("text", **kwargs)
    assert list((vault.root / "episodes").glob("*.jsonl")) == [] or all(
        p.read_text() == "" for p in (vault.root / "episodes").glob("*.jsonl"))


def test_torn_line_is_reported_skipped_and_kept(vault):
    vault.episodes.append("first", source="user:a", at="2026-11-01T00:00:00Z")
    path = vault.root / "episodes/2026-11.jsonl"
    with path.open("a") as f:
        f.write('{"id": "X", "created_at": "2026-11-01T00:00:01Z", "sou')  # torn by a power loss
    vault.episodes.append("after the tear", source="user:a", at="2026-11-02T00:00:00Z")
    with path.open("a") as f:
        f.write('{"id": "Y", "text": "no source or time"}\n')
    problems = []
    texts = [e.text for e in vault.episodes.iter(problems=problems)]
    assert texts == ["first", "after the tear"]
    assert [(p.path, p.line) for p in problems] == [(path, 2), (path, 4)]
    assert "not valid JSON" in problems[0].reason and "created_at" in problems[1].reason
    assert '"sou' in path.read_text()  # never silently dropped from the file


def test_filters_since_until_source_kind_limit(vault):
    now = datetime.now(timezone.utc)
    vault.episodes.append("old", source="web:example.com", at=now - timedelta(days=40))
    vault.episodes.append("recent raw", source="agent:a", at=now - timedelta(days=2))
    vault.episodes.append("recent summary", source="agent:b", kind="summary", at=now - timedelta(hours=1))
    assert [e.text for e in vault.episodes.list(since=now - timedelta(days=7))] == ["recent raw", "recent summary"]
    assert [e.text for e in vault.episodes.list(until=now - timedelta(days=7))] == ["old"]
    assert [e.text for e in vault.episodes.list(source="web:*")] == ["old"]
    assert [e.text for e in vault.episodes.list(source="agent:a")] == ["recent raw"]
    assert [e.text for e in vault.episodes.list(kind="summary")] == ["recent summary"]
    assert [e.text for e in vault.episodes.list(limit=2)] == ["recent raw", "recent summary"]


def test_eight_processes_appending_500_each_leave_4000_valid_lines(vault):
    script = textwrap.dedent(f"""
        import sys
        from memvault import Vault
        v = Vault.open({str(vault.root)!r})
        n = sys.argv[1]
        for i in range(500):
            v.episodes.append(f"writer {{n}} line {{i}} " + "x" * (i % 7 * 300), source="agent:w" + n,
                              at="2026-11-15T12:00:00Z")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)]) for n in range(8)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    lines = (vault.root / "episodes/2026-11.jsonl").read_text().splitlines()
    assert len(lines) == 4000
    parsed = [json.loads(line) for line in lines]
    assert len({p["id"] for p in parsed}) == 4000
    for n in range(8):
        mine = [int(p["text"].split()[3]) for p in parsed if p["source"] == f"agent:w{n}"]
        assert mine == list(range(500))  # each writer's lines all there, in its order


def test_tracked_episodes_go_to_a_per_host_folder_and_are_all_read(tmp_path, monkeypatch):
    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    monkeypatch.setenv("MEMVAULT_HOST", "Web-1.Example")
    e = v.episodes.append("from web1", source="user:a", at="2026-12-01T00:00:00Z")
    assert e.path == v.root / "episodes/web-1.example/2026-12.jsonl"
    monkeypatch.setenv("MEMVAULT_HOST", "db1")
    v.episodes.append("from db1", source="user:a", at="2026-12-02T00:00:00Z")
    assert [x.text for x in v.episodes.list()] == ["from web1", "from db1"]
    assert len(v.purge("user:a", dry_run=True).episodes.removed) == 2


@pytest.mark.parametrize("micro", [0, 1, 499, 999, 1000, 1500, 999_999])
def test_a_time_reads_back_as_the_same_text(micro):
    """Written to the second, or to the millisecond when there are any: a time whose only fraction is below a
    millisecond was written as ``…27.000Z``; read back (the team index keeps a timestamp) it became ``…27Z``, and a
    team host's listing differed from the files (CI saw it once, on an episode stamped 0.4 ms past a second)."""
    from memvault.rules.timeutil import format_time, parse_time

    at = datetime(2026, 12, 6, 8, 38, 27, micro, tzinfo=timezone.utc)
    text = format_time(at)
    assert format_time(parse_time(text)) == text
    assert text.endswith("27Z") == (micro < 1000)



@pytest.mark.parametrize("year", [1, 999, 1000, 2026, 9999])
def test_a_time_of_any_year_reads_back(year):
    """A year below 1000 was written with fewer than four digits ("999-01-01T…Z": strftime's %Y), which no RFC 3339
    reader takes back (a line written by hand may be of any year; memvault shows and exports its time)."""
    from memvault.rules.timeutil import format_time, index_time, parse_time

    at = datetime(year, 3, 4, 5, 6, 7, 8000, tzinfo=timezone.utc)
    assert format_time(at) == f"{year:04d}-03-04T05:06:07.008Z" and parse_time(format_time(at)) == at
    assert index_time(at) == f"{year:04d}-03-04T05:06:07.008Z"


def test_the_newest_few_read_only_the_newest_months(vault, monkeypatch):
    """list(limit=5) parsed every line of every month (MCP list_episodes at 100k lines: 3 s a call, 5.5 s scoped);
    the newest months are read first and the older ones not once the limit is filled."""
    from datetime import datetime, timezone

    for month in range(1, 13):
        for day in (3, 9):
            vault.episodes.append(f"month {month} day {day}", source="user:ops",
                                  at=datetime(2025, month, day, 12, tzinfo=timezone.utc))
    read: list = []
    real = vault.episodes.store.read_bytes
    monkeypatch.setattr(vault.episodes.store, "read_bytes", lambda path, *a, **k: read.append(path.name) or real(path, *a, **k))
    assert [e.text for e in vault.episodes.list(limit=5)] == ["month 10 day 9", "month 11 day 3", "month 11 day 9",
                                                              "month 12 day 3", "month 12 day 9"]
    assert sorted(read) == ["2025-10.jsonl", "2025-11.jsonl", "2025-12.jsonl"]
    read.clear()
    assert [e.text for e in vault.episodes.list(limit=3, reader="user:ops", source="user:ops")][-1] == "month 12 day 9"
    assert len(read) == 2
