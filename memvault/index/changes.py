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

**When the watcher cannot be trusted** — no inotify on this system, the vault on a network file system (a change
made on another host raises no event here), the inotify watch limit reached, the kernel's event queue overflowed,
a marker not seen in time — :meth:`~ChangeFeed.collect` returns None or asks for a full check, and the index
falls back to its directory check; a reason that lasts is said once.
"""
from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

Log = Callable[[str], None]
Listener = Callable[[str], None]


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
                 barrier_timeout: float = BARRIER_TIMEOUT) -> None:
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self.listener = listener
        self.barrier_timeout = barrier_timeout
        #: Why the watcher cannot be relied on, or None while it can.
        self.reason: str | None = None
        self.events = 0
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
        observer = InotifyObserver()
        fd = getattr(observer, "_inotify_fd", None)
        if fd is None or not all(hasattr(fd, name) for name in ("add_callback", "handle_event")):
            self._close_live()
            return self._fail("this watchdog version cannot report lost events")
        self._hook(fd)
        try:
            observer.schedule(_Handler(self), str(self.root), recursive=True, event_filter=_event_filter())
            observer.start()
        except OSError as exc:
            with contextlib.suppress(Exception):
                observer.stop()
            self._close_live()
            return self._fail(_watch_error(exc))
        self._observer = observer
        if self.reason is not None:  # a subdirectory could not be watched while the watches were added
            self.stop()
            return False
        return True

    def stop(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            with contextlib.suppress(Exception):
                observer.stop()
                observer.join(timeout=5)
        self._close_live()

    def _open_live(self) -> None:
        """Make (or, in the state directory, find) the marker folder and hold it open."""
        if self._live_fd is not None:
            return
        if self._own_live:
            _remove_dead_folders(self.root)
            os.mkdir(self._live, 0o700)  # a new folder, made here: nothing of anyone else's is ever swept
        else:
            with contextlib.suppress(FileExistsError):
                os.mkdir(self._live, 0o700)
        self._live_fd = _sweep(self._live)

    def _close_live(self) -> None:
        fd, self._live_fd = self._live_fd, None
        if fd is not None:
            os.close(fd)
        if self._own_live:
            with contextlib.suppress(OSError):
                os.rmdir(self._live)  # only ever an empty folder: each marker is removed as soon as it is made

    @property
    def running(self) -> bool:
        return self._observer is not None and self.reason is None

    def _fail(self, reason: str) -> bool:
        if self.reason is None:
            self.reason = reason
        return False

    def _hook(self, fd: Any) -> None:
        """Learn of what watchdog would otherwise only log, or swallow: an overflowed event queue (events lost:
        check everything) and a subdirectory that could not be watched (the watch limit: stop trusting it)."""
        add_callback, handle_event = fd.add_callback, fd.handle_event

        def checked_add_callback(*args: Any, **kwargs: Any) -> Any:
            try:
                return add_callback(*args, **kwargs)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.ENOMEM):  # a vanished directory is no loss: its events came
                    self._fail(_watch_error(exc))
                    with self._cond:
                        self._cond.notify_all()
                raise

        def checked_handle_event(event: Any) -> Any:
            if getattr(event, "is_queue_overflow", False):
                with self._cond:
                    self._marks.full = True
            return handle_event(event)

        fd.add_callback = checked_add_callback
        fd.handle_event = checked_handle_event

    # -- events (the observer's thread) -----------------------------------------------------------------------
    def mark(self, event_type: str, is_directory: bool, *paths: str) -> None:
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
        if not self.running:
            return None
        if barrier and not self._barrier():
            return None
        with self._cond:
            marks, self._marks = self._marks, Marks()
        if self.reason is not None:
            return None
        return marks

    def requeue(self, marks: Marks) -> None:
        """Put back marks whose sync failed: the next :meth:`collect` returns them again."""
        with self._cond:
            self._marks.files |= marks.files
            self._marks.dirs |= marks.dirs
            self._marks.full = self._marks.full or marks.full
            self._marks.config = self._marks.config or marks.config

    def _barrier(self) -> bool:
        """Create a marker and wait until the watcher has seen it (see the module doc)."""
        seq = next(self._seq)
        name = f"{self._token}{seq}"
        try:
            if self._live_fd is None:
                raise OSError(errno.EBADF, "the marker folder is not open")
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=self._live_fd))
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self._live_fd)
        except OSError as exc:
            self._fail(f"cannot write markers in {self._live} ({exc.strerror})")
            return False
        with self._cond:
            return self._cond.wait_for(lambda: self._seen >= seq or self.reason is not None,
                                       self.barrier_timeout) and self.reason is None


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
                    os.unlink(name, dir_fd=fd)
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
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _event_filter() -> list[Any]:
    from watchdog import events as ev

    return [getattr(ev, name) for name in (
        "FileCreatedEvent", "FileDeletedEvent", "FileModifiedEvent", "FileMovedEvent", "FileClosedEvent",
        "DirCreatedEvent", "DirDeletedEvent", "DirMovedEvent") if hasattr(ev, name)]


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


class _Handler:
    """The watchdog event handler: hands each event's paths to the feed."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed

    def dispatch(self, event: Any) -> None:
        paths = [os.fsdecode(event.src_path)]
        if getattr(event, "dest_path", ""):
            paths.append(os.fsdecode(event.dest_path))
        self.feed.mark(event.event_type, bool(event.is_directory), *paths)


def follow(index: Any, root: Path, state_dir: Path, *, listener: Listener | None = None,
           reason: str | None = None) -> ChangeFeed:
    """The feed ``index`` consults (:attr:`memvault.index.Index.changes`), started now if it has none (``reason``:
    why it must not be, then it is not). A ``listener`` replaces the feed's."""
    feed = index.changes
    if feed is None:
        feed = index.changes = ChangeFeed(root, state_dir, listener=listener)
        if reason is not None:
            feed.reason = reason
        else:
            feed.start()
    elif listener is not None:
        feed.listener = listener
    return feed
