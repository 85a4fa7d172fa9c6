"""Imports attacked and used for a long time: a damaged database is one line naming it with nothing written, an
import repeated under --trust adds no episode twice, a giant line of an export is refused without being held, and a
project's symlinked folders never bring this host's own files in.

Inputs keep the real shape of each tool's files (tests/fixtures/import)."""
from __future__ import annotations

import json
import sqlite3
import tracemalloc

from agent_fixtures import IMPORTS
from memvault.interfaces.transfer import read


def claude_mem_db(tmp_path, rows: int = 0):
    """claude-mem's own schema and rows (the fixture), and ``rows`` more observations."""
    path = tmp_path / "claude-mem.db"
    conn = sqlite3.connect(path)
    conn.executescript((IMPORTS / "claude-mem" / "schema.sql").read_text())
    conn.executescript((IMPORTS / "claude-mem" / "data.sql").read_text())
    for i in range(rows):
        conn.execute("INSERT INTO observations (memory_session_id, project, type, title, narrative, created_at, "
                     "created_at_epoch, content_hash) VALUES ('mem-7f3a', 'shopfront', 'discovery', ?, ?, "
                     "'2026-01-01T00:00:00.000Z', ?, ?)", (f"Row {i}", "n" * 500, 1767225600000 + i, f"h{i:015d}"))
    conn.commit()
    conn.close()
    return path


def written(vault) -> tuple[str, int]:
    return vault.git.run("rev-parse", "HEAD"), len(list(vault.episodes.iter()))


# ------------------------------------------------------------------------------------------------ claude-mem
def test_a_damaged_claude_mem_database_is_one_line_naming_it_and_nothing_is_written(invoke, vault, tmp_path):
    db = claude_mem_db(tmp_path, rows=3000)
    data = bytearray(db.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8192] = b"\x55" * 8192  # pages in the middle overwritten (a disk error, a torn copy)
    db.write_bytes(bytes(data))
    before = written(vault)
    r = invoke("import", "claude-mem", str(db))
    assert r.exit_code == 1, r.output  # a bad input, not a bug (70)
    assert r.stderr.count("\n") == 1 and str(db) in r.stderr and "internal error" not in r.stderr, r.stderr
    assert written(vault) == before


# ------------------------------------------------------------------------------------------------ idempotence
def test_importing_again_with_trust_adds_no_episode_twice(invoke, vault, tmp_path, monkeypatch):
    """A person first imports to look (proposals), then vouches with --trust: the proposals are accepted, and the
    episodes the first import stored are not stored a second time under the person's source."""
    monkeypatch.setenv("MEMVAULT_SOURCE", "user:alice")
    db = claude_mem_db(tmp_path)
    first = invoke("import", "claude-mem", str(db))
    assert first.exit_code == 0, first.output
    episodes = len(list(vault.episodes.iter()))
    assert episodes == 3
    again = invoke("import", "claude-mem", str(db), "--trust", "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert [e for e in report["added"] if "episode" in e] == []
    assert sum(e.get("reason") == "imported before" for e in report["skipped"]) == 3
    assert len(list(vault.episodes.iter())) == episodes


# ------------------------------------------------------------------------------------------------ giant lines
def export_with_a_giant_line(tmp_path, size: int):
    """A memvault export whose second record is one line of ``size`` bytes, between two good episodes."""
    header = {"type": "memvault-export", "version": 1, "vault": "v", "exported_at": "2026-01-01T00:00:00Z"}

    def episode(n: int, text: str) -> dict:
        return {"type": "episode", "episode": {"id": f"ep-0000000{n}", "created_at": "2026-01-01T00:00:0{n}Z",
                                               "source": "user:alice", "kind": "raw", "text": text}}

    path = tmp_path / "export.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n" + json.dumps(episode(1, "the first")) + "\n")
        f.write('{"type": "episode", "episode": {"text": "' + "x" * size + '"}}\n')
        f.write(json.dumps(episode(2, "the last")) + "\n")
    return path


def test_a_giant_line_of_an_export_is_refused_without_being_held_whole(tmp_path):
    path = export_with_a_giant_line(tmp_path, 48 << 20)
    tracemalloc.start()
    try:
        items = list(read("memvault", path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [i.kind for i in items] == ["episode", "refused", "episode"]
    assert items[1].origin == f"{path}:3" and "bytes" in (items[1].refusal or "")
    assert peak < 24 << 20, f"{peak >> 20} MiB held to read a 48 MiB line"


# ------------------------------------------------------------------------------------------------ claude-code
def test_a_projects_symlinked_claude_folders_are_refused_not_followed(invoke, vault, tmp_path):
    """A teammate commits ``.claude/rules -> /home`` (or ``.claude -> ~/.claude``): importing the project read every
    markdown file under the link's target on this host into the shared inbox. The links are refused by name; the
    project's own CLAUDE.md still comes in."""
    elsewhere = tmp_path / "home-of-the-person"
    (elsewhere / "notes").mkdir(parents=True)
    (elsewhere / "notes" / "diary.md").write_text("# Diary\n\nPrivate-diary-entry-kiwi about my salary\n")
    (elsewhere / "CLAUDE.md").write_text("# Mine\n\nPrivate-global-instruction-kiwi\n")
    for link in (".claude", ".claude/rules"):
        project = tmp_path / f"project-{link.count('/')}"
        (project / ".claude").mkdir(parents=True) if link == ".claude/rules" else project.mkdir()
        (project / "CLAUDE.md").write_text("# Build\n\nRun make test before pushing.\n")
        (project / link).symlink_to(elsewhere if link == ".claude" else elsewhere / "notes")
        if link == ".claude":
            (elsewhere / "rules").symlink_to(elsewhere / "notes")
        r = invoke("import", "claude-code", str(project), "--json")
        assert r.exit_code == 0, r.output
        report = json.loads(r.stdout)
        assert "kiwi" not in r.output
        assert any(str(project / link) in e["reason"] or str(project / link) in e["origin"]
                   for e in report["refused"]), report["refused"]
        assert [e["key"] for e in report["proposed"]] == [f"claude-code/{project.name}/build"]
        inbox = "".join(p.read_text() for p in (vault.root / "inbox").rglob("*.md"))
        assert "kiwi" not in inbox and "make test" in inbox


# ------------------------------------------------------------------------------------------------ progress
def test_a_long_import_says_how_far_it_has_come(invoke, vault, monkeypatch):
    """An import of 300,000 memories runs for about 20 minutes (4 ms an item through the gate) and said nothing
    until its report: it now tells stderr how many of how many items it has been through, every few seconds (the
    report on stdout is unchanged)."""
    from memvault.core import transfer
    from memvault.interfaces.cli import transfer as cli_transfer

    seen: list[tuple[int, int]] = []
    report = transfer.import_items(vault, read("mem0", IMPORTS / "mem0" / "export.json"), fmt="mem0",
                                   source="import:mem0", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] and [d for d, _ in seen] == sorted(d for d, _ in seen), seen
    assert sum(len(getattr(report, bucket)) for bucket in report.BUCKETS) >= 1
    monkeypatch.setattr(cli_transfer, "PROGRESS_SECONDS", 0.0)
    r = invoke("import", "mem0", str(IMPORTS / "mem0" / "export.json"), "--dry-run")
    assert r.exit_code == 0, r.output
    assert "memvault: import: " in r.stderr and " of " in r.stderr and "items" in r.stderr, r.stderr
    assert "memvault: import: " not in r.stdout
