"""Imports that keep what they can (issue 26, item 5): a secret refuses its line, not its section; the source's
timestamps survive; a project is named from its git remote or work tree, never from the folder a file sits in;
``--trust`` lets a person bring in their own files as facts; Codex's ``.jsonl.zst`` rollouts are read."""
from __future__ import annotations

import json
import re

import pytest

from agent_fixtures import FIXTURES, IMPORTS, SECRET, TRANSCRIPTS
from conftest import git
from memvault import Vault
from memvault.core.transfer import import_items
from memvault.interfaces.transfer import read
from memvault.rules.validation import validate_key

STAGING = "- The staging database is db-staging.acme.internal:5432 (reset every Sunday)."
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1c8q3v9Zb2mZyQ0sO8r2n5w1Xo4Jk3Lr6tYpQe7uVfWcNd9S\n"
       "k8Lr2n5w1Xo4Jk3Lr6tYpQe7uVfWcNd9Sh3mQ2ZxT0yUa1Ib4Cc5Dd6Ee7Ff8Gg9H\n-----END RSA PRIVATE KEY-----")


def claude_md(folder, text: str, name: str = "CLAUDE.md"):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def numbered(path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def imported(vault, fmt, path, **kw):
    return import_items(vault, read(fmt, path), fmt=fmt, source=kw.pop("source", f"import:{fmt}"), **kw)


# ------------------------------------------------------------------------------------------------ 1. the line
SECTION = f"""# Shop API

Django service behind HAProxy.

## Environments

{STAGING}
- Deploys need GH_TOKEN={SECRET} in the environment.
- Production deploys go out on Tuesdays only.
"""


def test_one_secret_line_refuses_that_line_and_every_other_line_comes_in(strict_vault, tmp_path):
    project = tmp_path / "shop-api"
    path = claude_md(project, SECTION)
    report = imported(strict_vault, "claude-code", project)
    assert [r["origin"] for r in report.refused] == [f"{path}:{numbered(path, 'GH_TOKEN')}"]
    assert "looks like a secret" in report.refused[0]["reason"]
    assert SECRET not in json.dumps(report.to_dict())
    env = strict_vault.facts.store.get("claude-code/shop-api/environments", inbox=True)
    assert STAGING in env.text and "Tuesdays only" in env.text and "GH_TOKEN" not in env.text
    assert {e["key"] for e in report.proposed} == {"claude-code/shop-api/shop-api",
                                                    "claude-code/shop-api/environments"}
    again = imported(strict_vault, "claude-code", project)  # the same file again: nothing new, same refusal
    assert again.proposed == [] and len(again.skipped) == 2 and len(again.refused) == 1


def test_line_numbers_count_the_front_matter_of_a_rules_file(strict_vault, tmp_path):
    project = tmp_path / "shop-api"
    rule = claude_md(project / ".claude" / "rules", f"---\npaths:\n  - \"deploy/**\"\n---\n\n# Deploys\n\n"
                                                    f"{STAGING}\ntoken: {SECRET}\n", "deploy.md")
    report = imported(strict_vault, "claude-code", project)
    assert [r["origin"] for r in report.refused] == [f"{rule}:{numbered(rule, SECRET)}"] == [f"{rule}:9"]
    (fact,) = strict_vault.facts.inbox()
    assert STAGING in fact.text and SECRET not in fact.text


def test_a_secret_spread_over_lines_refuses_those_lines_only(strict_vault, tmp_path):
    project = tmp_path / "shop-api"
    path = claude_md(project, f"# Keys\n\nThe deploy key lives in 1Password.\n\n{PEM}\n\nRotate it yearly.\n")
    report = imported(strict_vault, "claude-code", project)
    first = numbered(path, "BEGIN RSA")
    assert [r["origin"] for r in report.refused] == [f"{path}:{first}-{first + 3}"]
    (fact,) = strict_vault.facts.inbox()
    assert "1Password" in fact.text and "Rotate it yearly" in fact.text and "BEGIN" not in fact.text


def test_a_secret_in_a_heading_refuses_its_section_whose_key_it_would_name(strict_vault, tmp_path):
    project = tmp_path / "shop-api"
    claude_md(project, f"# Shop API\n\nA service.\n\n## {SECRET}\n\nsome text\n")
    report = imported(strict_vault, "claude-code", project)
    assert len(report.refused) == 1 and [f.key for f in strict_vault.facts.inbox()] == ["claude-code/shop-api/shop-api"]
    assert SECRET not in json.dumps(report.to_dict()) and SECRET.lower() not in json.dumps(report.to_dict())


def test_a_daily_note_episode_keeps_its_other_lines(strict_vault, tmp_path):
    workspace = tmp_path / "ws"
    note = claude_md(workspace / "memory", f"# Deploy day\n\nDeployed 2.4.1 at 10:00.\napi_key = {SECRET}\n"
                                           "Rolled back at 10:20: the health check failed.\n", "2026-11-19.md")
    report = imported(strict_vault, "openclaw", workspace)
    assert [r["origin"] for r in report.refused] == [f"{note}:4"]
    (episode,) = strict_vault.episodes.iter(source="import:openclaw")
    assert "Deployed 2.4.1" in episode.text and "Rolled back" in episode.text and SECRET not in episode.text


def test_cli_names_the_file_and_line_refused_and_never_the_secret(invoke, tmp_path):
    project = tmp_path / "shop-api"
    path = claude_md(project, SECTION)
    done = invoke("import", "claude-code", str(project))
    assert done.exit_code == 0, done.output
    assert f"{path}:{numbered(path, 'GH_TOKEN')}" in done.stdout and SECRET not in done.output


# ------------------------------------------------------------------------------------------------ 2. timestamps
def test_mem0_created_and_updated_survive_into_the_fact(strict_vault):
    imported(strict_vault, "mem0", IMPORTS / "mem0" / "export.json")
    peanuts = strict_vault.facts.store.get("mem0/alex/is-allergic-to-peanuts", inbox=True)
    assert peanuts.created.isoformat() == "2026-07-27T15:01:02+00:00"
    assert peanuts.updated.isoformat() == "2026-08-01T19:00:00+00:00"
    veg = strict_vault.facts.store.get("mem0/alex/prefers-vegetarian-restaurants", inbox=True)
    assert veg.created.isoformat() == veg.updated.isoformat() == "2026-07-26T17:29:36+00:00"  # updated_at null
    strict_vault.gate.accept("mem0/alex/is-allergic-to-peanuts", source="user:dev")
    accepted = strict_vault.facts.get("mem0/alex/is-allergic-to-peanuts")
    assert accepted.created.isoformat() == "2026-07-27T15:01:02+00:00"


def test_a_bad_mem0_timestamp_refuses_that_memory_by_position(strict_vault, tmp_path):
    memories = [{"id": "1", "memory": "Uses vim", "created_at": "yesterday-ish", "user_id": "sam"},
                {"id": "2", "memory": "Works from Lisbon", "created_at": "2026-08-01T10:00:00Z", "user_id": "sam"},
                {"id": "3", "memory": "Owns the billing pager", "created_at": "2999-01-01T00:00:00Z",
                 "user_id": "sam"},
                {"id": "4", "memory": "Prefers tea", "created_at": 17, "user_id": "sam"},
                {"id": "5", "memory": "Likes rust", "created_at": "2026-08-01T10:00:00Z",
                 "updated_at": "2026-07-01T10:00:00Z", "user_id": "sam"}]
    export = tmp_path / "mem0.json"
    export.write_text(json.dumps({"results": memories}))
    report = imported(strict_vault, "mem0", export)
    assert [r["item"] for r in report.refused] == [1, 3, 4, 5]
    assert all("created_at" in r["reason"] or "updated_at" in r["reason"] for r in report.refused)
    assert [e["key"] for e in report.proposed] == ["mem0/sam/works-from-lisbon"]


def stamps_in(value) -> set:
    if isinstance(value, dict):
        return {v for k, v in value.items() if k == "timestamp" and isinstance(v, str)} | {
            t for v in value.values() for t in stamps_in(v)}
    return {t for v in value for t in stamps_in(v)} if isinstance(value, list) else set()


@pytest.mark.parametrize("runtime", ["codex", "claude-code", "gemini"])
def test_a_captured_transcript_keeps_its_turn_times(vault, tmp_path, runtime):
    from memvault.interfaces.agents.capture import capture

    src = FIXTURES / TRANSCRIPTS[runtime]
    path = tmp_path / src.name
    path.write_text(src.read_text().replace("@@FIVE_MEGABYTES_OF_LOG@@", "log"))
    capture(vault, runtime, path, final=True)
    stamps = {t.replace(".000Z", "Z") for line in src.read_text().splitlines() if line.strip()
              for t in stamps_in(json.loads(line))}
    times = [e.created_at for e in vault.episodes.iter(source=f"agent:{runtime}")]
    assert len(times) >= 2 and set(times) <= stamps, (times, stamps)


# ------------------------------------------------------------------------------------------------ 3. project names
def repo(folder, remote: str | None):
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q")
    if remote is not None:
        git(folder, "remote", "add", "origin", remote)
    return folder


def test_the_project_is_named_from_its_git_remote(strict_vault, tmp_path):
    checkout = repo(tmp_path / "checkout", "git@github.com:acme/shop-api.git")
    claude_md(checkout / ".claude", "# Deploys\n\nDeploy with make deploy.\n")
    report = imported(strict_vault, "claude-code", checkout / ".claude" / "CLAUDE.md")
    assert [e["key"] for e in report.proposed] == ["claude-code/shop-api/deploys"]
    report = imported(strict_vault, "claude-code", checkout, dry_run=True)
    assert [e["key"] for e in report.skipped] == ["claude-code/shop-api/deploys"]


def test_without_a_remote_the_project_is_the_top_folder_of_the_work_tree(strict_vault, tmp_path):
    top = repo(tmp_path / "billing", None)
    claude_md(top / "services" / "worker" / ".claude", "# Queue\n\nThe queue is SQS.\n")
    report = imported(strict_vault, "claude-code", top / "services" / "worker" / ".claude" / "CLAUDE.md")
    assert [e["key"] for e in report.proposed] == ["claude-code/billing/queue"]


@pytest.mark.parametrize("remote", [
    "https://evil.example/<script>alert(1)</script>.git",
    "git@github.com:acme/..",
    "git@github.com:acme/../../../etc/passwd/..",
    "https://example.com/" + "a" * 5000 + ".git",
    "https://example.com/acme/%2e%2e%2fx.git",
    "https://example.com/acme/ШОП/.git/",
    "\"; rm -rf ~ #",
])
def test_a_hostile_remote_gives_a_safe_slug(strict_vault, tmp_path, remote):
    checkout = repo(tmp_path / "checkout", None)
    (checkout / ".git" / "config").write_text((checkout / ".git" / "config").read_text()
                                              + f'[remote "origin"]\n\turl = {remote}\n')
    claude_md(checkout, "# Notes\n\nSome notes.\n")
    report = imported(strict_vault, "claude-code", checkout)
    (entry,) = report.proposed
    project = entry["key"].split("/")[1]
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,59}", project), project
    validate_key(entry["key"])
    (fact,) = strict_vault.facts.inbox()
    assert fact.path.resolve().is_relative_to((strict_vault.root / "inbox").resolve())


# ------------------------------------------------------------------------------------------------ 4. --trust
def test_trust_writes_a_persons_own_files_as_facts_and_still_refuses_the_secret_line(invoke, vault, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.setenv("MEMVAULT_SOURCE", "user:dev")
    project = tmp_path / "shop-api"
    path = claude_md(project, SECTION)
    done = invoke("import", "claude-code", str(project), "--trust", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["source"] == "user:dev" and report["proposed"] == []
    assert [r["origin"] for r in report["refused"]] == [f"{path}:{numbered(path, 'GH_TOKEN')}"]
    v = Vault.open(vault.root)
    env = v.facts.get("claude-code/shop-api/environments")
    assert env.source == "user:dev" and STAGING in env.text and SECRET not in env.text and v.facts.inbox() == []
    assert "import claude-code/shop-api/environments" in v.git.run("log", "--format=%s")


def test_trust_refuses_an_agent_source_in_one_line(invoke, vault, tmp_path):
    project = tmp_path / "shop-api"
    claude_md(project, SECTION)
    done = invoke("import", "claude-code", str(project), "--trust", "--source", "agent:claude-code")
    assert done.exit_code != 0 and len(done.stderr.strip().splitlines()) == 1, done.output
    assert "--trust" in done.stderr and "agent:claude-code" in done.stderr
    assert Vault.open(vault.root).facts.list() == [] and Vault.open(vault.root).facts.inbox() == []


def test_trust_needs_the_user_source_trusted_by_the_table(invoke, vault, tmp_path):
    toml = vault.root / "memvault.toml"
    toml.write_text(re.sub(r"trusted = \[.*\]", 'trusted = ["user:alice"]', toml.read_text()))
    git(vault.root, "commit", "-qm", "only alice", "--", "memvault.toml")
    project = tmp_path / "shop-api"
    claude_md(project, SECTION)
    done = invoke("import", "claude-code", str(project), "--trust", "--source", "user:bob")
    assert done.exit_code != 0 and len(done.stderr.strip().splitlines()) == 1 and "user:bob" in done.stderr
    assert Vault.open(vault.root).facts.inbox() == []
    done = invoke("import", "claude-code", str(project), "--trust", "--source", "user:alice")
    assert done.exit_code == 0 and Vault.open(vault.root).facts.exists("claude-code/shop-api/environments")


# ------------------------------------------------------------------------------------------------ 5. .jsonl.zst
def rollout() -> bytes:
    src = FIXTURES / TRANSCRIPTS["codex"]
    return src.read_text().replace("@@FIVE_MEGABYTES_OF_LOG@@", "log").encode()


def compressed(tmp_path, data: bytes, name: str = "rollout-2026-11-20T09-00-00-x.jsonl.zst"):
    zstandard = pytest.importorskip("zstandard")
    path = tmp_path / "zst" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor().compress(data))
    return path


def captured(vault):
    return [(e.created_at, e.text, e.meta.get("turn_id")) for e in vault.episodes.iter(source="agent:codex")]


def test_a_zstd_rollout_is_read_as_its_jsonl(vault, tmp_path):
    from memvault.interfaces.agents.capture import capture

    plain = tmp_path / "plain" / "rollout.jsonl"
    plain.parent.mkdir()
    plain.write_bytes(rollout())
    capture(vault, "codex", plain, final=True)
    expected = captured(vault)
    other = Vault.init(tmp_path / "other")
    toml = other.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('trusted = ["user:*"]', 'trusted = ["user:*", "agent:*"]'))
    report = capture(Vault.open(other.root), "codex", compressed(tmp_path, rollout()), final=True)
    assert expected and captured(Vault.open(other.root)) == expected and report.problems == []
    again = capture(Vault.open(other.root), "codex", compressed(tmp_path, rollout()), final=True)
    assert again.captured == []
    # frames one after another (zstd appends a frame per write it flushes): one text
    zstandard = pytest.importorskip("zstandard")
    data = rollout()
    cut = data.index(b"\n", len(data) // 2) + 1
    frames = tmp_path / "frames" / "rollout.jsonl.zst"
    frames.parent.mkdir()
    frames.write_bytes(zstandard.ZstdCompressor().compress(data[:cut]) + zstandard.ZstdCompressor().compress(
        data[cut:]))
    third = Vault.init(tmp_path / "third")
    toml = third.root / "memvault.toml"
    toml.write_text(toml.read_text().replace('trusted = ["user:*"]', 'trusted = ["user:*", "agent:*"]'))
    capture(Vault.open(third.root), "codex", frames, final=True)
    assert captured(Vault.open(third.root)) == expected


def test_the_cli_captures_a_zstd_rollout(invoke, vault, tmp_path):
    path = compressed(tmp_path, rollout())
    done = invoke("agent", "capture", "codex", str(path), "--final")
    assert done.exit_code == 0, done.output
    assert len(captured(Vault.open(vault.root))) >= 2


def test_a_truncated_zstd_rollout_is_one_line_naming_it_and_nothing_is_stored(invoke, vault, tmp_path):
    path = compressed(tmp_path, rollout())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    done = invoke("agent", "capture", "codex", str(path), "--final")
    assert done.exit_code != 0 and len(done.stderr.strip().splitlines()) == 1, done.output
    assert str(path) in done.stderr and "Traceback" not in done.output
    assert captured(Vault.open(vault.root)) == []
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"not a frame at all" * 10)
    done = invoke("agent", "capture", "codex", str(path), "--final")
    assert done.exit_code != 0 and str(path) in done.stderr and captured(Vault.open(vault.root)) == []


def test_a_zstd_bomb_is_capped_and_refused_in_one_line(invoke, vault, tmp_path, monkeypatch):
    from memvault.interfaces.agents import transcripts

    monkeypatch.setattr(transcripts, "ZST_MAX_BYTES", 4 << 20)
    first = rollout()
    path = compressed(tmp_path, first + b"\n" * (16 << 20))  # 16 MiB of newlines: a few KiB compressed
    assert path.stat().st_size < 64 << 10
    done = invoke("agent", "capture", "codex", str(path), "--final")
    assert done.exit_code != 0 and len(done.stderr.strip().splitlines()) == 1, done.output
    assert str(path) in done.stderr and "MiB" in done.stderr
    assert captured(Vault.open(vault.root)) == []


def test_zstd_is_imported_only_when_a_zst_file_is_read():
    import subprocess
    import sys

    code = ("import sys; from memvault.interfaces.agents import transcripts, capture; "
            "from memvault.interfaces.cli import cli; print('zstandard' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_auto_memory_topic_file_and_a_basic_memory_note_refuse_their_secret_line(strict_vault, tmp_path):
    memory = tmp_path / "home" / ".claude" / "projects" / "-srv-shop-api" / "memory"
    topic = claude_md(memory, f"---\nname: Staging\ndescription: deploying to staging\ntype: project\n---\n"
                              f"Deploy with ./deploy.sh staging.\nexport GH_TOKEN={SECRET}\nIt takes five minutes.\n",
                      "project_staging.md")
    claude_md(memory, "- [Staging](project_staging.md) - deploying to staging\n", "MEMORY.md")
    report = imported(strict_vault, "claude-code", memory)
    assert [r["origin"] for r in report.refused] == [f"{topic}:7"]
    (fact,) = strict_vault.facts.inbox()
    assert "./deploy.sh staging" in fact.text and "five minutes" in fact.text and SECRET not in fact.text
    notes = tmp_path / "notes"
    note = claude_md(notes, f"---\ntitle: Deploys\ncreated: 2026-03-01T09:00:00Z\nmodified: 2026-03-02\n---\n\n"
                            f"Deploys go out on Tuesdays.\ntoken: {SECRET}\n\n## Observations\n"
                            f"- [rule] Never deploy on Fridays\n- [access] the token is {SECRET}\n", "deploys.md")
    report = imported(strict_vault, "basic-memory", notes)
    assert sorted(r["origin"] for r in report.refused) == sorted([f"{note}:8", f"{note}:12"])
    prose = strict_vault.facts.store.get("basic-memory/deploys", inbox=True)
    assert "Tuesdays" in prose.text and SECRET not in prose.text
    assert prose.created.isoformat() == "2026-03-01T09:00:00+00:00"
    assert prose.updated.isoformat() == "2026-03-02T00:00:00+00:00"


def test_a_claude_mem_observation_keeps_its_lines_but_the_secret(strict_vault, tmp_path):
    import sqlite3

    path = tmp_path / "claude-mem.db"
    conn = sqlite3.connect(path)
    conn.executescript((IMPORTS / "claude-mem" / "schema.sql").read_text())
    conn.executescript((IMPORTS / "claude-mem" / "data.sql").read_text())
    conn.execute("UPDATE observations SET narrative = ? WHERE id = 1",
                 (f"The retry charged twice.\nThe PSP key is sk_live_{SECRET[4:]}\nThe idempotency key fixed it.",))
    conn.commit()
    conn.close()
    report = imported(strict_vault, "claude-mem", path)
    # the narrative's second line is the fourth of the episode's text, after its title and a blank line
    assert [r["origin"] for r in report.refused] == [f"{path}:observations:1 (line 4 of its text)"]
    first = next(iter(strict_vault.episodes.iter(source="import:claude-mem")))
    assert "charged twice" in first.text and "fixed it" in first.text and SECRET[4:] not in first.text
    assert first.created_at == "2026-11-20T09:00:30Z"


def test_trust_after_a_plain_import_accepts_what_it_proposed(strict_vault, tmp_path):
    project = tmp_path / "shop-api"
    claude_md(project, SECTION)
    first = imported(strict_vault, "claude-code", project)
    assert len(first.proposed) == 2
    again = imported(strict_vault, "claude-code", project, source="user:dev")
    assert len(again.added) == 2 and strict_vault.facts.inbox() == []
    env = strict_vault.facts.get("claude-code/shop-api/environments")
    assert STAGING in env.text and SECRET not in env.text


def test_an_auto_memory_folder_is_named_after_the_project_it_stands_for(strict_vault, tmp_path):
    checkout = repo(tmp_path / "src" / "shop_api.v2", "https://github.com/acme/shop-api.git")
    claude_md(checkout, "# Deploys\n\nDeploy with make deploy.\n")
    munged = re.sub(r"[^A-Za-z0-9]", "-", str(checkout.resolve()))
    memory = tmp_path / "home" / ".claude" / "projects" / munged / "memory"
    claude_md(memory, "---\nname: Staging\ndescription: staging\ntype: project\n---\nStaging is reset on Sundays.\n",
              "project_staging.md")
    claude_md(memory, "- [Staging](project_staging.md) - staging\n", "MEMORY.md")
    report = imported(strict_vault, "claude-code", memory)
    assert [e["key"] for e in report.proposed] == ["claude-code/shop-api/project-staging"]
    gone = memory.parent.parent / "-nowhere-on-this-machine" / "memory"  # a project not checked out here
    claude_md(gone, "- Builds take ten minutes.\n", "MEMORY.md")
    report = imported(strict_vault, "claude-code", gone)
    assert [e["key"] for e in report.proposed] == ["claude-code/nowhere-on-this-machine/memory-builds-take-ten-minutes"]


def test_a_project_beside_thousands_of_folders_is_still_found(strict_vault, tmp_path):
    """The folder an auto memory stands for is found one path segment at a time; the walk read at most 2,000
    folder entries in all, so a checkout beside 10,000 others (a busy ~/src, /tmp on a build host, the test run's
    own temporary folders in CI) was not found and the project was named after the munged path."""
    src = tmp_path / "src"
    for i in range(10_000):
        (src / f"other-{i:04d}").mkdir(parents=True)
    checkout = repo(src / "shop_api.v2", "https://github.com/acme/shop-api.git")
    munged = re.sub(r"[^A-Za-z0-9]", "-", str(checkout.resolve()))
    memory = tmp_path / "home" / ".claude" / "projects" / munged / "memory"
    claude_md(memory, "- Builds take ten minutes.\n", "MEMORY.md")
    report = imported(strict_vault, "claude-code", memory)
    assert [e["key"] for e in report.proposed] == ["claude-code/shop-api/memory-builds-take-ten-minutes"]


def test_a_folder_larger_than_what_is_left_to_read_is_not_guessed_from(tmp_path):
    """The walk's bound holds: a folder with more entries than the walk may still read is not read in part (a
    part, in the file system's order, is a guess), and the project is then not found rather than found by luck."""
    from memvault.interfaces.transfer.claude_code import _unmunged

    src = tmp_path / "src"
    for i in range(300):
        (src / f"other-{i:03d}").mkdir(parents=True)
    (src / "shop_api.v2").mkdir()
    munged = re.sub(r"[^A-Za-z0-9]", "-", str((src / "shop_api.v2").resolve()))
    assert _unmunged(munged) == (src / "shop_api.v2").resolve()
    assert _unmunged(munged, budget=250) is None  # whatever order the file system lists them in
