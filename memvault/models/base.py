"""What every embedding backend shares: the identity of a model, the :class:`Embedder` protocol, how text is cut
into windows of tokens, and how a model is loaded without the libraries' own chatter.

Stdlib only (numpy in type hints); :mod:`memvault.models.embeddings` (torch) and :mod:`memvault.models.onnx`
(ONNX Runtime) both build on it.
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..rules.errors import InvalidValue

if TYPE_CHECKING:  # pragma: no cover - typing only; numpy is imported lazily at run time
    import numpy as np

#: Measured with MiniLM on a 2-core CPU, 2,000 texts of ~40 words: 16, 32 and 64 are within noise of each other
#: (~85-105 texts/s) while 128 is 10-20 % slower (more padding per batch, worse cache use). 32 was never worse.
DEFAULT_BATCH_SIZE = 32


@dataclass(frozen=True)
class ModelIdentity:
    """What made a vector: stored next to every vector so stale ones can be found and re-embedded.

    ``revision`` is the HF snapshot commit when the model came from the HF cache, otherwise a fingerprint of
    the weight files (see :func:`weights_fingerprint`).
    """

    name: str
    revision: str
    dims: int
    query_prefix: str
    max_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelIdentity:
        """Rebuild an identity written by :meth:`to_dict`; unknown keys are ignored (written by newer code)."""
        try:
            ident = cls(name=d["name"], revision=d["revision"], dims=d["dims"],
                        query_prefix=d.get("query_prefix", ""), max_tokens=d["max_tokens"])
        except (KeyError, TypeError) as e:
            raise InvalidValue("model identity", f"missing or bad field {e}") from None
        if not (isinstance(ident.name, str) and isinstance(ident.revision, str)
                and isinstance(ident.query_prefix, str) and isinstance(ident.dims, int)
                and isinstance(ident.max_tokens, int)):
            raise InvalidValue("model identity", f"a field has the wrong type: {d!r}")
        return ident

    def same_vectors(self, other: ModelIdentity) -> bool:
        """True when vectors made under ``other`` can be compared with ours without re-embedding."""
        return (self.name == other.name and self.revision == other.revision and self.dims == other.dims
                and self.query_prefix == other.query_prefix)


@runtime_checkable
class Embedder(Protocol):
    """What the index and recall need from a model. The real one and the tests' fake both implement it.

    Optional: ``query_job(text) -> Callable[[], vector]``, :meth:`embed_query` in two parts: what must run in the
    calling thread now (the ONNX embedder tokenizes there), and the returned callable, the rest, for another thread
    to run. An embedder without it (one a caller wrote to this protocol before it existed) is embedded whole in the
    other thread: :func:`query_job`."""

    identity: ModelIdentity

    def embed_documents(self, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        """(len(texts), dims) float32, each row L2-normalised. No prefix is added."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """(dims,) float32, L2-normalised, with ``identity.query_prefix`` prepended."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens of the model's tokenizer, without special tokens."""
        ...

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        """Cut ``text`` into exact substrings of at most ``max_tokens`` tokens each (see :func:`window_spans`)."""
        ...


def query_job(embedder: Embedder, text: str) -> Callable[[], Any]:
    """``embedder.query_job(text)`` (see :class:`Embedder`), or its whole :meth:`Embedder.embed_query` for later."""
    job = getattr(embedder, "query_job", None)
    return job(text) if job is not None else (lambda: embedder.embed_query(text))


# --------------------------------------------------------------------------------------------- splitting

_SENTENCE_END = frozenset(".!?;:。！？")


def window_spans(text: str, offsets: Sequence[tuple[int, int]], max_tokens: int,
                 overlap: int = 32) -> list[tuple[int, int]]:
    """Group tokens into overlapping windows and return each window's ``(start, end)`` character span.

    ``offsets`` are the tokens' character spans in ``text`` (a fast tokenizer's offset mapping, or words for
    a fake). Each window holds at most ``max_tokens`` tokens; the next one starts ``overlap`` tokens before
    the previous one ended. A window prefers to end at a paragraph break, then a line break, then a sentence
    end found in its last ~15 %; failing that it ends before a token that follows whitespace, so no word is cut.
    Shared by the real embedder and the tests' fake so both split with the same rules.
    """
    if max_tokens < 1:
        raise InvalidValue("max_tokens", f"must be at least 1, not {max_tokens}")
    if overlap < 0:
        raise InvalidValue("overlap", f"must be 0 or more, not {overlap}")
    offs = [(s, e) for s, e in offsets if e > s]  # special/empty tokens carry no text
    n = len(offs)
    if n <= max_tokens:
        return [(0, len(text))]
    overlap = min(overlap, max_tokens // 2)  # an overlap near the window size would crawl one token at a time

    def starts_word(k: int) -> bool:  # token k is separated from token k-1 by at least one character
        return k == 0 or offs[k][0] > offs[k - 1][1]

    def break_score(k: int) -> int:  # quality of cutting between token k-1 and token k
        gap = text[offs[k - 1][1]:offs[k][0]]
        if gap.count("\n") >= 2:
            return 3
        if "\n" in gap:
            return 2
        if gap and text[offs[k - 1][1] - 1] in _SENTENCE_END:
            return 1
        return 0

    spans: list[tuple[int, int]] = []
    i = 0
    look_back = max(1, (max_tokens * 15 + 99) // 100)
    while True:
        end = min(i + max_tokens, n)
        if end < n:
            best_k, best = end, 0
            for k in range(end, max(i + 1, end - look_back) - 1, -1):
                score = break_score(k)
                if score > best:
                    best_k, best = k, score
            if best == 0:
                # No natural break: at least avoid splitting a word into two chunks.
                for k in range(end, i + max(1, max_tokens // 2), -1):
                    if starts_word(k):
                        best_k = k
                        break
            end = best_k
        spans.append((offs[i][0], offs[end - 1][1]))
        if end >= n:
            break
        nxt = max(end - overlap, i + 1)
        # Start the next window on a word boundary too (moving back only adds overlap, never size).
        k = nxt
        while k > i + 1 and not starts_word(k):
            k -= 1
        i = k if starts_word(k) else nxt
    return spans


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence the warnings, log lines and progress bars transformers and sentence-transformers print on load."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    progress_was_enabled: bool | None = None
    try:  # imported first: transformers resets its logger's level when it is first imported
        from transformers.utils import logging as tf_logging

        progress_was_enabled = tf_logging.is_progress_bar_enabled()
        tf_logging.disable_progress_bar()
    except Exception:  # pragma: no cover - transformers internals moved; the bars are cosmetic
        tf_logging = None  # type: ignore[assignment]
    names = ("transformers", "sentence_transformers", "huggingface_hub", "torch")
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)
        if tf_logging is not None and progress_was_enabled:
            tf_logging.enable_progress_bar()


def cores_for(setting: int) -> int:
    """Threads for a batch: ``setting`` when positive, else every core this process may run on."""
    if setting > 0:
        return setting
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
