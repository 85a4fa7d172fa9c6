"""Every search query starts from its selective side: ``EXPLAIN QUERY PLAN`` never scans a plain table.

A scan of ``docs`` or ``chunks`` inside a search is what made the kind-filtered keyword search quadratic (the
planner walked every doc of the kind and ran the FTS match per doc). Virtual tables (FTS5, vec0) report their
own index use as ``SCAN ... VIRTUAL TABLE INDEX``, which is the match itself, not a table scan.
"""
from __future__ import annotations

import pytest

from memvault.index import search
from memvault.index.db import marks


@pytest.fixture
def conn(vault, models):
    from fake_embedder import set_model

    set_model(vault.root, "fake-hash")
    from memvault import Vault

    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database host listens on port 5432.")
    v.facts.set("web/lb", "The load balancer host forwards port 443 to the web servers.")
    v.episodes.append("Restarted the server on host web1.", source="user:ops")
    v.reindex()
    return v.index.connection()


def plan(conn, sql: str, params: tuple) -> list[str]:
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


#: Partial indexes that hold only the rows a query wants (pending work): scanning them is the point.
PARTIAL = ("USING INDEX docs_words", "USING INDEX chunks_pending", "USING COVERING INDEX chunks_pending")


def assert_no_table_scan(lines: list[str]) -> None:
    scans = [line for line in lines if line.startswith("SCAN") and "VIRTUAL TABLE" not in line
             and not any(p in line for p in PARTIAL)]
    assert not scans, lines


@pytest.mark.parametrize("kinds", [["fact"], ["fact", "episode"], ["fact", "episode", "procedure"]])
def test_keyword_search_is_one_fts_query(conn, kinds):
    sql, _filtered = search.keyword_sql(kinds)
    lines = plan(conn, sql, ('text : ("host" OR "port") AND kind : ("fact")', 100))
    assert_no_table_scan(lines)
    assert any("chunks_fts VIRTUAL TABLE" in line for line in lines)
    assert not any("docs" in line or "SEARCH c " in line for line in lines)  # no join at all


@pytest.mark.parametrize("kinds", [["fact"], ["fact", "episode", "procedure"]])
def test_vector_search_is_one_knn_query(conn, kinds):
    blob = bytes(4 * 32)
    params = (blob, 10, *kinds) if len(kinds) < 3 else (blob, 10)
    lines = plan(conn, search.vector_sql(kinds), params)
    assert_no_table_scan(lines)
    assert any("chunks_vec VIRTUAL TABLE" in line for line in lines)


def test_doc_lookups_use_keys(conn):
    assert_no_table_scan(plan(conn, search.chunk_docs_sql(3), (1, 2, 3)))
    assert_no_table_scan(plan(conn, "SELECT rowid, vec_distance_cosine(embedding, ?) FROM chunks_vec "
                                    f"WHERE rowid IN ({marks([1, 2])})", (bytes(128), 1, 2)))
    assert_no_table_scan(plan(conn, "SELECT item_id, created, body, path FROM docs WHERE ref = ? "
                                    "ORDER BY created DESC LIMIT ?", ("web/reload", 3)))
    assert_no_table_scan(plan(conn, "SELECT path, size, mtime_ns, ino FROM files WHERE path IN (?, ?)", ("a", "b")))
    assert_no_table_scan(plan(conn, "SELECT doc, kind, item_id, hash FROM docs WHERE path IN (?)", ("facts/x.md",)))
    assert_no_table_scan(plan(conn, "SELECT rowid, kind, text, hash FROM chunks WHERE model IS NULL "
                                    "ORDER BY rowid LIMIT ?", (10,)))
    assert_no_table_scan(plan(conn, "SELECT doc, hash, header, body, kind FROM docs WHERE cut = 'words' LIMIT ?",
                              (10,)))


def test_the_kind_filter_finds_only_that_kind_and_keeps_bm25_order(conn):
    everything = search.match(conn, '"host" OR "port"', ["fact", "episode", "procedure"], 10)
    facts = search.match(conn, '"host" OR "port"', ["fact"], 10)
    kinds = {d["kind"] for d in search.chunk_docs(conn, [r for r, _ in facts]).values()}
    assert kinds == {"fact"} and len(facts) == 2
    fact_rows = [r for r, _ in everything if r in dict(facts)]
    assert [r for r, _ in facts] == fact_rows  # same relative order as without the filter
    # a query word equal to a kind name matches text only, never the kind column
    assert search.match(conn, '"fact"', ["fact", "episode", "procedure"], 10) == []


def test_time_run_and_conversation_lookups_use_their_indexes(conn):
    assert_no_table_scan(plan(conn, search.RUNS_SQL, ("web/reload", 3)))
    assert_no_table_scan(plan(conn, search.DOC_SQL, ("procedure", "web/reload")))
    assert_no_table_scan(plan(conn, search.EPISODES_SQL, ("2026-11-01", "2026-11-02", 10)))
    for sql in search.NEIGHBOUR_SQL.values():
        lines = plan(conn, sql, ("user:ops", "2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z", "01J"))
        assert_no_table_scan(lines)
        assert any("docs_conversation" in line for line in lines), lines
