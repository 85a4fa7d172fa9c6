"""Times in the index order and filter as times, whatever form a line gives them in. An episode line is valid with
any RFC 3339 time or a bare date ("+02:00", ".5Z", "2026-11-20": a hand-edited file, another tool's export), and
the SQLite index compares its text: stored as written, 11:30+02:00 came after 10:00Z, 10:00:00.500Z before
10:00:00Z and the bare date before every time of its own day. The index stores every time in one fixed-width UTC
form and gives it back as :func:`memvault.rules.timeutil.format_time` writes it, as the PostgreSQL index (which
keeps a timestamptz) always did."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from memvault.index import db as index_db
from memvault.index import search
from memvault.rules.timeutil import format_time, index_time, shown_time

#: (id, created_at as written, the time it is, as format_time writes it)
LINES = [
    ("01JT0000000000000000000001", "2026-11-20T10:00:00Z", "2026-11-20T10:00:00Z"),
    ("01JT0000000000000000000002", "2026-11-20T10:00:00.500Z", "2026-11-20T10:00:00.500Z"),
    ("01JT0000000000000000000003", "2026-11-20T11:30:00+02:00", "2026-11-20T09:30:00Z"),
    ("01JT0000000000000000000004", "2026-11-20", "2026-11-20T00:00:00Z"),
    ("01JT0000000000000000000005", "2026-11-20T10:00:00.250+00:00", "2026-11-20T10:00:00.250Z"),
    ("01JT0000000000000000000006", "2026-11-20T23:30:00-05:00", "2026-11-21T04:30:00Z"),
    # ISO 8601's basic form (another tool's export) and nanoseconds (Go's RFC3339Nano), which Python reads
    ("01JT0000000000000000000008", "20261120T083000Z", "2026-11-20T08:30:00Z"),
    ("01JT0000000000000000000009", "2026-11-20T10:00:00.750000999Z", "2026-11-20T10:00:00.750Z"),
    # a year of three digits was stored as "999-…", after every four-digit year: the newest line of every listing
    ("01JT0000000000000000000007", "0999-03-04T05:06:07Z", "0999-03-04T05:06:07Z"),
    # the last day of the calendar (an open window's end must hold it), with microseconds
    ("01JT000000000000000000000A", "9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.999Z"),
]
SHOWN = {i: shown for i, _w, shown in LINES}
#: newest first, by the time each line is
NEWEST_FIRST = [i for i, _w, shown in sorted(LINES, key=lambda line: line[2].replace("Z", ".000Z")[:23],
                                            reverse=True)]


def write_lines(root, lines=LINES, name="2026-11.jsonl", source="import:chat") -> None:
    path = root / "episodes" / name
    path.parent.mkdir(exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        for item_id, written, _shown in lines:
            fh.write(json.dumps({"id": item_id, "created_at": written, "source": source, "kind": "raw",
                                 "text": f"line {item_id[-1]} of the hand-written export"}) + "\n")


@pytest.fixture
def hv(vault, models):
    write_lines(vault.root)
    vault.reindex()
    return vault


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def test_index_time_is_fixed_width_and_shown_as_format_time_writes():
    for _i, written, shown in LINES:
        stored = index_time(written)
        assert len(stored) == 24 and stored.endswith("Z")
        assert shown_time(stored) == shown == format_time(utc(shown))
        assert index_time(stored) == stored  # once in the index form, it stays
    assert sorted(index_time(w) for _i, w, _s in LINES) == [index_time(SHOWN[i]) for i in reversed(NEWEST_FIRST)]
    assert index_time(None) is None and shown_time(None) is None


def test_a_listing_orders_by_time_and_shows_utc(hv):
    rows = hv.browse.episodes(limit=50)
    assert [r.id for r in rows] == NEWEST_FIRST
    assert {r.id: r.created for r in rows} == SHOWN


def test_before_and_after_compare_times_not_text(hv):
    at = "2026-11-20T10:00:00Z"
    assert [r.id for r in hv.browse.episodes(before=at)] == [i for i in NEWEST_FIRST if utc(SHOWN[i]) < utc(at)]
    assert [r.id for r in hv.browse.episodes(after=at)] == [i for i in NEWEST_FIRST if utc(SHOWN[i]) > utc(at)]
    # the bound itself may be written in any form
    assert [r.id for r in hv.browse.episodes(after="2026-11-20T12:00:00+02:00")] == \
        [i for i in NEWEST_FIRST if utc(SHOWN[i]) > utc("2026-11-20T10:00:00Z")]


def test_a_time_window_of_recall_holds_the_lines_of_that_time(hv):
    since, until = utc("2026-11-20T09:00:00Z"), utc("2026-11-20T10:00:00.300Z")
    got = hv.index.episodes_between(since, until, 50)
    assert [e["id"] for e in got] == [i for i in NEWEST_FIRST if since <= utc(SHOWN[i]) < until]
    assert {e["id"]: e["created"] for e in got} == {i: SHOWN[i] for i in SHOWN if since <= utc(SHOWN[i]) < until}
    day = hv.index.episodes_between(utc("2026-11-20T00:00:00Z"), utc("2026-11-21T00:00:00Z"), 50)
    assert "01JT0000000000000000000004" in [e["id"] for e in day]  # the bare date is midnight of its day


def test_an_index_written_before_is_migrated(hv):
    """An index of an earlier memvault holds the times as the lines wrote them: the migration rewrites them."""
    conn = hv.index.connection()
    with conn:
        for item_id, written, _shown in LINES:
            conn.execute("UPDATE docs SET created = ?, updated = ? WHERE item_id = ?", (written, written, item_id))
        conn.execute("DELETE FROM migrations WHERE name = ?", ("0008_times_in_order",))
    index_db.migrate(conn, index_db.MIGRATIONS)
    stored = dict(conn.execute("SELECT item_id, created FROM docs WHERE kind = 'episode'").fetchall())
    assert stored == {i: index_time(w) for i, w, _s in LINES}
    assert [r.id for r in hv.browse.episodes(limit=50)] == NEWEST_FIRST


def test_the_turns_around_a_line_are_found_by_time(hv):
    """The turns before and after an episode (its context in recall) are its neighbours in time."""
    conn = hv.index.connection()
    rowid = {r[1]: r[0] for r in conn.execute(
        "SELECT c.rowid, d.item_id FROM docs d JOIN chunks c ON c.doc = d.doc AND c.chunk = 0")}
    order = list(reversed(NEWEST_FIRST))
    for item_id in order[1:-1]:
        docs = hv.index.chunk_docs([rowid[item_id]])
        at = order.index(item_id)
        near = search.episode_neighbours(conn, docs, 1e12)  # any gap: the order is what is tested
        assert near[rowid[item_id]] == [rowid[order[at - 1]], rowid[order[at + 1]]], item_id



def test_pages_of_a_listing_lose_no_line_that_shares_its_time(vault, models):
    """A page ends inside a run of lines of one time (an import, a capture's burst): the next page starts after the
    last line shown, by time and then id, not before its time (which skipped the rest of the run)."""
    same = "2026-11-20T10:00:00Z"
    lines = [(f"01JT00000000000000000000S{n}", same, same) for n in range(7)]
    lines += [("01JT0000000000000000000E01", "2026-11-20T09:00:00Z", "2026-11-20T09:00:00Z")]
    write_lines(vault.root, lines)
    vault.reindex()
    seen, before, before_id = [], None, None
    for _page in range(10):
        rows = vault.browse.episodes(before=before, before_id=before_id, limit=3)
        seen += [r.id for r in rows]
        if len(rows) < 3:
            break
        before, before_id = rows[-1].created, rows[-1].id
    assert seen == sorted((i for i, _w, _s in lines[:7]), reverse=True) + ["01JT0000000000000000000E01"]


def page_through(v, limit: int, **filters) -> list[str]:
    """Every id of a listing, page after page as the timeline's "older" link goes."""
    seen, before, before_id = [], None, None
    for _page in range(50):
        rows = v.browse.episodes(before=before, before_id=before_id, limit=limit, **filters)
        seen += [r.id for r in rows]
        if len(rows) < limit:
            return seen
        before, before_id = rows[-1].created, rows[-1].id
    raise AssertionError("pages without end")


def test_times_below_the_millisecond_page_and_neighbour_as_shown(vault, models):
    """A line may carry microseconds or nanoseconds; what a listing shows (and a page's next bound, and the time recall
    looks up the turns around a line by) is to the millisecond. Stored to the microsecond, a bound of
    ...00.123Z sorted below every ...00.123456Z: the next page skipped the rest of the run and every line after it,
    a line was its own next turn, and after=newest gave the newest again (review of this change)."""
    sub = "2026-11-20T10:00:00.123456Z"
    lines = [(f"01JT00000000000000000000S{n}", sub, "2026-11-20T10:00:00.123Z") for n in range(7)]
    lines += [("01JT0000000000000000000E01", "2026-11-20T10:00:00.123400Z", "2026-11-20T10:00:00.123Z"),
              ("01JT0000000000000000000E02", "2026-11-20T09:00:00Z", "2026-11-20T09:00:00Z"),
              ("01JT0000000000000000000E03", "2026-11-20T10:00:05.000999999Z", "2026-11-20T10:00:05Z")]
    write_lines(vault.root, lines)
    vault.reindex()
    everything = [r.id for r in vault.browse.episodes(limit=50)]
    assert sorted(everything) == sorted(i for i, _w, _s in lines)
    assert {r.id: r.created for r in vault.browse.episodes(limit=50)} == {i: shown for i, _w, shown in lines}
    assert page_through(vault, 3) == everything
    newest = vault.browse.episodes(limit=1)[0]
    assert newest.id == "01JT0000000000000000000E03" and vault.browse.episodes(after=newest.created) == []
    conn = vault.index.connection()
    rowid = {r[1]: r[0] for r in conn.execute(
        "SELECT c.rowid, d.item_id FROM docs d JOIN chunks c ON c.doc = d.doc AND c.chunk = 0")}
    for at, item_id in enumerate(everything[1:-1], start=1):
        near = search.episode_neighbours(conn, vault.index.chunk_docs([rowid[item_id]]), 1e12)[rowid[item_id]]
        assert near == [rowid[everything[at + 1]], rowid[everything[at - 1]]], item_id


def test_a_bound_that_is_no_time_is_one_line_naming_it(vault, models):
    from memvault.rules.errors import InvalidValue

    write_lines(vault.root)
    vault.reindex()
    for name in ("before", "after"):
        with pytest.raises(InvalidValue, match=f"^{name}: not an RFC 3339 time"):
            vault.browse.episodes(**{name: "yesterday-ish"})


def test_an_open_window_holds_every_year(vault, models):
    """recall's time window without an end (since ...) holds a line of any year, 9999 too (the open bounds were the
    text "0000" and "9999", below "9999-...")."""
    write_lines(vault.root, [("01JT0000000000000000000Y01", "9999-01-01T00:00:00Z", "9999-01-01T00:00:00Z"),
                             ("01JT0000000000000000000Y02", "0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z")])
    vault.reindex()
    assert [e["id"] for e in vault.index.episodes_between(utc("2026-01-01T00:00:00Z"), None, 10)] == \
        ["01JT0000000000000000000Y01"]
    assert [e["id"] for e in vault.index.episodes_between(None, utc("2026-01-01T00:00:00Z"), 10)] == \
        ["01JT0000000000000000000Y02"]


def test_a_window_edge_inside_a_millisecond_is_decided_the_same_by_recall_and_the_index(vault, models):
    """"The last 2 hours" starts at a time with microseconds; the index keeps a line's time to the millisecond. The
    window is to the millisecond too, so recall's own test of a memory's time (Window.inside) and the index's window
    query agree on a line in the window's first millisecond (they disagreed, each one way at each end)."""
    from memvault.rules import timeq

    write_lines(vault.root, [("01JT000000000000000000000W", "2026-11-20T10:00:00.123900Z", "2026-11-20T10:00:00.123Z")])
    vault.reindex()
    since, until = utc("2026-11-20T10:00:00.123456Z"), utc("2026-11-20T11:00:00.500700Z")
    window = timeq.Window(since, until, "", "")
    assert window.since == utc("2026-11-20T10:00:00.123Z") and window.until == utc("2026-11-20T11:00:00.500Z")
    found = [e["id"] for e in vault.index.episodes_between(window.since, window.until, 10)]
    stored = utc(vault.browse.episodes(limit=1)[0].created)
    assert found == ["01JT000000000000000000000W"] and window.inside(stored)
