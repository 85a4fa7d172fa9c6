"""Episodes by time (filters: source, kind, agent session, words, trust), captured agent sessions grouped by
session, one episode, and the procedures: each runbook whole, its versions (git) and its runs (commit, blob,
exit code, duration) on a timeline."""
from __future__ import annotations

from typing import Any

from ...core.history import provenance
from ...rules.errors import EpisodeError, MemvaultError
from ...rules.validation import validate_name
from .charts import timed
from .facts import shown_history
from .page import Page, Req, Web, route

#: Runs of one procedure shown (and plotted).
RUNS_SHOWN = 200


@route("/timeline", "timeline", nav="Timeline")
def timeline(web: Web, req: Req) -> Page:
    browse = web.vault.browse
    filters = {"source": req.arg("source"), "kind": req.arg("kind"), "session": req.arg("session"),
               "text": req.arg("text"), "trust": req.arg("trust")}
    limit = req.int_arg("limit", 100, 1, 500)
    before, before_id = req.arg("before"), req.arg("before_id")
    rows = browse.episodes(**filters, before=before, before_id=before_id, limit=limit)
    data = {"filters": filters, "before": before, "limit": limit, "episodes": [r.to_dict() for r in rows],
            # the next page starts after the last row, by time then id: a page may end inside a run of one time
            "next": rows[-1].created if len(rows) == limit else None,
            "next_id": rows[-1].id if len(rows) == limit else None,
            "sources": [{"source": s or None, "count": n, "trusted": browse.trusted(s or None)}
                        for s, n in browse.sources("episode")][:50],
            "kinds": browse.episode_kinds()}
    return Page("timeline.html", data)


@route("/sessions", "sessions", nav="Sessions")
def sessions(web: Web, req: Req) -> Page:
    """Agent sessions captured as episodes (``meta.session_id``, ``meta.runtime``), latest activity first."""
    return Page("sessions.html", {"sessions": web.vault.browse.sessions(req.int_arg("limit", 100, 1, 500))})


@route("/episode/{id}", "episode")
def episode(web: Web, req: Req) -> Page:
    row = web.vault.browse.episode(req.params["id"])
    if row is None:
        raise EpisodeError(f"no episode {req.params['id']!r} in the index")
    return Page("episode.html", {"episode": row.to_dict()})


def provenances(web: Web) -> dict[str, dict[str, Any]]:
    """Who added each runbook and who changed it last, from git (by vault-relative path), kept while HEAD stays
    (the index does not record it: a runbook's file says nothing of its writer)."""
    git = web.vault.git
    if git is None:
        return {}
    try:
        head = git.run("rev-parse", "--verify", "--quiet", "HEAD")
    except MemvaultError:
        return {}
    key = ("provenance", head)
    hit = web.cache.get(key)
    if hit is None:
        try:
            hit = (head, provenance(git, web.vault.root))
        except MemvaultError:
            hit = (head, {})
        web.cache[key] = hit
    return hit[1]


def provenance_of(web: Web, path: str) -> dict[str, Any] | None:
    """One runbook's provenance (see :func:`provenances`), None when git never saw it."""
    return provenances(web).get(path)


@route("/procedures", "procedures", nav="Procedures")
def procedures(web: Web, req: Req) -> Page:
    from ...rules.validation import Problem

    problems: list[Problem] = []
    items = web.vault.procedures.list(problems)
    browse = web.vault.browse
    rows = []
    for proc in items:
        runs = browse.runs(proc.name, 1)
        item = {k: v for k, v in proc.to_dict(web.vault.root).items() if k != "text"}
        rows.append({**item, "last_run": runs[0] if runs else None, "provenance": provenance_of(web, item["path"])})
    return Page("procedures.html", {"procedures": rows, "problems": [str(p.in_vault(web.vault.root)) for p in problems]})


@route("/procedure/{name:path}", "procedure")
def procedure(web: Web, req: Req) -> Page:
    vault = web.vault
    name = validate_name(req.params["name"])
    proc = vault.procedures.get(name)
    history, history_more, history_error = shown_history(
        lambda limit: vault.git_log(proc.path, follow=False, limit=limit))
    runs = vault.browse.runs(name, RUNS_SHOWN)
    plot = {"at": [r["at"] for r in reversed(runs)],
            "seconds": [round((r["duration_ms"] or 0) / 1000, 3) for r in reversed(runs)],
            "exit_code": [r["exit_code"] for r in reversed(runs)]}
    item = proc.to_dict(vault.root)
    data = {"procedure": item, "provenance": provenance_of(web, item["path"]), "history": history,
            "history_more": history_more, "history_error": history_error, "runs": runs, "plot": plot,
            "chart": timed(list(zip(plot["at"], plot["seconds"])), series="seconds").to_dict()}
    return Page("procedure.html", data)
