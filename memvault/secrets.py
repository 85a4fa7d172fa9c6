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
   at a hex key next to a key-like name (``the api key is 3f9a…``).
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from itertools import compress

ENTROPY_MIN_LENGTH = 32
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


# --- rules --------------------------------------------------------------------------------------------------
#
# Speed matters (every write is scanned), and Python's regex engine only searches fast for a pattern that
# starts with a literal: a pattern that starts with a character class or a lookbehind is tried at every
# position, some fifty times slower. So every full-text pattern below starts with a literal, and a boundary
# check that would naturally come first is written as a lookbehind *after* the literal (``ghp_(?<![…]ghp_)``).
# Case-insensitive rules run on a lower-cased copy of the text (same length, same positions), not with
# re.IGNORECASE. The generic rule gets its candidate runs from bytes.translate + split, not from a regex.


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int = 1  # the group holding the secret
    lower: bool = False  # match the lower-cased text
    back: int = 0  # the secret starts this many characters before the group (a literal-first pattern)


def _rule(kind: str, pattern: str, group: int = 1, lower: bool = False, back: int = 0) -> _Rule:
    return _Rule(kind, re.compile(pattern), group, lower, back)


@dataclass(frozen=True)
class _Block:
    """A multi-line block: a header, then the rest up to a footer (searched only up to the next header)."""

    kind: str
    header: re.Pattern[str]  # matched on the lower-cased text
    footer: re.Pattern[str] | None
    limit: int  # longest block considered; without a footer in reach, the block is the header (and tail)
    tail: re.Pattern[str] | None = None  # what follows a header that has no footer in reach


_PRIVATE_KEYS = (
    _Block(
        "private key block",
        re.compile(r"---+[ \t]*begin[ \t]+(?:[a-z0-9]+[ \t]+)*?private[ \t]+key(?:[ \t]+block)?[ \t]*---+"),
        re.compile(r"---+[ \t]*end[ \t]+[a-z0-9 \t]*?private[ \t]+key(?:[ \t]+block)?[ \t]*---+"),
        20000,
        # a truncated paste: the header and the base64 (or "Proc-Type:" header) lines that follow it
        re.compile(r"(?:\r?\n[ \t]*(?:[a-z0-9+/=]{16,}|[a-z-]+:[^\n]*))*"),
    ),
    # A PuTTY .ppk file names its key type on the first line; a prose mention of the header does not.
    _Block(
        "PuTTY private key",
        re.compile(r"putty-user-key-file-\d+:[ \t]*(?:ssh-|ecdsa-)[^\n]*"),
        re.compile(r"private-mac:[^\n]*"),
        20000,
        re.compile(r"(?:\r?\n[ \t]*(?:[a-z0-9+/=]{16,}|[a-z-]+:[^\n]*))*"),
    ),
)

# --- public by design: masked before the other rules --------------------------------------------------------

_PUBLIC_BLOCKS = (
    # certificates, CSRs, CRLs, public keys, signatures and encrypted messages in PEM armour; without an END
    # line, the base64 lines that follow the header
    _Block(
        "",
        re.compile(
            r"---+[ \t]*begin[ \t]+(?:trusted[ \t]+|new[ \t]+)?(?:certificate(?:[ \t]+request)?|x509[ \t]+crl"
            r"|(?:rsa[ \t]+|ssh2[ \t]+|pgp[ \t]+)?public[ \t]+key(?:[ \t]+block)?|pgp[ \t]+(?:signature|message)"
            r"|(?:dh|ec|dsa)[ \t]+parameters|pkcs7|cms)[ \t]*---+"
        ),
        re.compile(r"---+[ \t]*end[^\n]*?---+"),
        50000,
        re.compile(r"(?:\r?\n[ \t]*[a-z0-9+/]{40,}={0,2})*"),
    ),
)
_PUBLIC = (
    # ssh public keys, in authorized_keys, known_hosts and .pub files
    *(
        _rule("", prefix + r"[ \t]+aaaa[a-z0-9+/]+={0,3}", 0, lower=True)
        for prefix in (
            r"ssh-(?:rsa|dss|ed25519|ed448)(?:-cert-v01@openssh\.com)?",
            r"ecdsa-sha2-nistp\d{3}(?:-cert-v01@openssh\.com)?",
            r"sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com",
        )
    ),
    # key fingerprints (SHA256:..., MD5:aa:bb:...), docker digests, subresource integrity, go.sum
    _rule("", r"sha(?:1|224|256|384|512)(?:[:=][a-z0-9+/=:]{16,}|-[a-z0-9+/]{40,}={0,2})", 0, lower=True),
    _rule("", r"md5[:=][a-z0-9+/=:]{16,}", 0, lower=True),
    _rule("", r"h1:(?<![a-z0-9]h1:)[a-z0-9+/]{43}=", 0, lower=True),
    _rule("", r"data:(?<![a-z0-9]data:)[\w.+-]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,[a-z0-9+/]+={0,2}", 0,
          lower=True),
    # sops ciphertext: encrypted values are safe to commit, that is the point of sops
    _rule("", r"enc\[aes256_gcm,[^\]\n]*\]", 0, lower=True),
    # publishable by design: Stripe publishable keys, Google OAuth client ids
    _rule("", r"pk_(?<![a-z0-9]pk_)(?:live|test)_[a-z0-9]{16,}", 0, lower=True),
    _rule("", r"\.apps\.googleusercontent\.com(?<=\d-[a-z0-9]{32}\.apps\.googleusercontent\.com)", 0,
          lower=True, back=32),
    # IPFS content ids
    _rule("", r"Qm(?<![A-Za-z0-9]Qm)[1-9A-HJ-NP-Za-km-z]{44}(?![A-Za-z0-9])", 0),
)


def _blocks(block: _Block, lower: str) -> list[tuple[int, int]]:
    """Spans of ``block`` in the lower-cased text, each searched for its footer only up to the next header."""
    headers = list(block.header.finditer(lower))
    spans = []
    for i, h in enumerate(headers):
        reach = min(h.end() + block.limit, headers[i + 1].start() if i + 1 < len(headers) else len(lower))
        footer = block.footer.search(lower, h.end(), reach) if block.footer else None
        if footer is not None:
            spans.append((h.start(), footer.end()))
        else:
            tail = block.tail.match(lower, h.end(), reach) if block.tail else None
            spans.append((h.start(), tail.end() if tail else h.end()))
    return spans


# --- shaped rules ---------------------------------------------------------------------------------------------

_T = r"[A-Za-z0-9_-]"  # a token character
_END = r"(?![A-Za-z0-9_-])"


def _token(kind: str, prefix: str, rest: str, end: str = _END) -> _Rule:
    """A token that starts with a literal ``prefix`` not glued to a longer run."""
    lit = re.escape(prefix)
    return _rule(kind, f"({lit}(?<![A-Za-z0-9_-]{lit}){rest}){end}")


_SHAPED: tuple[_Rule, ...] = (
    _token("AWS access key id", "AKIA", "[A-Z0-9]{16}", r"(?![A-Za-z0-9])"),
    _token("AWS access key id", "ASIA", "[A-Z0-9]{16}", r"(?![A-Za-z0-9])"),
    _rule("AWS secret access key",
          r"aws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?([a-z0-9/+=]{40})(?![a-z0-9/+=])", lower=True),
    _token("GitHub token", "gh", "[pousr]_[A-Za-z0-9]{30,}", ""),
    _token("GitHub token", "github_pat_", "[A-Za-z0-9_]{22,}", ""),
    _token("GitLab token", "gl", "(?:pat|dt|rt|ptt|ft|imt|oas|cbt|soat|ffct|agent)-" + _T + "{20,}", ""),
    _token("GitLab runner registration token", "GR1348941", _T + "{20,}", ""),
    _token("Slack token", "xox", "[abposre]-[A-Za-z0-9-]{10,}", ""),
    _token("Slack token", "xapp-", r"\d-[A-Za-z0-9-]{10,}", ""),
    _rule("Slack webhook URL", r"(https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/]{20,})"),
    _rule("Discord webhook URL",
          r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{60,})"),
    _token("Stripe secret key", "sk_live_", "[A-Za-z0-9]{16,}", ""),
    _token("Stripe secret key", "rk_live_", "[A-Za-z0-9]{16,}", ""),
    _token("Stripe webhook secret", "whsec_", "[A-Za-z0-9]{24,}", ""),
    _token("Google API key", "AIza", "[0-9A-Za-z_-]{35}"),
    _token("Google OAuth client secret", "GOCSPX-", _T + "{28}"),
    _token("JWT", "eyJ", r"[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}", ""),
    _rule("HashiCorp Vault token", r"(hv[sbr]\.(?<![A-Za-z0-9_.-]hv[sbr]\.)[A-Za-z0-9_-]{20,})"),
    _rule("Terraform Cloud token",
          r"(\.atlasv1\.(?<=(?<![A-Za-z0-9])[A-Za-z0-9]{14}\.atlasv1\.)[A-Za-z0-9_-]{60,})", back=14),
    _token("OpenAI API key", "sk-", "(?:proj|svcacct|admin)-" + _T + "{20,}", ""),
    _token("OpenAI API key", "sk-", "[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}", ""),
    _token("Anthropic API key", "sk-ant-", r"(?:api|admin|oat)\d\d-" + _T + "{40,}", ""),
    _token("npm token", "npm_", "[A-Za-z0-9]{36}"),
    _token("PyPI token", "pypi-AgEIcHlwaS5vcmc", _T + "{50,}", ""),
    _token("Hugging Face token", "hf_", "[A-Za-z]{34,}", r"(?![A-Za-z0-9])"),
    _token("SendGrid API key", "SG.", _T + r"{22}\." + _T + "{43}"),
    _token("Twilio API key", "SK", "[0-9a-fA-F]{32}", r"(?![A-Za-z0-9])"),
    _token("Mailgun API key", "key-", "[0-9a-f]{32}", r"(?![A-Za-z0-9])"),
    _rule("Mailchimp API key", r"(-us(?<=(?<![A-Za-z0-9])[0-9a-f]{32}-us)\d{1,2})(?![A-Za-z0-9])", back=32),
    _token("DigitalOcean token", "do", "[opr]_v1_[a-f0-9]{64}"),
    _token("Shopify token", "shp", "(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    _token("Databricks token", "dapi", r"[a-f0-9]{32}(?:-\d)?"),
    # bot id, colon, 35 characters: the match starts at the colon, the secret is what follows it
    _rule("Telegram bot token", r":(?<=[0-9]{8}:)(" + _T + "{35})" + _END),
    _rule("Azure storage account key", r"accountkey=([a-z0-9+/]{86}==)", lower=True),
    _rule("Azure AD client secret",
          r"(Q~(?<=(?<![A-Za-z0-9_~.-])[A-Za-z0-9_~.-]{3}\dQ~)[A-Za-z0-9_~.-]{31,34})(?![A-Za-z0-9_~.-])", back=4),
    _token("Grafana token", "glsa_", "[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}"),
    _token("Grafana token", "glc_", "[A-Za-z0-9+/]{32,}={0,2}", ""),
    _token("New Relic key", "NRAK-", "[A-Z0-9]{27}"),
    _token("Postman API key", "PMAK-", "[a-f0-9]{24}-[a-f0-9]{34}"),
    _token("Linear API key", "lin_api_", "[A-Za-z0-9]{40}"),
    _rule("Doppler token", r"(dp\.(?<![A-Za-z0-9_.-]dp\.)(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,})"),
    _token("Square token", "sq0", "(?:atp|csp)-" + _T + "{22,}", ""),
    _token("Atlassian API token", "ATATT3", "[A-Za-z0-9_=-]{60,}", ""),
    _token("Sentry token", "sntry", "[su]_[A-Za-z0-9+/=_-]{40,}", ""),
    _token("age secret key", "AGE-SECRET-KEY-1", "[0-9A-Z]{58}", ""),
    _rule("registry auth", r"\"auth\"\s*:\s*\"([A-Za-z0-9+/]{8,}={0,2})\""),
    _rule(
        "password hash",
        r"(\$(?<![\w$]\$)(?:(?:2[abxy]|5|6|apr1|y|gy|7)\$[./A-Za-z0-9$=,]{20,}"
        r"|argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+))",
    ),
    # scheme://user:password@host; the user may be empty (redis://:pw@host). The password may not hold '/',
    # so host:port/path@x is not read as credentials.
    _rule("connection string with password", r"://(?<=[A-Za-z0-9]://)[^\s:/@]*:([^\s:/@]+)@[A-Za-z0-9\[]"),
    _rule("netrc password", r"machine[ \t]+\S+(?:\s+(?:login|account)[ \t]+\S+)*\s+password[ \t]+(\S+)",
          lower=True),
    # Last, so the specific token it carries (a JWT, a GitHub token) claims the span first.
    _rule("authorization header",
          r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:bearer|basic|token|bot|apikey)"
          r"[ \t]+([a-z0-9._~+/-]{12,}={0,2})",
          lower=True),
    _rule("authorization header", r"bearer(?<![a-z]bearer)[ \t]+([a-z0-9._~+/-]{12,}={0,2})", lower=True),
)
# Shaped values that must still not be a placeholder: "postgres://user:${PW}@db", "Bearer $TOKEN".
_PLACEHOLDER_CHECKED = {"connection string with password", "netrc password", "authorization header"}

# host:port:database:user:password, a whole line (found from its ":port:", the host checked after)
_PGPASS = re.compile(r"(?m):(?:\d+|\*):[^\s:]+:[^\s:]+:([^\s:]+)[ \t]*\r?$")
_PGPASS_HOST = re.compile(r"[A-Za-z0-9_.*-]+")

# --- passwords on a command line ----------------------------------------------------------------------------

_ARG = r"(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"
_CMD = r"\b[^\n|;&]{0,300}?[ \t]"  # later arguments of the same command (bounded: one huge line stays linear)


def _command(name: str) -> str:
    return f"{re.escape(name)}(?<![\\w-]{re.escape(name)})"


_CMDLINE = tuple(
    re.compile(pattern)
    for pattern in (
        # mysql family: -pPASSWORD (attached; a bare -p prompts). -P is the port, so this is case-sensitive.
        _command("mysql") + r"(?:dump|admin|import|check|show|pump|sh)?" + _CMD + r"-p" + _ARG,
        _command("mariadb") + r"(?:-dump|-admin|-import|-check)?" + _CMD + r"-p" + _ARG,
        _command("sshpass") + _CMD + r"-p[ \t]*" + _ARG,
        _command("redis-cli") + _CMD + r"(?:-a|--pass)[ \t]+" + _ARG,
        _command("curl") + _CMD + r"(?:-u|--user)[ \t]*['\"]?[^\s:'\"]+:(?P<v>[^\s'\"]+)",
        # docker, podman, helm, oc, cf ... login -p PASSWORD
        _command("login") + _CMD + r"(?:-p|--password)[ \t]+" + _ARG,
        r"-pass(?<=[ \t]-pass)(?:in|out)?[ \t]+['\"]?pass:(?P<v>[^\s'\"]+)",  # openssl -passin pass:PW
        r"--(?<![\w-]--)(?:[\w-]*[-_])?(?:password|passwd|passphrase|token|secret|api-?key|access-key|secret-key"
        r"|auth-token)[ \t]+" + _ARG,
    )
)

# --- contextual rule: an assignment to a secret-sounding name ------------------------------------------------

# The secret word must end the name (DB_PASSWORD, auth_token, "api-key"), so secret_name=..., token_ttl=...,
# password_file=... are references or settings, not values. "pass" counts only as its own word (db_pass), so
# bypass= and compass= do not.
_SECRET_WORD = (
    r"password|passwd|passphrase|pwd|(?<![A-Za-z0-9])pass|secret|token|api[_-]?key|apikey|access[_-]?key"
    r"|secret[_-]?key|private[_-]?key|preshared[_-]?key"
    r"|(?:signing|encryption|master|app|license|account|auth|shared|hmac|webhook)[_-]?key"
)
_PASSWORD_WORDS = {"password", "passwd", "passphrase", "pwd", "pass"}
_KEYLIKE_NAME = re.compile(r"(?:.*[^A-Za-z0-9])?[A-Za-z0-9]*?(?P<word>" + _SECRET_WORD + r")", re.IGNORECASE)
_KEY_QUALIFIER = re.compile(
    r"(?:api|access|secret|private|preshared|signing|encryption|master|app|license|account|auth|shared|hmac"
    r"|webhook)[_-]?$"
)

# What follows the name: an optional closing quote, a separator, and a value that may be quoted, may continue
# after a line break inside its quotes, or may stand alone on the next line (YAML's "password:\n  hunter2").
_ASSIGN_TAIL = (
    r"[\"']?(?P<sep>[ \t]*(?::=|[:=])(?![=:])[ \t]*(?:\n[ \t]*(?=[^\s\"']+[ \t]*(?:\n|$)))?)"
    r"(?:\"(?P<dq>[^\"\n]*|[^\"\s]+\n[ \t]*[^\"\s]+)\"|'(?P<sq>[^'\n]*|[^'\s]+\n[ \t]*[^'\s]+)'"
    r"|(?P<bare>[^\s\"',;&)]+))"
)
# One pattern per stem, each starting with its literal (run on the lower-cased text).
_ASSIGNMENTS = tuple(
    re.compile(f"(?P<word>{word}){_ASSIGN_TAIL}")
    for word in (r"pass(?:word|wd|phrase|(?<![a-z0-9]pass))", "pwd", "secret", "token", "key")
)
# Prose: "the grafana admin password is Gr4fana!2026". Only a value that is not a plain word (it holds a digit
# or a symbol) counts, so "the password is stored in vault" and "the password was rotated" stay prose.
_PROSE_PASSWORD = re.compile(
    r"pass(?:word|phrase)(?: for [^\s,;]{1,40})? "
    r"(?:(?:is|was|has been) (?:now )?(?:set|changed|reset|updated) to|(?:set|changed|reset|updated) to|is now|is|was)"
    r"[ \t]+[\"'`]?(?P<v>[^\s\"'`]+)"
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")

# Values that stand for a secret without being one.
_PLACEHOLDER = re.compile(
    r"""^(?:
        <[^>]*>                         # <password>
      | \$.*                            # $VAR, ${VAR}, $(cat file), ${{ secrets.X }}
      | `.*`                            # `command`
      | %[^%]*%                         # %VAR%
      | %\([^)]*\)s                     # %(password)s
      | .*\{\{.*\}\}.*                  # {{ vault_password }}
      | !\w+.*                          # a YAML tag: !vault |, !env DB_PASSWORD
      | ENC\[.*                         # sops
      | [*xX.…•-]+                      # ***, xxx, ..., …
      | (?:redacted|hidden|masked|none|null|nil|true|false|yes|no|on|off|required|optional|string|str|bytes
          |undefined|empty|todo|tbd|placeholder|your[_-]?\w*|example|dummy|n/a|unset|missing|rotated|revoked
          |expired|disabled|enabled|default|unknown|pending|generated|stored
          |password|passwd|pass|secret|pw|token)  # docs' stand-ins: user:password@host
      | (?:vault|env|file|op|secret|secrets|arn|ssm|keyring|pass|gopass|sops|kms|awskms|gcpkms|azkv|k8s
          |secretsmanager|bw|lpass|doppler|infisical):.*   # a reference to a secret store
      | [\w.]+[(\[].*                   # code: os.environ["X"], getenv("X"), settings[...], get_secret(
      | [A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\.\w*(?:password|passwd|secret|token|key)\w*  # settings.DB_PASSWORD
      | [\w.-]+\.(?:pem|key|crt|cer|der|p12|pfx|jks|txt|json|ya?ml|env|conf|cfg|ini|asc|gpg|pub|kdbx)  # a file
    )$""",
    re.IGNORECASE | re.VERBOSE,
)
# A Kubernetes object name (lower-case words joined by hyphens): under a *secret name it names a Secret object.
_OBJECT_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
_PATHLIKE = re.compile(r"^(?:~?/|\./|\.\./|[A-Za-z]:\\)")
# A field value that reads as a sentence ("see the team password manager") is prose, not a password.
_PROSE_WORDS = frozenset({
    "a", "an", "the", "is", "are", "was", "in", "at", "of", "on", "to", "for", "from", "by", "with", "see", "use",
    "kept", "stored", "held", "lives", "not", "no", "never",
})

# --- hex keys next to a key-like name ------------------------------------------------------------------------

# Hex is everywhere in ops text (commits, digests), so a hex run is a key only when a key-like name stands
# right before it: "DD_API_KEY 3f9a...", "the api key is 3f9a...", "license key: 3f9a...".
_HEX = re.compile(r"[0-9a-fA-F]{32,}")
_HEX_KEY_WORD = re.compile(
    r"(?<![a-z0-9])(?:api[ _-]?(?:key|token)|apikey|access[ _-]?(?:key|token)|secret(?:[ _-]?key)?"
    r"|private[ _-]?key|auth(?:entication)?[ _-]?(?:key|token)|app[ _-]?key|license[ _-]?key"
    r"|encryption[ _-]?key|signing[ _-]?key|master[ _-]?key|token|password|passphrase)"
)
_HEX_GAP = re.compile(r"^[a-z_\s\"'`:=>-]{0,24}$")
_HEX_GAP_VETO = re.compile(
    r"\b(?:id|ids|fingerprint|hash|hashed|digest|sum|checksum|commit|sha\w*|md5|uuid|serial|version|rev"
    r"|revision|blob|tree|etag|request|trace|ref)\b"
)

# --- generic rule: long high-entropy runs --------------------------------------------------------------------

# Characters of a run; everything else (including '=', so "DB_URL=c2VjcmV0..." yields the value alone) splits.
_RUN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_RUN_TABLE = bytes(c if c in _RUN_BYTES else 0x20 for c in range(256))
_RUN_PIECES = re.compile(r"[/_.+=-]+")
_IDS = re.compile(
    r"""^(?:
        [0-9a-f]+ | [0-9A-F]+                               # hex: commit and blob ids, digests, snapshot ids
      | [0-9A-HJKMNP-TV-Z]{26}                              # ULID
    )$""",
    re.VERBOSE,
)
_WORDISH = re.compile(
    r"""^(?:
        (?:[A-Z]?[a-z]+|[A-Z]+)\d*                         # word, Word, WORD, python3
      | (?:(?:[A-Z]?[a-z]{2,}|[A-Z]{2,}(?![a-z]))\d*){2,}    # camelCase, HTTPServer2Error, sha256sum
      | \d+[a-zA-Z]{1,3}                                    # a number with a unit: 250ms, 4gb, 15min
    )$""",
    re.VERBOSE,
)
_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_CONSONANTS = re.compile(r"[^aeiouy]{5,}", re.IGNORECASE)
_URL_PATH = re.compile(r"://[^\s\"'<>()\[\]{}`?]*")  # from "://" up to the query: names, not credentials
# A label right before a run that says it is public or derived: "PublicKey = ...", "checksum: ...".
_BENIGN_LABEL = re.compile(
    r"(?:public[ _-]?key|pub[ _-]?key|fingerprint|checksum|digest|hash|integrity|etag|commit|revision"
    r"|(?:request|trace|correlation|object|document|file|build|run|cf)[ _-]?id|nonce|salt)"
    r"[\"']?[ \t]*(?::|=|=>|\bis\b)?[ \t]*[\"'`]?$"
)
_ASSIGNED = re.compile(r"[\w.\"'\]-][ \t]*(?::=|=>|[:=])[ \t]*[\"'`]?$")


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
    if _IDS.match(piece):
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
    if len(value) < 4 or _PLACEHOLDER.match(value) or _PATHLIKE.match(value):
        return False
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
    return _find(text, decode=True)


def _find(text: str, decode: bool) -> list[SecretFinding]:
    scan = _Scan(text)
    for key in _PRIVATE_KEYS:
        for start, end in _blocks(key, scan.lower):
            block = scan.text[start:end]
            header = block.split("\n", 1)[0][:60]
            scan.add(key.kind, start, end, f"{header}… ({len(block)} chars)")
    public = [span for block in _PUBLIC_BLOCKS for span in _blocks(block, scan.lower)]
    public += [(m.start() - rule.back, m.end()) for rule in _PUBLIC
               for m in rule.pattern.finditer(scan.lower if rule.lower else scan.text)]
    scan.mask(public)
    _shaped(scan)
    _command_lines(scan)
    _assignments(scan)
    _runs(scan, decode)
    return scan.result()


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
    for m in _PROSE_PASSWORD.finditer(lower):
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
            scan.add("high-entropy token", start, end, _excerpt(run))


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
        + ["pgpass entry", "password on command line", "password assignment", "generic API key assignment",
           "password in prose", "hex key next to a key name", "high-entropy token"]
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
