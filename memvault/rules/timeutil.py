"""Times: RFC 3339 UTC strings on disk, timezone-aware datetimes in memory, ages like ``30d``."""
from __future__ import annotations

import re
from datetime import date, datetime, timedelta, timezone

from .errors import InvalidValue

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w|y)\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def now() -> datetime:
    return datetime.now(timezone.utc)


def _seconds(dt: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a UTC time, the year in four digits (strftime's %Y writes year 999 as "999", which
    no RFC 3339 reader takes back and which sorts after every four-digit year)."""
    return f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"


def format_time(dt: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, to the second (milliseconds when they are not zero)."""
    dt = dt.astimezone(timezone.utc)
    if dt.microsecond >= 1000:  # a fraction below a millisecond is written as none, so the text reads back the same
        return f"{_seconds(dt)}.{dt.microsecond // 1000:03d}Z"
    return _seconds(dt) + "Z"


#: How an index stores a time: UTC to the millisecond, fixed width (a four-digit year, always three digits of
#: fraction), so that text order is time order (a line may give its time in any RFC 3339 form, and "…00+02:00",
#: "…00.5Z" or a bare date do not sort as the times they are). To the millisecond, as :func:`format_time` shows it:
#: a time shown and given back (a page's next bound, the time recall looks up a turn's neighbours by) is the time
#: stored, not one that sorts below it. :func:`index_time` writes it, :func:`shown_time` reads it back.
INDEX_TIME = "YYYY-MM-DDTHH:MM:SS.fffZ"


def index_time(value: str | datetime | None) -> str | None:
    """``value`` (any form :func:`parse_time` reads) in the index's form (:data:`INDEX_TIME`); a text that is no
    time is kept as it is (the index then holds what the file says, and the reader reports the line)."""
    if value is None:
        return None
    try:
        dt = parse_time(value)
    except InvalidValue:
        return str(value)
    return f"{_seconds(dt)}.{dt.microsecond // 1000:03d}Z"


def bound_time(value: str | datetime, name: str) -> str:
    """A listing's bound (``before``, ``after``, ``since``) in the index's form; raises :class:`InvalidValue`
    naming ``name`` when it is no time (compared as text, it would have been a bound of nothing in particular)."""
    return index_time(parse_time(value, name)) or ""


def to_milliseconds(dt: datetime) -> datetime:
    """``dt`` without what is below its millisecond: the time an index keeps (:data:`INDEX_TIME`)."""
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


def shown_time(stored: str | None) -> str | None:
    """A time as the index stores it (:func:`index_time`), given back as :func:`format_time` writes it."""
    if stored is None or len(stored) != 24 or stored[19] != "." or not stored.endswith("Z"):
        return stored
    return stored[:19] + "Z" if stored[20:23] == "000" else stored


def parse_age(text: str) -> timedelta | None:
    """``30d``, ``12h``, ``2w``, ``90m``, ``45s``, ``1y`` -> timedelta; None when ``text`` is not an age."""
    m = _AGE.match(text) if isinstance(text, str) else None
    if not m:
        return None
    try:
        return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2).lower()])
    except OverflowError:
        raise InvalidValue("age", f"{text.strip()!r} is longer than any calendar allows") from None


def parse_time(value: object, name: str = "time") -> datetime:
    """Parse an RFC 3339 / ISO 8601 time or a date into an aware UTC datetime.

    Naive times are taken as UTC. A bare date is midnight UTC. Raises :class:`InvalidValue` naming ``name``.
    """
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=timezone.utc)
            dt = dt.astimezone(timezone.utc)
        except (ValueError, OverflowError):
            raise InvalidValue(name, f"not an RFC 3339 time or date: {value!r}") from None
    else:
        raise InvalidValue(name, f"not a time: {value!r}")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def parse_time_or_age(value: str, name: str = "time", *, reference: datetime | None = None) -> datetime:
    """A point in time given either absolutely or as an age before ``reference`` (default now): ``7d``."""
    try:
        age = parse_age(value)
        if age is not None:
            return (reference or now()) - age
    except (InvalidValue, OverflowError):
        raise InvalidValue(name, f"{value.strip()!r} reaches back before the year 1") from None
    try:
        return parse_time(value, name)
    except InvalidValue as exc:
        # an age is as good here: say so, not only "RFC 3339" (the person had typed "yesterday")
        raise InvalidValue(name, f"{exc.reason}; or an age such as 30d, 12h or 2w") from None


def parse_date(value: object, name: str = "date") -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            try:
                return parse_time(value, name).date()
            except InvalidValue:
                pass
    raise InvalidValue(name, f"not a date (YYYY-MM-DD): {value!r}")


def decayed(value: float, since: float | None, at: float, half_life: float) -> float:
    """A counter worth ``value`` at the Unix time ``since``, halved every ``half_life`` seconds until ``at``
    (0 when it was never set): how usage counts age, in the local state and in a team's shared one alike."""
    if since is None or value <= 0:
        return 0.0
    return value * 0.5 ** (max(0.0, at - since) / half_life)


def from_timestamp(value: float | None) -> datetime | None:
    """A stored Unix time as an aware UTC datetime (None stays None)."""
    return None if value is None else datetime.fromtimestamp(float(value), timezone.utc)


def age_text(seconds: float) -> str:
    """A short age for people: ``45s``, ``12m``, ``3h``, ``2d`` (how long a proposal has waited)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def age_seconds(at: datetime | None) -> float:
    """Seconds since ``at`` (0 for None or a time to come)."""
    return max(0.0, now().timestamp() - at.timestamp()) if at is not None else 0.0
