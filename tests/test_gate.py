"""One gate for every way in, and nothing a person wrote is lost.

Every commit memvault makes — a write, sync's commit of hand edits, the pre-commit hook — runs the same checks;
a file that fails stays local and uncommitted, named with its reason. A write never throws away an edit a person
made by hand, ingest and the inbox say what they replaced, and a broken file is named wherever it is skipped.
Real git, a bare remote, the CLI as a person runs it.
"""
from __future__ import annotations

import io
import json
import subprocess

import pytest

from memvault import Vault
from memvault.interfaces.cli import cli
from memvault.interfaces.githooks import install
from conftest import git

AWS = "AKIA" + "Z7QK2M4N6P8R3T5V"  # shaped like an access key id, made up


@pytest.fixture
def synced(tmp_path):
    """A vault with a bare remote it has pushed to, and the pre-commit hook installed."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    v = Vault.init(tmp_path / "v")
    git(v.root, "remote", "add", "origin", str(remote))
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", source="user:admin")
    v.sync(source="user:admin")
    install(v.root)
    v.remote = remote
    return v


def remote_files(v) -> list[str]:
    return git(v.remote, "ls-tree", "-r", "--name-only", "main").splitlines()


def remote_text(v, rel: str) -> str:
    return git(v.remote, "show", f"main:{rel}")


# ---------------------------------------------------------------------------------------------- side doors
def test_sync_keeps_a_secret_bearing_hand_edit_back_and_pushes_the_rest(synced, runner):
    primary = synced.root / "facts/db/primary.md"
    edited = primary.read_text().replace("port 5432.", f"port 5432. Backup key {AWS}.")
    primary.write_text(edited)  # a hand edit that fact set would refuse
    (synced.root / "facts/web").mkdir()
    (synced.root / "facts/web/lb.md").write_text("HAProxy on lb1 balances web1 and web2.\n")
    r = runner.invoke(cli, ["--vault", str(synced.root), "sync", "--source", "user:admin"])
    assert r.exit_code == 0, r.output
    assert "facts/db/primary.md" in r.stderr and "secret" in r.stderr and AWS not in r.stderr
    assert "facts/web/lb.md" in remote_files(synced)  # the rest went on
    assert AWS not in remote_text(synced, "facts/db/primary.md")  # the secret did not
    assert AWS not in git(synced.root, "log", "--all", "-p")
    assert primary.read_text() == edited  # kept here, as the person left it
    assert git(synced.root, "status", "--porcelain") == " M facts/db/primary.md"


@pytest.mark.parametrize("rel, text, reason", [
    ("facts/db/.primary.md.a1b2c3.tmp", "---\nimportance: 0.5\n---\nhalf written\n", "temp file"),
    ("facts/db/broken.md", "---\nimportance: high\n---\nThe replica lags.\n", "importance"),
    ("facts/db/merge.md", "<<<<<<< HEAD\nport 5432\n=======\nport 6432\n>>>>>>> theirs\n", "conflict markers"),
    ("facts/tokens/xoxb-123456789012-abcdefghijklmnop.md", "The bot token of the deploy channel.\n", "key"),
    ("memvault.toml", f"[git]\nautocommit = true\n# the old deploy key was {AWS}\n", "secret"),
])
def test_sync_commits_only_what_the_gate_would_write(synced, rel, text, reason):
    path = synced.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    (synced.root / "facts/ok.md").write_text("A plain fact written by hand.\n")
    result = Vault.open(synced.root).sync(source="user:admin")
    assert result.pushed and "facts/ok.md" in remote_files(synced)
    assert rel in result.refused and reason in result.refused[rel], result.refused
    assert any(rel in w and reason in w for w in result.warnings)
    assert rel not in remote_files(synced) or remote_text(synced, rel) != text
    assert path.read_text() == text  # kept, uncommitted


def test_the_pre_commit_hook_runs_the_same_checks_on_every_vault_file(tmp_path):
    v = Vault.init(tmp_path / "v", track_episodes=True)
    install(v.root)
    episode = v.root / "episodes/web1/2026-12.jsonl"
    episode.parent.mkdir(parents=True)
    episode.write_text(json.dumps({"id": "01KB7RZ4M5T9Q8W3E2R1Y6U0PA", "created_at": "2026-12-01T10:00:00Z",
                                   "source": "user:a", "text": "rotated", "meta": {"aws": AWS}}) + "\n")
    temp = v.root / "facts/.x.md.abc.tmp"
    temp.write_text("leftover\n")
    for rel in ("episodes/web1/2026-12.jsonl", "facts/.x.md.abc.tmp"):
        git(v.root, "add", "-f", rel)
        r = subprocess.run(["git", "commit", "-m", "by hand"], cwd=v.root, capture_output=True, text=True)
        assert r.returncode != 0 and rel in r.stderr, r.stderr
        git(v.root, "reset", "-q")


def test_the_facade_offers_the_gate_to_other_ways_in(vault):
    """What an importer, the web view or capture call when they have written files: the same checks."""
    (vault.root / "facts/ok.md").write_text("Imported by a tool.\n")
    (vault.root / "facts/bad.md").write_text(f"Imported with a key {AWS}.\n")
    done = vault.commit_edits(source="user:importer")
    rels = sorted(p.relative_to(vault.root).as_posix() for p in done.paths)
    assert rels == ["facts/ok.md"] and done.commit
    assert "facts/bad.md" in {p.relative_to(vault.root).as_posix() for p in done.refused}
    assert "facts/bad.md" in git(vault.root, "status", "--porcelain")
    assert vault.recall("Imported by a tool", mode="keyword")[0].id == "ok"  # the index was told
    with pytest.raises(Exception, match="not trusted"):
        vault.commit_edits(source="web:evil.example")


def test_secrets_in_fact_keys_and_procedure_names_are_refused(strict_vault, tmp_path, runner):
    script = tmp_path / "x.sh"
    script.write_text("#!/bin/sh\necho ok\n")
    for args in (("fact", "set", "tokens/xoxb-123456789012-abcdefghijklmnop", "The deploy bot."),
                 ("fact", "set", "stripe/sk_live_abcdefghijklmnop1234", "Billing.", "--allow-secret"),
                 ("proc", "add", "ci/glpat-abcdefghijklmnopqrst", str(script)),
                 ("fact", "set", "tokens/xoxb-123456789012-abcdefghijklmnop", "Proposed.", "--source", "agent:x")):
        r = runner.invoke(cli, ["--vault", str(strict_vault.root), *args])
        assert r.exit_code == 1 and "secret" in r.stderr, (args, r.output)
    assert git(strict_vault.root, "log", "--format=%s").count("\n") == 0  # only the init commit
    assert not list((strict_vault.root / "facts").rglob("*.md")) and not list(
        (strict_vault.root / "procedures").rglob("*.sh"))
    assert not (strict_vault.root / "inbox").exists() or not list((strict_vault.root / "inbox").rglob("*.md"))


# ---------------------------------------------------------------------------------------------- nothing lost
def test_a_write_over_an_uncommitted_hand_edit_commits_the_edit_first(vault):
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    path = vault.root / "facts/db/primary.md"
    by_hand = path.read_text().replace("port 5432.", "port 5432. Failover goes to db2 (maria, 2026-12-01).")
    path.write_text(by_hand)
    fact = vault.facts.set("db/primary", "The primary database listens on port 6432.", source="agent:deployer")
    assert "Failover goes to db2" not in path.read_text()
    history = git(vault.root, "log", "-p", "--format=%an %s", "--", "facts/db/primary.md")
    assert "Failover goes to db2 (maria, 2026-12-01)." in history  # the person's text is in git
    subjects = git(vault.root, "log", "--format=%an|%s", "-3", "--", "facts/db/primary.md").splitlines()
    assert subjects[0].startswith("agent:deployer|fact update db/primary")
    assert subjects[1].startswith("Test User|hand edit of facts/db/primary.md")  # as the person's change
    assert any("by hand" in w for w in fact.warnings)


def test_a_hand_edit_that_cannot_be_committed_is_never_thrown_away(vault):
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    path = vault.root / "facts/db/primary.md"
    by_hand = path.read_text().replace("port 5432.", f"port 5432. Key {AWS}.")
    path.write_text(by_hand)
    with pytest.raises(Exception, match="by hand") as info:
        vault.facts.set("db/primary", "The primary database listens on port 6432.")
    assert "facts/db/primary.md" in str(info.value) and AWS not in str(info.value)
    assert path.read_text() == by_hand


def test_ingest_says_what_it_replaced_and_keeps_the_old_text_reachable(vault):
    old = "The primary database listens on 10.8.0.4 port 5432. Nightly dumps run at 03:15 UTC."
    vault.facts.set("db/primary", old)
    line = json.dumps({"type": "fact", "key": "db/primary",
                       "text": "The primary database listens on 10.8.0.4 port 5432."}) + "\n"
    report = vault.ingest(io.StringIO(line), source="user:ops", name="c.jsonl")
    assert report.added == [] and [r["key"] for r in report.replaced] == ["db/primary"]
    previous = report.replaced[0]["previous"]
    assert "Nightly dumps" in git(vault.root, "show", f"{previous}:facts/db/primary.md")
    conflicting = json.dumps({"type": "fact", "key": "db/primary",
                              "text": "The primary database listens on 10.8.0.4 port 6432."}) + "\n"
    report = vault.ingest(io.StringIO(conflicting), source="user:ops", name="c.jsonl")
    assert report.conflicts[0]["with"] == "db/primary" and report.conflicts[0]["proposed"] == "inbox/db/primary.md"
    assert "5432" in vault.facts.get("db/primary").text  # the stored side stays
    assert "6432" in vault.facts.store.get("db/primary", inbox=True).text  # the other waits for a person


def test_a_second_proposal_is_kept_beside_the_first_and_either_can_be_accepted(strict_vault):
    v = strict_vault
    first = v.facts.set("net/vpn", "The VPN gateway is vpn1.", source="agent:a")
    second = v.facts.set("net/vpn", "The VPN gateway is vpn2.", source="agent:b")
    assert first.quarantined and second.quarantined and second.key == "net/vpn.2"
    assert any("net/vpn" in w and "beside" in w for w in second.warnings)
    assert v.facts.set("net/vpn", "The VPN gateway is vpn2.", source="agent:b").key == "net/vpn.2"  # same: no third
    assert sorted(f.key for f, _ in v.facts.proposals()) == ["net/vpn", "net/vpn.2"]
    accepted = v.facts.accept("net/vpn.2", source="user:admin")
    assert accepted.key == "net/vpn" and v.facts.get("net/vpn").text == "The VPN gateway is vpn2."
    assert "proposes" not in (v.root / "facts/net/vpn.md").read_text()
    assert any("net/vpn" in w and "still wait" in w for w in accepted.warnings)
    assert [f.key for f in v.facts.inbox()] == ["net/vpn"]  # the first still waits


def test_a_fact_with_conflict_markers_is_named_wherever_it_is_skipped(vault, runner):
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    vault.reindex()
    path = vault.root / "facts/db/replica.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("<<<<<<< HEAD\nThe replica listens on port 5433.\n=======\nThe replica is db3.\n>>>>>>> b\n")
    for args in (("recall", "replica port", "--mode", "keyword"), ("recall", "primary", "--mode", "keyword"),
                 ("fact", "list")):
        r = runner.invoke(cli, ["--vault", str(vault.root), *args])
        assert r.exit_code == 0 and "replica.md" in r.stderr and "conflict markers" in r.stderr, (args, r.stderr)
    assert "not searchable" in runner.invoke(cli, ["--vault", str(vault.root), "recall", "primary", "--mode",
                                                   "keyword"]).stderr  # every recall, not only the first


def test_an_oversized_hand_placed_fact_is_named_by_recall(vault, runner):
    vault.facts.set("db/primary", "The primary database listens on port 5432.")
    big = vault.root / "facts/big.md"
    big.write_text("word " * 20_000)
    for _ in range(2):
        r = runner.invoke(cli, ["--vault", str(vault.root), "recall", "primary", "--mode", "keyword"])
        assert r.exit_code == 0 and "big.md" in r.stderr and "fact_bytes" in r.stderr, r.stderr
