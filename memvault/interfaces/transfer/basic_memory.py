"""basic-memory notes (basicmachines-co/basic-memory, docs/NOTE-FORMAT.md): markdown files with front matter
(``title``, ``type``, ``tags``, ``permalink``, ``created``, ``modified``), observations
(``- [category] content #tag (context)``) and relations (``- relation_type [[Target]] (context)``).

Each observation becomes a fact (``basic-memory/<permalink>/<category>-<words>``, its category and tags kept, the
context in parentheses kept in the text); the rest of a note (its prose and its relations) one more fact
(``basic-memory/<permalink>``), tagged with the note's tags. The note's ``created`` and ``modified`` become each
fact's ``created`` and ``updated``."""
from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

from ...core.transfer import Item
from .markdown import key_of, numbered_notes, slug, tags_of, trimmed, walk

_OBSERVATION = re.compile(r"^\s*[-*]\s+\[(?P<cat>[^\[\]()]+)\]\s+(?P<body>.+?)\s*$")
_CHECKBOX = re.compile(r"^\s*[-*]\s+\[[ xX\-]\]\s")
_LINK = re.compile(r"^\s*[-*]\s+\[[^\]]*\]\(")
_RELATION = re.compile(r"^\s*[-*]\s+(?P<type>\"[^\"]+\"|'[^']+'|[\w.-]+)\s+\[\[(?P<target>[^\]]+)\]\]")
_TAG = re.compile(r"(?:^|\s)#([\w/-]+)")
_CONTEXT = re.compile(r"\s*\([^()]*\)\s*$")


def read(path: Path) -> Iterator[Item]:
    files = [path] if path.is_file() else list(walk(path))
    base = path.parent if path.is_file() else path
    for read_ in numbered_notes(files):
        if isinstance(read_, Item):
            yield read_
            continue
        file, meta, body, first = read_
        permalink = str(meta.get("permalink") or file.relative_to(base).with_suffix("").as_posix())
        prefix = "basic-memory/" + key_of(*permalink.split("/"))
        tags = tags_of(meta)
        title = str(meta.get("title") or file.stem)
        created, modified = _time(meta.get("created")), _time(meta.get("modified"))
        rest: list[tuple[int, str]] = []
        used: dict[str, int] = {}
        for n, line in enumerate(body.splitlines(), first):
            m = _OBSERVATION.match(line)
            if m and not _CHECKBOX.match(line) and not _LINK.match(line):
                text = m.group("body").strip()
                inline = _TAG.findall(text)
                content = _TAG.sub("", text).strip()
                statement = _CONTEXT.sub("", content).strip() or content
                name = f"{slug(m.group('cat'), 20)}-{slug(statement, 50)}"
                used[name] = used.get(name, 0) + 1
                yield Item("fact", f"{title}: {content}", f"{file}:{m.group('cat')}",
                           key=f"{prefix}/{name}" + (f"-{used[name]}" if used[name] > 1 else ""),
                           category=m.group("cat").strip()[:64], tags=list(dict.fromkeys([*tags, *inline]))[:20],
                           lines=[n if first else 0], file=str(file), at=created, updated=modified)
                continue
            rest.append((n if first else 0, line))
        text, lines = trimmed(rest)
        if text and text.lstrip("# ").strip() != title:
            if not text.startswith("#"):
                text, lines = f"{title}\n\n{text}", [0, 0, *lines]
            yield Item("fact", text, str(file), key=prefix, category=str(meta.get("type") or "note")[:64],
                       tags=tags, lines=lines, file=str(file), at=created, updated=modified)


def _time(value: object) -> str | None:
    """A front-matter time as text (YAML reads an unquoted one as a date or datetime); the import checks it."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return None if value is None else str(value)
