"""How a vault grew: facts and procedures per day from git history, cached by commit.

One ``git log --name-status`` over ``facts/`` and ``procedures/`` gives, per commit, the files added and deleted;
their running sum per day is the number of facts and procedures over time. The result is kept in
``growth.json`` (in the vault's state directory) with the commit it was computed at, and brought forward with
``git log OLD..HEAD`` when HEAD moves on (a rewrite of history starts again from scratch), so a page never walks the whole history twice.
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.errors import GitError, UnsafePath
from ..rules.fsutil import atomic_write
from ..rules.gitenv import other_repo_env

if TYPE_CHECKING:
    from ..stores.gitstore import GitStore, LogEntry

CACHE_NAME = "growth.json"
CACHE_VERSION = 1
AREAS = ("facts", "procedures")
_TRAILER = re.compile(r"^(Memvault-[A-Za-z]+):\s*(.*)$", re.M)


@dataclass
class Growth:
    """Net files added per day and area (``{"2026-11-02": {"facts": 3, "procedures": 0}}``) up to ``head``."""

    head: str | None = None
    days: dict[str, dict[str, int]] = field(default_factory=dict)

    def series(self) -> dict[str, Any]:
        """Cumulative counts per day: ``{"days": [...], "facts": [...], "procedures": [...]}``."""
        out: dict[str, Any] = {"days": [], **{area: [] for area in AREAS}}
        totals = dict.fromkeys(AREAS, 0)
        for day in sorted(self.days):
            out["days"].append(day)
            for area in AREAS:
                totals[area] += self.days[day].get(area, 0)
                out[area].append(totals[area])
        return out


def growth(git: GitStore | None, root: Path, state_dir: Path) -> Growth:
    """The vault's growth up to HEAD (see the module doc); an empty one without git or commits."""
    if git is None:
        return Growth()
    try:
        head = git.run("rev-parse", "--verify", "--quiet", "HEAD")
    except GitError:
        return Growth()
    cache = state_dir / CACHE_NAME
    known = _load(cache, root)
    if known is not None and known.head == head:
        return known
    start = None
    if known is not None and known.head:
        try:
            git.run("merge-base", "--is-ancestor", known.head, head)
            start = known.head
        except GitError:
            known = None  # history was rewritten: count again from the first commit
    result = known if start is not None and known is not None else Growth()
    _walk(git, root, result, f"{start}..{head}" if start else head)
    result.head = head
    try:
        atomic_write(cache, json.dumps({"version": CACHE_VERSION, "root": str(root), "head": head,
                                        "days": result.days}).encode("utf-8"))
    except (OSError, UnsafePath):
        pass  # a read-only (or refused) state folder: computed again next time
    return result


def _load(cache: Path, root: Path) -> Growth | None:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or data.get("root") != str(root):
        return None
    days = data.get("days")
    if not isinstance(days, dict):
        return None
    return Growth(data.get("head"), {str(d): {a: int(v.get(a, 0)) for a in AREAS} for d, v in days.items()
                                      if isinstance(v, dict)})


def _walk(git: GitStore, root: Path, growth_: Growth, revisions: str) -> None:
    """Add what the commits of ``revisions`` added and deleted under facts/ and procedures/, per day."""
    prefix = git.rel(root)
    prefix = "" if prefix == "." else prefix + "/"
    areas = {area: f"{prefix}{area}/" for area in AREAS}
    args = ["git", "log", "--reverse", "--no-renames", "--format=%x00%ct", "--name-status", revisions, "--",
            *areas.values()]
    proc = subprocess.Popen(args, cwd=git.root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=other_repo_env(GIT_OPTIONAL_LOCKS="0"))
    assert proc.stdout is not None
    day = None
    for line in proc.stdout:
        if line.startswith("\x00"):
            day = datetime.fromtimestamp(int(line[1:].strip()), timezone.utc).date().isoformat()
            continue
        status, _, path = line.rstrip("\n").partition("\t")
        if day is None or status not in ("A", "D"):
            continue
        for area, start in areas.items():
            if path.startswith(start) and not path.endswith("/.gitignore") and (area != "facts"
                                                                                or path.endswith(".md")):
                entry = growth_.days.setdefault(day, dict.fromkeys(AREAS, 0))
                entry[area] += 1 if status == "A" else -1
    proc.wait()


def write_commit_graph(git: GitStore) -> None:
    """Bring git's commit-graph, with changed-path Bloom filters, up to HEAD (what ``git maintenance`` keeps):
    with it, the history of one file costs milliseconds instead of a walk of every commit (7 s at 30k commits).
    Incremental (``--split``): after the first run only new commits are added. Raises GitError."""
    git.update_commit_graph()


def provenance(git: GitStore | None, root: Path, area: str = "procedures") -> dict[str, dict[str, Any]]:
    """Who added each file under ``area`` and who changed it last, from one ``git log`` (newest first): by
    vault-relative path, ``{"added": {...}, "last": {...}, "source": ...}``, each commit as ``commit``, ``short``,
    ``author``, ``date`` and ``source`` (its ``Memvault-Source`` trailer: the writer memvault recorded, None for a
    commit memvault did not make). ``source`` is the last commit's: None means the file was last changed by hand.
    Empty without git or commits. Raises GitError."""
    if git is None or not git.has_head():
        return {}
    prefix = git.rel(root)
    prefix = "" if prefix == "." else prefix + "/"
    raw = git.run("log", "--no-renames", "--format=%x1e%H%x1f%an%x1f%aI%x1f%B%x1f", "--name-status", "--",
                  f"{prefix}{area}/", strip=False)
    found: dict[str, dict[str, Any]] = {}
    for chunk in raw.split("\x1e")[1:]:
        commit, author, when, message, names = chunk.split("\x1f", 4)
        entry = {"commit": commit, "short": commit[:12], "author": author, "date": when,
                 "source": trailers(message).get("Memvault-Source")}
        for line in names.splitlines():
            status, _, path = line.partition("\t")
            if not path or not path.startswith(prefix) or path.endswith("/.gitignore"):
                continue
            rel = path[len(prefix):]
            item = found.setdefault(rel, {"added": None, "last": entry, "source": entry["source"],
                                          "deleted": status == "D"})
            if status == "A" and item["added"] is None:
                item["added"] = entry
    return {rel: item for rel, item in found.items() if not item.pop("deleted")}


def trailers(message: str) -> dict[str, str]:
    """The ``Memvault-*`` trailers of a commit message (``Memvault-Source``, ``Memvault-Key``)."""
    return {name: value.strip() for name, value in _TRAILER.findall(message)}


def entry_dict(entry: LogEntry) -> dict[str, Any]:
    """A history entry as pages and JSON show it: commit, author, time, the message's subject, its trailers, and
    the diff of the file."""
    subject = entry.message.splitlines()[0] if entry.message else ""
    return {"commit": entry.commit, "author": entry.author, "date": entry.date, "subject": subject,
            "source": trailers(entry.message).get("Memvault-Source"), "message": entry.message, "diff": entry.diff}
