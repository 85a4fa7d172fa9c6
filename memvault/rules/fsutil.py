"""Atomic writes and advisory locks: the two primitives every writer in memvault goes through."""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` so readers see the old bytes or the new ones, never a mix.

    Writes a temp file in the same directory, fsyncs it, renames it over the target and fsyncs the directory.
    A crash at any point leaves either the old file or the new one. The mode of an existing file is kept.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
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
    """Hold an flock on ``lock_path`` (created if needed) for the duration of the block.

    The lock lives on a separate file, never on the data file, so a writer that replaces the data file by
    rename (prune, set) does not strand a waiter on the old inode.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


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
