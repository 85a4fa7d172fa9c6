"""The index: a derived SQLite file (sqlite-vec vectors + FTS5 keywords) over the vault's text.

The vault's files are the only truth. ``.memvault/index.db`` can be deleted and regenerated at any time with
the same results. Layout:

- ``docs``: one row per memory (a fact, an episode, a procedure) with the fields recall ranks on, its whole
  text and the hash of the text that was chunked and embedded.
- ``chunks``: the exact text embedded for each chunk of a doc (facts and episodes are usually one chunk,
  procedures several), its hash, and the identity of the model whose vector is stored for it (NULL while
  the vector is pending). ``items`` is a view joining both: one row per indexed item.
- ``chunks_fts``: FTS5 over chunk text; ``chunks_vec``: a vec0 table of one model's vectors, cosine distance.
- ``files``: the stat (size, mtime, inode) of every vault file as last indexed, so an unchanged vault is
  verified with ``stat`` alone, and a changed file is re-read, diffed by (id, hash) and only new text embedded.
- ``meta``: the model identity of every vector in the file. The index never holds vectors of two models.

``index.db`` is a symlink to a generation file ``index-<n>.db``. A full rebuild (model change) writes a new
generation beside the old one and swaps the symlink with an atomic rename: recall keeps reading the old one
during the rebuild, and a crash mid-way leaves it in place. SQLite names WAL files after the symlink's
target, so each generation has its own WAL.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import FactParseError, MemvaultError, ModelUnavailable, SearchIndexError
from .facts import Fact, default_confidence
from .fsutil import locked
from .procedures import parse_metadata
from .timeutil import format_time

if TYPE_CHECKING:
    import sqlite3

    from .embeddings import Embedder, ModelIdentity
    from .vault import Vault

KINDS = ("fact", "episode", "procedure")
INDEX_NAME = "index.db"
# Fallback chunking when no model (hence no tokenizer) is at hand: words per window and overlap.
FALLBACK_WORDS, FALLBACK_OVERLAP = 160, 24
CHUNK_OVERLAP = 32
# How text is cut, recorded in the index: when a release changes it, the next sync with the model re-reads every
# file and re-embeds the docs whose chunks change. (128-token windows for procedures were measured and rejected:
# tldr_self R@5 +0.009, cheat_to_tldr R@10 -0.031, alert_to_runbook R@10 -0.009; docs/benchmarks.md.)
CHUNKING = "v1:model-window/32"
DIRECTORY_CHECK_INTERVAL = 1.0  # seconds between two directory checks by one process (see refresh)
EMBED_GROUP = 1024  # texts per encode call: large enough for full batches, small enough for a live progress bar

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
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise SearchIndexError("sqlite-vec is not installed: pip install sqlite-vec")
    return os.path.join(list(spec.submodule_search_locations)[0], "vec0")


def connect(path: Path) -> sqlite3.Connection:
    """Open ``path`` with sqlite-vec loaded, WAL, a busy timeout and mmap (halves vec0 scan time)."""
    module = sqlite_module()
    try:
        conn = module.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
        conn.enable_load_extension(True)
        conn.load_extension(vec_extension_path())
        conn.enable_load_extension(False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA mmap_size=1073741824")
        conn.execute("PRAGMA cache_size=-65536")
    except module.Error as exc:
        raise SearchIndexError(f"{path}: cannot open the index: {exc}") from None
    return conn


def migrate(conn: sqlite3.Connection, migrations: Sequence[tuple[str, str]] = MIGRATIONS) -> list[str]:
    """Apply the named migrations this database has not recorded, in order, each in its own transaction."""
    conn.execute("CREATE TABLE IF NOT EXISTS migrations(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    applied = []
    for name, sql in migrations:
        if name in done:
            continue
        with transaction(conn):
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute("INSERT INTO migrations VALUES (?, ?)", (name, format_time(_now())))
        applied.append(name)
    return applied


def _statements(sql: str) -> list[str]:
    """Split a migration script on ';' outside trigger bodies (sqlite3.complete_statement does the parsing)."""
    module = sqlite_module()
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if module.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _now() -> Any:
    from .timeutil import now

    return now()


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def vector_blob(vector: Any) -> bytes:
    """float32 bytes as sqlite-vec takes them. Bytes and ``array('f')`` pass through without numpy."""
    import array

    if isinstance(vector, (bytes, bytearray, memoryview)):
        return bytes(vector)
    if isinstance(vector, array.array) and vector.typecode == "f":
        return vector.tobytes()
    import numpy as np

    return np.asarray(vector, dtype=np.float32).tobytes()


def model_key(identity: ModelIdentity) -> str:
    return f"{identity.name}@{identity.revision}"


# ------------------------------------------------------------------------------------------------ docs
@dataclass
class Doc:
    """One memory as the index sees it: what to chunk and embed, and the fields recall ranks on."""

    kind: str
    item_id: str
    path: str
    header: str  # joined to every chunk (procedure name and description; a fact's key, category and tags)
    body: str
    importance: float
    confidence: float
    source: str | None
    created: str | None
    updated: str | None
    valid_until: str | None = None
    review_after: float | None = None

    @property
    def hash(self) -> str:
        """Changes when the text to embed changes (a change of how it is cut is handled by ``CHUNKING``)."""
        return _hash(self.header + "\x00" + self.body)


def fact_doc(fact: Fact, rel: str) -> Doc:
    words = [fact.key.replace("/", " ").replace("-", " ").replace("_", " ")]
    if fact.category:
        words.append(fact.category)
    words.extend(fact.tags)
    return Doc(
        kind="fact",
        item_id=fact.key,
        path=rel,
        header=" · ".join(words),
        body=fact.text,
        importance=fact.importance,
        confidence=fact.confidence,
        source=fact.source,
        created=format_time(fact.created) if fact.created else None,
        updated=format_time(fact.updated) if fact.updated else None,
        valid_until=fact.valid_until.isoformat() if fact.valid_until else None,
        review_after=fact.review_after,
    )


def procedure_doc(name: str, path: Path, rel: str, mtime: float) -> Doc:
    text = path.read_bytes().decode("utf-8", errors="replace")
    description, tags = parse_metadata(path, text)
    header = name + (f" — {description}" if description else "") + (f" ({', '.join(tags)})" if tags else "")
    stamp = format_time(_from_ts(mtime))
    return Doc("procedure", name, rel, header, text, 0.5, 1.0, None, stamp, stamp)


def episode_docs(vault: Vault, path: Path, rel: str, problems: list[Any] | None = None) -> list[Doc]:
    docs = []
    for e in vault.episodes.read_file(path, problems):
        meta_importance = e.meta.get("importance") if isinstance(e.meta, dict) else None
        importance = float(meta_importance) if isinstance(meta_importance, (int, float)) else 0.5
        docs.append(
            Doc("episode", e.id, rel, "", e.text, max(0.0, min(1.0, importance)), default_confidence(e.source),
                e.source, e.created_at, e.created_at)
        )
    return docs


def _from_ts(ts: float) -> Any:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, timezone.utc).replace(microsecond=0)


def fallback_split(text: str, words: int = FALLBACK_WORDS, overlap: int = FALLBACK_OVERLAP) -> list[str]:
    """Word windows (exact substrings) for when no tokenizer is loaded; replaced once the model is there."""
    spans = [m.span() for m in re.finditer(r"\S+", text)]
    if len(spans) <= words:
        return [text]
    out = []
    start = 0
    while start < len(spans):
        end = min(start + words, len(spans))
        out.append(text[spans[start][0] : spans[end - 1][1]])
        if end == len(spans):
            break
        start = end - overlap
    return out


# ------------------------------------------------------------------------------------------------ reports
@dataclass
class SyncReport:
    files_seen: int = 0
    files_changed: int = 0
    files_removed: int = 0
    docs_added: int = 0
    docs_changed: int = 0
    docs_removed: int = 0
    metadata_only: int = 0
    chunks_embedded: int = 0
    chunks_pending: int = 0
    model_loaded: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.files_changed or self.files_removed)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


EmbedderProvider = Callable[[], "Embedder | None"]
Progress = Callable[[int, int], None]


# ------------------------------------------------------------------------------------------------ index
class Index:
    """The search index of one vault. Reached as ``vault.index``."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self.dir = vault.state_dir
        self.link = self.dir / INDEX_NAME
        self._conn: sqlite3.Connection | None = None
        self._conn_target: Path | None = None
        self._vector_searches = 0
        self._last_refresh = float("-inf")
        self._vector_cache: tuple[Any, Any] | None = None

    # -- files and generations ---------------------------------------------------------------------------
    def current_target(self) -> Path | None:
        """The generation file ``index.db`` points at (or ``index.db`` itself when it is a plain file)."""
        if self.link.is_symlink():
            target = self.dir / os.readlink(self.link)
            return target if target.exists() else None
        return self.link if self.link.exists() else None

    def exists(self) -> bool:
        return self.current_target() is not None

    def lock(self, target: Path) -> contextlib.AbstractContextManager[None]:
        return locked(self.dir / "locks" / f"{target.name}.lock")

    def connection(self) -> sqlite3.Connection:
        """A connection to the current generation (reopened after a swap)."""
        target = self.current_target()
        if target is None:
            raise SearchIndexError(f"{self.link}: no index yet; run 'memvault reindex'")
        if self._conn is None or self._conn_target != target:
            self.close()
            self._conn = connect(target)
            migrate(self._conn)
            self._conn_target = target
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._conn_target = None

    def identity(self, conn: sqlite3.Connection | None = None) -> ModelIdentity | None:
        """The model identity of every vector in the index, or None (keyword-only index)."""
        from .embeddings import ModelIdentity

        conn = conn or self.connection()
        row = conn.execute("SELECT value FROM meta WHERE key = 'model'").fetchone()
        return ModelIdentity.from_dict(json.loads(row[0])) if row else None

    def _set_identity(self, conn: sqlite3.Connection, identity: ModelIdentity) -> None:
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0("
            f"kind text, embedding float[{int(identity.dims)}] distance_metric=cosine)"
        )
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('model', ?)", (json.dumps(identity.to_dict()),))

    # -- scanning ----------------------------------------------------------------------------------------
    def scan(self, dirs: dict[str, int] | None = None) -> dict[str, tuple[str, int, int, int]]:
        """Every indexable vault file: vault-relative path -> (kind, size, mtime_ns, inode). Only ``stat``.

        ``dirs``, when given, receives the mtime of every directory walked (a file created, deleted or renamed
        into place changes its directory's mtime: what :meth:`refresh` checks between full scans).
        """
        out: dict[str, tuple[str, int, int, int]] = {}
        root = str(self.vault.root)
        prefix_len = len(root) + 1  # entry paths all start with the root: slice, no relpath
        for kind, base, suffixes in (
            ("fact", self.vault.facts.dir, (".md",)),
            ("procedure", self.vault.procedures.dir, None),
            ("episode", self.vault.episodes.dir, (".jsonl",)),
        ):
            if dirs is not None:
                dirs[str(base)[prefix_len:]] = _mtime(str(base))
            if not base.is_dir():
                continue
            stack = [base]
            while stack:
                current = stack.pop()
                try:
                    entries = list(os.scandir(current))
                except OSError:
                    continue
                if dirs is not None:
                    dirs[str(current)[prefix_len:]] = _mtime(str(current))
                for entry in entries:
                    name = entry.name
                    if name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                        continue
                    if suffixes is not None and not name.endswith(suffixes):
                        continue
                    if kind == "procedure" and name.endswith(("~", ".tmp", ".swp")):
                        continue
                    try:
                        st = entry.stat()
                    except OSError:
                        continue
                    rel = entry.path[prefix_len:]
                    out[rel if os.sep == "/" else rel.replace(os.sep, "/")] = (kind, st.st_size, st.st_mtime_ns,
                                                                                st.st_ino)
        return out

    def _docs_for(self, rel: str, kind: str, report: SyncReport) -> list[Doc] | None:
        """The docs of one file, or None when the file cannot be read (it is then left out and reported)."""
        path = self.vault.root / rel
        try:
            if kind == "fact":
                key = self.vault.facts.key_for(path)
                if key is None:
                    return []
                return [fact_doc(self.vault.facts.read_file(key, path), rel)]
            if kind == "procedure":
                name = Path(rel).relative_to("procedures").with_suffix("").as_posix()
                return [procedure_doc(name, path, rel, path.stat().st_mtime)]
            problems: list[Any] = []
            docs = episode_docs(self.vault, path, rel, problems)
            report.problems.extend(str(p) for p in problems)
            return docs
        except FileNotFoundError:
            return []
        except FactParseError as exc:
            report.problems.append(str(exc))
            return []
        except (MemvaultError, OSError) as exc:
            report.problems.append(f"{rel}: {exc}")
            return []

    # -- sync --------------------------------------------------------------------------------------------
    def sync(
        self,
        embedder: EmbedderProvider | None = None,
        *,
        embed_limit: int | None = None,
        progress: Progress | None = None,
        only: Sequence[Path] | None = None,
    ) -> SyncReport:
        """Bring the current index in step with the vault's files (creating it if there is none).

        Unchanged files are verified by stat alone. A changed file is re-read and diffed by (id, hash): new or
        changed text is re-chunked and embedded, unchanged items only get their metadata refreshed, and rows
        whose source is gone are deleted. ``embedder`` is called only when something needs embedding; when it
        returns None or raises :class:`ModelUnavailable`, changed text is indexed for keywords at once and its
        vectors are left pending (old vectors of changed text are always removed: nothing stale is served).
        ``embed_limit`` caps the chunks embedded now; the rest stay pending for the next sync.
        ``only`` restricts the work to those files (a write through the library).
        """
        started = time.perf_counter()
        target = self.current_target()
        if target is None:
            return self.rebuild(embedder, progress=progress)
        report = SyncReport()
        with self.lock(target):
            conn = self.connection()
            report = self._sync(conn, embedder, embed_limit=embed_limit, progress=progress, only=only, report=report)
        report.seconds = time.perf_counter() - started
        return report

    def refresh(self, embedder: EmbedderProvider | None = None, *, embed_limit: int | None = None,
                interval: float = 30.0) -> SyncReport:
        """Recall's cheap freshness check: a full :meth:`sync` only when a directory of the vault changed (a
        file was created, deleted, moved, or saved by rename as editors and git do) or ``interval`` seconds
        passed since the last full scan. In-place edits of files recall is about to return are caught by
        :meth:`verify`; other in-place edits wait at most ``interval``."""
        target = self.current_target()
        if target is None:
            return self.sync(embedder, embed_limit=embed_limit)
        if time.monotonic() - self._last_refresh < DIRECTORY_CHECK_INTERVAL:
            return SyncReport()  # a warm process asking again within the second: candidates are still verified
        self._last_refresh = time.monotonic()
        conn = self.connection()
        row = conn.execute("SELECT value FROM meta WHERE key = 'last_scan'").fetchone()
        due = row is None or time.time() - float(row[0]) > interval
        if not due:
            root = str(self.vault.root)
            for rel, mtime in conn.execute("SELECT path, mtime_ns FROM dirs"):
                if _mtime(os.path.join(root, rel)) != mtime:
                    due = True
                    break
        if not due:
            return SyncReport()
        return self.sync(embedder, embed_limit=embed_limit)

    def verify(self, paths: set[str], embedder: EmbedderProvider | None = None, *,
               embed_limit: int | None = None) -> SyncReport | None:
        """Stat the files behind some rows (recall's candidates); sync those that changed since indexed.
        None when all are as indexed."""
        if not paths:
            return None
        conn = self.connection()
        known = {}
        for batch in _batches(sorted(paths), 500):
            for rel, size, mtime, ino in conn.execute(
                f"SELECT path, size, mtime_ns, ino FROM files WHERE path IN ({_marks(batch)})", tuple(batch)
            ):
                known[rel] = (size, mtime, ino)
        root = self.vault.root
        changed = []
        for rel in paths:
            try:
                st = os.stat(root / rel)
                now_stat: tuple[int, int, int] | None = (st.st_size, st.st_mtime_ns, st.st_ino)
            except OSError:
                now_stat = None
            if now_stat != known.get(rel):
                changed.append(root / rel)
        if not changed:
            return None
        return self.sync(embedder, embed_limit=embed_limit, only=changed)

    def _sync(
        self,
        conn: sqlite3.Connection,
        embedder: EmbedderProvider | None,
        *,
        embed_limit: int | None,
        progress: Progress | None,
        only: Sequence[Path] | None,
        report: SyncReport,
    ) -> SyncReport:
        identity = self.identity(conn)
        if only is not None:
            wanted = {os.path.relpath(os.path.abspath(p), self.vault.root).replace(os.sep, "/") for p in only}
            full = self.scan()
            disk = {rel: full[rel] for rel in wanted if rel in full}
            known_rows = conn.execute(
                f"SELECT path, kind, size, mtime_ns, ino, pending FROM files WHERE path IN ({_marks(wanted)})",
                tuple(wanted),
            ).fetchall()
        else:
            dir_times: dict[str, int] = {}
            disk = self.scan(dir_times)
            known_rows = conn.execute("SELECT path, kind, size, mtime_ns, ino, pending FROM files").fetchall()
            with transaction(conn):
                conn.execute("DELETE FROM dirs")
                conn.executemany("INSERT INTO dirs(path, mtime_ns) VALUES (?, ?)", list(dir_times.items()))
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('last_scan', ?)", (repr(time.time()),))
        known = {r[0]: r[1:] for r in known_rows}
        report.files_seen = len(disk)
        can_embed = embedder is not None and identity is not None
        row = conn.execute("SELECT value FROM meta WHERE key = 'chunking'").fetchone()
        # Indexes from before the chunking was recorded were cut the v1 way.
        rechunk = can_embed and only is None and (row[0] if row else "v1:model-window/32") != CHUNKING
        changed = [
            rel
            for rel, (kind, size, mtime, ino) in disk.items()
            if rel not in known
            or known[rel][1:4] != (size, mtime, ino)
            or (known[rel][4] and can_embed)
            or rechunk  # memvault now cuts text differently: every doc's hash changes, each is re-embedded
        ]
        removed = [rel for rel in known if rel not in disk]
        if not changed and not removed:
            return report
        report.files_changed, report.files_removed = len(changed), len(removed)
        docs: list[Doc] = []
        for rel in changed:
            found = self._docs_for(rel, disk[rel][0], report)
            if found is not None:
                docs.extend(found)
        touched = set(changed) | set(removed)
        self._apply(conn, docs, touched, identity, embedder, embed_limit, progress, report, rechunk=rechunk)
        with transaction(conn):
            conn.executemany("DELETE FROM files WHERE path = ?", [(rel,) for rel in removed])
            pending_paths = {
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT d.path FROM chunks c JOIN docs d ON d.doc = c.doc WHERE c.model IS NULL"
                )
            }
            conn.executemany(
                "INSERT OR REPLACE INTO files(path, kind, size, mtime_ns, ino, pending) VALUES (?,?,?,?,?,?)",
                [(rel, *disk[rel], int(rel in pending_paths)) for rel in changed],
            )
            if rechunk or (row is None and only is None):
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('chunking', ?)", (CHUNKING,))
        return report

    def _apply(
        self,
        conn: sqlite3.Connection,
        docs: list[Doc],
        touched: set[str],
        identity: ModelIdentity | None,
        embedder: EmbedderProvider | None,
        embed_limit: int | None,
        progress: Progress | None,
        report: SyncReport,
        *,
        rechunk: bool = False,
    ) -> None:
        """Diff ``docs`` (everything now in the ``touched`` files) against the index and write the difference.

        ``rechunk`` re-cuts and re-embeds every doc, unchanged text included (the way text is cut changed)."""
        existing: dict[tuple[str, str], tuple[int, str, bool]] = {}
        if touched:
            for path_batch in _batches(sorted(touched), 500):
                for doc_id, kind, item_id, h, complete in conn.execute(
                    f"""SELECT d.doc, d.kind, d.item_id, d.hash,
                               NOT EXISTS (SELECT 1 FROM chunks c WHERE c.doc = d.doc AND c.model IS NULL)
                        FROM docs d WHERE d.path IN ({_marks(path_batch)})""",
                    tuple(path_batch),
                ):
                    existing[(kind, item_id)] = (doc_id, h, bool(complete))
        # Docs that moved here from a file that is not touched (should not happen, but ids are unique keys).
        missing = [(d.kind, d.item_id) for d in docs if (d.kind, d.item_id) not in existing]
        for batch in _batches(missing, 400):
            clauses = " OR ".join("(kind = ? AND item_id = ?)" for _ in batch)
            for doc_id, kind, item_id, h, complete in conn.execute(
                f"""SELECT d.doc, d.kind, d.item_id, d.hash,
                           NOT EXISTS (SELECT 1 FROM chunks c WHERE c.doc = d.doc AND c.model IS NULL)
                    FROM docs d WHERE {clauses}""",
                tuple(x for pair in batch for x in pair),
            ):
                existing[(kind, item_id)] = (doc_id, h, bool(complete))

        seen: set[tuple[str, str]] = set()
        to_chunk: list[tuple[Doc, int | None]] = []  # (doc, existing doc id)
        meta_updates = []
        for d in docs:
            key = (d.kind, d.item_id)
            if key in seen:
                report.problems.append(f"{d.path}: duplicate {d.kind} id {d.item_id!r}, later copy ignored")
                continue
            seen.add(key)
            row = existing.get(key)
            if row is not None and row[1] == d.hash and not rechunk:
                meta_updates.append(d)
                report.metadata_only += 1
                if not row[2] and identity is not None and embedder is not None:
                    to_chunk.append((d, row[0]))  # same text, vectors still pending
                continue
            to_chunk.append((d, row[0] if row else None))
            if row is None:
                report.docs_added += 1
            else:
                report.docs_changed += 1
        gone = [row[0] for key, row in existing.items() if key not in seen]
        report.docs_removed = len(gone)

        # Load the model only when there is text to embed, and only a model the index already holds.
        emb: Embedder | None = None
        if to_chunk and embedder is not None:
            try:
                emb = embedder()
            except ModelUnavailable as exc:
                report.warnings.append(f"{exc}; indexed for keyword search only, vectors pending")
                emb = None
            if emb is not None:
                report.model_loaded = True
                if identity is None:
                    emb = None  # a keyword-only index gets vectors through a rebuild, never piecemeal
                elif not emb.identity.same_vectors(identity):
                    report.warnings.append(
                        f"the index holds vectors of {identity.name}; {emb.identity.name} is configured: "
                        "run 'memvault reindex' to rebuild"
                    )
                    emb = None

        # Chunk.
        planned: list[tuple[Doc, int | None, list[str]]] = []
        for d, doc_id in to_chunk:
            planned.append((d, doc_id, self._chunks(d, emb)))
        all_chunks = [(i, j) for i, (_, _, texts) in enumerate(planned) for j in range(len(texts))]
        budget = len(all_chunks) if embed_limit is None else max(0, embed_limit)
        vectors: dict[tuple[int, int], bytes] = {}
        if emb is not None and all_chunks:
            # Similar lengths in one encode call pad less (sentence-transformers sorts only within a call).
            todo = sorted(all_chunks[:budget], key=lambda ij: len(planned[ij[0]][2][ij[1]]))
            for start in range(0, len(todo), EMBED_GROUP):
                group = todo[start : start + EMBED_GROUP]
                matrix = emb.embed_documents([planned[i][2][j] for i, j in group])
                for (i, j), vec in zip(group, matrix):
                    vectors[(i, j)] = vector_blob(vec)
                if progress is not None:
                    progress(min(start + EMBED_GROUP, len(todo)), len(todo))
            report.chunks_embedded = len(vectors)
        report.chunks_pending = len(all_chunks) - len(vectors)
        mkey = model_key(identity) if identity is not None else None
        has_vec = identity is not None

        self._vector_cache = None
        with transaction(conn):
            for doc_id in gone:
                if has_vec:
                    conn.execute("DELETE FROM chunks_vec WHERE rowid IN (SELECT rowid FROM chunks WHERE doc = ?)", (doc_id,))
                conn.execute("DELETE FROM docs WHERE doc = ?", (doc_id,))
            conn.executemany(
                """UPDATE docs SET path = ?, importance = ?, confidence = ?, source = ?, created = ?, updated = ?,
                                   valid_until = ?, review_after = ?
                   WHERE kind = ? AND item_id = ?""",
                [(d.path, d.importance, d.confidence, d.source, d.created, d.updated, d.valid_until, d.review_after,
                  d.kind, d.item_id) for d in meta_updates],
            )
            for i, (d, doc_id, texts) in enumerate(planned):
                if doc_id is None:
                    doc_id = conn.execute(
                        """INSERT INTO docs(kind, item_id, path, body, hash, importance, confidence, source, created,
                                            updated, valid_until, review_after) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)""",
                        (d.kind, d.item_id, d.path, d.body, d.hash, d.importance, d.confidence, d.source,
                         d.created, d.updated, d.valid_until, d.review_after),
                    ).lastrowid
                else:
                    conn.execute(
                        """UPDATE docs SET path = ?, body = ?, hash = ?, importance = ?, confidence = ?, source = ?,
                                           created = ?, updated = ?, valid_until = ?, review_after = ? WHERE doc = ?""",
                        (d.path, d.body, d.hash, d.importance, d.confidence, d.source, d.created, d.updated,
                         d.valid_until, d.review_after, doc_id),
                    )
                    if has_vec:
                        conn.execute(
                            "DELETE FROM chunks_vec WHERE rowid IN (SELECT rowid FROM chunks WHERE doc = ?)", (doc_id,)
                        )
                    conn.execute("DELETE FROM chunks WHERE doc = ?", (doc_id,))
                for j, text in enumerate(texts):
                    blob = vectors.get((i, j))
                    rowid = conn.execute(
                        "INSERT INTO chunks(doc, chunk, text, hash, model) VALUES (?,?,?,?,?)",
                        (doc_id, j, text, _hash(text), mkey if blob is not None else None),
                    ).lastrowid
                    if blob is not None:
                        conn.execute(
                            "INSERT INTO chunks_vec(rowid, kind, embedding) VALUES (?,?,?)", (rowid, d.kind, blob)
                        )

    def _chunks(self, d: Doc, emb: Embedder | None) -> list[str]:
        """The texts to embed for ``d``: its body cut to the model's window, each with the doc's header."""
        head = d.header + "\n" if d.header else ""
        if emb is not None:
            window = emb.identity.max_tokens - 2 - (emb.count_tokens(head) if head else 0)
            pieces = emb.split(d.body, max(16, window), CHUNK_OVERLAP)
        else:
            pieces = fallback_split(d.body)
        return [head + p for p in pieces] or [head.strip() or d.body]

    # -- full rebuild ------------------------------------------------------------------------------------
    def rebuild(self, embedder: EmbedderProvider | None = None, *, progress: Progress | None = None) -> SyncReport:
        """Build a whole new generation beside the current one, then swap it in with an atomic rename.

        Recall keeps reading the old generation until the swap; a crash leaves the old one in place (the
        half-built file is removed by the next rebuild). With no model available the new index is
        keyword-only and says so.
        """
        started = time.perf_counter()
        self.dir.mkdir(parents=True, exist_ok=True)
        with locked(self.dir / "locks" / "rebuild.lock"):
            self._remove_stale_generations()
            target = self.dir / f"index-{time.time_ns()}.db"
            report = SyncReport()
            emb: Embedder | None = None
            if embedder is not None:
                try:
                    emb = embedder()
                except ModelUnavailable as exc:
                    report.warnings.append(f"{exc}; the new index is keyword-only")
            report.model_loaded = emb is not None
            conn = connect(target)
            try:
                migrate(conn)
                if emb is not None:
                    with transaction(conn):
                        self._set_identity(conn, emb.identity)
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('built_at', ?)", (format_time(_now()),))
                report = self._sync_into(conn, emb, progress, report)
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
            old = self.current_target()
            tmp_link = self.dir / f".{INDEX_NAME}.{os.getpid()}.tmp"
            with contextlib.suppress(FileNotFoundError):
                tmp_link.unlink()
            os.symlink(target.name, tmp_link)
            os.replace(tmp_link, self.link)
            self.close()
            if old is not None and old != target and old != self.link:
                self._remove_generation(old)
            elif old == self.link:
                pass  # a plain file was replaced by the symlink itself
        report.seconds = time.perf_counter() - started
        return report

    def _sync_into(self, conn: sqlite3.Connection, emb: Embedder | None, progress: Progress | None,
                   report: SyncReport) -> SyncReport:
        provider: EmbedderProvider | None = (lambda: emb) if emb is not None else None
        return self._sync(conn, provider, embed_limit=None, progress=progress, only=None, report=report)

    def _remove_generation(self, target: Path) -> None:
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(str(target) + suffix).unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.dir / "locks" / f"{target.name}.lock").unlink()

    def _remove_stale_generations(self) -> None:
        current = self.current_target()
        for path in self.dir.glob("index-*.db"):
            if path != current:
                self._remove_generation(path)

    # -- queries -----------------------------------------------------------------------------------------
    def _match(self, expr: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, bm25 as a positive score) of chunks of ``kinds`` matching an FTS5 expression, best first."""
        if not expr:
            return []
        sql = (
            "SELECT f.rowid, bm25(chunks_fts) AS s FROM chunks_fts f "
            "JOIN chunks c ON c.rowid = f.rowid JOIN docs d ON d.doc = c.doc "
            f"WHERE chunks_fts MATCH ? AND d.kind IN ({_marks(kinds)}) ORDER BY s LIMIT ?"
        )
        return [(r[0], -r[1]) for r in self.connection().execute(sql, (expr, *kinds, limit))]

    def search_keywords(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, bm25) best first; any query term may match, rare terms weigh more (BM25)."""
        return self._match(fts_query(query), kinds, limit)

    def search_phrases(self, query: str, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, bm25) of chunks holding two consecutive query words in order: the proximity signal
        that tells the page with the exact line from pages that only share its words."""
        return self._match(fts_phrase_query(query), kinds, limit)

    def search_exact(self, query: str, kinds: Sequence[str], limit: int) -> list[int]:
        """Chunks that contain the whole query, word for word (three words or more): a quoted memory."""
        tokens = _TOKEN.findall(query.lower())
        if len(tokens) < 3:
            return []
        return [rowid for rowid, _ in self._match('"' + " ".join(tokens[:64]) + '"', kinds, limit)]

    def search_vectors(self, vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
        """(chunk rowid, cosine similarity) best first.

        A one-shot process (a cold CLI) asks sqlite-vec's KNN. From the second search on, a process keeps the
        vectors in memory as one float32 matrix (4·dims bytes per row) and scores them with one matrix-vector
        product: the pip build of sqlite-vec has no SIMD and scans 4-8x slower than that. The matrix is
        reloaded when the index file changes (``PRAGMA data_version``, a generation swap, or a write here).
        """
        self._vector_searches += 1
        if self._vector_searches > 1:
            cached = self._vectors_in_memory()
            if cached is not None:
                return _top_k(cached, vector, kinds, limit)
        conn = self.connection()
        blob = vector_blob(vector)
        sql = (
            "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"
            + (f" AND kind IN ({_marks(kinds)})" if set(kinds) != set(KINDS) else "")
        )
        params: tuple[Any, ...] = (blob, limit, *kinds) if set(kinds) != set(KINDS) else (blob, limit)
        return [(r[0], 1.0 - r[1]) for r in conn.execute(sql, params)]

    def _vectors_in_memory(self) -> tuple[Any, Any, Any] | None:
        conn = self.connection()
        version = (self._conn_target, conn.execute("PRAGMA data_version").fetchone()[0])
        if self._vector_cache is not None and self._vector_cache[0] == version:
            return self._vector_cache[1]
        if self.identity(conn) is None:
            return None
        import numpy as np

        rows = conn.execute("SELECT rowid, kind, embedding FROM chunks_vec").fetchall()
        if not rows:
            return None
        rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        kinds = np.array([r[1] for r in rows])
        matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(len(rows), -1)
        self._vector_cache = (version, (rowids, kinds, matrix))
        return self._vector_cache[1]

    def similarities(self, vector: Any, rowids: Sequence[int]) -> dict[int, float]:
        """Cosine similarity of ``vector`` to the stored vectors of ``rowids`` (computed by sqlite-vec)."""
        conn = self.connection()
        blob = vector_blob(vector)
        out = {}
        for batch in _batches(list(rowids), 500):
            for rowid, distance in conn.execute(
                f"SELECT rowid, vec_distance_cosine(embedding, ?) FROM chunks_vec WHERE rowid IN ({_marks(batch)})",
                (blob, *batch),
            ):
                out[rowid] = 1.0 - distance
        return out

    def chunk_docs(self, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """chunk rowid -> its doc's fields."""
        conn = self.connection()
        out = {}
        for batch in _batches(list(rowids), 500):
            for row in conn.execute(
                f"""SELECT c.rowid, d.kind, d.item_id, d.path, d.body, d.importance, d.confidence, d.source,
                           d.created, d.updated, c.chunk, d.valid_until, d.review_after
                    FROM chunks c JOIN docs d ON d.doc = c.doc WHERE c.rowid IN ({_marks(batch)})""",
                tuple(batch),
            ):
                out[row[0]] = dict(
                    kind=row[1], id=row[2], path=row[3], body=row[4], importance=row[5], confidence=row[6],
                    source=row[7], created=row[8], updated=row[9], chunk=row[10], valid_until=row[11],
                    review_after=row[12],
                )
        return out

    # -- stats -------------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        target = self.current_target()
        if target is None:
            return {"exists": False}
        conn = self.connection()
        kinds = dict(conn.execute("SELECT kind, COUNT(*) FROM docs GROUP BY kind").fetchall())
        chunks = conn.execute("SELECT COUNT(*), COUNT(model) FROM chunks").fetchone()
        size = sum(
            Path(str(target) + s).stat().st_size for s in ("", "-wal") if Path(str(target) + s).exists()
        )
        identity = self.identity(conn)
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        used = (conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]) * page_size
        vec_bytes = None
        if identity is not None:
            vec_bytes = conn.execute("SELECT COALESCE(SUM(LENGTH(vectors)), 0) FROM chunks_vec_vector_chunks00").fetchone()[0]
        return {
            "exists": True,
            "path": str(target),
            "items": {k: kinds.get(k, 0) for k in KINDS},
            "chunks": chunks[0],
            "vectors": chunks[1],
            "pending_vectors": chunks[0] - chunks[1],
            "file_bytes": size,
            "used_bytes": used,
            "model": identity.to_dict() if identity else None,
            "vector_store_bytes": vec_bytes,
        }


# ------------------------------------------------------------------------------------------------ helpers
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves""".split()
)
_TOKEN = re.compile(r"\w+", re.UNICODE)


def fts_query(text: str) -> str:
    """An FTS5 expression matching ANY of the query's terms (BM25 weighs rare ones), stop words dropped.

    A natural-language question must not return nothing because one word is absent (an implicit AND would).
    Each term is quoted, so FTS5 syntax in the query (``-``, ``:``, ``NEAR``, quotes) is taken literally.
    """
    terms = []
    for token in _TOKEN.findall(text.lower()):
        if token in _STOPWORDS or token in terms:
            continue
        terms.append(token)
    if not terms:  # a query of stop words only: match them rather than nothing
        terms = list(dict.fromkeys(_TOKEN.findall(text.lower())))
    return " OR ".join(f'"{t}"' for t in terms[:64])


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _top_k(cached: tuple[Any, Any, Any], vector: Any, kinds: Sequence[str], limit: int) -> list[tuple[int, float]]:
    """Exact cosine top-k over the in-memory matrix (rows and query are unit vectors: cosine = dot)."""
    import numpy as np

    rowids, row_kinds, matrix = cached
    query = np.frombuffer(vector_blob(vector), dtype=np.float32)
    scores = matrix @ query
    if set(kinds) != set(KINDS):
        scores = np.where(np.isin(row_kinds, list(kinds)), scores, -np.inf)
    k = min(limit, len(scores))
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(int(rowids[i]), float(scores[i])) for i in top if scores[i] != -np.inf]


def fts_phrase_query(text: str) -> str:
    """Consecutive word pairs of the query as FTS5 phrases, OR-ed; pairs of two stop words are left out."""
    tokens = _TOKEN.findall(text.lower())
    pairs = []
    for a, b in zip(tokens, tokens[1:]):
        if a in _STOPWORDS and b in _STOPWORDS:
            continue
        pair = f'"{a} {b}"'
        if pair not in pairs:
            pairs.append(pair)
    return " OR ".join(pairs[:64])


def _marks(items: Sequence[Any] | set[Any]) -> str:
    return ",".join("?" * len(items))


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
