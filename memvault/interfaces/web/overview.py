"""The first page: what the vault holds (by kind, source and trust), what waits for a person (the inbox, stale
facts), the index's health, and how the vault and its use grew (plots drawn from ``/overview?format=json``)."""
from __future__ import annotations

import statistics
from datetime import date, datetime, timedelta, timezone
from typing import Any

from ...rules.errors import MemvaultError
from ...rules.timeutil import now
from .page import Page, Req, Web, route

#: Days of recall volume and latency plotted.
RECALL_DAYS = 30


@route("/", "overview", nav="Overview")
def overview(web: Web, req: Req) -> Page:
    vault = web.vault
    browse = vault.browse
    counts = browse.counts()
    inbox = web.inbox_count()
    health: dict[str, Any] = browse.health()
    health["configured_model"] = vault.config.model
    health["lag"] = web.lag
    health["lag_checked"] = web.lag_checked
    try:  # a team's shared index, when the vault has one (its stats say why it cannot be read, if so)
        team = vault.index.stats().get("shared_index")
    except MemvaultError as exc:
        team = {"error": str(exc)}
    if vault.reader(web.source).scope is not None and health.get("exists"):
        # The index's figures count the whole vault: a scoped source is told only which model it holds.
        health = {"exists": True, "scoped": True, "model": health.get("model"), "configured_model": vault.config.model}
        team = None
    sources = {kind: sorted(by.items(), key=lambda item: (-item[1], item[0]))[:12]
               for kind, by in counts["sources"].items()}
    data = {
        "vault": str(vault.root),
        "user": web.source,
        "counts": counts["kinds"],
        "trust": counts["trust"],
        "sources": {kind: [{"source": s or None, "count": n, "trusted": browse.trusted(s or None)} for s, n in rows]
                    for kind, rows in sources.items()},
        "inbox": inbox,
        "stale_facts": browse.stale_count(),
        "index": health,
        "team_index": team,
        "plots": plots(web),
    }
    return Page("overview.html", data)


def plots(web: Web) -> dict[str, Any]:
    """The series the overview draws: facts and procedures over time (git), episodes per day, recalls per day
    with their median time, and the index's bytes per row against 4·dims."""
    vault = web.vault
    try:  # the history counts the whole vault: not for a source whose scope limits what it may read
        growth = (vault.growth().series() if vault.reader(web.source).scope is None
                  else {"days": [], "facts": [], "procedures": []})
    except MemvaultError:
        growth = {"days": [], "facts": [], "procedures": []}
    episodes = vault.browse.episode_days()
    since = now().timestamp() - RECALL_DAYS * 86400
    by_day: dict[str, list[float]] = {}
    try:
        for at, ms in vault.recall_log.recall_times(since):
            day = datetime.fromtimestamp(at, timezone.utc).date().isoformat()
            by_day.setdefault(day, []).append(ms)
    except MemvaultError:
        pass
    if growth["days"]:  # the counts start from nothing the day before the first commit
        first = date.fromisoformat(growth["days"][0]) - timedelta(days=1)
        growth = {"days": [first.isoformat(), *growth["days"]], **{k: [0, *v] for k, v in growth.items()
                                                                   if k != "days"}}
    per_day = dict(episodes)
    episode_days = _every_day(min(per_day)) if per_day else []
    recall_days = _every_day(min(by_day)) if by_day else []
    return {
        "growth": growth,
        "episodes": {"days": episode_days, "count": [per_day.get(d, 0) for d in episode_days]},
        "recalls": {"days": recall_days, "count": [len(by_day.get(d, ())) for d in recall_days],
                    "median_ms": [round(statistics.median(by_day[d]), 2) if d in by_day else None
                                  for d in recall_days],
                    "max_ms": [round(max(by_day[d]), 2) if d in by_day else None for d in recall_days]},
    }


def _every_day(first: str) -> list[str]:
    """Every day from ``first`` to today (a bar per day, days without any included), at most a year."""
    today = now().date()
    start = min(max(date.fromisoformat(first[:10]), today - timedelta(days=366)), today - timedelta(days=1))
    count = (today - start).days + 1
    return [(start + timedelta(days=i)).isoformat() for i in range(max(count, 1))]
