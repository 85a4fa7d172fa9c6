"""Facts: semantic memory. One markdown file per fact under ``facts/``, YAML front matter, found by key.

The file is the truth. Reading fills defaults for missing fields without rewriting the file. This store reads
files and *plans* writes (the new bytes of a file, see :class:`~memvault.rules.fsutil.FileChange`); it knows nothing of
git, trust or the index. The write gate (:mod:`memvault.core.gate`) applies a plan atomically, commits it, and puts the
old bytes back if the commit is refused.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from ..rules import frontmatter_edit as fm
from ..rules.errors import FactNotFound, FactParseError, InvalidKey, InvalidValue, LimitExceeded, MemvaultError, UnsafePath
from ..rules.fsutil import FileChange, entry_problem, inside_base, read_inside, read_inside_stat, walk
from ..rules.timeutil import format_time, parse_date, parse_time
from ..rules.trust import ACCEPTED_BY
from ..rules.validation import (Problem, check_utf8, unit_float, validate_category, validate_key, validate_source,
                                validate_tags)

log = logging.getLogger(__name__)

#: Lines git writes into a file it could not merge.
_CONFLICT_START, _CONFLICT_END = "<<<<<<< ", ">>>>>>> "
KNOWN_FIELDS = ("category", "importance", "confidence", "source", "tags", "created", "updated", "valid_until")
DEFAULT_IMPORTANCE = 0.5


def default_confidence(source: str | None) -> float:
    """Stated by a person 1.0, inferred by an agent 0.7, anything else (an observed pattern, a web page) 0.5.

    A hand-written file with no source is a person's statement.
    """
    if source is None or source.startswith("user:"):
        return 1.0
    if source.startswith("agent:"):
        return 0.7
    return 0.5


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
    #: Set by a write: near-duplicates and conflicts found among the facts, and what the caller should know.
    similar: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)
    warnings: list[str] = field(default_factory=list, repr=False, compare=False)
    #: Set by a write: why it became a proposal (None: the source is not trusted), and the memvault.toml
    #: ``auto_accept`` pattern that accepted it at once instead (None: no rule did).
    proposed_because: str | None = field(default=None, repr=False, compare=False)
    auto_accepted: str | None = field(default=None, repr=False, compare=False)

    @property
    def review_after(self) -> float | None:
        """This fact's own review period in seconds (front matter ``review_after: 90d``), if it sets one."""
        from ..rules.timeutil import parse_age

        value = self.extra.get("review_after")
        try:
            age = parse_age(str(value)) if value is not None else None
        except MemvaultError:
            return None
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


def conflict_markers(text: str) -> int | None:
    """The line of the first git conflict marker in ``text`` (a ``<<<<<<<`` line with its ``>>>>>>>``), or None.
    A lone ``=======`` is a markdown heading underline, not a conflict."""
    if _CONFLICT_START not in text:
        return None
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines, 1) if line.startswith(_CONFLICT_START) or line == _CONFLICT_START.strip()]
    if starts and any(line.startswith(_CONFLICT_END) or line == _CONFLICT_END.strip() for line in lines[starts[0]:]):
        return starts[0]
    return None


def parse_fact(key: str, path: Path, text: str, mtime: float | None = None) -> Fact:
    """Build a :class:`Fact` from a file's text. Raises :class:`FactParseError` naming path and line."""
    marker = conflict_markers(text)
    if marker is not None:
        raise FactParseError(path, "holds git conflict markers from an unfinished merge: keep one version, remove "
                                   "the <<<<<<< ======= >>>>>>> lines, then commit", marker)
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
            return unit_float(meta[name], name)
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
    """The ``facts/`` directory of a vault (and ``inbox/``, where proposals from untrusted sources wait)."""

    def __init__(self, root: Path, *, max_bytes: int | None = None) -> None:
        self.root = root
        self.dir = root / "facts"
        self.inbox_dir = root / "inbox"
        self.max_bytes = max_bytes

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
    def read_file(self, key: str, path: Path, *, inbox: bool | None = None, base_real: str | None = None) -> Fact:
        """The fact in ``path``. A symlink out of the folder or a special file raises UnsafePath, a missing file
        FactNotFound, anything unreadable or larger than ``max_bytes`` FactParseError. A listing passes whether
        ``path`` is in ``inbox/`` and its folder resolved (:func:`~memvault.rules.fsutil.inside_base`) once."""
        if inbox is None:
            inbox = self.inbox_dir in path.parents
        try:
            data, st = read_inside_stat(path, self.inbox_dir if inbox else self.dir, limit=self.max_bytes,
                                        base_real=base_real)
            mtime = st.st_mtime  # of the file read (a link inside the folder: its target, as os.stat followed it)
        except FileNotFoundError:
            raise FactNotFound(key) from None
        except UnsafePath as exc:
            raise FactParseError(path, exc.reason) from None
        except LimitExceeded:  # a file committed or edited past the limit: every page, tool and check read it whole
            raise FactParseError(path, f"{os.stat(path).st_size} bytes, more than [limits] fact_bytes "
                                       f"({self.max_bytes}) allows: not read (shorten it, or raise the limit in "
                                       "memvault.toml)") from None
        except OSError as exc:
            raise FactParseError(path, f"cannot read: {exc.strerror}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FactParseError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        fact = parse_fact(key, path, text, mtime)
        fact.quarantined = inbox
        return fact

    def get(self, key: str, *, inbox: bool = False) -> Fact:
        """The fact stored under ``key`` (or the proposal, with ``inbox``). Raises FactNotFound, InvalidKey or
        FactParseError."""
        try:
            return self.read_file(key, self.path_for(key, inbox=inbox))
        except FactNotFound:
            raise FactNotFound(f"inbox/{key}" if inbox else key) from None

    def exists(self, key: str, *, inbox: bool = False) -> bool:
        return self.path_for(key, inbox=inbox).is_file()

    def files(self, *, inbox: bool = False, problems: list[Problem] | None = None) -> list[tuple[str, Path]]:
        """Every fact file as (key, path), sorted by key. Names that are not valid keys, symlinks out of the
        folder and special files are reported in ``problems`` (or logged) and skipped."""
        directory = self.inbox_dir if inbox else self.dir
        base = os.path.realpath(directory)
        prefix = os.path.join(directory, "")  # the walk names each entry from it: its key is the rest, less .md
        found = []
        for entry in walk(directory, lambda path, reason: _report(problems, Problem(path, reason))):
            if not entry.name.endswith(".md"):
                continue
            path = Path(entry.path)
            problem = entry_problem(entry, base)
            if problem is not None:
                _report(problems, Problem(path, problem))
                continue
            try:  # key_for's answer without its Path arithmetic (a third of a listing's walk at 20,000 facts)
                key = validate_key(entry.path[len(prefix):-3].replace(os.sep, "/"))
            except InvalidKey:
                key = None
            if key is None:
                _report(problems, Problem(path, "not a valid fact key (segments of [a-z0-9][a-z0-9._-]*): skipped"))
                continue
            found.append((key, path))
        return sorted(found)

    def iter(self, problems: list[Problem] | None = None, *, inbox: bool = False) -> Iterator[Fact]:
        """Every readable fact. A file that fails to parse is added to ``problems`` (or logged) and skipped."""
        files = self.files(inbox=inbox, problems=problems)
        try:
            base_real = inside_base(self.inbox_dir if inbox else self.dir) if files else None
        except UnsafePath:
            base_real = None  # each read says why, as it did
        for key, path in files:
            try:
                yield self.read_file(key, path, inbox=inbox, base_real=base_real)
            except FactNotFound:
                continue  # deleted while we walked
            except FactParseError as exc:
                _report(problems, Problem(exc.path, exc.reason, exc.line))

    def list(self, category: str | None = None, tag: str | None = None,
             problems: list[Problem] | None = None) -> list[Fact]:
        """Facts filtered by category and/or tag, sorted by key."""
        return [f for f in self.iter(problems)
                if (category is None or f.category == category) and (tag is None or tag in f.tags)]

    def inbox(self, problems: list[Problem] | None = None) -> list[Fact]:
        """Facts proposed by untrusted sources, waiting for a person."""
        return list(self.iter(problems, inbox=True))

    # -- planning writes ----------------------------------------------------------------------------------
    def _current(self, path: Path) -> bytes | None:
        try:
            return read_inside(path, self.inbox_dir if self.inbox_dir in path.parents else self.dir)
        except FileNotFoundError:
            return None
        except UnsafePath as exc:
            raise InvalidKey(self.key_for(path) or path.name, exc.reason) from None

    def check_text(self, key: str, text: str) -> None:
        """LimitExceeded when the text alone is larger than the file may be: checked before any work on the text
        (the near-duplicate and contradiction checks read all of it)."""
        if self.max_bytes is not None and len(text) > self.max_bytes // 4:
            self._check_size(key, text.encode("utf-8"))

    def _check_size(self, key: str, data: bytes) -> bytes:
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise LimitExceeded(f"fact {key}", f"{len(data)} bytes, more than the {self.max_bytes} allowed "
                                               "([limits] fact_bytes): split it, or keep the bulk in a procedure")
        return data

    def proposal_slot(self, key: str, text: str) -> tuple[str, Fact | None]:
        """Where a proposal of ``text`` for ``key`` goes, so that no waiting proposal is replaced: ``inbox/KEY.md``
        when it is free or holds the same text, else the first ``KEY.<n>`` that is free or holds the same text (an
        alternative, which names ``proposes: KEY``). Returns the file's key and the proposal kept beside it."""
        first = None
        for n in range(1, 100):
            slot = key if n == 1 else f"{key}.{n}"
            validate_key(slot)
            path = self.path_for(slot, inbox=True)
            current = self._current(path)
            if current is None:
                return slot, first
            try:
                waiting = parse_fact(slot, path, current.decode("utf-8"))
            except (FactParseError, UnicodeDecodeError):
                waiting = None
            if waiting is not None and waiting.extra.get("proposes", key) == key:
                if waiting.text == text.strip():
                    return slot, None  # the same proposal again: updated in place
                first = first or waiting
        raise InvalidValue("key", f"99 proposals for {key} already wait in inbox/: review them first")

    def plan_set(self, key: str, text: str, *, source: str, at: datetime, proposal: bool = False,
                 category: str | None = None, importance: float | None = None, confidence: float | None = None,
                 tags: list[str] | None = None, valid_until: date | str | None = None,
                 extra: dict[str, Any] | None = None, slot: str | None = None) -> FileChange:
        """The change that creates or replaces fact ``key`` (in ``inbox/`` for a ``proposal``).

        On an existing fact the body is replaced, ``updated`` is bumped, ``source`` records the writer, and
        fields not given keep their value (unknown front-matter keys and comments included). A proposal to
        change an existing fact starts from that fact's file. ``extra`` adds other front-matter keys (such as an
        ingest candidate's ``claimed_source``). ``slot`` is the proposal's own file key when another proposal for
        ``key`` waits (see :meth:`proposal_slot`): it then names ``proposes: KEY``. Values are validated here,
        before anything is written.
        """
        path = self.path_for(slot or key, inbox=proposal)
        if proposal and slot and slot != key:
            extra = {**(extra or {}), "proposes": key}
        if not isinstance(text, str) or not text.strip():
            raise InvalidValue("text", "a fact needs some text")
        check_utf8(text, "text")
        changes: dict[str, Any] = {}
        if category is not None:
            changes["category"] = validate_category(category)
        if importance is not None:
            changes["importance"] = unit_float(importance, "importance")
        if confidence is not None:
            changes["confidence"] = unit_float(confidence, "confidence")
        if tags is not None:
            changes["tags"] = [t.strip() for t in validate_tags(tags)]
        if valid_until is not None:
            changes["valid_until"] = parse_date(valid_until, "valid_until")
        for name, value in (extra or {}).items():
            changes[name] = value
        # A person's acceptance vouched for the text they read: any other write of the fact drops it, and no
        # writer's ``extra`` claims it (only plan_accept writes it).
        changes[ACCEPTED_BY] = None
        stamp = at.replace(microsecond=0)
        before = self._current(path)
        base = before
        if base is None and proposal:
            base = self._current(self.path_for(key))  # a proposed change to an existing fact
        if base is not None:
            try:
                doc = fm.parse(base.decode("utf-8"))
            except (fm.FrontMatterError, UnicodeDecodeError) as exc:
                reason = getattr(exc, "reason", "not UTF-8 text")
                raise FactParseError(path, f"{reason} (fix it with 'memvault fact edit')",
                                     getattr(exc, "line", None)) from None
            changes["source"] = source
            changes["updated"] = stamp
        else:
            doc = fm.Document([], "")
            if confidence is None:
                changes["confidence"] = default_confidence(source)
            changes["source"] = source
            # A new fact is dated now, unless ``extra`` brings the times its source recorded (an import)
            changes.setdefault("created", stamp)
            changes.setdefault("updated", changes["created"])
            changes.setdefault("importance", DEFAULT_IMPORTANCE)
        new_doc = fm.update(doc, changes, list(KNOWN_FIELDS), text.strip() + doc.newline)
        after = self._check_size(key, new_doc.render().encode("utf-8"))
        parse_fact(key, path, after.decode("utf-8"))  # what is written must read back
        return FileChange(path, before, after)

    def plan_replace(self, key: str, text: str) -> FileChange:
        """The change that replaces the whole file of ``key`` with ``text`` (as from an editor), validated."""
        path = self.path_for(key)
        parse_fact(key, path, text)  # raises FactParseError before anything is written
        return FileChange(path, self._current(path), self._check_size(key, text.encode("utf-8")))

    def plan_update(self, fact: Fact, changes: dict[str, Any]) -> FileChange:
        """The change that sets front-matter fields of ``fact`` (a merge), its text and comments kept."""
        before = self._current(fact.path)
        if before is None:
            raise FactNotFound(fact.key)
        doc = fm.parse(before.decode("utf-8"))
        after = fm.update(doc, changes, list(KNOWN_FIELDS), doc.body).render().encode("utf-8")
        return FileChange(fact.path, before, self._check_size(fact.key, after))

    def plan_delete(self, key: str, *, inbox: bool = False) -> tuple[FileChange, Fact]:
        """The change that removes ``key`` (or its proposal), and the fact as it was (text empty if unreadable)."""
        path = self.path_for(key, inbox=inbox)
        before = self._current(path)
        if before is None:
            raise FactNotFound(f"inbox/{key}" if inbox else key)
        try:
            old = parse_fact(key, path, before.decode("utf-8"))
        except (FactParseError, UnicodeDecodeError):
            old = Fact(key=key, text="", path=path)
        old.quarantined = inbox
        return FileChange(path, before, None), old

    def plan_accept(self, key: str, *, supersedes: str | None = None,
                    accepted_by: str | None = None) -> tuple[list[FileChange], Fact]:
        """The changes that promote ``inbox/KEY.md`` to ``facts/KEY.md`` (or, for an alternative proposal that
        names ``proposes: OTHER``, to ``facts/OTHER.md`` without that line), and the proposal. ``supersedes``
        names the fact it replaces in other words (front matter ``supersedes: KEY``); the caller marks that one.
        ``accepted_by``: the reviewer, recorded as the front matter's ``accepted_by`` (what the proposal said
        there is never kept)."""
        removal, proposal = self.plan_delete(key, inbox=True)
        if not proposal.text:
            raise FactParseError(removal.path, "the proposal cannot be read; fix or reject it")
        data = removal.before
        assert data is not None
        target_key = proposal.extra.get("proposes")
        if target_key is not None:
            if not isinstance(target_key, str):
                raise FactParseError(removal.path, "proposes: must be the key of the fact it changes")
            validate_key(target_key)
            doc = fm.parse(data.decode("utf-8"))
            data = fm.update(doc, {"proposes": None}, list(KNOWN_FIELDS), doc.body).render().encode("utf-8")
        doc = fm.parse(data.decode("utf-8"))
        marks: dict[str, Any] = {ACCEPTED_BY: validate_source(accepted_by, "accepted_by") if accepted_by else None}
        if supersedes is not None:
            marks["supersedes"] = validate_key(supersedes)
        data = fm.update(doc, marks, list(KNOWN_FIELDS), doc.body).render().encode("utf-8")
        target = self.path_for(target_key or key)
        return [FileChange(target, self._current(target), data), removal], proposal


def _report(problems: list[Problem] | None, problem: Problem) -> None:
    if problems is not None:
        problems.append(problem)
    else:
        log.warning("%s", problem)
