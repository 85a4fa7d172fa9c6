"""The one door to the file system: every write, append, rename, delete, mkdir and sweep memvault does.

Nothing here follows a symbolic link, whoever put it there (a person, a plain ``git pull`` of someone's commit, a
process racing us). A path is walked from ``/`` one folder at a time, each opened with ``O_DIRECTORY |
O_NOFOLLOW`` relative to the one before (``dir_fd``); the final name is then acted on relative to the last folder's
descriptor (``os.open(..., O_NOFOLLOW, dir_fd=)``, ``os.replace(src_dir_fd=, dst_dir_fd=)``, ``os.unlink(dir_fd=)``)
and checked with ``fstat`` on the handle that is then used. A link swapped in between a check and the use has
nothing to redirect: no path is looked up twice. A symlink met on the way is
:class:`~memvault.rules.errors.UnsafePath`, named in one line.

Paths given here are absolute and already resolved by the caller (the vault's root, the state folder); a link
above them that the user made on purpose (``/home -> /usr/home``) is resolved once by whoever names the root, never
here. Paths the user names for output (``export --output``) go through :func:`open_output`, which resolves the
folder the user named and then never follows a link at the final name. SQLite cannot be given ``O_NOFOLLOW``:
:func:`sqlite_path` checks its files the same way just before it connects.

Code outside this module does not open a path for writing (tests/test_door.py reads every module to hold that).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

# The read side lives in fsread; its names are imported from here too (entry_problem, read_inside, read_regular, walk).
from .fsread import (entry_problem, inside_base, link_refusal, open_regular, read_inside,  # noqa: F401
                     read_inside_stat, read_regular, unsafe, walk)
from .lockwait import flock_within, lock_wait  # noqa: F401

TYPE_CHECKING = False  # not typing's: a hook that logs one line does not import typing
if TYPE_CHECKING:
    from typing import IO, Any

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# A folder on the way is only passed through: O_PATH needs no read permission (a 0711 home) where it exists.
_WALK = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | NOFOLLOW | CLOEXEC
_LIST = os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW | CLOEXEC
_SQLITE_FILES = ("", "-wal", "-shm", "-journal")


def _readlink_at(dfd: int, name: str) -> str:
    try:
        return os.readlink(name, dir_fd=dfd)
    except OSError:
        return "?"


def _lstat_at(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _split(path: Path | str) -> tuple[str, list[str]]:
    absolute = os.path.abspath(path)  # lexical: with no link on the way, ".." means what it says
    return absolute, [part for part in absolute.split(os.sep) if part]


def _step(fd: int, name: str, walked: str, *, create: bool, mode: int) -> int:
    """The folder ``name`` inside the folder open as ``fd``, opened without following a link (made first when
    ``create``). A link or a file there is refused; a missing one is FileNotFoundError."""
    for attempt in range(2):
        try:
            return os.open(name, _WALK, dir_fd=fd)
        except FileNotFoundError:
            if not create or attempt:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            st = _lstat_at(fd, name)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise link_refusal(walked, _readlink_at(fd, name), "memvault does not write through symlinks",
                                   "replace it with a real folder") from None
            raise unsafe(walked, "not a folder: memvault does not write here") from None
    raise AssertionError("unreachable")  # pragma: no cover


def open_dir(path: Path | str, *, create: bool = False, mode: int = 0o777) -> int:
    """A descriptor of the folder ``path``, reached from ``/`` without following any link (each missing folder made
    with ``mode`` when ``create``). The caller closes it. A link on the way is UnsafePath; a missing folder
    (``create`` off) is FileNotFoundError. The descriptor serves as ``dir_fd`` (on Linux it is an ``O_PATH``
    handle: it cannot be read or fsynced; :func:`listing_dir` opens one that can)."""
    absolute, parts = _split(path)
    fd = os.open("/", _WALK)
    walked = "/"
    try:
        for name in parts:
            walked = os.path.join(walked, name)
            following = _step(fd, name, walked, create=create, mode=mode)
            os.close(fd)
            fd = following
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def dir_handle(path: Path | str, *, create: bool = False, mode: int = 0o777) -> Iterator[int]:
    """:func:`open_dir` as a context: the descriptor is closed at the end of the block."""
    fd = open_dir(path, create=create, mode=mode)
    try:
        yield fd
    finally:
        os.close(fd)


def _parent(path: Path | str) -> tuple[str, str]:
    absolute, _ = _split(path)
    parent, name = os.path.split(absolute)
    if not name:
        raise unsafe(path, "the root folder: memvault does not write here")
    return parent, name


# ------------------------------------------------------------------------------------------------ checks
def check_dir(path: Path | str) -> None:
    """Raise UnsafePath when ``path`` or a folder above it is a symlink, or ``path`` exists and is not a folder
    (a check with a clear message before a long operation; the writes themselves go through the door anyway)."""
    try:
        os.close(open_dir(path))
    except FileNotFoundError:
        pass  # the part that exists has no link; the rest is made by the door when it is written


def check_private_dir(path: Path, why: str) -> None:
    """``path`` (local state) must be a real folder, or not exist yet: a symlink or a file there is refused with
    one line (``why`` says what the folder is for and how to fix it), never followed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise unsafe(path, f"a symlink (to {os.readlink(path)}): {why}; remove the link and run memvault again")
    if not stat.S_ISDIR(st.st_mode):
        raise unsafe(path, f"not a folder: {why}; move this file away and run memvault again")


def refuse_link(path: Path | str, what: str = "memvault does not write through or over symlinks") -> None:
    """Raise UnsafePath when ``path`` itself is a symlink."""
    if os.path.islink(path):
        raise link_refusal(path, os.readlink(path), what)


def ensure_dir(path: Path, mode: int = 0o777) -> Path:
    """``path`` as a real folder (made with its parents, ``mode`` for each one made), no link on the way."""
    os.close(open_dir(path, create=True, mode=mode))
    return path


make_dir = ensure_dir


# ------------------------------------------------------------------------------------------------ opening
def _open_final(dfd: int, name: str, path: Path | str, flags: int, mode: int) -> int:
    """``name`` in the folder ``dfd``, opened with ``flags`` and never through a link; a FIFO, a device or a folder
    there is refused (checked on the handle: a FIFO opened for writing would block until a reader came)."""
    try:
        fd = os.open(name, flags | NOFOLLOW | CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dfd)
    except OSError as exc:
        st = _lstat_at(dfd, name) if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO) else None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise link_refusal(path, _readlink_at(dfd, name)) from None
        if st is not None:
            raise unsafe(path, "not a regular file: memvault does not write here") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise unsafe(path, "not a regular file: memvault does not write here")
    if not flags & os.O_NONBLOCK:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def open_private(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a file memvault writes (a lock, a log, a marker) that never follows a symlink: the folders on
    the way are walked with ``dir_fd`` (made when missing), the file is opened with ``O_NOFOLLOW`` and must be a
    regular file. The caller closes the descriptor."""
    parent, name = _parent(path)
    with dir_handle(parent, create=True) as dfd:
        return _open_final(dfd, name, path, flags, mode)


def open_at(dfd: int, name: str, flags: int, mode: int = 0o600) -> int:
    """:func:`open_private` of ``name`` inside a folder the caller holds open (the warm process's private folder)."""
    return _open_final(dfd, name, name, flags, mode)


def append(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Append ``data`` to ``path`` (made with ``mode`` when missing), never through a link: a log line."""
    fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def write_new_exclusive(path: Path, data: bytes = b"", *, mode: int = 0o600) -> None:
    """Create ``path`` holding ``data``, mode ``mode``; FileExistsError when anything (a link included) is already
    there."""
    parent, name = _parent(path)
    with dir_handle(parent, create=True) as dfd:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, mode, dir_fd=dfd)
        try:
            os.fchmod(fd, mode)  # exactly ``mode`` (a hook's 0755), whatever the umask
            _write_all(fd, data)
        finally:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _tmp_name(name: str) -> str:
    return f".{name[:200]}.{os.urandom(4).hex()}.tmp"


#: Exactly the names :func:`_tmp_name` gives (``.NAME.xxxxxxxx.tmp``: NAME 1-200 characters, 8 lower-case hex
#: digits): the only names :func:`remove_stale_temp` removes.
_TMP_NAME = re.compile(r"\.(?s:.{1,200})\.[0-9a-f]{8}\.tmp")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is one memvault's atomic writes give their temp file."""
    return _TMP_NAME.fullmatch(name) is not None


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fsync_at(dfd: int) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(".", _LIST, dir_fd=dfd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename in it) to disk; silent where a folder cannot be flushed."""
    with contextlib.suppress(OSError), dir_handle(path) as dfd:
        _fsync_at(dfd)


@contextlib.contextmanager
def _replacing(dfd: int, name: str, mode: int) -> Iterator[int]:
    """A temp file beside ``name`` in the folder ``dfd``, 0600 while it is written, yielded as its descriptor (the
    caller does not close it). When the block ends without an error it is fsynced, made ``mode`` (on the handle, not
    the name) and renamed over ``name``, and the folder is fsynced; otherwise it is removed: nothing half-written is
    ever under the name."""
    tmp = _tmp_name(name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600, dir_fd=dfd)
    try:
        try:
            yield fd
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    _fsync_at(dfd)


def _write_replacing(dfd: int, name: str, path: Path | str, write: Callable[[int], None], mode: int | None) -> None:
    """Write a temp file in the folder ``dfd`` with ``write(fd)``, fsync it and rename it over ``name``."""
    st = _lstat_at(dfd, name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise link_refusal(path, _readlink_at(dfd, name), "memvault does not write through or over symlinks")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise unsafe(path, "not a regular file: memvault does not replace it")
    if mode is None:
        mode = st.st_mode & 0o7777 if st is not None else 0o644 & ~_umask()
    with _replacing(dfd, name, mode) as fd:
        write(fd)


def atomic_write(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` so readers see the old bytes or the new ones, never a mix.

    Writes a temp file in the same folder (reached through ``dir_fd``), fsyncs it, renames it over the target and
    fsyncs the folder: a crash at any point leaves either the old file or the new one. The mode of an existing file
    is kept unless ``mode`` is given. A symlink at ``path`` or on the way to it is refused (UnsafePath): it is
    neither followed nor replaced.
    """
    parent, name = _parent(path)
    with dir_handle(parent, create=True) as dfd:
        _write_replacing(dfd, name, path, lambda fd: _write_all(fd, data), mode)


def atomic_write_chunks(path: Path, chunks: Iterable[bytes], *, mode: int | None = None) -> None:
    """:func:`atomic_write` of the bytes ``chunks`` yields, one after the other: a large file is never held whole.
    Should ``chunks`` raise, nothing is written."""
    parent, name = _parent(path)

    def write(fd: int) -> None:
        for chunk in chunks:
            _write_all(fd, chunk)

    with dir_handle(parent, create=True) as dfd:
        _write_replacing(dfd, name, path, write, mode)


#: The piece :func:`copy_file` and :func:`read_pieces` read at a time.
PIECE = 1 << 20


def read_pieces(path: Path) -> Iterator[bytes]:
    """The bytes of the regular file ``path`` (a link there is refused), :data:`PIECE` at a time."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        while piece := f.read(PIECE):
            yield piece


def _user_named(target: Path, what: str) -> tuple[Path, str]:
    """The folder of a path the user named for output, resolved (the links on the way are theirs), and its final
    name, which the caller never follows. UnsafePath when the folder does not exist or the name is no ``what``."""
    try:
        parent = Path(os.path.dirname(os.path.abspath(target))).resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise unsafe(target, "its folder does not exist") from None
    if target.name in ("", ".", ".."):
        raise unsafe(target, f"not a {what} name")
    return parent, target.name


@contextlib.contextmanager
def open_output(path: Path | str, *, mode: int = 0o600, text: bool = True) -> Iterator[IO[Any]]:
    """A file the user named (``export --output``): the folder they named is resolved (its links are theirs),
    then the final name is never followed: a symlink there is refused. The data goes to a temp file made
    ``mode`` (0600: an export may hold what the vault holds) and appears under the name only when the block ends
    without an error; nothing half-written is left."""
    target = Path(path)
    parent, name = _user_named(target, "file")
    with dir_handle(parent) as dfd:
        st = _lstat_at(dfd, name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise link_refusal(target, _readlink_at(dfd, name), "memvault does not write through a link at "
                                                                  "the name given", "name another file")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise unsafe(target, "not a regular file: memvault does not write here")
        with _replacing(dfd, name, mode) as fd:
            handle = os.fdopen(fd, "w", encoding="utf-8", closefd=False) if text else os.fdopen(fd, "wb", closefd=False)
            with handle:
                yield handle  # flushed as this block ends, before _replacing fsyncs the temp file


def output_folder(path: Path | str, *, mode: int = 0o700) -> Path:
    """A folder the user named for output (``export --format markdown --output``), made ``mode`` (0700): the
    folder above it is resolved (its links are the user's), a link at the name itself is refused, and the path
    returned has no link on the way, so every write below it goes through the door unchanged."""
    target = Path(path)
    parent, _ = _user_named(target, "folder")
    with dir_handle(parent) as dfd:
        st = _lstat_at(dfd, target.name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise link_refusal(target, _readlink_at(dfd, target.name), "memvault does not write through a link "
                                                                         "at the name given", "name another folder")
    return ensure_dir(parent / target.name, mode=mode)


# ------------------------------------------------------------------------------------------------ renaming
def replace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` (replacing what is there): both names are reached through their folders'
    descriptors; a link at either name is moved or replaced as a link, never followed."""
    sparent, sname = _parent(src)
    dparent, dname = _parent(dst)
    with dir_handle(sparent) as sfd, dir_handle(dparent, create=True) as dfd:
        os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        _fsync_at(dfd)


def rename(src: Path, dst: Path) -> None:
    """:func:`replace`, refused (FileExistsError) when something is already at ``dst``."""
    sparent, sname = _parent(src)
    dparent, dname = _parent(dst)
    with dir_handle(sparent) as sfd, dir_handle(dparent, create=True) as dfd:
        if _lstat_at(dfd, dname) is not None:
            raise FileExistsError(errno.EEXIST, "already exists", str(dst))
        os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        _fsync_at(dfd)


def replace_with_link(path: Path, target: str) -> None:
    """Make ``path`` a symlink holding ``target`` (a name beside it: the index's current generation), swapped in
    atomically. The link is made, never followed."""
    parent, name = _parent(path)
    with dir_handle(parent, create=True) as dfd:
        tmp = _tmp_name(name)
        os.symlink(target, tmp, dir_fd=dfd)
        try:
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        _fsync_at(dfd)


def replace_at(dfd: int, src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` inside a folder the caller holds open."""
    os.replace(src, dst, src_dir_fd=dfd, dst_dir_fd=dfd)


# ------------------------------------------------------------------------------------------------ removing
def remove(path: Path, *, missing_ok: bool = True) -> bool:
    """Remove the file (or link: the link, never what it points at) at ``path``; whether something was removed.
    A folder there is refused."""
    parent, name = _parent(path)
    try:
        with dir_handle(parent) as dfd:
            return unlink_at(dfd, name, missing_ok=missing_ok, path=path)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise


def unlink_at(dfd: int, name: str, *, missing_ok: bool = True, path: Path | str | None = None) -> bool:
    """:func:`remove` of ``name`` inside a folder the caller holds open."""
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    except IsADirectoryError:
        raise unsafe(path or name, "a folder: memvault does not remove it here") from None
    return True


def remove_stale_temp(path: Path, older_than: float) -> float | None:
    """Remove ``path`` if it is a temp file an atomic write of memvault left behind (a writer killed between
    writing and renaming it): its name exactly as :func:`_tmp_name` makes them, a regular file (a link of that name
    is left, and never followed), unchanged for more than ``older_than`` seconds (a live write renames its temp file
    within moments). Its age in seconds when removed, else None (also when it is gone, or a link is on the way)."""
    from .errors import UnsafePath

    parent, name = _parent(path)
    if not is_temp_name(name):
        return None
    try:
        with dir_handle(parent) as dfd:
            st = _lstat_at(dfd, name)
            if st is None or not stat.S_ISREG(st.st_mode):
                return None
            age = time.time() - st.st_mtime
            if age <= older_than:
                return None
            # Swapped for a link after the lstat, the link is what goes: unlink never follows one.
            return age if unlink_at(dfd, name, path=path) else None
    except FileNotFoundError:
        return None
    except UnsafePath:  # a link on the way: nothing past it is memvault's to remove
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # the same, told by the system
            return None
        raise


def remove_dir(path: Path) -> bool:
    """Remove the empty folder ``path`` (a link there is not a folder and stays); whether it was removed. A folder
    that is not empty, or is gone, is left as it is."""
    parent, name = _parent(path)
    try:
        with dir_handle(parent) as dfd:
            st = _lstat_at(dfd, name)
            if st is None or not stat.S_ISDIR(st.st_mode):
                return False
            os.rmdir(name, dir_fd=dfd)
            return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.EBUSY):
            return False
        raise


def _clear(fd: int) -> None:
    """Remove everything inside the folder open (readable) as ``fd``: links and files are unlinked, folders are
    entered through their own descriptors, never through a link."""
    with os.scandir(fd) as found:
        entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in found]
    for name, is_dir in entries:
        if is_dir:
            try:
                child = os.open(name, _LIST, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link or a file meanwhile
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)
                    continue
                if exc.errno == errno.ENOENT:
                    continue
                raise
            try:
                _clear(child)
            finally:
                os.close(child)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(name, dir_fd=fd)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)


def remove_tree(path: Path) -> bool:
    """Remove ``path`` and everything under it without following any link (a link inside is removed as a link;
    what it points at is untouched); whether something was there."""
    parent, name = _parent(path)
    try:
        with dir_handle(parent) as dfd:
            st = _lstat_at(dfd, name)
            if st is None:
                return False
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=dfd)
                return True
            fd = os.open(name, _LIST, dir_fd=dfd)
            try:
                _clear(fd)
            finally:
                os.close(fd)
            os.rmdir(name, dir_fd=dfd)
            return True
    except FileNotFoundError:
        return False


def sweep(folder: Path, keep: Callable[[str], bool]) -> list[str]:
    """Remove each file or link directly in ``folder`` whose name ``keep`` refuses (stale markers): the folder is
    reached without following a link (a link there is UnsafePath: nothing it points at is listed or removed);
    subfolders are left alone. The names removed."""
    removed = []
    try:
        with dir_handle(folder) as dfd:
            fd = os.open(".", _LIST, dir_fd=dfd)
            try:
                with os.scandir(fd) as found:
                    names = [entry.name for entry in found if not entry.is_dir(follow_symlinks=False)]
                for name in names:
                    if not keep(name) and unlink_at(fd, name):
                        removed.append(name)
            finally:
                os.close(fd)
    except FileNotFoundError:
        pass
    return removed


def drop_links(paths: list[Path]) -> list[Path]:
    """Remove those of ``paths`` that are symlinks (the link, never what it points at); the ones removed."""
    dropped = []
    for path in paths:
        parent, name = _parent(path)
        try:
            with dir_handle(parent) as dfd:
                st = _lstat_at(dfd, name)
                if st is not None and stat.S_ISLNK(st.st_mode):
                    unlink_at(dfd, name)
                    dropped.append(path)
        except FileNotFoundError:
            continue
    return dropped


# ------------------------------------------------------------------------------------------------ copying
def copy_file(src: Path, dst: Path, *, mode: int | None = None) -> None:
    """Copy the regular file ``src`` (a link there is refused) to ``dst`` through :func:`atomic_write`; the
    source's mode unless ``mode`` is given."""
    fd = open_regular(src)
    with os.fdopen(fd, "rb") as f:
        src_mode = os.fstat(fd).st_mode & 0o777
        atomic_write_chunks(dst, iter(lambda: f.read(PIECE), b""), mode=src_mode if mode is None else mode)


def copy_tree(src: Path, dst: Path, *, skip: frozenset[str] = frozenset()) -> None:
    """Copy the folder ``src`` to the new folder ``dst``: folders and regular files only (a link in the source is
    refused, never copied or followed); names in ``skip`` are left out at every depth."""
    ensure_dir(dst)
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        if entry.name in skip:
            continue
        if entry.is_symlink():
            raise link_refusal(entry.path, os.readlink(entry.path), "memvault does not copy links")
        if entry.is_dir(follow_symlinks=False):
            copy_tree(Path(entry.path), dst / entry.name, skip=skip)
        else:
            copy_file(Path(entry.path), dst / entry.name)


# ------------------------------------------------------------------------------------------------ temporary
def make_temp_dir(prefix: str, inside: Path | None = None) -> Path:
    """A new private folder (0700) in the system's temporary folder (or in ``inside``, made 0700 without a link on
    the way when missing), resolved (the door walks it without links); the caller removes it with
    :func:`remove_tree`."""
    import tempfile

    if inside is not None:
        ensure_dir(inside, mode=0o700)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=inside)).resolve()


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    """:func:`make_temp_dir` for the duration of the block, removed with everything in it at the end."""
    path = make_temp_dir(prefix)
    try:
        yield path
    finally:
        remove_tree(path)


def temp_file(prefix: str, suffix: str = "") -> Path:
    """A new empty private file (0600) in the system's temporary folder, resolved; the caller removes it."""
    import tempfile

    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    os.close(fd)
    return Path(name).resolve()


# ------------------------------------------------------------------------------------------------ SQLite
def sqlite_path(path: Path, *, create: bool = True) -> Path:
    """``path`` checked for ``sqlite3.connect``, which cannot be given ``O_NOFOLLOW``: the folders on the way are
    real (made when missing), and the database and its ``-wal``/``-shm``/``-journal`` files are regular files or
    absent, never links (UnsafePath). A missing database is created here (with ``create``), 0600 and without
    following a link, so SQLite only opens an existing file. What remains is the window between this check and SQLite's open, inside a
    folder only this user writes."""
    parent, name = _parent(path)
    with dir_handle(parent, create=True) as dfd:
        for suffix in _SQLITE_FILES:
            st = _lstat_at(dfd, name + suffix)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise link_refusal(f"{path}{suffix}", _readlink_at(dfd, name + suffix),
                                   "memvault does not open a database through a symlink")
            if st is not None and not stat.S_ISREG(st.st_mode):
                raise unsafe(f"{path}{suffix}", "not a regular file: memvault does not open it as a database")
        with contextlib.suppress(FileExistsError):
            create and os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, 0o600,
                                        dir_fd=dfd))
    return path


# ------------------------------------------------------------------------------------------------ locks
@contextlib.contextmanager
def locked(lock_path: Path, *, shared: bool = False, wait: float | None = None) -> Iterator[None]:
    """Hold an flock on ``lock_path`` (created if needed, never through a symlink) for the duration of the block.

    The lock lives on a separate file, never on the data file, so a writer that replaces the data file by
    rename (prune, set) does not strand a waiter on the old inode. With ``wait`` (seconds; :func:`lock_wait` for
    the vault's locks) a lock still held by another process after that long is
    :class:`~memvault.rules.errors.LockTimeout` naming it, instead of a wait for ever behind a stuck holder.
    """
    fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        operation = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        if wait is None:
            fcntl.flock(fd, operation)
        else:
            flock_within(fd, operation, wait, lock_path.name)
        yield
    finally:
        os.close(fd)  # closing releases the lock (and, once its waiter is done, one a timed-out wait left)


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
    non-blocking try; the file is never created, and no symlink is followed on the way or at the name)."""
    from .errors import UnsafePath

    parent, name = _parent(lock_path)
    try:
        with dir_handle(parent) as dfd:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC, dir_fd=dfd)
    except (OSError, ValueError, UnsafePath):
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


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
