"""memvault.toml: the vault's configuration, read with tomllib, validated once, with defaults for every key."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

CONFIG_NAME = "memvault.toml"

DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"

TEMPLATE = '''\
# memvault vault configuration (TOML). Every key is optional; the values shown are the defaults.

[episodes]
# Episodes are high-volume and retention must really delete them, so by default they stay out of git.
# Set to true to commit them (each host then writes its own files so merges never conflict).
track_in_git = false
# fsync every appended line: an acknowledged episode survives a power loss.
fsync = true

[git]
# Commit every change made through memvault (fact set/rm/edit, proc add). false leaves commits to you.
autocommit = true
'''


@dataclass(frozen=True)
class Config:
    """Validated configuration of one vault. ``raw`` keeps every table for sections later code reads."""

    path: Path | None = None
    track_episodes: bool = False
    fsync_episodes: bool = True
    autocommit: bool = True
    raw: dict[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> dict[str, Any]:
        value = self.raw.get(name, {})
        if not isinstance(value, dict):
            raise ConfigError(self.path or CONFIG_NAME, f"[{name}] must be a table")
        return value

    def get(self, section: str, key: str, default: Any, kind: type | tuple[type, ...] | None = None) -> Any:
        """Read ``[section] key``, check its type against ``kind`` (or the default's type)."""
        value = self.section(section).get(key, default)
        expected = kind or type(default)
        if expected is float:
            expected = (int, float)
        if value is not None and expected is not type(None) and not isinstance(value, expected):
            raise ConfigError(self.path or CONFIG_NAME, f"[{section}] {key} has the wrong type: {value!r}")
        if isinstance(value, bool) and expected in ((int, float), int):
            raise ConfigError(self.path or CONFIG_NAME, f"[{section}] {key} must be a number, not {value!r}")
        return value


def load(path: Path) -> Config:
    """Read and validate ``path`` (a memvault.toml). A missing file gives the defaults."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Config(path=path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, f"invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, f"cannot read: {exc}") from None
    base = Config(path=path, raw=raw)
    return Config(
        path=path,
        track_episodes=base.get("episodes", "track_in_git", False),
        fsync_episodes=base.get("episodes", "fsync", True),
        autocommit=base.get("git", "autocommit", True),
        raw=raw,
    )
