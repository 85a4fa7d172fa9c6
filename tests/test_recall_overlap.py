"""A warm recall overlaps its steps: the query's vector is computed from the start in a worker thread, the watcher's
barrier runs while the words are searched (and the search runs again when the watcher had something), what the
words found is read while the vector is computed, and the vector scan runs where nobody waits for it. The answers
stay those of the steps one after another."""
from __future__ import annotations

import threading
import time

import pytest

from memvault import Vault
from memvault.core import candidates
from memvault.core.candidates import QueryVector
from memvault.index import Index
from memvault.index.update import SyncReport


@pytest.fixture
def warm(live):
    """conftest's live vault after a first recall (the index built, the process warm)."""
    live.recall("warm up", record_access=False)
    return live


def ids(v: Vault, query: str) -> list[str]:
    return [h.id for h in v.recall(query, k=10, record_access=False, min_relevance=0)]


def test_the_words_are_searched_before_the_watcher_is_waited_for(warm, monkeypatch):
    """The watcher's thread takes a millisecond or two to see recall's marker: the keyword search runs meanwhile."""
    order: list[str] = []
    feed = warm.index.changes
    collect_after, words = feed.collect_after, Index.search_keywords
    monkeypatch.setattr(feed, "collect_after", lambda seq: (order.append("watcher"), collect_after(seq))[1])
    monkeypatch.setattr(Index, "search_keywords", lambda self, *a, **kw: (order.append("words"), words(self, *a, **kw))[1])
    assert ids(warm, "primary database port")[0] == "db/primary"
    assert order == ["words", "watcher"]


def test_a_change_the_watcher_reports_late_is_searched_again(warm, monkeypatch):
    """The watcher had marked a file while the words were searched: the index is brought up to date and the search
    runs again, so the answer holds the change; with nothing marked, it runs once."""
    searches = []
    gather = candidates.gather
    monkeypatch.setattr("memvault.core.recall.gather", lambda *a, **kw: (searches.append(1), gather(*a, **kw))[1])
    ids(warm, "unbound resolver")
    assert len(searches) == 1

    feed = warm.index.changes
    real_mark = feed.mark

    def slow_mark(event_type, is_directory, *paths):  # the marker is seen only after the file's own event
        if any("/facts/" in p for p in paths):
            time.sleep(0.2)
        real_mark(event_type, is_directory, *paths)

    monkeypatch.setattr(feed, "mark", slow_mark)
    (warm.root / "facts" / "dns").mkdir()
    (warm.root / "facts" / "dns" / "resolver.md").write_text("The resolver is unbound on 10.8.0.53.\n")
    searches.clear()
    assert ids(warm, "unbound resolver")[0] == "dns/resolver"
    assert len(searches) == 2


def test_a_sync_that_changed_nothing_is_not_an_alteration():
    assert not SyncReport(files_seen=10).altered
    for field in ("files_changed", "files_removed", "docs_added", "docs_changed", "docs_removed", "metadata_only",
                  "chunks_embedded"):
        assert SyncReport(**{field: 1}).altered, field


# ------------------------------------------------------------------------------------------------ QueryVector
def test_the_caller_that_waits_runs_the_scan_itself():
    """When the caller is already waiting for the vector, it scans: no second thread to wake up."""
    release = threading.Event()
    where = []

    def embed(text):
        release.wait(5)
        return [1.0, 0.0]

    qv = QueryVector(embed, "q")
    qv.bind(lambda vector: (where.append(threading.current_thread()), [(1, vector[0])])[1])
    threading.Timer(0.05, release.set).start()
    assert qv.vector() == [1.0, 0.0]
    assert qv.scanned() == [(1, 1.0)]
    assert where == [threading.current_thread()]


def test_the_worker_scans_while_the_caller_is_busy():
    """The caller still searching words when the vector is known: the worker thread scans at once."""
    scanned = threading.Event()
    where = []

    def scan(vector):
        where.append(threading.current_thread())
        scanned.set()
        return [(7, 0.5)]

    qv = QueryVector(lambda text: [0.5], "q")
    qv.bind(scan)
    assert scanned.wait(5), "the scan did not run while the caller was busy"
    assert qv.scanned() == [(7, 0.5)] and where != [threading.current_thread()]


def test_a_vector_known_before_the_scan_is_bound_is_scanned_by_the_worker():
    qv = QueryVector(lambda text: [0.25], "q")
    deadline = time.monotonic() + 5
    while not qv._known.is_set():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    where = []
    qv.bind(lambda vector: (where.append(threading.current_thread()), [(3, vector[0])])[1])
    assert qv.scanned() == [(3, 0.25)] and where and where != [threading.current_thread()]


def test_no_scan_bound_gives_none_and_an_embedding_error_reaches_the_caller():
    qv = QueryVector(lambda text: [0.1], "q")
    qv.bind(None)
    assert qv.scanned() is None and not qv.scanning

    def broken(text):
        raise RuntimeError("the model fell over")

    qv = QueryVector(broken, "q")
    qv.bind(lambda vector: [(1, 1.0)])
    with pytest.raises(RuntimeError, match="fell over"):
        qv.vector()
    with pytest.raises(RuntimeError, match="fell over"):
        qv.scanned()


def test_a_link_swapped_under_a_reader_is_followed(tmp_path):
    """The index remembers the generation its link names while the link is the same file; a swap (a new link renamed
    over it, as a rebuild does) is seen at the next look."""
    state = tmp_path / "state"
    state.mkdir()
    for name in ("index-1.db", "index-2.db"):
        (state / name).write_bytes(b"")
    (state / "index.db").symlink_to("index-1.db")
    index = Index(state, sources=None)  # the link alone is read
    assert index.current_target() == state / "index-1.db"
    (state / "next").symlink_to("index-2.db")
    (state / "next").replace(state / "index.db")
    assert index.current_target() == state / "index-2.db"
    (state / "index-2.db").unlink()
    assert index.current_target() is None


def test_a_process_ending_while_the_query_embeds_does_not_wait_for_the_model():
    """An error or an interrupt ends a process mid-recall: its threads are daemons, as the per-recall ones were."""
    import subprocess
    import sys

    code = ("import time; from memvault.core.candidates import QueryVector; "
            "QueryVector(lambda text: time.sleep(60), 'q'); time.sleep(0.2); print('leaving')")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0 and done.stdout.strip() == "leaving", done.stderr
    assert time.monotonic() - started < 30


def test_a_loaded_model_starts_on_the_query_before_the_asker_is_checked(warm, monkeypatch):
    """Vault.recall hands the query to the loaded model first, then checks who asks; recall takes that vector (one
    embedding, not two). A time phrase is not searched: the head start embeds the question without it, once (it
    embedded the whole question, then recall the rest: two vectors, 1.37x on LoCoMo turns, bench/bench_time.py)."""
    embedder = warm.engine.get()
    jobs: list[str] = []
    real_job, real_source = type(embedder).query_job, type(warm)._source
    monkeypatch.setattr(type(embedder), "query_job", lambda self, text: (jobs.append(text), real_job(self, text))[1])
    monkeypatch.setattr(type(warm), "_source",
                        lambda self, source: (jobs.append("checked"), real_source(self, source))[1])
    before = embedder.query_calls
    assert ids(warm, "primary database port")[0] == "db/primary"
    assert jobs[:2] == ["primary database port", "checked"] and jobs.count("primary database port") == 1
    assert embedder.query_calls == before + 1
    jobs.clear()
    before = embedder.query_calls
    warm.recall("database port yesterday", record_access=False)
    assert jobs[:2] == ["database port", "checked"]
    assert [j for j in jobs if j != "checked"] == ["database port"] and embedder.query_calls == before + 1
    jobs.clear()
    warm.recall("database port", since="7d", record_access=False)  # since/until: the question is searched whole
    assert [j for j in jobs if j != "checked"] == ["database port"]
    jobs.clear()
    warm.recall("database port yesterday", time_in_query=False, record_access=False)
    assert [j for j in jobs if j != "checked"] == ["database port yesterday"]
    jobs.clear()
    warm.recall("primary database port", mode="keyword", record_access=False)
    assert set(jobs) == {"checked"}


def test_an_embedder_written_before_query_job_still_recalls_in_meaning(vault, models):
    """``query_job`` is optional in the Embedder protocol: an embedder a caller wrote with only the older methods is
    embedded whole in the worker, and the recall is the same."""

    class Older:
        """The protocol as it was: identity, embed_documents, embed_query, count_tokens, split."""

        def __init__(self, inner):
            self._inner = inner
            self.identity = inner.identity

        def embed_documents(self, texts, batch_size=32):
            return self._inner.embed_documents(texts, batch_size)

        def embed_query(self, text):
            return self._inner.embed_query(text)

        def count_tokens(self, text):
            return self._inner.count_tokens(text)

        def split(self, text, max_tokens=None, overlap=32):
            return self._inner.split(text, max_tokens, overlap)

    v = Vault.open(vault.root, embedder_factory=lambda config: Older(models(config)))
    v.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    v.facts.set("web/front", "The web front is nginx on web1.", source="user:t")
    first = v.recall("which port does the database use", record_access=False)
    assert not hasattr(v.engine.get(), "query_job") and first.mode == "hybrid"
    again = v.recall("which port does the database use", record_access=False)  # the model loaded: a head start
    assert [h.id for h in again] == [h.id for h in first] and again[0].id == "db/primary"
