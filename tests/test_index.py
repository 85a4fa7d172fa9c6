"""The index: derived, incremental, model-aware. Logic tests with the deterministic fake embedder."""
from __future__ import annotations

import os
import re

import pytest

from memvault import Vault
from memvault.index import fts_query
from fake_embedder import FakeEmbedder, set_model
from conftest import git





@pytest.fixture
def fv(vault, models):
    """A vault configured for the fake model, with a few memories."""
    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", category="database",
                importance=0.9, tags=["postgres"])
    v.facts.set("web/haproxy", "HAProxy balances web1 web2 web3 with health checks on /healthz.", category="web")
    v.facts.set("dns/resolvers", "Internal resolvers are 10.8.0.2 and 10.8.0.3 running unbound.", category="dns")
    v.episodes.append("Disk on web3 reached 91 percent, cleaned old releases.", source="agent:monitor",
                      at="2026-11-20T10:00:00Z")
    return v


def ids(hits):
    return [(h.kind, h.id) for h in hits]


def test_first_recall_builds_the_index_and_finds_by_keyword_and_meaning(fv, models):
    hits = fv.recall("which port does the primary database use", k=3)
    assert hits[0].id == "db/primary" and hits.mode == "hybrid"
    assert fv.index.exists()
    from memvault.index.db import MIGRATIONS

    applied = [r[0] for r in fv.index.connection().execute("SELECT name FROM migrations ORDER BY rowid")]
    assert applied == [name for name, _ in MIGRATIONS]


def test_question_does_not_need_every_word(fv):
    # "certificate" and "rotation" appear nowhere; an implicit AND would return nothing.
    hits = fv.recall("haproxy certificate rotation schedule", k=3, mode="keyword", min_relevance=0)
    assert hits and hits[0].id == "web/haproxy"
    assert fts_query('what is "the" port: NEAR(x)') == '"port" OR "near" OR "x"'


def test_deleted_index_rebuilt_gives_the_same_recall(fv, models):
    queries = ["primary database port", "disk full web3", "dns resolvers unbound"]
    before = [[(h.kind, h.id, round(h.score, 6)) for h in fv.recall(q, record_access=False)] for q in queries]
    for p in fv.state_dir.glob("index*"):
        p.unlink()
    fresh = Vault.open(fv.root, embedder_factory=models)
    after = [[(h.kind, h.id, round(h.score, 6)) for h in fresh.recall(q, record_access=False)] for q in queries]
    assert after == before


def test_fact_edited_in_place_never_comes_back_with_old_text(fv, models):
    fv.recall("primary database port")  # index built
    path = fv.root / "facts/db/primary.md"
    path.write_text(path.read_text().replace("port 5432", "port 6543"))
    other = Vault.open(fv.root, embedder_factory=models)  # another process: knows nothing of the edit but the file
    for q in ("5432", "primary database port"):
        for hit in other.recall(q, mode="hybrid"):
            assert "5432" not in hit.text
    hit = other.recall("primary database port 6543")[0]
    assert hit.id == "db/primary" and "6543" in hit.text
    rows = other.index.connection().execute("SELECT text FROM chunk_texts").fetchall()
    assert not any("5432" in r[0] for r in rows)


def test_deleted_file_and_git_checkout_are_seen(fv, models):
    fv.recall("resolvers")
    (fv.root / "facts/dns/resolvers.md").unlink()
    assert "dns/resolvers" not in [h.id for h in Vault.open(fv.root, embedder_factory=models).recall("internal resolvers unbound")]
    git(fv.root, "checkout", "--", "facts/dns/resolvers.md")
    fv.facts.set("db/primary", "The primary database moved to 10.8.0.9 port 5433.")
    assert "5433" in Vault.open(fv.root, embedder_factory=models).recall("primary database")[0].text
    git(fv.root, "checkout", "HEAD~1", "--", "facts/db/primary.md")
    texts = [h.text for h in Vault.open(fv.root, embedder_factory=models).recall("primary database port")]
    assert any("5432" in t for t in texts) and not any("5433" in t for t in texts)


def test_unchanged_items_are_not_embedded_again(fv, models):
    fv.reindex()
    fake = models.instances["fake-hash"]
    fake.reset_counts()
    loads = models.loads
    v = Vault.open(fv.root, embedder_factory=models)
    report = v.reindex()
    assert not report.changed and fake.embedded == 0 and models.loads == loads  # model never loaded
    # same content, new mtime: re-read, hash equal, not embedded
    path = fv.root / "facts/web/haproxy.md"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    report = Vault.open(fv.root, embedder_factory=models).reindex()
    assert report.files_changed == 1 and report.metadata_only == 1 and fake.embedded == 0
    # metadata changed (importance is not embedded): refreshed without embedding
    text = path.read_text().replace("importance: 0.5", "importance: 0.95")
    path.write_text(text)
    report = Vault.open(fv.root, embedder_factory=models).reindex()
    assert report.metadata_only == 1 and fake.embedded == 0
    row = fv.index.connection().execute("SELECT importance FROM docs WHERE item_id = 'web/haproxy'").fetchone()
    assert row[0] == 0.95
    # the text changed: exactly that one chunk is embedded
    path.write_text(path.read_text().replace("health checks", "TCP checks"))
    report = Vault.open(fv.root, embedder_factory=models).reindex()
    assert report.docs_changed == 1 and fake.embedded == 1


def test_appended_episode_is_embedded_alone(fv, models):
    fv.reindex()
    fake = models.instances["fake-hash"]
    fake.reset_counts()
    fv.episodes.append("Certificate renewed for the wildcard domain.", source="agent:certbot",
                       at="2026-11-21T10:00:00Z")
    v = Vault.open(fv.root, embedder_factory=models)
    hits = v.recall("wildcard certificate renewed", k=1)
    assert hits[0].kind == "episode" and "wildcard" in hits[0].text
    # the line alone and after the day it was written (its context, tests/test_turn_context.py); no older line
    assert fake.embedded == 2 and fake.texts.count("21 November 2026\nCertificate renewed for the wildcard domain.") == 1


def test_library_write_updates_the_index_at_once(fv, models):
    fv.reindex()
    fv.facts.set("db/primary", "The primary database listens on port 7777.")
    rows = fv.index.connection().execute("SELECT text FROM chunk_texts").fetchall()
    assert any("7777" in r[0] for r in rows) and not any("5432" in r[0] for r in rows)
    fv.facts.delete("web/haproxy")
    assert fv.index.connection().execute("SELECT COUNT(*) FROM docs WHERE item_id='web/haproxy'").fetchone()[0] == 0


def test_model_change_never_mixes_vectors_and_keeps_serving(fv, models):
    fv.recall("primary database")
    set_model(fv.root, "fake-other")
    v = Vault.open(fv.root, embedder_factory=models)
    hits = v.recall("primary database port")
    assert hits and hits[0].id == "db/primary" and hits.mode == "keyword"
    assert any("fake-other" in w and "reindex" in w for w in hits.warnings)
    assert "fake-other" not in models.instances  # no query vector of another model was ever made
    assert v.index.identity().name == "fake-hash"
    v.reindex()
    ident = v.index.identity()
    assert (ident.name, ident.dims) == ("fake-other", 16)
    conn = v.index.connection()
    assert {r[0] for r in conn.execute("SELECT DISTINCT model FROM chunk_texts")} == {"fake-other@1"}
    hits = v.recall("primary database port")
    assert hits.mode == "hybrid" and hits[0].id == "db/primary" and not hits.warnings
    assert len(list(fv.state_dir.glob("index-*.db"))) == 1  # the old generation is gone


def test_reindex_model_option_sets_config_commits_and_rebuilds(fv, models):
    fv.reindex()
    fv.reindex(model="fake-other")
    assert 'model = "fake-other"' in (fv.root / "memvault.toml").read_text()
    assert git(fv.root, "log", "-1", "--format=%s").startswith("embedding model fake-other")
    assert fv.index.identity().name == "fake-other"


def test_crash_during_rebuild_leaves_the_old_index_usable(fv, models, monkeypatch):
    fv.reindex()
    old_target = fv.index.current_target()
    set_model(fv.root, "fake-other")
    v = Vault.open(fv.root, embedder_factory=models)
    broken = FakeEmbedder(dims=16, name="fake-other")

    def explode(texts, batch_size=64):
        raise RuntimeError("killed mid-rebuild")

    broken.embed_documents = explode
    models.instances["fake-other"] = broken
    with pytest.raises(RuntimeError):
        v.reindex()
    assert v.index.current_target() == old_target
    hits = Vault.open(fv.root, embedder_factory=models).recall("primary database port")
    assert hits[0].id == "db/primary" and hits.mode == "keyword"  # old index, other model: keywords only
    models.instances["fake-other"] = FakeEmbedder(dims=16, name="fake-other")
    Vault.open(fv.root, embedder_factory=models).reindex()
    assert len(list(fv.state_dir.glob("index-*.db"))) == 1  # the half-built file was cleaned up


def test_unavailable_model_degrades_to_keywords_with_a_warning(vault, models):
    set_model(vault.root, "fake-missing")
    models.unavailable.add("fake-missing")
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432.")
    hits = v.recall("primary database port")
    assert hits[0].id == "db/primary" and hits.mode == "keyword"
    assert any("unavailable" in w for w in hits.warnings)
    models.unavailable.clear()
    report = Vault.open(vault.root, embedder_factory=models).reindex()
    assert report.chunks_embedded >= 1 and Vault.open(vault.root, embedder_factory=models).index.identity().name == "fake-missing"


def test_procedures_are_indexed_in_chunks_and_returned_whole_with_commit(fv, tmp_path):
    steps = "".join(f"# step {i}: check replica number {i} and write the result to the log file\n" for i in range(60))
    script = tmp_path / "long.sh"
    script.write_text("#!/bin/sh\n# description: Long replica audit\n" + steps +
                      "# final step: rotate the zebra-certificate on the bastion\necho done\n")
    fv.reindex()
    proc = fv.procedures.add("audit/replicas", script)
    chunks = fv.index.connection().execute(
        "SELECT COUNT(*) FROM chunks c JOIN docs d ON d.doc = c.doc WHERE d.item_id = 'audit/replicas'").fetchone()[0]
    assert chunks > 2
    hits = fv.recall("zebra-certificate bastion", k=5)
    hit = next(h for h in hits if h.kind == "procedure")
    assert hit.id == "audit/replicas" and hit.text == script.read_text()
    assert hit.commit == proc.commit == git(fv.root, "rev-parse", "HEAD") and hit.blob == proc.blob
    assert [h.id for h in hits].count("audit/replicas") == 1


def test_access_counts_raise_frequency_and_survive_index_deletion(fv, models):
    first = fv.recall("haproxy health checks", k=1)[0]
    assert first.factors["frequency"] == 0
    fv.recall("haproxy health checks", k=1)
    for p in fv.state_dir.glob("index*"):
        p.unlink()
    third = Vault.open(fv.root, embedder_factory=models).recall("haproxy health checks", k=1)[0]
    assert third.id == first.id and third.factors["frequency"] > 0


def test_scan_ignores_hidden_and_temp_files(fv):
    # dot files (hidden), and editor droppings without a dot, which only the suffix rules catch
    for rel in ("facts/db/.primary.md.swp", "facts/db/.primary.md.123.tmp", "facts/db/primary.md~",
                "facts/db/notes.txt", "procedures/run.sh~", "procedures/run.sh.swp", "procedures/run.sh.tmp",
                "episodes/2026-11.jsonl.tmp", "episodes/notes.txt"):
        path = fv.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("junk")
    (fv.root / "procedures/run.sh").write_text("#!/bin/sh\necho run\n")
    scanned = set(fv.index.scan())
    assert "procedures/run.sh" in scanned  # the filters let real files through
    assert not {p for p in scanned if p.endswith(("~", ".swp", ".tmp", ".txt"))}, scanned


def test_broken_fact_is_reported_and_the_rest_indexed(fv, models):
    (fv.root / "facts/db/broken.md").write_text("---\nimportance: [\n---\nbody\n")
    report = Vault.open(fv.root, embedder_factory=models).reindex()
    assert any("broken.md" in p for p in report.problems)
    assert Vault.open(fv.root, embedder_factory=models).recall("primary database")[0].id == "db/primary"


def test_warm_vector_search_matches_sqlite_vec_and_sees_writes(fv, models):
    fv.reindex()
    v = Vault.open(fv.root, embedder_factory=models)
    q = models.instances["fake-hash"].embed_query("primary database port")
    cold = v.index.search_vectors(q, ["fact", "episode", "procedure"], 10)   # sqlite-vec KNN
    warm = v.index.search_vectors(q, ["fact", "episode", "procedure"], 10)   # in-memory matrix
    assert [r for r, _ in warm] == [r for r, _ in cold]
    assert [s for _, s in warm] == pytest.approx([s for _, s in cold], abs=1e-5)
    only_facts = v.index.search_vectors(q, ["fact"], 10)
    kinds = v.index.chunk_docs([r for r, _ in only_facts])
    assert {d["kind"] for d in kinds.values()} == {"fact"}
    v.engine.get()  # loaded in this process: a library write embeds at once
    v.facts.set("db/pooler", "The primary database port for apps is the pooler port 6432.")
    ids = {d["id"] for d in v.index.chunk_docs([r for r, _ in v.index.search_vectors(q, ["fact"], 10)]).values()}
    assert "db/pooler" in ids  # the cache was dropped by the write


def test_new_file_is_found_at_once_and_in_place_edits_within_the_interval(fv, models):
    fv.recall("primary database")
    (fv.root / "facts/db/new.md").write_text("The zebra cluster runs on 10.8.0.77.\n")
    assert Vault.open(fv.root, embedder_factory=models).recall("zebra cluster", k=1)[0].id == "db/new"  # its directory changed
    path = fv.root / "facts/web/haproxy.md"
    text = path.read_text()
    with path.open("w") as handle:  # in place: same inode, the directory's mtime does not move
        handle.write(text.replace("HAProxy balances", "HAProxy and the okapi proxy balance"))
    toml = fv.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('rescan_interval = "30s"', 'rescan_interval = "0s"'))
    assert Vault.open(fv.root, embedder_factory=models).recall("okapi proxy", k=1)[0].id == "web/haproxy"


def test_a_new_chunking_re_cuts_everything_once_and_re_embeds_what_it_changes(fv, models):
    fv.reindex()
    conn = fv.index.connection()
    total = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    # what an index built by a memvault that cut text another way looks like: another version, and one fact's
    # chunk cut differently (its text differs from what this version cuts)
    conn.execute("UPDATE meta SET value = 'v0:other' WHERE key = 'chunking'")
    conn.execute("UPDATE chunks SET start = 0, len = 12 WHERE doc = (SELECT doc FROM docs "
                 "WHERE item_id = 'db/primary')")
    old = conn.execute("SELECT text FROM chunk_texts WHERE id = 'db/primary'").fetchone()[0]
    fake = models.instances["fake-hash"]
    fake.reset_counts()
    Vault.open(fv.root, embedder_factory=models).reindex()
    assert fake.embedded == 1 and total > 1  # every doc re-cut; only the chunk whose text changed embedded again
    texts = [r[0] for r in conn.execute("SELECT text FROM chunk_texts")]
    assert old not in texts and any("10.8.0.4" in t for t in texts)
    fake.reset_counts()
    assert not Vault.open(fv.root, embedder_factory=models).reindex().changed and fake.embedded == 0


def test_loaded_model_with_other_weights_than_the_index_is_keyword_only_then_rebuilt(fv, models):
    fv.reindex()
    models.instances["fake-hash"] = FakeEmbedder(dims=32, name="fake-hash", revision="2")  # same name, new weights
    v = Vault.open(fv.root, embedder_factory=models)
    hits = v.recall("primary database port")
    assert hits.mode == "keyword" and hits[0].id == "db/primary"
    assert any("differs from the index's" in w for w in hits.warnings)
    v.reindex()  # sees the other revision once the model is loaded: a full rebuild, not a mix
    assert v.index.identity().revision == "2"
    conn = v.index.connection()
    assert {r[0] for r in conn.execute("SELECT DISTINCT model FROM chunk_texts")} == {"fake-hash@2"}
    assert Vault.open(fv.root, embedder_factory=models).recall("primary database port").mode == "hybrid"


def test_keyword_candidates_outside_the_vector_top_get_their_exact_cosine(fv, models, monkeypatch):
    fv.reindex()
    v = Vault.open(fv.root, embedder_factory=models)
    conn = v.index.connection()
    episode = conn.execute("SELECT c.rowid FROM chunks c JOIN docs d ON d.doc = c.doc WHERE d.kind = 'episode'"
                           ).fetchone()[0]
    # the vector search returns only the episode: the fact below is a keyword-only candidate
    monkeypatch.setattr(v.index, "search_vectors", lambda *a, **k: [(episode, 0.9)])
    hybrid = {h.id: h.factors["relevance"] for h in v.recall("primary database port", record_access=False)}
    keyword = {h.id: h.factors["relevance"] for h in v.recall("primary database port", mode="keyword",
                                                              record_access=False)}
    # relevance = s * cosine/best + (1 - s) * keyword: with its cosine filled in it is more than the keyword half
    assert hybrid["db/primary"] > 0.5 * keyword["db/primary"] + 0.01


def test_model_unavailable_during_sync_leaves_vectors_pending_and_keywords_working(fv, models):
    fv.reindex()
    models.unavailable.add("fake-hash")
    Vault.open(fv.root, embedder_factory=models).facts.set("web/cdn", "The zebra CDN caches static assets for 7 days.")
    v = Vault.open(fv.root, embedder_factory=models)
    report = v.reindex()
    assert any("vectors pending" in w for w in report.warnings) and v.index.pending() == 1
    hits = v.recall("zebra CDN")
    assert hits[0].id == "web/cdn" and hits.mode == "keyword"
    models.unavailable.clear()
    report = Vault.open(fv.root, embedder_factory=models).reindex()
    assert report.chunks_embedded == 1 and Vault.open(fv.root, embedder_factory=models).index.pending() == 0


def test_the_vector_search_gives_vector_candidates_and_the_words_candidates(fv, models, monkeypatch):
    """[recall] vector_candidates (50) sizes the vector search, [recall] candidates (100) the keyword searches; a
    recall of more than either asks each for as many as it returns."""
    fv.reindex()
    text = (fv.root / "memvault.toml").read_text()
    text, n = re.subn(r"(?m)^candidates = 100$", "candidates = 9", text)
    text, m = re.subn(r"(?m)^vector_candidates = 50$", "vector_candidates = 3", text)
    assert n == m == 1  # a new vault's memvault.toml writes both settings
    (fv.root / "memvault.toml").write_text(text)
    v = Vault.open(fv.root, embedder_factory=models)
    asked: dict[str, list[int]] = {"vectors": [], "words": []}
    index = type(v.index)
    for name, side in (("search_vectors", "vectors"), ("vector_search", "vectors"), ("search_keywords", "words")):
        original = getattr(index, name)
        monkeypatch.setattr(index, name, lambda self, *a, _o=original, _s=side: (asked[_s].append(a[-1]),
                                                                                  _o(self, *a))[1])
    for _ in range(2):  # a one-shot search, then the warm one (the scan bound to the query's vector)
        v.recall("primary database port", k=2, record_access=False)
    assert set(asked["vectors"]) == {3} and set(asked["words"]) == {9}
    v.recall("primary database port", k=12, record_access=False)
    assert asked["vectors"][-1] == 12 and asked["words"][-1] == 12
    assert Vault.open(fv.root, embedder_factory=models).config.recall.vector_candidates == 3


def test_reindex_json_counts_the_time_spent_embedding(fv, models, invoke, monkeypatch):
    """`reindex --json` said "seconds": 0.0 after embedding: the incremental run's report was a fresh one the text
    sync and the embedding were merged into, and merging left its time at zero."""
    import json
    import time

    fv.reindex()
    fake = models.instances["fake-hash"]
    real = fake.embed_documents

    def slow(texts, *args, **kwargs):
        time.sleep(0.2)
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(fake, "embed_documents", slow)
    path = fv.root / "facts/web/haproxy.md"
    path.write_text(path.read_text().replace("health checks", "TCP checks"))
    result = invoke("reindex", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["chunks_embedded"] == 1 and report["seconds"] >= 0.2
