"""A write costs what it changes: it stats the file it wrote, not the vault, and what it wrote is searchable at once."""
from __future__ import annotations

import os

import pytest

from memvault import Vault
from conftest import git
from fake_embedder import set_model


@pytest.fixture
def big(vault, models):
    set_model(vault.root, "fake-hash")
    for i in range(300):
        path = vault.root / "facts" / f"host{i // 50}" / f"f{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"Host web{i} serves port {8000 + i} behind the load balancer.\n")
    git(vault.root, "add", "-A")
    git(vault.root, "commit", "-qm", "many facts")
    v = Vault.open(vault.root, embedder_factory=models)
    v.reindex()
    return v


def count_file_system_calls(monkeypatch, root):
    """Count stat/lstat/scandir calls on paths inside the vault's memory folders."""
    calls = {"stat": [], "scandir": []}
    real_stat, real_lstat, real_scandir = os.stat, os.lstat, os.scandir
    areas = tuple(str(root / a) for a in ("facts", "episodes", "procedures"))

    def inside(path) -> bool:
        return isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(areas)

    def stat(path, *a, **k):
        if inside(path):
            calls["stat"].append(os.fspath(path))
        return real_stat(path, *a, **k)

    def lstat(path, *a, **k):
        if inside(path):
            calls["stat"].append(os.fspath(path))
        return real_lstat(path, *a, **k)

    def scandir(path=".", *a, **k):
        if inside(path):
            calls["scandir"].append(os.fspath(path))
        return real_scandir(path, *a, **k)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "scandir", scandir)
    return calls


def test_a_one_file_write_stats_that_file_only(big, monkeypatch):
    calls = count_file_system_calls(monkeypatch, big.root)
    big.facts.set("host3/f170", "Host web170 now serves port 9170 behind the load balancer.")
    target = str(big.root / "facts/host3/f170.md")
    assert calls["scandir"] == []  # no folder of the vault was walked
    # the file itself, and the folders on its way (resolving the key's path): nothing else of the 300 facts
    allowed = {target, str(big.root / "facts/host3"), str(big.root / "facts")}
    assert target in calls["stat"] and set(calls["stat"]) <= allowed, calls["stat"]
    rows = big.index.connection().execute("SELECT text FROM chunk_texts WHERE text LIKE '%9170%'").fetchall()
    assert rows  # and the index has it


def test_the_duplicate_check_reads_no_fact_file(big, monkeypatch):
    import builtins
    import io

    opened = []

    def tracking(real):
        def open_(path, *a, **k):
            if isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith(".md"):
                opened.append(os.fspath(path))
            return real(path, *a, **k)
        return open_

    monkeypatch.setattr(os, "open", tracking(os.open))
    monkeypatch.setattr(io, "open", tracking(io.open))
    monkeypatch.setattr(builtins, "open", tracking(builtins.open))
    similar = big.facts.similar("host9/new", "Host web7 serves port 8007 behind the load balancer.")
    assert opened == []  # compared with the index's rows, not re-read
    assert [m["key"] for m in similar] == ["host0/f7"] and similar[0]["kind"] == "duplicate"


def test_an_episode_appended_through_the_cli_is_returned_by_the_next_keyword_recall(big, invoke):
    r = invoke("episode", "add", "The migration started on host web3.", "--source", "agent:ops")
    assert r.exit_code == 0, r.output
    # the index has this month's file and its directory check is fresh; the next append changes no directory
    assert invoke("recall", "migration started", "--mode", "keyword", "--json").exit_code == 0
    r = invoke("episode", "add", "The okapi migration finished on host web3.", "--source", "agent:ops")
    assert r.exit_code == 0, r.output
    # "okapi" is in no other memory: no hit's file to re-check, only the append itself can have told the index
    r = invoke("recall", "okapi", "--mode", "keyword", "--json", "-k", "1")
    assert r.exit_code == 0, r.output
    import json

    hits = json.loads(r.stdout)["hits"]
    assert hits and hits[0]["kind"] == "episode" and "okapi" in hits[0]["text"]


def test_appending_to_a_month_file_reads_only_the_new_line(big, monkeypatch):
    for i in range(20):
        big.episodes.append(f"Routine check {i} on host web{i}.", source="user:ops", at="2026-11-20T10:00:00Z")
    parsed = []
    from memvault.stores import episodes

    real = episodes.parse_line

    def counting(line, *a, **k):
        parsed.append(line)
        return real(line, *a, **k)

    monkeypatch.setattr(episodes, "parse_line", counting)
    big.episodes.append("The walrus alert fired on host web9.", source="user:ops", at="2026-11-20T11:00:00Z")
    # one parse when the line is made? no: make() renders; the index reads back only the appended line
    assert len(parsed) == 1 and "walrus" in parsed[0]
    assert big.recall("walrus alert", mode="keyword", k=1)[0].kind == "episode"
