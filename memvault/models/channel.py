"""The private channel to memvault's warm process: where its socket lives, whose it is, which install it serves.

Stdlib only and cheap to import: a git hook or an agent's session hook imports this (through
:mod:`memvault.interfaces.warm_client`) in a few milliseconds, without torch, numpy or the vault code.

**Where.** ``$XDG_RUNTIME_DIR/memvault``, else ``/tmp/memvault-<uid>``. The directory must be a real directory
(not a symlink), owned by this user, with no access for anyone else (0700); its parent must not let others
rename it (owned by this user or root, sticky when others may write to it). It is checked on an open file
descriptor taken without following links (``O_NOFOLLOW``), and every socket inside is reached through that
descriptor (``/proc/self/fd/N/name``), so swapping a symlink in after the check redirects nothing.

**Whose.** Before sending a byte, a client asks the kernel who listens (``SO_PEERCRED``): a socket of another
uid is refused, whatever the directory says. The server checks its callers the same way.

**Which install.** The socket's name is derived from memvault's version, the directory it is installed in, the
interpreter's prefix and a fingerprint of its code (see :func:`install_key`); every request carries that key and
the server refuses another one. Two installs or two versions on one machine never share a warm process, and
none ever stops another's (an older one idles out by itself).

**Wire format.** One JSON request line; the reply is one JSON header line, then ``header["bytes"]`` bytes of
payload when the header says so (little-endian float32 vectors).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import struct
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing is not imported at run time: a hook pays for every module
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

from ..rules.errors import DaemonUnavailable, UnsafePath
from ..rules.fsutil import ensure_dir

#: Base of the socket directory when there is no XDG_RUNTIME_DIR (module level so a test can point it elsewhere).
TMP_BASE = "/tmp"
SOCKET_PREFIX = "warm-"
#: The largest header line or payload either side reads (a batch of 64 texts at the largest limits, and its
#: vectors, are far below it): a frame that claims more is refused before anything that size is allocated.
MAX_FRAME = 256 << 20
_PACKAGE = Path(__file__).resolve().parents[1]  # memvault/
_key: str | None = None


# ------------------------------------------------------------------------------------------------ install
def version() -> str:
    """memvault's version, read without importing the package's heavy parts."""
    from ..rules.version import VERSION

    return VERSION


def install_key() -> str:
    """What makes a warm process this install's: version, package directory, interpreter prefix and code.

    The code fingerprint (the newest mtime and the count of the package's ``.py`` files) tells an edited checkout
    from the one a running process loaded, so a developer never talks to yesterday's code either. Computed once
    per process (about 70 ``stat`` calls).
    """
    global _key
    if _key is None:
        newest, count = 0, 0
        stack = [str(_PACKAGE)]
        while stack:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                        stack.append(entry.path)
                    elif entry.name.endswith(".py"):
                        newest = max(newest, entry.stat().st_mtime_ns)
                        count += 1
        material = "\0".join([version(), str(_PACKAGE), os.path.realpath(sys.prefix), str(newest), str(count)])
        _key = hashlib.sha256(material.encode()).hexdigest()[:20]
    return _key


def socket_name() -> str:
    return f"{SOCKET_PREFIX}{install_key()[:16]}.sock"


# ------------------------------------------------------------------------------------------------ directory
def runtime_dir() -> Path:
    """The socket directory's path (not checked; see :func:`private_dir`)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isabs(base) and os.path.isdir(base):
        return Path(base) / "memvault"
    return Path(TMP_BASE) / f"memvault-{os.getuid()}"


def _check_parent(parent: Path) -> None:
    """The parent must not let another user rename our directory away: owned by us or root, and sticky when
    others may write to it (as /tmp is)."""
    try:
        st = os.stat(parent)
    except OSError as exc:
        raise DaemonUnavailable(f"{parent}: {exc.strerror}") from None
    if st.st_uid not in (0, os.getuid()):
        raise DaemonUnavailable(f"{parent} belongs to uid {st.st_uid}: no private directory for the warm process there")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise DaemonUnavailable(f"{parent} is writable by others and not sticky: no private directory for the warm "
                                "process there")


def private_dir(*, create: bool = True) -> int:
    """An open descriptor of the socket directory after checking, on that descriptor, that it is a real
    directory of this user that nobody else can enter. The caller closes it. Raises :class:`DaemonUnavailable`
    naming the directory and what is wrong with it."""
    path = runtime_dir()
    path = Path(os.path.realpath(path.parent)) / path.name  # the parent is the system's (/tmp may be a link)
    _check_parent(path.parent)
    if create:
        try:
            ensure_dir(path, mode=0o700)
        except UnsafePath as exc:
            raise DaemonUnavailable(f"{path} is not a private directory ({exc.reason}): the warm process is not "
                                    "used; remove it if you did not create it") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DaemonUnavailable(f"{path} does not exist") from None
    except OSError as exc:  # ELOOP / ENOTDIR: a symlink or a file where the directory should be
        raise DaemonUnavailable(f"{path} is not a private directory ({exc.strerror}): the warm process is not used; "
                                "remove it if you did not create it") from None
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        os.close(fd)
        raise DaemonUnavailable(f"{path} is not private to this user (owner {st.st_uid}, mode "
                                f"{st.st_mode & 0o777:o}): the warm process is not used; remove it if you did not "
                                "create it")
    return fd


def at(fd: int, name: str) -> str:
    """The path of ``name`` inside the directory open as ``fd``, resolved through the descriptor (no second lookup
    of the directory's path, so no symlink swapped in after the check is followed)."""
    proc = f"/proc/self/fd/{fd}"
    if os.path.isdir(proc):
        return f"{proc}/{name}"
    return str(runtime_dir() / name)  # no /proc (not Linux): the peer uid check below still holds


@contextlib.contextmanager
def opened_dir(*, create: bool = True) -> Iterator[int]:
    fd = private_dir(create=create)
    try:
        yield fd
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------ peers
def peer_uid(conn: socket.socket) -> int | None:
    """The uid the kernel recorded for the other end of a unix socket (None where the platform cannot say)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    creds = conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def peer_allowed(conn: Any) -> bool:
    """Only processes of this user: the uid the kernel recorded at connect (SO_PEERCRED)."""
    uid = peer_uid(conn)
    return uid is None or uid == os.getuid()


def connect(timeout: float) -> socket.socket:
    """A connected socket to this install's warm process, its owner checked; raises :class:`DaemonUnavailable`
    when there is none, or it is not this user's."""
    with opened_dir(create=False) as fd:
        path = at(fd, socket_name())
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise DaemonUnavailable(f"no warm process at {runtime_dir() / socket_name()} ({exc.strerror or exc})") \
                from None
    uid = peer_uid(sock)
    if uid is not None and uid != os.getuid():
        sock.close()
        raise DaemonUnavailable(f"{runtime_dir() / socket_name()} is served by another user (uid {uid}): refused, "
                                "nothing was sent")
    return sock


# ------------------------------------------------------------------------------------------------ wire
def exchange(sock: socket.socket, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """Send one request (stamped with this install's key) and read its reply: (header, payload).
    Raises :class:`DaemonUnavailable` on a broken connection, a short reply, a reply that is not the wire format
    (a header that is not a JSON object, a payload length that is not a size up to :data:`MAX_FRAME`) or another
    install's process."""
    where = f"warm process at {runtime_dir() / socket_name()}"
    try:
        sock.sendall(json.dumps({**request, "key": install_key()}).encode() + b"\n")
        reader = sock.makefile("rb")
        line = read_line(reader)
        if not line:
            raise DaemonUnavailable("the warm process closed the connection")
        header = json.loads(line)
        if not isinstance(header, dict):
            raise DaemonUnavailable(f"{where}: its reply is not a JSON object")
        if header.get("key") != install_key():
            raise DaemonUnavailable("the warm process belongs to another memvault install or version: not used")
        size = header.get("bytes") or 0
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FRAME:
            raise DaemonUnavailable(f"{where}: a payload of {str(size)[:40]} bytes is not one it sends")
        payload = reader.read(size) if size else b""
        if len(payload) != size:
            raise DaemonUnavailable("short reply from the warm process")
    except (OSError, ValueError) as exc:
        raise DaemonUnavailable(f"{where}: {exc}") from None
    return header, payload


def read_line(reader: Any) -> bytes:
    """One line of at most :data:`MAX_FRAME` bytes (b"" at the end of the stream); ValueError for a longer one."""
    line: bytes = reader.readline(MAX_FRAME + 1)
    if len(line) > MAX_FRAME:
        raise ValueError(f"a line of more than {MAX_FRAME} bytes")
    return line


def call(request: dict[str, Any], timeout: float) -> tuple[dict[str, Any], bytes]:
    """:func:`connect`, then :func:`exchange`."""
    with connect(timeout) as sock:
        return exchange(sock, request)
