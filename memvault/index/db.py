"""The index database: the SQLite module that can load sqlite-vec, connections, the schema as named migrations.

Tables (see :mod:`memvault.index` for how they are used):

- ``docs``: one row per memory with the fields recall ranks on, its whole text (``body``), the header joined to
  every chunk, the hash of what was cut and embedded, and how it was cut (``cut``: by the model's tokenizer or,
  while no model was at hand, by words; word cuts are re-cut before they are embedded).
- ``chunks``: the exact text embedded for each chunk, its hash, its kind (for the keyword filter), and the
  identity of the model whose vector is stored for it (NULL while the vector is pending).
- ``chunks_fts``: FTS5 over (text, kind); ``chunks_vec``: a vec0 table of one model's vectors, cosine distance.
- ``files``: the stat of every vault file as last indexed; ``dirs``: directory mtimes; ``meta``: the model
  identity, the chunking version, the time of the last full scan.
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import SearchIndexError
from ..rules.migrations import migrate, transaction

if TYPE_CHECKING:
    import sqlite3

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_core",
        """
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE files(
            path TEXT PRIMARY KEY, kind TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
            ino INTEGER NOT NULL, pending INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE docs(
            doc INTEGER PRIMARY KEY,
            kind TEXT NOT NULL, item_id TEXT NOT NULL, path TEXT NOT NULL,
            body TEXT NOT NULL, hash TEXT NOT NULL,
            importance REAL NOT NULL, confidence REAL NOT NULL,
            source TEXT, created TEXT, updated TEXT,
            UNIQUE(kind, item_id));
        CREATE INDEX docs_path ON docs(path);
        CREATE TABLE chunks(
            rowid INTEGER PRIMARY KEY,
            doc INTEGER NOT NULL REFERENCES docs(doc) ON DELETE CASCADE,
            chunk INTEGER NOT NULL, text TEXT NOT NULL, hash TEXT NOT NULL, model TEXT,
            UNIQUE(doc, chunk));
        CREATE INDEX chunks_pending ON chunks(model) WHERE model IS NULL;
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            text, content='chunks', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2');
        CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, new.text);
        END;
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
        END;
        CREATE TRIGGER chunks_au AFTER UPDATE OF text ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
            INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, new.text);
        END;
        CREATE VIEW items AS
            SELECT c.rowid AS rowid, d.kind, d.item_id AS id, c.chunk, c.text, c.hash, d.path,
                   d.importance, d.confidence, d.source, d.created, d.updated, c.model
            FROM chunks c JOIN docs d ON d.doc = c.doc;
        """,
    ),
    (
        "0002_fact_staleness",
        """
        ALTER TABLE docs ADD COLUMN valid_until TEXT;
        ALTER TABLE docs ADD COLUMN review_after REAL;
        """,
    ),
    (
        "0003_dirs",
        """
        CREATE TABLE dirs(path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL);
        """,
    ),
    (
        # The kind moves into the keyword index itself: a kind filter joined to the FTS match made SQLite's
        # planner walk every doc of that kind (through the UNIQUE(kind, item_id) index) and run the match once
        # per doc, quadratic in the vault. As an FTS5 column, the filter is one more posting list to intersect.
        # The header is kept so a doc cut by words can be re-cut by the model's tokenizer; every file is re-read
        # once (files.mtime_ns = -1) to fill it, which re-embeds nothing (the doc hashes do not change). Episodes
        # keep their own kind (ekind) and what a procedure_run ran (ref), so a run can be attached to its runbook.
        "0004_kind_in_fts_header_cut",
        """
        ALTER TABLE chunks ADD COLUMN kind TEXT NOT NULL DEFAULT '';
        UPDATE chunks SET kind = (SELECT d.kind FROM docs d WHERE d.doc = chunks.doc);
        DROP TRIGGER chunks_ai;
        DROP TRIGGER chunks_ad;
        DROP TRIGGER chunks_au;
        DROP TABLE chunks_fts;
        CREATE VIRTUAL TABLE chunks_fts USING fts5(
            text, kind, content='chunks', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2');
        CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
            INSERT INTO chunks_fts(rowid, text, kind) VALUES (new.rowid, new.text, new.kind);
        END;
        CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, text, kind) VALUES ('delete', old.rowid, old.text, old.kind);
        END;
        CREATE TRIGGER chunks_au AFTER UPDATE OF text, kind ON chunks BEGIN
            INSERT INTO chunks_fts(chunks_fts, rowid, text, kind) VALUES ('delete', old.rowid, old.text, old.kind);
            INSERT INTO chunks_fts(rowid, text, kind) VALUES (new.rowid, new.text, new.kind);
        END;
        INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
        ALTER TABLE docs ADD COLUMN header TEXT NOT NULL DEFAULT '';
        ALTER TABLE docs ADD COLUMN cut TEXT NOT NULL DEFAULT 'model';
        ALTER TABLE docs ADD COLUMN ekind TEXT;
        ALTER TABLE docs ADD COLUMN ref TEXT;
        ALTER TABLE docs ADD COLUMN meta TEXT;
        ALTER TABLE docs ADD COLUMN context TEXT;
        CREATE INDEX docs_ref ON docs(ref, created) WHERE ref IS NOT NULL;
        CREATE INDEX docs_episode_time ON docs(created) WHERE kind = 'episode';
        CREATE INDEX docs_conversation ON docs(source, created, item_id) WHERE kind = 'episode' AND ekind = 'raw';
        CREATE INDEX docs_words ON docs(doc) WHERE cut = 'words';
        ALTER TABLE files ADD COLUMN tail TEXT;
        UPDATE files SET mtime_ns = -1;
        """,
    ),
]


# ------------------------------------------------------------------------------------------------ sqlite
def sqlite_module() -> Any:
    """A DB-API sqlite module that can load extensions: the stdlib one when it can, else pysqlite3/sqlean.

    Some CPythons (pyenv's default build among them) compile the stdlib module without
    ``enable_load_extension``; sqlite-vec needs it.
    """
    import sqlite3

    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import pysqlite3.dbapi2 as pysqlite3  # type: ignore[import-not-found]

        return pysqlite3
    except ImportError:
        pass
    try:
        import sqlean  # type: ignore[import-not-found]

        return sqlean
    except ImportError:
        raise SearchIndexError(
            "this Python's sqlite3 cannot load extensions and neither pysqlite3-binary nor sqlean.py is "
            "installed: pip install pysqlite3-binary (Linux x86_64) or sqlean.py"
        ) from None


def vec_extension_path() -> str:
    """The sqlite-vec loadable extension, found without importing the ``sqlite_vec`` package (whose import
    pulls in numpy: about 0.15 s that a keyword-only recall from a cold CLI should not pay)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise SearchIndexError("sqlite-vec is not installed: pip install sqlite-vec")
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")


def connect(path: Path) -> sqlite3.Connection:
    """Open ``path`` with sqlite-vec loaded, WAL, a busy timeout, mmap and secure delete.

    ``secure_delete`` zeroes freed pages, so text that was purged is gone from the file, not just unlinked.
    """
    module = sqlite_module()
    try:
        conn = module.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
        conn.enable_load_extension(True)
        conn.load_extension(vec_extension_path())
        conn.enable_load_extension(False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("PRAGMA mmap_size=1073741824")
        conn.execute("PRAGMA cache_size=-65536")
    except module.Error as exc:
        raise SearchIndexError(f"{path}: cannot open the index: {exc}") from None
    return conn


def is_corruption(exc: BaseException) -> bool:
    """Whether a database error means the file is damaged (as opposed to busy or misused)."""
    text = str(exc).lower()
    return any(word in text for word in ("malformed", "not a database", "file is encrypted", "database corrupt"))


def marks(items: Sequence[Any] | set[Any]) -> str:
    return ",".join("?" * len(items))


def batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = ["MIGRATIONS", "sqlite_module", "vec_extension_path", "connect", "is_corruption", "migrate", "transaction",
           "marks", "batches"]
