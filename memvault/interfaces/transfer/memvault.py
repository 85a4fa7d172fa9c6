"""memvault's own export, written and read back: ``memvault export --format jsonl|markdown`` and
``memvault import memvault PATH``.

- **jsonl**: a header line, then one record per fact and proposal (its file's exact text), procedure (text and
  mode) and episode (the stored line).
- **markdown**: a folder a person can read: ``facts/`` and ``inbox/`` and ``procedures/`` as the vault has them
  (byte for byte), and ``episodes/YYYY-MM.md``, each episode under a heading with its fields in an HTML comment
  that also gives the length of its text, so any text (headings, comments of its own) reads back exactly.

Importing either into a new vault gives the same facts, procedures and episodes (ids, times and sources kept).
"""
from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from ...core.transfer import ITEM_TEXT_MAX, Item, refused
from ...rules.errors import InvalidValue, MemvaultError
from ...rules.jsontext import loads
from ...rules.fsread import TooLong, bounded_lines
from ...rules.fsutil import (atomic_write, make_temp_dir, output_folder, read_regular, remove_dir,
                             remove_tree, rename)
from ...rules.timeutil import format_time, now

HEADER = "memvault-export"
#: The export format this memvault writes and reads (the header's "version").
VERSION = 1
EPISODE_MARK = "<!-- memvault-episode "


# ------------------------------------------------------------------------------------------------ writing
def write_jsonl(records: Iterable[dict[str, Any]], out: IO[str], vault_name: str) -> int:
    out.write(json.dumps({"type": HEADER, "version": VERSION, "vault": vault_name, "exported_at": format_time(now())})
              + "\n")
    n = 0
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        n += 1
    return n


def write_markdown(records: Iterable[dict[str, Any]], folder: Path, vault_name: str) -> int:
    """The export as a folder: written in a private folder beside ``folder`` and renamed onto it whole, so an
    export that fails or is killed half-way leaves nothing under the name but the empty folder it began with."""
    if folder.exists() and any(folder.iterdir()):
        raise InvalidValue("--output", f"{folder}: not empty; give a new folder")
    made = not folder.exists()
    final = output_folder(folder)  # 0700: it holds what the vault does (a file keeps its mode for the import)
    work = make_temp_dir(f".{final.name[:100]}.", inside=final.parent)  # 0700 too
    try:
        n = _write_markdown(records, work, vault_name)
        remove_dir(final)
        rename(work, final)  # refused if anything came to the name meanwhile (a link is never followed)
    except BaseException:
        remove_tree(work)
        if made:
            remove_dir(final)
        raise
    return n


def _write_markdown(records: Iterable[dict[str, Any]], folder: Path, vault_name: str) -> int:
    months: dict[str, list[str]] = {}
    n = 0
    for record in records:
        n += 1
        if record["type"] == "episode":
            e = record["episode"]
            text = e.get("text", "")
            fields = {k: v for k, v in e.items() if k != "text"}
            fields["bytes"] = len(text.encode("utf-8"))
            head = f"## {e.get('created_at')} · {e.get('source')} · {e.get('kind', 'raw')}"
            comment = EPISODE_MARK + json.dumps(fields, ensure_ascii=True).replace(">", "\\u003e") + " -->"
            months.setdefault(str(e.get("created_at", ""))[:7], []).append(f"{head}\n{comment}\n{text}\n")
            continue
        target = folder / record["path"]
        if not target.resolve().is_relative_to(folder.resolve()):
            raise InvalidValue("export", f"{record['path']}: outside the export folder")
        data = _bytes(record)
        mode = int(record["mode"], 8) if record.get("mode") else 0o600  # kept: import reads it back
        atomic_write(target, data, mode=mode)
    for month, items in sorted(months.items()):
        text = f"# Episodes of {month}\n\n" + "\n".join(items)
        atomic_write(folder / "episodes" / f"{month}.md", text.encode("utf-8"), mode=0o600)
    readme = (f"# {vault_name}: a memvault export ({format_time(now())})\n\n"
              "facts/, inbox/ (proposals) and procedures/ hold the vault's files as they were; episodes/ holds the "
              "episodes, one heading each. 'memvault import memvault .' reads it back into a vault.\n")
    atomic_write(folder / "README.md", readme.encode("utf-8"), mode=0o600)
    return n


def _bytes(record: dict[str, Any]) -> bytes:
    if "content_base64" in record:
        return base64.b64decode(record["content_base64"])
    return str(record.get("content", "")).encode("utf-8")


# ------------------------------------------------------------------------------------------------ reading
def read(path: Path) -> Iterator[Item]:
    if path.is_file():
        yield from _read_jsonl(path)
        return
    yield from _read_folder(path)


#: Longest line of an export read: a record of the largest item any vault keeps (its text escaped, its file in
#: base64) fits many times over; a longer line is refused by its number without being held (a 1 GB line took
#: several GB before its item was refused for its size).
LINE_MAX = 8 * ITEM_TEXT_MAX
#: Largest fact, proposal or runbook file of an export folder read: larger than any item a vault keeps, so a larger
#: one is refused by its name without being read (a 1 GB fact file took 2 GB before its size refused it).
FILE_MAX = LINE_MAX


def _read_jsonl(path: Path) -> Iterator[Item]:
    with open(path, "rb") as f:  # each line decoded on its own: one that is not UTF-8 is refused, not the file
        lines = bounded_lines(f, LINE_MAX)
        try:
            first = next(lines, b"")
            header = None if isinstance(first, TooLong) else loads(first.decode("utf-8-sig"), "header")
        except (InvalidValue, UnicodeDecodeError):
            header = None
        if not isinstance(header, dict) or header.get("type") != HEADER:
            raise InvalidValue("PATH", f"{path}: not a memvault export (no {HEADER} header line)")
        _check_version(path, header.get("version"))
        for n, raw in enumerate(lines, 2):
            if isinstance(raw, TooLong):
                yield refused(f"{path}:{n}", f"record: {int(raw)} bytes, more than any record holds ({LINE_MAX})")
                continue
            if not raw.strip():
                continue
            try:  # one record at a time: a line too deep or of the wrong shape is refused, the next one read
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InvalidValue("record", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
                record = loads(line, "record")
                if not isinstance(record, dict):
                    raise InvalidValue("record", "must be a JSON object")
                yield _item(record, f"{path}:{n}")
            except MemvaultError as exc:
                yield refused(f"{path}:{n}", exc)
            except (TypeError, ValueError, AttributeError) as exc:
                yield refused(f"{path}:{n}", f"record: a field of the wrong type ({type(exc).__name__})")


def _check_version(path: Path, version: object) -> None:
    """InvalidValue unless the header's format version is one this memvault reads: a newer export may hold what
    this one would misread (a field it does not know, a record of another shape), so none of it is read."""
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise InvalidValue("PATH", f"{path}: an export of format version {version}, made by a newer memvault; this "
                                   f"one reads version {VERSION}: import it with a newer memvault")
    if version != VERSION or isinstance(version, bool):
        shown = json.dumps(version)[:40]
        raise InvalidValue("PATH", f"{path}: export format version {shown} is not one memvault knows "
                                   f"(this one reads version {VERSION})")


def _item(record: dict[str, Any], origin: str) -> Item:
    kind = record.get("type")
    if kind == "episode":
        e = record.get("episode") or {}
        return Item("episode", str(e.get("text", "")), origin, at=e.get("created_at"),
                    episode_kind=str(e.get("kind") or "raw"), tags=list(e.get("tags") or []),
                    meta=dict(e.get("meta") or {}), id=e.get("id"), source=e.get("source"))
    data = _bytes(record)
    if kind in ("fact", "proposal"):
        return _fact_item(kind, str(record.get("key")), data, origin)
    if kind == "procedure":
        mode = int(record["mode"], 8) if record.get("mode") else None
        return Item("procedure", data.decode("utf-8", "replace"), origin, key=str(record.get("name")), content=data,
                    mode=mode, meta={"path": str(record.get("path", ""))})
    raise InvalidValue("PATH", f"{origin}: unknown record type {kind!r}")


def _fact_item(kind: str, key: str, data: bytes, origin: str) -> Item:
    from ...stores.facts import parse_fact

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidValue("content", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    item = Item(kind, text, origin, key=key, content=data)
    if kind == "proposal":  # proposed again by its own source, with its own fields
        fact = parse_fact(key, Path(f"{key}.md"), text)
        item.text, item.source, item.category = fact.text, fact.source, fact.category
        item.tags, item.importance, item.confidence = list(fact.tags), fact.importance, fact.confidence
    return item


def _read_folder(folder: Path) -> Iterator[Item]:
    if not (folder / "README.md").is_file() and not (folder / "facts").is_dir():
        raise InvalidValue("PATH", f"{folder}: not a memvault export folder (no facts/ or README.md)")
    for area, kind in (("facts", "fact"), ("inbox", "proposal")):
        base = folder / area
        for path in sorted(base.rglob("*.md")) if base.is_dir() else []:
            if path.is_symlink() or any(p.startswith(".") for p in path.relative_to(base).parts):
                continue
            key = path.relative_to(base).with_suffix("").as_posix()
            try:  # each file on its own: one too large, not UTF-8 or not a fact is refused by its name
                yield _fact_item(kind, key, read_regular(path, limit=FILE_MAX), str(path))
            except MemvaultError as exc:
                yield refused(str(path), exc)
    base = folder / "procedures"
    for path in sorted(base.rglob("*")) if base.is_dir() else []:
        if not path.is_file() or path.is_symlink() or any(p.startswith(".") for p in path.relative_to(base).parts):
            continue
        rel = path.relative_to(base)
        try:
            data = read_regular(path, limit=FILE_MAX)
        except MemvaultError as exc:
            yield refused(str(path), exc)
            continue
        yield Item("procedure", data.decode("utf-8", "replace"), str(path), key=rel.with_suffix("").as_posix(),
                   content=data, mode=os.stat(path).st_mode & 0o777,
                   meta={"path": f"procedures/{rel.as_posix()}"})
    for path in sorted((folder / "episodes").glob("*.md")) if (folder / "episodes").is_dir() else []:
        yield from _read_episodes(path)


def _read_episodes(path: Path) -> Iterator[Item]:
    data = read_regular(path)
    mark = EPISODE_MARK.encode()
    pos = 0
    while True:
        at = data.find(mark, pos)
        if at < 0:
            return
        end = data.find(b"\n", at)
        line = data[at + len(mark): end].decode("utf-8").rstrip()
        if not line.endswith("-->"):
            raise InvalidValue("PATH", f"{path}: byte {at}: an episode comment without its end")
        fields = loads(line[:-3].strip(), f"{path}: byte {at}")  # no size to skip by: the rest is unreadable
        if not isinstance(fields, dict) or not isinstance(fields.get("bytes"), int):
            raise InvalidValue(f"{path}: byte {at}", "an episode comment without its size")
        size = int(fields.pop("bytes"))
        text = data[end + 1: end + 1 + size].decode("utf-8")
        pos = end + 1 + size
        yield _item({"type": "episode", "episode": {**fields, "text": text}}, f"{path}:{at}")
