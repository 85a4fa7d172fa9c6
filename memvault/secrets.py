"""Secret detection: refuse to write text that looks like a credential, because the vault is a pushed git repo.

Two kinds of rule. *Shaped* rules recognise a credential by its format (a PEM private key block, an AWS key id,
a GitHub, Slack, Stripe or Google token, a JWT, ``scheme://user:password@host``); *contextual* rules look at an
assignment (``password=...``, ``api_key: ...``) whose value is a literal rather than a placeholder or a
reference; and a last, generic rule flags long high-entropy runs that mix letters and digits.

The generic rule is the one that can misfire on ops text, so it deliberately lets through what memvault stores
every day: hex ids (git commits and blobs, sha256 digests, restic snapshots), ULIDs, UUIDs, paths and
identifiers made of words. It is a heuristic: it errs towards silence on prose and towards a finding on
anything that looks random.

Findings never carry the secret itself: :attr:`SecretFinding.excerpt` shows at most the first four characters
(fewer for short values, so a short password is not half printed) and the length.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

ENTROPY_MIN_LENGTH = 32
ENTROPY_THRESHOLD = 4.0  # bits per character; random base64/base62 sits near 4.5-5.0, hex can never exceed 4.0


@dataclass(frozen=True)
class SecretFinding:
    """One place in a text that looks like a secret."""

    kind: str
    excerpt: str  # redacted, safe to print: "AKIA… (20 chars)"
    line: int  # 1-based


# --- shaped rules: (kind, pattern, group holding the secret) -------------------------------------------------

_PEM = re.compile(
    r"-----BEGIN (?:RSA |EC |OPENSSH |DSA |PGP |ENCRYPTED )?PRIVATE KEY(?: BLOCK)?-----"
    r"(?:.*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----)?",
    re.DOTALL,
)

_SHAPED: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("AWS access key id", re.compile(r"(?<![A-Za-z0-9])((?:AKIA|ASIA)[A-Z0-9]{16})(?![A-Za-z0-9])"), 1),
    (
        "AWS secret access key",
        re.compile(r"(?i)aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"),
        1,
    ),
    ("GitHub token", re.compile(r"(?<![A-Za-z0-9_])(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"), 1),
    ("Slack token", re.compile(r"(?<![A-Za-z0-9])(xox[abprs]-[A-Za-z0-9-]{10,})"), 1),
    ("Slack webhook URL", re.compile(r"(https://hooks\.slack\.com/services/[A-Za-z0-9/]{20,})"), 1),
    ("Stripe secret key", re.compile(r"(?<![A-Za-z0-9])((?:sk|rk)_live_[A-Za-z0-9]{16,})"), 1),
    ("Google API key", re.compile(r"(?<![A-Za-z0-9_-])(AIza[0-9A-Za-z_-]{35})(?![0-9A-Za-z_-])"), 1),
    (
        "JWT",
        re.compile(r"(?<![A-Za-z0-9_-])(eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"),
        1,
    ),
    # scheme://user:password@host; the user may be empty (redis://:pw@host). The password may not hold '/',
    # so host:port/path@x is not read as credentials.
    (
        "connection string with password",
        re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:([^\s:/@]+)@[A-Za-z0-9\[]"),
        1,
    ),
)

# --- contextual rule: an assignment to a secret-sounding name ------------------------------------------------

# The secret word must end the name (DB_PASSWORD, auth_token, "api-key"), so secret_name=..., token_ttl=...,
# password_file=... are references or settings, not values. Nothing path-like may precede the name, so
# /etc/passwd: is not an assignment.
_ASSIGNMENT = re.compile(
    r"(?<![\w./\\-])(?P<name>[A-Za-z0-9_.-]*?"
    r"(?P<word>password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key"
    r"|private[_-]?key))"
    r"[\"']?(?P<sep>\s*(?:[:=]|:=)(?!=)\s*)"
    r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s\"',;&)]+))",
    re.IGNORECASE,
)
_PASSWORD_WORDS = {"password", "passwd", "passphrase", "pwd"}

# Values that stand for a secret without being one.
_PLACEHOLDER = re.compile(
    r"""^(?:
        <[^>]*>                         # <password>
      | \$.*                            # $VAR, ${VAR}, $(cat file)
      | `.*`                            # `command`
      | %[^%]*%                         # %VAR%
      | %\([^)]*\)s                     # %(password)s
      | .*\{\{.*\}\}.*                  # {{ vault_password }}
      | [*xX.…•-]+                      # ***, xxx, ..., …
      | (?:redacted|hidden|masked|none|null|nil|true|false|yes|no|on|off|required|optional|string|str|bytes
          |undefined|empty|todo|tbd|placeholder|your[_-]?\w*|example|dummy|n/a
          |password|passwd|pass|secret|pw)  # docs' stand-ins: user:password@host
      | (?:vault|env|file|op|secret|secrets|arn|ssm|keyring|pass|gopass|sops|kms):.*   # a reference
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
_PATHLIKE = re.compile(r"^(?:~?/|\./|\.\./)")

# --- generic rule: long high-entropy runs ------------------------------------------------------------------

_RUN = re.compile(r"[A-Za-z0-9+/_=-]{%d,}" % ENTROPY_MIN_LENGTH)
_RUN_PIECES = re.compile(r"[/_.+=-]+")
_WORDISH = re.compile(
    r"""^(?:
        [0-9a-f]+ | [0-9A-F]+                               # hex: commit and blob ids, digests, snapshot ids
      | [0-9A-HJKMNP-TV-Z]{26}                              # ULID
      | (?:[A-Z]?[a-z]+|[A-Z]+)\d*                         # word, Word, WORD, python3
      | (?:(?:[A-Z]?[a-z]{2,}|[A-Z]{2,}(?![a-z]))\d*){2,}    # camelCase, HTTPServer2Error
      | \d+[a-zA-Z]{1,3}                                    # a number with a unit: 250ms, 4gb, 15min
    )$""",
    re.VERBOSE,
)


def shannon_entropy(s: str) -> float:
    """Bits per character of ``s`` under its own character frequencies."""
    if not s:
        return 0.0
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def _excerpt(secret: str) -> str:
    # Four characters of a 20-character key say nothing; four of a 7-character password say too much.
    shown = secret[: min(4, len(secret) // 4)]
    return f"{shown}… ({len(secret)} chars)"


def _looks_random(run: str) -> bool:
    core = run.strip("=/+-_")
    if len(core) < ENTROPY_MIN_LENGTH:
        return False
    if not (any(c.isdigit() for c in core) and any(c.isalpha() for c in core)):
        return False
    # Ids memvault stores routinely, paths and identifiers: every piece is a word, a number or an id.
    if all(_WORDISH.match(piece) for piece in _RUN_PIECES.split(core) if piece):
        return False
    return shannon_entropy(core) >= ENTROPY_THRESHOLD


def _is_literal(value: str, sep: str, quoted: bool, rest_of_line: str) -> bool:
    """True if an assigned value is a literal secret rather than a placeholder, reference, path or prose."""
    value = value.strip()
    if len(value) < 4 or _PLACEHOLDER.match(value) or _PATHLIKE.match(value):
        return False
    if not quoted and ":" in sep and "=" not in sep:
        # "Secret: the plan is..." is prose; "password: hunter2" (YAML) is not. An unquoted colon value counts
        # only if it is the last thing on the line or does not read as a plain word.
        if rest_of_line.strip() and not rest_of_line.lstrip().startswith("#") and value.isalpha():
            return False
    return True


def find_secrets(text: str) -> list[SecretFinding]:
    """Return every place in ``text`` that looks like a secret, in text order; an empty list if none does."""
    found: list[tuple[int, int, SecretFinding]] = []  # (start, end, finding)
    taken: list[tuple[int, int]] = []

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def overlaps(start: int, end: int) -> bool:
        return any(start < e and s < end for s, e in taken)

    def add(kind: str, start: int, end: int, excerpt: str, span: tuple[int, int] | None = None) -> None:
        s, e = span or (start, end)
        if overlaps(s, e):
            return
        taken.append((s, e))
        found.append((start, end, SecretFinding(kind, excerpt, line_of(start))))

    for m in _PEM.finditer(text):
        header = m.group(0).split("\n", 1)[0][:60]
        add("private key block", m.start(), m.end(), f"{header}… ({len(m.group(0))} chars)")
    for kind, pattern, group in _SHAPED:
        for m in pattern.finditer(text):
            secret = m.group(group)
            if kind == "connection string with password" and _PLACEHOLDER.match(secret):
                continue
            add(kind, m.start(group), m.end(group), _excerpt(secret), span=(m.start(), m.end()))
    for m in _ASSIGNMENT.finditer(text):
        group = next(g for g in ("dq", "sq", "bare") if m.group(g) is not None)
        value = m.group(group)
        line_end = text.find("\n", m.end())
        rest = text[m.end(): len(text) if line_end < 0 else line_end]
        if not _is_literal(value, m.group("sep"), group != "bare", rest):
            continue
        word = m.group("word").lower()
        kind = "password assignment" if word in _PASSWORD_WORDS else "generic API key assignment"
        add(kind, m.start(group), m.end(group), _excerpt(value), span=(m.start(), m.end()))
    for m in _RUN.finditer(text):
        if _looks_random(m.group(0)):
            add("high-entropy token", m.start(), m.end(), _excerpt(m.group(0)))

    found.sort(key=lambda item: (item[0], item[1]))
    return [finding for _, _, finding in found]


def describe(findings: Iterable[SecretFinding]) -> str:
    """One line for an error message: ``looks like a secret: AWS access key id on line 1 (AKIA… 20 chars)``."""
    parts = []
    for f in findings:
        redacted = re.sub(r" \((\d+ chars)\)$", r" \1", f.excerpt)
        parts.append(f"{f.kind} on line {f.line} ({redacted})")
    if not parts:
        return "no secrets found"
    return "looks like a secret: " + ", ".join(parts)
