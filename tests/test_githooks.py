"""Git hooks: pre-commit checks what is staged, post-* hooks reindex in the background, foreign hooks survive."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memvault import Vault
from memvault.interfaces import githooks
from memvault.interfaces.githooks import CHAINED_SUFFIX, HOOKS, HookConflict, install, uninstall
from conftest import git


def commit(root: Path, *paths: str, message: str = "test"):
    """git add + git commit as a person would (hooks run); returns the CompletedProcess."""
    subprocess.run(["git", "add", "--", *paths], cwd=root, check=True, capture_output=True)
    return subprocess.run(["git", "commit", "-m", message], cwd=root, capture_output=True, text=True)


def write(root: Path, rel: str, text: str) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return rel


@pytest.fixture
def hooked(vault):
    install(vault.root)
    return vault


def test_install_writes_marked_scripts_with_this_interpreter(hooked):
    directory = githooks.hooks_dir(hooked.root)
    assert directory == hooked.root / ".git" / "hooks"
    for name in HOOKS:
        text = (directory / name).read_text()
        assert text.startswith("#!/bin/sh\n# memvault hook") and sys.executable in text and " --vault . " in text
        assert str(hooked.root) not in text  # the work tree may move; the hooks follow it
        assert os.access(directory / name, os.X_OK)
    again = install(hooked.root)  # idempotent: nothing chained, nothing duplicated
    assert {a.action for a in again} == {"updated"}
    assert not list(directory.glob(f"*{CHAINED_SUFFIX}"))


def test_pre_commit_refuses_a_broken_staged_fact_and_allows_a_good_one(hooked):
    root = hooked.root
    rel = write(root, "facts/db/x.md", "---\ncategory: database\nimportance: high\n---\nThe replica lags.\n")
    result = commit(root, rel)
    assert result.returncode != 0
    assert "memvault pre-commit: facts/db/x.md:3: importance: must be a number" in result.stderr
    assert "commit refused" in result.stderr
    # Fix the file: the commit goes through.
    write(root, rel, "---\ncategory: database\nimportance: 0.7\n---\nThe replica lags.\n")
    assert commit(root, rel).returncode == 0
    assert git(root, "log", "-1", "--format=%s") == "test"


def test_pre_commit_checks_the_staged_content_not_the_working_tree(hooked):
    root = hooked.root
    rel = write(root, "facts/web/a.md", "---\nimportance: high\n---\nBroken when staged.\n")
    git(root, "add", rel)
    write(root, rel, "Fixed in the working tree only.\n")  # not staged
    result = subprocess.run(["git", "commit", "-m", "x"], cwd=root, capture_output=True, text=True)
    assert result.returncode != 0 and "facts/web/a.md:2: importance" in result.stderr


def test_pre_commit_refuses_bad_keys_names_and_secrets(hooked):
    root = hooked.root
    rels = [
        write(root, "facts/Bad Key.md", "Upper case and a space.\n"),
        write(root, "procedures/ops/Deploy.sh", "#!/bin/sh\necho deploy\n"),
        write(root, "facts/aws.md", "The deploy key is AKIAIOSFODNN7EXAMPLE for the bucket.\n"),
        write(root, "procedures/db/dump.sh", "#!/bin/sh\n# description: dump\nPGPASSWORD=hunter2secret pg_dump\n"),
    ]
    result = commit(root, *rels)
    assert result.returncode != 0
    err = result.stderr
    assert "facts/Bad Key.md: not a valid fact key" in err
    assert "procedures/ops/Deploy.sh: not a valid procedure name" in err
    assert "facts/aws.md:1: looks like a secret: AWS access key id" in err
    assert "procedures/db/dump.sh:3: looks like a secret" in err
    assert "AKIAIOSFODNN7EXAMPLE" not in err and "hunter2secret" not in err  # never print the secret


@pytest.mark.parametrize("data, words", [
    (b"[recall]\ncandidates = 10\0\n", ["memvault.toml", "invalid TOML"]),
    (b"[recall]\n# caf\xe9\ncandidates = 10\n", ["memvault.toml", "not UTF-8"]),
    (b"[limits]\nfact_bytes = 99999999999999999999\n", ["memvault.toml", "fact_bytes", "at most"]),
    (b"# " + b"x" * (1 << 20) + b"\n", ["memvault.toml", "bytes"]),
])
def test_pre_commit_refuses_a_staged_memvault_toml_every_command_would_refuse(hooked, data, words):
    """A NUL byte made the staged memvault.toml "binary" and invalid UTF-8 was read with replacement characters, so
    the hook let through a file on which every teammate's every command then fails."""
    (hooked.root / "memvault.toml").write_bytes(data)
    result = commit(hooked.root, "memvault.toml")
    assert result.returncode != 0, result.stderr
    assert all(w in result.stderr for w in words), result.stderr


def test_memvault_own_commits_skip_the_check(hooked):
    # --allow-secret is an explicit, reviewed override: the hook must not undo it.
    fact = hooked.facts.set("aws/key", "Deploy key AKIAIOSFODNN7EXAMPLE", source="agent:deployer", allow_secret=True)
    assert git(hooked.root, "log", "-1", "--format=%s").startswith("fact set aws/key")
    assert fact.path.is_file()


def test_existing_hook_is_chained_and_still_blocks_and_uninstall_restores_it(vault):
    directory = githooks.hooks_dir(vault.root)
    directory.mkdir(parents=True, exist_ok=True)
    marker = vault.root / "ran-original-hook"
    original = f"#!/bin/sh\n# the team's own check\necho \"$@\" >> '{marker}'\nexit ${{ORIGINAL_EXIT:-0}}\n"
    hook = directory / "pre-commit"
    hook.write_text(original)
    hook.chmod(0o750)

    actions = install(vault.root)
    assert any(a.action == "chained" and a.hook == "pre-commit" for a in actions)
    assert (directory / ("pre-commit" + CHAINED_SUFFIX)).read_text() == original
    install(vault.root)  # idempotent: the chained hook is not chained again
    assert (directory / ("pre-commit" + CHAINED_SUFFIX)).read_text() == original

    rel = write(vault.root, "facts/ok.md", "A good fact.\n")
    assert commit(vault.root, rel).returncode == 0
    assert marker.exists()  # the original hook ran

    rel = write(vault.root, "facts/ok2.md", "Another good fact.\n")
    git(vault.root, "add", rel)
    failing = subprocess.run(["git", "commit", "-m", "x"], cwd=vault.root, capture_output=True, text=True,
                             env={**os.environ, "ORIGINAL_EXIT": "3"})
    assert failing.returncode != 0  # the original hook's failure still refuses the commit

    uninstall(vault.root)
    assert hook.read_bytes() == original.encode() and (hook.stat().st_mode & 0o777) == 0o750
    for name in HOOKS:
        path = directory / name
        assert not (path.exists() and githooks.is_ours(path))
        assert not (directory / (name + CHAINED_SUFFIX)).exists()


def test_core_hooks_path_is_respected_and_conflicts_are_refused(vault):
    git(vault.root, "config", "core.hooksPath", "team-hooks")
    directory = githooks.hooks_dir(vault.root)
    assert directory == vault.root / "team-hooks"
    directory.mkdir()
    (directory / "post-commit").write_text("#!/bin/sh\nexit 0\n")
    (directory / ("post-commit" + CHAINED_SUFFIX)).write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(HookConflict, match="post-commit"):
        install(vault.root)
    assert not (directory / "pre-commit").exists()  # nothing half-installed


def test_post_commit_reindexes_in_the_background_without_blocking_git(hooked, monkeypatch):
    # A model that cannot load offline: the background reindex builds a keyword-only index.
    toml = hooked.root / "memvault.toml"
    assert 'model = "BAAI/bge-small-en-v1.5"' in toml.read_text()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(hooked.root.parent / "hf-home"))  # an empty cache: nothing to load
    index = hooked.state_dir / "index.db"
    assert not index.exists()
    rel = write(hooked.root, "facts/db/primary.md", "The primary listens on 10.8.0.4 port 5432.\n")
    git(hooked.root, "add", rel)
    # Hold the lock an index build needs: the background reindex cannot finish while we hold it, so a commit that
    # returns proves git does not wait for the reindex (no wall-clock guess involved).
    from memvault.rules.fsutil import locked

    with locked(hooked.state_dir / "locks" / "rebuild.lock"):
        result = subprocess.run(["git", "commit", "-m", "primary"], cwd=hooked.root, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        assert not index.exists()
    deadline = time.monotonic() + 60
    log = hooked.state_dir / "hook-reindex.log"
    while not log.exists() or "reindex:" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.1)
    reader = Vault.open(hooked.root)
    rows = reader.index.connection().execute("SELECT item_id FROM docs WHERE kind = 'fact'").fetchall()
    reader.index.close()
    assert ("db/primary",) in rows


def test_no_background_reindex_while_a_watcher_runs(vault, monkeypatch):
    from memvault.interfaces.watch import Watcher

    started = []
    monkeypatch.setattr(githooks.subprocess, "Popen", lambda *a, **k: started.append(a))
    with Watcher(vault)._claim():
        assert githooks.start_reindex(vault.root) is None
    assert not started
    githooks.start_reindex(vault.root)
    assert started and started[0][0][-3:] == ["reindex-worker", "--vault", str(vault.root)]


def test_a_vault_in_a_subdirectory_checks_only_its_own_files(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    inner = Vault.init(repo / "infra" / "memory")
    install(inner.root)
    assert githooks.hooks_dir(inner.root) == repo / ".git" / "hooks"
    outside = write(repo, "facts/not-ours.md", "---\nimportance: high\n---\nNot a vault file.\n")
    assert commit(repo, outside).returncode == 0
    broken = write(repo, "infra/memory/facts/db.md", "---\nimportance: high\n---\nA vault file.\n")
    result = commit(repo, broken)
    assert result.returncode != 0 and "infra/memory/facts/db.md:2: importance" in result.stderr


@pytest.mark.model
def test_post_commit_reindex_uses_the_warm_daemon(tmp_path, monkeypatch):
    from memvault.models import daemon

    monkeypatch.delenv("MEMVAULT_NO_DAEMON")
    v = Vault.init(tmp_path / "v")
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('model = "BAAI/bge-small-en-v1.5"', 'model = "all-MiniLM-L6-v2"'))
    git(v.root, "commit", "-qm", "model", "--", "memvault.toml")
    try:
        Vault.open(v.root).reindex()  # builds the index and starts the daemon
        install(v.root)
        rel = write(v.root, "facts/db/primary.md", "The primary listens on 10.8.0.4 port 5432.\n")
        assert commit(v.root, rel).returncode == 0
        log = v.state_dir / "hook-reindex.log"
        deadline = time.monotonic() + 60
        while not log.exists() or "reindex:" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
            time.sleep(0.1)
        line = [x for x in log.read_text().splitlines() if "reindex:" in x][-1]
        assert "1 chunks embedded, 0 pending" in line and "model from daemon" in line, line
    finally:
        daemon.stop()


def test_hooks_are_not_written_into_a_hooks_folder_the_team_commits(tmp_path):
    """With core.hooksPath = .githooks (the team's committed hooks), install wrote scripts naming this host's Python
    and vault there; one 'git commit -a' shared them: a teammate's pre-commit checked another vault, or failed."""
    from memvault import Vault
    from memvault.interfaces.githooks import install
    from memvault.rules.errors import HookConflict

    v = Vault.init(tmp_path / "v")
    (v.root / ".githooks").mkdir()
    (v.root / ".githooks" / "commit-msg").write_text("#!/bin/sh\nexit 0\n")
    git(v.root, "add", ".githooks")
    git(v.root, "commit", "-qm", "the team's hooks")
    git(v.root, "config", "core.hooksPath", ".githooks")
    with pytest.raises(HookConflict, match="a folder the repository tracks"):
        install(v.root)
    assert [p.name for p in (v.root / ".githooks").iterdir()] == ["commit-msg"]


def test_hooks_install_and_uninstall_from_the_cli_name_each_hook(vault, invoke):
    """`memvault hooks install` (live.md) ended in "internal error: TypeError ... HookAction" after installing:
    each action it printed was an object, not a line."""
    installed = invoke("hooks", "install")
    assert installed.exit_code == 0, installed.output
    for name in HOOKS:
        assert f"{name}: installed (" in installed.output
    removed = invoke("hooks", "uninstall")
    assert removed.exit_code == 0, removed.output
    assert all(f"{name}: removed (" in removed.output for name in HOOKS)
    assert not any((githooks.hooks_dir(vault.root) / name).exists() for name in HOOKS)


# ------------------------------------------------------------------------------------------------ moved, copied, linked
SECRET_FACT = "The deploy key is AKIAIOSFODNN7EXAMPLE for the bucket.\n"


def test_a_commit_in_a_linked_worktree_is_checked_by_the_pre_commit_hook(hooked, tmp_path):
    """A linked worktree runs the main repository's hooks, which named the main work tree's vault by its absolute
    path: the check looked for staged files under '../vault/' of the worktree, found none, and let a secret in."""
    other = tmp_path / "other-worktree"
    git(hooked.root, "worktree", "add", "-q", "-b", "side", str(other))
    result = commit(other, write(other, "facts/aws.md", SECRET_FACT))
    assert result.returncode != 0, result.stdout + result.stderr
    assert "facts/aws.md:1: looks like a secret" in result.stderr
    assert git(other, "log", "-1", "--format=%s") != "test"


def test_a_moved_vault_keeps_its_hooks_checking_and_reindexing_itself(hooked, tmp_path, monkeypatch):
    """The hooks named the vault's old path: after 'mv', the pre-commit checked nothing (a secret went in) and the
    post-commit made local state for a vault that no longer exists (under ~/.local/state) and failed."""
    state_home = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state_home))
    moved = tmp_path / "moved-vault"
    os.rename(hooked.root, moved)
    result = commit(moved, write(moved, "facts/aws.md", SECRET_FACT))
    assert result.returncode != 0 and "facts/aws.md:1: looks like a secret" in result.stderr, result.stderr
    git(moved, "reset", "-q")
    result = commit(moved, write(moved, "facts/db/x.md", "The replica lags by a minute.\n"))
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr
    log = moved / ".git" / "memvault" / "root" / "hook-reindex.log"
    deadline = time.monotonic() + 60
    while not log.exists() or "reindex:" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.1)
    assert not state_home.exists() and not hooked.root.exists()


def test_a_hook_an_older_release_wrote_for_a_vault_elsewhere_refuses_rather_than_check_nothing(vault, tmp_path):
    """Hooks written before this release name the vault by its absolute path. Run from a work tree that path is not
    in (the vault moved, or a linked worktree), the check has no staged file of that vault to look at: it says
    so and refuses, where it let everything through."""
    directory = githooks.hooks_dir(vault.root)
    directory.mkdir(parents=True, exist_ok=True)
    elsewhere = tmp_path / "gone"
    old = githooks.render("pre-commit", vault.root).replace(" --vault . ", f" --vault {elsewhere} ")
    assert str(elsewhere) in old
    (directory / "pre-commit").write_text(old)
    (directory / "pre-commit").chmod(0o755)
    result = commit(vault.root, write(vault.root, "facts/db/x.md", "The replica lags by a minute.\n"))
    assert result.returncode != 0
    assert f"{elsewhere}" in result.stderr and "memvault hooks install" in result.stderr
    assert len([line for line in result.stderr.splitlines() if "memvault pre-commit" in line]) == 1


def test_hooks_in_a_repository_without_the_vault_stay_quiet(hooked, tmp_path):
    """The same hook scripts run in a repository that holds no vault where they look (a shared core.hooksPath):
    nothing to check, nothing reindexed, no state made."""
    directory = githooks.hooks_dir(hooked.root)
    plain = tmp_path / "plain"
    plain.mkdir()
    git(plain, "init", "-q")
    git(plain, "config", "core.hooksPath", str(directory))
    result = commit(plain, write(plain, "notes/Bad Name.md", "---\nimportance: high\n---\nnot a vault\n"))
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr
    assert not (plain / ".git" / "memvault").exists()


PLANT = "import os, pathlib\npathlib.Path(os.environ['PLANTED_MARK']).write_text(os.getcwd())\n"


def test_a_committed_memvault_package_in_the_work_tree_never_runs_in_a_hook(hooked, tmp_path, monkeypatch):
    """git runs hooks at the top of the work tree, and the scripts ran ``python -m memvault.githooks``, which puts
    that folder first on sys.path: a teammate's committed ``memvault/__init__.py`` ran as this person on their next
    ``git pull`` (post-merge), commit or checkout. The hooks start Python with -P (no working directory on the path),
    and so does the background reindex they start (its working directory is the vault)."""
    mark = tmp_path / "planted-ran"
    monkeypatch.setenv("PLANTED_MARK", str(mark))
    (hooked.root / "memvault").mkdir()
    (hooked.root / "memvault" / "__init__.py").write_text(PLANT)
    (hooked.root / "memvault" / "githooks.py").write_text("raise SystemExit(0)\n")
    result = commit(hooked.root, "memvault", write(hooked.root, "facts/db/x.md", "The replica lags.\n"))
    assert result.returncode == 0, result.stderr
    git(hooked.root, "checkout", "-q", "-b", "other")
    proc = githooks.start_reindex(hooked.root)
    if proc is not None:
        proc.wait(timeout=60)
    time.sleep(0.5)
    assert not mark.exists(), mark.read_text()
