"""Contradictions in other words (issue 25): precision and recall of :mod:`memvault.rules.contradict` on a labelled
set of fact pairs.

    python bench/bench_contradictions.py [--model] [--json OUT]

``bench/data/contradictions.jsonl`` holds pairs written in ops language: a stored fact (with its key) and a new
one, labelled ``contradicts`` (same subject, another value), ``agrees`` (same subject and value, other words) or
``unrelated`` (another subject, often with values of the same kind: the redis port beside the postgres port).
A pair counts as *flagged* when the verdict is ``contradicts``; precision and recall are of that flag.

The thresholds are chosen on one half of the set (every other pair: ``tune``) by the best F1 over a small grid
(ties go to the stricter thresholds), and the numbers are reported on the other half (``test``), which the choice
never saw. The extraction rules themselves were written while reading the errors on both halves, so ``test``
measures the threshold choice, not the rules: the 36 pairs marked ``"set": "holdout"`` were written after the rules
were frozen and measured once (``holdout``), the honest number for text the rules have not seen. With ``--model`` the cosine of the packaged all-MiniLM-L6-v2 model joins the subject test (as the vault
does when its index holds vectors); without it, keywords only. The library defaults are printed beside the
chosen thresholds: they are what the vault uses.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from memvault.rules import contradict  # noqa: E402

DATA = HERE / "data" / "contradictions.jsonl"


def load(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cosines(pairs: list[dict[str, Any]]) -> list[float]:
    from memvault.models.embeddings import load_embedder

    model = load_embedder("all-MiniLM-L6-v2")
    new = model.embed_documents([p["new"] for p in pairs])
    stored = model.embed_documents([p["stored"] for p in pairs])
    return [float((a * b).sum()) for a, b in zip(new, stored)]


def score(pairs: list[dict[str, Any]], cos: list[float | None], **thresholds: float) -> dict[str, Any]:
    tp = fp = fn = 0
    wrong: list[str] = []
    for pair, c in zip(pairs, cos):
        verdict = contradict.compare(pair["new"], pair["stored"], stored_key=pair["stored_key"],
                                     new_key=pair.get("new_key"), cosine=c, **thresholds)
        flagged = verdict is not None and verdict.kind == "contradicts"
        truth = pair["label"] == "contradicts"
        tp += flagged and truth
        fp += flagged and not truth
        fn += truth and not flagged
        if flagged != truth:
            wrong.append(f"{'FP' if flagged else 'FN'} [{pair['label']}] {pair['new']!r} vs {pair['stored']!r}")
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"pairs": len(pairs), "flagged": tp + fp, "precision": round(precision, 3), "recall": round(recall, 3),
            "f1": round(f1, 3), "wrong": wrong}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="store_true", help="add the packaged model's cosine to the subject test")
    ap.add_argument("--json", type=Path, help="write the numbers here")
    ap.add_argument("--show-errors", action="store_true", help="list the test half's misses and false flags")
    args = ap.parse_args(argv)
    pairs = load()
    cos: list[float | None] = list(cosines(pairs)) if args.model else [None] * len(pairs)
    dev = [i for i, p in enumerate(pairs) if p.get("set") != "holdout"]
    tune = dev[0::2]
    test = dev[1::2]
    holdout = [i for i, p in enumerate(pairs) if p.get("set") == "holdout"]

    def half(idx: list[int], **t: float) -> dict[str, Any]:
        return score([pairs[i] for i in idx], [cos[i] for i in idx], **t)

    grid = {"min_overlap": [0.25, 0.34, 0.4, 0.5, 0.6, 0.67, 0.75], "min_shared": [1, 2]}
    if args.model:
        grid["min_cosine"] = [0.4, 0.5, 0.55, 0.6, 0.7, 0.8]
    best: tuple[tuple[float, ...], dict[str, float]] | None = None
    for values in itertools.product(*grid.values()):
        t = dict(zip(grid, values))
        r = half(tune, **t)
        rank = (r["f1"], r["precision"], *t.values())  # ties: the stricter thresholds
        if best is None or rank > best[0]:
            best = (rank, t)
    assert best is not None
    chosen = best[1]
    defaults = {"min_overlap": contradict.MIN_OVERLAP, "min_shared": contradict.MIN_SHARED,
                **({"min_cosine": contradict.MIN_COSINE} if args.model else {})}
    labels = {label: sum(p["label"] == label for p in pairs) for label in ("contradicts", "agrees", "unrelated")}
    out = {"pairs": len(pairs), "labels": labels, "model": "all-MiniLM-L6-v2" if args.model else None,
           "chosen_on_tune_half": chosen, "tune": half(tune, **chosen), "test": half(test, **chosen),
           "defaults": defaults, "test_with_defaults": half(test, **defaults),
           "holdout_with_defaults": half(holdout, **defaults), "all_with_defaults": score(pairs, cos, **defaults)}
    print(f"{len(pairs)} pairs ({', '.join(f'{n} {k}' for k, n in labels.items())}); "
          f"{'keywords + model cosine' if args.model else 'keywords only'}")
    print(f"thresholds chosen on the tune half: {chosen}")
    for name in ("tune", "test", "test_with_defaults", "holdout_with_defaults", "all_with_defaults"):
        r = out[name]
        print(f"  {name:20} {r['pairs']:4d} pairs  flagged {r['flagged']:3d}  precision {r['precision']:.3f}  "
              f"recall {r['recall']:.3f}  F1 {r['f1']:.3f}")
    if args.show_errors:
        for line in out["test_with_defaults"]["wrong"] + out["holdout_with_defaults"]["wrong"]:
            print("   ", line)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
