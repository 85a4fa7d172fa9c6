"""What a time in the question costs recall (issue 27): every corpus question asked with a time after it ("last
week") against the same question without it, in one warm process, alternating (ABBA).

    python bench/bench_time.py [--corpus alert_to_runbook] [--phrase "last week"] [--queries 100] [--rounds 4]

Recall leaves the words "last week" out of its search, so both ask the same search; the timed part that differs is
the window: whether each candidate is of that time (its creation time, then, for one written after the time began,
the times its text names, read by ``timeq.named_times``, once per text in a process) and the division of the others'
relevance. A first pass, each question with no text read before it, is reported apart. LoCoMo's turns are of
2022-2023: "last week" reads no text, "in May 2023" reads the text of every turn written since. The vault is the
eval corpus's (``bench/eval_corpora.py``): 380 alert runbooks (long texts, none of that time), or LoCoMo's turns
(``locomo_turns``: short episodes that name times often).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import eval_corpora as ec  # noqa: E402
from eval_recall import DEFAULT_CACHE, write_config  # noqa: E402


def timed(v, queries: list[str], forget: bool = False) -> list[float]:
    """Each query's warm recall (ms); ``forget``: with no text's times known before it (timeq remembers them)."""
    from memvault.rules import timeq

    out = []
    for q in queries:
        if forget:
            timeq.forget_times()
        start = time.perf_counter()
        v.recall(q, k=10, record_access=False, sync=False)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    from memvault import Vault

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="alert_to_runbook", choices=("alert_to_runbook", "locomo_turns"))
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--phrase", default="last week", help="the time put after every question")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    corpus = ec.build(args.corpus, DEFAULT_CACHE)[0]
    write_config(corpus.vault)
    v = Vault.open(corpus.vault, daemon=False)
    v.reindex()
    plain = [q.query.rstrip("?. ") for q in corpus.queries][: args.queries]
    dated = [f"{q} {args.phrase}" for q in plain]
    for q in plain[:5] + dated[:5]:  # the model, the index and the caches warm
        v.recall(q, k=10, record_access=False)
    # Every question once with no text read before it (timeq remembers the times of a text it read): what a time
    # costs the first time a process meets those memories.
    first = statistics.median(timed(v, dated, forget=True)) / statistics.median(timed(v, plain))
    p50: dict[str, list[float]] = {"plain": [], "time": []}
    for r in range(args.rounds):
        for name in (("plain", "time") if r % 2 == 0 else ("time", "plain")):
            p50[name].append(statistics.median(timed(v, plain if name == "plain" else dated)))
            print(f"[bench_time] round {r + 1} {name}: p50 {p50[name][-1]:.2f} ms", file=sys.stderr, flush=True)
    med = {name: statistics.median(x) for name, x in p50.items()}
    ratio = med["time"] / med["plain"]
    print(f"{args.corpus}, \"{args.phrase}\": warm recall p50 with a time in the question {med['time']:.2f} ms, without "
          f"{med['plain']:.2f} ms ({ratio:.2f}x, {len(plain)} questions, {args.rounds} rounds; {first:.2f}x the first "
          "time, its texts not read before)")
    if args.json:
        args.json.write_text(json.dumps({"corpus": args.corpus, "p50": p50, "ratio": ratio, "first": first},
                                        indent=1))


if __name__ == "__main__":
    main()
