"""Keeping a vault healthy: retention, purge by source, staleness, duplicates, expiry and ingest.

Every cleanup is a command a person can run, review (``--dry-run`` or no ``--apply``) and undo: fact changes
are git commits, episode removals are reported line counts and bytes per kind.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from .dedup import compare, groups
from .episodes import Episode, RewriteReport, source_matches
from .errors import InvalidValue, MemvaultError
from .facts import Fact, refuse_secrets, validate_key
from .fsutil import atomic_write
from .timeutil import format_time, now, parse_date, parse_time

if TYPE_CHECKING:
    from .vault import Vault


def text_hash(text: str) -> str:
    """The hash under which recall remembers what it returned (whitespace-normalised, so re-wrapping a
    recalled memory does not make it new)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()[:32]


# ------------------------------------------------------------------------------------------------ retention
def prune(vault: Vault, *, dry_run: bool = False, at: datetime | None = None) -> RewriteReport:
    """Remove episodes older than ``[retention]`` allows for their kind; their index rows go with them."""
    settings = vault.lifecycle
    current = at or now()

    def expired(e: Episode) -> bool:
        return (current - e.time).total_seconds() > settings.max_age(e.kind)

    report = vault.episodes.rewrite(expired, dry_run=dry_run)
    if not dry_run and report.files_changed:
        _after_episode_rewrite(vault, report, f"prune episodes: {len(report.removed)} lines past retention")
    return report


def _after_episode_rewrite(vault: Vault, report: RewriteReport, message: str) -> None:
    if vault.config.track_episodes:
        vault.commit(report.files_changed, message, source=vault.default_source())
    vault.refresh_index(report.files_changed)


# ------------------------------------------------------------------------------------------------ purge
@dataclass
class PurgeReport:
    source: str
    episodes: RewriteReport
    facts: list[Fact] = field(default_factory=list)
    commit: str | None = None

    def to_dict(self, root: Any) -> dict[str, Any]:
        return {
            "source": self.source,
            "facts_removed": [f.key for f in self.facts if not f.quarantined],
            "inbox_removed": [f.key for f in self.facts if f.quarantined],
            "episodes_removed": [e.id for e in self.episodes.removed],
            "episodes": self.episodes.to_dict(root),
            "commit": self.commit,
        }


def purge(vault: Vault, source: str, *, dry_run: bool = False) -> PurgeReport:
    """Remove every episode and fact (and inbox proposal) whose source matches ``source`` (exact, or a prefix
    ending in ``*``), their index rows, and commit the fact removals as one commit naming the source."""
    if not source or source == "*":
        raise InvalidValue("--source", "give a source or a prefix like web:* (purging everything is not a purge)")
    episodes = vault.episodes.rewrite(lambda e: source_matches(source, e.source), dry_run=dry_run)
    facts = [f for f in vault.facts.iter() if source_matches(source, f.source)]
    facts += [f for f in vault.facts.inbox() if source_matches(source, f.source)]
    report = PurgeReport(source, episodes, facts)
    if dry_run:
        return report
    if episodes.files_changed:
        _after_episode_rewrite(vault, episodes, f"purge source {source}: {len(episodes.removed)} episodes")
    if facts:
        with vault.write_lock():
            for f in facts:
                f.path.unlink(missing_ok=True)
            report.commit = vault.commit(
                [f.path for f in facts],
                f"purge source {source}: {len(facts)} facts\n\n" + "\n".join(f"- {f.key}" for f in facts),
                source=vault.default_source(),
            )
        vault.refresh_index([f.path for f in facts if not f.quarantined])
    return report


# ------------------------------------------------------------------------------------------------ staleness
def stale_reason(fact: Fact, review_after: float, current: datetime | None = None) -> str | None:
    """Why ``fact`` is stale, or None: ``valid_until`` passed, or not updated for longer than review_after."""
    current = current or now()
    if fact.valid_until is not None and fact.valid_until < current.date():
        return f"valid_until {fact.valid_until.isoformat()} has passed"
    period = fact.review_after or review_after
    if fact.updated is not None and (current - fact.updated).total_seconds() > period:
        days = int(period // 86400)
        return f"not updated since {fact.updated.date().isoformat()} (review after {days}d)"
    return None


def is_stale_doc(valid_until: str | None, review_after: float | None, updated: str | None, default_review: float,
                 current: datetime) -> bool:
    """The same rule on an index row (recall ranks before it reads files)."""
    if valid_until:
        try:
            if parse_date(valid_until) < current.date():
                return True
        except MemvaultError:
            pass
    if updated:
        try:
            return (current - parse_time(updated)).total_seconds() > (review_after or default_review)
        except MemvaultError:
            return False
    return False


def stale(vault: Vault, at: datetime | None = None) -> list[dict[str, Any]]:
    """Stale facts with the reason and the date of their last commit."""
    out = []
    for fact in vault.facts.iter():
        reason = stale_reason(fact, vault.lifecycle.review_after, at)
        if reason is None:
            continue
        last = None
        if vault.git is not None:
            entries = vault.git.run("log", "-1", "--format=%H %aI", "--", vault.git.rel(fact.path)).split()
            last = {"commit": entries[0], "date": entries[1]} if entries else None
        out.append({"key": fact.key, "reason": reason, "last_commit": last, "path": fact.path.relative_to(vault.root).as_posix()})
    return out


def verify(vault: Vault, key: str, *, source: str | None = None) -> Fact:
    """A person confirms a fact still holds: ``updated`` is bumped and committed, clearing review staleness."""
    fact = vault.facts.get(key)
    return vault.facts.set(key, fact.text, source=source, message=f"fact verify {key}", allow_secret=True)


# ------------------------------------------------------------------------------------------------ duplicates
@dataclass
class DedupReport:
    groups: list[list[str]]
    conflicts: list[dict[str, Any]]
    merged: list[dict[str, Any]] = field(default_factory=list)
    commit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"groups": self.groups, "conflicts": self.conflicts, "merged": self.merged, "commit": self.commit}


def dedup(vault: Vault, *, apply: bool = False) -> DedupReport:
    """Duplicate groups and conflicts over the whole vault; ``apply`` merges each group into one fact."""
    settings = vault.lifecycle
    facts = {f.key: f for f in vault.facts.iter()}
    found, conflict_pairs = groups([(k, f.text) for k, f in facts.items()], threshold=settings.duplicate_jaccard,
                                   min_shared=settings.duplicate_min_shared)
    conflicts = [{"a": a, "b": b, "differing": list(m.differing), "shared": list(m.shared)}
                 for a, b, m in conflict_pairs]
    report = DedupReport([list(g) for g in found], conflicts)
    if not apply or not found:
        return report
    touched = []
    lines = []
    with vault.write_lock():
        for group in found:
            members = [facts[k] for k in group]
            survivor, changes = merge_plan(members)
            doc_text = _apply_merge(survivor, changes)
            atomic_write(survivor.path, doc_text.encode("utf-8"))
            touched.append(survivor.path)
            for f in members:
                if f.key != survivor.key:
                    f.path.unlink(missing_ok=True)
                    touched.append(f.path)
            others = [f.key for f in members if f.key != survivor.key]
            report.merged.append({"into": survivor.key, "merged": others})
            lines.append(f"- {', '.join(others)} -> {survivor.key}")
        report.commit = vault.commit(touched, f"dedup: merged {sum(len(g) - 1 for g in found)} facts\n\n" +
                                     "\n".join(lines), source=vault.default_source())
    vault.refresh_index(touched)
    return report


def merge_plan(members: list[Fact]) -> tuple[Fact, dict[str, Any]]:
    """Keep the most confident fact (the most recent on a tie); it takes the union of tags, the highest
    importance and confidence, and the source of the most recently updated member."""
    def when(f: Fact) -> datetime:
        return f.updated or f.created or datetime.min.replace(tzinfo=now().tzinfo)

    survivor = max(members, key=lambda f: (f.confidence, when(f), f.key))
    newest = max(members, key=when)
    tags: list[str] = []
    for f in [survivor, *members]:
        tags.extend(t for t in f.tags if t not in tags)
    changes: dict[str, Any] = {
        "tags": tags,
        "importance": max(f.importance for f in members),
        "confidence": max(f.confidence for f in members),
        "updated": now().replace(microsecond=0),
    }
    if newest.source:
        changes["source"] = newest.source
    return survivor, changes


def _apply_merge(survivor: Fact, changes: dict[str, Any]) -> str:
    from . import frontmatter_edit as fm
    from .facts import KNOWN_FIELDS

    text = survivor.path.read_text(encoding="utf-8")
    doc = fm.parse(text)
    return fm.update(doc, changes, list(KNOWN_FIELDS), doc.body).render()


def similar_facts(vault: Vault, key: str, text: str) -> list[dict[str, Any]]:
    """Existing facts that ``text`` duplicates or contradicts (reported on ``fact set``)."""
    settings = vault.lifecycle
    out = []
    for fact in _candidates(vault, text, exclude=key):
        match = compare(text, fact.text, threshold=settings.duplicate_jaccard, min_shared=settings.duplicate_min_shared)
        if match is not None:
            out.append({"key": fact.key, "kind": match.kind, "jaccard": round(match.jaccard, 3),
                        "shared": list(match.shared), "differing": list(match.differing)})
    return out


def _candidates(vault: Vault, text: str, exclude: str | None) -> list[Fact]:
    """Facts worth comparing with ``text``: the index's keyword hits when there is an index, else all facts."""
    keys: list[str] | None = None
    index = vault.index
    if index.exists():
        try:
            rows = index.search_keywords(text, ["fact"], 50)
            docs = index.chunk_docs([r for r, _ in rows])
            keys = list(dict.fromkeys(d["id"] for d in docs.values()))
        except MemvaultError:
            keys = None
    if keys is None:
        return [f for f in vault.facts.iter() if f.key != exclude]
    out = []
    for k in keys:
        if k == exclude:
            continue
        try:
            out.append(vault.facts.get(k))
        except MemvaultError:
            continue
    return out


# ------------------------------------------------------------------------------------------------ expiry
def expire(vault: Vault, *, apply: bool = False, at: datetime | None = None) -> dict[str, Any]:
    """Facts below ``[facts] expire_importance`` that recall has not returned for ``expire_after`` (counted
    from their creation when recall never returned them); ``apply`` removes them in one commit."""
    settings = vault.lifecycle
    current = at or now()
    facts = [f for f in vault.facts.iter() if f.importance < settings.expire_importance]
    access = vault.state.get([("fact", f.key) for f in facts])
    candidates = []
    for f in facts:
        count, last = access.get(("fact", f.key), (0, None))
        since = last or f.created or f.updated
        if since is None or (current - since).total_seconds() > settings.expire_after:
            candidates.append({"key": f.key, "importance": f.importance, "recalled": count,
                               "last_recalled": format_time(last) if last else None,
                               "path": f.path.relative_to(vault.root).as_posix()})
    result: dict[str, Any] = {"candidates": candidates, "commit": None}
    if apply and candidates:
        paths = [vault.facts.path_for(c["key"]) for c in candidates]
        with vault.write_lock():
            for p in paths:
                p.unlink(missing_ok=True)
            result["commit"] = vault.commit(
                paths, f"expire {len(paths)} facts: low importance, not recalled\n\n" +
                "\n".join(f"- {c['key']}" for c in candidates), source=vault.default_source())
        vault.refresh_index(paths)
    return result


# ------------------------------------------------------------------------------------------------ ingest
@dataclass
class IngestReport:
    added: list[dict[str, Any]] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("added", "merged", "conflicts", "skipped", "quarantined")}


_SLUG = re.compile(r"[^a-z0-9]+")


def slug_key(category: str | None, text: str) -> str:
    """A key for an extracted fact that came without one: ``<category>/<first words>``."""
    words = _SLUG.sub("-", text.lower()).strip("-").split("-")
    slug = "-".join(w for w in words[:8] if w)[:60].strip("-") or "fact"
    prefix = _SLUG.sub("-", (category or "extracted").lower()).strip("-") or "extracted"
    return f"{prefix}/{slug}"


def ingest(vault: Vault, stream: TextIO, *, source: str | None = None, name: str = "-",
           allow_secret: bool = False) -> IngestReport:
    """Run extracted candidates (JSONL ``{"type": "fact"|"episode", ...}``) through the same gates as any
    write: trust, secrets and dedup. A candidate whose text is a memory recall returned is skipped, so recalled
    memories are never re-extracted as new ones."""
    report = IngestReport()
    recalled = vault.state.recalled_hashes()
    for lineno, line in enumerate(stream, 1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            report.skipped.append({"line": where, "reason": f"not valid JSON ({exc.msg})"})
            continue
        if not isinstance(item, dict) or item.get("type") not in ("fact", "episode"):
            report.skipped.append({"line": where, "reason": 'needs "type": "fact" or "episode"'})
            continue
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            report.skipped.append({"line": where, "reason": "no text"})
            continue
        if text_hash(text) in recalled:
            report.skipped.append({"line": where, "reason": "text is a memory recall returned"})
            continue
        src = item.get("source") or source or vault.default_source()
        try:
            if not allow_secret:
                refuse_secrets(text, where)
            if item["type"] == "episode":
                e = vault.episodes.append(text, source=src, kind=item.get("kind") or "raw", at=item.get("created_at"),
                                          tags=item.get("tags"), meta=item.get("meta"), allow_secret=True)
                entry = {"line": where, "episode": e.id, "trusted": vault.facts.is_trusted(src)}
                report.added.append(entry)
                continue
            key = item.get("key") or slug_key(item.get("category"), text)
            validate_key(key)
            matches = similar_facts(vault, key, text)
            conflict = next((m for m in matches if m["kind"] == "conflict"), None)
            if conflict is not None:
                report.conflicts.append({"line": where, "key": key, "with": conflict["key"],
                                         "differing": conflict["differing"]})
                continue
            duplicate = next((m for m in matches if m["kind"] == "duplicate"), None)
            if duplicate is not None and vault.facts.is_trusted(src):
                existing = vault.facts.get(duplicate["key"])
                tags = list(dict.fromkeys([*existing.tags, *(item.get("tags") or [])]))
                importance = max(existing.importance, float(item.get("importance", 0) or 0))
                vault.facts.set(existing.key, existing.text, tags=tags, importance=importance, source=src,
                                message=f"fact merge {existing.key} (ingest)", allow_secret=True)
                report.merged.append({"line": where, "into": existing.key})
                continue
            fact = vault.facts.set(
                key, text, category=item.get("category"), importance=item.get("importance"),
                confidence=item.get("confidence"), source=src, tags=item.get("tags"),
                valid_until=item.get("valid_until"), allow_secret=True)
            entry = {"line": where, "key": fact.key}
            if duplicate is not None:
                entry["duplicate_of"] = duplicate["key"]
            (report.quarantined if fact.quarantined else report.added).append(entry)
        except MemvaultError as exc:
            report.skipped.append({"line": where, "reason": str(exc)})
        except (TypeError, ValueError) as exc:
            report.skipped.append({"line": where, "reason": f"bad field: {exc}"})
    return report
