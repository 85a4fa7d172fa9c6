"""The one exception hierarchy of memvault.

Library code raises these; the CLI turns them into a one-line message and exit code 1 in exactly one place
(:func:`memvault.cli.main`). Each subclass carries the path, key or name at fault so the message can name it.
"""
from __future__ import annotations

from pathlib import Path


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


class SearchIndexError(MemvaultError):
    """The search index cannot be opened, read or rebuilt."""


class ModelUnavailable(MemvaultError):
    """The embedding model cannot be loaded (not installed, not downloadable offline, bad path)."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason
        super().__init__(f"embedding model {model!r} is unavailable: {reason}")


class SecretRefused(MemvaultError):
    """The text looks like it holds a secret (a key, a token, a password); pass --allow-secret to store it."""

    def __init__(self, what: str, findings: str) -> None:
        self.what = what
        self.findings = findings
        super().__init__(f"{what} refused: {findings} (the vault is a git repository that gets pushed; "
                         "use --allow-secret if this is not a secret)")


class UntrustedSource(MemvaultError):
    """A source outside [trust] trusted tried something only a trusted source may do."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        super().__init__(f"source {source!r} is not trusted: {reason}")
