"""The shared index (memvault.index.postgres.SharedIndex) measured through its own API, at 100k and 1M chunks.

    nice -n 10 .venv/bin/python bench/bench_pgindex.py --sizes 100000            # ~10 min on 2 loaded cores
    nice -n 10 .venv/bin/python bench/bench_pgindex.py --sizes 1000000 --json /tmp/pgindex-1m.json

What is measured (a throwaway PostgreSQL 18 + pgvector from tests/pgserver.py, unix socket, warm cache):

- ``apply()`` throughput: docs/s of a bulk push, 10,000 docs per call (each call one transaction).
- ``EmbeddingCache.put`` throughput: the vectors go into the shared cache first (as other hosts would have put
  them), then ``embed()`` runs from that warm cache with an embedder that refuses to embed (0 texts embedded):
  vectors/s of the fill, and the HNSW build (m=24, ef_construction=128) that ends the first embed.
- ``search_vectors``: p50/p95 and recall@10 against exact numpy top-10 on the same float32 vectors, unfiltered and
  filtered to facts (30% of rows). Vectors are bench/bench_pgvector.py's: mixtures of real all-MiniLM-L6-v2
  embeddings of tldr sentences (its cached pool under ~/.cache/memvault-bench), queries are held-out real
  embeddings. A crowded, pessimistic case for recall (docs/scaling.md).
- ``search_keywords`` (and phrases, exact): p50/p95 of common-word queries ("which host and port": every chunk
  names its host and port in words, so host/port/server are in 25-90% of chunks) and of rare-word queries (held-out
  tldr descriptions from bench/corpus.py, "natural"; single words that occur in 5-50 chunks of a sample,
  "rare"), for several candidate
  budgets; budget "all" is plain BM25 over every match (what the rule avoids). Overlap@10 of each budget with
  "all" on the rare set says what the rule costs in ranking.

Chunk texts: bench/corpus.py facts (tldr examples, LoCoMo observations, alert rules, each with a host, address and
port), plus a sentence naming the host and port in words. Kinds: 30% fact, 50% episode, 20% procedure.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import corpus  # noqa: E402
from bench_pgvector import KINDS, exact_topk, kinds_for, minilm_pool, mixed_vectors  # noqa: E402

from memvault.models.embeddings import ModelIdentity  # noqa: E402
from memvault.index import postgres as pg  # noqa: E402
from memvault.index.documents import Doc, cut  # noqa: E402

PG_SETTINGS = {
    "shared_buffers": "6GB",
    "effective_cache_size": "16GB",
    "maintenance_work_mem": "4GB",
    "max_parallel_maintenance_workers": "1",  # leader + 1 worker = the 2 cores
    "work_mem": "64MB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "30min",
}
IDENTITY = ModelIdentity(name="bench-minilm-mix", revision="1", dims=384, query_prefix="", max_tokens=256)
BATCH = 10_000
COMMON = ["which host and port", "host port server", "what port does the server listen on", "host",
          "server port", "the host on port"]
_SITES = ("fra1", "ams2", "nyc3", "sfo2", "sgp1", "lon1")
_PHRASES = ("The host is {h}, port {p}.", "Server {h} listens on host port {p}.", "Host {h} serves port {p}.",
            "It runs on server {h}.{s}, host port {p}.", "Host {h}, port {p}.")


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def make_doc(i: int, kind_code: int) -> Doc:
    spec = corpus.fact(i)
    rng = random.Random(i)
    host = f"{rng.choice(('web', 'db', 'cache', 'api', 'worker', 'mq'))}{rng.randrange(1, 41):02d}"
    extra = rng.choice(_PHRASES).format(h=host, p=rng.choice((22, 80, 443, 5432, 6379, 8080)), s=rng.choice(_SITES))
    kind = KINDS[kind_code]
    body = f"{spec.text} {extra}"
    header = " · ".join([spec.key.replace("/", " ").replace("-", " ").replace("_", " "), spec.category])
    path = {"fact": f"facts/{spec.key}.md", "episode": f"episodes/{spec.key}.jsonl",
            "procedure": f"procedures/{spec.key}.sh"}[kind]
    stamp = f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00Z"
    return Doc(kind, spec.key, path, header, body, 0.5, 0.9, "agent:bench", stamp, stamp,
               ekind="raw" if kind == "episode" else None)


class RefusingEmbedder:
    """embed() from a warm cache must never embed: this embedder fails the run if asked."""

    identity = IDENTITY

    def __init__(self) -> None:
        self.embedded = 0

    def embed_documents(self, texts, batch_size=32):
        self.embedded += len(texts)
        raise RuntimeError(f"asked to embed {len(texts)} texts: the cache should have had them")

    def count_tokens(self, text: str) -> int:
        """Docs longer than the window in bytes were cut by words at apply; embed() re-cuts them with this."""
        return len(text.split())

    def split(self, text, max_tokens=None, overlap=32):
        return [text]


def pct(samples: list[float], p: float) -> float:
    return float(np.percentile(np.array(samples) * 1000.0, p))


def timed(fn, *args, repeat: int = 1) -> tuple[float, object]:
    out = None
    best = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn(*args)
        best.append(time.perf_counter() - t)
    return statistics.median(best), out


def rare_words(docs_sample: list[str], n: int = 20) -> list[str]:
    counts = Counter(w for text in docs_sample for w in set(re.findall(r"[a-z]{5,}", text.lower())))
    words = sorted(w for w, c in counts.items() if 5 <= c <= 50)
    return random.Random(3).sample(words, min(n, len(words)))


def run_size(url: str, n: int, args: argparse.Namespace, out: dict) -> None:
    entry: dict = {"rows": n, "load_start": load()}
    out["results"].append(entry)
    kinds = kinds_for(n)
    x = queries = None
    if not args.skip_vectors:
        pool, held = minilm_pool(args.cache_dir)
        x = mixed_vectors(pool, n, seed=n)
        queries = held[: args.queries].copy()
    index = pg.SharedIndex(url, f"bench-{n}")
    cache = pg.EmbeddingCache(url)
    index.ensure()

    # -- phase 1 (apply) and the shared cache (put) ---------------------------------------------------------
    t_apply = t_put = 0.0
    texts_sample: list[str] = []
    for start in range(0, n, BATCH):
        docs = [make_doc(i, int(kinds[i])) for i in range(start, min(n, start + BATCH))]
        paths: dict[str, str | None] = {d.path: "blob" for d in docs}
        t = time.perf_counter()
        report = index.apply(docs, paths, head=f"h{start}", max_tokens=IDENTITY.max_tokens)
        t_apply += time.perf_counter() - t
        assert report.docs_added == len(docs) and not report.problems, report
        chunks = [texts[0] for texts, _how in cut(docs, None, IDENTITY.max_tokens)]
        if start < 200_000:
            texts_sample += chunks[:2000]
        if not args.skip_vectors:
            items = [(pg.text_sha256(c), x[start + j].tobytes()) for j, c in enumerate(chunks)]
            t = time.perf_counter()
            cache.put_hashes(IDENTITY, items)
            t_put += time.perf_counter() - t
        if start % 100_000 == 0:
            print(f"#   {start + len(docs)} docs applied ({(start + len(docs)) / t_apply:.0f}/s), "
                  f"load {load()}", flush=True)
    entry["apply_docs_per_s"] = round(n / t_apply)
    entry["cache_put_per_s"] = round(n / t_put) if t_put else None
    print(f"# {n}: apply {entry['apply_docs_per_s']} docs/s, cache put {entry['cache_put_per_s']} vectors/s, "
          f"load {load()}", flush=True)
    if not args.skip_vectors:
        vectors_part(index, n, x, kinds, queries, args, entry)
    if not args.skip_keywords:
        keywords_part(index, n, texts_sample, kinds, args, entry)
    entry["load_end"] = load()
    if not args.keep:
        index.drop()
    index.close()
    cache.close()


def vectors_part(index, n, x, kinds, queries, args, entry) -> None:

    # -- phase 2 from the warm cache ---------------------------------------------------------------------------
    refusing = RefusingEmbedder()
    pg.vectors.BUILD_MEMORY = args.build_memory
    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(done: int, goal: int) -> None:
        if done >= goal:
            marks["filled"] = time.perf_counter()

    report = index.embed(refusing, progress=progress)
    t_end = time.perf_counter()
    assert refusing.embedded == 0 and report.chunks_embedded == 0 and index.pending() == 0, report
    fill = marks["filled"] - t0
    entry["embed_warm_vectors_per_s"] = round(n / fill)
    entry["embed_texts_embedded"] = refusing.embedded
    entry["hnsw_build_s"] = round(t_end - marks["filled"], 1)
    entry["load_after_build"] = load()
    stats = index.stats()
    entry["stats"] = {k: stats[k] for k in ("chunks", "vectors", "chunks_bytes", "keyword_index_bytes",
                                            "vector_table_bytes", "hnsw_bytes", "docs_bytes")}
    print(f"# {n}: embed from warm cache {entry['embed_warm_vectors_per_s']} vectors/s (0 texts embedded), "
          f"HNSW build {entry['hnsw_build_s']} s, load {load()}; {entry['stats']}", flush=True)

    # chunk id -> row number (through chunk_docs: the keys are f<i>)
    def rows_of(hits: list[tuple[int, float]]) -> list[int]:
        fields = index.chunk_docs([h[0] for h in hits])
        return [int(fields[h[0]]["id"].rsplit("/f", 1)[1]) for h in hits]

    # -- vectors -------------------------------------------------------------------------------------------
    truth = exact_topk(x, queries)
    facts = np.nonzero(kinds == 0)[0]
    truth_f = exact_topk(x, queries, rows=facts)
    default_ef = pg.connection.EF_SEARCH
    for ef in [int(e) for e in args.ef.split(",")] if args.ef else [default_ef]:
        pg.connection.EF_SEARCH = ef
        index.close()  # the next call reconnects, with this hnsw.ef_search
        for label, kinds_asked, gt in (("all", list(KINDS), truth), ("facts", ["fact"], truth_f)):
            index.search_vectors(queries[0], kinds_asked, 10)  # warm
            times, found = [], []
            for q in queries:
                t = time.perf_counter()
                hits = index.search_vectors(q, kinds_asked, 10)
                times.append(time.perf_counter() - t)
                found.append(rows_of(hits))
            rec = float(np.mean([len(set(f) & set(g.tolist())) / 10 for f, g in zip(found, gt)]))
            entry[f"vectors_{label}_ef{ef}"] = {"p50_ms": round(pct(times, 50), 2),
                                                "p95_ms": round(pct(times, 95), 2), "recall@10": round(rec, 3)}
            print(f"# {n}: search_vectors {label} ef_search {ef}: p50 {pct(times, 50):.2f} ms, "
                  f"p95 {pct(times, 95):.2f} ms, recall@10 {rec:.3f}, load {load()}", flush=True)
    pg.connection.EF_SEARCH = default_ef
    index.close()
    entry["vector_plan"] = index.explain("search_vectors", queries[0], ["fact"], 10)
    print("# plan (unforced):", " | ".join(ln.strip() for ln in entry["vector_plan"].splitlines()), flush=True)
    one_write(index, n, kinds, args, entry)


def keywords_part(index, n, texts_sample, kinds, args, entry) -> None:

    # -- keywords ------------------------------------------------------------------------------------------
    rare = rare_words(texts_sample)
    natural = corpus.queries(40)
    sets = {"common": COMMON, "natural": natural, "rare": rare}
    budgets = [int(b) for b in args.budgets.split(",")] + ([sys.maxsize] if n <= args.all_max else [])
    exact_top: dict[str, list[int]] = {}
    entry["keywords"] = []
    for budget in reversed(budgets):  # "all" first: the reference ranking
        pg.keywords.CANDIDATE_BUDGET = budget
        name = "all" if budget == sys.maxsize else str(budget)
        for label, qs in sets.items():
            if budget == sys.maxsize and label == "common" and n > args.all_max:
                continue
            index.search_keywords(qs[0], list(KINDS), 10)
            times, overlaps = [], []
            for query in qs:
                reps = 1 if budget == sys.maxsize else args.repeat
                dt, hits = timed(index.search_keywords, query, list(KINDS), 10, repeat=reps)
                times.append(dt)
                ids = [h[0] for h in hits]  # type: ignore[union-attr]
                if budget == sys.maxsize:
                    exact_top[query] = ids
                elif query in exact_top and exact_top[query]:
                    overlaps.append(len(set(ids) & set(exact_top[query])) / len(exact_top[query]))
            plan = index.explain("search_keywords", qs[0], list(KINDS), 10, analyze=True)
            cand = re.search(r"CTE Scan on cand .*actual time=\S+ rows=([\d.]+)", plan)
            row = {"budget": name, "set": label, "p50_ms": round(pct(times, 50), 2),
                   "p95_ms": round(pct(times, 95), 2), "queries": len(qs),
                   "overlap@10_vs_all": round(float(np.mean(overlaps)), 3) if overlaps else None,
                   "candidates_first_query": int(float(cand.group(1))) if cand else None}
            entry["keywords"].append(row)
            print(f"# {n}: search_keywords budget {name:>6} {label:7}: p50 {row['p50_ms']:.1f} ms, "
                  f"p95 {row['p95_ms']:.1f} ms, overlap {row['overlap@10_vs_all']}, "
                  f"candidates({qs[0]!r}) {row['candidates_first_query']}, load {load()}", flush=True)
    pg.keywords.CANDIDATE_BUDGET = args.default_budget
    for method, qs in (("search_phrases", COMMON + natural[:20]), ("search_exact", COMMON + natural[:20])):
        times = []
        for query in qs:
            dt, _ = timed(getattr(index, method), query, list(KINDS), 10, repeat=args.repeat)
            times.append(dt)
        entry[method] = {"p50_ms": round(pct(times, 50), 2), "p95_ms": round(pct(times, 95), 2)}
        print(f"# {n}: {method}: p50 {pct(times, 50):.1f} ms, p95 {pct(times, 95):.1f} ms", flush=True)
    entry["keyword_plan_common"] = index.explain("search_keywords", COMMON[0], list(KINDS), 10, analyze=True)
    entry["keyword_plan_rare"] = index.explain("search_keywords", rare[0], list(KINDS), 10, analyze=True)


def one_write(index, n, kinds, args, entry) -> None:
    if not args.writes:
        return
    # -- one write on a big vault: apply one changed doc, embed its chunk -----------------------------------
    class OneByOne(RefusingEmbedder):
        """Embeds (random unit vectors): the one changed text must be embedded, nothing else."""

        def embed_documents(self, texts, batch_size=32):
            self.embedded += len(texts)
            v = np.random.default_rng(self.embedded).standard_normal((len(texts), 384)).astype(np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    one = OneByOne()
    t_apply, t_embed = [], []
    for j in range(args.writes):
        d = make_doc(j, int(kinds[j]))
        d.body += f" Edited {j}."
        t = time.perf_counter()
        index.apply([d], {d.path: f"edit{j}"}, head=None, max_tokens=IDENTITY.max_tokens)
        t_apply.append(time.perf_counter() - t)
        t = time.perf_counter()
        index.embed(one)
        t_embed.append(time.perf_counter() - t)
    assert one.embedded == args.writes and index.pending() == 0
    entry["one_write"] = {"apply_p50_ms": round(pct(t_apply, 50), 1), "embed_p50_ms": round(pct(t_embed, 50), 1)}
    print(f"# {n}: one changed doc: apply p50 {pct(t_apply, 50):.1f} ms, embed (1 text) p50 "
          f"{pct(t_embed, 50):.1f} ms", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3, help="runs per keyword query (median kept)")
    ap.add_argument("--budgets", default="2000,5000,20000")
    ap.add_argument("--default-budget", type=int, default=pg.CANDIDATE_BUDGET)
    ap.add_argument("--all-max", type=int, default=100_000, help="plain BM25 over every match up to this size")
    ap.add_argument("--build-memory", default="4GB")
    ap.add_argument("--writes", type=int, default=20, help="single-doc apply+embed rounds on the loaded vault")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--skip-vectors", action="store_true", help="apply and keyword searches only")
    ap.add_argument("--skip-keywords", action="store_true", help="apply and vectors only")
    ap.add_argument("--ef", default="", help="hnsw.ef_search values to measure (default: the module's)")
    ap.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "memvault-bench")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from pgserver import start_postgres

    out: dict = {"argv": sys.argv, "load_start": load(), "results": []}
    with start_postgres(settings=PG_SETTINGS) as server:
        for n in [int(s) for s in args.sizes.split(",") if s]:
            run_size(server.url, n, args, out)
            if args.json:
                args.json.write_text(json.dumps(out, indent=1))
    out["load_end"] = load()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
