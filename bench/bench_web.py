"""Benchmark of the web view (issue 19): server time per page at 10k facts and 100k episodes, and the resident
memory of a ``memvault ui`` process with no model loaded.

The vault: 10k facts from bench/corpus.py (one commit each, made with ``git fast-import`` so the growth plot has a
real history to walk), 100k episodes over a year (a tenth captured from agent sessions with ``meta.session_id``),
three procedures with 300 runs, 20 proposals in the inbox, 10k entries in the recall log; a keyword-only index
(listings need no vectors; the playground runs keyword recall so no model is loaded). Built once under
``--dir`` and reused.

Server time is the app's own ``Server-Timing`` (the handler on the vault thread and the template), measured
in-process after one warm-up request per page; the baseline is ``/live`` in the same run (a request that touches
the index and renders nothing). Memory: ``memvault ui`` started as its own process, every page requested once,
then VmRSS and VmHWM from /proc, against a bare ``python -c "import memvault.interfaces.cli"`` of the same run.

    .venv/bin/python bench/bench_web.py [--dir /tmp/bench-web] [--facts 10000] [--episodes 100000] [--runs 25]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

if not corpus.DATA.exists() and Path("/work/shared/eval/data").exists():  # a worktree beside the main checkout
    corpus.DATA = Path("/work/shared/eval/data")

TARGET_MS = 150.0
OVERVIEW_TARGET_MS = 300.0
RSS_TARGET_MB = 150.0
TOKEN = "bench-token-0123456789abcdef"
T0 = datetime(2025, 12, 1, tzinfo=timezone.utc)


def fact_file(i: int, spec: corpus.FactSpec) -> str:
    source = "agent:bench" if i % 20 == 0 else "user:bench"
    updated = (T0 + timedelta(minutes=i * 50)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"---\ncategory: {spec.category}\nsource: {source}\ntags: [t{i % 50}, {spec.category}]\n"
            f"created: {updated}\nupdated: {updated}\n---\n{spec.text}\n")


def build(root: Path, n_facts: int, n_episodes: int) -> None:
    """The vault (see the module doc); skipped when ``root`` already holds one of this size."""
    stamp = root / ".bench-web.json"
    want = {"facts": n_facts, "episodes": n_episodes, "corpus": corpus.VERSION, "v": 2}
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        return
    if root.exists():
        subprocess.run(["rm", "-rf", str(root)], check=True)
    from memvault import Vault
    from memvault.stores.episodes import new_id
    from memvault.stores.state import RecallLogEntry

    Vault.init(root, daemon=False)
    env = {**os.environ, "GIT_AUTHOR_NAME": "user:bench", "GIT_AUTHOR_EMAIL": "bench@memvault",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}
    started = time.perf_counter()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    stream = [f"reset refs/heads/main\nfrom {head}\n"]
    for i, spec in enumerate(corpus.facts(n_facts)):
        data = fact_file(i, spec).encode()
        when = int((T0 + timedelta(minutes=i * 50)).timestamp())
        msg = f"fact set {spec.key} (user:bench)\n\nMemvault-Key: {spec.key}\nMemvault-Source: user:bench\n".encode()
        stream.append(f"commit refs/heads/main\nauthor user:bench <bench@memvault> {when} +0000\n"
                      f"committer bench <bench@example.com> {when} +0000\ndata {len(msg)}\n")
        stream.append(msg.decode() + f"M 100644 inline facts/{spec.key}.md\ndata {len(data)}\n")
        stream.append(data.decode() + "\n")
    for name, text in [("db/rotate-logs", "#!/usr/bin/env bash\n# description: Rotate PostgreSQL logs\necho ok\n"),
                       ("web/reload-nginx", "#!/usr/bin/env bash\n# description: Reload nginx\necho ok\n"),
                       ("ops/drain-host", "#!/usr/bin/env bash\n# description: Drain a host\necho ok\n")]:
        data = text.encode()
        when = int(T0.timestamp())
        msg = f"proc add {name} (user:bench)\n"
        stream.append(f"commit refs/heads/main\nauthor user:bench <bench@memvault> {when} +0000\n"
                      f"committer bench <bench@example.com> {when} +0000\ndata {len(msg)}\n{msg}"
                      f"M 100755 inline procedures/{name}.sh\ndata {len(data)}\n{text}\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input="".join(stream).encode(), check=True, env=env)
    subprocess.run(["git", "reset", "-q", "--hard", "main"], cwd=root, check=True)
    print(f"# git: {n_facts + 3} commits in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    rng = random.Random(19)
    by_month: dict[str, list[str]] = {}
    sources = ["agent:deployer", "agent:monitor", "user:ops", "web:status.example", "agent:claude-code"]
    for i in range(n_episodes):
        at = T0 + timedelta(seconds=i * (365 * 86400 // n_episodes))
        source = sources[i % len(sources)]
        record = {"id": new_id(at), "created_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "source": source,
                  "kind": "raw", "text": f"{corpus.fact(rng.randrange(40000)).text} (event {i})"}
        if source == "agent:claude-code":
            record["meta"] = {"session_id": f"sess-{i // 40:05d}", "runtime": "claude-code"}
        if i % 300 == 0:
            name = ["db/rotate-logs", "web/reload-nginx", "ops/drain-host"][i // 300 % 3]
            record.update(kind="procedure_run", source="user:ops", text=f"ran procedure {name} (exit 0, 1.2 s)",
                          meta={"name": name, "commit": head, "blob": "0" * 40, "exit_code": i % 7 == 0 and 1 or 0,
                                "duration_ms": 1200 + i % 500, "dirty": False})
        by_month.setdefault(at.strftime("%Y-%m"), []).append(json.dumps(record))
    for month, lines in by_month.items():
        (root / "episodes" / f"{month}.jsonl").write_text("\n".join(lines) + "\n")
    vault = Vault.open(root, daemon=False)
    for i in range(20):
        vault.facts.set(f"ops/proposal-{i:02d}", corpus.fact(50_000 + i).text, source="agent:scraper")
    started = time.perf_counter()
    vault.index.sync()
    print(f"# index (keyword-only): {time.perf_counter() - started:.1f} s", file=sys.stderr)
    log = vault.recall_log
    for i in range(10_000):
        at = (datetime.now(timezone.utc) - timedelta(minutes=4 * i)).timestamp()
        log.log_recall(RecallLogEntry(at, sources[i % 5], f"question {i}", {"k": 5},
                                      [["fact", corpus.fact(i).key, 0.5, True]], None, 0, 20 + i % 30))
    vault.growth()
    stamp.write_text(json.dumps(want))


def pages(n_facts: int) -> dict[str, str]:
    key = corpus.fact(n_facts // 2).key
    prefix = key.split("/")[0]
    return {
        "overview": "/", "facts": "/facts", "facts by prefix": f"/facts?prefix={prefix}",
        "facts by tag": "/facts?tag=t7", "facts untrusted": "/facts?trust=untrusted", "facts stale": "/facts?stale=1",
        "fact (history)": f"/fact/{key}", "inbox (20)": "/inbox", "timeline": "/timeline",
        "timeline by source": "/timeline?source=user:ops", "timeline by words": "/timeline?text=postgres+backup",
        "timeline by session": "/timeline?session=sess-01200", "sessions": "/sessions",
        "procedures": "/procedures", "procedure (runs)": "/procedure/db/rotate-logs",
        "recall playground (keyword)": "/recall?q=restart+the+postgres+replica&mode=keyword",
        "recall log": "/recalls", "timeline JSON": "/timeline?format=json",
    }


def server_times(root: Path, runs: int, n_facts: int) -> dict[str, dict[str, float]]:
    from starlette.testclient import TestClient

    from memvault import Vault
    from memvault.interfaces.web import build as build_app

    vault = Vault.open(root, daemon=False)
    app, token = build_app(vault, port=8787, token=TOKEN, refresh=False)
    out: dict[str, dict[str, float]] = {}
    with TestClient(app.asgi, base_url="http://127.0.0.1:8787", headers={"Authorization": f"Bearer {token}"}) as c:
        started = time.perf_counter()
        app.history_ready.wait(600)  # the view brings git's commit-graph up to date when it starts
        print(f"# commit-graph written by the view in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for name, path in {"baseline /live": "/live", **pages(n_facts)}.items():
            first = c.get(path)
            assert first.status_code == 200, (path, first.status_code, first.text[:300])
            times = []
            for _ in range(runs):
                r = c.get(path)
                if "server-timing" in r.headers:
                    times.append(float(re.search(r"dur=([\d.]+)", r.headers["server-timing"]).group(1)))
                else:  # /live has no page timing: the whole request
                    t = time.perf_counter()
                    c.get(path)
                    times.append((time.perf_counter() - t) * 1000)
            times.sort()
            out[name] = {"first_ms": float(re.search(r"dur=([\d.]+)", first.headers.get("server-timing", "dur=0"))
                                           .group(1)),
                         "p50_ms": statistics.median(times), "p95_ms": times[int(0.95 * (len(times) - 1))]}
    return out


def rss(root: Path, n_facts: int) -> dict[str, float]:
    def status(pid: int) -> dict[str, float]:
        fields = {}
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS", "VmHWM", "RssAnon", "RssFile")):
                fields[line.split(":")[0]] = int(line.split()[1]) / 1024
        return fields

    bare = subprocess.Popen([sys.executable, "-c", "import memvault.interfaces.cli, time; time.sleep(3)"])
    time.sleep(2.5)
    base = status(bare.pid)
    bare.wait()
    env = {**os.environ, "MEMVAULT_UI_TOKEN": TOKEN, "MEMVAULT_NO_DAEMON": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(root), "ui", "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        port = int(re.search(r":(\d+)/", line).group(1))
        for path in pages(n_facts).values():
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                             headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
        time.sleep(1)
        ui = status(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    return {"ui_rss_mb": ui["VmRSS"], "ui_peak_mb": ui["VmHWM"], "ui_anon_mb": ui["RssAnon"],
            "ui_file_mb": ui["RssFile"], "bare_import_rss_mb": base["VmRSS"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/bench-web")
    parser.add_argument("--facts", type=int, default=10_000)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()
    root = Path(args.dir) / f"vault-{args.facts}-{args.episodes}"
    build(root, args.facts, args.episodes)
    load = os.getloadavg()
    times = server_times(root, args.runs, args.facts)
    memory = rss(root, args.facts)
    base = times["baseline /live"]["p50_ms"]
    print(f"# {args.facts} facts, {args.episodes} episodes; load average {load[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'page':32} {'first':>8} {'p50 ms':>8} {'p95 ms':>8} {'p50/target':>11} {'p50/live':>9}")
    for name, t in times.items():
        target = OVERVIEW_TARGET_MS if name == "overview" else TARGET_MS
        print(f"{name:32} {t['first_ms']:8.1f} {t['p50_ms']:8.1f} {t['p95_ms']:8.1f} {t['p50_ms'] / target:11.2f} "
              f"{t['p50_ms'] / base:9.1f}")
    print(f"memvault ui resident: {memory['ui_rss_mb']:.0f} MB (peak {memory['ui_peak_mb']:.0f} MB; target "
          f"{RSS_TARGET_MB:.0f}: {memory['ui_peak_mb'] / RSS_TARGET_MB:.2f}); of it {memory['ui_anon_mb']:.0f} MB "
          f"anonymous and {memory['ui_file_mb']:.0f} MB file pages (the mmap'ed index, libraries); bare CLI import "
          f"{memory['bare_import_rss_mb']:.0f} MB")
    print(json.dumps({"times": times, "memory": memory, "load": load}, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
