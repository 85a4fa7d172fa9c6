"""The recall playground (a question, the hits with the five factors drawn as bars, the keyword and semantic parts
of relevance, the floors, why nothing came back, the exact prompt block an agent would get, the time taken) and
"what the agents were told": the recall log, every recall from every interface."""
from __future__ import annotations

import time
from typing import Any

from ...core.render import render
from ...rules.config import FACTORS
from ...rules.errors import InvalidValue
from .page import Page, Req, Web, route
from .timeline import provenance_of

KINDS = ("fact", "episode", "procedure")
MODES = ("hybrid", "keyword", "vector")


@route("/recall", "recall", nav="Recall")
def recall(web: Web, req: Req) -> Page:
    """Recall as an agent would, without counting it as exposure (nothing's frequency changes); logged under
    the person's source."""
    vault = web.vault
    settings = vault.config.recall
    query = req.arg("q") or ""
    kinds = [k for k in req.all("kind") if k in KINDS]
    mode = req.arg("mode", "hybrid")
    form = {"q": query, "k": req.int_arg("k", 10, 1, 100), "kinds": kinds, "mode": mode,
            "budget": req.arg("budget") or "", "min_relevance": req.arg("min_relevance") or ""}
    data: dict[str, Any] = {
        "form": form,
        "settings": {"weights": dict(settings.weights), "band": settings.band,
                     "semantic_weight": settings.semantic_weight,
                     "procedure_semantic_weight": settings.procedure_semantic_weight,
                     "procedure_feedback_weight": settings.procedure_feedback_weight,
                     "generality_weight": settings.generality_weight,
                     "relative_floor": settings.relative_floor,
                     "min_evidence": settings.min_evidence, "min_coverage": settings.min_coverage,
                     "unknown_name_penalty": settings.unknown_name_penalty},
        "result": None,
    }
    if not query:
        return Page("recall.html", data)
    if mode not in MODES:
        raise InvalidValue("mode", f"{mode!r} is not one of {', '.join(MODES)}")
    options: dict[str, Any] = {"mode": mode, "record_access": False}
    if form["budget"]:
        options["budget"] = _number(form["budget"], "budget", int)
    if form["min_relevance"]:
        options["min_relevance"] = _number(form["min_relevance"], "min_relevance", float)
    started = time.perf_counter()
    result = vault.recall(query, k=form["k"], kinds=kinds or None, source=web.source, **options)
    seconds = time.perf_counter() - started
    hits = []
    for rank, hit in enumerate(result, 1):
        item = hit.to_dict()
        item["rank"] = rank
        # The figures recall ranked with, exactly as ``recall --explain`` gives them (not recomputed here).
        explained = hit.explain()
        item["bars"] = [{"factor": f, "value": explained["factors"][f], "weight": settings.weights.get(f, 0.0)}
                        for f in FACTORS if f in explained["factors"]]
        item["parts"] = explained["parts"]
        if hit.kind == "procedure":  # a runbook's writer is in git, not in the index
            item["provenance"] = provenance_of(web, hit.path)
        hits.append(item)
    data["result"] = {"hits": hits, "mode": result.mode, "warnings": list(result.warnings),
                      "nothing_found": result.nothing_found, "window": result.window, "budget": result.budget,
                      "ms": round(seconds * 1000, 2), "prompt": render(result, "prompt")}
    return Page("recall.html", data)


def _number(text: str, name: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise InvalidValue(name, f"{text!r} is not a number") from None


@route("/recalls", "recalls", nav="Agents were told")
def recalls(web: Web, req: Req) -> Page:
    """The recall log, newest first: who asked, the question, what was returned (or why nothing), when."""
    vault = web.vault
    source = req.arg("source")
    if vault.reader(web.source).scope is not None:  # others' questions and answers reach outside its scope
        source = web.source
    before = req.int_arg("before", 0) or None
    limit = req.int_arg("limit", 100, 1, 500)
    entries = [e.to_dict() for e in vault.recall_log.recalls(limit=limit, before=before, source=source)]
    for entry in entries:
        entry["source_trusted"] = vault.facts.is_trusted(str(entry["source"]))
    data = {"source": source, "entries": entries, "limit": limit,
            "next": entries[-1]["id"] if len(entries) == limit else None,
            "retention": vault.config.retention.max_age("raw")}
    return Page("recalls.html", data)
