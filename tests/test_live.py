"""A process that stays up learns of changes from a file watcher (Vault.follow) and never returns a changed file's
old text: edits (same size, same clock tick included), atomic saves, renames, deletions, whole directories and
``git checkout`` — each recalled at once, with no pause for the watcher — and the race of an event that arrives
after the edit but before the recall. Where the watcher cannot be trusted, recall says so once and checks the
directories instead."""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from memvault import Vault
from memvault.index import changes
from conftest import git


def texts(v: Vault, query: str, **options) -> dict[str, str]:
    return {h.id: h.text for h in v.recall(query, k=10, record_access=False, min_relevance=0, **options)}


def fact_file(v: Vault, key: str) -> Path:
    return v.root / "facts" / f"{key}.md"


def test_a_warm_recall_never_returns_old_text_after_any_kind_of_change(live):
    v = live
    path = fact_file(v, "db/primary")
    for round_ in range(5):  # the watcher gets no pause between a change and the recall after it
        # in place, same size: within one tick of the file system's clock, stat cannot tell it from the old one
        old = path.read_text()
        new_port = f"{6000 + round_:04d}"
        path.write_text(old.replace(old.split("port ")[1][:4], new_port))
        assert texts(v, "primary database port")["db/primary"].endswith(f"port {new_port}.")
    # an editor's atomic save: a temp file renamed over the fact
    tmp = path.with_name(".primary.md.tmp")
    tmp.write_text("The primary database moved to 10.8.0.9 port 5433.\n")
    os.replace(tmp, path)
    assert texts(v, "primary database")["db/primary"] == "The primary database moved to 10.8.0.9 port 5433."
    # a rename: the old key is gone, the new one is found
    os.rename(fact_file(v, "web/front"), v.root / "facts" / "web" / "edge.md")
    found = texts(v, "nginx web front")
    assert "web/front" not in found and "nginx" in found["web/edge"]
    # a deletion
    fact_file(v, "ops/backup").unlink()
    assert "ops/backup" not in texts(v, "nightly backup 03:15")
    # a whole directory moved, then removed
    os.rename(v.root / "facts" / "web", v.root / "facts" / "www")
    found = texts(v, "nginx web front")
    assert "web/edge" not in found and "www/edge" in found
    for f in (v.root / "facts" / "www").iterdir():
        f.unlink()
    (v.root / "facts" / "www").rmdir()
    assert not {k for k in texts(v, "nginx web front") if k.startswith("www/")}
    # a directory created with files inside
    (v.root / "facts" / "dns").mkdir()
    (v.root / "facts" / "dns" / "resolver.md").write_text("The resolver is unbound on 10.8.0.53.\n")
    assert texts(v, "unbound resolver")["dns/resolver"] == "The resolver is unbound on 10.8.0.53."


def test_git_checkout_under_a_warm_process(live):
    v = live
    path = fact_file(v, "db/primary")
    first = path.read_text()
    path.write_text(first.replace("5432", "6432"))
    git(v.root, "commit", "-qam", "port 6432")
    assert texts(v, "primary database port")["db/primary"].endswith("port 6432.")
    git(v.root, "checkout", "-q", "HEAD~1", "--", "facts/db/primary.md")
    assert texts(v, "primary database port")["db/primary"].endswith("port 5432.")
    git(v.root, "checkout", "-q", "-b", "other")
    git(v.root, "rm", "-q", "facts/web/front.md")
    git(v.root, "commit", "-qam", "no front")
    assert "web/front" not in texts(v, "nginx web front")
    git(v.root, "checkout", "-q", "main")
    assert "nginx" in texts(v, "nginx web front")["web/front"]


def test_an_event_that_arrives_after_the_change_is_waited_for(live, monkeypatch):
    """The race: the watcher reads the kernel's events on its own threads, so a change made just before a recall
    may not be marked yet. Slow the watcher down: recall still sees the change, because it waits for its own
    marker, whose event comes after the change's. Without that wait the same recall misses it (checked below: a
    fact written just before is not found, so only the watcher stands between the change and the answer; a fact's
    text itself is read from its file when it is returned)."""
    v = live
    feed = v.index.changes
    real_mark = feed.mark

    def slow_mark(event_type, is_directory, *paths):
        if any("/facts/" in p or "/live/" in p for p in paths):  # not the index's own writes
            time.sleep(0.3)
        real_mark(event_type, is_directory, *paths)

    texts(v, "warm up")  # the index exists (a first recall builds it from every file)
    monkeypatch.setattr(feed, "mark", slow_mark)
    monkeypatch.setattr(feed, "barrier_timeout", 30.0)  # a slow watcher, not a dead one: no fallback
    (v.root / "facts" / "dns").mkdir()
    (v.root / "facts" / "dns" / "resolver.md").write_text("The resolver is unbound on 10.8.0.53.\n")
    result = v.recall("unbound resolver", record_access=False, min_relevance=0)
    assert "dns/resolver" in [h.id for h in result] and not result.warnings

    collect_after = feed.collect_after
    monkeypatch.setattr(feed, "collect_after", lambda seq: collect_after(None))  # what happens without the marker
    (v.root / "facts" / "dns" / "forwarder.md").write_text("The forwarder is dnsmasq on 10.8.0.54.\n")
    assert "dns/forwarder" not in texts(v, "dnsmasq forwarder")
    deadline = time.monotonic() + 30
    while "dns/forwarder" not in texts(v, "dnsmasq forwarder"):  # marked once the slow watcher gets to it
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_a_warm_recall_checks_no_directory(live, monkeypatch):
    """With the watcher, recall's freshness check costs what changed, not a stat of every directory."""
    walked = []
    real_stat = os.stat

    def counting_stat(path, *args, **kwargs):
        walked.append(str(path))
        return real_stat(path, *args, **kwargs)

    texts(live, "primary database port")
    monkeypatch.setattr(os, "stat", counting_stat)
    texts(live, "primary database port", verify=False)
    monkeypatch.undo()
    # the directory check would stat each of facts/db, facts/web, facts/ops (and more in a real vault)
    assert not [p for p in walked if os.path.isdir(p) and p.startswith(str(live.root / "facts") + "/")], walked


def test_a_network_file_system_falls_back_to_the_directory_check_and_says_so_once(vault, models, monkeypatch):
    monkeypatch.setattr(changes, "filesystem_type", lambda path: "nfs4")
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    lines = []
    feed = v.follow(log=lines.append)
    assert not feed.running and "network file system (nfs4)" in feed.reason
    # said once, in the process's log and in stats — never in what an agent reads (a recall's warnings)
    assert [line for line in lines if "file watcher unavailable" in line and "nfs4" in line] == lines[:1]
    assert any("degraded" in line and "nfs4" in line for line in v.stats()["summary"])
    first = v.recall("primary database port", record_access=False)
    assert not [w for w in first.warnings if "watcher" in w]
    fact_file(v, "db/primary").write_text("The primary database moved to port 6543 today.\n")
    second = v.recall("primary database port", record_access=False)
    assert not [w for w in second.warnings if "file watcher" in w] and len(lines) == 1
    assert second[0].text == "The primary database moved to port 6543 today."
    v.close()


def test_the_inotify_watch_limit_falls_back_to_the_directory_check(vault, models, monkeypatch):
    from watchdog.observers import inotify_c

    real = inotify_c.InotifyFD.add_callback
    seen = []

    def limited(self, path, *args, **kwargs):
        seen.append(path)
        if len(seen) > 3:  # the root and a few directories fit, the rest do not
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(inotify_c.InotifyFD, "add_callback", limited)
    v = Vault.open(vault.root, embedder_factory=models)
    v.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    feed = v.follow(log=lambda line: None)
    assert not feed.running and "max_user_watches" in feed.reason
    result = v.recall("primary database port", record_access=False)
    assert not [w for w in result.warnings if "max_user_watches" in w]
    assert any("max_user_watches" in line for line in v.stats()["summary"])
    v.close()


def test_an_overflowed_event_queue_checks_everything(live, monkeypatch):
    from watchdog.events import EventsLostEvent

    v = live
    feed = v.index.changes
    # what watchdog hands the handler after the kernel's queue overflowed and it rebuilt its watches
    feed.mark(EventsLostEvent(str(v.root), is_directory=True).event_type, True, str(v.root))
    marks = feed.collect()
    assert marks.full
    synced = []
    real_sync = v.index.sync
    monkeypatch.setattr(v.index, "sync", lambda *a, **k: synced.append((a, k)) or real_sync(*a, **k))
    feed.requeue(marks)
    v.recall("primary database port", record_access=False)
    assert synced and synced[0][0] == ()  # a full sync: every file checked


def test_a_warm_process_serves_fresh_answers_while_files_change(vault, models):
    """The warm process's vaults follow their files too (what a hook's recall gets)."""
    from memvault.interfaces import warm_client
    from warm_server import serving

    vault.facts.set("db/primary", "The primary database listens on port 5432.", source="user:t")
    with serving(models):
        ask = lambda: {h["id"]: h["text"] for h in warm_client.call(  # noqa: E731
            str(vault.root), "recall", {"query": "primary database port", "record": False})["hits"]}
        assert ask()["db/primary"].endswith("5432.")
        fact_file(vault, "db/primary").write_text("The primary database listens on port 6432.\n")
        assert ask()["db/primary"].endswith("6432.")
        fact_file(vault, "db/primary").unlink()
        assert "db/primary" not in ask()
