"""The relevance scale (memvault.core.calibration): measured per vault and model, stored in the index with the
model's identity, measured again on reindex, on a model change and when the vault has grown; what recall's
"nothing known" test reads from it. Logic tests with the fake embedder (the real models: test_ops_vault.py)."""
from __future__ import annotations

import json

import pytest

from memvault import Vault
from memvault.core import calibration
from memvault.core.recall import named_words
from memvault.index import KINDS

FACTS = {
    "db/primary": "The primary database db01 listens on port 5432 and replicates to db02.",
    "web/lb": "The load balancer lb1 forwards port 443 to the web servers web1 and web2.",
    "dns/resolvers": "Internal resolvers are ns1 and ns2 running unbound.",
    "backup/nightly": "Nightly backups run at 03:15 with restic to the bucket acme-backups.",
    "vpn/gateway": "The office gateway vpn1 runs wireguard on udp port 51820.",
    "mail/relay": "Applications send mail through the postfix relay smtp01 on port 587.",
    "logs/central": "Logs are shipped by vector to the loki cluster on logs01.",
    "k8s/cluster": "The kubernetes cluster has three control plane nodes k8s-cp1 to k8s-cp3.",
    "ssh/bastion": "SSH goes through the jump host bastion on port 2222.",
}


@pytest.fixture
def fv(vault, models):
    from fake_embedder import fake_vault

    return fake_vault(vault, models, FACTS)


def stored(v):
    return json.loads(v.index.meta_get(calibration.META_KEY))


def test_reindex_stores_the_scale_with_the_model_identity(fv):
    data = stored(fv)
    assert data["model"]["name"] == "fake-hash" and data["model"]["dims"] == 32
    fact = data["kinds"]["fact"]
    assert fact["chunks"] == len(FACTS)
    assert fact["null"] < fact["ref"]  # unrelated questions score lower than pieces of the vault's own text
    assert set(data["kinds"]) == {"fact", calibration.ALL}  # no scale for kinds without vectors
    pieces = calibration.stored_fragments(fv.index)
    assert pieces is not None and len(pieces.sources) == len(FACTS)
    assert all(s.startswith("fact:") for s in pieces.sources)


def test_a_model_change_measures_the_scale_again(fv, models):
    before = stored(fv)
    fv.reindex(model="fake-other")
    after = stored(fv)
    assert after["model"]["name"] == "fake-other" and after["model"]["dims"] == 16
    assert after["kinds"]["fact"] != before["kinds"]["fact"]  # another model, another scale


def test_the_stored_scale_is_reused_until_the_vault_grows_by_a_quarter(fv, monkeypatch):
    calls = []
    real = calibration.measure
    monkeypatch.setattr(calibration, "measure", lambda *a, **k: calls.append(1) or real(*a, **k))
    fv.recall("which port does the database listen on", k=3)
    fv.recall("where do logs go", k=3)
    assert calls == []  # measured by reindex, read since
    for i in range(30):  # the vault grows past GROWTH times what was measured (and the slack)
        fv.facts.set(f"extra/host-{i}", f"Host extra{i} serves the intranet wiki number {i}.")
    fv.recall("which port does the database listen on", k=3)
    assert calls == [1]
    assert stored(fv)["kinds"]["fact"]["chunks"] == calibration.FRAGMENTS  # a sample of the grown kind


def test_an_index_without_a_scale_measures_it_at_the_first_recall(fv):
    fv.index.meta_set(calibration.META_KEY, "")
    hits = fv.recall("which port does the database listen on", k=3)
    assert stored(fv)["kinds"]["fact"]["chunks"] == len(FACTS)
    assert hits.evidence and hits.evidence["semantic"] is not None


def test_a_scale_of_another_version_or_unreadable_is_measured_again(fv):
    fv.index.meta_set(calibration.META_KEY, json.dumps({"version": 0}))
    fv.recall("where do logs go", k=3)
    assert stored(fv)["version"] == calibration.VERSION
    fv.index.meta_set(calibration.META_KEY, "{not json")
    fv.recall("where do logs go", k=3)
    assert stored(fv)["version"] == calibration.VERSION


def test_a_kind_with_few_chunks_is_read_on_the_scale_of_all_kinds(fv):
    fv.episodes.append("Restarted unbound on ns1 after the upgrade.", source="user:ops")
    cal = calibration.current(fv.index, fv.engine.get(), KINDS, remeasure=True)
    assert cal.kinds["episode"].chunks == 1 < calibration.MIN_CHUNKS
    assert cal.evidence("episode", 0.5) == cal.kinds[calibration.ALL].evidence(0.5)
    assert cal.evidence("fact", 0.5) == cal.kinds["fact"].evidence(0.5)
    assert cal.evidence("procedure", 0.5) == cal.kinds[calibration.ALL].evidence(0.5)  # no procedure at all


def test_evidence_is_zero_for_unrelated_and_one_for_a_piece_of_a_memory():
    scale = calibration.KindScale(null=0.2, ref=0.6, chunks=10)
    assert scale.evidence(0.2) == 0 and scale.evidence(0.6) == 1
    assert scale.evidence(0.4) == pytest.approx(0.5)
    flat = calibration.KindScale(null=0.5, ref=0.5, chunks=1)  # a degenerate scale never divides by zero
    assert flat.evidence(0.55) == pytest.approx(1.0)


def test_the_nothing_known_test_reads_evidence_not_cosines(fv):
    hits = fv.recall("who won the football world cup", k=3)
    assert list(hits) == [] and "evidence" in hits.nothing_found
    assert hits.evidence["semantic"] < fv.config.recall.min_evidence
    hits = fv.recall("which port does the database listen on", k=3)
    assert hits and hits[0].id == "db/primary"
    assert hits.evidence["semantic"] >= fv.config.recall.min_evidence


def test_a_question_naming_something_no_memory_mentions_needs_more_evidence(fv):
    hits = fv.recall("what port does the Oracle database listen on", k=3)
    assert hits.evidence["unknown_names"] == ["Oracle"]
    assert hits.evidence["penalty"] == fv.config.recall.unknown_name_penalty
    known = fv.recall("what port does the postfix relay listen on", k=3)
    assert known.evidence["unknown_names"] == [] and known.evidence["penalty"] == 0


def test_named_words_are_capitalised_words_after_the_first():
    assert named_words("What is our Oracle license count") == ["Oracle"]
    assert named_words("when did Caroline visit Paris in June") == ["Caroline", "Paris", "June"]
    assert named_words("Which VPN do we use") == []  # acronyms are written both ways
    assert named_words("what is the capital of france") == []


def test_a_quote_is_always_an_answer(fv):
    hits = fv.recall("forwards port 443 to the web servers", k=3)
    assert hits and hits[0].id == "web/lb" and hits.evidence == {"exact": True}


def test_keyword_only_recall_skips_the_test(fv):
    hits = fv.recall("who won the football world cup on port 80", k=3, mode="keyword")
    assert hits and hits.evidence is None and hits.nothing_found is None


def test_min_relevance_zero_turns_every_floor_off(fv):
    hits = fv.recall("who won the football world cup", k=3, min_relevance=0)
    assert len(hits) == 3 and hits.evidence is None


def test_an_untrusted_episode_never_outranks_trusted_text_of_the_same_relevance(fv):
    # the same words from a trusted and an untrusted source: equal relevance; the trusted line loses on importance
    # (0 against 1), which would put the untrusted one first
    text = "The nightly backup of every database runs at 02:00 UTC and is kept for thirty days."
    fv.episodes.append(text, source="user:ops", meta={"importance": 0.0})
    fv.episodes.append(text, source="web:forum.example", meta={"importance": 1.0})
    hits = [h for h in fv.recall("when do nightly backups run", k=5, min_relevance=0) if h.kind == "episode"]
    assert [h.source for h in hits[:2]] == ["user:ops", "web:forum.example"]
    assert hits[0].factors["relevance"] == pytest.approx(hits[1].factors["relevance"])


def test_the_old_cosine_floor_still_loads_and_does_nothing(vault):
    toml = vault.root / "memvault.toml"
    toml.write_text(toml.read_text().replace("[recall]\n", "[recall]\nmin_cosine = 0.388\n", 1))
    assert Vault.open(vault.root).config.recall.min_cosine == 0.388


def test_pseudo_relevance_feedback_adds_the_words_the_best_memories_share(vault, models):
    from fake_embedder import set_model

    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    for key, text in {"pg/primary": "The postgres primary db01 takes writes on port 5432.",
                      "pg/replica": "The postgres replica db02 streams from db01.",
                      "pg/backup": "Postgres backups of db01 run nightly.",
                      "disk/layout": "Disk layout of db01: the data lives on the nvme volume."}.items():
        v.facts.set(key, text)
    v.reindex()
    question = "where does the postgres primary take writes"
    before = {h.id: h.factors["relevance"] for h in v.recall(question, k=4, min_relevance=0)}
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace("prf_weight = 0.0", "prf_weight = 0.3"))
    v = Vault.open(vault.root, embedder_factory=models)
    assert v.index.expansion_terms(["The postgres replica db02 streams from db01.",
                                    "Postgres backups of db01 run nightly."], question, 5) == ["db01"]
    after = {h.id: h.factors["relevance"] for h in v.recall(question, k=4, min_relevance=0)}
    assert after["disk/layout"] > before["disk/layout"]  # it shares db01 with the best memories, not the query


def test_measuring_again_embeds_only_the_vaults_own_pieces(fv):
    embedder = fv.engine.get()
    embedder.reset_counts()
    calibration.current(fv.index, embedder, KINDS, remeasure=True)
    assert embedder.embedded == len(FACTS)  # the questions about nothing were kept with the model's identity
    assert not any(t in calibration.PROBES for t in embedder.texts)
