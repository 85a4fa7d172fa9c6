"""The listings a user runs six months in, old code against new in one run: ratios, not timed tests.

    python bench/bench_listings.py --root /tmp/sm-big --old /path/to/checkout/before [--runs 5] [--scratch /tmp]

``--root``: a vault made by ``bench/bench_six_months.py build`` (20,000 facts, an index of 520,900 rows). Nothing in
it is written: the index is copied to ``--scratch`` first (this code's migrations would otherwise be applied to it,
and an older memvault refuses an index a newer one migrated).

- ``fact list`` and ``stale`` as a user runs them (``python -m memvault ...``, a fresh process each), the old
  checkout's and this one's in turn, beside ``python -c 'import memvault'`` of the same run;
- the web overview's counts per kind and source (``listings.doc_counts``), without and with the paths of a scoped
  reader to leave out, on the copy of the index: the old plan is read inside a transaction that drops the index
  migration 0009 made (and is rolled back), the new one after it; the migration's own cost is timed once.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PY = sys.executable


def wall(argv: list[str], code: str, cwd: Path) -> float:
    env = dict(os.environ, PYTHONPATH=code, MEMVAULT_DIR=str(cwd))
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} (PYTHONPATH={code}): exit {done.returncode}: {done.stderr[-400:]!r}")
    return took


def commands(root: Path, old: str, runs: int) -> None:
    cli = [PY, "-m", "memvault"]
    cases = {"import memvault": [PY, "-c", "import memvault"], "fact list": cli + ["fact", "list"],
             "fact list --json": cli + ["fact", "list", "--json"], "stale --json": cli + ["stale", "--json"]}
    print(f"{'command (fresh process)':<28} {'old s':>7} {'new s':>7} {'new/old':>8} {'new x import':>13}")
    base = None
    for name, argv in cases.items():
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(runs):  # in turn, so both see the same load
            times["old"].append(wall(argv, old, root))
            times["new"].append(wall(argv, str(REPO), root))
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        base = base or n
        print(f"{name:<28} {o:>7.2f} {n:>7.2f} {n / o:>8.2f} {n / base:>13.1f}", flush=True)


def counts(root: Path, scratch: Path, runs: int) -> None:
    sys.path.insert(0, str(REPO))
    from memvault.index import listings
    from memvault.index.db import MIGRATIONS, connect, migrate

    db = (root / ".git" / "memvault" / "root" / "index.db").resolve()  # a link to the index of the current model
    copy = scratch / "bench-listings-index.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)
    shutil.copyfile(db, copy)
    if Path(str(db) + "-wal").exists():
        shutil.copyfile(str(db) + "-wal", str(copy) + "-wal")
    conn = connect(copy)
    rows = conn.execute("SELECT COUNT(*) FROM docs").fetchone()[0]
    start = time.perf_counter()
    migrate(conn, MIGRATIONS)
    print(f"migration 0009 (CREATE INDEX docs_kind_source) on {rows:,} docs: {time.perf_counter() - start:.2f} s")
    scoped = frozenset({"facts/db/primary.md", "episodes/2026-11.jsonl"})
    print(f"{'overview counts':<28} {'old ms':>7} {'new ms':>7} {'new/old':>8}")
    for label, hide in (("every source", frozenset()), ("a scoped reader", scoped)):
        times: dict[str, list[float]] = {"old": [], "new": []}
        answers = {}
        for _ in range(runs):
            for which in ("old", "new"):
                if which == "old":
                    conn.execute("BEGIN")
                    conn.execute("DROP INDEX docs_kind_source")
                start = time.perf_counter()
                answers[which] = listings.doc_counts(conn, hide)
                times[which].append(time.perf_counter() - start)
                if which == "old":
                    conn.execute("ROLLBACK")
        assert answers["old"] == answers["new"], "the counts differ"
        o, n = statistics.median(times["old"]) * 1000, statistics.median(times["new"]) * 1000
        print(f"{label:<28} {o:>7.0f} {n:>7.0f} {n / o:>8.2f}", flush=True)
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(copy) + suffix).unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--old", required=True, help="a memvault checkout of the code before")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scratch", default="/tmp")
    parser.add_argument("--only", choices=("commands", "counts"))
    args = parser.parse_args()
    root = Path(args.root).resolve()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.runs} runs each, medians")
    if args.only != "counts":
        commands(root, str(Path(args.old).resolve()), args.runs)
    if args.only != "commands":
        counts(root, Path(args.scratch), args.runs)


if __name__ == "__main__":
    main()
