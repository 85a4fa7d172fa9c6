"""What happened to a project lately, as a session starting in it should hear it: the episodes about the project,
chosen by what they are (a failure, an incident, a deploy outweighs a captured chat turn) and how recent they are.

A session in a service's repository must learn that yesterday's deploy failed even when thirty captured turns came
after it: newest-first alone gave it the chatter. An episode is *about* the project when it is tagged with the
project's slug, was captured in a directory inside it, records a run of one of its runbooks
(``<slug>/...``), or names the project in its text.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...rules.errors import MemvaultError
from ...rules.timeutil import now
from ...rules.validation import MAX_FUTURE
from ...stores.episodes import Episode, month_of, parse_line

if TYPE_CHECKING:
    from .project import Project

#: Bytes read from the end of each month file, newest first.
EPISODE_TAIL = 1 << 20
#: Days after which an episode counts half as much: yesterday's failure outweighs this morning's chat turn.
HALF_LIFE_DAYS = 3.0
#: Episodes older than this are not looked at: the month files read are those of the months from this long ago
#: to now (every host's: a vault tracked in git has a folder per host).
HORIZON_DAYS = 30.0

_FAILURE_KINDS = {"incident", "failure", "outage", "error", "postmortem"}
_FAILURE_TAGS = _FAILURE_KINDS | {"failed", "rollback", "rolled-back", "broken", "sev1", "sev2"}
_DEPLOY_WORDS = {"deploy", "deployed", "deployment", "release", "released", "rollout", "rollback", "migration"}
_FAILURE_TEXT = re.compile(r"\b(fail(ed|s|ure)?|incident|outage|rolled back|roll(ed)? ?back|crash(ed)?|"
                           r"broke|down ?time|timed out)\b", re.I)
_DEPLOY_TEXT = re.compile(r"\b(deploy(ed|ment|s)?|releas(e|ed)|rollout|rollback|rolled back|migration)\b", re.I)


@dataclass
class Pick:
    episode: Episode
    weight: float
    why: str        # failure, deploy, summary, turn


def about(project: Project, episode: Episode) -> bool:
    """Whether ``episode`` is about ``project`` (see the module doc)."""
    slug = project.slug
    if slug in episode.tags:
        return True
    meta = episode.meta if isinstance(episode.meta, dict) else {}
    cwd = meta.get("cwd")
    if isinstance(cwd, str) and project.contains(cwd):
        return True
    name = meta.get("name")
    if episode.kind == "procedure_run" and isinstance(name, str) and owner(name) == slug:
        return True
    return mentions(project, episode.text)


def mentions(project: Project, text: str) -> bool:
    """Whether ``text`` names the project (its slug or name as a word of its own: "notify", not "notifying")."""
    names = {project.slug, project.name.lower()} - {"", "project"}
    low = text.lower()
    return any(re.search(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", low) for n in names)


def owner(name: str) -> str:
    """The folder a key or runbook name is filed under: ``billing`` for ``billing/deploy`` and for
    ``projects/billing/deploy``."""
    parts = name.split("/")
    return parts[1] if parts[0] == "projects" and len(parts) > 2 else parts[0]


def weigh(episode: Episode, at: datetime) -> Pick | None:
    """How much a session should hear of ``episode``: what it is times how recent it is (None: too old, or dated
    further after ``at`` than clock skew allows, which cannot have happened: a line placed by hand or by a host
    whose clock is wrong would otherwise weigh as if it had just happened until its date came)."""
    try:
        when = episode.time
    except MemvaultError:
        return None
    if when > at + MAX_FUTURE:
        return None
    age = max(0.0, (at - when).total_seconds() / 86400)
    if age > HORIZON_DAYS:
        return None
    tags = {t.lower() for t in episode.tags}
    meta = episode.meta if isinstance(episode.meta, dict) else {}
    code = meta.get("exit_code")
    captured = episode.source.startswith("agent:") and episode.kind == "raw"
    deploy = bool(tags & _DEPLOY_WORDS) or episode.kind in _DEPLOY_WORDS or bool(_DEPLOY_TEXT.search(episode.text))
    if (episode.kind in _FAILURE_KINDS or tags & _FAILURE_TAGS
            or (episode.kind == "procedure_run" and isinstance(code, int) and code != 0)):
        base, why = 4.0, "failure"
    elif _FAILURE_TEXT.search(episode.text) and (deploy or not captured):
        # A chat turn saying a test failed is chatter; one saying the deploy failed is what happened.
        base, why = 3.5, "failure"
    elif deploy and not captured:
        base, why = 2.0, "deploy"
    elif episode.kind == "summary":
        base, why = 1.5, "summary"
    elif episode.kind == "procedure_run":
        base, why = 1.5, "run"
    else:
        base, why = 1.0, "turn"
    return Pick(episode, base * 0.5 ** (age / HALF_LIFE_DAYS), why)


def recent(files: list[Path], project: Project, limit: int, *, at: datetime | None = None,
           seen_tags: set[str] | None = None) -> list[Pick]:
    """The ``limit`` episodes about ``project`` a session should hear first, heaviest first; at most two
    captured chat turns among them (the runtime's own resume already carries a session's turns). ``seen_tags``
    collects every tag read on the way (the projects the vault knows of)."""
    if limit <= 0:
        return []
    at = at or now()
    picks: list[Pick] = []
    for path in month_files(files, at):
        for episode in tail(path):
            if seen_tags is not None:
                seen_tags.update(episode.tags)
            if not about(project, episode):
                continue
            pick = weigh(episode, at)
            if pick is not None:
                picks.append(pick)
    picks.sort(key=lambda p: -p.weight)
    chosen: list[Pick] = []
    turns = 0
    for pick in picks:
        if pick.why == "turn":
            if turns >= 2:
                continue
            turns += 1
        chosen.append(pick)
        if len(chosen) >= limit:
            break
    return chosen


def month_files(files: list[Path], at: datetime) -> list[Path]:
    """The month files of ``files`` that can hold an episode of the last :data:`HORIZON_DAYS` before ``at`` (up to
    the clock skew a write allows after it), newest month first, every host's. A file named for a later month (a
    host whose clock ran ahead) is not "the newest": taking the last files by name let it, or a third host's file
    of this month, push this month's failures out."""
    first = month_of_time(at - timedelta(days=HORIZON_DAYS))
    last = month_of_time(at + MAX_FUTURE)
    dated = [(m, p) for p in files if (m := month_of(p)) is not None and first <= m <= last]
    return [p for _m, p in sorted(dated, key=lambda mp: mp[0], reverse=True)]


def month_of_time(at: datetime) -> tuple[int, int]:
    """The month file an episode of time ``at`` is appended to (months are UTC's, as the file names)."""
    utc = at.astimezone(timezone.utc)
    return utc.year, utc.month


def tail(path: Path) -> Iterator[Episode]:
    """The episodes at the end of a month file, newest first (at most :data:`EPISODE_TAIL` bytes read)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - EPISODE_TAIL))
            data = f.read()
    except OSError:
        return
    lines = data.splitlines()
    if size > EPISODE_TAIL and lines:
        lines = lines[1:]  # the first one is cut
    for raw in reversed(lines):
        try:
            episode = parse_line(raw.decode("utf-8"), path)
        except (MemvaultError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        yield episode


def describe(pick: Pick) -> dict[str, Any]:
    return {"id": pick.episode.id, "why": pick.why, "weight": round(pick.weight, 3)}
