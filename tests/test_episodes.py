from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from memvault.rules.timeutil import format_time
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


# ------------------------------------------------------------------------------------------- this clone's folder
@pytest.fixture
def laptop(monkeypatch):
    """This machine is called MacBook-Pro.local, as every Mac is out of the box, and nobody chose a folder name."""
    import socket

    monkeypatch.delenv("MEMVAULT_HOST", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "MacBook-Pro.local")


def _old_line(v, folder: str, text: str) -> "object":
    """A line an older memvault appended to ``episodes/<folder>/2020-01.jsonl`` (past every retention), committed."""
    from conftest import git

    path = v.root / "episodes" / folder / "2020-01.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"id": f"old-{folder}", "created_at": "2020-01-01T00:00:00Z", "source": "user:ops",
                                "text": text}) + "\n")
    git(v.root, "add", "episodes")
    git(v.root, "commit", "-qm", "an older memvault's episodes")
    return path


def test_the_default_folder_is_the_hostname_and_an_id_kept_in_local_state(tmp_path, laptop):
    from conftest import git
    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    e = v.episodes.append("one", source="user:a")
    folder = e.path.parent.name
    assert re.fullmatch(r"macbook-pro\.local-[0-9a-z]{8}", folder)
    record = json.loads((v.state_dir / "episode-folders.json").read_text())
    assert record == {"folder": folder, "older": []}
    assert git(v.root, "status", "--porcelain", "--untracked-files=all") == f"?? episodes/{folder}/{e.path.name}"
    assert Vault.open(v.root).episodes.append("two", source="user:a").path.parent.name == folder  # stable


def test_a_chosen_name_is_the_folder_as_before_and_draws_nothing(tmp_path, laptop, monkeypatch):
    from conftest import git
    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    monkeypatch.setenv("MEMVAULT_HOST", "Web-1.Example")
    assert v.episodes.append("env", source="user:a").path.parent.name == "web-1.example"
    monkeypatch.delenv("MEMVAULT_HOST")
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace("track_in_git = true", 'track_in_git = true\nhost = "db1"', 1))
    git(v.root, "commit", "-qm", "host", "--", "memvault.toml")
    v = Vault.open(v.root)
    assert v.episodes.append("toml", source="user:a").path.parent.name == "db1"
    assert not (v.state_dir / "episode-folders.json").exists()
    v.prune(source="user:admin")
    assert not (v.state_dir / "episode-folders.json").exists()


def test_an_upgraded_clone_keeps_reading_and_pruning_the_folder_it_wrote(tmp_path, laptop):
    """An older memvault appended to episodes/macbook-pro.local/ from this clone (its append lock is in the local
    state): that folder is still this clone's to prune, new lines go to the new folder, and nothing is lost or read
    twice."""
    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    legacy = _old_line(v, "macbook-pro.local", "written by the older memvault")
    recent = legacy.with_name(f"{datetime.now(timezone.utc):%Y-%m}.jsonl")
    recent.write_text(json.dumps({"id": "recent", "created_at": format_time(datetime.now(timezone.utc)),
                                  "source": "user:ops", "text": "recent, from the older memvault"}) + "\n")
    (v.state_dir / "locks").mkdir(exist_ok=True)
    (v.state_dir / "locks" / "episodes.lock").touch()  # what the older memvault's appends left
    v = Vault.open(v.root)
    e = v.episodes.append("after the upgrade", source="user:a")
    assert e.path.parent.name.startswith("macbook-pro.local-")
    assert sorted(x.text for x in v.episodes.iter()) == ["after the upgrade", "recent, from the older memvault",
                                                       "written by the older memvault"]
    assert v.episodes.store.own_folders() == {e.path.parent.name, "macbook-pro.local"}
    report = v.prune(source="user:admin")
    assert [x.id for x in report.removed] == ["old-macbook-pro.local"] and not legacy.exists()
    assert sorted(x.text for x in v.episodes.iter()) == ["after the upgrade", "recent, from the older memvault"]


def test_a_fresh_clone_does_not_take_another_laptops_old_folder_for_its_own(tmp_path, laptop):
    """A new clone (no local state) finds episodes/macbook-pro.local/ pulled from a teammate's laptop of the same
    name: it is read, and left to that laptop to prune while it is live (pruned from two clones, it conflicted)."""
    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    legacy = _old_line(v, "macbook-pro.local", "the other laptop's")
    v.episodes.append("mine", source="user:a")
    assert "macbook-pro.local" not in v.episodes.store.own_folders()
    assert v.prune(source="user:admin").removed == [] and legacy.exists()
    assert "the other laptop's" in [x.text for x in v.episodes.iter()]


def test_a_deleted_or_damaged_record_draws_a_new_folder_and_loses_nothing(tmp_path, laptop):
    from memvault import Vault
    from memvault.rules.errors import UnsafePath

    v = Vault.init(tmp_path / "v", track_episodes=True)
    first = v.episodes.append("first", source="user:a").path.parent.name
    record = v.state_dir / "episode-folders.json"
    seen = {first}
    for damage in (None, "not json", '{"folder": "../facts"}', '{"folder": ".."}', '{"folder": "a/b"}',
                   '{"folder": 7}', '["x"]', '{"folder": "ok-folder", "older": ["../../etc", ".", "fine"]}'):
        if damage is None:
            record.unlink()
        else:
            record.write_text(damage)
        e = Vault.open(v.root).episodes.append(f"after {damage}", source="user:a")
        assert e.path.parent.parent == v.root / "episodes"
        seen.add(e.path.parent.name)
    assert e.path.parent.name == "ok-folder"  # a sound record is used as it is...
    assert Vault.open(v.root).episodes.store.own_folders() == {"ok-folder", "fine"}  # ...less what is no folder
    assert len(seen) == 9 and not list((v.root / "facts").rglob("*.jsonl"))  # one new folder per damage
    assert len(list(v.episodes.iter())) == 9
    record.unlink()
    (v.state_dir / "elsewhere.json").write_text('{"folder": "planted", "older": []}')
    record.symlink_to(v.state_dir / "elsewhere.json")
    with pytest.raises(UnsafePath, match="episode-folders.json"):  # never read or written through a link
        Vault.open(v.root).episodes.append("through a link", source="user:a")
    assert not (v.root / "episodes" / "planted").exists()


def test_a_folder_already_in_the_vault_is_never_drawn(tmp_path, laptop, monkeypatch):
    """A teammate committed episodes/macbook-pro.local-00000000/ (or a link of that name): the id drawn next is
    another, so this clone never appends to a folder someone else writes."""
    import memvault.stores.host_folders as host_folders

    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    (v.root / "episodes" / "macbook-pro.local-00000000").mkdir()
    (v.root / "episodes" / "macbook-pro.local-11111111").symlink_to(tmp_path)
    draws = iter([0] * 8 + [1] * 8 + [2] * 8)
    monkeypatch.setattr(host_folders.secrets, "randbelow", lambda n: next(draws))
    assert v.episodes.append("mine", source="user:a").path.parent.name == "macbook-pro.local-22222222"


@pytest.mark.parametrize("hostname", ["<script>alert(1)</script>", "..", "", "-", "Ünïcödé Höst", "a" * 300,
                                      "../../etc", "web1/../../x", "host\nname", ".hidden."])
def test_any_hostname_makes_a_plain_folder_inside_episodes(tmp_path, monkeypatch, hostname):
    import socket

    from memvault import Vault

    monkeypatch.delenv("MEMVAULT_HOST", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    v = Vault.init(tmp_path / "v", track_episodes=True)
    e = v.episodes.append("one", source="user:a")
    name = e.path.parent.name
    assert e.path.parent.parent == v.root / "episodes" and re.fullmatch(r"[a-z0-9][a-z0-9._-]*-[0-9a-z]{8}", name)
    assert len(name) <= 49 and Vault.open(v.root).episodes.store.host == name


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


# ------------------------------------------------------------------------------------------- review: the folder id
def test_a_line_made_before_a_redraw_goes_to_the_folder_drawn(tmp_path, laptop, monkeypatch):
    """The line's file was chosen before the append lock was held; a sync in another process drew a new folder
    meanwhile (its old one is another clone's too). The line lands in the new folder, once, and the episode and
    the index say where."""
    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    store = v.episodes.store
    old = store.host
    episode, line = store.make("made before the redraw", source="user:a")
    store.folders.disown({old})
    assert store.append_line(episode.path, line).parent.name == store.host != old
    assert not (v.root / "episodes" / old).exists()
    # Through the vault: check, then the redraw, then the write.
    real = store.make

    def make_then_redraw(*args, **kwargs):
        made = real(*args, **kwargs)
        store.folders.disown({store.host})
        return made

    monkeypatch.setattr(store, "make", make_then_redraw)
    e = v.episodes.append("via the vault", source="user:a")
    assert e.path.parent.name == store.host and e.path.exists()
    got = [(x.text, x.path.parent.name) for x in v.episodes.iter()]
    assert sorted(t for t, _ in got) == ["made before the redraw", "via the vault"]
    assert all(folder != old for _, folder in got)


def test_a_damaged_record_never_adopts_another_laptops_old_folder(tmp_path, laptop):
    """The append lock is an older memvault's evidence only when no record was ever kept: with a damaged record
    the lock is this version's own, and episodes/macbook-pro.local/ a teammate's laptop of the same name (pruned
    from here too, it conflicted at every sync and lost that laptop's expired lines twice over)."""
    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    v.episodes.append("mine", source="user:a")  # this version: a record, then the lock
    legacy = _old_line(v, "macbook-pro.local", "the other laptop's")
    (v.state_dir / "episode-folders.json").write_text("{damaged")
    v = Vault.open(v.root)
    assert "macbook-pro.local" not in v.episodes.store.own_folders()
    assert v.prune(source="user:admin").removed == [] and legacy.exists()


def test_appending_processes_lose_no_line_while_another_redraws(tmp_path, laptop):
    """Two processes append while a third (a sync) gives up the folder three times: every line is stored once and
    whole, and none lands in a folder after it was given up."""
    import os
    import subprocess

    from memvault import Vault

    v = Vault.init(tmp_path / "v", track_episodes=True)
    v.episodes.append("first", source="user:a")
    script = textwrap.dedent(f"""
        import socket, sys
        socket.gethostname = lambda: "MacBook-Pro.local"
        from memvault import Vault
        v = Vault.open({str(v.root)!r})
        for n in range(60):
            v.episodes.append(f"{{sys.argv[1]}} {{n}}", source="user:a")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("MEMVAULT_HOST", None)
    procs = [subprocess.Popen([sys.executable, "-c", script, name], env=env) for name in ("p", "q")]
    store = Vault.open(v.root).episodes.store
    given_up: dict[str, int] = {}
    import time

    for threshold in (20, 50, 80):
        deadline = time.monotonic() + 60
        while len(list(store.iter())) < threshold and time.monotonic() < deadline:
            time.sleep(0.01)
        with store.lock():  # as sync does: the append lock held while the folder is given up
            folder = store.host
            store.folders.disown({folder})
            given_up[folder] = sum(p.stat().st_size for p in (v.root / "episodes" / folder).glob("*.jsonl"))
    for p in procs:
        assert p.wait(timeout=120) == 0
    problems: list = []
    texts = [e.text for e in store.iter(problems=problems)]
    assert not problems and len(texts) == len(set(texts)) == 121
    for folder, size in given_up.items():
        assert sum(p.stat().st_size for p in (v.root / "episodes" / folder).glob("*.jsonl")) == size


@pytest.mark.parametrize("damage", ["huge", "deep", "nul", "older", "folder", "fifo", "dangling"])
def test_any_damage_to_the_record_is_a_new_folder_or_one_line_naming_it(tmp_path, laptop, damage):
    import os

    from memvault import Vault
    from memvault.rules.errors import MemvaultError

    v = Vault.init(tmp_path / "v", track_episodes=True)
    record = v.state_dir / "episode-folders.json"
    record.unlink(missing_ok=True)
    if damage == "huge":
        record.write_text('{"folder": "ok", "older": [' + ",".join(['"x"'] * 40000) + "]}")
    elif damage == "deep":
        record.write_text("[" * 30000 + "]" * 30000)
    elif damage == "nul":
        record.write_text('{"folder": "a\\u0000b"}')
    elif damage == "older":
        record.write_text('{"folder": "ok", "older": ["a\\u0000b", "../x", "/etc", "a/b", 5, null, {"a": 1}]}')
    elif damage == "folder":
        record.mkdir()
    elif damage == "fifo":
        os.mkfifo(record)
    else:
        record.symlink_to(tmp_path / "nowhere")
    try:
        e = Vault.open(v.root).episodes.append("x", source="user:a")
    except MemvaultError as exc:
        assert damage in ("folder", "fifo", "dangling") and "episode-folders.json" in str(exc) and "\n" not in str(exc)
        return
    assert e.path.parent.parent == v.root / "episodes" and e.path.exists()
    assert Vault.open(v.root).episodes.store.own_folders() <= {e.path.parent.name}


def test_reporting_an_episode_used_parses_only_its_own_line(vault, monkeypatch):
    """`memvault used episode:ID` (and MCP `used`) found the episode's file by parsing every line of its month: 1.35 s a
    call at 90,000 lines, ~30 s at 2 M. Only the lines that hold the id are parsed now, as `find` does."""
    from memvault.stores import episodes as store

    at = datetime(2026, 11, 15, tzinfo=timezone.utc)
    made = vault.episodes.append_many([{"text": f"line {i}", "at": at + timedelta(seconds=i)} for i in range(500)],
                                      source="agent:a")
    parsed: list[str] = []
    real = store.parse_line
    monkeypatch.setattr(store, "parse_line", lambda line, *a, **k: parsed.append(line) or real(line, *a, **k))
    assert vault.gate.episodes.path_of(made[250].id) == made[250].path
    assert len(parsed) == 1
    assert len(vault.used([f"episode:{made[250].id}"], source="user:tester")) == 1
    other = made[250].id[:-1] + ("1" if made[250].id[-1] == "0" else "0")
    assert vault.gate.episodes.path_of(other) is None  # its month, but no line holds it


def test_append_many_refuses_a_field_it_would_drop_naming_it_and_writes_nothing(vault):
    """The line on disk calls the time created_at: an item that says so was appended dated now, its time dropped
    without a word (a back-fill of months of events came out as today's, out of reach of retention)."""
    items = [{"text": "deploy v2.1 done", "at": "2026-06-01T10:00:00Z"},
             {"text": "disk full on db01", "created_at": "2026-06-02T10:00:00Z"}]
    with pytest.raises(InvalidValue) as caught:
        vault.episodes.append_many(items, source="user:ops")
    assert "episode 2 of 2" in str(caught.value) and "created_at" in str(caught.value) and "'at'" in str(caught.value)
    assert list(vault.episodes.iter()) == []
