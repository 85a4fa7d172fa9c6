"""memvault.index.search, through the index: what a query becomes, what the keyword, phrase, quote and vector
searches return, and the lookups behind a hit (a window of episodes, a runbook's runs)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memvault import Vault
from memvault.index import fts_exact_query, fts_phrase_query, fts_query
from memvault.index.search import query_terms


def test_stop_words_are_dropped_unless_nothing_else_is_left():
    assert query_terms("which port does the primary listen on") == ["port", "primary", "listen"]
    assert query_terms("what is it") == ["what", "is", "it"]
    assert fts_phrase_query("the primary port") == '"the primary" OR "primary port"'
    assert fts_exact_query("primary port") == "" and fts_exact_query("the primary port") == '"the primary port"'


@pytest.fixture
def indexed(vault, models):
    from fake_embedder import set_model

    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432; dumps run at 03:15 UTC.")
    v.facts.set("db/replica", "The replica database follows the primary with streaming replication.")
    v.facts.set("web/lb", "The load balancer forwards port 443 to the web servers.")
    base = datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)
    for day in range(5):
        v.episodes.append(f"Nightly dump {day} of the primary database finished.", source="user:ops",
                          at=base + timedelta(days=day))
    v.reindex()
    return v


@pytest.mark.parametrize("hostile", ['db" OR "x', "NEAR(a b)", "kind : fact", "text:secret", "port*", "-port",
                                     "a AND b NOT c", "(((", '"', "^start", "{text kind}: x"])
def test_fts5_syntax_in_a_question_is_taken_literally(indexed, hostile):
    for kinds in (["fact", "episode", "procedure"], ["fact"]):
        assert isinstance(indexed.index.search_keywords(hostile, kinds, 10), list)  # no FTS5 error
        assert isinstance(indexed.index.search_phrases(hostile, kinds, 10), list)
        assert isinstance(indexed.index.search_exact(hostile + " and more words", kinds, 10), list)
    assert all(part.startswith('"') and part.endswith('"') for part in fts_query(hostile).split(" OR ") if part)


def ids(index, rows):
    return [d["id"] for d in index.chunk_docs([r for r, *_ in rows]).values()]


def test_a_rare_word_outweighs_a_common_one(indexed):
    rows = indexed.index.search_keywords("database replication", ["fact"], 10)
    assert ids(indexed.index, rows[:1]) == ["db/replica"]  # "replication" is rare, "database" is everywhere


def test_the_kind_filter_keeps_the_order_of_the_unfiltered_search(indexed):
    everything = indexed.index.search_keywords("primary database dump", ["fact", "episode", "procedure"], 50)
    facts = indexed.index.search_keywords("primary database dump", ["fact"], 50)
    docs = indexed.index.chunk_docs([r for r, _ in everything])
    assert [r for r, _ in facts] == [r for r, _ in everything if docs[r]["kind"] == "fact"]


def test_phrases_and_quotes_find_words_in_order(indexed):
    phrase = indexed.index.search_phrases("forwards port", ["fact"], 10)
    assert ids(indexed.index, phrase) == ["web/lb"]
    assert indexed.index.search_exact("load balancer forwards", ["fact"], 10)
    assert indexed.index.search_exact("forwards balancer load", ["fact"], 10) == []


def test_the_in_memory_vectors_rank_as_sqlite_vec_does(indexed, models):
    index = indexed.index
    query = models.instances["fake-hash"].embed_query("primary database port")
    first = index.search_vectors(query, ["fact", "episode"], 5)   # a first search asks sqlite-vec
    second = index.search_vectors(query, ["fact", "episode"], 5)  # later ones use the matrix in memory
    def ranked(rows):  # equal scores may come in either order
        return sorted((-round(score, 5), rowid) for rowid, score in rows)

    assert ranked(first) == ranked(second)
    assert index.similarities(query, [first[0][0]])[first[0][0]] == pytest.approx(first[0][1], abs=1e-5)


def test_a_window_of_episodes_is_half_open_and_newest_first(indexed):
    rows = indexed.index.episodes_between(datetime(2026, 11, 21, tzinfo=timezone.utc),
                                          datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc), 10)
    assert [r["body"] for r in rows] == ["Nightly dump 2 of the primary database finished.",
                                         "Nightly dump 1 of the primary database finished."]


def test_a_runbooks_runs_come_newest_first_and_limited(indexed, tmp_path):
    script = tmp_path / "dump.sh"
    script.write_text("#!/bin/sh\n# description: Dump the primary database\nexit 0\n")
    script.chmod(0o755)
    indexed.procedures.add("db/dump", script)
    for _ in range(4):
        indexed.procedures.run("db/dump", [])
    indexed.reindex()
    runs = indexed.index.runs_of(["db/dump"], per_name=3)["db/dump"]
    assert len(runs) == 3
    assert [r["created"] for r in runs] == sorted((r["created"] for r in runs), reverse=True)
