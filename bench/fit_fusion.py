"""Fusion weights chosen by cross-validation across the dev sets, on what recall sees (``bench/rank_lab.py dump``).

    python bench/rank_lab.py dump                  # once: every dev query's candidates, cosines and matches
    python bench/fit_fusion.py [--json OUT]

The shipped relevance (``memvault.core.recall``) is re-computed offline (``rank_sim.shipped``, checked to give
the shipped hybrid's top 10) for every combination of ``semantic_weight`` s, ``phrase_weight`` p,
``neighbour_weight`` g and the pseudo-relevance feedback weight ``prf_weight`` (expansion terms from the best
three memories, searched as a second keyword query). Folds leave one set out — LoCoMo's three sets together, as
they share their questions — choose the combination with the best mean (R@5 + R@10) / 2 on the others, and score
it on the set left out. The choice on all sets is what ``[recall]`` ships when it beats the current defaults on
the folds.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rank_sim as rs  # noqa: E402

SETS = ("locomo_facts", "locomo_summaries", "locomo_turns", "cheat_to_tldr", "tldr_self", "alert_to_runbook")
FOLDS = {"locomo": ("locomo_facts", "locomo_summaries", "locomo_turns"), "cheat_to_tldr": ("cheat_to_tldr",),
         "tldr_self": ("tldr_self",), "alert_to_runbook": ("alert_to_runbook",)}
GRID = {"s": (0.4, 0.5, 0.6, 0.7), "p": (0.25, 0.5), "g": (0.5,), "prf": (0.0, 0.2)}
DEFAULT = {"s": 0.5, "p": 0.5, "g": 0.5, "prf": 0.0}


def scores(data: dict[str, Any], params: dict[str, float], expansions: dict[str, Any]) -> dict[str, tuple[float, float]]:
    out = {}
    for name, d in data.items():
        h5 = h10 = n = 0
        for i, q in enumerate(d["queries"]):
            if q["label"] != "pos":
                continue
            v = d["vaults"][q["vault"]]
            sc = rs.shipped(v, q, s=params["s"], p=params["p"], g=params["g"], cos_all=q.get("_cos"))
            if params["prf"]:
                extra = expansions[name][i]
                for key, value in extra.items():
                    sc[key] = sc.get(key, 0.0) + params["prf"] * value
            ranked = rs.ranked(sc)
            h5 += rs.hit(ranked, q["relevant"], 5)
            h10 += rs.hit(ranked, q["relevant"], 10)
            n += 1
        out[name] = (h5 / n, h10 / n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    names = args.sets.split(",")
    data = {n: rs.load(n) for n in names}
    for d in data.values():
        for q in d["queries"]:
            if q["label"] == "pos":
                q["_cos"] = rs.cosines(d["vaults"][q["vault"]], q["qvec"])
    expansions = {n: rs.expansions(n, data[n]) for n in names}
    combos = [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]
    table = {}
    for params in combos:
        table[json.dumps(params, sort_keys=True)] = scores(data, params, expansions)
        print(params, {k: (round(a, 3), round(b, 3)) for k, (a, b) in table[json.dumps(params, sort_keys=True)].items()},
              file=sys.stderr, flush=True)

    def mean(res: dict[str, tuple[float, float]], sets: list[str]) -> float:
        return sum((res[s][0] + res[s][1]) / 2 for s in sets) / len(sets)

    report: dict[str, Any] = {"folds": {}, "grid": GRID}
    default = table[json.dumps(DEFAULT, sort_keys=True)]
    for fold, held in FOLDS.items():
        held = [s for s in held if s in names]
        train = [s for s in names if s not in held]
        if not held or not train:
            continue
        best = max(table, key=lambda key: mean(table[key], train))
        report["folds"][fold] = {"chosen": json.loads(best), "held_out": {s: table[best][s] for s in held},
                                 "held_out_with_defaults": {s: default[s] for s in held}}
    best = max(table, key=lambda key: mean(table[key], names))
    report["all_sets"] = {"chosen": json.loads(best), "scores": table[best], "defaults": default}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report | {"table": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
