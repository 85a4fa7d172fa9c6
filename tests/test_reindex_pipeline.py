"""A reindex as a pipeline (text written a batch of files at a time while the model encodes what was written, vectors
committed by a writer of their own): the same index as the two phases one after the other, no lock held while the
model works, pending work that only shrinks, and nothing lost when the model fails half way."""
from __future__ import annotations

import threading

import pytest

from memvault import Vault
from memvault.index import vectors
from fake_embedder import set_model

RUNBOOK = "#!/bin/sh\n# description: Rotate the TLS certificates\n" + "".join(
    f"echo step {i}: renew certificate {i} on edge{i % 4} and reload haproxy\n" for i in range(40))


@pytest.fixture
def pv(vault, models, tmp_path):
    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    for i in range(12):
        v.facts.set(f"hosts/web{i:02d}", f"web{i:02d} serves the shop on port {8000 + i}.", category="web")
    script = tmp_path / "rotate.sh"
    script.write_text(RUNBOOK)
    script.chmod(0o755)
    v.procedures.add("edge/rotate-certs", script)
    for i, text in enumerate(["Is the backup done?", "Yes, it finished at 03:15.", "Then rotate the replicas."]):
        v.episodes.append(text, source="user:ops", at=f"2026-11-20T10:0{i}:00Z")
    return v


def snapshot(v: Vault) -> dict[str, tuple[str | None, bytes]]:
    conn = v.index.connection()
    return {text: (model, vec) for text, model, vec in conn.execute(
        "SELECT t.text, t.model, v.embedding FROM chunk_texts t JOIN chunks_vec v ON v.rowid = t.rowid")}


def test_a_rebuild_makes_the_index_the_two_phases_make_one_after_the_other(pv, models, monkeypatch):
    pv.index.sync()  # phase 1 whole, then phase 2: the long runbook is cut by the model's tokenizer at once
    pv.index.embed(models(pv.config), wait=True)
    before = snapshot(pv)
    assert len(before) > 16 and pv.index.pending() == 0
    monkeypatch.setattr("memvault.index.TEXT_BATCH", 3)
    monkeypatch.setattr("memvault.index.vectors.EMBED_GROUP", 4)
    report = pv.reindex(full=True)
    assert snapshot(pv) == before and pv.index.pending() == 0
    # and each of the three turns embedded after its context too (its day, and the turns before it)
    assert report.chunks_embedded == len(before) + 3
    assert {"read", "write text", "encode", "write vectors"} <= set(report.timings)


def test_the_model_encodes_a_batch_of_text_while_the_next_is_read(pv, models, monkeypatch):
    from memvault.index import update

    fake = models(pv.config)
    read, reads = update.read_docs, []
    encoding = threading.Event()

    def slow_read(*args, **kwargs):
        if len(reads) >= 4:  # a pipeline encodes meanwhile, however slow its thread is to start; one in series
            encoding.wait(10)  # cannot, and then reads on after the timeout, and the check below fails
        reads.append(args[1])
        return read(*args, **kwargs)

    monkeypatch.setattr(update, "read_docs", slow_read)
    monkeypatch.setattr("memvault.index.TEXT_BATCH", 2)
    monkeypatch.setattr("memvault.index.vectors.EMBED_GROUP", 2)
    read_at_encode, embed = [], fake.embed_documents

    def watching(texts, *args, **kwargs):
        read_at_encode.append(len(reads))
        encoding.set()
        return embed(texts, *args, **kwargs)

    monkeypatch.setattr(fake, "embed_documents", watching)
    report = pv.reindex(full=True)
    files = len(pv.index.scan())
    assert len(reads) == files and pv.index.pending() == 0 and report.chunks_embedded > files
    assert read_at_encode[0] < files / 2  # the first texts were encoded long before the last file was read
    assert {"read", "write text", "encode", "write vectors"} <= set(report.timings)


def test_a_model_that_fails_during_a_rebuild_leaves_the_old_index_serving(pv, models):
    pv.reindex()
    target = pv.index.current_target()
    fake = models(pv.config)

    def broken(texts, *args, **kwargs):
        raise RuntimeError("the model broke")

    fake.embed_documents = broken
    with pytest.raises(RuntimeError, match="the model broke"):
        pv.reindex(full=True)
    assert pv.index.current_target() == target and target.exists()
    assert len(list(pv.state_dir.glob("index-*.db"))) == 1  # the half-built generation is removed
    assert Vault.open(pv.root, embedder_factory=models).recall("web03 port", mode="keyword", k=1)[0].id == "hosts/web03"


def test_vectors_written_before_the_model_failed_are_kept_and_never_computed_again(pv, models, monkeypatch):
    pv.index.sync()
    fake = models(pv.config)
    monkeypatch.setattr(vectors, "EMBED_GROUP", 4)
    embed, calls = fake.embed_documents, []

    def failing_third(texts, *args, **kwargs):
        calls.append(list(texts))
        if len(calls) == 3:
            raise RuntimeError("out of memory")
        return embed(texts, *args, **kwargs)

    fake.embed_documents = failing_third
    with pytest.raises(RuntimeError):
        pv.index.embed(fake, wait=True)
    conn = pv.index.connection()
    assert conn.execute("SELECT COUNT(*) FROM chunks WHERE model IS NOT NULL").fetchone()[0] == 8  # two groups
    fake.embed_documents = embed
    fake.reset_counts()
    pv.index.embed(fake, wait=True)
    assert pv.index.pending() == 0
    done = {t for group in calls[:2] for t in group}
    assert done and not done & set(fake.texts)  # what was written is never computed again


def test_a_limited_embed_takes_the_oldest_pending_chunks_only(pv, models):
    pv.index.sync()
    fake = models(pv.config)
    pending = pv.index.pending()
    report = pv.index.embed(fake, limit=5, wait=True)
    assert pv.index.pending() == pending - 5 and report.chunks_pending == pending - 5


def test_a_new_vaults_facts_get_their_vectors_before_its_episode_lines(vault, models):
    """Recall embeds a share of the pending vectors (oldest first, ``embed_at_recall``): the first sync writes
    facts before runbooks and episodes, so a vault with more episode lines than that share has its facts' vectors
    after its first recall instead of ranking them by keywords alone behind episodes."""
    from fake_embedder import set_model

    from memvault import Vault

    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    for i in range(3):
        (v.root / "facts" / f"db{i}.md").write_text(f"Database db{i} listens on port 54{i}2.\n")
    lines = [f'{{"id": "01J{i:023d}", "created_at": "2026-11-01T00:00:00Z", "source": "user:ops", '
             f'"kind": "raw", "text": "line {i} of a long log"}}' for i in range(200)]
    (v.root / "episodes" / "2026-11.jsonl").write_text("\n".join(lines) + "\n")
    v.recall("which port does db1 listen on", k=3)
    conn = v.index.connection()
    pending_facts = conn.execute("SELECT COUNT(*) FROM chunks c JOIN docs d ON d.doc = c.doc "
                                 "WHERE d.kind = 'fact' AND c.model IS NULL").fetchone()[0]
    assert pending_facts == 0 and v.index.pending() > 0


def test_a_recall_with_nothing_to_embed_starts_no_writer_and_takes_no_lock(pv, models, monkeypatch):
    """Every warm recall asks the index to embed a share of what is pending: with nothing pending that costs no
    thread, no second SQLite connection and no lock file (5 of a warm recall's 24 ms at 10k facts went there)."""
    from memvault.index import Index

    pv.index.sync()
    fake = models(pv.config)
    pv.index.embed(fake, wait=True)
    assert pv.index.pending() == 0

    def forbidden(*args, **kwargs):
        raise AssertionError("started for nothing")

    monkeypatch.setattr(vectors, "VectorWriter", forbidden)
    monkeypatch.setattr(Index, "_embed_lock", forbidden)
    report = pv.index.embed(fake, limit=8)
    assert report.chunks_pending == 0 and not report.warnings
    pv.recall("which port does web03 serve the shop on", k=3)
    # ...and a pending chunk is still embedded by the next call
    monkeypatch.undo()
    (pv.root / "facts" / "hosts" / "web99.md").write_text("web99 serves the archive on port 8099.\n")
    pv.index.sync()
    assert pv.index.pending() > 0
    pv.index.embed(fake, limit=8)
    assert pv.index.pending() == 0


def test_each_pending_chunk_is_read_about_once_however_many_are_encoded(pv, models, monkeypatch):
    """The encoder set aside every chunk it had encoded (their vectors might not be committed yet) and asked for
    that many pending rows more at each look: every group read again, context resolved, all the chunks encoded
    before it. A reindex of six months (500k episodes) spent its time there, not in the model: quadratic. Now it sets
    aside only what the writer has not committed, so the rows read stay a small multiple of the chunks."""
    lines = [f'{{"id": "01J{i:023d}", "created_at": "2026-11-01T{i // 60:02d}:{i % 60:02d}:00Z", "source": "user:ops", '
             f'"kind": "raw", "text": "line {i} of a long log"}}' for i in range(400)]
    (pv.root / "episodes" / "2026-11.jsonl").write_text("\n".join(lines) + "\n")
    pv.index.sync()
    chunks = pv.index.pending()
    assert chunks > 400
    monkeypatch.setattr(vectors, "EMBED_GROUP", 8)
    read, fetched = vectors.pending_rows, []

    def counted(conn, limit):
        rows = read(conn, limit)
        fetched.append(len(rows))
        return rows

    monkeypatch.setattr(vectors, "pending_rows", counted)
    pv.index.embed(models(pv.config), wait=True)
    assert pv.index.pending() == 0
    assert sum(fetched) <= 5 * chunks, (sum(fetched), chunks, len(fetched))
