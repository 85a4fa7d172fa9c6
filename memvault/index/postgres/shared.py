"""The index of one vault in PostgreSQL: what the team has pushed, searched by every host.

:class:`SharedIndex` is a facade: it owns the connection, the vault's row and the error handling, and hands each
piece of work to the module of its noun — :mod:`.writes` (phase 1: text), :mod:`.vectors` (phase 2, model
switches, vector search), :mod:`.keywords` (BM25), :mod:`.reads` (the fields behind chunk ids). It implements
:class:`memvault.index.protocol.SearchIndex`, as the SQLite index does.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...rules.errors import InvalidValue, SearchIndexError
from ..documents import KINDS, Doc
from ..search import runbook_keys
from ..update import SyncReport
from .cache import EmbeddingCache
from .keywords import BUILDERS, coverage, feedback, read_terms, unknown_words
from .keywords import run as run_keywords
from .reads import (chunk_docs, episode_neighbours, episodes_between, last_chunk_id, procedure_docs, runbook_steps,
                    runs_of, sample_chunks)
from .connection import LOCK_WRITE, SCHEMA, Connected, psycopg_module, setup, where
from .listings import SharedListings
from .migrations import migrate_global, migrate_vault, refuse_newer
from .tables import VaultState, pending_count, read_state, vec, vsql
from .vectors import ModelVectors
from .writes import ANY_HEAD
from .writes import apply as apply_text

if TYPE_CHECKING:
    from ...models.embeddings import ModelIdentity

#: Seconds a SharedIndex trusts its cached view of the vault row (live model, head) before reading it again.
STATE_TTL = 2.0


class SharedIndex(SharedListings, Connected):
    """The index of one vault in PostgreSQL: what the team has pushed, searched by every host.

    One connection per object, opened on first use and reopened after it breaks; the methods of one object are
    serialised by a lock (share it between threads if you must, but a search waits for an embed batch). Every
    error is a :class:`SearchIndexError` with a one-line message. Call :meth:`ensure` once before writing (it
    creates or upgrades the schema and registers the vault; it is one query when nothing is due).
    """

    def __init__(self, url: str, vault: str, *, cache: EmbeddingCache | None = None, vectors: str = "int8") -> None:
        if not isinstance(vault, str) or not vault.strip() or len(vault) > 200:
            raise InvalidValue("vault", f"a shared index needs a name of 1 to 200 characters, not {vault!r}")
        super().__init__(url)
        self.vault = vault
        self.what = f"shared index {vault!r}"
        # Without a cache of its own the index uses the one in its own database: vectors then move server-side
        # (cache -> vector table) without a round trip through this process.
        self.cache = cache
        self._vector = False
        self._state_cache: VaultState | None = None
        #: ``[index] vectors``: a new model's table holds halfvec (int8) or vector (float32); see .vectors.
        self.vectors = ModelVectors(vault, url, self._state, self._forget, cache, vectors=vectors)

    # -- connection, errors, state ------------------------------------------------------------------------
    def _on_connect(self, conn: Any) -> None:
        self._vector = conn.adapters.types.get("vector") is not None  # migrations are ensure()'s

    def _forget(self) -> None:
        self._state_cache = None

    def __enter__(self) -> SharedIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def texts_embedded(self) -> int:
        """Texts this object had a model embed."""
        return self.vectors.texts_embedded

    @property
    def cache_hits(self) -> int:
        """Vectors this object took from the embedding cache instead."""
        return self.vectors.cache_hits

    def _read_state(self, conn: Any) -> VaultState | None:
        """The vault row; SchemaTooNew when a newer memvault has migrated the shared index since this process
        opened it (a long-running one reads the row again every STATE_TTL)."""
        state = read_state(conn, self.vault)
        if state is not None:
            refuse_newer(state.migrations, self.url)
        return state

    def _state(self, conn: Any, fresh: bool = False) -> VaultState:
        state = self._state_cache
        if fresh or state is None or time.monotonic() - state.read_at > STATE_TTL:
            state = self._read_state(conn)
            self._state_cache = state
        if state is None:
            raise SearchIndexError(f"shared index at {where(self.url)} has no vault named {self.vault!r}; "
                                   "run 'memvault reindex' to push it")
        return state

    # -- schema -------------------------------------------------------------------------------------------
    def ensure(self) -> None:
        """Create or upgrade the schema (global, then this vault's tables) and register the vault. Migrations are
        named, ordered and recorded, and applied under an advisory lock: two hosts starting at once do not race."""
        with self._errors("migrations") as conn:
            migrate_global(conn, self.url)
            if not self._vector:
                self._vector = setup(conn)
            conn.execute("INSERT INTO memvault.vaults(name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (self.vault,))
            state = self._state(conn, fresh=True)
            migrate_vault(conn, state.vault_id)
            self.vectors.drop_retired(conn, state)

    def exists(self) -> bool:
        """Whether this vault is in the shared index (reads the vault row: one query, or none when it was read
        less than :data:`STATE_TTL` ago and was there: recall asks several times per question)."""
        with self._errors("exists") as conn:
            state = self._state_cache
            if state is not None and time.monotonic() - state.read_at <= STATE_TTL:
                return True
            self._state_cache = self._read_state(conn)
            return self._state_cache is not None

    def identity(self) -> ModelIdentity | None:
        """The live model of this vault (None: no vectors yet)."""
        with self._errors("identity") as conn:
            return self._state(conn).live_identity

    def head(self, *, fresh: bool = True) -> str | None:
        """The git commit the index reflects (set by :meth:`apply`); ``fresh=False`` accepts the vault row as
        read less than :data:`STATE_TTL` ago (recall asks on every question)."""
        with self._errors("head") as conn:
            return self._state(conn, fresh=fresh).head

    def files(self) -> dict[str, str]:
        """Vault-relative path -> the git blob id the index reflects."""
        with self._errors("files") as conn:
            v = self._state(conn).vault_id
            return {r[0]: r[1] for r in conn.execute(vsql(v, "SELECT path, blob FROM {files}"))}

    # -- phase 1 and 2 ------------------------------------------------------------------------------------
    def apply(self, docs: Sequence[Doc], paths: dict[str, str | None], *, head: str | None,
              splitter: Any = None, max_tokens: int | None = None, expect: Any = ANY_HEAD) -> SyncReport:
        """Phase 1 for a set of files, in one transaction under the vault's write lock (see
        :func:`memvault.index.postgres.writes.apply`; ``expect``: the commit ``paths`` were diffed against, else
        :class:`~memvault.index.postgres.writes.HeadMoved` and nothing written)."""
        with self._errors("apply") as conn:
            try:
                return apply_text(conn, lambda: self._state(conn, fresh=True), docs, paths, head=head,
                                    splitter=splitter, max_tokens=max_tokens, expect=expect)
            finally:
                self._state_cache = None

    def pending(self) -> int:
        """Chunks without a vector of the live model, plus docs still cut by words (each at least one chunk)."""
        with self._errors("pending") as conn:
            return pending_count(conn, self._state(conn).vault_id)

    def embed(self, embedder: Any, *, limit: int | None = None, progress: Callable[[int, int], None] | None = None,
              report: SyncReport | None = None, wait: bool = False) -> SyncReport:
        """Phase 2 (see :meth:`memvault.index.postgres.vectors.ModelVectors.embed`)."""
        with self._errors("embed") as conn:
            return self.vectors.embed(conn, embedder, limit=limit, progress=progress, report=report, wait=wait)

    def switch_model(self, embedder: Any, *, progress: Callable[[int, int], None] | None = None,
                     wait: bool = False) -> SyncReport:
        """Move the vault to another model beside the live one, then flip (see
        :meth:`memvault.index.postgres.vectors.ModelVectors.switch_model`)."""
        with self._errors("switch model") as conn:
            return self.vectors.switch_model(conn, embedder, progress=progress, wait=wait)

    # -- search -------------------------------------------------------------------------------------------
    def search_keywords(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk id, BM25) best first; any query term may match, rare terms weigh more, common terms only score
        what rarer ones found (the common-word rule: :mod:`memvault.index.postgres.keywords`)."""
        with self._errors("keyword search") as conn:
            rows = run_keywords(conn, self._state(conn).vault_id, "search_keywords", query, kinds, limit)
        return [(int(r[0]), float(r[1])) for r in rows]

    def search_phrases(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk id, BM25-like score) of chunks holding two consecutive query words in order (stop words between
        them keep their distance): the proximity signal that tells the page with the exact line."""
        with self._errors("phrase search") as conn:
            rows = run_keywords(conn, self._state(conn).vault_id, "search_phrases", query, kinds, limit)
        return [(int(r[0]), float(r[1])) for r in rows]

    def search_exact(self, query: str, kinds: Sequence[str], limit: int) -> list[int]:
        """Chunks that contain the whole query word for word (three words or more), shortest first. Stop words
        are not indexed: they only keep their places (a query of stop words alone finds nothing)."""
        with self._errors("exact search") as conn:
            rows = run_keywords(conn, self._state(conn).vault_id, "search_exact", query, kinds, limit)
        return [int(r[0]) for r in rows]

    def vector_search(self, kinds: Sequence[str], limit: int) -> None:
        """None: the HNSW search runs on this object's one connection, on the caller's thread."""
        return None

    def search_vectors(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first, from the live model's HNSW graph."""
        with self._errors("vector search") as conn:
            return self.vectors.search_vectors(conn, vector, kinds, limit)

    def similarities(self, vector: Any, rowids: Sequence[int]) -> dict[int, float]:
        """Cosine similarity of ``vector`` to the live vectors of the given chunks (those that have one)."""
        if not rowids:
            return {}
        with self._errors("similarities") as conn:
            return self.vectors.similarities(conn, vector, rowids)

    def doc_vectors(self, rowid: int) -> list[Any]:
        """The stored vectors (float32 arrays) of every chunk of the doc chunk ``rowid`` belongs to."""
        return self.docs_vectors([rowid]).get(rowid, [])

    def docs_vectors(self, rowids: Sequence[int]) -> dict[int, list[Any]]:
        """:meth:`doc_vectors` of many chunks in one statement: chunk id -> its doc's vectors (float32 arrays)."""
        import numpy as np

        with self._errors("doc vectors") as conn:
            return {r: [np.frombuffer(b, dtype=np.float32) for b in found]
                    for r, found in self.vectors.docs_vectors(conn, rowids).items()}

    def unknown_words(self, words: Sequence[str]) -> list[str]:
        """Those of ``words`` that no chunk of the vault holds (recall's name rule)."""
        if not words:
            return []
        with self._errors("unknown words") as conn:
            return unknown_words(conn, self._state(conn).vault_id, words)

    def search_feedback(self, bodies: Sequence[str], query: str, kinds: Sequence[str], terms: int,
                        limit: int) -> list[tuple[int, float]]:
        """Pseudo-relevance feedback: the lexemes ``bodies`` share and the query lacks, rare in this vault, searched
        as one keyword query: (chunk id, BM25) best first (:func:`memvault.index.postgres.keywords.feedback`)."""
        if not bodies:
            return []
        with self._errors("feedback") as conn:
            rows = feedback(conn, self._state(conn).vault_id, bodies, query, kinds, terms, limit)
        return [(int(r[0]), float(r[1])) for r in rows]

    def coverage(self, query: str, rowid: int) -> float:
        """The share of the query's IDF weight that chunk ``rowid`` holds (recall's "nothing known" test)."""
        with self._errors("coverage") as conn:
            return coverage(conn, self._state(conn).vault_id, query, rowid)

    def coverages(self, query: str, rowids: Sequence[int]) -> dict[int, float]:
        """:meth:`coverage` of each chunk, one query each (the best twenty or so candidates of a recall)."""
        with self._errors("coverage") as conn:
            vault = self._state(conn).vault_id
            return {r: coverage(conn, vault, query, r) for r in dict.fromkeys(rowids)}

    # -- the fields behind chunk ids ----------------------------------------------------------------------
    def chunk_docs(self, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """chunk id -> its doc's fields (keys: memvault.index.search.DOC_FIELDS)."""
        if not rowids:
            return {}
        with self._errors("chunk docs") as conn:
            return chunk_docs(conn, self._state(conn).vault_id, rowids)

    def episode_neighbours(self, docs: dict[int, dict[str, Any]]) -> dict[int, list[int]]:
        """For the raw episodes among ``docs`` (chunk id -> fields), the turns just before and after each."""
        with self._errors("episode neighbours") as conn:
            return episode_neighbours(conn, self._state(conn).vault_id, docs)

    def runbook_steps(self, docs: dict[int, dict[str, Any]]) -> dict[int, tuple[str, str]]:
        """Every step (a chunk numbered below 0: a vector only) of the runbooks among ``docs``: chunk id -> (kind,
        id)."""
        keys = runbook_keys(docs)
        if not keys:
            return {}
        with self._errors("runbook steps") as conn:
            return {r: keys[doc] for r, doc in runbook_steps(conn, self._state(conn).vault_id, sorted(keys))}

    def runs_of(self, names: Sequence[str], per_name: int = 3) -> dict[str, list[dict[str, Any]]]:
        """The last ``per_name`` procedure_run episodes of each procedure, newest first (one query)."""
        if not names:
            return {}
        with self._errors("runs") as conn:
            return runs_of(conn, self._state(conn).vault_id, names, per_name)

    def procedure_docs(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """name -> the fields of that procedure's doc (as chunk_docs gives them, for its first chunk)."""
        if not names:
            return {}
        with self._errors("procedure docs") as conn:
            return procedure_docs(conn, self._state(conn).vault_id, names)

    def episodes_between(self, since: datetime | None, until: datetime | None, limit: int) -> list[dict[str, Any]]:
        """Episodes created in [since, until) (None for open), newest first."""
        with self._errors("episodes") as conn:
            return episodes_between(conn, self._state(conn).vault_id, since, until, limit)

    def meta_get(self, key: str) -> str | None:
        """A value kept with this vault's index (the relevance scale), or None; None too from a database whose
        schema predates the table (the next publish adds it)."""
        with self._errors("meta") as conn:
            psycopg = psycopg_module()
            try:
                row = conn.execute("SELECT value FROM memvault.vault_meta WHERE vault_id = %s AND key = %s",
                                   (self._state(conn).vault_id, key)).fetchone()
            except psycopg.errors.UndefinedTable:
                return None
            return row[0] if row else None

    def meta_set(self, key: str, value: str) -> None:
        with self._errors("meta") as conn:
            conn.execute("INSERT INTO memvault.vault_meta (vault_id, key, value) VALUES (%s, %s, %s) "
                         "ON CONFLICT (vault_id, key) DO UPDATE SET value = excluded.value",
                         (self._state(conn).vault_id, key, value))

    def sample_chunks(self, kind: str, n: int) -> list[tuple[str, str]]:
        """("kind:id", text) of ``n`` embedded chunks of ``kind``, chosen by their hash (calibration's sample)."""
        with self._errors("sample") as conn:
            return sample_chunks(conn, self._state(conn).vault_id, kind, n)

    def last_chunk_id(self) -> int:
        with self._errors("last chunk") as conn:
            return last_chunk_id(conn, self._state(conn).vault_id)

    # -- maintenance --------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Items per kind, chunks, vectors, pending, model, and the bytes of the tables and indexes."""
        from psycopg import sql

        with self._errors("stats") as conn:
            state = self._read_state(conn)
            if state is None:
                return {"exists": False, "vault": self.vault, "url": where(self.url)}
            v = state.vault_id
            kinds = dict(conn.execute(vsql(v, "SELECT kind, count(*) FROM {docs} GROUP BY kind")).fetchall())
            chunks = int(conn.execute(vsql(v, "SELECT count(*) FROM {chunks}")).fetchone()[0])
            sizes = conn.execute(
                "SELECT pg_total_relation_size(to_regclass(%s)), pg_total_relation_size(to_regclass(%s)), "
                "pg_relation_size(to_regclass(%s))",
                (f"{SCHEMA}.v{v}_docs", f"{SCHEMA}.v{v}_chunks", f"{SCHEMA}.v{v}_chunks_tsv")).fetchone()
            vectors, table_bytes, hnsw_bytes = 0, None, None
            if state.live_model is not None:
                name = f"{SCHEMA}.v{v}_vec_{state.live_model}"
                vectors = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    vec(v, state.live_model))).fetchone()[0])
                row = conn.execute("SELECT pg_relation_size(to_regclass(%s)), pg_relation_size(to_regclass(%s))",
                                   (name, f"{name}_hnsw")).fetchone()
                table_bytes, hnsw_bytes = row[0], row[1]
            return {
                "exists": True,
                "vault": self.vault,
                "url": where(self.url),
                "items": {k: int(kinds.get(k, 0)) for k in KINDS},
                "chunks": chunks,
                "vectors": vectors,
                "pending_vectors": pending_count(conn, v),
                "model": state.live_identity.to_dict() if state.live_identity else None,
                "switching_to": state.next_model,
                "head": state.head,
                "docs_bytes": sizes[0],
                "chunks_bytes": sizes[1],
                "keyword_index_bytes": sizes[2],
                "vector_table_bytes": table_bytes,
                "hnsw_bytes": hnsw_bytes,
            }

    def drop(self) -> None:
        """Remove this vault's rows and tables (the index is derived: :meth:`ensure` + apply rebuild it)."""
        from psycopg import sql

        with self._errors("drop") as conn:
            state = self._read_state(conn)
            if state is None:
                return
            v = state.vault_id
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
                names = [r[0] for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE %s",
                    (SCHEMA, f"v{v}\\_%"))]
                if names:
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(
                        sql.SQL(", ").join(sql.Identifier(SCHEMA, n) for n in names)))
                conn.execute("DELETE FROM memvault.vaults WHERE vault_id = %s", (v,))
            self._state_cache = None

    def explain(self, method: str, *args: Any, analyze: bool = False, force_index: bool = False) -> str:
        """The plan of the query a search method runs for these arguments (``EXPLAIN``, or ``EXPLAIN ANALYZE``):
        ``explain("search_keywords", "host port", KINDS, 10)``. For tests and for reading plans on a real vault.
        ``force_index`` plans with ``enable_seqscan = off``: on a tiny table the planner rightly prefers reading
        the few pages it has, which hides whether the index *can* be used."""
        from psycopg import sql

        with self._errors("explain") as conn:
            state = self._state(conn, fresh=True)
            v = state.vault_id
            built: tuple[Any, tuple] | None = None
            if method in BUILDERS:
                query, kinds, limit = args
                terms = read_terms(conn, v, query)
                built = BUILDERS[method](v, terms, kinds, limit) if terms else None
            elif method == "search_vectors":
                vector, kinds, limit = args
                made = self.vectors.vector_sql(state, kinds, limit)
                if made is not None:
                    qvec = self.vectors.query_vector(state, vector)
                    built = (made[0], (qvec, [k for k in kinds if k in KINDS]) if made[1] else (qvec,))
            else:
                raise InvalidValue("method", f"no plan for {method!r}")
            if built is None:
                return ""
            prefix = sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") if analyze else sql.SQL("EXPLAIN ")
            with conn.transaction():
                if force_index:
                    conn.execute("SET LOCAL enable_seqscan = off")
                rows = conn.execute(prefix + built[0], built[1]).fetchall()
            # A 384-dimension vector literal makes a plan unreadable: it is shown as '[...]'.
            return "\n".join(re.sub(r"'\[[^\]]{40,}\]'", "'[...]'", r[0]) for r in rows)
