"""Git as the history of the vault: commits that touch only the vault's own paths, and provenance look-ups.

Commands run through the ``git`` executable directly, ``git init`` too (gitpython's ``Repo.init`` ran it with the
environment of whatever hook memvault was called from), each without the variables that tie git to another
repository (:func:`memvault.rules.gitenv.other_repo_env`). A commit
holds the named paths and nothing else: whatever else the user has staged or changed in the repository (the vault
may live in ``infra/memory/`` of a bigger repo) is neither committed nor unstaged. It is made with git's plumbing
(:mod:`memvault.stores.gittree`: blobs, the trees on the paths, commit-tree, update-ref) — or, when a hook must
run or a merge is in progress, with ``git commit --only -- <paths>``.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..rules.errors import GitError, InvalidValue
from ..rules.fsutil import locked
from ..rules.gitenv import other_repo_env
from . import gittree

#: In the git directory (which no commit can reach): held by every commit memvault makes in the repository, by
#: every process and thread. ``git commit --only`` reads the index before it locks it, so two of them at once can
#: write back an index that lacks what the other had just staged; one at a time, they cannot.
COMMIT_LOCK = "memvault-commit.lock"


def blob_id(data: bytes, *, sha256: bool = False) -> str:
    """The id git gives these exact bytes (``git hash-object``), computed without a subprocess: SHA-1, or SHA-256 in
    a repository made with ``--object-format=sha256`` (:meth:`GitStore.blob_id` knows which)."""
    return (hashlib.sha256 if sha256 else hashlib.sha1)(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class LogEntry:
    commit: str
    author: str
    date: str
    message: str
    diff: str


_SAFE_EMAIL = re.compile(r"[^A-Za-z0-9._+-]+")


#: The first branch of a repository memvault creates, unless the user's git configures another.
DEFAULT_BRANCH = "main"
#: A git object name in hex (abbreviated, or whole: SHA-1 or SHA-256), never an option or a revision expression.
_OBJECT_NAME = re.compile(r"[0-9a-f]{4,64}")


def is_commit_id(value: Any) -> bool:
    """Whether ``value`` (read from a database or a file others can write) is a plain hex object name: handed to
    git, '--output=<file>' would be an option, not a commit."""
    return isinstance(value, str) and _OBJECT_NAME.fullmatch(value) is not None


class GitStore:
    """The git repository that holds a vault (possibly as a subdirectory of a larger work tree)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self._identity_env: dict[str, str] | None = None
        self._repo: gittree.Repo | None = None
        #: Commit with git's plumbing (:mod:`memvault.stores.gittree`) when it can: a write then costs what it
        #: changes, not a temporary index of the whole repository. False: always ``git commit --only``.
        self.plumbing = True
        #: The process writing the first commit-graph (:meth:`update_commit_graph` with ``wait=False``), if any.
        self.graph_writer: subprocess.Popen[bytes] | None = None

    # -- discovery ---------------------------------------------------------------------------------------
    @classmethod
    def discover(cls, path: Path) -> GitStore | None:
        """The repository whose work tree holds ``path``, or None when there is none."""
        try:
            out = subprocess.run(
                ["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False,
                env=other_repo_env(),  # a hook's GIT_DIR named another repository
            )
        except OSError:
            return None
        if out.returncode != 0 or not out.stdout.strip():
            return None
        return cls(Path(out.stdout.strip()))

    @classmethod
    def init(cls, path: Path) -> GitStore:
        """``git init`` on the branch the user's git is configured to start with (``init.defaultBranch``), else
        ``main`` (what README says; git itself would still say ``master`` without that setting). Run without the
        variables that tie git to another repository: ``memvault init`` run from another repository's hook (its
        GIT_DIR exported) re-initialised that repository, and the new vault's files had none."""
        env = other_repo_env()
        try:
            configured = subprocess.run(["git", "config", "--get", "init.defaultBranch"], capture_output=True,
                                        text=True, check=False, env=env).stdout.strip()
            done = subprocess.run(["git", "init", "--quiet", f"--initial-branch={configured or DEFAULT_BRANCH}", "--",
                                   str(path)], capture_output=True, text=True, check=False, env=env)
        except OSError as exc:
            raise GitError(f"cannot run git: {exc.strerror}") from None
        if done.returncode != 0:
            raise GitError(f"git init {path} failed: {' '.join(done.stderr.split()) or f'exit {done.returncode}'}")
        found = cls.discover(path)
        if found is None:
            raise GitError(f"git init {path} made no repository there")
        return found

    # -- helpers -----------------------------------------------------------------------------------------
    def rel(self, path: Path) -> str:
        """``path`` relative to the work tree root, in git's ``/`` form. The last part is not resolved: git tracks a
        link as itself (resolving a committed ``.gitignore -> /dev/zero`` named a path outside the tree)."""
        full = Path(os.path.abspath(path))
        return (full.parent.resolve() / full.name).relative_to(self.root).as_posix()

    def _git(self, *args: str, env: dict[str, str] | None = None, strip: bool = True) -> str:
        try:
            out = subprocess.run(
                ["git", *args], cwd=self.root, capture_output=True, text=True, check=False,
                env=other_repo_env(**(env or {})),
                # A path is bytes to git: a teammate's file whose name is not UTF-8 stopped every sync with a
                # traceback. Kept as the file system's own name (os.fsencode gives the bytes back to git).
                errors="surrogateescape",
            )
        except OSError as exc:
            raise GitError(f"cannot run git: {exc.strerror}") from None
        if out.returncode != 0:
            detail = " ".join((out.stderr or out.stdout).split()) or f"exit {out.returncode}"
            raise GitError(f"git {args[0]} failed: {detail}")
        return out.stdout.rstrip("\n") if strip else out.stdout

    def _env(self, author: str | None) -> dict[str, str]:
        """Author = the memory's source; committer = the user's identity, or a stand-in when git has none."""
        if self._identity_env is None:
            self._identity_env = {}
            try:
                self._git("var", "GIT_COMMITTER_IDENT")
            except GitError:
                import socket

                self._identity_env = {
                    "GIT_COMMITTER_NAME": "memvault",
                    "GIT_COMMITTER_EMAIL": f"memvault@{socket.gethostname() or 'localhost'}",
                }
        env = dict(self._identity_env)
        env["MEMVAULT_COMMIT"] = "1"  # memvault's own hooks skip commits memvault made (already validated)
        if author:
            env["GIT_AUTHOR_NAME"] = author
            env["GIT_AUTHOR_EMAIL"] = _SAFE_EMAIL.sub(".", author).strip(".") + "@memvault"
        elif self._identity_env:
            env["GIT_AUTHOR_NAME"] = self._identity_env["GIT_COMMITTER_NAME"]
            env["GIT_AUTHOR_EMAIL"] = self._identity_env["GIT_COMMITTER_EMAIL"]
        return env

    # -- writing -----------------------------------------------------------------------------------------
    def commit(
        self,
        paths: list[Path],
        message: str,
        *,
        author: str | None = None,
        trailers: dict[str, str] | None = None,
        checked: Mapping[Path, bytes | None] | None = None,
        refusal: Callable[[Path, bytes], str | None] | None = None,
    ) -> str | None:
        """Commit the current state of ``paths`` (new, changed or deleted) and nothing else.

        ``checked`` holds the bytes the caller checked (None: absent) and ``refusal`` the check: a file git reads
        with other bytes (saved again since, or changed by a clean filter) is committed as git reads it only when
        those bytes pass the check too, and otherwise as checked (a deletion, if it was absent) — the newer bytes
        stay in the work tree, uncommitted. When ``git commit`` must make the commit (a hook must run) it cannot
        be given bytes: a commit holding a refused file is undone, and :class:`InvalidValue` names the file.

        Returns the new commit id, or None when those paths hold no change. Another commit memvault makes in this
        repository waits for this one (:data:`COMMIT_LOCK`); retries briefly while another git process holds the
        index lock or moves HEAD meanwhile.
        """
        body = message
        if trailers:
            body += "\n\n" + "\n".join(f"{k}: {v}" for k, v in trailers.items())
        env = self._env(author)
        want = {self.rel(p): data for p, data in (checked or {}).items()}
        with locked(self._tree_info().git_dir / COMMIT_LOCK):
            return self._commit(paths, body, env, _Checked(self, want, refusal) if refusal is not None else None)

    def blob_id(self, data: bytes) -> str:
        """:func:`blob_id` in this repository's object format (its names are SHA-256 ones when it was made so)."""
        return blob_id(data, sha256=not self._tree_info().sha1)

    def _tree_info(self) -> gittree.Repo:
        if self._repo is None:
            self._repo = gittree.Repo(self.root, self._git)
        return self._repo

    def _commit(self, paths: list[Path], body: str, env: dict[str, str], checked: _Checked | None) -> str | None:
        if self.plumbing:
            made = self._commit_plumbing(paths, body, env, checked)
            if made is not gittree.DECLINED:
                return made  # type: ignore[return-value]
        rels = [self.rel(p) for p in paths if p.exists() or self._tracked(p)]
        if not rels:
            return None
        for attempt in range(50):
            saved = self._index_entries(rels)
            try:
                # -A stages deletions too; --ignore-errors is not used: an unreadable file must fail loudly.
                self._git("add", "-A", "--", *rels)
                # Only the index against HEAD (status would also walk the work tree: 12 ms against 4 at 10k files).
                if not self._git("diff", "--cached", "--name-only", "--no-renames", "--", *rels):
                    return None
                self._git("commit", "--quiet", "--only", "-m", body, "--", *rels, env=env)
                made = self._git("rev-parse", "HEAD")
            except GitError as exc:
                # Whatever happened, the index must not keep what was refused: the next plain `git commit`
                # would record it.
                self._restore_index(rels, saved)
                # another git process holds the index, or another commit moved HEAD after git commit read it
                # ("cannot lock ref 'HEAD': is at ... but expected ..."): git changed nothing, so again on top
                if _busy(exc) and attempt < 49:
                    time.sleep(0.1)
                    continue
                raise
            if checked is not None:
                checked.committed(made, rels, saved)
            return made
        return None  # pragma: no cover

    def _commit_plumbing(self, paths: list[Path], body: str, env: dict[str, str],
                         checked: _Checked | None) -> str | None | object:
        """:func:`memvault.stores.gittree.commit`: the same commit without a temporary index of the whole
        repository; tried again from the new HEAD when another commit landed meanwhile."""
        rels = [self.rel(p) for p in paths]
        for attempt in range(50):
            try:
                made = gittree.commit(self.root, self._tree_info(), rels, body, other_repo_env(**env), self._run,
                                      checked.verify if checked is not None else None)
            except GitError as exc:
                # HEAD moved: again from the top. Not the index's lock: gittree waited for it already (LOCK_TRIES),
                # and one a killed git left would have made each write wait 50 times as long before failing.
                if _busy(exc) and "index.lock" not in str(exc) and attempt < 49:
                    time.sleep(0.1)
                    continue
                raise
            if made is not gittree.MOVED:
                return made
        return gittree.DECLINED  # HEAD kept moving while it was read: git commit does it

    def _run(self, args: list[str], data: bytes | None, env: dict[str, str] | None = None) -> bytes:
        """git ``args`` in the work tree's root with ``data`` on stdin; its stdout as bytes (GitError on failure)."""
        try:
            out = subprocess.run(["git", *args], cwd=self.root, input=data, capture_output=True, check=False,
                                 env=other_repo_env(env))
        except OSError as exc:
            raise GitError(f"cannot run git: {exc.strerror}") from None
        if out.returncode != 0:
            detail = " ".join(out.stderr.decode("utf-8", "replace").split()) or f"exit {out.returncode}"
            raise GitError(f"git {args[0]} failed: {detail}")
        return out.stdout

    def _index_entries(self, rels: list[str]) -> dict[str, str]:
        """The git index entries of ``rels`` as ``update-index --index-info`` lines."""
        out = self._git("ls-files", "-s", "-z", "--", *rels, strip=False)
        entries = {}
        for record in out.split("\0"):
            if record:
                info, _, rel = record.partition("\t")
                entries[rel] = f"{info}\t{rel}"
        return entries

    def _restore_index(self, rels: list[str], saved: dict[str, str]) -> None:
        """Put the index entries of ``rels`` back as :meth:`_index_entries` saw them (best effort)."""
        try:
            now = self._index_entries(rels)
            gone = [rel for rel in now if rel not in saved]
            if gone:
                self._git("update-index", "--force-remove", "--", *gone)
            if saved:
                self._git_input("update-index", "-z", "--index-info",
                                data="".join(line + "\0" for line in saved.values()))
        except GitError:
            pass

    def _git_input(self, *args: str, data: str) -> str:
        return self._run(list(args), data.encode()).decode()

    def _tracked(self, path: Path) -> bool:
        return bool(self._git("ls-files", "--", self.rel(path)))

    # -- reading -----------------------------------------------------------------------------------------
    def last_commit(self, path: Path) -> str | None:
        """The last commit that changed ``path``, or None if it was never committed."""
        if not self.has_head():
            return None
        out = self._git("log", "-1", "--format=%H", "--", self.rel(path))
        return out or None

    def head_blob(self, path: Path) -> str | None:
        """The blob id of ``path`` in HEAD, or None when HEAD does not have it."""
        if not self.has_head():
            return None
        try:
            return self._git("rev-parse", "--verify", "--quiet", f"HEAD:{self.rel(path)}") or None
        except GitError:
            return None

    def provenance(self, paths: list[Path]) -> dict[Path, tuple[str | None, str | None]]:
        """(last commit, blob in HEAD) of each path, from two git calls whatever the number of paths; the
        history walk stops as soon as every path has its commit (see :meth:`last_changes`)."""
        if not paths:
            return {}
        rels = {self.rel(p): p for p in paths}
        blobs = self.head_blobs(paths)  # {} when there is no commit yet: then git log finds nothing either
        heads = {rel: blobs[path] for rel, path in rels.items() if path in blobs}
        commits = self.last_changes(list(rels), rels, heads)
        return {path: (commits.get(rel), heads.get(rel)) for rel, path in rels.items()}

    def last_changes(self, pathspecs: list[str], wanted: Iterable[str], heads: Mapping[str, str]) -> dict[str, str]:
        """The commit that gave each repository-relative path in ``wanted`` the blob ``heads`` names (its blob in
        HEAD), from one walk of the history of ``pathspecs`` that stops once each has one: the newest commit whose
        file at that path *is* that blob, so ``git show COMMIT:PATH`` is the text shown or run. A merge counts where
        it differs from a parent: a conflict resolved by hand is the merge's own change, where the plain log named
        a parent's (or, walking two branches by date, the newer side's edit that the merge did not keep). A path
        without a head blob (not in HEAD) gets the last commit that named it."""
        wanted = set(wanted)
        commits: dict[str, str] = {}
        named: dict[str, str] = {}  # the last commit that named each path: a fallback should no commit match
        proc = subprocess.Popen(["git", "log", "-m", "--raw", "--no-abbrev", "--no-renames", "-z",
                                 "--format=%x01%H", "--", *pathspecs],
                                cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=other_repo_env())
        try:
            assert proc.stdout is not None
            current, raw = "", None
            for token in _nul_tokens(proc.stdout):
                if raw is not None:  # the path a raw line is about
                    if token in wanted and token not in commits:
                        named.setdefault(token, current)
                        head = heads.get(token)
                        if head is None or raw == head:
                            commits[token] = current
                            if len(commits) == len(wanted):
                                break
                    raw = None
                    continue
                token = token.lstrip("\n")  # git starts a commit's raw lines on a line of their own
                if token.startswith("\x01"):
                    current = token[1:]
                elif token.startswith(":"):  # ":<mode> <mode> <blob before> <blob after> <status>"
                    fields = token.split()
                    raw = fields[3] if len(fields) > 3 else ""
        finally:
            proc.kill()
            proc.wait()
        return {**{rel: commit for rel, commit in named.items() if rel not in commits}, **commits}

    def head_blobs(self, paths: list[Path]) -> dict[Path, str]:
        """The blob id of each of ``paths`` in HEAD (absent: not in HEAD), from one git call."""
        if not paths:
            return {}
        rels = {self.rel(p): p for p in paths}
        try:
            tree = self._git("ls-tree", "-z", "HEAD", "--", *rels, strip=False)
        except GitError:
            return {}  # no commit yet
        out = {}
        for record in tree.split("\0"):
            if record:
                info, _, rel = record.partition("\t")
                if rel in rels:
                    out[rels[rel]] = info.split()[2]
        return out

    def status_paths(self, *pathspecs: str, untracked: str = "all") -> list[str]:
        """Repository-relative paths ``git status`` reports as changed, new or deleted (both sides of a rename)."""
        out = self.run("status", "--porcelain", "-z", f"--untracked-files={untracked}",
                        *(("--", *pathspecs) if pathspecs else ()), strip=False)
        entries = out.split("\0")
        rels: list[str] = []
        i = 0
        while i < len(entries):
            entry = entries[i]
            i += 1
            if len(entry) < 4:
                continue
            status, rel = entry[:2], entry[3:]
            rels.append(rel)
            if "R" in status or "C" in status:  # a staged rename: the next entry is the old path
                if i < len(entries) and entries[i]:
                    rels.append(entries[i])
                i += 1
        return list(dict.fromkeys(rels))

    def has_commit(self, commit: str) -> bool:
        """Whether this repository holds ``commit``."""
        try:
            return self._git("cat-file", "-t", commit) == "commit"
        except GitError:
            return False

    def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether ``newer`` contains ``older`` (a commit is its own ancestor)."""
        try:
            self._git("merge-base", "--is-ancestor", older, newer)
            return True
        except GitError:
            return False

    def has_head(self) -> bool:
        try:
            self._git("rev-parse", "--verify", "--quiet", "HEAD")
            return True
        except GitError:
            return False

    def log(self, path: Path, *, patch: bool = True, follow: bool = True, limit: int | None = None) -> list[LogEntry]:
        """History of one file, newest first, with each commit's diff of that file; with ``limit``, only the newest
        ``limit`` commits. ``follow`` goes on, as ``git log --follow`` does, into the file it was renamed or copied
        from (``-C --find-copies-harder``, git's own test) in the commit that created it.

        Never ``git log --follow`` itself: git reads every commit of the repository for it, changed-path Bloom
        filters unused (11 s at 30k commits, where the walk of one path answers in 0.1 s with a commit-graph). So one
        path-limited walk per name the file had, and one ``diff-tree`` of the commit that created each name.

        Fields are read between NUL bytes, the one byte no commit message, author name or text diff holds (a binary
        file's diff is one line saying so): any other separator can be written into a message by whoever commits."""
        if not self.has_head():
            return []
        entries: list[LogEntry] = []
        rel, rev = self.rel(path), "HEAD"
        while limit is None or len(entries) < limit:
            batch = self._path_log(rel, rev, patch, None if limit is None else limit - len(entries))
            entries += batch
            if not follow or not batch:
                break
            created = batch[-1]
            source = self._created_from(created.commit, rel)
            if source is None:
                break
            if patch:  # the diff git --follow shows for that commit: "rename from"/"copy from", then the change
                diff = self._git("diff-tree", "-p", "--text", "--no-textconv", "--no-ext-diff", "--no-color",
                                 "--no-commit-id", "-C", "--find-copies-harder",
                                 f"{created.commit}^", created.commit, "--", source, rel, strip=False)
                entries[-1] = LogEntry(created.commit, created.author, created.date, created.message,
                                       diff.strip("\n"))
            rel, rev = source, f"{created.commit}^"
        return entries

    def _path_log(self, rel: str, rev: str, patch: bool, limit: int | None) -> list[LogEntry]:
        args = ["log", "--format=%x00%H%x00%an%x00%aI%x00%B%x00", "--no-color"]
        if limit is not None:
            args.append(f"--max-count={max(0, limit)}")
        if patch:
            # The text's own diff, whatever a committed .gitattributes says (-diff: "Binary files differ"; diff=X:
            # this host's textconv for X): a teammate's change is never hidden from the history a person audits.
            args += ["-p", "--text", "--no-textconv", "--no-ext-diff"]
        fields = self._git(*args, rev, "--", rel, strip=False).split("\x00")[1:]
        entries = []
        for at in range(0, len(fields) - 4, 5):
            commit, author, date, message, diff = fields[at:at + 5]
            entries.append(LogEntry(commit, author, date, message.strip(), diff.strip("\n")))
        return entries

    def _created_from(self, commit: str, rel: str) -> str | None:
        """The path ``commit`` renamed or copied to ``rel`` (None: it created ``rel`` anew, or is a root commit)."""
        try:
            out = self._git("diff-tree", "-r", "-z", "--name-status", "-C", "--find-copies-harder", f"{commit}^",
                            commit, strip=False)
        except GitError:  # a root commit: no parent to come from
            return None
        fields = out.split("\x00")
        at = 0
        while at < len(fields) - 1:
            status = fields[at]
            if status[:1] in ("R", "C"):
                if fields[at + 2] == rel:
                    return fields[at + 1]
                at += 3
            else:
                at += 2
        return None

    def update_commit_graph(self, *, wait: bool = True) -> subprocess.Popen[bytes] | None:
        """Bring git's commit-graph, with changed-path Bloom filters, up to HEAD (what ``git maintenance`` keeps):
        with it, the history of one file skips every commit that did not touch it (0.6 s instead of 3 s at 30k
        commits). Incremental (``--split``): once there is one, only new commits are added (milliseconds).
        ``wait=False``: a repository without one gets it from a process left running (the first reads every commit:
        12 s at 30k), returned; the caller goes on without it. Raises GitError."""
        args = ["commit-graph", "write", "--reachable", "--changed-paths", "--split"]
        if not wait:
            info = self.root / self._git("rev-parse", "--git-path", "objects/info")  # a worktree's: the common one
            if not (info / "commit-graph").exists() and not (info / "commit-graphs" / "commit-graph-chain").exists():
                if self.graph_writer is not None and self.graph_writer.poll() is None:
                    return self.graph_writer
                try:
                    self.graph_writer = subprocess.Popen(["git", *args], cwd=self.root, stdin=subprocess.DEVNULL,
                                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                         env=other_repo_env(), start_new_session=True)
                except OSError as exc:
                    raise GitError(f"cannot run git: {exc.strerror}") from None
                # reaped when it ends, so a long-lived server keeps no zombie (a CLI exits without waiting for it)
                threading.Thread(target=self.graph_writer.wait, daemon=True).start()
                return self.graph_writer
        self._git(*args)
        return None

    def staged(self, stage: int, repo_rel: str) -> bytes | None:
        """The bytes of ``repo_rel`` at ``stage`` of the git index (0 merged; in a conflict 1 base, 2 ours, 3 theirs),
        or None when that stage holds no such file (deleted on that side)."""
        return self.blob_at(f":{stage}", repo_rel)

    def blob_at(self, rev: str, repo_rel: str) -> bytes | None:
        """The bytes of ``repo_rel`` in commit ``rev`` (or ``:<stage>``, a stage of the index), or None when it has no
        such file."""
        try:
            return self._run(["show", f"{rev}:{repo_rel}"], None)
        except GitError:
            return None

    def run(self, *args: str, **kwargs: Any) -> str:
        """Any other git command in this repository; raises :class:`GitError`."""
        return self._git(*args, **kwargs)


def _nul_tokens(stream: Any) -> Iterator[str]:
    """The NUL-separated fields of a binary ``stream`` (``git ... -z``), read as they come; names that are not UTF-8
    are decoded as the file system's (surrogate escapes), as ``os.fsdecode`` gives them."""
    rest = b""
    while chunk := stream.read1(1 << 16):
        *tokens, rest = (rest + chunk).split(b"\0")
        for token in tokens:
            yield os.fsdecode(token)
    if rest:
        yield os.fsdecode(rest)


def _stderr(exc: Any) -> str:
    text = (getattr(exc, "stderr", "") or str(exc)).strip()
    text = text.replace("stderr: ", "").strip().strip("'").strip()
    return " ".join(text.split())


def _busy(exc: GitError) -> bool:
    """git refused because another git process was at work: it held the index's lock, or its commit moved HEAD
    (or another ref) after this one read it. Nothing was changed; the same commit can be tried again."""
    return "index.lock" in str(exc) or "cannot lock ref" in str(exc)


class _Checked:
    """What :meth:`GitStore.commit` was told was checked: the bytes (by repository-relative path) and the check."""

    def __init__(self, store: GitStore, want: dict[str, bytes | None],
                 refusal: Callable[[Path, bytes], str | None]) -> None:
        self.store, self.want, self.refusal = store, want, refusal

    def verify(self, rel: str, blob: str | None) -> str | None:
        """:data:`gittree.Verify`: git's blob of the file when it is the one checked or passes the check as it
        is; otherwise the checked bytes' (or a deletion)."""
        if rel not in self.want or blob is None:
            return blob
        want = self.want[rel]
        if want is not None and self.store.blob_id(want) == blob:
            return blob
        if self._refused(rel, blob) is None:
            return blob
        if want is None:
            return None
        return self.store._run(["hash-object", "-w", "--no-filters", "--stdin"], want).decode().strip()

    def committed(self, made: str, rels: list[str], saved: dict[str, str]) -> None:
        """After ``git commit`` (which reads the files again itself): undo the commit ``made`` and put the index
        entries back when a file went in with bytes that were not checked and do not pass."""
        names = [r for r in rels if r in self.want]
        out = self.store._run(["cat-file", "--batch-check=%(objectname)"],
                              "".join(f"{made}:{r}\n" for r in names).encode()).decode().split("\n")
        for rel, line in zip(names, out):
            blob = line if line and " " not in line else None  # "<name> missing": deleted (SHA-1 or SHA-256 names)
            want = self.want[rel]
            if blob is None or (want is not None and self.store.blob_id(want) == blob):
                continue
            reason = self._refused(rel, blob)
            if reason is None:
                continue
            try:
                parent = self.store._git("rev-parse", "--verify", "--quiet", f"{made}^") or None
            except GitError:
                parent = None  # the repository's first commit
            self.store._git("update-ref", "-m", "memvault: commit undone, a file changed while it was committed",
                            *(["HEAD", parent, made] if parent else ["-d", "HEAD", made]))
            self.store._restore_index(rels, saved)
            raise InvalidValue(rel, f"saved again while it was being committed, and now {reason}; nothing was "
                                    "committed (the file is as it was saved)")

    def _refused(self, rel: str, blob: str) -> str | None:
        data = self.store._run(["cat-file", "blob", blob], None)
        return self.refusal(self.store.root / rel, data)

