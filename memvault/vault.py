"""The vault: a directory with a ``memvault.toml``, its three kinds of memory, and the git repository around it."""
from __future__ import annotations

import contextlib
import getpass
import os
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import config as config_mod
from .config import CONFIG_NAME, Config
from .episodes import EpisodeLog
from .errors import GitError, VaultNotFound
from .facts import FactStore, validate_source
from .fsutil import atomic_write, locked
from .gitstore import GitStore, LogEntry
from .procedures import ProcedureStore

if TYPE_CHECKING:
    from .embeddings import Embedder
    from .index import Index, Progress, SyncReport
    from .recall import RecallResult
    from .state import State

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

    #: Builds the embedder for a config; tests replace it with a deterministic fake.
    embedder_factory: Callable[[Config], Embedder] | None = None
    #: Reach the model through the warm embedder daemon (memvault.daemon) instead of loading it here. The CLI
    #: turns this on for short-lived commands; long-lived processes (MCP server, watcher) load in-process.
    use_daemon: bool = False

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.config: Config = config_mod.load(self.root / CONFIG_NAME)
        self.state_dir = self.root / STATE_DIR
        self.facts = FactStore(self)
        self.procedures = ProcedureStore(self)
        self.episodes = EpisodeLog(self)
        self._embedder: Embedder | None = None
        self.facts.listeners.append(self._on_fact_change)

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

    @cached_property
    def lifecycle(self) -> config_mod.Lifecycle:
        """Retention, trust, staleness, dedup and expiry settings (validated)."""
        return config_mod.lifecycle(self.config)

    # -- index and recall --------------------------------------------------------------------------------
    @cached_property
    def index(self) -> Index:
        from .index import Index

        return Index(self)

    @cached_property
    def state(self) -> State:
        from .state import State

        return State(self.state_dir / "state.db")

    def embedder(self) -> Embedder:
        """The configured embedding model, loaded once per vault object (raises ModelUnavailable)."""
        if self._embedder is None:
            factory = type(self).embedder_factory
            if factory is not None:
                self._embedder = factory(self.config)
            elif self.use_daemon and self.config.get("embedding", "daemon", True, bool) \
                    and not os.environ.get("MEMVAULT_NO_DAEMON"):
                self._embedder = self._daemon_embedder()
            else:
                from .embeddings import load_embedder

                self._embedder = load_embedder(self.config.model, query_prefix=self.config.query_prefix)
        return self._embedder

    def _daemon_embedder(self) -> Embedder:
        from . import daemon
        from .embeddings import load_embedder
        from .timeutil import parse_age

        idle = parse_age(self.config.get("embedding", "daemon_idle", "15m", str))
        try:
            return daemon.connect(self.config.model, self.config.query_prefix,
                                  idle=idle.total_seconds() if idle else daemon.DEFAULT_IDLE)
        except daemon.DaemonUnavailable:
            return load_embedder(self.config.model, query_prefix=self.config.query_prefix)

    def recall(
        self, query: str, k: int = 10, kinds: Sequence[str] | None = None, budget: int | None = None, **options: Any
    ) -> RecallResult:
        """The ``k`` memories that best answer ``query`` (a list of :class:`memvault.recall.Hit`, best first,
        with ``.warnings``). ``budget`` keeps the best hits that fit that many tokens."""
        from .recall import recall

        return recall(self, query, k=k, kinds=kinds, budget=budget, **options)

    def reindex(self, *, model: str | None = None, full: bool = False, progress: Progress | None = None,
                source: str | None = None) -> SyncReport:
        """Bring the index in step with the vault; rebuild it whole when the model changed (or ``full``).

        ``model`` first sets ``[embedding] model`` in memvault.toml (committed). An incremental run loads the
        model only when there is text to embed.
        """
        if model is not None and model != self.config.model:
            self._set_model(model, source)
        index = self.index
        identity = index.identity() if index.exists() else None
        if full or identity is None or not self.config.wants_model(identity):
            return index.rebuild(self.embedder, progress=progress)
        report = index.sync(self.embedder, progress=progress)
        if report.model_loaded and self._embedder is not None and identity is not None and \
                not self._embedder.identity.same_vectors(identity):
            return index.rebuild(self.embedder, progress=progress)  # same name, other weights or prefix
        return report

    def _set_model(self, model: str, source: str | None) -> None:
        path = self.root / CONFIG_NAME
        atomic_write(path, config_mod.set_model(path, model).encode("utf-8"))
        self.commit([path], f"embedding model {model}", source=source or self.default_source())
        self.config = config_mod.load(path)
        self.__dict__.pop("lifecycle", None)
        self._embedder = None

    def _on_fact_change(self, event: str, key: str, fact: object) -> None:
        """A write through the library updates the index at once (keywords now; the vector now if the model is
        already loaded in this process, else at the next recall or reindex)."""
        self.refresh_index([self.facts.dir / f"{key}.md"])

    def refresh_index(self, paths: list[Path]) -> None:
        index = self.index
        if not index.exists():
            return
        loaded = self._embedder
        index.sync((lambda: loaded) if loaded is not None else None, only=paths)

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
