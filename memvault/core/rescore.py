"""The specific answer above the general one: the best candidates re-scored by how much of the question they hold.

BM25 rewards a memory for repeating a word, and meaning rewards it for being about the subject, so when several
memories share a question's subject ("the database"), the general ones that say it most outrank the one that
answers the rest of the question ("how often do we snapshot the database and where are copies stored"). The
**coverage** of a memory is the share of the question's IDF weight its words hold (rare words weigh more, each word
counted once however often it appears): among the ``depth`` most relevant candidates,

    relevance' = (1 - w)·relevance + w·coverage

and every other candidate keeps ``(1 - w)·relevance`` (coverage is never negative, so nothing from below the depth
can overtake one above it). ``w`` is ``[recall] coverage_weight``, chosen on folds of the dev sets
(``bench/eval_folds.py``).
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

#: How many of the best candidates are re-scored (the ones a coverage lookup is paid for).
DEPTH = 20


def rescore(relevance: Mapping[K, float], coverage: Mapping[K, float], weight: float,
            depth: int = DEPTH) -> dict[K, float]:
    """``relevance`` (key -> 0..1) re-scored by ``coverage`` (key -> 0..1; missing = 0) as the module doc says."""
    if not weight:
        return dict(relevance)
    top = sorted(relevance, key=lambda key: (-relevance[key], key))[:depth]  # ties: the order recall ranks in
    out = {key: (1 - weight) * value for key, value in relevance.items()}
    for key in top:
        out[key] += weight * coverage.get(key, 0.0)
    return out


def keyword_trust(coverage: float, full: float) -> float:
    """How much the keyword side of relevance counts for a question (0..1): in full when its best keyword match
    holds ``full`` of the question's IDF weight, in proportion below (``[recall] keyword_coverage``; 0: always in
    full). Keyword scores are divided by the best one's, so a match on one common word ("database") would otherwise
    look as strong as a match on every word, and outrank the memory that is about the question in meaning."""
    if not full:
        return 1.0
    return max(0.0, min(1.0, coverage / full))
