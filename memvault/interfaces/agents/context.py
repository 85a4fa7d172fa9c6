"""What an agent session starts with, and what a prompt gets: one context block, built under a token budget and a
hard byte cap, never silently empty.

A **session** (any start the runtime reports: startup, resume, clear, compact) gets, as far as ``[agents] budget``
allows (each kind first within its share, :data:`SHARES`): the facts keyed or tagged for the working directory's
project; what happened to the project lately (:mod:`.recent`: failures, incidents and deploys before chat turns,
recent before old); the project's own runbooks with their last runs; then the facts and runbooks recall finds for
the project (its name, branch, last commit subjects and README title are the question), less those filed under
another project the vault knows; then one line with the number of proposals waiting in the inbox, if any.
memvault's own notices (keyword-only recall, an index not built, a file not searchable) are returned in
``notices`` and written to agents.log (``memvault agent status``), never into the block: they are not the model's
business. Memories are rendered exactly as ``recall --format prompt`` renders them
(:mod:`memvault.core.render`): stale facts marked, untrusted text fenced. Whatever the settings say, the block is
cut at :data:`memvault.rules.config.CONTEXT_HARD_BYTES` bytes and under Codex's 2,500-token estimate.

A **prompt** (per-prompt recall, opt-in at install) gets what recall finds above its relevance floor, budgeted;
nothing at all when nothing is relevant.

:func:`serve` is the call the warm process runs (``memvault.interfaces.warm.CALLS["agent_context"]``); a hook
without a warm process calls :func:`build` itself, keyword-only, and says so.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.hits import Hit, count_tokens
from ...core.recall import QUERY_MAX
from ...core.render import render, render_one
from ...rules.config import CONTEXT_HARD_BYTES
from ...rules.errors import MemvaultError, describe
from ...rules.freshness import stale_reason
from ...rules.fsutil import ensure_dir, open_private
from ...rules.markup import escape_text
from ...rules.timeutil import format_time, now
from ...rules.trust import ACCEPTED_BY, Policy
from . import project as project_mod
from .project import shown
from . import recent as recent_mod

if TYPE_CHECKING:
    from ...core.vault import Vault

#: Codex spills hook text above this many tokens of its own estimate (codex-rs/hooks/src/output_spill.rs).
CODEX_TOKEN_LIMIT = 2500
#: The hook log in the vault's state directory: what went wrong or was degraded, for 'memvault agent status'.
LOG_NAME = "agents.log"
#: Facts read from the project's own key folders (facts/<slug>/, facts/projects/<slug>/).
PROJECT_FACTS = 30
#: Seconds between the full scans a session start asks of the index (recall's own default is 30 s).
FULL_SCAN_EVERY = 86400.0


@dataclass
class Context:
    """A context block and what to say about it. ``text`` is empty only for a prompt nothing is relevant to."""

    text: str
    notices: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.text, "notices": self.notices, "counts": self.counts}


def serve(vault: Vault, *, kind: str = "session", cwd: str | None = None, start: str | None = None,
          prompt: str | None = None, runtime: str | None = None, mode: str = "hybrid") -> dict[str, Any]:
    """The warm process's call ``agent_context``: :func:`build` on its warm vault (hybrid recall, the model
    already loaded), as JSON. A call without a runtime (the hook warming the process up) is not logged."""
    return build(vault, kind=kind, cwd=cwd, start=start, prompt=prompt, runtime=runtime, mode=mode,
                 log=runtime is not None).to_dict()


def build(vault: Vault, *, kind: str = "session", cwd: str | None = None, start: str | None = None,
          prompt: str | None = None, runtime: str | None = None, mode: str = "keyword", log: bool = True) -> Context:
    """The block for a session start (``kind="session"``) or a prompt (``kind="prompt"``), recalled in ``mode``
    (``keyword`` never loads a model). The recall is logged as asked by ``agent:<runtime>`` unless ``log`` is
    false."""
    ask = {"source": f"agent:{runtime}" if runtime else None, "log": log}  # who asked, in the recall log
    if kind == "prompt":
        return _prompt(vault, prompt or "", mode, ask)
    return _session(vault, cwd, start, mode, ask)


# ------------------------------------------------------------------------------------------------ session start
def _session(vault: Vault, cwd: str | None, start: str | None, mode: str, ask: dict[str, Any]) -> Context:
    settings = vault.config.agents
    project = project_mod.detect(cwd)
    notices: list[str] = []
    if not vault.index.exists():
        notices.append("the index was not built yet: it was built now for keywords (run 'memvault reindex' for "
                       "meaning-based recall)")
    hits: list[Hit] = []
    seen: set[tuple[str, str]] = set()

    def add(items: list[Hit]) -> None:
        for hit in items:
            if (hit.kind, hit.id) not in seen:
                seen.add((hit.kind, hit.id))
                hits.append(hit)

    own = _project_facts(vault, project, settings.budget)
    recalled: list[Hit] = []
    query = project.query()
    if vault.index.exists():
        # Between full scans, a new, removed or renamed file shows in its directory's mtime and recall stats the
        # files it returns: enough for a session's first look, which then skips the periodic full scan (10k stats).
        vault.index.refresh(FULL_SCAN_EVERY)
    if query:
        try:
            result = vault.recall(query, k=15, kinds=["fact", "procedure"], mode=mode, **ask)
            recalled = list(result)
            notices += _short(result.warnings)
            if result.mode == "keyword" and mode != "keyword":
                notices.append("keyword-only recall: the model is not available")
        except MemvaultError as exc:
            notices.append(f"recall failed: {describe(exc)[0]}")
    tags: set[str] = set()
    episodes = _project_episodes(vault, project, settings.episodes, tags)
    # What recall brings that is filed under another project the vault knows is that project's: a session in
    # shop-api is not told how billing deploys because both mention "deploy".
    others = (_known_projects(vault) | tags) - {project.slug}
    recalled = [h for h in recalled if not _elsewhere(h, project, others)]
    add(own + _tagged_facts(vault, project.slug))
    add(episodes)
    add(_project_procedures(vault, project))
    add([h for h in recalled if h.kind == "fact"])
    add([h for h in recalled if h.kind == "procedure"])
    # What the runtime's source may not read ([scopes]) is neither shown nor counted.
    reader = vault.reader(ask.get("source"))
    hits = [h for h in hits if reader.allows(h.path)]
    waiting = _inbox_count(vault) if reader.scope is None else len(vault.facts.inbox([], reader=reader.source))
    tail = [f"memvault: {n} proposal{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} in the inbox for a person "
            "('memvault inbox')."] if (n := waiting) else []

    def heading(counts: dict[str, int], left: int) -> str:
        return (f"memvault memory for {project.describe()}" + (f", session {shown(start)}" if start else "") + ": "
                + ", ".join(_plural(counts[k], word) for k, word in (("fact", "fact"), ("episode", "episode"),
                                                                       ("procedure", "runbook")))
                + (f" ({left} more left out for the budget of {settings.budget} tokens)" if left else "") + ".")

    # The lines around the memories, at their longest (every hit counted; then also some left out): the room the
    # memories must leave them.
    most = {k: sum(1 for h in hits if h.kind == k) for k in ("fact", "episode", "procedure")}
    for left in (0, len(hits)):
        named = _left_out([h for h in hits if h.kind == "procedure"]) if left else []
        frame = "\n".join([escape_text(heading(most, left))] + [escape_text(line) for line in named + tail])
        kept = _fit(hits, settings.budget, frame)
        if len(kept) == len(hits):
            break
    # a runbook is never cut, so a long one is left out whole: named, with how to read it, or the session never
    # learns that the project's rollback runbook exists
    tail = _left_out([h for h in hits if h.kind == "procedure" and h not in kept]) + tail
    counts = {k: sum(1 for h in kept if h.kind == k) for k in ("fact", "episode", "procedure")}
    if mode == "keyword":
        notices.insert(0, "keyword-only recall (no warm process to embed the question; meaning-based matches may "
                          "be missing)")
    head = heading(counts, len(hits) - len(kept))
    # memvault's own health (keyword-only, the index, a watcher's warning) is not the model's business: it goes
    # to agents.log, which 'memvault agent status' shows, never into the block. The lines around the block carry
    # names memvault did not choose (the branch, the origin's name, the start the runtime reports): escaped as
    # memory text is, so none of them can open a tag.
    if notices and ask.get("log") and ask.get("source"):  # a runtime's session (a preview prints them itself)
        log_line(vault, f"session-start ({_who(ask)}) in {project.describe()}: " + "; ".join(notices))
    body = (render(kept, "prompt") if kept else "memvault: nothing stored yet about this project." if not hits
            else f"memvault: none of the {len(hits)} memories about this project fits the budget of "
                 f"{settings.budget} tokens ([agents] budget).")
    text = _cap("\n".join([escape_text(head), body] + [escape_text(line) for line in tail]))
    return Context(text, notices, {**counts, "inbox": waiting, "left_out": len(hits) - len(kept)})


#: Runbooks left out for the budget named by :func:`_left_out`, at most.
LEFT_OUT_NAMED = 5


def _left_out(procedures: list[Hit]) -> list[str]:
    """The line naming runbooks left out for the budget (a runbook is never cut) and how to read one whole."""
    if not procedures:
        return []
    names = [h.id for h in procedures[:LEFT_OUT_NAMED]]
    more = f" and {len(procedures) - len(names)} more" if len(procedures) > len(names) else ""
    how = (f"'memvault proc show {names[0]}' prints it whole" if len(procedures) == 1
           else "'memvault proc show NAME' prints one whole")
    return [f"memvault: left out for the budget, never cut: runbook{'s' if len(procedures) > 1 else ''} "
            f"{', '.join(names)}{more} ({how}; get_procedure over MCP)."]


def _who(ask: dict[str, Any]) -> str:
    source = ask.get("source") or ""
    return source.split(":", 1)[1] if source.startswith("agent:") else "preview"


def log_line(vault: Vault, line: str) -> None:
    """One line in the vault's agents.log (what 'memvault agent status' shows): never raises, a hook goes on."""
    try:
        ensure_dir(vault.state_dir)
        fd = open_private(vault.state_dir / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "ab") as f:
            stamp = format_time(now().replace(microsecond=0))
            f.write(f"{stamp} {' '.join(line.split())}\n".encode("utf-8", "replace"))
    except (OSError, MemvaultError):
        return


#: The share of the room each kind may take before the others had their turn: the project's facts cannot crowd
#: out yesterday's failure or the rollback runbook (what is left after the first pass goes to any kind, in order).
SHARES = {"fact": 0.55, "episode": 0.25, "procedure": 0.35}


def _fit(hits: list[Hit], budget: int, frame: str) -> list[Hit]:
    """The hits, in order, that fit ``budget`` tokens and the hard caps once rendered (one that does not fit is
    skipped, never cut; smaller ones after it may still fit), each kind first within its :data:`SHARES`. Room is
    kept for ``frame``, the lines around the block."""
    room = min(budget, CONTEXT_HARD_BYTES // 4) - count_tokens(frame) - 2
    costs = [count_tokens(render_one(hit, "prompt")) + 1 for hit in hits]
    used = count_tokens(render([], "prompt"))
    taken: set[int] = set()
    by_kind: dict[str, int] = {}
    for share_pass in (True, False):
        for i, (hit, cost) in enumerate(zip(hits, costs)):
            if i in taken or used + cost > room:
                continue
            if share_pass and by_kind.get(hit.kind, 0) + cost > SHARES.get(hit.kind, 1.0) * room:
                continue
            taken.add(i)
            used += cost
            by_kind[hit.kind] = by_kind.get(hit.kind, 0) + cost
    kept = [hit for i, hit in enumerate(hits) if i in taken]
    while kept and not _within_caps(render(kept, "prompt"), reserve=len(frame.encode("utf-8")) + 2):
        kept.pop()
    return kept


def _cap(text: str) -> str:
    """The last guard: a block over the hard caps loses lines from its end (never happens when :func:`_fit` did
    its job; a very long notice could)."""
    if _within_caps(text):
        return text
    lines = text.splitlines()
    while lines and not _within_caps("\n".join(lines) + "\n[memvault: cut to fit the hook output cap]"):
        lines.pop()
    return "\n".join(lines) + "\n[memvault: cut to fit the hook output cap]"


def _within_caps(text: str, reserve: int = 0) -> bool:
    data = text.encode("utf-8")
    return len(data) + reserve <= CONTEXT_HARD_BYTES and codex_tokens(text) + reserve // 4 <= CODEX_TOKEN_LIMIT - 100


def codex_tokens(text: str) -> int:
    """Codex's estimate of a text's tokens: the larger of UTF-8 bytes / 4 and a lexical count (each word its
    bytes / 4 rounded up, each other non-space character one), as codex-rs/utils/output-truncation counts."""
    data = text.encode("utf-8")
    by_bytes = (len(data) + 3) // 4
    lexical, word = 0, 0
    for ch in text:
        if ch.isalnum() or ch == "_":
            word += len(ch.encode("utf-8"))
            continue
        lexical += (word + 3) // 4
        word = 0
        if not ch.isspace():
            lexical += 1
    lexical += (word + 3) // 4
    return max(by_bytes, lexical)


def _project_facts(vault: Vault, project: project_mod.Project, budget: int) -> list[Hit]:
    """Facts keyed for the project: ``facts/<slug>/...`` and ``facts/projects/<slug>/...``, most important and
    most recently updated first. Only the most recently changed files that could fit the budget are read."""
    slug = project.slug
    paths = [p for base in (vault.facts.dir / slug, vault.facts.dir / "projects" / slug)
             for p in _md_files(base, 10 * PROJECT_FACTS)]
    stats = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        stats.append((-st.st_mtime_ns, st.st_size, path))
    stats.sort()
    facts, room = [], budget * 4 * 2  # bytes of files, front matter included, that could fill the budget
    for _, size, path in stats[:PROJECT_FACTS]:
        if room <= 0:
            break
        room -= size
        key = path.relative_to(vault.facts.dir).as_posix()[:-3]
        try:
            facts.append(vault.facts.get(key))
        except MemvaultError:
            continue
    facts.sort(key=lambda f: (-f.importance, -(f.updated.timestamp() if f.updated else 0.0)))
    return [_fact_hit(vault, f) for f in facts]


def _md_files(base: Path, limit: int) -> list[Path]:
    found: list[Path] = []
    if limit <= 0 or not base.is_dir() or base.is_symlink():
        return found
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".md") and not name.startswith("."):
                found.append(Path(dirpath) / name)
                if len(found) >= limit:
                    return found
    return found


def _fact_hit(vault: Vault, fact: Any) -> Hit:
    reason = stale_reason(fact, vault.config.facts.review_after)
    # A file under the project's key is not trusted for being there: a teammate's commit or a hand edit can
    # name any source, and the block says which ones [trust] does not vouch for.
    trusted = Policy(vault.config.trust.trusted).vouches(fact.source, fact.extra.get(ACCEPTED_BY))
    extra: dict[str, Any] = {"trusted": trusted, "stale": reason is not None}
    if reason is not None:
        extra["stale_reason"] = reason
    return Hit(kind="fact", id=fact.key, text=fact.text, score=1.0, factors={"confidence": fact.confidence},
               source=fact.source, created=format_time(fact.created) if fact.created else None,
               updated=format_time(fact.updated) if fact.updated else None,
               path=fact.path.relative_to(vault.root).as_posix(), extra=extra)


def _tagged_facts(vault: Vault, tag: str) -> list[Hit]:
    """Facts tagged for the project, whatever the question (a recall keeps only what is relevant enough to its
    query, and a tag says the fact is about the project): found in the index by tag, most important first."""
    if not vault.index.exists():
        return []
    try:
        rows, _total = vault.browse.facts(tag=tag, limit=PROJECT_FACTS)
    except MemvaultError:
        return []
    facts = []
    for row in rows:
        try:
            facts.append(vault.facts.get(row.key))
        except MemvaultError:
            continue
    facts.sort(key=lambda f: (-f.importance, -(f.updated.timestamp() if f.updated else 0.0)))
    return [_fact_hit(vault, f) for f in facts]


def _project_episodes(vault: Vault, project: project_mod.Project, limit: int, tags: set[str]) -> list[Hit]:
    """What happened to the project lately (:mod:`.recent`): failures, incidents and deploys before chat turns,
    newer before older; ``tags`` collects the tags read on the way."""
    policy = Policy(vault.config.trust.trusted)
    picks = recent_mod.recent(vault.episodes.files(), project, limit, seen_tags=tags)
    return [Hit(kind="episode", id=e.id, text=e.text, score=p.weight, factors={}, source=e.source,
                created=e.created_at, updated=None, path=e.path.relative_to(vault.root).as_posix() if e.path else "",
                extra={"trusted": policy.is_trusted(e.source), "why": p.why})
            for p in picks for e in (p.episode,)]


def _project_procedures(vault: Vault, project: project_mod.Project, limit: int = 5) -> list[Hit]:
    """The project's own runbooks (``procedures/<slug>/...``, ``procedures/projects/<slug>/...``) with their last
    runs: a rollback runbook is what a session most needs and least asks for by name."""
    base = vault.procedures.dir
    items: list[tuple[str, Path]] = []
    for folder in (base / project.slug, base / "projects" / project.slug):
        for path in _files(folder, 4 * limit):
            if path.name.startswith(".") or path.name.endswith("~"):
                continue
            items.append((path.relative_to(base).with_suffix("").as_posix(), path))
    if not items:
        return []
    items.sort(key=lambda item: (_rollback_first(item[0]), item[0]))
    try:
        procs = vault.procedures.store.get_many(items[:limit])  # provenance for all in two git calls
    except MemvaultError:
        return []
    runs: dict[str, list[dict[str, Any]]] = {}
    if vault.index.exists():
        try:
            runs = vault.index.runs_of([p.name for p in procs], 3)
        except MemvaultError:
            runs = {}
    hits = []
    for proc in procs:
        hit = Hit(kind="procedure", id=proc.name, text=proc.text, score=1.0, factors={}, source=None, created=None,
                  updated=None, path=proc.path.relative_to(vault.root).as_posix(), commit=proc.commit,
                  blob=proc.blob, extra={"trusted": True})
        if runs.get(proc.name):
            hit.extra["runs"] = [_run(r) for r in runs[proc.name]]
        hits.append(hit)
    return hits


def _rollback_first(name: str) -> int:
    low = name.lower()
    return 0 if any(w in low for w in ("rollback", "roll-back", "revert", "restore")) else 1


def _run(run: dict[str, Any]) -> dict[str, Any]:
    meta = run.get("meta") or {}
    return {"episode": run.get("id"), "at": run.get("created"), "exit_code": meta.get("exit_code"),
            "commit": meta.get("commit"), "dirty": meta.get("dirty", False)}


def _files(base: Path, limit: int) -> list[Path]:
    """The project's runbook files, never a link (a committed link to a file outside the vault stopped the whole
    block: its path is not in the work tree)."""
    found: list[Path] = []
    if not base.is_dir() or base.is_symlink():
        return found
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if os.path.islink(os.path.join(dirpath, name)):
                continue
            found.append(Path(dirpath) / name)
            if len(found) >= limit:
                return found
    return found


def _known_projects(vault: Vault) -> set[str]:
    """The projects the vault knows of: tags on its facts, and the folders under facts/projects/ and
    procedures/projects/ (episode tags are added by the caller, from the episodes it read)."""
    known: set[str] = set()
    if vault.index.exists():
        try:
            known |= {tag for tag, _n in vault.browse.tags()}
        except MemvaultError:
            pass
    for base in (vault.facts.dir / "projects", vault.procedures.dir / "projects"):
        try:
            known |= {entry.name for entry in os.scandir(base) if entry.is_dir(follow_symlinks=False)}
        except OSError:
            continue
    return known


def _elsewhere(hit: Hit, project: project_mod.Project, others: set[str]) -> bool:
    """Whether a recalled fact or runbook is filed under another known project and does not name this one."""
    folder = recent_mod.owner(hit.id)
    return folder in others and folder != project.slug and not recent_mod.mentions(project, hit.text)


def _inbox_count(vault: Vault) -> int:
    base = vault.facts.inbox_dir
    if not base.is_dir():
        return 0
    return sum(1 for _, _, files in os.walk(base) for name in files if name.endswith(".md")
               and not name.startswith("."))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _short(warnings: list[str], limit: int = 2) -> list[str]:
    return [w if len(w) <= 300 else w[:297] + "..." for w in warnings[:limit]]


# ------------------------------------------------------------------------------------------------ per prompt
def _prompt(vault: Vault, prompt: str, mode: str, ask: dict[str, Any]) -> Context:
    """What recall finds for one prompt above its floors, budgeted: an empty text when nothing is relevant."""
    if not prompt.strip():
        return Context("")
    budget = vault.config.agents.prompt_budget
    if len(prompt) > QUERY_MAX:  # a pasted log or file: what it asks is at its start
        prompt = prompt[:QUERY_MAX].rsplit(None, 1)[0]
    result = vault.recall(prompt, k=8, budget=min(budget, CONTEXT_HARD_BYTES // 4 - 50), fmt="prompt", mode=mode,
                          **ask)
    if not len(result):
        return Context("", counts={"hits": 0})
    text = render(list(result), "prompt")
    while not _within_caps(text) and len(result) > 1:
        del result[-1]
        text = render(list(result), "prompt")
    return Context(text if _within_caps(text) else "", counts={"hits": len(result)})
