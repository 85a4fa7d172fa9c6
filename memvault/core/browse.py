"""Listings for people: the vault's memories browsed by key, tag, source, trust, staleness, time and session.

Every listing is a query of the index (no file is read, so a page costs the same at 10k facts as at 100), asked
through the index protocol (:mod:`memvault.index.protocol`: ``list_facts``, ``list_episodes``, ``doc_counts``, ...),
so a team host's web view reads the team's shared index (with its own unpushed files) as recall does, and a single
host's reads its SQLite index. The queries themselves live with each backend (:mod:`memvault.index.listings`,
:mod:`memvault.index.postgres.listings`); this module turns their rows into what people see (trust, the stale reason,
the fields in ``meta``). What the index does not hold (a fact's git history, the inbox) is read by the caller from
the vault. The index is brought in step with the files by its own freshness check, as recall does.

Counts that need the whole table are cached until the index changes (its ``listing_version``).

Scopes: every listing is of what the reader (``vault.reader()``, who the vault acts for) may read. For a scoped
reader the vault's files it may not read are handed to each query as paths to hide (the ``hide`` every backend and a
team's merged listings already take), so counts, pages and totals leave them out in SQL; rows that carry a path are
tested again on the way out. An unscoped reader's listings are the same queries as before.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..index.listings import EpisodeQuery, FactQuery, Stale
from ..rules import jsontext
from ..rules.freshness import stale_doc_reason
from ..rules.timeutil import format_time, now
from ..rules.trust import Policy
from .access import Reader

if TYPE_CHECKING:
    from ..index.protocol import VaultIndex
    from ..rules.config import Config

PAGE = 100
PAGE_MAX = 500


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
    #: The start of its text, whitespace folded to one line (a listing shows what a fact says, not only its key).
    excerpt: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


#: Characters of a fact's text a listing shows.
EXCERPT = 200


def excerpt(text: Any, limit: int = EXCERPT) -> str:
    """``text`` on one line (runs of whitespace folded), cut at ``limit`` characters with an ellipsis."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


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


class Browse:
    """Read-only listings over one vault's index (see the module doc)."""

    def __init__(self, index: VaultIndex, config: Config, reader: Callable[[], Reader] | None = None) -> None:
        self.index = index
        self.config = config
        self.policy = Policy(config.trust.trusted)
        self._reader = reader or (lambda: Reader("", None))
        self._cache: dict[str, tuple[Any, Any]] = {}

    # -- scopes ------------------------------------------------------------------------------------------
    def _who(self) -> Reader:
        return self._reader()

    def _hide(self) -> frozenset[str]:
        """The vault's files the reader may not read (none for an unscoped reader), for the queries to leave out."""
        who = self._who()
        if who.scope is None:
            return frozenset()
        return self._cached("hide", lambda: frozenset(p for p in self.index.scan() if not who.allows(p)))

    def _readable(self, path: str | None) -> bool:
        who = self._who()
        return who.scope is None or (path is not None and who.allows(path))

    # -- plumbing ----------------------------------------------------------------------------------------
    def version(self) -> tuple[Any, ...]:
        """Changes whenever the index does (another process's commit, a write here, a generation swap, a publish)."""
        return self.index.listing_version()

    def _cached(self, name: str, make: Callable[[], Any]) -> Any:
        version = self.version()
        name = f"{self._who().source}:{name}"  # each reader's own answers
        hit = self._cache.get(name)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = make()
        self._cache[name] = (self.version(), value)
        return value

    def trusted(self, source: str | None) -> bool:
        return self.policy.is_trusted(source)

    def _sources(self, kind: str, trust: str | None) -> tuple[str, ...] | None:
        """The sources of ``kind`` that are (``trust="trusted"``) or are not (``"untrusted"``) trusted."""
        if trust not in ("trusted", "untrusted"):
            return None
        sources = self.counts()["sources"].get(kind, {})
        want = trust == "trusted"
        return tuple(s for s in sources if s != "" and self.trusted(s) == want)

    # -- counts ------------------------------------------------------------------------------------------
    def counts(self) -> dict[str, Any]:
        """Items per kind, per source within each kind, and trusted/untrusted per kind."""

        def make() -> dict[str, Any]:
            kinds: dict[str, int] = {"fact": 0, "episode": 0, "procedure": 0}
            sources: dict[str, dict[str, int]] = {}
            trust: dict[str, dict[str, int]] = {}
            for kind, source, n in self.index.doc_counts(self._hide()):
                kinds[kind] = kinds.get(kind, 0) + n
                by_source = sources.setdefault(kind, {})
                by_source[source or ""] = by_source.get(source or "", 0) + n
                side = "trusted" if self.trusted(source) else "untrusted"
                trust.setdefault(kind, {"trusted": 0, "untrusted": 0})[side] += n
            return {"kinds": kinds, "sources": sources, "trust": trust}

        return self._cached("counts", make)

    def stale_count(self, at: datetime | None = None) -> int:
        query = FactQuery(stale=self._stale(at or now()), hide=self._hide())
        return self._cached("stale", lambda: self.index.list_facts(query, 0)[1])

    def _stale(self, at: datetime) -> Stale:
        return Stale(at, float(self.config.facts.review_after))

    # -- facts -------------------------------------------------------------------------------------------
    def fact_tree(self, prefix: str = "") -> list[dict[str, Any]]:
        """The next level of the key tree under ``prefix``: each folder with its number of facts, each fact."""
        start = len(prefix.rstrip("/") + "/") if prefix else 0
        out: dict[str, dict[str, Any]] = {}
        for key in self.index.fact_keys(prefix, self._hide()):
            if not self._readable(f"facts/{key}.md"):
                continue
            rest = key[start:]
            head, sep, _ = rest.partition("/")
            entry = out.setdefault(head + sep, {"name": head, "path": key[:start] + head, "folder": bool(sep),
                                               "count": 0})
            entry["count"] += 1
        return list(out.values())

    def tags(self) -> list[tuple[str, int]]:
        return self._cached("tags", lambda: self.index.fact_tags(self._hide()))

    def facts(self, *, prefix: str = "", tag: str | None = None, category: str | None = None,
              source: str | None = None, trust: str | None = None, stale: bool = False, limit: int = PAGE,
              offset: int = 0, at: datetime | None = None) -> tuple[list[FactRow], int]:
        """Facts in key order with the filters given, one page of them, and how many match in all."""
        at = at or now()
        query = self.fact_query(prefix=prefix, tag=tag, category=category, source=source, trust=trust,
                                stale=stale, at=at)
        rows, total = self.index.list_facts(query, max(1, min(limit, PAGE_MAX)), max(0, offset))
        return [self._fact_row(row, at) for row in rows if self._readable(row["path"])], total

    def fact_query(self, *, prefix: str = "", tag: str | None = None, category: str | None = None,
                   source: str | None = None, trust: str | None = None, stale: bool = False,
                   at: datetime | None = None) -> FactQuery:
        """What :meth:`facts` asks the index (its SQL and plan: :func:`memvault.index.listings.facts_sql`)."""
        return FactQuery(prefix=prefix, tag=tag or None, category=category or None, source=source or None,
                         sources=self._sources("fact", trust), stale=self._stale(at or now()) if stale else None,
                         hide=self._hide())

    def _fact_row(self, row: dict[str, Any], at: datetime) -> FactRow:
        fields = _json(row["meta"])
        tags = fields.get("tags")
        source = row["source"]
        return FactRow(row["key"], row["path"], source, row["importance"], row["confidence"], row["created"],
                       row["updated"], row["valid_until"],
                       fields.get("category") if isinstance(fields.get("category"), str) else None,
                       [str(t) for t in tags] if isinstance(tags, list) else [], self.trusted(source),
                       stale_doc_reason(row["valid_until"], row["review_after"], row["updated"],
                                        self.config.facts.review_after, at), excerpt(row.get("excerpt")))

    # -- episodes ----------------------------------------------------------------------------------------
    def episodes(self, *, source: str | None = None, kind: str | None = None, session: str | None = None,
                 text: str | None = None, trust: str | None = None, before: str | None = None,
                 after: str | None = None, before_id: str | None = None, limit: int = PAGE) -> list[EpisodeRow]:
        """Episodes newest first (or, with ``after``, the ones newer than that time, for a live page). The next
        page: ``before`` and ``before_id``, the time and id of the last row of this one."""
        query = self.episode_query(source=source, kind=kind, session=session, text=text, trust=trust,
                                   before=before, after=after, before_id=before_id)
        return [self._episode_row(row) for row in self.index.list_episodes(query, max(1, min(limit, PAGE_MAX)))
                if self._readable(row["path"])]

    def episode_query(self, *, source: str | None = None, kind: str | None = None, session: str | None = None,
                      text: str | None = None, trust: str | None = None, before: str | None = None,
                      after: str | None = None, before_id: str | None = None) -> EpisodeQuery:
        """What :meth:`episodes` asks the index (its SQL and plan: :func:`memvault.index.listings.episodes_sql`)."""
        return EpisodeQuery(source=source or None, kind=kind or None, session=session or None, text=text or None,
                            sources=self._sources("episode", trust), before=before or None, after=after or None,
                            before_id=before_id or None, hide=self._hide())

    def _episode_row(self, row: dict[str, Any]) -> EpisodeRow:
        fields = _json(row["meta"])
        tags = fields.get("tags")
        return EpisodeRow(row["id"], row["path"], row["source"], row["created"], row["ekind"], row["body"],
                          _str(fields.get("session")), _str(fields.get("runtime")),
                          [str(t) for t in tags] if isinstance(tags, list) else [], row["ref"],
                          self.trusted(row["source"]))

    def episode(self, episode_id: str) -> EpisodeRow | None:
        rows = self.index.list_episodes(EpisodeQuery(item_id=episode_id, hide=self._hide()), 1)
        return self._episode_row(rows[0]) if rows and self._readable(rows[0]["path"]) else None

    def sessions(self, limit: int = PAGE) -> list[dict[str, Any]]:
        """Captured agent sessions (episodes whose meta names a ``session_id``), latest activity first."""

        def make() -> list[dict[str, Any]]:
            return [self._session(*row) for row in self.index.sessions(max(1, min(limit, PAGE_MAX)), self._hide())]

        return self._cached(f"sessions:{limit}", make)

    def _session(self, session: str, runtime: str | None, sources: Sequence[str | None], first: str | None,
                 last: str | None, n: int) -> dict[str, Any]:
        """A session is trusted when every line of it is: any source may name another's session id in its meta.
        ``source`` names the first source that is not trusted, else the first."""
        trust = {s: self.trusted(s) for s in sources}
        shown = next((s for s in sources if not trust[s]), sources[0] if sources else None)
        return {"session": session, "runtime": runtime, "source": shown,
                "sources": [{"source": s, "trusted": t} for s, t in trust.items()], "first": first, "last": last,
                "episodes": n, "trusted": all(trust.values())}

    def sources(self, kind: str) -> list[tuple[str, int]]:
        return sorted(self.counts()["sources"].get(kind, {}).items(), key=lambda item: (-item[1], item[0]))

    def episode_kinds(self) -> list[str]:
        return self._cached("ekinds", lambda: self.index.episode_kinds(self._hide()))

    # -- procedures --------------------------------------------------------------------------------------
    def runs(self, name: str, limit: int = PAGE) -> list[dict[str, Any]]:
        """A procedure's runs, newest first: when, who, exit code, duration, the commit and blob that ran."""
        if not self.index.exists():
            return []
        out = []
        for run in self.index.runs_of([name], max(1, min(limit, PAGE_MAX))).get(name, []):
            if not self._readable(run.get("path")):
                continue
            fields, source = run["meta"], run.get("source")
            out.append({"episode": run["id"], "at": run["created"], "text": run["text"], "source": source,
                        "trusted": self.trusted(source), "exit_code": fields.get("exit_code"),
                        "duration_ms": fields.get("duration_ms"), "commit": fields.get("commit"),
                        "blob": fields.get("blob"), "dirty": bool(fields.get("dirty"))})
        return out

    # -- growth ------------------------------------------------------------------------------------------
    def episode_days(self, days: int = 365) -> list[tuple[str, int]]:
        """Episodes per day (by their ``created``) over the last ``days`` days."""
        since = (now() - timedelta(days=days)).date().isoformat()
        return self._cached(f"episode_days:{since}", lambda: self.index.episode_days(since, self._hide()))

    def health(self) -> dict[str, Any]:
        """The index's state: model, items, pending vectors, bytes per row against 4·dims, last scan and build."""
        if not self.index.exists():
            return {"exists": False}

        def make() -> dict[str, Any]:
            stats = self.index.stats()
            last_scan = self.index.meta_get("last_scan")
            if last_scan:
                try:
                    stats["last_scan"] = format_time(datetime.fromtimestamp(float(last_scan)).astimezone())
                except ValueError:
                    stats["last_scan"] = None
            stats["built_at"] = self.index.meta_get("built_at")
            model = stats.get("model")
            chunks = stats.get("chunks") or 0
            if model and chunks and stats.get("used_bytes") is not None:
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
        return self.index.lag()


def _json(value: Any) -> dict[str, Any]:
    if not value:
        return {}
    try:
        data = jsontext.parse(value)
    except (TypeError, ValueError, AttributeError):
        return {}
    return data if isinstance(data, dict) else {}


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None
