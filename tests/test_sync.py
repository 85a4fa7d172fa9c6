"""Sync: hosts sharing one vault through a bare git remote. Real git, real clones, the fake embedder."""
from __future__ import annotations

import json
import sqlite3

import pytest

from memvault import Vault
from memvault.rules.errors import GitError, MemvaultError
from memvault.stores.gitstore import GitStore
from memvault.rules.errors import SyncConflict
from conftest import git
from fake_embedder import set_model


@pytest.fixture(autouse=True)
def git_calls(monkeypatch):
    """Every command sync runs through GitStore.run; checked after each test: never a force-push."""
    calls: list[tuple[str, ...]] = []
    original = GitStore.run

    def recording(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GitStore, "run", recording)
    yield calls
    for args in calls:
        assert not any(a.startswith("--force") or a in ("-f", "--mirror", "--delete") for a in args), args
        if args and args[0] == "push":
            assert not any(a.startswith("+") for a in args), args



def tracked_clones(tmp_path, models):
    """A bare remote (``tmp_path/remote.git``) and two clones of one tracked-episodes vault with the fake model:
    ``a`` made there and synced (its first push creates the branch), then ``b`` cloned. ``(a, b, a's sync)``; the
    caller sets MEMVAULT_HOST or the hostname first."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(tmp_path, "clone", "-q", str(remote), "a")
    a = Vault.init(tmp_path / "a", track_episodes=True)
    set_model(a.root, "fake-hash")
    git(a.root, "commit", "-qm", "fake model", "--", "memvault.toml")
    a = Vault.open(a.root, embedder_factory=models)
    first = a.sync()
    git(tmp_path, "clone", "-q", str(remote), "b")
    return a, Vault.open(tmp_path / "b", embedder_factory=models), first


class Hosts:
    """Two clones of one bare remote; ``on(name)`` sets MEMVAULT_HOST and returns that host's vault."""

    def __init__(self, tmp_path, monkeypatch, models):
        self.models = models
        self.tmp = tmp_path
        self.monkeypatch = monkeypatch
        self.remote = tmp_path / "remote.git"
        monkeypatch.setenv("MEMVAULT_HOST", "a")
        a, b, first = tracked_clones(tmp_path, models)
        assert first.pushed and first.pulled == []  # the remote had no branch yet: the first push created it
        self.vaults = {"a": a, "b": b}

    def on(self, name: str) -> Vault:
        self.monkeypatch.setenv("MEMVAULT_HOST", name)
        return self.vaults[name]

    def sync(self, name: str, **kw):
        return self.on(name).sync(**kw)


@pytest.fixture
def hosts(tmp_path, monkeypatch, models):
    return Hosts(tmp_path, monkeypatch, models)


def docs(vault: Vault) -> set[tuple[str, str, str]]:
    conn = sqlite3.connect(vault.index.current_target())
    try:
        return set(conn.execute("SELECT kind, item_id, hash FROM docs"))
    finally:
        conn.close()


def episode_ids(vault: Vault) -> set[str]:
    return {e.id for e in vault.episodes.iter()}


def test_concurrent_writes_on_two_hosts_lose_nothing_and_indexes_agree(hosts):
    for name in "ab":
        hosts.on(name).reindex()  # both hosts have an index before the writes
    a = hosts.on("a")
    a.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", category="database")
    a.episodes.append("Rotated the postgres logs on db1.", source="agent:ops")
    (a.root / "procedures" / "backup.sh").write_text("#!/bin/sh\n# description: Nightly pg_dump of the primary\n"
                                                     "pg_dump -h 10.8.0.4 app > /backup/app.sql\n")
    b = hosts.on("b")
    b.facts.set("web/haproxy", "HAProxy balances web1 web2 web3 with health checks on /healthz.", category="web")
    b.episodes.append("Deployed v2.15.1 to web1 web2 web3.", source="agent:deployer")
    b.episodes.append("Disk on web3 reached 91 percent.", source="agent:monitor")

    ra = hosts.sync("a")
    assert ra.committed and ra.pushed and ra.pulled == []
    assert git(a.root, "log", "-1", "--format=%s") == "sync: 2 changed files from a"  # episode file + procedure
    rb = hosts.sync("b")
    assert rb.committed and rb.pushed
    month = a.episodes.files()[0].name
    assert sorted(rb.pulled) == [f"episodes/a/{month}", "facts/db/primary.md", "procedures/backup.sh"]
    assert rb.reindexed is not None and rb.reindexed["files_changed"] >= 3
    ra2 = hosts.sync("a")
    assert ra2.committed is None and not ra2.pushed and sorted(ra2.pulled) == [f"episodes/b/{month}", "facts/web/haproxy.md"]
    assert hosts.sync("b").pulled == []  # settled

    for v in (a, b):
        assert sorted(f.key for f in v.facts.list()) == ["db/primary", "web/haproxy"]
        assert (v.root / "procedures" / "backup.sh").is_file()
        assert len(episode_ids(v)) == 3
        assert not git(v.root, "status", "--porcelain")
    assert episode_ids(a) == episode_ids(b)
    assert git(a.root, "rev-parse", "HEAD") == git(b.root, "rev-parse", "HEAD")
    # The syncs alone brought both indexes to the same rows, before any recall looked at the files.
    assert docs(a) == docs(b) and len(docs(a)) == 6
    for query in ("primary database port", "haproxy health checks", "disk space web3", "nightly backup dump"):
        top_a = [(h.kind, h.id) for h in a.recall(query, k=5)]
        top_b = [(h.kind, h.id) for h in b.recall(query, k=5)]
        assert top_a == top_b and top_a


def test_same_fact_changed_on_both_hosts_stops_with_the_key_and_keeps_the_local_version(hosts):
    a = hosts.on("a")
    a.facts.set("db/primary", "The primary database listens on 10.8.0.4.")
    hosts.sync("a")
    hosts.sync("b")
    a.facts.set("db/primary", "The primary database moved to 10.8.0.9.")
    hosts.sync("a")
    b = hosts.on("b")
    b.reindex()
    b.facts.set("db/primary", "The primary database listens on 10.8.0.4 and 10.8.0.5 (replica).")
    b.episodes.append("Added the replica address to db/primary.", source="agent:ops")  # uncommitted until sync
    mine = (b.root / "facts" / "db" / "primary.md").read_text()

    with pytest.raises(SyncConflict) as info:
        hosts.sync("b")
    err = info.value
    assert err.keys == ["db/primary"]
    message = str(err)
    assert "\n" not in message
    assert "db/primary changed here and on the remote" in message
    assert "edit facts/db/primary.md" in message and "git rebase --continue" in message
    assert "memvault sync" in message

    assert (b.root / "facts" / "db" / "primary.md").read_text() == mine  # no conflict markers
    status = git(b.root, "status")
    assert "rebase" not in status and not git(b.root, "status", "--porcelain")
    assert git(b.root, "log", "-1", "--format=%s").startswith("sync: ")  # the local commit stays: nothing lost
    assert git(b.root, "rev-list", "--count", "origin/main..HEAD") == "2"
    hit = b.recall("primary database address", k=1, kinds=["fact"], min_relevance=0)[0]  # the fake model: no floor
    assert hit.id == "db/primary" and "10.8.0.5 (replica)" in hit.text


def test_vault_in_a_subdirectory_syncs_only_its_own_paths(tmp_path, monkeypatch, git_calls):
    monkeypatch.setenv("MEMVAULT_HOST", "web1")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(tmp_path, "clone", "-q", str(remote), "big")
    big = tmp_path / "big"
    (big / "README").write_text("infra\n")
    (big / "staged.txt").write_text("one\n")
    git(big, "add", "README", "staged.txt")
    git(big, "commit", "-qm", "infra repo")
    git(big, "push", "-q", "origin", "main")
    vault = Vault.init(big / "infra" / "memory", track_episodes=True)
    (vault.root / "facts" / "dns").mkdir(parents=True)
    (vault.root / "facts" / "dns" / "resolvers.md").write_text("Resolvers are 10.8.0.2 and 10.8.0.3.\n")
    vault.episodes.append("Checked the resolvers.", source="agent:ops")
    (big / "README").write_text("infra, edited and not ready\n")
    (big / "staged.txt").write_text("two\n")
    git(big, "add", "staged.txt")
    (big / "scratch.txt").write_text("untracked\n")
    git(tmp_path, "clone", "-q", str(remote), "other")  # meanwhile another host changes the vault and the repo
    other = tmp_path / "other"
    (other / "infra" / "memory" / "facts" / "web").mkdir(parents=True)
    (other / "infra" / "memory" / "facts" / "web" / "haproxy.md").write_text("HAProxy on web1.\n")
    (other / "Makefile").write_text("all:\n")
    git(other, "add", "-A")
    git(other, "commit", "-qm", "from another host")
    git(other, "push", "-q", "origin", "main")

    result = vault.sync()
    assert result.pushed and result.remote == "origin" and result.branch == "main"
    assert result.pulled == ["facts/web/haproxy.md"]  # vault paths only, relative to the vault
    assert (big / "Makefile").is_file()
    files = git(big, "show", "--name-only", "--format=", result.committed).splitlines()
    assert sorted(files) == ["infra/memory/episodes/web1/" + vault.episodes.files()[0].name,
                             "infra/memory/facts/dns/resolvers.md"]
    # Everything else is exactly as it was: unstaged, staged and untracked changes, none committed.
    assert sorted(git(big, "status", "--porcelain").splitlines()) == [" M README", "?? scratch.txt", "M  staged.txt"]
    assert not git(big, "stash", "list")
    assert (big / "README").read_text() == "infra, edited and not ready\n"
    assert (big / "staged.txt").read_text() == "two\n"
    assert git(remote, "ls-tree", "-r", "--name-only", "main", "--", "infra/memory/facts").splitlines() == \
        ["infra/memory/facts/dns/resolvers.md", "infra/memory/facts/web/haproxy.md"]
    assert git(remote, "rev-parse", "main") == result.committed  # the id after the rebase
    assert git(remote, "show", "main:README") == "infra"
    (status_call,) = [args for args in git_calls if args[:1] == ("status",) and "--" in args]
    pathspecs = status_call[status_call.index("--") + 1:]
    assert pathspecs and all(p.startswith(":(literal)infra/memory/") for p in pathspecs)


def test_push_rejected_because_the_remote_moved_is_retried(hosts, monkeypatch):
    a, b = hosts.on("a"), hosts.vaults["b"]
    a.facts.set("db/primary", "The primary database listens on 10.8.0.4.")
    original = GitStore.run  # the recording wrapper
    moves = {"left": 1}

    def racing(self, *args, **kwargs):
        if args[:1] == ("push",) and self.root == a.root and moves["left"]:
            moves["left"] -= 1
            moves["n"] = moves.get("n", 0) + 1
            git(b.root, "pull", "-q", "--rebase", "origin", "main")
            (b.root / "facts" / "dns").mkdir(parents=True, exist_ok=True)
            (b.root / "facts" / "dns" / "resolvers.md").write_text(f"Resolvers are 10.8.0.{moves['n']}.\n")
            git(b.root, "add", "facts")
            git(b.root, "commit", "-qm", "meanwhile on b")
            git(b.root, "push", "-q", "origin", "main")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GitStore, "run", racing)
    result = hosts.sync("a")
    assert result.pushed and result.push_attempts == 2
    assert result.pulled == ["facts/dns/resolvers.md"]
    assert git(hosts.remote, "rev-parse", "main") == git(a.root, "rev-parse", "HEAD")

    moves["left"] = 99  # the remote moves before every push: give up after three tries, commits kept
    a.facts.set("db/primary", "The primary database moved to 10.8.0.9.")
    with pytest.raises(GitError, match="rejected 3 times"):
        hosts.sync("a")
    assert "10.8.0.9" in git(a.root, "show", "HEAD:facts/db/primary.md")


def test_a_push_the_remotes_hook_refuses_is_not_retried_and_says_why_on_one_line(hosts):
    """A pre-receive hook on the remote declines the push (a policy, a protected branch). Sync took the refusal for
    a remote that moved and pushed three times, fetching and rebasing between, then blamed "the remote keeps
    moving". Only a rejection for a remote that moved ("fetch first", "non-fast-forward") is retried; a hook's
    refusal stops at once with the remote's reason, on one line, with no control character nor credential."""
    token = "ghp_" + "0123456789abcdefghijklmnopqrstuvwxyz"
    calls = hosts.tmp / "hook-calls"
    hook = hosts.remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho x >> '{calls}'\n"
                    f"printf 'policy: pushes to main need a review\\033[2J\\n see https://bob:{token}@ci.example/x\\n' >&2\n"
                    "exit 1\n")
    hook.chmod(0o755)
    a = hosts.on("a")
    a.facts.set("db/primary", "The primary database listens on 10.8.0.4.")
    head = git(a.root, "rev-parse", "HEAD")
    with pytest.raises(GitError, match="refused the push.*pre-receive hook declined.*policy: pushes to main need a "
                                       "review") as info:
        hosts.sync("a")
    assert calls.read_text().count("x") == 1
    said = str(info.value)
    assert "\n" not in said and "\x1b" not in said and token not in said and "rejected 3 times" not in said
    assert git(a.root, "rev-parse", "HEAD") == head  # the commit is kept here
    assert git(hosts.remote, "rev-parse", "main") != head


def test_not_in_git_is_a_clear_error(tmp_path):
    import shutil

    v = Vault.init(tmp_path / "v")
    shutil.rmtree(v.root / ".git")
    with pytest.raises(GitError, match="not in a git repository"):
        Vault.open(v.root).sync()


def test_a_pull_that_touches_the_users_own_changed_file_stops_before_changing_anything(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMVAULT_HOST", "web1")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(tmp_path, "clone", "-q", str(remote), "big")
    big = tmp_path / "big"
    (big / "app.conf").write_text("port = 80\n")
    git(big, "add", "app.conf")
    git(big, "commit", "-qm", "infra repo")
    git(big, "push", "-q", "origin", "main")
    vault = Vault.init(big / "memory")
    vault.facts.set("dns/resolvers", "Resolvers are 10.8.0.2 and 10.8.0.3.", source="user:ops")
    git(tmp_path, "clone", "-q", str(remote), "other")
    other = tmp_path / "other"
    (other / "app.conf").write_text("port = 8080\n")  # the remote changes the user's file...
    git(other, "commit", "-qam", "other port")
    git(other, "push", "-q", "origin", "main")
    (big / "app.conf").write_text("port = 443\n")   # ...which has uncommitted changes here
    head = git(big, "rev-parse", "HEAD")

    with pytest.raises(SyncConflict, match="app.conf.*uncommitted changes here") as info:
        vault.sync()
    assert "before changing anything" in str(info.value)
    assert (big / "app.conf").read_text() == "port = 443\n"  # exactly as it was: no conflict markers
    assert git(big, "rev-parse", "HEAD") == head and not git(big, "stash", "list")
    assert git(big, "status", "--porcelain") == " M app.conf"


def rewrite_without_the_last_commit(hosts) -> None:
    """The team's rewrite: a clone of the remote drops its last commit (the deploy fact), commits something else and
    force-pushes."""
    clean = hosts.tmp / "clean"
    git(hosts.tmp, "clone", "-q", str(hosts.remote), str(clean))
    git(clean, "reset", "-q", "--hard", "HEAD~1")
    (clean / "README").write_text("rewritten\n")
    git(clean, "add", "README")
    git(clean, "commit", "-qm", "rewritten without the deploy fact")
    git(clean, "push", "-q", "--force", "origin", "HEAD")


@pytest.mark.parametrize("local_change", [False, True])
def test_a_history_the_team_rewrote_is_not_pushed_back(hosts, local_change):
    """A secret pushed by mistake; the team rewrites history without it and force-pushes. Host b had synced it:
    its next sync rebased everything the remote no longer had onto the new tip, and pushed the secret back.
    Only the commits b made since it last synced are put on top."""
    hosts.sync("a")
    a = hosts.on("a")
    a.facts.set("ops/deploy", "Deploy with the key in the vault.", source="user:admin")
    hosts.sync("a")
    assert hosts.sync("b").pulled  # b has it, and remembers the remote's tip
    rewrite_without_the_last_commit(hosts)
    b = hosts.on("b")
    if local_change:
        b.facts.set("db/replica", "The replica listens on port 5433.", source="user:admin")
    result = hosts.sync("b")
    remote_files = git(hosts.tmp, "--git-dir", str(hosts.remote), "ls-tree", "-r", "--name-only", "HEAD")
    assert "facts/ops/deploy.md" not in remote_files and "README" in remote_files
    assert ("facts/db/replica.md" in remote_files) == local_change
    assert any("rewritten" in w for w in result.warnings)
    assert not (b.root / "facts" / "ops" / "deploy.md").exists()


def test_a_union_merge_rule_never_merges_a_fact_changed_on_both_sides(hosts):
    """A teammate's '.gitattributes: * merge=union' made sync concatenate a fact changed on both sides (two
    sources, two texts, a password) and push it unchecked. Sync stops before changing anything, naming the fact."""
    hosts.sync("a")
    a = hosts.on("a")
    a.facts.set("db/primary", "The primary database listens on port 5432.", source="user:admin")
    hosts.sync("a")
    hosts.sync("b")
    (a.root / ".gitattributes").write_text("* merge=union\n")
    git(a.root, "add", ".gitattributes")
    git(a.root, "commit", "-qm", "attrs")
    a.facts.set("db/primary", "The primary database moved to port 6543.", source="user:admin")
    hosts.sync("a")
    b = hosts.on("b")
    b.facts.set("db/primary", "The primary database listens on port 5433.", source="user:admin")
    before = git(b.root, "rev-parse", "HEAD")
    with pytest.raises(SyncConflict, match="db/primary") as info:
        hosts.sync("b")
    assert info.value.keys == ["db/primary"] and git(b.root, "rev-parse", "HEAD") == before
    assert "5433" in b.facts.get("db/primary").text


# ------------------------------------------------------------------------------------------- one hostname, two clones
@pytest.fixture
def twins(tmp_path, monkeypatch, models):
    """Two clones of one tracked-episodes vault on machines with one hostname (macOS's default, a container's
    'localhost', CI runners), nobody having chosen a folder name: ``(a, b)``, both synced."""
    import socket

    monkeypatch.delenv("MEMVAULT_HOST", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "MacBook-Pro.local")
    a, b, _ = tracked_clones(tmp_path, models)
    return a, b


def test_two_clones_with_one_hostname_append_to_their_own_folders_and_sync(twins):
    """Both appended to episodes/macbook-pro.local/<month>.jsonl: the second sync stopped on that file at every
    try (union merging is shadowed on purpose), and that clone's episodes never reached the remote."""
    a, b = twins
    ea = a.episodes.append("Rotated the logs on laptop a.", source="agent:ops")
    eb = b.episodes.append("Rotated the logs on laptop b.", source="agent:ops")
    a.sync()
    result = b.sync()
    assert result.pushed and not result.warnings
    assert ea.path.parent != eb.path.parent
    for e in (ea, eb):
        assert e.path.parent.name.startswith("macbook-pro.local-")  # still says whose it is
    assert a.sync().pulled == [eb.path.relative_to(b.root).as_posix()]
    for v in (a, b):
        assert sorted(e.text for e in v.episodes.iter()) == ["Rotated the logs on laptop a.",
                                                             "Rotated the logs on laptop b."]
        assert not git(v.root, "status", "--porcelain")
    # Stable: reopened, each clone keeps appending to the folder it drew.
    again = Vault.open(b.root).episodes.append("And again on b.", source="agent:ops")
    assert again.path.parent == eb.path.parent


def test_a_clone_whose_folder_another_clone_appends_to_draws_a_new_one(twins):
    """A copy of a clone brings its local state along (``cp -r``, a container image): both append to one folder.
    The first sync that pulls the other's lines into this clone's folder says so and draws a new folder, so the
    next appends never meet in one file; the shared folder is read as before and no longer pruned from here."""
    import shutil

    a, b = twins
    shutil.copyfile(a.state_dir / "episode-folders.json", b.state_dir / "episode-folders.json")
    ea = a.episodes.append("From the original.", source="agent:ops")
    b = Vault.open(b.root)
    assert b.episodes.store.host == a.episodes.store.host  # the copy
    a.sync()
    result = b.sync()
    assert len(result.warnings) == 1 and f"episodes/{a.episodes.store.host}/" in result.warnings[0]
    assert b.episodes.store.host != a.episodes.store.host and b.episodes.store.host in result.warnings[0]
    assert a.episodes.store.host not in b.episodes.store.own_folders()
    eb = b.episodes.append("From the copy.", source="agent:ops")
    a.episodes.append("From the original, later.", source="agent:ops")
    assert b.sync().pushed and not a.sync().warnings
    assert b.sync().warnings == []  # said once: the folder it gave up is the original's alone now
    assert {e.id for e in a.episodes.iter()} == {e.id for e in b.episodes.iter()} and len(list(a.episodes.iter())) == 3
    assert eb.path.parent != ea.path.parent


def test_a_chosen_folder_name_is_kept_and_a_clash_is_named(twins, monkeypatch):
    """MEMVAULT_HOST and [episodes] host mean what they meant: that folder, no id. Two clones given one name are
    told, not renamed."""
    a, b = twins
    monkeypatch.setenv("MEMVAULT_HOST", "Shared-Name")
    assert a.episodes.append("a", source="agent:ops").path.parent.name == "shared-name"
    a.sync()
    b.sync()
    b.episodes.append("b", source="agent:ops", at="2026-01-01T00:00:00Z")  # another month: no conflict
    a.episodes.append("a again", source="agent:ops")
    a.sync()
    result = b.sync()
    assert any("episodes/shared-name/" in w and "own name" in w for w in result.warnings)
    assert b.episodes.store.host == "shared-name"


def test_a_teammate_committing_into_this_clones_folder_moves_this_clone_on(twins):
    """The folder names are in the repository for all to see: a teammate who commits lines into this clone's folder
    (by hand, a script, a copied name) is named at the next sync, their lines read, and this clone appends elsewhere;
    lines only removed there (a teammate's purge) are no sign of another writer."""
    a, b = twins
    mine = a.episodes.append("Mine.", source="agent:ops")
    a.sync()
    b.sync()
    theirs = b.root / mine.path.relative_to(a.root)
    theirs.write_text("")  # a purge of the only line: removed, nothing added
    git(b.root, "commit", "-qam", "purge")
    git(b.root, "push", "-q", "origin", "main")
    assert a.sync().warnings == [] and a.episodes.store.host == mine.path.parent.name
    line = '{"id": "planted", "created_at": "2026-01-01T00:00:00Z", "source": "user:x", "text": "Planted."}\n'
    theirs.write_text(line)
    git(b.root, "commit", "-qam", "lines in a's folder")
    git(b.root, "push", "-q", "origin", "main")
    (warning,) = a.sync().warnings
    assert f"episodes/{mine.path.parent.name}/" in warning and a.episodes.store.host in warning
    assert a.episodes.append("Next.", source="agent:ops").path.parent.name == a.episodes.store.host
    assert "Planted." in [e.text for e in a.episodes.iter()]


def test_two_upgraded_laptops_of_one_name_leave_their_old_shared_folder_to_one_pruner(twins):
    """Both laptops wrote episodes/macbook-pro.local/ with an older memvault, so both take it for their own after
    the upgrade: pruned from both, a day apart, it would conflict. The first sync that pulls the other's change to
    it gives it up here (read as before, pruned by the other); no line is lost or read twice."""
    import json

    from datetime import datetime, timezone

    a, b = twins
    legacy = a.root / "episodes" / "macbook-pro.local" / "2020-01.jsonl"
    legacy.parent.mkdir(parents=True)
    lines = [{"id": "old", "created_at": "2020-01-01T00:00:00Z", "source": "user:ops", "text": "Past retention."},
             {"id": "kept", "created_at": "2020-01-02T00:00:00Z", "source": "user:ops", "text": "A summary.",
              "kind": "summary"}]
    legacy.write_text("".join(json.dumps(line) + "\n" for line in lines))
    git(a.root, "add", "episodes")
    git(a.root, "commit", "-qm", "what the older memvaults appended")
    git(a.root, "push", "-q", "origin", "main")
    git(b.root, "pull", "-q", "origin", "main")
    for v in (a, b):  # as the older memvault left them: an append lock, and no record of folders
        (v.state_dir / "episode-folders.json").unlink(missing_ok=True)
        (v.state_dir / "locks").mkdir(exist_ok=True)
        (v.state_dir / "locks" / "episodes.lock").touch()
    a, b = Vault.open(a.root), Vault.open(b.root)
    assert "macbook-pro.local" in a.episodes.store.own_folders() & b.episodes.store.own_folders()
    when = datetime(2020, 6, 1, tzinfo=timezone.utc)  # the raw line is past 30 days, the summary within 365
    assert [e.id for e in a.prune(source="user:admin", at=when).removed] == ["old"]
    a.sync()
    (warning,) = b.sync().warnings
    assert "episodes/macbook-pro.local/" in warning and "no longer pruned from here" in warning
    assert "macbook-pro.local" not in b.episodes.store.own_folders()
    later = datetime(2021, 6, 1, tzinfo=timezone.utc)  # the summary is past retention too: the other's to prune
    assert b.prune(source="user:admin", at=later).removed == []
    assert "macbook-pro.local" in a.episodes.store.own_folders()  # the other still prunes it
    assert [e.id for e in b.episodes.iter()] == [e.id for e in a.episodes.iter()] == ["kept"]


# ------------------------------------------------------------------------------------------- review: attacks on the folder id
def test_a_copy_that_appended_too_syncs_after_naming_the_shared_folder(twins):
    """The copy (local state and all) appended to the shared month file before its first sync, as a copy does: the
    redraw alone left that commit in the shared file, so the rebase stopped on it at this sync and every later one.
    Both clones' lines must arrive, each once, and the copy append elsewhere from then on."""
    import shutil

    a, b = twins
    shutil.copyfile(a.state_dir / "episode-folders.json", b.state_dir / "episode-folders.json")
    b = Vault.open(b.root)
    shared = a.episodes.store.host
    a.episodes.append("From the original.", source="agent:ops")
    b.episodes.append("From the copy.", source="agent:ops")
    a.sync()
    result = b.sync()
    assert result.pushed and any("this clone now appends to" in w for w in result.warnings)
    # The copy's line went to its new folder with it: the original's folder holds only the original's lines, so
    # the original is not moved on in turn.
    assert b.sync().warnings == [] and a.sync().warnings == [] and a.episodes.store.host == shared
    for v in (a, b):
        got = {e.text: e.path.parent.name for e in v.episodes.iter()}
        assert got == {"From the original.": shared, "From the copy.": b.episodes.store.host}
        assert len(list(v.episodes.iter())) == 2
        for text, folder in got.items():
            hits = [h for h in v.recall(text, k=10, mode="keyword", log=False) if h.kind == "episode"]
            # the index followed the move: each line found once, where it is now
            assert [h.path for h in hits if h.id == hits[0].id] == [f"episodes/{folder}/{hits[0].path.split('/')[-1]}"]
            assert len(hits) == len({h.id for h in hits})
        assert not git(v.root, "status", "--porcelain")
    assert b.episodes.append("Later.", source="agent:ops").path.parent.name == b.episodes.store.host


def test_an_empty_file_committed_into_this_clones_folder_is_a_sign_of_another_writer(twins):
    """A teammate commits an empty month file in this clone's folder (no line added: a numstat of 0): a creation,
    not a purge. Left unnamed, this clone's own new file of that month conflicted (add/add) at every sync."""
    from datetime import datetime, timezone

    a, b = twins
    a.episodes.append("First.", source="agent:ops")
    a.sync()
    b.sync()
    folder = a.episodes.store.host
    month = f"{datetime.now(timezone.utc):%Y}-01.jsonl"
    planted = b.root / "episodes" / folder / month
    planted.write_text("")
    git(b.root, "add", "episodes")
    git(b.root, "commit", "-qm", "an empty file in a's folder")
    git(b.root, "push", "-q", "origin", "main")
    (warning,) = a.sync().warnings
    assert f"episodes/{folder}/" in warning and a.episodes.store.host != folder


def test_a_file_name_that_is_not_utf8_in_this_clones_folder_is_named_not_a_traceback(twins):
    """Git paths are bytes: a teammate's commit of ``episodes/<this clone's folder>/\\xff.jsonl`` stopped every
    teammate's sync with a UnicodeDecodeError, at every try."""
    import os

    a, b = twins
    a.episodes.append("First.", source="agent:ops")
    a.sync()
    b.sync()
    folder = a.episodes.store.host
    with open(os.fsencode(b.root / "episodes" / folder) + b"/\xff\xfe.jsonl", "wb") as planted:
        planted.write(b'{"id": "x", "created_at": "2026-01-01T00:00:00Z", "source": "user:x", "text": "odd"}\n')
    git(b.root, "add", "episodes")
    git(b.root, "commit", "-qm", "a name that is not UTF-8")
    git(b.root, "push", "-q", "origin", "main")
    (warning,) = a.sync().warnings
    assert f"episodes/{folder}/" in warning and a.episodes.store.host != folder
    assert a.sync().warnings == [] and b.sync().warnings == []


def test_a_purge_meeting_another_clones_appends_in_one_month_file_stays_purged(twins):
    """The copy purges a line from the month file the original appended to meanwhile: git stops on the file, and
    the sync's resolution kept the remote's version, the purged line (a secret, say) with it."""
    import shutil

    a, b = twins
    shutil.copyfile(a.state_dir / "episode-folders.json", b.state_dir / "episode-folders.json")
    b = Vault.open(b.root)
    a.episodes.append("Deploy token was pasted here.", source="user:leaky")
    a.sync()
    b.sync()
    a.episodes.append("Rotated the logs.", source="agent:ops")
    a.sync()
    assert [e.text for e in b.purge("user:leaky").episodes.removed] == ["Deploy token was pasted here."]
    b.sync()
    a.sync()
    for v in (a, b):
        assert [e.text for e in v.episodes.iter()] == ["Rotated the logs."]


def test_a_link_committed_over_this_clones_month_file_stops_the_sync_cleanly(twins):
    """A teammate replaces the copy's shared month file by a link: never resolved as lines (never written through
    or over), the rebase is aborted and the work tree is this clone's version."""
    import os
    import shutil

    a, b = twins
    shutil.copyfile(a.state_dir / "episode-folders.json", b.state_dir / "episode-folders.json")
    b = Vault.open(b.root)
    e = a.episodes.append("From the original.", source="agent:ops")
    a.sync()
    os.unlink(e.path)
    os.symlink("/etc/passwd", e.path)
    git(a.root, "add", "-A", "episodes")
    git(a.root, "commit", "-qm", "a link")
    git(a.root, "push", "-q", "origin", "main")
    mine = b.episodes.append("From the copy.", source="agent:ops")
    with pytest.raises(SyncConflict):
        b.sync()
    assert not mine.path.is_symlink() and "From the copy." in mine.path.read_text()
    assert not (b.root / ".git" / "rebase-merge").exists()


def test_a_teammates_redaction_in_this_clones_folder_is_no_other_writer(twins):
    """A teammate who redacts a secret in a line this clone wrote (the same episode, its text changed) adds no
    episode to the folder: git counts the edited line as one added, and this clone drew a new folder and said
    another clone appended to its own. Only an episode id new to the folder is another writer."""
    import json

    a, b = twins
    mine = a.episodes.append("Deployed with token hunter2.", source="agent:ops")
    a.sync()
    b.sync()
    theirs = b.root / mine.path.relative_to(a.root)
    data = json.loads(theirs.read_text())
    data["text"] = "Deployed with token [redacted]."
    theirs.write_text(json.dumps(data) + "\n")
    git(b.root, "commit", "-qam", "redact a token")
    git(b.root, "push", "-q", "origin", "main")
    assert a.sync().warnings == []
    assert a.episodes.store.host == mine.path.parent.name
    assert [e.text for e in a.episodes.iter()] == ["Deployed with token [redacted]."]


@pytest.mark.parametrize("how", ["git pull", "fresh clone", "git pull then git fetch"])
def test_a_history_the_team_rewrote_is_not_pushed_back_by_a_clone_that_took_it_with_plain_git(hosts, how):
    """Host b took the commit with the secret by a plain ``git pull`` (or was cloned after it was pushed), so its
    record of the remote's tip (sync-tips.json) was older than the secret, or absent. The team then removed the
    file from history and force-pushed. b's next ``memvault sync`` saw no rewrite (its recorded tip is still in the
    new history) and rebased every commit the remote no longer had onto the new tip: the secret was pushed back
    with no word. The remote-tracking branch's reflog says what b had of the remote: it is used too."""
    hosts.sync("a")
    hosts.sync("b")  # b's recorded tip: before the secret
    a = hosts.on("a")
    a.facts.set("ops/deploy", "Deploy with the key in the vault.", source="user:admin")
    hosts.sync("a")
    b = hosts.on("b")
    if how == "fresh clone":
        git(hosts.tmp, "clone", "-q", str(hosts.remote), "b2")
        b = hosts.vaults["b"] = Vault.open(hosts.tmp / "b2", embedder_factory=hosts.models)
    else:
        git(b.root, "pull", "-q")
    assert (b.root / "facts" / "ops" / "deploy.md").exists()
    rewrite_without_the_last_commit(hosts)
    if how == "git pull then git fetch":
        git(b.root, "fetch", "-q")  # the tracking branch already at the new history: its reflog still knows
    b.facts.set("db/replica", "The replica listens on port 5433.", source="user:admin")
    result = hosts.sync("b")
    remote = ["--git-dir", str(hosts.remote)]
    history = git(hosts.tmp, *remote, "log", "--format=%H", "--name-only", "HEAD")
    assert "facts/ops/deploy.md" not in history
    assert "facts/db/replica.md" in git(hosts.tmp, *remote, "ls-tree", "-r", "--name-only", "HEAD")
    assert any("rewritten" in w for w in result.warnings)
    assert not (b.root / "facts" / "ops" / "deploy.md").exists()


@pytest.mark.parametrize("local_change", [False, True])
def test_a_history_the_team_squashed_into_a_new_root_is_followed(hosts, local_change):
    """The team removes a secret by squashing the whole history into one new root commit (``checkout --orphan``)
    and force-pushes. Sync asked git for the merge base of two unrelated histories and stopped with git's exit
    status; it now treats it as any rewrite: only the commits made here since it last synced go on top."""
    hosts.sync("a")
    a = hosts.on("a")
    a.facts.set("ops/deploy", "Deploy with the key in the vault.", source="user:admin")
    hosts.sync("a")
    assert hosts.sync("b").pulled
    clean = hosts.tmp / "clean"
    git(hosts.tmp, "clone", "-q", str(hosts.remote), str(clean))
    branch = git(clean, "rev-parse", "--abbrev-ref", "HEAD")
    git(clean, "checkout", "-q", "--orphan", "squashed")
    git(clean, "rm", "-q", "--cached", "facts/ops/deploy.md")
    (clean / "facts" / "ops" / "deploy.md").unlink()
    git(clean, "commit", "-qm", "the whole history, squashed, without the deploy fact")
    git(clean, "push", "-q", "--force", "origin", f"squashed:{branch}")
    b = hosts.on("b")
    if local_change:
        b.facts.set("db/replica", "The replica listens on port 5433.", source="user:admin")
    result = hosts.sync("b")
    remote_files = git(hosts.tmp, "--git-dir", str(hosts.remote), "ls-tree", "-r", "--name-only", branch)
    assert "facts/ops/deploy.md" not in remote_files and "memvault.toml" in remote_files
    assert ("facts/db/replica.md" in remote_files) == local_change
    assert any("rewritten" in w for w in result.warnings)
    assert not (b.root / "facts" / "ops" / "deploy.md").exists()
    assert git(b.root, "rev-list", "--max-parents=0", "HEAD") == git(clean, "rev-parse", "squashed")


def test_a_remote_that_shares_no_history_with_this_clone_stops_the_sync_in_one_line(hosts, tmp_path):
    """A remote this clone never synced with, whose branch shares no commit with it (another vault's repository
    given by mistake): one line naming the remote and the branch, nothing changed."""
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", str(other))
    (other / "README").write_text("another project\n")
    git(other, "add", "README")
    git(other, "commit", "-qm", "another project")
    b = hosts.on("b")
    branch = git(b.root, "rev-parse", "--abbrev-ref", "HEAD")
    git(other, "branch", "-q", "-M", branch)
    git(b.root, "remote", "add", "elsewhere", str(other))
    before = git(b.root, "rev-parse", "HEAD")
    with pytest.raises(MemvaultError) as info:
        b.sync(remote="elsewhere")
    message = str(info.value)
    assert "\n" not in message and "elsewhere" in message and "no history" in message, message
    assert git(b.root, "rev-parse", "HEAD") == before


def test_an_append_during_a_syncs_push_does_not_wait_for_the_network(hosts, tmp_path):
    """Sync held the append lock (and the write lock) through its fetch and push: an agent's append, or its session
    hook, waited as long as the network did (without end on a hung push). Only the local steps hold them now."""
    import threading
    import time

    a = hosts.on("a")
    a.episodes.append("before the sync", source="user:ann")
    signals = tmp_path / "signals"
    signals.mkdir()
    hook = hosts.remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch '{signals}/pushing'\ni=0\n"
                    f"while [ ! -e '{signals}/go' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n")
    hook.chmod(0o755)
    done: dict[str, object] = {}

    def run(name: str, work) -> threading.Thread:
        def target():
            try:
                done[name] = work(Vault.open(a.root, embedder_factory=hosts.models))
            except BaseException as exc:  # reported by the asserts below
                done[name] = exc
        thread = threading.Thread(target=target)
        thread.start()
        return thread

    syncing = run("sync", lambda v: v.sync())
    for _ in range(400):
        if (signals / "pushing").exists():
            break
        time.sleep(0.025)
    assert (signals / "pushing").exists(), done
    appending = run("append", lambda v: v.episodes.append("during the push", source="user:ann"))
    appending.join(5)
    waited_for_the_push = appending.is_alive()
    (signals / "go").touch()
    appending.join(30)
    syncing.join(60)
    assert not waited_for_the_push
    assert getattr(done["sync"], "pushed", None) is True, done["sync"]
    assert not isinstance(done["append"], BaseException), done["append"]
    hook.unlink()
    hosts.sync("a")  # the line appended during the push goes with the next sync
    b = hosts.on("b")
    hosts.sync("b")
    assert {"before the sync", "during the push"} <= {e.text for e in b.episodes.list()}


# ------------------------------------------------------------------------------------------- remote names
def test_a_remote_url_with_credentials_is_never_printed_nor_kept(hosts, tmp_path):
    """``memvault sync --remote https://bob:PW@host/repo.git``: the URL, password and all, was printed ("pushed
    to https://bob:PW@.../master"), returned in --json and kept as a key of sync-tips.json in the local state."""
    from click.testing import CliRunner
    from memvault.interfaces.cli import Context, cli

    b = hosts.on("b")
    password, token = "Hunter2Pass", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
    for url in (f"https://bob:{password}@example.com/r.git", f"https://{token}@example.com/t.git"):
        git(b.root, "config", f"url.{hosts.remote}.insteadOf", url)
        b.facts.set(f"db/{len(url)}", "The replica listens on port 5433.", source="user:admin")
        secret = password if password in url else token
        runner = CliRunner()
        for args in ([], ["--json"]):
            done = runner.invoke(cli, ["--vault", str(b.root), "sync", "--remote", url, *args],
                                 obj=Context(embedder_factory=hosts.models))
            assert done.exit_code == 0, done.output
            assert secret not in done.output and "example.com" in done.output
        result = b.sync(remote=url)
        assert secret not in json.dumps(result.to_dict())
        for path in b.state_dir.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path
        git(b.root, "config", "--unset", f"url.{hosts.remote}.insteadOf")


def test_a_remote_named_like_an_option_is_a_name_never_an_option(hosts, tmp_path):
    """``memvault sync --remote '--upload-pack=CMD'`` ran CMD: the remote went to git ls-remote in the place of an
    option. And a remote git allows to be named ``-mirror`` could not be synced with at all. After ``--``, it is a
    name: the first is no repository (one line, nothing run), the second syncs."""
    b = hosts.on("b")
    ran = tmp_path / "ran"
    with pytest.raises(MemvaultError) as info:
        b.sync(remote=f"--upload-pack=touch {ran};")
    assert "\n" not in str(info.value) and not ran.exists()
    git(b.root, "remote", "add", "--", "-mirror", str(hosts.remote))
    b.facts.set("db/replica", "The replica listens on port 5433.", source="user:admin")
    assert b.sync(remote="-mirror").pushed
    assert "facts/db/replica.md" in git(b.root, "--git-dir", str(hosts.remote), "ls-tree", "-r", "--name-only",
                                        "HEAD")


@pytest.mark.parametrize("kind", ["fact", "runbook"])
def test_a_memory_edited_on_both_hosts_on_different_lines_is_never_merged_line_by_line(hosts, kind):
    """Two people edit one fact (or runbook) by hand, on different lines. The rebase merged the two edits into a
    text neither of them wrote, and pushed it with no check: a runbook no one reviewed, ready to run. As the docs
    say of a fact changed on both sides, sync stops before changing anything and names it."""
    a = hosts.on("a")
    if kind == "fact":
        a.facts.set("db/primary", "Primary: db01.\n\nReplica: db02.\n\nBackups: 03:15 UTC.", source="user:admin")
        rel, key = "facts/db/primary.md", "db/primary"
    else:
        script = hosts.tmp / "deploy.sh"
        script.write_text("#!/bin/sh\n# description: deploy\nmake build\necho one\necho two\necho three\nmake deploy\n")
        a.procedures.add("ops/deploy", script, source="user:admin")
        rel, key = "procedures/ops/deploy.sh", "procedures/ops/deploy.sh"
    hosts.sync("a")
    hosts.sync("b")
    path = a.root / rel
    text = path.read_text()
    first, last = ("db01", "03:15") if kind == "fact" else ("make build", "make deploy")
    path.write_text(text.replace(first, first + " (moved)"))
    hosts.sync("a")
    b = hosts.on("b")
    mine = text.replace(last, last + " --force")
    (b.root / rel).write_text(mine)
    before = git(b.root, "rev-parse", "HEAD")
    with pytest.raises(SyncConflict) as info:
        hosts.sync("b")
    assert info.value.keys == [key] and "\n" not in str(info.value)
    assert (b.root / rel).read_text() == mine
    assert git(b.root, "rev-parse", "HEAD^") == before  # its edit committed here, nothing of the remote's merged
    assert "(moved)" not in git(b.root, "show", f"HEAD:{rel}")
