"""Charts as data: dated values in, an axis and the positions of every bar out (the templates draw them as SVG).

Pure functions, no I/O, so a test can hold the axis against the data. The x axis is made of whole UTC days: one slot
per day from the first day with data to the last (a procedure run once gets an axis of that one day, not years
around it; a vault that began yesterday does not start the day before). A bar per day sits in the middle of its
slot; a point with a time of day (a run) sits where that time falls within its day. Ticks are real dates (every
day, every week's Monday, each month's or year's first day, as the span allows) placed under their day's bar.
Times with an offset are read in UTC, as every stored time is.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

from ...rules.errors import MemvaultError
from ...rules.timeutil import parse_time

#: Drawing area inside the SVG (the labels take the margins).
WIDTH, HEIGHT = 720.0, 180.0
LEFT, RIGHT, TOP, BOTTOM = 48.0, 12.0, 10.0, 28.0
#: Most x ticks labelled, and the widest a bar gets (one bar alone must not fill the chart).
MAX_TICKS = 8
MAX_BAR = 36.0
_DAY_STEPS = (1, 2, 7, 14)
_MONTH_STEPS = (1, 2, 3, 6, 12, 24, 60, 120)


@dataclass
class Bar:
    """One mark: ``day`` (ISO date), its ``value`` (for a stack: this series' part), and where it is drawn."""

    day: str
    value: float
    series: str
    x: float
    y: float
    width: float
    height: float
    at: str | None = None  # the exact time, for a point placed within its day


@dataclass
class Tick:
    label: str
    pos: float  # x for a date tick, y for a value tick
    value: str | float = ""


@dataclass
class Chart:
    """An axis (``first``..``last`` days, inclusive; ``ymax``), its ticks and the bars; ``empty`` with no data."""

    first: str | None
    last: str | None
    days: int
    ymax: float
    bars: list[Bar] = field(default_factory=list)
    xticks: list[Tick] = field(default_factory=list)
    yticks: list[Tick] = field(default_factory=list)
    series: list[str] = field(default_factory=list)
    width: float = WIDTH + LEFT + RIGHT
    height: float = HEIGHT + TOP + BOTTOM
    # the plot area, for the template's frame
    left: float = LEFT
    top: float = TOP
    right: float = LEFT + WIDTH
    bottom: float = TOP + HEIGHT

    @property
    def empty(self) -> bool:
        return not self.bars

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "empty": self.empty}


def day_of(when: str | date | datetime) -> date:
    """The UTC day of a date, a time or an ISO string (an offset is converted, a bare date is that day)."""
    if isinstance(when, datetime):
        return parse_time(when).date()
    if isinstance(when, date):
        return when
    text = str(when).strip()
    if len(text) == 10:
        return date.fromisoformat(text)
    return parse_time(text).date()


def daily(series: Mapping[str, Iterable[tuple[str | date | datetime, float]]], *, stacked: bool = True) -> Chart:
    """A bar per day for each series (values of one day summed); several series stack in the order given.
    Days without data have no bar; the axis runs from the first day with data to the last."""
    sums: dict[str, dict[date, float]] = {}
    for name, points in series.items():
        per = sums.setdefault(name, {})
        for when, value in points:
            if value is None:
                continue
            day = day_of(when)
            per[day] = per.get(day, 0.0) + float(value)
    days = sorted({d for per in sums.values() for d, v in per.items() if v})
    if not days:
        return _empty(list(series))
    first, last = days[0], days[-1]
    totals = {d: sum(per.get(d, 0.0) for per in sums.values()) for d in days} if stacked else \
        {d: max(per.get(d, 0.0) for per in sums.values()) for d in days}
    ymax, yticks = value_axis(max(totals.values()))
    chart = _frame(first, last, ymax, yticks, list(series))
    slot = WIDTH / chart.days
    width = min(slot * 0.8, MAX_BAR)
    count = len(sums)
    for day in days:
        base = 0.0
        for i, (name, per) in enumerate(sums.items()):
            value = per.get(day, 0.0)
            if not value:
                continue
            centre = _centre(first, day, chart.days)
            x, w = (centre - width / 2, width) if stacked else (centre - width / 2 + i * width / count, width / count)
            top = _y(base + value, ymax) if stacked else _y(value, ymax)
            bottom = _y(base, ymax) if stacked else _y(0.0, ymax)
            chart.bars.append(Bar(day.isoformat(), _round(value), name, _round(x), _round(top), _round(w),
                                  _round(bottom - top)))
            if stacked:
                base += value
    return chart


def timed(points: Sequence[tuple[str | datetime, float]], *, series: str = "value") -> Chart:
    """One mark per point, at its exact time within its day's slot (runs of a procedure): the axis is the days
    from the first point's to the last's."""
    stamps = []
    for when, value in points:
        try:
            stamps.append((parse_time(when), float(value or 0.0)))
        except MemvaultError:
            continue  # a run without a readable time is listed, not plotted
    if not stamps:
        return _empty([series])
    first, last = min(s.date() for s, _ in stamps), max(s.date() for s, _ in stamps)
    ymax, yticks = value_axis(max(v for _, v in stamps))
    chart = _frame(first, last, ymax, yticks, [series])
    start = datetime(first.year, first.month, first.day, tzinfo=timezone.utc)
    span = chart.days * 86400.0
    width = min(WIDTH / chart.days * 0.8, 4.0)
    for stamp, value in stamps:
        x = LEFT + (stamp - start).total_seconds() / span * WIDTH
        x = min(max(x - width / 2, LEFT), LEFT + WIDTH - width)  # a run at midnight stays on the axis
        top = _y(value, ymax)
        chart.bars.append(Bar(stamp.date().isoformat(), _round(value), series, _round(x), _round(top),
                              _round(width), _round(max(_y(0.0, ymax) - top, 1.0)),
                              at=stamp.isoformat().replace("+00:00", "Z")))
    return chart


def value_axis(top: float) -> tuple[float, list[Tick]]:
    """A round maximum at or above ``top`` (1, 2, 2.5 or 5 times a power of ten) and ticks from 0 to it."""
    if not top or top <= 0 or not math.isfinite(top):
        top = 1.0
    power = 10 ** math.floor(math.log10(top))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= top:
            ymax = step * power
            break
    parts = 5 if ymax / power in (1, 2.5, 5, 10) else 4
    ticks = []
    for i in range(parts + 1):
        value = ymax * i / parts
        ticks.append(Tick(_number(value), _round(_y(value, ymax)), _round(value)))
    return ymax, ticks


def date_ticks(first: date, last: date) -> list[date]:
    """Real dates between ``first`` and ``last`` (inclusive) to label: each day, every other day, Mondays, every
    other Monday, or first days of months (1, 2, 3, 6 months, years): the finest step with at most MAX_TICKS."""
    days = (last - first).days + 1
    for step in _DAY_STEPS:
        if step == 1 or step == 2:
            if math.ceil(days / step) <= MAX_TICKS:
                return [first + timedelta(days=i) for i in range(0, days, step)]
            continue
        monday = first + timedelta(days=(7 - first.weekday()) % 7)
        found = [monday + timedelta(days=i) for i in range(0, (last - monday).days + 1, step)]
        if len(found) <= MAX_TICKS:
            return found or [first]
    month = date(first.year, first.month, 1)
    if month < first:
        month = _add_months(month, 1)
    for step in _MONTH_STEPS:
        if step >= 12:  # years: start at a January
            start = date(first.year if first == date(first.year, 1, 1) else first.year + 1, 1, 1)
        else:
            start = month
            while (start.month - 1) % step:
                start = _add_months(start, 1)
        found = []
        while start <= last:
            found.append(start)
            start = _add_months(start, step)
        if len(found) <= MAX_TICKS:
            return found or [first]
    return [first, last]


# -- helpers ---------------------------------------------------------------------------------------------
def _frame(first: date, last: date, ymax: float, yticks: list[Tick], series: list[str]) -> Chart:
    days = (last - first).days + 1
    chart = Chart(first.isoformat(), last.isoformat(), days, ymax, yticks=yticks, series=series)
    chart.xticks = [Tick(d.isoformat(), _round(_centre(first, d, days)), d.isoformat()) for d in date_ticks(first, last)]
    return chart


def _empty(series: list[str]) -> Chart:
    return Chart(None, None, 0, 1.0, series=series)


def _centre(first: date, day: date, days: int) -> float:
    return LEFT + ((day - first).days + 0.5) * WIDTH / days


def _y(value: float, ymax: float) -> float:
    return TOP + HEIGHT - value / ymax * HEIGHT


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _round(value: float) -> float:
    return round(value, 3)


def _number(value: float) -> str:
    return f"{value:g}" if value < 10000 else f"{value / 1000:g}k"
