"""An experiment for issue 27: each dumped question's vector with its *subject* left out, for
``bench/eval_folds.py --grid "r=0,0.25,0.5"``.

The subject is what most of the best keyword matches share: a question word found in at least ``SHARE`` of the
``TOP`` best BM25 candidates' texts ("Caroline" in a conversation of hers, "database" among database facts). Among
candidates that all hold it, it tells none apart; the rest of the question ("what did ... research") does. The
remainder is the question with those words taken out, embedded as a question; a question with no subject, or
nothing but stop words left, has none.

    python bench/remainders.py [--sets ...]      # after bench/rank_lab.py dump; writes <set>.rem.pkl beside it
"""
from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rank_sim as rs  # noqa: E402

from memvault.index.search import STOPWORDS  # noqa: E402
from memvault.rules.subject import TOP, rest  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default="locomo_facts,locomo_summaries,locomo_turns,cheat_to_tldr,tldr_self,"
                                      "alert_to_runbook,ops")
    args = ap.parse_args()
    from memvault.models.embeddings import load_embedder

    emb = load_embedder("all-MiniLM-L6-v2")
    for name in args.sets.split(","):
        data = pickle.load(open(rs.LAB / f"{name}.pkl", "rb"))
        texts: dict[str, str] = {}
        for q in data["queries"]:
            v = data["vaults"][q["vault"]]
            bodies = [v["bodies"][r] for r, _ in q["kw"][:TOP] if r in v["bodies"]]
            left = rest(q.get("searched") or q["query"], bodies, STOPWORDS)
            if left is not None:
                texts[q["qid"] + "/" + q["label"]] = left
        unique = sorted(set(texts.values()))
        vecs = dict(zip(unique, (np.asarray(emb.embed_query(t), dtype=np.float32) for t in unique)))
        out = {key: vecs[t] for key, t in texts.items()}
        with open(rs.LAB / f"{name}.rem.pkl", "wb") as fh:
            pickle.dump(out, fh)
        print(name, f"{len(out)} of {len(data['queries'])} questions have a subject", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
