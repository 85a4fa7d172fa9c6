"""Issue 27: a runbook is found by any one of its steps. Each runbook is embedded as its windows and, besides, step
by step (documents.step_spans); the steps are vectors only, and a runbook's semantic score is its best chunk's."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memvault import Vault
from memvault.index import db
from memvault.index.documents import CHUNKING, STEPS_MAX, Doc, chunk_rows, step_spans
from conftest import git

DATA = json.loads((Path(__file__).parent / "data" / "runbook_steps.json").read_text("utf-8"))

TLDR = """# aconnect

> Manage ALSA sequencer connections.
> More information: <https://manned.org/aconnect>.

- List all ports:

`aconnect {{[-a|--all]}}`

- List readable input ports:

`aconnect {{[-i|--input]}}`

- Display help:

`aconnect`
"""


def texts(body: str) -> list[str]:
    return [body[s:e] for s, e in step_spans(body)]


# ------------------------------------------------------------------------------------------------ cutting
def test_a_step_is_a_block_and_a_line_ending_in_a_colon_takes_the_command_after_it():
    assert texts(TLDR) == [
        "# aconnect\n\n> Manage ALSA sequencer connections.\n> More information: <https://manned.org/aconnect>.",
        "- List all ports:\n\n`aconnect {{[-a|--all]}}`",
        "- List readable input ports:\n\n`aconnect {{[-i|--input]}}`",
        "- Display help:\n\n`aconnect`",
    ]


def test_front_matter_is_no_step_and_a_heading_joins_its_section():
    body = ("---\ntitle: Disk full\ntags: [disk, storage]\n---\n\n# Disk full\n\n## Meaning\n\nThe root volume "
            "is over 90 percent.\n\n## Mitigation\n\nDelete old journal files with journalctl --vacuum-size.\n")
    assert texts(body) == ["# Disk full\n\n## Meaning\n\nThe root volume is over 90 percent.",
                           "## Mitigation\n\nDelete old journal files with journalctl --vacuum-size."]


def test_a_script_is_cut_at_its_blank_lines_and_tiny_blocks_are_no_steps():
    script = ("#!/bin/sh\n# description: rotate the logs\nset -eu\n\n# compress yesterday's logs\ngzip /var/log/app/"
              "*.1\n\nfi\n\n# drop the ones older than a month\nfind /var/log/app -name '*.gz' -mtime +30 -delete\n")
    assert texts(script) == ["#!/bin/sh\n# description: rotate the logs\nset -eu",
                             "# compress yesterday's logs\ngzip /var/log/app/*.1",
                             "# drop the ones older than a month\nfind /var/log/app -name '*.gz' -mtime +30 -delete"]


def test_a_runbook_of_one_block_has_no_steps_and_a_long_one_at_most_the_limit():
    assert step_spans("Restart the service and check its status page afterwards.") == []
    assert step_spans("one two three\n\nfour") == []  # the second block is too short to be a step
    many = "\n\n".join(f"step number {i} of many" for i in range(STEPS_MAX + 10))
    spans = step_spans(many)
    assert len(spans) == STEPS_MAX
    assert many[spans[-1][0]:spans[-1][1]] == f"step number {STEPS_MAX - 1} of many"


def test_steps_are_numbered_below_zero_after_the_windows_and_only_for_runbooks():
    doc = Doc("procedure", "x", "procedures/x.md", "x", TLDR, 0.5, 1.0, None, None, None)
    rows = chunk_rows(doc, [(0, len(TLDR))])
    assert rows[0] == (0, 0, len(TLDR))
    assert [r[0] for r in rows[1:]] == [-1, -2, -3, -4]
    assert all(TLDR[s:s + n] for _, s, n in rows)
    fact = Doc("fact", "x", "facts/x.md", "x", TLDR, 0.5, 1.0, None, None, None)
    assert chunk_rows(fact, [(0, len(TLDR))]) == [(0, 0, len(TLDR))]


# ------------------------------------------------------------------------------------------------ the index
def put(v: Vault, name: str, text: str) -> None:
    path = v.root / "procedures" / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def fts_ok(conn: sqlite3.Connection) -> None:
    """FTS5's own check that every keyword row is exactly what its external content gives."""
    conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


def chunks(conn: sqlite3.Connection, name: str) -> list[tuple[int, int, int | None]]:
    return conn.execute("SELECT c.chunk, c.rowid, c.model FROM chunks c JOIN docs d ON d.doc = c.doc "
                        "WHERE d.kind = 'procedure' AND d.item_id = ? ORDER BY c.chunk", (name,)).fetchall()


def test_steps_are_vectors_without_keyword_rows_and_follow_every_edit(vault, models):
    put(vault, "audio/aconnect", TLDR)
    vault.facts.set("audio/card", "The sound card is a Focusrite on the second USB port.")
    vault.reindex()
    conn = vault.index.connection()
    rows = chunks(conn, "audio/aconnect")
    windows = [r for c, r, _ in rows if c >= 0]
    assert [c for c, _, _ in rows if c < 0] == [-4, -3, -2, -1]
    assert all(model is not None for _, _, model in rows)
    vec = {r for (r,) in conn.execute("SELECT rowid FROM chunks_vec")}
    assert {r for _, r, _ in rows} <= vec
    # keywords: one row per window (and the fact's), none for a step: a word of a step finds only windows
    assert conn.execute("SELECT COUNT(*) FROM chunks_fts").fetchone()[0] == len(windows) + 1
    found = [r for r, _ in vault.index.search_keywords("readable input ports", ["procedure"], 10)]
    assert found and set(found) <= set(windows)
    fts_ok(conn)
    # an edit replaces the steps, a removal takes every chunk and vector with it
    put(vault, "audio/aconnect", TLDR.replace("- Display help:\n\n`aconnect`\n", "- Disconnect everything:\n\n"
                                                                               "`aconnect {{[-x|--removeall]}}`\n"))
    vault.reindex()
    texts_now = [t for (t,) in conn.execute("SELECT text FROM chunk_texts WHERE id = 'audio/aconnect' AND chunk < 0")]
    assert any("Disconnect everything" in t for t in texts_now)
    assert not any("Display help" in t for t in texts_now)
    fts_ok(conn)
    (vault.root / "procedures" / "audio" / "aconnect.md").unlink()
    vault.reindex()
    assert chunks(conn, "audio/aconnect") == []
    assert conn.execute("SELECT COUNT(*) FROM chunks_vec").fetchone()[0] == \
        conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 1
    fts_ok(conn)


def test_an_index_from_before_steps_embeds_the_steps_and_keeps_the_windows_vectors(vault, models):
    """What a user's index does at the upgrade: the migration keeps every keyword row, and the next sync embeds
    each runbook's steps and nothing it had already."""
    put(vault, "audio/aconnect", TLDR)
    vault.facts.set("audio/card", "The sound card is a Focusrite on the second USB port.")
    vault.reindex()
    conn = vault.index.connection()
    windows = [(c, r) for c, r, _ in chunks(conn, "audio/aconnect") if c >= 0]
    fact_rows = conn.execute("SELECT rowid FROM chunks c JOIN docs d ON d.doc = c.doc WHERE d.kind = 'fact'").fetchall()
    # the index as the release before left it: no steps, the old way of cutting recorded
    steps = [r for c, r, _ in chunks(conn, "audio/aconnect") if c < 0]
    conn.execute(f"DELETE FROM chunks_vec WHERE rowid IN ({db.marks(steps)})", steps)
    conn.execute(f"DELETE FROM chunks WHERE rowid IN ({db.marks(steps)})", steps)
    conn.execute("UPDATE meta SET value = 'v1:model-window/32' WHERE key = 'chunking'")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        report = Vault.open(vault.root, embedder_factory=models).reindex()
    finally:
        conn.set_trace_callback(None)
    assert report.chunks_embedded == len(steps) == 4  # the steps only: the windows and the fact kept their vectors
    conn = vault.index.connection()
    assert conn.execute("SELECT value FROM meta WHERE key = 'chunking'").fetchone()[0] == CHUNKING
    assert [(c, r) for c, r, _ in chunks(conn, "audio/aconnect") if c >= 0] == windows
    assert conn.execute("SELECT rowid FROM chunks c JOIN docs d ON d.doc = c.doc WHERE d.kind = 'fact'").fetchall() \
        == fact_rows
    assert len([c for c, _, _ in chunks(conn, "audio/aconnect") if c < 0]) == 4
    fts_ok(conn)


def test_dropping_some_chunks_of_a_doc_reads_them_by_index(vault, models):
    from memvault.index.update import _drop_chunks

    put(vault, "audio/aconnect", TLDR)
    vault.reindex()
    conn = vault.index.connection()
    doc = conn.execute("SELECT doc FROM docs WHERE item_id = 'audio/aconnect'").fetchone()[0]
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        with db.transaction(conn):
            _drop_chunks(conn, [doc], True, [-1, -2])
    finally:
        conn.set_trace_callback(None)
    deletes = {s for s in statements if s.lstrip().startswith("DELETE")}
    assert len(deletes) == 2
    for sql in deletes:
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
        assert not [line for line in plan if line.startswith("SCAN") and "VIRTUAL TABLE" not in line], plan
    assert [c for c, _, _ in chunks(conn, "audio/aconnect") if c < 0] == [-4, -3]
    fts_ok(conn)


def test_the_migration_leaves_the_keyword_rows_as_they_were(tmp_path):
    conn = db.connect(tmp_path / "index.db")
    before = [m for m in db.MIGRATIONS if m[0] != "0007_runbook_steps"]
    db.migrate(conn, before)
    conn.execute("INSERT INTO docs(kind, item_id, path, header, body, hash, cut, importance, confidence) "
                 "VALUES ('procedure', 'p', 'procedures/p.md', 'p', 'restart the queue worker', x'00', 'model', .5, 1)")
    conn.execute("INSERT INTO chunks(doc, chunk, start, len) VALUES (1, 0, 0, 24)")
    db.migrate(conn, db.MIGRATIONS)
    assert conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'worker'").fetchall() == [(1,)]
    conn.execute("INSERT INTO chunks(doc, chunk, start, len) VALUES (1, -1, 0, 15)")
    assert conn.execute("SELECT COUNT(*) FROM chunks_fts").fetchone()[0] == 1
    conn.execute("DELETE FROM docs WHERE doc = 1")
    assert conn.execute("SELECT COUNT(*) FROM chunks_fts").fetchone()[0] == 0
    fts_ok(conn)


# ------------------------------------------------------------------------------------------------ recall
@pytest.fixture(scope="module")
def runbooks(tmp_path_factory):
    root = tmp_path_factory.mktemp("runbooks") / "vault"
    Vault.init(root, daemon=False)
    toml = root / "memvault.toml"
    toml.write_text(toml.read_text().replace('model = "BAAI/bge-small-en-v1.5"', 'model = "all-MiniLM-L6-v2"'))
    git(root, "commit", "-qm", "model", "--", "memvault.toml")
    v = Vault.open(root, daemon=False)
    for name, text in DATA["runbooks"].items():
        put(v, name, text)
    v.reindex()
    return v


@pytest.mark.model
def test_a_question_about_one_step_is_nearer_that_step_than_the_whole_page(runbooks):
    index = runbooks.index
    vector = runbooks.engine.get().embed_query("how do I give a new colleague access to the vpn")
    found = dict(index.search_vectors(vector, ["procedure"], 100))
    docs = index.chunk_docs(list(found))
    vpn = {r: found[r] for r, d in docs.items() if d["id"] == "net/vpn"}
    step = max(c for r, c in vpn.items() if docs[r]["chunk"] < 0)
    window = max(c for r, c in vpn.items() if docs[r]["chunk"] >= 0)
    assert step > window + 0.05


@pytest.mark.model
def test_the_meaning_search_finds_a_runbook_by_one_of_its_steps(runbooks):
    """Without steps, the firewall runbook (about the VPN's subnet as a whole) is nearer this question than the VPN
    runbook, whose one step answers it."""
    hits = runbooks.recall("how do I give a new colleague access to the vpn", k=3, kinds=["procedure"],
                           mode="vector", record_access=False)
    assert hits[0].id == "net/vpn"


@pytest.mark.model
@pytest.mark.parametrize("question", sorted(DATA["questions"]))
def test_each_step_question_ranks_its_runbook_first(runbooks, question):
    hits = runbooks.recall(question, k=3, kinds=["procedure"], record_access=False)
    assert hits[0].id == DATA["questions"][question]


def test_a_runbook_found_by_its_words_is_as_close_as_its_closest_step(vault, models):
    """Whichever chunk made a runbook a candidate (here its words: the vector search gives one row), recall reads the
    cosine of each of its steps, and the runbook's is the best of them."""
    from memvault.core.candidates import gather

    put(vault, "audio/aconnect", TLDR)
    for i in range(5):
        vault.facts.set(f"audio/note-{i}", f"List readable input ports of sound card {i}.")
    toml = vault.root / "memvault.toml"
    assert "vector_candidates = 50" in toml.read_text()
    toml.write_text(toml.read_text().replace("vector_candidates = 50", "vector_candidates = 1"))
    git(vault.root, "commit", "-qm", "one vector candidate", "--", "memvault.toml")
    v = Vault.open(vault.root, embedder_factory=models)
    v.reindex()
    query = "input ports card"  # nearest: a fact; the runbook comes by its words, its closest chunk a step
    vector = v.engine.get().embed_query(query)
    found = gather(v._parts(), query, 1, ["fact", "episode", "procedure"], "hybrid", vector)  # k 1: one vector row
    runbook = found[("procedure", "audio/aconnect")]
    index = v.index
    rows = [r for c, r, _ in chunks(index.connection(), "audio/aconnect")]
    cosines = index.similarities(vector, rows)
    steps = [cosines[r] for c, r, _ in chunks(index.connection(), "audio/aconnect") if c < 0]
    assert runbook.cosine == pytest.approx(max(cosines.values())) == pytest.approx(max(steps))
    assert max(steps) > max(cosines[r] for c, r, _ in chunks(index.connection(), "audio/aconnect") if c >= 0)
    best_vector = index.search_vectors(vector, ["fact", "episode", "procedure"], 1)[0][0]
    assert best_vector not in rows  # the one vector candidate is a fact: the runbook came by its words
    step_rows = {r for c, r, _ in chunks(index.connection(), "audio/aconnect") if c < 0}
    window = min(r for c, r, _ in chunks(index.connection(), "audio/aconnect") if c == 0)
    assert index.runbook_steps(index.chunk_docs([window, best_vector])) == {
        r: ("procedure", "audio/aconnect") for r in step_rows}  # the runbook's steps, keyed; the fact has none
