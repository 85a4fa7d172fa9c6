"""bench/corpus.py, which every bench builds its vault from: its small types work without the eval data."""
from __future__ import annotations

import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))

import corpus  # noqa: E402


class _Real:
    identity = "real-model"

    def embed_query(self, text: str) -> str:
        return f"q:{text}"

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def split(self, text: str, max_tokens: int | None = None, overlap: int = 32) -> list[str]:
        return [text]


def test_a_fact_spec_is_built_from_its_key_category_and_text():
    spec = corpus.FactSpec("db/primary", "database", "Listens on 5432.")
    assert (spec.key, spec.category, spec.text) == ("db/primary", "database", "Listens on 5432.")
    assert spec.render().endswith("---\nListens on 5432.\n")


def test_real_model_text_takes_the_real_models_identity_and_query_vectors():
    text = corpus.RealModelText(_Real())
    assert text.identity == "real-model"
    assert text.embed_query("x") == "q:x" and text.count_tokens("a b") == 2 and text.split("a") == ["a"]
