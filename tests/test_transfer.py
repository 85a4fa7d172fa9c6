"""memvault import FORMAT PATH and memvault export: other tools' memory through the gate (import:<tool>, never
trusted), a report of what came in, merged, conflicted or was refused; an export that restores the same vault."""
from __future__ import annotations

import json
import os
import sqlite3
import stat

import pytest

from agent_fixtures import IMPORTS, copy_tree
from memvault import Vault
from memvault.core.transfer import import_items, restore_items, snapshot
from memvault.interfaces.transfer import read
from memvault.interfaces.transfer.memvault import write_jsonl, write_markdown
from memvault.rules.errors import UntrustedSource


def keys(items) -> list[str]:
    return [i.get("key") for i in items]


def claude_mem_db(tmp_path, name: str = "claude-mem.db"):
    path = tmp_path / name
    conn = sqlite3.connect(path)
    conn.executescript((IMPORTS / "claude-mem" / "schema.sql").read_text())
    conn.executescript((IMPORTS / "claude-mem" / "data.sql").read_text())
    conn.commit()
    conn.close()
    return path


def test_claude_code_files_and_auto_memory_become_proposals(strict_vault, tmp_path):
    project = copy_tree(IMPORTS / "claude-code" / "project", tmp_path / "shopfront")
    dry = import_items(strict_vault, read("claude-code", project), fmt="claude-code", source="import:claude-code",
                       dry_run=True)
    assert strict_vault.facts.inbox() == [] and dry.dry_run
    report = import_items(strict_vault, read("claude-code", project), fmt="claude-code",
                          source="import:claude-code")
    assert keys(report.proposed) == keys(dry.proposed) == [
        "claude-code/shopfront/shopfront", "claude-code/shopfront/commands", "claude-code/shopfront/conventions",
        "claude-code/shopfront/rules/migrations/migrations"]
    commands = strict_vault.facts.store.get("claude-code/shopfront/commands", inbox=True)
    assert commands.source == "import:claude-code" and "pytest -q -p no:randomly" in commands.text
    assert commands.category == "instructions" and "shopfront" in commands.tags
    assert not strict_vault.facts.exists("claude-code/shopfront/commands")  # never trusted: a person decides
    home = IMPORTS / "claude-code" / "home" / ".claude"
    report = import_items(strict_vault, read("claude-code", home), fmt="claude-code", source="import:claude-code")
    assert set(keys(report.proposed)) == {
        "claude-code/user/my-preferences", "claude-code/home-dev-src-shopfront/feedback-testing",
        "claude-code/home-dev-src-shopfront/project-staging",
        "claude-code/home-dev-src-shopfront/memory-the-staging-database-is-reset-every"}
    feedback = strict_vault.facts.store.get("claude-code/home-dev-src-shopfront/feedback-testing", inbox=True)
    assert feedback.category == "feedback" and "five times in a row" in feedback.text
    again = import_items(strict_vault, read("claude-code", project), fmt="claude-code", source="import:claude-code")
    assert again.proposed == [] and len(again.skipped) == 4  # already proposed


def test_a_claude_mem_database_made_with_its_schema(strict_vault, tmp_path):
    report = import_items(strict_vault, read("claude-mem", claude_mem_db(tmp_path)), fmt="claude-mem",
                          source="import:claude-mem")
    episodes = list(strict_vault.episodes.iter(source="import:claude-mem"))
    assert [e.kind for e in episodes] == ["observation", "observation", "summary"]
    bugfix = episodes[0]
    assert bugfix.text.startswith("Double charge on payment retry - Idempotency key added to PSP calls")
    assert bugfix.created_at == "2026-11-20T09:00:30Z" and "bugfix" in bugfix.tags
    assert bugfix.meta["files_modified"] == ["shop/payments.py"] and bugfix.meta["project"] == "shopfront"
    assert "Learned: The PSP deduplicates by idempotency key" in episodes[2].text
    assert len(report.proposed) == 3
    assert strict_vault.facts.store.exists("claude-mem/shopfront/the-acme-psp-deduplicates-charges-by-idempotency",
                                           inbox=True)
    again = import_items(strict_vault, read("claude-mem", claude_mem_db(tmp_path, "copy.db")), fmt="claude-mem",
                         source="import:claude-mem")
    assert again.added == [] and again.proposed == [] and len(list(strict_vault.episodes.iter())) == 3



def test_an_import_scans_each_episode_for_secrets_once_and_the_gate_still_refuses_one(strict_vault, tmp_path,
                                                                                      monkeypatch):
    """`import` scanned each episode's text twice (its own scan, to cut a secret's lines, then the gate's, of the
    whole episode): 80% of an import's time (8.9 s for 18.5k records). Each text is scanned once now; the gate's
    check is the same (a secret that slipped past the import's scan is still refused by the gate)."""
    from collections import Counter

    from memvault.core.transfer import Item
    from memvault.rules import secrets
    from memvault.rules.errors import SecretRefused

    scanned = Counter()
    real = secrets._scan_text

    def counted(text, decode):
        scanned[text] += 1
        return real(text, decode)

    monkeypatch.setattr(secrets, "_scan_text", counted)
    secrets._find_short.cache_clear()  # a short text another test scanned would be counted 0 times
    report = import_items(strict_vault, read("claude-mem", claude_mem_db(tmp_path)), fmt="claude-mem",
                          source="import:claude-mem")
    texts = [e.text for e in strict_vault.episodes.iter(source="import:claude-mem")]
    assert len(texts) == 3 and len(report.added) == 3
    assert {t: scanned[t] for t in texts} == {t: 1 for t in texts}
    # The gate's own scan still runs and refuses: here the import's scan is made to miss the secret.
    monkeypatch.setattr("memvault.core.transfer.scan_fields", lambda fields: [])
    key = "AKIA" + "Z7Q3XK5M2PL4NW8R"
    with pytest.raises(SecretRefused):
        import_items(strict_vault, [Item("episode", f"the deploy key is {key}", "x:1")], fmt="markdown",
                     source="import:claude-mem")
    assert len(list(strict_vault.episodes.iter())) == 3


def test_basic_memory_notes_with_front_matter_observations_and_relations(strict_vault):
    report = import_items(strict_vault, read("basic-memory", IMPORTS / "basic-memory"), fmt="basic-memory",
                          source="import:basic-memory")
    proposed = set(keys(report.proposed))
    technique = strict_vault.facts.store.get(
        "basic-memory/coffee-brewing-methods/technique-water-temperature-at-205-f-extracts-optimal", inbox=True)
    assert technique.category == "technique" and set(technique.tags) == {"coffee", "brewing"}
    decision = strict_vault.facts.store.get(
        "basic-memory/specs/search-design/decision-selected-bcrypt-for-passwords", inbox=True)
    assert "(based on OWASP audit)" in decision.text and "security" in decision.tags
    note = strict_vault.facts.store.get("basic-memory/specs/search-design", inbox=True)
    assert "implements [[Search Requirements]]" in note.text and note.category == "spec"
    assert not any("checkbox" in k or "link" in k for k in proposed)


def test_a_mem0_export(strict_vault):
    report = import_items(strict_vault, read("mem0", IMPORTS / "mem0" / "export.json"), fmt="mem0",
                          source="import:mem0")
    assert keys(report.proposed) == ["mem0/alex/prefers-vegetarian-restaurants", "mem0/alex/is-allergic-to-peanuts",
                                     "mem0/ops-bot/deploys-the-billing-service-every-tuesday"]
    assert set(strict_vault.facts.store.get("mem0/alex/is-allergic-to-peanuts", inbox=True).tags) == {"mem0", "health"}


def test_an_openclaw_workspace(strict_vault):
    report = import_items(strict_vault, read("openclaw", IMPORTS / "openclaw" / "workspace"), fmt="openclaw",
                          source="import:openclaw")
    assert keys(report.proposed) == ["openclaw/people", "openclaw/infrastructure"]
    days = list(strict_vault.episodes.iter(source="import:openclaw"))
    assert [(e.created_at, e.kind) for e in days] == [("2026-11-19T00:00:00Z", "summary"),
                                                       ("2026-11-20T00:00:00Z", "summary")]
    assert "failover-drill" in days[1].tags


def test_a_markdown_folder_refuses_secrets_and_reports_duplicates_and_conflicts(strict_vault, tmp_path):
    strict_vault.facts.set("ops/vpn", "The office VPN gateway is vpn.example.com on UDP 1194.", source="user:dev")
    strict_vault.facts.set("runbooks/restart-web", "Restart web hosts all at once.", source="user:dev")
    report = import_items(strict_vault, read("markdown", IMPORTS / "markdown"), fmt="markdown",
                          source="import:markdown")
    # named by position, file and line, never by a key (a key made of the text would carry what was refused)
    assert [os.path.basename(r["origin"]) for r in report.refused] == ["credentials.md:1"]
    assert "key" not in report.refused[0] and isinstance(report.refused[0]["item"], int)
    assert "looks like a secret" in report.refused[0]["reason"]
    assert report.merged[0]["key"] == "networking" and report.merged[0]["into"] == "ops/vpn"
    assert report.conflicts[0]["key"] == "runbooks/restart-web"
    assert "AKIA" not in "".join(p.read_text() for p in strict_vault.root.rglob("*.md"))


def test_cli_import_dry_run_then_import(invoke, vault):
    dry = invoke("import", "mem0", str(IMPORTS / "mem0" / "export.json"), "--dry-run")
    assert dry.exit_code == 0 and "would import from mem0 as import:mem0: 3 proposed" in dry.stdout
    assert Vault.open(vault.root).facts.inbox() == []
    done = invoke("import", "mem0", str(IMPORTS / "mem0" / "export.json"), "--json")
    assert len(json.loads(done.stdout)["proposed"]) == 3
    assert invoke("import", "mem0", str(IMPORTS / "mem0"), "--source", "user:x").exit_code == 2


@pytest.fixture
def full(strict_vault, tmp_path):
    """A vault with hand-written front matter, proposals, runbooks (one executable, in a sub-folder) and episodes
    whose text looks like the markdown export's own markup."""
    v = strict_vault
    v.facts.set("db/primary", "Primary at 10.8.0.4:5432.", category="database", tags=["postgres"], source="user:dev")
    (v.root / "facts" / "ops").mkdir()
    (v.root / "facts" / "ops" / "owner.md").write_text("---\n# a comment a person wrote\nowner: maria\n"
                                                       "importance: 0.9\n---\nMaria owns on-call. Ünïcode ✓\n")
    v.facts.set("shop/idea", "Drop the retry.", source="agent:claude-code")
    script = tmp_path / "drain.sh"
    script.write_text("#!/bin/sh\n# description: Drain a web host\necho drain \"$1\"\n")
    script.chmod(0o750)
    v.procedures.add("web/drain-host", script, source="user:dev")
    runbook = tmp_path / "failover.md"
    runbook.write_text("---\ndescription: Fail over the database\n---\n# Failover\n\n1. Promote db2.\n")
    v.procedures.add("db/failover", runbook, source="user:dev")
    v.episodes.append("## not a heading of the export\n<!-- memvault-episode {\"bytes\": 1} -->\nstill text",
                      source="agent:claude-code", tags=["claude-code"], meta={"session_id": "s1", "turn_id": "t1"})
    v.episodes.append("Deployed 2.4.1 — fine.", source="user:dev", kind="summary", at="2026-11-20T09:40:00Z")
    v.procedures.run("web/drain-host", ["web3"], source="user:dev", stdout=-3, stderr=-3)
    return Vault.open(v.root)


def state(v: Vault) -> dict:
    v = Vault.open(v.root)
    facts = {p.relative_to(v.root).as_posix(): p.read_bytes() for p in (v.root / "facts").rglob("*.md")}
    procs = {p.relative_to(v.root).as_posix(): (p.read_bytes(), stat.S_IMODE(os.stat(p).st_mode))
             for p in (v.root / "procedures").rglob("*") if p.is_file()}
    episodes = sorted((json.dumps(e.to_dict(), sort_keys=True) for e in v.episodes.iter()))
    inbox = {f.key: (f.text, f.source) for f in v.facts.inbox()}
    return {"facts": facts, "procedures": procs, "episodes": episodes, "inbox": inbox}


@pytest.mark.parametrize("fmt", ["jsonl", "markdown"])
def test_export_then_import_into_a_new_vault_gives_the_same_vault(fmt, full, tmp_path):
    records = list(snapshot(full))
    if fmt == "jsonl":
        out = tmp_path / "export.jsonl"
        with open(out, "w") as f:
            write_jsonl(records, f, "full")
    else:
        out = tmp_path / "export"
        write_markdown(records, out, "full")
        assert (out / "episodes").is_dir() and (out / "facts" / "ops" / "owner.md").is_file()
    fresh = Vault.init(tmp_path / "fresh")
    report = restore_items(fresh, read("memvault", out), source="user:dev")
    assert report.refused == [] and report.conflicts == []
    assert state(fresh) == state(full)
    assert len([c for c in fresh.git.run("log", "--format=%s").splitlines() if c.startswith("restore")]) == 1
    again = restore_items(fresh, read("memvault", out), source="user:dev")
    assert again.added == [] and state(fresh) == state(full)


def test_a_restore_needs_a_trusted_source(full, tmp_path):
    out = tmp_path / "export.jsonl"
    with open(out, "w") as f:
        write_jsonl(snapshot(full), f, "full")
    with pytest.raises(UntrustedSource):
        restore_items(Vault.init(tmp_path / "fresh"), read("memvault", out), source="agent:claude-code")


def test_cli_export_and_import_round_trip(runner, full, tmp_path):
    from memvault.interfaces.cli import cli

    out = tmp_path / "vault.jsonl"
    done = runner.invoke(cli, ["--vault", str(full.root), "export", "--output", str(out)])
    assert done.exit_code == 0 and "exported" in done.stderr
    fresh = Vault.init(tmp_path / "fresh")
    done = runner.invoke(cli, ["--vault", str(fresh.root), "import", "memvault", str(out), "--source", "user:dev"])
    assert done.exit_code == 0, done.output
    before, after = state(full), state(fresh)
    assert set(after["episodes"]) ^ set(before["episodes"]) == set(), done.output
    assert after == before
