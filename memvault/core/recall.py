"""Recall: hybrid (keyword + semantic) search over facts, episodes and procedures, ranked on five factors.

    score = w_rel·relevance + w_imp·importance + w_conf·confidence + w_rec·recency + w_freq·frequency

Relevance decides what is a candidate; the other factors order comparable candidates:

- **relevance**: ``s·semantic + (1-s)·keyword`` (``s`` and ``p`` a runbook's own: ``procedure_semantic_weight``,
  ``procedure_phrase_weight``). semantic is the cosine similarity to the query divided by the best candidate's;
  keyword is ``(terms + p·pairs) / (1 + p)``, BM25 over the query's words and over its consecutive word pairs taken as
  phrases, each divided by the best candidate's. A memory that quotes the whole query word for word has relevance 1.
  Candidates are the union of FTS5 BM25 (any query term may match) and the vector search; each gets both scores.
  A runbook's closest chunk is read again against the query's vector moved toward the three most relevant
  runbooks found (``procedure_feedback_weight``, :func:`memvault.core.candidates.feedback_vector`), scaled to keep
  the best runbook's cosine. With ``generality_weight`` (off by default), a fact close to the other facts found
  (general on their subject) loses some cosine to the one that stands apart
  (:func:`memvault.core.candidates.generality`).
- **"nothing known"**: unless a memory quotes the query, or the best **semantic evidence** of any kind reaches
  ``[recall] min_evidence``, or the best keyword match holds ``min_coverage`` of the query's IDF weight, recall
  returns nothing and says why. Evidence is a cosine on the scale measured for this vault and model, per kind
  (:mod:`memvault.core.calibration`: 0 = what unrelated questions get, 1 = what a piece of one of its memories
  gets), so no cosine of one model is written here. A question naming something no memory mentions clears both
  by ``unknown_name_penalty`` more. Keyword-only recall (no model) skips this test.
- **the relative floor**: a candidate whose relevance is below ``[recall] relative_floor`` of the best one's is
  not returned. An untrusted episode that "matches every question" (a hub of the vault's pieces of text, see
  :func:`_without_hubs`) is returned only as the best hit; an untrusted episode's relevance counts
  ``untrusted_penalty`` less in its score, so it never outranks trusted text of comparable relevance.
- **reranker** (optional, ``[recall] reranker``): a cross-encoder re-reads the best ``rerank_candidates`` with the
  query; its score becomes their relevance.
- importance, confidence: as stored. recency: ``0.5 ** (age / half_life)`` since the later of the last update
  and the last use. frequency: uses (a fact fetched by key, a procedure run, a ``used`` report) plus a small
  share of being shown, decaying (see :mod:`memvault.stores.state`).
- **stale** facts keep their place and carry ``stale`` with the reason; ``[facts] stale_penalty`` is taken off
  their score, so a fresh memory of equal relevance ranks first.
- **runs**: a ``procedure_run`` episode is attached to its procedure: the procedure is the answer (at the best
  rank of itself and its runs) and carries its last runs; run logs are not separate hits.
- **time**: "yesterday", "last week", "on 1 May 2023"... in the query rank the memories of that time first: the
  words are left out of the search and every other candidate's relevance is divided by ``1 + [recall]
  time_weight`` (a memory created in the window, or written after it began and whose text names a time inside
  it, is of it; one created in the week after it that does not name it, probably: divided by ``(1 + time_weight)
  ** grace_weight``: :func:`memvault.core.windows.by_time`, :mod:`memvault.rules.timeq`). A question that is only
  a time ("what happened yesterday") lists that time's episodes; ``since``/``until`` keep only the episodes of
  their window.

One pass: the index snapshot is taken once; the files of the hits about to be returned are stat'ed, and when one
changed since it was indexed only that file is re-indexed and only the search is run again, once.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..rules import timeq
from ..rules.config import FACTORS
from ..rules.errors import FactNotFound, FactParseError, InvalidValue, MemvaultError, ModelUnavailable
from .hits import Hit, RecallResult, against, count_tokens, run_summary  # noqa: F401 - count_tokens is part of recall's API
from .candidates import Candidate, Parts, QueryVector, gather, recency, vector_width  # noqa: F401 - Parts is recall's API
from . import windows
from .contradictions import hidden_by, vouched
from .usage import record_shown
from ..index import KINDS
from ..index.search import MAX_TERMS, query_terms
from ..rules.freshness import stale_doc_reason
from ..rules.timeutil import format_time, index_time, now, parse_time, parse_time_or_age, shown_time
from ..rules.trust import Policy
from ..rules.validation import check_utf8, vault_paths

if TYPE_CHECKING:
    from ..index.update import SyncReport
    from .calibration import Calibration

MODES = ("hybrid", "keyword", "vector")
#: Semantic evidence this far above min_evidence answers without reading the words (see _nothing_known).
COVERAGE_MARGIN = 0.5
#: A suspected hub must be near at least this many times the share of pieces chance gives (see _without_hubs).
HUB_OVER_CHANCE = 2.0
FORMATS = ("text", "json", "prompt")
K_MAX = 1000
#: The longest question recall takes (characters); the per-prompt hook asks with a prompt's first ones.
QUERY_MAX = 16384
RUNS_SHOWN = 3


def check_arguments(query: object, k: object, kinds: Sequence[str] | None, budget: object, mode: str,
                    fmt: str) -> list[str]:
    if not isinstance(query, str) or not query.strip():
        raise InvalidValue("query", "must not be empty")
    if len(query) > QUERY_MAX:  # a question, not a document: 1 MB cost 12.7 s and filled the recall log
        raise InvalidValue("query", f"{len(query)} characters, more than the {QUERY_MAX} a question may have: ask "
                                    "with its words, not the whole text")
    check_utf8(query, "query")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_MAX:
        raise InvalidValue("k", f"must be a whole number from 1 to {K_MAX}, not {k!r}")
    kinds = list(dict.fromkeys(kinds or KINDS))
    for kind in kinds:
        if kind not in KINDS:
            raise InvalidValue("kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise InvalidValue("budget", f"must be a positive number of tokens, not {budget!r}")
    if mode not in MODES:
        raise InvalidValue("mode", f"{mode!r} is not one of {', '.join(MODES)}")
    if fmt not in FORMATS:
        raise InvalidValue("format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    return kinds


def recall(parts: Parts, query: str, k: int = 10, kinds: Sequence[str] | None = None, budget: int | None = None,
           *, mode: str = "hybrid", fmt: str = "json", sync: bool = True, record_access: bool = True,
           verify: bool = True, since: datetime | str | None = None, until: datetime | str | None = None,
           min_relevance: float | None = None, time_in_query: bool = True,
           include_superseded: bool = False, explain: bool = False, warnings: Sequence[str] = ()) -> RecallResult:
    """Find the ``k`` best memories for ``query`` (see the module doc for the ranking).

    ``since``/``until`` keep episodes of that window (a time in the query does too, unless ``time_in_query`` is
    false). ``min_relevance`` overrides ``[recall] relative_floor``; 0 turns every floor off. A fact another has
    superseded (an accepted proposal that contradicted it) is left out unless ``include_superseded``.
    ``budget`` holds for the answer as printed in ``fmt`` (with ``explain``: see
    :func:`memvault.core.render.fit_budget`); ``warnings`` are the caller's own about this answer (the MCP server's
    "keyword-only"), first among its warnings and counted in the budget.
    """
    kinds = check_arguments(query, k, kinds, budget, mode, fmt)
    if min_relevance is not None and (isinstance(min_relevance, bool) or not isinstance(min_relevance, (int, float))
                                      or not 0.0 <= min_relevance <= 1.0):  # NaN fails the comparison too
        raise InvalidValue("min_relevance", f"must be a number from 0 to 1, not {min_relevance!r}")
    window = _window(query, since, until, time_in_query)
    warnings = [*warnings] + [f"{day} in the question is not a date: searched as words, not as a time"
                           for day in (timeq.impossible_dates(query) if time_in_query else [])]
    try:
        return _recall(parts, query, k, kinds, budget, mode, fmt, sync, record_access, verify, window, min_relevance,
                       warnings, include_superseded, explain)
    except Exception as exc:
        if not parts.index.guard(exc):
            raise
    # The index was damaged and has been moved aside: rebuild its text from the files and answer from that
    # (the vectors come back piecemeal, with each recall, or at once with 'memvault reindex').
    parts.index.sync(splitter=parts.engine.warm())
    return _recall(parts, query, k, kinds, budget, mode, fmt, True, record_access, False, window, min_relevance,
                   warnings, include_superseded, explain)


def _window(query: str, since: datetime | str | None, until: datetime | str | None,
            time_in_query: bool) -> timeq.Window | None:
    if since is not None or until is not None:
        s = _time_or_age(since, "since") if since is not None else None
        u = _time_or_age(until, "until") if until is not None else None
        if s is not None and u is not None and s > u:
            raise InvalidValue("since", f"{format_time(s)} is after --until {format_time(u)}: nothing can be "
                                        "in that window (swap them?)")
        return timeq.Window(s, u, "", query)
    return timeq.parse(query, now()) if time_in_query else None


def searched_text(query: str, since: Any = None, until: Any = None, time_in_query: bool = True) -> str:
    """The text recall searches for and embeds: ``query`` without the time it names, when words are left (what a
    caller that starts the query's vector early must embed, or the vector is made twice)."""
    return _searched(query, timeq.parse(query, now()) if time_in_query and since is None and until is None
                     else None)


def _searched(query: str, window: timeq.Window | None) -> str:
    """``query`` without the time ``window`` found in it, when words are left; else the whole query."""
    return window.query if window is not None and _content(window.query) else query


def _time_or_age(value: datetime | str, name: str) -> datetime:
    """A time, an RFC 3339 string, or an age ("7d", "12h": that long ago), as the CLI takes them."""
    return parse_time_or_age(value, name) if isinstance(value, str) else parse_time(value, name)


def _recall(parts: Parts, query: str, k: int, kinds: list[str], budget: int | None, mode: str, fmt: str, sync: bool,
            record_access: bool, verify: bool, window: timeq.Window | None, min_relevance: float | None,
            warnings: list[str], include_superseded: bool = False, explain: bool = False) -> RecallResult:
    index, config = parts.index, parts.config
    settings = config.recall
    embedder = _embedder(parts, mode, warnings)
    search_query = _searched(query, window)
    searched = window is None or _content(window.query)
    # The query's vector is computed in a worker thread from here on (then the vector scan, once bound below) while
    # this one starts the freshness check (the watcher's barrier) and searches the words; when the check changed
    # the index, the search runs again. Before the first sync there is nothing to search.
    qvec = None
    if embedder is not None and searched:
        early = parts.head_start
        qvec = (early if early is not None and early.embedder is embedder and early.query == search_query
                else QueryVector.started(embedder, search_query))
    finish = index.refresh_later(settings.rescan_interval) if sync else None
    if finish is not None and (not index.exists() or not searched):
        _refreshed(finish(), warnings)
        finish = None
    if embedder is not None and sync:
        _embed_pending(parts, embedder, warnings)
    if not (index.exists() and _same_model(parts, embedder, warnings)):
        qvec = None
    if qvec is not None:
        qvec.bind(index.vector_search(kinds, vector_width(parts, k)))
    if not searched:  # "what happened yesterday": no subject left to search for, the window is the question
        _gathered(parts, warnings)
        return _finish(parts, _in_window(parts, window, kinds, k, warnings), budget, fmt, record_access, explain)
    used_mode = mode if qvec is not None else "keyword"
    if mode == "vector" and qvec is None:
        if finish is not None:
            _refreshed(finish(), warnings)
        _gathered(parts, warnings)
        empty = RecallResult([], mode="vector", warnings=warnings)
        empty.nothing_found = "no vectors of this model to search by meaning ('memvault reindex' makes them)"
        return empty

    floor = settings.relative_floor if min_relevance is None else min_relevance
    calibration, holder = (_calibration(parts, embedder, warnings)
                           if used_mode != "keyword" and (min_relevance is None or min_relevance > 0) else (None, None))
    evidence: dict[str, Any] = {}
    ranked, why = _rank(parts, search_query, k, kinds, used_mode, qvec, window, floor, min_relevance, calibration,
                        evidence, holder)
    if finish is not None and _refreshed(finish(), warnings):
        if embedder is not None:
            _embed_pending(parts, embedder, warnings)
        vector = None
        if embedder is not None and _same_model(parts, embedder, warnings):  # the first vectors may have come now
            vector = qvec.vector() if qvec is not None else embedder.embed_query(search_query)
        used_mode = mode if vector is not None else "keyword"
        evidence.clear()
        ranked, why = _rank(parts, search_query, k, kinds, used_mode, vector, window, floor, min_relevance,
                            calibration, evidence, holder)
    _gathered(parts, warnings)
    checked: set[str] = set()
    if sync and verify and ranked:
        # Stat the files behind what is about to be returned (and a margin): one edited in place since it was
        # indexed is re-indexed and the search run again, once; a hit never rests on text that is gone.
        paths = {c.doc["path"] for c in ranked[: 2 * k + 5]}
        changed = index.verify(paths)
        if changed is not None and changed.changed:
            warnings += changed.warnings
            if embedder is not None:
                index.embed(embedder, limit=settings.embed_at_recall)
            if used_mode != "keyword" and not _same_model(parts, embedder, warnings):
                used_mode, qvec = "keyword", None
            ranked, why = _rank(parts, search_query, k, kinds, used_mode,
                                qvec.vector() if isinstance(qvec, QueryVector) else qvec, window, floor,
                                min_relevance, calibration, evidence, holder)
        checked = index.as_on_disk(paths)
    if settings.reranker and ranked:
        ranked = _rerank(parts, search_query, ranked, warnings)
    if window is not None and window.phrase and evidence.get("of_time") == 0 and ranked:
        warnings.append(f"no memory found is of the time the question names ({window.phrase}): ranked by its "
                        "other words alone")
    result = RecallResult(_materialise(parts, ranked, k, checked if sync and verify else None, include_superseded,
                                       window if window is not None and not window.phrase else None),
                          mode=used_mode,
                          warnings=warnings)
    result.nothing_found = why
    result.evidence = evidence or None
    if window is not None:
        result.window = {"since": format_time(window.since) if window.since else None,
                         "until": format_time(window.until) if window.until else None, "phrase": window.phrase}
    return _finish(parts, result, budget, fmt, record_access, explain)


def _refreshed(report: SyncReport | None, warnings: list[str]) -> bool:
    """The freshness check's warnings taken; whether it changed the index (a search made before is out of date)."""
    if report is None:
        return False
    warnings += report.warnings
    return report.altered


def _embed_pending(parts: Parts, embedder: Any, warnings: list[str]) -> None:
    """The next chunks waiting for a vector (``[recall] embed_at_recall`` of them), embedded before the search."""
    pending = parts.index.embed(embedder, limit=parts.config.recall.embed_at_recall)
    warnings += pending.warnings
    if pending.chunks_pending:
        warnings.append(f"{pending.chunks_pending} changed chunks are indexed for keywords only until "
                        "'memvault reindex' embeds them (each recall embeds the next ones)")


def _gathered(parts: Parts, warnings: list[str]) -> None:
    """What the index met on the way (a link it would not follow...), and the files it cannot search: every recall
    says which memories it cannot see, not only the sync that first met them."""
    index = parts.index
    warnings += index.warnings
    index.warnings.clear()
    unseen = index.problems()
    if parts.readable is not None:  # a scoped reader is told of no file outside its read scope
        unseen = [p for p in unseen if _problem_readable(p, parts)]
    # Named as the vault names them (most index problems already were): the host's path tells an asker the user's
    # home layout, and a recall's warnings reach agents, MCP clients and served hooks.
    unseen = [vault_paths(p, parts.facts.root) for p in unseen]
    if unseen:
        shown = "; ".join(unseen[:3]) + (f"; and {len(unseen) - 3} more" if len(unseen) > 3 else "")
        warnings.append(f"{len(unseen)} file{'s' if len(unseen) > 1 else ''} not searchable: {shown}")


def _problem_readable(problem: str, parts: Parts) -> bool:
    """Whether a problem the index keeps ("<path>:<line>: <reason>", "<path>: <reason>", the path absolute or from
    the vault's root) is about a file the scoped reader may read (vault paths hold no ':')."""
    if parts.readable is None:
        return True
    root = str(parts.facts.root) + "/"
    rel = problem[len(root):] if problem.startswith(root) else problem
    return not rel.startswith("/") and parts.readable(rel.split(":", 1)[0])


def _embedder(parts: Parts, mode: str, warnings: list[str]) -> Any:
    """The model for this recall, or None (keyword-only), with the reason in ``warnings``."""
    index, config = parts.index, parts.config
    identity = index.identity()
    if mode == "keyword":
        return None
    if identity is not None and not config.wants_model(identity):
        warnings.append(f"{config.model_from} asks for model {config.model!r} but the index holds vectors of "
                        f"{identity.name!r}: keyword-only results until 'memvault reindex' rebuilds it")
        return None
    try:
        embedder = parts.engine.get()
    except ModelUnavailable as exc:
        warnings.append(f"{exc}; keyword-only results")
        return None
    if identity is not None and not embedder.identity.same_vectors(identity):
        warnings.append(f"the loaded model {embedder.identity.name}@{embedder.identity.revision[:12]} differs from "
                        f"the index's {identity.name}@{identity.revision[:12]}: keyword-only until 'memvault reindex'")
        return None
    return embedder


def _same_model(parts: Parts, embedder: Any, warnings: list[str]) -> bool:
    """Whether the index (its generation now: another process's reindex may have swapped one of another model in
    since this recall began) holds vectors of ``embedder``'s model, the one its query vector is of; if not, said."""
    identity = parts.index.identity()
    if identity is None or embedder is None or embedder.identity.same_vectors(identity):
        return identity is not None
    warnings.append(f"the index was rebuilt with {identity.name} during this recall: keyword-only results")
    return False


def _calibration(parts: Parts, embedder: Any, warnings: list[str]) -> tuple[Calibration | None, Any]:
    """The calibrated scale of this vault and model (see :mod:`memvault.core.calibration`), kept in the index,
    measured there when it is missing, of another model, or the vault has grown by a quarter since; and the index
    that holds it. (None, None) without vectors."""
    from . import calibration

    holder = parts.index
    if not holder.exists() or holder.identity() is None:
        return None, None
    try:
        return calibration.current(holder, embedder, KINDS), holder
    except MemvaultError as exc:
        if holder.guard(exc):  # the index went away (a team's database) or is damaged: recall runs again
            raise
        warnings.append(f"the relevance scale could not be measured ({exc}); every candidate is returned")
        return None, None


def _content(query: str) -> bool:
    """Whether a query has words worth searching for (not only stop words like "what happened")."""
    return bool([t for t in query_terms(query) if t not in _VAGUE])


_VAGUE = frozenset({"happened", "happen", "happens", "anything", "something", "events", "event", "news", "going",
                    "went", "done", "did", "do", "new", "changes", "changed", "recent", "recently", "last", "ago"})


def _finish(parts: Parts, result: RecallResult, budget: int | None, fmt: str, record_access: bool,
            explain: bool = False) -> RecallResult:
    from .render import fit_budget, refit

    state = None
    if record_access and len(result):
        try:
            state = parts.state()
        except MemvaultError as exc:
            result.warnings.append(f"usage not recorded: {exc}")
        else:  # what it said while the ranking read its counts (a damaged file moved aside) is fitted with the hits,
            result.warnings += state.warnings  # so the hits it then counts as shown are the hits returned
            state.warnings.clear()
    if budget is not None:
        fit_budget(result, budget, fmt, explain=explain, weights=parts.config.recall.weights if explain else None)
    said = len(result.warnings)
    if state is not None and len(result):
        try:
            record_shown(state, result, parts.config.recall.exposure_weight)
            result.warnings += state.warnings
            state.warnings.clear()
        except MemvaultError as exc:
            result.warnings.append(f"usage not recorded: {exc}")
    if len(result.warnings) > said:  # room for what the record had to say (rare: the file damaged between the
        refit(result)                 # ranking's read and the record; the hits it counted as shown stay)
    return result


# ------------------------------------------------------------------------------------------------ ranking
def _rank(parts: Parts, query: str, k: int, kinds: list[str], used_mode: str, qvec: Any,
          window: timeq.Window | None, floor: float, min_relevance: float | None,
          calibration: Calibration | None = None, evidence: dict[str, Any] | None = None,
          holder: Any = None) -> tuple[list[Candidate], str | None]:
    """Candidates from both searches, each with both scores; runs attached to their procedures; the time window,
    the floors; ranked on the five factors. Returns the ranked candidates and, when none is left, why (the
    figures the "nothing known" test read go into ``evidence``)."""
    factors = _Factors(parts, wants_coverage=calibration is not None and (min_relevance is None or min_relevance > 0))
    candidates = gather(parts, query, k, kinds, used_mode, qvec, factors)
    if window is not None and (not window.phrase or parts.config.recall.time_weight):  # k of the window's episodes
        candidates = windows.gather_within(parts, query, k, kinds, used_mode, qvec, factors, window, candidates)
    if window is not None and window.phrase and parts.config.recall.time_weight:  # a time in the question: its first
        slower = 1.0 + parts.config.recall.time_weight
        of_time = windows.by_time(candidates.values(), window, slower, 2 * k + 5,
                                  slower ** parts.config.recall.grace_weight,
                                  lambda c: not _untrusted_episode(factors.policy, c.key, c.doc))
        if evidence is not None:
            evidence["of_time"] = of_time
    if "procedure" in kinds:
        _attach_runs(parts, candidates, kinds)
    if not candidates:
        return [], "no memory matches the query" + (" in that time (since/until)" if window and not window.phrase
                                                    else "")
    best = max(c.relevance for c in candidates.values())
    if min_relevance is None or min_relevance > 0:
        if used_mode != "keyword" and calibration is not None:
            # Keyword-only recall has no cosine, and coverage alone would cost too many answers: it skips this
            # test (docs/benchmarks.md).
            why = _nothing_known(parts, query, candidates, calibration, evidence, factors)
            if why is not None:
                return [], why
        candidates = {key: c for key, c in candidates.items() if c.relevance >= floor * best}
    if parts.config.recall.coverage_weight and used_mode != "vector":
        _rescore(parts, query, candidates)
    _score(parts, candidates.values(), factors)
    ranked = sorted(candidates.values(), key=lambda c: (-c.score, c.key))
    if holder is not None and parts.config.recall.hub_share < 1:
        ranked = _without_hubs(parts, ranked, k, holder, evidence)
    return ranked, None


def _rescore(parts: Parts, query: str, candidates: dict[tuple[str, str], Candidate]) -> None:
    """The most relevant candidates re-scored by how much of the question each holds (see
    :mod:`memvault.core.rescore`): one keyword-index lookup per query word for all of them."""
    from .rescore import DEPTH, rescore

    top = sorted(candidates.values(), key=lambda c: (-c.relevance, c.key))[:DEPTH]
    by_index: dict[int, list[Candidate]] = {}
    for c in top:
        if c.index is not None:
            by_index.setdefault(id(c.index), []).append(c)
    coverage: dict[tuple[str, str], float] = {}
    for group in by_index.values():
        found = group[0].index.coverages(query, [c.rowid for c in group])
        coverage.update({c.key: found.get(c.rowid, 0.0) for c in group})
    relevance = rescore({key: c.relevance for key, c in candidates.items()}, coverage,
                        parts.config.recall.coverage_weight)
    for key, c in candidates.items():
        c.relevance = relevance[key]


def _rerank(parts: Parts, query: str, ranked: list[Candidate], warnings: list[str]) -> list[Candidate]:
    """The first ``[recall] rerank_candidates`` re-read by the cross-encoder ``[recall] reranker``: its score (0..1)
    becomes their relevance, they are scored again on the five factors and put in that order; the rest follow."""
    from ..models.reranker import load_reranker

    settings = parts.config.recall
    try:
        reranker = load_reranker(settings.reranker)
    except ModelUnavailable as exc:
        warnings.append(f"{exc}; results not reranked")
        return ranked
    head, tail = ranked[: settings.rerank_candidates], ranked[settings.rerank_candidates:]
    for c, score in zip(head, reranker.score(query, [c.doc["body"] for c in head])):
        c.relevance = score * c.timed  # a time the question names still ranks its memories first
    _score(parts, head)
    return sorted(head, key=lambda c: (-c.score, c.key)) + tail


def _without_hubs(parts: Parts, ranked: list[Candidate], k: int, holder: Any,
                  evidence: dict[str, Any] | None) -> list[Candidate]:
    """Leave out untrusted memories that "match every question": ones among the three closest other memories of
    the pieces of text (see :mod:`memvault.core.calibration`) of at least ``[recall] hub_share`` of the vault's
    other memories, and of twice the share chance would give in a small vault — a keyword-stuffed episode,
    written to reach every prompt. Such a memory is evidence for no question in particular; it is returned only
    when it is the best hit of all."""
    from . import calibration

    policy = Policy(parts.config.trust.trusted)
    suspects = [c for c in ranked[1: 2 * k + 5] if c.index is not None and _untrusted_episode(policy, c.key, c.doc)]
    if not suspects:
        return ranked
    pieces = calibration.stored_fragments(holder)
    if pieces is None:
        return ranked
    dropped = set()
    limit = parts.config.recall.hub_share
    for c in suspects:
        vectors = c.index.doc_vectors(c.rowid)
        share, chance = pieces.share(f"{c.key[0]}:{c.key[1]}", vectors)
        # near the pieces of at least hub_share of the others, and of twice the share chance gives a small vault
        if share >= max(limit, HUB_OVER_CHANCE * chance):
            dropped.add(c.key)
    if dropped and evidence is not None:
        evidence["hubs_left_out"] = sorted(f"{kind}:{item}" for kind, item in dropped)
    return [c for c in ranked if c.key not in dropped]


_NAME = re.compile(r"[^\W\d_][\w'-]*")


def named_words(query: str) -> list[str]:
    """The words a question names things with: capitalised words other than the first ("Oracle" in "what is our
    Oracle license count"), all-capital ones excepted (acronyms are written both ways)."""
    words = _NAME.findall(query)
    return list(dict.fromkeys(w for w in words[1:] if len(w) > 1 and w[0].isupper() and not w.isupper()))[:MAX_TERMS]


def _nothing_known(parts: Parts, query: str, candidates: dict[tuple[str, str], Candidate], calibration: Calibration,
                   evidence: dict[str, Any] | None, factors: _Factors | None = None) -> str | None:
    """Why nothing should be returned, or None when something stands out from what unrelated text gets here.

    Something stands out when a memory quotes the query, or the best **semantic evidence** of any kind (its best
    cosine on that kind's calibrated scale: 0 = what unrelated questions get in this vault with this model, 1 =
    what a piece of one of its memories gets) reaches ``[recall] min_evidence``, or the best match holds
    ``min_coverage`` of the query's weight in words. A question that names something no memory mentions
    ("Oracle", "France") must clear both by ``unknown_name_penalty`` more: it is most likely about something else."""
    settings = parts.config.recall
    if any(c.exact for c in candidates.values()):
        if evidence is not None:
            evidence["exact"] = True
        return None
    by_kind: dict[str, float] = {}
    for c in candidates.values():
        e = calibration.evidence(c.key[0], c.cosine) if c.cosine > 0 else None
        if e is not None and e > by_kind.get(c.key[0], float("-inf")):
            by_kind[c.key[0]] = e
    semantic = max(by_kind.values(), default=float("-inf"))
    words = max(candidates.values(), key=lambda c: (c.keyword, c.relevance))
    names = named_words(query)
    unknown = words.index.unknown_words(names) if names and words.index is not None else []
    penalty = settings.unknown_name_penalty if unknown else 0.0
    # the words are read only when the meaning alone is not clearly enough (they cost an FTS lookup per term)
    held = ((factors.coverage_of(query, words) if factors is not None else words.index.coverage(query, words.rowid))
            if words.index is not None and words.keyword > 0
            and semantic - penalty < settings.min_evidence + COVERAGE_MARGIN else 0.0)
    if evidence is not None:
        evidence.update(exact=False, semantic=None if semantic == float("-inf") else round(semantic, 4), by_kind=by_kind,
                        coverage=round(held, 4), unknown_names=unknown, penalty=penalty)
    if semantic - penalty >= settings.min_evidence or held - penalty >= settings.min_coverage:
        return None
    unknown_note = (f"; the question names {', '.join(unknown)}, which no memory mentions (both floors are "
                    f"{penalty:g} higher for it)" if unknown else "")
    shown = (against(semantic, settings.min_evidence + penalty) if semantic != float("-inf")
             else f"none (no vectors; floor {settings.min_evidence + penalty:g})")
    return (f"nothing relevant enough: the closest memory in meaning has evidence {shown} (0 is what unrelated "
            f"questions get in this vault, 1 what a piece of one of its memories gets) and the best match holds "
            f"{against(held, settings.min_coverage + penalty, percent=True)} of the query's weight in words"
            f"{unknown_note}")


def _untrusted_episode(policy: Policy, key: tuple[str, str], doc: dict[str, Any]) -> bool:
    """An episode whose writer ``[trust]`` does not trust: its text is that writer's word alone (facts and runbooks
    passed the gate or a review)."""
    return key[0] == "episode" and not policy.is_trusted(doc.get("source") or "")


def _attach_runs(parts: Parts, candidates: dict[tuple[str, str], Candidate], kinds: list[str]) -> None:
    """A run log is part of its procedure's answer: the procedure takes the run's place (when that is better than
    its own), the run is not a hit of its own, and the procedure carries its last runs."""
    runs = [c for c in candidates.values() if c.key[0] == "episode" and c.doc.get("ekind") == "procedure_run"
            and c.doc.get("ref")]
    missing = sorted({c.doc["ref"] for c in runs} - {c.key[1] for c in candidates.values() if c.key[0] == "procedure"})
    readable = parts.readable or (lambda _path: True)
    if missing and parts.index.exists():
        # The runbook a run names is checked as any other hit: a run record a scoped reader may read (a person's
        # run, or a line it wrote itself naming any runbook) is not a way to the text of one it may not.
        for name, doc in parts.index.procedure_docs(missing).items():
            if readable(doc["path"]):
                candidates[("procedure", name)] = Candidate(("procedure", name), doc)
    for run in runs:
        proc = candidates.get(("procedure", run.doc["ref"]))
        if proc is None:
            continue  # the procedure is gone: the run log stays a memory of its own
        if run.relevance > proc.relevance:
            proc.relevance, proc.cosine, proc.keyword = run.relevance, max(proc.cosine, run.cosine), run.keyword
            proc.semantic = run.semantic
        del candidates[run.key]
    names = [c.key[1] for c in candidates.values() if c.key[0] == "procedure"]
    if names and parts.index.exists():
        for name, items in parts.index.runs_of(names, RUNS_SHOWN).items():
            candidates[("procedure", name)].runs = [run for run in items if readable(run["path"])]


class _Factors:
    """Importance, confidence, recency and frequency of the memories found, and a stale fact's or an untrusted
    episode's penalty: they depend on the memory, not on the question, so a warm recall reads them while the
    query's vector is computed (:func:`gather`'s ``prepare``)."""

    def __init__(self, parts: Parts, wants_coverage: bool = False) -> None:
        self.parts = parts
        self.wants_coverage = wants_coverage
        self.coverage: dict[tuple[int, int], float] = {}
        self.current = now()
        self.policy = Policy(parts.config.trust.trusted)
        #: (kind, id) -> (the four factors, why the fact is stale or None, the penalty taken off its relevance)
        self.of: dict[tuple[str, str], tuple[dict[str, float], str | None, float]] = {}

    def __call__(self, docs: dict[int, dict[str, Any]]) -> None:
        self.add(docs.values())

    def best_words(self, query: str, rowid: int) -> None:
        """The share of the query's words the best keyword match holds, read ahead for the "nothing known" test."""
        if self.wants_coverage:
            self.coverage[(id(self.parts.index), rowid)] = self.parts.index.coverage(query, rowid)

    def coverage_of(self, query: str, c: Candidate) -> float:
        assert c.index is not None
        found = self.coverage.get((id(c.index), c.rowid))
        return found if found is not None else c.index.coverage(query, c.rowid)

    def add(self, docs: Any) -> None:
        new: dict[tuple[str, str], dict[str, Any]] = {}
        for doc in docs:
            key = (doc["kind"], doc["id"])
            if key not in self.of:
                new.setdefault(key, doc)
        if not new:
            return
        config = self.parts.config
        settings, current = config.recall, self.current
        usage = self.parts.state().get(list(new))
        for key, doc in new.items():
            u = usage.get(key)
            last_use = u.last_used if u else None
            count = (u.uses + u.shown) if u else 0.0
            factors = {
                "importance": float(doc["importance"]),
                "confidence": float(doc["confidence"]),
                "recency": recency(doc.get("updated") or doc.get("created"), last_use, current, settings.half_life),
                "frequency": min(1.0, math.log1p(count) / math.log1p(settings.frequency_cap)),
            }
            stale, penalty = None, 0.0
            if key[0] == "fact":
                stale = stale_doc_reason(doc.get("valid_until"), doc.get("review_after"), doc.get("updated"),
                                         config.facts.review_after, current)
                if stale is not None:
                    penalty = config.facts.stale_penalty
            elif _untrusted_episode(self.policy, key, doc):
                penalty = settings.untrusted_penalty
            self.of[key] = (factors, stale, penalty)


def _score(parts: Parts, candidates: Any, factors: _Factors | None = None) -> None:
    """score = (w_rel·relevance + band·Σ w_f·f) / (w_rel + band·Σ w_f), f over the four other factors.

    The band (``[recall] band``, 0.05) is how far importance, confidence, recency and frequency together can
    move a memory, in relevance: they order memories of comparable relevance and never lift an unrelated one
    over a related one. A stale fact's relevance counts ``[facts] stale_penalty`` less in its score."""
    settings = parts.config.recall
    candidates = list(candidates)
    factors = factors or _Factors(parts)
    factors.add(c.doc for c in candidates)
    weights = settings.weights
    others = [f for f in FACTORS if f != "relevance"]
    w_rel, band = weights["relevance"], settings.band
    norm = w_rel + band * sum(weights[f] for f in others) or 1.0
    for c in candidates:
        found, c.stale, penalty = factors.of[c.key]
        c.factors = {"relevance": c.relevance, **found}
        c.score = (w_rel * (c.relevance - penalty) + band * sum(weights[f] * found[f] for f in others)) / norm


def _in_window(parts: Parts, window: timeq.Window, kinds: list[str], k: int, warnings: list[str]) -> RecallResult:
    """The episodes of a time window, newest first: the answer to "what happened yesterday"."""
    if "episode" not in kinds:
        result = RecallResult([], mode="time", warnings=warnings)
        result.nothing_found = "only episodes have a time; ask for episodes"
        return result
    docs, limit = [], k
    while parts.index.exists():  # a scoped asker: ask further back until k it may read, or the window is done
        found = parts.index.episodes_between(window.since, window.until, limit)
        docs = [d for d in found if parts.readable is None or parts.readable(d["path"])][:k]
        if len(docs) >= k or len(found) < limit:
            break
        limit *= 4
    policy = Policy(parts.config.trust.trusted)
    own = parts.index.as_on_disk({d["path"] for d in docs})
    files: dict[str, bytes | None] = {}
    hits = []
    for d in docs:
        read = (d["body"], d["source"], d["created"]) if d["path"] in own else _episode_from_file(parts, d, files)
        if read is not None and windows.inside({"created": read[2]}, window):  # the file's time, not the row's
            text, source, created = read
            hits.append(Hit(kind="episode", id=d["id"], text=text, score=1.0, factors={}, source=source,
                            created=created, updated=created, path=d["path"],
                            extra={"trusted": policy.is_trusted(source)}))
    result = RecallResult(hits, mode="time", warnings=warnings)
    result.window = {"since": format_time(window.since) if window.since else None,
                     "until": format_time(window.until) if window.until else None, "phrase": window.phrase}
    if not hits:
        result.nothing_found = f"no episode in that time ({window.phrase})"
    return result


# ------------------------------------------------------------------------------------------------ hits
def _materialise(parts: Parts, ranked: list[Candidate], k: int, checked: set[str] | None = None,
                 include_superseded: bool = True, window: timeq.Window | None = None) -> list[Hit]:
    """The whole memories behind the best candidates, fresh: a fact from its file — or, when this recall has
    just stat'ed that file and found it as indexed (``checked``), from the index, which then holds its exact
    text — procedures from their files with their commit and blob (two git calls for all of them). An episode is
    the index's text when its file was checked too, or when nothing was checked (``checked`` None: a recall told
    not to look at the files); else (a team's shared row, which is what was written into the database, not this
    host's file) it is read from its file. A memory that vanished is not returned, nor, unless
    ``include_superseded``, a fact another superseded: by its file's word when it was read (a team's shared row that
    said so hid the fact from every host), else by the index this host built from it; nor an episode read from its
    file whose time is outside ``window`` (a since/until the index's rows were filtered by)."""
    policy = Policy(parts.config.trust.trusted)
    files: dict[str, bytes | None] = {}
    chosen: list[tuple[Candidate, Any]] = []
    procs: list[tuple[str, Any]] = []
    for c in ranked:
        if len(chosen) >= k:
            break
        if c.key[0] == "fact":
            fact = None
            if checked is None or c.doc["path"] not in checked:
                try:
                    fact = parts.facts.get(c.key[1])
                except (FactNotFound, FactParseError, InvalidValue):
                    continue
            if include_superseded or not hidden_by(c.doc, fact, parts.facts):
                chosen.append((c, fact))
        elif c.key[0] == "procedure":
            path = parts.procedures.root / c.doc["path"]
            if not path.is_file():
                continue
            chosen.append((c, None))
            procs.append((c.key[1], path))
        elif checked is None or c.doc["path"] in checked:
            chosen.append((c, None))
        else:
            read = _episode_from_file(parts, c.doc, files)
            if read is not None and (window is None or windows.inside({"created": read[2]}, window)):
                chosen.append((c, read))
    loaded: dict[str, Any] = {}
    if procs:
        try:
            loaded = {p.name: p for p in parts.procedures.get_many(procs)}
        except MemvaultError:
            for name, path in procs:
                try:
                    loaded[name] = parts.procedures.get(name, path=path)
                except MemvaultError:
                    continue
    hits: list[Hit] = []
    for c, fact in chosen:
        doc = c.doc
        base = dict(kind=doc["kind"], id=doc["id"], score=c.score, factors=c.factors, source=doc["source"],
                    created=doc["created"], updated=doc["updated"], path=doc["path"],
                    parts={"keyword": c.keyword, "semantic": c.semantic, "cosine": c.cosine, "exact": c.exact,
                           "time": c.timed, "feedback": c.moved, "general": c.general, "rest": c.rest})
        if doc["kind"] == "fact":
            if fact is not None:
                # Read from its file: who wrote it and when are the file's word too, not the index row's (a team's
                # shared row is what someone wrote into the database; the text beside it was never taken from there).
                base.update(source=fact.source, created=shown_time(index_time(fact.created)),
                            updated=shown_time(index_time(fact.updated)))
            extra: dict[str, Any] = {"trusted": vouched(policy, doc, fact, parts.facts), "stale": c.stale is not None}
            by = hidden_by(doc, fact, parts.facts)
            if by:  # by which fact only when the reader may read that one
                extra["superseded"] = True
                if parts.readable is None or parts.readable(f"facts/{by}.md"):
                    extra["superseded_by"] = by
            if c.stale is not None:
                extra["stale_reason"] = c.stale
            hits.append(Hit(text=fact.text if fact is not None else doc["body"], extra=extra, **base))
        elif doc["kind"] == "procedure":
            proc = loaded.get(doc["id"])
            if proc is None:
                continue
            hit = Hit(text=proc.text, commit=proc.commit, blob=proc.blob, extra={"trusted": True}, **base)
            if proc.dirty:
                hit.extra["dirty"] = True
            if c.runs:
                hit.extra["runs"] = [run_summary(r) for r in c.runs]
            hits.append(hit)
        else:
            text = doc["body"]
            if fact is not None:  # (its text, its source, its time) as its file holds it
                text, base["source"], base["created"] = fact
                base["updated"] = base["created"]
            hits.append(Hit(text=text, extra={"trusted": policy.is_trusted(base["source"])}, **base))
    return hits


def _episode_from_file(parts: Parts, doc: dict[str, Any], files: dict[str, bytes | None]
                       ) -> tuple[str, str, str | None] | None:
    """(text, source, created) of the episode ``doc`` stands for, as its file holds it now (None: the file holds no
    such episode, or one past [limits] episode_bytes, which the index never holds). ``files`` keeps each file's
    bytes for the other hits of one recall."""
    episode = parts.index.sources.episode_as_filed(doc["path"], doc["id"], files)
    if episode is None:
        return None
    return episode.text, episode.source, shown_time(index_time(episode.created_at))
