"""The warm process's embedding side: one background process per user and install serves query and document
vectors to every short-lived memvault process, over the private channel of :mod:`memvault.models.channel`.

An agent that shells out ``memvault recall "..." --json`` pays for a new process every time; loading a model there
would cost seconds. So the CLI asks the warm process for the query vector instead: the first call starts it,
later calls pay one socket round trip. The warm process loads each model it is asked for once, with the very same
:func:`~memvault.models.embeddings.load_embedder` as the in-process path, so vectors — and rankings — are the same.
It also serves whole read-only vault calls to hooks (:mod:`memvault.interfaces.warm`, the process's entry point).

The process exits after ``idle`` seconds without a request, and gives freed memory back to the system after a
minute without one. A client whose process went away (idled out, killed) starts a new one and asks again: a
long-lived caller such as the MCP server never fails because its model process idled out. Every reply names the
model revision that made it, so a process restarted with other weights never hands out vectors that would be mixed
with the old ones.

Wire format (see :mod:`~memvault.models.channel`): requests ``{"op": ..., "model": ..., "prefix": ...}``; vectors
come back as ``rows * dims * 4`` bytes of little-endian float32 after the header line.
"""
from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..rules.errors import DaemonUnavailable, ModelUnavailable
from ..rules.fsutil import open_at, replace_at, unlink_at
from . import channel

if TYPE_CHECKING:
    import numpy as np

    from .embeddings import Embedder, ModelIdentity

DEFAULT_IDLE = 900.0  # seconds
#: How long a starting process may take to listen (it loads no model before it listens).
START_TIMEOUT = 30.0
#: How long a client waits for one reply; loading a model on first use is the longest one.
CALL_TIMEOUT = 180.0
#: How long a client waits for a reply that needs no model work (is a process there, does it hold the model): a
#: process that does not answer this (stopped, deadlocked, swapped out) is not waited for CALL_TIMEOUT.
PROBE_TIMEOUT = 5.0
#: After this long without a request the process returns freed memory to the system (malloc_trim).
TRIM_AFTER = 15.0
#: Texts per embed_documents request: a bulk reindex sends many small requests, so a recall's query vector waits
#: for one of them at most, not for the whole bulk.
REQUEST_TEXTS = 64
LOG_NAME = "warm.log"
#: What a warm process must not inherit from whoever happened to start it: it serves every caller, each of which
#: names its own source and vault.
_SCRUBBED_ENV = ("MEMVAULT_SOURCE", "MEMVAULT_DIR", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")

Handler = Callable[[dict[str, Any]], "tuple[dict[str, Any], bytes]"]


# ------------------------------------------------------------------------------------------------ client
class RemoteEmbedder:
    """An :class:`~memvault.models.embeddings.Embedder` whose model lives in the warm process.

    ``start``: start the process and load the model if need be (else only a process already holding the model
    is taken). Once connected, a process that went away (idled out, killed) is started again and asked again,
    once per call: a long-lived client never fails because its model process idled out.
    """

    #: Held while the model is loaded here (``fallback``): rare, so one lock for every client.
    _loading = threading.Lock()

    def __init__(self, model: str, query_prefix: str | None, *, idle: float = DEFAULT_IDLE, start: bool = True,
                 timeout: float = CALL_TIMEOUT, backend: str = "auto") -> None:
        self.model = model
        self.query_prefix = query_prefix
        self.backend = backend
        self.idle = idle
        self.timeout = timeout
        self.restarts = 0
        self.restart = start
        #: Cores the warm process may use for this client's large batches (0: all); sent with each batch.
        self.threads = 0
        #: Loads the model in this process when the warm process is gone for good (set by the engine).
        self.fallback: Callable[[], Embedder] | None = None
        self._local: Embedder | None = None
        from .embeddings import ModelIdentity

        if start:
            self._answering()
        # Without start, only a process already holding the model may answer: no load to wait for.
        header, _ = self._call({"op": "load", "load": start}, None if start else PROBE_TIMEOUT)
        self.identity: ModelIdentity = ModelIdentity.from_dict(header["identity"])
        self.restart = True

    def __repr__(self) -> str:
        return f"RemoteEmbedder({self.model!r})"

    def _answering(self) -> None:
        """A process that does not even say hello (stopped, deadlocked) is replaced by :func:`start` before the
        long wait of a model load is spent on it."""
        try:
            channel.call({"op": "hello"}, PROBE_TIMEOUT)
        except DaemonUnavailable:
            start(self.idle)

    def _call(self, request: dict[str, Any], timeout: float | None = None) -> tuple[dict[str, Any], bytes]:
        request = {**request, "model": self.model, "prefix": self.query_prefix, "backend": self.backend}
        wait = self.timeout if timeout is None else timeout
        try:
            header, payload = channel.call(request, wait)
        except DaemonUnavailable:
            if not self.restart:
                raise
            start(self.idle)  # gone since the last call (idled out, killed): a new one, then once more
            self.restarts += 1
            header, payload = channel.call(request, wait)
        if not header.get("ok"):
            if header.get("kind") == "model":
                raise ModelUnavailable(self.model, header.get("reason", "the warm process could not load it"))
            raise DaemonUnavailable(header.get("error", "the warm process failed"))
        revision = header.get("revision")
        identity = getattr(self, "identity", None)
        if revision is not None and identity is not None and revision != identity.revision:
            raise DaemonUnavailable(f"the warm process now has {self.model} at revision {revision}, not "
                                    f"{identity.revision}: its vectors would not match; run the command again")
        return header, payload

    def _local_or(self, remote: Callable[[], Any], local: Callable[[Embedder], Any]) -> Any:
        """``remote()``; when the warm process is gone and cannot be started again, ``local`` on the model loaded
        in this process (``fallback``), which must make the same vectors."""
        if self._local is None:
            try:
                return remote()
            except DaemonUnavailable:
                if self.fallback is None:
                    raise
                with self._loading:  # threads that found it gone together (a recall embeds on two) load it once
                    if self._local is None:
                        embedder = self.fallback()
                        if not embedder.identity.same_vectors(self.identity):
                            raise
                        embedder.threads = self.threads  # type: ignore[attr-defined]
                        self._local = embedder
        return local(self._local)

    def _matrix(self, request: dict[str, Any]) -> np.ndarray:
        import numpy as np

        header, payload = self._call(request)
        rows, dims = header["shape"]
        return np.frombuffer(payload, dtype="<f4").reshape(rows, dims)

    def embed_documents(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        texts = list(texts)

        def remote() -> np.ndarray:
            import numpy as np

            parts = [self._matrix({"op": "embed_documents", "texts": texts[i : i + REQUEST_TEXTS],
                                   "batch_size": batch_size, "threads": self.threads})
                     for i in range(0, len(texts), REQUEST_TEXTS)]
            if not parts:
                return np.zeros((0, self.identity.dims), dtype=np.float32)
            return np.concatenate(parts) if len(parts) > 1 else parts[0]

        return self._local_or(remote, lambda e: e.embed_documents(texts, batch_size))

    def embed_query(self, text: str) -> Any:
        """The query vector as ``array('f')``: the index takes it as is, so a cold CLI never imports numpy."""
        def remote() -> Any:
            import array

            _header, payload = self._call({"op": "embed_query", "text": text})
            vector = array.array("f")
            vector.frombytes(payload)
            if sys.byteorder != "little":
                vector.byteswap()
            return vector

        return self._local_or(remote, lambda e: e.embed_query(text))

    def count_tokens(self, text: str) -> int:
        return int(self._local_or(lambda: self._call({"op": "count_tokens", "text": text})[0]["count"],
                                  lambda e: e.count_tokens(text)))

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        request = {"op": "split", "text": text, "max_tokens": max_tokens, "overlap": overlap}
        return list(self._local_or(lambda: self._call(request)[0]["chunks"],
                                   lambda e: e.split(text, max_tokens, overlap)))


def connect(model: str, query_prefix: str | None, *, start: bool = True, idle: float = DEFAULT_IDLE,
            backend: str = "auto") -> RemoteEmbedder:
    """A client of the warm process for ``model``. With ``start`` the process is started if need be and loads the
    model (waiting for both); without, only a process that already holds the model answers.

    Raises :class:`ModelUnavailable` when the model cannot be loaded, and :class:`DaemonUnavailable` when no warm
    process can be reached or started (the caller then loads the model itself).
    """
    return RemoteEmbedder(model, query_prefix, idle=idle, start=start, backend=backend)


def start(idle: float = DEFAULT_IDLE) -> None:
    """Start this install's warm process unless one answers, and wait until it listens. Two callers at once start
    one (an flock in the private directory). Raises :class:`DaemonUnavailable` with the reason when it cannot.

    The module it runs is the one the interfaces named (:data:`memvault.models.warm_server`); where none did, there
    is nothing to start and the caller loads the model itself."""
    from . import warm_server

    if warm_server is None:
        raise DaemonUnavailable("no warm process is started from this process (memvault's commands, hooks and "
                                "servers start it)")
    with channel.opened_dir() as fd:
        lock = open_at(fd, "start.lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with contextlib.suppress(DaemonUnavailable):
                channel.call({"op": "hello"}, PROBE_TIMEOUT)
                return
            unlink_at(fd, channel.socket_name())  # a dead process's socket
            log = open_at(fd, LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            env = {"OPENBLAS_NUM_THREADS": "1",  # see single_thread_blas
                   # Each request runs on a thread of its own; glibc gives threads malloc arenas of their own (up
                   # to 8 per core), and a batch's working memory freed in one is never reused by the next request's
                   # thread: the warm process grew to 700+ MB over a rebuild of runbook-sized texts. Two arenas.
                   "MALLOC_ARENA_MAX": "2",
                   # glibc raises its mmap threshold after each large free (up to 32 MB), so a batch's buffers
                   # soon come from the heap, where they fragment it and stay: 617 MB resident during a rebuild
                   # of runbooks. A fixed threshold keeps every large buffer in a mapping of its own, returned on
                   # free (the same 240 windows: rss after 175 against 327 MB, peak 339 against 392).
                   "MALLOC_MMAP_THRESHOLD_": "131072",
                   **{k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}}
            try:
                # --expect: a process that would listen under another name (its code changed since this one
                # computed the name: an upgrade, an edit) exits at once saying so, instead of this wait running
                # out after START_TIMEOUT while it listens where nobody of this install looks
                proc = subprocess.Popen([sys.executable, "-P", "-m", warm_server, "--idle", str(idle),
                                         "--expect", channel.socket_name()],
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/",
                                        start_new_session=True, close_fds=True)
            finally:
                os.close(log)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise DaemonUnavailable(f"the warm process exited at start ({_log_tail(fd)})")
                with contextlib.suppress(DaemonUnavailable):
                    channel.call({"op": "hello"}, PROBE_TIMEOUT)
                    return
                time.sleep(0.02)
            _end(proc)  # left running, it would hold its memory, and each later start would add one more
            raise DaemonUnavailable(f"the warm process did not listen within {START_TIMEOUT:.0f} s")
        finally:
            os.close(lock)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Ends a warm process this one started that never listened: asked first, then killed."""
    with contextlib.suppress(OSError):
        proc.terminate()
        try:
            proc.wait(2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(2.0)


def _log_tail(fd: int) -> str:
    try:
        log = os.open(LOG_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return "no log"
    with os.fdopen(log, "rb") as f:
        lines = f.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "no output"


def status() -> dict[str, Any] | None:
    """What this install's warm process holds (pid, resident memory, models, vaults), or None when none runs.
    Never starts one."""
    try:
        header, _ = channel.call({"op": "status"}, 5.0)
    except DaemonUnavailable:
        return None
    return {k: v for k, v in header.items() if k not in ("ok", "key")}


def stop(timeout: float = 10.0) -> bool:
    """Ask this install's warm process to exit, and wait (up to ``timeout`` seconds) until it has: once this returns,
    :func:`status` says None and :func:`start` starts a new process rather than finding the one on its way out.
    True when one was running."""
    try:
        header, _ = channel.call({"op": "stop"}, timeout)
    except DaemonUnavailable:
        return False
    # The reply comes before the process exits (its loop wakes up to a second later, then closes its vaults): a
    # caller that starts a new one, or removes the runtime directory, at once would race the old one.
    pid = header.get("pid")
    if isinstance(pid, int) and pid > 0 and pid != os.getpid():  # not a server on a thread of this process
        _wait_exit(pid, timeout)
    return True


def _wait_exit(pid: int, timeout: float) -> None:
    """Wait until process ``pid`` has exited (its pidfd becomes readable then, reaped or not), at most ``timeout``
    seconds. Without pidfds (not Linux), until its socket no longer answers: it is removed just before the exit."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.poll(int(timeout * 1000))
        finally:
            os.close(fd)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            channel.call({"op": "hello"}, 1.0)
        except DaemonUnavailable:
            return
        time.sleep(0.02)


# ------------------------------------------------------------------------------------------------ server: models
class Models:
    """The models a warm process holds, each loaded once on first request; one request per model at a time."""

    def __init__(self, loader: Callable[[str, str | None, str], Embedder] | None = None) -> None:
        self._loader = loader
        self._models: dict[tuple[str, str | None, str], Embedder] = {}
        self._locks: dict[tuple[str, str | None, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def names(self) -> list[dict[str, Any]]:
        # list() copies the dict in one step: a model loaded on another thread meanwhile must not make a status
        # request fail with "dictionary changed size during iteration"
        return [{"model": model, "backend": getattr(e, "backend", backend), "revision": e.identity.revision}
                for (model, _prefix, backend), e in list(self._models.items())]

    def lock(self, key: tuple[str, str | None, str]) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, model: str, query_prefix: str | None, backend: str = "auto", *, load: bool = True) -> Embedder | None:
        """The embedder of ``model``, loaded now if ``load`` (raises ModelUnavailable), else None if not held."""
        key = (model, query_prefix, backend)
        with self.lock(key):
            embedder = self._models.get(key)
            if embedder is None and load:
                if self._loader is not None:
                    embedder = self._loader(model, query_prefix, backend)
                else:
                    from .embeddings import load_embedder

                    embedder = load_embedder(model, query_prefix=query_prefix, backend=backend)
                self._models[key] = embedder
            return embedder

    def answer(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        model, prefix, backend = request.get("model"), request.get("prefix"), request.get("backend", "auto")
        if not isinstance(model, str) or not (prefix is None or isinstance(prefix, str)) or \
                backend not in ("auto", "onnx", "torch"):
            return {"ok": False, "error": "a model request needs a model name and a backend"}, b""
        try:
            embedder = self.get(model, prefix, backend, load=bool(request.get("load", True)))
        except ModelUnavailable as exc:
            return {"ok": False, "kind": "model", "reason": exc.reason}, b""
        except Exception as exc:  # noqa: BLE001 - any load failure reaches the client as one line
            return {"ok": False, "kind": "model", "reason": f"{type(exc).__name__}: {exc}"}, b""
        if embedder is None:
            return {"ok": False, "error": f"{model} is not loaded in the warm process"}, b""
        with self.lock((model, prefix, backend)):
            header, payload = _answer(embedder, request)
        header.setdefault("revision", embedder.identity.revision)
        return header, payload


def _answer(embedder: Embedder, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    import numpy as np

    op = request.get("op")
    if op == "load":
        return {"ok": True, "identity": embedder.identity.to_dict()}, b""
    if op == "embed_query":
        matrix = np.asarray(embedder.embed_query(request["text"]), dtype="<f4").reshape(1, -1)
    elif op == "embed_documents":
        if isinstance(request.get("threads"), int) and hasattr(embedder, "threads"):
            embedder.threads = max(0, request["threads"])  # type: ignore[attr-defined]  # the caller's cap
        matrix = np.asarray(embedder.embed_documents(request["texts"], request.get("batch_size", 32)), dtype="<f4")
    elif op == "count_tokens":
        return {"ok": True, "count": embedder.count_tokens(request["text"])}, b""
    elif op == "split":
        return {"ok": True, "chunks": embedder.split(request["text"], request.get("max_tokens"),
                                                     request.get("overlap", 32))}, b""
    else:
        return {"ok": False, "error": f"unknown op {op!r}"}, b""
    payload = matrix.tobytes()
    return {"ok": True, "shape": list(matrix.shape), "bytes": len(payload)}, payload


MODEL_OPS = frozenset({"load", "embed_query", "embed_documents", "count_tokens", "split"})


# ------------------------------------------------------------------------------------------------ server: the loop
class Server:
    """The warm process's socket loop: checks each caller (uid, install key), dispatches its request by ``op``,
    exits after ``idle`` seconds without one. ``handlers`` maps ops to functions of the request."""

    def __init__(self, handlers: dict[str, Handler], *, idle: float = DEFAULT_IDLE,
                 describe: Callable[[], dict[str, Any]] | None = None) -> None:
        self.handlers = handlers
        self.idle = idle
        self.describe = describe
        self.started = time.time()
        self.last = time.monotonic()
        self.stopping = threading.Event()
        self.listening = threading.Event()
        self._trimmed = True
        self._busy = 0
        self._busy_lock = threading.Lock()

    def serve(self) -> int:
        """Listen until idle or stopped. Returns 0, or 1 when the socket could not be bound."""
        try:
            fd = channel.private_dir()
        except DaemonUnavailable as exc:
            print(f"memvault warm process: {exc}", file=sys.stderr, flush=True)
            return 1
        name = channel.socket_name()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = f".{os.getpid()}.s"
        unlink_at(fd, tmp)
        old_umask = os.umask(0o177)
        try:
            server.bind(channel.at(fd, tmp))
            server.listen(64)
            replace_at(fd, tmp, name)  # appears atomically, already listening
            mine = os.stat(name, dir_fd=fd, follow_symlinks=False).st_ino
        except OSError as exc:
            print(f"memvault warm process: cannot listen ({exc.strerror or exc})", file=sys.stderr, flush=True)
            os.close(fd)
            return 1
        finally:
            os.umask(old_umask)
        server.settimeout(1.0)
        self.listening.set()
        try:
            while not self.stopping.is_set():
                idle_for = time.monotonic() - self.last
                if idle_for >= self.idle and not self._busy:
                    break
                if idle_for >= TRIM_AFTER and not self._trimmed and not self._busy:
                    trim_memory()
                    self._trimmed = True
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with self._busy_lock:
                    self._busy += 1
                threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        finally:
            server.close()
            with contextlib.suppress(OSError):
                if os.stat(name, dir_fd=fd, follow_symlinks=False).st_ino == mine:  # not a newer process's socket
                    unlink_at(fd, name)
            os.close(fd)
        return 0

    def _handle(self, conn: socket.socket) -> None:
        key = channel.install_key()
        work = False
        with conn:
            try:
                if not channel.peer_allowed(conn):
                    return
                conn.settimeout(CALL_TIMEOUT)
                request = json.loads(channel.read_line(conn.makefile("rb")) or b"{}")
                if not isinstance(request, dict):
                    raise ValueError("a request is one JSON object")
                # asking whether the process is there (status, hello) is not using it: it still idles out
                work = request.get("op") not in ("status", "hello")
                if request.get("key") != key:
                    header, payload = {"ok": False, "error": "another memvault install or version"}, b""
                else:
                    header, payload = self.dispatch(request)
                conn.sendall(json.dumps({**header, "key": key}).encode() + b"\n" + payload)
            except Exception as exc:  # noqa: BLE001 - one bad request never kills the process
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                             "key": key}).encode() + b"\n")
            finally:
                if work:
                    self.last = time.monotonic()
                    self._trimmed = False
                with self._busy_lock:
                    self._busy -= 1

    def dispatch(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        op = request.get("op")
        if op == "hello":
            return {"ok": True, "pid": os.getpid()}, b""
        if op == "stop":
            self.stopping.set()
            return {"ok": True, "pid": os.getpid()}, b""  # the caller waits for this pid to exit
        if op == "status":
            info = {"ok": True, "pid": os.getpid(), "rss_bytes": resident_bytes(), "started": self.started,
                    "idle_after": self.idle, "idle_for": round(time.monotonic() - self.last, 1),
                    "version": channel.version()}
            if self.describe is not None:
                info.update(self.describe())
            return info, b""
        handler = self.handlers.get(op) if isinstance(op, str) else None
        if handler is None:
            return {"ok": False, "error": f"unknown op {op!r}"}, b""
        return handler(request)


def single_thread_blas() -> None:
    """memvault's own processes run numpy's small matrix products (a query against the vectors in memory: 10k x 384)
    on one thread: on a busy 2-core machine two spinning BLAS threads made one 5x slower (1.9 against 9.8 ms p50,
    measured side by side). Effective only before numpy is first imported; a program that imports memvault as a
    library keeps its own setting."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def resident_bytes() -> int | None:
    """This process's resident memory (VmRSS), or None where /proc cannot say."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def trim_memory() -> None:
    """Give freed memory back to the system: a batch of long texts leaves the allocator holding tens of MB."""
    gc.collect()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
