"""Facts: semantic memory. One markdown file per fact under ``facts/``, YAML front matter, found by key.

The file is the truth. Reading fills defaults for missing fields without rewriting the file; a write changes
only what was asked (see :mod:`memvault.frontmatter_edit`), lands atomically, and is committed to git so the
old value is provably gone from the working tree yet kept in history.
"""
from __future__ import annotations

import fnmatch
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import frontmatter_edit as fm
from .errors import FactNotFound, FactParseError, InvalidKey, InvalidValue, MemvaultError, SecretRefused, UntrustedSource
from .fsutil import atomic_write
from .timeutil import format_time, now, parse_date, parse_time

if TYPE_CHECKING:
    from .gitstore import LogEntry
    from .vault import Vault

log = logging.getLogger(__name__)

KEY_MAX = 200
_SEGMENT = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
KNOWN_FIELDS = ("category", "importance", "confidence", "source", "tags", "created", "updated", "valid_until")
DEFAULT_IMPORTANCE = 0.5
SOURCE_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*:\S+$")


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid fact key, else raise :class:`InvalidKey` saying why."""
    if not isinstance(key, str) or not key:
        raise InvalidKey(str(key), "a key must not be empty")
    if "\0" in key:
        raise InvalidKey(key.replace("\0", "\\0"), "a key must not contain NUL")
    if len(key) > KEY_MAX:
        raise InvalidKey(key[:40] + "...", f"a key has at most {KEY_MAX} characters (this one has {len(key)})")
    if "\\" in key:
        raise InvalidKey(key, "use '/' between segments, not '\\'")
    if key.startswith("/"):
        raise InvalidKey(key, "a key is relative to facts/, not an absolute path")
    for segment in key.split("/"):
        if not segment:
            raise InvalidKey(key, "empty segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise InvalidKey(key, f"'{segment}' segments are not allowed")
        if not _SEGMENT.match(segment):
            raise InvalidKey(key, f"segment {segment!r} must match [a-z0-9][a-z0-9._-]* (lower case)")
    return key


def validate_source(source: str) -> str:
    if not isinstance(source, str) or not SOURCE_PATTERN.match(source):
        raise InvalidValue("source", f"{source!r} is not of the form <kind>:<name> (e.g. user:admin, agent:deployer)")
    return source


def refuse_secrets(text: str, what: str) -> None:
    """Raise :class:`SecretRefused` naming what looks like a secret in ``text``."""
    from .secrets import describe, find_secrets

    findings = find_secrets(text)
    if findings:
        raise SecretRefused(what, describe(findings))


def default_confidence(source: str | None) -> float:
    """Stated by a person 1.0, inferred by an agent 0.7, anything else (an observed pattern, a web page) 0.5.

    A hand-written file with no source is a person's statement.
    """
    if source is None or source.startswith("user:"):
        return 1.0
    if source.startswith("agent:"):
        return 0.7
    return 0.5


def _unit_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValue(name, f"must be a number between 0 and 1, not {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise InvalidValue(name, f"must be between 0 and 1, not {value}")
    return float(value)


@dataclass
class Fact:
    """One fact as read from disk, with defaults filled in for fields the file does not state."""

    key: str
    text: str
    path: Path
    category: str | None = None
    importance: float = DEFAULT_IMPORTANCE
    confidence: float = 1.0
    source: str | None = None
    tags: list[str] = field(default_factory=list)
    created: datetime | None = None
    updated: datetime | None = None
    valid_until: date | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: True for a proposal in ``inbox/`` (written by an untrusted source, not yet accepted by a person).
    quarantined: bool = False

    @property
    def review_after(self) -> float | None:
        """This fact's own review period in seconds (front matter ``review_after: 90d``), if it sets one."""
        from .timeutil import parse_age

        value = self.extra.get("review_after")
        age = parse_age(str(value)) if value is not None else None
        return age.total_seconds() if age else None

    def to_dict(self, root: Path | None = None) -> dict[str, Any]:
        """The stable JSON shape of a fact. ``path`` is relative to ``root`` when given."""
        path = self.path
        if root is not None:
            try:
                path = self.path.relative_to(root)
            except ValueError:
                pass
        return {
            "key": self.key,
            "text": self.text,
            "category": self.category,
            "importance": self.importance,
            "confidence": self.confidence,
            "source": self.source,
            "tags": list(self.tags),
            "created": format_time(self.created) if self.created else None,
            "updated": format_time(self.updated) if self.updated else None,
            "valid_until": self.valid_until.isoformat() if self.valid_until else None,
            "path": path.as_posix(),
        }


@dataclass(frozen=True)
class Problem:
    """A file that could not be read; listing goes on without it."""

    path: Path
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"


FactListener = Callable[[str, str, "Fact | None"], None]


def parse_fact(key: str, path: Path, text: str, mtime: float | None = None) -> Fact:
    """Build a :class:`Fact` from a file's text. Raises :class:`FactParseError` naming path and line."""
    try:
        doc = fm.parse(text)
    except fm.FrontMatterError as exc:
        raise FactParseError(path, exc.reason, exc.line) from None
    return _fact_from_doc(key, path, doc, mtime)


def _fact_from_doc(key: str, path: Path, doc: fm.Document, mtime: float | None) -> Fact:
    meta = doc.meta
    body = doc.body.strip()
    if not body:
        raise FactParseError(path, "the fact has no text after its front matter", len(doc.render().splitlines()) or 1)

    def bad(name: str, reason: str) -> FactParseError:
        return FactParseError(path, f"{name}: {reason}", doc.key_lines.get(name))

    def number(name: str, default: float) -> float:
        if name not in meta or meta[name] is None:
            return default
        try:
            return _unit_float(meta[name], name)
        except InvalidValue as exc:
            raise bad(name, exc.reason) from None

    def text_field(name: str) -> str | None:
        value = meta.get(name)
        if value is None:
            return None
        if isinstance(value, (dict, list)):
            raise bad(name, f"must be text, not {type(value).__name__}")
        return str(value)

    def time_field(name: str) -> datetime | None:
        value = meta.get(name)
        if value is None:
            return None
        try:
            return parse_time(value, name)
        except InvalidValue as exc:
            raise bad(name, exc.reason) from None

    source = text_field("source")
    tags_raw = meta.get("tags")
    if tags_raw is None:
        tags: list[str] = []
    elif isinstance(tags_raw, str):
        tags = [t.strip() for t in tags_raw.split(",") if t.strip()]
    elif isinstance(tags_raw, list) and all(isinstance(t, (str, int, float)) for t in tags_raw):
        tags = [str(t) for t in tags_raw]
    else:
        raise bad("tags", "must be a list of words, e.g. [postgres, backup]")
    valid_until = None
    if meta.get("valid_until") is not None:
        try:
            valid_until = parse_date(meta["valid_until"], "valid_until")
        except InvalidValue as exc:
            raise bad("valid_until", exc.reason) from None
    fallback = datetime.fromtimestamp(mtime, timezone.utc).replace(microsecond=0) if mtime is not None else None
    updated = time_field("updated")
    created = time_field("created")
    return Fact(
        key=key,
        text=body,
        path=path,
        category=text_field("category"),
        importance=number("importance", DEFAULT_IMPORTANCE),
        confidence=number("confidence", default_confidence(source)),
        source=source,
        tags=tags,
        created=created or updated or fallback,
        updated=updated or created or fallback,
        valid_until=valid_until,
        extra={k: v for k, v in meta.items() if k not in KNOWN_FIELDS},
    )


class FactStore:
    """The ``facts/`` directory of a vault. Reached as ``vault.facts``."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self.dir = vault.root / "facts"
        self.inbox_dir = vault.root / "inbox"
        self.listeners: list[FactListener] = []

    # -- paths -------------------------------------------------------------------------------------------
    def path_for(self, key: str, *, inbox: bool = False) -> Path:
        """The file of ``key``, refusing keys that break the rules or escape ``facts/`` through a symlink."""
        validate_key(key)
        directory = self.inbox_dir if inbox else self.dir
        path = directory / (key + ".md")
        base = directory.resolve()
        resolved = path.resolve()
        if resolved != base and base not in resolved.parents:
            raise InvalidKey(key, f"resolves outside {directory.name}/ (to {resolved})")
        return path

    def is_trusted(self, source: str | None) -> bool:
        """Whether ``source`` matches a ``[trust] trusted`` pattern (``user:*`` by default)."""
        if source is None:
            return True  # a file a person wrote by hand
        return any(fnmatch.fnmatchcase(source, pattern) for pattern in self.vault.lifecycle.trusted)

    def key_for(self, path: Path) -> str | None:
        """The key of a file under ``facts/`` (or ``inbox/``), or None if the file is not a fact file."""
        try:
            rel = path.relative_to(self.dir)
        except ValueError:
            try:
                rel = path.relative_to(self.inbox_dir)
            except ValueError:
                return None
        if path.suffix != ".md" or any(part.startswith(".") for part in rel.parts):
            return None
        key = rel.with_suffix("").as_posix()
        try:
            return validate_key(key)
        except InvalidKey:
            return None

    # -- reading -----------------------------------------------------------------------------------------
    def read_file(self, key: str, path: Path) -> Fact:
        try:
            st = path.stat()
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise FactNotFound(key) from None
        except UnicodeDecodeError as exc:
            raise FactParseError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise FactParseError(path, f"cannot read: {exc.strerror}") from None
        fact = parse_fact(key, path, text, st.st_mtime)
        fact.quarantined = self.inbox_dir in path.parents
        return fact

    def get(self, key: str) -> Fact:
        """The fact stored under ``key``. Raises FactNotFound, InvalidKey or FactParseError."""
        return self.read_file(key, self.path_for(key))

    def exists(self, key: str) -> bool:
        return self.path_for(key).is_file()

    def files(self, *, inbox: bool = False) -> Iterator[tuple[str, Path]]:
        """Every fact file as (key, path), sorted by key. Files whose names are not valid keys are skipped."""
        directory = self.inbox_dir if inbox else self.dir
        if not directory.is_dir():
            return
        found = []
        for dirpath, dirnames, filenames in os.walk(directory):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in filenames:
                if name.endswith(".md") and not name.startswith("."):
                    path = Path(dirpath) / name
                    key = self.key_for(path)
                    if key is not None:
                        found.append((key, path))
                    else:
                        log.warning("%s: not a valid fact key, skipped", path)
        yield from sorted(found)

    def iter(self, problems: list[Problem] | None = None, *, inbox: bool = False) -> Iterator[Fact]:
        """Every readable fact. A file that fails to parse is added to ``problems`` (or logged) and skipped."""
        for key, path in self.files(inbox=inbox):
            try:
                yield self.read_file(key, path)
            except FactNotFound:
                continue  # deleted while we walked
            except FactParseError as exc:
                problem = Problem(exc.path, exc.reason, exc.line)
                if problems is not None:
                    problems.append(problem)
                else:
                    log.warning("%s", problem)

    def list(
        self, category: str | None = None, tag: str | None = None, problems: list[Problem] | None = None
    ) -> list[Fact]:
        """Facts filtered by category and/or tag, sorted by key."""
        return [
            f
            for f in self.iter(problems)
            if (category is None or f.category == category) and (tag is None or tag in f.tags)
        ]

    # -- writing -----------------------------------------------------------------------------------------
    def set(
        self,
        key: str,
        text: str,
        *,
        category: str | None = None,
        importance: float | None = None,
        confidence: float | None = None,
        source: str | None = None,
        tags: list[str] | None = None,
        valid_until: date | str | None = None,
        message: str | None = None,
        allow_secret: bool = False,
    ) -> Fact:
        """Create or replace the fact ``key``.

        On an existing fact the body is replaced, ``updated`` is bumped, and fields not given keep their value
        (unknown front-matter keys and comments included). The write is atomic and committed to git with the key
        and the source in the commit. Returns the fact as now stored.

        A source outside ``[trust] trusted`` does not write ``facts/``: the fact lands in ``inbox/`` (same
        format) until a person accepts it, and ``fact.quarantined`` is true. Text that looks like a secret is
        refused unless ``allow_secret``: the vault is a git repository that gets pushed.
        """
        self.path_for(key)
        if not isinstance(text, str) or not text.strip():
            raise InvalidValue("text", "a fact needs some text")
        source = validate_source(source if source is not None else self.vault.default_source())
        if not allow_secret:
            refuse_secrets(text, f"fact {key}")
        quarantine = not self.is_trusted(source)
        path = self.path_for(key, inbox=quarantine)
        changes: dict[str, Any] = {}
        if category is not None:
            if not category.strip():
                raise InvalidValue("category", "must not be empty")
            changes["category"] = category
        if importance is not None:
            changes["importance"] = _unit_float(importance, "importance")
        if confidence is not None:
            changes["confidence"] = _unit_float(confidence, "confidence")
        if tags is not None:
            changes["tags"] = [t.strip() for t in tags if t.strip()]
        if valid_until is not None:
            changes["valid_until"] = parse_date(valid_until, "valid_until")
        with self.vault.write_lock():
            old_text = path.read_text(encoding="utf-8") if path.is_file() else None
            stamp = now().replace(microsecond=0)
            base_text = old_text
            if base_text is None and quarantine and self.path_for(key).is_file():
                base_text = self.path_for(key).read_text(encoding="utf-8")  # a proposed change to a fact
            if base_text is not None:
                try:
                    doc = fm.parse(base_text)
                except fm.FrontMatterError as exc:
                    raise FactParseError(path, exc.reason + " (fix it with 'memvault fact edit')", exc.line) from None
                changes["source"] = source
                changes["updated"] = stamp
            else:
                doc = fm.Document([], "")
                if confidence is None:
                    changes["confidence"] = default_confidence(source)
                changes.update(source=source, created=stamp, updated=stamp)
                changes.setdefault("importance", DEFAULT_IMPORTANCE)
            new_doc = fm.update(doc, changes, list(KNOWN_FIELDS), text.strip() + doc.newline)
            action = "propose" if quarantine else ("set" if old_text is None else "update")
            fact = self._write(key, path, new_doc.render(), old_text, message or f"fact {action} {key}", source)
        return fact

    def write_text(self, key: str, text: str, *, source: str | None = None, message: str | None = None,
                   allow_secret: bool = False) -> Fact:
        """Replace the whole file of ``key`` with ``text`` (as from an editor) after validating it."""
        path = self.path_for(key)
        source = validate_source(source if source is not None else self.vault.default_source())
        if not self.is_trusted(source):
            raise UntrustedSource(source, f"cannot edit facts/{key}.md directly; write with 'fact set' to propose")
        fact = parse_fact(key, path, text)  # raises FactParseError before anything is written
        if not allow_secret:
            refuse_secrets(fact.text, f"fact {key}")
        with self.vault.write_lock():
            old_text = path.read_text(encoding="utf-8") if path.is_file() else None
            if old_text == text:
                return self.read_file(key, path)
            return self._write(key, path, text, old_text, message or f"fact edit {key}", source)

    def _write(self, key: str, path: Path, content: str, old_text: str | None, message: str, source: str) -> Fact:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path_for(key)  # re-check: a directory on the way may have become a symlink
        atomic_write(path, content.encode("utf-8"))
        try:
            self.vault.commit([path], message, source=source, key=key)
        except MemvaultError:
            # The commit was refused (a hook, a broken repository): put the old file back so nothing is
            # left changed-but-unrecorded.
            if old_text is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write(path, old_text.encode("utf-8"))
            raise
        fact = self.read_file(key, path)
        if not fact.quarantined:
            self._notify("set", key, fact)
        return fact

    def delete(self, key: str, *, source: str | None = None, message: str | None = None) -> Fact:
        """Remove the fact ``key`` and commit the removal. Returns the fact as it was."""
        path = self.path_for(key)
        source = validate_source(source if source is not None else self.vault.default_source())
        if not self.is_trusted(source):
            raise UntrustedSource(source, f"cannot delete facts; a trusted source can ('memvault fact rm {key}')")
        with self.vault.write_lock():
            if not path.is_file():
                raise FactNotFound(key)
            old_bytes = path.read_bytes()
            try:
                old = parse_fact(key, path, old_bytes.decode("utf-8"))
            except (FactParseError, UnicodeDecodeError):
                old = Fact(key=key, text="", path=path)
            path.unlink()
            try:
                self.vault.commit([path], message or f"fact rm {key}", source=source, key=key)
            except MemvaultError:
                atomic_write(path, old_bytes)
                raise
            _prune_empty_dirs(path.parent, self.dir)
        self._notify("delete", key, None)
        return old

    # -- inbox -------------------------------------------------------------------------------------------
    def inbox(self, problems: list[Problem] | None = None) -> list[Fact]:
        """Facts proposed by untrusted sources, waiting for a person."""
        return list(self.iter(problems, inbox=True))

    def accept(self, key: str, *, source: str | None = None) -> Fact:
        """Promote ``inbox/KEY.md`` to ``facts/KEY.md`` in one commit; the acceptor must be trusted."""
        source = validate_source(source if source is not None else self.vault.default_source())
        if not self.is_trusted(source):
            raise UntrustedSource(source, "only a trusted source can accept a proposed fact")
        proposal_path = self.path_for(key, inbox=True)
        target = self.path_for(key)
        with self.vault.write_lock():
            if not proposal_path.is_file():
                raise FactNotFound(f"inbox/{key}")
            data = proposal_path.read_bytes()
            proposal = parse_fact(key, proposal_path, data.decode("utf-8"))
            old = target.read_bytes() if target.is_file() else None
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, data)
            proposal_path.unlink()
            try:
                self.vault.commit([target, proposal_path], f"fact accept {key} (proposed by {proposal.source})",
                                  source=source, key=key)
            except MemvaultError:
                atomic_write(proposal_path, data)
                if old is None:
                    target.unlink(missing_ok=True)
                else:
                    atomic_write(target, old)
                raise
            _prune_empty_dirs(proposal_path.parent, self.inbox_dir)
        fact = self.read_file(key, target)
        self._notify("set", key, fact)
        return fact

    def reject(self, key: str, *, source: str | None = None) -> Fact:
        """Drop ``inbox/KEY.md`` (committed, so the proposal stays in history)."""
        source = validate_source(source if source is not None else self.vault.default_source())
        if not self.is_trusted(source):
            raise UntrustedSource(source, "only a trusted source can reject a proposed fact")
        path = self.path_for(key, inbox=True)
        with self.vault.write_lock():
            if not path.is_file():
                raise FactNotFound(f"inbox/{key}")
            data = path.read_bytes()
            try:
                proposal = parse_fact(key, path, data.decode("utf-8"))
            except FactParseError:
                proposal = Fact(key=key, text="", path=path)
            path.unlink()
            try:
                self.vault.commit([path], f"fact reject {key} (proposed by {proposal.source})", source=source, key=key)
            except MemvaultError:
                atomic_write(path, data)
                raise
            _prune_empty_dirs(path.parent, self.inbox_dir)
        return proposal

    def history(self, key: str) -> list[LogEntry]:
        """The fact's git history, newest first, each entry with its diff."""
        path = self.path_for(key)
        return self.vault.git_log(path)

    def _notify(self, event: str, key: str, fact: Fact | None) -> None:
        for listener in self.listeners:
            listener(event, key, fact)


def _prune_empty_dirs(start: Path, stop: Path) -> None:
    current = start
    while current != stop and stop in current.parents:
        try:
            current.rmdir()
        except OSError:
            return
        current = current.parent
