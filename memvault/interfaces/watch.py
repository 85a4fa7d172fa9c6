"""``memvault watch``: keep the index in step with edits made behind memvault's back.

A person's editor, ``git checkout``, ``git pull`` or ``rm -r`` change the vault's files directly. The index
already knows how to catch up: :meth:`memvault.index.Index.sync` diffs the whole vault by ``stat`` and then by
hash, so one call picks up any mix of edits, atomic-save renames, deletions and moved folders. The watcher
therefore never tracks *which* files changed: a relevant file-system event only marks the vault dirty, and a
worker runs one sync after a quiet period (``debounce``), or after ``max_delay`` during a continuous storm. A
checkout of a thousand files is one batch, or a few, not a thousand. A cheap sync also runs every
``rescan_interval`` to heal events the kernel dropped (inotify queue overflow, a watch added late).

The model is asked for at start, on a thread of its own (the warm embedder daemon, started if need be), so the
first edit does not wait for it: a batch indexes the text at once (keyword recall sees it) and embeds it when
the model is ready. No batch holds a lock while a model works, so a recall never waits behind the watcher.

One watcher per vault: it holds an exclusive ``flock`` on ``.memvault/locks/watch.lock`` for its lifetime and
writes ``pid host started_at`` to ``.memvault/watch.pid`` so a second one can say who is running.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import WatcherRunning, describe
from ..rules.fsutil import atomic_write, lock_held, try_lock
from ..rules.timeutil import format_time, now

if TYPE_CHECKING:
    from ..index import SyncReport
    from ..core.vault import Vault

#: Directories whose changes never concern the index: git's own files and memvault's local state (the index
#: itself lives there, so watching it would make every sync trigger the next one).
IGNORED_DIRS = (".git", ".memvault")
#: Editor droppings: vim swap and backup files and its write probe ``4913``, emacs backups and lock files,
#: and the temp files of atomic saves (the rename onto the real name is the event that matters).
IGNORED_SUFFIXES = (".swp", ".swo", ".swx", "~", ".tmp")
IGNORED_NAMES = ("4913",)
IGNORED_PREFIXES = (".#",)
#: Event types that can change what the index holds. ``opened`` and ``closed_no_write`` are excluded on
#: purpose: a sync reads every changed file, and those reads must not wake the watcher again.
RELEVANT_EVENTS = ("created", "deleted", "modified", "moved", "closed")

Log = Callable[[str], None]


def default_log(message: str) -> None:
    """One line on stderr, stamped with the local time (a terminal or a journal reads it as it comes)."""
    print(f"{datetime.now():%H:%M:%S} {message}", file=sys.stderr, flush=True)


def is_relevant(root: Path, path: str) -> bool:
    """Whether a change to ``path`` may concern the index (not under .git/ or .memvault/, not an editor temp)."""
    if not path:
        return False
    try:
        rel = Path(path).relative_to(root)
    except ValueError:
        return False
    parts = rel.parts
    if not parts:
        return False  # the vault directory itself: its own mtime changes with every file event inside it
    if parts[0] in IGNORED_DIRS:
        return False
    name = parts[-1]
    return not (name.endswith(IGNORED_SUFFIXES) or name in IGNORED_NAMES or name.startswith(IGNORED_PREFIXES))


class Watcher:
    """Watches one vault and runs :meth:`Index.sync` in debounced batches. Start it with :meth:`run`.

    ``batches`` counts the syncs that events triggered, ``rescans`` the start-up and periodic ones; ``ready``
    is set once the file-system watch is in place and the start-up sync is done.
    """

    def __init__(
        self,
        vault: Vault,
        *,
        debounce: float = 1.0,
        max_delay: float = 10.0,
        rescan_interval: float = 60.0,
        log: Log | None = None,
    ) -> None:
        if debounce < 0 or max_delay < debounce or rescan_interval <= 0:
            raise ValueError("need 0 <= debounce <= max_delay and rescan_interval > 0")
        self.vault = vault
        self.debounce = debounce
        self.max_delay = max_delay
        self.rescan_interval = rescan_interval
        self.log: Log = log or default_log
        self.batches = 0
        self.rescans = 0
        self.events = 0
        self.ready = threading.Event()
        self._cond = threading.Condition()
        self._first_pending: float | None = None  # monotonic time of the first event not yet synced
        self._last_event: float | None = None
        self._model_ready = False
        self._model_failed = False

    # -- events (called on the observer's thread) --------------------------------------------------------
    def notify(self, *paths: str) -> None:
        """Mark the vault dirty if any of ``paths`` is relevant (a move passes its source and destination)."""
        if not any(is_relevant(self.vault.root, p) for p in paths):
            return
        stamp = time.monotonic()
        with self._cond:
            self.events += 1
            if self._first_pending is None:
                self._first_pending = stamp
            self._last_event = stamp
            self._cond.notify()

    # -- main loop ---------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set. Raises :class:`WatcherRunning` when another watcher holds the vault."""
        from watchdog.observers import Observer  # lazy: only ``memvault watch`` needs it

        with self._claim():
            observer = Observer()
            _schedule(observer, _Handler(self), self.vault.root)
            observer.start()
            try:
                self.log(f"watching {self.vault.root} (debounce {self.debounce:g} s, max delay {self.max_delay:g} s, "
                         f"rescan every {self.rescan_interval:g} s)")
                threading.Thread(target=self._warm, name="memvault-model", daemon=True).start()
                # Catch up with what changed while nobody watched (and build the index if there is none).
                self._batch("start")
                self.ready.set()
                next_rescan = time.monotonic() + self.rescan_interval
                while not stop.is_set():
                    reason = self._wait(next_rescan)
                    if reason is None or stop.is_set():
                        continue
                    self._batch(reason)
                    next_rescan = time.monotonic() + self.rescan_interval
            finally:
                observer.stop()
                observer.join(timeout=5)
                self.vault.index.close()

    def _wait(self, next_rescan: float) -> str | None:
        """Block until a batch is due; return why ("events" or "rescan"), or None to re-check ``stop``.

        Waits are capped so a set ``stop`` is noticed within a fraction of a second.
        """
        with self._cond:
            current = time.monotonic()
            if self._first_pending is not None and self._last_event is not None:
                due = min(self._last_event + self.debounce, self._first_pending + self.max_delay)
                if current >= due:
                    self._first_pending = self._last_event = None  # events from here on need another batch
                    return "events"
            else:
                due = next_rescan
                if current >= due:
                    return "rescan"
            self._cond.wait(min(due - current, 0.25))
            return None

    def _warm(self) -> None:
        """Get the model (the warm daemon, started if need be) without holding up the first batch; once it is
        there, embed whatever text is waiting."""
        started = time.monotonic()
        try:
            self.vault.engine.get()
        except Exception as exc:  # noqa: BLE001 - keyword-only from here on, and said once
            self._model_failed = True
            self.log(f"warning: {describe(exc)[0]}; indexing for keyword search only (restart the watcher once the "
                     "model is available, or run 'memvault reindex')")
            return
        self._model_ready = True
        self.log(f"model {self.vault.config.model} ready in {time.monotonic() - started:.1f} s")
        with self._cond:
            if self._first_pending is None:
                self._first_pending = self._last_event = time.monotonic() - self.debounce
            self._cond.notify()

    def _batch(self, reason: str) -> SyncReport | None:
        """One sync: the text at once, the vectors when the model is ready. Never raises: a failing batch is
        logged and the next event or rescan tries again."""
        if reason == "events":
            self.batches += 1
        else:
            self.rescans += 1
        index = self.vault.index
        try:
            if self.vault.team:  # a team: what was pulled goes to the shared index, the rest to the overlay
                report = self.vault.publish(embed=self._model_ready)
            else:
                report = index.sync(splitter=self.vault.engine.loaded())
            if not self.vault.team and self._model_ready and index.pending():
                index.embed(self.vault.engine.get(), report=report, wait=True)
        except Exception as exc:  # noqa: BLE001 - the watcher must outlive any one bad batch
            self.log(f"sync failed ({reason}): {describe(exc)[0]}; will retry on the next change or rescan")
            return None
        for warning in report.warnings:
            self.log(f"warning: {warning}")
        if report.changed or report.problems or report.chunks_embedded or reason == "start":
            self.log(describe_report(report, reason))
        return report

    # -- one watcher per vault ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _claim(self) -> Iterator[None]:
        pid_file = self.vault.state_dir / "watch.pid"
        with try_lock(self.vault.state_dir / "locks" / "watch.lock") as mine:
            if not mine:
                raise holder(self.vault.root, pid_file)
            stamp = f"{os.getpid()} {socket.gethostname()} {format_time(now())}\n"
            atomic_write(pid_file, stamp.encode())
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    if pid_file.read_text() == stamp:
                        pid_file.unlink()


def holder(root: Path, pid_file: Path) -> WatcherRunning:
    """The error naming the watcher recorded in ``watch.pid``."""
    pid = host = since = None
    with contextlib.suppress(OSError, ValueError):
        fields = pid_file.read_text().split()
        pid = int(fields[0])
        host = fields[1] if len(fields) > 1 else None
        since = fields[2] if len(fields) > 2 else None
    return WatcherRunning(root, pid, host, since)


def watching(vault: Vault) -> bool:
    """Whether a watcher holds ``vault`` right now."""
    return watcher_running(vault.state_dir)


def watcher_running(state_dir: Path) -> bool:
    """Whether a watcher holds the vault whose state directory is ``state_dir`` (a shared, non-blocking probe
    of its lock; the lock file is never created)."""
    return lock_held(state_dir / "locks" / "watch.lock")


def describe_report(report: SyncReport, reason: str) -> str:
    """The one log line of a batch: what changed, what was embedded, and what could not be read."""
    if not report.changed:
        line = f"{reason}: index up to date ({report.files_seen} files checked in {report.seconds:.2f} s)"
        if report.chunks_embedded:
            line += f"; {report.chunks_embedded} chunks embedded"
    else:
        line = (
            f"{reason}: {report.files_changed} files changed, {report.files_removed} removed in "
            f"{report.seconds:.2f} s: {report.docs_added} added, {report.docs_changed} changed, "
            f"{report.docs_removed} removed; {report.chunks_embedded} chunks embedded"
            + (f", {report.chunks_pending} pending" if report.chunks_pending else "")
        )
    if report.problems:
        shown = "; ".join(report.problems[:5])
        more = f"; and {len(report.problems) - 5} more" if len(report.problems) > 5 else ""
        line += f" — {len(report.problems)} unreadable: {shown}{more}"
    return line


def _schedule(observer: Any, handler: Any, root: Path) -> None:
    """Watch ``root`` recursively, asking the kernel only for the events that matter when watchdog can."""
    from watchdog import events as ev

    wanted = [getattr(ev, name) for name in (
        "FileCreatedEvent", "FileDeletedEvent", "FileModifiedEvent", "FileMovedEvent", "FileClosedEvent",
        "DirCreatedEvent", "DirDeletedEvent", "DirMovedEvent") if hasattr(ev, name)]
    try:
        observer.schedule(handler, str(root), recursive=True, event_filter=wanted)
    except TypeError:  # watchdog < 4.0 has no event_filter; the handler filters instead
        observer.schedule(handler, str(root), recursive=True)


class _Handler:
    """The watchdog event handler: forwards relevant paths to the watcher, nothing else."""

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def dispatch(self, event: Any) -> None:
        if event.event_type not in RELEVANT_EVENTS:
            return
        if event.is_directory and event.event_type == "modified":
            return  # a directory's mtime changes with every file event inside it: the file event is enough
        paths = [os.fsdecode(event.src_path)]
        if getattr(event, "dest_path", ""):
            paths.append(os.fsdecode(event.dest_path))
        self.watcher.notify(*paths)


def serve(vault: Vault, *, debounce: float = 1.0, log: Log | None = None, **options: Any) -> Watcher:
    """Run a watcher in the foreground until SIGINT or SIGTERM (``memvault watch``)."""
    stop = threading.Event()
    watcher = Watcher(vault, debounce=debounce, max_delay=max(options.pop("max_delay", 10.0), debounce),
                      log=log, **options)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        watcher.run(stop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    watcher.log(f"stopped after {watcher.batches} batches")
    return watcher
