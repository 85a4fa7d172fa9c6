"""An OpenClaw workspace (docs.openclaw.ai/concepts/memory): ``MEMORY.md`` (long-term memory, loaded at session
start) and ``memory/YYYY-MM-DD.md`` or ``memory/YYYY-MM-DD-<slug>.md`` daily notes.

MEMORY.md becomes one fact per section (``openclaw/<heading>``); each daily note one episode of kind ``summary``
dated by its file name (one per section when the note is long)."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from ...core.transfer import Item
from .markdown import notes, section_facts, sections

_DAY = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-(.+))?$")
#: A daily note longer than this is stored one section per episode.
EPISODE_TEXT = 16 * 1024


def read(path: Path) -> Iterator[Item]:
    workspace = path.parent if path.is_file() else path
    memory_md = path if path.is_file() else workspace / "MEMORY.md"
    if memory_md.is_file():
        for read_ in notes([memory_md]):
            if isinstance(read_, Item):
                yield read_
            else:
                yield from section_facts(read_[2], "openclaw", str(memory_md), category="memory", tags=["openclaw"])
    daily = workspace / "memory"
    if daily.is_dir() and not path.is_file():
        for read_ in notes(f for f in sorted(daily.glob("*.md")) if _DAY.match(f.stem)):
            if isinstance(read_, Item):
                yield read_
                continue
            file, _, body = read_
            m = _DAY.match(file.stem)
            assert m is not None  # only matching files were read
            at = f"{m.group(1)}T00:00:00Z"
            chunks = [body.strip()] if len(body.encode("utf-8")) <= EPISODE_TEXT else [
                f"{h}\n\n{t}" if h else t for h, t in sections(body) if t]
            for i, chunk in enumerate(c for c in chunks if c):
                yield Item("episode", chunk, f"{file}#{i}", at=at, episode_kind="summary",
                           tags=["openclaw", "daily"] + ([m.group(2)[:64]] if m.group(2) else []),
                           meta={"note": file.name})
