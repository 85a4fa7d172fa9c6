"""The warm path (issue 16): the model process's backends, its resident memory, a cold first query, and a hook's
whole call handed to the warm process.

    python bench/bench_warm.py [--only backends,quality,cold,memory,hook] [--json OUT]

- ``backends``: each backend in a fresh process (torch = sentence-transformers, onnx = ONNX Runtime on the
  exported graph, onnx-int8 = the same graph with int8 weights, per channel): import + load time, resident memory
  after the load, ``embed_query`` p50 over 100 texts (one at a time), ``embed_documents`` texts/s over 500 texts,
  the peak resident memory, and the resident memory after ``malloc_trim``. Texts: the bench corpus.
- ``quality``: vector-only recall@5/@10 of fp32 (what the index holds) against int8 on the eval dev sets
  (LoCoMo facts of five conversations; alert -> runbook with distractors), the same texts embedded by each.
- ``cold``: a cold first query — no warm process running — ``memvault recall --json`` on the 10k vault, the warm
  process's start and the model's load included, per backend; baseline ``python -c pass``.
- ``memory``: the warm process's resident memory (``memvault stats``'s figure) after one query, after embedding
  500 texts, and after a minute without a request (memory given back), per backend.
- ``hook``: a whole ``python -c 'from memvault.interfaces.warm_client import call; ...'`` process asking the warm
  process to recall on the 10k vault (warm), against ``python -c pass`` and a cold ``memvault recall --json``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
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

import corpus  # noqa: E402
from bench_index import CACHE, MODEL, PY, ensure_vault, log, ms, pct, vault_dir  # noqa: E402

BENCHES = ("backends", "quality", "cold", "memory", "hook", "work")
BACKENDS = ("torch", "onnx", "onnx-int8")

_PROBE = r"""
import ctypes, gc, json, os, statistics, sys, time
started = time.perf_counter()
backend, texts_file = sys.argv[1], sys.argv[2]
def rss(field="VmRSS"):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
if backend == "torch":
    from memvault.models.embeddings import SentenceTransformerEmbedder
    emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
else:
    from memvault.models.embeddings import load_embedder
    emb = load_embedder("all-MiniLM-L6-v2", backend="onnx")
    if backend == "onnx-int8":
        from pathlib import Path
        from memvault.models import onnx
        graph = Path(sys.argv[3])
        emb = onnx.OnnxEmbedder("all-MiniLM-L6-v2", emb.model_dir, graph, revision=emb.identity.revision + "+int8")
load_s = time.perf_counter() - started
after_load = rss()
texts = json.load(open(texts_file))
for t in texts[:3]:
    emb.embed_query(t)
q = []
for t in texts[:100]:
    s = time.perf_counter(); emb.embed_query(t); q.append(time.perf_counter() - s)
s = time.perf_counter(); emb.embed_documents(texts[:500], 32); docs_s = 500 / (time.perf_counter() - s)
peak = rss("VmHWM")
gc.collect()
ctypes.CDLL("libc.so.6").malloc_trim(0)
print(json.dumps({"backend": backend, "load_s": round(load_s, 2), "rss_after_load_mb": after_load // 2**20,
                  "query_p50_ms": round(statistics.median(q) * 1000, 2), "docs_per_s": round(docs_s, 1),
                  "rss_peak_mb": peak // 2**20, "rss_after_trim_mb": rss() // 2**20}))
"""


def _texts(n: int = 500) -> Path:
    path = CACHE / "warm-texts.json"
    if not path.exists():
        path.write_text(json.dumps([f.text for f in corpus.facts(max(n, 1000))[:n]]))
    return path


def _int8_graph() -> Path:
    """The exported graph quantised to int8 weights (dynamic, per channel), made once."""
    from memvault.models.embeddings import load_embedder

    target = CACHE / "minilm-int8.onnx"
    if not target.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        emb = load_embedder(MODEL, backend="onnx")
        quantize_dynamic(str(emb.graph), str(target), weight_type=QuantType.QInt8, per_channel=True)
    return target


def bench_backends() -> list[dict[str, Any]]:
    texts = _texts()
    int8 = _int8_graph()
    rows = []
    for backend in BACKENDS:
        out = subprocess.run([PY, "-c", _PROBE, backend, str(texts), str(int8)], capture_output=True, text=True,
                             env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, cwd=REPO)
        if out.returncode != 0:
            raise SystemExit(out.stderr)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        log(f"backend: {row}")
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------ quality
def bench_quality() -> list[dict[str, Any]]:
    """Vector-only recall@k, fp32 against int8, on the eval dev sets (the same texts, the model's first window)."""
    import numpy as np

    import eval_corpora
    from memvault.models import onnx
    from memvault.models.embeddings import load_embedder

    fp32 = load_embedder(MODEL, backend="onnx")
    int8 = onnx.OnnxEmbedder(MODEL, fp32.model_dir, _int8_graph(), revision=fp32.identity.revision + "+int8")
    rows = []
    for name in ("locomo_facts", "alert_to_runbook"):
        corpora = eval_corpora.build(name, CACHE / "eval", corpus.DATA.parent)
        totals: dict[str, dict[int, float]] = {"fp32": {5: 0.0, 10: 0.0}, "int8": {5: 0.0, 10: 0.0}}
        n_queries = 0
        for c in corpora:
            items = eval_corpora.load_items(c.vault)
            ids = [i for i, _ in items]
            for label, emb in (("fp32", fp32), ("int8", int8)):
                matrix = emb.embed_documents([t for _, t in items])
                for q in c.queries:
                    scores = matrix @ np.asarray(emb.embed_query(q.query))
                    ranked = [ids[i] for i in np.argsort(-scores)[:10]]
                    for k in (5, 10):
                        totals[label][k] += len(set(ranked[:k]) & q.relevant) / len(q.relevant)
            n_queries += len(c.queries)
        row = {"set": name, "queries": n_queries,
               **{f"{label}_r@{k}": round(totals[label][k] / n_queries, 4) for label in totals for k in (5, 10)}}
        row["int8_minus_fp32_r@10"] = round(row["int8_r@10"] - row["fp32_r@10"], 4)
        log(f"quality: {row}")
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------ the warm process
def _with_backend(root: Path, backend: str) -> str:
    """Set ``[embedding] backend`` in the vault's memvault.toml; returns the old text (to put back)."""
    toml = root / "memvault.toml"
    old = toml.read_text()
    lines = [line for line in old.splitlines() if not line.startswith("backend =")]
    at = lines.index("[embedding]") + 1 if "[embedding]" in lines else None
    if at is None:
        lines += ["", "[embedding]"]
        at = len(lines)
    lines.insert(at, f'backend = "{backend}"')
    toml.write_text("\n".join(lines) + "\n")
    return old


def _runtime() -> dict[str, str]:
    """A fresh runtime directory: no warm process yet, and none of the user's."""
    run = tempfile.mkdtemp(prefix="mvb-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "MEMVAULT_NO_DAEMON"}
    return {**env, "XDG_RUNTIME_DIR": run}


def _stop(env: dict[str, str]) -> None:
    subprocess.run([PY, "-c", "from memvault.models import daemon; daemon.stop()"], env=env, cwd=REPO,
                   capture_output=True)
    shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)


def _status(env: dict[str, str]) -> dict[str, Any] | None:
    out = subprocess.run([PY, "-c", "import json; from memvault.models import daemon; print(json.dumps("
                          "daemon.status()))"], env=env, cwd=REPO, capture_output=True, text=True)
    return json.loads(out.stdout.strip() or "null")


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    s = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, check=True)
    return time.perf_counter() - s


def bench_cold(n: int, runs: int) -> list[dict[str, Any]]:
    root = vault_dir(n)
    query = corpus.queries(1)[0]
    rows = []
    passes = [_timed([PY, "-c", "pass"], dict(os.environ)) for _ in range(5)]
    for backend in ("torch", "onnx"):
        old = _with_backend(root, backend)
        try:
            firsts, seconds = [], []
            for _ in range(runs):
                env = _runtime()
                try:
                    cmd = [PY, "-m", "memvault", "--vault", str(root), "recall", query, "--json", "--no-record"]
                    firsts.append(_timed(cmd, env))
                    seconds.append(_timed(cmd, env))
                finally:
                    _stop(env)
        finally:
            (root / "memvault.toml").write_text(old)
        row = {"backend": backend, "n": n, "runs": runs, "cold_first_query_p50_ms": ms(pct(firsts, 50)),
               "cold_first_query_max_ms": ms(max(firsts)), "next_cli_query_p50_ms": ms(pct(seconds, 50)),
               "python_pass_p50_ms": ms(pct(passes, 50))}
        log(f"cold: {row}")
        rows.append(row)
    return rows


def bench_memory(n: int, idle_wait: float) -> list[dict[str, Any]]:
    root = vault_dir(n)
    texts = _texts()
    rows = []
    for backend in ("torch", "onnx"):
        old = _with_backend(root, backend)
        env = _runtime()
        try:
            subprocess.run([PY, "-m", "memvault", "--vault", str(root), "recall", corpus.queries(1)[0], "--json",
                            "--no-record"], env=env, cwd=REPO, capture_output=True, check=True)
            after_query = _status(env)
            subprocess.run([PY, "-c", "import json, sys; from memvault.models import daemon; "
                            "e = daemon.connect('all-MiniLM-L6-v2', None, backend=sys.argv[2]); "
                            "e.embed_documents(json.load(open(sys.argv[1])))", str(texts), backend],
                           env=env, cwd=REPO, capture_output=True, check=True)
            after_bulk = _status(env)
            time.sleep(idle_wait)
            after_idle = _status(env)
        finally:
            _stop(env)
            (root / "memvault.toml").write_text(old)
        mb = lambda s: (s or {}).get("rss_bytes", 0) // 2**20  # noqa: E731
        row = {"backend": backend, "rss_after_first_query_mb": mb(after_query), "rss_after_500_texts_mb": mb(after_bulk),
               f"rss_after_{idle_wait:.0f}s_idle_mb": mb(after_idle)}
        log(f"memory: {row}")
        rows.append(row)
    return rows


def _work_vault(n: int) -> Path:
    """``n`` markdown runbooks of about 1.5 KB each (bench corpus facts joined into steps), no git."""
    root = CACHE / f"work-{n}"
    marker = root / ".bench-built.json"
    if marker.exists() and json.loads(marker.read_text()).get("corpus_version") == corpus.VERSION:
        return root
    if root.exists():
        shutil.rmtree(root)
    (root / "procedures" / "ops").mkdir(parents=True)
    (root / "facts").mkdir()
    (root / "episodes").mkdir()
    (root / "memvault.toml").write_text(f'[embedding]\nmodel = "{MODEL}"\n')
    facts = corpus.facts(4 * n)
    for i in range(n):
        steps, size, j = [], 0, 0
        while size < 1500:
            text = facts[(i * 7 + j) % len(facts)].text
            steps.append(f"{j + 1}. {text}")
            size += len(text) + 4
            j += 1
        body = f"---\ndescription: runbook {i}\n---\n# Runbook {i}\n\n" + "\n".join(steps) + "\n"
        (root / "procedures" / "ops" / f"runbook-{i:04d}.md").write_text(body)
    marker.write_text(json.dumps({"corpus_version": corpus.VERSION, "n": n}))
    return root


def _proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def bench_work(n: int, recalls: int, idle_wait: float) -> dict[str, Any]:
    """The warm process after real work (issue 24): a full rebuild of ``n`` runbook-sized texts embedded by it,
    then ``recalls`` recalls served by it (warm vault calls, as hooks make them); its peak resident memory (VmHWM),
    its resident memory right after, and after ``idle_wait`` seconds without a request."""
    root = _work_vault(n)
    env = _runtime()
    queries = corpus.queries(recalls)
    code = ("import sys, json; from memvault.interfaces.warm_client import call\n"
            "qs = json.loads(sys.argv[2])\n"
            "for q in qs:\n"
            "    r = call(sys.argv[1], 'recall', {'query': q, 'k': 5, 'record': False})\n"
            "    assert r is not None and r.get('hits') is not None, r\n")
    try:
        started = time.perf_counter()
        # `memvault reindex` embeds a batch this large in its own process (Engine.for_batch); the warm process
        # still takes large batches from `watch`, the MCP server and writes, so the rebuild is sent there, as the
        # CLI sent it before
        subprocess.run([PY, "-c", "import sys; from memvault.models import engine; engine.BATCH_HERE = 10**12; "
                        "from memvault.interfaces.cli import main; main(sys.argv[1:])",
                        "--vault", str(root), "reindex", "--full"], env=env, cwd=REPO, capture_output=True, check=True)
        rebuild_s = time.perf_counter() - started
        status = _status(env) or {}
        pid = int(status["pid"])
        after_rebuild = _proc_status(pid, "VmRSS")
        peak_rebuild = _proc_status(pid, "VmHWM")
        subprocess.run([PY, "-c", code, str(root), json.dumps(queries)], env=env, cwd=REPO, capture_output=True,
                       check=True)
        peak = _proc_status(pid, "VmHWM")
        after_work = _proc_status(pid, "VmRSS")
        time.sleep(idle_wait)
        after_idle = _proc_status(pid, "VmRSS")
    finally:
        _stop(env)
    mb = lambda b: b // 2**20  # noqa: E731
    row = {"texts": n, "recalls": recalls, "rebuild_s": round(rebuild_s, 1), "rss_after_rebuild_mb": mb(after_rebuild),
           "rss_peak_in_rebuild_mb": mb(peak_rebuild),
           "rss_peak_mb": mb(peak), "rss_after_recalls_mb": mb(after_work),
           f"rss_after_{idle_wait:.0f}s_idle_mb": mb(after_idle), "load_avg": round(os.getloadavg()[0], 2)}
    log(f"work: {row}")
    return row


def bench_hook(n: int, runs: int) -> dict[str, Any]:
    root = vault_dir(n)
    env = _runtime()
    queries = corpus.queries(runs + 3)
    code = ("import json, sys; from memvault.interfaces.warm_client import call; "
            "r = call(sys.argv[1], 'recall', {'query': sys.argv[2], 'k': 5, 'record': False}); "
            "assert r is not None and r.get('hits') is not None, r; print(len(json.dumps(r)))")
    try:
        subprocess.run([PY, "-m", "memvault", "--vault", str(root), "recall", "warm up", "--json", "--no-record"],
                       env=env, cwd=REPO, capture_output=True, check=True)  # the warm process is up
        for q in queries[:3]:  # the vault is warm in it (watcher, vectors in memory)
            subprocess.run([PY, "-c", code, str(root), q], env=env, cwd=REPO, capture_output=True, check=True)
        hook, bare, cli = [], [], []
        for q in queries[3:]:
            hook.append(_timed([PY, "-c", code, str(root), q], env))
            bare.append(_timed([PY, "-c", "pass"], env))
            cli.append(_timed([PY, "-m", "memvault", "--vault", str(root), "recall", q, "--json", "--no-record"], env))
        status = _status(env)
    finally:
        _stop(env)
    row = {"n": n, "runs": runs, "warm_call_process_p50_ms": ms(pct(hook, 50)),
           "warm_call_process_p95_ms": ms(pct(hook, 95)), "python_pass_p50_ms": ms(pct(bare, 50)),
           "cli_recall_process_p50_ms": ms(pct(cli, 50)),
           "warm_call_over_pass_p50": round(pct(hook, 50) / pct(bare, 50), 2),
           "warm_process_rss_mb": (status or {}).get("rss_bytes", 0) // 2**20}
    log(f"hook: {row}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5, help="cold starts per backend")
    ap.add_argument("--hook-runs", type=int, default=20)
    ap.add_argument("--idle-wait", type=float, default=70.0, help="seconds without a request before the last figure")
    ap.add_argument("--work-texts", type=int, default=1500)
    ap.add_argument("--work-recalls", type=int, default=200)
    ap.add_argument("--work-idle", type=float, default=30.0)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    only = set(args.only.split(","))
    CACHE.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"argv": sys.argv, "load_avg_start": os.getloadavg()}
    if only & {"cold", "memory", "hook"}:
        ensure_vault(args.size, 10_000)
    if "backends" in only:
        results["backends"] = bench_backends()
    if "quality" in only:
        results["quality"] = bench_quality()
    if "cold" in only:
        results["cold"] = bench_cold(args.size, args.runs)
    if "memory" in only:
        results["memory"] = bench_memory(args.size, args.idle_wait)
    if "hook" in only:
        results["hook"] = bench_hook(args.size, args.hook_runs)
    if "work" in only:
        results["work"] = bench_work(args.work_texts, args.work_recalls, args.work_idle)
    results["load_avg_end"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
