"""A file watcher marks an episode file each time a line is appended, and the index re-reads what it marks
(``reread``: two same-size writes within one tick of the file system's clock look the same to ``stat``). When the
writer has already indexed its own line the file's row matches it: the month file was read again from byte 0 (100k
lines: 3.8 s on the recall after every MCP log_episode, 7.3 s for the web view's refresher). An episode file whose
size, mtime, inode and last bytes are as indexed is not read again; a fact marked so still is."""
from __future__ import annotations

import os


def test_an_episode_file_as_indexed_is_not_read_again_when_marked(vault):
    for i in range(3):
        vault.episodes.append(f"line {i} of the month", source="user:ops")
    vault.reindex()
    month = next(vault.episodes.dir.rglob("*.jsonl"))
    report = vault.index.sync([month], reread=True)
    assert report.files_changed == 0 and report.docs_added == report.docs_changed == 0
    with month.open("a") as f:  # another process's append, not indexed yet
        f.write('{"id": "e-other", "created_at": "2026-12-01T10:00:00Z", "source": "user:ops", "text": "more"}\n')
    report = vault.index.sync([month], reread=True)
    assert report.files_changed == 1 and report.docs_added == 1


def test_a_same_size_rewrite_of_an_episode_file_is_read_again(vault):
    vault.episodes.append("the deploy of version 1.2.3 failed", source="user:ops")
    vault.reindex()
    month = next(vault.episodes.dir.rglob("*.jsonl"))
    stat = month.stat()
    month.write_text(month.read_text().replace("1.2.3", "4.5.6"))
    os.utime(month, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same tick of the clock
    report = vault.index.sync([month], reread=True)
    assert report.files_changed == 1
    assert vault.recall("4.5.6", record_access=False, mode="keyword")


def test_a_fact_marked_is_read_again_whatever_stat_says(vault):
    vault.facts.set("db/port", "The database listens on 5432.", source="user:ops")
    vault.reindex()
    path = vault.facts.path_for("db/port")
    stat = path.stat()
    path.write_text(path.read_text().replace("5432", "6543"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert vault.index.sync([path], reread=True).files_changed == 1
