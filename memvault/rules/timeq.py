"""Time in a question: "yesterday", "last week", "since Monday", "in November", "on 2026-11-03".

:func:`parse` finds one such expression in a recall query and turns it into a window of time (``since``,
``until``, UTC, relative to ``now``) plus the query without it, so the words "last week" are not searched for.
Rules, all in UTC:

- ``today``, ``yesterday``, ``N days ago``: that calendar day.
- ``this week`` / ``last week``: Monday 00:00 to the next Monday (the current one, the one before).
- ``this month`` / ``last month``, ``in November`` / ``in November 2026``: that calendar month; a month name
  without a year is the most recent such month not in the future.
- ``since Monday`` (a weekday: the most recent one, today included), ``since 2026-11-03``, ``since 1 May 2023``,
  ``since yesterday``: from then until now; ``before 2026-11-03``, ``before May 1, 2023``: until then.
- ``on 2026-11-03``, ``on Monday`` (the most recent), a bare ``2026-11-03``, a timestamp ``2026-11-03T10:00:00Z``:
  that day.
- ``last N days`` / ``past N hours`` / ``in the last N weeks``: from now minus that age until now.
- ``1 May, 2022``, ``May 23, 2023``, ``on 3rd June 2023``: that day; ``on 1 May`` / ``on May 1`` (no year): the most
  recent such day not in the future. ``July 2023`` (no "in"): that month. ``in 2023`` / ``during 2023``: that
  year, from 1990 to this one (``in 8080`` is not a year).

A window the question named (its ``phrase`` is not empty) ranks the memories of that time first
(``memvault.core.windows.by_time``): one written inside it (:meth:`Window.inside`), or written after it began and
naming a time inside it (:meth:`Window.named_in`), surely; one written up to :data:`GRACE` after it
(:meth:`Window.holds`), probably, since what is written about a time is often written after it ("the disk filled up
last Tuesday", noted on Friday).
"""
from __future__ import annotations

import hashlib
import itertools
import re
import threading
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from .timeutil import to_milliseconds

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")
_MONTH = "|".join(MONTHS + tuple(m[:3] for m in MONTHS if len(m) > 3) + ("sept",))
_DAY = "|".join(WEEKDAYS)
_DATE = r"\d{4}-\d{2}-\d{2}"
#: What may follow a date in an RFC 3339 timestamp (2023-05-01T10:00:00Z): the timestamp names that date's day.
_CLOCK = r"(?:[Tt]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:?\d{2})?)?"
_ORD = r"(\d{1,2})(?:st|nd|rd|th)?"
#: How long after a time a memory of it may be written, and still be of it (:meth:`Window.holds`).
GRACE = timedelta(days=7)
FIRST_YEAR = 1990
#: Matches of one rule read in one text or question (a question of 20,000 dates is no question).
MATCHES = 64
#: A text naming more distinct times than this is a log or a calendar, of none of them in particular (and a memory
#: cannot escape the ranking of every question by listing every day of a year).
MANY_TIMES = 8
_UNIT = {"minute": 60, "minutes": 60, "hour": 3600, "hours": 3600, "day": 86400, "days": 86400, "week": 604800,
         "weeks": 604800, "month": 30 * 86400, "months": 30 * 86400}


@dataclass(frozen=True)
class Window:
    """A span of time found in a query, and the query without the words that said it."""

    since: datetime | None
    until: datetime | None
    phrase: str
    query: str

    def __post_init__(self) -> None:
        # to the millisecond, as the indexes keep times: "the last 2 hours" ends where an index's window ends
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, to_milliseconds(value))

    def holds(self, stamp: datetime, grace: timedelta = GRACE) -> bool:
        """Whether ``stamp`` is inside this window or up to ``grace`` after it (a memory written in the week after a
        time is probably of it)."""
        return ((self.since is None or stamp >= self.since)
                and (self.until is None or stamp - grace < self.until))  # never past the calendar's end

    def inside(self, stamp: datetime) -> bool:
        """Whether ``stamp`` is inside the window itself (no grace after it)."""
        return self.holds(stamp, timedelta(0))

    def may_tell(self, created: datetime | None) -> bool:
        """Whether a memory written at ``created`` can be of this window at all: one written before it began is a
        plan, not a record (and one of no known time is of none)."""
        return created is not None and (self.since is None or created >= self.since)

    def named_in(self, text: str, written: datetime) -> bool:
        """Whether ``text``, written at ``written``, names a time inside this window ("Tuesday last week")."""
        return any((self.since is None or a >= self.since) and (self.until is None or b <= self.until)
                   for a, b in named_times(text, written))


def _day_start(d: date) -> datetime:
    return datetime.combine(d, time(0), tzinfo=timezone.utc)


def _month(name: str) -> int:
    name = name.lower()
    for i, full in enumerate(MONTHS, 1):
        if full.startswith(name[:3]):
            return i
    raise ValueError(name)


def _last_weekday(name: str, today: date) -> date:
    target = WEEKDAYS.index(name.lower())
    return today - timedelta(days=(today.weekday() - target) % 7)


def _month_window(year: int, month: int) -> tuple[datetime, datetime]:
    start = _day_start(date(year, month, 1))
    end = _day_start(date(year + (month == 12), month % 12 + 1, 1))
    return start, end


#: "two weeks before August 11" is an offset from a day, not everything before it: read as the day.
_NOT_AN_OFFSET = "".join(f"(?<!{w} )" for w in ("day", "days", "week", "weeks", "weekend", "month", "months"))

PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b(?:in|during|over) the (?:last|past) (\d+) ({'|'.join(_UNIT)})\b", re.I), "ago_span"),
    (re.compile(rf"\b(?:last|past) (\d+) ({'|'.join(_UNIT)})\b", re.I), "ago_span"),
    (re.compile(r"\b(\d+) (days?) ago\b", re.I), "days_ago"),
    (re.compile(rf"\bsince ({_DATE}){_CLOCK}\b", re.I), "since_date"),
    (re.compile(rf"\bsince (?:last )?({_DAY})\b", re.I), "since_weekday"),
    (re.compile(r"\bsince yesterday\b", re.I), "since_yesterday"),
    (re.compile(rf"\bbefore ({_DATE}){_CLOCK}\b", re.I), "before_date"),
    (re.compile(rf"{_NOT_AN_OFFSET}\b(since|before) (?:the )?{_ORD} (?:of )?({_MONTH})\.?,? (\d{{4}})\b", re.I),
     "bound_dmy"),
    (re.compile(rf"{_NOT_AN_OFFSET}\b(since|before) ({_MONTH})\.? {_ORD},? (\d{{4}})\b", re.I), "bound_mdy"),
    (re.compile(rf"\b(?:on |at )?({_DATE}){_CLOCK}(?!\w|:\d)", re.I), "on_date"),
    (re.compile(rf"\bon (?:last )?({_DAY})\b", re.I), "on_weekday"),
    (re.compile(r"\byesterday\b", re.I), "yesterday"),
    (re.compile(r"\btoday\b", re.I), "today"),
    (re.compile(r"\b(this|last) week\b", re.I), "week"),
    (re.compile(r"\b(this|last) month\b", re.I), "month"),
    (re.compile(rf"\b(?:on )?(?:the )?{_ORD} (?:of )?({_MONTH})\.?,? (\d{{4}})\b", re.I), "day_month_year"),
    (re.compile(rf"\b(?:on )?({_MONTH})\.? {_ORD},? (\d{{4}})\b", re.I), "month_day_year"),
    (re.compile(rf"\bon (?:the )?{_ORD} (?:of )?({_MONTH})\b\.?", re.I), "day_month"),
    (re.compile(rf"\bon ({_MONTH})\.? {_ORD}\b", re.I), "month_day"),
    (re.compile(rf"\b(?:in|during) ({_MONTH})\.?(?:,? (\d{{4}}))?\b", re.I), "in_month"),
    (re.compile(rf"\b({_MONTH})\.?,? (\d{{4}})\b", re.I), "month_year"),
    (re.compile(r"\b(?:in|during) (\d{4})\b", re.I), "year"),
]
#: Phrases that are open-ended or run "until now": a question may ask by them, a text is not about them.
_OPEN_ENDED = frozenset({"since_date", "since_weekday", "since_yesterday", "before_date", "bound_dmy", "bound_mdy",
                         "ago_span", "today"})


def _impossible(query: str) -> list[re.Match[str]]:
    out = [m for m in itertools.islice(re.finditer(rf"\b({_DATE}){_CLOCK}(?!\w|:\d)", query), MATCHES)
           if _no_day(date.fromisoformat, m.group(1))]
    for pattern, kind in PATTERNS:
        if kind in ("day_month_year", "month_day_year", "day_month", "month_day"):
            for m in itertools.islice(pattern.finditer(query), MATCHES):
                day, month = ((m.group(1), m.group(2)) if kind.startswith("day") else (m.group(2), m.group(1)))
                if int(day) > 31:
                    continue  # "top 50 may 2024": no one's try at a day
                year = int(m.group(3)) if kind.endswith("year") else 2024  # a leap year: 29 February is a day
                if (not any(m.start() < o.end() and o.start() < m.end() for o in out)
                        and _no_day(lambda _: date(year, _month(month), int(day)), m.group(0))):
                    out.append(m)
    return out


def _year(text: str, today: date, ahead: int = 1) -> int:
    """A written year, from 1990 to next year ("may 4096 connections" is no month; "in 2027": a plan); else
    ValueError."""
    year = int(text)
    if not FIRST_YEAR <= year <= today.year + ahead:
        raise ValueError(text)
    return year


def _no_day(make: Any, text: str) -> bool:
    try:
        make(text)
    except ValueError:
        return True
    return False


def impossible_dates(query: str) -> list[str]:
    """The dates of ``query`` that are no day of any calendar (``2026-02-30``, ``31 February 2023``): :func:`parse`
    reads them as words (not as the month around them), and the caller says so instead of silently searching all
    time."""
    return [re.sub(r"^(?:on )?(?:the )?", "", m.group(0), flags=re.I) for m in _impossible(query)]


def _recent_day(month: int, day: int, today: date) -> date:
    """``day`` of ``month`` in the most recent year that puts it not after ``today`` (29 February: a leap year)."""
    year = today.year
    while True:
        try:
            d = date(year, month, day)
        except ValueError:
            if day > 29 or year < today.year - 8:
                raise
            year -= 1
            continue
        if d <= today:
            return d
        year -= 1


#: Abbreviations that are also words of their own in technical text ("written in oct" is octal, "in dec" decimal,
#: "in mar" rarely March): with no year after them, not a month.
_AMBIGUOUS = frozenset({"oct", "dec", "mar"})


def _surely_a_month(word: str) -> bool:
    """Whether ``in WORD`` with no year names a month: not one of the :data:`_AMBIGUOUS` abbreviations, and "May"
    only written so ("in may" is a verb as often: "why sign in may fail")."""
    low = word.lower()
    return low not in _AMBIGUOUS and (low != "may" or word == "May")


def _resolve(kind: str, m: re.Match[str], now: datetime) -> tuple[datetime | None, datetime | None] | None:
    """The window one matched phrase names, said at ``now``; None when it names no time ("on 2026-13-45")."""
    today = now.date()
    since: datetime | None
    until: datetime | None
    try:
        if kind == "ago_span":
            span = int(m.group(1)) * _UNIT[m.group(2).lower()]
            since, until = now - timedelta(seconds=span), now
        elif kind == "days_ago":
            day = today - timedelta(days=int(m.group(1)))
            since, until = _day_start(day), _day_start(day + timedelta(days=1))
        elif kind == "since_date":
            since, until = _day_start(date.fromisoformat(m.group(1))), now
        elif kind == "since_weekday":
            since, until = _day_start(_last_weekday(m.group(1), today)), now
        elif kind == "since_yesterday":
            since, until = _day_start(today - timedelta(days=1)), now
        elif kind == "before_date":
            since, until = None, _day_start(date.fromisoformat(m.group(1)))
        elif kind in ("bound_dmy", "bound_mdy"):  # since / before 1 May 2023, May 1, 2023
            day_of, month = ((int(m.group(2)), _month(m.group(3))) if kind == "bound_dmy"
                             else (int(m.group(3)), _month(m.group(2))))
            start = _day_start(date(_year(m.group(4), today), month, day_of))
            since, until = (start, now) if m.group(1).lower() == "since" else (None, start)
        elif kind == "on_date":
            day = date.fromisoformat(m.group(1))
            since, until = _day_start(day), _day_start(day + timedelta(days=1))
        elif kind == "on_weekday":
            day = _last_weekday(m.group(1), today)
            since, until = _day_start(day), _day_start(day + timedelta(days=1))
        elif kind == "yesterday":
            since, until = _day_start(today - timedelta(days=1)), _day_start(today)
        elif kind == "today":
            since, until = _day_start(today), now
        elif kind == "week":
            monday = today - timedelta(days=today.weekday())
            if m.group(1).lower() == "last":
                monday -= timedelta(days=7)
            since, until = _day_start(monday), _day_start(monday + timedelta(days=7))
        elif kind == "month":
            year, month = today.year, today.month
            if m.group(1).lower() == "last":
                year, month = (year - 1, 12) if month == 1 else (year, month - 1)
            since, until = _month_window(year, month)
        elif kind in ("day_month_year", "month_day_year", "day_month", "month_day"):
            if kind.startswith("day"):
                day_of, month = int(m.group(1)), _month(m.group(2))
            else:
                month, day_of = _month(m.group(1)), int(m.group(2))
            day = (date(_year(m.group(3), today), month, day_of) if kind.endswith("year")
                   else _recent_day(month, day_of, today))
            since, until = _day_start(day), _day_start(day + timedelta(days=1))
        elif kind == "year":
            year = _year(m.group(1), today, ahead=0)
            since, until = _day_start(date(year, 1, 1)), _day_start(date(year + 1, 1, 1))
        else:  # in_month, month_year
            if kind == "in_month" and not m.group(2) and not _surely_a_month(m.group(1)):
                return None  # "written in oct", "stored in dec", "sign in may fail": words, not a time
            month = _month(m.group(1))
            year = (_year(m.group(2), today) if m.group(2)
                    else today.year if month <= today.month else today.year - 1)
            since, until = _month_window(year, month)
    except (ValueError, OverflowError):
        return None  # "on 2026-13-45": not a date, so not a time expression
    return since, until


def parse(query: str, now: datetime) -> Window | None:
    """The first time expression of ``query`` as a :class:`Window`, or None when there is none."""
    now = now.astimezone(timezone.utc)
    bad = [m.span() for m in _impossible(query)]
    for pattern, kind in PATTERNS:
        m = next((m for m in itertools.islice(pattern.finditer(query), MATCHES)
                  if not any(m.start() < b and a < m.end() for a, b in bad)), None)
        if not m:
            continue
        found = _resolve(kind, m, now)
        if found is None:  # "on 31 dec 9999" is no time, and "on 31 dec" inside it is not one either
            bad.append(m.span())
            continue
        rest = (query[: m.start()] + " " + query[m.end():]).strip()
        return Window(found[0], found[1], m.group(0), " ".join(rest.split()))
    return None


#: How much of a memory's text :func:`named_times` reads (a time is named near the start, and recall reads the
#: text of every candidate of a question that names a time).
TEXT_READ = 4000


#: A text is read rule by rule only around a cue every time phrase holds (most of a memory names no time, and recall
#: reads the text of every candidate of a question that names one): four digits, or a word that is a month's name
#: or abbreviation, "week", "month" or "ago", or that ends in "day" (weekdays, "today", "yesterday"). ``str.find``
#: finds them at C speed; a cue inside another word ("maybe", "summary", "weekday") is passed over.
_WORDS = ("week", "month", "ago") + MONTHS + tuple(m[:3] for m in MONTHS if len(m) > 3) + ("sept",)
_DIGITS = re.compile(r"\d{4}")
_REACH = 32  # characters read either side of a cue: the longest phrase ("on the 23rd of September, 2026") fits


def _cues(text: str) -> list[int]:
    low = text.lower()
    found = [m.start() for m in _DIGITS.finditer(text)]
    end = len(low)
    for word, whole in [(w, True) for w in _WORDS] + [("day", False)]:  # "day" ends a word: today, Monday
        n = len(word)
        i = low.find(word)
        while i >= 0:
            if (not whole or i == 0 or not low[i - 1].isalpha()) and (i + n == end or not low[i + n].isalpha()):
                found.append(i)
            i = low.find(word, i + n)
    return sorted(found)


#: Texts whose times a process remembers (:func:`named_times`): a warm process asked about a time reads the same
#: runbooks again and again (0.16 ms for a runbook of 2,000 characters, 3 µs to know it again). Keyed by a digest
#: of the text read and the time it was written, so the cache holds no text; the oldest entry goes first.
KNOWN_TEXTS = 4096
_known: dict[tuple[bytes, datetime], tuple[tuple[datetime, datetime], ...]] = {}
_known_lock = threading.Lock()


def named_times(text: str, at: datetime) -> list[tuple[datetime, datetime]]:
    """Every bounded time a text names ("Tuesday last week", "on 3 March 2024", "yesterday"), resolved as if said at
    ``at`` (when it was written): what a memory is about, beside when it was written.

    Only the stretches around a cue (:func:`_cues`) are read rule by rule; a text read before (the same first
    :data:`TEXT_READ` characters, written at the same time) is not read again."""
    text = text[:TEXT_READ]
    key = (hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), at)
    found = _known.get(key)
    if found is None:
        found = tuple(_read_times(text, at))
        with _known_lock:
            if len(_known) >= KNOWN_TEXTS:
                del _known[next(iter(_known))]
            _known[key] = found
    return list(found)


def forget_times() -> None:
    """Forget every text's times this process knows (:func:`named_times` reads each again): a benchmark's first
    meeting with the texts, or a process that wants its memory back."""
    with _known_lock:
        _known.clear()


def _read_times(text: str, at: datetime) -> list[tuple[datetime, datetime]]:
    segments: list[list[int]] = []
    for i in _cues(text):
        start = text.rfind(" ", 0, max(0, i - _REACH)) + 1  # from a word's start
        end = i + _REACH
        while end < len(text) and text[end].isalnum():  # to a word's end: "in mayonnaise" is no month
            end += 1
        if segments and start <= segments[-1][1]:
            segments[-1][1] = end
        else:
            segments.append([start, end])
    if not segments:
        return []
    at = at.astimezone(timezone.utc)
    out: list[tuple[datetime, datetime]] = []
    for start, end in segments:
        part = text[start:end]
        taken: list[tuple[int, int]] = []  # a phrase is read once, by the first rule that takes it (as parse does)
        for pattern, kind in PATTERNS:
            for m in itertools.islice(pattern.finditer(part), MATCHES):
                if any(m.start() < b and a < m.end() for a, b in taken):
                    continue
                taken.append(m.span())
                if kind in _OPEN_ENDED:
                    continue
                found = _resolve(kind, m, at)
                if found is not None and found[0] is not None and found[1] is not None:
                    if (found[0], found[1]) not in out:
                        out.append((found[0], found[1]))
                    if len(out) > MANY_TIMES:
                        return []  # a log or a calendar: about no time in particular
    return out
