"""What the one gate costs (issue 15): the hand-edit check of every write, and sync's checked commit of hand edits.

    python bench/bench_gate.py [--facts 10000] [--writes 20] [--edits 100] [--json OUT]

- ``write``: ``vault.facts.set`` of an existing fact in a git vault of ``--facts`` facts (no index, no model: what
  is left is the gate and git), p50 of ``--writes`` writes; beside it the part spent asking git whether the file
  holds an uncommitted hand edit (``GitStore.head_blobs``, one ``git ls-tree``), timed in the same writes.
- ``edits``: ``vault.commit_edits`` of ``--edits`` facts edited by hand (every file read, validated and scanned for
  secrets, then one commit) against ``git add`` + ``git commit`` of the same files in a copy of the same vault.

Vaults are built under ``bench/.cache/gate-<n>/`` (synthetic facts, one commit) and copied for each run.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from memvault import Vault  # noqa: E402
from memvault.stores.gitstore import GitStore  # noqa: E402

CACHE = HERE / ".cache"
ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_COMMITTER_NAME": "bench",
       "GIT_COMMITTER_EMAIL": "bench@example.com"}


def git(root: Path, *args: str) -> None:
    import os

    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, env={**os.environ, **ENV})


def build(n: int) -> Path:
    root = CACHE / f"gate-{n}"
    if (root / ".git").is_dir():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    git(root, "init", "-q")  # its own repository, not the checkout bench/.cache lives in
    git(root, "config", "gc.auto", "0")  # no background repack while the vault is copied
    Vault.init(root)
    for i in range(n):
        path = root / "facts" / f"host{i // 100:03d}" / f"fact{i:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nimportance: 0.5\n---\nHost web{i} listens on 10.0.{i // 250}.{i % 250} port {8000 + i % 97}.\n")
    git(root, "add", "facts")
    git(root, "commit", "-qm", f"{n} facts")
    return root


def copy(src: Path, name: str) -> Path:
    dst = CACHE / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, symlinks=True)
    return dst


def bench_write(base: Path, writes: int) -> dict:
    root = copy(base, "gate-write")
    vault = Vault.open(root)
    spent: list[float] = []
    original = GitStore.head_blobs

    def timed(self, paths):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return original(self, paths)
        finally:
            spent.append(time.perf_counter() - started)

    GitStore.head_blobs = timed  # type: ignore[method-assign]
    totals = []
    try:
        for i in range(writes + 2):
            started = time.perf_counter()
            vault.facts.set("host000/fact00001", f"Host web1 listens on 10.0.0.1 port {9000 + i}.", source="user:bench")
            totals.append(time.perf_counter() - started)
    finally:
        GitStore.head_blobs = original  # type: ignore[method-assign]
    totals, spent = totals[2:], spent[2:]
    total, check = statistics.median(totals) * 1000, statistics.median(spent) * 1000
    return {"write_p50_ms": round(total, 1), "hand_edit_check_p50_ms": round(check, 1),
            "check_share": round(check / total, 3)}


def edit(root: Path, count: int) -> list[Path]:
    paths = sorted((root / "facts").rglob("*.md"))[:count]
    for path in paths:
        path.write_text(path.read_text().replace("listens on", "answers on"))
    return paths


def bench_edits(base: Path, count: int, rounds: int = 3) -> dict:
    checked, plain = [], []
    for r in range(rounds):
        root = copy(base, "gate-edits")
        edit(root, count)
        vault = Vault.open(root)
        started = time.perf_counter()
        done = vault.commit_edits(source="user:bench")
        checked.append(time.perf_counter() - started)
        assert len(done.paths) == count and not done.refused, done.refused
        root = copy(base, "gate-plain")
        edit(root, count)
        started = time.perf_counter()
        git(root, "add", "facts")
        git(root, "commit", "-qm", "by hand")
        plain.append(time.perf_counter() - started)
    a, b = statistics.median(checked) * 1000, statistics.median(plain) * 1000
    return {"commit_edits_ms": round(a, 1), "git_add_commit_ms": round(b, 1), "ratio": round(a / b, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    base = build(args.facts)
    out = {"facts": args.facts, "write": bench_write(base, args.writes), "edits": bench_edits(base, args.edits)}
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
