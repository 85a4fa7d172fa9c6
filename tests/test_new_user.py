"""A new user's first steps: the branch README names, a model chosen at init, a local model directory that never
reaches the shared memvault.toml, and one line naming a model that loads when the default cannot."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import git
from memvault import Vault
from memvault.rules.errors import ConfigError


def memvault(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "memvault", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_init_starts_on_main_when_git_configures_no_branch(tmp_path, isolated_env):
    bare = isolated_env / "bare.gitconfig"
    bare.write_text("[user]\n\tname = T\n\temail = t@example.com\n")  # no init.defaultBranch: git says master
    result = memvault("init", str(tmp_path / "v"), cwd=tmp_path, env={"GIT_CONFIG_GLOBAL": str(bare)})
    assert result.returncode == 0, result.stderr
    assert git(tmp_path / "v", "branch", "--show-current") == "main"


def test_init_keeps_the_branch_the_user_configured(tmp_path, isolated_env):
    custom = isolated_env / "trunk.gitconfig"
    custom.write_text("[user]\n\tname = T\n\temail = t@example.com\n[init]\n\tdefaultBranch = trunk\n")
    assert memvault("init", str(tmp_path / "v"), cwd=tmp_path, env={"GIT_CONFIG_GLOBAL": str(custom)}).returncode == 0
    assert git(tmp_path / "v", "branch", "--show-current") == "trunk"


def test_init_with_a_model_name_writes_it_to_memvault_toml(tmp_path):
    result = memvault("init", str(tmp_path / "v"), "--model", "all-MiniLM-L6-v2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 'model = "all-MiniLM-L6-v2"' in (tmp_path / "v" / "memvault.toml").read_text()
    assert Vault.open(tmp_path / "v").config.model == "all-MiniLM-L6-v2"
    assert "note" not in result.stderr  # the packaged model is on this machine: nothing to say


def test_init_names_the_packaged_model_when_the_default_is_not_here(tmp_path):
    result = memvault("init", str(tmp_path / "v"), cwd=tmp_path)
    assert result.returncode == 0
    note = [line for line in result.stderr.splitlines() if "note" in line]
    assert len(note) == 1 and "bge-small" in note[0] and "reindex --model all-MiniLM-L6-v2" in note[0]


def test_init_with_a_model_directory_keeps_it_on_this_host(tmp_path):
    model_dir = tmp_path / "models" / "mine"
    model_dir.mkdir(parents=True)
    v = Vault.init(tmp_path / "v", model=str(model_dir))
    assert v.config.model == str(model_dir.resolve())
    assert str(model_dir) not in (v.root / "memvault.toml").read_text()
    assert git(v.root, "status", "--porcelain") == ""  # nothing of it to commit


def test_reindex_with_a_local_directory_never_commits_this_hosts_path(vault, models, tmp_path, invoke):
    from fake_embedder import set_model

    set_model(vault.root, "fake-hash")
    git(vault.root, "commit", "-qam", "fake model")
    vault = Vault.open(vault.root, embedder_factory=models)
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    toml_before = (vault.root / "memvault.toml").read_text()
    head_before = git(vault.root, "rev-parse", "HEAD")
    model_dir = tmp_path / "local-model"
    model_dir.mkdir()
    vault.reindex(model=str(model_dir))
    assert (vault.root / "memvault.toml").read_text() == toml_before
    assert git(vault.root, "rev-parse", "HEAD") == head_before and git(vault.root, "status", "--porcelain") == ""
    again = Vault.open(vault.root, embedder_factory=models)
    assert again.config.model == str(model_dir.resolve())
    assert again.index.identity().name == str(model_dir.resolve())
    assert again.stats()["model_set_by"].startswith(str(again.state_dir / "local.toml"))
    # naming a model for the whole vault drops this host's override, which would otherwise still win
    again.reindex(model="fake-other")
    final = Vault.open(vault.root, embedder_factory=models)
    assert final.config.model == "fake-other" and 'model = "fake-other"' in (vault.root / "memvault.toml").read_text()
    assert "model" not in (final.state_dir / "local.toml").read_text().split("]", 1)[-1]


def test_a_team_refuses_a_directory_of_one_host(vault, tmp_path):
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('backend = "sqlite"', 'backend = "postgres"'))
    model_dir = tmp_path / "local-model"
    model_dir.mkdir()
    with pytest.raises(ConfigError, match="same model on every host"):
        Vault.open(vault.root).reindex(model=str(model_dir))
    assert not (vault.state_dir / "local.toml").exists()


def test_a_memvault_symlink_never_chooses_this_hosts_model(vault, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "local.toml").write_text('[embedding]\nmodel = "/tmp/attacker-model"\n')
    (vault.root / ".memvault").symlink_to(elsewhere)
    from memvault.rules import config as config_mod

    assert config_mod.load(vault.root / "memvault.toml").model != "/tmp/attacker-model"
    opened = Vault.open(vault.root)  # the vault opens; the link is named, never used
    assert opened.config.model != "/tmp/attacker-model" and any(".memvault" in n for n in opened.notices)
    assert [p.name for p in elsewhere.iterdir()] == ["local.toml"]


def test_local_settings_hold_only_what_may_differ_between_hosts(vault):
    (vault.state_dir / "local.toml").write_text('[trust]\ntrusted = ["*"]\n')
    with pytest.raises(ConfigError, match=r"\[trust\] cannot be set for one host"):
        Vault.open(vault.root)
