"""Keeping the index in step with the files, in two phases that never hold a lock while a model works.

1. **Text** (:func:`sync_text`, here): stat the files (all of them, or only the ones a write named), re-read those
   whose (size, mtime, inode) changed, diff their docs by (kind, id) and hash, and write the difference in short
   transactions (one, or one per batch of files): metadata refreshed in place, changed text re-cut with its vectors
   dropped (pending), gone docs deleted. Keyword search sees the change as soon as it commits. An episode file that
   only grew (same inode, the indexed tail unchanged) is read from where the index stopped, not from the start.
2. **Vectors** (:func:`memvault.index.vectors.embed_pending`): docs cut by words are re-cut by the model's
   tokenizer, then pending chunks are embedded a group at a time, each group written in its own short transaction.
   Work done is kept: a later call starts where this one stopped, so pending work shrinks every time it is touched.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.fsread import AREA_LINK, linked_folder, shown_name, text_name
from .quantize import vector_blob
from .db import batches, hash_key, marks, transaction
from .documents import (CHUNKING, CONTEXT_TURNS, FIELDS, Doc, Sources, Splitter, chunk_rows, cut_spans, read_docs,
                        stored_context)

if TYPE_CHECKING:
    import sqlite3

    from ..models.embeddings import ModelIdentity

Progress = Callable[[int, int], None]
#: Texts per encode call (a group, sorted by length): large enough for full length-sorted batches, small enough for
#: a live progress bar and for text still being written in a rebuild.
EMBED_GROUP = 512
TAIL_BYTES = 4096
#: The order a sync writes the areas in (and so the order their pending vectors are embedded in).
AREA_ORDER = {"facts": 0, "procedures": 1, "episodes": 2}


@dataclass
class SyncReport:
    files_seen: int = 0
    files_changed: int = 0
    files_removed: int = 0
    docs_added: int = 0
    docs_changed: int = 0
    docs_removed: int = 0
    metadata_only: int = 0
    chunks_embedded: int = 0
    chunks_from_cache: int = 0
    chunks_pending: int = 0
    model_loaded: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: Seconds spent in each stage (read, write text, cut, encode, write vectors, wait for text): where a
    #: reindex's time goes beside the model's own.
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.files_changed or self.files_removed)

    @property
    def altered(self) -> bool:
        """Whether the index's content moved: a search made before this sync may be out of date."""
        return bool(self.files_changed or self.files_removed or self.docs_added or self.docs_changed
                    or self.docs_removed or self.metadata_only or self.chunks_embedded)

    def merge(self, other: SyncReport) -> SyncReport:
        for name in ("files_changed", "files_removed", "docs_added", "docs_changed", "docs_removed", "metadata_only",
                     "chunks_embedded", "chunks_from_cache"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.files_seen = max(self.files_seen, other.files_seen)
        self.chunks_pending = other.chunks_pending
        self.model_loaded = self.model_loaded or other.model_loaded
        for stage, seconds in other.timings.items():
            self.timings[stage] = self.timings.get(stage, 0.0) + seconds
        self.warnings += [w for w in other.warnings if w not in self.warnings]
        self.problems += [p for p in other.problems if p not in self.problems]
        return self

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


Stat = tuple[str, int, int, int]  # (kind, size, mtime_ns, inode)


# ------------------------------------------------------------------------------------------------ scanning
def scan(sources: Sources, dirs: dict[str, int] | None = None, problems: list[str] | None = None) -> dict[str, Stat]:
    """Every indexable vault file: vault-relative path -> (kind, size, mtime_ns, inode). Only ``stat``.

    ``dirs``, when given, receives the mtime of every directory walked (a file created, deleted or renamed into
    place changes its directory's mtime: what a freshness check compares between full scans). Symlinks that leave
    their folder and special files are reported in ``problems`` and left out.
    """
    from ..rules.fsutil import entry_problem, walk

    out: dict[str, Stat] = {}
    root = str(sources.root)
    prefix_len = len(root) + 1  # entry paths all start with the root: slice, no relpath

    def report(path: Path, reason: str) -> None:
        if problems is not None:
            problems.append(f"{str(path)[prefix_len:]}: {reason}")

    def walked(current: str) -> None:
        if dirs is not None:
            dirs[current[prefix_len:]] = _mtime(current)

    for kind, base, suffixes in sources.areas():
        if dirs is not None:
            dirs[str(base)[prefix_len:]] = _mtime(str(base))
        real_base = os.path.realpath(base)
        for entry in walk(base, report, walked):
            name = entry.name
            if suffixes is not None and not name.endswith(suffixes):
                continue
            if kind == "procedure" and name.endswith(("~", ".tmp", ".swp", ".swo", ".swx")):
                continue
            problem = entry_problem(entry, real_base)
            if problem is not None:
                report(Path(entry.path), problem)
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            rel = entry.path[prefix_len:]
            out[rel if os.sep == "/" else rel.replace(os.sep, "/")] = (kind, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def kind_of(sources: Sources, rel: str) -> str | None:
    """The kind of memory a vault-relative path holds, or None for a file the index does not cover."""
    parts = rel.split("/")
    if len(parts) < 2 or any(p.startswith(".") for p in parts):
        return None
    name = parts[-1]
    if parts[0] == "facts" and name.endswith(".md"):
        return "fact"
    if parts[0] == "episodes" and name.endswith(".jsonl"):
        return "episode"
    if parts[0] == "procedures" and not name.endswith(("~", ".tmp", ".swp", ".swo", ".swx")):
        return "procedure"
    return None


def stat_paths(sources: Sources, rels: Sequence[str], problems: list[str] | None = None) -> dict[str, Stat]:
    """:func:`scan` for the named files only: one ``lstat`` each, nothing else walked (a write costs what it
    changes). A path that is gone, or not covered by the index, is left out."""
    out: dict[str, Stat] = {}
    root = sources.root
    for rel in rels:
        kind = kind_of(sources, rel)
        if kind is None:
            continue
        if not text_name(rel):  # a watcher's event for such a file
            if problems is not None:
                problems.append(f"{shown_name(rel)}: a name that is not UTF-8: skipped")
            continue
        path = root / rel
        linked = linked_folder(root, rel)
        if linked is not None:
            if problems is not None:
                problems.append(f"{rel}: under {linked}, {AREA_LINK}")
            continue
        try:
            st = os.lstat(path)
            if os.path.islink(path):
                area = root / rel.split("/")[0]
                target = os.path.realpath(path)
                base = os.path.realpath(area)
                if not target.startswith(base + os.sep) or not os.path.isfile(target):
                    if problems is not None:
                        problems.append(f"{rel}: a symlink that leads outside the vault area (to {target}): not followed")
                    continue
                st = os.stat(path)
            elif not os.path.isfile(path):
                continue
        except OSError:
            continue
        out[rel] = (kind, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _tail_hash(path: Path, size: int) -> str | None:
    """A hash of the last bytes of the file up to ``size`` (what an append must leave as it was)."""
    try:
        with open(path, "rb") as f:
            start = max(0, size - TAIL_BYTES)
            f.seek(start)
            data = f.read(size - start)
    except OSError:
        return None
    if len(data) != size - start:
        return None
    return hashlib.sha256(data).hexdigest()[:32] + f":{size}"


def _as_indexed(sources: Sources, rel: str, kind: str, row: tuple[Any, ...]) -> bool:
    """For a file a watcher marked whose size, mtime and inode are as indexed: whether it is an episode file whose
    last bytes are as indexed too (an append-only file: the writer indexed its own line). Such a file is not read
    again (100k lines: 3.8 s after every appended line); a fact, or a month file whose tail differs, is."""
    return kind == "episode" and bool(row[4]) and _tail_hash(sources.root / rel, int(row[1])) == row[4]


# ------------------------------------------------------------------------------------------------ phase 1: text
def sync_text(conn: sqlite3.Connection, sources: Sources, *, only: Sequence[str] | None,
              identity: ModelIdentity | None, splitter: Splitter | None, report: SyncReport,
              full_scan_record: bool = True, reread: bool = False, batch_files: int | None = None,
              on_batch: Callable[[], None] | None = None, stop: threading.Event | None = None) -> SyncReport:
    """Phase 1 (see the module doc): bring the text rows of the index in step with the files. ``reread`` (with
    ``only``): read those files even when ``stat`` says they are as indexed; unchanged docs cost a hash compare.

    With ``batch_files``, the changed files are written that many at a time, each batch in its own transaction,
    ``on_batch`` called after each commit (a rebuild embeds what is written while the next batch is read); ``stop``
    ends it between two batches."""
    problems: list[str] = []
    if only is not None:
        wanted = sorted(set(only))
        disk = stat_paths(sources, wanted, problems)
        known_rows = []
        for batch in batches([rel for rel in wanted if text_name(rel)], 500):  # the index holds no other name
            known_rows += conn.execute(
                f"SELECT path, kind, size, mtime_ns, ino, tail FROM files WHERE path IN ({marks(batch)})",
                tuple(batch)).fetchall()
    else:
        dir_times: dict[str, int] = {}
        disk = scan(sources, dir_times, problems)
        known_rows = conn.execute("SELECT path, kind, size, mtime_ns, ino, tail FROM files").fetchall()
        if full_scan_record:
            with transaction(conn):
                conn.execute("DELETE FROM dirs")
                conn.executemany("INSERT INTO dirs(path, mtime_ns) VALUES (?, ?)", list(dir_times.items()))
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('last_scan', ?)", (repr(time.time()),))
    if sources.keep is not None:  # a team's overlay: what the shared index holds is not indexed here
        disk = {rel: st for rel, st in disk.items() if rel in sources.keep}
    report.problems.extend(p for p in problems if p not in report.problems)
    if only is None:
        remember_problems(conn, scan=problems)
    known = {r[0]: r[1:] for r in known_rows}
    report.files_seen = len(disk)
    row = conn.execute("SELECT value FROM meta WHERE key = 'chunking'").fetchone()
    if row is not None and row[0] != CHUNKING:
        # memvault now cuts text differently: every doc is re-cut before its next embedding (phase 2), and only
        # the chunks whose text changes are embedded again.
        with transaction(conn):
            conn.execute("UPDATE docs SET cut = 'words'")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'chunking'", (CHUNKING,))
    elif row is None:
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('chunking', ?)", (CHUNKING,))
    row = conn.execute("SELECT value FROM meta WHERE key = 'fields'").fetchone()
    if only is None and (row is None or row[0] != FIELDS):
        # memvault now records other fields of a doc (Doc.meta): every file is read again, once, by this sync.
        with transaction(conn):
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('fields', ?)", (FIELDS,))
            conn.execute("UPDATE files SET mtime_ns = -1")
        known = {rel: (k, size, -1, ino, tail) for rel, (k, size, _mtime, ino, tail) in known.items()}
    # in path order within each area (the rows of a full build go into every index on paths and keys in order:
    # fuller pages), facts first, then runbooks, then episodes: pending vectors are embedded oldest first, a share
    # at each recall, and a new vault's facts must not wait behind thousands of episode lines
    changed = sorted((rel for rel, (kind, size, mtime, ino) in disk.items()
                      if rel not in known or tuple(known[rel][1:4]) != (size, mtime, ino)
                      or (reread and only is not None and not _as_indexed(sources, rel, kind, known[rel]))),
                     key=lambda rel: (AREA_ORDER.get(rel.split("/", 1)[0], 3), rel))
    removed = [rel for rel in known if rel not in disk]
    if not changed and not removed:
        return report
    report.files_changed, report.files_removed = len(changed), len(removed)
    max_tokens = identity.max_tokens if identity is not None else None
    # One transaction per batch of files, each file's row written with its docs: a crash loses at most the batch
    # in progress (its files are read again next time). Files that are gone come last, so a doc that moved from
    # one of them into a file read in an earlier batch is found there, not deleted.
    groups = [changed[i:i + batch_files] for i in range(0, len(changed), batch_files)] if batch_files else [changed]
    seen: set[tuple[str, str]] = set()
    for n, group in enumerate(groups or [[]]):
        if stop is not None and stop.is_set():
            break
        started = time.perf_counter()
        docs: list[Doc] = []
        replaced: set[str] = set()  # files whose docs are all read here (others only grew)
        read_problems: dict[str, tuple[list[str], bool]] = {}  # rel -> (its problems, read from where it stopped)
        rows = []
        for rel in group:
            kind, size, _mtime_ns, ino = disk[rel]
            start = 0
            old = known.get(rel)
            if kind == "episode" and old is not None and old[3] == ino and size > old[1] and old[4]:
                if _tail_hash(sources.root / rel, old[1]) == old[4]:
                    start = old[1]  # an append: read only the new lines
            if start == 0:
                replaced.add(rel)
            previous = partial(_last_episodes, conn, rel) if start else None
            found: list[str] = []
            docs.extend(read_docs(sources, rel, kind, found, start=start, previous=previous))
            report.problems.extend(found)
            read_problems[rel] = (found, start > 0)
            rows.append((rel, *disk[rel], _tail_hash(sources.root / rel, size) if kind == "episode" else None))
        gone_files = removed if n == len(groups) - 1 or not groups else []
        _time(report, "read", started)
        started = time.perf_counter()
        _write_text(conn, docs, replaced | set(gone_files), splitter, max_tokens, report, seen, rows, gone_files,
                    sources.root)
        remember_problems(conn, files=read_problems, gone=gone_files)
        _time(report, "write text", started)
        if on_batch is not None:
            on_batch()
    return report


def _time(report: SyncReport, stage: str, started: float) -> None:
    report.timings[stage] = report.timings.get(stage, 0.0) + time.perf_counter() - started


def remember_problems(conn: sqlite3.Connection, *, scan: list[str] | None = None,
                      files: dict[str, tuple[list[str], bool]] | None = None, gone: Sequence[str] = ()) -> None:
    """Keep what could not be indexed (a fact with conflict markers, a file over ``[limits]``, a symlink out of
    its folder, a folder that cannot be read) in ``meta``, so every recall can say which memories it cannot see,
    not only the sync that first met them. ``scan`` replaces the walk's problems (a full scan); ``files`` the
    problems of the files read (appended to, for a file read from where it stopped); ``gone`` drops files."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'problems'").fetchone()
    stored = json.loads(row[0]) if row else {"scan": [], "files": {}}
    before = json.dumps(stored, sort_keys=True)
    if scan is not None:
        stored["scan"] = list(scan)
    for rel in gone:
        stored["files"].pop(rel, None)
    for rel, (found, appended) in (files or {}).items():
        kept = stored["files"].get(rel, []) if appended else []
        if kept + found:
            stored["files"][rel] = kept + [p for p in found if p not in kept]
        else:
            stored["files"].pop(rel, None)
    if json.dumps(stored, sort_keys=True) != before:
        with transaction(conn):
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('problems', ?)", (json.dumps(stored),))


def stored_problems(conn: sqlite3.Connection) -> list[str]:
    """What :func:`remember_problems` kept: every file the index cannot hold, with the reason."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'problems'").fetchone()
    if row is None:
        return []
    stored = json.loads(row[0])
    return list(stored.get("scan", [])) + [p for found in stored.get("files", {}).values() for p in found]


def _last_episodes(conn: sqlite3.Connection, rel: str, source: str | None) -> list[Doc]:
    """The last raw episodes of ``source`` indexed from ``rel``, oldest first (the context of lines appended)."""
    rows = conn.execute("SELECT item_id, body, source, created FROM docs WHERE path = ? AND kind = 'episode' "
                        "AND ekind = 'raw' AND source IS ? ORDER BY created DESC, item_id DESC LIMIT ?",
                        (rel, source, CONTEXT_TURNS))
    return [Doc("episode", r[0], rel, "", r[1], 0.5, 0.5, r[2], r[3], r[3], ekind="raw") for r in rows][::-1]


@dataclass
class _TextPlan:
    """What :func:`_write_text` writes, as the index stood when it was looked up."""

    to_cut: list[tuple[Doc, int | None]]  # docs to (re)write, with their row when they have one
    meta_updates: list[Doc]               # docs whose text is as indexed: only their fields
    gone: list[int]                       # rows of ``replaced`` files whose doc is no longer there
    seen: set[tuple[str, str]]            # the docs this batch writes (``seen`` of the next batch)
    duplicates: list[str]                 # the problem of each second copy of a doc

    def same_rows(self, other: _TextPlan) -> bool:
        """Whether ``other`` writes the same docs to the same rows (its cuts are this plan's)."""
        def rows(plan: _TextPlan) -> tuple[Any, ...]:
            return ([(d.kind, d.item_id, d.hash, row) for d, row in plan.to_cut],
                    [(d.kind, d.item_id) for d in plan.meta_updates], sorted(plan.gone))
        return rows(self) == rows(other)


def _plan_text(conn: sqlite3.Connection, docs: list[Doc], replaced: set[str],
               seen: set[tuple[str, str]]) -> _TextPlan:
    """Diff ``docs`` against the index as it is now (``seen``: the docs earlier batches wrote; not changed)."""
    existing: dict[tuple[str, str], tuple[int, str]] = {}
    for path_batch in batches(sorted(replaced), 500):
        for doc_id, kind, item_id, h in conn.execute(
                f"SELECT doc, kind, item_id, hash FROM docs WHERE path IN ({marks(path_batch)})", tuple(path_batch)):
            existing[(kind, item_id)] = (doc_id, h)
    # Docs that moved here from another file (an episode line moved by hand; ids are unique keys).
    missing = [(d.kind, d.item_id) for d in docs if (d.kind, d.item_id) not in existing]
    for batch in batches(missing, 400):
        clauses = " OR ".join("(kind = ? AND item_id = ?)" for _ in batch)
        for doc_id, kind, item_id, h in conn.execute(
                f"SELECT doc, kind, item_id, hash FROM docs WHERE {clauses}", tuple(x for pair in batch for x in pair)):
            existing[(kind, item_id)] = (doc_id, h)
    plan = _TextPlan([], [], [], set(), [])
    for d in docs:
        key = (d.kind, d.item_id)
        if key in seen or key in plan.seen:
            plan.duplicates.append(f"{d.path}: duplicate {d.kind} id {d.item_id!r}, later copy ignored")
            continue
        plan.seen.add(key)
        row = existing.get(key)
        if row is not None and row[1] == hash_key(d.hash):
            plan.meta_updates.append(d)
        else:
            plan.to_cut.append((d, row[0] if row else None))
    # Only docs of ``replaced`` files can be missing from ``docs`` (the other rows looked up are docs' own keys).
    plan.gone = [row[0] for key, row in existing.items() if key not in seen and key not in plan.seen]
    return plan


def _moved(root: Path, file_rows: Sequence[tuple[Any, ...]]) -> set[str]:
    """The files of ``file_rows`` (path, kind, size, mtime_ns, inode, ...) whose ``stat`` is no longer the one
    taken before they were read (followed, as the scan does), or that are gone."""
    moved = set()
    for rel, _kind, size, mtime_ns, ino, *_ in file_rows:
        try:
            st = os.stat(root / rel)
        except OSError:
            moved.add(rel)
            continue
        if (st.st_size, st.st_mtime_ns, st.st_ino) != (size, mtime_ns, ino):
            moved.add(rel)
    return moved


def _write_text(conn: sqlite3.Connection, docs: list[Doc], replaced: set[str], splitter: Splitter | None,
                max_tokens: int | None, report: SyncReport, seen: set[tuple[str, str]],
                file_rows: Sequence[tuple[Any, ...]], gone_files: Sequence[str], root: Path) -> None:
    """Diff ``docs`` against the index and write the difference, with the rows of the files read (``file_rows``)
    and without those of ``gone_files``, in one transaction. ``replaced`` are the files whose docs are all in
    ``docs`` (a doc of theirs that is not in ``docs`` is gone); docs of other files are appended ones. ``seen``
    holds the docs written by earlier batches of the same sync (a second copy of one is a duplicate).

    The diff is made (and the text cut) before the write lock is taken, then made again under it: another process
    may have written the index meanwhile (two appenders of one month file indexed the same new lines: the second
    insert broke the unique key), and a file that changed since it was read is left to the writer that changed it
    (a purge that rewrote the month file and scrubbed the index after this process read it: the purged line came
    back into the index, with a stat that hid it from the next sync). Such a file's row is not written either, so
    the next sync reads it in any case."""
    plan = _plan_text(conn, docs, replaced, seen)
    cuts = cut_spans([d for d, _ in plan.to_cut], splitter, max_tokens)
    has_vec = _has_vectors(conn)

    with transaction(conn):
        moved = _moved(root, file_rows)
        if moved:
            docs = [d for d in docs if d.path not in moved]
            file_rows = [r for r in file_rows if r[0] not in moved]
            replaced = replaced - moved
        again = _plan_text(conn, docs, replaced, seen)
        if not again.same_rows(plan):
            cuts = cut_spans([d for d, _ in again.to_cut], splitter, max_tokens)
        plan = again
        to_cut, meta_updates, gone = plan.to_cut, plan.meta_updates, plan.gone
        for batch in batches(gone, 500):
            if has_vec:
                conn.execute(f"DELETE FROM chunks_vec WHERE rowid IN (SELECT rowid FROM chunks WHERE doc IN "
                             f"({marks(batch)}))", tuple(batch))
            conn.execute(f"DELETE FROM docs WHERE doc IN ({marks(batch)})", tuple(batch))
        conn.executemany(
            """UPDATE docs SET path = ?, header = ?, importance = ?, confidence = ?, source = ?, created = ?,
                              updated = ?, valid_until = ?, review_after = ?, ekind = ?, ref = ?, meta = ?, context = ?
               WHERE kind = ? AND item_id = ?""",
            [(d.path, d.header, d.importance, d.confidence, d.source, d.created, d.updated, d.valid_until,
              d.review_after, d.ekind, d.ref, d.meta, stored_context(d), d.kind, d.item_id) for d in meta_updates])
        for (d, doc_id), (spans, how) in zip(to_cut, cuts):
            values = (d.path, d.header, d.body, hash_key(d.hash), how, d.importance, d.confidence, d.source,
                      d.created, d.updated, d.valid_until, d.review_after, d.ekind, d.ref, d.meta, stored_context(d))
            if doc_id is None:
                doc_id = conn.execute(
                    """INSERT INTO docs(path, header, body, hash, cut, importance, confidence, source, created,
                                        updated, valid_until, review_after, ekind, ref, meta, context, kind, item_id)
                       VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)""", (*values, d.kind, d.item_id)).lastrowid
            else:
                # the old chunks go first: their keyword rows are deleted by rowid, never from the new text
                _drop_chunks(conn, [doc_id], has_vec)
                conn.execute(
                    """UPDATE docs SET path = ?, header = ?, body = ?, hash = ?, cut = ?, importance = ?,
                                       confidence = ?, source = ?, created = ?, updated = ?, valid_until = ?,
                                       review_after = ?, ekind = ?, ref = ?, meta = ?, context = ? WHERE doc = ?""",
                    (*values, doc_id))
            conn.executemany(INSERT_CHUNK, [(doc_id, *row) for row in chunk_rows(d, spans)])
        conn.executemany("DELETE FROM files WHERE path = ?", [(rel,) for rel in gone_files])
        conn.executemany(
            "INSERT OR REPLACE INTO files(path, kind, size, mtime_ns, ino, pending, tail) VALUES (?,?,?,?,?,0,?)",
            file_rows)
    seen |= plan.seen
    report.problems += plan.duplicates
    report.metadata_only += len(meta_updates)
    report.docs_added += sum(1 for _, row in to_cut if row is None)
    report.docs_changed += sum(1 for _, row in to_cut if row is not None)
    report.docs_removed += len(gone)
    report.chunks_pending = pending_count(conn)


#: A chunk as a span of its doc's body, pending (no vector yet); the keyword index learns it by trigger.
INSERT_CHUNK = "INSERT INTO chunks(doc, chunk, start, len, model) VALUES (?,?,?,?,NULL)"


def _has_vectors(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'").fetchone() is not None


def _drop_chunks(conn: sqlite3.Connection, doc_ids: list[int], has_vec: bool,
                 chunks: list[int] | None = None) -> None:
    """Delete the chunks of ``doc_ids`` (only those numbered ``chunks`` when given: one doc), vectors first."""
    if chunks is not None:
        where, args = f"doc = ? AND chunk IN ({marks(chunks)})", (doc_ids[0], *chunks)
        if has_vec:
            conn.execute(f"DELETE FROM chunks_vec WHERE rowid IN (SELECT rowid FROM chunks WHERE {where})", args)
        conn.execute(f"DELETE FROM chunks WHERE {where}", args)
        return
    for batch in batches(doc_ids, 500):
        if has_vec:
            conn.execute(f"DELETE FROM chunks_vec WHERE rowid IN (SELECT rowid FROM chunks WHERE doc IN "
                         f"({marks(batch)}))", tuple(batch))
        conn.execute(f"DELETE FROM chunks WHERE doc IN ({marks(batch)})", tuple(batch))


def pending_count(conn: sqlite3.Connection) -> int:
    """Chunks still waiting for a vector, plus docs still cut by words (each is at least one chunk to redo)."""
    chunks = conn.execute("SELECT COUNT(*) FROM chunks WHERE model IS NULL").fetchone()[0]
    words = conn.execute("SELECT COUNT(*) FROM docs WHERE cut = 'words'").fetchone()[0]
    return int(chunks) + int(words)


# ------------------------------------------------------------------------------------------------ phase 2: vectors
def model_key(identity: ModelIdentity) -> str:
    return f"{identity.name}@{identity.revision}"


def model_id(conn: sqlite3.Connection, identity: ModelIdentity) -> int:
    """The id in ``models`` of the model whose vectors are stored (what ``chunks.model`` holds)."""
    key = model_key(identity)
    conn.execute("INSERT OR IGNORE INTO models(key) VALUES (?)", (key,))
    return int(conn.execute("SELECT id FROM models WHERE key = ?", (key,)).fetchone()[0])


def with_context(text: str, context: str) -> str:
    """What is embedded beside a turn: its context (the day, the turns before it), then the turn."""
    return context + "\n" + text


def mean_vector(a: bytes, b: bytes) -> bytes:
    """The unit vector halfway between two unit vectors (float32 bytes)."""
    import numpy as np

    v = np.frombuffer(a, dtype=np.float32) + np.frombuffer(b, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return (v / norm if norm else v).astype(np.float32).tobytes()
