"""A full rebuild on one core and on every core, against a plain ``SentenceTransformer.encode`` (torch) of the same
texts in the same run (issue 24).

    python bench/bench_cores.py [--facts 5000] [--rounds 1] [--json OUT]

Order per round (ABBA over rounds): torch encode, reindex on every core, reindex on one core. The model load is
timed apart and left out of every figure. Reported: seconds, texts/s, the rebuild's throughput as a share of the
plain encode (target ≥ 90 %), the speed-up of every core over one, and Amdahl's model of that speed-up
(serial share s from the two measurements: speedup(N) = 1 / (s + (1 - s) / N)) for 4, 8 and 16 cores.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402

CACHE = HERE / ".cache"
MODEL = "all-MiniLM-L6-v2"


def log(message: str) -> None:
    print(f"[bench_cores] {message}", file=sys.stderr, flush=True)


def vault_of(n: int) -> Path:
    root = CACHE / f"cores-{n}"
    marker = root / ".bench-built.json"
    if not marker.exists() or json.loads(marker.read_text()).get("corpus_version") != corpus.VERSION:
        if root.exists():
            shutil.rmtree(root)
        corpus.write_vault(root, n, MODEL)
        marker.write_text(json.dumps({"corpus_version": corpus.VERSION, "n": n}))
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    from memvault import Vault
    from memvault.models.base import cores_for

    root = vault_of(args.facts)
    all_cores = cores_for(0)
    vault = Vault.open(root, daemon=False)
    started = time.perf_counter()
    embedder = vault.engine.get()
    memvault_load = time.perf_counter() - started
    vault.reindex(full=True)  # the texts the index embeds (and a warm-up of every path)
    texts = [t for (t,) in vault.index.connection().execute("SELECT text FROM chunk_texts ORDER BY rowid")]
    log(f"{len(texts)} texts; {all_cores} cores; memvault's model ({embedder!r}) loaded in {memvault_load:.1f} s")

    import torch
    from sentence_transformers import SentenceTransformer
    from memvault.models.embeddings import resolve_model_path

    started = time.perf_counter()
    plain = SentenceTransformer(resolve_model_path(MODEL), device="cpu")
    torch_load = time.perf_counter() - started
    torch.set_num_threads(all_cores)
    plain.encode(texts[:64], batch_size=32)

    runs: dict[str, list[float]] = {"torch encode": [], "reindex, every core": [], "reindex, one core": []}
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for what in order:
            gc.collect()
            started = time.perf_counter()
            if what == "torch encode":
                plain.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
            else:
                vault.engine.threads = embedder.threads = all_cores if "every" in what else 1
                vault.reindex(full=True)
            runs[what].append(time.perf_counter() - started)
            log(f"{what}: {runs[what][-1]:.1f} s (load avg {os.getloadavg()[0]:.1f})")
    vault.close()
    median = {k: statistics.median(v) for k, v in runs.items()}
    speedup = median["reindex, one core"] / median["reindex, every core"]
    serial = max(0.0, min(1.0, (all_cores / speedup - 1) / (all_cores - 1))) if all_cores > 1 else 1.0
    result: dict[str, Any] = {
        "facts": args.facts, "texts": len(texts), "cores": all_cores, "rounds": args.rounds,
        "load_s": {"memvault": round(memvault_load, 2), "torch": round(torch_load, 2)},
        "seconds": {k: round(v, 2) for k, v in median.items()},
        "texts_per_s": {k: round(len(texts) / v, 1) for k, v in median.items()},
        "rebuild_share_of_torch_encode": round(median["torch encode"] / median["reindex, every core"], 3),
        "speedup_every_core_over_one": round(speedup, 3),
        "amdahl_serial_share": round(serial, 3),
        "model_speedup": {n: round(1 / (serial + (1 - serial) / n), 2) for n in (4, 8, 16)},
        "load_avg": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
