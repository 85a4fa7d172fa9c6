"""One value nested 100,000 deep (Python's parser recurses once per level) in a line someone else wrote: an episode
line a teammate committed, a line of an agent's transcript, a hook's payload. It is one bad line, named; the lines
around it are read (before, a RecursionError ended the reading: session start loaded no memory for any project,
`episode list` exited 70, and no turn of the transcript was ever captured)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from memvault.interfaces.agents import transcripts
from memvault.interfaces.agents.project import Project
from memvault.interfaces.agents.recent import recent
from memvault.rules.errors import EpisodeError
from memvault.rules.jsontext import MAX_READ_DEPTH, parse
from memvault.stores.episodes import parse_line

FIXTURES = Path(__file__).parent / "fixtures" / "agents"
DEEP = "[" * 100_000 + "]" * 100_000


def deep_line(**fields) -> str:
    return json.dumps({"id": "x", "created_at": "2026-12-01T00:00:00Z", "source": "user:m", "text": "t",
                       "meta": "@@", **fields}).replace('"@@"', DEEP)


def test_parse_takes_what_python_can_and_names_the_depth_of_what_it_cannot():
    assert parse("[" * MAX_READ_DEPTH + "]" * MAX_READ_DEPTH) is not None
    assert parse(b'{"a": "[[[[[[[[[[[[ in a string ]"}') == {"a": "[[[[[[[[[[[[ in a string ]"}
    for data in (DEEP, DEEP.encode(), "[" * (MAX_READ_DEPTH + 1) + "]" * (MAX_READ_DEPTH + 1)):
        with pytest.raises(ValueError, match="nested deeper than"):
            parse(data)


def test_a_deep_episode_line_is_one_bad_line(vault):
    with pytest.raises(EpisodeError, match="nested deeper than"):
        parse_line(deep_line())
    vault.episodes.append("before the teammate's line", source="user:a")
    path = next(vault.episodes.dir.rglob("*.jsonl"))
    with path.open("a") as f:
        f.write(deep_line() + "\n")
    vault.episodes.append("after the teammate's line", source="user:a")
    problems: list = []
    assert [e.text for e in vault.episodes.iter(problems=problems)] == ["before the teammate's line",
                                                                         "after the teammate's line"]
    assert len(problems) == 1 and "nested deeper than" in str(problems[0].reason)


def test_session_start_hears_the_lines_around_a_deep_one(tmp_path):
    at = datetime(2026, 12, 6, 12, tzinfo=timezone.utc)
    month = tmp_path / "episodes" / "2026-12.jsonl"
    month.parent.mkdir(parents=True)
    good = json.dumps({"id": "e1", "created_at": (at - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "source": "user:ops", "kind": "incident", "text": "shop deploy failed", "tags": ["shop"]})
    month.write_text(good + "\n" + deep_line(created_at="2026-12-06T11:30:00Z", tags=["shop"]) + "\n")
    picks = recent([month], Project(cwd="/src/shop", root="/src/shop", name="shop"), 5, at=at)
    assert [p.episode.id for p in picks] == ["e1"]


def test_a_deep_transcript_line_leaves_the_other_turns_captured(tmp_path):
    lines = (FIXTURES / "claude-code" / "session.jsonl").read_text().splitlines(keepends=True)
    whole = transcripts.read("claude-code", FIXTURES / "claude-code" / "session.jsonl")
    bad = json.dumps({"type": "user", "uuid": "x1", "message": {"role": "user", "content": "x"},
                      "toolUseResult": "@@"}).replace('"@@"', DEEP) + "\n"
    path = tmp_path / "session.jsonl"
    path.write_text("".join(lines[:5]) + bad + "".join(lines[5:]))
    read = transcripts.read("claude-code", path)
    assert [t.prompt for t in read.turns] == [t.prompt for t in whole.turns] and whole.turns
    assert len(read.problems) == len(whole.problems) + 1
