"""The keyword postings a warm process holds in memory (memvault.index.words) rank as FTS5's bm25() does, with the
field weights and the kind filter; they are used only while the index is as it was when they were read."""
from __future__ import annotations

import math
import time

import pytest

from memvault import Vault
from memvault.index import KINDS, words
from memvault.index.search import FieldWeights

QUERIES = [
    "primary database port", "set a specific setting for the database", "record recording records",
    "nginx web front", "backup db2 nightly", "disk alert web3", "promoted replica failover drill",
    "which port does the primary database listen on", "unknownword", "the", "database database database",
]


@pytest.fixture
def filled(vault, models):
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432. Set the setting max_connections.",
                source="user:t", tags=["database"])
    v.facts.set("db/replica", "The replica database is db2 on port 5433; records replicate within a second.",
                source="user:t")
    v.facts.set("web/front", "The web front is nginx on web1; it proxies the database admin.", source="user:t")
    v.facts.set("ops/backup", "The nightly backup runs at 03:15 from db2 and records its size.", source="user:t")
    v.episodes.append("Failover drill: promoted the replica database in 4 minutes.", source="agent:oncall")
    v.episodes.append("disk alert on web3: 91% full, database logs rotated", source="agent:monitor")
    v.episodes.append("recording the setting change on the primary database", source="agent:oncall")
    v.facts.set("ops/offsite", "Café Zürich backups go offsite; cafe zurich is the DR site.", source="user:t")
    v.recall("warm up", record_access=False)
    yield v
    v.close()


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return (sorted(r for r, _ in a) == sorted(r for r, _ in b)
            and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for (_, x), (_, y) in
                    zip(sorted(a, key=lambda t: -t[1]), sorted(b, key=lambda t: -t[1]))))


@pytest.mark.parametrize("weights", [None, FieldWeights(key=1.0, tags=2.5)])
def test_the_postings_score_every_query_as_fts5_does(filled, weights):
    index = filled.index
    if weights is not None:
        index.field_weights = weights
    postings = words.Postings(index.connection(), index.field_weights.params())
    for kinds in (list(KINDS), ["fact"], ["episode"], ["fact", "procedure"]):
        for q in QUERIES:
            stems = words.word_stems(words_of(q))
            assert all(len(s) <= 1 for s in stems)
            expected = index._match(fts(q), kinds, 100, None)
            assert same(postings.top([s[0] for s in stems if s], kinds, 100), expected), (q, kinds)


PHRASES = QUERIES + [
    "web front of the database", "the primary database", "database listens on port", "front web",
    "replica database replica database", "the nightly backup runs at 03:15", "web front", "setting max", "of the",
    "Café Zürich backups", "cafe zurich", "ＤＢ２ nightly", "backup 03 15", "the the the",
]


@pytest.mark.parametrize("weights", [None, FieldWeights(key=1.0, tags=2.5)])
def test_the_pairs_score_every_phrase_query_as_fts5_does(filled, weights):
    """Two words in a row, in one field, in order: the postings of word pairs give FTS5's phrase scores, ties in
    FTS5's order, for every kind filter (the web/front key is a phrase in the key field, "front web" is not)."""
    from memvault.index.search import fts_phrase_query, phrase_pairs

    index = filled.index
    if weights is not None:
        index.field_weights = weights
    postings = words.Postings(index.connection(), index.field_weights.params())
    matched = 0
    for kinds in (list(KINDS), ["fact"], ["episode"], ["fact", "procedure"]):
        for q in PHRASES:
            stems = words.word_stems([w for pair in phrase_pairs(q) for w in pair])
            assert all(len(s) == 1 for s in stems), q
            pairs = list(zip((s[0] for s in stems[0::2]), (s[0] for s in stems[1::2])))
            for limit in (100, 2):
                mine, theirs = postings.top_pairs(pairs, kinds, limit), index._match(fts_phrase_query(q), kinds,
                                                                                        limit, None)
                assert [r for r, _ in mine] == [r for r, _ in theirs], (q, kinds, limit)
                assert [s for _, s in mine] == pytest.approx([s for _, s in theirs], rel=1e-9), (q, kinds)
                matched += bool(theirs)
    assert matched > 20  # the comparison is not between two empty lists


def test_a_warm_index_answers_phrases_from_memory_until_the_words_change(filled, monkeypatch):
    index = filled.index
    wait_for_postings(index)
    used = spy(monkeypatch, "top_pairs")
    assert [r for r, _ in index.search_phrases("the web front", list(KINDS), 10)]
    assert used
    filled.facts.set("web/edge", "The web front edge is haproxy on web9.", source="user:t")
    used.clear()
    docs = index.chunk_docs([r for r, _ in index.search_phrases("the web front", list(KINDS), 10)])
    assert "web/edge" in {d["id"] for d in docs.values()} and not used


def test_a_phrase_word_of_several_tokens_is_left_to_fts5(filled, monkeypatch):
    from memvault.index.search import fts_phrase_query

    index = filled.index
    wait_for_postings(index)
    monkeypatch.setattr(words.Postings, "top_pairs", lambda *a: pytest.fail("a three-token phrase from memory"))
    found = index.search_phrases("set max_connections", list(KINDS), 10)
    assert found and found == index._match(fts_phrase_query("set max_connections"), list(KINDS), 10, None)


def test_the_coverage_from_memory_is_the_coverage_fts5_gives(filled):
    """Recall's "nothing known" test and its rescoring read how much of the query's IDF a chunk holds: the same
    figure from the postings as from FTS5 lookups, a word only in the kind field counting in the IDF, not as held."""
    from memvault.index.search import coverages, spelled_stems, stems

    index = filled.index
    postings = words.Postings(index.connection(), index.field_weights.params())
    rows = [r for (r,) in index.connection().execute("SELECT rowid FROM chunks_fts")] + [10**9]
    for q in QUERIES + ["episode of the database", "fact"]:
        mine = postings.coverages(stems(q), rows)
        theirs = coverages(index.connection(), spelled_stems(q), rows, {})
        assert theirs == coverages(index.connection(), stems(q), rows, {}), q  # by word and by stem alike
        assert mine == pytest.approx(theirs, abs=1e-12), q
        assert any(theirs.values()) or q in ("unknownword", "fact", "the"), q


def words_of(q: str) -> list[str]:
    from memvault.index.search import query_terms

    return query_terms(q)


def fts(q: str) -> str:
    from memvault.index.search import fts_query

    return fts_query(q)


def spy(monkeypatch, method: str) -> list[int]:
    """A list that grows by one each time ``Postings.<method>`` ranks (the postings answered, not FTS5)."""
    used: list[int] = []
    real = getattr(words.Postings, method)
    monkeypatch.setattr(words.Postings, method, lambda self, *a: (used.append(1), real(self, *a))[1])
    return used


def wait_for_postings(index, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while index._words is None or index._words_loading:
        assert time.monotonic() < deadline, "the postings were never loaded"
        index._words_in_memory()
        time.sleep(0.02)


def test_a_warm_index_ranks_from_memory_and_never_from_stale_postings(filled, monkeypatch):
    index = filled.index
    wait_for_postings(index)
    used = spy(monkeypatch, "top")
    found = index.search_keywords("primary database port", list(KINDS), 10)
    assert used and same(found, index._match(fts("primary database port"), list(KINDS), 10, None))

    filled.facts.set("db/archive", "The archive database keeps ten years of records on port 5499.", source="user:t")
    used.clear()  # the write's own duplicate check searched the index as it was before the write
    rows = dict(index.search_keywords("archive years", list(KINDS), 10))
    docs = index.chunk_docs(list(rows))
    assert "db/archive" in {d["id"] for d in docs.values()}
    assert not used, "postings read before the write answered after it"


def test_a_word_fts5_reads_as_a_phrase_is_left_to_fts5(filled, monkeypatch):
    index = filled.index
    wait_for_postings(index)
    monkeypatch.setattr(words.Postings, "top", lambda *a: pytest.fail("a phrase word was ranked from memory"))
    assert same(index.search_keywords("max_connections", list(KINDS), 10), index._match(fts("max_connections"),
                                                                                         list(KINDS), 10, None))


def test_a_one_shot_process_loads_nothing(vault, models):
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    v.index.sync()
    v.index.search_keywords("primary database", list(KINDS), 10)
    assert v.index._words is None and not v.index._words_loading
    v.close()


def test_a_sync_that_changed_no_text_keeps_the_postings(filled, monkeypatch):
    """A recall's freshness check writes when it last looked (data_version moves): the words did not change."""
    index = filled.index
    wait_for_postings(index)
    index.sync()
    used = spy(monkeypatch, "top")
    index.search_keywords("nightly backup", list(KINDS), 10)
    assert used


def test_ties_go_to_the_lowest_rowid_as_in_fts5(filled):
    """Many memories score alike in a small vault (FTS5's IDF floor): which of them a short list keeps is FTS5's
    choice too, so a warm process and a one-shot one return the same rows."""
    index = filled.index
    postings = words.Postings(index.connection(), index.field_weights.params())
    for q in QUERIES:
        stems = [s[0] for s in words.word_stems(words_of(q)) if s]
        for limit in (1, 2, 3, 5):
            mine, theirs = postings.top(stems, list(KINDS), limit), index._match(fts(q), list(KINDS), limit, None)
            assert [r for r, _ in mine] == [r for r, _ in theirs], (q, limit)
            assert [s for _, s in mine] == pytest.approx([s for _, s in theirs], rel=1e-9), (q, limit)


@pytest.mark.parametrize("change", ["edit", "delete"])
def test_an_edit_or_a_deletion_retires_the_postings(filled, monkeypatch, change):
    """FTS5 rewrites its structure record on every write to the keyword index, deletions and in-place edits too: the
    postings read before either are not used after it."""
    index = filled.index
    wait_for_postings(index)
    if change == "edit":
        filled.facts.set("ops/backup", "The nightly backup now runs at 04:40 from db3.", source="user:t")
    else:
        filled.facts.delete("ops/backup", source="user:t")
    used = spy(monkeypatch, "top")
    rows = dict(index.search_keywords("nightly backup", list(KINDS), 10))
    bodies = {d["id"]: d["body"] for d in index.chunk_docs(list(rows)).values()}
    assert not used
    assert ("04:40" in bodies.get("ops/backup", "")) if change == "edit" else "ops/backup" not in bodies


def test_feedback_finds_a_shared_word_whose_stem_is_not_its_own_stem(vault, models):
    """Pseudo-relevance feedback searches the stems the best memories share. "database" is stored as "databas", which
    MATCH would read as "databa" and find nowhere: a cold process searches it by the word the bodies spell it with, a
    warm one from the postings, and both find the memory that shares it."""
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database is db01.", source="user:t")
    v.facts.set("db/replica", "The replica database is db02.", source="user:t")
    v.facts.set("ops/archive", "Nightly the archive database is copied to tape.", source="user:t")
    v.facts.set("web/front", "The web front is nginx.", source="user:t")
    v.index.sync()
    bodies = ["The primary database is db01.", "The replica database is db02."]
    index = v.index
    assert "databas" in index.expansion_terms(bodies, "which hosts", 5)
    cold = index.search_feedback(bodies, "which hosts", list(KINDS), 5, 10)
    docs = index.chunk_docs([r for r, _ in cold])
    assert "ops/archive" in {d["id"] for d in docs.values()}
    v.recall("warm up", record_access=False)
    wait_for_postings(index)
    assert index._postings() is not None
    assert same(index.search_feedback(bodies, "which hosts", list(KINDS), 5, 10), cold)
    v.close()


def test_an_index_too_large_to_hold_is_left_to_fts5(filled, monkeypatch):
    """The postings grow with the index (~26 bytes a token with the pairs): above MAX_TOKENS a warm process does not
    read them, and FTS5 answers as for a one-shot process."""
    index = filled.index
    conn = index.connection()
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.t_instances USING fts5vocab(main, chunks_fts, instance)")
    assert words.tokens(conn) == conn.execute("SELECT count(*) FROM temp.t_instances").fetchone()[0] > 0
    index._words, index._words_asked = None, float("-inf")
    monkeypatch.setattr(words, "MAX_TOKENS", words.tokens(conn) - 1)
    monkeypatch.setattr(words.Postings, "top", lambda *a: pytest.fail("postings held for a too large index"))
    for _ in range(3):
        assert index._words_in_memory() is None and not index._words_loading
        found = index.search_keywords("primary database port", list(KINDS), 10)
    assert same(found, index._match(fts("primary database port"), list(KINDS), 10, None))
    monkeypatch.undo()  # at the bound itself they are held
    index._words_asked = float("-inf")
    monkeypatch.setattr(words, "MAX_TOKENS", words.tokens(conn))
    wait_for_postings(index)
