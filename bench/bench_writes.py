"""What a write costs as the vault grows, the kind filter with common words, and a hook reindex with a warm model.

    python bench/bench_writes.py [--sizes 100,10000] [--writes 20] [--kind-size 100000] [--hook-runs 5]
                                 [--only write,git,kind,hook] [--json OUT]

- ``write``: ``memvault fact set`` through the CLI (a new process each time, the warm embedder daemon up, as an
  agent calls it) and ``vault.facts.set`` through the library (model loaded in the process), in git vaults of
  ``--sizes`` facts, the sizes interleaved write by write; reported as p50 and as the ratio of the largest vault
  to the smallest (a write that scans the vault grows with it; one that costs what it changes does not). The
  library write is split into its git commit, its embedding and the rest; baseline: ``embed_query`` of the same
  text right after each write (the one-thread path a query takes).
- ``git``: the git part of a write on its own, ``GitStore.commit`` of one edited fact through git's plumbing (what
  a write uses) against ``git commit --only`` (what it used before) and a bare ``git commit`` of one file.
- ``kind``: keyword-only recall with ``kinds=["fact"]`` against all kinds, on queries made of words every fact
  holds (host, port, server), in the ``--kind-size`` vault that ``bench/bench_index.py`` builds.
- ``hook``: the wall time from ``git commit`` of one edited fact until the post-commit hook's background reindex
  has written it to the index with its vector, the daemon warm; baselines of the same round: a bare ``git
  commit`` (memvault's hooks skipped) and a ``python -c "import memvault.githooks"`` process.

Vaults are built under ``bench/.cache/write-<n>/`` from ``bench/corpus.py`` (the same facts as bench_index's
vaults: copies of them, built first if missing).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
from bench_index import CACHE, MODEL, PY, ensure_vault, log, ms, pct, vault_dir  # noqa: E402

BENCHES = ("write", "git", "kind", "hook")
COMMON_QUERIES = ["which host and port", "server port", "the host listens on port", "port of the server host",
                  "which server is the host", "host port server", "what port does the server use",
                  "host and server names", "port forwarding on the host", "server host port mapping"]
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.com"}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def write_vault(n: int) -> Path:
    """A git vault of ``n`` facts, indexed: a copy of bench_index's vault of the same size (built first if missing)."""
    from memvault import Vault

    root = CACHE / f"write-{n}"
    marker = root / ".bench-write.json"
    if marker.exists() and json.loads(marker.read_text()).get("corpus_version") == corpus.VERSION:
        return root
    if root.exists():
        shutil.rmtree(root)
    ensure_vault(n, 10_000)  # built once and shared with bench_index (and the kind bench's 100k pool)
    shutil.copytree(vault_dir(n), root, ignore=shutil.ignore_patterns(".bench-built.json"))
    (root / "memvault.toml").write_text(f'[embedding]\nmodel = "{MODEL}"\n\n[trust]\ntrusted = ["user:*", "agent:*"]\n')
    (root / ".gitignore").write_text(".memvault/\nepisodes/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "facts")
    log(f"indexing write-{n}")
    Vault.open(root).reindex()  # the copied index only needs its file stats refreshed; a new one is embedded
    marker.write_text(json.dumps({"corpus_version": corpus.VERSION, "n": n}))
    return root


class _Timed:
    """The loaded embedder, timing ``embed_documents`` (what a write spends embedding what it changed)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.spent = 0.0

    def embed_documents(self, *args: Any, **kwargs: Any) -> Any:
        s = time.perf_counter()
        try:
            return self._inner.embed_documents(*args, **kwargs)
        finally:
            self.spent += time.perf_counter() - s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def bench_write(sizes: list[int], writes: int) -> dict[str, Any]:
    """The sizes are interleaved (one write to each vault per round, the order alternating), so a load change on
    the shared machine hits every size alike and the ratio stays fair."""
    from memvault import Vault
    from memvault.models.engine import Engine
    from memvault.stores.gitstore import GitStore

    env = {k: v for k, v in os.environ.items() if k != "MEMVAULT_NO_DAEMON"}
    roots = {n: write_vault(n) for n in sizes}
    Vault.open(roots[sizes[0]]).engine.get()  # the daemon is warm, as it is for an agent that used memvault before
    cli: dict[int, list[float]] = {n: [] for n in sizes}
    for i in range(writes + 2):
        for n in (sizes if i % 2 == 0 else sizes[::-1]):
            text = f"Bench host web{i:03d} serves port {9000 + i} behind the bench balancer (round {time.time_ns()})."
            s = time.perf_counter()
            subprocess.run([PY, "-m", "memvault", "--vault", str(roots[n]), "fact", "set", f"bench/cli{i % 5}", text,
                            "--source", "agent:bench"], check=True, capture_output=True, env=env, cwd=REPO)
            if i >= 2:
                cli[n].append(time.perf_counter() - s)
    # A long-lived process: its own model, loaded once (shared by the vaults of this process).
    embedder = _Timed(Engine(MODEL, daemon=False).get())
    vaults = {n: Vault.open(roots[n], daemon=False, embedder_factory=lambda _config: embedder) for n in sizes}
    for vault in vaults.values():
        vault.engine.get()
    git_spent = [0.0]
    commit = GitStore.commit

    def timed_commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        s = time.perf_counter()
        try:
            return commit(self, *args, **kwargs)
        finally:
            git_spent[0] += time.perf_counter() - s

    GitStore.commit = timed_commit  # type: ignore[method-assign]
    lib: dict[int, list[float]] = {n: [] for n in sizes}
    lib_git: dict[int, list[float]] = {n: [] for n in sizes}
    lib_embed: dict[int, list[float]] = {n: [] for n in sizes}
    query_embed: list[float] = []
    try:
        for i in range(writes + 2):
            for n in (sizes if i % 2 == 0 else sizes[::-1]):
                text = f"Library host db{i:03d} listens on port {7000 + i} for the bench (round {time.time_ns()})."
                git_spent[0] = embedder.spent = 0.0
                s = time.perf_counter()
                vaults[n].facts.set(f"bench/lib{i % 5}", text, source="agent:bench")
                if i >= 2:
                    lib[n].append(time.perf_counter() - s)
                    lib_git[n].append(git_spent[0])
                    lib_embed[n].append(embedder.spent)
                    s = time.perf_counter()  # baseline: the same text through the one-thread query path
                    embedder.embed_query(text)
                    query_embed.append(time.perf_counter() - s)
    finally:
        GitStore.commit = commit  # type: ignore[method-assign]
    rows = []
    for n in sizes:
        pending = vaults[n].index.pending()
        vaults[n].index.close()
        row = {"n": n, "writes": writes, "cli_p50_ms": ms(pct(cli[n], 50)), "cli_p95_ms": ms(pct(cli[n], 95)),
               "library_p50_ms": ms(pct(lib[n], 50)), "library_p95_ms": ms(pct(lib[n], 95)),
               "library_git_commit_p50_ms": ms(pct(lib_git[n], 50)),
               "library_embed_p50_ms": ms(pct(lib_embed[n], 50)),
               "library_rest_p50_ms": ms(pct([t - g - e for t, g, e in zip(lib[n], lib_git[n], lib_embed[n])], 50)),
               "pending_after": pending}
        log(f"write {n}: {row}")
        rows.append(row)
    small, large = rows[0], rows[-1]
    ratio = lambda key: round(large[key] / small[key], 2) if small[key] else None  # noqa: E731
    return {"rows": rows, "interleaved": True, "cli_ratio_p50": ratio("cli_p50_ms"),
            "library_ratio_p50": ratio("library_p50_ms"), "library_git_ratio_p50": ratio("library_git_commit_p50_ms"),
            "library_rest_ratio_p50": ratio("library_rest_p50_ms"),
            "baseline_embed_query_same_text_p50_ms": ms(pct(query_embed, 50))}


def bench_git(sizes: list[int], rounds: int) -> dict[str, Any]:
    """The git part of a write on its own: ``GitStore.commit`` of one edited fact through git's plumbing (what a
    write uses) and through ``git commit --only`` (what it used before), interleaved round by round in the same
    vaults; baseline: a bare ``git commit -q -- FILE`` of the same kind of edit (hooks skipped)."""
    from memvault.stores.gitstore import GitStore

    rows = []
    for n in sizes:
        root = write_vault(n)
        fast, slow = GitStore(root), GitStore(root)
        slow.plumbing = False
        times: dict[str, list[float]] = {"plumbing": [], "commit_only": [], "bare_git_commit": []}
        (root / "facts" / "bench").mkdir(parents=True, exist_ok=True)
        for j in range(5):  # tracked before the rounds: a bare `git commit -- FILE` needs a known file
            (root / "facts" / "bench" / f"git{j}.md").write_text(f"Bench git file {j}.\n")
        git(root, "add", "facts/bench")
        git(root, "commit", "-qm", "bench git files", "--", "facts/bench")
        for i in range(rounds + 2):
            order = [("plumbing", fast), ("commit_only", slow), ("bare_git_commit", None)]
            for label, store in (order if i % 2 == 0 else order[::-1]):
                path = root / "facts" / "bench" / f"git{i % 5}.md"
                path.write_text(f"Bench git round {i} via {label} ({time.time_ns()}).\n")
                s = time.perf_counter()
                if store is None:
                    subprocess.run(["git", "commit", "-q", "--no-verify", "-m", f"bench git {i}", "--", str(path)],
                                   cwd=root, check=True, capture_output=True, env={**os.environ, **GIT_ENV})
                else:
                    store.commit([path], f"bench git {i} ({label})", author="agent:bench")
                if i >= 2:
                    times[label].append(time.perf_counter() - s)
        assert subprocess.run(["git", "status", "--porcelain", "--", "facts"], cwd=root, capture_output=True,
                              text=True).stdout == ""
        row = {"n": n, "rounds": rounds, **{f"{k}_p50_ms": ms(pct(v, 50)) for k, v in times.items()},
               **{f"{k}_p95_ms": ms(pct(v, 95)) for k, v in times.items()}}
        row["plumbing_over_commit_only_p50"] = round(pct(times["plumbing"], 50) / pct(times["commit_only"], 50), 2)
        log(f"git {n}: {row}")
        rows.append(row)
    return {"rows": rows}


def bench_kind(n: int, rounds: int = 5) -> dict[str, Any]:
    from memvault import Vault

    ensure_vault(n, 10_000)
    vault = Vault.open(vault_dir(n), daemon=False)
    for q in COMMON_QUERIES[:3]:  # warm the page cache
        vault.recall(q, mode="keyword", record_access=False)
    times: dict[str, list[float]] = {"all": [], "fact": []}
    matched = {}
    for _ in range(rounds):
        for q in COMMON_QUERIES:
            for label, kinds in (("all", None), ("fact", ["fact"])):
                s = time.perf_counter()
                hits = vault.recall(q, k=10, kinds=kinds, mode="keyword", record_access=False, sync=False)
                times[label].append(time.perf_counter() - s)
                matched[q] = len(hits)
    conn = vault.index.connection()
    matching = conn.execute("SELECT COUNT(*) FROM chunks_fts WHERE chunks_fts MATCH ?",
                            ('{key category tags body} : ("host" OR "port" OR "server")',)).fetchone()[0]
    vault.index.close()
    row = {"n": n, "queries": len(COMMON_QUERIES) * rounds, "rows_matching_host_port_server": matching,
           "all_kinds_p50_ms": ms(pct(times["all"], 50)), "fact_only_p50_ms": ms(pct(times["fact"], 50)),
           "all_kinds_p95_ms": ms(pct(times["all"], 95)), "fact_only_p95_ms": ms(pct(times["fact"], 95)),
           "fact_over_all_p50": round(pct(times["fact"], 50) / pct(times["all"], 50), 2)}
    log(f"kind {n}: {row}")
    return row


def bench_hook(n: int, runs: int) -> dict[str, Any]:
    from memvault import Vault
    from memvault.interfaces.githooks import install

    root = write_vault(n)
    install(root)
    Vault.open(root).engine.get()  # warm daemon
    env = {k: v for k, v in os.environ.items() if k != "MEMVAULT_NO_DAEMON"}
    log_file = root / ".memvault" / "hook-reindex.log"
    walls, commits, bares, imports = [], [], [], []
    for i in range(runs + 1):
        path = root / "facts" / "bench" / "hooked.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = f"zebra{i}x{time.time_ns()}"
        path.write_text(f"The hooked bench fact number {i} mentions {marker} on port {6000 + i}.\n")
        subprocess.run(["git", "add", "--", str(path)], cwd=root, check=True, env={**env, **GIT_ENV})
        before = log_file.read_text().count("reindex:") if log_file.exists() else 0
        s = time.perf_counter()
        subprocess.run(["git", "commit", "-qm", f"hook bench {i}"], cwd=root, check=True, env={**env, **GIT_ENV})
        committed = time.perf_counter() - s
        while (log_file.read_text().count("reindex:") if log_file.exists() else 0) <= before:
            time.sleep(0.01)
            if time.perf_counter() - s > 120:
                raise SystemExit(f"no reindex after 120 s: {log_file.read_text()}")
        wall = time.perf_counter() - s
        vault = Vault.open(root, daemon=False)
        row = vault.index.connection().execute(
            "SELECT model FROM chunk_texts WHERE id = 'bench/hooked'").fetchone()
        vault.index.close()
        assert row is not None and row[0] is not None, "the hook reindex did not embed the fact"
        # baseline, same round: a bare commit of a file outside the vault's kinds, memvault's hooks skipped
        bare_file = root / "BENCH-BASELINE.txt"
        bare_file.write_text(f"{marker}\n")
        subprocess.run(["git", "add", "--", str(bare_file)], cwd=root, check=True, env={**env, **GIT_ENV})
        s = time.perf_counter()
        subprocess.run(["git", "commit", "-qm", f"baseline {i}"], cwd=root, check=True,
                       env={**env, **GIT_ENV, "MEMVAULT_COMMIT": "1"})
        bare = time.perf_counter() - s
        s = time.perf_counter()
        subprocess.run([PY, "-c", "import memvault.githooks"], check=True, cwd=REPO)
        imported = time.perf_counter() - s
        if i:
            walls.append(wall)
            commits.append(committed)
            bares.append(bare)
            imports.append(imported)
    last = [line for line in log_file.read_text().splitlines() if "reindex:" in line][-1]
    out = {"n": n, "runs": runs, "commit_returns_p50_ms": ms(statistics.median(commits)),
           "indexed_with_vector_p50_ms": ms(statistics.median(walls)), "max_ms": ms(max(walls)),
           "bare_git_commit_p50_ms": ms(statistics.median(bares)),
           "python_import_githooks_p50_ms": ms(statistics.median(imports)), "last_log": last}
    log(f"hook {n}: {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,10000")
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--kind-size", type=int, default=100_000)
    ap.add_argument("--hook-runs", type=int, default=5)
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    only = set(args.only.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[str, Any] = {"argv": sys.argv, "load_avg_start": os.getloadavg()}
    if "write" in only:
        results["write"] = bench_write(sizes, args.writes)
    if "git" in only:
        results["git"] = bench_git(sizes, args.writes)
    if "kind" in only:
        results["kind"] = bench_kind(args.kind_size)
    if "hook" in only:
        results["hook"] = bench_hook(sizes[-1], args.hook_runs)
    results["load_avg_end"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
