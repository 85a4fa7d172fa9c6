from __future__ import annotations

import pytest

from memvault import Vault
from memvault.rules.errors import ConfigError, VaultNotFound
from conftest import git


def test_init_creates_layout_gitignore_and_repo(tmp_path):
    v = Vault.init(tmp_path / "v")
    for name in ("facts", "procedures", "episodes"):
        assert (v.root / name).is_dir()
    assert v.state_dir == v.root / ".git" / "memvault" / "root" and not (v.root / ".memvault").exists()
    ignore = (v.root / ".gitignore").read_text()
    assert ".memvault\n" in ignore and "episodes/" in ignore
    assert "track_in_git = false" in (v.root / "memvault.toml").read_text()
    assert git(v.root, "rev-parse", "--show-toplevel") == str(v.root)
    assert git(v.root, "ls-files").split() == [".gitignore", "memvault.toml"]
    assert v.config.track_episodes is False


def test_init_is_idempotent_and_never_overwrites(tmp_path):
    v = Vault.init(tmp_path / "v")
    (v.root / "memvault.toml").write_text("[episodes]\ntrack_in_git = true\n")
    Vault.init(v.root)
    assert (v.root / "memvault.toml").read_text() == "[episodes]\ntrack_in_git = true\n"
    assert Vault.open(v.root).config.track_episodes is True


def test_track_episodes_switch(tmp_path):
    v = Vault.init(tmp_path / "v", track_episodes=True)
    assert "episodes/" not in (v.root / ".gitignore").read_text()
    assert v.config.track_episodes is True


def test_vault_inside_another_repository_commits_only_its_own_paths(tmp_path):
    repo = tmp_path / "infra"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "app.conf").write_text("a=1\n")
    (repo / "staged.txt").write_text("s\n")
    git(repo, "add", "app.conf", "staged.txt")
    git(repo, "commit", "-qm", "base")
    (repo / "app.conf").write_text("a=2\n")           # unstaged change of the user
    (repo / "staged.txt").write_text("staged change\n")
    git(repo, "add", "staged.txt")                     # staged change of the user
    (repo / "untracked.txt").write_text("u\n")
    v = Vault.init(repo / "memory")
    assert not (repo / "memory/.git").exists()
    v.facts.set("db/primary", "listens on 5432", source="user:admin")
    for rev in ("HEAD", "HEAD~1"):
        files = git(repo, "show", "--name-only", "--format=", rev).split()
        assert all(f.startswith("memory/") for f in files), files
    status = git(repo, "status", "--porcelain").splitlines()
    assert " M app.conf" in status and "M  staged.txt" in status and "?? untracked.txt" in status
    assert git(repo, "show", "HEAD~2:app.conf") == "a=1"


def test_discovery_order(tmp_path, monkeypatch):
    a = Vault.init(tmp_path / "a")
    b = Vault.init(tmp_path / "b")
    deep = a.root / "facts" / "x"
    deep.mkdir()
    monkeypatch.chdir(deep)
    assert Vault.open().root == a.root
    monkeypatch.setenv("MEMVAULT_DIR", str(b.root))
    assert Vault.open().root == b.root
    assert Vault.open(a.root).root == a.root
    monkeypatch.delenv("MEMVAULT_DIR")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VaultNotFound, match="memvault init"):
        Vault.open()
    with pytest.raises(VaultNotFound):
        Vault.open(tmp_path / "nothing")


def test_bad_config_names_the_file(tmp_path):
    v = Vault.init(tmp_path / "v")
    (v.root / "memvault.toml").write_text("[episodes\n")
    with pytest.raises(ConfigError, match="memvault.toml"):
        Vault.open(v.root)
    (v.root / "memvault.toml").write_text("[episodes]\ntrack_in_git = 'yes'\n")
    with pytest.raises(ConfigError, match="track_in_git"):
        Vault.open(v.root)


def test_default_source(vault, monkeypatch):
    assert vault.default_source() == "user:tester"
    monkeypatch.setenv("MEMVAULT_SOURCE", "agent:cron")
    assert vault.facts.set("a/b", "x").source == "agent:cron"
