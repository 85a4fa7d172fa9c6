"""Where vectors come from: one warm process per user and install holds the models, shared by every process
that embeds.

Loading a model costs 1-10 s, far more than any recall or small reindex. So by default no short-lived process
loads one: the CLI, the git hooks, ``watch`` and the MCP server all talk to the warm process
(:mod:`memvault.models.daemon`), starting it when none is running, and starting it again when it went away
(idled out) while they held it. The model is loaded in this process only when the warm process is turned off
(``[embedding] daemon = false`` or ``MEMVAULT_NO_DAEMON=1``) or cannot be started. A test passes its own ``factory``.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..rules.errors import DaemonUnavailable, ModelUnavailable

if TYPE_CHECKING:
    from .embeddings import Embedder

Status = Callable[[str], None]
#: How long a model that failed to load is not asked again by a long-lived process (MCP, watch).
RETRY_AFTER = 60.0
#: A batch of at least this many texts (a rebuild, a reindex with that much pending) is embedded by the model loaded
#: in the process that asks, not sent to the warm process. Through the warm process's socket a 10k-item rebuild took
#: 124 s against 99 s here (its fixed malloc mmap threshold, which keeps it small when idle, costs ~15 %; the
#: requests the rest), and loading the model here takes 0.7 s (ONNX): the same time as ~70 texts.
BATCH_HERE = 1000


def terminal_status(message: str) -> None:
    """Progress lines on stderr, only when a person is watching a terminal."""
    if sys.stderr.isatty():
        print(f"memvault: {message}", file=sys.stderr, flush=True)


class Engine:
    """The embedder of one model: obtained once per process, from the daemon or loaded here."""

    def __init__(self, model: str, query_prefix: str | None = None, *, daemon: bool = True, idle: float = 900.0,
                 factory: Callable[[], Embedder] | None = None, status: Status | None = None,
                 backend: str = "auto", threads: int = 0) -> None:
        self.model = model
        #: Cores of a large batch (0: all); given to the embedder, wherever it runs.
        self.threads = threads
        self.query_prefix = query_prefix
        self.backend = backend
        self.daemon = daemon and not os.environ.get("MEMVAULT_NO_DAEMON")
        self.idle = idle
        self.factory = factory
        self.status = status
        self._embedder: Embedder | None = None
        self._failure: tuple[float, ModelUnavailable] | None = None
        self._lock = threading.Lock()
        #: Where the embedder came from: "daemon" (a warm process), "process" (loaded here), "given", or None.
        self.source: str | None = None
        #: The model loaded here for one large batch (:meth:`for_batch`), dropped by :meth:`release_batch`.
        self._batch: Embedder | None = None

    def __repr__(self) -> str:
        return f"Engine({self.model!r}, daemon={self.daemon})"

    def loaded(self) -> Embedder | None:
        """The embedder this process already has, or None. No I/O."""
        return self._batch or self._embedder

    def for_batch(self, count: Callable[[], int]) -> Embedder:
        """The embedder for a batch of about ``count()`` texts (asked only when it matters): :meth:`get`'s, except
        that a batch of :data:`BATCH_HERE` texts or more whose model would come from the warm process is embedded by
        the model loaded in this process, kept until :meth:`release_batch` (a one-shot ``reindex`` exits soon after,
        and the memory goes with it; the warm process stays small and keeps serving queries meanwhile)."""
        if not self.daemon or self.factory is not None or self.source == "process":
            return self.get()
        texts = count()
        if texts < BATCH_HERE:
            return self.get()
        with self._lock:
            if self._batch is None:
                from .embeddings import load_embedder

                if self.status is not None:
                    self.status(f"loading embedding model {self.model} in this process for about {texts:,} texts...")
                batch = load_embedder(self.model, query_prefix=self.query_prefix, backend=self.backend)
                batch.threads = self.threads  # type: ignore[attr-defined]
                self._batch = batch
                self._start_warm()
            return self._batch

    def _start_warm(self) -> None:
        """Start the warm process in the background while a batch is embedded here, so the queries after a
        ``reindex`` find it up, as they did when the reindex's own requests started it. Never waited for: a warm
        process that cannot start is the next query's to report."""
        import contextlib

        from . import daemon

        def start() -> None:
            with contextlib.suppress(Exception):
                daemon.start(self.idle)

        threading.Thread(target=start, daemon=True, name="memvault-warm-start").start()

    def release_batch(self) -> None:
        """Drop the model :meth:`for_batch` loaded here, if any (later calls use the warm process again)."""
        self._batch = None

    def warm(self) -> Embedder | None:
        """The embedder if one is ready now: already here, or a daemon that answers (one socket round trip).
        Never loads or starts anything: a write uses it to embed what it changed only when that is cheap."""
        if self._embedder is not None or self.factory is not None:
            return self._embedder
        if not self.daemon:
            return None
        from . import daemon

        try:
            self._embedder = self._fallback_to_process(
                daemon.connect(self.model, self.query_prefix, start=False, idle=self.idle, backend=self.backend))
        except (DaemonUnavailable, ModelUnavailable):
            return None
        self._embedder.threads = self.threads  # type: ignore[attr-defined]
        self.source = "daemon"
        return self._embedder

    def get(self) -> Embedder:
        """The embedder, starting the daemon or loading the model if need be. Raises :class:`ModelUnavailable`
        (remembered for a minute, so a long-lived process does not retry on every call)."""
        with self._lock:
            if self._embedder is not None:
                return self._embedder
            if self._failure is not None and time.monotonic() - self._failure[0] < RETRY_AFTER:
                raise self._failure[1]
            started = time.monotonic()
            try:
                self._embedder = self._obtain()
                self._embedder.threads = self.threads  # type: ignore[attr-defined]
            except ModelUnavailable as exc:
                self._failure = (time.monotonic(), exc)
                raise
            waited = time.monotonic() - started
            if waited > 1.0 and self.status is not None:
                self.status(f"model {self.model} ready in {waited:.1f} s")
            return self._embedder

    def _obtain(self) -> Embedder:
        if self.factory is not None:
            self.source = "given"
            return self.factory()
        if self.daemon:
            from . import daemon

            try:
                embedder = daemon.connect(self.model, self.query_prefix, start=False, idle=self.idle, backend=self.backend)
                self.source = "daemon"
                return self._fallback_to_process(embedder)
            except DaemonUnavailable:
                pass
            if self.status is not None:
                self.status(f"loading embedding model {self.model} in a background process (once; later commands "
                            "reuse it)...")
            try:
                embedder = daemon.connect(self.model, self.query_prefix, start=True, idle=self.idle, backend=self.backend)
                self.source = "daemon"
                return self._fallback_to_process(embedder)
            except DaemonUnavailable as exc:
                if self.status is not None:
                    self.status(f"no warm process ({exc}); loading the model here")
        elif self.status is not None:
            self.status(f"loading embedding model {self.model}...")
        from .embeddings import load_embedder

        self.source = "process"
        return load_embedder(self.model, query_prefix=self.query_prefix, backend=self.backend)

    def _fallback_to_process(self, remote: Any) -> Any:
        """A remote embedder that, should the warm process go away and not start again, loads the model here."""
        def load() -> Embedder:
            from .embeddings import load_embedder

            if self.status is not None:
                self.status(f"the warm process is gone and cannot be started again; loading {self.model} here")
            self.source = "process"
            return load_embedder(self.model, query_prefix=self.query_prefix, backend=self.backend)

        remote.fallback = load
        return remote

    def use(self, embedder: Embedder) -> None:
        """Take an embedder already obtained (a model just checked by ``reindex --model``)."""
        self._embedder = embedder
        self._failure = None

    def reset(self) -> None:
        self._embedder = None
        self._batch = None
        self._failure = None
