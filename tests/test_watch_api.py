"""The file watcher stands on watchdog's public API only (a private attribute is a patch release away from breaking a
fresh install: watchdog 7.1.1 creates ``InotifyObserver._inotify_fd`` only at the first ``schedule()``), handles lost
events with what that API offers (``EventsLostEvent``) plus a periodic full check, and keeps its state for the
host's eyes — the log and ``stats`` / ``agent status`` — out of what an agent reads."""
from __future__ import annotations

import ast
import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest

from memvault import Vault
from memvault.index import changes
from memvault.interfaces.watch import Watcher
from fake_embedder import set_model

PACKAGE = Path(__file__).resolve().parents[1] / "memvault"


def poll(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
    return result


class PublicOnly:
    """An observer that lends out only its public names: reading a private one fails, and is recorded."""

    private_reads: list[str] = []
    real_class = None

    def __init__(self, *args, **kwargs):
        object.__setattr__(self, "_real", PublicOnly.real_class(*args, **kwargs))

    def __getattribute__(self, name):
        if name.startswith("_") and not name.startswith("__"):
            PublicOnly.private_reads.append(name)
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_real"), name)


@pytest.fixture
def public_only(monkeypatch):
    import watchdog.observers.inotify as inotify

    PublicOnly.private_reads = []
    PublicOnly.real_class = inotify.InotifyObserver
    monkeypatch.setattr(inotify, "InotifyObserver", PublicOnly)
    yield PublicOnly


def _modules_importing_watchdog() -> list[Path]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "watchdog" or n.startswith("watchdog.") for n in names):
                found.append(path)
                break
    return found


def test_no_private_attribute_of_watchdog_is_read():
    """In every module that imports watchdog: no ``x._name`` on anything but the module's own ``self``/``cls``, and
    no ``getattr``/``hasattr``/``setattr`` with a private name (the form the 7.1.1 breakage took)."""
    modules = _modules_importing_watchdog()
    assert PACKAGE / "index" / "changes.py" in modules
    bad = []
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_")):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.func.id}({node.args[1].value!r})")
    assert not bad, bad


def test_the_ast_check_catches_the_old_private_read(tmp_path):
    """The check above is not vacuous: the code that broke on watchdog 7.1.1 is flagged by the same rules."""
    old = "fd = getattr(observer, '_inotify_fd', None)\nfd2 = observer._inotify_fd\n"
    calls = [n for n in ast.walk(ast.parse(old)) if isinstance(n, ast.Call) and n.args[1].value.startswith("_")]
    attrs = [n for n in ast.walk(ast.parse(old)) if isinstance(n, ast.Attribute) and n.attr.startswith("_")]
    assert calls and attrs


def test_the_feed_runs_live_on_an_observer_that_lends_only_public_names(vault, public_only):
    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    lines = []
    feed = vault.follow(log=lines.append)
    try:
        assert feed.running, feed.reason
        assert not lines  # nothing degraded, nothing said
        path = vault.root / "facts" / "db" / "primary.md"
        tmp = path.with_name(".primary.md.tmp")
        tmp.write_text("The primary database moved to port 6432.\n")
        os.replace(tmp, path)
        marks = feed.collect()
        assert marks is not None and "facts/db/primary.md" in marks.files
        assert public_only.private_reads == []
    finally:
        vault.close()


def test_an_editors_atomic_save_reaches_the_index_through_the_watcher_within_10_s(vault, models, public_only):
    """``memvault watch`` with no periodic rescan due: only the file event can bring the save in, and it does so on
    an observer that lends out nothing private."""
    set_model(vault.root, "fake-hash")
    v = Vault.open(vault.root, embedder_factory=models)
    path = v.facts.dir / "db" / "primary.md"
    path.parent.mkdir(parents=True)
    path.write_text("The primary database listens on 10.8.0.4 port 5432.\n")
    lines: list[str] = []
    watcher = Watcher(v, debounce=0.2, rescan_interval=3600, log=lines.append)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    reader = Vault.open(vault.root)
    try:
        poll(watcher.ready.is_set, 30, "the watcher ready")
        assert watcher.feed.running, lines
        tmp = path.with_name(".primary.md.tmp")
        tmp.write_text("The primary database moved to 10.8.0.9 port 6432.\n")
        os.replace(tmp, path)
        saved = time.monotonic()

        def indexed():
            rows = reader.index.connection().execute(
                "SELECT body FROM docs WHERE kind = 'fact' AND item_id = 'db/primary'").fetchall()
            return rows and "10.8.0.9" in rows[0][0]

        poll(indexed, 10, "the atomic save in the index")
        print(f"atomic save indexed in {time.monotonic() - saved:.2f} s")
        assert watcher.rescans == 1 and watcher.batches >= 1  # the start-up check only: the event did it
        assert public_only.private_reads == [] and not [line for line in lines if line.startswith("warning")]
    finally:
        stop.set()
        thread.join(10)
        reader.index.close()


def test_lost_events_ask_for_a_full_check_and_are_said_in_the_log_and_stats_only(vault):
    from watchdog.events import EventsLostEvent

    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    lines = []
    feed = vault.follow(log=lines.append)
    try:
        assert feed.running
        lost = EventsLostEvent(str(vault.root), is_directory=True)
        feed.mark(lost.event_type, lost.is_directory, str(vault.root))  # as watchdog's handler hands it over
        marks = feed.collect()
        assert marks.full
        assert [line for line in lines if "events were lost" in line]
        summary = vault.stats()["summary"]
        assert any("events lost 1 times" in line for line in summary), summary
        result = vault.recall("primary database port", record_access=False, min_relevance=0)
        assert not [w for w in result.warnings if "lost" in w or "watcher" in w]
    finally:
        vault.close()


def test_a_directory_the_watch_limit_leaves_unwatched_degrades_the_feed(vault, monkeypatch):
    """watchdog reports a directory it could not watch once running only in its log: the feed hears it there,
    stops trusting itself, and says so in the log and in stats (recall then checks the directories)."""
    from watchdog.observers import inotify_c

    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    lines = []
    feed = vault.follow(log=lines.append)
    try:
        assert feed.running

        def full(self, *args, **kwargs):
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

        monkeypatch.setattr(inotify_c.InotifyFD, "add_callback", full)  # the kernel's answer, from here on
        (vault.root / "facts" / "dns").mkdir()
        poll(lambda: feed.reason, 10, "the feed degraded")
        assert "max_user_watches" in feed.reason and not feed.running
        assert feed.collect() is None  # recall falls back to checking the directories
        assert [line for line in lines if "file watcher unavailable" in line] == lines[:1]
        poll(lambda: any("degraded" in line and "max_user_watches" in line for line in vault.stats()["summary"]),
             10, "stats naming the degraded watcher")  # written just after the reason is set
    finally:
        vault.close()


def test_the_periodic_check_asks_for_a_full_check_and_is_recorded(vault):
    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    feed = vault.follow(log=lambda line: None)
    try:
        assert feed.running
        first = feed.collect()
        assert first is not None and not first.full  # not due yet
        feed.check_interval = 1.0  # the next collect (a publish with fsyncs, a barrier) is well within it
        time.sleep(1.1)
        due = feed.collect()
        assert due is not None and due.full and feed.last_check is not None
        again = feed.collect()
        assert again is not None and not again.full  # the next one is an interval away
        states = changes.feed_states(vault.state_dir)
        mine = [s for s in states if s["pid"] == os.getpid()]
        assert mine and mine[0]["running"] and mine[0]["last_check"] == pytest.approx(feed.last_check)
        assert any(line.startswith(f"file watcher: pid {os.getpid()}") and "last full check" in line
                   for line in vault.stats()["summary"])
    finally:
        vault.close()
    assert not [s for s in changes.feed_states(vault.state_dir) if s["pid"] == os.getpid()]  # gone with the feed


def test_a_dead_process_watcher_state_is_not_shown(vault):
    feeds = vault.state_dir / changes.FEEDS_DIR
    feeds.mkdir(parents=True, exist_ok=True)
    (feeds / "999999999-1.json").write_text(json.dumps({"pid": 999999999, "running": True}))
    assert changes.feed_states(vault.state_dir) == []


def test_agent_status_shows_the_watchers_of_the_vault(vault, invoke):
    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    feed = vault.follow(log=lambda line: None)
    try:
        assert feed.running
        result = invoke("agent", "status")
        assert result.exit_code == 0, result.output
        assert f"file watcher: pid {os.getpid()}" in result.output and "live" in result.output
    finally:
        vault.close()
