"""The index against hostile or damaged state: rows and stamps a corrupt disk or a hostile hand left in it, a model
that gives vectors no cosine can be taken of, and what a purge must take out of it. Each test failed before its fix."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from fake_embedder import fake_vault
from memvault import Vault
from memvault.index import matrix, search
from memvault.index.db import connect
from memvault.rules.errors import MemvaultError, PurgeIncomplete

FACTS = {f"ops/host{i}": f"Host alpha{i} runs the billing service on port {8000 + i}." for i in range(12)}
FACTS["db/primary"] = "The primary database listens on port 5432 on db1."


def _cold(vault, models) -> Vault:
    """The vault opened again: a new process's first recall asks sqlite-vec's KNN, not the in-memory matrix."""
    return Vault.open(vault.root, embedder_factory=models)


def _poison_rows(v: Vault, n: int) -> None:
    """``n`` stored vectors replaced by all-zero ones (a damaged page; a hostile hand): sqlite-vec has no cosine
    for them (its distance is NULL) and they sorted among the neighbours."""
    target = v.index.current_target()
    v.close()
    conn = connect(target)
    rowids = [r[0] for r in conn.execute("SELECT rowid FROM chunks_vec WHERE rowid IN (SELECT c.rowid FROM chunks c "
                                         "JOIN docs d ON d.doc = c.doc WHERE d.item_id != 'db/primary') LIMIT ?",
                                         (n,))]
    dims = len(conn.execute("SELECT embedding FROM chunks_vec LIMIT 1").fetchone()[0])
    for rowid in rowids:
        kind = conn.execute("SELECT kind FROM chunks_vec WHERE rowid = ?", (rowid,)).fetchone()[0]
        conn.execute("DELETE FROM chunks_vec WHERE rowid = ?", (rowid,))
        conn.execute("INSERT INTO chunks_vec(rowid, kind, embedding) VALUES (?, ?, vec_int8(?))",
                     (rowid, kind, bytes(dims)))
    conn.close()


# ---------------------------------------------------------------------------------------------- rows without a cosine
def test_zero_vector_rows_never_break_nor_crowd_out_a_cold_vector_recall(vault, models):
    v = fake_vault(vault, models, FACTS)
    _poison_rows(v, 8)
    cold = _cold(vault, models)
    hits = cold.recall("primary database port 5432", mode="vector", k=3)
    assert hits and hits[0].id == "db/primary"


def test_knn_skips_rows_without_a_distance_and_still_returns_k_neighbours(tmp_path):
    conn = connect(tmp_path / "x.db")
    conn.execute("CREATE VIRTUAL TABLE chunks_vec USING vec0(kind text, embedding float[2] distance_metric=cosine)")
    rows = [(1, (1.0, 0.0)), (2, (0.0, 0.0)), (3, (float("nan"), 1.0)), (4, (0.6, 0.8)), (5, (float("inf"), 0.0)),
            (6, (0.0, 1.0))]
    for rowid, (x, y) in rows:
        conn.execute("INSERT INTO chunks_vec(rowid, kind, embedding) VALUES (?, 'fact', ?)",
                     (rowid, struct.pack("2f", x, y)))
    query = np.array([0.995, 0.0995], dtype=np.float32)
    found = search.knn(conn, query, ["fact"], 3, "float32")
    assert [r for r, _ in found] == [1, 4, 6]
    assert found[0][1] == pytest.approx(0.995, abs=1e-3) and found[2][1] == pytest.approx(0.0995, abs=1e-3)
    assert search.similarities(conn, query, [1, 2, 3], "float32") == pytest.approx({1: 0.995}, abs=1e-3)
    warm = matrix.load(conn, "float32")  # a warm process's scan of the same rows: inf scored above every row
    assert [r for r, _ in warm.top_k(query, ["fact"], 3)] == [1, 4, 6]


# ---------------------------------------------------------------------------------------------- a broken model's output
def _broken(models, how: str):
    """The fake model, made to give ``how`` for texts holding the word "poison": NaN, inf or all zeros in the row, or
    rows of fewer dimensions than its identity says (for every text)."""
    emb = models.instances["fake-hash"]
    real = type(emb).embed_documents.__get__(emb)

    def embed_documents(texts, batch_size=64):
        m = real(texts)
        for i, text in enumerate(texts):
            if "poison" in text:
                m[i, :] = {"nan": np.nan, "inf": np.inf, "zero": 0.0}.get(how, m[i, :])
        return m[:, :16] if how == "dims" else m

    emb.embed_documents = embed_documents
    return emb


@pytest.mark.parametrize("vectors", ["int8", "float32"])
@pytest.mark.parametrize("how", ["nan", "inf", "zero"])
def test_a_vector_the_model_gives_without_a_cosine_is_not_stored_and_the_rest_are(vault, models, how, vectors):
    if vectors == "float32":
        toml = vault.root / "memvault.toml"
        toml.write_text(toml.read_text().replace('backend = "sqlite"', 'backend = "sqlite"\nvectors = "float32"'))
    v = fake_vault(vault, models, FACTS)
    v.facts.set("bad/one", "A poison text the model cannot embed.")
    _broken(models, how)
    report = v.reindex(full=True)
    assert any("fact:bad/one" in w and "keyword" in w for w in report.warnings), report.warnings
    conn = v.index.connection()
    rows = conn.execute("SELECT d.item_id, c.model FROM chunks c JOIN docs d ON d.doc = c.doc").fetchall()
    assert {i for i, m in rows if m is None} == {"bad/one"}
    assert conn.execute("SELECT COUNT(*) FROM chunks_vec").fetchone()[0] == len(rows) - 1
    assert v.recall("poison text", mode="keyword")[0].id == "bad/one"
    assert _cold(vault, models).recall("primary database port 5432", mode="vector", k=3)[0].id == "db/primary"


def test_vectors_of_other_dimensions_than_the_models_identity_fail_the_rebuild_in_one_line(vault, models):
    v = fake_vault(vault, models, FACTS)
    before = v.index.current_target()
    _broken(models, "dims")
    v.facts.set("new/one", "Something new to embed.")
    with pytest.raises(MemvaultError, match=r"fake-hash.*16.*32") as caught:
        v.reindex(full=True)
    assert "\n" not in str(caught.value)
    assert v.index.current_target() == before  # the old generation still answers
    assert sorted(p.name for p in before.parent.glob("index-*.db")) == [before.name]
    assert _cold(vault, models).recall("primary database port 5432", mode="keyword")[0].id == "db/primary"


# ---------------------------------------------------------------------------------------------- stamps it cannot read
def _set_meta(v: Vault, key: str, value: str) -> None:
    target = v.index.current_target()
    v.close()
    conn = connect(target)
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
    conn.close()


WIDE = '{"name": "fake-hash", "revision": "1", "dims": 16, "query_prefix": "", "max_tokens": 64}'


@pytest.mark.parametrize("key, value", [
    ("vectors", '{"type": "binary"}'),  # a format this memvault does not know (no migration says so)
    ("vectors", "not json"), ("vectors", "[]"), ("vectors", '{"type": 3}'),
    ("model", "not json"), ("model", '{"name": "fake-hash"}'), ("model", "[1, 2]"),
    ("model", WIDE),  # an identity of 16 dimensions over a table of 32
])
def test_an_index_whose_stamps_are_unreadable_is_moved_aside_and_rebuilt(vault, models, key, value):
    v = fake_vault(vault, models, FACTS)
    damaged = v.index.current_target()
    _set_meta(v, key, value)
    again = _cold(vault, models)
    hits = again.recall("primary database port 5432", k=3)
    assert hits and hits[0].id == "db/primary"
    assert any("damaged" in w and damaged.name in w for w in hits.warnings), hits.warnings
    assert again.index.current_target() != damaged
    assert list(damaged.parent.glob(damaged.name + ".corrupt-*"))  # kept aside, as a malformed file is
    assert again.index.identity() is None or again.index.identity().dims == 32


def test_stats_of_an_index_whose_stamp_is_unreadable_is_one_line(vault, models, invoke):
    v = fake_vault(vault, models, FACTS)
    _set_meta(v, "vectors", '{"type": "binary"}')
    result = invoke("stats")
    assert result.exit_code == 1 and "'binary'" in result.output and "moved aside" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert invoke("reindex").exit_code == 0
    assert invoke("stats").exit_code == 0


# ---------------------------------------------------------------------------------------------- purge
def test_a_purge_takes_the_sources_pieces_out_of_the_relevance_scale_kept_in_the_index(vault, models):
    """The relevance scale (core.calibration) keeps pieces of the vault's own text in the index's meta: their
    memories' ids, their vectors (6-word pieces: a vector that close to its words can be turned back into them) and
    their neighbours' ids. A purge left the purged memories there."""
    v = fake_vault(vault, models, FACTS)
    ids = [v.episodes.append(f"The zanzibarquokka payload {i} from a bad page.", source="web:evil.example").id
           for i in range(30)]
    v.reindex()
    pieces = json.loads(v.index.meta_get("calibration:fragments"))
    assert set(ids) & {s.split(":", 1)[1] for s in pieces["sources"]}  # measured with them
    v.purge("web:evil.example", source="user:t")
    v.close()
    for path in v.index.dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert not [i for i in ids if i.encode() in data], path
    again = _cold(vault, models)
    assert again.recall("primary database port 5432", k=3)[0].id == "db/primary"  # measured again
    assert "zanzibarquokka" not in (again.index.meta_get("calibration:fragments") or "")


def test_a_purge_that_cannot_empty_the_wal_says_so_and_a_full_reindex_finishes_it(vault, models):
    """Another process reading the index (a warm process's long read, a listing streamed by the web view) keeps the
    write-ahead log from being emptied: the purged text stayed in the -wal file and the purge said nothing."""
    v = fake_vault(vault, models, FACTS)
    for i in range(5):
        v.episodes.append(f"The zanzibarquokka payload {i} from a bad page.", source="web:evil.example")
    v.recall("zanzibarquokka", mode="keyword")
    reader = connect(v.index.current_target())
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM docs").fetchone()  # holds its snapshot
    v.index.connection().execute("PRAGMA busy_timeout = 200")  # not 30 s of waiting for the reader in a test
    with pytest.raises(PurgeIncomplete, match="index.*reading"):
        v.purge("web:evil.example", source="user:t")
    reader.execute("COMMIT")
    reader.close()
    v.reindex(full=True)
    v.close()
    for path in v.index.dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert b"zanzibarquokka" not in path.read_bytes(), path


# ---------------------------------------------------------------------------------------------- text SQLite cuts short
def test_words_after_a_nul_byte_are_searched_by_keywords_and_by_meaning(vault, models):
    """SQLite's text functions stop at a NUL: the chunk's text (substr of the body) that FTS5 indexed and the model
    embedded ended there, and every word after it was unsearchable, with no problem reported."""
    v = fake_vault(vault, models, FACTS)
    (vault.root / "facts" / "odd").mkdir()
    (vault.root / "facts" / "odd" / "nul.md").write_bytes(b"---\nsource: user:t\n---\nThe nul\x00 byte fact about "
                                                          b"zebracrossing.\n")
    with (vault.root / "episodes" / "2026-11.jsonl").open("w") as f:
        f.write(json.dumps({"id": "01M96P8RPE04ZPF4JVBA1FNR92", "created_at": "2026-11-01T00:00:00Z",
                            "source": "user:t", "kind": "raw", "text": "a turn\u0000 about quagganfish"}) + "\n")
    v.reindex()
    assert [h.id for h in v.recall("zebracrossing", mode="keyword")] == ["odd/nul"]
    assert [h.id for h in v.recall("quagganfish", mode="keyword")] == ["01M96P8RPE04ZPF4JVBA1FNR92"]
    embedded = models.instances["fake-hash"].texts
    assert any("zebracrossing" in t for t in embedded) and any("quagganfish" in t for t in embedded)


# ---------------------------------------------------------------------------------------------- months of state
def test_damaged_copies_set_aside_do_not_pile_up_in_the_state_directory(vault, models):
    """Each damaged generation was moved aside whole (``index-<n>.db.corrupt-<t>``: the vault's text, at full size)
    and kept for ever: a disk that keeps failing filled the state directory. The newest copy is kept."""
    v = fake_vault(vault, models, FACTS)
    state = v.index.dir
    (state / "state.db.corrupt-1").write_bytes(b"not the index's")  # another store's copy: not the index's to drop
    for _ in range(3):
        target = v.index.current_target()
        v.close()
        target.write_bytes(b"\0garbage" * 4096)
        v = _cold(vault, models)
        assert v.recall("primary database port 5432", mode="keyword")[0].id == "db/primary"
    copies = sorted(state.glob("index-*.db.corrupt-*"))
    assert [p.name.split(".corrupt-")[0] for p in copies] == [target.name]
    assert (state / "state.db.corrupt-1").exists()


# ---------------------------------------------------------------------------------------------- two models
@pytest.mark.parametrize("dims", [16, 32])
def test_a_generation_of_another_model_swapped_in_during_a_recall_is_never_searched_with_its_query(vault, models,
                                                                                                  dims):
    """A warm process's recall checked the index's model once, at its start; another process's `reindex` with
    another model swapped its generation in while the recall ran (its freshness check is the moment): the query's
    vector of one model was then scored against the other's vectors (an ONNX shape error at 16 dimensions, a silent
    nonsense ranking at 32)."""
    from fake_embedder import set_model

    from memvault.index.update import SyncReport

    models.dims["fake-other"] = dims
    v = fake_vault(vault, models, FACTS)
    v.recall("warm up the matrix")
    v.recall("and the postings")
    real = v.index.refresh_later

    def refresh_later(interval=30.0):
        finish = real(interval)

        def swapped_meanwhile():
            set_model(vault.root, "fake-other")
            other = Vault.open(vault.root, embedder_factory=models)
            other.reindex(full=True)
            other.close()
            set_model(vault.root, "fake-hash")
            report = finish() or SyncReport()
            report.files_changed += 1
            return report
        return swapped_meanwhile

    v.index.refresh_later = refresh_later
    hits = v.recall("primary database port 5432", k=3)
    assert hits.mode == "keyword" and hits[0].id == "db/primary"
    assert any("fake-other" in w for w in hits.warnings), hits.warnings
