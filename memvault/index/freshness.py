"""Recall's freshness checks of a SQLite index against the vault's files (a mixin of :class:`memvault.index.Index`).

With a file watcher (:mod:`.changes`), a recall syncs what it marked, every change made before the recall included
(a barrier: a marker file the watcher must see); without one, the vault's directories are compared with what the
index last saw. The files behind the hits about to be returned are stat'ed (:meth:`Freshness.verify`) either way.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .db import batches, marks as placeholders

if TYPE_CHECKING:
    import sqlite3

    from .changes import ChangeFeed, Marks
    from .documents import Sources
    from .update import SyncReport

DIRECTORY_CHECK_INTERVAL = 1.0  # seconds between two directory checks by one process (see refresh)


class Freshness:
    """``refresh``, ``refresh_later``, ``apply`` and ``verify`` over the index's ``files`` and ``dirs`` tables, mixed
    into :class:`memvault.index.Index` (whose ``connection``, ``sync``, ``sources`` and watcher they use)."""

    changes: ChangeFeed | None
    sources: Sources
    _last_refresh: float
    connection: Callable[[], sqlite3.Connection]
    sync: Callable[..., SyncReport]
    _rel: Callable[[Path], str]

    def refresh(self, interval: float = 30.0) -> SyncReport | None:
        """Recall's cheap freshness check. With a file watcher (:attr:`changes`): phase 1 for the paths it marked
        since the last call, every change made before this call included. Without one (or when it cannot be
        relied on): phase 1 over the vault only when a directory of the vault changed (a file was created,
        deleted, moved, or saved by rename as editors and git do) or ``interval`` seconds passed since the last
        full scan. None when nothing was due. In-place edits of files recall is about to return are caught by
        :meth:`verify`; without a watcher, other in-place edits wait at most ``interval``."""
        return self.refresh_later(interval)()

    def refresh_later(self, interval: float = 30.0) -> Callable[[], SyncReport | None]:
        """:meth:`refresh` in two steps: this call starts the watcher's barrier (a marker it must see), the call
        returned waits for it and syncs what was marked. Recall searches in between, and again when the report says
        the index changed (:attr:`SyncReport.altered`): the watcher's thread takes a millisecond or two."""
        feed = self.changes
        seq = feed.post_barrier() if feed is not None else None
        if feed is not None and seq is not None:
            return lambda: self._refreshed(interval, feed.collect_after(seq), feed)
        return lambda: self._refreshed(interval, None, None)

    def _refreshed(self, interval: float, marks: Marks | None, feed: Any) -> SyncReport | None:
        if feed is not None:
            if marks is not None:
                try:
                    return self.apply(marks)
                except BaseException:
                    feed.requeue(marks)  # nothing marked is forgotten because one sync failed
                    raise
            # A watcher that cannot be relied on said so in its log and in stats (ChangeFeed._fail); it is the host's
            # business, not an agent's, so it stays out of the recall's warnings.
        if time.monotonic() - self._last_refresh < DIRECTORY_CHECK_INTERVAL:
            return None  # a warm process asking again within the second: candidates are still verified
        self._last_refresh = time.monotonic()
        conn = self.connection()
        row = conn.execute("SELECT value FROM meta WHERE key = 'last_scan'").fetchone()
        due = row is None or time.time() - float(row[0]) > interval
        if not due:
            root = str(self.sources.root)
            for rel, mtime in conn.execute("SELECT path, mtime_ns FROM dirs"):
                try:
                    current = os.stat(os.path.join(root, rel)).st_mtime_ns
                except OSError:
                    current = -1
                if current != mtime:
                    due = True
                    break
        return self.sync() if due else None

    def apply(self, marks: Marks, *, splitter: Any = None) -> SyncReport | None:
        """Phase 1 for what a file watcher marked: the files named, and everything under a directory that was
        created, deleted or moved (the files the index holds there and the ones now on disk). None when nothing
        was marked."""
        if marks.full:
            return self.sync(splitter=splitter)
        rels = set(marks.files)
        if marks.dirs:
            conn = self.connection()
            for rel_dir in marks.dirs:
                # the primary key's range, not a LIKE scan: every indexed path under the directory
                rels.update(r[0] for r in conn.execute("SELECT path FROM files WHERE path >= ? AND path < ?",
                                                       (rel_dir + "/", rel_dir + "0")))
                for base, dirs, files in os.walk(self.sources.root / rel_dir):
                    dirs[:] = [d for d in dirs if not d.startswith(".")]
                    rels.update(self._rel(Path(base) / name) for name in files)
        if not rels:
            return None
        return self.sync([self.sources.root / rel for rel in sorted(rels)], splitter=splitter, reread=True)

    def verify(self, rels: set[str]) -> SyncReport | None:
        """Stat the files behind some rows (recall's candidates); phase 1 for those that changed since indexed.
        None when all are as indexed."""
        if not rels:
            return None
        conn = self.connection()
        known = {}
        for batch in batches(sorted(rels), 500):
            for rel, size, mtime, ino in conn.execute(
                    f"SELECT path, size, mtime_ns, ino FROM files WHERE path IN ({placeholders(batch)})", tuple(batch)):
                known[rel] = (size, mtime, ino)
        root = self.sources.root
        base = os.fspath(root)
        changed = []
        for rel in rels:
            try:
                st = os.stat(os.path.join(base, rel))
                current: tuple[int, int, int] | None = (st.st_size, st.st_mtime_ns, st.st_ino)
            except OSError:
                current = None
            if current != known.get(rel):
                changed.append(root / rel)
        return self.sync(changed) if changed else None

    def as_on_disk(self, rels: set[str]) -> set[str]:
        """Of ``rels`` (just :meth:`verify` ed), those whose indexed text is the file as it is: all of them."""
        return set(rels)
