"""8-bit vectors (issue 24): a quarter of the vector bytes, the same ranking as float32 within quantization, one
score on the cold (sqlite-vec) and warm (numpy) paths, old float32 indexes quantized in place, float32 on request."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from fake_embedder import FakeEmbedder, set_model
from pgserver import pg_server  # noqa: F401
from memvault import Vault
from memvault.index import KINDS, Index, matrix, quantize
from memvault.index.db import connect
from memvault.index.products import Products

WORDS = ("host port server database backup cache proxy queue worker deploy restart nginx postgres redis kafka disk "
         "memory network firewall certificate token rotate alert page schedule cron log metric trace latency error "
         "retry timeout replica primary shard index vacuum migrate rollback release build test lint docker kube").split()


def write_facts(root: Path, n: int, seed: int = 7) -> None:
    """``n`` fact files of a few words each, written straight to disk (an index reads files, not the API)."""
    rng = random.Random(seed)
    for i in range(n):
        path = root / "facts" / f"group{i % 17}" / f"fact-{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12)))
        path.write_text(f"---\nimportance: 0.5\nconfidence: 1.0\nsource: user:test\n---\n{body} number {i}\n")


def built(v: Vault, where: Path, kind: str, emb) -> Index:
    index = Index(where, v.index.sources, vectors=kind)
    index.rebuild(lambda: emb)
    return index


def vec_bytes(index: Index) -> int:
    """Bytes of the vec0 table's vector slots (its chunks of vectors, as stored)."""
    return int(index.stats()["vector_store_bytes"])


@pytest.fixture
def corpus(vault, models, tmp_path):
    set_model(vault.root, "fake-hash")
    write_facts(vault.root, 300)
    v = Vault.open(vault.root, embedder_factory=models)
    return v, models


def test_int8_vectors_take_a_quarter_of_the_bytes_of_float32(vault, models, tmp_path):
    set_model(vault.root, "fake-hash")
    models.dims["fake-hash"] = 384  # MiniLM's size: the rows' other columns weigh what they weigh in real use
    write_facts(vault.root, 1024)  # one vec0 chunk of 1,024 slots, full
    v = Vault.open(vault.root, embedder_factory=models)
    emb = v.engine.get()
    f32, i8 = built(v, tmp_path / "f32", "float32", emb), built(v, tmp_path / "i8", "int8", emb)
    rows = i8.stats()["vectors"]
    assert rows == f32.stats()["vectors"] == 1024
    assert vec_bytes(i8) == vec_bytes(f32) // 4 == 384 * rows  # 384 B a vector against 1,536
    saved = f32.stats()["used_bytes"] - i8.stats()["used_bytes"]
    assert saved >= 0.95 * 3 * 384 * rows  # the whole file: 3 bytes a dimension less, nothing else grew
    assert i8.stats()["used_bytes"] / rows < 0.55 * f32.stats()["used_bytes"] / rows


def test_a_row_is_scaled_by_its_own_largest_component():
    v = np.array([0.05, -0.2, 0.0, 0.1], dtype=np.float32)
    q = np.frombuffer(quantize.int8_blob(v), dtype=np.int8)
    assert list(q) == [32, -127, 0, 64]  # all 255 levels for every vector, whatever the model's spread
    assert quantize.int8_blob(v) == quantize.int8_blob(3 * v) == quantize.int8_blob(v.tobytes())  # no scale to keep
    assert quantize.int8_matrix(v[None, :]).tobytes() == quantize.int8_blob(v)  # numpy and the cold path agree
    assert quantize.int8_blob(np.zeros(4, dtype=np.float32)) == bytes(4)


def _queries(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) for _ in range(n)]


def test_int8_ranks_as_float32_and_cold_and_warm_paths_agree(corpus, tmp_path):
    v, _models = corpus
    emb = v.engine.get()
    f32, i8 = built(v, tmp_path / "f32", "float32", emb), built(v, tmp_path / "i8", "int8", emb)
    kinds = list(KINDS)
    overlap = []
    for text in _queries(40):
        q = emb.embed_query(text)
        exact = [r for r, _ in f32.search_vectors(q, kinds, 10)]
        cold = i8.search_vectors(q, kinds, 10)  # first search of the process: sqlite-vec's KNN
        i8._vector_searches = 1
        warm = i8.search_vectors(q, kinds, 10)  # the in-memory int8 matrix
        i8._vector_searches = 0
        # one ranking, one score, whichever path (rows of equal score may come in either order)
        assert [s for _, s in warm] == pytest.approx([s for _, s in cold], abs=1e-5)
        last = cold[-1][1]
        assert {r for r, s in warm if s > last + 1e-5} == {r for r, s in cold if s > last + 1e-5}
        overlap.append(len(set(exact) & {r for r, _ in cold}) / 10)
        sims = i8.similarities(q, [r for r, _ in cold])
        assert [sims[r] for r, _ in cold] == pytest.approx([s for _, s in cold], abs=1e-5)
    assert np.mean(overlap) >= 0.95


def test_the_warm_scan_scores_every_row_as_exact_arithmetic_does():
    """Every row is scored (no first stage to miss one): the top rows and cosines of exact int8 arithmetic (float64
    here), for every kind filter; the scan's cosines of every row are those cosines() computes row by row."""
    rng = np.random.default_rng(9)
    data = rng.normal(size=(3000, 384)).astype(np.float32)
    ints = quantize.int8_matrix(data / np.linalg.norm(data, axis=1, keepdims=True))
    kinds = np.array(["fact" if i % 3 else "episode" for i in range(len(data))])
    norms = np.linalg.norm(ints.astype(np.float32), axis=1)
    m = matrix.VectorMatrix(np.arange(3000, dtype=np.int64) + 1, kinds, ints, norms, Products(ints))
    for i in range(3):
        q = quantize.int8_matrix(data[i][None, :])[0].astype(np.float64)
        exact = (ints.astype(np.float64) @ q) / (norms * np.linalg.norm(q))
        for wanted in (list(KINDS), ["episode"]):
            found, whole = m.scan(data[i], wanted, 20)
            rows = [r for r in np.argsort(-exact, kind="stable") if kinds[r] in wanted][:20]
            assert [r for r, _ in found] == [int(r) + 1 for r in rows]
            assert [s for _, s in found] == pytest.approx(exact[rows].tolist(), abs=1e-6)
            assert whole.tolist() == pytest.approx(exact.tolist(), abs=1e-6)
            picked = [5, 17, 2999]
            assert m.cosines({r + 1: r for r in range(3000)}, data[i], [r + 1 for r in picked]) == {
                r + 1: whole[r].item() for r in picked}


def test_the_format_is_stamped_beside_the_model_and_a_new_model_rebuilds(corpus, tmp_path):
    v, models = corpus
    v.reindex()
    conn = v.index.connection()
    stamp = {k: json.loads(val) for k, val in conn.execute("SELECT key, value FROM meta WHERE key IN ('model', "
                                                           "'vectors')")}
    assert stamp["vectors"] == {"type": "int8"} and stamp["model"]["name"] == "fake-hash"
    assert "int8[32]" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()[0]
    old = v.index.current_target()
    set_model(v.root, "fake-other")
    v2 = Vault.open(v.root, embedder_factory=models)
    v2.reindex()
    assert v2.index.current_target() != old  # a new generation, every vector of the new model
    conn = v2.index.connection()
    assert "int8[16]" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()[0]
    assert conn.execute("SELECT COUNT(*) FROM chunks_vec").fetchone()[0] == v2.index.stats()["chunks"]
    assert v2.index.pending() == 0


def _float32_setting(root: Path, on: bool) -> None:
    toml = root / "memvault.toml"
    text = toml.read_text().replace('\nvectors = "float32"', "")
    if on:
        text = text.replace('backend = "sqlite"', 'backend = "sqlite"\nvectors = "float32"')
    toml.write_text(text)


def test_a_float32_index_is_quantized_in_place_with_one_line(corpus):
    v, models = corpus
    _float32_setting(v.root, True)
    old = Vault.open(v.root, embedder_factory=models)
    old.reindex()
    conn = old.index.connection()
    floats = dict(conn.execute("SELECT rowid, embedding FROM chunks_vec"))
    assert "float[32]" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()[0]
    target = old.index.current_target()
    old.close()
    # as an index before the stamp left it: no 'vectors' in meta, no migration 0006
    conn = connect(target)
    conn.execute("DELETE FROM meta WHERE key = 'vectors'")
    conn.execute("DELETE FROM migrations WHERE name = '0006_vector_format'")
    conn.close()
    _float32_setting(v.root, False)
    emb = models.instances["fake-hash"]
    emb.reset_counts()
    new = Vault.open(v.root, embedder_factory=models)
    conn = new.index.connection()
    said = [w for w in new.index.warnings if "8-bit" in w]
    assert len(said) == 1 and "bytes a row" in said[0], new.index.warnings
    assert dict(conn.execute("SELECT rowid, embedding FROM chunks_vec")) == {
        r: quantize.int8_blob(b) for r, b in floats.items()}
    assert quantize.stored(conn) == "int8" and new.index.pending() == 0
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'chunks_vec_float32'").fetchone()[0] == 0
    assert emb.embedded == 0  # no model needed
    new.close()
    again = Vault.open(v.root, embedder_factory=models)
    again.index.connection()
    assert not [w for w in again.index.warnings if "8-bit" in w]  # said once, when it happened
    assert again.recall("host port", k=3, record_access=False)


def test_the_setting_keeps_float32_and_reindex_full_goes_back(corpus):
    v, models = corpus
    v.reindex()  # int8 by default
    _float32_setting(v.root, True)
    f = Vault.open(v.root, embedder_factory=models)
    conn = f.index.connection()
    assert quantize.stored(conn) == "int8"  # nothing converts back without the model
    assert any('reindex --full' in w for w in f.index.warnings)
    f.reindex(full=True)
    conn = f.index.connection()
    assert quantize.stored(conn) == "float32"
    assert "float[32]" in conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()[0]
    assert len(conn.execute("SELECT embedding FROM chunks_vec LIMIT 1").fetchone()[0]) == 4 * 32
    hits = f.recall("host port", k=3, record_access=False)
    assert hits and f.index.search_vectors(models.instances["fake-hash"].embed_query("host"), list(KINDS), 3)
    # and stays float32: an index opened with the setting is never quantized
    f.close()
    g = Vault.open(v.root, embedder_factory=models)
    assert quantize.stored(g.index.connection()) == "float32"


def test_the_setting_is_validated(vault):
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('backend = "sqlite"', 'backend = "sqlite"\nvectors = "float16"'))
    from memvault.rules.errors import ConfigError

    with pytest.raises(ConfigError, match="vectors"):
        Vault.open(vault.root)


def test_doc_vectors_are_unit_vectors_of_the_stored_rows(corpus):
    v, models = corpus
    v.reindex()
    conn = v.index.connection()
    rowid = conn.execute("SELECT rowid FROM chunks LIMIT 1").fetchone()[0]
    (vec,) = v.index.doc_vectors(rowid)
    assert vec.dtype == np.float32 and float(np.linalg.norm(vec)) == pytest.approx(1.0, abs=1e-5)
    text = conn.execute("SELECT text FROM chunk_texts WHERE rowid = ?", (rowid,)).fetchone()[0]
    exact = models.instances["fake-hash"].embed_documents([text])[0]
    assert float(vec @ exact) > 0.999
    # many at once, in one statement (doc_vectors is one of it): each chunk's own vector, a doc of several chunks
    # whole and in chunk order, a chunk that does not exist left out
    v.facts.set("notes/long", " ".join(f"Step {i}: check the replica lag on db{i % 3} and note it." for i in range(300)))
    v.reindex()
    many = conn.execute("SELECT c.rowid FROM chunks c JOIN (SELECT doc FROM chunks GROUP BY doc HAVING COUNT(*) > 1 "
                        "LIMIT 1) d ON d.doc = c.doc").fetchall()
    rows = [rowid, many[-1][0], 10**9]
    found = v.index.docs_vectors(rows)
    assert set(found) == {rowid, many[-1][0]} and len(found[many[-1][0]]) == len(many) > 1
    texts = [t for (t,) in conn.execute("SELECT t.text FROM chunk_texts t JOIN chunks c ON c.rowid = t.rowid "
                                         f"WHERE c.rowid IN ({','.join('?' * len(many))}) ORDER BY c.chunk",
                                         [r for (r,) in many])]
    exact = models.instances["fake-hash"].embed_documents(texts)
    assert all(float(got @ want) > 0.999 for got, want in zip(found[many[-1][0]], exact))
    assert float(found[rowid][0] @ vec) == pytest.approx(1.0, abs=1e-6)
    # no vector at all among them (a chunk gone, or not embedded yet): nothing, as doc_vectors always said
    assert v.index.docs_vectors([10**9]) == {} and v.index.doc_vectors(10**9) == []
    models.unavailable.add("fake-hash")  # written where no model is at hand: its vector waits for the next reindex
    Vault.open(v.root, embedder_factory=models).facts.set("notes/pending", "Keywords now, its vector later.")
    models.unavailable.discard("fake-hash")
    pending = conn.execute("SELECT c.rowid FROM chunks c LEFT JOIN chunks_vec v ON v.rowid = c.rowid "
                           "WHERE v.rowid IS NULL").fetchall()
    assert pending and v.index.doc_vectors(pending[0][0]) == []


@pytest.mark.model
def test_minilm_int8_recall_matches_float32(tmp_path):
    """The packaged MiniLM on the example vault: every query's top 5 as float32 gives it."""
    import shutil

    root = tmp_path / "vault"
    shutil.copytree(Path(__file__).resolve().parents[1] / "vault", root)
    toml = root / "memvault.toml"
    toml.write_text(toml.read_text().replace('model = "BAAI/bge-small-en-v1.5"', 'model = "all-MiniLM-L6-v2"'))
    v = Vault.open(root, daemon=False)
    emb = v.engine.get()
    f32, i8 = built(v, tmp_path / "f32", "float32", emb), built(v, tmp_path / "i8", "int8", emb)
    kinds = list(KINDS)
    queries = ["which port does the primary database listen on", "how do I restart the web server",
               "when does the backup run", "what did we decide about the deploy", "rotate the TLS certificate",
               "who is on call", "the cache is slow", "reload nginx"]
    for text in queries:
        q = emb.embed_query(text)
        exact = f32.search_vectors(q, kinds, 5)
        quant = i8.search_vectors(q, kinds, 5)
        assert {r for r, _ in quant[:3]} <= {r for r, _ in exact}, text
        assert [s for _, s in quant] == pytest.approx([s for _, s in exact][:len(quant)], abs=0.02)


# ------------------------------------------------------------------------------------------------ PostgreSQL
def _pg_corpus():
    from memvault.index.documents import Doc

    rng = random.Random(11)
    return [Doc(kind="fact", item_id=f"ops/fact-{i}", path=f"facts/ops/fact-{i}.md", header=f"ops/fact-{i}",
                body=" ".join(rng.choice(WORDS) for _ in range(8)) + f" number {i}", importance=0.5, confidence=1.0,
                source="user:ops", created="2026-11-20T10:00:00Z", updated="2026-11-20T10:00:00Z")
            for i in range(60)]


@pytest.fixture
def pg_url(pg_server, request):  # noqa: F811
    psycopg = pytest.importorskip("psycopg")
    name = "cv_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:40]
    with psycopg.connect(pg_server.url_for("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg_server.url_for(name)


def _pg_index(url, emb, vectors="int8"):
    from memvault.index.postgres import SharedIndex

    ix = SharedIndex(url, "team", vectors=vectors)
    ix.ensure()
    ix.apply(_pg_corpus(), {d.path: "blob" for d in _pg_corpus()}, head="h1", splitter=emb)
    ix.embed(emb)
    return ix


def _pg(url, query, params=()):
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def _column_and_graph(url):
    (table,) = [r[0] for r in _pg(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'memvault' AND "
                                       "tablename ~ '^v[0-9]+_vec_[0-9]+$'")]
    kind = _pg(url, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                    "to_regclass('memvault.' || %s) AND attname = 'embedding'", (table,))[0][0]
    graph = _pg(url, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'memvault' AND tablename = %s "
                     "AND indexdef LIKE '%%hnsw%%'", (table,))
    return table, kind, graph[0][0] if graph else None


def test_the_shared_index_stores_halfvec_and_reads_float32_back(pg_url):
    emb = FakeEmbedder(32)
    ix = _pg_index(pg_url, emb)
    try:
        _table, kind, graph = _column_and_graph(pg_url)
        assert kind == "halfvec(32)" and "halfvec_cosine_ops" in graph
        q = emb.embed_query("host port server")
        hits = ix.search_vectors(q, list(KINDS), 10)
        exact = np.array([emb.embed_documents([f"ops/fact-{i}\n" + d.body])[0] for i, d in enumerate(_pg_corpus())])
        assert len(hits) == 10 and hits == sorted(hits, key=lambda h: -h[1])
        assert [s for _, s in hits] == pytest.approx(sorted((exact @ q).tolist(), reverse=True)[:10], abs=2e-3)
        vecs = ix.doc_vectors(hits[0][0])
        assert vecs[0].dtype == np.float32 and len(vecs[0]) == 32 and float(np.linalg.norm(vecs[0])) == \
            pytest.approx(1.0, abs=2e-3)
        assert ix.similarities(q, [hits[0][0]])[hits[0][0]] == pytest.approx(hits[0][1], abs=1e-6)
    finally:
        ix.close()


def test_the_shared_index_keeps_float32_when_asked_and_0002_makes_old_tables_halfvec(pg_url):
    emb = FakeEmbedder(32)
    ix = _pg_index(pg_url, emb, vectors="float32")
    q = emb.embed_query("host port server")
    try:
        table, kind, graph = _column_and_graph(pg_url)
        assert kind == "vector(32)" and "vector_cosine_ops" in graph
        before = ix.search_vectors(q, list(KINDS), 5)
    finally:
        ix.close()
    # as a vault made before 0002: its float32 table is rewritten as halfvec and its graph rebuilt on it
    _pg(pg_url, "DELETE FROM memvault.vault_migrations WHERE name = '0002_halfvec'")
    from memvault.index.postgres import SharedIndex

    again = SharedIndex(pg_url, "team")
    try:
        again.ensure()
        table2, kind, graph = _column_and_graph(pg_url)
        assert table2 == table and kind == "halfvec(32)" and "halfvec_cosine_ops" in graph
        after = again.search_vectors(q, list(KINDS), 5)
        assert [r for r, _ in after] == [r for r, _ in before]
        assert [s for _, s in after] == pytest.approx([s for _, s in before], abs=2e-3)
        assert again.pending() == 0
    finally:
        again.close()


@pytest.mark.parametrize("kind", ["int8", "float32"])
def test_a_recall_reads_its_candidates_cosines_from_its_own_scan(corpus, tmp_path, monkeypatch, kind):
    """The scan scores every row: the keyword candidates' cosines for the same query vector are read from it, not
    computed again, and are the figures computed row by row; for another vector they are computed: from the rows
    in memory (float32), or by SQLite (int8, whose rows only the packed sessions hold); a write drops the scan."""
    from memvault.index import search

    v, _models = corpus
    emb = v.engine.get()
    ix = built(v, tmp_path / kind, kind, emb)
    ix._vector_searches = 1
    q = emb.embed_query("backup postgres replica")
    rows = sorted({r for r, _ in ix.search_vectors(q, list(KINDS), 40)[::3]} | {1, 2, 3})
    computed, asked = [], []
    real, sql = matrix.VectorMatrix.scores, search.similarities
    monkeypatch.setattr(matrix.VectorMatrix, "scores",
                        lambda self, vec, at=None: (computed.append(at), real(self, vec, at))[1])
    monkeypatch.setattr(search, "similarities", lambda *a, **kw: (asked.append(1), sql(*a, **kw))[1])
    read = ix.similarities(q, rows)
    assert computed == [] and asked == [] and len(read) == len(rows)
    held = ix._vectors_in_memory()
    assert (held.vectors is None) == (kind == "int8")  # one copy of the int8 rows: the packed one
    other = emb.embed_query("backup postgres replica")  # the same figures, but not this scan's vector
    assert ix.similarities(other, rows) == pytest.approx(read, abs=1e-5)
    assert (computed[-1:] == [] and asked == [1]) if kind == "int8" else (computed[-1] is not None and asked == [])
    ix.search_vectors(q, list(KINDS), 10)
    write_facts(v.root, 1, seed=99)
    ix.sync()
    assert ix._scanned is None  # a write drops the scan with the matrix


@pytest.mark.parametrize("kind", ["int8", "float32"])
def test_another_vector_of_a_recall_scores_many_rows_on_the_scanned_matrix(corpus, tmp_path, monkeypatch, kind):
    """The runbooks' feedback reads a second vector's cosines for one row a runbook: past WHOLE_SCAN_ROWS rows the
    matrix the recall scanned is scored whole by its kernel instead of a SQLite lookup a row, with SQLite's
    figures."""
    from memvault.index import search
    from memvault.index.matrix import WHOLE_SCAN_ROWS

    v, _models = corpus
    emb = v.engine.get()
    ix = built(v, tmp_path / kind, kind, emb)
    ix._vector_searches = 1
    q = emb.embed_query("backup postgres replica")
    scan = ix.vector_search(list(KINDS), 200)
    assert scan is not None
    found = scan(q)
    rows = sorted(r for r, _ in found)[: WHOLE_SCAN_ROWS + 8]
    assert len(rows) > WHOLE_SCAN_ROWS
    other = emb.embed_query("restore the database from last night's dump")
    asked = []
    sql = search.similarities
    monkeypatch.setattr(search, "similarities", lambda *a, **kw: (asked.append(1), sql(*a, **kw))[1])
    read = ix.similarities(other, rows)
    assert asked == [] and sorted(read) == rows
    assert read == pytest.approx(sql(ix.connection(), other, rows, ix._format or ix.vector_type), abs=2e-3)
    few = ix.similarities(other, rows[:WHOLE_SCAN_ROWS])  # a few rows: looked up (float32: in the rows held)
    assert asked == ([1] if kind == "int8" else [])
    assert few == pytest.approx({r: read[r] for r in rows[:WHOLE_SCAN_ROWS]}, abs=2e-3)


def test_many_stored_vectors_decode_at_once_as_each_does_alone():
    """quantize.decode_rows (Index.docs_vectors' one pass over many rows) gives each row what decode gives it:
    an int8 row divided by its length, a float32 row as stored; an all-zero int8 row stays zero."""
    from memvault.index import quantize

    rng = np.random.default_rng(7)
    rows = [rng.normal(size=16).astype(np.float32) for _ in range(5)]
    rows = [r / np.linalg.norm(r) for r in rows]
    for kind in ("int8", "float32"):
        blobs = [quantize.encode(kind, r) for r in rows]
        if kind == "int8":
            blobs.append(bytes(16))
        together = quantize.decode_rows(kind, blobs)
        assert together.dtype == np.float32 and together.shape == (len(blobs), 16)
        for blob, row in zip(blobs, together):
            assert np.allclose(row, quantize.decode(kind, blob), atol=1e-6), kind
        assert len(quantize.decode_rows(kind, [])) == 0  # no rows: none, not an error
