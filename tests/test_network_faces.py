"""One guard for every network face (memvault.interfaces.guard): the MCP server's streamable HTTP and the web view
both want a token made for the run even on loopback, check Host and Origin, and the web view's browser session
cannot be replayed from another local port; the token swap redirects only to paths on this server.

Real servers on real sockets: ``python -m memvault.mcp_server --http`` driven by the official MCP client, and the
web view under uvicorn driven by an HTTP client with a cookie jar (what a browser keeps) beside a listener on another
port of 127.0.0.1 that records what the browser sends it (what another local user's server would see)."""
from __future__ import annotations

import asyncio
import http.client
import http.server
import threading
from urllib.parse import unquote, urljoin, urlsplit

import pytest

pytest.importorskip("mcp")

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402

from memvault.interfaces import guard, mcp as mcp_face  # noqa: E402
from memvault.interfaces.web import build  # noqa: E402
from memvault.interfaces.web.security import Guard, safe_path  # noqa: E402

from test_mcp import bearer, data, http_server, post, seeded  # noqa: E402,F401 - fixtures
from web_fixtures import seeded_copy, seeded_template, serve  # noqa: E402,F401 - fixtures


# ------------------------------------------------------------------------------------------------------ MCP
def official_client(url, headers=None):
    """The official client connecting and listing tools: (the error it ended with or None, HTTP statuses seen)."""
    statuses = []

    async def record(response):
        statuses.append(response.status_code)

    async def go():
        async with httpx2.AsyncClient(headers=headers or {}, event_hooks={"response": [record]}) as http:
            from mcp.client.streamable_http import streamable_http_client

            async with Client(streamable_http_client(url, http_client=http)) as client:
                await client.list_tools()

    try:
        asyncio.run(go())
    except Exception as exc:  # noqa: BLE001 - an ExceptionGroup from the client's task group
        return exc, statuses
    return None, statuses


def test_mcp_http_on_loopback_wants_the_token_it_printed(http_server, seeded):
    url = http_server("--allow-run")
    token = http_server.token(url)
    assert len(token) >= 24
    # no token, a wrong token: 401, for raw requests and for the official client alike
    assert post(url) == 401
    assert post(url, {"authorization": "Bearer wrong"}) == 401
    assert post(url, {"authorization": f"Basic {token}"}) == 401
    for headers in (None, {"Authorization": "Bearer wrong"}):
        failed, statuses = official_client(url, headers)
        assert failed is not None and statuses and set(statuses) == {401}, (failed, statuses)
    failed, statuses = official_client(url, {"Authorization": f"Bearer {token}"})
    assert failed is None and statuses and all(s < 300 for s in statuses), (failed, statuses)
    # the printed token works: facts are read and the procedure runs only with it
    async def go():
        async with bearer(url, token) as client:
            fact = data(await client.call_tool("get_fact", {"key": "db/primary"}))
            ran = await client.call_tool("run_procedure", {"name": "ops/hello", "args": ["x"]})
            return fact, ran

    fact, ran = asyncio.run(go())
    assert fact["key"] == "db/primary" and "hello x" in ran.content[0].text


def test_mcp_http_refuses_a_foreign_host_or_origin_even_with_the_token(http_server):
    url = http_server()
    auth = {"authorization": f"Bearer {http_server.token(url)}"}
    assert post(url, auth) == 400  # past the guard: the SDK's answer to a ping outside a session
    assert post(url, {**auth, "host": "evil.example"}) == 421  # a rebinding page's name for 127.0.0.1
    assert post(url, {**auth, "host": f"evil.example:{urlsplit(url).port}"}) == 421
    assert post(url, {**auth, "host": "127.0.0.1:1"}) == 421  # another port
    assert post(url, {**auth, "origin": "http://evil.example"}) == 403
    assert post(url, {**auth, "origin": "null"}) == 403


def test_mcp_http_given_a_token_does_not_print_it(http_server, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-given-token\n")
    token_file.chmod(0o600)
    url = http_server("--token-file", str(token_file))
    log = (tmp_path / f"http-{urlsplit(url).port}.log").read_text()
    assert "s3cret-given-token" not in log and "Authorization: Bearer <the token given>" in log
    assert post(url) == 401 and post(url, {"authorization": "Bearer s3cret-given-token"}) == 400


def test_one_guard_for_every_network_face(seeded):
    """MCP and the web view run the same rules from one module: no second copy of the checks to drift."""
    from mcp.server.mcpserver import MCPServer

    app = mcp_face.http_app(MCPServer("t"), host="127.0.0.1", port=8765, token="t" * 24)
    assert isinstance(app, guard.BearerGuard) and isinstance(app.rules, guard.Rules)
    web_app, _token = build(seeded, port=8787, refresh=False)
    assert isinstance(web_app.guard.rules, guard.Rules)
    assert mcp_face.resolve_token is guard.resolve_token


# ------------------------------------------------------------------------------------------------- web view
class Recorder(http.server.BaseHTTPRequestHandler):
    """Another local user's server on another port: records the Cookie header of every request."""

    seen: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        Recorder.seen.append(self.headers.get("cookie") or "")
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def web(seeded_copy):
    """The web view of a seeded vault under uvicorn on a free port: (app, origin, token)."""
    with serve(seeded_copy(), refresh=False) as view:
        yield view.app, view.origin, view.token


@pytest.fixture
def other_port():
    Recorder.seen = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_session_cookie_replayed_from_another_local_port_is_refused(web, other_port):
    app, origin, token = web
    vault_inbox = app.web.vault.root / "inbox" / "net" / "vpn.md"
    with httpx2.Client(follow_redirects=True) as browser:  # keeps cookies as a browser does: by host and path, whatever the port
        r = browser.get(f"{origin}/?token={token}")
        assert r.status_code == 200 and str(r.url) == f"{origin}{app.guard.root}/"
        csrf = app.guard.csrf_token()  # the attacker is even given the CSRF token
        # the browser visits another local user's server: what does it send there?
        for path in ["/", "/inbox", "/facts", app.guard.root[:-1] + "/"]:
            browser.get(other_port + path)
        captured = Recorder.seen
        assert len(captured) == 4 and not any(app.guard.cookie_name in c for c in captured), captured
        # worst case: the attacker has the cookie value itself (not only what reached their port)
        jar = [(c.name, c.value, c.path) for c in browser.cookies.jar if c.name == app.guard.cookie_name]
        assert len(jar) == 1 and jar[0][2] == app.guard.root, jar
        stolen = f"{app.guard.cookie_name}={jar[0][1]}"
        for cookie in [*captured, stolen]:
            with httpx2.Client() as attacker:
                for path in ["/", "/inbox?format=json", "/fact/db/primary", "/live", "/static/app.js"]:
                    assert attacker.get(origin + path, headers={"cookie": cookie}).status_code == 401, path
                r = attacker.post(f"{origin}/inbox", headers={"cookie": cookie},
                                  data={"csrf": csrf, "action": "accept", "key": "net/vpn"})
                assert r.status_code == 401
                # under the root, without the session (someone saw the address bar): refused as well
                r = attacker.post(f"{origin}{app.guard.root}/inbox",
                                  data={"csrf": csrf, "action": "accept", "key": "net/vpn"})
                assert r.status_code == 401
        assert vault_inbox.exists(), "the proposal was accepted by a replayed session"
        # the browser itself, which holds both, reads and accepts: the refusals above are the guard's doing
        assert browser.get(f"{origin}{app.guard.root}/inbox?format=json").status_code == 200
        r = browser.post(f"{origin}{app.guard.root}/inbox", data={"csrf": csrf, "action": "accept", "key": "net/vpn"})
        assert r.status_code == 200 and not vault_inbox.exists()
        assert (app.web.vault.root / "facts" / "net" / "vpn.md").exists()


REDIRECTS = ["//evil.example/", "//evil.example/x?y=1", "/\\evil.example/", "/\\\\evil.example", "\\\\evil.example",
             "/%2F%2Fevil.example/", "/%2f/evil.example", "/%5Cevil.example", "/%5C%5Cevil.example", "///evil.example",
             "/%09/evil.example", "/%0d%0aLocation:%20http://evil.example/", "/..//evil.example", "/.%2F%2Fevil.example",
             "http://evil.example/", "https://evil.example/facts", "//127.0.0.1@evil.example/",
             "/%E2%81%84%E2%81%84evil.example", "/facts/../..//evil.example"]


def test_the_token_swap_redirects_only_to_paths_on_this_server(web):
    app, origin, token = web
    port = int(origin.rsplit(":", 1)[1])
    for target in REDIRECTS + [app.guard.root + "//evil.example/", app.guard.root + "/\\evil.example"]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        sep = "&" if "?" in target else "?"
        conn.putrequest("GET", f"{target}{sep}token={token}", skip_host=True)
        conn.putheader("Host", f"127.0.0.1:{port}")
        conn.endheaders()
        r = conn.getresponse()
        location = r.getheader("location")
        r.read()
        conn.close()
        if r.status != 303:  # refused outright (the server could not read the target): also on-site
            assert r.status in (400, 401, 404), (target, r.status)
            continue
        assert location.startswith(app.guard.root + "/"), (target, location)
        assert "\\" not in unquote(location) and "//" not in unquote(location).split("?")[0], (target, location)
        where = urlsplit(urljoin(f"{origin}/", location))
        assert (where.scheme, where.netloc) == ("http", f"127.0.0.1:{port}"), (target, location)
    # a path of the view keeps its page and its query
    r = httpx2.get(f"{origin}/facts?prefix=db&token={token}", follow_redirects=False)
    assert r.headers["location"] == f"{app.guard.root}/facts?prefix=db"


def test_safe_path_keeps_paths_and_maps_the_rest_to_the_root_page():
    assert safe_path("/facts") == "/facts" and safe_path("/fact/db/primary") == "/fact/db/primary"
    for bad in ["//evil.example", "/\\evil", "\\\\evil", "http://evil.example/", "", "evil", "/a\\b", "/\t/x",
                "/\x00", "/\u2044\u2044evil", "/ x"]:
        assert safe_path(bad) == "/", bad


def test_guard_needs_a_token_and_the_root_is_per_run():
    with pytest.raises(ValueError):
        guard.Rules(token="", bind="127.0.0.1", port=1)
    one, two = (Guard(None, token="t" * 24, bind="127.0.0.1", port=8787) for _ in range(2))
    assert one.root != two.root and len(one.root) > 20 and one.csrf_token() != two.csrf_token()
