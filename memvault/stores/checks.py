"""The checks a vault file must pass, shared by the write gate and the git pre-commit hook.

memvault's own commits skip the pre-commit hook (they were checked when written), so the gate must be at least as
strict as the hook: both call :func:`check_file` on the exact bytes that will be committed. Secrets are looked for
in every field — the text, each front-matter value and key (tags, category, anything a person added), each
episode field — by :func:`memvault.rules.secrets.scan_fields`, plus the whole file text as written.
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
    area): a bad key or name, front matter that does not parse, and (with ``secrets``) anything like a secret."""
    problems: list[Finding] = []
    if area == "procedures":
        try:
            validate_name(PurePosixPath(inner).with_suffix("").as_posix())
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
