"""The optional cross-encoder reranker (``[recall] reranker``): off by default and then never imported; when set,
the best candidates are put in the order of its scores; a reranker that cannot load is one warning. Its wiring is
tested on a tiny cross-encoder built here (no network); what a real one buys is not measured on this machine (no
cross-encoder can be downloaded here)."""
from __future__ import annotations

import sys

import pytest

from memvault import Vault

FACTS = {
    "db/primary": "The primary database db01 listens on port 5432 and replicates to db02.",
    "web/lb": "The load balancer lb1 forwards port 443 to the web servers web1 and web2.",
    "dns/resolvers": "Internal resolvers are ns1 and ns2 running unbound on port 53.",
    "mail/relay": "Applications send mail through the postfix relay smtp01 on port 587.",
    "ssh/bastion": "SSH goes through the jump host bastion on port 2222.",
}


@pytest.fixture
def fv(vault, models):
    from fake_embedder import fake_vault

    return fake_vault(vault, models, FACTS)


def set_reranker(v, value: str, models) -> Vault:
    """A reranker in a directory of this host: named in its own local.toml (memvault.toml may not name one)."""
    (v.state_dir / "local.toml").write_text(f'[recall]\nreranker = "{value}"\n')
    return Vault.open(v.root, embedder_factory=models)


def test_no_reranker_is_imported_or_loaded_by_default(fv, monkeypatch):
    monkeypatch.delitem(sys.modules, "memvault.models.reranker", raising=False)
    hits = fv.recall("which port does the primary database listen on", k=3)
    assert hits and fv.config.recall.reranker == ""
    assert "memvault.models.reranker" not in sys.modules


@pytest.mark.model
def test_the_best_candidates_come_in_the_cross_encoders_order(fv, models, tmp_path):
    from model_variants import tiny_cross_encoder
    from memvault.models.reranker import Reranker, loaded

    path = tiny_cross_encoder(tmp_path / "ce")
    question = "which port does the primary database listen on"
    plain = fv.recall(question, k=5, min_relevance=0)
    v = set_reranker(fv, str(path), models)
    hits = v.recall(question, k=5, min_relevance=0)
    assert str(path) in loaded()  # loaded once, kept for the next recall
    scores = Reranker(str(path)).score(question, [h.text for h in plain])
    expected = [h.id for _, h in sorted(zip(scores, plain), key=lambda t: -t[0])]
    assert [h.id for h in hits] == expected
    assert expected != [h.id for h in plain]  # the reranker did change the order (else this proves nothing)
    assert sorted(h.factors["relevance"] for h in hits) == pytest.approx(sorted(scores))


def test_a_reranker_that_cannot_load_is_one_warning(fv, models, tmp_path):
    v = set_reranker(fv, str(tmp_path / "no-such-model"), models)
    hits = v.recall("which port does the primary database listen on", k=3)
    assert hits and hits[0].id == "db/primary"
    assert [w for w in hits.warnings if "results not reranked" in w and "no-such-model" in w]


@pytest.mark.model
def test_a_time_the_question_names_still_ranks_its_memories_first_after_the_reranker(fv, models, tmp_path):
    """The reranker's score becomes a candidate's relevance; a candidate not of the time the question names keeps
    its share of it (1 / (1 + time_weight)), as it had before the reranker read it."""
    from model_variants import tiny_cross_encoder
    from memvault.models.reranker import Reranker

    fv.episodes.append("The backup job failed on db01: the disk was full.", source="agent:ops",
                       at="2025-03-03T04:00:00Z")
    fv.episodes.append("The backup job failed on db01: credentials expired.", source="agent:ops",
                       at="2025-06-01T04:00:00Z")
    path = tiny_cross_encoder(tmp_path / "ce")
    v = set_reranker(fv, str(path), models)
    hits = v.recall("backup job failed on db01 on 3 March 2025", k=5, kinds=["episode"], min_relevance=0)
    assert hits.window["phrase"] == "on 3 March 2025"
    texts = [h.text for h in hits]
    scores = dict(zip(texts, Reranker(str(path)).score("backup job failed on db01", texts)))
    share = 1 / (1 + v.config.recall.time_weight)
    for h in hits:
        of_time = h.created.startswith("2025-03-03")
        assert h.factors["relevance"] == pytest.approx(scores[h.text] * (1 if of_time else share))
