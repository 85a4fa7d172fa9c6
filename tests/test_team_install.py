"""Installs a team can commit (issue 25, item 4): after ``agent install claude-code --scope project`` the project's
shared files (``.mcp.json``, ``.claude/settings.json``) name nothing of this host, and the real Claude Code CLI, run
by a teammate (another HOME, memvault on PATH through a shim), connects to the server they describe.

The CLI is ``claude`` on PATH, else ``@anthropic-ai/claude-code`` installed once with npm into a cache directory
(pytest's cache, else /tmp/memvault-claude-code). Without npm and without claude the test is skipped, saying so;
under CI=true it fails instead: CI must run it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memvault import Vault
from conftest import REPO_ROOT, git

PACKAGE = "@anthropic-ai/claude-code"


def _unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the team install test: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def claude(request) -> str:
    found = shutil.which("claude")
    if found:
        return found
    cache = getattr(request.config, "cache", None)
    prefix = Path(cache.mkdir("claude-code")) if cache is not None else Path("/tmp/memvault-claude-code")
    binary = prefix / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            _unavailable("neither claude nor npm is installed (npm install -g @anthropic-ai/claude-code runs it)")
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), PACKAGE],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not binary.exists():
            _unavailable(f"npm could not install {PACKAGE}: {(done.stderr or done.stdout).strip()[-300:]}")
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    if version.returncode != 0:
        _unavailable(f"{binary} does not run: {version.stderr.strip()[-300:]}")
    return str(binary)


def _shim(folder: Path) -> Path:
    """``memvault`` on a teammate's PATH: this checkout's code, run by this venv's Python."""
    folder.mkdir(parents=True)
    shim = folder / "memvault"
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={REPO_ROOT} exec {sys.executable} -m memvault \"$@\"\n")
    shim.chmod(0o755)
    return folder


def _project(tmp_path: Path) -> tuple[Path, Vault]:
    project = tmp_path / "acme-api"
    project.mkdir()
    git(project, "init", "-q")
    vault = Vault.init(project / "memory")
    return project, vault


def _host_paths(tmp_path: Path) -> list[str]:
    return [str(tmp_path), sys.executable, sys.prefix, str(REPO_ROOT), os.environ["HOME"]]


def test_shared_files_name_nothing_of_this_host_and_a_teammates_claude_connects(claude, tmp_path, runner):
    from memvault.interfaces.cli import Context, cli

    project, vault = _project(tmp_path)
    r = runner.invoke(cli, ["--vault", str(vault.root), "agent", "install", "claude-code", "--scope", "project",
                            "--project", str(project)], obj=Context())
    assert r.exit_code == 0, r.output
    shared = {name: (project / name).read_text() for name in (".mcp.json", ".claude/settings.json")}
    for name, text in shared.items():
        for path in _host_paths(tmp_path):
            assert path not in text, f"{name} names {path} of this host"
    server = json.loads(shared[".mcp.json"])["mcpServers"]["memvault"]
    assert server["command"] == "memvault" and server["args"][-2:] == ["--in-project", "memory"]
    hooks = json.loads(shared[".claude/settings.json"])["hooks"]
    assert hooks["SessionStart"][0]["hooks"][0]["command"].startswith("memvault hook session-start ")
    assert not (project / ".claude" / "settings.local.json").exists()

    # A teammate: another HOME, memvault on PATH, the project's files as pulled; they approve the project's server
    # in their own untracked settings (Claude Code asks once, interactively).
    mate = tmp_path / "teammate"
    (mate / "home").mkdir(parents=True)
    (project / ".claude" / "settings.local.json").write_text('{"enabledMcpjsonServers": ["memvault"]}\n')
    env = {"HOME": str(mate / "home"), "PATH": f"{_shim(mate / 'bin')}:/usr/local/bin:/usr/bin:/bin",
           "MEMVAULT_NO_DAEMON": "1", "HF_HUB_OFFLINE": "1", "DISABLE_TELEMETRY": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "TMPDIR": str(mate / "home")}
    listed = subprocess.run([claude, "mcp", "list"], cwd=project, env=env, capture_output=True, text=True,
                            timeout=180)
    line = next((x for x in listed.stdout.splitlines() if x.startswith("memvault:")), listed.stdout + listed.stderr)
    assert "Connected" in line, line

    # The same teammate without memvault on PATH: agent status says so.
    bare = {**os.environ, "PATH": "/usr/bin:/bin", "HOME": str(mate / "home")}
    status = subprocess.run([sys.executable, "-m", "memvault", "agent", "status", "--project", str(project)],
                            cwd=project, env={**bare, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True,
                            timeout=120)
    assert "memvault is not on PATH here" in status.stdout + status.stderr, status.stdout + status.stderr


def test_a_vault_outside_the_project_goes_to_this_hosts_local_files(tmp_path, runner):
    from memvault.interfaces.cli import Context, cli

    project = tmp_path / "proj"
    project.mkdir()
    vault = Vault.init(tmp_path / "elsewhere")
    r = runner.invoke(cli, ["--vault", str(vault.root), "agent", "install", "claude-code", "--scope", "project",
                            "--project", str(project)], obj=Context())
    assert r.exit_code == 0, r.output
    for name in (".mcp.json", ".claude/settings.json"):
        assert str(tmp_path) not in (project / name).read_text() and sys.executable not in (project / name).read_text()
    local = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert local["env"]["MEMVAULT_DIR"] == str(vault.root)
    mine = json.loads((Path(os.environ["HOME"]) / ".claude.json").read_text())["projects"][str(project.resolve())]
    assert mine["mcpServers"]["memvault"]["command"] == sys.executable  # local scope wins over .mcp.json here
