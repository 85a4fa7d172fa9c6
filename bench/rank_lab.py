"""Dump what recall sees for every dev query (and negative question) so that ranking and abstention rules can be
studied offline in numpy: per vault the chunk matrix and the chunk -> doc map, per query its vector and its keyword,
phrase and quote matches.

    python bench/rank_lab.py dump [--sets ...] [--out bench/.cache/lab]
"""
from __future__ import annotations

import argparse
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_corpora as ec  # noqa: E402
from eval_recall import DEFAULT_CACHE, open_vault, write_config  # noqa: E402

from memvault.index import KINDS  # noqa: E402
from memvault.index import search  # noqa: E402
from memvault.index.search import query_terms  # noqa: E402
from memvault.core.recall import named_words  # noqa: E402

N = 100
COVERED = 300


def vault_dump(vault: Any) -> dict[str, Any]:
    index = vault.index
    conn = index.connection()
    import numpy as np

    from memvault.index import quantize

    stored = quantize.stored(conn) or "float32"
    rows = conn.execute("SELECT rowid, kind, embedding FROM chunks_vec").fetchall()
    rowids = np.array([r[0] for r in rows], dtype=np.int64)
    kinds = np.array([r[1] for r in rows])
    matrix = np.stack([quantize.decode(stored, r[2]) for r in rows]).astype(np.float32)  # unit rows, as the scan
    all_rows = [r[0] for r in conn.execute("SELECT rowid FROM chunks")]
    docs = index.chunk_docs(all_rows)
    neighbours = index.episode_neighbours(docs) if any(d["kind"] == "episode" for d in docs.values()) else {}
    slim = {r: {k: d[k] for k in ("kind", "id", "ekind", "source", "created", "ref", "importance", "confidence", "chunk")}
            for r, d in docs.items()}
    for r, d in docs.items():
        slim[r]["len"] = len(d["body"])
    from memvault.core import calibration

    from memvault.index import KINDS as kinds_all

    scale = calibration.current(index, vault.engine.get(), kinds_all)
    return {"rowids": rowids, "kinds": kinds, "matrix": matrix, "docs": slim, "neighbours": neighbours,
            "bodies": {r: d["body"] for r, d in docs.items()},
            "calibration": scale.to_json() if scale is not None else None}


def query_dump(vault: Any, asked: str) -> dict[str, Any]:
    """What recall sees for ``asked``: a time it names is left out of the words searched (as recall does) and its
    window kept, so the simulation can rank the memories of that time first."""
    from memvault.core.recall import _content
    from memvault.rules import timeq
    from memvault.rules.timeutil import now

    index = vault.index
    emb = vault.engine.get()
    kinds = list(KINDS)
    window = timeq.parse(asked, now())
    query = window.query if window is not None and _content(window.query) else asked
    kw = index.search_keywords(query, kinds, 300)
    ph = index.search_phrases(query, kinds, 300)
    ex = index.search_exact(query, kinds, 300)
    qvec = emb.embed_query(query)
    # coverage of every keyword candidate (a chunk without a query word covers nothing): the abstention test reads
    # the best match's, the rescoring of the best candidates every one's
    cov = index.coverages(query, [r for r, _ in kw[:COVERED]])
    names = named_words(query)
    return {"query": asked, "searched": query, "qvec": qvec, "kw": kw, "ph": ph, "ex": ex, "cov": cov,
            "window": None if window is None or query == asked else
            (window.since.isoformat() if window.since else None, window.until.isoformat() if window.until else None),
            "names": names, "unknown_names": index.unknown_words(names) if names else [],
            "unknown_terms": index.unknown_words(query_terms(query))}


OPS = Path(__file__).resolve().parent.parent / "tests" / "data" / "ops_vault.json"


def dump_ops(target: Path, cache: Path) -> None:
    """The ops team's vault of issue 17 (tests/data/ops_vault.json): 24 facts, 32 answerable questions asked in
    other words, 14 it cannot answer."""
    import json
    import subprocess

    from memvault import Vault

    spec = json.loads(OPS.read_text("utf-8"))
    root = cache / "ops_vault"
    if not (root / "memvault.toml").exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        # a repository of its own: inside the project's work tree Vault.init would commit the facts to it
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        Vault.init(root, daemon=False, model="all-MiniLM-L6-v2")
        v = Vault.open(root, daemon=False)
        for key, text in spec["facts"].items():
            v.facts.set(key, text, source="user:admin")
    write_config(root)
    v = open_vault(root)
    v.reindex()
    data: dict[str, Any] = {"vaults": {"ops": vault_dump(v)}, "queries": []}
    for i, (question, key) in enumerate(spec["answerable"]):
        d = query_dump(v, question)
        d.update(qid=f"ops-{i}", relevant={f"fact:{key}"}, vault="ops", label="pos", meta={})
        data["queries"].append(d)
    for i, question in enumerate(spec["unanswerable"]):
        d = query_dump(v, question)
        d.update(qid=f"ops-neg-{i}", relevant=set(), vault="ops", label="neg", meta={})
        data["queries"].append(d)
    with open(target, "wb") as fh:
        pickle.dump(data, fh)


def dump(sets: list[str], out: Path, cache: Path = DEFAULT_CACHE) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for set_name in sets:
        target = out / f"{set_name}.pkl"
        if target.exists():
            continue
        if set_name == "ops":
            dump_ops(target, cache)
            continue
        corpora = ec.build(set_name, cache)
        vaults = []
        for c in corpora:
            write_config(c.vault)
            v = open_vault(c.vault)
            v.reindex()
            vaults.append(v)
        data: dict[str, Any] = {"vaults": {}, "queries": []}
        for c, v in zip(corpora, vaults):
            data["vaults"][c.name] = vault_dump(v)
        for i, (c, v) in enumerate(zip(corpora, vaults)):
            for q in c.queries:
                d = query_dump(v, q.query)
                d.update(qid=q.qid, relevant=q.relevant, vault=c.name, label="pos", meta=q.meta)
                data["queries"].append(d)
            if set_name.startswith("locomo"):
                other = corpora[(i + 1) % len(corpora)]
                ov = vaults[(i + 1) % len(vaults)]
                for q in c.queries:
                    d = query_dump(ov, q.query)
                    d.update(qid=q.qid, relevant=set(), vault=other.name, label="neg", meta=q.meta)
                    data["queries"].append(d)
            print(set_name, c.name, len(data["queries"]), file=sys.stderr, flush=True)
        if set_name == "alert_to_runbook":
            (corpus,) = corpora
            groups = sorted({p.relative_to(corpus.vault / "procedures").parts[0]
                             for p in (corpus.vault / "procedures").rglob("*") if p.is_file()})
            keep = set(groups[0::2])
            half = cache / "alert_half"
            if not (half / ".memvault").exists():
                shutil.rmtree(half, ignore_errors=True)
                shutil.copytree(corpus.vault, half, ignore=shutil.ignore_patterns(".memvault"))
                for path in list((half / "procedures").iterdir()):
                    if path.is_dir() and path.name not in keep:
                        shutil.rmtree(path)
            write_config(half)
            hv = open_vault(half)
            hv.reindex()
            data["vaults"]["alert_half"] = vault_dump(hv)
            for q in corpus.queries:
                inside = any(r.split(":", 1)[1].split("/")[0] in keep for r in q.relevant)
                d = query_dump(hv, q.query)
                d.update(qid=q.qid, relevant=q.relevant if inside else set(), vault="alert_half",
                         label="halfpos" if inside else "neg", meta=q.meta)
                data["queries"].append(d)
        with open(target, "wb") as fh:
            pickle.dump(data, fh)
        print("wrote", target, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("--sets", default="alert_to_runbook,locomo_facts,locomo_summaries,locomo_turns,cheat_to_tldr,"
                                      "tldr_self")
    ap.add_argument("--out", type=Path, default=DEFAULT_CACHE.parent / "lab")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the eval vaults are built")
    args = ap.parse_args()
    dump(args.sets.split(","), args.out, args.cache.resolve())


if __name__ == "__main__":
    main()
