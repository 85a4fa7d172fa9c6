"""memvault.rules.timeq: every time phrase a question may hold, as a table of (phrase, now) -> window, UTC."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

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
    ("outage in Oct 2025", "2025-10-01", "2025-11-01", "outage"),  # with its year an abbreviation is a month
    ("outage in May", "2026-05-01", "2026-06-01", "outage"),
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
    # dates written out, as people (and LoCoMo's questions) write them
    ("what did Gina find on 1 February, 2023?", "2023-02-01", "2023-02-02", "what did Gina find ?"),
    ("accepted for on May 23, 2023", "2023-05-23", "2023-05-24", "accepted for"),
    ("incident on the 3rd of March 2024", "2024-03-03", "2024-03-04", "incident"),
    ("the week before August 3 2023", "2023-08-03", "2023-08-04", "the week before"),
    ("what broke on 3rd June", "2026-06-03", "2026-06-04", "what broke"),  # no year: the most recent
    ("deploy on December 5", "2025-12-05", "2025-12-06", "deploy"),  # not in the future: last year's
    ("on 29 February", "2024-02-29", "2024-03-01", ""),  # the most recent one there was
    ("tournament won in the beginning of November 2022", "2022-11-01", "2022-12-01",
     "tournament won in the beginning of"),
    ("painted in July, 2023", "2023-07-01", "2023-08-01", "painted"),
    ("the beach in 2023", "2023-01-01", "2024-01-01", "the beach"),
    ("outages during 2026", "2026-01-01", "2027-01-01", "outages"),
    ("errors at 2023-05-01T10:00:00Z on web1", "2023-05-01", "2023-05-02", "errors on web1"),  # its day
    ("errors since 2023-05-01T10:00:00+02:00", "2023-05-01", "2026-12-03T15:30", "errors"),
    ("changes since 1 May 2023", "2023-05-01", "2026-12-03T15:30", "changes"),
    ("changes since May 1, 2023", "2023-05-01", "2026-12-03T15:30", "changes"),
    ("tickets before the 1st of May, 2023", None, "2023-05-01", "tickets"),
    ("the puppy she got two weeks before August 11, 2023", "2023-08-11", "2023-08-12",
     "the puppy she got two weeks before"),  # an offset from the day, not all time before it
]


@pytest.mark.parametrize("query, since, until, rest", TABLE, ids=[row[0] for row in TABLE])
def test_a_time_phrase_becomes_a_window_and_leaves_the_words(query, since, until, rest):
    window = timeq.parse(query, NOW)
    assert window is not None
    assert (window.since, window.until, window.query) == (t(since), t(until), rest)
    assert window.phrase and window.phrase.lower() in query.lower()


@pytest.mark.parametrize("query", ["which port does the primary listen on", "the last deploy of web3",
                                   "month-end report job", "may the backup run twice", "on call rota",
                                   "incident on 2026-13-45", "week42 release notes", "errors in 8080",
                                   "upload fails in 2048 chunks", "plans in 2031", "on 30 February",
                                   "may 2 replicas lag", "runbook for may",
                                   # abbreviations that are words of their own, and "may" as a verb: a review found
                                   # "written in oct" taken for October, ranking an October episode above the octal
                                   # fact
                                   "how are file permissions written in oct", "stored in dec or hex",
                                   "what is 0x1F in dec", "why sign in may fail", "the tool in mar state"])
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


def test_a_memory_written_up_to_a_week_after_a_time_is_of_it():
    window = timeq.parse("what did we deploy on 1 May, 2023", NOW)
    assert window is not None
    assert window.holds(t("2023-05-01T09:00"))
    assert window.holds(t("2023-05-08T23:59"))  # told about it within the week after the day
    assert not window.holds(t("2023-05-09T00:00"))
    assert not window.holds(t("2023-04-30T23:59"))  # written before it: not of it
    assert window.holds(t("2023-05-09T12:00"), grace=timedelta(days=8))


AT = datetime(2026, 12, 5, 10, 0, tzinfo=timezone.utc)  # a Saturday


@pytest.mark.parametrize("text, times", [
    ("Incident, Tuesday last week: the disk of db-billing-1 reached 93%", [("2026-11-23", "2026-11-30")]),
    ("Retro: on 3 March 2025 the backup job failed", [("2025-03-03", "2025-03-04")]),
    ("failed yesterday, fixed 2026-12-05", [("2026-12-05", "2026-12-06"), ("2026-12-04", "2026-12-05")]),
    ("2023-05-01T10:00:00Z: disk full on db1", [("2023-05-01", "2023-05-02")]),  # a log line's timestamp
    # one phrase is one time: "on 3 June, 2023" is not also "on 3 June" (of this year) and "June, 2023"
    ("will paint on 3 June, 2023", [("2023-06-03", "2023-06-04")]),
    # open-ended spans and "until now" say when something holds, not what the text is about
    ("Copies are kept for 35 days; renewed since 2026-01-01, before 2027-01-01, in the last 3 days, today",
     []),
    ("No deploys on Fridays. Port 8080, 2048 workers.", []),
])
def test_the_times_a_text_names_are_read_as_of_when_it_was_written(text, times):
    assert timeq.named_times(text, AT) == [(t(a), t(b)) for a, b in times]


def of_it(window, written, text=""):
    """What recall's windows.by_time asks of a memory, in its order: written before the window began (or at no known time):
    not of it; written inside it, or naming a time inside it: of it; written in the week after: probably."""
    if written is None or not window.may_tell(written):
        return "no"
    if window.inside(written) or (text and window.named_in(text, written)):
        return "yes"
    return "probably" if window.holds(written) else "no"


def test_a_memory_is_of_a_time_it_was_written_in_or_names():
    last_week = timeq.parse("disk incidents last week", AT)
    assert last_week is not None and (last_week.since, last_week.until) == (t("2026-11-23"), t("2026-11-30"))
    written = t("2026-10-01")
    assert of_it(last_week, written, "The disk of db1 filled up.") == "no"
    # read as of when it was written: last week then was 2026-09-21..28, not this one
    assert of_it(last_week, written, "Incident, Tuesday last week: the disk of db1 filled up.") == "no"
    assert of_it(last_week, t("2026-12-01"), "Incident, Tuesday last week: the disk of db1 filled up.") == "yes"
    # written weeks after (past the grace), naming a day inside: of it; written before it: a plan, not a record
    assert of_it(last_week, t("2026-12-20"), "Incident on 24 November 2026: the disk of db1 filled up.") == "yes"
    assert of_it(last_week, t("2026-12-20"), "The disk of db1 filled up.") == "no"
    assert of_it(last_week, written, "Maintenance on 24 November 2026: db1 gets a bigger disk.") == "no"
    assert of_it(last_week, written, "Incidents in 2026: the disk of db1 filled up.") == "no"  # wider than it
    assert of_it(last_week, None, "Incident on 24 November 2026") == "no"
    # inside; the week after it (up to its last instant); past it
    assert of_it(last_week, t("2026-11-25")) == "yes"
    assert of_it(last_week, t("2026-12-06T23:59")) == "probably" and of_it(last_week, t("2026-12-07")) == "no"


def test_only_the_start_of_a_huge_text_is_read_for_its_times():
    """Recall reads the times of every candidate of a question that names one: a 3 MB runbook costs what its
    first TEXT_READ characters cost."""
    head = "x" * (timeq.TEXT_READ - 20) + " on 3 March 2025 "
    assert timeq.named_times(head + "and on 4 March 2025 " * 200_000, AT) == [(t("2025-03-03"), t("2025-03-04"))]


def test_a_text_read_before_is_known_again_without_being_kept(monkeypatch):
    """A warm process asked about a time reads the same runbooks again: their times are remembered by a digest of
    the text and when it was written (not the text), the oldest forgotten first."""
    reads = []
    real = timeq._read_times
    monkeypatch.setattr(timeq, "_read_times", lambda text, at: reads.append(text) or real(text, at))
    monkeypatch.setattr(timeq, "_known", {})
    monkeypatch.setattr(timeq, "KNOWN_TEXTS", 3)
    text = "Retro: on 3 March 2025 the backup failed"
    first = timeq.named_times(text, AT)
    assert first == [(t("2025-03-03"), t("2025-03-04"))]
    first.clear()  # what a caller does with its list is not what the next one gets
    assert timeq.named_times(text, AT) == [(t("2025-03-03"), t("2025-03-04"))] and reads == [text]
    # the same words written at another time are another text: "yesterday" of another day
    assert timeq.named_times("yesterday the disk filled", AT) != timeq.named_times("yesterday the disk filled",
                                                                                   t("2025-01-10"))
    assert len(reads) == 3 and all(len(digest) == 16 and isinstance(digest, bytes) for digest, _at in timeq._known)
    timeq.named_times("on 4 March 2025", AT)  # a fourth text: the first one read is forgotten
    assert len(timeq._known) == 3
    timeq.named_times(text, AT)
    assert reads[-1] == text and len(reads) == 5
    timeq.forget_times()  # all forgotten: the next meeting reads the text again
    assert len(timeq._known) == 0
    timeq.named_times(text, AT)
    assert len(timeq._known) == 1 and len(reads) == 6 and reads[-1] == text


@pytest.mark.parametrize("query, said, window", [
    ("what happened 31 February 2023", ["31 February 2023"], None),  # not "February 2023" around it
    ("deploys on February 30, 2024 and in May 2023", ["February 30, 2024"], ("2023-05-01", "2023-06-01")),
    ("on the 31st of June", ["31st of June"], None),
    ("incident on 2026-02-30", ["2026-02-30"], None),
    ("errors at 2026-02-30T10:00:00Z", ["2026-02-30T10:00:00Z"], None),
    ("on 29 February", [], ("2024-02-29", "2024-03-01")),
])
def test_a_date_no_calendar_has_is_said_and_not_read_as_the_month_around_it(query, said, window):
    assert timeq.impossible_dates(query) == said
    found = timeq.parse(query, NOW)
    assert (found and (found.since, found.until)) == (window and (t(window[0]), t(window[1])))


@pytest.mark.parametrize("query", [
    "the pool may 4096 connections", "it may 8192 bytes", "the 1st of may 1066", "pgbouncer on 31 dec 9999",
    "in 2027",  # a year to come holds no memory yet
])
def test_a_year_outside_1990_to_next_year_is_no_time(query):
    assert timeq.parse(query, NOW) is None


def test_the_end_of_the_calendar_does_not_overflow():
    window = timeq.parse("pgbouncer pool connections before 9999-12-30", NOW)
    assert window is not None and window.holds(t("2026-01-01")) and window.inside(t("2026-01-01"))
    assert of_it(window, t("2026-01-01")) == "yes" and of_it(window, t("9999-12-29")) == "yes"


def test_a_text_that_names_many_days_is_of_none_of_them():
    """A log or a calendar (or a memory written to match every question about a day) is about no day in
    particular: past MANY_TIMES distinct times its text names none."""
    days = [f"on {d} March 2023" for d in range(1, 30)]
    assert len(timeq.named_times(" ".join(days[: timeq.MANY_TIMES]), AT)) == timeq.MANY_TIMES
    assert timeq.named_times(" ".join(days), AT) == []
    window = timeq.parse("what failed on 14 March 2023", NOW)
    assert window is not None and of_it(window, t("2026-01-01"), " ".join(days)) == "no"


def test_a_word_that_starts_like_a_month_is_not_one():
    assert timeq.named_times("2023" + " " * 22 + "in mayonnaise recipes", AT) == []


@pytest.mark.parametrize("text", ["2023-02-30 " * 20_000, "31 feb 2023 " * 20_000, "on 1 may 2023 " * 20_000])
def test_a_question_of_thousands_of_dates_reads_a_bounded_number(text):
    """At most MATCHES matches of a rule are read: each is compared with those before it, which was quadratic
    (35 s for the second question)."""
    assert len(timeq.impossible_dates(text)) <= timeq.MATCHES
    window = timeq.parse(text, NOW)
    assert window is None or window.phrase.strip() in text[:200]
