"""The specific answer above the general one, on a billing team's service vault (tests/data/service_vault.json: 15
facts, the 19 questions of issue 27's user) and a second set of 28 paraphrases written for it
(bench/data/service_paraphrases.jsonl): hit@1 / hit@3 and false "nothing found" per set of ``[recall]`` settings.

    python bench/eval_service.py [--runs "coverage_weight=0;keyword_coverage=0.75"] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "tests" / "data" / "service_vault.json").read_text("utf-8"))
PARA = [json.loads(line) for line in (ROOT / "bench" / "data" / "service_paraphrases.jsonl").read_text("utf-8")
        .splitlines() if line.strip()]
MODEL = "all-MiniLM-L6-v2"


def build(root: Path, model: str = MODEL) -> None:
    from memvault import Vault

    Vault.init(root, daemon=False)
    toml = root / "memvault.toml"
    before = toml.read_text()
    toml.write_text(before.replace('model = "BAAI/bge-small-en-v1.5"', f'model = {json.dumps(model)}'))
    if toml.read_text() != before:  # not the default model
        subprocess.run(["git", "-C", str(root), "commit", "-qm", "model", "--", "memvault.toml"], check=True)
    v = Vault.open(root, daemon=False)
    for key, text in DATA["facts"].items():
        v.facts.set(key, text, source="user:admin")
    v.reindex()


def measure(root: Path, settings: dict[str, float]) -> dict[str, dict[str, object]]:
    from memvault import Vault

    toml = root / "memvault.toml"
    text = toml.read_text()
    for key, value in settings.items():  # the template lists every [recall] setting at its default
        start = text.index(f"\n{key} = ") + 1
        text = text[:start] + f"{key} = {value}" + text[text.index("\n", start):]
    toml.write_text(text)
    v = Vault.open(root, daemon=False)
    out = {}
    sets = {"issue": [(q, k) for q, k in DATA["questions"]], "paraphrases": [(p["query"], p["relevant"][0])
                                                                            for p in PARA]}
    for name, qs in sets.items():
        h1 = h3 = nothing = 0
        wrong = []
        for q, key in qs:
            ids = [h.id for h in v.recall(q, k=5, record_access=False)]
            h1 += ids[:1] == [key]
            h3 += key in ids[:3]
            nothing += not ids
            if ids[:1] != [key]:
                wrong.append({"q": q, "want": key, "got": ids[:3]})
        out[name] = {"hit@1": f"{h1}/{len(qs)}", "hit@3": f"{h3}/{len(qs)}", "nothing": nothing, "wrong_at_1": wrong}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="coverage_weight=0;coverage_weight=0.15;coverage_weight=0.3",
                    help="';'-separated runs, each ','-separated [recall] settings (name=value)")
    ap.add_argument("--model", default=MODEL, help="the embedding model ([embedding] model; the default, "
                                                   "bge-small, needs the Hugging Face hub or its cache)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="memvault-service-"))
    from memvault.models.embeddings import load_embedder
    from memvault.rules.errors import ModelUnavailable

    try:
        load_embedder(args.model)  # a vault whose model is unreachable answers by words alone: not this measure
        build(tmp / "vault", args.model)
        res = {run: measure(tmp / "vault", {k: float(v) for k, v in (kv.split("=") for kv in run.split(",") if kv)})
               for run in args.runs.split(";")}
    except ModelUnavailable as exc:
        print(f"eval_service: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for w, r in res.items():
        print(f"{w}: issue hit@1 {r['issue']['hit@1']} hit@3 {r['issue']['hit@3']} nothing "
              f"{r['issue']['nothing']} | paraphrases hit@1 {r['paraphrases']['hit@1']} hit@3 "
              f"{r['paraphrases']['hit@3']} nothing {r['paraphrases']['nothing']}")
        for name in ("issue", "paraphrases"):
            for miss in r[name]["wrong_at_1"]:
                print(f"   {name}: {miss['q']!r} -> {miss['got']} (want {miss['want']})")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
