"""Near-duplicate and conflict detection between facts, by keywords.

A text is reduced to :class:`Keywords`: content *words* (lower case, stop words removed, plural ``-s`` folded)
and *values* (numbers, IPv4 addresses and ports, dates, times, versions, sizes). Similarity is measured on the
words alone, so that one differing number cannot hide two texts saying the same thing about different values;
the values then decide what the similarity means. Two similar texts whose values agree are a *duplicate*;
two similar texts whose values differ are a *conflict* ("listens on 5432" against "listens on 5433"), which
is reported as such and must never be merged.

:func:`groups` does this for a whole collection without comparing every pair: an inverted index from keyword
to items yields the candidate pairs, and keywords that occur in more than 5% of the items (``port``, ``db1``
in an ops vault) are left out of candidate generation, though they still count in the similarity.
"""
from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InvalidValue

DEFAULT_THRESHOLD = 0.60
DEFAULT_MIN_SHARED = 3
COMMON_FRACTION = 0.05  # keywords in more than this share of the items do not generate candidate pairs...
COMMON_FLOOR = 20  # ...unless the collection is so small that 5% means a handful of items

STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be been before being below between both
    but by can could did do does doing down during each either etc few for from further had has have having he
    her here hers him his how i if in into is it its itself just let may me might more most must my myself of
    off on once only onto or other our ours out over own per same shall she should so some such than that the their
    theirs them then there these they this those through thus to too under until up upon us very via was we
    were what when where which while who whom why will with would yet you your yours
    """.split()
)

_SIZE_UNITS = "kb|mb|gb|tb|pb|kib|mib|gib|tib|pib"
_TOKEN = re.compile(
    rf"""
      (?P<date>(?<!\d)\d{{4}}-\d{{2}}-\d{{2}}(?!\d))
    | (?P<ip>(?<![\d.])(?:\d{{1,3}}\.){{3}}\d{{1,3}}(?![\d]|\.\d))(?::(?P<port>\d{{1,5}})(?!\d))?(?P<cidr>/\d{{1,2}}(?!\d))?
    | (?P<time>(?:(?<=\d)T|(?<![\d.:]))(?P<hh>\d{{1,2}}):(?P<mm>\d{{2}})(?::(?P<ss>\d{{2}}))?(?:\.\d+)?Z?(?![\d:]))
    | (?P<size>(?<![\w.])(?P<amount>\d+(?:\.\d+)?)\s?(?P<unit>{_SIZE_UNITS})(?![a-z]))
    | (?P<version>(?<![\w.])v\d+(?:\.\d+)*(?![\w]))
    | (?P<grouped>(?<![\w.,])\d{{1,3}}(?:,\d{{3}})+(?![\d]|,\d))
    | (?P<num>\d+(?:\.\d+)*(?:%|[a-z]+(?:\d+[a-z]*)*)?)
    | (?P<word>[a-z][a-z0-9_]*)
    """,
    re.VERBOSE | re.IGNORECASE,
)


@dataclass(frozen=True)
class Keywords:
    """What a text is about (``words``) and the facts it states (``values``)."""

    words: frozenset[str]
    values: frozenset[str]


@dataclass(frozen=True)
class Match:
    """How two texts relate: ``kind`` is ``"duplicate"`` or ``"conflict"``.

    ``jaccard`` is over words and values for a duplicate, over words only for a conflict (whose values differ
    by definition). ``shared`` holds the shared keywords, ``differing`` the values only one text states.
    """

    kind: str
    jaccard: float
    shared: tuple[str, ...]
    differing: tuple[str, ...] = ()


def _fold(word: str) -> str:
    # Plural folding only: "listens"/"listen", "backups"/"backup"; "class", "status", "redis" stay whole.
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        if word.endswith("ies") and len(word) > 4:
            return word[:-3] + "y"
        return word[:-1]
    return word


def keywords(text: str) -> Keywords:
    """Split ``text`` into content words and values.

    Values are normalised so that equal facts compare equal: ``v2.15.1`` -> ``2.15.1``, ``500 GB`` -> ``500gb``,
    ``3:15`` -> ``03:15``, ``1,204`` -> ``1204``, ``10.8.0.4:5432`` -> ``10.8.0.4`` and ``5432``.
    """
    words: set[str] = set()
    values: set[str] = set()
    for m in _TOKEN.finditer(text):
        if m.group("date"):
            values.add(m.group("date"))
        elif m.group("ip"):
            values.add(m.group("ip") + (m.group("cidr") or ""))
            if m.group("port"):
                values.add(m.group("port"))
        elif m.group("time"):
            hhmm = f"{int(m.group('hh')):02d}:{m.group('mm')}"
            values.add(hhmm + (f":{m.group('ss')}" if m.group("ss") else ""))
        elif m.group("size"):
            values.add(m.group("amount") + m.group("unit").lower())
        elif m.group("version"):
            values.add(m.group("version")[1:].lower())
        elif m.group("grouped"):
            values.add(m.group("grouped").replace(",", ""))
        elif m.group("num"):
            values.add(m.group("num").lower())
        elif m.group("word"):
            word = m.group("word").lower().strip("_")
            if len(word) > 1 and word not in STOP_WORDS:
                words.add(_fold(word))
    return Keywords(frozenset(words), frozenset(values))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def compare_keywords(
    ka: Keywords, kb: Keywords, *, threshold: float = DEFAULT_THRESHOLD, min_shared: int = DEFAULT_MIN_SHARED
) -> Match | None:
    """:func:`compare` on keywords already extracted (what :func:`groups` uses to avoid re-tokenising)."""
    shared_words = ka.words & kb.words
    shared_values = ka.values & kb.values
    word_jaccard = _jaccard(ka.words, kb.words)
    if word_jaccard < threshold or len(shared_words) + len(shared_values) < min_shared:
        return None
    shared = tuple(sorted(shared_words | shared_values))
    only_a, only_b = _identifiers(ka.words - kb.words), _identifiers(kb.words - ka.words)
    if only_a and only_b:
        # "web1 serves 10.8.0.11" and "web2 serves 10.8.0.12": each names a host the other does not, so the
        # texts are about two things, not two claims about one thing.
        return None
    if ka.values and kb.values and ka.values != kb.values:
        return Match("conflict", word_jaccard, shared, tuple(sorted(ka.values ^ kb.values)))
    return Match("duplicate", _jaccard(ka.words | ka.values, kb.words | kb.values), shared)


def _identifiers(words: frozenset[str]) -> set[str]:
    """Words that name a thing (web1, db2, s3): letters and digits mixed."""
    return {w for w in words if any(c.isdigit() for c in w) and any(c.isalpha() for c in w)}


def _check(threshold: float, min_shared: int) -> None:
    if not 0.0 <= threshold <= 1.0:
        raise InvalidValue("threshold", f"must be between 0 and 1, not {threshold}")
    if min_shared < 0:
        raise InvalidValue("min_shared", f"must not be negative, not {min_shared}")


def compare(
    a: str, b: str, *, threshold: float = DEFAULT_THRESHOLD, min_shared: int = DEFAULT_MIN_SHARED
) -> Match | None:
    """Say whether ``a`` and ``b`` are duplicates, conflicting, or unrelated (``None``).

    They are related when the Jaccard similarity of their words is at least ``threshold`` and they share at
    least ``min_shared`` keywords (words and values). Related texts that both state values, and not the same
    ones, conflict; otherwise they are duplicates.
    """
    _check(threshold, min_shared)
    return compare_keywords(keywords(a), keywords(b), threshold=threshold, min_shared=min_shared)


def groups(
    items: Sequence[tuple[str, str]],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    min_shared: int = DEFAULT_MIN_SHARED,
) -> tuple[list[list[str]], list[tuple[str, str, Match]]]:
    """Find duplicate groups and conflicting pairs among ``items``, a sequence of ``(id, text)``.

    Returns ``(groups, conflicts)``: ``groups`` are the connected components of duplicate pairs (each sorted,
    the list sorted, singletons left out); ``conflicts`` are ``(id_a, id_b, match)`` with ``id_a < id_b``,
    sorted. Two items that conflict are never put in the same group, even through a third item that
    duplicates both. Items with the same id are the same item and are never compared.
    """
    _check(threshold, min_shared)
    ids = [item_id for item_id, _ in items]
    kws = [keywords(text) for _, text in items]
    n = len(items)

    postings: dict[str, list[int]] = {}
    for i, kw in enumerate(kws):
        for key in kw.words | kw.values:
            postings.setdefault(key, []).append(i)
    cap = max(COMMON_FLOOR, math.ceil(COMMON_FRACTION * n))
    rare_counts = [sum(1 for key in kw.words | kw.values if len(postings[key]) <= cap) for kw in kws]

    duplicates: list[tuple[float, int, int]] = []
    conflicts: list[tuple[str, str, Match]] = []
    conflicting: dict[int, set[int]] = {}
    for i, kw in enumerate(kws):
        mine = rare_counts[i]
        if not mine:
            continue
        counts: Counter[int] = Counter()
        for key in kw.words | kw.values:
            where = postings[key]
            if len(where) <= cap:
                counts.update(where[bisect_right(where, i):])  # postings are ascending: only later items
        for j, count in counts.items():
            # Common keywords were not counted, so an item whose few rare keywords are all shared may still
            # reach min_shared: compare it too.
            if count < min_shared and count < mine and count < rare_counts[j]:
                continue
            if ids[i] == ids[j]:
                continue
            match = compare_keywords(kw, kws[j], threshold=threshold, min_shared=min_shared)
            if match is None:
                continue
            if match.kind == "conflict":
                a, b = sorted((ids[i], ids[j]))
                conflicts.append((a, b, match))
                conflicting.setdefault(i, set()).add(j)
                conflicting.setdefault(j, set()).add(i)
            else:
                duplicates.append((match.jaccard, i, j))

    # Union-find over duplicate pairs, closest first, refusing a union that would put a conflict in one group.
    parent = list(range(n))
    members: dict[int, set[int]] = {i: {i} for i in range(n)}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for _, i, j in sorted(duplicates, key=lambda d: (-d[0], d[1], d[2])):
        ri, rj = find(i), find(j)
        if ri == rj:
            continue
        small, large = (ri, rj) if len(members[ri]) <= len(members[rj]) else (rj, ri)
        if any(conflicting.get(m, set()) & members[large] for m in members[small]):
            continue
        parent[small] = large
        members[large] |= members.pop(small)

    result = sorted(
        sorted({ids[m] for m in group}) for group in members.values() if len({ids[m] for m in group}) > 1
    )
    conflicts.sort(key=lambda c: (c[0], c[1]))
    return result, conflicts
