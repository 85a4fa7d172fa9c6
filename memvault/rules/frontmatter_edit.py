"""Read YAML front matter with line numbers, and rewrite it with the smallest possible change.

A person edits these files in a text editor, so a rewrite must not reorder their keys, drop their comments or
reformat values they did not ask to change. The editor here works on lines: a top-level ``key:`` line and the
indented (or ``- item``) lines after it form a block; changing a key replaces its first block in place and drops
any later block of the same key (typed twice by hand, which YAML would read instead), a new key is appended,
everything else is copied byte for byte. python-frontmatter's YAML handler loads the mapping.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from .errors import FrontMatterError

_KEY_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)\s*:(?:\s|$)")
_FENCE = re.compile(r"^---\s*$")
_CLOSE = re.compile(r"^(?:---|\.\.\.)\s*$")


@lru_cache(maxsize=1)
def _yaml() -> tuple[Any, Any, Any]:
    """yaml, its fastest safe loader, and python-frontmatter's handler: imported on first use (about 40 ms that
    a recall without fact hits never pays)."""
    import yaml
    from frontmatter.default_handlers import YAMLHandler

    return yaml, getattr(yaml, "CSafeLoader", yaml.SafeLoader), YAMLHandler()


@dataclass
class Document:
    """A markdown file split into front matter lines and body. Line numbers are 1-based in the file."""

    fm_lines: list[str] | None  # None: the file has no front matter at all
    body: str
    meta: dict[str, Any] = field(default_factory=dict)
    key_lines: dict[str, int] = field(default_factory=dict)
    newline: str = "\n"

    def render(self) -> str:
        nl = self.newline
        if self.fm_lines is None:
            return self.body
        return "---" + nl + "".join(line + nl for line in self.fm_lines) + "---" + nl + self.body


def _refuse_aliases(yaml: Any, loader: Any, fm_lines: list[str]) -> None:
    """FrontMatterError for an alias (``*name``): nine nested aliases in 459 bytes name a billion values, and every
    walk of them (the depth check of an import, the pre-commit hook's secret scan) took minutes. memvault writes
    none; a front matter without a ``*`` has none and is not looked at twice."""
    if not any("*" in line for line in fm_lines):
        return
    for event in yaml.parse("\n".join(fm_lines), Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 2 if event.start_mark is not None else 1
            raise FrontMatterError("a YAML alias (*name) in front matter: not taken (write the value itself)", line)


#: A front-matter line YAML reads as one ``key: value`` on its own, the value a plain scalar (or a flow list of them)
#: that ends at the line: no quote, comment, anchor, alias, tag, block or mapping indicator, only ASCII. What memvault
#: writes is of this form; any line that is not sends the whole front matter to YAML.
_PLAIN_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*): (?:([A-Za-z0-9_.+/(][A-Za-z0-9_.+/()@:-]*"
                         r"(?: [A-Za-z0-9_.+/()@:-]+)*)|\[((?:[A-Za-z0-9_.+/(][A-Za-z0-9_.+/()@-]*"
                         r"(?:, [A-Za-z0-9_.+/(][A-Za-z0-9_.+/()@-]*)*)?)\])")


@lru_cache(maxsize=1)
def _scalar_reader() -> Any:
    """YAML's own reading of one plain scalar (its implicit resolver and safe constructor), each answer kept: a
    listing of 20,000 facts spent a third of its time in the YAML loader, on lines that repeat (a source, a
    category) or are one timestamp."""
    yaml = _yaml()[0]
    resolver, constructor = yaml.resolver.Resolver(), yaml.constructor.SafeConstructor()
    plain = (True, False)  # implicit, as a plain scalar

    @lru_cache(maxsize=8192)  # every value it gives is immutable (text, number, bool, None, date, datetime)
    def read(text: str) -> Any:
        node = yaml.ScalarNode(resolver.resolve(yaml.ScalarNode, text, plain), text)
        return constructor.yaml_constructors[node.tag](constructor, node)

    return read


def _plain_meta(fm_lines: list[str]) -> dict[str, Any] | None:
    """The mapping YAML loads from ``fm_lines`` when every line is a :data:`_PLAIN_LINE` (as the lines memvault
    writes are), read line by line without the loader; None for anything else, which the loader reads (and
    refuses with its line). ``tests/test_frontmatter_quick.py`` holds the two readings to one answer."""
    read = _scalar_reader()
    found = []
    for line in fm_lines:  # every line first: the loader refuses a later line before it builds an earlier value
        m = _PLAIN_LINE.fullmatch(line)
        if m is None:
            return None
        key, value, items = m.groups()
        if value is not None and (": " in value or value.endswith(":")):
            return None  # YAML reads a mapping there (or refuses it)
        found.append((key, value, items))
    meta: dict[str, Any] = {}
    try:
        for key, value, items in found:
            name = read(key)
            if not isinstance(name, str):
                return None  # `yes:` is the key True to YAML
            meta[name] = read(value) if value is not None else [read(i) for i in items.split(", ")] if items else []
    except (ValueError, OverflowError):  # resolved but not built (0x_, 2026-02-30): the loader says so
        return None
    return meta


def parse(text: str) -> Document:
    """Split and load. Raises :class:`FrontMatterError` with the file line of a YAML problem."""
    # The file's line ending is the first line's: a body with CRLF under front matter memvault wrote with LF
    # (text pasted from Windows) made the whole file "CRLF", and its front matter, source included, was not found.
    first = text.find("\n")
    newline = "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"
    lines = text.split(newline) if newline == "\r\n" else text.split("\n")
    if text.startswith("\ufeff"):
        lines[0] = lines[0][1:]
    if not lines or not _FENCE.match(lines[0]):
        return Document(None, text, newline=newline)
    end = next((i for i in range(1, len(lines)) if _CLOSE.match(lines[i])), None)
    if end is None:
        raise FrontMatterError("front matter opened with '---' on line 1 is never closed", 1)
    fm_lines = lines[1:end]
    body = newline.join(lines[end + 1 :])
    try:
        yaml, loader, handler = _yaml()
        meta = _plain_meta(fm_lines)
        if meta is None:
            _refuse_aliases(yaml, loader, fm_lines)
            meta = handler.load("\n".join(fm_lines), Loader=loader)
    except _yaml()[0].YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 2 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise FrontMatterError(f"invalid YAML front matter: {problem}", line) from None
    except (ValueError, OverflowError) as exc:  # resolved, but not built: `valid_until: 2026-02-30`, `0x_`
        raise _unbuilt(fm_lines, exc) from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise FrontMatterError("front matter must be a mapping of key: value lines", 2)
    key_lines = {}
    for i, line in enumerate(fm_lines):
        m = _KEY_LINE.match(line)
        if m:
            key_lines.setdefault(m.group(1), i + 2)
    return Document(fm_lines, body, {str(k): v for k, v in meta.items()}, key_lines, newline)


def _unbuilt(fm_lines: list[str], exc: Exception) -> FrontMatterError:
    """The refusal of a value YAML's resolver gives a type its constructor cannot make (a 30th of February, an int
    of no digits or of too many), naming the first line that fails alone: the loader's error has no mark."""
    yaml, loader, _handler = _yaml()
    for i, line in enumerate(fm_lines):
        try:
            yaml.load(line, Loader=loader)
        except (ValueError, OverflowError) as alone:
            m = _KEY_LINE.match(line)
            return FrontMatterError(f"{m.group(1) + ': ' if m else ''}not a value YAML can read ({alone})", i + 2)
        except yaml.YAMLError:
            continue
    return FrontMatterError(f"invalid YAML front matter: {exc}", 1)


def format_value(value: Any) -> str:
    """One YAML scalar or flow sequence, as a person would type it."""
    if isinstance(value, datetime):
        from .timeutil import format_time

        return format_time(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(round(value, 6))
    dumped = _yaml()[0].safe_dump(value, default_flow_style=True, allow_unicode=True, width=1 << 30)
    dumped = dumped.strip()
    if dumped.endswith("\n..."):
        dumped = dumped[: -len("\n...")]
    if dumped.endswith("..."):
        dumped = dumped[:-3].strip()
    return dumped


def _blocks(fm_lines: list[str]) -> dict[str, list[tuple[int, int]]]:
    """key -> every (first line index, end index exclusive) of its blocks in ``fm_lines``, in file order: a key
    typed twice by hand has two, and YAML reads the last."""
    spans: dict[str, list[tuple[int, int]]] = {}
    current: str | None = None
    start = 0
    for i, line in enumerate(fm_lines):
        m = _KEY_LINE.match(line)
        if m:
            if current is not None:
                spans.setdefault(current, []).append((start, i))
            current, start = m.group(1), i
        elif current is not None and not (line[:1] in (" ", "\t") or line.startswith("-")):
            # a comment or blank line at column 0 ends the block and stays where it is
            spans.setdefault(current, []).append((start, i))
            current = None
    if current is not None:
        spans.setdefault(current, []).append((start, len(fm_lines)))
    return spans


def _trailing_comment(line: str) -> str:
    """The `` # comment`` ending a one-line ``key: value``, if it really is a comment (not inside quotes)."""
    m = re.search(r"\s+#.*$", line)
    if not m:
        return ""
    try:
        yaml, loader, _handler = _yaml()
        with_comment = yaml.load(line, Loader=loader)
        without = yaml.load(line[: m.start()], Loader=loader)
    except _yaml()[0].YAMLError:
        return ""
    return m.group(0) if with_comment == without else ""


def update(doc: Document, changes: dict[str, Any], order: list[str], body: str) -> Document:
    """A copy of ``doc`` with ``changes`` applied (a value of None removes the key) and a new body.

    Keys already present are rewritten in place; new keys are appended in the order given by ``order``.
    """
    fm_lines = list(doc.fm_lines or [])
    spans = _blocks(fm_lines)
    replacements: dict[int, tuple[int, list[str]]] = {}
    new_keys = []
    for key, value in changes.items():
        if key in spans:
            (start, end), *later = spans[key]
            # A second block of the key (typed twice by hand) would override the new value when read: it goes.
            for later_start, later_end in later:
                replacements[later_start] = (later_end, [])
            if value is None:
                replacements[start] = (end, [])
                continue
            comment = _trailing_comment(fm_lines[start]) if end - start == 1 else ""
            replacements[start] = (end, [f"{key}: {format_value(value)}{comment}"])
        elif value is not None:
            new_keys.append(key)
    out: list[str] = []
    i = 0
    while i < len(fm_lines):
        if i in replacements:
            end, lines = replacements[i]
            out.extend(lines)
            i = end
        else:
            out.append(fm_lines[i])
            i += 1
    # Trailing blank lines stay at the end, after appended keys.
    tail: list[str] = []
    while out and not out[-1].strip():
        tail.insert(0, out.pop())
    rank = {k: n for n, k in enumerate(order)}
    for key in sorted(new_keys, key=lambda k: rank.get(k, len(rank))):
        out.append(f"{key}: {format_value(changes[key])}")
    out.extend(tail)
    meta = dict(doc.meta)
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    return Document(out, body, meta, {}, doc.newline)
