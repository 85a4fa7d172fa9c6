"""A large batch (a rebuild) runs on every core, capped by ``[embedding] threads``; a query stays on one thread
(issue 24). The speed-up itself is measured in bench/bench_cores.py, not here: these check the layout."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from memvault.models.base import cores_for
from memvault.models.daemon import _answer


def test_zero_threads_means_every_core_this_process_may_use():
    import os

    assert cores_for(0) == len(os.sched_getaffinity(0))
    assert cores_for(3) == 3


def test_the_setting_is_read_from_memvault_toml(vault):
    from memvault import Vault

    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace("[embedding]", "[embedding]\nthreads = 3", 1))
    assert Vault.open(vault.root).engine.threads == 3


def test_the_warm_process_takes_the_callers_cap_with_each_batch():
    class Stub:
        threads = 0

        def embed_documents(self, texts, batch_size=32):
            self.seen = self.threads
            return np.zeros((len(texts), 4), dtype=np.float32)

    stub = Stub()
    header, _ = _answer(stub, {"op": "embed_documents", "texts": ["a", "b"], "threads": 2})
    assert header["ok"] and stub.seen == 2


@pytest.mark.model
def test_onnx_batches_run_on_several_workers_with_the_same_vectors(monkeypatch):
    from memvault.models import onnx
    from memvault.models.embeddings import load_embedder

    embedder = load_embedder("all-MiniLM-L6-v2", backend="onnx")
    texts = [f"host web{i} serves the shop on port {8000 + i}; " * (1 + i % 7) for i in range(150)]
    embedder.threads = 1
    one = embedder.embed_documents(texts)
    seen: set[int] = set()
    running = {"now": 0, "most": 0}
    lock = threading.Lock()
    infer = onnx.OnnxEmbedder._infer

    both = threading.Event()

    def spy(self, feed):
        with lock:
            seen.add(threading.get_ident())
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
            if len(seen) >= 2:
                both.set()
        both.wait(5)  # the first run holds its worker until a second worker runs, however slow the caller is
        try:
            return infer(self, feed)
        finally:
            with lock:
                running["now"] -= 1

    monkeypatch.setattr(onnx.OnnxEmbedder, "_infer", spy)
    embedder.threads = 2
    two = embedder.embed_documents(texts)
    assert np.array_equal(one, two)  # the same runs, in another order: identical vectors
    assert len(seen) == 2 and threading.get_ident() not in seen
    # a query stays on the caller's thread, one run
    seen.clear()
    embedder.embed_query("where does the shop run")
    assert seen == {threading.get_ident()}


@pytest.mark.model
def test_runs_are_cut_by_tokens_so_long_texts_go_few_to_a_run():
    from memvault.models.embeddings import load_embedder
    from memvault.models.onnx import TOKENS_PER_RUN

    embedder = load_embedder("all-MiniLM-L6-v2", backend="onnx")
    texts = ["short text"] * 100 + ["a long runbook step " * 80] * 40
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    parts = embedder._parts(texts, order, 64)
    assert sorted(i for p in parts for i in p) == list(range(len(texts)))
    long_parts = [p for p in parts if len(texts[p[0]]) > 100]
    assert all(len(p) * embedder.identity.max_tokens <= TOKENS_PER_RUN for p in long_parts)
    assert max(len(p) for p in long_parts) == 2  # two texts of 256 tokens a run: a run's memory is bounded
    assert max(len(p) for p in parts) == 64  # short texts: many to a run


@pytest.mark.model
def test_torch_runs_a_large_batch_on_the_cap_and_a_query_on_one_thread(monkeypatch):
    import torch

    from memvault.models.embeddings import SentenceTransformerEmbedder, load_embedder

    embedder = load_embedder("all-MiniLM-L6-v2", backend="torch")
    threads = []
    encode = SentenceTransformerEmbedder._encode
    monkeypatch.setattr(SentenceTransformerEmbedder, "_encode",
                        lambda self, texts, batch_size: (threads.append(torch.get_num_threads()),
                                                         encode(self, texts, batch_size))[1])
    embedder.threads = 3
    embedder.embed_documents([f"text {i}" for i in range(40)])
    embedder.embed_query("one question")
    assert threads == [3, 1]
