"""Warm recall on a team host, this tree against another (A/B in one run), on one shared index.

    python bench/bench_team_ab.py --before DIR [--n 2000] [--queries 30] [--rounds 3] [--json OUT]

``DIR`` is a checkout of the code to compare with (``git archive main | tar -x -C DIR``); this tree is "after".
One throwaway PostgreSQL 18 + pgvector (tests/pgserver.py), a bare git remote, the packaged all-MiniLM-L6-v2:
host A publishes ``--n`` facts with this tree's code; host B is a fresh clone. Then, ``--rounds`` times and
alternating, a process of each tree opens B, answers one recall (warm-up: the model loads, the overlay is made,
connections open) and times ``--queries`` more: the warm recall of an MCP server on a team host. Reported: each
tree's p50 and p95 over all rounds, and after / before. Both trees must read the same index schemas.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import corpus  # noqa: E402

if not corpus.DATA.is_dir():  # a git worktree beside the main checkout: the shared data is where main's is
    corpus.DATA = Path(os.environ.get("MEMVAULT_EVAL_DATA", "/work/shared/eval/data"))

# Run in a child process with PYTHONPATH set to one tree: opens host B, warms up, times the queries.
_CHILD = r"""
import json, statistics, sys, time
from memvault import Vault
root, queries = sys.argv[1], json.loads(sys.argv[2])
v = Vault.open(root, daemon=False)
first = v.recall(queries[0], k=10, record_access=False)
assert first.mode == "hybrid" and not first.warnings, first.warnings
times = []
for q in queries[1:]:
    t = time.perf_counter()
    result = v.recall(q, k=10, record_access=False)
    times.append(time.perf_counter() - t)
    assert not [w for w in result.warnings if "team index" in w], result.warnings
print(json.dumps(times))
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the code to compare with")
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from bench_team import team_vault
    from pgserver import start_postgres

    from memvault import Vault

    env = {**os.environ, "MEMVAULT_NO_DAEMON": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.com"}
    os.environ.update(env)
    trees = {"before": args.before.resolve(), "after": REPO}
    queries = corpus.queries(args.queries + 1)
    out: dict[str, Any] = {"n": args.n, "queries": args.queries, "rounds": args.rounds, "argv": sys.argv,
                           "load_start": os.getloadavg()[0]}
    work = Path(tempfile.mkdtemp(prefix="bench-team-ab-"))
    try:
        with start_postgres() as server:
            os.environ["MEMVAULT_INDEX_URL"] = env["MEMVAULT_INDEX_URL"] = server.url
            remote, a_root = team_vault(work, args.n)
            t = time.perf_counter()
            v = Vault.open(a_root, daemon=False)
            v.reindex()
            v.index.close()
            out["publish_s"] = round(time.perf_counter() - t, 1)
            b_root = work / "b"
            subprocess.run(["git", "clone", "-q", str(remote), str(b_root)], check=True, capture_output=True)
            times: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    child = subprocess.run([sys.executable, "-c", _CHILD, str(b_root), json.dumps(queries)],
                                           env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
                    if child.returncode != 0:
                        raise SystemExit(f"{name}: {child.stderr[-2000:]}")
                    times[name] += json.loads(child.stdout.splitlines()[-1])
                    print(f"# {name}: p50 {1000 * statistics.median(times[name]):.1f} ms so far, load "
                          f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, values in times.items():
        out[f"{name}_p50_ms"] = round(1000 * statistics.median(values), 1)
        out[f"{name}_p95_ms"] = round(1000 * pct(values, 95), 1)
    out["after_over_before_p50"] = round(out["after_p50_ms"] / out["before_p50_ms"], 2)
    out["load_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
