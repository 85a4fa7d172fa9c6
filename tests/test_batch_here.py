"""A large batch is embedded by the model loaded in the process that asks (``reindex``), not through the warm
process: through its socket a 10k-item rebuild ran at 80 % of the speed (docs/benchmarks.md, issue 24). Queries
and small batches still go to the warm process, and the model loaded for the batch is dropped after it."""
from __future__ import annotations

import time

import pytest

from memvault import Vault
from memvault.models import daemon, embeddings, engine
from conftest import git
from fake_embedder import FakeEmbedder, set_model


@pytest.fixture
def two_models(vault, monkeypatch):
    """The vault on the fake model; the warm process stood in for by ``remote``, a model loaded in this process by
    ``local`` (both the same model, counting what each embedded)."""
    set_model(vault.root, "fake-hash")
    git(vault.root, "commit", "-qm", "fake model", "--", "memvault.toml")
    remote, local = FakeEmbedder(name="fake-hash"), FakeEmbedder(name="fake-hash")
    loads = []
    starts = []

    def load(name, **_):
        loads.append(name)
        return local

    monkeypatch.delenv("MEMVAULT_NO_DAEMON", raising=False)
    monkeypatch.setattr(daemon, "connect", lambda *a, **k: remote)
    monkeypatch.setattr(daemon, "start", lambda idle: starts.append(idle))
    monkeypatch.setattr(embeddings, "load_embedder", load)
    for i in range(6):
        (vault.root / "facts" / f"f{i}.md").write_text(f"---\nkey: f{i}\n---\nthe fact number {i} about disks\n")
    git(vault.root, "add", "facts")
    git(vault.root, "commit", "-qm", "six facts")
    return Vault.open(vault.root), remote, local, loads, starts


def test_a_rebuild_of_a_large_vault_embeds_in_this_process(two_models, monkeypatch):
    v, remote, local, loads, starts = two_models
    monkeypatch.setattr(engine, "BATCH_HERE", 5)
    report = v.reindex(full=True)
    assert report.chunks_embedded >= 6
    assert local.embedded >= 6 and remote.embedded == 0
    assert loads == ["fake-hash"]
    deadline = time.monotonic() + 10
    while not starts and time.monotonic() < deadline:  # started in the background, for the queries that follow
        time.sleep(0.01)
    assert len(starts) == 1
    assert v.engine.loaded() is not local  # dropped after the reindex: queries go to the warm process
    v.recall("disks", k=3)
    assert remote.query_calls >= 1 and local.query_calls <= 1  # the relevance scale may be measured with it


def test_a_rebuild_of_a_small_vault_goes_to_the_warm_process(two_models, monkeypatch):
    v, remote, local, loads, starts = two_models
    monkeypatch.setattr(engine, "BATCH_HERE", 1000)
    v.reindex(full=True)
    assert remote.embedded >= 6 and local.embedded == 0 and loads == [] and starts == []


def test_much_pending_is_embedded_here_too(two_models, monkeypatch):
    v, remote, local, loads, starts = two_models
    monkeypatch.setattr(engine, "BATCH_HERE", 1000)
    v.reindex(full=True)
    for i in range(6, 14):
        (v.root / "facts" / f"f{i}.md").write_text(f"---\nkey: f{i}\n---\nanother fact {i}\n")
    v.index.sync()  # text only: eight chunks pending
    assert v.index.pending() == 8
    monkeypatch.setattr(engine, "BATCH_HERE", 8)
    before = remote.embedded
    v.reindex()
    assert local.embedded == 8 and remote.embedded == before and loads == ["fake-hash"]


def test_a_long_lived_process_keeps_to_the_warm_process(two_models, monkeypatch):
    """The watcher's and a write's catch-up never load a model of their own, however much is pending: a
    long-lived process would keep it."""
    v, remote, local, loads, starts = two_models
    monkeypatch.setattr(engine, "BATCH_HERE", 1)
    v.catch_up(load=True)
    assert loads == [] and remote.embedded >= 6
