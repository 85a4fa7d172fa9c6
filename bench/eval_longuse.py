"""Recall in long use, on the eval dev sets (MiniLM): session replay, negative questions, stale answers, run logs.

    python bench/eval_longuse.py [--only replay,negatives,stale,runs] [--cache DIR] [--json OUT]

1. **replay**: each dev query stream is asked twice, in order, with usage recording ON (as an agent runs), on a
   copy of the vault with an empty state; R@5/R@10 of the second pass against recording OFF.
2. **negatives**: questions whose answer is not in the vault — LoCoMo questions of conversation i asked of
   conversation i+1's vault (facts, turns, summaries), and alert descriptions asked of a vault holding only the
   other half of the runbooks (runbooks split by alert group) — share answered with no hits; and the R@5 cost of
   the floor on the positive questions (shipped against ``min_relevance=0``).
3. **stale**: the LoCoMo facts vault with the relevant fact of every question marked stale (``valid_until`` in
   2020): where the stale right answer ranks (goal: top 3, with its mark).
4. **runs**: the alert-runbook vault with ten ``procedure_run`` episodes per runbook; "how do I …" questions (the
   alert descriptions): how often a run log outranks its own runbook (goal: never) and the runbooks' R@5.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_corpora as ec  # noqa: E402
from eval_recall import DEFAULT_CACHE, Score, open_vault, write_config  # noqa: E402

from memvault import Vault  # noqa: E402

LOCOMO = ("locomo_facts", "locomo_turns", "locomo_summaries")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def ids(hits: Any) -> list[str]:
    return [f"{h.kind}:{h.id}" for h in hits]


def indexed(corpus: ec.Corpus) -> Vault:
    write_config(corpus.vault)
    vault = open_vault(corpus.vault)
    vault.reindex()
    return vault


def copy_vault(src: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (dest / ".memvault" / name).unlink(missing_ok=True)
    return dest


# ------------------------------------------------------------------------------------------------ 1. replay
def replay(cache: Path) -> dict[str, Any]:
    out = {}
    for set_name in (*LOCOMO, "alert_to_runbook", "cheat_to_tldr"):
        off, second = Score(), Score()
        for corpus in ec.build(set_name, cache):
            vault = indexed(corpus)
            for q in corpus.queries:
                off.add(ids(vault.recall(q.query, k=10, record_access=False, sync=False)), q.relevant)
            copy = copy_vault(corpus.vault, cache / "replay" / corpus.name.replace("/", "_"))
            live = open_vault(copy)
            for _pass in (1, 2):
                for q in corpus.queries:
                    got = ids(live.recall(q.query, k=10, record_access=True, sync=False))
                    if _pass == 2:
                        second.add(got, q.relevant)
            shutil.rmtree(copy)
        out[set_name] = {"off": off.to_dict(), "second_pass": second.to_dict(),
                         "delta_R@5": round(second.r(5) - off.r(5), 4), "delta_R@10": round(second.r(10) - off.r(10), 4)}
        log(f"replay {set_name}: {out[set_name]}")
    return out


# ------------------------------------------------------------------------------------------------ 2. negatives
def negatives(cache: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for set_name in LOCOMO:
        corpora = ec.build(set_name, cache)
        vaults = [indexed(c) for c in corpora]
        none, asked = 0, 0
        pos_on, pos_off = Score(), Score()
        for i, corpus in enumerate(corpora):
            other = vaults[(i + 1) % len(vaults)]
            for q in corpus.queries:
                asked += 1
                none += not other.recall(q.query, k=10, record_access=False, sync=False)
                pos_on.add(ids(vaults[i].recall(q.query, k=10, record_access=False, sync=False)), q.relevant)
                pos_off.add(ids(vaults[i].recall(q.query, k=10, record_access=False, sync=False, min_relevance=0)),
                            q.relevant)
        out[set_name] = {"negatives": asked, "answered_with_nothing": round(none / asked, 3),
                         "positive_R@5_floor": round(pos_on.r(5), 4), "positive_R@5_no_floor": round(pos_off.r(5), 4),
                         "R@5_cost": round(pos_off.r(5) - pos_on.r(5), 4)}
        log(f"negatives {set_name}: {out[set_name]}")
    out["alert_to_runbook"] = alert_negatives(cache)
    return out


def alert_negatives(cache: Path) -> dict[str, Any]:
    """Half the runbooks (by alert group) in a vault; the other half's questions are negatives."""
    (corpus,) = ec.build("alert_to_runbook", cache)
    groups = sorted({p.relative_to(corpus.vault / "procedures").parts[0]
                     for p in (corpus.vault / "procedures").rglob("*") if p.is_file()})
    keep = set(groups[0::2])
    half = cache / "alert_half"
    if half.exists():
        shutil.rmtree(half)
    shutil.copytree(corpus.vault, half, ignore=shutil.ignore_patterns(".memvault"))
    for path in list((half / "procedures").iterdir()):
        if path.is_dir() and path.name not in keep:
            shutil.rmtree(path)
    vault = indexed(ec.Corpus("alert_half", half, [], 0))
    none = asked = 0
    pos_on, pos_off = Score(), Score()
    for q in corpus.queries:
        inside = any(r.split(":", 1)[1].split("/")[0] in keep for r in q.relevant)
        if inside:
            pos_on.add(ids(vault.recall(q.query, k=10, record_access=False, sync=False)), q.relevant)
            pos_off.add(ids(vault.recall(q.query, k=10, record_access=False, sync=False, min_relevance=0)), q.relevant)
        else:
            asked += 1
            none += not vault.recall(q.query, k=10, record_access=False, sync=False)
    result = {"negatives": asked, "answered_with_nothing": round(none / asked, 3) if asked else None,
              "positives": pos_on.n, "positive_R@5_floor": round(pos_on.r(5), 4),
              "positive_R@5_no_floor": round(pos_off.r(5), 4), "R@5_cost": round(pos_off.r(5) - pos_on.r(5), 4)}
    log(f"negatives alert_to_runbook: {result}")
    return result


# ------------------------------------------------------------------------------------------------ 3. stale
def stale(cache: Path) -> dict[str, Any]:
    ranks: list[int | None] = []
    fresh, marked = Score(), Score()
    for corpus in ec.build("locomo_facts", cache):
        copy = copy_vault(corpus.vault, cache / "stale" / corpus.name.replace("/", "_"))
        relevant = {r.split(":", 1)[1] for q in corpus.queries for r in q.relevant if r.startswith("fact:")}
        for key in relevant:
            path = copy / "facts" / f"{key}.md"
            text = path.read_text()
            path.write_text(text.replace("---\n", "---\nvalid_until: 2020-01-31\n", 1))
        base = indexed(corpus)
        vault = open_vault(copy)
        vault.reindex()
        for q in corpus.queries:
            fresh.add(ids(base.recall(q.query, k=10, record_access=False, sync=False)), q.relevant)
            hits = vault.recall(q.query, k=10, record_access=False, sync=False)
            got = ids(hits)
            marked.add(got, q.relevant)
            rank = next((i for i, d in enumerate(got, 1) if d in q.relevant), None)
            ranks.append(rank)
            if rank is not None:
                assert hits[rank - 1].extra.get("stale") is True, "a stale answer came back unmarked"
        shutil.rmtree(copy)
    found = [r for r in ranks if r is not None]
    result = {"questions": len(ranks), "stale_answer_top3": round(sum(r <= 3 for r in found) / len(ranks), 4),
              "stale_answer_top3_when_fresh_found": round(
                  sum(r <= 3 for r in found) / max(1, sum(1 for _ in found)), 4),
              "R@5_fresh": round(fresh.r(5), 4), "R@5_all_answers_stale": round(marked.r(5), 4),
              "R@10_fresh": round(fresh.r(10), 4), "R@10_all_answers_stale": round(marked.r(10), 4)}
    log(f"stale: {result}")
    return result


# ------------------------------------------------------------------------------------------------ 4. runs
def runs(cache: Path) -> dict[str, Any]:
    (corpus,) = ec.build("alert_to_runbook", cache)
    copy = copy_vault(corpus.vault, cache / "runs_vault")
    names = sorted({r.split(":", 1)[1] for q in corpus.queries for r in q.relevant})
    vault = open_vault(copy)
    for name in names:
        for i in range(10):
            vault.episodes.append(f"ran procedure {name} (exit {i % 3 == 0 and 1 or 0}, {0.2 + i / 10:.1f} s)",
                                  source="user:ops", kind="procedure_run", at=f"2026-11-{10 + i:02d}T10:00:00Z",
                                  meta={"name": name, "commit": "0" * 40, "blob": "1" * 40, "args": [],
                                        "exit_code": 1 if i % 3 == 0 else 0, "duration_ms": 200 + i * 100,
                                        "dirty": False})
    vault.reindex()
    base = indexed(corpus)
    outranked = answered = 0
    with_runs, without = Score(), Score()
    for q in corpus.queries:
        question = "how do I handle " + q.query
        hits = vault.recall(question, k=10, record_access=False, sync=False)
        got = ids(hits)
        with_runs.add(got, q.relevant)
        without.add(ids(base.recall(question, k=10, record_access=False, sync=False)), q.relevant)
        target = next(iter(q.relevant)).split(":", 1)[1]
        proc_rank = next((i for i, h in enumerate(hits) if h.kind == "procedure" and h.id == target), None)
        run_rank = next((i for i, h in enumerate(hits) if h.kind == "episode" and target in h.text), None)
        answered += 1
        if run_rank is not None and (proc_rank is None or run_rank < proc_rank):
            outranked += 1
    shutil.rmtree(copy)
    result = {"questions": answered, "run_outranks_its_runbook": outranked,
              "R@5_with_10_runs_each": round(with_runs.r(5), 4), "R@5_without_runs": round(without.r(5), 4),
              "R@10_with_10_runs_each": round(with_runs.r(10), 4), "R@10_without_runs": round(without.r(10), 4)}
    log(f"runs: {result}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="replay,negatives,stale,runs")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {}
    for name in args.only.split(","):
        out[name] = {"replay": replay, "negatives": negatives, "stale": stale, "runs": runs}[name](args.cache)
    print(json.dumps(out, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
