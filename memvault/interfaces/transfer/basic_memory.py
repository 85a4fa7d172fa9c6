"""basic-memory notes (basicmachines-co/basic-memory, docs/NOTE-FORMAT.md): markdown files with front matter
(``title``, ``type``, ``tags``, ``permalink``, ``created``, ``modified``), observations
(``- [category] content #tag (context)``) and relations (``- relation_type [[Target]] (context)``).

Each observation becomes a fact (``basic-memory/<permalink>/<category>-<words>``, its category and tags kept, the
context in parentheses kept in the text); the rest of a note (its prose and its relations) one more fact
(``basic-memory/<permalink>``), tagged with the note's tags."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from ...core.transfer import Item
from .markdown import key_of, notes, slug, tags_of, walk

_OBSERVATION = re.compile(r"^\s*[-*]\s+\[(?P<cat>[^\[\]()]+)\]\s+(?P<body>.+?)\s*$")
_CHECKBOX = re.compile(r"^\s*[-*]\s+\[[ xX\-]\]\s")
_LINK = re.compile(r"^\s*[-*]\s+\[[^\]]*\]\(")
_RELATION = re.compile(r"^\s*[-*]\s+(?P<type>\"[^\"]+\"|'[^']+'|[\w.-]+)\s+\[\[(?P<target>[^\]]+)\]\]")
_TAG = re.compile(r"(?:^|\s)#([\w/-]+)")
_CONTEXT = re.compile(r"\s*\([^()]*\)\s*$")


def read(path: Path) -> Iterator[Item]:
    files = [path] if path.is_file() else list(walk(path))
    base = path.parent if path.is_file() else path
    for read_ in notes(files):
        if isinstance(read_, Item):
            yield read_
            continue
        file, meta, body = read_
        permalink = str(meta.get("permalink") or file.relative_to(base).with_suffix("").as_posix())
        prefix = "basic-memory/" + key_of(*permalink.split("/"))
        tags = tags_of(meta)
        title = str(meta.get("title") or file.stem)
        rest: list[str] = []
        used: dict[str, int] = {}
        for line in body.splitlines():
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
                           category=m.group("cat").strip()[:64], tags=list(dict.fromkeys([*tags, *inline]))[:20])
                continue
            rest.append(line)
        text = "\n".join(rest).strip()
        if text and text.lstrip("# ").strip() != title:
            yield Item("fact", text if text.startswith("#") else f"{title}\n\n{text}", str(file), key=prefix,
                       category=str(meta.get("type") or "note")[:64], tags=tags)
