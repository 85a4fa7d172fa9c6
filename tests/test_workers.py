"""The process's worker threads (memvault.rules.workers): a task split in two runs its halves side by side, and
never waits in a queue behind busy workers."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from memvault.index import KINDS, matrix, quantize
from memvault.rules import workers


def test_the_other_half_runs_in_a_worker_while_this_thread_runs_its_own():
    started, seen = threading.Event(), {}

    def other():
        seen["other"] = threading.current_thread().name
        started.set()
        return 1

    def mine():
        seen["mine"] = threading.current_thread().name
        return started.wait(5)  # the worker picks it up meanwhile

    assert workers.beside(other, mine) == (1, True)
    assert seen["mine"] == threading.current_thread().name
    assert seen["other"].startswith("memvault-query-")


def test_with_every_worker_busy_the_other_half_is_taken_back_not_waited_for():
    release = threading.Event()
    started = [threading.Event() for _ in range(2)]
    blockers = [workers.pool().submit(lambda e=e: (e.set(), release.wait(10))) for e in started]
    try:
        assert all(e.wait(5) for e in started)
        ran_in = []
        other, _ = workers.beside(lambda: ran_in.append(threading.current_thread().name) or "done", lambda: None)
        assert other == "done" and ran_in == [threading.current_thread().name]
    finally:
        release.set()
    assert all(b.result(5) for b in blockers)


def test_an_error_in_either_half_reaches_the_caller():
    with pytest.raises(ZeroDivisionError):
        workers.beside(lambda: 1 / 0, lambda: None)
    with pytest.raises(KeyError):
        workers.beside(lambda: None, lambda: {}["x"])


def test_the_two_halves_keep_the_rows_a_single_pass_keeps():
    """Each half keeps its ``keep`` nearest rows by sign; the best ``keep`` of those are the best of the whole (the
    same distances: which of several rows at the cut's distance is kept is the partition's choice, as before)."""
    rng = np.random.default_rng(7)
    data = rng.normal(size=(5001, 384)).astype(np.float32)
    ints = quantize.int8_matrix(data / np.linalg.norm(data, axis=1, keepdims=True))
    kinds = np.array(["fact" if i % 4 else "episode" for i in range(len(data))])
    m = matrix.VectorMatrix(np.arange(len(data), dtype=np.int64) + 1, kinds, ints,
                            np.linalg.norm(ints.astype(np.float32), axis=1), matrix.sign_words(ints))
    keep = 600
    for i in range(5):
        bits = matrix.sign_words(ints[i * 11][None, :])[:, 0]
        for wanted in (None, np.isin(kinds, ["fact"])):
            whole = m.hamming(bits, 0, len(m))
            if wanted is not None:
                whole = np.where(wanted, whole, np.iinfo(whole.dtype).max)
            rows_a, far_a = m._closest(bits, wanted, 0, 2500, keep)
            rows_b, far_b = m._closest(bits, wanted, 2500, len(m), keep)
            far = np.concatenate([far_a, far_b])
            assert (far == whole[np.concatenate([rows_a, rows_b])]).all()
            assert np.array_equal(np.sort(far)[:keep], np.sort(whole)[:keep])


def test_a_staged_scan_ranks_as_before_the_split(monkeypatch):
    """The scan in two halves side by side returns what one thread returns (both halves here, one after the other),
    for every kind filter; below SPLIT_MIN rows it never wakes a worker."""
    rng = np.random.default_rng(3)
    data = rng.normal(size=(3000, 384)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    ints = quantize.int8_matrix(data)
    kinds = np.array(["fact" if i % 3 else "episode" for i in range(len(data))])
    m = matrix.VectorMatrix(np.arange(len(data), dtype=np.int64) + 1, kinds, ints,
                            np.linalg.norm(ints.astype(np.float32), axis=1), matrix.sign_words(ints))
    monkeypatch.setattr(matrix, "RESCORE_MIN", 300)
    monkeypatch.setattr(matrix, "SPLIT_MIN", 1000)
    for i in range(10):
        q = data[i * 13] + rng.normal(0, 0.1, 384).astype(np.float32)
        for wanted in (list(KINDS), ["episode"]):
            split = m.top_k(q, wanted, 10)
            monkeypatch.setattr(matrix, "beside", lambda other, mine: (other(), mine()))
            alone = m.top_k(q, wanted, 10)
            monkeypatch.undo()
            monkeypatch.setattr(matrix, "RESCORE_MIN", 300)
            monkeypatch.setattr(matrix, "SPLIT_MIN", 1000)
            assert [r for r, _ in split] == [r for r, _ in alone]
            assert [s for _, s in split] == pytest.approx([s for _, s in alone], abs=1e-6)


def test_a_small_matrix_is_scanned_in_this_thread(monkeypatch):
    rng = np.random.default_rng(4)
    ints = quantize.int8_matrix(rng.normal(size=(1000, 384)).astype(np.float32))
    m = matrix.VectorMatrix(np.arange(1000, dtype=np.int64) + 1, np.array(["fact"] * 1000), ints,
                            np.linalg.norm(ints.astype(np.float32), axis=1), matrix.sign_words(ints))
    monkeypatch.setattr(matrix, "RESCORE_MIN", 100)
    monkeypatch.setattr(matrix, "beside", lambda *a: pytest.fail("a worker woken for a small matrix"))
    assert len(m.top_k(rng.normal(size=384).astype(np.float32), list(KINDS), 10)) == 10


def test_a_small_int8_matrix_is_held_as_floats_and_scored_whole(monkeypatch):
    """Up to FLOATS_MAX rows the integers are kept as float32 too: every row is scored (no first stage, so no row is
    missed by one), with the int8 cosines the two stages give to the rows they keep."""
    rng = np.random.default_rng(9)
    data = rng.normal(size=(3000, 384)).astype(np.float32)
    ints = quantize.int8_matrix(data / np.linalg.norm(data, axis=1, keepdims=True))
    kinds = np.array(["fact" if i % 3 else "episode" for i in range(len(data))])
    norms = np.linalg.norm(ints.astype(np.float32), axis=1)
    held = matrix.VectorMatrix(np.arange(3000, dtype=np.int64) + 1, kinds, ints, norms, matrix.sign_words(ints),
                               ints.astype(np.float32))
    staged = matrix.VectorMatrix(held.rowids, kinds, ints, norms, held.signs)
    monkeypatch.setattr(matrix, "RESCORE_MIN", 300)
    exact = (ints.astype(np.float64) @ ints[0].astype(np.float64)) / (norms * np.linalg.norm(ints[0]))
    for wanted in (list(KINDS), ["episode"]):
        scan = held.top_k(data[0], wanted, 20)
        rows = [r for r in np.argsort(-exact, kind="stable") if kinds[r] in wanted][:20]
        assert [r for r, _ in scan] == [int(r) + 1 for r in rows]
        assert [s for _, s in scan] == pytest.approx(exact[rows].tolist(), abs=1e-6)
        both = dict(staged.top_k(data[0], wanted, 20))
        assert all(s == pytest.approx(both[r], abs=1e-6) for r, s in scan if r in both)
    monkeypatch.setattr(matrix.VectorMatrix, "hamming", lambda *a: pytest.fail("a first stage for a held matrix"))
    held.top_k(data[1], list(KINDS), 20)


def test_loading_holds_floats_only_for_a_small_matrix(monkeypatch, tmp_path):
    from memvault.index.db import sqlite_module

    conn = sqlite_module().connect(":memory:")
    conn.execute("CREATE TABLE chunks_vec(rowid INTEGER PRIMARY KEY, kind TEXT, embedding BLOB)")
    ints = quantize.int8_matrix(np.random.default_rng(1).normal(size=(50, 384)).astype(np.float32))
    conn.executemany("INSERT INTO chunks_vec VALUES (?, 'fact', ?)", [(i + 1, r.tobytes()) for i, r in enumerate(ints)])
    assert matrix.load(conn, "int8").float_rows is not None
    monkeypatch.setattr(matrix, "FLOATS_MAX", 49)
    assert matrix.load(conn, "int8").float_rows is None


def test_many_threads_scanning_at_once_all_finish_with_the_answers_of_one(monkeypatch):
    """Recalls from many threads (an MCP server's requests) each split their scan: with the two workers busy, a half
    is taken back and run by its caller, so every scan finishes, with the same rows as alone."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(11)
    data = rng.normal(size=(3000, 384)).astype(np.float32)
    ints = quantize.int8_matrix(data / np.linalg.norm(data, axis=1, keepdims=True))
    m = matrix.VectorMatrix(np.arange(3000, dtype=np.int64) + 1, np.array(["fact"] * 3000), ints,
                            np.linalg.norm(ints.astype(np.float32), axis=1), matrix.sign_words(ints))
    monkeypatch.setattr(matrix, "RESCORE_MIN", 300)
    monkeypatch.setattr(matrix, "SPLIT_MIN", 1000)
    queries = [data[i] for i in range(0, 48, 3)]
    alone = [m.top_k(q, list(KINDS), 10) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda q: m.top_k(q, list(KINDS), 10), queries, timeout=60))
    assert [[r for r, _ in x] for x in together] == [[r for r, _ in x] for x in alone]
