"""Recall of a time window: a question that names a time ("what broke last week") or ``--since``/``--until``.

The searches rank the whole vault; these are the steps that take the window into account: the searches asked
again, wider, while the window holds more episodes than they found (:func:`gather_within`), and the relevance of
what is not of the time divided (:func:`by_time`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..rules import timeq
from ..rules.freshness import stored_time
from .candidates import MAX_CANDIDATES, Candidate, Parts, Prepare, QueryVector, gather, width


def gather_within(parts: Parts, query: str, k: int, kinds: list[str], used_mode: str, qvec: QueryVector | Any,
                  prepare: Prepare | None, window: timeq.Window,
                  first: dict[tuple[str, str], Candidate]) -> dict[tuple[str, str], Candidate]:
    """``first`` (what :func:`gather` found for ``k``) without the episodes not inside a since/until window (for a
    time the question names, ``window.phrase``, all of them: it ranks its own first).

    The searches rank the whole vault, so a few days of six months' episodes held almost none of their best rows
    ("disk" --since 2d: nothing, with 79 such episodes there): they are asked again, wider, while fewer than k of
    the window's episodes were found, fewer than the window holds (:func:`held`, read only then), and a wider
    search is left. A window that holds none (a month of a year the vault has no memory of) is never searched
    wider: nothing there can be found."""
    only = not window.phrase

    def within(found: dict[tuple[str, str], Candidate]) -> dict[tuple[str, str], Candidate]:
        return {key: c for key, c in found.items() if not only or key[0] != "episode" or inside(c.doc, window)}

    candidates, wider, holds = within(first), k, None
    while "episode" in kinds and width(parts, wider) < MAX_CANDIDATES:
        found = sum(key[0] == "episode" and inside(c.doc, window) for key, c in candidates.items())
        if found >= k:
            break
        if holds is None:
            holds = held(parts, window, k)
        if found >= holds:
            break
        wider = min(width(parts, wider) * 10, MAX_CANDIDATES)
        candidates = within(gather(parts, query, wider, kinds, used_mode, qvec, prepare))
    return candidates


def held(parts: Parts, window: timeq.Window, k: int) -> int:
    """How many episodes the window holds, at most ``k`` (one read of the index's time order)."""
    return len(parts.index.episodes_between(window.since, window.until, k))


def inside(doc: dict[str, Any], window: timeq.Window) -> bool:
    stamp = stored_time(doc.get("created"))
    return stamp is not None and window.inside(stamp)


def by_time(candidates: Any, window: timeq.Window, slower: float, reads: int, graced: float = 1.0,
            vouched: Callable[[Candidate], bool] = lambda c: True) -> int:
    """Divide the relevance of every candidate not of the time a question named by ``slower``.

    A candidate is of the time when it was created in the window or, written after the window began, when its text
    names a time inside it. One written in the week after the window (:data:`timeq.GRACE`) whose text does not name
    it is probably of it (what happened is often written down later) but less surely: it is divided by ``graced``
    (between 1 and ``slower``). So is one whose text names the time but whose writer is not ``vouched`` for (an
    untrusted episode): its writer chose its text, not the time memvault wrote it down. Texts are read best first
    (ties by key) and at most ``reads`` of them (2k + 5: the hits shown and a margin), so a question that names a
    time costs a bounded read whatever the vault (a runbook's first 4,000 characters take 0.05-0.15 ms); with
    ``graced`` 1 the week after is of the time and its texts are not read. Returns how many candidates are of the
    time (those divided by ``graced`` included, unless ``graced`` is ``slower``)."""
    pending, of_time = [], 0
    probably = graced < slower  # the week after (or an unvouched text) still counts for something

    def divide(c: Candidate, by: float) -> None:
        c.relevance /= by
        c.timed = 1.0 / by

    for c in candidates:
        created = stored_time(c.doc.get("created"))
        if created is None or not window.may_tell(created):
            divide(c, slower)  # written before the time, or of no known time: not of it
        elif window.inside(created) or (graced <= 1.0 and window.holds(created)):
            of_time += 1
        else:
            pending.append((c, created))
    pending.sort(key=lambda pair: (-pair[0].relevance, pair[0].key))
    for i, (c, created) in enumerate(pending):
        named = i < reads and window.named_in(c.doc.get("body") or "", created)
        if named and vouched(c):
            of_time += 1
        elif named or window.holds(created):
            of_time += probably
            divide(c, graced)
        else:
            divide(c, slower)
    return of_time
