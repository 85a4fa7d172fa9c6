"""The session-start block against what a teammate's commit or a repository can put in its way: a runbook link out
of the vault, a branch or folder name made to push the memories out of the hook's cap, a repository named with a
common word, a secret where a time should be, a small budget. Each was reproduced against the hook first."""
from __future__ import annotations

import pytest

from agent_fixtures import call_hook, payload
from conftest import git
from test_agent_context import context_of, memory, project  # noqa: F401 - fixtures


def start(monkeypatch, vault, cwd, runtime: str = "claude-code") -> str:
    return context_of(call_hook(monkeypatch, ["session-start", "--runtime", runtime, "--vault", str(vault.root)],
                                payload(runtime, "SessionStart", cwd=cwd)))


def test_a_committed_runbook_link_out_of_the_vault_does_not_empty_the_block(memory, project, monkeypatch, tmp_path):
    private = tmp_path / "private.md"
    private.write_text("HOST SECRET hunter2\n")
    (memory.root / "procedures" / "shopfront" / "rollback.sh").symlink_to(private)
    git(memory.root, "add", "-A")
    git(memory.root, "commit", "-qm", "a teammate's link")
    text = start(monkeypatch, memory, project)
    assert "idempotency key" in text and "shopfront/deploy-staging" in text
    assert "hunter2" not in text
