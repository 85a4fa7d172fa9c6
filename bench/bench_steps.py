"""What embedding each runbook step by step costs (issue 27): a full rebuild of a runbook vault with its steps against
the same rebuild without them, in one run, the index's size both ways, and a warm recall of the corpus's questions
on each (recall reads the steps of every runbook among its candidates).

    python bench/bench_steps.py [--corpus alert_to_runbook] [--rounds 2] [--queries 200] [--recall-only] [--json OUT]

The vault is the eval corpus's (``bench/eval_corpora.py``: 380 alert runbooks by default, or the 7,315 tldr pages
with ``--corpus cheat_to_tldr``), copied twice. "Without steps" is the same code with ``documents.step_spans``
returning none; rounds alternate the order (ABBA). The model load is left out: one engine serves every rebuild.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import eval_corpora as ec  # noqa: E402
from eval_recall import DEFAULT_CACHE, write_config  # noqa: E402


def log(message: str) -> None:
    print(f"[bench_steps] {message}", file=sys.stderr, flush=True)


def warm_recall(v: Any, queries: list[str]) -> list[float]:
    """Milliseconds per recall (k 10, the query's embedding included), each query asked once before it is timed."""
    for q in queries[:5]:
        v.recall(q, k=10, record_access=False)
    out = []
    for q in queries:
        started = time.perf_counter()
        v.recall(q, k=10, record_access=False)
        out.append((time.perf_counter() - started) * 1000)
    return out


def rebuild(root: Path, steps: bool, engine: Any, queries: list[str]) -> dict[str, Any]:
    from memvault import Vault
    from memvault.index import documents

    real = documents.step_spans
    if not steps:
        documents.step_spans = lambda body, limit=documents.STEPS_MAX: []  # type: ignore[assignment]
    try:
        v = Vault.open(root, daemon=False)
        v.engine.use(engine)
        started = time.perf_counter()
        report = v.reindex(full=True)
        seconds = time.perf_counter() - started
        conn = v.index.connection()
        chunks = conn.execute("SELECT COUNT(*), COUNT(*) FILTER (WHERE chunk < 0) FROM chunks").fetchone()
        used = v.index.stats()["used_bytes"]  # pages in use (a rebuild's freed pages apart)
        ms = warm_recall(v, queries)
        v.index.close()
    finally:
        documents.step_spans = real
    return {"seconds": seconds, "chunks": chunks[0], "steps": chunks[1], "embedded": report.chunks_embedded,
            "bytes": used, "recall_ms_p50": statistics.median(ms),
            "recall_ms_p95": statistics.quantiles(ms, n=20)[-1] if len(ms) >= 20 else max(ms)}


def recall_only(roots: dict[str, Path], queries: list[str], rounds: int) -> None:
    from memvault import Vault

    vaults = {name: Vault.open(root, daemon=False) for name, root in roots.items()}
    engine = vaults["with"].engine.get()
    vaults["without"].engine.use(engine)
    p50: dict[str, list[float]] = {"with": [], "without": []}
    for r in range(rounds):
        for name in (("with", "without") if r % 2 == 0 else ("without", "with")):
            p50[name].append(statistics.median(warm_recall(vaults[name], queries)))
            log(f"round {r + 1} {name} steps: warm recall p50 {p50[name][-1]:.1f} ms")
    med = {name: statistics.median(x) for name, x in p50.items()}
    print(f"warm recall p50 with steps {med['with']:.1f} ms, without {med['without']:.1f} ms "
          f"({med['with'] / med['without']:.2f}x, {len(queries)} questions, {rounds} rounds)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="alert_to_runbook", choices=("alert_to_runbook", "cheat_to_tldr"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--queries", type=int, default=200, help="how many of the corpus's questions time a warm recall")
    ap.add_argument("--recall-only", action="store_true",
                    help="time warm recall on the two copies a previous run built, rounds alternating (ABBA)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    (corpus,) = ec.build(args.corpus, DEFAULT_CACHE)
    work = DEFAULT_CACHE.parent / "steps-bench"
    queries = [q.query for q in corpus.queries][: args.queries]
    if args.recall_only:
        recall_only({name: work / name for name in ("with", "without")}, queries, args.rounds)
        return
    roots = {}
    for name in ("with", "without"):
        roots[name] = work / name
        if roots[name].exists():
            shutil.rmtree(roots[name])
        shutil.copytree(corpus.vault, roots[name], ignore=shutil.ignore_patterns(".memvault"))
        write_config(roots[name])
    from memvault import Vault

    engine = Vault.open(roots["with"], daemon=False).engine.get()
    engine.embed_documents(["warm up"])
    runs: dict[str, list[dict[str, Any]]] = {"with": [], "without": []}
    for r in range(args.rounds):
        order = ("with", "without") if r % 2 == 0 else ("without", "with")
        for name in order:
            out = rebuild(roots[name], name == "with", engine, queries)
            runs[name].append(out)
            log(f"round {r + 1} {name} steps: {out}")
    med = {name: statistics.median(x["seconds"] for x in rs) for name, rs in runs.items()}
    rec = {name: statistics.median(x["recall_ms_p50"] for x in rs) for name, rs in runs.items()}
    last = {name: rs[-1] for name, rs in runs.items()}
    result = {"corpus": args.corpus,
              "seconds": med, "time_ratio": med["with"] / med["without"],
              "chunks": {n: last[n]["chunks"] for n in last}, "steps": last["with"]["steps"],
              "bytes": {n: last[n]["bytes"] for n in last}, "bytes_ratio": last["with"]["bytes"] / last["without"]["bytes"],
              "recall_ms_p50": rec, "recall_ratio": rec["with"] / rec["without"], "runs": runs}
    print(f"{args.corpus}: rebuild with steps {med['with']:.1f} s, without {med['without']:.1f} s "
          f"({result['time_ratio']:.2f}x); chunks {last['with']['chunks']} ({last['with']['steps']} steps) against "
          f"{last['without']['chunks']}; index {last['with']['bytes'] / 1e6:.1f} MB against "
          f"{last['without']['bytes'] / 1e6:.1f} MB ({result['bytes_ratio']:.2f}x); warm recall p50 {rec['with']:.1f} ms "
          f"against {rec['without']:.1f} ms ({result['recall_ratio']:.2f}x, {len(queries)} questions)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
