"""A commit of a few paths without ``git commit``: git's objects and refs written directly (plumbing).

``git commit --only -- PATHS`` keeps the user's other staged work out of memvault's commit by building a
temporary index from HEAD — every entry of the repository, read and written again for each commit: about 45 ms of
a one-fact write in a vault of 10,000 facts. What a commit of a few files really needs is smaller: their blobs, a
new version of each tree on their paths (the rest of each tree is reused as it is), a commit object and a moved
ref. So :func:`commit` does just that:

1. ``git hash-object -w --stdin-paths``: the files' blobs (through the same filters ``git add`` applies), each
   settled by the caller's ``verify`` (the bytes the gate checked, when git read others);
2. ``git cat-file --batch``: HEAD and the trees on the changed paths, read once;
3. the new trees, computed here, written with ``git hash-object -t tree -w`` (their ids checked against ours);
4. ``git commit-tree``, then ``git update-ref HEAD NEW OLD`` — refused if HEAD moved meanwhile, so a commit never
   loses another one (the caller tries again from the new HEAD);
5. ``git update-index --index-info`` for these paths only: the user's index shows them as committed, and whatever
   else is staged stays staged, untouched. Should that fail, HEAD is moved back: nothing has changed.

It declines (returns :data:`DECLINED`, and the caller commits the usual way) whenever ``git commit`` would do
something this cannot: a hook that would run (memvault's own hooks do nothing for memvault's commits, unless they
chain another hook), a merge, rebase or cherry-pick in progress, no HEAD yet, a repository with SHA-256 object
names, a symlink or a directory among the paths.
"""
from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from ..rules.errors import GitError
from ..rules.fsutil import temp_dir, write_new_exclusive

#: The first line of every hook ``memvault hooks install`` writes (memvault.interfaces.githooks.MARKER).
HOOK_MARKER = "# memvault hook"
#: Hooks ``git commit`` runs; with one of them in place (and not memvault's own, which skip memvault's commits) a
#: commit goes through ``git commit`` so the hook runs.
COMMIT_HOOKS = ("pre-commit", "prepare-commit-msg", "commit-msg", "post-commit")
CHAINED_SUFFIX = ".memvault-chained"
#: Files in the git directory that say an operation is in progress (a partial commit is refused then).
IN_PROGRESS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply", "BISECT_LOG")
DECLINED = object()
#: HEAD moved between the reads of HEAD and of its trees: the caller builds the commit again from the new HEAD.
MOVED = object()
#: Tries (0.1 s apart) while another git process holds the index.
LOCK_TRIES = 50
_TREE = b"40000"
_ZERO = "0" * 40

Git = Callable[..., str]


class Repo:
    """What :func:`commit` needs to know of a repository, asked once: its git directory, hooks directory, object
    format and whether it trusts the executable bit."""

    def __init__(self, root: Path, git: Git) -> None:
        out = git("rev-parse", "--absolute-git-dir", "--git-path", "hooks", "--show-object-format").splitlines()
        self.git_dir = Path(out[0])
        self.hooks = (root / out[1]).resolve() if len(out) > 1 else self.git_dir / "hooks"
        self.sha1 = len(out) < 3 or out[2] == "sha1"
        try:
            self.filemode = git("config", "--bool", "core.fileMode") != "false"
        except GitError:
            self.filemode = True

    def blocker(self) -> str | None:
        """Why ``git commit`` must make this commit, or None."""
        if not self.sha1:
            return "not a SHA-1 repository"
        for name in IN_PROGRESS:
            if (self.git_dir / name).exists():
                return f"{name} in progress"
        for name in COMMIT_HOOKS:
            hook = self.hooks / name
            if os.access(hook, os.X_OK) and not _inert(hook):
                return f"the {name} hook must run"
        return None


def _inert(hook: Path) -> bool:
    """A hook of memvault's own with nothing chained: it exits at once for a commit memvault makes."""
    try:
        with open(hook, "rb") as f:
            ours = HOOK_MARKER.encode() in f.read(512)
    except OSError:
        return False
    return ours and not os.access(hook.with_name(hook.name + CHAINED_SUFFIX), os.X_OK)


#: ``verify(rel, blob)``: given the blob git hashed from the work tree for ``rel`` (None: no file there), the blob to
#: commit (None: the path is deleted). What makes the bytes committed the bytes the gate checked (GitStore.commit).
Verify = Callable[[str, "str | None"], "str | None"]


def blob_id(data: bytes) -> str:
    """The SHA-1 git names ``data`` by as a blob."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit(root: Path, repo: Repo, rels: list[str], message: str, env: dict[str, str],
           run: Callable[..., bytes], verify: Verify | None = None) -> str | None | object:
    """Commit the work-tree state of ``rels`` (repository-relative; new, changed or deleted) on top of HEAD and
    nothing else, each blob as ``verify`` settles it. Returns the commit id, None when they hold no change,
    :data:`DECLINED` or :data:`MOVED`. ``run(args, input, env)`` runs git in the work tree's root and returns its
    stdout (raising GitError)."""
    if repo.blocker() is not None or any("\n" in r or "\t" in r for r in rels):
        return DECLINED
    present: dict[str, os.stat_result] = {}
    for rel in rels:
        try:
            st = os.lstat(root / rel)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            return DECLINED  # a symlink or a directory: git add's rules, not ours
        present[rel] = st
    blobs: dict[str, str] = {}
    if present:
        names = list(present)
        ids = run(["hash-object", "-w", "--stdin-paths"], ("\n".join(names) + "\n").encode()).decode().split()
        blobs = dict(zip(names, ids))
    if verify is not None:
        for rel in rels:
            settled = verify(rel, blobs.get(rel))
            if settled is None:
                blobs.pop(rel, None)
            elif rel in present:
                blobs[rel] = settled

    dirs = sorted({"/".join(r.split("/")[:i]) for r in rels for i in range(r.count("/") + 1)},
                  key=lambda d: (d.count("/") if d else -1, d))
    head_out = run(["cat-file", "--batch"], ("HEAD\n" + "".join(f"HEAD:{d}\n" if d else "HEAD^{tree}\n"
                                                                 for d in dirs)).encode())
    objects = _read_batch(head_out)
    head, kind, body = objects[0]
    if kind != "commit":
        return DECLINED
    head_tree = body.split(b"\n", 1)[0].split()[1].decode()
    trees = {d: _parse_tree(b) if k == "tree" else {} for d, (_sha, k, b) in zip(dirs, objects[1:])}
    if objects[1][0] != head_tree:
        return MOVED  # HEAD moved while it was read: again from the new HEAD

    # bottom-up: files into their directories, then each directory into its parent
    modes: dict[str, bytes] = {}
    for rel in rels:
        parent, _, name = rel.rpartition("/")
        entries = trees[parent]
        if rel in blobs:
            modes[rel] = _mode(present[rel], entries.get(name.encode()), repo.filemode)
            entries[name.encode()] = (modes[rel], bytes.fromhex(blobs[rel]))
        else:
            entries.pop(name.encode(), None)
    written: dict[str, bytes] = {}
    root_id = ""
    for d in sorted(dirs, key=lambda d: -d.count("/") if d else 1):
        data = _serialize(trees[d])
        tree_id = hashlib.sha1(b"tree %d\0" % len(data) + data).hexdigest()
        if d:
            parent, _, name = d.rpartition("/")
            if trees[d]:
                trees[parent][name.encode()] = (_TREE, bytes.fromhex(tree_id))
                written[tree_id] = data
            else:
                trees[parent].pop(name.encode(), None)  # git keeps no empty directory
        else:
            root_id = tree_id
            written[tree_id] = data
    lines = [f"{modes[r].decode()} {blobs[r]}\t{r}" if r in blobs else f"0 {_ZERO}\t{r}" for r in rels]
    if root_id == head_tree:
        # Nothing to commit. The index may still hold other entries for these paths: a commit killed between its
        # update-ref and its update-index left them so (staged as reverted), and the next commit of the paths is
        # the one chance to mend it. Only when it differs: the index lock is taken for nothing otherwise.
        if run(["diff", "--cached", "--name-only", "-z", "HEAD", "--", *(f":(literal){r}" for r in rels)], None):
            run(["update-index", "-z", "--index-info"], "".join(line + "\0" for line in lines).encode())
        return None
    _write_trees(written, run)
    new = run(["commit-tree", root_id, "-p", head, "-F", "-"], message.encode(), env).decode().strip()
    run(["update-ref", "-m", f"commit: {message.splitlines()[0] if message else ''}", "HEAD", new, head], None)
    for attempt in range(LOCK_TRIES):
        try:
            run(["update-index", "-z", "--index-info"], "".join(line + "\0" for line in lines).encode())
            return new
        except GitError as exc:
            if "index.lock" in str(exc) and attempt < LOCK_TRIES - 1:
                time.sleep(0.1)  # another git process holds the index: wait, the commit is already in
                continue
            try:
                run(["update-ref", "-m", "memvault: commit undone, the index could not be updated", "HEAD", head,
                     new], None)
            except GitError:
                raise GitError(f"committed {new[:12]}, but the index could not be updated ({exc}) and another "
                               f"commit followed; run 'git reset -q -- {' '.join(rels)}'") from None
            raise
    return new  # pragma: no cover


def _mode(st: os.stat_result, old: tuple[bytes, bytes] | None, filemode: bool) -> bytes:
    if not filemode and old is not None:
        return old[0]
    return b"100755" if st.st_mode & stat.S_IXUSR else b"100644"


def _read_batch(out: bytes) -> list[tuple[str, str, bytes]]:
    """``git cat-file --batch`` output: (id, type, body) per request; ("", "missing", b"") when absent."""
    objects = []
    i = 0
    while i < len(out):
        nl = out.index(b"\n", i)
        header = out[i:nl].split()
        if len(header) == 2 and header[1] == b"missing":
            objects.append(("", "missing", b""))
            i = nl + 1
            continue
        size = int(header[2])
        objects.append((header[0].decode(), header[1].decode(), out[nl + 1:nl + 1 + size]))
        i = nl + 1 + size + 1
    return objects


def _parse_tree(body: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    entries = {}
    i = 0
    while i < len(body):
        space = body.index(b" ", i)
        nul = body.index(b"\0", space)
        entries[body[space + 1:nul]] = (body[i:space], body[nul + 1:nul + 21])
        i = nul + 21
    return entries


def _serialize(entries: dict[bytes, tuple[bytes, bytes]]) -> bytes:
    """A tree object's body, entries in git's order (a directory sorts as if its name ended in "/")."""
    order = sorted(entries, key=lambda n: n + b"/" if entries[n][0] == _TREE else n)
    return b"".join(entries[n][0] + b" " + n + b"\0" + entries[n][1] for n in order)


def _write_trees(trees: dict[str, bytes], run: Callable[..., bytes]) -> None:
    with temp_dir("memvault-tree-") as tmp:
        paths = []
        for tree_id, data in trees.items():
            path = os.path.join(tmp, tree_id)
            write_new_exclusive(Path(path), data, mode=0o644)
            paths.append(path)
        ids = run(["hash-object", "-w", "-t", "tree", "--no-filters", "--stdin-paths"],
                  ("\n".join(paths) + "\n").encode()).decode().split()
    if ids != list(trees):
        raise GitError("git hash-object wrote other trees than the ones computed; nothing was committed")
