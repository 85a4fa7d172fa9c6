"""The small frictions of issue 26: `episode list` columns that stay aligned whatever the timestamps' precision,
`agent status` that finds the vault as every other command does (and the one the installs point at), and a
session end whose transcript was never written (what `claude mcp list` fires) passing quietly."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from click.testing import CliRunner

from agent_fixtures import payload, run_hook, transcript
from memvault import Vault
from memvault.interfaces.agents import runtimes
from memvault.interfaces.agents.capture import capture
from memvault.interfaces.cli import Context, cli


def test_episode_list_columns_line_up_with_and_without_milliseconds(vault, invoke):
    vault.episodes.append("deploy started", source="user:dev", at=datetime(2026, 11, 20, 9, 0, 0, tzinfo=timezone.utc))
    vault.episodes.append("deploy failed", source="user:dev", kind="incident",
                          at=datetime(2026, 11, 20, 9, 0, 1, 250000, tzinfo=timezone.utc))
    vault.episodes.append("rolled back", source="agent:claude-code", kind="summary",
                          at=datetime(2026, 11, 20, 9, 0, 2, 5000, tzinfo=timezone.utc))
    done = invoke("episode", "list")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    for column in ("raw", "user:dev", "deploy"):
        starts = {line.index(column) for line in lines if column in line}
        assert len(starts) == 1, (column, lines)
    kinds = [line.split()[1] for line in lines]
    assert kinds == ["raw", "incident", "summary"]
    assert {line.index(kind) for line, kind in zip(lines, kinds)} == {len("2026-11-20T09:00:01.250Z") + 2}
    assert "2026-11-20T09:00:01.250Z" in lines[1] and "2026-11-20T09:00:02.005Z" in lines[2]


def _captured(vault: Vault, tmp_path: Path) -> str:
    path = transcript(tmp_path, "claude-code", big=False)
    capture(vault, "claude-code", path, session_id="sess-status-1", final=True)
    return "sess-status-1"


def _status(cwd: Path, *args: str) -> dict:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        done = CliRunner().invoke(cli, ["agent", "status", "--json", *args], obj=Context())
    finally:
        os.chdir(old)
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_agent_status_without_vault_finds_it_as_other_commands_do(vault, tmp_path, monkeypatch):
    session = _captured(vault, tmp_path)
    inside = vault.root / "facts"
    assert [s["session_id"] for s in _status(inside)["sessions"]] == [session]  # the nearest parent's vault
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("MEMVAULT_DIR", str(vault.root))
    assert [s["session_id"] for s in _status(elsewhere)["sessions"]] == [session]
    monkeypatch.delenv("MEMVAULT_DIR")
    assert _status(elsewhere, "--vault", str(vault.root))["vault"] == str(vault.root)


def test_agent_status_outside_any_vault_shows_the_vault_the_installs_point_at(vault, tmp_path):
    session = _captured(vault, tmp_path)
    repo = tmp_path / "src" / "shop-api"  # a service's repository: no memvault.toml above it
    repo.mkdir(parents=True)
    nothing = _status(repo)
    assert "sessions" not in nothing
    runtimes.install("claude-code", vault.root)
    data = _status(repo)
    assert data["vault"] == str(vault.root) and [s["session_id"] for s in data["sessions"]] == [session]


def test_a_session_end_whose_transcript_was_never_written_is_a_quiet_no_op(vault, tmp_path):
    # `claude mcp list` starts and ends a session that writes no transcript; Claude Code still sends SessionEnd with
    # the path the transcript would have had (anthropics/claude-code#30217, yiliangs/agent-usage-stat#60).
    missing = tmp_path / "projects" / "-src-shop" / "2ff46cd5-f4e7-4724-bb20-579dae7956ea.jsonl"
    for detach in (["--detach"], []):
        done = run_hook(["capture", "--runtime", "claude-code", "--vault", str(vault.root), *detach],
                        payload("claude-code", "SessionEnd", transcript=missing, cwd=tmp_path))
        assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    log = vault.state_dir / "agents.log"
    assert not log.exists() or "no such file" not in log.read_text()
    assert vault.captures.sessions() == []


def test_episode_list_with_no_match_says_so_and_stats_counts_one_line(vault, invoke):
    """`episode list --source nobody` printed nothing at all (was the filter wrong, or the vault empty?), and
    `stats` said a month file of one episode held "1 lines"."""
    vault.episodes.append("deploy started", source="user:dev")
    done = invoke("episode", "list", "--source", "agent:nobody")
    assert done.exit_code == 0 and done.stdout == ""
    assert "no episode matches" in done.stderr
    as_json = invoke("episode", "list", "--source", "agent:nobody", "--json")
    assert as_json.exit_code == 0 and as_json.stdout == ""  # JSONL for programs: still nothing on stdout
    stats = invoke("stats")
    assert stats.exit_code == 0 and ": 1 line," in stats.stdout and "1 lines" not in stats.stdout
