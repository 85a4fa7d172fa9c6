"""A team's shared index on PostgreSQL + pgvector, and the embedding cache every host can use.

One PostgreSQL database serves many vaults (git repositories shared by teams) and every host of each vault. It
holds what the team has pushed; each host keeps its own uncommitted changes in its local SQLite index (the wiring
is recall's business, not this module's). psycopg is imported inside functions: importing this module costs
nothing, and a missing psycopg is a :class:`~memvault.rules.errors.SearchIndexError` saying how to install it.

Schema (``memvault`` schema, applied as named, ordered migrations recorded in ``memvault.migrations``):

- shared by all vaults: ``models`` (document-vector identities: name, revision, dims), ``vaults`` (name, live
  model, model being built, indexed git commit, BM25 totals), ``vault_migrations``, ``embedding_cache``
  ((model, sha256 of the exact chunk text) -> vector);
- per vault ``<v>`` (tables named ``v<id>_...``, created by the vault migrations when the vault is registered):
  ``docs`` (one row per memory, unique (kind, item_id)), ``chunks`` (exact text embedded, sha256, word count, a
  stored ``tsvector`` with GIN), ``pending`` (chunks without a vector of the live model), ``lexemes`` (document
  frequency of every lexeme, kept exact by each write: BM25's idf), ``files`` (path -> git blob indexed), and one
  ``vec_<model>`` table per model (``chunk_id``, ``kind``, ``vector(d)``, HNSW m=24, ef_construction=128).
  Per-vault tables rather than vault_id columns in shared tables: the GIN index and the keyword statistics then
  cover one vault (a rare word of vault A does not walk vault B's postings), no query needs a vault filter, and
  :meth:`SharedIndex.drop` is a few ``DROP TABLE`` s. Table names are always formatted with
  ``psycopg.sql.Identifier``; values are always parameters.

Text search. The stored ``tsvector`` is ``to_tsvector('english', text with every non-alphanumeric run replaced by
a space)``, so ``db01.fra1`` or ``10.8.0.4`` are separate words as in SQLite's FTS5 ``unicode61`` tokenizer (the
english parser would keep them whole and a query for ``db01`` would miss), plus one lexeme ``'kind <kind>'`` (it
has a space, so no text produces it): the kind filter is a term of the same GIN query, as the FTS5 kind column is
in the SQLite index. Scores are BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) computed in
SQL from the positions in the ``tsvector`` and the per-vault document frequencies.

**The common-word rule** (why "which host and port" over a million chunks that all mention hosts and ports stays
cheap): an OR query ranks every chunk holding any term. So the query's lexemes are sorted by document frequency
and, rarest first, *generate candidates* only while their frequencies add up to at most :data:`CANDIDATE_BUDGET`
chunks (10,000); the others only *score* the candidates the rarer ones found. When not even the rarest lexeme fits
the budget, candidates come from a bounded scan: the first :data:`SCAN_CAP` (2,000) chunks holding all of the
lexemes, topped up to :data:`SCAN_CAP` with chunks holding any. Candidates are ranked by BM25 with term frequency 1
(one ``tsv @@ lexeme`` test per term, ~2 us a candidate) and the best :data:`PRESCORE` (200, or twice the limit)
get full BM25. Phrases and exact quotes follow the same rule (a phrase costs the frequency of its rarer word; the
bounded scan reads at most :data:`SCAN_CAP` chunks holding all its words and keeps those with the phrase). When
the query's words match at most ``CANDIDATE_BUDGET`` chunks in all, every match is a candidate.
Measured at 1M chunks (bench/bench_pgindex.py, 2 shared cores, load ~1): BM25 over every match costs 1.8 s p50
for "which host and port" and 354 ms p50 (1.5 s p95) for natural questions; with the rule 10 ms and 22 ms
(42 ms p95), and the natural questions' top 10 is 93% the same (100% at 100k chunks).

Vectors: cosine distance on HNSW with ``hnsw.ef_search`` = :data:`EF_SEARCH` (recall@10 0.966 at 1M rows,
11.6 ms p50 through this module on 2 loaded cores: docs/scaling.md) and ``hnsw.iterative_scan = relaxed_order`` (a kind
filter keeps its recall), set once per connection; results are re-sorted because relaxed order may return
near-ties out of order. The graph of a new model is built once its table is loaded (CREATE INDEX CONCURRENTLY:
10 minutes at 1M rows on 2 cores), not row by row.

Concurrency: every write of a vault runs in a transaction under ``pg_advisory_xact_lock(28022, vault_id)``
(28022, 0 guards the global migrations), so concurrent hosts serialise per vault and never lose or duplicate rows.
Slow work never holds it: texts are cut and embedded outside, each batch of vectors is written in its own short
locked transaction. One host at a time embeds a vault (session lock 28024, others return at once as the SQLite
index does) and one builds a new model (session lock 28023). A model switch builds the new vector table beside
the live one (cache first), then flips ``vaults.live_model`` in one locked transaction after checking that every
chunk has a vector; recall uses the old table until then. Session advisory locks need a session: do not put a
transaction-mode pooler (pgbouncer) between writers and the server; readers are fine behind one.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import re
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any

from ..rules.errors import InvalidValue, MemvaultError, SearchIndexError
from ..rules.timeutil import format_time, parse_time
from .documents import KINDS, Doc, cut
from .search import DOC_FIELDS, MAX_TERMS, query_terms
from .update import EMBED_GROUP, SyncReport, mean_vector, vector_blob, with_context

if TYPE_CHECKING:
    from ..models.embeddings import ModelIdentity

__all__ = ["CANDIDATE_BUDGET", "EF_SEARCH", "SCAN_CAP", "SCHEMA", "EmbeddingCache", "SharedIndex", "SharedState",
           "text_sha256", "vector_key"]

SCHEMA = "memvault"
#: Advisory lock classes (the first key; the second is the vault id). 28022 = 0x6d76, "mv".
LOCK_WRITE = 28022   # transaction lock: every write of a vault; (28022, 0) = the global migrations
LOCK_SWITCH = 28023  # session lock: the one host building a vault's next model
LOCK_EMBED = 28024   # session lock: the one host embedding a vault's pending chunks

#: hnsw.ef_search. At 1M rows (m=24, ef_construction=128) through this module, 2 loaded cores: 400 gives
#: recall@10 0.946-0.966 across three builds (too close to 0.95), 600 gives 0.966 (facts only 0.969) at 11.6 ms
#: p50, 800 gives 0.989 at 22 ms (bench/bench_pgindex.py --ef 400,600,800; docs/scaling.md).
EF_SEARCH = 600
HNSW_M, HNSW_EF_CONSTRUCTION = 24, 128
#: Keyword candidates: the rarest lexemes generate them while their document frequencies add up to at most this.
#: At 1M chunks, natural questions: 5k / 10k / 20k give p50 14 / 22 / 42 ms and a top 10 that is 84 / 93 / 97%
#: the one of BM25 over every match (bench/bench_pgindex.py). Common-word queries do not depend on it (SCAN_CAP).
CANDIDATE_BUDGET = 10_000
#: Chunks read by the bounded scan when every query word is common.
SCAN_CAP = 2_000
#: Candidates (at least; twice the limit when that is more) that get full BM25 after the frequency-1 prescore.
PRESCORE = 200
K1, B = 1.2, 0.75
#: Chunks fetched per batch by embed() and a model switch (texts are embedded EMBED_GROUP at a time).
FETCH_BATCH = 2_048
#: Rows per statement in apply(): arrays bigger than this are sent in slices (one transaction all the same).
WRITE_SLICE = 5_000
CONNECT_TIMEOUT = 10
#: Seconds a SharedIndex trusts its cached view of the vault row (live model) before reading it again.
STATE_TTL = 2.0
#: How long dropping a retired vector table may wait for readers before it is left for later.
DROP_LOCK_TIMEOUT = "5s"
#: maintenance_work_mem for an HNSW build (the graph should fit: ~2 KB per 384-d row).
BUILD_MEMORY = "512MB"

_WORD = re.compile(r"[^\W_]+")  # what the stored tsvector sees as words (non-alphanumeric runs are spaces)
_NEEDS_PSYCOPG = "PostgreSQL support needs psycopg: pip install 'psycopg[binary]'"


# ------------------------------------------------------------------------------------------------ helpers
def _psycopg() -> Any:
    """The psycopg module, imported on first use."""
    try:
        import psycopg
    except ImportError:
        raise SearchIndexError(_NEEDS_PSYCOPG) from None
    return psycopg


def vector_key(identity: ModelIdentity) -> str:
    """What makes a document vector: model name, revision and dimensions (the query prefix only changes queries)."""
    return f"{identity.name}@{identity.revision}/{int(identity.dims)}"


def text_sha256(text: str) -> bytes:
    """The embedding cache's key for a chunk text: sha256 of its exact UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return line if len(line) <= 300 else line[:297] + "..."


def _where(url: str) -> str:
    """The URL without its password, for messages."""
    psycopg = _psycopg()
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except (psycopg.Error, ValueError, TypeError):
        return "the given URL"
    host = str(info.get("host") or "localhost")
    port = f":{info['port']}" if info.get("port") else ""
    user = f"{info['user']}@" if info.get("user") else ""
    return f"postgresql://{user}{host}{port}/{info.get('dbname') or ''}"


def _lexeme(text: str) -> str:
    """A lexeme quoted for a tsquery."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _kind_filter(kinds: Sequence[str]) -> str | None:
    """The tsquery conjunct that keeps ``kinds`` ("" for all of them), or None when no known kind is asked."""
    wanted = [k for k in KINDS if k in kinds]
    if not wanted:
        return None
    if len(wanted) == len(KINDS):
        return ""
    return " & (" + " | ".join(_lexeme(f"kind {k}") for k in wanted) + ")"


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _time(value: str | None, problems: list[str], what: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_time(value, what)
    except MemvaultError as exc:
        problems.append(str(exc))
        return None


def _day(value: str | None, problems: list[str], what: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value[:10])
    except ValueError:
        problems.append(f"{what}: not a date: {value!r}")
        return None


def _slices(items: Sequence[Any], size: int = WRITE_SLICE) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class _Vector(bytes):
    """float32 little-endian bytes, sent to PostgreSQL as a pgvector ``vector`` in its binary format."""


def _swap(data: bytes) -> bytes:
    """float32 bytes between this machine's order and network order (pgvector's binary format)."""
    if sys.byteorder == "big":
        return bytes(data)
    values = array("f")
    values.frombytes(data)
    values.byteswap()
    return values.tobytes()


def _register_vector(conn: Any, type_name: str) -> bool:
    """Teach this connection pgvector's binary format: _Vector params, vector results as float32 LE bytes.
    False when the extension is not installed."""
    psycopg = _psycopg()
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format
    from psycopg.types import TypeInfo

    info = TypeInfo.fetch(conn, type_name)
    if info is None:
        return False
    info.register(conn)  # the array type too: lists of _Vector are sent as vector[]

    class VectorDumper(Dumper):
        format = Format.BINARY
        oid = info.oid

        def dump(self, obj: Any) -> bytes:
            data = bytes(obj)
            return (len(data) // 4).to_bytes(2, "big") + b"\x00\x00" + _swap(data)

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> bytes:
            dims = int.from_bytes(bytes(data[:2]), "big")
            return _swap(bytes(data[4:4 + 4 * dims]))

    conn.adapters.register_dumper(_Vector, VectorDumper)
    conn.adapters.register_loader(info.oid, VectorLoader)
    del psycopg
    return True


# ------------------------------------------------------------------------------------------------ migrations
#: Global migrations: tables every vault shares. Applied in order, each recorded, under lock (28022, 0).
GLOBAL_MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_shared",
        """
        CREATE TABLE memvault.models (
            model_id  int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            key       text NOT NULL UNIQUE,
            identity  jsonb NOT NULL,
            dims      int NOT NULL CHECK (dims BETWEEN 1 AND 16000)
        );
        CREATE TABLE memvault.vaults (
            vault_id      int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name          text NOT NULL UNIQUE,
            live_model    int REFERENCES memvault.models,
            live_identity jsonb,
            next_model    int REFERENCES memvault.models,
            indexed_head  text,
            nchunks       bigint NOT NULL DEFAULT 0,
            nwords        bigint NOT NULL DEFAULT 0,
            created       timestamptz NOT NULL DEFAULT now(),
            updated       timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE memvault.vault_migrations (
            vault_id   int NOT NULL REFERENCES memvault.vaults ON DELETE CASCADE,
            name       text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (vault_id, name)
        );
        CREATE TABLE memvault.embedding_cache (
            model_id  int NOT NULL REFERENCES memvault.models,
            text_hash bytea NOT NULL,
            embedding vector NOT NULL,
            created   timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (model_id, text_hash)
        );
        """,
    ),
    (
        # A team's use counts once: the usage state of memvault.stores.state, per vault name, beside the index.
        "0002_usage",
        """
        CREATE TABLE memvault.usage (
            vault    text NOT NULL,
            kind     text NOT NULL,
            item_id  text NOT NULL,
            uses     double precision NOT NULL DEFAULT 0,
            used_at  double precision,
            shown    double precision NOT NULL DEFAULT 0,
            shown_at double precision,
            PRIMARY KEY (vault, kind, item_id)
        );
        CREATE TABLE memvault.usage_reports (
            vault text NOT NULL, source text NOT NULL, kind text NOT NULL, item_id text NOT NULL, day date NOT NULL,
            PRIMARY KEY (vault, source, kind, item_id, day)
        );
        CREATE TABLE memvault.recalled (
            vault text NOT NULL, hash text NOT NULL, kind text NOT NULL, item_id text NOT NULL,
            at timestamptz NOT NULL,
            PRIMARY KEY (vault, hash)
        );
        CREATE INDEX recalled_item ON memvault.recalled (vault, kind, item_id);
        """,
    ),
]

#: Per-vault migrations, formatted with the vault's table and index names. Braces are placeholders.
VAULT_MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_tables",
        """
        CREATE TABLE {docs} (
            doc_id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            kind         text NOT NULL CHECK (kind IN ('fact', 'episode', 'procedure')),
            item_id      text NOT NULL,
            path         text NOT NULL,
            header       text NOT NULL,
            body         text NOT NULL,
            hash         text NOT NULL,
            cut          text NOT NULL,
            importance   double precision NOT NULL,
            confidence   double precision NOT NULL,
            source       text,
            created      timestamptz,
            updated      timestamptz,
            valid_until  date,
            review_after double precision,
            ekind        text,
            ref          text,
            meta         text,
            context      text,
            UNIQUE (kind, item_id)
        );
        CREATE INDEX {docs_path} ON {docs} (path);
        CREATE INDEX {docs_runs} ON {docs} (ref, created) WHERE ref IS NOT NULL;
        CREATE INDEX {docs_episodes} ON {docs} (created) WHERE kind = 'episode';
        CREATE INDEX {docs_words} ON {docs} (doc_id) WHERE cut = 'words';
        CREATE INDEX {docs_turns} ON {docs} (source, created, item_id) WHERE kind = 'episode' AND ekind = 'raw';
        CREATE TABLE {chunks} (
            chunk_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            doc_id   bigint NOT NULL REFERENCES {docs} ON DELETE CASCADE,
            chunk    int NOT NULL,
            kind     text NOT NULL,
            text     text NOT NULL,
            hash     bytea NOT NULL,
            nwords   int NOT NULL,
            tsv      tsvector GENERATED ALWAYS AS (
                         to_tsvector('english', regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))
                         || array_to_tsvector(ARRAY['kind ' || kind])) STORED,
            UNIQUE (doc_id, chunk)
        );
        CREATE INDEX {chunks_tsv} ON {chunks} USING gin (tsv);
        CREATE TABLE {pending} (chunk_id bigint PRIMARY KEY REFERENCES {chunks} ON DELETE CASCADE);
        CREATE TABLE {lexemes} (lexeme text PRIMARY KEY, df integer NOT NULL);
        CREATE TABLE {files} (path text PRIMARY KEY, blob text NOT NULL);
        """,
    ),
]


def _statements(script: str) -> list[str]:
    """Split a migration script on ';' at line ends (no migration has a ';' inside a statement)."""
    return [s.strip() for s in re.split(r";\s*\n", script) if s.strip()]


# ------------------------------------------------------------------------------------------------ connections
def _connect(url: str) -> Any:
    """A new autocommit connection, set up for memvault (search settings, pgvector types when installed)."""
    psycopg = _psycopg()
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                               application_name="memvault")
    except psycopg.Error as exc:
        raise SearchIndexError(f"cannot connect to PostgreSQL at {_where(url)}: {_one_line(exc)}") from None
    try:
        _setup(conn)
    except psycopg.Error as exc:
        conn.close()
        raise SearchIndexError(f"PostgreSQL at {_where(url)}: {_one_line(exc)}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _setup(conn: Any) -> bool:
    """Per-connection settings; True when pgvector is installed (and its types registered)."""
    from psycopg import sql

    row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                       "WHERE e.extname = 'vector'").fetchone()
    # One round trip: recall reads ~10 neighbours with a kind filter; relaxed_order keeps filtered recall and
    # results are re-sorted here. The planner must find pgvector's type and operators where it was installed.
    settings = sql.SQL("SET hnsw.ef_search = {}; SET hnsw.iterative_scan = relaxed_order").format(
        sql.Literal(EF_SEARCH))
    if row is not None:
        settings = sql.SQL("SET search_path TO {}; ").format(sql.Identifier(row[0])) + settings
    conn.execute(settings)
    if row is None:
        return False
    return _register_vector(conn, f'"{row[0]}".vector')


def _ensure_extension(conn: Any, url: str) -> None:
    """Install pgvector when it is missing (the caller holds the migrations lock: IF NOT EXISTS alone races)."""
    psycopg = _psycopg()
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is not None:
        return
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        raise SearchIndexError(f"PostgreSQL at {_where(url)}: the pgvector extension is not installed and this "
                               "role may not install it; a superuser must run CREATE EXTENSION vector") from None
    except psycopg.errors.FeatureNotSupported as exc:  # not on the server at all
        raise SearchIndexError(f"PostgreSQL at {_where(url)}: pgvector is not available on the server "
                               f"({_one_line(exc)})") from None


def _schema_current(conn: Any) -> bool:
    """Whether every global migration is recorded (False when the schema does not exist yet)."""
    psycopg = _psycopg()
    try:
        done = {r[0] for r in conn.execute("SELECT name FROM memvault.migrations")}
    except psycopg.errors.UndefinedTable:
        return False
    return all(name in done for name, _ in GLOBAL_MIGRATIONS)


def _migrate_global(conn: Any, url: str) -> list[str]:
    """Apply the global migrations this database has not recorded, under the migrations lock."""
    if _schema_current(conn):
        return []
    applied = []
    with conn.transaction():
        # Two hosts starting at once: the second waits here, then finds everything recorded.
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_WRITE,))
        _ensure_extension(conn, url)
        conn.execute("CREATE SCHEMA IF NOT EXISTS memvault")
        conn.execute("CREATE TABLE IF NOT EXISTS memvault.migrations("
                     "name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
        done = {r[0] for r in conn.execute("SELECT name FROM memvault.migrations")}
        for name, script in GLOBAL_MIGRATIONS:
            if name in done:
                continue
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute("INSERT INTO memvault.migrations(name) VALUES (%s)", (name,))
            applied.append(name)
    _setup(conn)  # pgvector's types, now that it is installed
    return applied


def _register_model(conn: Any, identity: ModelIdentity) -> int:
    """The models row of this document-vector identity (created when new): one statement for a new model."""
    key = vector_key(identity)
    row = conn.execute("INSERT INTO memvault.models(key, identity, dims) VALUES (%s, %s, %s) ON CONFLICT (key) "
                       "DO NOTHING RETURNING model_id", (key, json.dumps(identity.to_dict()), int(identity.dims))
                       ).fetchone()
    if row is None:
        row = conn.execute("SELECT model_id FROM memvault.models WHERE key = %s", (key,)).fetchone()
    return int(row[0])


def _cache_hits(conn: Any, model_id: int, hashes: Sequence[bytes]) -> set[bytes]:
    """Which of ``hashes`` the cache holds for this model (no vectors sent back)."""
    if not hashes:
        return set()
    rows = conn.execute("SELECT text_hash FROM memvault.embedding_cache WHERE model_id = %s "
                        "AND text_hash = ANY(%s::bytea[])", (model_id, list(hashes))).fetchall()
    return {bytes(r[0]) for r in rows}


def _cache_store(conn: Any, model_id: int, items: Sequence[tuple[bytes, bytes]]) -> None:
    """(text hash, float32 LE vector) pairs into the cache, one statement; an entry already there is kept."""
    if not items:
        return
    conn.execute("INSERT INTO memvault.embedding_cache (model_id, text_hash, embedding) "
                 "SELECT %s, u.h, u.e FROM unnest(%s::bytea[], %b::vector[]) AS u(h, e) ON CONFLICT DO NOTHING",
                 (model_id, [h for h, _ in items], [_Vector(v) for _, v in items]))


def _rows_of(matrix: Any) -> list[bytes]:
    """An embedder's (n, d) result as float32 little-endian bytes per row."""
    import numpy as np

    data = np.ascontiguousarray(np.asarray(matrix, dtype="<f4"))
    return [row.tobytes() for row in data]


# ------------------------------------------------------------------------------------------------ the cache
class _Connected:
    """One autocommit connection to the team's PostgreSQL, opened on first use with the global migrations
    applied and reopened after it breaks; every database error a one-line :class:`SearchIndexError` that names
    :attr:`what` and the server (never its password)."""

    what = "PostgreSQL"

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None
        self._lock = threading.RLock()

    def _on_connect(self, conn: Any) -> None:
        """Run on a new connection before it is used: the global migrations (the shared index applies them in
        :meth:`SharedIndex.ensure` instead)."""
        _migrate_global(conn, self.url)

    def _forget(self) -> None:
        """Drop what was cached for the connection (called when it is opened, broken or closed)."""

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = _connect(self.url)
            try:
                self._on_connect(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._forget()
        return self._conn

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[Any]:
        psycopg = _psycopg()
        with self._lock:
            try:
                yield self._connection()
            except psycopg.Error as exc:
                if self._conn is not None and (self._conn.broken or isinstance(exc, psycopg.OperationalError)):
                    with contextlib.suppress(Exception):
                        self._conn.close()
                    self._conn = None
                self._forget()
                raise SearchIndexError(f"{self.what} at {_where(self.url)}: {what}: {_one_line(exc)}") from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
            self._conn = None
            self._forget()


class EmbeddingCache(_Connected):
    """(model, text hash) -> vector, shared by every vault and host on one PostgreSQL. Used by both backends:
    a host with a local SQLite index also takes vectors other hosts computed.

    The model is keyed by its document-vector identity (name, revision, dims: :func:`vector_key`), a text by the
    sha256 of its exact bytes. A get or put of any number of texts is one statement (plus one the first time a
    model is seen by this object). Entries are never evicted; ``created`` tells their age.
    """

    what = "embedding cache"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._models: dict[str, int] = {}

    def _forget(self) -> None:
        self._models = {}

    def get(self, identity: ModelIdentity, texts: Sequence[str]) -> dict[str, bytes]:
        """text -> float32 little-endian bytes, for the texts the cache holds (others are left out)."""
        by_hash = {text_sha256(t): t for t in texts}
        if not by_hash:
            return {}
        with self._errors("get") as conn:
            rows = conn.execute(
                "SELECT e.text_hash, e.embedding FROM memvault.embedding_cache e "
                "JOIN memvault.models m ON m.model_id = e.model_id WHERE m.key = %s AND e.text_hash = ANY(%s::bytea[])",
                (vector_key(identity), list(by_hash)), binary=True).fetchall()
        return {by_hash[bytes(h)]: v for h, v in rows}

    def get_hashes(self, identity: ModelIdentity, hashes: Sequence[bytes]) -> dict[bytes, bytes]:
        """Like :meth:`get`, keyed by :func:`text_sha256` (what an index already stores per chunk)."""
        if not hashes:
            return {}
        with self._errors("get") as conn:
            rows = conn.execute(
                "SELECT e.text_hash, e.embedding FROM memvault.embedding_cache e "
                "JOIN memvault.models m ON m.model_id = e.model_id WHERE m.key = %s AND e.text_hash = ANY(%s::bytea[])",
                (vector_key(identity), list(hashes)), binary=True).fetchall()
        return {bytes(h): v for h, v in rows}

    def put(self, identity: ModelIdentity, items: Sequence[tuple[str, bytes]]) -> None:
        """Store (text, float32 LE vector) pairs; one that is already cached is kept (two hosts race harmlessly)."""
        self.put_hashes(identity, [(text_sha256(t), vector_blob(v)) for t, v in items])

    def put_hashes(self, identity: ModelIdentity, items: Sequence[tuple[bytes, bytes]]) -> None:
        if not items:
            return
        dims = int(identity.dims)
        if any(len(v) != 4 * dims for _, v in items):
            raise InvalidValue("vector", f"{identity.name} vectors have {dims} dimensions")
        with self._errors("put") as conn:
            key = vector_key(identity)
            if key not in self._models:
                self._models[key] = _register_model(conn, identity)
            _cache_store(conn, self._models[key], items)

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------------------ usage
class SharedState(_Connected):
    """A team's usage state (:class:`memvault.stores.state.State`'s interface) in the shared PostgreSQL, per vault name:
    a memory fetched on one host and shown on another counts once for the team.

    Counters decay as in the local state (value at its last update, decayed when read). A bump is one
    ``INSERT .. ON CONFLICT DO UPDATE`` for all the memories of a call that decays and adds in the server, so
    hosts bumping the same row at once never lose a count. An untrusted source's use reports count once per
    memory per source per day, team-wide (``usage_reports``).
    """

    def __init__(self, url: str, vault: str, *, half_life: float = 90 * 86400) -> None:
        super().__init__(url)
        self.vault = vault
        self.what = f"usage state of {vault!r}"
        self.half_life = half_life
        self.warnings: list[str] = []

    def get(self, keys: Any, at: datetime | None = None) -> dict[tuple[str, str], Any]:
        from ..stores.state import Usage, _decay

        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        t = (at or datetime.now(timezone.utc)).timestamp()
        with self._errors("get") as conn:
            rows = conn.execute(
                "SELECT u.kind, u.item_id, u.uses, u.used_at, u.shown, u.shown_at FROM memvault.usage u "
                "JOIN unnest(%s::text[], %s::text[]) AS k(kind, item_id) USING (kind, item_id) WHERE u.vault = %s",
                ([k for k, _ in keys], [i for _, i in keys], self.vault)).fetchall()
        stamp = _from_timestamp
        return {(kind, item_id): Usage(_decay(uses, used_at, t, self.half_life),
                                       _decay(shown, shown_at, t, self.half_life), stamp(used_at), stamp(shown_at))
                for kind, item_id, uses, used_at, shown, shown_at in rows}

    def recalled_hashes(self) -> set[str]:
        with self._errors("recalled") as conn:
            return {r[0] for r in conn.execute("SELECT hash FROM memvault.recalled WHERE vault = %s", (self.vault,))}

    def _bump(self, conn: Any, column: str, weights: dict[tuple[str, str], float], t: float) -> None:
        from psycopg import sql

        if not weights:
            return
        stamp = "used_at" if column == "uses" else "shown_at"
        names = {"c": sql.Identifier(column), "s": sql.Identifier(stamp)}
        conn.execute(sql.SQL(
            "INSERT INTO memvault.usage AS u (vault, kind, item_id, {c}, {s}) "
            "SELECT %s, k, i, w, %s FROM unnest(%s::text[], %s::text[], %s::float8[]) AS x(k, i, w) "
            "ON CONFLICT (vault, kind, item_id) DO UPDATE SET "
            "{c} = COALESCE(u.{c} * power(0.5, greatest(0, excluded.{s} - u.{s}) / %s), 0) + excluded.{c}, "
            "{s} = greatest(u.{s}, excluded.{s})").format(**names),
            (self.vault, t, [k for k, _ in weights], [i for _, i in weights], list(weights.values()),
             float(self.half_life)))

    def record_shown(self, weights: dict[tuple[str, str], float], *, texts: Any = (),
                     at: datetime | None = None) -> None:
        when = at or datetime.now(timezone.utc)
        texts = {h: (k, i) for h, k, i in texts}
        with self._errors("record shown") as conn, conn.transaction():
            self._bump(conn, "shown", dict(weights), when.timestamp())
            if texts:
                conn.execute(
                    "INSERT INTO memvault.recalled (vault, hash, kind, item_id, at) "
                    "SELECT %s, h, k, i, %s FROM unnest(%s::text[], %s::text[], %s::text[]) AS x(h, k, i) "
                    "ON CONFLICT (vault, hash) DO UPDATE SET kind = excluded.kind, item_id = excluded.item_id, "
                    "at = excluded.at",
                    (self.vault, when, list(texts), [k for k, _ in texts.values()], [i for _, i in texts.values()]))

    def record_use(self, keys: Any, *, source: str | None = None, limited: bool = False,
                   at: datetime | None = None) -> list[tuple[str, str]]:
        when = at or datetime.now(timezone.utc)
        keys = list(dict.fromkeys(keys))
        if not keys:
            return []
        with self._errors("record use") as conn, conn.transaction():
            if limited:
                rows = conn.execute(
                    "INSERT INTO memvault.usage_reports (vault, source, kind, item_id, day) "
                    "SELECT %s, %s, k, i, %s FROM unnest(%s::text[], %s::text[]) AS x(k, i) "
                    "ON CONFLICT DO NOTHING RETURNING kind, item_id",
                    (self.vault, source or "", when.date(), [k for k, _ in keys], [i for _, i in keys])).fetchall()
                counted = {(r[0], r[1]) for r in rows}
                keys = [key for key in keys if key in counted]
            self._bump(conn, "uses", {key: 1.0 for key in keys}, when.timestamp())
        return keys

    def forget(self, keys: Any) -> None:
        keys = list(dict.fromkeys(keys))
        if not keys:
            return
        with self._errors("forget") as conn, conn.transaction():
            for table in ("usage", "usage_reports", "recalled"):
                conn.execute(f"DELETE FROM memvault.{table} t USING unnest(%s::text[], %s::text[]) AS x(k, i) "
                             "WHERE t.vault = %s AND t.kind = x.k AND t.item_id = x.i",
                             ([k for k, _ in keys], [i for _, i in keys], self.vault))



def _from_timestamp(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(float(value), timezone.utc)


# ------------------------------------------------------------------------------------------------ the index
@dataclass(frozen=True)
class _State:
    """The vault row as last read."""

    vault_id: int
    live_model: int | None
    live_identity: ModelIdentity | None
    next_model: int | None
    head: str | None
    read_at: float


@dataclass
class _Terms:
    """What a query asks of the keyword side, with each lexeme's document frequency in this vault."""

    lexemes: dict[str, int]                    # keyword lexemes -> df
    phrases: list[tuple[str, int]]             # (tsquery text of a word pair, df of its rarer word)
    pair_words: list[tuple[str, str]]          # the two lexemes of each phrase
    exact: tuple[str, int] | None              # (tsquery of the whole query, df of its rarest word)
    exact_words: list[str]
    n: int                                     # chunks in the vault
    avg: float                                 # words per chunk


class SharedIndex(_Connected):
    """The index of one vault in PostgreSQL: what the team has pushed, searched by every host.

    One connection per object, opened on first use and reopened after it breaks; the methods of one object are
    serialised by a lock (share it between threads if you must, but a search waits for an embed batch). Every
    error is a :class:`SearchIndexError` with a one-line message. Call :meth:`ensure` once before writing (it
    creates or upgrades the schema and registers the vault; it is one query when nothing is due).
    """

    def __init__(self, url: str, vault: str, *, cache: EmbeddingCache | None = None) -> None:
        if not isinstance(vault, str) or not vault.strip() or len(vault) > 200:
            raise InvalidValue("vault", f"a shared index needs a name of 1 to 200 characters, not {vault!r}")
        super().__init__(url)
        self.vault = vault
        self.what = f"shared index {vault!r}"
        # Without a cache of its own the index uses the one in its own database: vectors then move server-side
        # (cache -> vector table) without a round trip through this process.
        self.cache = cache
        self._local_cache = cache is None or cache.url == url
        self._vector = False
        self._state_cache: _State | None = None
        #: Counters since this object was made: texts embedded by a model, vectors taken from the cache.
        self.texts_embedded = 0
        self.cache_hits = 0

    # -- connection, errors, state ------------------------------------------------------------------------
    def _on_connect(self, conn: Any) -> None:
        self._vector = conn.adapters.types.get("vector") is not None  # migrations are ensure()'s

    def _forget(self) -> None:
        self._state_cache = None

    def __enter__(self) -> SharedIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_state(self, conn: Any) -> _State | None:
        from ..models.embeddings import ModelIdentity

        psycopg = _psycopg()
        try:
            row = conn.execute("SELECT vault_id, live_model, live_identity, next_model, indexed_head "
                               "FROM memvault.vaults WHERE name = %s", (self.vault,)).fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        if row is None:
            return None
        identity = ModelIdentity.from_dict(row[2]) if row[2] else None
        return _State(int(row[0]), row[1], identity, row[3], row[4], time.monotonic())

    def _state(self, conn: Any, *, fresh: bool = False) -> _State:
        state = self._state_cache
        if fresh or state is None or time.monotonic() - state.read_at > STATE_TTL:
            state = self._read_state(conn)
            self._state_cache = state
        if state is None:
            raise SearchIndexError(f"shared index at {_where(self.url)} has no vault named {self.vault!r}; "
                                   "run 'memvault reindex' to push it")
        return state

    def _t(self, vault_id: int, name: str) -> Any:
        from psycopg import sql

        return sql.Identifier(SCHEMA, f"v{vault_id}_{name}")

    def _vec(self, vault_id: int, model_id: int) -> Any:
        return self._t(vault_id, f"vec_{model_id}")

    def _sql(self, vault_id: int, text: str, **extra: Any) -> Any:
        """``text`` with {docs}, {chunks}, {pending}, {lexemes}, {files} (and ``extra``) as identifiers."""
        from psycopg import sql

        names = {n: self._t(vault_id, n) for n in ("docs", "chunks", "pending", "lexemes", "files")}
        return sql.SQL(text).format(**names, **extra)

    # -- schema -------------------------------------------------------------------------------------------
    def ensure(self) -> None:
        """Create or upgrade the schema (global, then this vault's tables) and register the vault. Migrations are
        named, ordered and recorded, and applied under an advisory lock: two hosts starting at once do not race."""
        from psycopg import sql

        with self._errors("migrations") as conn:
            _migrate_global(conn, self.url)
            if not self._vector:
                self._vector = _setup(conn)
            conn.execute("INSERT INTO memvault.vaults(name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (self.vault,))
            state = self._state(conn, fresh=True)
            v = state.vault_id
            done = {r[0] for r in conn.execute("SELECT name FROM memvault.vault_migrations WHERE vault_id = %s",
                                               (v,))}
            if any(name not in done for name, _ in VAULT_MIGRATIONS):
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
                    done = {r[0] for r in conn.execute(
                        "SELECT name FROM memvault.vault_migrations WHERE vault_id = %s", (v,))}
                    names = {n: sql.Identifier(f"v{v}_{n}") for n in
                             ("docs_path", "docs_runs", "docs_episodes", "docs_words", "docs_turns", "chunks_tsv")}
                    for name, script in VAULT_MIGRATIONS:
                        if name in done:
                            continue
                        for statement in _statements(script):
                            conn.execute(self._sql(v, statement, **names))
                        conn.execute("INSERT INTO memvault.vault_migrations(vault_id, name) VALUES (%s, %s)",
                                     (v, name))
            self._drop_retired(conn, state)

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

    def head(self) -> str | None:
        """The git commit the index reflects (set by :meth:`apply`)."""
        with self._errors("head") as conn:
            return self._state(conn, fresh=True).head

    def files(self) -> dict[str, str]:
        """Vault-relative path -> the git blob id the index reflects."""
        with self._errors("files") as conn:
            v = self._state(conn).vault_id
            return {r[0]: r[1] for r in conn.execute(self._sql(v, "SELECT path, blob FROM {files}"))}

    # -- phase 1: text ------------------------------------------------------------------------------------
    def apply(self, docs: Sequence[Doc], paths: dict[str, str | None], *, head: str | None,
              splitter: Any = None, max_tokens: int | None = None) -> SyncReport:
        """Phase 1 for a set of files, in one transaction under the vault's write lock.

        ``paths`` maps each touched vault-relative path to its new git blob id (None: the file is gone); ``docs``
        are all the docs now in the non-None paths. Docs are diffed by (kind, item_id, hash): an equal hash
        refreshes metadata only, a changed text is re-cut and its chunks replaced (pending a vector; embed() takes
        unchanged chunk texts from the cache), docs of those paths that are not in ``docs`` are deleted. The blobs
        and ``head`` (when given) are recorded. Cutting happens before the lock is taken.
        """
        started = time.perf_counter()
        report = SyncReport(files_seen=len(paths), files_changed=sum(b is not None for b in paths.values()),
                            files_removed=sum(b is None for b in paths.values()))
        live = [p for p, b in paths.items() if b is not None]
        for d in docs:
            if paths.get(d.path, None) is None:
                raise InvalidValue("docs", f"{d.path} ({d.kind} {d.item_id!r}) is not among the paths applied")
        unique: dict[tuple[str, str], Doc] = {}
        for d in docs:
            if (d.kind, d.item_id) in unique:
                report.problems.append(f"{d.path}: duplicate {d.kind} id {d.item_id!r}, later copy ignored")
                continue
            unique[(d.kind, d.item_id)] = d
        with self._errors("apply") as conn:
            state = self._state(conn, fresh=True)
            v = state.vault_id
            if max_tokens is None and splitter is None and state.live_identity is not None:
                max_tokens = state.live_identity.max_tokens
            # Cut outside the lock what is likely to need it (a tokenizer can be slow); anything a concurrent
            # writer changed meanwhile is cut under the lock below.
            before = self._existing(conn, v, list(paths), list(unique))
            cuts: dict[tuple[str, str], tuple[list[str], str]] = {}
            todo = [d for key, d in unique.items() if before.get(key, (0, None))[1] != d.hash]
            for d, c in zip(todo, cut(todo, splitter, max_tokens)):
                cuts[(d.kind, d.item_id)] = c
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
                state = self._state(conn, fresh=True)
                existing = self._existing(conn, v, list(paths), list(unique))
                meta, changed, added = [], [], []
                for key, d in unique.items():
                    row = existing.get(key)
                    if row is not None and row[1] == d.hash:
                        meta.append((row[0], d))
                    elif row is not None:
                        changed.append((row[0], d))
                    else:
                        added.append(d)
                gone = [row[0] for key, row in existing.items() if key not in unique]
                missing = [d for _, d in changed] + added
                late = [d for d in missing if (d.kind, d.item_id) not in cuts]
                for d, c in zip(late, cut(late, splitter, max_tokens)):
                    cuts[(d.kind, d.item_id)] = c
                report.metadata_only, report.docs_changed = len(meta), len(changed)
                report.docs_added, report.docs_removed = len(added), len(gone)
                tables = self._vec_tables(state)
                dn, dw = self._delete_chunks(conn, v, gone + [doc_id for doc_id, _ in changed], tables)
                for part in _slices(gone):
                    conn.execute(self._sql(v, "DELETE FROM {docs} WHERE doc_id = ANY(%s::bigint[])"), (list(part),))
                self._update_meta(conn, v, meta, report.problems)
                doc_ids = self._write_docs(conn, v, changed, added, cuts, report.problems)
                rows = []
                for d in missing:
                    texts, _how = cuts[(d.kind, d.item_id)]
                    doc_id = doc_ids[(d.kind, d.item_id)]
                    rows += [(doc_id, j, d.kind, text) for j, text in enumerate(texts)]
                n_in, w_in = self._insert_chunks(conn, v, rows)
                gone_paths = [p for p, b in paths.items() if b is None]
                for part in _slices(gone_paths):
                    conn.execute(self._sql(v, "DELETE FROM {files} WHERE path = ANY(%s::text[])"), (list(part),))
                for part in _slices(live):
                    conn.execute(self._sql(v, "INSERT INTO {files} (path, blob) SELECT * FROM unnest(%s::text[], "
                                              "%s::text[]) ON CONFLICT (path) DO UPDATE SET blob = excluded.blob"),
                                 (list(part), [paths[p] for p in part]))
                conn.execute("UPDATE memvault.vaults SET nchunks = nchunks + %s, nwords = nwords + %s, "
                             "indexed_head = coalesce(%s, indexed_head), updated = now() WHERE vault_id = %s",
                             (n_in - dn, w_in - dw, head, v))
            if n_in >= 10_000:
                # A bulk load: new GIN entries wait in the index's pending list (every search scans it, and the
                # planner prices it high) and the planner has no statistics yet; do now what autovacuum would.
                conn.execute("SELECT gin_clean_pending_list(to_regclass(%s))", (f"{SCHEMA}.v{v}_chunks_tsv",))
                conn.execute(self._sql(v, "ANALYZE {chunks}, {docs}"))
            self._state_cache = None
            report.chunks_pending = self._pending(conn, v)
        report.seconds = time.perf_counter() - started
        return report

    def _existing(self, conn: Any, v: int, paths: list[str], keys: list[tuple[str, str]]
                  ) -> dict[tuple[str, str], tuple[int, str]]:
        """(kind, item_id) -> (doc_id, hash) of the docs in ``paths`` and of ``keys`` wherever they are."""
        out: dict[tuple[str, str], tuple[int, str]] = {}
        for part in _slices(paths):
            for doc_id, kind, item_id, h in conn.execute(
                    self._sql(v, "SELECT doc_id, kind, item_id, hash FROM {docs} WHERE path = ANY(%s::text[])"),
                    (list(part),)):
                out[(kind, item_id)] = (doc_id, h)
        wanted = [k for k in keys if k not in out]
        for part in _slices(wanted):
            for doc_id, kind, item_id, h in conn.execute(
                    self._sql(v, "SELECT d.doc_id, d.kind, d.item_id, d.hash FROM {docs} d JOIN unnest(%s::text[], "
                                 "%s::text[]) AS k(kind, item_id) ON d.kind = k.kind AND d.item_id = k.item_id"),
                    ([k for k, _ in part], [i for _, i in part])):
                out[(kind, item_id)] = (doc_id, h)
        return out

    def _vec_tables(self, state: _State) -> list[Any]:
        return [self._vec(state.vault_id, m) for m in {state.live_model, state.next_model} if m is not None]

    def _delete_chunks(self, conn: Any, v: int, doc_ids: list[int], vec_tables: list[Any]) -> tuple[int, int]:
        """Delete the chunks of ``doc_ids`` with their vectors (pending rows cascade), keeping document
        frequencies exact; returns (chunks, words) removed."""
        from psycopg import sql

        n = w = 0
        for part in _slices(doc_ids):
            vec_deletes = sql.SQL("").join(
                sql.SQL(", v{} AS (DELETE FROM {} WHERE chunk_id IN (SELECT chunk_id FROM gone))").format(
                    sql.SQL(str(i)), t) for i, t in enumerate(vec_tables))
            row = conn.execute(self._sql(v, """
                WITH gone AS (DELETE FROM {chunks} WHERE doc_id = ANY(%s::bigint[])
                              RETURNING chunk_id, tsv, nwords){vec},
                df AS (UPDATE {lexemes} l SET df = l.df - g.n
                       FROM (SELECT u.lexeme, count(*) AS n FROM gone, unnest(gone.tsv) AS u GROUP BY u.lexeme) g
                       WHERE l.lexeme = g.lexeme)
                SELECT count(*), coalesce(sum(nwords), 0) FROM gone""", vec=vec_deletes), (list(part),)).fetchone()
            n, w = n + int(row[0]), w + int(row[1])
        return n, w

    def _insert_chunks(self, conn: Any, v: int, rows: list[tuple[int, int, str, str]]) -> tuple[int, int]:
        """Insert (doc_id, chunk, kind, text) rows, each pending, counting their lexemes; returns (chunks, words)."""
        n = w = 0
        for part in _slices(rows):
            row = conn.execute(self._sql(v, """
                WITH ins AS (
                    INSERT INTO {chunks} (doc_id, chunk, kind, text, hash, nwords)
                    SELECT * FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::text[], %s::bytea[], %s::int[])
                    RETURNING chunk_id, tsv, nwords),
                p AS (INSERT INTO {pending} (chunk_id) SELECT chunk_id FROM ins),
                df AS (INSERT INTO {lexemes} AS l (lexeme, df)
                       SELECT u.lexeme, count(*) FROM ins, unnest(ins.tsv) AS u GROUP BY u.lexeme
                       ON CONFLICT (lexeme) DO UPDATE SET df = l.df + excluded.df)
                SELECT count(*), coalesce(sum(nwords), 0) FROM ins"""),
                ([r[0] for r in part], [r[1] for r in part], [r[2] for r in part], [r[3] for r in part],
                 [text_sha256(r[3]) for r in part], [len(_WORD.findall(r[3])) for r in part])).fetchone()
            n, w = n + int(row[0]), w + int(row[1])
        return n, w

    _DOC_COLUMNS = ("path", "header", "body", "hash", "cut", "importance", "confidence", "source", "created",
                    "updated", "valid_until", "review_after", "ekind", "ref", "meta", "context")
    _DOC_TYPES = ("text", "text", "text", "text", "text", "float8", "float8", "text", "timestamptz", "timestamptz",
                  "date", "float8", "text", "text", "text", "text")

    def _doc_values(self, d: Doc, how: str, problems: list[str]) -> tuple[Any, ...]:
        where = f"{d.path} ({d.kind} {d.item_id})"
        return (d.path, d.header, d.body, d.hash, how, float(d.importance), float(d.confidence), d.source,
                _time(d.created, problems, f"{where} created"), _time(d.updated, problems, f"{where} updated"),
                _day(d.valid_until, problems, f"{where} valid_until"),
                float(d.review_after) if d.review_after is not None else None, d.ekind, d.ref, d.meta,
                getattr(d, "context", None))

    def _write_docs(self, conn: Any, v: int, changed: list[tuple[int, Doc]], added: list[Doc],
                    cuts: dict[tuple[str, str], tuple[list[str], str]], problems: list[str]
                    ) -> dict[tuple[str, str], int]:
        """Rewrite changed docs and insert new ones; (kind, item_id) -> doc_id of both."""
        from psycopg import sql

        cols = self._DOC_COLUMNS
        casts = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in self._DOC_TYPES)
        names = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
        out: dict[tuple[str, str], int] = {}
        for part in _slices(changed):
            values = [self._doc_values(d, cuts[(d.kind, d.item_id)][1], problems) for _, d in part]
            sets = sql.SQL(", ").join(sql.SQL("{c} = u.{c}").format(c=sql.Identifier(c)) for c in cols)
            conn.execute(self._sql(v, "UPDATE {docs} d SET {sets} FROM unnest(%s::bigint[], {casts}) "
                                      "AS u(doc_id, {names}) WHERE d.doc_id = u.doc_id",
                                   sets=sets, casts=casts, names=names),
                         [[doc_id for doc_id, _ in part], *map(list, zip(*values))])
            out.update({(d.kind, d.item_id): doc_id for doc_id, d in part})
        for part in _slices(added):
            values = [self._doc_values(d, cuts[(d.kind, d.item_id)][1], problems) for d in part]
            sets = sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c)) for c in cols)
            rows = conn.execute(self._sql(v, "INSERT INTO {docs} (kind, item_id, {names}) SELECT * FROM "
                                             "unnest(%s::text[], %s::text[], {casts}) ON CONFLICT (kind, item_id) "
                                             "DO UPDATE SET {sets} RETURNING doc_id, kind, item_id",
                                      names=names, casts=casts, sets=sets),
                                [[d.kind for d in part], [d.item_id for d in part], *map(list, zip(*values))])
            out.update({(kind, item_id): doc_id for doc_id, kind, item_id in rows})
        return out

    def _update_meta(self, conn: Any, v: int, meta: list[tuple[int, Doc]], problems: list[str]) -> None:
        """Refresh the fields recall ranks on, for docs whose text is unchanged (rows that differ only)."""
        from psycopg import sql

        text_columns = ("header", "body", "hash", "cut", "context")  # all in the hash: unchanged when it is
        cols = [c for c in self._DOC_COLUMNS if c not in text_columns]
        types = [t for c, t in zip(self._DOC_COLUMNS, self._DOC_TYPES) if c not in text_columns]
        casts = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in types)
        names = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
        sets = sql.SQL(", ").join(sql.SQL("{c} = u.{c}").format(c=sql.Identifier(c)) for c in cols)
        old = sql.SQL(", ").join(sql.SQL("d.{c}").format(c=sql.Identifier(c)) for c in cols)
        new = sql.SQL(", ").join(sql.SQL("u.{c}").format(c=sql.Identifier(c)) for c in cols)
        for part in _slices(meta):
            full = [self._doc_values(d, "", problems) for _, d in part]
            values = [tuple(x for c, x in zip(self._DOC_COLUMNS, row) if c in cols) for row in full]
            conn.execute(self._sql(v, "UPDATE {docs} d SET {sets} FROM unnest(%s::bigint[], {casts}) "
                                      "AS u(doc_id, {names}) WHERE d.doc_id = u.doc_id "
                                      "AND ({old}) IS DISTINCT FROM ({new})",
                                   sets=sets, casts=casts, names=names, old=old, new=new),
                         [[doc_id for doc_id, _ in part], *map(list, zip(*values))])

    # -- phase 2: vectors ---------------------------------------------------------------------------------
    def pending(self) -> int:
        """Chunks without a vector of the live model, plus docs still cut by words (each at least one chunk)."""
        with self._errors("pending") as conn:
            return self._pending(conn, self._state(conn).vault_id)

    def _pending(self, conn: Any, v: int) -> int:
        row = conn.execute(self._sql(v, "SELECT (SELECT count(*) FROM {pending}), "
                                        "(SELECT count(*) FROM {docs} WHERE cut = 'words')")).fetchone()
        return int(row[0]) + int(row[1])

    def embed(self, embedder: Any, *, limit: int | None = None, progress: Callable[[int, int], None] | None = None,
              report: SyncReport | None = None, wait: bool = False) -> SyncReport:
        """Phase 2: give pending chunks (at most ``limit``) vectors of the live model, in batches, each its own
        short transaction: vectors from the cache first, the rest embedded (and cached). With no live model yet,
        the embedder's becomes the live model. An embedder of another model is refused with a warning (see
        :meth:`switch_model`). When another host is embedding this vault, returns at once unless ``wait``."""
        report = report or SyncReport()
        with self._errors("embed") as conn:
            state = self._state(conn, fresh=True)
            if state.live_identity is None:
                state = self._adopt(conn, state, embedder.identity)
            identity = state.live_identity
            assert identity is not None and state.live_model is not None
            if not embedder.identity.same_vectors(identity):
                report.warnings.append(f"the shared index of {self.vault!r} holds vectors of {identity.name}; "
                                       f"{embedder.identity.name} is configured: switch the shared index's model "
                                       "(memvault reindex) or configure the same model")
                report.chunks_pending = self._pending(conn, state.vault_id)
                return report
            v = state.vault_id
            with self._session_lock(conn, LOCK_EMBED, v, wait=wait) as mine:
                if not mine:
                    report.chunks_pending = self._pending(conn, v)
                    return report
                self._recut_words(conn, v, embedder)
                total = int(conn.execute(self._sql(v, "SELECT count(*) FROM {pending}")).fetchone()[0])
                goal = total if limit is None else min(limit, total)
                source = self._sql(v, "FROM {pending} p JOIN {chunks} c ON c.chunk_id = p.chunk_id "
                                      "JOIN {docs} d ON d.doc_id = c.doc_id WHERE p.chunk_id > %s")
                ok = self._fill(conn, v, state.live_model, identity, embedder, source, goal, progress, report,
                                live=True)
                if ok and goal == total:
                    # The graph is built once the table is loaded (in bulk, much faster than row by row), and
                    # never by a call capped by ``limit`` (recall's): a build at 1M rows takes many minutes.
                    self._ensure_hnsw(conn, self._vec(v, state.live_model), v, state.live_model)
            report.model_loaded = True
            report.chunks_pending = self._pending(conn, v)
        return report

    def _adopt(self, conn: Any, state: _State, identity: ModelIdentity) -> _State:
        """Make ``identity`` the live model of a vault that has none (its vector table created, without HNSW: the
        first embed() loads in bulk and builds the graph once at the end)."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, state.vault_id))
            current = self._state(conn, fresh=True)
            if current.live_identity is None:
                model_id = _register_model(conn, identity)
                self._create_vec_table(conn, current.vault_id, model_id, identity)
                conn.execute("UPDATE memvault.vaults SET live_model = %s, live_identity = %s, updated = now() "
                             "WHERE vault_id = %s", (model_id, json.dumps(identity.to_dict()), current.vault_id))
        return self._state(conn, fresh=True)

    def _create_vec_table(self, conn: Any, v: int, model_id: int, identity: ModelIdentity) -> None:
        from psycopg import sql

        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (chunk_id bigint PRIMARY KEY, kind text NOT NULL, "
                             "embedding vector({}) NOT NULL)").format(self._vec(v, model_id),
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
                                 "(embedding vector_cosine_ops) WITH (m = {}, ef_construction = {})").format(
                sql.Identifier(name), table, sql.Literal(HNSW_M), sql.Literal(HNSW_EF_CONSTRUCTION)))
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
        table = self._vec(v, model_id)
        done, after, restarted = 0, 0, False
        while done < goal:
            size = min(FETCH_BATCH, goal - done)
            rows = conn.execute(self._sql(v, "SELECT c.chunk_id, c.hash, c.text, d.context {source} "
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
                    conn.execute(self._sql(v, "DELETE FROM {pending} p USING {vec} x WHERE p.chunk_id = "
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
            have = _cache_hits(conn, model_id, list(texts))
            misses = {h: t for h, t in texts.items() if h not in have}
            report.chunks_from_cache += len(texts) - len(misses)
            self.cache_hits += len(texts) - len(misses)
            self._embed_into(identity, embedder, misses, lambda items: _cache_store(conn, model_id, items), report)
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
            blobs = _rows_of(embedder.embed_documents([t for _, t in group]))
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
            conn.execute(self._sql(v, """
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
        conn.execute(self._sql(v, "INSERT INTO {vec} (chunk_id, kind, embedding) SELECT c.chunk_id, c.kind, u.e "
                                  "FROM unnest(%s::bigint[], %b::vector[]) AS u(id, e) CROSS JOIN LATERAL "
                                  "(SELECT chunk_id, kind FROM {chunks} WHERE chunk_id = u.id LIMIT 1) c "
                                  "ON CONFLICT (chunk_id) DO NOTHING", vec=table),
                     (ids, [_Vector(b) for b in blobs]))

    def _recut_words(self, conn: Any, v: int, splitter: Any, batch: int = 256) -> int:
        """Re-cut docs cut by words (applied while no model was at hand) with the model's tokenizer; chunks whose
        text does not change keep their rows and vectors. Returns the docs re-cut."""
        done, after = 0, 0
        while True:
            rows = conn.execute(self._sql(v, "SELECT doc_id, hash, header, body, kind FROM {docs} "
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
                state = self._state(conn, fresh=True)
                current = dict(conn.execute(self._sql(v, "SELECT doc_id, hash FROM {docs} "
                                                         "WHERE doc_id = ANY(%s::bigint[])"),
                                            ([r[0] for r in rows],)).fetchall())
                old: dict[int, list[str]] = {}
                for doc_id, text in conn.execute(self._sql(v, "SELECT doc_id, text FROM {chunks} WHERE doc_id = "
                                                              "ANY(%s::bigint[]) ORDER BY doc_id, chunk"),
                                                 ([r[0] for r in rows],)):
                    old.setdefault(doc_id, []).append(text)
                redo, fresh = [], []
                for (doc_id, h, _header, _body, kind), (texts, _how) in zip(rows, cuts):
                    if current.get(doc_id) != h:
                        continue  # changed meanwhile: whoever wrote it cut its new text
                    if old.get(doc_id, []) != texts:
                        redo.append(doc_id)
                        fresh += [(doc_id, j, kind, t) for j, t in enumerate(texts)]
                dn, dw = self._delete_chunks(conn, v, redo, self._vec_tables(state))
                n_in, w_in = self._insert_chunks(conn, v, fresh)
                conn.execute(self._sql(v, "UPDATE {docs} d SET cut = 'model' FROM unnest(%s::bigint[], %s::text[]) "
                                          "AS u(doc_id, hash) WHERE d.doc_id = u.doc_id AND d.hash = u.hash"),
                             ([r[0] for r in rows], [r[1] for r in rows]))
                conn.execute("UPDATE memvault.vaults SET nchunks = nchunks + %s, nwords = nwords + %s "
                             "WHERE vault_id = %s", (n_in - dn, w_in - dw, v))
            done += len(rows)

    def switch_model(self, embedder: Any, *, progress: Callable[[int, int], None] | None = None,
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
        with self._errors("switch model") as conn:
            state = self._state(conn, fresh=True)
            if state.live_identity is None:
                return self.embed(embedder, progress=progress, report=report, wait=wait)
            v = state.vault_id
            if new.same_vectors(state.live_identity):
                report.chunks_pending = self._pending(conn, v)
                return report
            if vector_key(new) == vector_key(state.live_identity):
                # Same document vectors (only the query prefix differs): record the identity, re-embed nothing.
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
                    conn.execute("UPDATE memvault.vaults SET live_identity = %s, updated = now() WHERE vault_id = %s",
                                 (json.dumps(new.to_dict()), v))
                self._state_cache = None
                report.chunks_pending = self._pending(conn, v)
                return report
            with self._session_lock(conn, LOCK_SWITCH, v, wait=wait) as mine:
                if not mine:
                    report.warnings.append(f"another host is switching the shared index of {self.vault!r} to a new "
                                           f"model; recall uses {state.live_identity.name} until it is done")
                    report.chunks_pending = self._pending(conn, v)
                    return report
                state = self._state(conn, fresh=True)
                assert state.live_identity is not None
                if new.same_vectors(state.live_identity):  # the host we waited for did it
                    report.chunks_pending = self._pending(conn, v)
                    return report
                if new.max_tokens < state.live_identity.max_tokens:
                    report.warnings.append(f"{new.name} reads {new.max_tokens} tokens, the chunks were cut for "
                                           f"{state.live_identity.max_tokens}: longer chunks are embedded by their "
                                           "head until the vault is re-indexed from scratch")
                self._switch(conn, state, embedder, progress, report)
            report.model_loaded = True
            report.chunks_pending = self._pending(conn, v)
        report.seconds = time.perf_counter() - started
        return report

    def _switch(self, conn: Any, state: _State, embedder: Any, progress: Callable[[int, int], None] | None,
                report: SyncReport) -> None:
        from psycopg import sql

        v, new = state.vault_id, embedder.identity
        model_id = _register_model(conn, new)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
            current = self._state(conn, fresh=True)
            if current.next_model not in (None, model_id):  # an abandoned build of a third model
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._vec(v, current.next_model)))
            self._create_vec_table(conn, v, model_id, new)
            conn.execute("UPDATE memvault.vaults SET next_model = %s WHERE vault_id = %s", (model_id, v))
        table = self._vec(v, model_id)
        source = self._sql(v, "FROM {chunks} c JOIN {docs} d ON d.doc_id = c.doc_id WHERE c.chunk_id > %s "
                              "AND NOT EXISTS (SELECT 1 FROM {vec} x WHERE x.chunk_id = c.chunk_id)", vec=table)
        total = int(conn.execute(self._sql(v, "SELECT count(*) FROM {chunks}")).fetchone()[0])
        if not self._fill(conn, v, model_id, new, embedder, source, total, progress, report, live=False):
            report.warnings.append("the model switch was cancelled by another host (the vault was dropped or "
                                   "switched to another model)")
            return
        self._ensure_hnsw(conn, table, v, model_id)
        missing = self._sql(v, "SELECT count(*) FROM {chunks} c WHERE NOT EXISTS "
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
        self._state_cache = None
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        try:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._vec(v, old)))
        except _psycopg().errors.LockNotAvailable:
            report.warnings.append(f"the old vector table of {self.vault!r} is still being read; it is dropped by "
                                   "the next ensure()")
        finally:
            conn.execute("RESET lock_timeout")

    def _flip(self, conn: Any, v: int, model_id: int, identity: ModelIdentity, embedder: Any, report: SyncReport,
              *, final: bool) -> bool:
        """Make ``model_id`` live if its table has a vector for every chunk (``final``: first embed the few that
        lack one, holding the write lock). False when not complete and not final."""
        table = self._vec(v, model_id)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
            row = conn.execute("SELECT next_model FROM memvault.vaults WHERE vault_id = %s", (v,)).fetchone()
            if row is None or row[0] != model_id:
                return False
            missing = conn.execute(self._sql(v, "SELECT c.chunk_id, c.hash, c.text, d.context FROM {chunks} c "
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
            conn.execute(self._sql(v, "DELETE FROM {pending}"))  # complete: nothing waits for the new model
        return True

    def _drop_retired(self, conn: Any, state: _State) -> None:
        """Drop vector tables of this vault that are neither live nor being built (a flip whose drop timed out,
        a crashed switch); skipped while a switch runs."""
        from psycopg import sql

        v = state.vault_id
        with self._session_lock(conn, LOCK_SWITCH, v, wait=False) as mine:
            if not mine:
                return
            state = self._state(conn, fresh=True)
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
                except _psycopg().errors.LockNotAvailable:
                    pass  # still read: next time
                finally:
                    conn.execute("RESET lock_timeout")

    # -- search -------------------------------------------------------------------------------------------
    def _terms(self, conn: Any, v: int, query: str) -> _Terms | None:
        """The query's words as lexemes with their document frequencies, in one round trip."""
        tokens = _words(query)[: MAX_TERMS * 2]
        keywords = list(dict.fromkeys(w for t in query_terms(query) for w in _words(t)))[:MAX_TERMS]
        asked = list(dict.fromkeys(tokens + keywords))
        if not asked:
            return None
        rows = conn.execute(self._sql(v, """
            SELECT t.tok, l.lexeme, coalesce(x.df, 0), s.nchunks, s.nwords
            FROM unnest(%s::text[]) AS t(tok)
            CROSS JOIN (SELECT nchunks, nwords FROM memvault.vaults WHERE vault_id = %s) s
            LEFT JOIN LATERAL (SELECT u.lexeme FROM unnest(to_tsvector('english', t.tok)) AS u LIMIT 1) l ON true
            LEFT JOIN {lexemes} x ON x.lexeme = l.lexeme"""), (asked, v)).fetchall()
        if not rows:
            return None
        lex = {r[0]: (r[1], int(r[2])) for r in rows}
        n, words = int(rows[0][3]), int(rows[0][4])
        lexemes = {lex[w][0]: lex[w][1] for w in keywords if lex[w][0] is not None}
        # Consecutive words of the query that both survive as lexemes, at their distance (stop words between
        # them count, as the stored positions do): the proximity signal of FTS5's word pairs.
        placed = [(i, lex[t][0], lex[t][1]) for i, t in enumerate(tokens) if lex[t][0] is not None]
        phrases: list[tuple[str, int]] = []
        pair_words: list[tuple[str, str]] = []
        for (i, a, da), (j, b, db) in itertools.pairwise(placed):
            q = f"{_lexeme(a)} <{j - i}> {_lexeme(b)}" if j - i > 1 else f"{_lexeme(a)} <-> {_lexeme(b)}"
            if q not in [p for p, _ in phrases]:
                phrases.append((q, min(da, db)))
                pair_words.append((a, b))
        exact = None
        exact_words: list[str] = []
        if len(tokens) >= 3 and len(placed) >= 2:
            parts = [_lexeme(placed[0][1])]
            for (i, _a, _da), (j, b, _db) in itertools.pairwise(placed):
                parts.append(f"<{j - i}>" if j - i > 1 else "<->")
                parts.append(_lexeme(b))
            exact = (" ".join(parts), min(d for _, _, d in placed))
            exact_words = list(dict.fromkeys(lx for _, lx, _ in placed))
        return _Terms(lexemes, phrases, pair_words, exact, exact_words, n, words / n if n else 1.0)

    def _keyword_sql(self, v: int, terms: _Terms, kinds: Sequence[str], limit: int) -> tuple[Any, tuple] | None:
        """The scoring query of :meth:`search_keywords` (see the common-word rule in the module doc).

        Run unprepared (always a custom plan): whether the planner should read a few thousand rows in order or walk
        the GIN index depends on how common the words are, which a generic plan of ``tsv @@ $1`` cannot know.
        Candidates are first ranked by BM25 with term frequency 1 (one ``tsv @@ lexeme`` test per term: ~2 us a
        candidate); the best PRESCORE of them are then scored by full BM25 (term frequencies from the positions:
        ~7 us a candidate, the cost that made scoring every candidate slow)."""
        from psycopg import sql

        kf = _kind_filter(kinds)
        present = {lx: df for lx, df in terms.lexemes.items() if df > 0}
        if kf is None or not present or limit <= 0:
            return None
        order = sorted(present, key=lambda lx: (present[lx], lx))
        generators, spent = [], 0
        for lx in order:
            if spent + present[lx] > CANDIDATE_BUDGET:
                break
            generators.append(lx)
            spent += present[lx]
        names = list(present)
        idf = [_idf(terms.n, present[lx]) for lx in names]
        cand, cand_params = self._candidates(v, generators, names, kf)
        presence = sql.SQL(" + ").join(sql.SQL("CASE WHEN tsv @@ %s::tsquery THEN %s ELSE 0 END") for _ in names)
        query = self._sql(v, """
            WITH cand AS MATERIALIZED ({cand}),
            pre AS (SELECT chunk_id, tsv, nwords, ({presence}) / (1 + %s * (1 - %s + %s * nwords / %s)) AS s0
                    FROM cand ORDER BY s0 DESC, chunk_id LIMIT %s)
            SELECT pre.chunk_id,
                   sum((%s::float8[])[array_position(%s::text[], u.lexeme)] * (u.tf * %s)
                       / (u.tf + %s * (1 - %s + %s * pre.nwords / %s))) AS score
            FROM pre
            CROSS JOIN LATERAL (
                SELECT t.lexeme, coalesce(array_length(t.positions, 1), 1) AS tf
                FROM unnest(ts_filter(setweight(pre.tsv, 'A', %s::text[]), '{{a}}')) AS t) u
            GROUP BY pre.chunk_id
            ORDER BY score DESC, pre.chunk_id
            LIMIT %s""", cand=cand, presence=presence)
        avg = max(terms.avg, 1.0)
        params = [*cand_params]
        for lx, w in zip(names, idf):
            params += [_lexeme(lx), w]
        params += [K1, B, B, avg, max(PRESCORE, 2 * limit), idf, names, K1 + 1, K1, B, B, avg, names, limit]
        return query, tuple(params)

    def _candidates(self, v: int, generators: list[str], names: list[str], kf: str) -> tuple[Any, tuple]:
        """The candidate rows of a keyword query: those holding a generating lexeme, or (none generates: every
        word is common) the first SCAN_CAP chunks holding all the words, topped up with chunks holding any."""
        if generators:
            return (self._sql(v, "SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery"),
                    ("(" + " | ".join(map(_lexeme, generators)) + ")" + kf,))
        all_q = "(" + " & ".join(map(_lexeme, names)) + ")" + kf
        any_q = "(" + " | ".join(map(_lexeme, names)) + ")" + kf
        # The top-up's LIMIT is what the first part left of the cap: 0 when it filled it, and a LIMIT 0 node
        # never runs its scan (without that, a top-up over words that every chunk holds reads the whole table).
        return (self._sql(v, """
                    WITH a AS MATERIALIZED (SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery
                                            LIMIT %s)
                    SELECT * FROM a
                    UNION ALL
                    SELECT * FROM (SELECT chunk_id, tsv, nwords FROM {chunks}
                                   WHERE tsv @@ %s::tsquery AND NOT tsv @@ %s::tsquery
                                   LIMIT greatest(0, %s - (SELECT count(*) FROM a))) o"""),
                (all_q, SCAN_CAP, any_q, all_q, SCAN_CAP))

    def _phrase_sql(self, v: int, terms: _Terms, kinds: Sequence[str], limit: int) -> tuple[Any, tuple] | None:
        """The scoring query of :meth:`search_phrases`: each phrase a term (frequency 1) whose df is counted among
        the candidates."""
        from psycopg import sql

        kf = _kind_filter(kinds)
        phrases = [(q, df, pair) for (q, df), pair in zip(terms.phrases, terms.pair_words) if df > 0]
        if kf is None or not phrases or limit <= 0:
            return None
        order = sorted(range(len(phrases)), key=lambda i: phrases[i][1])
        generators, spent = [], 0
        for i in order:
            if spent + phrases[i][1] > CANDIDATE_BUDGET:
                break
            generators.append(i)
            spent += phrases[i][1]
        all_q = "(" + " | ".join(f"({q})" for q, _, _ in phrases) + ")" + kf
        if generators:
            cand = self._sql(v, "SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery")
            cand_params: tuple = ("(" + " | ".join(f"({phrases[i][0]})" for i in generators) + ")" + kf,)
        else:
            both = "(" + " | ".join(f"({_lexeme(a)} & {_lexeme(b)})" for _, _, (a, b) in phrases) + ")" + kf
            cand = self._sql(v, "SELECT * FROM (SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery "
                                "LIMIT %s) s WHERE s.tsv @@ %s::tsquery")
            cand_params = (both, SCAN_CAP, all_q)
        # A phrase that generated candidates has all its matches among them (its df is exact); for the others
        # the df of their rarer word is an upper bound, used so common pairs do not weigh like rare ones.
        floors = [0 if i in generators else df for i, (_q, df, _p) in enumerate(phrases)]
        k = range(len(phrases))
        matches = sql.SQL(", ").join(sql.SQL("tsv @@ %s::tsquery AS {}").format(sql.Identifier(f"m{i}")) for i in k)
        counts = sql.SQL(", ").join(sql.SQL("greatest(count(*) FILTER (WHERE {m}), %s) AS {n}").format(
            m=sql.Identifier(f"m{i}"), n=sql.Identifier(f"n{i}")) for i in k)
        weight = sql.SQL(" + ").join(sql.SQL("CASE WHEN {m} THEN ln(1 + (%s - {n} + 0.5) / ({n} + 0.5)) ELSE 0 END")
                                     .format(m=sql.Identifier(f"m{i}"), n=sql.Identifier(f"n{i}")) for i in k)
        query = self._sql(v, """
            WITH cand AS MATERIALIZED ({cand}),
            m AS MATERIALIZED (SELECT chunk_id, nwords, {matches} FROM cand),
            n AS (SELECT {counts} FROM m)
            SELECT m.chunk_id, ({weight}) * %s / (1 + %s * (1 - %s + %s * m.nwords / %s)) AS score
            FROM m, n
            ORDER BY score DESC, m.chunk_id
            LIMIT %s""", cand=cand, matches=matches, counts=counts, weight=weight)
        n = max(terms.n, 1)
        params = [*cand_params, *(q for q, _, _ in phrases), *floors, *([n] * len(phrases)),
                  K1 + 1, K1, B, B, max(terms.avg, 1.0), limit]
        return query, tuple(params)

    def _exact_sql(self, v: int, terms: _Terms, kinds: Sequence[str], limit: int) -> tuple[Any, tuple] | None:
        kf = _kind_filter(kinds)
        if kf is None or terms.exact is None or terms.exact[1] == 0 or limit <= 0:
            return None
        phrase, df = terms.exact
        if df <= CANDIDATE_BUDGET:
            query = self._sql(v, "SELECT chunk_id FROM {chunks} WHERE tsv @@ %s::tsquery "
                                 "ORDER BY nwords, chunk_id LIMIT %s")
            return query, (f"({phrase}){kf}", limit)
        words = "(" + " & ".join(map(_lexeme, terms.exact_words)) + ")" + kf
        query = self._sql(v, "SELECT chunk_id FROM (SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ "
                             "%s::tsquery LIMIT %s) s WHERE s.tsv @@ %s::tsquery ORDER BY nwords, chunk_id LIMIT %s")
        return query, (words, SCAN_CAP, f"({phrase}){kf}", limit)

    def search_keywords(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk id, BM25) best first; any query term may match, rare terms weigh more, common terms only score
        what rarer ones found (the common-word rule in the module doc)."""
        with self._errors("keyword search") as conn:
            v = self._state(conn).vault_id
            terms = self._terms(conn, v, query)
            built = self._keyword_sql(v, terms, kinds, limit) if terms else None
            if built is None:
                return []
            return [(int(r[0]), float(r[1])) for r in conn.execute(*built, prepare=False)]

    def search_phrases(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk id, BM25-like score) of chunks holding two consecutive query words in order (stop words between
        them keep their distance): the proximity signal that tells the page with the exact line."""
        with self._errors("phrase search") as conn:
            v = self._state(conn).vault_id
            terms = self._terms(conn, v, query)
            built = self._phrase_sql(v, terms, kinds, limit) if terms else None
            if built is None:
                return []
            return [(int(r[0]), float(r[1])) for r in conn.execute(*built, prepare=False)]

    def search_exact(self, query: str, kinds: Sequence[str], limit: int) -> list[int]:
        """Chunks that contain the whole query word for word (three words or more), shortest first. Stop words
        are not indexed: they only keep their places (a query of stop words alone finds nothing)."""
        with self._errors("exact search") as conn:
            v = self._state(conn).vault_id
            terms = self._terms(conn, v, query)
            built = self._exact_sql(v, terms, kinds, limit) if terms else None
            if built is None:
                return []
            return [int(r[0]) for r in conn.execute(*built, prepare=False)]

    def _query_vector(self, state: _State, vector: Any) -> Any:
        blob = vector_blob(vector)
        identity = state.live_identity
        if identity is not None and len(blob) != 4 * int(identity.dims):
            raise SearchIndexError(f"the shared index of {self.vault!r} holds {identity.dims}-dimension vectors of "
                                   f"{identity.name}; the query vector has {len(blob) // 4}")
        return _Vector(blob)

    def _vector_sql(self, state: _State, kinds: Sequence[str], limit: int) -> tuple[Any, bool] | None:
        from psycopg import sql

        if state.live_model is None or limit <= 0 or not any(k in KINDS for k in kinds):
            return None
        table = self._vec(state.vault_id, state.live_model)
        filtered = not set(KINDS) <= set(kinds)
        # LIMIT as a literal: a generic plan of a prepared statement would guess at a parameter and might not
        # pick the HNSW index.
        query = sql.SQL("SELECT chunk_id, embedding <=> %b AS d FROM {} {} ORDER BY d LIMIT {}").format(
            table, sql.SQL("WHERE kind = ANY(%s::text[])") if filtered else sql.SQL(""), sql.Literal(int(limit)))
        return query, filtered

    def search_vectors(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) best first, from the live model's HNSW graph (ef_search = EF_SEARCH;
        a kind filter runs inside the index scan, iterative scans refill it)."""
        psycopg = _psycopg()
        for attempt in (0, 1):
            with self._errors("vector search") as conn:
                state = self._state(conn, fresh=attempt == 1)
                built = self._vector_sql(state, kinds, limit)
                if built is None:
                    return []
                query, filtered = built
                qvec = self._query_vector(state, vector)
                params = (qvec, [k for k in kinds if k in KINDS]) if filtered else (qvec,)
                try:
                    rows = conn.execute(query, params).fetchall()
                except psycopg.errors.UndefinedTable:
                    if attempt == 0:  # the model switched and the old table is gone: read the vault again
                        self._state_cache = None
                        continue
                    raise
                rows.sort(key=lambda r: (r[1], r[0]))  # relaxed order may return near-ties out of order
                return [(int(r[0]), 1.0 - float(r[1])) for r in rows]
        return []  # pragma: no cover

    def similarities(self, vector: Any, ids: Sequence[int]) -> dict[int, float]:
        """Cosine similarity of ``vector`` to the live vectors of the given chunks (those that have one)."""
        from psycopg import sql

        if not ids:
            return {}
        with self._errors("similarities") as conn:
            state = self._state(conn)
            if state.live_model is None:
                return {}
            rows = conn.execute(sql.SQL("SELECT chunk_id, 1 - (embedding <=> %b) FROM {} "
                                        "WHERE chunk_id = ANY(%s::bigint[])")
                                .format(self._vec(state.vault_id, state.live_model)),
                                (self._query_vector(state, vector), [int(i) for i in ids])).fetchall()
            return {int(r[0]): float(r[1]) for r in rows}

    # -- the fields behind chunk ids ----------------------------------------------------------------------
    _FIELDS_SQL = ("d.kind, d.item_id, d.path, d.body, d.importance, d.confidence, d.source, d.created, d.updated, "
                   "{chunk}, d.valid_until, d.review_after, d.ekind, d.ref, d.doc_id")

    @staticmethod
    def _fields(row: Sequence[Any]) -> dict[str, Any]:
        """A row of _FIELDS_SQL as the SQLite index gives it (times as RFC 3339 strings, a date as YYYY-MM-DD)."""
        out = dict(zip(DOC_FIELDS, row))
        for key in ("created", "updated"):
            if out[key] is not None:
                out[key] = format_time(out[key])
        if out["valid_until"] is not None:
            out["valid_until"] = out["valid_until"].isoformat()
        out["doc"] = int(out["doc"])
        return out

    def chunk_docs(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """chunk id -> its doc's fields (keys: memvault.index.search.DOC_FIELDS)."""
        if not ids:
            return {}
        with self._errors("chunk docs") as conn:
            v = self._state(conn).vault_id
            rows = conn.execute(self._sql(v, "SELECT c.chunk_id, " + self._FIELDS_SQL.format(chunk="c.chunk")
                                          + " FROM {chunks} c JOIN {docs} d ON d.doc_id = c.doc_id "
                                            "WHERE c.chunk_id = ANY(%s::bigint[])"),
                                ([int(i) for i in ids],)).fetchall()
        return {int(r[0]): self._fields(r[1:]) for r in rows}

    def coverage(self, query: str, chunk_id: int) -> float:
        """The share of the query's IDF weight that chunk ``chunk_id`` holds (recall's "nothing known" test), with
        the same IDF as the keyword search."""
        with self._errors("coverage") as conn:
            v = self._state(conn).vault_id
            terms = self._terms(conn, v, query)
            if terms is None or not terms.lexemes:
                return 0.0
            names = list(terms.lexemes)
            row = conn.execute(self._sql(v, "SELECT tsvector_to_array(ts_filter(setweight(tsv, 'A', %s::text[]), "
                                            "'{{a}}')) FROM {chunks} WHERE chunk_id = %s"),
                               (names, int(chunk_id))).fetchone()
        held = set(row[0]) if row is not None else set()
        weights = {lx: _idf(terms.n, df) for lx, df in terms.lexemes.items()}
        total = sum(weights.values())
        return sum(w for lx, w in weights.items() if lx in held) / total if total else 0.0

    def episode_neighbours(self, docs: dict[int, dict[str, Any]]) -> dict[int, list[int]]:
        """For the raw episodes among ``docs`` (chunk id -> fields), the chunk ids of the raw episodes just before
        and after each from the same source, at most NEIGHBOUR_GAP seconds away (one query)."""
        from .documents import NEIGHBOUR_GAP

        raw = [(cid, d) for cid, d in docs.items()
               if d.get("kind") == "episode" and d.get("ekind") == "raw" and d.get("created") and d.get("source")]
        if not raw:
            return {}
        problems: list[str] = []
        stamps = [_time(d["created"], problems, "created") for _, d in raw]
        with self._errors("episode neighbours") as conn:
            v = self._state(conn).vault_id
            side = ("SELECT c.chunk_id, d.created FROM {docs} d JOIN {chunks} c ON c.doc_id = d.doc_id AND c.chunk = 0 "
                    "WHERE d.kind = 'episode' AND d.ekind = 'raw' AND d.source = u.source AND (d.created, d.item_id) ")
            rows = conn.execute(self._sql(v, f"""
                SELECT u.cid, b.chunk_id, b.created, a.chunk_id, a.created
                FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::text[]) AS u(cid, source, created, item_id)
                LEFT JOIN LATERAL ({side} < (u.created, u.item_id) ORDER BY d.created DESC, d.item_id DESC LIMIT 1) b
                    ON true
                LEFT JOIN LATERAL ({side} > (u.created, u.item_id) ORDER BY d.created, d.item_id LIMIT 1) a ON true"""),
                                ([cid for cid, _ in raw], [d["source"] for _, d in raw], stamps,
                                 [d["id"] for _, d in raw])).fetchall()
        here = {cid: stamp for (cid, _), stamp in zip(raw, stamps)}
        out: dict[int, list[int]] = {}
        for cid, before, t_before, after, t_after in rows:
            found = [int(other) for other, t in ((before, t_before), (after, t_after))
                     if other is not None and here[cid] is not None
                     and abs((t - here[cid]).total_seconds()) <= NEIGHBOUR_GAP]
            if found:
                out[int(cid)] = found
        return out

    def runs_of(self, names: Sequence[str], per_name: int = 3) -> dict[str, list[dict[str, Any]]]:
        """The last ``per_name`` procedure_run episodes of each procedure, newest first (one query)."""
        if not names:
            return {}
        with self._errors("runs") as conn:
            v = self._state(conn).vault_id
            rows = conn.execute(self._sql(v, """
                SELECT n.name, r.item_id, r.created, r.body, r.path, r.meta
                FROM unnest(%s::text[]) AS n(name)
                CROSS JOIN LATERAL (SELECT item_id, created, body, path, meta FROM {docs}
                                    WHERE ref = n.name ORDER BY created DESC NULLS LAST LIMIT %s) r"""),
                                (list(names), per_name)).fetchall()
        out: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for name, item_id, created, body, path, meta in rows:
            out[name].append({"id": item_id, "created": format_time(created) if created is not None else None,
                              "text": body, "path": path, "meta": json.loads(meta or "{}")})
        return out

    def procedure_docs(self, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """name -> the fields of that procedure's doc (as chunk_docs gives them, for its first chunk)."""
        if not names:
            return {}
        with self._errors("procedure docs") as conn:
            v = self._state(conn).vault_id
            rows = conn.execute(self._sql(v, "SELECT " + self._FIELDS_SQL.format(chunk="c.chunk")
                                          + " FROM {docs} d JOIN {chunks} c ON c.doc_id = d.doc_id AND c.chunk = 0 "
                                            "WHERE d.kind = 'procedure' AND d.item_id = ANY(%s::text[])"),
                                (list(names),)).fetchall()
        return {r[1]: self._fields(r) for r in rows}

    def episodes_between(self, since: datetime | None, until: datetime | None, limit: int) -> list[dict[str, Any]]:
        """Episodes created in [since, until) (None for open), newest first."""
        low = since if since is not None else datetime(1, 1, 2, tzinfo=timezone.utc)
        high = until if until is not None else datetime(9999, 12, 30, tzinfo=timezone.utc)
        with self._errors("episodes") as conn:
            v = self._state(conn).vault_id
            rows = conn.execute(self._sql(v, "SELECT " + self._FIELDS_SQL.format(chunk="0")
                                          + " FROM {docs} d WHERE d.kind = 'episode' AND d.created >= %s "
                                            "AND d.created < %s ORDER BY d.created DESC LIMIT %s"),
                                (low, high, limit)).fetchall()
        return [self._fields(r) for r in rows]

    # -- maintenance --------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Items per kind, chunks, vectors, pending, model, and the bytes of the tables and indexes."""
        from psycopg import sql

        with self._errors("stats") as conn:
            state = self._read_state(conn)
            if state is None:
                return {"exists": False, "vault": self.vault}
            v = state.vault_id
            kinds = dict(conn.execute(self._sql(v, "SELECT kind, count(*) FROM {docs} GROUP BY kind")).fetchall())
            chunks = int(conn.execute(self._sql(v, "SELECT count(*) FROM {chunks}")).fetchone()[0])
            sizes = conn.execute(
                "SELECT pg_total_relation_size(to_regclass(%s)), pg_total_relation_size(to_regclass(%s)), "
                "pg_relation_size(to_regclass(%s))",
                (f"{SCHEMA}.v{v}_docs", f"{SCHEMA}.v{v}_chunks", f"{SCHEMA}.v{v}_chunks_tsv")).fetchone()
            vectors, table_bytes, hnsw_bytes = 0, None, None
            if state.live_model is not None:
                name = f"{SCHEMA}.v{v}_vec_{state.live_model}"
                vectors = int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    self._vec(v, state.live_model))).fetchone()[0])
                row = conn.execute("SELECT pg_relation_size(to_regclass(%s)), pg_relation_size(to_regclass(%s))",
                                   (name, f"{name}_hnsw")).fetchone()
                table_bytes, hnsw_bytes = row[0], row[1]
            return {
                "exists": True,
                "vault": self.vault,
                "url": _where(self.url),
                "items": {k: int(kinds.get(k, 0)) for k in KINDS},
                "chunks": chunks,
                "vectors": vectors,
                "pending_vectors": self._pending(conn, v),
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
            if method in ("search_keywords", "search_phrases", "search_exact"):
                query, kinds, limit = args
                terms = self._terms(conn, v, query)
                maker = {"search_keywords": self._keyword_sql, "search_phrases": self._phrase_sql,
                         "search_exact": self._exact_sql}[method]
                built = maker(v, terms, kinds, limit) if terms else None
            elif method == "search_vectors":
                vector, kinds, limit = args
                made = self._vector_sql(state, kinds, limit)
                if made is not None:
                    qvec = self._query_vector(state, vector)
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
