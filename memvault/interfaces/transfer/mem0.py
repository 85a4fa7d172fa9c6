"""A mem0 export: what ``Memory.get_all`` / ``MemoryClient.get_all`` return (``{"results": [...]}`` or a list) or
one memory per line (JSONL). A memory is ``{id, memory, hash, metadata, categories?, created_at, updated_at,
user_id?, agent_id?, run_id?}`` (mem0ai/mem0 mem0/memory/main.py; docs.mem0.ai/api-reference/memory/get-memory).

Each memory becomes a fact (``mem0/<user or agent>/<words>``), its categories as tags, its ``created_at`` and
``updated_at`` as the fact's ``created`` and ``updated`` (a memory whose time is unreadable, in the future or
changed before it was made is refused by its position). Each memory is read on its
own (:func:`memvault.rules.jsontext.array_items`): one nested too deep, of the wrong shape (``"metadata":
"notadict"``) or not JSON is refused by its position in the list (or line), and the others come in."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.transfer import Item, refused, source_times
from ...rules.errors import InvalidValue
from ...rules.jsontext import array_items, is_one_value, loads
from .markdown import slug


#: Where get_all's list is, in the order mem0's versions used them.
LIST_KEYS = ("results", "memories", "data")


def read(path: Path) -> Iterator[Item]:
    try:  # a byte-order mark (a Windows editor's) is no part of the JSON: read as one, the file was taken for JSONL
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidValue("PATH", f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    stripped = text.lstrip()
    if stripped.startswith("[") or (stripped.startswith("{") and _one_document(stripped)):
        entries: Iterator[tuple[int, Any]] = array_items(text, str(path), keys=LIST_KEYS)
    else:  # JSONL: one memory per line
        entries = ((n, _line(line, n)) for n, line in enumerate(text.splitlines(), 1) if line.strip())
    for n, entry in list(entries):  # the structure is checked whole before the first item is handed on
        origin = f"{path}:{n}"
        try:
            yield _item(entry, origin)
        except InvalidValue as exc:
            yield refused(origin, exc)


def _one_document(text: str) -> bool:
    """A JSON document (get_all's object) rather than JSONL: the first line does not hold a whole object."""
    return not is_one_value(text.split("\n", 1)[0]) or "\n" not in text.strip()


def _line(line: str, n: int) -> Any:
    try:
        return loads(line, f"line {n}")
    except InvalidValue as exc:
        return exc


def _item(entry: Any, origin: str) -> Item:
    """One memory as an Item; InvalidValue (the field and why, never its value) for one of the wrong shape."""
    if isinstance(entry, InvalidValue):
        raise entry
    if not isinstance(entry, dict):
        raise InvalidValue("memory", f"must be a JSON object, not {_kind(entry)}")
    memory = entry.get("memory", entry.get("text", entry.get("data")))
    if not isinstance(memory, str) or not memory.strip():
        raise InvalidValue("memory", "no text" if memory is None or isinstance(memory, str)
                           else f"must be text, not {_kind(memory)}")
    owner = entry.get("user_id") or entry.get("agent_id") or entry.get("run_id") or "memories"
    if not isinstance(owner, (str, int)) or isinstance(owner, bool):
        raise InvalidValue("user_id", f"must be text, not {_kind(owner)}")
    metadata = entry.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidValue("metadata", f"must be a JSON object, not {_kind(metadata)}")
    categories = entry.get("categories") or (metadata or {}).get("categories") or []
    if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
        raise InvalidValue("categories", "must be a list of words")
    created, updated = entry.get("created_at"), entry.get("updated_at")
    source_times(created, updated, ("created_at", "updated_at"))  # a time that cannot be kept refuses the memory
    return Item("fact", memory.strip(), origin, key=f"mem0/{slug(str(owner), 40)}/{slug(memory, 50)}",
                tags=["mem0", *[slug(c, 40) for c in categories if c.strip()][:10]], at=created or None,
                updated=updated or None)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")
