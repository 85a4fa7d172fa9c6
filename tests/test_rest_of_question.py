"""Issue 27, the specific over the general: a question's subject (the words most of its best keyword matches hold)
tells those memories apart no more than it tells them from each other, so a fact's or a turn's cosine is read in
part with the rest of the question (``[recall] rest_weight``; memvault.rules.subject). The weight's arithmetic is
held to the simulation the folds chose it with by tests/test_simulation.py; here, the words and what recall reads."""
from __future__ import annotations

import re

import pytest

from memvault import Vault
from memvault.index.search import STOPWORDS
from memvault.rules import subject
from fake_embedder import set_model

from conftest import git

CAROLINE = [f"Caroline {what}." for what in (
    "went hiking with friends in the mountains", "painted a sunrise over the lake", "adopted a rescue dog",
    "researched adoption agencies for weeks", "joined an LGBTQ support group", "gave a talk at her school",
    "plans to study counseling", "ran a charity race")]


def test_the_subject_is_a_word_most_of_the_best_matches_hold():
    texts = CAROLINE + ["Melanie bought a new guitar."] * 3
    assert subject.subject("What did Caroline research?", texts, STOPWORDS) == {"caroline"}
    assert subject.rest("What did Caroline research?", texts, STOPWORDS) == "What did research?"


def test_a_word_few_of_the_twenty_hold_is_no_subject_however_few_were_found():
    # 5 of 5 texts hold "alert", but 5 is below 30 % of the 20 best: a small vault's word, not a shared subject
    texts = ["The alert fires at 90 %."] * 5
    assert subject.subject("what happens if nobody answers an alert", texts, STOPWORDS) == set()
    assert subject.rest("what happens if nobody answers an alert", texts, STOPWORDS) is None
    assert subject.subject("what happens if nobody answers an alert", texts * 2, STOPWORDS) == {"alert"}


def test_forms_of_a_word_are_one_word_and_stop_words_never_the_subject():
    texts = ["Alerts went to the pager of the team."] * 6 + ["The alerting rules of the team."] * 2
    assert subject.stem("alerts") == subject.stem("alert") == "alert"
    assert subject.stem("answered") == subject.stem("answers") == "answer"
    assert subject.stem("runs") == "run" and subject.stem("is") == "is"  # three letters must stay
    assert subject.subject("the alert of the team", texts, STOPWORDS) == {"alert", "team"}
    assert subject.rest("the alert of the team", texts, STOPWORDS) is None  # nothing but stop words left


def test_only_the_first_twenty_matches_are_read():
    texts = ["nothing here"] * 20 + ["Caroline"] * 20
    assert subject.subject("What did Caroline research?", texts, STOPWORDS) == set()


def test_the_rest_keeps_the_question_as_written_less_the_subject():
    texts = ["The database is PostgreSQL and the database runs on db1."] * 8
    rest = subject.rest("How often do we snapshot the Database, and where?", texts, STOPWORDS)
    assert rest == "How often do we snapshot the and where?"


@pytest.fixture
def caroline(vault, models):
    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    for i, text in enumerate(CAROLINE):
        v.facts.set(f"caroline/{i}", text, source="user:admin")
    v.facts.set("melanie/guitar", "Melanie bought a new guitar.", source="user:admin")
    v.reindex()
    return v, models.instances["fake-hash"]


def _weight(v: Vault, value: float) -> Vault:
    toml = v.root / "memvault.toml"
    toml.write_text(re.sub(r"(?m)^rest_weight = .*$", f"rest_weight = {value}", toml.read_text()))
    git(v.root, "commit", "-qm", "rest weight", "--", "memvault.toml")
    fake = v.engine.get()
    return Vault.open(v.root, embedder_factory=lambda config: fake)


def test_recall_reads_each_fact_against_the_rest_and_says_so(caroline):
    v, fake = caroline
    v = _weight(v, 0.45)
    fake.reset_counts()
    hits = v.recall("What did Caroline research?", k=5, record_access=False)
    assert fake.query_calls == 2  # the question, and the question less "Caroline"
    assert hits[0].id == "caroline/3"
    rest = {h.id: h.explain()["parts"]["rest"] for h in hits}
    assert all(isinstance(x, float) for x in rest.values()), rest
    # each fact's cosine with "What did research?" as the index holds its vector
    found = dict(v.index.search_vectors(fake.embed_query("What did research?"), ["fact"], 50))
    docs = v.index.chunk_docs(sorted(found))
    for rowid, cos in found.items():
        if docs[rowid]["id"] in rest:
            assert rest[docs[rowid]["id"]] == pytest.approx(cos, abs=1e-5)


@pytest.mark.parametrize("weight,question", [
    (0.45, "who bought a guitar"),           # a question without a subject
    (0.0, "What did Caroline research?"),    # the weight at zero
])
def test_nothing_more_is_embedded_or_shown_without_a_subject_or_a_weight(caroline, weight, question):
    v, fake = caroline
    v = _weight(v, weight)
    fake.reset_counts()
    hits = v.recall(question, k=5, record_access=False)
    assert fake.query_calls == 1
    assert all(h.explain()["parts"]["rest"] is None for h in hits)


def test_a_scoped_asker_s_subject_is_read_from_what_it_may_read(caroline):
    """The rest is of the texts the asker may read: facts it may not read never shape what it is asked."""
    v, fake = caroline
    toml = v.root / "memvault.toml"
    toml.write_text(re.sub(r"(?m)^rest_weight = .*$", "rest_weight = 0.45", toml.read_text())
                    + '\n[scopes."agent:narrow"]\nread = ["facts/melanie/**"]\nwrite = []\n')
    git(v.root, "commit", "-qm", "scopes", "--", "memvault.toml")
    v = Vault.open(v.root, embedder_factory=lambda config: fake)
    fake.reset_counts()
    v.recall("What did Caroline research?", k=5, record_access=False)
    assert fake.query_calls == 2  # everything readable: "Caroline" is the subject
    fake.reset_counts()
    hits = v.recall("What did Caroline research?", k=5, record_access=False, source="agent:narrow")
    assert fake.query_calls == 1  # "Caroline" is in no fact it may read: no subject, no second embedding
    assert {h.id for h in hits} <= {"melanie/guitar"}


def test_keyword_mode_embeds_nothing_for_the_rest(caroline):
    v, fake = caroline
    v = _weight(v, 0.45)
    fake.reset_counts()
    hits = v.recall("What did Caroline research?", k=5, record_access=False, mode="keyword")
    assert fake.query_calls == 0 and hits
    assert all(h.explain()["parts"]["rest"] is None for h in hits)


def test_the_rest_read_through_a_warm_process_client_is_the_same(caroline):
    """The CLI's embedder is often the warm process's client (memvault.models.daemon.RemoteEmbedder): its query
    vector is an ``array('f')``, not numpy, and it has no ``query_job``. The rest is read from it the same."""
    import array

    v, fake = caroline
    v = _weight(v, 0.45)
    expected = [(h.id, round(h.score, 6), h.explain()["parts"]["rest"])
                for h in v.recall("What did Caroline research?", k=5, record_access=False)]

    class Client:
        identity = fake.identity

        def __getattr__(self, name):
            if name == "query_job":
                raise AttributeError(name)
            return getattr(fake, name)

        def embed_query(self, text):
            return array.array("f", [float(x) for x in fake.embed_query(text)])

    client = Client()
    v = Vault.open(v.root, embedder_factory=lambda config: client)
    fake.reset_counts()
    got = [(h.id, round(h.score, 6), h.explain()["parts"]["rest"])
           for h in v.recall("What did Caroline research?", k=5, record_access=False)]
    assert fake.query_calls == 2
    assert [g[0] for g in got] == [e[0] for e in expected]
    for (_, score, rest), (_, score2, rest2) in zip(got, expected):
        assert score == pytest.approx(score2, abs=1e-5) and rest == pytest.approx(rest2, abs=1e-5)
