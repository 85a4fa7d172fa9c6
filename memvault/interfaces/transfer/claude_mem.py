"""A claude-mem database (``~/.claude-mem/claude-mem.db``), read-only, with its schema as of thedotmack/claude-mem
v13.15 (src/services/sqlite/SessionStore.ts): ``observations`` (title, subtitle, narrative, ``facts``,
``concepts``, ``files_read``, ``files_modified`` as JSON arrays), ``session_summaries`` (request, investigated,
learned, completed, next_steps, notes) and ``sdk_sessions``. Older databases lack some columns: what is there is read.

An observation becomes an episode of kind ``observation``; each of its extracted facts a fact proposal
(``claude-mem/<project>/<words>``); a session summary an episode of kind ``summary``. Prompts are not imported
(``user_prompts``: the person's raw words, already in the transcripts). A row whose JSON columns are nested too
deep, too large or not lists of text is refused whole, by its table and id, and the next row is read."""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.transfer import Item, refused
from ...rules.errors import InvalidValue
from ...rules.jsontext import loads
from .markdown import slug

#: Largest column read (claude-mem's own rows are a few KiB; a larger one is refused, not scanned).
COLUMN_MAX = 1 << 20

_SUMMARY = (("request", "Request"), ("investigated", "Investigated"), ("learned", "Learned"),
            ("completed", "Completed"), ("next_steps", "Next steps"), ("notes", "Notes"))


def read(path: Path) -> Iterator[Item]:
    try:
        # as_uri() percent-encodes the path: a '#' or '?' in the name began the URI's fragment or query, dropped
        # mode=ro, and opened (and created) a shorter path read-write
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise InvalidValue("PATH", f"{path}: not a claude-mem database ({exc})") from None
    if "observations" not in tables:
        raise InvalidValue("PATH", f"{path}: not a claude-mem database (no observations table)")
    try:
        yield from _observations(conn, path)
        if "session_summaries" in tables:
            yield from _summaries(conn, path)
    except sqlite3.Error as exc:  # a page damaged past the first ones: found while reading rows, not on opening
        raise InvalidValue("PATH", f"{path}: a damaged claude-mem database ({exc}); nothing imported") from None
    finally:
        conn.close()


def _rows(conn: sqlite3.Connection, table: str, wanted: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    columns = [c for c in wanted if c in have]
    order = "created_at_epoch, id" if "created_at_epoch" in have else "id"
    for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}"):
        yield dict(zip(columns, row))


def _list(value: Any, name: str) -> list[str]:
    """A column holding a JSON array of strings (``JSON.stringify``'d by claude-mem); a plain string is one entry.
    InvalidValue (the column and why, never its text) for one nested too deep, too large, or not of strings."""
    if value is None:
        return []
    if isinstance(value, bytes):
        raise InvalidValue(name, "binary data, not text")
    text = str(value)
    if len(text) > COLUMN_MAX:
        raise InvalidValue(name, f"{len(text)} characters, more than {COLUMN_MAX}")
    if not text.lstrip().startswith(("[", "{", '"')):
        return [text] if text.strip() else []
    parsed = loads(text, name)
    if not isinstance(parsed, list):
        parsed = [parsed]
    out = []
    for i, entry in enumerate(parsed):
        if isinstance(entry, (dict, list)) or entry is None:
            raise InvalidValue(f"{name}[{i}]", "must be text")
        if str(entry).strip():
            out.append(str(entry))
    return out


def _text(row: dict[str, Any], name: str) -> str:
    value = row.get(name)
    if value is None:
        return ""
    if isinstance(value, bytes):
        raise InvalidValue(name, "binary data, not text")
    text = str(value)
    if len(text) > COLUMN_MAX:
        raise InvalidValue(name, f"{len(text)} characters, more than {COLUMN_MAX}")
    return text


def _observations(conn: sqlite3.Connection, path: Path) -> Iterator[Item]:
    wanted = ("id", "memory_session_id", "sdk_session_id", "project", "text", "type", "title", "subtitle", "facts",
              "narrative", "concepts", "files_read", "files_modified", "created_at", "merged_into_project")
    for row in _rows(conn, "observations", wanted):
        origin = f"{path}:observations:{row.get('id')}"
        try:
            project = _text(row, "merged_into_project") or _text(row, "project") or "unknown"
            facts = _list(row.get("facts"), "facts")
            modified = _list(row.get("files_modified"), "files_modified")
            head = " - ".join(_text(row, k) for k in ("title", "subtitle") if row.get(k))
            body = (_text(row, "narrative") or _text(row, "text")).strip()
            kind = _text(row, "type") or "observation"
            meta = {"project": project, "session": _text(row, "memory_session_id") or _text(row, "sdk_session_id"),
                    "claude_mem_id": row.get("id"), "concepts": _list(row.get("concepts"), "concepts")[:20],
                    "files_read": _list(row.get("files_read"), "files_read")[:50], "files_modified": modified[:50]}
            at = _text(row, "created_at") or None
        except InvalidValue as exc:  # the whole row stays out: its episode and its facts
            yield refused(origin, exc)
            continue
        parts = [p for p in (head, body) if p]
        if facts:
            parts.append("Facts:\n" + "\n".join(f"- {f}" for f in facts))
        if modified:
            parts.append("Files modified: " + ", ".join(modified))
        if not parts:
            continue
        meta["session"] = meta["session"] or None
        yield Item("episode", "\n\n".join(parts), origin, at=at, episode_kind="observation",
                   tags=["claude-mem", slug(kind, 30), slug(project, 60)],
                   meta={k: v for k, v in meta.items() if v not in (None, [], "")})
        for n, fact in enumerate(facts, 1):
            yield Item("fact", fact, f"{origin}:facts:{n}",
                       key=f"claude-mem/{slug(project)}/{slug(fact, 50)}", category=slug(kind, 30),
                       tags=["claude-mem", slug(project, 60)])


def _summaries(conn: sqlite3.Connection, path: Path) -> Iterator[Item]:
    wanted = ("id", "memory_session_id", "sdk_session_id", "project", "request", "investigated", "learned",
              "completed", "next_steps", "notes", "files_edited", "created_at", "merged_into_project")
    for row in _rows(conn, "session_summaries", wanted):
        origin = f"{path}:session_summaries:{row.get('id')}"
        try:
            parts = [f"{label}: {_text(row, key).strip()}" for key, label in _SUMMARY if _text(row, key).strip()]
            edited = _list(row.get("files_edited"), "files_edited")
            project = _text(row, "merged_into_project") or _text(row, "project") or "unknown"
            session = _text(row, "memory_session_id") or _text(row, "sdk_session_id") or None
            at = _text(row, "created_at") or None
        except InvalidValue as exc:
            yield refused(origin, exc)
            continue
        if not parts:
            continue
        if edited:
            parts.append("Files edited: " + ", ".join(edited))
        yield Item("episode", "\n".join(parts), origin, at=at, episode_kind="summary",
                   tags=["claude-mem", "session", slug(project, 60)],
                   meta={"project": project, "session": session, "claude_mem_id": row.get("id")})
