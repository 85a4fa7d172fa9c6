"""Readers of other tools' memory (and of memvault's own export), and the writers of the export formats.

Each reader turns files into :class:`memvault.core.transfer.Item` s and writes nothing: every write goes through the
vault's gate (:func:`memvault.core.transfer.import_items`), with the source ``import:<format>``.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from ...core.transfer import Item
from ...rules.errors import InvalidValue
from . import basic_memory, claude_code, claude_mem, markdown, mem0, memvault, openclaw

Reader = Callable[[Path], Iterator[Item]]

FORMATS: dict[str, tuple[Reader, str]] = {
    "claude-code": (claude_code.read, "CLAUDE.md files (a file, a project, ~/.claude) and auto memory folders"),
    "claude-mem": (claude_mem.read, "a claude-mem SQLite database (~/.claude-mem/claude-mem.db)"),
    "basic-memory": (basic_memory.read, "a basic-memory folder of notes (front matter, observations, relations)"),
    "mem0": (mem0.read, "a mem0 JSON export (get_all's {\"results\": [...]}, a list, or JSONL)"),
    "openclaw": (openclaw.read, "an OpenClaw workspace (MEMORY.md and memory/*.md)"),
    "markdown": (markdown.read, "a folder of markdown files (one fact per file)"),
    "memvault": (memvault.read, "a memvault export (memvault export --format jsonl|markdown)"),
}


def read(fmt: str, path: Path) -> Iterator[Item]:
    """The items of ``path`` in format ``fmt``. Raises InvalidValue for an unknown format or a missing path."""
    if fmt not in FORMATS:
        raise InvalidValue("FORMAT", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    if not path.exists():
        raise InvalidValue("PATH", f"{path}: no such file or folder")
    return FORMATS[fmt][0](path)
