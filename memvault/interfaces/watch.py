"""``memvault watch``: keep the index in step with edits made behind memvault's back.

A person's editor, ``git checkout``, ``git pull`` or ``rm -r`` change the vault's files directly. The watcher
keeps a file watcher on the vault (:meth:`Vault.follow`, :mod:`memvault.index.changes`) that marks each path
that changed; a worker brings the index up to date for the marked paths after a quiet period (``debounce``), or
after ``max_delay`` during a continuous storm — a checkout of a thousand files is one batch, or a few, not a
thousand, and a batch reads only what changed. A full check of every file also runs every ``rescan_interval`` to
heal what no event reported (a change made while nobody watched, a watch added late). Where the file watcher
cannot run (a network file system, the inotify watch limit) it says so and the periodic full checks do the work;
where inotify does not exist (macOS, BSD) watchdog's own observer wakes the worker and each batch checks every file.

The model is asked for at start, on a thread of its own (the warm process, started if need be), so the first
edit does not wait for it: a batch indexes the text at once (keyword recall sees it) and embeds it when the model
is ready. No batch holds a lock while a model works, so a recall never waits behind the watcher.

One watcher per vault: it holds an exclusive ``flock`` on ``locks/watch.lock`` (in the vault's state directory) for
its lifetime and writes ``pid host started_at`` to ``watch.pid`` beside it so a second one can say who is running.
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

from ..index.changes import RELEVANT_EVENTS, is_relevant
from ..index.update import SyncReport
from ..rules.errors import UnsafePath, WatcherRunning, describe
from ..rules.fsutil import atomic_write, lock_held, remove, try_lock
from ..rules.markup import printable_line
from ..rules.timeutil import format_time, now

if TYPE_CHECKING:
    from ..core.vault import Vault
    from ..index.changes import ChangeFeed

__all__ = ["Watcher", "WatcherRunning", "is_relevant", "watching", "watcher_running", "serve", "describe_report"]

Log = Callable[[str], None]


def default_log(message: str) -> None:
    """One line on stderr, stamped with the local time (a terminal or a journal reads it as it comes). File names in it
    are a teammate's choice (a committed link named with an escape sequence): shown, never obeyed by the terminal."""
    print(printable_line(f"{datetime.now():%H:%M:%S} {message}"), file=sys.stderr, flush=True)


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
        self.feed: ChangeFeed | None = None

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
        with self._claim():
            self.feed = self.vault.follow(listener=lambda path: self.notify(path), log=self.log)
            plain = None
            if not self.feed.running:  # the feed logged why; say what the watcher does instead
                self.log(f"every change is found by a full check every {self.rescan_interval:g} s instead"
                         + (" and on each event" if "no inotify" in (self.feed.reason or "") else ""))
                plain = _plain_observer(self) if "no inotify" in (self.feed.reason or "") else None
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
                if plain is not None:
                    plain.stop()
                    plain.join(timeout=5)
                self.vault.close()

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
        try:
            # an event batch reads what the watcher marked; the start, the rescans and a watcher that cannot be
            # relied on check every file
            marks = self.feed.collect(barrier=False) if reason == "events" and self.feed is not None else None
            if marks is None and self.feed is not None and self.feed.running:
                self.feed.checked()  # a full check: the feed's own periodic one is not due before its interval
            try:
                report = self.vault.catch_up(load=self._model_ready, marks=marks)
            except BaseException:
                if marks is not None:
                    self.feed.requeue(marks)  # type: ignore[union-attr]
                raise
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
                with contextlib.suppress(OSError, UnsafePath):
                    if pid_file.read_text() == stamp:
                        remove(pid_file)


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


def _plain_observer(watcher: Watcher) -> Any:
    """Where inotify does not exist (macOS, BSD): watchdog's own observer, only to wake the worker; each batch then
    checks every file."""
    from watchdog.observers import Observer

    class Handler:
        def dispatch(self, event: Any) -> None:
            if event.event_type not in RELEVANT_EVENTS or (event.is_directory and event.event_type == "modified"):
                return
            paths = [os.fsdecode(event.src_path)] + ([os.fsdecode(event.dest_path)] if getattr(
                event, "dest_path", "") else [])
            if any(is_relevant(watcher.vault.root, p) for p in paths):
                watcher.notify(*paths)

    observer = Observer()
    observer.schedule(Handler(), str(watcher.vault.root), recursive=True)
    observer.start()
    return observer


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
