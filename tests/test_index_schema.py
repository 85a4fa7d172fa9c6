"""The index's schema: every text kept once, the keyword rows always those of the chunks (whatever changes), the
key, category and tags as fields of their own, and the migration from the previous schema (0004), which re-embeds
nothing whose text did not change."""
from __future__ import annotations

import json
import os
import re

import pytest

from memvault import Vault
from memvault.index import FieldWeights
from memvault.index.quantize import int8_blob
from fake_embedder import FakeEmbedder, set_model

LONG_RUNBOOK = "#!/bin/sh\n# description: Rotate the TLS certificates of the edge proxies\n# tags: tls, edge\n" + "".join(
    f"echo step {i}: renew certificate {i} on edge{i % 4} and reload haproxy\n" for i in range(40))


@pytest.fixture
def fv(vault, models, tmp_path):
    """Facts with a category and tags, a runbook of several chunks, a conversation of raw episodes."""
    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", category="database",
                tags=["postgres", "critical"])
    v.facts.set("web/haproxy", "HAProxy balances web1 web2 web3 with health checks.", category="web")
    v.facts.set("net/vpn", "Engineers reach production through WireGuard on vpn01.", tags=["access"])
    script = tmp_path / "rotate.sh"
    script.write_text(LONG_RUNBOOK)
    script.chmod(0o755)
    v.procedures.add("edge/rotate-certs", script)
    for i, text in enumerate(["Is the backup done?", "Yes, the nightly dump finished at 03:15.",
                              "Good, then rotate the replicas."]):
        v.episodes.append(text, source="user:ops", at=f"2026-11-20T10:0{i}:00Z")
    return v


def write_0004_index(v: Vault, emb: FakeEmbedder) -> None:
    """An index as memvault wrote it at schema 0004: the migrations of then, and the rows its sync wrote (each
    chunk's text in full, its hash, its kind and its model's key; the keyword index filled by the triggers of 0004)."""
    from memvault.index.db import MIGRATIONS, connect, migrate
    from memvault.index.documents import CHUNKING, cut, read_docs, text_hash
    from memvault.index.update import _tail_hash, mean_vector, model_key, scan, vector_blob, with_context

    assert [name for name, _ in MIGRATIONS[:4]][-1] == "0004_kind_in_fts_header_cut"
    v.state_dir.mkdir(parents=True, exist_ok=True)
    target = v.state_dir / "index-1.db"
    conn = connect(target)
    migrate(conn, MIGRATIONS[:4])
    ident = emb.identity
    conn.execute(f"CREATE VIRTUAL TABLE chunks_vec USING vec0(kind text, embedding float[{ident.dims}] "
                 "distance_metric=cosine)")
    conn.executemany("INSERT INTO meta VALUES (?, ?)", [("model", json.dumps(ident.to_dict())),
                                                         ("chunking", CHUNKING), ("last_scan", "1e12")])
    sources, dirs, problems = v.index.sources, {}, []
    for rel, (kind, size, mtime, ino) in sorted(scan(sources, dirs, problems).items()):
        tail = _tail_hash(sources.root / rel, size) if kind == "episode" else None
        conn.execute("INSERT INTO files VALUES (?,?,?,?,?,0,?)", (rel, kind, size, mtime, ino, tail))
        docs = read_docs(sources, rel, kind, problems)
        for d, (texts, how) in zip(docs, cut(docs, emb, None)):
            doc = conn.execute(
                "INSERT INTO docs(kind, item_id, path, body, hash, importance, confidence, source, created, updated, "
                "valid_until, review_after, header, cut, ekind, ref, meta, context) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (d.kind, d.item_id, d.path, d.body, d.hash, d.importance, d.confidence, d.source, d.created,
                 d.updated, d.valid_until, d.review_after, d.header, how, d.ekind, d.ref, d.meta, d.context)).lastrowid
            for j, text in texts:
                if j < 0:  # a runbook's steps came with schema 0007
                    continue
                rowid = conn.execute("INSERT INTO chunks(doc, chunk, kind, text, hash, model) VALUES (?,?,?,?,?,?)",
                                     (doc, j, d.kind, text, text_hash(text), model_key(ident))).lastrowid
                blob = vector_blob(emb.embed_documents([text])[0])
                if d.context:
                    blob = mean_vector(blob, vector_blob(emb.embed_documents([with_context(text, d.context)])[0]))
                conn.execute("INSERT INTO chunks_vec(rowid, kind, embedding) VALUES (?,?,?)", (rowid, d.kind, blob))
    conn.executemany("INSERT INTO dirs VALUES (?, ?)", list(dirs.items()))
    conn.close()
    os.symlink(target.name, v.state_dir / "index.db")


@pytest.fixture
def old(fv, models):
    """``fv`` with an index of schema 0004 and no other; the fake model counts what is embedded from here on."""
    for path in fv.state_dir.glob("index*"):
        path.unlink()
    fv.index.close()
    emb = models(fv.config)
    write_0004_index(fv, emb)
    emb.reset_counts()
    return fv, emb


def raw(v: Vault):
    """A connection to the index file as it is (no migration)."""
    from memvault.index.db import connect

    return connect(v.index.current_target())


def test_an_index_of_schema_0004_migrates_keeping_every_vector_and_text(old, models):
    v, emb = old
    conn = raw(v)
    before = {r[0]: r[1:] for r in conn.execute("SELECT c.rowid, c.text, c.model FROM chunks c")}
    before_vectors = dict(conn.execute("SELECT rowid, embedding FROM chunks_vec"))
    conn.close()
    fresh = Vault.open(v.root, embedder_factory=models)
    conn = fresh.index.connection()  # migrates
    assert "0005_index_text_once" in {r[0] for r in conn.execute("SELECT name FROM migrations")}
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0  # compacted once: the copies' pages given back
    after = {r[0]: r[1:] for r in conn.execute("SELECT rowid, text, model FROM chunk_texts")}
    assert after == before and len(before) > 8  # same rowids, texts and model, the runbook in several chunks
    # every vector kept, as the 8-bit vector its float32 one quantizes to (issue 24: no model needed for that)
    assert dict(conn.execute("SELECT rowid, embedding FROM chunks_vec")) == {
        r: int8_blob(b) for r, b in before_vectors.items()}
    assert fresh.index.pending() == 0
    report = fresh.reindex()
    assert emb.embedded == 0 and report.docs_changed == 0 and report.docs_added == 0  # re-read, nothing embedded
    assert report.metadata_only == report.files_seen + 2  # every file re-read once (three episodes in one file)
    assert not Vault.open(v.root, embedder_factory=models).reindex().changed


def test_after_the_migration_the_keyword_index_has_the_fields_and_agrees_with_the_chunks(old, models):
    v, _emb = old
    fresh = Vault.open(v.root, embedder_factory=models)
    fresh.reindex()
    conn = fresh.index.connection()
    fields = "SELECT f.key, f.category, f.tags FROM chunk_fields f JOIN chunk_texts t ON t.rowid = f.rowid WHERE t.id = ?"
    assert conn.execute(fields, ("db/primary",)).fetchone() == ("db/primary", "database", '["postgres","critical"]')
    assert conn.execute(fields, ("net/vpn",)).fetchone() == ("net/vpn", "", '["access"]')
    assert conn.execute(fields, ("edge/rotate-certs",)).fetchone() == (
        "edge/rotate-certs", "Rotate the TLS certificates of the edge proxies", '["tls","edge"]')
    check_keywords(conn)
    for words, key in (("critical", "db/primary"), ("access", "net/vpn"), ("rotate certs", "edge/rotate-certs")):
        hits = fresh.recall(words, mode="keyword", k=1, min_relevance=0)
        assert hits and hits[0].id == key, words


def test_a_chunk_its_span_cannot_reproduce_is_embedded_again_alone(old, models):
    v, emb = old
    conn = raw(v)
    # a chunk as another memvault cut it: no span of the body gives this text
    conn.execute("UPDATE chunks SET text = 'net vpn\nEngineers reach production by other means.' WHERE doc = "
                 "(SELECT doc FROM docs WHERE item_id = 'net/vpn')")
    conn.close()
    fresh = Vault.open(v.root, embedder_factory=models)
    conn = fresh.index.connection()
    assert conn.execute("SELECT COUNT(*) FROM chunks WHERE model IS NULL").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(*) FROM chunks_vec WHERE rowid IN (SELECT rowid FROM chunks "
                        "WHERE model IS NULL)").fetchone()[0] == 0  # its stale vector is gone
    report = fresh.reindex()
    chunk = "net vpn · access\nEngineers reach production through WireGuard on vpn01."
    # that chunk alone, once (the relevance scale the reindex measures afterwards embeds pieces of its own)
    assert report.chunks_embedded == 1 and emb.texts.count(chunk) == 1
    assert fresh.index.pending() == 0


def check_keywords(conn) -> None:
    """FTS5's own check of the keyword index against its content (the chunk_fields view): every row's words, and
    no word of a row that is gone."""
    conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
    rows = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    from memvault.index.search import fts_rows

    assert fts_rows(conn) == rows


def test_every_kind_of_change_keeps_the_keyword_rows_those_of_the_chunks(fv, models):
    fv.reindex()
    conn = fv.index.connection()
    check_keywords(conn)
    fv.facts.set("db/primary", "The primary database moved to port 6543.", category="database",
                 tags=["postgres", "critical"])                                    # text changed
    fv.facts.set("web/haproxy", "HAProxy balances web1 web2 web3 with health checks.", category="frontend")  # field
    fv.facts.delete("net/vpn")                                                     # gone
    fv.episodes.append("The replicas are rotated.", source="user:ops", at="2026-11-20T10:05:00Z")  # appended
    path = fv.root / "procedures/edge/rotate-certs.sh"
    path.write_text(LONG_RUNBOOK.replace("echo step 3:", "echo step three:"))    # one chunk of many changed
    fv.reindex()
    check_keywords(conn)
    assert not fv.recall("5432", mode="keyword", min_relevance=0)
    assert fv.recall("frontend", mode="keyword", k=1, min_relevance=0)[0].id == "web/haproxy"
    assert not fv.recall("wireguard", mode="keyword", min_relevance=0)
    with conn:  # a doc's fields changed under its chunks (no code path does it; the triggers still follow)
        conn.execute("""UPDATE docs SET meta = '{"category": "x", "tags": ["zebra"]}' WHERE item_id = 'db/primary'""")
        conn.execute("UPDATE docs SET body = 'Another text altogether.' WHERE item_id = 'web/haproxy'")
        conn.execute("DELETE FROM docs WHERE item_id = 'edge/rotate-certs'")
    check_keywords(conn)


def test_each_text_is_kept_once(fv):
    phrase = "The zebra quokka listens on the lighthouse port"
    fv.facts.set("odd/zebra", phrase + ".")
    fv.reindex()
    conn = fv.index.connection()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = fv.index.current_target().read_bytes()
    assert data.count(phrase.encode()) == 1  # the doc's body; the chunk is a span, the keyword index holds words
    assert conn.execute("SELECT text FROM chunk_texts WHERE id = 'odd/zebra'").fetchone()[0] == (
        "odd zebra\n" + phrase + ".")


def test_a_word_counts_by_the_field_it_is_in(fv):
    fv.facts.set("ops/lighthouse", "Nothing about keepers here.", category="coast")
    fv.facts.set("ops/notes", "The lighthouse keeper rotates every Friday; keepers sleep on site.")
    fv.reindex()
    index = fv.index

    def top(weights):
        rows = index.search_keywords("lighthouse", ["fact"], 5, weights)
        return index.chunk_docs([rows[0][0]])[rows[0][0]]["id"]

    assert top(FieldWeights(key=5.0)) == "ops/lighthouse"   # the word is its key
    assert top(FieldWeights(key=0.0)) == "ops/notes"        # the word is in its text only
    assert top(FieldWeights(category=0.0, key=0.0, tags=0.0)) == "ops/notes"
    coast = index.search_keywords("coast", ["fact"], 5, FieldWeights(category=0.0))
    assert coast and coast[0][1] < 1e-5 or not coast  # a field of weight 0 adds nothing to the score


def test_field_weights_come_from_the_recall_settings(fv, models):
    toml = fv.root / "memvault.toml"
    text, n = re.subn(r"(?m)^field_weights = .*$", "field_weights = { key = 4.0, tags = 0.5 }", toml.read_text())
    assert n == 1
    toml.write_text(text)
    v = Vault.open(fv.root, embedder_factory=models)
    assert v.index.field_weights == FieldWeights(key=4.0, category=1.0, tags=0.5, body=1.0)
    assert fv.index.field_weights == FieldWeights() and FieldWeights().key == 3.0  # the measured default


def test_a_tag_or_category_in_any_script_is_a_keyword_of_its_memory(fv):
    fv.facts.set("ops/paris", "The office printer is on the second floor.", category="bureau", tags=["café", "étage"])
    fv.reindex()
    for word in ("café", "etage", "bureau"):  # diacritics folded as in the text
        assert fv.recall(word, mode="keyword", k=1, min_relevance=0)[0].id == "ops/paris", word


def test_stats_give_the_whole_index_per_row_beside_4_dims(fv):
    fv.reindex()
    data = fv.stats()
    per_row = data["bytes_per_row"]
    dims = fv.index.identity().dims
    assert per_row["theoretical_float32"] == 4 * dims
    assert per_row["total_over_4dims"] == round(per_row["measured_total"] / (4 * dims), 3)
    assert per_row["measured_total"] == data["index"]["used_bytes"] / data["index"]["chunks"]


def test_a_sync_that_rewrites_many_docs_merges_the_keyword_index(fv, monkeypatch):
    fv.reindex()
    monkeypatch.setattr("memvault.index.OPTIMIZE_AFTER", 3)
    one = fv.index.sync([fv.root / "facts/db/primary.md"])
    assert "optimize" not in one.timings
    for path in (fv.root / "facts").rglob("*.md"):
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    report = fv.index.sync()
    assert report.metadata_only >= 3 and "optimize" in report.timings
    check_keywords(fv.index.connection())


def test_the_kind_filter_takes_the_shorter_list_and_never_lets_another_kind_through(fv, models):
    from memvault.index.search import match_expression

    assert match_expression('"x"', ["fact"], {"fact": 90, "episode": 10}) == \
        '{body key category tags} : ("x") NOT kind : ("episode" OR "procedure")'
    assert match_expression('"x"', ["episode"], {"fact": 90, "episode": 10}) == \
        '{body key category tags} : ("x") AND kind : ("episode")'
    assert match_expression('"x"', ["fact"], {"fact": 90}) == '{body key category tags} : ("x")'
    fv.reindex()
    other = Vault.open(fv.root, embedder_factory=models)
    kinds = lambda rows: {d["kind"] for d in fv.index.chunk_docs([r for r, _ in rows]).values()}  # noqa: E731
    assert kinds(fv.index.search_keywords("web3 primary rotate", ["fact"], 50)) == {"fact"}
    assert kinds(fv.index.search_keywords("backup dump replicas", ["episode"], 50)) == {"episode"}
    other.episodes.append("The primary web3 rotation is done.", source="user:ops")  # another process writes
    other.index.sync()
    assert kinds(fv.index.search_keywords("web3 primary rotation", ["fact"], 50)) == {"fact"}
    fv.facts.delete("net/vpn")  # this one writes
    assert "episode" in kinds(fv.index.search_keywords("web3 primary rotation", ["fact", "episode"], 50))


def test_the_docs_per_kind_follow_every_write(fv):
    fv.reindex()
    conn = fv.index.connection()
    real = lambda: dict(conn.execute("SELECT kind, COUNT(*) FROM docs GROUP BY kind").fetchall())  # noqa: E731
    kept = lambda: {k: n for k, n in conn.execute("SELECT kind, docs FROM kinds") if n}  # noqa: E731
    assert kept() == real() and real()["fact"] == 3
    fv.facts.delete("net/vpn")
    fv.episodes.append("Another turn.", source="user:ops")
    fv.index.sync()
    assert kept() == real() and real()["fact"] == 2 and real()["episode"] == 4


def test_fts5_records_are_read_as_sqlite_varints_the_ninth_byte_whole():
    """One reader (db.varints) for FTS5's averages and docsize records: 1 to 9 bytes a value, the 9th taken whole."""
    from memvault.index.db import varints

    def encoded(v: int) -> bytes:
        if v >= 1 << 56:
            out = [v & 0xFF]
            v >>= 8
            for _ in range(8):
                out.append((v & 0x7F) | 0x80)
                v >>= 7
            return bytes(reversed(out))
        out = [v & 0x7F]
        v >>= 7
        while v:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))

    values = [0, 1, 127, 128, 300, 1 << 21, (1 << 35) + 7, (1 << 56) - 1, 1 << 56, (1 << 63) + 5, 42]
    assert varints(b"".join(encoded(v) for v in values)) == values
