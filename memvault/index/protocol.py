"""What the rest of memvault may ask of an index, whichever backend holds it.

Two levels, as sqlite-utils' ``Queryable`` sits under ``Table`` and ``View``:

- :class:`SearchIndex` — what recall, the write gate's duplicate check, ``stats``, ``dedup`` and the web view read:
  the searches (words, phrases, exact quotes, vectors, pseudo-relevance feedback), the fields behind the ids they
  return, the few lookups recall makes around its candidates, the relevance scale's store, the listings people
  browse (:mod:`memvault.index.listings`); plus its model, its pending vectors and phase 2. Both backends implement it:
  the SQLite :class:`memvault.index.Index` and the PostgreSQL :class:`memvault.index.postgres.SharedIndex`.
- :class:`VaultIndex` — a :class:`SearchIndex` kept in step with this host's files: phase 1 (``sync``), recall's
  freshness checks (``refresh``, ``verify``), a rebuild, and the warnings gathered on the way. The SQLite index is
  one; a team's index (:class:`memvault.core.team.TeamIndex`: the shared index, this host's overlay, and what
  shadows what) is the other. Recall, the write gate and the ``Vault`` hold a ``VaultIndex`` and never ask which.

Ids ("rowids") are opaque integers, unique within one index; scores are comparable within one result list only
(BM25 depends on the corpus it was computed over; cosines are comparable wherever one model made the vectors).

This is the one protocol: nothing outside ``memvault.index`` asks an index for anything not declared here, and no
caller branches on which backend it holds (``hasattr``, ``isinstance``). To add a method: add it here, implement it
in ``Index`` and ``SharedIndex`` (and ``TeamIndex`` when it belongs to a ``VaultIndex``);
tests/test_index_protocol.py checks every implementation against these signatures, and reads the code outside
``memvault.index`` for any attribute of an index that is not declared here.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..models.embeddings import Embedder, ModelIdentity
    from .documents import Sources
    from .listings import EpisodeQuery, FactQuery
    from .update import SyncReport

Progress = Callable[[int, int], None]


@runtime_checkable
class SearchIndex(Protocol):
    """The searches and lookups of one index (see the module doc)."""

    def exists(self) -> bool:
        """Whether there is anything to search yet."""
        ...

    def identity(self) -> ModelIdentity | None:
        """The model of every vector the index holds (None: keyword-only)."""
        ...

    def search_keywords(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(rowid, BM25) best first: any query word may match, rare words weigh more."""
        ...

    def search_phrases(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(rowid, score) of chunks holding two consecutive query words in order."""
        ...

    def search_exact(self, query: str, kinds: Sequence[str], limit: int) -> list[int]:
        """Chunks holding the whole query word for word (three words or more)."""
        ...

    def search_vectors(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(rowid, cosine similarity) best first."""
        ...

    def vector_search(self, kinds: Sequence[str], limit: int) -> Callable[[Any], list[tuple[int, float]]] | None:
        """:meth:`search_vectors` bound to the vectors as they are now, safe to run in another thread while this
        one searches the words; None when the index cannot offer that (then :meth:`search_vectors` is called)."""
        ...

    def similarities(self, vector: Any, rowids: Sequence[int]) -> dict[int, float]:
        """Cosine similarity of ``vector`` to the stored vectors of ``rowids`` (those that have one)."""
        ...

    def chunk_docs(self, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """rowid -> its doc's fields (:data:`memvault.index.search.DOC_FIELDS`)."""
        ...

    def coverage(self, query: str, rowid: int) -> float:
        """The share of the query's IDF weight chunk ``rowid`` holds (recall's "nothing known" test)."""
        ...

    def coverages(self, query: str, rowids: Sequence[int]) -> dict[int, float]:
        """:meth:`coverage` of each of ``rowids`` (recall's rescoring of its best candidates)."""
        ...

    def episode_neighbours(self, docs: dict[int, dict[str, Any]]) -> dict[int, list[int]]:
        """For the raw episodes among ``docs``, the rowids of the turns just before and after each."""
        ...

    def runbook_steps(self, docs: dict[int, dict[str, Any]]) -> dict[int, tuple[str, str]]:
        """Every step (a chunk numbered below 0: a vector only) of the runbooks among ``docs``: its rowid -> its
        runbook's (kind, id). Nothing else of a step is read: recall needs only its cosine."""
        ...

    def runs_of(self, names: Sequence[str], per_name: int = 3) -> dict[str, list[dict[str, Any]]]:
        """The last runs (procedure_run episodes) of each procedure, newest first."""
        ...

    def procedure_docs(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """name -> the fields of that procedure's doc."""
        ...

    def episodes_between(self, since: datetime | None, until: datetime | None, limit: int) -> list[dict[str, Any]]:
        """Episodes created in [since, until) (None for open), newest first."""
        ...

    def doc_vectors(self, rowid: int) -> list[Any]:
        """The stored vectors (float32 arrays) of every chunk of the doc chunk ``rowid`` belongs to (recall's test of
        an untrusted memory that "matches every question")."""
        ...

    def docs_vectors(self, rowids: Sequence[int]) -> dict[int, list[Any]]:
        """:meth:`doc_vectors` of many chunks at once: chunk id -> its doc's vectors (recall's generality of the
        facts found; a chunk without a vector is left out)."""
        ...

    def unknown_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` that no chunk holds, compared as the keyword index stores words (recall's name rule)."""
        ...

    def search_feedback(self, bodies: Sequence[str], query: str, kinds: Sequence[str], terms: int,
                        limit: int) -> list[tuple[int, float]]:
        """Pseudo-relevance feedback: the ``terms`` words the best memories' ``bodies`` share most, that the query
        lacks and this index holds rarely, searched as one keyword query: (rowid, BM25) best first."""
        ...

    # -- the relevance scale's store (memvault.core.calibration): derived data kept with the index -------------
    def meta_get(self, key: str) -> str | None:
        """A value kept with the index beside the model identity (the relevance scale), or None."""
        ...

    def meta_set(self, key: str, value: str) -> None:
        ...

    def sample_chunks(self, kind: str, n: int) -> list[tuple[str, str]]:
        """("kind:id", chunk text) of ``n`` embedded chunks of ``kind``, chosen by their text's hash (the same
        sample for the same vault on every host)."""
        ...

    def last_chunk_id(self) -> int:
        """The newest chunk's id (ids only grow: how much the vault grew since the scale was measured)."""
        ...

    def pending(self) -> int:
        """Chunks still waiting for a vector."""
        ...

    def embed(self, embedder: Embedder, *, limit: int | None = None, progress: Progress | None = None,
              report: SyncReport | None = None, wait: bool = False) -> SyncReport:
        """Phase 2: vectors for pending chunks (at most ``limit``); vectors of another model are never mixed in."""
        ...

    def stats(self) -> dict[str, Any]:
        """Items per kind, chunks, vectors, pending, model, sizes."""
        ...

    # -- listings for people (memvault.core.browse: the web view), in the index's own query language -------------
    # ``hide``: paths not to list (a team's shared rows that this host's own files shadow).
    def listing_version(self) -> tuple[Any, ...]:
        """Changes whenever what the listings read may have (a write, a publish, a generation swap)."""
        ...

    def doc_counts(self, hide: Collection[str] = frozenset()) -> list[tuple[str, str | None, int]]:
        """(kind, source, items) of every kind and source."""
        ...

    def fact_keys(self, prefix: str, hide: Collection[str] = frozenset()) -> list[str]:
        """The keys of the facts under ``prefix`` ('' for all), in key order."""
        ...

    def fact_tags(self, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        """(tag, facts) most used first."""
        ...

    def list_facts(self, query: FactQuery, limit: int, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """One page of the facts ``query`` asks for, in key order (keys :data:`memvault.index.listings.FACT_KEYS`),
        and how many match in all (``limit`` 0: only that)."""
        ...

    def list_episodes(self, query: EpisodeQuery, limit: int) -> list[dict[str, Any]]:
        """The episodes ``query`` asks for, newest first (keys :data:`memvault.index.listings.EPISODE_KEYS`)."""
        ...

    def sessions(self, limit: int, hide: Collection[str] = frozenset()) -> list[tuple[Any, ...]]:
        """(session, runtime, source, first, last, episodes) of captured agent sessions, latest activity first."""
        ...

    def session_episodes(self, sessions: list[str], hide: Collection[str] = frozenset()) -> list[dict[str, Any]]:
        """``{"id", "path"}`` of every episode of ``sessions``: what :meth:`sessions` counted, for a host to read
        each again from its file (a team's shared rows are not taken at their word)."""
        ...

    def episode_kinds(self, hide: Collection[str] = frozenset()) -> list[str]:
        """The episode kinds present, sorted."""
        ...

    def episode_days(self, since: str, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        """(YYYY-MM-DD, episodes created that day) from ``since`` on."""
        ...


@runtime_checkable
class VaultIndex(SearchIndex, Protocol):
    """A :class:`SearchIndex` kept in step with this host's files: what recall, the gate and the Vault hold."""

    #: What went wrong on the way that the caller should pass on (a damaged file moved aside, ...); the caller
    #: empties it once it has.
    warnings: list[str]
    #: A file watcher marking what changed, in a process that stays up (memvault.index.changes), or None.
    changes: Any
    #: The vault's files as the index reads them (what a rebuild and its estimate read).
    sources: Sources

    def sync(self, paths: Sequence[Path] | None = None, *, splitter: Any = None) -> SyncReport:
        """Phase 1: the text rows in step with the files (all of them, or only ``paths``)."""
        ...

    def refresh(self, interval: float = 30.0) -> SyncReport | None:
        """Recall's cheap freshness check: phase 1 when something changed; None when nothing was due."""
        ...

    def refresh_later(self, interval: float = 30.0) -> Callable[[], SyncReport | None]:
        """:meth:`refresh` in two steps: what can run while recall searches is started now, the call returned
        finishes it (recall searches again when its report is :attr:`SyncReport.altered`)."""
        ...

    def apply(self, marks: Any, *, splitter: Any = None) -> SyncReport | None:
        """Phase 1 for what a file watcher marked (``memvault.index.changes.Marks``); None when nothing was."""
        ...

    def verify(self, rels: set[str]) -> SyncReport | None:
        """Stat the files behind ``rels`` (recall's candidates); phase 1 for those that changed since indexed."""
        ...

    def publish(self, *, splitter: Any = None) -> SyncReport:
        """Share what this host has pushed: a team's shared index is brought to the pushed commit (raises a one-line
        SearchIndexError when it cannot be reached); a local index has nobody to share with."""
        ...

    def scrub(self) -> None:
        """After a purge: no removed text left in the index's files."""
        ...

    def lag(self) -> dict[str, int]:
        """Files the index has not caught up with: changed, new and removed since it last read them (one stat of
        every vault file)."""
        ...

    def unwatchable(self) -> str | None:
        """Why a file watcher must not feed this index (a team's follows git, not the files), or None."""
        ...

    def scan(self) -> dict[str, tuple[str, int, int, int]]:
        """Every vault file the index would hold: path -> (kind, size, mtime_ns, inode), from one stat each."""
        ...

    def sample_size(self, rels: Sequence[str], identity: ModelIdentity | None) -> tuple[int, int, int]:
        """(bytes of an empty index, bytes of one holding only the files ``rels``, its chunks): what a rebuild's
        estimate scales up."""
        ...

    def problems(self) -> list[str]:
        """Every vault file the index cannot hold, with the reason (kept since the sync that met it)."""
        ...

    def as_on_disk(self, rels: set[str]) -> set[str]:
        """Of ``rels`` (just verified), the paths whose indexed text is this host's file as it is: their text may be
        returned from the index without reading the file again."""
        ...

    def rebuild(self, embedder: Callable[[], Embedder | None] | None = None, *,
                progress: Progress | None = None) -> SyncReport:
        """A whole new index (with ``embedder``'s model), swapped in when complete; recall reads the old one
        meanwhile."""
        ...

    def guard(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised while searching, is one the index has dealt with (a damaged file moved aside, a
        backend that went away): the caller syncs and searches again."""
        ...

    def close(self) -> None:
        """Let go of connections and cached data (the next call opens them again)."""
        ...
