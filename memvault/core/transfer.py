"""Import and export: memory kept by other tools brought in through the write gate, and a vault written out whole.

**Import.** A reader (``memvault.interfaces.transfer``) turns another tool's files into :class:`Item` s and writes
nothing; :func:`import_items` puts each through the gate with the importer's source (``import:<tool>``): trust (an
untrusted source proposes facts to the inbox), validation, secrets, size, and the duplicate check against the facts
already there. ``memvault import --trust`` imports a person's own files under their own trusted ``user:`` source
(:func:`own_source`): facts are written directly, through the same gate. A secret refuses the line that holds it,
not the section (:func:`_cut_secret_lines`), and the times the other tool recorded are kept (:func:`source_times`).
The report says what came in, what was a duplicate (nothing written), what conflicts with a stored fact (nothing
written, both named), and what was refused and why. Importing the same files again adds nothing.

**Restore.** A memvault export read back (:func:`restore_items`) keeps every file byte for byte and every episode
as it was (id, time, source): only a trusted source may do that, in one commit for the facts and procedures.

**Export.** :func:`snapshot` yields everything a vault holds (facts and proposals as their files, procedures with
their mode, episodes as stored) for the writers of the export formats.
"""
from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import InvalidValue, LimitExceeded, MemvaultError, UntrustedSource, describe
from ..rules.fsutil import FileChange
from ..rules.secrets import describe as describe_secrets
from ..rules.secrets import SecretFinding, scan_fields, scans_remembered, secret_spans
from ..rules.timeutil import now, parse_time
from ..rules.trust import Op
from ..rules.validation import EARLIEST, MAX_FUTURE, check_json_value, validate_key, validate_tags
from . import access
from .ingest import slug_key

if TYPE_CHECKING:
    from .vault import Vault

KINDS = ("fact", "episode", "procedure", "proposal")


@dataclass
class Item:
    """One memory read from another tool (or from a memvault export), not yet written anywhere."""

    kind: str
    text: str
    origin: str                      # where it came from: file, file:line, table:id
    key: str | None = None           # a fact's key, a procedure's name
    category: str | None = None
    tags: list[str] = field(default_factory=list)
    importance: float | None = None
    confidence: float | None = None
    at: str | None = None            # when it happened (an episode's time) or was first written (a fact's)
    updated: str | None = None       # when a fact was last changed at its source
    episode_kind: str = "raw"
    meta: dict[str, Any] = field(default_factory=dict)
    #: A memvault export only: the exact file bytes, a procedure's mode, an episode's id and source.
    content: bytes | None = None
    mode: int | None = None
    id: str | None = None
    source: str | None = None
    #: Set by a reader for an item it could not read (too deep, the wrong type): why, never quoting its text. The
    #: item is reported as refused at its ``origin``, and the reading goes on.
    refusal: str | None = None
    #: Where each line of ``text`` is in its file (``file``), from 1; 0 for a line the reader added (a heading
    #: repeated as the first line). A line that holds a secret is refused by its number and the others come in.
    lines: list[int] | None = None
    file: str | None = None


def refused(origin: str, reason: str | MemvaultError) -> Item:
    """The place of an item a reader refuses, and why (an exception's one line, or a reason)."""
    return Item("refused", "", origin, refusal=reason if isinstance(reason, str) else describe(reason)[0])


#: Largest text an item may carry into the checks at all (the gate's own limits are smaller; this keeps a huge
#: value from being scanned for secrets before it is refused for its size).
ITEM_TEXT_MAX = 1 << 20


def check_item(item: Item, limits: Any = None) -> None:
    """The shape of an item, checked before anything is written: the type of each field, its size (against
    ``limits``, the vault's ``[limits]``, when given), and the depth of its metadata. InvalidValue names the field
    and the reason, never the value."""
    if item.refusal is not None:
        raise InvalidValue("item", item.refusal)
    if item.kind not in KINDS:
        raise InvalidValue("item", f"a {item.kind!r} is not something memvault keeps")
    if not isinstance(item.text, str):
        raise InvalidValue("text", f"must be text, not {type(item.text).__name__}")
    if len(item.text) > ITEM_TEXT_MAX:
        raise InvalidValue("text", f"{len(item.text)} characters, more than any item may hold ({ITEM_TEXT_MAX})")
    for name in ("key", "category", "at", "updated", "id", "source"):
        value = getattr(item, name)
        if value is not None and not isinstance(value, str):
            raise InvalidValue(name, f"must be text, not {type(value).__name__}")
    source_times(item.at, item.updated)
    for name in ("importance", "confidence"):
        value = getattr(item, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InvalidValue(name, f"must be a number, not {type(value).__name__}")
    if not isinstance(item.tags, list) or not all(isinstance(t, str) for t in item.tags):
        raise InvalidValue("tags", "must be a list of words")
    if not isinstance(item.meta, dict):
        raise InvalidValue("meta", f"must be a JSON object, not {type(item.meta).__name__}")
    check_json_value(item.meta, "meta")
    limit = {"fact": "fact_bytes", "proposal": "fact_bytes", "episode": "episode_bytes",
             "procedure": "procedure_bytes"}[item.kind]
    size = len(item.content) if item.content is not None else len(item.text.encode("utf-8"))
    if limits is not None and size > getattr(limits, limit):
        raise LimitExceeded(item.kind, f"{size} bytes, more than the {getattr(limits, limit)} allowed "
                                       f"([limits] {limit})")


def source_times(created: object, updated: object = None, names: tuple[str, str] = ("at", "updated"),
                 ) -> tuple[datetime | None, datetime | None]:
    """The times a source gave an item (when it was written, when last changed), checked: readable, from 1970 on,
    not in the future, and not changed before it was written. InvalidValue names the field, never guesses: an
    item whose time cannot be kept is refused rather than stored with the time of the import."""
    out: list[datetime | None] = []
    for value, name in zip((created, updated), names):
        if value is None or value == "":
            out.append(None)
            continue
        if not isinstance(value, str):
            raise InvalidValue(name, f"must be an ISO 8601 time, not {type(value).__name__}")
        try:
            when = parse_time(value, name)
        except InvalidValue:  # its message quotes the value, which may be anything (a token pasted there)
            raise InvalidValue(name, f"not an ISO 8601 time ({len(value)} characters)") from None
        if when < EARLIEST or when > now() + MAX_FUTURE:
            raise InvalidValue(name, f"{when.isoformat()} is " + ("before 1970" if when < EARLIEST else
                                                                 "in the future (by this host's clock)"))
        out.append(when.replace(microsecond=0))
    first, last = out
    if first is not None and last is not None and last < first:
        raise InvalidValue(names[1], f"{last.isoformat()} is before {names[0]} ({first.isoformat()})")
    return first, last


@dataclass
class ImportReport:
    """What an import did (or, with ``dry_run``, would do), item by item."""

    format: str
    source: str
    dry_run: bool = False
    added: list[dict[str, Any]] = field(default_factory=list)
    proposed: list[dict[str, Any]] = field(default_factory=list)
    merged: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    BUCKETS = ("added", "proposed", "merged", "conflicts", "refused", "skipped")

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "source": self.source, "dry_run": self.dry_run, "problems": self.problems,
                **{k: getattr(self, k) for k in self.BUCKETS}}

    def refused_all(self) -> bool:
        """True when an item was refused and no other is in the vault after this import: none added, proposed or
        merged, none skipped as already there (an empty item is nothing; a conflict is not written)."""
        there = self.added or self.proposed or self.merged or [e for e in self.skipped if e.get("reason") != "empty"]
        return bool(self.refused) and not there

    def summary(self) -> str:
        verb = "would import" if self.dry_run else "imported"
        counts = ", ".join(f"{len(getattr(self, k))} {k}" for k in self.BUCKETS if getattr(self, k))
        return f"{verb} from {self.format} as {self.source}: {counts or 'nothing'}"


# ------------------------------------------------------------------------------------------------ import
def import_items(vault: Vault, items: Iterable[Item], *, fmt: str, source: str, dry_run: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Bring ``items`` in as ``source`` through the gate (see the module doc). Facts first, then episodes in one
    append; procedures only come from a memvault export (:func:`restore_items`). ``progress(done, total)`` is told
    after each item (an item takes milliseconds through the gate: a 300k-memory export, minutes)."""
    gate = vault.gate
    gate.require(Op.APPEND_EPISODE, source)
    report = ImportReport(fmt, source, dry_run)
    trusted = gate.policy.is_trusted(source)
    # Each episode's text is scanned here (to cut a secret's lines) and again by the gate, whole: once is enough.
    with gate.import_lock(), scans_remembered():
        _import_items(vault, items, report, fmt=fmt, source=source, trusted=trusted, dry_run=dry_run,
                      progress=progress)
    return report


def _import_items(vault: Vault, items: Iterable[Item], report: ImportReport, *, fmt: str, source: str, trusted: bool,
                  dry_run: bool, progress: Callable[[int, int], None] | None = None) -> None:
    gate = vault.gate
    seen_keys: dict[str, str] = {}
    episodes: list[tuple[Item, dict[str, Any]]] = []
    known = _imported_ids(vault)
    checked = _checked(vault, items, report)
    for done, (n, item) in enumerate(checked, 1):
        if progress is not None and done > 1:
            progress(done - 1, len(checked))
        entry: dict[str, Any] = {"item": n, "origin": item.origin}
        try:
            if item.kind in ("fact", "proposal"):
                _import_fact(vault, item, entry, report, source, trusted, dry_run, seen_keys)
            elif item.kind == "episode":
                draft = _episode_draft(item, fmt)
                if draft["meta"]["import_id"] in known:
                    report.skipped.append({**entry, "reason": "imported before"})
                    continue
                known.add(draft["meta"]["import_id"])
                findings = scan_fields({"tags": draft["tags"], "meta": draft["meta"]})
                if findings:
                    _refuse(report, entry, describe_secrets(findings))
                    continue
                if scan_fields({"text": draft["text"]}):
                    kept = _cut_secret_lines(item, None, entry, report)
                    if kept is None:
                        continue
                    draft["text"] = kept.strip()
                gate.episodes.make(draft["text"], source=source, kind=draft["kind"], at=draft["at"],
                                   tags=draft["tags"], meta=draft["meta"])  # validates; raises with the field
                episodes.append((item, draft))
            else:
                _refuse(report, entry, f"a {item.kind} comes only from a memvault export")
        except MemvaultError as exc:
            _refuse(report, entry, describe(exc)[0])
    if episodes and not dry_run:  # (one append: the items' last step)
        written = vault.episodes.append_many([d for _, d in episodes], source=source)
        report.added += [{"origin": i.origin, "episode": e.id} for (i, _), e in zip(episodes, written)]
    elif episodes:
        report.added += [{"origin": i.origin, "episode": None} for i, _ in episodes]
    if progress is not None and checked:
        progress(len(checked), len(checked))


def own_source(vault: Vault, source: str) -> str:
    """``source`` if it may import a person's own files as facts (``memvault import --trust``): a ``user:`` source
    that ``[trust] trusted`` trusts. UntrustedSource otherwise: an agent's or a tool's say-so never turns what it
    read into facts, and a person the vault does not trust proposes like anyone else. The gate still runs on
    every item (a secret is still refused, line by line)."""
    if not source.startswith("user:"):
        raise UntrustedSource(source, "--trust brings in a person's own files under their own user: source; "
                                      "without --trust the import proposes its facts for review")
    if not vault.gate.policy.is_trusted(source):
        raise UntrustedSource(source, f"--trust writes facts directly, and [trust] trusted = "
                                      f"{list(vault.gate.policy.trusted)} does not trust it")
    return source


def _import_fact(vault: Vault, item: Item, entry: dict[str, Any], report: ImportReport, source: str, trusted: bool,
                 dry_run: bool, seen_keys: dict[str, str]) -> None:
    gate = vault.gate
    text = item.text.strip()
    if not text:
        report.skipped.append({**entry, "reason": "empty"})
        return
    key = item.key or slug_key(item.category, text)
    validate_key(key)
    entry["key"] = key
    tags = validate_tags(item.tags)
    findings = scan_fields({"tags": tags, "category": item.category})
    if findings:
        _refuse(report, entry, describe_secrets(findings))
        return
    if scan_fields({"text": text}):
        kept = _cut_secret_lines(item, key, entry, report)
        if kept is None:
            return
        text = kept.strip()
    if key in seen_keys:
        bucket = report.merged if seen_keys[key] == text else report.conflicts
        bucket.append({**entry, "with": key, "reason": "the same key earlier in this import"})
        return
    seen_keys[key] = text
    if vault.facts.exists(key):
        stored = vault.facts.get(key)
        if " ".join(stored.text.split()) == " ".join(text.split()):
            report.merged.append({**entry, "into": key, "reason": "already stored"})
        else:
            report.conflicts.append({**entry, "with": key, "reason": "a different fact is stored under this key"})
        return
    if vault.facts.store.exists(key, inbox=True):
        proposal = vault.facts.store.get(key, inbox=True)
        if " ".join(proposal.text.split()) == " ".join(text.split()):
            if not trusted:
                report.skipped.append({**entry, "reason": "already proposed"})
                return
            # The person now vouches for what an earlier import proposed (``--trust`` after a plain import)
            if not dry_run:
                gate.accept(key, source=source)
            report.added.append({**entry, "reason": "accepted the proposal an earlier import left"})
            return
    similar = [access.shown_match(gate.scopes, source, m, gate.root) for m in gate.similar_facts(key, text)]
    conflict = next((m for m in similar if m["kind"] == "conflict"), None)
    if conflict is not None:
        report.conflicts.append({**entry, "with": conflict["key"], "differing": conflict["differing"],
                                 "reason": "same subject, different values"})
        return
    duplicate = next((m for m in similar if m["kind"] == "duplicate"), None)
    if duplicate is not None:
        report.merged.append({**entry, "into": duplicate["key"], "reason": "near-duplicate of a stored fact"})
        return
    if dry_run:
        (report.added if trusted else report.proposed).append(entry)
        return
    created, updated = source_times(item.at, item.updated)
    times = {"created": created, "updated": updated or created} if created else {}
    fact = gate.set_fact(key, text, source=source, category=item.category, importance=item.importance,
                         confidence=item.confidence, tags=tags or None, check_similar=False,
                         message=f"import {key} from {report.format}", extra=times or None)
    (report.proposed if fact.quarantined else report.added).append(entry)


def _cut_secret_lines(item: Item, key: str | None, entry: dict[str, Any], report: ImportReport) -> str | None:
    """``item.text`` without the lines that hold a secret, each refused in the report by its file and line number
    (``CLAUDE.md:8``, a private key block ``CLAUDE.md:12-40``), so one token does not keep a whole section out.
    None, with the whole item refused, when the secret cannot be cut out by line: what is left still looks like
    one, nothing is left, or the key is made of the secret (a heading that holds it)."""
    text = item.text
    spans = secret_spans(text)
    starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(offset: int) -> int:
        return bisect.bisect_right(starts, offset) - 1

    ranges: list[list[Any]] = []  # [first, last, findings] in lines of the text, merged when they touch
    squashed = re.sub(r"[^a-z0-9]", "", (key or "").lower())
    for start, end, finding in spans:
        secret = re.sub(r"[^a-z0-9]", "", text[start:end].lower())
        first, last = line_of(start), line_of(max(start, end - 1))
        if key is not None and len(secret) >= 8 and secret[:8] in squashed:  # the whole item, named by the line
            _refuse(report, {**entry, "origin": _source_lines(item, first, last)[0]},
                    describe_secrets(scan_fields({"text": text})) + "; its key is made of that line")
            return None
        if ranges and first <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], last)
            ranges[-1][2].append(finding)
        else:
            ranges.append([first, last, [finding]])
    cut = {n for first, last, _ in ranges for n in range(first, last + 1)}
    kept = "\n".join(line for n, line in enumerate(text.split("\n")) if n not in cut)
    if not ranges or not kept.strip() or scan_fields({"text": kept}):
        if ranges and not kept.strip():  # the secret was all there was: the item is its lines
            entry = {**entry, "origin": _source_lines(item, ranges[0][0], ranges[-1][1])[0]}
        _refuse(report, entry, describe_secrets(scan_fields({"text": text})))
        return None
    refused = []
    for first, last, findings in ranges:
        where = _source_lines(item, first, last)
        located = [SecretFinding(f.kind, f.excerpt, _source_lines(item, f.line - 1, f.line - 1)[1])
                   for f in findings]
        refused.append(where[0])
        _refuse(report, {"item": entry["item"], "origin": where[0]}, describe_secrets(located))
    entry["lines_refused"] = refused
    return kept


def _source_lines(item: Item, first: int, last: int) -> tuple[str, int]:
    """Where lines ``first..last`` of ``item.text`` (from 0) are: ``file:N`` or ``file:N-M`` when the reader gave
    their numbers, else the item's origin and the lines within its text; and the first line's number."""
    numbers = item.lines if item.lines is not None and len(item.lines) > last else None
    found = [n for n in (numbers or [])[first:last + 1] if n > 0]
    if found:
        low, high = min(found), max(found)
        return f"{item.file or item.origin}:{low}" + (f"-{high}" if high != low else ""), low
    span = f"line {first + 1}" + (f"-{last + 1}" if last != first else "")
    return f"{item.origin} ({span} of its text)", first + 1


def _refuse(report: ImportReport, entry: dict[str, Any], reason: str) -> None:
    """A refused item in the report, named by its position (``item``) and the reason: never by its key, which may
    be made of the very text that was refused (``mem0/olga/the-grafana-admin-password-is-...``), nor by an origin
    the detector flags (a heading, an id)."""
    key = entry.get("key")
    out = {k: v for k, v in entry.items() if k != "key"}
    if isinstance(key, str) and key:
        reason = reason.replace(key, "(its key)")
    origin = out.get("origin")
    if isinstance(origin, str) and scan_fields({"origin": origin}):
        out["origin"] = f"item {out.get('item')}"
    report.refused.append({**out, "reason": reason})


def _episode_draft(item: Item, fmt: str) -> dict[str, Any]:
    # What it says and when it happened identify it, wherever the file was read from: the same export read from
    # another folder is the same memory.
    digest = hashlib.sha1(f"{fmt}\0{item.at}\0{item.text}".encode()).hexdigest()[:16]
    meta = {**item.meta, "import_id": digest, "imported_from": item.origin[:300]}
    return {"text": item.text, "kind": item.episode_kind, "at": item.at, "tags": list(item.tags), "meta": meta}


def _imported_ids(vault: Vault) -> set[str]:
    """The ids of the episodes imported before, under any import's source: ``import:<tool>`` or a trusted one
    (``--trust`` after a plain import stored every episode twice, its ids looked up under the person's source
    only). An untrusted source's claim of an id (``meta.import_id`` is anyone's to write) keeps nothing out."""
    found = set()
    policy = vault.gate.policy
    for episode in vault.episodes.iter():
        if not episode.source.startswith("import:") and not policy.is_trusted(episode.source):
            continue
        value = episode.meta.get("import_id") if isinstance(episode.meta, dict) else None
        if isinstance(value, str):
            found.add(value)
    return found


def _checked(vault: Vault, items: Iterable[Item], report: ImportReport) -> list[tuple[int, Item]]:
    """Every item read and checked before the first is written (a reader that fails on its input raises here,
    with nothing written), with its position (from 1); the ones that fail :func:`check_item` are reported as
    refused, by position."""
    ok = []
    for n, item in enumerate(list(items), 1):
        try:
            check_item(item, vault.config.limits)
        except MemvaultError as exc:
            _refuse(report, {"item": n, "origin": item.origin}, item.refusal or describe(exc)[0])
            continue
        ok.append((n, item))
    return ok


# ------------------------------------------------------------------------------------------------ restore
def restore_items(vault: Vault, items: Iterable[Item], *, source: str, dry_run: bool = False) -> ImportReport:
    """Read a memvault export back: facts and procedures byte for byte (one commit), proposals proposed again by
    their own source, episodes with their ids, times and sources. A trusted ``source`` vouches for all of it;
    anything already there is skipped, anything different under the same name is a conflict and stays out."""
    gate = vault.gate
    if not gate.policy.is_trusted(source):
        raise UntrustedSource(source, "restoring a memvault export writes facts, runbooks and other sources' "
                                      "episodes as they were: a trusted source only")
    gate.require(Op.CONFIGURE, source)
    report = ImportReport("memvault", source, dry_run)
    with gate.import_lock(), scans_remembered():  # each episode is checked when planned and again when appended
        _restore_items(vault, _checked(vault, items, report), report, source=source, dry_run=dry_run)
    return report


def _restore_items(vault: Vault, items: Iterable[tuple[int, Item]], report: ImportReport, *, source: str,
                   dry_run: bool) -> None:
    gate = vault.gate
    changes: list[FileChange] = []
    modes: dict[Path, int] = {}
    plan = _Plan(vault.procedures.store.files([]))
    existing_ids = {e.id for e in vault.episodes.iter()}
    episodes: list[tuple[dict[str, Any], dict[str, Any]]] = []
    proposals: list[tuple[int, Item]] = []
    here: list[tuple[Path, bytes]] = []  # files already holding what the export says, and those bytes
    with gate.lock(source, report.problems):
        for n, item in items:
            entry = {"item": n, "origin": item.origin, **({"key": item.key} if item.key else {})}
            try:
                if item.kind == "fact":
                    change = _plan_file(vault, "fact", item, report, entry, here, plan)
                elif item.kind == "procedure":
                    change = _plan_file(vault, "procedure", item, report, entry, here, plan)
                    if change is not None and item.mode is not None:
                        # The exec bit and the owner's and group's reading come back; never another user's write
                        # (a runbook 0777 anyone on the host could change before it runs), setuid or sticky.
                        modes[change.path] = item.mode & 0o755
                elif item.kind == "proposal":
                    proposals.append((n, item))
                    continue
                else:
                    if item.id in existing_ids:
                        report.skipped.append({**entry, "episode": item.id, "reason": "already here"})
                        continue
                    existing_ids.add(item.id or "")
                    draft = {"text": item.text, "kind": item.episode_kind, "at": item.at, "tags": item.tags,
                             "meta": item.meta or None, "id": item.id, "source": item.source}
                    # Each checked here, refused by its own origin: one bad episode refused them all before.
                    gate.check_episode(draft["text"], source=item.source or source, kind=draft["kind"] or "raw",
                                       at=draft["at"], tags=draft["tags"], meta=draft["meta"], id=draft["id"])
                    episodes.append((entry, draft))
                    continue
                if change is not None:
                    gate.check_changes([change], what=f"{item.kind} {item.key}", allow_secret=False, source=source)
                    why = gate.refusal(change.path, change.after)
                    if why is not None:
                        raise InvalidValue(str(change.path.relative_to(vault.root)), why)
                    changes.append(change)
                    plan.take(change, item)
                    report.added.append(entry)
            except MemvaultError as exc:
                _refuse(report, entry, describe(exc)[0])
        # A restore killed after writing its files but before its commit left them here, uncommitted: the next
        # one finds them "already here" and commits them with its own, or they stay out of git until a sync.
        uncommitted = _uncommitted(gate, here) if not dry_run else []
        if (changes or uncommitted) and not dry_run:
            gate.apply(changes, message=f"restore {len(changes) + len(uncommitted)} files from a memvault export",
                       source=source, modes=modes, also=uncommitted)
    if changes and not dry_run:
        report.problems += gate.tell_index([c.path for c in changes])
    for n, item in proposals:
        entry = {"item": n, "origin": item.origin, "key": item.key}
        if vault.facts.store.exists(item.key or "", inbox=True):
            report.skipped.append({**entry, "reason": "already proposed"})
        elif dry_run:
            report.proposed.append(entry)
        else:
            try:
                # A proposal stays one whoever it names as its source (a trusted name in its front matter is a
                # claim, not a review), and one without a source is the restorer's proposal: a person accepts it.
                fact = gate.set_fact(item.key or "", item.text, source=item.source or source, category=item.category,
                                     importance=item.importance, confidence=item.confidence,
                                     tags=item.tags or None, check_similar=False, propose=True)
                (report.proposed if fact.quarantined else report.added).append(entry)
            except MemvaultError as exc:
                _refuse(report, entry, describe(exc)[0])
    if episodes:
        try:
            if not dry_run:
                vault.episodes.append_many([d for _, d in episodes], source=source)
            report.added += [{**entry, "episode": d["id"]} for entry, d in episodes]
        except MemvaultError as exc:
            report.refused.append({"origin": "episodes", "reason": describe(exc)[0]})


def _uncommitted(gate: Any, files: list[tuple[Path, bytes]]) -> list[Path]:
    """Those of ``files`` (path, the bytes it holds) whose bytes are not what HEAD holds for them (none without
    git)."""
    git = gate.git
    if not files or git is None:
        return []
    heads = git.head_blobs([p for p, _ in files])
    return [p for p, data in files if heads.get(p) != git.blob_id(data)]


#: The extension a restored runbook's file may have after its name: what a script or a document is called by.
_EXTENSION = re.compile(r"(\.[A-Za-z0-9_+-]{1,16})?")


@dataclass
class _Plan:
    """What a restore has planned so far, so that two records of one export never write one file twice (the last
    won, both reported added) nor give one runbook name two files (an ambiguous name no command could run)."""

    procedures: dict[str, list[Path]]                             # name -> the files already carrying it
    files: dict[Path, bytes] = field(default_factory=dict)        # path -> the bytes planned for it
    names: dict[str, Path] = field(default_factory=dict)          # a runbook's name -> the file planned for it

    def take(self, change: FileChange, item: Item) -> None:
        self.files[change.path] = change.after or b""
        if item.kind == "procedure":
            self.names[item.key or ""] = change.path


def _plan_file(vault: Vault, kind: str, item: Item, report: ImportReport, entry: dict[str, Any],
               here: list[tuple[Path, bytes]], plan: _Plan) -> FileChange | None:
    """The change that writes an exported file back, or None when it is already there (added to ``here``), an
    earlier record of this export writes it, or it conflicts."""
    data = item.content if item.content is not None else item.text.encode("utf-8")
    if kind == "fact":
        key = item.key or ""
        validate_key(key)
        path = vault.facts.path_for(key)
        if len(data) > vault.config.limits.fact_bytes:
            raise LimitExceeded(f"fact {key}", f"{len(data)} bytes, more than the {vault.config.limits.fact_bytes} "
                                               "allowed ([limits] fact_bytes)")
    else:
        name = item.key or ""
        from ..rules.validation import validate_name

        validate_name(name)
        path = vault.procedures.dir / f"{name}{_procedure_extension(name, item.meta.get('path'))}"
        if not path.resolve().is_relative_to(vault.procedures.dir.resolve()):
            raise UntrustedSource("export", f"{name}: a procedure path outside procedures/")
    rel = path.relative_to(vault.root).as_posix()
    if path in plan.files:
        if plan.files[path] == data:
            report.skipped.append({**entry, "reason": f"the same {rel} earlier in this export"})
        else:
            report.conflicts.append({**entry, "reason": f"an earlier record of this export holds something else "
                                                        f"for {rel}"})
        return None
    if kind == "procedure":
        others = [p for p in [*plan.procedures.get(item.key or "", []), plan.names.get(item.key or "")]
                  if p is not None and p != path]
        if others:
            report.conflicts.append({**entry, "reason": f"{others[0].relative_to(vault.root).as_posix()} already "
                                                        f"carries this runbook's name (not {rel} beside it)"})
            return None
    if path.is_symlink():
        raise UntrustedSource("export", f"{path}: a symlink; not followed")
    if path.exists():
        if path.read_bytes() == data:
            report.skipped.append({**entry, "reason": "already here"})
            here.append((path, data))
        else:
            report.conflicts.append({**entry, "reason": f"{rel} holds something else"})
        return None
    if kind == "fact":
        from ..stores.facts import parse_fact

        parse_fact(item.key or "", path, _utf8(data))  # refuses a file that does not parse
    return FileChange(path, None, data)


def _procedure_extension(name: str, given: object) -> str:
    """The extension of a runbook's file as the export names it (``procedures/ops/drain.sh``): its name, then a
    plain extension or none. InvalidValue for anything else (another name, a folder, a control character)."""
    if not isinstance(given, str) or not given:
        return ""
    ext = given.rpartition("/")[2][len(name.rpartition("/")[2]):]
    if given != f"procedures/{name}{ext}" or not _EXTENSION.fullmatch(ext):
        shown = given.encode("unicode_escape").decode("ascii")[:120]
        raise InvalidValue("path", f"{shown!r} is not procedures/<its name> with a plain extension")
    return ext


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidValue("content", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


# ------------------------------------------------------------------------------------------------ export
def snapshot(vault: Vault, *, allow_secret: bool = False,
             left_out: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """Everything the vault holds, one record at a time: facts and proposals (their files' exact text),
    procedures (text and mode), episodes (as stored). What the secret detector flags (an episode stored with
    ``--allow-secret``, a file edited by hand) is left out unless ``allow_secret``, and named in ``left_out`` by
    kind, key or id, and reason (never the text): an export is a file that travels. A file or line that cannot be
    read (a link out of the vault, a damaged episode line) is named there too, by its path.

    The facts, proposals and runbooks are read under the gate's read lock, as one picture: a proposal accepted
    while an export ran was in neither its facts (listed before) nor its proposals (listed after), and a fact
    removed between its listing and its reading stopped the export. Episodes are only ever appended: they are
    read after, without holding writers up while the records are written out."""
    from ..stores.checks import episode_secrets

    out: list[dict[str, Any]] = left_out if left_out is not None else []

    def flagged(what: dict[str, Any], findings: list[Any]) -> bool:
        if not findings or allow_secret:
            return False
        out.append({**what, "reason": describe_secrets(findings)})
        return True

    with vault.gate.read_lock():
        files = _files(vault, flagged, out)
    yield from files
    problems: list[Any] = []
    for episode in vault.episodes.iter(problems=problems):
        fields = episode.to_dict()
        if flagged({"type": "episode", "id": episode.id}, episode_secrets(fields)):
            continue
        yield {"type": "episode", "episode": fields}
    _unread(vault, "episode", problems, out)


def _files(vault: Vault, flagged: Callable[[dict[str, Any], list[Any]], bool],
           left_out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the facts, proposals and runbooks (what :func:`snapshot` reads under the read lock)."""
    from ..stores.checks import secret_findings
    from .views import Told

    records: list[dict[str, Any]] = []
    reader = vault.reader()  # an export holds only what its source may read ([scopes])
    for kind, inbox in (("fact", False), ("proposal", True)):
        told = Told(vault, None, [], target=inbox)
        for key, path in vault.facts.store.files(inbox=inbox, problems=told.met):
            if not reader.allows(vault.facts.path_for(key), vault.root):
                continue
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # removed by hand (a writer through memvault waits for the read lock)
                continue
            except OSError as exc:  # another user's file, say: named, and the rest exported
                left_out.append({"type": kind, "path": path.relative_to(vault.root).as_posix(),
                                 "reason": f"cannot be read: {exc.strerror or exc}"})
                continue
            if flagged({"type": kind, "key": key}, secret_findings("inbox" if inbox else "facts", f"{key}.md", data)):
                continue
            records.append({"type": kind, "key": key, "path": path.relative_to(vault.root).as_posix(),
                            **_content(data)})
        told.tell()
        _unread(vault, kind, told.into or [], left_out)
    problems: list[Any] = []
    for proc in vault.procedures.list(problems):
        path = Path(proc.path)
        data = proc.data
        rel = path.relative_to(vault.procedures.dir).as_posix()
        if flagged({"type": "procedure", "name": proc.name}, secret_findings("procedures", rel, data)):
            continue
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            continue
        records.append({"type": "procedure", "name": proc.name, "path": path.relative_to(vault.root).as_posix(),
                        "mode": oct(mode), **_content(data)})
    _unread(vault, "procedure", problems, left_out)
    return records


def _unread(vault: Vault, kind: str, problems: list[Any], left_out: list[dict[str, Any]]) -> None:
    """The files (or lines) an export could not read, in ``left_out`` by kind, path in the vault and reason."""
    for problem in problems:
        where = Path(problem.path)
        if where.is_absolute():
            try:
                where = where.relative_to(vault.root)
            except ValueError:
                pass
        left_out.append({"type": kind, "path": where.as_posix() + (f":{problem.line}" if problem.line else ""),
                         "reason": problem.reason})


def _content(data: bytes) -> dict[str, Any]:
    try:
        return {"content": data.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        return {"content_base64": base64.b64encode(data).decode("ascii")}
