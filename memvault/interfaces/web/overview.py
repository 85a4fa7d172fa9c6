"""The first page: what the vault holds (by kind, source and trust), what waits for a person (the inbox, stale
facts), the index's health, and how the vault and its use grew (plots drawn from ``/overview?format=json``)."""
from __future__ import annotations

import statistics
from datetime import date, datetime, timedelta, timezone
from typing import Any

from ...rules.errors import MemvaultError
from ...rules.timeutil import now
from .charts import daily
from .page import Page, Req, Web, route
from .timeline import provenances

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
    by_source = dict(counts["sources"])
    if "procedure" in by_source:  # the index does not know a runbook's writer: git does
        by_source["procedure"] = procedure_sources(web, sum(by_source["procedure"].values()))
    sources = {kind: sorted(by.items(), key=lambda item: (-item[1], item[0] or ""))[:12]
               for kind, by in by_source.items()}
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
    return Page("overview.html", data, extra={"recall_days": RECALL_DAYS})


def procedure_sources(web: Web, total: int) -> dict[str, int]:
    """Runbooks by the source of their last commit (git's ``Memvault-Source``); those git never saw, or last
    changed in a commit memvault did not make, count under "" (shown as by hand)."""
    out: dict[str, int] = {}
    who = web.vault.reader(web.source)
    for path, item in provenances(web).items():
        if who.allows(path):  # the runbooks this view's source may read
            out[item["source"] or ""] = out.get(item["source"] or "", 0) + 1
    rest = total - sum(out.values())
    if rest > 0:
        out[""] = out.get("", 0) + rest
    return out


def plots(web: Web) -> dict[str, Any]:
    """The series the overview draws, each beside its chart (:mod:`.charts`: the axis and every bar, as drawn):
    facts and procedures over time (git), episodes per day, recalls per day and their median time."""
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
    recall_days = sorted(by_day)
    recalls = {"days": recall_days, "count": [len(by_day[d]) for d in recall_days],
               "median_ms": [round(statistics.median(by_day[d]), 2) for d in recall_days],
               "max_ms": [round(max(by_day[d]), 2) for d in recall_days]}
    filled = carried(growth)
    return {
        "growth": growth,
        "episodes": {"days": [d for d, _ in episodes], "count": [n for _, n in episodes]},
        "recalls": recalls,
        "charts": {
            "growth": daily({area: list(zip(filled["days"], filled[area])) for area in ("facts", "procedures")}
                                   ).to_dict(),
            "episodes": daily({"episodes": episodes}).to_dict(),
            "recalls": daily({"recalls": list(zip(recall_days, recalls["count"]))}).to_dict(),
            "recall_ms": daily({"median ms": list(zip(recall_days, recalls["median_ms"]))}).to_dict(),
        },
    }


def carried(growth: dict[str, Any]) -> dict[str, Any]:
    """The cumulative counts on every day from the first commit's to the last one's (a day without commits holds
    the day before's count): the vault's size each day, nothing before it existed."""
    days = growth["days"]
    if not days:
        return {"days": [], "facts": [], "procedures": []}
    at = dict(zip(days, zip(growth["facts"], growth["procedures"])))
    first, last = date.fromisoformat(days[0]), date.fromisoformat(days[-1])
    out: dict[str, list[Any]] = {"days": [], "facts": [], "procedures": []}
    current = (0, 0)
    for i in range((last - first).days + 1):
        day = (first + timedelta(days=i)).isoformat()
        current = at.get(day, current)
        out["days"].append(day)
        out["facts"].append(current[0])
        out["procedures"].append(current[1])
    return out
