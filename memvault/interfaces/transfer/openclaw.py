"""An OpenClaw workspace (docs.openclaw.ai/concepts/memory): ``MEMORY.md`` (long-term memory, loaded at session
start) and ``memory/YYYY-MM-DD.md`` or ``memory/YYYY-MM-DD-<slug>.md`` daily notes.

MEMORY.md becomes one fact per section (``openclaw/<heading>``); each daily note one episode of kind ``summary``
dated by its file name (one per section when the note is long)."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from ...core.transfer import Item
from .markdown import numbered, numbered_notes, numbered_sections, section_facts

_DAY = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-(.+))?$")
#: A daily note longer than this is stored one section per episode.
EPISODE_TEXT = 16 * 1024


def read(path: Path) -> Iterator[Item]:
    workspace = path.parent if path.is_file() else path
    memory_md = path if path.is_file() else workspace / "MEMORY.md"
    if memory_md.is_file():
        for read_ in numbered_notes([memory_md]):
            if isinstance(read_, Item):
                yield read_
            else:
                yield from section_facts(read_[2], "openclaw", str(memory_md), category="memory", tags=["openclaw"],
                                         first=read_[3])
    daily = workspace / "memory"
    if daily.is_dir() and not path.is_file():
        for read_ in numbered_notes(f for f in sorted(daily.glob("*.md")) if _DAY.match(f.stem)):
            if isinstance(read_, Item):
                yield read_
                continue
            file, _, body, first = read_
            m = _DAY.match(file.stem)
            assert m is not None  # only matching files were read
            at = f"{m.group(1)}T00:00:00Z"
            if len(body.encode("utf-8")) <= EPISODE_TEXT:
                chunks = [numbered(body, first)]
            else:
                chunks = [(f"{h}\n\n{t}", [n[0], 0, *n[1:]]) if h else (t, n[1:])
                          for h, t, n in numbered_sections(body, first) if t]
            for i, (chunk, lines) in enumerate(c for c in chunks if c[0]):
                yield Item("episode", chunk, f"{file}#{i}", at=at, episode_kind="summary",
                           tags=["openclaw", "daily"] + ([m.group(2)[:64]] if m.group(2) else []),
                           meta={"note": file.name}, lines=lines, file=str(file))
