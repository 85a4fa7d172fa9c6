"""memvault watch: edits made behind memvault's back reach the index in a few debounced batches."""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from memvault import Vault
from memvault.rules.errors import SearchIndexError
from memvault.interfaces.watch import Watcher, WatcherRunning, is_relevant, watching
from fake_embedder import set_model



@pytest.fixture
def wv(vault, models):
    """A vault on the fake model with one fact and no index yet (the watcher's first batch builds it)."""
    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    path = v.facts.dir / "db" / "primary.md"
    path.parent.mkdir(parents=True)
    path.write_text("---\ncategory: database\n---\nThe primary database listens on 10.8.0.4 port 5432.\n")
    return v


@pytest.fixture
def start_watcher():
    """start_watcher(vault, **options) -> a Watcher running in a thread, ready; stopped at teardown."""
    running: list[tuple[Watcher, threading.Event, threading.Thread]] = []

    def start(vault: Vault, **options) -> Watcher:
        lines: list[str] = []
        watcher = Watcher(vault, debounce=options.pop("debounce", 0.2), log=lines.append, **options)
        watcher.lines = lines
        watcher.error = None
        stop = threading.Event()

        def target():
            try:
                watcher.run(stop)
            except BaseException as exc:  # surfaced by the assertion below
                watcher.error = exc

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        running.append((watcher, stop, thread))
        poll(lambda: watcher.ready.is_set() or watcher.error, what="watcher ready")
        assert watcher.error is None, watcher.error
        return watcher

    yield start
    for watcher, stop, thread in running:
        stop.set()
        thread.join(10)
        assert not thread.is_alive()


def poll(check, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class Reader:
    """Reads the index from the test thread through its own Vault (own SQLite connection)."""

    def __init__(self, root):
        self.vault = Vault.open(root)

    def rows(self, sql: str, *params):
        try:
            return self.vault.index.connection().execute(sql, params).fetchall()
        except SearchIndexError:
            return []

    def body(self, key: str) -> str | None:
        found = self.rows("SELECT body FROM docs WHERE kind = 'fact' AND item_id = ?", key)
        return found[0][0] if found else None

    def count(self, prefix: str) -> int:
        return self.rows("SELECT COUNT(*) FROM docs WHERE kind = 'fact' AND item_id LIKE ?", prefix + "%")[0][0]


@pytest.fixture
def reader(wv):
    r = Reader(wv.root)
    yield r
    r.vault.index.close()


def test_relevance_filter(tmp_path):
    root = tmp_path
    assert is_relevant(root, str(root / "facts" / "db" / "primary.md"))
    assert is_relevant(root, str(root / "procedures" / "x.sh"))
    for ignored in (".git/index", ".git/memvault/root/index.db", ".memvault/index.db", ".memvault-live-1-a/1-a-1",
                    "facts/db/.primary.md.swp", "facts/db/primary.md~",
                    "facts/db/.primary.md.tmp", "facts/db/4913", "facts/.#primary.md", ""):
        assert not is_relevant(root, str(root / ignored) if ignored else ""), ignored
    assert not is_relevant(root, str(root))
    assert not is_relevant(root, "/elsewhere/facts/x.md")


def test_first_batch_builds_the_index_and_an_atomic_save_is_indexed(wv, reader, start_watcher):
    watcher = start_watcher(wv)
    assert wv.index.exists() and "database" in reader.body("db/primary")
    assert (wv.state_dir / "watch.pid").read_text().split()[0] == str(os.getpid())
    assert watching(wv)

    # An editor's atomic save: a temp file beside the target, renamed over it.
    tmp = wv.facts.dir / "db" / ".primary.md.tmp"
    tmp.write_text("---\ncategory: database\n---\nThe primary database moved to 10.8.0.9 port 6432.\n")
    os.replace(tmp, wv.facts.dir / "db" / "primary.md")
    poll(lambda: "10.8.0.9" in (reader.body("db/primary") or ""), what="the saved text in the index")
    assert watcher.batches >= 1
    # embedded with the (fake) model, not only keywords (the vector is committed after the text: wait for it)
    poll(lambda: reader.rows("SELECT COUNT(*) FROM chunks WHERE model IS NOT NULL")[0][0] >= 1,
         what="the saved text's vector")
    assert any("1 files changed" in line for line in watcher.lines)


def test_a_storm_of_a_thousand_files_is_a_few_batches(wv, reader, start_watcher, models):
    watcher = start_watcher(wv)
    before = watcher.batches
    storm = wv.facts.dir / "storm"
    storm.mkdir()
    for i in range(1000):
        (storm / f"n{i:04d}.md").write_text(f"Storm fact number {i} about host web{i}.\n")
    poll(lambda: reader.count("storm/") == 1000, timeout=60, what="1,000 facts indexed")
    time.sleep(0.5)  # let a trailing batch (events that arrived during the last sync) show up
    assert watcher.batches - before <= 3, watcher.lines
    assert models.loads == 1  # the model stays loaded across batches
    print(f"storm: {watcher.batches - before} batches for 1,000 files, {watcher.events} events")


def test_deleting_a_folder_removes_its_facts(wv, reader, start_watcher):
    web = wv.facts.dir / "web"
    web.mkdir()
    for name in ("haproxy", "nginx", "tls"):
        (web / f"{name}.md").write_text(f"The {name} setup for the web tier.\n")
    start_watcher(wv)
    assert reader.count("web/") == 3
    shutil.rmtree(web)
    poll(lambda: reader.count("web/") == 0, what="web/* removed from the index")
    assert reader.body("db/primary") is not None


def test_a_second_watcher_is_refused_and_names_the_first(wv, start_watcher, models):
    start_watcher(wv)
    second = Watcher(Vault.open(wv.root, embedder_factory=models), debounce=0.2, log=lambda line: None)
    with pytest.raises(WatcherRunning, match=rf"pid {os.getpid()} on \S+ since 20"):
        second.run(threading.Event())


def test_the_lock_is_released_when_the_watcher_stops(wv):
    watcher = Watcher(wv, debounce=0.2, log=lambda line: None)
    stop = threading.Event()
    stop.set()
    watcher.run(stop)  # start-up sync, then stops at once
    assert not (wv.state_dir / "watch.pid").exists() and not watching(wv)
    Watcher(wv, log=lambda line: None).run(stop)  # the lock is free again


def test_a_broken_file_or_a_failing_batch_does_not_stop_the_watcher(wv, reader, start_watcher, monkeypatch):
    watcher = start_watcher(wv)
    (wv.facts.dir / "bad.md").write_text("---\nimportance: high\n---\nBroken importance.\n")
    poll(lambda: any("facts/bad.md" in line and "importance" in line for line in watcher.lines),
         what="the broken file logged")

    real_sync = wv.index.sync
    calls = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("disk on fire")
        return real_sync(*args, **kwargs)

    monkeypatch.setattr(wv.index, "sync", failing_once)
    (wv.facts.dir / "good.md").write_text("A good fact about the backup window at 03:15.\n")
    poll(lambda: any("disk on fire" in line for line in watcher.lines), what="the failed batch logged")
    # The next change (or the rescan) retries; the good fact gets in.
    (wv.facts.dir / "later.md").write_text("Another fact, written after the failure.\n")
    poll(lambda: reader.body("good") and reader.body("later"), what="facts indexed after the failure")


def test_unavailable_model_warns_once_and_indexes_keywords(wv, reader, start_watcher, models):
    models.unavailable.add("fake-hash")
    watcher = start_watcher(wv, rescan_interval=0.3)
    for name in ("one", "two"):
        (wv.facts.dir / f"{name}.md").write_text(f"Fact {name} for keyword search.\n")
        poll(lambda name=name: reader.body(name), what=f"{name} indexed")
    poll(lambda: watcher.rescans >= 2, what="a couple of rescans")
    warnings = [line for line in watcher.lines if line.startswith("warning:")]
    assert len(warnings) == 1 and "unavailable" in warnings[0], watcher.lines
    assert models.loads == 1 and watcher.rescans >= 2
    assert reader.rows("SELECT COUNT(*) FROM chunks WHERE model IS NOT NULL")[0][0] == 0
