"""Phase 2 of keeping the index in step (phase 1, the text, is :mod:`memvault.index.update`): pending chunks get
their vectors, as a pipeline that keeps the model busy.

Three stages run at once. Text: in a rebuild, phase 1 runs in a thread of its own (:class:`TextFeed`), committing
docs and chunks a batch of files at a time; elsewhere it is already done. Encoding (the caller's thread): re-cut
what was cut by words (the model's tokenizer is used by this thread only: a fast tokenizer must not be called from
two threads at once), take the pending chunks, and encode them a group at a time, each group sorted by length so
the model's batches pad little. Writing: a thread of its own commits the vectors of one group, in one short
transaction, while the next group is encoded.

No lock is held while the model works: every transaction is one batch. A chunk's rowid is never reused and its
text never changes under it, so a vector is written only if its chunk is still there and pending; work done is
kept (a later call takes what is left), so pending work only shrinks. A crash loses at most the batches in flight.
"""
from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..rules.errors import MemvaultError, ModelUnavailable
from .db import CHUNK_TEXT, connect, marks, transaction
from .documents import Doc, Splitter, chunk_rows, chunk_text, context_ids, cut_spans, resolve_context
from .quantize import DEFAULT_TYPE, encode, param, stored
from .update import (EMBED_GROUP, INSERT_CHUNK, Progress, SyncReport, _drop_chunks, _has_vectors, _time,
                     mean_vector, model_id, pending_count, vector_blob, with_context)

if TYPE_CHECKING:
    import sqlite3

    from ..models.embeddings import Embedder, ModelIdentity

#: Pending chunks of docs cut by the model, oldest first: rowid, kind, the text to embed, a raw episode's context
#: as stored (:func:`memvault.index.documents.stored_context`) and its time. Docs still cut by words are re-cut
#: first (their chunks may change).
PENDING_SQL = (f"SELECT c.rowid, d.kind, {CHUNK_TEXT.format(c='c')}, d.context, d.created FROM chunks c JOIN docs d "
               "ON d.doc = c.doc WHERE c.model IS NULL AND d.cut = 'model' ORDER BY c.rowid LIMIT ?")
#: The texts of one doc's chunks, in order (what its vectors were computed from).
DOC_CHUNK_TEXTS = (f"SELECT c.chunk, {CHUNK_TEXT.format(c='c')} FROM chunks c JOIN docs d ON d.doc = c.doc "
                   "WHERE c.doc = ?")
#: Seconds the encoder waits for the next batch of text before it looks again.
TEXT_WAIT = 0.05
#: The smallest group the encoder takes rather than wait for text (one batch of the model's).
MIN_GROUP = 32

Row = tuple[int, str, str, "str | None"]  # rowid, kind, text, context


class VectorCache(Protocol):
    """Vectors other processes (other hosts of a team) already computed: text -> float32 bytes, per model."""

    def get(self, identity: Any, texts: Sequence[str]) -> dict[str, bytes]: ...

    def put(self, identity: Any, items: Sequence[tuple[str, bytes]]) -> None: ...


class TextFeed:
    """Phase 1 in a thread of its own: ``run(committed, stop)`` writes text and calls ``committed()`` after each
    batch; the encoder waits on it (:meth:`wait`) and knows when it is over (:attr:`done`)."""

    def __init__(self, run: Callable[[Callable[[], None], threading.Event], Any]) -> None:
        self._run = run
        self._ready = threading.Event()
        self.done = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="memvault-text", daemon=True)

    def _main(self) -> None:
        try:
            self._run(self._ready.set, self.stop)
        except BaseException as exc:  # handed to the encoder's thread, which raises it
            self.error = exc
        finally:
            self.done.set()
            self._ready.set()

    def start(self) -> TextFeed:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> None:
        """Until the next batch is committed (or ``timeout``)."""
        self._ready.wait(timeout)
        self._ready.clear()

    def close(self) -> None:
        """Stop between two batches, wait for the thread, raise what it raised."""
        self.stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error


class VectorWriter:
    """Commits the vectors of a group in a thread of its own, with its own connection, one transaction a group."""

    def __init__(self, path: Path, model: int, report: SyncReport) -> None:
        self._path, self._model, self._report = path, model, report
        self._queue: queue.Queue[tuple[list[Row], dict[str, bytes]] | None] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.written = 0
        #: The rowids of each group this writer is done with (committed, or found gone): no longer pending, so the
        #: encoder stops setting them aside (appended here, taken by the encoder's thread: a deque is safe for that).
        self.finished: collections.deque[list[int]] = collections.deque()
        self._thread = threading.Thread(target=self._main, name="memvault-vectors", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        conn = None
        try:
            conn = connect(self._path)
            while (item := self._queue.get()) is not None:
                if self.error is None:
                    started = time.perf_counter()
                    self.written += write_vectors(conn, self._model, *item)
                    _time(self._report, "write vectors", started)
                    self.finished.append([r[0] for r in item[0]])
        except BaseException as exc:
            self.error = exc
            while self._queue.get() is not None:  # keep taking, so the encoder never blocks on a dead writer
                pass
        finally:
            if conn is not None:
                conn.close()

    def put(self, rows: list[Row], vectors: dict[str, bytes]) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put((rows, vectors))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error


def write_vectors(conn: sqlite3.Connection, model: int, rows: Sequence[Row], vectors: dict[str, bytes]) -> int:
    """Store the vectors of ``rows`` whose chunk is still there and pending (one transaction), as the index stores
    vectors (:mod:`.quantize`; ``vectors`` are float32 bytes); how many were."""
    with transaction(conn):
        kind = stored(conn) or DEFAULT_TYPE
        ids = [r[0] for r in rows]
        still = set()
        for start in range(0, len(ids), 500):
            batch = ids[start:start + 500]
            still.update(r[0] for r in conn.execute(
                f"SELECT rowid FROM chunks WHERE rowid IN ({marks(batch)}) AND model IS NULL", batch))
        keep = [r for r in rows if r[0] in still]
        conn.executemany("UPDATE chunks SET model = ? WHERE rowid = ?", [(model, r[0]) for r in keep])
        conn.executemany(f"INSERT INTO chunks_vec(rowid, kind, embedding) VALUES (?,?,{param(kind)})",
                         [(rowid, doc_kind, encode(kind, vectors[text] if not context else
                                                            mean_vector(vectors[text],
                                                                        vectors[with_context(text, context)])))
                          for rowid, doc_kind, text, context in keep])
    return len(keep)


def _vectors(embedder: Embedder, identity: ModelIdentity, texts: list[str], cache: VectorCache | None,
             report: SyncReport) -> dict[str, bytes]:
    """text -> vector bytes: from the cache where it has them, embedded (and given to the cache) otherwise."""
    import numpy as np

    found: dict[str, bytes] = {}
    if cache is not None:
        try:
            found = cache.get(identity, texts)
        except MemvaultError as exc:  # the shared cache is a saving, never a reason to fail
            report.warnings.append(f"embedding cache unavailable ({exc}); embedding here")
            cache = None
        # another host's row: taken only when it is a vector of this model's width that has a cosine
        found = {t: b for t, b in found.items() if len(b) == 4 * identity.dims
                 and usable(np.frombuffer(b, dtype=np.float32)[None, :])[0]}
    todo = sorted({t for t in texts if t not in found}, key=len)  # similar lengths in one batch pad less
    if todo:
        matrix = np.asarray(embedder.embed_documents(todo), dtype=np.float32)
        if matrix.shape != (len(todo), identity.dims):
            raise ModelUnavailable(embedder.identity.name, f"it gave vectors of shape {matrix.shape} for "
                                   f"{len(todo)} texts where its identity says {identity.dims} dimensions; "
                                   "nothing was stored")
        # a row of NaN, inf or zeros has no cosine: not stored, its chunk stays pending (embed_pending says so)
        made = {t: vector_blob(v) for t, v, ok in zip(todo, matrix, usable(matrix)) if ok}
        found.update(made)
        report.chunks_embedded += len(made)
        if cache is not None:
            try:
                cache.put(identity, list(made.items()))
            except MemvaultError as exc:
                report.warnings.append(f"embedding cache not updated ({exc})")
    report.chunks_from_cache += len(texts) - len(todo)
    return found


def usable(matrix: Any) -> Any:
    """Which rows of a float32 matrix have a cosine: finite, and not all zeros (a boolean per row)."""
    import numpy as np

    return np.isfinite(matrix).all(axis=1) & (np.abs(matrix).max(axis=1, initial=0.0) > 0)


def _unusable(conn: sqlite3.Connection, rows: list[Row], vectors: dict[str, bytes], model: str,
              report: SyncReport) -> list[Row]:
    """The rows whose vectors (or whose context's) the model did not give (:func:`usable`), and a warning naming
    their memories; they stay pending, found by keywords only."""
    bad = [r for r in rows if r[2] not in vectors or (r[3] and with_context(r[2], r[3]) not in vectors)]
    if bad:
        items = sorted({f"{k}:{i}" for k, i in conn.execute(
            f"SELECT d.kind, d.item_id FROM chunks c JOIN docs d ON d.doc = c.doc WHERE c.rowid IN ({marks(bad)})",
            [r[0] for r in bad])})
        shown = ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")
        report.warnings.append(f"the model {model} gave no usable vector (NaN, inf or all zeros) for {shown}: "
                               "found by keywords only")
    return bad


def recut_words(conn: sqlite3.Connection, splitter: Splitter, batch: int = 256) -> int:
    """Re-cut docs that were cut by words while no model was at hand (or, in a rebuild, while the model was busy);
    chunks whose text does not change keep their vectors. Returns the number of docs re-cut."""
    done = 0
    has_vec = _has_vectors(conn)
    while True:
        rows = conn.execute("SELECT doc, hash, header, body, kind FROM docs WHERE cut = 'words' LIMIT ?",
                            (batch,)).fetchall()
        if not rows:
            return done
        docs = [Doc(kind=r[4], item_id="", path="", header=r[2], body=r[3], importance=0, confidence=0, source=None,
                    created=None, updated=None) for r in rows]
        cuts = cut_spans(docs, splitter, None)
        with transaction(conn):
            for doc, (doc_id, h, header, body, _kind), (spans, how) in zip(docs, rows, cuts):
                current = conn.execute("SELECT hash FROM docs WHERE doc = ?", (doc_id,)).fetchone()
                if current is None or current[0] != h:
                    continue  # changed meanwhile: its new text was cut by whoever wrote it
                # chunk by chunk: one whose text is the same keeps its vector (a release that adds a runbook's
                # steps embeds the steps, not its windows again)
                old = dict(conn.execute(DOC_CHUNK_TEXTS, (doc_id,)).fetchall())
                new = {j: (s, n, chunk_text(header, body, s, s + n)) for j, s, n in chunk_rows(doc, spans)}
                stale = [j for j, text in old.items() if j not in new or new[j][2] != text]
                if stale:
                    _drop_chunks(conn, [doc_id], has_vec, stale)
                conn.executemany(INSERT_CHUNK, [(doc_id, j, s, n) for j, (s, n, text) in sorted(new.items())
                                                if old.get(j) != text])
                conn.execute("UPDATE docs SET cut = ? WHERE doc = ?", (how, doc_id))
        done += len(rows)


def embed_pending(conn: sqlite3.Connection, embedder: Embedder, identity: ModelIdentity, *, limit: int | None,
                  progress: Progress | None, report: SyncReport, cache: VectorCache | None = None,
                  feed: TextFeed | None = None) -> SyncReport:
    """Phase 2 (see the module doc). ``limit`` caps the chunks embedded by this call; the rest stay pending.
    With a ``cache`` (a team's shared embedding cache), vectors it holds are taken, not computed, and the ones
    computed here are added to it. With a ``feed``, text is still being written: chunks are taken as it commits
    them, until it is done."""
    path = Path(conn.execute("PRAGMA database_list").fetchone()[2])
    writer = VectorWriter(path, model_id(conn, identity), report)
    goal = limit
    # chunks encoded by this call whose vectors the writer has not committed yet (and those the model gave no usable
    # vector for: they stay pending). Only those: a set of every chunk encoded made each look fetch (and resolve the
    # context of) all of them again, and a rebuild of 500k episodes quadratic.
    taken: set[int] = set()
    buffer: list[Row] = []
    done = 0
    try:
        while goal is None or done < goal:
            finished = feed is None or feed.done.is_set()  # read before looking: a batch committed after is seen
            while writer.finished:
                taken.difference_update(writer.finished.popleft())
            started = time.perf_counter()
            recut_words(conn, embedder)
            _time(report, "cut", started)
            room = EMBED_GROUP - len(buffer) if goal is None else min(EMBED_GROUP - len(buffer), goal - done - len(buffer))
            rows = pending_rows(conn, room + len(taken)) if room > 0 else []
            fresh = [r for r in rows if r[0] not in taken]
            buffer += fresh[:room]
            taken.update(r[0] for r in fresh[:room])
            full = len(buffer) >= EMBED_GROUP or (goal is not None and done + len(buffer) >= goal)
            # Nothing new yet: encode what there is rather than wait (one model batch at least), the model idle is
            # the one cost a pipeline cannot win back.
            idle = not fresh and len(buffer) >= MIN_GROUP
            if buffer and (full or idle or (finished and not fresh)):
                started = time.perf_counter()
                texts = [r[2] for r in buffer] + [with_context(r[2], r[3]) for r in buffer if r[3]]
                vectors = _vectors(embedder, identity, texts, cache, report)
                _time(report, "encode", started)
                bad = _unusable(conn, buffer, vectors, embedder.identity.name, report)
                writer.put([r for r in buffer if r not in bad] if bad else buffer, vectors)
                done += len(buffer)
                buffer = []
                if progress is not None:
                    progress(done, max(done, goal or 0, done + pending_estimate(conn, feed)))
            elif not fresh:
                if finished:
                    break
                started = time.perf_counter()
                assert feed is not None
                feed.wait(TEXT_WAIT)
                _time(report, "wait for text", started)
        if feed is not None and feed.error is not None:
            raise feed.error
    finally:
        if feed is not None:
            feed.stop.set()
        writer.close()
    report.chunks_pending = pending_count(conn)
    return report


def pending_rows(conn: sqlite3.Connection, limit: int) -> list[Row]:
    """Up to ``limit`` pending chunks (:data:`PENDING_SQL`), each with the text of its context: the turns a raw
    episode's context names are read here, so their text is stored once, as their own bodies."""
    rows = conn.execute(PENDING_SQL, (limit,)).fetchall()
    wanted = sorted({i for r in rows for i in (context_ids(r[3]) or ())})
    bodies: dict[str, str] = {}
    for start in range(0, len(wanted), 500):
        batch = wanted[start:start + 500]
        bodies.update(conn.execute(f"SELECT item_id, body FROM docs WHERE kind = 'episode' AND item_id IN "
                                   f"({marks(batch)})", batch).fetchall())
    return [(rowid, kind, text, resolve_context(stored, created, bodies))
            for rowid, kind, text, stored, created in rows]


def pending_estimate(conn: sqlite3.Connection, feed: TextFeed | None) -> int:
    """Chunks still to embed, as far as is known yet (a rebuild's text may still be coming)."""
    return pending_count(conn) if feed is None or feed.done.is_set() else pending_count(conn) + EMBED_GROUP
