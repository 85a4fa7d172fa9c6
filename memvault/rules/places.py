"""Where a vault's local state lives: somewhere no commit can reach.

The index, usage state, captures, logs, live markers, locks and this host's settings (``local.toml``) are this
host's machinery. Kept in the work tree (``<vault>/.memvault``, as before), a teammate's ``git add -f`` and a plain
``git pull`` could replace any of them with a link or a file of their choosing. So they live, as git-lfs and
git-annex keep theirs, inside the git directory, which no commit can write:

- a vault in a git work tree: ``<git-dir>/memvault/<vault-id>/``, where ``<git-dir>`` is the work tree's own git
  directory (``git rev-parse --git-dir``: ``.git``, or what a ``.git`` file names for a linked worktree or a
  submodule, so each worktree has its own state) and ``<vault-id>`` is ``root`` for a vault at the top of the work
  tree, else a readable slug and a short hash of its path in the work tree (several vaults may share a repository);
- a vault outside git: ``$XDG_STATE_HOME/memvault/vaults/<name>-<hash of its path>`` (``~/.local/state`` by
  default).

The git directory is found by reading the file system, as git does, never by running git: hooks and a cold recall
must stay fast. Folders made here are private (0700).

A ``.memvault`` left in the work tree by an older memvault is moved once, in place (:func:`settle`); anything else
there (a link, a file, a folder git tracks) is inert: never read, written, deleted or followed, and named once.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

#: The folder of a vault's work tree where memvault kept its state before: now inert (see :func:`settle`).
LEGACY_NAME = ".memvault"
#: The folder memvault owns inside a git directory (one sub-folder per vault).
GIT_DIR_NAME = "memvault"
#: The id of the vault at the top of its work tree.
ROOT_ID = "root"
#: What a hook may have made in the new place before the vault was first opened there: the old copy of a lock
#: folder, a marker folder or a stamp is dropped, an old log is put before the new one.
_DISPOSABLE = frozenset({"locks", "live", "agents-warm-up", "hook-reindex.requested"})
#: What a ``.memvault`` in the work tree may hold that says what to do rather than what was done: this host's settings
#: (a command to run, a model folder to load), a purge's journal (a pattern to purge, as a source), the ages this host
#: accepted to prune by (the guard against a pushed shorter ``[retention]``), the team index's url it accepted to
#: connect to, and the records of where this clone appends and what a sync set aside or last synced with (which no
#: older memvault wrote there). Never moved into the state: a folder a commit put there (then untracked, as the notice
#: advises) looks just like an older memvault's. Left where they are, and named.
_NOT_ADOPTED = frozenset({"local.toml", "purge.json", "retention.json", "index-url.json", "sync-aside.json",
                          "sync-aside", "sync-tips.json", "episode-folders.json"})
#: Remembers what was said about the work tree's ``.memvault`` (said once, again only when it changes).
_SEEN_NAME = "legacy-seen"


def find_git_dir(root: Path) -> tuple[Path, Path] | None:
    """(top of the work tree, its own git directory) for the work tree holding ``root`` (a resolved folder), or
    None when ``root`` is in no git work tree. Read from the file system as git discovers it (the nearest ``.git``
    folder, or ``.git`` file ``gitdir: <path>``), without running git."""
    current = root
    while True:
        found = _git_dir_at(current / ".git")
        if found is not None:
            return current, found
        if current.parent == current:
            return None
        current = current.parent


def _git_dir_at(dotgit: Path) -> Path | None:
    try:
        st = os.stat(dotgit)  # git follows a .git symlink too (only a person makes one: git never checks one out)
    except OSError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return dotgit if _is_git_dir(dotgit) else None
    if not stat.S_ISREG(st.st_mode) or st.st_size > 4096:
        return None
    try:
        with open(dotgit, encoding="utf-8") as f:
            first = f.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not first.startswith("gitdir:"):
        return None
    target = Path(first[len("gitdir:"):].strip())
    if not target.is_absolute():
        target = dotgit.parent / target
    target = Path(os.path.realpath(target))
    return target if _is_git_dir(target) else None


def _is_git_dir(path: Path) -> bool:
    """What git asks of a git directory: a HEAD, and objects (its own, or its main repository's for a worktree)."""
    return os.path.lexists(path / "HEAD") and (os.path.isdir(path / "objects") or os.path.isfile(path / "commondir"))


def vault_id(top: Path, root: Path) -> str:
    """``root`` for a vault at the top of its work tree, else ``<slug of its path>-<hash>`` (unique per path)."""
    rel = root.relative_to(top).as_posix()
    if rel in ("", "."):
        return ROOT_ID
    return f"{_slug(rel)}-{_short_hash(rel)}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:40] or "vault"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:10]


def state_home() -> Path:
    """``$XDG_STATE_HOME`` (an absolute path, as the spec asks), else ``~/.local/state``."""
    env = os.environ.get("XDG_STATE_HOME", "")
    return Path(env) if os.path.isabs(env) else Path.home() / ".local" / "state"


def locate(root: Path) -> Path:
    """Where the state of the vault at ``root`` lives (see the module doc); nothing is created."""
    root = Path(os.path.realpath(root))
    found = find_git_dir(root)
    if found is not None:
        top, git_dir = found
        return Path(os.path.realpath(git_dir)) / GIT_DIR_NAME / vault_id(top, root)
    return Path(os.path.realpath(state_home())) / "memvault" / "vaults" / f"{_slug(root.name)}-{_short_hash(str(root))}"


def state_dir_for(root: Path) -> Path:
    """The vault's state directory (:func:`locate`), created private (0700) if needed. Raises
    :class:`~memvault.rules.errors.UnsafePath` when a link or a file stands where a folder of it should be."""
    path = locate(root)
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077 == 0:
            return path  # the usual case: one system call
    base = path.parent.parent if path.parent.name == GIT_DIR_NAME else state_home()
    from .fsutil import ensure_dir

    base = Path(os.path.realpath(base))
    ensure_dir(base, 0o700)
    current = base
    for part in path.relative_to(base).parts:
        current = current / part
        ensure_dir(current, 0o700)  # never through a link: one there is refused
        _private(current)
    return path


def _private(path: Path) -> None:
    """``path`` must be a real folder of this user (a link is refused, never followed); made 0700."""
    from .errors import UnsafePath

    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        kind = "a symlink" if os.path.islink(path) else "not a folder"
        raise UnsafePath(path, f"{kind} ({exc.strerror}): memvault keeps this host's state in a real folder "
                               "here; move it away and run memvault again") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid():
            raise UnsafePath(path, "belongs to another user: memvault keeps this host's state only in a folder "
                                   "of its own")
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------ the old place
Tracked = Callable[[str], bool]


def settle(root: Path, tracked: Tracked | None = None) -> tuple[Path, list[str]]:
    """The vault's state directory (created), and what the person should hear about the work tree's
    ``.memvault``: an older memvault's real, untracked folder is moved into the state directory once (one line
    says so); a link, a file or a folder ``tracked`` says git holds (``tracked(".memvault")``, given the path
    relative to the vault) is left alone — never read, written, deleted or followed — and named once."""
    state = state_dir_for(root)
    legacy = Path(os.path.realpath(root)) / LEGACY_NAME
    try:
        st = os.lstat(legacy)
    except OSError:
        return state, []
    if stat.S_ISLNK(st.st_mode):
        why = f"a symlink (to {os.readlink(legacy)})"
    elif not stat.S_ISDIR(st.st_mode):
        why = "a file, not a folder"
    elif tracked is not None and tracked(LEGACY_NAME):
        why = "committed to git"
    else:
        return state, _migrate(legacy, state, st)
    return state, _once(state, st, f"{legacy} is {why}: ignored, never read, written or followed (this host's "
                                   f"state is in {state}); it is suspicious if you did not put it there: "
                                   f"'git rm -r {LEGACY_NAME}' removes it from the repository and this work tree")


def _once(state: Path, st: os.stat_result, line: str, what: str = "") -> list[str]:
    """``[line]`` the first time this ``.memvault`` (by kind, inode and mtime) is met for ``what`` (named suspicious,
    or left behind by a move: one folder can be both, one after the other), then ``[]``."""
    from .fsutil import atomic_write

    mark = f"{stat.S_IFMT(st.st_mode)} {st.st_ino} {st.st_mtime_ns}{' ' + what if what else ''}\n"
    seen = state / _SEEN_NAME
    with contextlib.suppress(OSError):
        if not os.path.islink(seen) and seen.read_text(encoding="utf-8") == mark:
            return []
    with contextlib.suppress(OSError):
        atomic_write(seen, mark.encode("utf-8"), mode=0o600)
    return [line]


def _migrate(legacy: Path, state: Path, st: os.stat_result) -> list[str]:
    """Move each entry of the old folder into ``state`` (a rename on one file system, else a copy then a delete);
    links are never followed, and only memvault's own (to a sibling) are moved; what ``state`` already holds wins
    (see :func:`_merge`). The folder goes when emptied."""
    from .fsutil import remove_dir, rename

    moved, left = 0, []
    with os.scandir(legacy) as found:
        entries = list(found)
    # The state's own index wins: the old one's generations stay beside their link, not moved in as orphans.
    has_index = os.path.lexists(state / "index.db")
    for entry in entries:
        target = state / entry.name
        if entry.name in _NOT_ADOPTED or (has_index and entry.name.startswith("index-")):
            left.append(entry.name)
            continue
        if not (_own_link(entry) or entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)):
            left.append(entry.name)
            continue
        if os.path.lexists(target):
            if not _merge(Path(entry.path), target):
                left.append(entry.name)
            continue
        try:
            rename(Path(entry.path), target)  # a link memvault made moves as a link, never followed
        except OSError as exc:
            if exc.errno != errno.EXDEV:  #: another file system (a vault outside git, state under ~/.local/state)
                left.append(entry.name)
                continue
            try:
                _copy_then_remove(Path(entry.path), target)
            except OSError:
                left.append(entry.name)
                continue
        moved += 1
    if not left:
        if remove_dir(legacy):
            return [f"moved this host's state from {legacy} to {state} (once: memvault now keeps it where no "
                    "commit can reach it)"]
    head = (f"moved {moved} {'entry' if moved == 1 else 'entries'} of this host's state from {legacy} to {state}; "
            if moved else "")
    return _once(state, os.lstat(legacy) if os.path.lexists(legacy) else st,
                 f"{head}left in {legacy}, ignored from now on: {', '.join(sorted(left))} (a link, a name the new "
                 "place already holds, an index where the new place has one, or settings, a purge's journal, "
                 "accepted retention or a sync's record, never taken from the work tree, where a commit can put "
                 "them: copy one into the new place yourself if it is this host's); "
                 "delete it when you no longer need it", "left")


def _own_link(entry: os.DirEntry[str]) -> bool:
    """A link memvault made (``index.db`` -> ``index-<generation>.db``): to a sibling by name, so moving it along
    with its folder sends nothing anywhere else. Any other link is left where it is."""
    if not entry.is_symlink():
        return False
    try:
        target = os.readlink(entry.path)
    except OSError:
        return False
    return "/" not in target and target not in (".", "..")


def _merge(old: Path, new: Path) -> bool:
    """An entry both places hold: True when the old one was dropped (disposable) or folded in (a log)."""
    from .fsutil import atomic_write, remove, remove_tree

    if os.path.islink(new):
        return False
    try:
        if old.name in _DISPOSABLE:
            remove_tree(old)  # a link is removed as a link
            return True
        if old.name.endswith(".log") and old.is_file() and new.is_file():
            atomic_write(new, old.read_bytes() + new.read_bytes(), mode=0o600)
            remove(old)
            return True
    except OSError:
        pass
    return False


def _copy_then_remove(source: Path, target: Path) -> None:
    """Another file system: copied (folders and regular files; a link is refused, never followed), then removed."""
    from .fsutil import copy_file, copy_tree, remove, remove_tree, rename

    partial = target.with_name(f".{target.name}.moving")
    if source.is_dir() and not source.is_symlink():
        copy_tree(source, partial)
        rename(partial, target)
        remove_tree(source)
    else:
        copy_file(source, partial)
        rename(partial, target)
        remove(source)
