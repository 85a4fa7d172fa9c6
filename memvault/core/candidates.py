"""Recall's candidates: both searches over the index, each candidate with both scores.

A warm recall's two long steps are the query's embedding and the word searches. They run at once: the embedding and
then the vector scan in a worker thread (:class:`QueryVector`; the model, numpy and SQLite release the GIL), the
words in the caller's. Everything the words alone decide (their candidates' fields, their conversation neighbours,
the keyword trust) is read before the caller waits for the vectors; after that, only the rows the vectors added.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..models.base import query_job
from ..rules.freshness import stored_time
from ..rules.validation import MAX_FUTURE
from ..rules.workers import pool

if TYPE_CHECKING:
    from concurrent.futures import Future
    from datetime import datetime

    from ..index.protocol import VaultIndex
    from ..models.base import Embedder
    from ..models.engine import Engine
    from ..rules.config import Config
    from ..stores.facts import FactStore
    from ..stores.procedures import ProcedureStore
    from ..stores.state import State

#: Pseudo-relevance feedback: the best memories it reads, and the words it adds (see _feedback).
PRF_DOCS, PRF_TERMS = 3, 5
#: The runbooks the query's vector is moved toward (``[recall] procedure_feedback_weight``, see _runbook_feedback).
FEEDBACK_RUNBOOKS = 3
#: How general a fact is (``[recall] generality_weight``, see generality): read among the facts of this many
#: candidates closest in meaning, as its closeness to this many of the others.
GENERAL_ROWS, GENERAL_NEIGHBOURS = 20, 2
#: How long recall polls for the query's vector before it sleeps on it (seconds): a query embeds in 5-10 ms.
SPIN = 0.05
#: sqlite-vec answers at most this many neighbours per KNN query: no search asks for more.
MAX_CANDIDATES = 4096

Scan = Callable[[Any], list[tuple[int, float]]]


class Prepare(Protocol):
    """What recall reads ahead about the candidates while the query's vector is being computed."""

    def __call__(self, docs: dict[int, dict[str, Any]]) -> None:
        """Docs found (chunk rowid -> fields)."""
        ...

    def best_words(self, query: str, rowid: int) -> None:
        """The keyword search's best row."""
        ...


@dataclass
class Parts:
    """What recall reads: the index (either backend, or a team's: recall never asks which), the stores, the usage
    state, the settings and the model."""

    index: VaultIndex
    facts: FactStore
    procedures: ProcedureStore
    state: Callable[[], State]
    config: Config
    engine: Engine
    #: Whether the asker may read a vault-relative path (its ``[scopes]`` read paths); None: everything. What it may
    #: not read is dropped with the search's candidates, so it never takes a place nor shows in what it is told.
    readable: Callable[[str], bool] | None = None
    #: The query's vector, started by the caller before its own checks (Vault.recall): recall takes it when it
    #: embeds the same text with the same model, else starts its own.
    head_start: QueryVector | None = None


@dataclass(slots=True)
class Candidate:
    """One memory found by either search, with what its relevance is made of."""

    key: tuple[str, str]
    doc: dict[str, Any]
    relevance: float = 0.0
    cosine: float = 0.0       # raw cosine of its best chunk (0 when no vector)
    keyword: float = 0.0      # normalised BM25 part (terms and pairs)
    exact: bool = False
    rowid: int = 0            # its best chunk, in ``index``
    index: VaultIndex | None = None
    factors: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    stale: str | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    semantic: float = 0.0     # the cosine relevance used: its chunk's cosine (less ``general``) ÷ the recall's best
    timed: float = 1.0        # the share of its relevance a time the question names leaves it (1: of that time)
    moved: bool = False       # a runbook whose cosine was read through the best runbooks (procedure_feedback_weight)
    general: float = 0.0      # the cosine a fact lost for being general among those found (gained: below 0)
    rest: float | None = None  # its chunk's cosine with the rest of the question (``[recall] rest_weight``; None: unused)


# ------------------------------------------------------------------------------------------------ the query's vector
class QueryVector:
    """The query's vector, computed in a worker thread from the moment recall starts.

    :meth:`bind` gives it the vector search (bound to the vectors as they are once pending chunks are embedded). Who
    runs that search is decided when the vector is known: the worker thread when the caller is still busy with the
    words (a large vault, where they take longer than the model), else the caller itself, which is then idle, so the
    search neither waits for a thread to wake nor shares the CPU with the caller's own work. :meth:`vector` and
    :meth:`scanned` wait as needed and raise what the worker raised."""

    def __init__(self, embed: Callable[[str], Any], query: str, embedder: Any = None) -> None:
        self.query, self.embedder = query, embedder  # what it embeds, and with which model (None: not said)
        self._lock = threading.Lock()
        self._known = threading.Event()
        self._scan: Scan | None = None
        self._vector: Any = None
        self._error: BaseException | None = None
        self._waiting = False   # the caller waits for the vector: it runs the search itself
        self._claimed = False   # the worker took the search
        self._scanned: list[tuple[int, float]] | None = None
        self._later: Future[list[tuple[int, float]]] | None = None
        self._future = pool().submit(self._run, embed, query)

    @classmethod
    def started(cls, embedder: Embedder, query: str) -> QueryVector:
        """The vector of ``query`` by ``embedder``, started now: what the model must do in this thread is done here
        (:func:`memvault.models.base.query_job`), the rest in the worker."""
        job = query_job(embedder, query)
        return cls(lambda _query: job(), query, embedder)

    def _run(self, embed: Callable[[str], Any], query: str) -> None:
        try:
            vector = embed(query)
        except BaseException as exc:
            with self._lock:
                self._error = exc
                self._known.set()
            raise
        with self._lock:
            self._vector = vector
            scan = self._scan if self._scan is not None and not self._waiting else None
            self._claimed = scan is not None
            self._known.set()
        if scan is not None:
            self._scanned = scan(vector)

    def bind(self, scan: Scan | None) -> None:
        """The vector search to run once the vector is known (None: :meth:`scanned` gives None); at once in the
        worker when the vector already is (a small model or a slow caller): the caller goes on to the words."""
        with self._lock:
            self._scan = scan
            if scan is None or not self._known.is_set() or self._error is not None or self._waiting:
                return
            self._claimed = True
        self._later = pool().submit(scan, self._vector)

    @property
    def scanning(self) -> bool:
        """Whether a vector search was bound (:meth:`scanned` gives its result)."""
        return self._scan is not None

    def vector(self) -> Any:
        """The query's vector, as soon as it is known (the search may still be running in the worker)."""
        with self._lock:
            self._waiting = True
        if not self._known.is_set():
            # A few milliseconds at most: polled, not slept on (a sleeping virtual CPU takes up to a millisecond
            # to be woken), letting the worker have the interpreter at every turn.
            deadline = time.monotonic() + SPIN
            while not self._known.is_set() and time.monotonic() < deadline:
                time.sleep(0)
        self._known.wait()
        if self._error is not None:
            raise self._error
        return self._vector

    def scanned(self) -> list[tuple[int, float]] | None:
        """The bound vector search's (rowid, cosine), or None when none was bound."""
        vector = self.vector()
        if self._scan is None:
            return None
        if self._claimed:
            if self._later is not None:
                return self._later.result()
            self._future.result()
            return self._scanned
        return self._scan(vector)


def width(parts: Parts, k: int) -> int:
    """How many rows the keyword searches return for a recall of ``k``."""
    return min(max(parts.config.recall.candidates, k), MAX_CANDIDATES)


def vector_width(parts: Parts, k: int) -> int:
    """How many rows the vector search returns for a recall of ``k``."""
    return min(max(parts.config.recall.vector_candidates, k), MAX_CANDIDATES)


# ------------------------------------------------------------------------------------------------ candidates
def gather(parts: Parts, query: str, k: int, kinds: list[str], used_mode: str, qvec: QueryVector | Any,
           prepare: Prepare | None = None) -> dict[tuple[str, str], Candidate]:
    """Both searches over the index, each candidate with both scores: keyword scores divided by the best one's,
    cosines by the best cosine. ``qvec`` is the query's vector, or the :class:`QueryVector` computing it (None:
    no vectors). ``prepare`` reads ahead what the ranking will need of what the words found while the vectors are
    still being computed (then of what only the vectors found)."""
    settings = parts.config.recall
    n = width(parts, k)
    shares = _shares(settings, used_mode)
    index = parts.index
    if not index.exists():
        return {}
    vectors_here = qvec is not None and index.identity() is not None
    words = used_mode != "vector"
    keyword = dict(index.search_keywords(query, kinds, n)) if words else {}
    phrases = dict(index.search_phrases(query, kinds, n)) if words and any(shares[kind][1] for kind in kinds) else {}
    exact = set(index.search_exact(query, kinds, n)) if words and settings.exact_boost else set()
    # What the words found is read while the vectors are still being computed.
    fetched: set[int] = set()
    docs: dict[int, dict[str, Any]] = {}

    def read(rows: set[int] | list[int]) -> dict[int, dict[str, Any]]:
        """The fields of ``rows`` not read yet that the asker may read, added to ``docs`` and read ahead."""
        rows = sorted(set(rows) - fetched)
        fetched.update(rows)
        more = _readable(parts, index.chunk_docs(rows)) if rows else {}
        docs.update(more)
        if prepare is not None and more:
            prepare(more)
        return more

    best_words = max(keyword, key=keyword.__getitem__) if keyword else None
    if prepare is not None and best_words is not None:
        prepare.best_words(query, best_words)
    read(set(keyword) | set(phrases) | exact)
    # The rest of the question (its subject, the words most of the best keyword matches hold, taken out) is embedded
    # beside the rest of the work, once the words are known.
    rest_vector = _rest_vector(parts, query, keyword, docs, qvec) if settings.rest_weight and vectors_here else None
    neighbours: dict[int, list[int]] = {}
    if settings.neighbour_weight:
        # A turn of a conversation is understood with the turns around it: they join the candidates, and a
        # turn's relevance is smoothed with its best neighbour's (turns R@10 .746 -> .804 with context vectors).
        neighbours = index.episode_neighbours(docs)
    trust = 1.0
    if settings.keyword_coverage and best_words is not None:
        from .rescore import keyword_trust

        trust = keyword_trust(index.coverage(query, best_words), settings.keyword_coverage)
    cosine: dict[int, float] = {}
    vector = None
    if vectors_here:
        vector = qvec.vector() if isinstance(qvec, QueryVector) else qvec
        # The scan bound to the query's vector (a warm process), else the vector search here.
        cosine = dict((qvec.scanned() or []) if isinstance(qvec, QueryVector) and qvec.scanning
                      else index.search_vectors(vector, kinds, vector_width(parts, k)))
        # Every keyword-side candidate (words, phrases, exact quotes) gets its exact cosine too: a warm process reads
        # it from the scan, which scored every row (Index.similarities).
        missing = fetched - cosine.keys()
        if missing:
            cosine.update(index.similarities(vector, sorted(missing)))
        more = read(cosine)
        if more and settings.neighbour_weight:
            neighbours.update(index.episode_neighbours(more))
    if neighbours:
        extra = sorted({r for ns in neighbours.values() for r in ns} - fetched)
        read(extra)
        if extra and vector is not None:
            cosine.update(index.similarities(vector, extra))
    best_step: dict[tuple[str, str], float] = {}  # runbook key -> the best cosine of its steps
    steps: dict[int, tuple[str, str]] = {}
    step_row: dict[tuple[str, str], int] = {}  # runbook key -> its best step's rowid
    if vector is not None:
        # A runbook is as close in meaning as its closest step, whichever of its chunks made it a candidate: the
        # cosine of every step of every runbook found (the words never find a step: it is a vector only). Only the
        # cosine: a step read as a candidate would read its runbook's whole body once more.
        steps = index.runbook_steps(docs)
        if steps:
            missing = sorted(steps.keys() - cosine.keys())
            found = index.similarities(vector, missing) if missing else {}
            for rowid, key in steps.items():
                cos = cosine.get(rowid, found.get(rowid, 0.0))
                if cos > best_step.get(key, 0.0):
                    best_step[key] = cos
                    step_row[key] = rowid
    general = generality(index, docs, cosine, settings.generality_weight) if settings.generality_weight else {}
    rest: dict[int, float] | None = None
    if rest_vector is not None:
        rows = sorted(r for r, doc in docs.items() if doc["kind"] != "procedure")
        rest = index.similarities(rest_vector.vector(), rows) if rows else {}
    out = _combine(parts, docs, keyword, phrases, exact, cosine, neighbours, shares, trust, best_step, general, rest)
    if settings.procedure_feedback_weight and vector is not None and out:
        moved = _runbook_feedback(index, vector, out, docs, cosine, best_step, step_row,
                                  settings.procedure_feedback_weight)
        if moved is not None:
            out = _combine(parts, docs, keyword, phrases, exact, moved[0], neighbours, shares, trust, moved[1],
                           general, rest)
            for candidate in out.values():
                candidate.moved = candidate.key[0] == "procedure"
    if settings.prf_weight and used_mode != "vector" and out:
        _feedback(parts, query, kinds, n, out)
    return out


def _rest_vector(parts: Parts, query: str, keyword: dict[int, float], docs: dict[int, dict[str, Any]],
                 qvec: QueryVector | Any) -> QueryVector | None:
    """The vector of the rest of ``query`` (:func:`memvault.rules.subject.rest` of the best keyword matches the asker
    may read, in the search's order), started in a worker; None when the question has no subject or no words are
    left. The model is the one that embeds the question."""
    from ..index.search import STOPWORDS
    from ..rules import subject

    texts = [docs[r]["body"] for r in keyword if r in docs][:subject.TOP]
    left = subject.rest(query, texts, STOPWORDS)
    if left is None:
        return None
    embedder = qvec.embedder if isinstance(qvec, QueryVector) and qvec.embedder is not None else parts.engine.get()
    return QueryVector.started(embedder, left)


def generality(index: VaultIndex, docs: dict[int, dict[str, Any]], cosine: dict[int, float],
               weight: float) -> dict[int, float]:
    """The cosine each candidate row of a fact loses for being general (``[recall] generality_weight``): when
    several facts share the question's subject, the one close to the others is about the subject; the one that
    stands apart answers the question's other terms. The facts among the :data:`GENERAL_ROWS` candidates closest in
    meaning (each fact once, its vector the mean of its chunks') are read against each other: a fact's closeness is
    its mean cosine with its :data:`GENERAL_NEIGHBOURS` nearest, and it loses ``weight ×`` (its closeness − the mean
    closeness of them all), so a fact below the mean gains as much (hubness reduction; CSLS's local scaling, centred).
    Empty when fewer than ``GENERAL_NEIGHBOURS + 1`` facts are among them. Off by default: the folds chose 0.3 for
    LoCoMo facts, but an answer central to its subject loses as a general fact does (docs/benchmarks.md, issue 27
    seventh pass)."""
    import numpy as np

    closest = sorted((r for r in docs if r in cosine), key=lambda r: (-cosine[r], r))[:GENERAL_ROWS]
    facts: dict[str, int] = {}  # fact id -> its closest row
    for rowid in closest:
        if docs[rowid]["kind"] == "fact":
            facts.setdefault(docs[rowid]["id"], rowid)
    if len(facts) <= GENERAL_NEIGHBOURS:
        return {}
    found = index.docs_vectors(list(facts.values()))
    vectors = [found.get(rowid) for rowid in facts.values()]
    if not all(vectors):
        return {}
    m = np.array([v[0] if len(v) == 1 else np.mean(v, axis=0) for v in vectors], dtype=np.float32)
    lost = dict(zip(facts, (weight * centred_closeness(m)).tolist()))
    return {rowid: lost[doc["id"]] for rowid, doc in docs.items() if doc["kind"] == "fact" and doc["id"] in lost}


def centred_closeness(vectors: Any, neighbours: int = GENERAL_NEIGHBOURS) -> Any:
    """Per row of ``vectors`` (one memory each, at least ``neighbours + 1``): its mean cosine with its ``neighbours``
    nearest other rows, less the mean of that over all rows (:func:`generality`'s measure, unweighted)."""
    import numpy as np

    m = np.asarray(vectors, dtype=np.float32)
    m = m / np.linalg.norm(m, axis=1, keepdims=True)
    near = m @ m.T
    np.fill_diagonal(near, -1.0)
    close = np.sort(near, axis=1)[:, -neighbours:].mean(axis=1)
    return close - close.mean()


def feedback_vector(vector: Any, found: Sequence[Sequence[Any]], weight: float) -> Any:
    """The query's vector moved toward the memories found first (Rocchio's feedback): ``vector + weight × the mean
    of each memory's mean chunk vector``, of unit length. ``found``: per memory, the vectors of its chunks."""
    import numpy as np

    query = np.asarray(vector, dtype=np.float32)
    centre = np.mean([np.mean(np.asarray(chunks, dtype=np.float32), axis=0) for chunks in found], axis=0)
    moved = query + np.float32(weight) * centre
    norm = float(np.linalg.norm(moved))
    return moved / np.float32(norm) if norm > 0 else query


def _shares(settings: Any, used_mode: str) -> dict[str, tuple[float, float]]:
    """The semantic share of relevance and the phrase weight, per kind: a runbook has its own (a page of many
    commands), facts and episodes share theirs. Keyword mode is all words, vector mode all meaning."""
    def semantic(weight: float) -> float:
        return weight if used_mode == "hybrid" else (1.0 if used_mode == "vector" else 0.0)

    general = (semantic(settings.semantic_weight), settings.phrase_weight)
    return {"fact": general, "episode": general,
            "procedure": (semantic(settings.procedure_semantic_weight), settings.procedure_phrase_weight)}


def _runbook_feedback(index: VaultIndex, vector: Any, out: dict[tuple[str, str], Candidate],
                      docs: dict[int, dict[str, Any]], cosine: dict[int, float],
                      best_step: dict[tuple[str, str], float], step_row: dict[tuple[str, str], int],
                      weight: float) -> tuple[dict[int, float], dict[tuple[str, str], float]] | None:
    """Runbooks read again by meaning against the query's vector moved toward the :data:`FEEDBACK_RUNBOOKS` most
    relevant ones (``[recall] procedure_feedback_weight``; :func:`feedback_vector`): a short question ("extract an
    archive") is understood through the pages it found first. Each candidate runbook's chunk or step closest to the
    question gets its cosine with the moved vector, and that is the runbook's cosine (one row a runbook: a cold
    process reads each from SQLite), scaled so that the best runbook cosine stays what it was: facts and episodes,
    read with the question alone, keep their footing, and the calibrated evidence of the "nothing known" test is
    unchanged. Returns the cosines and the runbooks' step cosines to combine again (None: nothing to move)."""
    found = sorted((c for c in out.values() if c.key[0] == "procedure"), key=lambda c: (-c.relevance, c.key))
    if not found:
        return None
    top = [c.rowid for c in found[:FEEDBACK_RUNBOOKS]]
    vectors_of = index.docs_vectors(top)  # one read for the three
    chunks = [vectors_of.get(rowid, []) for rowid in top]
    if not all(len(vectors) for vectors in chunks):
        return None
    closest: dict[tuple[str, str], tuple[float, int]] = {}  # runbook -> (cosine, rowid) of its closest row
    for rowid in sorted(docs):
        doc = docs[rowid]
        if doc["kind"] == "procedure":
            key, cos = (doc["kind"], doc["id"]), cosine.get(rowid, 0.0)
            if key not in closest or cos > closest[key][0]:
                closest[key] = (cos, rowid)
    for key, rowid in step_row.items():
        if key in closest and best_step[key] > closest[key][0]:
            closest[key] = (best_step[key], rowid)
    before = max(max(cos for cos, _ in closest.values()), 0.0)
    new = index.similarities(feedback_vector(vector, chunks, weight), sorted({r for _, r in closest.values()}))
    value = {key: new.get(rowid, 0.0) for key, (_, rowid) in closest.items()}
    after = max(max(value.values()), 0.0)
    if before <= 0.0 or after <= 0.0:
        return None
    scale = before / after
    moved = dict(cosine)
    for rowid, doc in docs.items():
        if doc["kind"] == "procedure":
            moved[rowid] = value[(doc["kind"], doc["id"])] * scale
    return moved, {key: v * scale for key, v in value.items()}


def _readable(parts: Parts, docs: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The docs the asker may read (a scoped asker's ``[scopes]``): the rest never takes a place."""
    if parts.readable is None:
        return docs
    return {r: d for r, d in docs.items() if parts.readable(d["path"])}


def _combine(parts: Parts, docs: dict[int, dict[str, Any]], keyword: dict[int, float], phrases: dict[int, float],
             exact: set[int], cosine: dict[int, float], neighbours: dict[int, list[int]],
             shares: dict[str, tuple[float, float]], trust: float,
             steps: dict[tuple[str, str], float],
             general: dict[int, float] | None = None,
             rest: dict[int, float] | None = None) -> dict[tuple[str, str], Candidate]:
    """One candidate per memory (its best chunk), with relevance ``s·cosine/best + (1-s)·keyword``, ``s`` and the
    phrase weight of its kind (``shares``). ``steps``: the best cosine of each runbook's steps (every step of every
    runbook among ``docs``, candidate or not). ``general``: the cosine a fact's row loses for being general
    (:func:`generality`); its candidate keeps its own cosine, the evidence of the "nothing known" test. ``rest``: the
    cosine of each fact's and episode's row with the rest of the question (:func:`_rest_vector`), of which the
    cosine used takes ``[recall] rest_weight`` (at least 0, as the cosine)."""
    settings = parts.config.recall
    g = settings.neighbour_weight
    index = parts.index
    best_cos = max(max((c for c in cosine.values() if c > 0), default=0.0), max(steps.values(), default=0.0)) or 1.0
    best_kw = max(keyword.values(), default=0.0) or 1.0
    best_phrase = max(phrases.values(), default=0.0) or 1.0
    # One pass of plain arithmetic per chunk (a recall combines a few hundred, on the path after the vector).
    # per kind: the scales of a keyword score, a phrase score and a cosine, and the keyword side's share (1 - s)
    scales = {kind: (trust / best_kw / (1 + p), trust * p / best_phrase / (1 + p), s / best_cos, 1 - s)
              for kind, (s, p) in shares.items()}
    keyword_of, phrase_of, cosine_of = keyword.get, phrases.get, cosine.get
    # A runbook's steps (chunks numbered below 0: vectors only) lend their best cosine to its windows, which hold
    # its keyword rows: the runbook is as close in meaning as its closest step, and keeps what its words matched.
    cos_of, kw_of, rel_of, used_of, lost = {}, {}, {}, {}, {}
    lost_of = (general or {}).get
    r = settings.rest_weight if rest is not None else 0.0
    rest_of = (rest or {}).get
    for rowid in docs:
        cos = cosine_of(rowid, 0.0)
        if steps:
            step = steps.get((docs[rowid]["kind"], docs[rowid]["id"]), 0.0)
            if step > cos:
                cos = step
        cos_of[rowid] = cos = cos if cos > 0.0 else 0.0
        used = cos
        if r and docs[rowid]["kind"] != "procedure":
            other = rest_of(rowid, 0.0)
            used = (1 - r) * cos + r * (other if other > 0.0 else 0.0)
        if general:
            mixed = used
            used = used - lost_of(rowid, 0.0)
            used = used if used > 0.0 else 0.0
            lost[rowid] = mixed - used
        used_of[rowid] = used
        kw_scale, phrase_scale, cos_scale, kw_share = scales[docs[rowid]["kind"]]
        kw_of[rowid] = kw = keyword_of(rowid, 0.0) * kw_scale + phrase_of(rowid, 0.0) * phrase_scale
        rel_of[rowid] = used * cos_scale + kw_share * kw
    out: dict[tuple[str, str], Candidate] = {}
    boost = 1 - settings.exact_boost
    # a runbook's windows before its steps: on a tie (no word matched) its best chunk is a window, which holds words
    rows = docs.items() if not steps else sorted(docs.items(), key=lambda item: item[1].get("chunk", 0) < 0)
    for rowid, doc in rows:
        cos, rel = cos_of[rowid], rel_of[rowid]
        if rowid in neighbours:
            rel = (rel + g * max(rel_of.get(r, 0.0) for r in neighbours[rowid])) / (1 + g)
        if exact:
            # Quoting a memory word for word is the strongest evidence there is: quoted chunks rank first.
            rel = 1.0 if rowid in exact else rel * boost
        key = (doc["kind"], doc["id"])
        current = out.get(key)
        if current is None:
            out[key] = Candidate(key, doc, rel if rel < 1.0 else 1.0, cos, kw_of[rowid], rowid in exact, rowid, index,
                                 semantic=used_of[rowid] / best_cos, general=lost.get(rowid, 0.0),
                                 rest=rest_of(rowid, 0.0) if r and doc["kind"] != "procedure" else None)
        elif rel > current.relevance:
            out[key] = Candidate(key, doc, rel if rel < 1.0 else 1.0, cos if cos > current.cosine else current.cosine,
                                 kw_of[rowid], rowid in exact, rowid, index, semantic=used_of[rowid] / best_cos,
                                 general=lost.get(rowid, 0.0),
                                 rest=rest_of(rowid, 0.0) if r and doc["kind"] != "procedure" else None)
        elif cos > current.cosine:
            current.cosine = cos
    return out


def _feedback(parts: Parts, query: str, kinds: Sequence[str], n: int, out: dict[tuple[str, str], Candidate]) -> None:
    """Pseudo-relevance feedback: the words the best ``PRF_DOCS`` facts and procedures share (and the query lacks,
    rare in the vault) searched as a second keyword query; a candidate's relevance gains ``[recall] prf_weight``
    times that search's BM25 / best. Conversation turns give no words: their chat drifts (docs/benchmarks.md)."""
    weight = parts.config.recall.prf_weight
    top = sorted((c for c in out.values() if c.key[0] != "episode"), key=lambda c: -c.relevance)[:PRF_DOCS]
    index = parts.index
    bodies = [c.doc["body"] for c in top]
    if not bodies:
        return
    found = index.search_feedback(bodies, query, kinds, PRF_TERMS, n)
    best = max((s for _, s in found), default=0.0) or 1.0
    docs = index.chunk_docs([r for r, _ in found if r]) if found else {}
    gain: dict[tuple[str, str], float] = {}
    for rowid, value in found:
        doc = docs.get(rowid)
        if doc is not None:
            key = (doc["kind"], doc["id"])
            gain[key] = max(gain.get(key, 0.0), value / best)
    for key, value in gain.items():
        if key in out:
            out[key].relevance = min(1.0, out[key].relevance + weight * value)


def recency(stamp: str | None, last_use: datetime | None, current: datetime, half_life: float) -> float:
    """0.5 ** (age / half_life) of the later of the memory's time and its last use. A time further in the future
    than clock skew allows (a line placed by hand, written before that was refused, or from a host whose clock is
    wrong) is not believed: it would keep recency 1.0 for ever."""
    written = stored_time(stamp)
    if written is not None and written > current + MAX_FUTURE:
        written = None
    times = [t for t in (written, last_use) if t is not None]
    if not times:
        return 0.0
    age = max(0.0, (current - max(times)).total_seconds())
    return 0.5 ** (age / half_life)
