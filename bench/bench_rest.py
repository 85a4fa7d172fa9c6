"""What reading the rest of the question costs a warm recall (``[recall] rest_weight``): the same questions through
``Vault.recall`` with the weight at 0 and at the shipped value, alternating question by question so both see the
same machine, beside the bare query embedding (the baseline: issue 24's bound is a warm recall under 2.0× of it at
10k memories).

    python bench/bench_rest.py [--size 10000] [--queries 100] [--weight 0.45] [--rounds 2]

The vault is ``bench/bench_index.py``'s (``bench/.cache/vault-<size>``, built by it).
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
from bench_index import vault_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--weight", type=float, default=0.45)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from memvault import Vault
    from memvault.core.candidates import _rest_vector  # noqa: F401 (the code measured)

    root = vault_dir(args.size)
    if not (root / "memvault.toml").exists():
        sys.exit(f"bench_rest: no vault at {root}: run bench/bench_index.py --sizes {args.size} --only build")
    vault = Vault.open(root, daemon=False)
    emb = vault.engine.get()
    vault.follow()
    base = vault.config
    configs = {w: dataclasses.replace(base, recall=dataclasses.replace(base.recall, rest_weight=w))
               for w in (0.0, args.weight)}
    queries = corpus.queries(args.queries)
    for q in queries[:5]:  # warm every path
        for c in configs.values():
            vault.config = c
            vault.recall(q, k=10, record_access=False)
    for r in range(args.rounds):
        t: dict[str, list[float]] = {"embed": [], **{f"w={w}": [] for w in configs}}
        for i, q in enumerate(queries):
            order = list(configs.items()) if i % 2 == 0 else list(reversed(configs.items()))
            for w, c in order:
                vault.config = c
                gc.collect()
                s = time.perf_counter()
                vault.recall(q, k=10, record_access=False)
                t[f"w={w}"].append(time.perf_counter() - s)
            s = time.perf_counter()
            emb.embed_query(q)
            t["embed"].append(time.perf_counter() - s)
        p50 = {k: statistics.median(v) * 1000 for k, v in t.items()}
        print(f"round {r + 1}, {args.size} memories, {len(queries)} questions: embed p50 {p50['embed']:.2f} ms; "
              + "; ".join(f"recall {k} p50 {p50[k]:.2f} ms ({p50[k] / p50['embed']:.2f}x embed)"
                          for k in p50 if k != "embed"))
    vault.config = base
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
