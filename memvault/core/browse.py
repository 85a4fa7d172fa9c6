"""Listings for people: the vault's memories browsed by key, tag, source, trust, staleness, time and session.

Every listing is SQL over the index (no file is read, so a page costs the same at 10k facts as at 100): facts by
key prefix, tag, category, source, trust and staleness; episodes newest first by source, kind, agent session and
words; the runs of a procedure; counts and growth per day. What the index does not hold (a fact's git history,
the inbox) is read by the caller from the vault. The index is brought in step with the files by its own
freshness check (:meth:`Browse.refresh`), as recall does.

Queries are written to start from an index (``tests/test_web.py`` reads their ``EXPLAIN QUERY PLAN``):
facts from ``UNIQUE(kind, item_id)``, episodes from the partial index on their time, runs from ``(ref, created)``.
Counts that need the whole table are cached until the index changes (``PRAGMA data_version`` and this
connection's own changes).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..index.search import query_terms
from ..rules.freshness import stale_doc_reason
from ..rules.timeutil import format_time, now
from ..rules.trust import Policy

if TYPE_CHECKING:
    import sqlite3

    from ..index import Index
    from ..rules.config import Config

PAGE = 100
PAGE_MAX = 500
FACT_COLUMNS = "item_id, path, source, importance, confidence, created, updated, valid_until, review_after, meta"
EPISODE_COLUMNS = "item_id, path, source, created, ekind, body, meta, ref"

FACTS_SQL = f"SELECT {FACT_COLUMNS} FROM docs WHERE kind = 'fact' AND item_id >= ? AND item_id < ?"
KEYS_SQL = "SELECT item_id FROM docs WHERE kind = 'fact' AND item_id >= ? AND item_id < ? ORDER BY item_id"
EPISODES_SQL = f"SELECT {EPISODE_COLUMNS} FROM docs WHERE kind = 'episode'"
#: Newest first from the partial index on episode time (the planner would otherwise take UNIQUE(kind, item_id) and
#: sort every episode: 200 ms against 1 ms at 100k).
EPISODES_BY_TIME_SQL = f"SELECT {EPISODE_COLUMNS} FROM docs INDEXED BY docs_episode_time WHERE kind = 'episode'"
RUNS_SQL = ("SELECT item_id, created, body, meta, source FROM docs WHERE ref = ? AND kind = 'episode' "
            "ORDER BY created DESC LIMIT ?")
COUNTS_SQL = "SELECT kind, source, COUNT(*) FROM docs GROUP BY kind, source"
EPISODE_DAYS_SQL = ("SELECT substr(created, 1, 10) AS day, COUNT(*) FROM docs WHERE kind = 'episode' "
                    "AND created >= ? GROUP BY day ORDER BY day")
SESSIONS_SQL = ("SELECT json_extract(meta, '$.session') AS s, json_extract(meta, '$.runtime'), source, "
                "MIN(created), MAX(created), COUNT(*) FROM docs WHERE kind = 'episode' AND meta IS NOT NULL "
                "AND s IS NOT NULL GROUP BY s ORDER BY MAX(created) DESC LIMIT ?")
TAGS_SQL = ("SELECT t.value, COUNT(*) FROM docs, json_each(docs.meta, '$.tags') AS t "
            "WHERE docs.kind = 'fact' AND docs.meta IS NOT NULL GROUP BY t.value ORDER BY COUNT(*) DESC, t.value")


@dataclass
class FactRow:
    """One fact as a listing shows it (from its index row)."""

    key: str
    path: str
    source: str | None
    importance: float
    confidence: float
    created: str | None
    updated: str | None
    valid_until: str | None
    category: str | None
    tags: list[str]
    trusted: bool
    stale: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class EpisodeRow:
    """One episode as the timeline shows it (from its index row)."""

    id: str
    path: str
    source: str | None
    created: str | None
    kind: str | None
    text: str
    session: str | None
    runtime: str | None
    tags: list[str]
    ref: str | None
    trusted: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def prefix_range(prefix: str) -> tuple[str, str]:
    """The item_id range [low, high) of the keys under ``prefix`` ('' for all): an index range, not a LIKE."""
    if not prefix:
        return "", "\U0010ffff"
    low = prefix.rstrip("/") + "/"
    return low, low[:-1] + chr(ord("/") + 1)


def stale_sql(config: Config, at: datetime) -> tuple[str, tuple[Any, ...]]:
    """The SQL condition (on ``docs``) of a stale fact, as :func:`memvault.rules.freshness.stale_doc_reason`."""
    cutoff = format_time(at - timedelta(seconds=config.facts.review_after))
    return ("((valid_until IS NOT NULL AND valid_until < ?) OR (updated IS NOT NULL AND ("
            "(COALESCE(review_after, 0) = 0 AND updated < ?) OR "
            "(review_after > 0 AND julianday(?) - julianday(updated) > review_after / 86400.0))))",
            (at.date().isoformat(), cutoff, format_time(at)))


class Browse:
    """Read-only listings over one vault's index (see the module doc)."""

    def __init__(self, index: Index, config: Config) -> None:
        self.index = index
        self.config = config
        self.policy = Policy(config.trust.trusted)
        self._cache: dict[str, tuple[Any, Any]] = {}

    # -- plumbing ----------------------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection | None:
        return self.index.connection() if self.index.exists() else None

    def version(self) -> tuple[Any, ...]:
        """Changes whenever the index does (another process's commit, a write here, a generation swap)."""
        conn = self._conn()
        if conn is None:
            return (None,)
        return (str(self.index.current_target()), conn.execute("PRAGMA data_version").fetchone()[0],
                conn.total_changes)

    def _cached(self, name: str, make: Callable[[], Any]) -> Any:
        version = self.version()
        hit = self._cache.get(name)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = make()
        self._cache[name] = (self.version(), value)
        return value

    def trusted(self, source: str | None) -> bool:
        return self.policy.is_trusted(source)

    def _sources(self, kind: str, trust: str | None) -> list[str] | None:
        """The sources of ``kind`` that are (``trust="trusted"``) or are not (``"untrusted"``) trusted."""
        if trust not in ("trusted", "untrusted"):
            return None
        sources = self.counts()["sources"].get(kind, {})
        want = trust == "trusted"
        return [s for s in sources if s != "" and self.trusted(s) == want]

    # -- counts ------------------------------------------------------------------------------------------
    def counts(self) -> dict[str, Any]:
        """Items per kind, per source within each kind, and trusted/untrusted per kind."""

        def make() -> dict[str, Any]:
            kinds: dict[str, int] = {"fact": 0, "episode": 0, "procedure": 0}
            sources: dict[str, dict[str, int]] = {}
            trust: dict[str, dict[str, int]] = {}
            conn = self._conn()
            if conn is not None:
                for kind, source, n in conn.execute(COUNTS_SQL):
                    kinds[kind] = kinds.get(kind, 0) + n
                    sources.setdefault(kind, {})[source or ""] = n
                    side = "trusted" if self.trusted(source) else "untrusted"
                    trust.setdefault(kind, {"trusted": 0, "untrusted": 0})[side] += n
            return {"kinds": kinds, "sources": sources, "trust": trust}

        return self._cached("counts", make)

    def stale_count(self, at: datetime | None = None) -> int:
        conn = self._conn()
        if conn is None:
            return 0
        cond, args = stale_sql(self.config, at or now())
        return self._cached("stale", lambda: conn.execute(
            f"SELECT COUNT(*) FROM docs WHERE kind = 'fact' AND {cond}", args).fetchone()[0])

    # -- facts -------------------------------------------------------------------------------------------
    def fact_tree(self, prefix: str = "") -> list[dict[str, Any]]:
        """The next level of the key tree under ``prefix``: each folder with its number of facts, each fact."""
        conn = self._conn()
        if conn is None:
            return []
        low, high = prefix_range(prefix)
        start = len(low) if prefix else 0
        out: dict[str, dict[str, Any]] = {}
        for (key,) in conn.execute(KEYS_SQL, (low, high)):
            rest = key[start:]
            head, sep, _ = rest.partition("/")
            entry = out.setdefault(head + sep, {"name": head, "path": key[:start] + head, "folder": bool(sep),
                                               "count": 0})
            entry["count"] += 1
        return list(out.values())

    def tags(self) -> list[tuple[str, int]]:
        conn = self._conn()
        if conn is None:
            return []
        return self._cached("tags", lambda: [(str(t), n) for t, n in conn.execute(TAGS_SQL)])

    def facts(self, *, prefix: str = "", tag: str | None = None, category: str | None = None,
              source: str | None = None, trust: str | None = None, stale: bool = False, limit: int = PAGE,
              offset: int = 0, at: datetime | None = None) -> tuple[list[FactRow], int]:
        """Facts in key order with the filters given, one page of them, and how many match in all."""
        conn = self._conn()
        if conn is None:
            return [], 0
        at = at or now()
        sql, args = self.facts_query(prefix=prefix, tag=tag, category=category, source=source, trust=trust,
                                     stale=stale, at=at)
        total = conn.execute(f"SELECT COUNT(*) FROM ({sql})", args).fetchone()[0]
        limit = max(1, min(limit, PAGE_MAX))
        rows = conn.execute(sql + " ORDER BY item_id LIMIT ? OFFSET ?", (*args, limit, max(0, offset))).fetchall()
        return [self._fact_row(row, at) for row in rows], total

    def facts_query(self, *, prefix: str = "", tag: str | None = None, category: str | None = None,
                    source: str | None = None, trust: str | None = None, stale: bool = False,
                    at: datetime | None = None) -> tuple[str, tuple[Any, ...]]:
        """The SQL of :meth:`facts` (without order and page), for its plan to be read."""
        # instr() on the JSON text first: a cheap test that spares parsing the fields of every other fact.
        sql, args = _where(FACTS_SQL, list(prefix_range(prefix)), [
            ("instr(meta, ?) > 0", json.dumps(tag) if tag else None),
            ("EXISTS (SELECT 1 FROM json_each(docs.meta, '$.tags') WHERE value = ?)", tag),
            ("instr(meta, ?) > 0", json.dumps(category) if category else None),
            ("json_extract(meta, '$.category') = ?", category), ("source = ?", source)],
            self._sources("fact", trust))
        if stale:
            cond, extra = stale_sql(self.config, at or now())
            sql += f" AND {cond}"
            args += extra
        return sql, tuple(args)

    def _fact_row(self, row: tuple[Any, ...], at: datetime) -> FactRow:
        key, path, source, importance, confidence, created, updated, valid_until, review_after, meta = row
        fields = _json(meta)
        tags = fields.get("tags")
        return FactRow(key, path, source, importance, confidence, created, updated, valid_until,
                       fields.get("category") if isinstance(fields.get("category"), str) else None,
                       [str(t) for t in tags] if isinstance(tags, list) else [], self.trusted(source),
                       stale_doc_reason(valid_until, review_after, updated, self.config.facts.review_after, at))

    # -- episodes ----------------------------------------------------------------------------------------
    def episodes(self, *, source: str | None = None, kind: str | None = None, session: str | None = None,
                 text: str | None = None, trust: str | None = None, before: str | None = None,
                 after: str | None = None, limit: int = PAGE) -> list[EpisodeRow]:
        """Episodes newest first (or, with ``after``, the ones newer than that time, for a live page)."""
        conn = self._conn()
        if conn is None:
            return []
        sql, args = self.episodes_query(source=source, kind=kind, session=session, text=text, trust=trust,
                                        before=before, after=after)
        limit = max(1, min(limit, PAGE_MAX))
        rows = conn.execute(sql + " ORDER BY created DESC, item_id DESC LIMIT ?", (*args, limit)).fetchall()
        return [self._episode_row(row) for row in rows]

    def episodes_query(self, *, source: str | None = None, kind: str | None = None, session: str | None = None,
                       text: str | None = None, trust: str | None = None, before: str | None = None,
                       after: str | None = None) -> tuple[str, tuple[Any, ...]]:
        terms = query_terms(text) if text else []
        sql, args = _where(EPISODES_SQL if terms else EPISODES_BY_TIME_SQL, [], [
            ("created < ?", before), ("created > ?", after), ("source = ?", source), ("ekind = ?", kind),
            ("instr(meta, ?) > 0", json.dumps(session) if session else None),
            ("json_extract(meta, '$.session') = ?", session)], self._sources("episode", trust))
        if terms:
            expr = "text : (" + " AND ".join(f'"{t}"' for t in terms) + ') AND kind : "episode"'
            sql += (" AND doc IN (SELECT c.doc FROM chunks c WHERE c.rowid IN "
                    "(SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?))")
            args.append(expr)
        return sql, tuple(args)

    def _episode_row(self, row: tuple[Any, ...]) -> EpisodeRow:
        item_id, path, source, created, ekind, body, meta, ref = row
        fields = _json(meta)
        tags = fields.get("tags")
        return EpisodeRow(item_id, path, source, created, ekind, body,
                          _str(fields.get("session")), _str(fields.get("runtime")),
                          [str(t) for t in tags] if isinstance(tags, list) else [], ref, self.trusted(source))

    def episode(self, episode_id: str) -> EpisodeRow | None:
        conn = self._conn()
        if conn is None:
            return None
        row = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM docs WHERE kind = 'episode' AND item_id = ?",
                           (episode_id,)).fetchone()
        return self._episode_row(row) if row else None

    def sessions(self, limit: int = PAGE) -> list[dict[str, Any]]:
        """Captured agent sessions (episodes whose meta names a ``session_id``), latest activity first."""
        conn = self._conn()
        if conn is None:
            return []

        def make() -> list[dict[str, Any]]:
            return [{"session": s, "runtime": rt, "source": src, "first": first, "last": last, "episodes": n,
                     "trusted": self.trusted(src)}
                    for s, rt, src, first, last, n in conn.execute(SESSIONS_SQL, (max(1, min(limit, PAGE_MAX)),))]

        return self._cached(f"sessions:{limit}", make)

    def sources(self, kind: str) -> list[tuple[str, int]]:
        return sorted(self.counts()["sources"].get(kind, {}).items(), key=lambda item: (-item[1], item[0]))

    def episode_kinds(self) -> list[str]:
        conn = self._conn()
        if conn is None:
            return []
        return self._cached("ekinds", lambda: [r[0] for r in conn.execute(
            "SELECT DISTINCT ekind FROM docs WHERE kind = 'episode' AND ekind IS NOT NULL ORDER BY ekind")])

    # -- procedures --------------------------------------------------------------------------------------
    def runs(self, name: str, limit: int = PAGE) -> list[dict[str, Any]]:
        """A procedure's runs, newest first: when, who, exit code, duration, the commit and blob that ran."""
        conn = self._conn()
        if conn is None:
            return []
        out = []
        for item_id, created, body, meta, source in conn.execute(RUNS_SQL, (name, max(1, min(limit, PAGE_MAX)))):
            fields = _json(meta)
            out.append({"episode": item_id, "at": created, "text": body, "source": source,
                        "trusted": self.trusted(source), "exit_code": fields.get("exit_code"),
                        "duration_ms": fields.get("duration_ms"), "commit": fields.get("commit"),
                        "blob": fields.get("blob"), "dirty": bool(fields.get("dirty"))})
        return out

    # -- growth ------------------------------------------------------------------------------------------
    def episode_days(self, days: int = 365) -> list[tuple[str, int]]:
        """Episodes per day (by their ``created``) over the last ``days`` days."""
        conn = self._conn()
        if conn is None:
            return []
        since = (now() - timedelta(days=days)).date().isoformat()
        return self._cached(f"episode_days:{since}", lambda: [(d, n) for d, n in conn.execute(EPISODE_DAYS_SQL,
                                                                                                (since,))])

    def health(self) -> dict[str, Any]:
        """The index's state: model, items, pending vectors, bytes per row against 4·dims, last scan and build."""
        if not self.index.exists():
            return {"exists": False}

        def make() -> dict[str, Any]:
            stats = self.index.stats()
            conn = self.index.connection()
            meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('last_scan', 'built_at')"))
            if meta.get("last_scan"):
                try:
                    stats["last_scan"] = format_time(datetime.fromtimestamp(float(meta["last_scan"])).astimezone())
                except ValueError:
                    stats["last_scan"] = None
            stats["built_at"] = meta.get("built_at")
            model = stats.get("model")
            chunks = stats.get("chunks") or 0
            if model and chunks:
                vectors = stats.get("vectors") or 0
                stats["bytes_per_row"] = {
                    "measured_total": stats["used_bytes"] / chunks,
                    "measured_vector_store": (stats.get("vector_store_bytes") or 0) / vectors if vectors else 0.0,
                    "theoretical_float32": 4 * int(model["dims"]),
                }
            return stats

        return self._cached("health", make)

    def lag(self) -> dict[str, int]:
        """Files the index has not caught up with: changed, new and removed since it last read them (one stat of
        every vault file; the caller runs it off the request path)."""
        if not self.index.exists():
            return {"changed": 0, "new": 0, "removed": 0}
        disk = self.index.scan()
        known = {path: (size, mtime, ino) for path, size, mtime, ino in self.index.connection().execute(
            "SELECT path, size, mtime_ns, ino FROM files")}
        changed = sum(1 for rel, st in disk.items() if rel in known and tuple(st[1:4]) != known[rel])
        return {"changed": changed, "new": sum(1 for rel in disk if rel not in known),
                "removed": sum(1 for rel in known if rel not in disk)}


def _where(sql: str, args: list[Any], conditions: list[tuple[str, Any]],
           sources: list[str] | None) -> tuple[str, list[Any]]:
    """``sql`` with each condition whose value is given, and the source filter of a trust choice (None: any)."""
    for condition, value in conditions:
        if value:
            sql += f" AND {condition}"
            args.append(value)
    if sources is not None:
        sql += f" AND source IN ({','.join('?' * len(sources))})" if sources else " AND 0"
        args += sources
    return sql, args


def _json(value: Any) -> dict[str, Any]:
    if not value:
        return {}
    try:
        data = json.loads(value)
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None
