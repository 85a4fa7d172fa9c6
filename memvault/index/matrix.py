"""The vectors a warm process keeps in memory, and their exact scan.

A process that searches more than once holds every stored vector as one matrix, as the index stores it: int8 (D bytes
a row; see :mod:`memvault.index.quantize`) or float32. An int8 row's score is the cosine of the quantized vectors,
``row · q / (|row| |q|)`` with ``q`` the query quantized the same way: sqlite-vec's ``vec_distance_cosine`` of the same
two int8 vectors, so a cold process (sqlite-vec's KNN) and a warm one rank alike. Every row is scored: the integer
products come from :mod:`.products` (ONNX Runtime's prepacked integer kernels), exact, 10k rows in about 0.4 ms and
100k in 2.4-2.8 (in two halves side by side); a float32 matrix is scored by BLAS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .documents import KINDS
from .products import Products, by_numpy
from .quantize import int8_matrix

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

#: Rows turned into floats at a time when lengths are computed.
BLOCK = 8192
#: Above this many rows, the cosines of a second vector of a recall (the runbooks' feedback) are read by scoring
#: the matrix the recall scanned whole again with its kernel (2 ms at 50k rows) rather than a SQLite lookup a row
#: (~37 µs each): :meth:`memvault.index.Index.similarities`.
WHOLE_SCAN_ROWS = 32


@dataclass(frozen=True)
class VectorMatrix:
    """Every stored vector of one index, with its chunk rowid and kind."""

    rowids: Any  #: int64 (N,)
    kinds: Any  #: str (N,)
    #: int8 or float32 (N, D); None for a loaded int8 matrix whose rows the products' sessions hold (packed): one
    #: copy in memory, not two.
    vectors: Any
    #: int8 only: each row's length (float32), and the rows' products with a query.
    norms: Any = None
    products: Products | None = None

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

    def scores(self, vector: Any, rows: Any = None) -> Any:
        """Cosine of the query to every row, or to ``rows`` (indexes), as float32. Both give the same figure for a
        row: the integer products are exact either way."""
        import numpy as np

        v = self.floats(vector)
        if not self.int8:
            return (self.vectors if rows is None else self.vectors[rows]) @ v
        q = int8_matrix(v[None, :])[0]
        length = np.float32(np.linalg.norm(q.astype(np.float32)) or 1.0)
        if rows is None:
            dots = self.products(q) if self.products is not None else by_numpy(self.vectors, q)
            return dots.astype(np.float32) / (self.norms * length)
        dots = self.vectors[rows].astype(np.float32) @ q.astype(np.float32)
        return dots / (self.norms[rows] * length)

    def top_k(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, cosine) of the ``limit`` best rows of ``kinds``, best first."""
        return self.scan(vector, kinds, limit)[0]

    def scan(self, vector: Any, kinds: Sequence[str], limit: int) -> tuple[list[tuple[int, float]], Any]:
        """:meth:`top_k`, and the cosine of every row (of every kind, in row order): what :meth:`cosines` would
        compute for any row of this query, to be read instead."""
        import numpy as np

        if min(limit, len(self)) <= 0:
            return [], None
        whole = scores = self.scores(vector)
        keep = np.isfinite(scores)  # a float32 row of NaN or inf (a damaged page) has no cosine: no neighbour
        if set(kinds) != set(KINDS):
            keep &= np.isin(self.kinds, list(kinds))
        if not keep.all():
            scores = np.where(keep, scores, -np.inf)
        k = min(limit, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        top = top[scores[top] != -np.inf]
        return list(zip(self.rowids[top].tolist(), scores[top].astype(float).tolist())), whole

    def cosines(self, positions: dict[int, int], vector: Any, rowids: Sequence[int],
                whole: Any = None) -> dict[int, float] | None:
        """Cosine of the query to the given chunks (``positions``: rowid -> row), read from ``whole`` when given
        (:meth:`scan`'s cosines of every row for this query); None when neither ``whole`` nor the rows are here
        (the caller asks SQLite)."""
        if whole is None and self.vectors is None:
            return None
        wanted = [(r, positions[r]) for r in rowids if r in positions]
        if not wanted:
            return {}
        at = [i for _, i in wanted]
        scores = whole[at] if whole is not None else self.scores(vector, at)
        return {r: float(s) for (r, _), s in zip(wanted, scores.tolist())}


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
    products = Products(vectors)
    return VectorMatrix(rowids, kinds, vectors if products.rows is not None else None, norms, products)


__all__ = ["VectorMatrix", "load"]
