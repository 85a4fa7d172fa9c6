"""Sync: several hosts sharing one vault through an ordinary git remote.

``sync(vault)`` is commit, ``git pull --rebase``, reindex, push — in that order, and never a force-push:

1. Pending changes to the vault's own paths (facts/, procedures/, inbox/, memvault.toml, .gitignore, and
   episodes/ when ``[episodes] track_in_git``) are committed, and nothing else: the vault may live in a
   subdirectory of a bigger repository whose other changes are not ours to commit.
2. The remote's work is pulled with ``git pull --rebase``, so history stays linear and each host's
   commits land on top of what the others pushed. Tracked episodes go to ``episodes/<host>/``, so hosts only
   conflict when they change the same fact, procedure or setting. On a conflict the rebase is aborted at once
   — the working tree is back at this host's last good version, which recall keeps serving — and
   :class:`SyncConflict` names the keys and how to resolve them by hand. The local commit is kept: nothing is
   lost. Uncommitted changes outside the vault are stashed around the pull and put back as they were.
3. When the pull changed files and an index exists, the index is synced by stat + hash. Changed text is indexed
   for keywords at once; its vectors are embedded now only if this process already has the model loaded, else
   at the next recall (up to ``[recall] embed_at_recall`` chunks) or ``memvault reindex``. A sync never pays for
   loading a model.
4. ``git push <remote> HEAD:refs/heads/<branch>``. When the remote moved meanwhile (the push is rejected as
   not a fast-forward), pull and push again, up to :data:`PUSH_ATTEMPTS` times.

Writers are held off for the duration (the vault's write lock, then the episode append lock), so no memvault
process changes a file under the rebase.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .episodes import host_name
from .errors import GitError, MemvaultError
from .fsutil import locked

if TYPE_CHECKING:
    from .gitstore import GitStore
    from .vault import Vault

#: How many times a push rejected because the remote moved is retried (each after a fresh pull).
PUSH_ATTEMPTS = 3
# Vault-relative paths that sync commits and pulls; "episodes" only when episodes are tracked in git.
VAULT_PATHS = ("facts", "procedures", "inbox", "memvault.toml", ".gitignore")
# Words git uses when a push is refused because the remote has commits we do not.
_REJECTED = ("rejected", "non-fast-forward", "fetch first", "failed to push some refs")


class SyncConflict(MemvaultError):
    """The pull stopped on a conflict: the same memory changed here and on the remote.

    ``keys`` are fact keys (``db/primary``) or, for anything that is not a fact, the vault-relative path;
    ``paths`` are the conflicting paths relative to the repository root. The rebase has been aborted.
    """

    def __init__(self, keys: list[str], paths: list[str], remote: str, branch: str) -> None:
        self.keys = keys
        self.paths = paths
        self.remote = remote
        self.branch = branch
        names = ", ".join(keys)
        verb = "changed" if len(keys) == 1 else "each changed"
        edit = ", ".join(paths)
        super().__init__(
            f"sync stopped: {names} {verb} here and on the remote; your version is kept and the remote's is not "
            f"merged; resolve with: git pull --rebase {remote} {branch}, edit {edit}, git add, "
            "git rebase --continue, then memvault sync"
        )


@dataclass
class SyncResult:
    """What one sync did."""

    remote: str
    branch: str
    committed: str | None = None                       # the commit of local changes, or None when there were none
    pulled: list[str] = field(default_factory=list)    # vault-relative paths the remote changed here
    pushed: bool = False                               # True when the remote branch moved to our HEAD
    reindexed: dict[str, Any] | None = None            # index sync summary, or None when not run
    push_attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "remote": self.remote,
            "branch": self.branch,
            "committed": self.committed,
            "pulled": list(self.pulled),
            "pushed": self.pushed,
            "reindexed": self.reindexed,
            "push_attempts": self.push_attempts,
        }


def sync(vault: Vault, *, remote: str | None = None, branch: str | None = None) -> SyncResult:
    """Commit the vault's pending changes, pull the remote's with a rebase, reindex what changed, and push.

    ``remote`` and ``branch`` default to the current branch's upstream, else ``origin`` and the current branch.
    A remote that does not have the branch yet is simply pushed to. Raises :class:`SyncConflict` when the same
    file changed here and on the remote (after aborting the rebase), :class:`GitError` for anything else git
    refuses (no repository, detached HEAD, unreachable remote, a push still rejected after
    :data:`PUSH_ATTEMPTS` tries). Never force-pushes.
    """
    git = vault.git
    if git is None:
        raise GitError(f"{vault.root} is not in a git repository: nothing to sync")
    remote, branch = _target(git, remote, branch)
    result = SyncResult(remote=remote, branch=branch)
    specs = _pathspecs(vault, git)
    try:
        with vault.write_lock(), locked(vault.episodes.lock_path):
            result.committed = _commit_pending(vault, git, specs)
            for attempt in range(1, PUSH_ATTEMPTS + 1):
                head = git.run("rev-parse", "HEAD")
                result.pulled = _merge_unique(result.pulled, _pull(vault, git, specs, remote, branch))
                if result.committed == head:
                    result.committed = _rebased(git, head)
                result.push_attempts = attempt
                try:
                    result.pushed = _push(git, remote, branch)
                    break
                except GitError as exc:
                    if not any(word in str(exc).lower() for word in _REJECTED):
                        raise
                    if attempt == PUSH_ATTEMPTS:
                        raise GitError(
                            f"sync: push to {remote} {branch} was rejected {PUSH_ATTEMPTS} times (the remote keeps "
                            f"moving, or refuses the push); your commits are safe here, run memvault sync again: "
                            f"{exc}"
                        ) from None
    finally:
        # Also when a later step failed: what an earlier pull brought in is on disk and must be searchable.
        if result.pulled:
            result.reindexed = _reindex(vault)
    return result


# ------------------------------------------------------------------------------------------------ steps
def _target(git: GitStore, remote: str | None, branch: str | None) -> tuple[str, str]:
    """The remote and branch to sync with: given, else the upstream, else origin and the current branch."""
    current = _try(git, "symbolic-ref", "--quiet", "--short", "HEAD")
    up_remote = _try(git, "config", "--get", f"branch.{current}.remote") if current else None
    up_merge = _try(git, "config", "--get", f"branch.{current}.merge") if current else None
    if up_merge and up_merge.startswith("refs/heads/"):
        up_merge = up_merge[len("refs/heads/"):]
    if remote is None:
        remote = up_remote or "origin"
    if branch is None:
        branch = up_merge if (up_merge and up_remote == remote) else current
    if not branch:
        raise GitError("sync: HEAD is detached; check out a branch or pass the branch to sync with")
    return remote, branch


def _try(git: GitStore, *args: str) -> str | None:
    try:
        return git.run(*args) or None
    except GitError:
        return None


def _pathspecs(vault: Vault, git: GitStore) -> list[str]:
    names = list(VAULT_PATHS) + (["episodes"] if vault.config.track_episodes else [])
    # ":(literal)" so a vault directory with glob characters in its name still matches only itself.
    return [":(literal)" + git.rel(vault.root / name) for name in names]


def _commit_pending(vault: Vault, git: GitStore, specs: list[str]) -> str | None:
    """Commit every changed, new or deleted file under the vault's own paths, and nothing else."""
    out = git.run("status", "--porcelain", "-z", "--untracked-files=all", "--", *specs, strip=False)
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
        if "R" in status or "C" in status:  # a staged rename: the next entry is the old path, gone too
            if i < len(entries) and entries[i]:
                rels.append(entries[i])
            i += 1
    if not rels:
        return None
    paths = [git.root / rel for rel in dict.fromkeys(rels)]
    host = host_name(vault)
    message = f"sync: {len(paths)} changed file{'s' if len(paths) != 1 else ''} from {host}"
    if vault.config.autocommit:
        return vault.commit(paths, message)
    # autocommit = false means "do not commit each write"; a sync is an explicit request to commit, and the
    # rebase below cannot run over uncommitted vault changes anyway.
    return git.commit(paths, message)


def _pull(vault: Vault, git: GitStore, specs: list[str], remote: str, branch: str) -> list[str]:
    """``git pull --rebase`` from remote/branch; the vault-relative paths it changed in the work tree."""
    try:
        heads = git.run("ls-remote", "--heads", remote, f"refs/heads/{branch}", env=_env(git))
    except GitError as exc:
        raise GitError(f"sync: cannot reach remote {remote}: {exc}") from None
    if not heads:
        return []  # the remote has no such branch yet: the first push creates it
    before = git.run("rev-parse", "HEAD")
    stashed = _stash(git)
    try:
        git.run("pull", "--rebase", "--no-edit", "--quiet", remote, branch, env=_env(git))
    except GitError as exc:
        if not _rebase_in_progress(git):
            raise GitError(f"sync: git pull --rebase {remote} {branch} failed: {exc}") from None
        conflicted = [p for p in git.run("diff", "--name-only", "-z", "--diff-filter=U", strip=False).split("\0") if p]
        git.run("rebase", "--abort", env=_env(git))
        raise SyncConflict([_key_for(vault, git, p) for p in conflicted], conflicted, remote, branch) from None
    finally:
        if stashed:
            _unstash(git)
    after = git.run("rev-parse", "HEAD")
    if after == before:
        return []
    changed = git.run("diff", "--name-only", "-z", "--no-renames", before, after, "--", *specs, strip=False)
    return [_vault_rel(vault, git, p) for p in changed.split("\0") if p]


def _rebased(git: GitStore, old: str) -> str | None:
    """The id our commit ``old`` has after the rebase put it on top (None if the rebase dropped it as empty)."""
    new = git.run("rev-parse", "HEAD")
    if new == old:
        return old
    same = git.run("log", "-1", "--format=%B", old) == git.run("log", "-1", "--format=%B", new)
    return new if same else None


def _push(git: GitStore, remote: str, branch: str) -> bool:
    """Push HEAD to remote/branch (a fast-forward only). True when the remote branch moved."""
    out = git.run("push", "--porcelain", remote, f"HEAD:refs/heads/{branch}", env=_env(git))
    # --porcelain: one line per ref, "<flag>\t<from>:<to>\t<summary>"; "=" means it was already up to date.
    flags = [line[0] for line in out.splitlines() if "\t" in line and line[:1] in " +-*=!"]
    return any(flag != "=" for flag in flags)


def _reindex(vault: Vault) -> dict[str, Any] | None:
    """Sync the index by stat + hash when there is one; embed now only with a model already loaded."""
    index = vault.index
    if not index.exists():
        return None
    loaded = vault._embedder  # the same rule as Vault.refresh_index: never load a model just for a sync
    report = index.sync((lambda: loaded) if loaded is not None else None)
    return report.to_dict()


# ------------------------------------------------------------------------------------------------ helpers
def _env(git: GitStore) -> dict[str, str]:
    # A rebase writes commits, so it needs a committer: the user's identity, or GitStore's stand-in when git
    # has none. Never prompt for credentials: sync is run by agents with no terminal.
    env = dict(git._env(None))
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def _stash(git: GitStore) -> bool:
    """Set aside uncommitted changes outside the vault (a vault inside a bigger repository), staged and not.

    They must neither block the rebase nor be committed. ``git pull --autostash`` would do this but puts staged
    changes back unstaged; here they come back exactly as they were. Untracked files are left in place.
    """
    if not git.run("status", "--porcelain", "--untracked-files=no"):
        return False
    git.run("stash", "push", "--quiet", "--message", "memvault sync: changes outside the vault", env=_env(git))
    return True


def _unstash(git: GitStore) -> None:
    try:
        git.run("stash", "pop", "--quiet", "--index")
    except GitError:
        try:  # the index cannot be restored as it was (the pull changed those files): keep the content at least
            git.run("stash", "pop", "--quiet")
        except GitError as exc:
            raise GitError(
                "sync: your uncommitted changes outside the vault could not be put back after the pull and are "
                f"kept in the stash; restore them with: git stash pop ({exc})"
            ) from None


def _rebase_in_progress(git: GitStore) -> bool:
    for name in ("rebase-merge", "rebase-apply"):
        with contextlib.suppress(GitError):
            if (git.root / git.run("rev-parse", "--git-path", name)).exists():
                return True
    return False


def _vault_rel(vault: Vault, git: GitStore, repo_rel: str) -> str:
    path = git.root / repo_rel
    try:
        return path.relative_to(vault.root).as_posix()
    except ValueError:
        return repo_rel


def _key_for(vault: Vault, git: GitStore, repo_rel: str) -> str:
    """``facts/db/primary.md`` -> ``db/primary``; any other path stays a vault-relative path."""
    rel = _vault_rel(vault, git, repo_rel)
    if rel.startswith("facts/") and rel.endswith(".md"):
        return rel[len("facts/"):-len(".md")]
    return rel


def _merge_unique(first: list[str], second: list[str]) -> list[str]:
    return list(dict.fromkeys([*first, *second]))


__all__ = ["PUSH_ATTEMPTS", "SyncConflict", "SyncResult", "sync"]
