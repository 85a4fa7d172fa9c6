"""A claude-mem database (``~/.claude-mem/claude-mem.db``), read-only, with its schema as of thedotmack/claude-mem
v13.15 (src/services/sqlite/SessionStore.ts): ``observations`` (title, subtitle, narrative, ``facts``,
``concepts``, ``files_read``, ``files_modified`` as JSON arrays), ``session_summaries`` (request, investigated,
learned, completed, next_steps, notes) and ``sdk_sessions``. Older databases lack some columns: what is there is read.

An observation becomes an episode of kind ``observation``; each of its extracted facts a fact proposal
(``claude-mem/<project>/<words>``); a session summary an episode of kind ``summary``. Prompts are not imported
(``user_prompts``: the person's raw words, already in the transcripts)."""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...core.transfer import Item
from ...rules.errors import InvalidValue
from .markdown import slug

_SUMMARY = (("request", "Request"), ("investigated", "Investigated"), ("learned", "Learned"),
            ("completed", "Completed"), ("next_steps", "Next steps"), ("notes", "Notes"))


def read(path: Path) -> Iterator[Item]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise InvalidValue("PATH", f"{path}: not a claude-mem database ({exc})") from None
    if "observations" not in tables:
        raise InvalidValue("PATH", f"{path}: not a claude-mem database (no observations table)")
    try:
        yield from _observations(conn, path)
        if "session_summaries" in tables:
            yield from _summaries(conn, path)
    finally:
        conn.close()


def _rows(conn: sqlite3.Connection, table: str, wanted: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    columns = [c for c in wanted if c in have]
    order = "created_at_epoch, id" if "created_at_epoch" in have else "id"
    for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}"):
        yield dict(zip(columns, row))


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return [str(value)] if str(value).strip() else []
    if isinstance(parsed, list):
        return [str(x) for x in parsed if str(x).strip()]
    return [str(parsed)] if str(parsed).strip() else []


def _observations(conn: sqlite3.Connection, path: Path) -> Iterator[Item]:
    wanted = ("id", "memory_session_id", "sdk_session_id", "project", "text", "type", "title", "subtitle", "facts",
              "narrative", "concepts", "files_read", "files_modified", "created_at", "merged_into_project")
    for row in _rows(conn, "observations", wanted):
        project = str(row.get("merged_into_project") or row.get("project") or "unknown")
        facts = _list(row.get("facts"))
        modified = _list(row.get("files_modified"))
        head = " - ".join(str(row[k]) for k in ("title", "subtitle") if row.get(k))
        body = str(row.get("narrative") or row.get("text") or "").strip()
        parts = [p for p in (head, body) if p]
        if facts:
            parts.append("Facts:\n" + "\n".join(f"- {f}" for f in facts))
        if modified:
            parts.append("Files modified: " + ", ".join(modified))
        if not parts:
            continue
        origin = f"{path}:observations:{row.get('id')}"
        kind = str(row.get("type") or "observation")
        meta = {"project": project, "session": row.get("memory_session_id") or row.get("sdk_session_id"),
                "claude_mem_id": row.get("id"), "concepts": _list(row.get("concepts"))[:20],
                "files_read": _list(row.get("files_read"))[:50], "files_modified": modified[:50]}
        yield Item("episode", "\n\n".join(parts), origin, at=row.get("created_at"), episode_kind="observation",
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
        parts = [f"{label}: {str(row[key]).strip()}" for key, label in _SUMMARY if row.get(key)
                 and str(row[key]).strip()]
        if not parts:
            continue
        edited = _list(row.get("files_edited"))
        if edited:
            parts.append("Files edited: " + ", ".join(edited))
        project = str(row.get("merged_into_project") or row.get("project") or "unknown")
        yield Item("episode", "\n".join(parts), f"{path}:session_summaries:{row.get('id')}", at=row.get("created_at"),
                   episode_kind="summary", tags=["claude-mem", "session", slug(project, 60)],
                   meta={"project": project, "session": row.get("memory_session_id") or row.get("sdk_session_id"),
                         "claude_mem_id": row.get("id")})
