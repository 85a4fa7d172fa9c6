"""Rows forged in the team's shared index, second review (2026-12-06, night): what the first review left to the
database — the listings' filters by source and trust, a time window, sessions' sources, the relevance scale's rows
a purge never reached, a row of 10 MB — and what a forged row does through each. Each test is the attack as it was
made before the fix, and the answer it gets now."""
from __future__ import annotations

import json

import psycopg
import pytest

from conftest import git
from pgserver import pg_server  # noqa: F401
from test_team import facts_of_a, make_team, push, team, url  # noqa: F401 - fixtures
from test_team_review import FORGED, _forge, _published_fact_and_episode, _scoped_b


@pytest.fixture
def tracked(tmp_path, url):  # noqa: F811
    """Two hosts of one team whose episodes are committed to git (so the shared index holds them too)."""
    remote, a, clone = make_team(tmp_path, track_episodes=True)
    yield remote, a, clone
    a.vault.index.close()


def _rows(address: str, statement: str, args: tuple = ()) -> list[tuple]:
    from test_team_review import _vault_id

    with psycopg.connect(address, autocommit=True) as conn:
        return conn.execute(statement.replace("{v}", str(_vault_id(address))), args).fetchall()


# ------------------------------------------------------------------------------------ filters the database applied
def test_a_listing_filtered_by_trust_or_source_never_shows_a_row_its_file_does_not_match(tracked, url):
    """The web view's "trusted" filter (and a filter by source) was the database's: a row whose source was
    rewritten to user:admin passed it, and was then shown read from its file, as agent:helper, untrusted, in the
    list of trusted memories. The file's memory must match the filter too."""
    b = _published_fact_and_episode(tracked, fact_source="agent:helper")
    browse = b.vault.browse
    assert browse.facts(trust="trusted")[0] == [] and browse.episodes(trust="trusted") == []
    _forge(url, "UPDATE memvault.v{v}_docs SET source = 'user:admin'")
    b.reopen()
    browse = b.vault.browse
    assert [(f.key, f.source) for f in browse.facts(trust="trusted")[0]] == []
    assert [(f.key, f.source) for f in browse.facts(source="user:admin")[0]] == []
    assert [(e.source, e.trusted) for e in browse.episodes(trust="trusted")] == []
    assert [(e.source, e.trusted) for e in browse.episodes(source="user:admin")] == []
    # what the database's filter leaves out is not looked for in the files (docs/team.md), but the unfiltered
    # listings show each row as its file says
    assert [e.source for e in browse.episodes(source="agent:helper")] == []
    assert [(f.key, f.source) for f in browse.facts()[0]] == [("web/cdn", "agent:helper")]
    assert [e.source for e in browse.episodes()] == ["agent:helper"]


def test_an_episode_a_forged_time_puts_in_a_window_is_not_what_happened_then(tracked, url):
    """A time window ("what happened today", --since) was the database's: an episode of 2019 whose row was dated
    today came back as today's (shown with its file's date, 2019, in the answer about today)."""
    _remote, a, clone = tracked
    a.vault.episodes.append("the helper agent rotated the nginx logs on web1", source="agent:helper",
                            at="2019-03-01T10:00:00Z")
    git(a.root, "add", "episodes")
    git(a.root, "commit", "-qm", "episodes")
    push(a)
    a.vault.reindex()
    b = clone()
    assert b.vault.recall("what happened today", k=5, kinds=["episode"], log=False) == []
    _forge(url, "UPDATE memvault.v{v}_docs SET created = now(), updated = now() WHERE kind = 'episode'")
    found = b.vault.recall("what happened today", k=5, kinds=["episode"], log=False)
    assert [(h.created, h.text) for h in found] == []
    for mode in ("keyword", "hybrid"):
        found = b.vault.recall("rotated nginx logs", k=5, kinds=["episode"], since="2d", mode=mode, log=False)
        assert [(h.created, h.text) for h in found] == []
    assert [e.created for e in b.vault.browse.episodes(after="2026-01-01T00:00:00Z")] == []


# ------------------------------------------------------------------------------------------ the relevance scale
def _fragments(address: str) -> str:
    rows = _rows(address, "SELECT value FROM memvault.vault_meta WHERE vault_id = {v} "
                          "AND key = 'calibration:fragments'")
    return rows[0][0] if rows else ""


def test_a_purge_published_takes_the_purged_memories_out_of_the_teams_relevance_scale(tracked, url):
    """The team's relevance scale is kept in the shared index (vault_meta): the ids of the memories it was measured
    on, the vectors of 6-word pieces of their text, their nearest neighbours. A purge took the source's rows out of
    the shared index when it was published, and left all of that in vault_meta on every host's database for ever
    (measured again only when the vault grows by a quarter or the model changes)."""
    _remote, a, clone = tracked
    for n in range(12):
        a.vault.facts.set(f"ops/note{n}", f"Operations note {n}: host web{n} serves the shop on port {8000 + n}.",
                          source="user:ann")
        a.vault.episodes.append(f"the scraper agent read the page of vendor {n} and kept its prices",
                                source="agent:scraper")
    git(a.root, "add", "episodes")
    git(a.root, "commit", "-qm", "episodes")
    push(a)
    a.vault.reindex()
    a.recall("which port does the shop use")  # measures the scale, kept in the shared index
    kept = json.loads(_fragments(url))
    scraped = {s for s in kept["sources"] if s.startswith("episode:")}
    assert scraped, kept["sources"]
    report = a.vault.purge("agent:scraper", source="user:ann")
    assert report.commit
    push(a)
    a.vault.reindex()  # published: the rows are gone from the shared index
    assert not _rows(url, "SELECT 1 FROM memvault.v{v}_docs WHERE source = 'agent:scraper'")
    left = _fragments(url)
    assert not any(s.split(":", 1)[1] in left for s in scraped), "purged ids left in the team's relevance scale"
    b = clone()
    assert b.recall("which port does the shop use")[0].id.startswith("ops/")  # measured again, from what is left
    assert not any(s.split(":", 1)[1] in _fragments(url) for s in scraped)


# ------------------------------------------------------------------------------------------------- sessions
def test_a_session_a_forged_source_marks_trusted_is_listed_as_its_files_say(tracked, url, tmp_path):
    """The web view's sessions took each session's sources from the database: rows saying user:admin listed an
    agent's captured session as trusted, by user:admin, on every other host."""
    from test_index_seam_team import seed_listings

    _remote, a, clone = tracked
    seed_listings(a, tmp_path)
    push(a)
    a.vault.reindex()
    b = _scoped_b(clone)
    honest = b.vault.browse.sessions()
    assert [(s["session"], s["source"], s["trusted"]) for s in honest] == [("sess-42", "agent:claude-code", False)]
    _forge(url, "UPDATE memvault.v{v}_docs SET source = 'user:admin' WHERE strpos(meta, 'sess-42') > 0")
    b.reopen()
    assert b.vault.browse.sessions() == honest


# --------------------------------------------------------------------------------------------------- big rows
def test_forged_rows_of_10_mb_never_reach_a_hosts_memory_whole(tracked, url):
    """A row's text is read from this host's file, but the listings and recall fetched the database's whole body
    first: 20 episodes' rows of 10 MB each made one page of the web view's timeline fetch 200 MB."""
    import tracemalloc

    _remote, a, clone = tracked
    for n in range(20):
        a.vault.episodes.append(f"the helper agent rotated the nginx logs on web{n}", source="agent:helper")
    git(a.root, "add", "episodes")
    git(a.root, "commit", "-qm", "episodes")
    push(a)
    a.vault.reindex()
    b = clone()
    assert len(b.vault.browse.episodes()) == 20
    _forge(url, "UPDATE memvault.v{v}_docs SET body = %s WHERE kind = 'episode'", (FORGED + " pad" * 2_500_000,))
    b.reopen()
    tracemalloc.start()
    try:
        shown = b.vault.browse.episodes()
        hits = b.vault.recall("rotated nginx logs", k=5, kinds=["episode"], log=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(shown) == 20 and all(e.text.startswith("the helper agent") for e in shown)
    assert hits and all(h.text.startswith("the helper agent") for h in hits)
    assert peak < 50_000_000, f"{peak / 1e6:.0f} MB at peak"


# ------------------------------------------------------------------------------------------------- runbook runs
def test_a_runbook_run_a_forged_row_rewrote_is_shown_as_its_episode_file_says(tracked, url, tmp_path):
    """A runbook's last runs (in a recall's hit, which an agent reads before running it, and on the web view's
    runbook page) came from the shared rows as they were: a row could say a failed run exited 0, at another commit,
    run by user:admin, or make another episode a run of this runbook."""
    from test_index_seam_team import seed_listings

    _remote, a, clone = tracked
    seed_listings(a, tmp_path)
    push(a)
    a.vault.reindex()
    b = clone()

    def shown():
        hit = next(h for h in b.recall("rotate postgres logs runbook") if h.id == "db/rotate-logs")
        return hit.extra.get("runs"), b.vault.browse.runs("db/rotate-logs")

    honest = shown()
    assert honest[0] and honest[1] and honest[1][0]["exit_code"] == 0
    _forge(url, "UPDATE memvault.v{v}_docs SET source = 'agent:x', body = %s, meta = %s, created = %s "
                "WHERE ekind = 'procedure_run'",
           (FORGED, json.dumps({"exit_code": 3, "commit": "0" * 40, "dirty": True}), "2019-01-01T00:00:00Z"))
    b.reopen()
    assert shown() == honest
    # another episode made a run of this runbook is none (rows the database gives in place of the real runs hide
    # them: what the database leaves out is not looked for in the files)
    _forge(url, "UPDATE memvault.v{v}_docs SET ref = 'db/rotate-logs' WHERE ekind = 'raw'")
    b.reopen()
    runs, page = shown()
    assert all(r in honest[0] for r in runs or []) and all(r in honest[1] for r in page)


# ----------------------------------------------------------------------------------------- the embedding cache
@pytest.mark.parametrize("forged", ["[" + ",".join(["0.25"] * 16) + "]", "[" + ",".join(["0"] * 32) + "]"],
                         ids=["16-dims", "zeros"])
def test_a_cache_row_of_another_width_or_without_a_cosine_never_stops_the_teams_vectors(team, url, forged):
    """The team's embedding cache (model, sha256 of a text) -> vector is written by every host: a row of 16
    dimensions for a 32-dimension model (the column takes any width) made every host's embed of a batch holding that
    text fail ("expected 32 dimensions, not 16": no vector computed for any chunk of the batch, at every reindex,
    for ever); a row of zeros was stored as the chunk's vector, which has no cosine. Such a row is embedded again
    (and replaced in the cache)."""
    _remote, a, clone = team
    facts_of_a(a)
    push(a)
    a.vault.reindex()
    b = clone()
    _forge(url, "UPDATE memvault.embedding_cache SET embedding = %s::vector", (forged,))
    report = b.vault.reindex(full=True)
    assert not report.warnings, report.warnings
    assert b.vault.index.shared.pending() == 0
    assert not _rows(url, "SELECT 1 FROM memvault.embedding_cache WHERE vector_dims(embedding) <> 32 "
                          "OR vector_norm(embedding) = 0")
    hits = b.recall("which port does the primary database use")
    assert hits.mode == "hybrid" and hits[0].id == "db/primary", (hits.mode, hits.warnings)


# ------------------------------------------------------------------------------------- what a write is told
def test_what_a_write_is_told_it_contradicts_is_the_stored_facts_file_not_a_forged_row(team, url):
    """A write is told which stored facts it contradicts or repeats, with their values ("port 5433 where it says
    5432"): the stored side was the shared row's text. A row rewritten in the database put its words into what an
    agent writing a fact over MCP was told, and hid the real conflict."""
    _remote, a, clone = team
    a.vault.facts.set("db/main", "The primary PostgreSQL listens on port 5432 on db01.", source="user:ops")
    push(a)
    a.vault.reindex()
    b = clone()

    def told(key: str) -> list:
        fact = b.vault.facts.set(key, "our postgres primary runs on port 5433", source="user:ops")
        return [(m["key"], m.get("values")) for m in fact.similar if m["kind"] == "conflict"]

    assert told("infra/pg-port") == [("db/main", {"port": {"new": ["5433"], "stored": ["5432"]}})]
    _forge(url, "UPDATE memvault.v{v}_docs SET body = %s WHERE item_id = 'db/main'",
           ("The primary PostgreSQL listens on port 6666 on db01. " + FORGED,))
    b.reopen()
    assert told("infra/pg-port2") == [("db/main", {"port": {"new": ["5433"], "stored": ["5432"]}})]
