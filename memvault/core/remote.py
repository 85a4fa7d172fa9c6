"""Sync: several hosts sharing one vault through an ordinary git remote.

``sync`` is commit, fetch, rebase, reindex, push — in that order, and never a force-push:

1. Pending changes to the vault's own paths (facts/, procedures/, memvault.toml, .gitignore, episodes/ when
   ``[episodes] track_in_git``, inbox/ only when ``[trust] share_inbox``) are committed, and nothing else: the vault
   may live in a subdirectory of a bigger repository whose other changes are not ours to commit. They are edits made
   behind memvault's back, so each goes through the write gate's checks (:meth:`WriteGate.commit_edits`): a file
   holding a secret, a symlink, a temp file, broken front matter... stays here uncommitted, named with its reason,
   and the rest is committed and pushed.
2. The remote branch is fetched. Before anything in the work tree moves, the files the remote changed are compared
   with this repository's own uncommitted changes outside the vault (staged, unstaged, untracked): if one file is in
   both, sync stops and touches nothing — a stash pop over it would write conflict markers into the user's file.
   It also stops when the remote's commits put anything at ``.memvault`` (where older memvaults kept a host's
   index and state: nothing reads it now, but whoever commits there is up to something).
3. The local commits are rebased onto the remote's, with the user's other uncommitted changes set aside and put back
   exactly as they were. Tracked episodes go to each clone's own ``episodes/<folder>/``, so hosts only conflict when
   they change the same fact, procedure or setting (a clone whose folder the remote's commits add lines to is told,
   draws a new one and takes the lines it added there with it: :mod:`memvault.core.episode_sync`; a month file kept
   untracked here that the remote's commits add is set aside, and its lines put back after); on such a conflict the
   rebase is aborted at once (the work tree is back at this host's last good version, which recall keeps serving)
   and :class:`SyncConflict` names the keys.
4. The index is told which files the pull changed (text at once; vectors when a warm model is at hand).
5. ``git push <remote> HEAD:refs/heads/<branch>``; when the remote moved meanwhile, fetch, rebase and push again,
   up to :data:`PUSH_ATTEMPTS` times. A push the remote refuses for any other reason (its hook) stops at once, with
   the remote's reason.

A sync killed in the middle of its rebase is undone by the next one (:mod:`memvault.core.sync_journal`).

Writers are held off for the duration (the vault's write lock, then the episode append lock).
"""
from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..rules.errors import GitError, MemvaultError, SyncConflict
from ..rules.fsread import read_regular_if_there
from ..rules.markup import printable_line
from ..rules.fsutil import atomic_write, ensure_dir, is_temp_name, read_regular, remove, remove_stale_temp
from .episode_sync import (MOVED_TRAILER, give_up, month_file, move_own_lines, put_aside_back, set_aside,
                           shared_folders)
from . import sync_journal
from .gate import WriteGate
from .lifecycle import apply_records
from .purges import RECORDS
from ..stores.episodes import merge_lines
from ..stores.gitstore import GitStore
from ..rules.timeutil import age_text
from ..rules.trust import Op

#: How many times a push rejected because the remote moved is retried (each after a fresh pull).
PUSH_ATTEMPTS = 3
#: The reasons git gives, in the status of a refused ref (never translated), when the remote has commits this clone
#: does not (or another push was updating the branch at that moment): fetched, rebased and pushed again. Any other
#: refusal (a hook's, a protected branch) stops the sync at once with the remote's reason.
_MOVED = ("fetch first", "non-fast-forward", "cannot lock ref", "failed to update ref")


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
    #: vault-relative paths of changed files kept out of the commit, with the reason (they stay uncommitted here)
    refused: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: A team's shared index, after the push: what was published to it, or why nothing could be (None: nothing
    #: to say, or no team).
    shared_index: str | None = None
    #: True when the repository has no remote at all: the pending edits were committed and nothing was pulled or
    #: pushed.
    local_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"local_only": self.local_only, "remote": self.remote, "branch": self.branch, "committed": self.committed, "pulled": list(self.pulled),
                "pushed": self.pushed, "reindexed": self.reindexed, "push_attempts": self.push_attempts,
                "refused": dict(self.refused), "shared_index": self.shared_index, "warnings": list(self.warnings)}


def sync(gate: WriteGate, *, source: str, remote: str | None = None, branch: str | None = None) -> SyncResult:
    """Commit the vault's pending changes, pull the remote's with a rebase, reindex what changed, and push.

    Raises :class:`SyncConflict` when the same file changed here and on the remote (after aborting the rebase), or
    when the remote changed a file that has uncommitted changes outside the vault (before touching anything);
    :class:`GitError` for anything else git refuses. Never force-pushes.
    """
    gate.require(Op.SYNC, source)
    git = gate.git
    if git is None:
        raise GitError(f"{gate.root} is not in a git repository: nothing to sync")
    # HEAD is detached during a rebase: one a killed sync left is undone, any other is said before anything reads
    # or writes HEAD.
    mended: list[str] = []
    sync_journal.mend(gate, git, source, mended)
    # A new vault has no remote yet: sync then commits what was edited by hand and says so, instead of failing
    # on the remote it cannot reach (a newcomer's first sync). A remote named on the command line must exist.
    local_only = remote is None and not _try(git, "remote")
    remote, branch = _target(git, remote, branch)
    result = SyncResult(remote=shown_remote(remote), branch=branch, local_only=local_only, warnings=mended)
    specs = _pathspecs(gate, git)
    touched: list[Path] = []
    # The write and append locks are held for the steps that read or change the work tree and HEAD, never while
    # the network is waited for: an agent's append (or its session hook) waited as long as a fetch or a push did,
    # without end on a hung one. Syncs of this vault run one at a time (sync.lock) all through.
    try:
        with gate.sync_lock():
            for attempt in range(1, PUSH_ATTEMPTS + 1 if not local_only else 2):
                fetched, tracked = _fetch(git, remote, branch) if not local_only else (None, None)
                with gate.lock(source, result.warnings), gate.episodes.lock():
                    if attempt == 1:
                        result.warnings += _fix_ignore_rule(gate) + _left_in_stash(git)
                    back, said = put_aside_back(gate, git)  # what a sync killed after its pull left set aside
                    touched += back
                    result.warnings += said
                    # A purge recorded on another host (or here, pulled by plain git) takes this host's lines of
                    # its source before they are committed: else this sync pushed the purged text back.
                    result.warnings += apply_records(gate, git, ["HEAD", *([fetched] if fetched else [])],
                                                     source=source)
                    # what was edited by hand, and (tracked) appended while the last push was waited for
                    pending = pending_edits(gate, git)
                    pending, removed = _drop_stale_temps(git, pending)
                    result.warnings += removed
                    committed = gate.commit_edits(pending, source=source, message=_message(gate, len(pending)))
                    result.committed = committed.commit or result.committed
                    touched += committed.paths
                    result.refused.update({p.relative_to(gate.root).as_posix(): r
                                           for p, r in committed.refused.items()})
                    result.warnings += committed.warnings
                    if local_only:
                        break
                    head = _tip(git)
                    pulled = _integrate(gate, git, specs, remote, branch, fetched, result.warnings, source,
                                        tracked=tracked)
                    result.pulled = list(dict.fromkeys([*result.pulled, *pulled]))
                    if result.committed == head:
                        result.committed = _rebased(git, head)
                    tip = git.run("rev-parse", "HEAD")
                result.push_attempts = attempt
                try:
                    result.pushed = _push(git, remote, branch, tip, fetched)
                    remember_tip(gate, remote, branch, tip)
                    break
                except _Moved as exc:
                    if attempt == PUSH_ATTEMPTS:
                        raise GitError(
                            f"sync: push to {shown_remote(remote)} {branch} was rejected {PUSH_ATTEMPTS} times (the remote keeps "
                            f"moving); your commits are safe here, run memvault sync again: {_remote_says(str(exc))}"
                        ) from None
    finally:
        # Also when a later step failed: what an earlier pull brought in is on disk and must be searchable.
        # What the pull brought in, and what was committed from the work tree (edits made behind memvault's back).
        touched += [gate.root / rel for rel in result.pulled]
        if touched and gate.index.exists():
            before = gate.index.pending()
            result.warnings += gate.tell_index(list(dict.fromkeys(touched)))
            result.reindexed = {"files_changed": len(result.pulled), "pending_vectors": gate.index.pending(),
                                "pending_before": before}
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


def shown_remote(remote: str) -> str:
    """``remote`` as it is said and kept: a URL without its user part (``user:password@``, or a token given as the
    user), which ``--remote`` may be given with and git itself never prints."""
    scheme, sep, rest = remote.partition("://")
    where, slash, path = rest.partition("/")
    if not sep or "@" not in where:
        return remote
    return f"{scheme}://{where.rpartition('@')[2]}{slash}{path}"


def _try(git: GitStore, *args: str) -> str | None:
    try:
        return git.run(*args) or None
    except GitError:
        return None


def _vault_names(gate: WriteGate) -> list[str]:
    names = ["facts", "procedures", RECORDS, "memvault.toml", ".gitignore"]
    if gate.config.track_episodes:
        names.append("episodes")
    if gate.config.trust.share_inbox:
        names.append("inbox")
    return names


def _pathspecs(gate: WriteGate, git: GitStore, names: Sequence[str] | None = None) -> list[str]:
    # ":(literal)" so a vault directory with glob characters in its name still matches only itself.
    return [":(literal)" + git.rel(gate.root / name) for name in (_vault_names(gate) if names is None else names)]


def pending_edits(gate: WriteGate, git: GitStore) -> list[Path]:
    """Every changed, new or deleted file under the vault's own paths (what sync commits first), and nothing else."""
    return [git.root / rel for rel in git.status_paths(*_pathspecs(gate, git))]


#: A temp file of memvault's own older than this (seconds) is a killed write's, never a live one's: an atomic write
#: renames its temp file within moments of making it.
STALE_TEMP_AGE = 3600


def _drop_stale_temps(git: GitStore, pending: list[Path]) -> tuple[list[Path], list[str]]:
    """``pending`` less the temp files a killed memvault write left (``kill -9`` between writing and renaming, see
    :func:`memvault.rules.fsutil.remove_stale_temp`), removed, and a line naming each. Only untracked files of
    exactly that name, not links, older than :data:`STALE_TEMP_AGE`: a younger one is refused by the commit's checks
    and named, as any temp file is; a file of that name git tracks is a teammate's, never removed here. Without
    this, every sync named the same leftover until it was deleted by hand."""
    candidates = [p for p in pending if is_temp_name(p.name)]
    if not candidates:
        return pending, []
    rels = [p.relative_to(git.root).as_posix() for p in candidates]
    tracked = set(git.run("--literal-pathspecs", "ls-files", "-z", "--", *rels, strip=False).split("\0"))
    gone, said = set(), []
    for path, rel in zip(candidates, rels):
        if rel in tracked:
            continue
        age = remove_stale_temp(path, STALE_TEMP_AGE)
        if age is not None:
            gone.add(path)
            said.append(f"{rel}: removed, a temp file a killed memvault write left {age_text(age)} ago (never "
                        "committed)")
    return [p for p in pending if p not in gone], said


def _message(gate: WriteGate, count: int) -> str:
    host = gate.episodes.host or "this host"
    # autocommit = false means "do not commit each write"; a sync is an explicit request to commit, and the
    # rebase below cannot run over uncommitted vault changes anyway.
    return f"sync: {count} changed file{'s' if count != 1 else ''} from {host}"


#: The ignore rule memvault wrote before: it matched only a folder, so a link named .memvault could be committed.
_OLD_RULE = ".memvault/"


def _fix_ignore_rule(gate: WriteGate) -> list[str]:
    """An older vault's ``.gitignore`` ignores ``.memvault/`` (a folder only): rewritten to ``.memvault`` (a file or
    a link too), so a link there is never committed by accident; the fix is committed with the sync."""
    path = gate.root / ".gitignore"
    try:  # never through a link, nor without end (a pulled .gitignore -> /dev/zero)
        text = read_regular(path, limit=1 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError, MemvaultError):
        return []
    lines = text.split("\n")
    if _OLD_RULE not in lines:
        return []
    atomic_write(path, "\n".join(".memvault" if line == _OLD_RULE else line for line in lines).encode("utf-8"))
    return [".gitignore: the rule '.memvault/' ignored only a folder, so a link named .memvault could be committed "
            "and replace this host's index and state; now '.memvault' (committed with this sync)"]


def _fetch(git: GitStore, remote: str, branch: str) -> tuple[str | None, str | None]:
    """Fetch remote/branch (the network: no vault lock held); its tip, or None when the remote has no such branch
    yet (the first push creates it), and what the remote-tracking branch held before (the fetch moves it, and a
    fresh clone keeps no reflog of it)."""
    tracked = _try(git, "rev-parse", "--verify", "--quiet", f"refs/remotes/{remote}/{branch}^{{commit}}")
    try:
        heads = git.run("ls-remote", "--heads", "--", remote, f"refs/heads/{branch}", env=_env(git))
    except GitError as exc:
        raise GitError(f"sync: cannot reach remote {shown_remote(remote)}: {exc}") from None
    if not heads:
        return None, tracked
    git.run("fetch", "--quiet", "--", remote, f"refs/heads/{branch}", env=_env(git))
    return git.run("rev-parse", "FETCH_HEAD"), tracked


def _integrate(gate: WriteGate, git: GitStore, specs: list[str], remote: str, branch: str, fetched: str | None,
               warnings: list[str], source: str, *, tracked: str | None = None) -> list[str]:
    """Rebase onto the fetched tip of remote/branch (under the write and append locks); the vault-relative paths
    that changed in the work tree. ``tracked``: the remote-tracking branch before the fetch."""
    if fetched is None:
        return []
    before = git.run("rev-parse", "HEAD")
    # What this host last had of the remote: when the remote no longer contains it, its history was rewritten
    # (a secret force-pushed away), and only the commits made here since are ours to put back on top; rebasing
    # everything not on the remote pushed the removed commits back.
    last = _last_had(gate, git, remote, branch, before, tracked)
    rewritten = (last is not None and last != fetched and git.has_commit(last) and not git.is_ancestor(last, fetched)
                 and git.is_ancestor(last, before))
    base = _try(git, "merge-base", before, fetched)
    if base is None:  # no commit in common: a history squashed into a new root, or another repository
        if not rewritten or last is None:
            raise GitError(f"sync stopped before changing anything: {shown_remote(remote)} {branch} shares no history with this "
                           "clone (another repository, or one re-created, and this clone never synced with its old "
                           "one); check `git remote -v`, or clone it afresh")
        base = last  # what this host last had of the remote: the commits made here since are put on top
    if not rewritten and base == fetched:
        return []  # nothing new on the remote
    _refuse_overlap(gate, git, base, before, fetched, remote, branch)
    # After a rewrite the merge base is from before it: the rewritten commits hold this clone's own lines pushed since
    # then, which are no sign of another writer. What this host last had of the remote is.
    shared = shared_folders(gate, git, last if rewritten and last is not None else base, fetched)
    # Where this clone's lines in a shared current folder go if the rebase meets them: drawn now, recorded (by
    # give_up) only once the rebase went through.
    folders, current = gate.episodes.folders, gate.episodes.host
    successor = folders.draw() if folders is not None and not gate.episodes.named and current in shared else None
    set_aside(gate, git, before, fetched)
    stashed = _stash(git)
    sync_journal.begin(gate, git, before, fetched, stashed)  # a sync killed from here on is undone by the next
    try:
        try:
            onto = ("--onto", fetched, last) if rewritten and last is not None else (fetched,)
            git.run(*NO_UNION, "rebase", "--quiet", *onto, env=_env(git))
        except GitError as exc:
            if not _rebase_in_progress(git):
                raise GitError(f"sync: git rebase onto {shown_remote(remote)}/{branch} failed: {exc}") from None
            try:
                conflicted = _merge_shared_lines(gate, git, shared, successor)
            except BaseException:  # never leave a rebase half done: the work tree goes back to this host's version
                if _rebase_in_progress(git):
                    git.run("rebase", "--abort", env=_env(git))
                raise
            if conflicted:
                git.run("rebase", "--abort", env=_env(git))
                raise SyncConflict([_key_for(gate, git, p) for p in conflicted], conflicted, shown_remote(remote), branch) from None
            for _ in range(3):  # stopped on no conflict: a file was saved (or only touched) under it, git rescheduled
                if not _rebase_in_progress(git) or git.run("diff", "--name-only", "HEAD"):
                    break
                try:  # a file touched but as it was: its pick again
                    _continue_rebase(git)
                except GitError:
                    conflicted = _merge_shared_lines(gate, git, shared, successor) if _rebase_in_progress(git) else []
                    if conflicted:
                        git.run("rebase", "--abort", env=_env(git))
                        raise SyncConflict([_key_for(gate, git, p) for p in conflicted], conflicted,
                                           shown_remote(remote), branch) from None
            if _rebase_in_progress(git):  # a save that changed a file: undone, the save kept, for the next sync
                kept = sync_journal.abort_keeping_saves(git, _env(git))
                raise GitError(f"sync stopped, nothing changed: {', '.join(kept) or 'a file'} changed while it rebased "
                               f"onto {shown_remote(remote)}/{branch} (kept as saved, uncommitted); run memvault sync again")
        except BaseException:  # Ctrl-C while git rebased: never leave it half done
            if _rebase_in_progress(git):
                git.run("rebase", "--abort", env=_env(git))
            raise
    finally:
        left = _rebase_in_progress(git)  # one the abort above could not undo: the next sync's, by the journal
        try:
            warnings += put_aside_back(gate, git)[1]
        finally:
            if not left:
                try:
                    if stashed:
                        _unstash(git)
                finally:
                    sync_journal.end(gate)
    # Given up only once the rebase went through: a sync stopped by a fact's conflict finds the same folders next time.
    warnings += give_up(gate, shared, successor)
    if successor is not None and current is not None:
        warnings += move_own_lines(gate, git, current, successor, fetched, source)
    if rewritten:
        warnings.append(f"the history of {shown_remote(remote)} {branch} was rewritten (force-pushed) since this host last "
                        "synced: the commits it removed are not pushed back; only those made here since were put "
                        "on top")
    after = git.run("rev-parse", "HEAD")
    if after == before:
        return []
    changed = git.run("diff", "--name-only", "-z", "--no-renames", before, after, "--", *specs, strip=False)
    return [_vault_rel(gate, git, p) for p in changed.split("\0") if p]


#: git's built-in "union" merge (both sides' lines kept, no conflict) shadowed by a driver that fails: a rule a
#: teammate commits in .gitattributes (``* merge=union``) makes a file changed on both sides a conflict again.
NO_UNION = ("-c", "merge.union.driver=false")
#: Where this host keeps the remote's tip it last synced with, per remote and branch (local state).
TIPS_NAME = "sync-tips.json"


def _tips(gate: WriteGate) -> dict[str, Any]:
    try:
        tips = json.loads(read_regular(gate.state_dir / TIPS_NAME, limit=1 << 20))
    except (OSError, ValueError, MemvaultError):
        return {}
    return tips if isinstance(tips, dict) else {}


def _last_tip(gate: WriteGate, remote: str, branch: str) -> str | None:
    tip = _tips(gate).get(f"{shown_remote(remote)} {branch}")
    return tip if isinstance(tip, str) and len(tip) in (40, 64) and all(c in "0123456789abcdef" for c in tip) \
        else None


#: How many of the remote-tracking branch's past values :func:`_last_had` looks at, newest first.
TRACKED_TIPS = 20


def _last_had(gate: WriteGate, git: GitStore, remote: str, branch: str, head: str,
              before_fetch: str | None = None) -> str | None:
    """What this clone last had of remote/branch, as far as ``head`` holds it: the tip its last sync recorded, or a
    newer one the remote-tracking branch held meanwhile (``before_fetch``, then its reflog: a plain ``git pull``, or
    the clone itself, brought the remote's commits in without a sync). The record alone missed those: a clone that
    took a secret with ``git pull`` put it back on the history the team had rewritten without it, and pushed it."""
    recorded = _last_tip(gate, remote, branch)
    out = _try(git, "log", "-g", "--format=%H", f"--max-count={TRACKED_TIPS}", f"refs/remotes/{remote}/{branch}",
               "--") or ""
    seen = dict.fromkeys([*([before_fetch] if before_fetch else []), *out.split()])
    tracked = next((tip for tip in seen if git.is_ancestor(tip, head)), None)
    if tracked is None or tracked == recorded:
        return recorded
    if recorded is None or not git.is_ancestor(recorded, head) or git.is_ancestor(recorded, tracked):
        return tracked
    return recorded


def remember_tip(gate: WriteGate, remote: str, branch: str, tip: str) -> None:
    """Keep the remote's tip this host is now in step with (``tip``, the commit a sync pulled to and pushed)."""
    tips = _tips(gate)
    tips[f"{shown_remote(remote)} {branch}"] = tip
    ensure_dir(gate.state_dir)
    atomic_write(gate.state_dir / TIPS_NAME, json.dumps(tips, sort_keys=True).encode("utf-8"))


def _changed(git: GitStore, old: str, new: str) -> set[str]:
    """The repository paths that differ between two commits."""
    return set(p for p in git.run("diff", "--name-only", "-z", "--no-renames", old, new, strip=False).split("\0") if p)


def _refuse_overlap(gate: WriteGate, git: GitStore, base: str, head: str, fetched: str, remote: str,
                    branch: str) -> None:
    """Stop, touching nothing, when the remote changed a file that has uncommitted changes here (``base``: the
    merge base of ``head`` and ``fetched``), or puts something where the vault's own files should be."""

    def stop(paths: list[str], why: str, *, keyed: bool = True) -> NoReturn:
        raise SyncConflict([_key_for(gate, git, p) for p in paths] if keyed else [], paths, shown_remote(remote), branch,
                           reason=f"sync stopped before changing anything: {why}")

    incoming = _changed(git, base, fetched)
    state = git.rel(gate.root / ".memvault")
    taken = sorted(p for p in incoming if p == state or p.startswith(state + "/"))
    if taken:
        stop(taken, f"the remote's commits put {', '.join(taken)} in the vault, where older memvaults kept a host's "
                    f"index, usage state and locks (.memvault is never committed, and whatever someone commits there "
                    f"is suspicious); remove it on the remote with 'git rm -r {state}', commit, push, then sync again")
    linked = _linked_areas(gate, git, fetched)
    if linked:
        stop(linked, f"the remote's commits make {', '.join(linked)} a symlink, where the vault's own folder or file "
                     f"should be (a link there would read this host's files as memories); replace it on the remote "
                     f"with the real folder or file, commit, push, then sync again", keyed=False)
    filed = _filed_folders(gate, git, fetched)
    if filed:
        stop(filed, f"the remote's commits make {', '.join(filed)} a file, where the vault's own folder should be "
                    f"(git deletes a folder it ignores, this host's untracked episodes or inbox, to check a file out "
                    f"in its place); replace it on the remote with the folder, commit, push, then sync again",
             keyed=False)
    both = incoming & _changed(git, base, head) & set(_vault_paths(gate, git, incoming))
    merged = _merged_by_driver(git, sorted(both))
    if merged:
        stop(merged, f"{', '.join(merged)} changed here and on the remote, and a .gitattributes rule would merge "
                     f"them with a merge driver (union: both texts kept, no check run on the result); a memory is "
                     f"never merged line by line: remove the rule for the vault's paths, then sync again")
    memories = sorted(p for p in both if _vault_rel(gate, git, p).startswith(("facts/", "procedures/"))
                      and git.blob_at(head, p) != git.blob_at(fetched, p))
    if memories:  # git merged edits of different lines without a word: a text neither side wrote, unchecked
        raise SyncConflict([_key_for(gate, git, p) for p in memories], memories, shown_remote(remote), branch)
    overlap = sorted(incoming & set(git.status_paths()))
    if overlap:
        one = len(overlap) == 1
        stop(overlap, f"the remote changed {', '.join(overlap)}, which {'has' if one else 'have'} uncommitted changes "
                      f"here; commit or stash {'it' if one else 'them'} (git stash, memvault sync, git stash pop), "
                      f"then sync again")
    hidden = _overwritten(gate, git, head, fetched)
    if hidden:
        stop(hidden, f"the remote's commits add {', '.join(hidden)}, where this host has a file or folder git does "
                     f"not track (a proposal kept on this host, a file git ignores): git would replace or delete it "
                     f"without a word; accept, reject or move it away, or remove the path on the remote, then sync "
                     f"again")


def _overwritten(gate: WriteGate, git: GitStore, head: str, fetched: str) -> list[str]:
    """The vault paths the remote's commits add (since ``head``) where this host has something git does not track
    and would replace or delete without a word when it is ignored: a file of other bytes or a folder at the path,
    or a file at a folder above it. An untracked month file is no such path: :func:`set_aside` keeps its lines."""
    added = git.run("diff", "--name-only", "-z", "--no-renames", "--diff-filter=A", head, fetched, "--",
                    *_pathspecs(gate, git, VAULT_PLACES), strip=False)
    found: list[str] = []
    for path in (p for p in added.split("\0") if p):
        parts = path.split("/")
        for n in range(len(parts), 0, -1):
            at = "/".join(parts[:n])
            try:
                mode = os.lstat(git.root / at).st_mode
            except OSError:
                continue
            if n < len(parts) and stat.S_ISDIR(mode):
                continue  # a folder above the path: the file goes in it
            if stat.S_ISREG(mode) and month_file(gate, git, at):
                continue  # set aside and put back (episode_sync)
            if n == len(parts) and stat.S_ISREG(mode) and read_regular_if_there(git.root / at) == git.blob_at(
                    fetched, path):
                continue  # the same bytes: nothing lost
            found.append(at)
            break
    return sorted(set(found))


def _merge_shared_lines(gate: WriteGate, git: GitStore, shared: set[str], successor: str | None) -> list[str]:
    """A rebase stopped on conflicts: when every conflicted file is an episode month file (two clones appended to
    one folder; a purge or a prune met another clone's appends), each is resolved line by line (:func:`merge_lines`:
    the removals of both sides kept, nothing written twice) and the rebase goes on. The lines this clone added to
    its shared current folder go to the same month file in ``successor`` (its next folder, so the other clone never
    sees them in its own and is not moved on in turn); any other file gets them after the remote's. Returns the
    conflicted files left (any other file: a fact changed on both sides; an episode changed differently on both
    sides, which may be a redaction either way) with the rebase still in progress, nothing of that step written;
    empty when it went through."""
    current = gate.episodes.host
    while True:
        conflicted = [p for p in git.run("diff", "--name-only", "-z", "--diff-filter=U", strip=False).split("\0") if p]
        entries = [p for p in git.run("ls-files", "-u", "-z", strip=False).split("\0") if p]
        links = {p for p in entries if not p.startswith(("100644 ", "100755 "))}  # a link or a submodule: not lines
        if not conflicted or links or not all(month_file(gate, git, p) for p in conflicted):
            return conflicted
        # The stages each file has ("<mode> <object> <stage>\t<path>"): a missing one is a side that deleted the
        # file, read as empty; one that is there but cannot be read is an error, never an empty side (the
        # remote's lines would all count as removed).
        stages = {(e.partition("\t")[2], e.partition("\t")[0].rpartition(" ")[2]) for e in entries}
        merged: dict[str, tuple[bytes, bytes]] = {}
        for path in conflicted:
            base, ours, theirs = (_stage(git, path, n) if (path, str(n)) in stages else b""
                                  for n in (1, 2, 3))  # in a rebase, "ours" is the remote's
            lines = merge_lines(base, ours, theirs)
            if lines is None:  # one episode changed on both sides: for the person, and nothing written before that
                return conflicted
            merged[path] = lines
        for path, (kept, added) in merged.items():
            target = git.root / path
            move = successor is not None and current in shared and target.parent == gate.episodes.dir / str(current)
            _stage_file(git, target, kept if move else kept + added)
            if move and added:
                moved = gate.episodes.dir / str(successor) / target.name
                ensure_dir(moved.parent)
                there = read_regular_if_there(moved) or b""
                _stage_file(git, moved, there + (b"\n" if there and not there.endswith(b"\n") else b"") + added)
        try:
            _continue_rebase(git)
            return []
        except GitError as exc:
            if not _rebase_in_progress(git):
                raise GitError(f"sync: git rebase --continue failed: {exc}") from None


def _stage(git: GitStore, repo_rel: str, stage: int) -> bytes:
    data = git.staged(stage, repo_rel)
    if data is None:
        raise GitError(f"sync: stage {stage} of {repo_rel} could not be read while merging its lines")
    return data


def _stage_file(git: GitStore, path: Path, data: bytes) -> None:
    """``path`` holds ``data`` in the work tree and the git index; a month file left empty is deleted, as prune does."""
    rel = ":(literal)" + git.rel(path)
    if data:
        atomic_write(path, data)
        git.run("add", "--", rel)
    else:
        remove(path)
        git.run("rm", "-q", "--cached", "--ignore-unmatch", "--", rel)


def _places(gate: WriteGate, git: GitStore) -> list[str]:
    """The repository paths of the vault's own folders and files (:data:`VAULT_PLACES`)."""
    return [git.rel(gate.root / name) for name in VAULT_PLACES]


def _vault_paths(gate: WriteGate, git: GitStore, paths: set[str]) -> list[str]:
    """The repository paths among ``paths`` that are the vault's own (its folders and settings)."""
    places = _places(gate, git)
    return [p for p in paths if any(p == place or p.startswith(place + "/") for place in places)]


def _merged_by_driver(git: GitStore, paths: list[str]) -> list[str]:
    """The paths a ``.gitattributes`` ``merge`` attribute of the work tree hands to a merge driver (``union``, or
    one of a config). A rule that comes with the pull itself is met by the rebase (:data:`NO_UNION`)."""
    if not paths:
        return []
    out = git.run("check-attr", "-z", "merge", "--", *paths, strip=False).split("\0")
    found = []
    for i in range(0, len(out) - 2, 3):
        path, value = out[i], out[i + 2]
        if value not in ("unspecified", "unset", "set", "text", "binary"):
            found.append(path)
    return found


#: The vault's own folders and files: a link at any of them is refused when pulled.
VAULT_PLACES = ("facts", "procedures", "episodes", "inbox", RECORDS, "memvault.toml", ".gitignore", ".gitattributes")


def _above(gate: WriteGate, git: GitStore) -> list[str]:
    """The repository paths of the vault's own folder and the folders above it, up to the work tree's top (none for
    a vault at the top): a file or link a commit puts there takes the whole vault's place, untracked files and all."""
    return [git.rel(folder) for folder in (gate.root, *gate.root.parents) if git.root in folder.parents]


def _linked_areas(gate: WriteGate, git: GitStore, commit: str) -> list[str]:
    """The vault's own folders and files, its folder and those above it, that ``commit`` holds as symlinks (git mode
    120000)."""
    out = git.run("ls-tree", "-z", commit, "--", *_places(gate, git), *_above(gate, git), strip=False)
    return sorted(line.split("\t", 1)[1] for line in out.split("\0") if line.startswith("120000 "))


def _filed_folders(gate: WriteGate, git: GitStore, commit: str) -> list[str]:
    """The vault's own folders, its folder and those above it, that ``commit`` holds as anything but a folder (a
    file, a submodule)."""
    folders = [git.rel(gate.root / name) for name in VAULT_PLACES if "." not in name] + _above(gate, git)
    out = git.run("ls-tree", "-z", commit, "--", *folders, strip=False)
    return sorted(line.split("\t", 1)[1] for line in out.split("\0")
                  if line and not line.startswith(("040000 ", "120000 ")))  # a link: _linked_areas


def _continue_rebase(git: GitStore) -> None:
    """``git rebase --continue``, with no editor to wait for (a picked commit keeps its message)."""
    git.run(*NO_UNION, "-c", "core.editor=true", "rebase", "--continue", env={**_env(git), "GIT_EDITOR": "true"})


def _rebased(git: GitStore, old: str) -> str | None:
    """The id our commit ``old`` has after the rebase put it on top (None if the rebase dropped it as empty)."""
    new = _tip(git)
    if new == old:
        return old
    same = git.run("log", "-1", "--format=%B", old) == git.run("log", "-1", "--format=%B", new)
    return new if same else None


def _tip(git: GitStore) -> str:
    """HEAD, or the commit under it when HEAD is a sync's move of this clone's lines to its new folder
    (:func:`~memvault.core.episode_sync.move_own_lines`): the local changes' commit is under it. The trailer is only
    a hint: anyone can write it, so a commit the remote brought (in what was last fetched) or one with no parent is
    HEAD itself (a teammate's root commit bearing it stopped every sync with nothing to commit)."""
    head = git.run("rev-parse", "HEAD")
    body = git.run("log", "-1", "--format=%B", head)
    if f"\n{MOVED_TRAILER}: " not in f"\n{body}":
        return head
    parent = _try(git, "rev-parse", "--verify", "--quiet", f"{head}^1")
    fetched = _try(git, "rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}")
    return head if parent is None or (fetched is not None and git.is_ancestor(head, fetched)) else parent


class _Moved(GitError):
    """A push refused because the remote branch moved since it was fetched."""


def _push(git: GitStore, remote: str, branch: str, tip: str, fetched: str | None) -> bool:
    """Push ``tip`` (HEAD as the locked steps left it: a commit made meanwhile goes with the next sync) to
    remote/branch, a fast-forward only. True when the remote branch moved (it held ``fetched``). :class:`_Moved`
    when the remote moved meanwhile; a :class:`GitError` with the remote's reason when it refused the push."""
    try:
        git.run("push", "--", remote, f"{tip}:refs/heads/{branch}", env=_env(git))
    except GitError as exc:
        # git's own lines, joined: "remote: <what a hook said> ... ! [remote rejected] HEAD -> main (<why>) error: ..."
        text = str(exc)
        status = re.search(r"! \[(remote )?rejected\] \S+ -> \S+ \((.*?)\)(?= ! \[| error: | hint: |$)", text)
        if status is None:
            raise
        if any(word in status.group(2) for word in _MOVED):
            raise _Moved(text) from None
        said = " / ".join(m.strip() for m in re.findall(r"remote: (.*?)(?=\s+remote: |\s+To \S|\s+! \[|$)", text)
                          if m.strip())
        raise GitError(f"sync: {shown_remote(remote)} refused the push to {branch} ({_remote_says(status.group(2))})"
                       + (f": {_remote_says(said)}" if said else "") + "; your commits are safe here, not pushed: "
                       "ask whoever runs the remote, then sync again") from None
    return tip != fetched


def _remote_says(text: str, limit: int = 300) -> str:
    """What a remote (its hook) printed, as one line of at most ``limit`` characters: control characters written
    out (``\\u001b``: a terminal acts on them), a URL's user part and what looks like a secret left out."""
    from ..rules.secrets import redact  # the detector's compiled rules, paid only on the way to this error

    text = re.sub(r"(\w+://)[^/@\s]+@", r"\1", " ".join(text.split()))
    text = printable_line(redact(text)[0])
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ------------------------------------------------------------------------------------------------ helpers
def _env(git: GitStore) -> dict[str, str]:
    # A rebase writes commits, so it needs a committer: the user's identity, or GitStore's stand-in when git
    # has none. Never prompt for credentials: sync is run by agents with no terminal.
    env = dict(git._env(None))
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


#: The message of the stash entry in which :func:`_stash` sets the repository's other changes aside.
STASH_MESSAGE = "memvault sync: changes outside the vault"


def _left_in_stash(git: GitStore) -> list[str]:
    """What to say of the stash entries a sync killed between :func:`_stash` and :func:`_unstash` left (or one whose
    changes could not be put back): the person's changes outside the vault are gone from the work tree until then."""
    out = _try(git, "stash", "list", "--format=%gd%x00%gs") or ""
    return [f"{ref} holds your uncommitted changes outside the vault that a sync set aside and did not put back (it "
            f"was stopped part-way); put them back with: git stash pop --index {ref}"
            for ref, _, subject in (line.partition("\0") for line in out.splitlines())
            if subject.endswith(": " + STASH_MESSAGE)]


def _stash(git: GitStore) -> bool:
    """Set aside uncommitted changes outside the vault (a vault inside a bigger repository), staged and not.

    They must neither block the rebase nor be committed; :func:`_refuse_overlap` made sure the rebase touches
    none of them, so they come back exactly as they were. Untracked files are left in place.
    """
    if not git.run("status", "--porcelain", "--untracked-files=no"):
        return False
    git.run("stash", "push", "--quiet", "--message", STASH_MESSAGE, env=_env(git))
    return True


def _unstash(git: GitStore) -> None:
    try:
        git.run("stash", "pop", "--quiet", "--index")
    except GitError as exc:
        raise GitError(
            "sync: your uncommitted changes outside the vault could not be put back after the pull and are kept in "
            f"the stash (nothing was lost); restore them with: git stash pop --index ({exc})") from None


def _rebase_in_progress(git: GitStore) -> bool:
    return sync_journal.rebase_dir(git) is not None


def _vault_rel(gate: WriteGate, git: GitStore, repo_rel: str) -> str:
    path = git.root / repo_rel
    try:
        return path.relative_to(gate.root).as_posix()
    except ValueError:
        return repo_rel


def _key_for(gate: WriteGate, git: GitStore, repo_rel: str) -> str:
    """``facts/db/primary.md`` -> ``db/primary``; any other path stays a vault-relative path."""
    rel = _vault_rel(gate, git, repo_rel)
    if rel.startswith("facts/") and rel.endswith(".md"):
        return rel[len("facts/"):-len(".md")]
    return rel


__all__ = ["PUSH_ATTEMPTS", "SyncConflict", "SyncResult", "pending_edits", "sync"]
