"""Keeping a vault healthy: retention, purge by source, staleness, duplicates, expiry and ingest.

Every cleanup is a command a person can run, review (``--dry-run`` or no ``--apply``) and undo: fact changes are
git commits, episode removals are reported line counts and bytes per kind. Each function plans here and changes
nothing itself: every change goes through the write gate (:mod:`memvault.core.gate`), with the caller's source.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..rules.dedup import groups
from ..rules.freshness import stale_reason, text_hash
from ..stores.episodes import Episode, RewriteReport, source_matches
from ..rules.errors import InvalidKey, InvalidValue, MemvaultError
from ..stores.facts import Fact
from .gate import WriteGate
from ..rules.timeutil import format_time, now
from ..rules.trust import Op
from ..rules.validation import validate_key, validate_tags


# ------------------------------------------------------------------------------------------------ retention
def prune(gate: WriteGate, *, source: str, dry_run: bool = False, at: datetime | None = None) -> RewriteReport:
    """Remove episodes older than ``[retention]`` allows for their kind; their index rows go with them."""
    gate.require(Op.PRUNE, source)
    retention = gate.config.retention
    current = at or now()

    def expired(e: Episode) -> bool:
        return (current - e.time).total_seconds() > retention.max_age(e.kind)

    with gate.episodes.lock():
        report = gate.episodes.plan_rewrite(expired)
        if not dry_run:
            gate.rewrite_episodes(report, message=f"prune episodes: {len(report.removed)} lines past retention",
                                  source=source)
    return report


# ------------------------------------------------------------------------------------------------ purge
@dataclass
class PurgeReport:
    source: str
    episodes: RewriteReport
    facts: list[Fact] = field(default_factory=list)
    commit: str | None = None

    def to_dict(self, root: Path) -> dict[str, Any]:
        return {
            "source": self.source,
            "facts_removed": [f.key for f in self.facts if not f.quarantined],
            "inbox_removed": [f.key for f in self.facts if f.quarantined],
            "episodes_removed": [e.id for e in self.episodes.removed],
            "episodes": self.episodes.to_dict(root),
            "commit": self.commit,
        }


def purge(gate: WriteGate, pattern: str, *, source: str, dry_run: bool = False) -> PurgeReport:
    """Remove every episode, fact and inbox proposal whose source matches ``pattern`` (exact, or a prefix ending
    in ``*``), all or nothing: one commit naming the source, or (when git refuses it) no change at all. Then the
    index rows go, the keyword index is merged and the WAL truncated, and the usage rows are dropped, so the
    purged text is not left readable in ``.memvault/``."""
    if not pattern or not pattern.strip() or pattern.strip() == "*":
        raise InvalidValue("--source", "give a source or a prefix like web:* (purging everything is not a purge)")
    if not dry_run:
        gate.require(Op.PURGE, source)
    with gate.lock(), gate.episodes.lock():
        episodes = gate.episodes.plan_rewrite(lambda e: source_matches(pattern, e.source))
        facts = [f for f in gate.facts.iter() if source_matches(pattern, f.source)]
        facts += [f for f in gate.facts.inbox() if source_matches(pattern, f.source)]
        report = PurgeReport(pattern, episodes, facts)
        if dry_run or not (facts or episodes.changes):
            return report
        changes = [gate.facts.plan_delete(f.key, inbox=f.quarantined)[0] for f in facts] + episodes.changes
        inbox, episodes_dir = gate.facts.inbox_dir, gate.episodes.dir

        def committed(path: Path) -> bool:
            if episodes_dir in path.parents:
                return gate.config.track_episodes
            if inbox in path.parents:
                return gate.config.trust.share_inbox
            return True

        listing = [f"- fact {f.key}" + (" (inbox)" if f.quarantined else "") for f in facts]
        report.commit = gate.apply(
            changes, source=source, commit=committed,
            message=f"purge source {pattern}: {len(facts)} facts, {len(episodes.removed)} episodes\n\n"
                    + "\n".join(listing))
    warnings: list[str] = []
    gate.tell_index([c.path for c in changes], warnings)
    try:
        if gate.index.exists():
            gate.index.scrub()
        gate.state().forget([("fact", f.key) for f in facts] + [("episode", e.id) for e in episodes.removed])
    except MemvaultError:
        pass
    return report


# ------------------------------------------------------------------------------------------------ staleness
def stale(gate: WriteGate, at: datetime | None = None) -> list[dict[str, Any]]:
    """Stale facts with the reason and the date of their last commit."""
    out = []
    for fact in gate.facts.iter():
        reason = stale_reason(fact, gate.config.facts.review_after, at)
        if reason is None:
            continue
        last = None
        if gate.git is not None:
            entries = gate.git.run("log", "-1", "--format=%H %aI", "--", gate.git.rel(fact.path)).split()
            last = {"commit": entries[0], "date": entries[1]} if entries else None
        out.append({"key": fact.key, "reason": reason, "last_commit": last,
                    "path": fact.path.relative_to(gate.root).as_posix()})
    return out


# ------------------------------------------------------------------------------------------------ duplicates
@dataclass
class DedupReport:
    groups: list[list[str]]
    conflicts: list[dict[str, Any]]
    merged: list[dict[str, Any]] = field(default_factory=list)
    commit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"groups": self.groups, "conflicts": self.conflicts, "merged": self.merged, "commit": self.commit}


def dedup(gate: WriteGate, *, source: str, apply: bool = False) -> DedupReport:
    """Duplicate groups and conflicts over the whole vault; ``apply`` merges each group into one fact."""
    if apply:
        gate.require(Op.DEDUP, source)
    settings = gate.config.facts
    facts = {f.key: f for f in gate.facts.iter()}
    found, conflict_pairs = groups([(k, f.text) for k, f in facts.items()], threshold=settings.duplicate_jaccard,
                                   min_shared=settings.duplicate_min_shared)
    conflicts = [{"a": a, "b": b, "differing": list(m.differing), "shared": list(m.shared)}
                 for a, b, m in conflict_pairs]
    report = DedupReport([list(g) for g in found], conflicts)
    if not apply or not found:
        return report
    plans = []
    lines = []
    for group in found:
        members = [facts[k] for k in group]
        survivor, changes = merge_plan(members)
        others = [f for f in members if f.key != survivor.key]
        plans.append((survivor, changes, others))
        report.merged.append({"into": survivor.key, "merged": [f.key for f in others]})
        lines.append(f"- {', '.join(f.key for f in others)} -> {survivor.key}")
    report.commit = gate.merge_facts(plans, source=source,
                                     message=f"dedup: merged {sum(len(g) - 1 for g in found)} facts\n\n" + "\n".join(lines))
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


# ------------------------------------------------------------------------------------------------ expiry
def expire(gate: WriteGate, *, source: str, apply: bool = False, at: datetime | None = None) -> dict[str, Any]:
    """Facts below ``[facts] expire_importance`` that nobody used or recalled for ``expire_after`` (counted from
    their creation when never used); ``apply`` removes them in one commit."""
    if apply:
        gate.require(Op.EXPIRE, source)
    settings = gate.config.facts
    current = at or now()
    facts = [f for f in gate.facts.iter() if f.importance < settings.expire_importance]
    usage = gate.state().get([("fact", f.key) for f in facts], current)
    candidates, chosen = [], []
    for f in facts:
        u = usage.get(("fact", f.key))
        seen = [t for t in ((u.last_used, u.last_shown) if u else ()) if t is not None]
        last = max(seen) if seen else None
        since = last or f.created or f.updated
        if since is None or (current - since).total_seconds() > settings.expire_after:
            chosen.append(f)
            candidates.append({"key": f.key, "importance": f.importance, "used": round(u.uses, 3) if u else 0,
                               "last_used": format_time(last) if last else None,
                               "path": f.path.relative_to(gate.root).as_posix()})
    result: dict[str, Any] = {"candidates": candidates, "commit": None}
    if apply and chosen:
        result["commit"] = gate.remove_facts(
            chosen, op=Op.EXPIRE, source=source,
            message=f"expire {len(chosen)} facts: low importance, not used\n\n"
                    + "\n".join(f"- {f.key}" for f in chosen))
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
_FACT_FIELDS = {"type", "key", "text", "category", "tags", "importance", "confidence", "valid_until", "source"}
_EPISODE_FIELDS = {"type", "text", "kind", "tags", "meta", "created_at", "source"}


def slug_key(category: str | None, text: str) -> str:
    """A key for an extracted fact that came without one: ``<category>/<first words>``."""
    words = _SLUG.sub("-", text.lower()).strip("-").split("-")
    slug = "-".join(w for w in words[:8] if w)[:60].strip("-") or "fact"
    prefix = _SLUG.sub("-", (category or "extracted").lower()).strip("-") or "extracted"
    return f"{prefix}/{slug}"


def ingest(gate: WriteGate, lines: Iterable[bytes | str], *, source: str, name: str = "-",
           allow_secret: bool = False) -> IngestReport:
    """Run extracted candidates (JSONL ``{"type": "fact"|"episode", ...}``) through the same gate as any write.

    The caller's ``source`` is the only authority: a candidate's own ``"source"`` is kept as ``claimed_source``
    (front matter of a fact, meta of an episode) and never raises trust. A candidate whose text is a memory recall
    returned is skipped, so recalled memories are never re-extracted as new ones. A bad line (not UTF-8, not JSON,
    a field of the wrong type) is skipped with its reason; the other lines go on.
    """
    gate.require(Op.APPEND_EPISODE, source)
    report = IngestReport()
    recalled = gate.state().recalled_hashes()
    for lineno, raw in enumerate(lines, 1):
        where = f"{name}:{lineno}"
        try:
            item = _candidate(raw, recalled)
            if item is None:
                continue
            bucket, entry = (_ingest_episode if item["type"] == "episode" else _ingest_fact)(
                gate, item, source=source, allow_secret=allow_secret)
            getattr(report, bucket).append({"line": where, **entry})
        except MemvaultError as exc:
            report.skipped.append({"line": where, "reason": str(exc)})
        except (TypeError, ValueError) as exc:
            report.skipped.append({"line": where, "reason": f"bad field: {exc}"})
    return report


def _candidate(raw: bytes | str, recalled: set[str]) -> dict[str, Any] | None:
    """One line as a candidate (None for a blank line); InvalidValue says why a line is skipped."""
    try:
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise InvalidValue("line", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not line.strip():
        return None
    try:
        item = json.loads(line, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InvalidValue("line", f"not valid JSON ({exc.msg})") from None
    if not isinstance(item, dict) or item.get("type") not in ("fact", "episode"):
        raise InvalidValue("type", 'needs "type": "fact" or "episode"')
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidValue("text", "no text")
    if text_hash(text) in recalled:
        raise InvalidValue("text", "text is a memory recall returned")
    unknown = set(item) - (_FACT_FIELDS if item["type"] == "fact" else _EPISODE_FIELDS)
    if unknown:
        raise InvalidValue("line", f"unknown fields: {', '.join(sorted(unknown))}")
    if item.get("source") is not None and not isinstance(item["source"], str):
        raise InvalidValue("source", "must be a string")
    return item


def _refuse_constant(name: str) -> Any:
    raise InvalidValue("line", f"{name} is not standard JSON")


def _claim(item: dict[str, Any], source: str) -> dict[str, Any]:
    claimed = item.get("source")
    return {"claimed_source": claimed} if claimed and claimed != source else {}


def _ingest_episode(gate: WriteGate, item: dict[str, Any], *, source: str,
                    allow_secret: bool) -> tuple[str, dict[str, Any]]:
    meta = item.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise InvalidValue("meta", "must be a JSON object")
    claim = _claim(item, source)
    e = gate.append_episode(item["text"], source=source, kind=item.get("kind") or "raw", at=item.get("created_at"),
                            tags=item.get("tags"), meta={**(meta or {}), **claim} or None, allow_secret=allow_secret)
    return "added", {"episode": e.id, "trusted": gate.policy.is_trusted(source), **claim}


def _ingest_fact(gate: WriteGate, item: dict[str, Any], *, source: str,
                 allow_secret: bool) -> tuple[str, dict[str, Any]]:
    text, claim = item["text"], _claim(item, source)
    category = item.get("category") if isinstance(item.get("category"), str) else None
    key = item.get("key") or slug_key(category, text)
    if not isinstance(key, str):
        raise InvalidKey(str(key), "a key must be a string")
    validate_key(key)
    matches = gate.similar_facts(key, text)
    conflict = next((m for m in matches if m["kind"] == "conflict"), None)
    if conflict is not None:
        return "conflicts", {"key": key, "with": conflict["key"], "differing": conflict["differing"]}
    duplicate = next((m for m in matches if m["kind"] == "duplicate"), None)
    if duplicate is not None and gate.policy.is_trusted(source):
        existing = gate.facts.get(duplicate["key"])
        importance = item.get("importance")
        more = isinstance(importance, (int, float)) and not isinstance(importance, bool)
        gate.set_fact(existing.key, existing.text, source=source,
                      tags=list(dict.fromkeys([*existing.tags, *validate_tags(item.get("tags"))])),
                      importance=max(existing.importance, float(importance)) if more else None,
                      message=f"fact merge {existing.key} (ingest)", allow_secret=allow_secret, check_similar=False)
        return "merged", {"into": existing.key}
    fact = gate.set_fact(key, text, source=source, category=item.get("category"), importance=item.get("importance"),
                         confidence=item.get("confidence"), tags=item.get("tags"), valid_until=item.get("valid_until"),
                         allow_secret=allow_secret, extra=claim or None, check_similar=False)
    entry = {"key": fact.key, **({"duplicate_of": duplicate["key"]} if duplicate is not None else {}), **claim}
    return ("quarantined" if fact.quarantined else "added"), entry


