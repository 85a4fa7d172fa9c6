"""memvault.rules.timeq: every time phrase a question may hold, as a table of (phrase, now) -> window, UTC."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memvault.rules import timeq

# Thursday 2026-12-03 15:30 UTC
NOW = datetime(2026, 12, 3, 15, 30, tzinfo=timezone.utc)


def t(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


TABLE = [
    # query, since, until, the query left to search for
    ("disk alerts yesterday", "2026-12-02", "2026-12-03", "disk alerts"),
    ("what broke today", "2026-12-03", "2026-12-03T15:30", "what broke"),
    ("deploys 3 days ago", "2026-11-30", "2026-12-01", "deploys"),
    ("deploys 1 day ago", "2026-12-02", "2026-12-03", "deploys"),
    ("backups this week", "2026-11-30", "2026-12-07", "backups"),
    ("backups last week", "2026-11-23", "2026-11-30", "backups"),
    ("restarts this month", "2026-12-01", "2027-01-01", "restarts"),
    ("restarts last month", "2026-11-01", "2026-12-01", "restarts"),
    ("outage in November", "2026-11-01", "2026-12-01", "outage"),
    ("outage in nov", "2026-11-01", "2026-12-01", "outage"),
    ("outage in December", "2026-12-01", "2027-01-01", "outage"),
    ("outage in January", "2026-01-01", "2026-02-01", "outage"),  # not in the future: last January
    ("outage in March 2025", "2025-03-01", "2025-04-01", "outage"),
    ("outage during sept", "2026-09-01", "2026-10-01", "outage"),
    ("changes since Monday", "2026-11-30", "2026-12-03T15:30", "changes"),
    ("changes since thursday", "2026-12-03", "2026-12-03T15:30", "changes"),  # today counts
    ("changes since last friday", "2026-11-27", "2026-12-03T15:30", "changes"),
    ("changes since yesterday", "2026-12-02", "2026-12-03T15:30", "changes"),
    ("changes since 2026-11-20", "2026-11-20", "2026-12-03T15:30", "changes"),
    ("tickets before 2026-11-20", None, "2026-11-20", "tickets"),
    ("incident on 2026-11-03", "2026-11-03", "2026-11-04", "incident"),
    ("incident 2026-11-03", "2026-11-03", "2026-11-04", "incident"),
    ("incident on Tuesday", "2026-12-01", "2026-12-02", "incident"),
    ("errors in the last 12 hours", "2026-12-03T03:30", "2026-12-03T15:30", "errors"),
    ("errors past 2 weeks", "2026-11-19T15:30", "2026-12-03T15:30", "errors"),
    ("errors over the past 90 minutes", "2026-12-03T14:00", "2026-12-03T15:30", "errors"),
    ("last 3 days", "2026-11-30T15:30", "2026-12-03T15:30", ""),
]


@pytest.mark.parametrize("query, since, until, rest", TABLE, ids=[row[0] for row in TABLE])
def test_a_time_phrase_becomes_a_window_and_leaves_the_words(query, since, until, rest):
    window = timeq.parse(query, NOW)
    assert window is not None
    assert (window.since, window.until, window.query) == (t(since), t(until), rest)
    assert window.phrase and window.phrase.lower() in query.lower()


@pytest.mark.parametrize("query", ["which port does the primary listen on", "the last deploy of web3",
                                   "month-end report job", "may the backup run twice", "on call rota",
                                   "incident on 2026-13-45", "week42 release notes"])
def test_a_question_without_a_time_phrase_has_no_window(query):
    assert timeq.parse(query, NOW) is None


def test_one_phrase_is_taken_by_the_rules_order_and_only_it_is_removed():
    # a day is more precise than a week: "yesterday" is tried before "last week"
    window = timeq.parse("errors yesterday compared with last week", NOW)
    assert window is not None and window.phrase == "yesterday"
    assert (window.since, window.until) == (t("2026-12-02"), t("2026-12-03"))
    assert window.query == "errors compared with last week"


def test_a_window_is_in_utc_whatever_the_clock_zone():
    from datetime import timedelta

    tokyo = NOW.astimezone(timezone(timedelta(hours=9)))  # 2026-12-04 00:30 in Tokyo
    assert timeq.parse("today", tokyo).since == t("2026-12-03")
