"""The naming and value rules every write and every reader share: keys, sources, kinds, tags, numbers, times.

Pure functions, no I/O. Every pattern is matched against the *whole* value (``fullmatch``): ``$`` in a ``match``
also accepts a final newline, which would let ``"evil\\n"`` through as a key and split a commit trailer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from .errors import InvalidKey, InvalidValue

KEY_MAX = 200
SOURCE_MAX = 200
TAG_MAX = 64
TAGS_MAX = 64
#: A category is a word or a few, shown beside the key: one line of at most this many characters.
CATEGORY_MAX = 200
KIND_MAX = 64
_SEGMENT = re.compile(r"[a-z0-9][a-z0-9._-]*")
# URI characters without quotes, angle brackets and backslashes: a source is printed inside attributes.
SOURCE_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*:[A-Za-z0-9._~:/?#@!$&()*+,;=%-]+")
KIND_PATTERN = re.compile(r"[a-z][a-z0-9_-]*")
#: Episode ids are ULIDs: milliseconds since 1970 in 48 bits, so a time before 1970 has no id.
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: How far past this host's clock an episode may be dated: clock skew between hosts, not the future.
MAX_FUTURE = timedelta(minutes=5)


@dataclass(frozen=True)
class Problem:
    """A file (or one line of one) that could not be read or is refused; the batch goes on without it."""

    path: Path
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"

    def in_vault(self, root: Path) -> Problem:
        """This problem as an asker who is not the host's user is told it: see :func:`vault_paths`."""
        path = Path(vault_paths(str(self.path), root))
        return Problem(path, vault_paths(self.reason, root), self.line)


#: An absolute path in a line of text (up to a space, a colon, a bracket or a quote), not a part of a relative path
#: (``facts/x``), a number (``10.0.0.0/8``) or a URL (``https://...``).
_ABSOLUTE = re.compile(r"(?<![\w.~/:-])/[^\s:()\[\]<>'\"]+")


def vault_paths(text: str, root: Path) -> str:
    """``text`` (a problem, an error line) naming files as the vault does, from its root (``facts/web/x.md``), not
    as the host does (``/home/alice/vaults/team/facts/web/x.md``: the user's name and home layout). A path outside
    the vault (a link's target) keeps only its last part (``.../elsewhere.sh``): enough to recognise, nothing of
    where it lives."""
    text = text.replace(str(root).rstrip("/") + "/", "")  # the vault's root is resolved, as the paths below it
    return _ABSOLUTE.sub(lambda m: ".../" + m.group().rstrip("/").rsplit("/", 1)[-1], text)


def validate_key(key: object, what: str = "a key") -> str:
    """Return ``key`` if it is a valid fact key (or procedure name), else raise :class:`InvalidKey` saying why."""
    if not isinstance(key, str) or not key:
        raise InvalidKey(str(key), f"{what} must not be empty")
    if len(key) > KEY_MAX:  # first: a 50 MB argument is neither escaped whole nor repeated in the message
        shown = key[:40].encode("unicode_escape").decode("ascii")
        raise InvalidKey(shown + "...", f"{what} has at most {KEY_MAX} characters (this one has {len(key)})")
    shown = key.encode("unicode_escape").decode("ascii")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise InvalidKey(shown, f"{what} must not contain control characters (newline, tab, NUL)")
    if "\\" in key:
        raise InvalidKey(key, "use '/' between segments, not '\\'")
    if key.startswith("/"):
        raise InvalidKey(key, f"{what} is relative to its folder, not an absolute path")
    for segment in key.split("/"):
        if not segment:
            raise InvalidKey(key, "empty segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise InvalidKey(key, f"'{segment}' segments are not allowed")
        if not _SEGMENT.fullmatch(segment):
            raise InvalidKey(key, f"segment {segment!r} must match [a-z0-9][a-z0-9._-]* (lower case)")
    return key


def validate_name(name: object) -> str:
    """A procedure name: the same rules as a fact key."""
    return validate_key(name, "a procedure name")


def check_utf8(value: str, name: str) -> str:
    """``value`` when a file can hold it as UTF-8, else InvalidValue naming ``name``. A byte that is not UTF-8 on a
    command line reaches Python as a lone surrogate, and so does JSON's ``"\\ud800"``: half a character, no text."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValue(name, f"not UTF-8 text (a lone surrogate at character {exc.start}: a byte that is "
                                 "not UTF-8, or half a character)") from None
    return value


def check_args(args: Sequence[str]) -> None:
    """A program's arguments: JSON (MCP) carries a NUL byte, which exec cannot (an internal error, before); and
    each is UTF-8 text, which its run's episode must hold: a byte that is not (a latin-1 file name on a command line)
    ran the script and then had its record refused, and a lone surrogate from JSON failed at exec (an internal
    error). Refused before anything runs."""
    for n, arg in enumerate(args):
        if "\x00" in arg:
            raise InvalidValue(f"args[{n}]", "contains a NUL byte, which no program's argument can hold")
        check_utf8(arg, f"args[{n}]")


def validate_source(source: object, name: str = "source") -> str:
    """``<kind>:<name>`` (``user:admin``, ``agent:deployer``, ``web:example.com``): printable ASCII, no spaces."""
    if not isinstance(source, str) or len(source) > SOURCE_MAX or not SOURCE_PATTERN.fullmatch(source):
        shown = source.encode("unicode_escape").decode("ascii") if isinstance(source, str) else repr(source)
        raise InvalidValue(name, f"{shown[:80]!r} is not of the form <kind>:<name> (e.g. user:admin, agent:deployer),"
                                 " printable ASCII without spaces")
    return source


def validate_kind(kind: object) -> str:
    if isinstance(kind, str) and len(kind) > KIND_MAX:
        raise InvalidValue("kind", f"must be one lower-case word of at most {KIND_MAX} characters, not {len(kind)}")
    if not isinstance(kind, str) or not KIND_PATTERN.fullmatch(kind):
        raise InvalidValue("kind", f"{kind!r} must be one lower-case word (raw, summary, procedure_run, ...)")
    return kind


def validate_category(category: object, name: str = "category") -> str:
    """A fact's category, stripped: one short line. Checked before it goes into front matter, where a 50 MB value
    cost a minute of YAML before the size limit could say no."""
    if not isinstance(category, str) or not category.strip():
        raise InvalidValue(name, "must be one non-empty line")
    if len(category) > CATEGORY_MAX or any(ord(c) < 32 or ord(c) == 127 for c in category):
        raise InvalidValue(name, f"must be one line of at most {CATEGORY_MAX} characters, without control "
                                 f"characters ({len(category)} characters given)")
    return check_utf8(category, name).strip()


def unit_float(value: Any, name: str) -> float:
    """A number in 0..1 (importance, confidence). NaN and booleans are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        raise InvalidValue(name, f"must be a number between 0 and 1, not {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise InvalidValue(name, f"must be between 0 and 1, not {value}")
    return float(value)


def validate_tags(tags: object, name: str = "tags") -> list[str]:
    """A list of short one-line words. A string is refused (it would become one tag per letter)."""
    if tags is None:
        return []
    if isinstance(tags, (str, bytes)) or not isinstance(tags, (list, tuple)):
        raise InvalidValue(name, f"must be a list of words, not {type(tags).__name__} {tags!r:.60}")
    if len(tags) > TAGS_MAX:
        raise InvalidValue(name, f"at most {TAGS_MAX} tags, not {len(tags)}")
    out: list[str] = []
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag.strip():
            raise InvalidValue(f"{name}[{i}]", f"must be a non-empty word, not {tag!r:.60}")
        if len(tag) > TAG_MAX or any(ord(c) < 32 for c in tag):
            raise InvalidValue(f"{name}[{i}]", f"must be one line of at most {TAG_MAX} characters")
        check_utf8(tag, f"{name}[{i}]")
        if tag not in out:
            out.append(tag)
    return out


#: What one item of an append of several episodes may hold (``Episodes.append_many``).
EPISODE_ITEM_FIELDS = frozenset({"text", "kind", "at", "tags", "meta", "id", "source"})


def check_item_fields(item: dict[str, Any], name: str) -> None:
    """Refuse a field of an episode item that would be dropped without a word: a back-fill that names its time
    ``created_at``, as the line on disk does, was dated now (out of reach of retention)."""
    unknown = sorted(set(item) - EPISODE_ITEM_FIELDS)
    if unknown:
        hint = " (its time is 'at')" if "created_at" in unknown else ""
        raise InvalidValue(name, f"no field {', '.join(map(repr, unknown))}{hint}; an item holds "
                                 f"{', '.join(sorted(EPISODE_ITEM_FIELDS))}")


def check_episode_time(when: datetime, name: str = "at", *, now: datetime | None = None) -> datetime:
    """Episode times are from 1970 (ids are ULIDs) up to ``now`` plus :data:`MAX_FUTURE` of clock skew: an episode
    records what happened, and one dated in the future would outlive retention, lead every listing and look
    recent for ever (an untrusted source's way to stay on top)."""
    if when < EARLIEST:
        raise InvalidValue(name, f"{when.isoformat()} is before 1970; episode ids count milliseconds from 1970")
    if now is not None and when > now + MAX_FUTURE:
        raise InvalidValue(name, f"{when.isoformat()} is in the future (more than {int(MAX_FUTURE.total_seconds() // 60)}"
                                 f" minutes past this host's clock, {now.replace(microsecond=0).isoformat()}): an "
                                 "episode records what happened; give the time with its zone (…Z or +02:00)")
    return when


def check_json_value(value: Any, name: str, depth: int = 0) -> None:
    """Standard JSON only: no NaN or infinities (other tools cannot read them), string keys, bounded depth."""
    if depth > 20:
        raise InvalidValue(name, "nested deeper than 20 levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidValue(name, f"{value} is not valid JSON (use null or a string)")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidValue(name, f"object keys must be strings, not {key!r}")
            check_utf8(key, name)
            check_json_value(item, f"{name}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json_value(item, f"{name}[{i}]", depth + 1)
    elif isinstance(value, str):
        check_utf8(value, name)
    elif value is not None and not isinstance(value, (int, float, bool)):
        raise InvalidValue(name, f"{type(value).__name__} is not a JSON value")
