"""Vectors in the shared index: giving pending chunks vectors, moving a vault to another model, and searching them.

One ``vec_<model>`` table per model (``chunk_id``, ``kind``, ``halfvec(d)``, HNSW m=24, ef_construction=128).
``halfvec`` (2 bytes a dimension; ``vector``, 4, with ``[index] vectors = "float32"``) is pgvector's compact type:
pgvector has no 8-bit one. Every statement is written for both: a ``vector`` parameter is cast to ``halfvec``
implicitly, and a vector read back is cast to ``vector`` (float32). Vectors:
cosine distance on HNSW with ``hnsw.ef_search`` = ``EF_SEARCH`` (recall@10 0.966 at 1M rows, 11.6 ms p50 through
this package on 2 loaded cores: docs/scaling.md) and ``hnsw.iterative_scan = relaxed_order`` (a kind filter keeps
its recall), set once per connection; results are re-sorted because relaxed order may return near-ties out of order.
The graph of a new model is built once its table is loaded (CREATE INDEX CONCURRENTLY: 10 minutes at 1M rows on 2
cores), not row by row.

Slow work never holds the vault's write lock: texts are embedded outside it, each batch of vectors is written in its
own short locked transaction. One host at a time embeds a vault (session lock 28024, others return at once as the
SQLite index does) and one builds a new model (session lock 28023). A model switch builds the new vector table
beside the live one (cache first), then flips ``vaults.live_model`` in one locked transaction after checking that
every chunk has a vector; recall uses the old table until then. Session advisory locks need a session: do not put a
transaction-mode pooler (pgbouncer) between writers and the server; readers are fine behind one.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ...rules.errors import SearchIndexError
from ..documents import KINDS, Doc, cut
from ..update import EMBED_GROUP, SyncReport, mean_vector, vector_blob, with_context
from .cache import EmbeddingCache, cache_hits, cache_store, register_model, text_sha256, vector_key
from .connection import LOCK_EMBED, LOCK_SWITCH, LOCK_WRITE, SCHEMA, Vector, psycopg_module
from .tables import BUILD_MEMORY, HNSW_EF_CONSTRUCTION, HNSW_M, VaultState, pending_count, vec, vec_tables, vsql
from .writes import delete_chunks, insert_chunks

if TYPE_CHECKING:
    from ...models.embeddings import ModelIdentity

#: Chunks fetched per batch by embed() and a model switch (texts are embedded EMBED_GROUP at a time).
FETCH_BATCH = 2_048
#: How long dropping a retired vector table may wait for readers before it is left for later.
DROP_LOCK_TIMEOUT = "5s"


def cosine_ops(conn: Any, table: str) -> str:
    """The HNSW operator class of a vector table's column: its type's cosine operators."""
    row = conn.execute("SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                       "AND attname = 'embedding'", (table,)).fetchone()
    return "halfvec_cosine_ops" if row is not None and row[0] == "halfvec" else "vector_cosine_ops"


def rows_of(matrix: Any) -> list[bytes]:
    """An embedder's (n, d) result as float32 little-endian bytes per row."""
    import numpy as np

    data = np.ascontiguousarray(np.asarray(matrix, dtype="<f4"))
    return [row.tobytes() for row in data]


def docs_vectors_sql(vault_id: int, model_id: int) -> Any:
    """Every chunk of each given chunk's doc, with its vector of the model, in chunk order (one parameter: the chunk
    ids): the chunks' primary key, then their (doc_id, chunk) index, then the vector table's key."""
    return vsql(vault_id, "SELECT c1.chunk_id, v.embedding::vector FROM {chunks} c1 JOIN {chunks} c ON c.doc_id = "
                "c1.doc_id JOIN {vt} v ON v.chunk_id = c.chunk_id WHERE c1.chunk_id = ANY(%s) ORDER BY c1.chunk_id, "
                "c.chunk", vt=vec(vault_id, model_id))


class ModelVectors:
    """The vectors of one vault: phase 2 (embed pending chunks), model switches, and vector search. Every method
    takes the connection its caller (the shared index) opened, inside that caller's error handling.

    ``state(conn, fresh)`` reads the vault's row (from the caller's cache unless ``fresh``), ``forget()`` drops that
    cache. Without a ``cache`` of another database, vectors move server-side (cache table -> vector table)."""

    def __init__(self, vault: str, url: str, state: Callable[[Any, bool], VaultState], forget: Callable[[], None],
                 cache: EmbeddingCache | None, *, vectors: str = "int8") -> None:
        self.vault = vault
        #: The column type of a model's new table (an existing table keeps its own).
        self.column = "vector" if vectors == "float32" else "halfvec"
        self._state = state
        self._forget = forget
        self.cache = cache
        self._local_cache = cache is None or cache.url == url
        #: Counters since this object was made: texts embedded by a model, vectors taken from the cache.
        self.texts_embedded = 0
        self.cache_hits = 0

    def embed(self, conn: Any, embedder: Any, *, limit: int | None = None,
              progress: Callable[[int, int], None] | None = None, report: SyncReport | None = None,
              wait: bool = False) -> SyncReport:
        """Phase 2: give pending chunks (at most ``limit``) vectors of the live model, in batches, each its own
        short transaction: vectors from the cache first, the rest embedded (and cached). With no live model yet,
        the embedder's becomes the live model. An embedder of another model is refused with a warning (see
        :meth:`switch_model`). When another host is embedding this vault, returns at once unless ``wait``."""
        report = report or SyncReport()
        state = self._state(conn, True)
        if state.live_identity is None:
            state = self._adopt(conn, state, embedder.identity)
        identity = state.live_identity
        assert identity is not None and state.live_model is not None
        if not embedder.identity.same_vectors(identity):
            report.warnings.append(f"the shared index of {self.vault!r} holds vectors of {identity.name}; "
                                   f"{embedder.identity.name} is configured: switch the shared index's model "
                                   "(memvault reindex) or configure the same model")
            report.chunks_pending = pending_count(conn, state.vault_id)
            return report
        v = state.vault_id
        with self._session_lock(conn, LOCK_EMBED, v, wait=wait) as mine:
            if not mine:
                report.chunks_pending = pending_count(conn, v)
                return report
            self._recut_words(conn, v, embedder)
            total = int(conn.execute(vsql(v, "SELECT count(*) FROM {pending}")).fetchone()[0])
            goal = total if limit is None else min(limit, total)
            source = vsql(v, "FROM {pending} p JOIN {chunks} c ON c.chunk_id = p.chunk_id "
                             "JOIN {docs} d ON d.doc_id = c.doc_id WHERE p.chunk_id > %s")
            ok = self._fill(conn, v, state.live_model, identity, embedder, source, goal, progress, report,
                            live=True)
            if ok and goal == total:
                # The graph is built once the table is loaded (in bulk, much faster than row by row), and
                # never by a call capped by ``limit`` (recall's): a build at 1M rows takes many minutes.
                self._ensure_hnsw(conn, vec(v, state.live_model), v, state.live_model)
        report.model_loaded = True
        report.chunks_pending = pending_count(conn, v)
        return report

    def _adopt(self, conn: Any, state: VaultState, identity: ModelIdentity) -> VaultState:
        """Make ``identity`` the live model of a vault that has none (its vector table created, without HNSW: the
        first embed() loads in bulk and builds the graph once at the end)."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, state.vault_id))
            current = self._state(conn, True)
            if current.live_identity is None:
                model_id = register_model(conn, identity)
                self._create_vec_table(conn, current.vault_id, model_id, identity)
                conn.execute("UPDATE memvault.vaults SET live_model = %s, live_identity = %s, updated = now() "
                             "WHERE vault_id = %s", (model_id, json.dumps(identity.to_dict()), current.vault_id))
        return self._state(conn, True)

    def _create_vec_table(self, conn: Any, v: int, model_id: int, identity: ModelIdentity) -> None:
        from psycopg import sql

        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (chunk_id bigint PRIMARY KEY, kind text NOT NULL, "
                             "embedding {}({}) NOT NULL)").format(vec(v, model_id), sql.SQL(self.column),
                                                                   sql.Literal(int(identity.dims))))

    def _ensure_hnsw(self, conn: Any, table: Any, v: int, model_id: int) -> None:
        """Build the HNSW index of a vector table when it has none (CONCURRENTLY: writers are not blocked)."""
        from psycopg import sql

        name = f"v{v}_vec_{model_id}_hnsw"
        row = conn.execute("SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
                           (f"{SCHEMA}.{name}",)).fetchone()
        if row is not None and row[0]:
            return
        if row is not None:  # a build that was interrupted leaves an invalid index behind
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(SCHEMA, name)))
        conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(BUILD_MEMORY)))
        try:
            conn.execute(sql.SQL("CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON {} USING hnsw "
                                 "(embedding {}) WITH (m = {}, ef_construction = {})").format(
                sql.Identifier(name), table, sql.SQL(cosine_ops(conn, f"{SCHEMA}.v{v}_vec_{model_id}")),
                sql.Literal(HNSW_M), sql.Literal(HNSW_EF_CONSTRUCTION)))
        finally:
            conn.execute("RESET maintenance_work_mem")

    @contextlib.contextmanager
    def _session_lock(self, conn: Any, cls: int, v: int, *, wait: bool) -> Iterator[bool]:
        """A session advisory lock, tried (or polled when ``wait``: a blocked lock call would hold a snapshot that a
        concurrent CREATE INDEX CONCURRENTLY waits for, a deadlock)."""
        while True:
            got = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (cls, v)).fetchone()[0]
            if got or not wait:
                break
            time.sleep(0.2)
        try:
            yield bool(got)
        finally:
            if got and not conn.closed and not conn.broken:
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", (cls, v))

    def _fill(self, conn: Any, v: int, model_id: int, identity: ModelIdentity, embedder: Any, source: Any,
              goal: int, progress: Callable[[int, int], None] | None, report: SyncReport, *, live: bool) -> bool:
        """Give vectors to the chunks ``source`` yields (``FROM ... WHERE c.chunk_id > %s``, with ``c`` the chunk
        and ``d`` its doc), at most ``goal``, in batches; False when the model changed under us (a switch
        flipped, or this build was cancelled)."""
        table = vec(v, model_id)
        done, after, restarted = 0, 0, False
        while done < goal:
            size = min(FETCH_BATCH, goal - done)
            rows = conn.execute(vsql(v, "SELECT c.chunk_id, c.hash, c.text, d.context {source} "
                                        "ORDER BY c.chunk_id LIMIT %s", source=source), (after, size)).fetchall()
            if not rows:
                if after == 0 or restarted:
                    break
                # Chunk ids are handed out before commit: one committed late may sit behind where we are.
                after, restarted = 0, True
                continue
            after = rows[-1][0]
            batch = [(int(r[0]), bytes(r[1]), r[2], r[3]) for r in rows]
            vectors = self._prepare(conn, model_id, identity, embedder, batch, report)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
                row = conn.execute("SELECT live_model, next_model FROM memvault.vaults WHERE vault_id = %s",
                                   (v,)).fetchone()
                if row is None or row[0 if live else 1] != model_id:
                    return False
                self._write_vectors(conn, v, model_id, table, batch, vectors)
                if live:
                    conn.execute(vsql(v, "DELETE FROM {pending} p USING {vec} x WHERE p.chunk_id = "
                                         "ANY(%s::bigint[]) AND x.chunk_id = p.chunk_id", vec=table),
                                 ([b[0] for b in batch],))
            done += len(rows)
            if progress is not None:
                progress(done, goal)
        return True

    def _prepare(self, conn: Any, model_id: int, identity: ModelIdentity, embedder: Any,
                 batch: list[tuple[int, bytes, str, str | None]], report: SyncReport) -> dict[bytes, bytes] | None:
        """Make sure the cache holds every text a batch needs (a chunk's text, and for a turn of a conversation
        also the text with its previous turn): the ones it lacks are embedded here, once each, shortest first.
        With the cache in this database returns None (vectors then go cache -> table inside PostgreSQL); with
        another cache returns text hash -> vector."""
        texts: dict[bytes, str] = {}
        for _id, h, text, context in batch:
            texts[h] = text
            if context:
                full = with_context(text, context)
                texts[text_sha256(full)] = full
        if self._local_cache:
            have = cache_hits(conn, model_id, list(texts), identity.dims)
            misses = {h: t for h, t in texts.items() if h not in have}
            report.chunks_from_cache += len(texts) - len(misses)
            self.cache_hits += len(texts) - len(misses)
            self._embed_into(identity, embedder, misses, lambda items: cache_store(conn, model_id, items), report)
            return None
        assert self.cache is not None
        found = self.cache.get_hashes(identity, list(texts))
        misses = {h: t for h, t in texts.items() if h not in found}
        report.chunks_from_cache += len(texts) - len(misses)
        self.cache_hits += len(texts) - len(misses)
        fresh: dict[bytes, bytes] = {}

        def store(items: list[tuple[bytes, bytes]]) -> None:
            assert self.cache is not None
            fresh.update(items)
            try:
                self.cache.put_hashes(identity, items)
            except SearchIndexError as exc:  # the cache is a saving, never a reason to fail
                if f"embedding cache not updated ({exc})" not in report.warnings:
                    report.warnings.append(f"embedding cache not updated ({exc})")

        self._embed_into(identity, embedder, misses, store, report)
        return {**found, **fresh}

    def _embed_into(self, identity: ModelIdentity, embedder: Any, misses: dict[bytes, str],
                    store: Callable[[list[tuple[bytes, bytes]]], None], report: SyncReport) -> None:
        items = sorted(misses.items(), key=lambda kv: len(kv[1]))  # similar lengths pad less in one encode call
        for start in range(0, len(items), EMBED_GROUP):
            group = items[start:start + EMBED_GROUP]
            blobs = rows_of(embedder.embed_documents([t for _, t in group]))
            if len(blobs) != len(group) or any(len(b) != 4 * int(identity.dims) for b in blobs):
                raise SearchIndexError(f"{identity.name} returned {len(blobs)} vectors for {len(group)} texts, "
                                       f"or vectors without {identity.dims} dimensions")
            self.texts_embedded += len(group)
            report.chunks_embedded += len(group)
            store([(h, b) for (h, _), b in zip(group, blobs)])

    def _write_vectors(self, conn: Any, v: int, model_id: int, table: Any,
                       batch: list[tuple[int, bytes, str, str | None]], vectors: dict[bytes, bytes] | None) -> None:
        """Vectors of a prepared batch into ``table``, only for chunks that still exist (the caller holds the write
        lock). A turn with context gets the normalised mean of its two vectors, as in the SQLite index."""
        ids = [b[0] for b in batch]
        contexts = [text_sha256(with_context(text, ctx)) if ctx else None for _i, _h, text, ctx in batch]
        if vectors is None:
            # Each row is looked up by its keys (LIMIT 1 keeps the subqueries from being flattened): with the
            # cache's statistics stale after a bulk put, a join here was planned as a scan of every chunk.
            conn.execute(vsql(v, """
                INSERT INTO {vec} (chunk_id, kind, embedding)
                SELECT c.chunk_id, c.kind,
                       CASE WHEN u.ctx IS NULL THEN e1.embedding ELSE l2_normalize(e1.embedding + e2.embedding) END
                FROM unnest(%s::bigint[], %s::bytea[]) AS u(id, ctx)
                CROSS JOIN LATERAL (SELECT chunk_id, kind, hash FROM {chunks} WHERE chunk_id = u.id LIMIT 1) c
                CROSS JOIN LATERAL (SELECT embedding FROM memvault.embedding_cache
                                    WHERE model_id = %s AND text_hash = c.hash LIMIT 1) e1
                LEFT JOIN LATERAL (SELECT embedding FROM memvault.embedding_cache
                                   WHERE model_id = %s AND text_hash = u.ctx LIMIT 1) e2 ON true
                WHERE u.ctx IS NULL OR e2.embedding IS NOT NULL
                ON CONFLICT (chunk_id) DO NOTHING""", vec=table), (ids, contexts, model_id, model_id))
            return
        blobs = [vectors[h] if ctx is None else mean_vector(vectors[h], vectors[ctx])
                 for (_i, h, _t, _c), ctx in zip(batch, contexts)]
        conn.execute(vsql(v, "INSERT INTO {vec} (chunk_id, kind, embedding) SELECT c.chunk_id, c.kind, u.e "
                             "FROM unnest(%s::bigint[], %b::vector[]) AS u(id, e) CROSS JOIN LATERAL "
                             "(SELECT chunk_id, kind FROM {chunks} WHERE chunk_id = u.id LIMIT 1) c "
                             "ON CONFLICT (chunk_id) DO NOTHING", vec=table),
                     (ids, [Vector(b) for b in blobs]))

    def _recut_words(self, conn: Any, v: int, splitter: Any, batch: int = 256) -> int:
        """Re-cut docs cut by words (applied while no model was at hand) with the model's tokenizer; chunks whose
        text does not change keep their rows and vectors. Returns the docs re-cut."""
        done, after = 0, 0
        while True:
            rows = conn.execute(vsql(v, "SELECT doc_id, hash, header, body, kind FROM {docs} "
                                        "WHERE cut = 'words' AND doc_id > %s ORDER BY doc_id LIMIT %s"),
                                (after, batch)).fetchall()
            if not rows:
                return done
            after = rows[-1][0]
            docs = [Doc(kind=r[4], item_id="", path="", header=r[2], body=r[3], importance=0, confidence=0,
                         source=None, created=None, updated=None) for r in rows]
            cuts = cut(docs, splitter, None)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
                state = self._state(conn, True)
                current = dict(conn.execute(vsql(v, "SELECT doc_id, hash FROM {docs} "
                                                    "WHERE doc_id = ANY(%s::bigint[])"),
                                            ([r[0] for r in rows],)).fetchall())
                old: dict[int, list[tuple[int, str]]] = {}
                for doc_id, chunk, text in conn.execute(vsql(v, "SELECT doc_id, chunk, text FROM {chunks} WHERE "
                                                                "doc_id = ANY(%s::bigint[]) ORDER BY doc_id, chunk"),
                                                        ([r[0] for r in rows],)):
                    old.setdefault(doc_id, []).append((chunk, text))
                redo, fresh = [], []
                for (doc_id, h, _header, _body, kind), (texts, _how) in zip(rows, cuts):
                    if current.get(doc_id) != h:
                        continue  # changed meanwhile: whoever wrote it cut its new text
                    if old.get(doc_id, []) != sorted(texts):
                        redo.append(doc_id)
                        fresh += [(doc_id, j, kind, t) for j, t in texts]
                dn, dw = delete_chunks(conn, v, redo, vec_tables(state))
                n_in, w_in = insert_chunks(conn, v, fresh)
                conn.execute(vsql(v, "UPDATE {docs} d SET cut = 'model' FROM unnest(%s::bigint[], %s::text[]) "
                                     "AS u(doc_id, hash) WHERE d.doc_id = u.doc_id AND d.hash = u.hash"),
                             ([r[0] for r in rows], [r[1] for r in rows]))
                conn.execute("UPDATE memvault.vaults SET nchunks = nchunks + %s, nwords = nwords + %s "
                             "WHERE vault_id = %s", (n_in - dn, w_in - dw, v))
            done += len(rows)

    def switch_model(self, conn: Any, embedder: Any, *, progress: Callable[[int, int], None] | None = None,
                     wait: bool = False) -> SyncReport:
        """Move the vault to another model: build its vector table beside the live one (cache first, the rest
        embedded), then flip the live model in one locked transaction once every chunk has a vector, and drop
        the old table. Recall uses the old model until the flip. When another host is already switching this
        vault, returns with a warning, or (``wait``) waits for it and then switches if still needed.

        Chunks keep the cut they were given for the old model; a model with a smaller window than that embeds
        the head of a longer chunk (a warning says so: rebuild with :meth:`drop` + apply to re-cut)."""
        report = SyncReport()
        started = time.perf_counter()
        new = embedder.identity
        state = self._state(conn, True)
        if state.live_identity is None:
            return self.embed(conn, embedder, progress=progress, report=report, wait=wait)
        v = state.vault_id
        if new.same_vectors(state.live_identity):
            report.chunks_pending = pending_count(conn, v)
            return report
        if vector_key(new) == vector_key(state.live_identity):
            # Same document vectors (only the query prefix differs): record the identity, re-embed nothing.
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
                conn.execute("UPDATE memvault.vaults SET live_identity = %s, updated = now() WHERE vault_id = %s",
                             (json.dumps(new.to_dict()), v))
            self._forget()
            report.chunks_pending = pending_count(conn, v)
            return report
        with self._session_lock(conn, LOCK_SWITCH, v, wait=wait) as mine:
            if not mine:
                report.warnings.append(f"another host is switching the shared index of {self.vault!r} to a new "
                                       f"model; recall uses {state.live_identity.name} until it is done")
                report.chunks_pending = pending_count(conn, v)
                return report
            state = self._state(conn, True)
            assert state.live_identity is not None
            if new.same_vectors(state.live_identity):  # the host we waited for did it
                report.chunks_pending = pending_count(conn, v)
                return report
            if new.max_tokens < state.live_identity.max_tokens:
                report.warnings.append(f"{new.name} reads {new.max_tokens} tokens, the chunks were cut for "
                                       f"{state.live_identity.max_tokens}: longer chunks are embedded by their "
                                       "head until the vault is re-indexed from scratch")
            self._switch(conn, state, embedder, progress, report)
        report.model_loaded = True
        report.chunks_pending = pending_count(conn, v)
        report.seconds = time.perf_counter() - started
        return report

    def _switch(self, conn: Any, state: VaultState, embedder: Any, progress: Callable[[int, int], None] | None,
                report: SyncReport) -> None:
        from psycopg import sql

        v, new = state.vault_id, embedder.identity
        model_id = register_model(conn, new)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
            current = self._state(conn, True)
            if current.next_model not in (None, model_id):  # an abandoned build of a third model
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(vec(v, current.next_model)))
            self._create_vec_table(conn, v, model_id, new)
            conn.execute("UPDATE memvault.vaults SET next_model = %s WHERE vault_id = %s", (model_id, v))
        table = vec(v, model_id)
        source = vsql(v, "FROM {chunks} c JOIN {docs} d ON d.doc_id = c.doc_id WHERE c.chunk_id > %s "
                         "AND NOT EXISTS (SELECT 1 FROM {vec} x WHERE x.chunk_id = c.chunk_id)", vec=table)
        total = int(conn.execute(vsql(v, "SELECT count(*) FROM {chunks}")).fetchone()[0])
        if not self._fill(conn, v, model_id, new, embedder, source, total, progress, report, live=False):
            report.warnings.append("the model switch was cancelled by another host (the vault was dropped or "
                                   "switched to another model)")
            return
        self._ensure_hnsw(conn, table, v, model_id)
        missing = vsql(v, "SELECT count(*) FROM {chunks} c WHERE NOT EXISTS "
                          "(SELECT 1 FROM {vec} x WHERE x.chunk_id = c.chunk_id)", vec=table)
        for attempt in range(3):
            # Chunks written by other hosts during the build. Each pass does what was missing when it started
            # (writers that never stop must not keep it going); the last attempt embeds the rest under the lock.
            todo = int(conn.execute(missing).fetchone()[0])
            self._fill(conn, v, model_id, new, embedder, source, todo, None, report, live=False)
            if self._flip(conn, v, model_id, new, embedder, report, final=attempt == 2):
                break
        else:  # the final attempt flips unless the build was cancelled (vault dropped, another switch)
            report.warnings.append("the model switch was cancelled by another host (the vault was dropped or "
                                   "switched to another model)")
            return
        old = state.live_model
        assert old is not None
        self._forget()
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        try:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(vec(v, old)))
        except psycopg_module().errors.LockNotAvailable:
            report.warnings.append(f"the old vector table of {self.vault!r} is still being read; it is dropped by "
                                   "the next ensure()")
        finally:
            conn.execute("RESET lock_timeout")

    def _flip(self, conn: Any, v: int, model_id: int, identity: ModelIdentity, embedder: Any, report: SyncReport,
              *, final: bool) -> bool:
        """Make ``model_id`` live if its table has a vector for every chunk (``final``: first embed the few that
        lack one, holding the write lock). False when not complete and not final."""
        table = vec(v, model_id)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
            row = conn.execute("SELECT next_model FROM memvault.vaults WHERE vault_id = %s", (v,)).fetchone()
            if row is None or row[0] != model_id:
                return False
            missing = conn.execute(vsql(v, "SELECT c.chunk_id, c.hash, c.text, d.context FROM {chunks} c "
                                           "JOIN {docs} d ON d.doc_id = c.doc_id WHERE NOT EXISTS "
                                           "(SELECT 1 FROM {vec} x WHERE x.chunk_id = c.chunk_id)", vec=table)
                                   ).fetchall()
            if missing and not final:
                return False
            if missing:
                batch = [(int(r[0]), bytes(r[1]), r[2], r[3]) for r in missing]
                vectors = self._prepare(conn, model_id, identity, embedder, batch, report)
                self._write_vectors(conn, v, model_id, table, batch, vectors)
            conn.execute("UPDATE memvault.vaults SET live_model = %s, live_identity = %s, next_model = NULL, "
                         "updated = now() WHERE vault_id = %s", (model_id, json.dumps(identity.to_dict()), v))
            conn.execute(vsql(v, "DELETE FROM {pending}"))  # complete: nothing waits for the new model
        return True

    def drop_retired(self, conn: Any, state: VaultState) -> None:
        """Drop vector tables of this vault that are neither live nor being built (a flip whose drop timed out,
        a crashed switch); skipped while a switch runs."""
        from psycopg import sql

        v = state.vault_id
        with self._session_lock(conn, LOCK_SWITCH, v, wait=False) as mine:
            if not mine:
                return
            state = self._state(conn, True)
            keep = {f"v{v}_vec_{m}" for m in (state.live_model, state.next_model) if m is not None}
            names = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE %s",
                (SCHEMA, f"v{v}\\_vec\\_%"))]
            for name in names:
                if name in keep:
                    continue
                conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
                try:
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, name)))
                except psycopg_module().errors.LockNotAvailable:
                    pass  # still read: next time
                finally:
                    conn.execute("RESET lock_timeout")

    # -- search -------------------------------------------------------------------------------------------
    def query_vector(self, state: VaultState, vector: Any) -> Any:
        blob = vector_blob(vector)
        identity = state.live_identity
        if identity is not None and len(blob) != 4 * int(identity.dims):
            raise SearchIndexError(f"the shared index of {self.vault!r} holds {identity.dims}-dimension vectors of "
                                   f"{identity.name}; the query vector has {len(blob) // 4}")
        return Vector(blob)

    def vector_sql(self, state: VaultState, kinds: Sequence[str], limit: int) -> tuple[Any, bool] | None:
        from psycopg import sql

        if state.live_model is None or limit <= 0 or not any(k in KINDS for k in kinds):
            return None
        table = vec(state.vault_id, state.live_model)
        filtered = not set(KINDS) <= set(kinds)
        # LIMIT as a literal: a generic plan of a prepared statement would guess at a parameter and might not
        # pick the HNSW index.
        query = sql.SQL("SELECT chunk_id, embedding <=> %b AS d FROM {} {} ORDER BY d LIMIT {}").format(
            table, sql.SQL("WHERE kind = ANY(%s::text[])") if filtered else sql.SQL(""), sql.Literal(int(limit)))
        return query, filtered

    def search_vectors(self, conn: Any, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first, from the live model's HNSW graph (ef_search = EF_SEARCH;
        a kind filter runs inside the index scan, iterative scans refill it)."""
        psycopg = psycopg_module()
        for attempt in (0, 1):
            state = self._state(conn, attempt == 1)
            built = self.vector_sql(state, kinds, limit)
            if built is None:
                return []
            query, filtered = built
            qvec = self.query_vector(state, vector)
            params = (qvec, [k for k in kinds if k in KINDS]) if filtered else (qvec,)
            try:
                rows = conn.execute(query, params).fetchall()
            except psycopg.errors.UndefinedTable:
                if attempt == 0:  # the model switched and the old table is gone: read the vault again
                    self._forget()
                    continue
                raise
            rows.sort(key=lambda r: (r[1], r[0]))  # relaxed order may return near-ties out of order
            return [(int(r[0]), 1.0 - float(r[1])) for r in rows]
        return []  # pragma: no cover

    def docs_vectors(self, conn: Any, chunk_ids: Sequence[int]) -> dict[int, list[bytes]]:
        """The live model's vectors (float32 bytes) of every chunk of each given chunk's doc, in chunk order, in
        one statement: chunk id -> its doc's vectors (recall's hub test, the runbooks' feedback, generality)."""
        state = self._state(conn, False)
        if state.live_model is None or not chunk_ids:
            return {}
        rows = conn.execute(docs_vectors_sql(state.vault_id, state.live_model), ([int(i) for i in chunk_ids],),
                            binary=True).fetchall()
        out: dict[int, list[bytes]] = {}
        for chunk_id, embedding in rows:
            out.setdefault(int(chunk_id), []).append(bytes(embedding))
        return out

    def similarities(self, conn: Any, vector: Any, ids: Sequence[int]) -> dict[int, float]:
        """Cosine similarity of ``vector`` to the live vectors of the given chunks (those that have one)."""
        from psycopg import sql

        if not ids:
            return {}
        state = self._state(conn, False)
        if state.live_model is None:
            return {}
        rows = conn.execute(sql.SQL("SELECT chunk_id, 1 - (embedding <=> %b) FROM {} "
                                    "WHERE chunk_id = ANY(%s::bigint[])")
                            .format(vec(state.vault_id, state.live_model)),
                            (self.query_vector(state, vector), [int(i) for i in ids])).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}
