"""Pages that tell the truth (issue 26): charts whose axes hold the data (a bar per day from the first day with data
to the last, ticks on real dates, nothing outside the axis), the facts list with each fact's text, the inbox diff
against the fact a proposal would change, the playground's bars equal to the figures recall ranked with, a
runbook's provenance read from git, and markup in every stored field rendered inert on every page.
Chromium's view of the same pages: test_web_screens.py."""
from __future__ import annotations

import html
import re
from pathlib import Path
from datetime import date, timedelta
from html.parser import HTMLParser

import pytest

from memvault import Vault
from memvault.interfaces.web import charts
from memvault.interfaces.web.overview import carried

from conftest import git
from web_fixtures import seeded_copy, seeded_template, web_client  # noqa: F401 - fixtures


# ---------------------------------------------------------------------------------------------- the chart maths
def check_axes(chart: charts.Chart, days_with_data: list[str]) -> None:
    """What every chart must hold: bars only on days with data, the first at the first such day and the last at
    the last, every bar and tick inside the plot area, ticks on real dates under their day's bar."""
    assert chart.first == min(days_with_data) and chart.last == max(days_with_data)
    first, last = date.fromisoformat(chart.first), date.fromisoformat(chart.last)
    assert chart.days == (last - first).days + 1
    slot = (chart.right - chart.left) / chart.days
    bar_days = sorted({b.day for b in chart.bars})
    assert bar_days == sorted(set(days_with_data))
    for bar in chart.bars:
        assert chart.left <= bar.x and bar.x + bar.width <= chart.right + 1e-6, bar
        assert chart.top - 1e-6 <= bar.y and bar.y + bar.height <= chart.bottom + 1e-6, bar
        assert bar.value <= chart.ymax
        day = date.fromisoformat(bar.day)
        lo = chart.left + (day - first).days * slot
        assert lo - 1e-3 <= bar.x and bar.x + bar.width <= lo + slot + 1e-3, f"{bar} is outside its day's slot"
    leftmost = min(chart.bars, key=lambda b: b.x)
    rightmost = max(chart.bars, key=lambda b: b.x)
    assert leftmost.day == chart.first and rightmost.day == chart.last
    assert chart.xticks, "no date on the axis"
    for tick in chart.xticks:
        day = date.fromisoformat(tick.label)  # a real date
        assert first <= day <= last, tick
        assert tick.pos == pytest.approx(chart.left + ((day - first).days + 0.5) * slot, abs=1e-3)
    assert chart.yticks[0].value == 0 and chart.yticks[-1].value == chart.ymax
    assert max(b.value for b in chart.bars) <= chart.ymax


def test_a_day_chart_runs_from_the_first_day_with_data_to_the_last():
    points = [("2026-11-02", 3), ("2026-11-05", 1), ("2026-11-05", 2), ("2026-11-09", 4)]
    chart = charts.daily({"episodes": points})
    check_axes(chart, ["2026-11-02", "2026-11-05", "2026-11-09"])
    assert {b.day: b.value for b in chart.bars} == {"2026-11-02": 3, "2026-11-05": 3, "2026-11-09": 4}
    assert chart.days == 8 and len(chart.bars) == 3  # days without data have no bar, but keep their place
    # a bar's height is its value on the value axis
    bar = next(b for b in chart.bars if b.day == "2026-11-09")
    assert bar.height == pytest.approx(4 / chart.ymax * (chart.bottom - chart.top), abs=1e-2)


def test_no_points_makes_an_empty_chart():
    chart = charts.daily({"episodes": []})
    assert chart.empty and chart.first is None and chart.bars == [] and chart.xticks == []
    assert charts.timed([]).empty
    assert charts.daily({"n": [("2026-11-02", 0)]}).empty  # a zero is no data either


def test_one_point_gets_an_axis_of_its_own_day():
    chart = charts.daily({"runs": [("2026-12-04T21:59:31.890Z", 1)]})
    check_axes(chart, ["2026-12-04"])
    assert chart.days == 1 and [t.label for t in chart.xticks] == ["2026-12-04"]
    bar = chart.bars[0]
    assert bar.width <= charts.MAX_BAR  # one bar does not fill the chart
    assert bar.x + bar.width / 2 == pytest.approx((chart.left + chart.right) / 2, abs=1e-3)


def test_one_run_sits_within_its_day_not_years_away():
    chart = charts.timed([("2026-12-04T21:59:31.890Z", 0.004)], series="seconds")
    assert (chart.first, chart.last, chart.days) == ("2026-12-04", "2026-12-04", 1)
    (mark,) = chart.bars
    centre = mark.x + mark.width / 2
    # 21:59:31.89 is 91.6 % through the day
    assert centre == pytest.approx(chart.left + (21 * 3600 + 59 * 60 + 31.89) / 86400 * (chart.right - chart.left),
                                   abs=1e-2)
    assert chart.left <= mark.x and mark.x + mark.width <= chart.right
    assert mark.at == "2026-12-04T21:59:31.890000Z" and mark.height >= 1


def test_all_points_on_one_day():
    points = [(f"2026-03-01T{h:02d}:00:00Z", h) for h in range(0, 24, 3)]
    check_axes(charts.daily({"n": points}), ["2026-03-01"])
    runs = charts.timed(points)
    assert runs.days == 1 and len(runs.bars) == 8
    xs = [b.x for b in runs.bars]
    assert xs == sorted(xs) and all(runs.left <= x <= runs.right for x in xs)


def test_a_span_of_years_ticks_on_first_days():
    start = date(2023, 5, 17)
    points = [((start + timedelta(days=i)).isoformat(), 1 + i % 3) for i in range(0, 3 * 365 + 40, 5)]
    chart = charts.daily({"n": points})
    check_axes(chart, [d for d, _ in points])
    labels = [date.fromisoformat(t.label) for t in chart.xticks]
    assert len(labels) <= charts.MAX_TICKS and all(d.day == 1 for d in labels), labels
    assert chart.days > 1000


def test_weeks_tick_on_mondays():
    points = [(f"2026-02-{d:02d}", 1) for d in range(1, 29)]
    chart = charts.daily({"n": points})
    check_axes(chart, [d for d, _ in points])
    assert all(date.fromisoformat(t.label).weekday() == 0 for t in chart.xticks)


def test_timestamps_with_timezones_count_on_their_utc_day():
    # 23:30 at UTC-05:00 is 04:30 the next day in UTC; 00:30 at +02:00 is the day before in UTC
    chart = charts.daily({"n": [("2026-06-01T23:30:00-05:00", 1), ("2026-06-03T00:30:00+02:00", 1)]})
    check_axes(chart, ["2026-06-02"])
    assert chart.bars[0].value == 2
    runs = charts.timed([("2026-06-01T23:30:00-05:00", 2.0)])
    assert runs.first == "2026-06-02" and runs.bars[0].at == "2026-06-02T04:30:00Z"


def test_stacked_series_share_a_bar_and_the_axis_holds_the_total():
    chart = charts.daily({"facts": [("2026-01-01", 5), ("2026-01-02", 6)], "procedures": [("2026-01-02", 2)]})
    check_axes(chart, ["2026-01-01", "2026-01-02"])
    day2 = [b for b in chart.bars if b.day == "2026-01-02"]
    assert [(b.series, b.value) for b in day2] == [("facts", 6), ("procedures", 2)]
    facts, procs = day2
    assert procs.y + procs.height == pytest.approx(facts.y, abs=1e-3)  # stacked on top
    assert chart.ymax >= 8


def test_growth_is_the_vaults_size_each_day_from_its_first_commit():
    growth = {"days": ["2026-11-02", "2026-11-05"], "facts": [3, 5], "procedures": [0, 1]}
    filled = carried(growth)
    assert filled["days"] == ["2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"]
    assert filled["facts"] == [3, 3, 3, 5] and filled["procedures"] == [0, 0, 0, 1]
    assert carried({"days": [], "facts": [], "procedures": []})["days"] == []


# ---------------------------------------------------------------------------------------------- the served pages
@pytest.fixture
def seeded(seeded_copy):
    return seeded_copy()


@pytest.fixture
def client(seeded):
    c = web_client(seeded)
    try:
        yield c
    finally:
        c.__exit__(None, None, None)


class Svg(HTMLParser):
    """The charts of a page as drawn: per chart (by the id of the card around it), its bars and ticks."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict] = {}
        self._card = None
        self._current = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if (a.get("id") or "").startswith("chart-"):
            self._card = a["id"]
        if tag == "svg" and "chart" in (a.get("class") or ""):
            self._current = {"first": a["data-first"], "last": a["data-last"], "days": int(a["data-days"]),
                             "ymax": float(a["data-ymax"]), "bars": [], "xticks": []}
            self.charts[self._card] = self._current
        if self._current is not None and tag == "rect" and "bar" in (a.get("class") or ""):
            self._current["bars"].append({"day": a["data-day"], "value": float(a["data-value"]),
                                          "series": a["data-series"], "at": a.get("data-at"),
                                          "x": float(a["x"]), "width": float(a["width"])})
        if self._current is not None and tag == "g" and a.get("class") == "xtick":
            self._current["xticks"].append(a["data-date"])

    def handle_endtag(self, tag):
        if tag == "svg":
            self._current = None


def svg_charts(text: str) -> dict[str, dict]:
    p = Svg()
    p.feed(text)
    return p.charts


def test_the_overview_draws_a_bar_per_day_of_the_vaults_real_history(client, seeded):
    data = client.get("/?format=json").json()["plots"]
    drawn = svg_charts(client.get("/").text)
    growth = drawn["chart-growth"]
    days = data["growth"]["days"]
    assert growth["first"] == days[0] and growth["last"] == days[-1]  # nothing before the vault existed
    last = [b for b in growth["bars"] if b["day"] == days[-1]]
    assert {b["series"]: b["value"] for b in last} == {"facts": data["growth"]["facts"][-1],
                                                      "procedures": data["growth"]["procedures"][-1]}
    episodes = drawn["chart-episodes"]
    assert {b["day"]: b["value"] for b in episodes["bars"]} == dict(zip(data["episodes"]["days"],
                                                                        map(float, data["episodes"]["count"])))
    recalls = drawn["chart-recalls"]
    assert {b["day"]: b["value"] for b in recalls["bars"]} == dict(zip(data["recalls"]["days"],
                                                                       map(float, data["recalls"]["count"])))
    for chart in drawn.values():
        assert chart["xticks"] and all(chart["first"] <= t <= chart["last"] for t in chart["xticks"])
        assert all(b["value"] <= chart["ymax"] for b in chart["bars"])


def test_a_growth_chart_of_a_vault_with_weeks_of_history(tmp_path, models, monkeypatch):
    """Commits dated on three days a week apart: a bar on every day between them, holding the size that day."""
    v = Vault.init(tmp_path / "v")
    v = Vault.open(v.root, embedder_factory=models, daemon=False)
    dates = ["2026-10-01T10:00:00+00:00", "2026-10-08T23:30:00-05:00", "2026-10-15T09:00:00+00:00"]
    for i, when in enumerate(dates):
        (v.root / "facts" / f"f{i}.md").parent.mkdir(exist_ok=True)
        (v.root / "facts" / f"f{i}.md").write_text(f"fact number {i}\n")
        git(v.root, "add", "facts")
        monkeypatch.setenv("GIT_AUTHOR_DATE", when)
        monkeypatch.setenv("GIT_COMMITTER_DATE", when)
        git(v.root, "commit", "-qm", f"fact {i}")
    monkeypatch.delenv("GIT_AUTHOR_DATE")
    monkeypatch.delenv("GIT_COMMITTER_DATE")
    c = web_client(v)
    try:
        drawn = svg_charts(c.get("/").text)["chart-growth"]
    finally:
        c.__exit__(None, None, None)
    assert (drawn["first"], drawn["last"], drawn["days"]) == ("2026-10-01", "2026-10-15", 15)
    values = {b["day"]: b["value"] for b in drawn["bars"] if b["series"] == "facts"}
    assert values["2026-10-01"] == 1 and values["2026-10-08"] == 1 and values["2026-10-09"] == 2  # UTC day
    assert values["2026-10-15"] == 3 and len(values) == 15
    assert drawn["xticks"] == [f"2026-10-{d:02d}" for d in range(1, 16, 2)]  # every other day: 8 labels


def test_a_procedure_run_once_gets_an_axis_around_that_run(client, seeded):
    page = client.get("/procedure/db/rotate-logs")
    data = client.get("/procedure/db/rotate-logs?format=json").json()
    (run,) = data["runs"]
    chart = svg_charts(page.text)["chart-runs"]
    day = run["at"][:10]
    assert (chart["first"], chart["last"], chart["days"]) == (day, day, 1)
    (mark,) = chart["bars"]
    assert mark["at"].replace("000Z", "Z") == run["at"] or mark["at"][:19] == run["at"][:19]
    assert mark["value"] == round(run["duration_ms"] / 1000, 3)
    assert chart["xticks"] == [day]


# ---------------------------------------------------------------------------------------------- facts list
class Cells(HTMLParser):
    """The facts table: per row, the text of each cell; and the class of the layout around it."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.layout: list[str] = []
        self._in_table = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and "columns" in (a.get("class") or ""):
            self.layout.append(a["class"])
        if tag == "table" and "facts" in (a.get("class") or ""):
            self._in_table = True
        if self._in_table and tag == "tr":
            self.rows.append([])
        if self._in_table and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        if tag == "table":
            self._in_table = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_the_facts_list_shows_what_each_fact_says(client, seeded):
    page = client.get("/facts")
    cells = Cells()
    cells.feed(page.text)
    header, *rows = cells.rows
    assert header[:2] == ["key", "text"]
    by_key = {row[0].split(" ")[0]: row[1] for row in rows}
    assert by_key["db/replica"] == "The replica database listens on 10.8.0.5 port 5432."
    assert by_key["db/primary"] == "The primary database listens on 10.8.0.4 port 5432."
    # markup in a fact's text is shown as text (escaped), not parsed
    assert by_key["evil/note"].startswith("payload: <script>document.title='pwned'")
    assert "<script>document.title" not in page.text and "&lt;script&gt;document.title" in page.text
    listed = client.get("/facts?format=json").json()["facts"]
    assert {f["key"]: f["excerpt"] for f in listed}["db/replica"] == by_key["db/replica"]
    # the list takes the width the key tree leaves, not half the page
    assert "columns side" in cells.layout
    css = (Path(charts.__file__).parent / "static" / "app.css").read_text()
    assert re.search(r"\.columns\.side \{ grid-template-columns: minmax\(12rem, 18rem\) minmax\(0, 1fr\); \}", css)


def test_a_long_fact_is_cut_to_one_line(client, seeded):
    seeded.facts.set("ops/long", "line one\n\n" + "word " * 200, source="user:admin")
    row = next(f for f in client.get("/facts?prefix=ops&format=json").json()["facts"] if f["key"] == "ops/long")
    assert row["excerpt"].startswith("line one word word") and row["excerpt"].endswith("…")
    assert len(row["excerpt"]) <= 200 and "\n" not in row["excerpt"]


# ---------------------------------------------------------------------------------------------- inbox diff
def diff_headers(proposal: dict) -> tuple[str, str]:
    lines = [line for kind, line in proposal["diff"] if kind == "meta"]
    return lines[0], lines[1]


def test_the_inbox_diff_is_against_the_fact_the_proposal_would_change(client, seeded):
    seeded.facts.set("db/primary", "The primary database moved to 10.8.0.11 port 5433.", source="agent:other")
    proposals = {p["key"]: p for p in client.get("/inbox?format=json").json()["proposals"]}
    assert diff_headers(proposals["db/primary"]) == ("--- facts/db/primary.md",
                                                      "+++ facts/db/primary.md (proposed by agent:scraper)")
    # a second proposal for the same fact waits under another name, and still diffs against the fact
    assert diff_headers(proposals["db/primary.2"]) == ("--- facts/db/primary.md",
                                                        "+++ facts/db/primary.md (proposed by agent:other)")
    assert "+The primary database moved to 10.8.0.11 port 5433." in [l for _k, l in proposals["db/primary.2"]["diff"]]
    # a new fact: nothing before it
    assert diff_headers(proposals["net/vpn"]) == ("--- /dev/null", "+++ facts/net/vpn.md (proposed by agent:scraper)")
    page = client.get("/inbox").text
    assert "+++ facts/net/vpn.md (proposed by agent:scraper)" in html.unescape(page)
    assert "inbox/" not in "".join(line for p in proposals.values() for _k, line in p["diff"])


# ---------------------------------------------------------------------------------------------- playground
class Meters(HTMLParser):
    """Per hit of the playground (its id), the figure each bar shows."""

    def __init__(self) -> None:
        super().__init__()
        self.hits: list[dict[str, float]] = []
        self.ids: list[str] = []
        self._meta = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "li" and "hit" in (a.get("class") or "").split():
            self.hits.append({})
            self._meta = True
        if tag == "a" and self._meta and self.hits and len(self.ids) < len(self.hits):
            self.ids.append(a["href"].rsplit("/", 1)[-1])
        if tag == "meter" and a.get("data-figure") and self.hits:
            self.hits[-1][a["data-figure"]] = float(a["value"])


QUESTION = "which port does the primary database use"


@pytest.fixture
def general(seeded, models):
    """The seeded vault with ``[recall] generality_weight`` 0.3 (off by default), and a client of it: what the
    playground and --explain show of a fact's cosine that lost or gained for how general it is."""
    toml = seeded.root / "memvault.toml"
    assert "generality_weight = 0.0" in toml.read_text()
    toml.write_text(toml.read_text().replace("generality_weight = 0.0", "generality_weight = 0.3"))
    v = Vault.open(seeded.root, embedder_factory=models, daemon=False)
    c = web_client(v)
    try:
        yield v, c
    finally:
        c.__exit__(None, None, None)


def test_the_playground_bars_are_the_figures_recall_ranked_with(general):
    seeded, client = general
    page = client.get("/recall", params={"q": QUESTION, "k": 20, "min_relevance": "0"})
    shown = client.get("/recall", params={"q": QUESTION, "k": 20, "min_relevance": "0", "format": "json"}
                       ).json()["result"]["hits"]
    result = seeded.recall(QUESTION, k=20, min_relevance=0, record_access=False, log=False)
    assert [(h["kind"], h["id"]) for h in shown] == [(h.kind, h.id) for h in result]
    # recency moves with the clock between two recalls: 1e-5 of a day's decay; everything else is equal
    for hit, item in zip(result, shown):
        explained = hit.explain()
        assert {b["factor"]: b["value"] for b in item["bars"]} == pytest.approx(explained["factors"], abs=1e-5)
        assert item["parts"] == explained["parts"]
    meters = Meters()
    meters.feed(page.text)
    assert len(meters.hits) == len(result)
    for hit, bars in zip(result, meters.hits):
        explained = hit.explain()
        assert bars == pytest.approx({**explained["factors"], "keyword": explained["parts"]["keyword"],
                                      "semantic": explained["parts"]["semantic"]}, abs=1e-5)
        assert (bars["keyword"], bars["semantic"]) == (explained["parts"]["keyword"], explained["parts"]["semantic"])
    # the semantic part is the cosine divided by the best cosine of the recall (what relevance used), not the cosine;
    # a fact's cosine first less what it lost for being general among the facts found (at least 0; a fact that
    # stands apart may pass the best cosine)
    facts = [h.explain()["parts"] for h in result if h.kind == "fact"]
    best = max(p["cosine"] for p in [h.explain()["parts"] for h in result])
    assert best > 0
    for parts in facts:
        used = max(parts["cosine"] - parts["general"], 0.0)
        assert parts["semantic"] == pytest.approx(used / best, abs=1e-5)
    assert any(p["semantic"] != p["cosine"] for p in facts)
    assert any(p["general"] > 0 for p in facts) and any(p["general"] < 0 for p in facts)
    assert not any(h.explain()["parts"]["general"] for h in result if h.kind != "fact")
    text = html.unescape(page.text)
    for parts in facts:  # the page says what each fact's cosine lost or gained
        if round(parts["general"], 3) > 0:
            assert f"cosine {parts['cosine']:.3f}, less {parts['general']:.3f} as general among the facts found" in text
        elif round(parts["general"], 3) < 0:
            assert f"cosine {parts['cosine']:.3f}, plus {-parts['general']:.3f} as apart from the facts found" in text
    top = shown[0]
    recall = seeded.config.recall
    weight = recall.procedure_semantic_weight if top["kind"] == "procedure" else recall.semantic_weight
    if not top["parts"]["exact"]:
        relevance = weight * top["parts"]["semantic"] + (1 - weight) * top["parts"]["keyword"]
        assert top["bars"][0]["factor"] == "relevance"
        assert top["bars"][0]["value"] >= relevance - 1e-5  # feedback and neighbours only add to it
    # the formula the page states is the one recall used, a runbook's share included (no float noise: 0.3, not
    # 0.30000000000000004)
    s, runbook = recall.semantic_weight, recall.procedure_semantic_weight
    assert (f"relevance = {s}·semantic + {round(1 - s, 3)}·keyword (a runbook: {runbook}·semantic + "
            f"{round(1 - runbook, 3)}·keyword); a runbook's cosine is with the query moved toward the three most "
            f"relevant runbooks found (weight {recall.procedure_feedback_weight}), scaled to keep the best runbook's; "
            f"a fact close to the other facts found loses {recall.generality_weight}× that closeness above theirs in "
            f"the mean.") in html.unescape(page.text)
    assert recall.procedure_feedback_weight and recall.generality_weight


def test_off_by_default_no_fact_loses_for_being_general_and_the_playground_says_nothing_of_it(client, seeded):
    page = client.get("/recall", params={"q": QUESTION, "k": 20, "min_relevance": "0"})
    assert seeded.config.recall.generality_weight == 0.0
    result = seeded.recall(QUESTION, k=20, min_relevance=0, record_access=False, log=False)
    assert len(result) and all(h.explain()["parts"]["general"] == 0.0 for h in result)
    text = html.unescape(page.text)
    assert "a fact close to the other facts found" not in text and "among the facts found" not in text


def test_recall_explain_prints_the_same_figures(general):
    from memvault.core.render import render

    seeded = general[0]

    result = seeded.recall(QUESTION, k=5, record_access=False, log=False)
    import json as _json

    data = _json.loads(render(result, "json", explain=True))
    assert [h["explain"] for h in data["hits"]] == [h.explain() for h in result]
    text = render(result, "text", explain=True, weights=seeded.config.recall.weights)
    parts = result[0].explain()["parts"]
    general = parts["general"]
    assert general, "the seeded vault's first fact is read among the other facts found"
    assert f"relevance parts: keyword {parts['keyword']:.3f}  semantic {parts['semantic']:.3f} " \
           f"(cosine {parts['cosine']:.3f}, " + (f"less {general:.3f} as general among the facts found"
                                                  if general > 0 else f"plus {-general:.3f} as apart from the facts "
                                                                      f"found") + ", ÷ best)" in text
    assert "explain" not in _json.loads(render(result, "json"))["hits"][0]  # the agents' answer is unchanged


# ---------------------------------------------------------------------------------------------- runbook provenance
def test_a_runbook_added_with_proc_add_shows_the_commit_that_added_it(client, seeded):
    sha = git(seeded.root, "log", "--diff-filter=A", "--format=%H", "--", "procedures")
    when = git(seeded.root, "log", "-1", "--format=%aI", sha)
    listed = client.get("/procedures?format=json").json()["procedures"][0]
    shown = client.get("/procedure/db/rotate-logs?format=json").json()["provenance"]
    assert listed["provenance"] == shown
    assert shown["added"] == {"commit": sha, "short": sha[:12], "author": "user:admin", "date": when,
                              "source": "user:admin"}
    assert shown["source"] == "user:admin" and shown["last"]["commit"] == sha
    for path in ("/procedures", "/procedure/db/rotate-logs"):
        text = html.unescape(client.get(path).text)
        assert f"added by user:admin {when.replace('T', ' ')} in {sha[:12]}" in re.sub(r"<[^>]+>", "", text), path
        assert "(by hand)" not in text, path
    overview = client.get("/?format=json").json()["sources"]["procedure"]
    assert overview == [{"source": "user:admin", "count": 1, "trusted": True}]
    assert "(by hand)" not in client.get("/").text
    hits = client.get("/recall?q=rotate+the+postgres+logs&format=json").json()["result"]["hits"]
    runbook = next(h for h in hits if h["kind"] == "procedure")
    assert runbook["provenance"]["added"]["short"] == sha[:12]
    assert "(by hand)" not in client.get("/recall?q=rotate+the+postgres+logs").text


def test_a_runbook_last_changed_outside_memvault_says_by_hand(client, seeded):
    path = seeded.root / "procedures" / "db" / "rotate-logs.sh"
    path.write_text(path.read_text() + "echo done\n")
    git(seeded.root, "commit", "-qam", "tweak the runbook")
    mine = git(seeded.root, "rev-parse", "HEAD")
    shown = client.get("/procedure/db/rotate-logs?format=json").json()["provenance"]
    assert shown["source"] is None and shown["last"]["commit"] == mine
    assert shown["added"]["source"] == "user:admin" and shown["added"]["commit"] != mine
    text = re.sub(r"<[^>]+>", "", html.unescape(client.get("/procedure/db/rotate-logs").text))
    author = git(seeded.root, "log", "-1", "--format=%an")
    assert f"last changed by (by hand) {author}" in text
    assert client.get("/?format=json").json()["sources"]["procedure"] == [{"source": None, "count": 1,
                                                                          "trusted": True}]


# ---------------------------------------------------------------------------------------------- markup stays text
SCRIPT = "<script>document.title='pwned'</script>"
IMG = "\"><img src=x onerror=alert(1)>"


class Elements(HTMLParser):
    """Every element and attribute of a page: what markup in stored text would add if it were not escaped."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def inert(text: str, root: str) -> None:
    p = Elements()
    p.feed(text)
    for tag, attrs in p.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert tag != "img", attrs
        if tag == "script":
            assert attrs.get("src", "").startswith(root + "/static/") or attrs.get("type") == "application/json", attrs
    assert SCRIPT not in text and "<img src=x" not in text


@pytest.fixture
def marked(seeded, monkeypatch):
    """The seeded vault with markup in every field a page shows that a writer chooses: a fact's text, category and
    tags, front matter written by hand, a git author and commit subject, a runbook's description and tags, an agent
    session's id and runtime, and the branch name."""
    v = seeded
    v.facts.set("evil/fields", f"value {SCRIPT} {IMG}", source="user:admin", category=f"cat{IMG}",
                tags=[f"t{SCRIPT}", f"u{IMG}"])
    v.facts.set("evil/proposal", f"proposed {SCRIPT} {IMG}", source="agent:scraper", tags=[f"p{IMG}"])
    hand = v.root / "facts" / "evil" / "hand.md"
    hand.write_text(f"---\nsource: user:admin\ncategory: '{IMG}'\nowner: \"{SCRIPT}\"\n---\nby hand {IMG}\n")
    monkeypatch.setenv("GIT_AUTHOR_NAME", f"Mallory {SCRIPT}")
    monkeypatch.setenv("GIT_COMMITTER_NAME", f"Mallory {SCRIPT}")
    git(v.root, "add", "facts")
    git(v.root, "commit", "-qm", f"hand edit {IMG}")
    runbook = v.root / "procedures" / "evil" / "show.sh"
    runbook.parent.mkdir(parents=True, exist_ok=True)
    runbook.write_text(f"#!/bin/sh\n# description: shows {SCRIPT} {IMG}\n# tags: x{IMG}\necho hi\n")
    runbook.chmod(0o755)
    git(v.root, "add", "procedures")
    git(v.root, "commit", "-qm", f"runbook {SCRIPT}")
    monkeypatch.delenv("GIT_AUTHOR_NAME")
    monkeypatch.delenv("GIT_COMMITTER_NAME")
    git(v.root, "branch", "-m", f"main{IMG.replace(' ', '-')}")
    v.episodes.append(f"session text {SCRIPT}", source="agent:claude-code", kind="raw",
                      meta={"session_id": f"s{IMG}", "runtime": f"r{SCRIPT}", "turn": 0})
    v.recall(f"value {SCRIPT}", k=3, source="agent:claude-code")
    return v


def test_markup_in_every_field_renders_inert_on_every_page(client, marked):
    episode = client.get("/timeline?format=json&text=session").json()["episodes"][0]["id"]
    pages = ["/", "/facts", "/facts?prefix=evil", f"/facts?tag=t{SCRIPT}", f"/facts?category=cat{IMG}",
             "/fact/evil/fields", "/fact/evil/hand", "/fact/evil/note", "/inbox", "/timeline",
             f"/timeline?session=s{IMG}", "/sessions", f"/episode/{episode}", "/procedures",
             "/procedure/evil/show", "/procedure/db/rotate-logs", f"/recall?q=value+{SCRIPT}+{IMG}&min_relevance=0",
             "/recalls", f"/new?key={IMG}&tags={SCRIPT}", f"/fact/{SCRIPT}", f"/procedure/{IMG}"]
    seen = {}
    for path in pages:
        r = client.get(path)
        assert r.status_code == (422 if path in pages[-2:] else 200), (path, r.status_code, r.text[-600:])
        inert(r.text, client.root)
        seen[path] = html.unescape(r.text)
    # the markup is there, as text, where each field is shown
    assert SCRIPT in seen["/fact/evil/fields"] and IMG in seen["/fact/evil/fields"]
    # git drops angle brackets from an author's name itself; a commit subject keeps them
    assert "Mallory scriptdocument.title='pwned'/script" in seen["/fact/evil/hand"]
    assert f"hand edit {IMG}" in seen["/fact/evil/hand"] and SCRIPT in seen["/fact/evil/hand"]
    assert f"cat{IMG}" in seen["/facts?prefix=evil"] and f"t{SCRIPT}" in seen["/facts?prefix=evil"]
    assert f"proposed {SCRIPT} {IMG}" in seen["/inbox"]
    assert f"shows {SCRIPT} {IMG}" in seen["/procedures"]
    assert f"runbook {SCRIPT}" in seen["/procedure/evil/show"] \
        and "added by (by hand) Mallory" in re.sub(r"<[^>]+>", "", seen["/procedure/evil/show"])
    assert f"s{IMG}" in seen["/sessions"] and f"r{SCRIPT}" in seen["/sessions"]
    assert f"value {SCRIPT}" in seen["/recalls"]
    assert SCRIPT in seen[f"/fact/{SCRIPT}"]  # the refused key, named in the error as text
