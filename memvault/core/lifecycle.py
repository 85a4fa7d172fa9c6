"""Keeping a vault healthy: retention, purge by source, staleness, duplicates and expiry (ingest: :mod:`.ingest`).

Every cleanup is a command a person can run, review (``--dry-run`` or no ``--apply``) and undo: fact changes are
git commits, episode removals are reported line counts and bytes per kind. Each function plans here and changes
nothing itself: every change goes through the write gate (:mod:`memvault.core.gate`), with the caller's source.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.dedup import groups
from ..rules.freshness import stale_reason
from ..stores.episodes import Episode, RewriteReport, source_matches
from ..rules.errors import InvalidValue, MemvaultError, PurgeIncomplete, SecretRefused
from ..stores.facts import Fact
from . import access, purges
from .episode_sync import drop_aside
from .gate import WriteGate
from .retention import in_force as retention_in_force, save as save_retention
from ..rules.fsutil import FileChange, atomic_write, read_regular, remove
from ..rules.timeutil import format_time, now, parse_time
from ..rules.trust import Op
from ..rules.validation import MAX_FUTURE, Problem
from ..stores.gitstore import GitStore, blob_id


if TYPE_CHECKING:
    from ..stores.state import State


# ------------------------------------------------------------------------------------------------ retention
def prune(gate: WriteGate, *, source: str, dry_run: bool = False, at: datetime | None = None,
          allow_secret: bool = False, accept_retention: bool = False,
          recall_log: State | None = None, name_removed: bool = True) -> RewriteReport:
    """Remove episodes older than ``[retention]`` allows for their kind; their index rows go with them; and from
    ``recall_log`` the recalls older than raw episodes may be (reported as the kind ``recall_log``). A retention
    shorter than this host has pruned by waits for ``accept_retention`` (a trusted source's; see
    :mod:`memvault.core.retention`). A file committed ([episodes] track_in_git) passes the commit's checks with every
    line it keeps (``allow_secret``: the one waiver, for a trusted source). ``name_removed``: list the episodes
    removed in the report's ``removed``, not only count them (see :meth:`EpisodeLog.plan_rewrite`)."""
    gate.require(Op.PRUNE, source)
    if accept_retention:
        gate.require(Op.ACCEPT_RETENTION, source)
    current = at or now()

    future: list[Episode] = []

    def expired(e: Episode) -> bool:
        if e.time > current + MAX_FUTURE:
            future.append(e)
        return (current - e.time).total_seconds() > retention.max_age(e.kind)

    warnings: list[str] = []
    with gate.lock(None if dry_run else source, warnings), gate.episodes.lock():
        force = retention_in_force(gate.config.retention, gate.state_dir, accept=accept_retention)
        retention = force.settings
        warnings += force.warnings
        # with a folder per host, this host's own (and abandoned hosts'): another host prunes its own
        idle = max(retention.ages.values())
        report = gate.episodes.plan_rewrite(expired, gate.episodes.own_files(idle, current),
                                            keep_removed=name_removed)
        report.warnings += warnings
        # This clone's own lines a killed sync left set aside: else the next sync put the expired ones back (and
        # committed them, with episodes tracked) until the prune after it. Counted here, removed once the rewrite
        # of the month files went through.
        aside = drop_aside(gate, expired, what="pruned", dry_run=True)
        if future:  # kept by their date, which cannot be: a person looks at them
            last = max(future, key=lambda e: e.time)
            report.warnings.append(
                f"{len(future)} episode line{' is' if len(future) == 1 else 's are'} dated in the future (the latest "
                f"{format_time(last.time)}, {last.id} from {last.source}): kept, since retention counts from the "
                "date; correct the date or purge the source")
        if not dry_run:
            gate.rewrite_episodes(report, message=f"prune episodes: {report.lines_removed} lines past retention",
                                  source=source, allow_secret=allow_secret)
            save_retention(gate.state_dir, retention.ages)
            aside = drop_aside(gate, expired, what="pruned") if aside else []
        report.warnings += aside
    if recall_log is not None:
        _prune_recall_log(recall_log, report, current.timestamp() - retention.max_age("raw"), dry_run=dry_run)
    return report


def _prune_recall_log(recall_log: State, report: RewriteReport, before: float, *, dry_run: bool) -> None:
    """The recalls logged before ``before`` out of the recall log, counted in ``report`` (a log that cannot be
    read is left as it is: the recall log is this host's, the episodes are the vault's)."""
    try:
        kept, removed = recall_log.prune_recalls(before, dry_run=dry_run)
    except MemvaultError:
        return
    if kept or removed:
        report.kinds["recall_log"] = {"kept": kept, "removed": removed, "bytes_freed": 0}


# ------------------------------------------------------------------------------------------------ purge
#: Written in the state directory before a purge changes a file and removed once it is committed: a purge that
#: was killed part-way is finished by the next write, under the write lock (see :func:`finish_purge`).
PURGE_JOURNAL = "purge.json"


@dataclass
class PurgeReport:
    source: str
    episodes: RewriteReport
    facts: list[Fact] = field(default_factory=list)
    commit: str | None = None
    warnings: list[str] = field(default_factory=list)
    recalls_removed: int = 0

    def to_dict(self, root: Path) -> dict[str, Any]:
        return {
            "source": self.source,
            "facts_removed": [f.key for f in self.facts if not f.quarantined],
            "inbox_removed": [f.key for f in self.facts if f.quarantined],
            "episodes_removed": [e.id for e in self.episodes.removed],
            "episodes": self.episodes.to_dict(root),
            "commit": self.commit,
            "recalls_removed": self.recalls_removed,
            "warnings": list(self.warnings),
        }


def purge(gate: WriteGate, pattern: str, *, source: str, dry_run: bool = False,
          allow_secret: bool = False) -> PurgeReport:
    """Remove every episode, fact and inbox proposal whose source matches ``pattern`` (exact, or a prefix ending
    in ``*``), all or nothing: one commit naming the source, or (when git refuses it) no change at all; a purge
    killed part-way is finished by the next write, from its journal (this one first, with its ``allow_secret``).
    The purge is recorded in ``purges/`` (committed), so that every other host's sync applies it to that host's
    own lines of the source written before it (:mod:`memvault.core.purges`).
    Then the index rows go, the keyword index is merged and the WAL truncated, orphan index generations removed,
    the usage rows are dropped and damaged copies of the index and state removed, so the purged text is not left
    readable in the state directory; a step of that which fails is an error (raised after the files and git are
    purged), never a silence. Every file committed passes the commit's checks (``allow_secret``: the one waiver,
    for a trusted source)."""
    purges.check_pattern(pattern)
    if not dry_run:
        gate.require(Op.PURGE, source)
    warnings: list[str] = []
    with gate.lock():
        if not dry_run:  # with this purge's waiver: the way out when the one interrupted is refused by a check
            warnings += finish_purge(gate, source, allow_secret=allow_secret)
        with gate.episodes.lock():
            # The record tells every other host sharing the vault (purges.py); this host applied it already.
            record = None if dry_run else purges.record_change(gate, pattern, source, now())
            report, paths = _purge_files(gate, pattern, source=source, dry_run=dry_run, allow_secret=allow_secret,
                                         record=record)
            if record is not None and record.after is not None:
                git = gate.git
                purges.mark_applied(gate, git.blob_id(record.after) if git is not None else blob_id(record.after))
            if not dry_run:
                report.warnings += drop_aside(gate, lambda e: source_matches(pattern, e.source))
        report.warnings[:0] = warnings
        if not dry_run:
            _close(gate, report, paths, forget=True)
    return report


def _close(gate: WriteGate, report: PurgeReport, paths: list[Path], *, forget: bool) -> None:
    """After a purge's files are committed: the purged text out of the index and state (:func:`_scrub`) and, for a
    purge made here (``forget``), the source's questions out of the recall log; then its journal goes. Killed before
    that, the journal is still there and the next write finishes the purge, scrub included. A step that fails is
    raised once (:class:`PurgeIncomplete` says what to fix), and the journal goes all the same: every later write
    would fail on it otherwise."""
    failed: PurgeIncomplete | None = None
    try:
        if paths:
            _scrub(gate, report, paths)
    except PurgeIncomplete as exc:
        failed = exc
    try:
        if forget:
            _forget_questions(gate, report)
    finally:
        remove(gate.state_dir / PURGE_JOURNAL)
    if failed is not None:
        raise failed


def _forget_questions(gate: WriteGate, report: PurgeReport) -> None:
    """The source's questions out of this host's recall log (a hook logs each prompt it recalls for), whether or
    not it stored anything: what the source asked goes with what it wrote."""
    from ..stores.state import State

    try:
        report.recalls_removed = State(gate.state_dir / "state.db").forget_source(report.source)
    except MemvaultError as exc:
        raise PurgeIncomplete(f"purge of {report.source}: the files are purged, but its questions may still be "
                              f"in the recall log ({exc}); fix that, then purge again") from None


def pending_purge(state_dir: Path) -> str | None:
    """What to tell a person when a purge was killed part-way (its journal is still in ``state_dir``), read
    only: the next write by a source that may purge finishes it."""
    if not (state_dir / PURGE_JOURNAL).is_file():
        return None
    return ("a purge was interrupted part-way; the next write by a source that may purge (a trusted one) "
            "finishes it, or run the same 'memvault purge --source ...' again")


def finish_purge(gate: WriteGate, writer: str, *, allow_secret: bool = False) -> list[str]:
    """Finish a purge that was killed part-way (its journal is still in the state directory): what it had not
    removed yet is removed, and everything is committed as that purge's one commit, through the commit's checks.
    Run by :meth:`WriteGate.lock` for a write by ``writer``, under the write lock the caller holds, after that
    write's own trust check; ``writer`` (by [trust], and no scope naming it) and the purge's own source must both
    still be allowed to purge. What to tell the person."""
    journal = gate.state_dir / PURGE_JOURNAL
    if not journal.is_file():
        return []
    # A scope forbids its source every whole-vault operation, a purge included, whatever [trust] lets it do.
    if not gate.policy.allows(Op.PURGE, writer) or gate.scopes.for_source(writer) is not None:
        return [pending_purge(gate.state_dir) or ""]
    try:
        planned = json.loads(journal.read_text(encoding="utf-8"))
        pattern, source, rels = planned["pattern"], planned["source"], planned["paths"]
        if not isinstance(pattern, str) or not isinstance(source, str) or not isinstance(rels, list):
            raise TypeError("pattern and source must be text, paths a list")
        if any(not isinstance(r, str) or not r or Path(r).is_absolute() or ".." in Path(r).parts for r in rels):
            raise ValueError("a path outside the vault")
        already = [gate.root / rel for rel in rels]
        record = _journal_record(gate, planned.get("record"))
        # A purge record being applied (apply_records): its narrower cut, never the whole purge
        before = parse_time(planned["before"], "before") if "before" in planned else None
    except (OSError, ValueError, KeyError, TypeError, InvalidValue) as exc:
        raise InvalidValue(str(journal), f"an interrupted purge left a journal that cannot be read ({exc}); "
                                         "look at it, then remove it") from None
    if not gate.policy.allows(Op.PURGE, source):
        raise InvalidValue(str(journal), f"an interrupted purge names {source!r}, which may not purge: look at it, "
                                         "then remove it")
    drop = _recorded_cut(gate, pattern, before, set()) if before is not None else None
    try:
        with gate.episodes.lock():
            report, paths = _purge_files(gate, pattern, source=source, already=already, allow_secret=allow_secret,
                                         record=record, before=before, applying=planned.get("applying"))
            report.warnings += drop_aside(gate, drop or (lambda e: source_matches(pattern, e.source)))
    except SecretRefused as exc:  # every write waits for it: say which purge, and the way out
        raise SecretRefused(f"finishing the interrupted purge of {pattern} ('memvault purge --source {pattern} "
                            f"--allow-secret' finishes it with the waiver): {exc.what}", exc.findings) from None
    _close(gate, report, paths, forget=before is None)  # a record applied here leaves the recall log alone
    return [f"a purge of {pattern} by {source} was interrupted; it is finished now"
            + (f" (commit {report.commit[:12]})" if report.commit else "")] + report.warnings


def _purge_files(gate: WriteGate, pattern: str, *, source: str, dry_run: bool = False,
                 already: list[Path] | None = None, allow_secret: bool = False, record: FileChange | None = None,
                 before: datetime | None = None, applying: str | None = None,
                 kept: set[str] | None = None) -> tuple[PurgeReport, list[Path]]:
    """Plan and apply a purge under the locks the caller holds; the report and every path it changed. ``record``:
    the purge's record to create (:mod:`memvault.core.purges`). ``before``: a record made elsewhere applied here
    (``applying``, :func:`apply_records`): only the episode lines :func:`_recorded_cut` chooses, no fact (``kept``
    hears of the trusted ones left)."""
    drop = None if before is None else _recorded_cut(gate, pattern, before, set() if kept is None else kept)
    episodes = gate.episodes.plan_rewrite(drop or (lambda e: source_matches(pattern, e.source)),
                                          None if drop is None else _own_files(gate))
    problems: list[Problem] = []
    facts = [] if drop is not None else [f for f in gate.facts.iter(problems) if source_matches(pattern, f.source)]
    if drop is None:
        facts += [f for f in gate.facts.inbox(problems) if source_matches(pattern, f.source)]
    report = PurgeReport(pattern, episodes, facts)
    report.warnings += [f"{p}: cannot be read, so its source is unknown: not purged, look at it" for p in problems]
    if episodes.unreadable:
        report.warnings.append(f"{episodes.unreadable} episode lines cannot be read, so their source is unknown: "
                               "kept (see 'memvault episode list')")
    already = already or []
    if record is not None and record.after is not None:  # finishing: the record may be there already
        record = FileChange(record.path, _current_bytes(record.path), record.after)
    if dry_run or not (facts or episodes.changes or already or (record is not None and record.changed)):
        return report, []
    changes = [gate.facts.plan_delete(f.key, inbox=f.quarantined)[0] for f in facts] + episodes.changes
    changes += [record] if record is not None else []
    paths = list(dict.fromkeys([*already, *(c.path for c in changes)]))
    journal = gate.state_dir / PURGE_JOURNAL
    planned: dict[str, Any] = {"pattern": pattern, "source": source,
                               "paths": [p.relative_to(gate.root).as_posix() for p in paths]}
    if record is not None and record.after is not None:
        planned["record"] = {"path": record.path.relative_to(gate.root).as_posix(),
                             "data": record.after.decode("utf-8")}
    if before is not None:
        planned.update(applying=applying, before=format_time(before))
    atomic_write(journal, json.dumps(planned).encode())
    inbox, episodes_dir = gate.facts.inbox_dir, gate.episodes.dir

    def committed(path: Path) -> bool:
        if episodes_dir in path.parents:
            return gate.config.track_episodes
        if inbox in path.parents:
            return gate.config.trust.share_inbox
        return True

    listing = [f"- fact {f.key}" + (" (inbox)" if f.quarantined else "") for f in facts]
    what = f"purge source {pattern}" + (f" here, as recorded in {applying}" if applying else "")
    try:
        report.commit = gate.apply(
            changes, source=source, commit=committed, warnings=report.warnings, also=already, allow_secret=allow_secret,
            message=f"{what}: {len(facts)} facts, {len(episodes.removed)} episodes\n\n" + "\n".join(listing))
    except BaseException:
        if not already:  # refused: every file is back as it was, so there is nothing left to finish
            remove(journal)
        raise
    return report, paths  # the journal stays until the caller scrubbed the index and state: it removes it


def _current_bytes(path: Path) -> bytes | None:
    try:
        return read_regular(path)
    except FileNotFoundError:
        return None


def _journal_record(gate: WriteGate, planned: Any) -> FileChange | None:
    """The record an interrupted purge was creating, from its journal (None: it created none)."""
    if planned is None:
        return None
    rel, data = planned["path"], planned["data"]
    if not isinstance(rel, str) or not isinstance(data, str) or not rel.startswith(purges.RECORDS + "/") \
            or ".." in Path(rel).parts:
        raise ValueError("a record outside purges/")
    return FileChange(gate.root / rel, None, data.encode("utf-8"))


# ------------------------------------------------------------------------------------------------ purge records
def _recorded_cut(gate: WriteGate, pattern: str, before: datetime, kept: set[str]) -> Callable[[Episode], bool]:
    """What a purge record takes from this host: the lines of sources matching ``pattern`` dated before
    ``before``, but never a source this host trusts (those are added to ``kept``, by id: a teammate's commit
    deletes no person's lines here)."""
    def drop(e: Episode) -> bool:
        if not source_matches(pattern, e.source) or e.time >= before:
            return False
        if gate.policy.is_trusted(e.source):
            kept.add(e.id)
            return False
        return True

    return drop


def _own_files(gate: WriteGate) -> list[Path]:
    """This host's own episode files: outside any host folder, or in a folder this clone writes or wrote. Another
    host's folder is that host's: its own sync applies the record (and the purge's own host removed what it had)."""
    log = gate.episodes
    own = log.own_folders()
    return [p for p in log.files() if p.parent == log.dir or p.relative_to(log.dir).parts[0] in own]


def apply_records(gate: WriteGate, git: GitStore, revs: list[str], *, source: str) -> list[str]:
    """Apply every purge record in the commits ``revs`` this host has not applied yet (:mod:`.purges`), each all
    or nothing through the purge's machinery (its journal, its one commit when episodes are tracked, its scrub),
    as ``source`` (the sync's, which may purge). The caller holds the write and append locks. What to say."""
    records, said = purges.pending(gate, git, revs)
    for record in records:
        kept: set[str] = set()
        drop = _recorded_cut(gate, record.pattern, record.at, kept)
        try:
            report, paths = _purge_files(gate, record.pattern, source=source, before=record.at, applying=record.rel,
                                         kept=kept)
        except MemvaultError as exc:  # every file is back as it was: a file the checks refuse is not committed
            said.append(f"{record.rel}: the purge of {record.pattern} it records could not be applied here ({exc}); "
                        "the next sync tries again")
            continue
        report.warnings += drop_aside(gate, drop)
        _close(gate, report, paths, forget=False)
        purges.mark_applied(gate, record.blob)
        removed = len(report.episodes.removed)
        if removed:
            said.append(f"applied the purge of {record.pattern} by {record.by} at {format_time(record.at)} "
                        f"({record.rel}): {removed} episode line{'s' if removed != 1 else ''} of this host written "
                        "before it removed" + (f" (commit {report.commit[:12]})" if report.commit else ""))
        if kept:
            said.append(f"{len(kept)} episode line{'s' if len(kept) != 1 else ''} of trusted sources matching "
                        f"{record.pattern} kept: a purge recorded on another host ({record.rel}) never removes a "
                        f"trusted source's lines here; run 'memvault purge --source {record.pattern}' to remove them")
        said += report.warnings
    return said


def _scrub(gate: WriteGate, report: PurgeReport, paths: list[Path]) -> None:
    """The purged text out of the state directory: index rows, the keyword index's segments, the WALs, usage rows, and
    damaged copies of the index and state moved aside earlier. A step that fails is raised, not swallowed."""
    report.warnings += gate.tell_index(paths)
    failed = []
    try:
        gate.index.scrub()  # orphan generations go even when there is no index to merge
    except MemvaultError as exc:
        failed.append(f"the index ({exc})")
    try:
        gate.state().forget([("fact", f.key) for f in report.facts]
                            + [("episode", e.id) for e in report.episodes.removed])
    except MemvaultError as exc:
        failed.append(f"the usage state ({exc})")
    copies = [p for p in gate.state_dir.glob("*.corrupt-*") if p.is_file() or p.is_symlink()]
    for copy in copies:
        try:
            remove(copy)
        except OSError as exc:
            failed.append(f"{copy.name} ({exc.strerror})")
        except MemvaultError as exc:
            failed.append(f"{copy.name} ({exc})")
    if copies:
        report.warnings.append(f"removed {len(copies)} damaged cop{'ies' if len(copies) > 1 else 'y'} of the index "
                               "or state set aside earlier, which may have held the purged text")
    if failed:
        done = f"commit {report.commit[:12]}" if report.commit else "not committed"
        raise PurgeIncomplete(f"purge of {report.source}: {len(report.facts)} facts and "
                              f"{len(report.episodes.removed)} episodes are gone from the files ({done}), but the "
                              f"purged text may still be readable in {gate.state_dir}: scrubbing {'; '.join(failed)} "
                              "failed; fix that, then run 'memvault reindex --full'")


# ------------------------------------------------------------------------------------------------ staleness
def stale(gate: WriteGate, at: datetime | None = None, *, source: str | None = None) -> list[dict[str, Any]]:
    """Stale facts with the reason and the date of their last commit: those ``source`` may read ([scopes])."""
    out = []
    reader = access.Reader(source or "", gate.scopes.for_source(source), gate.root)
    for fact in reader.only(gate.facts.iter(), lambda f: f.path, gate.root):
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
    warnings: list[str] = field(default_factory=list)
    recalls_removed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"groups": self.groups, "conflicts": self.conflicts, "merged": self.merged, "commit": self.commit,
                "warnings": list(self.warnings)}


def dedup(gate: WriteGate, *, source: str, apply: bool = False, allow_secret: bool = False) -> DedupReport:
    """Duplicate groups and conflicts over the whole vault; ``apply`` merges each group into one fact."""
    if apply:
        gate.require(Op.DEDUP, source)
    else:  # the preview reads every fact of the vault, and names them: not a scoped source's to see
        access.whole_vault_or_refuse(gate.scopes, Op.DEDUP, source)
    settings = gate.config.facts
    problems: list[Problem] = []
    facts = {f.key: f for f in gate.facts.iter(problems)}
    found, conflict_pairs = groups([(k, f.text) for k, f in facts.items()], threshold=settings.duplicate_jaccard,
                                   min_shared=settings.duplicate_min_shared)
    conflicts = [{"a": a, "b": b, "differing": list(m.differing), "shared": list(m.shared)}
                 for a, b, m in conflict_pairs]
    report = DedupReport([list(g) for g in found], conflicts)
    report.warnings += [f"{p}: cannot be read: left out of the comparison" for p in problems]
    if not apply or not found:
        return report
    plans = []
    lines = []
    grouped = {k for g in found for k in g}
    for group in found:
        members = [facts[k] for k in group]
        survivor, changes = merge_plan(members)
        others = [f for f in members if f.key != survivor.key]
        plans.append((survivor, changes, others))
        # What a merged member superseded, the survivor supersedes: the old value stays out of recall.
        for f in others:
            old = facts.get(str(f.extra.get("supersedes") or ""))
            if (old is not None and old.key not in grouped and old.extra.get("superseded_by") == f.key
                    and not survivor.extra.get("supersedes") and "supersedes" not in changes):
                changes["supersedes"] = old.key
                plans.append((old, {"superseded_by": survivor.key}, []))
        report.merged.append({"into": survivor.key, "merged": [f.key for f in others]})
        lines.append(f"- {', '.join(f.key for f in others)} -> {survivor.key}")
    report.commit = gate.merge_facts(plans, source=source, warnings=report.warnings, allow_secret=allow_secret,
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
    else:  # the preview reads every fact of the vault, and names them: not a scoped source's to see
        access.whole_vault_or_refuse(gate.scopes, Op.EXPIRE, source)
    settings = gate.config.facts
    current = at or now()
    problems: list[Problem] = []
    facts = [f for f in gate.facts.iter(problems) if f.importance < settings.expire_importance]
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
    result: dict[str, Any] = {"candidates": candidates, "commit": None,
                              "warnings": [f"{p}: cannot be read: not considered" for p in problems]}
    if apply and chosen:
        result["commit"] = gate.remove_facts(
            chosen, op=Op.EXPIRE, source=source, warnings=result["warnings"],
            message=f"expire {len(chosen)} facts: low importance, not used\n\n"
                    + "\n".join(f"- {f.key}" for f in chosen))
    return result
