"""Speed benchmarks of the index: recall latency, reindex throughput, no-change reindex, bytes per row.

    python bench/bench_index.py [--sizes 1000,10000,100000] [--queries 50] [--only NAME] [--json OUT]

NAME is one of ``build``, ``recall``, ``cold``, ``reindex``, ``nochange``, ``bytes``, ``bytesfresh``, ``keywords``,
``mcp`` (repeatable, comma list).

The machine is shared, so every figure is reported next to a baseline measured in the same run, and judged as
a ratio: sqlite-vec KNN against a numpy brute-force scan of the same vectors, warm recall against the bare query
embedding, a full reindex against ``embed_documents`` on exactly the texts the index embeds, a no-change
reindex against an ``os.walk`` + ``stat`` of the same files and against ``python -c pass``.

Vaults live in ``bench/.cache/vault-<n>/`` (git-ignored) and are reused across runs while
``.bench-built.json`` matches the corpus version. Vaults up to ``--real-max`` facts (default 10,000) are
indexed with the real model. Bigger ones are indexed with *pooled* vectors: a fake embedder that carries the
real model's identity returns, for a chunk text the 10k vault holds, its real vector, and for any other
text a real vector of the 10k vault chosen by a hash of the text plus Gaussian noise (cosine ≈ 0.9 to it),
re-normalised. Search latency depends on the row count and dimensions, not on what the vectors say; queries
are still embedded with the real model. The numpy baseline is single-threaded (``OPENBLAS_NUM_THREADS=1``),
as sqlite-vec is. ``--real-max 100000`` builds the 100k vault with the real model.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The numpy baseline runs single-threaded, like sqlite-vec: on a shared 2-core box a 2-thread BLAS spins against
# the other job and a 0.4 ms scan becomes 15 ms. Torch's own thread count (the model's) is left alone.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

CACHE = HERE / ".cache"
MODEL = "all-MiniLM-L6-v2"
MARKER = ".bench-built.json"
PY = sys.executable
BENCHES = ("build", "recall", "cold", "reindex", "nochange", "bytes", "bytesfresh", "keywords", "mcp")
POOL_NOISE = 0.025  # per-component sigma on a unit 384-d vector: cosine to the source ≈ 1/sqrt(1+384σ²) ≈ 0.9


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


# ------------------------------------------------------------------------------------------------ vaults
def vault_dir(n: int) -> Path:
    return CACHE / f"vault-{n}"


def _marker(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("corpus_version") == corpus.VERSION else None


class PooledEmbedder(corpus.RealModelText):
    """Real identity and tokenizer, vectors from a pool of real ones (see the module doc)."""

    def __init__(self, real: Any, pool: dict[str, Any]) -> None:
        import numpy as np

        super().__init__(real)
        self._pool = pool
        self._keys = sorted(pool)
        self._matrix = np.stack([pool[k] for k in self._keys]).astype(np.float32)
        self.calls = 0

    def embed_documents(self, texts: Any, batch_size: int = 32) -> Any:
        import numpy as np

        self.calls += 1
        out = np.empty((len(texts), self.identity.dims), dtype=np.float32)
        for i, text in enumerate(texts):
            vec = self._pool.get(text)
            if vec is None:
                h = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
                rng = np.random.default_rng(h)
                vec = self._matrix[h % len(self._matrix)] + rng.normal(0, POOL_NOISE, self.identity.dims)
                vec = vec / np.linalg.norm(vec)
            out[i] = vec
        return out


def _read_pool(root: Path) -> dict[str, Any]:
    import numpy as np

    from memvault import Vault

    from memvault.index import quantize

    vault = Vault.open(root, daemon=False)
    conn = vault.index.connection()
    kind = quantize.stored(conn)
    rows = conn.execute("SELECT c.text, v.embedding FROM chunk_texts c JOIN chunks_vec v ON v.rowid = c.rowid").fetchall()
    vault.index.close()
    return {text: np.array(quantize.decode(kind, blob), dtype=np.float32) for text, blob in rows}


def ensure_vault(n: int, real_max: int) -> dict[str, Any]:
    """The cached vault of ``n`` facts, built (and timed) if missing or stale. Returns its build record."""
    from memvault import Vault

    root = vault_dir(n)
    built = _marker(root)
    if built is not None and built.get("n") == n and (built["mode"] == "real" or n > real_max):
        return built
    if root.exists():
        shutil.rmtree(root)
    mode = "real" if n <= real_max else "pooled"
    pool: dict[str, Any] | None = None
    if mode == "pooled":
        base = max(s for s in (10_000, 1000) if s <= real_max)
        ensure_vault(base, real_max)
        pool = _read_pool(vault_dir(base))
    log(f"writing {n} facts to {root}")
    t0 = time.perf_counter()
    corpus.write_vault(root, n, MODEL)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    real = Vault.open(root, daemon=False).engine.get()
    load_s = time.perf_counter() - t0
    if pool is not None:
        fake = PooledEmbedder(real, pool)
        vault = Vault.open(root, embedder_factory=lambda _config: fake)
    else:
        vault = Vault.open(root, embedder_factory=lambda _config: real)
    log(f"indexing {n} facts ({mode} vectors)")
    t0 = time.perf_counter()
    report = vault.reindex()
    index_s = time.perf_counter() - t0
    vault.index.close()
    chunks = report.chunks_embedded
    record = {
        "corpus_version": corpus.VERSION, "n": n, "mode": mode, "write_files_s": round(write_s, 2),
        "model_load_s": round(load_s, 2), "index_s": round(index_s, 2), "chunks": chunks,
        "chunks_per_s": round(chunks / index_s, 1) if index_s else None,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "problems": len(report.problems),
    }
    (root / MARKER).write_text(json.dumps(record, indent=2))
    log(f"built {n}: {record}")
    return record


# ------------------------------------------------------------------------------------------------ 1. recall, warm
def bench_recall(sizes: list[int], n_queries: int) -> list[dict[str, Any]]:
    import numpy as np

    from memvault import Vault
    from memvault.index import KINDS

    queries = corpus.queries(n_queries)
    out = []
    for n in sizes:
        root = vault_dir(n)
        vault = Vault.open(root, daemon=False)
        emb = vault.engine.get()
        feed = vault.follow()  # a warm process keeps a file watcher (issue 16): recall checks what it marked
        log(f"recall {n}: file watcher {'running' if feed.running else 'unavailable: ' + str(feed.reason)}, "
            f"model backend {getattr(emb, 'backend', '?')}")
        index = vault.index
        conn = index.connection()
        from memvault.index import quantize, search

        stored = quantize.stored(conn)
        blobs = conn.execute("SELECT embedding FROM chunks_vec").fetchall()
        # the baseline: an exact float32 scan of the same vectors (int8 rows as unit float32 vectors)
        matrix = np.stack([quantize.decode(stored, b) for (b,) in blobs]).astype(np.float32)
        del blobs
        rows = matrix.shape[0]
        kinds = list(KINDS)
        top = min(100, rows - 1)
        # warm up every path (page cache, mmap, model graph) before timing
        for q in queries[:3]:
            vault.recall(q, k=10, record_access=False)
            index.search_keywords(q, kinds, 100)
        # a warm process reads the keyword postings into memory in the background (memvault.index.words, 3 s at
        # 100k); the timed queries are those of a process that has them, as a long-lived one does
        deadline = time.monotonic() + 120
        while (index._words is None or index._words_loading) and time.monotonic() < deadline:
            time.sleep(0.1)
            index._words_in_memory()
        log(f"recall {n}: keyword postings in memory: {index._words is not None}")
        t: dict[str, list[float]] = {k: [] for k in ("recall", "recall_nosync", "embed", "sync", "refresh",
                                                     "refresh_dirs", "vector", "vector_knn", "keyword", "numpy")}
        knn_sql = search.vector_sql(kinds, stored)
        for q in queries:
            gc.collect()
            s = time.perf_counter(); vault.recall(q, k=10, record_access=False); t["recall"].append(time.perf_counter() - s)
            s = time.perf_counter(); qvec = emb.embed_query(q); t["embed"].append(time.perf_counter() - s)
            s = time.perf_counter(); index.sync(); t["sync"].append(time.perf_counter() - s)
            s = time.perf_counter(); index.refresh(); t["refresh"].append(time.perf_counter() - s)  # the watcher's
            index.changes = None  # the directory check of a process without a watcher (a one-shot CLI's)
            index._last_refresh = float("-inf")  # time the directory check itself, not its once-a-second skip
            s = time.perf_counter(); index.refresh(); t["refresh_dirs"].append(time.perf_counter() - s)
            index.changes = feed
            s = time.perf_counter(); conn.execute(knn_sql, (quantize.encode(stored, qvec), 100)).fetchall()
            t["vector_knn"].append(time.perf_counter() - s)
            s = time.perf_counter(); index.search_vectors(qvec, kinds, 100); t["vector"].append(time.perf_counter() - s)
            s = time.perf_counter(); np.argpartition(-(matrix @ qvec), top)[:top]; t["numpy"].append(time.perf_counter() - s)
            s = time.perf_counter(); index.search_keywords(q, kinds, 100); t["keyword"].append(time.perf_counter() - s)
            s = time.perf_counter(); vault.recall(q, k=10, record_access=False, sync=False)
            t["recall_nosync"].append(time.perf_counter() - s)
        row: dict[str, Any] = {"n": n, "rows": rows, "queries": len(queries), "vectors": stored}
        for k, v in t.items():
            row[f"{k}_p50_ms"] = ms(pct(v, 50))
            row[f"{k}_p95_ms"] = ms(pct(v, 95))
        row["vector_over_numpy_p50"] = round(pct(t["vector"], 50) / pct(t["numpy"], 50), 2)
        row["knn_over_numpy_p50"] = round(pct(t["vector_knn"], 50) / pct(t["numpy"], 50), 2)
        row["recall_over_embed_p50"] = round(pct(t["recall"], 50) / pct(t["embed"], 50), 2)
        row["watcher"] = feed.running
        row["backend"] = getattr(emb, "backend", None)
        vault.close()
        log(f"recall {n}: {row}")
        out.append(row)
        del matrix
    return out


# ------------------------------------------------------------------------------------------------ 1b. recall, cold
_FLOOR = ("import sys; from memvault.models.embeddings import load_embedder; "
          "load_embedder('all-MiniLM-L6-v2').embed_query(sys.argv[1])")


def _run(cmd: list[str]) -> float:
    s = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    return time.perf_counter() - s


def bench_cold(sizes: list[int], n_queries: int) -> list[dict[str, Any]]:
    queries = corpus.queries(max(n_queries, 1))
    out = []
    pass_times = [_run([PY, "-c", "pass"]) for _ in range(3)]
    for n in sizes:
        root = str(vault_dir(n))
        _run([PY, "-m", "memvault", "--vault", root, "recall", queries[0], "--json"])  # page cache
        cold, floor, keyword = [], [], []
        for q in queries:
            cold.append(_run([PY, "-m", "memvault", "--vault", root, "recall", q, "--json", "--no-record"]))
            keyword.append(_run([PY, "-m", "memvault", "--vault", root, "recall", q, "--json", "--no-record",
                                 "--mode", "keyword"]))
            floor.append(_run([PY, "-c", _FLOOR, q]))
        row = {"n": n, "queries": len(queries), "cold_p50_ms": ms(pct(cold, 50)), "cold_p95_ms": ms(pct(cold, 95)),
               "cold_keyword_p50_ms": ms(pct(keyword, 50)), "cold_keyword_p95_ms": ms(pct(keyword, 95)),
               "floor_p50_ms": ms(pct(floor, 50)), "python_pass_p50_ms": ms(pct(pass_times, 50)),
               "cold_over_floor_p50": round(pct(cold, 50) / pct(floor, 50), 2)}
        log(f"cold {n}: {row}")
        out.append(row)
    return out


# ------------------------------------------------------------------------------------------------ 2. full reindex
def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def bench_reindex(n: int, rounds: int = 2) -> dict[str, Any]:
    """A full reindex against ``embed_documents`` on exactly the texts it embeds, ABBA, model loaded (and its load
    timed) before either. Wall time and this process's CPU time (all threads) are both compared: on a shared
    machine the CPU ratio says what the reindex costs beside the model even when the wall clock is noisy.
    ``stages`` are the reindex's own timings (SyncReport.timings, median over rounds): encode is the model; read,
    write text and write vectors run beside it in their own threads; "wait for text" is the model idle."""
    from memvault import Vault

    root = CACHE / f"reindex-{n}"
    if not (root / "memvault.toml").exists() or _marker(root) is None:
        if root.exists():
            shutil.rmtree(root)
        corpus.write_vault(root, n, MODEL)
        (root / MARKER).write_text(json.dumps({"corpus_version": corpus.VERSION, "n": n, "mode": "files-only"}))
    vault = Vault.open(root, daemon=False)
    s = time.perf_counter()
    emb = vault.engine.get()
    load_s = time.perf_counter() - s
    emb.embed_documents([f.text for f in corpus.facts(64)])  # warm-up
    reindex_s, encode_s, reindex_cpu, encode_cpu = [], [], [], []
    stages: dict[str, list[float]] = {}
    chunks = 0
    for r in range(rounds):  # ABBA order: reindex, encode, encode, reindex, ...
        order = ("reindex", "encode") if r % 2 == 0 else ("encode", "reindex")
        for what in order:
            gc.collect()
            if what == "reindex":
                c, s = _cpu(), time.perf_counter()
                report = vault.reindex(full=True)
                reindex_s.append(time.perf_counter() - s)
                reindex_cpu.append(_cpu() - c)
                chunks = report.chunks_embedded
                for stage, seconds in report.timings.items():
                    stages.setdefault(stage, []).append(seconds)
            else:
                if not vault.index.exists():
                    vault.reindex(full=True)
                texts = [t for (t,) in vault.index.connection().execute("SELECT text FROM chunk_texts ORDER BY rowid")]
                c, s = _cpu(), time.perf_counter()
                emb.embed_documents(texts)
                encode_s.append(time.perf_counter() - s)
                encode_cpu.append(_cpu() - c)
    vault.index.close()
    r_s, e_s = statistics.median(reindex_s), statistics.median(encode_s)
    r_c, e_c = statistics.median(reindex_cpu), statistics.median(encode_cpu)
    row = {"facts": n, "chunks": chunks, "model_load_s": round(load_s, 2), "reindex_s": round(r_s, 2),
           "encode_s": round(e_s, 2), "reindex_chunks_per_s": round(chunks / r_s, 1),
           "encode_texts_per_s": round(chunks / e_s, 1), "throughput_ratio": round(e_s / r_s, 3),
           "reindex_cpu_s": round(r_c, 2), "encode_cpu_s": round(e_c, 2), "cpu_ratio": round(e_c / r_c, 3),
           "stages_s": {k: round(statistics.median(v), 2) for k, v in sorted(stages.items())},
           "reindex_all_s": [round(x, 2) for x in reindex_s], "encode_all_s": [round(x, 2) for x in encode_s],
           "load_avg": round(os.getloadavg()[0], 2)}
    log(f"reindex: {row}")
    return row


# ------------------------------------------------------------------------------------------------ 3. no-change
_NOCHANGE = r"""
import json, os, sys, time
t0 = time.perf_counter()
from memvault import Vault
t1 = time.perf_counter()
root = sys.argv[1]
def walk():
    s = time.perf_counter(); n = 0
    for d, _dirs, files in os.walk(os.path.join(root, "facts")):
        for f in files:
            os.stat(os.path.join(d, f)); n += 1
    return time.perf_counter() - s, n
w1, files = walk()
s = time.perf_counter()
report = Vault.open(root).reindex()
t_reindex = time.perf_counter() - s
w2, _ = walk()
print(json.dumps({"import_s": t1 - t0, "reindex_s": t_reindex, "walk_s": min(w1, w2), "files": files,
                  "files_seen": report.files_seen, "changed": report.changed, "model_loaded": report.model_loaded,
                  "torch_loaded": "torch" in sys.modules,
                  "sentence_transformers_loaded": "sentence_transformers" in sys.modules}))
"""


def bench_mcp(n: int, n_queries: int) -> dict[str, Any]:
    """recall over MCP (stdio, the SDK's own client, model loaded once in the server) against the library's
    Vault.recall on the same queries in this process: the transport and adapter overhead, and the p50 target."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from memvault import Vault

    root = vault_dir(n)
    queries = corpus.queries(n_queries)
    env = {**os.environ, "MEMVAULT_NO_DAEMON": "1"}
    params = StdioServerParameters(command=PY, env=env, args=["-m", "memvault.mcp_server", "--vault", str(root),
                                                              "--source", "agent:bench"])
    over_mcp: list[float] = []

    async def run() -> None:
        with open(os.devnull, "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                first = await client.call_tool("recall", {"query": queries[0]})  # waits for the model load
                assert first.structured_content["mode"] == "hybrid", first.structured_content
                for q in queries[:3]:
                    await client.call_tool("recall", {"query": q, "k": 10})
                for q in queries:
                    s = time.perf_counter()
                    r = await client.call_tool("recall", {"query": q, "k": 10})
                    over_mcp.append(time.perf_counter() - s)
                    assert not r.is_error

    asyncio.run(run())
    vault = Vault.open(root, daemon=False)
    for q in queries[:3]:
        vault.recall(q, k=10)
    lib = []
    for q in queries:
        s = time.perf_counter()
        vault.recall(q, k=10)
        lib.append(time.perf_counter() - s)
    row = {"n": n, "queries": len(queries), "mcp_p50_ms": ms(pct(over_mcp, 50)), "mcp_p95_ms": ms(pct(over_mcp, 95)),
           "library_p50_ms": ms(pct(lib, 50)), "mcp_over_library_p50": round(pct(over_mcp, 50) / pct(lib, 50), 2)}
    log(f"mcp {n}: {row}")
    return row


def bench_nochange(n: int, runs: int = 5) -> dict[str, Any]:
    root = str(vault_dir(n))
    inner, proc, passes = [], [], []
    last: dict[str, Any] = {}
    for _ in range(runs):
        s = time.perf_counter()
        res = subprocess.run([PY, "-c", _NOCHANGE, root], check=True, capture_output=True, text=True, cwd=REPO)
        proc.append(time.perf_counter() - s)
        last = json.loads(res.stdout)
        assert not last["model_loaded"], "no-change reindex loaded the model"
        assert not last["torch_loaded"], "no-change reindex imported torch"
        assert not last["changed"], f"vault-{n} changed between runs?"
        inner.append(last)
        passes.append(_run([PY, "-c", "pass"]))
    med = lambda key: statistics.median(x[key] for x in inner)  # noqa: E731
    row = {"facts": n, "files_seen": last["files_seen"], "reindex_ms": ms(med("reindex_s")),
           "walk_stat_ms": ms(med("walk_s")), "import_memvault_ms": ms(med("import_s")),
           "process_ms": ms(statistics.median(proc)), "python_pass_ms": ms(statistics.median(passes)),
           "reindex_over_walk": round(med("reindex_s") / med("walk_s"), 2),
           "process_over_pass": round(statistics.median(proc) / statistics.median(passes), 2),
           "model_loaded": last["model_loaded"], "torch_loaded": last["torch_loaded"]}
    log(f"nochange: {row}")
    return row


# ------------------------------------------------------------------------------------------------ 4. bytes
def bench_bytes(sizes: list[int]) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        res = subprocess.run([PY, "-m", "memvault", "--vault", str(vault_dir(n)), "stats", "--json"], check=True,
                             capture_output=True, text=True, cwd=REPO)
        data = json.loads(res.stdout)
        bpr = data["bytes_per_row"]
        idx = data["index"]
        theo = bpr["theoretical_float32"]
        out.append({"n": n, "rows": idx["chunks"], "file_bytes": idx["file_bytes"], "used_bytes": idx["used_bytes"],
                    "total_per_row": round(bpr["measured_total"], 1),
                    "vector_store_per_row": round(bpr["measured_vector_store"], 1), "four_dims": theo,
                    "total_over_4d": round(bpr["measured_total"] / theo, 2),
                    "vector_over_4d": round(bpr["measured_vector_store"] / theo, 3)})
        log(f"bytes {n}: {out[-1]}")
    return out


#: Words in almost every fact of the corpus (each has a host and a port), as bench_writes uses them.
COMMON_QUERIES = ["which host and port", "server port", "the host listens on port", "port of the server host",
                  "which server is the host", "host port server", "what port does the server use",
                  "host and server names", "port forwarding on the host", "server host port mapping"]


def bench_keywords(sizes: list[int], rounds: int = 3) -> list[dict[str, Any]]:
    """The keyword queries themselves (words, word pairs), with words found in almost every row, without and with
    the kind filter, with the default field weights and with the key weighed 3x: p50 in ms, and the plan."""
    from memvault import Vault
    from memvault.index import FieldWeights, KINDS, search

    out = []
    for n in sizes:
        vault = Vault.open(vault_dir(n), daemon=False)
        index = vault.index
        conn = index.connection()
        for q in COMMON_QUERIES[:3]:  # page cache
            index.search_keywords(q, list(KINDS), 100)
        cases = {"words": lambda q, k, w: index.search_keywords(q, k, 100, w),
                 "pairs": lambda q, k, w: index.search_phrases(q, k, 100, w)}
        row: dict[str, Any] = {"n": n, "queries": len(COMMON_QUERIES) * rounds}
        for name, run in cases.items():
            for label, kinds in (("all", list(KINDS)), ("fact", ["fact"])):
                for wname, weights in (("default", None), ("key3", FieldWeights(key=3.0))):
                    t = []
                    for _ in range(rounds):
                        for q in COMMON_QUERIES:
                            s = time.perf_counter()
                            run(q, kinds, weights)
                            t.append(time.perf_counter() - s)
                    row[f"{name}_{label}_{wname}_p50_ms"] = ms(pct(t, 50))
        expr = search.match_expression(search.fts_query(COMMON_QUERIES[0]), ["fact"])
        row["plan"] = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + search.KEYWORD_SQL,
                                                  (*search.DEFAULT_FIELD_WEIGHTS.params(), expr, 100))]
        row["rows_matching"] = conn.execute("SELECT COUNT(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                                            (search.match_expression('"host" OR "port" OR "server"',
                                                                     list(KINDS)),)).fetchone()[0]
        index.close()
        log(f"keywords {n}: {row}")
        out.append(row)
    return out


class FixedVectors:
    """The real model's identity, no model: every text gets the same unit vector (what a vector says does not change
    its size), words for tokens. A build with it costs everything a reindex does beside the model."""

    def __init__(self, identity: Any) -> None:
        import numpy as np

        self.identity = identity
        self._vector = np.zeros(identity.dims, dtype=np.float32)
        self._vector[0] = 1.0

    def embed_documents(self, texts: Any, batch_size: int = 32) -> Any:
        import numpy as np

        return np.tile(self._vector, (len(texts), 1))

    def embed_query(self, text: str) -> Any:
        return self._vector

    def count_tokens(self, text: str) -> int:
        import re

        return len(re.findall(r"\w+|[^\w\s]", text))

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        import re

        from memvault.models.embeddings import window_spans

        limit = max_tokens if max_tokens is not None else self.identity.max_tokens - 2
        offsets = [m.span() for m in re.finditer(r"\w+|[^\w\s]", text)]
        return [text[a:b] for a, b in window_spans(text, offsets, limit, overlap)]


def bench_bytes_fresh(sizes: list[int]) -> list[dict[str, Any]]:
    """Each cached vault indexed anew, in a temporary directory, by the schema of this checkout (vectors of the real
    model's size, not its values): the whole index's bytes per row as a rebuild leaves them, and the time such a
    build takes with a model that costs nothing (everything a reindex does beside the model)."""
    import tempfile

    from memvault import Vault
    from memvault.index import Index

    out = []
    for n in sizes:
        vault = Vault.open(vault_dir(n), daemon=False)
        identity = vault.index.identity()
        vault.index.close()
        fixed = FixedVectors(identity)
        with tempfile.TemporaryDirectory(prefix="bench-bytes-", dir=CACHE) as tmp:
            index = Index(Path(tmp), vault.index.sources)
            s = time.perf_counter()
            report = index.rebuild(lambda: fixed)
            build_s = time.perf_counter() - s
            st = index.stats()
            index.close()
        rows = st["chunks"]
        row = {"n": n, "rows": rows, "file_bytes": st["file_bytes"], "used_bytes": st["used_bytes"],
               "total_per_row": round(st["used_bytes"] / rows, 1), "file_per_row": round(st["file_bytes"] / rows, 1),
               "vector_store_per_row": round(st["vector_store_bytes"] / rows, 1), "four_dims": 4 * identity.dims,
               "total_over_4d": round(st["used_bytes"] / rows / (4 * identity.dims), 3),
               "build_without_model_s": round(build_s, 2), "per_1000_chunks_s": round(build_s / rows * 1000, 3),
               "stages_s": {k: round(v, 2) for k, v in sorted(report.timings.items())}}
        log(f"bytes (fresh) {n}: {row}")
        out.append(row)
    return out


# ------------------------------------------------------------------------------------------------ report
def table(results: dict[str, Any]) -> str:
    lines = []
    if results.get("build"):
        lines += ["### Vault builds", "", "| facts | vectors | write files (s) | model load (s) | index (s) | chunks/s |",
                  "|---:|---|---:|---:|---:|---:|"]
        for b in results["build"]:
            lines.append(f"| {b['n']:,} | {b['mode']} | {b['write_files_s']} | {b['model_load_s']} | {b['index_s']} | "
                         f"{b['chunks_per_s']} |")
        lines.append("")
    if results.get("recall"):
        lines += ["### Warm recall (in-process, model loaded once; ms, p50 / p95)", "",
                  "`recall` is the whole call, query embedding included, in a process that keeps a file watcher on "
                  "the vault (`vault.follow()`, as the MCP server and the warm process do); `refresh` is its freshness "
                  "check (the watcher's marks, after its marker), `refresh (dirs)` the directory check a process "
                  "without a watcher makes, `full scan` the stat of every file; `vector stage` is the in-memory matrix "
                  "a warm process uses, `sqlite-vec KNN` the path of a one-shot process.", "",
                  "| facts | recall | recall, no sync | embed_query | refresh | refresh (dirs) | full scan | vector stage "
                  "| sqlite-vec KNN | numpy scan | keyword stage | vector / numpy | KNN / numpy | recall / embed |",
                  "|---:|---|---|---|---|---|---|---|---|---|---|---:|---:|---:|"]
        for r in results["recall"]:
            f = lambda k: f"{r[k + '_p50_ms']:.2f} / {r[k + '_p95_ms']:.2f}"  # noqa: E731
            lines.append(f"| {r['n']:,} | {f('recall')} | {f('recall_nosync')} | {f('embed')} | {f('refresh')} | "
                         f"{f('refresh_dirs')} | {f('sync')} | {f('vector')} | {f('vector_knn')} | {f('numpy')} | {f('keyword')} | "
                         f"{r['vector_over_numpy_p50']}x | {r['knn_over_numpy_p50']}x | {r['recall_over_embed_p50']}x |")
        lines.append("")
    if results.get("cold"):
        lines += ["### Cold recall (a new `python -m memvault ... recall --json` process per query; ms)", "",
                  "| facts | queries | semantic p50 | semantic p95 | keyword-only p50 | keyword-only p95 | "
                  "floor p50 (python: import + load model + embed_query) | `python -c pass` | semantic / floor |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results["cold"]:
            lines.append(f"| {r['n']:,} | {r['queries']} | {r['cold_p50_ms']:.0f} | {r['cold_p95_ms']:.0f} | "
                         f"{r['cold_keyword_p50_ms']:.0f} | {r['cold_keyword_p95_ms']:.0f} | "
                         f"{r['floor_p50_ms']:.0f} | {r['python_pass_p50_ms']:.0f} | {r['cold_over_floor_p50']}x |")
        lines.append("")
    if results.get("reindex"):
        r = results["reindex"]
        lines += ["### Full reindex vs raw encode (same texts; model load apart)", "",
                  "| facts | chunks | model load s | reindex(full) s | embed_documents s | ratio (wall) | reindex CPU s | "
                  "encode CPU s | ratio (CPU) | load avg |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                  f"| {r['facts']:,} | {r['chunks']:,} | {r['model_load_s']} | {r['reindex_s']} | {r['encode_s']} | "
                  f"{r['throughput_ratio']:.1%} | {r['reindex_cpu_s']} | {r['encode_cpu_s']} | {r['cpu_ratio']:.1%} | "
                  f"{r['load_avg']} |", "",
                  "Stages of the reindex (s, median): " + ", ".join(f"{k} {v}" for k, v in r["stages_s"].items()), ""]
    if results.get("nochange"):
        r = results["nochange"]
        lines += ["### No-change reindex (fresh process; ms, median)", "",
                  "| facts | reindex() | os.walk+stat | import memvault | whole process | `python -c pass` | "
                  "reindex / walk | process / pass | model loaded | torch imported |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
                  f"| {r['facts']:,} | {r['reindex_ms']:.1f} | {r['walk_stat_ms']:.1f} | {r['import_memvault_ms']:.1f} | "
                  f"{r['process_ms']:.0f} | {r['python_pass_ms']:.0f} | {r['reindex_over_walk']}x | "
                  f"{r['process_over_pass']}x | {r['model_loaded']} | {r['torch_loaded']} |", ""]
    if results.get("mcp"):
        lines += ["### Recall over MCP (stdio, the SDK's client; model loaded once in the server; ms)", "",
                  "| facts | queries | MCP p50 | MCP p95 | library Vault.recall p50 (same run) | MCP / library |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in results["mcp"]:
            lines.append(f"| {r['n']:,} | {r['queries']} | {r['mcp_p50_ms']:.1f} | {r['mcp_p95_ms']:.1f} | "
                         f"{r['library_p50_ms']:.1f} | {r['mcp_over_library_p50']}x |")
        lines.append("")
    if results.get("keywords"):
        lines += ["### Keyword queries with common words (ms p50; 100 best; key3 = key weighed 3x)", "",
                  "| facts | rows matching | words, all kinds | words, facts only | words, key3 | pairs, all kinds | "
                  "pairs, facts only | facts only / all (words) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results["keywords"]:
            lines.append(f"| {r['n']:,} | {r['rows_matching']:,} | {r['words_all_default_p50_ms']} | "
                         f"{r['words_fact_default_p50_ms']} | {r['words_all_key3_p50_ms']} | "
                         f"{r['pairs_all_default_p50_ms']} | {r['pairs_fact_default_p50_ms']} | "
                         f"{r['words_fact_default_p50_ms'] / r['words_all_default_p50_ms']:.2f}x |")
        lines += ["", f"Plan (facts only): {'; '.join(results['keywords'][-1]['plan'])}", ""]
    if results.get("bytesfresh"):
        lines += ["### Index bytes per row, rebuilt by this schema (vectors of the model's size; no model)", "",
                  "| facts | rows | used bytes | file bytes | total/row | vector store/row | 4·dims | total / 4·dims | "
                  "build without the model s | s per 1,000 chunks |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results["bytesfresh"]:
            lines.append(f"| {r['n']:,} | {r['rows']:,} | {r['used_bytes']:,} | {r['file_bytes']:,} | "
                         f"{r['total_per_row']} | {r['vector_store_per_row']} | {r['four_dims']} | "
                         f"{r['total_over_4d']}x | {r['build_without_model_s']} | {r['per_1000_chunks_s']} |")
        lines.append("")
    if results.get("bytes"):
        lines += ["### Index bytes per row (`memvault stats --json`)", "",
                  "| facts | rows | file bytes | total/row | vector store/row | 4·dims | total / 4·dims | vector / 4·dims |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results["bytes"]:
            lines.append(f"| {r['n']:,} | {r['rows']:,} | {r['file_bytes']:,} | {r['total_per_row']} | "
                         f"{r['vector_store_per_row']} | {r['four_dims']} | {r['total_over_4d']}x | {r['vector_over_4d']}x |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--cold-queries", type=int, default=5)
    ap.add_argument("--reindex-facts", type=int, default=2000)
    ap.add_argument("--nochange-facts", type=int, default=10_000)
    ap.add_argument("--real-max", type=int, default=10_000, help="largest vault indexed with the real model")
    ap.add_argument("--only", action="append", help=f"comma list of {', '.join(BENCHES)}")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    only = {x for o in (args.only or []) for x in o.split(",")} or set(BENCHES)
    unknown = only - set(BENCHES)
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    CACHE.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"argv": sys.argv, "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()}
    need = sorted(set(sizes) | ({args.nochange_facts} if "nochange" in only else set()))
    results["build"] = [ensure_vault(n, args.real_max) for n in need]
    if "recall" in only:
        results["recall"] = bench_recall(sizes, args.queries)
    if "cold" in only:
        results["cold"] = bench_cold(sizes, args.cold_queries)
    if "reindex" in only:
        results["reindex"] = bench_reindex(args.reindex_facts)
    if "nochange" in only:
        results["nochange"] = bench_nochange(args.nochange_facts)
    if "mcp" in only:
        results["mcp"] = [bench_mcp(n, args.queries) for n in sizes if n <= 10000]
    if "bytes" in only:
        results["bytes"] = bench_bytes(sizes)
    if "keywords" in only:
        results["keywords"] = bench_keywords(sizes)
    if "bytesfresh" in only:
        results["bytesfresh"] = bench_bytes_fresh(sizes)
    results["load_avg_end"] = os.getloadavg()
    results["wall_s"] = round(time.perf_counter() - started, 1)
    print(table(results))
    print(f"wall {results['wall_s']} s; load average {results['load_avg_start'][0]:.2f} -> "
          f"{results['load_avg_end'][0]:.2f} on {results['cpus']} CPUs")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
