"""How the index stores its vectors: 8-bit integers (the default) or float32 (``[index] vectors``).

int8: each vector is scaled by its own largest component, ``q = round(v * 127 / max|v|)``, and stored as sqlite-vec's
``int8[D]`` (D bytes a row instead of 4·D). Cosine similarity does not depend on a vector's length, so a row's scale
need not be stored: sqlite-vec's cosine of two such vectors, and the warm process's dot product of the int8 row and
the query divided by both lengths, are the cosine of the quantized vectors, the same number on both paths. A query is
quantized the same way. Scaling each vector by its own maximum uses all 255 levels whatever the model (a normalised
384-d vector has components around ±0.05, so sqlite-vec's fixed 'unit' scale would use about 6 of them), needs no
scale learned from data (so nothing to keep in step when the vault grows), and measured on MiniLM as well as one
scale chosen from the data (docs/benchmarks.md, issue 24).

The format is stamped in the index (``meta`` key ``vectors``) beside the model identity; an index built before the
stamp holds float32 vectors and is converted in place (no model needed: the float32 vectors are quantized) when int8
is wanted. Going back to float32 needs the model (``memvault reindex --full``).
"""
from __future__ import annotations

import array
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

VECTOR_TYPES = ("int8", "float32")
DEFAULT_TYPE = "int8"
#: The meta key of the stamp: ``{"type": "int8"}``.
META_KEY = "vectors"
LEVELS = 127
#: Rows converted per statement when a float32 index becomes int8 (read by rowid range: :data:`CONVERT_SQL`).
CONVERT_BATCH = 4096
CONVERT_SQL = "SELECT id, kind, embedding FROM chunks_vec_float32 WHERE id > ? ORDER BY id LIMIT ?"


def column(kind: str, dims: int) -> str:
    """The vec0 column type of ``kind`` vectors."""
    return f"int8[{int(dims)}]" if kind == "int8" else f"float[{int(dims)}]"


def param(kind: str) -> str:
    """How a vector is passed to sqlite-vec in SQL: an int8 blob must be declared as such (``vec_int8``)."""
    return "vec_int8(?)" if kind == "int8" else "?"


def _floats(vector: Any) -> Sequence[float]:
    """A float32 vector (bytes, ``array('f')``, a list, or a numpy array) as a sequence of floats, without numpy for
    the first three (a cold CLI's query vector arrives as bytes)."""
    if isinstance(vector, (bytes, bytearray, memoryview)):
        out = array.array("f")
        out.frombytes(bytes(vector))
        return out
    if isinstance(vector, (array.array, list, tuple)):
        return vector
    return vector.astype("float32").ravel().tolist()  # numpy


def int8_blob(vector: Any) -> bytes:
    """A float32 vector as int8 bytes scaled by its own largest component (all zeros stay zeros)."""
    values = _floats(vector)
    top = max((abs(x) for x in values), default=0.0)
    if not top:
        return bytes(len(values))
    s = LEVELS / top
    return array.array("b", (max(-LEVELS, min(LEVELS, round(x * s))) for x in values)).tobytes()


def int8_matrix(matrix: Any) -> Any:
    """Rows of a float32 matrix as int8, each scaled by its own largest component (numpy)."""
    import numpy as np

    m = np.asarray(matrix, dtype=np.float32).astype(np.float64)  # in doubles, as int8_blob: the same integers
    top = np.abs(m).max(axis=1, keepdims=True)
    top[top == 0] = 1.0
    return np.clip(np.rint(m * (LEVELS / top)), -LEVELS, LEVELS).astype(np.int8)


def vector_blob(vector: Any) -> bytes:
    """float32 bytes as sqlite-vec takes them. Bytes and ``array('f')`` pass through without numpy."""
    if isinstance(vector, (bytes, bytearray, memoryview)):
        return bytes(vector)
    if isinstance(vector, array.array) and vector.typecode == "f":
        return vector.tobytes()
    import numpy as np

    return np.asarray(vector, dtype=np.float32).tobytes()


def encode(kind: str, vector: Any) -> bytes:
    """A float32 vector (bytes or array) as the index stores it."""
    return int8_blob(vector) if kind == "int8" else vector_blob(vector)


def decode(kind: str, blob: bytes) -> Any:
    """A stored vector as a float32 unit vector (numpy): int8 rows are divided by their length."""
    import numpy as np

    if kind != "int8":
        return np.frombuffer(blob, dtype=np.float32)
    v = np.frombuffer(blob, dtype=np.int8).astype(np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v


def decode_rows(kind: str, blobs: list[bytes]) -> Any:
    """Many stored vectors of one length at once, as :func:`decode` gives each: a float32 matrix of unit rows."""
    import numpy as np

    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    if kind != "int8":
        return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)
    m = np.frombuffer(b"".join(blobs), dtype=np.int8).reshape(len(blobs), -1).astype(np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms > 0, norms, np.float32(1.0))


def stored(conn: sqlite3.Connection) -> str | None:
    """The format of the vectors this index holds: from its stamp, else from the vec0 table's declaration (an index
    built before the stamp); None when it has no vector table."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
    if row is not None:
        return str(json.loads(row[0])["type"])
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()
    if sql is None:
        return None
    return "int8" if "int8[" in sql[0] else "float32"


def stamp_problem(conn: sqlite3.Connection) -> str | None:
    """What in the index's stamps this memvault cannot have written, or None: the vectors' format (a JSON object
    naming one of :data:`VECTOR_TYPES`), the model identity, and the vector table declared as both say (its
    width the model's). A newer memvault that stores vectors otherwise says so by a migration, refused before this
    (:class:`memvault.rules.errors.SchemaTooNew`); what is left is damage."""
    from ..models.base import ModelIdentity
    from ..rules.errors import MemvaultError

    meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN (?, 'model')", (META_KEY,)).fetchall())
    try:
        found = json.loads(meta[META_KEY]) if META_KEY in meta else None
        identity = ModelIdentity.from_dict(json.loads(meta["model"])) if "model" in meta else None
    except (ValueError, TypeError, AttributeError, MemvaultError) as exc:
        return f"a stamp it cannot read ({exc})"
    kind = found.get("type") if isinstance(found, dict) else found
    if found is not None and kind not in VECTOR_TYPES:
        return f"vectors stored as {kind!r}, which memvault never writes"
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()
    if identity is None or sql is None:
        return None
    declared = column(stored(conn) or DEFAULT_TYPE, identity.dims)
    return None if declared in sql[0] else f"a vector table that is not {declared} as its model says"


def stamp(conn: sqlite3.Connection, kind: str) -> None:
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (META_KEY, json.dumps({"type": kind})))


def create_table(conn: sqlite3.Connection, kind: str, dims: int) -> None:
    """The vec0 table of ``kind`` vectors, and the stamp."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0("
                 f"kind text, embedding {column(kind, dims)} distance_metric=cosine)")
    stamp(conn, kind)


def to_int8(conn: sqlite3.Connection, dims: int) -> int:
    """Convert a float32 vector table to int8 in place (the caller holds a transaction); returns the rows converted.
    vec0 cannot be renamed (its shadow tables keep their names), so the rows wait in a plain table meanwhile."""
    import numpy as np

    conn.execute("CREATE TABLE chunks_vec_float32(id INTEGER PRIMARY KEY, kind TEXT, embedding BLOB)")
    conn.execute("INSERT INTO chunks_vec_float32 SELECT rowid, kind, embedding FROM chunks_vec")
    conn.execute("DROP TABLE chunks_vec")
    create_table(conn, "int8", dims)
    done, after = 0, -1
    while True:
        rows = conn.execute(CONVERT_SQL, (after, CONVERT_BATCH)).fetchall()
        if not rows:
            break
        after = rows[-1][0]
        matrix = int8_matrix(np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), -1))
        conn.executemany("INSERT INTO chunks_vec(rowid, kind, embedding) VALUES (?, ?, vec_int8(?))",
                         [(r[0], r[1], q.tobytes()) for r, q in zip(rows, matrix)])
        done += len(rows)
    conn.execute("DROP TABLE chunks_vec_float32")
    return done


__all__ = ["VECTOR_TYPES", "DEFAULT_TYPE", "META_KEY", "column", "param", "int8_blob", "int8_matrix", "vector_blob", "encode",
           "decode", "stored", "stamp_problem", "stamp", "create_table", "to_int8"]
