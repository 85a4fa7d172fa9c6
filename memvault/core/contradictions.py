"""Which stored facts a new text contradicts, in other words (see :mod:`memvault.rules.contradict`).

The candidates come from the index, as recall's do: the facts that share the most (rare) words with the text and
key, and, when a model is at hand whose vectors the index holds, the nearest facts by meaning, each with its
cosine. Each candidate is then judged on its subject words and typed values, which is a few set operations: the
whole check is one keyword query, at most one query vector, and a few dozen short texts read from the index's rows
(no file is opened). Without an index a small vault's facts are read from their files.

Facts already superseded by another (``superseded_by`` in their front matter) are not contradicted any more: the
one that superseded them is.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..rules.errors import MemvaultError, ModelUnavailable
from ..rules.trust import ACCEPTED_BY

if TYPE_CHECKING:
    from ..rules.contradict import Claims, Verdict
    from ..rules.dedup import Keywords
    from ..index.protocol import VaultIndex
    from ..models.engine import Engine
    from ..rules.config import Config
    from ..rules.trust import Policy
    from ..stores.facts import Fact, FactStore

#: Candidates asked of the keyword index, and of the vectors.
KEYWORD_CANDIDATES = 30
VECTOR_CANDIDATES = 10
#: At most this many contradictions reported for one text.
MAX_REPORTED = 5
#: Facts read from files when there is no index (a larger vault without an index is not checked).
FALLBACK_MAX = 1000
#: What an index row's ``ref`` holds for a fact another has superseded.
SUPERSEDED_REF = "superseded-by:"
#: A text up to this many characters has its readings (claims, keywords) kept for the next check: a listing of the
#: inbox judges each proposal against mostly the same stored facts (129 proposals over 200 facts read 11,000
#: texts, 8 s of a 10 s listing). Longer ones are read each time: a server's memo holds 2 x 1,024 short texts.
MEMO_CHARS = 4096


def claims(text: str, key: str | None = None) -> Claims:
    """``rules.contradict.extract(text, key)``, read once per text (see :data:`MEMO_CHARS`)."""
    return _claims(text, key) if len(text) <= MEMO_CHARS else _read_claims(text, key)


def text_keywords(text: str) -> Keywords:
    """``rules.dedup.keywords(text)``, read once per text (see :data:`MEMO_CHARS`)."""
    return _keywords(text) if len(text) <= MEMO_CHARS else _read_keywords(text)


def _read_claims(text: str, key: str | None) -> Claims:
    from ..rules import contradict  # recall imports this module; only a check needs the rule

    return contradict.extract(text, key)


def _read_keywords(text: str) -> Keywords:
    from ..rules import dedup

    return dedup.keywords(text)


_claims = lru_cache(maxsize=1024)(_read_claims)
_keywords = lru_cache(maxsize=1024)(_read_keywords)


def embedder_for(index: VaultIndex, engine: Engine, config: Config, *, load: bool) -> Any:
    """The model whose vectors the index holds, when it can be had: a warm one only (a write: never load a model
    for a check), or loaded when ``load`` (a person reading the inbox). None: keywords only."""
    try:
        identity = index.identity() if index.exists() else None
    except MemvaultError:
        return None
    if identity is None or not config.wants_model(identity):
        return None
    try:
        embedder = engine.get() if load else engine.warm()
    except ModelUnavailable:
        return None
    if embedder is None or not embedder.identity.same_vectors(identity):
        return None
    return embedder


def find(index: VaultIndex, facts: FactStore, key: str, text: str, *, embedder: Any = None,
         limit: int = MAX_REPORTED) -> list[dict[str, Any]]:
    """The stored facts ``text`` (to be stored under ``key``) contradicts, closest first: each
    ``{"key", "kind": "conflict", "values": {kind: {"new": [...], "stored": [...]}}, "differing", "shared",
    "overlap", "cosine"}``."""
    candidates = _candidates(index, facts, key, text, embedder)
    from ..rules.contradict import judge  # recall imports this module; only a check needs the rule

    mine = claims(text, key)
    found: list[tuple[str, Verdict]] = []
    for other_key, (body, cosine) in candidates.items():
        if other_key == key:
            continue
        verdict = judge(mine, claims(body, other_key), cosine=cosine)
        if verdict is not None and verdict.kind == "contradicts":
            found.append((other_key, verdict))
    found.sort(key=lambda kv: (-(kv[1].cosine or 0.0) - kv[1].overlap, kv[0]))
    return [entry(k, v) for k, v in found[:limit]]


def entry(key: str, verdict: Verdict) -> dict[str, Any]:
    """What a write, the inbox and the reports say of one contradiction."""
    differing = sorted({v for sides in verdict.values.values() for side in sides.values() for v in side})
    out: dict[str, Any] = {"key": key, "kind": "conflict", "values": verdict.values, "differing": differing,
                           "shared": list(verdict.shared), "overlap": verdict.overlap}
    if verdict.cosine is not None:
        out["cosine"] = round(verdict.cosine, 3)
    return out


def _candidates(index: VaultIndex, facts: FactStore, key: str, text: str,
                embedder: Any) -> dict[str, tuple[str, float | None]]:
    """key -> (text, cosine or None) of the stored facts worth judging."""
    out: dict[str, tuple[str, float | None]] = {}
    try:
        if index.exists():
            query = f"{key.replace('/', ' ').replace('-', ' ')} {text}"
            rowids = [r for r, _ in index.search_keywords(query, ["fact"], KEYWORD_CANDIDATES)]
            cosines: dict[int, float] = {}
            if embedder is not None:
                vector = embedder.embed_query(text)
                near = index.search_vectors(vector, ["fact"], VECTOR_CANDIDATES)
                cosines = dict(near)
                cosines.update(index.similarities(vector, [r for r in rowids if r not in cosines]))
                rowids += [r for r, _ in near if r not in rowids]
            for rowid, (doc, body) in _as_filed(index, facts, index.chunk_docs(rowids)).items():
                best = out.get(doc["id"])
                cosine = cosines.get(rowid)
                if best is None or (cosine or 0.0) > (best[1] or 0.0):
                    out[doc["id"]] = (body, cosine)
            return out
    except MemvaultError:
        out.clear()
    if len(facts.files()) > FALLBACK_MAX:
        return {}
    for fact in facts.iter([]):
        if not fact.extra.get("superseded_by"):
            out[fact.key] = (fact.text, None)
    return out


def near_duplicates(index: VaultIndex, facts: FactStore, config: Config, key: str,
                    text: str) -> list[dict[str, Any]]:
    """The facts ``text`` repeats or contradicts with the same words ([facts] duplicate_jaccard and
    duplicate_min_shared), each with the words shared and differing: candidates from one keyword query of the
    index, else (no index) the facts on disk of a small vault."""
    from ..rules.dedup import compare_keywords

    life = config.facts
    candidates: list[tuple[str, str]] | None = None
    try:
        if index.exists():
            rows = index.search_keywords(text, ["fact"], 50)
            candidates = [(d["id"], body) for d, body in
                          _as_filed(index, facts, index.chunk_docs([r for r, _ in rows])).values()]
    except MemvaultError:
        candidates = None
    if candidates is None:
        files = facts.files()
        if len(files) > FALLBACK_MAX:
            return []
        candidates = [(f.key, f.text) for f in facts.iter([])]
    out = []
    mine = text_keywords(text)
    for other_key, other_text in candidates:
        if other_key == key:
            continue
        theirs = text_keywords(other_text)
        match = compare_keywords(mine, theirs, threshold=life.duplicate_jaccard,
                                 min_shared=life.duplicate_min_shared)
        if match is not None:
            out.append({"key": other_key, "kind": match.kind, "jaccard": round(match.jaccard, 3),
                        "shared": list(match.shared), "differing": list(match.differing)})
            if match.kind == "conflict":
                out[-1]["values"] = {"value": {"new": sorted(mine.values - theirs.values),
                                               "stored": sorted(theirs.values - mine.values)}}
    return out


def _as_filed(index: VaultIndex, facts: FactStore, docs: dict[int, dict[str, Any]]
              ) -> dict[int, tuple[dict[str, Any], str]]:
    """Row id -> (doc, the fact's text) of the facts among ``docs`` that are not superseded: the index's text where it
    holds the file as it is (``as_on_disk``), else the file's (a team's shared row is anyone's to write: its words
    were what a write was told it contradicts). A row no file stands behind is left out."""
    from .publish import in_place

    own = index.as_on_disk({d["path"] for d in docs.values()})
    out: dict[int, tuple[dict[str, Any], str]] = {}
    for rowid, doc in docs.items():
        if doc["path"] in own:
            if not hidden_by(doc, None, facts):
                out[rowid] = (doc, doc["body"])
            continue
        try:
            fact = facts.get(doc["id"]) if in_place(doc) else None
        except MemvaultError:
            continue
        if fact is not None and not hidden_by(doc, fact, facts):
            out[rowid] = (doc, fact.text)
    return out


def superseded_by(doc: dict[str, Any], fact: Fact | None = None) -> str | None:
    """The key of the fact that superseded the one ``doc`` indexes: the ``superseded_by`` of its file when it was
    read (``fact``: a team's shared row is anyone's to write, and one saying so hid the fact from every host), else
    the mark the index holds."""
    if fact is not None:
        by = fact.extra.get("superseded_by")
        return by if isinstance(by, str) and by else None
    ref = str(doc.get("ref") or "")
    return (ref[len(SUPERSEDED_REF):] or None) if ref.startswith(SUPERSEDED_REF) else None


def hidden_by(doc: dict[str, Any], fact: Fact | None, facts: FactStore) -> str | None:
    """:func:`superseded_by`, while that fact is there: one removed since (``fact rm``, expire, a purge, a hand
    delete, a pull) stands for nothing, and the fact it superseded counts again rather than being hidden for good."""
    by = superseded_by(doc, fact)
    try:
        return by if by is not None and facts.exists(by) else None
    except MemvaultError:  # not a key at all: supersedes nothing
        return None


def vouched(policy: Policy, doc: dict[str, Any], fact: Fact | None, facts: FactStore) -> bool:
    """Whether a fact hit is trusted: its source is, or a trusted person accepted its text (``accepted_by``,
    :meth:`Policy.vouches`), by the file's word. A hit read from the index row alone (its file checked unchanged
    since indexed) and from an untrusted source has its file read for that: a row holds no acceptance."""
    source = (fact.source if fact is not None else doc.get("source")) or None
    if policy.is_trusted(source):
        return True
    if fact is None:
        try:
            fact = facts.get(str(doc.get("id")))
        except MemvaultError:
            return False
    return policy.vouches(source, fact.extra.get(ACCEPTED_BY))

