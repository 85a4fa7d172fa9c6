"""A commit through git's plumbing (memvault.stores.gittree) makes the commit ``git commit --only`` makes: the same
tree, only the named paths, the user's staged work untouched, HEAD never moved over another commit, and nothing
changed when it cannot finish. Where git commit must run (hooks, a merge) it steps aside."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from memvault.rules.errors import GitError
from memvault.stores import gittree
from memvault.stores.gitstore import GitStore
from conftest import git


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    for rel, text in {"facts/db/primary.md": "port 5432\n", "facts/db/replica.md": "port 5433\n",
                      "facts/web/front.md": "nginx\n", "procedures/ops/hello.sh": "#!/bin/sh\necho hi\n",
                      "README": "the repo\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "procedures/ops/hello.sh").chmod(0o755)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "start")
    return root


def change(root: Path) -> list[Path]:
    """A change of every kind: an edit, a new file in a new directory, a new executable, a deletion that empties a
    directory, a deletion in a directory that stays."""
    (root / "facts/db/primary.md").write_text("port 6432\n")
    (root / "facts/dns/deep/resolver.md").parent.mkdir(parents=True)
    (root / "facts/dns/deep/resolver.md").write_text("unbound\n")
    (root / "procedures/ops/bye.sh").write_text("#!/bin/sh\necho bye\n")
    (root / "procedures/ops/bye.sh").chmod(0o755)
    (root / "facts/web/front.md").unlink()
    (root / "facts/db/replica.md").unlink()
    return [root / p for p in ("facts/db/primary.md", "facts/dns/deep/resolver.md", "procedures/ops/bye.sh",
                               "facts/web/front.md", "facts/db/replica.md")]


def test_the_plumbing_commit_is_the_commit_git_commit_makes(repo, tmp_path):
    twin = tmp_path / "twin"
    shutil.copytree(repo, twin, symlinks=True)
    fast, slow = GitStore(repo), GitStore(twin)
    slow.plumbing = False
    made = fast.commit(change(repo), "one of each", author="agent:x", trailers={"Memvault-Source": "agent:x"})
    slow.commit(change(twin), "one of each", author="agent:x", trailers={"Memvault-Source": "agent:x"})
    assert made == git(repo, "rev-parse", "HEAD")
    assert git(repo, "rev-parse", "HEAD^{tree}") == git(twin, "rev-parse", "HEAD^{tree}")
    assert git(repo, "log", "-1", "--format=%an <%ae>%n%B") == git(twin, "log", "-1", "--format=%an <%ae>%n%B")
    assert git(repo, "status", "--porcelain") == "" == git(twin, "status", "--porcelain")
    assert git(repo, "ls-files", "-s") == git(twin, "ls-files", "-s")  # the user's index: as git commit leaves it
    assert "100755" in git(repo, "ls-tree", "HEAD", "procedures/ops/bye.sh")
    subprocess.run(["git", "fsck", "--strict", "--no-progress"], cwd=repo, check=True, capture_output=True)
    assert fast.commit([repo / "facts/db/primary.md"], "nothing new") is None


def test_other_staged_work_is_neither_committed_nor_unstaged(repo):
    (repo / "README").write_text("staged by the user\n")
    git(repo, "add", "README")
    (repo / "scratch.txt").write_text("untracked\n")
    (repo / "facts/web/front.md").write_text("an unstaged edit\n")
    GitStore(repo).commit([repo / "facts/db/primary.md"], "nothing yet")  # no change: no commit
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    GitStore(repo).commit([repo / "facts/db/primary.md"], "the port")
    assert git(repo, "show", "--name-only", "--format=", "HEAD") == "facts/db/primary.md"
    assert sorted(git(repo, "status", "--porcelain").splitlines()) == [
        " M facts/web/front.md", "?? scratch.txt", "M  README"]
    assert git(repo, "show", ":README") == "staged by the user"


def test_a_commit_that_cannot_update_the_index_changes_nothing(repo, monkeypatch):
    store = GitStore(repo)
    head = git(repo, "rev-parse", "HEAD")
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    real = store._run

    def failing(args, data, env=None):
        if args[0] == "update-index":
            raise GitError("git update-index failed: the disk is full")
        return real(args, data, env)

    monkeypatch.setattr(store, "_run", failing)
    with pytest.raises(GitError, match="disk is full"):
        store.commit([repo / "facts/db/primary.md"], "refused")
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "diff", "--cached", "--name-only") == ""


def test_an_index_lock_a_killed_git_left_fails_the_commit_after_one_wait(repo, monkeypatch):
    """A git process killed while it held the index (``kill -9`` of a sync's process group, a reboot) leaves
    ``.git/index.lock``. The plumbing commit waited for it (LOCK_TRIES), undid its commit, and its caller, reading
    "index.lock" as another git at work, built the commit again 50 times: every write and sync hung 4 min 25 s
    before the same error. One wait, then the error naming the lock; HEAD and the index as they were."""
    monkeypatch.setattr(gittree, "LOCK_TRIES", 3)
    monkeypatch.setattr(gittree.time, "sleep", lambda s: None)
    store = GitStore(repo)
    head = git(repo, "rev-parse", "HEAD")
    (repo / ".git" / "index.lock").write_text("")
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    real, tries = store._run, []

    def counting(args, data, env=None):
        if args[0] == "update-index":
            tries.append(1)
        return real(args, data, env)

    monkeypatch.setattr(store, "_run", counting)
    with pytest.raises(GitError, match="index.lock"):
        store.commit([repo / "facts/db/primary.md"], "waits once")
    assert len(tries) == gittree.LOCK_TRIES
    assert git(repo, "rev-parse", "HEAD") == head
    (repo / ".git" / "index.lock").unlink()
    assert git(repo, "diff", "--cached", "--name-only") == ""


def test_a_commit_killed_before_its_index_update_is_mended_by_the_next_commit_of_those_paths(repo):
    """``kill -9`` between ``update-ref`` and ``update-index`` (a sync killed at its commit): HEAD has the commit,
    the index still the paths' old entries, so git status shows them staged as reverted (a deletion staged, the
    file untracked). The next sync committed them again, found the tree unchanged, and left the index so for
    ever: a person's next ``git commit`` reverted the fact and deleted the month file. The next commit of those
    paths puts their entries in the index as HEAD has them."""
    store = GitStore(repo)
    paths = change(repo)
    old = git(repo, "rev-parse", "HEAD")
    store.commit(paths, "killed before its index update")
    git(repo, "read-tree", old)  # the index as the killed commit left it
    assert git(repo, "diff", "--cached", "--name-only")
    (repo / "README").write_text("staged by the user\n")
    git(repo, "add", "README")
    assert store.commit(paths, "again") is None
    assert git(repo, "status", "--porcelain") == "M  README"  # the user's own staged work stays staged


def someone_commits(repo: Path) -> None:
    """Another writer's commit (of a file memvault's commit does not touch) lands."""
    (repo / "README").write_text("someone else's commit\n")
    git(repo, "commit", "-qm", "meanwhile", "--", "README")


def mine_is_on_top(repo: Path) -> None:
    assert git(repo, "log", "--format=%s", "-3").splitlines() == ["mine", "meanwhile", "start"]
    assert git(repo, "show", "HEAD:README") == "someone else's commit"
    assert git(repo, "show", "HEAD:facts/db/primary.md") == "port 6432"
    assert git(repo, "status", "--porcelain") == ""


def test_a_commit_landing_meanwhile_is_never_overwritten(repo, monkeypatch):
    """HEAD moves between reading it and moving it: update-ref refuses, and the commit is made again on top."""
    store = GitStore(repo)
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    real = store._run
    raced = []

    def racing(args, data, env=None):
        if args[0] == "update-ref" and not raced:
            raced.append(1)
            someone_commits(repo)
        return real(args, data, env)

    monkeypatch.setattr(store, "_run", racing)
    store.commit([repo / "facts/db/primary.md"], "mine")
    mine_is_on_top(repo)


def test_a_commit_landing_inside_git_commit_is_never_overwritten(repo):
    """Where git commit must run (here a hook), HEAD can move while it runs: git refuses to move HEAD ("cannot lock
    ref 'HEAD': is at ... but expected ..."), and the commit is made again on top instead of failing the write."""
    store = GitStore(repo)
    hook = repo / ".git/hooks/commit-msg"
    # once: another writer's commit lands after git commit has read HEAD and before it moves it
    hook.write_text('#!/bin/sh\nflag="$(git rev-parse --git-dir)/raced"\n[ -e "$flag" ] && exit 0\n: > "$flag"\n'
                    'git update-ref HEAD "$(git commit-tree HEAD^{tree} -p HEAD -m meanwhile)"\n')
    hook.chmod(0o755)
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    store.commit([repo / "facts/db/primary.md"], "mine")
    assert (repo / ".git/raced").exists()
    assert git(repo, "log", "--format=%s", "-3").splitlines() == ["mine", "meanwhile", "start"]
    assert git(repo, "show", "HEAD:facts/db/primary.md") == "port 6432"
    assert git(repo, "status", "--porcelain") == ""


def test_a_head_moving_while_read_is_read_again(repo, monkeypatch):
    """HEAD moves between the plumbing's reads of HEAD and of its trees: the commit is built again from the new
    HEAD, still by the plumbing (git commit's whole-index path is not needed for it)."""
    store = GitStore(repo)
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    real = store._run
    raced = []

    def racing(args, data, env=None):
        if args[0] == "cat-file" and not raced:
            # the trees are read at a commit that landed after HEAD was read
            raced.append(1)
            before = git(repo, "rev-parse", "HEAD")
            someone_commits(repo)
            after = git(repo, "rev-parse", "HEAD")
            lines = data.decode().splitlines()
            data = "".join(f"{before}\n" if line == "HEAD" else line.replace("HEAD", after, 1) + "\n"
                           for line in lines).encode()
        return real(args, data, env)

    monkeypatch.setattr(store, "_run", racing)
    git_real = store._git

    def no_commit(*args, **kwargs):
        assert args[0] not in ("add", "commit"), "the commit went through git commit"
        return git_real(*args, **kwargs)

    monkeypatch.setattr(store, "_git", no_commit)
    store.commit([repo / "facts/db/primary.md"], "mine")
    mine_is_on_top(repo)


def test_commits_in_one_repository_wait_for_each_other(repo):
    """git commit --only reads the index before locking it: two at once can write back an index without what the
    other just staged ("pathspec did not match"). Every memvault commit in a repository holds one lock, kept in
    the git directory, where no commit can put a link."""
    from memvault.rules.fsutil import locked
    from memvault.stores.gitstore import COMMIT_LOCK

    store = GitStore(repo)
    store.plumbing = False
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    done = threading.Event()
    worker = threading.Thread(target=lambda: (store.commit([repo / "facts/db/primary.md"], "mine"), done.set()))
    with locked(repo / ".git" / COMMIT_LOCK):
        worker.start()
        assert not done.wait(0.5)  # another writer holds the repository: this commit waits
        assert git(repo, "log", "--format=%s", "-1") == "start"
    worker.join(10)
    assert done.is_set() and git(repo, "log", "--format=%s", "-1") == "mine"


@pytest.mark.parametrize("plumbing", [True, False], ids=["plumbing", "git-commit"])
def test_concurrent_writers_lose_no_commit(repo, plumbing):
    stores = [GitStore(repo) for _ in range(4)]
    for store in stores:
        store.plumbing = plumbing
    errors = []

    def write(i):
        try:
            for j in range(5):
                path = repo / f"facts/w{i}/f{j}.md"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(f"{i} {j}\n")
                stores[i].commit([path], f"w{i} f{j}")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(git(repo, "log", "--format=%s").splitlines()) == 21
    assert git(repo, "status", "--porcelain") == ""


def test_hooks_and_merges_go_through_git_commit(repo):
    store = GitStore(repo)
    hook = repo / ".git/hooks/pre-commit"
    hook.write_text("#!/bin/sh\necho ran >> \"$(git rev-parse --git-dir)/hook-ran\"\n")
    hook.chmod(0o755)
    (repo / "facts/db/primary.md").write_text("port 6432\n")
    store.commit([repo / "facts/db/primary.md"], "with a hook")
    assert (repo / ".git/hook-ran").exists()  # git commit ran it
    # memvault's own hook, chaining nothing, does nothing for memvault's commits: no need for git commit
    hook.write_text(f"#!/bin/sh\n{gittree.HOOK_MARKER}: pre-commit\nexit 0\n")
    assert gittree.Repo(repo, store._git).blocker() is None
    (repo / ".git/hooks/pre-commit.memvault-chained").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".git/hooks/pre-commit.memvault-chained").chmod(0o755)
    assert "pre-commit" in gittree.Repo(repo, store._git).blocker()
    (repo / ".git/MERGE_HEAD").write_text(git(repo, "rev-parse", "HEAD") + "\n")
    assert "MERGE_HEAD" in gittree.Repo(repo, store._git).blocker()


def test_the_hook_marker_is_the_one_memvault_installs():
    from memvault.interfaces import githooks

    assert gittree.HOOK_MARKER == githooks.MARKER and gittree.CHAINED_SUFFIX == githooks.CHAINED_SUFFIX


def test_a_symlink_is_left_to_git_commit(repo):
    (repo / "facts/db/link.md").symlink_to("primary.md")
    made = gittree.commit(repo, gittree.Repo(repo, GitStore(repo)._git), ["facts/db/link.md"], "x", dict(os.environ),
                          GitStore(repo)._run)
    assert made is gittree.DECLINED
