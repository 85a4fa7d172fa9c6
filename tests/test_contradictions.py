"""Contradictions in other words (issue 25, item 3): a fact about the same thing with another value is flagged with
the key it contradicts, wherever a fact comes in (inbox, fact set, ingest, import, web inbox); accepting it records
what it supersedes, and recall shows the current value unless asked for the superseded one."""
from __future__ import annotations

import json

import pytest

from memvault import Vault
from memvault.rules.contradict import compare

from web_fixtures import web_client

DB_MAIN = "The primary PostgreSQL listens on port 5432 on db01."
PORT_5433 = "our postgres primary runs on port 5433"
LOG_ROTATION = "logrotate keeps 14 days of nginx access logs, rotated daily at 00:00 and compressed after a day"


def _inbox(invoke) -> dict[str, dict]:
    r = invoke("inbox", "--json")
    assert r.exit_code == 0, r.output
    return {p["key"]: p for p in json.loads(r.stdout)}


def _propose_both(vault: Vault) -> None:
    vault.facts.set("db/main", DB_MAIN, source="user:ops")
    vault.reindex()
    assert vault.facts.set("infra/pg-port", PORT_5433, source="agent:ops").quarantined
    assert vault.facts.set("ops/log-rotation", LOG_ROTATION, source="agent:ops").quarantined


def _check_inbox(invoke) -> None:
    proposals = _inbox(invoke)
    assert proposals["infra/pg-port"]["contradicts"] == [
        {"key": "db/main", "values": {"port": {"new": ["5433"], "stored": ["5432"]}}}]
    assert proposals["ops/log-rotation"]["contradicts"] == []
    text = invoke("inbox").stdout
    assert "contradicts db/main: port 5433 where it says 5432" in text
    assert text.count("contradicts") == 1


def test_port_5433_under_another_key_is_flagged_in_inbox_fake_embedder(models, strict_vault, runner):
    from memvault.interfaces.cli import Context, cli

    _propose_both(strict_vault)
    assert strict_vault.index.identity() is not None  # the fake model's vectors: neighbours come from them too

    def invoke(*args):
        return runner.invoke(cli, ["--vault", str(strict_vault.root), *args], obj=Context(embedder_factory=models))

    _check_inbox(invoke)


@pytest.mark.model
def test_port_5433_under_another_key_is_flagged_in_inbox_packaged_model(tmp_path, runner):
    from memvault.interfaces.cli import cli

    vault = Vault.init(tmp_path / "v", model="all-MiniLM-L6-v2")
    _propose_both(vault)
    assert vault.index.identity() is not None and "MiniLM" in vault.index.identity().name

    def invoke(*args):
        return runner.invoke(cli, ["--vault", str(vault.root), *args])

    _check_inbox(invoke)


def test_without_an_index_the_files_are_read(strict_vault, invoke):
    strict_vault.facts.set("db/main", DB_MAIN, source="user:ops")
    strict_vault.facts.set("infra/pg-port", PORT_5433, source="agent:ops")
    r = invoke("inbox", "--json", vault_path=strict_vault.root)
    assert json.loads(r.stdout)[0]["contradicts"][0]["key"] == "db/main"


def test_fact_set_says_what_it_contradicts(vault, invoke):
    vault.facts.set("db/main", DB_MAIN, source="user:ops")
    r = invoke("fact", "set", "infra/pg-port", PORT_5433, "--source", "user:ops")
    assert r.exit_code == 0
    assert "conflicts with db/main" in r.stderr and "port 5433 where it says 5432" in r.stderr
    quiet = invoke("fact", "set", "ops/log-rotation", LOG_ROTATION, "--source", "user:ops")
    assert quiet.exit_code == 0 and "conflicts" not in quiet.stderr
    data = json.loads(invoke("fact", "set", "infra/pg-port2", PORT_5433, "--json").stdout)
    conflicts = [(m["key"], m["values"]) for m in data["similar"] if m["kind"] == "conflict"]
    assert conflicts == [("db/main", {"port": {"new": ["5433"], "stored": ["5432"]}})]


def test_ingest_report_names_the_contradicted_key(vault):
    vault.facts.set("db/main", DB_MAIN, source="user:ops")
    lines = [json.dumps({"type": "fact", "key": "infra/pg-port", "text": PORT_5433}),
             json.dumps({"type": "fact", "key": "ops/log-rotation", "text": LOG_ROTATION})]
    report = vault.ingest(lines, source="agent:extractor")
    assert [(c["key"], c["with"]) for c in report.conflicts] == [("infra/pg-port", "db/main")]
    assert [a["key"] for a in report.added] == ["ops/log-rotation"]
    assert vault.facts.get("db/main").text == DB_MAIN  # the stored side is untouched


def test_an_imported_mem0_memory_is_flagged(strict_vault, tmp_path, invoke):
    strict_vault.facts.set("db/main", DB_MAIN, source="user:ops")
    export = tmp_path / "mem0.json"
    export.write_text(json.dumps({"count": 2, "results": [
        {"id": "1", "memory": "Our postgres primary runs on port 5433", "user_id": "ops",
         "created_at": "2025-01-01T00:00:00Z"},
        {"id": "2", "memory": LOG_ROTATION, "user_id": "ops", "created_at": "2025-01-01T00:00:00Z"}]}))
    r = invoke("import", "mem0", str(export), "--json", vault_path=strict_vault.root)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert [c["with"] for c in report["conflicts"]] == ["db/main"]
    assert len(report["proposed"]) == 1


def test_web_inbox_shows_the_contradiction(strict_vault):
    strict_vault.facts.set("db/main", DB_MAIN, source="user:ops")
    strict_vault.facts.set("infra/pg-port", PORT_5433, source="agent:ops")
    strict_vault.facts.set("ops/log-rotation", LOG_ROTATION, source="agent:ops")
    client = web_client(strict_vault)
    try:
        data = {p["key"]: p for p in client.get("/inbox?format=json").json()["proposals"]}
        assert data["infra/pg-port"]["contradicts"][0]["key"] == "db/main"
        assert data["ops/log-rotation"]["contradicts"] == []
        assert "contradicts fact db/main: port 5433 where it says 5432" in client.get("/inbox").text
    finally:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("new, stored, flagged", [
    (PORT_5433, DB_MAIN, True),
    ("after the failover the postgres primary is db03", DB_MAIN, True),
    ("postgres primary is reachable on db01, port 5432", DB_MAIN, False),      # agrees
    ("the postgres replica listens on port 5433 on db02", DB_MAIN, False),     # another thing: the replica
    ("web2 serves 10.8.0.12 behind the load balancer.", "web1 serves 10.8.0.11 behind the load balancer.", False),
    ("grafana moved from mon01 to mon02", "Grafana runs on mon01.", True),      # the old value named is not news
    (LOG_ROTATION, DB_MAIN, False),
])
def test_the_rule_on_a_few_pairs(new, stored, flagged):
    verdict = compare(new, stored, stored_key="db/main")
    assert (verdict is not None and verdict.kind == "contradicts") is flagged


def test_accepting_records_what_it_supersedes_and_recall_hides_the_old_value(strict_vault, invoke):
    from conftest import git

    strict_vault.facts.set("db/main", DB_MAIN, source="user:ops")
    strict_vault.facts.set("infra/pg-port", PORT_5433, source="agent:ops")
    r = invoke("accept", "infra/pg-port", "--source", "user:ops", vault_path=strict_vault.root)
    assert r.exit_code == 0, r.output
    assert "supersedes db/main" in r.stderr
    accepted = strict_vault.facts.get("infra/pg-port")
    assert accepted.extra["supersedes"] == "db/main"
    assert strict_vault.facts.get("db/main").extra["superseded_by"] == "infra/pg-port"
    message = git(strict_vault.root, "log", "-1", "--format=%B")
    assert "Memvault-Supersedes: db/main" in message
    assert git(strict_vault.root, "show", "--stat", "--format=", "HEAD").count("facts/") == 2  # one commit, both

    hits = json.loads(invoke("recall", "postgres primary port", "--json", vault_path=strict_vault.root).stdout)
    ids = [h["id"] for h in hits["hits"]]
    assert "infra/pg-port" in ids and "db/main" not in ids
    both = json.loads(invoke("recall", "postgres primary port", "--json", "--include-superseded",
                             vault_path=strict_vault.root).stdout)
    old = next(h for h in both["hits"] if h["id"] == "db/main")
    assert old["superseded_by"] == "infra/pg-port"
    # the superseded fact no longer counts as a contradiction of what replaced it
    again = strict_vault.facts.set("infra/pg-port-2", "the postgres primary is on port 5433", source="agent:ops")
    assert [m["key"] for m in again.similar if m["kind"] == "conflict"] == []


def test_an_unrelated_accept_supersedes_nothing(strict_vault):
    strict_vault.facts.set("db/main", DB_MAIN, source="user:ops")
    strict_vault.facts.set("ops/log-rotation", LOG_ROTATION, source="agent:ops")
    fact = strict_vault.facts.accept("ops/log-rotation", source="user:ops")
    assert "supersedes" not in fact.extra and "superseded_by" not in strict_vault.facts.get("db/main").extra


def test_the_inbox_reads_each_stored_fact_once_not_once_per_proposal(strict_vault, models, runner, monkeypatch):
    """`memvault inbox` judged every proposal against its candidates by reading each candidate's text again: 129
    proposals over 200 facts read 4,665 texts for contradictions and 6,573 for duplicates (8 s of a 10 s listing).
    Each text is read once per listing now, whichever proposals share it as a candidate."""
    from memvault.interfaces.cli import Context, cli
    from memvault.rules import contradict, dedup

    run = uuid_token()
    hosts = [f"db{n:02d}" for n in range(12)]
    for n, host in enumerate(hosts):
        strict_vault.facts.set(f"db/{host}", f"The {run} PostgreSQL replica {host} listens on port {5400 + n}.",
                               source="user:ops")
    strict_vault.reindex()
    for n, host in enumerate(hosts[:8]):
        assert strict_vault.facts.set(f"infra/{host}-port", f"our {run} postgres replica {host} runs on port "
                                      f"{6400 + n}", source="agent:ops").quarantined
    read: list[str] = []
    real_extract, real_keywords = contradict.extract, dedup.keywords
    monkeypatch.setattr(contradict, "extract", lambda text, key=None: read.append(text) or real_extract(text, key))
    monkeypatch.setattr(dedup, "keywords", lambda text: read.append(text) or real_keywords(text))
    r = runner.invoke(cli, ["--vault", str(strict_vault.root), "inbox", "--json"],
                      obj=Context(embedder_factory=models))
    assert r.exit_code == 0, r.output
    assert sum(1 for p in json.loads(r.stdout) if p["contradicts"]) == 8  # each still flagged
    # each proposal's own text twice (contradictions, duplicates), each stored fact's at most twice in all
    assert len(read) <= 2 * (8 + len(hosts)), len(read)


def uuid_token() -> str:
    """A word no other test's texts hold (what a test reads is then its own)."""
    import uuid

    return "x" + uuid.uuid4().hex[:8]


def test_a_fact_whose_superseder_was_removed_is_recalled_again(strict_vault, invoke):
    """A fact superseded by an accepted proposal stayed hidden from every recall after that proposal's fact was
    removed (`fact rm`, expire, a hand delete): its superseded_by named a fact that no longer was, and nothing
    stood for it. It is hidden only while the fact that superseded it is there."""
    strict_vault.facts.set("db/main", DB_MAIN, source="user:ops")
    strict_vault.facts.set("infra/pg-port", PORT_5433, source="agent:ops")
    strict_vault.facts.accept("infra/pg-port", source="user:ops")
    assert strict_vault.facts.get("db/main").extra["superseded_by"] == "infra/pg-port"
    strict_vault.facts.delete("infra/pg-port", source="user:ops")
    hits = json.loads(invoke("recall", "postgres primary port", "--json", vault_path=strict_vault.root).stdout)
    assert "db/main" in [h["id"] for h in hits["hits"]], hits
    assert "superseded_by" not in next(h for h in hits["hits"] if h["id"] == "db/main")


def test_a_dedup_merge_hands_what_a_merged_fact_superseded_to_the_fact_it_is_merged_into(strict_vault, invoke):
    """`dedup --apply` removed the accepted fact that superseded db/main (merged into its duplicate): db/main then
    named a fact that was gone. The survivor supersedes it now, in the merge's commit, and db/main stays hidden."""
    strict_vault.facts.set("db/main", DB_MAIN, source="user:ops")
    strict_vault.facts.set("infra/pg-port", PORT_5433, source="agent:ops")
    strict_vault.facts.accept("infra/pg-port", source="user:ops")
    strict_vault.facts.set("infra/pg-port-2", PORT_5433, source="user:ops")  # the same words: the merge keeps this
    r = invoke("dedup", "--apply", vault_path=strict_vault.root)
    assert r.exit_code == 0 and "merged infra/pg-port into infra/pg-port-2" in r.stdout, r.output
    assert not strict_vault.facts.exists("infra/pg-port")
    assert strict_vault.facts.get("db/main").extra["superseded_by"] == "infra/pg-port-2"
    assert strict_vault.facts.get("infra/pg-port-2").extra["supersedes"] == "db/main"
    hits = json.loads(invoke("recall", "postgres primary port", "--json", vault_path=strict_vault.root).stdout)
    assert [h["id"] for h in hits["hits"]] == ["infra/pg-port-2"], hits
