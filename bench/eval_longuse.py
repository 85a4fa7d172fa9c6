"""Recall in long use, on the eval dev sets (MiniLM): session replay, negative questions, stale answers, run logs.

    python bench/eval_longuse.py [--only replay,negatives,fit,stale,runs] [--cache DIR] [--json OUT] [--from JSON]

1. **replay**: each dev query stream is asked twice, in order, with usage recording ON (as an agent runs), on a
   copy of the vault with an empty state; R@5/R@10 of the second pass against recording OFF.
2. **negatives**: on every set, the share of *answerable* questions answered with nothing (false abstention) beside
   the share of *unanswerable* ones answered with nothing — LoCoMo questions of conversation i asked of
   conversation i+1's vault (facts, turns, summaries), and alert descriptions asked of a vault holding only the
   other half of the runbooks (runbooks split by alert group); cheat→tldr has answerable questions only — and the
   R@5 cost of the floors on the answerable questions (shipped against ``min_relevance=0``).
   **fit**: the floor's three settings (``min_evidence``, ``min_coverage``, ``unknown_name_penalty``) chosen by
   leaving one set out (LoCoMo's three together: they share their questions), from the evidence each question's
   recall logged: the folds, and the choice on all sets.
3. **stale**: the LoCoMo facts vault with the relevant fact of every question marked stale (``valid_until`` in
   2020): where the stale right answer ranks (goal: top 3, with its mark).
4. **runs**: the alert-runbook vault with ten ``procedure_run`` episodes per runbook; "how do I …" questions (the
   alert descriptions): how often a run log outranks its own runbook (goal: never) and the runbooks' R@5.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
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
def _ask(vault: Vault, query: str) -> tuple[list[str], dict[str, Any]]:
    """The hits with the shipped floors, and what the "nothing known" test read (for the threshold fit)."""
    hits = vault.recall(query, k=10, record_access=False, sync=False)
    return ids(hits), dict(hits.evidence or {})


def _side(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    return {"questions": n, "answered_with_nothing": round(sum(not r["got"] for r in rows) / n, 4) if n else None}


OPS = Path(__file__).resolve().parents[1] / "tests" / "data" / "ops_vault.json"


def ops_vault(cache: Path) -> tuple[Vault, dict[str, Any]]:
    """The ops vault of issue 17 (tests/data/ops_vault.json: 24 facts, questions in other words, unrelated ones),
    built once in the cache with the eval's model."""
    data = json.loads(OPS.read_text("utf-8"))
    root = cache / "ops_vault"
    stamp = root / ".built"
    if not stamp.exists() or stamp.read_text() != json.dumps(data["facts"], sort_keys=True):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        # its own repository (the cache sits inside this checkout's), committed as a bench user
        subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
        for name, value in (("user.name", "memvault bench"), ("user.email", "bench@memvault.invalid")):
            subprocess.run(["git", "-C", str(root), "config", name, value], check=True)
        Vault.init(root, daemon=False)
        write_config(root)
        vault = open_vault(root)
        for key, text in data["facts"].items():
            vault.facts.set(key, text, source="user:eval")
        stamp.write_text(json.dumps(data["facts"], sort_keys=True))
    write_config(root)
    vault = open_vault(root)
    vault.reindex()
    return vault, data


def ops_negatives(cache: Path) -> dict[str, Any]:
    vault, data = ops_vault(cache)
    pos, neg = [], []
    on, off = Score(), Score()
    for question, key in data["answerable"]:
        got, ev = _ask(vault, question)
        pos.append({"qid": question, "got": bool(got), "hit5": f"fact:{key}" in got[:5],
                    "hit3": f"fact:{key}" in got[:3], **ev})
        on.add(got, {f"fact:{key}"})
        off.add(ids(vault.recall(question, k=10, record_access=False, sync=False, min_relevance=0)), {f"fact:{key}"})
    for question in data["unanswerable"]:
        got, ev = _ask(vault, question)
        neg.append({"qid": question, "got": bool(got), **ev})
    result = _summary(pos, neg, on, off)
    result["answerable_right_fact_in_top3"] = round(sum(r["hit3"] for r in pos) / len(pos), 4)
    log(f"negatives ops: { {k: v for k, v in result.items() if k != 'rows'} }")
    return result


def negatives(cache: Path, sets: tuple[str, ...] = (*LOCOMO, "cheat_to_tldr", "alert_to_runbook", "ops")
              ) -> dict[str, Any]:
    """Per set: answerable questions answered with nothing (false abstention) beside unanswerable ones answered with
    nothing, the R@5 the floors cost, and every question's evidence (``rows``: what ``--only fit`` reads)."""
    out: dict[str, Any] = {}
    for set_name in sets:
        if set_name == "ops":
            out["ops"] = ops_negatives(cache)
            continue
        corpora = ec.build(set_name, cache)
        vaults = [indexed(c) for c in corpora]
        pos: list[dict[str, Any]] = []
        neg: list[dict[str, Any]] = []
        on, off = Score(), Score()
        for i, corpus in enumerate(corpora):
            for q in corpus.queries:
                got, ev = _ask(vaults[i], q.query)
                pos.append({"qid": q.qid, "got": bool(got), "hit5": bool(q.relevant.intersection(got[:5])), **ev})
                on.add(got, q.relevant)
                off.add(ids(vaults[i].recall(q.query, k=10, record_access=False, sync=False, min_relevance=0)),
                        q.relevant)
                if set_name in LOCOMO:  # asked of the next conversation's vault, which holds no answer
                    got, ev = _ask(vaults[(i + 1) % len(vaults)], q.query)
                    neg.append({"qid": q.qid, "got": bool(got), **ev})
        out[set_name] = _summary(pos, neg, on, off)
        log(f"negatives {set_name}: { {k: v for k, v in out[set_name].items() if k != 'rows'} }")
        if set_name == "alert_to_runbook":
            out["alert_half"] = alert_negatives(cache)
    return out


def _summary(pos: list[dict[str, Any]], neg: list[dict[str, Any]], on: Score, off: Score) -> dict[str, Any]:
    return {"answerable": _side(pos), "unanswerable": _side(neg), "positive_R@5_floor": round(on.r(5), 4),
            "positive_R@5_no_floor": round(off.r(5), 4), "R@5_cost": round(off.r(5) - on.r(5), 4),
            "rows": {"pos": pos, "neg": neg}}


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
    pos: list[dict[str, Any]] = []
    neg: list[dict[str, Any]] = []
    on, off = Score(), Score()
    for q in corpus.queries:
        got, ev = _ask(vault, q.query)
        if any(r.split(":", 1)[1].split("/")[0] in keep for r in q.relevant):
            pos.append({"qid": q.qid, "got": bool(got), "hit5": bool(q.relevant.intersection(got[:5])), **ev})
            on.add(got, q.relevant)
            off.add(ids(vault.recall(q.query, k=10, record_access=False, sync=False, min_relevance=0)), q.relevant)
        else:
            neg.append({"qid": q.qid, "got": bool(got), **ev})
    result = _summary(pos, neg, on, off)
    log(f"negatives alert_half: { {k: v for k, v in result.items() if k != 'rows'} }")
    return result


# ------------------------------------------------------------------------------------------------ 2b. the fit
def abstains(row: dict[str, Any], min_evidence: float, min_coverage: float, penalty: float) -> bool:
    """Whether recall would answer ``row``'s question with nothing under these settings (as recall decides)."""
    if row.get("exact") or "coverage" not in row:
        return False
    pen = penalty if row.get("unknown_names") else 0.0
    semantic = row["semantic"] if row.get("semantic") is not None else float("-inf")
    return semantic - pen < min_evidence and row["coverage"] - pen < min_coverage


#: min_evidence stays below the shipped one + recall's COVERAGE_MARGIN: above it recall does not read the words.
GRID = {"min_evidence": [round(0.05 * i, 2) for i in range(0, 15)],
        "min_coverage": [0.35, 0.45, 0.55, 0.65, 0.8, 1.01],
        "unknown_name_penalty": [round(0.1 * i, 1) for i in range(0, 11)]}


def fit(negatives_out: dict[str, Any], max_false: float = 0.02) -> dict[str, Any]:
    """Leave one set out: on the other sets, the settings that abstain on the most unanswerable questions (the
    worst set counts) while answering with nothing at most ``max_false`` of the answerable ones on every set;
    scored on the set left out. LoCoMo's three sets share their questions, so they are left out together."""
    import itertools

    sets = {k: v["rows"] for k, v in negatives_out.items() if isinstance(v, dict) and "rows" in v}
    folds = {"locomo": [s for s in sets if s.startswith("locomo")],
             "alert": [s for s in sets if s.startswith("alert")],
             **{s: [s] for s in sets if not s.startswith(("locomo", "alert"))}}
    folds = {k: v for k, v in folds.items() if v}

    def rates(names: list[str], params: tuple[float, float, float]) -> tuple[list[float], list[float]]:
        false = [sum(abstains(r, *params) for r in sets[n]["pos"]) / max(1, len(sets[n]["pos"])) for n in names]
        true = [sum(abstains(r, *params) for r in sets[n]["neg"]) / len(sets[n]["neg"]) for n in names
                if sets[n]["neg"]]
        return false, true

    grid = list(itertools.product(GRID["min_evidence"], GRID["min_coverage"], GRID["unknown_name_penalty"]))
    result: dict[str, Any] = {"folds": {}}
    for held, names in [*folds.items(), ("none", [])]:
        train = [n for n in sets if n not in names]
        best = None
        for params in grid:
            false, true = rates(train, params)
            if max(false, default=0.0) > max_false:
                continue
            key = (min(true, default=0.0), sum(true), -params[0])
            if best is None or key > best[0]:
                best = (key, params)
        if best is None:
            continue
        params = best[1]
        entry = {"settings": dict(zip(GRID, params))}
        if names:
            false, true = rates(names, params)
            entry["held_out"] = {n: {"answerable_answered_with_nothing": round(f, 4)} for n, f in zip(names, false)}
            for n in names:
                if sets[n]["neg"]:
                    entry["held_out"][n]["unanswerable_answered_with_nothing"] = round(rates([n], params)[1][0], 4)
        result["folds" if names else "all_sets"] = (result["folds"] | {held: entry}) if names else entry
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
    ap.add_argument("--only", default="replay,negatives,fit,stale,runs",
                    help="replay, negatives, fit (of the floor's settings; needs negatives, or --from), stale, runs")
    ap.add_argument("--from", dest="from_json", type=Path, help="a JSON of an earlier run to take negatives from")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {}
    if args.from_json:
        out.update({k: v for k, v in json.loads(args.from_json.read_text()).items() if k == "negatives"})
    for name in args.only.split(","):
        if name == "fit":
            out["fit"] = fit(out["negatives"])
            continue
        if name == "negatives" and "negatives" in out:
            continue
        out[name] = {"replay": replay, "negatives": negatives, "stale": stale, "runs": runs}[name](args.cache)
    print(json.dumps({k: v for k, v in out.items() if k != "negatives"} | {"negatives": {
        s: {k: v for k, v in r.items() if k != "rows"} for s, r in out.get("negatives", {}).items()}}, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
