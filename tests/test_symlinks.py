"""No memvault operation renames, moves, truncates or writes through a symlink, in the vault or in its state
directory, whoever put it there (a person, a plain ``git pull`` of someone else's commit). Each test plants the link an
attacker would commit and checks that what it points at is untouched, and that memvault says so in one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memvault import Vault
from memvault.interfaces import githooks
from conftest import git


@pytest.fixture
def victim(tmp_path):
    """A file outside the vault that a link points at; its bytes must never change, nor may it move."""
    path = tmp_path / "victim.txt"
    path.write_text("precious host file\n")
    return path


def unchanged(victim) -> bool:
    return victim.exists() and victim.read_text() == "precious host file\n" and not victim.is_symlink()


def cli(root, *args, env=None):
    return subprocess.run([sys.executable, "-m", "memvault", "--vault", str(root), *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})})


def test_a_damaged_index_link_is_replaced_never_followed(vault, victim):
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    vault.reindex()
    link = vault.state_dir / "index.db"
    link.unlink()
    link.symlink_to(victim)  # absolute: the old code renamed what it pointed at as "damaged"
    r = cli(vault.root, "recall", "primary database port", "--mode", "keyword", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hits"][0]["id"] == "db/primary"
    assert unchanged(victim) and not list(victim.parent.glob("victim.txt.corrupt-*"))
    assert "index.db" in r.stderr  # said, not silent


def test_a_generation_that_is_a_symlink_is_never_opened_or_moved(vault, tmp_path):
    import sqlite3

    other = tmp_path / "another-app.db"  # a database of another program: memvault must not migrate it
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE accounts(name TEXT)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    vault.reindex()
    target = vault.index.current_target()
    vault.index.close()
    target.unlink()
    target.symlink_to(other)
    r = cli(vault.root, "recall", "primary database port", "--mode", "keyword", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hits"][0]["id"] == "db/primary"
    assert other.read_bytes() == before and not list(tmp_path.glob("another-app.db?*"))


def test_a_symlinked_state_database_is_not_written_through(vault, victim):
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    state = vault.state_dir / "state.db"
    state.unlink(missing_ok=True)
    state.symlink_to(victim)
    r = cli(vault.root, "fact", "get", "db/primary")  # a use: written to the state database
    assert r.returncode == 0, r.stderr
    assert unchanged(victim) and "state.db" in r.stderr


def test_locks_are_never_created_through_a_symlink(vault, tmp_path):
    elsewhere = tmp_path / "created-elsewhere"
    locks = vault.state_dir / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "write.lock").unlink(missing_ok=True)
    (locks / "write.lock").symlink_to(elsewhere)
    r = cli(vault.root, "fact", "set", "db/x", "Some text.")
    assert r.returncode == 1 and "write.lock" in r.stderr and "symlink" in r.stderr
    assert not elsewhere.exists() and not (vault.root / "facts/db/x.md").exists()


def test_the_hook_worker_never_appends_through_a_symlinked_log(vault, victim, tmp_path):
    state = vault.state_dir
    (state / githooks.REINDEX_LOG).symlink_to(victim)
    flag_target = tmp_path / "flag-elsewhere"
    (state / githooks.REINDEX_FLAG).symlink_to(flag_target)
    r = subprocess.run([sys.executable, "-m", "memvault.githooks", "post-merge", "--vault", str(vault.root)],
                       capture_output=True, text=True)
    assert "symlink" in r.stderr and "hook-reindex" in r.stderr  # git shows it to the person
    assert unchanged(victim) and not flag_target.exists()


def test_an_episodes_folder_symlink_is_not_followed_for_writes(vault, tmp_path):
    outside = tmp_path / "outside-episodes"
    outside.mkdir()
    episodes = vault.root / "episodes"
    for child in episodes.iterdir():
        child.unlink()
    episodes.rmdir()
    episodes.symlink_to(outside)
    r = cli(vault.root, "episode", "add", "Deployed v2.", "--source", "agent:x")
    assert r.returncode == 1 and "episodes" in r.stderr and "symlink" in r.stderr
    assert list(outside.iterdir()) == []


def test_a_fact_folder_symlink_inside_the_vault_is_not_written_through(vault):
    (vault.root / "facts/real").mkdir(parents=True)
    (vault.root / "facts/alias").symlink_to(vault.root / "facts/real")
    r = cli(vault.root, "fact", "set", "alias/x", "Some text.")
    assert r.returncode == 1 and "symlink" in r.stderr
    assert list((vault.root / "facts/real").iterdir()) == []


def test_a_symlinked_memvault_folder_is_ignored_and_named_once(vault, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (vault.root / ".memvault").symlink_to(elsewhere)
    r = cli(vault.root, "fact", "set", "db/x", "Some text.")
    assert r.returncode == 0 and ".memvault" in r.stderr and "symlink" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli(vault.root, "recall", "x", "--mode", "keyword")
    assert r.returncode == 0 and ".memvault" not in r.stderr, r.stderr  # said once
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_state_directory_is_refused_with_one_line(vault, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    vault.state_dir.rename(tmp_path / "old-state")
    vault.state_dir.symlink_to(elsewhere)
    for args in (("fact", "set", "db/x", "Some text."), ("recall", "x", "--mode", "keyword")):
        r = cli(vault.root, *args)
        assert r.returncode == 1 and str(vault.state_dir) in r.stderr and "symlink" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert list(elsewhere.iterdir()) == []


def test_the_ignore_rule_covers_a_memvault_symlink_and_old_vaults_are_fixed_by_sync(tmp_path):
    v = Vault.init(tmp_path / "new")
    (tmp_path / "new/.memvault").symlink_to(tmp_path)
    assert git(v.root, "check-ignore", ".memvault") == ".memvault"  # a file or a link, not only a folder
    # an older vault's rule matched only a folder: sync fixes it (and commits the fix)
    old = Vault.init(tmp_path / "old")
    ignore = old.root / ".gitignore"
    ignore.write_text(ignore.read_text().replace(".memvault\n", ".memvault/\n"))
    git(old.root, "commit", "-qm", "old rule", "--", ".gitignore")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(old.root, "remote", "add", "origin", str(remote))
    result = Vault.open(old.root).sync(source="user:admin")
    assert result.pushed and any(".gitignore" in w for w in result.warnings)
    assert ".memvault\n" in git(remote, "show", "HEAD:.gitignore") + "\n"
    assert ".memvault/" not in git(remote, "show", "HEAD:.gitignore")


def _two_hosts(tmp_path):
    """Host a, which pushed a vault with one fact to a bare remote, and host b, a clone of it."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    a = Vault.init(tmp_path / "a")
    git(a.root, "remote", "add", "origin", str(remote))
    a.facts.set("db/primary", "The primary database listens on port 5432.")
    a.sync(source="user:admin")
    git(tmp_path, "clone", "-q", str(remote), "b")
    b = Vault.open(tmp_path / "b")
    return a, b


def test_sync_refuses_a_remote_that_replaces_memvault_with_a_link(tmp_path, monkeypatch):
    a, b = _two_hosts(tmp_path)
    b.facts.set("db/replica", "The replica listens on port 5433.")  # b has an index and state now
    b.episodes.append("Set the replica.", source="user:admin")  # and its record of episode folders
    b.reindex()
    b.recall("replica", mode="keyword")
    before = sorted(p.name for p in b.state_dir.iterdir())
    # someone commits a .memvault link with plain git (the old rule did not ignore a link) and pushes
    (a.root / ".memvault").symlink_to("/etc")
    git(a.root, "add", "-f", ".memvault")
    git(a.root, "commit", "-qm", "innocent")
    git(a.root, "push", "-q", "origin", "HEAD")
    with pytest.raises(Exception, match=r"\.memvault"):
        b.sync(source="user:admin")
    assert (b.state_dir).is_dir() and not b.state_dir.is_symlink()
    assert sorted(p.name for p in b.state_dir.iterdir()) == before


@pytest.mark.parametrize("place", ["facts", "procedures", "memvault.toml", ".gitignore"])
def test_sync_refuses_a_remote_that_makes_a_vault_folder_or_file_a_link(tmp_path, place):
    """A teammate's commit of facts -> ~/private made this host's own files facts (fact get printed them, reindex
    indexed them, recall crashed); memvault.toml -> /dev/zero read until memory ran out; .gitignore -> /dev/zero
    ended every later sync with an internal error."""
    a, b = _two_hosts(tmp_path)
    private = tmp_path / "home" / "private"
    (private / "notes").mkdir(parents=True)
    (private / "notes" / "hr.md").write_text("---\nsource: user:alice\n---\nsalary canary-42\n")
    git(a.root, "rm", "-rq", "--cached", "--ignore-unmatch", place)
    target = a.root / place
    if target.is_dir():
        import shutil

        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    target.symlink_to(private if place in ("facts", "procedures") else "/dev/zero")
    git(a.root, "add", place)
    git(a.root, "commit", "-qm", "move", "--no-verify")
    git(a.root, "push", "-q", "origin", "HEAD")
    with pytest.raises(Exception, match="a symlink"):
        b.sync(source="user:admin")
    assert not (b.root / place).is_symlink()


def test_a_vault_folder_that_is_a_link_is_not_read(strict_vault, tmp_path):
    """However it got there (a pull with plain git): no fact is read through it, by listing, key or index."""
    private = tmp_path / "private"
    (private / "notes").mkdir(parents=True)
    (private / "notes" / "hr.md").write_text("---\nsource: user:alice\n---\nsalary canary-42\n")
    import shutil

    shutil.rmtree(strict_vault.root / "facts")
    (strict_vault.root / "facts").symlink_to(private)
    problems: list = []
    assert strict_vault.facts.list(problems=problems) == [] and problems
    with pytest.raises(Exception):
        strict_vault.facts.get("notes/hr")
    strict_vault.reindex()
    hits = strict_vault.recall("salary canary", mode="keyword", record_access=False)
    assert "canary" not in " ".join(h.text for h in hits)


def test_a_settings_file_that_is_a_link_or_endless_is_one_line_naming_it(strict_vault):
    """memvault.toml -> /dev/zero (pulled with plain git) was read until memory ran out, in every command and in
    the pre-commit hook of every commit."""
    from memvault.rules.errors import ConfigError

    toml = strict_vault.root / "memvault.toml"
    toml.unlink()
    toml.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="memvault.toml"):
        Vault.open(strict_vault.root)
