"""The vault: a directory with a ``memvault.toml``, its three kinds of memory, and the git repository around it."""
from __future__ import annotations

import contextlib
import getpass
import os
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from . import config as config_mod
from .config import CONFIG_NAME, Config
from .episodes import EpisodeLog
from .errors import GitError, VaultNotFound
from .facts import FactStore, validate_source
from .fsutil import atomic_write, locked
from .gitstore import GitStore, LogEntry
from .procedures import ProcedureStore

STATE_DIR = ".memvault"


def _gitignore(track_episodes: bool) -> str:
    lines = ["# memvault: local state (the index, locks) is derived and never committed", f"{STATE_DIR}/"]
    if not track_episodes:
        lines += [
            "# Episodes are high-volume and retention must really delete them: kept out of git by default.",
            "# Set [episodes] track_in_git = true in memvault.toml and remove this line to commit them.",
            "episodes/",
        ]
    return "\n".join(lines) + "\n"


class Vault:
    """One memory vault. Build it with :meth:`open` (discovery) or :meth:`init` (create)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.config: Config = config_mod.load(self.root / CONFIG_NAME)
        self.state_dir = self.root / STATE_DIR
        self.facts = FactStore(self)
        self.procedures = ProcedureStore(self)
        self.episodes = EpisodeLog(self)

    def __repr__(self) -> str:
        return f"Vault({str(self.root)!r})"

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def find_root(cls, path: Path | str | None = None) -> Path:
        """Discovery: ``path``, then ``MEMVAULT_DIR``, then the nearest parent of the cwd with memvault.toml."""
        if path is not None:
            root = Path(path).expanduser()
            if not (root / CONFIG_NAME).is_file():
                raise VaultNotFound(f"{root}: not a vault (no {CONFIG_NAME}); create one with 'memvault init {root}'")
            return root
        env = os.environ.get("MEMVAULT_DIR")
        if env:
            root = Path(env).expanduser()
            if not (root / CONFIG_NAME).is_file():
                raise VaultNotFound(f"MEMVAULT_DIR={env}: not a vault (no {CONFIG_NAME})")
            return root
        cwd = Path.cwd().resolve()
        for candidate in (cwd, *cwd.parents):
            if (candidate / CONFIG_NAME).is_file():
                return candidate
        raise VaultNotFound(
            f"no vault here: no {CONFIG_NAME} in {cwd} or its parents; pass --vault PATH, set MEMVAULT_DIR, "
            "or create one with 'memvault init'"
        )

    @classmethod
    def open(cls, path: Path | str | None = None) -> Vault:
        return cls(cls.find_root(path))

    @classmethod
    def init(cls, path: Path | str, *, track_episodes: bool = False) -> Vault:
        """Create the layout in ``path`` (idempotent: existing files are never overwritten).

        Runs ``git init`` when ``path`` is not inside a git work tree, and commits the files it created, and
        only those, so a vault inside a larger repository never stages anything else.
        """
        root = Path(path).expanduser()
        root.mkdir(parents=True, exist_ok=True)
        root = root.resolve()
        created: list[Path] = []
        for sub in ("facts", "procedures", "episodes", STATE_DIR):
            (root / sub).mkdir(exist_ok=True)
        config_text = config_mod.TEMPLATE
        if track_episodes:
            config_text = config_text.replace("track_in_git = false", "track_in_git = true")
        for name, content in ((CONFIG_NAME, config_text), (".gitignore", _gitignore(track_episodes))):
            target = root / name
            if not target.exists():
                atomic_write(target, content.encode("utf-8"))
                created.append(target)
        git = GitStore.discover(root) or GitStore.init(root)
        vault = cls(root)
        vault.__dict__["git"] = git
        if created:
            git.commit(created, "memvault init", trailers={"Memvault-Vault": git.rel(root) if git.root != root else "."})
        return vault

    # -- shared services ---------------------------------------------------------------------------------
    @cached_property
    def git(self) -> GitStore | None:
        """The repository holding the vault, or None (then nothing is committed)."""
        return GitStore.discover(self.root)

    def default_source(self) -> str:
        """``MEMVAULT_SOURCE``, else ``user:$USER``."""
        env = os.environ.get("MEMVAULT_SOURCE")
        if env:
            return validate_source(env)
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        return f"user:{user or 'unknown'}"

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        """Serialises writers of facts and procedures (read-modify-write, then commit) across processes."""
        with locked(self.state_dir / "locks" / "write.lock"):
            yield

    def commit(self, paths: list[Path], message: str, *, source: str | None = None, key: str | None = None) -> str | None:
        """Commit ``paths`` (and nothing else) with the key and source as trailers and the source as author."""
        if not self.config.autocommit:
            return None
        git = self.git
        if git is None:
            return None
        trailers = {}
        if key:
            trailers["Memvault-Key"] = key
        if source:
            trailers["Memvault-Source"] = source
        subject = f"{message} ({source})" if source else message
        return git.commit(paths, subject, author=source, trailers=trailers)

    def git_log(self, path: Path) -> list[LogEntry]:
        if self.git is None:
            raise GitError(f"{self.root} is not in a git repository: no history")
        return self.git.log(path)
