"""The index against hostile or damaged state: rows and stamps a corrupt disk or a hostile hand left in it, a model
that gives vectors no cosine can be taken of, and what a purge must take out of it. Each test failed before its fix."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from fake_embedder import fake_vault
from memvault import Vault
from memvault.index import matrix, search
from memvault.index.db import connect

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
