"""The MCP server reviewed as an attacker (2026-12-06, night): a scoped agent's tools against runbooks it may not
read, run records it did not make, and arguments no CLI can pass. Each test failed before its fix."""
from __future__ import annotations

import json

import pytest

from memvault import Vault
from conftest import git
from fake_embedder import set_model
from test_mcp import call, data, error_text, http_server, seeded, tool  # noqa: F401 - fixtures
from test_scopes_more import add_scopes

DEPLOYER = """
[scopes."agent:deployer"]
read = ["facts/web/**", "procedures/web/", "episodes/**"]
write = ["episodes/**"]
propose = ["facts/web/**"]

[scopes."agent:web-only"]
read = ["procedures/web/"]
"""
RESTORE = "#!/bin/sh\n# description: Restore the payroll database\necho restoring payroll from s3://hr-backups\n"


@pytest.fixture
def team(strict_vault, models, tmp_path):
    """A vault with a database runbook only people read, a web runbook the deployer reads, and one real run of each."""
    set_model(strict_vault.root, "fake-hash")
    git(strict_vault.root, "commit", "-qm", "fake model", "--", "memvault.toml")
    add_scopes(strict_vault, DEPLOYER, trust_agents=True)
    v = Vault.open(strict_vault.root, embedder_factory=models)
    for name, text in (("db/restore", RESTORE), ("web/hello", "#!/bin/sh\necho hello from web\n")):
        script = tmp_path / "script.sh"
        script.write_text(text)
        script.chmod(0o755)
        v.procedures.add(name, script, source="user:admin")
        v.procedures.run(name, source="user:admin", stdout=-3, stderr=-3)
    return v


def server(v: Vault, source: str = "agent:deployer", **options):
    from memvault.interfaces.mcp import build_server

    return build_server(v, source=source, warm=False, **options)


def test_a_run_record_never_brings_a_runbook_outside_the_read_scope_into_recall(team):
    # The deployer reads every episode, so the record of a person's run of db/restore is its to find; the runbook
    # that run names is not. Recall used to put the run's procedure in its place, whole, with no scope check.
    asked, forged, asked_again = call(
        server(team),
        tool("recall", query="ran procedure db/restore"),
        # ... and a record it wrote itself, naming any runbook it likes, did the same
        tool("log_episode", text="zebra quokka", kind="procedure_run", meta={"name": "db/restore"}),
        tool("recall", query="zebra quokka"))
    for answer in (asked, asked_again):
        said = str(data(answer))
        assert "payroll" not in said and "procedures/db/restore" not in said
    assert any(h["id"] == "db/restore" for h in data(call(server(team, "user:admin"),
                                                         tool("recall", query="ran procedure db/restore"))[0])["hits"])


def test_a_runbook_s_runs_are_told_only_to_a_reader_of_the_episodes_that_record_them(team):
    (answer,) = call(server(team, "agent:web-only"), tool("recall", query="hello from web"))
    hits = data(answer)["hits"]
    assert [h["id"] for h in hits] == ["web/hello"]
    assert hits[0].get("runs", []) == []  # the run episode is outside episodes it may read


def test_a_model_cannot_log_a_run_it_did_not_make(team):
    # A procedure_run episode is what recall and the web view show as a runbook's run (exit code, commit): over
    # MCP only run_procedure records one. log_episode wrote one with any name, exit code and commit it claimed.
    before = len(list(team.episodes.iter()))
    forged, own = call(server(team, allow_run=True),
                       tool("log_episode", text="ran procedure web/hello (exit 0, 0.1 s)", kind="procedure_run",
                            meta={"name": "web/hello", "exit_code": 0, "commit": "a" * 40}),
                       tool("log_episode", text="checked the web tier", kind="summary"))
    assert "procedure_run" in error_text(forged) and "run_procedure" in error_text(forged)
    assert [e.kind for e in list(team.episodes.iter())[before:]] == ["summary"]


def test_an_argument_with_a_nul_byte_is_refused_naming_it_before_anything_runs(team):
    # JSON carries "\u0000"; a command line cannot. The run ended in "internal error, please report it".
    before = len(list(team.episodes.iter()))
    (answer,) = call(server(team, "user:admin", allow_run=True),
                     tool("run_procedure", name="web/hello", args=["ok", "a\x00b"]))
    said = error_text(answer)
    assert "internal error" not in said and "args[1]" in said and "NUL" in said
    assert len(list(team.episodes.iter())) == before


@pytest.mark.parametrize("name", ["web/../db/restore", "a/" * 500_000, "db/restore\x1b]0;owned\x07"])
def test_a_runbook_name_that_is_not_a_name_is_refused_as_such_and_never_echoed_whole(team, name):
    # For a scoped reader such a name was "outside its read scope", quoting all of it, twice (4 MB for a 1 MB
    # name) and with its control characters raw; no file can have it, so saying so tells nothing of the vault.
    for tool_name in ("get_procedure", "run_procedure"):
        (answer,) = call(server(team, allow_run=True), tool(tool_name, name=name))
        said = error_text(answer)
        assert "invalid" in said and len(said) < 400 and "\x1b" not in said and "\x07" not in said


def test_a_secret_refused_over_mcp_names_no_flag_the_model_cannot_pass(team):
    # The refusal said "use --allow-secret if this is not a secret": MCP has no such argument, and a model told to
    # get past the check is a model nudged to reword the secret until the detector misses it.
    secret = "the deploy key is AKIAIOSFODNN7EXAMPLE"
    fact, episode = call(server(team, "user:admin"), tool("set_fact", key="web/key", text=secret),
                         tool("log_episode", text=secret))
    for answer in (fact, episode):
        said = error_text(answer)
        assert "looks like a secret" in said and "--allow-secret" not in said
        assert "never stored over MCP" in said
    assert not (team.root / "facts/web/key.md").exists()


def test_a_long_run_does_not_stop_the_other_tools_from_answering(team, tmp_path):
    # Every tool ran on one thread, the run too: a runbook that took 15 minutes (its limit) kept recall, get_fact and
    # every other call, from this client or any other on the HTTP server, waiting for all of it.
    import asyncio

    from mcp import Client

    gate = tmp_path / "gate"
    script = tmp_path / "slow.sh"
    script.write_text(f"#!/bin/sh\ni=0\nwhile [ ! -e {gate} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n"
                      "echo done\n")  # 30 s at most, should the test fail
    script.chmod(0o755)
    team.procedures.add("web/slow", script, source="user:admin")

    async def go():
        async with Client(server(team, "user:admin", allow_run=True)) as client:
            run = asyncio.create_task(client.call_tool("run_procedure", {"name": "web/slow"}))
            await asyncio.sleep(0.3)
            listed = await asyncio.wait_for(client.call_tool("list_facts", {}), 20)
            running = not run.done()
            gate.touch()
            return listed, running, await run

    listed, running_meanwhile, ran = asyncio.run(go())
    assert running_meanwhile and data(listed)["problems"] == []
    assert data(ran)["stdout"] == "done\n" and data(ran)["exit_code"] == 0
    assert [e.kind for e in team.episodes.list(limit=1)] == ["procedure_run"]


def test_a_use_not_counted_again_today_is_said_as_the_cli_says_it(team):
    # An untrusted source's use counts once a memory a day: the CLI said so, the MCP answer was `counted: []` and
    # no word (a model reporting again learns nothing, and keeps trying).
    from memvault.interfaces.mcp import build_server

    first, again = call(build_server(team, source="web:helper", warm=False),
                        tool("used", refs=["procedure:web/hello"]), tool("used", refs=["procedure:web/hello"]))
    assert data(first) == {"counted": ["procedure:web/hello"], "warnings": []}
    assert data(again)["counted"] == []
    assert [w for w in data(again)["warnings"] if w.startswith("procedure:web/hello:") and "once a day" in w]


def test_the_token_given_in_the_environment_is_not_handed_to_what_the_server_starts(http_server, seeded, tmp_path,
                                                                                   monkeypatch):
    # MEMVAULT_MCP_TOKEN stayed in the server's environment, so every runbook it ran inherited it: one that prints
    # its environment (a common check) handed the token to the model, in run_procedure's stdout.
    from test_mcp import bearer

    script = tmp_path / "env.sh"
    script.write_text("#!/bin/sh\necho \"token=${MEMVAULT_MCP_TOKEN:-none}\"\n")
    script.chmod(0o755)
    seeded.procedures.add("ops/env", script, source="user:admin")
    monkeypatch.setenv("MEMVAULT_MCP_TOKEN", "tok-from-the-environment-1234")
    url = http_server("--allow-run")

    async def go():
        async with bearer(url, "tok-from-the-environment-1234") as client:
            return data(await client.call_tool("run_procedure", {"name": "ops/env"}))

    import asyncio

    ran = asyncio.run(go())
    assert ran["stdout"] == "token=none\n"


def test_a_cancelled_run_is_stopped_and_recorded_as_interrupted(team, tmp_path):
    # A person who cancels a runaway runbook in their agent (Esc) expects it to stop: it ran on to its end or its
    # 15 minutes, and the client's session could not close until then.
    import asyncio
    import time

    from mcp import Client

    marker = tmp_path / "alive"
    script = tmp_path / "slow.sh"
    script.write_text(f"#!/bin/sh\nfor i in $(seq 1 40); do echo $i >> {marker}; sleep 0.25; done\n")
    script.chmod(0o755)
    team.procedures.add("web/slow", script, source="user:admin")

    async def go():
        async with Client(server(team, "user:admin", allow_run=True)) as client:
            run = asyncio.create_task(client.call_tool("run_procedure", {"name": "web/slow"}))
            while not marker.exists():
                await asyncio.sleep(0.05)
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
            return data(await client.call_tool("list_facts", {}))

    import contextlib

    started = time.monotonic()
    asyncio.run(go())
    took = time.monotonic() - started
    lines = len(marker.read_text().split())
    time.sleep(0.6)
    assert len(marker.read_text().split()) == lines < 40 and took < 8

    (last,) = team.episodes.list(limit=1)
    assert last.kind == "procedure_run" and last.meta["name"] == "web/slow" and "interrupted" in last.text



def test_a_runbook_run_over_mcp_reads_no_input_of_the_servers(team, tmp_path):
    """A runbook that asks 'Continue? [y/N]' (`read answer`) or reads its input, run by a model over an MCP server
    started from a terminal (`memvault mcp --http` in a shell): the script read the server's stdin, the person's
    terminal, so it waited there, up to its 15 minutes, for a line no model can type, and took whatever the person
    typed next as the answer to a question they never saw. Its input is empty now, as for any unattended run. (The
    stdio server's SDK already points fd 0 elsewhere; this is the server's own stdin, whatever it is.)"""
    import os

    script = tmp_path / "ask.sh"
    script.write_text("#!/bin/sh\nprintf 'Drop the table? '\nread answer\necho \"answer=[$answer]\"\n")
    script.chmod(0o755)
    team.procedures.add("web/ask", script, source="user:admin")
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    try:
        os.write(write_end, b"yes\n")  # what the person at the server's terminal types, for something else
        os.dup2(read_end, 0)
        (answer,) = call(server(team, "user:admin", allow_run=True), tool("run_procedure", name="web/ask"))
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    ran = data(answer)
    assert ran["exit_code"] == 0 and "answer=[]" in ran["stdout"], ran


def test_a_secret_a_runbook_prints_is_redacted_in_what_mcp_returns_to_the_model(team, tmp_path):
    """A runbook that prints a credential (a connection string it reads, an `env` dump) handed it whole to the
    model over MCP, and so to the model's provider: the tail of its output went back as it was. Each secret the
    detector finds is now written as a placeholder in what the tool returns, counted in ``redacted``; the rest of the
    output is kept, and a person runs the script with `memvault proc run` to see all of it."""
    key = "AKIA" + "Q3W5E7R9T2Y4U6I8"  # shaped like an AWS access key id, made up
    script = tmp_path / "creds.sh"
    creds = tmp_path / "deploy.key"  # what the runbook reads: never in the vault
    creds.write_text(key + "\n")
    script.write_text(f"#!/bin/sh\necho \"deploy key $(cat '{creds}') loaded\"\necho \"warning: $(cat '{creds}')\" >&2\n")
    script.chmod(0o755)
    team.procedures.add("web/creds", script, source="user:admin")
    (answer,) = call(server(team, "user:admin", allow_run=True), tool("run_procedure", name="web/creds"))
    ran = data(answer)
    assert ran["exit_code"] == 0 and "deploy key" in ran["stdout"] and "loaded" in ran["stdout"], ran
    assert key not in json.dumps(ran) and "<redacted:" in ran["stdout"] and "<redacted:" in ran["stderr"]
    assert ran["redacted"] == 2
