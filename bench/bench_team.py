"""Joining a team: a fresh clone of a vault whose vectors the team already has, against indexing it alone.

    python bench/bench_team.py [--n 10000] [--queries 10] [--json OUT]

One run, one machine, the packaged all-MiniLM-L6-v2 (real vectors), a throwaway PostgreSQL 18 + pgvector from
tests/pgserver.py, a bare git remote:

1. **alone** (the baseline): a clone with the SQLite backend and no shared cache: ``reindex`` (text, then every
   chunk embedded) and its first semantic recall. The model is loaded once beforehand and shared by every step,
   as a warm daemon would serve it; its load time is reported apart.
2. **publish**: host A (``[index] backend = "postgres"``) publishes the vault: the shared index and the team's
   embedding cache get every vector (what a team pays once).
3. **join**: host B, a fresh clone with the postgres backend: the wall time from opening the vault to its first
   semantic recall answered (nothing embedded but the query), then the p50 of ``--queries`` more.
4. **cache**: host C, a fresh clone with the SQLite backend and the team's URL (its embedding cache only):
   ``reindex`` builds its own index taking every vector from the cache, then the first recall.
5. **cold process**: the first recall of B and of a fresh SQLite clone as a new ``memvault recall`` process each
   (no daemon: the model is loaded in the process), the SQLite clone indexing the vault in that process.

Ratios: alone / join (goal ≥ 20x), alone / cache.
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
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import corpus  # noqa: E402

from memvault import Vault  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
PY = sys.executable


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def configure(root: Path, backend: str) -> None:
    toml = root / "memvault.toml"
    text = toml.read_text()
    head, _, _ = text.partition("[index]")
    toml.write_text(head.rstrip() + f'\n\n[index]\nbackend = "{backend}"\nname = "bench"\n')


def team_vault(work: Path, n: int) -> tuple[Path, Path]:
    """The team's vault: ``n`` facts in git (the postgres backend), pushed to a bare remote; (remote, host A)."""
    remote, a_root = work / "remote.git", work / "a"
    git(work, "init", "-q", "--bare", "-b", "main", str(remote))
    corpus.write_vault(a_root, n, MODEL)
    Vault.init(a_root)
    configure(a_root, "postgres")
    git(a_root, "add", "-A")
    git(a_root, "commit", "-qm", "bench vault")
    git(a_root, "remote", "add", "origin", str(remote))
    git(a_root, "push", "-q", "-u", "origin", "HEAD:main")
    git(a_root, "branch", "-q", "--set-upstream-to", "origin/main")
    return remote, a_root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from pgserver import start_postgres

    env = {**os.environ, "MEMVAULT_NO_DAEMON": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.com"}
    os.environ.update(env)
    queries = corpus.queries(args.queries + 1)
    out: dict[str, Any] = {"n": args.n, "argv": sys.argv, "load_start": os.getloadavg()[0]}
    work = Path(tempfile.mkdtemp(prefix="bench-team-"))
    try:
        with start_postgres() as server:
            os.environ["MEMVAULT_INDEX_URL"] = env["MEMVAULT_INDEX_URL"] = server.url
            remote, a_root = team_vault(work, args.n)

            def clone(name: str, backend: str) -> Path:
                root = work / name
                git(work, "clone", "-q", str(remote), str(root))
                if backend != "postgres":
                    configure(root, backend)  # a local change of this host (not committed)
                return root

            t = time.perf_counter()
            real = Vault.open(a_root, daemon=False).engine.get()
            out["model_load_s"] = round(time.perf_counter() - t, 2)
            factory = lambda _config: real  # noqa: E731 - one loaded model for every host, as a daemon serves it
            log(f"model loaded in {out['model_load_s']} s")

            # 1. alone
            alone_root = clone("alone", "sqlite")
            os.environ.pop("MEMVAULT_INDEX_URL")  # no team: no cache either
            t = time.perf_counter()
            v = Vault.open(alone_root, embedder_factory=factory)
            report = v.reindex()
            hits = v.recall(queries[0], k=10, record_access=False)
            out["alone_s"] = round(time.perf_counter() - t, 2)
            out["alone_chunks_embedded"] = report.chunks_embedded
            assert hits.mode == "hybrid", hits.warnings
            v.index.close()
            log(f"alone: {out['alone_s']} s, {report.chunks_embedded} chunks embedded")
            os.environ["MEMVAULT_INDEX_URL"] = server.url

            # 2. publish
            t = time.perf_counter()
            v = Vault.open(a_root, embedder_factory=factory)
            report = v.reindex()
            out["publish_s"] = round(time.perf_counter() - t, 2)
            out["publish_chunks_embedded"] = report.chunks_embedded
            stats = v.index.shared.stats()
            out["shared_index"] = {k: stats[k] for k in ("items", "chunks", "vectors", "pending_vectors",
                                                         "vector_table_bytes", "hnsw_bytes")}
            v.index.close()
            log(f"publish: {out['publish_s']} s, {report.chunks_embedded} embedded; {out['shared_index']}")

            # 3. join
            b_root = clone("b", "postgres")
            counted = Counting(real)
            t = time.perf_counter()
            v = Vault.open(b_root, embedder_factory=lambda _config: counted)
            hits = v.recall(queries[0], k=10, record_access=False)
            out["join_first_recall_s"] = round(time.perf_counter() - t, 3)
            assert hits.mode == "hybrid" and len(hits), hits.warnings
            times = []
            for q in queries[1:]:
                t = time.perf_counter()
                v.recall(q, k=10, record_access=False)
                times.append(time.perf_counter() - t)
            out["join_recall_p50_ms"] = round(1000 * statistics.median(times), 1)
            out["join_texts_embedded"] = counted.embedded
            v.index.close()
            log(f"join: first recall {out['join_first_recall_s']} s, p50 {out['join_recall_p50_ms']} ms, "
                f"{counted.embedded} texts embedded")

            # 4. cache
            c_root = clone("c", "sqlite")
            counted = Counting(real)
            t = time.perf_counter()
            v = Vault.open(c_root, embedder_factory=lambda _config: counted)
            report = v.reindex()
            hits = v.recall(queries[0], k=10, record_access=False)
            out["cache_s"] = round(time.perf_counter() - t, 2)
            out["cache_chunks_from_cache"] = report.chunks_from_cache
            out["cache_texts_embedded"] = counted.embedded
            v.index.close()
            log(f"cache: {out['cache_s']} s, {report.chunks_from_cache} from the cache, {counted.embedded} embedded")

            # 5. cold processes
            d_root = clone("d", "postgres")
            t = time.perf_counter()
            subprocess.run([PY, "-m", "memvault", "--vault", str(d_root), "recall", queries[0], "--json"],
                           check=True, capture_output=True, env=env)
            out["join_cold_process_s"] = round(time.perf_counter() - t, 2)
            e_root = clone("e", "sqlite")
            env_alone = {k: v for k, v in env.items() if k != "MEMVAULT_INDEX_URL"}
            t = time.perf_counter()
            subprocess.run([PY, "-m", "memvault", "--vault", str(e_root), "reindex"], check=True,
                           capture_output=True, env=env_alone)
            subprocess.run([PY, "-m", "memvault", "--vault", str(e_root), "recall", queries[0], "--json"],
                           check=True, capture_output=True, env=env_alone)
            out["alone_cold_process_s"] = round(time.perf_counter() - t, 2)
            log(f"cold: join {out['join_cold_process_s']} s, alone {out['alone_cold_process_s']} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["alone_over_join"] = round(out["alone_s"] / out["join_first_recall_s"], 1)
    out["alone_over_cache"] = round(out["alone_s"] / out["cache_s"], 1)
    out["cold_alone_over_join"] = round(out["alone_cold_process_s"] / out["join_cold_process_s"], 1)
    out["load_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


class Counting:
    """The loaded model, counting the document texts it embeds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.embedded = 0

    def embed_documents(self, texts: Any, *args: Any, **kwargs: Any) -> Any:
        self.embedded += len(texts)
        return self.inner.embed_documents(texts, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


if __name__ == "__main__":
    raise SystemExit(main())
