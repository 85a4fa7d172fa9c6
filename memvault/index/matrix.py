"""The vectors a warm process keeps in memory, and their exact and two-stage scans.

A process that searches more than once holds every stored vector as one matrix, as the index stores it: int8 (D bytes
a row; see :mod:`memvault.index.quantize`) or float32. An int8 row's score is the cosine of the quantized vectors,
``row · q / (|row| |q|)`` with ``q`` the query quantized the same way: sqlite-vec's ``vec_distance_cosine`` of the same
two int8 vectors, so a cold process (sqlite-vec's KNN) and a warm one rank alike. The products of small integers
are exact in float32 (127² x D < 2²⁴ for D up to 1,040), so the integers are multiplied by BLAS as floats.

numpy has no fast int8 product, and turning the whole matrix into floats for each query costs more than scanning
float32 (7.5 ms against 1.7 at 10k rows). A matrix of up to :data:`FLOATS_MAX` rows is also held as floats, once,
and scored whole. A larger one is scanned in two stages once it holds more than twice the rows to rescore: the sign
bit of every component (D/8 bytes a row) is compared with the query's (Hamming distance, a popcount over 64-bit
words: 48 bytes a row to read instead of 1,536), and the :func:`rescored` closest rows are scored exactly as above.
MiniLM, 200 queries: recall@10 against the exact float32 scan .9905 at 100k (pooled vectors, .992 scoring every
int8 row), 10x faster than the float32 scan there (docs/benchmarks.md, issue 24); at 10k rows, scored whole, .994.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..rules.workers import beside
from .documents import KINDS
from .quantize import int8_matrix

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Sequence

#: Rows the first stage hands to the exact score: at least this many (2,000 kept .9875 at 100k, 4,000 .9905) ...
RESCORE_MIN = 4_000
#: ... and this many per result asked for.
RESCORE_PER_RESULT = 20
#: From this many rows on, a two-stage scan runs in two halves side by side (at 100k rows: 2.8-3.2 ms against
#: 3.9-4.0 in a recall; at 10k waking a worker cost more than half the scan saved, 2.0 against 1.7 ms).
SPLIT_MIN = 50_000
#: Up to this many rows an int8 matrix is also held as floats (4 bytes a component, 24 MB at most), and every row is
#: scored exactly: 10k rows in 0.43 ms against 0.9 for the two stages, with no row missed by the first.
FLOATS_MAX = 16_384
#: Rows turned into floats at a time when lengths are computed.
BLOCK = 8192


def rescored(limit: int) -> int:
    """How many rows the first stage keeps for a search of ``limit`` results."""
    return max(RESCORE_MIN, RESCORE_PER_RESULT * limit)


@dataclass(frozen=True)
class VectorMatrix:
    """Every stored vector of one index, with its chunk rowid and kind."""

    rowids: Any  #: int64 (N,)
    kinds: Any  #: str (N,)
    vectors: Any  #: int8 or float32 (N, D)
    #: int8 only: each row's length (float32), and its sign bits as 64-bit words, one row per word (words, N).
    norms: Any = None
    signs: Any = None
    #: int8 only, up to :data:`FLOATS_MAX` rows: the same integers as float32 (no conversion for each query).
    float_rows: Any = None

    @property
    def int8(self) -> bool:
        return self.norms is not None

    def __len__(self) -> int:
        return len(self.rowids)

    @staticmethod
    def floats(vector: Any) -> Any:
        """A query vector (bytes or array) as a float32 numpy vector."""
        import numpy as np

        if isinstance(vector, (bytes, bytearray, memoryview)):
            return np.frombuffer(vector, dtype=np.float32)
        return np.asarray(vector, dtype=np.float32).ravel()

    def query(self, vector: Any) -> Any:
        """The query as this matrix scores it: float32, or quantized as the rows are (:func:`quantize.int8_matrix`,
        the integers :func:`quantize.int8_blob` gives sqlite-vec), as floats divided by their length."""
        import numpy as np

        v = self.floats(vector)
        if not self.int8:
            return v
        q = int8_matrix(v[None, :])[0].astype(np.float32)
        norm = float(np.linalg.norm(q))
        return q / norm if norm else q

    def scores(self, query: Any, rows: Any = None) -> Any:
        """Cosine of the (prepared) query to every row, or to ``rows`` (indexes)."""
        import numpy as np

        if not self.int8:
            return (self.vectors if rows is None else self.vectors[rows]) @ query
        norms = self.norms if rows is None else self.norms[rows]
        if self.float_rows is not None:
            return ((self.float_rows if rows is None else self.float_rows[rows]) @ query) / norms
        return ((self.vectors if rows is None else self.vectors[rows]).astype(np.float32) @ query) / norms

    def top_k(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, cosine) of the ``limit`` best rows of ``kinds``, best first. A two-stage scan of
        :data:`SPLIT_MIN` rows or more runs in two halves, one in a worker thread
        (:func:`memvault.rules.workers.beside`: numpy lets go of the interpreter)."""
        import numpy as np

        n = len(self)
        k = min(limit, n)
        if k <= 0:
            return []
        query = self.query(vector)
        mask = np.isin(self.kinds, list(kinds)) if set(kinds) != set(KINDS) else None
        keep = rescored(limit)
        if self.int8 and n > 2 * keep and self.float_rows is None:
            bits = sign_words(np.asarray(query)[None, :])[:, 0]
            both = beside if n >= SPLIT_MIN else _in_turn
            mid = n // 2
            (rows_b, far_b), (rows_a, far_a) = both(lambda: self._closest(bits, mask, mid, n, keep),
                                                    lambda: self._closest(bits, mask, 0, mid, keep))
            rows, far = np.concatenate([rows_a, rows_b]), np.concatenate([far_a, far_b])
            if len(rows) > keep:  # the best ``keep`` of each half hold the best ``keep`` of the whole
                rows = rows[np.argpartition(far, keep - 1)[:keep]]
            rows = np.sort(rows)  # in order: the rows are read in one pass
            if mask is not None:
                rows = rows[mask[rows]]
            half = len(rows) // 2
            tail, head = both(lambda: self.scores(query, rows[half:]), lambda: self.scores(query, rows[:half]))
            scores = np.concatenate([head, tail])
        else:
            rows = None
            scores = self.scores(query)
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)
        k = min(k, len(scores))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        index = top if rows is None else rows[top]
        keep_rows = scores[top] != -np.inf
        return list(zip(self.rowids[index][keep_rows].tolist(), scores[top][keep_rows].astype(float).tolist()))

    def _closest(self, bits: Any, mask: Any, start: int, stop: int, keep: int) -> tuple[Any, Any]:
        """The (at most) ``keep`` rows of ``start:stop`` whose signs differ least from the query's ``bits``, and
        how many differ (a row not of the kinds asked for: the most)."""
        import numpy as np

        distance = self.hamming(bits, start, stop)
        if mask is not None:
            distance = np.where(mask[start:stop], distance, np.iinfo(distance.dtype).max)
        if stop - start > keep:
            near = np.argpartition(distance, keep - 1)[:keep]
            return near + start, distance[near]
        return np.arange(start, stop), distance

    def hamming(self, bits: Any, start: int, stop: int) -> Any:
        """How many components of each row of ``start:stop`` differ in sign from the query's (its sign ``bits``,
        64-bit words as :func:`sign_words` packs them), as uint16."""
        import numpy as np

        out = np.zeros(stop - start, dtype=np.uint16)
        for word, q in zip(self.signs, bits):
            out += np.bitwise_count(word[start:stop] ^ q)
        return out

    def cosines(self, positions: dict[int, int], vector: Any, rowids: Sequence[int]) -> dict[int, float]:
        """Cosine of the query to the given chunks (``positions``: rowid -> row)."""
        wanted = [(r, positions[r]) for r in rowids if r in positions]
        if not wanted:
            return {}
        scores = self.scores(self.query(vector), [i for _, i in wanted])
        return {r: float(s) for (r, _), s in zip(wanted, scores)}


def _in_turn(other: Callable[[], Any], mine: Callable[[], Any]) -> tuple[Any, Any]:
    """:func:`beside`'s two halves, one after the other in this thread (a matrix too small to share)."""
    return other(), mine()


def sign_words(rows: Any) -> Any:
    """The sign bits of int8 rows (positive: 1), packed into 64-bit words: shape (words, N), one array per word, so a
    distance is a few passes over N contiguous words."""
    import numpy as np

    packed = np.packbits(rows > 0, axis=1)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed.view(np.uint64).T)


def load(conn: sqlite3.Connection, kind: str) -> VectorMatrix | None:
    """Every stored vector as one matrix (``kind``: how the index stores them), or None when there is none."""
    import numpy as np

    rows = conn.execute("SELECT rowid, kind, embedding FROM chunks_vec").fetchall()
    if not rows:
        return None
    rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    kinds = np.array([r[1] for r in rows])
    data = b"".join(r[2] for r in rows)
    del rows
    if kind != "int8":
        return VectorMatrix(rowids, kinds, np.frombuffer(data, dtype=np.float32).reshape(len(rowids), -1))
    vectors = np.frombuffer(data, dtype=np.int8).reshape(len(rowids), -1)
    norms = np.empty(len(rowids), dtype=np.float32)
    for start in range(0, len(rowids), BLOCK):  # a block at a time: no float copy of the whole matrix
        norms[start:start + BLOCK] = np.linalg.norm(vectors[start:start + BLOCK].astype(np.float32), axis=1)
    norms[norms == 0] = 1.0
    floats = vectors.astype(np.float32) if len(rowids) <= FLOATS_MAX else None
    return VectorMatrix(rowids, kinds, vectors, norms, sign_words(vectors), floats)


__all__ = ["VectorMatrix", "load", "sign_words", "rescored"]
