"""The embedding cache: (model, text hash) -> vector, shared by every vault and host on one PostgreSQL."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...rules.errors import InvalidValue
from ..update import vector_blob
from .connection import Connected, Vector
from .migrations import migrate_global

if TYPE_CHECKING:
    from ...models.embeddings import ModelIdentity


def vector_key(identity: ModelIdentity) -> str:
    """What makes a document vector: model name, revision and dimensions (the query prefix only changes queries)."""
    return f"{identity.name}@{identity.revision}/{int(identity.dims)}"


def text_sha256(text: str) -> bytes:
    """The embedding cache's key for a chunk text: sha256 of its exact UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def register_model(conn: Any, identity: ModelIdentity) -> int:
    """The models row of this document-vector identity (created when new): one statement for a new model."""
    key = vector_key(identity)
    row = conn.execute("INSERT INTO memvault.models(key, identity, dims) VALUES (%s, %s, %s) ON CONFLICT (key) "
                       "DO NOTHING RETURNING model_id", (key, json.dumps(identity.to_dict()), int(identity.dims))
                       ).fetchone()
    if row is None:
        row = conn.execute("SELECT model_id FROM memvault.models WHERE key = %s", (key,)).fetchone()
    return int(row[0])


#: A cache row any host may have written is taken only when it is a vector of its model's width with a cosine (the
#: column takes any width: a row of 16 dimensions for a model of 32 failed every host's embed of a batch holding that
#: text, for ever; a row of zeros became a chunk's vector). pgvector refuses NaN and infinity itself.
USABLE = "vector_dims(e.embedding) = %s AND vector_norm(e.embedding) > 0"


def cache_hits(conn: Any, model_id: int, hashes: Sequence[bytes], dims: int) -> set[bytes]:
    """Which of ``hashes`` the cache holds for this model (of ``dims`` dimensions), usable (no vectors sent
    back)."""
    if not hashes:
        return set()
    rows = conn.execute("SELECT e.text_hash FROM memvault.embedding_cache e WHERE e.model_id = %s "
                        f"AND e.text_hash = ANY(%s::bytea[]) AND {USABLE}",
                        (model_id, list(hashes), int(dims))).fetchall()
    return {bytes(r[0]) for r in rows}


def cache_store(conn: Any, model_id: int, items: Sequence[tuple[bytes, bytes]]) -> None:
    """(text hash, float32 LE vector) pairs into the cache, one statement; an entry already there is kept, unless
    it is not usable (see :data:`USABLE`)."""
    if not items:
        return
    conn.execute("INSERT INTO memvault.embedding_cache AS e (model_id, text_hash, embedding) "
                 "SELECT %s, u.h, u.e FROM unnest(%s::bytea[], %b::vector[]) AS u(h, e) ON CONFLICT (model_id, "
                 "text_hash) DO UPDATE SET embedding = excluded.embedding, created = now() "
                 "WHERE vector_dims(e.embedding) <> vector_dims(excluded.embedding) OR vector_norm(e.embedding) = 0",
                 (model_id, [h for h, _ in items], [Vector(v) for _, v in items]))


class EmbeddingCache(Connected):
    """(model, text hash) -> vector, shared by every vault and host on one PostgreSQL. Used by both backends:
    a host with a local SQLite index also takes vectors other hosts computed.

    The model is keyed by its document-vector identity (name, revision, dims: :func:`vector_key`), a text by the
    sha256 of its exact bytes. A get or put of any number of texts is one statement (plus one the first time a
    model is seen by this object). Entries are never evicted; ``created`` tells their age.
    """

    what = "embedding cache"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._models: dict[str, int] = {}

    def _forget(self) -> None:
        self._models = {}

    def _on_connect(self, conn: Any) -> None:
        migrate_global(conn, self.url)  # the tables it uses are global ones

    def get(self, identity: ModelIdentity, texts: Sequence[str]) -> dict[str, bytes]:
        """text -> float32 little-endian bytes, for the texts the cache holds (others are left out)."""
        by_hash = {text_sha256(t): t for t in texts}
        return {by_hash[h]: v for h, v in self.get_hashes(identity, list(by_hash)).items()}

    def get_hashes(self, identity: ModelIdentity, hashes: Sequence[bytes]) -> dict[bytes, bytes]:
        """Like :meth:`get`, keyed by :func:`text_sha256` (what an index already stores per chunk)."""
        if not hashes:
            return {}
        with self._errors("get") as conn:
            rows = conn.execute(
                "SELECT e.text_hash, e.embedding FROM memvault.embedding_cache e JOIN memvault.models m "
                f"ON m.model_id = e.model_id WHERE m.key = %s AND e.text_hash = ANY(%s::bytea[]) AND {USABLE}",
                (vector_key(identity), list(hashes), int(identity.dims)), binary=True).fetchall()
        return {bytes(h): v for h, v in rows}

    def put(self, identity: ModelIdentity, items: Sequence[tuple[str, bytes]]) -> None:
        """Store (text, float32 LE vector) pairs; one that is already cached is kept (two hosts race harmlessly)."""
        self.put_hashes(identity, [(text_sha256(t), vector_blob(v)) for t, v in items])

    def put_hashes(self, identity: ModelIdentity, items: Sequence[tuple[bytes, bytes]]) -> None:
        if not items:
            return
        dims = int(identity.dims)
        if any(len(v) != 4 * dims for _, v in items):
            raise InvalidValue("vector", f"{identity.name} vectors have {dims} dimensions")
        with self._errors("put") as conn:
            key = vector_key(identity)
            if key not in self._models:
                self._models[key] = register_model(conn, identity)
            cache_store(conn, self._models[key], items)

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
