"""A mem0 export: what ``Memory.get_all`` / ``MemoryClient.get_all`` return (``{"results": [...]}`` or a list) or
one memory per line (JSONL). A memory is ``{id, memory, hash, metadata, categories?, created_at, updated_at,
user_id?, agent_id?, run_id?}`` (mem0ai/mem0 mem0/memory/main.py; docs.mem0.ai/api-reference/memory/get-memory).

Each memory becomes a fact (``mem0/<user or agent>/<words>``), its categories as tags."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.transfer import Item
from ...rules.errors import InvalidValue
from .markdown import slug


def read(path: Path) -> Iterator[Item]:
    text = path.read_text(encoding="utf-8")
    try:
        data: Any = json.loads(text)
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise InvalidValue("PATH", f"{path}: not JSON or JSONL ({exc})") from None
    if isinstance(data, dict):
        data = data.get("results", data.get("memories", data.get("data")))
    if not isinstance(data, list):
        raise InvalidValue("PATH", f"{path}: no list of memories (expected get_all's {{\"results\": [...]}})")
    for n, entry in enumerate(data, 1):
        if not isinstance(entry, dict):
            continue
        memory = entry.get("memory", entry.get("text", entry.get("data")))
        if not isinstance(memory, str) or not memory.strip():
            continue
        owner = entry.get("user_id") or entry.get("agent_id") or entry.get("run_id") or "memories"
        categories = entry.get("categories") or (entry.get("metadata") or {}).get("categories") or []
        yield Item("fact", memory.strip(), f"{path}:{entry.get('id') or n}",
                   key=f"mem0/{slug(str(owner), 40)}/{slug(memory, 50)}",
                   tags=["mem0", *[slug(str(c), 40) for c in categories if str(c).strip()][:10]])
