"""What a session starting in a project hears of its recent episodes (memvault.interfaces.agents.recent), when the
vault is shared by several hosts (``[episodes] track_in_git``: one folder per host) and when a month file or a line
is dated after the present (a host whose clock is wrong, a line written by hand or committed by a teammate)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from memvault.interfaces.agents.project import Project
from memvault.interfaces.agents.recent import recent

AT = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
BILLING = Project(cwd="/src/billing", root="/src/billing", name="billing")


def line(text: str, when: datetime, *, kind: str = "incident", ident: str | None = None) -> str:
    return json.dumps({"id": ident or f"e-{text.split()[0]}", "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "source": "user:ops", "kind": kind, "text": text, "tags": ["billing"]}) + "\n"


def write(path: Path, *lines: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.writelines(lines)
    return path


def ids(files: list[Path], limit: int = 10) -> list[str]:
    return [p.episode.id for p in recent(sorted(files, key=lambda p: (p.name, p.as_posix())), BILLING, limit, at=AT)]


def test_every_hosts_files_of_this_month_and_the_last_are_read(tmp_path):
    """Three hosts share the vault: each appends to its own month file. The session must hear each host's failure
    of this month and the failure of late last month, not the two files last in name order."""
    base = tmp_path / "episodes"
    files = [
        write(base / "alpha" / "2026-12.jsonl", line("alpha deploy of billing failed", AT - timedelta(hours=3))),
        write(base / "beta" / "2026-12.jsonl", line("beta disk of billing full", AT - timedelta(hours=5))),
        write(base / "gamma" / "2026-12.jsonl", line("gamma billing queue stuck", AT - timedelta(hours=7))),
        write(base / "alpha" / "2026-11.jsonl", line("late billing outage", AT - timedelta(days=8))),
    ]
    assert set(ids(files)) == {"e-alpha", "e-beta", "e-gamma", "e-late"}


def test_a_month_file_named_after_the_present_does_not_push_this_month_out(tmp_path):
    """A host whose clock ran a year ahead wrote 2027-12.jsonl: taken as "the newest month", it hid this month's
    failure from every session start for a year."""
    base = tmp_path / "episodes"
    files = [
        write(base / "2026-12.jsonl", line("today billing deploy failed", AT - timedelta(hours=2))),
        write(base / "2027-12.jsonl", line("skewed billing incident", AT + timedelta(days=365))),
    ]
    assert ids(files) == ["e-today"]


def test_a_line_dated_after_the_present_is_not_heard_first_for_ever(tmp_path):
    """A line dated weeks ahead (inside this month's file) weighed as if it had just happened, and kept that weight
    until its date came: it is not believed (as recall's recency does not believe it); a line within the clock
    skew allowed to a write is."""
    base = tmp_path / "episodes"
    files = [write(base / "2026-12.jsonl",
                   line("yesterday billing rollback", AT - timedelta(days=1), kind="failure"),
                   line("planted billing incident", AT + timedelta(days=20)),
                   line("skewed billing incident", AT + timedelta(minutes=3)))]
    assert ids(files) == ["e-skewed", "e-yesterday"]


def test_a_busy_day_of_another_projects_turns_does_not_hide_yesterdays_failure(tmp_path):
    """Only the last 1 MiB of a month file was read: 200 captured turns of ~6 KiB about another project after it
    and yesterday's failed deploy was never looked at. Lines about other projects are skipped unparsed now."""
    base = tmp_path / "episodes"
    turns = [json.dumps({"id": f"t{i}", "created_at": (AT - timedelta(hours=20 - i / 20)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "source": "agent:claude-code", "kind": "raw", "tags": ["claude-code", "search"],
        "text": "User: refactor the search module\n\nAssistant: done. " + "details " * 750,
        "meta": {"cwd": "/src/search"}}) + "\n" for i in range(300)]
    files = [write(base / "2026-12.jsonl", line("failed billing deploy", AT - timedelta(days=1)), *turns)]
    assert files[0].stat().st_size > 1.5 * (1 << 20)
    assert ids(files) == ["e-failed"]


def test_every_line_about_the_project_from_sixty_hosts_is_weighed_within_the_parse_budget(tmp_path):
    """A team of 60 hosts whose every line is about the project: what is parsed is bounded (PARSE_TOTAL shared
    among the files), each host's newest lines first, so each host's failure of today is still heard."""
    from memvault.interfaces.agents import recent as recent_mod

    base = tmp_path / "episodes"
    files = []
    for h in range(60):
        chatter = [line(f"h{h}x{k} billing chatter " + "z " * 200, AT - timedelta(hours=2, minutes=k), kind="raw",
                        ident=f"c{h}-{k}") for k in range(400, 0, -1)]
        files.append(write(base / f"host{h:02d}" / "2026-12.jsonl", *chatter,
                           line(f"h{h} billing job failed", AT - timedelta(minutes=h), ident=f"f{h}")))
    parsed = []
    real = recent_mod.parse_line
    recent_mod.parse_line = lambda raw, path=None: parsed.append(len(raw)) or real(raw, path)
    try:
        assert ids(files, limit=5) == [f"f{h}" for h in range(5)]
    finally:
        recent_mod.parse_line = real
    assert sum(parsed) <= 60 * max(recent_mod.PARSE_LEAST, recent_mod.PARSE_TOTAL // 60) + 60 * 500


@pytest.mark.parametrize("word", ["fail", "failed", "FAILS", "Failure", "incident", "outage", "rolled back", "Rollback",
                                  "roll back", "rolledback", "crash", "crashed", "broke", "downtime", "down time",
                                  "timed out", "deploy", "Deployed", "deployment", "deploys", "release", "released",
                                  "rollout", "migration"])
def test_a_text_the_patterns_match_holds_one_of_their_pieces(word):
    """weigh() searches a text only when it holds a piece of a match (the search was most of the cost of a busy
    month): every match must hold one, or a failure would go unheard."""
    from memvault.interfaces.agents import recent as r

    for pattern, pieces in ((r._FAILURE_TEXT, r._FAILURE_PIECES), (r._DEPLOY_TEXT, r._DEPLOY_PIECES)):
        text = f"the {word} of the job"
        if pattern.search(text):
            assert r._says(pattern, pieces, text, text.lower())


def test_a_turn_captured_in_another_project_is_not_about_this_one_for_naming_its_word(tmp_path):
    """A repository named "api": a turn captured in /src/billing that says "the billing API" is billing's."""
    api = Project(cwd="/src/api", root="/src/api", name="api")
    base = tmp_path / "episodes"
    turn = json.dumps({"id": "t1", "created_at": (AT - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "source": "agent:claude-code", "kind": "raw", "tags": ["claude-code", "billing"],
                       "text": "User: why did the billing API fail?\n\nAssistant: the deploy failed",
                       "meta": {"cwd": "/src/billing"}}) + "\n"
    note = line("api gateway deploy failed", AT - timedelta(hours=2), ident="e-note").replace('"tags": ["billing"]',
                                                                                             '"tags": []')
    files = [write(base / "2026-12.jsonl", turn, note)]
    assert [p.episode.id for p in recent(files, api, 5, at=AT)] == ["e-note"]


def test_a_line_that_came_after_a_newer_one_is_still_weighed(tmp_path):
    """A file is not in time order (episode add --at, an import): an incident of 2 hours ago followed by a note
    dated 4 days back and three deploys was lost to a read that stopped at the old note."""
    base = tmp_path / "episodes"
    files = [write(base / "2026-12.jsonl",
                   line("recent billing incident", AT - timedelta(hours=2), ident="e-incident"),
                   line("old billing note", AT - timedelta(days=4), kind="raw", ident="e-note"),
                   *[line(f"billing deploy {i}", AT - timedelta(hours=1), kind="deploy", ident=f"e-d{i}")
                     for i in range(3)])]
    assert "e-incident" in ids(files, limit=3)


def test_a_project_named_in_another_alphabet_is_found_whatever_its_case(tmp_path):
    project = Project(cwd="/home/u/Проект", root="/home/u/Проект", name="Проект")
    base = tmp_path / "episodes"
    turn = json.dumps({"id": "t1", "created_at": (AT - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "source": "agent:claude-code", "kind": "raw", "tags": ["claude-code"], "text": "User: hi",
                       "meta": {"cwd": "/home/u/Проект/src"}}, ensure_ascii=False) + "\n"
    note = json.dumps({"id": "e-upper", "created_at": (AT - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "source": "user:ops", "kind": "incident", "text": "ПРОЕКТ deploy failed"},
                      ensure_ascii=False) + "\n"  # as memvault writes lines
    files = [write(base / "2026-12.jsonl", turn, note)]
    assert sorted(p.episode.id for p in recent(files, project, 5, at=AT)) == ["e-upper", "t1"]
