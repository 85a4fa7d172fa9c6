"""Git hooks for the vault's repository: refuse broken or secret-bearing commits, reindex after history moves.

``install`` writes a small sh script per hook into the repository's hooks directory (``git rev-parse
--git-path hooks``, so ``core.hooksPath`` is respected). A hook that is already there and is not ours is kept:
it is renamed to ``<name>.memvault-chained`` and our script runs it first, with the same arguments and stdin;
for ``pre-commit`` its failure still refuses the commit. ``uninstall`` removes our scripts and puts the chained
ones back, byte for byte.

The scripts call ``python -P -m memvault.githooks NAME --vault DIR [ARGS]`` with the interpreter recorded at
install time. ``-P``: git runs hooks at the top of the work tree, and ``python -m`` would put that folder first on
``sys.path``, where a teammate's committed ``memvault/`` package would be imported instead of memvault. ``DIR`` is
the vault's folder relative to the top of its work tree (``.`` for a vault at the top), where git runs hooks: so the
hooks keep checking the right files after the repository is moved or copied, and in each linked worktree (which
runs the main repository's hooks on its own files). That entry point (:func:`main`) uses argparse, not click, and
imports what it needs lazily, so a hook costs one interpreter start:

- ``pre-commit`` checks the *staged* content (the blobs in git's index, not the working tree) of the vault's files
  with the check every commit memvault makes runs: valid keys and names, front matter that parses, no conflict
  markers, no secrets in any file (episode lines and memvault.toml too), no symlinks, temp files or ``.memvault``.
  Each problem is one line naming the file, the line and the reason; the commit is refused.
- ``post-commit``, ``post-merge``, ``post-checkout`` and ``post-rewrite`` start ``memvault reindex`` detached
  in the background (output in ``hook-reindex.log`` in the vault's state directory) and return at once: git is
  never blocked.

memvault's own commits are skipped by both (their content was checked when it was written, and may carry an
explicit ``--allow-secret``; the index was updated by the write itself).
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import Any
from dataclasses import dataclass
from pathlib import Path

from ..rules.errors import GitError, HookConflict, describe
from ..rules.markup import printable_line
from ..rules.fsutil import (ensure_dir, lock_held, open_private, remove, rename, replace, try_lock,
                            write_new_exclusive)
from ..rules.places import find_git_dir, state_dir_for

MARKER = "# memvault hook"
CHAINED_SUFFIX = ".memvault-chained"
GATE_HOOKS = ("pre-commit",)
REINDEX_HOOKS = ("post-commit", "post-merge", "post-checkout", "post-rewrite")
HOOKS = GATE_HOOKS + REINDEX_HOOKS
REINDEX_LOG = "hook-reindex.log"
REINDEX_FLAG = "hook-reindex.requested"
REINDEX_LOCK = "hook-reindex.lock"
#: Variables git sets for the hook itself; a detached reindex outlives the hook, so it must not inherit them
#: (a temporary index file named in GIT_INDEX_FILE is gone by the time it runs).
_HOOK_ENV = ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE", "GIT_PREFIX", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
             "GIT_REFLOG_ACTION", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_EDITOR")

_GATE = """\
#!/bin/sh
{marker}: {name}
# Installed by 'memvault hooks install'; 'memvault hooks uninstall' removes it and restores a chained hook.
chained="$(dirname "$0")/{name}{suffix}"
if [ -x "$chained" ]; then
    "$chained" "$@" || exit $?
fi
# memvault's own commits were checked when they were written (and may carry an explicit --allow-secret).
if [ -n "${{MEMVAULT_COMMIT:-}}" ]; then exit 0; fi
exec {python} -P -m memvault.githooks {name} --vault {root} "$@"
"""

_NOTIFY = """\
#!/bin/sh
{marker}: {name}
# Installed by 'memvault hooks install'; 'memvault hooks uninstall' removes it and restores a chained hook.
chained="$(dirname "$0")/{name}{suffix}"
status=0
if [ -x "$chained" ]; then
    "$chained" "$@" || status=$?
fi
# memvault's own commits update the index as they write; anything else starts a background reindex.
if [ -z "${{MEMVAULT_COMMIT:-}}" ]; then
    {python} -P -m memvault.githooks {name} --vault {root} "$@" </dev/null
fi
exit $status
"""


# -- install / uninstall ---------------------------------------------------------------------------------
def hooks_dir(root: Path) -> Path:
    """The directory git runs hooks from for the vault's repository (``core.hooksPath`` respected)."""
    try:
        out = _git(root, "rev-parse", "--git-path", "hooks").decode().strip()
    except GitError:
        raise GitError(f"{root} is not in a git repository: no hooks to install") from None
    return (root / out).resolve()


def _refuse_tracked(root: Path, directory: Path) -> None:
    """HookConflict when git runs hooks from a folder the repository tracks (``core.hooksPath = .githooks``, a
    team's committed hooks): memvault's name this host's Python and vault path, and one ``git commit -a`` shared them (a
    teammate's commit then checked another vault, or failed with 127)."""
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve()
        gitdir = (root / _git(root, "rev-parse", "--git-dir").decode().strip()).resolve()
    except GitError:
        return
    inside = directory == top or top in directory.parents
    if not inside or directory == gitdir or gitdir in directory.parents:
        return
    try:
        tracked = _git(root, "ls-files", "--", str(directory)).strip()
    except GitError:
        return
    if tracked:
        raise HookConflict(directory, "is a folder the repository tracks (core.hooksPath), where the team commits its hooks: "
                                      "memvault's name this host's Python and vault, so they are not written there; "
                                      "call 'python -m memvault.githooks pre-commit --vault VAULT' from the team's own hook")


def render(name: str, vault_root: Path, python: str | None = None) -> str:
    """Our script for hook ``name``: runs a chained hook first, then ``python -m memvault.githooks``. The vault is
    named by its path in the work tree (see the module doc), never by where the work tree is on this disk."""
    template = _GATE if name in GATE_HOOKS else _NOTIFY
    return template.format(marker=MARKER, name=name, suffix=CHAINED_SUFFIX,
                           python=shlex.quote(python or sys.executable), root=shlex.quote(_in_tree(vault_root)))


def _in_tree(vault_root: Path) -> str:
    """The vault's folder relative to the top of its work tree (``.`` at the top)."""
    root = Path(os.path.realpath(vault_root))
    found = find_git_dir(root)
    if found is None:
        raise GitError(f"{vault_root} is not in a git repository: no hooks to install")
    return root.relative_to(found[0]).as_posix()


def hook_vault(named: Path, cwd: Path | None = None) -> tuple[Path | None, str | None]:
    """The vault a hook acts on (None: no vault there), from its ``--vault``, and None or the one line that says
    why its pre-commit cannot check this work tree.

    A relative path (what :func:`install` writes) is taken from the top of the work tree git runs the hook in; no
    vault there (the scripts shared by a ``core.hooksPath`` several repositories use) is nothing to do. An absolute
    path is what an older release wrote: outside this work tree (the repository was moved or copied, or this is a
    linked worktree) no file of that vault is staged here, and checking it would pass everything; it may still be
    reindexed."""
    from ..rules.config import holds_config

    here = Path(os.path.realpath(cwd or os.getcwd()))
    found = find_git_dir(here)
    top = found[0] if found is not None else here
    if not named.is_absolute():
        root = top / named
        return (root, None) if holds_config(root) else (None, None)
    root = Path(os.path.realpath(named))
    elsewhere = None
    if root != top and top not in root.parents:
        elsewhere = (f"this hook names the vault {named}, which is not in this work tree ({top}): moved, copied, or "
                     "a linked worktree; run 'memvault hooks install' in the vault here to write hooks that follow it")
    return (root if holds_config(root) else None), elsewhere


def is_ours(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return MARKER.encode() in head


@dataclass
class HookAction:
    hook: str
    action: str  # "installed", "updated", "chained", "removed", "restored", "kept"
    path: Path

    def __str__(self) -> str:
        return f"{self.hook}: {self.action} ({self.path})"


def install(root: Path, *, python: str | None = None) -> list[HookAction]:
    """Install memvault's hooks (idempotent). A foreign hook is kept as ``<name>.memvault-chained`` and run
    first by ours; nothing is touched unless every hook can be installed."""
    directory = hooks_dir(root)
    _refuse_tracked(root, directory)
    plan = []
    for name in HOOKS:
        path, chained = directory / name, directory / (name + CHAINED_SUFFIX)
        exists = path.exists() or path.is_symlink()
        foreign = exists and not is_ours(path)
        if foreign and (chained.exists() or chained.is_symlink()):
            raise HookConflict(path, f"is not memvault's, and {chained.name} already holds a chained hook; "
                               "merge them by hand, then run 'memvault hooks install' again")
        plan.append((name, path, chained, exists, foreign))
    ensure_dir(directory)
    actions = []
    for name, path, chained, exists, foreign in plan:
        if foreign:
            rename(path, chained)  # keeps the bytes, the mode, and a symlink as a symlink
            actions.append(HookAction(name, "chained", chained))
        _write_script(path, render(name, root, python))
        actions.append(HookAction(name, "updated" if exists and not foreign else "installed", path))
    return actions


def uninstall(root: Path) -> list[HookAction]:
    """Remove memvault's hooks and restore the chained ones. A hook that is not ours is left alone."""
    directory = hooks_dir(root)
    actions = []
    for name in HOOKS:
        path, chained = directory / name, directory / (name + CHAINED_SUFFIX)
        if is_ours(path):
            remove(path)
            actions.append(HookAction(name, "removed", path))
        if chained.exists() or chained.is_symlink():
            if path.exists() or path.is_symlink():
                actions.append(HookAction(name, "kept", chained))  # someone put another hook there meanwhile
            else:
                rename(chained, path)
                actions.append(HookAction(name, "restored", path))
    return actions


def _write_script(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.memvault.tmp")
    remove(tmp)
    write_new_exclusive(tmp, text.encode(), mode=0o755)
    replace(tmp, path)  # over a link at the hook's name too: the link goes, what it pointed at is untouched


# -- pre-commit ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StagedProblem:
    path: str  # relative to the repository root, as git shows it
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"


def check_staged(vault_root: Path, cwd: Path | None = None) -> list[StagedProblem]:
    """Problems in the staged content of the vault's files.

    Runs git in ``cwd`` (the hook's working directory, where git's GIT_DIR / GIT_INDEX_FILE point from), so a
    ``git commit --only`` with its temporary index is checked against exactly what it will commit. Each file goes
    through :func:`memvault.stores.checks.commit_refusal`, the check every commit memvault makes runs: memory
    files are validated (keys, front matter, conflict markers, limits) and every file is scanned for secrets;
    symlinks, temp files and anything under ``.memvault`` are refused.
    """
    from ..rules.config import CONFIG_NAME, load
    from ..rules.errors import ConfigError
    from ..stores.checks import commit_problems

    cwd = Path(cwd or os.getcwd())
    top = Path(_git(cwd, "rev-parse", "--show-toplevel").decode().strip()).resolve()
    prefix = os.path.relpath(vault_root.resolve(), top).replace(os.sep, "/")
    prefix = "" if prefix == "." else prefix + "/"
    entries = _staged(cwd, prefix)
    blobs = _read_blobs(cwd, [sha for _, sha, _ in entries])
    try:
        limits = load(vault_root / CONFIG_NAME).limits
        sizes = {"facts": limits.fact_bytes, "inbox": limits.fact_bytes, "procedures": limits.procedure_bytes}
    except ConfigError:
        sizes = {}  # the staged memvault.toml is checked below; a broken one on disk must not hide other problems
    problems: list[StagedProblem] = []
    for path, sha, mode in entries:
        rel = path[len(prefix):]
        if mode == "120000":
            # A symlink travels to every host that pulls; memvault never follows one, and a link that points out
            # of the vault on the host that pulls it is a way to read (or, in .memvault, write) that host's files.
            target = blobs[sha].decode("utf-8", errors="replace")
            problems.append(StagedProblem(path, f"a symlink (to {target}): commit the file itself, memvault does not "
                                                "follow symlinks"))
            continue
        problems += [StagedProblem(path, f.reason, f.line) for f in commit_problems(rel, blobs[sha], limits=sizes)]
    return problems


def _staged(cwd: Path, prefix: str) -> list[tuple[str, str, str]]:
    """(repo path, staged blob id, mode) of added or modified files and symlinks in the vault."""
    out = _git(cwd, "diff", "--cached", "--raw", "-z", "--no-renames", "--diff-filter=AMT", "--no-ext-diff",
               "--", f":(top,literal){prefix}" if prefix else ":(top)")
    fields = out.split(b"\0")
    entries = []
    for meta, path in zip(fields[0::2], fields[1::2]):
        if not meta.startswith(b":"):
            continue
        _old_mode, new_mode, _old_sha, new_sha, _status = meta[1:].decode().split()
        if new_mode not in ("100644", "100755", "120000"):
            continue  # submodules hold no text of ours
        entries.append((path.decode("utf-8", errors="surrogateescape"), new_sha, new_mode))
    return entries


def _read_blobs(cwd: Path, shas: Sequence[str]) -> dict[str, bytes]:
    """The staged blobs, read in one ``git cat-file --batch`` (one process however many files are staged)."""
    if not shas:
        return {}
    unique = list(dict.fromkeys(shas))
    out = _git(cwd, "cat-file", "--batch", input="\n".join(unique).encode() + b"\n")
    blobs, pos = {}, 0
    for sha in unique:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        size = int(header[2])
        blobs[sha] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return blobs


def pre_commit(vault_root: Path, out=None) -> int:
    """The pre-commit hook: 0 when the staged vault files are fine, else 1 after one line per problem."""
    out = out or sys.stderr
    problems = check_staged(vault_root)
    for problem in problems:
        print(printable_line(f"memvault pre-commit: {problem}"), file=out)
    if problems:
        print(f"memvault pre-commit: commit refused ({len(problems)} problem{'s' if len(problems) > 1 else ''}); "
              "fix the files and 'git add' them again", file=out)
        return 1
    return 0


# -- post-* ----------------------------------------------------------------------------------------------
def start_reindex(vault_root: Path) -> subprocess.Popen[bytes] | None:
    """Ask for a reindex in the background and return at once.

    Reindexes never pile up: the request is a flag file, and at most one worker runs per vault (it holds
    ``locks/hook-reindex.lock`` and goes round again while the flag is set). When a worker is already running the
    flag is all it takes; when ``memvault watch`` is running it picks the change up itself. None when no new
    worker was started.
    """
    from .watch import watcher_running

    state = state_dir_for(vault_root)
    if watcher_running(state):
        return None
    # The flag and the log are opened without following links (the state directory is in the git directory, where
    # no commit reaches; a link planted there by hand still sends nothing elsewhere).
    os.close(open_private(state / REINDEX_FLAG, os.O_WRONLY | os.O_CREAT))
    if lock_held(state / "locks" / REINDEX_LOCK):
        return None  # the running worker will see the flag
    env = {k: v for k, v in os.environ.items() if k not in _HOOK_ENV}
    with os.fdopen(open_private(state / REINDEX_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-P", "-m", "memvault.githooks", "reindex-worker", "--vault", str(vault_root)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=vault_root, env=env, start_new_session=True)


def reindex_worker(vault_root: Path, out: Any = None) -> int:
    """The background worker: reindex while the flag is set, one worker at a time (see :func:`start_reindex`)."""
    import time

    from ..core.vault import Vault

    out = out or sys.stderr
    state = state_dir_for(vault_root)
    flag, lock = state / REINDEX_FLAG, state / "locks" / REINDEX_LOCK
    runs = 0
    while True:
        with try_lock(lock) as mine:
            if not mine:
                return 0  # another worker has it and will see the flag
            while flag.exists() or flag.is_symlink():
                remove(flag)
                started = time.monotonic()
                vault = Vault.open(vault_root)
                report = vault.reindex()
                runs += 1
                model = f", model from {vault.engine.source}" if vault.engine.source else ""
                print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} reindex: {report.files_changed} files changed, "
                      f"{report.chunks_embedded} chunks embedded, {report.chunks_pending} pending, "
                      f"{time.monotonic() - started:.2f} s{model}", file=out, flush=True)
                for warning in report.warnings + report.problems:
                    print(printable_line(f"  warning: {warning}"), file=out, flush=True)
        if not flag.exists():  # a request that came in as the lock was released is served, not lost
            return 0


# -- entry point -----------------------------------------------------------------------------------------
def _git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True)
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m memvault.githooks NAME --vault ROOT [ARGS...]``, as run by the installed hook scripts."""
    parser = argparse.ArgumentParser(prog="python -m memvault.githooks", description=__doc__.split("\n")[0])
    parser.add_argument("hook", choices=[*HOOKS, "reindex-worker"])
    parser.add_argument("--vault", required=True, type=Path, help="the vault's folder: relative to the top of the work tree "
                        "the hook runs in (as installed), or absolute")
    # The hook's own arguments from git (post-checkout's refs and flag, post-rewrite's command) follow; none of
    # the checks needs them, so they are accepted and ignored.
    options, _git_args = parser.parse_known_args(argv)
    try:
        if options.hook == "reindex-worker":
            return reindex_worker(options.vault)
        root, elsewhere = hook_vault(options.vault)
        if options.hook == "pre-commit" and elsewhere is not None:
            print(printable_line(f"memvault pre-commit: commit refused: {elsewhere}"), file=sys.stderr)
            return 1
        if root is None:
            return 0  # no vault where the hook looks: nothing to check or reindex
        if options.hook == "pre-commit":
            return pre_commit(root)
        start_reindex(root)  # an older hook's vault, from anywhere: reindexing it is still right
        return 0
    except Exception as exc:  # noqa: BLE001 - the one funnel: one line, never a traceback into git's output
        print(printable_line(f"memvault {options.hook}: error: {describe(exc)[0]}"), file=sys.stderr)
        # A broken check must not silently let everything through, nor a failed reindex block git.
        return 1 if options.hook in ("pre-commit", "reindex-worker") else 0


if __name__ == "__main__":
    sys.exit(main())
