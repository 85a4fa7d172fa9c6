"""Episodes: episodic memory. What happened, as append-only JSONL, one file per month.

Every line carries ``created_at`` and ``source`` so retention and purge-by-source can work. An append is one
``write(2)`` of a whole line under an exclusive lock on a separate lock file, into a file opened with
O_APPEND: concurrent appenders (agents, hooks, cron) never interleave or lose a line, and a rewrite by
temp + rename (prune) holding the same lock cannot strand a waiting appender on the old inode.
"""
from __future__ import annotations

import heapq
import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..rules import jsontext
from ..rules.errors import EpisodeError, InvalidValue, LimitExceeded, UnsafePath
from ..rules.fsutil import FileChange, entry_problem, lock_wait, locked, open_private, read_inside, walk
from ..rules.timeutil import format_time, now, parse_time
from ..rules.timeutil import now as clock
from ..rules.validation import (Problem, check_episode_time, check_json_value, check_utf8, validate_kind, validate_source,
                                validate_tags)
from .host_folders import HostFolders, chosen_host, host_folder

KNOWN_KINDS = ("raw", "summary", "procedure_run")
log = logging.getLogger(__name__)
_MONTH_FILE = re.compile(r"^(\d{4})-(\d{2})\.jsonl$")
_EPISODE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_id_lock = threading.Lock()
_last_id: tuple[int, int] = (0, 0)


def new_id(at: datetime | None = None) -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, Crockford base32, 26 characters.

    Sorts by time. Within one process and one millisecond the random part increments, so ids stay strictly
    increasing; across processes 80 random bits make a collision vanishingly unlikely.
    """
    global _last_id
    ms = int((at or now()).timestamp() * 1000)
    with _id_lock:
        last_ms, last_rand = _last_id
        if ms == last_ms and last_rand < (1 << 80) - 1:
            rand = last_rand + 1
        else:
            rand = secrets.randbits(80)
        _last_id = (ms, rand)
    value = (ms << 80) | rand
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def _json_bytes(value: Any) -> int:
    """Bytes ``value`` takes in an episode's line (JSON, UTF-8 as written)."""
    return len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8"))


@dataclass
class Episode:
    """One line of an episode file. ``to_dict`` is the line exactly as stored (key order included)."""

    id: str
    created_at: str
    source: str
    kind: str
    text: str
    tags: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    line: int | None = None
    raw: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def time(self) -> datetime:
        return parse_time(self.created_at, "created_at")

    def to_dict(self) -> dict[str, Any]:
        if self.raw is not None:
            return dict(self.raw)
        out: dict[str, Any] = {
            "id": self.id,
            "created_at": self.created_at,
            "source": self.source,
            "kind": self.kind,
            "text": self.text,
        }
        if self.tags:
            out["tags"] = list(self.tags)
        if self.meta:
            out["meta"] = dict(self.meta)
        return out


def parse_line(line: str, path: Path | None = None, lineno: int | None = None) -> Episode:
    """Validate one stored line. Raises :class:`EpisodeError` naming file and line."""

    def bad(reason: str) -> EpisodeError:
        return EpisodeError(reason, path, lineno)

    # An editor that saves with a byte-order mark (Windows) puts one before the first line: read past it, as a
    # fact's front matter is, rather than lose that line to "not valid JSON at column 1".
    line = line.removeprefix("\ufeff")
    try:
        # standard JSON only: a NaN put in by hand was exported as it was, and the export could not be imported
        data = jsontext.parse(line, pairs=jsontext.unique_pairs, standard=True)
    except json.JSONDecodeError as exc:
        raise bad(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # nested too deep: one bad line, not the end of the reading
        raise bad(str(exc)) from None
    if not isinstance(data, dict):
        raise bad("a line must be a JSON object")
    for name in ("id", "created_at", "source", "text"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise bad(f"missing or empty '{name}'")
    try:
        parse_time(data["created_at"], "created_at")
    except InvalidValue as exc:
        raise bad(exc.reason) from None
    tags = data.get("tags") or []
    meta = data.get("meta") or {}
    if not isinstance(tags, list) or not isinstance(meta, dict):
        raise bad("'tags' must be a list and 'meta' an object")
    return Episode(
        id=data["id"],
        created_at=data["created_at"],
        source=data["source"],
        kind=str(data.get("kind") or "raw"),
        text=data["text"],
        tags=[str(t) for t in tags],
        meta=meta,
        path=path,
        line=lineno,
        raw=data,
    )


@dataclass
class RewriteReport:
    """What a rewrite removes, per kind (lines kept, lines removed, bytes freed), and the file changes to make."""

    kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    removed: list[Episode] = field(default_factory=list)
    changes: list[FileChange] = field(default_factory=list)
    unreadable: int = 0
    #: Episodes removed, named in ``removed`` or not (see :meth:`EpisodeLog.plan_rewrite`).
    lines_removed: int = 0
    #: What the caller should know once the rewrite is applied (an index that could not be told, ...).
    warnings: list[str] = field(default_factory=list)

    @property
    def files_changed(self) -> list[Path]:
        return [c.path for c in self.changes]

    @property
    def files_deleted(self) -> list[Path]:
        return [c.path for c in self.changes if c.after is None]

    def count(self, kind: str, *, removed: bool, size: int) -> None:
        entry = self.kinds.setdefault(kind, {"kept": 0, "removed": 0, "bytes_freed": 0})
        if removed:
            entry["removed"] += 1
            entry["bytes_freed"] += size
        else:
            entry["kept"] += 1

    def to_dict(self, root: Path) -> dict[str, Any]:
        return {
            "kinds": self.kinds,
            "removed": self.lines_removed,
            "bytes_freed": sum(k["bytes_freed"] for k in self.kinds.values()),
            "files_changed": [p.relative_to(root).as_posix() for p in self.files_changed],
            "files_deleted": [p.relative_to(root).as_posix() for p in self.files_deleted],
            "unreadable_lines_kept": self.unreadable,
            "warnings": list(self.warnings),
        }


class EpisodeLog:
    """The ``episodes/`` directory of a vault: month files, appended under a lock, read line by line.

    With ``per_host`` (episodes tracked in git) each clone appends to its own sub-folder, so clones sharing a remote
    never append to the same file: ``[episodes] host`` or ``MEMVAULT_HOST`` when set (the person's choice), else the
    hostname and a random id drawn once and kept in ``folders`` (:class:`HostFolders`, in the local state), since
    two laptops or containers often share a hostname.
    """

    def __init__(self, root: Path, lock_path: Path, *, fsync: bool = True, per_host: bool = False,
                 host: str | None = None, max_bytes: int | None = None, folders: Path | None = None) -> None:
        self.root = root
        self.dir = root / "episodes"
        self.lock_path = lock_path
        self.fsync = fsync
        self.per_host = per_host
        self._host = host
        self.max_bytes = max_bytes
        #: This clone's own folders, in its local state (None: a log with no state, which writes by hostname).
        self.folders = HostFolders(folders, self.dir, lock_path) if folders is not None else None

    @property
    def host(self) -> str | None:
        """This host's folder when episodes are per host, else None."""
        if not self.per_host:
            return None
        explicit = chosen_host(self._host)
        if explicit is not None or self.folders is None:
            return host_folder(explicit)
        return self.folders.current()

    @property
    def named(self) -> bool:
        """Whether the person chose this host's folder (``[episodes] host`` or ``MEMVAULT_HOST``)."""
        return chosen_host(self._host) is not None

    def own_folders(self) -> set[str]:
        """The host folders this clone writes or wrote (its current one, and those its local state names); empty
        when episodes are not per host."""
        host = self.host
        if host is None:
            return set()
        return {host, *self.folders.known()} if self.folders is not None else {host}

    def lock(self) -> Any:
        """The append lock: held by every append, and by rewrites and sync for their whole duration."""
        if self.folders is not None and not self.named:
            # Settle this clone's folder before the lock file can exist: its presence tells an older memvault's
            # clone (see HostFolders.current), so no lock this version takes may stand in for that evidence. Also
            # with episodes untracked: a clone that turned tracking on later took a same-named laptop's
            # episodes/<hostname>/ for its own, and pruned it.
            self.folders.current()
        return locked(self.lock_path, wait=lock_wait())

    def file_for(self, at: datetime) -> Path:
        """``episodes/YYYY-MM.jsonl``; with a host folder, ``episodes/<host>/YYYY-MM.jsonl``."""
        name = f"{at.year:04d}-{at.month:02d}.jsonl"
        host = self.host
        return self.dir / host / name if host else self.dir / name

    def files(self, problems: list[Problem] | None = None) -> list[Path]:
        """Every episode file, in time order (``YYYY-MM.jsonl``, also in per-host sub-folders). Symlinks out
        of ``episodes/`` and special files are reported and skipped."""
        base = os.path.realpath(self.dir)
        found = []
        for entry in walk(self.dir, lambda path, reason: _report(problems, Problem(path, reason))):
            if entry.name.endswith(".jsonl"):
                problem = entry_problem(entry, base)
                if problem is None:
                    found.append(Path(entry.path))
                else:
                    _report(problems, Problem(Path(entry.path), problem))
        return sorted(found, key=lambda p: (p.name, p.as_posix()))

    # -- writing -----------------------------------------------------------------------------------------
    def make(self, text: str, *, source: str, kind: str = "raw", at: datetime | str | None = None,
             tags: list[str] | None = None, meta: dict[str, Any] | None = None,
             now: datetime | None = None, id: str | None = None) -> tuple[Episode, bytes]:
        """Validate an episode and render its line; nothing is written. Raises InvalidValue naming the field.
        ``now`` is this host's clock: an episode is what happened, so it is not dated past it (beyond skew).
        ``id`` keeps an existing episode's id (a vault restored from its export); by default a new ULID."""
        if id is not None and (not isinstance(id, str) or not _EPISODE_ID.match(id)):
            raise InvalidValue("id", f"{id!r} is not an episode id (letters, digits, '.', '_', ':', '-'; at most 100)")
        if not isinstance(text, str) or not text.strip():
            raise InvalidValue("text", "an episode needs some text")
        check_utf8(text, "text")
        validate_source(source)
        validate_kind(kind)
        current = now or clock()
        when = check_episode_time(parse_time(at, "at") if at is not None else current, now=current)
        tags = validate_tags(tags)
        if meta is not None and not isinstance(meta, dict):
            raise InvalidValue("meta", "must be a JSON object")
        check_json_value(meta or {}, "meta")
        episode = Episode(id=id or new_id(when), created_at=format_time(when), source=source, kind=kind, text=text,
                          tags=tags, meta=dict(meta or {}))
        try:
            line = json.dumps(episode.to_dict(), ensure_ascii=False, allow_nan=False, separators=(", ", ": ")) + "\n"
        except (TypeError, ValueError) as exc:
            raise InvalidValue("meta", f"not JSON-serialisable: {exc}") from None
        data = line.encode("utf-8")
        if self.max_bytes is not None and len(data) > self.max_bytes:
            # Named after the argument the caller gave that takes most of the line (the CLI's TEXT or --meta, the
            # MCP tool's and the Python API's text or meta): "episode" told nobody what to shorten.
            at_fault = "meta" if _json_bytes(episode.meta) > _json_bytes(text) else "text"
            raise LimitExceeded(at_fault, f"the episode's line is {len(data)} bytes, more than the {self.max_bytes} "
                                          "allowed ([limits] episode_bytes): store a summary, or the bulk as a file")
        episode.path = self.file_for(when)
        return episode, data

    def append_line(self, path: Path, data: bytes) -> Path:
        """Append one rendered line (see :meth:`make`) as one ``write(2)`` under the append lock; the file written.

        With a folder per host the folder is this clone's at the time the lock is held, not when the line was made:
        a sync in another process may have drawn a new one meanwhile (its old folder is another clone's too), and a
        line put there after the draw met that clone's lines in one file again."""
        with self.lock():
            if self.per_host and path.parent.parent == self.dir:
                path = self.dir / str(self.host) / path.name
            # Never through a link: not the month file, nor episodes/ or a host folder on the way to it.
            fd = open_private(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    # The last line was torn (power loss, a killed writer, a hand edit): end it, so this line
                    # stays whole and readable; the torn one is reported when read, never silently dropped.
                    data = b"\n" + data
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        return path

    def own_files(self, idle: float, at: datetime) -> list[Path]:
        """The files this host keeps (prunes): all of them, or with a folder per host its own folders' (see
        :meth:`own_folders`), the files outside any host folder, and the folders of hosts idle for more than ``idle``
        seconds (gone, or never back). Another host's live folder is its own: two hosts pruning one file a day apart
        conflicted at every sync, and one teammate's committed secret line stopped every host's prune."""
        files = self.files()
        if not self.per_host:
            return files
        folders = {p: p.relative_to(self.dir).parts[0] if p.parent != self.dir else "" for p in files}
        newest: dict[str, float] = {}
        for path, folder in folders.items():
            try:
                newest[folder] = max(newest.get(folder, 0.0), path.stat().st_mtime)
            except OSError:
                continue
        cutoff = at.timestamp() - idle
        own = self.own_folders() | {""}
        keep = {f for f, t in newest.items() if f in own or t < cutoff}
        return [p for p in files if folders[p] in keep]

    def plan_rewrite(self, drop: Callable[[Episode], bool], files: list[Path] | None = None, *,
                     keep_removed: bool = True) -> RewriteReport:
        """The changes that remove every episode for which ``drop`` is true, keeping everything else byte for byte
        (in ``files``, by default every file). ``keep_removed``: name each episode removed in ``report.removed`` (a
        purge names them); without it they are only counted (a prune of a month of millions of lines: each parsed
        episode kept took ~1.5 KB, nine times its line).

        Call it holding :meth:`lock` until the changes are applied, so no append lands in between. Lines that
        cannot be parsed are kept (and counted): a torn line is evidence, not garbage. A file left empty is
        deleted. A file costs its bytes and the bytes it keeps: the lines kept are views of the file's bytes,
        joined once.
        """
        report = RewriteReport()
        for path in self.files() if files is None else files:
            try:
                data = read_inside(path, self.dir)
            except (FileNotFoundError, UnsafePath):
                continue
            view = memoryview(data)
            kept: list[Any] = []  # runs of whole kept lines (views) and the line ends a last line lacked
            run = removed_bytes = 0  # the kept run starts at ``run``
            lineno = 0
            for start, end in _line_spans(data):
                lineno += 1
                raw = data[start:end]
                if not raw.strip():
                    continue
                try:
                    episode = parse_line(raw.decode("utf-8"), path, lineno)
                except (EpisodeError, UnicodeDecodeError):
                    report.unreadable += 1
                    episode = None
                if episode is not None and drop(episode):
                    report.count(episode.kind, removed=True, size=len(raw))
                    report.lines_removed += 1
                    if keep_removed:
                        report.removed.append(episode)
                    removed_bytes += len(raw)
                    kept.append(view[run:start])
                    run = end
                    continue
                if episode is not None:
                    report.count(episode.kind, removed=False, size=0)
                if not raw.endswith(b"\n"):
                    kept += [view[run:end], b"\n"]
                    run = end
            if removed_bytes:
                kept.append(view[run:])
                after = b"".join(kept)
                report.changes.append(FileChange(path, data, after if after.strip() else None))
            del kept, view
        return report

    # -- reading -----------------------------------------------------------------------------------------
    def iter(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        source: str | None = None,
        kind: str | None = None,
        problems: list[Problem] | None = None,
        files: list[Path] | None = None,
    ) -> Iterator[Episode]:
        """Episodes in file order (time order for lines appended as they happened), filtered.

        ``source`` matches exactly, or as a prefix when it ends in ``*`` (``web:*``). An unreadable line is
        added to ``problems`` (or logged) with its file and line number, and skipped. ``files``: only these
        (from :meth:`files`).
        """
        for path in self.files(problems) if files is None else files:
            if _outside(month_of(path), since, until):
                continue
            for episode in self.read_file(path, problems):
                if _matches(episode, since, until, source, kind):
                    yield episode

    def read_file(self, path: Path, problems: list[Problem] | None = None, *, start: int = 0) -> Iterator[Episode]:
        """The episodes of one file (from byte ``start``, which must begin a line). Bad lines go to ``problems``."""
        data = self.read_bytes(path, problems)
        if data is not None:
            yield from parse_lines(data, path, problems, start=start)

    def read_bytes(self, path: Path, problems: list[Problem] | None = None) -> bytes | None:
        """The bytes of one episode file, or None when it is gone or not safe to read (said in ``problems``)."""
        try:
            return read_inside(path, self.dir)
        except FileNotFoundError:
            return None
        except UnsafePath as exc:
            _report(problems, Problem(path, exc.reason))
            return None

    def find(self, path: Path, episode_id: str, data: bytes | None = None) -> Episode | None:
        """The episode ``episode_id`` as the file ``path`` (or its bytes ``data``) holds it now, or None. Only the
        lines that hold the id are parsed (a month of 100,000 lines is searched as bytes)."""
        if not episode_id:
            return None
        if data is None:
            data = self.read_bytes(path)
            if data is None:
                return None
        needle = episode_id.encode()
        at = data.find(needle)
        while at != -1:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end == -1 else end
            for episode in parse_lines(data[start:end], path):
                if episode.id == episode_id:
                    return episode
            at = data.find(needle, end)
        return None

    def has(self, episode_id: str) -> bool:
        """Whether an episode with this id is stored: only the month files of the time its ULID holds are read."""
        return self.path_of(episode_id) is not None

    def path_of(self, episode_id: str) -> Path | None:
        """The file holding the episode with this id, or None (the month files of its ULID's time are read)."""
        if not isinstance(episode_id, str) or len(episode_id) != 26 or any(c not in _CROCKFORD for c in episode_id):
            return None
        ms = 0
        for c in episode_id[:10]:
            ms = ms * 32 + _CROCKFORD.index(c)
        try:
            at = datetime.fromtimestamp(ms / 1000, timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
        name = f"{at.year:04d}-{at.month:02d}.jsonl"
        for path in self.files():
            if path.name == name:
                try:
                    data = read_inside(path, self.dir)
                except (OSError, UnsafePath):
                    continue
                if self.find(path, episode_id, data) is not None:  # only the lines holding the id are parsed
                    return path
        return None

    def list(self, *, limit: int | None = None, keep: Callable[[Episode], bool] | None = None,
             **filters: Any) -> list[Episode]:
        """Like :meth:`iter`, as a list; with ``limit`` the newest ``limit`` episodes (of those ``keep`` takes),
        oldest first. With a limit the month files are read newest month first, and no older month once the limit
        is filled (a line is in the file of its own month; a file named otherwise is always read). Within a file
        the lines are parsed from its end until the limit is filled; of the lines before, only those whose time
        could reach the page are parsed (see :class:`_Page`): the same episodes as parsing every line, for the
        parsing of the page and a scan of the file's bytes. A bad line among those passed over is not reported (as
        in a month not read)."""
        if limit is not None and limit < 0:
            raise InvalidValue("limit", "must not be negative")
        if limit == 0:
            return []
        if not limit:
            items = [e for e in self.iter(**filters) if keep is None or keep(e)]
            items.sort(key=lambda e: (e.time, e.id))
            return items
        problems = filters.pop("problems", None)
        since, until = filters.get("since"), filters.get("until")
        groups: dict[tuple[int, int] | None, list[Path]] = {None: []}  # None: files not named for a month
        for path in self.files(problems):
            groups.setdefault(month_of(path), []).append(path)
        page = _Page(limit, keep, **filters)
        for order, month in enumerate([None, *sorted((m for m in groups if m is not None), reverse=True)]):
            if month is not None and len(page) >= limit:
                break
            if _outside(month, since, until):
                continue  # as iter: a month file outside since/until is not read
            for number, path in enumerate(groups[month]):
                data = self.read_bytes(path, problems)
                if data is not None:
                    page.read(data, path, (order, number), problems)
        return page.newest()


#: The first block of lines :class:`_Page` scans back through before its bound can rise (each next one is double).
SCAN_BLOCK = 1 << 16


class _Page:
    """The newest ``limit`` episodes of the files read so far, exactly as parsing every line of them finds them.

    A file is parsed from its last line back until the page is full. Of the lines before, only those a scan of the
    bytes cannot prove older than the page's oldest episode (to the second) are parsed: a line holding a ``\\u``
    escape (it could spell the key another way), or a ``"created_at"`` key whose value is not a plain UTC time
    (``YYYY-MM-DDTHH:MM:SS[.fff]Z``, the form memvault writes) before that second. The scan runs back in blocks
    that double, its bound rising as newer lines join the page, so lines appended out of time order (an import, a
    file per host for one month) cost the lines that could reach the page. A line with no ``created_at`` key is
    not an episode and is passed over unreported (as a month not read is). A file with a carriage return (which
    also ends a line when lines are counted) is parsed whole. Ties keep file and line order."""

    def __init__(self, limit: int, keep: Callable[[Episode], bool] | None, *, since: datetime | None = None,
                 until: datetime | None = None, source: str | None = None, kind: str | None = None) -> None:
        self.limit, self.keep = limit, keep
        self.since, self.until, self.source, self.kind = since, until, source, kind
        self.found: list[tuple[datetime, str, tuple[int, int, int], Episode]] = []
        self.top: list[datetime] = []  # a heap of the ``limit`` latest times found: top[0] is the page's oldest

    def __len__(self) -> int:
        return len(self.found)

    def read(self, data: bytes, path: Path, where: tuple[int, int], problems: list[Problem] | None) -> None:
        bad: list[Problem] = []  # reported in line order, as parse_lines would
        if b"\r" in data:
            for number, raw in enumerate(data.splitlines(), 1):
                self._take(raw, path, (*where, number), bad)
        else:
            self._read_back(data, path, where, bad)
        for problem in sorted(bad, key=lambda p: p.line or 0):
            _report(problems, problem)

    def _read_back(self, data: bytes, path: Path, where: tuple[int, int], bad: list[Problem]) -> None:
        number = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)  # as splitlines counts
        end = len(data) - 1 if data.endswith(b"\n") else len(data)  # where line ``number`` ends
        while number > 0 and len(self.found) < self.limit:
            start = data.rfind(b"\n", 0, end) + 1
            self._take(data[start:end], path, (*where, number), bad)
            end, number = start - 1, number - 1
        block, anchor = SCAN_BLOCK, (end, number)  # position anchor[0] is on line anchor[1]
        while end > 0:  # data[:end] holds the lines before: a block of whole lines at a time, back from the end
            start = data.rfind(b"\n", 0, max(0, end - block)) + 1
            chunk = data[start:end]
            at = {chunk.rfind(b"\n", 0, m.start()) + 1 for m in _late(self._floor()).finditer(chunk)}
            if b"\\" in chunk:
                at.update(chunk.rfind(b"\n", 0, m.start()) + 1 for m in _ESCAPE.finditer(chunk))
            if at:  # lines are counted only where one is parsed, back from the last place counted
                line = anchor[1] - data.count(b"\n", start, anchor[0])
                anchor, counted = (start, line), 0
                for begin in sorted(at):
                    line += chunk.count(b"\n", counted, begin)
                    counted = begin
                    stop = chunk.find(b"\n", begin)
                    self._take(chunk[begin:stop if stop >= 0 else len(chunk)], path, (*where, line), bad)
            end, block = start - 1, block * 2

    def _take(self, raw: bytes, path: Path, where: tuple[int, int, int], bad: list[Problem]) -> None:
        if not raw.strip():
            return
        episode = _parsed(raw, path, where[2])
        if isinstance(episode, Problem):
            bad.append(episode)
            return
        if not _matches(episode, self.since, self.until, self.source, self.kind):
            return
        if self.keep is None or self.keep(episode):
            t = episode.time
            self.found.append((t, episode.id, where, episode))
            heapq.heappush(self.top, t)
            if len(self.top) > self.limit:
                heapq.heappop(self.top)

    def _floor(self) -> bytes:
        """``YYYY-MM-DDTHH:MM:SS``, the second of the page's oldest episode: a plain time of an earlier second is
        older than every episode of the page (a fraction is cut to the microsecond when parsed, never rounded)."""
        at = self.top[0]
        return (f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}:{at.minute:02d}:{at.second:02d}"
                .encode())

    def newest(self) -> list[Episode]:
        self.found.sort(key=lambda f: (f[0], f[1], f[2]))
        return [f[3] for f in self.found[-self.limit:]]


#: A ``\\u`` escape (a backslash before it escaped: counted too, which only parses a line more).
_ESCAPE = re.compile(rb"\\u")


@lru_cache(maxsize=64)
def _late(floor: bytes) -> re.Pattern[bytes]:
    """A ``"created_at"`` key whose value is not a plain UTC time of a second before ``floor``: the start of a line
    that must be parsed. The times before ``floor`` as a pattern: at the first character that differs, a smaller
    digit (the text of a plain time sorts as its time). Hour 24 is never earlier: Python 3.14 reads ``T24:00:00`` as
    the next day's midnight, whose text sorts before that day's ``T00``."""
    shape = "dddd-dd-ddTdd:dd:dd"
    branches = []
    for i, c in enumerate(shape):
        if c == "d" and floor[i] > ord("0"):
            rest = "".join(r"\d" if x == "d" else x for x in shape[i + 1:])
            branches.append(re.escape(floor[:i].decode()) + f"[0-{chr(floor[i] - 1)}]" + rest)
    earlier = "|".join(branches) or "(?!)"
    return re.compile(rf'"created_at"[ \t]*:[ \t]*"(?!{_HOUR}(?:{earlier})(?:\.\d{{1,9}})?Z")'.encode())


#: A plain time's hour as the clock shows it (00-23): only such a time's text sorts as its time.
_HOUR = r"(?=\d{4}-\d\d-\d\dT(?:[01]\d|2[0-3]))"


def _line_spans(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each line of ``data``, its line end included, where ``bytes.splitlines`` splits (``\\n``,
    ``\\r\\n``, ``\\r``), without a list of every line."""
    if b"\r" in data:
        at = 0
        for raw in data.splitlines(keepends=True):
            yield at, at + len(raw)
            at += len(raw)
        return
    start, size = 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        end = size if end < 0 else end + 1
        yield start, end
        start = end


def month_of(path: Path) -> tuple[int, int] | None:
    """(year, month) of a month file's name (``2026-12.jsonl``), None for any other name."""
    m = _MONTH_FILE.match(path.name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_lines(data: bytes, path: Path, problems: list[Problem] | None = None, *,
                start: int = 0) -> Iterator[Episode]:
    """The episodes in the bytes of an episode file (from byte ``start``); bad lines go to ``problems``."""
    lineno = data.count(b"\n", 0, start)
    for raw in data[start:].splitlines():
        lineno += 1
        if not raw.strip():
            continue
        episode = _parsed(raw, path, lineno)
        if isinstance(episode, Problem):
            _report(problems, episode)
        else:
            yield episode


def _parsed(raw: bytes, path: Path, lineno: int) -> Episode | Problem:
    """One stored line as its episode, or the problem that it is not one (named by file and line)."""
    try:
        return parse_line(raw.decode("utf-8"), path, lineno)
    except UnicodeDecodeError:
        return Problem(path, "not UTF-8 text", lineno)
    except EpisodeError as exc:
        return Problem(path, exc.reason, lineno)


def _outside(month: tuple[int, int] | None, since: datetime | None, until: datetime | None) -> bool:
    """Whether a month file (its month; None: a file named otherwise) holds no time from ``since`` to ``until``."""
    return month is not None and ((since is not None and month < (since.year, since.month))
                                  or (until is not None and month > (until.year, until.month)))


def _matches(episode: Episode, since: datetime | None, until: datetime | None, source: str | None,
             kind: str | None) -> bool:
    """Whether ``episode`` passes a listing's filters (``source`` as :func:`source_matches` reads it)."""
    if kind is not None and episode.kind != kind:
        return False
    if source is not None and not source_matches(source, episode.source):
        return False
    if since is not None or until is not None:
        t = episode.time
        if (since is not None and t < since) or (until is not None and t > until):
            return False
    return True


def merge_lines(base: bytes, ours: bytes, theirs: bytes) -> tuple[bytes, bytes] | None:
    """One month file changed on two sides (two clones appended to one folder; a purge or a prune met another's
    appends), as lines: ``ours`` less the lines ``theirs`` removed from ``base``, and apart the lines ``theirs``
    added that ``ours`` does not hold (in ``theirs``' order), for the caller to put after them or elsewhere. A line
    removed on either side (a purged secret, a pruned one) never comes back; none is written twice (a line is an
    episode with its own id).

    Lines are also matched by episode id, since an episode edited in place (a redacted secret) is a new line with an
    old id: an episode one side removed is not brought back by the other side's edit of it (the purge stands), and
    None when both sides changed one episode differently (two redactions, a redaction and a typo fix): which text
    may hold the secret cannot be told from the bytes, so the caller leaves the conflict to the person."""
    old = {key for key, _ in _lines(base)}
    mine = _lines(theirs)
    gone = old - {key for key, _ in mine}
    there = _lines(ours)
    have = {key for key, _ in there}
    id_of = {key: line_id(key) for key in old | have | {key for key, _ in mine}}  # each line parsed once
    base_ids = _line_ids(old, id_of)
    gone_ids = base_ids - _line_ids((key for key, _ in mine), id_of)  # episodes removed here: their edits there go
    ours_new = {id_of[key]: key for key in have - old}
    removed_there = base_ids - _line_ids(have, id_of)  # episodes removed there: their edits here do not come back
    kept = b"".join(raw for key, raw in there if key not in gone and id_of[key] not in gone_ids)
    added: list[bytes] = []
    for key, raw in mine:
        if key not in old and key not in have:
            episode = id_of[key]
            if episode is not None and ours_new.get(episode, key) != key:
                return None  # one episode given a different new text on each side
            if episode is None or episode not in removed_there:
                added.append(raw)
            have.add(key)
    return kept, b"".join(added)


def _lines(data: bytes) -> list[tuple[bytes, bytes]]:
    """The non-blank lines of a file as (text without its line end, bytes to write): a line keeps its own end
    (CRLF stays CRLF, untouched lines are written back as they were); a last line without one is given ``\\n``.
    Split where :func:`parse_lines` splits, so a merge sees the lines a reader sees."""
    out = []
    for raw in data.splitlines(keepends=True):
        key = raw.rstrip(b"\r\n")
        if key.strip():
            out.append((key, raw if raw.endswith((b"\n", b"\r")) else raw + b"\n"))
    return out


def line_id(line: bytes) -> str | None:
    """The episode id of a stored line, or None (not JSON, no id: such a line is matched by its bytes only)."""
    if b'"id"' not in line:
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    episode = data.get("id") if isinstance(data, dict) else None
    return episode if isinstance(episode, str) else None


def _line_ids(lines: Any, id_of: dict[bytes, str | None] | None = None) -> set[str]:
    """The episode ids of ``lines`` (their texts), read from ``id_of`` when given (each line parsed once)."""
    ident = line_id if id_of is None else id_of.__getitem__
    return {i for i in map(ident, lines) if i is not None}


def new_lines(before: bytes, after: bytes) -> bool:
    """Whether ``after`` (a month file's bytes) holds an episode ``before`` did not (see :func:`split_new`)."""
    return bool(split_new(before, after)[1])


def split_new(before: bytes, after: bytes) -> tuple[bytes, bytes]:
    """``after`` (a month file's bytes) as the lines it shares with ``before`` and apart, the episodes new to it: a
    line with an id ``before`` does not hold, or a line without an id that ``before`` does not hold as it is. A line
    only edited (a redaction keeps its id) is no new one. The first part keeps its bytes as they were (blank lines
    too); a new last line without a line end is given ``\\n``."""
    old = _lines(before)
    ids, texts = _line_ids(key for key, _ in old), {key for key, _ in old}
    kept: list[bytes] = []
    new: list[bytes] = []
    for raw in after.splitlines(keepends=True):  # split where _lines splits
        key = raw.rstrip(b"\r\n")
        episode = line_id(key) if key.strip() else None
        if key.strip() and ((episode not in ids) if episode is not None else (key not in texts)):
            new.append(raw if raw.endswith((b"\n", b"\r")) else raw + b"\n")
        else:
            kept.append(raw)
    return b"".join(kept), b"".join(new)


def source_matches(pattern: str, source: str | None) -> bool:
    """Exact match, or a prefix match when ``pattern`` ends in ``*`` (``web:*``, ``ticket:OPS-*``)."""
    if source is None:
        return False
    if pattern.endswith("*"):
        return source.startswith(pattern[:-1])
    return source == pattern


def _report(problems: list[Problem] | None, problem: Problem) -> None:
    if problems is not None:
        problems.append(problem)
    else:
        log.warning("%s", problem)
