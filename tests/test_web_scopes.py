"""The web view acts as one source (``memvault ui --source``, else MEMVAULT_SOURCE) and its [scopes] apply to every
page: facts, the recall playground, the timeline, procedures, the inbox (its count too), the overview's counts; it
reviews only where its scope grants review and never its own proposal; the scopes page shows who may do what, every
name escaped. Over HTTP against the real server: ``memvault ui`` in a subprocess, and uvicorn in a thread."""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time

import urllib.error
import urllib.parse
import urllib.request

import pytest

from memvault import Vault

from conftest import REPO_ROOT, git, with_settings
from web_fixtures import serve

MARKUP = "<b>x</b>"
SCOPES = f"""
[scopes."agent:deployer"]
read = ["facts/web/**", "facts/net/**", "procedures/web/", "facts/{MARKUP}/**"]
propose = ["facts/web/**"]
review = ["facts/net/**"]
"""
DB = "Our postgres primary listens on port 5432 on db01."
TOKEN = "t0ken-for-the-scoped-view-tests-0123456789"


@pytest.fixture
def team(strict_vault, tmp_path):
    v = with_settings(strict_vault, SCOPES, "scopes")
    v.facts.set("web/nginx", "nginx on web01 serves the shop.", tags=["shop"], source="user:admin")
    v.facts.set("db/main", DB, tags=["dba"], source="user:admin")
    v.facts.set("net/gateway", "The VPN gateway is vpn.example.net on UDP 1195.", source="user:admin")
    v.facts.set("net/vpn", "The VPN gateway is vpn.example.net on UDP 1194.", source="agent:scraper")
    v.facts.set("net/pg", "Our postgres primary runs on port 5433 on db01.", source="agent:scraper")
    v.facts.set("db/pool", "The db pool holds 50 connections.", source="agent:scraper")
    v.facts.set("web/tls", "TLS certificates on web01 renew on the 1st.", source="agent:deployer")
    for name in ("web/reload", "db/restore"):
        script = tmp_path / (name.replace("/", "-") + ".sh")
        script.write_text(f"#!/bin/sh\n# {name}: db01 maintenance\necho {name}\n")
        script.chmod(0o755)
        v.procedures.add(name, script, source="user:admin")
    v.episodes.append("restored db01 from the nightly dump", source="user:admin")
    v.recall("db01 port", k=3, source="user:admin", mode="keyword")
    return v


@pytest.fixture
def ui(team, tmp_path):
    """``memvault ui --source agent:deployer --port 0`` in a subprocess; yields an HTTP client at its origin."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT), "MEMVAULT_UI_TOKEN": TOKEN}
    env.pop("MEMVAULT_SOURCE", None)
    err = open(tmp_path / "ui.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(team.root), "ui", "--port", "0",
                             "--source", "agent:deployer"], stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 60
        origin = None
        while origin is None and time.monotonic() < deadline and proc.poll() is None:
            err.seek(0)
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", err.read())
            origin = f"http://127.0.0.1:{found.group(1)}" if found else None
            time.sleep(0.1)
        err.seek(0)
        assert origin, f"the view did not start: {err.read()}"
        assert "acting as agent:deployer" in err.read()
        yield Client(origin)
    finally:
        proc.terminate()
        proc.wait(20)
        err.close()


class Response:
    def __init__(self, status: int, body: bytes, headers) -> None:
        self.status_code, self.text, self.headers = status, body.decode("utf-8", "replace"), headers

    def json(self):
        return json.loads(self.text)


class Client:
    """A script's HTTP client (urllib): ``Authorization: Bearer`` at the view's origin; redirects not followed."""

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.opener = urllib.request.build_opener(self._NoRedirect)

    def request(self, method: str, path: str, data: dict | None = None) -> Response:
        body = urllib.parse.urlencode(data, doseq=True).encode() if data is not None else None
        req = urllib.request.Request(self.origin + path, data=body, method=method,
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        try:
            with self.opener.open(req, timeout=60) as answer:
                return Response(answer.status, answer.read(), answer.headers)
        except urllib.error.HTTPError as exc:
            return Response(exc.code, exc.read(), exc.headers)

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def post(self, path: str, data: dict, follow_redirects: bool = False) -> Response:
        return self.request("POST", path, data)


def csrf(client) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get("/inbox").text).group(1)


def test_a_scoped_view_shows_only_its_read_scope_on_every_page(ui, team):
    facts = ui.get("/facts?format=json").json()
    assert "facts" in facts, facts
    assert sorted(f["key"] for f in facts["facts"]) == ["net/gateway", "web/nginx"] and facts["total"] == 2
    assert [t["tag"] for t in facts["tags"]] == ["shop"]
    assert {e["name"] for e in facts["tree"]} == {"net", "web"}
    page = ui.get("/facts").text
    # the tag as a word: a page's hex tokens hold "dba" by chance (e6dbaf1...)
    assert "db/main" not in page and not re.search(r"\bdba\b", page)
    refused = ui.get("/fact/db/main")
    assert refused.status_code == 403 and "5432" not in refused.text and "outside its read scope" in refused.text
    assert ui.get("/fact/web/nginx").status_code == 200
    played = ui.get("/recall?q=db01+primary+port+postgres&mode=keyword&format=json").json()["result"]
    assert "5432" not in json.dumps(played) and "db/main" not in json.dumps(played)
    assert ui.get("/timeline?format=json").json()["episodes"] == []
    assert "nightly dump" not in ui.get("/timeline").text
    procs = ui.get("/procedures?format=json").json()["procedures"]
    assert [p["name"] for p in procs] == ["web/reload"]
    there, missing = ui.get("/procedure/db/restore"), ui.get("/procedure/db/nothing")
    assert there.status_code == missing.status_code == 403
    assert there.text.replace("db/restore", "N") == missing.text.replace("db/nothing", "N")
    overview = ui.get("/?format=json").json()
    assert overview["counts"]["fact"] == 2 and overview["counts"]["procedure"] == 1 and overview["inbox"] == 3
    assert "chunks" not in overview["index"] and overview["plots"]["growth"]["days"] == []
    assert sum(r["count"] for r in overview["sources"]["procedure"]) == 1
    assert sum(r["count"] for r in overview["sources"]["fact"]) == 2
    assert ui.get("/").status_code == 200
    assert "user:admin" not in json.dumps(ui.get("/recalls?format=json").json()["entries"])
    assert ui.get("/live").json()["inbox"] == 3


def test_a_scoped_view_reviews_as_its_source(ui, team):
    listed = ui.get("/inbox?format=json").json()["proposals"]
    assert [p["source"] for p in listed] == ["agent:deployer", "agent:scraper", "agent:scraper"]  # grouped
    assert all(p["age"].endswith(("s", "m")) for p in listed) and "from agent:scraper</h2>" in ui.get("/inbox").text
    inbox = {p["key"]: p for p in listed}
    assert sorted(inbox) == ["net/pg", "net/vpn", "web/tls"]  # db/pool is for a fact outside its read scope
    flags = " ".join(inbox["net/pg"]["flags"])
    assert "outside the read scope" in flags and "db/main" not in flags and "5432" not in json.dumps(inbox)
    assert any("net/gateway" in f for f in inbox["net/vpn"]["flags"])
    token = csrf(ui)
    results = ui.post("/inbox?format=json", data={"csrf": token, "action": "accept",
                                                  "key": ["web/tls", "net/vpn", "db/pool"]}).json()["results"]
    by_key = {r["key"]: r for r in results}
    assert not by_key["web/tls"]["ok"] and "its own proposal" in by_key["web/tls"]["error"]
    assert by_key["net/vpn"]["ok"] and by_key["net/vpn"]["commit"]
    assert not by_key["db/pool"]["ok"] and "no review scope" in by_key["db/pool"]["error"]
    assert (team.root / "inbox/web/tls.md").is_file() and (team.root / "inbox/db/pool.md").is_file()
    assert "Memvault-Source: agent:deployer" in git(team.root, "log", "-1", "--format=%B")
    made = ui.post("/new", data={"csrf": token, "key": "web/cdn", "text": "The CDN caches a day."},
                   follow_redirects=False)
    assert made.status_code == 303 and (team.root / "inbox/web/cdn.md").is_file()
    refused = ui.post("/new", data={"csrf": token, "key": "db/x", "text": "db01 moved."})
    assert refused.status_code == 422 and not (team.root / "inbox/db/x.md").exists()


def test_the_scopes_page_shows_who_may_do_what_escaped(ui):
    page = ui.get("/scopes")
    assert page.status_code == 200
    assert MARKUP not in page.text and html.escape(MARKUP) in page.text
    assert 'id="acting-as">agent:deployer<' in page.text and "facts/net/**" in page.text
    data = ui.get("/scopes?format=json").json()
    assert data["acting_as"] == "agent:deployer" and data["acting_scope"]["review"] == ["facts/net/**"]
    assert data["scopes"][0]["read"][-1] == f"facts/{MARKUP}/**"
    assert 'href="' in ui.get("/").text and "/scopes" in ui.get("/").text  # linked from the first page


@pytest.mark.parametrize("source, sees_db", [("agent:deployer", False), ("user:admin", True)])
def test_memvault_source_is_who_the_view_acts_as(team, monkeypatch, source, sees_db):
    monkeypatch.setenv("MEMVAULT_SOURCE", source)
    with serve(Vault.open(team.root), token=TOKEN) as view:
        client = Client(view.origin)
        keys = [f["key"] for f in client.get("/facts?format=json").json()["facts"]]
        assert ("db/main" in keys) is sees_db
        assert client.get("/scopes?format=json").json()["acting_as"] == source
        assert ("db/pool" in json.dumps(client.get("/inbox?format=json").json())) is sees_db


@pytest.fixture
def linked(team):
    """Links under the deployer's read paths: two to files outside them, one to a file inside (before the view
    starts: request it before ``ui``)."""
    os.symlink("../db/main.md", team.root / "facts/web/leak.md")
    os.symlink("nginx.md", team.root / "facts/web/alias.md")
    os.symlink("../db/restore.sh", team.root / "procedures/web/leak.sh")
    team.index.sync()
    return team


def test_a_scoped_view_reads_a_link_as_what_it_points_at(linked, ui):
    """facts/web/leak.md -> ../db/main.md: the facts list, the fact page, the procedures and the recall playground
    of a view acting as the deployer showed db/main's and db/restore's text under the link's name."""
    deadline = time.monotonic() + 30
    keys: list[str] = []
    while "web/alias" not in keys and time.monotonic() < deadline:  # the view's refresher has indexed the links
        keys = [f["key"] for f in ui.get("/facts?format=json").json()["facts"]]
        time.sleep(0.3)
    assert "web/alias" in keys and "web/leak" not in keys
    page = ui.get("/fact/web/leak")
    assert page.status_code >= 400 and "5432" not in page.text and "outside its read scope" in page.text
    assert "nginx on web01" in ui.get("/fact/web/alias").text
    procs = ui.get("/procedures?format=json").json()
    assert [p["name"] for p in procs["procedures"]] == ["web/reload"]
    page = ui.get("/procedure/web/leak")
    assert page.status_code >= 400 and "db01 maintenance" not in page.text
    found = ui.get("/recall?q=db01+postgres+primary+port+restore&format=json").text
    assert "5432" not in found and "db/restore" not in found and "web/leak" not in found
