"""An experiment that was not shipped: does ranking a general fact down put the specific answer first on the service
vault? (issue 27, docs/benchmarks.md, seventh pass).

    python bench/service_generality.py [--weights 0,0.1,0.2,0.3,0.5,0.75]

A fact among the 20 candidates closest in meaning to the question is general when it is close to the others: its
closeness (the mean cosine of its two nearest other candidates) above the mean of that closeness over the 20 is taken,
times the weight, off its cosine before recall combines it with the words (CSLS's local scaling, centred). The
lab's twin is ``eval_folds.py --grid "u=..."``. Recall has no such term: this wraps its combining step
(``memvault.core.candidates._combine``) for the run, and reads the facts' vectors from the vault's own index
(``Index.doc_vectors``). Prints hit@1 of the 19 questions of tests/data/service_vault.json and of the 28 paraphrases
per weight, with each miss.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_service as es  # noqa: E402

ROWS, NEIGHBOURS = 20, 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weights", default="0,0.1,0.2,0.3,0.5,0.75")
    args = ap.parse_args(argv)
    from memvault import Vault
    from memvault.core import candidates

    weight = [0.0]
    combine = candidates._combine

    def less_general(parts: Any, docs: dict[int, dict[str, Any]], keyword: Any, phrases: Any, exact: Any,
                     cosine: dict[int, float], *rest: Any) -> Any:
        near = [r for r in sorted((r for r in docs if r in cosine), key=lambda r: (-cosine[r], r))[:ROWS]
                if docs[r]["kind"] == "fact"]
        if weight[0] and len(near) > NEIGHBOURS:
            vectors = np.array([np.mean(parts.index.doc_vectors(r), axis=0) for r in near])
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            sim = vectors @ vectors.T
            np.fill_diagonal(sim, -1.0)
            close = np.sort(sim, axis=1)[:, -NEIGHBOURS:].mean(axis=1)
            close -= close.mean()
            cosine = dict(cosine)
            for r, c in zip(near, close):
                cosine[r] -= weight[0] * float(c)
        return combine(parts, docs, keyword, phrases, exact, cosine, *rest)

    candidates._combine = less_general
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "vault"
        es.build(root)
        v = Vault.open(root, daemon=False)
        asked = [("issue", q, key) for q, key in es.DATA["questions"]] + \
                [("paraphrases", p["query"], p["relevant"][0]) for p in es.PARA]
        for value in (float(x) for x in args.weights.split(",")):
            weight[0] = value
            hits = {"issue": 0, "paraphrases": 0}
            misses = []
            for part, q, key in asked:
                found = v.recall(q, k=5, record_access=False)
                first = found[0].id if len(found) else None
                hits[part] += first == key
                if first != key:
                    misses.append(f"{q!r} -> {first} (want {key})")
            print(f"weight {value}: issue hit@1 {hits['issue']}/19 | paraphrases hit@1 {hits['paraphrases']}/"
                  f"{len(es.PARA)}")
            for miss in misses:
                print("   ", miss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
