"""The shared database's schema: named, ordered migrations, each recorded, applied under an advisory lock.

- shared by all vaults (``GLOBAL_MIGRATIONS``, lock (28022, 0)): ``models`` (document-vector identities: name,
  revision, dims), ``vaults`` (name, live model, model being built, indexed git commit, BM25 totals),
  ``vault_migrations``, ``embedding_cache`` ((model, sha256 of the exact chunk text) -> vector), and the team's
  usage state;
- per vault ``<v>`` (``VAULT_MIGRATIONS``, tables named ``v<id>_...``, applied when the vault is registered, under
  the vault's write lock): ``docs`` (one row per memory, unique (kind, item_id), ids in byte order since 0005),
  ``chunks`` (exact text embedded, sha256, word count, a stored ``tsvector`` with GIN), ``pending`` (chunks
  without a vector of the live model), ``lexemes`` (document frequency of every lexeme, kept exact by each write:
  BM25's idf), ``files`` (path -> git blob indexed). The ``vec_<model>`` tables are created by :mod:`.vectors`
  when a model is adopted; 0002 makes the ones made before ``halfvec``.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ...rules.errors import SchemaTooNew, SearchIndexError
from .connection import LOCK_WRITE, one_line, psycopg_module, setup, where
from .tables import BUILD_MEMORY, HNSW_EF_CONSTRUCTION, HNSW_M, vsql

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
    (
        # Derived values kept with a vault's index, as the SQLite index keeps them in its meta table: the relevance
        # scale of the vault and model (memvault.core.calibration), measured once for the team.
        "0003_vault_meta",
        """
        CREATE TABLE memvault.vault_meta (
            vault_id int NOT NULL REFERENCES memvault.vaults ON DELETE CASCADE,
            key      text NOT NULL,
            value    text NOT NULL,
            PRIMARY KEY (vault_id, key)
        );
        """,
    ),
]

def _halfvec(conn: Any, v: int) -> None:
    """0002: the vault's vector tables hold ``halfvec`` (2 bytes a dimension instead of 4: issue 24). Each is
    rewritten in place (its float32 values rounded to float16) and its HNSW graph rebuilt on the new type; vectors
    already cached stay float32 in the embedding cache."""
    from psycopg import sql

    from .connection import SCHEMA

    tables = conn.execute(
        "SELECT c.relname, m.dims FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding' "
        "JOIN memvault.models m ON c.relname = %s || m.model_id "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND format_type(a.atttypid, NULL) = 'vector'",
        (f"v{v}_vec_", SCHEMA)).fetchall()
    for name, dims in tables:
        graph = f"{name}_hnsw"
        had = conn.execute("SELECT 1 FROM pg_class WHERE relname = %s AND relnamespace = %s::regnamespace",
                           (graph, SCHEMA)).fetchone() is not None
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(SCHEMA, graph)))
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding TYPE halfvec({}) USING embedding::halfvec({})")
                     .format(sql.Identifier(SCHEMA, name), sql.Literal(int(dims)), sql.Literal(int(dims))))
        if had:
            conn.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(sql.Literal(BUILD_MEMORY)))
            conn.execute(sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding halfvec_cosine_ops) WITH (m = {}, "
                                 "ef_construction = {})").format(sql.Identifier(graph), sql.Identifier(SCHEMA, name),
                                                                sql.Literal(HNSW_M),
                                                                sql.Literal(HNSW_EF_CONSTRUCTION)))


#: Per-vault migrations, formatted with the vault's table and index names (braces are placeholders), or a function
#: of the connection and the vault's id for what SQL alone cannot do.
VAULT_MIGRATIONS: list[tuple[str, str | Callable[[Any, int], None]]] = [
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
    ("0002_halfvec", _halfvec),
    # A runbook's steps (chunks numbered below 0, documents.chunk_rows) are vectors only: no lexeme. Every runbook
    # is re-cut at the next embedding, which adds its steps and keeps the vectors of windows that did not change.
    (
        "0003_runbook_steps",
        """
        ALTER TABLE {chunks} ALTER COLUMN tsv SET EXPRESSION AS (
            CASE WHEN chunk >= 0
                 THEN to_tsvector('english', regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))
                      || array_to_tsvector(ARRAY['kind ' || kind])
                 ELSE ''::tsvector END);
        UPDATE {docs} SET cut = 'words' WHERE kind = 'procedure';
        """,
    ),
    # Times to the millisecond, as they are shown and given back as bounds (a page's next bound, the time recall looks
    # up a turn's neighbours by): a line's time stored to the microsecond sorted above that bound (tables.to_time
    # truncates what is written from here on; timeutil.INDEX_TIME).
    (
        "0004_times_to_milliseconds",
        """
        UPDATE {docs} SET created = date_trunc('milliseconds', created), updated = date_trunc('milliseconds', updated)
        WHERE created <> date_trunc('milliseconds', created) OR updated <> date_trunc('milliseconds', updated);
        """,
    ),
    # Ids in byte order, as SQLite compares them. The queries say COLLATE "C" (a vault not migrated yet still
    # answers in that order), but an index only serves a comparison in its own collation: on a database created
    # en_US.UTF-8 or ICU, a turn's neighbours left the (source, created, item_id) index for the time index and
    # read every other source's turns in between, and a fact listing read every fact and sorted. Equality is the
    # same in every deterministic collation, so no id changes meaning. The table is not rewritten; the two indexes
    # on item_id are rebuilt while the vault's writes and reads wait (0.3 s at 100k docs, 4.3 s at 1M on the test
    # server); it waits at most MIGRATION_LOCK_TIMEOUT for the table first.
    (
        "0005_ids_in_byte_order",
        """
        ALTER TABLE {docs} ALTER COLUMN item_id TYPE text COLLATE "C";
        """,
    ),
]


#: Every migration name this memvault knows (global and per vault).
KNOWN = frozenset(name for name, _ in GLOBAL_MIGRATIONS) | frozenset(name for name, _ in VAULT_MIGRATIONS)


def _statements(script: str) -> list[str]:
    """Split a migration script on ';' at line ends (no migration has a ';' inside a statement)."""
    return [s.strip() for s in re.split(r";\s*\n", script) if s.strip()]


def _ensure_extension(conn: Any, url: str) -> None:
    """Install pgvector when it is missing (the caller holds the migrations lock: IF NOT EXISTS alone races)."""
    psycopg = psycopg_module()
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is not None:
        return
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        raise SearchIndexError(f"PostgreSQL at {where(url)}: the pgvector extension is not installed and this "
                               "role may not install it; a superuser must run CREATE EXTENSION vector") from None
    except psycopg.errors.FeatureNotSupported as exc:  # not on the server at all
        raise SearchIndexError(f"PostgreSQL at {where(url)}: pgvector is not available on the server "
                               f"({one_line(exc)})") from None


def _schema_current(conn: Any, url: str) -> bool:
    """Whether every global migration is recorded (False when the schema does not exist yet); SchemaTooNew when
    one is recorded that this memvault does not know."""
    psycopg = psycopg_module()
    try:
        done = {r[0] for r in conn.execute("SELECT name FROM memvault.migrations")}
    except psycopg.errors.UndefinedTable:
        return False
    refuse_newer(done, url)
    return all(name in done for name, _ in GLOBAL_MIGRATIONS)


def refuse_newer(recorded: set[str] | frozenset[str], url: str) -> None:
    """SchemaTooNew when ``recorded`` (migrations the shared index records, global or a vault's) names one this
    memvault does not know: a teammate's newer memvault migrated it, and this one would write the replaced form."""
    unknown = sorted(recorded - KNOWN)
    if unknown:
        raise SchemaTooNew(f"shared index at {where(url)}", unknown)


def migrate_global(conn: Any, url: str) -> list[str]:
    """Apply the global migrations this database has not recorded, under the migrations lock."""
    if _schema_current(conn, url):
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
    setup(conn)  # pgvector's types, now that it is installed
    return applied


#: How long a vault migration waits for a table lock, once it holds the vault's write lock. ALTER TABLE waits for
#: every session with a transaction open on the table (a backup, a psql session, an older memvault's query), and
#: every recall of the vault queues behind its request meanwhile: better to give up and try at the next ensure().
MIGRATION_LOCK_TIMEOUT = "5s"

#: Index names the vault migrations create (formatted like the tables: ``v<id>_<name>``).
VAULT_INDEXES = ("docs_path", "docs_runs", "docs_episodes", "docs_words", "docs_turns", "chunks_tsv")


def migrate_vault(conn: Any, v: int) -> list[str]:
    """Apply the vault migrations vault ``v`` has not recorded, under its write lock; the names applied."""
    from psycopg import sql

    done = {r[0] for r in conn.execute("SELECT name FROM memvault.vault_migrations WHERE vault_id = %s", (v,))}
    if all(name in done for name, _ in VAULT_MIGRATIONS):
        return []
    applied: list[str] = []
    name = ""
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
            # After the write lock: another host migrating (or writing) is waited for as long as it takes.
            conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(MIGRATION_LOCK_TIMEOUT)))
            done = {r[0] for r in conn.execute("SELECT name FROM memvault.vault_migrations WHERE vault_id = %s",
                                               (v,))}
            names = {n: sql.Identifier(f"v{v}_{n}") for n in VAULT_INDEXES}
            for name, script in VAULT_MIGRATIONS:
                if name in done:
                    continue
                if callable(script):
                    script(conn, v)
                else:
                    for statement in _statements(script):
                        conn.execute(vsql(v, statement, **names))
                conn.execute("INSERT INTO memvault.vault_migrations(vault_id, name) VALUES (%s, %s)", (v, name))
                applied.append(name)
    except psycopg_module().errors.LockNotAvailable:
        raise SearchIndexError(f"vault migration {name} waited {MIGRATION_LOCK_TIMEOUT} for a table another session "
                               "holds in an open transaction (a backup, a psql session, a long query): nothing was "
                               "migrated; the next publish or reindex tries again") from None
    return applied
