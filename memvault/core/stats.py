"""Numbers about a vault and its index: sizes, growth, and what a rebuild would cost before paying for it."""
from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from ..rules.errors import ModelUnavailable
from ..index import CHUNK_OVERLAP, KINDS, cut, read_docs

if TYPE_CHECKING:
    from pathlib import Path

    from ..rules.config import Config
    from ..models.engine import Engine
    from ..stores.episodes import EpisodeLog
    from ..index.protocol import VaultIndex

PGVECTOR_OVERHEAD = 8  # pgvector stores 4·dims + 8 bytes per vector
#: sqlite-vec allocates vector storage 1,024 rows at a time (vec0's default chunk_size): a 25-row index holds
#: room for 1,024 vectors, so bytes per row measured on a small index say nothing about a large one.
VEC0_CHUNK_ROWS = 1024
#: Fewer rows than this and the fixed part of an index (schema, the first vector chunk) dominates its size:
#: no projection is made from it.
PROJECTION_MIN_ROWS = 1000
#: Files indexed for real (keyword rows, in a temporary directory) to estimate a rebuild's size.
ESTIMATE_SAMPLE_FILES = 200


def vector_store_bytes(rows: int, dims: int, width: int = 4) -> int:
    """What sqlite-vec allocates for ``rows`` vectors of ``dims`` components of ``width`` bytes (int8: 1)."""
    return -(-rows // VEC0_CHUNK_ROWS) * VEC0_CHUNK_ROWS * width * dims


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def episode_files(root: Path, episodes: EpisodeLog) -> list[dict[str, Any]]:
    out = []
    for path in episodes.files():
        with path.open("rb") as handle:
            lines = sum(1 for line in handle if line.strip())
        out.append({"path": path.relative_to(root).as_posix(), "lines": lines, "bytes": path.stat().st_size})
    return out


def vault_stats(root: Path, index_: VaultIndex, episodes: EpisodeLog, config: Config) -> dict[str, Any]:
    """Everything ``memvault stats`` prints."""
    index = index_.stats()
    shared = index.pop("shared_index", None)  # a team's: the local index is then this host's overlay
    fallback = index.pop("fallback_index", None)
    files = episode_files(root, episodes)
    data: dict[str, Any] = {"vault": str(root), "model_configured": config.model, "index": index,
                            "episode_files": files}
    summary = [f"vault {root}"]
    if shared is not None:
        data["shared_index"] = shared
        summary += team_lines(shared)
        if fallback is not None:
            data["fallback_index"] = fallback
    if index.get("exists"):
        items = index["items"]
        rows = index["chunks"] or 0
        label = "items" if shared is None else "this host's unpushed items (its overlay)"
        summary.append(f"{label}: " + ", ".join(f"{items[k]} {k}s" for k in KINDS) + f" ({rows} chunks indexed)")
        summary.append(f"index: {index['path']}, {_human(index['file_bytes'])} on disk")
        model = index["model"]
        if model:
            dims = model["dims"]
            per_row = index["used_bytes"] / rows if rows else 0.0
            vec_per_row = (index["vector_store_bytes"] or 0) / index["vectors"] if index["vectors"] else 0.0
            data["bytes_per_row"] = {"measured_total": per_row, "measured_vector_store": vec_per_row,
                                     "theoretical_float32": 4 * dims, "pgvector": 4 * dims + PGVECTOR_OVERHEAD,
                                     "total_over_4dims": round(per_row / (4 * dims), 3)}
            summary.append(f"model: {model['name']} @ {model['revision'][:12]}, {dims} dims"
                           + ("" if model["name"] == config.model else
                              f" ({config.model_from} says {config.model}: run memvault reindex)"))
            projected = projected_bytes(index, 100_000)
            if projected is not None:
                data["projected_bytes_at_100k_rows"] = projected
                summary.append(f"bytes per row: {per_row:.0f} in all (text, keywords, vector: "
                               f"{per_row / (4 * dims):.2f} x 4·dims), {vec_per_row:.0f} in the vector store; "
                               f"theoretical 4·dims = {4 * dims}, pgvector {4 * dims + PGVECTOR_OVERHEAD}")
                summary.append(f"projected index size at 100k rows: {_human(projected)} "
                               f"({projected / 100_000:.0f} bytes per row)")
            else:
                data["projected_bytes_at_100k_rows"] = None
                data["projection"] = (f"too few rows ({rows}) to project from: at least {PROJECTION_MIN_ROWS} are "
                                      "needed")
                summary.append(f"bytes per row: {per_row:.0f} in all, most of it the fixed part of a small index "
                               f"(sqlite-vec reserves {VEC0_CHUNK_ROWS} vectors at a time); theoretical 4·dims = "
                               f"{4 * dims}, pgvector {4 * dims + PGVECTOR_OVERHEAD}")
                summary.append(f"projected index size at 100k rows: {data['projection']}")
        else:
            summary.append(f"model: none (keyword-only index); {config.model_from} says {config.model}")
        if index["pending_vectors"]:
            summary.append(f"pending vectors: {index['pending_vectors']} (run memvault reindex)")
    else:
        summary.append("index: none yet (memvault reindex builds it; recall does too)")
    if files:
        summary.append("episodes:")
        for f in files:
            summary.append(f"  {f['path']}: {_lines(f['lines'])}, {_human(f['bytes'])}")
        summary.append(f"  total: {_lines(sum(f['lines'] for f in files))}, {_human(sum(f['bytes'] for f in files))}")
    data["summary"] = summary
    return data


def team_lines(shared: dict[str, Any]) -> list[str]:
    """A team's shared index in ``stats``'s text: what it holds for the whole team, or why it cannot be read."""
    if shared.get("error"):
        return [f"team index: cannot be used ({shared['error']}); recall answers from this host's files"]
    if not shared.get("exists"):
        return [f"team index: no vault {shared.get('vault')!r} yet ('memvault reindex' publishes it)"]
    items = shared["items"]
    lines = [f"team index {shared['vault']!r} at {shared['url']}: " + ", ".join(f"{items[k]} {k}s" for k in KINDS)
             + f" ({shared['chunks']} chunks, {shared['vectors']} vectors)"]
    model = shared.get("model")
    lines.append(f"team model: {model['name']} @ {model['revision'][:12]}, {model['dims']} dims" if model
                 else "team model: none yet (keyword-only until 'memvault reindex' embeds)")
    if shared.get("pending_vectors"):
        lines.append(f"team pending vectors: {shared['pending_vectors']} (run memvault reindex)")
    size = sum(shared.get(k) or 0 for k in ("docs_bytes", "chunks_bytes", "vector_table_bytes", "hnsw_bytes"))
    lines.append(f"team index size: {_human(size)} in PostgreSQL; reflects commit {(shared.get('head') or '-')[:12]}")
    return lines


def add_watchers(out: dict[str, Any], state_dir: Path) -> None:
    """``stats``' view of the file watchers that follow the vault (``watchers``, a summary line each): the state
    each live process recorded (memvault.index.changes.feed_states)."""
    from ..index.changes import feed_states

    out["watchers"] = states = feed_states(state_dir)
    out["summary"] += [watcher_line(state) for state in states]


def watcher_line(state: dict[str, Any]) -> str:
    """One process's file watcher as ``stats`` and ``agent status`` show it."""
    head = f"file watcher: pid {state.get('pid')} ({state.get('process') or '?'})"
    if state.get("reason"):
        return f"{head}: degraded ({state['reason']}); changes are found by checking the vault instead"
    last = state.get("last_check")
    ago = f"{max(0.0, time.time() - float(last)):.0f} s ago" if isinstance(last, (int, float)) else "not yet"
    line = f"{head}: live; last full check {ago}, every {float(state.get('check_interval') or 0):g} s"
    if state.get("events_lost"):
        line += f"; events lost {state['events_lost']} times (each followed by a full check)"
    if not state.get("lost_events_reported", True):
        line += "; this watchdog cannot report lost events (the periodic check covers them)"
    return line


def add_warm_process(out: dict[str, Any], idle: float) -> None:
    """``stats``' figures of the warm process (``warm_process``, and a summary line); asked, never started."""
    from ..models import daemon

    out["warm_process"] = daemon.status()
    out["summary"].append(warm_process_line(out["warm_process"], idle))


def warm_process_line(status: dict[str, Any] | None, idle: float) -> str:
    """The warm process as ``stats`` shows it: its resident memory (which falls back after a minute without a
    request, and to nothing when it stops), what it holds, and how long until it stops."""
    if status is None:
        return "warm process: none running (the next command that needs a model starts it)"
    models = ", ".join(f"{m['model']} ({m['backend']})" for m in status.get("models", [])) or "no model yet"
    vaults = len(status.get("vaults", []))
    rss = status.get("rss_bytes")
    left = max(0.0, float(status.get("idle_after", idle)) - float(status.get("idle_for", 0.0)))
    return (f"warm process: pid {status['pid']}, {_human(rss) if rss else '?'} resident, {models}, {vaults} vault"
            f"{'s' if vaults != 1 else ''} served; stops after {left:.0f} s more without a request")


def estimate_rebuild(index: VaultIndex, engine: Engine, name: str, *, sample_size: int = 64) -> dict[str, Any]:
    """What a full rebuild with model ``name`` would cost, measured on this machine: items and tokens to embed,
    the time (getting the model — a warm daemon answers at once, a cold one loads it — plus a random sample of the
    real chunks embedded and timed, then scaled to the corpus), and the disk needed while both indexes exist."""
    problems: list[str] = []
    docs = []
    for rel, (kind, *_rest) in sorted(index.scan().items()):
        docs.extend(read_docs(index.sources, rel, kind, problems))
    load_started = time.perf_counter()
    try:
        emb = engine.get()
    except ModelUnavailable as exc:
        return {"model": name, "error": str(exc), "items": len(docs),
                "summary": [f"{len(docs)} items to index; {exc}"]}
    load_seconds = time.perf_counter() - load_started
    cut_started = time.perf_counter()
    chunks = [c for texts, _how in cut(docs, emb, None) for _j, c in texts]
    tokens = sum(emb.count_tokens(c) for c in chunks)
    cut_seconds = time.perf_counter() - cut_started
    rng = random.Random(0)
    sample = rng.sample(chunks, min(sample_size, len(chunks))) if chunks else []
    embed_seconds = 0.0
    if sample:
        emb.embed_documents(sample[:8])  # warm up: first calls pay one-off costs
        started = time.perf_counter()
        emb.embed_documents(sample)
        embed_seconds = (time.perf_counter() - started) / len(sample) * len(chunks)
    seconds = load_seconds + cut_seconds + embed_seconds
    current = index.stats()
    current_bytes = current.get("file_bytes", 0) if current.get("exists") else 0
    new_bytes = _estimate_bytes(index, current, emb.identity, len(chunks), rng)
    by_kind = {k: sum(1 for d in docs if d.kind == k) for k in KINDS}
    out = {
        "model": name,
        "dims": emb.identity.dims,
        "items": len(docs),
        "items_by_kind": by_kind,
        "chunks": len(chunks),
        "tokens": tokens,
        "window_tokens": emb.identity.max_tokens,
        "overlap_tokens": CHUNK_OVERLAP,
        "estimated_seconds": round(seconds, 6),
        "model_load_seconds": round(load_seconds, 6),
        "cut_seconds": round(cut_seconds, 6),
        "embed_seconds": round(embed_seconds, 6),
        "sample_size": len(sample),
        "current_index_bytes": current_bytes,
        "estimated_new_index_bytes": int(new_bytes),
        "disk_needed_during_swap_bytes": int(current_bytes + new_bytes),
    }
    out["summary"] = [
        f"rebuild with {name} ({emb.identity.dims} dims, window {emb.identity.max_tokens} tokens):",
        f"  items: {len(docs)} ({', '.join(f'{v} {k}s' for k, v in by_kind.items())}) in {len(chunks)} chunks, "
        f"{tokens} tokens",
        f"  time: about {_duration(seconds)} on this machine: getting the model {_duration(load_seconds)} "
        f"(a warm embedder answers at once), cutting {_duration(cut_seconds)}, embedding {_duration(embed_seconds)} "
        f"(a sample of {len(sample)} chunks timed, scaled)",
        f"  disk: {_human(new_bytes)} for the new index + {_human(current_bytes)} for the old one during the swap "
        f"= {_human(current_bytes + new_bytes)}",
    ]
    return out


#: What the relevance scale keeps in an index's meta after a rebuild, per dimension of the model (its probe vectors
#: and fragments: 158,606 B at 384 dims, measured on all-MiniLM-L6-v2).
CALIBRATION_BYTES_PER_DIM = 413


def projected_bytes(index: dict[str, Any], rows: int) -> float | None:
    """The size of this index grown to ``rows`` rows (text and keywords per row as measured here, vectors in
    whole vec0 chunks), or None when it holds fewer than :data:`PROJECTION_MIN_ROWS` rows to measure from."""
    have = index.get("chunks") or 0
    model = index.get("model")
    if have < PROJECTION_MIN_ROWS or not model:
        return None
    fixed = index.get("fixed_bytes") or 0
    other = (index["used_bytes"] - (index["vector_store_bytes"] or 0) - fixed) / have
    return fixed + other * rows + vector_store_bytes(rows, model["dims"], index.get("vector_width", 4))


def _estimate_bytes(index: VaultIndex, current: dict[str, Any], identity: Any, chunks: int,
                    rng: random.Random) -> int:
    """The size of a rebuilt index of ``chunks`` chunks: the empty schema, plus text and keywords per chunk (from
    the current index when it has rows, else from a sample of the files indexed for real), plus the vectors as
    sqlite-vec allocates them."""
    files = sorted(index.scan())
    sample = files if len(files) <= ESTIMATE_SAMPLE_FILES else rng.sample(files, ESTIMATE_SAMPLE_FILES)
    empty, sampled, sampled_chunks = index.sample_size(sample if not current.get("chunks") else [], identity)
    if current.get("exists") and current.get("chunks"):
        other = current["used_bytes"] - (current.get("vector_store_bytes") or 0) - empty - (current.get("fixed_bytes") or 0)
        per_chunk = max(0.0, other / current["chunks"])
    else:
        per_chunk = max(0.0, (sampled - empty) / sampled_chunks) if sampled_chunks else 0.0
    # the relevance scale a rebuild measures is kept in meta: as the current index holds it, else as it measures
    fixed = current.get("fixed_bytes") or int(CALIBRATION_BYTES_PER_DIM * identity.dims)
    return int(empty + fixed + per_chunk * chunks
               + vector_store_bytes(chunks, identity.dims, current.get("vector_width", 4)))


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
