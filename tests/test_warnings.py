"""Every warning reaches the person or the agent: each operation returns its warnings, and every interface shows
them — the CLI on stderr, the MCP server in the tool's result (through the official MCP client), the git hooks in
their output. The same damage is planted before each operation on both interfaces and the warnings compared."""
from __future__ import annotations

import asyncio
import os
import re
import shutil

import pytest

from memvault import Vault
from memvault.interfaces.cli import Context, cli
from conftest import git

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from memvault.interfaces.mcp import build_server  # noqa: E402

SOURCE = "user:ops"  # trusted, so writes are written (the harness names it: MCP --source)


def normalise(lines, root):
    """The vault's folder, times and commit ids differ between the two runs; what is said does not."""
    return sorted(re.sub(r"corrupt-\d+", "corrupt-N", re.sub(r"\b[0-9a-f]{12}\b", "<commit>", line))
                  .replace(str(root), "<vault>") for line in lines)


def bad_index_link(v: Vault) -> None:
    link = v.state_dir / "index.db"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to("../facts/db/primary.md")


def bad_state(v: Vault) -> None:
    (v.state_dir / "state.db").write_bytes(b"not a database at all" * 100)
    for suffix in ("-wal", "-shm"):
        (v.state_dir / f"state.db{suffix}").unlink(missing_ok=True)


def hand_edit(v: Vault) -> None:
    path = v.root / "facts/db/primary.md"
    path.write_text(path.read_text().replace("port 5432.", "port 5432 (checked by hand)."))


# (damage, CLI arguments, MCP tool and arguments)
OPERATIONS = [
    (bad_index_link, ("episode", "add", "Rotated the logs.", "--source", SOURCE),
     ("log_episode", {"text": "Rotated the logs."})),
    (bad_index_link, ("recall", "primary database", "--mode", "keyword", "--json"),
     ("recall", {"query": "primary database"})),
    (bad_state, ("fact", "get", "db/primary"), ("get_fact", {"key": "db/primary"})),
    (None, ("used", "fact:db/primary", "fact:no/such", "procedure:no/such", "--source", SOURCE),
     ("used", {"refs": ["fact:db/primary", "fact:no/such", "procedure:no/such"]})),
    (hand_edit, ("fact", "set", "db/primary", "The primary database listens on port 6432.", "--source", SOURCE),
     ("set_fact", {"key": "db/primary", "text": "The primary database listens on port 6432."})),
]


@pytest.fixture
def twins(tmp_path, models):
    """Two identical vaults: one driven through the CLI, one through MCP."""
    v = Vault.init(tmp_path / "cli", embedder_factory=models)
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('model = "BAAI/bge-small-en-v1.5"', 'model = "fake-hash"'))
    git(v.root, "commit", "-qm", "fake model", "--", "memvault.toml")
    v = Vault.open(v.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432.", source=SOURCE)
    v.reindex()
    shutil.copytree(v.root, tmp_path / "mcp", symlinks=True)
    return Vault.open(tmp_path / "cli", embedder_factory=models), tmp_path / "mcp"


@pytest.mark.parametrize("damage, args, call", OPERATIONS, ids=[op[2][0] for op in OPERATIONS])
def test_the_cli_and_mcp_show_the_same_warnings(twins, models, runner, damage, args, call):
    cli_vault, mcp_root = twins
    if damage:
        damage(cli_vault)
    r = runner.invoke(cli, ["--vault", str(cli_vault.root), *args], obj=Context(embedder_factory=models))
    assert r.exit_code == 0, r.output
    from_cli = [line.removeprefix("memvault: warning: ") for line in r.stderr.splitlines()]

    mcp_vault = Vault.open(mcp_root, embedder_factory=models)
    if damage:
        damage(mcp_vault)
    mcp_vault = Vault.open(mcp_root, embedder_factory=models)

    async def go():
        async with Client(build_server(mcp_vault, source=SOURCE, warm=False)) as client:
            return await client.call_tool(call[0], call[1])

    result = asyncio.run(go())
    assert not result.is_error, result.content
    from_mcp = result.structured_content["warnings"]
    assert from_mcp, "the damage must produce a warning, else the comparison proves nothing"
    assert normalise(from_cli, cli_vault.root) == normalise(from_mcp, mcp_root)


def test_every_write_returns_the_index_warnings(vault, tmp_path):
    """Writes that passed [] to the index step before: delete, accept, verify, procedures, dedup, expire."""
    vault.facts.set("db/a", "Alpha.")
    vault.facts.set("db/b", "Beta.")
    vault.reindex()
    script = tmp_path / "x.sh"
    script.write_text("#!/bin/sh\necho ok\n")
    for op in (lambda: vault.facts.delete("db/a").warnings,
               lambda: vault.verify("db/b").warnings,
               lambda: vault.procedures.add("ops/x", script).warnings,
               lambda: vault.purge("agent:nobody-but-test").warnings if vault.facts.set(
                   "db/c", "Gamma.", source="agent:nobody-but-test") else []):
        bad_index_link(vault)
        assert any("index.db" in w and "never followed" in w for w in op())


def test_purge_reports_a_failed_scrub_as_an_error(vault, monkeypatch):
    from memvault.index import Index
    from memvault.rules.errors import SearchIndexError

    vault.episodes.append("Scraped claim.", source="web:evil.example")
    vault.reindex()

    def broken(self):
        raise SearchIndexError("disk I/O error")

    monkeypatch.setattr(Index, "scrub", broken)
    with pytest.raises(Exception, match="scrub") as info:
        vault.purge("web:evil.example")
    assert "disk I/O error" in str(info.value) and "gone from the files" in str(info.value)
    assert vault.episodes.list() == []  # the files are purged; what failed is said


def test_walks_report_unreadable_folders(vault, monkeypatch):
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    vault.facts.set("web/lb", "The load balancer is lb1.")
    vault.episodes.append("Rotated.", source="user:a")
    real = os.scandir
    blocked = {str(vault.root / "facts" / "web"), str(vault.episodes.dir)}

    def scandir(path="."):
        if os.fspath(path) in blocked:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    problems = []
    assert [f.key for f in vault.facts.list(problems=problems)] == ["db/primary"]
    assert any("facts/web" in str(p) and "cannot read this folder" in str(p) for p in problems)
    problems = []
    assert vault.episodes.list(problems=problems) == []
    assert any("episodes" in str(p) and "cannot read this folder" in str(p) for p in problems)
    report = vault.reindex(full=True)
    assert any("facts/web" in p and "cannot read this folder" in p for p in report.problems)
