"""The index database: the SQLite module that can load sqlite-vec, connections, the schema as named migrations.

Tables (see :mod:`memvault.index` for how they are used):

- ``docs``: one row per memory with the fields recall ranks on, its whole text (``body``, the only copy of it in
  the index), the header put before every chunk when it is embedded, the fields the keyword index weighs apart
  (``item_id`` as the key; the category or description and the tags in ``meta``), the hash of what was cut and
  embedded (8 bytes: :func:`hash_key`), and how it was cut (``cut``: by the model's tokenizer or, while no
  model was at hand, by words; word cuts are re-cut before they are embedded).
- ``chunks``: where each chunk lies in its doc's body (``start``, ``len``, in characters) and which model's vector
  is stored for it (``model``, an id in ``models``; NULL while the vector is pending). A chunk's text is the
  header, a newline, and that piece of the body (:data:`CHUNK_TEXT`; the ``chunk_texts`` view shows it). Rowids
  are never reused (AUTOINCREMENT): a chunk's text never changes under its rowid, so a vector computed for a rowid
  is written only if that rowid still exists and is pending.
- ``chunks_fts``: FTS5 over (body, key, category, tags, kind) whose external content is the ``chunk_fields``
  view over chunks and docs: it keeps the words, not the text. ``chunks_vec``: a vec0 table of one model's
  vectors, cosine distance, 8-bit or float32 (:mod:`memvault.index.quantize`).
- ``files``: the stat of every vault file as last indexed; ``dirs``: directory mtimes; ``kinds``: docs per kind
  (kept by trigger: the keyword search's kind filter takes the shorter list); ``meta``: the model identity, how vectors
  are stored, the chunking version, the time of the last full scan.
"""
from __future__ import annotations

import importlib.util
import os
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import IndexDamaged, SearchIndexError, UnsafePath
from ..rules.fsutil import sqlite_path
from ..rules.migrations import SchemaWatch, Step, migrate, statements, transaction

if TYPE_CHECKING:
    import sqlite3

# ------------------------------------------------------------------------------------------------ schema
#: The text of chunk ``c`` of doc ``d`` as it is embedded: the header and a newline (when there is a header), then
#: the chunk's piece of the body. :func:`memvault.index.documents.chunk_text` is the same in Python.
CHUNK_TEXT = ("CASE WHEN d.header = '' THEN '' ELSE d.header || char(10) END || substr(d.body, {c}.start + 1, "
              "{c}.len)")
#: The keyword index's columns. A query's words are matched in the first four (:data:`FTS_SEARCHED`), each
#: weighed on its own by BM25; ``kind`` is only a filter. The body comes first: FTS5 marks the column of every
#: position outside the first, and most words are in the body (31 bytes a row less at 10k facts).
FTS_COLUMNS = ("body", "key", "category", "tags", "kind")
FTS_SEARCHED = "{body key category tags}"
#: FTS5 keeps the number of rows it indexes in its "averages" record (id 1 of the %_data table), then the tokens of
#: each column (words.tokens): a count of the chunks in one row read, where COUNT(*) walks every chunk.
FTS_ROWS_SQL = "SELECT block FROM chunks_fts_data WHERE id = 1"


def varints(blob: bytes) -> list[int]:
    """The SQLite varints of an FTS5 record, in order (big-endian, 7 bits a byte with the high bit set on every byte
    of a value but its last; a value's 9th byte is taken whole)."""
    out: list[int] = []
    value = size = 0
    for byte in blob:
        if size == 8:
            out.append((value << 8) | byte)
            value = size = 0
            continue
        value, size = (value << 7) | (byte & 0x7F), size + 1
        if not byte & 0x80:
            out.append(value)
            value = size = 0
    return out
#: What the keyword index holds of chunk ``{c}`` (alias) of doc ``{d}``: its own piece of the body (the header's
#: words are in the fields, not repeated), its key (a fact's key, a runbook's name; an episode's id is no word), its
#: category (a fact's category, a runbook's description line) and tags (the JSON array's text: the tokenizer keeps
#: the words), both from the doc's ``meta`` JSON (json_each would be simpler, but FTS5 cannot read a view that calls
#: a table-valued function), and its kind. The ``chunk_fields`` view is these values; FTS5 reads it as its external content (to rebuild), never as
#: a copy of the text.
_FTS_EXPRESSIONS = ("substr({d}.body, {c}.start + 1, {c}.len)",
                    "CASE WHEN {d}.kind = 'episode' THEN '' ELSE {d}.item_id END",
                    "coalesce(json_extract({d}.meta, '$.category'), json_extract({d}.meta, '$.description'), '')",
                    "coalesce(json_extract({d}.meta, '$.tags'), '')",
                    "{d}.kind")
FTS_VALUES = ", ".join(_FTS_EXPRESSIONS)
_COLS = ", ".join(FTS_COLUMNS)
_ADD = f"INSERT INTO chunks_fts(rowid, {_COLS})"
_DEL = f"INSERT INTO chunks_fts(chunks_fts, rowid, {_COLS})"
#: A doc's fields that its keyword rows are made of.
_DOC_FIELDS = ("item_id", "kind", "meta", "body")
_CHANGED = " OR ".join(f"old.{f} IS NOT new.{f}" for f in _DOC_FIELDS)

_TEXT_ONCE_SCHEMA = """
    CREATE TABLE models(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
    CREATE TABLE chunks_new(
        rowid INTEGER PRIMARY KEY AUTOINCREMENT,
        doc INTEGER NOT NULL REFERENCES docs(doc) ON DELETE CASCADE,
        chunk INTEGER NOT NULL, start INTEGER NOT NULL, len INTEGER NOT NULL,
        model INTEGER REFERENCES models(id),
        UNIQUE(doc, chunk));
    CREATE TABLE files_new(
        path TEXT PRIMARY KEY, kind TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
        ino INTEGER NOT NULL, pending INTEGER NOT NULL DEFAULT 0, tail TEXT) WITHOUT ROWID;
    CREATE TABLE dirs_new(path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE kinds(kind TEXT PRIMARY KEY, docs INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO kinds SELECT kind, COUNT(*) FROM docs GROUP BY kind;
    CREATE TRIGGER docs_ai_kinds AFTER INSERT ON docs BEGIN
        INSERT INTO kinds(kind, docs) VALUES (new.kind, 1) ON CONFLICT(kind) DO UPDATE SET docs = docs + 1;
    END;
    CREATE TRIGGER docs_ad_kinds AFTER DELETE ON docs BEGIN
        UPDATE kinds SET docs = docs - 1 WHERE kind = old.kind;
    END;
"""
# The keyword rows follow the chunks and their docs by trigger, whatever the order of the writes: a row is deleted
# with exactly the values it was added with (FTS5 needs them, and keeps its row count and lengths for BM25 right),
# read before they change. A doc deleted takes its rows first (its chunks go after it, by cascade, when the doc
# is no longer there to read: their own trigger then finds nothing to do).
def _fields_view(steps: bool) -> str:
    """The keyword index's external content (see above); with ``steps``, a runbook's steps (chunks numbered below
    0, :func:`memvault.index.documents.chunk_rows`) are not in it: they are vectors only."""
    where = " WHERE c.chunk >= 0" if steps else ""
    return f"""
    CREATE VIEW chunk_fields AS
        SELECT c.rowid AS rowid, {", ".join(f"{e} AS {n}" for e, n in zip(_FTS_EXPRESSIONS, FTS_COLUMNS)).format(
            c="c", d="d")} FROM chunks c JOIN docs d ON d.doc = c.doc{where};
"""


def _keyword_triggers(steps: bool) -> str:
    """The triggers that keep the keyword rows as the chunks and docs are (see above); with ``steps``, a chunk
    numbered below 0 has none."""
    new, old = (" WHEN new.chunk >= 0", " WHEN old.chunk >= 0") if steps else ("", "")
    only = " AND c.chunk >= 0" if steps else ""
    return f"""
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks{new} BEGIN
        {_ADD} SELECT new.rowid, {FTS_VALUES.format(c="new", d="d")} FROM docs d WHERE d.doc = new.doc;
    END;
    CREATE TRIGGER chunks_bd BEFORE DELETE ON chunks{old} BEGIN
        {_DEL} SELECT 'delete', old.rowid, {FTS_VALUES.format(c="old", d="d")} FROM docs d WHERE d.doc = old.doc;
    END;
    CREATE TRIGGER chunks_bu BEFORE UPDATE OF doc, start, len ON chunks{old} BEGIN
        {_DEL} SELECT 'delete', old.rowid, {FTS_VALUES.format(c="old", d="d")} FROM docs d WHERE d.doc = old.doc;
    END;
    CREATE TRIGGER chunks_au AFTER UPDATE OF doc, start, len ON chunks{new} BEGIN
        {_ADD} SELECT new.rowid, {FTS_VALUES.format(c="new", d="d")} FROM docs d WHERE d.doc = new.doc;
    END;
    CREATE TRIGGER docs_bd BEFORE DELETE ON docs BEGIN
        {_DEL} SELECT 'delete', c.rowid, {FTS_VALUES.format(c="c", d="old")} FROM chunks c WHERE c.doc = old.doc{only};
    END;
    CREATE TRIGGER docs_bu BEFORE UPDATE OF {", ".join(_DOC_FIELDS)} ON docs WHEN {_CHANGED} BEGIN
        {_DEL} SELECT 'delete', c.rowid, {FTS_VALUES.format(c="c", d="old")} FROM chunks c WHERE c.doc = old.doc{only};
    END;
    CREATE TRIGGER docs_au AFTER UPDATE OF {", ".join(_DOC_FIELDS)} ON docs WHEN {_CHANGED} BEGIN
        {_ADD} SELECT c.rowid, {FTS_VALUES.format(c="c", d="new")} FROM chunks c WHERE c.doc = new.doc{only};
    END;
"""


_STEPS = f"""
    DROP VIEW chunk_fields;
    DROP TRIGGER chunks_ai;
    DROP TRIGGER chunks_bd;
    DROP TRIGGER chunks_bu;
    DROP TRIGGER chunks_au;
    DROP TRIGGER docs_bd;
    DROP TRIGGER docs_bu;
    DROP TRIGGER docs_au;
    {_fields_view(steps=True)}
    {_keyword_triggers(steps=True)}
"""


_TEXT_ONCE_SWAP = f"""
    DROP TRIGGER chunks_ai;
    DROP TRIGGER chunks_ad;
    DROP TRIGGER chunks_au;
    DROP TABLE chunks_fts;
    DROP VIEW items;
    DROP TABLE chunks;
    ALTER TABLE chunks_new RENAME TO chunks;
    CREATE INDEX chunks_pending ON chunks(model) WHERE model IS NULL;
    INSERT INTO files_new SELECT path, kind, size, mtime_ns, ino, pending, tail FROM files;
    DROP TABLE files;
    ALTER TABLE files_new RENAME TO files;
    INSERT INTO dirs_new SELECT path, mtime_ns FROM dirs;
    DROP TABLE dirs;
    ALTER TABLE dirs_new RENAME TO dirs;
{_fields_view(steps=False)}    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        {_COLS}, content='chunk_fields', content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2');
    INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild');
{_keyword_triggers(steps=False)}    CREATE VIEW chunk_texts AS
        SELECT c.rowid AS rowid, d.kind AS kind, d.item_id AS id, c.chunk AS chunk,
               {CHUNK_TEXT.format(c="c")} AS text, m.key AS model
        FROM chunks c JOIN docs d ON d.doc = c.doc LEFT JOIN models m ON m.id = c.model;
"""


def hash_key(text_hash: str) -> bytes:
    """A doc's hash as the index stores it: the first 8 bytes of the digest, as a blob (a column of TEXT affinity
    keeps a blob as it is) instead of 32 hex characters; it only tells whether one doc's text changed."""
    return bytes.fromhex(text_hash[:16])


def _locate(header: str, body: str, text: str, after: int) -> tuple[int, int] | None:
    """(start, len) of the piece of ``body`` that, after ``header``, is exactly ``text``; None if there is none."""
    head = header + "\n" if header else ""
    if not text.startswith(head):
        return None
    piece = text[len(head):]
    at = body.find(piece, after)
    if at < 0:
        at = body.find(piece)
    return None if at < 0 else (at, len(piece))


def _text_once(conn: sqlite3.Connection) -> None:
    """0005: every text once. Chunks become spans of their doc's body (the text was kept in the doc and in the
    chunk), the keyword index reads its external content through a view of both and has the key, category and
    tags as fields BM25 weighs apart, a chunk's model becomes an id, and files and dirs lose their rowid (their path
    is their key).

    No vector is computed again: a chunk whose text its span reproduces keeps its vector. One that cannot be
    reproduced (cut by a memvault that did it otherwise) loses its vector and its doc is re-cut before the next
    embedding. The category, description and tags come from the docs' ``meta``, which the next full sync fills
    (``documents.FIELDS``) without embedding anything again. A doc's hash becomes 8 bytes (:func:`hash_key`).
    """
    for statement in statements(_TEXT_ONCE_SCHEMA):
        conn.execute(statement)
    conn.execute("INSERT INTO models(key) SELECT DISTINCT model FROM chunks WHERE model IS NOT NULL ORDER BY 1")
    models = {key: id_ for id_, key in conn.execute("SELECT id, key FROM models")}
    conn.executemany("UPDATE docs SET hash = ? WHERE doc = ?",
                     [(hash_key(h), doc) for doc, h in conn.execute("SELECT doc, hash FROM docs").fetchall()])
    has_vec = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'").fetchone() is not None
    rows, lost, recut = [], [], set()
    current, header, body, after = None, "", "", 0
    for rowid, doc, chunk, text, model in conn.execute(
            "SELECT rowid, doc, chunk, text, model FROM chunks ORDER BY doc, chunk").fetchall():
        if doc != current:
            current, after = doc, 0
            header, body = conn.execute("SELECT header, body FROM docs WHERE doc = ?", (doc,)).fetchone()
        span = _locate(header, body, text, after)
        if span is None:
            recut.add(doc)
            span = (0, 0)
        else:
            after = span[0]
        rows.append((rowid, doc, chunk, *span, models.get(model)))
    for i, row in enumerate(rows):
        if row[1] in recut:
            if row[5] is not None:
                lost.append(row[0])
            rows[i] = (*row[:5], None)
    conn.executemany("INSERT INTO chunks_new(rowid, doc, chunk, start, len, model) VALUES (?,?,?,?,?,?)", rows)
    conn.executemany("UPDATE docs SET cut = 'words' WHERE doc = ?", [(d,) for d in sorted(recut)])
    if has_vec:
        conn.executemany("DELETE FROM chunks_vec WHERE rowid = ?", [(r,) for r in lost])
    for statement in statements(_TEXT_ONCE_SWAP):
        conn.execute(statement)


def _vector_format(conn: sqlite3.Connection) -> None:
    """0006: the index says how it stores its vectors (``meta`` key ``vectors``); every index before held float32.
    Whether they become int8 is the setting's (``[index] vectors``): :class:`memvault.index.Index` converts them
    when it opens the file (:func:`memvault.index.quantize.to_int8`)."""
    from .quantize import stamp, stored

    kind = stored(conn)
    if kind is not None:
        stamp(conn, kind)


def _times_in_order(conn: sqlite3.Connection) -> None:
    """0008: every time in one fixed-width UTC form (:data:`memvault.rules.timeutil.INDEX_TIME`), whose text order
    is time order. The index held an episode's time as its line wrote it, and compared the text: "11:30+02:00" came
    after "10:00Z", "10:00:00.500Z" before "10:00:00Z", and a bare date before every time of its day. Nothing is
    read again or embedded: the times are rewritten where they are."""
    from ..rules.timeutil import index_time

    rows = conn.execute("SELECT doc, created, updated FROM docs WHERE created IS NOT NULL OR updated IS NOT NULL")
    memo: dict[str | None, str | None] = {}  # an episode's two times are one; a runbook's often another's

    def new(value: str | None) -> str | None:
        if value not in memo:
            memo[value] = index_time(value)
        return memo[value]

    conn.executemany("UPDATE docs SET created = ?, updated = ? WHERE doc = ?",
                     [(new(created), new(updated), doc) for doc, created, updated in rows.fetchall()])


MIGRATIONS: list[tuple[str, Step]] = [
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
    ("0005_index_text_once", _text_once),
    ("0006_vector_format", _vector_format),
    # A runbook's steps are vectors only: chunks numbered below 0 have no keyword row (documents.chunk_rows).
    ("0007_runbook_steps", _STEPS),
    ("0008_times_in_order", _times_in_order),
    # The overview's counts per kind and source (listings.COUNTS_SQL) read this in GROUP BY order instead of every
    # row of docs sorted in a temporary B-tree (685 ms at 520,900 rows, 30 ms here); path is in it so the count for a
    # scoped reader, which leaves out the paths it may not read, is covered too (70 ms against 553 ms).
    ("0009_counts_by_source", "CREATE INDEX docs_kind_source ON docs(kind, source, path);"),
]


# ------------------------------------------------------------------------------------------------ sqlite
def used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes of the file's pages in use (its size less the free pages)."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((conn.execute("PRAGMA page_count").fetchone()[0]
                - conn.execute("PRAGMA freelist_count").fetchone()[0]) * page_size)


def summary(conn: sqlite3.Connection, target: Path, identity: Any, vectors: str) -> dict[str, Any]:
    """What ``stats`` shows of the index ``target`` open on ``conn``: its counts, sizes and model (``identity``, a
    :class:`memvault.models.base.ModelIdentity` or None), its vectors stored as ``vectors`` (int8 or float32)."""
    from .documents import KINDS

    kinds = dict(conn.execute("SELECT kind, COUNT(*) FROM docs GROUP BY kind").fetchall())
    chunks = conn.execute("SELECT COUNT(*), COUNT(model) FROM chunks").fetchone()
    size = sum(Path(str(target) + s).stat().st_size for s in ("", "-wal") if Path(str(target) + s).exists())
    vec_bytes = None
    if identity is not None:
        vec_bytes = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(vectors)), 0) FROM chunks_vec_vector_chunks00").fetchone()[0]
    return {
        "exists": True,
        "path": str(target),
        "items": {k: kinds.get(k, 0) for k in KINDS},
        "chunks": chunks[0],
        "vectors": chunks[1],
        "pending_vectors": chunks[0] - chunks[1],
        "file_bytes": size,
        "used_bytes": used_bytes(conn),
        "model": identity.to_dict() if identity else None,
        "vector_store_bytes": vec_bytes,
        #: bytes a dimension of a stored vector (int8: 1, float32: 4), for projections
        "vector_width": 1 if vectors == "int8" else 4,
        # what the relevance scale keeps in meta after a rebuild (~160 KB at 384-d): fixed, not per row
        "fixed_bytes": conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM meta "
                                    "WHERE key >= 'calibration:' AND key < 'calibration;'").fetchone()[0],
    }


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


def connect(path: Path, *, create: bool = True) -> sqlite3.Connection:
    """Open ``path`` with sqlite-vec loaded, WAL, a busy timeout, mmap and secure delete; without ``create`` a file
    that is not there (a generation another process's rebuild just removed) is an error, never made anew, empty.

    ``secure_delete`` zeroes freed pages, so text that was purged is gone from the file, not just unlinked.
    """
    module = sqlite_module()
    try:  # sqlite_path: no link at the file, its -wal/-shm or on the way (SQLite cannot be given O_NOFOLLOW)
        if create:
            conn = module.connect(str(sqlite_path(path)), timeout=30, isolation_level=None, check_same_thread=False)
        else:  # mode=rw: SQLite opens the file or fails, never makes it
            conn = module.connect(f"file:{urllib.parse.quote(str(sqlite_path(path, create=False)))}?mode=rw",
                                  timeout=30, isolation_level=None, check_same_thread=False, uri=True)
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
    except UnsafePath as exc:
        raise SearchIndexError(f"{exc}; the index is not opened") from None
    return conn


def is_corruption(exc: BaseException) -> bool:
    """Whether a database error means the file is damaged (as opposed to busy or misused)."""
    if isinstance(exc, IndexDamaged):
        return True
    text = str(exc).lower()
    return any(word in text for word in ("malformed", "not a database", "file is encrypted", "database corrupt"))


def marks(items: Sequence[Any] | set[Any]) -> str:
    return ",".join("?" * len(items))


def batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = ["MIGRATIONS", "sqlite_module", "vec_extension_path", "connect", "is_corruption", "migrate", "transaction",
           "SchemaWatch", "used_bytes", "summary", "marks", "batches"]
