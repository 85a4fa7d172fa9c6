"""What keeping every time of the index in one fixed-width UTC form costs (migration 0008, ``timeutil.index_time``).

    python bench/bench_index_times.py [--docs 100000] [--rounds 3]

- ``migration``: 0008 on an index of ``--docs`` episodes whose times are written as lines give them (a third with
  an offset, a third with milliseconds), against the baseline of the same UPDATE of every row that writes each
  time back unchanged (what any rewrite of the rows costs).
- ``per line``: ``index_time`` of one line's ``created_at`` against ``json.loads`` of that line (what reading it
  costs anyway), on the same lines.
- ``shown``: ``shown_time`` of a stored time (every listing row and every recall candidate) against ``dict(zip())``
  of the row it is in.
Each printed as seconds and a ratio to its baseline from the same run (best of ``--rounds``).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memvault.index import db  # noqa: E402
from memvault.index.search import DOC_FIELDS  # noqa: E402
from memvault.rules.migrations import migrate  # noqa: E402
from memvault.rules.timeutil import format_time, index_time, shown_time  # noqa: E402


def written(n: int) -> list[str]:
    """``n`` times as lines give them: Z, +02:00, milliseconds, in turn."""
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = []
    for i in range(n):
        t = start + timedelta(seconds=37 * i, milliseconds=i % 1000)
        form = i % 3
        out.append(t.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ") if form == 0 else
                   t.astimezone(timezone(timedelta(hours=2))).replace(microsecond=0).isoformat() if form == 1 else
                   format_time(t))
    return out


def build(path: Path, times: list[str]) -> None:
    conn = db.connect(path)
    migrate(conn, db.MIGRATIONS[:-1])  # an index of the memvault before 0008
    with conn:
        conn.executemany("INSERT INTO docs(kind, item_id, path, body, hash, importance, confidence, source, created, "
                         "updated) VALUES ('episode', ?, 'episodes/x.jsonl', 'b', x'00', 0.5, 0.5, 's', ?, ?)",
                         [(f"e{i:08d}", t, t) for i, t in enumerate(times)])
    conn.close()


def best(fn, rounds: int) -> float:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times = written(args.docs)
    tmp = Path(tempfile.mkdtemp(prefix="bench-times-"))
    try:
        template = tmp / "template.db"
        build(template, times)
        step = dict(db.MIGRATIONS)["0008_times_in_order"]

        def run(apply) -> float:
            spent = []
            for r in range(args.rounds):
                copy = tmp / f"run-{r}.db"
                shutil.copy(template, copy)
                conn = db.connect(copy)
                t0 = time.perf_counter()
                with conn:
                    apply(conn)
                spent.append(time.perf_counter() - t0)
                conn.close()
                copy.unlink()
            return min(spent)

        def unchanged(conn) -> None:
            rows = conn.execute("SELECT doc, created, updated FROM docs").fetchall()
            conn.executemany("UPDATE docs SET created = ?, updated = ? WHERE doc = ?", [(c, u, d) for d, c, u in rows])

        base, mig = run(unchanged), run(step)
        print(f"migration of {args.docs} docs: {mig:.3f} s; the same rows written back unchanged {base:.3f} s; "
              f"ratio {mig / base:.2f}")
        lines = [json.dumps({"id": f"e{i}", "created_at": t, "source": "s", "kind": "raw", "text": "x" * 120})
                 for i, t in enumerate(times)]
        parse = best(lambda: [json.loads(line) for line in lines], args.rounds)
        convert = best(lambda: [index_time(t) for t in times], args.rounds)
        print(f"per line: index_time {convert / len(times) * 1e6:.2f} us, json.loads of the line "
              f"{parse / len(times) * 1e6:.2f} us; ratio {convert / parse:.2f}")
        stored = [index_time(t) for t in times]
        rows = [("episode", f"e{i}", "p", "b", 0.5, 0.5, "s", s, s, 0, None, None, "raw", None, i)
                for i, s in enumerate(stored)]
        zipped = best(lambda: [dict(zip(DOC_FIELDS, r)) for r in rows], args.rounds)
        shown = best(lambda: [(shown_time(s), shown_time(s)) for s in stored], args.rounds)
        print(f"shown: two shown_time per row {shown / len(rows) * 1e6:.2f} us, dict(zip()) of the row "
              f"{zipped / len(rows) * 1e6:.2f} us; ratio {shown / zipped:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
