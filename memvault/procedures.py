"""Procedures: procedural memory. Runbook scripts and markdown runbooks under ``procedures/``, in git.

A procedure is always handled whole (a runbook missing step 3 is worse than none) and always with the git
version it came from: the commit that last changed it and the blob id of the exact bytes shown or run.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from . import frontmatter_edit as fm
from .errors import InvalidKey, InvalidValue, ProcedureError, ProcedureNotFound
from .facts import refuse_secrets, validate_key
from .fsutil import atomic_write
from .gitstore import blob_id

if TYPE_CHECKING:
    from .episodes import Episode
    from .vault import Vault

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


class ProcedureStore:
    """The ``procedures/`` directory of a vault. Reached as ``vault.procedures``."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self.dir = vault.root / "procedures"

    def files(self) -> dict[str, list[Path]]:
        """name -> the files that carry it (more than one means the name is ambiguous)."""
        found: dict[str, list[Path]] = {}
        if not self.dir.is_dir():
            return found
        for dirpath, dirnames, filenames in os.walk(self.dir):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for filename in sorted(filenames):
                if filename.startswith(".") or filename.endswith(("~", ".tmp", ".swp")):
                    continue
                path = Path(dirpath) / filename
                name = path.relative_to(self.dir).with_suffix("").as_posix()
                found.setdefault(name, []).append(path)
        return found

    def path_of(self, name: str) -> Path:
        try:
            validate_key(name)
        except InvalidKey as exc:
            raise InvalidKey(name, exc.reason.replace("a key", "a procedure name")) from None
        paths = self.files().get(name)
        if not paths:
            raise ProcedureNotFound(name)
        if len(paths) > 1:
            names = ", ".join(p.name for p in paths)
            raise ProcedureError(name, f"ambiguous: several files carry this name ({names})")
        return paths[0]

    def _load(self, name: str, path: Path, *, commit: str | None, head_blob: str | None) -> Procedure:
        data = path.read_bytes()
        text = data.decode("utf-8", errors="replace")
        blob = blob_id(data)
        description, tags = parse_metadata(path, text)
        return Procedure(
            name=name,
            path=path,
            text=text,
            blob=blob,
            commit=commit,
            dirty=head_blob != blob,
            description=description,
            tags=tags,
            executable=os.access(path, os.X_OK),
        )

    def get(self, name: str, *, path: Path | None = None) -> Procedure:
        """The whole procedure ``name`` with the commit that last changed it and its blob id.

        ``path``, when the caller already knows the file (the index does), spares a walk of ``procedures/``.
        """
        if path is None or not path.is_file():
            path = self.path_of(name)
        git = self.vault.git
        commit = git.last_commit(path) if git else None
        head = git.head_blob(path) if git else None
        return self._load(name, path, commit=commit, head_blob=head)

    def list(self) -> list[Procedure]:
        """Every procedure, sorted by name. Provenance comes from two git calls for the whole directory."""
        files = self.files()
        heads, commits = self._provenance()
        out = []
        for name, paths in sorted(files.items()):
            for path in paths:
                rel = self.vault.git.rel(path) if self.vault.git else ""
                out.append(self._load(name, path, commit=commits.get(rel), head_blob=heads.get(rel)))
        return out

    def _provenance(self) -> tuple[dict[str, str], dict[str, str]]:
        git = self.vault.git
        if git is None or not self.dir.is_dir() or not git.has_head():
            return {}, {}
        rel_dir = git.rel(self.dir)
        heads = {}
        for line in git.run("ls-tree", "-r", "HEAD", "--", rel_dir).splitlines():
            info, _, path = line.partition("\t")
            heads[path] = info.split()[2]
        commits: dict[str, str] = {}
        current = ""
        for line in git.run("log", "--format=%x00%H", "--name-only", "--no-renames", "--", rel_dir).splitlines():
            if line.startswith("\x00"):
                current = line[1:]
            elif line and line not in commits:
                commits[line] = current
        return heads, commits

    def add(self, name: str, source_file: Path, *, force: bool = False, source: str | None = None,
            allow_secret: bool = False) -> Procedure:
        """Copy ``source_file`` in as procedure ``name`` (keeping its extension and mode) and commit it.

        A runbook that looks like it holds a secret is refused unless ``allow_secret``."""
        try:
            validate_key(name)
        except InvalidKey as exc:
            raise InvalidKey(name, exc.reason.replace("a key", "a procedure name")) from None
        source_file = Path(source_file)
        if not source_file.is_file():
            raise InvalidValue("FILE", f"{source_file}: no such file")
        data = source_file.read_bytes()
        if not allow_secret:
            refuse_secrets(data.decode("utf-8", errors="replace"), f"procedure {name}")
        suffix = source_file.suffix
        target = self.dir / (name + suffix)
        base = self.dir.resolve()
        if base not in target.resolve().parents:
            raise InvalidKey(name, "resolves outside procedures/")
        with self.vault.write_lock():
            existing = self.files().get(name, [])
            others = [p for p in existing if p != target]
            if others:
                raise ProcedureError(name, f"already exists as {others[0].relative_to(self.vault.root)}")
            if target.exists() and not force:
                raise ProcedureError(name, "already exists (use --force to replace it)")
            mode = source_file.stat().st_mode & 0o777
            atomic_write(target, data, mode=mode)
            self.vault.commit([target], f"proc add {name}", source=source, key=f"procedure:{name}")
        self.vault.refresh_index([target])
        return self.get(name)

    def run(
        self,
        name: str,
        args: Sequence[str] = (),
        *,
        allow_dirty: bool = False,
        source: str | None = None,
        stdout: IO[Any] | int | None = None,
        stderr: IO[Any] | int | None = None,
        cwd: Path | None = None,
    ) -> RunResult:
        """Run procedure ``name`` and record the run as a ``procedure_run`` episode.

        The output goes to ``stdout``/``stderr`` (inherited by default: streamed as it comes). A file with
        uncommitted changes is refused unless ``allow_dirty``; a dirty run is recorded as dirty.
        """
        proc = self.get(name)
        if proc.path.suffix == ".md":
            raise ProcedureError(name, "is a markdown runbook: read it with 'memvault proc show', only scripts run")
        if proc.dirty and not allow_dirty:
            state = "was never committed" if proc.commit is None else "has uncommitted changes"
            raise ProcedureError(
                name, f"{state}; commit it, or pass --allow-dirty to run it anyway (the run is recorded as dirty)"
            )
        if proc.executable:
            argv = [str(proc.path)]
        elif proc.path.suffix in INTERPRETERS:
            argv = [*INTERPRETERS[proc.path.suffix], str(proc.path)]
        else:
            raise ProcedureError(name, f"{proc.path.name} is not executable (chmod +x it)")
        env = dict(os.environ, MEMVAULT_DIR=str(self.vault.root), MEMVAULT_PROCEDURE=name)
        started = time.monotonic()
        try:
            completed = subprocess.run([*argv, *args], stdout=stdout, stderr=stderr, cwd=cwd, env=env)
            exit_code = completed.returncode
        except OSError as exc:
            raise ProcedureError(name, f"cannot start: {exc.strerror}") from None
        duration_ms = int((time.monotonic() - started) * 1000)
        status = f"exit {exit_code}" if exit_code >= 0 else f"killed by signal {-exit_code}"
        episode = self.vault.episodes.append(
            allow_secret=True,
            text=f"ran procedure {name} ({status}, {duration_ms / 1000:.1f} s)" + (" from a dirty working copy" if proc.dirty else ""),
            source=source,
            kind="procedure_run",
            tags=list(proc.tags),
            meta={
                "name": name,
                "commit": proc.commit,
                "blob": proc.blob,
                "args": list(args),
                "exit_code": exit_code,
                "duration_ms": duration_ms,
                "dirty": proc.dirty,
            },
        )
        return RunResult(proc, list(args), exit_code, duration_ms, episode)
