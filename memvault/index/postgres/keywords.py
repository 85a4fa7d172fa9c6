"""Keyword search in the shared index: BM25 over stored ``tsvector`` s, with the common-word rule.

The stored ``tsvector`` is ``to_tsvector('english', text with every non-alphanumeric run replaced by a space)``, so
``db01.fra1`` or ``10.8.0.4`` are separate words as in SQLite's FTS5 ``unicode61`` tokenizer (the english parser
would keep them whole and a query for ``db01`` would miss), plus one lexeme ``'kind <kind>'`` (it has a space, so
no text produces it): the kind filter is a term of the same GIN query, as the FTS5 kind column is in the SQLite
index. Scores are BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))) computed in SQL from the
positions in the ``tsvector`` and the per-vault document frequencies.

**The common-word rule** (why "which host and port" over a million chunks that all mention hosts and ports stays
cheap): an OR query ranks every chunk holding any term. So the query's lexemes are sorted by document frequency
and, rarest first, *generate candidates* only while their frequencies add up to at most :data:`CANDIDATE_BUDGET`
chunks (10,000); the others only *score* the candidates the rarer ones found. When not even the rarest lexeme fits
the budget, candidates come from a bounded scan: the first :data:`SCAN_CAP` (2,000) chunks holding all of the
lexemes, topped up to :data:`SCAN_CAP` with chunks holding any. Candidates are ranked by BM25 with term frequency 1
(one ``tsv @@ lexeme`` test per term, ~2 us a candidate) and the best :data:`PRESCORE` (200, or twice the limit)
get full BM25. Phrases and exact quotes follow the same rule (a phrase costs the frequency of its rarer word; the
bounded scan reads at most :data:`SCAN_CAP` chunks holding all its words and keeps those with the phrase). When
the query's words match at most ``CANDIDATE_BUDGET`` chunks in all, every match is a candidate.
Measured at 1M chunks (bench/bench_pgindex.py, 2 shared cores, load ~1): BM25 over every match costs 1.8 s p50
for "which host and port" and 354 ms p50 (1.5 s p95) for natural questions; with the rule 10 ms and 22 ms
(42 ms p95), and the natural questions' top 10 is 93% the same (100% at 100k chunks).

Each search is built by a ``*_sql`` function (the statement and its parameters, what ``explain`` reads) and run
unprepared: whether the planner should read a few thousand rows in order or walk the GIN index depends on how
common the words are, which a generic plan of ``tsv @@ $1`` cannot know.
"""
from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..documents import KINDS
from ..search import MAX_TERMS, query_terms
from .tables import vsql

#: Keyword candidates: the rarest lexemes generate them while their document frequencies add up to at most this.
#: At 1M chunks, natural questions: 5k / 10k / 20k give p50 14 / 22 / 42 ms and a top 10 that is 84 / 93 / 97%
#: the one of BM25 over every match (bench/bench_pgindex.py). Common-word queries do not depend on it (SCAN_CAP).
CANDIDATE_BUDGET = 10_000
#: Chunks read by the bounded scan when every query word is common.
SCAN_CAP = 2_000
#: Candidates (at least; twice the limit when that is more) that get full BM25 after the frequency-1 prescore.
PRESCORE = 200
K1, B = 1.2, 0.75

WORD = re.compile(r"[^\W_]+")  # what the stored tsvector sees as words (non-alphanumeric runs are spaces)


def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def _lexeme(text: str) -> str:
    """A lexeme quoted for a tsquery."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def _kind_filter(kinds: Sequence[str]) -> str | None:
    """The tsquery conjunct that keeps ``kinds`` ("" for all of them), or None when no known kind is asked."""
    wanted = [k for k in KINDS if k in kinds]
    if not wanted:
        return None
    if len(wanted) == len(KINDS):
        return ""
    return " & (" + " | ".join(_lexeme(f"kind {k}") for k in wanted) + ")"


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


@dataclass
class Terms:
    """What a query asks of the keyword side, with each lexeme's document frequency in this vault."""

    lexemes: dict[str, int]                    # keyword lexemes -> df
    phrases: list[tuple[str, int]]             # (tsquery text of a word pair, df of its rarer word)
    pair_words: list[tuple[str, str]]          # the two lexemes of each phrase
    exact: tuple[str, int] | None              # (tsquery of the whole query, df of its rarest word)
    exact_words: list[str]
    n: int                                     # chunks in the vault
    avg: float                                 # words per chunk


def read_terms(conn: Any, v: int, query: str) -> Terms | None:
    """The query's words as lexemes with their document frequencies, in one round trip."""
    tokens = _words(query)[: MAX_TERMS * 2]
    keywords = list(dict.fromkeys(w for t in query_terms(query) for w in _words(t)))[:MAX_TERMS]
    asked = list(dict.fromkeys(tokens + keywords))
    if not asked:
        return None
    rows = conn.execute(vsql(v, """
        SELECT t.tok, l.lexeme, coalesce(x.df, 0), s.nchunks, s.nwords
        FROM unnest(%s::text[]) AS t(tok)
        CROSS JOIN (SELECT nchunks, nwords FROM memvault.vaults WHERE vault_id = %s) s
        LEFT JOIN LATERAL (SELECT u.lexeme FROM unnest(to_tsvector('english', t.tok)) AS u LIMIT 1) l ON true
        LEFT JOIN {lexemes} x ON x.lexeme = l.lexeme"""), (asked, v)).fetchall()
    if not rows:
        return None
    lex = {r[0]: (r[1], int(r[2])) for r in rows}
    n, words = int(rows[0][3]), int(rows[0][4])
    lexemes = {lex[w][0]: lex[w][1] for w in keywords if lex[w][0] is not None}
    # Consecutive words of the query that both survive as lexemes, at their distance (stop words between
    # them count, as the stored positions do): the proximity signal of FTS5's word pairs.
    placed = [(i, lex[t][0], lex[t][1]) for i, t in enumerate(tokens) if lex[t][0] is not None]
    phrases: list[tuple[str, int]] = []
    pair_words: list[tuple[str, str]] = []
    for (i, a, da), (j, b, db) in itertools.pairwise(placed):
        q = f"{_lexeme(a)} <{j - i}> {_lexeme(b)}" if j - i > 1 else f"{_lexeme(a)} <-> {_lexeme(b)}"
        if q not in [p for p, _ in phrases]:
            phrases.append((q, min(da, db)))
            pair_words.append((a, b))
    exact = None
    exact_words: list[str] = []
    if len(tokens) >= 3 and len(placed) >= 2:
        parts = [_lexeme(placed[0][1])]
        for (i, _a, _da), (j, b, _db) in itertools.pairwise(placed):
            parts.append(f"<{j - i}>" if j - i > 1 else "<->")
            parts.append(_lexeme(b))
        exact = (" ".join(parts), min(d for _, _, d in placed))
        exact_words = list(dict.fromkeys(lx for _, lx, _ in placed))
    return Terms(lexemes, phrases, pair_words, exact, exact_words, n, words / n if n else 1.0)


def keyword_sql(v: int, terms: Terms, kinds: Sequence[str], limit: int) -> tuple[Any, tuple] | None:
    """The scoring query of :meth:`search_keywords` (see the common-word rule in the module doc).

    Run unprepared (always a custom plan): whether the planner should read a few thousand rows in order or walk
    the GIN index depends on how common the words are, which a generic plan of ``tsv @@ $1`` cannot know.
    Candidates are first ranked by BM25 with term frequency 1 (one ``tsv @@ lexeme`` test per term: ~2 us a
    candidate); the best PRESCORE of them are then scored by full BM25 (term frequencies from the positions:
    ~7 us a candidate, the cost that made scoring every candidate slow)."""
    from psycopg import sql

    kf = _kind_filter(kinds)
    present = {lx: df for lx, df in terms.lexemes.items() if df > 0}
    if kf is None or not present or limit <= 0:
        return None
    order = sorted(present, key=lambda lx: (present[lx], lx))
    generators, spent = [], 0
    for lx in order:
        if spent + present[lx] > CANDIDATE_BUDGET:
            break
        generators.append(lx)
        spent += present[lx]
    names = list(present)
    idf = [_idf(terms.n, present[lx]) for lx in names]
    cand, cand_params = _candidates(v, generators, names, kf)
    presence = sql.SQL(" + ").join(sql.SQL("CASE WHEN tsv @@ %s::tsquery THEN %s ELSE 0 END") for _ in names)
    query = vsql(v, """
        WITH cand AS MATERIALIZED ({cand}),
        pre AS (SELECT chunk_id, tsv, nwords, ({presence}) / (1 + %s * (1 - %s + %s * nwords / %s)) AS s0
                FROM cand ORDER BY s0 DESC, chunk_id LIMIT %s)
        SELECT pre.chunk_id,
               sum((%s::float8[])[array_position(%s::text[], u.lexeme)] * (u.tf * %s)
                   / (u.tf + %s * (1 - %s + %s * pre.nwords / %s))) AS score
        FROM pre
        CROSS JOIN LATERAL (
            SELECT t.lexeme, coalesce(array_length(t.positions, 1), 1) AS tf
            FROM unnest(ts_filter(setweight(pre.tsv, 'A', %s::text[]), '{{a}}')) AS t) u
        GROUP BY pre.chunk_id
        ORDER BY score DESC, pre.chunk_id
        LIMIT %s""", cand=cand, presence=presence)
    avg = max(terms.avg, 1.0)
    params = [*cand_params]
    for lx, w in zip(names, idf):
        params += [_lexeme(lx), w]
    params += [K1, B, B, avg, max(PRESCORE, 2 * limit), idf, names, K1 + 1, K1, B, B, avg, names, limit]
    return query, tuple(params)


def _candidates(v: int, generators: list[str], names: list[str], kf: str) -> tuple[Any, tuple]:
    """The candidate rows of a keyword query: those holding a generating lexeme, or (none generates: every
    word is common) the first SCAN_CAP chunks holding all the words, topped up with chunks holding any."""
    if generators:
        return (vsql(v, "SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery"),
                ("(" + " | ".join(map(_lexeme, generators)) + ")" + kf,))
    all_q = "(" + " & ".join(map(_lexeme, names)) + ")" + kf
    any_q = "(" + " | ".join(map(_lexeme, names)) + ")" + kf
    # The top-up's LIMIT is what the first part left of the cap: 0 when it filled it, and a LIMIT 0 node
    # never runs its scan (without that, a top-up over words that every chunk holds reads the whole table).
    return (vsql(v, """
                WITH a AS MATERIALIZED (SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery
                                        LIMIT %s)
                SELECT * FROM a
                UNION ALL
                SELECT * FROM (SELECT chunk_id, tsv, nwords FROM {chunks}
                               WHERE tsv @@ %s::tsquery AND NOT tsv @@ %s::tsquery
                               LIMIT greatest(0, %s - (SELECT count(*) FROM a))) o"""),
            (all_q, SCAN_CAP, any_q, all_q, SCAN_CAP))


def phrase_sql(v: int, terms: Terms, kinds: Sequence[str], limit: int) -> tuple[Any, tuple] | None:
    """The scoring query of :meth:`search_phrases`: each phrase a term (frequency 1) whose df is counted among
    the candidates."""
    from psycopg import sql

    kf = _kind_filter(kinds)
    phrases = [(q, df, pair) for (q, df), pair in zip(terms.phrases, terms.pair_words) if df > 0]
    if kf is None or not phrases or limit <= 0:
        return None
    order = sorted(range(len(phrases)), key=lambda i: phrases[i][1])
    generators, spent = [], 0
    for i in order:
        if spent + phrases[i][1] > CANDIDATE_BUDGET:
            break
        generators.append(i)
        spent += phrases[i][1]
    all_q = "(" + " | ".join(f"({q})" for q, _, _ in phrases) + ")" + kf
    if generators:
        cand = vsql(v, "SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery")
        cand_params: tuple = ("(" + " | ".join(f"({phrases[i][0]})" for i in generators) + ")" + kf,)
    else:
        both = "(" + " | ".join(f"({_lexeme(a)} & {_lexeme(b)})" for _, _, (a, b) in phrases) + ")" + kf
        cand = vsql(v, "SELECT * FROM (SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ %s::tsquery "
                       "LIMIT %s) s WHERE s.tsv @@ %s::tsquery")
        cand_params = (both, SCAN_CAP, all_q)
    # A phrase that generated candidates has all its matches among them (its df is exact); for the others
    # the df of their rarer word is an upper bound, used so common pairs do not weigh like rare ones.
    floors = [0 if i in generators else df for i, (_q, df, _p) in enumerate(phrases)]
    k = range(len(phrases))
    matches = sql.SQL(", ").join(sql.SQL("tsv @@ %s::tsquery AS {}").format(sql.Identifier(f"m{i}")) for i in k)
    counts = sql.SQL(", ").join(sql.SQL("greatest(count(*) FILTER (WHERE {m}), %s) AS {n}").format(
        m=sql.Identifier(f"m{i}"), n=sql.Identifier(f"n{i}")) for i in k)
    weight = sql.SQL(" + ").join(sql.SQL("CASE WHEN {m} THEN ln(1 + (%s - {n} + 0.5) / ({n} + 0.5)) ELSE 0 END")
                                 .format(m=sql.Identifier(f"m{i}"), n=sql.Identifier(f"n{i}")) for i in k)
    query = vsql(v, """
        WITH cand AS MATERIALIZED ({cand}),
        m AS MATERIALIZED (SELECT chunk_id, nwords, {matches} FROM cand),
        n AS (SELECT {counts} FROM m)
        SELECT m.chunk_id, ({weight}) * %s / (1 + %s * (1 - %s + %s * m.nwords / %s)) AS score
        FROM m, n
        ORDER BY score DESC, m.chunk_id
        LIMIT %s""", cand=cand, matches=matches, counts=counts, weight=weight)
    n = max(terms.n, 1)
    params = [*cand_params, *(q for q, _, _ in phrases), *floors, *([n] * len(phrases)),
              K1 + 1, K1, B, B, max(terms.avg, 1.0), limit]
    return query, tuple(params)


def exact_sql(v: int, terms: Terms, kinds: Sequence[str], limit: int) -> tuple[Any, tuple] | None:
    kf = _kind_filter(kinds)
    if kf is None or terms.exact is None or terms.exact[1] == 0 or limit <= 0:
        return None
    phrase, df = terms.exact
    if df <= CANDIDATE_BUDGET:
        query = vsql(v, "SELECT chunk_id FROM {chunks} WHERE tsv @@ %s::tsquery "
                        "ORDER BY nwords, chunk_id LIMIT %s")
        return query, (f"({phrase}){kf}", limit)
    words = "(" + " & ".join(map(_lexeme, terms.exact_words)) + ")" + kf
    query = vsql(v, "SELECT chunk_id FROM (SELECT chunk_id, tsv, nwords FROM {chunks} WHERE tsv @@ "
                    "%s::tsquery LIMIT %s) s WHERE s.tsv @@ %s::tsquery ORDER BY nwords, chunk_id LIMIT %s")
    return query, (words, SCAN_CAP, f"({phrase}){kf}", limit)


#: The statement builder of each keyword search: (vault id, terms, kinds, limit) -> (statement, parameters) or None.
BUILDERS = {"search_keywords": keyword_sql, "search_phrases": phrase_sql, "search_exact": exact_sql}


def run(conn: Any, v: int, method: str, query: str, kinds: Sequence[str], limit: int) -> list[tuple[Any, ...]]:
    """The rows of one keyword search (``method`` names it, see :data:`BUILDERS`): (chunk id, score) or (chunk id,)."""
    terms = read_terms(conn, v, query)
    built = BUILDERS[method](v, terms, kinds, limit) if terms else None
    if built is None:
        return []
    return conn.execute(*built, prepare=False).fetchall()


def unknown_words(conn: Any, v: int, words: Sequence[str]) -> list[str]:
    """Those of ``words`` whose lexeme no chunk of the vault holds (its document frequency is 0), compared as the
    stored ``tsvector`` stems them; a word that is only a stop word is never unknown. One round trip."""
    asked = [w for w in dict.fromkeys(words) if _words(w)]
    if not asked:
        return []
    rows = conn.execute(vsql(v, """
        SELECT t.w, l.lexeme, coalesce(x.df, 0)
        FROM unnest(%s::text[]) AS t(w)
        LEFT JOIN LATERAL (SELECT u.lexeme FROM unnest(to_tsvector('english', t.w)) AS u LIMIT 1) l ON true
        LEFT JOIN {lexemes} x ON x.lexeme = l.lexeme"""), (asked,)).fetchall()
    missing = {r[0] for r in rows if r[1] is not None and not r[2]}
    return [w for w in words if w in missing]


def coverage(conn: Any, v: int, query: str, chunk_id: int) -> float:
    """The share of the query's IDF weight that chunk ``chunk_id`` holds (recall's "nothing known" test), with
    the same IDF as the keyword search."""
    terms = read_terms(conn, v, query)
    if terms is None or not terms.lexemes:
        return 0.0
    names = list(terms.lexemes)
    row = conn.execute(vsql(v, "SELECT tsvector_to_array(ts_filter(setweight(tsv, 'A', %s::text[]), '{{a}}')) "
                               "FROM {chunks} WHERE chunk_id = %s"), (names, int(chunk_id))).fetchone()
    held = set(row[0]) if row is not None else set()
    weights = {lx: _idf(terms.n, df) for lx, df in terms.lexemes.items()}
    total = sum(weights.values())
    return sum(w for lx, w in weights.items() if lx in held) / total if total else 0.0


def feedback_terms(conn: Any, v: int, bodies: Sequence[str], query: str, terms: int) -> Terms | None:
    """Pseudo-relevance feedback's terms, as the SQLite index picks its stems: the ``terms`` lexemes that the best
    memories' ``bodies`` share most and the vault holds rarely (memories holding it x IDF), not in the query; a
    lexeme in only one of several bodies is not shared and left out. One round trip (the bodies are stemmed as
    the stored ``tsvector`` is)."""
    if not bodies:
        return None
    rows = conn.execute(vsql(v, """
        WITH b AS (SELECT DISTINCT b.i, u.lexeme
                   FROM unnest(%s::text[]) WITH ORDINALITY AS b(body, i)
                   CROSS JOIN LATERAL unnest(to_tsvector('english',
                       regexp_replace(b.body, '[^[:alnum:]]+', ' ', 'g'))) AS u),
             q AS (SELECT u.lexeme FROM unnest(to_tsvector('english',
                       regexp_replace(%s, '[^[:alnum:]]+', ' ', 'g'))) AS u)
        SELECT b.lexeme, count(*), x.df, s.nchunks, s.nwords
        FROM b JOIN {lexemes} x ON x.lexeme = b.lexeme
        CROSS JOIN (SELECT nchunks, nwords FROM memvault.vaults WHERE vault_id = %s) s
        WHERE length(b.lexeme) >= 3 AND x.df > 0 AND NOT EXISTS (SELECT 1 FROM q WHERE q.lexeme = b.lexeme)
        GROUP BY b.lexeme, x.df, s.nchunks, s.nwords"""), (list(bodies), query, v)).fetchall()
    scored = [(int(count) * _idf(int(n), int(df)), lexeme, int(df))
              for lexeme, count, df, n, _words_ in rows if int(count) >= 2 or len(bodies) == 1]
    if not scored:
        return None
    n, words = int(rows[0][3]), int(rows[0][4])
    chosen = {lexeme: df for _, lexeme, df in sorted(scored, reverse=True)[:terms]}
    return Terms(chosen, [], [], None, [], n, words / n if n else 1.0)


def feedback(conn: Any, v: int, bodies: Sequence[str], query: str, kinds: Sequence[str], terms: int,
             limit: int) -> list[tuple[Any, ...]]:
    """(chunk id, BM25) of the feedback terms (:func:`feedback_terms`) searched as one keyword query (with the
    common-word rule, as any other)."""
    chosen = feedback_terms(conn, v, bodies, query, terms)
    built = keyword_sql(v, chosen, kinds, limit) if chosen else None
    if built is None:
        return []
    return conn.execute(*built, prepare=False).fetchall()
