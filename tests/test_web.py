"""The web view without a browser (Starlette's test client over the real app): every page reachable from the first
one, JSON beside each, the guards (token, Host, Origin, CSRF, CSP), stored markup rendered as text, the recall log
from every interface, and the listings' query plans. The browser itself: test_web_browser.py."""
from __future__ import annotations

import hashlib
import html
import json
import re
import time
from html.parser import HTMLParser

import pytest
from starlette.testclient import TestClient

from memvault import Vault
from memvault.interfaces.web import build
from memvault.interfaces.web.security import CSP
from memvault.interfaces.web.facts import version_of
from memvault.rules.errors import MemvaultError

from conftest import REPO_ROOT, git
from web_fixtures import BASE, PORT, XSS, Browser, seeded_copy, seeded_template  # noqa: F401 - fixtures

STATIC = REPO_ROOT / "memvault" / "interfaces" / "web" / "static"


@pytest.fixture
def seeded(seeded_copy):
    return seeded_copy()


@pytest.fixture
def app(seeded):
    app, token = build(seeded, port=PORT, refresh=False)
    app.token = token
    return app


@pytest.fixture
def client(app):
    with Browser(app.asgi, base_url=BASE) as c:
        r = c.get(f"/?token={app.token}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == app.guard.root + "/"
        c.cookies.set(app.guard.cookie_name, r.cookies[app.guard.cookie_name], path=app.guard.root)
        c.root = app.guard.root
        yield c


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.scripts: list[dict[str, str | None]] = []
        self.forms: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "script":
            self.scripts.append(a)
        if tag == "form":
            self.forms.append(((a.get("method") or "get").lower(), a.get("action") or ""))
        for name, value in attrs:
            assert not name.startswith("on"), f"an event handler attribute in the page: {name}={value}"
            assert name != "style", f"an inline style in the page: {value}"


def parse(text: str) -> Links:
    p = Links()
    p.feed(text)
    return p


# ---------------------------------------------------------------------------------------------- pages
def test_every_page_is_reachable_by_links_from_the_first_one(client):
    seen, queue, pages = set(), ["/"], {}
    while queue and len(seen) < 150:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        r = client.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        pages[path.split("?")[0].removeprefix(client.root) or "/"] = r.text
        for href in parse(r.text).links:
            assert href.startswith(client.root + "/"), f"{path} links outside the view: {href}"
            if not href.startswith(client.root + "/static") and "format=json" not in href and href not in seen:
                queue.append(href)
    kinds = {re.sub(r"^/(\w+).*", r"\1", p) for p in pages}
    assert {"/", "facts", "fact", "inbox", "timeline", "sessions", "episode", "procedures", "procedure", "recall",
            "recalls", "new"} <= kinds | {"/"}, kinds


def test_json_beside_every_page(client):
    for path in ["/", "/facts", "/fact/db/primary", "/inbox", "/timeline", "/sessions", "/procedures",
                 "/procedure/db/rotate-logs", "/recall?q=primary+database", "/recalls", "/new"]:
        r = client.get(path + ("&" if "?" in path else "?") + "format=json")
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), path
        json.loads(r.text)
    overview = client.get("/?format=json").json()
    assert overview["counts"]["fact"] == 5 and overview["inbox"] == 2
    assert overview["trust"]["episode"]["untrusted"] > 50
    assert overview["plots"]["growth"]["facts"][-1] == 5 and overview["plots"]["growth"]["procedures"][-1] == 1
    assert overview["index"]["exists"] and overview["index"]["model"]["name"] == "fake-hash"


def test_listings_filter_by_tree_tag_source_trust_staleness_session(client):
    facts = client.get("/facts?prefix=db&format=json").json()
    assert [f["key"] for f in facts["facts"]] == ["db/primary", "db/replica"]
    assert client.get("/facts?tag=postgres&format=json").json()["total"] == 2
    assert client.get("/facts?category=web&format=json").json()["facts"][0]["key"] == "web/haproxy"
    assert client.get("/facts?trust=untrusted&format=json").json()["total"] == 0
    assert client.get("/facts?stale=1&format=json").json()["total"] == 0
    tree = {n["name"]: n for n in client.get("/facts?format=json").json()["tree"]}
    assert tree["db"]["folder"] and tree["db"]["count"] == 2
    session = client.get("/timeline?session=sess-42&format=json").json()["episodes"]
    assert [e["runtime"] for e in session] == ["claude-code"] * 3
    assert client.get("/sessions?format=json").json()["sessions"][0]["episodes"] == 3
    words = client.get("/timeline?text=rotation+runbook&format=json").json()["episodes"]
    assert [e["text"] for e in words] == ["agent ran the rotation runbook"]
    untrusted = client.get("/timeline?trust=untrusted&format=json").json()["episodes"]
    assert untrusted and not any(e["trusted"] for e in untrusted)
    runs = client.get("/procedure/db/rotate-logs?format=json").json()["runs"]
    assert runs[0]["exit_code"] == 0 and runs[0]["commit"] and runs[0]["blob"] and runs[0]["duration_ms"] is not None


def test_the_older_link_goes_on_after_the_last_line_shown(seeded, client):
    """Five lines of one time and pages of two: following "older" shows each once (a page that ended inside the
    run used to start the next one before that time, and skipped the rest of the run)."""
    for n in range(5):
        seeded.episodes.append(f"burst line {n}", source="import:burst", at="2026-11-21T08:00:00Z")
    page = "/timeline?source=import%3Aburst&limit=2"
    seen = []
    for _ in range(5):
        r = client.get(page)
        seen += re.findall(r"burst line (\d)", html.unescape(r.text))
        older = re.search(r'<a href="([^"]+)">older</a>', r.text)
        if older is None:
            break
        page = html.unescape(older.group(1))
        assert "limit=2" in page  # the next page is of the same size
    assert sorted(seen) == ["0", "1", "2", "3", "4"]


def test_a_timeline_bound_that_is_no_time_is_a_one_line_error(client):
    r = client.get("/timeline?before=next+tuesday&format=json")
    assert r.status_code == 422 and "before: not an RFC 3339 time or date: 'next tuesday'" in r.text


def test_stale_facts_are_found_by_sql_as_by_the_rule(seeded, client):
    path = seeded.root / "facts" / "db" / "replica.md"
    path.write_text(path.read_text().replace("category: database", "category: database\nvalid_until: 2020-01-01"))
    seeded.index.sync([path])
    stale = client.get("/facts?stale=1&format=json").json()
    assert [f["key"] for f in stale["facts"]] == ["db/replica"] and "2020-01-01" in stale["facts"][0]["stale"]
    assert client.get("/?format=json").json()["stale_facts"] == 1


# ---------------------------------------------------------------------------------------------- guards
def test_without_the_token_nothing_answers(app):
    with TestClient(app.asgi, base_url=BASE) as c:
        for path in ["/", "/facts?format=json", "/live", "/static/app.js"]:
            assert c.get(path).status_code == 401
        assert c.get("/?token=wrong").status_code == 401
        assert c.get("/?format=json", headers={"Authorization": f"Bearer {app.token}"}).status_code == 200
        r = c.get(f"/facts?prefix=db&token={app.token}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == app.guard.root + "/facts?prefix=db"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and app.token not in cookie


def test_a_foreign_host_or_origin_is_refused(client):
    assert client.get("/", headers={"Host": "evil.example:8787"}).status_code == 421
    assert client.get("/", headers={"Host": "127.0.0.1:9999"}).status_code == 421
    assert client.get("/", headers={"Host": "localhost:8787"}).status_code == 200
    assert client.get("/", headers={"Origin": "http://evil.example"}).status_code == 403
    assert client.get("/", headers={"Origin": "null"}).status_code == 403
    assert client.get("/", headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}).status_code == 403
    r = client.post("/inbox", data={"action": "accept", "key": "net/vpn"},
                    headers={"Origin": "http://evil.example"})
    assert r.status_code == 403


def test_a_change_without_the_csrf_token_is_refused(seeded, app, client):
    head = git(seeded.root, "rev-parse", "HEAD")
    for path, form in [("/inbox", {"action": "accept", "key": "net/vpn"}),
                       ("/fact/db/primary/edit", {"text": "---\n---\nchanged\n"}),
                       ("/fact/db/primary/delete", {"confirm": "1"}),
                       ("/new", {"key": "x/y", "text": "z"})]:
        assert client.post(path, data=form).status_code == 403
        assert client.post(path, data={**form, "csrf": "0" * 64}).status_code == 403
    assert git(seeded.root, "rev-parse", "HEAD") == head
    r = client.post("/inbox", data={"action": "reject", "key": "net/vpn", "csrf": app.guard.csrf_token()})
    assert r.status_code == 200 and not (seeded.root / "inbox" / "net" / "vpn.md").exists()


def test_security_headers_on_every_answer(client):
    for path in ["/", "/facts?format=json", "/static/app.js", "/nowhere"]:
        r = client.get(path)
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "same-origin"
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP and "script-src 'self'" in CSP


def test_non_loopback_needs_a_token_and_loopback_gets_a_fresh_one(seeded, monkeypatch):
    monkeypatch.delenv("MEMVAULT_UI_TOKEN", raising=False)
    with pytest.raises(MemvaultError, match="not a loopback address"):
        build(seeded, host="0.0.0.0", port=PORT)
    _, given = build(seeded, host="0.0.0.0", port=PORT, token="s3cret")
    assert given == "s3cret"
    first, second = build(seeded, port=PORT)[1], build(seeded, port=PORT)[1]
    assert first != second and len(first) >= 24
    monkeypatch.setenv("MEMVAULT_UI_TOKEN", "from-env")
    assert build(seeded, host="10.0.0.5", port=PORT)[1] == "from-env"


# ---------------------------------------------------------------------------------------------- stored markup
def test_stored_markup_is_rendered_as_text(client):
    pages = [client.get(p).text for p in ["/timeline?source=web:evil.example&limit=500", "/fact/evil/note",
                                          "/recall?q=attack+script+alert&k=50", "/facts?tag=payload"]]
    for page in pages:
        tree = parse(page)
        assert all(s.get("src", "").startswith(client.root + "/static/") or s.get("type") == "application/json"
                   for s in tree.scripts), tree.scripts
        assert "<script>document.title" not in page and "<img src=x" not in page and "<svg" not in page
        assert not re.search(r'href="\s*javascript:', page, re.I)
    timeline = html.unescape(pages[0])
    for payload in XSS:
        assert payload in timeline, payload  # shown, whole, as text
    assert 'class="badge untrusted"' in pages[0]


def test_untrusted_items_are_marked_on_every_page_that_shows_them(client):
    checks = {"/timeline": "web:evil.example", "/inbox": "agent:scraper", "/sessions": "agent:claude-code",
              "/recalls": "agent:codex", "/recall?q=attack+alert&k=5": "web:evil.example", "/": "web:evil.example"}
    for path, source in checks.items():
        page = client.get(path).text
        at = page.index(f'<span class="source">{source}</span>')
        assert page[at:].split("</span>", 1)[1].startswith(' <span class="badge untrusted"'), path


# ---------------------------------------------------------------------------------------------- edits and review
def test_edit_goes_through_the_gate_and_names_its_commit(seeded, app, client):
    csrf = app.guard.csrf_token()
    original = (seeded.root / "facts/db/replica.md").read_text()
    loaded = version_of((seeded.root / "facts/db/replica.md").read_bytes())  # the form carries what it was loaded from
    r = client.post("/fact/db/replica/edit", data={"csrf": csrf, "text": original.replace("10.8.0.5", "10.8.0.7"),
                                                   "loaded": loaded}, follow_redirects=False)
    assert r.status_code == 303
    made = re.search(r"made=([0-9a-f]{40})", r.headers["location"]).group(1)
    assert made == git(seeded.root, "rev-parse", "HEAD")
    assert "Memvault-Source: user:tester" in git(seeded.root, "log", "-1", "--format=%B")
    page = client.get(r.headers["location"]).text
    assert made[:12] in page and "+The replica database listens on 10.8.0.7" in html.unescape(page)
    secret = original + "\npassword=Zq8#kR2!vX9@mL4$\n"
    loaded = version_of((seeded.root / "facts/db/replica.md").read_bytes())
    r = client.post("/fact/db/replica/edit", data={"csrf": csrf, "text": secret, "loaded": loaded})
    assert r.status_code == 422 and "secret" in r.text and git(seeded.root, "rev-parse", "HEAD") == made
    r = client.post("/fact/db/replica/edit", data={"csrf": csrf, "text": "---\nimportance: high\n---\nx\n",
                                                   "loaded": loaded})
    assert r.status_code == 422 and "importance" in html.unescape(r.text)


def test_an_untrusted_local_user_can_only_propose(seeded, monkeypatch):
    monkeypatch.setenv("MEMVAULT_SOURCE", "agent:intern")
    app, token = build(seeded, port=PORT, refresh=False)
    with TestClient(app.asgi, base_url=BASE, headers={"Authorization": f"Bearer {token}"}) as c:
        csrf = app.guard.csrf_token()
        r = c.post("/inbox", data={"csrf": csrf, "action": "accept", "key": "net/vpn", "format": "json"})
        assert "only a trusted source" in r.text and (seeded.root / "inbox/net/vpn.md").exists()
        r = c.post("/fact/db/replica/edit", data={"csrf": csrf, "text": "---\n---\nnew\n",
                                                  "loaded": version_of((seeded.root / "facts/db/replica.md").read_bytes())})
        assert r.status_code == 422 and "agent:intern" in r.text
        r = c.post("/new", data={"csrf": csrf, "key": "ops/oncall", "text": "Maria is on call."},
                   follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == app.guard.root + "/inbox"
        assert (seeded.root / "inbox/ops/oncall.md").exists() and not (seeded.root / "facts/ops/oncall.md").exists()


def test_accepting_many_proposals_makes_one_accept_commit_each(seeded, app, client):
    r = client.post("/inbox", data={"csrf": app.guard.csrf_token(), "action": "accept",
                                    "key": ["db/primary", "net/vpn"]})
    assert r.status_code == 200
    log = git(seeded.root, "log", "-2", "--format=%s").splitlines()
    assert log == ["fact accept net/vpn (proposed by agent:scraper) (user:tester)",
                   "fact accept db/primary (proposed by agent:scraper) (user:tester)"]
    assert "10.8.0.9" in (seeded.root / "facts/db/primary.md").read_text()
    assert client.get("/inbox?format=json").json()["proposals"] == []


def test_inbox_shows_the_change_and_the_detector_flags(client):
    proposals = {p["key"]: p for p in client.get("/inbox?format=json").json()["proposals"]}
    primary = proposals["db/primary"]
    assert primary["changes_existing"] and not primary["trusted"]
    assert ["del", "-The primary database listens on 10.8.0.4 port 5432."] in primary["diff"]
    assert ["add", "+The primary database moved to 10.8.0.9 port 5432."] in primary["diff"]
    vpn = proposals["net/vpn"]
    assert not vpn["changes_existing"] and vpn["diff"][0] == ["meta", "--- /dev/null"]
    assert any(f.startswith("contradicts fact net/gateway: port 1194 where it says 1195") for f in vpn["flags"]), \
        vpn["flags"]



def test_direction_controls_are_shown_never_obeyed_and_a_form_keeps_them(seeded, app, client):
    """An agent's proposal holding a right-to-left override (U+202E) was shown with the character working: the
    reviewer read 'rm -rf /tmp/cache' reversed in place and accepted text that says something else (Trojan
    Source, in the one place a person decides what becomes trusted). Every page now writes each bidirectional
    control as its escape (``\\u202e``, as the CLI prints it), the inbox flags it, and a form still carries the
    character (saving an edit never changes it)."""
    text = "Clean up with: rm -rf /tmp/cache \u202e# do not run this, it removes /home\u202c done."
    seeded.facts.set("ops/cleanup", text, source="agent:scraper", tags=["ops\u2067x"])
    page = client.get("/inbox").text
    assert not re.search("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]", page)
    shown = html.unescape(page)
    assert "/tmp/cache \\u202e# do not run this" in shown and "ops\\u2067x" in shown
    flags = {p["key"]: p["flags"] for p in client.get("/inbox?format=json").json()["proposals"]}["ops/cleanup"]
    assert any("direction" in f for f in flags), flags
    client.post("/inbox", data={"csrf": app.guard.csrf_token(), "action": "accept", "key": "ops/cleanup"})
    page = client.get("/fact/ops/cleanup").text
    textarea = html.unescape(page.split('<textarea name="text"', 1)[1].split("</textarea>", 1)[0])
    assert "\u202e# do not run this" in textarea  # the form sends back what is stored
    outside = page.split('<textarea name="text"', 1)[0] + page.split("</textarea>", 1)[1]
    assert "\u202e" not in outside and "\\u202e" in html.unescape(outside)


# ---------------------------------------------------------------------------------------------- recall
def test_playground_shows_factors_parts_floor_prompt_and_why_nothing(client):
    hit = client.get("/recall?q=which+port+does+the+primary+database+use&format=json").json()["result"]
    top = hit["hits"][0]
    assert top["id"] == "db/primary" and [b["factor"] for b in top["bars"]] == [
        "relevance", "importance", "confidence", "recency", "frequency"]
    assert top["parts"]["keyword"] > 0 and top["parts"]["semantic"] > 0
    assert hit["prompt"].startswith("<memory ") and "db/primary" in hit["prompt"] and hit["ms"] > 0
    empty = client.get("/recall?q=zebra+quantum+marmalade&format=json").json()["result"]
    assert empty["hits"] == [] and empty["nothing_found"]
    assert "<nothing-found reason=" in empty["prompt"]


def test_every_interface_writes_the_recall_log(seeded, invoke_on, client):
    result = invoke_on(seeded, "recall", "haproxy health checks", "--format", "json", "--source", "agent:hook")
    assert result.exit_code == 0, result.output
    from memvault.interfaces.mcp import build_server
    from mcp.client import Client
    import asyncio

    async def ask():
        async with Client(build_server(seeded, source="agent:mcp-test", warm=False)) as c:
            return await c.call_tool("recall", {"query": "vpn gateway"})

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever runs on this thread
        pool.submit(asyncio.run, ask()).result()
    client.get("/recall?q=replica+database")
    log = client.get("/recalls?format=json").json()["entries"]
    asked = [(e["source"], e["query"]) for e in log]
    assert asked[:3] == [("user:tester", "replica database"), ("agent:mcp-test", "vpn gateway"),
                         ("agent:hook", "haproxy health checks")]
    assert ("agent:codex", "zebra quantum marmalade") in asked
    nothing = next(e for e in log if e["source"] == "agent:codex")
    assert nothing["hits"] == [] and nothing["nothing_found"]
    told = next(e for e in log if e["query"] == "which port does the primary database use")
    assert told["hits"][0]["id"] == "db/primary" and told["ms"] > 0
    assert client.get("/recalls?source=agent:codex&format=json").json()["entries"][0]["query"] == \
        "zebra quantum marmalade"


def test_prune_drops_recall_log_entries_past_raw_retention(seeded):
    from datetime import timedelta

    from memvault.rules.timeutil import now

    before = len(seeded.recall_log.recalls())
    assert before == 2
    report = seeded.prune(dry_run=True, at=now() + timedelta(days=31))
    assert report.kinds["recall_log"] == {"kept": 0, "removed": 2, "bytes_freed": 0}
    assert len(seeded.recall_log.recalls()) == 2
    seeded.prune(at=now() + timedelta(days=31))
    assert seeded.recall_log.recalls() == []


def test_a_purge_forgets_the_recalls_that_returned_what_it_removed(seeded):
    seeded.recall("attack script alert", k=5, source="agent:reader")
    seeded.recall("which port does the primary database use", k=3, source="agent:reader")
    assert len(seeded.recall_log.recalls()) == 4
    seeded.purge("web:evil.example", source="user:admin")
    left = [e.query for e in seeded.recall_log.recalls()]
    assert "attack script alert" not in left and "which port does the primary database use" in left


def test_a_recall_not_logged_is_not_an_error(seeded):
    seeded.recall("primary database", log=False)
    assert len(seeded.recall_log.recalls()) == 2


# ---------------------------------------------------------------------------------------------- live
def test_live_version_moves_with_the_index(seeded, client):
    first = client.get("/live").json()
    seeded.episodes.append("a new episode arrives", source="user:ops")
    second = client.get("/live").json()
    assert first["version"] != second["version"]
    fragment = client.get("/timeline?fragment=episodes").text
    assert fragment.lstrip().startswith('<ol class="timeline"') and "a new episode arrives" in fragment


@pytest.mark.parametrize("path", ["/", "/facts", "/timeline", "/procedures", "/recall", "/new", "/recalls"])
def test_only_the_live_parts_of_a_page_are_served_alone(client, path):
    """?fragment=main rendered the page's body without what the page defines around it: a plain-text 500 on eight
    pages. A block that is not a live part is a 404 like a block the page does not have."""
    for name in ("main", "title", "nothing"):
        answer = client.get(f"{path}?fragment={name}")
        assert answer.status_code == 404, (path, name, answer.status_code)


def test_hand_edits_reach_the_listings_through_the_background_check(seeded):
    app, token = build(seeded, port=PORT)
    from memvault.interfaces.web import app as app_module

    with TestClient(app.asgi, base_url=BASE, headers={"Authorization": f"Bearer {token}"}) as c:
        (seeded.root / "facts" / "ops").mkdir()
        (seeded.root / "facts" / "ops" / "oncall.md").write_text("Maria is on call this week.\n")
        deadline = time.monotonic() + 5 * app_module.REFRESH_SECONDS + 5
        while time.monotonic() < deadline:
            if c.get("/facts?prefix=ops&format=json").json()["total"] == 1:
                break
            time.sleep(0.2)
        assert c.get("/facts?prefix=ops&format=json").json()["facts"][0]["key"] == "ops/oncall"


# ---------------------------------------------------------------------------------------------- queries
def test_listing_queries_start_from_an_index(seeded):
    from memvault.index.listings import episodes_sql, facts_sql

    browse = seeded.browse
    conn = seeded.index.connection()
    queries = [facts_sql(browse.fact_query(prefix="db")), facts_sql(browse.fact_query(source="user:admin")),
               facts_sql(browse.fact_query(tag="postgres", trust="trusted")),
               facts_sql(browse.fact_query(stale=True)), episodes_sql(browse.episode_query()),
               episodes_sql(browse.episode_query(source="agent:claude-code", kind="raw")),
               episodes_sql(browse.episode_query(session="sess-42")),
               episodes_sql(browse.episode_query(before="2030-01-01")),
               episodes_sql(browse.episode_query(before="2030-01-01", before_id="01JT0000000000000000000001"))]
    for sql, args in queries:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql + " ORDER BY item_id", args)]
        assert any("USING" in line and "docs" in line for line in plan), (sql, plan)
        assert not [line for line in plan if line.startswith("SCAN docs") and "USING" not in line], (sql, plan)
    sql, args = episodes_sql(browse.episode_query(text="rotation runbook"))
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args)]
    assert any("chunks_fts VIRTUAL TABLE" in line for line in plan), plan


def test_old_indexes_read_every_file_once_to_fill_the_browsing_fields(seeded):
    conn = seeded.index.connection()
    conn.execute("UPDATE docs SET meta = NULL WHERE kind IN ('fact', 'episode')")
    conn.execute("DELETE FROM meta WHERE key = 'fields'")
    report = seeded.index.sync()
    assert report.files_changed > 0 and report.docs_changed == 0  # metadata only: nothing is embedded again
    assert seeded.browse.facts(tag="postgres")[1] == 2
    assert seeded.index.sync().files_changed == 0


def test_growth_is_cached_by_commit_and_follows_head(seeded):
    first = seeded.growth()
    cache = json.loads((seeded.state_dir / "growth.json").read_text())
    assert cache["head"] == git(seeded.root, "rev-parse", "HEAD") == first.head
    seeded.facts.set("ops/new", "A new fact.", source="user:admin")
    seeded.facts.delete("web/haproxy", source="user:admin")
    series = seeded.growth().series()
    assert series["facts"][-1] == 5 and series["procedures"][-1] == 1
    git(seeded.root, "reset", "-q", "--hard", "HEAD~1")
    assert seeded.growth().series()["facts"][-1] == 6  # history rewritten: counted again


# ---------------------------------------------------------------------------------------------- packaging
def test_vendored_files_are_the_ones_named_and_ship_in_the_wheel():
    notes = (STATIC / "VENDORED.md").read_text()
    rows = re.findall(r"\| `([^`]+)` \|[^|]+\|[^|]+\|[^|]+\| `([0-9a-f]{64})` \|", notes)
    assert len(rows) == 1  # htmx (uPlot left when the charts became server-drawn SVG, issue 26)
    for name, digest in rows:
        assert hashlib.sha256((STATIC / name).read_bytes()).hexdigest() == digest, name
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    patterns = re.search(r'"memvault.interfaces.web" = \[(.*?)\]', pyproject).group(1)
    suffixes = {p.strip().strip('"').rsplit(".", 1)[-1] for p in patterns.split(",")}
    shipped = [p for p in (STATIC.parent).rglob("*") if p.is_file() and p.suffix != ".py"
               and "__pycache__" not in p.parts]
    assert all(p.suffix.lstrip(".") in suffixes for p in shipped), shipped
    assert "jinja2" in pyproject


def test_templates_hold_no_inline_script_or_style():
    for template in (STATIC.parent / "templates").glob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*(src=|type=\"application/json\"))", text), template
        assert "<style" not in text and " style=" not in text and not re.search(r"\son\w+=", text), template
        assert "|safe" not in text and "Markup(" not in text, template


@pytest.fixture
def invoke_on(runner, models):
    from memvault.interfaces.cli import Context, cli

    def run(v: Vault, *args: str):
        return runner.invoke(cli, ["--vault", str(v.root), *args], obj=Context(embedder_factory=models))

    return run


def test_a_body_without_a_length_is_read_no_further_than_the_limit(app, client):
    """The size limit read only the Content-Length header: a chunked POST (no length) was read whole, however big,
    before any check. It is read as it comes, and refused (413) past the limit."""
    from memvault.interfaces.web.app import MAX_BODY

    sent = []

    def chunks():
        for n in range(8):  # fields of half the limit each: under starlette's own limit of a field
            sent.append(n)
            yield f"{'&' if n else ''}f{n}=".encode() + b"a" * (MAX_BODY // 2)

    r = client.post("/new", content=chunks(), headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 413
    small = client.post("/new", data={"csrf": app.guard.csrf_token(), "key": "ops/oncall", "text": "Maria is on call."})
    assert small.status_code in (200, 303), small.text


def test_a_pulled_file_whose_name_is_not_utf8_is_named_on_every_page_never_a_500(seeded, client):
    """A teammate's ``facts/\\xff\\xfe.md``: the recall playground's warning named it with the surrogates Python reads
    such a name with, and the page could not be encoded: 'Internal Server Error' (500). It is named as its bytes
    (``\\xff\\xfe``)."""
    import os

    with open(os.fsencode(seeded.root / "facts") + b"/\xff\xfe.md", "wb") as f:
        f.write(b"zebra\n")
    seeded.index.sync()  # as the view's own background check would
    for path in ("/", "/facts", "/timeline", "/recall?q=zebra", "/recall?q=zebra&format=json"):
        answer = client.get(client.root + path)
        assert answer.status_code == 200, (path, answer.status_code)
    assert "\\xff\\xfe" in client.get(client.root + "/recall?q=zebra").text
