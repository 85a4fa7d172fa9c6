"""Local state lives where no commit can reach it (memvault.rules.places): inside the git directory, or outside the
tree when the vault is not in git. Whatever a teammate commits at ``.memvault`` is inert (never read, written,
deleted or followed, named once), an older memvault's real folder moves once, and shared configuration never names
a command to run or a path to load."""
from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_fixtures import call_hook, payload, run_hook, transcript
from conftest import REPO_ROOT, git
from memvault import Vault


# ------------------------------------------------------------------------------------------------ helpers
def snapshot(path: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry under ``path`` (or ``path`` itself, a file): its kind, mtime and bytes (a link: its target)."""
    out = {}
    entries = [path] if not path.is_dir() or path.is_symlink() else [path, *sorted(path.rglob("*"))]
    for p in entries:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            body: bytes | str = os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            body = p.read_bytes()
        else:
            body = ""
        out[str(p.relative_to(path.parent))] = (stat.S_IFMT(st.st_mode), st.st_mtime_ns, body)
    return out


def decoys(tmp: Path) -> dict[str, Path]:
    """Things outside the vault a committed link could aim at: a folder of someone's files, two files."""
    home = tmp / "victim"
    (home / "ssh").mkdir(parents=True)
    (home / "ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (home / "ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA owner\n")
    (home / "notes.txt").write_text("my notes\n")
    (home / "empty.bin").write_bytes(b"")
    return {"dir": home / "ssh", "file": home / "notes.txt", "file2": home / "empty.bin"}


def teammate(tmp: Path, shared: Path) -> Path:
    """A second clone of the vault's remote: what a teammate commits there arrives with a plain ``git pull``."""
    other = tmp / "teammate"
    git(tmp, "clone", "-q", str(shared), str(other))
    return other


def push_from(clone: Path, message: str) -> None:
    git(clone, "commit", "-qm", message)
    git(clone, "push", "-q", "origin", "HEAD:main")


@pytest.fixture
def shared_vault(tmp_path, options):
    """A vault with a bare remote; returns (vault root, the remote)."""
    v = Vault.init(tmp_path / "mine", **options)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(v.root, "remote", "add", "origin", str(remote))
    git(v.root, "push", "-q", "-u", "origin", "main")
    v.facts.set("db/primary", "The primary database listens on port 5432.", source="user:tester")
    git(v.root, "push", "-q", "origin", "main")
    return v.root, remote


def attacker_model(tmp: Path) -> Path:
    model = tmp / "attacker-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


# ------------------------------------------------------------------------------------------------ the attack
@pytest.mark.parametrize("shape", ["links-inside", "folder-link"])
def test_a_pulled_memvault_is_inert_and_a_pulled_extractor_never_runs(shape, shared_vault, tmp_path, monkeypatch,
                                                                      models, options):
    root, remote = shared_vault
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # the processes the hooks start run this code too
    targets = decoys(tmp_path)
    model = attacker_model(tmp_path)
    pwned = tmp_path / "PWNED"
    other = teammate(tmp_path, remote)
    state = other / ".memvault"
    if shape == "links-inside":
        state.mkdir()
        (state / "live").symlink_to(targets["dir"])
        (state / "agents.log").symlink_to(targets["file"])
        (state / "captures.db").symlink_to(targets["file2"])
        (state / "local.toml").write_text(f'[embedding]\nmodel = "{model}"\n')
    else:
        attacker = tmp_path / "attacker"
        attacker.mkdir()
        (attacker / "live").symlink_to(targets["dir"])
        (attacker / "agents.log").symlink_to(targets["file"])
        (attacker / "captures.db").symlink_to(targets["file2"])
        (attacker / "local.toml").write_text(f'[embedding]\nmodel = "{model}"\n')
        state.symlink_to(attacker)
        targets["attacker"] = attacker
    toml = other / "memvault.toml"  # its last section is [capture]; no warm process is left running by this test
    toml.write_text(toml.read_text().replace("daemon = true", "daemon = false") + f'extractor = "touch {pwned}"\n')
    git(other, "add", "-f", ".memvault", "memvault.toml")
    push_from(other, "a teammate's commit")
    git(root, "pull", "-q", "--no-rebase", "origin", "main")
    assert (root / ".memvault").is_symlink() or (root / ".memvault" / "live").is_symlink()  # the attack arrived
    before = {name: snapshot(p) for name, p in targets.items()}

    v = Vault.open(root, **options)
    said = " | ".join(v.notices)
    assert ".memvault" in said and "suspicious" in said  # named
    assert "[capture] extractor" in said and "ignored" in said
    assert v.config.capture.extractor is None and v.config.model != str(model)
    assert v.state_dir == root / ".git" / "memvault" / "root"
    # The watcher (as the MCP server, `memvault watch`, the web view and the warm process start it), a recall
    # and a reindex.
    feed = v.follow()
    try:
        assert v.recall("primary database port")
    finally:
        v.close()
    v = Vault.open(root, **options)
    v.reindex()
    assert "model_set_by" not in v.stats() and str(model) not in " ".join(v.stats()["summary"])
    # The agent hooks: session start (with the warm-up it starts), capture in this process and detached.
    monkeypatch.delenv("MEMVAULT_NO_DAEMON")
    (v.state_dir / "agents-warm-up").unlink(missing_ok=True)
    monkeypatch.setenv("MEMVAULT_DIR", str(root))
    out = call_hook(monkeypatch, ["session-start", "--runtime", "claude-code", "--vault", str(root)],
                    payload("claude-code", "SessionStart", cwd=root))
    assert "primary database" in out
    assert (v.state_dir / "agents-warm-up").is_file()
    monkeypatch.setenv("MEMVAULT_NO_DAEMON", "1")
    path = transcript(tmp_path, "claude-code", big=False)
    call_hook(monkeypatch, ["capture", "--runtime", "claude-code", "--vault", str(root)],
              payload("claude-code", "SessionEnd", transcript=path, cwd="/home/dev/src/shopfront"))
    assert (v.state_dir / "captures.db").is_file()
    done = run_hook(["capture", "--runtime", "gemini", "--vault", str(root), "--detach"],
                    payload("gemini", "SessionEnd", transcript=transcript(tmp_path, "gemini", big=False),
                            cwd="/home/dev/src/shopfront"), env={"PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0
    log = v.state_dir / "agents.log"
    deadline = time.monotonic() + 60
    while "gemini" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "captured" in log.read_text() and not log.is_symlink()
    # The MCP server's start path, as a process.
    mcp_started(root, tmp_path)

    assert {name: snapshot(p) for name, p in targets.items()} == before  # untouched, byte for byte
    assert not pwned.exists()
    assert feed is not None and not (v.state_dir / "live").is_symlink()  # its markers: in the state directory
    # Still there for the person to look at: memvault deleted nothing of it.
    assert os.path.lexists(root / ".memvault")
    # Named once: a later open says nothing more about it (the extractor is said at each load).
    assert not any(".memvault" in n for n in Vault.open(root).notices)


def mcp_started(root: Path, tmp: Path) -> None:
    """``memvault mcp`` as an agent starts it (stdio): its start path opens the vault and starts the watcher."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "memvault.mcp_server", "--vault", str(root),
                                                                 "--source", "agent:deployer"],
                                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})

    async def go():
        with open(tmp / "mcp-stderr.log", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return await client.call_tool("recall", {"query": "primary database port"})

    assert "db/primary" in str(asyncio.run(go()))


def test_the_gate_refuses_a_command_or_a_model_directory_in_memvault_toml(tmp_path):
    from memvault.rules.config import from_text
    from memvault.rules.errors import ConfigError
    from memvault.stores.checks import commit_refusal

    for text in ('[capture]\nextractor = "touch /tmp/x"\n', '[embedding]\nmodel = "/opt/models/evil"\n',
                 '[recall]\nreranker = "~/models/cross"\n'):
        refusal = commit_refusal("memvault.toml", text.encode())
        assert refusal is not None and "local.toml" in refusal and "\n" not in refusal, text
        with pytest.raises(ConfigError):
            from_text(text, Path("memvault.toml"))
    # Names every host can load stay shared.
    assert commit_refusal("memvault.toml", b'[embedding]\nmodel = "BAAI/bge-small-en-v1.5"\n'
                                           b'[recall]\nreranker = "cross-encoder/ms-marco-MiniLM-L-6-v2"\n') is None


def test_the_pre_commit_hook_refuses_a_committed_extractor(vault):
    from memvault.interfaces.githooks import install

    install(vault.root)
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text() + 'extractor = "touch /tmp/PWNED"\n')  # its last section is [capture]
    done = subprocess.run(["git", "commit", "-qm", "extractor", "--", "memvault.toml"], cwd=vault.root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode != 0 and "[capture] extractor" in done.stdout + done.stderr


def test_host_settings_come_only_from_the_state_directory(vault, tmp_path):
    model = attacker_model(tmp_path)
    (vault.root / ".memvault").mkdir()
    (vault.root / ".memvault" / "local.toml").write_text(f'[embedding]\nmodel = "{model}"\n')
    git(vault.root, "add", "-f", ".memvault/local.toml")
    git(vault.root, "commit", "-qm", "a committed local.toml")
    v = Vault.open(vault.root)
    assert v.config.model != str(model) and (vault.root / ".memvault" / "local.toml").is_file()
    # This host's own: a command and a model directory are honoured from local.toml in the state directory.
    (v.state_dir / "local.toml").write_text(f'[embedding]\nmodel = "{model}"\n[capture]\nextractor = "true"\n'
                                            '[recall]\nreranker = "/opt/cross"\n')
    v = Vault.open(vault.root)
    assert v.config.model == str(model) and v.config.capture.extractor == "true"
    assert v.config.recall.reranker == "/opt/cross"
    assert v.stats()["model_set_by"].startswith(str(v.state_dir))
    (v.state_dir / "local.toml").write_text('[recall]\nweights = { relevance = 1.0 }\n')
    with pytest.raises(Exception, match="cannot be set for one host"):
        Vault.open(vault.root)


def test_a_model_name_is_never_a_folder_of_the_vault(vault, monkeypatch):
    from memvault.models.embeddings import resolve_model_path

    planted = vault.root / "acme" / "model"
    planted.mkdir(parents=True)
    (planted / "config.json").write_text("{}")
    monkeypatch.chdir(vault.root)
    assert resolve_model_path("acme/model") is None  # a hub name: never the folder a commit put here
    assert resolve_model_path(str(planted)) == str(planted)


# ------------------------------------------------------------------------------------------------ where it lives
def test_an_older_real_memvault_folder_moves_once_with_its_index_and_state(vault, models, options):
    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:tester")
    assert vault.recall("primary database")
    vault.close()
    state = vault.state_dir
    index_bytes = (state / "index.db").read_bytes()
    recalls = len(Vault.open(vault.root).recall_log.recalls())
    assert recalls >= 1
    old = vault.root / ".memvault"
    os.rename(state, old)  # as an older memvault left it: a real, untracked folder in the work tree
    v = Vault.open(vault.root, **options)
    moved = [n for n in v.notices if "moved" in n]
    assert len(moved) == 1 and str(old) in moved[0] and str(state) in moved[0], v.notices
    assert not os.path.lexists(old), list(old.rglob("*"))
    assert (state / "index.db").read_bytes()[:100] == index_bytes[:100]
    assert len(v.recall_log.recalls()) == recalls
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert not any("moved" in n for n in Vault.open(vault.root).notices)


def test_an_older_folder_merges_with_what_a_hook_made_first(vault):
    state = vault.state_dir
    vault.close()
    old = vault.root / ".memvault"
    os.rename(state, old)
    (old / "agents.log").write_text("old line\n")
    state.mkdir(mode=0o700)
    (state / "agents.log").write_text("new line\n")  # a hook ran before the vault was opened
    (state / "locks").mkdir()
    v = Vault.open(vault.root)
    assert any("moved" in n for n in v.notices) and not os.path.lexists(old)
    assert (state / "agents.log").read_text() == "old line\nnew line\n"
    assert (state / "locks").is_dir()


def test_an_older_index_is_not_moved_without_its_link_where_an_index_already_is(vault, models, options):
    """An older memvault run again after the upgrade (another checkout, a pinned tool) wrote a new .memvault: its
    index.db link stayed behind (the state holds one) but the generation file it points at was moved, an orphan
    of the vault's size in the state directory that nothing read, and the link left pointing at nothing."""
    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:tester")
    assert vault.recall("primary database")
    vault.close()
    state = vault.state_dir
    current = os.readlink(state / "index.db")
    old = vault.root / ".memvault"
    old.mkdir()
    (old / "index-42.db").write_bytes(b"an older memvault's index")
    os.symlink("index-42.db", old / "index.db")
    v = Vault.open(vault.root, **options)
    assert not (state / "index-42.db").exists()
    assert (old / "index-42.db").read_bytes() == b"an older memvault's index"  # beside its link, as it was
    left = [n for n in v.notices if "left in" in n]
    assert len(left) == 1 and "index-42.db" in left[0] and "index.db" in left[0], v.notices
    assert os.readlink(state / "index.db") == current and v.recall("primary database")


def test_a_tracked_real_memvault_folder_is_left_alone_and_named_once(vault):
    (vault.root / ".memvault").mkdir()
    (vault.root / ".memvault" / "index.db").write_bytes(b"not an index")
    git(vault.root, "add", "-f", ".memvault")
    git(vault.root, "commit", "-qm", "committed state")
    v = Vault.open(vault.root)
    assert [n for n in v.notices if ".memvault" in n and "committed to git" in n]
    assert (vault.root / ".memvault" / "index.db").read_bytes() == b"not an index"
    v.reindex()
    assert (vault.root / ".memvault" / "index.db").read_bytes() == b"not an index"
    assert not [n for n in Vault.open(vault.root).notices if ".memvault" in n]


def test_a_committed_folder_untracked_as_advised_never_gives_this_host_its_settings_or_a_purge(vault):
    """A teammate commits ``.memvault/local.toml`` (``[capture] extractor``, a command) and ``.memvault/purge.json``
    (a purge of ``user:*`` by ``user:admin``). memvault named the folder and advised ``git rm -r --cached``; once
    the person did so, the folder was an untracked real one, taken for an older memvault's and moved into this
    host's state: the command became this host's extractor, and the next write "finished" the forged purge, removing
    every fact of a person. What says what to do (settings, journals, sync's records) is never taken from the work
    tree: left there, named."""
    import json

    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:tester")
    old = vault.root / ".memvault"
    old.mkdir()
    (old / "local.toml").write_text('[capture]\nextractor = "touch pwned"\n')
    (old / "purge.json").write_text(json.dumps({"pattern": "user:*", "source": "user:admin", "paths": []}))
    for name in ("sync-aside.json", "sync-tips.json", "episode-folders.json"):
        (old / name).write_text("{}")
    git(vault.root, "add", "-f", ".memvault")
    git(vault.root, "commit", "-qm", "a teammate's .memvault")
    notice = [n for n in Vault.open(vault.root).notices if "committed to git" in n]
    assert notice and "git rm -r .memvault" in notice[0]  # not --cached: nothing left behind to be taken
    git(vault.root, "rm", "-r", "-q", "--cached", ".memvault")
    v = Vault.open(vault.root)
    assert v.config.capture.extractor is None
    for name in ("local.toml", "purge.json", "sync-aside.json", "sync-tips.json", "episode-folders.json"):
        assert not os.path.lexists(v.state_dir / name) or (v.state_dir / name).read_bytes() != (old / name).read_bytes()
        assert (old / name).is_file()
    assert any("local.toml" in n and "purge.json" in n for n in v.notices), v.notices
    v.facts.set("db/replica", "The replica listens on port 5433.", source="user:tester")
    assert sorted(f.key for f in v.facts.list()) == ["db/primary", "db/replica"]


def test_two_vaults_in_one_repository_keep_separate_state(tmp_path, models, options):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("x\n")
    git(repo, "add", "README")
    git(repo, "commit", "-qm", "first")
    a = Vault.init(repo / "team" / "a", **options)
    b = Vault.init(repo / "team" / "b", **options)
    top = Vault.init(repo, **options)
    states = {a.state_dir, b.state_dir, top.state_dir}
    assert len(states) == 3
    assert all(s.parent == repo / ".git" / "memvault" for s in states)
    assert top.state_dir.name == "root" and a.state_dir.name.startswith("team-a-")
    a.facts.set("db/a", "Vault a holds this.", source="user:tester")
    b.facts.set("db/b", "Vault b holds that.", source="user:tester")
    assert [h.id for h in a.recall("vault holds")] == ["db/a"]
    assert [h.id for h in b.recall("vault holds")] == ["db/b"]


def test_a_git_worktree_has_its_own_state(vault, tmp_path, models, options):
    git(vault.root, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "other")
    wt = Vault.open(tmp_path / "wt", **options)
    assert wt.state_dir != vault.state_dir
    assert wt.state_dir == (vault.root / ".git" / "worktrees" / "wt" / "memvault" / "root").resolve()
    wt.facts.set("db/wt", "Only the worktree holds this.", source="user:tester")
    assert wt.recall("worktree holds") and (wt.state_dir / "index.db").is_file()


def test_a_vault_outside_git_keeps_its_state_under_xdg_state_home(tmp_path, monkeypatch, models, options):
    from memvault.rules.places import state_dir_for

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    root = tmp_path / "plain"
    root.mkdir()
    (root / "memvault.toml").write_text("")
    v = Vault(root, **options)
    assert v.git is None
    assert v.state_dir.parent == (tmp_path / "xdg" / "memvault" / "vaults").resolve()
    assert v.state_dir.name.startswith("plain-")
    assert stat.S_IMODE(os.stat(v.state_dir).st_mode) == 0o700
    assert state_dir_for(root) == v.state_dir
    v.episodes.append("something happened", source="user:tester")
    assert v.recall("something happened") and (v.state_dir / "index.db").is_file()
    assert not os.path.lexists(root / ".memvault")


def test_the_state_directory_is_found_without_running_git(vault, monkeypatch):
    from memvault.rules import places

    def no_git(*args, **kwargs):
        raise AssertionError("git was run")

    monkeypatch.setattr(subprocess, "Popen", no_git)
    monkeypatch.setattr(subprocess, "run", no_git)
    assert places.state_dir_for(vault.root) == vault.state_dir
    assert places.state_dir_for(vault.root / "facts" / "..") == vault.state_dir


def test_a_link_where_the_state_directory_goes_is_refused(vault, tmp_path):
    from memvault.rules.errors import UnsafePath

    decoy = tmp_path / "decoy"
    decoy.mkdir()
    state = vault.state_dir
    vault.close()
    os.rename(state, tmp_path / "kept")
    state.symlink_to(decoy)
    with pytest.raises(UnsafePath):
        Vault.open(vault.root)
    assert list(decoy.iterdir()) == []


# ------------------------------------------------------------------------------------------------ live markers
def test_the_marker_sweep_removes_only_its_own_dead_markers(vault, tmp_path):
    from memvault.index.changes import ChangeFeed

    decoy = decoys(tmp_path)
    before = snapshot(decoy["dir"])
    live = vault.state_dir / "live"
    live.mkdir(exist_ok=True)
    (live / "999999-ab-1").write_bytes(b"")  # a dead process's marker: removed
    (live / "999999-ab-2").symlink_to(decoy["file"])  # a link named like one: kept, not followed
    (live / "999999-ab-3").write_bytes(b"x")  # not empty: not a marker
    (live / "notes").write_bytes(b"")  # not named like one
    feed = ChangeFeed(vault.root, vault.state_dir)
    feed.start()
    feed.stop()
    assert sorted(p.name for p in live.iterdir()) == ["999999-ab-2", "999999-ab-3", "notes"]
    assert decoy["file"].read_text() == "my notes\n" and snapshot(decoy["dir"]) == before


def test_a_link_at_the_marker_folder_is_never_swept(vault, tmp_path):
    from memvault.index.changes import ChangeFeed

    decoy = decoys(tmp_path)
    (decoy["dir"] / "999999-ab-1").write_bytes(b"")  # even what looks like a dead marker, through the link
    before = snapshot(decoy["dir"])
    live = vault.state_dir / "live"
    if live.exists():
        live.rmdir()
    live.symlink_to(decoy["dir"])
    feed = ChangeFeed(vault.root, vault.state_dir)
    assert feed.start() is False and "markers" in (feed.reason or "")
    assert snapshot(decoy["dir"]) == before


def test_a_vault_below_the_top_keeps_its_markers_in_a_folder_of_its_own(tmp_path):
    from memvault.index.changes import ChangeFeed

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    v = Vault.init(repo / "sub")
    assert not str(v.state_dir).startswith(str(v.root))
    (v.root / ".memvault-live-999999-ab").mkdir()  # a dead process's folder, empty: removed
    (v.root / ".memvault-live-999998-cd").mkdir()
    (v.root / ".memvault-live-999998-cd" / "keep").write_text("x")  # not empty: left
    feed = ChangeFeed(v.root, v.state_dir)
    started = feed.start()
    names = sorted(p.name for p in v.root.iterdir() if p.name.startswith(".memvault-live-"))
    feed.stop()
    assert ".memvault-live-999999-ab" not in names and ".memvault-live-999998-cd" in names
    if started:
        assert len(names) == 2  # its own, while it ran
    assert sorted(p.name for p in v.root.iterdir() if p.name.startswith(".memvault-live-")) == [
        ".memvault-live-999998-cd"]


def test_a_committed_retention_record_untracked_as_advised_never_accepts_a_shorter_retention(strict_vault):
    """``retention.json`` is this host's word that it accepted the ages it prunes by (the guard against a pushed
    ``[retention] raw = "1s"``). A teammate committed one, with ``.memvault/`` beside the shortened memvault.toml;
    once the person untracked the folder, it was taken for an older memvault's (which never wrote that file) and
    moved into this host's state: the next daily prune deleted by the teammate's ages, nothing waiting for
    ``--accept-retention``. Left in the work tree and named, like the other records of what this host decided."""
    import json
    import re
    from datetime import datetime, timedelta, timezone

    v = strict_vault
    v.episodes.append("three days ago, kept only on this host", source="user:ann",
                      at=datetime.now(timezone.utc) - timedelta(days=3))
    toml = v.root / "memvault.toml"
    toml.write_text(re.sub(r'(?m)^raw = "[^"]*"$', 'raw = "1s"', toml.read_text()))
    old = v.root / ".memvault"
    old.mkdir()
    (old / "retention.json").write_text(json.dumps({"ages": {"default": 1, "raw": 1}}))
    git(v.root, "add", "-f", ".memvault", "memvault.toml")
    git(v.root, "commit", "-qm", "a teammate's retention and its record")
    git(v.root, "rm", "-r", "-q", "--cached", ".memvault")
    v = Vault.open(v.root)
    assert not (v.state_dir / "retention.json").exists() and (old / "retention.json").is_file()
    assert any("retention.json" in n for n in v.notices), v.notices
    report = v.prune()
    assert [e.text for e in v.episodes.list()] == ["three days ago, kept only on this host"]
    assert any("--accept-retention" in w for w in report.warnings)


def test_every_python_memvault_starts_leaves_the_working_directory_off_its_path():
    """``python -m memvault...`` puts the working directory first on sys.path: git hooks run at the top of the work
    tree, agent runtimes run hooks and MCP servers in the project, a detached worker in the vault, so a committed
    ``memvault/`` folder there was imported instead of memvault (code run as the person on a pull or a session
    start). Every command line memvault starts or writes (an argv list, a hook script) puts -P before -m."""
    import ast
    import re

    package = REPO_ROOT / "memvault"
    offences = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(REPO_ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.List, ast.Tuple)) and not (node.elts and isinstance(node.elts[0], ast.Constant)
                                                                 and node.elts[0].value == "git"):
                items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                for i, item in enumerate(items[:-1]):
                    module = node.elts[i + 1]
                    named = (isinstance(module, (ast.Name, ast.Attribute))  # a module held by a name (HOOK_MODULE)
                             or isinstance(module, ast.Constant)
                             and re.fullmatch(r"memvault(\.\w+)*", str(module.value)) is not None)
                    if item == "-m" and named and (i == 0 or items[i - 1] != "-P"):
                        offences.append(f"{where}: {ast.unparse(node)[:80]}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for line in node.value.splitlines():
                    if " -m memvault" in line and " -P -m memvault" not in line and "python -m" not in line:
                        offences.append(f"{where}: {line.strip()[:80]}")
    assert not offences, "\n".join(offences)
