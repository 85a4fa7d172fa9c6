"""What the shared index gives recall besides scores: the fields behind chunk ids, the turns around an episode, a
procedure's runs, the episodes of a time window. Each is one query; the fields come back as the SQLite index gives
them (keys: :data:`memvault.index.search.DOC_FIELDS`, times as RFC 3339 strings, a date as YYYY-MM-DD)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ...rules.timeutil import format_time, to_milliseconds
from ..documents import NEIGHBOUR_GAP
from ..search import DOC_FIELDS
from .tables import to_time, vsql

#: Characters of a doc's text the shared index gives recall (its ranking reads them: feedback terms, a time named in
#: the text, a reranker): as much as a publish writes under the default [limits] (procedure_bytes, the largest), never
#: a row of 10 MB someone wrote into the database, fetched whole for each candidate. A hit's text is its file's.
BODY_CHARS = 1 << 20
FIELDS_SQL = (f"d.kind, d.item_id, d.path, left(d.body, {BODY_CHARS}), d.importance, d.confidence, d.source, "
              "d.created, d.updated, {chunk}, d.valid_until, d.review_after, d.ekind, d.ref, d.doc_id")


def fields(row: Sequence[Any]) -> dict[str, Any]:
    """A row of :data:`FIELDS_SQL` as the SQLite index gives it."""
    out = dict(zip(DOC_FIELDS, row))
    for key in ("created", "updated"):
        if out[key] is not None:
            out[key] = format_time(out[key])
    if out["valid_until"] is not None:
        out["valid_until"] = out["valid_until"].isoformat()
    out["doc"] = int(out["doc"])
    return out


def chunk_docs(conn: Any, v: int, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """chunk id -> its doc's fields."""
    if not ids:
        return {}
    rows = conn.execute(vsql(v, "SELECT c.chunk_id, " + FIELDS_SQL.format(chunk="c.chunk")
                             + " FROM {chunks} c JOIN {docs} d ON d.doc_id = c.doc_id "
                               "WHERE c.chunk_id = ANY(%s::bigint[])"), ([int(i) for i in ids],)).fetchall()
    return {int(r[0]): fields(r[1:]) for r in rows}


def runbook_steps(conn: Any, v: int, doc_ids: list[int]) -> list[tuple[int, int]]:
    """(chunk id, doc id) of the steps (chunks numbered below 0) of ``doc_ids`` (the (doc_id, chunk) index; one
    query, no doc read)."""
    rows = conn.execute(vsql(v, "SELECT chunk_id, doc_id FROM {chunks} WHERE doc_id = ANY(%s::bigint[]) AND chunk < 0"),
                        ([int(i) for i in doc_ids],)).fetchall()
    return [(int(r[0]), int(r[1])) for r in rows]


#: The raw turns just before and after each given one from its source (parameters: chunk ids, sources, times, ids),
#: from the index on (source, created, item_id). Ids in byte order, as SQLite's: a database created en_US or ICU
#: puts same-time turns in another order. Since 0005 the column and that index are in byte order, so the index serves
#: the comparison and the order (a COLLATE the index lacks left it for the time index: every source's turns read).
_SIDE = ("SELECT c.chunk_id, d.created FROM {docs} d JOIN {chunks} c ON c.doc_id = d.doc_id AND c.chunk = 0 "
         "WHERE d.kind = 'episode' AND d.ekind = 'raw' AND d.source = u.source "
         "AND (d.created, d.item_id COLLATE \"C\") ")
NEIGHBOURS_SQL = f"""
        SELECT u.cid, b.chunk_id, b.created, a.chunk_id, a.created
        FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::text[]) AS u(cid, source, created, item_id)
        LEFT JOIN LATERAL ({_SIDE} < (u.created, u.item_id)
                           ORDER BY d.created DESC, d.item_id COLLATE "C" DESC LIMIT 1) b ON true
        LEFT JOIN LATERAL ({_SIDE} > (u.created, u.item_id)
                           ORDER BY d.created, d.item_id COLLATE "C" LIMIT 1) a ON true"""


def episode_neighbours(conn: Any, v: int, docs: dict[int, dict[str, Any]]) -> dict[int, list[int]]:
    """For the raw episodes among ``docs`` (chunk id -> fields), the chunk ids of the raw episodes just before and
    after each from the same source, at most NEIGHBOUR_GAP seconds away (one query)."""
    raw = [(cid, d) for cid, d in docs.items()
           if d.get("kind") == "episode" and d.get("ekind") == "raw" and d.get("created") and d.get("source")]
    if not raw:
        return {}
    problems: list[str] = []
    stamps = [to_time(d["created"], problems, "created") for _, d in raw]
    rows = conn.execute(vsql(v, NEIGHBOURS_SQL), ([cid for cid, _ in raw], [d["source"] for _, d in raw], stamps,
                                                  [d["id"] for _, d in raw])).fetchall()
    here = {cid: stamp for (cid, _), stamp in zip(raw, stamps)}
    out: dict[int, list[int]] = {}
    for cid, before, t_before, after, t_after in rows:
        found = [int(other) for other, t in ((before, t_before), (after, t_after))
                 if other is not None and here[cid] is not None
                 and abs((t - here[cid]).total_seconds()) <= NEIGHBOUR_GAP]
        if found:
            out[int(cid)] = found
    return out


#: The last runs of each name, from the backward scan of the index on (ref, created): a run always has its time, and
#: "created DESC NULLS LAST" (no order that index gives) read and sorted every run of the runbook for each recall.
RUNS_SQL = """
        SELECT n.name, r.item_id, r.created, r.body, r.path, r.meta, r.source
        FROM unnest(%s::text[]) AS n(name)
        CROSS JOIN LATERAL (SELECT item_id, created, left(body, 4096) AS body, path, meta, source FROM {docs}
                            WHERE ref = n.name ORDER BY created DESC LIMIT %s) r"""


def runs_of(conn: Any, v: int, names: Sequence[str], per_name: int) -> dict[str, list[dict[str, Any]]]:
    """The last ``per_name`` procedure_run episodes of each procedure, newest first (one query)."""
    if not names:
        return {}
    rows = conn.execute(vsql(v, RUNS_SQL), (list(names), per_name)).fetchall()
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for name, item_id, created, body, path, meta, source in rows:
        out[name].append({"id": item_id, "created": format_time(created) if created is not None else None,
                          "text": body, "path": path, "meta": _meta(meta), "source": source})
    return out


def _meta(text: str | None) -> dict[str, Any]:
    """A run's meta as an object; {} for one that is not a JSON object (a publish writes only objects: a row
    written into the database by other means must not end a recall or a page)."""
    try:
        value = json.loads(text or "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def procedure_docs(conn: Any, v: int, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """name -> the fields of that procedure's doc (as chunk_docs gives them, for its first chunk)."""
    if not names:
        return {}
    rows = conn.execute(vsql(v, "SELECT " + FIELDS_SQL.format(chunk="c.chunk")
                             + " FROM {docs} d JOIN {chunks} c ON c.doc_id = d.doc_id AND c.chunk = 0 "
                               "WHERE d.kind = 'procedure' AND d.item_id = ANY(%s::text[])"),
                        (list(names),)).fetchall()
    return {r[1]: fields(r) for r in rows}


def episodes_between(conn: Any, v: int, since: datetime | None, until: datetime | None,
                     limit: int) -> list[dict[str, Any]]:
    """Episodes created in [since, until) (None for open: every year), newest first; the bounds to the millisecond,
    as the times are kept."""
    where, args = "", []
    for condition, bound in (("d.created >= %s", since), ("d.created < %s", until)):
        if bound is not None:
            where += f" AND {condition}"
            args.append(to_milliseconds(bound))
    rows = conn.execute(vsql(v, "SELECT " + FIELDS_SQL.format(chunk="0") + " FROM {docs} d WHERE d.kind = 'episode'"
                             + where + ' ORDER BY d.created DESC, d.item_id COLLATE "C" DESC LIMIT %s'),
                        (*args, limit)).fetchall()
    return [fields(r) for r in rows]


def sample_chunks(conn: Any, v: int, kind: str, n: int) -> list[tuple[str, str]]:
    """("kind:id", chunk text) of ``n`` chunks of ``kind`` that have a vector, chosen by their text's hash (as the
    SQLite index samples them: the same vault gives the same sample whatever the host)."""
    rows = conn.execute(vsql(v, "SELECT d.kind || ':' || d.item_id, c.text FROM {chunks} c "
                                "JOIN {docs} d ON d.doc_id = c.doc_id WHERE c.kind = %s "
                                "AND NOT EXISTS (SELECT 1 FROM {pending} p WHERE p.chunk_id = c.chunk_id) "
                                "ORDER BY c.hash LIMIT %s"), (kind, n)).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def last_chunk_id(conn: Any, v: int) -> int:
    """The newest chunk's id (ids only grow: how much the vault grew since a calibration)."""
    row = conn.execute(vsql(v, "SELECT max(chunk_id) FROM {chunks}")).fetchone()
    return int(row[0] or 0)
