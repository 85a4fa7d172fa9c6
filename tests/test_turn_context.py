"""A conversation turn is embedded with its context: the day it was said and the two turns before it in the same
conversation (issue 27, "episodes with their context"). Logic tests with the deterministic fake embedder."""
from __future__ import annotations

import json

import pytest

from memvault import Vault
from memvault.index import update
from memvault.index.documents import FIELDS, day_of, resolve_context, turn_context
from fake_embedder import set_model

#: (source, time, text): one conversation (one source: a chat captured line by line) of four turns a minute apart,
#: a line from another source in the middle of it, then the same chat two hours later (a new conversation).
TURNS = [
    ("user:chat", "2026-11-20T10:00:00Z", "Did the migration of the billing database finish?"),
    ("user:chat", "2026-11-20T10:01:00Z", "Not yet, the replica is still catching up."),
    ("agent:monitor", "2026-11-20T10:01:30Z", "Replica lag 40 seconds on db2."),
    ("user:chat", "2026-11-20T10:02:00Z", "Then we postpone the switch to Thursday."),
    ("user:chat", "2026-11-20T10:03:00Z", "Agreed, I will tell the support team."),
    ("user:chat", "2026-11-20T12:30:00Z", "Support knows about Thursday now."),
    ("user:chat", "2026-11-20T12:31:00Z", "And the invoices run is moved to Friday."),
]


@pytest.fixture
def fv(vault, models):
    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/billing", "The billing database runs on db1 with a replica on db2.", category="database")
    return v


def vectors(v: Vault) -> dict[str, bytes]:
    """item id -> stored vector of every episode chunk."""
    rows = v.index.connection().execute(
        "SELECT d.item_id, e.embedding FROM docs d JOIN chunks c ON c.doc = d.doc JOIN chunks_vec e "
        "ON e.rowid = c.rowid WHERE d.kind = 'episode' ORDER BY d.item_id, c.chunk").fetchall()
    return {r[0]: bytes(r[1]) for r in rows}


def ids_by_text(v: Vault) -> dict[str, str]:
    return {r[1]: r[0] for r in v.index.connection().execute("SELECT item_id, body FROM docs WHERE kind = 'episode'")}


def test_the_context_is_the_day_and_the_two_turns_before_in_the_conversation(fv, models):
    fake = models.instances.get("fake-hash") or models(type("C", (), {"model": "fake-hash"})())
    fv.reindex()
    fake.reset_counts()
    for source, at, text in TURNS:
        fv.episodes.append(text, source=source, at=at)
    fv.reindex()
    day = "20 November 2026"
    t = [text for _s, _a, text in TURNS]
    # each turn alone, and after its context; the monitor's line is another source: a conversation of its own
    expected = {
        t[0]: f"{day}\n{t[0]}",
        t[1]: f"{day}\n{t[0]}\n{t[1]}",
        t[2]: f"{day}\n{t[2]}",
        t[3]: f"{day}\n{t[0]}\n{t[1]}\n{t[3]}",  # two before, not three, and not the other source's line
        t[4]: f"{day}\n{t[1]}\n{t[3]}\n{t[4]}",
        t[5]: f"{day}\n{t[5]}",                   # two hours later: a new conversation
        t[6]: f"{day}\n{t[5]}\n{t[6]}",
    }
    assert sorted(fake.texts) == sorted(set(t) | set(expected.values()))


def test_an_appended_turn_is_embedded_as_a_full_rebuild_embeds_it(fv, models, monkeypatch):
    starts = []
    real = update.read_docs

    def spy(*args, **kwargs):
        starts.append(kwargs.get("start", 0))
        return real(*args, **kwargs)

    monkeypatch.setattr(update, "read_docs", spy)
    fv.reindex()
    fake = models.instances["fake-hash"]
    for n, (source, at, text) in enumerate(TURNS):
        fake.reset_counts()
        starts.clear()
        fv.episodes.append(text, source=source, at=at)
        fv.reindex()
        if n:  # read from where the index stopped, the turns before taken from the index
            assert starts and all(s > 0 for s in starts), starts
        assert fake.embedded == 2  # the turn alone and with its context; no older turn again
    live = vectors(fv)
    stored = dict(fv.index.connection().execute("SELECT item_id, context FROM docs WHERE kind = 'episode'"))
    fv.reindex(full=True)
    rebuilt = vectors(fv)
    assert len(live) == len(TURNS) and live == rebuilt
    assert stored == dict(fv.index.connection().execute("SELECT item_id, context FROM docs WHERE kind = 'episode'"))


def test_the_turns_before_are_stored_by_id_not_as_text_again(fv, models):
    for source, at, text in TURNS:
        fv.episodes.append(text, source=source, at=at)
    fv.reindex()
    ids = ids_by_text(fv)
    t = [text for _s, _a, text in TURNS]
    conn = fv.index.connection()
    stored = conn.execute("SELECT context FROM docs WHERE item_id = ?", (ids[t[4]],)).fetchone()[0]
    assert json.loads(stored) == [ids[t[1]], ids[t[3]]]
    assert conn.execute("SELECT context FROM docs WHERE item_id = ?", (ids[t[0]],)).fetchone()[0] == "[]"
    assert conn.execute("SELECT context FROM docs WHERE kind = 'fact'").fetchone()[0] is None
    bodies = {i: b for b, i in ids.items()}
    assert resolve_context(stored, TURNS[4][1], bodies) == f"20 November 2026\n{t[1]}\n{t[3]}"
    # a context stored as text (an index written before) is taken as it is
    assert resolve_context("the turn before", TURNS[4][1], bodies) == "the turn before"


def test_an_index_from_before_embeds_its_turns_again_once(fv, models):
    for source, at, text in TURNS:
        fv.episodes.append(text, source=source, at=at)
    fv.reindex()
    conn = fv.index.connection()
    # the index as the release before left it: the turn before as the stored context, hashes of that text
    with conn:
        conn.execute("UPDATE meta SET value = 'v2:meta-browse-procedure' WHERE key = 'fields'")
        conn.execute("UPDATE docs SET hash = X'0000000000000000', context = 'older text' WHERE kind = 'episode'")
    fake = models.instances["fake-hash"]
    fake.reset_counts()
    report = Vault.open(fv.root, embedder_factory=models).reindex()
    assert report.docs_changed == len(TURNS) and fake.embedded == 2 * len(TURNS)
    assert conn.execute("SELECT value FROM meta WHERE key = 'fields'").fetchone()[0] == FIELDS
    fake.reset_counts()
    report = Vault.open(fv.root, embedder_factory=models).reindex()
    assert report.docs_changed == 0 and fake.embedded == 0


def test_the_day_is_written_in_words_whatever_the_locale():
    assert day_of("2023-05-08T13:56:00Z") == "8 May 2023"
    assert day_of("not a time") is None and day_of(None) is None
    assert turn_context(None, []) is None
    assert turn_context("8 May 2023", ["a", "b"]) == "8 May 2023\na\nb"
