"""Procedures: procedural memory. Runbook scripts and markdown runbooks under ``procedures/``, in git.

A procedure is always handled whole (a runbook missing step 3 is worse than none) and always with the git
version it came from: the commit that last changed it and the blob id of the exact bytes shown or run.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..rules import frontmatter_edit as fm
from ..rules.errors import InvalidValue, LimitExceeded, ProcedureError, ProcedureNotFound, UnsafePath
from ..rules.fsutil import (FileChange, entry_problem, make_temp_dir, read_inside, remove, remove_tree, walk,
                            write_new_exclusive)
from ..rules.gitenv import other_repo_env
from ..rules.lockwait import process_alive
from .gitstore import GitStore, blob_id
from ..rules.validation import Problem, validate_name

if TYPE_CHECKING:
    from .episodes import Episode

#: The kind of episode that records a run: written by the run itself (a model or an untrusted source claiming one
#: would be shown as the runbook's run, with the exit code and commit it claims).
RUN_KIND = "procedure_run"
# Scripts without an execute bit still run through the interpreter their extension names.
INTERPRETERS = {".sh": ["bash"], ".bash": ["bash"], ".py": [sys.executable]}
_META_LINE = re.compile(r"^\s*(?:#|//|--)\s*([a-z_]+)\s*:\s*(.*?)\s*$")


@dataclass
class Procedure:
    """A whole runbook with its provenance. ``commit`` is None for a file that was never committed."""

    name: str
    path: Path
    text: str
    blob: str
    commit: str | None
    dirty: bool
    description: str | None = None
    tags: list[str] = field(default_factory=list)
    executable: bool = False
    #: The exact bytes read, whose blob is ``blob``: what a run executes (never the path again).
    data: bytes = field(default=b"", repr=False, compare=False)
    #: Set by a write: what the caller should know (an index that could not be told, ...).
    warnings: list[str] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self, root: Path | None = None) -> dict[str, Any]:
        path = self.path.relative_to(root) if root is not None else self.path
        return {
            "name": self.name,
            "path": path.as_posix(),
            "text": self.text,
            "commit": self.commit,
            "blob": self.blob,
            "dirty": self.dirty,
            "description": self.description,
            "tags": list(self.tags),
        }


@dataclass
class RunResult:
    procedure: Procedure
    args: list[str]
    exit_code: int
    duration_ms: int
    episode: Episode


def parse_metadata(path: Path, text: str) -> tuple[str | None, list[str]]:
    """Description and tags: YAML front matter of a ``.md`` runbook, or a script's leading comment block."""
    meta: dict[str, Any] = {}
    if path.suffix == ".md":
        try:
            meta = fm.parse(text).meta
        except fm.FrontMatterError:
            meta = {}
    else:
        lines = text.splitlines()
        if lines and lines[0].startswith("#!"):
            lines = lines[1:]
        for line in lines[:40]:
            if not line.strip():
                continue
            if not line.lstrip().startswith(("#", "//", "--")):
                break
            m = _META_LINE.match(line)
            if m and m.group(1) in ("description", "tags"):
                meta[m.group(1)] = m.group(2)
    description = meta.get("description")
    tags_raw = meta.get("tags")
    if isinstance(tags_raw, str):
        tags = [t.strip() for t in tags_raw.strip("[]").split(",") if t.strip()]
    elif isinstance(tags_raw, list):
        tags = [str(t) for t in tags_raw]
    else:
        tags = []
    return (str(description) if description is not None else None), tags


log = logging.getLogger(__name__)
#: Editor droppings and temp files are never procedures.
IGNORED_SUFFIXES = ("~", ".tmp", ".swp", ".swo", ".swx")


@dataclass
class RunOutcome:
    """What running a script did, before it is recorded as an episode. ``interrupted``: the signal that asked
    memvault to stop during the run (passed on to the script); :func:`pass_on` delivers it again once recorded.
    ``cancelled``: its caller stopped it (``stop``), which is nothing to deliver again."""

    procedure: Procedure
    args: list[str]
    exit_code: int
    duration_ms: int
    interrupted: int | None = None
    cancelled: bool = False


#: Signals that stop a run midway: the script is given them (it may clean up), the run is recorded, then memvault
#: stops as the signal asked. A second one kills the script.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Folder names of the private copies a run executes (in the scratch folder the caller names): run-<pid>-<random>.
RUN_PREFIX = "run-"
_RUN_DIR = re.compile(r"run-(\d+)-[A-Za-z0-9_]+")
#: The record of a run in progress, beside its folder: run-<pid>-<random>.json.
RECORD_SUFFIX = ".json"


class ProcedureStore:
    """The ``procedures/`` directory of a vault. Provenance (commit, blob, dirty) comes from ``git``."""

    def __init__(self, root: Path, git: Callable[[], GitStore | None], *, max_bytes: int | None = None) -> None:
        self.root = root
        self.dir = root / "procedures"
        self._git = git
        self.max_bytes = max_bytes

    @property
    def git(self) -> GitStore | None:
        """The repository (found on first use: a listing or a recall without procedure hits never asks git)."""
        return self._git()

    def files(self, problems: list[Problem] | None = None) -> dict[str, list[Path]]:
        """name -> the files that carry it (more than one means the name is ambiguous). Symlinks out of
        ``procedures/`` and special files are reported in ``problems`` (or logged) and skipped."""
        found: dict[str, list[Path]] = {}
        base = os.path.realpath(self.dir)
        for entry in walk(self.dir, lambda path, reason: _report(problems, Problem(path, reason))):
            if entry.name.endswith(IGNORED_SUFFIXES):
                continue
            path = Path(entry.path)
            problem = entry_problem(entry, base)
            if problem is not None:
                _report(problems, Problem(path, problem))
                continue
            name = path.relative_to(self.dir).with_suffix("").as_posix()
            found.setdefault(name, []).append(path)
        for paths in found.values():
            paths.sort()
        return found

    def path_of(self, name: str) -> Path:
        validate_name(name)
        problems: list[Problem] = []
        paths = self.files(problems).get(name)
        if not paths:
            for problem in problems:  # a file of that name that is not read: say why, not "not found"
                if problem.path.relative_to(self.dir).with_suffix("").as_posix() == name:
                    raise ProcedureError(name, problem.reason)
            raise ProcedureNotFound(name)
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            raise ProcedureError(name, f"ambiguous: several files carry this name ({names})")
        return paths[0]

    def _blob(self, data: bytes) -> str:
        """The name git gives ``data`` in this vault's repository (SHA-1, or SHA-256 where it was made so)."""
        git = self.git
        return git.blob_id(data) if git is not None else blob_id(data)

    def _load(self, name: str, path: Path, *, commit: str | None, head_blob: str | None) -> Procedure:
        try:
            data = read_inside(path, self.dir)
        except UnsafePath as exc:
            raise ProcedureError(name, exc.reason) from None
        except FileNotFoundError:
            raise ProcedureNotFound(name) from None
        text = data.decode("utf-8", errors="replace")
        blob = self._blob(data)
        description, tags = parse_metadata(path, text)
        return Procedure(name=name, path=path, text=text, blob=blob, commit=commit, dirty=head_blob != blob,
                         description=description, tags=tags, executable=os.access(path, os.X_OK), data=data)

    def get(self, name: str, *, path: Path | None = None) -> Procedure:
        """The whole procedure ``name`` with the commit that last changed it and its blob id.

        ``path``, when the caller already knows the file (the index does), spares a walk of ``procedures/``.
        """
        if path is None or not path.is_file():
            path = self.path_of(name)
        return self.get_many([(name, path)])[0]

    def get_many(self, items: Sequence[tuple[str, Path]]) -> list[Procedure]:
        """Several procedures with their provenance from two git calls in all (recall's procedure hits)."""
        provenance = self.git.provenance([p for _, p in items]) if self.git is not None else {}
        out = []
        for name, path in items:
            commit, head = provenance.get(path, (None, None))
            out.append(self._load(name, path, commit=commit, head_blob=head))
        return out

    def list(self, problems: list[Problem] | None = None) -> list[Procedure]:
        """Every readable procedure, sorted by name; provenance from two git calls for the whole folder."""
        items = [(name, path) for name, paths in sorted(self.files(problems).items()) for path in paths]
        git = self.git
        rels = {path: git.rel(path) for _, path in items} if git is not None else {}
        heads, commits = self._provenance(set(rels.values()))
        out = []
        for name, path in items:
            rel = rels.get(path, "")
            try:
                out.append(self._load(name, path, commit=commits.get(rel), head_blob=heads.get(rel)))
            except (ProcedureError, ProcedureNotFound) as exc:
                _report(problems, Problem(path, getattr(exc, "reason", str(exc))))
        return out

    def _provenance(self, wanted: set[str]) -> tuple[dict[str, str], dict[str, str]]:
        """(blob in HEAD, commit that gave it) of each repository-relative path in ``wanted``, for the folder."""
        git = self.git
        if git is None or not wanted or not self.dir.is_dir() or not git.has_head():
            return {}, {}
        rel_dir = git.rel(self.dir)
        heads = {}
        for record in git.run("ls-tree", "-r", "-z", "HEAD", "--", rel_dir, strip=False).split("\0"):
            info, _, path = record.partition("\t")
            if path in wanted:
                heads[path] = info.split()[2]
        return heads, git.last_changes([rel_dir], wanted, heads)

    # -- planning writes ----------------------------------------------------------------------------------
    def plan_add(self, name: str, source_file: Path, *, force: bool = False) -> tuple[FileChange, int]:
        """The change that copies ``source_file`` in as procedure ``name`` (keeping its extension), and its mode."""
        validate_name(name)
        source_file = Path(source_file)
        if not source_file.is_file():
            raise InvalidValue("FILE", f"{source_file}: no such file")
        data = source_file.read_bytes()
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise LimitExceeded(f"procedure {name}", f"{len(data)} bytes, more than the {self.max_bytes} allowed "
                                                     "([limits] procedure_bytes)")
        target = self.dir / (name + source_file.suffix)
        base = self.dir.resolve()
        if base not in target.resolve().parents:
            raise ProcedureError(name, "resolves outside procedures/")
        # the other files' problems are not this add's (and unasked, they went to Python's last-resort log handler)
        existing = self.files([]).get(name, [])
        others = [p for p in existing if p != target]
        if others:
            raise ProcedureError(name, f"already exists as {others[0].relative_to(self.root)}")
        before = None
        if target.exists() or target.is_symlink():
            if not force:
                raise ProcedureError(name, "already exists (use --force to replace it)")
            try:
                before = read_inside(target, self.dir)
            except UnsafePath as exc:
                raise ProcedureError(name, exc.reason) from None
        return FileChange(target, before, data), source_file.stat().st_mode & 0o777

    # -- running -----------------------------------------------------------------------------------------
    def execute(self, proc: Procedure, args: Sequence[str], *, scratch: Path, allow_dirty: bool = False,
                stdout: IO[Any] | int | None = None, stderr: IO[Any] | int | None = None, cwd: Path | None = None,
                env: dict[str, str] | None = None, timeout: float | None = None,
                record: dict[str, Any] | None = None, stop: threading.Event | None = None,
                stdin: IO[Any] | int | None = None) -> RunOutcome:
        """Run ``proc`` with ``args``; its input is ``stdin`` and its output goes to ``stdout``/``stderr`` (each
        inherited by default: a person's terminal). ``stop``, once set (a caller that gave up on the run, from another
        thread), stops the script as a SIGTERM would.

        What runs is ``proc.data``, the bytes whose blob is recorded, copied into a private folder under
        ``scratch`` (0700, this host's) under the runbook's own file name: never the path in the vault again, which
        a checkout, a pull or another process may have changed, or swapped for a link, since it was read. The
        script finds its file in the vault in ``MEMVAULT_PROCEDURE_FILE``. ``record`` (JSON) is kept beside that
        folder while the script runs, for :meth:`dead_runs` to find if this process is killed before it returns.
        """
        name = proc.name
        if proc.path.suffix == ".md":
            raise ProcedureError(name, "is a markdown runbook: read it with 'memvault proc show', only scripts run")
        if proc.dirty and not allow_dirty:
            state = "was never committed" if proc.commit is None else "has uncommitted changes"
            raise ProcedureError(
                name, f"{state}; commit it, or pass --allow-dirty to run it anyway (the run is recorded as dirty)")
        if self._blob(proc.data) != proc.blob:  # a Procedure built by hand, without the bytes it names
            raise ProcedureError(name, "its bytes were not read with it: load it with the store's get()")
        if not proc.executable and proc.path.suffix not in INTERPRETERS:
            raise ProcedureError(name, f"{proc.path.name} is not executable (chmod +x it)")
        _sweep(scratch)
        folder = make_temp_dir(f"{RUN_PREFIX}{os.getpid()}-", scratch)
        kept = folder.with_name(folder.name + RECORD_SUFFIX)
        try:
            if record is not None:
                write_new_exclusive(kept, json.dumps(record).encode("utf-8"))
            copy = folder / proc.path.name
            write_new_exclusive(copy, proc.data, mode=0o700 if proc.executable else 0o600)
            argv = [str(copy)] if proc.executable else [*INTERPRETERS[proc.path.suffix], str(copy)]
            started = time.monotonic()

            def spawn() -> subprocess.Popen[bytes]:
                try:
                    return subprocess.Popen([*argv, *args], stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd,
                                            env=other_repo_env(**(env or {}), MEMVAULT_PROCEDURE_FILE=str(proc.path)))
                except OSError as exc:
                    raise ProcedureError(name, f"cannot start: {_not_started(proc, exc)}") from None

            exit_code, interrupted = _run(spawn, timeout, stop)
        finally:
            remove(kept)  # first: a copy left without its record is removed by the next sweep, unrecorded
            remove_tree(folder)
        return RunOutcome(proc, list(args), exit_code, int((time.monotonic() - started) * 1000), interrupted,
                          cancelled=stop is not None and stop.is_set())


def _not_started(proc: Procedure, exc: OSError) -> str:
    """Why the kernel would not start ``proc``, in its terms: "No such file or directory" for a file that is there
    meant its ``#!`` line (a CRLF file's names ``/bin/sh\\r``), "Exec format error" a missing ``#!`` line."""
    if not proc.executable:
        return str(exc.strerror or exc)
    first = proc.data.split(b"\n", 1)[0]
    if exc.errno == errno.ENOEXEC:
        return "it is executable but its first line is no '#!' line naming its interpreter"
    if exc.errno == errno.ENOENT and first.startswith(b"#!"):
        if first.endswith(b"\r"):
            return ("its '#!' line ends in a carriage return: the file has Windows line ends (CRLF); "
                    "convert it to LF line ends (dos2unix) and commit it")
        words = first[2:].split()
        named = os.fsdecode(words[0]) if words else ""
        return f"its '#!' line names {named!r}, which this host does not have"
    return str(exc.strerror or exc)


#: Seconds a script stopped by its caller (``stop``) has to clean up after its SIGTERM before it is killed.
STOP_GRACE = 5.0


def _run(spawn: Callable[[], subprocess.Popen[bytes]], timeout: float | None,
         cancel: threading.Event | None = None) -> tuple[int, int | None]:
    """Start the script and wait for it: its exit code, and the stop signal memvault got meanwhile (None). A stop
    signal is passed on to the script, which may clean up (a terminal's ^C reached it already: not sent twice); a
    second one kills it. ``timeout`` kills it too (-9). The handlers are in place before the script starts (one that
    signals memvault at once is not missed); signals are caught only on the main thread, where Python runs them.
    ``cancel`` set (from any thread) sends the script a SIGTERM, and a kill :data:`STOP_GRACE` seconds later."""
    received: list[int] = []
    child: subprocess.Popen[bytes] | None = None
    foreground = _foreground()

    def tell(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if child is None:
                return
            if len(received) > 1:
                child.kill()
            elif not (foreground and signum in (signal.SIGINT, signal.SIGHUP)):
                child.send_signal(signum)

    def stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        tell(signum)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        child = spawn()  # a script that cannot start: its ProcedureError, saying why
        if received:  # asked to stop while the script was starting
            tell(received[0])
        try:
            code = _wait(child, timeout, cancel, lambda: child.send_signal(signal.SIGTERM))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            code = -9
    except BaseException:
        if child is not None:  # anything else (an exception from another handler): no script left running
            child.kill()
            child.wait()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code, (received[0] if received else None)


def dead_runs(scratch: Path) -> list[tuple[Path, dict[str, Any] | None]]:
    """The records :meth:`ProcedureStore.execute` left of runs whose memvault is gone (killed, or the machine
    stopped, before the run returned), each with its content (None: not a JSON object). The caller records them and
    removes each with :func:`fsutil.remove <memvault.rules.fsutil.remove>`."""
    found: list[tuple[Path, dict[str, Any] | None]] = []
    for name in _of_dead_runs(scratch, RECORD_SUFFIX):
        path = scratch / name
        try:
            record = json.loads(read_inside(path, scratch, limit=1 << 20))
        except FileNotFoundError:
            continue  # another sweep took it
        except (OSError, UnsafePath, LimitExceeded, ValueError):
            record = None
        found.append((path, record if isinstance(record, dict) else None))
    return found


def _of_dead_runs(scratch: Path, suffix: str) -> list[str]:
    """The names in ``scratch`` of the runs' private copies (``suffix`` "": folders) or their records
    (:data:`RECORD_SUFFIX`: files) whose memvault is gone, sorted; never a link."""
    try:
        entries = list(os.scandir(scratch))
    except OSError:  # no scratch folder yet
        return []
    found = []
    for entry in entries:
        run = _RUN_DIR.fullmatch(entry.name[:len(entry.name) - len(suffix)]) if entry.name.endswith(suffix) else None
        if run is None or not (entry.is_file(follow_symlinks=False) if suffix else entry.is_dir(follow_symlinks=False)):
            continue
        if not process_alive(int(run.group(1))):
            found.append(entry.name)
    return sorted(found)


def _wait(child: subprocess.Popen[bytes], timeout: float | None, stop: threading.Event | None,
          stopped: Callable[[], Any]) -> int:
    """``child.wait(timeout)``, watching ``stop``: once set, ``stopped()`` (the script is told) and, should it still
    run :data:`STOP_GRACE` seconds later, a kill. TimeoutExpired past ``timeout``."""
    if stop is None:
        return child.wait(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    kill_at: float | None = None
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(child.args, timeout or 0)
        try:
            return child.wait(0.1 if left is None else min(0.1, left))
        except subprocess.TimeoutExpired:
            pass
        if stop.is_set() and kill_at is None:
            stopped()
            kill_at = time.monotonic() + STOP_GRACE
        elif kill_at is not None and time.monotonic() >= kill_at:
            child.kill()


def _sweep(scratch: Path) -> None:
    """Remove the private copies of runs whose memvault is gone (killed before it removed its own: one folder per
    such run, for good); a live process's, or one this user may not signal, stays."""
    for name in _of_dead_runs(scratch, ""):
        with contextlib.suppress(OSError):
            remove_tree(scratch / name)


def _foreground() -> bool:
    """Whether memvault runs in a terminal's foreground group, which gets ^C (and a hangup) with its script."""
    for fd in (0, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
    return False


def pass_on(outcome: RunOutcome) -> None:
    """After a stopped run is recorded: the signal that stopped it, delivered again, to do what it would have done
    (^C raises KeyboardInterrupt; SIGTERM ends the process by default)."""
    if outcome.interrupted is not None and threading.current_thread() is threading.main_thread():
        signal.raise_signal(outcome.interrupted)


def _report(problems: list[Problem] | None, problem: Problem) -> None:
    if problems is not None:
        problems.append(problem)
    else:
        log.warning("%s", problem)
