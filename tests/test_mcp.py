"""The MCP server: tools as thin adapters, provenance stamped by the server, stdio and streamable HTTP.

In-process tests talk to ``build_server`` through the SDK's own ``Client`` with the fake embedder. Subprocess
tests spawn ``python -m memvault.mcp_server`` (stdio, and HTTP on 127.0.0.1 only) with a model that is
unavailable offline, so recall there is keyword-only and fast.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from memvault import Vault  # noqa: E402
from memvault.rules.errors import InvalidValue, MemvaultError  # noqa: E402
from memvault.interfaces.guard import BearerGuard  # noqa: E402
from memvault.interfaces.mcp import (  # noqa: E402
    TOKEN_ENV, build_server, is_loopback, parse_address, resolve_token, serve)
from memvault.rules import frontmatter_edit as fm  # noqa: E402
from conftest import REPO_ROOT, git  # noqa: E402
from fake_embedder import set_model

TOOLS = {"recall", "get_fact", "set_fact", "list_facts", "log_episode", "list_episodes", "get_procedure",
         "list_procedures", "used"}


def seed(v: Vault, tmp_path: Path) -> Vault:
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", category="database",
                importance=0.9, tags=["postgres"], source="user:admin")
    v.facts.set("web/haproxy", "HAProxy balances web1 web2 web3 with health checks.", category="web",
                source="user:admin")
    script = tmp_path / "hello.sh"
    script.write_text("#!/usr/bin/env bash\n# description: Say hello\necho \"hello $1\"\necho oops >&2\nexit 3\n")
    script.chmod(0o755)
    v.procedures.add("ops/hello", script, source="user:admin")
    runbook = tmp_path / "restore.md"
    runbook.write_text("---\ndescription: Restore the database\n---\n# Restore\n\n1. Stop the app.\n2. Restore.\n")
    v.procedures.add("ops/restore", runbook, source="user:admin")
    return v


@pytest.fixture
def fake(vault, models, tmp_path):
    """The test vault on the fake embedder, seeded."""
    set_model(vault.root, "fake-hash")
    git(vault.root, "commit", "-qm", "fake model", "--", "memvault.toml")
    return seed(Vault.open(vault.root, embedder_factory=models), tmp_path)



def call(server, *steps):
    """Run ``steps`` (async functions of a connected Client) against an in-process server; return results."""

    async def go():
        async with Client(server) as client:
            return [await step(client) for step in steps]

    return asyncio.run(go())


def tool(tool_name, /, **arguments):
    return lambda client: client.call_tool(tool_name, arguments)


def data(result):
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result):
    assert result.is_error
    return result.content[0].text


# ---------------------------------------------------------------------------------------------- in-process
def test_tools_listed_and_run_procedure_only_with_allow_run(fake):
    async def names(client):
        return {t.name for t in (await client.list_tools()).tools}

    assert call(build_server(fake, source="agent:t"), names) == [TOOLS]
    assert call(build_server(fake, source="agent:t", allow_run=True), names) == [TOOLS | {"run_procedure"}]


def test_recall_is_hybrid_with_the_model_loaded_once(fake, models):
    server = build_server(fake, source="agent:t")
    first, second = call(server, tool("recall", query="which port does the primary database use", k=3),
                         tool("recall", query="haproxy health checks", kinds=["fact"]))
    first, second = data(first), data(second)
    assert first["mode"] == "hybrid" and first["hits"][0]["id"] == "db/primary"
    assert first["hits"][0]["text"] == "The primary database listens on 10.8.0.4 port 5432."
    assert second["hits"][0]["id"] == "web/haproxy" and {h["kind"] for h in second["hits"]} == {"fact"}
    assert models.loads == 1


def test_recall_is_keyword_only_with_a_warning_when_the_model_is_unavailable(fake, models):
    models.unavailable.add("fake-hash")
    [result] = call(build_server(fake, source="agent:t"), tool("recall", query="primary database port"))
    result = data(result)
    assert result["mode"] == "keyword" and result["hits"][0]["id"] == "db/primary"
    assert any("unavailable" in w and "keyword-only" in w for w in result["warnings"])


def test_set_fact_stamps_the_server_source_whatever_the_model_claims(fake):
    server = build_server(fake, source="agent:deployer")
    [result] = call(server, tool("set_fact", key="app/version", text="The app runs v2.15.1.", tags=["deploy"],
                                 importance=0.7, source="user:root", author="user:root"))
    result = data(result)
    assert result["source"] == "agent:deployer" and result["quarantined"] is False
    doc = fm.parse((fake.root / "facts/app/version.md").read_text())
    assert doc.meta["source"] == "agent:deployer" and doc.meta["tags"] == ["deploy"]
    assert "agent:deployer" in git(fake.root, "log", "-1", "--format=%an %B", "--", "facts/app/version.md")


def test_untrusted_source_is_quarantined(fake):
    server = build_server(fake, source="web:example.com")
    [result] = call(server, tool("set_fact", key="db/primary", text="The database moved to 10.9.9.9."))
    result = data(result)
    assert result["quarantined"] is True and result["path"] == "inbox/db/primary.md"
    assert "10.8.0.4" in fake.facts.get("db/primary").text  # facts/ untouched


def test_log_and_list_episodes(fake):
    server = build_server(fake, source="agent:deployer")
    logged, listed, none = call(
        server,
        tool("log_episode", text="Rolled out v2.15.1.", tags=["deploy"], meta={"version": "v2.15.1"},
             source="user:admin"),
        tool("list_episodes", since="1h", source="agent:*"),
        tool("list_episodes", until="2000-01-01T00:00:00Z"),
    )
    logged = data(logged)
    assert logged["source"] == "agent:deployer" and logged["meta"] == {"version": "v2.15.1"}
    assert [e["id"] for e in data(listed)["episodes"]] == [logged["id"]]
    assert data(none)["episodes"] == []


def test_procedures_whole_with_provenance(fake):
    server = build_server(fake, source="agent:t")
    got, listed = call(server, tool("get_procedure", name="ops/restore"), tool("list_procedures"))
    got = data(got)
    assert got["text"] == (fake.root / "procedures/ops/restore.md").read_text()
    assert got["commit"] == git(fake.root, "log", "-1", "--format=%H", "--", "procedures/ops/restore.md")
    assert got["blob"] and got["dirty"] is False
    listed = data(listed)["procedures"]
    assert [p["name"] for p in listed] == ["ops/hello", "ops/restore"] and "text" not in listed[0]


def test_run_procedure_returns_output_records_source_and_refuses_dirty(fake):
    server = build_server(fake, source="agent:runner", allow_run=True)
    ran, markdown = call(server, tool("run_procedure", name="ops/hello", args=["world"]),
                         tool("run_procedure", name="ops/restore"))
    ran = data(ran)
    assert (ran["exit_code"], ran["stdout"], ran["stderr"]) == (3, "hello world\n", "oops\n")
    [episode] = fake.episodes.list(kind="procedure_run")
    assert episode.id == ran["episode_id"] and episode.source == "agent:runner"
    assert episode.meta["commit"] == ran["commit"] and episode.meta["args"] == ["world"]
    assert "markdown runbook" in error_text(markdown)

    script = fake.root / "procedures/ops/hello.sh"
    script.write_text(script.read_text() + "echo changed\n")
    [dirty] = call(server, tool("run_procedure", name="ops/hello", allow_dirty=True))
    assert "uncommitted changes" in error_text(dirty) and "--allow-dirty" not in error_text(dirty)
    assert len(fake.episodes.list(kind="procedure_run")) == 1


def test_library_errors_are_tool_errors_and_the_server_goes_on(fake):
    server = build_server(fake, source="agent:t")
    missing, bad_key, bad_since, after = call(
        server, tool("get_fact", key="no/such"), tool("set_fact", key="../etc", text="x"),
        tool("list_episodes", since="last tuesday"), tool("get_fact", key="db/primary"))
    assert error_text(missing).endswith("no fact with key 'no/such'") and "\n" not in error_text(missing)
    assert "invalid key" in error_text(bad_key) and "Traceback" not in error_text(bad_key)
    assert "since" in error_text(bad_since)
    assert data(after)["key"] == "db/primary"



def test_an_oversized_episode_names_the_tool_argument_at_fault(fake):
    """log_episode past [limits] episode_bytes said "episode: ...": the agent gave `text` or `meta`."""
    server = build_server(fake, source="agent:t")
    long_text, long_meta = call(server, tool("log_episode", text="word " * 14_000),
                                tool("log_episode", text="short", meta={"log": "x" * 70_000}))
    assert "text: " in error_text(long_text) and "episode_bytes" in error_text(long_text)
    assert "meta: " in error_text(long_meta) and "episode_bytes" in error_text(long_meta)


def test_source_is_validated(fake):
    with pytest.raises(InvalidValue):
        build_server(fake, source="deployer")


# ------------------------------------------------------------------------------------------ HTTP pieces
def test_address_and_loopback_checks():
    assert parse_address("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_address("[::1]:9000") == ("::1", 9000)
    for bad in ("8765", "host:", "host:99999", ":80"):
        with pytest.raises(InvalidValue):
            parse_address(bad)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "::1", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.com", ""))


def test_non_loopback_needs_a_token(monkeypatch, fake):
    monkeypatch.delenv("MEMVAULT_MCP_TOKEN", raising=False)
    with pytest.raises(MemvaultError, match="without a bearer token"):
        resolve_token("0.0.0.0", None, env=TOKEN_ENV, what="MCP")
    with pytest.raises(MemvaultError, match="not a loopback address"):
        serve(fake, source="agent:t", http="0.0.0.0:8765")  # refused before anything binds
    assert resolve_token("127.0.0.1", None, env=TOKEN_ENV, what="MCP") is None  # serve() then makes one
    assert resolve_token("0.0.0.0", "s3cret", env=TOKEN_ENV, what="MCP") == "s3cret"
    monkeypatch.setenv("MEMVAULT_MCP_TOKEN", "from-env")
    assert resolve_token("10.0.0.5", None, env=TOKEN_ENV, what="MCP") == "from-env"


def test_bearer_middleware():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    async def request(headers, kind="http"):
        sent = []

        async def send(message):
            sent.append(message)

        guard = BearerGuard(app, token="s3cret", bind="127.0.0.1", port=8765, hint="")
        await guard({"type": kind, "method": "POST", "headers": [(b"host", b"127.0.0.1:8765"), *headers]}, None, send)
        return sent

    async def go():
        assert (await request([]))[0]["status"] == 401
        assert (await request([(b"authorization", b"Bearer wrong")]))[0]["status"] == 401
        assert (await request([(b"authorization", b"Basic s3cret")]))[0]["status"] == 401
        assert (await request([(b"authorization", b"bearer s3cret")])) == []
        assert (await request([], "websocket"))[0]["type"] == "websocket.close"
        assert (await request([], "lifespan")) == []

    asyncio.run(go())
    assert seen == ["http", "lifespan"]


# ------------------------------------------------------------------------------------------ subprocesses
def server_env(**extra):
    # A model that cannot load offline: recall is keyword-only and nothing is downloaded.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT), **extra}


def stdio(vault_root, *args, errlog):
    params = StdioServerParameters(command=sys.executable, env=server_env(),
                                   args=["-m", "memvault.mcp_server", "--vault", str(vault_root), *args])
    return Client(stdio_client(params, errlog=errlog))


@pytest.fixture
def seeded(vault, tmp_path):
    return seed(vault, tmp_path)


def test_stdio_server(seeded, tmp_path):
    async def go():
        with open(tmp_path / "stderr.log", "w") as errlog:
            async with stdio(seeded.root, "--source", "agent:deployer", errlog=errlog) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                recalled = data(await client.call_tool("recall", {"query": "primary database port"}))
                written = data(await client.call_tool(
                    "set_fact", {"key": "app/version", "text": "v2.15.1 is live.", "source": "user:root"}))
                logged = data(await client.call_tool("log_episode", {"text": "Deployed v2.15.1."}))
                listed = data(await client.call_tool("list_episodes", {"since": "7d"}))
                proc = data(await client.call_tool("get_procedure", {"name": "ops/hello"}))
                missing = await client.call_tool("get_fact", {"key": "no/such"})
                alive = data(await client.call_tool("get_fact", {"key": "db/primary"}))
            async with stdio(seeded.root, "--source", "web:example.com", "--allow-run", errlog=errlog) as client:
                names_run = {t.name for t in (await client.list_tools()).tools}
                proposed = data(await client.call_tool("set_fact", {"key": "web/cdn", "text": "Use the CDN."}))
        return names, recalled, written, logged, listed, proc, missing, alive, names_run, proposed

    names, recalled, written, logged, listed, proc, missing, alive, names_run, proposed = asyncio.run(go())
    assert names == TOOLS and names_run == TOOLS | {"run_procedure"}
    assert recalled["mode"] == "keyword" and recalled["hits"][0]["id"] == "db/primary"
    assert any("unavailable" in w for w in recalled["warnings"])
    assert written["source"] == "agent:deployer"
    assert fm.parse((seeded.root / "facts/app/version.md").read_text()).meta["source"] == "agent:deployer"
    assert logged["source"] == "agent:deployer" and logged["id"] in [e["id"] for e in listed["episodes"]]
    assert proc["text"] == (seeded.root / "procedures/ops/hello.sh").read_text() and len(proc["commit"]) == 40
    assert error_text(missing).endswith("no fact with key 'no/such'")
    assert alive["key"] == "db/primary"
    assert proposed["quarantined"] is True and (seeded.root / "inbox/web/cdn.md").is_file()
    assert not (seeded.root / "facts/web/cdn.md").exists()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(seeded, tmp_path):
    """Start ``python -m memvault.mcp_server --http 127.0.0.1:PORT [args]``; yields the endpoint URL."""
    procs = []

    def start(*args):
        port = free_port()
        log = open(tmp_path / f"http-{port}.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "memvault.mcp_server", "--vault", str(seeded.root),
                                 "--http", f"127.0.0.1:{port}", *args],
                                env=server_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        procs.append((proc, log))
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                log.flush()
                return f"http://127.0.0.1:{port}/mcp"
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail((tmp_path / f"http-{port}.log").read_text())
                time.sleep(0.1)

    def token(url):
        """The token the server printed once on stderr (made for its run)."""
        port = url.split(":")[2].split("/")[0]
        found = re.findall(r"Authorization: Bearer (\S+) \(made for this run", (tmp_path / f"http-{port}.log").read_text())
        assert len(found) == 1, "the token is printed exactly once"
        return found[0]

    start.token = token
    yield start
    for proc, log in procs:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def post(url, headers=()):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream", **dict(headers)})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def bearer(url, token):
    """The official MCP client over streamable HTTP, sending ``Authorization: Bearer <token>``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    @contextlib.asynccontextmanager
    async def connect():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                yield client

    return connect()


def test_http_on_loopback_with_the_default_source(http_server):
    url = http_server()

    async def go():
        async with bearer(url, http_server.token(url)) as client:
            recalled = data(await client.call_tool("recall", {"query": "primary database port"}))
            logged = data(await client.call_tool("log_episode", {"text": "Checked the database port."}))
            return recalled, logged

    recalled, logged = asyncio.run(go())
    assert recalled["hits"][0]["id"] == "db/primary"
    assert logged["source"] == "agent:mcp"  # a model is not the person who started the server


def test_http_with_a_token_refuses_requests_without_it(http_server, tmp_path):
    import httpx2

    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    token_file.chmod(0o600)
    url = http_server("--token-file", str(token_file))
    assert post(url) == 401
    assert post(url, {"authorization": "Bearer wrong"}) == 401

    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"}) as http:
            from mcp.client.streamable_http import streamable_http_client

            async with Client(streamable_http_client(url, http_client=http)) as client:
                return data(await client.call_tool("get_fact", {"key": "db/primary"}))

    assert asyncio.run(go())["source"] == "user:admin"
