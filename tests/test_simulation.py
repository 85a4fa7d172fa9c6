"""The weights of recall are chosen offline (bench/eval_folds.py simulates recall's ranking on dumps of what it sees,
docs/benchmarks.md): the simulation must rank as recall does, or the figures published are of another ranker. Here
its handling of a time the question names is checked against recall's own ``windows.by_time`` on random candidates."""
from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from conftest import REPO_ROOT
from memvault.core.candidates import Candidate
from memvault.core.hits import count_tokens, token_units
from memvault.core.windows import by_time as _by_time
from memvault.rules import timeq
from memvault.rules.freshness import stored_time

sys.path.insert(0, str(REPO_ROOT / "bench"))
import eval_folds as ef  # noqa: E402

BODIES = ["backup failed", "Retro: on 3 March 2025 the backup failed", "on 2 March 2025 the disk filled"]


@pytest.mark.parametrize("e", [0.0, 0.5, 0.75, 1.0])
def test_the_simulation_ranks_a_time_question_as_recall_does(e):
    window = timeq.parse("why did the backup fail on 3 March 2025", datetime(2025, 9, 1, tzinfo=timezone.utc))
    start, t = datetime(2025, 2, 1, tzinfo=timezone.utc), 2.0
    for trial in range(150):
        rnd = random.Random(trial)
        n = rnd.randint(1, 60)
        rows = []
        for i in range(n):
            created = (start + timedelta(hours=rnd.randint(0, 24 * 120))).strftime("%Y-%m-%dT%H:%M:%SZ")
            source = rnd.choice(["user:ops", "agent:scraper"])
            relevance = rnd.choice([round(rnd.random(), 2), 0.5])  # ties too
            rows.append((f"{i:03d}", created, rnd.choice(BODIES), source, relevance))
        found = [Candidate(("episode", key), {"created": c, "body": b, "source": s}, relevance=r)
                 for key, c, b, s, r in rows]
        rnd.shuffle(found)  # recall's candidates come in the order the searches found them
        _by_time(found, window, 1 + t, ef.TEXT_READS, (1 + t) ** e,
                 lambda c: ef.TRUST.is_trusted(c.doc["source"]))
        recall = [f"episode:{c.key[1]}" for c in sorted(found, key=lambda c: (-c.relevance, c.key))][:10]
        marks = [ef.time_mark(window, stored_time(c), b) for _key, c, b, _s, _r in rows]  # eval_folds.prepare's
        zero = np.zeros(n)
        q = ef.Q("set", "q", 0, "pos", set(), np.arange(n), np.array([r[-1] for r in rows]), zero, zero,
                 np.zeros(n, dtype=bool), zero, [f"episode:{r[0]}" for r in rows], {}, 0.0, 0.0, 1.0, False, False,
                 False, {}, True, np.array(marks), np.zeros(n, dtype=bool),
                 np.array([ef.TRUST.is_trusted(r[3]) for r in rows]))
        # s = 0 and no keyword side: the simulation's relevance is the given one, as recall's candidates' is
        assert ef.rank(q, 0.0, 0.0, 0.0, 0.0, 0.0, t, None, None, e, floor=0.0) == recall, trial


class _Config:
    def __init__(self, **recall):
        from dataclasses import replace

        from memvault.rules.config import Config

        self.recall = replace(Config().recall, **recall)


def _random_recall(rnd: random.Random):
    """What both searches found for one question: facts, turns (with their neighbours) and runbooks (windows and
    steps, the steps found by meaning only), scores rounded so that ties happen."""
    docs: dict[int, dict] = {}
    rowid = 0
    for kind in ("fact", "episode", "procedure"):
        for i in range(rnd.randint(0, 8)):
            chunks = [0] if kind != "procedure" else list(range(rnd.randint(1, 3))) + [-1 - j for j in
                                                                                      range(rnd.randint(0, 3))]
            for chunk in chunks:
                rowid += 1
                docs[rowid] = {"kind": kind, "id": f"{kind[0]}{i}", "chunk": chunk, "path": f"{kind}/{i}"}
    rows = list(docs)

    def some(words_only: bool) -> dict[int, float]:
        pool = [r for r in rows if not (words_only and docs[r]["chunk"] < 0)]
        return {r: round(rnd.uniform(0.1, 9.0), 1) for r in rnd.sample(pool, rnd.randint(0, len(pool)))}

    keyword, phrases = some(True), some(True)
    cosine = {r: round(rnd.uniform(-0.1, 0.8), 2) for r in rnd.sample(rows, rnd.randint(0, len(rows)))}
    exact = set(rnd.sample(sorted(keyword), min(len(keyword), rnd.choice([0, 0, 1, 2]))))
    turns = [r for r in rows if docs[r]["kind"] == "episode"]
    neighbours = {r: [x for x in (turns[i - 1] if i else None, turns[i + 1] if i + 1 < len(turns) else None) if x]
                  for i, r in enumerate(turns)} if rnd.random() < 0.7 else {}
    neighbours = {r: ns for r, ns in neighbours.items() if ns}
    return docs, keyword, phrases, exact, cosine, neighbours


def _config(w):
    """The [recall] settings of the weights ``w`` (eval_folds' names)."""
    return _Config(semantic_weight=w["s"], phrase_weight=w["p"], neighbour_weight=w["g"],
                   procedure_semantic_weight=w["S"], procedure_phrase_weight=w["P"], exact_boost=ef.EXACT_BOOST)


def _recall_order(found):
    """Each memory's relevance, and the order recall._rank returns them in: above the relative floor, best first,
    ties by key, top 10."""
    relevance = {f"{k[0]}:{k[1]}": c.relevance for k, c in found.items()}
    best = max(relevance.values())
    return relevance, sorted((d for d, r in relevance.items() if r >= ef.RELATIVE_FLOOR * best),
                             key=lambda d: (-relevance[d], d))[:10]


def _in_key_order(docs):
    """The rows as eval_folds.prepare orders them: by doc key, then rowid."""
    return sorted(docs, key=lambda r: (f"{docs[r]['kind']}:{docs[r]['id']}", r))


def _simulated_question(docs, keyword, phrases, exact, cosine_of, neighbours, top_cov, **feedback):
    """eval_folds.prepare's arrays for these candidates: rows in doc-key order, scores over the best, each row's
    cosine ``cosine_of(rowid)`` (a runbook's best step lent)."""
    rows = _in_key_order(docs)
    pos = {r: i for i, r in enumerate(rows)}
    keys = [f"{docs[r]['kind']}:{docs[r]['id']}" for r in rows]
    best_kw, best_ph = max(keyword.values(), default=0.0) or 1.0, max(phrases.values(), default=0.0) or 1.0
    n = len(rows)
    return ef.Q("set", "q", 0, "pos", set(), np.array(rows), np.array([keyword.get(r, 0.0) / best_kw for r in rows]),
                np.array([phrases.get(r, 0.0) / best_ph for r in rows]), np.array([cosine_of(r) for r in rows]),
                np.array([r in exact for r in rows]), np.zeros(n), keys,
                {pos[r]: [pos[x] for x in ns] for r, ns in neighbours.items()}, 0.0, 0.0, top_cov, bool(exact),
                False, False, {}, len(set(keys)) == n, None,
                np.array([docs[r]["kind"] == "procedure" for r in rows]), np.ones(n, dtype=bool), **feedback)


def _same_order(simulated, recall, relevance, tolerance, trial):
    """The same memories in the same order, but for ties up to rounding."""
    assert len(simulated) == len(recall), (trial, simulated, recall)
    for mine, theirs in zip(simulated, recall):
        assert mine == theirs or abs(relevance[mine] - relevance[theirs]) < tolerance, (trial, simulated, recall)


@pytest.mark.parametrize("mode", ["shipped", "grid"])
def test_the_simulation_combines_both_searches_as_recall_does(mode):
    """candidates._combine (each memory's relevance from its chunks' keyword, phrase and cosine scores, a runbook's
    steps lending their best cosine, turns smoothed with their neighbours, exact quotes first, the relative floor)
    against the simulation's rank on random candidates, with the weights shipped and with others of the folds'
    grid."""
    from memvault.core.candidates import Parts, _combine, _shares
    from memvault.core.rescore import keyword_trust

    for trial in range(300):
        rnd = random.Random(trial)
        w = dict(ef.SHIPPED) if mode == "shipped" else {x: rnd.choice(v) for x, v in ef.GRID.items()}
        docs, keyword, phrases, exact, cosine, neighbours = _random_recall(rnd)
        if not docs:
            continue
        config = _config(w)
        parts = Parts(None, None, None, None, config, None)  # type: ignore[arg-type]
        top_cov = round(rnd.random(), 2)
        steps: dict[tuple[str, str], float] = {}
        for r, d in docs.items():
            if d["chunk"] < 0 and cosine.get(r, 0.0) > steps.get((d["kind"], d["id"]), 0.0):
                steps[(d["kind"], d["id"])] = cosine[r]
        found = _combine(parts, docs, keyword, phrases, exact, {r: c for r, c in cosine.items()}, neighbours,
                         _shares(config.recall, "hybrid"), keyword_trust(top_cov, w["h"]), steps)
        relevance, recall = _recall_order(found)
        q = _simulated_question(
            docs, keyword, phrases, exact,
            lambda r: max(cosine.get(r, 0.0), steps.get((docs[r]["kind"], docs[r]["id"]), 0.0)), neighbours, top_cov)
        simulated = ef.rank(q, w["s"], w["p"], w["g"], 0.0, w["h"], 0.0, w["S"], w["P"], 0.0)
        _same_order(simulated, recall, relevance, 1e-9, trial)


class _Vectors:
    """The index reads the runbooks' feedback and the facts' generality make, over a matrix of unit rows (as the
    index stores them)."""

    def __init__(self, matrix, docs):
        self.matrix, self.docs = matrix, docs

    def doc_vectors(self, rowid):
        key = (self.docs[rowid]["kind"], self.docs[rowid]["id"])
        return [self.matrix[r] for r, d in self.docs.items() if (d["kind"], d["id"]) == key]

    def docs_vectors(self, rowids):
        return {r: self.doc_vectors(r) for r in rowids}

    def similarities(self, vector, rowids):
        return {r: float(self.matrix[r] @ vector) for r in rowids}


@dataclass
class _VectorRecall:
    """One random recall with a unit vector for every chunk and for the query (the feedback and generality parity
    tests): what gather hands _combine, and the index reads over those vectors."""

    w: dict
    docs: dict
    keyword: dict
    phrases: dict
    exact: set
    neighbours: dict
    matrix: dict
    qvec: np.ndarray
    cosine: dict  # every chunk's cosine with the query (a step is found by meaning only)
    best_step: dict  # each runbook's best step cosine, and that step's row, as gather reads them
    step_row: dict
    config: _Config
    index: _Vectors
    parts: object

    def question(self, **fields):
        """eval_folds.prepare's arrays for it, a runbook's best step lending its cosine."""
        docs = self.docs
        return _simulated_question(
            docs, self.keyword, self.phrases, self.exact,
            lambda r: max(self.cosine[r], self.best_step.get((docs[r]["kind"], docs[r]["id"]), 0.0)),
            self.neighbours, 0.5, **fields)


def _vector_recall(seed, long_fact=False):
    """The random recall of ``seed`` with its vectors (None: no candidate); ``long_fact``: half the time a fact
    gets a second chunk."""
    from memvault.core.candidates import Parts

    rnd = random.Random(seed)
    gen = np.random.default_rng(seed)
    w = dict(ef.SHIPPED)
    docs, keyword, phrases, exact, _cos, neighbours = _random_recall(rnd)
    facts = [r for r, d in docs.items() if d["kind"] == "fact"]
    if long_fact and facts and rnd.random() < 0.5:
        docs[max(docs) + 1] = dict(docs[facts[0]], chunk=1)
    if not docs:
        return None
    matrix = {r: v / np.linalg.norm(v) for r, v in ((r, gen.normal(size=8).astype(np.float32)) for r in docs)}
    qvec = gen.normal(size=8).astype(np.float32)
    qvec /= np.linalg.norm(qvec)
    cosine = {r: float(matrix[r] @ qvec) for r in docs}
    best_step: dict[tuple[str, str], float] = {}
    step_row: dict[tuple[str, str], int] = {}
    for r, d in docs.items():
        key = (d["kind"], d["id"])
        if d["chunk"] < 0 and cosine[r] > best_step.get(key, 0.0):
            best_step[key], step_row[key] = cosine[r], r
    config = _config(w)
    index = _Vectors(matrix, docs)
    return _VectorRecall(w, docs, keyword, phrases, exact, neighbours, matrix, qvec, cosine, best_step, step_row,
                         config, index, Parts(index, None, None, None, config, None))  # type: ignore[arg-type]


@pytest.mark.parametrize("weight", [0.5, 1.0])
def test_the_simulation_moves_the_query_toward_the_runbooks_as_recall_does(weight):
    """candidates._runbook_feedback (the query's vector moved toward the three most relevant runbooks, each
    runbook's closest chunk or step read again, scaled to keep the best runbook cosine) then _combine, against the
    simulation's rank with f, on random candidates with random vectors: facts keep their cosines."""
    from memvault.core.candidates import _combine, _runbook_feedback, _shares
    from memvault.core.rescore import keyword_trust

    moved_any = 0
    for trial in range(200):
        case = _vector_recall(trial)
        if case is None:
            continue
        w, docs, cosine, index = case.w, case.docs, case.cosine, case.index
        shares = _shares(case.config.recall, "hybrid")
        trust = keyword_trust(0.5, w["h"])
        found = _combine(case.parts, docs, case.keyword, case.phrases, case.exact, cosine, case.neighbours, shares,
                         trust, case.best_step)
        moved = _runbook_feedback(index, case.qvec, found, docs, cosine, case.best_step, case.step_row, weight)
        if moved is not None:
            moved_any += 1
            found = _combine(case.parts, docs, case.keyword, case.phrases, case.exact, moved[0], case.neighbours,
                             shares, trust, moved[1])
            assert max(moved[0][r] for r in docs if docs[r]["kind"] == "procedure") == pytest.approx(
                max(max(cosine[r] for r in docs if docs[r]["kind"] == "procedure"), 0.0), abs=1e-6)
        relevance, recall = _recall_order(found)
        procs = any(d["kind"] == "procedure" for d in docs.values())
        rows = _in_key_order(docs)
        q = case.question(
            qvec=case.qvec if procs else None, vecs=np.array([case.matrix[r] for r in rows]) if procs else None,
            chunks={f"procedure:{d['id']}": np.array(index.doc_vectors(r))
                    for r, d in docs.items() if d["kind"] == "procedure"},
            steps=np.array([docs[r]["chunk"] < 0 for r in rows]))
        simulated = ef.rank(q, w["s"], w["p"], w["g"], 0.0, w["h"], 0.0, w["S"], w["P"], 0.0, weight)
        _same_order(simulated, recall, relevance, 1e-6, trial)
    assert moved_any > 50


@pytest.mark.parametrize("weight", [0.1, 0.3])
def test_the_simulation_reads_how_general_a_fact_is_as_recall_does(weight):
    """candidates.generality (the facts among the closest candidates read against each other, each fact's
    closeness to its nearest above their mean taken off its cosine) then _combine, against the simulation's
    generality_of and rank with u, on random candidates with random vectors (a fact of two chunks among them)."""
    from memvault.core.candidates import _combine, _shares, generality
    from memvault.core.rescore import keyword_trust

    general_any = 0
    for trial in range(200):
        case = _vector_recall(1000 + trial, long_fact=True)
        if case is None:
            continue
        w, docs, cosine = case.w, case.docs, case.cosine
        lost = generality(case.index, docs, cosine, weight)
        general_any += bool(lost)
        found = _combine(case.parts, docs, case.keyword, case.phrases, case.exact, cosine, case.neighbours,
                         _shares(case.config.recall, "hybrid"), keyword_trust(0.5, w["h"]), case.best_step, lost)
        relevance, recall = _recall_order(found)
        rows = _in_key_order(docs)
        keys = [f"{docs[r]['kind']}:{docs[r]['id']}" for r in rows]
        q = case.question(
            general=ef.generality_of(np.array([cosine[r] for r in rows]), [docs[r]["kind"] for r in rows], keys,
                                     lambda key: np.mean([case.matrix[r] for r, k in zip(rows, keys) if k == key],
                                                         axis=0)))
        assert {r: weight * q.general[i] for i, r in enumerate(rows) if r in lost} == pytest.approx(lost, abs=1e-6)
        simulated = ef.rank(q, w["s"], w["p"], w["g"], 0.0, w["h"], 0.0, w["S"], w["P"], 0.0, 0.0, weight)
        _same_order(simulated, recall, relevance, 1e-6, trial)
    assert general_any > 50


@pytest.mark.parametrize("weight,generality", [(0.3, 0.0), (0.45, 0.0), (0.45, 0.3)])
def test_the_simulation_reads_the_rest_of_the_question_as_recall_does(weight, generality):
    """_combine with ``[recall] rest_weight`` (a fact's or a turn's cosine in part its cosine with the question less
    its subject; a runbook's untouched), and with the generality taken off after, against the simulation's rank with
    r (and u), on random candidates with random vectors for the question and its rest."""
    from dataclasses import replace

    from memvault.core.candidates import _combine, _shares, generality as general_of
    from memvault.core.rescore import keyword_trust

    moved_any = 0
    for trial in range(200):
        case = _vector_recall(2000 + trial, long_fact=True)
        if case is None:
            continue
        w, docs, cosine = case.w, case.docs, case.cosine
        gen = np.random.default_rng(trial)
        rest_q = gen.normal(size=8).astype(np.float32)
        rest_q /= np.linalg.norm(rest_q)
        rest = {r: float(case.matrix[r] @ rest_q) for r, d in docs.items() if d["kind"] != "procedure"}
        config = _Config(**{k: getattr(case.config.recall, k) for k in (
            "semantic_weight", "phrase_weight", "neighbour_weight", "procedure_semantic_weight",
            "procedure_phrase_weight", "exact_boost")}, rest_weight=weight)
        parts = replace(case.parts, config=config)  # type: ignore[type-var]
        lost = general_of(case.index, docs, cosine, generality) if generality else {}
        shares, trust = _shares(config.recall, "hybrid"), keyword_trust(0.5, w["h"])
        found = _combine(parts, docs, case.keyword, case.phrases, case.exact, cosine, case.neighbours, shares, trust,
                         case.best_step, lost, rest)
        plain = _combine(parts, docs, case.keyword, case.phrases, case.exact, cosine, case.neighbours, shares, trust,
                         case.best_step, lost)
        moved_any += [k for k in sorted(found, key=lambda k: -found[k].relevance)] != [
            k for k in sorted(plain, key=lambda k: -plain[k].relevance)]
        for key, c in found.items():  # what --explain shows: the rest cosine of facts and turns only
            assert (c.rest is None) == (key[0] == "procedure"), key
        relevance, recall = _recall_order(found)
        rows = _in_key_order(docs)
        keys = [f"{docs[r]['kind']}:{docs[r]['id']}" for r in rows]
        fields = {"rcos": np.array([rest.get(r, 0.0) for r in rows])}
        if generality:
            fields["general"] = ef.generality_of(
                np.array([cosine[r] for r in rows]), [docs[r]["kind"] for r in rows], keys,
                lambda key: np.mean([case.matrix[r] for r, k in zip(rows, keys) if k == key], axis=0))
        simulated = ef.rank(case.question(**fields), w["s"], w["p"], w["g"], 0.0, w["h"], 0.0, w["S"], w["P"], 0.0,
                            0.0, generality, weight)
        _same_order(simulated, recall, relevance, 1e-6, trial)
    assert moved_any > 30


@pytest.mark.parametrize("text", ["word " * 1_990, "词" * 2_470, "词" * 2_490, "word 词 " * 620, "ü" * 2_481])
def test_the_simulation_counts_the_budget_in_tokens_as_recall_does(text):
    """Evidence within the budget (issue 27, item 4) is counted as recall counts its budget (count_tokens: a
    character beyond ASCII is a token of its own); a quarter token a character passed 2,490 CJK characters as 623."""
    empty = np.zeros(0)
    q = ef.Q(set="s", qid="q", fold=0, label="pos", relevant={"fact:a"}, rows=empty, kw=empty,
             ph=empty, cos=empty, exact=empty, cov=empty, doc=[], neigh={}, semantic=0.0, held=0.0, top_cov=0.0,
             any_exact=False, unknown_names=False, unknown_terms=False,
             lengths={"fact:a": (len(text), token_units(text))})
    header = "h" * ef.HEADER
    assert ef.within_budget(q, ["fact:a"]) == (float(len(text) + ef.HEADER <= ef.BUDGET_CHARS),
                                               float(count_tokens(header + text) <= ef.BUDGET_TOKENS))
