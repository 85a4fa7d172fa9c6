"""Every page of the web view in a real headless Chromium (issue 26): a screenshot of each, saved under pytest's
temporary directory (the path is printed; ``MEMVAULT_WEB_SCREENS=DIR`` also copies them there for CI artifacts),
each checked to be a drawn page (a PNG of the viewport's width, not one colour) with no console error, failed
script or CSP violation; and the charts as Chromium laid them out (the DOM's SVG bars and date ticks) held against
the page's JSON. One check goes through ``chromium --headless --dump-dom``, the browser alone, no driver.

Without the ``chromium`` binary the tests are skipped with the reason, except under CI (``CI=true``), where they
fail (tests/ci_guard.py): CI installs it.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from datetime import date
from html.parser import HTMLParser
from pathlib import Path

import pytest


from web_fixtures import FLAGS, chromium_binary, chromium_context  # the browser
from web_fixtures import seeded_copy, seeded_template, serve  # noqa: F401 - fixtures

TIMEOUT_MS = 15_000
WIDTH = 1360
#: Every page, by the name its screenshot gets (the episode's address is found at run time).
PAGES = {"overview": "/", "facts": "/facts", "fact": "/fact/db/primary", "fact-history": "/fact/db/replica",
         "procedures": "/procedures", "procedure": "/procedure/db/rotate-logs", "timeline": "/timeline",
         "sessions": "/sessions", "episode": None, "inbox": "/inbox",
         "recall": "/recall?q=which+port+does+the+primary+database+use", "recalls": "/recalls", "new": "/new"}


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_binary()


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    with chromium_context(tmp_path_factory.mktemp("screens-profile"), width=WIDTH) as context:
        yield context


@pytest.fixture(scope="module")
def screens(tmp_path_factory):
    path = tmp_path_factory.mktemp("screens")
    yield path
    target = os.environ.get("MEMVAULT_WEB_SCREENS")
    if target:
        shutil.copytree(path, target, dirs_exist_ok=True)
    print(f"\nscreenshots of every page: {path}" + (f" (copied to {target})" if target else ""))


@pytest.fixture
def served(seeded_copy):
    vault = seeded_copy()
    # a fact edited once more: its page shows a history with a diff
    vault.facts.set("db/replica", "The replica database listens on 10.8.0.7 port 5432.", source="user:admin")
    with serve(vault) as view:
        yield view


@pytest.fixture
def page(browser, served):
    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.problems = []
    page.on("console", lambda m: page.problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
    # a poll of /live that a navigation cuts short is aborted, not failed
    page.on("requestfailed", lambda r: page.problems.append(f"request failed: {r.url} {r.failure}")
            if "ERR_ABORTED" not in str(r.failure) else None)
    page.goto(f"{served.origin}/?token={served.token}")
    assert page.url == served.url + "/"
    try:
        yield page
    finally:
        page.close()


# ---------------------------------------------------------------------------------------------- PNG checks
def png_facts(path: Path) -> tuple[int, int, Counter]:
    """Width, height and the byte histogram of the decompressed image data (a blank page is nearly one value)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, Counter(zlib.decompress(idat))


def drawn_share(path: Path) -> float:
    """The share of the image's bytes that differ from the row above or the pixel before (what PNG's filters leave
    non-zero): about 0 for a page of one colour, a few per cent for a page with text, tables and charts."""
    _w, _h, histogram = png_facts(path)
    return 1 - histogram[0] / sum(histogram.values())


def assert_drawn(path: Path, blank: float) -> None:
    width, height, _ = png_facts(path)
    assert width == WIDTH and height >= 600, (path, width, height)
    assert path.stat().st_size > 10_000, (path, path.stat().st_size)
    share = drawn_share(path)
    assert share > max(0.004, 4 * blank), f"{path} looks blank: {share:.4%} of its bytes drawn (blank: {blank:.4%})"


# ---------------------------------------------------------------------------------------------- tests
def test_a_screenshot_of_every_page(page, served, screens):
    # what a blank page scores, from the same browser at the same size: the bar every page must clear
    empty = page.context.new_page()
    empty.set_content("<html><body></body></html>")
    empty.screenshot(path=str(screens / "blank.png"), full_page=True)
    empty.close()
    blank = drawn_share(screens / "blank.png")
    with pytest.raises(AssertionError, match="looks blank|10_000|st_size"):
        assert_drawn(screens / "blank.png", blank)
    (screens / "blank.png").unlink()
    page.goto(served.url + "/timeline?session=sess-42")
    pages = dict(PAGES)
    pages["episode"] = page.locator("li.episode a").first.get_attribute("href").removeprefix(served.root)
    saved = {}
    for name, path in pages.items():
        response = page.goto(served.url + path)
        page.wait_for_load_state("networkidle")
        assert response.status == 200, (name, response.status)
        assert page.title().endswith("· memvault") and page.locator("main h1").count() >= 1, name
        shot = screens / f"{name}.png"
        page.screenshot(path=str(shot), full_page=True)
        assert_drawn(shot, blank)
        saved[name] = shot
    assert not page.problems, page.problems
    assert sorted(p.name for p in screens.glob("*.png")) == sorted(f"{n}.png" for n in pages)
    # the history page shows the edit as a diff
    page.goto(served.url + "/fact/db/replica")
    assert "+The replica database listens on 10.8.0.7 port 5432." in page.locator("article.commit pre.diff"
                                                                                 ).first.inner_text()


def drawn_chart(page, card: str) -> dict:
    """A chart as Chromium laid it out: its axis attributes, bars (with their rendered boxes) and date ticks."""
    return page.evaluate("""(card) => {
        const svg = document.querySelector('#' + card + ' svg.chart');
        if (!svg) { return null; }
        const box = svg.getBoundingClientRect();
        const bars = [...svg.querySelectorAll('rect.bar')].map(r => {
            const b = r.getBoundingClientRect();
            return {day: r.dataset.day, value: parseFloat(r.dataset.value), series: r.dataset.series,
                    at: r.dataset.at || null, left: b.left - box.left, right: b.right - box.left,
                    top: b.top - box.top, bottom: b.bottom - box.top};
        });
        const ticks = [...svg.querySelectorAll('g.xtick')].map(t => {
            const b = t.querySelector('line').getBoundingClientRect();
            return {date: t.dataset.date, x: b.left - box.left, label: t.querySelector('text').textContent};
        });
        const frame = svg.querySelector('line.baseline').getBoundingClientRect();
        return {first: svg.dataset.first, last: svg.dataset.last, days: parseInt(svg.dataset.days),
                ymax: parseFloat(svg.dataset.ymax), bars, ticks, width: box.width, height: box.height,
                left: frame.left - box.left, right: frame.right - box.left, baseline: frame.top - box.top};
    }""", card)


def check_drawn(chart: dict) -> None:
    """The rendered chart holds its data: every bar inside the axis and in its day's slot, the first at the
    first day and the last at the last, the ticks real dates under their day."""
    first, last = date.fromisoformat(chart["first"]), date.fromisoformat(chart["last"])
    slot = (chart["right"] - chart["left"]) / chart["days"]
    for bar in chart["bars"]:
        assert chart["left"] - 0.5 <= bar["left"] and bar["right"] <= chart["right"] + 0.5, bar
        assert bar["bottom"] <= chart["baseline"] + 1 and bar["top"] >= -0.5, bar
        start = chart["left"] + (date.fromisoformat(bar["day"]) - first).days * slot
        assert start - 0.5 <= bar["left"] and bar["right"] <= start + slot + 0.5, (bar, start, slot)
        assert bar["value"] <= chart["ymax"]
    assert min(chart["bars"], key=lambda b: b["left"])["day"] == chart["first"]
    assert max(chart["bars"], key=lambda b: b["right"])["day"] == chart["last"]
    for tick in chart["ticks"]:
        day = date.fromisoformat(tick["date"])
        assert first <= day <= last and tick["label"] == tick["date"]
        assert abs(tick["x"] - (chart["left"] + ((day - first).days + 0.5) * slot)) < 1.0, tick


def test_the_charts_chromium_draws_hold_the_data(page, served):
    page.goto(served.url + "/")
    page.wait_for_load_state("networkidle")
    data = page.evaluate("async () => (await fetch('?format=json')).json()")["plots"]
    growth = drawn_chart(page, "chart-growth")
    check_drawn(growth)
    assert (growth["first"], growth["last"]) == (data["growth"]["days"][0], data["growth"]["days"][-1])
    last = {b["series"]: b["value"] for b in growth["bars"] if b["day"] == growth["last"]}
    assert last == {"facts": data["growth"]["facts"][-1], "procedures": data["growth"]["procedures"][-1]}
    episodes = drawn_chart(page, "chart-episodes")
    check_drawn(episodes)
    assert {b["day"]: b["value"] for b in episodes["bars"]} == dict(zip(data["episodes"]["days"],
                                                                        data["episodes"]["count"]))
    recalls = drawn_chart(page, "chart-recalls")
    check_drawn(recalls)
    assert {b["day"]: b["value"] for b in recalls["bars"]} == dict(zip(data["recalls"]["days"],
                                                                       data["recalls"]["count"]))
    page.goto(served.url + "/procedure/db/rotate-logs")
    runs = page.evaluate("async () => (await fetch('?format=json')).json()")["runs"]
    chart = drawn_chart(page, "chart-runs")
    (run,) = runs
    assert (chart["first"], chart["last"], chart["days"]) == (run["at"][:10],) * 2 + (1,)
    (mark,) = chart["bars"]
    assert chart["left"] <= mark["left"] and mark["right"] <= chart["right"]  # the dot is on the axis
    assert [t["date"] for t in chart["ticks"]] == [run["at"][:10]]
    assert not page.problems, page.problems


class Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.svgs: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg" and "chart" in (a.get("class") or ""):
            self.svgs.append({**a, "bars": [], "ticks": []})
        elif self.svgs and tag == "rect" and "bar" in (a.get("class") or ""):
            self.svgs[-1]["bars"].append(a)
        elif self.svgs and tag == "g" and a.get("class") == "xtick":
            self.svgs[-1]["ticks"].append(a["data-date"])


def test_chromium_dump_dom_of_the_overview_has_the_charts_of_its_data(chromium, served, tmp_path):
    """The browser alone (no driver): ``chromium --headless --dump-dom`` of the printed address."""
    result = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
                             "--v=0", "--virtual-time-budget=5000", "--dump-dom",
                             f"{served.origin}/?token={served.token}"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = Dom()
    dom.feed(result.stdout)
    assert len(dom.svgs) == 4, result.stdout[:2000]  # growth, episodes, recalls, recall time
    growth = served.vault.growth().series()
    first = dom.svgs[0]
    assert (first["data-first"], first["data-last"]) == (growth["days"][0], growth["days"][-1])
    assert all(first["data-first"] <= t <= first["data-last"] for svg in dom.svgs for t in svg["ticks"])
    facts = [float(b["data-value"]) for b in first["bars"] if b["data-series"] == "facts"]
    assert facts[-1] == growth["facts"][-1]
    errors = [line for line in result.stderr.splitlines()
              if ":CONSOLE(" in line or "Uncaught" in line or "Content Security Policy" in line]
    assert not errors, errors
    json.dumps(dom.svgs)  # plain data, nothing else came with it
