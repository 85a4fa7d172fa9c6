"""Facts and the inbox: browse by key tree, tag, category, source, trust and staleness; a fact with its front
matter, text, git history (author, time, ``Memvault-Source``, diff) and the duplicates or conflicts it is part
of; edits through the write gate (as ``memvault fact edit``), showing the commit they made; the inbox, each
proposal beside the change it would make, accepted or rejected one or many at a time (``memvault accept/reject``).
"""
from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Callable
from typing import Any

from ...core.history import entry_dict
from ...rules.contradict import describe as contradiction_text
from ...rules.errors import FactNotFound, MemvaultError
from ...rules.freshness import stale_reason
from ...rules.trust import ACCEPTED_BY, Policy
from ...rules.markup import ANGLE_LOOKALIKES
from ...rules.secrets import find_secrets
from ...rules.timeutil import age_seconds, age_text
from ...rules.validation import Problem, validate_key
from .page import Page, Req, Web, route, url

#: Folders and keys of one level of the key tree shown (a vault with 3,000 keys in one folder is narrowed by prefix).
TREE_SHOWN = 200
#: Sources named beside the fact listing (the most facts first): a vault where every fact has its own source must
#: not make every page of the listing that long.
SOURCES_SHOWN = 50
#: Proposals shown on one page of the inbox: each costs a diff and a duplicate search on the view's one vault thread.
INBOX_PAGE = 50
#: Commits of one file's history shown, the newest (each with its diff, up to a fact's size: a fact an agent rewrites
#: every hour would otherwise put months of diffs on its page).
HISTORY_SHOWN = 50
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_MARKUP = re.compile(r"<\s*/?\s*[A-Za-z!]|[" + re.escape(ANGLE_LOOKALIKES) + r"]|\bjavascript:|\]\]>", re.I)
#: Bidirectional controls: they reorder the text around them as shown (Trojan Source), never as stored.
DIRECTION = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_INSTRUCTION = re.compile(r"\b(ignore|disregard|forget)\b.{0,40}\b(instructions?|previous|above|rules)\b", re.I | re.S)


@route("/facts", "facts", nav="Facts")
def facts(web: Web, req: Req) -> Page:
    browse = web.vault.browse
    prefix = (req.arg("prefix") or "").strip("/")
    filters = {"prefix": prefix, "tag": req.arg("tag"), "category": req.arg("category"),
               "source": req.arg("source"), "trust": req.arg("trust"), "stale": req.arg("stale") == "1"}
    page_size = req.int_arg("limit", 100, 1, 500)
    offset = req.int_arg("offset", 0)
    rows, total = browse.facts(**filters, limit=page_size, offset=offset)
    tree = browse.fact_tree(prefix)
    sources = browse.sources("fact")
    data = {"filters": filters, "total": total, "offset": offset, "limit": page_size,
            "facts": [r.to_dict() for r in rows], "tree": tree[:TREE_SHOWN], "tree_more": max(0, len(tree) - TREE_SHOWN),
            "tags": [{"tag": t, "count": n} for t, n in browse.tags()[:60]],
            "sources": [{"source": s or None, "count": n, "trusted": browse.trusted(s or None)}
                        for s, n in sources[:SOURCES_SHOWN]],
            "sources_more": max(0, len(sources) - SOURCES_SHOWN), "crumbs": _crumbs(prefix)}
    return Page("facts.html", data)


def _crumbs(prefix: str) -> list[dict[str, str]]:
    parts = [p for p in prefix.split("/") if p]
    return [{"name": part, "prefix": "/".join(parts[: i + 1])} for i, part in enumerate(parts)]


@route("/fact/{key:path}", "fact")
def fact(web: Web, req: Req) -> Page:
    vault = web.vault
    key = validate_key(req.params["key"])
    try:
        item = vault.facts.get(key)
    except FactNotFound:
        if vault.facts.store.path_for(key, inbox=True).is_file():
            return Page("error.html", {"error": f"fact {key} is a proposal waiting in the inbox"}, status=404,
                        extra={"link": (url("inbox"), "review it in the inbox")})
        raise
    data_bytes = item.path.read_bytes()
    raw = data_bytes.decode("utf-8", errors="replace")
    history, history_more, history_error = shown_history(
        lambda limit: vault.facts.history(key, follow=False, limit=limit))
    try:
        similar = web.cached(("similar", key, item.text), lambda: vault.facts.similar(key, item.text))
    except MemvaultError:
        similar = []
    similar, _hidden = web.readable_facts(similar)
    made = req.arg("made")
    data = {"fact": item.to_dict(vault.root), "file": raw, "extra": {k: str(v) for k, v in item.extra.items()},
            "trusted": Policy(vault.config.trust.trusted).vouches(item.source, item.extra.get(ACCEPTED_BY)),
            "stale": stale_reason(item, vault.config.facts.review_after), "history": history,
            "history_more": history_more, "history_error": history_error, "similar": similar,
            "made": made if made and _COMMIT.match(made) else None, "error": None, "loaded": version_of(data_bytes)}
    return Page("fact.html", data, extra={"edit_text": raw})


def version_of(data: bytes) -> str:
    """The version of a fact file an edit form was loaded from (its content hash): an edit made from an older one is
    refused, so a stale form never silently replaces a newer change — a hand edit not yet committed included."""
    return hashlib.sha256(data).hexdigest()


@route("/fact/{key:path}/edit", "fact_edit", methods=("POST",))
def fact_edit(web: Web, req: Req) -> Page:
    """The whole file replaced, as ``memvault fact edit`` does: validated, secrets checked, trust applied."""
    vault = web.vault
    key = validate_key(req.params["key"])
    text = (req.form.get("text") or "").replace("\r\n", "\n")
    loaded = req.form.get("loaded") or ""
    try:
        current = vault.facts.get(key).path.read_bytes()
        if loaded != version_of(current):
            # The page shows the file as it is now and keeps the edit in the box: saving again replaces it knowingly.
            page = fact(web, Req("GET", req.path, {}, req.params, {}))
            page.data["error"] = (f"conflict: facts/{key}.md changed since this form was loaded (an edit by hand or "
                                  "from elsewhere); nothing was saved. The file is shown as it is now, your text is "
                                  "kept below: merge it and save again" if loaded else
                                  "this form does not say which version of the fact it was loaded from; nothing "
                                  "was saved: reload the page and edit again")
            page.extra["edit_text"] = text
            page.status = 409
            return page
        written = vault.facts.write_text(key, text, source=web.source)
    except MemvaultError as exc:
        page = fact(web, Req("GET", req.path, {}, req.params, {}))
        page.data["error"] = str(exc)
        page.extra["edit_text"] = text
        page.status = 422 if not isinstance(exc, FactNotFound) else 404
        return page
    return Page("fact.html", {}, redirect=url("fact", key=key, made=_last_commit(vault, written.path) or ""))


@route("/fact/{key:path}/verify", "fact_verify", methods=("POST",))
def fact_verify(web: Web, req: Req) -> Page:
    key = validate_key(req.params["key"])
    item = web.vault.verify(key, source=web.source)
    return Page("fact.html", {}, redirect=url("fact", key=key, made=_last_commit(web.vault, item.path) or ""))


@route("/fact/{key:path}/delete", "fact_delete", methods=("POST",))
def fact_delete(web: Web, req: Req) -> Page:
    """Delete a fact: only with the form's ``confirm`` box ticked (the browser's ``required`` is not a check)."""
    key = validate_key(req.params["key"])
    if req.form.get("confirm") not in ("1", "true", "yes", "on"):
        page = fact(web, Req("GET", req.path, {}, req.params, {}))
        page.data["error"] = f"fact {key} was not deleted: tick 'yes' to confirm"
        page.status = 422
        return page
    web.vault.facts.delete(key, source=web.source)
    return Page("facts.html", {}, redirect=url("facts", prefix=key.rpartition("/")[0]))


@route("/new", "fact_new", methods=("GET", "POST"))
def fact_new(web: Web, req: Req) -> Page:
    """A new fact (``memvault fact set``): from this user, through the gate; an untrusted user proposes it."""
    data: dict[str, Any] = {"key": req.arg("key") or "", "text": req.form.get("text", ""),
                            "category": req.arg("category") or "", "tags": req.arg("tags") or "", "error": None}
    if req.method != "POST":
        return Page("new.html", data)
    try:
        key = validate_key(data["key"])
        tags = [t.strip() for t in data["tags"].split(",") if t.strip()]
        written = web.vault.facts.set(key, data["text"], source=web.source, category=data["category"] or None,
                                      tags=tags or None)
    except MemvaultError as exc:
        data["error"] = str(exc)
        return Page("new.html", data, status=422)
    if written.quarantined:
        return Page("new.html", {}, redirect=url("inbox"))
    return Page("new.html", {}, redirect=url("fact", key=key, made=_last_commit(web.vault, written.path) or ""))


def shown_history(load: Callable[[int], list[Any]]) -> tuple[list[dict[str, Any]], bool, str | None]:
    """A file's page's history: the newest :data:`HISTORY_SHOWN` entries ``load(limit)`` gives (as dicts), whether
    there are more, and the error that kept it from being read (None)."""
    try:
        history = [entry_dict(e) for e in load(HISTORY_SHOWN + 1)]
    except MemvaultError as exc:
        return [], False, str(exc)
    return history[:HISTORY_SHOWN], len(history) > HISTORY_SHOWN, None


def _last_commit(vault: Any, path: Any) -> str | None:
    git = vault.git
    if git is None:
        return None
    try:
        return git.last_commit(path)
    except MemvaultError:
        return None


# ------------------------------------------------------------------------------------------------ inbox
@route("/inbox", "inbox", methods=("GET", "POST"), nav="Inbox")
def inbox(web: Web, req: Req) -> Page:
    """The proposals beside the change each would make, :data:`INBOX_PAGE` at a time (``offset``: where this page
    starts in the inbox's order); POST accepts or rejects the ticked ones."""
    results: list[dict[str, Any]] = []
    if req.method == "POST":
        action = req.form.get("action")
        keys = req.all("key")
        if action not in ("accept", "reject") or not keys:
            return Page("error.html", {"error": "tick at least one proposal, then accept or reject"}, status=422)
        results = [_review(web, key, action) for key in keys]
    problems: list[Problem] = []
    # Grouped by source, oldest first within each (as `memvault inbox`): what waits longest shows.
    waiting = sorted(web.vault.facts.proposals(problems),
                     key=lambda p: (p[0].source or "", -age_seconds(p[0].updated or p[0].created)))
    offset = req.int_arg("offset", 0, 0, max(0, len(waiting) - 1))
    proposals = [_proposal(web, item, exists) for item, exists in waiting[offset:offset + INBOX_PAGE]]
    scope = web.vault.reader(web.source).scope
    data = {"proposals": proposals, "total": len(waiting), "offset": offset,
            "next": offset + INBOX_PAGE if offset + INBOX_PAGE < len(waiting) else None,
            "previous": max(0, offset - INBOX_PAGE) if offset else None, "results": results,
            "problems": [str(p.in_vault(web.vault.root)) for p in problems],
            "reviewer": web.source, "reviewer_trusted": web.vault.facts.is_trusted(web.source),
            "reviewer_scope": scope.to_dict() if scope is not None else None}
    return Page("inbox.html", data, status=200 if all(r["ok"] for r in results) else 207)


def _review(web: Web, key: str, action: str) -> dict[str, Any]:
    vault = web.vault
    try:
        key = validate_key(key)
        if action == "accept":
            item = vault.facts.accept(key, source=web.source)
            return {"key": key, "action": action, "ok": True, "commit": _last_commit(vault, item.path)}
        proposal = vault.facts.reject(key, source=web.source)
        commit = _last_commit(vault, proposal.path) if vault.config.trust.share_inbox else None
        return {"key": key, "action": action, "ok": True, "commit": commit}
    except MemvaultError as exc:
        return {"key": key, "action": action, "ok": False, "error": str(exc)}


def _proposal(web: Web, item: Any, exists: bool) -> dict[str, Any]:
    vault = web.vault
    flags: list[str] = []
    diff: list[tuple[str, str]] = []
    try:
        changes, _ = vault.facts.store.plan_accept(item.key)
        target = changes[0]  # the fact the proposal would write (its own key, or the one it ``proposes``)
        before = (target.before or b"").decode("utf-8", errors="replace")
        after = (target.after or b"").decode("utf-8", errors="replace")
        name = _rel(vault.root, target.path)
        by = f" (proposed by {item.source})" if item.source else " (proposed)"
        diff = diff_lines(before, after, name if target.before is not None else "/dev/null", name + by)
    except MemvaultError as exc:
        flags.append(f"cannot be accepted as it is: {exc}")
    try:
        target = item.extra.get("proposes") if isinstance(item.extra.get("proposes"), str) else item.key
        similar = web.cached(("similar", target, item.text), lambda: vault.facts.similar(target, item.text))
    except MemvaultError:
        similar = []
    similar, hidden = web.readable_facts(similar)
    if hidden:
        flags.append(f"duplicates or contradicts {hidden} stored fact{'s' if hidden > 1 else ''} outside the read "
                     "scope of this view's source (a person sees which)")
    for match in similar:
        if match["kind"] == "conflict" and match.get("values"):
            flags.append(f"contradicts fact {match['key']}: {contradiction_text(match['values'])}")
            continue
        flags.append(f"{match['kind']} of fact {match['key']}" + (f" (differs in {', '.join(match['differing'])})"
                                                                  if match.get("differing") else ""))
    secrets = find_secrets(item.text)
    if secrets:
        flags.append("looks like a secret: " + ", ".join(sorted({s.kind for s in secrets})))
    if _MARKUP.search(item.text):
        flags.append("holds markup or a link scheme (shown here as text)")
    if any(DIRECTION.search(part) for part in (item.text, item.category or "", *item.tags)):
        flags.append("holds characters that change the direction text is shown in (shown here as \\u202e and the "
                     "like, never obeyed)")
    if _INSTRUCTION.search(item.text):
        flags.append("reads like an instruction to an agent")
    return {"key": item.key, "source": item.source, "trusted": vault.facts.is_trusted(item.source),
            "text": item.text, "changes_existing": exists, "category": item.category, "tags": list(item.tags),
            "updated": item.to_dict()["updated"], "age": age_text(age_seconds(item.updated or item.created)),
            "diff": diff, "flags": flags, "similar": similar,
            "contradicts": [{"key": m["key"], "values": m.get("values", {})} for m in similar
                            if m["kind"] == "conflict"]}


def show_direction(text: str) -> str:
    """``text`` with each bidirectional control written as its escape (``\\u202e``)."""
    return DIRECTION.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if DIRECTION.search(text) else text


def _rel(root: Any, path: Any) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def diff_lines(before: str, after: str, a: str, b: str) -> list[tuple[str, str]]:
    """A unified diff as (css class, line) pairs: ``add``, ``del``, ``hunk``, ``ctx``, ``meta``; ``a`` and ``b``
    name the two sides (``/dev/null`` for a file that does not exist yet)."""
    out = []
    for line in difflib.unified_diff(before.splitlines(), after.splitlines(), a, b, lineterm="", n=3):
        kind = ("hunk" if line.startswith("@@") else "meta" if line.startswith(("---", "+++"))
                else "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx")
        out.append((kind, line))
    return out


def patch_lines(diff: str) -> list[tuple[str, str]]:
    """A git patch as (css class, line) pairs (see :func:`diff_lines`)."""
    out = []
    for line in diff.splitlines():
        kind = ("meta" if line.startswith(("diff ", "index ", "---", "+++", "new file", "deleted file",
                                           "similarity", "rename "))
                else "hunk" if line.startswith("@@") else "add" if line.startswith("+")
                else "del" if line.startswith("-") else "ctx")
        out.append((kind, line))
    return out
