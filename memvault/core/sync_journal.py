"""What a sync killed in the middle of its rebase (a reboot, ``kill -9``, a laptop out of battery) leaves, and how
the next sync mends it.

Before it rebases, a sync writes a journal in the host's state directory (never the work tree): its process id,
this host's name, the commit HEAD was at, the commit it rebases onto and the stash entry holding the repository's
other uncommitted changes it set aside. It is removed once the rebase is over and those changes are back. The next
sync that finds a rebase in progress undoes it (``git rebase --abort``) only when that rebase is provably the dead
sync's own: the journal's process is gone, the rebase's ``orig-head`` and ``onto`` are the journal's, HEAD moved
only by that rebase since, and nothing was edited meanwhile that the undo would throw away. Anything else (a rebase
begun by hand, a commit or an edit made since) stops the sync as before, touching nothing.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from ..rules.errors import GitError, MemvaultError
from ..rules.fsutil import atomic_write, ensure_dir, read_regular, remove
from ..rules.lockwait import process_alive
from ..stores.gitstore import GitStore, is_commit_id
from .gate import WriteGate

#: The journal of the rebase a sync is running (local state).
JOURNAL_NAME = "sync-rebase.json"


def rebase_dir(git: GitStore) -> Path | None:
    """The git directory's folder of a rebase in progress (``rebase-merge`` or ``rebase-apply``), or None."""
    for name in ("rebase-merge", "rebase-apply"):
        with contextlib.suppress(GitError):
            path = git.root / git.run("rev-parse", "--git-path", name)
            if path.exists():
                return path
    return None


def stopped(git: GitStore, why: str = "") -> GitError:
    """The error of a sync that finds a rebase in progress it may not undo (``why``: what makes it so)."""
    return GitError(f"sync stopped before changing anything: a rebase is in progress in {git.root} (a sync killed "
                    f"part-way, or one begun by hand{why}): finish it (git rebase --continue) or undo it (git "
                    "rebase --abort), then sync again")


#: HEAD's reflog, newest first: the commit, the entry's selector (``HEAD@{unix time}``) and its subject.
_REFLOG = ("log", "-g", "--date=unix", "--format=%H%x00%gd%x00%gs")


def begin(gate: WriteGate, git: GitStore, head: str, onto: str, stashed: bool) -> None:
    """Record the rebase this sync is about to run from ``head`` onto ``onto`` (``stashed``: the repository's other
    changes are in the stash's newest entry)."""
    stash = git.run("rev-parse", "--verify", "--quiet", "refs/stash") if stashed else None
    ensure_dir(gate.state_dir)
    atomic_write(gate.state_dir / JOURNAL_NAME, json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "head": head, "onto": onto, "stash": stash,
         "started": int(time.time()), "reflog": git.run(*_REFLOG, "--max-count=1", "HEAD", "--") or ""},
        sort_keys=True).encode("utf-8"), mode=0o600)


def end(gate: WriteGate) -> None:
    """The rebase is over and the changes set aside are back (or named): no journal."""
    remove(gate.state_dir / JOURNAL_NAME)


def _journal(gate: WriteGate) -> dict[str, Any] | None:
    """The journal, or None when there is none or it cannot be trusted (a damaged one is no proof of anything)."""
    try:
        data = json.loads(read_regular(gate.state_dir / JOURNAL_NAME, limit=1 << 16))
    except (OSError, ValueError, MemvaultError):
        return None
    if not (isinstance(data, dict) and isinstance(data.get("pid"), int) and data["pid"] > 0
            and isinstance(data.get("started"), int)
            and is_commit_id(data.get("head")) and is_commit_id(data.get("onto"))
            and (data.get("stash") is None or is_commit_id(data.get("stash")))):
        return None
    return data


def mend(gate: WriteGate, git: GitStore, source: str, warnings: list[str]) -> None:
    """Before a sync reads HEAD: undo the rebase a killed sync left (see the module), put back what it set aside, and
    say so in ``warnings``; :func:`stopped` when a rebase is in progress that is not provably a dead sync's own."""
    if rebase_dir(git) is None and not os.path.lexists(gate.state_dir / JOURNAL_NAME):
        return
    with gate.sync_lock(), gate.lock(source, warnings), gate.episodes.lock():
        _mend(gate, git, warnings)


def mend_for_write(gate: WriteGate, writer: str) -> list[str]:
    """Run by :meth:`WriteGate.lock` for a write (under the write lock): the same mend, when no sync runs (its lock is
    free). A write after the crash (an agent's, before anyone synced) was committed onto the half-rebased, detached
    HEAD; then the sync could no longer undo the rebase without dropping it, and a person's ``git rebase --abort``
    dropped it. A rebase that is not provably the dead sync's is left as one begun by hand is. What to say."""
    git = gate.git
    if git is None or not os.path.lexists(gate.state_dir / JOURNAL_NAME):  # one lstat on every write
        return []
    said: list[str] = []
    for _ in range(30):
        with gate.try_sync_lock() as held:
            if held:
                with gate.episodes.lock(), contextlib.suppress(GitError):
                    _mend(gate, git, said)
                return said
        # Held: by a live sync (it mends itself), or still by the killed one's process group, which the kernel is
        # tearing down (a moment under load): wait for that one, at most 3 s.
        journal = _journal(gate)
        if journal is None or journal.get("host") != socket.gethostname() or process_alive(journal["pid"]):
            return said
        time.sleep(0.1)
    return said


def _mend(gate: WriteGate, git: GitStore, warnings: list[str]) -> None:
    """:func:`mend`, with the sync, write and append locks held."""
    journal, folder = _journal(gate), rebase_dir(git)
    if folder is None:  # killed after its rebase was over, before it put the changes back
        if journal is not None and journal.get("host") == socket.gethostname() and not process_alive(journal["pid"]):
            warnings += _unstash(git, journal)
        end(gate)
        return
    why = _not_its_own(git, folder, journal)
    if journal is None or why:
        raise stopped(git, why)
    try:
        git.run("rebase", "--abort")
    except GitError as exc:
        raise stopped(git, f"; undoing the rebase a killed sync left failed: {exc}") from None
    head = git.run("rev-parse", "HEAD")
    if head != journal["head"] or rebase_dir(git) is not None:
        raise GitError(f"sync stopped: undoing the rebase a killed sync left put HEAD at {head[:12]}, not at "
                       f"{journal['head'][:12]} where that sync began; look at 'git reflog' before syncing again")
    said = _unstash(git, journal)
    end(gate)
    warnings.append(f"a sync killed part-way left its rebase onto {journal['onto'][:12]} in progress: undone, this "
                    f"clone is back at {head[:12]}, as before that sync" +
                    (", and your uncommitted changes it set aside are back" if journal["stash"] and not said else ""))
    warnings += said


def _not_its_own(git: GitStore, folder: Path, journal: dict[str, Any] | None) -> str:
    """Why the rebase in ``folder`` is not provably the one a dead sync's ``journal`` records; empty when it is."""
    if journal is None:
        return ""  # no journal (or a damaged one): the message as it always was
    if journal.get("host") != socket.gethostname():
        return "; the record of a sync found here is from another host"
    if process_alive(journal["pid"]):  # under the sync lock no sync of this vault runs: its number is another process's
        return f"; the process of the sync that recorded it, {journal['pid']}, is still there"
    try:
        orig, onto = ((folder / name).read_text().strip() for name in ("orig-head", "onto"))
    except OSError:
        return "; its record in the git directory cannot be read"
    if (orig, onto) != (journal["head"], journal["onto"]):
        return "; it is not the rebase a killed sync recorded"
    # HEAD moved only by that one rebase since the journal was written: a commit made on the detached HEAD since, or
    # a rebase begun again by hand (an abort, then a start), would be dropped. Newest first: its picks, its start
    # (no sooner than the journal), then nothing of a rebase as far back as the journal (the second is the unit).
    # The entries above the one that was newest when the journal was written (by identity: the second of a time
    # is too coarse, a commit and the rebase's start fall in one), or for an older journal, as far back as its time.
    since = git.run(*_REFLOG, "--max-count=200", "HEAD", "--") or ""
    moves: list[str] = []
    top = journal.get("reflog")
    for line in since.splitlines():
        if isinstance(top, str) and top:
            if line == top:
                break
        else:
            stamp = line.split("\0")[1].rpartition("{")[2].rstrip("}")
            if not stamp.isdigit() or int(stamp) < journal["started"]:
                break
        moves.append(line.split("\0")[2])
    else:
        if isinstance(top, str) and top:
            return "; HEAD was moved too often since it began to tell whose the rebase is"
    starts = [n for n, move in enumerate(moves) if move.startswith("rebase (start)")]
    if not starts or any(not move.startswith(("rebase (pick)", "rebase (continue)")) for move in moves[:starts[0]]) \
            or any(move.startswith("rebase") for move in moves[starts[0] + 1:]):
        return "; HEAD was moved since it began (a commit, or a rebase begun again), which undoing it would drop"
    # Edits made since (not yet staged) would be thrown away: the conflicts it stopped on are its own.
    unstaged = set(git.run("diff", "--name-only", "-z", strip=False).split("\0"))
    unmerged = {e.partition("\t")[2] for e in git.run("ls-files", "-u", "-z", strip=False).split("\0")}
    edited = sorted(unstaged - unmerged - {""})
    if edited:
        return f"; {', '.join(edited)} changed since, which undoing it would throw away"
    return ""


def _unstash(git: GitStore, journal: dict[str, Any]) -> list[str]:
    """Put back the stash entry the killed sync made (the journal's), if it is still there; what to say otherwise."""
    stash = journal.get("stash")
    if not stash:
        return []
    entries = (git.run("stash", "list", "--format=%H%x00%gd") or "").splitlines()
    ref = next((e.partition("\0")[2] for e in entries if e.partition("\0")[0] == stash), None)
    if ref is None:
        return []  # put back by hand already
    try:
        git.run("stash", "pop", "--quiet", "--index", ref)
    except GitError as exc:
        return [f"{ref} holds your uncommitted changes outside the vault that a killed sync set aside; they could "
                f"not be put back ({exc}); put them back with: git stash pop --index {ref}"]
    return []


__all__ = ["JOURNAL_NAME", "begin", "end", "mend", "mend_for_write", "rebase_dir", "stopped"]


def abort_keeping_saves(git: GitStore, env: dict[str, str]) -> list[str]:
    """Undo a rebase that stopped on no conflict: a file it was about to write was changed under it (an editor saved
    a fact while the sync rebased). ``git rebase --abort`` resets the work tree, so each file that differs from the
    rebase's HEAD is read first and written back after, as the uncommitted edit it is: the next sync commits it
    through the gate. The files changed under the rebase (repository-relative), each as it was saved."""
    names = [p for p in git.run("diff", "--name-only", "-z", "--no-renames", "HEAD", strip=False).split("\0") if p]
    saved: dict[str, bytes | None] = {}
    for rel in names:
        try:
            saved[rel] = read_regular(git.root / rel)
        except FileNotFoundError:
            saved[rel] = None
        except (OSError, MemvaultError):
            continue  # a link or a folder there: not a save of a file, and never followed
    git.run("rebase", "--abort", env=env)
    for rel, data in saved.items():
        path = git.root / rel
        try:
            now_there = read_regular(path)
        except FileNotFoundError:
            now_there = None
        except (OSError, MemvaultError):
            continue
        if data != now_there:
            if data is None:
                remove(path)
            else:
                ensure_dir(path.parent)
                atomic_write(path, data)
    return list(saved)

