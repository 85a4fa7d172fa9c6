"""Reading files memvault did not write (import sources, the vault's files) without being led elsewhere: the read
side of :mod:`memvault.rules.fsutil` (which re-exports these names). A link is refused or checked against the
folder it must stay in, and only regular files are read (a FIFO would block the reader, a device never ends)."""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def unsafe(path: Path | str, reason: str) -> Exception:
    from .errors import UnsafePath

    return UnsafePath(path, reason)


def link_refusal(path: Path | str, target: str, what: str = "memvault does not write through symlinks",
                 fix: str = "remove it") -> Exception:
    return unsafe(path, f"a symlink (to {target}): {what}; {fix}")


def open_regular(path: Path | str, what: str = "memvault does not read through symlinks",
                 fix: str = "remove it") -> int:
    """A read-only descriptor of the regular file ``path``, never through a link at the name (UnsafePath)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            raise link_refusal(path, target, what, fix) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise unsafe(path, "not a regular file: not read")
    return fd


def read_regular(path: Path | str, *, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (an import source). A symlink at ``path`` is refused
    (UnsafePath, one line naming the file), as is anything that is not a regular file (a FIFO would block);
    ``limit`` refuses a larger file (LimitExceeded). The folders above are the caller's to resolve."""
    from .errors import LimitExceeded

    fd = open_regular(path, "not read (a repository can commit a link to anywhere)",
                      "name the file it points to if you mean that one")
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise LimitExceeded(str(path), f"{size} bytes, more than the {limit} allowed: not read")
        return _read_all(fd)
    finally:
        os.close(fd)


def read_regular_if_there(path: Path | str) -> bytes | None:
    """:func:`read_regular`, or None when there is no file at ``path``."""
    try:
        return read_regular(path)
    except FileNotFoundError:
        return None


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


class TooLong(int):
    """A line longer than the reader may hold (its length, its newline included): refused by the caller, never held
    whole. ``ended``: whether its newline came (False: the file ended first, as one still being written does)."""

    ended: bool = True


def bounded_lines(f: Any, limit: int) -> Iterator[Any]:
    """The lines of file ``f`` (binary or text), each read at most ``limit`` long: a longer one is skipped piece by
    piece and given as :class:`TooLong` (a 200 MB line took 4.3 GB before the size limit refused it)."""
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        end = b"\n" if isinstance(line, bytes) else "\n"
        if len(line) <= limit or line.endswith(end):
            yield line
            continue
        size = len(line)
        while True:
            more = f.readline(1 << 20)
            size += len(more)
            if not more or more.endswith(end):
                break
        too = TooLong(size)
        too.ended = bool(more)
        yield too


def read_inside(path: Path, base: Path, *, limit: int | None = None) -> bytes:
    """The bytes of ``path``, which must be a regular file inside ``base`` once every symlink is resolved.

    A symlink that leaves ``base`` (``procedures/leak.sh -> /etc/passwd``, ``facts/x.md -> ../.git/config``) or a
    file that is not regular (a FIFO would block the reader forever, a device never ends) raises
    :class:`~memvault.rules.errors.UnsafePath`: it is reported and skipped, never followed and never fatal.
    ``limit`` refuses files larger than that many bytes the same way (raises LimitExceeded).
    """
    return read_inside_stat(path, base, limit=limit)[0]


#: Where the kernel names each open descriptor (Linux); None where there is no such folder: every read resolves.
_KERNEL_NAMES: str | None = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else None


def inside_base(base: Path) -> str:
    """``base`` resolved, for :func:`read_inside_stat` to be given once for a whole listing of its files. A
    ``base`` that is itself a link raises UnsafePath (:data:`AREA_LINK`)."""
    if os.path.islink(base):
        raise unsafe(base, AREA_LINK)
    return os.path.realpath(base)


def read_inside_stat(path: Path, base: Path, *, limit: int | None = None,
                     base_real: str | None = None) -> tuple[bytes, os.stat_result]:
    """:func:`read_inside`, with the status of the file read (its ``fstat``). ``base_real``: ``base`` resolved
    (:func:`inside_base`), when the caller reads many files of one folder.

    The file is opened without following a link at its name, and the kernel's name of the open descriptor must lie
    inside ``base``: the handle that is read is checked, in one system call, where resolving the path costs one
    ``lstat`` per folder on the way (1.5 s of the 5.2 s of a listing of 20,000 facts). A link at the name, a name
    outside ``base`` (a folder on the way that is a link) or no ``/proc`` take the resolving path below, which
    reads a link that stays inside ``base`` and refuses the rest with the reason."""
    from .errors import LimitExceeded

    if base_real is None:
        base_real = inside_base(base)
    fd = _open_inside(path, base_real)
    if fd is None:
        resolved = os.path.realpath(path)
        if resolved != base_real and not resolved.startswith(base_real + os.sep):
            kind = "a symlink" if os.path.islink(path) else "a path"
            raise unsafe(path, f"{kind} that leads outside {base.name}/ (to {resolved}): not followed")
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise unsafe(path, "not a regular file: not read")
        if limit is not None and st.st_size > limit:
            raise LimitExceeded(str(path), f"{st.st_size} bytes, more than the {limit} allowed ([limits]): not read")
        return _read_all(fd), st
    finally:
        os.close(fd)


def _open_inside(path: Path | str, base_real: str) -> int | None:
    """A descriptor of ``path`` opened without following a link at its name, when the kernel names what it opened
    inside ``base_real``; None when that cannot be shown: the caller resolves the path, and refuses or fails as it
    always did (a link at the name, or a file it cannot open: one out of ``base`` is refused as such first)."""
    if _KERNEL_NAMES is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)
    except OSError:
        return None
    try:
        where = os.readlink(f"{_KERNEL_NAMES}/{fd}")
    except OSError:
        where = ""
    if where.startswith(base_real + os.sep):
        return fd
    os.close(fd)
    return None


#: Why a vault area (``facts/``, ``procedures/``, ``episodes/``, ``inbox/``) that is a link is not read.
AREA_LINK = "a symlink where a folder of the vault should be: not followed, none of its files is read"


def linked_folder(root: Path, rel: str) -> str | None:
    """The first folder on the way from ``root`` to the vault-relative ``rel`` that is a symlink (vault-relative),
    or None: ``lstat`` follows every link but the last, so a file under a linked folder looks like the vault's."""
    parts = rel.split("/")[:-1]
    for n in range(1, len(parts) + 1):
        folder = "/".join(parts[:n])
        if os.path.islink(root / folder):
            return folder
    return None


def walk(base: Path, report: Callable[[Path, str], None],
         on_dir: Callable[[str], None] | None = None) -> Iterator[os.DirEntry[str]]:
    """Every entry under ``base`` that is not a folder (a file, a link, anything else), at any depth: the one
    directory walk of the stores and the index. Names starting with a dot are skipped (git's and editors' files),
    folders are entered only when they are real folders (a symlinked folder is yielded as an entry, for
    :func:`entry_problem` to report), and a folder that cannot be read is passed to ``report`` (its files are
    not seen, and the caller says so) instead of vanishing silently. ``on_dir`` is told each folder walked."""
    if os.path.islink(base):  # a committed `facts -> ~/private` made this host's own files memories
        report(Path(base), AREA_LINK)
        return
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
            if not text_name(entry.name):  # no memory's name: and the index, git's paths and JSON want text
                report(Path(shown_name(entry.path)), "a name that is not UTF-8: skipped")
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            else:
                yield entry


def text_name(name: str) -> bool:
    """Whether a name (or path) from the file system is text: one that is not UTF-8 comes back with surrogates, and
    no memory has one (the index, git's paths and JSON want text)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_name(path: str) -> str:
    """``path`` as a message names it: a name that is not UTF-8 by its bytes (``\\xff``), never the surrogates it is
    read with, which no page, JSON document or log can encode."""
    return path if text_name(path) else os.fsencode(path).decode("utf-8", "backslashreplace")


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
