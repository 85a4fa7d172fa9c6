"""Who may do what: the ``[scopes]`` of memvault.toml as ``memvault scopes`` prints them, the trust patterns beside
them, and what this view's own source may do (it reads and reviews as that source)."""
from __future__ import annotations

from .page import Page, Req, Web, route


@route("/scopes", "scopes", nav="Scopes")
def scopes(web: Web, req: Req) -> Page:
    vault = web.vault
    shown = vault.scopes()
    mine = vault.reader(web.source).scope
    data = {**shown, "acting_as": web.source, "acting_trusted": vault.facts.is_trusted(web.source),
            "acting_scope": mine.to_dict() if mine is not None else None}
    return Page("scopes.html", data)
