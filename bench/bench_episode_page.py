"""The newest page of one huge month: ``episode list --limit N`` (``EpisodeLog.list(limit=N)``) on a month file of
``--lines`` episodes, beside the baseline of the same run: every line of that file parsed (what the listing did
before, and still does without a limit).

    python bench/bench_episode_page.py [--lines 100000] [--limit 20] [--runs 5]

Three shapes of the month: ``ordered`` (lines appended as they happened: the usual case), ``late-import`` (the same
with 1% of the lines, spread through the file, dated into the page: each is parsed), ``shuffled`` (no time order at
all: the worst case, where every line's time is read as bytes and only those that could reach the page are parsed).
Prints the median of ``--runs`` calls and the ratio to the baseline; the page must equal the full parse's.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memvault.stores.episodes import EpisodeLog, parse_lines  # noqa: E402

START = datetime(2026, 12, 1, tzinfo=timezone.utc)


def build(base: Path, lines: int, shape: str) -> EpisodeLog:
    rng = random.Random(7)
    times = [START + timedelta(seconds=25 * k) for k in range(lines)]
    if shape == "shuffled":
        rng.shuffle(times)
    elif shape == "late-import":
        for k in rng.sample(range(lines), lines // 100):
            times[k] = times[-1] + timedelta(seconds=rng.randrange(1, 3600))
    path = base / "episodes" / "2026-12.jsonl"
    path.parent.mkdir(parents=True)
    with path.open("w") as f:
        for k, at in enumerate(times):
            f.write(json.dumps({"id": f"01J{k:023d}", "created_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                "source": rng.choice(["agent:claude-code", "user:ops", "agent:codex"]),
                                "kind": "raw", "text": f"turn {k}: ran the deploy of service {k % 37} and it "
                                "finished without errors after the health checks passed",
                                "tags": ["deploy"], "meta": {"session": f"s{k // 50}"}},
                               ensure_ascii=False, separators=(", ", ": ")) + "\n")
    return EpisodeLog(base, base / "episodes.lock")


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.lines} lines in one month, --limit {args.limit}, median of {args.runs}")
    print(f"{'shape':<12} {'file MB':>8} {'full parse ms':>14} {'page ms':>9} {'ratio':>7}")
    for shape in ("ordered", "late-import", "shuffled"):
        with tempfile.TemporaryDirectory() as tmp:
            log = build(Path(tmp), args.lines, shape)
            [path] = log.files()

            def full() -> list:
                items = list(parse_lines(log.read_bytes(path), path))
                items.sort(key=lambda e: (e.time, e.id))
                return items[-args.limit:]

            expected = full()
            assert [e.to_dict() for e in log.list(limit=args.limit)] == [e.to_dict() for e in expected], shape
            base = median_ms(full, args.runs)
            page = median_ms(lambda: log.list(limit=args.limit), args.runs)
            size = path.stat().st_size / 1e6
            print(f"{shape:<12} {size:>8.1f} {base:>14.1f} {page:>9.1f} {page / base:>7.3f}")


if __name__ == "__main__":
    main()
