"""A warm embedder for cold CLI calls: one background process per model, reached over a unix socket.

An agent that shells out ``memvault recall "..." --json`` pays for a new process every time, and importing
torch and sentence-transformers alone costs about 5 s here. So the CLI asks a warm process for the query
vector instead: the first call starts it (and waits for it once), later calls pay a process start and one
socket round trip. The daemon runs the very same :class:`~memvault.models.embeddings.SentenceTransformerEmbedder` code
as the in-process path, so vectors — and rankings — are identical.

Safety: the socket lives in ``$XDG_RUNTIME_DIR/memvault`` (or ``/tmp/memvault-<uid>``), a directory that must
be owned by the user with mode 0700; the socket is 0600, and the daemon also checks the peer's uid
(SO_PEERCRED) on every connection. A stale socket or a dead daemon is detected on connect and the caller
falls back to loading the model in-process. The daemon exits after ``idle`` seconds without a request.

Wire format: one JSON request line; the reply is one JSON header line, followed for vectors by
``rows * dims * 4`` bytes of little-endian float32.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import DaemonUnavailable, ModelUnavailable

if TYPE_CHECKING:
    import numpy as np

    from .embeddings import Embedder

DEFAULT_IDLE = 900.0  # seconds
START_TIMEOUT = 120.0


#: Texts per embed_documents request: a bulk reindex sends many small requests, so a recall's query vector waits
#: for one of them at most, not for the whole bulk.
REQUEST_TEXTS = 64


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        return Path(base) / "memvault"
    return Path(f"/tmp/memvault-{os.getuid()}")


# AF_UNIX paths are limited to 108 bytes (including the temporary name the daemon binds first).
_MAX_SOCKET_PATH = 100


def secure_dir() -> Path:
    """The socket directory, created 0700; refused if another user owns it or others can enter it."""
    path = runtime_dir()
    if len(str(path)) + 30 > _MAX_SOCKET_PATH:
        path = Path(f"/tmp/memvault-{os.getuid()}")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError as exc:
        raise DaemonUnavailable(f"{path}: {exc.strerror}") from None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise DaemonUnavailable(f"{path} is not private to this user (owner {st.st_uid}, mode {st.st_mode & 0o777:o})")
    return path


def socket_path(model: str, query_prefix: str | None) -> Path:
    """One socket per (model, query prefix): every vault of the user using that model shares the daemon."""
    digest = hashlib.sha256(f"{model}\0{query_prefix}".encode()).hexdigest()[:16]
    return secure_dir() / f"embed-{digest}.sock"


# ------------------------------------------------------------------------------------------------ client
class RemoteEmbedder:
    """An :class:`~memvault.models.embeddings.Embedder` whose model lives in the daemon."""

    def __init__(self, path: Path, timeout: float = 60.0) -> None:
        self.path = path
        self.timeout = timeout
        header, _ = self._call({"op": "identity"})
        from .embeddings import ModelIdentity

        self.identity: ModelIdentity = ModelIdentity.from_dict(header["identity"])

    def _call(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect(str(self.path))
                sock.sendall(json.dumps(request).encode() + b"\n")
                reader = sock.makefile("rb")
                line = reader.readline()
                if not line:
                    raise DaemonUnavailable("the embedder daemon closed the connection")
                header = json.loads(line)
                payload = b""
                if header.get("bytes"):
                    payload = reader.read(header["bytes"])
                    if len(payload) != header["bytes"]:
                        raise DaemonUnavailable("short reply from the embedder daemon")
        except (OSError, ValueError) as exc:
            raise DaemonUnavailable(f"embedder daemon at {self.path}: {exc}") from None
        if not header.get("ok"):
            raise DaemonUnavailable(header.get("error", "the embedder daemon failed"))
        return header, payload

    def _matrix(self, request: dict[str, Any]) -> np.ndarray:
        import numpy as np

        header, payload = self._call(request)
        rows, dims = header["shape"]
        return np.frombuffer(payload, dtype="<f4").reshape(rows, dims)

    def embed_documents(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        import numpy as np

        texts = list(texts)
        parts = [self._matrix({"op": "embed_documents", "texts": texts[i : i + REQUEST_TEXTS],
                               "batch_size": batch_size}) for i in range(0, len(texts), REQUEST_TEXTS)]
        if not parts:
            return np.zeros((0, self.identity.dims), dtype=np.float32)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def embed_query(self, text: str) -> Any:
        """The query vector as ``array('f')``: the index takes it as is, so a cold CLI never imports numpy."""
        import array

        header, payload = self._call({"op": "embed_query", "text": text})
        vector = array.array("f")
        vector.frombytes(payload)
        if sys.byteorder != "little":
            vector.byteswap()
        return vector

    def count_tokens(self, text: str) -> int:
        return int(self._call({"op": "count_tokens", "text": text})[0]["count"])

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        header, _ = self._call({"op": "split", "text": text, "max_tokens": max_tokens, "overlap": overlap})
        return list(header["chunks"])


def connect(model: str, query_prefix: str | None, *, start: bool = True, idle: float = DEFAULT_IDLE) -> RemoteEmbedder:
    """A client of the warm embedder for ``model``, starting the daemon (and waiting for it) if needed.

    Raises :class:`ModelUnavailable` when the daemon reports that the model cannot be loaded, and
    :class:`DaemonUnavailable` when no daemon can be reached or started (the caller then loads in-process).
    """
    path = socket_path(model, query_prefix)
    try:
        return RemoteEmbedder(path)
    except DaemonUnavailable:
        if not start:
            raise
    error_file = path.with_suffix(".err")
    with contextlib.suppress(FileNotFoundError):
        error_file.unlink()
    lock = path.with_suffix(".lock")
    from ..rules.fsutil import locked

    with locked(lock):  # two cold CLIs at once start one daemon
        with contextlib.suppress(DaemonUnavailable):
            return RemoteEmbedder(path)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a stale socket of a dead daemon
        args = [sys.executable, "-m", "memvault.models.daemon", "--model", model, "--idle", str(idle)]
        if query_prefix is not None:
            args += ["--query-prefix", query_prefix]
        subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if error_file.exists():
                time.sleep(0.05)  # the daemon writes the file in one small write; let it land
                try:
                    failure = json.loads(error_file.read_text())
                except ValueError:
                    failure = {"kind": "daemon", "message": "the embedder daemon failed to start"}
                with contextlib.suppress(FileNotFoundError):
                    error_file.unlink()
                if failure.get("kind") == "model":
                    raise ModelUnavailable(model, failure.get("reason", "the daemon could not load it"))
                raise DaemonUnavailable(failure.get("message", "the embedder daemon failed to start"))
            if path.exists():
                with contextlib.suppress(DaemonUnavailable):
                    return RemoteEmbedder(path)
            time.sleep(0.05)
    raise DaemonUnavailable(f"the embedder daemon for {model} did not start within {START_TIMEOUT:.0f} s")


def stop(model: str, query_prefix: str | None) -> bool:
    """Ask the daemon for ``model`` to exit. True when one was running."""
    try:
        RemoteEmbedder(socket_path(model, query_prefix))._call({"op": "stop"})
        return True
    except DaemonUnavailable:
        return False


# ------------------------------------------------------------------------------------------------ server
def serve(model: str, query_prefix: str | None, idle: float = DEFAULT_IDLE) -> int:
    """Load ``model`` and answer embedding requests on its socket until idle for ``idle`` seconds."""
    path = socket_path(model, query_prefix)
    error_file = path.with_suffix(".err")
    try:
        from .embeddings import load_embedder

        embedder = load_embedder(model, query_prefix=query_prefix)
    except ModelUnavailable as exc:
        error_file.write_text(json.dumps({"kind": "model", "reason": exc.reason}))
        return 1
    except Exception as exc:  # noqa: BLE001 - any load failure must reach the waiting client as one line
        error_file.write_text(json.dumps({"kind": "model", "reason": f"{type(exc).__name__}: {exc}"}))
        return 1
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = path.with_name(f".{os.getpid()}.s")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    old_umask = os.umask(0o177)
    try:
        server.bind(str(tmp))
        os.chmod(tmp, 0o600)
        server.listen(16)
        os.replace(tmp, path)  # appear atomically, already listening
    except OSError as exc:
        error_file.write_text(json.dumps({"kind": "daemon", "message": f"cannot listen on {path}: {exc.strerror or exc}"}))
        return 1
    finally:
        os.umask(old_umask)
    mine = os.stat(path).st_ino
    server.settimeout(1.0)
    lock = threading.Lock()
    last = [time.monotonic()]
    stopping = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                if not peer_allowed(conn):
                    return
                reader = conn.makefile("rb")
                request = json.loads(reader.readline() or b"{}")
                with lock:
                    header, payload = _answer(embedder, request)
                if request.get("op") == "stop":
                    stopping.set()
                conn.sendall(json.dumps(header).encode() + b"\n" + payload)
            except Exception as exc:  # noqa: BLE001 - one bad request never kills the daemon
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
            finally:
                last[0] = time.monotonic()

    try:
        while not stopping.is_set() and time.monotonic() - last[0] < idle:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            last[0] = time.monotonic()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
    finally:
        server.close()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == mine:  # not a newer daemon's socket
                path.unlink()
    return 0


def peer_allowed(conn: Any) -> bool:
    """Only processes of this user may use the daemon (SO_PEERCRED: the uid the kernel recorded at connect),
    checked on every connection, on top of the socket's 0600 mode and its private directory."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def _answer(embedder: Embedder, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    import numpy as np

    op = request.get("op")
    if op == "identity" or op == "stop":
        return {"ok": True, "identity": embedder.identity.to_dict()}, b""
    if op == "embed_query":
        matrix = np.asarray(embedder.embed_query(request["text"]), dtype="<f4").reshape(1, -1)
    elif op == "embed_documents":
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


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m memvault.models.daemon", description="memvault's warm embedder")
    parser.add_argument("--model", required=True)
    parser.add_argument("--query-prefix", default=None)
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE, help="exit after this many idle seconds")
    args = parser.parse_args(argv)
    return serve(args.model, args.query_prefix, args.idle)


if __name__ == "__main__":
    sys.exit(main())
