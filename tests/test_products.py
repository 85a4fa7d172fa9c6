"""The warm scan's integer products (memvault.index.products): exact for every int8 value, in one session or two
halves side by side, from many threads at once, and by numpy when ONNX Runtime cannot run the graph."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from memvault.index import KINDS, matrix, products, quantize
from memvault.index.products import Products, by_numpy


def exact(rows, q):
    return rows.astype(np.int64) @ np.asarray(q).astype(np.int64)


def test_every_int8_value_multiplies_exactly():
    """The extremes too: 127 x 127 summed over 384 components is where a kernel that adds pairs of products in 16
    bits (ONNX Runtime's u8 x s8 on AVX2) saturates."""
    rng = np.random.default_rng(1)
    rows = np.concatenate([np.full((2, 384), 127, np.int8), np.full((2, 384), -128, np.int8),
                           rng.integers(-128, 128, (300, 384)).astype(np.int8)])
    p = Products(rows)
    assert p.runtime == "onnxruntime"
    for q in (np.full(384, 127, np.int8), np.full(384, -128, np.int8), rng.integers(-128, 128, 384).astype(np.int8)):
        got = p(q)
        assert got.dtype == np.int32 and got.shape == (len(rows),)
        assert np.array_equal(got, exact(rows, q))
        assert np.array_equal(by_numpy(rows, q), exact(rows, q))


def test_a_single_row_and_odd_dimensions():
    rng = np.random.default_rng(2)
    for n, dims in ((1, 384), (3, 17), (5, 1024)):
        rows = rng.integers(-127, 128, (n, dims)).astype(np.int8)
        q = rng.integers(-127, 128, dims).astype(np.int8)
        assert np.array_equal(Products(rows)(q), exact(rows, q))


def test_a_large_matrix_runs_in_two_halves_side_by_side(monkeypatch):
    monkeypatch.setattr(products, "SPLIT_MIN", 1000)
    rng = np.random.default_rng(3)
    rows = rng.integers(-127, 128, (2501, 384)).astype(np.int8)
    halves = []
    real = products.beside

    def spy(other, mine):
        halves.append(threading.current_thread().name)
        return real(other, mine)

    monkeypatch.setattr(products, "beside", spy)
    p = Products(rows)
    q = rng.integers(-127, 128, 384).astype(np.int8)
    assert np.array_equal(p(q), exact(rows, q)) and len(halves) == 1
    small = Products(rows[:999])
    assert np.array_equal(small(q), exact(rows[:999], q)) and len(halves) == 1  # below SPLIT_MIN: no worker


def test_many_threads_at_once_all_finish_with_the_answers_of_one(monkeypatch):
    """Recalls from many threads (an MCP server's requests) each split their product: with the two workers busy, a
    half is taken back and run by its caller, so every one finishes, with the same integers as alone."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(products, "SPLIT_MIN", 1000)
    rng = np.random.default_rng(11)
    rows = rng.integers(-127, 128, (3000, 384)).astype(np.int8)
    p = Products(rows)
    queries = [rng.integers(-127, 128, 384).astype(np.int8) for _ in range(16)]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(p, queries, timeout=60))
    assert all(np.array_equal(got, exact(rows, q)) for got, q in zip(together, queries))


def test_when_onnx_runtime_cannot_run_the_graph_numpy_gives_the_same_integers(monkeypatch):
    def broken(rows):
        raise RuntimeError("no MatMulInteger here")

    monkeypatch.setattr(products, "_session", broken)
    rng = np.random.default_rng(4)
    rows = rng.integers(-127, 128, (100, 384)).astype(np.int8)
    p = Products(rows)
    q = rng.integers(-127, 128, 384).astype(np.int8)
    assert p.runtime == "numpy" and p.rows is not None and np.array_equal(p(q), exact(rows, q))


def test_the_graph_is_the_model_onnx_itself_reads():
    """The protobuf written by hand is the ModelProto the onnx package parses: one MatMulInteger of the query by the
    external rows, zero points 128."""
    onnx = pytest.importorskip("onnx")
    model = onnx.ModelProto.FromString(products._graph(384, 1000))
    assert model.ir_version == 8 and [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    (node,) = model.graph.node
    assert node.op_type == "MatMulInteger" and list(node.input) == ["query", "rows", "zero", "zero"]
    zero, rows = model.graph.initializer
    assert onnx.numpy_helper.to_array(zero).tolist() == 128 and zero.data_type == onnx.TensorProto.UINT8
    assert list(rows.dims) == [384, 1000] and rows.data_location == onnx.TensorProto.EXTERNAL
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [1, 384]
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.INT32


def test_a_loaded_matrix_scores_with_the_products(tmp_path):
    from memvault.index.db import sqlite_module

    conn = sqlite_module().connect(":memory:")
    conn.execute("CREATE TABLE chunks_vec(rowid INTEGER PRIMARY KEY, kind TEXT, embedding BLOB)")
    data = np.random.default_rng(1).normal(size=(50, 384)).astype(np.float32)
    ints = quantize.int8_matrix(data)
    conn.executemany("INSERT INTO chunks_vec VALUES (?, 'fact', ?)", [(i + 1, r.tobytes()) for i, r in enumerate(ints)])
    m = matrix.load(conn, "int8")
    assert m.products is not None and m.products.runtime == "onnxruntime"
    found = m.top_k(data[7], list(KINDS), 3)
    assert found[0][0] == 8 and found[0][1] == pytest.approx(1.0, abs=1e-6)


def test_a_matrix_larger_than_a_part_is_packed_a_part_at_a_time(monkeypatch):
    """Packing copies a session's rows twice for a moment: a large matrix is packed in parts of at most PART_ROWS
    rows, and answers in row order; the sessions hold the rows, so no copy is kept beside them."""
    monkeypatch.setattr(products, "PART_ROWS", 400)
    built = []
    real = products._session
    monkeypatch.setattr(products, "_session", lambda rows: (built.append(len(rows)), real(rows))[1])
    rng = np.random.default_rng(6)
    rows = rng.integers(-127, 128, (1501, 384)).astype(np.int8)
    p = Products(rows)
    assert built == [375, 375, 375, 376] and p.rows is None
    for _ in range(3):
        q = rng.integers(-127, 128, 384).astype(np.int8)
        assert np.array_equal(p(q), exact(rows, q))
