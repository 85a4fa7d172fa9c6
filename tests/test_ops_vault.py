"""Issue 17: an ops team's vault (tests/data/ops_vault.json: 24 facts, 32 questions asked in other words than the
facts use, 14 it cannot answer), with the packaged all-MiniLM-L6-v2 and with a 256-dimension model built from it
here whose cosines sit far higher (unrelated texts around 0.6, as bge-small's do). One cosine floor cannot serve
both; the scale measured per vault and model does. bge-small itself cannot be loaded on this machine (no network).

The questions were written before any model scored them; the thresholds below are what the issue asks (every
answerable question answered, the right fact in the top 3, unrelated questions answered with nothing), loosened
only where a figure says so — the misses are listed when a test fails, and measured in docs/benchmarks.md."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memvault import Vault
from conftest import git

pytestmark = pytest.mark.model

DATA = json.loads((Path(__file__).parent / "data" / "ops_vault.json").read_text("utf-8"))


@pytest.fixture(scope="module", params=["minilm", "minilm-256"])
def ops(request, tmp_path_factory):
    """(model name, vault) built once per model."""
    base = tmp_path_factory.mktemp(request.param)
    if request.param == "minilm":
        model = "all-MiniLM-L6-v2"
    else:
        from model_variants import projected_minilm

        model = str(projected_minilm(base / "model"))
    root = base / "vault"
    vault = Vault.init(root, daemon=False)
    if request.param == "minilm":
        toml = root / "memvault.toml"
        toml.write_text(toml.read_text().replace('model = "BAAI/bge-small-en-v1.5"', f'model = "{model}"'))
        git(root, "commit", "-qm", "model", "--", "memvault.toml")
    else:  # a directory of this host: only its own local.toml may name it
        (vault.state_dir / "local.toml").write_text(f'[embedding]\nmodel = "{model}"\n')
    v = Vault.open(root, daemon=False)
    for key, text in DATA["facts"].items():
        v.facts.set(key, text, source="user:admin")
    v.reindex()
    return request.param, v


def ask(v, question):
    return v.recall(question, k=5, record_access=False)


def test_answerable_questions_are_answered_with_the_right_fact(ops):
    name, v = ops
    nothing = [q for q, _ in DATA["answerable"] if not ask(v, q)]
    missed = [(q, key, [h.id for h in ask(v, q)][:3]) for q, key in DATA["answerable"]
              if key not in [h.id for h in ask(v, q)][:3]]
    if name == "minilm":
        assert nothing == []
        assert len(missed) <= 0.1 * len(DATA["answerable"]), missed  # measured: 1 of 32 (docs/benchmarks.md)
    else:  # a projection to 256 dimensions loses detail: more misses, still few false "nothing known"
        assert len(nothing) <= 0.2 * len(DATA["answerable"]), nothing
        assert len(missed) <= 0.25 * len(DATA["answerable"]), missed
    examples = [("which machine serves payments", "payments/api")]  # the issue's own two examples
    if name == "minilm":
        examples.append(("how do I connect to prod from home", "vpn/access"))
    for question, key in examples:
        assert key in [h.id for h in ask(v, question)][:3]


def test_unrelated_questions_get_nothing_and_say_why(ops):
    _name, v = ops
    answered = [(q, [h.id for h in ask(v, q)]) for q in DATA["unanswerable"] if ask(v, q)]
    assert len(answered) <= 0.3 * len(DATA["unanswerable"]), answered
    hits = ask(v, "what is the capital of France")
    assert list(hits) == [] and "evidence" in hits.nothing_found and "France" in hits.nothing_found


def test_the_scale_follows_the_model(ops, tmp_path):
    """The same vault measured with two models: the unrelated level moves by more than any fixed floor could
    absorb. MiniLM's old floor (cosine 0.388) would answer every unrelated question under the 256-d model."""
    name, v = ops
    data = json.loads(v.index.meta_get("calibration"))
    fact = data["kinds"]["fact"]
    assert data["model"]["dims"] == (384 if name == "minilm" else 256)
    best = []
    for question in DATA["unanswerable"]:
        vector = v.engine.get().embed_query(question)
        best.append(max(c for _, c in v.index.search_vectors(vector, ["fact"], 1)))
    if name == "minilm":
        assert fact["null"] < 0.25 and fact["ref"] > 0.5
        assert sum(b < 0.388 for b in best) >= 0.7 * len(best)
    else:
        assert fact["null"] > 0.5 and fact["ref"] > fact["null"] + 0.1
        assert all(b >= 0.388 for b in best)  # the old constant would have let every one through
    # measured again from scratch, the stored scale is what this vault and model give (not a leftover)
    from memvault.core import calibration
    from memvault.index import KINDS

    copy = tmp_path / "copy"
    shutil.copytree(v.root, copy, symlinks=True)
    again = Vault.open(copy, daemon=False)
    measured = calibration.current(again.index, v.engine.get(), KINDS, remeasure=True)
    assert measured.kinds["fact"].null == pytest.approx(fact["null"], abs=1e-3)
