"""[scopes] against what a scoped source could still learn or do: a run it may not record is not started (the
script used to run, then the record of it was refused: a side effect without its audit line), and no problem
report names a file outside its read scope (list_facts' problems and recall's "files not searchable" gave
the paths of unreadable files anywhere in the vault, with the host's absolute path)."""
from __future__ import annotations

import pytest

from memvault.rules.errors import ScopeRefused
from test_scopes_more import add_scopes

RUNNER = """
[scopes."agent:runner"]
read = ["procedures/web/", "facts/web/**", "episodes/**"]
write = []
propose = ["facts/web/**"]
"""


@pytest.fixture
def scoped(strict_vault, tmp_path):
    v = add_scopes(strict_vault, RUNNER, trust_agents=True)
    marker = tmp_path / "ran.txt"
    script = tmp_path / "hello.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    script.chmod(0o755)
    v.procedures.add("web/hello", script, source="user:admin")
    v.facts.set("web/nginx", "nginx on web01 serves the shop.", source="user:admin")
    return v, marker


def test_a_run_the_source_may_not_record_is_not_started(scoped):
    v, marker = scoped
    with pytest.raises(ScopeRefused, match="outside its write scope"):
        v.procedures.run("web/hello", source="agent:runner", stdout=-3, stderr=-3)
    assert not marker.exists()
    assert list(v.episodes.iter()) == []
    v.procedures.run("web/hello", source="user:admin", stdout=-3, stderr=-3)
    assert marker.read_text() == "ran\n"


def test_no_problem_report_names_a_file_outside_the_read_scope(scoped):
    v, _ = scoped
    bad = v.root / "facts" / "db" / "payroll" / "q3-layoffs.md"
    bad.parent.mkdir(parents=True)
    bad.write_text("---\nsource: [unclosed\n---\nsecret plans\n")
    mine = v.root / "facts" / "web" / "broken.md"
    mine.write_text("---\nsource: [unclosed\n---\nweb notes\n")
    v.reindex()
    problems: list = []
    v.facts.list(problems=problems, reader="agent:runner")
    v.facts.inbox(problems, reader="agent:runner")
    v.procedures.list(problems, reader="agent:runner")
    said = " ".join(str(p) for p in problems)
    result = v.recall("secret plans web notes", source="agent:runner", record_access=False)
    said += " ".join(result.warnings)
    assert "payroll" not in said and "q3-layoffs" not in said
    assert "broken.md" in said  # its own files' problems are still told



def test_a_problem_named_from_the_vault_root_in_the_read_scope_is_still_told(scoped, tmp_path):
    """The index keeps some problems by their vault path (a link, a runbook over its size): the filter took only
    absolute paths, so a scoped source heard nothing of its own files."""
    v, _ = scoped
    outside = tmp_path / "elsewhere.sh"
    outside.write_text("#!/bin/sh\necho hi\n")
    (v.root / "procedures" / "web" / "link.sh").symlink_to(outside)
    (v.root / "procedures" / "db").mkdir(parents=True, exist_ok=True)
    (v.root / "procedures" / "db" / "link.sh").symlink_to(outside)
    v.reindex()
    said = " ".join(v.recall("hello", source="agent:runner", record_access=False).warnings)
    assert "procedures/web/link.sh" in said and "procedures/db/link.sh" not in said


def test_problems_told_to_a_scoped_source_name_vault_paths_not_the_hosts(scoped, tmp_path):
    """A scoped source (an agent, perhaps an MCP client over HTTP on another machine) was told its own broken files
    by absolute path (/home/alice/vaults/team/facts/web/broken.md): the host's home layout and user name, which no
    read scope grants. It hears the vault's path (facts/web/broken.md), as every other answer names a file."""
    import asyncio
    import json

    from click.testing import CliRunner
    from mcp import Client

    from memvault import Vault
    from memvault.interfaces.cli import cli
    from memvault.interfaces.mcp import build_server

    v, _ = scoped
    host = str(v.root)  # under pytest's tmp_path: /tmp/pytest-of-<user>/...
    (v.root / "facts" / "web" / "broken.md").write_text("---\nsource: [unclosed\n---\nweb notes\n")
    outside = tmp_path / "private" / "elsewhere.sh"
    outside.parent.mkdir()
    outside.write_text("#!/bin/sh\necho hi\n")
    (v.root / "procedures" / "web" / "link.sh").symlink_to(outside)
    v.reindex()

    problems: list = []
    v.facts.list(problems=problems, reader="agent:runner")
    v.procedures.list(problems, reader="agent:runner")
    told = [str(p) for p in problems]
    assert any(t.startswith("facts/web/broken.md") for t in told), told
    warnings = v.recall("web notes", source="agent:runner", record_access=False).warnings
    assert any("facts/web/broken.md" in w for w in warnings) and any("procedures/web/link.sh" in w for w in warnings)

    scoped_server = build_server(Vault.open(v.root), source="agent:runner", warm=False)

    async def ask():
        async with Client(scoped_server) as client:
            return [await client.call_tool("list_facts", {}),
                    await client.call_tool("recall", {"query": "web notes"}),
                    await client.call_tool("get_fact", {"key": "web/broken"})]

    listed, recalled, broken = asyncio.run(ask())
    assert "facts/web/broken.md" in " ".join(listed.structured_content["problems"])
    assert broken.is_error and "facts/web/broken.md" in broken.content[0].text

    # the CLI, as an agent shells out to it with its source
    runner = CliRunner()
    env = {"MEMVAULT_SOURCE": "agent:runner"}
    recall_json = runner.invoke(cli, ["--vault", host, "recall", "web notes", "--json", "--no-record"], env=env)
    listing = runner.invoke(cli, ["--vault", host, "fact", "list", "--json"], env=env)
    assert recall_json.exit_code == 0 and listing.exit_code == 0, recall_json.output + listing.output
    cli_warnings = json.loads(recall_json.stdout)["warnings"]
    assert any("facts/web/broken.md" in w for w in cli_warnings)
    assert "facts/web/broken.md" in listing.stderr

    said = [*told, *warnings, *listed.structured_content["problems"], *recalled.structured_content["warnings"],
            broken.content[0].text, *cli_warnings, listing.stderr]
    for line in said:
        assert host not in line and str(tmp_path) not in line, line  # neither the vault's place nor a link's target


def test_vault_paths_names_files_from_the_vault_root_and_only_the_last_part_of_others():
    from pathlib import Path

    from memvault.rules.validation import vault_paths

    root = Path("/home/alice/vaults/team")
    assert vault_paths("/home/alice/vaults/team/facts/x.md:3: invalid YAML", root) == "facts/x.md:3: invalid YAML"
    assert vault_paths("procedures/web/a.sh: a symlink (to /home/alice/bin/a.sh): not followed", root) == \
        "procedures/web/a.sh: a symlink (to .../a.sh): not followed"
    kept = "facts/db/x.md: 10.0.0.0/8 via https://example.com/a/b, see facts/web/y"
    assert vault_paths(kept, root) == kept  # no path of the host's in it: nothing changes


def test_the_web_view_names_vault_paths_in_problems_and_errors(vault, tmp_path):
    """The web view may be served to a browser on another machine (--host with a token): its problems and error
    lines name the vault's paths, as the MCP server's do, for every reader."""
    from web_fixtures import web_client

    host = str(vault.root)
    (vault.root / "facts" / "web").mkdir(parents=True)
    (vault.root / "facts" / "web" / "broken.md").write_text("---\nsource: [unclosed\n---\nweb notes\n")
    outside = tmp_path / "private" / "elsewhere.sh"
    outside.parent.mkdir()
    outside.write_text("#!/bin/sh\necho hi\n")
    (vault.root / "procedures" / "web").mkdir(parents=True)
    (vault.root / "procedures" / "web" / "link.sh").symlink_to(outside)
    client = web_client(vault)
    try:
        procs = client.get("/procedures?format=json")
        fact = client.get("/fact/web/broken?format=json")
    finally:
        client.__exit__(None, None, None)
    problems = procs.json()["problems"]
    assert any(p.startswith("procedures/web/link.sh") for p in problems), problems
    assert fact.status_code >= 400 and "facts/web/broken.md" in fact.json()["error"], fact.text
    for line in [*problems, fact.json()["error"]]:
        assert host not in line and str(tmp_path) not in line, line
