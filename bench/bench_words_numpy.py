"""A warm process ranks keywords itself (memvault.index.words): FTS5's BM25 against the postings held in numpy.

    python bench/bench_words_numpy.py [--sizes 10000,100000] [--queries 100] [--json OUT]

At 100k facts FTS5's ``bm25()`` costs ~3 µs for every row that holds a query word, so a warm recall's keyword
search takes longer than the query's embedding (issue 24). This measures the alternative: the
index's postings read out of FTS5 (``fts5vocab`` instance rows and ``%_docsize``), summed per (word, chunk) with
the field weights, and each query scored with FTS5's own BM25 (k1 1.2, b 0.75, the same IDF and its 1e-6 floor, the
whole row's length over every column) in numpy. It prints, beside FTS5 on the same queries in the same run:

- the load (seconds, and how many postings);
- the p50 / p95 of the keyword search both ways, and their ratio;
- how many queries get the same top-100 scores both ways (a query word that FTS5 reads as several tokens,
  ``saved_entry``, is a phrase there: such a query would stay with FTS5, and is counted apart);
- the same for the phrase search (consecutive query words as FTS5 phrases, OR-ed) against the postings of pairs of
  consecutive stems;
- what the postings hold in memory (numpy arrays and the word table), words and pairs.

The vaults are bench_index.py's (``bench/.cache/vault-<n>``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

def bench(n: int, queries: list[str]) -> dict[str, Any]:
    from memvault import Vault
    from memvault.index import KINDS, search
    from memvault.index.words import Postings, word_stems

    vault = Vault.open(HERE / ".cache" / f"vault-{n}", daemon=False)
    index = vault.index
    conn = index.connection()
    started = time.perf_counter()
    postings = Postings(conn, index.field_weights.params())
    load = time.perf_counter() - started
    kinds = list(KINDS)
    fts, mine, same, phrases, differ = [], [], 0, 0, []
    fts_pairs, mine_pairs, same_pairs, differ_pairs = [], [], 0, []
    for q in queries:
        s = time.perf_counter()
        expected = index._match(search.fts_query(q), kinds, 100, None)
        fts.append(time.perf_counter() - s)
        s = time.perf_counter()
        per_word = word_stems(search.query_terms(q))
        if any(len(stems) > 1 for stems in per_word):
            phrases += 1  # FTS5 reads this word as a phrase: such a query stays with FTS5
            mine.append(fts[-1])
            continue
        got = postings.top([stems[0] for stems in per_word if stems], kinds, 100)
        mine.append(time.perf_counter() - s)
        if _same(got, expected):
            same += 1
        else:
            differ.append(q)
        if not all(len(x) == 1 for x in word_stems([w for pair in search.phrase_pairs(q) for w in pair])):
            continue  # a phrase of more than two tokens: FTS5's
        s = time.perf_counter()
        expected = index._match(search.fts_phrase_query(q), kinds, 100, None)
        fts_pairs.append(time.perf_counter() - s)
        s = time.perf_counter()
        pairs = search.phrase_pairs(q)
        stems = word_stems([w for pair in pairs for w in pair])
        got = postings.top_pairs(list(zip((x[0] for x in stems[0::2]), (x[0] for x in stems[1::2]))), kinds, 100)
        mine_pairs.append(time.perf_counter() - s)
        if _same(got, expected):
            same_pairs += 1
        else:
            differ_pairs.append(q)
    vault.close()

    def p(values: list[float], q: float) -> float:
        return round(sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000, 3)

    return {"n": n, "queries": len(queries), "load_s": round(load, 2),
            "postings": len(postings.words.tf), "pair_postings": len(postings.pairs.tf),
            "held_mb": round(_held(postings) / 2**20, 1),
            "fts_p50_ms": p(fts, .5), "fts_p95_ms": p(fts, .95),
            "numpy_p50_ms": p(mine, .5), "numpy_p95_ms": p(mine, .95),
            "fts_over_numpy_p50": round(statistics.median(fts) / statistics.median(mine), 2),
            "same_top100_scores": same, "phrase_queries_left_to_fts": phrases, "different": differ,
            "fts_pairs_p50_ms": p(fts_pairs, .5), "fts_pairs_p95_ms": p(fts_pairs, .95),
            "numpy_pairs_p50_ms": p(mine_pairs, .5), "numpy_pairs_p95_ms": p(mine_pairs, .95),
            "fts_over_numpy_pairs_p50": round(statistics.median(fts_pairs) / statistics.median(mine_pairs), 2),
            "same_top100_pair_scores": same_pairs, "pair_queries": len(fts_pairs), "different_pairs": differ_pairs}


def _same(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    a, b = [score for _, score in got], [score for _, score in expected]
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) for x, y in zip(a, b))


def _held(postings: Any) -> int:
    """Bytes the postings hold: their numpy arrays, and the word table (dict, keys)."""
    import numpy as np

    arrays = [v for part in (postings, postings.words, postings.pairs) for v in vars(part).values()
              if isinstance(v, np.ndarray)]
    return sum(a.nbytes for a in arrays) + sys.getsizeof(postings.ids) + sum(sys.getsizeof(w) for w in postings.ids)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--json")
    args = ap.parse_args()
    queries = corpus.queries(args.queries)
    rows = [bench(int(n), queries) for n in args.sizes.split(",")]
    print("| facts | load (s) | postings: words / pairs | held (MB) | words: FTS5 p50 / p95 (ms) | numpy p50 / p95 | "
          "FTS5 / numpy | same top-100 | phrases: FTS5 p50 / p95 | numpy p50 / p95 | FTS5 / numpy | same top-100 | "
          "left to FTS5 |")
    print("|---:|---:|---:|---:|---|---|---:|---:|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['n']:,} | {r['load_s']} | {r['postings']:,} / {r['pair_postings']:,} | {r['held_mb']} | "
              f"{r['fts_p50_ms']} / {r['fts_p95_ms']} | {r['numpy_p50_ms']} / {r['numpy_p95_ms']} | "
              f"{r['fts_over_numpy_p50']}x | {r['same_top100_scores']} of "
              f"{r['queries'] - r['phrase_queries_left_to_fts']} | {r['fts_pairs_p50_ms']} / {r['fts_pairs_p95_ms']} | "
              f"{r['numpy_pairs_p50_ms']} / {r['numpy_pairs_p95_ms']} | "
              f"{r['fts_over_numpy_pairs_p50']}x | {r['same_top100_pair_scores']} of {r['pair_queries']} | "
              f"{r['phrase_queries_left_to_fts']} |")
        for q in r["different"] + r["different_pairs"]:
            print(f"  differs: {q!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
