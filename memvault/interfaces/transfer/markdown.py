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
    meta, body, _ = note_at(path)
    return meta, body


def note_at(path: Path) -> tuple[dict[str, Any], str, int]:
    """:func:`note`, and the number of the file's line the body starts on (from 1): what a refused line is named
    by. 0 when the body cannot be found in the file as it was read (its lines are then unnumbered)."""
    text = read_regular(path).decode("utf-8", errors="replace")
    try:
        doc = fm.parse(text)
    except FrontMatterError:
        return {}, text, 1
    except RecursionError:  # YAML builds nested values by recursing
        raise InvalidValue("front matter", f"nested deeper than {MAX_DEPTH} levels") from None
    meta = doc.meta if isinstance(doc.meta, dict) else {}
    if value_depth(meta) > MAX_DEPTH:
        raise InvalidValue("front matter", f"nested deeper than {MAX_DEPTH} levels")
    body = doc.body
    at = len(text) - len(body) if text.endswith(body) else text.find(body) if body else -1
    return meta, body, text.count("\n", 0, at) + 1 if at >= 0 else 0


def notes(files: Iterable[Path]) -> Iterator[tuple[Path, dict[str, Any], str] | Item]:
    """(file, front matter, body) for each file, or the refusal of a file whose front matter cannot be used."""
    for read_ in numbered_notes(files):
        yield read_ if isinstance(read_, Item) else read_[:3]


def numbered_notes(files: Iterable[Path]) -> Iterator[tuple[Path, dict[str, Any], str, int] | Item]:
    """:func:`notes` with the line each body starts on (:func:`note_at`)."""
    for file in files:
        try:
            meta, body, first = note_at(file)
        except InvalidValue as exc:
            yield refused(str(file), exc)
            continue
        yield file, meta, body, first


def sections(body: str) -> list[tuple[str, str]]:
    """(heading, text) for each section; text before the first heading has the heading ``""``. Headings inside
    fenced code blocks do not count."""
    return [(h, t) for h, t, _ in numbered_sections(body)]


def numbered_sections(body: str, first: int = 1) -> list[tuple[str, str, list[int]]]:
    """:func:`sections` with the line numbers of each section: its heading's, then one per line of its text
    (``body`` starting on line ``first``; all 0 when ``first`` is 0, unknown)."""
    out: list[tuple[str, int, list[tuple[int, str]]]] = [("", 0, [])]
    fence = False
    for n, line in enumerate(body.splitlines(), first):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        m = None if fence else _HEADING.match(line)
        if m:
            out.append((m.group(2).strip(), n if first else 0, []))
        else:
            out[-1][2].append((n if first else 0, line))
    result = []
    for heading, at, lines in out:
        text, numbers = trimmed(lines)
        if text or heading:
            result.append((heading, text, [at, *numbers]))
    return result


def trimmed(lines: list[tuple[int, str]]) -> tuple[str, list[int]]:
    """Numbered lines as one text without its blank first and last lines or outer spaces, and the lines' numbers
    (as many as the text has lines)."""
    while lines and not lines[0][1].strip():
        lines = lines[1:]
    while lines and not lines[-1][1].strip():
        lines = lines[:-1]
    return "\n".join(line for _, line in lines).strip(), [n for n, _ in lines]


def numbered(body: str, first: int) -> tuple[str, list[int]]:
    """``body`` stripped as :func:`trimmed` strips, with the number of each line it keeps (0 when unknown). Split
    at ``\n`` only, so the text is the body's own (its ``\r\n``, a form feed inside a line)."""
    return trimmed([(n if first else 0, line) for n, line in enumerate(body.split("\n"), first)])


def tags_of(meta: dict[str, Any]) -> list[str]:
    raw = meta.get("tags")
    if isinstance(raw, str):
        raw = [t.strip() for t in raw.split(",")]
    return [str(t).strip()[:64] for t in raw or [] if str(t).strip()][:20] if isinstance(raw, (list, str)) else []


def section_facts(body: str, prefix: str, origin: str, *, category: str | None = None,
                  tags: list[str] | None = None, first: int = 0) -> Iterator[Item]:
    """One fact per section of ``body`` (its heading kept as its first line), keyed ``<prefix>/<heading>``;
    ``first`` is the file's line ``body`` starts on (0: unknown), so a line refused is named by its number."""
    used: dict[str, int] = {}
    for heading, text, lines in numbered_sections(body, first):
        if not text:
            continue
        name = slug(heading) if heading else "intro"
        used[name] = used.get(name, 0) + 1
        key = f"{prefix}/{name}" + (f"-{used[name]}" if used[name] > 1 else "")
        yield Item("fact", f"{heading}\n\n{text}" if heading else text, f"{origin}#{heading or 'intro'}", key=key,
                   category=category, tags=list(tags or []), lines=[lines[0], 0, *lines[1:]] if heading
                   else lines[1:], file=origin)


def read(path: Path) -> Iterator[Item]:
    files = [path] if path.is_file() else list(walk(path))
    base = path.parent if path.is_file() else path
    for file in files:
        try:
            meta, body, first = note_at(file)
        except InvalidValue as exc:
            yield refused(str(file), exc)
            continue
        rel = file.relative_to(base).with_suffix("").as_posix()
        key = key_of(*rel.split("/"))
        tags = tags_of(meta)
        title = str(meta.get("title") or "").strip()
        text, lines = numbered(body, first)
        if title and not text.lstrip("# ").startswith(title):
            text, lines = f"{title}\n\n{text}", [0, 0, *lines]
        if not text:
            continue
        if len(text.encode("utf-8")) > SPLIT_ABOVE:
            yield from section_facts(text, key, str(file), tags=tags, first=lines[0] if lines else 0)
        else:
            yield Item("fact", text, str(file), key=key, tags=tags, lines=lines, file=str(file),
                       category=str(meta["category"]) if isinstance(meta.get("category"), str) else None)
