"""A deterministic, torch-free :class:`memvault.models.embeddings.Embedder` for logic tests.

Vectors come from hashing lower-cased words (and their 3-character prefixes) into signed buckets, so texts
that share words are similar and unrelated texts are not. It counts its calls, so a test can prove that
unchanged items were not embedded again (``calls`` = embed_documents calls, ``embedded`` = texts embedded).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from memvault.models.embeddings import DEFAULT_BATCH_SIZE, ModelIdentity, window_spans
from memvault.rules.errors import ModelUnavailable

# Tokens: runs of word characters, or single punctuation marks (like a BERT pre-tokenizer, without subwords).
_TOKEN = re.compile(r"\w+|[^\w\s]")


class FakeEmbedder:
    """Implements the Embedder protocol with hashed bag-of-words vectors."""

    def __init__(self, dims: int = 32, *, name: str = "fake-hash", revision: str = "1",
                 query_prefix: str = "", max_tokens: int = 64) -> None:
        self.identity = ModelIdentity(name=name, revision=revision, dims=dims, query_prefix=query_prefix,
                                      max_tokens=max_tokens)
        self.calls = 0          # embed_documents calls
        self.embedded = 0       # texts passed to embed_documents, summed
        self.query_calls = 0    # embed_query calls
        self.texts: list[str] = []  # every document text embedded, in order

    def reset_counts(self) -> None:
        self.calls = self.embedded = self.query_calls = 0
        self.texts.clear()

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.identity.dims, (1.0 if (value >> 63) & 1 else -1.0)

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.identity.dims, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            features = [f"w:{word}"] + ([f"p:{word[:3]}"] if len(word) > 3 else [])
            for feature in features:
                index, sign = self._bucket(feature)
                vec[index] += sign
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:  # no words: a fixed unit vector keeps the "normalised" contract
            vec[0] = 1.0
            return vec
        return (vec / norm).astype(np.float32)

    def embed_documents(self, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not one string")
        texts = list(texts)
        self.calls += 1
        self.embedded += len(texts)
        self.texts.extend(texts)
        if not texts:
            return np.zeros((0, self.identity.dims), dtype=np.float32)
        return np.stack([self._vector(t) for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.query_calls += 1
        return self._vector(self.identity.query_prefix + text)

    def query_job(self, text: str):
        return lambda: self.embed_query(text)

    def count_tokens(self, text: str) -> int:
        return len(_TOKEN.findall(text))

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        limit = max_tokens if max_tokens is not None else self.identity.max_tokens - 2
        offsets = [m.span() for m in _TOKEN.finditer(text)]
        return [text[s:e] for s, e in window_spans(text, offsets, limit, overlap)]


class Models:
    """Stands in for model loading: one FakeEmbedder per model name, counting loads."""

    def __init__(self):
        self.instances: dict[str, FakeEmbedder] = {}
        self.loads = 0
        self.unavailable: set[str] = set()
        self.dims = {"fake-hash": 32, "fake-other": 16}

    def __call__(self, config):
        self.loads += 1
        if config.model in self.unavailable:
            raise ModelUnavailable(config.model, "not installed (test)")
        if config.model not in self.instances:
            self.instances[config.model] = FakeEmbedder(dims=self.dims.get(config.model, 24), name=config.model)
        return self.instances[config.model]


def set_model(vault_root, name):
    path = vault_root / "memvault.toml"
    text = path.read_text()
    text = text.replace('model = "BAAI/bge-small-en-v1.5"', f'model = "{name}"')
    text = re.sub(r'model = "fake-[a-z]+"', f'model = "{name}"', text)
    path.write_text(text)



def fake_vault(vault, models, facts: dict[str, str]):
    """``vault`` reopened on the fake model ``fake-hash``, holding ``facts``, indexed."""
    from memvault import Vault

    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    for key, text in facts.items():
        v.facts.set(key, text)
    v.reindex()
    return v
