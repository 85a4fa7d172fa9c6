"""The index's queries: keywords (FTS5 BM25 over words, word pairs and whole quotes), vectors (sqlite-vec KNN; the
in-memory matrix of a warm process is :mod:`.matrix`), exact cosines of given chunks, and the doc fields behind chunk
rows.

Every query is written so that SQLite starts from the selective side: the keyword search is a single FTS5 query
(the kind filter is an FTS5 column filter, not a join), the vector search a single vec0 KNN. ``tests/
test_query_plans.py`` reads ``EXPLAIN QUERY PLAN`` of each and fails when a plan scans a table.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..rules.config import DEFAULT_FIELD_WEIGHTS as DEFAULT_FIELDS
from ..rules.timeutil import index_time, shown_time
from .db import CHUNK_TEXT, FTS_ROWS_SQL, FTS_SEARCHED, batches, marks, varints
from .documents import KINDS
from .quantize import encode as encode_vector
from .quantize import param as vector_param

if TYPE_CHECKING:
    import sqlite3

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves""".split()
)
TOKEN = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 64
#: sqlite-vec answers at most this many neighbours per KNN query.
VEC_K_MAX = 4096


def query_terms(text: str) -> list[str]:
    """The query's distinct words, stop words dropped (all of them kept when nothing else is left)."""
    tokens = TOKEN.findall(text.lower())
    terms = list(dict.fromkeys(t for t in tokens if t not in STOPWORDS))
    return (terms or list(dict.fromkeys(tokens)))[:MAX_TERMS]


def fts_query(text: str) -> str:
    """An FTS5 expression matching ANY of the query's terms (BM25 weighs rare ones), stop words dropped.

    A natural-language question must not return nothing because one word is absent (an implicit AND would).
    Each term is quoted, so FTS5 syntax in the query (``-``, ``:``, ``NEAR``, quotes) is taken literally.
    """
    return " OR ".join(f'"{t}"' for t in query_terms(text))


def phrase_pairs(text: str) -> list[tuple[str, str]]:
    """Consecutive word pairs of the query, each once, in order; pairs of two stop words are left out."""
    tokens = TOKEN.findall(text.lower())
    pairs = [(a, b) for a, b in zip(tokens, tokens[1:]) if not (a in STOPWORDS and b in STOPWORDS)]
    return list(dict.fromkeys(pairs))[:MAX_TERMS]


def fts_phrase_query(text: str) -> str:
    """Consecutive word pairs of the query (:func:`phrase_pairs`) as FTS5 phrases, OR-ed."""
    return " OR ".join(f'"{a} {b}"' for a, b in phrase_pairs(text))


def fts_exact_query(text: str) -> str:
    """The whole query as one FTS5 phrase (three words or more), or "" for a shorter query."""
    tokens = TOKEN.findall(text.lower())
    return '"' + " ".join(tokens[:MAX_TERMS]) + '"' if len(tokens) >= 3 else ""


def stems(text: str) -> list[str]:
    """The query's distinct content words as the keyword index stores them (FTS5's own porter tokenizer, run on a
    scratch in-memory table, so the stems are exactly the index's: :func:`memvault.index.words.word_stems`)."""
    return list(spelled_stems(text))


def spelled_stems(text: str) -> dict[str, str | None]:
    """:func:`stems`, each with a query word FTS5 reads as that stem alone (None for a stem of a word it reads as
    several): MATCH stems what it is given, so a stem is found by its word ("databas" itself is read "databa")."""
    from .words import word_stems

    words = query_terms(text)
    out: dict[str, str | None] = {}
    for word, found in zip(words, word_stems(words)):
        for stem in found:
            if out.get(stem) is None:
                out[stem] = word if len(found) == 1 else None
    return out


def fts_rows(conn: sqlite3.Connection) -> int:
    """How many chunks the keyword index holds."""
    row = conn.execute(FTS_ROWS_SQL).fetchone()
    return varints(row[0])[0] if row and row[0] else 0


#: Which of some chunks hold a word (MATCH) or a stem as stored (fts5vocab's term: MATCH would stem a stem again,
#: "databas" as "databa", and find nothing; slower, it reads every instance of the stem) in a searched field.
HOLDERS_SQL = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({marks})"
STEM_HOLDERS_SQL = ("SELECT DISTINCT doc FROM temp.vocab_instances WHERE term = ? AND col != 'kind' "
                    "AND doc IN ({marks})")


def coverages(conn: sqlite3.Connection, terms: Sequence[str] | dict[str, str | None], rowids: Sequence[int],
              df_cache: dict[str, int]) -> dict[int, float]:
    """The share of the query's IDF weight (chunk-level BM25 IDF) each of ``rowids`` contains in its searched
    fields: one FTS5 lookup per query stem for all of them (recall's rescoring reads twenty or more). ``terms``:
    stems, or :func:`spelled_stems` (a stem with its word is looked up by MATCH, faster)."""
    import math

    rows = sorted(set(rowids))
    if not terms or not rows:
        return {r: 0.0 for r in rows}
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab_rows USING fts5vocab(main, chunks_fts, row)")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab_instances USING fts5vocab(main, chunks_fts, "
                 "instance)")
    total = df_cache.get("\0n")
    if total is None:
        total = df_cache["\0n"] = fts_rows(conn)
    weight = 0.0
    held = dict.fromkeys(rows, 0.0)
    for term in terms:
        if term not in df_cache:
            row = conn.execute("SELECT doc FROM temp.vocab_rows WHERE term = ?", (term,)).fetchone()
            df_cache[term] = row[0] if row else 0
        df = df_cache[term]
        idf = math.log((total - df + 0.5) / (df + 0.5) + 1.0)
        weight += idf
        if not df:
            continue
        word = terms.get(term) if isinstance(terms, dict) else None
        sql, asked = ((HOLDERS_SQL, f'{FTS_SEARCHED} : "{word}"') if word is not None else (STEM_HOLDERS_SQL, term))
        for part in batches(rows, 500):
            for (rowid,) in conn.execute(sql.format(marks=marks(part)), (asked, *part)):
                held[rowid] += idf
    return {r: (h / weight if weight else 0.0) for r, h in held.items()}


@dataclass(frozen=True)
class FieldWeights:
    """How much a query word counts in each field of a chunk, the body's count being the unit: BM25's term
    frequency is the weighted sum over the fields (FTS5's ``bm25()`` column weights), so a word in a memory's key
    can count more than the same word in its text. The key's 3 was chosen on the eval dev sets, every set left out
    in turn scoring as well or better than with 1 (docs/benchmarks.md, "Issue 17: fields"); no dev item has a
    category or tags that tell items apart, so those stay at the body's 1."""

    key: float = DEFAULT_FIELDS["key"]
    category: float = DEFAULT_FIELDS["category"]
    tags: float = DEFAULT_FIELDS["tags"]
    body: float = DEFAULT_FIELDS["body"]

    def params(self) -> tuple[float, float, float, float, float]:
        """The arguments of ``bm25(chunks_fts, ...)``, one per FTS5 column in its order (body, key, category, tags,
        kind; ``kind`` never counts)."""
        return (self.body, self.key, self.category, self.tags, 0.0)


DEFAULT_FIELD_WEIGHTS = FieldWeights()
#: The keyword search: one FTS5 query (the kind filter is a column filter inside the MATCH expression); the
#: parameters are the five column weights of :meth:`FieldWeights.params`, the expression and the limit.
KEYWORD_SQL = ("SELECT rowid, bm25(chunks_fts, ?, ?, ?, ?, ?) AS s FROM chunks_fts WHERE chunks_fts MATCH ? "
               "ORDER BY s LIMIT ?")


def keyword_sql(kinds: Sequence[str]) -> tuple[str, bool]:
    """The FTS5 query of :func:`match` and whether it filters by kind."""
    return KEYWORD_SQL, set(kinds) != set(KINDS)


def match_expression(expr: str, kinds: Sequence[str], counts: dict[str, int] | None = None) -> str:
    """An FTS5 expression over the searched fields, with the kind filter as a column filter.

    With ``counts`` (rows per kind), the filter takes the shorter list: the kinds wanted (``AND kind : ...``) or
    the kinds not wanted (``NOT kind : ...``), none at all when no row is of an unwanted kind. Intersecting with the
    posting list of a kind costs as many steps as it has rows: "facts only" in a vault of facts read every row's
    kind (1.7x the unfiltered search at 100k), where leaving out the few episodes costs nothing."""
    full = f"{FTS_SEARCHED} : ({expr})"
    wanted = [k for k in KINDS if k in set(kinds)]
    if len(wanted) == len(KINDS):
        return full
    others = [k for k in KINDS if k not in wanted]
    if counts is not None:
        inside, outside = sum(counts.get(k, 0) for k in wanted), sum(counts.get(k, 0) for k in others)
        if outside == 0:
            return full
        if outside < inside:
            return full + " NOT kind : (" + " OR ".join(f'"{k}"' for k in others) + ")"
    return full + " AND kind : (" + " OR ".join(f'"{k}"' for k in wanted) + ")"


def match(conn: sqlite3.Connection, expr: str, kinds: Sequence[str], limit: int,
          weights: FieldWeights | None = None, counts: dict[str, int] | None = None) -> list[tuple[int, float]]:
    """(chunk rowid, BM25 as a positive score) of chunks of ``kinds`` matching an FTS5 expression, best first.

    The words are matched in the body, key, category and tags fields, each weighed by ``weights``; the kind filter
    is a column filter in the same FTS5 query (the shorter way round when ``counts``, the rows per kind, are
    given), so the cost follows the matches, not the number of docs of that kind."""
    if not expr:
        return []
    params = (weights or DEFAULT_FIELD_WEIGHTS).params()
    return [(r[0], -r[1]) for r in conn.execute(KEYWORD_SQL, (*params, match_expression(expr, kinds, counts),
                                                             limit))]


#: Docs per kind, kept by trigger (three rows at most).
KIND_COUNTS_SQL = "SELECT kind, docs FROM kinds"


def vector_sql(kinds: Sequence[str], kind: str = "int8") -> str:
    """sqlite-vec's KNN over the index's vectors (``kind``: how they are stored, see :mod:`.quantize`)."""
    filtered = set(kinds) != set(KINDS)
    return (f"SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH {vector_param(kind)} AND k = ?"
            + (f" AND kind IN ({marks(kinds)})" if filtered else ""))


def knn(conn: sqlite3.Connection, vector: Any, kinds: Sequence[str], limit: int,
        kind: str = "int8") -> list[tuple[int, float]]:
    """(chunk rowid, cosine similarity) best first, from sqlite-vec's KNN (the query quantized as the rows are).

    A row sqlite-vec has no cosine for (all zeros, NaN or inf: a damaged page, a broken model's output) comes back
    with a NULL distance, sorted among the neighbours: it is no neighbour and is left out, and the neighbours it
    took the place of are asked for again."""
    filtered = set(kinds) != set(KINDS)
    blob = encode_vector(kind, vector)
    want = k = min(limit, VEC_K_MAX)
    while True:
        rows = conn.execute(vector_sql(kinds, kind), (blob, k, *kinds) if filtered else (blob, k)).fetchall()
        found = [(r[0], 1.0 - r[1]) for r in rows if _distance(r[1])]
        if len(found) >= want or len(rows) < k or k >= VEC_K_MAX:
            found.sort(key=lambda r: -r[1])
            return found[:want]
        k = min(VEC_K_MAX, k + len(rows) - len(found))


def _distance(value: Any) -> bool:
    """Whether sqlite-vec gave a distance (not NULL, not NaN)."""
    return value is not None and value == value


def similarities_sql(n: int, kind: str = "int8") -> str:
    return (f"SELECT rowid, vec_distance_cosine(embedding, {vector_param(kind)}) FROM chunks_vec "
            f"WHERE rowid IN ({marks(range(n))})")


def similarities(conn: sqlite3.Connection, vector: Any, rowids: Sequence[int], kind: str = "int8") -> dict[int, float]:
    """Cosine similarity of a query vector to the stored vectors of ``rowids`` (computed by sqlite-vec)."""
    out = {}
    blob = encode_vector(kind, vector)
    for batch in batches(list(rowids), 500):
        for rowid, distance in conn.execute(similarities_sql(len(batch), kind), (blob, *batch)):
            if _distance(distance):  # a row without a cosine (see knn) has none here either
                out[rowid] = 1.0 - distance
    return out


DOC_FIELDS = ("kind", "id", "path", "body", "importance", "confidence", "source", "created", "updated", "chunk",
              "valid_until", "review_after", "ekind", "ref", "doc")


def shown_times(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (a doc's fields, a listing's row) with its ``created`` and ``updated`` as
    :func:`memvault.rules.timeutil.format_time` writes them (the index stores
    :data:`memvault.rules.timeutil.INDEX_TIME`)."""
    for key in ("created", "updated"):
        if key in row:
            row[key] = shown_time(row[key])
    return row


def doc_fields(row: Sequence[Any]) -> dict[str, Any]:
    """A row of :data:`DOC_FIELDS` as a dict, its times shown (:func:`shown_times`)."""
    return shown_times(dict(zip(DOC_FIELDS, row)))


def chunk_docs_sql(n: int) -> str:
    return (f"""SELECT c.rowid, d.kind, d.item_id, d.path, d.body, d.importance, d.confidence, d.source,
                       d.created, d.updated, c.chunk, d.valid_until, d.review_after, d.ekind, d.ref, d.doc
                FROM chunks c JOIN docs d ON d.doc = c.doc WHERE c.rowid IN ({marks(range(n))})""")


def chunk_docs(conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """chunk rowid -> its doc's fields."""
    out = {}
    for batch in batches(list(rowids), 500):
        for row in conn.execute(chunk_docs_sql(len(batch)), tuple(batch)):
            out[row[0]] = doc_fields(row[1:])
    return out


def runbook_keys(docs: dict[int, dict[str, Any]]) -> dict[int, tuple[str, str]]:
    """The runbooks among ``docs`` (chunk rowid -> fields): doc id -> (kind, id), each once."""
    return {d["doc"]: (d["kind"], d["id"]) for d in docs.values() if d.get("kind") == "procedure"}


def runbook_steps(conn: sqlite3.Connection, docs: dict[int, dict[str, Any]]) -> dict[int, tuple[str, str]]:
    """The steps (chunks numbered below 0) of the runbooks among ``docs``: rowid -> the runbook's (kind, id). The
    chunks' (doc, chunk) index covers it: no doc is read."""
    keys = runbook_keys(docs)
    out: dict[int, tuple[str, str]] = {}
    for batch in batches(sorted(keys), 500):
        sql = f"SELECT rowid, doc FROM chunks WHERE doc IN ({marks(batch)}) AND chunk < 0"
        out.update((rowid, keys[doc]) for rowid, doc in conn.execute(sql, tuple(batch)))
    return out


RUNS_SQL = ("SELECT item_id, created, body, path, meta, source FROM docs WHERE ref = ? "
            "ORDER BY created DESC LIMIT ?")


def runs_of(conn: sqlite3.Connection, names: Sequence[str], per_name: int) -> dict[str, list[dict[str, Any]]]:
    """The last ``per_name`` procedure_run episodes of each procedure, newest first (index on (ref, created))."""
    import json

    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        rows = conn.execute(RUNS_SQL, (name, per_name)).fetchall()
        out[name] = [{"id": r[0], "created": shown_time(r[1]), "text": r[2], "path": r[3], "meta": json.loads(r[4] or "{}"),
                      "source": r[5]} for r in rows]
    return out


DOC_SQL = ("SELECT c.rowid, d.kind, d.item_id, d.path, d.body, d.importance, d.confidence, d.source, d.created, "
           "d.updated, c.chunk, d.valid_until, d.review_after, d.ekind, d.ref, d.doc "
           "FROM docs d JOIN chunks c ON c.doc = d.doc AND c.chunk = 0 WHERE d.kind = ? AND d.item_id = ?")


def docs_by_id(conn: sqlite3.Connection, kind: str, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """item id -> its doc's fields (as :func:`chunk_docs` gives them, for its first chunk)."""
    out = {}
    for item in ids:
        row = conn.execute(DOC_SQL, (kind, item)).fetchone()
        if row is not None:
            out[item] = doc_fields(row[1:])
    return out


EPISODES_SQL = ("SELECT rowid AS r, kind, item_id, path, body, importance, confidence, source, created, updated, 0, "
                "valid_until, review_after, ekind, ref, doc FROM docs WHERE kind = 'episode' AND created >= ? "
                "AND created < ? ORDER BY created DESC, item_id DESC LIMIT ?")


def episodes_between(conn: sqlite3.Connection, since: str, until: str, limit: int) -> list[dict[str, Any]]:
    """Episodes created in [since, until) (times in :data:`memvault.rules.timeutil.INDEX_TIME`, which sort as
    text), newest first."""
    return [doc_fields(row[1:]) for row in conn.execute(EPISODES_SQL, (since, until, limit))]


#: A row value, not "created < ? OR (created = ? AND item_id < ?)": the OR kept SQLite from a range on the index and
#: it read every episode of the source (3-5 ms a query, hundreds per recall at 100k episodes; now 0.1 ms).
NEIGHBOUR_SQL = {
    "before": ("SELECT c.rowid, d.created FROM docs d JOIN chunks c ON c.doc = d.doc AND c.chunk = 0 "
               "WHERE d.kind = 'episode' AND d.ekind = 'raw' AND d.source = ? AND (d.created, d.item_id) < (?, ?) "
               "ORDER BY d.created DESC, d.item_id DESC LIMIT 1"),
    "after": ("SELECT c.rowid, d.created FROM docs d JOIN chunks c ON c.doc = d.doc AND c.chunk = 0 "
              "WHERE d.kind = 'episode' AND d.ekind = 'raw' AND d.source = ? AND (d.created, d.item_id) > (?, ?) "
              "ORDER BY d.created, d.item_id LIMIT 1"),
}


def episode_neighbours(conn: sqlite3.Connection, docs: dict[int, dict[str, Any]], gap: float) -> dict[int, list[int]]:
    """chunk rowid of a raw episode -> the chunk rowids of the raw episodes just before and after it from the same
    source, at most ``gap`` seconds away (index on (source, created, item_id))."""
    from datetime import datetime

    def seconds(stamp: str) -> float:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    out: dict[int, list[int]] = {}
    for rowid, doc in docs.items():
        if doc.get("kind") != "episode" or doc.get("ekind") != "raw" or not doc.get("created"):
            continue
        here = seconds(doc["created"])
        found = []
        for sql in NEIGHBOUR_SQL.values():
            row = conn.execute(sql, (doc["source"], index_time(doc["created"]), doc["id"])).fetchone()
            if row is not None and abs(seconds(row[1]) - here) <= gap:
                found.append(row[0])
        if found:
            out[rowid] = found
    return out


def unknown_words(conn: sqlite3.Connection, words: Sequence[str], df_cache: dict[str, int]) -> list[str]:
    """Those of ``words`` whose stem no chunk holds (one fts5vocab lookup per new stem, cached with the df)."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab_rows USING fts5vocab(main, chunks_fts, row)")
    out = []
    for word in words:
        found = stems(word)
        if not found:
            continue
        term = found[0]
        if term not in df_cache:
            row = conn.execute("SELECT doc FROM temp.vocab_rows WHERE term = ?", (term,)).fetchone()
            df_cache[term] = row[0] if row else 0
        if not df_cache[term]:
            out.append(word)
    return out


META_GET_SQL = "SELECT value FROM meta WHERE key = ?"
META_SET_SQL = "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)"
#: A sample of a kind's embedded chunks that depends on their text only (a scan and a sort: once per calibration).
SAMPLE_SQL = (f"SELECT d.kind || ':' || d.item_id, {CHUNK_TEXT.format(c='c')} FROM chunks c "
              "JOIN docs d ON d.doc = c.doc WHERE d.kind = ? AND c.model IS NOT NULL ORDER BY d.hash, c.chunk LIMIT ?")
LAST_CHUNK_SQL = "SELECT MAX(rowid) FROM chunks"


def sample_chunks(conn: sqlite3.Connection, kind: str, n: int) -> list[tuple[str, str]]:
    """("kind:id", chunk text) of ``n`` embedded chunks of ``kind``, chosen by their hash."""
    return [(r[0], r[1]) for r in conn.execute(SAMPLE_SQL, (kind, n))]


def docs_vectors_sql(n: int) -> str:
    return ("SELECT c1.rowid, v.embedding FROM chunks c1 JOIN chunks c2 ON c2.doc = c1.doc "
            f"JOIN chunks_vec v ON v.rowid = c2.rowid WHERE c1.rowid IN ({marks(range(n))})")


def docs_vectors(conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, list[bytes]]:
    """Chunk rowid -> the stored vectors (as stored: see :mod:`.quantize`) of every chunk of its doc, in chunk order
    (the doc's index on (doc, chunk)), for many chunks a statement: a vec0 lookup each, ~5 µs a row where a
    statement a chunk took ~27."""
    out: dict[int, list[bytes]] = {}
    for batch in batches(list(rowids), 500):
        for rowid, blob in conn.execute(docs_vectors_sql(len(batch)), batch):
            out.setdefault(rowid, []).append(blob)
    return out


def last_chunk_id(conn: sqlite3.Connection) -> int:
    row = conn.execute(LAST_CHUNK_SQL).fetchone()
    return int(row[0] or 0)


def expansion_terms(conn: sqlite3.Connection, bodies: Sequence[str], query: str, terms: int,
                    df_cache: dict[str, int], spellings: dict[str, str] | None = None) -> list[str]:
    """Pseudo-relevance feedback: the ``terms`` stems that the best memories' ``bodies`` share most and the vault
    holds rarely (memories holding it x IDF), not in the query; a stem in only one of several bodies is not
    shared and left out. ``spellings`` gets a word of the bodies for each stem that has one (see
    :func:`spelled_terms`)."""
    import math

    asked = set(stems(query))
    counts: dict[str, int] = {}
    for body in bodies:
        spelled = spelled_stems(body)
        for stem, word in spelled.items():
            counts[stem] = counts.get(stem, 0) + 1
            if spellings is not None and word is not None:
                spellings.setdefault(stem, word)
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab_rows USING fts5vocab(main, chunks_fts, row)")
    total = df_cache.get("\0n")
    if total is None:
        total = df_cache["\0n"] = fts_rows(conn)
    scored = []
    for stem, count in counts.items():
        if stem in asked or len(stem) < 3 or (count < 2 and len(bodies) > 1):
            continue
        if stem not in df_cache:
            row = conn.execute("SELECT doc FROM temp.vocab_rows WHERE term = ?", (stem,)).fetchone()
            df_cache[stem] = row[0] if row else 0
        df = df_cache[stem]
        if df:
            scored.append((count * math.log((total - df + 0.5) / (df + 0.5) + 1.0), stem))
    return [stem for _, stem in sorted(scored, reverse=True)[:terms]]


def spelled_terms(stems_: Sequence[str], spellings: dict[str, str]) -> str:
    """An FTS5 expression matching any of ``stems_``: each by a word that stems to it when one is known (MATCH stems
    what it is given, and a stem is not always its own stem: "databas" is read "databa"), else the stem itself."""
    return " OR ".join(f'"{spellings.get(s, s)}"' for s in stems_)
