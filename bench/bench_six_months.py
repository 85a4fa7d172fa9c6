"""Six months of a busy team: a vault of realistic size, and what every everyday command costs on it.

    python bench/bench_six_months.py build [--root DIR] [--facts 20000] [--episodes 1000000] [--commits 30000]
                                           [--runbooks 300] [--index-episodes N]
    python bench/bench_six_months.py measure [--root DIR] [--runs 3] [--only NAME,...] [--json OUT]

**build** writes the files and the history without memvault's write path (that is not what is measured):

- ``facts/``: ``--facts`` facts of ``bench/corpus.py`` (real short texts), front matter with a source of a
  small team (people and accepted agents) and an importance;
- ``procedures/ops/``: ``--runbooks`` shell runbooks of ~40 lines, each with a ``# description:``;
- ``episodes/``: six ordinary month files and two big ones (the last two months: an agent fleet turned on),
  ``--episodes`` lines in all, written as memvault writes them (ULID ids, UTC ``Z`` times, in time order);
- git: ``--commits`` commits made by ``git fast-import`` over the six months, each one of memvault's own commit
  shapes (``fact set KEY (SOURCE)`` with its ``Memvault-Key``/``Memvault-Source`` trailers, ``proc add``):
  every fact and runbook is added once, the rest are edits, a tenth of them to one hot fact (``db/primary``);
- the index: built by ``Vault.reindex`` with a *hash embedder* that carries the real model's identity
  (random unit vectors from a hash of the text), so recall with the real model reads it; only the first
  ``--index-episodes`` episode lines are indexed when given (the rest is then caught up by the first command).

**measure** times each command in a fresh process (``python -m memvault ...``) and the Python API, each beside
``python -c pass`` and ``python -c 'import memvault'`` of the same run (the ratio is what is judged), prints a
table, and writes JSON. Commands that embed (``recall``) use the real all-MiniLM-L6-v2; the rest never embed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

PY = sys.executable
MODEL = "all-MiniLM-L6-v2"
NOW = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
SOURCES = ("user:alice", "user:bob", "user:carol", "agent:claude-code", "agent:codex", "agent:deployer")
EP_SOURCES = ("agent:claude-code", "agent:codex", "agent:monitor", "agent:deployer", "user:alice", "user:bob",
              "agent:gemini")
HOT = "db/primary"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ulid(at: datetime, rng: random.Random) -> str:
    value = (int(at.timestamp() * 1000) << 80) | rng.getrandbits(80)
    return "".join(_CROCKFORD[(value >> s) & 31] for s in range(125, -1, -5))


def fact_text(spec: corpus.FactSpec, source: str, importance: float, rev: int = 0) -> str:
    body = spec.text if rev == 0 else f"{spec.text} (revised {rev})"
    return f"---\ncategory: {spec.category}\nsource: {source}\nimportance: {importance}\n---\n{body}\n"


def runbook(i: int) -> str:
    steps = "\n".join(f"echo 'step {s}: check service-{i % 50} on host web{(i + s) % 40:02d}'" for s in range(36))
    return (f"#!/bin/sh\n# description: Recover service-{i % 50} after alert {i} (disk, memory or restart)\n"
            f"# tags: ops, service-{i % 50}\nset -eu\n{steps}\n")


def months() -> list[tuple[int, int]]:
    """The last eight calendar months, oldest first (the current month included)."""
    y, m = NOW.year, NOW.month
    out = []
    for _ in range(8):
        out.append((y, m))
        y, m = (y, m - 1) if m > 1 else (y - 1, 12)
    return out[::-1]


# ------------------------------------------------------------------------------------------------ build
def build_history(root: Path, n_facts: int, n_runbooks: int, n_commits: int, rng: random.Random) -> dict[str, Any]:
    """Every file of the work tree through ``git fast-import``: one commit per memvault write, oldest first."""
    specs = corpus.facts(n_facts - 1)
    keys = [HOT] + [s.key for s in specs]
    spec_of = {s.key: s for s in specs}
    spec_of[HOT] = corpus.FactSpec(HOT, "database", "The primary PostgreSQL listens on db01:5432; nightly dump at "
                                                    "03:15 UTC to s3://acme-backups/db.")
    source_of = {k: rng.choice(SOURCES) for k in keys}
    importance_of = {k: round(rng.uniform(0.2, 0.9), 2) for k in keys}
    # the writes: every fact and runbook once, then edits (a tenth of them to the hot fact) at random times
    adds = [("fact", k) for k in keys] + [("proc", f"ops/rb{i:03d}") for i in range(n_runbooks)]
    edits_n = max(0, n_commits - 1 - len(adds))
    hot_n = edits_n // 10
    edits = [("fact", HOT)] * hot_n + [("fact", rng.choice(keys)) for _ in range(edits_n - hot_n)]
    rng.shuffle(edits)
    # adds mostly early, edits throughout: interleave by a position drawn for each
    timeline = sorted([(rng.random() ** 1.5, w) for w in adds] + [(rng.random(), w) for w in edits],
                      key=lambda t: t[0])
    start = NOW - timedelta(days=182)
    span = (NOW - start).total_seconds() - 3600
    seen: set[str] = set()
    # an edit drawn before its fact's add becomes the add
    revs: dict[str, int] = {}
    stream = subprocess.Popen(["git", "fast-import", "--quiet", "--done"], cwd=root, stdin=subprocess.PIPE)
    assert stream.stdin is not None
    w = stream.stdin.write

    def data(b: bytes) -> None:
        w(b"data %d\n" % len(b))
        w(b)
        w(b"\n")

    def commit(at: datetime, author: str, message: str, path: str, content: bytes, mark: int) -> None:
        ts = int(at.timestamp())
        email = author.replace(":", ".") + "@memvault"
        w(b"commit refs/heads/main\n")
        w(b"mark :%d\n" % mark)
        w(f"author {author} <{email}> {ts} +0000\ncommitter {author} <{email}> {ts} +0000\n".encode())
        data(message.encode())
        if mark > 1:
            w(b"from :%d\n" % (mark - 1))
        if path:
            mode = b"100755" if path.endswith(".sh") else b"100644"
            w(b"M " + mode + b" inline " + path.encode() + b"\n")
            data(content)
        w(b"\n")

    toml = (f'[embedding]\nmodel = "{MODEL}"\n\n[episodes]\ntrack_in_git = false\n').encode()
    gitignore = b".memvault\nepisodes/\n"
    w(b"commit refs/heads/main\nmark :1\n")
    ts0 = int(start.timestamp())
    w(f"author maintainers <m@example.org> {ts0} +0000\ncommitter maintainers <m@example.org> {ts0} +0000\n".encode())
    data(b"memvault init\n\nMemvault-Vault: .")
    w(b"M 100644 inline memvault.toml\n")
    data(toml)
    w(b"M 100644 inline .gitignore\n")
    data(gitignore)
    w(b"\n")
    mark = 1
    final: dict[str, bytes] = {}
    for j, (pos, (what, name)) in enumerate(timeline):
        at = start + timedelta(seconds=60 + pos * span + j * 1e-3)
        mark += 1
        if what == "proc":
            source = rng.choice(SOURCES[:3])
            content = runbook(int(name[-3:])).encode()
            path = f"procedures/{name}.sh"
            msg = f"proc add {name} ({source})\n\nMemvault-Key: procedure:{name}\nMemvault-Source: {source}"
        else:
            rev = revs.get(name, -1) + 1 if name in seen else 0
            seen.add(name)
            revs[name] = rev
            source = source_of[name] if rev == 0 else rng.choice(SOURCES)
            content = fact_text(spec_of[name], source_of[name], importance_of[name], rev).encode()
            path = f"facts/{name}.md"
            msg = f"fact set {name} ({source})\n\nMemvault-Key: {name}\nMemvault-Source: {source}"
        final[path] = content
        commit(at, source, msg, path, content, mark)
    w(b"done\n")
    stream.stdin.close()
    if stream.wait() != 0:
        raise SystemExit("git fast-import failed")
    subprocess.run(["git", "checkout", "-q", "-f", "main"], cwd=root, check=True)
    return {"commits": mark, "hot_edits": revs.get(HOT, 0), "files": len(final)}


def build_episodes(root: Path, total: int, rng: random.Random) -> dict[str, int]:
    """Six ordinary months and two big ones, in time order per file, as memvault writes them."""
    bases, _ = corpus.bases_and_held_out()
    ms = months()
    weights = [1] * 6 + [3.5, 3.5]
    per = [int(total * w / sum(weights)) for w in weights]
    per[-1] += total - sum(per)
    out = {}
    (root / "episodes").mkdir(exist_ok=True)
    for (y, m), n in zip(ms, per):
        first = datetime(y, m, 1, tzinfo=timezone.utc)
        last = datetime(y + (m == 12), m % 12 + 1, 1, tzinfo=timezone.utc) - timedelta(seconds=1)
        last = min(last, NOW)
        step = (last - first).total_seconds() / n
        path = root / "episodes" / f"{y:04d}-{m:02d}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            buf = []
            for k in range(n):
                at = first + timedelta(seconds=k * step)
                b = bases[rng.randrange(len(bases))]
                source = EP_SOURCES[rng.randrange(len(EP_SOURCES))]
                kind = "summary" if rng.random() < 0.05 else "raw"
                line = {"id": ulid(at, rng), "created_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "source": source,
                        "kind": kind, "text": f"{b.text} (on web{rng.randrange(40):02d})",
                        "tags": [b.topic[:20]], "meta": {"session": f"s{k // 40}"}}
                buf.append(json.dumps(line, ensure_ascii=False) + "\n")
                if len(buf) >= 10000:
                    f.write("".join(buf))
                    buf = []
            f.write("".join(buf))
        out[path.name] = n
    return out


class HashEmbedder(corpus.RealModelText):
    """The real model's identity and tokenizer; vectors are unit random vectors seeded by a hash of the text."""

    def __init__(self, real: Any) -> None:
        super().__init__(real)
        self.calls = 0
        self.texts = 0

    def embed_documents(self, texts: Any, batch_size: int = 32) -> Any:
        import numpy as np

        self.calls += 1
        self.texts += len(texts)
        seed = int.from_bytes(hashlib.sha256("\x00".join(texts).encode()).digest()[:8], "big")
        out = np.random.default_rng(seed).standard_normal((len(texts), self.identity.dims)).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def cmd_build(args: argparse.Namespace) -> None:
    root = Path(args.root)
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"{root}: not empty")
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261207)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    t = time.perf_counter()
    hist = build_history(root, args.facts, args.runbooks, args.commits, rng)
    log(f"history {hist} in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    eps = build_episodes(root, args.episodes, rng)
    log(f"episodes {eps} in {time.perf_counter() - t:.1f} s")
    if args.index_episodes is not None:
        # index only a prefix of the episodes now: hide the rest, index, put them back
        hidden = _hide_episodes(root, args.index_episodes)
    rec = index_with_hash_vectors(root)
    if args.index_episodes is not None:
        _unhide(hidden)
    rec.update(history=hist, episodes=eps)
    (root / ".git" / "bench-six-months.json").write_text(json.dumps(rec, indent=2))
    log(f"indexed: {rec}")


class Counting:
    """The real model, counting the texts it embeds."""

    def __init__(self, real: Any) -> None:
        self._real, self.identity, self.texts = real, real.identity, 0

    def embed_documents(self, texts: Any, batch_size: int = 32) -> Any:
        self.texts += len(texts)
        return self._real.embed_documents(texts, batch_size=batch_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def index_with_hash_vectors(root: Path, real_model: bool = False) -> dict[str, Any]:
    """A reindex from scratch with :class:`HashEmbedder` (the real model loaded once for its identity), or with the
    real model itself: time, peak RSS of this process, the index's size and its bytes per vector row."""
    from memvault import Vault

    real = Vault.open(root, daemon=False).engine.get()
    fake = Counting(real) if real_model else HashEmbedder(real)
    vault = Vault.open(root, embedder_factory=lambda _c: fake, daemon=False)
    t = time.perf_counter()
    report = vault.reindex(full=True)
    took = time.perf_counter() - t
    size = sum(p.stat().st_size for p in Path(vault.state_dir).glob("index-*.db*"))
    rows = vault.index.connection().execute("SELECT COUNT(*) FROM chunks_vec").fetchone()[0]
    vault.close()
    return {"index_s": round(took, 1), "texts_embedded": fake.texts, "chunks": report.chunks_embedded,
            "vector_rows": rows, "index_bytes": size, "bytes_per_vector_row": round(size / max(rows, 1)),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def cmd_index(args: argparse.Namespace) -> None:
    rec = index_with_hash_vectors(Path(args.root), args.real)
    print(json.dumps(rec))


def _hide_episodes(root: Path, keep: int) -> list[tuple[Path, bytes]]:
    hidden = []
    left = keep
    for path in sorted((root / "episodes").glob("*.jsonl")):
        data = path.read_bytes()
        lines = data.splitlines(keepends=True)
        if left >= len(lines):
            left -= len(lines)
            continue
        hidden.append((path, data))
        path.write_bytes(b"".join(lines[:left]))
        left = 0
    return hidden


def _unhide(hidden: list[tuple[Path, bytes]]) -> None:
    for path, data in hidden:
        path.write_bytes(data)


# ------------------------------------------------------------------------------------------------ measure
def timed(argv: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> tuple[float, int, int, str]:
    """Wall seconds, exit code, peak RSS (MiB) and a note (stderr's last line on failure) of one fresh process."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(stdin)
    wall = time.perf_counter() - t
    note = (err.strip().splitlines() or [""])[-1][:160] if proc.returncode else out.strip()[:100]
    return wall, proc.returncode, 0, note


_API = """
import json, sys, time
t0 = time.perf_counter()
from memvault import Vault
vault = Vault.open(sys.argv[1], daemon=False)
t1 = time.perf_counter()
queries = json.loads(sys.argv[2])
out = {"open_s": t1 - t0, "times": []}
for q in queries:
    s = time.perf_counter()
    vault.recall(q, k=10, record_access=False)
    out["times"].append(time.perf_counter() - s)
print(json.dumps(out))
"""


def api_recall(root: Path, env: dict[str, str], n: int) -> dict[str, Any]:
    """Python API: one fresh process opens the vault and recalls ``n`` queries; the first is cold (model load,
    index caches), the rest warm."""
    queries = ["disk full on the database host"] + corpus.queries(n)
    proc = subprocess.run([PY, "-c", _API, str(root), json.dumps(queries)], env=env, capture_output=True, text=True,
                          check=True)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    warm = sorted(data["times"][1:])
    return {"open_s": round(data["open_s"], 3), "first_recall_s": round(data["times"][0], 3),
            "warm_p50_ms": round(warm[len(warm) // 2] * 1000, 1), "warm_p95_ms": round(warm[int(len(warm) * .95)] * 1000, 1)}


def cmd_measure(args: argparse.Namespace) -> None:
    root = Path(args.root).resolve()
    # compiled modules cached (as an installed package has them), outside the work tree
    env = dict(os.environ, PYTHONPATH=args.code or str(REPO), MEMVAULT_DIR=str(root),
               PYTHONPYCACHEPREFIX=args.scratch + "/pycache")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    some_key = corpus.fact(1234).key
    cli = [PY, "-m", "memvault"]
    hook = [PY, "-m", "memvault.interfaces.agents.hook", "session-start", "--runtime", "claude-code",
            "--vault", str(root)]
    out = Path(args.scratch) / "export.jsonl"
    cases: dict[str, tuple[list[str], str | None]] = {
        "python -c pass": ([PY, "-c", "pass"], None),
        "import memvault": ([PY, "-c", "import memvault"], None),
        "stats": (cli + ["stats"], None),
        "stats --json": (cli + ["stats", "--json"], None),
        "fact list": (cli + ["fact", "list"], None),
        "fact get KEY": (cli + ["fact", "get", some_key], None),
        "episode list -n 20": (cli + ["episode", "list", "-n", "20"], None),
        f"fact history {HOT} (hot)": (cli + ["fact", "history", HOT], None),
        "fact history KEY (cold key)": (cli + ["fact", "history", some_key], None),
        "prune --dry-run": (cli + ["prune", "--dry-run"], None),
        "purge --source agent:gemini --dry-run": (cli + ["purge", "--source", "agent:gemini", "--dry-run"], None),
        "agent context (session block)": (cli + ["agent", "context", "--cwd", str(root)], None),
        "hook session-start": (hook, json.dumps({"cwd": str(root), "source": "startup"})),
        "export": (cli + ["export", "--output", str(out)], None),
        "recall (CLI)": (cli + ["recall", "disk full on the database host", "--json"], None),
        "reindex (no change)": (cli + ["reindex"], None),
        "reindex after 10 facts edited": (cli + ["reindex"], None),
    }
    edits = iter(range(10_000))

    def edit_ten() -> None:
        """Ten facts edited by hand (a sentence appended), as a person with an editor does."""
        for _ in range(10):
            path = root / "facts" / f"{corpus.fact(next(edits) * 7 + 1).key}.md"
            path.write_text(path.read_text() + f"Checked again on run {time.time():.0f}.\n")
    only = set(args.only.split(",")) if args.only else None
    results = []
    for name, (argv, stdin) in cases.items():
        if only and not any(o in name for o in only) and name not in ("python -c pass", "import memvault"):
            continue
        walls = []
        for _ in range(args.runs):
            out.unlink(missing_ok=True)
            if name.startswith("reindex after"):
                edit_ten()
            wall, rc, _, note = timed(argv, env, root, stdin)
            walls.append(wall)
        row = {"command": name, "median_s": round(statistics.median(walls), 3), "first_s": round(walls[0], 3),
               "rc": rc, "note": note}
        results.append(row)
        log(f"{name}: {row}")
    base = results[1]["median_s"]
    print(f"{'command':<44} {'first s':>8} {'median s':>9} {'x import':>9}  rc")
    for r in results:
        print(f"{r['command']:<44} {r['first_s']:>8.3f} {r['median_s']:>9.3f} {r['median_s'] / base:>9.1f}  "
              f"{r['rc']} {r['note'] if r['rc'] else ''}")
    if not only or "api" in only:
        api = api_recall(root, env, args.queries)
        print(f"Python API recall: {api}")
        results.append({"command": "api recall", **api})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--root", default=str(HERE / ".cache" / "six-months"))
    b.add_argument("--facts", type=int, default=20_000)
    b.add_argument("--episodes", type=int, default=1_000_000)
    b.add_argument("--commits", type=int, default=30_000)
    b.add_argument("--runbooks", type=int, default=300)
    b.add_argument("--index-episodes", type=int, default=None)
    i = sub.add_parser("index", help="reindex from scratch with hash vectors (time, peak RSS, size)")
    i.add_argument("--root", default=str(HERE / ".cache" / "six-months"))
    i.add_argument("--real", action="store_true", help="embed with the real model (not hash vectors)")
    m = sub.add_parser("measure")
    m.add_argument("--root", default=str(HERE / ".cache" / "six-months"))
    m.add_argument("--runs", type=int, default=3)
    m.add_argument("--only", default="")
    m.add_argument("--json", default="")
    m.add_argument("--queries", type=int, default=20)
    m.add_argument("--scratch", default="/tmp")
    m.add_argument("--code", default="", help="the memvault checkout to measure (default: this one)")
    args = parser.parse_args()
    {"build": cmd_build, "index": cmd_index, "measure": cmd_measure}[args.cmd](args)


if __name__ == "__main__":
    main()
