"""Purge records: a purge by source told to every host that shares the vault.

A purge removes the source's lines from the files this host holds; another host's lines of that source written
before it and not yet pushed (episodes tracked), or never shared at all (episodes untracked, the default), were
untouched, and a tracked host's next sync pushed them back to everyone. So each purge also commits a small record,
``purges/<time>-<random>.json``, one JSON object (pattern, time in UTC, who)::

    {"pattern": "web:evil*", "at": "2026-12-07T02:30:00.125Z", "by": "user:alice"}

One file per purge, never changed: two hosts purging at once add two files, which never conflict. ``sync`` reads the
records of HEAD and of the remote's tip it fetched, and applies each one this host has not applied yet
(:func:`memvault.core.lifecycle.apply_records`, the purge's own machinery) before it commits anything. Which records
were applied is this host's local state (:data:`APPLIED`), keyed by the record's git blob id: a record edited on
the remote is a new record, checked again.

A record arrives through git, so it is a teammate's claim, not a person's command here (docs/security.md): it is
applied only when its pattern is one ``purge`` itself takes (never ``*``), its author is a source this host lets
purge, and its time is not in the future; and it removes only episode lines, only those of sources this host does
not trust, only those dated before the record. Anything else stays, and the record is named.
"""
from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from ..rules.errors import InvalidValue, MemvaultError
from ..rules.fsutil import FileChange, atomic_write, ensure_dir, read_regular
from ..rules.timeutil import format_time, now, parse_time
from ..rules.trust import Op
from ..rules.validation import MAX_FUTURE, SOURCE_MAX, validate_source
from ..stores.gitstore import GitStore
from .gate import WriteGate

#: The folder of purge records, at the top of the vault (committed whatever ``[episodes] track_in_git`` says).
RECORDS = "purges"
#: This host's record of the purge records it applied (local state): ``{"applied": [blob id, ...]}``.
APPLIED = "purges-applied.json"
#: A record is one short line; anything longer is not one.
RECORD_MAX = 4096
_NAME = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}\.json")
#: What a source is made of (printable ASCII, no space).
_PATTERN_CHARS = re.compile(r"[!-~]+")


@dataclass(frozen=True)
class Record:
    """One purge record read from a commit: its vault-relative path, git blob id, and what it says."""

    rel: str
    blob: str
    pattern: str
    at: datetime
    by: str


def check_pattern(pattern: str, name: str = "--source") -> str:
    """``pattern`` when ``purge`` takes it (exact, or a prefix ending in ``*``; never ``*`` alone), else
    :class:`InvalidValue` naming ``name``."""
    if not isinstance(pattern, str) or not pattern.strip() or pattern.strip() == "*":
        raise InvalidValue(name, "give a source or a prefix like web:* (purging everything is not a purge)")
    if len(pattern) > SOURCE_MAX + 1 or not _PATTERN_CHARS.fullmatch(pattern):
        # Every source is printable ASCII without spaces: such a pattern can match nothing, and a line feed in it
        # would have been a line of the purge's commit message.
        raise InvalidValue(name, f"{pattern[:80].encode('unicode_escape').decode('ascii')!r} can match no "
                                 f"source: sources are printable ASCII without spaces, at most {SOURCE_MAX} "
                                 "characters")
    return pattern


def record_change(gate: WriteGate, pattern: str, by: str, at: datetime) -> FileChange:
    """The new record of a purge of ``pattern`` by ``by`` at ``at``, as a file to create."""
    at = at.replace(microsecond=at.microsecond // 1000 * 1000)  # as format_time writes it: read back the same
    name = f"{at.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}.json"
    data = json.dumps({"pattern": pattern, "at": format_time(at), "by": by}) + "\n"
    return FileChange(gate.root / RECORDS / name, None, data.encode("utf-8"))


def pending(gate: WriteGate, git: GitStore, revs: list[str]) -> tuple[list[Record], list[str]]:
    """The records in the commits ``revs`` this host has not applied yet, oldest first, and what to say of those
    it will not apply (each named, at every sync, until someone removes it)."""
    done = applied(gate)
    folder = git.rel(gate.root / RECORDS)
    found: dict[str, str] = {}  # blob -> repository path
    said: list[str] = []
    for rev in revs:
        listing = git.run("ls-tree", "-z", rev, "--", folder + "/", strip=False)
        for entry in (e for e in listing.split("\0") if e):
            info, _, path = entry.partition("\t")
            mode, kind, blob = (info.split(" ") + ["", "", ""])[:3]
            if blob in done or blob in found:
                continue
            if kind != "blob" or mode not in ("100644", "100755"):
                said.append(f"{path}: not a purge record (a link or a folder): not applied, look at it")
                done.add(blob)  # said once per sync, never applied
                continue
            found[blob] = path
    records = []
    for blob, path in found.items():
        rel = (git.root / path).relative_to(gate.root).as_posix()
        try:
            records.append(_read(gate, git, rel, blob))
        except (MemvaultError, ValueError, TypeError, KeyError) as exc:
            said.append(f"{rel}: a purge record this host does not apply ({_reason(exc)}); look at it, then remove "
                        "it on the remote or run the purge here")
    return sorted(records, key=lambda r: (r.at, r.rel)), said


def _reason(exc: Exception) -> str:
    return exc.reason if isinstance(exc, InvalidValue) else str(exc)


def _read(gate: WriteGate, git: GitStore, rel: str, blob: str) -> Record:
    """The record ``blob`` at ``rel``, checked as :mod:`the module doc <memvault.core.purges>` says."""
    if not _NAME.fullmatch(rel.rpartition("/")[2]) or rel.count("/") != 1:
        raise ValueError("not named like a record, purges/<YYYYMMDDTHHMMSSZ>-<8 hex>.json")
    if int(git.run("cat-file", "-s", blob)) > RECORD_MAX:
        raise ValueError(f"more than {RECORD_MAX} bytes")
    data = json.loads(git.run("cat-file", "blob", blob))
    if not isinstance(data, dict) or set(data) != {"pattern", "at", "by"}:
        raise ValueError("not {\"pattern\", \"at\", \"by\"}")
    pattern = check_pattern(data["pattern"], "pattern")
    by = validate_source(data["by"], "by")
    if not gate.policy.allows(Op.PURGE, by) or gate.scopes.for_source(by) is not None:
        raise ValueError(f"it names {by} as its author, a source that may not purge here ([trust], [scopes])")
    at = parse_time(data["at"], "at")
    if at > now() + MAX_FUTURE:
        raise ValueError(f"dated {format_time(at)}, in the future: it would purge lines not written yet")
    return Record(rel, blob, pattern, at, by)


def applied(gate: WriteGate) -> set[str]:
    """The blob ids of the records this host applied (or made itself)."""
    try:
        data = json.loads(read_regular(gate.state_dir / APPLIED, limit=16 << 20))
    except FileNotFoundError:
        return set()
    except (OSError, ValueError, MemvaultError):
        return set()  # applying a record again removes nothing it did not remove the first time
    ids = data.get("applied") if isinstance(data, dict) else None
    return {i for i in ids if isinstance(i, str)} if isinstance(ids, list) else set()


def mark_applied(gate: WriteGate, blob: str) -> None:
    """Remember that this host applied (or made) the record ``blob``."""
    done = applied(gate) | {blob}
    ensure_dir(gate.state_dir)
    atomic_write(gate.state_dir / APPLIED, json.dumps({"applied": sorted(done)}).encode("utf-8"), mode=0o600)


__all__ = ["APPLIED", "RECORDS", "Record", "applied", "check_pattern", "mark_applied", "pending", "record_change"]
