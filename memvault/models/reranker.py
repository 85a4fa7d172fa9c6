"""An optional cross-encoder that re-reads the best candidates of a recall with the query (``[recall] reranker``).

A cross-encoder scores a (query, memory) pair together, attending across both, which a bi-encoder's two separate
vectors cannot; it costs one forward pass per candidate, so only the first ``[recall] rerank_candidates`` are
re-read. Off by default: nothing here is imported, and no model is loaded, unless a reranker is named. The model
is loaded once per process (sentence-transformers' ``CrossEncoder``, offline-first like the embedder: a local
directory or a model in the Hugging Face cache).
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..rules.errors import ModelUnavailable

_cache: dict[str, Reranker] = {}
_lock = threading.Lock()


class Reranker:
    """A sentence-transformers ``CrossEncoder``: :meth:`score` gives each (query, text) pair a relevance in 0..1."""

    def __init__(self, name: str) -> None:
        from .embeddings import _quiet_loading, resolve_model_path

        local = resolve_model_path(name)
        if local is None:
            raise ModelUnavailable(name, "the reranker is not a local directory nor in the Hugging Face cache; "
                                         "download it on a machine with network access or set [recall] reranker = \"\"")
        try:
            with _quiet_loading():
                from sentence_transformers import CrossEncoder

                self._model = CrossEncoder(local, device="cpu", local_files_only=True)
        except Exception as exc:  # corrupt files, an architecture without a classification head, ...
            raise ModelUnavailable(name, f"cannot load it as a cross-encoder ({type(exc).__name__}: {exc})") from None
        self.name = name

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Relevance of each text to ``query`` in 0..1 (the model's own activation, a sigmoid for one label)."""
        if not texts:
            return []
        import numpy as np

        scores = self._model.predict([(query, t) for t in texts], show_progress_bar=False)
        scores = np.asarray(scores, dtype=np.float64).reshape(len(texts), -1)[:, 0]
        if scores.min() < 0 or scores.max() > 1:  # a model that returns logits
            scores = 1 / (1 + np.exp(-scores))
        return [float(s) for s in scores]


def load_reranker(name: str) -> Reranker:
    """The cross-encoder ``name``, loaded once per process. Raises :class:`ModelUnavailable` with the reason."""
    with _lock:
        found = _cache.get(name)
        if found is None:
            found = _cache[name] = Reranker(name)
        return found


def loaded() -> dict[str, Any]:
    """The rerankers this process has loaded (for tests and stats)."""
    return dict(_cache)
