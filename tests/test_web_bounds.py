"""Pages stay bounded however much an attacker (an agent proposing in a loop, a teammate's commit) puts in the
vault: the inbox is shown a page at a time — each proposal costs a diff and a duplicate search on the view's one
vault thread, so 3,000 of them held every page of the view for half a minute — and the fact listing names a bounded
number of sources."""
from __future__ import annotations

import re

from conftest import git
from web_fixtures import seeded_copy, seeded_template, web_client  # noqa: F401 - fixtures


def _propose_many(root, n: int) -> None:
    for i in range(n):
        path = root / "inbox" / "spam" / f"p{i:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nsource: agent:spam\ncreated: 2026-01-01T00:00:{i % 60:02d}Z\n"
                        f"updated: 2026-01-01T00:00:{i % 60:02d}Z\n---\nService {i} listens on port {1000 + i}.\n")


def test_the_inbox_is_shown_a_page_at_a_time(seeded_copy, monkeypatch):
    from memvault.interfaces.web import facts

    vault = seeded_copy()
    _propose_many(vault.root, 130)
    planned = []
    plan = vault.facts.store.plan_accept
    monkeypatch.setattr(vault.facts.store, "plan_accept", lambda key: planned.append(key) or plan(key))
    client = web_client(vault)
    first = client.get("/inbox?format=json").json()
    assert first["total"] == 132 and len(first["proposals"]) == facts.INBOX_PAGE == 50
    assert len(planned) == 50  # the work done is the page's, not the inbox's
    keys = [p["key"] for p in first["proposals"]]
    rest = client.get(f"/inbox?format=json&offset={first['next']}").json()
    last = client.get(f"/inbox?format=json&offset={rest['next']}").json()
    assert last["next"] is None and len(last["proposals"]) == 32
    seen = keys + [p["key"] for p in rest["proposals"]] + [p["key"] for p in last["proposals"]]
    assert len(set(seen)) == 132  # every proposal on exactly one page
    page = client.get("/inbox").text
    assert "50 of 132 proposals" in page
    assert re.search(r'href="[^"]*/inbox\?offset=50"', page)


def test_the_fact_listing_names_a_bounded_number_of_sources(seeded_copy):
    from memvault.interfaces.web import facts

    vault = seeded_copy()
    for i in range(facts.SOURCES_SHOWN + 30):
        path = vault.root / "facts" / "bulk" / f"f{i:03d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nsource: agent:src{i:03d}\n---\nBulk fact number {i}.\n")
    git(vault.root, "add", "-A")
    git(vault.root, "commit", "-qm", "bulk")
    vault.index.sync()
    client = web_client(vault)
    listing = client.get("/facts?format=json").json()
    assert len(listing["sources"]) == facts.SOURCES_SHOWN and listing["sources_more"] == 31  # + user:admin...
    assert listing["sources"][0]["source"] == "user:admin"  # the most facts first
    assert "31 more" in client.get("/facts").text


def _hand_commit(root, message: str, author: str = "mallory") -> None:
    git(root, "add", "-A")
    git(root, "-c", f"user.name={author}", "commit", "-qm", message)


def test_a_facts_history_shows_its_newest_commits_only(seeded_copy):
    from memvault.interfaces.web import facts

    vault = seeded_copy()
    path = vault.root / "facts" / "db" / "replica.md"
    original = path.read_text()
    for i in range(facts.HISTORY_SHOWN + 10):  # an agent rewriting one fact all day
        path.write_text(original.replace("5432", str(6000 + i)))
        _hand_commit(vault.root, f"port now {6000 + i}")
    vault.index.sync()
    client = web_client(vault)
    shown = client.get("/fact/db/replica?format=json").json()
    assert len(shown["history"]) == facts.HISTORY_SHOWN and shown["history_more"]
    assert shown["history"][0]["subject"] == f"port now {6000 + facts.HISTORY_SHOWN + 9}"  # the newest first
    assert "git log" in client.get("/fact/db/replica").text  # where the older ones are
    small = client.get("/fact/db/primary?format=json").json()
    assert len(small["history"]) == 1 and not small["history_more"]


def test_a_commit_message_with_the_separators_git_log_is_read_with_does_not_break_the_page(seeded_copy):
    vault = seeded_copy()
    path = vault.root / "facts" / "db" / "replica.md"
    path.write_text(path.read_text().replace("5432", "5433"))
    _hand_commit(vault.root, "moved\x1e\x1fport\x1fto 5433", author="eve\x1f")
    vault.index.sync()
    client = web_client(vault)
    r = client.get("/fact/db/replica?format=json")
    assert r.status_code == 200, r.text
    newest = r.json()["history"][0]
    assert newest["subject"].startswith("moved") and "+The replica database listens on 10.8.0.5 port 5433." in \
        newest["diff"]
    assert len(r.json()["history"]) == 2
