"""Every tunable weight and threshold of recall chosen on some of the dev data and scored on the rest (k folds by
conversation or group), beside the same choice made and scored on all of it (in-sample).

    python bench/rank_lab.py dump [--sets ...]          # once: what recall sees for every dev question
    python bench/eval_folds.py [--sets ...] [--folds 5] [--json OUT]

Folds never split a group: LoCoMo by conversation (one vault each: its questions, and the other conversation's
questions asked of it as unanswerable ones), cheat→tldr and tldr_self by the command page asked for, alert→runbook
by runbook group (``node``, ``etcd``...; the half vault's questions with it). For each fold the ranking weights
(``semantic_weight`` s, ``phrase_weight`` p, ``neighbour_weight`` g, ``coverage_weight`` c: the rescoring of the
best candidates by the share of the question's words they hold; ``keyword_coverage`` h; ``time_weight`` t,
how far a time the question names puts its memories first, and ``grace_weight`` e, how much less a memory of the
time only by the week after it counts; ``procedure_semantic_weight`` S and ``procedure_phrase_weight`` P, a
runbook's own s and p; ``procedure_feedback_weight`` f; and, only when ``--grid "u=0,0.3"`` names it,
``generality_weight`` u, how much a fact close to the other facts found loses: off in recall; and, only when
``--grid "m=0,0.5"`` names it, m, how much a fact loses for its closeness to the mean of the vault's facts, centred
(simulated only: recall has no such weight, docs/benchmarks.md, issue 27 twelfth pass)) are chosen on the other folds by the mean, over
sets, of each set's target metric; then the abstention settings (``min_evidence``, ``min_coverage``, the penalty and
which rule earns it: ``named_words``, any content word no memory holds, or none) by the most unanswerable LoCoMo
questions refused while refusing at most ``--max-false`` of each set's answerable ones. Out-of-fold figures are the
held-out folds' answers pooled; in-sample ones are the choice made on all folds, scored on all of them.

Recall is simulated offline from the dump (:mod:`rank_sim`'s twin of ``memvault.core.candidates.gather`` plus the
floors and the rescoring, using the same ``memvault.core.rescore`` function recall uses). Evidence within the budget:
of the gold items, the share whose whole text falls inside the first 10,000 characters / 2,500 tokens of the
ranked answers (texts in rank order; a hit that does not fit whole is not counted).
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from datetime import datetime, timedelta
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rank_sim as rs  # noqa: E402

from memvault.core.calibration import Calibration  # noqa: E402
from memvault.core.hits import token_units  # noqa: E402
from memvault.core.candidates import (FEEDBACK_RUNBOOKS, GENERAL_NEIGHBOURS, GENERAL_ROWS,  # noqa: E402
                                      centred_closeness, feedback_vector)
from memvault.core.rescore import DEPTH, keyword_trust, rescore  # noqa: E402
from memvault.rules import timeq  # noqa: E402
from memvault.rules.freshness import stored_time  # noqa: E402
from memvault.rules.config import TrustSettings  # noqa: E402
from memvault.rules.trust import Policy  # noqa: E402

SETS = ("locomo_facts", "locomo_turns", "locomo_summaries", "cheat_to_tldr", "tldr_self", "alert_to_runbook", "ops")
TARGET_K = {"locomo_facts": 5, "locomo_turns": 10, "locomo_summaries": 5, "cheat_to_tldr": 10, "tldr_self": 5,
            "alert_to_runbook": 5, "ops": 3}
N = 100  # [recall] candidates (the keyword searches)
NV = 50  # [recall] vector_candidates
GRID = {"s": (0.5, 0.6, 0.7), "p": (0.25, 0.5), "g": (0.25, 0.5, 1.0), "c": (0.0, 0.15, 0.3),
        "h": (0.0, 0.5, 0.75, 1.0), "t": (0.0, 0.5, 1.0, 2.0), "S": (0.5, 0.6, 0.7), "P": (0.25, 0.5),
        "e": (0.0, 0.1, 0.25, 0.5, 0.75, 1.0), "f": (0.0, 0.25, 0.5, 1.0),
        "u": (0.0,), "r": (0.0,), "m": (0.0,)}
SHIPPED = {"s": 0.6, "p": 0.25, "g": 0.5, "c": 0.0, "h": 0.0, "t": 2.0, "S": 0.7, "P": 0.25, "e": 0.75, "f": 0.5,
           "u": 0.0, "r": 0.0, "m": 0.0, "min_evidence": 0.3, "min_coverage": 0.35, "penalty": 0.5, "rule": "named"}
ABSTAIN_GRID = {"min_evidence": (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5), "min_coverage": (0.35, 0.45, 0.55, 0.7, 2.0),
                "penalty": (0.25, 0.5, 0.7, 1.0), "rule": ("named", "unknown", "none")}
RELATIVE_FLOOR = 0.3
#: qid/label -> the vector of the question less its subject (bench/remainders.py), when the grid names r
REMAINDERS: dict[str, np.ndarray] = {}
EXACT_BOOST = 0.2
BUDGET_CHARS = 10_000
BUDGET_TOKENS = 2_500
HEADER = 80  # characters of a hit's header as printed: kind, id, score, source, time
#: ``--spare-episodes``: keyword_coverage (h) leaves the keyword side of episodes whole (an experiment).
SPARE_EPISODES = False
#: Recall reads the cosine of every step of a runbook found by its words (not only the steps among the vector
#: candidates): ``--no-candidate-steps`` turns it off (an experiment).
STEPS_OF_CANDIDATES = True
#: ``--no-steps``: runbooks ranked as before their steps were embedded (the same dump, every step row masked). Only the
#: ranking is the old one: the relevance scale the floors use stays the one the index measured with its steps.
STEPS = True
#: ``--grace-days``, ``--no-text-times``: what makes a memory of the time a question names (windows.by_time).
GRACE_DAYS = timeq.GRACE.days
TEXT_TIMES = True
TEXT_READS = 2 * 10 + 5
#: The eval vaults keep the default [trust] (user:* only): their episodes (source eval:locomo) are untrusted.
TRUST = Policy(TrustSettings().trusted)


@dataclass
class Q:
    """One question with what recall sees, reduced to arrays."""

    set: str
    qid: str
    fold: int
    label: str  # pos, neg, halfpos
    relevant: set[str]
    rows: np.ndarray  # candidate chunk rowids
    kw: np.ndarray  # bm25 / best, 0 when absent
    ph: np.ndarray
    cos: np.ndarray  # raw cosine
    exact: np.ndarray  # bool
    cov: np.ndarray  # coverage (share of the query's IDF weight) per row
    doc: list[str]  # per row: "kind:id"
    neigh: dict[int, list[int]]  # row position -> neighbour row positions
    semantic: float  # best calibrated evidence of any kind
    held: float  # coverage of the best keyword match (abstention)
    top_cov: float  # coverage of the best BM25 match (the keyword side's confidence)
    any_exact: bool
    unknown_names: bool
    unknown_terms: bool
    lengths: dict[str, tuple[int, int]] = field(default_factory=dict)  # doc -> (characters, quarter tokens) of its text
    single: bool = False  # every row is a doc of its own (no doc has two chunks among the candidates)
    # per row, when the question names a time: 2 = written in it, 3 / 4 = written in the week after it, its text
    # naming a time inside it (3: read only among the best) or not (4), 1 = written after it began and its text names
    # a time inside it, -1 = written after it began (its text read only among the best), 0 = not
    intime: np.ndarray | None = None
    proc: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per row: a runbook's chunk
    # per row: a fact, a runbook or a trusted episode (an untrusted episode's text vouches for no time)
    vouched: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # the runbooks' feedback (f): the query's vector, every row's vector and what a step is of (row -> its doc's
    # row positions), and each runbook's chunk vectors (as Index.doc_vectors gives them); None when no runbook
    qvec: np.ndarray | None = None
    vecs: np.ndarray | None = None
    chunks: dict[str, np.ndarray] = field(default_factory=dict)
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # per row: a runbook's step
    moved: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)  # memo: (runbooks, f) -> cosines
    # per row: how general its fact is among the facts of the closest candidates (candidates.generality, unweighted);
    # 0 elsewhere, and everywhere unless the grid has a u above 0
    general: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # per row: a fact chunk's closeness to the mean of the vault's fact vectors, less the mean of that closeness over
    # them (d·μ − |μ|²); 0 elsewhere, and everywhere unless the grid has an m above 0
    hub: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # per row: its cosine with the question less its subject (the words most of the best keyword matches share);
    # empty when the question has no such subject (an experiment: ``--grid "r=0,0.25"``)
    rcos: np.ndarray = field(default_factory=lambda: np.zeros(0))


def time_mark(w: timeq.Window, created: datetime | None, body: str) -> int:
    """A row's mark (:attr:`Q.intime`) for a question naming ``w``: the tests recall's ``windows.by_time`` makes."""
    if created is None or not w.may_tell(created):
        return 0
    if w.inside(created):
        return 2
    named = TEXT_TIMES and w.named_in(body, created)
    if w.holds(created, timedelta(days=GRACE_DAYS)):  # only by the grace: 3 when its text names the time, else 4
        return 3 if named else 4
    return 1 if named else -1


def _groups(name: str, q: dict[str, Any]) -> str:
    if name.startswith("locomo"):
        return q["vault"]
    rel = sorted(q["relevant"]) or [q["qid"]]
    if name == "alert_to_runbook":
        return rel[0].split(":", 1)[1].split("/")[0] if ":" in rel[0] else rel[0]
    return rel[0].split(":", 1)[-1].rsplit("/", 1)[-1]  # the command, whatever the platform


def prepare(name: str, data: dict[str, Any], k: int, seed: int = 27) -> list[Q]:
    groups = sorted({_groups(name, q) for q in data["queries"]})
    if name.startswith("locomo"):
        fold_of = {g: i % k for i, g in enumerate(groups)}
    else:
        order = list(groups)
        random.Random(seed).shuffle(order)
        fold_of = {g: i % k for i, g in enumerate(order)}
    scales = {vname: Calibration.from_json(v["calibration"]) if v.get("calibration") else None
              for vname, v in data["vaults"].items()}
    lengths: dict[str, dict[str, tuple[int, int]]] = {}
    for vname, v in data["vaults"].items():
        steps_of: dict[str, list[int]] = {}
        for r, d in v["docs"].items():
            if d.get("chunk", 0) < 0:
                steps_of.setdefault(v["dockey"][r], []).append(r)
        v["steps_of"] = steps_of if STEPS else {}
        v["step_rows"] = np.array([v["docs"][int(r)].get("chunk", 0) < 0 for r in v["rowids"]], dtype=bool)
        doc_rows: dict[str, list[int]] = {}  # a runbook's chunks, steps too (Index.doc_vectors)
        for r, key in v["dockey"].items():
            if key.startswith("procedure:") and r in v["row_index"]:
                doc_rows.setdefault(key, []).append(v["row_index"][r])
        v["doc_rows"] = doc_rows
        fact_rows: dict[str, list[int]] = {}  # a fact's chunks (its vector: their mean, as candidates.generality)
        for r, key in v["dockey"].items():
            if key.startswith("fact:") and r in v["row_index"]:
                fact_rows.setdefault(key, []).append(v["row_index"][r])
        v["fact_rows"] = fact_rows
        ln: dict[str, tuple[int, int]] = {}
        for r, key in v["dockey"].items():  # every chunk's row holds its doc's whole body
            ln[key] = (len(v["bodies"][r]), token_units(v["bodies"][r]))
        lengths[vname] = ln
    out = []
    cos_cache: dict[str, np.ndarray] = {}
    for q in data["queries"]:
        v = data["vaults"][q["vault"]]
        cos_all = rs.cosines(v, q["qvec"])
        if not STEPS and v["step_rows"].any():  # no step is ever a candidate: no vector for it in the index
            cos_all = np.where(v["step_rows"], np.float32(-2.0), cos_all)
        ri = v["row_index"]
        kw = dict(q["kw"][:N])
        ph = dict(q["ph"][:N])
        ex = set(q["ex"][:N])
        top = np.argpartition(-cos_all, min(NV, len(cos_all) - 1))[:NV]
        rows = set(kw) | set(ph) | ex | {int(v["rowids"][i]) for i in top}
        neigh_ids = {r: v["neighbours"][r] for r in rows if r in v["neighbours"]}
        rows |= {x for ns in neigh_ids.values() for x in ns}
        if STEPS_OF_CANDIDATES:  # every step of a candidate runbook, as recall reads them (Index.runbook_steps)
            keys = {v["dockey"][r] for r in rows if r in v["dockey"]}
            rows |= {r for key in keys for r in v.get("steps_of", {}).get(key, ())}
        # in doc-key order: a stable sort on score then breaks ties by key, as recall does
        rows = sorted((r for r in rows if r in ri and r in v["dockey"]), key=lambda r: (v["dockey"][r], r))
        pos = {r: i for i, r in enumerate(rows)}
        best_kw = max(kw.values(), default=0.0) or 1.0
        best_ph = max(ph.values(), default=0.0) or 1.0
        cos = np.array([cos_all[ri[r]] for r in rows], dtype=np.float64)
        # a runbook's steps (chunks below 0) lend their best cosine to its windows, as candidates._combine does
        steps: dict[str, float] = {}
        for r, c in zip(rows, cos):
            if v["docs"][r].get("chunk", 0) < 0:
                steps[v["dockey"][r]] = max(steps.get(v["dockey"][r], 0.0), float(c))
        if steps:
            cos = np.array([max(c, steps.get(v["dockey"][r], 0.0)) for r, c in zip(rows, cos)], dtype=np.float64)
        kinds = [v["docs"][r]["kind"] for r in rows]
        scale = scales[q["vault"]]
        semantic = float("-inf")
        if scale is not None:
            for c, kind in zip(cos, kinds):
                if c > 0:
                    e = scale.evidence(kind, float(c))
                    if e is not None and e > semantic:
                        semantic = e
        kwa = np.array([kw.get(r, 0.0) / best_kw for r in rows])
        pha = np.array([ph.get(r, 0.0) / best_ph for r in rows])
        cov = np.array([q["cov"].get(r, 0.0) for r in rows])
        # the "words" candidate of the abstention test: the best keyword part (shipped p), its coverage
        kpart = (kwa + 0.25 * pha) / 1.25
        held = float(cov[int(np.argmax(kpart))]) if len(rows) and kpart.max() > 0 else 0.0
        top_cov = float(q["cov"].get(q["kw"][0][0], 0.0)) if q["kw"] else 0.0
        intime = None
        if q.get("window"):  # a time the question names (left out of its words): recall ranks its memories first
            since, until = (datetime.fromisoformat(x) if x else None for x in q["window"])
            w = timeq.Window(since, until, "dumped", q.get("searched", ""))
            intime = np.array([time_mark(w, stored_time(v["docs"][r].get("created")), v["bodies"][r]) for r in rows])
        proc = np.array([kind == "procedure" for kind in kinds], dtype=bool)
        feedback: dict[str, Any] = {}
        if proc.any():
            keys = {v["dockey"][r] for r, is_proc in zip(rows, proc) if is_proc}
            feedback = {"qvec": np.asarray(q["qvec"], dtype=np.float32),
                        "vecs": v["matrix"][[ri[r] for r in rows]],
                        "chunks": {key: v["matrix"][v["doc_rows"][key]] for key in keys},
                        "steps": np.array([v["docs"][r].get("chunk", 0) < 0 for r in rows], dtype=bool)}
        general = np.zeros(len(rows))
        if any(GRID["u"]):
            fact_vector = lambda key: v["matrix"][v["fact_rows"][key]].astype(np.float32).mean(axis=0)  # noqa: E731
            general = generality_of(cos, kinds, [v["dockey"][r] for r in rows], fact_vector)
        feedback["general"] = general
        if any(GRID["m"]):
            if "hub" not in v:
                facts = np.array([k == "fact" for k in v["kinds"]], dtype=bool) & ~v["step_rows"]
                mat = v["matrix"].astype(np.float64)
                mat /= np.linalg.norm(mat, axis=1, keepdims=True)
                mu = mat[facts].mean(axis=0) if facts.any() else np.zeros(mat.shape[1])
                v["hub"] = np.where(facts, mat @ mu - mu @ mu, 0.0)
            feedback["hub"] = np.array([v["hub"][ri[r]] for r in rows])
        rvec = REMAINDERS.get(q["qid"] + "/" + q["label"])
        if rvec is not None:
            rc = v["matrix"][[ri[r] for r in rows]] @ rvec
            if steps:
                rsteps: dict[str, float] = {}
                for r, c in zip(rows, rc):
                    if v["docs"][r].get("chunk", 0) < 0:
                        rsteps[v["dockey"][r]] = max(rsteps.get(v["dockey"][r], 0.0), float(c))
                rc = np.array([max(c, rsteps.get(v["dockey"][r], 0.0)) for r, c in zip(rows, rc)])
            feedback["rcos"] = np.asarray(rc, dtype=np.float64)
        out.append(Q(name, q["qid"] + ("" if q["label"] == "pos" else "/" + q["label"]), fold_of[_groups(name, q)],
                     q["label"], set(q["relevant"]), np.array(rows), kwa, pha, cos,
                     np.array([r in ex for r in rows]), cov, [v["dockey"][r] for r in rows],
                     {pos[r]: [pos[x] for x in ns if x in pos] for r, ns in neigh_ids.items() if r in pos},
                     semantic, held, top_cov, bool(ex), bool(q.get("unknown_names")), bool(q.get("unknown_terms")),
                     lengths[q["vault"]], len({v["dockey"][r] for r in rows}) == len(rows), intime,
                     proc,
                     np.array([kind != "episode" or TRUST.is_trusted(v["docs"][r].get("source") or "")
                               for kind, r in zip(kinds, rows)], dtype=bool), **feedback))
    del cos_cache
    return out


def generality_of(cos: np.ndarray, kinds: list[str], doc: list[str],
                  fact_vector: Callable[[str], np.ndarray]) -> np.ndarray:
    """candidates.generality, unweighted, per row: the facts among the GENERAL_ROWS rows closest in meaning (each fact
    once, its vector ``fact_vector(key)``, the mean of its chunks'), each one's mean cosine with its
    GENERAL_NEIGHBOURS nearest of them less the mean of that over them; every row of such a fact gets its fact's,
    the others 0."""
    near: dict[str, int] = {}
    for i in np.argsort(-cos, kind="stable")[:GENERAL_ROWS]:
        if kinds[i] == "fact":
            near.setdefault(doc[i], int(i))
    if len(near) <= GENERAL_NEIGHBOURS:
        return np.zeros(len(cos))
    dev = dict(zip(near, centred_closeness([fact_vector(key) for key in near]).tolist()))
    return np.array([dev.get(key, 0.0) for key in doc])


def _moved(q: Q, rel: np.ndarray, f: float) -> np.ndarray | None:
    """The rows' cosines with the runbooks' read again (candidates._runbook_feedback): each runbook's chunk or step
    closest to the question, against the query's vector moved toward the FEEDBACK_RUNBOOKS most relevant runbooks,
    gives the runbook its cosine, scaled so that the best runbook cosine stays what it was; None when nothing
    moves."""
    best: dict[str, float] = {}
    for d, r, is_proc in zip(q.doc, rel, q.proc):
        if is_proc and r > best.get(d, -1.0):
            best[d] = float(r)
    top = tuple(sorted(best, key=lambda d: (-best[d], d))[:FEEDBACK_RUNBOOKS])
    if (top, f) in q.moved:
        return q.moved[(top, f)]
    moved_q = feedback_vector(q.qvec, [q.chunks[d] for d in top], f)
    first = q.vecs @ q.qvec  # each runbook's closest chunk or step to the question is read again
    best_row: dict[str, int] = {}
    for i, (d, is_proc) in enumerate(zip(q.doc, q.proc)):
        if is_proc and (d not in best_row or first[i] > first[best_row[d]]):
            best_row[d] = i
    value = {d: float(q.vecs[i] @ moved_q) for d, i in best_row.items()}
    new = np.array([value.get(d, 0.0) for d in q.doc])
    before = float(np.max(q.cos[q.proc], initial=0.0))
    after = float(np.max(new[q.proc], initial=0.0))
    out = None if before <= 0 or after <= 0 else np.where(q.proc, new * (before / after), q.cos)
    q.moved[(top, f)] = out
    return out


def rank(q: Q, s: float, p: float, g: float, c: float, h: float = 0.0, t: float = 0.0, S: float | None = None,
         P: float | None = None, e: float = 0.0, f: float = 0.0, u: float = 0.0, r: float = 0.0, m: float = 0.0,
         floor: float = RELATIVE_FLOOR) -> list[str]:
    """The ranked doc keys recall would return (before abstention), top 10. ``S``: the semantic share of a
    runbook's relevance (None: ``s``, as for every other kind); ``f``: the runbooks' feedback weight; ``u``: how
    much a fact's generality among the closest candidates costs it (``generality_weight``)."""
    if not len(q.rows):
        return []
    if S is not None and S != s and q.proc.any():
        s = np.where(q.proc, S, s)
    if P is not None and P != p and q.proc.any():
        p = np.where(q.proc, P, p)
    trust = keyword_trust(q.top_cov, h)
    if SPARE_EPISODES and trust < 1.0:  # keyword_coverage damps the keyword side of facts and runbooks only
        trust = np.array([1.0 if d.startswith("episode:") else trust for d in q.doc])

    def combined(cos: np.ndarray) -> np.ndarray:  # candidates._combine
        best_cos = max(float(cos[cos > 0].max()) if (cos > 0).any() else 0.0, 0.0) or 1.0
        if r and len(q.rcos):  # facts and episodes: in part their cosine with the question less its subject
            cos = np.where(q.proc, cos, (1 - r) * np.maximum(cos, 0.0) + r * np.maximum(q.rcos, 0.0))
        if u and len(q.general):  # a fact's cosine less what it loses for being general (at least 0)
            cos = np.maximum(np.maximum(cos, 0.0) - u * q.general, 0.0)
        if m and len(q.hub):  # a fact's cosine less its closeness to the mean fact, centred (at least 0)
            cos = np.maximum(np.maximum(cos, 0.0) - m * q.hub, 0.0)
        rel = s * np.maximum(cos, 0.0) / best_cos + (1 - s) * trust * (q.kw + p * q.ph) / (1 + p)
        if q.neigh:
            smooth = rel.copy()
            for i, ns in q.neigh.items():
                if ns:
                    smooth[i] = (rel[i] + g * max(rel[j] for j in ns)) / (1 + g)
            rel = smooth
        if q.any_exact:
            rel = np.where(q.exact, 1.0, rel * (1 - EXACT_BOOST))
        return np.minimum(rel, 1.0)

    rel = combined(q.cos)
    if f and q.vecs is not None:
        moved = _moved(q, rel, f)
        if moved is not None:
            rel = combined(moved)
    if t and q.intime is not None:  # a time in the question: the others' relevance / (1 + time_weight)
        full = q.intime == 2
        week = q.intime >= 3
        if e == 0:  # graced 1: the week after is of the time, its texts unread (windows.by_time)
            full = full | week
            readable = np.flatnonzero((q.intime == 1) | (q.intime == -1))
        else:
            readable = np.flatnonzero((q.intime == 1) | (q.intime == -1) | week)
        partial = week & ~full  # the week after, its text unread or not naming the time: / (1 + t) ** e
        if readable.size:  # recall reads the texts of the 2k + 5 best of these memories only (k = 10)
            docs: dict[str, float] = {}
            for i in readable[np.argsort(-rel[readable], kind="stable")]:
                docs.setdefault(q.doc[i], rel[i])  # a memory is its best row
                if len(docs) == TEXT_READS:
                    break
            best = np.array([i for i in readable if q.doc[i] in docs], dtype=int)
            named = np.zeros(len(rel), dtype=bool)
            named[best] = (q.intime[best] == 1) | (q.intime[best] == 3)
            full |= named & q.vouched  # an untrusted episode's text makes it probably of the time, not surely
            partial |= named & ~q.vouched
        rel = np.where(full, rel, np.where(partial, rel / (1.0 + t) ** e, rel / (1.0 + t)))
    if q.single:  # the fast path: rows are docs, in key order
        keep = np.flatnonzero(rel >= floor * rel.max())
        r = rel[keep]
        if c:
            top = np.argsort(-r, kind="stable")[:DEPTH]
            r = (1 - c) * r
            r[top] += c * q.cov[keep][top]
        order = keep[np.argsort(-r, kind="stable")[:10]]
        return [q.doc[i] for i in order]
    best: dict[str, float] = {}
    cov: dict[str, float] = {}
    for d, r, cv in zip(q.doc, rel, q.cov):
        if r > best.get(d, -1.0):  # a doc is its best chunk, with that chunk's coverage (as recall has it)
            best[d] = float(r)
            cov[d] = float(cv)
    top = max(best.values())
    best = {d: r for d, r in best.items() if r >= floor * top}
    if c:
        best = rescore(best, cov, c)
    return rs.ranked(best, 10)


def abstains(q: Q, me: float, mc: float, pen: float, rule: str) -> bool:
    if q.any_exact:
        return False
    unknown = q.unknown_names if rule == "named" else q.unknown_terms if rule == "unknown" else False
    pen = pen if unknown else 0.0
    return not (q.semantic - pen >= me or q.held - pen >= mc)


def within_budget(q: Q, ranked: list[str]) -> tuple[float, float]:
    """Share of the gold items whose whole text is inside the first BUDGET_CHARS / BUDGET_TOKENS of the answers,
    tokens counted as recall's budget counts them (memvault.core.hits.token_units, rounded once)."""
    if not q.relevant:
        return 0.0, 0.0
    used_c = used_u = 0
    in_c = in_t = 0
    for d in ranked:
        chars, units = q.lengths.get(d, (0, 0))
        used_c += chars + HEADER  # a hit's header: kind, id, score, source, time (ASCII)
        used_u += units + HEADER
        if d in q.relevant:
            in_c += used_c <= BUDGET_CHARS
            in_t += -(-used_u // 4) <= BUDGET_TOKENS
    return in_c / len(q.relevant), in_t / len(q.relevant)


# ------------------------------------------------------------------------------------------------ choosing
def ranking_table(qs: list[Q]) -> dict[tuple[float, ...], np.ndarray]:
    """Per ranking combination, per positive question, hit at its set's target k (1/0)."""
    out = {}
    pos = [q for q in qs if q.label == "pos"]
    memo: dict[tuple[int, tuple[float, ...]], float] = {}
    gi, ti = list(GRID).index("g"), list(GRID).index("t")
    si, pi, ei = list(GRID).index("S"), list(GRID).index("P"), list(GRID).index("e")
    fi = list(GRID).index("f")
    ui = list(GRID).index("u")
    ri_ = list(GRID).index("r")
    mi = list(GRID).index("m")
    assert si < pi < fi
    for combo in itertools.product(*GRID.values()):
        hits = []
        for i, q in enumerate(pos):
            eff = combo if q.neigh else combo[:gi] + (0.0,) + combo[gi + 1:]  # g moves only conversation turns
            if q.intime is None:  # t moves only questions that name a time
                eff = eff[:ti] + (0.0,) + eff[ti + 1:]
            if q.intime is None or not (q.intime >= 3).any():  # e moves only memories of the time by the grace
                eff = eff[:ei] + (0.0,) + eff[ei + 1:]
            if not q.proc.any():  # S, P and f move only questions with a runbook among the candidates
                eff = eff[:si] + (0.0,) + eff[si + 1:pi] + (0.0,) + eff[pi + 1:fi] + (0.0,) + eff[fi + 1:]
            if not q.general.any():  # u moves only questions with a fact among the closest candidates
                eff = eff[:ui] + (0.0,) + eff[ui + 1:]
            if not len(q.rcos):  # r moves only questions with a subject
                eff = eff[:ri_] + (0.0,) + eff[ri_ + 1:]
            if not q.hub.any():  # m moves only questions with a fact among the candidates
                eff = eff[:mi] + (0.0,) + eff[mi + 1:]
            key = (i, eff)
            if key not in memo:
                memo[key] = 1.0 if q.relevant.intersection(rank(q, *combo)[:TARGET_K[q.set.split("@")[0]]]) else 0.0
            hits.append(memo[key])
        out[combo] = np.array(hits)
        print("  ranking", dict(zip(GRID, combo)), file=sys.stderr, flush=True)
    return out


def choose_ranking(pos: list[Q], table: dict[tuple[float, ...], np.ndarray], train: np.ndarray) -> tuple[float, ...]:
    sets = sorted({q.set for q in pos})
    set_of = np.array([q.set for q in pos])
    masks = [(set_of == s) & train for s in sets]

    def value(combo: tuple[float, ...]) -> float:
        hits = table[combo]
        return float(np.mean([hits[m].mean() for m in masks if m.any()]))

    default = tuple(SHIPPED[k] for k in GRID)
    # ties go to the shipped combination, then to the first in grid order
    return max(table, key=lambda combo: (round(value(combo), 6), combo == default))


def abstain_matrix(qs: list[Q]) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    combos = list(itertools.product(*ABSTAIN_GRID.values()))
    m = np.array([[abstains(q, *combo) for q in qs] for combo in combos], dtype=bool)
    return combos, m


def choose_abstention(qs: list[Q], combos: list[tuple[Any, ...]], m: np.ndarray, train: np.ndarray,
                      max_false: float) -> tuple[Any, ...]:
    label = np.array([q.label for q in qs])
    set_of = np.array([q.set for q in qs])
    answerable = np.isin(label, ("pos", "halfpos"))
    neg = (label == "neg") & np.char.startswith(set_of.astype(str), "locomo") & train
    worst = np.zeros(len(combos))
    for s in sorted(set(set_of)):
        mask = answerable & (set_of == s) & train
        if mask.any():
            worst = np.maximum(worst, m[:, mask].mean(axis=1))
    refused = m[:, neg].mean(axis=1) if neg.any() else np.zeros(len(combos))
    ok = worst <= max_false
    if not ok.any():
        ok = worst <= worst.min()
    best = max((i for i in range(len(combos)) if ok[i]), key=lambda i: (round(float(refused[i]), 6), -worst[i]))
    return combos[best]


# ------------------------------------------------------------------------------------------------ scoring
def score(qs: list[Q], choice: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per set: R@1/5/10 (abstention counted as a miss), false "nothing found", refusals of unanswerable ones,
    evidence within the budgets."""
    out: dict[str, dict[str, Any]] = {}
    for q in qs:
        o = out.setdefault(q.set, {"n": 0, "R@1": 0, "R@3": 0, "R@5": 0, "R@10": 0, "frac@10": 0.0, "false_nothing": 0,
                                   "neg": 0, "neg_refused": 0, "half": 0, "half_false": 0, "budget_chars": 0.0,
                                   "budget_tokens": 0.0, "R@10_no_abstain": 0})
        no = abstains(q, choice["min_evidence"], choice["min_coverage"], choice["penalty"], choice["rule"])
        if q.label == "neg":
            o["neg"] += 1
            o["neg_refused"] += no
            continue
        if q.label == "halfpos":
            o["half"] += 1
            o["half_false"] += no
            continue
        ranked = [] if no else rank(q, *(choice[k] for k in GRID))
        o["n"] += 1
        o["false_nothing"] += no
        for k in (1, 3, 5, 10):
            o[f"R@{k}"] += bool(q.relevant.intersection(ranked[:k]))
        o["frac@10"] += len(q.relevant.intersection(ranked[:10])) / len(q.relevant)
        bc, bt = within_budget(q, ranked)
        o["budget_chars"] += bc
        o["budget_tokens"] += bt
    result = {}
    for s, o in out.items():
        n = max(o["n"], 1)
        r = {k: round(o[k] / n, 4) for k in ("R@1", "R@3", "R@5", "R@10", "frac@10", "false_nothing", "budget_chars",
                                             "budget_tokens")}
        r["queries"] = o["n"]
        if o["neg"]:
            r["neg_refused"] = round(o["neg_refused"] / o["neg"], 4)
            r["negatives"] = o["neg"]
        if o["half"]:
            r["half_false_nothing"] = round(o["half_false"] / o["half"], 4)
        result[s] = r
    return result


def run(names: list[str], k: int, max_false: float) -> dict[str, Any]:
    qs: list[Q] = []
    for name in names:
        qs += prepare(name, rs.load(name), k)
        print("prepared", name, len(qs), file=sys.stderr, flush=True)
    pos = [q for q in qs if q.label == "pos"]
    import hashlib
    import pickle

    widths = ([f"n{N}"] if N != 100 else []) + ([f"nv{NV}"] if NV != N else [])
    variant = ((["spare"] if SPARE_EPISODES else []) + widths + ([] if STEPS_OF_CANDIDATES else ["window-steps"])
               + ([] if STEPS else ["no-steps"]) + [f"grace{GRACE_DAYS}", "text-times" if TEXT_TIMES else "created-only"])
    # the code that ranks is part of the key: a table computed by an earlier rank() must not be read as this one's
    code = [hashlib.sha256(Path(m.__file__).read_bytes()).hexdigest()
            for m in (sys.modules[__name__], rs, timeq, sys.modules[rescore.__module__])]
    # and what it ranks: a dump made again (by newer code), or the rest vectors of another subject rule
    made = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for n in names
            for p in (rs.LAB / f"{n}.pkl", rs.LAB / f"{n}.rem.pkl") if p.exists() and (any(GRID["r"]) or
                                                                               p.name == f"{n}.pkl")]
    tag = hashlib.sha256(json.dumps([names, GRID, k, [(q.set, q.qid) for q in pos]] + variant + code + made).encode()
                         ).hexdigest()[:16]
    cached = rs.LAB / f"folds-table-{tag}.pkl"
    if cached.exists():
        table = pickle.loads(cached.read_bytes())
    else:
        table = ranking_table(qs)
        cached.write_bytes(pickle.dumps(table))
    combos, m = abstain_matrix(qs)
    pos_fold = np.array([q.fold for q in pos])
    all_fold = np.array([q.fold for q in qs])
    chosen_per_fold = {}
    oof: list[tuple[Q, dict[str, Any]]] = []
    for f in range(k):
        r = choose_ranking(pos, table, pos_fold != f)
        a = choose_abstention(qs, combos, m, all_fold != f, max_false)
        choice = dict(zip(GRID, r)) | dict(zip(ABSTAIN_GRID, a))
        chosen_per_fold[f] = choice
        oof += [(q, choice) for q in qs if q.fold == f]
    r = choose_ranking(pos, table, np.ones(len(pos), dtype=bool))
    a = choose_abstention(qs, combos, m, np.ones(len(qs), dtype=bool), max_false)
    in_choice = dict(zip(GRID, r)) | dict(zip(ABSTAIN_GRID, a))
    # out-of-fold: each fold scored with its own choice
    by_choice: dict[str, list[Q]] = {}
    for q, choice in oof:
        by_choice.setdefault(json.dumps(choice, sort_keys=True), []).append(q)
    parts = [score(group, json.loads(key)) for key, group in by_choice.items()]
    oof_scores = _pool(parts, qs)
    # the named_words question: the same folds with each rule forced
    rules = {}
    for rule in ABSTAIN_GRID["rule"]:
        sub = [i for i, c in enumerate(combos) if c[3] == rule]
        pieces = []
        for f in range(k):
            a = choose_abstention(qs, [combos[i] for i in sub], m[sub], all_fold != f, max_false)
            choice = chosen_per_fold[f] | dict(zip(ABSTAIN_GRID, a))
            pieces.append(score([q for q in qs if q.fold == f], choice))
        rules[rule] = _pool(pieces, qs)
    return {"folds": k, "max_false": max_false, "chosen_per_fold": chosen_per_fold, "in_sample_choice": in_choice,
            "out_of_fold": oof_scores, "in_sample": score(qs, in_choice), "shipped": score(qs, SHIPPED),
            "rules_out_of_fold": rules}


def _pool(parts: list[dict[str, dict[str, float]]], qs: list[Q]) -> dict[str, dict[str, float]]:
    """Query-weighted mean of per-part scores."""
    out: dict[str, dict[str, float]] = {}
    for s in sorted({q.set for q in qs}):
        rows = [p[s] for p in parts if s in p]
        n = sum(r["queries"] for r in rows)
        nn = sum(r.get("negatives", 0) for r in rows)
        merged = {key: round(sum(r[key] * r["queries"] for r in rows) / max(n, 1), 4)
                  for key in ("R@1", "R@3", "R@5", "R@10", "frac@10", "false_nothing", "budget_chars",
                              "budget_tokens")}
        merged["queries"] = n
        if nn:
            merged["neg_refused"] = round(sum(r.get("neg_refused", 0) * r.get("negatives", 0) for r in rows) / nn, 4)
            merged["negatives"] = nn
        out[s] = merged
    return out


def report(res: dict[str, Any]) -> str:
    lines = [f"## Out of fold ({res['folds']} folds by group) beside in-sample and the shipped settings", "",
             "| set | target | **out of fold** | in-sample (chosen on all) | shipped defaults | false nothing oof / in / "
             "shipped | unanswerable refused oof / in / shipped | gold in 10k chars / 2.5k tokens (oof) |",
             "|---|---|---|---|---|---|---|---|"]
    for s in res["out_of_fold"]:
        k = TARGET_K[s.split("@")[0]]
        o, i, d = res["out_of_fold"][s], res["in_sample"][s], res["shipped"][s]
        neg = (f"{o.get('neg_refused', 0):.3f} / {i.get('neg_refused', 0):.3f} / {d.get('neg_refused', 0):.3f}"
               if "neg_refused" in o else "—")
        lines.append(f"| {s} | R@{k} | **{o[f'R@{k}']:.3f}** | {i[f'R@{k}']:.3f} | {d[f'R@{k}']:.3f} | "
                     f"{o['false_nothing']:.3f} / {i['false_nothing']:.3f} / {d['false_nothing']:.3f} | {neg} | "
                     f"{o['budget_chars']:.3f} / {o['budget_tokens']:.3f} |")
    lines += ["", "Chosen per fold: " + "; ".join(f"{f}: {json.dumps(c)}" for f, c in res["chosen_per_fold"].items()),
              "", "In-sample choice: " + json.dumps(res["in_sample_choice"]), "",
              "## The rule that earns the abstention penalty, out of fold", "",
              "| rule | " + " | ".join(res["out_of_fold"]) + " |", "|---|" + "---|" * len(res["out_of_fold"])]
    for rule, sc in res["rules_out_of_fold"].items():
        cells = [f"false {v['false_nothing']:.3f}" + (f", refused {v['neg_refused']:.3f}" if "neg_refused" in v else "")
                 for v in sc.values()]
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    global SPARE_EPISODES, STEPS_OF_CANDIDATES, STEPS, N, NV, GRACE_DAYS, TEXT_TIMES
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--max-false", type=float, default=0.02,
                    help="the share of answerable questions the abstention may refuse on each training set")
    ap.add_argument("--grid", default="", help="override the ranking grid: 'h=0,0.75;c=0' (the others as GRID)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--candidates", type=int, default=N, help="rows the keyword searches hand to the ranking ([recall] "
                                                               "candidates; the dumps hold 100 a search)")
    ap.add_argument("--vector-candidates", type=int, default=NV, help="rows the vector search hands to the ranking "
                                                                       "([recall] vector_candidates)")
    ap.add_argument("--spare-episodes", action="store_true",
                    help="keyword_coverage damps the keyword side of facts and runbooks only (an experiment)")
    ap.add_argument("--no-candidate-steps", action="store_true",
                    help="a runbook's steps count only when they are vector candidates themselves (an experiment)")
    ap.add_argument("--no-steps", action="store_true",
                    help="runbooks ranked without their step vectors (the relevance scale stays the one measured "
                         "with them: for abstention, dump with the code before the steps)")
    ap.add_argument("--grace-days", type=int, default=GRACE_DAYS,
                    help="a memory written this many days after a time is still of it (timeq.GRACE)")
    ap.add_argument("--no-text-times", action="store_true",
                    help="a memory is of a time only by when it was written, not by a time its text names")
    args = ap.parse_args(argv)
    GRACE_DAYS, TEXT_TIMES = args.grace_days, not args.no_text_times
    STEPS = not args.no_steps
    SPARE_EPISODES = args.spare_episodes
    STEPS_OF_CANDIDATES = not args.no_candidate_steps
    if not 1 <= args.candidates <= 100:
        sys.exit(f"eval_folds: --candidates: {args.candidates} is not from 1 to 100 (the dumps hold 100)")
    N = args.candidates
    if not 1 <= args.vector_candidates <= 4096:
        sys.exit(f"eval_folds: --vector-candidates: {args.vector_candidates} is not from 1 to 4096")
    NV = args.vector_candidates
    for part in filter(None, args.grid.split(";")):
        key, values = part.split("=")
        if key not in GRID:
            sys.exit(f"eval_folds: --grid: {key!r} is not one of {', '.join(GRID)}")
        GRID[key] = tuple(float(x) for x in values.split(","))
    if any(GRID["r"]):
        import pickle
        for n in args.sets.split(","):
            REMAINDERS.update(pickle.load(open(rs.LAB / f"{n}.rem.pkl", "rb")))
    names = [n for n in args.sets.split(",") if (rs.LAB / f"{n}.pkl").exists() or sys.exit(
        f"eval_folds: no dump for {n} in {rs.LAB}: run bench/rank_lab.py dump --sets {n}")]
    res = run(names, args.folds, args.max_false)
    print(report(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
