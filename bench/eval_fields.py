"""Keyword field weights on the eval dev sets: how much a query word found in a memory's key should count against
the same word found in its text (``[recall] field_weights``, FTS5 ``bm25()`` column weights).

    python bench/eval_fields.py [--sets all] [--keys 0.5,1,2,3,5] [--modes keyword,hybrid] [--json OUT]

Every key weight of the grid is applied to the shipped recall (``Index.field_weights``: recall's word and phrase
searches), R@1/5/10 recorded per set for keyword-only and hybrid recall (MiniLM). The default is the weight with
the best mean, over the sets, of each set's own target metric (R@5 or R@10, as issue 17 states them); leaving one
set out, the weight the other sets choose is scored on the set left out, so a weight that only suits one set shows.
The category and tags weights are reported as not measurable when no item of a set has a category or tags that
differ (the dev sets have none: LoCoMo facts all share one category, runbooks and tldr pages have no description
or tags).

Vectors (documents and queries) are cached on disk by model identity and text (``bench/.cache/vectors.db``): a
rerun, or a vault rebuilt by a schema change, embeds nothing again.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import eval_corpora as ec  # noqa: E402
import eval_recall as er  # noqa: E402

from memvault import Vault  # noqa: E402
from memvault.index import FieldWeights  # noqa: E402

#: Each set's target metric in issue 17.
TARGET = {"locomo_facts": 5, "locomo_turns": 10, "locomo_summaries": 5, "cheat_to_tldr": 10, "tldr_self": 5,
          "alert_to_runbook": 5}
EVAL_DIR = next((p / "shared" / "eval" for p in HERE.parents if (p / "shared" / "eval" / "queries").is_dir()),
                HERE.parents[1] / "shared" / "eval")


class CachedEmbedder:
    """The real embedder, its vectors kept on disk by (model identity, kind, sha256 of the text)."""

    def __init__(self, inner: Any, path: Path) -> None:
        self._inner = inner
        ident = inner.identity
        self._key = f"{ident.name}@{ident.revision}/{ident.dims}/{ident.query_prefix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (model TEXT, kind TEXT, hash TEXT, v BLOB, "
                         "PRIMARY KEY (model, kind, hash))")
        self._queries: dict[str, Any] = {}

    def _get(self, kind: str, texts: Sequence[str]) -> dict[str, bytes]:
        hashes = {hashlib.sha256(t.encode()).hexdigest(): t for t in texts}
        keys, out = list(hashes), {}
        for i in range(0, len(keys), 500):
            batch = keys[i:i + 500]
            for h, v in self._db.execute(f"SELECT hash, v FROM vec WHERE model = ? AND kind = ? AND hash IN "
                                         f"({','.join('?' * len(batch))})", (self._key, kind, *batch)):
                out[hashes[h]] = v
        return out

    def _put(self, kind: str, items: dict[str, bytes]) -> None:
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?,?,?,?)",
                                 [(self._key, kind, hashlib.sha256(t.encode()).hexdigest(), v)
                                  for t, v in items.items()])

    def embed_documents(self, texts: Sequence[str], batch_size: int = 32) -> Any:
        import numpy as np

        texts = list(texts)
        found = self._get("doc", texts)
        todo = [t for t in dict.fromkeys(texts) if t not in found]
        if todo:
            made = self._inner.embed_documents(todo, batch_size)
            new = {t: np.asarray(v, dtype=np.float32).tobytes() for t, v in zip(todo, made)}
            self._put("doc", new)
            found.update(new)
        if not texts:
            return np.zeros((0, self._inner.identity.dims), dtype=np.float32)
        return np.stack([np.frombuffer(found[t], dtype=np.float32) for t in texts])

    def embed_query(self, text: str) -> Any:
        import numpy as np

        if text not in self._queries:
            found = self._get("query", [text])
            if text in found:
                self._queries[text] = np.frombuffer(found[text], dtype=np.float32)
            else:
                v = np.asarray(self._inner.embed_query(text), dtype=np.float32)
                self._put("query", {text: v.tobytes()})
                self._queries[text] = v
        return self._queries[text]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def open_vault(vdir: Path, embedder: CachedEmbedder) -> Vault:
    er.write_config(vdir)
    return Vault.open(vdir, embedder_factory=lambda _config: embedder)


def fields_present(vault: Vault) -> dict[str, int]:
    """How many items carry a category or tags, and how many distinct values (a single shared value ranks
    nothing)."""
    conn = vault.index.connection()
    out = {}
    for name in ("category", "tags"):
        items, distinct = conn.execute(f"SELECT COUNT({name}), COUNT(DISTINCT {name}) FROM docs").fetchone()
        out[name] = items if distinct > 1 else 0
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from memvault.models.engine import Engine

    embedder = CachedEmbedder(Engine(er.MODEL, daemon=False).get(), args.cache.parent / "vectors.db")
    sets = [s for name in args.sets.split(",") for s in ec.GROUPS.get(name, (name,))]
    scores: dict[str, dict[str, er.Score]] = {}
    present: dict[str, dict[str, int]] = {}
    for set_name in sets:
        for corpus in ec.build(set_name, args.cache, EVAL_DIR, limit_queries=args.limit_queries):
            vault = open_vault(corpus.vault, embedder)
            t0 = time.perf_counter()
            report = vault.reindex()
            print(f"   {corpus.name}: indexed in {time.perf_counter() - t0:.1f}s ({report.chunks_embedded} embedded)",
                  file=sys.stderr, flush=True)
            got = present.setdefault(set_name, {"category": 0, "tags": 0})
            for name, n in fields_present(vault).items():
                got[name] += n
            t0 = time.perf_counter()
            for key in args.keys:
                vault.index.field_weights = FieldWeights(key=key)
                for mode in args.modes:
                    score = scores.setdefault(set_name, {}).setdefault(f"{mode} key={key}", er.Score())
                    for q in corpus.queries:
                        score.add(er.recall_ids(vault, q.query, mode), q.relevant)
            print(f"   {corpus.name}: {len(corpus.queries)} queries x {len(args.keys)} weights in "
                  f"{time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
    return {"scores": scores, "present": present}


def choose(scores: dict[str, dict[str, er.Score]], mode: str, keys: Sequence[float],
           sets: Sequence[str]) -> float:
    """The key weight with the best mean target metric over ``sets`` (ties: the one nearest 1, the neutral)."""
    def mean(key: float) -> float:
        return sum(scores[s][f"{mode} key={key}"].r(TARGET[s]) for s in sets) / len(sets)

    return max(keys, key=lambda k: (round(mean(k), 6), -abs(k - 1.0)))


def report(out: dict[str, Any], args: argparse.Namespace) -> str:
    scores, present = out["scores"], out["present"]
    sets = list(scores)
    lines = []
    for mode in args.modes:
        lines += [f"### {mode}: R@1 / R@5 / R@10 by key weight (body 1, category 1, tags 1)", "",
                  "| set (target) | " + " | ".join(f"key {k}" for k in args.keys) + " |",
                  "|---|" + "---|" * len(args.keys)]
        for s in sets:
            cells = []
            for k in args.keys:
                sc = scores[s][f"{mode} key={k}"]
                cells.append(f"{sc.r(1):.3f} / {sc.r(5):.3f} / {sc.r(10):.3f}")
            lines.append(f"| {s} (R@{TARGET[s]}) | " + " | ".join(cells) + " |")
        mean = {k: sum(scores[s][f"{mode} key={k}"].r(TARGET[s]) for s in sets) / len(sets) for k in args.keys}
        lines.append("| mean of targets | " + " | ".join(f"{mean[k]:.4f}" for k in args.keys) + " |")
        best = choose(scores, mode, args.keys, sets)
        lines += ["", f"Chosen on all sets ({mode}): key = {best}.", "",
                  "| set left out | key chosen on the others | its target there | key 1 there | chosen on all there |",
                  "|---|---|---|---|---|"]
        for s in sets:
            k = choose(scores, mode, args.keys, [x for x in sets if x != s])
            r = lambda key: scores[s][f"{mode} key={key}"].r(TARGET[s])  # noqa: E731
            lines.append(f"| {s} | {k} | {r(k):.3f} | {r(1.0):.3f} | {r(best):.3f} |")
        lines.append("")
    lines += ["Items with a category / tags that tell items apart (distinct values > 1): " + ", ".join(
        f"{s} {p['category']} / {p['tags']}" for s, p in present.items()), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="all", help=f"comma-separated: {', '.join(ec.CORPUS_NAMES)}, locomo, all")
    ap.add_argument("--keys", type=lambda s: [float(x) for x in s.split(",") if x], default=[0.5, 1.0, 2.0, 3.0, 5.0])
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["keyword", "hybrid"])
    ap.add_argument("--limit-queries", type=int, default=None)
    ap.add_argument("--cache", type=Path, default=er.DEFAULT_CACHE)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.cache = args.cache.resolve()
    if 1.0 not in args.keys:
        args.keys.append(1.0)
    started = time.perf_counter()
    out = run(args)
    print(report(out, args))
    print(f"total {time.perf_counter() - started:.0f}s", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({
            "keys": args.keys, "modes": args.modes, "present": out["present"],
            "scores": {s: {v: sc.to_dict() for v, sc in res.items()} for s, res in out["scores"].items()}},
            indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
