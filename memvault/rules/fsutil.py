"""Atomic writes, advisory locks and safe paths: the primitives every writer in memvault goes through.

No memvault operation renames, moves, truncates or writes *through* a symlink, in the vault or in ``.memvault``,
whoever committed it: a folder on the way to a write must be a real folder (:func:`ensure_dir`), a file memvault
replaces or appends to must not be a link (:func:`open_private` opens with ``O_NOFOLLOW``), and a lock file is
never created at whatever a link points to. Paths here are below the vault's resolved root, so a symlink anywhere
on the way shows as a difference between the path and its ``realpath``.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _link_on_the_way(path: Path) -> str | None:
    """The first component of ``path`` that is a symlink, or None (only components that exist are looked at)."""
    absolute = os.path.abspath(path)
    if os.path.realpath(absolute) == absolute:
        return None
    current = absolute
    chain = []
    while current != os.path.dirname(current):
        chain.append(current)
        current = os.path.dirname(current)
    for candidate in reversed(chain):  # from the top down: name the outermost link
        if os.path.islink(candidate):
            return candidate
    return absolute  # pragma: no cover - realpath differed for another reason (a race)


def check_dir(path: Path) -> None:
    """Raise :class:`~memvault.rules.errors.UnsafePath` when ``path`` or a folder above it is a symlink, or
    ``path`` exists and is not a folder."""
    from .errors import UnsafePath

    link = _link_on_the_way(path)
    if link is not None:
        raise UnsafePath(link, f"a symlink (to {os.path.realpath(link)}): memvault does not write through "
                               "symlinks; replace it with a real folder")
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise UnsafePath(path, "not a folder: memvault does not write here")


def check_private_dir(path: Path, why: str) -> None:
    """``path`` (``.memvault``) must be a real folder, or not exist yet: a symlink or a file there is refused with
    one line (``why`` says what the folder is for and how to fix it), never followed."""
    from .errors import UnsafePath

    if path.is_symlink():
        raise UnsafePath(path, f"a symlink (to {os.readlink(path)}): {why}; remove the link and run memvault again")
    if path.exists() and not path.is_dir():
        raise UnsafePath(path, f"not a folder: {why}; move this file away and run memvault again")


def ensure_dir(path: Path) -> Path:
    """``path`` as a real folder (created with its parents), with no symlink on the way (see :func:`check_dir`)."""
    check_dir(path)
    path.mkdir(parents=True, exist_ok=True)
    check_dir(path)  # a link put in place meanwhile is refused, not followed further
    return path


def refuse_link(path: Path, what: str = "memvault does not write through or over symlinks") -> None:
    """Raise UnsafePath when ``path`` itself is a symlink."""
    from .errors import UnsafePath

    if os.path.islink(path):
        raise UnsafePath(path, f"a symlink (to {os.readlink(path)}): {what}; remove it")


def open_private(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a file memvault writes (a lock, a log, an episode file) that never follows a symlink: the
    folders on the way are checked and the file itself is opened with ``O_NOFOLLOW``; a link is UnsafePath."""
    from .errors import UnsafePath

    ensure_dir(path.parent)
    try:
        return os.open(path, flags | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):
            raise UnsafePath(path, f"a symlink (to {os.readlink(path)}): memvault does not write through "
                                   "symlinks; remove it") from None
        raise


def drop_links(paths: list[Path]) -> list[Path]:
    """Remove those of ``paths`` that are symlinks (the link, never what it points at); the ones removed."""
    dropped = []
    for path in paths:
        if os.path.islink(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            dropped.append(path)
    return dropped


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` so readers see the old bytes or the new ones, never a mix.

    Writes a temp file in the same directory, fsyncs it, renames it over the target and fsyncs the directory.
    A crash at any point leaves either the old file or the new one. The mode of an existing file is kept. A
    symlink at ``path`` or on the way to it is refused (UnsafePath): it is neither followed nor replaced.
    """
    ensure_dir(path.parent)
    refuse_link(path)
    if mode is None:
        try:
            mode = os.lstat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


@contextlib.contextmanager
def locked(lock_path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an flock on ``lock_path`` (created if needed, never through a symlink) for the duration of the block.

    The lock lives on a separate file, never on the data file, so a writer that replaces the data file by
    rename (prune, set) does not strand a waiter on the old inode.
    """
    fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def try_lock(lock_path: Path, *, wait: bool = False) -> Iterator[bool]:
    """Take the exclusive flock on ``lock_path`` if it is free (or wait for it with ``wait``); yields whether
    this process holds it. The one way memvault claims a lock that another process may hold."""
    fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def lock_held(lock_path: Path) -> bool:
    """Whether another process holds the exclusive flock on ``lock_path`` right now: the one lock probe (a shared,
    non-blocking try; the file is never created, and a symlink is never followed)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def read_inside(path: Path, base: Path, *, limit: int | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file inside ``base`` once every symlink is resolved.

    A symlink that leaves ``base`` (``procedures/leak.sh -> /etc/passwd``, ``facts/x.md -> ../.git/config``) or a
    file that is not regular (a FIFO would block the reader forever, a device never ends) raises
    :class:`~memvault.rules.errors.UnsafePath`: it is reported and skipped, never followed and never fatal.
    ``limit`` refuses files larger than that many bytes the same way (raises LimitExceeded).
    """
    from .errors import LimitExceeded, UnsafePath

    resolved = os.path.realpath(path)
    base_resolved = os.path.realpath(base)
    if resolved != base_resolved and not resolved.startswith(base_resolved + os.sep):
        kind = "a symlink" if os.path.islink(path) else "a path"
        raise UnsafePath(path, f"{kind} that leads outside {base.name}/ (to {resolved}): not followed")
    fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(path, "not a regular file: not read")
        if limit is not None and st.st_size > limit:
            raise LimitExceeded(str(path), f"{st.st_size} bytes, more than the {limit} allowed ([limits]): not read")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def walk(base: Path, report: Callable[[Path, str], None],
         on_dir: Callable[[str], None] | None = None) -> Iterator[os.DirEntry[str]]:
    """Every entry under ``base`` that is not a folder (a file, a link, anything else), at any depth: the one
    directory walk of the stores and the index. Names starting with a dot are skipped (git's and editors' files),
    folders are entered only when they are real folders (a symlinked folder is yielded as an entry, for
    :func:`entry_problem` to report), and a folder that cannot be read is passed to ``report`` (its files are
    not seen, and the caller says so) instead of vanishing silently. ``on_dir`` is told each folder walked."""
    if not os.path.isdir(base):
        return
    stack = [str(base)]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as found:
                entries = list(found)
        except FileNotFoundError:
            continue  # removed while we walked
        except OSError as exc:
            report(Path(current), f"cannot read this folder ({exc.strerror or exc}): its files are skipped")
            continue
        if on_dir is not None:
            on_dir(current)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            else:
                yield entry


def entry_problem(entry: os.DirEntry[str], base: str) -> str | None:
    """Why a directory entry met while walking a vault area must be skipped, or None when it is a plain file
    (or a symlink to one inside ``base``). Costs no system call for an ordinary file."""
    if entry.is_symlink():
        target = os.path.realpath(entry.path)
        if target != base and not target.startswith(base + os.sep):
            return f"a symlink that leads outside the vault area (to {target}): not followed"
        if not os.path.isfile(target):
            return "a symlink to something that is not a regular file: not followed"
        return None
    if not entry.is_file(follow_symlinks=False):
        return "not a regular file: not read"
    return None


class FileChange:
    """One file as it was and as it is to be (``None``: absent). Stores plan changes; the write gate applies them
    all, commits them, and puts every ``before`` back when the commit is refused."""

    __slots__ = ("path", "before", "after")

    def __init__(self, path: Path, before: bytes | None, after: bytes | None) -> None:
        self.path = path
        self.before = before
        self.after = after

    def __repr__(self) -> str:
        state = "create" if self.before is None else ("delete" if self.after is None else "change")
        return f"FileChange({state} {self.path})"

    @property
    def changed(self) -> bool:
        return self.before != self.after
