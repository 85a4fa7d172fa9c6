"""Claude Code's own memory: CLAUDE.md files (user ``~/.claude/CLAUDE.md``, project ``CLAUDE.md``,
``.claude/CLAUDE.md``, ``CLAUDE.local.md``, ``.claude/rules/*.md``) and auto memory folders
(``~/.claude/projects/<project>/memory/``: a ``MEMORY.md`` index and one topic file per memory, each with
``name``/``description``/``type`` front matter), as documented at code.claude.com/docs/en/memory.

A CLAUDE.md becomes one fact per section (``claude-code/<project>/<heading>``, category ``instructions``; the
project named by its git remote or work tree, :func:`_project`); a topic
file one fact (``claude-code/<project>/<file>``, its ``type`` as category); a line of MEMORY.md that does not point
at a topic file one fact too."""
from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

from ...core.transfer import Item, refused
from ...rules.errors import InvalidValue
from ...rules.fsread import linked_folder
from ..agents import project as project_mod
from .markdown import note, note_at, numbered, numbered_notes, section_facts, slug

_LINK = re.compile(r"\]\(([^)]+\.md)\)")
_MUNGE = re.compile(r"[^A-Za-z0-9]")
_PROJECT_FILES = ("CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md")


def read(path: Path) -> Iterator[Item]:
    """Every item is read before the first is given: a file refused on the way (a symlinked CLAUDE.md) stops the
    import before anything is written, with one line naming it."""
    return iter(list(_read(path)))


def _read(path: Path) -> Iterator[Item]:
    if path.is_file():
        if path.name == "MEMORY.md":
            yield from _memory(path.parent)
        else:
            yield from _claude_md(path, _project_name(path))
        return
    if (path / "MEMORY.md").is_file():
        yield from _memory(path)
        return
    if (path / "projects").is_dir() and (path.name == ".claude" or (path / "settings.json").exists()):
        if (path / "CLAUDE.md").is_file():
            yield from _claude_md(path / "CLAUDE.md", "user")
        for memory in sorted((path / "projects").glob("*/memory")):
            if memory.is_dir():
                yield from _memory(memory)
        return
    # A project is a repository: a teammate can commit `.claude -> ~/.claude` or `.claude/rules -> /home`, and every
    # markdown file under the link's target on this host would come in as the project's. Its links are refused.
    for name in _PROJECT_FILES:
        linked = linked_folder(path, name)
        if linked is not None:
            yield refused(str(path / linked), f"{path / linked}: a symlinked folder in the project: not followed")
            continue
        if (path / name).is_file():
            yield from _claude_md(path / name, _project(path))
    rules = path / ".claude" / "rules"
    linked = linked_folder(path, ".claude/rules/x.md")
    if linked == ".claude/rules":
        yield refused(str(rules), f"{rules}: a symlinked folder in the project: not followed")
    elif linked is None and rules.is_dir():
        for rule in sorted(rules.rglob("*.md")):  # rglob enters no linked folder below; a linked file is refused
            yield from _claude_md(rule, _project(path), prefix=f"rules/{slug(rule.stem)}")


def _project_name(path: Path) -> str:
    folder = path.resolve().parent
    if folder.name == ".claude":
        folder = folder.parent
    return _project(folder)


def _project(folder: Path) -> str:
    """The project a folder belongs to, as a key segment: the name in its git remote (``git@github.com:acme/
    shop-api.git`` -> ``shop-api``), else the top folder of its git work tree, else the folder itself; ``user`` for
    the home folder. Never the folder a file happens to sit in (``.claude`` gave ``claude``). The remote is the
    repository's to say, so what it says is only ever a slug: ``[a-z0-9-]``, at most 60 characters."""
    folder = folder.resolve()
    if folder == Path.home().resolve():
        return "user"
    found = project_mod.detect(str(folder), commits=0)
    for name in (found.name, Path(found.root or folder).name, folder.name):
        if slug(name, 60) != "untitled":
            return slug(name, 60)
    return "project"


def _unmunged(name: str, budget: int = 200_000) -> Path | None:
    """The folder a ``~/.claude/projects/<name>`` folder stands for, when it is on this machine: Claude Code names
    it by the session's working directory with every character but ``[A-Za-z0-9]`` turned into ``-``, so the
    name is matched against the folders that exist, one path segment at a time. Each folder is read whole (a part
    of one, in the order the file system lists it, missed a checkout beside a few thousand others: a busy ~/src,
    /tmp on a build host); at most ``budget`` entries in all (~0.1 s), and a folder that would pass it is not read.
    None when no folder matches: the project is not checked out here."""
    left = [budget]

    def walk(folder: Path, rest: str) -> Path | None:
        if not rest:
            return folder
        try:
            with os.scandir(folder) as scan:
                entries = list(itertools.islice(scan, max(0, left[0]) + 1))
        except OSError:
            return None
        if len(entries) > left[0]:  # more than is left: reading a part would be a guess
            left[0] = 0
            return None
        left[0] -= len(entries)
        for entry in sorted(entries, key=lambda e: e.name):
            munged = _MUNGE.sub("-", entry.name)
            if (rest == munged or rest.startswith(munged + "-")) and entry.is_dir(follow_symlinks=False):
                found = walk(Path(entry.path), rest[len(munged) + 1:])
                if found is not None:
                    return found
        return None

    return walk(Path("/"), name[1:]) if name.startswith("-") and len(name) > 1 else None


def _claude_md(path: Path, project: str, prefix: str | None = None) -> Iterator[Item]:
    try:
        _, body, first = note_at(path)
    except InvalidValue as exc:
        yield refused(str(path), exc)
        return
    key = f"claude-code/{project}" + (f"/{prefix}" if prefix else (f"/{slug(path.stem)}" if path.stem not in
                                                                      ("CLAUDE",) else ""))
    yield from section_facts(body, key, str(path), category="instructions", tags=["claude-code", project],
                             first=first)


def _memory(folder: Path) -> Iterator[Item]:
    """An auto memory folder: its topic files, then the index lines that are memories of their own."""
    if folder.name == "memory":
        checkout = _unmunged(folder.parent.name)
        project = _project(checkout) if checkout is not None else slug(folder.parent.name.lstrip("-"))
    else:
        project = slug(folder.name)
    topics = sorted(p for p in folder.glob("*.md") if p.name != "MEMORY.md")
    for read_ in numbered_notes(topics):
        if isinstance(read_, Item):
            yield read_
            continue
        topic, meta, body, first = read_
        text, lines = numbered(body, first)
        if not text:
            text, lines = str(meta.get("description") or "").strip(), [0]
        if not text:
            continue
        name = str(meta.get("name") or "").strip()
        description = str(meta.get("description") or "").strip()
        header = " - ".join(x for x in (name, description) if x)
        if header and header not in text:
            text, lines = f"{header}\n\n{text}", [0, 0, *lines]
        yield Item("fact", text, str(topic), key=f"claude-code/{project}/{slug(topic.stem)}",
                   category=str(meta["type"]) if isinstance(meta.get("type"), str) else "memory",
                   tags=["claude-code", project], lines=lines, file=str(topic))
    index = folder / "MEMORY.md"
    if index.is_file():
        names = {t.name for t in topics}
        try:
            _, body = note(index)
        except InvalidValue as exc:
            yield refused(str(index), exc)
            return
        for n, line in enumerate(body.splitlines(), 1):
            entry = line.strip().lstrip("-*").strip()
            links = _LINK.findall(line)
            if not entry or entry.startswith("#") or any(Path(link).name in names for link in links):
                continue
            yield Item("fact", entry, f"{index}:{n}", key=f"claude-code/{project}/memory-{slug(entry, 40)}",
                       category="memory", tags=["claude-code", project])
