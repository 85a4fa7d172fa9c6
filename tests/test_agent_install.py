"""memvault agent install / uninstall / status / print: merged into each runtime's own settings files, the rest of
each file kept byte for byte, a backup first, idempotent, removed exactly; the MCP server stamps agent:<runtime>."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tomllib
from pathlib import Path

import pytest

from memvault.interfaces.agents import runtimes
from memvault.interfaces.agents.configfiles import JsonText
from memvault.rules.errors import ConfigError

CLAUDE_SETTINGS = """{
    "model": "opus",
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/check-bash.sh"}]}
        ],
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hello"}]}
        ]
    },
    "permissions": {"allow": ["Bash(git *)"], "deny": []},
    "env": {}
}
"""
CLAUDE_JSON = '{\n  "numStartups": 42,\n  "mcpServers": {\n    "github": {"type": "http", "url": "https://api.example.com/mcp"}\n  },\n  "projects": {}\n}\n'
GEMINI_SETTINGS = """// Gemini CLI settings (comments are allowed here)
{
  "theme": "GitHub", // the light one
  /* servers */
  "mcpServers": {},
  "hooks": {
    "BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "lint.sh", "timeout": 5000}]}]
  }
}
"""
CODEX_CONFIG = """# Codex settings
model = "gpt-5.5"
approval_policy = "on-request"

[mcp_servers.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
"""
CODEX_HOOKS = '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}]}}'


@pytest.fixture
def home(isolated_env):
    return isolated_env


def user_files(home: Path) -> dict[str, tuple[Path, str]]:
    return {
        "claude-code": (home / ".claude" / "settings.json", CLAUDE_SETTINGS),
        "claude-json": (home / ".claude.json", CLAUDE_JSON),
        "gemini": (home / ".gemini" / "settings.json", GEMINI_SETTINGS),
        "codex": (home / ".codex" / "config.toml", CODEX_CONFIG),
        "codex-hooks": (home / ".codex" / "hooks.json", CODEX_HOOKS),
    }


def write_all(files):
    for path, text in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize("runtime", ["claude-code", "codex", "gemini"])
def test_install_merges_and_uninstall_leaves_the_files_byte_identical(runtime, home, vault):
    files = user_files(home)
    write_all(files)
    report = runtimes.install(runtime, vault.root, per_prompt=True)
    assert report.changed and len(report.backups) == len(report.changed)
    for backup in report.backups:  # the backup holds the file as it was
        assert Path(backup).read_text() in {text for _, text in files.values()}
    state = runtimes.status(runtime).state
    assert state["mcp"] == "installed" and set(state["hooks"].values()) == {"ok"}
    # The user's entries are all still there, unchanged.
    if runtime == "claude-code":
        settings = json.loads(files["claude-code"][0].read_text())
        assert settings["model"] == "opus" and settings["permissions"] == {"allow": ["Bash(git *)"], "deny": []}
        assert settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == "~/bin/check-bash.sh"
        assert settings["hooks"]["SessionStart"][0]["hooks"][0]["command"] == "echo hello"
        assert len(settings["hooks"]["SessionStart"]) == 2
        assert set(settings["hooks"]) == {"PreToolUse", "SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"}
        servers = json.loads(files["claude-json"][0].read_text())["mcpServers"]
        assert set(servers) == {"github", "memvault"} and servers["memvault"]["args"][-2:] == ["--source",
                                                                                            "agent:claude-code"]
    elif runtime == "gemini":
        text = files["gemini"][0].read_text()
        assert "// the light one" in text and "/* servers */" in text
        doc = JsonText(text)
        hooks = doc.value(doc.get(("hooks",)))
        assert set(hooks) == {"BeforeTool", "SessionStart", "BeforeAgent", "PreCompress", "SessionEnd"}
        assert hooks["SessionStart"][0]["hooks"][0]["timeout"] == 30000  # milliseconds in Gemini CLI
    else:
        config = tomllib.loads(files["codex"][0].read_text())
        assert set(config["mcp_servers"]) == {"github", "memvault"}
        assert config["mcp_servers"]["memvault"]["args"][-1] == "agent:codex"
        hooks = json.loads(files["codex-hooks"][0].read_text())["hooks"]
        assert set(hooks) == {"Stop", "SessionStart", "UserPromptSubmit", "PreCompact"} and len(hooks["Stop"]) == 2
        assert "/hooks" in " ".join(report.notes)
    # Twice changes nothing, and writes no backup.
    again = runtimes.install(runtime, vault.root, per_prompt=True)
    assert again.changed == [] and again.backups == []
    # Installed without --per-prompt: only that hook goes.
    runtimes.install(runtime, vault.root)
    assert set(runtimes.status(runtime).state["hooks"]) == {s.event for s in runtimes.RUNTIMES[runtime].hooks
                                                              if not s.optional}
    runtimes.uninstall(runtime)
    for path, text in files.values():
        assert path.read_text() == text, path
    assert runtimes.status(runtime).state == {"mcp": None, "hooks": {}}


@pytest.mark.parametrize("runtime", ["claude-code", "codex", "gemini"])
def test_install_into_nothing_creates_files_and_uninstall_takes_them_away(runtime, home, vault):
    runtimes.install(runtime, vault.root)
    created = [p for p in runtimes.paths(runtime, "user").values() if p.exists()]
    assert created
    runtimes.uninstall(runtime)
    assert not any(p.exists() for p in created)
    assert not any(p.parent.exists() for p in created if p.parent != home)  # the folders it made go too


def test_project_scope_writes_the_projects_files(home, vault, tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / ".mcp.json").write_text('{"mcpServers": {}}')
    runtimes.install("claude-code", vault.root, scope="project", project=project)
    assert json.loads((project / ".mcp.json").read_text())["mcpServers"]["memvault"]["command"] == "memvault"
    assert "SessionStart" in json.loads((project / ".claude" / "settings.json").read_text())["hooks"]
    # the vault is outside the project: this host's path goes to its local files only (issue 25)
    local = json.loads((home / ".claude.json").read_text())["projects"][str(project.resolve())]["mcpServers"]
    assert local["memvault"]["command"] == sys.executable
    assert json.loads((project / ".claude" / "settings.local.json").read_text())["env"] == {
        "MEMVAULT_DIR": str(vault.root)}
    runtimes.uninstall("claude-code", scope="project", project=project)
    assert not (home / ".claude.json").exists()
    assert (project / ".mcp.json").read_text() == '{"mcpServers": {}}'
    assert not (project / ".claude").exists()


def test_installs_say_which_trust_the_runtime_needs_before_it_reads_them(home, vault, tmp_path):
    """Codex 0.171 reads a project's .codex/ (servers and hooks) only in a project the person trusted, and Gemini CLI
    0.61 connects no MCP server, not even a user-level one, in a folder it does not trust: run against the real
    CLIs, `codex mcp list` said "No MCP servers configured" and `gemini mcp list` showed memvault "Disabled" after
    an install that had reported success and named neither."""
    project = tmp_path / "proj"
    project.mkdir()
    codex = " ".join(runtimes.install("codex", vault.root, scope="project", project=project).notes)
    assert "trust" in codex and str(project.resolve()) in codex and "trust_level" in codex
    assert "trust_level" not in " ".join(runtimes.install("codex", vault.root).notes)  # ~/.codex: always read
    gemini = " ".join(runtimes.install("gemini", vault.root).notes)
    assert "trust" in gemini and "Disabled" in gemini


def test_a_file_that_does_not_parse_is_refused_and_left_alone(home, vault):
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"model": "opus",,}')
    with pytest.raises(ConfigError, match=r"settings.json.*line 1"):
        runtimes.install("claude-code", vault.root)
    assert path.read_text() == '{"model": "opus",,}'


def test_a_symlinked_settings_file_is_followed_not_replaced(home, vault, tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "settings.json").write_text(CLAUDE_SETTINGS)
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").symlink_to(dotfiles / "settings.json")
    runtimes.install("claude-code", vault.root)
    assert (home / ".claude" / "settings.json").is_symlink()
    assert "memvault.interfaces.agents.hook" in (dotfiles / "settings.json").read_text()
    runtimes.uninstall("claude-code")
    assert (dotfiles / "settings.json").read_text() == CLAUDE_SETTINGS


def test_someone_elses_memvault_server_entry_is_left_alone(home, vault):
    theirs = '{"mcpServers": {"memvault": {"command": "memvault", "args": ["mcp"]}}}'
    (home / ".claude.json").write_text(theirs)
    report = runtimes.install("claude-code", vault.root)
    assert "not by this install" in " ".join(report.notes)
    runtimes.uninstall("claude-code")
    assert (home / ".claude.json").read_text() == theirs


def test_status_says_when_the_installed_python_or_vault_is_gone(home, vault, tmp_path):
    runtimes.install("gemini", vault.root, python=str(tmp_path / "old-venv" / "bin" / "python"))
    hooks = runtimes.status("gemini").state["hooks"]
    assert all(check.startswith("its Python is gone") for check in hooks.values())


def test_cli_install_status_print_uninstall(invoke, vault, home):
    done = invoke("agent", "install", "claude-code", "--per-prompt")
    assert done.exit_code == 0, done.output
    assert "claude-code (user): updated" in done.output or "created" in done.output
    status = invoke("agent", "status", "--json")
    data = json.loads(status.stdout)
    user = next(r for r in data["runtimes"] if r["runtime"] == "claude-code" and r["scope"] == "user")
    assert user["state"]["mcp"] == "installed" and "UserPromptSubmit" in user["state"]["hooks"]
    printed = invoke("agent", "print", "cursor")
    entry = json.loads(printed.stdout)["mcpServers"]["memvault"]
    assert entry["args"][-2:] == ["--source", "agent:cursor"] and "paste into" in printed.stderr
    assert invoke("agent", "print", "codex").stdout.startswith("# memvault: MCP server")
    assert invoke("agent", "uninstall", "claude-code").exit_code == 0
    assert not (home / ".claude.json").exists()


def test_print_for_a_client_memvault_does_not_know_stamps_that_clients_source(invoke):
    """`agent print --help` says writes are stamped agent:CLIENT; a client not in its list (zed) was stamped
    agent:mcp, so its writes could not be told from any other server's, while stderr said it was zed's entry."""
    printed = invoke("agent", "print", "zed")
    assert printed.exit_code == 0, printed.output
    entry = json.loads(printed.stdout)["mcpServers"]["memvault"]
    assert entry["args"][-2:] == ["--source", "agent:zed"] and "zed's settings" in printed.stderr


def test_the_registered_mcp_server_stamps_the_runtimes_source(strict_vault, home):
    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    runtimes.install("claude-code", strict_vault.root)
    entry = json.loads((home / ".claude.json").read_text())["mcpServers"]["memvault"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"],
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})

    async def go():
        async with Client(stdio_client(params)) as client:
            result = await client.call_tool("set_fact", {"key": "shop/psp", "text": "The PSP is Acme.",
                                                         "source": "user:root"})
            return result.structured_content

    written = asyncio.run(go())
    assert written["source"] == "agent:claude-code" and written["quarantined"] is True
    assert not strict_vault.facts.exists("shop/psp")


@pytest.mark.parametrize("runtime", ["claude-code", "codex", "gemini"])
def test_a_projects_memvault_package_never_runs_in_an_installed_hook_or_server(runtime, home, vault, tmp_path):
    """Runtimes run hooks and MCP servers in the project's folder, and the installed commands were
    ``python -m memvault...``, which puts that folder first on sys.path: any repository with a ``memvault/`` folder
    ran its code as the person on every session start in it. The commands start Python with -P."""
    import shlex
    import subprocess

    project = tmp_path / "someone-elses-repo"
    (project / "memvault" / "interfaces" / "agents").mkdir(parents=True)
    mark = tmp_path / "planted-ran"
    (project / "memvault" / "__init__.py").write_text(
        f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\n")
    rt = runtimes.RUNTIMES[runtime]
    for spec in rt.hooks:
        argv = shlex.split(runtimes.hook_command(rt.name, spec, vault.root))
        subprocess.run(argv + ["--help"], cwd=project, capture_output=True, timeout=60)
    entry = runtimes.server_entry(runtime, vault.root)
    subprocess.run([entry["command"], *entry["args"], "--help"], cwd=project, capture_output=True, timeout=60)
    assert not mark.exists()
