"""What happened to a project lately, as a session starting in it should hear it: the episodes about the project,
chosen by what they are (a failure, an incident, a deploy outweighs a captured chat turn) and how recent they are.

A session in a service's repository must learn that yesterday's deploy failed even when thirty captured turns came
after it: newest-first alone gave it the chatter. An episode is *about* the project when it is tagged with the
project's slug, was captured in a directory inside it, records a run of one of its runbooks
(``<slug>/...``), or names the project in its text (unless it was captured in a directory outside it: a session in
a repository named "api" is not told every other service's turn that says "API").
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

#: Bytes read from the end of each month file. A line is parsed only when it holds the project's slug, name or
#: folder (everything :func:`about` asks for is one of them), so a busy day of another project's turns, which
#: filled the 1 MiB read before, no longer hides yesterday's failure.
EPISODE_TAIL = 8 << 20
#: Bytes read over all the month files of one session start (a vault tracked in git has a folder per host), the
#: most recently written files first: reading and finding the project's lines costs ~1 ms a MiB, so this bounds
#: only the pathological (60 hosts' busy months are 160 MB: 0.2 s).
TOTAL_TAIL = 256 << 20
#: Bytes of lines about the project parsed over all the files, shared evenly among them (at least
#: :data:`PARSE_LEAST` each, the newest lines first): parsing, not reading, is what costs (~0.1 s a MiB), and a
#: team of 60 hosts whose every line is about the project took 4.8 s to weigh all 32 MiB.
PARSE_TOTAL = 8 << 20
PARSE_LEAST = 32 << 10
_TAGS = re.compile(rb'"tags":\s*\[([^\]]*)\]')
_TAG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
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
#: A piece of every match of each pattern: a text holding none of them is not searched (the search cost 30 µs a
#: line, the pieces 2 µs: most of weighing a busy month).
_FAILURE_PIECES = ("fail", "incident", "outage", "roll", "crash", "broke", "down", "timed out")
_DEPLOY_PIECES = ("deploy", "releas", "rollout", "rollback", "rolled back", "migration")


def _says(pattern: re.Pattern[str], pieces: tuple[str, ...], text: str, low: str) -> bool:
    return any(piece in low for piece in pieces) and pattern.search(text) is not None


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
    if isinstance(cwd, str) and cwd:  # captured in another project: naming this one's word ("api") is not enough
        return False
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
    low = episode.text.lower()
    deploy = (bool(tags & _DEPLOY_WORDS) or episode.kind in _DEPLOY_WORDS
              or _says(_DEPLOY_TEXT, _DEPLOY_PIECES, episode.text, low))
    if (episode.kind in _FAILURE_KINDS or tags & _FAILURE_TAGS
            or (episode.kind == "procedure_run" and isinstance(code, int) and code != 0)):
        base, why = 4.0, "failure"
    elif _says(_FAILURE_TEXT, _FAILURE_PIECES, episode.text, low) and (deploy or not captured):
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
    needles = _needles(project)
    budget = TOTAL_TAIL
    paths = month_files(files, at)
    share = max(PARSE_LEAST, PARSE_TOTAL // max(1, len(paths)))
    for path in paths:
        if budget <= 0:
            break
        data = _read_tail(path, min(EPISODE_TAIL, budget))
        budget -= len(data)
        if seen_tags is not None:
            seen_tags.update(_tags_in(data))
        for episode in _lines_with(data, needles, path, share):
            if not about(project, episode):
                continue
            pick = weigh(episode, at)
            if pick is not None:  # read on: a line dated earlier can follow a later one (--at, an import)
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
    dated = [(m, _mtime(p), p) for p in files if (m := month_of(p)) is not None and first <= m <= last]
    return [p for _m, _t, p in sorted(dated, key=lambda mtp: (mtp[0], mtp[1]), reverse=True)]


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def month_of_time(at: datetime) -> tuple[int, int]:
    """The month file an episode of time ``at`` is appended to (months are UTC's, as the file names)."""
    utc = at.astimezone(timezone.utc)
    return utc.year, utc.month


def _needles(project: Project) -> tuple[list[bytes], list[str]]:
    """What a line about ``project`` holds, lower-cased: its slug (a tag, a runbook's folder), its name (a mention)
    or its folder (a captured turn's cwd), as it is written and as JSON escapes it. ASCII ones as bytes (found in
    the tail lower-cased as bytes); the others as text (``bytes.lower`` leaves "Проект" as it is: each line is
    decoded and lower-cased for them)."""
    words = {project.slug, project.name.lower(), (project.root or project.cwd or "").lower()} - {"", "project"}
    forms = words | {json.dumps(w)[1:-1] for w in words}
    return (sorted({w.encode() for w in forms if w.isascii()}, key=len), sorted(w for w in forms if not w.isascii()))


def _read_tail(path: Path, limit: int) -> bytes:
    """The last ``limit`` bytes of ``path``, from a line start."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - limit))
            data = f.read(limit)
    except OSError:
        return b""
    if size > limit:
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else b""  # the first line is cut
    return data


def _lines_with(data: bytes, needles: tuple[list[bytes], list[str]], path: Path, most: int) -> Iterator[Episode]:
    """The episodes of the lines of ``data`` holding one of ``needles`` (case aside), newest first (last line
    first), until ``most`` bytes of them were parsed; no other line is parsed."""
    ascii_needles, other = needles
    low = data.lower()
    starts: set[int] = set()
    for needle in ascii_needles:
        at = low.find(needle)
        while at >= 0:
            start = low.rfind(b"\n", 0, at) + 1
            end = low.find(b"\n", at)
            starts.add(start)
            at = low.find(needle, end if end >= 0 else len(low))
    if other:
        start = 0
        for line in data.split(b"\n"):
            if start not in starts and any(n in line.decode("utf-8", "replace").lower() for n in other):
                starts.add(start)
            start += len(line) + 1
    for start in sorted(starts, reverse=True):
        end = data.find(b"\n", start)
        if most <= 0:
            return
        raw = data[start:end if end >= 0 else len(data)]
        most -= len(raw)
        try:
            yield parse_line(raw.decode("utf-8"), path)
        except (MemvaultError, UnicodeDecodeError, ValueError):
            continue


def _tags_in(data: bytes) -> set[str]:
    """Every tag written in ``data``'s lines (the projects the vault knows of), without parsing the lines."""
    found: set[str] = set()
    for m in _TAGS.finditer(data):
        for t in _TAG.finditer(m.group(1)):
            try:
                tag = json.loads(b'"' + t.group(1) + b'"')
            except ValueError:
                continue
            if isinstance(tag, str):
                found.add(tag)
    return found


def describe(pick: Pick) -> dict[str, Any]:
    return {"id": pick.episode.id, "why": pick.why, "weight": round(pick.weight, 3)}
