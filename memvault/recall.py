"""Recall: hybrid (keyword + semantic) search over facts, episodes and procedures, ranked on five factors.

    score = w_rel·relevance + w_imp·importance + w_conf·confidence + w_rec·recency + w_freq·frequency

- relevance: ``s·semantic + (1-s)·keyword`` where semantic is the cosine similarity to the query divided by the
  best candidate's, and ``s`` is ``[recall] semantic_weight``. keyword is ``(terms + p·pairs) / (1 + p)``: terms
  is BM25 over the query's words divided by the best candidate's, pairs the same over consecutive word pairs
  taken as phrases, and ``p`` is ``[recall] phrase_weight``. Candidates are the union of FTS5 BM25 (any query
  term may match) and the vector search; every candidate gets both scores. A memory split in chunks (a long
  procedure) takes its best chunk, and is returned whole.
- importance, confidence: as stored (facts' front matter; defaults for episodes and procedures).
- recency: ``0.5 ** (age / half_life)``, age since the later of the last update and the last use.
- frequency: from ``.memvault/state.db`` (see :mod:`memvault.state`).

One pass: the index snapshot (connection, model identity, settings) is taken once; the files of the hits about to
be returned are stat'ed, and when one changed since it was indexed only that file is re-indexed and only the
search is run again, once. Procedure provenance for all hits comes from two git calls.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .config import FACTORS, Config
from .hits import Hit, RecallResult, count_tokens  # noqa: F401 - count_tokens is part of recall's API
from .errors import FactNotFound, FactParseError, InvalidValue, MemvaultError, ModelUnavailable
from .index import KINDS, Index
from .lifecycle import stale_doc_reason, text_hash
from .timeutil import now, parse_time
from .trust import Policy

if TYPE_CHECKING:
    from .engine import Engine
    from .facts import FactStore
    from .procedures import ProcedureStore
    from .state import State

FREQUENCY_CAP = 50
MODES = ("hybrid", "keyword", "vector")
FORMATS = ("text", "json", "prompt")
K_MAX = 1000


@dataclass
class Parts:
    """What recall reads: the index, the stores, the usage state, the settings and the model."""

    index: Index
    facts: FactStore
    procedures: ProcedureStore
    state: Callable[[], State]
    config: Config
    engine: Engine


def check_arguments(query: object, k: object, kinds: Sequence[str] | None, budget: object, mode: str,
                    fmt: str) -> list[str]:
    if not isinstance(query, str) or not query.strip():
        raise InvalidValue("query", "must not be empty")
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
           verify: bool = True) -> RecallResult:
    """Find the ``k`` best memories for ``query`` (see the module doc for the ranking)."""
    kinds = check_arguments(query, k, kinds, budget, mode, fmt)
    warnings: list[str] = []
    try:
        return _recall(parts, query, k, kinds, budget, mode, fmt, sync, record_access, verify, warnings)
    except Exception as exc:
        if not parts.index.guard(exc):
            raise
    # The index was damaged and has been moved aside: rebuild its text from the files and answer from that
    # (the vectors come back piecemeal, with each recall, or at once with 'memvault reindex').
    parts.index.sync(splitter=parts.engine.warm())
    return _recall(parts, query, k, kinds, budget, mode, fmt, True, record_access, False, warnings)


def _recall(parts: Parts, query: str, k: int, kinds: list[str], budget: int | None, mode: str, fmt: str, sync: bool,
            record_access: bool, verify: bool, warnings: list[str]) -> RecallResult:
    index, config = parts.index, parts.config
    settings = config.recall
    semantic = mode != "keyword"
    if sync:
        report = index.refresh(settings.rescan_interval)
        if report is not None:
            warnings += report.warnings
    warnings += index.warnings
    index.warnings.clear()
    identity = index.identity()
    if semantic and identity is not None and not config.wants_model(identity):
        warnings.append(f"memvault.toml asks for model {config.model!r} but the index holds vectors of "
                        f"{identity.name!r}: keyword-only results until 'memvault reindex' rebuilds it")
        semantic = False
    embedder = None
    if semantic:
        try:
            embedder = parts.engine.get()
        except ModelUnavailable as exc:
            warnings.append(f"{exc}; keyword-only results")
    if embedder is not None and identity is not None and not embedder.identity.same_vectors(identity):
        warnings.append(f"the loaded model {embedder.identity.name}@{embedder.identity.revision[:12]} differs from "
                        f"the index's {identity.name}@{identity.revision[:12]}: keyword-only until 'memvault reindex'")
        embedder = None
    if embedder is not None and sync:
        pending = index.embed(embedder, limit=settings.embed_at_recall)
        warnings += pending.warnings
        if pending.chunks_pending:
            warnings.append(f"{pending.chunks_pending} changed chunks are indexed for keywords only until "
                            "'memvault reindex' embeds them (each recall embeds the next ones)")
    qvec = embedder.embed_query(query) if embedder is not None and index.identity() is not None else None
    used_mode = mode if qvec is not None else "keyword"
    if mode == "vector" and qvec is None:
        return RecallResult([], mode="vector", warnings=warnings)

    scored = _search(parts, query, k, kinds, used_mode, qvec)
    if sync and verify:
        # Stat the files behind what is about to be returned (and a margin): one edited in place since it was
        # indexed is re-indexed and the search run again, once; a hit never rests on text that is gone.
        changed = index.verify({doc["path"] for _, _, _, doc in scored[: 2 * k + 5]})
        if changed is not None and changed.changed:
            warnings += changed.warnings
            if embedder is not None:
                index.embed(embedder, limit=settings.embed_at_recall)
            scored = _search(parts, query, k, kinds, used_mode, qvec)

    hits = _materialise(parts, scored, k)
    if budget is not None:
        from .render import trim_to_budget

        hits = trim_to_budget(hits, budget, fmt)
    if record_access and hits:
        try:
            state = parts.state()
            state.record_shown({(h.kind, h.id): 1.0 for h in hits},
                               texts=[(text_hash(h.text), h.kind, h.id) for h in hits])
            warnings += state.warnings
            state.warnings.clear()
        except MemvaultError as exc:
            warnings.append(f"usage not recorded: {exc}")
    return RecallResult(hits, mode=used_mode, warnings=warnings)


def _search(parts: Parts, query: str, k: int, kinds: list[str], used_mode: str,
            qvec: Any) -> list[tuple[float, tuple[str, str], dict[str, float], dict[str, Any]]]:
    """Candidates from both searches, each with both scores, ranked on the five factors."""
    index, config = parts.index, parts.config
    settings = config.recall
    n = min(max(settings.candidates, k), 4096)
    keyword = dict(index.search_keywords(query, kinds, n)) if used_mode != "vector" else {}
    phrases = dict(index.search_phrases(query, kinds, n)) if used_mode != "vector" and settings.phrase_weight else {}
    exact = set(index.search_exact(query, kinds, n)) if used_mode != "vector" and settings.exact_boost else set()
    cosine: dict[int, float] = {}
    if qvec is not None:
        cosine = dict(index.search_vectors(qvec, kinds, n))
        # Every keyword-side candidate (words, phrases, exact quotes) gets its exact cosine too.
        missing = (set(keyword) | set(phrases) | exact) - set(cosine)
        if missing:
            cosine.update(index.similarities(qvec, sorted(missing)))
    rowids = set(keyword) | set(phrases) | set(cosine) | exact
    if not rowids:
        return []
    docs = index.chunk_docs(list(rowids))
    s = settings.semantic_weight if used_mode == "hybrid" else (1.0 if used_mode == "vector" else 0.0)
    best_kw = max(keyword.values(), default=0.0) or 1.0
    best_phrase = max(phrases.values(), default=0.0) or 1.0
    p = settings.phrase_weight
    best_cos = max((c for c in cosine.values() if c > 0), default=0.0) or 1.0
    best: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
    for rowid in rowids:
        doc = docs.get(rowid)
        if doc is None:
            continue
        kw = (keyword.get(rowid, 0.0) / best_kw + p * phrases.get(rowid, 0.0) / best_phrase) / (1 + p)
        rel = s * max(0.0, cosine.get(rowid, 0.0)) / best_cos + (1 - s) * kw
        if exact:
            # Quoting a memory word for word is the strongest evidence there is: quoted chunks rank first.
            rel = 1.0 if rowid in exact else rel * (1 - settings.exact_boost)
        key = (doc["kind"], doc["id"])
        if key not in best or rel > best[key][0]:
            best[key] = (rel, doc)

    usage = parts.state().get(best.keys())
    current = now()
    weights = settings.weights
    total_weight = sum(weights.values())
    scored = []
    for key, (rel, doc) in best.items():
        u = usage.get(key)
        last_use = max((t for t in ((u.last_used, u.last_shown) if u else ()) if t is not None), default=None)
        count = (u.uses + u.shown) if u else 0.0
        factors = {
            "relevance": min(1.0, rel),
            "importance": float(doc["importance"]),
            "confidence": float(doc["confidence"]),
            "recency": _recency(doc.get("updated") or doc.get("created"), last_use, current, settings.half_life),
            "frequency": min(1.0, math.log1p(count) / math.log1p(FREQUENCY_CAP)),
        }
        score = sum(weights[f] * factors[f] for f in FACTORS) / total_weight
        reason = None
        if doc["kind"] == "fact":
            reason = stale_doc_reason(doc.get("valid_until"), doc.get("review_after"), doc.get("updated"),
                                      config.facts.review_after, current)
        if reason is not None:
            score *= config.facts.stale_factor
        doc["stale"] = reason
        scored.append((score, key, factors, doc))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return scored


def _recency(stamp: str | None, last_access: datetime | None, current: datetime, half_life: float) -> float:
    times = [t for t in (_parse(stamp), last_access) if t is not None]
    if not times:
        return 0.0
    age = max(0.0, (current - max(times)).total_seconds())
    return 0.5 ** (age / half_life)


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return parse_time(stamp)
    except MemvaultError:
        return None


def _materialise(parts: Parts, scored: list[tuple[float, tuple[str, str], dict[str, float], dict[str, Any]]],
                 k: int) -> list[Hit]:
    """The whole memories behind the best rows, read fresh: a fact from its file, procedures from their files
    with their commit and blob (two git calls for all of them). A memory that vanished is not returned."""
    policy = Policy(parts.config.trust.trusted)
    chosen: list[tuple[float, dict[str, float], dict[str, Any], Any]] = []
    procs: list[tuple[str, Any]] = []
    for score, _key, factors, doc in scored:
        if len(chosen) >= k:
            break
        if doc["kind"] == "fact":
            try:
                fact = parts.facts.get(doc["id"])
            except (FactNotFound, FactParseError, InvalidValue):
                continue
            chosen.append((score, factors, doc, fact))
        elif doc["kind"] == "procedure":
            path = parts.procedures.root / doc["path"]
            if not path.is_file():
                continue
            chosen.append((score, factors, doc, None))
            procs.append((doc["id"], path))
        else:
            chosen.append((score, factors, doc, None))
    loaded: dict[str, Any] = {}
    if procs:
        try:
            loaded = {p.name: p for p in parts.procedures.get_many(procs)}
        except MemvaultError:
            loaded = {}
            for name, path in procs:
                try:
                    loaded[name] = parts.procedures.get(name, path=path)
                except MemvaultError:
                    continue
    hits: list[Hit] = []
    for score, factors, doc, fact in chosen:
        base = dict(kind=doc["kind"], id=doc["id"], score=score, factors=factors, source=doc["source"],
                    created=doc["created"], updated=doc["updated"], path=doc["path"])
        if doc["kind"] == "fact":
            extra: dict[str, Any] = {"trusted": True, "stale": doc.get("stale") is not None}
            if doc.get("stale"):
                extra["stale_reason"] = doc["stale"]
            hits.append(Hit(text=fact.text, extra=extra, **base))
        elif doc["kind"] == "procedure":
            proc = loaded.get(doc["id"])
            if proc is None:
                continue
            hit = Hit(text=proc.text, commit=proc.commit, blob=proc.blob, extra={"trusted": True}, **base)
            if proc.dirty:
                hit.extra["dirty"] = True
            hits.append(hit)
        else:
            hits.append(Hit(text=doc["body"], extra={"trusted": policy.is_trusted(doc["source"])}, **base))
    return hits
