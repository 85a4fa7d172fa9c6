"""Every search query starts from its selective side: ``EXPLAIN QUERY PLAN`` never scans a plain table.

A scan of ``docs`` or ``chunks`` inside a search is what made the kind-filtered keyword search quadratic (the
planner walked every doc of the kind and ran the FTS match per doc). Virtual tables (FTS5, vec0) report their
own index use as ``SCAN ... VIRTUAL TABLE INDEX``, which is the match itself, not a table scan.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest

from memvault.index import search
from memvault.rules.timeutil import now


@pytest.fixture
def traced_vault(vault, models, tmp_path):
    from fake_embedder import set_model

    set_model(vault.root, "fake-hash")
    from memvault import Vault

    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database host listens on port 5432.")
    v.facts.set("web/lb", "The load balancer host forwards port 443 to the web servers.")
    script = tmp_path / "reload-nginx.sh"
    script.write_text("#!/bin/sh\n# description: Reload nginx on the web servers\n\n# check the config first\n"
                      "nginx -t\n\n# then reload every worker\nexit 0\n")  # blocks between blank lines: steps
    script.chmod(0o755)
    v.procedures.add("web/reload-nginx", script)
    v.procedures.run("web/reload-nginx", [])
    yesterday = now() - timedelta(days=1)
    for i, text in enumerate(["Restarted the server on host web1.", "Why? The web servers were slow.",
                              "Reloaded nginx on web1 and web2."]):
        v.episodes.append(text, source="user:ops", at=yesterday + timedelta(minutes=i))
    v.reindex()
    return v


@pytest.fixture
def conn(traced_vault):
    return traced_vault.index.connection()


def plan(conn, sql: str, params: tuple) -> list[str]:
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


#: Partial indexes that hold only the rows a query wants (pending work): scanning them is the point.
PARTIAL = ("USING INDEX docs_words", "USING COVERING INDEX docs_words", "USING INDEX chunks_pending",
           "USING COVERING INDEX chunks_pending")


def assert_no_table_scan(lines: list[str]) -> None:
    scans = [line for line in lines if line.startswith("SCAN") and "VIRTUAL TABLE" not in line
             and not any(p in line for p in PARTIAL)]
    assert not scans, lines


@pytest.mark.parametrize("kinds", [["fact"], ["fact", "episode"], ["fact", "episode", "procedure"]])
def test_keyword_search_is_one_fts_query(conn, kinds):
    sql, _filtered = search.keyword_sql(kinds)
    expr = search.match_expression('"host" OR "port"', kinds)
    lines = plan(conn, sql, (*search.DEFAULT_FIELD_WEIGHTS.params(), expr, 100))
    assert_no_table_scan(lines)
    assert any("chunks_fts VIRTUAL TABLE" in line for line in lines)
    assert not any("docs" in line or "SEARCH c " in line for line in lines)  # no join at all


@pytest.mark.parametrize("kinds", [["fact"], ["fact", "episode", "procedure"]])
@pytest.mark.parametrize("stored", ["int8", "float32"])
def test_vector_search_is_one_knn_query(conn, kinds, stored):
    blob = bytes(32 if stored == "int8" else 4 * 32)
    params = (blob, 10, *kinds) if len(kinds) < 3 else (blob, 10)
    lines = plan(conn, search.vector_sql(kinds, stored), params)
    assert_no_table_scan(lines)
    assert any("chunks_vec VIRTUAL TABLE" in line for line in lines)


def test_vector_lookups_and_the_float32_conversion_read_by_rowid(conn):
    from memvault.index import quantize

    assert quantize.stored(conn) == "int8"
    lines = plan(conn, search.similarities_sql(3, "int8"), (bytes(32), 1, 2, 3))
    assert_no_table_scan(lines)
    assert any("chunks_vec VIRTUAL TABLE" in line for line in lines)
    lines = plan(conn, search.docs_vectors_sql(3), (1, 2, 3))
    assert_no_table_scan(lines)
    conn.execute("CREATE TEMP TABLE chunks_vec_float32(id INTEGER PRIMARY KEY, kind TEXT, embedding BLOB)")
    try:  # a float32 index becoming int8 reads its rows a range of rowids at a time, never the table again
        lines = plan(conn, quantize.CONVERT_SQL, (0, 4096))
        assert lines == ["SEARCH chunks_vec_float32 USING INTEGER PRIMARY KEY (rowid>?)"], lines
    finally:
        conn.execute("DROP TABLE temp.chunks_vec_float32")


@contextlib.contextmanager
def traced(*conns) -> Iterator[list[tuple[object, str]]]:
    """Every statement the code sends on ``conns`` meanwhile, as SQLite expanded it (parameters inlined), with
    its connection: the code's own SQL, never a copy pasted into a test."""
    seen: list[tuple[object, str]] = []
    for c in conns:
        c.set_trace_callback(lambda sql, c=c: seen.append((c, sql)))
    try:
        yield seen
    finally:
        for c in conns:
            c.set_trace_callback(None)


#: Plain-table scans that are the point of their statement: the directory check reads every directory it
#: recorded (a few rows per area, not per item); the kind filter reads the docs per kind (three rows at most).
BY_DESIGN = ("SCAN dirs", "SCAN kinds")
#: Statements FTS5 itself sends to its shadow tables, and the commands the code sends to FTS5.
FTS5_INTERNAL = re.compile(r"'main'\.'chunks_fts_|^\s*INSERT INTO chunks_fts\b", re.IGNORECASE)
READS = re.compile(r"^\s*(SELECT|WITH|UPDATE|DELETE|INSERT)\b", re.IGNORECASE)


def scans(statements: list[tuple[object, str]]) -> dict[str, list[str]]:
    """statement -> its plan, for the statements whose plan scans a plain table."""
    bad = {}
    for conn, sql in dict.fromkeys(statements):
        if not READS.match(sql) or "sqlite_master" in sql or FTS5_INTERNAL.search(sql):
            continue
        lines = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
        wrong = [line for line in lines if line.startswith("SCAN") and "VIRTUAL TABLE" not in line
                 and not any(p in line for p in PARTIAL + BY_DESIGN)]
        if wrong:
            bad[sql[:300]] = lines
    return bad


def test_every_statement_of_recall_and_of_a_write_starts_from_an_index(conn, traced_vault):
    """Recall in every mode, kind filter and time window, a procedure with runs, a conversation's neighbours, a
    fact write and an episode append: every statement they send is EXPLAINed as sent."""
    v = traced_vault
    with traced(conn, v.state.connection()) as seen:
        for mode in ("hybrid", "keyword"):
            for kinds in (None, ["fact"], ["episode", "procedure"]):
                v.recall("which host listens on port 5432", k=5, kinds=kinds, mode=mode)
        v.recall("restart the web servers", k=5)       # a second hybrid recall: vectors from memory
        v.recall("what happened yesterday", k=5)       # a window and nothing to search for
        v.recall("reload nginx last week", k=5)        # a window and words
        v.recall("reload nginx", k=5, kinds=["procedure"])  # a procedure with its runs
        v.facts.set("db/replica", "The replica host listens on port 5433.")
        v.episodes.append("The replica caught up with the primary.", source="user:ops")
        v.recall("replica lag", k=5)
    bad = scans(seen)
    assert not bad, "\n\n".join(f"{sql}\n  " + "\n  ".join(lines) for sql, lines in bad.items())
    text = "\n".join(sql for _, sql in seen)
    # the workload reached each search the module offers (a query the workload misses is not checked)
    for fragment in ("chunks_fts MATCH", "chunks_vec", "ref =", "created >=", "ekind = 'raw' AND d.source",
                     "AND chunk < 0"):
        assert fragment in text, f"the workload never ran a statement with {fragment!r}"


def test_the_kind_filter_finds_only_that_kind_and_keeps_bm25_order(conn):
    everything = search.match(conn, '"host" OR "port"', ["fact", "episode", "procedure"], 10)
    facts = search.match(conn, '"host" OR "port"', ["fact"], 10)
    kinds = {d["kind"] for d in search.chunk_docs(conn, [r for r, _ in facts]).values()}
    assert kinds == {"fact"} and len(facts) == 2
    fact_rows = [r for r, _ in everything if r in dict(facts)]
    assert [r for r, _ in facts] == fact_rows  # same relative order as without the filter
    # a query word equal to a kind name matches text only, never the kind column
    assert search.match(conn, '"fact"', ["fact", "episode", "procedure"], 10) == []


def test_conversation_lookups_use_their_index(conn):
    for sql in search.NEIGHBOUR_SQL.values():
        lines = plan(conn, sql, ("user:ops", "2026-11-01T00:00:00Z", "01J"))
        # a range on (source, created, item_id), not every episode of the source
        assert any("docs_conversation (source=? AND (created,item_id)" in line for line in lines), lines


def test_the_keyword_index_counts_its_rows_without_walking_them(conn, traced_vault):
    # a runbook's steps (chunks below 0) are vectors only: no keyword row
    count = "SELECT COUNT(*) FILTER (WHERE chunk >= 0), COUNT(*) FILTER (WHERE chunk < 0) FROM chunks"
    total, steps = conn.execute(count).fetchone()
    assert total > 3 and steps >= 2 and search.fts_rows(conn) == total
    traced_vault.facts.delete("web/lb")
    assert search.fts_rows(conn) == conn.execute(count).fetchone()[0] == total - 1


def test_the_relevance_scale_reads_by_index_but_for_its_one_sample(conn, traced_vault):
    """Measuring the scale (once per reindex, model change or growth) samples each kind's chunks by hash: one scan
    and sort of that kind, by design. Every other statement it and the hub check send starts from an index."""
    from memvault.core import calibration
    from memvault.index import KINDS

    v = traced_vault
    v.episodes.append("An untrusted note about the primary database host and port.", source="web:forum.example")
    with traced(conn, v.state.connection()) as seen:
        calibration.current(v.index, v.engine.get(), KINDS, remeasure=True)
        v.recall("which host listens on port 5432", k=5)
        v.index.doc_vectors(conn.execute("SELECT MAX(rowid) FROM chunks").fetchone()[0])
    sample = search.SAMPLE_SQL.split(" ORDER BY")[0]
    bad = {sql: lines for sql, lines in scans(seen).items() if not sql.startswith(sample.split(" WHERE")[0])}
    assert not bad, bad
    text = "\n".join(sql for _, sql in seen)
    assert "ORDER BY d.hash, c.chunk" in text and "JOIN chunks_vec v" in text and "MAX(rowid)" in text


# -- the listings of the web view (memvault.index.listings), as the index protocol asks them -------------------------
def _listing_queries():
    from datetime import datetime, timezone

    from memvault.index import listings as L

    hide = frozenset({"facts/db/old.md", "episodes/x.jsonl"})
    stale = L.Stale(datetime(2030, 1, 1, tzinfo=timezone.utc), 86400.0)
    return {
        # pages: a range or a point of UNIQUE(kind, item_id), or the partial index on episode time
        "facts by prefix": (*L.facts_sql(L.FactQuery(prefix="db")), "SEARCH docs USING"),
        "facts by tag and sources": (*L.facts_sql(L.FactQuery(tag="postgres", sources=("user:a",))),
                                     "SEARCH docs USING"),
        "stale facts": (*L.facts_sql(L.FactQuery(stale=stale)), "SEARCH docs USING"),
        "facts a team host shadows left out": (*L.facts_sql(L.FactQuery(prefix="db", hide=hide)),
                                               "SEARCH docs USING"),
        "fact keys": (L.KEYS_SQL + " ORDER BY item_id", ("db/", "db0"), "SEARCH docs USING COVERING INDEX"),
        "episodes newest first": (*L.episodes_sql(L.EpisodeQuery(source="user:ops")),
                                  "SCAN docs USING INDEX docs_episode_time"),
        "episodes shadowed left out": (*L.episodes_sql(L.EpisodeQuery(hide=hide)),
                                       "SCAN docs USING INDEX docs_episode_time"),
        "the next page of episodes": (*L.episodes_sql(L.EpisodeQuery(before="2026-11-20T10:00:00Z", before_id="e1")),
                                      "SEARCH docs USING INDEX docs_episode_time (created<?)"),
        "one episode": (*L.episodes_sql(L.EpisodeQuery(item_id="e1")), "SEARCH docs USING"),
        "episodes by words": (*L.episodes_sql(L.EpisodeQuery(text="nginx reload")), "chunks_fts VIRTUAL TABLE"),
        # aggregates over a kind (cached by the caller until the index changes): from the kind's index range
        "tags": (L.TAGS_SQL + " GROUP BY t.value", (), "SEARCH docs USING"),
        "sessions": (L.SESSIONS_SQL + " GROUP BY s LIMIT 5", (), "SEARCH docs USING"),
        "the episodes of sessions": (L.SESSION_EPISODES_SQL, ('["s1"]',), "SEARCH docs USING"),
        "episode kinds": (L.EKINDS_SQL, (), "SEARCH docs USING"),
        "episode days": (L.EPISODE_DAYS_SQL + " GROUP BY day", ("2020-01-01",), "SEARCH docs USING"),
        "counts": (L.COUNTS_SQL + " GROUP BY kind, source", (), "SCAN docs USING"),
    }


def test_the_overview_counts_read_a_covering_index_in_group_order(conn):
    """The web overview's counts per kind and source, with and without the paths a scoped reader may not see: one
    pass over a covering index already in GROUP BY order. Before, every row of ``docs`` was read through
    UNIQUE(kind, item_id) and sorted in a temporary B-tree (685 ms at 520,900 rows, 70 ms on the covering index)."""
    from memvault.index import listings as L

    for hide in ((), ("facts/db/old.md",)):
        sql, args = L._hidden(L.COUNTS_SQL, [], hide)
        lines = plan(conn, sql + " GROUP BY kind, source", tuple(args))
        assert any(line.startswith("SCAN docs USING COVERING INDEX docs_kind_source") for line in lines), lines
        assert not [line for line in lines if "TEMP B-TREE" in line], lines


@pytest.mark.parametrize("name", list(_listing_queries()))
def test_every_listing_query_reads_docs_through_an_index(conn, name):
    sql, params, expected = _listing_queries()[name]
    lines = plan(conn, sql, tuple(params))
    assert any(expected in line for line in lines), lines
    assert not [line for line in lines if re.match(r"SCAN (docs|d|chunks|c)\b", line) and "USING" not in line], lines
