"""One ``[recall]`` setting against another on the product itself: every dev question of a corpus through
``Vault.recall`` (k = 10, warm, one process), R@k and warm p50 for each value, the values alternating question by
question so both see the same machine.

    python bench/bench_setting.py --setting procedure_feedback_weight --values 0,1 [--sets cheat_to_tldr,...]

The eval vaults are ``bench/eval_corpora.py``'s (MiniLM; built once into ``MEMVAULT_BENCH_CACHE``). Unlike
``bench/eval_folds.py`` (a simulation of the ranking on dumps), this is what a user gets: the floors, abstention,
the five factors and the order of ties included.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import eval_corpora as ec  # noqa: E402
from eval_folds import TARGET_K  # noqa: E402  (each set's target k, as the folds report it)
from eval_recall import DEFAULT_CACHE, write_config  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from memvault import Vault
    from memvault.rules.config import RecallSettings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setting", required=True, help="a [recall] setting, e.g. procedure_feedback_weight")
    ap.add_argument("--values", required=True, help="comma-separated values, e.g. 0,1")
    ap.add_argument("--sets", default="cheat_to_tldr,alert_to_runbook,tldr_self")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.setting not in RecallSettings.__dataclass_fields__:
        ap.error(f"--setting: {args.setting!r} is not a [recall] setting")
    values = [float(x) for x in args.values.split(",")]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.sets.split(","):
        for corpus in ec.build(name, DEFAULT_CACHE):
            vaults = {}
            for value in values:  # one Vault per value, over the same files and index
                write_config(corpus.vault, {args.setting: value})
                vaults[value] = Vault.open(corpus.vault, daemon=False)
                vaults[value].reindex()
            write_config(corpus.vault)
            k = TARGET_K[name.split("/")[0]]
            hits = {v: 0 for v in values}
            times: dict[float, list[float]] = {v: [] for v in values}
            for q in corpus.queries[:3]:  # the model, the index and the caches warm
                for v in values:
                    vaults[v].recall(q.query, k=10, record_access=False, sync=False)
            for i, q in enumerate(corpus.queries):
                for v in (values if i % 2 == 0 else values[::-1]):
                    start = time.perf_counter()
                    got = vaults[v].recall(q.query, k=10, record_access=False, sync=False)
                    times[v].append((time.perf_counter() - start) * 1000)
                    hits[v] += bool(q.relevant & {f"{h.kind}:{h.id}" for h in list(got)[:k]})
            n = len(corpus.queries)
            res = out.setdefault(corpus.name, {})
            for v in values:
                res[str(v)] = {f"R@{k}": round(hits[v] / n, 4), "p50_ms": round(statistics.median(times[v]), 2),
                               "queries": n}
            first = values[0]
            print(f"{corpus.name} ({n} questions): " + "; ".join(
                f"{args.setting}={v}: R@{k} {hits[v] / n:.3f}, warm p50 {statistics.median(times[v]):.2f} ms "
                f"({statistics.median(times[v]) / statistics.median(times[first]):.2f}x)" for v in values), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
