"""Listings for people, in SQL over the SQLite index: facts by key prefix, tag, category, source, trust and
staleness; episodes newest first by source, kind, agent session and words; counts, tags, sessions, kinds and
growth per day. What they ask is a :class:`FactQuery` or an :class:`EpisodeQuery` (backend-neutral: the PostgreSQL
index answers the same ones in :mod:`memvault.index.postgres.listings`); rows come back as dicts with the keys of
:data:`FACT_KEYS` and :data:`EPISODE_KEYS`, times as :func:`memvault.rules.timeutil.format_time` writes them (the
index stores them as :data:`memvault.rules.timeutil.INDEX_TIME`, whose text order is time order), a date as
YYYY-MM-DD.
Presentation (trust, the stale reason, JSON fields) is :mod:`memvault.core.browse`'s.

Queries are written to start from an index (``tests/test_query_plans.py`` reads their ``EXPLAIN QUERY PLAN``):
facts from ``UNIQUE(kind, item_id)``, episodes from the partial index on their time. ``hide`` (paths not to list:
a team's shared rows this host shadows) adds ``path NOT IN (SELECT value FROM json_each(?))`` when not empty.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..rules.timeutil import bound_time, index_time, shown_time
from .db import FTS_SEARCHED
from .documents import meta_json
from .search import query_terms, shown_times

FACT_KEYS = ("key", "path", "source", "importance", "confidence", "created", "updated", "valid_until",
             "review_after", "meta", "excerpt")
EPISODE_KEYS = ("id", "path", "source", "created", "ekind", "body", "meta", "ref")
FACT_COLUMNS = ("item_id, path, source, importance, confidence, created, updated, valid_until, review_after, meta, "
                "substr(body, 1, 400)")
EPISODE_COLUMNS = "item_id, path, source, created, ekind, body, meta, ref"

FACTS_SQL = f"SELECT {FACT_COLUMNS} FROM docs WHERE kind = 'fact' AND item_id >= ? AND item_id < ?"
KEYS_SQL = "SELECT item_id FROM docs WHERE kind = 'fact' AND item_id >= ? AND item_id < ?"
EPISODES_SQL = f"SELECT {EPISODE_COLUMNS} FROM docs WHERE kind = 'episode'"
#: Newest first from the partial index on episode time (the planner would otherwise take UNIQUE(kind, item_id) and
#: sort every episode: 200 ms against 1 ms at 100k).
EPISODES_BY_TIME_SQL = f"SELECT {EPISODE_COLUMNS} FROM docs INDEXED BY docs_episode_time WHERE kind = 'episode'"
COUNTS_SQL = "SELECT kind, source, COUNT(*) FROM docs WHERE 1"
EPISODE_DAYS_SQL = ("SELECT substr(created, 1, 10) AS day, COUNT(*) FROM docs WHERE kind = 'episode' "
                    "AND created >= ?")
# every source of a session: a session id is a field of the line's meta, which any source may name
SESSIONS_SQL = ("SELECT json_extract(meta, '$.session') AS s, MIN(json_extract(meta, '$.runtime')), "
                "json_group_array(DISTINCT source), "
                "MIN(created), MAX(created), COUNT(*) FROM docs WHERE kind = 'episode' AND meta IS NOT NULL "
                "AND s IS NOT NULL")
SESSION_EPISODES_SQL = ("SELECT item_id, path FROM docs WHERE kind = 'episode' AND meta IS NOT NULL "
                        "AND json_extract(meta, '$.session') IN (SELECT value FROM json_each(?))")
TAGS_SQL = ("SELECT t.value, COUNT(*) FROM docs, json_each(docs.meta, '$.tags') AS t "
            "WHERE docs.kind = 'fact' AND docs.meta IS NOT NULL")
EKINDS_SQL = "SELECT DISTINCT ekind FROM docs WHERE kind = 'episode' AND ekind IS NOT NULL"
# docs.path: a query that joins json_each (the tags) has a path column of its own.
HIDE_SQL = " AND docs.path NOT IN (SELECT value FROM json_each(?))"


@dataclass(frozen=True)
class Stale:
    """What makes a fact stale at ``at`` (see :func:`memvault.rules.freshness.stale_doc_reason`): past its
    ``valid_until``, or not updated for its ``review_after`` seconds (``default_review`` when it sets none)."""

    at: datetime
    default_review: float


@dataclass(frozen=True)
class FactQuery:
    """Which facts a listing wants: under a key ``prefix`` ('' for all), with a tag, a category, a source, one of
    ``sources`` (None: any; empty: none), stale ones only; never those at the paths in ``hide``."""

    prefix: str = ""
    tag: str | None = None
    category: str | None = None
    source: str | None = None
    sources: tuple[str, ...] | None = None
    stale: Stale | None = None
    hide: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class EpisodeQuery:
    """Which episodes a listing wants: by source, episode kind, agent session, words (all of them), one of
    ``sources``, created before or after a time, one episode by id; never those at the paths in ``hide``. With
    ``before_id``, ``before`` is where the last page ended: the lines of that very time whose id sorts below
    ``before_id`` come too (a page may end inside a run of lines of one time)."""

    source: str | None = None
    kind: str | None = None
    session: str | None = None
    text: str | None = None
    sources: tuple[str, ...] | None = None
    before: str | None = None
    after: str | None = None
    item_id: str | None = None
    before_id: str | None = None
    hide: frozenset[str] = field(default_factory=frozenset)


def _fields(meta: Any) -> dict[str, Any]:
    try:
        fields = json.loads(meta) if isinstance(meta, str) else {}
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


def _by_source(source: str | None, wanted: str | None, sources: tuple[str, ...] | None) -> bool:
    return (wanted is None or source == wanted) and (sources is None or source in sources)


def fact_matches(query: FactQuery, row: dict[str, Any]) -> bool:
    """Whether a fact's listing row (:data:`FACT_KEYS`; one read from its file) is one ``query`` asks for, as
    :func:`facts_sql` says it: a team host asks this of each shared row it read again from its file, since the
    database's filters were applied to what the database held (a row whose source was rewritten passed "trusted")."""
    fields = _fields(row.get("meta"))
    tags = fields.get("tags")
    if not _by_source(row.get("source"), query.source, query.sources):
        return False
    if query.tag is not None and not (isinstance(tags, list) and query.tag in tags):
        return False
    if query.category is not None and fields.get("category") != query.category:
        return False
    low, high = prefix_range(query.prefix)
    if not low <= row["key"] < high:
        return False
    if query.stale is not None:
        from ..rules.freshness import stale_doc_reason

        return stale_doc_reason(row.get("valid_until"), row.get("review_after"), row.get("updated"),
                                query.stale.default_review, query.stale.at) is not None
    return True


def episode_matches(query: EpisodeQuery, row: dict[str, Any]) -> bool:
    """Whether an episode's listing row (:data:`EPISODE_KEYS`; one read from its file) is one ``query`` asks for, as
    :func:`episodes_sql` says it, but for its words (``text``: stemmed by each backend's own rules), as
    :func:`fact_matches` for facts."""
    if not _by_source(row.get("source"), query.source, query.sources):
        return False
    if (query.item_id is not None and row["id"] != query.item_id) or \
            (query.kind is not None and row.get("ekind") != query.kind):
        return False
    if query.session is not None and _fields(row.get("meta")).get("session") != query.session:
        return False
    created = index_time(row.get("created")) or ""
    if query.after and not created > bound_time(query.after, "after"):
        return False
    if query.before:
        before = bound_time(query.before, "before")
        return created < before or (query.before_id is not None and created == before
                                    and row["id"].encode() < query.before_id.encode())
    return True


def prefix_range(prefix: str) -> tuple[str, str]:
    """The item_id range [low, high) of the keys under ``prefix`` ('' for all): an index range, not a LIKE."""
    if not prefix:
        return "", "\U0010ffff"
    low = prefix.rstrip("/") + "/"
    return low, low[:-1] + chr(ord("/") + 1)


def stale_sql(stale: Stale) -> tuple[str, tuple[Any, ...]]:
    """The SQL condition (on ``docs``) of a stale fact, as :func:`memvault.rules.freshness.stale_doc_reason`."""
    at = stale.at
    cutoff = index_time(at - timedelta(seconds=stale.default_review))
    return ("((valid_until IS NOT NULL AND valid_until < ?) OR (updated IS NOT NULL AND ("
            "(COALESCE(review_after, 0) = 0 AND updated < ?) OR "
            "(review_after > 0 AND julianday(?) - julianday(updated) > review_after / 86400.0))))",
            (at.date().isoformat(), cutoff, index_time(at)))


def _where(sql: str, args: list[Any], conditions: list[tuple[str, Any]], sources: Collection[str] | None,
           hide: Collection[str]) -> tuple[str, list[Any]]:
    """``sql`` with each condition whose value is given, the source filter (None: any), and ``hide``."""
    for condition, value in conditions:
        if value:
            sql += f" AND {condition}"
            args.extend(value) if isinstance(value, tuple) else args.append(value)
    if sources is not None:
        sql += f" AND source IN ({','.join('?' * len(sources))})" if sources else " AND 0"
        args += list(sources)
    return _hidden(sql, args, hide)


def _hidden(sql: str, args: list[Any], hide: Collection[str]) -> tuple[str, list[Any]]:
    if hide:
        sql += HIDE_SQL
        args.append(json.dumps(sorted(hide)))
    return sql, args


def facts_sql(query: FactQuery) -> tuple[str, tuple[Any, ...]]:
    """The SQL of a fact listing (without order and page), for its plan to be read."""
    # instr() on the JSON text first: a cheap test that spares parsing the fields of every other fact.
    tag, category = query.tag, query.category
    sql, args = _where(FACTS_SQL, list(prefix_range(query.prefix)), [
        ("instr(meta, ?) > 0", meta_json(tag) if tag else None),
        ("EXISTS (SELECT 1 FROM json_each(docs.meta, '$.tags') WHERE value = ?)", tag),
        ("instr(meta, ?) > 0", meta_json(category) if category else None),
        ("json_extract(meta, '$.category') = ?", category), ("source = ?", query.source)],
        query.sources, query.hide)
    if query.stale is not None:
        cond, extra = stale_sql(query.stale)
        sql += f" AND {cond}"
        args += extra
    return sql, tuple(args)


def episodes_sql(query: EpisodeQuery) -> tuple[str, tuple[Any, ...]]:
    """The SQL of an episode listing (without order and limit), for its plan to be read."""
    terms = query_terms(query.text) if query.text else []
    session = query.session
    before = bound_time(query.before, "before") if query.before else None
    sql, args = _where(EPISODES_SQL if terms or query.item_id else EPISODES_BY_TIME_SQL, [], [
        ("item_id = ?", query.item_id), ("created < ?", None if query.before_id else before),
        ("(created, item_id) < (?, ?)", (before, query.before_id) if before and query.before_id else None),
        ("created > ?", bound_time(query.after, "after") if query.after else None),
        ("source = ?", query.source), ("ekind = ?", query.kind),
        ("instr(meta, ?) > 0", meta_json(session) if session else None),
        ("json_extract(meta, '$.session') = ?", session)], query.sources, query.hide)
    if terms:
        expr = f"{FTS_SEARCHED} : (" + " AND ".join(f'"{t}"' for t in terms) + ') AND kind : "episode"'
        sql += (" AND doc IN (SELECT c.doc FROM chunks c WHERE c.rowid IN "
                "(SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?))")
        args.append(expr)
    return sql, tuple(args)


def list_facts(conn: sqlite3.Connection, query: FactQuery, limit: int, offset: int) -> tuple[list[dict[str, Any]],
                                                                                             int]:
    sql, args = facts_sql(query)
    total = conn.execute(f"SELECT COUNT(*) FROM ({sql})", args).fetchone()[0]
    if limit <= 0:
        return [], total
    rows = conn.execute(sql + " ORDER BY item_id LIMIT ? OFFSET ?", (*args, limit, max(0, offset))).fetchall()
    return [shown_times(dict(zip(FACT_KEYS, row))) for row in rows], total


def list_episodes(conn: sqlite3.Connection, query: EpisodeQuery, limit: int) -> list[dict[str, Any]]:
    sql, args = episodes_sql(query)
    rows = conn.execute(sql + " ORDER BY created DESC, item_id DESC LIMIT ?", (*args, limit)).fetchall()
    return [shown_times(dict(zip(EPISODE_KEYS, row))) for row in rows]


def fact_keys(conn: sqlite3.Connection, prefix: str, hide: Collection[str]) -> list[str]:
    sql, args = _hidden(KEYS_SQL, list(prefix_range(prefix)), hide)
    return [r[0] for r in conn.execute(sql + " ORDER BY item_id", args)]


def doc_counts(conn: sqlite3.Connection, hide: Collection[str]) -> list[tuple[str, str | None, int]]:
    sql, args = _hidden(COUNTS_SQL, [], hide)
    return [(k, s, n) for k, s, n in conn.execute(sql + " GROUP BY kind, source", args)]


def fact_tags(conn: sqlite3.Connection, hide: Collection[str]) -> list[tuple[str, int]]:
    sql, args = _hidden(TAGS_SQL, [], hide)
    return [(str(t), n) for t, n in conn.execute(sql + " GROUP BY t.value ORDER BY COUNT(*) DESC, t.value", args)]


def sorted_sources(sources: Collection[str | None]) -> tuple[str | None, ...]:
    """A session's sources in one order on every index (None, a line written by hand, first)."""
    return tuple(sorted(set(sources), key=lambda s: (s is not None, s or "")))


def sessions(conn: sqlite3.Connection, limit: int, hide: Collection[str]) -> list[tuple[Any, ...]]:
    sql, args = _hidden(SESSIONS_SQL, [], hide)
    rows = conn.execute(sql + " GROUP BY s ORDER BY MAX(created) DESC LIMIT ?", (*args, limit))
    return [(s, rt, sorted_sources(json.loads(src)), shown_time(first), shown_time(last), n)
            for s, rt, src, first, last, n in rows]


def session_episodes(conn: sqlite3.Connection, sessions: list[str], hide: Collection[str]) -> list[dict[str, Any]]:
    """(id, path) of every episode of ``sessions``: what :func:`sessions` counted."""
    sql, args = _hidden(SESSION_EPISODES_SQL, [json.dumps(sessions)], hide)
    return [{"id": i, "path": p} for i, p in conn.execute(sql, args)]


def episode_kinds(conn: sqlite3.Connection, hide: Collection[str]) -> list[str]:
    sql, args = _hidden(EKINDS_SQL, [], hide)
    return [r[0] for r in conn.execute(sql + " ORDER BY ekind", args)]


def episode_days(conn: sqlite3.Connection, since: str, hide: Collection[str]) -> list[tuple[str, int]]:
    sql, args = _hidden(EPISODE_DAYS_SQL, [bound_time(since, "since")], hide)
    return [(d, n) for d, n in conn.execute(sql + " GROUP BY day ORDER BY day", args)]


def lag(conn: sqlite3.Connection, disk: dict[str, tuple[str, int, int, int]]) -> dict[str, int]:
    """Files the index has not caught up with: changed, new and removed since it last read them."""
    known = {path: (size, mtime, ino) for path, size, mtime, ino in conn.execute(
        "SELECT path, size, mtime_ns, ino FROM files")}
    changed = sum(1 for rel, st in disk.items() if rel in known and tuple(st[1:4]) != known[rel])
    return {"changed": changed, "new": sum(1 for rel in disk if rel not in known),
            "removed": sum(1 for rel in known if rel not in disk)}


class Listings:
    """The listings of the SQLite index, mixed into :class:`memvault.index.Index` (whose ``exists``,
    ``connection``, ``current_target`` and ``scan`` they use): each reads nothing when the index does not exist."""

    exists: Callable[[], bool]
    connection: Callable[[], sqlite3.Connection]
    current_target: Callable[[], Any]
    scan: Callable[[], dict[str, tuple[str, int, int, int]]]

    def listing_version(self) -> tuple[Any, ...]:
        """Changes whenever the index does (another process's commit, a write here, a generation swap)."""
        if not self.exists():
            return (None,)
        conn = self.connection()
        return (str(self.current_target()), conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)

    def doc_counts(self, hide: Collection[str] = frozenset()) -> list[tuple[str, str | None, int]]:
        return doc_counts(self.connection(), hide) if self.exists() else []

    def fact_keys(self, prefix: str, hide: Collection[str] = frozenset()) -> list[str]:
        return fact_keys(self.connection(), prefix, hide) if self.exists() else []

    def fact_tags(self, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        return fact_tags(self.connection(), hide) if self.exists() else []

    def list_facts(self, query: FactQuery, limit: int, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        return list_facts(self.connection(), query, limit, offset) if self.exists() else ([], 0)

    def list_episodes(self, query: EpisodeQuery, limit: int) -> list[dict[str, Any]]:
        return list_episodes(self.connection(), query, limit) if self.exists() else []

    def sessions(self, limit: int, hide: Collection[str] = frozenset()) -> list[tuple[Any, ...]]:
        return sessions(self.connection(), limit, hide) if self.exists() else []

    def session_episodes(self, sessions: list[str], hide: Collection[str] = frozenset()) -> list[dict[str, Any]]:
        return session_episodes(self.connection(), sessions, hide) if sessions and self.exists() else []

    def episode_kinds(self, hide: Collection[str] = frozenset()) -> list[str]:
        return episode_kinds(self.connection(), hide) if self.exists() else []

    def episode_days(self, since: str, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        return episode_days(self.connection(), since, hide) if self.exists() else []

    def lag(self) -> dict[str, int]:
        return lag(self.connection(), self.scan()) if self.exists() else {"changed": 0, "new": 0, "removed": 0}
