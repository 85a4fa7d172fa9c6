"""[scopes]: a scoped source reads, writes and proposes exactly as its scope says, through the CLI and the MCP
server (the facade enforces it once); no source accepts or rejects its own proposal, an agent only with a review
scope, a person can; a source without a scope behaves as before."""
from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from memvault import Vault
from memvault.interfaces.cli import Context, cli
from memvault.rules import config
from memvault.rules.errors import ConfigError, ScopeRefused
from memvault.rules.scopes import matches
from conftest import git, with_settings

SCOPES = """
[scopes."agent:deployer"]
read = ["facts/web/**", "procedures/web/", "episodes/**"]
write = ["episodes/**"]
propose = ["facts/web/**"]
review = []

[scopes."agent:reviewer"]
read = ["facts/**"]
review = ["facts/web/**"]
"""
SECRET_DB = "The db admin password rotates on Fridays; primary db01 listens on port 5432."


@pytest.fixture
def team(strict_vault, tmp_path):
    v = with_settings(strict_vault, SCOPES, "scopes")
    v.facts.set("web/nginx", "nginx on web01 serves the shop and reloads with the web reload runbook.",
                tags=["shop"], source="user:admin")
    v.facts.set("db/main", SECRET_DB, tags=["shop"], source="user:admin")
    for name, body in (("web/reload", "# reload nginx on web01\nnginx -s reload\n"),
                       ("db/restore", "# restore the db01 primary from the nightly dump\npg_restore\n")):
        script = tmp_path / (name.replace("/", "-") + ".sh")
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
        v.procedures.add(name, script, source="user:admin")
    v.episodes.append("deployed the shop to web01", source="user:admin")
    return v


def run(v, *args, source=None):
    env = {"MEMVAULT_SOURCE": source} if source else {}
    return CliRunner().invoke(cli, ["--vault", str(v.root), *args], obj=Context(), env=env)


def test_patterns_and_config_errors(tmp_path):
    assert matches("facts/web/**", "facts/web/a/nginx.md") and matches("facts/web/", "facts/web/nginx.md")
    assert not matches("facts/web/**", "facts/webby/x.md") and not matches("facts/*.md", "facts/web/x.md")
    for text, words in (('[scopes."agent:x"]\nread = ["fact/web/**"]\n', ["memvault.toml", "fact/web/**", "facts/"]),
                        ('[scopes."agent:x"]\nreed = []\n', ["memvault.toml", "did you mean 'read'"]),
                        ('[scopes."agent:x"]\nread = "facts/**"\n', ["memvault.toml", "list of path patterns"]),
                        ('[scopes."agent:x"]\nwrite = ["../etc/**"]\n', ["memvault.toml", "'..'"]),
                        # `memvault scopes` printed this as a second right and a forged scope for agent:y.
                        ('[scopes."agent:x"]\nread = ["facts/x\\n  write       facts/all\\nagent:y:"]\n',
                         ["memvault.toml", "control character"]),
                        ('[scopes."agent:x"]\nread = ["facts/\\u001b[2Kx"]\n', ["memvault.toml", "control character"])):
        (tmp_path / "memvault.toml").write_text(text)
        with pytest.raises(ConfigError) as err:
            config.load(tmp_path / "memvault.toml")
        assert all(w in str(err.value) for w in words) and "\n" not in str(err.value)


def test_a_scope_of_thousands_of_patterns_is_refused_and_many_match_as_one(tmp_path):
    """A pushed scope of 10,000 read patterns (179 KB, well under the 1 MiB file limit) thrashed the pattern cache:
    a recall by the scoped agent over 300 facts took 32 s instead of 1 s. The count is bounded and named, and a
    scope's patterns of one right are matched as one expression."""
    from memvault.rules import scopes as scopes_mod

    many = ", ".join(f'"facts/p{i}/**"' for i in range(scopes_mod.MAX_PATTERNS + 1))
    (tmp_path / "memvault.toml").write_text(f'[scopes."agent:x"]\nread = [{many}]\n')
    with pytest.raises(ConfigError) as err:
        config.load(tmp_path / "memvault.toml")
    assert '[scopes."agent:x"] read' in str(err.value) and f"at most {scopes_mod.MAX_PATTERNS}" in str(err.value)
    pats = tuple(f"facts/p{i}/**" for i in range(scopes_mod.MAX_PATTERNS)) + ("procedures/web", "facts/*.md")
    scope = scopes_mod.Scope("agent:x", read=pats)
    for path in ("facts/p7/a.md", "facts/p999/x/y.md", "procedures/web", "procedures/web/a.md", "facts/top.md"):
        assert scope.may("read", path) == any(matches(p, path) for p in pats) is True
    for path in ("facts/p7", "facts/p1000/a.md", "procedures/webby.md", "facts/a/b.md", "facts/p7/../../x.md"):
        assert scope.may("read", path) == any(matches(p, path) for p in pats) is False
    before = scopes_mod._regex.cache_info().misses
    for i in range(300):
        scope.may("read", f"facts/q{i}.md")
    assert scopes_mod._regex.cache_info().misses == before  # no pattern compiled again per path


def test_a_scoped_agent_through_the_cli(team):
    v = team
    # recall: nothing outside its read paths, neither shown nor counted
    out = run(v, "recall", "db01 primary port reload nginx", "--mode", "keyword", "--json", "-k", "20", source="agent:deployer")
    assert out.exit_code == 0, out.output
    hits = json.loads(out.stdout)["hits"]
    assert hits and all(h["path"].startswith(("facts/web/", "procedures/web/", "episodes/")) for h in hits)
    assert "5432" not in out.output and "db/restore" not in out.output
    # fact get of an outside key: refused, one line, no text (and the same for a key that does not exist)
    for key in ("db/main", "db/nothing-here"):
        out = run(v, "fact", "get", key, "--source", "agent:deployer")
        assert out.exit_code == 1 and "outside its read scope" in out.output and "5432" not in out.output
        assert len(out.output.strip().splitlines()) == 1
    assert run(v, "fact", "get", "web/nginx", source="agent:deployer").exit_code == 0
    listed = json.loads(run(v, "fact", "list", "--json", source="agent:deployer").stdout)
    assert [f["key"] for f in listed] == ["web/nginx"]
    assert [p["name"] for p in json.loads(run(v, "proc", "list", "--json", source="agent:deployer").stdout)] \
        == ["web/reload"]
    assert run(v, "proc", "show", "db/restore", source="agent:deployer").exit_code == 1
    # writes: an episode, a proposal under facts/web/, a refusal under facts/db/ with nothing written
    assert run(v, "episode", "add", "reloaded nginx on web01", "--source", "agent:deployer").exit_code == 0
    out = run(v, "fact", "set", "web/tls", "TLS certificates on web01 renew on the 1st.", "--source",
              "agent:deployer", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["quarantined"] is True and (v.root / "inbox" / "web" / "tls.md").is_file()
    head = git(v.root, "rev-parse", "HEAD")
    out = run(v, "fact", "set", "db/main", "db01 listens on 6543 now.", "--source", "agent:deployer")
    assert out.exit_code == 1 and "outside its write and propose scopes" in out.output
    assert len(out.output.strip().splitlines()) == 1
    assert git(v.root, "rev-parse", "HEAD") == head and not (v.root / "inbox" / "db").exists()
    assert Vault.open(v.root).facts.store.get("db/main").text == SECRET_DB
    out = run(v, "prune", source="agent:deployer")  # a whole-vault operation: no path, refused
    assert out.exit_code == 1 and "scoped source" in out.output
    # no self-approval; a person can
    out = run(v, "accept", "web/tls", "--source", "agent:deployer")
    assert out.exit_code == 1 and "its own proposal" in out.output
    assert run(v, "reject", "web/tls", source="agent:deployer").exit_code == 1
    out = run(v, "accept", "web/tls", "--source", "agent:other")  # an agent without a scope: [trust] says no
    assert out.exit_code == 1 and "not trusted" in out.output
    inbox = json.loads(run(v, "inbox", "--json", source="user:admin").stdout)
    assert [(p["key"], p["source"]) for p in inbox] == [("web/tls", "agent:deployer")]
    assert inbox[0]["age_seconds"] >= 0 and inbox[0]["age"].endswith(("s", "m"))
    text = run(v, "inbox", source="user:admin").output
    assert "from agent:deployer (1 proposal):" in text and " old " in text
    out = run(v, "accept", "web/tls", "--source", "user:admin")
    assert out.exit_code == 0, out.output
    assert Vault.open(v.root).facts.store.get("web/tls").source == "agent:deployer"
    # `memvault scopes`: who may do what
    shown = json.loads(run(v, "scopes", "--json").stdout)
    assert shown["scopes"][0] == {"source": "agent:deployer", "read": ["facts/web/**", "procedures/web/",
                                  "episodes/**"], "write": ["episodes/**"], "propose": ["facts/web/**"], "review": [],
                                  "auto_accept": []}
    assert "agent:reviewer:" in run(v, "scopes").output


def test_an_agent_with_a_review_scope_reviews_there_only(team):
    v = team
    v.facts.set("web/cdn", "The CDN caches /static for a day.", source="agent:deployer")
    v.facts.set("db/pool", "The pool holds 50 connections.", source="agent:intern")
    assert v.facts.accept("web/cdn", source="agent:reviewer").key == "web/cdn"
    with pytest.raises(ScopeRefused, match="no review scope"):
        v.facts.reject("db/pool", source="agent:reviewer")
    assert v.facts.reject("db/pool", source="user:admin")


def test_an_unscoped_source_behaves_as_before(team):
    v = team
    out = run(v, "recall", "db01 primary port", "--mode", "keyword", "--json", source="agent:helper")
    assert "5432" in out.output
    assert "5432" in run(v, "fact", "get", "db/main", source="agent:helper").output
    out = run(v, "fact", "set", "db/pool", "The pool holds 50 connections.", "--source", "agent:helper", "--json")
    assert json.loads(out.stdout)["quarantined"] is True  # untrusted: a proposal, as [trust] always said
    assert run(v, "fact", "set", "db/pool2", "x", "--source", "user:admin").exit_code == 0


def test_session_start_context_holds_nothing_outside_the_read_scope(team, tmp_path):
    from memvault.interfaces.agents.context import build

    project = tmp_path / "src" / "shop"
    project.mkdir(parents=True)
    git(project, "init", "-q")
    wide = build(team, cwd=str(project), runtime="helper", log=False).text
    assert "5432" in wide or "db01" in wide  # the fixture does reach the db fact for an unscoped runtime
    ctx = build(team, cwd=str(project), runtime="deployer", log=False)
    assert "5432" not in ctx.text and "db/main" not in ctx.text and "db/restore" not in ctx.text
    assert "web/nginx" in ctx.text


def test_a_scoped_agent_through_the_mcp_server(team, tmp_path):
    pytest.importorskip("mcp")
    from test_mcp import stdio

    def data(result):
        assert not result.is_error, result.content
        return result.structured_content

    async def go():
        with open(tmp_path / "stderr.log", "w") as errlog:
            async with stdio(team.root, "--source", "agent:deployer", errlog=errlog) as client:
                recalled = await client.call_tool("recall", {"query": "db01 primary port nginx", "k": 20})
                outside = await client.call_tool("get_fact", {"key": "db/main"})
                inside = await client.call_tool("get_fact", {"key": "web/nginx"})
                listed = await client.call_tool("list_facts", {})
                procs = await client.call_tool("list_procedures", {})
                proposal = await client.call_tool("set_fact", {"key": "web/cdn", "text": "The CDN caches a day."})
                refused = await client.call_tool("set_fact", {"key": "db/main", "text": "db01 moved to 6543."})
                episode = await client.call_tool("log_episode", {"text": "reloaded nginx"})
                return recalled, outside, inside, listed, procs, proposal, refused, episode

    recalled, outside, inside, listed, procs, proposal, refused, episode = asyncio.run(go())
    assert "5432" not in json.dumps(data(recalled)) and data(recalled)["hits"]
    assert outside.is_error and "outside its read scope" in outside.content[0].text and "5432" not in outside.content[0].text
    assert not inside.is_error
    assert "db/main" not in json.dumps(data(listed)) and "web/nginx" in json.dumps(data(listed))
    assert "db/restore" not in json.dumps(data(procs))
    assert data(proposal)["quarantined"] is True
    assert refused.is_error and "outside its write and propose scopes" in refused.content[0].text
    assert Vault.open(team.root).facts.store.get("db/main").text == SECRET_DB
    assert not episode.is_error
    with pytest.raises(ScopeRefused, match="its own proposal"):
        Vault.open(team.root).facts.accept("web/cdn", source="agent:deployer")
    assert Vault.open(team.root).facts.accept("web/cdn", source="user:admin")


def test_an_export_holds_only_what_its_source_may_read(team, monkeypatch):
    from memvault.core.transfer import snapshot

    everything = list(snapshot(team))
    assert any("5432" in json.dumps(r) for r in everything)  # the db fact is there for an unscoped source
    monkeypatch.setenv("MEMVAULT_SOURCE", "agent:deployer")
    records = list(snapshot(Vault.open(team.root)))
    assert records and not any("5432" in json.dumps(r) or "db/restore" in json.dumps(r) for r in records)
    assert {r.get("key") for r in records if r["type"] == "fact"} == {"web/nginx"}
