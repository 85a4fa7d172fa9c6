"""The index: a derived SQLite file (sqlite-vec vectors + FTS5 keywords) over the vault's text.

The vault's files are the only truth. ``index.db`` (in the vault's state directory) can be deleted and regenerated
at any time with the same results. It is a symlink to a generation file ``index-<n>.db``: a full rebuild (a model change) writes a new
generation beside the old one and swaps the symlink with an atomic rename, so recall keeps reading the old one
meanwhile and a crash leaves it in place. A generation that turns out to be damaged is moved aside and rebuilt.

Modules: :mod:`.db` (connection, migrations), :mod:`.documents` (what a memory becomes, how text is cut),
:mod:`.search` (the queries), :mod:`.update` and :mod:`.vectors` (the two phases that keep it in step with the files).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import IndexDamaged, MemvaultError, ModelUnavailable, SchemaTooNew, SearchIndexError
from ..rules.fsutil import (drop_links, ensure_dir, locked, remove, replace, replace_with_link, temp_dir,
                            try_lock)
from ..rules.timeutil import format_time, index_time, now
from . import matrix, quantize, search, words
from .db import MIGRATIONS, SchemaWatch, connect, is_corruption, migrate, summary, transaction, used_bytes
from .documents import CHUNK_OVERLAP, KINDS, Doc, Sources, cut, read_docs
from .freshness import Freshness
from .listings import EpisodeQuery, FactQuery, Listings, Stale
from .search import DEFAULT_FIELD_WEIGHTS, FieldWeights, fts_exact_query, fts_phrase_query, fts_query
from .update import Progress, SyncReport, model_key, pending_count, scan, stored_problems, sync_text, vector_blob
from .vectors import TextFeed, embed_pending

if TYPE_CHECKING:
    import sqlite3

    from ..models.embeddings import Embedder, ModelIdentity
    from .changes import ChangeFeed

__all__ = ["Index", "KINDS", "CHUNK_OVERLAP", "Doc", "Sources", "SyncReport", "Progress", "EmbedderProvider",
           "FieldWeights", "fts_query", "fts_phrase_query", "fts_exact_query", "vector_blob", "model_key", "cut", "read_docs",
           "FactQuery", "EpisodeQuery", "Stale"]

logger = logging.getLogger(__name__)
INDEX_NAME = "index.db"
#: What ``index.db`` may point at: a generation file beside it, named by memvault.
_GENERATION = re.compile(r"index-\d+\.db")
#: A generation's files: the database and SQLite's companions.
_GENERATION_FILE = re.compile(r"(index-\d+\.db)(?:-wal|-shm|-journal)?")
#: The migration after which the file is compacted once (it frees about a tenth of it).
SHRINKING_MIGRATION = "0005_index_text_once"
#: The rows of ``meta`` measured on the vault's text (the relevance scale and the pieces it was measured with).
MEASURED_SQL = "DELETE FROM meta WHERE key = 'calibration' OR (key >= 'calibration:' AND key < 'calibration;')"
#: A sync that rewrites at least this many docs merges the keyword index afterwards.
OPTIMIZE_AFTER = 1000
#: Files a rebuild reads and writes per transaction while the model encodes the previous ones.
TEXT_BATCH = 64
EmbedderProvider = Callable[[], "Embedder | None"]


class Index(Freshness, Listings):
    """The search index of one vault, over ``sources`` (the vault's stores), kept in ``state_dir``."""

    def __init__(self, state_dir: Path, sources: Sources, *, cache: Any = None,
                 field_weights: FieldWeights | None = None, vectors: str = quantize.DEFAULT_TYPE) -> None:
        self.dir = state_dir
        #: How a new index stores its vectors (``[index] vectors``: int8 or float32, see :mod:`.quantize`).
        self.vector_type = vectors
        self.sources = sources
        #: How a query word counts in a chunk's key, category, tags and body (``[recall] field_weights``).
        self.field_weights = field_weights or DEFAULT_FIELD_WEIGHTS
        #: A team's shared embedding cache (memvault.index.postgres.EmbeddingCache), or None.
        self.cache = cache
        self.link = self.dir / INDEX_NAME
        self._link = os.fspath(self.link)
        #: The link as last read: (its inode and times, the generation's Path and path) — a recall asks a dozen times.
        self._read_link: tuple[tuple[int, int, int], Path, str] | None = None
        self._conn: sqlite3.Connection | None = None
        self._conn_target: Path | None = None
        self._identity: tuple[Any, ModelIdentity | None] | None = None
        self._vector_searches = 0
        self._last_refresh = float("-inf")
        self._vector_cache: tuple[Any, matrix.VectorMatrix] | None = None
        #: The keyword postings in memory (:mod:`.words`) with the index version they were read at, and their load.
        self._words: tuple[Any, words.Postings] | None = None
        self._words_lock = threading.Lock()
        self._words_loading = False
        self._words_asked = float("-inf")
        self._rows: tuple[Any, dict[int, int]] | None = None
        #: The last in-memory scan that scored every row: (query vector, matrix, every row's cosine). A recall asks
        #: the cosines of its keyword candidates for the same vector: read, not computed again.
        self._scanned: tuple[Any, matrix.VectorMatrix, Any] | None = None
        self._format: str | None = None  # how the open generation stores its vectors
        self._said_format = False
        self._schema = SchemaWatch(MIGRATIONS)  # a newer memvault migrating the file while this process has it open
        self._df: tuple[Any, dict[str, int]] = (None, {})
        self.warnings: list[str] = []
        #: Named-path syncs into a team's overlay (a cached view of which paths are local is stale after one).
        self.writes = 0
        #: A file watcher's marks (memvault.index.changes.ChangeFeed) in a process that keeps one: recall then
        #: checks only what it marked.
        self.changes: ChangeFeed | None = None

    # -- files and generations ---------------------------------------------------------------------------
    def current_target(self) -> Path | None:
        """The generation file ``index.db`` points at (or ``index.db`` itself when it is a plain file).

        Only a link to a regular ``index-<n>.db`` file beside it counts: anything else (a link to another path,
        a generation that is itself a link) was not made by memvault, is never opened, moved or written, and is
        replaced by a new generation, with a warning."""
        try:
            st = os.lstat(self._link)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode):
            return self.link
        if not stat.S_ISLNK(st.st_mode):
            return self._not_ours(self.link, "not a file or a link")
        seen = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)  # a swap renames a new link over this one: a new inode
        if self._read_link is not None and self._read_link[0] == seen:
            target, path = self._read_link[1], self._read_link[2]
        else:
            name = os.readlink(self._link)
            if not _GENERATION.fullmatch(name):
                return self._not_ours(self.link, f"a link to {name}, not to an index generation beside it")
            target = self.dir / name
            path = os.fspath(target)
            self._read_link = (seen, target, path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return self._not_ours(target, "not a regular file" + (f" (a link to {os.readlink(target)})"
                                                                  if stat.S_ISLNK(st.st_mode) else ""))
        return target

    def _not_ours(self, path: Path, what: str) -> None:
        warning = (f"{path} is {what}: not made by memvault, never followed; the index is rebuilt from the "
                   "vault's files beside it")
        if warning not in self.warnings:
            self.warnings.append(warning)
        return None

    def exists(self) -> bool:
        return self.current_target() is not None

    def connection(self) -> sqlite3.Connection:
        """A connection to the current generation (reopened after a swap). A damaged file is moved aside
        (:meth:`quarantine`) and SearchIndexError says so; the caller rebuilds."""
        target = self.current_target()
        if target is None:
            raise SearchIndexError(f"{self.link}: no index yet; run 'memvault reindex'")
        if self._conn is not None and self._conn_target == target:  # a newer memvault may have migrated it since
            self._schema.check(self._conn)
        if self._conn is None or self._conn_target != target:
            self.close()
            for link in drop_links([Path(str(target) + s) for s in ("-wal", "-shm", "-journal")]):
                self.warnings.append(f"{link} was a symlink, not SQLite's own file: removed, never written through")
            conn = None
            try:  # without create: a generation another process's rebuild removed meanwhile is never made anew
                conn = connect(target, create=False)
                applied = migrate(conn, MIGRATIONS)
                if (problem := quantize.stamp_problem(conn)) is not None:
                    raise IndexDamaged(f"{target.name} holds {problem}")
            except Exception as exc:
                conn is not None and conn.close()
                if self.current_target() not in (target, None):
                    return self.connection()  # swapped away while it was opened: the new generation, then
                if isinstance(exc, SchemaTooNew) or conn is None:  # a newer memvault's file: not damaged; or
                    raise  # connect's own error, said as it is
                if is_corruption(exc):
                    aside = self.quarantine(target, exc)
                    raise IndexDamaged(f"{target}: cannot open the index: {exc}; moved aside to "
                                       f"{aside.name if aside else '-'}: the next sync rebuilds it") from None
                raise SearchIndexError(f"{target}: cannot open the index: {exc}") from None
            if self.current_target() != target:  # the same, seen only once it was open
                conn.close()
                return self.connection()
            if SHRINKING_MIGRATION in applied:
                with contextlib.suppress(Exception):  # a reader holding the file open: it shrinks another time
                    conn.execute("VACUUM")  # give the freed pages back once (the text it held twice)
            self._conn, self._conn_target = conn, target
            self._format = self._vector_format(conn, target)
        return self._conn

    def _vector_format(self, conn: sqlite3.Connection, target: Path) -> str | None:
        """How the generation just opened stores its vectors; a float32 one becomes int8 here when int8 is wanted
        (quantized in place, no model needed), with one line saying so."""
        kind = quantize.stored(conn)
        if kind == "float32" and self.vector_type == "int8":
            identity = self.identity(conn)
            used = used_bytes(conn)
            with transaction(conn):
                rows = quantize.to_int8(conn, identity.dims) if identity and quantize.stored(conn) == "float32" else 0
            if rows:
                with contextlib.suppress(Exception):  # a reader holding the file open: it shrinks another time
                    conn.execute("VACUUM")
                self.warnings.append(f"{target.name}: the index's vectors are now 8-bit ({rows} rows, "
                                     f"{used / rows:,.0f} -> {used_bytes(conn) / rows:,.0f} bytes a row); "
                                     '[index] vectors = "float32" and `memvault reindex --full` keep float32')
            return quantize.stored(conn)
        if kind == "int8" and self.vector_type == "float32" and not self._said_format:
            self._said_format = True
            self.warnings.append('the index holds 8-bit vectors; [index] vectors = "float32" takes effect with '
                                 "`memvault reindex --full`")
        return kind

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._conn_target = None
        self._identity = None
        self._vector_cache = self._scanned = None
        self._format = None
        self._schema.reset()

    def quarantine(self, target: Path | None = None, error: BaseException | None = None) -> Path | None:
        """Move a damaged generation aside (``index-<n>.db.corrupt-<t>``, the only such copy kept) so the next sync
        rebuilds; returns where."""
        target = target or self.current_target()
        self.close()
        if target is None:
            return None
        aside = target.with_name(target.name + f".corrupt-{time.time_ns()}")
        with contextlib.suppress(FileNotFoundError):
            replace(target, aside)
        for older in self.dir.glob("index-*.db.corrupt-*"):  # the newest copy is kept: a failing disk fills no folder
            if older != aside and _GENERATION.fullmatch(older.name.split(".corrupt-")[0]):
                with contextlib.suppress(OSError, MemvaultError):  # a folder there: left, as purge leaves it
                    remove(older)
        for suffix in ("-wal", "-shm"):
            remove(Path(str(target) + suffix))
        if self.link.is_symlink():
            remove(self.link)
        self.warnings.append(f"the index {target.name} was damaged ({error or 'unreadable'}); moved aside to "
                             f"{aside.name} and rebuilt from the vault's files")
        return aside

    def guard(self, exc: BaseException) -> bool:
        """Whether ``exc`` (raised while using the index) means the file is damaged; if so it is moved aside."""
        if is_corruption(exc):
            self.quarantine(error=exc)
            return True
        return False

    # -- model identity ----------------------------------------------------------------------------------
    def identity(self, conn: sqlite3.Connection | None = None) -> ModelIdentity | None:
        """The model identity of every vector in the index, or None (keyword-only index)."""
        from ..models.embeddings import ModelIdentity

        conn = conn or self.connection()
        version = (self._conn_target, conn.execute("PRAGMA data_version").fetchone()[0])
        if self._identity is not None and self._identity[0] == version:
            return self._identity[1]
        row = conn.execute("SELECT value FROM meta WHERE key = 'model'").fetchone()
        try:
            identity = ModelIdentity.from_dict(json.loads(row[0])) if row else None
        except (ValueError, TypeError, MemvaultError) as exc:  # rewritten since it was opened (and checked)
            raise IndexDamaged(f"{self._conn_target}: its model identity is unreadable ({exc})") from None
        self._identity = (version, identity)
        return identity

    def _set_identity(self, conn: sqlite3.Connection, identity: ModelIdentity) -> None:
        quantize.create_table(conn, self.vector_type, int(identity.dims))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('model', ?)", (json.dumps(identity.to_dict()),))
        self._identity = None
        if conn is self._conn:
            self._format = self.vector_type

    def adopt(self, identity: ModelIdentity) -> None:
        """Give a keyword-only index its model: every chunk becomes pending and is embedded piecemeal."""
        conn = self.connection()
        with transaction(conn):
            if self.identity(conn) is not None:
                return
            self._set_identity(conn, identity)
            conn.execute("UPDATE chunks SET model = NULL")

    # -- phase 1 and 2 -----------------------------------------------------------------------------------
    def sync(self, paths: Sequence[Path] | None = None, *, splitter: Any = None, reread: bool = False) -> SyncReport:
        """Phase 1: the text rows in step with the files (all of them, or only ``paths``). Creates a keyword-only
        index when there is none (``splitter`` gives it its model's identity). ``reread``: read the named files even
        when their size, mtime and inode look as indexed (a file watcher saw them change: two same-size writes
        within one tick of the file system's clock look identical to ``stat``)."""
        started = time.perf_counter()
        report = SyncReport()
        if self.current_target() is None:
            self._create(splitter.identity if splitter is not None else None)
        try:
            conn = self.connection()
            rels = None if paths is None else [self._rel(p) for p in paths]
            if rels is not None and self.sources.keep is not None:
                self.sources.keep.update(rels)  # written here: this host's version until it is pushed
                self.writes += 1
            sync_text(conn, self.sources, only=rels, identity=self.identity(conn), splitter=splitter, report=report,
                      reread=reread)
            if report.docs_added + report.docs_changed + report.docs_removed + report.metadata_only >= OPTIMIZE_AFTER:
                # Many rows rewritten (a checkout, a new field): merge the keyword index into one segment, or every
                # search reads the old and new rows' segments (2-3x slower at 100k after a full re-read).
                optimizing = time.perf_counter()  # not ``started``: the report's seconds are the whole sync's
                conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
                report.timings["optimize"] = time.perf_counter() - optimizing
        except Exception as exc:
            if self.guard(exc):
                return self.sync(paths, splitter=splitter, reread=reread)
            raise
        if report.docs_added or report.docs_changed or report.docs_removed:
            self._vector_cache = self._scanned = None  # this process's own writes do not move PRAGMA data_version
        report.seconds = time.perf_counter() - started
        return report

    def overlay(self, local: set[str], *, splitter: Any = None) -> SyncReport:
        """A team's overlay: hold exactly the files in ``local`` (this host's unpushed versions; the shared index
        holds the rest). Costs the files named plus the ones held: nothing else is walked."""
        started = time.perf_counter()
        self.sources.keep = set(local)
        report = SyncReport()
        if self.current_target() is None:
            self._create(splitter.identity if splitter is not None else None)
        try:
            conn = self.connection()
            held = [r[0] for r in conn.execute("SELECT path FROM files")]
            sync_text(conn, self.sources, only=sorted(self.sources.keep | set(held)), identity=self.identity(conn),
                      splitter=splitter, report=report)
        except Exception as exc:
            if self.guard(exc):
                return self.overlay(local, splitter=splitter)
            raise
        if report.changed:
            self._vector_cache = self._scanned = None
        report.seconds = time.perf_counter() - started
        return report

    def embed(self, embedder: Embedder, *, limit: int | None = None, progress: Progress | None = None,
              report: SyncReport | None = None, wait: bool = False) -> SyncReport:
        """Phase 2: embed pending chunks (at most ``limit``). Skipped when another process is embedding this
        generation right now, unless ``wait``; vectors of another model are never mixed in."""
        report = report or SyncReport()
        conn = self.connection()
        identity = self.identity(conn)
        if identity is None:
            self.adopt(embedder.identity)
            identity = self.identity(conn)
        assert identity is not None
        if not embedder.identity.same_vectors(identity):
            report.warnings.append(f"the index holds vectors of {identity.name}; {embedder.identity.name} is "
                                   "configured: run 'memvault reindex' to rebuild")
            return report
        if pending_count(conn) == 0:  # every warm recall asks: nothing to do costs no lock, thread or connection
            report.model_loaded = True
            return report
        target = self._conn_target
        assert target is not None
        with self._embed_lock(target, wait=wait) as mine:
            if not mine:
                report.chunks_pending = pending_count(conn)
                return report
            try:
                embed_pending(conn, embedder, identity, limit=limit, progress=progress, report=report,
                              cache=self.cache)
            except Exception as exc:
                if self.guard(exc):
                    return report
                raise
        report.model_loaded = True
        if report.chunks_embedded:
            self._vector_cache = self._scanned = None
        return report

    def pending(self) -> int:
        return pending_count(self.connection()) if self.exists() else 0

    def problems(self) -> list[str]:
        """Every vault file the index cannot hold, with the reason (kept since the sync that met it)."""
        return stored_problems(self.connection()) if self.exists() else []

    def _embed_lock(self, target: Path, *, wait: bool) -> Any:
        return try_lock(self.dir / "locks" / f"{target.name}.embed.lock", wait=wait)

    def unwatchable(self) -> str | None:
        """None: a file watcher may mark what changed (this index reads the files)."""
        return None

    def publish(self, *, splitter: Any = None) -> SyncReport:
        """Share what this host has pushed with the other hosts' indexes: a local index has nobody to share with."""
        return SyncReport()

    def _rel(self, path: Path) -> str:
        return os.path.relpath(os.path.abspath(path), self.sources.root).replace(os.sep, "/")

    # -- full rebuild ------------------------------------------------------------------------------------
    def _create(self, identity: ModelIdentity | None) -> None:
        """An empty generation, swapped in (used when there is no index at all)."""
        ensure_dir(self.dir)
        with locked(self.dir / "locks" / "rebuild.lock"):
            if self.current_target() is not None:
                return
            target = self.dir / f"index-{time.time_ns()}.db"
            conn = connect(target)
            try:
                migrate(conn, MIGRATIONS)
                with transaction(conn):
                    if identity is not None:
                        self._set_identity(conn, identity)
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('built_at', ?)", (format_time(now()),))
            finally:
                conn.close()
            self._swap(target)

    def rebuild(self, embedder: EmbedderProvider | None = None, *, progress: Progress | None = None) -> SyncReport:
        """Build a whole new generation beside the current one, then swap it in with an atomic rename.

        Recall keeps reading the old generation until the swap; a failure leaves the old one in place and removes
        the half-built file (after a crash, the next rebuild removes it). With no model the new index is keyword-only
        and says so."""
        started = time.perf_counter()
        ensure_dir(self.dir)
        with locked(self.dir / "locks" / "rebuild.lock"):
            self._remove_stale_generations()
            target = self.dir / f"index-{time.time_ns()}.db"
            report = SyncReport()
            emb: Embedder | None = None
            if embedder is not None:
                try:
                    emb = embedder()
                except ModelUnavailable as exc:
                    report.warnings.append(f"{exc}; the new index is keyword-only")
            report.model_loaded = emb is not None
            conn = connect(target)
            try:
                migrate(conn, MIGRATIONS)
                with transaction(conn):
                    if emb is not None:
                        self._set_identity(conn, emb.identity)
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('built_at', ?)", (format_time(now()),))
                if emb is None:
                    sync_text(conn, self.sources, only=None, identity=None, splitter=None, report=report)
                else:
                    self._build(conn, target, emb, progress, report)
                conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")  # one segment: smaller
                # Every b-tree rewritten full (indexes filled in key order keep 13-16% of their pages empty): about
                # 30 bytes a row, for 0.3 s at 10k chunks, against minutes of the model's time.
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except BaseException:
                conn.close()
                self._remove_generation(target)  # the old generation keeps serving; nothing half-built is left
                raise
            conn.close()
            self._swap(target)
        report.seconds = time.perf_counter() - started
        return report

    def _build(self, conn: sqlite3.Connection, target: Path, emb: Embedder, progress: Progress | None,
               report: SyncReport) -> None:
        """Text and vectors of a new generation at once: phase 1 runs in a thread (a batch of files at a time,
        cut without the model: a body too long for one window is re-cut by the encoder's thread), and the model
        encodes what each batch committed while the next is read (:mod:`memvault.index.vectors`)."""
        text = SyncReport()

        def write_text(committed: Callable[[], None], stop: Any) -> None:
            tconn = connect(target)
            try:
                sync_text(tconn, self.sources, only=None, identity=emb.identity, splitter=None, report=text,
                          batch_files=TEXT_BATCH, on_batch=committed, stop=stop)
            finally:
                tconn.close()

        feed = TextFeed(write_text).start()
        try:
            embed_pending(conn, emb, emb.identity, limit=None, progress=progress, report=report, cache=self.cache,
                          feed=feed)
        finally:
            feed.close()
        report.merge(text)
        report.chunks_pending = pending_count(conn)

    def _swap(self, target: Path) -> None:
        old = self.current_target()
        replace_with_link(self.link, target.name)
        self.close()
        if old is not None and old != target and old != self.link:
            self._remove_generation(old)

    def _remove_generation(self, target: Path) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            remove(Path(str(target) + suffix))
        for name in (f"{target.name}.lock", f"{target.name}.embed.lock"):
            remove(self.dir / "locks" / name)

    def _remove_stale_generations(self) -> None:
        """Every generation ``index.db`` does not point at, with its -wal and -shm (even one left without its
        database file): what a rebuild killed part-way leaves. The caller holds the rebuild lock."""
        current = self.current_target()
        stale = {self.dir / m.group(1) for p in self.dir.glob("index-*.db*")
                 if (m := _GENERATION_FILE.fullmatch(p.name)) is not None}
        for path in sorted(stale):
            if path != current:
                self._remove_generation(path)

    # -- queries -----------------------------------------------------------------------------------------
    def search_keywords(self, query: str, kinds: Sequence[str], limit: int,
                        weights: FieldWeights | None = None) -> list[tuple[int, float]]:
        """(chunk rowid, bm25) best first; any query term may match, rare terms weigh more (BM25), and a term counts
        in each field (key, category, tags, body) by ``weights`` (default: this index's :attr:`field_weights`).
        A process that has searched before ranks from the postings in memory (:mod:`.words`: the same scores)."""
        postings = self._postings(weights)
        if postings is not None:
            stems = words.word_stems(search.query_terms(query))
            if all(len(s) <= 1 for s in stems):  # a word FTS5 reads as several tokens is a phrase there
                return postings.top([s[0] for s in stems if s], kinds, limit)
        return self._match(fts_query(query), kinds, limit, weights)

    def _postings(self, weights: FieldWeights | None = None) -> words.Postings | None:
        """The postings in memory, for a process that has searched before and ranks with this index's weights."""
        if self._vector_searches >= 1 and (weights is None or weights.params() == self.field_weights.params()):
            return self._words_in_memory()
        return None

    def _words_in_memory(self) -> words.Postings | None:
        """The postings, when they were read from the index as it is now; else None, and a load is started in the
        background (one at a time, at most one per :data:`words.RELOAD_AFTER` seconds)."""
        conn = self.connection()
        # FTS5's structure record changes with every write to the keyword index (and only with those: a sync that
        # changed no text leaves it, where data_version would move)
        row = conn.execute(words.VERSION_SQL).fetchone()
        version = (self._conn_target, row[0] if row else None)
        held = self._words
        if held is not None and held[0] == version and held[1].weights == self.field_weights.params():
            return held[1]
        with self._words_lock:
            if self._words_loading or time.monotonic() - self._words_asked < words.RELOAD_AFTER:
                return None
            self._words_loading, self._words_asked = True, time.monotonic()
        if words.tokens(conn) > words.MAX_TOKENS:  # too large to hold: FTS5 answers (checked again later)
            self._words_loading = False
            return None
        target, weights = self._conn_target, self.field_weights.params()

        def run() -> None:
            try:
                assert target is not None
                self._words = (version, words.load(target, weights))
            except Exception as exc:  # noqa: BLE001 - FTS5 answers meanwhile; the next load is tried later
                logger.debug("%s: keyword postings not loaded: %s", target, exc)
            finally:
                self._words_loading = False

        threading.Thread(target=run, name="memvault-words", daemon=True).start()
        return None

    def search_phrases(self, query: str, kinds: Sequence[str], limit: int,
                       weights: FieldWeights | None = None) -> list[tuple[int, float]]:
        """(chunk rowid, bm25) of chunks holding two consecutive query words in order (within one field): the
        proximity signal that tells the page with the exact line from pages that only share its words."""
        postings = self._postings(weights)
        if postings is not None:
            pairs = search.phrase_pairs(query)
            stems = words.word_stems([w for pair in pairs for w in pair])
            if all(len(s) == 1 for s in stems):  # else a phrase of more than two tokens: FTS5's
                return postings.top_pairs(list(zip((s[0] for s in stems[0::2]), (s[0] for s in stems[1::2]))),
                                          kinds, limit)
        return self._match(fts_phrase_query(query), kinds, limit, weights)

    def search_exact(self, query: str, kinds: Sequence[str], limit: int) -> list[int]:
        """Chunks that contain the whole query, word for word (three words or more): a quoted memory."""
        return [rowid for rowid, _ in self._match(fts_exact_query(query), kinds, limit, None)]

    def _match(self, expr: str, kinds: Sequence[str], limit: int,
               weights: FieldWeights | None) -> list[tuple[int, float]]:
        conn = self.connection()
        counts = dict(conn.execute(search.KIND_COUNTS_SQL).fetchall()) if expr and set(kinds) != set(KINDS) else None
        return search.match(conn, expr, kinds, limit, weights or self.field_weights, counts)

    def search_vectors(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, cosine similarity) best first.

        A one-shot process (a cold CLI) asks sqlite-vec's KNN. From the second search on, a process keeps the
        vectors in memory as they are stored (:mod:`.matrix`: int8, dims bytes per row, or float32) and scores them
        with numpy: the pip build of sqlite-vec has no SIMD and scans 4-8x slower than that. The matrix is
        reloaded when the index file changes (``PRAGMA data_version``, a generation swap, or a write here).
        Both paths score the same cosines."""
        scan = self.vector_search(kinds, limit)
        if scan is not None:
            return scan(vector)
        self._vector_searches += 1
        conn = self.connection()
        return search.knn(conn, vector, kinds, limit, self._format or self.vector_type)

    def vector_search(self, kinds: Sequence[str], limit: int) -> Callable[[Any], list[tuple[int, float]]] | None:
        """:meth:`search_vectors` on the in-memory matrix as it is now, to run in another thread (it reads no SQLite
        connection) once the query's vector is known; None in a process that has not searched before (a one-shot
        process asks sqlite-vec's KNN, on its own thread)."""
        if self._vector_searches < 1:
            return None
        cached = self._vectors_in_memory()
        if cached is None:
            return None
        self._vector_searches += 1

        def scan(vector: Any) -> list[tuple[int, float]]:
            found, whole = cached.scan(vector, kinds, limit)
            self._scanned = None if whole is None else (vector, cached, whole)
            return found

        return scan

    def _vectors_in_memory(self) -> matrix.VectorMatrix | None:
        conn = self.connection()
        version = (self._conn_target, conn.execute("PRAGMA data_version").fetchone()[0])
        if self._vector_cache is not None and self._vector_cache[0] == version:
            return self._vector_cache[1]
        if self.identity(conn) is None:
            return None
        loaded = matrix.load(conn, self._format or self.vector_type)
        if loaded is None:
            return None
        self._vector_cache, self._scanned = (version, loaded), None
        return loaded

    def similarities(self, vector: Any, rowids: Sequence[int]) -> dict[int, float]:
        """Cosine similarity of ``vector`` to the stored vectors of ``rowids``: from the in-memory matrix when this
        process holds it (a row lookup), else computed by sqlite-vec (a vec0 lookup per row)."""
        scanned = self._scanned  # this recall's own scan (every row scored), or another vector of it, many rows
        if scanned is not None and (scanned[0] is vector or len(rowids) > matrix.WHOLE_SCAN_ROWS):
            whole = scanned[2] if scanned[0] is vector else scanned[1].scores(vector)  # the matrix scored whole
            return scanned[1].cosines(self._row_index(scanned[1]), vector, rowids, whole) or {}
        if self._vector_searches > 1:
            cached = self._vectors_in_memory()
            found = cached.cosines(self._row_index(cached), vector, rowids) if cached is not None else None
            if found is not None:
                return found
        return search.similarities(self.connection(), vector, rowids, self._format or self.vector_type)

    def _row_index(self, cached: matrix.VectorMatrix) -> dict[int, int]:
        if self._rows is None or self._rows[0] is not cached:
            self._rows = (cached, {int(r): i for i, r in enumerate(cached.rowids)})
        return self._rows[1]

    def chunk_docs(self, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """chunk rowid -> its doc's fields."""
        return search.chunk_docs(self.connection(), rowids)

    def coverage(self, query: str, rowid: int) -> float:
        """The share of the query's IDF weight the chunk ``rowid`` holds (recall's "nothing known" test)."""
        return self.coverages(query, [rowid])[rowid]

    def coverages(self, query: str, rowids: Sequence[int]) -> dict[int, float]:
        """:meth:`coverage` of each of ``rowids``, in one lookup per query word (recall's rescoring)."""
        postings = self._postings()
        if postings is not None:
            return postings.coverages(search.stems(query), rowids)
        conn, df = self._df_cache()
        return search.coverages(conn, search.spelled_stems(query), rowids, df)

    def _df_cache(self) -> tuple[sqlite3.Connection, dict[str, int]]:
        """The connection, and the document frequencies read from it so far (reset when the file changed)."""
        conn = self.connection()
        version = (self._conn_target, conn.execute("PRAGMA data_version").fetchone()[0])
        if self._df[0] != version:
            self._df = (version, {})
        return conn, self._df[1]

    def unknown_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` that no chunk of the index contains (compared as the keyword index stores them)."""
        if not words:
            return []
        conn, df = self._df_cache()
        return search.unknown_words(conn, words, df)

    def expansion_terms(self, bodies: Sequence[str], query: str, terms: int) -> list[str]:
        """Stems the best memories share and the query lacks (see :func:`search.expansion_terms`)."""
        conn, df = self._df_cache()
        return search.expansion_terms(conn, bodies, query, terms, df)

    def search_feedback(self, bodies: Sequence[str], query: str, kinds: Sequence[str], terms: int,
                        limit: int) -> list[tuple[int, float]]:
        """Pseudo-relevance feedback: the stems ``bodies`` share and the query lacks (:meth:`expansion_terms`),
        searched as one keyword query: from the postings in a warm process, else each stem by a word of the bodies
        that FTS5 reads as that stem (:func:`search.spelled_terms`)."""
        conn, df = self._df_cache()
        spellings: dict[str, str] = {}
        stems = search.expansion_terms(conn, bodies, query, terms, df, spellings)
        if not stems:
            return []
        postings = self._postings()
        if postings is not None:
            return postings.top(stems, kinds, limit)
        return search.match(conn, search.spelled_terms(stems, spellings), kinds, limit)

    # -- calibration (see memvault.core.calibration) ------------------------------------------------------
    def meta_get(self, key: str) -> str | None:
        """A value kept in the index beside the model identity (derived data: it goes with the index)."""
        row = self.connection().execute(search.META_GET_SQL, (key,)).fetchone()
        return row[0] if row else None

    def meta_set(self, key: str, value: str) -> None:
        conn = self.connection()
        with transaction(conn):
            conn.execute(search.META_SET_SQL, (key, value))

    def sample_chunks(self, kind: str, n: int) -> list[tuple[str, str]]:
        """("kind:id", text) of ``n`` embedded chunks of ``kind``, the same for the same vault (by text hash)."""
        return search.sample_chunks(self.connection(), kind, n)

    def doc_vectors(self, rowid: int) -> list[Any]:
        """The stored vectors (float32 unit vectors, an int8 row ÷ its length) of the chunks of ``rowid``'s doc."""
        return self.docs_vectors([rowid]).get(rowid, [])

    def docs_vectors(self, rowids: Sequence[int]) -> dict[int, list[Any]]:
        """:meth:`doc_vectors` of many chunks, in one statement: chunk rowid -> its doc's vectors."""
        found = search.docs_vectors(self.connection(), rowids)
        rows = iter(quantize.decode_rows(self._format or self.vector_type, [b for bs in found.values() for b in bs]))
        return {r: [next(rows) for _ in bs] for r, bs in found.items()}

    def last_chunk_id(self) -> int:
        """The newest chunk's rowid (grows as the vault grows)."""
        return search.last_chunk_id(self.connection())

    def episode_neighbours(self, docs: dict[int, dict[str, Any]]) -> dict[int, list[int]]:
        """For the raw episodes among ``docs`` (chunk rowid -> fields), the turns just before and after each."""
        from .documents import NEIGHBOUR_GAP

        return search.episode_neighbours(self.connection(), docs, NEIGHBOUR_GAP)

    def runbook_steps(self, docs: dict[int, dict[str, Any]]) -> dict[int, tuple[str, str]]:
        """Every step (a chunk numbered below 0: a vector only) of the runbooks among ``docs``: rowid -> (kind, id)."""
        return search.runbook_steps(self.connection(), docs)

    def runs_of(self, names: Sequence[str], per_name: int = 3) -> dict[str, list[dict[str, Any]]]:
        """The last runs (procedure_run episodes) of each procedure, newest first."""
        return search.runs_of(self.connection(), names, per_name)

    def procedure_docs(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """name -> the fields of that procedure's doc."""
        return search.docs_by_id(self.connection(), "procedure", names)

    def episodes_between(self, since: Any, until: Any, limit: int) -> list[dict[str, Any]]:
        """Episodes created in [since, until) (datetimes, None for open: "" and "~" sort around every time)."""
        low = index_time(since) if since is not None else ""
        high = index_time(until) if until is not None else "~"
        return search.episodes_between(self.connection(), low, high, limit)

    # -- maintenance -------------------------------------------------------------------------------------
    def scrub(self) -> None:
        """After a purge: no generation left that ``index.db`` does not point at (a ``reindex --full`` killed
        part-way leaves one, -wal and -shm with it, holding the text as it was), then merge the keyword index
        (deleted terms leave its segments) and truncate the WAL, so removed text is gone from the file and not only
        unlinked (``secure_delete`` zeroes freed pages). What the relevance scale measured on the vault's text (its
        pieces, their vectors and their memories' ids, :mod:`memvault.core.calibration`) goes too: the next recall
        measures it again. A rebuild running meanwhile is waited for."""
        if not self.dir.is_dir():
            return
        with locked(self.dir / "locks" / "rebuild.lock"):
            self._remove_stale_generations()
        if not self.exists():
            return
        conn = self.connection()
        with transaction(conn):  # the relevance scale keeps pieces of the vault's text: measured again when asked
            conn.execute(MEASURED_SQL)
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
        if conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # busy: the log keeps what it held
            raise SearchIndexError(f"{self._conn_target}: another process is reading the index, so its "
                                   "write-ahead log (which may hold the removed text) could not be emptied")

    def scan(self) -> dict[str, tuple[str, int, int, int]]:
        return scan(self.sources)

    def sample_size(self, rels: Sequence[str], identity: ModelIdentity | None) -> tuple[int, int, int]:
        """(bytes of an empty index, bytes of an index of only the files ``rels``, its chunks): built for real in
        a temporary directory (keyword rows only: vectors are counted apart), so an estimate follows the schema
        as it is rather than constants about it."""
        import dataclasses

        sources = dataclasses.replace(self.sources, keep=None)  # never a team overlay's set of paths
        with temp_dir("memvault-estimate-") as tmp:
            empty = Index(Path(tmp) / "empty", sources)
            empty._create(identity)
            empty_bytes = empty.stats()["used_bytes"]
            empty.close()
            sample = Index(Path(tmp) / "sample", sources)
            sample._create(identity)
            sample.sync([self.sources.root / rel for rel in rels])
            stats = sample.stats()
            sample.close()
        return empty_bytes, stats["used_bytes"], stats["chunks"]

    def stats(self) -> dict[str, Any]:
        target = self.current_target()
        if target is None:
            return {"exists": False, "vector_width": 1 if self.vector_type == "int8" else 4}
        conn = self.connection()
        return summary(conn, target, self.identity(conn), self._format or self.vector_type)
