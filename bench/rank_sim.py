"""Offline simulation of recall's ranking on the dumps of rank_lab.py (numpy only)."""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

LAB = Path(os.environ.get("MEMVAULT_BENCH_CACHE") or Path(__file__).resolve().parent / ".cache") / "lab"


def load(name: str) -> dict[str, Any]:
    with open(LAB / f"{name}.pkl", "rb") as fh:
        data = pickle.load(fh)
    for v in data["vaults"].values():
        v["row_index"] = {int(r): i for i, r in enumerate(v["rowids"])}
        v["dockey"] = {r: f"{d['kind']}:{d['id']}" for r, d in v["docs"].items()}
    return data


def cosines(v: dict[str, Any], qvec: np.ndarray) -> np.ndarray:
    return v["matrix"] @ np.asarray(qvec, dtype=np.float32)


def shipped(v: dict[str, Any], q: dict[str, Any], n: int = 100, s: float = 0.5, p: float = 0.5, g: float = 0.5,
            exact_boost: float = 0.2, cos_all: np.ndarray | None = None) -> dict[str, float]:
    """doc key -> relevance, as memvault.core.candidates.gather computes it (before floors)."""
    cos_all = cosines(v, q["qvec"]) if cos_all is None else cos_all
    rowids = v["rowids"]
    ri = v["row_index"]
    kw = dict(q["kw"][:n])
    ph = dict(q["ph"][:n]) if p else {}
    ex = set(q["ex"][:n]) if exact_boost else set()
    top = np.argpartition(-cos_all, min(n, len(cos_all) - 1))[:n]
    cos = {int(rowids[i]): float(cos_all[i]) for i in top}
    for r in set(kw) | set(ph) | ex:
        if r in ri:
            cos[r] = float(cos_all[ri[r]])
    rows = set(kw) | set(ph) | set(cos) | ex
    neigh = {}
    if g:
        for r in list(rows):
            if r in v["neighbours"]:
                neigh[r] = v["neighbours"][r]
        extra = {x for ns in neigh.values() for x in ns} - rows
        for r in extra:
            if r in ri:
                cos[r] = float(cos_all[ri[r]])
        rows |= extra
    best_cos = max((c for c in cos.values() if c > 0), default=0.0) or 1.0
    best_kw = max(kw.values(), default=0.0) or 1.0
    best_ph = max(ph.values(), default=0.0) or 1.0
    rel_of = {}
    for r in rows:
        k = (kw.get(r, 0.0) / best_kw + p * ph.get(r, 0.0) / best_ph) / (1 + p)
        rel_of[r] = s * max(0.0, cos.get(r, 0.0)) / best_cos + (1 - s) * k
    out: dict[str, float] = {}
    for r in rows:
        rel = rel_of[r]
        if r in neigh:
            rel = (rel + g * max(rel_of.get(x, 0.0) for x in neigh[r])) / (1 + g)
        if ex:
            rel = 1.0 if r in ex else rel * (1 - exact_boost)
        key = v["dockey"].get(r)
        if key is None:
            continue
        out[key] = max(out.get(key, -1.0), min(1.0, rel))
    return out


def ranked(scores: dict[str, float], k: int = 10) -> list[str]:
    return [d for d, _ in sorted(scores.items(), key=lambda t: (-t[1], t[0]))[:k]]


def hit(ids: list[str], relevant: set[str], k: int) -> float:
    return 1.0 if relevant.intersection(ids[:k]) else 0.0


# ------------------------------------------------------------------------------------------------ PRF
def _vault_dirs(name: str) -> dict[str, Path]:
    import eval_corpora as ec
    from eval_recall import DEFAULT_CACHE

    out = {c.name: c.vault for c in ec.build(name, DEFAULT_CACHE)}
    out["alert_half"] = DEFAULT_CACHE / "alert_half"
    return out


def expand_terms(conn: Any, bodies: list[str], query: str, terms: int = 5) -> list[str]:
    """The ``terms`` stems that the best memories share most and the vault holds rarely (count x IDF), not in the
    query: what memvault's pseudo-relevance feedback adds to the keyword search."""
    import math

    from memvault.index import search

    asked = set(search.stems(query))
    counts: dict[str, int] = {}
    for body in bodies:
        for stem in set(search.stems(body)):
            counts[stem] = counts.get(stem, 0) + 1
    total = search.fts_rows(conn)
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab_rows USING fts5vocab(main, chunks_fts, row)")
    scored = []
    for stem, count in counts.items():
        if stem in asked or len(stem) < 3 or count < 2 and len(bodies) > 1:
            continue
        row = conn.execute("SELECT doc FROM temp.vocab_rows WHERE term = ?", (stem,)).fetchone()
        df = row[0] if row else 0
        if df:
            scored.append((count * math.log((total - df + 0.5) / (df + 0.5) + 1.0), stem))
    return [s for _, s in sorted(scored, reverse=True)[:terms]]


def expansions(name: str, data: dict[str, Any], m: int = 3, terms: int = 5) -> list[dict[str, float]]:
    """Per query (positives; {} for the others): doc key -> BM25 of the expansion terms / best, from the default
    ranking's ``m`` best memories. Cached in the lab directory."""
    cache = LAB / f"{name}.prf-{m}-{terms}.pkl"
    if cache.exists():
        with open(cache, "rb") as fh:
            return pickle.load(fh)
    from memvault.index import KINDS, search
    from memvault.index.db import connect

    dirs = _vault_dirs(name)
    conns: dict[str, Any] = {}
    out: list[dict[str, float]] = []
    for q in data["queries"]:
        if q["label"] != "pos":
            out.append({})
            continue
        v = data["vaults"][q["vault"]]
        if q["vault"] not in conns:
            conns[q["vault"]] = connect((dirs[q["vault"]] / ".memvault" / "index.db").resolve())
        conn = conns[q["vault"]]
        top = ranked(shipped(v, q), m)
        bodies = [" ".join(v["bodies"][r] for r in v["docs"] if v["dockey"][r] == key) for key in top]
        found = expand_terms(conn, bodies, q["query"], terms)
        extra: dict[str, float] = {}
        if found:
            hits = search.match(conn, " OR ".join(f'"{t}"' for t in found), list(KINDS), 100)
            best = max((s for _, s in hits), default=1.0) or 1.0
            for rowid, value in hits:
                key = v["dockey"].get(rowid)
                if key is not None:
                    extra[key] = max(extra.get(key, 0.0), value / best)
        out.append(extra)
    with open(cache, "wb") as fh:
        pickle.dump(out, fh)
    return out
