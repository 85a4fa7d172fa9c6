"""How fresh a memory is: when a fact is stale and why, and the hash under which recall remembers a text.

Pure functions (no I/O), shared by recall (which ranks before it reads files) and lifecycle (``memvault stale``).
"""
from __future__ import annotations

import functools
import hashlib
from datetime import datetime
from typing import Any

from .errors import MemvaultError
from .timeutil import now, parse_date, parse_time


def text_hash(text: str) -> str:
    """The hash under which recall remembers what it returned (whitespace-normalised, so re-wrapping a
    recalled memory does not make it new)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:32]


def stale_reason(fact: Any, review_after: float, current: datetime | None = None) -> str | None:
    """Why ``fact`` is stale, or None: ``valid_until`` passed, or not updated for longer than review_after."""
    current = current or now()
    if fact.valid_until is not None and fact.valid_until < current.date():
        return f"valid_until {fact.valid_until.isoformat()} has passed"
    period = fact.review_after or review_after
    if fact.updated is not None and (current - fact.updated).total_seconds() > period:
        days = int(period // 86400)
        return f"not updated since {fact.updated.date().isoformat()} (review after {days}d)"
    return None


def stale_doc_reason(valid_until: str | None, review_after: float | None, updated: str | None,
                     default_review: float, current: datetime) -> str | None:
    """The same rule on an index row (recall ranks before it reads files)."""
    if valid_until:
        try:
            if parse_date(valid_until) < current.date():
                return f"valid_until {valid_until} has passed"
        except MemvaultError:
            pass
    if updated:
        stamp = stored_time(updated)
        if stamp is None:
            return None
        period = review_after or default_review
        if (current - stamp).total_seconds() > period:
            return f"not updated since {stamp.date().isoformat()} (review after {int(period // 86400)}d)"
    return None


@functools.lru_cache(maxsize=65536)
def stored_time(stamp: str | None) -> datetime | None:
    """An index row's time (None when absent or unreadable), parsed once per process: recall reads the times of
    every candidate of every recall, and most recur."""
    if not stamp:
        return None
    try:
        return parse_time(stamp)
    except MemvaultError:
        return None
