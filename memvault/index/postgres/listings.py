"""The listings of the shared index: the same :class:`~memvault.index.listings.FactQuery` and
:class:`~memvault.index.listings.EpisodeQuery` the SQLite index answers, over one vault's ``docs`` table, rows with
the same keys and times as the SQLite index gives them (RFC 3339 text in UTC, a date as YYYY-MM-DD), so a team
host's web view reads the team's index.

Facts start from ``UNIQUE (kind, item_id)`` (a key range), episodes from the partial index on their time, runs
from ``(ref, created)``; ``meta`` is JSON text, read with ``::jsonb`` only on the rows already chosen (after a
``strpos`` on the text where a value is asked, as the SQLite index does with ``instr``).
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

from ...rules.timeutil import format_time, parse_time, to_milliseconds
from ..documents import meta_json
from ..listings import EPISODE_KEYS, FACT_KEYS, EpisodeQuery, FactQuery, Stale, prefix_range, sorted_sources
from ..search import query_terms
from .keywords import _words
from .tables import VaultState, vsql

T = TypeVar("T")

FACT_COLUMNS = ("item_id, path, source, importance, confidence, created, updated, valid_until, review_after, meta, "
                "substr(body, 1, 400)")
#: An episode's text only as far as the facts' excerpt: a team host reads each listed shared row from its file (a
#: row of 10 MB written into the database was fetched whole, twenty to a page).
EPISODE_COLUMNS = "item_id, path, source, created, ekind, substr(body, 1, 400), meta, ref"
#: Keys compared byte by byte, as SQLite compares them (a locale's collation ignores the '/' of a prefix). Since
#: migration 0005 that is the column's own collation, so UNIQUE (kind, item_id) serves the range and its order.
KEY_RANGE = 'item_id COLLATE "C" >= %s AND item_id COLLATE "C" < %s'


def _text(value: Any) -> Any:
    """A time or date as the SQLite index stores it."""
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, date):
        return value.isoformat()
    return value


def _where(sql: str, args: list[Any], conditions: list[tuple[str, Any]], sources: Collection[str] | None,
           hide: Collection[str]) -> tuple[str, list[Any]]:
    for condition, value in conditions:
        if value:
            sql += f" AND {condition}"
            args.extend(value) if isinstance(value, tuple) else args.append(value)
    if sources is not None:
        sql += " AND source = ANY(%s::text[])"
        args.append(list(sources))
    return _hidden(sql, args, hide)


def _hidden(sql: str, args: list[Any], hide: Collection[str]) -> tuple[str, list[Any]]:
    if hide:
        sql += " AND NOT (path = ANY(%s::text[]))"
        args.append(sorted(hide))
    return sql, args


def stale_sql(stale: Stale) -> tuple[str, tuple[Any, ...]]:
    """A stale fact, as :func:`memvault.index.listings.stale_sql` says it for SQLite."""
    return ("((valid_until IS NOT NULL AND valid_until < %s::date) OR (updated IS NOT NULL AND ("
            "(coalesce(review_after, 0) = 0 AND updated < %s::timestamptz) OR "
            "(review_after > 0 AND extract(epoch FROM (%s::timestamptz - updated)) > review_after))))",
            (stale.at.date().isoformat(), stale.at - timedelta(seconds=stale.default_review), stale.at))


def facts_sql(v: int, query: FactQuery) -> tuple[Any, list[Any]]:
    tag, category = query.tag, query.category
    sql, args = _where(f"SELECT {FACT_COLUMNS} FROM {{docs}} WHERE kind = 'fact' AND {KEY_RANGE}",
                       list(prefix_range(query.prefix)), [
        ("strpos(meta, %s) > 0", meta_json(tag) if tag else None),
        ("(meta::jsonb) -> 'tags' ? %s", tag),
        ("strpos(meta, %s) > 0", meta_json(category) if category else None),
        ("(meta::jsonb) ->> 'category' = %s", category), ("source = %s", query.source)],
        query.sources, query.hide)
    if query.stale is not None:
        cond, extra = stale_sql(query.stale)
        sql += f" AND {cond}"
        args += extra
    return sql, args


def bound(value: str, name: str) -> datetime:
    """A listing's bound as the time it is (UTC when it names no zone, as SQLite reads it: a text cast by the server
    would take the server's zone), to the millisecond as the index keeps times; :class:`InvalidValue` naming
    ``name`` when it is no time."""
    return to_milliseconds(parse_time(value, name))


def episodes_sql(v: int, query: EpisodeQuery) -> tuple[str, list[Any]]:
    session = query.session
    before = bound(query.before, "before") if query.before else None
    sql, args = _where(f"SELECT {EPISODE_COLUMNS} FROM {{docs}} WHERE kind = 'episode'", [], [
        ("item_id = %s", query.item_id), ("created < %s::timestamptz", None if query.before_id else before),
        ('(created, item_id COLLATE "C") < (%s::timestamptz, %s)',
         (before, query.before_id) if before and query.before_id else None),
        ("created > %s::timestamptz", bound(query.after, "after") if query.after else None),
        ("source = %s", query.source), ("ekind = %s", query.kind),
        ("strpos(meta, %s) > 0", meta_json(session) if session else None),
        ("(meta::jsonb) ->> 'session' = %s", session)], query.sources, query.hide)
    words = [w for t in (query_terms(query.text) if query.text else []) for w in _words(t)]
    if words:
        # every word, stemmed as the stored tsvector is, in one chunk of the episode (as the SQLite FTS query)
        sql += (" AND doc_id IN (SELECT doc_id FROM {chunks} WHERE tsv @@ (plainto_tsquery('english', %s) "
                "&& '''kind episode'''::tsquery))")
        args.append(" ".join(words))
    return sql, args


def list_facts(conn: Any, v: int, query: FactQuery, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    sql, args = facts_sql(v, query)
    total = int(conn.execute(vsql(v, f"SELECT count(*) FROM ({sql}) f"), args).fetchone()[0])
    if limit <= 0:
        return [], total
    rows = conn.execute(vsql(v, sql + " ORDER BY item_id COLLATE \"C\" LIMIT %s OFFSET %s"),
                        (*args, limit, max(0, offset))).fetchall()
    return [dict(zip(FACT_KEYS, map(_text, row))) for row in rows], total


#: Newest first, ids in byte order as SQLite's: the backward scan of the index on episode time gives it (an episode
#: always has its time). "created DESC NULLS LAST" is no order that index gives: every episode was read and sorted.
EPISODE_ORDER = 'created DESC, item_id COLLATE "C" DESC'


def list_episodes(conn: Any, v: int, query: EpisodeQuery, limit: int) -> list[dict[str, Any]]:
    sql, args = episodes_sql(v, query)
    rows = conn.execute(vsql(v, sql + f" ORDER BY {EPISODE_ORDER} LIMIT %s"),
                        (*args, limit)).fetchall()
    return [dict(zip(EPISODE_KEYS, map(_text, row))) for row in rows]


def fact_keys(conn: Any, v: int, prefix: str, hide: Collection[str]) -> list[str]:
    sql, args = _hidden("SELECT item_id FROM {docs} WHERE kind = 'fact' AND " + KEY_RANGE,
                        list(prefix_range(prefix)), hide)
    return [r[0] for r in conn.execute(vsql(v, sql + " ORDER BY item_id COLLATE \"C\""), args)]


def doc_counts(conn: Any, v: int, hide: Collection[str]) -> list[tuple[str, str | None, int]]:
    sql, args = _hidden("SELECT kind, source, count(*) FROM {docs} WHERE true", [], hide)
    return [(k, s, int(n)) for k, s, n in conn.execute(vsql(v, sql + " GROUP BY kind, source"), args)]


def fact_tags(conn: Any, v: int, hide: Collection[str]) -> list[tuple[str, int]]:
    sql, args = _hidden("SELECT t.value, count(*) FROM {docs} d CROSS JOIN LATERAL "
                        "jsonb_array_elements_text(CASE WHEN jsonb_typeof((d.meta::jsonb) -> 'tags') = 'array' "
                        "THEN (d.meta::jsonb) -> 'tags' ELSE '[]'::jsonb END) AS t(value) "
                        "WHERE d.kind = 'fact' AND d.meta IS NOT NULL", [], hide)
    return [(str(t), int(n)) for t, n in conn.execute(vsql(v, sql + " GROUP BY t.value ORDER BY count(*) DESC, "
                                                                    "t.value COLLATE \"C\""), args)]


def sessions(conn: Any, v: int, limit: int, hide: Collection[str]) -> list[tuple[Any, ...]]:
    sql, args = _hidden("SELECT (meta::jsonb) ->> 'session' AS s, min((meta::jsonb) ->> 'runtime') AS rt, "
                        "array_agg(DISTINCT source) AS src, min(created) AS first_at, max(created) AS last_at, "
                        "count(*) AS n "
                        "FROM {docs} WHERE kind = 'episode' AND strpos(meta, '\"session\"') > 0", [], hide)
    rows = conn.execute(vsql(v, f"SELECT s, rt, src, first_at, last_at, n FROM ({sql} GROUP BY s) g "
                                "WHERE s IS NOT NULL ORDER BY last_at DESC LIMIT %s"), (*args, limit)).fetchall()
    return [(s, rt, sorted_sources(src), _text(first), _text(last), int(n)) for s, rt, src, first, last, n in rows]


def session_episodes(conn: Any, v: int, sessions: list[str], hide: Collection[str]) -> list[dict[str, Any]]:
    """(id, path) of every episode of ``sessions`` (what :func:`sessions` counted, for a team host to read again)."""
    sql, args = _hidden("SELECT item_id, path FROM {docs} WHERE kind = 'episode' AND strpos(meta, '\"session\"') > 0 "
                        "AND (meta::jsonb) ->> 'session' = ANY(%s::text[])", [sessions], hide)
    return [{"id": i, "path": p} for i, p in conn.execute(vsql(v, sql), args)]


def episode_kinds(conn: Any, v: int, hide: Collection[str]) -> list[str]:
    sql, args = _hidden("SELECT DISTINCT ekind FROM {docs} WHERE kind = 'episode' AND ekind IS NOT NULL", [], hide)
    return sorted(r[0] for r in conn.execute(vsql(v, sql), args))


def episode_days(conn: Any, v: int, since: str, hide: Collection[str]) -> list[tuple[str, int]]:
    sql, args = _hidden("SELECT to_char(created AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*) FROM {docs} "
                        "WHERE kind = 'episode' AND created >= %s::timestamptz", [bound(since, "since")], hide)
    return [(d, int(n)) for d, n in conn.execute(vsql(v, sql + " GROUP BY day ORDER BY day"), args)]


def listing_version(conn: Any, vault: str) -> tuple[Any, ...]:
    """What a publish changes (every write of the shared index is one): the head it reflects and its sizes."""
    row = conn.execute("SELECT indexed_head, nchunks, nwords, live_model FROM memvault.vaults WHERE name = %s",
                       (vault,)).fetchone()
    return ("shared", *(row or (None,)))


class SharedListings:
    """The listings of the shared index, mixed into :class:`memvault.index.postgres.SharedIndex` (its connection,
    errors and vault row): each reads nothing while the vault is not in the shared index."""

    vault: str
    _errors: Callable[[str], Any]
    _read_state: Callable[[Any], VaultState | None]

    def _listing(self, fn: Callable[..., T], empty: T, *args: Any) -> T:
        with self._errors("listing") as conn:
            state = self._read_state(conn)
            return empty if state is None else fn(conn, state.vault_id, *args)

    def listing_version(self) -> tuple[Any, ...]:
        with self._errors("listing") as conn:
            return listing_version(conn, self.vault)

    def doc_counts(self, hide: Collection[str] = frozenset()) -> list[tuple[str, str | None, int]]:
        return self._listing(doc_counts, [], hide)

    def fact_keys(self, prefix: str, hide: Collection[str] = frozenset()) -> list[str]:
        return self._listing(fact_keys, [], prefix, hide)

    def fact_tags(self, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        return self._listing(fact_tags, [], hide)

    def list_facts(self, query: FactQuery, limit: int, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        return self._listing(list_facts, ([], 0), query, limit, offset)

    def list_episodes(self, query: EpisodeQuery, limit: int) -> list[dict[str, Any]]:
        return self._listing(list_episodes, [], query, limit)

    def sessions(self, limit: int, hide: Collection[str] = frozenset()) -> list[tuple[Any, ...]]:
        return self._listing(sessions, [], limit, hide)

    def session_episodes(self, sessions: list[str], hide: Collection[str] = frozenset()) -> list[dict[str, Any]]:
        return self._listing(session_episodes, [], sessions, hide) if sessions else []

    def episode_kinds(self, hide: Collection[str] = frozenset()) -> list[str]:
        return self._listing(episode_kinds, [], hide)

    def episode_days(self, since: str, hide: Collection[str] = frozenset()) -> list[tuple[str, int]]:
        return self._listing(episode_days, [], since, hide)
