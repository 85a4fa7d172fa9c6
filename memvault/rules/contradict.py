"""Contradictions in other words: two facts about the same thing that state different values.

:mod:`memvault.rules.dedup` flags a conflict only when two texts are nearly the same words. People and agents say
one thing many ways: "our postgres primary runs on port 5433" contradicts "the primary PostgreSQL listens on port
5432 on db01" though they share three words of nine. This module reads each text as

- its **subject**: content words, folded (plurals, a few ops synonyms: pg/postgresql -> postgres, prod ->
  production), without the generic verbs and nouns every ops fact uses (runs, listens, port, server), and
- its **values**, typed: port, ip, host, url, email, date, time, version, size, duration, percent, a count of
  something ("3 replicas"), a bare number, a proper name, a handle (@alice, #ops-alerts).

Two texts *contradict* when their subjects are close (enough shared subject words, or a cosine the caller measured
with the index's model) and, for some kind of value both state, they state none in common. They *agree* when every
kind both state shares a value. Otherwise nothing is said (no kind in common: they cannot be compared).

Two guards keep unrelated facts apart, each from a way texts that look alike are about different things:

- *contrast words*: one says "staging" and the other "production", "primary" against "replica";
- *entities*: when the hosts or names differ and something else is stated by both (a port, an address), the texts
  are about two hosts ("web1 serves 10.8.0.11" and "web2 serves 10.8.0.12"), not two claims about one. When only
  the host or name differs ("the primary is db01" / "the primary is db02") that *is* the contradiction.

Everything is regular expressions and set operations on two short texts: cheap enough for every write, every
proposal listed and every imported memory. The thresholds were chosen on one half of a labelled set
(bench/data/contradictions.jsonl) and measured on the other (bench/bench_contradictions.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

from .dedup import STOP_WORDS, _fold

#: Subject closeness needed without a cosine: shared subject words over the smaller subject.
MIN_OVERLAP = 0.5
#: ... and at least this many shared subject words.
MIN_SHARED = 1
#: With a cosine measured by the caller (the index's model), texts at least this close are about the same thing
#: when they share a subject word, whatever the overlap.
MIN_COSINE = 0.7

#: Kinds of value that name a thing: when they differ and another kind is stated by both, the texts are about
#: two things.
ENTITY_KINDS = frozenset({"host", "name", "handle"})

#: Words every ops fact uses: they say nothing of what the fact is about.
GENERIC = frozenset(
    """
    run runs running ran listen listening listened serve served serving use used using set configured config
    configure value default currently current now today new old actual real live
    port number host hostname address server service machine box node instance located location lives live
    point pointing points go goes going keep kept store stored stor hold held get got make made
    called named name know known note noted say said see tell told want need needed say also always usually
    every each one two three thing things stuff ours we our us team own owned owner owns posted post sent send
    moved move migrated changed change switched raised bumped upgraded resized lowered reduced increased since
    last again now behind front reachable available found after later earlier week month year day yesterday ago until
    """.split()
) | STOP_WORDS

#: A few spellings of one thing in ops language.
SYNONYMS = {
    "postgresql": "postgres", "pg": "postgres", "psql": "postgres", "database": "db", "databases": "db",
    "prod": "production", "stg": "staging", "stage": "staging", "master": "primary", "main": "primary",
    "k8s": "kubernetes", "kube": "kubernetes", "cert": "certificate", "tls": "certificate", "ssl": "certificate",
    "repo": "repository", "env": "environment", "creds": "credential", "backups": "backup", "pw": "password",
    "mins": "minute", "min": "minute", "secs": "second", "sec": "second", "hrs": "hour", "hr": "hour",
    "dns": "dns", "oncall": "on-call", "pager": "on-call", "pagerduty": "on-call",
    "postgre": "postgres", "kubernete": "kubernetes", "lb": "balancer", "loadbalancer": "balancer", "standby": "replica", "secondary": "replica", "follower": "replica", "leader": "primary",
}

#: Words of one group name different things of one kind: a text with one and a text with another are about two
#: things ("the staging db" is not "the production db").
CONTRAST_GROUPS = (
    frozenset({"staging", "production", "dev", "development", "test", "testing", "qa", "sandbox", "preprod",
               "uat", "local"}),
    frozenset({"primary", "replica"}),
    frozenset({"internal", "external", "public", "private"}),
    frozenset({"read", "write"}),
    frozenset({"ipv4", "ipv6"}),
    frozenset({"frontend", "backend"}),
    frozenset({"min", "max", "minimum", "maximum"}),
    frozenset({"inbound", "outbound", "ingress", "egress"}),
    frozenset({"soft", "hard"}),
    frozenset({"daily", "weekly", "monthly", "hourly", "nightly", "yearly"}),
    frozenset({"eu", "us", "apac", "asia", "europe"}),
    frozenset({"http", "https", "grpc", "ssh", "smtp", "imap"}),
    frozenset({"upload", "download"}),
    frozenset({"before", "after"}),
)

_MONTHS = {m: i for i, m in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_MONTH_RE = r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_SIZE = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15, "kib": 1024, "mib": 1024 ** 2,
         "gib": 1024 ** 3, "tib": 1024 ** 4, "ki": 1024, "mi": 1024 ** 2, "gi": 1024 ** 3, "ti": 1024 ** 4}
_DURATION = {"ms": 0.001, "millisecond": 0.001, "s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
             "h": 3600, "hr": 3600, "hour": 3600, "d": 86400, "day": 86400, "w": 604800, "week": 604800,
             "month": 2592000, "mo": 2592000, "y": 31536000, "yr": 31536000, "year": 31536000}
_SIZE_UNITS = "kib|mib|gib|tib|kb|mb|gb|tb|pb|ki|mi|gi|ti"
_DURATION_UNITS = ("milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w|months?|mo"
                   "|years?|yrs?|y")

_TOKEN = re.compile(
    rf"""
      (?P<url>\b(?:https?|s3|gs|ftp|postgres(?:ql)?|redis|mysql|amqp)://[^\s,;'"<>)]+)
    | (?P<email>\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+)
    | (?P<handle>(?<![\w@])[@#][a-z][\w.-]*[a-z0-9])
    | (?P<date>(?<![\d.])\d{{4}}-\d{{2}}-\d{{2}}(?![\d]))
    | (?P<dmy>(?<!\w)(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\s+(?P<m1>{_MONTH_RE})\.?,?\s+(?P<y1>\d{{4}})(?!\d))
    | (?P<mdy>(?<!\w)(?P<m2>{_MONTH_RE})\.?\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y2>\d{{4}})(?!\d))
    | (?P<ip>(?<![\d.])(?:\d{{1,3}}\.){{3}}\d{{1,3}}(?:/\d{{1,2}})?(?![\d]|\.\d))(?::(?P<ipport>\d{{1,5}})(?!\d))?
    | (?P<hostport>\b(?P<hp_host>[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*):(?P<hp_port>\d{{2,5}})(?!\d|\.\d))
    | (?P<portword>\b(?:ports?|udp|tcp)\s*(?:[:=]|is|of|number)?\s*(?P<port>\d{{2,5}})(?!\d|\.\d))
    | (?P<time>(?<![\d.:])(?P<hh>\d{{1,2}})(?::(?P<mm>\d{{2}}))?\s*(?P<ampm>am|pm)\b|(?<![\d.:])(?P<hh2>\d{{1,2}}):(?P<mm2>\d{{2}})(?![\d:]))
    | (?P<instance>\b[a-z]\d[a-z]*\.(?:\d*x?large|medium|small|micro|nano|metal)\b)
    | (?P<level>\b(?-i:DEBUG|INFO|WARN|WARNING|ERROR|TRACE|FATAL|CRITICAL)\b)
    | (?P<version>(?<![\w.])v?\d+\.\d+(?:\.\d+)+(?!\w|\.\w)|(?<![\w.])v\d+(?:\.\d+)?(?!\w|\.\w))
    | (?P<fqdn>\b[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+\.(?:com|net|org|io|dev|internal|local|lan|corp|cloud|app|co|de|uk)\b)
    | (?P<percent>(?<![\w.])\d+(?:\.\d+)?\s?%)
    | (?P<size>(?<![\w.])(?P<samount>\d+(?:\.\d+)?)\s?(?P<sunit>{_SIZE_UNITS})\b)
    | (?P<duration>(?<![\w.])(?P<damount>\d+(?:\.\d+)?)\s?-?(?P<dunit>{_DURATION_UNITS})\b)
    | (?P<decimal>(?<![\w.])\d+\.\d+(?!\w|\.\w))
    | (?P<num>(?<![\w.])\d{{1,3}}(?:,\d{{3}})+(?![\d])|(?<![\w.])\d+(?!\w|\.\w))
    | (?P<word>[A-Za-z][A-Za-z0-9_-]*)
    """,
    re.VERBOSE | re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?:;]\s*$|^\s*$")
_OLD_VALUE = re.compile(r"\bfrom\s+(\S+)(?=\s+to\b)|\binstead\s+of\s+(\S+)|\(was\s+([^)\s]+)\)|\bno\s+longer\s+(\S+)",
                        re.IGNORECASE)
_PORT_CONTEXT = re.compile(r"\b(?:listen\w*|ports?|bind\w*|exposed?|udp|tcp)\b", re.IGNORECASE)
_CALLED = re.compile(r"\b(?:called|named|ssid\s+is)\s+([a-z][\w.-]*)", re.IGNORECASE)
_PERSON = re.compile(r"[A-Z][a-z]+")


@dataclass(frozen=True)
class Claims:
    """What a text is about (``subject``) and the values it states, by kind (``values``)."""

    subject: frozenset[str]
    values: dict[str, frozenset[str]]
    contrast: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Verdict:
    """How two texts relate: ``kind`` is ``"contradicts"`` or ``"agrees"``; ``values`` holds, for each kind of
    value that differs, what each side says (``{"port": {"new": ["5433"], "stored": ["5432"]}}``)."""

    kind: str
    overlap: float
    shared: tuple[str, ...]
    values: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    cosine: float | None = None


def _word(raw: str) -> str:
    w = raw.lower().strip("-_")
    w = SYNONYMS.get(w, w)
    return SYNONYMS.get(_fold(w), _fold(w))


#: A host name as facts write it: two letters, letters or dashes, a digit, then anything of a host name. Linear:
#: ``[a-z]{2,}[a-z-]*\d+`` could split a long run of letters in n ways, each tried to its end (a 50,000-letter word
#: took 15 s of every fact write on its subject).
_HOST = re.compile(r"[a-z]{2}[a-z-]*\d[a-z0-9-]*")
#: Longer words are no host names (a DNS label is at most 63 characters).
_HOST_MAX = 63


def _is_host(word: str) -> bool:
    """db01, web-2, pg-primary-1: letters and digits mixed, starting with letters (not v2, ipv4, k8s, s3, ec2)."""
    return (len(word) <= _HOST_MAX and bool(_HOST.fullmatch(word)) and not word.startswith(("ipv", "http"))
            and word not in {"k8s", "s3", "ec2", "x86", "arm64", "amd64", "utf8", "sha256", "sha1", "md5",
                             "base64", "h2", "ed25519"})


def _duration_unit(unit: str) -> str:
    unit = unit.lower()
    if unit in _DURATION:
        return unit
    for long in ("millisecond", "second", "minute", "hour", "day", "week", "month", "year"):
        if unit.startswith(long):
            return long
    return {"secs": "sec", "mins": "min", "hrs": "hr", "yrs": "yr"}.get(unit, unit)


def _number(text: str) -> str:
    value = float(text.replace(",", ""))
    return f"{value:g}"


def extract(text: str, key: str | None = None) -> Claims:
    """Read ``text`` (and the words of its ``key``) as a subject and typed values."""
    subject: set[str] = set()
    values: dict[str, set[str]] = {}

    def add(kind: str, value: str) -> None:
        values.setdefault(kind, set()).add(value)

    tokens = list(_TOKEN.finditer(text))
    # "moved from mon01 to mon02", "instead of 5432", "(was 5432)": the value named there is the old one
    old = [range(m.start(g), m.end(g)) for m in _OLD_VALUE.finditer(text) for g in range(1, 5) if m.group(g)]
    portish = bool(_PORT_CONTEXT.search(text))
    called = {m.start(1) for m in _CALLED.finditer(text)}
    persons = _persons(tokens)
    for i, m in enumerate(tokens):
        kind = m.lastgroup
        raw = m.group(0)
        if kind != "word" and any(m.start() in span for span in old):
            continue
        if m.group("url"):
            add("url", raw.lower().rstrip("/.").replace("://www.", "://"))
        elif m.group("email"):
            add("email", raw.lower())
        elif m.group("handle"):
            add("handle", raw.lower())
        elif m.group("date"):
            add("date", raw)
        elif m.group("dmy") or m.group("mdy"):
            d, mon, y = ((m.group("d1"), m.group("m1"), m.group("y1")) if m.group("dmy")
                         else (m.group("d2"), m.group("m2"), m.group("y2")))
            try:
                add("date", date(int(y), _MONTHS[mon.lower()[:3]], int(d)).isoformat())
            except ValueError:
                pass
        elif m.group("ip"):
            add("ip", m.group("ip"))
            if m.group("ipport"):
                add("port", m.group("ipport"))
        elif m.group("hostport"):
            host = m.group("hp_host").lower()
            if host not in ("port", "ports"):
                add("host", host)
            add("port", m.group("hp_port"))
        elif m.group("portword"):
            add("port", m.group("port"))
        elif m.group("time"):
            if m.group("ampm"):
                hh = int(m.group("hh")) % 12 + (12 if m.group("ampm").lower() == "pm" else 0)
                mm = m.group("mm") or "00"
            else:
                hh, mm = int(m.group("hh2")), m.group("mm2")
            add("time", f"{hh:02d}:{mm}")
        elif m.group("version"):
            add("version", raw.lower().lstrip("v"))
        elif m.group("fqdn"):
            add("host", raw.lower())
        elif m.group("percent"):
            add("percent", _number(raw.rstrip("% ")))
        elif m.group("size"):
            unit = m.group("sunit").lower()
            add("size", f"{float(m.group('samount')) * _SIZE[unit]:g}")
        elif m.group("duration"):
            unit = _duration_unit(m.group("dunit"))
            add("duration", f"{float(m.group('damount')) * _DURATION[unit]:g}")
        elif m.group("instance"):
            add("instance", raw.lower())
        elif m.group("level"):
            add("level", raw.lower())
        elif m.group("decimal") or m.group("num"):
            number = _number(raw)
            following = _next_word(tokens, i)
            if following is not None:
                add(f"count:{following}", number)
            elif portish and m.group("num") and 2 <= len(raw) <= 5 and int(raw) < 65536:
                add("port", raw)  # "listens on 8081": a bare number in a text about ports is one
            else:
                add("number", number)
        elif kind == "word":
            lower = raw.lower()
            if _is_host(lower):
                if not any(m.start() in span for span in old):
                    add("host", lower)
                continue
            if m.start() in persons:
                if persons[m.start()]:
                    add("name", persons[m.start()])
                continue
            if raw[0].isupper() and not raw.isupper() and lower not in GENERIC and len(raw) > 1:
                if not _SENTENCE_END.search(text[: m.start()]):
                    add("name", _word(lower))
            elif m.start() in called:
                add("name", lower)
                continue
            w = _word(lower)
            if len(w) > 1 and w not in GENERIC and not w.isdigit():
                subject.add(w)
    if key:
        # The key's last part names the thing ("db/main" -> primary); its folders are categories that many
        # facts share (cache/, net/), which would make any two facts of a folder look alike.
        for part in re.split(r"[_.\-]+", key.lower().rsplit("/", 1)[-1]):
            w = _word(part)
            if len(w) > 1 and w not in GENERIC and not w.isdigit() and not _is_host(w):
                subject.add(w)
    contrast = frozenset(w for w in subject if any(w in g for g in CONTRAST_GROUPS))
    return Claims(frozenset(subject), {k: frozenset(v) for k, v in values.items()}, contrast)


def _persons(tokens: list[re.Match[str]]) -> dict[int, str]:
    """People's names ("Alice Martin": two capitalised words in a row, the first not a common word): the start of
    each word -> the whole name at its first word, "" at the second (a name is a value, not a subject word)."""
    out: dict[int, str] = {}
    for a, b in zip(tokens, tokens[1:]):
        first, second = a.group(0), b.group(0)
        if (a.lastgroup == b.lastgroup == "word" and _PERSON.fullmatch(first) and _PERSON.fullmatch(second)
                and not a.string[a.end(): b.start()].strip() and first.lower() not in GENERIC
                and a.start() not in out):
            out[a.start()] = f"{first} {second}".lower()
            out[b.start()] = ""
    return out


def _next_word(tokens: list[re.Match[str]], i: int) -> str | None:
    """The unit of a bare number: the word right after it ("3 replicas" -> replica), when it is a content word."""
    if i + 1 >= len(tokens):
        return None
    nxt = tokens[i + 1]
    between = nxt.string[tokens[i].end(): nxt.start()]
    if nxt.lastgroup != "word" or between.strip():
        return None
    w = _word(nxt.group(0).lower())
    return w if w not in GENERIC and len(w) > 1 else None


def _contrasting(a: Claims, b: Claims) -> bool:
    for group in CONTRAST_GROUPS:
        in_a, in_b = a.contrast & group, b.contrast & group
        if in_a and in_b and not (in_a & in_b):
            return True
    return False


def _values(claims: Claims, other: Claims) -> dict[str, frozenset[str]]:
    """``claims``' values, less the names the other text has among its subject words ("Kubernetes" against
    "k8s", "Grafana" against "grafana"): a product both name is what they are about, not a value they differ on."""
    out = dict(claims.values)
    if "name" in out:
        names = frozenset(n for n in out["name"] if not {_word(w) for w in n.split()} <= other.subject)
        if names:
            out["name"] = names
        else:
            del out["name"]
    return out


def judge(new: Claims, stored: Claims, *, cosine: float | None = None, min_overlap: float = MIN_OVERLAP,
          min_shared: int = MIN_SHARED, min_cosine: float = MIN_COSINE) -> Verdict | None:
    """Whether ``new`` contradicts or agrees with ``stored`` (None: about other things, or nothing comparable)."""
    shared = new.subject & stored.subject
    smaller = min(len(new.subject), len(stored.subject)) or 1
    overlap = len(shared) / smaller
    if len(shared) < min_shared:
        return None
    close = overlap >= min_overlap or (cosine is not None and cosine >= min_cosine)
    if not close or _contrasting(new, stored):
        return None
    mine, theirs = _values(new, stored), _values(stored, new)
    both = set(mine) & set(theirs)
    differing = {k for k in both if not mine[k] & theirs[k]}
    agreeing = both - differing
    if not both:
        return None
    entity_diff = differing & ENTITY_KINDS
    if entity_diff and (both - ENTITY_KINDS):
        return None  # two hosts (or people), each with its own values
    if entity_diff and differing - ENTITY_KINDS:
        return None
    words = tuple(sorted(shared))
    if differing:
        return Verdict("contradicts", round(overlap, 3), words,
                       {k: {"new": sorted(mine[k]), "stored": sorted(theirs[k])} for k in sorted(differing)},
                       cosine)
    return Verdict("agrees", round(overlap, 3), words, {}, cosine) if agreeing else None


def compare(new: str, stored: str, *, stored_key: str | None = None, new_key: str | None = None,
            cosine: float | None = None, **thresholds: float) -> Verdict | None:
    """:func:`judge` on two texts (and the stored fact's key, whose words are part of its subject)."""
    return judge(extract(new, new_key), extract(stored, stored_key), cosine=cosine, **thresholds)


def describe(values: dict[str, dict[str, list[str]]]) -> str:
    """``port 5433 where it says 5432; host db03 where it says db01``: what differs, for people."""
    parts = []
    for kind, sides in values.items():
        label = kind.split(":", 1)[1] if kind.startswith("count:") else kind
        parts.append(f"{label} {', '.join(sides.get('new', [])) or '-'} where it says "
                     f"{', '.join(sides.get('stored', [])) or '-'}")
    return "; ".join(parts)
