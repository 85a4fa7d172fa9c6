"""Why "what happens if nobody answers an alert" ranks the monitoring fact above the escalation policy
(tests/test_specific_answers.py's expected failure): the signals MiniLM can give, each alone, on the service vault's
19 questions (tests/data/service_vault.json).

    python bench/service_miss.py [--question TEXT]

- ``whole``: the cosine of the question and the fact (what recall ranks by meaning);
- ``stripped``: the same with the question's frame ("what happens if", "how often do we", ...) taken off;
- ``sentence``: the fact's best sentence;
- ``less general``: ``whole`` less 0.3 × the fact's closeness to its two nearest other facts above the mean of that
  closeness (hubness, CSLS's local scaling: a fact near many others is general on their subject; the weight the
  folds chose for it: `[recall] generality_weight`, docs/benchmarks.md);
- ``soft words``: each content word of the question (its token in context) matched to the fact's nearest token, the
  mean of those cosines (BERTScore's recall: a soft share of the question's words the fact holds).

Needs sentence-transformers (token embeddings); the vectors of ``whole`` are the product's own (memvault's embedder).
``--model`` measures another model (the same with ``bench/eval_service.py --model``).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "tests" / "data" / "service_vault.json").read_text("utf-8"))
FRAME = re.compile(r"^(what happens if|how often do we|why did|who is|which|what|how|why|when|where|who|is there)\s+")
STOP = set("what happens if is are the a an of do we did how who when where why which and to in on this our i can "
           "there".split())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--question", default="what happens if nobody answers an alert")
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="the embedding model (e.g. BAAI/bge-small-en-v1.5, "
                                                                "the default of a vault, where the hub is reachable)")
    args = ap.parse_args(argv)
    from sentence_transformers import SentenceTransformer

    from memvault.core.candidates import centred_closeness
    from memvault.models.embeddings import load_embedder
    from memvault.rules.errors import ModelUnavailable

    try:
        embedder = load_embedder(args.model)
    except ModelUnavailable as exc:
        print(f"service_miss: {exc}", file=sys.stderr)
        return 2
    st = SentenceTransformer(str(getattr(embedder, "model_dir", None) or args.model), device="cpu")
    keys = list(DATA["facts"])
    texts = [DATA["facts"][k] for k in keys]
    facts = np.array(embedder.embed_documents(texts))
    sentences = [np.array(embedder.embed_documents([s for s in re.split(r"(?<=[.;:])\s+", t) if s])) for t in texts]

    def tokens(text: str) -> tuple[np.ndarray, list[str]]:
        out = st.encode([text], output_value="token_embeddings")[0].cpu().numpy().astype(np.float64)
        words = st.tokenizer.convert_ids_to_tokens(st.tokenizer(text, truncation=True)["input_ids"])
        return out / np.linalg.norm(out, axis=1, keepdims=True), words

    fact_tokens = [tokens(t)[0][1:-1] for t in texts]
    general = centred_closeness(facts)

    def signals(q: str) -> dict[str, np.ndarray]:
        qt, qw = tokens(q)
        keep = [i for i, w in enumerate(qw) if w not in ("[CLS]", "[SEP]") and w not in STOP]
        whole = facts @ np.array(embedder.embed_query(q))
        return {"whole": whole,
                "less general": whole - 0.3 * general,
                "stripped": facts @ np.array(embedder.embed_query(FRAME.sub("", q))),
                "sentence": np.array([float((s @ np.array(embedder.embed_query(q))).max()) for s in sentences]),
                "soft words": np.array([float((qt[keep] @ ft.T).max(axis=1).mean()) for ft in fact_tokens])}

    hits: dict[str, int] = {}
    for q, gold in DATA["questions"]:
        for name, values in signals(q).items():
            hits[name] = hits.get(name, 0) + (keys[int(np.argmax(values))] == gold)
    gold = dict(DATA["questions"]).get(args.question)
    print(f"{args.question!r} (answer: {gold})")
    for name, values in signals(args.question).items():
        order = np.argsort(-values)
        rank = [keys[i] for i in order].index(gold) + 1 if gold else "-"
        top = ", ".join(f"{keys[i]} {values[i]:.3f}" for i in order[:3])
        print(f"  {name:12}  answer at #{rank}; best: {top}   (first on {hits[name]} of {len(DATA['questions'])})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
