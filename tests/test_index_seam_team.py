"""What a team host gets through the one index seam that it did not before: pseudo-relevance feedback from the
shared index (PostgreSQL), and the web view's listings read from the team's shared index (with this host's own
unpushed memories, and without the shared rows they shadow), not from a SQLite fallback of this host's files.

A real PostgreSQL + pgvector (tests/pgserver.py), two clones of one vault as two hosts (tests/test_team.py)."""
from __future__ import annotations

import pytest

from conftest import git
from memvault import Vault
from memvault.index import KINDS
from pgserver import pg_server  # noqa: F401
from test_team import Host, push, team, url  # noqa: F401

psycopg = pytest.importorskip("psycopg")

PG_FACTS = {"pg/primary": "The postgres primary db01 takes writes on port 5432.",
            "pg/replica": "The postgres replica db02 streams from db01.",
            "pg/backup": "Postgres backups of db01 run nightly.",
            "disk/layout": "Disk layout of db01: the data lives on the nvme volume."}


def with_prf(host: Host, weight: float) -> None:
    """This host's memvault.toml with ``[recall] prf_weight`` (left uncommitted: a setting, not a memory)."""
    toml = host.root / "memvault.toml"
    text = toml.read_text()
    start = text.index("prf_weight = ")
    toml.write_text(text[:start] + f"prf_weight = {weight}" + text[text.index("\n", start):])
    host.reopen()


def test_pseudo_relevance_feedback_works_on_a_team_host_from_the_shared_index(team):
    """The words the best memories share (and the question lacks) are searched again: on a team host it was
    skipped (the team index offered no feedback). Here host B holds nothing of its own: every word comes from the
    shared index's lexemes."""
    _remote, a, clone = team
    for key, text in PG_FACTS.items():
        a.vault.facts.set(key, text, source="user:ann")
    push(a)
    a.vault.reindex()
    b = clone()
    index = b.vault.index
    assert index.shared_in_use and sum(index.overlay.stats().get("items", {}).values()) == 0
    question = "where does the postgres primary take writes"
    bodies = [PG_FACTS["pg/replica"], PG_FACTS["pg/backup"]]
    # the shared part picks db01 (in both bodies, rare enough, not asked), as the SQLite index does
    found = index.search_feedback(bodies, question, KINDS, 5, 10)
    docs = index.chunk_docs([r for r, _ in found])
    assert {docs[r]["id"] for r, _ in found} == set(PG_FACTS)  # every memory holding db01
    assert all(s > 0 for _, s in found)

    with_prf(b, 0.0)
    before = {h.id: h.factors["relevance"] for h in b.vault.recall(question, k=4, min_relevance=0)}
    with_prf(b, 0.3)
    after = {h.id: h.factors["relevance"] for h in b.vault.recall(question, k=4, min_relevance=0)}
    assert after["disk/layout"] > before["disk/layout"]  # it shares db01 with the best memories, not the query
    assert b.vault.index.shared_in_use


def test_feedback_on_a_team_host_reads_this_hosts_unpushed_memories_too(team):
    _remote, a, clone = team
    for key, text in PG_FACTS.items():
        a.vault.facts.set(key, text, source="user:ann")
    push(a)
    a.vault.reindex()
    b = clone()
    b.vault.facts.set("db01/kernel", "db01 runs kernel 6.8 since the upgrade.", source="user:bob")
    index = b.vault.index
    found = index.search_feedback([PG_FACTS["pg/replica"], PG_FACTS["pg/backup"]],
                                  "where does the postgres primary take writes", KINDS, 5, 10)
    ids = {d["id"] for d in index.chunk_docs([r for r, _ in found]).values()}
    assert "db01/kernel" in ids and "disk/layout" in ids
