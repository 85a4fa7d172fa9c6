"""The one exception hierarchy of memvault, and the one place an exception becomes a message and an exit code.

Library code raises these; every interface (the CLI, the MCP server, the git hooks, the watcher) turns an
exception into a one-line message and an exit code with :func:`describe`, and nowhere else. Each subclass carries
the path, key or name at fault so the message can name it.
"""
from __future__ import annotations

from pathlib import Path

#: Exit code of a bug (an exception memvault did not raise on purpose); sysexits' EX_SOFTWARE.
INTERNAL_EXIT = 70


class MemvaultError(Exception):
    """Base class of every error memvault raises on purpose."""

    exit_code = 1


class VaultNotFound(MemvaultError):
    """No vault at the given path, in MEMVAULT_DIR, or in any parent of the current directory."""


class ConfigError(MemvaultError):
    """memvault.toml is unreadable or holds a bad value."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class InvalidKey(MemvaultError):
    """A fact key or procedure name breaks the naming rules."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"invalid key {key!r}: {reason}")


class InvalidValue(MemvaultError):
    """An argument or field holds a value of the wrong type or range."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"{name}: {reason}")


class LimitExceeded(InvalidValue):
    """An item is larger than ``[limits]`` allows (one write must not cost minutes of embedding)."""


class FactNotFound(MemvaultError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no fact with key {key!r}")


class FactParseError(MemvaultError):
    """A fact file cannot be read: broken YAML, a field of the wrong type, a body that is missing."""

    def __init__(self, path: Path | str, reason: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.line = line
        where = f"{path}:{line}" if line else f"{path}"
        super().__init__(f"{where}: {reason}")


class FrontMatterError(MemvaultError):
    """YAML front matter that cannot be read; readers add the file (:class:`FactParseError`)."""

    def __init__(self, reason: str, line: int | None) -> None:
        self.reason = reason
        self.line = line
        super().__init__(f"line {line}: {reason}" if line else reason)


class UnsafePath(MemvaultError):
    """A file in the vault is a symlink that leaves the vault, or not a regular file: never followed or read."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class ProcedureNotFound(MemvaultError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no procedure named {name!r}")


class ProcedureError(MemvaultError):
    """A procedure cannot be added, shown or run as asked (ambiguous name, dirty file, not executable...)."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"procedure {name!r}: {reason}")


class EpisodeError(MemvaultError):
    """An episode is invalid (missing source, bad time, bad meta) or a line on disk cannot be read."""

    def __init__(self, reason: str, path: Path | str | None = None, line: int | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.line = line
        self.reason = reason
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line else f"{path}: "
        super().__init__(f"{where}{reason}")


class GitError(MemvaultError):
    """A git operation failed (no repository, commit refused, merge conflict...)."""


class SyncConflict(GitError):
    """``memvault sync`` stopped on a conflict: the same memory changed here and on the remote.

    ``keys`` are fact keys (``db/primary``) or, for anything that is not a fact, the vault-relative path;
    ``paths`` are the conflicting paths relative to the repository root. Nothing was changed here.
    """

    def __init__(self, keys: list[str], paths: list[str], remote: str, branch: str, *, reason: str | None = None) -> None:
        self.keys = keys
        self.paths = paths
        self.remote = remote
        self.branch = branch
        names = ", ".join(keys)
        verb = "changed" if len(keys) == 1 else "each changed"
        edit = ", ".join(paths)
        super().__init__(reason or (
            f"sync stopped: {names} {verb} here and on the remote; your version is kept and the remote's is not "
            f"merged; resolve with: git pull --rebase {remote} {branch}, edit {edit}, git add, "
            "git rebase --continue, then memvault sync"
        ))


class PurgeIncomplete(MemvaultError):
    """A purge removed the memories from the files and git, but their text may still be readable in
    the vault's state directory (a step of scrubbing the index or state failed)."""


class SearchIndexError(MemvaultError):
    """The search index (or the local state database) cannot be opened, read or rebuilt."""


class IndexDamaged(SearchIndexError):
    """An index file holds what this memvault never writes (a stamp it cannot read, vectors of another width than
    its model's): damaged, like a malformed page, so it is moved aside and rebuilt from the vault's files."""


class PlansChanged(SearchIndexError):
    """A table the shared index's connection had prepared queries on changed under it (another host's migration):
    the connection is dropped, and the call may be asked again on a new one."""


class SchemaTooNew(MemvaultError):
    """A database (the index, the local state, the shared PostgreSQL index) records a migration this memvault does
    not know: a newer one wrote it. Refused rather than written in the old form, and never taken for damage."""

    def __init__(self, where: str, names: list[str]) -> None:
        from .version import VERSION

        self.where = where
        self.names = names
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        super().__init__(f"{where}: written by a newer memvault (migration {names[0]!r}{more}; this is memvault "
                         f"{VERSION}): upgrade memvault here, or restart a process started before the upgrade")


class ModelUnavailable(MemvaultError):
    """The embedding model cannot be loaded (not installed, not downloadable offline, bad path)."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason
        super().__init__(f"embedding model {model!r} is unavailable: {reason}")


class DaemonUnavailable(MemvaultError):
    """No warm embedder could be reached or started; the caller loads the model itself."""


class SecretRefused(MemvaultError):
    """The text looks like it holds a secret (a key, a token, a password); pass --allow-secret to store it."""

    def __init__(self, what: str, findings: str) -> None:
        self.what = what
        self.findings = findings
        super().__init__(f"{what} refused: {findings} (the vault is a git repository that gets pushed; "
                         "use --allow-secret if this is not a secret)")


class UntrustedSource(MemvaultError):
    """A source may not do what it asked (see the trust table in :mod:`memvault.rules.trust`)."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"source {source!r} is not trusted: {reason}")


class ScopeRefused(UntrustedSource):
    """A source's scope (``[scopes]`` in memvault.toml, :mod:`memvault.rules.scopes`) does not reach the path it
    asked for, or a proposal's own source (or an agent without a review scope) tried to accept or reject it."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        MemvaultError.__init__(self, f"source {source!r} may not {reason}")


class WatcherRunning(MemvaultError):
    """Another ``memvault watch`` already holds this vault's watch lock."""

    def __init__(self, root: Path, pid: int | None, host: str | None, since: str | None) -> None:
        self.root = root
        self.pid = pid
        self.host = host
        self.since = since
        who = f"pid {pid}" if pid is not None else "a process whose pid is not recorded yet"
        if host:
            who += f" on {host}"
        if since:
            who += f" since {since}"
        super().__init__(f"{root}: a watcher is already running ({who}); stop it first")


class LockTimeout(MemvaultError):
    """One of the vault's locks stayed held longer than a writer waits (``MEMVAULT_LOCK_WAIT``): its holder is
    stuck (a git hook waiting on a dead share, a process stopped with Ctrl-Z) or very slow. Nothing was done."""

    def __init__(self, name: str, waited: float, holder: int | None) -> None:
        self.name = name
        self.waited = waited
        self.holder = holder
        who = f"held by process {holder}" if holder is not None else "held by another process"
        super().__init__(f"gave up after waiting {waited:g} s for the vault's lock {name} (in its state directory), "
                         f"{who}; nothing was done: try again, or end that process if it is stuck "
                         f"(MEMVAULT_LOCK_WAIT sets the wait, in seconds)")


class HookConflict(MemvaultError):
    """A foreign git hook cannot be chained because a chained hook of that name is already kept."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        super().__init__(f"{path}: {reason}")


#: Every exit code memvault's commands use, and what it means (README's table is generated from this).
EXIT_CODES: dict[int, str] = {
    0: "success (also `recall` that finds nothing: `nothing_found` says why)",
    1: "an error: one line on stderr, `memvault: error: ...`, naming the file, key or argument at fault; also "
       "`ingest` and `import` when an item was refused and nothing else came in (the report is printed whole)",
    2: "a usage error: an unknown command or option, a missing or malformed argument",
    INTERNAL_EXIT: "a bug: `internal error, please report it: ...` (`MEMVAULT_DEBUG=1` shows the traceback)",
    130: "interrupted (Ctrl-C): one line on stderr, `memvault: interrupted`",
}


def exit_table() -> str:
    """EXIT_CODES as a markdown table."""
    rows = ["| code | meaning |", "|---|---|"] + [f"| `{code}` | {text} |" for code, text in EXIT_CODES.items()]
    rows.append("| other | `proc run` exits with the procedure's own exit code |")
    return "\n".join(rows)


def describe(exc: BaseException) -> tuple[str, int]:
    """The one-line message and the exit code of ``exc``: the only mapping from exceptions to what a person or an
    agent reads. Used by the CLI, the MCP server, the git hooks and the watcher alike.

    A :class:`MemvaultError` says what it is; an ``OSError`` names its file; bad bytes say where they are; anything
    else is a bug, reported on one line with exit code 70 (``MEMVAULT_DEBUG=1`` shows the traceback).
    """
    if isinstance(exc, MemvaultError):
        return _one_line(str(exc)), exc.exit_code
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})", 1
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return _one_line(f"{where}{exc.strerror or exc}"), 1
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", 130
    detail = str(exc).strip()
    return _one_line(f"internal error, please report it: {type(exc).__name__}" + (f": {detail}" if detail else "")
                     + " (MEMVAULT_DEBUG=1 shows the traceback)"), INTERNAL_EXIT


def _one_line(text: str, limit: int = 2000) -> str:
    """``text`` on one line of at most ``limit`` characters, with what looks like a secret redacted.

    An error quotes the value at fault (a key, a time, a kind), and its line goes to stderr, an MCP client, the
    agents.log, the watcher's log and import reports: a token pasted where a key belongs came back in each of them.
    The detector the write gate uses says what was left out (``<redacted:GitHub-token>``) instead. A path the
    generic rule takes for a random run is kept: an error names its file (``/tmp/pytest-605/…-2026-11-20T09-00``)."""
    from .secrets import ENTROPY_KIND, secret_spans  # ~25 ms of compiled rules, paid only on the way to an error

    text = text[: limit * 4]  # bounded: the rest is cut below anyway
    out, last = [], 0
    for start, end, finding in secret_spans(text):
        if start < last or finding.kind == ENTROPY_KIND and text.startswith(("/", "~/", "./", "../"), start):
            continue
        out += [text[last:start], f"<redacted:{finding.kind.replace(' ', '-')}>"]
        last = end
    line = " ".join("".join([*out, text[last:]]).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
