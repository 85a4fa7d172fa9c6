"""Waits for a lock that give up: a writer behind a stuck holder (a git hook waiting on a dead network share, a
``memvault`` stopped with Ctrl-Z, a frozen MCP server) fails after a bound, naming the lock and its holder, instead
of hanging every agent, hook and timer of the vault behind it. :func:`memvault.rules.fsutil.locked` uses these."""
from __future__ import annotations

import fcntl
import os

#: Seconds a writer waits for one of the vault's locks before it gives up (environment, this host's own).
LOCK_WAIT_ENV = "MEMVAULT_LOCK_WAIT"
LOCK_WAIT = 120.0


def lock_wait() -> float:
    """How long a writer waits for the vault's write, append, sync or import lock: ``MEMVAULT_LOCK_WAIT`` seconds,
    else :data:`LOCK_WAIT` (a write takes well under a second; an import or a prune of a huge month, minutes)."""
    from .errors import InvalidValue

    value = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not value:
        return LOCK_WAIT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e6:
        raise InvalidValue(LOCK_WAIT_ENV, f"must be a number of seconds above 0, not {value!r}")
    return seconds


def flock_within(fd: int, operation: int, wait: float, name: str) -> None:
    """``flock(fd, operation)`` that gives up after ``wait`` seconds. The blocking wait runs in a thread on a
    duplicate of ``fd`` (one open file, so its lock is ``fd``'s): the kernel wakes it on release as it wakes every
    waiter, never later than a poll would. A wait given up on leaves that thread blocked; when it does get the lock
    it closes its duplicate, and the caller has closed ``fd``, so the lock is let go at once."""
    import threading

    from .errors import LockTimeout

    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    other = os.dup(fd)
    got = threading.Event()

    def take() -> None:
        try:
            fcntl.flock(other, operation)
            got.set()
        except OSError:
            pass
        finally:
            os.close(other)

    threading.Thread(target=take, name=f"memvault-lock-{name}", daemon=True).start()
    if not got.wait(wait):
        raise LockTimeout(name, wait, _flock_holder(fd))


def _flock_holder(fd: int) -> int | None:
    """The process holding an flock on ``fd``'s file, from /proc/locks (Linux); None where it cannot be told."""
    st = os.fstat(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                if "->" not in fields and len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == where:
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one this user may not signal counts: it is not known to be gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True

