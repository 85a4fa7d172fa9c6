"""Ingest: candidates from an extractor or an LLM step (JSONL), each run through the write gate like any write.

Two passes, so a bad line can never stop a batch half-way: every line is first parsed and checked (JSON, fields,
trust, secrets, the time of an episode, the key of a fact) without writing anything; then the lines that passed
are written in order. The report names every line — added, replaced, merged, conflicts, quarantined, skipped,
each with its reason — so it is exact: what it says was written is written, and a line it says was not, was not.

Facts are compared with what the vault holds, as ``fact set`` reports them:

- a new key: **added** (an untrusted source: **quarantined**, a proposal in ``inbox/``);
- the key exists with other text and no contradicting values: **replaced**, and the commit that held the
  previous text is named (git keeps it);
- a duplicate of another fact: **merged** into it (tags, importance); the same text as the stored fact: merged;
- numbers, addresses, ports, dates or versions that contradict a stored fact (its own key or another):
  **conflicts**: the stored fact is not touched and the candidate waits in ``inbox/`` for a person, so both
  sides stay reachable.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..rules.dedup import compare
from ..rules.errors import FactParseError, InvalidKey, InvalidValue, MemvaultError
from ..rules.freshness import text_hash
from ..rules.fsread import TooLong, bounded_lines
from ..rules.trust import Op
from ..rules.validation import validate_key, validate_tags
from . import access
from .gate import WriteGate

BUCKETS = ("added", "replaced", "merged", "conflicts", "quarantined", "skipped")
#: Why a line whose text a recall returned is skipped: it is already in the vault, not refused.
RECALLED = "text is a memory recall returned"
_SLUG = re.compile(r"[^a-z0-9]+")
_FACT_FIELDS = {"type", "key", "text", "category", "tags", "importance", "confidence", "valid_until", "source"}
_EPISODE_FIELDS = {"type", "text", "kind", "tags", "meta", "created_at", "source"}


@dataclass
class IngestReport:
    """One entry per line of the input (``line`` is ``NAME:N``), in the bucket of what happened to it."""

    added: list[dict[str, Any]] = field(default_factory=list)
    replaced: list[dict[str, Any]] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in BUCKETS}, "warnings": list(self.warnings)}

    def refused_all(self) -> bool:
        """True when a line was refused (bad JSON or fields, a secret, ...) and nothing came of any other: none
        written (a conflict waits in the inbox: written) and none a recall had returned (already in the vault), so
        a pipeline can tell a batch that failed whole from one that stored some or had nothing new."""
        if any(getattr(self, k) for k in BUCKETS if k != "skipped"):
            return False
        refused = [e for e in self.skipped if not str(e.get("reason", "")).endswith(RECALLED)]
        return bool(refused) and len(refused) == len(self.skipped)


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
    nested too deep, a field of the wrong type, a time in the future) is skipped with its reason before anything
    is written; the other lines go on.
    """
    gate.require(Op.APPEND_EPISODE, source)
    report = IngestReport()
    state = gate.state()
    recalled = state.recalled_hashes()
    report.warnings += getattr(state, "warnings", [])
    checked: list[tuple[str, dict[str, Any]]] = []
    limits = gate.config.limits
    if hasattr(lines, "readline"):  # a file: no line is held longer than any candidate can be
        lines = bounded_lines(lines, 8 * max(limits.fact_bytes, limits.episode_bytes) + 4096)
    for lineno, raw in enumerate(lines, 1):  # pass 1: nothing is written
        where = f"{name}:{lineno}"
        item = None
        try:
            item = _candidate(raw, recalled)
            if item is not None:
                _check(gate, item, source=source, allow_secret=allow_secret)
                checked.append((where, item))
        except MemvaultError as exc:
            report.skipped.append({"line": where, "reason": _unechoed(str(exc), item)})
        except (TypeError, ValueError) as exc:
            report.skipped.append({"line": where, "reason": f"bad field: {exc}"})
    for where, item in checked:  # pass 2: each line written, or said why not
        try:
            bucket, entry = (_ingest_episode if item["type"] == "episode" else _ingest_fact)(
                gate, item, source=source, allow_secret=allow_secret)
            getattr(report, bucket).append({"line": where, **entry})
        except MemvaultError as exc:
            report.skipped.append({"line": where, "reason": _unechoed(str(exc), item)})
        except (TypeError, ValueError, OSError) as exc:
            report.skipped.append({"line": where, "reason": f"not written: {exc}"})
    report.skipped.sort(key=lambda entry: int(entry["line"].rsplit(":", 1)[1]))
    return report


def _unechoed(reason: str, item: dict[str, Any] | None) -> str:
    """``reason`` without the key made of a line's text when it came without one: that text may be what was
    refused (a report names a line by its position and the reason, never by what the detector flagged)."""
    if isinstance(item, dict) and not item.get("key") and isinstance(item.get("text"), str):
        category = item.get("category") if isinstance(item.get("category"), str) else None
        reason = reason.replace(slug_key(category, item["text"]), "(its key)")
    return reason


def _candidate(raw: bytes | str, recalled: set[str]) -> dict[str, Any] | None:
    """One line as a candidate (None for a blank line); InvalidValue says why a line is skipped."""
    if isinstance(raw, TooLong):
        raise InvalidValue("line", f"{int(raw)} bytes, longer than any candidate the limits allow ([limits]): "
                                   "not read")
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
    except RecursionError:
        raise InvalidValue("line", "nested too deep to be read (memvault takes at most 20 levels)") from None
    if not isinstance(item, dict) or item.get("type") not in ("fact", "episode"):
        raise InvalidValue("type", 'needs "type": "fact" or "episode"')
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidValue("text", "no text")
    if text_hash(text) in recalled:
        raise InvalidValue("text", RECALLED)
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


def _key(item: dict[str, Any]) -> str:
    category = item.get("category") if isinstance(item.get("category"), str) else None
    key = item.get("key") or slug_key(category, item["text"])
    if not isinstance(key, str):
        raise InvalidKey(str(key), "a key must be a string")
    return validate_key(key)


def _check(gate: WriteGate, item: dict[str, Any], *, source: str, allow_secret: bool) -> None:
    """Every check of a line's write, nothing written (pass 1)."""
    claim = _claim(item, source)
    if item["type"] == "episode":
        meta = item.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise InvalidValue("meta", "must be a JSON object")
        gate.check_episode(item["text"], source=source, kind=item.get("kind") or "raw", at=item.get("created_at"),
                           tags=item.get("tags"), meta={**(meta or {}), **claim} or None, allow_secret=allow_secret)
        return
    key = _key(item)
    validate_tags(item.get("tags"))
    change = gate.facts.plan_set(key, item["text"], source=source, at=gate.clock(),
                                 proposal=not gate.policy.is_trusted(source), category=item.get("category"),
                                 importance=item.get("importance"), confidence=item.get("confidence"),
                                 tags=item.get("tags"), valid_until=item.get("valid_until"), extra=claim or None)
    gate.check_changes([change], what=f"fact {key}", allow_secret=allow_secret, source=source)


def _ingest_episode(gate: WriteGate, item: dict[str, Any], *, source: str,
                    allow_secret: bool) -> tuple[str, dict[str, Any]]:
    meta, claim = item.get("meta"), _claim(item, source)
    e = gate.append_episode(item["text"], source=source, kind=item.get("kind") or "raw", at=item.get("created_at"),
                            tags=item.get("tags"), meta={**(meta or {}), **claim} or None, allow_secret=allow_secret)
    entry = {"episode": e.id, "trusted": gate.policy.is_trusted(source), **claim}
    return "added", {**entry, **({"warnings": e.warnings} if e.warnings else {})}


def _ingest_fact(gate: WriteGate, item: dict[str, Any], *, source: str,
                 allow_secret: bool) -> tuple[str, dict[str, Any]]:
    text, claim, key = item["text"], _claim(item, source), _key(item)
    trusted = gate.policy.is_trusted(source)
    settings = gate.config.facts
    stored = None
    if gate.facts.exists(key):
        try:
            stored = gate.facts.get(key)
        except FactParseError as exc:
            raise InvalidValue("key", f"{key} exists but cannot be read ({exc.reason}): fix it first") from None
    matches = gate.similar_facts(key, text)
    if stored is not None and stored.text != text.strip():
        same = compare(text, stored.text, threshold=settings.duplicate_jaccard, min_shared=settings.duplicate_min_shared)
        if same is not None and same.kind == "conflict":
            matches.insert(0, {"key": key, "kind": "conflict", "differing": list(same.differing)})
    fields = dict(category=item.get("category"), importance=item.get("importance"),
                  confidence=item.get("confidence"), tags=item.get("tags"), valid_until=item.get("valid_until"))
    conflict = next((m for m in matches if m["kind"] == "conflict"), None)
    if conflict is not None:
        conflict = access.shown_match(gate.scopes, source, conflict, gate.root)
        # Neither side is lost: the stored fact stays as it is, the candidate waits in the inbox for a person.
        fact = gate.set_fact(key, text, source=source, **fields, allow_secret=allow_secret, extra=claim or None,
                             check_similar=False, propose=True)
        return "conflicts", {"key": key, "with": conflict["key"], "differing": conflict["differing"],
                             "proposed": fact.path.relative_to(gate.root).as_posix(), **_warned(fact)}
    duplicate = next((m for m in matches if m["kind"] == "duplicate"), None)
    if trusted and (duplicate is not None or (stored is not None and stored.text == text.strip())):
        into = gate.facts.get(duplicate["key"]) if duplicate is not None else stored
        assert into is not None
        importance = item.get("importance")
        more = isinstance(importance, (int, float)) and not isinstance(importance, bool)
        fact = gate.set_fact(into.key, into.text, source=source,
                             tags=list(dict.fromkeys([*into.tags, *validate_tags(item.get("tags"))])),
                             importance=max(into.importance, float(importance)) if more else None,
                             message=f"fact merge {into.key} (ingest)", allow_secret=allow_secret, check_similar=False)
        return "merged", {"into": into.key, **_warned(fact)}
    fact = gate.set_fact(key, text, source=source, **fields, allow_secret=allow_secret, extra=claim or None,
                         check_similar=False)
    shown = access.shown_match(gate.scopes, source, duplicate, gate.root)["key"] if duplicate is not None else None
    entry = {"key": fact.key, **({"duplicate_of": shown} if shown is not None else {}), **claim,
             **_warned(fact)}
    if fact.quarantined:
        return "quarantined", {**entry, "proposed": fact.path.relative_to(gate.root).as_posix()}
    if stored is not None:
        return "replaced", {**entry, "previous": _previous_commit(gate, fact.path)}
    return "added", entry


def _previous_commit(gate: WriteGate, path: Any) -> str | None:
    """The commit that holds the text a replace took away (the file's last commit before this one)."""
    if gate.git is None:
        return None
    commits = gate.git.run("log", "-2", "--format=%H", "--", gate.git.rel(path)).split()
    return commits[1] if len(commits) > 1 else None


def _warned(fact: Any) -> dict[str, Any]:
    return {"warnings": fact.warnings} if fact.warnings else {}
