"""Writes to the shared index's text: docs, chunks, keyword statistics and the files a commit holds.

Every write of a vault runs in a transaction under ``pg_advisory_xact_lock(28022, vault_id)``, so concurrent hosts
serialise per vault and never lose or duplicate rows; slow work (cutting text) happens before the lock is taken.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...rules.errors import InvalidValue
from ..documents import Doc, cut
from ..update import SyncReport
from .cache import text_sha256
from .connection import LOCK_WRITE, SCHEMA
from .keywords import WORD
from .tables import VaultState, pending_count, slices, to_day, to_time, vec_tables, vsql

#: ``expect`` of :func:`apply` when the caller does not check the commit the index reflects.
ANY_HEAD: Any = object()


class HeadMoved(Exception):
    """Another host published between a publish's read of the shared index and its write: nothing was written (the
    files it diffed against are not the index's any more)."""

    def __init__(self, head: str | None) -> None:
        super().__init__(f"the shared index moved to {head} meanwhile")
        self.head = head


def apply(conn: Any, fresh_state: Callable[[], VaultState], docs: Sequence[Doc], paths: dict[str, str | None], *,
          head: str | None, splitter: Any = None, max_tokens: int | None = None,
          expect: Any = ANY_HEAD) -> SyncReport:
    """Phase 1 for a set of files, in one transaction under the vault's write lock.

    ``paths`` maps each touched vault-relative path to its new git blob id (None: the file is gone); ``docs``
    are all the docs now in the non-None paths. Docs are diffed by (kind, item_id, hash): an equal hash
    refreshes metadata only, a changed text is re-cut and its chunks replaced (pending a vector; embed() takes
    unchanged chunk texts from the cache), docs of those paths that are not in ``docs`` are deleted. The blobs
    and ``head`` (when given) are recorded. Cutting happens before the lock is taken. ``fresh_state`` reads the
    vault's row (again under the lock). ``expect``: the commit the caller read the index at (its ``paths`` are a diff
    against that state); when the index reflects another one under the lock, :class:`HeadMoved` is raised and nothing
    is written.
    """
    started = time.perf_counter()
    report = SyncReport(files_seen=len(paths), files_changed=sum(b is not None for b in paths.values()),
                        files_removed=sum(b is None for b in paths.values()))
    live = [p for p, b in paths.items() if b is not None]
    for d in docs:
        if paths.get(d.path, None) is None:
            raise InvalidValue("docs", f"{d.path} ({d.kind} {d.item_id!r}) is not among the paths applied")
    unique: dict[tuple[str, str], Doc] = {}
    for d in docs:
        if (d.kind, d.item_id) in unique:
            report.problems.append(f"{d.path}: duplicate {d.kind} id {d.item_id!r}, later copy ignored")
            continue
        unique[(d.kind, d.item_id)] = d
    state = fresh_state()
    v = state.vault_id
    if max_tokens is None and splitter is None and state.live_identity is not None:
        max_tokens = state.live_identity.max_tokens
    # Cut outside the lock what is likely to need it (a tokenizer can be slow); anything a concurrent
    # writer changed meanwhile is cut under the lock below.
    before = _existing(conn, v, list(paths), list(unique))
    cuts: dict[tuple[str, str], tuple[list[tuple[int, str]], str]] = {}
    todo = [d for key, d in unique.items() if before.get(key, (0, None))[1] != d.hash]
    for d, c in zip(todo, cut(todo, splitter, max_tokens)):
        cuts[(d.kind, d.item_id)] = c
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_WRITE, v))
        state = fresh_state()
        if expect is not ANY_HEAD and state.head != expect:
            raise HeadMoved(state.head)
        existing = _existing(conn, v, list(paths), list(unique))
        meta, changed, added = [], [], []
        for key, d in unique.items():
            row = existing.get(key)
            if row is not None and row[1] == d.hash:
                meta.append((row[0], d))
            elif row is not None:
                changed.append((row[0], d))
            else:
                added.append(d)
        gone = [row[0] for key, row in existing.items() if key not in unique]
        missing = [d for _, d in changed] + added
        late = [d for d in missing if (d.kind, d.item_id) not in cuts]
        for d, c in zip(late, cut(late, splitter, max_tokens)):
            cuts[(d.kind, d.item_id)] = c
        report.metadata_only, report.docs_changed = len(meta), len(changed)
        report.docs_added, report.docs_removed = len(added), len(gone)
        forget_measured(conn, v, {f"{kind}:{item_id}" for kind, item_id in existing if (kind, item_id) not in unique})
        tables = vec_tables(state)
        dn, dw = delete_chunks(conn, v, gone + [doc_id for doc_id, _ in changed], tables)
        for part in slices(gone):
            conn.execute(vsql(v, "DELETE FROM {docs} WHERE doc_id = ANY(%s::bigint[])"), (list(part),))
        _update_meta(conn, v, meta, report.problems)
        doc_ids = _write_docs(conn, v, changed, added, cuts, report.problems)
        rows = []
        for d in missing:
            texts, _how = cuts[(d.kind, d.item_id)]
            doc_id = doc_ids[(d.kind, d.item_id)]
            rows += [(doc_id, j, d.kind, text) for j, text in texts]
        n_in, w_in = insert_chunks(conn, v, rows)
        gone_paths = [p for p, b in paths.items() if b is None]
        for part in slices(gone_paths):
            conn.execute(vsql(v, "DELETE FROM {files} WHERE path = ANY(%s::text[])"), (list(part),))
        for part in slices(live):
            conn.execute(vsql(v, "INSERT INTO {files} (path, blob) SELECT * FROM unnest(%s::text[], "
                                 "%s::text[]) ON CONFLICT (path) DO UPDATE SET blob = excluded.blob"),
                         (list(part), [paths[p] for p in part]))
        conn.execute("UPDATE memvault.vaults SET nchunks = nchunks + %s, nwords = nwords + %s, "
                     "indexed_head = coalesce(%s, indexed_head), updated = now() WHERE vault_id = %s",
                     (n_in - dn, w_in - dw, head, v))
    if n_in >= 10_000:
        # A bulk load: new GIN entries wait in the index's pending list (every search scans it, and the
        # planner prices it high) and the planner has no statistics yet; do now what autovacuum would.
        conn.execute("SELECT gin_clean_pending_list(to_regclass(%s))", (f"{SCHEMA}.v{v}_chunks_tsv",))
        conn.execute(vsql(v, "ANALYZE {chunks}, {docs}"))
    report.chunks_pending = pending_count(conn, v)
    report.seconds = time.perf_counter() - started
    return report


#: The rows of vault_meta measured on the vault's text (memvault.core.calibration): the scale, and the pieces it was
#: measured with (the memories' ids, the vectors of six words of their text, their neighbours). The probes' vectors
#: are the model's alone.
MEASURED = ("calibration", "calibration:fragments")


def forget_measured(conn: Any, v: int, gone: set[str]) -> None:
    """The relevance scale out of the shared index when its pieces name a memory that is gone (``"kind:id"``): a
    purge (or a removal) published left the memory's id and the vectors of pieces of its text there for every host,
    as long as the vault did not grow by a quarter. The next recall measures it again, from what is left."""
    if not gone:
        return
    row = conn.execute("SELECT value FROM memvault.vault_meta WHERE vault_id = %s AND key = %s",
                       (v, MEASURED[1])).fetchone()
    if row is None or not row[0]:
        return
    try:
        data = json.loads(row[0])
        named = {str(s) for s in data["sources"]} | {str(n) for near in data["nearest"] for n in near}
    except (ValueError, KeyError, TypeError):
        named = gone  # unreadable: measured again rather than kept unread
    if named & gone:
        conn.execute("DELETE FROM memvault.vault_meta WHERE vault_id = %s AND key = ANY(%s::text[])",
                     (v, list(MEASURED)))


def _existing(conn: Any, v: int, paths: list[str], keys: list[tuple[str, str]]
              ) -> dict[tuple[str, str], tuple[int, str]]:
    """(kind, item_id) -> (doc_id, hash) of the docs in ``paths`` and of ``keys`` wherever they are."""
    out: dict[tuple[str, str], tuple[int, str]] = {}
    for part in slices(paths):
        for doc_id, kind, item_id, h in conn.execute(
                vsql(v, "SELECT doc_id, kind, item_id, hash FROM {docs} WHERE path = ANY(%s::text[])"),
                (list(part),)):
            out[(kind, item_id)] = (doc_id, h)
    wanted = [k for k in keys if k not in out]
    for part in slices(wanted):
        for doc_id, kind, item_id, h in conn.execute(
                vsql(v, "SELECT d.doc_id, d.kind, d.item_id, d.hash FROM {docs} d JOIN unnest(%s::text[], "
                        "%s::text[]) AS k(kind, item_id) ON d.kind = k.kind AND d.item_id = k.item_id"),
                ([k for k, _ in part], [i for _, i in part])):
            out[(kind, item_id)] = (doc_id, h)
    return out


def delete_chunks(conn: Any, v: int, doc_ids: list[int], vec_tables: list[Any]) -> tuple[int, int]:
    """Delete the chunks of ``doc_ids`` with their vectors (pending rows cascade), keeping document
    frequencies exact; returns (chunks, words) removed."""
    from psycopg import sql

    n = w = 0
    for part in slices(doc_ids):
        vec_deletes = sql.SQL("").join(
            sql.SQL(", v{} AS (DELETE FROM {} WHERE chunk_id IN (SELECT chunk_id FROM gone))").format(
                sql.SQL(str(i)), t) for i, t in enumerate(vec_tables))
        row = conn.execute(vsql(v, """
            WITH gone AS (DELETE FROM {chunks} WHERE doc_id = ANY(%s::bigint[])
                          RETURNING chunk_id, chunk, tsv, nwords){vec},
            df AS (UPDATE {lexemes} l SET df = l.df - g.n
                   FROM (SELECT u.lexeme, count(*) AS n FROM gone, unnest(gone.tsv) AS u GROUP BY u.lexeme) g
                   WHERE l.lexeme = g.lexeme)
            SELECT count(*) FILTER (WHERE chunk >= 0), coalesce(sum(nwords), 0) FROM gone""", vec=vec_deletes),
            (list(part),)).fetchone()
        n, w = n + int(row[0]), w + int(row[1])
    return n, w


def insert_chunks(conn: Any, v: int, rows: list[tuple[int, int, str, str]]) -> tuple[int, int]:
    """Insert (doc_id, chunk, kind, text) rows, each pending, counting their lexemes; returns (chunks, words) the
    keyword side counts: a runbook's step (chunk below 0) is a vector only, with no lexeme and no word."""
    n = w = 0
    for part in slices(rows):
        row = conn.execute(vsql(v, """
            WITH ins AS (
                INSERT INTO {chunks} (doc_id, chunk, kind, text, hash, nwords)
                SELECT * FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::text[], %s::bytea[], %s::int[])
                RETURNING chunk_id, chunk, tsv, nwords),
            p AS (INSERT INTO {pending} (chunk_id) SELECT chunk_id FROM ins),
            df AS (INSERT INTO {lexemes} AS l (lexeme, df)
                   SELECT u.lexeme, count(*) FROM ins, unnest(ins.tsv) AS u GROUP BY u.lexeme
                   ON CONFLICT (lexeme) DO UPDATE SET df = l.df + excluded.df)
            SELECT count(*) FILTER (WHERE chunk >= 0), coalesce(sum(nwords), 0) FROM ins"""),
            ([r[0] for r in part], [r[1] for r in part], [r[2] for r in part], [r[3] for r in part],
             [text_sha256(r[3]) for r in part], [len(WORD.findall(r[3])) if r[1] >= 0 else 0 for r in part])).fetchone()
        n, w = n + int(row[0]), w + int(row[1])
    return n, w


DOC_COLUMNS = ("path", "header", "body", "hash", "cut", "importance", "confidence", "source", "created",
                "updated", "valid_until", "review_after", "ekind", "ref", "meta", "context")
DOC_TYPES = ("text", "text", "text", "text", "text", "float8", "float8", "text", "timestamptz", "timestamptz",
              "date", "float8", "text", "text", "text", "text")


def _doc_values(d: Doc, how: str, problems: list[str]) -> tuple[Any, ...]:
    where = f"{d.path} ({d.kind} {d.item_id})"
    return (d.path, d.header, d.body, d.hash, how, float(d.importance), float(d.confidence), d.source,
            to_time(d.created, problems, f"{where} created"), to_time(d.updated, problems, f"{where} updated"),
            to_day(d.valid_until, problems, f"{where} valid_until"),
            float(d.review_after) if d.review_after is not None else None, d.ekind, d.ref, d.meta,
            getattr(d, "context", None))


def _write_docs(conn: Any, v: int, changed: list[tuple[int, Doc]], added: list[Doc],
                cuts: dict[tuple[str, str], tuple[list[tuple[int, str]], str]], problems: list[str]
                ) -> dict[tuple[str, str], int]:
    """Rewrite changed docs and insert new ones; (kind, item_id) -> doc_id of both."""
    from psycopg import sql

    cols = DOC_COLUMNS
    casts = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in DOC_TYPES)
    names = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    out: dict[tuple[str, str], int] = {}
    for part in slices(changed):
        values = [_doc_values(d, cuts[(d.kind, d.item_id)][1], problems) for _, d in part]
        sets = sql.SQL(", ").join(sql.SQL("{c} = u.{c}").format(c=sql.Identifier(c)) for c in cols)
        conn.execute(vsql(v, "UPDATE {docs} d SET {sets} FROM unnest(%s::bigint[], {casts}) "
                             "AS u(doc_id, {names}) WHERE d.doc_id = u.doc_id",
                             sets=sets, casts=casts, names=names),
                     [[doc_id for doc_id, _ in part], *map(list, zip(*values))])
        out.update({(d.kind, d.item_id): doc_id for doc_id, d in part})
    for part in slices(added):
        values = [_doc_values(d, cuts[(d.kind, d.item_id)][1], problems) for d in part]
        sets = sql.SQL(", ").join(sql.SQL("{c} = excluded.{c}").format(c=sql.Identifier(c)) for c in cols)
        rows = conn.execute(vsql(v, "INSERT INTO {docs} (kind, item_id, {names}) SELECT * FROM "
                                    "unnest(%s::text[], %s::text[], {casts}) ON CONFLICT (kind, item_id) "
                                    "DO UPDATE SET {sets} RETURNING doc_id, kind, item_id",
                                    names=names, casts=casts, sets=sets),
                            [[d.kind for d in part], [d.item_id for d in part], *map(list, zip(*values))])
        out.update({(kind, item_id): doc_id for doc_id, kind, item_id in rows})
    return out


def _update_meta(conn: Any, v: int, meta: list[tuple[int, Doc]], problems: list[str]) -> None:
    """Refresh the fields recall ranks on, for docs whose text is unchanged (rows that differ only)."""
    from psycopg import sql

    text_columns = ("header", "body", "hash", "cut", "context")  # all in the hash: unchanged when it is
    cols = [c for c in DOC_COLUMNS if c not in text_columns]
    types = [t for c, t in zip(DOC_COLUMNS, DOC_TYPES) if c not in text_columns]
    casts = sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in types)
    names = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    sets = sql.SQL(", ").join(sql.SQL("{c} = u.{c}").format(c=sql.Identifier(c)) for c in cols)
    old = sql.SQL(", ").join(sql.SQL("d.{c}").format(c=sql.Identifier(c)) for c in cols)
    new = sql.SQL(", ").join(sql.SQL("u.{c}").format(c=sql.Identifier(c)) for c in cols)
    for part in slices(meta):
        full = [_doc_values(d, "", problems) for _, d in part]
        values = [tuple(x for c, x in zip(DOC_COLUMNS, row) if c in cols) for row in full]
        conn.execute(vsql(v, "UPDATE {docs} d SET {sets} FROM unnest(%s::bigint[], {casts}) "
                             "AS u(doc_id, {names}) WHERE d.doc_id = u.doc_id "
                             "AND ({old}) IS DISTINCT FROM ({new})",
                             sets=sets, casts=casts, names=names, old=old, new=new),
                     [[doc_id for doc_id, _ in part], *map(list, zip(*values))])
