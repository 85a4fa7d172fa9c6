"""What the wider searches for a time window do to the LoCoMo questions that name a time (docs/recall.md, Time).

    MEMVAULT_BENCH_CACHE=DIR python bench/eval_time_windows.py [--sets locomo_turns,locomo_facts,locomo_summaries]

For each question whose words name a time (``timeq.parse`` finds a phrase), recall (hybrid, k=10, MiniLM, the eval
vaults of ``bench/eval_recall.py``) runs twice: as shipped, and with the window's episodes taken only from the first
searches (``gather_within`` replaced by the filter it widens). Prints per set the questions, how many top 10s the
widening changed, and for each way the R@10 hits and the seconds spent.
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_corpora as ec  # noqa: E402
import eval_recall as er  # noqa: E402

from memvault.core import windows as recall_mod  # noqa: E402
from memvault.rules import timeq  # noqa: E402


def first_searches_only(parts, query, k, kinds, mode, qvec, prepare, window, first):
    return {key: c for key, c in first.items()
            if window.phrase or key[0] != "episode" or recall_mod.inside(c.doc, window)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="locomo_turns,locomo_facts,locomo_summaries")
    args = ap.parse_args()
    shipped = recall_mod.gather_within
    for name in args.sets.split(","):
        totals = {"shipped": [0, 0.0], "first searches only": [0, 0.0]}
        asked = changed = 0
        for corpus in ec.build(name, er.DEFAULT_CACHE):
            vault = er.open_vault(corpus.vault)
            for q in corpus.queries:
                window = timeq.parse(q.query, datetime.now(timezone.utc))
                if window is None or not window.phrase:
                    continue
                asked += 1
                tops = {}
                for label, gather_within in (("first searches only", first_searches_only), ("shipped", shipped)):
                    recall_mod.gather_within = gather_within
                    start = time.perf_counter()
                    hits = vault.recall(q.query, k=10, record_access=False, sync=False)
                    totals[label][1] += time.perf_counter() - start
                    tops[label] = [f"{h.kind}:{h.id}" for h in hits]
                    totals[label][0] += bool(set(tops[label]) & q.relevant)
                recall_mod.gather_within = shipped
                changed += tops["shipped"] != tops["first searches only"]
        print(f"{name}: {asked} questions name a time; top 10 changed by the widening: {changed}; "
              + "; ".join(f"{label} R@10 hits {hits} ({seconds:.1f} s)" for label, (hits, seconds) in totals.items()))


if __name__ == "__main__":
    main()
