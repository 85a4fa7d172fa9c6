"""The vault: one directory with a ``memvault.toml``, its three kinds of memory, the index, and git around it.

:class:`Vault` is the facade every interface calls (CLI, MCP, git hooks, watcher, Python API): reads go to the
stores and recall, every write goes through the one write gate (:mod:`memvault.core.gate`). The stores below know
nothing of it; the gate and recall are handed the parts they need, explicitly.
"""
from __future__ import annotations

import contextlib

import getpass
import os
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules import config as config_mod
from ..rules.config import CONFIG_NAME, Config, holds_config
from ..models.engine import Engine, Status
from ..stores.episodes import EpisodeLog
from ..stores.host_folders import EPISODE_FOLDERS
from ..rules.errors import ConfigError, GitError, MemvaultError, ModelUnavailable, SearchIndexError, VaultNotFound
from ..stores.facts import Fact, FactStore
from ..rules.fsutil import atomic_write, ensure_dir
from ..rules.places import LEGACY_NAME, settle
from ..stores.gitstore import GitStore, LogEntry
from ..index import FieldWeights, Index, Progress, Sources, SyncReport
from ..index.changes import ChangeFeed, follow
from ..stores.procedures import ProcedureStore
from . import index_url
from .access import Reader
from .candidates import QueryVector
from .recall import Parts, RecallResult, searched_text
from .views import Episodes, Facts, Procedures
from ..rules.trust import Op
from ..rules.validation import validate_source

if TYPE_CHECKING:
    from . import ingest as ingest_mod
    from . import lifecycle
    from ..stores.captures import CaptureLog
    from .browse import Browse
    from .history import Growth
    from .gate import Committed, Counted, WriteGate
    from ..index.protocol import VaultIndex
    from ..stores.state import State

#: Where an older memvault kept its state, in the work tree: still ignored by the .gitignore memvault writes, but
#: nothing reads it any more (see :mod:`memvault.rules.places`).
STATE_DIR = LEGACY_NAME
EmbedderFactory = Callable[[Config], Any]  # Config -> an Embedder (memvault.models.embeddings)


def _gitignore(track_episodes: bool) -> str:
    # Local state lives in the git directory now (memvault.rules.places); the rule stays so an older memvault's
    # folder is never committed by a plain `git add -A` (no trailing slash: a file or a link there too).
    lines = ["# memvault: local state (the index, locks) is derived and never committed", STATE_DIR]
    if not track_episodes:
        lines += [
            "# Episodes are high-volume and retention must really delete them: kept out of git by default.",
            "# Set [episodes] track_in_git = true in memvault.toml and remove this line to commit them.",
            "episodes/",
        ]
    return "\n".join(lines) + "\n"


def default_source() -> str:
    """``MEMVAULT_SOURCE``, else ``user:$USER``: who is writing, for the CLI and the Python API."""
    env = os.environ.get("MEMVAULT_SOURCE")
    if env:
        return validate_source(env, "MEMVAULT_SOURCE")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return validate_source(f"user:{user or 'unknown'}", "USER")


class Vault:
    """One memory vault. Build it with :meth:`open` (discovery) or :meth:`init` (create).

    ``embedder_factory`` replaces model loading (tests pass a deterministic fake); ``daemon`` overrides
    ``[embedding] daemon`` (whether the model lives in a shared warm process); ``status`` receives progress lines
    while a model loads.
    """

    def __init__(self, root: Path, *, embedder_factory: EmbedderFactory | None = None, daemon: bool | None = None,
                 status: Status | None = None) -> None:
        self.root = Path(root).resolve()
        #: Who this process acts for when a call names no source (an MCP server's ``--source``); None: the
        #: environment's (``MEMVAULT_SOURCE``, else ``user:$USER``).
        self.acting: str | None = None
        #: This host's index, state, captures, logs, markers, locks and settings: inside the git directory (or
        #: outside the tree when the vault is not in git), where no commit can put a link or a file of its choosing.
        #: A ``.memvault`` in the work tree is an older memvault's, moved here once, or inert (named once).
        self._git: GitStore | None | bool = False  # False: not looked for yet
        self.state_dir, moved = settle(self.root, self._tracked)
        self.config: Config = config_mod.load(self.root / CONFIG_NAME)
        self._embedder_factory = embedder_factory
        self._daemon = daemon
        self._status = status
        self.engine = self._make_engine(self.config)
        self._build()
        #: What the person should hear on opening (state moved out of the work tree, a setting of memvault.toml
        #: ignored, a purge killed part-way that waits for the next write: opening a vault only reads, whoever
        #: opens it: a recall, the web view, a hook).
        self.notices: list[str] = moved + list(self.config.ignored)
        if (self.state_dir / "purge.json").is_file():  # lifecycle.PURGE_JOURNAL, without importing the gate
            from .lifecycle import pending_purge

            self.notices += [pending_purge(self.state_dir) or ""]

    def _tracked(self, rel: str) -> bool:
        """Whether git tracks anything at ``rel`` (vault-relative); asked only when a ``.memvault`` is there."""
        git = self.git
        if git is None:
            return False
        base = git.rel(self.root)  # the vault's own path: .memvault itself may be a link, never resolved
        try:
            return bool(git.run("ls-files", "-z", "--", rel if base == "." else f"{base}/{rel}"))
        except GitError:
            return True  # unsure: leave it where it is rather than adopt what may be someone else's

    def _make_engine(self, config: Config) -> Engine:
        factory = self._embedder_factory
        return Engine(config.model, config.query_prefix,
                      daemon=config.embedding.daemon if self._daemon is None else self._daemon,
                      idle=config.embedding.daemon_idle, status=self._status, backend=config.embedding.backend,
                      threads=config.embedding.threads,
                      factory=(lambda: factory(config)) if factory is not None else None)

    def _build(self) -> None:
        limits = self.config.limits
        self._facts = FactStore(self.root, max_bytes=limits.fact_bytes)
        self._episodes = EpisodeLog(self.root, self.state_dir / "locks" / "episodes.lock",
                                    fsync=self.config.episodes.fsync, per_host=self.config.track_episodes,
                                    host=self.config.episodes.host, max_bytes=limits.episode_bytes,
                                    folders=self.state_dir / EPISODE_FOLDERS)
        self._procedures = ProcedureStore(self.root, lambda: self.git, max_bytes=limits.procedure_bytes)
        changes = getattr(self.__dict__.get("index"), "changes", None)  # a file watcher outlives a reload
        self.index: VaultIndex
        self.index, self._open_state = self._make_index(
            Sources(self.root, self._facts, self._episodes, self._procedures, limits.fact_bytes,
                    limits.episode_bytes, limits.procedure_bytes))
        self.index.changes = changes
        for name in ("gate", "state", "local_state", "browse", "recall_log"):
            self.__dict__.pop(name, None)
        self.facts = Facts(self)
        self.episodes = Episodes(self)
        self.procedures = Procedures(self)

    def __repr__(self) -> str:
        return f"Vault({str(self.root)!r})"

    # -- construction ------------------------------------------------------------------------------------
    @classmethod
    def find_root(cls, path: Path | str | None = None) -> Path:
        """Discovery: ``path``, then ``MEMVAULT_DIR``, then the nearest parent of the cwd with memvault.toml."""
        if path is not None:
            root = Path(path).expanduser()
            if not holds_config(root):
                raise VaultNotFound(f"{root}: not a vault (no {CONFIG_NAME}); create one with 'memvault init {root}'")
            return root
        env = os.environ.get("MEMVAULT_DIR")
        if env:
            root = Path(env).expanduser()
            if not holds_config(root):
                raise VaultNotFound(f"MEMVAULT_DIR={env}: not a vault (no {CONFIG_NAME})")
            return root
        cwd = Path.cwd().resolve()
        for candidate in (cwd, *cwd.parents):
            if holds_config(candidate):
                return candidate
        raise VaultNotFound(f"no vault here: no {CONFIG_NAME} in {cwd} or its parents; pass --vault PATH, set "
                            "MEMVAULT_DIR, or create one with 'memvault init'")

    @classmethod
    def open(cls, path: Path | str | None = None, **options: Any) -> Vault:
        return cls(cls.find_root(path), **options)

    @classmethod
    def init(cls, path: Path | str, *, track_episodes: bool = False, model: str | None = None,
             **options: Any) -> Vault:
        """Create the layout in ``path`` (idempotent: existing files are never overwritten).

        Runs ``git init`` when ``path`` is not inside a git work tree, and commits the files it created, and only
        those, so a vault inside a larger repository never stages anything else.
        """
        root = ensure_dir(Path(path).expanduser().resolve())  # the folder the user named: its links are theirs
        created: list[Path] = []
        for sub in ("facts", "procedures", "episodes"):
            ensure_dir(root / sub)
        text = config_mod.template()
        if track_episodes:
            text = text.replace("track_in_git = false", "track_in_git = true")
        local_model = None
        if model is not None:
            from ..models.embeddings import looks_like_path

            if looks_like_path(model) or Path(model).expanduser().is_dir():
                local_model = str(Path(model).expanduser().resolve())  # this host's: see _model_setting
            else:
                text = config_mod.set_model_text(text, model)
        for name, content in ((CONFIG_NAME, text), (".gitignore", _gitignore(track_episodes))):
            target = root / name
            if not target.exists():
                atomic_write(target, content.encode("utf-8"))
                created.append(target)
        git = GitStore.discover(root) or GitStore.init(root)
        if local_model is not None:  # after git init: this host's settings go to the state directory it decides
            from ..rules.places import state_dir_for

            state_dir_for(root)
            local = config_mod.local_path(root / CONFIG_NAME)
            if not local.exists():
                atomic_write(local, config_mod.set_local_model(root / CONFIG_NAME, local_model).encode("utf-8"),
                             mode=0o600)
        if created:
            git.commit(created, "memvault init",
                       trailers={"Memvault-Vault": git.rel(root) if git.root != root else "."})
        return cls(root, **options)

    @cached_property
    def gate(self) -> WriteGate:
        """The one write gate (built on the first write: a recall never pays for it)."""
        from .gate import WriteGate
        from .lifecycle import finish_purge
        from .sync_journal import mend_for_write

        def unfinished(gate: WriteGate, writer: str) -> list[str]:
            # what a killed sync or purge left, mended before a write (a write never lands on a half-done rebase)
            return mend_for_write(gate, writer) + finish_purge(gate, writer)

        return WriteGate(root=self.root, config=self.config, git=lambda: self.git, facts=self._facts,
                         episodes=self._episodes, procedures=self._procedures, index=self.index,
                         state=lambda: self.state, engine=self.engine,
                         lock_path=self.state_dir / "locks" / "write.lock", unfinished=unfinished)

    # -- the index: one object whichever backend holds it -----------------------------------------------
    def _make_index(self, sources: Sources) -> tuple[VaultIndex, Callable[[], Any]]:
        """The vault's index and how to open its usage state: the only place that asks which backend it is. A
        team's (``[index] backend = "postgres"``) is a :class:`memvault.core.team.TeamIndex`: the shared index, this
        host's overlay and fallback; every caller then holds a
        :class:`~memvault.index.protocol.VaultIndex` and never asks which."""
        try:
            url = index_url.usable(self.config, self.state_dir)
        except ConfigError:  # the shared file's, not accepted here: no cache (a team index says why when used)
            url = None
        cache = None
        if url is not None:  # the team's embedding cache, used by a local index too; connects on first use
            from ..index.postgres import EmbeddingCache

            cache = EmbeddingCache(url)
        if self.config.index.backend == "postgres":
            from .team import team_index

            return team_index(self.state_dir, sources, self.config, lambda: self.git, cache,
                              splitter=lambda: self.engine.warm())
        return (Index(self.state_dir, sources, cache=cache, field_weights=FieldWeights(**self.config.recall.field_weights),
                      vectors=self.config.index.vectors), lambda: self.local_state)

    # -- shared parts ------------------------------------------------------------------------------------
    @property
    def git(self) -> GitStore | None:
        """The repository holding the vault, or None (then nothing is committed). Looked for once."""
        if self._git is False:
            self._git = GitStore.discover(self.root)
        return self._git  # type: ignore[return-value]

    @cached_property
    def state(self) -> State:
        """Usage counts: this vault's ``state.db`` (in :attr:`state_dir`), or a team's shared rows beside its index."""
        return self._open_state()  # type: ignore[no-any-return]

    @cached_property
    def local_state(self) -> State:
        """This host's ``state.db`` (its usage counts unless a team's index keeps them; its recall log)."""
        from ..stores.state import State

        return State(self.state_dir / "state.db", half_life=self.config.recall.half_life)

    @cached_property
    def captures(self) -> CaptureLog:
        """What agent hooks have captured from sessions (``captures.db``): turns and session cursors."""
        from ..stores.captures import CaptureLog

        return CaptureLog(self.state_dir / "captures.db")

    def default_source(self) -> str:
        return default_source()

    def _source(self, source: str | None) -> str:
        return validate_source(source) if source is not None else (self.acting or default_source())

    def sibling(self) -> Vault:
        """Another Vault on this root, with the same options and acting source, for work that must not wait behind
        this one's calls (an MCP server runs procedures on it, on their own thread). As a second process would, it
        shares the files, the index and the locks, not this object's connections."""
        other = Vault(self.root, embedder_factory=self._embedder_factory, daemon=self._daemon, status=self._status)
        other.acting = self.acting
        return other

    def act_as(self, source: str) -> None:
        """Every later call that names no source is ``source``'s: its writes, and its reads within its scope."""
        self.acting = validate_source(source)

    def reader(self, source: str | None = None) -> Reader:
        """What ``source`` (None: who this process acts for) may read under ``[scopes]``: every read of the facade
        (recall, facts, episodes, procedures, export, session context) is filtered by it."""
        who = self._source(source)
        return Reader(who, self.config.scopes.for_source(who), self.root)

    def scopes(self) -> dict[str, Any]:
        """Who may do what (``memvault scopes``): each scope's paths, and the trust patterns beside them."""
        from ..rules.scopes import describe

        return {"scopes": [s.to_dict() for s in self.config.scopes.entries],
                "trusted": list(self.config.trust.trusted), "summary": describe(self.config.scopes)}

    def _parts(self) -> Parts:
        return Parts(self.index, self._facts, self._procedures, lambda: self.state, self.config, self.engine)

    @cached_property
    def browse(self) -> Browse:
        """Listings for people (facts by key, tag, source, trust, staleness; episodes by time and session), SQL
        over the index, of what the source this vault acts for may read: see :mod:`memvault.core.browse`."""
        from .browse import Browse

        return Browse(self.index, self.config, reader=lambda: self.reader())

    def growth(self) -> Growth:
        """Facts and procedures per day from git history, cached by commit (:mod:`memvault.core.history`)."""
        from .history import growth

        return growth(self.git, self.root, self.state_dir)

    def git_log(self, path: Path, *, follow: bool = True, limit: int | None = None) -> list[LogEntry]:
        """``path``'s history, newest first, with diffs (the newest ``limit`` commits, if given). ``follow`` tracks
        renames and copies. git's commit-graph is brought up to date first (milliseconds): with its changed-path
        filters the walk of one path skips every commit that did not touch it. A repository without one gets it
        from a process left running (12 s at 30k commits), for the next call."""
        if self.git is None:
            raise GitError(f"{self.root} is not in a git repository: no history")
        with contextlib.suppress(GitError):  # a cache of git's: a read-only repository, or another writer at it
            self.git.update_commit_graph(wait=False)
        return self.git.log(path, follow=follow, limit=limit)

    # -- recall and the index ----------------------------------------------------------------------------
    def recall(self, query: str, k: int = 10, kinds: Sequence[str] | None = None, budget: int | None = None, *,
               source: str | None = None, log: bool = True, **options: Any) -> RecallResult:
        """The ``k`` memories that best answer ``query`` (a list of :class:`memvault.core.recall.Hit`, best first,
        with ``.warnings``). ``budget`` keeps the best hits whose answer, as rendered in ``fmt`` (default json) and
        printed, fits that many tokens, envelope and warnings included. Every recall is written to
        the local recall log under ``source`` (who asked; default as for writes) unless ``log`` is false."""
        from .recall import check_arguments

        check_arguments(query, k, kinds, budget, options.get("mode", "hybrid"), options.get("fmt", "json"))
        started = time.perf_counter()
        # A model already loaded starts on the query now, while the asker and the index are checked (0.3-0.6 ms
        # earlier); recall takes the vector when it embeds that text with that model (not a time phrase's rest).
        loaded = self.engine.loaded() if options.get("mode", "hybrid") != "keyword" else None
        head_start = (QueryVector.started(loaded, searched_text(query, options.get("since"), options.get("until"),
                                                                options.get("time_in_query", True)))
                      if loaded is not None else None)
        asker = self._source(source) if log else ""
        if log:
            self.recall_log.redact_ahead(query)
        result = self._recall(query, k, kinds, budget, readable=self.reader(source).test(self.root),
                              head_start=head_start, **options)
        if log:
            said = len(result.warnings)
            self._log_recall(asker, query, k, kinds, budget, options, result, time.perf_counter() - started)
            if len(result.warnings) > said:  # "recall not logged" fits the budget too
                from .render import refit

                refit(result)
        return result

    def _recall(self, query: str, k: int, kinds: Sequence[str] | None, budget: int | None, *,
                readable: Callable[[str], bool] | None = None, head_start: QueryVector | None = None,
                **options: Any) -> RecallResult:
        from .recall import recall

        if not self.index.exists():
            splitter = None
            if options.get("mode", "hybrid") != "keyword":
                try:
                    splitter = self.engine.get()
                except Exception:  # noqa: BLE001 - recall reports an unavailable model itself, keyword-only
                    splitter = None
            self.index.sync(splitter=splitter)
        parts = self._parts()
        parts.readable, parts.head_start = readable, head_start
        return recall(parts, query, k, kinds, budget, **options)

    @cached_property
    def recall_log(self) -> State:
        """The local recall log's database (``state.db`` in :attr:`state_dir`; a team's usage counts live elsewhere, the log
        stays on this host)."""
        return self.local_state

    def _log_recall(self, source: str, query: str, k: int, kinds: Sequence[str] | None, budget: int | None,
                    options: dict[str, Any], result: RecallResult, seconds: float) -> None:
        """What this recall told its caller, in the recall log; a log that cannot be written is a warning."""
        from ..stores.state import RecallLogEntry

        shown = {"k": k, **({"kinds": list(kinds)} if kinds else {}), **({"budget": budget} if budget else {}),
                 **{name: str(options[name]) for name in ("mode", "fmt", "since", "until", "min_relevance")
                    if options.get(name) is not None}}
        entry = RecallLogEntry(time.time(), source, query, shown,
                               [[h.kind, h.id, round(h.score, 4), h.extra.get("trusted", True)] for h in result],
                               result.nothing_found, len(result.warnings), seconds * 1000)
        try:
            self.recall_log.log_recall(entry)
        except MemvaultError as exc:
            result.warnings.append(f"recall not logged: {exc}")

    def reindex(self, *, model: str | None = None, full: bool = False, progress: Progress | None = None,
                source: str | None = None, accept_index_url: bool = False) -> SyncReport:
        """Bring the index in step with the vault; rebuild it whole when the model changed (or ``full``).

        ``model`` first loads that model (a model that cannot load is refused before anything changes), then
        sets ``[embedding] model`` in memvault.toml (committed) and rebuilds. An incremental run loads the model
        only when there is text to embed. ``accept_index_url`` (a trusted source) records the shared file's
        ``[index] url`` as this host's to connect to (:mod:`memvault.core.index_url`).
        """
        from .catchup import catch_up

        if accept_index_url:
            self.gate.require(Op.CONFIGURE, self._source(source))
            if index_url.accept(self.config, self.state_dir) is not None:
                self.reload()

        if model is not None and model != self.config.model:
            source = self._source(source)
            self.gate.require(Op.CONFIGURE, source)
            model, this_host = self._model_setting(model)
            engine = Engine(model, None, daemon=self.engine.daemon, idle=self.config.embedding.daemon_idle,
                            backend=self.config.embedding.backend, status=self._status,
                            factory=(lambda: self._embedder_factory(self._with_model(model)))  # type: ignore[misc]
                            if self._embedder_factory is not None else None)
            embedder = engine.get()  # raises ModelUnavailable: nothing has changed yet
            self.gate.set_model(model, source=source, this_host=this_host)
            self.reload()
            self.engine.use(embedder)
        try:
            return self._calibrated(catch_up(self.index, self.engine, self.config, load=True, rebuild=True,
                                             full=full, publish=True, progress=progress, batch=True))
        finally:
            self.engine.release_batch()

    def catch_up(self, *, load: bool = True, marks: Any = None) -> SyncReport:
        """The index in step with the files after changes made behind memvault's back (an editor, a pull), what was
        pushed published first (a team's index), then vectors: with ``load`` the model is got for them, else only a
        model at hand embeds. What the watcher runs on each batch; unlike :meth:`reindex` it never rebuilds."""
        from .catchup import catch_up

        return catch_up(self.index, self.engine, self.config, load=load, publish=True, marks=marks)

    def _calibrated(self, report: SyncReport) -> SyncReport:
        """After a reindex: the relevance scale of this vault and model (see :mod:`memvault.core.calibration`)
        measured when the index has none (a rebuild, a model change) or the vault has grown by a quarter since, so
        that no recall has to. Needs the model this reindex loaded; an index that keeps no scale is left alone."""
        from ..index import KINDS
        from . import calibration

        embedder = self.engine.loaded()
        index = self.index
        if embedder is None or not index.exists() or index.identity() is None \
                or not embedder.identity.same_vectors(index.identity()):
            return report
        try:
            calibration.current(index, embedder, KINDS)
        except MemvaultError as exc:
            report.warnings.append(f"the relevance scale was not measured ({exc}); the next recall measures it")
        return report

    def model_note(self) -> str | None:
        """One line when the configured model is not on this machine (it would be downloaded on first use, which
        an offline host cannot do), naming what would load; None when it is here. Asks no network."""
        from ..models.embeddings import hint, resolve_model_path

        if resolve_model_path(self.config.model) is not None:
            return None
        return f"the embedding model {self.config.model} is not on this machine (it downloads on first use); {hint()}"

    def prepare_model(self, status: Callable[[str], None]) -> float | None:
        """Make the model ready on this machine now, where the person expects work (``init``, ``agent install``),
        rather than inside the first recall an agent runs: its one-time preparation (an ONNX export) and, with the
        warm process, the process holding it. ``status`` hears one line before and one after. Returns the
        seconds it took, or None when the model is not on this machine (:meth:`model_note` says why)."""
        if self.model_note() is not None:
            return None
        if self.engine.warm() is not None:
            return 0.0  # held here or by the warm process already: nothing to prepare, nothing to say
        status(f"preparing the embedding model {self.config.model} for this machine (once; later commands reuse it)")
        started = time.monotonic()
        try:
            self.engine.get().embed_query("ready")
        except ModelUnavailable as exc:
            status(f"the model could not be prepared: {exc}")
            return None
        took = time.monotonic() - started
        status(f"model {self.config.model} ready in {took:.1f} s")
        return took

    def _model_setting(self, model: str) -> tuple[str, bool]:
        """Where a model setting goes: a name every host can load goes to memvault.toml (committed); a directory
        of this machine is meaningless on the others, so its absolute path goes to this host's ``local.toml`` (in
        :attr:`state_dir`) — which a team's shared index, needing one model on every host, refuses."""
        from ..models.embeddings import looks_like_path

        path = Path(model).expanduser()
        if not looks_like_path(model) and not path.is_dir():
            return model, False
        if self.config.index.shared:
            raise ConfigError(self.root / CONFIG_NAME, f"{model} is a directory of this host, and a team's shared "
                              "index needs the same model on every host: use a model name every host can load")
        return str(path.resolve()), True

    def _with_model(self, model: str) -> Config:
        from dataclasses import replace

        return replace(self.config, embedding=replace(self.config.embedding, model=model))

    def follow(self, *, listener: Callable[[str], None] | None = None,
               log: Callable[[str], None] | None = None) -> ChangeFeed:
        """A file watcher on the vault until :meth:`close`, for processes that stay up: recall checks only what changed
        (see :mod:`memvault.index.changes`; ``feed.reason`` says why it cannot run, in ``log`` or the
        ``memvault.watch`` logger and in :meth:`stats`, never in a recall's warnings). Idempotent."""
        return follow(self.index, self.root, self.state_dir, listener=listener, log=log,
                      reason=self.index.unwatchable())

    def close(self) -> None:
        """Stop the file watcher (if any) and close the index's connection."""
        if self.index.changes is not None:
            self.index.changes.stop()
        self.index.changes = None
        self.index.close()

    def reload(self) -> None:
        """Read memvault.toml again (after a change of settings) and rebuild the parts that depend on it."""
        self.index.close()
        self.config = config_mod.load(self.root / CONFIG_NAME)
        self.notices += [line for line in self.config.ignored if line not in self.notices]
        self.__dict__.pop("state", None)
        self.engine = self._make_engine(self.config)
        self._build()

    def estimate_reindex(self, model: str | None = None) -> dict[str, Any]:
        """What a full rebuild would cost on this machine, model load included (see memvault.core.stats)."""
        from .stats import estimate_rebuild

        engine = self.engine
        if model is not None and model != self.config.model:
            engine = Engine(model, None, daemon=self.engine.daemon, idle=self.config.embedding.daemon_idle,
                            backend=self.config.embedding.backend, status=self._status,
                            factory=(lambda: self._embedder_factory(self._with_model(model)))  # type: ignore[misc]
                            if self._embedder_factory is not None else None)
        return estimate_rebuild(self.index, engine, model or self.config.model)

    def stats(self) -> dict[str, Any]:
        from .stats import vault_stats

        from .stats import add_watchers

        out = vault_stats(self.root, self.index, self._episodes, self.config)
        add_watchers(out, self.state_dir)
        out["state_dir"] = str(self.state_dir)
        out["summary"].insert(1, f"local state: {self.state_dir} (this host's index, state, logs and local.toml)")
        local = config_mod.local_path(self.root / CONFIG_NAME)
        if config_mod.local_overrides(self.root / CONFIG_NAME).get("embedding", {}).get("model"):
            out["model_set_by"] = f"{local} (this host only)"
            out["summary"].insert(1, f"model {self.config.model}: set for this host only in {local}")
        from .retention import add_retention

        add_retention(out, self.config.retention, self.state_dir)
        if self.engine.daemon:  # the warm process that holds the models (asked, never started)
            from .stats import add_warm_process

            add_warm_process(out, self.config.embedding.daemon_idle)
        return out

    # -- lifecycle (every change through the gate) -------------------------------------------------------
    def prune(self, *, dry_run: bool = False, at: datetime | None = None, source: str | None = None,
              allow_secret: bool = False, accept_retention: bool = False, name_removed: bool = True) -> Any:
        """Apply ``[retention]`` to episodes, and the retention of raw episodes to the recall log (reported as the
        kind ``recall_log``). A retention shorter than this host has pruned by (a teammate's commit to the shared
        memvault.toml) is held to the longer one, with a warning, until a trusted source passes ``accept_retention``
        (:mod:`memvault.core.retention`). ``name_removed=False``: the report counts the episodes removed but does not
        list them in ``removed`` (a month of millions of lines: ~1.5 KB each)."""
        from . import lifecycle

        return lifecycle.prune(self.gate, source=self._source(source), dry_run=dry_run, at=at,
                               allow_secret=allow_secret, accept_retention=accept_retention,
                               recall_log=self.recall_log, name_removed=name_removed)

    def purge(self, pattern: str, *, dry_run: bool = False, source: str | None = None,
              allow_secret: bool = False) -> lifecycle.PurgeReport:
        from . import lifecycle

        return lifecycle.purge(self.gate, pattern, source=self._source(source), dry_run=dry_run,
                               allow_secret=allow_secret)

    def stale(self, at: datetime | None = None, *, source: str | None = None) -> list[dict[str, Any]]:
        """Stale facts (see :func:`lifecycle.stale`) that ``source`` (default: who the vault acts for) may read."""
        from . import lifecycle

        return lifecycle.stale(self.gate, at, source=self._source(source))

    def verify(self, key: str, *, source: str | None = None, allow_secret: bool = False) -> Fact:
        return self.gate.verify(key, source=self._source(source), allow_secret=allow_secret)

    def dedup(self, *, apply: bool = False, source: str | None = None,
              allow_secret: bool = False) -> lifecycle.DedupReport:
        from . import lifecycle

        return lifecycle.dedup(self.gate, source=self._source(source), apply=apply, allow_secret=allow_secret)

    def expire(self, *, apply: bool = False, at: datetime | None = None, source: str | None = None) -> dict[str, Any]:
        from . import lifecycle

        return lifecycle.expire(self.gate, source=self._source(source), apply=apply, at=at)

    def ingest(self, lines: Iterable[bytes | str], *, source: str | None = None, name: str = "-",
               allow_secret: bool = False) -> ingest_mod.IngestReport:
        """Run JSONL candidates through the gate, every line checked before any is written (see
        :mod:`memvault.core.ingest`): the batch entry point for importers too."""
        from . import ingest

        return ingest.ingest(self.gate, lines, source=self._source(source), name=name, allow_secret=allow_secret)

    def fetch_fact(self, key: str, *, source: str | None = None) -> Fact:
        """A fact fetched by key by someone who will act on it (``fact get``, MCP ``get_fact``): counted as a use.
        ``vault.facts.get`` reads without counting."""
        fact = self.facts.get(key, reader=source)
        try:
            self.gate.record_use([("fact", key)], source=self._source(source), warnings=fact.warnings)
        except MemvaultError as exc:
            fact.warnings.append(f"use not recorded: {exc}")
        return fact

    def used(self, refs: Sequence[str], *, source: str | None = None) -> Counted:
        """Report that memories were used (``fact:db/primary``, ``procedure:web/reload``, ``episode:<id>``, or
        a bare fact key): what frequency counts. Returns the ones counted; a ref to a memory that does not exist
        is not counted (``warnings`` names it), and one report holds at most ``MAX_USED`` refs."""
        return self.gate.used(refs, source=self._source(source))

    def commit_edits(self, paths: Sequence[Path | str] | None = None, *, source: str | None = None,
                     message: str | None = None) -> Committed:
        """Commit files changed behind memvault's back (an editor, a script, a web view, an importer that wrote
        files) through the checks every write passes; ``paths`` None: every changed file under the vault's own
        paths (as ``sync`` does first). A file that does not pass stays uncommitted and is named with its reason
        in ``refused`` and ``warnings``; the index is told about the rest."""
        from .remote import pending_edits

        source = self._source(source)
        self.gate.require(Op.COMMIT_EDITS, source)
        if self.git is None:
            raise GitError(f"{self.root} is not in a git repository: nothing to commit")
        notices: list[str] = []
        with self.gate.lock(source, notices):
            chosen = pending_edits(self.gate, self.git) if paths is None else [
                (self.root / p) if not Path(p).is_absolute() else Path(p) for p in paths]
            result = self.gate.commit_edits(
                chosen, source=source,
                message=message or f"edits made by hand: {len(chosen)} file{'s' if len(chosen) != 1 else ''}")
        result.warnings[:0] = notices
        result.warnings += self.gate.tell_index(result.paths)
        return result

    def authorize(self, op: Op, source: str | None = None) -> str:
        """The source of a caller (``None``: this process's default) once the trust table lets it do ``op``:
        for interfaces whose action is not a write of the vault itself (installing git hooks)."""
        return self.gate.require(op, self._source(source))

    def sync(self, *, remote: str | None = None, branch: str | None = None, source: str | None = None) -> Any:
        """Commit, pull with a rebase, reindex what changed, push (see memvault.core.remote)."""
        from .remote import sync

        result = sync(self.gate, remote=remote, branch=branch, source=self._source(source))
        # What was pushed is the team's now (a team's index: into the shared index, out of the overlay). The push
        # is done whatever happens here: a shared index that cannot be reached is said, not raised.
        try:
            report = self.index.publish(splitter=self.engine.warm())
        except (SearchIndexError, ConfigError) as exc:
            result.shared_index = str(exc)
            result.warnings.append(result.shared_index)
        else:
            result.warnings += report.warnings
            if report.changed:
                result.shared_index = (f"published to the team index: {report.files_changed} changed and "
                                       f"{report.files_removed} removed files")
        return result
