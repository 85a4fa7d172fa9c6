"""memvault.rules.freshness: when a fact is stale and why — on a fact and on an index row, the same rule."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone

import pytest

from memvault.rules.freshness import stale_doc_reason, stale_reason, text_hash

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
DAY = 86400.0


@dataclass
class F:
    valid_until: date | None = None
    updated: datetime | None = None
    review_after: float | None = None


CASES = [
    # valid_until, updated, the fact's own review_after, the vault's, expected reason (None: fresh)
    (None, "2026-11-30", None, 180 * DAY, None),
    (None, "2026-05-01", None, 180 * DAY, "not updated since 2026-05-01 (review after 180d)"),
    (None, "2026-11-01", 30 * DAY, 180 * DAY, "not updated since 2026-11-01 (review after 30d)"),
    (None, "2026-06-10", 365 * DAY, 180 * DAY, None),  # the fact's own period wins
    ("2026-12-02", "2026-12-01", None, 180 * DAY, "valid_until 2026-12-02 has passed"),
    ("2026-12-03", "2026-12-01", None, 180 * DAY, None),  # valid through its last day
    ("2026-01-01", "2025-01-01", None, 180 * DAY, "valid_until 2026-01-01 has passed"),  # expiry said first
    (None, None, None, 180 * DAY, None),  # no time known: never stale
]


@pytest.mark.parametrize("valid_until, updated, own, review, reason", CASES)
def test_a_fact_and_its_index_row_are_stale_for_the_same_reason(valid_until, updated, own, review, reason):
    fact = F(date.fromisoformat(valid_until) if valid_until else None,
             datetime.fromisoformat(updated).replace(tzinfo=timezone.utc) if updated else None, own)
    assert stale_reason(fact, review, NOW) == reason
    row_updated = f"{updated}T00:00:00Z" if updated else None
    assert stale_doc_reason(valid_until, own, row_updated, review, NOW) == reason


def test_an_unreadable_date_on_an_index_row_is_not_stale():
    assert stale_doc_reason("someday", None, "2026-11-30T00:00:00Z", 180 * DAY, NOW) is None
    assert stale_doc_reason(None, None, "not a time", 180 * DAY, NOW) is None


def test_the_recalled_text_hash_ignores_how_the_text_is_wrapped():
    assert text_hash("The primary listens\non  5432.") == text_hash("The primary listens on 5432.")
    assert text_hash("listens on 5432") != text_hash("listens on 5433")
