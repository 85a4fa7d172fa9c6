"""What reading a team's shared rows again from this host's files costs the web view and recall.

    python bench/bench_team_listings.py [--sessions 100] [--per-session 100] [--runs 200] [--repeat 5]

A team of two hosts on a throwaway PostgreSQL 18 + pgvector (tests/pgserver.py) and a bare git remote; host A
captures ``--sessions`` agent sessions of ``--per-session`` episodes each (episodes tracked in git, one month file),
a runbook run ``--runs`` times, pushes and publishes; host B, a fresh clone, then lists. Each figure is the median
of ``--repeat`` calls, in ms:

- ``sessions_db``: the shared index's own sessions query (what the web view showed before: the database's sources);
- ``sessions``: the team's sessions as the web view lists them now (every episode of the listed sessions read
  again from its file);
- ``episodes``: one page (100) of the timeline, each row read again from its file;
- ``runs``: the runbook page's runs (100), each read again from its file (``runs_db``: the database's query alone);
- ``recall``: a keyword recall whose best hit is the runbook (its last three runs read from their file;
  ``recall_db_runs``: the same with the runs as the database gives them, as before).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1000, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--per-session", type=int, default=100)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    os.environ.update({"MEMVAULT_NO_DAEMON": "1", "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@example.com",
                       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "b@example.com"})
    from conftest import git
    from pgserver import start_postgres
    from test_team import make_team, push

    with start_postgres() as server, tempfile.TemporaryDirectory(prefix="bench-team-listings-") as tmp:
        os.environ["MEMVAULT_INDEX_URL"] = server.url
        _remote, a, clone = make_team(Path(tmp), track_episodes=True)
        items = [{"text": f"turn {t} of session {s}: the agent looked at the nginx logs on web{t % 7}",
                  "meta": {"session_id": f"sess-{s}", "runtime": "claude-code", "turn": t}}
                 for s in range(args.sessions) for t in range(args.per_session)]
        a.vault.episodes.append_many(items, source="agent:claude-code")
        script = Path(tmp) / "rotate.sh"
        script.write_text("#!/bin/sh\n# description: Rotate the nginx logs\ntrue\n")
        script.chmod(0o755)
        a.vault.procedures.add("web/rotate-nginx", script, source="user:admin")
        for _ in range(args.runs):
            a.vault.procedures.run("web/rotate-nginx", [], source="user:admin", stdout=-3, stderr=-3)
        git(a.root, "add", "episodes")
        git(a.root, "commit", "-qm", "episodes")
        push(a)
        a.vault.reindex()
        b = clone()
        team, browse = b.vault.index, b.vault.browse
        shared = team.shared
        if os.environ.get("BENCH_PROFILE"):
            import cProfile
            cProfile.runctx("team.sessions(100)", globals(), locals(), sort="cumtime")
        def recall():
            hits = b.vault.recall("rotate nginx logs runbook", k=5, mode="keyword", kinds=["procedure"], log=False)
            assert hits[0].extra.get("runs"), hits

        out = {"episodes_in_vault": len(items) + args.runs, "repeat": args.repeat,
               "sessions_db": median_ms(lambda: shared.sessions(100), args.repeat),
               "sessions": median_ms(lambda: team.sessions(100), args.repeat),
               "episodes": median_ms(lambda: browse.episodes(limit=100), args.repeat),
               "runs_db": median_ms(lambda: shared.runs_of(["web/rotate-nginx"], 100), args.repeat),
               "runs": median_ms(lambda: browse.runs("web/rotate-nginx", 100), args.repeat),
               "recall": median_ms(recall, args.repeat)}
        team._runs_as_filed = lambda name, runs: runs  # as before: the runs as the database gives them
        out["recall_db_runs"] = median_ms(recall, args.repeat)
        out["load"] = os.getloadavg()[0]
        assert len(team.sessions(100)) == min(100, args.sessions)
        print(json.dumps(out, indent=2))
        a.vault.index.close()
        b.vault.index.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
