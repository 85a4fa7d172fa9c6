"""Capture: the new turns of an agent's transcript appended as episodes, one per turn, of source ``agent:<runtime>``.

What a turn keeps: the person's prompt, the agent's final answer, the commands it ran with their exit status and the
files it changed (never tool output). ``meta`` holds ``session_id``, ``runtime``, ``cwd`` and ``turn_id``; the
project's slug is a tag. On the way in:

- text inside ``<private>...</private>`` is dropped however the tag is spelled, and so is its repetition elsewhere in
  the turns captured with it (:mod:`memvault.rules.redaction`; an unclosed ``<private>`` drops the rest of that text);
- secrets are redacted with the detector every write goes through (:func:`memvault.rules.secrets.redact`): the
  secret becomes ``[redacted: <kind>]``, the rest of the turn is kept, and ``meta.redacted`` counts them;
- a turn over ``[capture] episode_bytes`` is cut, part by part, and the episode says how much was cut; a session
  over ``[capture] session_bytes`` stops being stored, and one episode says how many turns were left out.

Idempotent: the turns already captured (by the runtime's message id, in any session) are skipped, and each session
resumes reading where the last capture stopped (:mod:`memvault.stores.captures`). Captured episodes are ``raw``:
retention applies, and ``memvault purge --source agent:<runtime>`` removes them. Facts never come from here: an
optional ``[capture] extractor`` turns the new turns into candidates that are ingested as the agent's proposals.
"""
from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...rules.errors import InvalidValue, MemvaultError, UntrustedSource
from ...rules.fsutil import locked
from ...rules.redaction import drop_echoes, scrub_lines, strip_private
from ...rules.secrets import find_secrets, redact
from ...rules.timeutil import now, parse_time
from ...rules.validation import check_episode_time
from . import project as project_mod
from . import transcripts
from .transcripts import Turn

if TYPE_CHECKING:
    from ...core.vault import Vault

_SEPARATOR = "\n\x00\n"
#: Bytes kept free in an episode line for its JSON envelope (id, times, source, tags, meta).
ENVELOPE = 2048
#: Longest session or turn id stored (a longer one is clipped and hashed: :func:`_bounded`), and longest cwd.
ID_CHARS, PATH_CHARS = 200, 1024
#: Bytes of transcript read at a time: memory holds one piece's turns; the cursor is saved after each.
PIECE_BYTES = 8 << 20
#: A part of a turn longer than this many times the turn's cap is cut before redaction (what is kept is the same).
PRECUT = 4
#: Seconds a capture starts new pieces for by default (PreCompact hooks get 60 s; the next capture resumes).
CAPTURE_SECONDS = 40.0
#: Shares of a turn's byte cap, in the order they are filled: what did not use its share passes it on.
SHARES = (("prompt", 0.35), ("answer", 0.45), ("commands", 0.15), ("files", 0.05))


@dataclass
class CaptureReport:
    """What one capture did."""

    runtime: str
    session_id: str
    transcript: str
    captured: list[str] = field(default_factory=list)     # episode ids appended
    skipped: int = 0                                      # turns already captured
    open_turns: int = 0                                   # turns not over yet (left for the next capture)
    not_stored: int = 0                                   # turns past the session cap
    redacted: int = 0
    private: int = 0
    cut: int = 0
    problems: list[str] = field(default_factory=list)
    extractor: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("runtime", "session_id", "transcript", "captured", "skipped",
                                              "open_turns", "not_stored", "redacted", "private", "cut", "problems",
                                              "extractor")}

    def summary(self) -> str:
        parts = [f"captured {len(self.captured)} turns of {self.runtime} session {self.session_id}"]
        for n, what in ((self.skipped, "already captured"), (self.open_turns, "not over yet"),
                        (self.not_stored, "past the session cap"), (self.redacted, "secrets redacted"),
                        (self.private, "private spans dropped"), (self.cut, "turns cut to the cap")):
            if n:
                parts.append(f"{n} {what}")
        return "; ".join(parts)


def capture(vault: Vault, runtime: str, transcript: Path | str, *, session_id: str | None = None,
            cwd: str | None = None, final: bool = False, budget: float | None = CAPTURE_SECONDS,
            ends: str | None = None) -> CaptureReport:
    """Append the new turns of ``transcript`` (a ``runtime`` transcript file) as episodes. ``final`` (the session
    ended) stores the last turn even if the runtime did not mark it over; with ``ends``, the id of the turn an
    event ends (Codex's Stop, per turn), only the turns through that one (a turn begun after it waits until it is
    over; when no turn read has that id, as ``final`` alone).

    The transcript is read in pieces of :data:`PIECE_BYTES` (memory holds one piece's turns, never the file),
    each stored and its cursor saved before the next is read; past ``budget`` seconds (None: no limit) no new
    piece is started, the report says where it stopped, and the next capture resumes from there."""
    if runtime not in transcripts.RUNTIMES:
        raise InvalidValue("runtime", f"{runtime!r} is not one of {', '.join(transcripts.RUNTIMES)}")
    path = Path(transcript).expanduser()
    if not path.is_file():
        raise InvalidValue("transcript", f"{path}: " + ("not a regular file" if path.exists() else "no such file"))
    source = f"agent:{runtime}"
    session_id = _safe_id(session_id) if session_id else None
    key = hashlib.sha1(f"{runtime}\0{session_id or path}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
    deadline = None if budget is None else time.monotonic() + budget
    with locked(vault.state_dir / "locks" / f"capture-{key}.lock"):
        return _capture(vault, runtime, source, path.resolve(), session_id, cwd, final, deadline, ends)


def _capture(vault: Vault, runtime: str, source: str, path: Path, session_id: str | None, cwd: str | None,
             final: bool, deadline: float | None, ends: str | None = None) -> CaptureReport:
    log = vault.captures
    provisional = session_id or _safe_id(path.stem)
    kept = _safe_transcript(path)
    cursor = log.cursor(runtime, provisional, kept)
    read = transcripts.read(runtime, path, cursor.offset, max_bytes=PIECE_BYTES)
    session = session_id or _safe_id(read.session_id or "") or provisional
    if session != provisional:
        cursor = log.cursor(runtime, session, kept)
        if cursor.offset != 0:
            read = transcripts.read(runtime, path, cursor.offset, max_bytes=PIECE_BYTES)
    report = CaptureReport(runtime, session, str(path), problems=read.problems[:5])
    where = cwd or read.cwd
    project = project_mod.detect(where, commits=0) if where else None
    echoes: list[str] = []
    stored: list[dict[str, Any]] = []
    while True:
        stored += _piece(vault, log, runtime, source, path, session, where, project, cursor, read, final, report,
                         echoes, ends)
        if not read.more:
            break
        if deadline is not None and time.monotonic() > deadline:
            report.problems.append(f"stopped after the capture's time budget at byte {cursor.offset} of "
                                   f"{_size(path)}: the next capture goes on from there")
            break
        read = transcripts.read(runtime, path, cursor.offset, max_bytes=PIECE_BYTES)
        report.problems += read.problems[:5]
    settings = vault.config.capture
    if report.not_stored:
        note = _cap_note(report.not_stored, settings.session_bytes, runtime, session, where, project, None)
        try:
            report.captured += [e.id for e in vault.episodes.append_many([note], source=source)]
        except MemvaultError as exc:
            report.problems.append(f"the session cap's note not stored: {exc}")
    if settings.extractor and stored:
        try:
            report.extractor = _extract(vault, settings.extractor, settings.extractor_timeout, source,
                                        [i for i in stored if i["meta"].get("turn_id")])
        except MemvaultError as exc:  # the turns are stored; only the proposals are missing
            report.extractor = {"error": str(exc)}
            report.problems.append(f"extractor: {exc}")
    # What goes to agents.log: a problem names the transcript's file, whose name may be what the detector flags.
    report.problems = [redact(problem)[0] for problem in report.problems]
    return report


def _piece(vault: Vault, log: Any, runtime: str, source: str, path: Path, session: str, where: str | None,
           project: project_mod.Project | None, cursor: Any, read: transcripts.Transcript, final: bool,
           report: CaptureReport, echoes: list[str], ends: str | None = None) -> list[dict[str, Any]]:
    """Store the turns of one piece read, then move the cursor: past every turn stored, never past one that was
    not (a turn the vault refused stays for the next capture, and is not marked captured). The episodes stored.

    "Captured yet?", the store and the mark are one step per runtime (turn ids are the runtime's, whatever the
    session): the lock :func:`capture` takes is the session's as its caller names it, and a hook (the session's
    id) and ``memvault agent capture`` run by hand (the file) at once both stored every turn."""
    last = final and not read.more
    for turn in read.turns:
        turn.id = _safe_id(turn.id)
    ids, named = [t.id for t in read.turns], _safe_id(ends) if ends else None
    if last and named is not None and (named in ids or log.seen(runtime, [named])):
        # The event ends this turn, not the session: a turn begun after it (a queued prompt) is not over, and the
        # cursor stays at the first turn not over, as the reader left it, not at the end of the file. (The turn
        # may be in an earlier piece of this read, or stored by an earlier capture: then all after it wait.)
        through = ids.index(named) if named in ids else -1
        done = [t for i, t in enumerate(read.turns) if t.complete or i <= through]
        last = False
    else:
        done = [t for t in read.turns if t.complete or last]
    report.open_turns = len(read.turns) - len(done)
    with locked(vault.state_dir / "locks" / f"capture-runtime-{runtime}.lock"):
        # What another capture of this session stored meanwhile counts toward its cap.
        fresh = log.cursor(runtime, session, cursor.transcript)
        cursor.stored_bytes, cursor.capped = max(cursor.stored_bytes, fresh.stored_bytes), cursor.capped or fresh.capped
        return _store(vault, log, runtime, source, path, session, where, project, cursor, read, last, done, report,
                      echoes)


def _store(vault: Vault, log: Any, runtime: str, source: str, path: Path, session: str, where: str | None,
           project: project_mod.Project | None, cursor: Any, read: transcripts.Transcript, last: bool,
           done: list[Turn], report: CaptureReport, echoes: list[str]) -> list[dict[str, Any]]:
    _refill(vault, log, runtime, report)  # found damaged when opened
    seen = log.seen(runtime, [t.id for t in done])
    if _refill(vault, log, runtime, report):  # found damaged by the query, which ran on the fresh file
        seen = log.seen(runtime, [t.id for t in done])
    new = [t for t in done if t.id not in seen]
    report.skipped += len(done) - len(new)
    settings = vault.config.capture
    cap = max(1024, min(settings.episode_bytes, vault.config.limits.episode_bytes - ENVELOPE))
    items: list[tuple[Turn, dict[str, Any], int]] = []
    stored_ids: list[str] = []
    not_stored = 0
    for turn in new:
        if cursor.capped:
            not_stored += 1
            stored_ids.append(turn.id)
            continue
        item, size = _episode(turn, runtime, session, where, project, cap, report, echoes)
        if cursor.stored_bytes + size > settings.session_bytes:
            cursor.capped = True
            not_stored += 1
            stored_ids.append(turn.id)
            continue
        cursor.stored_bytes += size
        items.append((turn, item, size))
        stored_ids.append(turn.id)
    report.not_stored += not_stored
    refused: list[Turn] = []
    if items:
        try:
            report.captured += [e.id for e in vault.episodes.append_many([i for _, i, _ in items], source=source)]
        except MemvaultError:  # one turn the gate refuses must not hold the session's others back forever
            for turn, item, size in items:
                try:
                    report.captured += [e.id for e in vault.episodes.append_many([item], source=source)]
                except MemvaultError as exc:
                    report.problems.append(f"turn {item['meta'].get('turn_id')} not stored: {exc}; left for the "
                                           "next capture")
                    refused.append(turn)
                    cursor.stored_bytes -= size
    lost = {t.id for t in refused}
    cursor.offset = max(read.end, _size(path)) if last else read.end
    if refused and runtime != "gemini":  # never past a turn that was not stored (Gemini's file is read whole)
        cursor.offset = min(cursor.offset, min(t.start for t in refused))
    log.record(cursor, [t for t in stored_ids if t not in lost])
    return [i for t, i, _ in items if t.id not in lost]


def _bounded(value: str, limit: int = ID_CHARS) -> str:
    """An identifier from a transcript or a payload, kept to ``limit`` characters: a longer one (a 5 MB session
    id) is clipped and made unique again by a hash of the whole, so it still names one session or turn."""
    if len(value) <= limit:
        return value
    return value[: limit - 17] + "~" + hashlib.sha1(value.encode("utf-8", "replace")).hexdigest()[:16]


def _safe_id(value: str) -> str:
    """A session or turn id as it may be stored and logged: bounded (:func:`_bounded`), and one the detector flags
    replaced whole by a hash of itself, so it still names one session or turn (captured once) and the secret rests
    nowhere: kept as it came, the gate refused every episode of the session (a secret in ``meta.session_id``), for
    ever, while agents.log and captures.db held it in clear."""
    value = _bounded(value)
    if value and find_secrets(value):
        return "redacted-" + hashlib.sha1(value.encode("utf-8", "replace")).hexdigest()[:20]
    return value


def _safe_path(value: str | None) -> str | None:
    """A working folder as it may be stored: bounded, its secrets redacted (the rest of the path is kept)."""
    return _bounded(redact(value)[0], PATH_CHARS) if value else value


def _safe_transcript(path: Path) -> str:
    """A transcript's path as captures.db keeps it (the cursor's key, shown by ``memvault agent status``): as it
    is, or with what the detector flags (or bytes that are not UTF-8) replaced and a hash of the real path added,
    so two paths redacted alike (two folders named after two tokens) still name two files and a cursor is never
    taken for another file's."""
    text = str(path)
    raw = text.encode("utf-8", "surrogateescape")  # a name in a legacy encoding: bytes no UTF-8 text can hold
    shown, found = redact(raw.decode("utf-8", "replace"))
    if not found and shown == text:
        return _bounded(text, PATH_CHARS)
    digest = hashlib.sha1(raw).hexdigest()[:16]
    return _bounded(f"{shown} #{digest}", PATH_CHARS)


def _tags(runtime: str, project: project_mod.Project | None) -> list[str]:
    """The runtime and the project's slug, unless the slug (a folder's name) is what the detector flags."""
    return [runtime] + ([project.slug] if project is not None and not find_secrets(project.slug) else [])


def _when(turn: Turn, meta: dict[str, Any], report: CaptureReport) -> str | None:
    """The turn's time if the vault can store it, else None (the time of capture), the claimed time kept in
    ``meta.claimed_at``: a turn dated in the future or unreadably was refused, and so lost, before."""
    if turn.at is None:
        return None
    try:
        check_episode_time(parse_time(turn.at, "at"), now=now())
        return turn.at
    except InvalidValue as exc:
        # A secret where the time should be is redacted like any other text of the turn: kept as it was, it went
        # to agents.log and made the gate refuse the turn at every capture.
        meta["claimed_at"] = _bounded(redact(turn.at)[0], 64)
        report.problems.append(f"turn {meta['turn_id']}: {redact(exc.reason)[0]}; stored with the time of capture")
        return None


def _refill(vault: Vault, log: Any, runtime: str, report: CaptureReport) -> bool:
    """A captures.db found damaged was moved aside and started afresh: its turns come back from the episodes
    they became (``meta.turn_id``), so none is stored twice; the report (and the hook's log) says so."""
    if not log.rebuilt:
        return False
    log.rebuilt = False
    turns = []
    for episode in vault.episodes.iter(source=f"agent:{runtime}"):
        meta = episode.meta if isinstance(episode.meta, dict) else {}
        if isinstance(meta.get("turn_id"), str):
            turns.append((meta["turn_id"], str(meta.get("session_id") or "")))
    log.restore(runtime, turns)
    report.problems += [f"{w} ({len(turns)} turns)" for w in log.warnings]
    log.warnings.clear()
    return True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ------------------------------------------------------------------------------------------------ one turn
def _episode(turn: Turn, runtime: str, session: str, cwd: str | None, project: project_mod.Project | None,
             cap: int, report: CaptureReport, echoes: list[str]) -> tuple[dict[str, Any], int]:
    """The episode of one turn (private spans and their echoes dropped, secrets redacted, cut to ``cap`` bytes)
    and its size. ``echoes`` holds the private spans of the turns before it, and receives this turn's."""
    counts = {"private": 0, "redacted": 0}
    raw = {
        "prompt": turn.prompt,
        "answer": turn.answer,
        "commands": "\n".join(f"- `{c.command}` ({c.status()})" for c in turn.commands),
        "files": ", ".join(turn.files),
    }
    # NUL is the separator the parts are joined by for the detector, and never anything a person reads: a prompt
    # holding the separator moved its second half into "Assistant:" and the answer into "Commands:".
    raw = {name: text.replace("\x00", "") for name, text in raw.items()}
    spans: list[str] = []
    for name, text in raw.items():
        raw[name], found = strip_private(text)
        spans += found
        counts["private"] += len(found)
    spans += echoes
    for name, text in raw.items():  # the assistant (or a command) repeating what the person marked private
        raw[name], n = drop_echoes(text, spans)
        counts["private"] += n
    echoes.extend(s for s in spans if s not in echoes)
    # A part far over the cap (a pasted 5 MB log) is cut before the detector reads it, at a line end: at most
    # PRECUT times the cap is kept, which still fills the cap after redaction, and the detector's time is bounded.
    precut: dict[str, int] = {}
    for name, text in raw.items():
        data = text.encode("utf-8")
        if len(data) > PRECUT * cap:
            head = data[: PRECUT * cap]
            head = head[: head.rfind(b"\n") + 1] or head
            raw[name] = head.decode("utf-8", errors="ignore")
            precut[name] = len(data) - len(raw[name].encode("utf-8"))
    # One pass of the detector over the whole turn (parts joined by a separator no secret can span).
    joined, findings = redact(_SEPARATOR.join(raw.values()))
    counts["redacted"] += len(findings)
    parts = {name: text.strip() for name, text in zip(raw, joined.split(_SEPARATOR))}
    parts, cut = _fit(parts, cap)
    for name, n in precut.items():
        cut[name] = cut.get(name, 0) + n
    lines = [f"User: {parts['prompt']}"]
    if parts["answer"]:
        lines.append(f"Assistant: {parts['answer']}")
    if parts["commands"]:
        lines.append("Commands:\n" + parts["commands"])
    if parts["files"]:
        lines.append(f"Files changed: {parts['files']}")
    if cut:
        lines.append("[memvault: cut to the [capture] episode_bytes cap: "
                     + ", ".join(f"{n} bytes of the {name}" for name, n in cut.items()) + "]")
    text = _scrub("\n\n".join(lines), counts)
    meta: dict[str, Any] = {"session_id": session, "runtime": runtime, "turn_id": turn.id}
    if cwd or turn.cwd:
        meta["cwd"] = _safe_path(turn.cwd or cwd)
    if counts["redacted"]:
        meta["redacted"] = counts["redacted"]
    if counts["private"]:
        meta["private"] = counts["private"]
    if cut:
        meta["cut_bytes"] = cut
    report.redacted += counts["redacted"]
    report.private += counts["private"]
    report.cut += bool(cut)
    tags = _tags(runtime, project)
    at = _when(turn, meta, report)
    return {"text": text, "kind": "raw", "at": at, "tags": tags, "meta": meta}, len(text.encode("utf-8"))


def _scrub(text: str, counts: dict[str, int]) -> str:
    """What the write gate would still refuse after redaction goes with its whole line: a captured turn is kept
    without it rather than refused."""
    text, dropped = scrub_lines(text)
    counts["redacted"] += dropped
    return text


def _fit(parts: dict[str, str], cap: int) -> tuple[dict[str, str], dict[str, int]]:
    """Each part cut to its share of ``cap`` bytes (shares a part does not need go to the others); the bytes cut
    per part."""
    sizes = {name: len(text.encode("utf-8")) for name, text in parts.items()}
    room = cap - 200  # the labels and the cut note
    if sum(sizes.values()) <= room:
        return parts, {}
    limits = {name: int(room * share) for name, share in SHARES}
    spare = sum(max(0, limits[n] - sizes[n]) for n in limits)
    wanting = [n for n in limits if sizes[n] > limits[n]]
    while spare > 0 and wanting:
        each = spare // len(wanting) or spare
        spare = 0
        for n in list(wanting):
            grant = min(each, sizes[n] - limits[n])
            limits[n] += grant
            spare += each - grant
            if sizes[n] <= limits[n]:
                wanting.remove(n)
        if spare < len(wanting):
            break
    out, cut = {}, {}
    for name, text in parts.items():
        if sizes[name] <= limits[name]:
            out[name] = text
            continue
        kept = text.encode("utf-8")[: max(0, limits[name])].decode("utf-8", errors="ignore")
        out[name] = kept.rstrip() + " …"
        cut[name] = sizes[name] - len(kept.encode("utf-8"))
    return out, cut


def _cap_note(n: int, cap: int, runtime: str, session: str, cwd: str | None,
              project: project_mod.Project | None, at: str | None) -> dict[str, Any]:
    text = (f"memvault stopped capturing {runtime} session {session}: it reached the [capture] session_bytes cap "
            f"({cap} bytes); {n} later turn{'s were' if n != 1 else ' was'} not stored.")
    meta: dict[str, Any] = {"session_id": session, "runtime": runtime, "not_stored": n}
    if cwd:
        meta["cwd"] = _safe_path(cwd)
    return {"text": text, "kind": "raw", "at": at, "tags": _tags(runtime, project),
            "meta": meta}


# ------------------------------------------------------------------------------------------------ extractor
def _extract(vault: Vault, command: str, timeout: float, source: str,
             items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run the user's extractor over the new turns (one JSON object per line on stdin) and ingest its JSONL
    output as ``source``'s candidates: proposals for a person, never trusted facts."""
    if vault.facts.is_trusted(source):
        raise UntrustedSource(source, f"[trust] trusts {source}, so extracted facts would skip the inbox: a "
                                      "session's facts must stay proposals; remove it from [trust] trusted")
    stdin = "".join(json.dumps({"text": i["text"], **i["meta"], "at": i.get("at")}, ensure_ascii=False) + "\n"
                    for i in items)
    try:
        done = subprocess.run(shlex.split(command), input=stdin.encode("utf-8"), capture_output=True,
                              timeout=timeout, cwd=vault.root)
    except (OSError, ValueError) as exc:
        raise MemvaultError(f"[capture] extractor {command!r} could not run: {exc}") from None
    except subprocess.TimeoutExpired:
        raise MemvaultError(f"[capture] extractor {command!r} did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        raise MemvaultError(f"[capture] extractor {command!r} exited with {done.returncode}: {tail[0][:200]}")
    report = vault.ingest(done.stdout.splitlines(), source=source, name="extractor")
    return report.to_dict()
