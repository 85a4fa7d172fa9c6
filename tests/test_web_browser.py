"""The web view in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright; .ci/run installs it).

One browser for the session; each test gets a fresh copy of the seeded vault served by uvicorn on a free loopback
port. The tests review a proposal end to end and find the commit in git, edit a fact and see the diff, read the
playground's factors and its reason for an empty answer, prove that stored attack text runs nothing (no dialog, no
changed title, no request leaving the page, no CSP violation), that a POST without the CSRF token and a request
under a foreign Host (DNS rebinding, simulated with Chromium's host resolver rules) are refused, and that a new
episode appears without a reload (test_web_cache.py: no page is left in the browser's disk cache). A screenshot of
every page is saved (``MEMVAULT_WEB_SCREENSHOT=PATH`` also writes the overview there: docs/web-view.png is made so).

Without Chromium or Playwright the tests are skipped with the reason, except under CI (``CI=true``), where they
fail: a green CI must not hide a browser that was never started.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from memvault import Vault

from conftest import git
from web_fixtures import XSS, chromium_context, seeded_copy, seeded_template, serve  # noqa: F401 - fixtures

#: evil.example resolves to this host: a page's request to it would be seen, not lost
RESOLVE = ["--host-resolver-rules=MAP evil.example 127.0.0.1"]
TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One Chromium for the browser tests (module scope: Playwright's sync API holds an event loop on this thread
    while it runs, which later tests' asyncio.run must not meet)."""
    with chromium_context(tmp_path_factory.mktemp("chromium-profile"), width=1360, flags=RESOLVE) as context:
        yield context


@pytest.fixture(scope="session")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def served(seeded_copy):
    with serve(seeded_copy()) as view:
        yield view


class Watch:
    """Everything a page does that an attack would: dialogs, requests elsewhere, CSP violations, errors."""

    def __init__(self, page, base: str) -> None:
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.console: list[str] = []
        self.errors: list[str] = []
        self.base = base
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("console", lambda m: self.console.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def assert_clean(self) -> None:
        assert not self.dialogs, self.dialogs
        assert not self.errors, self.errors
        # the pages' own requests stay under the run's root; the one before it is the printed address's token swap
        origin = self.base.split("/", 3)
        swap = "/".join(origin[:3]) + "/?token="
        outside = [u for u in self.requests if not u.startswith(self.base + "/") and not u.startswith(swap)]
        assert not outside, outside
        refused = [c for c in self.console if "Content Security Policy" in c or "Refused" in c]
        assert not refused, refused


@pytest.fixture
def page(browser, served):
    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    watch = Watch(page, served.url)
    page.goto(f"{served.origin}/?token={served.token}")
    assert page.url == served.url + "/"
    page.watch = watch
    try:
        yield page
    finally:
        page.close()


def shot(page, shots, name: str) -> Path:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# ---------------------------------------------------------------------------------------------- tests
def test_review_an_inbox_proposal_end_to_end(page, served, shots):
    page.goto(served.url + "/inbox")
    assert page.locator("article.proposal").count() == 2
    assert "contradicts fact net/gateway" in page.locator("article.proposal", has_text="net/vpn").inner_text()
    shot(page, shots, "inbox")
    page.check("input[name=key][value='net/vpn']")
    page.click("#accept")
    page.wait_for_selector("#results")
    commit = page.locator("#results .commit-id").inner_text().strip()
    assert commit == git(served.vault.root, "rev-parse", "HEAD")
    assert git(served.vault.root, "log", "-1", "--format=%s") == \
        "fact accept net/vpn (proposed by agent:scraper) (user:tester)"
    # the accepted fact, and the one it contradicts marked superseded_by it (issue 25), in one commit
    assert git(served.vault.root, "show", "--name-only", "--format=", commit).splitlines() == \
        ["facts/net/gateway.md", "facts/net/vpn.md"]
    assert "superseded_by: net/vpn" in (served.vault.root / "facts" / "net" / "gateway.md").read_text()
    assert page.locator("article.proposal").count() == 1
    page.watch.assert_clean()


def test_edit_a_fact_and_see_the_diff_on_its_page(page, served, shots):
    page.goto(served.url + "/fact/db/replica")
    text = page.input_value("textarea[name=text]")
    page.fill("textarea[name=text]", text.replace("10.8.0.5", "10.8.0.7"))
    page.click("#save")
    page.wait_for_selector("#made")
    head = git(served.vault.root, "rev-parse", "HEAD")
    assert head in page.locator("#made").inner_text()
    newest = page.locator("article.commit").first
    assert head[:12] in newest.inner_text() and "Memvault-Source" not in newest.inner_text()  # author is the source
    diff = newest.locator("pre.diff").inner_text()
    assert "-The replica database listens on 10.8.0.5 port 5432." in diff
    assert "+The replica database listens on 10.8.0.7 port 5432." in diff
    assert page.locator("article.commit").count() == 2
    shot(page, shots, "fact")
    page.watch.assert_clean()


def test_the_playground_shows_the_factors_and_why_nothing_came_back(page, served, shots):
    page.goto(served.url + "/recall")
    page.fill("input[name=q]", "which port does the primary database use")
    page.click("#recall-form button")
    page.wait_for_selector("ol.hits li.hit")
    first = page.locator("ol.hits li.hit").first
    assert "db/primary" in first.inner_text()
    factors = first.locator("table.factors th").all_inner_texts()
    assert factors == ["relevance", "importance", "confidence", "recency", "frequency", "keyword part",
                       "semantic part"]
    assert first.locator("meter").count() == 7
    assert float(first.locator("meter").first.get_attribute("value")) > 0
    assert page.locator("#prompt").inner_text().startswith("<memory note=")
    assert " ms" in page.locator("#took").inner_text()
    shot(page, shots, "recall")
    page.fill("input[name=q]", "zebra quantum marmalade")
    page.click("#recall-form button")
    reason = page.locator("#nothing-found").inner_text()
    assert reason.startswith("Nothing returned:") and ("evidence" in reason or "no memory" in reason)
    assert page.locator("ol.hits li.hit").count() == 0
    assert "<nothing-found reason=" in page.locator("#prompt").inner_text()
    page.watch.assert_clean()


def test_stored_attack_text_runs_nothing(page, served, shots):
    title = None
    for path in ["/timeline?source=web:evil.example&limit=500", "/fact/evil/note", "/facts?tag=payload",
                 "/recall?q=attack+script+alert+onerror&k=60&min_relevance=0", "/recalls", "/"]:
        page.goto(served.url + path)
        page.wait_for_load_state("networkidle")
        title = page.title()
        assert "pwned" not in title and title.endswith("· memvault"), title
    page.goto(served.url + "/timeline?source=web:evil.example&limit=500")
    page.wait_for_load_state("networkidle")
    shown = page.locator("#episodes").inner_text()
    for payload in XSS:
        assert payload in shown, payload  # the text itself, whole, visible
    assert page.locator("#episodes iframe, #episodes img, #episodes svg, #episodes script").count() == 0
    assert page.locator("#episodes a[href^='javascript']").count() == 0
    assert page.locator("#episodes .badge.untrusted").count() == page.locator("#episodes li.episode").count()
    assert page.title() == "timeline · memvault"
    shot(page, shots, "timeline-attacks")
    page.watch.assert_clean()


def test_a_post_without_the_csrf_token_and_a_foreign_host_are_refused(page, served):
    status = page.evaluate("""async () => (await fetch('inbox', {method: 'POST',
        body: new URLSearchParams({action: 'accept', key: 'net/vpn'})})).status""")
    assert status == 403
    assert (served.vault.root / "inbox" / "net" / "vpn.md").exists()
    port = served.origin.rsplit(":", 1)[1]
    response = page.goto(f"http://evil.example:{port}/")  # resolves to 127.0.0.1: a rebinding page
    assert response.status == 421 and "DNS rebinding" in page.content()
    page.watch.requests.clear()  # the refused page was asked for on purpose


def test_new_episodes_appear_without_a_reload(page, served):
    page.goto(served.url + "/timeline")
    page.wait_for_load_state("networkidle")
    other = Vault.open(served.vault.root, daemon=False)  # another process, as far as the view can tell
    other.episodes.append("disk 91% on web3 (live)", source="agent:monitor")
    page.wait_for_selector("text=disk 91% on web3 (live)", timeout=TIMEOUT_MS)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1  # no reload happened
    page.watch.assert_clean()


def test_a_screenshot_of_every_page(page, served, shots):
    pages = {"overview": "/", "facts": "/facts", "fact-primary": "/fact/db/primary", "inbox": "/inbox",
             "timeline": "/timeline", "sessions": "/sessions", "episode": None, "procedures": "/procedures",
             "procedure": "/procedure/db/rotate-logs", "recall": "/recall?q=rotate+the+postgres+logs",
             "recalls": "/recalls", "new": "/new"}
    page.goto(served.url + "/timeline?session=sess-42")
    pages["episode"] = page.locator("li.episode a").first.get_attribute("href").removeprefix(served.root)
    saved = []
    for name, path in pages.items():
        page.goto(served.url + path)
        page.wait_for_load_state("networkidle")
        saved.append(shot(page, shots, name))
    assert all(p.stat().st_size > 10_000 for p in saved), saved
    page.goto(served.url + "/")
    page.wait_for_load_state("networkidle")
    assert page.locator("svg.chart rect.bar").count() >= 2  # the growth charts were drawn (SVG from charts.py)
    target = os.environ.get("MEMVAULT_WEB_SCREENSHOT")
    if target:
        page.set_viewport_size({"width": 1360, "height": 1000})
        page.screenshot(path=target, full_page=False)
    page.watch.assert_clean()
    shutil.copy(saved[0], shots / "latest-overview.png")
