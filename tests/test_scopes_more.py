"""[scopes], continued: the per-source auto_accept rule (accepted at once by the rule, recorded in the commit, never
past the gate's secrets and contradictions, never outside the source's own propose paths), `used` reports and time
recall within the read scope, no existence leak from `proc show`, and the lines a refused or rerouted write prints."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from memvault import Vault
from memvault.interfaces.cli import Context, cli
from memvault.rules import config
from memvault.rules.errors import ConfigError, ScopeRefused, SecretRefused
from conftest import git
from pgserver import pg_server  # noqa: F401 - fixture
from test_index_seam_team import seed_listings, tracked_team  # noqa: F401 - fixture
from test_team import push, url  # noqa: F401 - fixture

RULES = """
[scopes."agent:deployer"]
read = ["facts/web/**", "facts/agents/deployer/**", "procedures/web/", "episodes/**"]
write = ["episodes/**"]
propose = ["facts/web/**", "facts/agents/deployer/**"]
auto_accept = ["facts/agents/deployer/**"]
"""
DB = "Our postgres primary listens on port 5432 on db01."


def add_scopes(v: Vault, text: str, trust_agents: bool = False) -> Vault:
    toml = v.root / "memvault.toml"
    body = toml.read_text()
    if trust_agents:
        body = body.replace('trusted = ["user:*"]', 'trusted = ["user:*", "agent:*"]')
    toml.write_text(body + text)
    git(v.root, "commit", "-qm", "scopes", "--", "memvault.toml")
    return Vault.open(v.root)


@pytest.fixture
def ruled(strict_vault, tmp_path):
    v = add_scopes(strict_vault, RULES)
    v.facts.set("web/nginx", "nginx on web01 serves the shop.", source="user:admin")
    v.facts.set("db/main", DB, source="user:admin")
    v.facts.set("agents/deployer/db", DB, source="user:admin")
    for name in ("web/reload", "db/restore"):
        script = tmp_path / (name.replace("/", "-") + ".sh")
        script.write_text("#!/bin/sh\necho " + name + "\n")
        script.chmod(0o755)
        v.procedures.add(name, script, source="user:admin")
    return v


def run(v, *args, source=None):
    env = {"MEMVAULT_SOURCE": source} if source else {}
    return CliRunner().invoke(cli, ["--vault", str(v.root), *args], obj=Context(), env=env)


# ------------------------------------------------------------------------------------------- auto_accept
def test_a_proposal_under_the_auto_accept_paths_is_accepted_by_the_rule_and_the_commit_says_so(ruled):
    v = ruled
    out = run(v, "fact", "set", "agents/deployer/last", "The last deploy shipped build 812 to web01.",
              "--source", "agent:deployer", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["quarantined"] is False and data["auto_accepted"] == "facts/agents/deployer/**"
    assert (v.root / "facts/agents/deployer/last.md").is_file()
    assert not (v.root / "inbox/agents/deployer/last.md").exists()
    body = git(v.root, "log", "-1", "--format=%B")
    assert 'Memvault-Auto-Accept: memvault.toml [scopes."agent:deployer"] auto_accept "facts/agents/deployer/**"' \
        in body and "Memvault-Source: agent:deployer" in body
    assert Vault.open(v.root).facts.store.get("agents/deployer/last").source == "agent:deployer"
    text = run(v, "fact", "set", "agents/deployer/prev", "The deploy before shipped build 811.",
               "--source", "agent:deployer")
    assert text.exit_code == 0 and "accepted by the auto_accept rule" in text.output
    # outside auto_accept but inside propose: a proposal, as before
    out = run(v, "fact", "set", "web/tls", "TLS certificates on web01 renew on the 1st.", "--source",
              "agent:deployer", "--json")
    assert json.loads(out.stdout)["quarantined"] is True and (v.root / "inbox/web/tls.md").is_file()


def test_the_rule_never_passes_a_contradiction_or_a_secret(ruled):
    v = ruled
    head = git(v.root, "rev-parse", "HEAD")
    out = run(v, "fact", "set", "agents/deployer/pg", "Our postgres primary runs on port 5433.",
              "--source", "agent:deployer", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["quarantined"] is True and data["auto_accepted"] is None
    assert any("not accepted by the auto_accept rule" in w and "agents/deployer/db" in w for w in data["warnings"])
    assert git(v.root, "rev-parse", "HEAD") == head and not (v.root / "facts/agents/deployer/pg.md").exists()
    inbox = json.loads(run(v, "inbox", "--json", source="user:admin").stdout)
    flagged = {p["key"]: [c["key"] for c in p["contradicts"]] for p in inbox}
    assert "agents/deployer/db" in flagged["agents/deployer/pg"]
    with pytest.raises(SecretRefused):
        v.facts.set("agents/deployer/aws", "deploy key AKIAIOSFODNN7EXAMPLE secret "
                    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", source="agent:deployer")
    assert git(v.root, "rev-parse", "HEAD") == head and not (v.root / "facts/agents/deployer/aws.md").exists()
    assert not (v.root / "inbox/agents/deployer/aws.md").exists()
    # an explicit proposal (ingest's conflict bucket) is never taken by the rule
    fact = v.gate.set_fact("agents/deployer/x", "Deploys run at noon.", source="agent:deployer", propose=True)
    assert fact.quarantined


def test_the_rule_applies_to_its_own_source_only(ruled):
    v = ruled
    out = run(v, "fact", "set", "agents/deployer/other", "Someone else writing here.", "--source", "agent:intern",
              "--json")
    assert json.loads(out.stdout)["quarantined"] is True


@pytest.mark.parametrize("table, words", [
    ('propose = ["facts/web/**"]\nauto_accept = ["facts/db/main/**"]', ["within its propose", "facts/db/main/**"]),
    ('propose = ["facts/**"]\nauto_accept = ["facts/**"]', ["too wide", "facts/**"]),
    ('propose = ["**"]\nauto_accept = ["**"]', ["too wide"]),
    ('propose = ["facts/*/**"]\nauto_accept = ["facts/*/**"]', ["too wide"]),
    ('propose = ["episodes/a/**"]\nauto_accept = ["episodes/a/**"]', ["facts/"]),
    ('propose = ["facts/a/**"]\nauto_acept = ["facts/a/**"]', ["did you mean 'auto_accept'"]),
])
def test_auto_accept_limits_are_one_line_naming_memvault_toml(tmp_path, table, words):
    (tmp_path / "memvault.toml").write_text(f'[scopes."agent:x"]\n{table}\n')
    with pytest.raises(ConfigError) as err:
        config.load(tmp_path / "memvault.toml")
    message = str(err.value)
    assert "memvault.toml" in message and "\n" not in message and all(w in message for w in words), message


def test_a_wildcard_source_may_not_auto_accept(tmp_path):
    (tmp_path / "memvault.toml").write_text('[scopes."agent:*"]\npropose = ["facts/agents/x/**"]\n'
                                            'auto_accept = ["facts/agents/x/**"]\n')
    with pytest.raises(ConfigError, match="names one source"):
        config.load(tmp_path / "memvault.toml")


def test_a_narrower_auto_accept_inside_propose_loads(tmp_path):
    (tmp_path / "memvault.toml").write_text('[scopes."agent:x"]\npropose = ["facts/agents/x/**"]\n'
                                            'auto_accept = ["facts/agents/x/runs/**", "facts/agents/x/"]\n')
    scope = config.load(tmp_path / "memvault.toml").scopes.for_source("agent:x")
    assert scope.auto_accept == ("facts/agents/x/runs/**", "facts/agents/x/")


def test_scopes_shows_the_rule(ruled):
    shown = json.loads(run(ruled, "scopes", "--json").stdout)
    assert shown["scopes"][0]["auto_accept"] == ["facts/agents/deployer/**"]
    assert "auto_accept" in shown["scopes"][0] and "auto_accept facts/agents/deployer/**" in \
        " ".join(run(ruled, "scopes").output.split())


# ------------------------------------------------------------------------------------------- fact set lines
def test_a_trusted_scoped_source_is_told_why_its_write_became_a_proposal(strict_vault):
    v = add_scopes(strict_vault, '[scopes."agent:deployer"]\nread = ["facts/**"]\nwrite = ["episodes/**"]\n'
                                 'propose = ["facts/web/**"]\n', trust_agents=True)
    out = run(v, "fact", "set", "web/tls", "TLS renews on the 1st.", "--source", "agent:deployer")
    assert out.exit_code == 0, out.output
    assert "outside its write scope" in out.output and "inside its propose scope" in out.output
    assert "not a trusted source" not in out.output
    out = run(v, "fact", "set", "web/cdn", "The CDN caches a day.", "--source", "agent:stranger")
    assert out.exit_code == 0 and "proposed" not in out.output  # trusted and unscoped: written


# ------------------------------------------------------------------------------------------- review
def test_a_trusted_unscoped_agent_may_not_review_and_is_told_how_to_grant_it(strict_vault):
    v = add_scopes(strict_vault, '[scopes."agent:reviewer"]\nreview = ["facts/web/**"]\n', trust_agents=True)
    v.facts.set("web/cdn", "The CDN caches a day.", source="web:form")
    out = run(v, "accept", "web/cdn", "--source", "agent:helper")
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1
    assert "review" in out.output and "memvault.toml" in out.output and '[scopes."agent:helper"]' in out.output
    assert (v.root / "inbox/web/cdn.md").is_file()
    with pytest.raises(ScopeRefused, match="review = "):
        v.facts.reject("web/cdn", source="agent:helper")
    assert v.facts.accept("web/cdn", source="user:admin").key == "web/cdn"


# ------------------------------------------------------------------------------------------- proc show
def test_proc_show_outside_the_scope_says_the_same_whether_it_exists_or_not(ruled):
    there = run(ruled, "proc", "show", "db/restore", source="agent:deployer")
    missing = run(ruled, "proc", "show", "db/nothing", source="agent:deployer")
    assert there.exit_code == missing.exit_code == 1
    assert there.output.replace("db/restore", "NAME") == missing.output.replace("db/nothing", "NAME")
    assert "outside its read scope" in there.output and ".sh" not in there.output
    assert run(ruled, "proc", "show", "web/reload", source="agent:deployer").exit_code == 0


# ------------------------------------------------------------------------------------------- used
def test_used_counts_nothing_outside_the_read_scope_and_says_the_same_as_for_nothing(ruled):
    v = ruled
    counted = v.used(["fact:db/main", "fact:db/nothing", "fact:web/nginx", "procedure:db/restore"],
                     source="agent:deployer")
    assert list(counted) == [("fact", "web/nginx")]
    shown = [w.split(":", 2)[-1] for w in counted.warnings]
    assert len(shown) == 3 and len(set(shown)) == 1, counted.warnings
    uses = Vault.open(v.root).state.get([("fact", "db/main"), ("procedure", "db/restore")])
    assert not any(u.uses for u in uses.values())
    out = run(v, "used", "fact:db/main", "agents/deployer/db", source="agent:deployer")  # once a day each
    assert out.exit_code == 0 and "counted 1 of 2" in out.output and "5432" not in out.output
    # an unscoped source counts as before
    assert list(v.used(["fact:db/main"], source="user:admin")) == [("fact", "db/main")]


# ------------------------------------------------------------------------------------------- time recall
def test_what_happened_today_gives_a_scoped_source_k_episodes_when_there_are_k(strict_vault, monkeypatch):
    v = strict_vault
    toml = v.root / "memvault.toml"
    toml.write_text(toml.read_text().replace("track_in_git = false", "track_in_git = true")
                    + '\n[scopes."agent:deployer"]\nread = ["episodes/alpha/**"]\n')
    git(v.root, "commit", "-qm", "scopes", "--", "memvault.toml")
    for host in ("alpha", "beta"):
        monkeypatch.setenv("MEMVAULT_HOST", host)
        log = Vault.open(v.root)
        for i in range(5):
            log.episodes.append(f"{host} did step {i}", source="user:admin")
    v = Vault.open(v.root)
    assert {p.parent.name for p in v.episodes.files()} == {"alpha", "beta"}
    hits = v.recall("what happened today", k=3, kinds=["episode"], source="agent:deployer", log=False)
    assert len(hits) == 3 and all(h.path.startswith("episodes/alpha/") for h in hits), [h.path for h in hits]
    wide = v.recall("what happened today", k=3, kinds=["episode"], source="user:admin", log=False)
    assert all("beta" in h.text for h in wide)  # the newest are beta's: the scoped one had to look further


# ------------------------------------------------------------------------------------------- a team's listings
def test_a_team_hosts_listings_hold_only_what_a_scoped_reader_may_read(tracked_team, tmp_path):
    _remote, a, clone = tracked_team
    seed_listings(a, tmp_path)
    push(a)
    a.vault.reindex()
    b = clone()
    toml = b.root / "memvault.toml"
    toml.write_text(toml.read_text() + '\n[scopes."agent:net"]\nread = ["facts/net/**"]\n')
    b.reopen()
    assert b.vault.browse.facts()[1] == 5  # the whole vault for the person
    b.vault.act_as("agent:net")
    browse = b.vault.browse
    facts, total = browse.facts()
    assert b.vault.index.shared_in_use and not b.vault.index.fallback.exists()
    assert [f.key for f in facts] == ["net/vpn"] and total == 1
    assert browse.counts()["kinds"] == {"fact": 1, "episode": 0, "procedure": 0}
    assert dict(browse.tags()) == {"vpn": 1, "net": 1}
    assert [e["name"] for e in browse.fact_tree()] == ["net"] and browse.fact_tree("db") == []
    assert browse.episodes() == [] and browse.sessions() == [] and browse.episode_days() == []
    assert browse.runs("db/rotate-logs") == [] and browse.episode_kinds() == [] and browse.stale_count() == 0


# ------------------------------------------------------------------------------------------- no key outside, named
def test_what_a_write_is_told_names_no_fact_outside_the_read_scope(ruled):
    v = ruled
    v.facts.delete("agents/deployer/db", source="user:admin")  # the one copy of the db fact it may read
    out = run(v, "fact", "set", "web/pg", "Our postgres primary runs on port 5433 on db01.", "--source",
              "agent:deployer", "--json")
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["quarantined"] and data["similar"] == []
    assert "db/main" not in out.output and "5432" not in out.output
    assert any("outside its read scope" in w for w in data["warnings"]), data["warnings"]
    inbox = json.loads(run(v, "inbox", "--json", source="agent:deployer").stdout)
    shown = json.dumps([p for p in inbox if p["key"] == "web/pg"])
    assert "web/pg" in shown and "db/main" not in shown and "5432" not in shown
    assert "db/main" in json.dumps(json.loads(run(v, "inbox", "--json", source="user:admin").stdout))
    line = json.dumps({"type": "fact", "key": "web/pg2", "text": "Our postgres primary runs on port 5433 on db01."})
    out = CliRunner().invoke(cli, ["--vault", str(v.root), "ingest", "--json", "-", "--source", "agent:deployer"],
                             input=line + "\n", obj=Context())
    assert out.exit_code == 0, out.output
    assert "db/main" not in out.output and "5432" not in out.output and "outside its read scope" in out.output


# ------------------------------------------------------------------------------------------- accepted is vouched for
def test_a_fact_a_person_accepted_is_recalled_trusted_until_someone_else_changes_it(ruled):
    """`memvault accept` is a person's review, but recall still fenced the accepted fact as "from a source outside
    [trust]: an unverified claim" for good (its source stays the proposer's). The acceptance is now recorded in the
    fact (`accepted_by`, written by accept alone) and vouches for that text: a later change by an untrusted source
    (an auto_accept rule's, or a proposal's own `accepted_by`) drops it, and only a trusted acceptor counts."""
    v = ruled
    proposed = v.facts.set("ops/cache", "Sessions are cached in Redis on cache01.", source="agent:bot")
    assert proposed.quarantined
    v.facts.accept("ops/cache", source="user:alice")
    fact = Vault.open(v.root).facts.get("ops/cache")
    assert fact.source == "agent:bot" and fact.extra.get("accepted_by") == "user:alice"

    def trusted(query, key):
        hits = Vault.open(v.root).recall(query, mode="keyword", record_access=False)
        [hit] = [h for h in hits if h.id == key]
        return hit.extra["trusted"]

    assert trusted("sessions cached Redis", "ops/cache") is True
    prompt = run(v, "recall", "sessions cached Redis", "--mode", "keyword", "--format", "prompt", "--no-record")
    assert "untrusted-data" not in prompt.stdout.split('key="ops/cache"')[1].split("</fact>")[0]

    # An auto_accept rule writes straight to facts/: neither its own claim of acceptance nor an earlier one holds.
    v.facts.set("agents/deployer/tip", "Deploy on Tuesdays.", source="user:alice")
    done = Vault.open(v.root).gate.set_fact("agents/deployer/tip", "Deploy on any day.", source="agent:deployer",
                                              extra={"accepted_by": "user:alice"})
    assert done.auto_accepted and "accepted_by" not in done.extra
    assert trusted("Deploy any day", "agents/deployer/tip") is False
