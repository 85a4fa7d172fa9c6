"""A folder of plain markdown files: one fact per file (a file larger than a fact may be is cut at its headings).
Also the helpers the other markdown readers share: notes with front matter, sections, slugs."""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ...core.transfer import Item, refused
from ...rules import frontmatter_edit as fm
from ...rules.errors import FrontMatterError, InvalidValue
from ...rules.fsutil import read_regular
from ...rules.jsontext import MAX_DEPTH, value_depth

_SLUG = re.compile(r"[^a-z0-9]+")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
#: A file whose body is larger than this becomes one fact per section.
SPLIT_ABOVE = 48 * 1024


def slug(text: str, limit: int = 60) -> str:
    """A key segment: lower case, ``[a-z0-9-]``, at most ``limit`` characters (never empty)."""
    words = _SLUG.sub("-", text.lower()).strip("-")
    if len(words) > limit:  # cut between words when there is one to cut at
        cut = words[:limit + 1].rfind("-")
        words = words[:cut] if cut > limit // 2 else words[:limit]
    return words.strip("-") or "untitled"


def key_of(*parts: str) -> str:
    return "/".join(slug(p) for p in parts if p)


def walk(base: Path, suffix: str = ".md") -> Iterator[Path]:
    """The files under ``base`` ending in ``suffix``, in a stable order; dot folders and symlinks are skipped."""
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d)))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.endswith(suffix) and not name.startswith(".") and not path.is_symlink():
                yield path


def note(path: Path) -> tuple[dict[str, Any], str]:
    """A markdown file's front matter (``{}`` when it has none or it does not parse) and body. InvalidValue when the
    front matter nests deeper than :data:`~memvault.rules.jsontext.MAX_DEPTH` (the readers refuse that file). A
    symlink is refused (UnsafePath), never read: a repository can commit ``CLAUDE.md -> /etc/passwd``."""
    text = read_regular(path).decode("utf-8", errors="replace")
    try:
        doc = fm.parse(text)
    except FrontMatterError:
        return {}, text
    except RecursionError:  # YAML builds nested values by recursing
        raise InvalidValue("front matter", f"nested deeper than {MAX_DEPTH} levels") from None
    meta = doc.meta if isinstance(doc.meta, dict) else {}
    if value_depth(meta) > MAX_DEPTH:
        raise InvalidValue("front matter", f"nested deeper than {MAX_DEPTH} levels")
    return meta, doc.body


def notes(files: Iterable[Path]) -> Iterator[tuple[Path, dict[str, Any], str] | Item]:
    """(file, front matter, body) for each file, or the refusal of a file whose front matter cannot be used."""
    for file in files:
        try:
            meta, body = note(file)
        except InvalidValue as exc:
            yield refused(str(file), exc)
            continue
        yield file, meta, body


def sections(body: str) -> list[tuple[str, str]]:
    """(heading, text) for each section; text before the first heading has the heading ``""``. Headings inside
    fenced code blocks do not count."""
    out: list[tuple[str, list[str]]] = [("", [])]
    fence = False
    for line in body.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        m = None if fence else _HEADING.match(line)
        if m:
            out.append((m.group(2).strip(), []))
        else:
            out[-1][1].append(line)
    return [(h, "\n".join(lines).strip()) for h, lines in out if "\n".join(lines).strip() or h]


def tags_of(meta: dict[str, Any]) -> list[str]:
    raw = meta.get("tags")
    if isinstance(raw, str):
        raw = [t.strip() for t in raw.split(",")]
    return [str(t).strip()[:64] for t in raw or [] if str(t).strip()][:20] if isinstance(raw, (list, str)) else []


def section_facts(body: str, prefix: str, origin: str, *, category: str | None = None,
                  tags: list[str] | None = None) -> Iterator[Item]:
    """One fact per section of ``body`` (its heading kept as its first line), keyed ``<prefix>/<heading>``."""
    used: dict[str, int] = {}
    for heading, text in sections(body):
        if not text:
            continue
        name = slug(heading) if heading else "intro"
        used[name] = used.get(name, 0) + 1
        key = f"{prefix}/{name}" + (f"-{used[name]}" if used[name] > 1 else "")
        yield Item("fact", f"{heading}\n\n{text}" if heading else text, f"{origin}#{heading or 'intro'}", key=key,
                   category=category, tags=list(tags or []))


def read(path: Path) -> Iterator[Item]:
    files = [path] if path.is_file() else list(walk(path))
    base = path.parent if path.is_file() else path
    for read_ in notes(files):
        if isinstance(read_, Item):
            yield read_
            continue
        file, meta, body = read_
        rel = file.relative_to(base).with_suffix("").as_posix()
        key = key_of(*rel.split("/"))
        tags = tags_of(meta)
        title = str(meta.get("title") or "").strip()
        text = body.strip()
        if title and not text.lstrip("# ").startswith(title):
            text = f"{title}\n\n{text}"
        if not text:
            continue
        if len(text.encode("utf-8")) > SPLIT_ABOVE:
            yield from section_facts(text, key, str(file), tags=tags)
        else:
            yield Item("fact", text, str(file), key=key, tags=tags,
                       category=str(meta["category"]) if isinstance(meta.get("category"), str) else None)
