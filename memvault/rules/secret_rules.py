"""The secret detector's rules: what a credential looks like (shaped tokens, command lines, assignments to
secret-sounding names, hex keys) and what is public by design and masked first. :mod:`memvault.rules.secrets`
applies them; docs/secrets.md lists the kinds."""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# --- rules --------------------------------------------------------------------------------------------------
#
# Speed matters (every write is scanned), and Python's regex engine only searches fast for a pattern that
# starts with a literal: a pattern that starts with a character class or a lookbehind is tried at every
# position, some fifty times slower. So every full-text pattern below starts with a literal, and a boundary
# check that would naturally come first is written as a lookbehind *after* the literal (``ghp_(?<![…]ghp_)``).
# Case-insensitive rules run on a lower-cased copy of the text (same length, same positions), not with
# re.IGNORECASE. The generic rule gets its candidate runs from bytes.translate + split, not from a regex.


# Compiling the ~190 patterns of this module took 25 ms, paid at import by every one-shot process that merely logs
# a recall (its question is redacted): so each is compiled on first use, and a pattern whose every match starts with
# a literal (:func:`_leading_literal`; most do, see above) is not even used on a text that lacks that literal.
_SPECIAL = frozenset(".^$*+?{}[]\\|()")


def _leading_literal(source: str) -> str:
    """The literal text every match of ``source`` starts with, or "" when there is none to be sure of: read from the
    start (inside a leading capturing group too) up to the first special character; the last character is dropped
    when a quantifier follows it, and nothing is kept when the group is quantified or an alternation may bypass it."""
    if source.startswith("(?<!-)"):  # "not inside a run of dashes" takes no text: what follows starts every match
        return _leading_literal(source[len("(?<!-)"):])
    i, depth = (1, 1) if source.startswith("(") and not source.startswith("(?") else (0, 0)
    if source.startswith("(?P<") and ">" in source:  # a named group: "(?P<word>pass...)"
        i, depth = source.index(">") + 1, 1
    out: list[str] = []
    while i < len(source):
        c = source[i]
        if c == "\\" and i + 1 < len(source) and not source[i + 1].isalnum() and not source[i + 1].isspace():
            out.append(source[i + 1])
            i += 2
            continue
        if c in _SPECIAL or c == "\\":
            break
        out.append(c)
        i += 1
    after = source[i] if i < len(source) else ""
    if after in ("*", "+", "?", "{") and out:
        out.pop()  # "ab*": the b may be absent
    if depth and after == ")" and source[i + 1: i + 2] in ("*", "+", "?", "{"):
        return ""  # "(ab)?": the whole group may be absent
    if not out or _alternation(source, depth):
        return ""
    return "".join(out)


def _alternation(source: str, depth: int) -> bool:
    """Whether a ``|`` (outside character classes and escapes) may bypass the start of ``source``: one at the top
    level, or (``depth`` 1) one inside the leading group before it closes."""
    if "|" not in source:
        return False
    level, i, in_class, leading = 0, 0, False, bool(depth)
    while i < len(source):
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if source[i + 1: i + 2] == "]":  # "[]...]": a leading ] is a member
                i += 1
        elif c == "(":
            level += 1
        elif c == ")":
            level -= 1
            leading = leading and level > 0
        elif c == "|" and (level == 0 or (leading and level == 1)):
            return True
        i += 1
    return False


class _Lazy:
    """A compiled pattern's searching methods, compiled on first use; with a :attr:`literal`, a text without it is
    answered at once (no match), as the compiled pattern would."""

    __slots__ = ("pattern", "flags", "literal", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self.literal = "" if flags & re.IGNORECASE else _leading_literal(pattern)
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def _absent(self, string: str) -> bool:
        return bool(self.literal) and self.literal not in string

    def finditer(self, string: str, *bounds: int) -> Iterator[re.Match[str]]:
        return iter(()) if self._absent(string) else self.compiled.finditer(string, *bounds)

    def search(self, string: str, *bounds: int) -> re.Match[str] | None:
        return None if self._absent(string) else self.compiled.search(string, *bounds)

    def match(self, string: str, *bounds: int) -> re.Match[str] | None:
        return None if self._absent(string) else self.compiled.match(string, *bounds)

    def fullmatch(self, string: str, *bounds: int) -> re.Match[str] | None:
        return None if self._absent(string) else self.compiled.fullmatch(string, *bounds)

    def sub(self, repl: Any, string: str, count: int = 0) -> str:
        return string if self._absent(string) else self.compiled.sub(repl, string, count)

    def split(self, string: str, maxsplit: int = 0) -> list[str]:
        return [string] if self._absent(string) else self.compiled.split(string, maxsplit)

    def findall(self, string: str, *bounds: int) -> list[Any]:
        return [] if self._absent(string) else self.compiled.findall(string, *bounds)

    def __repr__(self) -> str:
        return f"_Lazy({self.pattern!r})"


def _compile(pattern: str, flags: int = 0) -> _Lazy:
    return _Lazy(pattern, flags)


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: _Lazy
    group: int = 1  # the group holding the secret
    lower: bool = False  # match the lower-cased text
    back: int = 0  # the secret starts this many characters before the group (a literal-first pattern)


def _rule(kind: str, pattern: str, group: int = 1, lower: bool = False, back: int = 0) -> _Rule:
    return _Rule(kind, _compile(pattern), group, lower, back)


@dataclass(frozen=True)
class _Block:
    """A multi-line block: a header, then the rest up to a footer (searched only up to the next header)."""

    kind: str
    header: _Lazy  # matched on the lower-cased text
    footer: _Lazy | None
    limit: int  # longest block considered; without a footer in reach, the block is the header (and tail)
    tail: _Lazy | None = None  # what follows a header that has no footer in reach


_PRIVATE_KEYS = (
    _Block(
        "private key block",
        _compile(r"(?<!-)---+[ \t]*begin[ \t]+(?:[a-z0-9]+[ \t]+)*?private[ \t]+key(?:[ \t]+block)?[ \t]*---+"),
        _compile(r"(?<!-)---+[ \t]*end[ \t]+[a-z0-9 \t]*?private[ \t]+key(?:[ \t]+block)?[ \t]*---+"),
        20000,
        # a truncated paste: the header and the base64 (or "Proc-Type:" header) lines that follow it
        _compile(r"(?:\r?\n[ \t]*(?:[a-z0-9+/=]{16,}|[a-z-]+:[^\n]*))*"),
    ),
    # A PuTTY .ppk file names its key type on the first line; a prose mention of the header does not.
    _Block(
        "PuTTY private key",
        _compile(r"putty-user-key-file-\d+:[ \t]*(?:ssh-|ecdsa-)[^\n]*"),
        _compile(r"private-mac:[^\n]*"),
        20000,
        _compile(r"(?:\r?\n[ \t]*(?:[a-z0-9+/=]{16,}|[a-z-]+:[^\n]*))*"),
    ),
)

# --- public by design: masked before the other rules --------------------------------------------------------

_PUBLIC_BLOCKS = (
    # certificates, CSRs, CRLs, public keys, signatures and encrypted messages in PEM armour; without an END
    # line, the base64 lines that follow the header
    _Block(
        "",
        _compile(
            r"(?<!-)---+[ \t]*begin[ \t]+(?:trusted[ \t]+|new[ \t]+)?(?:certificate(?:[ \t]+request)?|x509[ \t]+crl"
            r"|(?:rsa[ \t]+|ssh2[ \t]+|pgp[ \t]+)?public[ \t]+key(?:[ \t]+block)?|pgp[ \t]+(?:signature|message)"
            r"|(?:dh|ec|dsa)[ \t]+parameters|pkcs7|cms)[ \t]*---+"
        ),
        _compile(r"(?<!-)---+[ \t]*end[^\n]*?---+"),
        50000,
        _compile(r"(?:\r?\n[ \t]*[a-z0-9+/]{40,}={0,2})*"),
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


# Public by design, but only when their checksum holds (a random token passes one by chance 1 time in 2^30 or
# less): bech32 age recipients and Bitcoin segwit addresses, Base58Check Bitcoin addresses. Checked in secrets.py.
_BECH32 = _compile(r"(?<![A-Za-z0-9])(age1|bc1)[qpzry9x8gf2tvdw0s3jn54khce6mua7l]{11,90}(?![A-Za-z0-9])")
_BASE58_ADDRESS = _compile(r"(?<![A-Za-z0-9])[13][1-9A-HJ-NP-Za-km-z]{25,34}(?![A-Za-z0-9])")


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
_PGPASS = _compile(r"(?m):(?:\d+|\*):[^\s:]+:[^\s:]+:([^\s:]+)[ \t]*\r?$")
_PGPASS_HOST = _compile(r"[A-Za-z0-9_.*-]+")

# --- passwords on a command line ----------------------------------------------------------------------------

_ARG = r"(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\"]+)"
_CMD = r"\b[^\n|;&]{0,300}?[ \t]"  # later arguments of the same command (bounded: one huge line stays linear)


def _command(name: str) -> str:
    return f"{re.escape(name)}(?<![\\w-]{re.escape(name)})"


_CMDLINE = tuple(
    _compile(pattern)
    for pattern in (
        # mysql family: -pPASSWORD (attached; a bare -p prompts). -P is the port, so this is case-sensitive.
        _command("mysql") + r"(?:dump|admin|import|check|show|pump|sh)?" + _CMD + r"-p" + _ARG,
        _command("mariadb") + r"(?:-dump|-admin|-import|-check)?" + _CMD + r"-p" + _ARG,
        _command("sshpass") + _CMD + r"-p[ \t]*" + _ARG,
        _command("redis-cli") + _CMD + r"(?:-a|--pass)[ \t]+" + _ARG,
        _command("curl") + _CMD + r"(?:-u|--user)[ \t]*['\"]?[^\s:'\"]+:(?P<v>[^\s'\"]+)",
        # docker, podman, helm, oc, cf ... login -p PASSWORD
        _command("login") + _CMD + r"(?:-p|--password)[ \t]+" + _ARG,
        # OpenLDAP tools: -w PASSWORD (-W prompts, -y reads a file)
        _command("ldap") + r"(?:search|modify|add|delete|whoami|passwd|compare|modrdn|exop|url)" + _CMD
        + r"-w[ \t]*" + _ARG,
        # MongoDB shells and tools: -p PASSWORD as its own argument (a bare -p prompts)
        _command("mongo") + r"(?:sh|dump|restore|export|import|stat|top|files)?" + _CMD + r"-p[ \t]+" + _ARG,
        # SQL Server: -P PASSWORD (-U is the login)
        *(_command(tool) + _CMD + r"-P[ \t]*" + _ARG for tool in ("sqlcmd", "osql", "bcp")),
        # htpasswd -b (batch): the password is the last argument, after the file and the user; with -n, no file
        _command("htpasswd") + r"[ \t]+-[A-Za-z]*b[A-Za-z]*(?:[ \t]+-[A-Za-z]+)*[ \t]+[^\s-]\S*[ \t]+[^\s-]\S*[ \t]+"
        + _ARG,
        _command("htpasswd") + r"[ \t]+-(?=[A-Za-z]*n)(?=[A-Za-z]*b)[A-Za-z]+(?:[ \t]+-[A-Za-z]+)*[ \t]+[^\s-]\S*[ \t]+"
        + _ARG,
        # Samba: -U user%PASSWORD
        *(_command(tool) + _CMD + r"(?:-U|--user(?:name)?)[ \t=]*['\"]?[^\s%'\"]+%(?P<v>[^\s'\"]+)"
          for tool in ("smbclient", "rpcclient", "smbcacls", "smbmap", "smbget", "net")),
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
_KEYLIKE_NAME = _compile(r"(?:.*[^A-Za-z0-9])?[A-Za-z0-9]*?(?P<word>" + _SECRET_WORD + r")", re.IGNORECASE)
_KEY_QUALIFIER = _compile(
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
    _compile(f"(?P<word>{word}){_ASSIGN_TAIL}")
    for word in (r"pass(?:word|wd|phrase|(?<![a-z0-9]pass))", "pwd", "secret", "token", "key")
)
# Prose: "the grafana admin password is Gr4fana!2026". Only a value that is not a plain word (it holds a digit
# or a symbol) counts, so "the password is stored in vault" and "the password was rotated" stay prose.
_PROSE_PASSWORD = _compile(
    r"pass(?:word|phrase)(?: (?:for|on|of|at)(?: the)? [^\s,;]{1,40})? "
    r"(?:(?:is|was|has been) (?:now )?(?:set|changed|reset|updated) to|(?:set|changed|reset|updated) to|is now|is|was)"
    r"[ \t]+[\"'`]?(?P<v>[^\s\"'`]+)"
)
# "ssh root@web1 with password Xk9…", "using the passphrase …": a password given after "with" or "using" (the
# words before it are checked in code: a pattern must start with its literal to be searched fast). A value that
# opens a bracket is a remark: "connection string with password (base64-encoded)".
_PROSE_GIVEN_PASSWORD = _compile(r"pass(?:word|phrase)[ \t]+[\"'`]?(?P<v>[^\s\"'`(\[{<][^\s\"'`]*)")
_PROSE_GIVEN_BY = ("with ", "using ", "with the ", "using the ")
# A user and a password written as a pair: "login: admin / Hunter2Pass!", "the creds are deploy / Xy7!kq2",
# "user admin, password Xy7!kq2". The value is checked as in the rules above (not a plain word, not a placeholder).
_PAIR_USER = r"[ \t]*(?:[:=][ \t]*)?[ \t][\"'`]?[^\s/\"'`,;]{1,64}[\"'`]?"
_PAIR_VALUE = r"[\"'`]?(?P<v>[^\s\"'`(\[{<][^\s\"'`]*)"
_PROSE_PAIRS = (
    *(_compile(word + r"(?:[ \t]+(?:are|is))?" + _PAIR_USER + r"[ \t]+/[ \t]+" + _PAIR_VALUE)
      for word in (r"login(?<![a-z0-9_-]login)", r"cred(?<![a-z0-9_-]cred)(?:ential)?s",
                   r"user(?<![a-z0-9_-]user)(?:name)?(?:[ \t]*/[ \t]*pass(?:word)?)?")),
    _compile(r"user(?<![a-z0-9_-]user)(?:name)?" + _PAIR_USER + r"[ \t]*(?:,|;|,?[ \t]+and)?"
             r"[ \t]+pass(?:word|phrase|wd)?[ \t]*(?::[ \t]*|[ \t])" + _PAIR_VALUE),
)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")

# Values that stand for a secret without being one.
_PLACEHOLDER = _compile(
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
# A remark in parentheses where a value would be: "password: (see 1password)", "token: (ask the on-call)".
_REMARK = _compile(r"^\((?:[a-z]{2,})(?:[ \t].*)?\)?$")
# A Kubernetes object name (lower-case words joined by hyphens): under a *secret name it names a Secret object.
_OBJECT_NAME = _compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
_PATHLIKE = _compile(r"^(?:~?/|\./|\.\./|[A-Za-z]:\\)")
# A field value that reads as a sentence ("see the team password manager") is prose, not a password.
_PROSE_WORDS = frozenset({
    "a", "an", "the", "is", "are", "was", "in", "at", "of", "on", "to", "for", "from", "by", "with", "see", "use",
    "kept", "stored", "held", "lives", "not", "no", "never",
})

# --- hex keys next to a key-like name ------------------------------------------------------------------------

# Hex is everywhere in ops text (commits, digests), so a hex run is a key only when a key-like name stands
# right before it: "DD_API_KEY 3f9a...", "the api key is 3f9a...", "license key: 3f9a...".
_HEX = _compile(r"[0-9a-fA-F]{32,}")
_HEX_KEY_WORD = _compile(
    r"(?<![a-z0-9])(?:api[ _-]?(?:key|token)|apikey|access[ _-]?(?:key|token)|secret(?:[ _-]?key)?"
    r"|private[ _-]?key|auth(?:entication)?[ _-]?(?:key|token)|app[ _-]?key|license[ _-]?key"
    r"|encryption[ _-]?key|signing[ _-]?key|master[ _-]?key|token|password|passphrase)"
)
_HEX_GAP = _compile(r"^[a-z_\s\"'`:=>-]{0,24}$")
_HEX_GAP_VETO = _compile(
    r"\b(?:id|ids|fingerprint|hash|hashed|digest|sum|checksum|commit|sha\w*|md5|uuid|serial|version|rev"
    r"|revision|blob|tree|etag|request|trace|ref)\b"
)

# --- generic rule: long high-entropy runs --------------------------------------------------------------------

# Characters of a run; everything else (including '=', so "DB_URL=c2VjcmV0..." yields the value alone) splits.
_RUN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_RUN_TABLE = bytes(c if c in _RUN_BYTES else 0x20 for c in range(256))
_RUN_PIECES = _compile(r"[/_.+=-]+")
_IDS = _compile(
    r"""^(?:
        [0-9a-f]+ | [0-9A-F]+                               # hex: commit and blob ids, digests, snapshot ids
      | [0-9A-HJKMNP-TV-Z]{26}                              # ULID
    )$""",
    re.VERBOSE,
)
# A time written into a name: "20T09" of rollout-2026-11-20T09-00-00, "20261120T013000Z" (ISO 8601's basic form).
_TIME_PIECE = _compile(r"\d{1,8}T\d{1,6}Z?")
_WORDISH = _compile(
    r"""^(?:
        (?:[A-Z]?[a-z]+|[A-Z]+)\d*                         # word, Word, WORD, python3
      | (?:(?:[A-Z]?[a-z]{2,}|[A-Z]{2,}(?![a-z]))\d*){2,}    # camelCase, HTTPServer2Error, sha256sum
      | \d+[a-zA-Z]{1,3}                                    # a number with a unit: 250ms, 4gb, 15min
    )$""",
    re.VERBOSE,
)
_SEGMENT = _compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_CONSONANTS = _compile(r"[^aeiouy]{5,}", re.IGNORECASE)
_URL_PATH = _compile(r"://[^\s\"'<>()\[\]{}`?]*")  # from "://" up to the query: names, not credentials
# A label right before a run that says it is public or derived: "PublicKey = ...", "checksum: ...".
_BENIGN_LABEL = _compile(
    r"(?:public[ _-]?key|pub[ _-]?key|fingerprint|checksum|digest|hash|integrity|etag|commit|revision"
    r"|(?:request|trace|correlation|object|document|file|build|run|cf)[ _-]?id|nonce|salt)"
    r"[\"']?[ \t]*(?::|=|=>|\bis\b)?[ \t]*[\"'`]?$"
)
_ASSIGNED = _compile(r"[\w.\"'\]-][ \t]*(?::=|=>|[:=])[ \t]*[\"'`]?$")
