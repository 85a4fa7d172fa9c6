"""A team's vault: text through the git remote, the index and the vectors in one PostgreSQL — and, to recall, one
index like any other (:class:`TeamIndex`, a :class:`~memvault.index.protocol.VaultIndex`).

The shared index holds what the team has pushed and published (:mod:`memvault.core.publish`). Every host searches
it; none holds a copy. What differs on this host from the commit the shared index reflects — uncommitted edits,
unpushed commits, new files, git-ignored episodes, and what was pulled or pushed but not published yet — is indexed
in the local SQLite index, the *overlay*, and a shared row whose file differs or is gone here is never returned
(the overlay's version is, or nothing). So a host's own changes are never hidden by older shared rows, nothing on
this host is missing from recall until the next publish, and the shared index never holds text that was not
pushed. While the shared index cannot be used, a SQLite index of this host's whole vault (the *fallback*) answers.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..index import FieldWeights, Index, Sources, SyncReport
from ..rules.config import CONFIG_NAME, Config
from ..rules.errors import ConfigError, MemvaultError, PlansChanged, SearchIndexError
from ..rules.fsutil import atomic_write, read_inside, remove
from ..rules.timeutil import index_time
from ..stores.gitstore import GitStore
from . import index_url
from .publish import foreign, in_place, publish, reference, refusal, split, vault_name
from .team_listings import TeamListings

if TYPE_CHECKING:
    from ..index.postgres import SharedIndex
    from ..index.protocol import Progress, SearchIndex
    from ..models.embeddings import Embedder, ModelIdentity


# ------------------------------------------------------------------------------------------------ the team's index
#: Seconds a team host reuses its view of which files it has not pushed (a warm process asking again within the
#: second; a write here since then asks again).
SPLIT_REUSE = 1.0
#: A failure to reach the shared index that took longer than this (a timeout, not a refusal) is not tried again
#: for RETRY_SLOW seconds: a warm process would otherwise wait for the timeout on every question.
SLOW_FAILURE = 1.0
RETRY_SLOW = 30.0
#: The note of such a timeout beside the index, so that the next processes (a hook, a CLI: a new process each time)
#: answer from this host's files at once instead of each waiting for the timeout again.
TIMEOUT_NOTE = "team-unreachable.json"


class SharedIndexDown(SearchIndexError):
    """The shared index failed while in use (connection lost, server gone): the team index answers from this host's
    files until it is back."""


@dataclass
class _View:
    """This host's view of the team index: which paths the overlay holds and which shared rows are hidden."""

    at: float
    writes: int
    head: str | None
    local: frozenset[str]
    shadow: frozenset[str]


class TeamIndex(TeamListings):
    """A team's index as recall, the write gate and the Vault see it: one :class:`~memvault.index.protocol.VaultIndex`.

    It owns three parts and decides which answers:

    - the **shared index** (PostgreSQL): what the team pushed and published, searched by every host;
    - the **overlay** (this host's SQLite index): the files that differ here from the commit the shared index
      reflects — unpushed edits, new files, git-ignored episodes, and also what was pulled or pushed but not
      published yet — so nothing on this host is ever missing or stale; a shared row whose file differs or is
      gone here is *shadowed* (never returned);
    - the **fallback** (a SQLite index of this host's whole vault, built on demand): what answers while the shared
      index cannot be used (database down, a wrong URL, psycopg missing, the vault not published yet). Each recall
      says so in one line; the next recall after the database is back uses the shared index again.

    Row ids: the overlay's are negated, the shared index's kept, so one recall can hold both. Keyword scores are
    divided by each part's best (BM25 depends on its corpus), as recall would do per index; cosines are left as
    they are (one model made them all).
    """

    def __init__(self, *, overlay: Index, fallback: Index, open_shared: Callable[[], SharedIndex],
                 git: Callable[[], GitStore | None], track_episodes: bool,
                 splitter: Callable[[], Any] = lambda: None, cache: Any = None) -> None:
        self.overlay = overlay
        self.fallback = fallback
        self._open_shared = open_shared
        self._git = git
        self.root = overlay.sources.root
        self.track_episodes = track_episodes
        self._splitter = splitter
        self._cache = cache
        self._shared: SharedIndex | None = None
        #: Times the shared index was found unusable: a connection to the team's database opened before the last
        #: one is closed before it is used again (a restarted server cuts every session).
        self.outages = 0
        self._checked = False
        self._down: str | None = None       # why the shared index is not in use (None: it is)
        self._unpublished = False
        self._config = False
        self._retry_at = float("-inf")
        self._view: _View | None = None
        self._warnings: list[str] = []
        self._heads: dict[str, str | None] = {}  # a commit the shared index named -> why it is not ours, or None

    # -- which part answers --------------------------------------------------------------------------------
    def _repo(self) -> GitStore:
        git = self._git()
        if git is None:
            raise ConfigError(self.root, "a shared index follows the vault's git history, and this vault is not in "
                              "a git repository; set [index] backend = \"sqlite\"")
        return git

    @property
    def shared(self) -> SharedIndex:
        """The team's shared index (opened on first use; raises ConfigError when it is not configured)."""
        if self._shared is None:
            self._shared = self._open_shared()
        return self._shared

    @property
    def shared_in_use(self) -> bool:
        """Whether the shared index answers now (False: this host's files alone, see :attr:`down`)."""
        return self._use() is not None

    @property
    def down(self) -> str | None:
        """Why the shared index is not in use, in one line that says how to fix it; None when it is."""
        if self._down is None:
            return None
        if self._unpublished:
            return (f"the team index has no vault {self._down!r} yet: answering from this host's files; run "
                    "'memvault reindex' to publish the vault")
        hint = "" if self._config or "pip install" in self._down else ("; start the database, or fix [index] url "
                                                                       "or MEMVAULT_INDEX_URL")
        return f"the team index cannot be used ({self._down}): answering from this host's files until it can{hint}"

    def _use(self, *, recheck: bool = False) -> SharedIndex | None:
        """The shared index when it answers, else None. Asked once per process, and again at each recall
        (``recheck``): after a refusal at once, after a timeout not before RETRY_SLOW seconds."""
        if self._checked and not recheck:
            return self._shared if self._down is None else None
        if self._down is not None and time.monotonic() < self._retry_at:
            return None
        started = time.monotonic()
        try:
            shared = self.shared
            if not self._checked and self._noted_timeout(shared.url):
                return None
            head = shared.head(fresh=False) if shared.exists() else None
            if head is None:
                self._went_down(shared.vault, 0.0, unpublished=True)
                return None
            reason = self._heads.get(head)  # found by _look (no git call here: recall pays three, not four)
            if reason is not None:
                self._went_down(reason, 0.0, config=True)
                return None
        except (SearchIndexError, ConfigError) as exc:
            self._went_down(exc.reason if isinstance(exc, ConfigError) else str(exc), time.monotonic() - started,
                            config=isinstance(exc, ConfigError))
            return None
        if self._down is not None or not self._checked:
            remove(self._timeout_note())  # a link is removed, never followed
        self._checked, self._down, self._unpublished = True, None, False
        return shared

    def _timeout_note(self) -> Path:
        return self.overlay.dir / TIMEOUT_NOTE

    def _noted_timeout(self, url: str) -> bool:
        """Whether another process noted, less than RETRY_SLOW seconds ago, that this URL timed out; if so the
        shared index is taken as down until then, with a line that says so."""
        try:
            note = json.loads(read_inside(self._timeout_note(), self.overlay.dir, limit=4096))
            at, reason, key = float(note["at"]), str(note["reason"]), note["url"]
        except (OSError, MemvaultError, ValueError, TypeError, KeyError):
            return False  # none, unreadable or not ours: tried as if there were none (replaced if it times out)
        left = at + RETRY_SLOW - time.time()
        if key != _url_key(url) or not 0 < left <= RETRY_SLOW:
            return False
        self._went_down(f"it timed out {time.time() - at:.0f} s ago: {reason}; tried again in {left:.0f} s", 0.0)
        self._retry_at = time.monotonic() + left
        return True

    def _note_timeout(self, url: str, reason: str) -> None:
        note = {"url": _url_key(url), "at": time.time(), "reason": reason}
        try:
            atomic_write(self._timeout_note(), json.dumps(note).encode(), mode=0o600)
        except (OSError, MemvaultError) as exc:
            self._warnings.append(f"the team index's timeout could not be noted for other processes ({exc}): "
                                  "each will wait for it")

    def _went_down(self, reason: str, seconds: float, *, unpublished: bool = False, config: bool = False) -> None:
        self._checked, self._down, self._unpublished, self._config = True, reason, unpublished, config
        self._retry_at = time.monotonic() + (RETRY_SLOW if seconds > SLOW_FAILURE else 0.0)
        if seconds > SLOW_FAILURE and not unpublished and self._shared is not None:
            self._note_timeout(self._shared.url, reason)
        self._view = None
        if not unpublished:
            self.outages += 1
            for conn in (self._shared, self._cache):
                if conn is not None:
                    conn.close()

    def failed(self, exc: BaseException, seconds: float = 0.0) -> None:
        """Note that the shared index failed (``seconds`` after it was asked): not used until it answers again."""
        if isinstance(exc, SharedIndexDown) and self._down is not None:
            return  # noted (with its reason) where it was raised
        self._went_down(str(exc), seconds)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A call to a part; a failure of the shared index marks it down and is raised as :class:`SharedIndexDown`
        (recall's guard then answers from this host's files)."""
        started = time.monotonic()
        try:
            try:
                return fn(*args, **kwargs)
            except PlansChanged:  # another host's migration altered a table: asked again on a new connection, once
                return fn(*args, **kwargs)
        except SharedIndexDown:
            raise
        except SearchIndexError as exc:
            if self._shared is None or getattr(fn, "__self__", None) is not self._shared:
                raise
            self._went_down(str(exc), time.monotonic() - started)
            raise SharedIndexDown(str(exc)) from None

    def _parts(self) -> list[tuple[SearchIndex, int]]:
        """(index, sign of its row ids) of the parts that answer now."""
        shared = self._use()
        if shared is None:
            return [(self.fallback, 1)] if self.fallback.exists() else []
        return ([(self.overlay, -1)] if self.overlay.exists() else []) + [(shared, 1)]

    def _view_of(self, shared: SharedIndex) -> _View:
        view = self._view
        if view is not None and time.monotonic() - view.at < SPLIT_REUSE and view.writes == self.overlay.writes:
            return view
        return self._look(shared)

    def _look(self, shared: SharedIndex) -> _View:
        """Ask git which files differ here from the commit the shared index reflects (see :func:`split`)."""
        head = self._call(shared.head)  # read now: a publish a second ago must not leave its files in the overlay
        git = self._repo()
        state = split(git, self.root, track_episodes=self.track_episodes, ref=head, tree=False)
        if head is not None and state.ref != head:
            # This host does not have that commit: not fetched yet, or another repository's history under this
            # vault's name (asked once per commit).
            if head not in self._heads:
                self._heads[head] = self._call(foreign, shared, git, head)
            reason = self._heads[head]
            if reason is not None:
                self._went_down(reason, 0.0, config=True)
                raise SharedIndexDown(reason)
        self._view = _View(time.monotonic(), self.overlay.writes, head, frozenset(state.local),
                           frozenset(state.shadow))
        return self._view

    def _shadow(self) -> frozenset[str]:
        """The paths whose shared rows are hidden here, as of the view the overlay was last brought to (a caller
        that did not refresh first, the write gate's duplicate check, gets git's answer now)."""
        shared = self._use()
        if shared is None:
            return frozenset()
        return (self._view or self._look(shared)).shadow

    # -- phase 1: this host's part, and publishing the team's ----------------------------------------------
    @property
    def warnings(self) -> list[str]:
        for part in (self.overlay, self.fallback):
            if part.warnings:
                self._warnings += part.warnings
                part.warnings.clear()
        return self._warnings

    @property
    def sources(self) -> Sources:
        """The whole vault's sources (what a rebuild reads)."""
        return self.fallback.sources

    def refresh(self, interval: float = 30.0) -> SyncReport | None:
        """Recall's freshness check: is the shared index there (asked again at every recall, so a database that came
        back is used again at once)? Then the overlay brought to this host's files that differ from what the shared
        index reflects; or, while it cannot be used, this host's whole vault in the fallback (built on demand)."""
        shared = self._use(recheck=True)
        if shared is None:
            self._warnings.append(self.down or "")
            if not self.fallback.exists():
                return self.fallback.sync(splitter=self._splitter())
            return self.fallback.refresh(interval)
        return self._overlay(shared, self._splitter(), reuse=True)

    def refresh_later(self, interval: float = 30.0) -> Callable[[], SyncReport | None]:
        """:meth:`refresh` now (which index answers depends on it: the shared one may have come back or gone), its
        report returned by the call."""
        report = self.refresh(interval)
        return lambda: report

    def _overlay(self, shared: SharedIndex, splitter: Any, *, reuse: bool) -> SyncReport:
        view = self._view_of(shared) if reuse else self._look(shared)
        return self.overlay.overlay(set(view.local), splitter=splitter)

    #: A team's index follows git, not the files: no file watcher drives it (see Vault.follow).
    changes: Any = None

    def apply(self, marks: Any, *, splitter: Any = None) -> SyncReport | None:
        """What a file watcher marked: for a team, the overlay recomputed against the shared index's commit (what
        changed is asked of git, which sees every file), as :meth:`sync` does."""
        return self.sync(splitter=splitter)

    def sync(self, paths: Sequence[Path] | None = None, *, splitter: Any = None) -> SyncReport:
        """Phase 1 for what this host serves: named paths (a write here) go to the overlay — this host's version
        until it is pushed — and to the fallback while it answers; all paths: the overlay recomputed, or the
        fallback while the shared index cannot be used. Publishing is :meth:`publish`'s."""
        if paths is not None:
            report = self.overlay.sync(paths, splitter=splitter)
            if self._down is not None and self.fallback.exists():
                report.merge(self.fallback.sync(paths, splitter=splitter))
            return report
        shared = self._use()
        if shared is None:
            return self.fallback.sync(splitter=splitter)
        return self._overlay(shared, splitter, reuse=True)

    def publish(self, *, splitter: Any = None) -> SyncReport:
        """Bring the shared index to what the team has pushed (the upstream branch, else HEAD): the files that
        differ are read from git's objects, cut, and applied (embedded later, unless another host or the embedding
        cache already has their vectors); never moves it back to an older commit. Then the overlay. Raises a
        one-line SearchIndexError (or ConfigError) when the shared index cannot be reached: nothing was published."""
        try:
            shared = self.shared
            git = self._repo()
            shared.ensure()
            target = split(git, self.root, track_episodes=self.track_episodes, tree=True)
            identity = shared.identity()
            report = publish(shared, git, self.sources, target, splitter=splitter,
                             max_tokens=identity.max_tokens if identity is not None else None)
        except SearchIndexError as exc:
            self._went_down(str(exc), 0.0)
            raise SearchIndexError(f"the team index was not updated, nothing was published ({exc}); recall answers "
                                   "from this host's files until it can be reached") from None
        self._checked, self._down, self._unpublished = True, None, False
        try:
            report.merge(self._overlay(shared, splitter, reuse=False))
        except SharedIndexDown:
            pass  # another repository's history under this vault's name: the publish said so, recall uses the files
        return report

    def verify(self, rels: set[str]) -> SyncReport | None:
        """Stat the files behind recall's candidates that this host indexes itself (the overlay's, or all of them
        in the fallback); shared rows stand for files git just found as the shared index has them."""
        if self._use() is None:
            return self.fallback.verify(rels) if self.fallback.exists() else None
        mine = rels & self.overlay.sources.keep if self.overlay.sources.keep is not None else set()
        return self.overlay.verify(mine) if mine else None

    def local_index(self) -> Index:
        """The fallback: this host's whole vault in SQLite (what answers while the shared index cannot be used),
        built on demand."""
        if not self.fallback.exists():
            self.fallback.sync(splitter=self._splitter())
        return self.fallback

    def problems(self) -> list[str]:
        """The files this host's part cannot hold, with the reason (a file the shared index could not take was
        reported by the publish that met it)."""
        return (self.fallback if self._down is not None else self.overlay).problems()

    def unwatchable(self) -> str | None:
        return "a team's index follows git, not the files"

    def as_on_disk(self, rels: set[str]) -> set[str]:
        if self._use() is None:
            return set(rels)
        return rels & self.overlay.sources.keep if self.overlay.sources.keep is not None else set()

    # -- phase 2 and rebuilds ------------------------------------------------------------------------------
    def identity(self) -> ModelIdentity | None:
        """The team's model (the shared index's), else this host's part's."""
        shared = self._use()
        if shared is None:
            return self.fallback.identity() if self.fallback.exists() else None
        theirs = self._call(shared.identity)
        if theirs is not None:
            return theirs
        return self.overlay.identity() if self.overlay.exists() else None

    def pending(self) -> int:
        """Chunks waiting for a vector: this host's, and the shared index's while it answers (a count, never a
        reason to fail: a sync that pushed asks it afterwards)."""
        shared = self._use()
        if shared is None:
            return self.fallback.pending()
        try:
            return self.overlay.pending() + self._call(shared.pending)
        except SharedIndexDown:
            return self.fallback.pending()

    def embed(self, embedder: Embedder, *, limit: int | None = None, progress: Progress | None = None,
              report: SyncReport | None = None, wait: bool = False) -> SyncReport:
        """Phase 2. A capped call (a recall's or a write's share) embeds this host's part only; an uncapped one
        (reindex, the watcher) also gives the shared index's pending chunks their vectors, and rebuilds an overlay
        of another model."""
        report = report or SyncReport()
        if limit is not None:  # a share (a recall's, a write's): this host's part only, never the network
            part = self.fallback if self._down is not None else self.overlay
            return part.embed(embedder, limit=limit, progress=progress, report=report, wait=wait) \
                if part.exists() else report
        shared = self._use()
        if shared is None:
            return self.fallback.embed(embedder, progress=progress, report=report, wait=wait) \
                if self.fallback.exists() else report
        try:
            report.merge(shared.embed(embedder, progress=progress, wait=wait))
        except SearchIndexError as exc:  # the text is published: say what was not done, and go on here
            self._went_down(str(exc), 0.0)
            report.warnings.append(f"the team index's vectors were not computed ({exc}); run 'memvault reindex' "
                                   "once it can be reached")
        if not self.overlay.exists():
            return report
        local = self.overlay.identity()
        if local is not None and not embedder.identity.same_vectors(local):
            return report.merge(self.overlay.rebuild(lambda: embedder, progress=progress))
        return self.overlay.embed(embedder, progress=progress, report=report, wait=wait)

    def rebuild(self, embedder: Callable[[], Embedder | None] | None = None, *,
                progress: Progress | None = None) -> SyncReport:
        """The team index again with ``embedder``'s model: a shared index of another model is moved to it beside the
        live one and flipped (recall keeps the old model until then); one of the same model is dropped and built
        again from git (its vectors come from the embedding cache), and this host's overlay with it. Without a
        model nothing is dropped: what was pushed is published, for keyword search."""
        from ..rules.errors import ModelUnavailable

        report = SyncReport()
        emb = None
        if embedder is not None:
            try:
                emb = embedder()
            except ModelUnavailable as exc:
                report.warnings.append(f"{exc}; indexed for keyword search only, vectors pending")
        shared = self.shared
        try:
            live = shared.identity() if shared.exists() else None
            git = self._repo()
            ref = reference(git)
            refused = refusal(shared, git, shared.head(), ref) if live is not None and ref else None
            if refused is not None:
                # Dropped, the index would be published again from this host's older commit (or another
                # repository's), with no commit left to compare with: only the publish runs, and says why not.
                return report.merge(self.publish(splitter=emb))
            if live is not None and emb is not None and emb.identity.same_vectors(live):
                shared.drop()
                self.overlay.close()
                report.merge(self.overlay.rebuild(None))  # keyword rows first; embedded below
        except SearchIndexError as exc:
            self._went_down(str(exc), 0.0)
            raise SearchIndexError(f"the team index was not rebuilt ({exc}); recall answers from this host's "
                                   "files until it can be reached") from None
        report.merge(self.publish(splitter=emb))
        if emb is None:
            return report
        if live is not None and not emb.identity.same_vectors(live):
            report.merge(shared.switch_model(emb, progress=progress, wait=True))
        return self.embed(emb, progress=progress, report=report, wait=True)

    def guard(self, exc: BaseException) -> bool:
        """A failure of the shared index during a recall (it is then not in use: the recall runs again on this
        host's files), or a damaged SQLite file (moved aside, rebuilt)."""
        if isinstance(exc, SharedIndexDown):
            return True
        return self.overlay.guard(exc) or self.fallback.guard(exc)

    def close(self) -> None:
        self.overlay.close()
        self.fallback.close()
        if self._shared is not None:
            self._shared.close()

    # -- the searches, over the parts that answer ----------------------------------------------------------
    def exists(self) -> bool:
        """Whether there is anything to search: this host's parts answer without asking the network (a write only
        wants to know whether to tell an index), else whether the shared index does."""
        return self.overlay.exists() or self.fallback.exists() or bool(self._parts())

    def _scores(self, search: Callable[[SearchIndex], Callable[..., list[tuple[int, float]]]],
                *args: Any) -> list[tuple[int, float]]:
        """``search`` (a search of a part) over the parts that answer, each part's scores divided by its best."""
        parts = self._parts()
        if len(parts) == 1 and parts[0][1] == 1:
            return self._call(search(parts[0][0]), *args)
        out: list[tuple[int, float]] = []
        for index, sign in parts:
            found = self._call(search(index), *args)
            best = max((s for _, s in found), default=0.0) or 1.0
            out += [(sign * r, s / best) for r, s in found]
        return sorted(out, key=lambda rs: -rs[1])

    def search_keywords(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(row id, BM25 divided by its part's best) best first, at most ``limit`` from each part."""
        return self._scores(lambda index: index.search_keywords, query, kinds, limit)

    def search_phrases(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        return self._scores(lambda index: index.search_phrases, query, kinds, limit)

    def search_exact(self, query: str, kinds: Sequence[str], limit: int) -> list[int]:
        return [sign * r for index, sign in self._parts() for r in self._call(index.search_exact, query, kinds, limit)]

    def search_feedback(self, bodies: Sequence[str], query: str, kinds: Sequence[str], terms: int,
                        limit: int) -> list[tuple[int, float]]:
        """Pseudo-relevance feedback in each part that answers (its own terms, by its own word frequencies), scores
        divided by each part's best as :meth:`search_keywords` does."""
        return self._scores(lambda index: index.search_feedback, bodies, query, kinds, terms, limit)

    def vector_search(self, kinds: Sequence[str], limit: int) -> None:
        """None: the parts are searched one after the other, on this thread (:meth:`search_vectors`)."""
        return None

    def search_vectors(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(row id, cosine) best first, at most ``limit`` from each part with vectors of the team's model (an overlay
        of another model is searched by its words only until reindex rebuilds it)."""
        model = self.identity()
        out: list[tuple[int, float]] = []
        for index, sign in self._parts():
            theirs = self._call(index.identity)
            if theirs is None or (model is not None and not theirs.same_vectors(model)):
                continue
            out += [(sign * r, c) for r, c in self._call(index.search_vectors, vector, kinds, limit)]
        return sorted(out, key=lambda rc: -rc[1])

    def _by_part(self, rowids: Sequence[int]) -> list[tuple[SearchIndex, int, list[int]]]:
        """(index, sign, its own row ids) for the parts ``rowids`` belong to."""
        out = []
        for index, sign in self._parts():
            mine = [sign * r for r in rowids if (r < 0) == (sign < 0)]
            if mine:
                out.append((index, sign, mine))
        return out

    def similarities(self, vector: Any, rowids: Sequence[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        for index, sign, mine in self._by_part(rowids):
            out.update({sign * r: c for r, c in self._call(index.similarities, vector, mine).items()})
        return out

    def chunk_docs(self, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """row id -> its doc's fields; a shared row whose file differs or is gone on this host is left out."""
        out: dict[int, dict[str, Any]] = {}
        for index, sign, mine in self._by_part(rowids):
            docs = self._call(index.chunk_docs, mine)
            if index is self._shared:
                shadow = self._shadow()
                docs = {r: d for r, d in docs.items() if d["path"] not in shadow and in_place(d)}
            out.update({sign * r: d for r, d in docs.items()})
        return out

    # -- calibration (memvault.core.calibration): the scale of the part that holds the vault -----------------
    # While the shared index answers, it holds the scale (measured once for the team, like its vectors); while it
    # does not, the fallback measures and keeps its own.
    def _calibration_part(self) -> SearchIndex:
        shared = self._use()
        return self.local_index() if shared is None else shared

    def meta_get(self, key: str) -> str | None:
        part = self._calibration_part()
        return self._call(part.meta_get, key)

    def meta_set(self, key: str, value: str) -> None:
        part = self._calibration_part()
        self._call(part.meta_set, key, value)

    def sample_chunks(self, kind: str, n: int) -> list[tuple[str, str]]:
        part = self._calibration_part()
        return self._call(part.sample_chunks, kind, n)

    def last_chunk_id(self) -> int:
        part = self._calibration_part()
        return int(self._call(part.last_chunk_id))

    def doc_vectors(self, rowid: int) -> list[Any]:
        """The stored vectors of the doc chunk ``rowid`` belongs to, from the part that holds it."""
        return self.docs_vectors([rowid]).get(rowid, [])

    def docs_vectors(self, rowids: Sequence[int]) -> dict[int, list[Any]]:
        """:meth:`doc_vectors` of many rows, each from the part that holds it."""
        out: dict[int, list[Any]] = {}
        for index, sign, mine in self._by_part(rowids):
            out.update({sign * r: list(v) for r, v in self._call(index.docs_vectors, mine).items()})
        return out

    def unknown_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` that no part answering now holds (the shared index and this host's overlay, or the
        fallback while the shared index cannot be used)."""
        unknown = list(words)
        for index, _sign in self._parts():
            if not unknown:
                break
            unknown = self._call(index.unknown_words, unknown)
        return unknown

    def coverage(self, query: str, rowid: int) -> float:
        for index, sign, mine in self._by_part([rowid]):
            return float(self._call(index.coverage, query, mine[0]))
        return 0.0

    def coverages(self, query: str, rowids: Sequence[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        for index, sign, mine in self._by_part(list(rowids)):
            for r, value in self._call(index.coverages, query, mine).items():
                out[sign * r] = float(value)
        return out

    def episode_neighbours(self, docs: dict[int, dict[str, Any]]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for index, sign, mine in self._by_part(list(docs)):
            found = self._call(index.episode_neighbours, {r: docs[sign * r] for r in mine})
            out.update({sign * r: [sign * n for n in ns] for r, ns in found.items()})
        return out

    def runbook_steps(self, docs: dict[int, dict[str, Any]]) -> dict[int, tuple[str, str]]:
        out: dict[int, tuple[str, str]] = {}
        for index, sign, mine in self._by_part(list(docs)):
            found = self._call(index.runbook_steps, {r: docs[sign * r] for r in mine})
            out.update({sign * r: key for r, key in found.items()})
        return out

    def _unshadowed(self, index: SearchIndex, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if index is not self._shared:
            return items
        shadow = self._shadow()
        return [d for d in items if d["path"] not in shadow and in_place(d)]

    def runs_of(self, names: Sequence[str], per_name: int = 3) -> dict[str, list[dict[str, Any]]]:
        merged: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in names}
        for index, _sign in self._parts():  # the overlay first: this host's version of a run wins
            for name, runs in self._call(index.runs_of, names, per_name).items():
                runs = self._unshadowed(index, runs)
                for run in self._runs_as_filed(name, runs) if index is self._shared else runs:
                    merged[name].setdefault(run["id"], run)
        return {name: sorted(runs.values(), key=lambda r: index_time(r["created"]) or "", reverse=True)[:per_name]
                for name, runs in merged.items()}

    def procedure_docs(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for index, _sign in self._parts():  # the overlay first: its version wins
            for name, doc in self._call(index.procedure_docs, names).items():
                if name not in out and self._unshadowed(index, [doc]):
                    out[name] = doc
        return out

    def episodes_between(self, since: Any, until: Any, limit: int) -> list[dict[str, Any]]:
        docs: dict[str, dict[str, Any]] = {}
        for index, _sign in self._parts():
            for doc in self._unshadowed(index, self._call(index.episodes_between, since, until, limit)):
                docs.setdefault(doc["id"], doc)
        return sorted(docs.values(), key=lambda d: index_time(d["created"]) or "", reverse=True)[:limit]

    # -- maintenance ---------------------------------------------------------------------------------------
    def scrub(self) -> None:
        """After a purge: this host's SQLite files keep no removed text (the shared index drops the rows when the
        purge is published)."""
        for part in (self.overlay, self.fallback):
            part.scrub()  # an orphan generation too, when there is no index

    def scan(self) -> dict[str, tuple[str, int, int, int]]:
        return self.fallback.scan()

    def sample_size(self, rels: Sequence[str], identity: ModelIdentity | None) -> tuple[int, int, int]:
        return self.fallback.sample_size(rels, identity)

    def stats(self) -> dict[str, Any]:
        """This host's overlay (the local index's figures), with the shared index's (``shared_index``) and, when it
        exists, the fallback's."""
        out = self.overlay.stats()
        try:
            shared = self.shared
            out["shared_index"] = shared.stats() if shared.exists() else {"exists": False, "vault": shared.vault}
        except (SearchIndexError, ConfigError) as exc:
            out["shared_index"] = {"exists": False, "error": str(exc)}
        if self.fallback.exists():
            out["fallback_index"] = self.fallback.stats()
        return out


class TeamState:
    """A team's usage state, quiet while the team index cannot be used: reads give nothing and what recall shows is
    not counted (the recall's one line about the team index says why); a use reported meanwhile fails as the shared
    index would, and its caller says so."""

    def __init__(self, open_state: Callable[[], Any], team: TeamIndex) -> None:
        self._open = open_state
        self._state: Any = None
        self._team = team
        self._outages = team.outages
        self.warnings: list[str] = []

    @property
    def state(self) -> Any:
        if self._state is None:
            self._state = self._open()
            self.warnings = self._state.warnings
        elif self._outages != self._team.outages:  # its session did not survive the outage: a new one
            self._state.close()
        self._outages = self._team.outages
        return self._state

    def get(self, keys: Any, at: Any = None) -> dict[tuple[str, str], Any]:
        if self._team.down is not None:
            return {}
        try:
            return self.state.get(keys, at)
        except SearchIndexError as exc:
            self._team.failed(exc)
            return {}

    def record_shown(self, weights: dict[tuple[str, str], float], **options: Any) -> None:
        if self._team.down is None:
            self.state.record_shown(weights, **options)

    def record_use(self, keys: Any, **options: Any) -> list[tuple[str, str]]:
        return self.state.record_use(keys, **options)

    def recalled_hashes(self) -> set[str]:
        return self.state.recalled_hashes()

    def forget(self, keys: Any) -> None:
        self.state.forget(keys)

    def close(self) -> None:
        if self._state is not None:
            self._state.close()


def _url_key(url: str) -> str:
    """Which URL a timeout note is about, without keeping the URL (it may hold a password)."""
    import hashlib

    return hashlib.sha256(url.encode()).hexdigest()[:16]


#: Where a team host keeps its whole vault's index for when the shared index cannot be used (built on demand).
FALLBACK_DIR = "fallback"


def team_index(state_dir: Path, sources: Sources, config: Config, git: Callable[[], GitStore | None],
               cache: Any, *, splitter: Callable[[], Any] = lambda: None) -> tuple[TeamIndex, Callable[[], Any]]:
    """A team host's index (:class:`TeamIndex`) and how to open its usage state (:class:`TeamState`), for a vault
    whose index lives in ``state_dir``. Nothing is connected or read until first used."""
    from dataclasses import replace

    def open_shared() -> SharedIndex:
        url = index_url.usable(config, state_dir)
        if url is None:
            raise ConfigError(config.path or CONFIG_NAME, "[index] backend = \"postgres\" needs [index] url or "
                              "MEMVAULT_INDEX_URL")
        from ..index.postgres import SharedIndex

        return SharedIndex(url, vault_name(git(), sources.root, config.index.name), cache=cache,
                           vectors=config.index.vectors)

    weights = FieldWeights(**config.recall.field_weights)
    vectors = config.index.vectors
    team = TeamIndex(overlay=Index(state_dir, replace(sources, keep=set()), cache=cache, field_weights=weights,
                                   vectors=vectors),
                     fallback=Index(state_dir / FALLBACK_DIR, replace(sources, keep=None), field_weights=weights,
                                    vectors=vectors),
                     open_shared=open_shared, git=git, track_episodes=config.track_episodes, splitter=splitter,
                     cache=cache)

    def open_state() -> TeamState:
        def shared_state() -> Any:
            from ..index.postgres import SharedState

            shared = team.shared
            return SharedState(shared.url, shared.vault, half_life=config.recall.half_life)

        return TeamState(shared_state, team)

    return team, open_state
