"""Editing another program's settings file without rewriting it: every byte outside memvault's own entries stays.

:class:`JsonText` reads JSON (comments allowed, as Gemini CLI's ``settings.json`` allows them) into a tree of
spans and edits it by splicing text: a member added after the last one, in the file's own indentation; a member
removed with exactly the separator that was added for it. :class:`TomlBlock` appends one marked block to a TOML
file (Codex's ``config.toml``) and removes exactly that block. A file that does not parse is refused, naming the
file and line, and left alone.
"""
from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...rules.errors import ConfigError

_WS = " \t\r\n"
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
#: Deepest nesting of a settings file read: the parser recurses, and a file nested past Python's recursion limit was
#: an internal error (exit 70) naming no file, in install and in status alike.
MAX_DEPTH = 100


@dataclass
class Node:
    """A JSON value and where it is: ``text[start:end]``. Objects keep (key, key_start, value) members."""

    kind: str  # "object", "array", "scalar"
    start: int
    end: int
    members: list[tuple[str, int, Node]] = field(default_factory=list)
    items: list[Node] = field(default_factory=list)

    def member(self, key: str) -> Node | None:
        for name, _, node in self.members:
            if name == key:
                return node
        return None


class JsonText:
    """A JSON/JSONC document as text plus spans; edits splice the text and parse it again."""

    def __init__(self, text: str, path: Path | str = "settings") -> None:
        self.path = path
        self.text = text if text.strip() else "{}\n"
        self.root = _Parser(self.text, path).document()
        if self.root.kind != "object":
            raise ConfigError(path, "the settings file is not a JSON object")

    # -- reading ---------------------------------------------------------------------------------------------
    def value(self, node: Node) -> Any:
        """The Python value of ``node`` (comments dropped)."""
        return json.loads(_strip_comments(self.text[node.start:node.end]))

    def get(self, path: tuple[str, ...]) -> Node | None:
        node: Node | None = self.root
        for key in path:
            if node is None or node.kind != "object":
                return None
            node = node.member(key)
        return node

    # -- editing ---------------------------------------------------------------------------------------------
    def _splice(self, start: int, end: int, new: str) -> None:
        self.text = self.text[:start] + new + self.text[end:]
        self.root = _Parser(self.text, self.path).document()

    def set_member(self, path: tuple[str, ...], key: str, value: Any) -> None:
        """Set ``key`` in the object at ``path`` to ``value``: its value replaced in place when it exists, else a
        member added after the last one."""
        obj = self.get(path)
        assert obj is not None and obj.kind == "object"
        current = obj.member(key)
        if current is not None:
            self._splice(current.start, current.end, self._render(value, self._indent_at(current.start)))
            return
        self._insert(obj, f"{json.dumps(key, ensure_ascii=False)}: ", value)

    def append_item(self, path: tuple[str, ...], value: Any) -> None:
        arr = self.get(path)
        assert arr is not None and arr.kind == "array"
        self._insert(arr, "", value)

    def replace(self, node: Node, value: Any) -> None:
        self._splice(node.start, node.end, self._render(value, self._indent_at(node.start)))

    def _insert(self, container: Node, prefix: str, value: Any) -> None:
        children = [m[2] for m in container.members] if container.kind == "object" else container.items
        first = [m[1] for m in container.members] if container.kind == "object" else [n.start for n in children]
        if children:
            last = children[-1]
            if self._line_of(first[-1]) == self._line_of(container.start):  # a one-line container: stay on it
                self._splice(last.end, last.end, ", " + prefix + json.dumps(value, ensure_ascii=False))
                return
            indent = self._indent_at(first[-1])
            self._splice(last.end, last.end, ",\n" + indent + prefix + self._render(value, indent))
            return
        outer = self._indent_at(container.start)
        indent = outer + self.unit()
        close = "}" if container.kind == "object" else "]"
        self._splice(container.start, container.end, container_open(container.kind) + "\n" + indent + prefix
                     + self._render(value, indent) + "\n" + outer + close)

    def remove(self, container: Node, index: int) -> None:
        """Remove member/item ``index`` of ``container`` with the separator that joins it to the others."""
        if container.kind == "object":
            spans = [(m[1], m[2].end) for m in container.members]
        else:
            spans = [(n.start, n.end) for n in container.items]
        start, end = spans[index]
        if index > 0:
            self._splice(spans[index - 1][1], end, "")
        elif len(spans) > 1:
            self._splice(start, spans[1][0], "")
        else:
            self._splice(container.start, container.end, container_open(container.kind)
                         + ("}" if container.kind == "object" else "]"))

    def restore(self, node: Node, text: str) -> None:
        """Put back a container's original text (an empty one memvault filled)."""
        self._splice(node.start, node.end, text)

    # -- layout ----------------------------------------------------------------------------------------------
    def unit(self) -> str:
        """The file's indentation step (two spaces when it has none)."""
        m = re.search(r"\n([ \t]+)\S", self.text)
        if m is None:
            return "  "
        widths = [len(x) for x in re.findall(r"\n( +)\S", self.text)]
        if "\t" in m.group(1):
            return "\t"
        return " " * min(widths) if widths else "  "

    def _line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos)

    def _indent_at(self, pos: int) -> str:
        line_start = self.text.rfind("\n", 0, pos) + 1
        m = re.match(r"[ \t]*", self.text[line_start:pos])
        return m.group(0) if m else ""

    def _render(self, value: Any, indent: str) -> str:
        unit = self.unit()
        dumped = json.dumps(value, ensure_ascii=False, indent=unit if unit != "\t" else "\t")
        return dumped.replace("\n", "\n" + indent)


def container_open(kind: str) -> str:
    return "{" if kind == "object" else "["


def _strip_comments(text: str) -> str:
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            k = text.find("*/", i + 2)
            i = n if k < 0 else k + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Parser:
    """Recursive descent over JSON with // and /* */ comments, recording spans."""

    def __init__(self, text: str, path: Path | str) -> None:
        self.text, self.path, self.i, self.depth = text, path, 0, 0

    def fail(self, what: str) -> ConfigError:
        line = self.text.count("\n", 0, self.i) + 1
        return ConfigError(self.path, f"line {line}: {what}; not changed")

    def skip(self) -> None:
        text, n = self.text, len(self.text)
        while self.i < n:
            c = text[self.i]
            if c in _WS:
                self.i += 1
            elif text.startswith("//", self.i):
                end = text.find("\n", self.i)
                self.i = n if end < 0 else end
            elif text.startswith("/*", self.i):
                end = text.find("*/", self.i + 2)
                if end < 0:
                    raise self.fail("unclosed comment")
                self.i = end + 2
            else:
                return

    def document(self) -> Node:
        self.skip()
        node = self.value()
        self.skip()
        if self.i != len(self.text):
            raise self.fail("unexpected text after the JSON value")
        return node

    def value(self) -> Node:
        if self.i >= len(self.text):
            raise self.fail("unexpected end of file")
        c = self.text[self.i]
        if c in "{[":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
            node = self.obj() if c == "{" else self.arr()
            self.depth -= 1
            return node
        start = self.i
        if c == '"':
            self.string()
        else:
            m = _NUMBER.match(self.text, self.i)
            for word in ("true", "false", "null"):
                if self.text.startswith(word, self.i):
                    self.i += len(word)
                    break
            else:
                if m is None:
                    raise self.fail(f"unexpected {c!r}")
                self.i = m.end()
        return Node("scalar", start, self.i)

    def string(self) -> str:
        start = self.i
        self.i += 1
        text, n = self.text, len(self.text)
        while self.i < n and text[self.i] != '"':
            if text[self.i] == "\n":
                raise self.fail("newline in a string")
            self.i += 2 if text[self.i] == "\\" else 1
        if self.i >= n:
            raise self.fail("unclosed string")
        self.i += 1
        try:
            return str(json.loads(text[start:self.i]))
        except ValueError:
            raise self.fail("bad string") from None

    def obj(self) -> Node:
        node = Node("object", self.i, 0)
        self.i += 1
        self.skip()
        if self.text.startswith("}", self.i):
            self.i += 1
            node.end = self.i
            return node
        while True:
            self.skip()
            if not self.text.startswith('"', self.i):
                raise self.fail("expected a key in double quotes")
            key_start = self.i
            key = self.string()
            self.skip()
            if not self.text.startswith(":", self.i):
                raise self.fail("expected ':'")
            self.i += 1
            self.skip()
            node.members.append((key, key_start, self.value()))
            self.skip()
            if self.text.startswith(",", self.i):
                self.i += 1
                continue
            if self.text.startswith("}", self.i):
                self.i += 1
                node.end = self.i
                return node
            raise self.fail("expected ',' or '}'")

    def arr(self) -> Node:
        node = Node("array", self.i, 0)
        self.i += 1
        self.skip()
        if self.text.startswith("]", self.i):
            self.i += 1
            node.end = self.i
            return node
        while True:
            self.skip()
            node.items.append(self.value())
            self.skip()
            if self.text.startswith(",", self.i):
                self.i += 1
                continue
            if self.text.startswith("]", self.i):
                self.i += 1
                node.end = self.i
                return node
            raise self.fail("expected ',' or ']'")


# ------------------------------------------------------------------------------------------------ TOML
class TomlBlock:
    """One block memvault owns at the end of a TOML file, found again by its first line (a comment)."""

    def __init__(self, text: str, marker: str, path: Path | str = "config.toml") -> None:
        self.text, self.marker, self.path = text, marker, path
        try:
            self.data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(path, f"invalid TOML ({exc}); not changed") from None
        except RecursionError:  # tomllib recurses into nested arrays and inline tables
            raise ConfigError(path, "invalid TOML (nested too deep to be read); not changed") from None

    def find(self) -> tuple[int, int] | None:
        """The span of the block, or None: the marker line, its table's header and the keys below it, up to a blank
        line, a second table header or a comment after the header (a table added right below the block, with the
        comment that names it, is someone else's: ending at the first blank line took it away on uninstall)."""
        at = self.text.find(self.marker)
        if at < 0 or (at > 0 and self.text[at - 1] != "\n"):
            return None
        start = self.text.find("\n", at) + 1  # the line after the marker (0: the marker is the last line)
        header = False
        while 0 < start < len(self.text):
            nl = self.text.find("\n", start)
            word = self.text[start:len(self.text) if nl < 0 else nl].lstrip()
            if not word or (header and word.startswith(("[", "#"))):
                return at, start
            header = header or word.startswith("[")
            start = nl + 1 if nl >= 0 else len(self.text)
        return at, len(self.text)

    def put(self, block: str) -> str:
        """The block appended (or replacing the old one); returns the separator put before a new block."""
        span = self.find()
        if span is not None:
            self.text = self.text[:span[0]] + block + self.text[span[1]:]
            prefix = ""
        else:
            prefix = ("\n" if self.text and not self.text.endswith("\n") else "") + ("\n" if self.text else "")
            self.text = self.text + prefix + block
        self._check()
        return prefix

    def drop(self, prefix: str | None) -> bool:
        """Remove the block and the separator added before it (``prefix``; one blank line when not known)."""
        span = self.find()
        if span is None:
            return False
        start, end = span
        before = self.text[:start]
        if prefix is None:
            prefix = "\n" if before.endswith("\n\n") else ""
        if prefix and before.endswith(prefix):
            before = before[: len(before) - len(prefix)]
        self.text = before + self.text[end:]
        self._check()
        return True

    def _check(self) -> None:
        try:
            tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(self.path, f"the edit would make invalid TOML ({exc}); not changed") from None


def toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)
