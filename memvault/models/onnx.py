"""The light backend: a sentence-transformers model run by ONNX Runtime and the Rust tokenizer, without torch.

Importing torch and sentence-transformers costs 400+ MB of resident memory and seconds before a model is even
read; ONNX Runtime with ``tokenizers`` and numpy costs about 50 MB and a third of a second. So the warm process
(and a process that loads a model itself) runs the model here when it can (``[embedding] backend = "auto"``).

The ONNX graph is exported once per model revision from the model's own weights, in a separate process (it needs
torch, which then leaves with that process), into ``$XDG_CACHE_HOME/memvault/onnx/`` (else ``~/.cache``). The
export is checked before it is used: the same probe texts through sentence-transformers (torch) and through the
exported graph must give the same vectors (every component within 1e-5, as float32 sums in another order do).
A graph that passes makes the same vectors as the torch path, so it keeps the model's identity and the two never
need telling apart in an index; one that fails is recorded as such and the torch backend is used. Pipelines other
than a transformer, mean or CLS pooling and an optional normalisation (for example a Dense layer) stay on torch.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import InvalidValue, ModelUnavailable
from ..rules.fsutil import atomic_write, locked, remove, replace
from .base import ModelIdentity, cores_for, quiet_loading, window_spans

if TYPE_CHECKING:
    import numpy as np

#: Bump when the export or its check changes: older exports are then made again.
EXPORT_VERSION = "2"
#: Seconds before an export that failed is tried again.
RETRY_FAILED = 86400.0
#: The largest difference allowed between a component of the torch vector and the ONNX one.
TOLERANCE = 1e-5
PROBES = [
    "The primary database listens on 10.8.0.4 port 5432.",
    "how do I drain a web host before maintenance",
    "Runbook: rotate the TLS certificate on the load balancer; reload nginx afterwards and check expiry dates.",
    "x",
    "Ünïcödé, emoji 🚀 and tabs\tand\nnew lines",
    " ".join(["a long text that the model truncates"] * 60),
]
#: The sentence-transformers modules this backend reproduces, by class name: their module path differs by version
#: (``sentence_transformers.models.Pooling``; 6.x ``sentence_transformers.sentence_transformer.modules.pooling.Pooling``).
_SUPPORTED = {"Transformer", "Pooling", "Normalize"}
_export_lock = threading.Lock()
#: Intra-op threads of one run. One: a query is too small to split (on a busy 2-core machine a second intra-op
#: thread made a query slower: p50 29 against 34 ms). A batch uses the other cores by running several runs at once
#: (one per worker, see :meth:`OnnxEmbedder.embed_documents`): whole batches in parallel scale better than one batch
#: split across threads, and a query never pays for thread hand-offs.
THREADS = 1
#: Texts per run at most, and padded tokens per run at most: a run's working memory grows with batch x longest
#: text, and resident memory with it (MiniLM: peak 310 MB at 32 long texts, 275 MB at 16). Short texts go many to
#: a run (less per-run overhead), long ones few (bounded memory per worker).
MAX_BATCH = 64
#: Measured with two workers and a fixed mmap threshold: 1,024 tokens a run peaked at 319 MB over 270 short runbook
#: windows, 512 at 236-241 MB (the model alone: 168 MB), and 512 was no slower (3,000 facts: 97-107 texts/s against
#: 90-95). Texts of 256 tokens go two to a run.
TOKENS_PER_RUN = 512
#: Runs of texts up to this many tokens go in parallel; longer ones one at a time. A run's working memory grows
#: with the square of its texts' length (attention): two parallel runs of 300-token texts took the peak from 280
#: to 498 MB (1.2 KB texts, 1,024 tokens a run), while short texts (facts) cost little either way.
PARALLEL_TOKENS = 128


def available() -> bool:
    """Whether ONNX Runtime and tokenizers can be imported here (without importing them)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).resolve() / "memvault" / "onnx"  # the user's own links (a cache moved to another disk) once


def pipeline(model_dir: Path) -> dict[str, Any] | None:
    """The model's sentence-transformers pipeline when this backend can run it: transformer subfolder, pooling
    mode, whether it normalises, max_seq_length, its own query prompt. None for anything else."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        return None
    names = [_module(m.get("type")) for m in modules]
    if not set(names) <= _SUPPORTED:
        return None
    transformer = [m for m, name in zip(modules, names) if name == "Transformer"]
    pooling = [m for m, name in zip(modules, names) if name == "Pooling"]
    if len(transformer) != 1 or len(pooling) != 1:
        return None
    try:
        pool = json.loads((model_dir / pooling[0]["path"] / "config.json").read_text())
        bert = json.loads((model_dir / transformer[0]["path"] / "sentence_bert_config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    modes = ([k for k, v in pool.items() if k.startswith("pooling_mode_") and v]  # 5.x and before: flags
             or [f"pooling_mode_{pool.get('pooling_mode')}"])                     # 6.x: one name
    if modes not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"], ["pooling_mode_mean"],
                     ["pooling_mode_cls"]):
        return None
    prompts: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError, AttributeError):
        prompts = json.loads((model_dir / "config_sentence_transformers.json").read_text()).get("prompts") or {}
    return {"transformer": transformer[0]["path"], "pooling": "mean" if "mean" in modes[0] else "cls",
            "max_seq_length": _max_seq_length(bert, model_dir / transformer[0]["path"]),
            "query": prompts.get("query") or None}


def _module(kind: object) -> str | None:
    """The class name of a sentence-transformers module type (None for anything not sentence-transformers')."""
    if not isinstance(kind, str) or not kind.startswith("sentence_transformers."):
        return None
    return kind.rsplit(".", 1)[-1]


def _max_seq_length(bert: dict[str, Any], transformer_dir: Path) -> int:
    """The transformer's max_seq_length: its sentence_bert_config.json (5.x and before) or, where 6.x keeps it, the
    tokenizer's model_max_length; 512 when neither says. A wrong value fails the export's check (a long probe
    text), so the model then runs on torch rather than giving other vectors."""
    if bert.get("max_seq_length"):
        return int(bert["max_seq_length"])
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        limit = json.loads((transformer_dir / "tokenizer_config.json").read_text()).get("model_max_length")
        if isinstance(limit, int) and 0 < limit <= 100_000:
            return limit
    return 512


def exported(model_dir: Path, revision: str) -> Path | None:
    """The checked ONNX graph of this model revision, exported now (in a child process) if need be; None when this
    backend cannot run the model or the export did not pass its check (recorded: not tried again)."""
    target = cache_dir() / f"{hashlib.sha256(f'{model_dir}|{revision}|{EXPORT_VERSION}'.encode()).hexdigest()[:24]}"
    meta = target / "meta.json"
    with _export_lock, locked(target / ".lock"):  # two processes starting at once export once
        if meta.exists() and _failed_long_ago(meta):
            remove(meta)  # a failure is retried a day later (onnx installed since, say)
        if not meta.exists():
            proc = subprocess.run([sys.executable, "-P", "-m", "memvault.models.onnx", "export", str(model_dir),
                                   str(target)], capture_output=True, text=True, check=False)
            if not meta.exists():
                detail = (proc.stderr or proc.stdout).strip().splitlines()
                _write_meta(target, {"ok": False, "reason": detail[-1] if detail else f"exit {proc.returncode}",
                                     "at": time.time()})
    try:
        record = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    return target / "model.onnx" if record.get("ok") and (target / "model.onnx").is_file() else None


def _failed_long_ago(meta: Path) -> bool:
    try:
        record = json.loads(meta.read_text())
    except (OSError, ValueError):
        return True
    return not record.get("ok") and time.time() - float(record.get("at", 0)) > RETRY_FAILED


def _write_meta(target: Path, record: dict[str, Any]) -> None:
    atomic_write(target / "meta.json", json.dumps(record).encode())


def export(model_dir: Path, target: Path) -> dict[str, Any]:
    """Export the transformer of ``model_dir`` to ``target/model.onnx`` and check it against sentence-transformers
    (see the module doc). Runs in its own process: it imports torch."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    spec = pipeline(model_dir)
    if spec is None:
        return {"ok": False, "reason": "a pipeline this backend does not run", "at": time.time()}
    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    transformer = model[0].auto_model.eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = model.tokenizer(["a probe", "another probe text"], padding=True, return_tensors="pt")
    names = [n for n in names if n in sample]

    class Graph(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs))).last_hidden_state

    tmp = target / f".model.{os.getpid()}.onnx"
    axes = {n: {0: "batch", 1: "tokens"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "tokens"}
    with torch.no_grad():
        torch.onnx.export(Graph(transformer), tuple(sample[n] for n in names), str(tmp), input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
    expected = model.encode(PROBES, normalize_embeddings=True, convert_to_numpy=True)
    got = OnnxEmbedder(str(model_dir), model_dir, tmp, revision="check").embed_documents(PROBES)
    worst = float(np.abs(expected - got).max())
    if worst > TOLERANCE:
        remove(tmp)
        return {"ok": False, "reason": f"the exported graph differs from torch by {worst:.2e}", "worst": worst,
                "at": time.time()}
    replace(tmp, target / "model.onnx")
    record = {"ok": True, "worst": worst, "export_version": EXPORT_VERSION}
    # ONNX Runtime optimises a graph each time it opens it (about half a second of a cold start here): do it once,
    # keep the result beside the graph, and use it only if it too gives the torch vectors.
    import onnxruntime as ort

    optimized = target / optimized_name(ort.__version__)
    tmp = target / f".opt.{os.getpid()}.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp)
    ort.InferenceSession(str(target / "model.onnx"), options, providers=["CPUExecutionProvider"])
    got = OnnxEmbedder(str(model_dir), model_dir, target / "model.onnx", revision="check",
                       optimized=tmp).embed_documents(PROBES)
    if float(np.abs(expected - got).max()) <= TOLERANCE:
        replace(tmp, optimized)
        record["optimized"] = optimized.name
    else:
        remove(tmp)
    return record


def optimized_name(ort_version: str) -> str:
    """The file of the graph as ONNX Runtime ``ort_version`` optimised it (another version optimises again)."""
    return f"model.opt-{ort_version}.onnx"


class OnnxEmbedder:
    """An :class:`~memvault.models.embeddings.Embedder` running an exported graph with ONNX Runtime. Vectors equal
    the sentence-transformers ones (checked at export), so the identity is the model's own."""

    identity: ModelIdentity

    def __init__(self, name: str, model_dir: Path, graph: Path, *, revision: str, query_prefix: str | None = None,
                 known_prefix: str | None = None, optimized: Path | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        spec = pipeline(model_dir)
        if spec is None:
            raise ModelUnavailable(name, "its pipeline is not one the ONNX backend runs")
        self.spec = spec
        self.model_dir = model_dir
        self.graph = graph
        tokenizer_file = model_dir / spec["transformer"] / "tokenizer.json"
        # Two copies: one cut and padded as the model takes its input, one whole for counting and splitting.
        self._inputs = Tokenizer.from_file(str(tokenizer_file))
        self._inputs.enable_truncation(spec["max_seq_length"])
        pad = self._inputs.token_to_id("[PAD]") or 0
        self._inputs.enable_padding(pad_id=pad, pad_token=self._inputs.id_to_token(pad) or "[PAD]")
        self._whole = Tokenizer.from_file(str(tokenizer_file))
        self._tokenizing = threading.Lock()
        self._whole.no_truncation()
        self._whole.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = 1
        # Threads that spin while waiting for work steal the CPU from everything else on a small busy machine.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        if optimized is None and (graph.parent / optimized_name(ort.__version__)).is_file():
            optimized = graph.parent / optimized_name(ort.__version__)
        if optimized is not None:  # optimised once at export (and checked): opened as it is
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            graph = optimized
        self._session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        # A batch's working memory goes back to the system after the run (a query's stays: it is small and next).
        self._shrink = ort.RunOptions()
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self._input_names = [i.name for i in self._session.get_inputs()]
        dims = int(self._session.get_outputs()[0].shape[-1]) if isinstance(
            self._session.get_outputs()[0].shape[-1], int) else 0
        if query_prefix is None:
            query_prefix = spec["query"] or known_prefix or ""
        self.identity = ModelIdentity(name=name, revision=revision, dims=dims or self._probe_dims(),
                                      query_prefix=query_prefix, max_tokens=spec["max_seq_length"])
        self.backend = "onnx"
        #: Batch workers: 0 uses every core this process may run on (a setting caps it: [embedding] threads).
        self.threads = 0
        self._executor: Any = None
        self._executor_size = 0

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self.identity.name!r}, revision={self.identity.revision!r})"

    def _probe_dims(self) -> int:
        return int(self._run(["x"]).shape[1])

    def _tokenize(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The model's inputs for ``texts``, from any thread, one at a time: a fast tokenizer with truncation and
        padding set must not be used by two threads at once (a recall tokenizes its query in the caller's thread)."""
        import numpy as np

        with self._tokenizing:
            encodings = self._inputs.encode_batch(texts)
        feed = {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64)}
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
        return {k: v for k, v in feed.items() if k in self._input_names or k == "attention_mask"}

    def _run(self, texts: list[str]) -> np.ndarray:
        return self._infer(self._tokenize(texts))

    def _infer(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        """Pooled, normalised vectors of one tokenized batch. Safe to call from several threads at once (ONNX
        Runtime's ``run`` is, and releases the GIL)."""
        import numpy as np

        mask = feed["attention_mask"]
        hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._input_names},
                                   self._shrink if len(mask) > 1 else None)[0]
        if self.spec["pooling"] == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.ascontiguousarray(pooled / np.clip(norms, 1e-12, None), dtype=np.float32)

    def embed_documents(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """(len(texts), dims) float32, L2-normalised, in batches of ``batch_size`` (at most :data:`MAX_BATCH`)
        sorted by length (less padding)."""
        import numpy as np

        if isinstance(texts, str):
            raise InvalidValue("texts", "expected a sequence of strings, not one string")
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.identity.dims), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts = self._parts(texts, order, max(1, min(batch_size, MAX_BATCH)))
        out = np.empty((len(texts), self.identity.dims), dtype=np.float32)
        short = [p for p in parts if self._tokens(texts[p[-1]]) <= PARALLEL_TOKENS]  # p[-1]: a part's longest
        long = [p for p in parts if self._tokens(texts[p[-1]]) > PARALLEL_TOKENS]
        workers = min(cores_for(self.threads), len(short))
        runs = []
        if workers > 1:
            pool = self._pool(workers)
            # Tokenized here, in order, while the pool runs the batches already handed to it.
            runs = [(part, pool.submit(self._infer, self._tokenize([texts[i] for i in part]))) for part in short]
        else:
            long = short + long
        for part in long:
            out[part] = self._run([texts[i] for i in part])
        for part, run in runs:
            out[part] = run.result()
        return out

    def _tokens(self, text: str) -> int:
        """A text's length in tokens, estimated from its characters (a word piece is about four)."""
        return min(self.identity.max_tokens or 512, len(text) // 4 + 2)

    def _parts(self, texts: list[str], order: list[int], batch_size: int) -> list[list[int]]:
        """``order`` (by length) cut into runs of at most ``batch_size`` texts and about :data:`TOKENS_PER_RUN`
        padded tokens (estimated from characters: a word piece is about four)."""
        parts: list[list[int]] = []
        current: list[int] = []
        for i in order:
            longest = self._tokens(texts[i])
            if current and (len(current) >= batch_size or (len(current) + 1) * longest > TOKENS_PER_RUN):
                parts.append(current)
                current = []
            current.append(i)
        if current:
            parts.append(current)
        return parts

    def _pool(self, workers: int) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        if self._executor is None or self._executor_size != workers:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
            self._executor = ThreadPoolExecutor(workers, thread_name_prefix="memvault-onnx")
            self._executor_size = workers
        return self._executor

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([self.identity.query_prefix + text])[0]

    def query_job(self, text: str) -> Callable[[], np.ndarray]:
        """Tokenized here (40 us), run by whoever calls the result: the model lets go of the interpreter, so a thread
        that only runs it does not wait on a busy caller for it (in a recall, 0.4 ms of waits while tokenizing)."""
        feed = self._tokenize([self.identity.query_prefix + text])
        return lambda: self._infer(feed)[0]

    def count_tokens(self, text: str) -> int:
        return len(self._whole.encode(text, add_special_tokens=False).ids)

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        limit = max_tokens if max_tokens is not None else self.identity.max_tokens - 2
        offsets = self._whole.encode(text, add_special_tokens=False).offsets
        return [text[s:e] for s, e in window_spans(text, offsets, limit, overlap)]


def main(argv: list[str] | None = None) -> int:
    """``python -m memvault.models.onnx export MODEL_DIR TARGET``: the child process of :func:`exported`."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 3 or args[0] != "export":
        print("usage: python -m memvault.models.onnx export MODEL_DIR TARGET", file=sys.stderr)
        return 2
    with quiet_loading():
        record = export(Path(args[1]), Path(args[2]))
    _write_meta(Path(args[2]), record)
    return 0 if record.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
