"""What happened lately, as session start chooses it (memvault.interfaces.agents.recent), in a team vault: H hosts
(a folder each, `[episodes] track_in_git`), this month's and last month's file each (~1.2 MB: a busy month of
captured turns), beside the baseline of the same run: every line of those files parsed and weighed (the plain way to
find a failure anywhere in the 30 days).

    python bench/bench_recent.py [--hosts 1,10,60] [--runs 5]

Two shapes: ``other`` (the lines are about another project: the usual case in a shared vault) and ``own`` (every
line is about the session's project: the worst case, where the parse budget bounds the work). Prints the median of
``--runs`` calls and the ratio to the baseline; the failure planted in each host's file of today must be chosen.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memvault.interfaces.agents import recent as recent_mod  # noqa: E402
from memvault.interfaces.agents.project import Project  # noqa: E402
from memvault.stores.episodes import parse_line  # noqa: E402

AT = datetime(2026, 12, 20, 12, tzinfo=timezone.utc)
PROJECT = Project(cwd="/src/billing", root="/src/billing", name="billing")


def build(base: Path, hosts: int, about: str) -> list[Path]:
    files = []
    for h in range(hosts):
        for month_end in (AT, AT - timedelta(days=20)):
            lines = []
            for k in range(2000, 0, -1):
                at = month_end - timedelta(minutes=5 * k)
                lines.append(json.dumps({
                    "id": f"h{h}-{at:%m%d%H%M}", "created_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "source": "agent:claude-code", "kind": "raw", "tags": ["claude-code", about],
                    "text": f"User: tweak the {about} job\n\nAssistant: done " + "z " * 220,
                    "meta": {"cwd": f"/src/{about}"}}) + "\n")
            if month_end == AT:
                lines.append(json.dumps({"id": f"fail-{h}", "created_at": (AT - timedelta(minutes=h + 1)).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"), "source": "user:ops", "kind": "incident", "tags": ["billing"],
                    "text": f"billing deploy failed on host {h}"}) + "\n")
            path = base / f"host{h:02d}" / f"{month_end:%Y-%m}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(lines))
            files.append(path)
    return sorted(files, key=lambda p: (p.name, p.as_posix()))


def baseline(files: list[Path], limit: int) -> list[str]:
    """Every line of the window's files parsed and weighed."""
    picks = []
    for path in recent_mod.month_files(files, AT):
        for raw in path.read_bytes().splitlines():
            try:
                episode = parse_line(raw.decode("utf-8"), path)
            except Exception:
                continue
            if recent_mod.about(PROJECT, episode) and (pick := recent_mod.weigh(episode, AT)) is not None:
                picks.append(pick)
    picks.sort(key=lambda p: -p.weight)
    return [p.episode.id for p in picks if p.why != "turn"][:limit]


def timed(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", default="1,10,60")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"{'hosts':>5} {'lines about':>11} {'files MB':>8} {'recent() s':>10} {'baseline s':>10} {'ratio':>6}  "
          "failures heard")
    for hosts in (int(h) for h in args.hosts.split(",")):
        for about in ("search", "billing"):
            with tempfile.TemporaryDirectory() as tmp:
                files = build(Path(tmp), hosts, about)
                size = sum(p.stat().st_size for p in files) / 1e6
                mine, picked = timed(lambda: recent_mod.recent(files, PROJECT, 5, at=AT), args.runs)
                base, expected = timed(lambda: baseline(files, 5), max(1, args.runs // 2))
                heard = [p.episode.id for p in picked if p.why == "failure"]  # type: ignore[union-attr]
                ok = heard == expected
                print(f"{hosts:>5} {'other' if about == 'search' else 'own':>11} {size:>8.1f} {mine:>10.3f} "
                      f"{base:>10.3f} {mine / base:>6.2f}  {len(heard)} of 5 {'same as baseline' if ok else 'DIFFER'}")
                if not ok:
                    print(f"      recent: {heard}\n      baseline: {expected}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
