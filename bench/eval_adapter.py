"""A learned linear query adapter (Chroma's "embedding adapters"): q' = normalize(W q) for the query only, the stored
vectors unchanged, W trained on the dev questions' gold documents against the other documents of their own vault.
Does it lift pure semantic recall out of fold, and does it put the escalation policy first for "what happens if
nobody answers an alert" on the service vault (tests/data/service_vault.json)?

    MEMVAULT_BENCH_CACHE=/work/cache python bench/eval_adapter.py [--variants full,lowrank,diag] [--json OUT]

Data: the dumps of ``bench/rank_lab.py dump`` (per vault the unit chunk matrix and chunk -> doc map, per question its
vector and gold docs); nothing is embedded again except the service vault's 15 facts and 47 questions (memvault's
own embedder). Folds: ``bench/eval_folds.py``'s (by conversation or group, 5, seed 27), so the numbers sit beside its.

Scoring: a doc's score is its best chunk's cosine (a runbook's steps included); R@k = the share of answerable
questions with a gold doc among the first k. Out of fold: W trained on four folds, the fifth scored, pooled.
In-sample: W trained on all of them, scored on all of them.

Training (fixed before any number was seen, except the regularisation ``lam``): W = I + A (``full``), I + U Vᵀ
(``lowrank``, rank 16) or diag(1 + d) (``diag``); loss = the mean over sets of each set's mean softmax cross-entropy
of the gold docs against the 30 docs the raw vector ranks first in the question's own vault (the hard negatives;
temperature 0.05) + lam × ‖W − I‖²_F; Adam, learning rate 2e-3, 100 full-batch steps, torch seed 0. ``lam`` (from
LAMBDAS) is chosen per outer fold by an inner 4-fold cross-validation on that fold's training folds only (the mean
over the training sets of each set's target R@k, eval_folds.TARGET_K; ties to the larger lam); the in-sample and
service-vault adapters take the lam the 5-fold figure on all dev folds picks by the same rule. ``ops-like``: W
trained on alert_to_runbook and ops only, scored on every set. The service vault is never trained on.
``ops`` (tests/data/ops_vault.json) asks some of the service vault's questions word for word ("what happens if
nobody answers an alert", with a near-identical escalation fact): the service-vault figures are given for W trained
without ops (the honest one), without that one question, and with it (leaked).

Measured 2026-12-06 (about 20 minutes at one thread; cheat_to_tldr and tldr_self had no dump): out of fold, the full
and low-rank adapters lift LoCoMo (low-rank: turns R@10 .625 -> .678, summaries R@5 .670 -> .691, facts R@5 .751 ->
.764) and leave alert -> runbook (.927) and ops (1.000) where they were or lower; in-sample they reach .81-1.00, a
gap that says W mostly learns the dev sets. On the service vault no adapter trained without ops' copy of the question
moves the escalation policy above the monitoring fact (still #2; 15 or 16 of 19, paraphrases 25 of 28 throughout);
with it (ops in training) the question flips to #1, 17 of 19: the one question learnt, not a better model. The gate
for measuring W inside the whole ranking (eval_folds) was therefore not passed, and it was not run.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import eval_folds as ef  # noqa: E402
import rank_sim as rs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
K = 5  # eval_folds' default folds
LAMBDAS = (0.003, 0.03, 0.3)
TAU = 0.05
STEPS = 100
LR = 2e-3
RANK = 16
DOCS = 30  # hard negatives per question
OPS_LIKE = ("alert_to_runbook", "ops")


@dataclass
class Vault:
    matrix: np.ndarray  # unit chunk rows
    doc_of: np.ndarray  # chunk -> doc index
    names: list[str]  # doc index -> "kind:id"


@dataclass
class Question:
    set: str
    qid: str
    vault: str  # "<set>/<vault>"
    fold: int
    qvec: np.ndarray
    gold: np.ndarray  # doc indices
    text: str


def fold_of(name: str, data: dict[str, Any], k: int = K, seed: int = 27) -> dict[str, int]:
    """Group -> fold, exactly as eval_folds.prepare assigns them."""
    groups = sorted({ef._groups(name, q) for q in data["queries"]})
    if name.startswith("locomo"):
        return {g: i % k for i, g in enumerate(groups)}
    order = list(groups)
    random.Random(seed).shuffle(order)
    return {g: i % k for i, g in enumerate(order)}


def load(names: list[str]) -> tuple[dict[str, Vault], list[Question]]:
    vaults: dict[str, Vault] = {}
    qs: list[Question] = []
    for name in names:
        data = rs.load(name)
        folds = fold_of(name, data)
        for vname, v in data["vaults"].items():
            keys = [v["dockey"][int(r)] for r in v["rowids"]]
            names_ = sorted(set(keys))
            index = {d: i for i, d in enumerate(names_)}
            vaults[f"{name}/{vname}"] = Vault(np.asarray(v["matrix"], dtype=np.float32),
                                              np.array([index[d] for d in keys]), names_)
        for q in data["queries"]:
            if q["label"] != "pos":  # the unanswerable and the half vault's questions rank nothing to score
                continue
            vault = vaults[f"{name}/{q['vault']}"]
            index = {d: i for i, d in enumerate(vault.names)}
            gold = np.array(sorted(index[d] for d in q["relevant"] if d in index))
            if not len(gold):
                continue
            qs.append(Question(name, q["qid"], f"{name}/{q['vault']}", folds[ef._groups(name, q)],
                               np.asarray(q["qvec"], dtype=np.float32), gold, q["query"]))
    return vaults, qs


# ------------------------------------------------------------------------------------------------ the adapter
def train(qs: list[Question], vaults: dict[str, Vault], variant: str, lam: float) -> np.ndarray:
    """W (384×384) for ``variant`` trained on ``qs``; q' = normalize(W q)."""
    import torch

    torch.manual_seed(0)
    dim = qs[0].qvec.shape[0]
    eye = torch.eye(dim)
    if variant == "full":
        params = [torch.zeros(dim, dim, requires_grad=True)]
        delta = lambda: params[0]  # noqa: E731
    elif variant == "lowrank":
        params = [(0.01 * torch.randn(dim, RANK)).requires_grad_(), torch.zeros(dim, RANK, requires_grad=True)]
        delta = lambda: params[0] @ params[1].T  # noqa: E731
    elif variant == "diag":
        params = [torch.zeros(dim, requires_grad=True)]
        delta = lambda: torch.diag(params[0])  # noqa: E731
    else:
        raise ValueError(variant)
    # one batch per set: each question's gold docs and the DOCS docs its raw vector ranks first (the hard negatives:
    # with W near I, a doc further down weighs next to nothing in a softmax at this temperature), all their chunks
    batches: dict[str, list[Any]] = {}
    sets = sorted({q.set for q in qs})
    for set_name in sets:
        group = [q for q in qs if q.set == set_name]
        rows, local, golds = [], [], []
        for q in group:
            v = vaults[q.vault]
            docs = np.full(len(v.names), -2.0, dtype=np.float32)
            np.maximum.at(docs, v.doc_of, v.matrix @ q.qvec)
            cand = list(q.gold) + [d for d in np.argsort(-docs, kind="stable")[:DOCS] if d not in set(q.gold)]
            pos = {d: i for i, d in enumerate(cand)}
            chunks = np.flatnonzero(np.isin(v.doc_of, cand))
            rows.append(v.matrix[chunks])
            local.append(np.array([pos[d] for d in v.doc_of[chunks]]))
            golds.append(len(q.gold))
        cmax = max(len(r) for r in rows)
        dmax = max(len(q.gold) for q in group) + DOCS + 1  # the last column: padding
        x = np.zeros((len(group), cmax, dim), dtype=np.float32)
        idx = np.full((len(group), cmax), dmax - 1)
        gold = np.zeros((len(group), dmax), dtype=bool)
        valid = np.zeros((len(group), dmax), dtype=bool)
        for i, (r, l, g) in enumerate(zip(rows, local, golds)):
            x[i, :len(r)] = r
            idx[i, :len(l)] = l
            gold[i, :g] = True
            valid[i, np.unique(l)] = True
        batches[set_name] = [torch.as_tensor(np.stack([q.qvec for q in group])), torch.as_tensor(x),
                             torch.as_tensor(idx), torch.as_tensor(gold), torch.as_tensor(valid), dmax]
    opt = torch.optim.Adam(params, lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        w = eye + delta()
        loss = lam * (w - eye).pow(2).sum()
        for qv, x, idx, gold, valid, dmax in batches.values():
            qa = torch.nn.functional.normalize(qv @ w.T, dim=1)
            s = torch.einsum("nd,ncd->nc", qa, x)
            # a doc's score is its best chunk's
            s = torch.full((s.shape[0], dmax), -2.0).scatter_reduce(1, idx, s, reduce="amax", include_self=True)
            logits = (s / TAU).masked_fill(~valid, float("-inf"))
            nll = torch.logsumexp(logits, 1) - torch.logsumexp(logits.masked_fill(~gold, float("-inf")), 1)
            loss = loss + nll.mean() / len(sets)
        loss.backward()
        opt.step()
    with torch.no_grad():
        return (eye + delta()).numpy().astype(np.float32)


def apply(w: np.ndarray | None, qvec: np.ndarray) -> np.ndarray:
    if w is None:
        return qvec
    out = w @ qvec
    return out / np.linalg.norm(out)


# ------------------------------------------------------------------------------------------------ scoring
def gold_rank(v: Vault, qvec: np.ndarray, gold: np.ndarray) -> int:
    """1-based rank of the best-placed gold doc (ties broken by doc key, as recall's stable sort)."""
    cos = v.matrix @ qvec
    docs = np.full(len(v.names), -2.0, dtype=np.float32)
    np.maximum.at(docs, v.doc_of, cos)
    best = docs[gold].max()
    first = gold[docs[gold] == best].min()
    return int((docs > best).sum() + ((docs == best) & (np.arange(len(docs)) < first)).sum()) + 1


def ranks(qs: list[Question], vaults: dict[str, Vault], w: np.ndarray | None) -> np.ndarray:
    return np.array([gold_rank(vaults[q.vault], apply(w, q.qvec), q.gold) for q in qs])


def target(qs: list[Question], r: np.ndarray) -> float:
    """The mean over sets of each set's target R@k (eval_folds' selection rule)."""
    sets = sorted({q.set for q in qs})
    set_of = np.array([q.set for q in qs])
    return float(np.mean([(r[set_of == s] <= ef.TARGET_K[s]).mean() for s in sets]))


def per_set(qs: list[Question], r: np.ndarray) -> dict[str, dict[str, float]]:
    out = {}
    set_of = np.array([q.set for q in qs])
    for s in sorted(set(set_of)):
        m = set_of == s
        out[s] = {"n": int(m.sum()), **{f"R@{k}": round(float((r[m] <= k).mean()), 4) for k in (1, 3, 5, 10)}}
    return out


# ------------------------------------------------------------------------------------------------ service vault
def service_vectors() -> dict[str, Any]:
    from memvault.models.embeddings import load_embedder

    data = json.loads((ROOT / "tests" / "data" / "service_vault.json").read_text("utf-8"))
    para = [json.loads(line) for line in (ROOT / "bench" / "data" / "service_paraphrases.jsonl").read_text("utf-8")
            .splitlines() if line.strip()]
    emb = load_embedder("all-MiniLM-L6-v2")
    keys = list(data["facts"])
    facts = np.asarray(emb.embed_documents([data["facts"][k] for k in keys]), dtype=np.float32)
    sets = {"issue": [(q, k) for q, k in data["questions"]], "paraphrases": [(p["query"], p["relevant"][0])
                                                                            for p in para]}
    qv = {name: [(q, k, np.asarray(emb.embed_query(q), dtype=np.float32)) for q, k in qs] for name, qs in sets.items()}
    return {"keys": keys, "facts": facts, "questions": qv}


def service(sv: dict[str, Any], w: np.ndarray | None, ask: str = "what happens if nobody answers an alert"
            ) -> dict[str, Any]:
    keys, facts = sv["keys"], sv["facts"]
    out: dict[str, Any] = {}
    for name, qs in sv["questions"].items():
        first, wrong = 0, []
        for q, key, vec in qs:
            cos = facts @ apply(w, vec)
            top = keys[int(np.argmax(cos))]
            first += top == key
            if top != key:
                wrong.append(f"{q!r} -> {top}")
        out[name] = {"first": first, "of": len(qs), "wrong": wrong}
    (vec,) = [v for q, _, v in sv["questions"]["issue"] if q == ask]
    cos = facts @ apply(w, vec)
    order = [keys[i] for i in np.argsort(-cos)]
    out["escalation"] = {"rank": order.index("oncall/escalation") + 1,
                         "oncall/escalation": round(float(cos[keys.index("oncall/escalation")]), 3),
                         "monitoring/alerting": round(float(cos[keys.index("monitoring/alerting")]), 3),
                         "top3": order[:3]}
    return out


def evaluate(qs: list[Question], vaults: dict[str, Vault], variant: str, pool: list[Question],
             sv: dict[str, Any] | None, log: list[str], started: float) -> dict[str, Any]:
    """Out of fold (lam nested), per lam, in-sample and on the service vault, W trained on ``pool`` only.

    A W trained without folds {f, g} serves both outer fold f's inner fold g and outer g's inner f: each is fitted
    once."""
    fits: dict[tuple[frozenset[int], float], np.ndarray] = {}

    def fit(excluded: frozenset[int], lam: float, among: list[Question] = pool) -> np.ndarray:
        key = (excluded, lam)
        if among is not pool:
            return train([q for q in among if q.fold not in excluded], vaults, variant, lam)
        if key not in fits:
            fits[key] = train([q for q in pool if q.fold not in excluded], vaults, variant, lam)
            print(f"  {variant} without folds {sorted(excluded)} lam {lam} ({time.time() - started:.0f}s)",
                  file=sys.stderr, flush=True)
        return fits[key]

    in_pool = np.array([q.set in {p.set for p in pool} for q in qs])
    by_lam = {}
    for lam in LAMBDAS:
        r = np.zeros(len(qs), dtype=int)
        for f in range(K):
            held = [i for i, q in enumerate(qs) if q.fold == f]
            r[held] = ranks([qs[i] for i in held], vaults, fit(frozenset({f}), lam))
        by_lam[lam] = r
    oof = np.zeros(len(qs), dtype=int)
    chosen = {}
    for f in range(K):
        inner = [i for i, q in enumerate(qs) if q.fold != f and in_pool[i]]
        scores = {}
        for lam in LAMBDAS:
            r = np.array([gold_rank(vaults[qs[i].vault], apply(fit(frozenset({f, qs[i].fold}), lam), qs[i].qvec),
                                    qs[i].gold) for i in inner])
            scores[lam] = target([qs[i] for i in inner], r)
        chosen[f] = max(LAMBDAS, key=lambda lam: (round(scores[lam], 6), lam))  # ties: the stronger pull to I
        log.append(f"{variant} ({len(pool)} questions) outer fold {f}: inner " +
                   ", ".join(f"lam {lam} {v:.4f}" for lam, v in scores.items()) + f" -> {chosen[f]}")
        held = [i for i, q in enumerate(qs) if q.fold == f]
        oof[held] = by_lam[chosen[f]][held]
    # on all folds: the lam whose 5-fold figure on the training sets is best (the same rule, one level up)
    pool_idx = np.flatnonzero(in_pool)
    lam_all = max(LAMBDAS, key=lambda lam: (round(target([qs[i] for i in pool_idx], by_lam[lam][pool_idx]), 6), lam))
    w_all = fit(frozenset(), lam_all)
    entry: dict[str, Any] = {"trained_on": sorted({q.set for q in pool}), "lam_per_fold": chosen, "lam_all": lam_all,
                             "out_of_fold": per_set(qs, oof), "in_sample": per_set(qs, ranks(qs, vaults, w_all)),
                             "out_of_fold_per_lam": {lam: per_set(qs, r) for lam, r in by_lam.items()},
                             "norm_W_minus_I": round(float(np.linalg.norm(w_all - np.eye(len(w_all)))), 4)}
    if sv is not None:
        entry["service"] = service(sv, w_all)
        if any(q.set == "ops" for q in pool):  # ops asks the service vault's question word for word
            entry["service_without_ops"] = service(sv, fit(frozenset(), lam_all, [q for q in pool if q.set != "ops"]))
            asked = {text for qs_ in sv["questions"].values() for text, _, _ in qs_}
            entry["service_without_shared"] = service(sv, fit(frozenset(), lam_all,
                                                               [q for q in pool if q.text not in asked]))
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(ef.SETS))
    ap.add_argument("--variants", default="full,lowrank,diag")
    ap.add_argument("--no-service", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    started = time.time()
    names = [n for n in args.sets.split(",") if (rs.LAB / f"{n}.pkl").exists()]
    missing = [n for n in args.sets.split(",") if n not in names]
    vaults, qs = load(names)
    base = ranks(qs, vaults, None)
    res: dict[str, Any] = {"sets": names, "missing": missing, "identity": per_set(qs, base), "variants": {}}
    log: list[str] = []
    sv = None if args.no_service else service_vectors()
    if sv is not None:
        res["service_identity"] = service(sv, None)
    for variant in args.variants.split(","):
        for scope, train_sets in (("all", names), ("ops-like", [n for n in names if n in OPS_LIKE])):
            if scope == "ops-like" and variant != "full":
                continue
            entry = evaluate(qs, vaults, variant, [q for q in qs if q.set in train_sets], sv, log, started)
            res["variants"][f"{variant}/{scope}"] = entry
    res["seconds"] = round(time.time() - started)
    res["log"] = log
    print(report(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str), encoding="utf-8")
    return 0


def report(res: dict[str, Any]) -> str:
    sets = res["sets"]
    lines = [f"## Pure semantic ranking (doc = its best chunk's cosine), {K} folds by group", ""]
    if res["missing"]:
        lines += [f"No dump for {', '.join(res['missing'])} (bench/rank_lab.py dump): not measured.", ""]
    lines += ["| set | R@k | identity | " + " | ".join(f"{v} oof / in-sample" for v in res["variants"]) + " |",
              "|---|---|---|" + "---|" * len(res["variants"])]
    for s in sets:
        for k in sorted({ef.TARGET_K[s], 10} if ef.TARGET_K[s] != 10 else {5, 10}):
            cells = [f"{v['out_of_fold'][s][f'R@{k}']:.3f} / {v['in_sample'][s][f'R@{k}']:.3f}"
                     for v in res["variants"].values()]
            tgt = "**" if k == ef.TARGET_K[s] else ""
            ident = res["identity"][s]
            lines.append(f"| {s} (n={ident['n']}) | {tgt}R@{k}{tgt} | {ident[f'R@{k}']:.3f} | " + " | ".join(cells)
                         + " |")
    lines += ["", "lam per outer fold (inner 4-fold CV on the training folds), lam on all folds, ‖W−I‖_F on all:"]
    for name, v in res["variants"].items():
        lines.append(f"- {name} (trained on {', '.join(v['trained_on'])}): {v['lam_per_fold']}, all {v['lam_all']}, "
                     f"‖W−I‖ {v['norm_W_minus_I']}")
    lines += ["", "Out of fold with every fold at one lam (a diagnostic: picking the best of these would be choosing "
              "on the held folds), target R@k:", "",
              "| adapter | lam | " + " | ".join(sets) + " |", "|---|---|" + "---|" * len(sets),
              "| identity | — | " + " | ".join(f"{res['identity'][s][f'R@{ef.TARGET_K[s]}']:.3f}" for s in sets)
              + " |"]
    for name, v in res["variants"].items():
        for lam, sc in v["out_of_fold_per_lam"].items():
            lines.append(f"| {name} | {lam} | " + " | ".join(f"{sc[s][f'R@{ef.TARGET_K[s]}']:.3f}" for s in sets)
                         + " |")
    if "service_identity" in res:
        lines += ["", "## Service vault (never trained on): gold fact first by cosine", "",
                  "| W | issue (19) | paraphrases (28) | 'nobody answers an alert': escalation rank, cos escalation / "
                  "alerting |", "|---|---|---|---|"]

        def row(name: str, s: dict[str, Any]) -> str:
            e = s["escalation"]
            return (f"| {name} | {s['issue']['first']}/{s['issue']['of']} | {s['paraphrases']['first']}/"
                    f"{s['paraphrases']['of']} | #{e['rank']}, {e['oncall/escalation']:.3f} / "
                    f"{e['monitoring/alerting']:.3f} |")
        lines.append(row("identity", res["service_identity"]))
        for name, v in res["variants"].items():
            if "service_without_ops" in v:
                lines.append(row(f"{name} without ops (lam {v['lam_all']})", v["service_without_ops"]))
                lines.append(row(f"{name} without the one ops question the service vault asks too",
                                 v["service_without_shared"]))
            leaked = " (ops asks the same question: leaked)" if "service_without_ops" in v else ""
            lines.append(row(f"{name}{leaked}", v["service"]))
        lines += ["", "Wrong at 1 (identity): " + "; ".join(res["service_identity"]["issue"]["wrong"]
                                                           + res["service_identity"]["paraphrases"]["wrong"])]
        for name, v in res["variants"].items():
            s = v.get("service_without_ops", v["service"])
            lines.append(f"Wrong at 1 ({name}{' without ops' if 'service_without_ops' in v else ''}): "
                         + "; ".join(s["issue"]["wrong"] + s["paraphrases"]["wrong"]))
    lines += ["", f"{res['seconds']} s"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
