"""What changed in a vault, learnt from a file watcher instead of looked for: for processes that stay up.

A process that holds a vault for long (the MCP server, ``memvault watch``, the web view, the warm process) keeps a
:class:`ChangeFeed`: a watchdog (inotify) watcher on the vault that marks every path an editor, ``git checkout``,
``rm`` or another memvault process touched. Recall then brings the index up to date for the marked paths only,
instead of checking every directory of the vault (17-23 ms at 10k-100k facts).

**No change is missed by a recall that starts after it.** inotify queues an event before the system call that
made the change returns, but the watcher reads it on its own threads, a little later. So :meth:`ChangeFeed.collect`
first creates a marker file inside the watched tree and waits until the watcher has seen it: one watch delivers
its events in order, so every change made before the recall began has been marked by then. The markers go in
``live/`` of the vault's state directory when that is inside the vault (a vault at the top of its work tree: the
state is in ``.git/``); otherwise in a folder of this process's own in the vault, ``.memvault-live-<pid>-<id>/``,
removed when the watcher stops. Nothing else is ever deleted: a dead process's markers only when they are empty
regular files of this user named like a marker in the real folder made here, and a dead process's own folder only
by ``rmdir`` (an empty folder: git never checks one out). A file moved out of
the vault is the one event the watcher holds back (half a second, to pair it with a move back in); recall's own
check of the files behind the hits it returns covers it, as it covers everything else.

**Lost events** come through watchdog's public API only: its ``EventsLostEvent`` (sent once it has rebuilt its
watches after the kernel's queue overflowed) makes the next :meth:`~ChangeFeed.collect` ask for a full check; and
every :data:`CHECK_INTERVAL` seconds a full check is asked for anyway, healing what no event said (a watchdog that
cannot report lost events, a directory watched too late).

**When the watcher cannot be trusted** — no inotify on this system, the vault on a network file system (a change
made on another host raises no event here), the inotify watch limit reached (watchdog says so in its log for a
directory added later, and the feed listens there), a marker not seen in time — :meth:`~ChangeFeed.collect`
returns None and the index falls back to its directory check. A reason that lasts is said once, in the process's
log, and recorded in the state directory for ``stats`` and ``agent status``; never in a recall's warnings, which
reach agents.
"""
from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import sys
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rules.errors import MemvaultError, UnsafePath
from ..rules.fsutil import atomic_write, ensure_dir, open_at, remove, remove_dir, unlink_at

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
#: Where the markers of :meth:`ChangeFeed.collect` are created, in the state directory (never indexed or committed).
LIVE_DIR = "live"
#: The name of a process's own marker folder in the vault, when the state directory is outside it.
LIVE_PREFIX = ".memvault-live-"
#: A marker's name: the pid of the process that made it, the feed's id, the barrier's number.
_MARKER = re.compile(r"(\d+)-[0-9a-f]+-(\d+)")
#: How long a recall waits for its marker before it checks the directories instead (this once; the marker comes
#: back in about a millisecond, and only a stalled watcher makes recall wait this long).
BARRIER_TIMEOUT = 1.0
#: File systems where a change made elsewhere raises no event here (``/proc/self/mountinfo`` types).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ncpfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
    "virtiofs", "fuse.sshfs", "fuse.rclone", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs", "fuse.cephfs",
    "fuse.juicefs", "fuse.goofys"})

#: watchdog's event type for lost events (``EventsLostEvent``, sent after a queue overflow once it has rebuilt its
#: watches); a watchdog without it loses events silently, and the periodic check is then what finds them.
EVENTS_LOST = "events_lost"
#: How often a feed asks for a full check of the vault (every file's size and time) whatever the events said: it
#: heals what no event reported (an event lost where watchdog cannot say so, a directory watched too late).
CHECK_INTERVAL = 300.0
#: Where each process that follows the vault writes its watcher's state (``stats`` reads it), in the state dir.
FEEDS_DIR = "feeds"

Log = Callable[[str], None]
Listener = Callable[[str], None]
logger = logging.getLogger("memvault.watch")


def is_relevant(root: Path, path: str) -> bool:
    """Whether a change to ``path`` may concern the index (not under .git/ or .memvault/, not an editor temp)."""
    rel = relative(root, path)
    if rel is None:
        return False
    parts = rel.split("/")
    if parts[0] in IGNORED_DIRS or parts[0].startswith(LIVE_PREFIX):
        return False
    name = parts[-1]
    return not (name.endswith(IGNORED_SUFFIXES) or name in IGNORED_NAMES or name.startswith(IGNORED_PREFIXES))


def relative(root: Path, path: str) -> str | None:
    """``path`` relative to ``root`` in ``/`` form, or None when it is the root itself or outside it."""
    if not path:
        return None
    base = str(root)
    if not path.startswith(base + os.sep):
        return None
    rel = path[len(base) + 1:]
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


@dataclass
class Marks:
    """What the watcher saw change since the last :meth:`ChangeFeed.collect`: vault-relative paths."""

    files: set[str] = field(default_factory=set)
    #: Directories created, deleted or moved: everything under them is checked.
    dirs: set[str] = field(default_factory=set)
    #: Events were lost (the kernel's queue overflowed): the whole vault is checked.
    full: bool = False
    #: memvault.toml changed: a process holding the vault reads its settings again.
    config: bool = False

    def __bool__(self) -> bool:
        return bool(self.files or self.dirs or self.full or self.config)


def filesystem_type(path: Path) -> str | None:
    """The type of the file system holding ``path`` (from /proc/self/mountinfo), or None where it cannot be read."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    target = os.path.realpath(path)
    best, kind = "", None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        mount = fields[4].replace("\\040", " ")
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, kind = mount, right.split()[0] if right.split() else None
    return kind


class ChangeFeed:
    """A watchdog (inotify) watcher on one vault that marks what changed. :meth:`start` it, :meth:`collect` the
    marks, :meth:`stop` it. ``listener`` is called with each relevant path as it is marked (``memvault watch``
    debounces on it)."""

    def __init__(self, root: Path, state_dir: Path, *, listener: Listener | None = None,
                 barrier_timeout: float = BARRIER_TIMEOUT, check_interval: float = CHECK_INTERVAL,
                 log: Log | None = None) -> None:
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self.listener = listener
        self.barrier_timeout = barrier_timeout
        self.check_interval = check_interval
        #: Where the watcher's notes go (``memvault watch``'s log); None: the ``memvault.watch`` logger.
        self.log = log
        #: Why the watcher cannot be relied on, or None while it can.
        self.reason: str | None = None
        self.events = 0
        self.events_lost = 0
        #: When the last full check was handed out (``time.time()``), or None before the first.
        self.last_check: float | None = None
        self._last_check = time.monotonic()
        self._lost_reported = False
        self._state_file = self.state_dir / FEEDS_DIR / f"{os.getpid()}-{id(self):x}.json"
        self._watch_log = _WATCH_LOG
        self._marks = Marks()
        self._cond = threading.Condition()
        self._seen = 0
        self._seq = itertools.count(1)
        self._token = f"{os.getpid()}-{id(self):x}-"
        self._observer: Any = None
        live = self.state_dir / LIVE_DIR
        #: Where this feed's markers go; inside the watched tree, or its barrier would never see them.
        self._own_live = relative(self.root, str(live)) is None
        self._live = self.root / f"{LIVE_PREFIX}{self._token.rstrip('-')}" if self._own_live else live
        self._live_rel = relative(self.root, str(self._live)) + "/"  # type: ignore[operator]
        self._live_fd: int | None = None  # the marker folder, held open: markers are made through it

    # -- life ----------------------------------------------------------------------------------------------
    def start(self) -> bool:
        """Start watching. False (with :attr:`reason`) when the watcher cannot run or cannot be trusted here."""
        if self._observer is not None:
            return self.reason is None
        kind = filesystem_type(self.root)
        if kind in NETWORK_FILESYSTEMS:
            return self._fail(f"the vault is on a network file system ({kind}), where changes made on other hosts "
                              "raise no event here")
        try:
            from watchdog.observers.inotify import InotifyObserver
        except ImportError:
            return self._fail("no inotify on this system")
        try:
            self._open_live()
        except OSError as exc:
            self._close_live()
            return self._fail(f"cannot write markers in {self._live} ({exc.strerror})")
        except UnsafePath as exc:  # a link where the marker folder goes: never followed, never swept
            self._close_live()
            return self._fail(f"cannot write markers in {self._live} ({exc.reason if hasattr(exc, 'reason') else exc})")
        observer = InotifyObserver()
        self._lost_reported = _events_lost_type() is not None
        self._watch_log.attach(self)
        try:
            observer.schedule(_handler(self), str(self.root), recursive=True, event_filter=_event_filter())
            observer.start()
        except OSError as exc:
            with contextlib.suppress(Exception):
                observer.stop()
            self._watch_log.detach(self)
            self._close_live()
            return self._fail(_watch_error(exc))
        self._observer = observer
        self._last_check = time.monotonic()
        if self.reason is not None:  # a subdirectory could not be watched while the watches were added
            self.stop()
            return False
        if not self._lost_reported:
            self._say("this watchdog does not report lost events; a full check every "
                      f"{self.check_interval:g} s covers them")
        self._publish()
        return True

    def stop(self) -> None:
        observer, self._observer = self._observer, None
        self._watch_log.detach(self)
        if observer is not None:
            with contextlib.suppress(Exception):
                observer.stop()
                observer.join(timeout=5)
        with contextlib.suppress(OSError, UnsafePath):
            remove(self._state_file)
        self._close_live()

    def _open_live(self) -> None:
        """Make (or, in the state directory, find) the marker folder and hold it open."""
        if self._live_fd is not None:
            return
        if self._own_live:
            _remove_dead_folders(self.root)
        # made here (a name of this process's own, or the state directory's live/), never through a link
        ensure_dir(self._live, 0o700)
        self._live_fd = _sweep(self._live)

    def _close_live(self) -> None:
        fd, self._live_fd = self._live_fd, None
        if fd is not None:
            os.close(fd)
        if self._own_live:
            with contextlib.suppress(OSError, UnsafePath):
                remove_dir(self._live)  # only ever an empty folder: each marker is removed as soon as it is made

    @property
    def running(self) -> bool:
        return self._observer is not None and self.reason is None

    def _fail(self, reason: str) -> bool:
        """The watcher cannot be relied on from here on: said once in the log and in ``stats``, and recall checks
        the directories instead (the caller's fallback, never a silent one)."""
        if self.reason is None:
            self.reason = reason
            self._say(f"file watcher unavailable ({reason}); changes are found by checking the vault instead")
            with self._cond:
                self._cond.notify_all()  # a recall waiting for its marker stops waiting
            self._publish()
        return False

    def degrade(self, reason: str) -> None:
        """Stop trusting the watcher (``reason`` says why): see :meth:`_fail`."""
        self._fail(reason)

    def _say(self, line: str) -> None:
        """A note for whoever runs the process (its log), never for an agent's context or a recall's warnings."""
        if self.log is not None:
            self.log(f"warning: {line}")
        else:
            logger.warning("%s: %s", self.root, line)

    def lost(self) -> None:
        """Events were lost (watchdog's ``EventsLostEvent``, sent once it has rebuilt its watches): the next
        :meth:`collect` asks for a full check of the vault."""
        with self._cond:
            self._marks.full = True
            self.events_lost += 1
            self._cond.notify_all()
        self._say("file events were lost (the kernel's queue overflowed); the next sync checks every file")
        self._publish()
        if self.listener is not None:
            self.listener(str(self.root))

    def status(self) -> dict[str, Any]:
        """The watcher's state as ``stats`` shows it (and as it is written to the state directory for other
        processes to read): running or why not, lost events, the last full check."""
        return {"pid": os.getpid(), "process": os.path.basename(sys.argv[0]) if sys.argv else "",
                "running": self.running, "reason": self.reason, "events": self.events,
                "lost_events_reported": self._lost_reported, "events_lost": self.events_lost,
                "check_interval": self.check_interval, "last_check": self.last_check}

    def _publish(self) -> None:
        try:
            ensure_dir(self._state_file.parent)
            atomic_write(self._state_file, json.dumps(self.status()).encode())
        except (OSError, MemvaultError) as exc:  # stats then shows no watcher for this process; the log says why
            logger.warning("%s: cannot record the file watcher's state (%s)", self.root, exc)

    # -- events (the observer's thread) -----------------------------------------------------------------------
    def mark(self, event_type: str, is_directory: bool, *paths: str) -> None:
        if event_type == EVENTS_LOST:
            self.lost()
            return
        if event_type not in RELEVANT_EVENTS:
            return
        for path in paths:
            rel = relative(self.root, path)
            if rel is None:
                continue
            if rel.startswith(self._live_rel) or rel.startswith(LIVE_PREFIX):
                name = rel.rsplit("/", 1)[-1]
                if event_type == "created" and name.startswith(self._token):
                    with self._cond:
                        self._seen = max(self._seen, int(name[len(self._token):]))
                        self._cond.notify_all()
                continue
            if is_directory and event_type == "modified":
                continue  # a directory's mtime changes with every file event inside it: the file event is enough
            if not is_relevant(self.root, path):
                continue
            with self._cond:
                self.events += 1
                if rel == "memvault.toml":
                    self._marks.config = True
                elif is_directory:
                    self._marks.dirs.add(rel)
                else:
                    self._marks.files.add(rel)
            if self.listener is not None:
                self.listener(path)

    # -- recall's side --------------------------------------------------------------------------------------
    def collect(self, *, barrier: bool = True) -> Marks | None:
        """Everything marked up to now, cleared; None when the watcher cannot be relied on (the caller then checks
        the directories). With ``barrier`` (recall's case) every change made before this call is included."""
        if not barrier:
            return self.collect_after(None)
        seq = self.post_barrier()
        return None if seq is None else self.collect_after(seq)

    def post_barrier(self) -> int | None:
        """The first half of :meth:`collect`'s barrier: the marker is created, and its number returned for
        :meth:`collect_after`, which waits until the watcher has seen it. Recall searches in between (the watcher's
        thread takes a millisecond or two to see a marker). None when no marker could be created (the watcher
        cannot be relied on; it says why)."""
        if not self.running:
            return None
        seq = next(self._seq)
        name = f"{self._token}{seq}"
        try:
            if self._live_fd is None:
                raise OSError(errno.EBADF, "the marker folder is not open")
            os.close(open_at(self._live_fd, name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            unlink_at(self._live_fd, name)
        except OSError as exc:
            self._fail(f"cannot write markers in {self._live} ({exc.strerror})")
            return None
        except UnsafePath as exc:
            self._fail(str(exc))
            return None
        return seq

    def collect_after(self, seq: int | None) -> Marks | None:
        """:meth:`collect` once the watcher has seen marker ``seq`` of :meth:`post_barrier` (every change made
        before that marker is then marked); without a marker (``seq`` None), what is marked now, unless the watcher
        is not running."""
        if not self.running:
            return None
        if seq is not None:
            with self._cond:
                if not (self._cond.wait_for(lambda: self._seen >= seq or self.reason is not None,
                                            self.barrier_timeout) and self.reason is None):
                    return None
        with self._cond:
            marks, self._marks = self._marks, Marks()
        if self.reason is not None:
            return None
        if marks.full or time.monotonic() - self._last_check >= self.check_interval:
            self.checked()
            marks.full = True
        return marks

    def checked(self) -> None:
        """A full check of the vault is being made now (:meth:`collect` asked for it, or ``memvault watch``'s
        rescan): the next periodic one is due ``check_interval`` from here."""
        self._last_check = time.monotonic()
        self.last_check = time.time()
        self._publish()

    def requeue(self, marks: Marks) -> None:
        """Put back marks whose sync failed: the next :meth:`collect` returns them again."""
        with self._cond:
            self._marks.files |= marks.files
            self._marks.dirs |= marks.dirs
            self._marks.full = self._marks.full or marks.full
            self._marks.config = self._marks.config or marks.config


def _sweep(live: Path) -> int:
    """The marker folder ``live``, opened (a real folder of this user: a link is never followed, and everything is
    done through the handle returned), with the markers a dead process left between create and unlink removed:
    only entries that are empty regular files of this user named like a marker. OSError when it is not such a
    folder."""
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        uid = os.getuid()
        if os.fstat(fd).st_uid != uid:
            raise OSError(errno.EPERM, "the folder belongs to another user")
        for name in os.listdir(fd):
            found = _MARKER.fullmatch(name)
            if found is None or _alive(found.group(1)):
                continue
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == uid:
                    unlink_at(fd, name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove_dead_folders(root: Path) -> None:
    """The marker folders in the vault of processes that died without stopping their watcher, removed with
    ``rmdir`` only: it removes nothing but an empty folder (git never checks one out), never follows a link."""
    with contextlib.suppress(OSError), os.scandir(root) as found:
        for entry in found:
            if entry.name.startswith(LIVE_PREFIX):
                pid = entry.name[len(LIVE_PREFIX):].split("-", 1)[0]
                if not _alive(pid):
                    with contextlib.suppress(OSError, UnsafePath):
                        remove_dir(Path(entry.path))


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _events_lost_type() -> Any:
    from watchdog import events as ev

    return getattr(ev, "EventsLostEvent", None)


def _event_filter() -> list[Any]:
    from watchdog import events as ev

    return [getattr(ev, name) for name in (
        "FileCreatedEvent", "FileDeletedEvent", "FileModifiedEvent", "FileMovedEvent", "FileClosedEvent",
        "DirCreatedEvent", "DirDeletedEvent", "DirMovedEvent", "EventsLostEvent") if hasattr(ev, name)]


def _watch_error(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        limit = "?"
        with contextlib.suppress(OSError):
            limit = Path("/proc/sys/fs/inotify/max_user_watches").read_text().strip()
        return (f"the inotify watch limit is reached (fs.inotify.max_user_watches = {limit}); raise it with "
                "sysctl to let memvault watch the vault")
    if exc.errno == errno.EMFILE:
        return "too many inotify instances (fs.inotify.max_user_instances)"
    return f"cannot watch the vault ({exc.strerror or exc})"


def _handler(feed: ChangeFeed) -> Any:
    """A watchdog ``FileSystemEventHandler`` that hands each event's paths to ``feed`` (lost events included)."""
    from watchdog.events import FileSystemEventHandler

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: Any) -> None:
            paths = [os.fsdecode(event.src_path)]
            if getattr(event, "dest_path", ""):
                paths.append(os.fsdecode(event.dest_path))
            feed.mark(event.event_type, bool(event.is_directory), *paths)

    return Handler()


class _WatchLimitLog(logging.Handler):
    """watchdog says a subdirectory could not be watched (the inotify watch limit, a directory created after the
    start) only in its log, with the ``OSError``; this handler on the ``watchdog`` logger hears it and tells the
    feed watching that directory to stop trusting itself. (Its public API has no other channel for it; the periodic
    check covers the case where the log is silenced.)"""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._feeds: set[ChangeFeed] = set()
        self._guard = threading.Lock()

    def attach(self, feed: ChangeFeed) -> None:
        with self._guard:
            if not self._feeds:
                logging.getLogger("watchdog").addHandler(self)
            self._feeds.add(feed)

    def detach(self, feed: ChangeFeed) -> None:
        with self._guard:
            self._feeds.discard(feed)
            if not self._feeds:
                logging.getLogger("watchdog").removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        exc = next((a for a in args if isinstance(a, OSError)), None)
        if exc is None or exc.errno not in (errno.ENOSPC, errno.EMFILE, errno.ENOMEM):
            return  # a directory that vanished while it was being watched is no loss: its events came
        paths = [os.fsdecode(a) for a in args if isinstance(a, (str, bytes))]
        with self._guard:
            feeds = list(self._feeds)
        for feed in feeds:
            if not paths or any(p == str(feed.root) or relative(feed.root, p) is not None for p in paths):
                feed.degrade(_watch_error(exc))


_WATCH_LOG = _WatchLimitLog()


def feed_states(state_dir: Path) -> list[dict[str, Any]]:
    """The watcher state of every live process that follows the vault whose state directory is ``state_dir``."""
    out = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(state_dir / FEEDS_DIR), key=lambda e: e.name):
            if not entry.name.endswith(".json") or not _alive(entry.name.split("-", 1)[0]):
                continue
            with contextlib.suppress(OSError, ValueError):
                with open(entry.path, "rb") as f:
                    state = json.loads(f.read(65536))
                if isinstance(state, dict):
                    out.append(state)
    return out


def follow(index: Any, root: Path, state_dir: Path, *, listener: Listener | None = None,
           reason: str | None = None, log: Log | None = None) -> ChangeFeed:
    """The feed ``index`` consults (:attr:`memvault.index.Index.changes`), started now if it has none (``reason``:
    why it must not be, then it is not). A ``listener`` replaces the feed's."""
    feed = index.changes
    if feed is None:
        feed = index.changes = ChangeFeed(root, state_dir, listener=listener, log=log)
        if reason is not None:
            feed.reason = reason
        else:
            feed.start()
    else:
        if listener is not None:
            feed.listener = listener
        if log is not None:
            feed.log = log
    return feed
