"""Secret detection: refuse to write text that looks like a credential, because the vault is a pushed git repo.

Every write and the git pre-commit hook go through this module: :func:`scan_fields` for a whole write (text,
tags, front matter, episode meta, dict keys included), :func:`find_secrets` for one text, :func:`describe` for
the one-line message. It is stdlib only and cheap (a 100 KB text scans in about 10 ms of CPU), because it runs on
every write.

How a text is read:

1. *Normalised* first, so a secret cannot hide behind Unicode: compatibility folding (NFKC's fullwidth ``＝``,
   ligatures, non-breaking spaces; accents dropped), zero-width and other format characters removed (U+200B,
   U+200C, U+200D, U+2060, U+FEFF, bidi controls), Cyrillic and Greek look-alikes mapped to Latin (``pаssword``
   with a Cyrillic ``а``), and backslash-newline continuations joined. Line numbers still refer to the
   original text.
2. *Private keys* (PEM of any case, PuTTY key files) are found on the normalised text.
3. Text that is public by design is *masked*: certificates and public-key PEM blocks, ssh public keys,
   ``SHA256:`` fingerprints, subresource-integrity and go.sum hashes, ``data:`` URIs, sops ciphertext,
   Stripe publishable keys, Google OAuth client ids.
4. *Shaped* rules recognise a credential by its format (cloud and SaaS tokens, JWTs, ``scheme://user:pw@host``,
   password hashes, ``.pgpass`` and ``.netrc`` lines); *command-line* rules catch ``mysql -pPW``,
   ``sshpass -p PW``, ``curl -u user:PW`` and ``--password PW``; *contextual* rules look at an assignment
   (``password=...``, ``api_key: ...``) whose value is a literal rather than a placeholder or a reference, and
   at a hex key next to a key-like name (``the api key is 3f9a…``); :mod:`.secret_forms` finds Azure SAS
   signatures and decodes percent-encoded text to scan it again, as base64 is.
5. A last, *generic* rule flags long high-entropy runs. It deliberately lets through what memvault stores every
   day: hex ids (git commits, sha256 digests), ULIDs, UUIDs, paths, identifiers made of words
   (``NullPointerExceptionInConnectionPoolFactory2``), URL paths, and base64 that decodes to plain text (which
   is itself scanned, so base64 of ``password=...`` is still found). A run without digits is flagged only as
   the value of an assignment, where a random mixed-case value is a secret and a word is not.

Findings never carry the secret itself: :attr:`SecretFinding.excerpt` shows at most the first four characters
(fewer for short values, so a short password is not half printed) and the length. ``docs/secrets.md`` has the
table of kinds, what is deliberately not flagged and the measured recall and false-positive rate.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress
from urllib.parse import unquote

from .secret_rules import (  # the rule tables
    _ASSIGNED,
    _BASE58_ADDRESS,
    _BECH32,
    _REMARK,
    _ASSIGNMENTS,
    _BENIGN_LABEL,
    _CMDLINE,
    _CONSONANTS,
    _HEX,
    _HEX_GAP,
    _HEX_GAP_VETO,
    _HEX_KEY_WORD,
    _IDS,
    _KEY_QUALIFIER,
    _KEYLIKE_NAME,
    _NAME_CHARS,
    _OBJECT_NAME,
    _PASSWORD_WORDS,
    _PATHLIKE,
    _PGPASS,
    _PGPASS_HOST,
    _PLACEHOLDER,
    _PLACEHOLDER_CHECKED,
    _PRIVATE_KEYS,
    _PROSE_PAIRS,
    _PROSE_GIVEN_BY,
    _PROSE_GIVEN_PASSWORD,
    _PROSE_PASSWORD,
    _PROSE_WORDS,
    _PUBLIC,
    _PUBLIC_BLOCKS,
    _RUN_PIECES,
    _RUN_TABLE,
    _SEGMENT,
    _SHAPED,
    _TIME_PIECE,
    _URL_PATH,
    _WORDISH,
    _blocks,
)
from .secret_forms import SAS_KIND, sas_signatures, url_encoded

ENTROPY_MIN_LENGTH = 32
#: The kind of the generic rule's findings (long high-entropy runs).
ENTROPY_KIND = "high-entropy token"
ENTROPY_THRESHOLD = 4.0  # bits per character; random base64/base62 sits near 4.5-5.0, hex can never exceed 4.0
# A run with no digit is held to a higher bar: a random mixed-case 32-letter value sits near 4.5, while the
# long words and names that reach this rule stay below 4.2.
LETTERS_ONLY_THRESHOLD = 4.2
BASE64_TEXT_MIN_LENGTH = 20  # shorter base64 runs are not decoded; they are too short to hide a credential


@dataclass(frozen=True)
class SecretFinding:
    """One place in a text (or in one field of a write) that looks like a secret."""

    kind: str
    excerpt: str  # redacted, safe to print: "AKIA… (20 chars)"
    line: int  # 1-based, in the original text (of the field, when ``field`` is set)
    field: str = ""  # where in a write, set by scan_fields: "text", "tags[2]", "meta.db.password"


# --- normalisation ------------------------------------------------------------------------------------------

# Letters that render like Latin ones. Only the look-alikes an attacker (or a paste from a chat tool) would use
# inside keywords and tokens; Unicode's full confusables list is far larger and not needed for matching.
_CONFUSABLES = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "з": "3", "і": "i", "ї": "i", "ј": "j", "к": "k", "м": "m",
    "н": "h", "о": "o", "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "ԁ": "d", "һ": "h",
    "ԛ": "q", "ԝ": "w", "ɡ": "g", "ӏ": "l",
    "А": "A", "В": "B", "Е": "E", "З": "3", "І": "I", "Ј": "J", "К": "K", "М": "M", "Н": "H", "О": "O",
    "Р": "P", "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "Ԁ": "D", "Ԛ": "Q", "Ԝ": "W", "Ӏ": "I",
    # Greek
    "α": "a", "β": "b", "γ": "y", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t",
    "υ": "u", "χ": "x", "ω": "w",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    # Latin letters outside ASCII that fold to nothing under NFKD
    "ı": "i", "ȷ": "j", "ł": "l", "ø": "o", "đ": "d", "ß": "ss",
}
# Invisible letters that are not format characters, so the Cf test below does not catch them.
_INVISIBLE = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u034f"}


@lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    if ch in _INVISIBLE or unicodedata.category(ch) == "Cf":
        return ""  # zero-width space/joiners, word joiner, BOM, soft hyphen, bidi controls
    # NFKD does NFKC's compatibility folding (fullwidth forms, ligatures, NBSP) and exposes accents to drop.
    out = []
    for c in unicodedata.normalize("NFKD", ch):
        if unicodedata.category(c) in ("Mn", "Me"):
            continue  # combining marks (and variation selectors): "pässword" reads as "password"
        out.append(_CONFUSABLES.get(c, c))
    return "".join(out)


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_CONTINUATION = re.compile(r"\\\r?\n[ \t]*")


def normalise(text: str) -> str:
    """The text as the detector reads it: folded, invisible characters dropped, look-alikes mapped to Latin.

    Newlines are never added or removed here, so a position in the result is on the same line as in ``text``.
    (Backslash-newline continuations are joined later, by the scanner, which keeps track of the lines.)
    """
    if text.isascii():
        return text  # the common case, and ASCII is already what every rule below expects
    return _NON_ASCII.sub(lambda m: "".join(_fold_char(c) for c in m.group()), text)


def _join_continuations(text: str) -> tuple[str, list[int]]:
    # A token wrapped with "\<newline>" is one token to a shell, and should be to us. The next line's indent
    # goes too, so an indented continuation of a wrapped key is read whole.
    if "\\\n" not in text and "\\\r\n" not in text:
        return text, []
    parts, joins, last, size = [], [], 0, 0
    for m in _CONTINUATION.finditer(text):
        parts.append(text[last:m.start()])
        size += m.start() - last
        joins.append(size)
        last = m.end()
    parts.append(text[last:])
    return "".join(parts), joins


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


def _is_identifier(piece: str) -> bool:
    """True for a camelCase name built from words: NullPointerExceptionInJdbcConnectionPoolFactoryV2.

    Random base62 splits into one- and two-letter segments; a name splits into words, acronyms (HTTP, HPA) and
    consonant abbreviations (Jdbc, Sql, Jwt), with few short pieces (In, V) and few numbers. An all-lower-case
    piece is left to ``_WORDISH``: without case changes, a long run of letters and digits is not a name.
    """
    segments = _SEGMENT.findall(piece)
    if "".join(segments) != piece or piece.islower() or not any(c.islower() for c in piece):
        return False
    letters = [s for s in segments if not s.isdigit()]
    if len(letters) < 2 or len(segments) - len(letters) > max(2, len(letters) // 2):
        return False
    short = 0
    for seg in letters:
        vowel = any(c in "aeiouyAEIOUY" for c in seg)
        if len(seg) <= 2:
            short += 1  # In, To, V: fine now and then, but random text is made of nothing else
        elif seg.isupper() and len(seg) <= 5 or len(seg) <= 4 and not vowel:
            continue  # an acronym or an abbreviation: HTTP, HPA, Jdbc, Sql
        elif not vowel or _CONSONANTS.search(seg):
            return False  # "Xkqzwv" is not a word
    return short * 3 <= len(letters)


def _is_benign_piece(piece: str) -> bool:
    if _IDS.match(piece) or _TIME_PIECE.fullmatch(piece):
        return True
    if _WORDISH.match(piece):
        # ...but a long single-case run of letters and digits (k3jd92hf...) is what base32/base36 keys look
        # like: names of that length have separators or case changes.
        return not (len(piece) > 16 and not piece.isalpha() and (piece.islower() or piece.isupper()))
    return _is_identifier(piece)


def _base64_text(run: str, min_length: int = BASE64_TEXT_MIN_LENGTH) -> str | None:
    """The text a base64 run encodes, if it encodes printable text (random key bytes never do)."""
    body = run.rstrip("=")
    if len(body) < min_length or len(body) % 4 == 1:
        return None
    urlsafe = "-" in body or "_" in body
    if urlsafe and ("+" in body or "/" in body):
        return None
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_" if urlsafe else None, validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None
    printable = sum(1 for c in decoded if c.isprintable() or c in "\t\r\n")
    return decoded if printable >= 0.95 * len(decoded) else None


def _looks_random(run: str, assigned: bool) -> bool:
    if len(run.rstrip("=")) < ENTROPY_MIN_LENGTH:
        return False
    core = run.strip("=/+-_")
    if not any(c.isalpha() for c in core):
        return False
    # Ids memvault stores routinely, paths and identifiers: every piece is a word, a name, a number or an id.
    if all(_is_benign_piece(piece) for piece in _RUN_PIECES.split(core) if piece):
        return False
    entropy = shannon_entropy(core)
    if any(c.isdigit() for c in core):
        return entropy >= ENTROPY_THRESHOLD
    # No digit: long words and names are common in prose, so only an assigned, mixed-case, random value counts.
    return assigned and core != core.lower() and core != core.upper() and entropy >= LETTERS_ONLY_THRESHOLD


def _is_literal(value: str, sep: str, quoted: bool, rest_of_line: str) -> bool:
    """True if an assigned value is a literal secret rather than a placeholder, reference, path or prose."""
    value = value.strip()
    if len(value) < 4 or _PLACEHOLDER.match(value) or _PATHLIKE.match(value) or _REMARK.match(value):
        return False
    if "%" in value and _PLACEHOLDER.match(unquote(value)):
        return False  # a query string's password=%24%7BPW%7D is ${PW}
    # "Secret: the plan is..." is prose; "password: hunter2" (YAML) is not. An unquoted colon value counts only if
    # it is the last thing on the line or does not read as a plain word.
    colon_prose = not quoted and ":" in sep and "=" not in sep and value.isalpha()
    return not (colon_prose and rest_of_line.strip() and not rest_of_line.lstrip().startswith("#"))


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _lower(text: str) -> str:
    lower = text.lower()
    if len(lower) == len(text):
        return lower
    # A few characters lower-case to two (U+0130): keep them, so positions in both texts stay the same.
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


class _Scan:
    """One text being scanned: its normalised form, its lower-cased twin, and the findings so far.

    The first rule to claim a span wins, so one secret is reported once, by its most specific rule.
    """

    def __init__(self, text: str) -> None:
        self.text, self._joins = _join_continuations(normalise(text))
        self.lower = _lower(self.text)
        self._newlines: list[int] | None = None
        self.found: list[tuple[int, int, SecretFinding]] = []
        self._starts: list[int] = []  # claimed spans, disjoint and sorted, so one bisect finds an overlap
        self._ends: list[int] = []

    def line_of(self, pos: int) -> int:
        if self._newlines is None:  # built on the first finding only: most texts have none
            self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        return bisect_left(self._newlines, pos) + bisect_right(self._joins, pos) + 1

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect_left(self._starts, end)  # spans starting before `end`; the last of them ends latest
        return i > 0 and self._ends[i - 1] > start

    def add(self, kind: str, start: int, end: int, excerpt: str, span: tuple[int, int] | None = None) -> None:
        s, e = span or (start, end)
        if self.overlaps(s, e):
            return
        i = bisect_left(self._starts, s)
        self._starts.insert(i, s)
        self._ends.insert(i, e)
        self.found.append((start, end, SecretFinding(kind, excerpt, self.line_of(start))))

    def mask(self, spans: list[tuple[int, int]]) -> None:
        """Blank the spans (same length, same newlines), so no later rule sees them."""
        if not spans:
            return
        parts, last = [], 0
        for start, end in sorted(spans):
            start = max(start, last)
            if start >= end:
                continue
            parts.append(self.text[last:start])
            parts.append(re.sub(r"[^\n]", " ", self.text[start:end]))
            last = end
        parts.append(self.text[last:])
        self.text = "".join(parts)
        self.lower = _lower(self.text)

    def result(self) -> list[SecretFinding]:
        self.found.sort(key=lambda item: (item[0], item[1]))
        return [finding for _, _, finding in self.found]


def find_secrets(text: str) -> list[SecretFinding]:
    """Return every place in ``text`` that looks like a secret, in text order; an empty list if none does.

    ``line`` in each finding is the line of the original ``text``, whatever normalisation did.
    """
    memo = _REMEMBERED.get()
    if memo is not None:
        found = memo.get(text)
        if found is None:
            found = memo[text] = _find_short(text) if len(text) <= SHORT_TEXT else tuple(_find(text, decode=True))
        return list(found)
    if len(text) <= SHORT_TEXT:
        return list(_find_short(text))
    return _find(text, decode=True)


#: The findings of every text scanned inside :func:`scans_remembered`, by text (None outside one).
_REMEMBERED: ContextVar[dict[str, tuple[SecretFinding, ...]] | None] = ContextVar("memvault_scans", default=None)


@contextmanager
def scans_remembered() -> Iterator[None]:
    """Within the block, a text scanned again is answered from its first scan (the findings are a function of the
    text alone, so every check still sees what a scan would find). For a batch whose texts are scanned twice: an
    import scans each item to cut a secret's lines, then the gate scans the whole episode (80% of an import's time
    went to the second scan). What is remembered is dropped when the block ends; a block inside one shares it."""
    token = _REMEMBERED.set({}) if _REMEMBERED.get() is None else None
    try:
        yield
    finally:
        if token is not None:
            _REMEMBERED.reset(token)


#: Texts up to this long are remembered with their findings: the fields of a batch of writes (a session's
#: episodes: the same source, kind, tags, meta keys, session id and directory in every one) are scanned once.
SHORT_TEXT = 256


@lru_cache(maxsize=8192)
def _find_short(text: str) -> tuple[SecretFinding, ...]:
    return tuple(_find(text, decode=True))


def _find(text: str, decode: bool) -> list[SecretFinding]:
    return _scan_text(text, decode).result()


def _scan_text(text: str, decode: bool) -> _Scan:
    scan = _Scan(text)
    for key in _PRIVATE_KEYS:
        for start, end in _blocks(key, scan.lower):
            block = scan.text[start:end]
            header = block.split("\n", 1)[0][:60]
            scan.add(key.kind, start, end, f"{header}… ({len(block)} chars)")
    public = [span for block in _PUBLIC_BLOCKS for span in _blocks(block, scan.lower)]
    public += [(m.start() - rule.back, m.end()) for rule in _PUBLIC
               for m in rule.pattern.finditer(scan.lower if rule.lower else scan.text)]
    public += _public_addresses(scan.text)
    scan.mask(public)
    _shaped(scan)
    for start, end, sig in sas_signatures(scan.text):
        scan.add(SAS_KIND, start, end, _excerpt(sig), span=(start - 4, end))
    _command_lines(scan)
    _assignments(scan)
    if decode:  # percent-encoded text is decoded and scanned again, as base64 is (once: decode=False inside)
        for start, end, decoded in url_encoded(scan.text, scan.lower):
            inner = [] if scan.overlaps(start, end) else _find(decoded, decode=False)
            if inner:
                scan.add(f"{inner[0].kind} (URL-encoded)", start, end, _excerpt(scan.text[start:end]))
    _runs(scan, decode)
    return scan


def secret_spans(text: str) -> list[tuple[int, int, SecretFinding]]:
    """Where each secret of ``text`` is: ``(start, end, finding)`` with ``text[start:end]`` the secret itself (the
    value, not the name it is assigned to), in text order. The same detector as :func:`find_secrets`; positions
    are mapped back through normalisation, so they index the original text."""
    scan = _scan_text(text, True)
    if not scan.found:
        return []
    where = _original_positions(text)
    out = []
    for start, end, finding in sorted(scan.found, key=lambda item: (item[0], item[1])):
        if where is not None:
            start, end = where[start], where[max(start, end - 1)] + 1
        out.append((start, end, finding))
    return out


def redact(text: str, mark: str = "<redacted:{kind}>") -> tuple[str, list[SecretFinding]]:
    """``text`` with every secret :func:`secret_spans` finds replaced by ``mark`` (``{kind}`` is the finding's
    kind, spaces as dashes: ``<redacted:GitHub-token>``, which reads as a placeholder to the detector itself), and
    the findings. The rest of the text is kept as it was."""
    spans = secret_spans(text)
    out, last = [], 0
    for start, end, finding in spans:
        if start < last:
            continue  # inside a span already replaced
        out.append(text[last:start])
        out.append(mark.format(kind=finding.kind.replace(" ", "-")))
        last = end
    out.append(text[last:])
    return "".join(out), [f for _, _, f in spans]


def _original_positions(text: str) -> list[int] | None:
    """For each character of the scanned text (normalised, continuations joined), its index in ``text``; None
    when the two are the same text."""
    positions: list[int] | None = None
    scanned = text
    if not text.isascii():
        positions = []
        for i, ch in enumerate(text):
            positions.extend([i] * (1 if ch.isascii() else len(_fold_char(ch))))
        scanned = normalise(text)
    if "\\\n" in scanned or "\\\r\n" in scanned:
        kept: list[int] = []
        last = 0
        for m in _CONTINUATION.finditer(scanned):
            kept.extend(range(last, m.start()))
            last = m.end()
        kept.extend(range(last, len(scanned)))
        positions = [positions[i] for i in kept] if positions is not None else kept
    if positions is not None:
        positions.append(len(text))
    return positions


_BECH32_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_BASE58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _bech32_valid(text: str) -> bool:
    """BIP 173 checksum (bech32 or bech32m) of a lower-case ``hrp1data`` string."""
    hrp, _, data = text.rpartition("1")
    values = [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp] + [_BECH32_CHARSET.index(c) for c in data]
    chk = 1
    for value in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ value
        for i, gen in enumerate((0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)):
            if (top >> i) & 1:
                chk ^= gen
    return chk in (1, 0x2BC830A3)


def _base58check_valid(text: str) -> bool:
    """The four checksum bytes of a Base58Check string (a Bitcoin P2PKH or P2SH address)."""
    import hashlib

    number = 0
    for c in text:
        number = number * 58 + _BASE58_ALPHABET.index(c)
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    raw = b"\0" * (len(text) - len(text.lstrip("1"))) + raw
    if len(raw) < 5:
        return False
    body, check = raw[:-4], raw[-4:]
    return hashlib.sha256(hashlib.sha256(body).digest()).digest()[:4] == check


def _public_addresses(text: str) -> list[tuple[int, int]]:
    """Spans of age recipients and Bitcoin addresses whose checksum holds: public keys and addresses, by design."""
    spans = [(m.start(), m.end()) for m in _BECH32.finditer(text) if _bech32_valid(m.group(0))]
    spans += [(m.start(), m.end()) for m in _BASE58_ADDRESS.finditer(text) if _base58check_valid(m.group(0))]
    return spans


def _shaped(scan: _Scan) -> None:
    text = scan.text
    for rule in _SHAPED:
        for m in rule.pattern.finditer(scan.lower if rule.lower else text):
            start, end = m.start(rule.group) - rule.back, m.end(rule.group)
            secret = text[start:end]
            if rule.kind in _PLACEHOLDER_CHECKED and (_PLACEHOLDER.match(secret) or len(secret) < 4):
                continue
            if rule.kind == "authorization header" and _is_benign_piece(secret):
                continue  # "Bearer authentication", "Bearer TokenGoesHere"
            if rule.kind == "registry auth" and ":" not in (_base64_text(secret, min_length=8) or ""):
                continue  # a docker config "auth" is base64 of user:password; "auth": "required" is not
            scan.add(rule.kind, start, end, _excerpt(secret), span=(min(start, m.start()), m.end()))
    for m in _PGPASS.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if m.start() - line_start > 255 or not _PGPASS_HOST.fullmatch(text, line_start, m.start()):
            continue
        secret = m.group(1)
        if _PLACEHOLDER.match(secret) or len(secret) < 4:
            continue
        scan.add("pgpass entry", m.start(1), m.end(1), _excerpt(secret), span=(line_start, m.end()))


def _command_lines(scan: _Scan) -> None:
    for pattern in _CMDLINE:
        for m in pattern.finditer(scan.text):
            value = _unquote(m.group("v"))
            if value.startswith("-") or not _is_literal(value, "=", True, ""):
                continue
            scan.add("password on command line", m.start("v"), m.end("v"), _excerpt(value),
                     span=(m.start(), m.end()))


def _assignments(scan: _Scan) -> None:
    text, lower = scan.text, scan.lower
    for pattern in _ASSIGNMENTS:
        for m in pattern.finditer(lower):
            word_start = m.start("word")
            word = m.group("word")
            if word == "key":
                qualifier = _KEY_QUALIFIER.search(lower, max(0, word_start - 11), word_start)
                if qualifier is None:
                    continue  # "key: db.primary" is a fact key, not an API key
                word = lower[qualifier.start(): m.end("word")]
            # The name is the run of name characters before the word; nothing path-like may precede it, so
            # /etc/passwd: is not an assignment.
            name_start = word_start
            while name_start > 0 and text[name_start - 1] in _NAME_CHARS:
                name_start -= 1
            if name_start > 0 and (text[name_start - 1] in "/\\" or text[name_start - 1].isalnum()):
                continue
            group = next(g for g in ("dq", "sq", "bare") if m.group(g) is not None)
            start, end = m.start(group), m.end(group)
            value = re.sub(r"\n[ \t]*", "", text[start:end])  # a value broken over two lines is one value
            line_end = text.find("\n", m.end())
            rest = text[m.end(): len(text) if line_end < 0 else line_end]
            if not _is_literal(value, m.group("sep"), group != "bare", rest):
                continue
            if word == "secret" and _OBJECT_NAME.match(value):
                continue  # Helm's existingSecret: pg-credentials names a Kubernetes Secret, it does not hold one
            stem = re.sub(r"[_-]", "", word)
            kind = "password assignment" if stem in _PASSWORD_WORDS else "generic API key assignment"
            scan.add(kind, start, end, _excerpt(value), span=(name_start, m.end()))
    given = [m for m in _PROSE_GIVEN_PASSWORD.finditer(lower) if lower.endswith(_PROSE_GIVEN_BY, 0, m.start())]
    pairs = [m for pattern in _PROSE_PAIRS for m in pattern.finditer(lower)]  # "login: admin / Hunter2!"
    for m in [*_PROSE_PASSWORD.finditer(lower), *given, *pairs]:
        start = m.start("v")
        value = text[start: m.end("v")].rstrip(".,;:)!?")  # sentence punctuation, most likely
        plain = value.isalpha() or value.isdigit() and len(value) < 8  # a word, or "12 characters"
        if len(value) >= 6 and not plain and _is_literal(value, "=", True, "") and "://" not in value:
            scan.add("password in prose", start, start + len(value), _excerpt(value), span=(m.start(), m.end()))


def _runs(scan: _Scan, decode: bool) -> None:
    """The hex-next-to-a-key rule, base64 runs that decode to a secret, and the generic high-entropy rule."""
    text, lower = scan.text, scan.lower
    data = text.encode("ascii", "replace").translate(_RUN_TABLE)  # one byte per character: same positions
    url_paths = [(m.start(), m.end()) for m in _URL_PATH.finditer(text)]
    path_starts = [s for s, _ in url_paths]
    tokens = data.split()
    # The long tokens, picked without a Python-level loop over every word of the text.
    long_tokens = compress(tokens, map(BASE64_TEXT_MIN_LENGTH.__le__, map(len, tokens)))
    cursor = 0
    for token in long_tokens:
        start = data.find(token, cursor)
        end = cursor = start + len(token)
        i = bisect_right(path_starts, start) - 1
        if i >= 0 and start < url_paths[i][1]:
            continue  # a URL path: dashboards, documents and commits are named by long ids
        if scan.overlaps(start, end):
            continue
        # padding is not a run character; take it along for decoding and the excerpt
        while end < len(text) and text[end] == "=" and end - start - len(token) < 3:
            end += 1
        run = text[start:end]
        line_start = text.rfind("\n", 0, start) + 1
        before = lower[max(line_start, start - 40): start]
        if _hex_key(scan, run, start, before):
            continue
        decoded = _base64_text(run) if decode else None
        if decoded is not None:
            inner = _find(decoded, decode=False)
            if inner:
                scan.add(f"{inner[0].kind} (base64-encoded)", start, end, _excerpt(run))
            continue  # encoded text, not a key
        if _BENIGN_LABEL.search(before):
            continue
        if _looks_random(run, assigned=bool(_ASSIGNED.search(before))):
            scan.add(ENTROPY_KIND, start, end, _excerpt(run))


def _hex_key(scan: _Scan, run: str, start: int, before: str) -> bool:
    """Report a 32+ hex-digit key that follows a key-like name; True if one was found in ``run``."""
    for h in _HEX.finditer(run):
        if h.start() > 0 and run[h.start() - 1].isalnum() or h.end() < len(run) and run[h.end()].isalnum():
            continue  # hex inside a longer word
        window = before + run[: h.start()].lower() if h.start() else before
        for w in _HEX_KEY_WORD.finditer(window):
            gap = window[w.end():]
            if _HEX_GAP.match(gap) and len(gap.split()) <= 3 and not _HEX_GAP_VETO.search(gap):
                secret = h.group()
                scan.add("hex key next to a key name", start + h.start(), start + h.end(), _excerpt(secret))
                return True
    return False


#: Every kind a finding can have (a base64-encoded secret is reported as "<kind> (base64-encoded)").
KINDS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [key.kind for key in _PRIVATE_KEYS]
        + [rule.kind for rule in _SHAPED]
        + [SAS_KIND, "pgpass entry", "password on command line", "password assignment", "generic API key assignment",
           "password in prose", "hex key next to a key name", ENTROPY_KIND]
    )
)


# --- fields of a write ---------------------------------------------------------------------------------------

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _field_is_literal(value: str) -> bool:
    """True if a string stored under a key-like name (password, api_key) is itself the secret."""
    value = value.strip()
    if not _is_literal(value, "=", True, ""):
        return False
    words = value.lower().split()
    # "see the team password manager" is a note about a secret; "correct horse battery staple" is one.
    return not (len(words) >= 3 and any(w in _PROSE_WORDS for w in words))


def _child(path: str, key: str) -> str:
    name = key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=False)
    if not path:
        return name if _PLAIN_KEY.match(key) else f"[{name}]"
    return f"{path}.{name}" if _PLAIN_KEY.match(key) else f"{path}[{name}]"


def scan_fields(fields: Mapping[str, object]) -> list[SecretFinding]:
    """Every secret in the fields of one write, each finding naming its field in ``.field``.

    This is the one check both memvault's writes and the git pre-commit hook apply. Pass the whole write: the
    text or body, the tags, the front matter, an episode's meta. Strings are scanned with :func:`find_secrets`;
    lists and tuples name their items ``tags[2]``; mappings are walked to any depth and name their entries
    ``meta.db.password`` (a key that is not a plain name is quoted: ``meta["db host"]``); mapping keys are
    scanned too, and a key that itself looks like a secret is named ``meta.<key 3>`` so the message never
    repeats it. A key-like name is context of its own: ``{"password": "hunter2hunter2"}`` is a finding
    (``password assignment``) though the value alone is not, unless the value is a placeholder, a reference, a
    path or a sentence. Numbers under a key-like name are read as text (YAML reads ``password: 12345678`` as an
    int); other numbers, booleans and None are skipped; any other object is scanned as ``str(value)``.

    ``line`` in a finding is the line within that field's text. Findings come in field order.
    """
    found: list[SecretFinding] = []
    _walk(fields, "", None, found, set())
    return found


def _walk(value: object, path: str, name: str | None, found: list[SecretFinding], seen: set[int]) -> None:
    if isinstance(value, Mapping):
        if id(value) in seen:
            return  # a cycle: each container is scanned once
        seen.add(id(value))
        for index, (key, item) in enumerate(value.items()):
            key_text = str(key)
            key_findings = find_secrets(key_text)
            label = _child(path, key_text)
            if key_findings:
                label = f"{path}.<key {index}>" if path else f"<key {index}>"
                found.extend(_in_field(f, label) for f in key_findings)
            _walk(item, label, key_text, found, seen)
        seen.discard(id(value))
    elif isinstance(value, (list, tuple, set, frozenset)):
        if id(value) in seen:
            return
        seen.add(id(value))
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        for index, item in enumerate(items):
            _walk(item, f"{path}[{index}]", name, found, seen)
        seen.discard(id(value))
    elif value is None or isinstance(value, bool):
        return
    elif isinstance(value, (int, float)):
        if isinstance(value, int) and _keylike_word(name):
            _scan_value(str(value), path, name, found)
    else:
        if isinstance(value, (bytes, bytearray)):
            text = bytes(value).decode("utf-8", errors="replace")
        else:
            text = value if isinstance(value, str) else str(value)
        _scan_value(text, path, name, found)


def _scan_value(text: str, path: str, name: str | None, found: list[SecretFinding]) -> None:
    findings = find_secrets(text)
    if findings:
        found.extend(_in_field(f, path) for f in findings)
        return
    word = _keylike_word(name)
    value = normalise(text).strip()
    if word is None or "\n" in value or not _field_is_literal(value):
        return
    if word == "secret" and _OBJECT_NAME.match(value):
        return  # {"existingSecret": "pg-credentials"} names a Kubernetes Secret
    kind = "password assignment" if word in _PASSWORD_WORDS else "generic API key assignment"
    found.append(SecretFinding(kind, _excerpt(value), 1, path))


def _keylike_word(name: str | None) -> str | None:
    """The secret word a field name ends with (``db_password`` -> ``password``), or None."""
    if name is None:
        return None
    match = _KEYLIKE_NAME.fullmatch(normalise(name).strip())
    return re.sub(r"[_-]", "", match.group("word").lower()) if match else None


def _in_field(finding: SecretFinding, field: str) -> SecretFinding:
    return SecretFinding(finding.kind, finding.excerpt, finding.line, field)


def describe(findings: Iterable[SecretFinding]) -> str:
    """One line for an error message, naming the field when there is one.

    ``looks like a secret: AWS access key id on line 1 (AKIA… 20 chars)``;
    ``looks like a secret: password assignment in meta.db.password (h… 14 chars)`` (a field's line is given
    only when it is not the first).
    """
    parts = []
    for f in findings:
        redacted = re.sub(r" \((\d+ chars)\)$", r" \1", f.excerpt)
        if f.field:
            where = f"in {f.field}" + (f" on line {f.line}" if f.line > 1 else "")
        else:
            where = f"on line {f.line}"
        parts.append(f"{f.kind} {where} ({redacted})")
    if not parts:
        return "no secrets found"
    return "looks like a secret: " + ", ".join(parts)
