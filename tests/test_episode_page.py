"""The newest page of episodes (``list(limit=...)``) parses a file from its end and only the earlier lines whose
time could reach the page: it must be the very page that parsing every line gives, whatever the files hold."""
from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from memvault.stores.episodes import EpisodeLog, month_of

START = datetime(2026, 3, 1, tzinfo=timezone.utc)
SOURCES = ["user:ops", "agent:a", "agent:b", "web:example.com"]
KINDS = ["raw", "summary", "procedure_run"]


def full_parse(log: EpisodeLog, limit: int, keep=None, **filters) -> tuple[list, list]:
    """list(limit=...) as it was: every line of each month read, newest month first, until the limit is filled."""
    problems: list = []
    groups: dict = {None: []}
    for path in log.files(problems):
        groups.setdefault(month_of(path), []).append(path)
    items: list = []
    for month in [None, *sorted((m for m in groups if m is not None), reverse=True)]:
        if month is not None and len(items) >= limit:
            break
        items += [e for e in log.iter(files=groups[month], problems=problems, **filters) if keep is None or keep(e)]
    items.sort(key=lambda e: (e.time, e.id))
    return items[-limit:], problems


def _time(rng: random.Random, at: datetime) -> str:
    shape = rng.random()
    if shape < 0.6:
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")
    if shape < 0.75:
        return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{rng.randrange(1000):03d}Z"
    if shape < 0.8:
        return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{rng.randrange(10 ** 9):09d}Z"  # rounds to the microsecond
    if shape < 0.85:  # an offset: the same instant written in another zone (its text later, or earlier)
        return (at + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S+02:00")
    if shape < 0.9:
        return (at - timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%S-05:00")
    return at.strftime("%Y-%m-%d %H:%M:%S")  # naive, with a space


def _line(rng: random.Random, n: int, at: datetime) -> str:
    roll = rng.random()
    if roll < 0.03:
        return "{not json"
    if roll < 0.05:
        return ""
    if roll < 0.07:
        return json.dumps({"id": f"x{n}", "text": "no time"})
    data = {"id": f"e{rng.randrange(40 if roll < 0.1 else 10 ** 6)}", "created_at": _time(rng, at),
            "source": rng.choice(SOURCES), "kind": rng.choice(KINDS), "text": f"episode {n}"}
    escaped = rng.random() < 0.05  # the key spelled with an escape, the meta holding a plain, older one
    if escaped or rng.random() < 0.05:  # a nested created_at, before or after the real one
        older = at - timedelta(days=300)
        data["meta"] = {"created_at": older.strftime("%Y-%m-%dT%H:%M:%SZ") if escaped
                        else _time(rng, at + timedelta(days=rng.choice([-300, 300])))}
    if rng.random() < 0.05:
        data["text"] += " \x1b escaped"
    text = json.dumps(data, ensure_ascii=rng.random() < 0.1)
    return text.replace('"created_at"', '"created\\u005fat"', 1) if escaped else text


def build(tmp_path: Path, rng: random.Random) -> EpisodeLog:
    log = EpisodeLog(tmp_path, tmp_path / "episodes.lock")
    names = []
    for host in rng.sample(["", "alpha", "beta"], rng.randint(1, 3)):
        for month in rng.sample(range(1, 6), rng.randint(1, 4)):
            names.append((Path(host) / f"2026-{month:02d}.jsonl", month))
    if rng.random() < 0.3:
        names.append((Path("imported.jsonl"), 4))
    n = 0
    for name, month in names:
        path = tmp_path / "episodes" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        base = datetime(2026, month, 1, tzinfo=timezone.utc)
        ordered, burst = rng.random() < 0.6, rng.random() < 0.25  # a burst: every line within a few seconds
        lines = []
        for k in range(rng.randint(0, 120)):
            n += 1
            if burst:
                at = base + timedelta(seconds=rng.randrange(4), milliseconds=rng.randrange(1000))
            elif ordered:
                at = base + timedelta(minutes=10 * k + rng.choice([0, 0, 0, -1]) * 30, seconds=rng.randrange(3))
            else:
                at = base + timedelta(minutes=rng.randrange(40000))
            if rng.random() < 0.05:  # out of its month
                at += timedelta(days=rng.choice([-40, 40]))
            lines.append(_line(rng, n, at))
        text = "\n".join(lines) + ("\n" if lines and rng.random() < 0.9 else "")
        if rng.random() < 0.1:  # Windows line ends, or a lone carriage return (it ends a line too)
            text = text.replace("\n", "\r\n") if rng.random() < 0.5 else text.replace("\n", "\r", 1)
        path.write_bytes(text.encode())
    return log


def _shown(episodes) -> list:
    return [(e.to_dict(), e.path, e.line) for e in episodes]


@pytest.mark.parametrize("seed", range(40))
def test_the_newest_page_is_the_page_of_the_full_parse(tmp_path, seed, monkeypatch):
    import memvault.stores.episodes as episodes_mod

    rng = random.Random(seed)
    if seed % 2:  # blocks of a few lines: the scan's bound rises many times within a file
        monkeypatch.setattr(episodes_mod, "SCAN_BLOCK", rng.choice([1, 100, 700]))
    log = build(tmp_path, rng)
    for _ in range(12):
        filters: dict = {}
        if rng.random() < 0.3:
            filters["since"] = START + timedelta(days=rng.randrange(120))
        if rng.random() < 0.3:
            filters["until"] = START + timedelta(days=rng.randrange(30, 150))
        if rng.random() < 0.3:
            filters["source"] = rng.choice([*SOURCES, "agent:*"])
        if rng.random() < 0.3:
            filters["kind"] = rng.choice(KINDS)
        keep = (lambda e: "3" not in e.text) if rng.random() < 0.2 else None
        limit = rng.choice([1, 2, 5, 20, 50, 500])
        expected, all_problems = full_parse(log, limit, keep, **filters)
        problems: list = []
        got = log.list(limit=limit, keep=keep, problems=problems, **filters)
        assert _shown(got) == _shown(expected), (seed, limit, filters)
        # A bad line passed over is not reported; every one reported is one the full parse reports.
        assert all(p in all_problems for p in problems)


def test_a_time_ordered_month_parses_only_the_page(tmp_path, monkeypatch):
    import memvault.stores.episodes as episodes_mod

    log = EpisodeLog(tmp_path, tmp_path / "episodes.lock")
    path = tmp_path / "episodes" / "2026-05.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"id": f"e{k:05d}", "created_at": (datetime(2026, 5, 1, tzinfo=timezone.utc)
                                        + timedelta(seconds=20 * k)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                        "source": "user:ops", "text": f"line {k}"}) + "\n" for k in range(5000)))
    parsed = []
    real = episodes_mod.parse_line
    monkeypatch.setattr(episodes_mod, "parse_line", lambda *a, **k: parsed.append(1) or real(*a, **k))
    page = log.list(limit=20)
    assert [e.text for e in page] == [f"line {k}" for k in range(4980, 5000)]
    assert len(parsed) <= 20 + 3  # the page, and the few lines within a second of its oldest


def test_a_midnight_written_as_24_00_is_parsed_as_the_full_parse_reads_it(tmp_path, monkeypatch):
    """Python 3.14's fromisoformat reads ``T24:00:00`` as the next day's midnight (ISO 8601's end of day, gh-102450;
    3.11-3.13 refuse it): the text sorts before the next day's ``T00:00:00``, its time does not. The scan skipped such
    a line as older than the page's oldest second when it ties with it. Emulated here on any Python."""
    import memvault.stores.episodes as episodes_mod
    from memvault.rules.timeutil import parse_time

    def parse_time_314(value, name="time"):
        if isinstance(value, str) and "T24:00:00" in value:
            return parse_time(value.replace("T24:00:00", "T00:00:00"), name) + timedelta(days=1)
        return parse_time(value, name)

    monkeypatch.setattr(episodes_mod, "parse_time", parse_time_314)
    log = EpisodeLog(tmp_path, tmp_path / "episodes.lock")
    path = tmp_path / "episodes" / "2026-05.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"id": i, "created_at": at, "source": "user:ops", "text": i}) + "\n"
                            for i, at in (("z", "2026-05-01T24:00:00Z"), ("a", "2026-05-02T00:00:00Z"))))
    expected, _ = full_parse(log, 1)
    assert [e.id for e in expected] == ["z"]  # the same second: the greater id is the newer
    assert [e.id for e in log.list(limit=1)] == ["z"]
