"""A team's index, listed: the web view's listings (:mod:`memvault.core.browse`) of a team host read the team's
shared index, with this host's own files that differ from it (the overlay) and without the shared rows those
shadow, as recall does. While the shared index cannot be used, this host's fallback answers.

Each listing asks every part that answers the same question (the shared part with ``hide`` set to the paths this
host shadows) and merges: counts add up (no path is in two parts), pages are merged in their order, a page at
``offset`` asks each part for ``offset + limit`` rows.

A listed row of the shared index is what someone wrote into the database: each is read again from this host's file
(its source and so its trust mark, its text, its dates), as recall reads its hits, and left out when the file holds
no such memory; and left out when the file's memory does not match the listing's filters (by source, by trust, tag,
category, staleness, episode kind, session, time), which the database applied to what it held. What the database
leaves out is not looked for in the files, and its counts (a listing's total, the sources' numbers) are its own.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..index.documents import episode_fields, episode_listed, fact_listed
from ..index.listings import EpisodeQuery, FactQuery, episode_matches, fact_matches, sorted_sources
from ..rules.errors import MemvaultError, SearchIndexError
from ..rules.timeutil import index_time, shown_time
from .publish import in_place

if TYPE_CHECKING:
    from ..index import Index
    from ..index.postgres import SharedIndex
    from ..index.protocol import SearchIndex

T = TypeVar("T")


class TeamListings:
    """The listings of :class:`memvault.core.team.TeamIndex` (mixed into it; see the module doc)."""

    overlay: Index
    _shared: SharedIndex | None
    _use: Callable[[], SharedIndex | None]
    _shadow: Callable[[], frozenset[str]]
    failed: Callable[[BaseException, float], None]
    local_index: Callable[[], Index]

    # A row the overlay gives is always in place (read here); one of the shared index is dropped when it is not
    # (see memvault.core.publish.in_place): its path and its key would name two different memories.

    def _listed(self, ask: Callable[[SearchIndex, frozenset[str]], T]) -> list[T]:
        """``ask(part, hide)`` of every part that answers (:meth:`_answers`)."""
        return [found for _shared, found in self._answers(ask)]

    def _answers(self, ask: Callable[[SearchIndex, frozenset[str]], T]) -> list[tuple[bool, T]]:
        """(whether it is the shared index's, ``ask(part, hide)``) of every part that answers: the overlay and the
        shared index (hiding what this host shadows), or the fallback while the shared index cannot be used (or
        fails on the way: then it is marked down, as a recall would)."""
        shared = self._use()
        if shared is not None:
            started = time.monotonic()
            try:
                theirs = ask(shared, self._shadow())
            except SearchIndexError as exc:
                self.failed(exc, time.monotonic() - started)
            else:
                return ([(False, ask(self.overlay, frozenset()))] if self.overlay.exists() else []) + [(True, theirs)]
        return [(False, ask(self.local_index(), frozenset()))]

    def _fact_as_filed(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """A shared row of a fact as this host's file gives it, or None (no such fact here)."""
        try:
            return fact_listed(self.overlay.sources.facts.get(row["key"]), row["path"])
        except MemvaultError:
            return None

    def _episodes_as_filed(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shared rows of episodes as this host's files give them (each month file read once); one no file holds
        (or past [limits] episode_bytes, which the index never holds) is left out."""
        files: dict[str, bytes | None] = {}
        filed = [(row["path"], self.overlay.sources.episode_as_filed(row["path"], row["id"], files)) for row in rows]
        return [episode_listed(e, rel) for rel, e in filed if e is not None]

    def _runs_as_filed(self, name: str, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shared rows of runs of the runbook ``name`` (as ``runs_of`` gives them) as this host's files give them:
        when, by whom, exit code and commit are what an agent reads before it runs the runbook. One no file holds as
        a run of ``name`` is left out."""
        filed = self.overlay.sources.episodes_as_filed([(run["path"], run["id"]) for run in runs])
        out = []
        for run in runs:
            episode = filed.get((run["path"], run["id"]))
            row = episode_listed(episode, run["path"]) if episode is not None else None
            if row is None or row["ref"] != name:
                continue
            out.append({"id": row["id"], "created": row["created"], "text": row["body"], "path": row["path"],
                        "meta": episode_fields(episode, row["ref"]), "source": row["source"]})
        return out

    def listing_version(self) -> tuple[Any, ...]:
        return tuple(self._listed(lambda part, shadow: (part.listing_version(), hash(shadow))))

    def doc_counts(self, hide: Collection[str] = frozenset()) -> list[tuple[str, str | None, int]]:
        merged: dict[tuple[str, str | None], int] = {}
        for found in self._listed(lambda part, shadow: part.doc_counts(shadow | set(hide))):
            for kind, source, n in found:
                merged[(kind, source)] = merged.get((kind, source), 0) + n
        return [(kind, source, n) for (kind, source), n in merged.items()]

    def fact_keys(self, prefix: str, hide: Collection[str] = frozenset()) -> list[str]:
        return sorted({k for found in self._listed(lambda part, shadow: part.fact_keys(prefix, shadow | set(hide)))
                       for k in found})

    def fact_tags(self, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        merged: dict[str, int] = {}
        for found in self._listed(lambda part, shadow: part.fact_tags(shadow | set(hide))):
            for tag, n in found:
                merged[tag] = merged.get(tag, 0) + n
        return sorted(merged.items(), key=lambda tn: (-tn[1], tn[0]))

    def list_facts(self, query: FactQuery, limit: int, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        pages = self._answers(lambda part, shadow: part.list_facts(
            replace(query, hide=query.hide | shadow), offset + limit if limit > 0 else 0, 0))
        total = sum(n for _, (_, n) in pages)
        rows = [(shared, r) for shared, (rows, _) in pages for r in rows
                if in_place({"kind": "fact", "id": r["key"], "path": r["path"]})]
        rows.sort(key=lambda sr: sr[1]["key"])  # each part's in key order; merged in it
        page = rows[offset:offset + limit] if limit > 0 else []
        filed = (self._fact_as_filed(r) if shared else r for shared, r in page)
        return [r for r in filed if r is not None and fact_matches(query, r)], total

    def list_episodes(self, query: EpisodeQuery, limit: int) -> list[dict[str, Any]]:
        found = self._answers(lambda part, shadow: part.list_episodes(replace(query, hide=query.hide | shadow), limit))
        rows = [(shared, r) for shared, rows in found for r in rows
                if in_place({"kind": "episode", "id": r["id"], "path": r["path"]})]
        page = sorted(rows, key=lambda sr: (index_time(sr[1]["created"]) or "", sr[1]["id"]), reverse=True)[:limit]
        theirs = {r["id"]: r for r in self._episodes_as_filed([r for shared, r in page if shared])
                  if episode_matches(query, r)}
        return [theirs[r["id"]] if shared else r for shared, r in page if not shared or r["id"] in theirs]

    def _sessions_as_filed(self, found: list[tuple[Any, ...]], rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """The shared index's sessions (``found``) as this host's files give them, from ``rows``, every episode it
        counted in them: each read again (its source, so the session's trust, its time, its runtime), one whose file
        names none of those sessions left out, as is a session left with none."""
        asked = {s[0] for s in found}
        out: dict[str, list[Any]] = {}
        filed = self.overlay.sources.episodes_as_filed(
            [(r["path"], r["id"]) for r in rows if in_place({"kind": "episode", "id": r["id"], "path": r["path"]})])
        for episode in filed.values():
            fields = episode_fields(episode)
            session = fields.get("session")
            if session not in asked:
                continue
            at = index_time(episode.created_at) or ""
            have = out.setdefault(session, [session, None, set(), at, at, 0])
            have[1] = min((r for r in (have[1], fields.get("runtime")) if r is not None), default=None)
            have[2].add(episode.source)
            have[3], have[4], have[5] = min(have[3], at), max(have[4], at), have[5] + 1
        return [(s, rt, sorted_sources(src), shown_time(first), shown_time(last), n)
                for s, rt, src, first, last, n in out.values()]

    def sessions(self, limit: int, hide: Collection[str] = frozenset()) -> list[tuple[Any, ...]]:
        def ask(part: SearchIndex, shadow: frozenset[str]) -> list[tuple[Any, ...]]:
            found = part.sessions(limit, shadow | set(hide))
            if part is not self._shared:
                return found
            return self._sessions_as_filed(found, part.session_episodes([s[0] for s in found], shadow | set(hide)))

        merged: dict[str, list[Any]] = {}
        for found in self._listed(ask):
            for session, runtime, sources, first, last, n in found:
                have = merged.setdefault(session, [session, runtime, (), first, last, 0])
                have[1] = min((r for r in (have[1], runtime) if r is not None), default=None)
                have[2] = sorted_sources([*have[2], *sources])
                have[3] = min((t for t in (have[3], first) if t is not None), default=None, key=index_time)
                have[4] = max((t for t in (have[4], last) if t is not None), default=None, key=index_time)
                have[5] += n
        return [tuple(s) for s in sorted(merged.values(), key=lambda s: index_time(s[4]) or "", reverse=True)[:limit]]

    def session_episodes(self, sessions: list[str], hide: Collection[str] = frozenset()) -> list[dict[str, Any]]:
        return [row for found in self._listed(lambda part, shadow: part.session_episodes(sessions, shadow | set(hide)))
                for row in found]

    def episode_kinds(self, hide: Collection[str] = frozenset()) -> list[str]:
        return sorted({k for found in self._listed(lambda part, shadow: part.episode_kinds(shadow | set(hide)))
                       for k in found})

    def episode_days(self, since: str, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        merged: dict[str, int] = {}
        for found in self._listed(lambda part, shadow: part.episode_days(since, shadow | set(hide))):
            for day, n in found:
                merged[day] = merged.get(day, 0) + n
        return sorted(merged.items())

    def lag(self) -> dict[str, int]:
        """What this host's own part has not caught up with: the fallback's files while the shared index cannot be
        used, else the overlay's (what the shared index holds follows git: ``memvault stats`` says what is not
        published)."""
        return (self.overlay if self._use() is not None else self.local_index()).lag()
