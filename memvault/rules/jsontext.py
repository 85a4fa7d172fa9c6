"""JSON written by someone else, read so that no single value can stop the reading of the rest.

Python's parser recurses once per level: a value nested 100 000 deep raises RecursionError (or worse, in code that
walks the result), and one such item in a file of thousands used to end an import half-way. Here the depth is
measured first, by a linear scan that does not recurse (brackets inside strings do not count), and nothing deeper
than :data:`MAX_DEPTH` is handed to the parser; what is parsed is checked to be standard JSON
(:func:`memvault.rules.validation.check_json_value`). :func:`array_items` reads the items of a list one by one,
so a bad item becomes an error in its place and the next item is read as if nothing happened.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any

from .errors import InvalidValue
from .validation import check_json_value

#: The deepest nesting accepted (the depth ``check_json_value`` allows, and the one ingest's lines have).
MAX_DEPTH = 20
# A string is matched "unrolled" (runs of plain characters between escapes): one alternative per character would
# cost a second per megabyte.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(r'[^\s,\]}:]+')
_SPACE = re.compile(r"\s*")
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_PAIR = re.compile(r"[\[{][\]}]")


def depth_of(text: str, start: int = 0, end: int | None = None) -> int:
    """How deep the brackets of ``text[start:end]`` nest (0 for a scalar), without recursing."""
    depth = deepest = 0
    for m in _TOKENS.finditer(text, start, len(text) if end is None else end):
        token = m.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def deeper_than(text: str, limit: int) -> bool:
    """Whether the brackets of ``text`` nest deeper than ``limit``: strings and everything but brackets dropped, then
    innermost pairs removed ``limit`` times (each pass a regular expression over the whole: linear, no recursion,
    and fast on megabytes). Brackets that never close count as deep: such text is no JSON anyway."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _PAIR.sub("", brackets)
    return bool(brackets)


def closes(text: str) -> bool:
    """Whether every bracket of ``text`` outside strings is closed (in one linear count, whatever the depth)."""
    depth = 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def value_depth(value: Any) -> int:
    """How deep lists and dicts nest in a value already parsed (by YAML, say), without recursing."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


#: The deepest nesting read from a file someone else wrote (an episode line, a transcript line, a hook's payload):
#: far below where Python's parser, or code walking what it gave, would raise RecursionError.
MAX_READ_DEPTH = 200


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` refusing an object that names a key twice (ValueError): ``json.loads`` keeps the last
    value, so a first ``"text"`` holding a token was never scanned, shown or exported, yet committed."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def every_pair(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` keeping every value of a key given twice (the second as ``key~2``...): what a scan
    for secrets must see."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        name, n = key, 1
        while name in out:
            n += 1
            name = f"{key}~{n}"
        out[name] = value
    return out


def parse(data: str | bytes, limit: int = MAX_READ_DEPTH, *, pairs: Any = None, standard: bool = False) -> Any:
    """``json.loads(data)``, with a value nested deeper than ``limit`` a ValueError like any other bad JSON (not a
    RecursionError that stops the reading of every line after it). The depth is measured only when the text holds
    more opening brackets than ``limit``: a line of the usual kind costs two counts. ``pairs``: json's
    ``object_pairs_hook`` (:func:`unique_pairs`, :func:`every_pair`). ``standard``: NaN and Infinity are refused
    (ValueError), as memvault never writes them."""
    opening = data.count(b"[") + data.count(b"{") if isinstance(data, bytes) else data.count("[") + data.count("{")
    if opening > limit:
        text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
        if deeper_than(text, limit):
            raise ValueError(f"nested deeper than {limit} levels")
    try:
        if pairs is None and not standard:
            return json.loads(data)
        # bytes as json.loads reads UTF-8 ones (a byte-order mark skipped), without its undocumented helper
        text = data.decode("utf-8-sig", "surrogatepass") if isinstance(data, bytes) else data
        value = _decoder(pairs, standard).decode(text)
        if standard:
            _refuse_lone_surrogate(text, value)
        return value
    except RecursionError:
        raise ValueError(f"nested deeper than this Python can read (limit {limit})") from None


@lru_cache(maxsize=8)
def _decoder(pairs: Any, standard: bool) -> json.JSONDecoder:
    """One decoder per set of hooks: ``json.loads`` with a hook builds a decoder and its scanner at every call
    (episode lines read 60 % slower)."""
    return json.JSONDecoder(object_pairs_hook=pairs, parse_constant=_refuse_constant if standard else None)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


#: The JSON escape of a surrogate (half of a character outside the first plane): the only way one gets into a
#: string read from UTF-8 text, so the only text that needs the slower check.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_lone_surrogate(text: str, value: Any) -> None:
    """ValueError when ``value`` (parsed from ``text``) holds a string with a lone surrogate (``"\\ud800"``
    without its other half): no character, it cannot be written as UTF-8 again, and an episode line holding one
    stopped every listing and export of the vault with an internal error. A pair (an emoji escaped) is one
    character and passes."""
    if _SURROGATE_ESCAPE.search(text) is None:
        return
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"a lone surrogate ({exc.object[exc.start]!a}) is no character: not text") from None


def loads(text: str, name: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` parsed, or InvalidValue naming ``name`` and why (too deep, not JSON, not standard JSON). The message
    never quotes the text."""
    if deeper_than(text, max_depth):
        if not closes(text):
            raise InvalidValue(name, "not valid JSON (its brackets never close: cut short?)")
        raise InvalidValue(name, f"nested deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InvalidValue(name, f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    except ValueError as exc:
        raise InvalidValue(name, str(exc)) from None
    except RecursionError:  # a lower recursion limit than the depth check assumes
        raise InvalidValue(name, f"nested deeper than {max_depth} levels") from None
    check_json_value(value, name)  # a lone surrogate in any string or key too (validation.check_utf8)
    return value


def _skip(text: str, i: int) -> int:
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]  # \s* always matches


def _value_end(text: str, i: int, name: str) -> int:
    """Where the value starting at ``text[i]`` ends (its syntax is checked later, when it is parsed on its own)."""
    if i >= len(text):
        raise InvalidValue(name, "ends where a value was expected")
    if text[i] == '"':
        m = _STRING.match(text, i)
        if m is None:
            raise InvalidValue(name, f"a string that never ends (character {i})")
        return m.end()
    if text[i] in "[{":
        depth = 0
        for m in _TOKENS.finditer(text, i):
            token = m.group()
            if token in "[{":
                depth += 1
            elif token in "]}":
                depth -= 1
                if depth == 0:
                    return m.end()
        raise InvalidValue(name, f"a list or object that never ends (character {i})")
    m = _SCALAR.match(text, i)
    if m is None:
        raise InvalidValue(name, f"no value at character {i}")
    return m.end()


def is_one_value(text: str) -> bool:
    """Whether ``text`` (one line of JSONL, say) holds exactly one whole value, however deep: told by its brackets,
    without parsing it."""
    i = _skip(text, 0)
    try:
        return i < len(text) and _skip(text, _value_end(text, i, "")) == len(text)
    except InvalidValue:
        return False


def _expect(text: str, i: int, allowed: str, name: str) -> str:
    if i >= len(text) or text[i] not in allowed:
        raise InvalidValue(name, f"expected {' or '.join(repr(c) for c in allowed)} at character {i}")
    return text[i]


def _list_start(text: str, name: str, keys: Sequence[str]) -> int:
    """Where the list of items opens: the document itself, or the first of ``keys`` of a top-level object."""
    i = _skip(text, 0)
    if i < len(text) and text[i] == "{" and keys:
        i = _skip(text, i + 1)
        while i < len(text) and text[i] != "}":
            key_end = _value_end(text, i, name)
            key = loads(text[i:key_end], name)
            i = _skip(text, key_end)
            _expect(text, i, ":", name)
            i = _skip(text, i + 1)
            if key in keys:
                _expect(text, i, "[", f"{name}: {key}")
                return i
            i = _skip(text, _value_end(text, i, name))
            if _expect(text, i, ",}", name) == ",":
                i = _skip(text, i + 1)
        raise InvalidValue(name, f"no list of items (expected a top-level list or {' / '.join(keys)})")
    _expect(text, i, "[", name)
    return i


def array_items(text: str, name: str, *, keys: Sequence[str] = ()) -> Iterator[tuple[int, Any]]:
    """(position from 1, item) for each item of the list ``text`` holds (the document, or the value of the first
    of ``keys`` in a top-level object); an item too deep or not valid JSON is an InvalidValue in its place, and the
    items after it are read all the same. The structure around the items being broken (the list never closes,
    something after it) raises InvalidValue: nothing can be said about what follows."""
    if not deeper_than(text, MAX_DEPTH + 1):  # the usual file: parsed whole, in C
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except ValueError:
            pass  # read item by item below, to say which item is at fault and keep the others
        else:
            yield from _parsed_items(data, name, keys)
            return
    i = _skip(text, _list_start(text, name, keys) + 1)
    n = 0
    if i < len(text) and text[i] == "]":
        return
    while True:
        n += 1
        end = _value_end(text, i, f"{name}: item {n}")
        try:
            yield n, loads(text[i:end], f"item {n}")
        except InvalidValue as exc:
            yield n, exc
        i = _skip(text, end)
        if _expect(text, i, ",]", f"{name}: after item {n}") == "]":
            break
        i = _skip(text, i + 1)
    if not keys or text[_skip(text, 0)] == "[":
        if _skip(text, i + 1) != len(text):
            raise InvalidValue(name, f"something after the list (character {_skip(text, i + 1)})")


def _parsed_items(data: Any, name: str, keys: Sequence[str]) -> Iterator[tuple[int, Any]]:
    """:func:`array_items` for a document shallow enough to be parsed whole (and parsed)."""
    if isinstance(data, dict) and keys:
        found = next((k for k in data if k in keys), None)  # the first of them in the file, as the scan reads it
        if found is None:
            raise InvalidValue(name, f"no list of items (expected a top-level list or {' / '.join(keys)})")
        data = data[found]
        if not isinstance(data, list):
            raise InvalidValue(f"{name}: {found}", "expected '[' (a list of items)")
    if not isinstance(data, list):
        raise InvalidValue(name, "expected '[' (a list of items)")
    # Nothing in it nests deeper than the limit (the caller measured), constants were refused and JSON's keys are
    # strings: every item is as :func:`loads` would return it.
    yield from enumerate(data, 1)
