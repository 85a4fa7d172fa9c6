"""Episodes with their context: which text around a conversation turn, embedded with it, finds it best.

    python bench/rank_lab.py dump --sets locomo_turns      # once
    python bench/eval_context.py                           # writes $MEMVAULT_BENCH_CACHE/lab/locomo_turns@<variant>.pkl
    python bench/eval_folds.py --sets locomo_facts,locomo_turns@prev2,...   # each variant out of fold

A turn's vector in the index is the mean of the turn alone and of the turn after its day and the two turns before
it (``Doc.context``, :func:`memvault.index.documents.turn_context`, :func:`memvault.index.update.with_context`):
``session_prev2``, which must give the dump's own figures (largest element difference: the index's 8-bit rounding,
~.001). Each variant here re-embeds every turn of the LoCoMo turn vaults with another context and swaps the dump's
matrix, so the same questions, keyword matches and neighbours are scored with only the vectors changed. The
episode kind's relevance scale (``memvault.core.calibration``: what abstention reads) is measured again on the
variant's vectors, with the pieces and probes the index measured with, as the index would have measured it
(``--keep-scale`` keeps the dump's):

- ``alone``: no context (what context adds at all);
- ``prev1``: the turn before (what the index embedded until issue 27);
- ``prev2``: the two turns before;
- ``prev2next``: the two turns before and the one after (a turn written later re-embeds its predecessor);
- ``session``: the turn after the session's date ("8 May 2023") and the turn before;
- ``prev1next``, ``next``, ``session_prev2next``: the turn before and the one after; the one after alone; the date,
  the two before and the one after; ``session_prev2``: the date and the two before (what an index can embed
  when the turn is written, without waiting for the next).
"""
from __future__ import annotations

import argparse
import pickle
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rank_sim as rs  # noqa: E402
from eval_recall import open_vault  # noqa: E402

GAP = 600.0
VARIANTS = ("alone", "prev1", "prev2", "prev2next", "session", "prev1next", "next", "session_prev2next",
            "session_prev2")


def sequences(v: dict[str, Any]) -> list[list[int]]:
    """The vault's turns (chunk rowids) as conversations: time order, a new one after a gap of more than GAP s."""
    rows = sorted((r for r, d in v["docs"].items() if d["kind"] == "episode"), key=lambda r: v["docs"][r]["created"])
    out: list[list[int]] = []
    last = None
    for r in rows:
        t = datetime.fromisoformat(v["docs"][r]["created"].replace("Z", "+00:00")).timestamp()
        if last is None or t - last > GAP:
            out.append([])
        out[-1].append(r)
        last = t
    return out


def texts_for(v: dict[str, Any], variant: str) -> dict[int, list[str]]:
    """rowid -> the texts whose mean vector is the turn's vector."""
    body = v["bodies"]
    out: dict[int, list[str]] = {}
    for seq in sequences(v):
        for i, r in enumerate(seq):
            t = body[r]
            before = [body[x] for x in seq[max(0, i - 2):i]]
            after = [body[x] for x in seq[i + 1:i + 2]]
            if variant == "alone" or (not before and variant in ("prev1", "prev2")):
                out[r] = [t]
            elif variant == "prev1":
                out[r] = [t, before[-1] + "\n" + t]
            elif variant == "prev2":
                out[r] = [t, "\n".join(before + [t])]
            elif variant == "prev2next":
                out[r] = [t, "\n".join(before + [t] + after)]
            elif variant == "prev1next":
                out[r] = [t, "\n".join(before[-1:] + [t] + after)]
            elif variant == "next":
                out[r] = [t, "\n".join([t] + after)] if after else [t]
            elif variant == "session_prev2":
                day = datetime.fromisoformat(v["docs"][r]["created"].replace("Z", "+00:00")).strftime("%-d %B %Y")
                out[r] = [t, "\n".join([day] + before + [t])]
            elif variant == "session_prev2next":
                day = datetime.fromisoformat(v["docs"][r]["created"].replace("Z", "+00:00")).strftime("%-d %B %Y")
                out[r] = [t, "\n".join([day] + before + [t] + after)]
            elif variant == "session":
                day = datetime.fromisoformat(v["docs"][r]["created"].replace("Z", "+00:00")).strftime("%-d %B %Y")
                out[r] = [t, "\n".join([day] + before[-1:] + [t])]
    return out


def own_scale(v: dict[str, Any], index: Any, matrix: np.ndarray) -> str:
    """The vault's calibration with the episode scale (and that of all kinds: a turn vault holds only turns)
    measured on ``matrix``, with the pieces and probes the index measured with."""
    import base64
    import json

    from memvault.core.calibration import FRAGMENTS_KEY, PROBES_KEY, Fragments, _median

    probes = json.loads(index.meta_get(PROBES_KEY))
    pv = np.frombuffer(base64.b64decode(probes["vectors"]), dtype=np.float32).reshape(probes["probes"], -1)
    pieces = Fragments.from_json(index.meta_get(FRAGMENTS_KEY))
    assert pieces is not None
    c = json.loads(v["calibration"])
    scale = {"null": round(float(_median(list((pv @ matrix.T).max(axis=1)))), 4),
             "ref": round(float(_median(list((pieces.vectors @ matrix.T).max(axis=1)))), 4)}
    c["kinds"]["episode"] = dict(c["kinds"]["episode"], **scale)
    c["kinds"]["*"] = dict(c["kinds"]["*"], **scale)
    return json.dumps(c)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--keep-scale", action="store_true", help="keep the dump's relevance scale (not re-measured)")
    args = ap.parse_args()
    data = rs.load("locomo_turns")
    from eval_recall import DEFAULT_CACHE
    import eval_corpora as ec

    corpora = {c.name: c.vault for c in ec.build("locomo_turns", DEFAULT_CACHE)}
    emb = open_vault(next(iter(corpora.values()))).engine.get()
    for variant in args.variants.split(","):
        out = dict(data)
        out["vaults"] = {}
        drift = []
        for name, v in data["vaults"].items():
            texts = texts_for(v, variant)
            flat = sorted({t for ts in texts.values() for t in ts})
            vecs = dict(zip(flat, emb.embed_documents(flat)))
            matrix = np.array(v["matrix"], dtype=np.float32, copy=True)
            for i, r in enumerate(v["rowids"]):
                r = int(r)
                if r in texts:
                    m = np.mean([vecs[t] for t in texts[r]], axis=0)
                    matrix[i] = m / (np.linalg.norm(m) or 1.0)
            drift.append(float(np.abs(matrix - v["matrix"]).max()))
            nv = {k: val for k, val in v.items() if k not in ("row_index", "dockey")}
            nv["matrix"] = matrix
            if not args.keep_scale and v.get("calibration"):
                nv["calibration"] = own_scale(v, open_vault(corpora[name]).index, matrix)
            out["vaults"][name] = nv
        with open(rs.LAB / f"locomo_turns@{variant}.pkl", "wb") as fh:
            pickle.dump(out, fh)
        print(f"{variant}: written; largest change of a vector element against the dump {max(drift):.4f}",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
