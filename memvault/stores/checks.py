"""The checks a vault file must pass, shared by the write gate and the git pre-commit hook.

memvault's own commits skip the pre-commit hook (they were checked when written), so the gate must be at least as
strict as the hook: both call :func:`check_file` (a memory file) and :func:`commit_refusal` (any file of the vault,
hand edits that ``sync`` commits included) on the exact bytes that will be committed. Secrets are looked for in
every field — the text, each front-matter value and key (tags, category, anything a person added), each episode
field, and the fact key or procedure name itself (it is the path and the commit subject) — by
:func:`memvault.rules.secrets.scan_fields`, plus the whole file text as written.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..rules import frontmatter_edit as fm
from ..rules.errors import FactParseError, FrontMatterError, InvalidKey
from .facts import parse_fact
from ..rules.validation import validate_key, validate_name

if TYPE_CHECKING:
    from ..rules.secrets import SecretFinding

#: Areas of a vault whose files memvault reads as memories.
CHECKED_AREAS = ("facts", "inbox", "procedures")
IGNORED_SUFFIXES = ("~", ".tmp", ".swp", ".swo", ".swx")
#: How every secret finding's reason starts (the refusal ``--allow-secret`` waives).
SECRET_REASON = "looks like a secret"


@dataclass(frozen=True)
class Finding:
    """One reason a file is refused, with its line when known."""

    reason: str
    line: int | None = None


def is_memory_file(area: str, inner: str) -> bool:
    """Whether memvault reads ``<area>/<inner>`` (dot files and editor droppings are never read)."""
    if area not in CHECKED_AREAS or not inner:
        return False
    if any(part.startswith(".") for part in inner.split("/")) or inner.endswith(IGNORED_SUFFIXES):
        return False
    return area == "procedures" or inner.endswith(".md")


def secret_findings(area: str, inner: str, data: bytes) -> list[SecretFinding]:
    """What looks like a secret in a file's content: in the whole text, and in every front-matter field (a
    field finding reports the file line of its key; one already found in the text is not repeated)."""
    from ..rules.secrets import SecretFinding, find_secrets, scan_fields  # ~90 ms of compiled rules: writes only

    if b"\0" in data:
        return []  # binary: nothing to scan
    text = data.decode("utf-8", errors="replace")
    found = list(find_secrets(text))
    if area != "procedures" or inner.endswith(".md"):
        try:
            doc = fm.parse(text)
        except FrontMatterError:
            return found
        lines = {f.line for f in found}
        for finding in scan_fields({"front matter": doc.meta}) if doc.meta else []:
            key = finding.field.removeprefix("front matter").lstrip(".").split(".")[0].split("[")[0]
            line = doc.key_lines.get(key, 1)
            if line not in lines:
                found.append(SecretFinding(finding.kind, finding.excerpt, line, finding.field))
    return found


def check_file(area: str, inner: str, data: bytes, *, secrets: bool = True) -> list[Finding]:
    """Problems of one file of ``facts/``, ``inbox/`` or ``procedures/`` (``inner`` is its path inside the
    area): a bad key or name, front matter that does not parse, a NUL byte in a text file, and (with ``secrets``)
    anything like a secret."""
    if b"\0" in data and (area != "procedures" or inner.endswith(".md")):
        # git would store the file as binary (no diff, no review) and the secret check reads no binary file: a NUL
        # inside "AKIA\0..." would carry a key past it. A fact or runbook is text; a script may be anything.
        at = data.index(b"\0")
        return [Finding(f"holds a NUL byte (at byte {at}): a fact or runbook is text; remove it",
                        data.count(b"\n", 0, at) + 1)]
    problems: list[Finding] = []
    name = PurePosixPath(inner).with_suffix("").as_posix() if area == "procedures" else inner[: -len(".md")]
    problems += key_secrets(name, "procedure name" if area == "procedures" else "fact key")
    if area == "procedures":
        try:
            validate_name(name)
        except InvalidKey as exc:
            problems.append(Finding(f"not a valid procedure name: {exc.reason}"))
    else:
        key = inner[: -len(".md")]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return [Finding(f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        try:
            validate_key(key)
            parse_fact(key, Path(inner), text)
        except InvalidKey as exc:
            problems.append(Finding(f"not a valid fact key: {exc.reason}"))
        except FactParseError as exc:
            problems.append(Finding(exc.reason, exc.line))
    if secrets:
        problems += [Finding(f"looks like a secret: {f.kind} {f.excerpt}" + (f" in {f.field}" if f.field else ""), f.line)
                     for f in secret_findings(area, inner, data)]
    return problems


def episode_secrets(fields: dict[str, Any]) -> list[SecretFinding]:
    """What looks like a secret in an episode: its text, source, kind, tags and every meta field and key."""
    from ..rules.secrets import scan_fields

    return scan_fields(fields)


def key_secrets(name: str, what: str = "fact key") -> list[Finding]:
    """A secret in a fact key or procedure name (``tokens/xoxb-…``): the name is a path and the subject of a
    commit, pushed with the vault. Never allowed, not even with ``--allow-secret`` (the reason does not start with
    "looks like a secret", which that flag waives)."""
    from ..rules.secrets import ENTROPY_KIND, find_secrets

    # A key is a path: the generic entropy rule reads each segment on its own, as it reads each word of a text.
    # Joined by '/' into one long run, segments made from folder names (a project in mvbar-cm-294o41z1) read as a
    # token; a segment that is itself a long random run still does. Every shaped rule reads the whole name.
    found = [f for f in find_secrets(name) if f.kind != ENTROPY_KIND]
    found += [f for segment in name.split("/") for f in find_secrets(segment) if f.kind == ENTROPY_KIND]
    if not found:
        return []
    kinds = ", ".join(dict.fromkeys(f"{f.kind} ({f.excerpt})" for f in found))
    return [Finding(f"a {what} must not hold a secret: {kinds}; the name is a path and a commit subject")]


def commit_problems(rel: str, data: bytes | None, *, limits: dict[str, int] | None = None) -> list[Finding]:
    """Why the vault file ``rel`` (vault-relative, with the bytes ``data`` that would be committed; None for a
    deletion) must not be committed; empty when it may. The one check every commit memvault makes runs — a write
    through the gate, sync's commit of hand edits, the pre-commit hook: temp files and editor droppings, anything
    in ``.memvault``, a fact key or procedure name that is invalid or holds a secret, front matter that does not
    parse, conflict markers, a file over ``[limits]`` (area -> bytes), and secrets in every field of every file
    (episode lines and memvault.toml included). Symlinks are the caller's to refuse (it knows the file, not
    only its bytes)."""
    if data is None:
        return []  # a deletion carries no text
    area, _, inner = rel.partition("/")
    name = PurePosixPath(rel).name
    if rel == ".memvault" or rel.startswith(".memvault/"):
        return [Finding("memvault's local state (index, locks) of this host: never committed")]
    if name.endswith(IGNORED_SUFFIXES) or (inner and any(part.startswith(".") and part != ".gitignore"
                                                         for part in inner.split("/"))):
        return [Finding("a temp file, editor dropping or hidden file: never committed by memvault")]
    limit = (limits or {}).get(area)
    if limit is not None and is_memory_file(area, inner) and len(data) > limit:
        return [Finding(f"{len(data)} bytes, more than the {limit} allowed ([limits]): split it")]
    if is_memory_file(area, inner):
        return check_file(area, inner, data)
    if rel == "memvault.toml":  # before the binary skip: a NUL or a bad byte breaks every command that reads it
        from ..rules.config import TOML_MAX, from_text
        from ..rules.errors import ConfigError

        if len(data) > TOML_MAX:
            return [Finding(f"{len(data)} bytes, more than the {TOML_MAX} a settings file may hold: not read")]
        try:
            from_text(data.decode("utf-8"), Path(rel))
        except UnicodeDecodeError as exc:
            return [Finding(f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        except ConfigError as exc:
            return [Finding(exc.reason)]
    if b"\0" in data:
        return []  # binary: nothing memvault reads, nothing to scan
    text = data.decode("utf-8", errors="replace")
    if area == "episodes" and rel.endswith(".jsonl"):
        return episode_file_secrets(text)
    from ..rules.secrets import find_secrets

    return [Finding(f"looks like a secret: {f.kind} {f.excerpt}", f.line) for f in find_secrets(text)]


def commit_refusal(rel: str, data: bytes | None, *, limits: dict[str, int] | None = None) -> str | None:
    """:func:`commit_problems` as one line (the first problem, and how many more), or None."""
    return one_line(commit_problems(rel, data, limits=limits))


def is_secret(problem: Finding) -> bool:
    """Whether ``problem`` is text that looks like a secret: the one refusal ``--allow-secret`` waives (a secret
    in a key or name is not one of them: it says so in other words)."""
    return problem.reason.startswith(SECRET_REASON)


def one_line(problems: list[Finding]) -> str | None:
    """The first problem (with its line) and how many more, or None when there is none."""
    if not problems:
        return None
    first = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return (f"line {first.line}: {first.reason}" if first.line else first.reason) + more


def episode_file_secrets(text: str) -> list[Finding]:
    """Secrets in an episode file as a person may have edited it: every line's fields (meta keys included), and
    the raw text of lines that are not valid JSON."""
    from ..rules.jsontext import every_pair, parse
    from ..rules.secrets import find_secrets

    found: list[Finding] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            fields = parse(line, pairs=every_pair)  # a key given twice: both values are scanned
        except ValueError:
            fields = None
        findings = episode_secrets(fields) if isinstance(fields, dict) else find_secrets(line)
        found += [Finding(f"looks like a secret: {f.kind} {f.excerpt}" + (f" in {f.field}" if f.field else ""),
                          lineno) for f in findings]
    return found
