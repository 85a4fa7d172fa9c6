"""Test isolation: every test gets its own HOME, git config and environment; no test sees the real user's."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from memvault import Vault
from memvault.cli import cli

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("USER", "tester")
    # CLI recall would start a warm embedder daemon that outlives the test; test_daemon.py turns it back on.
    monkeypatch.setenv("MEMVAULT_NO_DAEMON", "1")
    for name in ("MEMVAULT_DIR", "MEMVAULT_SOURCE", "GIT_DIR", "GIT_WORK_TREE", "EDITOR", "VISUAL",
                 "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def vault(tmp_path) -> Vault:
    """A new vault that trusts agents too (the core tests write as agents); trust tests use strict_vault."""
    v = Vault.init(tmp_path / "vault")
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('trusted = ["user:*"]', 'trusted = ["user:*", "agent:*"]'))
    git(v.root, "commit", "-qm", "trust agents in tests", "--", "memvault.toml")
    return Vault.open(v.root)


@pytest.fixture
def strict_vault(tmp_path) -> Vault:
    """A new vault with the default trust: only user:* writes facts directly."""
    return Vault.init(tmp_path / "strict")


@pytest.fixture
def models(monkeypatch):
    """Model loading replaced by deterministic fakes (one per model name) that count loads and calls."""
    from fake_embedder import Models

    m = Models()
    monkeypatch.setattr(Vault, "embedder_factory", m)
    return m


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def invoke(runner, vault):
    """Run the CLI against the test vault: invoke("fact", "get", "x") -> click Result."""

    def run(*args: str, input: str | None = None, vault_path: Path | None = None):
        return runner.invoke(cli, ["--vault", str(vault_path or vault.root), *args], input=input)

    return run


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.rstrip("\n")
